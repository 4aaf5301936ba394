"""Hostile logins through the broker's SASL session (fastkwire.broker._sasl), no socket.

    python3 fuzz/hostile_sasl.py --loop 5000 --seed 1

Each input is one connection's login: maybe an ApiVersions or another request first, a
SaslHandshake (v0 or v1; an enabled mechanism or not), then the tokens of a live client
(fastkwire.sasl's PLAIN or SCRAM, for a known user or not, with the right password or
not) in SaslAuthenticate requests (v0-2) or bare after a v0 handshake. Any frame or token
may be mutated by fuzz/differential.py's mutations. The contract, checked for each frame:
- `receive` returns PASS, an answer's bytes or a Close (never raises);
- PASS only for an ApiVersions request before the handshake;
- an answer (or a Close's answer) is a whole frame: with a header, it carries the request's
  correlation id and decodes as SaslHandshake's or SaslAuthenticate's response at its
  version; a bare token answers a bare token;
- a login completes only for a known user whose password the client had: never with a
  wrong password or an unknown user, whatever the mutations.
Anything else is printed with its input and counted; the exit status is 1 if any.
"""

import argparse
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential as D  # noqa: E402

import fastkwire  # noqa: E402
from fastkwire.broker._exchange import Close  # noqa: E402
from fastkwire.broker._sasl import PASS, SaslSession, Users  # noqa: E402
from fastkwire.proxy._frames import request_header  # noqa: E402
from fastkwire.sasl import Plain, Scram, SaslAuthError  # noqa: E402

USERS = {"alice": "alice-pw", "b=o,b": "bob-pw"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_STEPS = 6


class Finding(Exception):
    pass


def _checked(session, frame, raw):
    try:
        out = session.receive(frame)
    except Exception as e:  # noqa: BLE001 - any exception is the finding
        raise Finding(f"receive raised {type(e).__name__}: {e}") from None
    header = None if raw else request_header(frame)
    if out is PASS:
        if header is None or header.api_key != 18 or session.state != "handshake":
            raise Finding("PASS for a frame that is not an ApiVersions before the handshake")
        return out
    answer = out.answer if isinstance(out, Close) else out
    if not isinstance(out, (bytes, Close)):
        raise Finding(f"an outcome of type {type(out).__name__}")
    if answer is None:
        return out
    if int.from_bytes(answer[:4], "big") != len(answer) - 4:
        raise Finding("an answer whose size prefix is wrong")
    if raw:
        return out
    if header is None:
        raise Finding("an answer to a frame without a header")
    key = header.api_key
    if key not in (17, 36) and not isinstance(out, Close):
        raise Finding(f"an answer to API key {key} before the login")
    try:
        response_header, _ = fastkwire.decode_response(answer, key, header.api_version)
    except Exception as e:  # noqa: BLE001
        raise Finding(f"the answer does not decode: {e}") from None
    if response_header.correlation_id != header.correlation_id:
        raise Finding("an answer with another correlation id")
    return out


def one_login(rng, users, pool):
    """Returns (what happened, the frames sent)."""
    session = SaslSession(users)
    sent = []
    user = rng.choice([*USERS, "mallory"])
    right = rng.random() < 0.6
    password = USERS.get(user, "x") if right else "wrong-" + str(rng.random())
    mechanism = rng.choice(MECHANISMS) if rng.random() < 0.9 else "GSSAPI"
    mutate = rng.random() < 0.7

    def send(frame, raw=False):
        if mutate and rng.random() < 0.3:
            frame = bytes(D.mutate(frame, rng, pool))
        sent.append(frame)
        return _checked(session, frame, raw)

    if rng.random() < 0.3:
        out = send(rng.choice(pool))
        if isinstance(out, Close):
            return "closed", sent
    version = rng.choice((0, 1, 1, 1, 2))
    handshake = fastkwire.SaslHandshakeRequest(mechanism=mechanism)
    try:
        frame = fastkwire.encode_request(handshake, min(version, 1), 1, "fuzz")
    except ValueError:
        return "unencodable", sent
    if version == 2:  # a version not served, its bytes taken from v1
        frame = frame[:6] + b"\x00\x02" + frame[8:]
    out = send(frame)
    if isinstance(out, Close) or out is PASS:
        return "closed", sent
    raw = session.raw
    client = (
        Plain(user, password)
        if mechanism == "PLAIN"
        else Scram(user, password, mechanism[len("SCRAM-") :].replace("-", "").lower())
    )
    token = client.start()
    for step in range(MAX_STEPS):
        if mutate and rng.random() < 0.3:
            token = bytes(D.mutate(token, rng, [t for t in pool if len(t) < 200]))[4:]
        if raw:
            frame = len(token).to_bytes(4, "big") + token
        else:
            request = fastkwire.SaslAuthenticateRequest(auth_bytes=token)
            frame = fastkwire.encode_request(request, rng.choice((0, 1, 2)), 2 + step, "fuzz")
        out = send(frame, raw)
        if session.complete:
            if user not in USERS or password != USERS[user]:
                raise Finding(f"logged in as {session.user!r} without the password")
            return "logged in", sent
        if isinstance(out, Close):
            return "refused", sent
        if raw:
            reply = out[4:]
        else:
            sent_header = request_header(sent[-1])  # the frame as sent (maybe mutated)
            reply = fastkwire.decode_response(out, 36, sent_header.api_version)[1].auth_bytes
        try:
            token = client.step(reply)
        except SaslAuthError:
            return "client refused", sent
        if token is None:
            return "incomplete", sent
    return "steps", sent


def run(loops, seed, stop_after=None):
    rng = random.Random(seed)
    users = Users(USERS)
    pool = [
        fastkwire.encode_request(fastkwire.ApiVersionsRequest(), 3, 1, "fuzz"),
        fastkwire.encode_request(fastkwire.MetadataRequest(topics=None), 12, 1, "fuzz"),
        fastkwire.encode_request(fastkwire.SaslHandshakeRequest(mechanism="PLAIN"), 1, 1, "f"),
        fastkwire.encode_request(fastkwire.SaslAuthenticateRequest(auth_bytes=b"\0a\0b"), 2, 2),
    ]
    counts = {}
    findings = 0
    started = time.monotonic()
    for i in range(loops):
        sent = []
        try:
            what, sent = one_login(rng, users, pool)
            counts[what] = counts.get(what, 0) + 1
        except Finding as e:
            findings += 1
            print(
                f"finding at input {i}: {e}\n  frames: {[f.hex() for f in sent]}", file=sys.stderr
            )
            if stop_after is not None and findings >= stop_after:
                break
    return counts, findings, time.monotonic() - started


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", type=int, default=5000, help="logins to try")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    counts, findings, took = run(args.loop, args.seed)
    shown = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    print(f"{args.loop} logins in {took:.1f} s: {shown}; {findings} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

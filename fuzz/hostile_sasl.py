"""Hostile logins through the broker's SASL session (fastkwire.broker._sasl), no socket.

    python3 fuzz/hostile_sasl.py --loop 5000 --seed 1
    python3 fuzz/hostile_sasl.py --loop 5000 --seed 1 --oauthbearer

Each input is one connection's login: maybe an ApiVersions or another request first, a
SaslHandshake (v0 or v1; an enabled mechanism or not), then the tokens of a live client
(fastkwire.sasl's PLAIN or SCRAM, for a known user or not, with the right password or
not) in SaslAuthenticate requests (v0-2) or bare after a v0 handshake. Any frame or token
may be mutated by fuzz/differential.py's mutations. The contract, checked for each frame:
- `receive` returns PASS, an answer's bytes or a Close (never raises), whose reason (for
  the log) is one short line whatever the client sent;
- PASS only for an ApiVersions request before the handshake;
- an answer (or a Close's answer) is a whole frame: with a header, it carries the request's
  correlation id and decodes as SaslHandshake's or SaslAuthenticate's response at its
  version; a bare token answers a bare token;
- a login completes only for a known user whose password the client had: never with a
  wrong password or an unknown user, whatever the mutations.
With --oauthbearer, OAUTHBEARER is enabled too (Kafka's unsecured validation): the client
sends RFC 7628's initial response with an unsecured JWS (good, expired, unsigned or not,
without a subject or one that is no UTF-8, exp/iat at the edges of numbers...; any of it
mutated) and answers an error with ^A; and a login may be
re-authenticated (KIP-368) with another token. Its contract besides:
- an OAUTHBEARER login completes only for a token that holds, as checked here on its own
  (the message as sent is RFC 7628's, the JWS's alg is none, no signature, `sub` the user,
  `exp` ahead, `iat` not ahead): never for a bad token;
- a re-authentication never changes the principal; a session past its expiry is closed
  for anything but a re-authentication.
Anything else is printed with its input and counted; the exit status is 1 if any.
"""

import argparse
import base64
import json
import random
import re
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential as D  # noqa: E402

import fastkwire  # noqa: E402
from fastkwire.broker._exchange import Close  # noqa: E402
from fastkwire.broker import UnsecuredValidator  # noqa: E402
from fastkwire.broker._sasl import PASS, SaslSession, Users  # noqa: E402
from fastkwire.proxy._frames import request_header  # noqa: E402
from fastkwire.sasl import Plain, Scram, SaslAuthError  # noqa: E402

USERS = {"alice": "alice-pw", "b=o,b": "bob-pw"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
MAX_STEPS = 6
NOW = 1_800_000_000.0  # the sessions' clock (seconds since the epoch)
MAX_REAUTH_MS = 30_000
# added to a token's subject: another principal, which may be no UTF-8 (a lone surrogate)
ODD_TEXT = ("\ud800", "\udfff", "\u00e5", "\x00", "\u202e")


def _b64(value):
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _token(rng, user):
    """An unsecured JWS for `user`, good or bad in one of the ways a token can be."""
    claims = {"sub": user, "iat": NOW - rng.randint(0, 100), "exp": NOW + rng.randint(1, 90)}
    header = {"alg": "none"}
    signature = ""
    flaws = ("exp", "alg", "sig", "sub", "iat", "types", "junk", "text", "numbers")
    flaw = rng.choice(("none",) * 6 + flaws)
    if flaw == "exp":
        claims["exp"] = rng.choice((NOW - 1, NOW, None, "soon", [1], 1e400))
    elif flaw == "text":  # json.dumps escapes a lone surrogate, which Java's String holds
        claims["sub"] = user + rng.choice(ODD_TEXT)
    elif flaw == "numbers":
        claims[rng.choice(("exp", "iat"))] = rng.choice((-0.0, 0, 2**64, -(2**64), 1e-400, 1e308))
    elif flaw == "alg":
        header = rng.choice(({"alg": "HS256"}, {}, {"alg": None}, ["none"]))
    elif flaw == "sig":
        signature = rng.choice(("c2ln", "x", "."))
    elif flaw == "sub":
        claims["sub"] = rng.choice((None, "", " ", 5, ["alice"], {"n": "alice"}, True))
    elif flaw == "iat":
        claims["iat"] = rng.choice((NOW + 1000, claims["exp"], "then"))
    elif flaw == "types":
        claims["scope"] = rng.choice((1, {"a": 1}, ["x", 2], "read"))
    elif flaw == "junk":
        return rng.choice(("", "x", "..", "a.b", "a.b.c.d", _b64(b"\xff") + ".e30."))
    return f"{_b64(header)}.{_b64({k: v for k, v in claims.items() if v is not None})}.{signature}"


class _OAuthClient:
    """RFC 7628's client as Kafka's clients are: the initial response, then ^A to an error."""

    name = "OAUTHBEARER"

    def __init__(self, token, authzid=""):
        self.token, self.authzid = token, authzid

    def start(self):
        a = f"a={self.authzid}" if self.authzid else ""
        # (an authzid of a principal that is no UTF-8 goes as its bytes: not Kafka's)
        return f"n,{a},\x01auth=Bearer {self.token}\x01\x01".encode("utf-8", "surrogatepass")

    def step(self, reply):
        return None if reply == b"" else b"\x01"


_SENT = re.compile(rb"n,(?:a=([^,]*))?,\x01(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*\x01")


def _json_object(part):
    try:
        raw = base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))
        value = json.JSONDecoder().raw_decode(raw.decode("utf-8").lstrip(" \t\r\n"))[0]
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _holds(data, user):
    """Whether the OAUTHBEARER message `data` carries a token that may log `user` in: the
    contract written down on its own, not the broker's reading of it."""
    data = bytes(data)
    match = _SENT.fullmatch(data)
    if match is None:
        return False
    tokens = [p[len(b"auth=") :] for p in data.split(b"\x01") if p.startswith(b"auth=")]
    scheme, _, token = tokens[-1].decode().partition(" ")
    parts = token.strip(" ").split(".")
    if scheme.lower() != "bearer" or len(parts) != 3 or parts[2]:
        return False
    header, claims = _json_object(parts[0]), _json_object(parts[1])
    if header is None or claims is None or header.get("alg") != "none":
        return False
    exp, iat, sub = claims.get("exp"), claims.get("iat"), claims.get("sub")
    number = (int, float)
    if not isinstance(exp, number) or isinstance(exp, bool) or exp * 1000 <= NOW * 1000:
        return False
    if iat is not None and (not isinstance(iat, number) or isinstance(iat, bool) or iat > NOW):
        return False
    authzid = match.group(1)
    if authzid and authzid.decode("utf-8", "replace") != user:
        return False
    if isinstance(sub, bool) or sub is None:  # Kafka reads these as their text (asText)
        sub = {True: "true", False: "false", None: "null"}[sub]
    return isinstance(sub, str) and sub == user


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
    if isinstance(out, Close) and (len(out.reason) > 1000 or not out.reason.isprintable()):
        raise Finding(f"a Close whose logged reason is no short line: {out.reason[:100]!r}")
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


def one_login(rng, users, pool, oauthbearer=False):
    """Returns (what happened, the frames sent)."""
    clock = lambda: NOW  # noqa: E731 - the sessions' fixed clock
    session = SaslSession(users, MAX_REAUTH_MS if oauthbearer else 0, clock)
    sent = []
    user = rng.choice([*USERS, "mallory"])
    right = rng.random() < 0.6
    password = USERS.get(user, "x") if right else "wrong-" + str(rng.random())
    mechanisms = MECHANISMS + (("OAUTHBEARER",) * 3 if oauthbearer else ())
    mechanism = rng.choice(mechanisms) if rng.random() < 0.9 else "GSSAPI"
    mutate = rng.random() < 0.7
    what, sent = _login(session, rng, pool, sent, user, password, mechanism, mutate)
    if what != "logged in" or not oauthbearer:
        return what, sent
    return _after_login(session, rng, pool, sent, mechanism, mutate)


def _after_login(session, rng, pool, sent, mechanism, mutate):
    """A logged-in session: requests, maybe a re-authentication (KIP-368) as another
    user or with a bad token, maybe once the session has expired."""
    user = session.user
    if rng.random() < 0.3:  # past the session's end
        later = NOW + MAX_REAUTH_MS / 1000 + 1
        session.clock = lambda: later
    if rng.random() < 0.5:
        try:
            out = session.after_login(pool[1])  # a Metadata request
        except Exception as e:  # noqa: BLE001 - any exception is the finding
            raise Finding(f"after_login raised {type(e).__name__}: {e}") from None
        expired = session.clock() > session.expires
        if expired != isinstance(out, Close) or (out is not None and not expired):
            raise Finding(f"a request after the login got {out!r} (session expired: {expired})")
        if expired:
            return "expired", sent
    other = rng.choice([user] * 3 + [*USERS, "mallory"])
    password = USERS.get(other, "x") if rng.random() < 0.8 else "wrong"
    again = mechanism if rng.random() < 0.9 else rng.choice(MECHANISMS)
    what, sent = _login(session, rng, pool, sent, other, password, again, mutate, reauth=True)
    if session.complete and session.user != user:
        raise Finding(f"re-authenticated {user!r} as {session.user!r}")
    return ("re-" + what) if what != "closed" else "re-closed", sent


def _login(session, rng, pool, sent, user, password, mechanism, mutate, reauth=False):

    def send(frame, raw=False):
        if mutate and rng.random() < 0.3:
            frame = bytes(D.mutate(frame, rng, pool))
        sent.append(frame)
        return _checked(session, frame, raw)

    if rng.random() < 0.3 and not reauth:
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
    if reauth:
        if mutate and rng.random() < 0.3:
            frame = bytes(D.mutate(frame, rng, pool))
        sent.append(frame)
        out = session.after_login(frame)
        if out is None:  # not a SaslHandshake as sent: on to Apis
            return "closed", sent
        if not isinstance(out, (bytes, Close)):
            raise Finding(f"a re-authentication's handshake got {out!r}")
    else:
        out = send(frame)
    if isinstance(out, Close) or out is PASS:
        return "closed", sent
    raw = session.raw
    if mechanism == "OAUTHBEARER":
        authzid = rng.choice(("",) * 5 + (user, "bob", "b\r\n" * 12_000))  # (too long to answer)
        client = _OAuthClient(_token(rng, user), authzid)
    else:
        try:  # (a token's principal may be no UTF-8: these clients refuse it)
            if mechanism == "PLAIN":
                client = Plain(user, password)
            else:
                hash_name = mechanism[len("SCRAM-") :].replace("-", "").lower()
                client = Scram(user, password, hash_name)
        except SaslAuthError:
            return "client refused", sent
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
            if session.mechanism == "OAUTHBEARER":
                # the message that logged in, as the session read it, must hold
                read = (
                    sent[-1][4:]
                    if raw
                    else fastkwire.decode_request(sent[-1], trailing="keep")[1].auth_bytes
                )
                if not _holds(read, session.user):
                    raise Finding(f"logged in as {session.user!r} with a token that does not hold")
            elif user not in USERS or password != USERS[user]:
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


def run(loops, seed, stop_after=None, oauthbearer=False):
    rng = random.Random(seed)
    if oauthbearer:
        validator = UnsecuredValidator(clock=lambda: NOW)
        users = Users(USERS, [*MECHANISMS, "OAUTHBEARER"], oauthbearer=validator)
    else:
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
            what, sent = one_login(rng, users, pool, oauthbearer)
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
    parser.add_argument(
        "--oauthbearer",
        action="store_true",
        help="OAUTHBEARER enabled too (unsecured tokens) and re-authentication (KIP-368)",
    )
    args = parser.parse_args(argv)
    counts, findings, took = run(args.loop, args.seed, oauthbearer=args.oauthbearer)
    shown = ", ".join(f"{n} {what}" for what, n in sorted(counts.items()))
    print(f"{args.loop} logins in {took:.1f} s: {shown}; {findings} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

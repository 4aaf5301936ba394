"""Hostile clients and a scripted upstream through the proxy's compiled forwarding path.

Each case (a seed) is one connection through a proxy with `forward="compiled"` (on its
own loop and thread in this process) to an upstream run here. The client, from the
seed, sends whole requests, floods of empty frames, frames up to the size limit, a
negative or oversized size prefix, or a frame cut anywhere; it reads fast, slowly or
never; it ends with its end of stream, a half-close or a reset, or stays to the end.
The upstream, told the seed by the first request's client id, answers some or all of
the requests (one answer may be 2 MB), may first stream tiny unpaired frames, and ends
with an end of stream (after a cut frame or not), a reset, or not at all.

Invariants (anything else is a finding):
- what the client received is a prefix of what the upstream sent: nothing reordered,
  corrupted or made up;
- a client that sent only whole frames and stayed reading, from an upstream that ended
  with an end of stream, received every whole frame the upstream sent, then the end;
- the forwarder's queue never holds more than its limits (max_buffered_bytes counting
  what each item costs, MAX_ITEMS items) plus what ending connections push at once;
- every connection ends (the upstream sees it closed) within the timeouts; the proxy
  serves a good client after every batch and closes cleanly.

    python fuzz/hostile_forwarder.py [--cases 200] [--seed 1] [--concurrency 8]
    python fuzz/hostile_forwarder.py --replay SEED

A CI smoke is the default (~30 s); FUZZ_LONG=1 (or --cases N) runs longer.
"""

import argparse
import gc
import os
import random
import socket
import struct
import sys
import threading
import time

import fastkwire as fk
from fastkwire import _forward
from fastkwire.proxy import BackgroundProxy

SIZE = struct.Struct(">i")
INT16 = struct.Struct(">h")
MAX_FRAME = 4 << 20
MAX_BUFFERED = 2 << 20
MAX_IN_FLIGHT = 64
FRAME_TIMEOUT = 2.0
CASE_TIMEOUT = 20.0  # a case's client gives up (a finding if it had to wait for the end)
END_TIMEOUT = 10.0  # after its client is done, a connection's upstream side must be closed
ITEM_COST = 256  # more than the forwarder counts for an item beyond its frames


class Finding(AssertionError):
    pass


def request(cid, client_id, pad=0):
    frame = fk.encode_request(fk.ApiVersionsRequest(client_software_name="f"), 3, cid, client_id)
    return SIZE.pack(len(frame) - 4 + pad) + frame[4:] + bytes(pad)


def answer(frame, size):
    cid = SIZE.unpack_from(frame, 8)[0]
    body = (frame[::-1] * (size // len(frame) + 1))[:size]
    return SIZE.pack(4 + len(body)) + SIZE.pack(cid) + body


def whole_frames(data):
    """The whole frames at the start of `data` (what a forwarder may pass on)."""
    pos = 0
    while len(data) - pos >= 4:
        n = 4 + SIZE.unpack_from(data, pos)[0]
        if n < 4 or len(data) - pos < n:
            break
        pos += n
    return data[:pos]


class Plan:
    """Both peers' behaviour in a case, from its seed."""

    def __init__(self, seed):
        rng = random.Random(seed)
        self.seed = seed
        self.tag = f"fz:{seed}"
        self.first_hostile = rng.random() < 0.1  # no tagged request first
        self.requests = rng.randrange(0, 12)
        self.empties = rng.choice([0, 0, 10, 5000, 60000])
        self.huge_request = rng.choice([0, 0, 0, 1 << 20, MAX_FRAME - 100])
        self.client_end = rng.choice(
            ["stay", "stay", "stay", "eof", "close", "reset", "bad", "cut", "gone"]
        )
        self.cut_at = rng.randrange(1, 40)
        self.reader = rng.choice(["fast", "fast", "slow", "never"])
        self.answers = rng.choice([None, None, 0, 1, 3])  # None: all
        self.tiny = rng.choice([0, 0, 0, 20, 20000])
        self.huge_answer = rng.random() < 0.3
        self.sizes = [rng.randrange(10, 30000) for _ in range(self.requests + 1)]
        self.upstream_end = rng.choice(["eof", "eof", "cut", "reset", "never"])
        if self.first_hostile and self.client_end == "stay":
            self.client_end = "eof"  # the upstream never learns the plan: nothing ends it
        # the ApiVersions requests the upstream sees once it knows the plan
        self.total = (not self.first_hostile) + self.requests + bool(self.huge_request)

    @property
    def clean(self):
        """Whether every byte the upstream sent must reach the client."""
        return (
            not self.first_hostile
            and self.client_end == "stay"
            and self.reader != "never"
            and self.upstream_end in ("eof", "cut")
        )


class Upstream:
    """The scripted upstream: a thread per connection; what it sent, per tag."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.sent = {}  # tag -> bytearray written
        self.done = {}  # tag -> True once it wrote its last byte
        self.open = 0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except (socket.timeout, OSError):
                continue
            with self.lock:
                self.open += 1
            threading.Thread(target=self._serve, args=(sock,), daemon=True).start()

    def _serve(self, sock):
        try:
            with sock:
                sock.settimeout(3 * CASE_TIMEOUT)  # longer than any wait for it to be closed
                if self._script(sock) != "reset":
                    # until the proxy closes its side: no reset for what it still sends
                    while sock.recv(1 << 16):
                        pass
        except OSError:
            pass
        finally:
            with self.lock:
                self.open -= 1

    def _send(self, sock, out, data):
        view = memoryview(data)
        while view:
            n = sock.send(view)
            out += view[:n]
            view = view[n:]

    def _script(self, sock):
        buf, plan, out, answered = b"", None, None, 0
        while True:
            chunk = sock.recv(1 << 16)
            if not chunk:
                return
            buf += chunk
            while len(buf) >= 4 and len(buf) >= 4 + SIZE.unpack_from(buf)[0] >= 4:
                n = 4 + SIZE.unpack_from(buf)[0]
                frame, buf = buf[:n], buf[n:]
                if len(frame) < 14:
                    continue
                k = INT16.unpack_from(frame, 12)[0]
                client_id = frame[14 : 14 + k].decode("ascii", "replace") if k > 0 else ""
                if client_id == "good":
                    sock.sendall(answer(frame, 100))
                    continue
                if plan is None and client_id.startswith("fz:"):
                    plan = Plan(int(client_id[3:]))
                    out = self.sent.setdefault(plan.tag, bytearray())
                    if plan.tiny:
                        self._send(sock, out, bytes(4 * plan.tiny))
                if plan is None or INT16.unpack_from(frame, 4)[0] != 18:
                    continue
                if plan.answers is None or answered < plan.answers:
                    size = 2_000_000 if plan.huge_answer and answered == 0 else plan.sizes[0]
                    self._send(sock, out, answer(frame, size))
                    answered += 1
                if answered == plan.answers or answered == plan.total:
                    return self._end(sock, plan, out, frame)

    def _end(self, sock, plan, out, frame):
        if plan.upstream_end == "never":
            self.done[plan.tag] = True
            return
        if plan.upstream_end == "cut":
            self._send(sock, out, answer(frame, 5000)[:2000])
        self.done[plan.tag] = True
        if plan.upstream_end == "reset":
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return "reset"
        sock.shutdown(socket.SHUT_WR)

    def close(self):
        self.stop.set()
        self.listener.close()


def client(address, plan, upstream, limited):
    """Runs the client's side of a case; (bytes received, whether it read to the end)."""
    sock = socket.socket()
    sock.settimeout(CASE_TIMEOUT)
    if plan.reader == "slow":  # a small window: the proxy's writes to it back up
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
    sock.connect(address)
    name = "%s:%d" % sock.getsockname()[:2]
    if plan.client_end == "gone":  # a health check: gone before the upstream is there
        if not plan.first_hostile:
            sock.send(request(0, plan.tag))
        sock.close()
        return bytearray(), False, name
    frames = [] if plan.first_hostile else [request(0, plan.tag)]
    frames += [request(i, plan.tag) for i in range(1, plan.requests + 1)]
    frames.append(bytes(4 * plan.empties))
    if plan.huge_request:
        frames.append(request(plan.requests + 1, "big", plan.huge_request))
    if plan.client_end == "bad":
        frames.append(SIZE.pack(random.Random(plan.seed).choice([-1, MAX_FRAME + 1, 0x7FFFFFFF])))
    elif plan.client_end == "cut":
        frames.append(request(99, plan.tag)[: plan.cut_at])
    data = b"".join(frames)

    def send():
        try:
            sock.sendall(data)
            if plan.client_end in ("eof", "cut"):
                sock.shutdown(socket.SHUT_WR)
        except OSError:
            pass

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    got, ended, deadline = bytearray(), False, time.monotonic() + CASE_TIMEOUT
    try:
        if plan.client_end in ("close", "reset"):
            sender.join(CASE_TIMEOUT)
            if plan.client_end == "reset":
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return got, False, name
        if plan.reader == "never":
            time.sleep(0.2)
            return got, False, name
        sock.settimeout(0.2)
        while time.monotonic() < deadline:
            try:
                chunk = sock.recv(65536 if plan.reader == "fast" else 4096)
            except socket.timeout:
                sent = upstream.sent.get(plan.tag, b"")
                if upstream.done.get(plan.tag) and plan.upstream_end == "never":
                    if len(got) >= len(whole_frames(bytes(sent))):
                        return got, True, name  # all of it came; the connection stays open
                continue
            except OSError:
                return got, False, name
            if not chunk:
                ended = True
                break
            got += chunk
            if plan.reader == "slow":
                time.sleep(0.002)
        if not ended and plan.clean and name not in limited:
            raise Finding(f"seed {plan.seed}: the connection did not end in {CASE_TIMEOUT:g} s")
        return got, ended, name
    finally:
        sock.close()
        sender.join(CASE_TIMEOUT)


def check(seed, address, upstream, limited):
    """One case; `limited`: the clients whose connection the proxy ended for holding past
    twice max_buffered_bytes with the others (its limit, not a loss)."""
    plan = Plan(seed)
    got, to_the_end, name = client(address, plan, upstream, limited)
    deadline = time.monotonic() + CASE_TIMEOUT
    while time.monotonic() < deadline:  # the upstream's thread notes what it sent after
        sent = bytes(upstream.sent.get(plan.tag, b""))
        if len(sent) >= len(got) and (upstream.done.get(plan.tag) or not plan.clean):
            break
        time.sleep(0.01)
    if bytes(got) != sent[: len(got)]:
        raise Finding(f"seed {seed}: the client got bytes the upstream did not send in that order")
    if plan.clean and to_the_end and bytes(got) != whole_frames(sent):
        time.sleep(0.2)  # the proxy's events come in batches
        if name in limited:
            return
        raise Finding(
            f"seed {seed}: the client got {len(got)} of the upstream's "
            f"{len(whole_frames(sent))} bytes of whole frames, then the end"
        )


class Watch:
    """The forwarder's accounting, sampled: the largest queue it held."""

    def __init__(self, forwarder):
        self.forwarder, self.most = forwarder, (0, 0)
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        while not self.stop.wait(0.002):
            cost, items = self.forwarder.queued
            self.most = (max(self.most[0], cost), max(self.most[1], items))

    def close(self):
        self.stop.set()
        self.thread.join()


def run(cases, seed, concurrency, replay=None):
    upstream = Upstream()
    findings = []
    limited = set()

    def on_event(event):
        if "(twice the limit" in event.text:
            limited.add(event.client)

    started = time.monotonic()
    with BackgroundProxy(
        f"127.0.0.1:{upstream.port}",
        forward="compiled",
        keep=1000,
        max_frame_bytes=MAX_FRAME,
        max_pending_bytes=1 << 20,
        max_in_flight=MAX_IN_FLIGHT,
        max_buffered_bytes=MAX_BUFFERED,
        frame_timeout=FRAME_TIMEOUT,
        on_event=on_event,
    ) as proxy:
        watch = Watch(proxy.proxy._compiled.forwarder)

        def unhandled(loop, context):  # a task that died ("Task exception was never retrieved")
            findings.append(
                f"the proxy's loop: {context.get('message')}: {context.get('exception')!r}"
            )

        proxy._loop.call_soon_threadsafe(proxy._loop.set_exception_handler, unhandled)
        seeds = [replay] if replay is not None else [seed * 1_000_003 + i for i in range(cases)]
        for start in range(0, len(seeds), concurrency):
            batch = seeds[start : start + concurrency]
            errors = []

            def one(s):
                try:
                    check(s, proxy.address, upstream, limited)
                except Finding as e:
                    errors.append(str(e))
                except Exception as e:  # noqa: BLE001 - the harness's own failure is a finding
                    errors.append(f"seed {s}: {type(e).__name__}: {e}")

            threads = [threading.Thread(target=one, args=(s,)) for s in batch]
            for t in threads:
                t.start()
            for t in threads:
                t.join(CASE_TIMEOUT * 3)
            findings += errors
            # every connection ends: the upstream sees each one closed
            deadline = time.monotonic() + END_TIMEOUT
            while upstream.open and time.monotonic() < deadline:
                time.sleep(0.02)
            if upstream.open:
                findings.append(f"seeds {batch}: {upstream.open} upstream connections left open")
            with socket.create_connection(proxy.address, timeout=CASE_TIMEOUT) as s:
                s.sendall(request(7, "good"))
                head = s.recv(8)
                if len(head) < 8 or SIZE.unpack_from(head, 4)[0] != 7:
                    findings.append(f"after seeds {batch}: a good client was not answered")
        watch.close()
        cost, items = watch.most
        slack = concurrency * (MAX_IN_FLIGHT + 4)
        if items > _forward.MAX_ITEMS + slack:
            findings.append(f"the queue held {items} items (MAX_ITEMS {_forward.MAX_ITEMS})")
        if cost > MAX_BUFFERED + slack * ITEM_COST + concurrency * 2 * MAX_FRAME:
            findings.append(f"the queue held {cost} bytes (max_buffered_bytes {MAX_BUFFERED})")
    upstream.close()
    gc.collect()  # tasks that died unretrieved are reported as they are collected
    took = time.monotonic() - started
    for f in findings:
        print("finding:", f, file=sys.stderr)
    print(
        f"done: {len(seeds)} cases in {took:.0f} s, {len(findings)} findings; the queue held "
        f"at most {cost} bytes and {items} items",
        file=sys.stderr,
    )
    return findings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    long_run = os.environ.get("FUZZ_LONG", "") not in ("", "0")
    parser.add_argument("--cases", type=int, default=2000 if long_run else 120)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--replay", type=int, help="one case (a seed a finding printed)")
    args = parser.parse_args()
    if not _forward.AVAILABLE:
        sys.exit("the compiled forwarding path is not available here")
    sys.exit(1 if run(args.cases, args.seed, args.concurrency, args.replay) else 0)


if __name__ == "__main__":
    main()

"""Hostile streams on many connections at once against the broker's framing
(fastkwire.broker._server's _Connection: the shared scratch buffer, frames read in place
into FrameBuffers, the bytes held and reserved under max_buffered_bytes).

    python fuzz/hostile_framing.py --steps 3000 --seed 1             # the short run (CI)
    python fuzz/hostile_framing.py --long --seed 7                   # 1,000 connections

A broker runs in process (small caps: max_buffered_bytes 1 MiB, max_frame_bytes 2 MiB);
the fuzzer opens connections to it and, step after step, on a random one: sends part of a
frame (ApiVersions requests, or a frame of a declared size up to the frame cap, its body
random bytes, cut anywhere: the size prefix too), the rest of it, a size prefix past the
cap or negative, or closes it (mid-frame too) and opens another. Checked, every few steps
and at the end, on the broker's loop:
- the broker's counts are its connections' sums: `buffered` is the bytes every connection
  has queued or holds of a frame, `reserved` the bytes their frame buffers wait for; none
  is negative, reserved stays within max_buffered_bytes and buffered within twice it
  (past that, the connection that read is ended);
- every ApiVersions request whose bytes all went, on a connection still open that sent
  nothing else, is answered with its correlation id, in order (answers are read as they
  come, so no connection is paused for its writes), at the latest once frame_timeout
  (2 s here) has ended the connections whose frames were left unsent;
- the broker and its event loop log no error (a callback or handler that failed);
- once every connection is closed, nothing is held or reserved, and a new connection is
  answered.
Anything else is printed and counted; the exit status is 1 if any.
"""

import argparse
import itertools
import logging
import random
import socket
import struct
import sys
import time

from fastkwire import ApiVersionsRequest, encode_request
from fastkwire.testing import Broker

MAX_BUFFERED = 1 << 20
MAX_FRAME = 2 << 20
TIMEOUT = 10.0
FRAME_TIMEOUT = 2.0
_IDS = itertools.count(1)


class Client:
    def __init__(self, address):
        self.sock = socket.create_connection(address, timeout=TIMEOUT)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        self.out = b""  # the frame being sent, what is left of it
        self.asked = []  # correlation ids of the ApiVersions requests sent whole
        self.got = b""  # answer bytes read, not yet split
        self.dead = False  # the broker ended it (a refused prefix, or its caps)
        self.spoiled = False  # a frame that is not a request went: answers may stop

    def send(self, data):
        try:
            self.sock.sendall(data)
        except (BlockingIOError, OSError):
            self.dead = True  # the broker stopped reading it (paused or ended): let it be

    def read(self):
        """Answers that came; their correlation ids, in order."""
        ids = []
        while True:
            try:
                chunk = self.sock.recv(1 << 16)
            except BlockingIOError:
                break
            except OSError:
                self.dead = True
                break
            if not chunk:
                self.dead = True
                break
            self.got += chunk
        while len(self.got) >= 8:
            (size,) = struct.unpack_from(">i", self.got)
            if len(self.got) < 4 + size:
                break
            ids.append(struct.unpack_from(">i", self.got, 4)[0])
            self.got = self.got[4 + size :]
        return ids


def _frame(rng):
    pick = rng.randrange(5)
    if pick <= 1:
        cid = next(_IDS)  # unique across connections: bytes of one read by another show
        return encode_request(ApiVersionsRequest(), 3, cid, "framing"), cid
    if pick == 2:  # a large frame (not a request the broker can answer: it ends the connection)
        size = rng.choice([300_000, MAX_BUFFERED - 100, MAX_FRAME])
    elif pick == 3:
        size = rng.choice([0, 1, 7, 4096])
    else:  # refused: a few bytes after it
        size = rng.choice([MAX_FRAME + 1, -1, -(2**31), 2**31 - 1])
        return struct.pack(">i", size) + rng.randbytes(10), None
    body = rng.randbytes(min(max(size, 0), 64)) + bytes(max(size - 64, 0))
    return struct.pack(">i", size) + body, None


def _check(broker, findings, where):
    def counts():
        b = broker.broker
        conns = list(b.connections)
        return (
            b.buffered,
            b.reserved,
            sum(c.queued + c.held_bytes for c in conns),
            sum(c.reserved for c in conns),
        )

    buffered, reserved, held, waiting = broker.call(counts)
    problems = []
    if buffered != held or reserved != waiting:
        problems.append(f"counts {buffered}/{reserved}, the connections' sums {held}/{waiting}")
    if buffered < 0 or reserved < 0 or reserved > MAX_BUFFERED or buffered > 2 * MAX_BUFFERED:
        problems.append(f"buffered {buffered}, reserved {reserved}")
    for p in problems:
        findings.append(f"{where}: {p}")


def run(seed, connections, steps, loop):
    rng = random.Random(seed)
    findings = []
    with Broker(
        loop=loop,
        groups=None,
        max_buffered_bytes=MAX_BUFFERED,
        max_frame_bytes=MAX_FRAME,
        max_connections=connections * 20,
        frame_timeout=FRAME_TIMEOUT,  # frames left unsent at the end free their room soon
    ) as broker:
        address = next(iter(broker.addresses.values()))
        clients = [Client(address) for _ in range(connections)]
        pending = {}  # client -> the ApiVersions ids expected, in order
        for step in range(steps):
            i = rng.randrange(len(clients))
            c = clients[i]
            op = rng.randrange(10)
            if op == 0 or c.dead:  # closed (mid-frame too) and replaced
                c.sock.close()
                pending.pop(c, None)
                clients[i] = Client(address)
                continue
            if not c.out:
                c.out, cid = _frame(rng)
                c.cid = cid
                c.spoiled |= cid is None
            cut = rng.choice([1, 3, 4, 5, 100, 70_000, len(c.out)])
            c.send(c.out[:cut])
            c.out = c.out[cut:]
            if not c.out and c.cid is not None and not c.dead:
                pending.setdefault(c, []).append(c.cid)
            if step % 50 == 0:
                time.sleep(0.005)  # the broker reads what came
                for d in clients:
                    got = d.read()
                    want = pending.get(d, [])
                    if got and got != want[: len(got)]:
                        findings.append(f"step {step}: answers {got}, expected {want[: len(got)]}")
                    pending[d] = want[len(got) :]
                _check(broker, findings, f"step {step}")
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:  # the last answers of connections kept clean
            waiting = [c for c in clients if pending.get(c) and not c.spoiled and not c.dead]
            if not waiting:
                break
            time.sleep(0.02)
            for c in waiting:
                got = c.read()
                want = pending[c]
                if got != want[: len(got)]:
                    findings.append(f"at the end: answers {got}, expected {want[: len(got)]}")
                pending[c] = want[len(got) :]
        else:
            findings.append(f"{len(waiting)} clean connections still wait for answers")
        for c in clients:
            c.sock.close()
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            if broker.call(lambda: (broker.broker.buffered, broker.broker.reserved)) == (0, 0):
                break
            time.sleep(0.02)
        else:
            held = broker.call(lambda: (broker.broker.buffered, broker.broker.reserved))
            left = broker.call(
                lambda: [
                    (sorted(c.paused), c.queued, c.held_bytes, c.reserved, c.need, c.busy)
                    for c in broker.broker.connections
                ]
            )
            findings.append(
                f"after every connection closed: (buffered, reserved) {held}; still open "
                f"(paused, queued, held, reserved, need, busy): {left[:8]}"
            )
        s = socket.create_connection(address, timeout=TIMEOUT)
        s.sendall(encode_request(ApiVersionsRequest(), 3, 77, "framing"))
        answer = s.recv(8)
        s.close()
        if len(answer) < 8 or struct.unpack_from(">i", answer, 4)[0] != 77:
            findings.append("a new connection was not answered")
    return findings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--connections", type=int, default=50)
    parser.add_argument("--long", action="store_true", help="1,000 connections, 100,000 steps")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--loop", default="auto", choices=["auto", "asyncio", "uvloop"])
    args = parser.parse_args()
    # The connections it refuses and ends are the point; an error the broker logs (a
    # handler or callback that failed) is a finding.
    errors = []
    handler = logging.Handler(logging.ERROR)
    handler.emit = lambda record: errors.append(f"the broker logged: {record.getMessage()}")
    broker_log = logging.getLogger("fastkwire.broker")
    broker_log.setLevel(logging.ERROR)
    broker_log.addHandler(handler)
    logging.getLogger("asyncio").addHandler(handler)
    connections, steps = (1000, 100_000) if args.long else (args.connections, args.steps)
    findings = run(args.seed, connections, steps, args.loop) + errors
    for f in findings[:30]:
        print(f)
    print(f"{connections} connections, {steps} steps: {len(findings)} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

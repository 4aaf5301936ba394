"""What a server costs per request before it does anything: the floor under a broker.

    python benchmarks/server_floor.py [--frame 16384] [--requests 682] [--gap 0 --gap 0.004]

A server that reads each size-prefixed frame whole and writes a 48-byte answer, nothing else,
runs as its own process on a free 127.0.0.1 port, three ways: blocking sockets, uvloop and
asyncio protocols. With `--keep` each server also keeps every frame, in memory allocated for
it, as a broker keeping its log in memory must. This process sends `--requests` frames of `--frame` bytes, one at a time,
waiting `--gap` seconds after each answer (kafka-python's producer sends a 16 KB Produce
about every 4 ms: 682 of them for 100,000 100-byte records). Printed: the server's CPU
microseconds per request (all its threads, from /proc, Linux only), median of `--repeat`.

At a client's pacing the server sleeps between requests and wakes cold: that cost is the
floor `broker_throughput.py`'s records per broker CPU second stand on. Large frames kept cost
mostly their first touch of fresh memory (page faults: about 0.6-0.8 us a KB in a VM).
"""

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time

from broker_throughput import cpu_seconds

ANSWER = b"\0\0\0\x2c" + bytes(44)

BLOCKING = """
import socket, sys
answer, keep = bytes.fromhex(sys.argv[2]), sys.argv[3] == "keep"
kept = []
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(); print(s.getsockname()[1], flush=True)
c, _ = s.accept()
buf = bytearray(1 << 24); view = memoryview(buf)
def fill(n, want):
    while n < want:
        k = c.recv_into(view[n:want])
        if not k:
            sys.exit()
        n += k
    return n
while True:
    fill(0, 4)
    size = int.from_bytes(buf[:4], "big") + 4
    if keep:  # the frame's body read into memory of its own, kept
        body = bytearray(size - 4)
        kept.append(body)
        n, mv = 0, memoryview(body)
        while n < len(body):
            k = c.recv_into(mv[n:])
            if not k:
                sys.exit()
            n += k
    else:
        fill(4, size)
    c.sendall(answer)
"""

PROTOCOL = """
import asyncio, sys
answer, keep = bytes.fromhex(sys.argv[2]), sys.argv[3] == "keep"
kept = []
class Frames(asyncio.Protocol):
    # pieces held until a frame is whole, joined once (not once a read)
    def connection_made(self, transport):
        self.transport, self.pieces, self.held, self.need = transport, [], 0, 4
    def data_received(self, data):
        self.pieces.append(data)
        self.held += len(data)
        if self.held < self.need:
            return
        held = b"".join(self.pieces)
        if keep:
            kept.append(held)  # whole frames and a next one's start: what a log would hold
        start = 0
        while len(held) - start >= 4:
            end = start + 4 + int.from_bytes(held[start:start + 4], "big")
            if end > len(held):
                break
            self.transport.write(answer)
            start = end
        rest = held[start:]
        self.pieces, self.held = [rest], len(rest)
        self.need = 4 + int.from_bytes(rest[:4], "big") if len(rest) >= 4 else 4
async def main():
    server = await asyncio.get_running_loop().create_server(Frames, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    await asyncio.Event().wait()
if sys.argv[1] == "uvloop":
    import uvloop
    uvloop.run(main())
else:
    asyncio.run(main())
"""

SERVERS = {"blocking": BLOCKING, "uvloop": PROTOCOL, "asyncio": PROTOCOL}


def measure(kind, frame, requests, gap, keep=False):
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVERS[kind], kind, ANSWER.hex(), "keep" if keep else "-"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(proc.stdout.readline())
        with socket.create_connection(("127.0.0.1", port), timeout=10) as conn:

            def exchange():
                conn.sendall(frame)
                got = b""
                while len(got) < len(ANSWER):
                    piece = conn.recv(len(ANSWER) - len(got))
                    if not piece:
                        raise RuntimeError(f"the {kind} server closed the connection")
                    got += piece

            for _ in range(100):  # warm-up, not counted
                exchange()
            before = cpu_seconds(proc.pid)
            for _ in range(requests):
                exchange()
                if gap:
                    time.sleep(gap)
            return (cpu_seconds(proc.pid) - before) / requests
    finally:
        proc.kill()
        proc.wait(10)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--frame", type=int, default=16384, metavar="BYTES")
    parser.add_argument("--requests", type=int, default=682)
    parser.add_argument("--gap", type=float, action="append", metavar="SECONDS")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="servers keep every frame")
    args = parser.parse_args()
    frame = args.frame.to_bytes(4, "big") + os.urandom(args.frame)
    kinds = [k for k in SERVERS if k != "uvloop" or _have("uvloop")]
    kept = ", each kept" if args.keep else ""
    print(f"{args.frame}-byte frames{kept}, {args.requests} requests, server CPU us per request")
    print(f"{'gap s':>7} " + " ".join(f"{k:>10}" for k in kinds))
    for gap in args.gap or [0.0, 0.004]:
        cells = [
            statistics.median(
                measure(k, frame, args.requests, gap, args.keep) for _ in range(args.repeat)
            )
            for k in kinds
        ]
        print(f"{gap:>7} " + " ".join(f"{c * 1e6:>10.1f}" for c in cells))


def _have(module):
    import importlib.util

    return importlib.util.find_spec(module) is not None


if __name__ == "__main__":
    main()

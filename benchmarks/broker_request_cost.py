"""One request's cost in the broker: CPU time, or instructions under callgrind.

    python benchmarks/broker_request_cost.py produce fetch [--requests 3000] [--repeat 3]
    python benchmarks/broker_request_cost.py produce fetch --callgrind [--requests 200]

The broker runs in this process on uvloop; a client in a child process (not counted)
connects, sends a warm-up (100 Produce requests of 16 KB, 5 Fetches of 1 MB), then
REQUESTS requests of one kind, one at a time, each answer read before the next request:
- produce: a 16 KB Produce (one batch of 150 records of 100 bytes, as kafka-python sends);
- producebig: a 550 KB Produce (5,000 records, as confluent-kafka sends them);
- fetch: a Fetch answered with 1 MB of batches; fetchsmall: one with one batch (16 KB).
The figure is the difference between a run with REQUESTS requests and one with none, over
REQUESTS: the broker's CPU time (median of --repeat pairs), or with --callgrind the
instructions counted (one pair; needs valgrind). Warm, back-to-back requests: what a
client pacing its requests costs more (cold caches) is not in it.
"""

import argparse
import asyncio
import os
import re
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time

MODES = ("produce", "producebig", "fetch", "fetchsmall")


def client(port, mode, n):
    from fastkwire import FetchRequest, MetadataRequest, ProduceRequest, encode_request, records

    s = socket.create_connection(("127.0.0.1", port), timeout=60)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ids = iter(range(1, 1 << 30))

    def exchange(frame):
        s.sendall(frame)
        head = b""
        while len(head) < 4:
            head += s.recv(4 - len(head))
        left = struct.unpack(">i", head)[0]
        while left:
            left -= len(s.recv(min(left, 1 << 20)))

    def request(msg, version):
        return encode_request(msg, version, next(ids), "bench")

    M = MetadataRequest
    exchange(request(M(topics=[M.MetadataRequestTopic(name="t")]), 9))

    def batch(count):
        return records.write_batch(
            [records.Record(value=b"x" * 100, timestamp=1) for _ in range(count)]
        )

    P = ProduceRequest

    def produce(data):
        partition = P.PartitionProduceData(index=0, records=data)
        topic = P.TopicProduceData(name="t", partition_data=[partition])
        return request(P(acks=1, timeout_ms=1000, topic_data=[topic]), 9)

    F = FetchRequest

    def fetch(max_bytes):
        partition = F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=max_bytes)
        return request(
            F(max_wait_ms=0, min_bytes=1, max_bytes=50 << 20, session_epoch=-1,
              topics=[F.FetchTopic(topic="t", partitions=[partition])]),
            11,
        )  # fmt: skip

    small, big = batch(150), batch(5000)
    for _ in range(100):
        exchange(produce(small))
    for _ in range(5):
        exchange(fetch(1 << 20))
    make = {
        "produce": lambda: produce(small),
        "producebig": lambda: produce(big),
        "fetch": lambda: fetch(1 << 20),
        "fetchsmall": lambda: fetch(1),
    }[mode]
    frames = [make() for _ in range(n)]
    for frame in frames:
        exchange(frame)
    s.close()


async def serve(mode, n):
    from fastkwire.broker import Broker

    broker = Broker([("127.0.0.1", 0)])
    await broker.start()
    port = next(iter(broker.addresses.values()))[1]
    child = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--client", str(port), mode, str(n)
    )
    await child.wait()
    await broker.close()
    if child.returncode:
        raise RuntimeError(f"the client failed ({child.returncode})")


def run(mode, n):
    """The CPU seconds of one broker run of `n` requests (start-up included)."""
    import uvloop

    loop = uvloop.new_event_loop()
    try:
        start = time.process_time()
        loop.run_until_complete(serve(mode, n))
        return time.process_time() - start
    finally:
        loop.close()


def instructions(mode, n):
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "callgrind.out")
        subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
             sys.executable, __file__, "--once", mode, str(n)],
            check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        with open(out) as f:
            return int(re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M).group(1))


def main():
    if sys.argv[1:2] == ["--client"]:
        return client(int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))
    if sys.argv[1:2] == ["--once"]:
        return run(sys.argv[2], int(sys.argv[3]))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("modes", nargs="+", choices=MODES)
    parser.add_argument("--requests", type=int, default=None)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--callgrind", action="store_true")
    args = parser.parse_args()
    for mode in args.modes:
        if args.callgrind:
            n = args.requests or 200
            per = (instructions(mode, n) - instructions(mode, 0)) / n
            print(f"{mode:>11}: {per / 1000:,.0f}K instructions a request")
        else:
            n = args.requests or (300 if mode in ("producebig", "fetch") else 3000)
            pairs = [(run(mode, n), run(mode, 0)) for _ in range(args.repeat)]
            per = statistics.median(a - b for a, b in pairs) / n
            print(f"{mode:>11}: {per * 1e6:,.1f} us of CPU a request")


if __name__ == "__main__":
    main()

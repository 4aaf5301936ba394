"""aiokafka's own clients end to end, stock and with fastkwire.aiokafka: the client
process's CPU time per record against a fast broker of our own in another process.

    python benchmarks/aiokafka_clients.py [--records N] [--rounds R] [--only NAME ...]

The broker (`python benchmarks/aiokafka_clients.py --serve`) answers from prebuilt parts:
every Fetch gets, for each partition asked, the same 500-record batch (12-byte keys,
100-byte values, uncompressed) with its base offset set to the offset asked for (the
CRC does not cover it), so the consumer never waits on the broker; Produce, ListOffsets,
Metadata and ApiVersions get their answers made once. With --big-metadata every Metadata
answer lists 1,000 topics x 10 partitions.

Each measurement runs in a fresh child process (stock, then accelerated, alternating R
times; the best of each is reported). CPU is the child's user+system time over the
measured part only: from the consumer's first records to the Nth, the producer's first
send() to its flush(), or the Metadata calls alone.

With --instructions the clients run under valgrind's callgrind instead, each at N and at
N/10 records, and the difference over the 0.9N records between them is reported: user
instructions a record, steady on a busy machine (the kernel's share and cache misses are
not in them). The consumer's counts repeat closely; the producer's and `async for`'s
move with how many event-loop turns the client's slowness under callgrind makes.
"""

import argparse
import asyncio
import json
import os
import struct
import subprocess
import sys
import time

PARTITIONS = 4
BATCH_RECORDS = 500

# ---- the broker -----------------------------------------------------------------------


def prebuilt_batch():
    """500 records as aiokafka's own builder writes them (keys and values seeded)."""
    import random

    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    rng = random.Random(1)
    builder = DefaultRecordBatchBuilder(2, 0, 0, -1, -1, -1, 1 << 22)
    for i in range(BATCH_RECORDS):
        builder.append(i, 1_700_000_000_000 + i, rng.randbytes(12), rng.randbytes(100), [])
    return bytes(builder.build())


def serve(port_file, big_metadata):
    import fastkwire as fk

    versions = {18: (0, 2), 3: (0, 5), 1: (0, 4), 0: (0, 7), 2: (0, 1)}
    batch = bytearray(prebuilt_batch())
    server_port = []

    def metadata(request, version):
        host = fk.MetadataResponse.MetadataResponseBroker(
            node_id=0, host="127.0.0.1", port=server_port[0], rack=None
        )
        if big_metadata:
            names = [f"topic-{i:04d}" for i in range(1000)]
            counts = 10
        else:
            names = [t.name for t in request.topics] if request.topics else ["bench"]
            counts = PARTITIONS
        topics = [
            fk.MetadataResponse.MetadataResponseTopic(
                error_code=0,
                name=name,
                is_internal=False,
                partitions=[
                    fk.MetadataResponse.MetadataResponsePartition(
                        error_code=0,
                        partition_index=p,
                        leader_id=0,
                        replica_nodes=[0, 1, 2],
                        isr_nodes=[0, 1, 2],
                        offline_replicas=[],
                    )
                    for p in range(counts)
                ],
            )
            for name in names
        ]
        return fk.MetadataResponse(
            brokers=[host], cluster_id="bench", controller_id=0, topics=topics
        )

    def fetch(request, version):
        topics = []
        for topic in request.topics:
            parts = []
            for p in topic.partitions:
                struct.pack_into(">q", batch, 0, p.fetch_offset)
                parts.append(
                    fk.FetchResponse.PartitionData(
                        partition_index=p.partition,
                        error_code=0,
                        high_watermark=1 << 40,
                        last_stable_offset=1 << 40,
                        aborted_transactions=[] if version >= 4 else None,
                        records=bytes(batch),
                    )
                )
            topics.append(
                fk.FetchResponse.FetchableTopicResponse(topic=topic.topic, partitions=parts)
            )
        return fk.FetchResponse(responses=topics)

    def list_offsets(request, version):
        return fk.ListOffsetsResponse(
            topics=[
                fk.ListOffsetsResponse.ListOffsetsTopicResponse(
                    name=t.name,
                    partitions=[
                        fk.ListOffsetsResponse.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=0,
                            old_style_offsets=[0] if version == 0 else [],
                            timestamp=-1,
                            offset=0,
                        )
                        for p in t.partitions
                    ],
                )
                for t in request.topics
            ]
        )

    offsets = {}

    def produce(request, version):
        out = []
        for t in request.topic_data:
            parts = []
            for p in t.partition_data:
                base = offsets.get((t.name, p.index), 0)
                count = struct.unpack_from(">i", p.records, 57)[0] if p.records else 0
                offsets[t.name, p.index] = base + count
                parts.append(
                    fk.ProduceResponse.PartitionProduceResponse(
                        index=p.index, error_code=0, base_offset=base, log_append_time_ms=-1
                    )
                )
            out.append(
                fk.ProduceResponse.TopicProduceResponse(name=t.name, partition_responses=parts)
            )
        return fk.ProduceResponse(responses=out)

    def api_versions(request, version):
        return fk.ApiVersionsResponse(
            api_keys=[
                fk.ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(versions.items())
            ]
        )

    answers = {18: api_versions, 3: metadata, 1: fetch, 0: produce, 2: list_offsets}
    big = {}  # the big Metadata answer, encoded once per (version, correlation id) shape

    async def connection(reader, writer):
        try:
            while True:
                size = await reader.readexactly(4)
                frame = size + await reader.readexactly(struct.unpack(">i", size)[0])
                header, request = fk.decode_request(frame)
                key, version = header.request_api_key, header.request_api_version
                if key == 3 and big_metadata:
                    if version not in big:
                        big[version] = fk.encode_response(metadata(request, version), version, 0)
                    data = bytearray(big[version])
                    struct.pack_into(">i", data, 4, header.correlation_id)
                    writer.write(data)
                elif key == 0 and request.acks == 0:
                    produce(request, version)
                else:
                    writer.write(
                        fk.encode_response(
                            answers[key](request, version), version, header.correlation_id
                        )
                    )
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    async def main():
        server = await asyncio.start_server(connection, "127.0.0.1", 0)
        server_port.append(server.sockets[0].getsockname()[1])
        with open(port_file + ".tmp", "w") as f:
            f.write(str(server_port[0]))
        os.replace(port_file + ".tmp", port_file)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


class Broker:
    """The broker in a child process; .bootstrap is its address."""

    def __init__(self, big_metadata=False):
        import tempfile

        self.port_file = os.path.join(tempfile.mkdtemp(), "port")
        args = [sys.executable, __file__, "--serve", self.port_file]
        self.proc = subprocess.Popen(args + (["--big-metadata"] if big_metadata else []))
        deadline = time.monotonic() + 30
        while not os.path.exists(self.port_file):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the benchmark broker did not start")
            time.sleep(0.05)
        with open(self.port_file) as f:
            self.bootstrap = f"127.0.0.1:{f.read()}"

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


# ---- the clients ------------------------------------------------------------------------

CHILD = r"""
import asyncio, json, random, sys, time
mode, workload, bootstrap, n = sys.argv[1:5]
n = int(n)
if mode == "accelerated":
    import fastkwire.aiokafka
    fastkwire.aiokafka.install()
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

async def consume(how):
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False,
                         auto_offset_reset="earliest", fetch_max_bytes=1 << 24,
                         max_partition_fetch_bytes=1 << 22)
    await c.start()
    c.assign([TopicPartition("bench", p) for p in range(PARTITIONS)])
    seen = 0
    t0 = None
    if how == "getmany":
        while seen < n:
            got = sum(map(len, (await c.getmany(timeout_ms=1000, max_records=BATCH_RECORDS)).values()))
            if got and t0 is None:
                t0, first = time.process_time(), got
            seen += got
    else:
        async for msg in c:
            seen += 1
            if t0 is None:
                t0, first = time.process_time(), 1
            if seen >= n:
                break
    cpu = time.process_time() - t0
    await c.stop()
    return cpu, seen - first

async def produce():
    rng = random.Random(1)
    items = [(rng.randbytes(12), rng.randbytes(100)) for _ in range(n)]
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, max_batch_size=1 << 20,
                         max_request_size=1 << 24, acks=1)
    await p.start()
    await p.partitions_for("bench")
    t0 = time.process_time()
    for key, value in items:
        await p.send("bench", value, key=key)
    await p.flush()
    cpu = time.process_time() - t0
    await p.stop()
    return cpu, n

async def metadata():
    from aiokafka.conn import create_conn
    from aiokafka.protocol.metadata import MetadataRequest
    host, port = bootstrap.split(":")
    conn = await create_conn(host, int(port))
    await conn.send(MetadataRequest([]))  # warm
    t0 = time.process_time()
    for _ in range(n):
        await conn.send(MetadataRequest([]))
    cpu = time.process_time() - t0
    conn.close()
    return cpu, n

PARTITIONS, BATCH_RECORDS = int(sys.argv[5]), int(sys.argv[6])
work = {"getmany": lambda: consume("getmany"), "getone": lambda: consume("getone"),
        "produce": produce, "metadata": metadata}[workload]
cpu, count = asyncio.run(work())
print(json.dumps({"cpu": cpu, "n": count}))
"""

# name -> (label, records or calls per run given --records N, big Metadata broker)
WORKLOADS = {
    "getmany": ("`getmany()`, 500-record batches", lambda n: n, False),
    "getone": ("`async for` (getone)", lambda n: n // 2, False),
    "produce": ("producer, keyed, `send()` then `flush()`", lambda n: n // 2, False),
    "metadata": ("Metadata v5 1,000 x 10 through its connection", lambda n: 20, True),
}


def child(mode, workload, bootstrap, n):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, workload, bootstrap, str(n)]
        + [str(PARTITIONS), str(BATCH_RECORDS)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if out.returncode:
        raise RuntimeError(f"{mode} {workload} failed:\n{out.stderr[-3000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result["cpu"] / result["n"] * 1e6


def instructions(mode, workload, bootstrap, n):
    """User instructions a record: callgrind's totals at n and n // 10, differenced."""
    import re
    import tempfile

    totals = []
    for count in (n, n // 10):
        with tempfile.TemporaryDirectory() as tmp:
            out = subprocess.run(
                ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/out"]
                + [sys.executable, "-c", CHILD, mode, workload, bootstrap, str(count)]
                + [str(PARTITIONS), str(BATCH_RECORDS)],
                capture_output=True,
                text=True,
                timeout=3600,
            )
        found = re.search(r"Collected : (\d+)", out.stderr)
        if out.returncode or not found:
            raise RuntimeError(f"{mode} {workload} under callgrind failed:\n{out.stderr[-3000:]}")
        totals.append(int(found.group(1)))
    return (totals[0] - totals[1]) / (n - n // 10)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--only", nargs="*", choices=sorted(WORKLOADS), default=list(WORKLOADS))
    ap.add_argument(
        "--instructions",
        action="store_true",
        help="count user instructions a record under callgrind instead of timing (one round)",
    )
    ap.add_argument("--serve", metavar="PORT_FILE", help=argparse.SUPPRESS)
    ap.add_argument("--big-metadata", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        return serve(args.serve, args.big_metadata)
    if args.instructions:
        return count_instructions(args)
    brokers = {}
    best = {}
    try:
        for r in range(args.rounds):
            for name in args.only:
                label, count, big = WORKLOADS[name]
                if big not in brokers:
                    brokers[big] = Broker(big_metadata=big)
                for mode in ("stock", "accelerated"):
                    us = child(mode, name, brokers[big].bootstrap, count(args.records))
                    best[mode, name] = min(us, best.get((mode, name), us))
                    print(f"round {r + 1} {name} {mode}: {us:.2f} us", flush=True)
    finally:
        for broker in brokers.values():
            broker.close()
    print(
        f"\naiokafka, {args.records:,} records, best of {args.rounds} (client CPU per record, "
        f"per call for Metadata; load {os.getloadavg()[0]:.1f})\n"
    )
    print("| workload | stock | accelerated | less CPU |")
    print("|---|---|---|---|")
    for name in args.only:
        s, a = best["stock", name], best["accelerated", name]
        unit = "ms" if name == "metadata" else "us"
        scale = 1e-3 if name == "metadata" else 1
        print(
            f"| {WORKLOADS[name][0]} | {s * scale:.2f} {unit} | {a * scale:.2f} {unit} | {s / a:.2f}x |"
        )


def count_instructions(args):
    rows = []
    brokers = {}
    try:
        for name in args.only:
            label, count, big = WORKLOADS[name]
            if big not in brokers:
                brokers[big] = Broker(big_metadata=big)
            got = {}
            for mode in ("stock", "accelerated"):
                got[mode] = instructions(mode, name, brokers[big].bootstrap, count(args.records))
                print(f"{name} {mode}: {got[mode]:,.0f} instructions", flush=True)
            rows.append((label, got["stock"], got["accelerated"]))
    finally:
        for broker in brokers.values():
            broker.close()
    print(
        f"\naiokafka, {args.records:,} records, user instructions a record (per call for Metadata)\n"
    )
    print("| workload | stock | accelerated | fewer |")
    print("|---|---|---|---|")
    for label, s, a in rows:
        print(f"| {label} | {s:,.0f} | {a:,.0f} | {s / a:.2f}x |")


if __name__ == "__main__":
    main()

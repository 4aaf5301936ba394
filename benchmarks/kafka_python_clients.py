"""kafka-python 3's own clients end to end, stock and with fastkwire.kafka_python: the
client process's CPU time per record against a real broker (Tansu on 127.0.0.1).

    python benchmarks/kafka_python_clients.py [--records N] [--rounds R] [--linger-ms MS]
                                              [--batch-bytes B] [--max-records M] [--no-gc]

Each measurement runs in a fresh child process (stock, then accelerated, alternating R
times; the best of each is reported). The producer sends N records (12-byte keys,
100-byte values, the default partitioner over 8 partitions, linger 5 ms unless
--linger-ms says otherwise, batches of up to 1 MiB or --batch-bytes) and flushes; the
linger (or a small --batch-bytes, which holds a batch to a few dozen records however fast
the producer is) decides how many records each batch holds, so how much of the consumer's
work is per batch, and the accelerated consumer reports that count; the consumer, a fresh
group reading from the earliest offset, polls until it has N records. CPU is the child's user+system time from the first send (or the
consumer's first records) to the last record, so the broker's own time is not counted
and waiting costs nothing.
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

CHILD = r"""
import gc, json, os, random, sys, time
mode, role, bootstrap, topic, n, linger_ms, batch_bytes, collector, max_records = sys.argv[1:10]
n = int(n)
if collector == "off":
    gc.disable()
if mode == "accelerated":
    import fastkwire.kafka_python
    fastkwire.kafka_python.install()
from kafka import KafkaConsumer, KafkaProducer
rng = random.Random(1)
if role == "produce":
    items = [(rng.randbytes(12), rng.randbytes(100)) for _ in range(n)]
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=int(linger_ms), batch_size=int(batch_bytes), acks=1,
                      max_request_size=1 << 24)
    p.partitions_for(topic)
    t0 = time.process_time()
    for key, value in items:
        p.send(topic, key=key, value=value)
    p.flush()
    cpu = time.process_time() - t0
    p.close()
else:
    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, group_id=f"g-{os.getpid()}",
                      auto_offset_reset="earliest", enable_auto_commit=False,
                      fetch_max_bytes=1 << 24, max_partition_fetch_bytes=1 << 22)
    seen = 0
    t0 = None  # from the first records (the group join and first metadata are not counted)
    deadline = time.monotonic() + 120
    while seen < n and time.monotonic() < deadline:
        got = sum(len(records) for records in c.poll(timeout_ms=500, max_records=int(max_records)).values())
        if got and t0 is None:
            t0, first = time.process_time(), got
        seen += got
    cpu = time.process_time() - t0
    c.close()
    assert seen >= n, (seen, n)
    n = seen - first
batches = None
if mode == "accelerated" and role == "consume":
    from fastkwire import _kafka_python
    batches = _kafka_python.fast_batches()
print(json.dumps({"cpu": cpu, "n": n, "batches": batches}))
"""


def child(
    mode, role, bootstrap, topic, n, linger_ms, batch_bytes, collector, max_records, per_batch=None
):
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            CHILD,
            mode,
            role,
            bootstrap,
            topic,
            str(n),
            str(linger_ms),
            str(batch_bytes),
            collector,
            str(max_records),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["batches"] and per_batch is not None:
        per_batch.append(n / result["batches"])
    return result["cpu"] / result["n"] * 1e6


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument(
        "--linger-ms", type=int, default=5, help="the producer's linger.ms (batch sizes)"
    )
    ap.add_argument(
        "--batch-bytes",
        type=int,
        default=1 << 20,
        help="the producer's batch_size (4500: about 34 records a batch)",
    )
    ap.add_argument(
        "--max-records",
        type=int,
        default=100_000,
        help="the consumer's poll(max_records=...) (kafka-python's own default is 500)",
    )
    ap.add_argument(
        "--no-gc",
        action="store_true",
        help="the cyclic collector off in the clients (to see what it costs; not a workload)",
    )
    args = ap.parse_args()
    from broker import running_tansu
    from kafka.admin import KafkaAdminClient, NewTopic

    broker_gen = running_tansu()
    broker = next(broker_gen)
    try:
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
        best = {}
        per_batch = []
        for r in range(args.rounds):
            for mode in ("stock", "accelerated"):
                topic = f"bench-{r}-{mode}-{int(time.time())}"
                admin.create_topics([NewTopic(topic, 8, 1)])
                collector = "off" if args.no_gc else "on"
                run = (
                    broker.bootstrap,
                    topic,
                    args.records,
                    args.linger_ms,
                    args.batch_bytes,
                    collector,
                    args.max_records,
                )
                produce = child(mode, "produce", *run)
                consume = child(mode, "consume", *run, per_batch=per_batch)
                for role, us in (("produce", produce), ("consume", consume)):
                    best[mode, role] = min(us, best.get((mode, role), us))
                print(
                    f"round {r + 1} {mode}: produce {produce:.2f} us/record, consume {consume:.2f} us/record",
                    flush=True,
                )
        admin.close()
    finally:
        broker_gen.close()
    print(
        f"\n{args.records:,} records, linger {args.linger_ms} ms, batch_size {args.batch_bytes:,}"
        f" ({sum(per_batch) / max(len(per_batch), 1):.0f} records a batch), polls of up to"
        f" {args.max_records:,} records, best of {args.rounds}"
        f" (client CPU per record; load {os.getloadavg()[0]:.1f}"
        f"{'; the collector off' if args.no_gc else ''})\n"
    )
    print("| client | stock | accelerated | less CPU |")
    print("|---|---|---|---|")
    for role, label in (("consume", "KafkaConsumer"), ("produce", "KafkaProducer")):
        s, a = best["stock", role], best["accelerated", role]
        print(f"| {label} | {s:.2f} us | {a:.2f} us | {s / a:.2f}x |")


if __name__ == "__main__":
    main()

"""Instructions a record and a batch that kafka-python's fetcher spends reading small
batches, stock and with fastkwire.kafka_python: callgrind counts, steady on a busy machine.

    python benchmarks/kafka_python_batches.py [--batches 300] [--records 34]

`Fetcher.PartitionRecords(0, tp, MemoryRecords(data)).take()` over BATCHES batches of
RECORDS records each (12-byte keys, 100-byte values, no headers, as kafka-python's own
producer writes them), and over one batch of the same records, with the collector on.
Each count is the difference between a run making four takes and one making one, so
start-up and preparation are not in it. Needs valgrind.
"""

import argparse
import re
import subprocess
import sys

CHILD = r"""
import gc, os, random, sys
mode, takes, batches, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
if mode == "accelerated":
    import fastkwire.kafka_python
    fastkwire.kafka_python.install()
from kafka.consumer.fetcher import Fetcher
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder
from kafka.structs import TopicPartition
rng = random.Random(1)
parts = []
for b in range(batches):
    builder = MemoryRecordsBuilder(2, 0, 1 << 26, offset=b * per)
    for i in range(per):
        builder.append(1_700_000_000_000 + i, rng.randbytes(12), rng.randbytes(100), [])
    builder.close()
    parts.append(bytes(builder.buffer()))
data = b"".join(parts)
tp = TopicPartition("topic", 0)
held = []
for _ in range(takes):
    held.append(Fetcher.PartitionRecords(0, tp, MemoryRecords(data)).take())
assert all(len(h) == batches * per for h in held)
os._exit(0)
"""


def count(mode, takes, batches, per):
    out = subprocess.run(
        ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", sys.executable]
        + ["-c", CHILD, mode, str(takes), str(batches), str(per)],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(re.search(r"refs:\s+([\d,]+)", out.stderr).group(1).replace(",", ""))


def per_record(mode, batches, per):
    return (count(mode, 4, batches, per) - count(mode, 1, batches, per)) / (3 * batches * per)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=300)
    ap.add_argument("--records", type=int, default=34, help="records a batch")
    args = ap.parse_args()
    n = args.batches * args.records
    print("| take() | stock | accelerated | ratio |")
    print("|---|---:|---:|---:|")
    rows = {}
    for label, batches, per in (
        (f"{args.batches} batches of {args.records}, a record", args.batches, args.records),
        (f"one batch of {n:,}, a record", 1, n),
    ):
        s, a = per_record("stock", batches, per), per_record("accelerated", batches, per)
        rows[batches] = (s, a)
        print(f"| {label} | {s:,.0f} | {a:,.0f} | {s / a:.1f}x |")
    # stock's records cost more in one huge batch (its collector's work grows with it), so
    # only the accelerated difference is a batch's own cost
    (_, a_small), (_, a_one) = rows[args.batches], rows[1]
    print(f"| a batch, beyond its records' work | | {(a_small - a_one) * args.records:,.0f} | |")
    print(f"\n(callgrind instructions, collector on; Python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()

"""A hostile broker against fastkwire's Kafka reader (`read_kafka`, through `read_ranges`).

Each case (one seed) builds a small topic (1-3 partitions, 0-400 records, batches of random
size (up to 400 records: larger than a small block), some gzip-compressed) served on 127.0.0.1 by tests/log_broker.py, with faults drawn
from the seed: Metadata answers that repeat, leave out, or lead nowhere (no leader, an
unknown node, a leader per partition), ListOffsets answers that leave out, repeat,
contradict (earliest after latest, negative, 2**62), or say "none" for a time, Fetch
answers that leave out, repeat, regress, overlap, cut, claim a watermark of 2**62, ignore
max_bytes, come slowly, close the connection, carry an error code, a decompression bomb,
many batches each just under what an answer may decompress to, or aborted transactions
(unsorted, repeated, up to 2,000) of producers the log has none of. Half the cases read
under read_committed.
Then it reads a random range with a random block_size, and checks the reader's contract
as invariants:
- the read ends within its deadline (DEADLINE s, a thread that outlives it is a finding);
- the process's peak resident memory grows by at most MEMORY_SLACK + 4 blocks, or 4 times
  the largest batch (decompressed: ONE_BATCH_RATIO times its size) where one batch is
  larger than the block (a broker sends it whole, KIP-74);
- a read that succeeds has every row inside the range asked, each offset once; and when
  the broker's faults kept the records' bytes true, exactly the rows of the log;
- no RecordBatch it yields holds more key and value bytes than an answer may, or than half
  of block_size (what an answer's batches may decompress to), or than one batch larger
  than the block decompresses to, read_committed or not;
- a read that fails raises one of the reader's errors (KafkaClientError and its kinds, or
  DecodeError), whose message names a partition or a broker.
Anything else is a finding: printed with the seed and the faults, and the run exits 1.

    python fuzz/hostile_broker.py --seconds 45          # the CI smoke
    python fuzz/hostile_broker.py --long                # 20 minutes (HOSTILE_BROKER_SECONDS)
    python fuzz/hostile_broker.py --seed 17 --cases 1   # replay one case
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import resource
import struct
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

import fastkwire  # noqa: E402
import pyarrow as pa  # noqa: E402 - imported before memory is measured

from fastkwire import kafka_arrow  # noqa: E402
from fastkwire import (  # noqa: E402
    FetchRequest,
    FetchResponse,
    ListOffsetsRequest,
    MetadataRequest,
    MetadataResponse,
    records,
)
from fastkwire.connection_errors import KafkaClientError  # noqa: E402
from fastkwire.errors import DecodeError  # noqa: E402
from fastkwire.records import Record  # noqa: E402

from log_broker import CLOSE, LogBroker, PartitionLog  # noqa: E402

FETCH, LIST_OFFSETS, METADATA = (
    FetchRequest.API_KEY,
    ListOffsetsRequest.API_KEY,
    MetadataRequest.API_KEY,
)
DEADLINE = 40.0  # s: the reader's own bound with request_timeout_ms=1000 is about 13 s
MEMORY_SLACK = 96 << 20
TOPIC = "h"

METADATA_FAULTS = [
    "metadata:" + f
    for f in ("repeat", "missing", "no_leader", "unknown_leader", "many_leaders", "error")
]
OFFSET_FAULTS = [
    "offsets:" + f
    for f in ("missing", "repeat", "contradict", "negative", "huge", "no_time", "error")
]
FETCH_FAULTS = [
    "fetch:" + f
    for f in (
        "missing",
        "repeat",
        "regress",
        "overlap",
        "cut",
        "enormous",
        "ignore_max",
        "slow",
        "close",
        "error",
        "bomb",
        "small_bombs",
        "aborted",
    )
]
# Faults that change what the broker says the log is (its partitions, its offsets, its
# records' bytes): no reader can tell, so a read may then succeed with other rows; they
# must still be inside the range asked (where it was given as offsets), each once, and
# each row as the log has it (but after a bomb, whose rows are the bomb's).
LYING = {
    "metadata:missing",
    "offsets:contradict",
    "offsets:negative",
    "offsets:huge",
    "offsets:no_time",
    "fetch:enormous",
    "fetch:bomb",
    "fetch:small_bombs",
}
BOMBS = {"fetch:bomb", "fetch:small_bombs"}


class Finding(Exception):
    pass


def make_logs(rng):
    """({key: PartitionLog}, {partition: records}, the largest batch's bytes). A partition
    of 400 records has batches of up to 400 records: larger than some blocks."""
    logs, truth, largest = {}, {}, 0
    for p in range(rng.randint(1, 3)):
        n = rng.choice([0, 1, 5, 20, 80, 400])
        batches, at = [], 0
        while at < n:
            size = min(rng.randint(1, 400 if n == 400 else 15), n - at)
            recs = [
                Record(
                    key=b"k%d" % (at + i), value=b"p%d-%d" % (p, at + i), timestamp=1000 + at + i
                )
                for i in range(size)
            ]
            codec = "gzip" if rng.random() < 0.3 else "none"
            batches.append(records.write_batch(recs, base_offset=at, compression=codec))
            largest = max(largest, len(batches[-1]))
            at += size
        logs[(TOPIC, p)] = PartitionLog(batches)
        truth[p] = n
    return logs, truth, largest


@functools.lru_cache(maxsize=4)
def _bomb(size):
    return records.write_batch([Record(value=bytes(size))], compression="gzip")


def bomb_batch(base, size):
    """A gzip batch of one record of `size` zero bytes at offset `base` (the base offset
    is outside the batch's CRC: one compressed batch serves every offset)."""
    return struct.pack(">q", base) + _bomb(size)[8:]


class Faults:
    """The fault function for LogBroker: each answer mutated with the case's faults."""

    def __init__(self, rng, broker, chosen, rate, block):
        self.rng, self.broker, self.chosen, self.rate = rng, broker, chosen, rate
        self.most = max(block // 2, 1024)  # what an answer's batches may decompress to
        self.lock = threading.Lock()

    def pick(self, kinds):
        with self.lock:
            options = [k for k in kinds if k in self.chosen]
            if not options or self.rng.random() > self.rate:
                return None
            return self.rng.choice(options).split(":")[1], self.rng.random()

    def __call__(self, key, version, request):
        b = self.broker
        if key == METADATA:
            fault = self.pick(METADATA_FAULTS)
            if fault is None:
                return None
            kind, x = fault
            answer = b._metadata(request)
            for t in answer.topics:
                if not t.partitions:
                    continue
                victim = t.partitions[int(x * len(t.partitions)) % len(t.partitions)]
                if kind == "repeat":
                    t.partitions = t.partitions + t.partitions[::-1]
                elif kind == "missing":
                    t.partitions = [p for p in t.partitions if p is not victim]
                elif kind == "no_leader":
                    victim.leader_id = -1
                elif kind == "unknown_leader":
                    victim.leader_id = 4242
                elif kind == "many_leaders":
                    answer.brokers = [
                        MetadataResponse.MetadataResponseBroker(
                            node_id=i, host="127.0.0.1", port=b.port
                        )
                        for i in range(100, 300)
                    ]
                    for p in t.partitions:
                        p.leader_id = 100 + (p.partition_index * 7) % 200
                elif kind == "error":
                    t.error_code = 5  # LEADER_NOT_AVAILABLE
            return answer
        if key == LIST_OFFSETS:
            fault = self.pick(OFFSET_FAULTS)
            if fault is None:
                return None
            kind, x = fault
            answer = b._list_offsets(request)
            for t in answer.topics:
                if not t.partitions:
                    continue
                victim = t.partitions[int(x * len(t.partitions)) % len(t.partitions)]
                if kind == "missing":
                    t.partitions = [p for p in t.partitions if p is not victim]
                elif kind == "repeat":
                    t.partitions = t.partitions + t.partitions
                elif kind == "contradict":
                    victim.offset += 1000
                elif kind == "negative":
                    victim.offset = -7
                elif kind == "huge":
                    victim.offset = 2**62
                elif kind == "no_time":
                    victim.offset, victim.timestamp = 0, -1
                elif kind == "error":
                    victim.error_code = 6  # NOT_LEADER_OR_FOLLOWER
            return answer
        if key == FETCH:
            fault = self.pick(FETCH_FAULTS)
            if fault is None:
                return None
            kind, x = fault
            if kind == "close":
                return CLOSE
            if kind == "slow":
                time.sleep(0.05 + 0.25 * x)
                return None
            if kind == "ignore_max":
                request.max_bytes = 1 << 30
                for t in request.topics:
                    for p in t.partitions:
                        p.partition_max_bytes = 1 << 30
                return None
            answer = b._fetch(request)
            for t, asked in zip(answer.responses, request.topics):
                if not t.partitions:
                    continue
                i = int(x * len(t.partitions)) % len(t.partitions)
                victim, offset = t.partitions[i], asked.partitions[i].fetch_offset
                log = b.logs.get((t.topic, victim.partition_index))
                if kind == "missing":
                    t.partitions = [p for p in t.partitions if p is not victim]
                elif kind == "repeat":
                    t.partitions = t.partitions + [victim]
                elif kind == "regress" and log is not None:
                    victim.records = bytes(log.read(max(offset - 7, log.log_start), 1 << 20))
                elif kind == "overlap" and log is not None:
                    earlier = bytes(log.read(max(offset - 3, log.log_start), 1))
                    victim.records = bytes(victim.records) + earlier
                elif kind == "cut":
                    data = bytes(victim.records)
                    victim.records = data[: int(len(data) * x)]
                elif kind == "enormous":
                    victim.high_watermark = victim.last_stable_offset = 2**62
                elif kind == "error":
                    victim.error_code = self.rng.choice([1, 3, 5, 6, 74, 99])
                elif kind == "bomb":
                    # batches just under the 1 MiB a batch could once take each
                    victim.records = b"".join(
                        bomb_batch(offset + k, 1_000_000) for k in range(1 + int(x * 200))
                    )
                elif kind == "small_bombs":
                    # many batches each just under what the answer may decompress to
                    victim.records = b"".join(
                        bomb_batch(offset + k, self.most - 64) for k in range(1 + int(x * 200))
                    )
                elif kind == "aborted":
                    # of producers the log has none of: unsorted, repeated, maybe many
                    n = self.rng.choice([1, 5, 50, 2000])
                    pairs = [(1000 + self.rng.randrange(5), self.rng.randrange(-5, 200))]
                    pairs += [
                        (1000 + self.rng.randrange(5), self.rng.randrange(-5, 200))
                        for _ in range(n - 1)
                    ]
                    victim.aborted_transactions = [
                        FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                        for pid, first in pairs
                    ]
            return answer
        return None


def peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def names_something(text):
    return "partition" in text or "127.0.0.1" in text or "broker" in text or f"'{TOPIC}'" in text


def check(seed, verbose=False):
    """One case; raises Finding when the contract is broken."""
    rng = random.Random(seed)
    logs, truth, largest = make_logs(rng)
    chosen = set(rng.sample(METADATA_FAULTS + OFFSET_FAULTS + FETCH_FAULTS, rng.randint(0, 3)))
    rate = rng.choice([0.1, 0.3, 1.0])
    block = rng.choice([1024, 4096, 65536])
    start = rng.choice(["earliest", 0, 3, 30])
    end = rng.choice(["latest", "latest", 1, 10, 20])
    if isinstance(start, int) and isinstance(end, int) and start > end:
        start, end = end, start
    asked_twice = rng.random() < 0.2
    isolation = rng.choice(["read_uncommitted", "read_committed"])
    broker = LogBroker(logs)
    broker.fault = Faults(random.Random(seed * 7919 + 1), broker, chosen, rate, block)
    what = (
        f"seed {seed}: faults {sorted(chosen)} at rate {rate}, block {block}, start {start!r}, "
        f"end {end!r}, {isolation}"
    )
    box = {}
    # What one RecordBatch may hold: an answer's records (at most the answer's limit), or
    # what its batches decompress to (at most half of the block); or one batch larger
    # than the block, decompressed to at most ONE_BATCH_RATIO times its size.
    most = max(block // 2, 1024) + 4096 + 256 * 3
    bound = max(block, kafka_arrow.ONE_BATCH_RATIO * largest)
    most = max(most, bound)

    def run():
        try:
            pieces = list(
                fastkwire.iter_kafka(
                    [TOPIC, TOPIC] if asked_twice else TOPIC,
                    bootstrap_servers=broker.bootstrap,
                    start_offset=start,
                    end_offset=end,
                    block_size=block,
                    isolation_level=isolation,
                    request_timeout_ms=1000,
                )
            )
            box["sizes"] = [
                sum(b.size for c in ("key", "value") for b in p.column(c).buffers() if b)
                for p in pieces
            ]
            box["table"] = pa.Table.from_batches(
                pieces or [kafka_arrow.empty_batch()], schema=kafka_arrow.SCHEMA
            )
        except BaseException as exc:  # noqa: BLE001 - judged below
            box["error"] = exc

    before = peak_rss()
    thread = threading.Thread(target=run, daemon=True)
    began = time.monotonic()
    thread.start()
    thread.join(DEADLINE)
    took = time.monotonic() - began
    broker.close()
    if thread.is_alive():
        raise Finding(f"{what}: still reading after {DEADLINE} s")
    grew = peak_rss() - before
    if grew > MEMORY_SLACK + 4 * bound:
        raise Finding(f"{what}: peak memory grew by {grew >> 20} MiB")
    if "error" in box:
        exc = box["error"]
        if not isinstance(exc, (KafkaClientError, DecodeError)):
            raise Finding(f"{what}: {type(exc).__name__}: {exc}") from exc
        if not names_something(str(exc)):
            raise Finding(f"{what}: an error that names nothing: {type(exc).__name__}: {exc}")
        if verbose:
            print(f"{what}: {type(exc).__name__}: {str(exc)[:160]} ({took:.1f} s)")
        return "error"
    if max(box["sizes"], default=0) > most:
        raise Finding(f"{what}: a RecordBatch of {max(box['sizes'])} bytes, over {most}")
    table = box["table"]
    rows = list(zip(table.column("partition").to_pylist(), table.column("offset").to_pylist()))
    if len(set(rows)) != len(rows):
        raise Finding(f"{what}: a row read twice")
    lying = chosen & LYING
    for p, n in truth.items():
        lo = 0 if start == "earliest" else start
        hi = n if end == "latest" else end
        mine = sorted(o for q, o in rows if q == p)
        if any(not lo <= o < hi for o in mine) and not (lying and "latest" == end):
            raise Finding(f"{what}: partition {p} has rows outside [{lo}, {hi})")
        if not lying and mine != list(range(lo, min(hi, n))):
            raise Finding(f"{what}: partition {p} read {len(mine)} rows, not those of [{lo}, {hi})")
    if not chosen & BOMBS:
        for value, (p, o) in zip(table.column("value").to_pylist(), rows):
            if value != b"p%d-%d" % (p, o):
                raise Finding(f"{what}: partition {p} offset {o} has value {value!r}")
    if verbose:
        print(f"{what}: {len(rows)} rows ({took:.1f} s)")
    return "rows"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--seconds", type=float, default=float(os.environ.get("HOSTILE_BROKER_SECONDS", 45))
    )
    ap.add_argument("--cases", type=int, default=None, help="stop after this many cases")
    ap.add_argument("--seed", type=int, default=1, help="the first case's seed")
    ap.add_argument(
        "--long", action="store_true", help="run 20 minutes (or HOSTILE_BROKER_SECONDS)"
    )
    ap.add_argument("-v", "--verbose", action="store_true")
    args = ap.parse_args(argv)
    seconds = args.seconds
    if args.long and "HOSTILE_BROKER_SECONDS" not in os.environ:
        seconds = 1200
    stop = time.monotonic() + seconds
    counts, findings, seed = {"rows": 0, "error": 0}, [], args.seed
    while time.monotonic() < stop and (
        args.cases is None or sum(counts.values()) + len(findings) < args.cases
    ):
        try:
            counts[check(seed, args.verbose)] += 1
        except Finding as f:
            findings.append(str(f))
            print("FINDING", f, flush=True)
        seed += 1
    total = sum(counts.values()) + len(findings)
    print(
        f"hostile broker: {total} cases (seeds {args.seed}-{seed - 1}): {counts['rows']} read, "
        f"{counts['error']} named errors, {len(findings)} findings"
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

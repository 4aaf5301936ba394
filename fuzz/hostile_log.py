"""Hostile Kafka log segments against the segment readers' contract.

    python fuzz/hostile_log.py --loop 300 --seed 1     # the short run (CI, about 20 s)
    python fuzz/hostile_log.py --long --seed 7          # 20,000 logs

Each seed builds a partition directory the way a broker lays one out (segments named by
their base offset, an offset index beside each), from batches of every codec, transactions
committed, aborted and left open, compaction-like gaps and decompression bombs (a batch of
about 100 bytes of zstd holding up to 1 MB of zeros, under its batch's cap). Then, at random, it damages the log: the last
segment cut off, zero-filled past its end (log.preallocate), torn (a batch's first bytes,
then zeros), batches swapped, repeated or rebased (their base offset is outside the CRC),
segments renamed to overlap, bytes flipped or zeroed in the middle, the offset index
replaced by garbage, a batch that decompresses past its cap (4 MB from 150 bytes). It reads the log with random offsets, block size, `truncated` and
isolation level, through plan_segments and read_task (what read_segments and the
distributed readers run), and checks the contract as invariants:

- it ends within DEADLINE seconds;
- no block decompresses past its budget: the batches a call read before its last one
  decompressed to less than block_size bytes, and Python's own allocations (numpy's
  columns among them, through tracemalloc) peak below MEMORY_FACTOR times a block and the
  largest batch;
- the outcome is rows or a SegmentError naming one of the partition's segment files and
  a byte offset inside it: any other exception is a finding;
- rows are in [start_offset, end_offset), in strictly increasing offsets (none twice);
- where the damage leaves the log's meaning known (no damage, a garbage index, or a tail
  cut, zero-filled or torn), the rows are exactly the ones asked for: what a model of
  Kafka's read_committed/read_uncommitted consumer gives on the batches that survive;
  a damaged tail under truncated="error" must be an error, not fewer rows;
- the whole run's peak RSS stays under MAX_RSS (every log is a few MB at most).
"""

import argparse
import os
import random
import resource
import shutil
import signal
import struct
import sys
import tempfile
import time
import tracemalloc
from contextlib import contextmanager

from fastkwire import _arrow_rows, _compression, records, segments
from fastkwire.records import Record
from fastkwire.segments import SegmentError

try:
    import cramjam  # noqa: F401
except ImportError:
    CODECS = ["none"]
else:
    CODECS = ["none", "none", "gzip", "snappy", "lz4", "zstd"]

DEADLINE = 20.0  # seconds a log may take to read
MEMORY_FACTOR = 8  # Python's peak allocations per (block + largest batch), and SLACK
SLACK = 8 << 20
MAX_RSS = 1 << 30  # the whole run's peak resident memory
BLOCK_SIZES = (64, 200, 1000, 4096, 65536, 1 << 20)
TOPIC, PARTITION = "orders", 3


class Finding(AssertionError):
    """The readers broke their contract on this seed."""


# ---------------------------------------------------------------- a partition's log


class Batch:
    __slots__ = ("base", "last", "rows", "data", "producer", "txn", "control", "abort")

    def __init__(self, base, rows, data, producer=-1, txn=False, control=False, abort=False):
        self.base, self.rows, self.data = base, rows, data
        self.last = rows[-1][0] if rows else base
        self.producer, self.txn, self.control, self.abort = producer, txn, control, abort


def _batch(rng, base, producer=-1, txn=False):
    n = rng.randrange(1, 12)
    offsets, o = [], base
    for _ in range(n):
        offsets.append(o)
        o += 1 if rng.random() < 0.9 else rng.randrange(2, 5)  # compacted gaps
    if rng.random() < 0.06:  # a bomb: ~100 bytes of zstd, up to 1 MB of records
        offsets = offsets[: rng.randrange(1, 4)]
        size = rng.randrange(100_000, 1_000_000) // len(offsets)  # under the batch's cap
        recs = [Record(x, 1000 + x, None, bytes(size)) for x in offsets]
        codec = "zstd" if "zstd" in CODECS else "none"
    else:
        recs = [
            Record(
                x,
                1000 + x,
                None if rng.random() < 0.2 else b"k%d" % rng.randrange(5),
                b"%d|" % x + rng.randbytes(rng.randrange(0, 40)),
                [("h", rng.randbytes(3))] * rng.randrange(0, 2),
            )
            for x in offsets
        ]
        codec = rng.choice(CODECS)
    data = records.write_batch(
        recs,
        base_offset=base,
        compression=codec,
        producer_id=producer,
        producer_epoch=0 if producer >= 0 else -1,
        base_sequence=0 if producer >= 0 else -1,
        is_transactional=txn,
    )
    return Batch(base, [(r.offset, r.value) for r in recs], data, producer, txn)


def _marker(base, producer, abort):
    data = bytearray(
        records.write_batch(
            [Record(base, 1000 + base, struct.pack(">hh", 0, 0 if abort else 1), b"\0\0\0\0\0\5")],
            base_offset=base,
            producer_id=producer,
            producer_epoch=0,
            is_transactional=True,
        )
    )
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x20)
    struct.pack_into(">I", data, 17, records.crc32c(bytes(data[21:])))
    return Batch(base, [(base, None)], bytes(data), producer, True, True, abort)


def make_log(rng):
    """A partition's batches, in offset order, as a broker appends them."""
    out, offset, open_txns = [], rng.choice([0, 0, 7, 1 << 40]), set()
    for _ in range(rng.randrange(1, 25)):
        kind = rng.random()
        if kind < 0.15 and open_txns:
            producer = rng.choice(sorted(open_txns))
            open_txns.discard(producer)
            b = _marker(offset, producer, abort=rng.random() < 0.5)
        elif kind < 0.35:
            producer = rng.randrange(1, 4)
            open_txns.add(producer)
            b = _batch(rng, offset, producer, txn=True)
        else:
            b = _batch(rng, offset)
        out.append(b)
        offset = b.last + 1 + (rng.randrange(1, 4) if rng.random() < 0.1 else 0)
    return out


def expected_rows(batches, read_committed, start, end):
    """What Kafka's consumer reads of these batches: (offset, value) in [start, end)."""
    aborted, pending, stable = set(), {}, None
    for i, b in enumerate(batches):
        if b.control:
            for j in pending.pop(b.producer, []):
                if b.abort:
                    aborted.add(j)
        elif b.txn:
            pending.setdefault(b.producer, []).append(i)
    if read_committed and pending:
        stable = min(batches[js[0]].base for js in pending.values())
        end = stable if end is None else min(end, stable)
    rows = []
    for i, b in enumerate(batches):
        if b.control or (read_committed and i in aborted):
            continue
        rows += [
            r for r in b.rows if (start is None or r[0] >= start) and (end is None or r[0] < end)
        ]
    return rows


def lay_out(directory, batches, rng):
    """Segment files (and offset indexes) of the batches; returns [(path, [batch index])]."""
    os.makedirs(directory)
    limit = rng.choice([300, 2000, 10_000, 1 << 30])
    groups = []
    for i, b in enumerate(batches):
        if not groups or sum(len(batches[j].data) for j in groups[-1]) + len(b.data) > limit:
            groups.append([])
        groups[-1].append(i)
    files = []
    for group in groups:
        stem = os.path.join(directory, "%020d" % batches[group[0]].base)
        data, index = bytearray(), bytearray()
        for j in group:
            index += struct.pack(">ii", batches[j].last - batches[group[0]].base, len(data))
            data += batches[j].data
        with open(stem + ".log", "wb") as f:
            f.write(data)
        with open(stem + ".index", "wb") as f:
            f.write(index)
        files.append((stem + ".log", group))
    return files


# ---------------------------------------------------------------- damage


def damage(rng, files, batches):
    """Damages the files at random -> (what, the batches still meant to be read, or None
    when the damage leaves the log's meaning unknown, whether its tail was damaged)."""
    what = rng.choice(
        ["none"] * 6
        + ["index", "cut", "zeros", "torn", "swap", "repeat", "rebase", "rename", "flip", "hole"]
        + ["overcap"]
    )
    last_path, last_group = files[-1]
    data = bytearray(open(last_path, "rb").read())
    ends, at = [], 0
    for j in last_group:
        at += len(batches[j].data)
        ends.append(at)
    before_last = [j for _, g in files[:-1] for j in g]
    if what == "none":
        return what, batches, False
    if what == "index":
        path, _ = rng.choice(files)
        with open(path[:-4] + ".index", "wb") as f:
            f.write(rng.randbytes(rng.choice([8, 16, 80, 3])))
        return what, batches, False
    if what in ("cut", "torn"):
        cut = rng.randrange(0, len(data))
        tail = bytes(data[:cut]) + (bytes(rng.randrange(1, 5000)) if what == "torn" else b"")
        # A batch whose cut-off bytes were zeros is whole again under the zeros.
        kept = [j for j, end in zip(last_group, ends) if tail[:end] == data[:end]]
        _write(last_path, tail)
        torn = cut not in (0, *ends)  # else it ends on a batch boundary
        if what == "torn" and cut == 0:
            torn = True
        return what, [batches[j] for j in before_last + kept], torn or what == "torn"
    if what == "zeros":
        _write(last_path, bytes(data) + bytes(rng.randrange(1, 5000)))
        return what, batches, True
    path, group = rng.choice(files)
    data = bytearray(open(path, "rb").read())
    if what == "overcap" and "zstd" in CODECS:  # past its batch's cap: 4 MB from 150 bytes
        k = rng.randrange(len(group))
        base = batches[group[k]].base
        pieces = [batches[j].data for j in group]
        pieces[k] = records.write_batch(
            [Record(base, 1, None, bytes(4 << 20))], base_offset=base, compression="zstd"
        )
        _write(path, b"".join(pieces))
    elif what in ("swap", "repeat", "rebase") and len(group) >= 1:
        pieces = [batches[j].data for j in group]
        k = rng.randrange(len(pieces))
        if what == "swap" and len(pieces) > 1:
            k = min(k, len(pieces) - 2)
            pieces[k], pieces[k + 1] = pieces[k + 1], pieces[k]
        elif what == "repeat":
            pieces.insert(rng.randrange(len(pieces) + 1), pieces[k])
        else:
            piece = bytearray(pieces[k])
            struct.pack_into(
                ">q", piece, 0, rng.choice([0, -1, 5, 1 << 62, batches[group[0]].base])
            )
            pieces[k] = bytes(piece)
        _write(path, b"".join(pieces))
    elif what == "rename":
        base = int(os.path.basename(path)[:-4])
        new = max(0, base + rng.choice([-100, -3, -1, 1, 2, 1000]))
        stem = os.path.join(os.path.dirname(path), "%020d" % new)
        if not os.path.exists(stem + ".log"):
            os.rename(path, stem + ".log")
            os.rename(path[:-4] + ".index", stem + ".index")
    elif what == "flip" and data:
        for _ in range(rng.randrange(1, 4)):
            data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        _write(path, data)
    elif what == "hole" and data:
        start = rng.randrange(len(data))
        n = rng.randrange(1, 200)
        data[start : start + n] = bytes(len(data[start : start + n]))
        _write(path, data)
    return what, None, False


def _write(path, data):
    with open(path, "wb") as f:
        f.write(data)


# ---------------------------------------------------------------- reading, with the meters


class Meter:
    """Decompressed bytes of each batches_to_arrow call (each decompression's size)."""

    def __init__(self):
        self.calls = []  # [(budget, [sizes])]

    @contextmanager
    def installed(self):
        decompress, convert = _compression.decompress, _arrow_rows.batches_to_arrow

        def counted(*args):
            out = decompress(*args)
            if self.calls:
                self.calls[-1][1].append(len(out))
            return out

        def one_call(*args, **kwargs):
            self.calls.append((kwargs.get("decompressed_budget"), []))
            return convert(*args, **kwargs)

        _compression.decompress, _arrow_rows.batches_to_arrow = counted, one_call
        try:
            yield self
        finally:
            _compression.decompress, _arrow_rows.batches_to_arrow = decompress, convert


@contextmanager
def deadline(seconds, seed):
    def expired(signum, frame):
        raise Finding(f"seed {seed}: still reading after {seconds} s")

    old = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def read(directory, options):
    """The rows (offset, value) that plan_segments + read_task give, or the error."""
    rows = []
    for task in segments.plan_segments(directory, **options):
        for batch in segments.read_task(task):
            if set(batch.column("topic").to_pylist()) != {TOPIC}:
                raise Finding(f"rows of another topic: {batch.column('topic').unique()}")
            if set(batch.column("partition").to_pylist()) != {PARTITION}:
                raise Finding("rows of another partition")
            rows += zip(batch.column("offset").to_pylist(), batch.column("value").to_pylist())
    return rows


_warm = []


def _warm_up(root):
    """Read one small log before measuring: the first read imports what it uses (pyarrow's
    compute functions among them), which is not the reader's memory."""
    if not _warm:
        try:  # pyarrow imports pandas the first time it converts some arrays
            import pandas  # noqa: F401
        except ImportError:
            pass
        directory = os.path.join(root, "warm-0")
        lay_out(directory, make_log(random.Random(0)), random.Random(0))
        for level in ("read_uncommitted", "read_committed"):
            read(directory, {"isolation_level": level, "start_offset": 1, "end_offset": 5})
        shutil.rmtree(directory)
        _warm.append(True)


def check(seed, root):
    """One seed: build, damage, read, check. Returns a short account of the outcome."""
    _warm_up(root)
    rng = random.Random(seed)
    batches = make_log(rng)
    directory = os.path.join(root, f"{TOPIC}-{PARTITION}")
    files = lay_out(directory, batches, rng)
    what, meant, tail_damaged = damage(rng, files, batches)
    first, last = batches[0].base, batches[-1].last
    start = rng.choice([None, None, first, rng.randrange(first, last + 3)])
    end = rng.choice([None, None, rng.randrange(first, last + 3)])
    if start is not None and end is not None and start > end:
        start, end = end, start
    options = dict(
        start_offset=start,
        end_offset=end,
        block_size=rng.choice(BLOCK_SIZES),
        truncated=rng.choice(["error", "skip"]),
        isolation_level=rng.choice(["read_uncommitted", "read_committed"]),
    )
    meter = Meter()
    tracemalloc.start()
    began = time.monotonic()
    try:
        with deadline(DEADLINE, seed), meter.installed():
            rows = read(directory, options)
        error = None
    except SegmentError as e:
        rows, error = None, e
    except Finding:
        raise
    except Exception as e:  # noqa: BLE001 - anything else is what the fuzzer looks for
        raise Finding(f"seed {seed} ({what}, {options}): {type(e).__name__}: {e}") from e
    finally:
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    took = time.monotonic() - began
    where = f"seed {seed} ({what}, {options})"

    # Memory: each call stops after the batch that takes it to its budget.
    block, largest = options["block_size"], 0
    for budget, sizes in meter.calls:
        largest = max([largest, *sizes])
        if budget is not None and sizes and sum(sizes[:-1]) >= budget:
            raise Finding(f"{where}: a call decompressed {sum(sizes)} bytes past {budget}")
    bound = MEMORY_FACTOR * (block + largest) + SLACK
    if peak > bound:
        raise Finding(f"{where}: Python's allocations peaked at {peak} bytes, over {bound}")

    read_committed = options["isolation_level"] == "read_committed"
    want = None if meant is None else expected_rows(meant, read_committed, start, end)
    # Under truncated="error", a damaged tail must be an error, unless the rows asked for
    # end before it (then the rows are whole either way).
    must_fail = (
        want is not None
        and tail_damaged
        and options["truncated"] == "error"
        and want != expected_rows(batches, read_committed, start, end)
    )
    may_fail = want is None or (tail_damaged and options["truncated"] == "error")
    if error is not None:
        names = {os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log")}
        if error.file not in names or not 0 <= error.offset <= os.path.getsize(error.file):
            raise Finding(f"{where}: {error!r} names no place in the partition's files")
        if not may_fail:
            raise Finding(f"{where}: a log that reads raised {error}")
        return "error", took, peak / bound
    offsets = [o for o, _ in rows]
    if any(b <= a for a, b in zip(offsets, offsets[1:])):
        raise Finding(f"{where}: rows out of order or twice: {offsets[:50]}")
    if offsets and (
        (start is not None and offsets[0] < start) or (end is not None and offsets[-1] >= end)
    ):
        raise Finding(f"{where}: rows outside [{start}, {end}): {offsets[0]}..{offsets[-1]}")
    if must_fail:
        raise Finding(f"{where}: a damaged tail under truncated='error' gave rows")
    if want is not None and rows != want:
        raise Finding(f"{where}: {len(rows)} rows, not the {len(want)} asked for")
    return "rows", took, peak / bound


def run(seeds):
    counts, slowest, fullest = {}, 0.0, 0.0
    root = tempfile.mkdtemp(prefix="hostile-log-")
    try:
        for seed in seeds:
            case = os.path.join(root, str(seed))
            os.makedirs(case)
            try:
                outcome, took, fill = check(seed, case)
            finally:
                shutil.rmtree(case, ignore_errors=True)
            counts[outcome] = counts.get(outcome, 0) + 1
            slowest, fullest = max(slowest, took), max(fullest, fill)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return counts, slowest, fullest


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", type=int, default=300, help="logs to build and read")
    parser.add_argument("--long", action="store_true", help="20,000 logs (the long run)")
    parser.add_argument("--seed", type=int, default=1, help="the first seed")
    args = parser.parse_args()
    n = 20_000 if args.long else args.loop
    began = time.monotonic()
    counts, slowest, fullest = run(range(args.seed, args.seed + n))
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss << 10  # KiB on Linux
    print(
        f"hostile logs: {n} seeds from {args.seed}: {counts}; slowest {slowest:.2f} s, "
        f"memory peak {fullest:.0%} of its bound, the process's peak RSS {rss >> 20} MiB; "
        f"{time.monotonic() - began:.1f} s"
    )
    if rss > MAX_RSS:  # every log holds at most a few MB: a leak or a bomb shows here
        raise Finding(f"the process's peak RSS reached {rss >> 20} MiB, over {MAX_RSS >> 20}")


if __name__ == "__main__":
    sys.exit(main())

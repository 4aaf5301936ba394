"""Kafka log segments to Arrow: fastkwire.read_segments over the segment files of a 4-partition
topic (12-byte keys, 100-byte values, one header each, uncompressed, every CRC checked), in
batches as producers make them: 16 KiB (the clients' default batch.size) and 1 MiB.

    pytest benchmarks/bench_segments.py --benchmark-only --benchmark-group-by=group

Each group is one batch size; its rows, in one run:
- read_segments: files to a pyarrow.Table (the target: >= 1 GB/s of segment on one core);
- batches_to_arrow: the same bytes already in memory through the Arrow converter alone;
- read_columns: the same bytes through the record kernel's columns alone (what the
  converter is built on);
- floor: reading the files and their CRC32C, nothing made.
extra_info["GB/s"] is the segment bytes over the median. Not part of compare.py's tables;
docs/segments.md has the numbers measured.
"""

import os
import random
import struct

import pytest

pytest.importorskip("pyarrow")
np = pytest.importorskip("numpy")

from fastkwire import _arrow_rows, records, segments  # noqa: E402
from fastkwire.records import Record  # noqa: E402

PARTITIONS = 4
TOTAL = int(os.environ.get("FASTKWIRE_BENCH_SEGMENT_MB", "64")) << 20  # bytes of segments
BATCHES = {"16KiB": 16 << 10, "1MiB": 1 << 20}
SEGMENT_BYTES = 16 << 20  # rolled as a broker would (smaller than Kafka's 1 GiB default)


def _batch(nbytes):
    rng = random.Random(nbytes)
    n = max(1, nbytes // 132)  # about 132 bytes a record on the wire
    recs = [
        Record(None, 1_700_000_000_000 + i, b"key-%08d" % i, rng.randbytes(100), [("h", b"0")])
        for i in range(n)
    ]
    return bytearray(records.write_batch(recs)), n


@pytest.fixture(scope="module", params=list(BATCHES))
def log(request, tmp_path_factory):
    """A broker's log directory of TOTAL bytes over PARTITIONS partitions."""
    root = tmp_path_factory.mktemp(f"segments-{request.param}")
    batch, n = _batch(BATCHES[request.param])
    per_partition = TOTAL // PARTITIONS // len(batch)
    for p in range(PARTITIONS):
        d = root / f"bench-{p}"
        d.mkdir()
        f, offset = None, 0
        for _ in range(per_partition):
            if f is None or f.tell() + len(batch) > SEGMENT_BYTES:
                if f:
                    f.close()
                f = open(d / ("%020d.log" % offset), "wb")
            struct.pack_into(">q", batch, 0, offset)  # the broker's offsets
            f.write(batch)
            offset += n
        f.close()
    files = sorted(str(x) for x in root.rglob("*.log"))
    size = sum(os.path.getsize(x) for x in files)
    return request.param, root, files, size


def _run(benchmark, log, name, fn):
    param, _, _, size = log
    benchmark.group = f"segments {param} batches"
    benchmark.extra_info.update(workload=f"segments {param}", op=name, contestant="cython")
    benchmark.pedantic(fn, rounds=5, warmup_rounds=1)
    benchmark.extra_info["GB/s"] = round(size / benchmark.stats.stats.median / 1e9, 3)


def test_read_segments(benchmark, log):
    _, root, _, _ = log
    table = segments.read_segments(root)
    assert table.num_rows > 0
    _run(benchmark, log, "read_segments", lambda: segments.read_segments(root))


def _contents(files):
    out = []
    for path in files:
        with open(path, "rb") as f:
            out.append(f.read())
    return out


def test_batches_to_arrow(benchmark, log):
    data = _contents(log[2])

    def convert():
        for d in data:
            _arrow_rows.batches_to_arrow(d, topic="bench", partition=0)

    _run(benchmark, log, "batches_to_arrow", convert)


def test_read_columns(benchmark, log):
    data = _contents(log[2])

    def columns():
        for d in data:
            records.read_columns(d)

    _run(benchmark, log, "read_columns", columns)


def test_floor(benchmark, log):
    files = log[2]

    def floor():
        for path in files:
            with open(path, "rb") as f:
                records.crc32c(f.read())

    _run(benchmark, log, "floor", floor)

"""Record batches: one batch of 10,000 records (12-byte keys, 100-byte values,
one header each: 1.27 MB), uncompressed, lz4 and zstd, against aiokafka (its Cython
DefaultRecordBatch and DefaultRecordBatchBuilder) and kafka-python 3.

    pytest benchmarks/bench_records.py --benchmark-only --benchmark-group-by=group

Each (workload, op) is one group, so each group's rows are one run's ratios. Object
decode checks the CRC and makes every record (offset, timestamp, key, value, headers);
the peers do the same by iterating their batch after validate_crc(). Two floors:
"floor" for columns is np.frombuffer of the batch plus its CRC32C (the bytes read once,
checked, nothing made); for compressed batches it is
decompressing alone (cramjam) plus decoding the uncompressed batch. Not part of
compare.py's tables; docs/records.md has the numbers measured.
"""

import gc
import importlib
import random

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("cramjam")

from fastkwire import _compression  # noqa: E402
from fastkwire._batches import Codec  # noqa: E402
from fastkwire.records import Record, RecordColumns  # noqa: E402

N = 10_000
CODECS = {"none": 0, "lz4": 3, "zstd": 4}


def _records():
    rng = random.Random(14)
    return [
        Record(i, 1_700_000_000_000 + i, rng.randbytes(12), rng.randbytes(100), [("h", b"0")])
        for i in range(N)
    ]


RECORDS = _records()
PURE = Codec(importlib.import_module("fastkwire._records_python"))
try:
    KERNEL = importlib.import_module("fastkwire._records")
    OURS = Codec(KERNEL)
except ImportError:
    KERNEL = OURS = None
BATCHES = {codec: PURE.write_batch(RECORDS, compression=codec) for codec in CODECS}


def _aiokafka():
    from aiokafka.record._crecords.default_records import DefaultRecordBatch

    return DefaultRecordBatch


def _aiokafka_builder():
    from aiokafka.record._crecords.default_records import DefaultRecordBatchBuilder

    return DefaultRecordBatchBuilder


def _decode(contestant, codec):
    data = BATCHES[codec]
    if contestant == "fastkwire":
        return lambda: OURS.read_batches(data)
    if contestant == "fastkwire-columns":
        return lambda: OURS.read_columns(data)
    if contestant in ("aiokafka", "kafka-python"):
        if contestant == "aiokafka":
            Batch = _aiokafka()
        else:
            from kafka.record.default_records import DefaultRecordBatch as Batch

        def run():
            batch = Batch(data)
            assert batch.validate_crc()
            return list(batch)

        return run
    if contestant == "floor":
        if codec == "none":
            return lambda: (np.frombuffer(data, np.uint8), KERNEL.crc32c(memoryview(data)[21:]))
        plain = BATCHES["none"]
        mod = getattr(_compression.cramjam(), codec)
        body = memoryview(data)[61:]
        return lambda: (bytes(mod.decompress(body)), OURS.read_batches(plain))
    raise pytest.skip.Exception(f"{contestant}: no decode")


def _encode(contestant):
    if contestant == "fastkwire":
        return lambda: OURS.write_batch(RECORDS)
    if contestant == "fastkwire-columns":
        cols = RecordColumns.from_records(RECORDS)
        return lambda: OURS.write_batch(cols)
    if contestant == "aiokafka":
        Builder = _aiokafka_builder()
    elif contestant == "kafka-python":
        from kafka.record.default_records import DefaultRecordBatchBuilder as Builder
    else:
        raise pytest.skip.Exception(f"{contestant}: no encode")
    items = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in RECORDS]

    def run():
        b = Builder(2, 0, 0, -1, -1, -1, 1 << 30)
        for offset, ts, key, value, headers in items:
            b.append(offset, ts, key, value, headers)
        return b.build()

    return run


def _time(benchmark, group, contestant, fn):
    gc.collect()
    gc.freeze()  # the prepared batches and records stay out of the collector's way
    benchmark.group = group
    # Not "contestant": compare.py's tables leave these rows out (they have their own).
    benchmark.extra_info.update(records_group=group, records_contestant=contestant)
    benchmark(fn)


@pytest.mark.parametrize(
    "contestant", ["fastkwire", "fastkwire-columns", "aiokafka", "kafka-python", "floor"]
)
@pytest.mark.parametrize("codec", list(CODECS))
def test_records_decode(benchmark, codec, contestant):
    if OURS is None:
        pytest.skip("compiled extension not built")
    if codec != "none" and contestant == "kafka-python":
        from kafka import codec as kp_codec

        if not {"lz4": kp_codec.has_lz4, "zstd": kp_codec.has_zstd}[codec]():
            pytest.skip(f"kafka-python's {codec} codec (a package of its own) is not installed")
    _time(benchmark, f"records {codec} decode", contestant, _decode(contestant, codec))


@pytest.mark.parametrize(
    "contestant", ["fastkwire", "fastkwire-columns", "aiokafka", "kafka-python"]
)
def test_records_encode(benchmark, contestant):
    if OURS is None:
        pytest.skip("compiled extension not built")
    _time(benchmark, "records none encode", contestant, _encode(contestant))

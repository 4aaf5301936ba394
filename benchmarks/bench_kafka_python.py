"""kafka-python 3 stock against kafka-python 3 with fastkwire.kafka_python installed, in
one process (issue 20):

- kp_fetch_take: `Fetcher.PartitionRecords(0, tp, MemoryRecords(batch)).take()` over one
  uncompressed batch of 10,000 records (12-byte keys, 100-byte values, one header each),
  CRC checked (kafka-python's default), no deserializers: the consumer's path from the
  fetched bytes to the ConsumerRecords.
- kp_build: `MemoryRecordsBuilder` (magic 2, no compression) with the same 10,000
  appends, then close() and buffer().

    pytest benchmarks/bench_kafka_python.py --benchmark-only --benchmark-group-by=group

Contestants are "kafka-python" (stock) and "cython" (the same calls, installed), so
compare.py's ratio and target tables carry them.
"""
import gc
import random

import pytest

pytest.importorskip("kafka")
import fastkwire.kafka_python as fkp  # noqa: E402

N = 10_000


def _items():
    rng = random.Random(20)
    return [(1_700_000_000_000 + i, rng.randbytes(12), rng.randbytes(100), [("h", b"0")]) for i in range(N)]


ITEMS = _items()


def _build():
    from kafka.record.memory_records import MemoryRecordsBuilder
    builder = MemoryRecordsBuilder(2, 0, 1 << 30)
    for ts, key, value, headers in ITEMS:
        builder.append(ts, key, value, headers)
    builder.close()
    return builder.buffer()


def _take(data):
    from kafka.consumer.fetcher import Fetcher
    from kafka.record.memory_records import MemoryRecords
    from kafka.structs import TopicPartition
    tp = TopicPartition("bench", 0)

    def run():
        records = Fetcher.PartitionRecords(0, tp, MemoryRecords(data)).take()
        assert len(records) == N
        return records
    return run


def _bench(benchmark, workload, op, contestant, make):
    if contestant == "cython":
        try:
            fkp.install()
        except fkp.UnsupportedKafkaPython as exc:  # an untested kafka-python, or no compiled core
            pytest.skip(str(exc))
    try:
        fn = make()
        reference = fn()
        gc.collect()
        gc.freeze()  # the prepared batch and records stay out of the collector's way
        benchmark.group = f"{workload} {op}"
        benchmark.extra_info.update(workload=workload, op=op, contestant=contestant)
        result = benchmark(fn)
        assert type(result) is type(reference)
    finally:
        fkp.uninstall()
        gc.unfreeze()


@pytest.mark.parametrize("contestant", ["kafka-python", "cython"])
def test_kp_fetch_take(benchmark, contestant):
    data = bytes(_build())
    _bench(benchmark, "kp_fetch_take", "decode", contestant, lambda: _take(data))


@pytest.mark.parametrize("contestant", ["kafka-python", "cython"])
def test_kp_build(benchmark, contestant):
    _bench(benchmark, "kp_build", "encode", contestant, lambda: _build)

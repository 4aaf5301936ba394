"""fastkwire.ray.read_kafka's read tasks against the suite's own broker (Ray in local mode,
2 CPUs): by default one task per CPU, the offsets split evenly among them; with an explicit
records_per_task, one task per piece of that many offsets. Either way the rows are exactly
read_kafka's, each once.
Real brokers' proof: test_kafka_arrow_broker.py and test_kafka_arrow_tansu.py."""

import pytest

pa = pytest.importorskip("pyarrow")
ray = pytest.importorskip("ray")
pytest.importorskip("ray.data")

import fastkwire  # noqa: E402
import fastkwire.ray  # noqa: E402
from fastkwire import kafka_arrow  # noqa: E402
from fastkwire.kafka_arrow import SCHEMA, OffsetRange, spread  # noqa: E402

from log_broker import LogBroker, PartitionLog  # noqa: E402
from local_ray import local_ray  # noqa: E402
from test_kafka_arrow import keyed_log  # noqa: E402

PARTITIONS, PER_PARTITION, CPUS = 3, 95, 2


@pytest.fixture(scope="module")
def broker():
    b = LogBroker({("t", p): PartitionLog(keyed_log(p, PER_PARTITION)) for p in range(3)})
    yield b
    b.close()


@pytest.fixture(scope="module")
def ray_local():
    with local_ray(CPUS):
        yield


def key_rows(table):
    """(partition, offset) of every row, in read order within each partition, and the rows."""
    rows = table.cast(SCHEMA).to_pylist()
    return sorted((r["partition"], r["offset"]) for r in rows), sorted(
        rows, key=lambda r: (r["partition"], r["offset"])
    )


def read(ds):
    return pa.concat_tables(ray.get(ds.to_arrow_refs()))


def test_spread_cuts_offsets_evenly_and_exactly():
    ranges = [OffsetRange("t", 0, 0, 250), OffsetRange("t", 1, 10, 260), OffsetRange("t", 2, 5, 6)]
    for tasks in (1, 2, 3, 4, 7):
        out = spread(ranges, tasks)
        assert len(out) == tasks
        sizes = [sum(len(r) for r in lst) for lst in out]
        assert max(sizes) - min(sizes) <= 1 and sum(sizes) == 501
        offsets = [(r.partition, o) for lst in out for r in lst for o in range(r.start, r.end)]
        assert offsets == [(r.partition, o) for r in ranges for o in range(r.start, r.end)]
    # Fewer offsets than tasks: one offset a task, no empty task.
    assert spread([OffsetRange("t", 0, 3, 5)], 4) == [
        [OffsetRange("t", 0, 3, 4)],
        [OffsetRange("t", 0, 4, 5)],
    ]
    assert spread([], 2) == []
    for bad in (0, -1, 1.5, True, None):
        with pytest.raises(ValueError, match="tasks must be a positive int"):
            spread(ranges, bad)


def test_spread_caps_its_tasks_and_says_so():
    """A huge task count over a huge watermark: O(cap) lists, and a warning naming it."""
    huge = [OffsetRange("t", 0, 0, 2**62), OffsetRange("t", 1, 5, 2**61)]
    with pytest.warns(RuntimeWarning, match="tasks=200000 is more than 10000 tasks: made 10000"):
        out = spread(huge, 200_000)
    assert len(out) == kafka_arrow.MAX_RANGES
    assert sum(len(r) for lst in out for r in lst) == 2**62 + 2**61 - 5
    assert out[0][0].start == 0 and out[-1][-1] == OffsetRange("t", 1, out[-1][-1].start, 2**61)


def test_default_is_one_task_per_cpu(broker, ray_local):
    source = fastkwire.ray.KafkaDatasource("t", bootstrap_servers=broker.bootstrap)
    assert fastkwire.ray.DEFAULT_RECORDS_PER_TASK is None
    assert len(source.get_read_tasks(1)) == CPUS
    assert [sum(len(r) for r in lst) for lst in source.task_ranges] == [143, 142]
    three = fastkwire.ray.KafkaDatasource("t", bootstrap_servers=broker.bootstrap, tasks=3)
    assert len(three.get_read_tasks(1)) == 3

    ds = fastkwire.ray.read_kafka("t", bootstrap_servers=broker.bootstrap)
    refs = ds.to_arrow_refs()
    # One block a task: Ray was asked for as many (else it cuts each task's output in ~100).
    assert len(refs) == CPUS
    keys, rows = key_rows(pa.concat_tables(ray.get(refs)))
    assert keys == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    assert rows == key_rows(fastkwire.read_kafka("t", bootstrap_servers=broker.bootstrap))[1]


def test_an_explicit_records_per_task_is_one_task_per_piece(broker, ray_local):
    source = fastkwire.ray.KafkaDatasource(
        "t", bootstrap_servers=broker.bootstrap, records_per_task=40
    )
    # 95 offsets a partition: pieces of 40, 40 and 15.
    assert len(source.get_read_tasks(1)) == PARTITIONS * 3
    assert sorted((r.partition, r.start, r.end) for [r] in source.task_ranges) == [
        (p, lo, min(lo + 40, 95)) for p in range(PARTITIONS) for lo in (0, 40, 80)
    ]
    ds = fastkwire.ray.read_kafka("t", bootstrap_servers=broker.bootstrap, records_per_task=40)
    refs = ds.to_arrow_refs()
    # One block a task here too (Ray's cutting of each task's output into ~100 blocks
    # cost 4 tasks twice the CPU per record of one)
    assert len(refs) == PARTITIONS * 3
    keys, rows = key_rows(pa.concat_tables(ray.get(refs)))
    assert keys == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]
    assert rows == key_rows(fastkwire.read_kafka("t", bootstrap_servers=broker.bootstrap))[1]
    # named as the caller named it
    with pytest.raises(ValueError, match="records_per_task must be a positive int"):
        fastkwire.ray.read_kafka("t", bootstrap_servers=broker.bootstrap, records_per_task=0)


def test_offsets_bounded_read_splits_only_what_is_asked(broker, ray_local):
    ds = fastkwire.ray.read_kafka(
        "t", bootstrap_servers=broker.bootstrap, start_offset=90, end_offset=93
    )
    keys, _ = key_rows(read(ds))
    assert keys == [(p, o) for p in range(PARTITIONS) for o in (90, 91, 92)]

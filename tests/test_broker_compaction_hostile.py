"""Log compaction against hostile input: records whose timestamps a pass cannot rebase as
they were, topic configs at their extremes, a damaged cleaner-offset-checkpoint. A pass
never writes a batch that does not read back, and never gives up on a partition for them."""

import os
import struct
import time

import pytest

import fastkwire
from fastkwire import records
from fastkwire._wire import BATCH_CRC_START
from fastkwire.broker import Apis, Cluster, Context, read_batch_head
from fastkwire.broker._compaction import CHECKPOINT_FILE, LogCleaner
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.error_codes import by_name
from fastkwire.records import Record

NODES = {0: ("127.0.0.1", 9092)}
NOW = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1


def compacted(cluster, **configs):
    settings = {"cleanup.policy": "compact", "segment.bytes": "300"}
    settings.update({k.replace("_", "."): str(v) for k, v in configs.items()})
    return cluster.create_topic("t", 1, 1, settings)


def append(partition, recs):
    data = records.write_batch(recs)
    head = read_batch_head(data)
    return partition.log.append(head, data)


def fill(partition, count, keys=3):
    for i in range(count):
        append(partition, [Record(timestamp=NOW, key=b"k%d" % (i % keys), value=b"v%d" % i)])


def read_all(partition):
    log = partition.log
    return records.read_batches(log.read(log.log_start, 1 << 30))


def clean(cluster):
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    done = cleaner.clean(NOW, force=True)
    assert cleaner.uncleanable == {}
    return done


def test_a_tombstone_with_a_timestamp_far_before_its_horizon_still_reads():
    # the delete horizon becomes the batch's base timestamp: the record's delta from it
    # would not fit an int64 varint (a batch no reader takes, and no later pass either)
    cluster = Cluster(NODES)
    topic = compacted(cluster)
    p = topic.partitions[0]
    append(p, [Record(timestamp=-(1 << 63) + 10, key=b"gone", value=None)])
    fill(p, 20)
    assert clean(cluster)
    kept = [(r.offset, r.timestamp, r.key, r.value) for b in read_all(p) for r in b.records]
    assert kept[0] == (0, -(1 << 63) + 10, b"gone", None)  # a tombstone kept, as it was
    clean(cluster)  # and the next pass reads it too: the partition stays cleanable


def test_records_of_one_batch_far_apart_in_time_read_after_a_pass():
    cluster = Cluster(NODES)
    topic = compacted(cluster)
    p = topic.partitions[0]
    append(
        p,
        [
            Record(timestamp=0, key=b"x", value=b"1"),
            Record(timestamp=INT64_MAX, key=b"y", value=b"1"),
            Record(timestamp=-(1 << 63) + 1, key=b"z", value=b"1"),
        ],
    )
    append(p, [Record(timestamp=NOW, key=b"x", value=b"2")])  # x's first record goes
    fill(p, 20)
    assert clean(cluster)
    first = read_all(p)[0]
    assert [(r.offset, r.timestamp, r.key) for r in first.records] == [
        (1, INT64_MAX, b"y"),
        (2, -(1 << 63) + 1, b"z"),
    ]


def test_delete_retention_ms_at_its_maximum_keeps_tombstones_and_the_partition_cleanable():
    cluster = Cluster(NODES)
    topic = compacted(cluster, delete_retention_ms=INT64_MAX)
    p = topic.partitions[0]
    append(p, [Record(timestamp=NOW, key=b"gone", value=None)])
    fill(p, 20)
    assert clean(cluster)
    (tombstone,) = [r for b in read_all(p) for r in b.records if r.key == b"gone"]
    assert tombstone.value is None and tombstone.offset == 0
    first = read_all(p)[0]
    assert first.base_timestamp == INT64_MAX  # the horizon: never


def test_a_damaged_cleaner_offset_checkpoint_does_not_stop_the_start(tmp_path):
    storage = DiskLogs(str(tmp_path))
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    compacted(cluster)
    # digits str.isdigit() passes but int() refuses, thousands of digits, a negative one
    lines = ["0", "4", "t 0 \u00b2", "t 0 " + "9" * 5000, "t 0 -5", "t 0 12"]
    (tmp_path / CHECKPOINT_FILE).write_text("\n".join(lines) + "\n", encoding="utf-8")
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    assert cleaner.first_dirty == {("t", 0): (None, 12)}  # the good entry, the last of t-0
    storage.close()


def test_a_checkpoint_that_cannot_be_written_leaves_the_brokers_timer_running(tmp_path):
    from fastkwire.testing import Broker

    (tmp_path / CHECKPOINT_FILE).mkdir()  # a damaged log directory: its checkpoint a folder
    with Broker(
        log_dir=str(tmp_path), log_cleaner_backoff_ms=50, retention_check_interval_ms=50
    ) as broker:
        broker.create_topic("t", configs={"cleanup.policy": "compact", "segment.bytes": "300"})
        broker.create_topic("old", configs={"retention.ms": "1000"})

        def write(name, count, ts):
            p = broker.broker.cluster.topics[name].partitions[0]
            for i in range(count):
                append(p, [Record(timestamp=ts, key=b"k%d" % (i % 3), value=b"v%d" % i)])

        broker.call(lambda: write("t", 30, int(time.time() * 1000)))

        def tried():
            return ("t", 0) in broker.broker.cleaner.first_dirty

        deadline = time.monotonic() + 10
        while not broker.call(tried) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.call(tried)  # a pass ran, its checkpoint could not be written
        # the timer goes on: retention still runs after it
        broker.call(lambda: write("old", 3, 0))

        def start():
            return broker.broker.cluster.topics["old"].partitions[0].log.log_start

        deadline = time.monotonic() + 10
        while broker.call(start) == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert broker.call(start) == 3


def test_a_topic_made_again_under_a_name_once_uncleanable_is_cleaned(monkeypatch):
    cluster = Cluster(NODES)
    fill(compacted(cluster).partitions[0], 30)
    cleaner = LogCleaner(cluster, time.monotonic, time.time)

    def undecodable(data, **_):
        raise ImportError("cramjam is needed for zstd batches")

    monkeypatch.setattr(records, "read_batches", undecodable)
    assert cleaner.clean(NOW, force=True) == {}
    assert ("t", 0) in cleaner.uncleanable
    monkeypatch.undo()
    cluster.delete_topic(cluster.topics["t"])
    p = compacted(cluster).partitions[0]  # a new topic (a new id), the same name
    fill(p, 30)
    assert ("t", 0) in cleaner.clean(NOW, force=True)  # as Kafka forgets deleted partitions
    assert len(read_all(p)) < 30


def produce(apis, data, topic="t"):
    P = fastkwire.ProduceRequest
    request = P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=0, records=data)]
            )
        ],
    )
    out = []
    apis.handle(0, 9, request, Context(0), out.append)
    _, answer = fastkwire.decode_response(fastkwire.encode_response(out[0], 9, 7), 0, 9)
    (part,) = answer.responses[0].partition_responses
    return part


def test_produce_refuses_a_control_batch_a_client_wrote(tmp_path):
    # a transaction's data, then a "marker" of the client's own whose key is too short to
    # say its type: appended, the log directory no longer loaded (nor compacted)
    storage = DiskLogs(str(tmp_path))
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    cluster.create_topic("plain", 1, 1, {})
    apis = Apis(cluster, clock=lambda: 0.0, wall_clock=lambda: 1000.0)
    data = records.write_batch(
        [Record(timestamp=1, key=b"k", value=b"v")],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    assert produce(apis, data, "plain").error_code == 0
    marker = bytearray(
        records.write_batch(
            [Record(timestamp=1, key=b"x", value=b"")],
            producer_id=7,
            producer_epoch=0,
            base_sequence=1,
            is_transactional=True,
        )
    )
    (attrs,) = struct.unpack_from(">h", marker, BATCH_CRC_START)
    struct.pack_into(">h", marker, BATCH_CRC_START, attrs | 0x20)  # a control batch
    struct.pack_into(">I", marker, 17, records.crc32c(memoryview(marker)[BATCH_CRC_START:]))
    part = produce(apis, bytes(marker), "plain")
    assert part.error_code == by_name("INVALID_RECORD").code
    assert part.error_message == (
        "Clients are not allowed to write control records in topic partition plain-0."
    )
    storage.close()
    storage = DiskLogs(str(tmp_path))  # the directory loads back
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    log = cluster.topics["plain"].partitions[0].log
    assert log.log_end == 2  # the transaction left open: aborted at the load (offset 1)
    assert log.aborted == [(7, 0, 1)]
    storage.close()


@pytest.mark.parametrize(
    "stray",
    [
        "0.log",  # a segment's offset, not its 20-digit name: read twice, then cut
        "4.log.swap",  # as if a pass had swapped an empty segment in
        "\u00b2.log",  # digits to str.isdigit(), not to int()
        "\u00b2.log.swap",
        "\u0663.log",  # an Arabic-Indic 3: int() takes it
        "9" * 30 + ".log.swap",  # past int64: the log end
        "99999999999999999999.log",
    ],
)
def test_a_file_not_named_as_a_segment_is_left_alone_at_the_start(tmp_path, stray):
    def open_log():
        storage = DiskLogs(str(tmp_path))
        cluster = Cluster(NODES, cluster_id=storage.cluster_id())
        storage.attach(cluster)
        return storage, cluster.topics["t"].partitions[0]

    storage = DiskLogs(str(tmp_path))
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    fill(compacted(cluster).partitions[0], 8)  # segments 0 and 4
    storage.close()
    folder = tmp_path / "t-0"
    assert sorted(n for n in os.listdir(folder) if n.endswith(".log"))[-1] == f"{4:020d}.log"
    (folder / stray).write_bytes(b"")
    for _ in range(2):  # and what the first start left loads the same
        storage, p = open_log()
        assert [r.offset for b in read_all(p) for r in b.records] == list(range(8))
        assert (p.log.log_start, p.log.log_end) == (0, 8)
        storage.close()


def test_a_damaged_log_start_offset_checkpoint_does_not_stop_the_start(tmp_path):
    storage = DiskLogs(str(tmp_path))
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    fill(compacted(cluster).partitions[0], 8)
    storage.close()
    lines = ["0", "3", "t 0 \u00b2", "t \u00b2 1", "t 0 " + "9" * 5000]
    (tmp_path / "log-start-offset-checkpoint").write_text("\n".join(lines) + "\n")
    storage = DiskLogs(str(tmp_path))
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    p = cluster.topics["t"].partitions[0]
    assert (p.log.log_start, p.log.log_end) == (0, 8)
    storage.close()


def test_a_pass_does_not_hold_every_big_key_of_the_dirty_part():
    # megabyte keys that compress to a few bytes: the offset map keeps a digest of each (as
    # Kafka's keeps an MD5), not the keys, or a few KB of log would cost GBs in a pass
    tracemalloc = pytest.importorskip("tracemalloc")
    pytest.importorskip("cramjam")
    cluster = Cluster(NODES)
    topic = compacted(cluster, segment_bytes=1000)
    p = topic.partitions[0]
    for i in range(40):
        key = b"x" * 1_000_000 + b"%d" % i
        data = records.write_batch([Record(timestamp=NOW, key=key, value=b"v")], compression="zstd")
        p.log.append(read_batch_head(data), data)
    fill(p, 10)
    assert p.log.bytes < 20_000
    tracemalloc.start()
    try:
        assert clean(cluster)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16_000_000  # a few keys at a time, not the 40 MB of them
    kept = [r.key[-2:] for b in read_all(p) for r in b.records if len(r.key) > 1000]
    assert kept == [b"x%d" % i if i < 10 else b"%d" % i for i in range(40)]


def test_produce_refuses_a_producers_batch_without_a_sequence():
    # Kafka's LogValidator: a batch naming a producer id must carry a sequence (one of -1
    # had been kept, its producer's state with it)
    cluster = Cluster(NODES)
    cluster.create_topic("plain", 1, 1, {})
    apis = Apis(cluster, clock=lambda: 0.0, wall_clock=lambda: 1000.0)
    data = records.write_batch(
        [Record(timestamp=1, key=b"k", value=b"v")],
        producer_id=7,
        producer_epoch=0,
        base_sequence=-1,
    )
    part = produce(apis, data, "plain")
    assert part.error_code == by_name("INVALID_RECORD").code
    assert part.error_message == "Invalid sequence number -1 in record batch with producerId 7"
    assert cluster.topics["plain"].partitions[0].log.log_end == 0
    plain = records.write_batch([Record(timestamp=1, key=b"k", value=b"v")])  # no producer
    assert produce(apis, plain, "plain").error_code == 0

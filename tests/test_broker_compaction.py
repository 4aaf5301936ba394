"""Log compaction (`fastkwire.broker._compaction`), as Kafka's log cleaner does it: the
latest record of each key kept below the cleanable point with its offset, tombstones until
delete.retention.ms past the pass that first kept them, aborted transactions and their
markers gone, producers' last batches kept (empty) for their sequences, the dirty ratio and
compaction lags, Produce refusing keyless records; on disk, segments rewritten in Kafka's
format that a restart and read_segments read back; a real consumer after a pass."""

import os
import time

import pytest

import fastkwire
from fastkwire import records
from fastkwire.broker import Apis, Cluster, Context, read_batch_head
from fastkwire.broker._compaction import LogCleaner, clean_partition
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.error_codes import by_name
from fastkwire.records import Record

NODES = {0: ("127.0.0.1", 9092)}
NOW = 1_700_000_000_000


def compacted(cluster, name="t", **configs):
    settings = {"cleanup.policy": "compact", "segment.bytes": "300"}
    settings.update({k.replace("_", "."): str(v) for k, v in configs.items()})
    return cluster.create_topic(name, 1, 1, settings)


def write(partition, pairs, ts=NOW, pid=-1, epoch=-1, seq=-1, txn=False):
    """Append one batch of (key, value) records; its base offset."""
    data = records.write_batch(
        [Record(timestamp=ts, key=k, value=v) for k, v in pairs],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )
    head = read_batch_head(data)
    base = partition.log.append(head, data)
    partition.producers.appended(head, base)
    return base


def fill(partition, count, keys=3, ts=NOW):
    """`count` one-record batches, key i % keys, value i; returns their offsets."""
    return [write(partition, [(b"k%d" % (i % keys), b"v%d" % i)], ts) for i in range(count)]


def batches(partition, offset=None):
    log = partition.log
    return records.read_batches(log.read(log.log_start if offset is None else offset, 1 << 30))


def latest(partition):
    """{key: (offset, value)}: what a consumer reading the whole log ends with."""
    out = {}
    for b in batches(partition):
        if not b.is_control:
            for r in b.records:
                out[r.key] = (r.offset, r.value)
    return out


def offsets(partition):
    return [r.offset for b in batches(partition) if not b.is_control for r in b.records]


# ---------------------------------------------------------------- keys and segments


def test_the_latest_record_of_each_key_stays_with_its_offset():
    cluster = Cluster(NODES)
    p = compacted(cluster).partitions[0]
    fill(p, 30)
    before = latest(p)
    result = clean_partition(cluster.topics["t"], p, None, NOW)
    assert result is not None and result.records_removed > 0
    assert latest(p) == before  # each key's last value, at its offset
    end = result.end
    # below the cleaned point, one record per key; at and past it, every record as written
    cleaned = [o for o in offsets(p) if o < end]
    assert len(cleaned) == len({o for o in cleaned}) <= 3 + 1  # + the round's last batch
    assert [o for o in offsets(p) if o >= end] == list(range(end, 30))
    assert (p.log.log_start, p.log.log_end) == (0, 30)
    # offsets have gaps now: a read from any offset gives whole batches from there on
    for start in range(0, 30):
        got = [o for o in offsets_from(p, start) if o >= start]
        assert got == sorted(got) and set(got) <= set(offsets(p))
        assert got[-1] == 29


def offsets_from(partition, start):
    return [r.offset for b in batches(partition, start) if not b.is_control for r in b.records]


def test_the_active_segment_is_not_cleaned():
    cluster = Cluster(NODES)
    topic = compacted(cluster, segment_bytes=1 << 30)  # everything in the active segment
    p = topic.partitions[0]
    fill(p, 30)
    assert clean_partition(topic, p, None, NOW, force=True) is None
    assert offsets(p) == list(range(30))


def test_the_dirty_ratio_decides_when_a_pass_runs():
    cluster = Cluster(NODES)
    topic = compacted(cluster, min_cleanable_dirty_ratio=0.9)
    p = topic.partitions[0]
    fill(p, 30)
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    # nothing clean yet: all the cleanable bytes are dirty (a ratio of 1)
    end = cleaner.clean(NOW)[("t", 0)].end
    assert cleaner.first_dirty[("t", 0)] == (topic.id, end)
    assert cleaner.clean(NOW) == {}  # nothing dirty below the active segment
    fill(p, 8)  # about as many dirty bytes as clean ones: a ratio near 0.5
    assert cleaner.clean(NOW) == {}
    topic.configs["min.cleanable.dirty.ratio"] = "0.3"
    assert cleaner.clean(NOW)[("t", 0)].first_dirty == end


def test_min_compaction_lag_keeps_recent_segments_dirty():
    cluster = Cluster(NODES)
    topic = compacted(cluster, min_compaction_lag_ms=60_000)
    p = topic.partitions[0]
    fill(p, 30, ts=NOW - 1000)  # newer than the lag
    assert clean_partition(topic, p, None, NOW, force=True) is None
    assert offsets(p) == list(range(30))
    assert clean_partition(topic, p, None, NOW + 61_000) is not None


def test_max_compaction_lag_cleans_below_the_dirty_ratio():
    cluster = Cluster(NODES)
    topic = compacted(cluster, min_cleanable_dirty_ratio=0.99, max_compaction_lag_ms=10_000)
    p = topic.partitions[0]
    fill(p, 30, ts=NOW - 5000)
    end = clean_partition(topic, p, None, NOW).end  # nothing clean yet: a ratio of 1
    fill(p, 8, ts=NOW - 5000)
    assert clean_partition(topic, p, end, NOW) is None  # far below 0.99
    assert clean_partition(topic, p, end, NOW + 6000) is not None  # 11 s old: due


def test_records_without_a_key_go():
    cluster = Cluster(NODES)
    topic = compacted(cluster)
    p = topic.partitions[0]
    write(p, [(None, b"no key"), (b"a", b"1")])  # as written before the topic was compacted
    fill(p, 20)
    clean_partition(topic, p, None, NOW)
    assert all(r.key is not None for b in batches(p) for r in b.records)
    assert latest(p)[b"a"] == (1, b"1")


# ---------------------------------------------------------------- tombstones


def test_tombstones_stay_until_delete_retention_ms_past_the_pass():
    cluster = Cluster(NODES)
    topic = compacted(cluster, delete_retention_ms=60_000, segment_bytes=200)
    p = topic.partitions[0]
    write(p, [(b"gone", b"1")])
    write(p, [(b"gone", None)])
    fill(p, 20, keys=2)
    clean_partition(topic, p, None, NOW, force=True)
    (tomb,) = [b for b in batches(p) if any(r.key == b"gone" for r in b.records)]
    assert [(r.offset, r.value) for r in tomb.records] == [(1, None)]
    # Kafka's delete horizon: attribute bit 0x40, the base timestamp the pass's time + ms
    raw = p.log.read(1, 1 << 20)
    attrs = int.from_bytes(raw[21:23], "big")
    assert attrs & 0x40 and tomb.base_timestamp == NOW + 60_000
    assert tomb.records[0].timestamp == NOW  # the record's own time, kept
    fill(p, 10, keys=2)
    clean_partition(topic, p, None, NOW + 59_999, force=True)
    assert b"gone" in latest(p)
    fill(p, 10, keys=2)
    clean_partition(topic, p, None, NOW + 60_000, force=True)
    assert b"gone" not in latest(p)


# ---------------------------------------------------------------- transactions


def marker(partition, pid, epoch, commit, now_ms=NOW):
    return partition.log.write_marker(pid, epoch, commit, now_ms)


def test_aborted_transactions_and_their_markers_go():
    cluster = Cluster(NODES)
    topic = compacted(cluster, delete_retention_ms=1000, segment_bytes=200)
    p = topic.partitions[0]
    write(p, [(b"a", b"committed")], pid=7, epoch=0, seq=0, txn=True)
    marker(p, 7, 0, True)
    write(p, [(b"a", b"aborted")], pid=7, epoch=0, seq=1, txn=True)
    abort_at = marker(p, 7, 0, False)
    write(p, [(b"other", b"x")], pid=8, epoch=0, seq=0)  # producer 7's batches not last
    write(p, [(b"a", b"later-aborted")], pid=7, epoch=0, seq=2, txn=True)
    marker(p, 7, 0, False)
    fill(p, 20, keys=2)
    for now in (NOW, NOW + 1, NOW + 2000, NOW + 4000):
        clean_partition(topic, p, None, now, force=True)
        values = [r.value for b in batches(p) if not b.is_control for r in b.records]
        assert b"aborted" not in values
        assert latest(p)[b"a"] == (0, b"committed")
        # a read_committed consumer: the aborted transactions it is told of end at markers
        # the log still holds
        held = {b.base_offset for b in batches(p) if b.is_control}
        assert all(m in held for _, _, m in p.log.aborted)
    assert abort_at not in {b.base_offset for b in batches(p)}  # gone, past its horizon


def test_an_open_transaction_stops_the_pass_at_the_last_stable_offset():
    cluster = Cluster(NODES)
    topic = compacted(cluster)
    p = topic.partitions[0]
    fill(p, 5)
    first_open = write(p, [(b"k0", b"open")], pid=9, epoch=0, seq=0, txn=True)
    fill(p, 25)
    result = clean_partition(topic, p, None, NOW, force=True)
    assert result.end <= first_open
    assert [o for o in offsets(p) if o >= first_open] == list(range(first_open, 31))


# ---------------------------------------------------------------- producer state


def test_a_producers_last_batch_stays_empty_for_its_sequence():
    cluster = Cluster(NODES)
    topic = compacted(cluster, segment_bytes=200)
    p = topic.partitions[0]
    write(p, [(b"a", b"1"), (b"b", b"1")], pid=5, epoch=2, seq=0)  # offsets 0-1
    write(p, [(b"a", b"2"), (b"b", b"2")], pid=5, epoch=2, seq=2)  # 2-3: producer 5's last
    fill(p, 20, keys=2)  # keys k0, k1: a and b stay; then overwrite them
    write(p, [(b"a", b"3")])
    write(p, [(b"b", b"3")])
    fill(p, 20, keys=2)
    clean_partition(topic, p, None, NOW, force=True)
    kept = {b.base_offset: b for b in batches(p)}
    assert 0 not in kept  # not the producer's last: gone with its records
    last = kept[2]  # its last: no records, its header as it was
    assert (last.records, last.last_offset_delta) == ([], 1)
    assert (last.producer_id, last.producer_epoch, last.base_sequence) == (5, 2, 2)
    assert latest(p)[b"a"][1] == b"3"


# ---------------------------------------------------------------- Produce


def test_produce_refuses_records_without_a_key_on_a_compacted_topic():
    cluster = Cluster(NODES)
    compacted(cluster)
    apis = Apis(cluster, clock=lambda: 0.0, wall_clock=lambda: 1000.0)
    data = records.write_batch([Record(key=b"k", value=b"1"), Record(key=None, value=b"2")])
    P = fastkwire.ProduceRequest
    request = P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="t", partition_data=[P.PartitionProduceData(index=0, records=data)]
            )
        ],
    )
    out = []
    apis.handle(0, 9, request, Context(0), out.append)
    frame = fastkwire.encode_response(out[0], 9, 7)
    _, answer = fastkwire.decode_response(frame, 0, 9)
    (part,) = answer.responses[0].partition_responses
    assert part.error_code == by_name("INVALID_RECORD").code
    assert [e.batch_index for e in part.record_errors] == [1]
    assert "Compacted topic cannot accept message without key in topic partition t-0." in (
        part.record_errors[0].batch_index_error_message
    )
    assert cluster.topics["t"].partitions[0].log.log_end == 0


# ---------------------------------------------------------------- on disk


def open_cluster(path):
    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster)
    return cluster, storage


def raw_batches(partition):
    log = partition.log
    return [(log._bases[i], log._batch(i)) for i in range(len(log))]


def test_segments_are_rewritten_and_a_restart_serves_the_cleaned_log(tmp_path):
    pa = pytest.importorskip("pyarrow")
    cluster, storage = open_cluster(tmp_path)
    topic = compacted(cluster, segment_bytes=400)
    p = topic.partitions[0]
    write(p, [(b"a", b"1"), (b"b", b"1")], pid=5, epoch=0, seq=0)
    fill(p, 40, keys=4)
    write(p, [(b"a", b"2")])
    fill(p, 10, keys=4)
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    done = cleaner.clean(NOW, force=True)
    end = done[("t", 0)].end
    before = raw_batches(p)
    state = (p.log.log_start, p.log.log_end)
    names = sorted(os.listdir(tmp_path / "t-0"))
    assert not [n for n in names if n.endswith((".cleaned", ".swap"))]
    storage.close()
    checkpoint = (tmp_path / "cleaner-offset-checkpoint").read_text().split("\n")
    assert checkpoint[:3] == ["0", "1", f"t 0 {end}"]  # Kafka's format
    cluster, storage = open_cluster(tmp_path)
    p = cluster.topics["t"].partitions[0]
    assert raw_batches(p) == before  # the same batches, the same bytes
    assert (p.log.log_start, p.log.log_end) == state
    # producer 5's last batch was kept (empty): a retry of it is still a duplicate
    head = read_batch_head(
        records.write_batch(
            [Record(key=b"a", value=b"1"), Record(key=b"b", value=b"1")],
            producer_id=5,
            producer_epoch=0,
            base_sequence=0,
        )
    )
    assert p.producers.check(head) == 0
    table = fastkwire.read_segments(str(tmp_path / "t-0"))
    rows = list(zip(table.column("offset").to_pylist(), table.column("key").to_pylist()))
    assert rows == [(r.offset, r.key) for b in batches(p) for r in b.records]
    assert pa is not None
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    assert cleaner.first_dirty[("t", 0)] == (None, end)
    storage.close()


def test_a_swap_a_crash_left_is_completed_at_recovery(tmp_path):
    cluster, storage = open_cluster(tmp_path)
    topic = compacted(cluster, segment_bytes=400)
    p = topic.partitions[0]
    fill(p, 60, keys=4)
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    cleaner.clean(NOW, force=True)
    expected = [r.offset for b in batches(p) for r in b.records]
    storage.close()
    folder = tmp_path / "t-0"
    first = sorted(n for n in os.listdir(folder) if n.endswith(".log"))[0]
    # as if the pass had stopped after its swap file was written: the old segment still there
    os.rename(folder / first, folder / (first + ".swap"))
    (folder / first).write_bytes(b"")
    (folder / "00000000000000000999.log.cleaned").write_bytes(b"half")
    cluster, storage = open_cluster(tmp_path)
    p = cluster.topics["t"].partitions[0]
    assert [r.offset for b in batches(p) for r in b.records] == expected
    assert not [n for n in os.listdir(folder) if n.endswith((".cleaned", ".swap"))]
    storage.close()


# ---------------------------------------------------------------- a real client


def test_a_consumer_reads_the_latest_value_of_each_key_at_its_offset(tmp_path):
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker(log_dir=tmp_path) as broker:
        broker.create_topic(
            "compacted", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "500"}
        )
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=0)
        sent = {}
        for i in range(60):
            key = b"k%d" % (i % 5)
            meta = producer.send("compacted", key=key, value=b"v%d" % i).get(timeout=10)
            sent[key] = (meta.offset, b"v%d" % i)
        producer.flush()
        producer.close()
        done = broker.clean_logs()
        assert ("compacted", 0) in done
        end = done[("compacted", 0)].end
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers,
            auto_offset_reset="earliest",
            consumer_timeout_ms=2000,
        )
        consumer.assign([kafka.TopicPartition("compacted", 0)])
        seen = [(m.offset, m.key, m.value) for m in consumer]
        consumer.close()
    assert [o for o, _, _ in seen] == sorted(o for o, _, _ in seen)
    assert len(seen) < 60  # records went
    assert {k: (o, v) for o, k, v in seen} == sent
    below = [k for o, k, _ in seen if o < end]
    assert len(below) == len(set(below))  # one record per key below the cleaned point
    assert [o for o, _, _ in seen if o >= end] == list(range(end, 60))


def test_a_consumer_reads_the_cleaned_log_after_a_restart(tmp_path):
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker(log_dir=tmp_path) as broker:
        broker.create_topic(
            "compacted", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "500"}
        )
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(60):  # a batch each
            producer.send("compacted", key=b"k%d" % (i % 5), value=b"v%d" % i).get(timeout=10)
        producer.close()
        assert broker.clean_logs()

        def read():
            consumer = kafka.KafkaConsumer(
                bootstrap_servers=broker.bootstrap_servers,
                auto_offset_reset="earliest",
                consumer_timeout_ms=2000,
            )
            consumer.assign([kafka.TopicPartition("compacted", 0)])
            try:
                return [(m.offset, m.key, m.value) for m in consumer]
            finally:
                consumer.close()

        first = read()
    with Broker(log_dir=tmp_path) as broker:
        assert read() == first
        assert broker.clean_logs() == {}  # nothing dirty: the checkpoint says where it was


# ---------------------------------------------------------------- the internal topics


def open_state(path):
    from fastkwire.broker._coordinator_state import CoordinatorState
    from fastkwire.broker._groups import GroupCoordinator
    from fastkwire.broker._transactions import TransactionCoordinator

    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id(), offsets_topic_partitions=1)
    storage.attach(cluster, settle=False)
    if "t" not in cluster.topics:
        cluster.create_topic("t", 2)
    groups = GroupCoordinator(topic_partitions=cluster.partition_count)
    txns = TransactionCoordinator(cluster, time.monotonic, groups.end_transaction)
    CoordinatorState(storage, cluster, groups, txns).load()
    return storage, cluster, groups, txns


def test_consumer_offsets_stop_growing_and_load_back_the_same(tmp_path):
    from fastkwire.broker._offsets import Committed

    storage, cluster, groups, txns = open_state(tmp_path)
    offsets = cluster.internal_topic("__consumer_offsets")
    assert offsets.config("segment.bytes") == "104857600"  # Kafka's offsets.topic.segment.bytes
    offsets.configs["segment.bytes"] = "2000"  # small segments: the active one rolls soon
    cleaner = LogCleaner(cluster, time.monotonic, time.time)
    log = offsets.partitions[0].log
    sizes = []
    for round_ in range(10):
        for i in range(100):
            groups.offsets.commit("g", "t", i % 2, Committed(round_ * 100 + i, 1, "", 0.0))
        groups.offsets.commit("gone", "t", 0, Committed(1, -1, "", 0.0))
        groups.offsets.delete_group("gone")
        txns.init("tx", 60000)
        cleaner.clean(int(time.time() * 1000))
        sizes.append(log.bytes)
    assert log.log_end > 1000  # every commit was written
    assert max(sizes[3:]) < 2 * 2000 + 2000  # cleaned part + active segment: bounded
    storage.close()
    storage, cluster, groups, txns = open_state(tmp_path)
    committed = groups.offsets.by_topic("g")["t"]
    assert {p: c.offset for p, c in committed.items()} == {0: 998, 1: 999}
    assert not groups.offsets.has_offsets("gone")
    assert txns.transactions["tx"].epoch == 9  # ten inits: the last one's epoch
    storage.close()


def test_the_broker_cleans_on_its_timer_in_memory():
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker(log_cleaner_backoff_ms=50) as broker:
        broker.create_topic(
            "compacted", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "500"}
        )
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(60):
            producer.send("compacted", key=b"k%d" % (i % 5), value=b"v%d" % i).get(timeout=10)
        producer.close()

        def batches_held():
            return broker.call(
                lambda: len(broker.broker.cluster.topics["compacted"].partitions[0].log)
            )

        deadline = time.monotonic() + 10
        while batches_held() >= 60 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert batches_held() < 60  # a pass ran by itself
        described = broker.broker.cleaner.backoff_ms
    assert described == 50


def test_confluent_kafka_reads_past_a_producers_emptied_batch():
    ck = pytest.importorskip("confluent_kafka")
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker() as broker:
        broker.create_topic(
            "c", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "400"}
        )
        idempotent = ck.Producer(
            {"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True}
        )
        for i in range(20):  # offsets 0-19, one batch each: its last one's records go
            idempotent.produce("c", key=b"a", value=b"old%d" % i, partition=0)
            assert idempotent.flush(10) == 0
        plain = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(30):  # 20-49
            key = b"a" if i < 3 else b"k%d" % (i % 4)
            plain.send("c", key=key, value=b"new%d" % i, partition=0).get(timeout=10)
        plain.close()
        end = broker.clean_logs()[("c", 0)].end
        held = broker.call(
            lambda: records.read_batches(
                broker.broker.cluster.partition("c", 0).log.read(0, 1 << 20)
            )
        )
        emptied = [b for b in held if not b.records]
        assert [b.base_offset for b in emptied if b.producer_id >= 0] == [19]
        consumer = ck.Consumer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "group.id": "reader",
                "enable.auto.commit": False,
            }
        )
        consumer.assign([ck.TopicPartition("c", 0, 0)])
        got = []
        deadline = time.monotonic() + 15
        while (not got or got[-1][0] < 49) and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and not m.error():
                got.append((m.offset(), m.key(), m.value()))
        consumer.close()
        # the idempotent producer goes on after the pass: its sequence is still known
        idempotent.produce("c", key=b"a", value=b"after", partition=0)
        assert idempotent.flush(10) == 0
    assert got[0] == (22, b"a", b"new2")
    assert [o for o, _, _ in got if o >= end] == list(range(end, 50))
    assert len({k for o, k, _ in got if o < end}) == len([o for o, _, _ in got if o < end])


def test_a_read_from_an_offset_in_a_gap_starts_at_the_next_batch():
    cluster = Cluster(NODES)
    topic = compacted(cluster)
    p = topic.partitions[0]
    fill(p, 5)
    write(p, [(b"once", b"kept")])  # offset 5 stays, with gaps on both sides
    fill(p, 30)
    clean_partition(topic, p, None, NOW)
    held = [(b.base_offset, b.base_offset + b.last_offset_delta) for b in batches(p)]
    gaps = [o for o in range(36) if not any(lo <= o <= hi for lo, hi in held)]
    assert 6 in gaps
    for offset in gaps:
        (first, *_) = records.read_batches(p.log.read(offset, 1))  # one batch: the first
        assert first.base_offset > offset


@pytest.mark.parametrize(
    "policy, error", [("compact", "POLICY_VIOLATION"), ("compact,delete", None)]
)
def test_delete_records_on_a_compacted_topic_is_a_policy_violation(policy, error):
    cluster = Cluster(NODES)
    topic = compacted(cluster, cleanup_policy=policy)
    fill(topic.partitions[0], 5)
    apis = Apis(cluster, clock=lambda: 0.0, wall_clock=lambda: 1000.0)
    D = fastkwire.DeleteRecordsRequest
    request = D(
        topics=[
            D.DeleteRecordsTopic(
                name="t", partitions=[D.DeleteRecordsPartition(partition_index=0, offset=3)]
            )
        ],
        timeout_ms=1000,
    )
    out = []
    apis.handle(D.API_KEY, 2, request, Context(0), out.append)
    (part,) = out[0].topics[0].partitions
    assert part.error_code == (0 if error is None else by_name(error).code)
    assert topic.partitions[0].log.log_start == (3 if error is None else 0)


def test_a_read_committed_consumer_after_a_pass_over_transactions():
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker() as broker:
        broker.create_topic(
            "tx", partitions=1, configs={"cleanup.policy": "compact", "segment.bytes": "300"}
        )
        producer = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, transactional_id="writer"
        )
        producer.init_transactions()
        for round_, commit in enumerate([True, False, True, False]):
            producer.begin_transaction()
            for key in (b"a", b"b"):
                producer.send("tx", key=key, value=b"%s-%d" % (key, round_), partition=0)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
        producer.close()
        plain = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        for i in range(20):  # later segments: the transactions' become cleanable
            plain.send("tx", key=b"k%d" % (i % 3), value=b"%d" % i, partition=0).get(timeout=10)
        plain.close()
        end = broker.clean_logs(force=True)[("tx", 0)].end

        def read(isolation):
            consumer = kafka.KafkaConsumer(
                bootstrap_servers=broker.bootstrap_servers,
                auto_offset_reset="earliest",
                consumer_timeout_ms=2000,
                isolation_level=isolation,
            )
            consumer.assign([kafka.TopicPartition("tx", 0)])
            try:
                return [(m.key, m.value) for m in consumer]
            finally:
                consumer.close()

        committed = read("read_committed")
        uncommitted = read("read_uncommitted")
    assert end > 10  # the transactions are below the cleaned point
    for seen in (committed, uncommitted):  # the aborted records are gone for both
        assert [v for k, v in seen if k in (b"a", b"b")] == [b"a-2", b"b-2"]


def test_a_partition_whose_pass_fails_is_left_as_it_is(monkeypatch):
    cluster = Cluster(NODES)
    topic = compacted(cluster)
    fill(topic.partitions[0], 30)
    before = raw_batches(topic.partitions[0])
    cleaner = LogCleaner(cluster, time.monotonic, time.time)

    def undecodable(data, **_):
        raise ImportError("cramjam is needed for zstd batches")

    monkeypatch.setattr(records, "read_batches", undecodable)
    assert cleaner.clean(NOW) == {}
    assert "cramjam" in cleaner.uncleanable[("t", 0)]
    monkeypatch.undo()
    assert cleaner.clean(NOW) == {}  # marked: not tried again
    assert raw_batches(topic.partitions[0]) == before

"""fastkwire.broker's coordinators across a restart on the same log directory: committed
offsets, classic groups, transactional ids and producer ids come back, as Kafka keeps them
in `__consumer_offsets` and `__transaction_state` (Kafka's record formats, which
fastkwire.read_segments reads back); the records' own encoding, and what a record that is
not what it claims gives (an error naming the partition, offset and field)."""

import gc
import socket
import struct
import subprocess
import sys
import time

import pytest

from fastkwire import records
from fastkwire.broker import Cluster, read_batch_head
from fastkwire.broker._coordinator_records import (
    GROUP_METADATA,
    OFFSET_COMMIT,
    TRANSACTION_LOG,
    RecordFormatError,
    UnknownRecordError,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_type_of,
)
from fastkwire.broker._coordinator_state import CoordinatorState, CoordinatorStateError
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.broker._groups import GroupCoordinator
from fastkwire.broker._offsets import Committed
from fastkwire.broker._transactions import TransactionCoordinator
from fastkwire.testing import Broker

NODES = {0: ("127.0.0.1", 9092)}


# ---------------------------------------------------------------- the records' bytes


def test_an_offset_commit_record_is_kafkas_layout():
    key = encode_key(OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": 3})
    assert key == struct.pack(">hh1sh1si", 1, 1, b"g", 1, b"t", 3)
    fields = {"offset": 42, "leader_epoch": 7, "metadata": "m", "commit_timestamp": 99}
    value = encode_value(OFFSET_COMMIT, fields)
    assert value == struct.pack(">hqih1sq", 3, 42, 7, 1, b"m", 99)
    record_type, key_type = record_type_of("__consumer_offsets", key)
    assert record_type is OFFSET_COMMIT and key_type == 1
    assert decode_key(record_type, key_type, key) == {"group": "g", "topic": "t", "partition": 3}
    assert decode_value(OFFSET_COMMIT, value) == (3, {**fields, "expire_timestamp": -1})
    # version 1 has the expire timestamp and no leader epoch; version 4 is flexible
    v1 = struct.pack(">hqh1sqq", 1, 5, 1, b"x", 6, 8)
    assert decode_value(OFFSET_COMMIT, v1)[1] == {
        "offset": 5,
        "leader_epoch": -1,
        "metadata": "x",
        "commit_timestamp": 6,
        "expire_timestamp": 8,
    }
    v4 = struct.pack(">hqiB1sqB", 4, 5, 2, 2, b"x", 6, 1) + bytes([9, 2, 0xAB, 0xCD])
    assert decode_value(OFFSET_COMMIT, v4)[1]["offset"] == 5  # tag 9 unknown: skipped


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_group_metadata_values_round_trip_at_every_version(version):
    member = {
        "member_id": "m-1",
        "group_instance_id": "i" if version >= 3 else None,
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "rebalance_timeout": 300 if version >= 1 else -1,
        "session_timeout": 10,
        "subscription": b"\x00\x01",
        "assignment": b"",
    }
    fields = {
        "protocol_type": "consumer",
        "generation": 4,
        "protocol": "range",
        "leader": None,
        "current_state_timestamp": 17 if version >= 2 else -1,
        "members": [member],
    }
    assert decode_value(GROUP_METADATA, encode_value(GROUP_METADATA, fields, version)) == (
        version,
        fields,
    )


@pytest.mark.parametrize("version", [0, 1])
def test_transaction_log_values_round_trip(version):
    fields = {
        "producer_id": 1000,
        "previous_producer_id": 12 if version else -1,
        "next_producer_id": -1,
        "producer_epoch": 3,
        "transaction_timeout_ms": 60000,
        "transaction_status": 1,
        "transaction_partitions": [{"topic": "t", "partition_ids": [0, 2]}],
        "transaction_last_update_timestamp_ms": 5,
        "transaction_start_timestamp_ms": 4,
        "client_transaction_version": 0,
    }
    value = encode_value(TRANSACTION_LOG, fields, version)
    assert decode_value(TRANSACTION_LOG, value) == (version, fields)


def test_bad_record_bytes_name_the_field_and_offset():
    value = encode_value(OFFSET_COMMIT, {"offset": 1, "metadata": "abc", "commit_timestamp": 2})
    with pytest.raises(
        RecordFormatError, match=r"OffsetCommitValue: .*commit_timestamp.* at byte 19"
    ):
        decode_value(OFFSET_COMMIT, value[:-1])
    with pytest.raises(RecordFormatError, match="past its end"):
        decode_value(OFFSET_COMMIT, value + b"\x00")
    huge = struct.pack(">hqi", 0, 0, 0) + struct.pack(">hI", 1, 0x7FFFFFFF)
    with pytest.raises(RecordFormatError, match="members: 2147483647 items do not fit"):
        decode_value(
            GROUP_METADATA, struct.pack(">hh1sih1sh1s", 0, 1, b"c", 1, 1, b"r", 1, b"l") + huge[-4:]
        )
    with pytest.raises(UnknownRecordError, match="version 9"):
        decode_value(OFFSET_COMMIT, struct.pack(">hq", 9, 0))
    with pytest.raises(UnknownRecordError, match="record type 9"):  # a share group's: not kept
        record_type_of("__consumer_offsets", struct.pack(">h", 9))


# ---------------------------------------------------------------- sans-IO, on a log dir


def open_state(path, wall_clock=time.time):
    storage = DiskLogs(path)
    cluster = Cluster(NODES, cluster_id=storage.cluster_id())
    storage.attach(cluster, settle=False)
    groups = GroupCoordinator(topic_partitions=cluster.partition_count)
    txns = TransactionCoordinator(cluster, time.monotonic, groups.end_transaction)
    state = CoordinatorState(storage, cluster, groups, txns, wall_clock)
    try:
        state.load()
    except BaseException:
        storage.close()
        raise
    return storage, cluster, groups, txns, state


def test_offsets_and_deletions_come_back_from_the_records(tmp_path):
    storage, cluster, groups, _, _ = open_state(tmp_path)
    cluster.create_topic("t", 3)
    for p in range(3):
        groups.offsets.commit("g", "t", p, Committed(10 + p, 1, "meta", 0.0))
    groups.offsets.commit("g", "t", 0, Committed(20, 2, None, 0.0))  # the last one wins
    groups.offsets.delete("g", "t", 1)
    groups.offsets.commit("gone", "t", 0, Committed(5, -1, "", 0.0))
    groups.offsets.delete_group("gone")
    storage.close()
    storage, cluster, groups, _, state = open_state(tmp_path)
    assert {
        p: (c.offset, c.leader_epoch, c.metadata)
        for p, c in groups.offsets.by_topic("g")["t"].items()
    } == {
        0: (20, 2, ""),
        2: (12, 1, "meta"),
    }
    assert not groups.offsets.has_offsets("gone")
    assert groups.groups["g"].state == "Empty"  # a simple group comes back empty
    assert state.skipped == 0
    storage.close()


def test_offsets_expire_by_their_commit_time_across_a_restart(tmp_path):
    week = 7 * 24 * 3600
    storage, cluster, groups, _, _ = open_state(tmp_path, lambda: time.time() - week - 60)
    cluster.create_topic("t", 1)
    groups.offsets.commit("old", "t", 0, Committed(1, -1, "", 0.0))
    storage.close()
    storage, cluster, groups, _, _ = open_state(tmp_path, lambda: time.time() - 120)
    groups.offsets.commit("new", "t", 0, Committed(2, -1, "", 0.0))
    storage.close()
    storage, cluster, groups, _, _ = open_state(tmp_path)
    committed = groups.offsets.get("old", "t", 0)
    assert time.monotonic() - committed.commit_time > week  # the record's time, not the load's
    groups._expire_offsets()  # Kafka's retention check (offsets.retention.minutes: 7 days)
    assert not groups.offsets.has_offsets("old") and "old" not in groups.groups
    assert groups.offsets.get("new", "t", 0).offset == 2
    storage.close()
    # the expiry wrote its tombstones: gone after the next restart too
    storage, cluster, groups, _, _ = open_state(tmp_path)
    assert not groups.offsets.has_offsets("old")
    storage.close()


def test_a_corrupt_record_stops_the_load_naming_where(tmp_path):
    storage, cluster, groups, _, _ = open_state(tmp_path)
    groups.offsets.commit("g", "t", 0, Committed(1, -1, "", 0.0))
    index = cluster.coordinator_partition("g")
    log = cluster.topics["__consumer_offsets"].partitions[index].log
    bad = records.write_batch(
        [
            records.Record(
                timestamp=1,
                key=encode_key(OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": 0}),
                value=b"\x00\x03\x00",
            )
        ]
    )
    log.append(read_batch_head(bad), bad)
    unknown = records.write_batch([records.Record(timestamp=1, key=b"\x00\x63", value=b"")])
    log.append(read_batch_head(unknown), unknown)
    storage.close()
    with pytest.raises(
        CoordinatorStateError,
        match=rf"__consumer_offsets-{index}, offset 1: OffsetCommitValue: offset",
    ):
        open_state(tmp_path)
    # the command says it in the user's terms, without a traceback
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire", "broker", "--listen", "127.0.0.1:0"]
        + ["--log-dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 3
    assert f"error: --log-dir {tmp_path}: __consumer_offsets-{index}, offset 1:" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_record_types_are_skipped(tmp_path):
    storage, cluster, groups, _, _ = open_state(tmp_path)
    groups.offsets.commit("g", "t", 0, Committed(1, -1, "", 0.0))
    log = cluster.topics["__consumer_offsets"].partitions[cluster.coordinator_partition("g")].log
    unknown = records.write_batch([records.Record(timestamp=1, key=b"\x00\x63", value=b"")])
    log.append(read_batch_head(unknown), unknown)
    storage.close()
    storage, _, groups, _, state = open_state(tmp_path)
    assert state.skipped == 1 and groups.offsets.get("g", "t", 0).offset == 1
    storage.close()


def _open_transaction(cluster, txns, tid):
    """A transaction of `tid` with one record in t-0, left under way; its Transaction."""
    pid, epoch, error = txns.init(tid, 60000)
    assert error is None
    txns.transactions[tid].partitions.add(("t", 0))
    txns.begin(tid)
    data = records.write_batch(
        [records.Record(timestamp=1, value=b"v")],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    cluster.partition("t", 0).log.append(read_batch_head(data), data)
    return txns.transactions[tid]


def _last_marker(log):
    """(producer id, commit) of the partition's last batch, a control batch."""
    (batch,) = records.read_batches(log.read(log.log_end - 1, 1 << 20))
    assert batch.is_control
    return batch.producer_id, batch.records[0].key[3] == 1  # ControlRecordType: 1 commit


@pytest.mark.parametrize("committing", [True, False])
def test_a_transaction_that_was_ending_completes_at_the_load(tmp_path, committing):
    from fastkwire.broker._coordinator_records import PREPARE_ABORT, PREPARE_COMMIT

    storage, cluster, _, txns, _ = open_state(tmp_path)
    cluster.create_topic("t", 1)
    txn = _open_transaction(cluster, txns, "x")
    # the broker stopped between the coordinator's PrepareCommit/Abort and the markers
    txns.on_change(txn, PREPARE_COMMIT if committing else PREPARE_ABORT)
    pid, epoch = txn.producer_id, txn.epoch
    storage.close()
    storage, cluster, _, txns, _ = open_state(tmp_path)
    log = cluster.partition("t", 0).log
    assert _last_marker(log) == (pid, committing)
    assert not log.ongoing and bool(log.aborted) is not committing
    txn = txns.transactions["x"]
    assert (txn.producer_id, txn.epoch, txn.ongoing, txn.ended) == (pid, epoch, False, committing)
    storage.close()


def test_a_transaction_left_open_is_aborted_and_fenced_at_the_load(tmp_path):
    storage, cluster, _, txns, _ = open_state(tmp_path)
    cluster.create_topic("t", 2)
    txn = _open_transaction(cluster, txns, "x")
    txn.partitions.add(("t", 1))  # a second AddPartitionsToTxn
    txns.begin("x")
    pid, epoch = txn.producer_id, txn.epoch
    log = (
        cluster.internal_topic("__transaction_state")
        .partitions[cluster.coordinator_partition("x")]
        .log
    )
    (last,) = records.read_batches(log.read(log.log_end - 1, 1 << 20))
    _, kept = decode_value(TRANSACTION_LOG, last.records[0].value)
    assert kept["transaction_status"] == 1  # Ongoing
    assert kept["transaction_partitions"] == [{"topic": "t", "partition_ids": [0, 1]}]
    storage.close()
    storage, cluster, _, txns, _ = open_state(tmp_path)
    log = cluster.partition("t", 0).log
    assert _last_marker(log) == (pid, False) and not log.ongoing
    assert txns.check("x", pid, epoch) == "PRODUCER_FENCED"
    assert txns.check("x", pid, epoch + 1) is None
    storage.close()
    # what the load wrote is kept too: a second restart has nothing left to settle
    storage, cluster, _, txns, _ = open_state(tmp_path)
    assert len(cluster.partition("t", 0).log) == 2  # the record and one marker
    assert (txns.transactions["x"].epoch, txns.transactions["x"].ended) == (epoch + 1, False)
    storage.close()


# ---------------------------------------------------------------- real clients


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_consumer_group_resumes_at_its_committed_offset_after_a_restart(tmp_path):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient

    with Broker(log_dir=tmp_path) as b:
        b.create_topic("orders", partitions=1)
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        for i in range(10):
            producer.send("orders", b"%d" % i, partition=0)
        producer.flush(20)
        producer.close(20)
        consumer = kafka.KafkaConsumer(
            "orders",
            group_id="billing",
            bootstrap_servers=b.bootstrap_servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=5000,
        )
        got = []
        for m in consumer:
            got.append(m.value)
            if len(got) == 4:
                break
        consumer.commit()
        consumer.close()
    assert got == [b"0", b"1", b"2", b"3"]
    # the records are Kafka's: read_segments reads the internal topic's directory
    pa = pytest.importorskip("pyarrow")
    import fastkwire

    table = fastkwire.read_segments([str(d) for d in tmp_path.glob("__consumer_offsets-*")])
    kinds = set()
    for key, value in zip(table.column("key").to_pylist(), table.column("value").to_pylist()):
        record_type, key_type = record_type_of("__consumer_offsets", key)
        kinds.add(record_type.name)
        if record_type is OFFSET_COMMIT:
            assert decode_key(record_type, key_type, key) == {
                "group": "billing",
                "topic": "orders",
                "partition": 0,
            }
            assert decode_value(record_type, value)[1]["offset"] == 4
    assert kinds == {"OffsetCommit", "GroupMetadata"}
    del pa
    with Broker(log_dir=tmp_path) as b:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
        offsets = admin.list_group_offsets("billing")
        groups = admin.describe_groups(["billing"])
        admin.close()
        assert {tp.partition: om.offset for tp, om in offsets["billing"].items()} == {0: 4}
        consumer = kafka.KafkaConsumer(
            "orders",
            group_id="billing",
            bootstrap_servers=b.bootstrap_servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            consumer_timeout_ms=3000,
        )
        assert [m.value for m in consumer] == [b"%d" % i for i in range(4, 10)]
        consumer.close()
    described = groups["billing"]
    assert (described["group_state"], described["protocol_type"]) == ("Empty", "consumer")


def test_a_member_keeps_its_place_through_a_restart_on_the_same_port(tmp_path):
    kafka = pytest.importorskip("kafka")
    port = _free_port()
    with Broker(log_dir=tmp_path, ports=[port]) as b:
        b.create_topic("events", partitions=2)
        consumer = kafka.KafkaConsumer(
            group_id="stay",
            bootstrap_servers=b.bootstrap_servers,
            session_timeout_ms=6000,
            heartbeat_interval_ms=200,
            consumer_timeout_ms=500,
        )
        # the leader assigns what its metadata knows: the topic's partitions first
        assert consumer.partitions_for_topic("events") == {0, 1}
        consumer.subscribe(["events"])
        deadline = time.monotonic() + 20
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(200)
        settled = time.monotonic() + 1.5  # a rejoin of the client's own (new metadata) ends
        while time.monotonic() < settled:
            consumer.poll(200)
        before = consumer._coordinator._generation
        assert len(consumer.assignment()) == 2
    with Broker(log_dir=tmp_path, ports=[port]) as b:
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap_servers)
        producer.send("events", b"after", partition=1).get(20)
        producer.close(20)
        got = []
        deadline = time.monotonic() + 20
        while not got and time.monotonic() < deadline:
            got += [r.value for rs in consumer.poll(200).values() for r in rs]
        after = consumer._coordinator._generation
        consumer.close(autocommit=False)
    assert got == [b"after"]
    # the group came back with its member: heartbeats went on, no new generation
    assert (after.member_id, after.generation_id) == (before.member_id, before.generation_id)


def test_deleted_groups_and_offsets_stay_deleted_after_a_restart(tmp_path):
    kafka = pytest.importorskip("kafka")
    from kafka.admin import KafkaAdminClient
    from kafka.structs import OffsetAndMetadata, TopicPartition

    tp0, tp1 = TopicPartition("t", 0), TopicPartition("t", 1)
    with Broker(log_dir=tmp_path) as b:
        b.create_topic("t", partitions=2)
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
        for group in ("keep", "drop"):
            consumer = kafka.KafkaConsumer(group_id=group, bootstrap_servers=b.bootstrap_servers)
            consumer.commit({tp0: OffsetAndMetadata(3, "", -1), tp1: OffsetAndMetadata(5, "", -1)})
            consumer.close()
        admin.delete_group_offsets("keep", [tp1])
        admin.delete_groups(["drop"])
        admin.close()
    with Broker(log_dir=tmp_path) as b:
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
        kept = admin.list_group_offsets("keep")["keep"]
        listed = {g["group_id"] for g in admin.list_groups()}
        admin.close()
    assert {tp: om.offset for tp, om in kept.items()} == {tp0: 3}
    assert "keep" in listed and "drop" not in listed


def test_a_transactional_id_keeps_its_producer_id_and_fences_across_a_restart(tmp_path):
    kafka = pytest.importorskip("kafka")

    def init(b, tid):
        p = kafka.KafkaProducer(bootstrap_servers=b.bootstrap_servers, transactional_id=tid)
        p.init_transactions()
        return p, p._transaction_manager.producer_id_and_epoch

    with Broker(log_dir=tmp_path) as b:
        b.create_topic("out", partitions=1)
        done, done_ids = init(b, "done")
        done.begin_transaction()
        done.send("out", b"committed", partition=0)
        done.send_offsets_to_transaction(
            {kafka.TopicPartition("out", 0): kafka.OffsetAndMetadata(7, "", -1)}, "copier"
        )
        done.commit_transaction()
        done.close(5)
        left, left_ids = init(b, "left")
        left.begin_transaction()
        left.send("out", b"left open", partition=0)
        left.flush(20)
        left.close(0)
        idle, idle_ids = init(b, "idle")  # an id handed out, nothing written with it
        idle.close(5)
    with Broker(log_dir=tmp_path) as b:
        again, again_ids = init(b, "done")
        assert (again_ids.producer_id, again_ids.epoch) == (
            done_ids.producer_id,
            done_ids.epoch + 1,
        )
        again.close(5)
        # the transaction left open was aborted at the load, its producer fenced (epoch
        # bumped), so the next init bumps it once more
        reopened, reopened_ids = init(b, "left")
        assert reopened_ids.producer_id == left_ids.producer_id
        assert reopened_ids.epoch == left_ids.epoch + 2
        reopened.close(5)
        fresh, fresh_ids = init(b, "new")
        fresh.close(5)
        assert fresh_ids.producer_id not in (
            done_ids.producer_id,
            left_ids.producer_id,
            idle_ids.producer_id,
        )
        assert fresh_ids.producer_id > idle_ids.producer_id
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=b.bootstrap_servers,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            consumer_timeout_ms=2000,
        )
        consumer.assign([kafka.TopicPartition("out", 0)])
        assert [m.value for m in consumer] == [b"committed"]
        consumer.close()
        from kafka.admin import KafkaAdminClient

        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap_servers)
        committed = admin.list_group_offsets("copier")["copier"]
        admin.close()
        assert {tp.partition: om.offset for tp, om in committed.items()} == {0: 7}


def test_an_old_epoch_is_fenced_after_a_restart(tmp_path):
    ck = pytest.importorskip("confluent_kafka")
    port = _free_port()
    with Broker(log_dir=tmp_path, ports=[port]) as b:
        b.create_topic("out", partitions=1)
        old = ck.Producer(
            {"bootstrap.servers": b.bootstrap_servers, "transactional.id": "x", "linger.ms": 1}
        )
        old.init_transactions(20)
    with Broker(log_dir=tmp_path, ports=[port]) as b:
        new = ck.Producer(
            {"bootstrap.servers": b.bootstrap_servers, "transactional.id": "x", "linger.ms": 1}
        )
        new.init_transactions(20)
        old.begin_transaction()
        old.produce("out", b"stale", partition=0)
        with pytest.raises(ck.KafkaException) as raised:
            old.commit_transaction(20)
        assert raised.value.args[0].code() in (
            ck.KafkaError._FENCED,
            ck.KafkaError.PRODUCER_FENCED,
            ck.KafkaError.INVALID_PRODUCER_EPOCH,
        )
        new.begin_transaction()
        new.produce("out", b"fresh", partition=0)
        new.commit_transaction(20)
        old = new = None  # librdkafka's threads end with the broker still there
        gc.collect()


def test_hostile_coordinator_records_keep_the_load_contract():
    """fuzz/hostile_coordinator_state.py's contract over a short run (the long one: its --loop)."""
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_coordinator_state

    assert hostile_coordinator_state.run(60, seed=7) == 0


def _member(member_id="m", instance_id=None):
    return {
        "member_id": member_id,
        "group_instance_id": instance_id,
        "client_id": "c",
        "client_host": "/127.0.0.1",
        "rebalance_timeout": 3000,
        "session_timeout": 6000,
        "subscription": b"\x00\x00\x00\x00\x00\x00",
        "assignment": b"",
    }


def _group_value(**changes):
    fields = {
        "protocol_type": "consumer",
        "generation": 2,
        "protocol": "range",
        "leader": "m",
        "members": [_member()],
    }
    fields.update(changes)
    return encode_value(GROUP_METADATA, fields)


@pytest.mark.parametrize(
    "changes, problem",
    [
        ({"generation": -1}, "generation -1"),
        ({"protocol": None}, "members without a protocol"),
        # JoinGroup of the second static member had raised KeyError
        ({"members": [_member("m", "i1"), _member("m", "i2")]}, "member id 'm' twice"),
        ({"members": [_member("m", "i"), _member("n", "i")]}, "group instance id 'i' twice"),
    ],
)
def test_a_group_record_the_coordinator_cannot_take_back_stops_the_load(tmp_path, changes, problem):
    # Such a group loaded had made DescribeGroups' or JoinGroup's answer not encode.
    storage, cluster, _, _, _ = open_state(tmp_path)
    index = cluster.coordinator_partition("g")
    log = cluster.internal_topic("__consumer_offsets").partitions[index].log
    data = records.write_batch(
        [
            records.Record(
                timestamp=1,
                key=encode_key(GROUP_METADATA, {"group": "g"}),
                value=_group_value(**changes),
            )
        ]
    )
    log.append(read_batch_head(data), data)
    storage.close()
    with pytest.raises(CoordinatorStateError, match=rf"-{index}, offset 0: .*{problem}"):
        open_state(tmp_path)


@pytest.mark.parametrize("text", ["\u00b2", "9" * 5000, "-5", "12 34", "0x10"])
def test_a_producer_ids_file_that_is_not_a_number_is_ignored(tmp_path, text):
    # "²" passes str.isdigit() but not int(); 5000 digits pass neither int() nor the cap.
    storage, cluster, _, _, _ = open_state(tmp_path)
    storage.close()
    (tmp_path / "fastkwire-producer-ids").write_text(f"0\n1\n{text}\n", encoding="utf-8")
    storage, cluster, _, _, _ = open_state(tmp_path)
    assert cluster.producer_ids.new() == 1000
    storage.close()


def test_offsets_of_transactions_count_only_once_committed_in_log_order(tmp_path):
    # As Kafka's log holds them: TxnOffsetCommit records in transactional batches, then the
    # transaction's marker. Aborted or still open ones had been loaded as committed.
    storage, cluster, groups, _, _ = open_state(tmp_path)
    index = cluster.coordinator_partition("g")
    log = cluster.internal_topic("__consumer_offsets").partitions[index].log

    def commit(partition, offset, producer_id=-1):
        data = records.write_batch(
            [
                records.Record(
                    timestamp=1,
                    key=encode_key(
                        OFFSET_COMMIT, {"group": "g", "topic": "t", "partition": partition}
                    ),
                    value=encode_value(
                        OFFSET_COMMIT, {"offset": offset, "metadata": "", "commit_timestamp": 1}
                    ),
                )
            ],
            producer_id=producer_id,
            producer_epoch=0 if producer_id >= 0 else -1,
            base_sequence=0 if producer_id >= 0 else -1,
            is_transactional=producer_id >= 0,
        )
        log.append(read_batch_head(data), data)

    for p in range(4):
        commit(p, 1)
    commit(0, 5, producer_id=7)  # aborted
    commit(1, 9, producer_id=8)  # never ended
    commit(2, 7, producer_id=9)  # committed
    commit(3, 20, producer_id=10)  # committed, but a later commit of the partition wins
    commit(3, 30)
    log.write_marker(7, 0, False, 1)
    log.write_marker(9, 0, True, 1)
    log.write_marker(10, 0, True, 1)
    storage.close()
    storage, _, groups, _, _ = open_state(tmp_path)
    got = {p: c.offset for p, c in groups.offsets.by_topic("g")["t"].items()}
    assert got == {0: 1, 1: 1, 2: 7, 3: 30}
    storage.close()


def test_a_group_at_the_last_generation_rebalances_to_generation_1(tmp_path):
    # Loaded at int32's top, its next JoinGroup answer had not encoded (2**31); what it
    # writes then loads back.
    from fastkwire import JoinGroupRequest, SyncGroupRequest, encode_response
    from fastkwire.broker import Context

    storage, cluster, _, _, _ = open_state(tmp_path)
    index = cluster.coordinator_partition("g")
    log = cluster.internal_topic("__consumer_offsets").partitions[index].log
    value = _group_value(generation=0x7FFFFFFF)
    data = records.write_batch(
        [records.Record(timestamp=1, key=encode_key(GROUP_METADATA, {"group": "g"}), value=value)]
    )
    log.append(read_batch_head(data), data)
    storage.close()
    storage, _, groups, _, _ = open_state(tmp_path)
    assert groups.groups["g"].generation == 0x7FFFFFFF
    J = JoinGroupRequest
    answers = []
    request = J(
        group_id="g",
        session_timeout_ms=60000,
        rebalance_timeout_ms=60000,
        member_id="m",
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 6)],
    )
    groups.handle(J.API_KEY, 5, request, Context(0, "c", "127.0.0.1"), answers.append)
    assert [a.generation_id for a in answers] == [1]
    encode_response(answers[0], 5, 1)
    S = SyncGroupRequest
    sync = S(group_id="g", generation_id=1, member_id="m", assignments=[])
    groups.handle(S.API_KEY, 3, sync, Context(0, "c", "127.0.0.1"), answers.append)
    assert answers[-1].error_code == 0  # the rebalance ended: its record written
    storage.close()
    storage, _, groups, _, _ = open_state(tmp_path)
    assert groups.groups["g"].generation == 1
    storage.close()


@pytest.mark.parametrize("producer_id", [(1 << 62) - 1, (1 << 63) - 1])
def test_a_transactional_id_at_a_huge_producer_id_and_what_it_writes_load_back(
    tmp_path, producer_id
):
    # At 2**62 - 1 the id handed out next (its epoch exhausted) was refused by the next
    # load: the coordinator's own record stopped the start.
    storage, cluster, _, txns, _ = open_state(tmp_path)
    index = cluster.coordinator_partition("tx")
    log = cluster.internal_topic("__transaction_state").partitions[index].log
    fields = {
        "producer_id": producer_id,
        "producer_epoch": 32766,
        "transaction_timeout_ms": 60000,
        "transaction_status": 4,  # CompleteCommit
        "transaction_partitions": [],
        "transaction_last_update_timestamp_ms": 1,
        "transaction_start_timestamp_ms": -1,
    }
    value = encode_value(TRANSACTION_LOG, fields)
    key = encode_key(TRANSACTION_LOG, {"transactional_id": "tx"})
    data = records.write_batch([records.Record(timestamp=1, key=key, value=value)])
    log.append(read_batch_head(data), data)
    storage.close()
    storage, _, _, txns, _ = open_state(tmp_path)
    assert txns.transactions["tx"].producer_id == producer_id
    pid, epoch, error = txns.init("tx", 60000)  # the epoch is exhausted: a new id
    assert error is None and epoch == 0 and 0 < pid < 1 << 63
    storage.close()
    storage, _, _, txns, _ = open_state(tmp_path)
    assert (txns.transactions["tx"].producer_id, txns.transactions["tx"].epoch) == (pid, 0)
    storage.close()


def test_a_member_id_made_from_a_long_client_id_is_written_and_read_back(tmp_path):
    # The member id was the client id (up to 32767 bytes) and a UUID: past the int16 length
    # of GroupMetadataValue v3's strings (writing the group at the rebalance's end raised)
    # and of JoinGroup v5's (its answer did not encode).
    from fastkwire import JoinGroupRequest, SyncGroupRequest, encode_response
    from fastkwire.broker import Context

    storage, _, groups, _, _ = open_state(tmp_path)
    ctx = Context(0, "c" * 32767, "127.0.0.1")
    J, S = JoinGroupRequest, SyncGroupRequest
    answers = []

    def join(member_id):
        request = J(
            group_id="g",
            session_timeout_ms=60000,
            rebalance_timeout_ms=60000,
            member_id=member_id,
            protocol_type="consumer",
            protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"\x00" * 6)],
        )
        groups.handle(J.API_KEY, 5, request, ctx, answers.append)
        return answers[-1]

    member_id = join("").member_id  # MEMBER_ID_REQUIRED, with the id to use
    encode_response(answers[-1], 5, 1)  # v5's strings have int16 lengths too
    assert len(member_id.encode()) <= 32767 and member_id.startswith("ccc")
    assert join(member_id).error_code == 0
    sync = S(group_id="g", generation_id=1, member_id=member_id, assignments=[])
    groups.handle(S.API_KEY, 3, sync, ctx, answers.append)
    assert answers[-1].error_code == 0
    storage.close()
    storage, _, groups, _, _ = open_state(tmp_path)
    assert list(groups.groups["g"].members) == [member_id]
    storage.close()


def test_mutated_requests_leave_coordinator_records_that_load_back():
    """fuzz/hostile_requests.py --log-dir over a short run: the coordinators write what
    mutated requests and floods make them hold, and a broker started on it loads it."""
    from pathlib import Path

    pytest.importorskip("cramjam")  # its seeds hold gzip batches
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_requests

    counts, findings, _ = hostile_requests.run(3000, seed=3, log_dir=True)
    assert findings == 0
    assert counts["answered"] and counts["floods"]

"""KIP-848 consumer groups across a restart on the same log directory: their epochs,
members, target and current assignments are written in `__consumer_offsets` as Kafka 4.0's
group coordinator writes them (the ConsumerGroup* records), and read back so that a member
heartbeating again with its member id and epoch goes on; tombstones for members gone and
groups deleted; what a damaged record gives."""

import base64
import json
import socket
import struct
import time
import uuid

import pytest

from fastkwire import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    JoinGroupRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
    records,
)
from fastkwire.broker import Cluster, read_batch_head
from fastkwire.broker._coordinator_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_RECORDS,
    CONSUMER_GROUP_REGULAR_EXPRESSION,
    decode_key,
    decode_value,
    encode_key,
    encode_value,
    record_type_of,
)
from fastkwire.broker._coordinator_state import CoordinatorState, CoordinatorStateError
from fastkwire.broker._disk_logs import DiskLogs
from fastkwire.broker._groups import GroupCoordinator
from fastkwire.broker._transactions import TransactionCoordinator
from fastkwire.testing import Broker

NODES = {0: ("127.0.0.1", 9092)}
OFFSETS = "__consumer_offsets"


# ---------------------------------------------------------------- the records' bytes


def test_consumer_group_records_are_kafkas_layout():
    key = encode_key(CONSUMER_GROUP_METADATA, {"group": "g"})
    assert key == struct.pack(">hh1s", 3, 1, b"g")  # type 3, a non-flexible key
    value = encode_value(CONSUMER_GROUP_METADATA, {"epoch": 7})
    assert value == struct.pack(">hiB", 0, 7, 0)  # v0 is flexible: no tagged fields
    assert record_type_of(OFFSETS, key) == (CONSUMER_GROUP_METADATA, 3)
    assert {t: record_type_of(OFFSETS, struct.pack(">h", t))[1] for t in (3, 4, 5, 6, 7, 8, 16)}
    tid = uuid.UUID(int=5)
    fields = {
        "member_epoch": 4,
        "previous_member_epoch": 3,
        "state": 1,
        "assigned_partitions": [{"topic_id": tid, "partitions": [0, 2]}],
        "partitions_pending_revocation": [],
    }
    value = encode_value(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, fields)
    # version, epochs, state, one topic (compact length 2): its id, 2 partitions, no tags
    assert value == (
        struct.pack(">hiibB", 0, 4, 3, 1, 2)
        + tid.bytes
        + struct.pack(">BiiB", 3, 0, 2, 0)
        + b"\x01\x00"
    )
    assert decode_value(CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT, value) == (0, fields)
    member = {
        "instance_id": None,
        "rack_id": "r",
        "client_id": "c",
        "client_host": "/h",
        "subscribed_topic_names": ["a", "bb"],
        "subscribed_topic_regex": None,
        "rebalance_timeout_ms": 300,
        "server_assignor": "range",
    }
    value = encode_value(CONSUMER_GROUP_MEMBER_METADATA, member)
    assert value[:7] == struct.pack(">hBB1sB1s", 0, 0, 2, b"r", 2, b"c")  # a null id: 0
    # a later version's tagged field (Kafka 4.1+ or the classic member metadata) is skipped
    tagged = value[:-1] + bytes([1, 0, 2, 0xAB, 0xCD])
    assert decode_value(CONSUMER_GROUP_MEMBER_METADATA, tagged) == (0, member)
    key = encode_key(CONSUMER_GROUP_REGULAR_EXPRESSION, {"group": "g", "regular_expression": "t.*"})
    assert key == struct.pack(">hh1sh3s", 16, 1, b"g", 3, b"t.*")
    regex = {"topics": ["ta", "tb"], "version": 0, "timestamp": 9}
    value = encode_value(CONSUMER_GROUP_REGULAR_EXPRESSION, regex)
    assert decode_value(CONSUMER_GROUP_REGULAR_EXPRESSION, value) == (0, regex)


# ---------------------------------------------------------------- sans-IO, on a log dir


class Ctx:
    client_id, client_host = "client", "127.0.0.1"


class State:
    """A coordinator on a fake clock, its state on `path`."""

    def __init__(self, path, create=()):
        self.now = 1000.0
        self.storage = DiskLogs(path)
        self.cluster = Cluster(NODES, cluster_id=self.storage.cluster_id())
        self.storage.attach(self.cluster, settle=False)
        for name, count in create:
            self.cluster.create_topic(name, count)
        clock = lambda: self.now  # noqa: E731
        self.groups = GroupCoordinator(
            clock=clock,
            topic_partitions=self.cluster.partition_count,
            topics=self.cluster.topic_summary,
        )
        txns = TransactionCoordinator(self.cluster, clock, self.groups.end_transaction)
        self.state = CoordinatorState(self.storage, self.cluster, self.groups, txns)
        try:
            self.state.load()
        except BaseException:
            self.storage.close()
            raise

    def call(self, request, version):
        header, decoded = decode_request(encode_request(request, version, 1, "client"))
        answers = []
        self.groups.handle(
            type(request).API_KEY,
            version,
            decoded,
            Ctx(),
            lambda r: answers.append(
                decode_response(encode_response(r, version, 1), type(request).API_KEY, version)[1]
            ),
        )
        assert len(answers) == 1
        return answers[0]

    def heartbeat(self, member_id, epoch, owned=(), group="cg", **kw):
        joining = epoch == 0
        tid = self.cluster.topics["orders"].id
        regex = kw.pop("regex", None)
        request = ConsumerGroupHeartbeatRequest(
            subscribed_topic_regex=regex,
            group_id=group,
            member_id=member_id,
            member_epoch=epoch,
            instance_id=kw.pop("instance", None),
            rebalance_timeout_ms=30_000 if joining else -1,
            subscribed_topic_names=["orders"] if joining and regex is None else None,
            server_assignor=kw.pop("assignor", None),
            topic_partitions=None
            if owned is None
            else [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=tid, partitions=owned)]
            if owned
            else [],
        )
        assert not kw
        return self.call(request, 1)

    def describe(self, group="cg"):
        request = ConsumerGroupDescribeRequest(
            group_ids=[group], include_authorized_operations=False
        )
        return self.call(request, 1).groups[0]

    def close(self):
        self.storage.close()


def owned(answer):
    if answer.assignment is None:
        return None
    return sorted(p for t in answer.assignment.topic_partitions for p in t.partitions)


def described(group):
    """What ConsumerGroupDescribe says of a group, as comparable values."""
    return (
        group.error_code,
        group.group_state,
        group.group_epoch,
        group.assignment_epoch,
        group.assignor_name,
        sorted(
            (
                m.member_id,
                m.instance_id,
                m.member_epoch,
                m.client_id,
                m.client_host,
                tuple(m.subscribed_topic_names),
                tuple((t.topic_name, tuple(t.partitions)) for t in m.assignment.topic_partitions),
                tuple(
                    (t.topic_name, tuple(t.partitions))
                    for t in m.target_assignment.topic_partitions
                ),
            )
            for m in group.members
        ),
    )


def two_members(s):
    """Members a and b (static: i-b) of group cg on a 4-partition topic, reconciled:
    (a's partitions, b's, their epoch)."""
    a = s.heartbeat("m-a", 0)
    assert (a.error_code, a.member_epoch, owned(a)) == (0, 1, [0, 1, 2, 3])
    b = s.heartbeat("m-b", 0, instance="i-b")
    assert (b.error_code, b.member_epoch, owned(b)) == (0, 2, [])  # a must revoke first
    a = s.heartbeat("m-a", 1, owned=[0, 1, 2, 3])
    a_parts = owned(a)
    assert (a.member_epoch, len(a_parts)) == (1, 2)  # revoke two partitions
    a = s.heartbeat("m-a", 1, owned=a_parts)
    assert (a.error_code, a.member_epoch) == (0, 2)
    b = s.heartbeat("m-b", 2, owned=[])
    b_parts = owned(b)
    assert sorted(a_parts + b_parts) == [0, 1, 2, 3]
    assert s.describe().group_state == "Stable"
    return a_parts, b_parts, 2


def _log_records(cluster):
    """[(record type name, key fields, value fields or None)] of __consumer_offsets."""
    out = []
    for partition in cluster.topics[OFFSETS].partitions:
        log = partition.log
        for batch in records.read_batches(log.read(log.log_start, 1 << 24)):
            for r in batch.records:
                record_type, key_type = record_type_of(OFFSETS, r.key)
                value = None if r.value is None else decode_value(record_type, r.value)[1]
                out.append((record_type.name, decode_key(record_type, key_type, r.key), value))
    return out


def test_a_consumer_group_comes_back_with_its_members_and_assignments(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    a_parts, b_parts, epoch = two_members(s)
    before = described(s.describe())
    kinds = {name for name, _, _ in _log_records(s.cluster)}
    assert kinds == {
        "ConsumerGroupMetadata",
        "ConsumerGroupPartitionMetadata",
        "ConsumerGroupMemberMetadata",
        "ConsumerGroupTargetAssignmentMetadata",
        "ConsumerGroupTargetAssignmentMember",
        "ConsumerGroupCurrentMemberAssignment",
    }
    s.close()
    s = State(tmp_path)
    assert described(s.describe()) == before
    # each member goes on with its epoch: not fenced, nothing new to reconcile
    a = s.heartbeat("m-a", epoch, owned=a_parts)
    b = s.heartbeat("m-b", epoch, owned=b_parts)
    assert (a.error_code, a.member_epoch, owned(a)) == (0, epoch, None)
    assert (b.error_code, b.member_epoch, owned(b)) == (0, epoch, None)
    # a stale epoch is refused as before the restart
    assert s.heartbeat("m-a", epoch + 1, owned=a_parts).error_code != 0
    assert described(s.describe()) == before
    s.close()


def test_a_regex_subscription_comes_back_with_its_records(tmp_path):
    pytest.importorskip("re2")
    s = State(tmp_path, create=[("orders", 2), ("orders-eu", 1), ("audit", 1)])
    a = s.heartbeat("m-a", 0, regex="orders.*", assignor="range")
    assert (a.error_code, a.member_epoch, len(a.assignment.topic_partitions)) == (0, 1, 2)
    before = described(s.describe())
    regex = [(k, v) for n, k, v in _log_records(s.cluster) if n == "ConsumerGroupRegularExpression"]
    assert len(regex) == 1
    assert regex[0][0] == {"group": "cg", "regular_expression": "orders.*"}
    assert regex[0][1]["topics"] == ["orders", "orders-eu"]
    s.close()
    s = State(tmp_path)
    assert described(s.describe()) == before
    group = s.describe()
    assert (group.members[0].subscribed_topic_regex, group.assignor_name) == ("orders.*", "range")
    s.close()


def test_a_load_writes_nothing_and_heartbeats_that_change_nothing_write_nothing(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    a_parts, b_parts, epoch = two_members(s)
    s.close()
    s = State(tmp_path)
    count = len(_log_records(s.cluster))
    for _ in range(3):
        s.heartbeat("m-a", epoch, owned=a_parts)
        s.heartbeat("m-b", epoch, owned=b_parts)
    assert len(_log_records(s.cluster)) == count
    s.close()


def test_sessions_restart_at_the_load_and_expire_as_kafkas(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    a_parts, _, epoch = two_members(s)
    s.close()
    s = State(tmp_path)
    s.now += 30  # within the session (45 s from the load)
    assert s.heartbeat("m-a", epoch, owned=a_parts).error_code == 0
    s.now += 30
    s.groups.tick()  # b's session (from the load) ended: fenced; a heartbeated in time
    group = s.describe()
    assert [m.member_id for m in group.members] == ["m-a"]
    assert group.group_epoch == epoch + 1
    s.close()
    s = State(tmp_path)  # b's removal was written: tombstones for its records
    assert [m.member_id for m in s.describe().members] == ["m-a"]
    gone = [(n, k) for n, k, v in _log_records(s.cluster) if v is None]
    assert [n for n, k in gone if k.get("member_id") == "m-b"] == [
        "ConsumerGroupCurrentMemberAssignment",
        "ConsumerGroupTargetAssignmentMember",
        "ConsumerGroupMemberMetadata",
    ]
    s.close()


def test_a_member_revoking_partitions_keeps_its_rebalance_timeout_across_a_load(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    a = s.heartbeat("m-a", 0)
    s.heartbeat("m-a", a.member_epoch, owned=[0, 1, 2, 3])
    s.heartbeat("m-b", 0)
    a = s.heartbeat("m-a", a.member_epoch, owned=[0, 1, 2, 3])  # told to revoke two
    assert a.member_epoch == 1 and len(owned(a)) == 2
    s.close()
    s = State(tmp_path)
    s.now += 25
    s.heartbeat("m-b", 2, owned=[])  # b heartbeats; a does not revoke
    s.now += 10  # a's rebalance timeout (30 s) ended before its session (45 s)
    s.groups.tick()
    assert [m.member_id for m in s.describe().members] == ["m-b"]
    s.close()


def test_leaving_and_deleting_write_tombstones_and_stay_gone(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    a = s.heartbeat("m-a", 0)
    assert s.heartbeat("m-a", -1).error_code == 0  # leaves: the group is empty
    s.close()
    s = State(tmp_path)
    group = s.describe()
    assert (group.error_code, group.group_state, group.group_epoch, group.members) == (
        0,
        "Empty",
        a.member_epoch + 1,
        [],
    )
    deleted = s.call(DeleteGroupsRequest(groups_names=["cg"]), 2).results[0]
    assert deleted.error_code == 0
    # the group's records' tombstones, its epoch's last (as Kafka's createGroupTombstoneRecords)
    assert _log_records(s.cluster)[-3:] == [
        ("ConsumerGroupTargetAssignmentMetadata", {"group": "cg"}, None),
        ("ConsumerGroupPartitionMetadata", {"group": "cg"}, None),
        ("ConsumerGroupMetadata", {"group": "cg"}, None),
    ]
    s.close()
    s = State(tmp_path)
    assert s.describe().error_code != 0  # GROUP_ID_NOT_FOUND
    assert "cg" not in s.groups.consumer.groups
    s.close()


def test_an_empty_classic_group_that_gave_way_stays_a_consumer_group(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    join = JoinGroupRequest(
        group_id="cg",
        session_timeout_ms=6000,
        rebalance_timeout_ms=3000,
        member_id="",
        protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    s.call(join, 0)  # a classic member (v0: joins at once) ...
    s.now += 10
    s.groups.tick()  # ... whose session ends: an empty classic group, written
    assert s.groups.groups["cg"].state == "Empty"
    s.close()
    s = State(tmp_path)
    assert "cg" in s.groups.groups
    assert s.heartbeat("m-a", 0).error_code == 0  # the empty classic group gives way
    written = _log_records(s.cluster)
    gone = written.index(("GroupMetadata", {"group": "cg"}, None))  # its record goes first
    assert [n for n, _, _ in written[gone + 1 :]][:1] == ["ConsumerGroupMemberMetadata"]
    s.close()
    s = State(tmp_path)
    assert "cg" not in s.groups.groups and "cg" in s.groups.consumer.groups
    s.close()


@pytest.mark.parametrize(
    "record_type, value, problem",
    [
        (CONSUMER_GROUP_METADATA, {"epoch": -5}, "epoch -5"),
        (
            CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
            {
                "member_epoch": 1,
                "previous_member_epoch": 0,
                "state": 9,
                "assigned_partitions": [],
                "partitions_pending_revocation": [],
            },
            "member state 9",
        ),
        (
            CONSUMER_GROUP_MEMBER_METADATA,
            {
                "instance_id": None,
                "rack_id": None,
                "client_id": "c",
                "client_host": "/h",
                "subscribed_topic_names": [],
                "subscribed_topic_regex": None,
                "rebalance_timeout_ms": 1,
                "server_assignor": "nope",
            },
            "server assignor 'nope'",
        ),
    ],
)
def test_a_record_a_group_cannot_hold_stops_the_load_naming_where(
    tmp_path, record_type, value, problem
):
    s = State(tmp_path, create=[("orders", 4)])
    s.heartbeat("m-a", 0)
    index = s.cluster.coordinator_partition("cg")
    log = s.cluster.topics[OFFSETS].partitions[index].log
    names = [f.name for f in record_type.key.fields]
    key = encode_key(record_type, dict(zip(names, ["cg", "m-a"])))
    data = records.write_batch(
        [records.Record(timestamp=1, key=key, value=encode_value(record_type, value))]
    )
    offset = log.log_end
    log.append(read_batch_head(data), data)
    s.close()
    with pytest.raises(
        CoordinatorStateError, match=rf"{OFFSETS}-{index}, offset {offset}: .*{problem}"
    ):
        State(tmp_path)


@pytest.mark.parametrize("field", ["assigned_partitions", "partitions_pending_revocation"])
def test_a_partition_two_members_hold_stops_the_load_naming_where(tmp_path, field):
    # Kafka's replay refuses it (ConsumerGroup.addPartitionEpochs: "still owned"); loaded,
    # both members would be answered the partition, each heartbeat after
    s = State(tmp_path, create=[("orders", 4)])
    a_parts, b_parts, epoch = two_members(s)
    tid = s.cluster.topics["orders"].id
    index = s.cluster.coordinator_partition("cg")
    log = s.cluster.topics[OFFSETS].partitions[index].log
    record_type = CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT
    key = encode_key(record_type, {"group": "cg", "member_id": "m-b"})
    value = {
        "member_epoch": epoch,
        "previous_member_epoch": epoch - 1,
        "state": 0,
        "assigned_partitions": [],
        "partitions_pending_revocation": [],
    }
    value[field] = [{"topic_id": tid, "partitions": sorted(set(b_parts) | {a_parts[0]})}]
    data = records.write_batch(
        [records.Record(timestamp=1, key=key, value=encode_value(record_type, value))]
    )
    offset = log.log_end
    log.append(read_batch_head(data), data)
    s.close()
    with pytest.raises(
        CoordinatorStateError,
        match=rf"{OFFSETS}-{index}, offset {offset}: .*partition {a_parts[0]} of topic {tid} "
        "is held by members",
    ):
        State(tmp_path)


def test_damaged_consumer_group_record_bytes_name_the_offset(tmp_path):
    s = State(tmp_path, create=[("orders", 4)])
    s.heartbeat("m-a", 0)
    index = s.cluster.coordinator_partition("cg")
    log = s.cluster.topics[OFFSETS].partitions[index].log
    key = encode_key(CONSUMER_GROUP_METADATA, {"group": "cg"})
    data = records.write_batch([records.Record(timestamp=1, key=key, value=b"\x00\x00\x00")])
    offset = log.log_end
    log.append(read_batch_head(data), data)
    s.close()
    with pytest.raises(
        CoordinatorStateError,
        match=rf"{OFFSETS}-{index}, offset {offset}: ConsumerGroupMetadataValue: epoch",
    ):
        State(tmp_path)


def test_every_consumer_group_record_type_is_registered():
    assert sorted(t for r in CONSUMER_GROUP_RECORDS for t in r.key_types) == [3, 4, 5, 6, 7, 8, 16]


# ---------------------------------------------------------------- a real client


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _group(b, group_id):
    """(group epoch, {member id: member epoch}) of a consumer group, read in the broker."""

    def read():
        group = b.broker.apis.groups.consumer.groups.get(group_id)
        if group is None:
            return None
        return group.group_epoch, {m.member_id: m.epoch for m in group.members.values()}

    return b.call(read)


def _dumped_kinds(log_dir, group_id):
    """The record types of `group_id` in `__consumer_offsets`, as `fastkwire dump` writes
    the segments (JSON lines, bytes in base64); read_segments reads the same records."""
    from fastkwire.cli import main

    folders = sorted(str(d) for d in log_dir.glob(f"{OFFSETS}-*"))
    out = log_dir.parent / "offsets.jsonl"
    assert main(["dump", "--segments", *folders, "--to", str(out), "--bytes", "base64"]) == 0
    kinds = set()
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    for row in rows:
        key = base64.b64decode(row["key"])
        record_type, key_type = record_type_of(OFFSETS, key)
        if decode_key(record_type, key_type, key)["group"] == group_id:
            if row["value"] is not None:
                decode_value(record_type, base64.b64decode(row["value"]))
            kinds.add(record_type.name)
    pytest.importorskip("pyarrow")
    from fastkwire import read_segments

    table = read_segments(folders)
    assert table.column("key").to_pylist() == [base64.b64decode(r["key"]) for r in rows]
    return kinds


def _produce(ck, b, values):
    producer = ck.Producer({"bootstrap.servers": b.bootstrap_servers})
    for i, v in enumerate(values):
        producer.produce("orders", v, partition=i % 2)
    assert producer.flush(20) == 0


def test_a_kip848_consumer_goes_on_with_its_epoch_across_a_restart(tmp_path):
    """confluent-kafka's KIP-848 consumer (group.protocol=consumer): the broker restarts on
    its log directory and port; the member heartbeats again with its member id and epoch and
    is not fenced (no new member, no new group epoch), keeps its partitions and goes on from
    where it was: every record once."""
    ck = pytest.importorskip("confluent_kafka")
    port = _free_port()
    first = [b"before-%d" % i for i in range(6)]
    with Broker(log_dir=tmp_path, ports=[port]) as b:
        b.create_topic("orders", partitions=2)
        _produce(ck, b, first)
        consumer = ck.Consumer(
            {
                "bootstrap.servers": b.bootstrap_servers,
                "group.id": "kip848",
                "group.protocol": "consumer",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.subscribe(["orders"])
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(first) and time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
            assert sorted(got) == sorted(first)
            consumer.commit(asynchronous=False)
            member_id = consumer.memberid()
            before = _group(b, "kip848")
        except BaseException:
            consumer.close()
            raise
    try:
        assert before[1] == {member_id: before[0]}
        assert _dumped_kinds(tmp_path, "kip848") >= {
            "ConsumerGroupMetadata",
            "ConsumerGroupMemberMetadata",
            "ConsumerGroupTargetAssignmentMember",
            "ConsumerGroupCurrentMemberAssignment",
        }
        with Broker(log_dir=tmp_path, ports=[port]) as b:
            assert _group(b, "kip848") == before  # loaded as it was
            second = [b"after-%d" % i for i in range(4)]
            _produce(ck, b, second)
            got = []
            deadline = time.monotonic() + 30
            while len(got) < len(second) and time.monotonic() < deadline:
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
            end = time.monotonic() + 1  # nothing more comes (no record twice)
            while time.monotonic() < end:
                m = consumer.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m.value())
            after = _group(b, "kip848")
            assert sorted(got) == sorted(second)
            assert consumer.memberid() == member_id
            assert after == before  # the same member, epoch and group epoch: not fenced
            assert len(consumer.assignment()) == 2
    finally:
        consumer.close()


def test_a_member_taking_a_left_static_members_place_under_its_own_id_gives_up_its_own(tmp_path):
    # m-a (instance i-a) joins again as the instance i-b, which left: as Kafka's replacement
    # of a static member, the member m-a was goes, its partitions are free and the target
    # is computed again (they had stayed held by nobody, i-a held by m-a)
    s = State(tmp_path, create=[("orders", 4)])
    a = s.heartbeat("m-a", 0, instance="i-a")
    b = s.heartbeat("m-b", 0, instance="i-b")
    a = s.heartbeat("m-a", a.member_epoch, owned=owned(a), instance="i-a")
    a = s.heartbeat("m-a", a.member_epoch, owned=owned(a), instance="i-a")
    b = s.heartbeat("m-b", b.member_epoch, owned=[], instance="i-b")
    assert sorted(owned(b)) == [0, 1]
    assert s.heartbeat("m-b", -2, owned=None, instance="i-b").error_code == 0
    taken = s.heartbeat("m-a", 0, instance="i-b")
    assert taken.error_code == 0
    parts, epoch = owned(taken), taken.member_epoch
    for _ in range(3):
        answer = s.heartbeat("m-a", epoch, owned=parts, instance="i-b")
        assert answer.error_code == 0
        parts, epoch = owned(answer) or parts, answer.member_epoch
    assert sorted(parts) == [0, 1, 2, 3]  # every partition: it is the only member
    # the instance id m-a had is free for another member
    assert s.heartbeat("m-c", 0, instance="i-a").error_code == 0
    before = described(s.describe())
    s.close()
    s = State(tmp_path)
    assert described(s.describe()) == before
    s.close()

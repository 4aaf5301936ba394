"""fastkwire.broker's plain objects driven without a socket: the partition log (offsets,
ListOffsets, DeleteRecords, reads), the producer-state table (sequences, epochs,
duplicates), and the handlers (a decoded request in, a response object out, encoded at the
version asked)."""

import os
import subprocess
import sys
import uuid

import pytest

import fastkwire
from fastkwire import records
from fastkwire.broker import (
    Apis,
    Cluster,
    ClusterError,
    Context,
    GroupConfig,
    GroupCoordinator,
    LogError,
    PartitionLog,
    read_batch_head,
)
from fastkwire.broker._apis import CLOSE, NO_ANSWER
from fastkwire.error_codes import by_name
from fastkwire.records import Record


def batch(*timestamps, compression=None, pid=-1, epoch=-1, seq=-1, values=None):
    values = values or [b"v%d" % i for i in range(len(timestamps))]
    return records.write_batch(
        [Record(timestamp=ts, key=None, value=v) for ts, v in zip(timestamps, values)],
        compression=compression,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def append(log, data):
    return log.append(read_batch_head(data), data)


def code(name):
    return by_name(name).code


# ---------------------------------------------------------------- the log


def test_offsets_are_assigned_in_the_batches_kept():
    pytest.importorskip("cramjam")  # a gzip batch
    log = PartitionLog()
    assert append(log, batch(10, 11, 12)) == 0
    assert append(log, batch(13, compression="gzip")) == 3
    assert (log.log_start, log.log_end, log.high_watermark) == (0, 4, 4)
    read = records.read_batches(log.read(0, 1 << 20))  # the CRC still holds
    assert [b.base_offset for b in read] == [0, 3]
    assert [r.offset for b in read for r in b.records] == [0, 1, 2, 3]
    assert read[1].compression == "gzip"


def test_a_read_starts_at_the_batch_holding_the_offset_and_keeps_one_batch_past_the_cap():
    log = PartitionLog()
    for _ in range(3):
        append(log, batch(1, 2))
    assert [b.base_offset for b in records.read_batches(log.read(3, 1 << 20))] == [2, 4]
    one = log.read(0, 1)  # smaller than a batch: the first batch all the same (KIP-74)
    assert [b.base_offset for b in records.read_batches(one)] == [0]
    assert log.read(0, 1, min_one=False) == b""
    assert log.read(6, 100) == b""  # the log end: nothing yet, no error
    with pytest.raises(LogError) as e:
        log.read(7, 100)
    assert e.value.error == "OFFSET_OUT_OF_RANGE"


def test_a_big_batch_is_kept_as_a_view_of_its_frame_its_head_written_as_it_is_read():
    """A batch of KEEP_VIEW_MIN bytes or more that is most of its (immutable) frame is kept
    as a view of that frame, not copied; its base offset and leader epoch appear in what
    the log reads (and its timestamps list at their offsets) while the frame stays as it
    came. A small one, or one in a bytearray (which may change), is copied."""
    from fastkwire.broker._log import KEEP_VIEW_MIN

    log = PartitionLog(leader_epoch=3)
    append(log, batch(1, 2, 3))  # small: copied
    big = batch(*range(10, 10 + 400), values=[b"x" * 20] * 400)
    assert len(big) >= KEEP_VIEW_MIN
    frame = b"\x00" * 40 + big  # the request's header before its records
    view = memoryview(frame)[40:]
    assert append(log, view) == 3
    log.new_leader_epoch()
    writable = bytearray(big)
    assert append(log, memoryview(writable)) == 403
    assert frame[40:] == big  # nothing was written into the frame
    kept = log._batches[1]
    assert type(kept) is memoryview and kept.obj is frame  # not a copy
    assert type(log._batches[2]) is bytes  # a bytearray's batch: copied
    read = records.read_batches(log.read(0, 1 << 30))  # CRCs hold, heads written in
    assert [(b.base_offset, b.partition_leader_epoch) for b in read] == [(0, 3), (3, 3), (403, 4)]
    assert [r.offset for b in read for r in b.records] == list(range(803))
    assert log.offset_for(12) == (5, 12)  # the kept batch's records, at their offsets
    log.delete_before(200)  # within the kept batch: it stays, the log starts inside it
    assert log.offset_for(-2) == (200, -1)
    assert log.offset_for(11) == (200, 207)
    assert [b.base_offset for b in records.read_batches(log.read(200, 1 << 30))] == [3, 403]


@pytest.mark.parametrize("compression", [None, "lz4"])
def test_list_offsets_by_timestamp_and_the_special_values(compression):
    if compression:
        pytest.importorskip("cramjam")
    log = PartitionLog()
    assert log.offset_for(-3) == (-1, -1)  # max timestamp of an empty log
    append(log, batch(100, 300, 200, compression=compression))
    append(log, batch(250, 260, compression=compression))
    assert log.offset_for(-2) == (0, -1)  # earliest
    assert log.offset_for(-1) == (5, -1)  # latest: the log end, not the last batch's base
    assert log.offset_for(150) == (1, 300)  # the first record at or after it
    assert log.offset_for(250) == (1, 300)
    assert log.offset_for(0) == (0, 100)
    assert log.offset_for(301) == (-1, -1)  # after the last record: none
    assert log.offset_for(-3) == (1, 300)  # the record with the largest timestamp


def test_delete_records_moves_the_log_start():
    log = PartitionLog()
    append(log, batch(1, 2))
    append(log, batch(3, 4))
    assert log.delete_before(1) == 1
    assert log.offset_for(-2) == (1, -1)
    assert log.offset_for(0) == (1, 2)  # records before the log start are not listed
    with pytest.raises(LogError):
        log.read(0, 100)
    assert log.delete_before(3) == 3
    assert len(log) == 1  # the first batch is wholly before the start: dropped
    assert log.delete_before(-1) == 4  # -1: the high watermark
    with pytest.raises(LogError) as e:
        log.delete_before(5)
    assert e.value.error == "OFFSET_OUT_OF_RANGE"


def test_a_batch_is_checked_before_it_is_kept():
    good = batch(1, 2)
    bad_crc = bytearray(good)
    bad_crc[-1] ^= 1
    cases = {
        "CORRUPT_MESSAGE": [bytes(bad_crc), good[:-1], good[:30]],
        "INVALID_RECORD": [good + good],  # Produce v3+: one batch per partition
        "MESSAGE_TOO_LARGE": [batch(1, values=[b"x" * 2000])],
    }
    for error, datas in cases.items():
        for data in datas:
            with pytest.raises(LogError) as e:
                read_batch_head(data, max_bytes=1000)
            assert e.value.error == error, data
    legacy = bytearray(good)
    legacy[16] = 1  # magic 1: Kafka 4 takes magic 2 batches only
    with pytest.raises(LogError) as e:
        read_batch_head(bytes(legacy))
    assert e.value.error == "INVALID_RECORD"


def test_records_that_do_not_read_under_a_good_crc_are_an_error_not_a_crash():
    data = bytearray(batch(1, 2))
    data[-3:] = b"\xff\xff\xff"  # inside the last record
    data[17:21] = records.crc32c(bytes(data[21:])).to_bytes(4, "big")
    log = PartitionLog()
    append(log, bytes(data))  # kept as received: only the header and CRC are checked
    with pytest.raises(LogError) as e:
        log.offset_for(0)  # reading the records' timestamps
    assert e.value.error == "CORRUPT_MESSAGE"


def test_log_append_time_rewrites_the_batch_and_its_crc():
    log = PartitionLog()
    data = batch(5, 6)
    log.append(read_batch_head(data), data, now_ms=12345, log_append_time=True)
    (read,) = records.read_batches(log.read(0, 100))  # check_crc: the new CRC holds
    assert read.timestamp_type == 1 and read.max_timestamp == 12345
    assert log.offset_for(12345) == (0, 12345)


# ---------------------------------------------------------------- the handlers


@pytest.fixture
def apis():
    clock = [0.0]
    cluster = Cluster({0: ("127.0.0.1", 9092), 1: ("127.0.0.1", 9093)})
    a = Apis(cluster, clock=lambda: clock[0], wall_clock=lambda: 1000.0)
    a.fake_clock = clock
    return a


def call(apis, request, version, node=0):
    """The handler's answer, as the codec encodes it at `version` and decodes it back."""
    out = []
    apis.handle(type(request).API_KEY, version, request, Context(node), out.append)
    assert len(out) == 1
    return roundtrip(out[0], version)


def roundtrip(response, version):
    frame = fastkwire.encode_response(response, version, 7)
    _, decoded = fastkwire.decode_response(frame, type(response).API_KEY, version)
    return decoded


def produce(topic, partition, data, acks=-1):
    P = fastkwire.ProduceRequest
    return P(
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=partition, records=data)]
            )
        ],
    )


def fetch(topic_or_id, offset, max_wait_ms=0, min_bytes=1, partition_max_bytes=1 << 20):
    F = fastkwire.FetchRequest
    by_id = not isinstance(topic_or_id, str)
    return F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=50 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic="" if by_id else topic_or_id,
                topic_id=topic_or_id if by_id else F.FetchTopic().topic_id,
                partitions=[
                    F.FetchPartition(
                        partition=0, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                ],
            )
        ],
    )


def leader_node(apis, topic, partition=0):
    return apis.cluster.partition(topic, partition).leader


@pytest.mark.parametrize("version", [3, 8, 12])
def test_produce_appends_and_answers_at_each_version(apis, version):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    r = call(apis, produce("t", 0, batch(1, 2)), version, node)
    (p,) = r.responses[0].partition_responses
    assert (p.error_code, p.base_offset) == (0, 0)
    r = call(apis, produce("t", 0, batch(3)), version, node)
    assert r.responses[0].partition_responses[0].base_offset == 2
    other = 1 - node
    r = call(apis, produce("t", 0, batch(3)), version, other)
    assert r.responses[0].partition_responses[0].error_code == code("NOT_LEADER_OR_FOLLOWER")
    r = call(apis, produce("nope", 0, batch(3)), version, node)
    assert r.responses[0].partition_responses[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")


def test_produce_acks_0_gets_no_answer_and_a_failure_closes(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    out = []
    apis.handle(0, 9, produce("t", 0, batch(1), acks=0), Context(node), out.append)
    apis.handle(0, 9, produce("t", 0, b"junk", acks=0), Context(node), out.append)
    assert out == [NO_ANSWER, CLOSE]
    assert apis.cluster.partition("t", 0).log.log_end == 1
    r = call(apis, produce("t", 0, batch(1), acks=2), 9, node)
    assert r.responses[0].partition_responses[0].error_code == code("INVALID_REQUIRED_ACKS")


def test_idempotent_sequences(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    init = call(apis, fastkwire.InitProducerIdRequest(transactional_id=None), 4, node)
    pid, epoch = init.producer_id, init.producer_epoch
    assert init.error_code == 0 and pid >= 0 and epoch == 0

    def send(seq, n=2, e=epoch):
        r = call(apis, produce("t", 0, batch(*range(n), pid=pid, epoch=e, seq=seq)), 9, node)
        p = r.responses[0].partition_responses[0]
        return p.error_code, p.base_offset

    assert send(0) == (0, 0)
    assert send(2) == (0, 2)
    assert send(2) == (0, 2)  # a retried batch: acknowledged with its first offset
    assert send(0) == (0, 0)  # one of the last five: still a duplicate
    assert apis.cluster.partition("t", 0).log.log_end == 4
    assert send(7)[0] == code("OUT_OF_ORDER_SEQUENCE_NUMBER")  # a gap
    assert send(4)[0] == 0  # the next in line
    again = call(
        apis,
        fastkwire.InitProducerIdRequest(transactional_id=None, producer_id=pid, producer_epoch=0),
        4,
        node,
    )
    # Kafka's coordinator answers an idempotent producer with a new id at epoch 0, whatever
    # it names; the producer bumps its own epoch (KIP-360), which the log takes as below
    assert again.error_code == 0 and again.producer_epoch == 0
    assert again.producer_id not in (pid, -1)
    assert send(6, e=1)[0] == code("OUT_OF_ORDER_SEQUENCE_NUMBER")  # a new epoch starts at 0
    assert send(0, e=1) == (0, 6)
    assert send(8, e=0)[0] == code("INVALID_PRODUCER_EPOCH")  # the old epoch is fenced


@pytest.mark.parametrize("version", [4, 11, 12, 13, 17])
def test_fetch_reads_by_name_or_topic_id(apis, version):
    topic = apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    call(apis, produce("t", 0, batch(1, 2)), 9, node)
    r = call(apis, fetch(topic.id if version >= 13 else "t", 0), version, node)
    p = r.responses[0].partitions[0]
    assert (p.error_code, p.high_watermark, p.log_start_offset if version >= 5 else 0) == (0, 2, 0)
    assert [x.value for b in records.read_batches(p.records) for x in b.records] == [b"v0", b"v1"]
    r = call(apis, fetch(topic.id if version >= 13 else "t", 5), version, node)
    assert r.responses[0].partitions[0].error_code == code("OFFSET_OUT_OF_RANGE")
    missing = "nope" if version < 13 else type(topic.id)(int=5)
    r = call(apis, fetch(missing, 0), version, node)
    wanted = "UNKNOWN_TOPIC_OR_PARTITION" if version < 13 else "UNKNOWN_TOPIC_ID"
    assert r.responses[0].partitions[0].error_code == code(wanted)


def test_fetch_waits_for_min_bytes_until_data_or_its_max_wait(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    out = []
    apis.handle(1, 12, fetch("t", 0, max_wait_ms=500), Context(node), out.append)
    assert out == [] and apis.tick() == 0.5
    call(apis, produce("t", 0, batch(1)), 9, node)  # data arrives: the Fetch is answered
    assert len(out) == 1 and out[0].responses[0].partitions[0].high_watermark == 1
    assert apis.tick() is None
    apis.handle(1, 12, fetch("t", 1, max_wait_ms=500), Context(node), out.append)
    apis.fake_clock[0] = 0.4
    assert apis.tick() == 0.5 and len(out) == 1
    apis.fake_clock[0] = 0.5
    assert apis.tick() is None  # the wait is over: answered, empty
    assert len(out) == 2 and roundtrip(out[1], 12).responses[0].partitions[0].records == b""


def test_a_closed_connections_waiting_fetch_is_forgotten(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    out, connection = [], object()
    ctx = Context(node, connection=connection)
    apis.handle(1, 12, fetch("t", 0, max_wait_ms=500), ctx, out.append)
    assert apis.tick() == 0.5
    apis.forget(connection)
    assert apis.tick() is None  # nothing waits: no reply ever goes to the closed connection
    call(apis, produce("t", 0, batch(1)), 9, node)
    assert out == []


def test_fetch_with_an_unknown_session_is_refused(apis):
    request = fetch("t", 0)
    request.session_id, request.session_epoch = 99, 1  # incremental: the session must exist
    assert call(apis, request, 12).error_code == code("FETCH_SESSION_ID_NOT_FOUND")


@pytest.mark.parametrize("version", [1, 4, 9, 10])
def test_list_offsets_answers(apis, version):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    call(apis, produce("t", 0, batch(100, 200)), 9, node)
    L = fastkwire.ListOffsetsRequest
    request = L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name="t",
                partitions=[
                    L.ListOffsetsPartition(partition_index=0, timestamp=ts) for ts in (-1, -2, 150)
                ],
            )
        ],
    )
    parts = call(apis, request, version, node).topics[0].partitions
    assert [(p.error_code, p.offset) for p in parts] == [(0, 2), (0, 0), (0, 1)]
    assert parts[2].timestamp == 200


def test_metadata_creates_topics_on_first_use_and_lists_ids(apis):
    M = fastkwire.MetadataRequest
    request = M(topics=[M.MetadataRequestTopic(name="new")], allow_auto_topic_creation=True)
    r = call(apis, request, 12)
    (t,) = r.topics
    assert t.error_code == 0 and t.name == "new" and t.topic_id == apis.cluster.topics["new"].id
    assert [b.node_id for b in r.brokers] == [0, 1]
    request = M(topics=[M.MetadataRequestTopic(name="other")], allow_auto_topic_creation=False)
    assert call(apis, request, 12).topics[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")
    request = M(topics=[M.MetadataRequestTopic(name="bad name!")], allow_auto_topic_creation=True)
    assert call(apis, request, 12).topics[0].error_code == code("INVALID_TOPIC_EXCEPTION")
    assert [t.name for t in call(apis, M(topics=None), 12).topics] == ["new"]


def test_metadata_before_v12_refuses_a_topic_without_a_name_or_asked_by_id(apis):
    M = fastkwire.MetadataRequest
    some_id = uuid.uuid4()
    for version, asked in (
        (11, M.MetadataRequestTopic(name=None)),
        (10, M.MetadataRequestTopic(name="t", topic_id=some_id)),
    ):
        request = M(topics=[M.MetadataRequestTopic(name="ok"), asked])
        r = call(apis, request, version)  # encodes at the version asked (a null name did not)
        assert [(t.error_code, t.name) for t in r.topics] == [
            (code("INVALID_REQUEST"), "ok"),
            (code("INVALID_REQUEST"), asked.name or ""),
        ]
    assert "ok" not in apis.cluster.topics  # nothing was made of a refused request
    (t,) = call(apis, M(topics=[M.MetadataRequestTopic(name=None, topic_id=some_id)]), 12).topics
    assert t.error_code == code("UNKNOWN_TOPIC_ID")


def test_consumer_offsets_is_made_at_the_first_group_lookup_as_an_internal_topic():
    cluster = Cluster({0: ("127.0.0.1", 9092)}, max_partitions=3)
    groups = GroupCoordinator(GroupConfig(), topic_partitions=cluster.partition_count)
    apis = Apis(cluster, groups=groups)
    M = fastkwire.MetadataRequest
    assert call(apis, M(topics=None), 12).topics == []
    F = fastkwire.FindCoordinatorRequest
    assert call(apis, F(key_type=1, coordinator_keys=["txn"]), 4).coordinators[0].error_code == 0
    assert "__consumer_offsets" not in cluster.topics  # a transaction lookup does not make it
    assert call(apis, F(key_type=0, coordinator_keys=["g"]), 4).coordinators[0].error_code == 0
    (t,) = call(apis, M(topics=None), 12).topics
    assert (t.name, t.is_internal, len(t.partitions)) == ("__consumer_offsets", True, 50)
    # the cap is on what clients ask for: its 50 partitions leave room for 3
    assert cluster.partitions == 0
    cluster.create_topic("t", 3)
    r = call(apis, M(topics=None), 12)
    assert sorted((t.name, t.is_internal) for t in r.topics) == [
        ("__consumer_offsets", True),
        ("t", False),
    ]
    r = call(apis, produce("__consumer_offsets", 0, batch(1)), 9)
    (p,) = r.responses[0].partition_responses
    assert p.error_code == code("INVALID_TOPIC_EXCEPTION") and p.base_offset == -1
    assert cluster.partition("__consumer_offsets", 0).log.log_end == 0
    # growing it is counted: no request makes the broker allocate past the cap
    with pytest.raises(ClusterError, match="max_partitions"):
        cluster.create_partitions("__consumer_offsets", 51)
    cluster.delete_topic(cluster.topics["t"])
    cluster.create_partitions("__consumer_offsets", 53)
    assert (cluster.partitions, len(cluster.topics["__consumer_offsets"].partitions)) == (3, 53)
    cluster.delete_topic(cluster.topics["__consumer_offsets"])
    assert cluster.partitions == 0


def test_metadata_naming_consumer_offsets_makes_it_internal_with_its_partition_count():
    cluster = Cluster({0: ("127.0.0.1", 9092)}, offsets_topic_partitions=4)
    M = fastkwire.MetadataRequest
    request = M(topics=[M.MetadataRequestTopic(name="__consumer_offsets")])
    (t,) = call(Apis(cluster), request, 12).topics
    assert (t.error_code, t.is_internal, len(t.partitions)) == (0, True, 4)
    with pytest.raises(ValueError, match="offsets_topic_partitions"):
        Cluster({0: ("127.0.0.1", 9092)}, offsets_topic_partitions=0)


def test_topics_are_created_grown_described_and_deleted(apis):
    C = fastkwire.CreateTopicsRequest
    request = C(
        topics=[
            C.CreatableTopic(
                name="a",
                num_partitions=3,
                replication_factor=1,
                configs=[C.CreatableTopicConfig(name="retention.ms", value="1000")],
            ),
            C.CreatableTopic(name="b", num_partitions=1, replication_factor=3),
        ],
        timeout_ms=1000,
    )
    a, b = call(apis, request, 7).topics
    assert (a.error_code, a.num_partitions, a.topic_id) == (0, 3, apis.cluster.topics["a"].id)
    assert b.error_code == code("INVALID_REPLICATION_FACTOR")
    assert call(apis, request, 7).topics[0].error_code == code("TOPIC_ALREADY_EXISTS")

    huge = C(topics=[C.CreatableTopic(name="huge", num_partitions=2**31 - 1, replication_factor=1)])
    assert call(apis, huge, 7).topics[0].error_code == code("INVALID_PARTITIONS")  # at once

    P = fastkwire.CreatePartitionsRequest
    grow = P(topics=[P.CreatePartitionsTopic(name="a", count=5)], timeout_ms=1000)
    assert call(apis, grow, 3).results[0].error_code == 0
    assert apis.cluster.partition_count("a") == 5
    assert call(apis, grow, 3).results[0].error_code == code("INVALID_PARTITIONS")
    grow.topics[0].count = 2**31 - 1
    assert call(apis, grow, 3).results[0].error_code == code("INVALID_PARTITIONS")
    assert apis.cluster.partitions == 5  # of every topic together

    D = fastkwire.DescribeConfigsRequest
    describe = D(
        resources=[
            D.DescribeConfigsResource(
                resource_type=2,
                resource_name="a",
                configuration_keys=None,  # null: all
            )
        ],
        include_synonyms=True,
    )
    configs = {c.name: c for c in call(apis, describe, 4).results[0].configs}
    assert configs["retention.ms"].value == "1000" and configs["retention.ms"].config_source == 1
    assert (
        configs["cleanup.policy"].value == "delete" and configs["cleanup.policy"].config_source == 5
    )
    assert configs["max.message.bytes"].value == "1048588"

    T = fastkwire.DeleteTopicsRequest
    r = call(apis, T(topics=[T.DeleteTopicState(name="a")], timeout_ms=1000), 6)
    assert r.responses[0].error_code == 0 and "a" not in apis.cluster.topics
    r = call(apis, T(topic_names=["a"], timeout_ms=1000), 5)
    assert r.responses[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")


def test_delete_records_and_describe_cluster(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    call(apis, produce("t", 0, batch(1, 2, 3)), 9, node)
    R = fastkwire.DeleteRecordsRequest
    request = R(
        topics=[
            R.DeleteRecordsTopic(
                name="t", partitions=[R.DeleteRecordsPartition(partition_index=0, offset=2)]
            )
        ],
        timeout_ms=1000,
    )
    p = call(apis, request, 2, node).topics[0].partitions[0]
    assert (p.error_code, p.low_watermark) == (0, 2)
    r = call(apis, fastkwire.DescribeClusterRequest(), 1)
    assert r.cluster_id == apis.cluster.cluster_id and len(r.brokers) == 2


def test_api_versions_lists_kafka_4s_ranges(apis):
    r = call(apis, fastkwire.ApiVersionsRequest(), 3)
    served = {k.api_key: (k.min_version, k.max_version) for k in r.api_keys}
    assert served[fastkwire.ProduceRequest.API_KEY] == (3, 12)  # KIP-896: v0-2 are gone
    assert served[fastkwire.FetchRequest.API_KEY] == (4, 17)
    assert fastkwire.JoinGroupRequest.API_KEY not in served  # no group coordinator given


def test_describe_topic_partitions_pages_by_cursor(apis):
    apis.cluster.create_topic("a", 3)
    apis.cluster.create_topic("b", 2)
    D = fastkwire.DescribeTopicPartitionsRequest
    r = call(apis, D(topics=[], response_partition_limit=2), 0)
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in r.topics] == [
        ("a", [0, 1])
    ]
    assert (r.next_cursor.topic_name, r.next_cursor.partition_index) == ("a", 2)
    cursor = D.Cursor(topic_name="a", partition_index=2)
    r = call(apis, D(topics=[], response_partition_limit=10, cursor=cursor), 0)
    assert [(t.name, len(t.partitions)) for t in r.topics] == [("a", 1), ("b", 2)]
    assert r.next_cursor is None
    r = call(apis, D(topics=[D.TopicRequest(name="nope")]), 0)
    assert r.topics[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")


def test_one_replica_cluster_apis(apis):
    apis.cluster.create_topic("t", 2)
    node = leader_node(apis, "t")
    E = fastkwire.ElectLeadersRequest
    r = call(apis, E(topic_partitions=[E.TopicPartitions(topic="t", partitions=[0, 5])]), 2)
    assert [p.error_code for p in r.replica_election_results[0].partition_result] == [
        code("ELECTION_NOT_NEEDED"),
        code("UNKNOWN_TOPIC_OR_PARTITION"),
    ]
    call(apis, produce("t", 0, batch(1, 2)), 9, node)
    r = call(apis, fastkwire.DescribeLogDirsRequest(topics=None), 4, node)
    (result,) = r.results
    sizes = {p.partition_index: p.partition_size for t in result.topics for p in t.partitions}
    assert sizes[0] == apis.cluster.partition("t", 0).log.bytes > 0
    Q = fastkwire.DescribeQuorumRequest
    request = Q(
        topics=[Q.TopicData(topic_name="__cluster_metadata", partitions=[Q.PartitionData()])]
    )
    (p,) = call(apis, request, 2).topics[0].partitions
    assert p.error_code == 0 and [v.replica_id for v in p.current_voters] == [0]
    A = fastkwire.AlterPartitionReassignmentsRequest
    move = A(
        topics=[
            A.ReassignableTopic(
                name="t",
                partitions=[
                    A.ReassignablePartition(partition_index=0, replicas=[1 - node]),
                    A.ReassignablePartition(partition_index=1, replicas=[0, 1]),
                ],
            )
        ]
    )
    moved, refused = call(apis, move, 0).responses[0].partitions
    assert (moved.error_code, refused.error_code) == (0, code("INVALID_REPLICA_ASSIGNMENT"))
    assert leader_node(apis, "t") == 1 - node  # the one replica moved: so did the leader
    L = fastkwire.ListConfigResourcesRequest
    r = call(apis, L(resource_types=[]), 1)
    assert {(c.resource_name, c.resource_type) for c in r.config_resources} == {
        ("t", 2),
        ("0", 4),
        ("1", 4),
    }


def test_acls_are_kept_and_matched_by_kafkas_filter_rules():
    from fastkwire.broker._acls import Acl, AclError, AclStore

    store = AclStore()
    topic, group, literal, prefixed, read, write, allow = 2, 3, 3, 4, 3, 4, 3
    store.add(Acl(topic, "orders", literal, "User:a", "*", read, allow))
    store.add(Acl(topic, "ord", prefixed, "User:b", "*", write, allow))
    store.add(Acl(group, "*", literal, "User:a", "*", read, allow))
    store.add(Acl(topic, "orders", literal, "User:a", "*", read, allow))  # kept once
    assert len(store.acls) == 3
    everything = Acl(1, None, 1, None, None, 1, 1)
    assert len(store.find(everything)) == 3
    match_orders = Acl(topic, "orders", 2, None, None, 1, 1)  # MATCH: what applies to it
    assert [a.principal for a in store.find(match_orders)] == ["User:a", "User:b"]
    assert store.find(Acl(1, "*", 1, None, None, 1, 1))[0].resource_type == group
    assert store.find(Acl(1, None, 1, "User:a", None, write, 1)) == []
    with pytest.raises(AclError):
        store.add(Acl(1, "x", literal, "User:a", "*", read, allow))  # ANY is a filter only
    assert len(store.remove(Acl(topic, None, 1, None, None, 1, 1))) == 2
    assert len(store.acls) == 1


def test_offset_for_leader_epoch(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    call(apis, produce("t", 0, batch(1, 2, 3)), 9, node)
    E = fastkwire.OffsetForLeaderEpochRequest

    def ask(epoch, current=-1, partition=0):
        request = E(
            replica_id=-1,
            topics=[
                E.OffsetForLeaderTopic(
                    topic="t",
                    partitions=[
                        E.OffsetForLeaderPartition(
                            partition=partition, current_leader_epoch=current, leader_epoch=epoch
                        )
                    ],
                )
            ],
        )
        p = call(apis, request, 4, node).topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(0) == (0, 0, 3)
    assert ask(5) == (0, -1, -1)  # an epoch the log never had
    assert ask(0, current=3)[0] == code("UNKNOWN_LEADER_EPOCH")
    assert ask(0, partition=4)[0] == code("UNKNOWN_TOPIC_OR_PARTITION")


def test_topic_configs_are_altered_whole_or_one_at_a_time(apis):
    apis.cluster.create_topic("t", configs={"retention.ms": "1000"})
    A = fastkwire.AlterConfigsRequest

    def alter(*configs, name="t", resource_type=2):
        request = A(
            resources=[
                A.AlterConfigsResource(
                    resource_type=resource_type,
                    resource_name=name,
                    configs=[A.AlterableConfig(name=k, value=v) for k, v in configs],
                )
            ]
        )
        return call(apis, request, 2).responses[0].error_code

    assert alter(("cleanup.policy", "compact")) == 0
    assert apis.cluster.topics["t"].configs == {"cleanup.policy": "compact"}  # whole: replaced
    assert alter(("retention.ms", "soon")) == code("INVALID_CONFIG")
    assert alter(("cleanup.policy", "shred")) == code("INVALID_CONFIG")
    assert alter(("no.such.config", "1")) == code("INVALID_CONFIG")
    assert alter(("retention.ms", "1"), name="nope") == code("UNKNOWN_TOPIC_OR_PARTITION")
    # a broker's configs: retention.ms is not one (test_broker_configs.py has the rest)
    assert alter(("retention.ms", "1"), name="0", resource_type=4) == code("INVALID_CONFIG")
    assert apis.cluster.topics["t"].configs == {"cleanup.policy": "compact"}  # refused: kept

    I = fastkwire.IncrementalAlterConfigsRequest  # noqa: E741
    request = I(
        resources=[
            I.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=[
                    I.AlterableConfig(name="cleanup.policy", config_operation=2, value="delete"),
                    I.AlterableConfig(name="retention.ms", config_operation=0, value="5"),
                ],
            )
        ]
    )
    assert call(apis, request, 1).responses[0].error_code == 0
    assert apis.cluster.topics["t"].configs == {
        "cleanup.policy": "compact,delete",
        "retention.ms": "5",
    }
    request.resources[0].configs = [I.AlterableConfig(name="retention.ms", config_operation=1)]
    assert call(apis, request, 1).responses[0].error_code == 0
    assert "retention.ms" not in apis.cluster.topics["t"].configs  # back to the default


def test_transaction_markers_the_last_stable_offset_and_aborted_ranges():
    log = PartitionLog()
    append(log, batch(1))  # offset 0: outside any transaction
    committed = records.write_batch(
        [Record(timestamp=2, value=b"c")],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    aborted = records.write_batch(
        [Record(timestamp=3, value=b"a")],
        producer_id=8,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    append(log, committed)  # 1
    append(log, aborted)  # 2
    assert log.last_stable_offset == 1  # the oldest open transaction starts there
    read_committed = records.read_batches(log.read(0, 1 << 20, upto=log.last_stable_offset))
    assert [b.base_offset for b in read_committed] == [0]
    assert log.write_marker(8, 0, commit=False, now_ms=5) == 3
    assert log.last_stable_offset == 1  # producer 7's is still open
    assert log.write_marker(7, 0, commit=True, now_ms=6) == 4
    assert log.last_stable_offset == log.log_end == 5
    assert log.aborted_in(0, 5) == [(8, 2)]
    assert log.aborted_in(4, 5) == []  # the aborted records end at its marker, offset 3
    markers = [b for b in records.read_batches(log.read(3, 1 << 20)) if b.is_control]
    assert [(b.producer_id, b.records[0].control_type) for b in markers] == [
        (8, "abort"),
        (7, "commit"),
    ]
    append(log, aborted)  # 5: producer 8 opens another
    log.delete_before(6)
    assert log.last_stable_offset == 6  # not before the log start


def test_transactions_through_the_handlers(apis):
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    coordinator = apis.cluster.coordinator("tx")  # the transaction APIs go to it, as in Kafka
    init = fastkwire.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000)
    r = call(apis, init, 4, coordinator)
    pid, epoch = r.producer_id, r.producer_epoch
    assert r.error_code == 0 and epoch == 0
    A = fastkwire.AddPartitionsToTxnRequest
    add = A(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name="t", partitions=[0])],
    )
    result = (
        call(apis, add, 3, coordinator).results_by_topic_v3_and_below[0].results_by_partition[0]
    )
    assert result.partition_error_code == 0
    data = records.write_batch(
        [Record(timestamp=1, value=b"x")],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    call(apis, produce("t", 0, data), 9, node)
    log = apis.cluster.partition("t", 0).log
    assert log.last_stable_offset == 0
    # A new InitProducerId for the same id fences this producer and aborts its transaction
    # (CONCURRENT_TRANSACTIONS, as Kafka answers while it does); the retry bumps again.
    r = call(apis, init, 4, coordinator)
    assert r.error_code == code("CONCURRENT_TRANSACTIONS")
    r = call(apis, init, 4, coordinator)
    assert (r.error_code, r.producer_id, r.producer_epoch) == (0, pid, 2)
    assert log.last_stable_offset == log.log_end == 2 and log.aborted_in(0, 2) == [(pid, 0)]
    E = fastkwire.EndTxnRequest
    end = E(transactional_id="tx", producer_id=pid, producer_epoch=0, committed=True)
    assert call(apis, end, 3, coordinator).error_code == code("PRODUCER_FENCED")
    # KIP-588: a client older than EndTxn v2 knows it as INVALID_PRODUCER_EPOCH
    assert call(apis, end, 1, coordinator).error_code == code("INVALID_PRODUCER_EPOCH")
    # A transaction left open past its timeout is aborted, and its producer fenced.
    slow_coordinator = apis.cluster.coordinator("slow")
    timed = fastkwire.InitProducerIdRequest(transactional_id="slow", transaction_timeout_ms=500)
    r = call(apis, timed, 4, slow_coordinator)
    add.v3_and_below_transactional_id = "slow"
    add.v3_and_below_producer_id, add.v3_and_below_producer_epoch = r.producer_id, 0
    call(apis, add, 3, slow_coordinator)
    assert apis.tick() == 0.5
    apis.fake_clock[0] = 0.5
    end_at = log.log_end
    assert apis.tick() is None
    assert log.log_end == end_at + 1  # its ABORT marker
    end = E(transactional_id="slow", producer_id=r.producer_id, producer_epoch=0, committed=True)
    assert call(apis, end, 3, slow_coordinator).error_code == code("PRODUCER_FENCED")
    F = fastkwire.FindCoordinatorRequest
    r = call(apis, F(key="tx", key_type=1), 3, node)
    assert r.error_code == 0 and r.node_id == apis.cluster.coordinator("tx")


def test_a_transactional_batch_must_belong_to_the_transaction_under_way(apis):
    """Kafka 4.0's verification (KIP-890 part 1): a producer's first transactional batch
    in a partition is refused unless AddPartitionsToTxn put the partition in its
    transaction under way."""
    apis.cluster.create_topic("t")
    apis.cluster.create_topic("u")
    node = leader_node(apis, "t")
    init = fastkwire.InitProducerIdRequest(transactional_id="v", transaction_timeout_ms=60000)
    r = call(apis, init, 4, node)
    pid = r.producer_id

    def send(seq, version=9, epoch=0, topic="t"):
        data = records.write_batch(
            [Record(timestamp=1, value=b"x")],
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=seq,
            is_transactional=True,
        )
        req = produce(topic, 0, data)
        req.transactional_id = "v"
        answer = call(apis, req, version, leader_node(apis, topic))
        return answer.responses[0].partition_responses[0].error_code

    # Nothing added yet: older clients hear INVALID_TXN_STATE, Produce v11+ TRANSACTION_ABORTABLE.
    assert send(0) == code("INVALID_TXN_STATE")
    assert send(0, version=11) == code("TRANSACTION_ABORTABLE")
    A = fastkwire.AddPartitionsToTxnRequest
    add = A(
        v3_and_below_transactional_id="v",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name="t", partitions=[0])],
    )
    call(apis, add, 3, node)
    assert send(0) == 0 and send(1) == 0  # added: written
    assert send(0, topic="u") == code("INVALID_TXN_STATE")  # u was not added
    log = apis.cluster.partition("t", 0).log
    assert log.log_end == 2 and apis.cluster.partition("u", 0).log.log_end == 0
    E = fastkwire.EndTxnRequest
    end = E(transactional_id="v", producer_id=pid, producer_epoch=0, committed=True)
    assert call(apis, end, 3, node).error_code == 0
    assert send(2) == code("INVALID_TXN_STATE")  # the transaction ended
    call(apis, init, 4, node)  # epoch 1 fences epoch 0
    assert send(2) == code("INVALID_PRODUCER_EPOCH")
    assert log.log_end == 3  # the two batches and the COMMIT marker only


def test_end_txn_of_no_transaction_is_refused_and_a_retry_answered(apis):
    """Kafka's coordinator: EndTxn with nothing under way is INVALID_TXN_STATE (Empty),
    unless it repeats how the last transaction ended (a retry of a lost answer)."""
    apis.cluster.create_topic("t")
    node = leader_node(apis, "t")
    init = fastkwire.InitProducerIdRequest(transactional_id="e", transaction_timeout_ms=60000)
    r = call(apis, init, 4, node)
    E = fastkwire.EndTxnRequest

    def end(committed):
        req = E(
            transactional_id="e",
            producer_id=r.producer_id,
            producer_epoch=r.producer_epoch,
            committed=committed,
        )
        return call(apis, req, 3, node).error_code

    assert end(True) == code("INVALID_TXN_STATE")  # nothing was added: Empty
    A = fastkwire.AddPartitionsToTxnRequest
    add = A(
        v3_and_below_transactional_id="e",
        v3_and_below_producer_id=r.producer_id,
        v3_and_below_producer_epoch=r.producer_epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name="t", partitions=[0])],
    )
    call(apis, add, 3, node)
    assert end(True) == 0
    assert end(True) == 0  # the same end again: a retry
    assert end(False) == code("INVALID_TXN_STATE")  # aborting what was committed
    call(apis, add, 3, node)
    assert end(False) == 0 and end(False) == 0 and end(True) == code("INVALID_TXN_STATE")
    r = call(apis, init, 4, node)  # a new epoch starts Empty
    assert end(False) == code("INVALID_TXN_STATE")


def test_the_broker_and_its_command_load_no_pcap_or_capture_reading_code():
    # fastkwire.proxy's names load on first use: the broker takes its caps and framing only
    code_ = (
        "import sys, fastkwire.broker, fastkwire._broker_cli\n"
        "print(sorted(m for m in ('dpkt', 'fastkwire.proxy._pcap', 'fastkwire.proxy._read',"
        " 'fastkwire.proxy._lenient') if m in sys.modules))"
    )
    src = os.path.dirname(os.path.dirname(fastkwire.__file__))
    env = dict(os.environ, PYTHONPATH=src)
    out = subprocess.run(
        [sys.executable, "-c", code_], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    import fastkwire.proxy as proxy

    assert all(getattr(proxy, name) is not None for name in proxy.__all__)
    assert set(proxy.__all__) <= set(dir(proxy))
    with pytest.raises(AttributeError, match="no_such_name"):
        proxy.no_such_name  # noqa: B018


def test_the_broker_command_loads_neither_the_proxy_server_nor_the_other_commands():
    # `fastkwire broker` listens sooner for importing only what it runs
    src = os.path.dirname(os.path.dirname(fastkwire.__file__))
    env = dict(os.environ, PYTHONPATH=src)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "fastkwire",
            "broker",
            "--listen",
            "127.0.0.1:0",
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout.readline().startswith("listening on 127.0.0.1:")
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    imported = {line.rsplit("|", 1)[-1].strip() for line in err.splitlines() if "|" in line}
    assert "fastkwire.broker._apis" in imported
    unwanted = {
        "fastkwire.cli",
        "fastkwire._proxy_cli",
        "fastkwire.proxy._server",
        "fastkwire.admin",
    }
    assert not imported & unwanted


def test_the_broker_command_leaves_help_and_usage_errors_to_the_whole_command_line():
    src = os.path.dirname(os.path.dirname(fastkwire.__file__))
    env = dict(os.environ, PYTHONPATH=src)
    run = [sys.executable, "-m", "fastkwire", "broker"]
    out = subprocess.run([*run, "--help"], env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "exit codes:" in out.stdout and "--listen" in out.stdout
    out = subprocess.run(
        [*run, "--partitions", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 2
    assert "fastkwire broker: error: argument --partitions: not a positive count" in out.stderr


@pytest.mark.parametrize("version", range(4, 18))
def test_fetch_answers_in_pieces_are_the_codec_encoding_byte_for_byte(version):
    from fastkwire.broker._splice import SPLICE_MIN, encode_fetch

    R = fastkwire.FetchResponse
    big = records.write_batch([Record(timestamp=1, value=b"v" * SPLICE_MIN)])
    sizes = (big, b"", bytearray(big) + big, records.write_batch([Record(timestamp=2)]))

    def answer():
        parts = [
            R.PartitionData(partition_index=i, high_watermark=9, records=data)
            for i, data in enumerate(sizes)
        ]
        topics = [R.FetchableTopicResponse(topic="t", partitions=parts)]
        if version >= 13:
            topics[0].topic, topics[0].topic_id = "", uuid.UUID(int=7)
        return R(throttle_time_ms=3, responses=topics)

    pieces = encode_fetch(answer(), version, 42)
    assert type(pieces) is tuple  # two records fields over SPLICE_MIN went in as they are
    assert sum(1 for p in pieces if p is big) == 1
    assert b"".join(pieces) == fastkwire.encode_response(answer(), version, 42)
    small = R(responses=[R.FetchableTopicResponse(partitions=[R.PartitionData(records=b"x")])])
    assert encode_fetch(small, version, 1) == fastkwire.encode_response(small, version, 1)

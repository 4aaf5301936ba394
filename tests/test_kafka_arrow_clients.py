"""The suite's own broker (tests/log_broker.py) serves real clients, not only fastkwire:
confluent-kafka, kafka-python and Ray Data's own `ray.data.read_kafka` (Ray in local mode)
each read a topic from it and get exactly the rows `fastkwire.read_kafka` gives, row for
row. So the benchmarks that race those readers against fastkwire's on this broker measure
readers that really read (librdkafka, under confluent-kafka and Ray, fetches with Fetch v4+
only when the broker lists Produce v3+; the broker lists it and refuses every Produce)."""

import socket
import struct
import time

import pytest

pa = pytest.importorskip("pyarrow")

import fastkwire  # noqa: E402
from fastkwire import ProduceRequest, ProduceResponse, records  # noqa: E402
from fastkwire.records import Record  # noqa: E402

from log_broker import INVALID_REQUEST, LogBroker, PartitionLog  # noqa: E402
from local_ray import local_ray  # noqa: E402
from record_peers import HAVE_CRAMJAM, skip_unless_kafka_python_reads  # noqa: E402

TOPIC = "clients"
PARTITIONS = 3
PER_PARTITION = 120
# A codec per partition; uncompressed all where cramjam (the compression extra) has no build.
CODECS = ["none", "gzip", "lz4"] if HAVE_CRAMJAM else ["none"] * PARTITIONS
DEADLINE_S = 60


def client_log(partition, n=PER_PARTITION, per_batch=16):
    """Batches of partition `partition`, each partition in its own codec: every fifth key
    null, every seventh value null, headers (distinct keys, one null value) on even offsets."""
    batches = []
    for base in range(0, n, per_batch):
        batch = [
            Record(
                key=None if o % 5 == 0 else b"k%d-%d" % (partition, o),
                value=None if o % 7 == 3 else b"p%d-%d" % (partition, o) * (1 + o % 3),
                timestamp=1_700_000_000_000 + 10 * o + partition,
                headers=[("a", b"%d" % o), ("b", None)] if o % 2 == 0 else [],
            )
            for o in range(base, min(base + per_batch, n))
        ]
        batches.append(records.write_batch(batch, base_offset=base, compression=CODECS[partition]))
    return batches


@pytest.fixture(scope="module")
def broker():
    b = LogBroker({(TOPIC, p): PartitionLog(client_log(p)) for p in range(PARTITIONS)})
    yield b
    b.close()


def rows(items):
    """(partition, offset, key, value, timestamp, headers) sorted: the rows compared."""
    return sorted(items, key=lambda r: (r[0], r[1]))


def arrow_rows(table):
    return rows(
        (r["partition"], r["offset"], r["key"], r["value"], r["timestamp"], r["headers"])
        for r in table.to_pylist()
    )


@pytest.fixture(scope="module")
def expected(broker):
    table = fastkwire.read_kafka(TOPIC, bootstrap_servers=broker.bootstrap)
    got = arrow_rows(table)
    assert len(got) == PARTITIONS * PER_PARTITION
    assert set(table.column("timestamp_type").to_pylist()) == {1}  # create time
    return got


def test_confluent_kafka_reads_what_read_kafka_gives(broker, expected):
    ck = pytest.importorskip("confluent_kafka")
    OFFSET_BEGINNING, Consumer, TopicPartition = ck.OFFSET_BEGINNING, ck.Consumer, ck.TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": "log-broker-test",
            "enable.auto.commit": False,
        }
    )
    got, left = [], {p: PER_PARTITION for p in range(PARTITIONS)}
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + DEADLINE_S
        while any(left.values()) and time.monotonic() < deadline:
            for m in consumer.consume(100, timeout=1.0):
                assert m.error() is None, m.error()
                ts_type, ts = m.timestamp()
                assert ts_type == 1  # TIMESTAMP_CREATE_TIME
                got.append((m.partition(), m.offset(), m.key(), m.value(), ts, m.headers() or []))
                left[m.partition()] -= 1
    finally:
        consumer.close()
    assert rows(got) == expected


def test_kafka_python_reads_what_read_kafka_gives(broker, expected):
    from kafka import KafkaConsumer, TopicPartition

    skip_unless_kafka_python_reads(CODECS)

    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=10_000,
    )
    got = []
    try:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + DEADLINE_S
        while len(got) < PARTITIONS * PER_PARTITION and time.monotonic() < deadline:
            for messages in consumer.poll(timeout_ms=1000).values():
                got += [
                    (m.partition, m.offset, m.key, m.value, m.timestamp, list(m.headers))
                    for m in messages
                ]
    finally:
        consumer.close()
    assert rows(got) == expected


def test_ray_datas_own_reader_reads_what_read_kafka_gives(broker, expected):
    with local_ray() as ray:
        # timeout_ms bounds each of Ray's read tasks (it then returns what it had: the
        # comparison below would fail, not hang).
        ds = ray.data.read_kafka(
            TOPIC, bootstrap_servers=broker.bootstrap, timeout_ms=DEADLINE_S * 1000
        )
        table = pa.concat_tables(ray.get(ds.to_arrow_refs()))
    assert table.num_rows == PARTITIONS * PER_PARTITION
    assert set(table.column("timestamp_type").to_pylist()) == {1}
    assert [ray_headers(r) for r in arrow_rows(table)] == [ray_headers(r) for r in expected]


def ray_headers(row):
    """A row with its headers as Ray's reader keeps them: it makes a dict of each
    message's headers and its blocks a struct of all the keys in the block, so a header
    with a null value and one that is absent both read as None; compare the non-null ones."""
    headers = row[5].items() if isinstance(row[5], dict) else row[5]
    return row[:5] + ({k: v for k, v in headers if v is not None},)


def produce_request(acks):
    return ProduceRequest(
        acks=acks,
        timeout_ms=1000,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    ProduceRequest.PartitionProduceData(
                        index=0, records=records.write_batch([Record(value=b"x")])
                    )
                ],
            )
        ],
    )


def test_the_broker_is_read_only(broker):
    """It lists Produce (for librdkafka's sake) and refuses every one; acks=0 gets no answer."""
    with socket.create_connection(("127.0.0.1", broker.port), timeout=10) as s:
        for acks, correlation_id in ((0, 7), (1, 8)):
            s.sendall(fastkwire.encode_request(produce_request(acks), 9, correlation_id))
        size = struct.unpack(">i", s.recv(4, socket.MSG_WAITALL))[0]
        frame = s.recv(size, socket.MSG_WAITALL)
    header, answer = fastkwire.decode_response(
        struct.pack(">i", size) + frame, ProduceRequest.API_KEY, 9
    )[:2]
    assert header.correlation_id == 8  # the acks=0 request was not answered
    assert isinstance(answer, ProduceResponse)
    [part] = answer.responses[0].partition_responses
    assert part.error_code == INVALID_REQUEST
    assert fastkwire.read_kafka(TOPIC, bootstrap_servers=broker.bootstrap).num_rows == (
        PARTITIONS * PER_PARTITION
    )

"""The Kafka to Arrow reader against an outside peer broker (Tansu), loaded by real
producers (confluent-kafka and kafka-python, each with its codecs): read_kafka gives exactly
the rows kafka-python's own consumer reads, row for row, past Tansu's defects. Topics are
small: Tansu stores about a thousand records a second. The Ray and Dask readers, and Ray
Data's own read_kafka, are checked against fastkwire's broker: test_kafka_arrow_broker.py."""

import datetime as dt

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("confluent_kafka")
pytest.importorskip("kafka")

import fastkwire  # noqa: E402
from fastkwire.kafka_arrow import SCHEMA, KafkaReadError  # noqa: E402

from broker import tansu_broker  # noqa: E402, F401
from record_peers import skip_unless_kafka_python_reads  # noqa: E402

pytestmark = pytest.mark.broker

PARTITIONS = 3
CONFLUENT_CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 24


def _create(bootstrap, topic, partitions):
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)


def _value(who, i):
    return None if i % 11 == 5 else b"%s-%d" % (who.encode(), i) * (1 + i % 4)


@pytest.fixture(scope="module")
def loaded(tansu_broker):
    """Topic "arrow-mixed": confluent-kafka with each of its codecs, then kafka-python with
    each of its, headers, null keys and null values, spread over 3 partitions; "arrow-tx":
    an aborted and then a committed transaction."""
    from confluent_kafka import Producer
    from kafka import KafkaProducer
    from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd

    bootstrap = tansu_broker.bootstrap
    _create(bootstrap, "arrow-mixed", PARTITIONS)
    _create(bootstrap, "arrow-tx", 1)
    for codec in CONFLUENT_CODECS:
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 20})
        for i in range(PER_CODEC):
            p.produce(
                "arrow-mixed",
                value=_value(codec, i),
                key=None if i % 3 == 0 else b"k%d" % i,
                partition=i % PARTITIONS,
                headers=[("codec", codec.encode()), ("i", b"%d" % i), ("i", None)]
                if i % 2
                else None,
            )
        assert p.flush(30) == 0
    kp_codecs = [None] + [
        c
        for c, has in (
            ("gzip", has_gzip),
            ("snappy", has_snappy),
            ("lz4", has_lz4),
            ("zstd", has_zstd),
        )
        if has()
    ]
    for codec in kp_codecs:
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20)
        for i in range(PER_CODEC):
            p.send(
                "arrow-mixed",
                value=_value(f"kp-{codec}", i),
                key=None if i % 3 == 1 and i % 11 != 5 else b"kp%d" % i,
                partition=i % PARTITIONS,
                headers=[("kp", b"%d" % i)] if i % 2 == 0 else [],
            )
        p.flush(30)
        p.close()
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": "arrow-tx-1"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce("arrow-tx", value=b"aborted-%d" % i, partition=0)
    tx.abort_transaction(30)
    tx.begin_transaction()
    for i in range(3):
        tx.produce("arrow-tx", value=b"committed-%d" % i, partition=0)
    tx.commit_transaction(30)
    return bootstrap


def consumed(bootstrap, topic, isolation_level="read_uncommitted"):
    """Every record of `topic` as kafka-python's consumer reads it, as row tuples."""
    from kafka import KafkaConsumer, TopicPartition

    if topic == "arrow-mixed":  # confluent-kafka wrote it in each of its codecs
        skip_unless_kafka_python_reads(CONFLUENT_CODECS)

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        consumer_timeout_ms=3000,
        isolation_level=isolation_level,
    )
    try:
        parts = [TopicPartition(topic, p) for p in sorted(consumer.partitions_for_topic(topic))]
        consumer.assign(parts)
        consumer.seek_to_beginning()
        return sorted(
            (
                m.partition,
                m.offset,
                m.key,
                m.value,
                m.timestamp,
                m.timestamp_type + 1,  # kafka-python: 0 create, 1 log append; Ray's: 1, 2
                [(k, v) for k, v in m.headers],
            )
            for m in consumer
        )
    finally:
        consumer.close()


def as_rows(table):
    assert table.schema == SCHEMA
    return sorted(
        (
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            r["timestamp"],
            r["timestamp_type"],
            r["headers"],
        )
        for r in table.to_pylist()
    )


def test_read_kafka_gives_what_kafka_python_consumes(loaded):
    theirs = consumed(loaded, "arrow-mixed")
    assert len(theirs) >= PER_CODEC * len(CONFLUENT_CODECS) + PER_CODEC
    assert {r[0] for r in theirs} == set(range(PARTITIONS))
    assert any(r[2] is None for r in theirs) and any(r[3] is None for r in theirs)
    table = fastkwire.read_kafka("arrow-mixed", bootstrap_servers=loaded)
    assert as_rows(table) == theirs
    # Small answers: many Fetches per partition, batches cut off at their ends.
    table = fastkwire.read_kafka("arrow-mixed", bootstrap_servers=loaded, block_size=1024)
    assert as_rows(table) == theirs


def test_tansu_lists_the_last_batchs_base_offset_as_latest(loaded):
    """Tansu's defect: ListOffsets "latest" answers the base offset of the last batch, not
    the log end. The reader takes the end from the Fetch answer's high watermark, so it
    reads the last batch too."""
    from fastkwire import ListOffsetsRequest
    from fastkwire.connection import Connection

    host, port = loaded.split(":")
    with Connection(host, int(port)) as conn:
        answer = conn.request(
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name="arrow-mixed",
                        partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1)
                            for p in range(PARTITIONS)
                        ],
                    )
                ],
            )
        )
    listed = {p.partition_index: p.offset for p in answer.topics[0].partitions}
    table = fastkwire.read_kafka("arrow-mixed", bootstrap_servers=loaded)
    ends = {
        p: max(
            o for q, o in zip(table["partition"].to_pylist(), table["offset"].to_pylist()) if q == p
        )
        + 1
        for p in range(PARTITIONS)
    }
    assert all(listed[p] < ends[p] for p in range(PARTITIONS)), (listed, ends)


def test_transactions(loaded):
    """Tansu keeps no aborted records and writes no markers: both isolation levels read
    what kafka-python reads (the markers and aborted batches are test_kafka_arrow.py's)."""
    for level in ("read_uncommitted", "read_committed"):
        theirs = consumed(loaded, "arrow-tx", level)
        table = fastkwire.read_kafka("arrow-tx", bootstrap_servers=loaded, isolation_level=level)
        assert as_rows(table) == theirs
        assert [r[3] for r in theirs] == [b"committed-0", b"committed-1", b"committed-2"]


def test_bad_input_on_the_real_broker(loaded):
    with pytest.raises(KafkaReadError, match="topic 'arrow-none' does not exist"):
        fastkwire.read_kafka("arrow-none", bootstrap_servers=loaded)
    with pytest.raises(KafkaReadError, match="has no partition 9"):
        fastkwire.read_kafka("arrow-mixed", bootstrap_servers=loaded, partitions=[9])
    with pytest.raises(ValueError, match="start_offset 5 is after end_offset 2"):
        fastkwire.read_kafka("arrow-mixed", bootstrap_servers=loaded, start_offset=5, end_offset=2)


def test_a_newcomers_offsets_on_the_real_broker(loaded):
    """What a first afternoon on Tansu met: a time after the last record (Tansu answers
    offset 0 with timestamp -1) reads nothing; one int start offset past a short partition
    (arrow-tx holds 3 records) reads nothing there and the rest elsewhere; an offset past
    the end given for that partition, or offsets naming nothing, are refused by name."""
    read = fastkwire.read_kafka
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    assert read("arrow-mixed", bootstrap_servers=loaded, start_offset=later).num_rows == 0
    everything = as_rows(read("arrow-mixed", bootstrap_servers=loaded))
    both = read(["arrow-mixed", "arrow-tx"], bootstrap_servers=loaded, start_offset=20)
    assert as_rows(both) == [r for r in everything if r[1] >= 20]
    with pytest.raises(
        KafkaReadError,
        match=r"start_offset 20 is after the end of topic 'arrow-tx' partition 0: 127\.0\.0\.1:\d+ holds offsets 0 to \d+$",
    ):
        read("arrow-tx", bootstrap_servers=loaded, start_offset={"arrow-tx": {0: 20}})
    with pytest.raises(ValueError, match="start_offset names topic 'orders'"):
        read("arrow-tx", bootstrap_servers=loaded, start_offset={"orders": {0: 1}})

"""The Kafka to Arrow readers against fastkwire's own broker (fastkwire.testing.Broker),
loaded by kafka-python with each of its codecs: fastkwire.read_kafka, fastkwire.ray.read_kafka
and Ray Data's own ray.data.read_kafka (Ray in local mode), and fastkwire.dask.read_kafka (a
distributed.LocalCluster of 2 workers) give exactly the rows kafka-python's consumer reads,
row for row, up to the log end that ListOffsets "latest" names. A confluent-kafka
transaction, aborted then committed, reads as kafka-python reads it at both isolation
levels. Tansu as the outside peer is test_kafka_arrow_tansu.py."""

import datetime as dt

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("kafka")

import fastkwire  # noqa: E402
from fastkwire.kafka_arrow import SCHEMA, KafkaReadError  # noqa: E402
from fastkwire.testing import Broker  # noqa: E402

from local_ray import local_ray  # noqa: E402

PARTITIONS = 3
PER_CODEC = 900  # records per codec, over the partitions
TOPIC, TX_TOPIC = "arrow-mixed", "arrow-tx"


def _value(who, i):
    return None if i % 11 == 5 else b"%s-%d" % (who.encode(), i) * (1 + i % 4)


def kafka_python_codecs():
    from kafka.codec import has_gzip, has_lz4, has_snappy, has_zstd

    return [None] + [
        c
        for c, has in (
            ("gzip", has_gzip),
            ("snappy", has_snappy),
            ("lz4", has_lz4),
            ("zstd", has_zstd),
        )
        if has()
    ]


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


@pytest.fixture(scope="module")
def loaded(broker):
    """TOPIC: kafka-python with each of its codecs, headers, null keys and null values, over
    3 partitions; TX_TOPIC (with confluent-kafka installed): an aborted and then a
    committed transaction. Returns the bootstrap servers."""
    from kafka import KafkaProducer

    bootstrap = broker.bootstrap_servers
    broker.create_topic(TOPIC, PARTITIONS)
    for codec in kafka_python_codecs():
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec, linger_ms=20)
        for i in range(PER_CODEC):
            p.send(
                TOPIC,
                value=_value(f"kp-{codec}", i),
                key=None if i % 3 == 1 and i % 11 != 5 else b"kp%d" % i,
                partition=i % PARTITIONS,
                headers=[("kp", b"%d" % i), ("codec", (codec or "none").encode())]
                if i % 2 == 0
                else [],
            )
        p.flush(30)
        p.close()
    return bootstrap


@pytest.fixture(scope="module")
def transactions(loaded, broker):
    ck = pytest.importorskip("confluent_kafka")
    broker.create_topic(TX_TOPIC, 1)
    tx = ck.Producer({"bootstrap.servers": loaded, "transactional.id": "arrow-tx-1"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(5):
        tx.produce(TX_TOPIC, value=b"aborted-%d" % i, partition=0)
    assert tx.flush(30) == 0  # written, then aborted (an abort drops what is still queued)
    tx.abort_transaction(30)
    tx.begin_transaction()
    for i in range(3):
        tx.produce(TX_TOPIC, value=b"committed-%d" % i, partition=0)
    tx.commit_transaction(30)
    return loaded


def consumed(bootstrap, topic, isolation_level="read_uncommitted"):
    """Every record of `topic` as kafka-python's consumer reads it, as row tuples."""
    from kafka import KafkaConsumer, TopicPartition

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


@pytest.fixture(scope="module")
def theirs(loaded):
    rows = consumed(loaded, TOPIC)
    assert len(rows) == PER_CODEC * len(kafka_python_codecs())
    assert {r[0] for r in rows} == set(range(PARTITIONS))
    assert any(r[2] is None for r in rows) and any(r[3] is None for r in rows)
    return rows


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


def listed_latest(bootstrap, topic, partitions):
    from fastkwire import ListOffsetsRequest
    from fastkwire.connection import Connection

    host, port = bootstrap.split(":")
    with Connection(host, int(port)) as conn:
        answer = conn.request(
            ListOffsetsRequest(
                replica_id=-1,
                topics=[
                    ListOffsetsRequest.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            ListOffsetsRequest.ListOffsetsPartition(partition_index=p, timestamp=-1)
                            for p in range(partitions)
                        ],
                    )
                ],
            )
        )
    return {p.partition_index: p.offset for p in answer.topics[0].partitions}


def test_read_kafka_gives_what_kafka_python_consumes_up_to_the_listed_end(loaded, theirs):
    table = fastkwire.read_kafka(TOPIC, bootstrap_servers=loaded)
    assert as_rows(table) == theirs
    # "latest" is the log end here (Tansu names the last batch's base offset instead).
    ends = {p: 1 + max(r[1] for r in theirs if r[0] == p) for p in range(PARTITIONS)}
    assert listed_latest(loaded, TOPIC, PARTITIONS) == ends
    # Small answers: many Fetches per partition, batches cut off at their ends. (The block
    # must hold the largest batch, 14 KB here: the reader refuses a larger first batch.)
    table = fastkwire.read_kafka(TOPIC, bootstrap_servers=loaded, block_size=32768)
    assert as_rows(table) == theirs


def test_transactions_at_both_isolation_levels(transactions):
    committed = [b"committed-0", b"committed-1", b"committed-2"]
    for level, values in (
        ("read_uncommitted", [b"aborted-%d" % i for i in range(5)] + committed),
        ("read_committed", committed),
    ):
        rows = consumed(transactions, TX_TOPIC, level)
        assert [r[3] for r in rows] == values
        table = fastkwire.read_kafka(
            TX_TOPIC, bootstrap_servers=transactions, isolation_level=level
        )
        assert as_rows(table) == rows


def test_offsets_a_newcomer_gives(loaded, theirs):
    """A time after the last record reads nothing; a time inside reads from the first record
    at or after it; int and per-partition start offsets read what they name."""
    read = fastkwire.read_kafka
    later = dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1)
    assert read(TOPIC, bootstrap_servers=loaded, start_offset=later).num_rows == 0
    assert as_rows(read(TOPIC, bootstrap_servers=loaded, start_offset=100)) == [
        r for r in theirs if r[1] >= 100
    ]
    middle = sorted(r[4] for r in theirs if r[0] == 1)[len(theirs) // (2 * PARTITIONS)]
    at = dt.datetime.fromtimestamp(middle / 1000, dt.timezone.utc)
    got = as_rows(read(TOPIC, bootstrap_servers=loaded, partitions=[1], start_offset=at))
    first = min(r[1] for r in theirs if r[0] == 1 and r[4] >= middle)
    assert got == [r for r in theirs if r[0] == 1 and r[1] >= first]
    end = 1 + max(r[1] for r in theirs if r[0] == 0)
    with pytest.raises(
        KafkaReadError,
        match=rf"start_offset {end + 1} is after the end of topic '{TOPIC}' partition 0: "
        rf"127\.0\.0\.1:\d+ holds offsets 0 to {end - 1}$",
    ):
        read(TOPIC, bootstrap_servers=loaded, start_offset={TOPIC: {0: end + 1}})
    with pytest.raises(KafkaReadError, match="has no partition 9"):
        read(TOPIC, bootstrap_servers=loaded, partitions=[9])


@pytest.fixture(scope="module")
def ray_local():
    with local_ray() as ray:
        yield ray


def test_rays_own_read_kafka_and_fastkwires_give_what_kafka_python_consumes(
    loaded, theirs, ray_local
):
    import pyarrow as pa
    import ray.data

    import fastkwire.ray

    pytest.importorskip("confluent_kafka")  # Ray Data's reader consumes through it
    if not hasattr(ray.data, "read_kafka"):
        pytest.skip("this Ray has no ray.data.read_kafka")
    rays = ray.data.read_kafka(TOPIC, bootstrap_servers=loaded)
    rows = [row for t in ray_local.get(rays.to_arrow_refs()) for row in t.to_pylist()]
    # Ray Data's blocks carry the headers as a struct of the header names seen, each absent
    # one null: back to a list of (name, value) in the order written here.
    assert (
        sorted(
            (
                r["partition"],
                r["offset"],
                r["key"],
                r["value"],
                r["timestamp"],
                r["timestamp_type"],
                [(k, v) for k, v in (r["headers"] or {}).items() if v is not None],
            )
            for r in rows
        )
        == theirs
    )

    ours = fastkwire.ray.read_kafka(TOPIC, bootstrap_servers=loaded, records_per_task=500)
    table = pa.concat_tables(ray_local.get(ours.to_arrow_refs()))
    assert as_rows(table.cast(SCHEMA)) == theirs


def test_dask_reader_gives_what_kafka_python_consumes(loaded, theirs):
    pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    import pandas as pd
    import pyarrow as pa

    import fastkwire.dask

    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        df = fastkwire.dask.read_kafka(TOPIC, bootstrap_servers=loaded, records_per_partition=500)
        assert df.npartitions > PARTITIONS
        assert all(isinstance(t, pd.ArrowDtype) for t in df.dtypes)
        frame = df.compute()
    table = pa.Table.from_pandas(frame, preserve_index=False)
    assert as_rows(table.cast(SCHEMA)) == theirs

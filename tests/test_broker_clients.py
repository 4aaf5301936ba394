"""Real clients against fastkwire.testing.Broker: kafka-python 3, aiokafka and
confluent-kafka produce (every compression codec; batches are kept as received) and consume
what was written; fastkwire's own reader reads it too; the command starts, prints its
address and stops on SIGTERM. Each client skips when it is not installed."""

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest

from fastkwire.testing import Broker

from record_peers import skip_unless_kafka_python_reads

CODECS = [None, "gzip", "snappy", "lz4", "zstd"]
TIMEOUT = 20.0
N = 60


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


def needs_codec(codec):
    """The broker reads compressed batches (a ListOffsets by time) through cramjam."""
    if codec not in (None, "none"):
        pytest.importorskip("cramjam")


def values(prefix, n=N):
    return [b"%s-%d" % (prefix.encode(), i) for i in range(n)]


def test_ready_quickly_and_stopped():
    started = time.perf_counter()
    with Broker(nodes=2) as b:
        ready = time.perf_counter() - started
        assert len(b.addresses) == 2 and b.bootstrap_servers.count(",") == 1
        # (the time is reported, not asserted: a busy machine may be slow)
        print(f"ready in {ready * 1000:.1f} ms")
    assert not b._thread.is_alive()


@pytest.mark.parametrize("codec", CODECS)
def test_kafka_python_produces_and_consumes(broker, codec):
    needs_codec(codec)
    kafka = pytest.importorskip("kafka")
    skip_unless_kafka_python_reads([codec])  # lz4 and zstd need their own libraries
    topic = f"kp-{codec}"
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, compression_type=codec, linger_ms=5
    )
    try:
        sent = [producer.send(topic, v, key=b"k") for v in values(topic)]
        producer.flush(TIMEOUT)
        offsets = [f.get(TIMEOUT).offset for f in sent]
    finally:
        producer.close(TIMEOUT)
    assert offsets == list(range(N))
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers, consumer_timeout_ms=2000
    )
    try:
        tp = kafka.TopicPartition(topic, 0)
        consumer.assign([tp])
        consumer.seek(tp, 10)
        got = [m.value for m in consumer]
        assert consumer.end_offsets([tp]) == {tp: N}
        assert consumer.beginning_offsets([tp]) == {tp: 0}
    finally:
        consumer.close()
    assert got == values(topic)[10:]


@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_idempotent_producer_and_consumer(broker, codec):
    needs_codec(codec)
    aiokafka = pytest.importorskip("aiokafka")
    topic = f"ak-{codec}"

    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers,
            compression_type=codec,
            enable_idempotence=True,
        )
        await producer.start()
        try:
            batch = producer.create_batch()
            for v in values(topic)[: N // 2]:
                batch.append(key=None, value=v, timestamp=None)
            await (await producer.send_batch(batch, topic, partition=0))
            for v in values(topic)[N // 2 :]:
                await producer.send(topic, v)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(bootstrap_servers=broker.bootstrap_servers)
        await consumer.start()
        got = []
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + TIMEOUT
            while len(got) < N and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
            assert await consumer.end_offsets([tp]) == {tp: N}
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2)) == values(topic)


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_idempotent_producer_and_assigned_consumer(broker, codec):
    needs_codec(codec)
    ck = pytest.importorskip("confluent_kafka")
    topic = f"ck-{codec}"
    producer = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "compression.type": codec,
            "enable.idempotence": True,
            "linger.ms": 5,
        }
    )
    for v in values(topic):
        producer.produce(topic, v)
    assert producer.flush(TIMEOUT) == 0
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "unused",  # required by the client; assign() never joins it
            "enable.auto.commit": False,
        }
    )
    got = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < N and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
        low, high = consumer.get_watermark_offsets(ck.TopicPartition(topic, 0), TIMEOUT)
    finally:
        consumer.close()
    assert got == values(topic)
    assert (low, high) == (0, N)


def test_kafka_python_transactions_and_read_committed(broker):
    kafka = pytest.importorskip("kafka")
    topic = "kp-txn"
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, transactional_id="kp-txn"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"committed-%d" % i)
        producer.commit_transaction()
        producer.begin_transaction()
        for i in range(3):
            producer.send(topic, b"aborted-%d" % i)
        producer.flush()
        producer.abort_transaction()
        producer.begin_transaction()
        producer.send(topic, b"open")
        producer.flush()

        def read(isolation):
            consumer = kafka.KafkaConsumer(
                bootstrap_servers=broker.bootstrap_servers,
                isolation_level=isolation,
                auto_offset_reset="earliest",
                consumer_timeout_ms=1500,
            )
            try:
                tp = kafka.TopicPartition(topic, 0)
                consumer.assign([tp])
                return [m.value for m in consumer], consumer.end_offsets([tp])[tp]
            finally:
                consumer.close()

        committed = [b"committed-%d" % i for i in range(3)]
        aborted = [b"aborted-%d" % i for i in range(3)]
        # 3 records, a marker, 3 aborted, a marker: the open transaction starts at 8
        assert read("read_committed") == (committed, 8)
        assert read("read_uncommitted") == (committed + aborted + [b"open"], 9)
        producer.commit_transaction()
        assert read("read_committed") == (committed + [b"open"], 10)
    finally:
        producer.close(TIMEOUT)


def test_confluent_transactions(broker):
    ck = pytest.importorskip("confluent_kafka")
    topic = "ck-txn"
    producer = ck.Producer(
        {"bootstrap.servers": broker.bootstrap_servers, "transactional.id": "ck"}
    )
    producer.init_transactions(TIMEOUT)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, b"c%d" % i)
    producer.commit_transaction(TIMEOUT)
    producer.begin_transaction()
    producer.produce(topic, b"a")
    producer.flush(TIMEOUT)
    producer.abort_transaction(TIMEOUT)
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": "unused",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    got = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        consumer.close()
    assert got == [b"c0", b"c1", b"c2"]


def test_three_nodes_lead_their_own_partitions():
    kafka = pytest.importorskip("kafka")
    with Broker(nodes=3) as b:
        b.create_topic("spread", partitions=6)
        leaders = b.call(lambda: [p.leader for p in b.broker.cluster.topics["spread"].partitions])
        assert sorted(set(leaders)) == [0, 1, 2]
        producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap_servers.split(",")[0])
        for i in range(6):
            producer.send("spread", b"%d" % i, partition=i)
        producer.flush(TIMEOUT)
        producer.close(TIMEOUT)
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=b.bootstrap_servers.split(",")[-1],
            auto_offset_reset="earliest",
            consumer_timeout_ms=2000,
        )
        try:
            consumer.assign([kafka.TopicPartition("spread", i) for i in range(6)])
            got = sorted((m.partition, m.value) for m in consumer)
        finally:
            consumer.close()
        assert got == [(i, b"%d" % i) for i in range(6)]
        # one record each: a write to a node that does not lead is refused NOT_LEADER
        logs = b.call(lambda: [p.log.log_end for p in b.broker.cluster.topics["spread"].partitions])
        assert logs == [1] * 6


def test_fastkwire_reads_what_was_written(broker):
    kafka = pytest.importorskip("kafka")
    pytest.importorskip("pyarrow")
    import fastkwire

    topic = "read-back"
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=5)
    for v in values(topic):
        producer.send(topic, v)
    producer.flush(TIMEOUT)
    producer.close(TIMEOUT)
    table = fastkwire.read_kafka(topic, bootstrap_servers=broker.bootstrap_servers)
    assert table.column("value").to_pylist() == values(topic)
    assert table.column("offset").to_pylist() == list(range(N))


def test_the_command_prints_its_address_and_stops_on_sigterm():
    kafka = pytest.importorskip("kafka")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    started = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "broker", "--listen", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        ready = time.perf_counter() - started
        assert line.startswith("listening on 127.0.0.1:"), line + proc.stderr.read()
        address = line.split()[-1]
        print(f"the command was ready in {ready:.2f} s")
        admin = kafka.KafkaAdminClient(bootstrap_servers=address)
        try:
            admin.create_topics([kafka.admin.NewTopic("made", 3, 1)])
            assert "made" in admin.list_topics()
        finally:
            admin.close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(TIMEOUT) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


def test_the_pytest_plugin_gives_a_kafka_broker_fixture(tmp_path):
    (tmp_path / "test_uses_it.py").write_text(
        "import socket\n"
        "def test_it(kafka_broker):\n"
        "    host, port = kafka_broker.bootstrap_servers.split(':')\n"
        "    socket.create_connection((host, int(port)), timeout=5).close()\n"
        "def test_same_broker(kafka_broker, request):\n"
        "    assert kafka_broker is request.getfixturevalue('kafka_broker')\n"
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fastkwire.testing"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout

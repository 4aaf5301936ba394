"""Real clients against a three-node fastkwire.testing.Broker whose shape changes under
them: a partition's leader moved, a node stopped and started again. An idempotent producer
(kafka-python, aiokafka, confluent-kafka) keeps producing and a consumer keeps reading:
every record arrives once, in order. A group's coordinator stops: its consumer finds the
next one and commits there. Each client skips when it is not installed."""

import asyncio
import time

import pytest

from fastkwire.testing import Broker

TOPIC = "moving"
PARTITIONS = 3
PER_PHASE = 40
TIMEOUT = 30.0


def phases(b):
    """The changes made between phases of producing: (what, function)."""
    first = b.leader(TOPIC, 0)
    second = b.leader(TOPIC, 1)
    return [
        ("leader of partition 0 moved", lambda: b.move_leader(TOPIC, 0, (first + 1) % 3)),
        ("a leader's node stopped", lambda: b.stop_node(second)),
        ("that node started", lambda: b.start_node(second)),
        ("leaders moved back", lambda: [b.move_leader(TOPIC, p, first) for p in range(3)]),
    ]


def sent_values(phase, partition):
    return [b"%d-%d-%d" % (phase, partition, i) for i in range(PER_PHASE)]


def expected(done_phases):
    return {
        p: [v for ph in range(done_phases) for v in sent_values(ph, p)] for p in range(PARTITIONS)
    }


@pytest.fixture
def cluster():
    with Broker(nodes=3) as b:
        b.create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
        yield b


def test_kafka_python_produces_and_consumes_across_leader_moves_and_a_node_restart(cluster):
    kafka = pytest.importorskip("kafka")
    b = cluster
    producer = kafka.KafkaProducer(
        bootstrap_servers=b.bootstrap_servers,
        enable_idempotence=True,
        acks="all",
        linger_ms=1,
        retry_backoff_ms=50,
        reconnect_backoff_ms=50,
        request_timeout_ms=5000,
    )
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=b.bootstrap_servers,
        auto_offset_reset="earliest",
        reconnect_backoff_ms=50,
        retry_backoff_ms=50,
        fetch_max_wait_ms=100,
    )
    tps = [kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
    consumer.assign(tps)
    got = {p: [] for p in range(PARTITIONS)}

    def produce(phase):
        futures = [
            producer.send(TOPIC, v, partition=p)
            for i in range(PER_PHASE)
            for p in range(PARTITIONS)
            for v in [sent_values(phase, p)[i]]
        ]
        producer.flush(TIMEOUT)
        for f in futures:
            f.get(TIMEOUT)

    def consume_until(want):
        deadline = time.monotonic() + TIMEOUT
        while got != want and time.monotonic() < deadline:
            for tp, messages in consumer.poll(200).items():
                got[tp.partition] += [m.value for m in messages]
        assert got == want

    try:
        changes = phases(b)
        for phase in range(len(changes) + 1):
            produce(phase)
            consume_until(expected(phase + 1))
            if phase < len(changes):
                changes[phase][1]()
    finally:
        producer.close(TIMEOUT)
        consumer.close()
    ends = {
        tp.partition: b.call(
            lambda tp=tp: b.broker.cluster.partition(TOPIC, tp.partition).log.log_end
        )
        for tp in tps
    }
    assert ends == {p: PER_PHASE * (len(changes) + 1) for p in range(PARTITIONS)}  # no duplicate
    epochs = b.call(lambda: [p.log.leader_epoch for p in b.broker.cluster.topics[TOPIC].partitions])
    assert epochs[0] >= 2 and epochs[1] >= 2  # the leaders did change under the clients


def test_aiokafka_produces_and_consumes_across_leader_moves_and_a_node_restart(cluster):
    aiokafka = pytest.importorskip("aiokafka")
    b = cluster

    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=b.bootstrap_servers,
            enable_idempotence=True,
            linger_ms=1,
            retry_backoff_ms=50,
            request_timeout_ms=5000,
        )
        consumer = aiokafka.AIOKafkaConsumer(
            bootstrap_servers=b.bootstrap_servers,
            auto_offset_reset="earliest",
            retry_backoff_ms=50,
            fetch_max_wait_ms=100,
        )
        await producer.start()
        await consumer.start()
        tps = [aiokafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        got = {p: [] for p in range(PARTITIONS)}
        try:
            changes = phases(b)
            for phase in range(len(changes) + 1):
                sends = [
                    await producer.send(TOPIC, v, partition=p)
                    for i in range(PER_PHASE)
                    for p in range(PARTITIONS)
                    for v in [sent_values(phase, p)[i]]
                ]
                await asyncio.wait_for(asyncio.gather(*sends), TIMEOUT)
                want = expected(phase + 1)
                deadline = time.monotonic() + TIMEOUT
                while got != want and time.monotonic() < deadline:
                    batches = await consumer.getmany(timeout_ms=200)
                    for tp, messages in batches.items():
                        got[tp.partition] += [m.value for m in messages]
                assert got == want
                if phase < len(changes):
                    await asyncio.to_thread(changes[phase][1])
        finally:
            await producer.stop()
            await consumer.stop()

    asyncio.run(run())
    ends = [
        b.call(lambda p=p: b.broker.cluster.partition(TOPIC, p).log.log_end)
        for p in range(PARTITIONS)
    ]
    assert ends == [PER_PHASE * 5] * PARTITIONS


def test_confluent_kafka_idempotent_producer_across_a_node_restart(cluster):
    ck = pytest.importorskip("confluent_kafka")
    b = cluster
    producer = ck.Producer(
        {
            "bootstrap.servers": b.bootstrap_servers,
            "enable.idempotence": True,
            "linger.ms": 1,
            "retry.backoff.ms": 50,
            "reconnect.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    errors = []

    def delivered(err, msg):
        if err is not None:
            errors.append(err)

    changes = phases(b)
    for phase in range(len(changes) + 1):
        for i in range(PER_PHASE):
            for p in range(PARTITIONS):
                producer.produce(
                    TOPIC, sent_values(phase, p)[i], partition=p, on_delivery=delivered
                )
        assert producer.flush(TIMEOUT) == 0
        if phase < len(changes):
            changes[phase][1]()
    assert errors == []
    consumer = ck.Consumer(
        {"bootstrap.servers": b.bootstrap_servers, "group.id": "check", "enable.auto.commit": False}
    )
    try:
        consumer.assign([ck.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        want = expected(len(changes) + 1)
        got = {p: [] for p in range(PARTITIONS)}
        deadline = time.monotonic() + TIMEOUT
        while got != want and time.monotonic() < deadline:
            for m in consumer.consume(500, 0.2):
                if m.error() is None:
                    got[m.partition()].append(m.value())
        assert got == want
    finally:
        consumer.close()


def test_a_group_consumer_follows_its_coordinator_when_the_node_stops(cluster):
    kafka = pytest.importorskip("kafka")
    b = cluster
    group = "followers"
    producer = kafka.KafkaProducer(bootstrap_servers=b.bootstrap_servers, acks="all")
    consumer = kafka.KafkaConsumer(
        TOPIC,
        bootstrap_servers=b.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        reconnect_backoff_ms=50,
        retry_backoff_ms=50,
        fetch_max_wait_ms=100,
        session_timeout_ms=10000,
        heartbeat_interval_ms=500,
    )
    got = []

    def produce_and_consume(phase):
        for p in range(PARTITIONS):
            for v in sent_values(phase, p):
                producer.send(TOPIC, v, partition=p)
        producer.flush(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while len(got) < PER_PHASE * PARTITIONS * (phase + 1) and time.monotonic() < deadline:
            for messages in consumer.poll(200).values():
                got.extend(m.value for m in messages)
        consumer.commit()

    try:
        produce_and_consume(0)
        coordinator = b.call(lambda: b.broker.cluster.coordinator(group))
        b.stop_node(coordinator)
        produce_and_consume(1)
        moved = b.call(lambda: b.broker.cluster.coordinator(group))
        assert moved != coordinator
        committed = {p: consumer.committed(kafka.TopicPartition(TOPIC, p)) for p in range(3)}
    finally:
        producer.close(TIMEOUT)
        consumer.close()
    assert sorted(got) == sorted(v for ph in (0, 1) for p in range(3) for v in sent_values(ph, p))
    assert committed == {p: 2 * PER_PHASE for p in range(PARTITIONS)}


def test_kafka_python_transactions_on_three_nodes(cluster):
    kafka = pytest.importorskip("kafka")
    b = cluster
    producer = kafka.KafkaProducer(
        bootstrap_servers=b.bootstrap_servers, transactional_id="three-nodes"
    )
    try:
        producer.init_transactions()
        producer.begin_transaction()
        for p in range(PARTITIONS):
            producer.send(TOPIC, b"kept", partition=p)
        producer.commit_transaction()
        producer.begin_transaction()
        producer.send(TOPIC, b"dropped", partition=0)
        producer.abort_transaction()
    finally:
        producer.close(TIMEOUT)
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=b.bootstrap_servers,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
        consumer_timeout_ms=3000,
    )
    try:
        consumer.assign([kafka.TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        got = sorted(m.value for m in consumer)
    finally:
        consumer.close()
    assert got == [b"kept"] * PARTITIONS

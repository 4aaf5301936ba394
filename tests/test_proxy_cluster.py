"""The proxy in front of a 3-broker cluster (tests/cluster.py: fastkwire's broker with three
nodes, leaders spread over them): kafka-python and confluent-kafka produce to and fetch from every
partition's leader through the proxy's listener for that broker, and every connection the
cluster sees is one of the proxy's own."""

import re
import socket
import time

import pytest

from fastkwire.proxy import BackgroundProxy

from broker import create_topics
from cluster import NODES, Cluster

PARTITIONS = 6
RECORDS_PER_PARTITION = 3
TIMEOUT = 30


def _free_range(count):
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            start = s.getsockname()[1]
        if start + count > 65535:
            continue
        try:
            held = [socket.create_server(("127.0.0.1", start + i)) for i in range(count)]
        except OSError:
            continue
        for h in held:
            h.close()
        return f"{start}-{start + count - 1}"
    pytest.skip("no run of free ports")


@pytest.fixture
def cluster():
    c = Cluster()
    yield c
    c.close()
    assert not c.errors, c.errors


def upstream_peers(proxy):
    """The local addresses of the proxy's connections to brokers, from its events."""
    found = set()
    for e in proxy.events():
        m = re.match(r"upstream \S+ connected from (\S+):(\d+)", e.text)
        if m:
            found.add((m.group(1), int(m.group(2))))
    return found


def check_leaders_and_peers(cluster, proxy, topic):
    for p in range(PARTITIONS):
        leader = cluster.leader_of(topic, p)
        assert (topic, p) in cluster.produced[leader], (p, cluster.produced)
        assert (topic, p) in cluster.fetched[leader], (p, cluster.fetched)
        for other in NODES:
            if other != leader:
                assert (topic, p) not in cluster.produced[other], (p, other)
                assert (topic, p) not in cluster.fetched[other], (p, other)
    peers = upstream_peers(proxy)
    for node in NODES:
        assert cluster.peers[node], f"node {node} saw no connection"
        bypass = [p for p in cluster.peers[node] if p not in peers]
        assert not bypass, f"node {node}: connections not from the proxy: {bypass}"
    # Each broker's exchanges name it.
    brokers = {e.broker for e in proxy.exchanges()}
    assert {f"127.0.0.1:{cluster.ports[n]}" for n in NODES} <= brokers


def create_topic(bootstrap, topic):
    create_topics(bootstrap, [topic], partitions=PARTITIONS, timeout=TIMEOUT)


def test_confluent_kafka_reaches_every_leader_through_the_proxy(cluster):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    topic = f"cluster-confluent-{time.monotonic_ns()}"
    with BackgroundProxy(cluster.bootstrap, broker_ports=_free_range(4)) as proxy:
        create_topic(proxy.bootstrap, topic)
        producer = confluent_kafka.Producer({"bootstrap.servers": proxy.bootstrap})
        for p in range(PARTITIONS):
            for i in range(RECORDS_PER_PARTITION):
                producer.produce(topic, value=f"{p}-{i}".encode(), partition=p)
        assert producer.flush(TIMEOUT) == 0
        consumer = confluent_kafka.Consumer(
            {
                "bootstrap.servers": proxy.bootstrap,
                "group.id": "unused",
                "enable.auto.commit": False,
            }
        )
        try:
            consumer.assign(
                [
                    confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
                    for p in range(PARTITIONS)
                ]
            )
            got = set()
            deadline = time.monotonic() + TIMEOUT
            while len(got) < PARTITIONS * RECORDS_PER_PARTITION and time.monotonic() < deadline:
                msg = consumer.poll(0.5)
                if msg is not None and msg.error() is None:
                    got.add((msg.partition(), msg.value().decode()))
        finally:
            consumer.close()
        assert got == {
            (p, f"{p}-{i}") for p in range(PARTITIONS) for i in range(RECORDS_PER_PARTITION)
        }
        check_leaders_and_peers(cluster, proxy, topic)


def test_kafka_python_reaches_every_leader_through_the_proxy(cluster):
    kafka = pytest.importorskip("kafka")
    topic = f"cluster-kafka-python-{time.monotonic_ns()}"
    with BackgroundProxy(cluster.bootstrap, broker_ports=_free_range(4)) as proxy:
        create_topic(proxy.bootstrap, topic)
        producer = kafka.KafkaProducer(bootstrap_servers=proxy.bootstrap)
        try:
            for p in range(PARTITIONS):
                for i in range(RECORDS_PER_PARTITION):
                    producer.send(topic, value=f"{p}-{i}".encode(), partition=p)
            producer.flush(TIMEOUT)
        finally:
            producer.close(TIMEOUT)
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=proxy.bootstrap, enable_auto_commit=False, consumer_timeout_ms=2000
        )
        try:
            parts = [kafka.TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(parts)
            consumer.seek_to_beginning(*parts)
            got = set()
            deadline = time.monotonic() + TIMEOUT
            while len(got) < PARTITIONS * RECORDS_PER_PARTITION and time.monotonic() < deadline:
                for tp, records in consumer.poll(500).items():
                    got.update((tp.partition, r.value.decode()) for r in records)
        finally:
            consumer.close()
        assert got == {
            (p, f"{p}-{i}") for p in range(PARTITIONS) for i in range(RECORDS_PER_PARTITION)
        }
        check_leaders_and_peers(cluster, proxy, topic)


def test_without_the_mapping_clients_go_around_the_proxy(cluster):
    """The check above can fail: with the proxy only forwarding, the cluster's own
    addresses reach the client, which connects to the brokers directly."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient

    with BackgroundProxy(cluster.bootstrap) as proxy:
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.list_topics(timeout=TIMEOUT)
        producer = confluent_kafka.Producer({"bootstrap.servers": proxy.bootstrap})
        producer.list_topics(timeout=TIMEOUT)
        producer.produce("cluster-bypass", value=b"x", partition=0)
        producer.flush(TIMEOUT)
        peers = upstream_peers(proxy)
        bypass = [p for n in NODES for p in cluster.peers[n] if p not in peers]
        assert bypass


def test_a_broker_without_a_port_is_reached_by_no_client(cluster):
    """Three brokers behind two ports: the third is told as a port where nothing listens.
    confluent-kafka and kafka-python produce to the two others' partitions through the
    proxy, fail only the third one's, and never connect to the third broker."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    kafka = pytest.importorskip("kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"cluster-closed-{time.monotonic_ns()}"
    with BackgroundProxy(cluster.bootstrap, broker_ports=_free_range(2)) as proxy:
        # librdkafka's admin client: kafka-python's gives up when the node it picks at
        # random cannot be reached, as it would with any broker that is down.
        admin = AdminClient({"bootstrap.servers": proxy.bootstrap})
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(TIMEOUT)
        delivered = {}
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": proxy.bootstrap, "message.timeout.ms": 5000}
        )
        led = {cluster.leader_of(topic, p): p for p in range(PARTITIONS)}
        assert sorted(led) == list(NODES)  # 6 partitions spread over the 3 nodes
        for p in led.values():
            producer.produce(
                topic,
                value=b"c",
                partition=p,
                on_delivery=lambda err, msg: delivered.setdefault(msg.partition(), err),
            )
        producer.flush(TIMEOUT)
        first, second, third = (led[n] for n in NODES)  # the last node gets no port
        assert delivered[first] is None and delivered[second] is None, delivered
        assert delivered[third] is not None  # timed out: its leader cannot be reached
        kp = kafka.KafkaProducer(
            bootstrap_servers=proxy.bootstrap, delivery_timeout_ms=4000, request_timeout_ms=3000
        )
        try:
            kp.send(topic, b"k", partition=first).get(TIMEOUT)
            kp.send(topic, b"k", partition=second).get(TIMEOUT)
            with pytest.raises(kafka.errors.KafkaTimeoutError):
                kp.send(topic, b"k", partition=third).get(TIMEOUT)  # expires after 4 s
            kp.send(topic, b"k", partition=first).get(TIMEOUT)  # still working
        finally:
            kp.close(TIMEOUT)
        last = NODES[-1]
        assert (topic, third) not in cluster.produced[last]
        peers = upstream_peers(proxy)
        assert all(p in peers for p in cluster.peers[last]), "a client reached a node directly"
        third = f"127.0.0.1:{cluster.ports[last]}"
        assert any(
            e.text.startswith(f"broker {third} has no listener: no free port left")
            for e in proxy.events()
        )
        assert third not in proxy.proxy.brokers

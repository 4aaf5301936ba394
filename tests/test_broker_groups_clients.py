"""Consumer groups through fastkwire.testing.Broker with real clients: kafka-python and
aiokafka (classic groups), confluent-kafka (classic and KIP-848), committed offsets a new
member resumes from, and the KIP-345 path end to end: two kafka-python consumers with
group_instance_id, one gone without leaving, `fastkwire describe-group` showing both, and
`fastkwire remove-members --instance-id` handing the survivor every partition long before
the session timeout."""

import asyncio
import contextlib
import io
import json
import threading
import time

import pytest

from fastkwire.testing import Broker

# The group coordinator (fastkwire/broker/_groups.py) serves these flows.
pytest.importorskip("fastkwire.broker._groups", reason="no group coordinator in this tree")

TIMEOUT = 30.0
PARTITIONS = 4


@pytest.fixture(scope="module")
def broker():
    with Broker(num_partitions=PARTITIONS) as b:
        yield b


def produce(broker, topic, n):
    kafka = pytest.importorskip("kafka")
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, linger_ms=5)
    try:
        for i in range(n):
            producer.send(topic, b"%d" % i, partition=i % PARTITIONS)
        producer.flush(TIMEOUT)
    finally:
        producer.close(TIMEOUT)


class Polling:
    """A kafka-python consumer polled by its own thread, recording what it gets."""

    def __init__(self, **config):
        kafka = pytest.importorskip("kafka")
        self.consumer = kafka.KafkaConsumer(**config)
        self.values = []
        self.assigned = set()
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self, *topics):
        self.consumer.subscribe(list(topics))
        self.thread.start()
        return self

    def _run(self):
        while not self.stop.is_set():
            got = self.consumer.poll(timeout_ms=1000)
            with self.lock:
                for msgs in got.values():
                    self.values += [m.value for m in msgs]
                self.assigned = {tp.partition for tp in self.consumer.assignment()}

    def halt(self, close=True):
        self.stop.set()
        self.thread.join(TIMEOUT)
        if close:
            self.consumer.close(autocommit=False)


def wait_for(condition, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_kafka_python_group_shares_partitions_and_resumes_from_commits(broker):
    topic = "kp-group"
    produce(broker, topic, 40)
    config = dict(
        bootstrap_servers=broker.bootstrap_servers,
        group_id="kp",
        auto_offset_reset="earliest",
        enable_auto_commit=True,
        auto_commit_interval_ms=100,
    )
    a = Polling(**config).start(topic)
    b = Polling(**config).start(topic)
    try:
        assert wait_for(lambda: len(a.values) + len(b.values) == 40)
        assert wait_for(lambda: a.assigned and b.assigned and not a.assigned & b.assigned)
        assert sorted(a.values + b.values, key=int) == [b"%d" % i for i in range(40)]
    finally:
        a.halt()
        b.halt()
    produce(broker, topic, 8)  # 0-7 again, after the committed offsets
    c = Polling(**config).start(topic)
    try:
        assert wait_for(lambda: len(c.values) >= 8)
        time.sleep(0.3)
        assert sorted(c.values, key=int) == [b"%d" % i for i in range(8)]
    finally:
        c.halt()


def test_aiokafka_group(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "ak-group"
    produce(broker, topic, 20)

    async def run():
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=broker.bootstrap_servers,
            group_id="ak",
            auto_offset_reset="earliest",
        )
        await consumer.start()
        got = []
        try:
            while len(got) < 20:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
            await consumer.commit()
            tp = aiokafka.TopicPartition(topic, 0)
            assert await consumer.committed(tp) == 5
        finally:
            await consumer.stop()
        return got

    got = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    assert sorted(got, key=int) == [b"%d" % i for i in range(20)]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_group(broker, protocol):
    ck = pytest.importorskip("confluent_kafka")
    topic = f"ck-group-{protocol}"
    produce(broker, topic, 20)
    config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": f"ck-{protocol}",
        "auto.offset.reset": "earliest",
        "group.protocol": protocol,
    }
    if protocol == "classic":
        config["session.timeout.ms"] = 6000
    consumer = ck.Consumer(config)
    got = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 20 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        consumer.commit(asynchronous=False)
        committed = consumer.committed([ck.TopicPartition(topic, p) for p in range(PARTITIONS)])
    finally:
        consumer.close()
    assert sorted(got, key=int) == [b"%d" % i for i in range(20)]
    assert [tp.offset for tp in committed] == [5] * PARTITIONS


def cli(*argv):
    from fastkwire import cli as _cli

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = _cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def test_a_static_member_gone_without_leaving_is_removed_by_instance_id(broker):
    topic = "mission"
    produce(broker, topic, 4)
    config = dict(
        bootstrap_servers=broker.bootstrap_servers,
        group_id="mission",
        auto_offset_reset="earliest",
        session_timeout_ms=60_000,  # the survivor must not wait for this
        heartbeat_interval_ms=1000,
    )
    survivor = Polling(group_instance_id="host-a", **config).start(topic)
    gone = Polling(group_instance_id="host-b", **config).start(topic)
    try:
        assert wait_for(lambda: len(survivor.assigned) == 2 and len(gone.assigned) == 2)
        gone.halt()  # a static member's close sends no LeaveGroup: as if it was killed
        server = broker.bootstrap_servers
        code, out, err = cli(
            "describe-group", "--bootstrap-server", server, "--group", "mission", "--json"
        )
        assert code == 0, err
        described = json.loads(out)
        text = json.dumps(described)
        assert "host-a" in text and "host-b" in text
        removed_at = time.monotonic()
        code, out, err = cli(
            "remove-members",
            "--bootstrap-server",
            server,
            "--group",
            "mission",
            "--instance-id",
            "host-b",
        )
        assert code == 0, out + err
        assert wait_for(lambda: survivor.assigned == set(range(PARTITIONS)), timeout=20)
        took = time.monotonic() - removed_at
        assert took < 20, took  # far inside the 60 s session timeout
        print(f"the survivor held every partition {took:.2f} s after the removal")
    finally:
        survivor.halt()
        if gone.thread.is_alive():
            gone.halt()

"""Consumer groups through fastkwire.testing.Broker with real clients: kafka-python and
aiokafka (classic groups), confluent-kafka (classic and KIP-848, and a rebalance when a
second member joins), committed offsets a new member resumes from, and the KIP-345 path end
to end: two static members (kafka-python, aiokafka or confluent-kafka), one killed with
SIGKILL, `fastkwire describe-group` (the command, a process) showing both, and `fastkwire
remove-members --instance-id` handing the survivor every partition long before the session
timeout."""

import asyncio
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from fastkwire.broker import GroupConfig
from fastkwire.testing import Broker

# The group coordinator (fastkwire/broker/_groups.py) serves these flows.
pytest.importorskip("fastkwire.broker._groups", reason="no group coordinator in this tree")

TIMEOUT = 30.0
PARTITIONS = 4


@pytest.fixture(scope="module")
def broker():
    # KIP-848 members heartbeat every 0.5 s here (Kafka: 5 s), as the classic ones are set to.
    groups = GroupConfig(group_consumer_heartbeat_interval_ms=500)
    with Broker(num_partitions=PARTITIONS, groups=groups) as b:
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


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_confluent_group_rebalances_when_a_second_member_joins(broker, protocol):
    """A confluent-kafka member of either protocol consumes and commits alone; a second one
    joins and the partitions are shared (eagerly by the classic range assignor, incrementally
    by KIP-848's); what is written next is read once, each record by its partition's owner,
    and the second member resumes from the first one's commits."""
    ck = pytest.importorskip("confluent_kafka")
    topic = group = f"ck-rebalance-{protocol}"
    produce(broker, topic, 40)
    config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "group.protocol": protocol,
    }
    first = ck.Consumer(config)
    second = None
    try:
        first.subscribe([topic])
        got = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 40 and time.monotonic() < deadline:
            m = first.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
        assert sorted(got, key=int) == [b"%d" % i for i in range(40)]
        assert {tp.partition for tp in first.assignment()} == set(range(PARTITIONS))
        first.commit(asynchronous=False)

        second = ck.Consumer(config)
        second.subscribe([topic])
        members = (first, second)
        records = {first: [], second: []}

        def poll_both():
            for c in members:
                m = c.poll(0.1)
                if m is not None and m.error() is None:
                    records[c].append((m.partition(), m.value()))

        def shared():
            held = [{tp.partition for tp in c.assignment()} for c in members]
            return (
                all(held) and not held[0] & held[1] and held[0] | held[1] == set(range(PARTITIONS))
            )

        deadline = time.monotonic() + TIMEOUT
        while not shared() and time.monotonic() < deadline:
            poll_both()
        assert shared(), [c.assignment() for c in members]
        assert records == {first: [], second: []}  # nothing read twice across the handover

        produce(broker, topic, 40)  # 0-39 again, after the committed offsets
        deadline = time.monotonic() + TIMEOUT
        while len(records[first]) + len(records[second]) < 40 and time.monotonic() < deadline:
            poll_both()
        time.sleep(0.3)
        poll_both()
        for c in members:
            owned = {tp.partition for tp in c.assignment()}
            assert records[c] and {p for p, _ in records[c]} <= owned
        values = [v for c in members for _, v in records[c]]
        assert sorted(values, key=int) == [b"%d" % i for i in range(40)]
        for c in members:
            c.commit(asynchronous=False)
        tps = [ck.TopicPartition(topic, p) for p in range(PARTITIONS)]
        assert [tp.offset for tp in second.committed(tps, timeout=TIMEOUT)] == [20] * PARTITIONS
    finally:
        first.close()
        if second is not None:
            second.close()


MEMBER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "group_member.py")
MISSION_SESSION_TIMEOUT_MS = 60_000  # the survivor must not wait for it
MISSION_HANDOVER_S = 10.0  # "within seconds": far inside the session timeout
MISSION_CLIENTS = {
    "kafka-python": "kafka",
    "aiokafka": "aiokafka",
    "confluent-kafka": "confluent_kafka",
    "confluent-kafka-848": "confluent_kafka",  # KIP-848 members, removed by LeaveGroup too
}


def child_env():
    return dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))


class Member:
    """tests/group_member.py in a process of its own: a static member that can be killed."""

    def __init__(self, client, broker, group, topic, instance_id):
        self.instance_id = instance_id
        self.assigned = None  # the partitions it last reported
        self.changes = []  # (monotonic time, partitions) per report
        self.log = tempfile.TemporaryFile("w+")  # its stderr: a pipe could fill and stall it
        self.proc = subprocess.Popen(
            [sys.executable, MEMBER_SCRIPT, client, broker.bootstrap_servers, group, topic]
            + [instance_id, str(MISSION_SESSION_TIMEOUT_MS)],
            stdout=subprocess.PIPE,
            stderr=self.log,
            stdin=subprocess.DEVNULL,
            text=True,
            env=child_env(),
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            partitions = set(json.loads(line)["assigned"])
            self.changes.append((time.monotonic(), partitions))
            self.assigned = partitions

    def stderr(self):
        self.log.seek(0)
        return self.log.read()[-3000:]

    def kill(self):
        """SIGKILL: no LeaveGroup, no close, as a crash. Returns what it wrote to stderr."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(TIMEOUT)
        self.reader.join(TIMEOUT)
        self.log.seek(0)
        return self.log.read()

    def close(self):
        self.kill()
        self.proc.stdout.close()
        self.log.close()


def cli(*argv):
    """The fastkwire command as users run it: a process of its own."""
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        env=child_env(),
    )
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize("client", list(MISSION_CLIENTS))
def test_a_static_member_killed_without_leaving_is_removed_by_instance_id(broker, client):
    """The mission's path: two static members, one killed with SIGKILL; describe-group shows
    both instance ids, remove-members --instance-id takes the dead one out, and the survivor
    holds every partition within seconds of it, not after the 60 s session timeout."""
    pytest.importorskip(MISSION_CLIENTS[client])
    group = topic = f"mission-{client}"
    broker.create_topic(topic, partitions=PARTITIONS)
    server = broker.bootstrap_servers
    survivor = Member(client, broker, group, topic, "host-a")
    gone = None
    try:
        # One after the other: kafka-python 3.0.12 drops the assignment of a leader whose
        # rejoin outlives a poll's timeout (its join task completes after need_rejoin() has
        # turned false), which two members starting at once make likely on a busy machine.
        every = set(range(PARTITIONS))
        assert wait_for(lambda: survivor.assigned == every), (survivor.changes, survivor.stderr())
        gone = Member(client, broker, group, topic, "host-b")
        halves = lambda: (  # noqa: E731
            survivor.assigned
            and gone.assigned
            and len(survivor.assigned | gone.assigned) == PARTITIONS
            and not survivor.assigned & gone.assigned
        )
        assert wait_for(halves), (survivor.changes, gone.changes, survivor.stderr(), gone.stderr())
        errors = gone.kill()
        assert "Traceback" not in errors, errors

        code, out, err = cli(
            "describe-group", "--bootstrap-server", server, "--group", group, "--json"
        )
        assert code == 0, err
        described = json.loads(out)
        assert described["state"] == "Stable"
        assert sorted(m["group_instance_id"] for m in described["members"]) == ["host-a", "host-b"]
        dead = next(m for m in described["members"] if m["group_instance_id"] == "host-b")
        assert sorted(dead["assignment"][topic]) == sorted(gone.assigned)

        removed_at = time.monotonic()
        code, out, err = cli(
            "remove-members",
            "--bootstrap-server",
            server,
            "--group",
            group,
            "--instance-id",
            "host-b",
        )
        assert code == 0, out + err
        assert "1 of 1 members removed." in out

        assert wait_for(lambda: survivor.assigned == every, timeout=MISSION_HANDOVER_S), (
            f"the survivor holds {survivor.assigned} {MISSION_HANDOVER_S} s after the removal"
        )
        took = time.monotonic() - removed_at
        print(f"{client}: the survivor held every partition {took:.2f} s after the removal")

        code, out, err = cli(
            "describe-group", "--bootstrap-server", server, "--group", group, "--json"
        )
        assert code == 0, err
        members = json.loads(out)["members"]
        assert [(m["group_instance_id"], sorted(m["assignment"][topic])) for m in members] == [
            ("host-a", sorted(every))
        ]
    finally:
        if gone is not None:
            gone.close()
        survivor.close()

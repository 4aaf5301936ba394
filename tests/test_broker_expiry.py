"""Producer state expiry as Kafka 4.0's: producer.id.expiration.ms forgets a partition's
idle producers (their next batch may start at any sequence: no UNKNOWN_PRODUCER_ID), and
transactional.id.expiration.ms forgets idle transactional ids (a new producer id next);
each checked on the broker's timers, driven here by fake clocks."""

import time

import pytest

import fastkwire
from fastkwire import records
from fastkwire.broker import Apis, Cluster, Context
from fastkwire.error_codes import by_name
from fastkwire.records import Record
from fastkwire.testing import Broker

DAY_MS = 86_400_000
TIMEOUT = 20


def code(name):
    return by_name(name).code


class Clocks:
    def __init__(self):
        self.now = 1000.0  # seconds, both clocks

    def advance(self, ms):
        self.now += ms / 1000


@pytest.fixture
def clocks():
    return Clocks()


def make_apis(clocks, **expiry):
    cluster = Cluster({0: ("127.0.0.1", 9092)})
    cluster.create_topic("t")
    return Apis(
        cluster, clock=lambda: clocks.now, wall_clock=lambda: clocks.now, expiry=expiry or None
    )


def call(apis, request, version):
    out = []
    apis.handle(type(request).API_KEY, version, request, Context(0), out.append)
    return out[0]


def produce(apis, pid, seq, timestamp_ms, n=2, epoch=0, transactional=False, tid=None):
    data = records.write_batch(
        [Record(timestamp=timestamp_ms, value=b"v") for _ in range(n)],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=transactional,
    )
    P = fastkwire.ProduceRequest
    request = P(
        transactional_id=tid,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="t", partition_data=[P.PartitionProduceData(index=0, records=data)]
            )
        ],
    )
    p = call(apis, request, 9).responses[0].partition_responses[0]
    return p.error_code, p.base_offset


def test_a_new_producer_may_start_at_any_sequence(clocks):
    """Kafka 4 accepts a producer the partition does not know at any sequence (its state
    may have expired, or its batches been deleted); a known one must follow on."""
    apis = make_apis(clocks)
    assert produce(apis, 4000, 5, 1) == (0, 0)
    assert produce(apis, 4000, 9, 1)[0] == code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    assert produce(apis, 4000, 7, 1) == (0, 2)


def test_idle_producers_are_forgotten_after_producer_id_expiration_ms(clocks):
    apis = make_apis(
        clocks, producer_id_expiration_ms=60_000, producer_id_expiration_check_interval_ms=1000
    )
    now_ms = int(clocks.now * 1000)
    assert produce(apis, 4000, 0, now_ms) == (0, 0)
    assert produce(apis, 4001, 0, now_ms - 59_000) == (0, 2)  # an older timestamp
    producers = apis.cluster.partition("t", 0).producers
    clocks.advance(1000)
    apis.expiry.tick()
    assert 4000 in producers and 4001 not in producers  # its last batch is 60 s old
    assert produce(apis, 4000, 0, now_ms) == (0, 0)  # still known: a duplicate
    assert produce(apis, 4000, 5, now_ms)[0] == code("OUT_OF_ORDER_SEQUENCE_NUMBER")
    clocks.advance(58_000)
    assert apis.expiry.tick() is not None
    assert 4000 in producers  # 59 s idle
    clocks.advance(1000)
    apis.expiry.tick()
    assert 4000 not in producers
    assert produce(apis, 4000, 0, now_ms) == (0, 4)  # no longer a duplicate: written again


def test_producers_are_looked_at_every_check_interval(clocks):
    apis = make_apis(
        clocks, producer_id_expiration_ms=1000, producer_id_expiration_check_interval_ms=10_000
    )
    assert produce(apis, 4000, 0, int(clocks.now * 1000)) == (0, 0)
    producers = apis.cluster.partition("t", 0).producers
    clocks.advance(5000)
    assert apis.expiry.tick() == pytest.approx(clocks.now + 5)  # the next check's deadline
    assert 4000 in producers  # idle long enough, but not looked at yet
    clocks.advance(5000)
    apis.expiry.tick()
    assert 4000 not in producers


def test_a_producer_with_a_transaction_open_is_kept(clocks):
    apis = make_apis(
        clocks, producer_id_expiration_ms=1000, producer_id_expiration_check_interval_ms=1000
    )
    init = fastkwire.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=900_000)
    r = call(apis, init, 4)
    pid = r.producer_id
    A = fastkwire.AddPartitionsToTxnRequest
    add = A(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name="t", partitions=[0])],
    )
    call(apis, add, 3)
    assert produce(apis, pid, 0, 0, transactional=True, tid="tx") == (0, 0)
    clocks.advance(5000)
    apis.expiry.tick()
    assert pid in apis.cluster.partition("t", 0).producers


def test_idle_transactional_ids_are_forgotten_after_their_expiration(clocks):
    apis = make_apis(
        clocks,
        transactional_id_expiration_ms=10_000,
        transactional_id_cleanup_interval_ms=1000,
    )
    init = fastkwire.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=900_000)
    first = call(apis, init, 4)
    assert (first.error_code, first.producer_epoch) == (0, 0)
    clocks.advance(9000)
    apis.expiry.tick()
    again = call(apis, init, 4)  # used again: its 10 s start over
    assert (again.producer_id, again.producer_epoch) == (first.producer_id, 1)
    clocks.advance(9000)
    apis.expiry.tick()
    assert "tx" in apis.transactions.transactions
    clocks.advance(1000)
    apis.expiry.tick()
    assert "tx" not in apis.transactions.transactions
    new = call(apis, init, 4)
    assert new.error_code == 0 and new.producer_id != first.producer_id
    assert new.producer_epoch == 0


def test_settings_are_checked_and_shown_as_broker_configs():
    with pytest.raises(ValueError, match="producer_id_expiration_ms"):
        Broker(producer_id_expiration_ms=0)
    with pytest.raises(ValueError, match="transactional_id_expiration_ms"):
        fastkwire.broker.Broker(transactional_id_expiration_ms=-1)


def test_kafka_python_gets_a_new_producer_id_once_its_transactional_id_expired():
    """Through the broker's own timers, with short timings: the ids last 300 ms, looked at
    every 50 ms."""
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    with Broker(
        transactional_id_expiration_ms=300, transactional_id_cleanup_interval_ms=50
    ) as broker:
        broker.create_topic("t")

        def producer_id():
            p = kafka.KafkaProducer(
                bootstrap_servers=broker.bootstrap_servers, transactional_id="expiring"
            )
            try:
                p.init_transactions()
                p.begin_transaction()
                p.send("t", b"v", partition=0)
                p.commit_transaction()
                return p._transaction_manager.producer_id_and_epoch.producer_id
            finally:
                p.close(timeout=5)

        first = producer_id()
        transactions = broker.broker.apis.transactions.transactions

        def known():  # read on the broker's thread
            return broker.call(lambda: "expiring" in transactions)

        wait = time.monotonic() + TIMEOUT
        while known() and time.monotonic() < wait:
            time.sleep(0.02)
        assert not known()
        assert producer_id() != first
        admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
        try:
            configs = admin.describe_configs(
                [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="static"
            )["broker"]["0"]
        finally:
            admin.close()
        assert configs["transactional.id.expiration.ms"]["value"] == "300"
        assert "producer.id.expiration.ms" not in configs  # Kafka's default


def test_producer_id_expiration_ms_changed_at_run_time_applies_to_the_leaders_partitions(
    clocks,
):
    apis = make_apis(clocks, producer_id_expiration_check_interval_ms=1000)
    assert produce(apis, 4000, 0, int(clocks.now * 1000)) == (0, 0)
    producers = apis.cluster.partition("t", 0).producers
    I = fastkwire.IncrementalAlterConfigsRequest  # noqa: E741
    request = I(
        resources=[
            I.AlterConfigsResource(
                resource_type=4,
                resource_name="0",
                configs=[
                    I.AlterableConfig(
                        name="producer.id.expiration.ms", config_operation=0, value="1500"
                    )
                ],
            )
        ]
    )
    assert call(apis, request, 1).responses[0].error_code == 0
    clocks.advance(1000)
    apis.expiry.tick()
    assert 4000 in producers  # a second idle
    clocks.advance(1000)
    apis.expiry.tick()
    assert 4000 not in producers  # past the 1.5 s now in force, not Kafka's default day


def test_a_restart_keeps_how_long_a_transactional_id_has_been_idle(tmp_path):
    """transactional.id.expiration.ms counts from the transactional id's last change as its
    record keeps it (Kafka's txnLastUpdateTimestamp), not from the restart: a broker
    restarted more often than that had kept every idle id, up to max_transactional_ids."""
    from fastkwire.broker._coordinator_state import CoordinatorState
    from fastkwire.broker._disk_logs import DiskLogs
    from fastkwire.broker._groups import GroupCoordinator
    from fastkwire.broker._transactions import TransactionCoordinator

    wall = Clocks()

    def start(clock):
        storage = DiskLogs(str(tmp_path))
        cluster = Cluster({0: ("127.0.0.1", 9092)}, cluster_id=storage.cluster_id())
        storage.attach(cluster, settle=False)
        groups = GroupCoordinator(clock=clock, topic_partitions=cluster.partition_count)
        txns = TransactionCoordinator(cluster, clock)
        CoordinatorState(storage, cluster, groups, txns, wall_clock=lambda: wall.now).load()
        return storage, txns

    storage, txns = start(lambda: wall.now)
    assert txns.init("tx", 60_000)[2] is None
    storage.close()
    wall.advance(9000)
    process = Clocks()  # another process: its monotonic clock starts elsewhere
    process.now = 5.0
    storage, txns = start(lambda: process.now)
    try:
        assert "tx" in txns.transactions
        assert txns.forget_idle(10_000) == 0  # idle 9 s of its 10
        process.advance(1000)
        assert txns.forget_idle(10_000) == 1
    finally:
        storage.close()

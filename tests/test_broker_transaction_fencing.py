"""InitProducerId for a transactional id whose last producer left a transaction open, as
Kafka 4.0's coordinator answers it: the epoch is bumped (fencing that producer), the
transaction aborted with its markers at the fenced epoch, and the caller answered
CONCURRENT_TRANSACTIONS; its retry bumps the epoch again. The clients retry by themselves
and end up two epochs past the producer they fenced."""

import asyncio

import pytest

from fastkwire.testing import Broker

TIMEOUT = 20


@pytest.fixture(scope="module")
def broker():
    with Broker() as broker:
        yield broker


def _abort_marker_epoch(broker, topic):
    """The producer epoch of the last control batch in `topic` partition 0, as a Fetch of
    the log's bytes would carry it."""
    from fastkwire import records

    log = broker.broker.cluster.partition(topic, 0).log
    batches = records.read_batches(log.read(0, 1 << 30))
    return [b.producer_epoch for b in batches if b.is_control][-1]


def test_kafka_python_retries_until_the_open_transaction_is_aborted(broker):
    kafka = pytest.importorskip("kafka")
    topic = "kp-fence"
    broker.create_topic(topic)
    inits = broker.add_fault(api="InitProducerId", delay_ms=0)  # counts, changes nothing

    def producer():
        p = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, transactional_id="kp-fence"
        )
        p.init_transactions()
        return p

    old = producer()
    old_epoch = old._transaction_manager.producer_id_and_epoch.epoch
    old.begin_transaction()
    old.send(topic, b"zombie", partition=0).get(timeout=TIMEOUT)
    new = producer()
    try:
        assert new._transaction_manager.producer_id_and_epoch.epoch == old_epoch + 2
        assert inits.matched == 3  # the old's, then the new's CONCURRENT_TRANSACTIONS and retry
        assert _abort_marker_epoch(broker, topic) == old_epoch + 1
    finally:
        new.close(timeout=5)
        old.close(timeout=5)
        broker.clear_faults()


def test_aiokafka_retries_until_the_open_transaction_is_aborted(broker):
    aiokafka = pytest.importorskip("aiokafka")
    topic = "aio-fence"
    broker.create_topic(topic)

    async def run():
        old = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, transactional_id="aio-fence"
        )
        await old.start()
        new = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers, transactional_id="aio-fence"
        )
        try:
            await old.begin_transaction()
            await old.send_and_wait(topic, b"zombie", partition=0)
            old_epoch = old._txn_manager._pid_and_epoch.epoch
            await new.start()
            return old_epoch, new._txn_manager._pid_and_epoch.epoch
        finally:
            await new.stop()
            await old.stop()

    old_epoch, new_epoch = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    assert new_epoch == old_epoch + 2
    assert _abort_marker_epoch(broker, topic) == old_epoch + 1

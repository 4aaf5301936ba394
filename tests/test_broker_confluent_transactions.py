"""confluent-kafka (librdkafka) against fastkwire.testing.Broker with transactions: a
read_committed consumer does not see an open transaction's records until it commits, nor
an aborted one's ever; consume-transform-produce commits the group's offsets with the
transaction (and drops them with an abort); a second producer of the same transactional
id fences the first. Skips when confluent-kafka is not installed."""

import time

import pytest

from fastkwire.testing import Broker

ck = pytest.importorskip("confluent_kafka")

TIMEOUT = 20.0


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


def producer(broker, tid):
    p = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "transactional.id": tid,
            "linger.ms": 1,
        }
    )
    p.init_transactions(TIMEOUT)
    return p


def consumer(broker, group="unused", **extra):
    return ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": group,
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **extra,
        }
    )


def read(broker, topic, want=None, quiet=1.5):
    """A read_committed consumer's values of partition 0: until `want` arrived, or (want
    None) until nothing came for `quiet` seconds; bounded by TIMEOUT."""
    c = consumer(broker)
    got = []
    try:
        c.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        last = time.monotonic()
        while time.monotonic() < deadline:
            if want is not None and len(got) >= want:
                break
            if want is None and time.monotonic() - last > quiet:
                break
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append(m.value())
                last = time.monotonic()
        low, high = c.get_watermark_offsets(ck.TopicPartition(topic, 0), TIMEOUT)
    finally:
        c.close()
    return got, high


def test_read_committed_waits_for_the_open_transaction_and_skips_the_aborted(broker):
    topic = "ckt-open"
    p = producer(broker, "ckt-open")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, b"first-%d" % i, partition=0)
    p.commit_transaction(TIMEOUT)
    p.begin_transaction()
    p.produce(topic, b"aborted", partition=0)
    p.flush(TIMEOUT)
    p.abort_transaction(TIMEOUT)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, b"open-%d" % i, partition=0)
    p.flush(TIMEOUT)
    # The open transaction's records are written, but withheld from read_committed.
    assert read(broker, topic, quiet=1.0)[0] == [b"first-0", b"first-1", b"first-2"]
    p.commit_transaction(TIMEOUT)
    got, high = read(broker, topic, want=5)
    assert got == [b"first-0", b"first-1", b"first-2", b"open-0", b"open-1"]
    # 3 + marker + 1 aborted + marker + 2 + marker
    assert high == 9


def test_consume_transform_produce_commits_offsets_with_the_transaction(broker):
    source, sink, group = "ckt-in", "ckt-out", "ckt-eos"
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for i in range(6):
        plain.produce(source, b"%d" % i, partition=0)
    assert plain.flush(TIMEOUT) == 0
    p = producer(broker, "ckt-eos")
    c = consumer(broker, group)
    tp = ck.TopicPartition(source, 0)
    try:
        c.assign([ck.TopicPartition(source, 0, 0)])

        def transform(n, commit):
            got = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < n and time.monotonic() < deadline:
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    got.append(m)
            assert len(got) == n
            p.begin_transaction()
            for m in got:
                p.produce(sink, m.value() * 2, partition=0)
            p.send_offsets_to_transaction(c.position([tp]), c.consumer_group_metadata(), TIMEOUT)
            if commit:
                p.commit_transaction(TIMEOUT)
            else:
                p.abort_transaction(TIMEOUT)

        transform(3, commit=True)
        transform(3, commit=False)
        # The aborted transaction's offsets were dropped: the group stands at 3.
        committed = c.committed([tp], TIMEOUT)
    finally:
        c.close()
    assert committed[0].offset == 3
    assert read(broker, sink, want=3)[0] == [b"00", b"11", b"22"]


def test_a_new_producer_of_the_same_transactional_id_fences_the_old(broker):
    topic = "ckt-fence"
    old = producer(broker, "ckt-fence")
    old.begin_transaction()
    old.produce(topic, b"zombie", partition=0)
    old.flush(TIMEOUT)
    new = producer(broker, "ckt-fence")  # aborts the old one's open transaction
    new.begin_transaction()
    new.produce(topic, b"fresh", partition=0)
    new.commit_transaction(TIMEOUT)
    with pytest.raises(ck.KafkaException) as failed:
        old.commit_transaction(TIMEOUT)
    error = failed.value.args[0]
    assert error.fatal() or error.code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    ), error
    assert read(broker, topic, want=1)[0] == [b"fresh"]
    assert read(broker, topic, quiet=1.0)[0] == [b"fresh"]  # the zombie's record never shows

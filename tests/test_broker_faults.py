"""The proxy's fault rules applied by the broker (Broker(faults=...), add_fault, clear_faults):
real clients see the error, the disconnect, the delay, and recover as they would from Kafka."""

import socket
import struct
import time

import pytest

from fastkwire import (
    MetadataRequest,
    ProduceRequest,
    decode_response,
    encode_request,
)
from fastkwire.proxy import Rule
from fastkwire.testing import Broker

TIMEOUT = 20


@pytest.fixture
def broker():
    with Broker() as b:
        yield b


def roundtrip(sock, frames):
    sock.sendall(b"".join(frames))
    answers = []
    for _ in frames:
        size = struct.unpack(">i", recv_exactly(sock, 4))[0]
        answers.append(struct.pack(">i", size) + recv_exactly(sock, size))
    return answers


def recv_exactly(sock, n):
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def test_a_produce_disconnect_is_retried_and_deduplicated(broker):
    kafka = pytest.importorskip("kafka")
    rule = broker.add_fault(api="Produce", disconnect="after", times=1)
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True, retries=5
    )
    try:
        producer.send("dedup", b"once", partition=0).get(timeout=TIMEOUT)
    finally:
        producer.close()
    assert (rule.matched, rule.fired) == (2, 1)  # the first Produce was handled, not answered
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=2000,
    )
    try:
        consumer.assign([kafka.TopicPartition("dedup", 0)])
        assert [m.value for m in consumer] == [b"once"]  # the retry was a duplicate
    finally:
        consumer.close()


def test_an_error_answer_is_retried_by_the_producer(broker):
    kafka = pytest.importorskip("kafka")
    rule = broker.add_fault("api=InitProducerId,error=COORDINATOR_LOAD_IN_PROGRESS,times=2")
    producer = kafka.KafkaProducer(
        bootstrap_servers=broker.bootstrap_servers, enable_idempotence=True
    )
    try:
        meta = producer.send("retried", b"v", partition=0).get(timeout=TIMEOUT)
    finally:
        producer.close()
    assert meta.offset == 0 and rule.fired == 2 and rule.matched == 3


def test_a_fetch_disconnect_makes_the_consumer_reconnect(broker):
    kafka = pytest.importorskip("kafka")
    broker.create_topic("fetched")
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
    producer.send("fetched", b"v", partition=0).get(timeout=TIMEOUT)
    producer.close()
    rule = broker.add_fault({"api": "Fetch", "disconnect": "before", "times": 1})
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    try:
        consumer.assign([kafka.TopicPartition("fetched", 0)])
        got = [m.value for _, m in zip(range(1), consumer)]
    finally:
        consumer.close()
    assert got == [b"v"] and rule.fired == 1 and rule.matched >= 2


def test_a_delay_holds_the_answer_and_those_behind_it(broker):
    broker.add_fault(Rule(api="Metadata", delay_ms=300, times=1))
    host, port = broker.addresses[0]
    frames = [encode_request(MetadataRequest(topics=[]), 12, i, "t") for i in (1, 2)]
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        started = time.monotonic()
        answers = roundtrip(s, frames)
        waited = time.monotonic() - started
    assert [decode_response(a, 3, 12)[0].correlation_id for a in answers] == [1, 2]
    assert waited >= 0.3  # the first answer was held; the second came after it


def test_a_produce_error_is_retried_by_kafka_python(broker):
    kafka = pytest.importorskip("kafka")
    rule = broker.add_fault("api=Produce,error=NOT_LEADER_OR_FOLLOWER,times=2")
    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers, retries=5)
    try:
        meta = producer.send("not-led", b"v", partition=0).get(timeout=TIMEOUT)
    finally:
        producer.close()
    assert meta.offset == 0  # the two refused Produces wrote nothing
    assert (rule.matched, rule.fired) == (3, 2)


def test_an_acks_0_produce_is_not_answered_with_the_error(broker):
    rule = broker.add_fault("api=Produce,error=NOT_LEADER_OR_FOLLOWER")
    host, port = broker.addresses[0]
    produce = encode_request(ProduceRequest(acks=0, timeout_ms=1000, topic_data=[]), 9, 1, "t")
    metadata = encode_request(MetadataRequest(topics=[]), 12, 2, "t")
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(produce)
        # the next answer is the Metadata's: the Produce got none (it was handled as usual)
        (answer,) = roundtrip(s, [metadata])
    assert decode_response(answer, 3, 12)[0].correlation_id == 2 and rule.fired == 1


def test_rules_given_at_start_match_client_ids_and_are_cleared(broker):
    with Broker(faults=[{"api": "Metadata", "client_id": "flaky-*", "disconnect": "before"}]) as b:
        host, port = b.addresses[0]
        request = encode_request(MetadataRequest(topics=[]), 12, 1, "flaky-1")
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            s.sendall(request)
            assert s.recv(10) == b""
        other = encode_request(MetadataRequest(topics=[]), 12, 1, "steady")
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            assert roundtrip(s, [other])
        b.clear_faults()
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            assert roundtrip(s, [request])


def test_add_fault_checks_the_rule_in_the_callers_thread(broker):
    with pytest.raises(ValueError, match="rule key 'error': unknown error name"):
        broker.add_fault(api="Fetch", error="NOT_AN_ERROR")
    with pytest.raises(ValueError, match="a rule, or its keys"):
        broker.add_fault()

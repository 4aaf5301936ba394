"""Real traffic: frames that real Kafka clients and a real broker (Tansu) exchange, recorded by
a proxy between them, decoded and re-encoded by both implementations.

Tansu advertises the proxy's address, so clients keep going through the proxy after their
first Metadata. Each client uses only calls that need no consumer-group join (Tansu holds a
first join for about half a minute): admin calls, producers, and consumers with assign().

Requests re-encode byte for byte (header and body). Responses re-encode to bytes that
decode to the same value; byte equality is counted, not required, because Tansu writes
tagged fields that hold their default value (ApiVersions' feature fields, Fetch's empty
NodeEndpoints, CreateTopics' TopicConfigErrorCode 0), which our encoder leaves out.

Known client bug (librdkafka, issue 5049 there): a flexible Metadata request for all topics
keeps the 4-byte placeholder of the topics count (00 00 00 00) where a one-byte varint
belongs. Such a request must fail with DecodeError for its 3 trailing bytes, and decode and
re-encode byte for byte once the placeholder is one byte.

Known broker bugs (Tansu 0.6): its CreateAcls (v3 here, the version kafka-python picks)
and DescribeUserScramCredentials (v0) responses hold a null array where none may be null, and end without the tagged-field
byte. kafka-python is made to ask for both (it cannot read the answers either, and times
out); they must fail to decode with DecodeError. Any other failure shows the frame in hex.
"""

import asyncio
import importlib.util
import struct
import time

import pytest

from fastkwire.errors import DecodeError

from broker import running_tansu
from recording_proxy import RecordingProxy

pytestmark = pytest.mark.broker

RECORDS = 5
CLIENT_TIMEOUT = 15.0  # seconds one client's whole script may take
# ApiVersions, Metadata, Produce, Fetch, ListOffsets and CreateTopics: every client does them.
REQUIRED_KEYS = {18, 3, 0, 1, 2, 19}
CREATE_ACLS, DESCRIBE_USER_SCRAM_CREDENTIALS = 30, 50
# API keys whose Tansu responses are known to be malformed.
BROKEN_RESPONSES = {CREATE_ACLS, DESCRIBE_USER_SCRAM_CREDENTIALS}
BROKEN_ERROR = "null where the field is not nullable"
METADATA, FETCH = 3, 1


def run_confluent(bootstrap, topic):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    conf = {"bootstrap.servers": bootstrap, "client.id": "traffic-confluent"}
    admin = AdminClient(conf)
    for future in admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1)]
    ).values():
        future.result(CLIENT_TIMEOUT)
    assert topic in admin.list_topics(timeout=CLIENT_TIMEOUT).topics
    for future in admin.describe_configs([ConfigResource("topic", topic)]).values():
        future.result(CLIENT_TIMEOUT)

    producer = Producer(conf)
    for i in range(RECORDS):
        producer.produce(topic, key=b"k%d" % i, value=b"confluent %d" % i, headers=[("h", b"v")])
    assert producer.flush(CLIENT_TIMEOUT) == 0

    # A group id is required, but assign() joins no group.
    consumer = Consumer({**conf, "group.id": "traffic-confluent", "enable.auto.commit": False})
    try:
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        values = poll_confluent(consumer)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, 0), timeout=CLIENT_TIMEOUT)
    finally:
        consumer.close()
    assert values == [b"confluent %d" % i for i in range(RECORDS)]
    assert low == 0 and high > 0  # Tansu 0.6 answers 1, not 5, for the end offset here


def poll_confluent(consumer):
    values = []
    deadline = time.monotonic() + CLIENT_TIMEOUT
    while len(values) < RECORDS and time.monotonic() < deadline:
        msg = consumer.poll(0.2)
        if msg is not None and msg.error() is None:
            values.append(msg.value())
    return values


def run_kafka_python(bootstrap, topic):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import ConfigResource, ConfigResourceType, NewTopic

    timeout_ms = int(CLIENT_TIMEOUT * 1000)
    conf = {
        "bootstrap_servers": bootstrap,
        "client_id": "traffic-kafka-python",
        "request_timeout_ms": timeout_ms,
    }
    admin = KafkaAdminClient(**conf)
    try:
        admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        assert topic in admin.list_topics()
        admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
        admin.describe_cluster()
        admin.describe_topics([topic])
        admin.list_groups()
        admin.describe_acls(acl_filter())
    finally:
        admin.close()

    producer = KafkaProducer(**conf)
    try:
        for i in range(RECORDS):
            producer.send(
                topic, key=b"k%d" % i, value=b"kafka-python %d" % i, headers=[("h", b"v")]
            )
        producer.flush(CLIENT_TIMEOUT)
    finally:
        producer.close(CLIENT_TIMEOUT)

    tp = TopicPartition(topic, 0)
    consumer = KafkaConsumer(**conf, group_id=None, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        consumer.seek_to_beginning(tp)
        values = []
        deadline = time.monotonic() + CLIENT_TIMEOUT
        while len(values) < RECORDS and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200).values():
                values += [r.value for r in records]
        end = consumer.end_offsets([tp])[tp]
    finally:
        consumer.close()
    assert values == [b"kafka-python %d" % i for i in range(RECORDS)]
    assert end > 0


def acl_filter():
    from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, ACLResourcePatternType
    from kafka.admin import ResourcePatternFilter, ResourceType

    return ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.ANY, None, ACLResourcePatternType.ANY),
    )


def run_broken_broker_answers(bootstrap, topic):
    """Asks for the two answers Tansu 0.6 gets wrong; kafka-python times out on them."""
    from kafka import KafkaAdminClient
    from kafka.admin import ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType
    from kafka.admin import ResourcePattern, ResourceType
    from kafka.errors import KafkaError

    acl = ACL(
        "User:traffic",
        "*",
        ACLOperation.READ,
        ACLPermissionType.ALLOW,
        ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL),
    )
    admin = KafkaAdminClient(
        bootstrap_servers=bootstrap, client_id="traffic-broken", request_timeout_ms=1000
    )
    try:
        for call in (admin.describe_user_scram_credentials, lambda: admin.create_acls([acl])):
            try:
                call()
            except KafkaError:
                pass  # kafka-python cannot read these answers: that is the broker's bug
    finally:
        admin.close()


def run_aiokafka(bootstrap, topic):
    asyncio.run(asyncio.wait_for(aiokafka_script(bootstrap, topic), CLIENT_TIMEOUT))


async def aiokafka_script(bootstrap, topic):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    conf = {"bootstrap_servers": bootstrap, "client_id": "traffic-aiokafka"}
    admin = AIOKafkaAdminClient(**conf)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])
        assert topic in await admin.list_topics()
    finally:
        await admin.close()

    producer = AIOKafkaProducer(**conf)
    await producer.start()
    try:
        for i in range(RECORDS):
            await producer.send_and_wait(
                topic, key=b"k%d" % i, value=b"aiokafka %d" % i, headers=[("h", b"v")]
            )
    finally:
        await producer.stop()

    tp = TopicPartition(topic, 0)
    consumer = AIOKafkaConsumer(**conf, group_id=None, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign([tp])
        await consumer.seek_to_beginning(tp)
        values = []
        while len(values) < RECORDS:  # bounded by the wait_for around the script
            for records in (await consumer.getmany(timeout_ms=200)).values():
                values += [r.value for r in records]
        end = (await consumer.end_offsets([tp]))[tp]
    finally:
        await consumer.stop()
    assert values == [b"aiokafka %d" % i for i in range(RECORDS)]
    assert end > 0


CLIENTS = {
    "confluent-kafka": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}
BROKEN = "kafka-python, broken answers"
SCRIPTS = {**CLIENTS, BROKEN: run_broken_broker_answers}


def client_available(label):
    module = {
        "confluent-kafka": "confluent_kafka",
        "kafka-python": "kafka",
        "aiokafka": "aiokafka",
        BROKEN: "kafka",
    }[label]
    return importlib.util.find_spec(module) is not None


@pytest.fixture(scope="module")
def traffic():
    """Runs every available client once through the proxy; gives {client: [Exchange]}."""
    proxy = RecordingProxy()
    brokers = running_tansu(advertised_port=proxy.port)
    try:
        broker = next(brokers)
        proxy.upstream_port = broker.port
        bootstrap = f"127.0.0.1:{proxy.port}"
        timings = {}
        for label, script in SCRIPTS.items():
            if not client_available(label):
                continue
            proxy.label = label
            started = time.monotonic()
            script(bootstrap, f"traffic-{label.replace(' ', '').replace(',', '-')}")
            timings[label] = time.monotonic() - started
    finally:
        proxy.close()
        brokers.close()
    assert not proxy.errors, proxy.errors
    assert not proxy.unmatched_responses, [
        (label, f.hex()) for label, f in proxy.unmatched_responses
    ]
    by_client = {}
    for exchange in proxy.snapshot():
        by_client.setdefault(exchange.label, []).append(exchange)
    print(f"\nclient timings (s): { {k: round(v, 2) for k, v in timings.items()} }")
    return by_client


def all_exchanges(traffic):
    return [e for exchanges in traffic.values() for e in exchanges]


def describe(exchange, frame):
    return (
        f"{exchange.label}: api key {exchange.api_key} v{exchange.version} "
        f"correlation id {exchange.correlation_id}: {frame.hex()}"
    )


@pytest.mark.parametrize("label", list(CLIENTS))
def test_client_used_the_common_apis(traffic, label):
    if not client_available(label):
        pytest.skip(f"{label} is not installed")
    seen = sorted({e.api_key for e in traffic.get(label, [])})
    print(f"\n{label}: {len(traffic.get(label, []))} requests, api keys {seen}")
    assert REQUIRED_KEYS <= set(seen), (
        f"{label} sent api keys {seen}, expected at least {sorted(REQUIRED_KEYS)}"
    )


def body_offset(frame):
    """Where a flexible request's body starts: after the int16 client id and one tag byte."""
    client_id_length = max(struct.unpack_from(">h", frame, 12)[0], 0)
    return 14 + client_id_length + 1


def placeholder_metadata(exchange, impl):
    """The librdkafka request that keeps a 4-byte topics count, with that count made one
    byte; None for any other request."""
    frame = exchange.request
    if exchange.api_key != METADATA or not impl.MetadataRequest.is_flexible(exchange.version):
        return None
    start = body_offset(frame)
    if frame[start : start + 4] != bytes(4):
        return None
    body = frame[start + 3 :]
    return struct.pack(">i", len(frame) - 7) + frame[4:start] + body


def test_every_request_reencodes_byte_for_byte(traffic, impl):
    failures, placeholders = [], []
    exchanges = all_exchanges(traffic)
    for exchange in exchanges:
        frame = exchange.request
        repaired = placeholder_metadata(exchange, impl)
        if repaired is not None:
            with pytest.raises(DecodeError, match="3 trailing bytes"):
                impl.decode_request(frame)
            placeholders.append(exchange.label)
            frame = repaired
        try:
            header, msg = impl.decode_request(frame)
            again = impl.encode_request(
                msg, exchange.version, header.correlation_id, header.client_id
            )
        except Exception as e:  # every failure is reported with its frame
            failures.append(f"{describe(exchange, frame)}: {e!r}")
            continue
        if again != frame:
            failures.append(f"{describe(exchange, frame)}: re-encoded as {again.hex()}")
        if repaired is not None:
            assert msg.topics is None  # "all topics", as librdkafka meant
    print(
        f"\n{len(exchanges)} requests; librdkafka's 4-byte topics count in {len(placeholders)} Metadata requests"
    )
    assert exchanges
    assert not failures, "\n".join(failures)
    assert set(placeholders) <= {"confluent-kafka"}  # only librdkafka writes the placeholder


def test_every_response_decodes_and_reencodes(traffic, impl):
    failures, known_bugs, byte_equal, answered = [], [], 0, 0
    for exchange in all_exchanges(traffic):
        frame = exchange.response
        if frame is None:
            continue
        answered += 1
        key = (exchange.api_key, exchange.version)
        try:
            header, msg = impl.decode_response(frame, *key)
        except DecodeError as e:
            if exchange.api_key in BROKEN_RESPONSES and BROKEN_ERROR in str(e):
                known_bugs.append(key)
            else:
                failures.append(f"{describe(exchange, frame)}: {e!r}")
            continue
        if exchange.api_key in BROKEN_RESPONSES:
            failures.append(f"{describe(exchange, frame)}: the known broker bug decoded as {msg!r}")
            continue
        again = impl.encode_response(msg, exchange.version, header.correlation_id)
        if impl.decode_response(again, *key) != (header, msg):
            failures.append(
                f"{describe(exchange, frame)}: re-encoded as {again.hex()}, which decodes differently"
            )
        elif again == frame:
            byte_equal += 1
        elif not (type(msg).is_flexible(exchange.version) and len(again) < len(frame)):
            # The one difference allowed: Tansu writes tagged fields that hold their
            # default value, which our encoder (like Kafka's) leaves out.
            failures.append(f"{describe(exchange, frame)}: re-encoded as {again.hex()}")
    print(
        f"\n{answered} responses, {byte_equal} byte-equal after re-encoding, known broker bugs {known_bugs}"
    )
    assert answered
    assert not failures, "\n".join(failures)
    if client_available(BROKEN):
        assert {k for k, _ in known_bugs} == BROKEN_RESPONSES


def test_only_requests_in_flight_at_close_went_unanswered(traffic):
    """A broker answers the requests of one connection in order, so an unanswered request
    must have been in flight when its client closed: nothing after it on its connection
    was answered (none of these clients produce with acks=0)."""
    by_connection = {}
    for e in all_exchanges(traffic):
        by_connection.setdefault(e.connection, []).append(e)
    out_of_order = []
    for exchanges in by_connection.values():
        answered = [i for i, e in enumerate(exchanges) if e.response is not None]
        out_of_order += [
            describe(e, e.request)
            for e in exchanges[: answered[-1] if answered else 0]
            if e.response is None
        ]
    assert not out_of_order, "\n".join(out_of_order)

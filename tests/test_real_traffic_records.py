"""Real traffic, inside the records: confluent-kafka (librdkafka), kafka-python and aiokafka
produce with every compression codec they have through the recording proxy to Tansu and
fetch the records back; every Produce request's and Fetch response's `records` must read
back, on both kernels, exactly as the client produced them.

Each record says who made it: value b"<client> <codec> <i>", key b"k<i>", one header
("codec", <codec>), so any batch can be checked on its own, whichever topic it is in.
kafka-python compresses only with gzip unless python-snappy, lz4 or zstandard are
installed (they are not in the test extra); aiokafka's codecs are cramjam's.
"""

import asyncio
import importlib.util
import time

import pytest

from fastkwire import _messages_python as messages
from fastkwire._compression import CODECS

from broker import create_topics, running_tansu
from record_peers import HAVE_CRAMJAM
from recording_proxy import RecordingProxy

pytestmark = pytest.mark.broker

PRODUCE, FETCH = 0, 1
RECORDS = 3
TIMEOUT = 15.0  # seconds one client's whole script may take
COMPRESSED = [c for c in CODECS if c != "none"]


def expected(client, codec):
    return [
        (
            b"k%d" % i,
            b"%s %s %d" % (client.encode(), codec.encode(), i),
            [("codec", codec.encode())],
        )
        for i in range(RECORDS)
    ]


def kafka_python_codecs():
    from kafka import codec

    have = {
        "gzip": codec.has_gzip,
        "snappy": codec.has_snappy,
        "lz4": codec.has_lz4,
        "zstd": codec.has_zstd,
    }
    return ["none"] + [c for c in COMPRESSED if have[c]()]


def readable(codecs):
    """The codecs fastkwire can read back here: compressed ones need cramjam."""
    return list(codecs) if HAVE_CRAMJAM else ["none"]


CLIENTS = {
    "confluent-kafka": ("confluent_kafka", lambda: readable(CODECS)),
    "kafka-python": ("kafka", lambda: readable(kafka_python_codecs())),
    "aiokafka": ("aiokafka", lambda: readable(CODECS)),
}


def available(client):
    return importlib.util.find_spec(CLIENTS[client][0]) is not None


def topic_of(client, codec):
    return f"records-{client}-{codec}"


def run_confluent(bootstrap, codecs):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    for codec in codecs:
        producer = Producer(
            {"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 50}
        )  # the three records in one batch
        for key, value, headers in expected("confluent-kafka", codec):
            producer.produce(
                topic_of("confluent-kafka", codec), key=key, value=value, headers=headers
            )
        assert producer.flush(TIMEOUT) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "records-confluent",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign(
            [TopicPartition(topic_of("confluent-kafka", c), 0, OFFSET_BEGINNING) for c in codecs]
        )
        got, deadline = 0, time.monotonic() + TIMEOUT
        while got < RECORDS * len(codecs) and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            got += msg is not None and msg.error() is None
    finally:
        consumer.close()
    assert got == RECORDS * len(codecs)


def run_kafka_python(bootstrap, codecs):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    ms = int(TIMEOUT * 1000)
    for codec in codecs:
        producer = KafkaProducer(
            bootstrap_servers=bootstrap,
            request_timeout_ms=ms,
            linger_ms=50,
            compression_type=None if codec == "none" else codec,
        )
        try:
            for key, value, headers in expected("kafka-python", codec):
                producer.send(
                    topic_of("kafka-python", codec), key=key, value=value, headers=headers
                )
            producer.flush(TIMEOUT)
        finally:
            producer.close(TIMEOUT)
    tps = [TopicPartition(topic_of("kafka-python", c), 0) for c in codecs]
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, request_timeout_ms=ms, group_id=None, enable_auto_commit=False
    )
    try:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got, deadline = 0, time.monotonic() + TIMEOUT
        while got < RECORDS * len(codecs) and time.monotonic() < deadline:
            got += sum(len(r) for r in consumer.poll(timeout_ms=200).values())
    finally:
        consumer.close()
    assert got == RECORDS * len(codecs)


def run_aiokafka(bootstrap, codecs):
    asyncio.run(asyncio.wait_for(aiokafka_script(bootstrap, codecs), TIMEOUT))


async def aiokafka_script(bootstrap, codecs):
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

    for codec in codecs:
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            linger_ms=50,
            compression_type=None if codec == "none" else codec,
        )
        await producer.start()
        try:
            sent = [
                await producer.send(topic_of("aiokafka", codec), key=k, value=v, headers=h)
                for k, v, h in expected("aiokafka", codec)
            ]
            await asyncio.gather(*sent)
        finally:
            await producer.stop()
    tps = [TopicPartition(topic_of("aiokafka", c), 0) for c in codecs]
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        got = 0
        while got < RECORDS * len(codecs):  # bounded by the wait_for around the script
            got += sum(len(r) for r in (await consumer.getmany(timeout_ms=200)).values())
    finally:
        await consumer.stop()


SCRIPTS = {
    "confluent-kafka": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


@pytest.fixture(scope="module")
def record_traffic():
    """Each available client's produce-and-fetch, once per codec: {client: (codecs, frames)}
    where frames are (api key, version, request, response)."""
    proxy = RecordingProxy()
    brokers = running_tansu(advertised_port=proxy.port)
    out = {}
    try:
        broker = next(brokers)
        proxy.upstream_port = broker.port
        bootstrap = f"127.0.0.1:{proxy.port}"
        clients = [c for c in SCRIPTS if available(c)]
        codecs = {c: list(CLIENTS[c][1]()) for c in clients}
        proxy.label = "admin"
        create_topics(bootstrap, [topic_of(c, k) for c in clients for k in codecs[c]])
        for client in clients:
            proxy.label = client
            SCRIPTS[client](bootstrap, codecs[client])
    finally:
        proxy.close()
        brokers.close()
    assert not proxy.errors, proxy.errors
    for client in clients:
        frames = [
            (e.api_key, e.version, e.request, e.response)
            for e in proxy.snapshot()
            if e.label == client and e.api_key in (PRODUCE, FETCH)
        ]
        out[client] = (codecs[client], frames)
    return out


def records_fields(api_key, version, request, response):
    """Every `records` field of a Produce request or a Fetch response."""
    if api_key == PRODUCE:
        _, msg = messages.decode_request(request)
        return [p.records for t in msg.topic_data for p in t.partition_data if p.records]
    if response is None:
        return []
    _, msg = messages.decode_response(response, api_key, version)
    return [p.records for t in msg.responses for p in t.partitions if p.records]


@pytest.mark.parametrize("client", list(SCRIPTS))
def test_records_read_back_as_produced(record_traffic, records_codec, client):
    if not available(client):
        pytest.skip(f"{client} is not installed")
    codecs, frames = record_traffic[client]
    seen = {"produce": set(), "fetch": set()}  # (codec, i) read back
    wrote = {"produce": set(), "fetch": set()}  # the codecs the batches carried
    for api_key, version, request, response in frames:
        where = "produce" if api_key == PRODUCE else "fetch"
        for field in records_fields(api_key, version, request, response):
            batches = records_codec.read_batches(field)
            assert batches.tail == b""  # these fetches are far under their size limits
            for batch in batches:
                assert batch.magic == 2
                wrote[where].add(batch.compression)
                for i, r in enumerate(batch.records):
                    maker, codec, n = r.value.decode().split(" ")
                    assert maker == client
                    assert (r.key, r.value, r.headers) == expected(client, codec)[int(n)]
                    assert batch.compression == codec
                    seen[where].add((codec, int(n)))
            columns = records_codec.read_columns(field)
            assert columns.to_records() == [r for b in batches for r in b.records]
    everything = {(c, i) for c in codecs for i in range(RECORDS)}
    assert seen["produce"] == everything
    assert seen["fetch"] == everything
    assert wrote["produce"] == wrote["fetch"] == set(codecs)

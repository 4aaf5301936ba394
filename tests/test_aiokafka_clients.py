"""fastkwire.aiokafka end to end: aiokafka's own AIOKafkaProducer and AIOKafkaConsumer,
accelerated and stock, against a real broker (fastkwire's, fastkwire.testing, on 127.0.0.1).

Records produced by an accelerated producer (keys, None keys, values, headers, three
partitions, keyed partitioning by murmur2, no compression and gzip) are read back by a
stock and an accelerated consumer through getmany() and `async for`, and both see the
same ConsumerRecords; a stock producer's records land in the same partitions with the
same contents. Each client runs in its own child process, so that "stock" is aiokafka
untouched.
"""

import json
import subprocess
import sys
import uuid

import pytest

aiokafka = pytest.importorskip("aiokafka")

import fastkwire.aiokafka as fka  # noqa: E402
from broker import kafka_broker  # noqa: E402,F401

DECLINES_HERE = fka.unsupported_reason()
pytestmark = pytest.mark.skipif(
    DECLINES_HERE is not None, reason=f"the accelerator declines here: {DECLINES_HERE}"
)

N = 600

CHILD = (
    r"""
import asyncio, json, sys, time
mode, role, bootstrap, topic, codec = sys.argv[1:6]
if mode == "accelerated":
    import fastkwire.aiokafka
    fastkwire.aiokafka.install()
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
n = %d

def row(r):
    return [r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type,
            None if r.key is None else r.key.hex(), None if r.value is None else r.value.hex(),
            r.checksum, r.serialized_key_size, r.serialized_value_size,
            [[k, None if v is None else v.hex()] for k, v in r.headers],
            type(r).__module__ + "." + type(r).__qualname__, type(r.headers).__name__]

async def produce():
    p = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1,
                         compression_type=None if codec == "none" else codec)
    await p.start()
    sent = []
    try:
        for i in range(n):
            headers = [("i", str(i).encode())] + ([("empty", b"")] if i %% 7 == 0 else [])
            key = None if i %% 5 == 0 else b"key-%%d" %% i
            # keyed records go where murmur2 says; the others to a fixed partition
            fut = await p.send(topic, value=None if i %% 10 == 3 else b"v" * (i %% 300),
                               key=key, headers=headers,
                               partition=None if key is not None else i %% 3,
                               timestamp_ms=1_700_000_000_000 + i)
            sent.append(fut)
        await p.flush()
        meta = [await f for f in sent]
    finally:
        await p.stop()
    return {"sent": n, "partitions": [m.partition for m in meta]}

async def consume(how):
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                         enable_auto_commit=False)
    await c.start()
    seen = []
    try:
        c.assign([TopicPartition(topic, p) for p in range(3)])
        deadline = time.monotonic() + 60
        if how == "getmany":
            while len(seen) < n and time.monotonic() < deadline:
                for records in (await c.getmany(timeout_ms=500, max_records=97)).values():
                    seen.extend(row(r) for r in records)
        else:
            async def loop():
                async for r in c:
                    seen.append(row(r))
                    if len(seen) >= n:
                        break
            await asyncio.wait_for(loop(), 60)
    finally:
        await c.stop()
    return sorted(seen, key=lambda r: (r[1], r[2]))

work = produce() if role == "produce" else consume(role)
print(json.dumps(asyncio.run(work)))
"""
    % N
)


def child(mode, role, bootstrap, topic, codec="none"):
    out = subprocess.run(
        [sys.executable, "-c", CHILD, mode, role, bootstrap, topic, codec],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def create_topic(bootstrap, topic):
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, 3, 1)])
    finally:
        admin.close()


@pytest.mark.parametrize("codec", ["none", "gzip"])
def test_accelerated_clients_produce_and_consume_as_stock(kafka_broker, codec):  # noqa: F811
    bootstrap = kafka_broker.bootstrap_servers
    fast_topic = f"ak-fast-{codec}-{uuid.uuid4().hex[:6]}"
    stock_topic = f"ak-stock-{codec}-{uuid.uuid4().hex[:6]}"
    for topic in (fast_topic, stock_topic):
        create_topic(bootstrap, topic)
    fast_sent = child("accelerated", "produce", bootstrap, fast_topic, codec)
    stock_sent = child("stock", "produce", bootstrap, stock_topic, codec)
    assert fast_sent["sent"] == N and fast_sent == stock_sent  # murmur2 picked the same
    read = {
        (mode, how, topic): child(mode, how, bootstrap, topic)
        for mode in ("stock", "accelerated")
        for how in ("getmany", "getone")
        for topic in (fast_topic, stock_topic)
    }
    for topic in (fast_topic, stock_topic):
        stock = read["stock", "getmany", topic]
        assert len(stock) == N
        assert stock[0][-2:] == ["aiokafka.structs.ConsumerRecord", "tuple"]
        for how in ("getmany", "getone"):
            assert read["accelerated", how, topic] == stock
            assert read["stock", how, topic] == stock

    # what the accelerated producer wrote is what the stock one wrote, record for record
    def strip(rows):
        return [[r[1], r[2], r[3], r[5], r[6], r[10]] for r in rows]

    assert strip(read["stock", "getmany", fast_topic]) == strip(
        read["stock", "getmany", stock_topic]
    )

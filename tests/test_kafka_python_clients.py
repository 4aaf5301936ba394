"""fastkwire.kafka_python end to end: kafka-python's own KafkaProducer and KafkaConsumer,
accelerated and stock, against a real broker (fastkwire's, fastkwire.testing, on 127.0.0.1).

Records produced by an accelerated producer (keys, values, headers, several partitions,
each compression codec kafka-python has here) are read back by a stock and an accelerated
consumer, and both see the same ConsumerRecords; a stock producer's records read the same
through an accelerated consumer. Each client runs in its own child process, so that
"stock" is kafka-python untouched.
"""

import json
import os
import subprocess
import sys
import uuid

import pytest

kafka = pytest.importorskip("kafka")

import fastkwire  # noqa: E402
import fastkwire.kafka_python as fkp  # noqa: E402
from broker import kafka_broker  # noqa: E402,F401

PURE = os.environ.get("FASTKWIRE_PURE", "") not in ("", "0") or fastkwire.implementation != "cython"
pytestmark = pytest.mark.skipif(
    PURE or kafka.__version__ not in fkp.SUPPORTED,
    reason="the accelerator declines here (pure fastkwire or untested kafka-python)",
)

N = 600

CHILD = (
    r"""
import json, sys, time
mode, role, bootstrap, topic, codec = sys.argv[1:6]
if mode == "accelerated":
    import fastkwire.kafka_python
    fastkwire.kafka_python.install()
from kafka import KafkaConsumer, KafkaProducer
n = %d
if role == "produce":
    p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, acks=1,
                      compression_type=None if codec == "none" else codec)
    for i in range(n):
        headers = [("i", str(i).encode())] + ([("empty", b"")] if i %% 7 == 0 else [])
        p.send(topic, key=None if i %% 5 == 0 else b"k%%d" %% i, value=b"v" * (i %% 300),
               headers=headers, partition=i %% 3, timestamp_ms=1_700_000_000_000 + i)
    p.flush(timeout=30)
    p.close()
    print(json.dumps({"sent": n}))
else:
    c = KafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest",
                      enable_auto_commit=False, consumer_timeout_ms=15000)
    from kafka.structs import TopicPartition
    c.assign([TopicPartition(topic, p) for p in range(3)])
    seen = []
    deadline = time.monotonic() + 60
    while len(seen) < n and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            for r in records:
                seen.append([r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type,
                             None if r.key is None else r.key.hex(), r.value.hex(),
                             [[k, None if v is None else v.hex()] for k, v in r.headers],
                             r.serialized_key_size, r.serialized_value_size, r.serialized_header_size,
                             r.leader_epoch])
    c.close()
    print(json.dumps(sorted(seen)))
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


def codecs():
    """No compression and gzip by default; every other codec kafka-python has here with
    --run-slow (each costs a dozen client processes)."""
    import kafka.codec as kc

    slow = [
        name
        for name, has in (("snappy", kc.has_snappy), ("lz4", kc.has_lz4), ("zstd", kc.has_zstd))
        if has()
    ]
    return ["none", "gzip"] + [pytest.param(name, marks=pytest.mark.slow) for name in slow]


@pytest.mark.parametrize("codec", codecs())
def test_accelerated_clients_produce_and_consume_as_stock(kafka_broker, codec):  # noqa: F811
    bootstrap = kafka_broker.bootstrap_servers
    fast_topic, stock_topic = (
        f"kp-fast-{codec}-{uuid.uuid4().hex[:6]}",
        f"kp-stock-{codec}-{uuid.uuid4().hex[:6]}",
    )
    for topic in (fast_topic, stock_topic):
        create_topic(bootstrap, topic)
    assert child("accelerated", "produce", bootstrap, fast_topic, codec) == {"sent": N}
    assert child("stock", "produce", bootstrap, stock_topic, codec) == {"sent": N}
    read = {
        (mode, topic): child(mode, "consume", bootstrap, topic)
        for mode in ("stock", "accelerated")
        for topic in (fast_topic, stock_topic)
    }
    for topic in (fast_topic, stock_topic):
        assert len(read["stock", topic]) == N
        assert read["accelerated", topic] == read["stock", topic]
    # what the accelerated producer wrote is what the stock one wrote, record for record
    strip = [[r[1], r[2], r[3], r[5], r[6], r[7]] for r in read["stock", fast_topic]]
    assert strip == [[r[1], r[2], r[3], r[5], r[6], r[7]] for r in read["stock", stock_topic]]

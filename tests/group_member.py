"""One static consumer group member in a process of its own, so that a test can kill it with
SIGKILL (no LeaveGroup, no close) and see what the others do:

    python group_member.py CLIENT BOOTSTRAP GROUP TOPIC INSTANCE_ID SESSION_TIMEOUT_MS

CLIENT: kafka-python, aiokafka, confluent-kafka, or confluent-kafka-848 (the KIP-848
consumer protocol, whose session timeout is the broker's). It subscribes to TOPIC with
group.instance.id INSTANCE_ID and prints one JSON line per change of its assignment,
{"assigned": [partitions]}, until it is killed, or for at most LIFETIME_S.
"""

import asyncio
import json
import sys
import time

HEARTBEAT_MS = 500
POLL_S = 0.2
LIFETIME_S = 300  # a member its test forgot ends by itself


def report(partitions, last):
    now = sorted(partitions)
    if now != last:
        print(json.dumps({"assigned": now}), flush=True)
    return now


def kafka_python(bootstrap, group, topic, instance, session_ms):
    import kafka

    consumer = kafka.KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        group_instance_id=instance,
        session_timeout_ms=session_ms,
        heartbeat_interval_ms=HEARTBEAT_MS,
        auto_offset_reset="earliest",
    )
    consumer.subscribe([topic])
    last = None
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        consumer.poll(timeout_ms=int(POLL_S * 1000))
        last = report({tp.partition for tp in consumer.assignment()}, last)


def aiokafka(bootstrap, group, topic, instance, session_ms):
    import aiokafka

    async def run():
        consumer = aiokafka.AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=group,
            group_instance_id=instance,
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=HEARTBEAT_MS,
            auto_offset_reset="earliest",
        )
        await consumer.start()
        last = None
        deadline = time.monotonic() + LIFETIME_S
        while time.monotonic() < deadline:
            await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            last = report({tp.partition for tp in consumer.assignment()}, last)

    asyncio.run(run())


def confluent_kafka(bootstrap, group, topic, instance, session_ms, protocol="classic"):
    import confluent_kafka

    config = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "group.instance.id": instance,
        "auto.offset.reset": "earliest",
        "group.protocol": protocol,
    }
    if protocol == "classic":  # KIP-848's timings are the broker's
        config.update({"session.timeout.ms": session_ms, "heartbeat.interval.ms": HEARTBEAT_MS})
    consumer = confluent_kafka.Consumer(config)
    consumer.subscribe([topic])
    last = None
    deadline = time.monotonic() + LIFETIME_S
    while time.monotonic() < deadline:
        consumer.poll(POLL_S)
        last = report({tp.partition for tp in consumer.assignment()}, last)


def confluent_kafka_848(bootstrap, group, topic, instance, session_ms):
    confluent_kafka(bootstrap, group, topic, instance, session_ms, protocol="consumer")


CLIENTS = {
    "kafka-python": kafka_python,
    "aiokafka": aiokafka,
    "confluent-kafka": confluent_kafka,
    "confluent-kafka-848": confluent_kafka_848,  # the KIP-848 consumer protocol
}

if __name__ == "__main__":
    client, bootstrap, group, topic, instance, session_ms = sys.argv[1:]
    CLIENTS[client](bootstrap, group, topic, instance, int(session_ms))

"""Listeners of different security protocols side by side on one node, as Kafka's
`listeners=PLAINTEXT://:9092,SSL://:9093`: each node advertises its addresses per listener,
and a client is told those of the listener it came in on (Metadata, FindCoordinator,
DescribeCluster). Produced over one, consumed over the other, with kafka-python, aiokafka
and confluent-kafka; `fastkwire broker --listen` takes a node's listeners as Kafka's
`listeners` value, its old spelling kept."""

import asyncio
import os
import socket
import subprocess
import sys

import pytest

import fastkwire
import fastkwire.cli
from fastkwire.broker import Broker as AsyncBroker
from fastkwire.testing import Broker

from certs import tls_files  # noqa: F401 - a fixture

TIMEOUT = 20


@pytest.fixture(scope="module")
def broker(tls_files):  # noqa: F811
    with Broker(
        nodes=2,
        protocols=("PLAINTEXT", "SSL"),
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
    ) as broker:
        broker.create_topic("sides", partitions=2, replication_factor=2)
        yield broker


def test_each_listener_has_its_own_addresses(broker):
    plain = broker.bootstrap_servers_for("PLAINTEXT").split(",")
    tls = broker.bootstrap_servers_for("SSL").split(",")
    assert broker.bootstrap_servers.split(",") == plain  # the first listener's
    assert len(plain) == len(tls) == 2 and not set(plain) & set(tls)
    assert broker.security_protocol == "PLAINTEXT"
    with pytest.raises(ValueError, match="SASL_SSL"):
        broker.bootstrap_servers_for("SASL_SSL")


def test_kafka_python_is_told_the_addresses_of_its_listener(broker, tls_files):  # noqa: F811
    kafka = pytest.importorskip("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType

    tls = {
        "security_protocol": "SSL",
        "ssl_cafile": tls_files.ca,
    }
    admin = kafka.KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers_for("SSL"), **tls)
    try:
        nodes = {
            (n["host"], n["port"]) for n in admin.describe_cluster()["brokers"]
        }  # DescribeCluster
        configs = admin.describe_configs(
            [ConfigResource(ConfigResourceType.BROKER, "0")], config_filter="static"
        )["broker"]["0"]
    finally:
        admin.close()
    assert {f"{h}:{p}" for h, p in nodes} == set(broker.bootstrap_servers_for("SSL").split(","))
    plain0, tls0 = (broker.bootstrap_servers_for(p).split(",")[0] for p in ("PLAINTEXT", "SSL"))
    assert configs["listeners"]["value"] == f"PLAINTEXT://{plain0},SSL://{tls0}"

    producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers_for("SSL"), **tls)
    for partition in (0, 1):  # each led by another node: reached over SSL, as told
        producer.send("sides", b"over tls", partition=partition).get(timeout=TIMEOUT)
    producer.close()
    consumer = kafka.KafkaConsumer(
        bootstrap_servers=broker.bootstrap_servers_for("PLAINTEXT"),
        group_id="sides-kp",
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
    )
    consumer.subscribe(["sides"])
    values = []
    for message in consumer:
        values.append(message.value)
        if len(values) == 2:
            break
    consumer.close()
    assert values == [b"over tls"] * 2


def test_aiokafka_produces_over_ssl_and_consumes_over_plaintext(broker, tls_files):  # noqa: F811
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers_for("SSL"),
            security_protocol="SSL",
            ssl_context=create_ssl_context(cafile=tls_files.ca),
        )
        await producer.start()
        try:
            await producer.send_and_wait("aio-sides", b"over tls", partition=0)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(
            "aio-sides",
            bootstrap_servers=broker.bootstrap_servers_for("PLAINTEXT"),
            auto_offset_reset="earliest",
        )
        await consumer.start()
        try:
            return (await consumer.getone()).value
        finally:
            await consumer.stop()

    assert asyncio.run(asyncio.wait_for(run(), TIMEOUT)) == b"over tls"


def test_confluent_kafka_over_each_listener(broker, tls_files):  # noqa: F811
    ck = pytest.importorskip("confluent_kafka")
    producer = ck.Producer(
        {
            "bootstrap.servers": broker.bootstrap_servers_for("SSL"),
            "security.protocol": "SSL",
            "ssl.ca.location": tls_files.ca,
        }
    )
    producer.produce("ck-sides", b"over tls", partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers_for("PLAINTEXT"),
            "group.id": "ck-sides",
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.subscribe(["ck-sides"])
        message = consumer.poll(TIMEOUT)
        assert message is not None and message.error() is None
        assert message.value() == b"over tls"
    finally:
        consumer.close()


def test_a_node_stops_and_starts_with_all_its_listeners(tls_files):  # noqa: F811
    async def run():
        broker = AsyncBroker(
            ["PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"] * 2,
            tls_cert=tls_files.server_cert,
            tls_key=tls_files.server_key,
        )
        await broker.start()
        try:
            before = broker.bootstrap_servers_for("SSL")
            await broker.stop_node(1)
            await broker.start_node(1)
            return before, broker.bootstrap_servers_for("SSL"), len(broker._servers[1])
        finally:
            await broker.close()

    before, after, servers = asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    assert before == after and servers == 2


@pytest.mark.parametrize(
    "listeners, kwargs, message",
    [
        (["PLAINTEXT://127.0.0.1:0,127.0.0.1:0"], {}, "names each one's protocol"),
        (["PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0"], {}, "one listener per protocol"),
        (["PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0"], {}, "needs a certificate"),
        (["PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"], {}, "needs users"),
        (
            ["PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"],
            {},
            "as many listeners",
        ),
        (
            ["PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0"],
            {"users": {"a": "b"}, "security_protocol": "SSL"},
            "security_protocol",
        ),
    ],
)
def test_listeners_that_cannot_be(listeners, kwargs, message):
    with pytest.raises(ValueError, match=message):
        AsyncBroker(listeners, **kwargs)


def test_fastkwire_broker_takes_a_nodes_listeners_as_kafkas_listeners_value(tls_files):  # noqa: F811
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fastkwire",
            "broker",
            "--listen",
            "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
            "--tls-cert",
            tls_files.server_cert,
            "--tls-key",
            tls_files.server_key,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        lines = [proc.stdout.readline() for _ in range(2)]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=TIMEOUT)
    assert lines[0].startswith("listener SSL on 127.0.0.1:"), (lines, err)
    assert lines[1].startswith("listening on 127.0.0.1:"), (lines, err)
    assert lines[0].split()[-1] != lines[1].split()[-1]
    assert proc.returncode == 0, err


def metadata_answered(address):
    """Whether a Metadata request, sent first on a new connection to `address`, is
    answered (a SASL listener ends the connection instead, as Kafka's does)."""
    host, port = address.split(",")[0].rsplit(":", 1)
    frame = fastkwire.encode_request(fastkwire.MetadataRequest(topics=[]), 12, 1, "probe")
    with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
        sock.sendall(frame)
        return len(sock.recv(4)) == 4


def test_only_the_sasl_listener_asks_for_a_login():
    """PLAINTEXT and SASL_PLAINTEXT side by side: the one serves without a login, the
    other ends a connection that asks before logging in, and serves alice once she has."""
    kafka = pytest.importorskip("kafka")
    with Broker(protocols=("PLAINTEXT", "SASL_PLAINTEXT"), users={"alice": "secret"}) as broker:
        sasl = {
            "bootstrap_servers": broker.bootstrap_servers_for("SASL_PLAINTEXT"),
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "SCRAM-SHA-256",
            "sasl_plain_username": "alice",
        }
        producer = kafka.KafkaProducer(sasl_plain_password="secret", **sasl)
        producer.send("logins", b"by alice").get(timeout=TIMEOUT)
        producer.close()
        assert metadata_answered(broker.bootstrap_servers_for("PLAINTEXT"))
        assert not metadata_answered(broker.bootstrap_servers_for("SASL_PLAINTEXT"))
        consumer = kafka.KafkaConsumer(
            "logins",
            bootstrap_servers=broker.bootstrap_servers_for("PLAINTEXT"),
            auto_offset_reset="earliest",
            consumer_timeout_ms=5000,
        )
        first = next(iter(consumer), None)
        consumer.close()
        assert first is not None and first.value == b"by alice"


@pytest.mark.parametrize(
    "listen",
    [
        "127.0.0.1:\u0663",  # an Arabic-Indic 3: str.isdigit() and int() take it
        "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:\u00b2",
        "\u00e9" * 70 + ":0",  # a host whose label IDNA cannot encode (over 63 characters)
        "PLAINTEXT://h\udcff:0",  # a byte that is no UTF-8 in the command line
        "PLAINTEXT://127.0.0.1:0,SSL://h\x00:0",  # a NUL character
    ],
)
def test_fastkwire_broker_names_the_flag_of_a_listener_it_cannot_listen_on(listen, capsys):
    """A port of digits other than ASCII's, or a host no socket can be given, is a usage
    error naming --listen: not a listener on another port, nor an 'unexpected error'."""
    try:
        code = fastkwire.cli.main(["broker", "--listen", listen])
    except SystemExit as e:  # argparse's usage error
        code = e.code
    err = capsys.readouterr().err
    assert code == 2, err
    assert "--listen" in err and "unexpected" not in err, err


@pytest.mark.parametrize(
    "address", ["127.0.0.1:\u0663", ("\u00e9" * 70, 0), "h\udcff:0", ("h\x00", 0)]
)
def test_broker_refuses_a_listener_address_it_cannot_use(address):
    with pytest.raises(ValueError, match="listeners"):
        AsyncBroker([address])


@pytest.mark.parametrize("protocols", [[None], ["PLAINTEXT", 5], ["PLAINTEXT,SSL"], ["SSL://x"]])
def test_testing_broker_names_protocols_when_one_is_not_a_security_protocol(protocols):
    """Each is put in a listener's text: a value other than a protocol's name had been
    reported as `listeners` (a parameter not given), or made another host ('SSL://x')."""
    with pytest.raises(ValueError, match=r"^protocols: "):
        Broker(protocols=protocols)

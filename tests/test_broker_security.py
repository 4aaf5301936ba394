"""The broker's SASL and TLS listeners with real clients: kafka-python, aiokafka and
confluent-kafka produce and consume over SASL_PLAINTEXT (PLAIN, SCRAM-SHA-512), SSL and
SASL_SSL (SCRAM-SHA-256), and are refused a wrong password with Kafka's error; fastkwire's
own admin command logs in to describe a group; `fastkwire broker` takes the same settings as
flags. Certificates are made for the test (tests/certs.py)."""

import asyncio
import json
import os
import socket
import ssl
import subprocess
import sys
import time

import pytest

from fastkwire import cli
from fastkwire.testing import Broker

from certs import tls_files  # noqa: F401 - a fixture

USERS = {"alice": "alice-Pass-3c9", "ops": "ops-Pass-81d"}
TIMEOUT = 20
CASES = [
    ("SASL_PLAINTEXT", "PLAIN"),
    ("SASL_PLAINTEXT", "SCRAM-SHA-512"),
    ("SSL", None),
    ("SASL_SSL", "SCRAM-SHA-256"),
]
CASE_IDS = [f"{p}-{m}" if m else p for p, m in CASES]


@pytest.fixture(scope="module")
def brokers(tls_files):  # noqa: F811 - the fixture
    tls = {"tls_cert": tls_files.server_cert, "tls_key": tls_files.server_key}
    made = {
        "SASL_PLAINTEXT": Broker(users=USERS),
        "SSL": Broker(**tls),
        "SASL_SSL": Broker(users=USERS, **tls),
    }
    started = []
    try:
        for b in made.values():
            started.append(b.start())
        yield made
    finally:
        for b in started:
            b.stop()


def kafka_python_config(broker, mechanism, ca, password=None):
    config = {"bootstrap_servers": broker.bootstrap_servers}
    config["security_protocol"] = broker.security_protocol
    if mechanism:
        config.update(
            sasl_mechanism=mechanism,
            sasl_plain_username="alice",
            sasl_plain_password=password or USERS["alice"],
        )
    if "SSL" in broker.security_protocol:
        config["ssl_cafile"] = ca
    return config


def confluent_config(broker, mechanism, ca, password=None):
    config = {
        "bootstrap.servers": broker.bootstrap_servers,
        "security.protocol": broker.security_protocol,
    }
    if mechanism:
        config.update(
            {
                "sasl.mechanisms": mechanism,
                "sasl.username": "alice",
                "sasl.password": password or USERS["alice"],
            }
        )
    if "SSL" in broker.security_protocol:
        config["ssl.ca.location"] = ca
    return config


def values(topic):
    return [f"{topic}-{i}".encode() for i in range(5)]


@pytest.mark.parametrize("protocol, mechanism", CASES, ids=CASE_IDS)
def test_kafka_python_over_each_protocol(brokers, tls_files, protocol, mechanism):  # noqa: F811
    kafka = pytest.importorskip("kafka")
    broker = brokers[protocol]
    config = kafka_python_config(broker, mechanism, tls_files.ca)
    topic = f"kp-{protocol}-{mechanism}".lower()
    producer = kafka.KafkaProducer(**config)
    try:
        for v in values(topic):
            producer.send(topic, v)
        producer.flush(TIMEOUT)
    finally:
        producer.close()
    consumer = kafka.KafkaConsumer(**config, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        consumer.assign([kafka.TopicPartition(topic, 0)])
        got = [m.value for _, m in zip(range(5), consumer)]
    finally:
        consumer.close()
    assert got == values(topic)


@pytest.mark.parametrize("protocol, mechanism", CASES, ids=CASE_IDS)
def test_aiokafka_over_each_protocol(brokers, tls_files, protocol, mechanism):  # noqa: F811
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.helpers import create_ssl_context

    broker = brokers[protocol]
    topic = f"ak-{protocol}-{mechanism}".lower()

    def config():
        out = {
            "bootstrap_servers": broker.bootstrap_servers,
            "security_protocol": protocol,
        }
        if mechanism:
            out.update(
                sasl_mechanism=mechanism,
                sasl_plain_username="alice",
                sasl_plain_password=USERS["alice"],
            )
        if "SSL" in protocol:
            out["ssl_context"] = create_ssl_context(cafile=tls_files.ca)
        return out

    async def run():
        producer = aiokafka.AIOKafkaProducer(**config())
        await producer.start()
        try:
            for v in values(topic):
                await producer.send_and_wait(topic, v)
        finally:
            await producer.stop()
        consumer = aiokafka.AIOKafkaConsumer(**config())
        await consumer.start()
        got = []
        try:
            tp = aiokafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            await consumer.seek_to_beginning(tp)
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 5 and time.monotonic() < deadline:
                for msgs in (await consumer.getmany(timeout_ms=500)).values():
                    got += [m.value for m in msgs]
        finally:
            await consumer.stop()
        return got

    assert asyncio.run(asyncio.wait_for(run(), TIMEOUT * 2)) == values(topic)


@pytest.mark.parametrize("protocol, mechanism", CASES, ids=CASE_IDS)
def test_confluent_over_each_protocol(brokers, tls_files, protocol, mechanism):  # noqa: F811
    ck = pytest.importorskip("confluent_kafka")
    broker = brokers[protocol]
    config = confluent_config(broker, mechanism, tls_files.ca)
    topic = f"ck-{protocol}-{mechanism}".lower()
    producer = ck.Producer({**config, "enable.idempotence": True})
    for v in values(topic):
        producer.produce(topic, v)
    assert producer.flush(TIMEOUT) == 0
    consumer = ck.Consumer({**config, "group.id": "unused", "enable.auto.commit": False})
    got = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < 5 and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is not None:
                assert m.error() is None, m.error()
                got.append(m.value())
    finally:
        consumer.close()
    assert got == values(topic)


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_a_wrong_password_is_refused_with_kafkas_error(brokers, tls_files, mechanism):  # noqa: F811
    ck = pytest.importorskip("confluent_kafka")
    broker = brokers["SASL_PLAINTEXT"]
    errors = []
    config = confluent_config(broker, mechanism, tls_files.ca, password="wrong")
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({**config, "error_cb": errors.append})
    future = admin.describe_cluster(request_timeout=2)
    with pytest.raises(ck.KafkaException):
        future.result()
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        admin.poll(0.2)
    assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION, errors
    expected = (
        "Invalid username or password"
        if mechanism == "PLAIN"
        else f"invalid credentials with SASL mechanism {mechanism}"
    )
    assert expected in errors[0].str(), errors[0].str()


def test_aiokafka_and_kafka_python_see_the_refusal(brokers, caplog):
    aiokafka = pytest.importorskip("aiokafka")
    kafka = pytest.importorskip("kafka")
    from aiokafka.errors import KafkaConnectionError as AioConnectionError
    from aiokafka.errors import SaslAuthenticationFailed

    broker = brokers["SASL_PLAINTEXT"]

    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password="wrong",
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises((SaslAuthenticationFailed, AioConnectionError)):
        asyncio.run(asyncio.wait_for(run(), TIMEOUT))
    # aiokafka logs the broker's answer, then says it could not bootstrap
    assert (
        "[Error 58] SaslAuthenticationFailed: Authentication failed during authentication "
        "due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    ) in caplog.text
    # kafka-python does not bootstrap, and logs the broker's error 58 and message
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(
            **kafka_python_config(broker, "PLAIN", None, password="wrong"),
            bootstrap_timeout_ms=2000,
        )
    assert "Authentication failed: Invalid username or password" in caplog.text


def test_requests_before_the_login_end_the_connection(brokers):
    """A client that skips the handshake (a PLAINTEXT client on a SASL listener) is closed."""
    from fastkwire import MetadataRequest, encode_request

    host, port = brokers["SASL_PLAINTEXT"].addresses[0]
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(encode_request(MetadataRequest(topics=None), 12, 1, "plain"))
        assert s.recv(100) == b""  # closed, no answer


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_plaintext_client_on_a_tls_listener_is_not_served(tls_files, loop):  # noqa: F811
    """Nothing is read before the TLS handshake (uvloop reads once after connection_made
    returns: the socket is handed to the handshake before that)."""
    if loop == "uvloop":
        pytest.importorskip("uvloop")
    from fastkwire import ApiVersionsRequest, encode_request

    tls = {"tls_cert": tls_files.server_cert, "tls_key": tls_files.server_key}
    with Broker(loop=loop, **tls) as broker:
        for _ in range(3):
            with socket.create_connection(broker.addresses[0], timeout=TIMEOUT) as s:
                s.sendall(encode_request(ApiVersionsRequest(), 3, 1, "plain"))
                try:
                    data = s.recv(100)
                except ConnectionError:
                    data = b""
                assert not data.startswith(b"\x00\x00"), data  # a TLS alert or the end


def test_tls_handshakes_count_and_are_bounded(tls_files):  # noqa: F811
    """Clients that never start their handshake count in max_connections from accept and
    end at frame_timeout; then a client that does is served."""
    kafka = pytest.importorskip("kafka")
    tls = {"tls_cert": tls_files.server_cert, "tls_key": tls_files.server_key}
    with Broker(max_connections=3, frame_timeout=3.0, **tls) as broker:
        idle = [socket.create_connection(broker.addresses[0], timeout=TIMEOUT) for _ in range(3)]
        try:
            with socket.create_connection(broker.addresses[0], timeout=TIMEOUT) as extra:
                assert extra.recv(10) == b""  # refused: three are held
            for s in idle:  # ... while they are still open
                s.setblocking(False)
                with pytest.raises(BlockingIOError):
                    s.recv(10)
                s.settimeout(TIMEOUT)
            for s in idle:
                assert s.recv(10) == b""  # each ended at frame_timeout
        finally:
            for s in idle:
                s.close()
        producer = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers,
            security_protocol="SSL",
            ssl_cafile=tls_files.ca,
        )
        try:
            assert producer.send("after", b"v").get(timeout=TIMEOUT).offset == 0
        finally:
            producer.close()


def test_fastkwire_describe_group_logs_in(brokers, tls_files, capsys, monkeypatch):  # noqa: F811
    kafka = pytest.importorskip("kafka")
    broker = brokers["SASL_SSL"]
    config = kafka_python_config(broker, "SCRAM-SHA-256", tls_files.ca)
    consumer = kafka.KafkaConsumer(
        "secured-topic", **config, group_id="secured", group_instance_id="member-1"
    )
    try:
        deadline = time.monotonic() + TIMEOUT
        while not consumer.assignment() and time.monotonic() < deadline:
            consumer.poll(200)
        assert consumer.assignment()
        monkeypatch.setenv("FASTKWIRE_SASL_PASSWORD", USERS["ops"])
        argv = [
            "describe-group",
            "--bootstrap-server",
            broker.bootstrap_servers,
            "--group",
            "secured",
            "--json",
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-username",
            "ops",
            "--ssl-cafile",
            tls_files.ca,
            "--timeout",
            "15",
        ]
        code = cli.main(argv)
        captured = capsys.readouterr()
        assert code == 0, captured.err
        described = json.loads(captured.out)
        members = described["members"] if "members" in described else described[0]["members"]
        assert [m.get("group_instance_id") for m in members] == ["member-1"]
        # a wrong password: the admin command says the broker refused it
        monkeypatch.setenv("FASTKWIRE_SASL_PASSWORD", "wrong")
        code = cli.main(argv)
        captured = capsys.readouterr()
        assert code != 0 and "invalid credentials" in captured.err, captured.err
    finally:
        consumer.close()


def test_the_command_takes_users_tls_and_faults_as_flags(tls_files, tmp_path):  # noqa: F811
    kafka = pytest.importorskip("kafka")
    rules = str(tmp_path / "rules.json")
    with open(rules, "w") as f:  # a rule that never fires (probability 0): counted all the same
        json.dump({"rules": [{"api": "Fetch", "delay_ms": 10, "probability": 0}]}, f)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "fastkwire",
            "broker",
            "--listen",
            "SASL_SSL://127.0.0.1:0",
            "--sasl-user",
            "alice:" + USERS["alice"],
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--tls-cert",
            tls_files.server_cert,
            "--tls-key",
            tls_files.server_key,
            "--fault",
            "api=ListGroups,error=CLUSTER_AUTHORIZATION_FAILED,times=1",
            "--rules",
            rules,
            "--seed",
            "3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line + proc.stderr.read()
        address = line.split()[-1]
        admin = kafka.KafkaAdminClient(
            bootstrap_servers=address,
            security_protocol="SASL_SSL",
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
            ssl_cafile=tls_files.ca,
        )
        try:
            with pytest.raises(kafka.errors.ClusterAuthorizationFailedError):
                admin.list_groups()
            assert not admin.list_groups()  # times=1: the second is answered
        finally:
            admin.close()
        proc.terminate()
        assert proc.wait(TIMEOUT) == 0
        assert "SASL_SSL (SCRAM-SHA-512), 2 fault rule(s)" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--sasl-user", "alice"], "--sasl-user: not NAME:PASSWORD"),
        (
            ["--listen", "SASL_SSL://127.0.0.1:0", "--sasl-user", "a:b"],
            "--tls-cert: a SASL_SSL listener needs",
        ),
        (["--listen", "FTP://127.0.0.1:0"], "is not [PROTOCOL://]HOST:PORT"),
        (["--sasl-mechanism", "PLAIN"], "--sasl-mechanism: given without --sasl-user"),
        (["--sasl-user", "a:b", "--scram-iterations", "10"], "--scram-iterations: from 4096"),
        (["--fault", "api=Fetch"], "a rule needs exactly one action"),
        (["--rules", "/nonexistent/rules.json"], "--rules"),
    ],
)
def test_the_command_names_the_flag_that_is_wrong(argv, message, capsys):
    try:
        code = cli.main(["broker", "--listen", "127.0.0.1:0", *argv])
    except SystemExit as e:  # argparse's own checks of a flag's form
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_a_frame_larger_than_a_login_needs_ends_the_connection(brokers):
    """Before the login, a size prefix over Kafka's sasl.server.max.receive.size (512 KiB)
    ends the connection before any of it is held; ApiVersions is answered meanwhile."""
    from fastkwire import ApiVersionsRequest, decode_response, encode_request

    host, port = brokers["SASL_PLAINTEXT"].addresses[0]
    with socket.create_connection((host, port), timeout=TIMEOUT) as s:
        s.sendall(encode_request(ApiVersionsRequest(), 3, 1, "t"))
        size = int.from_bytes(s.recv(4), "big")
        data = b""
        while len(data) < size:
            data += s.recv(size - len(data))
        api_keys = {
            k.api_key for k in decode_response(size.to_bytes(4, "big") + data, 18, 3)[1].api_keys
        }
        assert {17, 36} <= api_keys  # SaslHandshake and SaslAuthenticate are listed
        s.sendall((524288 + 1).to_bytes(4, "big"))
        assert s.recv(10) == b""


def test_client_certificates_when_a_ca_is_given(tls_files):  # noqa: F811
    kafka = pytest.importorskip("kafka")
    with Broker(
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        tls_client_cafile=tls_files.ca,
    ) as broker:
        config = {
            "bootstrap_servers": broker.bootstrap_servers,
            "security_protocol": "SSL",
            "ssl_cafile": tls_files.ca,
        }
        signed = kafka.KafkaProducer(
            **config,
            ssl_certfile=tls_files.client_cert,
            ssl_keyfile=tls_files.client_key,
            ssl_password=tls_files.key_password,
        )
        try:
            assert signed.send("mtls", b"v", partition=0).get(timeout=TIMEOUT).offset == 0
        finally:
            signed.close()
        # no client certificate: refused in the handshake (TLS 1.3: at the first read)
        from fastkwire import ApiVersionsRequest, encode_request

        context = ssl.create_default_context(cafile=tls_files.ca)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with socket.create_connection(broker.addresses[0], timeout=TIMEOUT) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(encode_request(ApiVersionsRequest(), 3, 1, "t"))
                    if not s.recv(10):
                        raise ConnectionError("closed without an answer")


def test_a_sasl_ssl_listener_asks_for_a_login_not_a_client_certificate(tls_files):  # noqa: F811
    """Kafka ignores ssl.client.auth on SASL_SSL listeners (KIP-684): with a client CA
    given, an SSL listener of the same node still wants a certificate, a SASL_SSL one a
    login only."""
    kafka = pytest.importorskip("kafka")
    with Broker(
        protocols=("SSL", "SASL_SSL"),
        users=USERS,
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
        tls_client_cafile=tls_files.ca,
    ) as broker:
        producer = kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_servers_for("SASL_SSL"),
            security_protocol="SASL_SSL",
            ssl_cafile=tls_files.ca,
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="alice",
            sasl_plain_password=USERS["alice"],
        )
        try:
            assert producer.send("kip684", b"v", partition=0).get(timeout=TIMEOUT).offset == 0
        finally:
            producer.close()
        from fastkwire import ApiVersionsRequest, encode_request

        host, port = broker.bootstrap_servers_for("SSL").split(",")[0].rsplit(":", 1)
        context = ssl.create_default_context(cafile=tls_files.ca)
        with pytest.raises((ssl.SSLError, ConnectionError)):
            with socket.create_connection((host, int(port)), timeout=TIMEOUT) as raw:
                with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
                    s.sendall(encode_request(ApiVersionsRequest(), 3, 1, "t"))
                    if not s.recv(10):
                        raise ConnectionError("closed without an answer")


def test_static_members_removed_by_instance_id_over_sasl_ssl(
    brokers, tls_files, capsys, monkeypatch
):  # noqa: F811
    """The admin path over SASL_SSL with a broker that keeps SCRAM credentials and instance
    ids (test_admin_gateway.py puts a gateway in front of Tansu, which has neither):
    describe-group shows each member's group.instance.id, remove-members --instance-id
    (settings from --command-config) takes one out, and the others share its partition
    well inside the session timeout."""
    from broker import StaticGroup

    broker = brokers["SASL_SSL"]
    session_timeout_s = 30
    group = StaticGroup(
        broker.bootstrap_servers,
        "secured-static",
        "secured-static-topic",
        3,
        session_timeout_ms=session_timeout_s * 1000,
        config={
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "alice",
            "sasl.password": USERS["alice"],
            "ssl.ca.location": tls_files.ca,
        },
    )
    try:
        assert group.wait_until(group.all_assigned, TIMEOUT), [
            c.last_assignment() for c in group.consumers
        ]
        settings = [
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--sasl-username",
            "ops",
            "--ssl-cafile",
            tls_files.ca,
            "--timeout",
            "15",
        ]
        monkeypatch.setenv("FASTKWIRE_SASL_PASSWORD", USERS["ops"])
        code = cli.main(
            ["describe-group", "--bootstrap-server", broker.bootstrap_servers]
            + ["--group", "secured-static", "--json", *settings]
        )
        captured = capsys.readouterr()
        assert code == 0, captured.err
        members = json.loads(captured.out)["members"]
        assert sorted(m["group_instance_id"] for m in members) == sorted(
            c.instance_id for c in group.consumers
        )
        victim, others = group.consumers[-1], group.consumers[:-1]
        victim.pause_polling()  # gone without leaving, as a killed process is
        paused = time.monotonic()
        config = tmp_config(tls_files)
        code = cli.main(
            ["remove-members", "--bootstrap-server", broker.bootstrap_servers]
            + ["--group", "secured-static", "--instance-id", victim.instance_id]
            + ["--command-config", config, "--timeout", "15"]
        )
        captured = capsys.readouterr()
        assert code == 0, captured.out + captured.err
        assert "1 of 1 members removed." in captured.out
        assert group.wait_until(
            lambda: sorted(p for c in others for p in c.assigned_since(paused) or ()) == [0, 1, 2],
            session_timeout_s / 2,
        ), [c.last_assignment() for c in others]
    finally:
        group.close()


def tmp_config(tls_files):  # noqa: F811
    path = os.path.join(tls_files.dir, "admin.properties")
    with open(path, "w") as f:
        f.write(
            "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule "
            f'required username="ops" password="{USERS["ops"]}";\n'
            f"ssl.truststore.type=PEM\nssl.truststore.location={tls_files.ca}\n"
        )
    return path


def test_describe_configs_shows_the_listeners_protocol(brokers, tls_files):  # noqa: F811
    pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource

    broker = brokers["SASL_SSL"]
    admin = AdminClient(confluent_config(broker, "PLAIN", tls_files.ca))
    (future,) = admin.describe_configs([ConfigResource("BROKER", "0")]).values()
    configs = future.result(TIMEOUT)
    host, port = broker.addresses[0]
    assert configs["listeners"].value == f"SASL_SSL://{host}:{port}"


def test_scram_users_added_and_removed_at_run_time(brokers, tls_files):  # noqa: F811
    """KIP-554 through kafka-python's admin: a user added with AlterUserScramCredentials
    logs in with SCRAM at once (kafka-python and confluent-kafka), is described with its
    mechanisms and iterations, and is refused once deleted; Kafka's errors for the rest."""
    kafka = pytest.importorskip("kafka")
    ck = pytest.importorskip("confluent_kafka")
    from kafka.admin import UserScramCredentialDeletion as Deletion
    from kafka.admin import UserScramCredentialUpsertion as Upsertion

    broker = brokers["SASL_PLAINTEXT"]
    admin = kafka.KafkaAdminClient(**kafka_python_config(broker, "PLAIN", None))
    try:
        assert admin.alter_user_scram_credentials(
            [Upsertion("carol", "SCRAM-SHA-512", "carol-Pass", iterations=8192)]
        ) == {"carol": None}
        assert admin.alter_user_scram_credentials(
            [Upsertion("carol", "SCRAM-SHA-256", "carol-Pass")]
        ) == {"carol": None}
        described = admin.describe_user_scram_credentials(["carol", "nobody"])
        assert sorted(
            (int(c["mechanism"]), c["iterations"]) for c in described["carol"]["credential_infos"]
        ) == [(1, 4096), (2, 8192)]
        assert described["nobody"]["error"] == (
            "Attempt to describe a user credential that does not exist: nobody"
        )
        assert set(admin.describe_user_scram_credentials()) >= {"alice", "ops", "carol"}
        # Kafka's refusals, per user, nothing applied for them
        assert admin.alter_user_scram_credentials(
            [
                Upsertion("dave", "SCRAM-SHA-256", "x", iterations=1000),
                Deletion("erin", "SCRAM-SHA-256"),
                Upsertion("frank", "SCRAM-SHA-256", "x"),
                Upsertion("frank", "SCRAM-SHA-512", "x"),  # one change per user and request
            ]
        ) == {
            "dave": "Too few iterations",
            "erin": "Attempt to delete a user credential that does not exist",
            "frank": "A user credential cannot be altered twice in the same request",
        }
        for mechanism in ("SCRAM-SHA-512", "SCRAM-SHA-256"):
            producer = kafka.KafkaProducer(
                bootstrap_servers=broker.bootstrap_servers,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism,
                sasl_plain_username="carol",
                sasl_plain_password="carol-Pass",
            )
            try:
                producer.send("carols", b"v").get(timeout=TIMEOUT)
            finally:
                producer.close()
        consumer = ck.Consumer(
            {
                **confluent_config(broker, "SCRAM-SHA-512", None),
                "sasl.username": "carol",
                "sasl.password": "carol-Pass",
                "group.id": "unused",
            }
        )
        try:
            assert consumer.get_watermark_offsets(ck.TopicPartition("carols", 0), TIMEOUT) == (
                0,
                2,
            )
        finally:
            consumer.close()
        assert admin.alter_user_scram_credentials([Deletion("carol", "SCRAM-SHA-512")]) == {
            "carol": None
        }
    finally:
        admin.close()
    errors = []
    from confluent_kafka.admin import AdminClient

    refused = AdminClient(
        {
            **confluent_config(broker, "SCRAM-SHA-512", None),
            "sasl.username": "carol",
            "sasl.password": "carol-Pass",
            "error_cb": errors.append,
        }
    )
    with pytest.raises(ck.KafkaException):
        refused.describe_cluster(request_timeout=2).result()
    deadline = time.monotonic() + TIMEOUT
    while not errors and time.monotonic() < deadline:
        refused.poll(0.2)  # error_cb is called from poll
    assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION

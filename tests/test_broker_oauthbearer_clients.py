"""The broker's SASL OAUTHBEARER and KIP-368 re-authentication with real clients over
127.0.0.1: kafka-python, aiokafka and confluent-kafka log in with unsecured JWS tokens
(librdkafka's own `sasl.oauthbearer.config` among them) and produce and consume; a bad
token is refused with RFC 7628's error; the token's subject is the principal the
authorizer checks; librdkafka and kafka-python re-authenticate on the same connection, and a
connection that does not is closed once its session ends. Without a socket:
test_broker_oauthbearer.py."""

import asyncio
import base64
import json
import math
import os
import random
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fastkwire import (
    DescribeClusterRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    decode_response,
    encode_request,
)
from fastkwire.broker import Authorizer, UnsecuredValidator
from fastkwire.testing import Broker

TIMEOUT = 20


def b64(value):
    return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()


def unsecured(sub, life=3600.0, **claims):
    now = time.time()
    # iat in whole seconds, as JWTs have it: a fraction could be ahead of the broker's ms;
    # exp in whole ms, not past now + life: the broker rounds it to ms as Kafka does, so a
    # fraction of a ms could make a token made in the broker's same ms last a ms longer
    exp = math.floor((now + life) * 1000) / 1000
    payload = {"sub": sub, "iat": int(now), "exp": exp, **claims}
    return f"{b64({'alg': 'none'})}.{b64(payload)}."


class Counting:
    """Kafka's unsecured validation, counting the tokens it is given."""

    def __init__(self):
        self.validator = UnsecuredValidator()
        self.tokens = []

    def __call__(self, token):
        self.tokens.append(token)
        return self.validator(token)


@pytest.fixture(scope="module")
def broker():
    # alice may do everything; anyone else only what an ACL allows (none here)
    with Broker(oauthbearer=True, authorizer=Authorizer(super_users=["User:alice"])) as b:
        yield b


def values(topic):
    return [f"{topic}-{i}".encode() for i in range(5)]


def kafka_python_provider(kafka_token):
    from kafka.net.sasl.oauth import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        def token(self):
            return kafka_token()

    return Provider()


def kafka_python_config(broker, token):
    return {
        "bootstrap_servers": broker.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": kafka_python_provider(token),
    }


def test_kafka_python_logs_in_with_a_token_and_is_alice(broker):
    kafka = pytest.importorskip("kafka")
    config = kafka_python_config(broker, lambda: unsecured("alice"))
    topic = "kp-oauth"
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


def test_the_tokens_subject_is_the_principal_the_authorizer_checks(broker):
    kafka = pytest.importorskip("kafka")
    config = kafka_python_config(broker, lambda: unsecured("mallory"))
    producer = kafka.KafkaProducer(**config, max_block_ms=3000)
    try:
        with pytest.raises(kafka.errors.KafkaError) as e:
            producer.send("kp-oauth-denied", b"x").get(TIMEOUT)
        assert "Authorization" in type(e.value).__name__ or "AUTHORIZATION" in str(e.value)
    finally:
        producer.close()


def test_kafka_python_is_refused_an_expired_token_with_rfc7628s_error(broker, caplog):
    kafka = pytest.importorskip("kafka")
    config = kafka_python_config(broker, lambda: unsecured("alice", life=-5))
    with pytest.raises(kafka.errors.KafkaError):
        kafka.KafkaProducer(**config, bootstrap_timeout_ms=2000)
    assert '{"status":"invalid_token"}' in caplog.text


def test_aiokafka_logs_in_with_a_token(broker):
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.abc import AbstractTokenProvider

    class Provider(AbstractTokenProvider):
        async def token(self):
            return unsecured("alice")

    topic = "ak-oauth"

    def config():
        return {
            "bootstrap_servers": broker.bootstrap_servers,
            "security_protocol": "SASL_PLAINTEXT",
            "sasl_mechanism": "OAUTHBEARER",
            "sasl_oauth_token_provider": Provider(),
        }

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


def confluent_config(broker, **more):
    return {
        "bootstrap.servers": broker.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        **more,
    }


def produce_and_consume(ck, config, topic):
    producer = ck.Producer(config)
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
    return got


def test_librdkafkas_own_unsecured_jwt_logs_in(broker):
    ck = pytest.importorskip("confluent_kafka")
    config = confluent_config(
        broker,
        **{
            "enable.sasl.oauthbearer.unsecure.jwt": True,
            "sasl.oauthbearer.config": "principal=alice scope=read,write",
        },
    )
    assert produce_and_consume(ck, config, "ck-oauth") == values("ck-oauth")


def test_confluent_oauth_cb_and_a_validator_of_the_tests_own():
    ck = pytest.importorskip("confluent_kafka")
    seen = []

    def validate(token):
        seen.append(token)
        if token != "opaque-token-1":
            raise ValueError("not ours")
        return "carol"

    with Broker(oauthbearer=validate) as b:
        config = confluent_config(
            b, oauth_cb=lambda _config: ("opaque-token-1", time.time() + 3600, "carol")
        )
        assert produce_and_consume(ck, config, "ck-oauth-cb") == values("ck-oauth-cb")
        assert seen and set(seen) == {"opaque-token-1"}
        errors = []
        bad = confluent_config(
            b,
            oauth_cb=lambda _config: ("stolen", time.time() + 3600, "carol"),
            error_cb=errors.append,
        )
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(bad)
        with pytest.raises(ck.KafkaException):
            admin.describe_cluster(request_timeout=2).result()
        deadline = time.monotonic() + TIMEOUT
        while not errors and time.monotonic() < deadline:
            admin.poll(0.2)
        assert errors and errors[0].code() == ck.KafkaError._AUTHENTICATION, errors
        assert "invalid_token" in errors[0].str(), errors[0].str()


# ---- KIP-368


def assert_re_authenticated(b, counting):
    """Some connection logged in again on itself (KIP-368), not on a new connection."""
    sessions = b.call(lambda: [c.sasl for c in b.broker.connections])  # on its loop
    again = [s for s in sessions if s.reauth_began is not None]
    assert again, (len(counting.tokens), len(sessions))
    assert len(counting.tokens) > len(sessions)


def test_librdkafka_re_authenticates_on_its_connection():
    ck = pytest.importorskip("confluent_kafka")
    counting = Counting()
    with Broker(oauthbearer=counting, connections_max_reauth_ms=1500) as b:
        config = confluent_config(
            b,
            **{
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=alice",
            },
        )
        producer = ck.Producer(config)
        deadline = time.monotonic() + 5
        sent = 0
        while time.monotonic() < deadline:
            producer.produce("ck-reauth", b"%d" % sent)
            sent += 1
            producer.poll(0.25)
        assert producer.flush(TIMEOUT) == 0
        assert sent > 10  # every record produced was acknowledged (flush returned 0)
        assert_re_authenticated(b, counting)


def test_kafka_python_re_authenticates_on_its_connection():
    kafka = pytest.importorskip("kafka")
    counting = Counting()
    with Broker(oauthbearer=counting, connections_max_reauth_ms=1200) as b:
        producer = kafka.KafkaProducer(**kafka_python_config(b, lambda: unsecured("alice")))
        try:
            deadline = time.monotonic() + 4
            while time.monotonic() < deadline:
                producer.send("kp-reauth", b"x").get(TIMEOUT)
                time.sleep(0.2)
            assert_re_authenticated(b, counting)
        finally:
            producer.close()


def _frame(sock):
    head = _recv(sock, 4)
    return None if head is None else head + _recv(sock, struct.unpack(">i", head)[0])


def _recv(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def _login(sock, token, correlation_id=1):
    sock.sendall(encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, correlation_id))
    assert decode_response(_frame(sock), 17, 1)[1].error_code == 0
    data = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    sock.sendall(encode_request(SaslAuthenticateRequest(auth_bytes=data), 2, correlation_id + 1))
    return decode_response(_frame(sock), 36, 2)[1]


def test_a_session_not_re_authenticated_is_closed_at_its_next_request():
    with Broker(oauthbearer=True, connections_max_reauth_ms=60_000) as b:
        host, port = b.bootstrap_servers.split(":")
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
            response = _login(sock, unsecured("alice", life=1.0))
            assert response.error_code == 0 and 0 < response.session_lifetime_ms <= 1000
            sock.sendall(encode_request(MetadataRequest(topics=None), 12, 3))
            assert _frame(sock) is not None  # served while the session lasts
            time.sleep(1.2)
            # a re-authentication on the same connection is still taken...
            response = _login(sock, unsecured("alice", life=0.5), 4)
            assert response.error_code == 0 and response.session_lifetime_ms <= 500
            time.sleep(0.7)
            # ...but a request after the session's end closes the connection, unanswered
            sock.sendall(encode_request(MetadataRequest(topics=None), 12, 6))
            assert _frame(sock) is None


def test_the_command_serves_oauthbearer_and_re_authentication():
    ck = pytest.importorskip("confluent_kafka")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    argv = [sys.executable, "-m", "fastkwire", "broker", "--listen", "127.0.0.1:0"]
    argv += ["--sasl-mechanism", "OAUTHBEARER", "--oauthbearer-principal-claim", "client_id"]
    argv += ["--oauthbearer-required-scope", "kafka", "--connections-max-reauth-ms", "60000"]
    proc = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on 127.0.0.1:"), line + proc.stderr.read()
        host, port = line.split()[-1].split(":")
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
            token = unsecured("x", client_id="svc", scope=["kafka", "other"], life=30)
            response = _login(sock, token)
            assert response.error_code == 0 and 29_000 < response.session_lifetime_ms <= 30_000
        with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
            # Kafka reads a text scope as one scope, not split at spaces
            response = _login(sock, unsecured("x", client_id="svc", scope="kafka other"))
            assert response.auth_bytes == b'{"status":"insufficient_scope", "scope":"[kafka]"}'
        config = confluent_config(
            Address(line.split()[-1]),
            **{
                "enable.sasl.oauthbearer.unsecure.jwt": True,
                "sasl.oauthbearer.config": "principal=svc principalClaimName=client_id scope=kafka",
            },
        )
        assert produce_and_consume(ck, config, "ck-cli") == values("ck-cli")
        proc.terminate()
        assert proc.wait(TIMEOUT) == 0
        assert "SASL_PLAINTEXT (OAUTHBEARER)" in proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()


class Address:
    def __init__(self, bootstrap_servers):
        self.bootstrap_servers = bootstrap_servers


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--oauthbearer-clock-skew-ms", "5"], "--oauthbearer-clock-skew-ms: given without"),
        (
            ["--sasl-mechanism", "OAUTHBEARER", "--oauthbearer-clock-skew-ms", "-1"],
            "--oauthbearer-clock-skew-ms: from 0",
        ),
        (
            ["--sasl-mechanism", "OAUTHBEARER", "--oauthbearer-required-scope", "a\\b"],
            "--oauthbearer-required-scope: invalid scope value",
        ),
        (
            ["--sasl-mechanism", "OAUTHBEARER", "--oauthbearer-principal-claim", " "],
            "--oauthbearer-principal-claim: a claim's name",
        ),
        (
            ["--sasl-mechanism", "OAUTHBEARER", "--connections-max-reauth-ms", "-5"],
            "--connections-max-reauth-ms: 0 (off) or more",
        ),
        (["--sasl-mechanism", "OAUTHBEARER", "--sasl-mechanism", "PLAIN"], "--sasl-user: "),
    ],
)
def test_the_command_names_the_oauthbearer_flag_that_is_wrong(argv, message, capsys):
    from fastkwire import cli

    try:
        code = cli.main(["broker", "--listen", "127.0.0.1:0", *argv])
    except SystemExit as e:
        code = e.code
    assert code == 2
    assert message in capsys.readouterr().err


def test_hostile_oauthbearer_logins_end_only_their_own_connection():
    """Bad tokens and mangled messages over real connections: none is served a request
    after its login (DescribeCluster gets ILLEGAL_SASL_STATE or the end), and a client
    logged in beside them is served throughout."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
    try:
        import differential as D
        import hostile_sasl as H
    finally:
        sys.path.pop(0)
    rng = random.Random(11)
    validator = UnsecuredValidator(clock=lambda: H.NOW)  # the fuzzer's tokens' clock
    with Broker(oauthbearer=validator) as b:
        host, port = b.bootstrap_servers.split(":")
        good = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        with good:
            assert _login(good, H._token(random.Random(0), "alice")).error_code == 0
            served = refused = 0
            for i in range(80):
                data = H._OAuthClient(H._token(rng, "alice")).start()
                if rng.random() < 0.6:
                    data = bytes(D.mutate(data, rng))
                with socket.create_connection((host, int(port)), timeout=TIMEOUT) as sock:
                    out = _try_login(sock, data)
                    ask = encode_request(DescribeClusterRequest(), 0, 9)
                    answer = _send(sock, ask)
                    logged_in = (
                        answer is not None and decode_response(answer, 60, 0)[1].error_code == 0
                    )
                    assert logged_in == (out == "logged in"), (i, data)
                    if logged_in:
                        # never a bad token (a good one may name alice and more)
                        named = ["alice", *("alice" + odd for odd in H.ODD_TEXT)]
                        assert any(H._holds(data, n) for n in named), (i, data)
                        served += 1
                    else:
                        refused += 1
                # the client beside them is still served
                answer = _send(good, encode_request(DescribeClusterRequest(), 0, 100 + i))
                assert decode_response(answer, 60, 0)[1].error_code == 0
            assert served and refused > served
        deadline = time.monotonic() + TIMEOUT  # nothing held after: every connection ended
        while b.call(lambda: len(b.broker.connections)) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert b.call(lambda: len(b.broker.connections)) == 0


def _send(sock, frame):
    try:
        sock.sendall(frame)
        return _frame(sock)
    except OSError:  # reset by the broker's end of it
        return None


def _try_login(sock, data):
    answer = _send(sock, encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, 1))
    assert decode_response(answer, 17, 1)[1].error_code == 0
    answer = _send(sock, encode_request(SaslAuthenticateRequest(auth_bytes=data), 2, 2))
    if answer is None:
        return "closed"
    response = decode_response(answer, 36, 2)[1]
    if response.error_code:
        return "refused"
    if response.auth_bytes:  # RFC 7628's error: the client's ^A ends it
        answer = _send(sock, encode_request(SaslAuthenticateRequest(auth_bytes=b"\x01"), 2, 3))
        assert answer is None or decode_response(answer, 36, 2)[1].error_code == 58
        return "refused"
    return "logged in"


def test_aiokafka_is_not_served_with_an_expired_token(broker):
    # aiokafka takes RFC 7628's error challenge for the end of the login and sends its
    # Metadata request: Kafka, as this broker, answers it ILLEGAL_SASL_STATE and closes
    aiokafka = pytest.importorskip("aiokafka")
    from aiokafka.abc import AbstractTokenProvider
    from aiokafka.errors import KafkaError

    class Provider(AbstractTokenProvider):
        async def token(self):
            return unsecured("alice", life=-5)

    async def run():
        producer = aiokafka.AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap_servers,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Provider(),
        )
        try:
            await producer.start()
        finally:
            await producer.stop()

    with pytest.raises(KafkaError):
        asyncio.run(asyncio.wait_for(run(), TIMEOUT))

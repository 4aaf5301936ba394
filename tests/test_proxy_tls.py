"""The proxy's TLS, each side on its own: clients over TLS to the proxy, the proxy over TLS
to a TLS listener (fastkwire's broker on a SASL_SSL listener), SASL_SSL end to end with SASL
passed through untouched, a wrong upstream certificate refused with a line that says so, and
the raw tokens after a v0 SaslHandshake forwarded unpaired."""

import socket
import struct
import threading
import time
from types import SimpleNamespace

import pytest

import fastkwire as fk
from fastkwire.connection import make_tls_context
from fastkwire.proxy import BackgroundProxy, CaptureWriter, ProxyEvent, read_capture

from fastkwire.testing import Broker

from broker import tansu_broker  # noqa: F401 - tansu_broker is a fixture
from certs import server_context, tls_files  # noqa: F401 - tls_files is a fixture
from cluster import free_port_range

SIZE = struct.Struct(">i")
TIMEOUT = 30
PASSWORD = "proxy-Pass-31c"
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36


@pytest.fixture(scope="module")
def secured(tls_files):  # noqa: F811
    with Broker(
        users={"app": PASSWORD},
        sasl_mechanisms=["PLAIN", "SCRAM-SHA-512"],
        tls_cert=tls_files.server_cert,
        tls_key=tls_files.server_key,
    ) as broker:
        assert broker.security_protocol == "SASL_SSL"
        yield SimpleNamespace(port=broker.addresses[0][1], files=tls_files)


def upstream_context(files, ca=None):
    return make_tls_context(ca or files.ca, None, None, None, True)


def produce_and_consume(bootstrap, config, topic, count=5):
    """confluent-kafka: `count` records produced to partition 0 and read back (assigned, no
    group join)."""
    ck = pytest.importorskip("confluent_kafka")
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, **config})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(TIMEOUT)
    producer = ck.Producer({"bootstrap.servers": bootstrap, **config})
    for i in range(count):
        producer.produce(topic, value=f"v{i}".encode(), partition=0)
    assert producer.flush(TIMEOUT) == 0
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "unused",
            "enable.auto.commit": False,
            **config,
        }
    )
    got = []
    try:
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
    finally:
        consumer.close()
    return got


def test_sasl_ssl_end_to_end_tls_on_both_sides(secured, tmp_path):
    files = secured.files
    captured = tmp_path / "tls.jsonl"
    writer = CaptureWriter(str(captured))
    with BackgroundProxy(
        f"127.0.0.1:{secured.port}",
        broker_ports=free_port_range(2),
        tls=server_context(files),
        upstream_tls=upstream_context(files),
        on_exchange=writer.write,
    ) as proxy:
        config = {
            "security.protocol": "SASL_SSL",
            "sasl.mechanisms": "SCRAM-SHA-512",
            "sasl.username": "app",
            "sasl.password": PASSWORD,
            "ssl.ca.location": files.ca,
        }
        topic = f"tls-both-{time.monotonic_ns()}"
        assert produce_and_consume(proxy.bootstrap, config, topic) == [f"v{i}" for i in range(5)]
        wanted = {"SaslHandshake", "SaslAuthenticate", "Produce", "Fetch"}
        deadline = time.monotonic() + TIMEOUT  # the last exchange is told just after its bytes
        while not wanted <= {e.api for e in proxy.exchanges()} and time.monotonic() < deadline:
            time.sleep(0.02)
        exchanges = proxy.exchanges()
        assert wanted <= {e.api for e in exchanges}, sorted({e.api for e in exchanges})
        assert all(e.broker == f"127.0.0.1:{secured.port}" for e in exchanges)
        assert any("over TLS" in e.text for e in proxy.events())
    writer.close()
    # The capture holds the decrypted frames, SASL's included, as they went.
    back = list(read_capture(str(captured)))
    sasl = [e for e in back if e.api_key == SASL_AUTHENTICATE]
    assert sasl and all(e.error_codes() == [] for e in sasl)
    assert any(e.api == "Produce" and e.response is not None for e in back)


def test_a_client_over_tls_to_a_plaintext_broker(tansu_broker, tls_files):  # noqa: F811
    with BackgroundProxy(
        tansu_broker.bootstrap, broker_ports=free_port_range(2), tls=server_context(tls_files)
    ) as proxy:
        config = {"security.protocol": "SSL", "ssl.ca.location": tls_files.ca}
        topic = f"tls-client-{time.monotonic_ns()}"
        assert produce_and_consume(proxy.bootstrap, config, topic, 3) == ["v0", "v1", "v2"]
        # A plaintext client cannot talk to the TLS listener.
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            s.sendall(fk.encode_request(fk.ApiVersionsRequest(), 0, 1, "plain"))
            s.settimeout(5)
            try:
                data = s.recv(4096)
            except (ConnectionError, socket.timeout):
                data = b""
            assert not data.startswith(b"\x00\x00")  # no Kafka answer


def test_sasl_plaintext_client_through_a_tls_upstream(secured):
    """A plaintext client, the proxy originating TLS: SASL (PLAIN) passes through as it is."""
    with BackgroundProxy(
        f"127.0.0.1:{secured.port}",
        broker_ports=free_port_range(2),
        upstream_tls=upstream_context(secured.files),
    ) as proxy:
        config = {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanisms": "PLAIN",
            "sasl.username": "app",
            "sasl.password": PASSWORD,
        }
        topic = f"tls-upstream-{time.monotonic_ns()}"
        assert produce_and_consume(proxy.bootstrap, config, topic, 2) == ["v0", "v1"]
        handshakes = [e for e in proxy.exchanges() if e.api_key == SASL_HANDSHAKE]
        assert handshakes and all(e.upstream_response is None for e in handshakes)


def test_kafka_python_sasl_ssl_through_the_proxy(secured):
    kafka = pytest.importorskip("kafka")
    files = secured.files
    with BackgroundProxy(
        f"127.0.0.1:{secured.port}",
        broker_ports=free_port_range(2),
        tls=server_context(files),
        upstream_tls=upstream_context(files),
    ) as proxy:
        config = dict(
            bootstrap_servers=proxy.bootstrap,
            security_protocol="SASL_SSL",
            ssl_cafile=files.ca,
            sasl_mechanism="SCRAM-SHA-512",
            sasl_plain_username="app",
            sasl_plain_password=PASSWORD,
        )
        topic = f"tls-kafka-python-{time.monotonic_ns()}"
        producer = kafka.KafkaProducer(**config)
        try:
            producer.send(topic, b"one", partition=0).get(TIMEOUT)
        finally:
            producer.close(TIMEOUT)
        consumer = kafka.KafkaConsumer(**config, enable_auto_commit=False)
        try:
            tp = kafka.TopicPartition(topic, 0)
            consumer.assign([tp])
            consumer.seek_to_beginning(tp)
            got = []
            deadline = time.monotonic() + TIMEOUT
            while not got and time.monotonic() < deadline:
                for records in consumer.poll(500).values():
                    got += [r.value for r in records]
        finally:
            consumer.close()
        assert got == [b"one"]


def test_a_wrong_upstream_certificate_is_refused_with_a_clear_line(secured):
    with BackgroundProxy(
        f"127.0.0.1:{secured.port}",
        upstream_tls=upstream_context(secured.files, secured.files.other_ca),
    ) as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            s.settimeout(TIMEOUT)
            assert s.recv(10) == b""  # closed: no upstream
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            errors = [e.text for e in proxy.events() if e.kind == ProxyEvent.ERROR]
            if errors:
                break
            time.sleep(0.05)
        assert errors, proxy.events()
        assert errors[0].startswith(f"upstream 127.0.0.1:{secured.port}: TLS: ")
        assert "certificate was refused" in errors[0]
        assert "upstream CA" in errors[0]


def test_the_cli_names_its_tls_files(tmp_path, tls_files):  # noqa: F811
    from fastkwire.cli import main

    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        code = main(
            [
                "proxy",
                "--upstream",
                "127.0.0.1:1",
                "--upstream-tls",
                "--ssl-cafile",
                str(tmp_path / "none.pem"),
            ]
        )
        raise SystemExit(code)
    assert exit_.value.code == 2
    assert "--ssl-cafile" in err.getvalue() and "no such file" in err.getvalue()
    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(SystemExit) as exit_:
        raise SystemExit(main(["proxy", "--upstream", "127.0.0.1:1", "--ssl-cafile", tls_files.ca]))
    assert exit_.value.code == 2
    assert "--ssl-cafile without --upstream-tls" in err.getvalue()


# ---------------------------------------------------------------- v0 SaslHandshake: raw tokens


class LegacySasl:
    """A broker that takes SaslHandshake v0, then one raw PLAIN token (no Kafka header),
    answers it with an empty raw token, then answers ApiVersions."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.tokens = []
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        conn, _ = self.sock.accept()
        with conn:
            conn.settimeout(TIMEOUT)
            frame = _frame(conn)
            header, _ = fk.decode_request(frame)
            conn.sendall(
                fk.encode_response(
                    fk.SaslHandshakeResponse(error_code=0, mechanisms=["PLAIN"]),
                    0,
                    header.correlation_id,
                )
            )
            self.tokens.append(_frame(conn))
            conn.sendall(SIZE.pack(0))  # the empty token: authenticated
            frame = _frame(conn)
            header, _ = fk.decode_request(frame)
            conn.sendall(fk.encode_response(fk.ApiVersionsResponse(), 0, header.correlation_id))
            time.sleep(0.5)


def _frame(conn):
    head = _read(conn, 4)
    return head + _read(conn, SIZE.unpack(head)[0])


def _read(conn, n):
    out = b""
    while len(out) < n:
        chunk = conn.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return out


def test_raw_tokens_after_a_v0_handshake_are_forwarded_and_recorded_unpaired():
    broker = LegacySasl()
    token = b"\x00app\x00" + PASSWORD.encode()
    with BackgroundProxy(f"127.0.0.1:{broker.port}") as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            s.settimeout(TIMEOUT)
            s.sendall(fk.encode_request(fk.SaslHandshakeRequest(mechanism="PLAIN"), 0, 1, "legacy"))
            _frame(s)
            s.sendall(SIZE.pack(len(token)) + token)
            assert _frame(s) == SIZE.pack(0)
            s.sendall(fk.encode_request(fk.ApiVersionsRequest(), 0, 2, "legacy"))
            _, answer = fk.decode_response(_frame(s), 18, 0)
            assert answer.error_code == 0
        broker.thread.join(TIMEOUT)
        assert broker.tokens == [SIZE.pack(len(token)) + token]  # byte for byte
        deadline = time.monotonic() + TIMEOUT
        while len(proxy.exchanges()) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert [e.api for e in proxy.exchanges()] == ["SaslHandshake", "ApiVersions"]
        tokens = [e for e in proxy.events() if e.kind == ProxyEvent.TOKEN]
        assert [(e.from_client, e.frame) for e in tokens] == [
            (True, SIZE.pack(len(token)) + token),
            (False, SIZE.pack(0)),
        ]
        assert not [e for e in proxy.events() if e.kind == ProxyEvent.ERROR]


def test_tls_clients_count_from_accept_and_a_handshake_is_bounded(tls_files):  # noqa: F811
    """max_connections counts a client from the moment it is accepted, its TLS handshake
    included, and a handshake takes at most connect_timeout: of 20 connections that never
    start one, under a limit of 5, 15 are refused at once and 5 time out; then a client
    that does its handshake is served."""
    from test_proxy_hostile import FakeBroker, request

    broker = FakeBroker()
    try:
        with BackgroundProxy(
            f"127.0.0.1:{broker.port}",
            tls=server_context(tls_files),
            max_connections=5,
            connect_timeout=1.0,
        ) as proxy:
            silent = [socket.create_connection(proxy.address, timeout=TIMEOUT) for _ in range(20)]
            deadline = time.monotonic() + 15
            for s in silent:
                s.settimeout(max(0.01, deadline - time.monotonic()))
                try:
                    assert s.recv(1) == b"", "the proxy sent something before a handshake"
                except ConnectionResetError:
                    pass
                except socket.timeout:
                    pytest.fail("a client that never started its TLS handshake is still open")
                s.close()
            while True:  # each connection's line follows its closing
                errors = [e.text for e in proxy.events() if e.kind == ProxyEvent.ERROR]
                if len(errors) >= 20 or time.monotonic() > deadline:
                    break
                time.sleep(0.02)
            refused = [t for t in errors if "(limit 5: max_connections)" in t]
            timed_out = [t for t in errors if "TLS handshake: timed out after 1 s" in t]
            assert (len(refused), len(timed_out)) == (15, 5), errors
            client = make_tls_context(tls_files.ca, None, None, None, True)
            raw = socket.create_connection(proxy.address, timeout=TIMEOUT)
            with client.wrap_socket(raw, server_hostname="localhost") as s:
                s.sendall(request("good", 7))
                answer = _frame(s)
            assert struct.unpack_from(">i", answer, 4)[0] == 7
    finally:
        broker.close()


def test_a_tls_client_the_proxy_cannot_take_is_closed_not_left_open(tls_files, monkeypatch):  # noqa: F811
    """Out of file descriptors when a TLS client is accepted (its socket is duplicated for the
    handshake): the client is closed and counted no more, with a line saying why. Before,
    the error escaped connection_made and the accepted connection stayed open, counted
    nowhere, as long as the client kept it."""
    import errno

    from fastkwire.proxy import _server
    from test_proxy_hostile import FakeBroker

    def no_fd(transport):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(_server, "_detach", no_fd)
    broker = FakeBroker()
    try:
        with BackgroundProxy(
            f"127.0.0.1:{broker.port}", tls=server_context(tls_files), connect_timeout=1.0
        ) as proxy:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
                s.settimeout(5)
                try:
                    assert s.recv(1) == b""
                except ConnectionResetError:
                    pass
                except socket.timeout:
                    pytest.fail("the client the proxy could not take is still open")
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline:
                errors = [e.text for e in proxy.events() if e.kind == ProxyEvent.ERROR]
                if errors:
                    break
                time.sleep(0.02)
            assert len(errors) == 1 and errors[0].endswith(
                ": TLS handshake not started: Too many open files"
            ), errors
    finally:
        broker.close()

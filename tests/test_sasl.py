"""TLS and SASL: the SCRAM algorithm against RFC 5802/7677's examples, and the admin
client (blocking and asyncio) against scripted brokers that speak SASL (tests/sasl_server.py)
and TLS with certificates made for the test (tests/certs.py), with faults: wrong password,
forged server signature, replayed nonce, mechanism not offered, rejected token,
re-authentication demanded, untrusted or misnamed certificates."""

import asyncio
import json
import struct
import time

import pytest

from fastkwire import SaslAuthenticateResponse
from fastkwire.admin import (
    AdminClient,
    AdminTimeoutError,
    BrokerConnectionError,
    ResponseError,
    AsyncAdminClient,
    SaslAuthenticationError,
    TlsCertificateError,
    TlsError,
    UnsupportedSaslMechanismError,
)
from fastkwire.connection import Security
from fastkwire.connection_errors import SaslAuthError
from fastkwire.sasl import OAuthBearer, Plain, Scram

from certs import server_context, tls_files  # noqa: F401 - tls_files is a fixture
from fakes import (  # noqa: F401 - scripted is a fixture
    API_VERSIONS,
    COORDINATOR_LOAD_IN_PROGRESS,
    FIND_COORDINATOR,
    LEAVE_GROUP,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    SILENT,
    KafkaLikeGroup,
    Raw,
    coordinator_at,
    find_error,
    scripted,
)
from sasl_server import SaslServer

PASSWORD = "pencil-Secret-9d2e"
USERS = {"ops": PASSWORD}


# ---------------------------------------------------------------- the algorithm


def test_scram_sha256_rfc7677_example():
    client = Scram("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    assert client.start() == b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.step(
        b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
    )
    assert final == (
        b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
        b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
    )
    assert client.step(b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=") is None


def test_scram_sha1_rfc5802_example():
    client = Scram("user", "pencil", "sha1", nonce="fyko+d2lbbFgONRv9qkxdawL")
    assert client.start() == b"n,,n=user,r=fyko+d2lbbFgONRv9qkxdawL"
    final = client.step(b"r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,s=QSXCR+Q6sek8bf92,i=4096")
    assert (
        final
        == b"c=biws,r=fyko+d2lbbFgONRv9qkxdawL3rfcNHYJY1ZVvWVs7j,p=v0X8v3Bz2T0CJGbJQyF0X+HI4Ts="
    )
    assert client.step(b"v=rmF9pqV8S7suAoZWja4dJRkFsKQ=") is None


RFC_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)


@pytest.mark.parametrize(
    "server_first, words",
    [
        (b"r=someone-elses-nonce,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce does not extend"),
        (b"r=rOprNGfwEbeRWgbNEkqO,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096", "nonce does not extend"),
        (RFC_FIRST.replace(b"i=4096", b"i=100000000"), "100000000' SCRAM iterations"),
        (RFC_FIRST.replace(b"i=4096", b"i=1"), "SCRAM iterations"),
        (RFC_FIRST.replace(b"s=W22ZaJ0SNY7soEsUEjb6gQ==", b"s=%%%"), "salt is not base64"),
        (b"e=unknown-user", "refused SCRAM: unknown-user"),
        (b"garbage", "malformed"),
    ],
)
def test_scram_refuses_bad_server_first_messages(server_first, words):
    client = Scram("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    client.start()
    with pytest.raises(SaslAuthError, match=words):
        client.step(server_first)


@pytest.mark.parametrize(
    "server_final", [b"v=7rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=", b"v=", b"v=!!"]
)
def test_scram_refuses_a_wrong_server_signature(server_final):
    client = Scram("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    client.start()
    client.step(RFC_FIRST)
    with pytest.raises(SaslAuthError, match="server signature is wrong"):
        client.step(server_final)


def test_scram_escapes_the_user_name():
    assert Scram("a=b,c", "p", nonce="n0").start() == b"n,,n=a=3Db=2Cc,r=n0"


def test_oauthbearer_message():
    assert OAuthBearer("tok.en").start() == b"n,,\x01auth=Bearer tok.en\x01\x01"
    assert "tok.en" not in repr(OAuthBearer("tok.en"))


# ---------------------------------------------------------------- against a scripted SASL broker


@pytest.fixture(params=["sync", "async"])
def call(request):
    """call(broker, method, *args, timeout=seconds, **options) on AdminClient or AsyncAdminClient."""

    def run(broker, method, *args, timeout=3.0, **options):
        servers = broker if isinstance(broker, str) else broker.address
        if request.param == "sync":
            return getattr(
                AdminClient(servers, request_timeout_ms=timeout * 1000, **options), method
            )(*args)

        async def go():
            return await getattr(
                AsyncAdminClient(servers, request_timeout_ms=timeout * 1000, **options), method
            )(*args)

        return asyncio.run(go())

    run.mode = request.param
    return run


def sasl_broker(scripted, server, **kwargs):
    broker = scripted(sasl=server, **kwargs)
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [KafkaLikeGroup(["a", "b"])],
    }
    return broker


def scram(mechanism="SCRAM-SHA-256", password=PASSWORD, protocol="SASL_PLAINTEXT", **more):
    return dict(
        security_protocol=protocol,
        sasl_mechanism=mechanism,
        sasl_plain_username="ops",
        sasl_plain_password=password,
        **more,
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_authenticates_then_removes(scripted, call, mechanism):
    server = SaslServer(USERS)
    broker = sasl_broker(scripted, server)
    result = call(broker, "remove_members_from_group", "orders", ["a"], **scram(mechanism))
    assert result.removed == ["a"]
    expected = {"PLAIN": "PLAIN", "SCRAM-SHA-256": "SCRAM-sha256", "SCRAM-SHA-512": "SCRAM-sha512"}[
        mechanism
    ]
    assert server.authenticated == [(expected, "ops")]
    # Handshake at v1, then SaslAuthenticate at v2, before anything but ApiVersions.
    keys = [k for k, _, _ in broker.requests]
    assert keys[:3] == [API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE]
    assert broker.seen(SASL_HANDSHAKE)[0][0] == 1 and broker.seen(SASL_AUTHENTICATE)[0][0] == 2
    assert "unauthenticated" not in broker.sasl_events


def test_without_sasl_the_broker_hangs_up(scripted):
    broker = sasl_broker(scripted, SaslServer(USERS))
    with pytest.raises(Exception, match="closed the connection during FindCoordinator"):
        AdminClient(broker.address, request_timeout_ms=3000).find_coordinator("orders")
    assert broker.sasl_events == ["unauthenticated"]


def test_wrong_password_fails_at_once_without_retry_or_secret(scripted, call):
    broker = sasl_broker(scripted, SaslServer(USERS))
    start = time.monotonic()
    with pytest.raises(
        SaslAuthenticationError,
        match="refused SASL SCRAM-SHA-256 authentication of user 'ops': "
        "check the user name and password",
    ) as info:
        call(broker, "find_coordinator", "orders", **scram(password="wrong-Secret-77"))
    assert time.monotonic() - start < 1.0
    assert "wrong-Secret-77" not in str(info.value) and PASSWORD not in str(info.value)
    assert broker.sasl_events == ["handshake SCRAM-SHA-256", "refused"]  # tried once
    assert broker.seen(FIND_COORDINATOR) == []


def test_wrong_plain_password(scripted, call):
    broker = sasl_broker(scripted, SaslServer(USERS))
    with pytest.raises(SaslAuthenticationError, match="Invalid username or password"):
        call(broker, "api_versions", **scram("PLAIN", password="nope-Secret"))


def test_forged_server_signature_is_refused(scripted, call):
    broker = sasl_broker(scripted, SaslServer(USERS, bad_signature=True))
    with pytest.raises(SaslAuthenticationError, match="server signature is wrong"):
        call(broker, "find_coordinator", "orders", **scram())
    assert broker.seen(FIND_COORDINATOR) == []


def test_nonce_that_does_not_extend_ours_is_refused(scripted, call):
    broker = sasl_broker(scripted, SaslServer(USERS, nonce="fixed-server-nonce"))
    with pytest.raises(SaslAuthenticationError, match="nonce does not extend"):
        call(broker, "api_versions", **scram("SCRAM-SHA-512"))


def test_mechanism_not_offered(scripted, call):
    broker = sasl_broker(scripted, SaslServer(USERS, mechanisms=["PLAIN", "SCRAM-SHA-512"]))
    with pytest.raises(
        UnsupportedSaslMechanismError,
        match="does not enable SASL mechanism SCRAM-SHA-256 "
        r"\(it enables: PLAIN, SCRAM-SHA-512\)",
    ):
        call(broker, "api_versions", **scram())
    assert broker.sasl_events == ["handshake SCRAM-SHA-256"]


def test_a_broker_refusing_a_mechanism_it_lists_is_named_as_contradicting_itself(scripted, call):
    # Tansu answers UNSUPPORTED_SASL_MECHANISM for PLAIN while listing PLAIN
    broker = sasl_broker(scripted, SaslServer(USERS, mechanisms=[], listed=["PLAIN"]))
    with pytest.raises(UnsupportedSaslMechanismError) as err:
        call(broker, "api_versions", **scram("PLAIN"))
    assert "refused SASL mechanism PLAIN as unsupported, yet lists it among those it " in str(
        err.value
    )
    assert "(it enables" not in str(err.value) and "sasl_mechanism" not in str(err.value)


def test_broker_without_sasl(scripted, call):
    broker = scripted()  # no SaslHandshake in its ApiVersions
    with pytest.raises(
        UnsupportedSaslMechanismError, match="does not offer SASL.*security_protocol"
    ):
        call(broker, "api_versions", **scram())


def test_oauthbearer_token_provider(scripted, call):
    server = SaslServer(tokens=["good-token"])
    broker = sasl_broker(scripted, server)

    class Provider:  # kafka-python's and aiokafka's shape: an object with token()
        def token(self):
            return "good-token"

    assert (
        call(
            broker,
            "find_coordinator",
            "orders",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=Provider(),
        ).port
        == broker.port
    )
    assert (
        call(
            broker,
            "find_coordinator",
            "orders",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=lambda: "good-token",
        ).node_id
        == 1
    )
    assert server.authenticated == [("OAUTHBEARER", "good-token")] * 2


def test_async_token_provider(scripted):
    server = SaslServer(tokens=["async-token"])
    broker = sasl_broker(scripted, server)

    async def provider():
        await asyncio.sleep(0)
        return "async-token"

    async def go():
        client = AsyncAdminClient(
            broker.address,
            request_timeout_ms=3000,
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=provider,
        )
        return await client.find_coordinator("orders")

    assert asyncio.run(go()).port == broker.port
    assert server.authenticated == [("OAUTHBEARER", "async-token")]


def test_rejected_token_says_so(scripted, call):
    broker = sasl_broker(scripted, SaslServer(tokens=["good-token"]))
    with pytest.raises(
        SaslAuthenticationError,
        match="rejected the OAUTHBEARER token, status 'invalid_token': "
        "it has expired or is not valid",
    ) as info:
        call(
            broker,
            "api_versions",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=lambda: "stale-token",
        )
    assert "stale-token" not in str(info.value)


def test_failing_token_provider_shows_no_message(scripted, call):
    broker = sasl_broker(scripted, SaslServer(tokens=["good-token"]))

    def provider():
        raise RuntimeError("refresh failed for secret abc123")

    with pytest.raises(
        SaslAuthenticationError, match=r"token provider failed \(RuntimeError\)"
    ) as info:
        call(
            broker,
            "api_versions",
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="OAUTHBEARER",
            sasl_oauth_token_provider=provider,
        )
    assert "abc123" not in str(info.value)


def test_reauthenticates_before_the_session_expires(scripted, call):
    # Sessions of 300 ms; FindCoordinator answers "loading" three times (0.1 + 0.2 + 0.4 s of
    # backoff) on the same connection: the client must log in again on the way.
    server = SaslServer(USERS)
    broker = scripted(sasl=server, session_lifetime_ms=300)
    broker.script = {
        FIND_COORDINATOR: [find_error(COORDINATOR_LOAD_IN_PROGRESS)] * 3 + [coordinator_at(broker)]
    }
    found = call(broker, "find_coordinator", "orders", **scram())
    assert found.port == broker.port
    assert broker.connections == 1
    assert broker.sasl_events.count("authenticated") >= 2
    assert "expired" not in broker.sasl_events


def test_handshake_v0_sends_raw_tokens(scripted, call):
    server = SaslServer(USERS)
    broker = scripted(
        versions={API_VERSIONS: (0, 3), FIND_COORDINATOR: (0, 3), SASL_HANDSHAKE: (0, 0)},
        sasl=server,
    )
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)]}
    assert call(broker, "find_coordinator", "orders", **scram()).port == broker.port
    assert broker.seen(SASL_AUTHENTICATE) == [] and broker.seen(SASL_HANDSHAKE)[0][0] == 0
    assert server.authenticated == [("SCRAM-sha256", "ops")]


def test_client_repr_hides_secrets():
    client = AdminClient("127.0.0.1:9092", **scram())
    assert (
        PASSWORD not in repr(client) and "SCRAM-SHA-256" in repr(client) and "ops" in repr(client)
    )
    assert PASSWORD not in repr(vars(client))


# ---------------------------------------------------------------- TLS


def tls_broker(scripted, files, sasl=None, **context):
    broker = scripted(tls=server_context(files, **context), sasl=sasl)
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [KafkaLikeGroup(["a"])],
    }
    return broker


def test_ssl_with_the_test_ca(scripted, call, tls_files):  # noqa: F811
    broker = tls_broker(scripted, tls_files)
    assert call(
        broker,
        "remove_members_from_group",
        "orders",
        ["a"],
        security_protocol="SSL",
        ssl_cafile=tls_files.ca,
    ).removed == ["a"]


def test_sasl_ssl_with_a_client_certificate(scripted, call, tls_files):  # noqa: F811
    server = SaslServer(USERS)
    broker = tls_broker(scripted, tls_files, sasl=server, require_client_cert=True)
    found = call(
        broker,
        "find_coordinator",
        "orders",
        **scram(
            "SCRAM-SHA-512",
            protocol="SASL_SSL",
            ssl_cafile=tls_files.ca,
            ssl_certfile=tls_files.client_cert,
            ssl_keyfile=tls_files.client_key,
            ssl_password=tls_files.key_password,
        ),
    )
    assert found.port == broker.port and server.authenticated == [("SCRAM-sha512", "ops")]


def test_untrusted_certificate(scripted, call, tls_files):  # noqa: F811
    broker = tls_broker(scripted, tls_files)
    start = time.monotonic()
    with pytest.raises(
        TlsCertificateError,
        match="certificate of 127.0.0.1:\\d+ could not be verified: "
        "unable to get local issuer certificate.*check ssl_cafile",
    ):
        call(broker, "api_versions", security_protocol="SSL", ssl_cafile=tls_files.other_ca)
    assert time.monotonic() - start < 1.0


def test_certificate_for_another_host(scripted, call, tls_files):  # noqa: F811
    broker = tls_broker(scripted, tls_files, cert=tls_files.wrong_name_cert)
    with pytest.raises(TlsCertificateError, match="IP address mismatch"):
        call(broker, "api_versions", security_protocol="SSL", ssl_cafile=tls_files.ca)
    # The operator's way out, as in kafka-python: no host name check (the chain still is).
    assert call(
        broker,
        "api_versions",
        security_protocol="SSL",
        ssl_cafile=tls_files.ca,
        ssl_check_hostname=False,
    )[API_VERSIONS] == (0, 4)


def test_the_test_certificates_pass_strict_x509(scripted, call, tls_files):  # noqa: F811
    # VERIFY_X509_STRICT asked for explicitly, so every interpreter checks RFC 5280's profile.
    broker = tls_broker(scripted, tls_files)
    assert call(
        broker,
        "api_versions",
        security_protocol="SSL",
        ssl_cafile=tls_files.ca,
        ssl_strict_x509=True,
    )[API_VERSIONS] == (0, 4)


def test_strict_x509_refuses_certificates_without_key_identifiers(
    scripted,
    call,
    tls_files,  # noqa: F811
):
    broker = tls_broker(scripted, tls_files, cert=tls_files.lax_server_cert)
    with pytest.raises(TlsCertificateError) as info:
        call(
            broker,
            "api_versions",
            security_protocol="SSL",
            ssl_cafile=tls_files.lax_ca,
            ssl_strict_x509=True,
        )
    message = str(info.value)
    # OpenSSL's reason, and advice for that reason only.
    assert "Key Identifier" in message and "ssl_strict_x509=False" in message, message
    assert "ssl_check_hostname" not in message and "ssl_cafile" not in message, message
    # Relaxed, the same certificates pass: the chain and the host name are still checked.
    assert call(
        broker,
        "api_versions",
        security_protocol="SSL",
        ssl_cafile=tls_files.lax_ca,
        ssl_strict_x509=False,
    )[API_VERSIONS] == (0, 4)
    with pytest.raises(TlsCertificateError, match="check ssl_cafile"):
        call(
            broker,
            "api_versions",
            security_protocol="SSL",
            ssl_cafile=tls_files.ca,
            ssl_strict_x509=False,
        )


def test_advice_names_only_the_check_that_failed(scripted, call, tls_files):  # noqa: F811
    broker = tls_broker(scripted, tls_files)
    with pytest.raises(TlsCertificateError) as info:
        call(broker, "api_versions", security_protocol="SSL", ssl_cafile=tls_files.other_ca)
    assert "ssl_check_hostname" not in str(info.value)
    assert "ssl_strict_x509" not in str(info.value)
    wrong_name = tls_broker(scripted, tls_files, cert=tls_files.wrong_name_cert)
    with pytest.raises(TlsCertificateError) as info:
        call(wrong_name, "api_versions", security_protocol="SSL", ssl_cafile=tls_files.ca)
    assert "ssl_check_hostname=False" in str(info.value)
    assert "ssl_cafile" not in str(info.value) and "ssl_strict_x509" not in str(info.value)


def test_missing_client_certificate(scripted, call, tls_files):  # noqa: F811
    broker = tls_broker(scripted, tls_files, require_client_cert=True)
    # TLS 1.3: the broker's alert, or its hanging up, comes with the first request.
    with pytest.raises(
        TlsError, match="client certificate it trusts.*check ssl_certfile and ssl_keyfile"
    ):
        call(broker, "api_versions", security_protocol="SSL", ssl_cafile=tls_files.ca)


def test_wrong_key_password_is_a_value_error(tls_files):  # noqa: F811
    with pytest.raises(ValueError, match="cannot load the TLS files") as info:
        AdminClient(
            "127.0.0.1:9092",
            security_protocol="SSL",
            ssl_cafile=tls_files.ca,
            ssl_certfile=tls_files.client_cert,
            ssl_keyfile=tls_files.client_key,
            ssl_password="wrong-pw-1",
        )
    assert "wrong-pw-1" not in str(info.value)


def test_plain_tcp_to_a_tls_listener(scripted, call, tls_files):  # noqa: F811
    broker = tls_broker(scripted, tls_files)
    with pytest.raises(
        BrokerConnectionError,
        match="during ApiVersions v4.*if that listener speaks TLS, use "
        "security_protocol SSL or SASL_SSL",
    ):
        call(broker, "api_versions")


@pytest.mark.parametrize("authenticate_max", [0, 1])
def test_older_sasl_authenticate_versions(scripted, call, authenticate_max):
    # v0 has no session lifetime; v1 added it. The exchange is the same.
    server = SaslServer(USERS)
    broker = scripted(
        versions={
            API_VERSIONS: (0, 4),
            FIND_COORDINATOR: (0, 6),
            SASL_HANDSHAKE: (0, 1),
            SASL_AUTHENTICATE: (0, authenticate_max),
        },
        sasl=server,
    )
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)]}
    assert call(broker, "find_coordinator", "orders", **scram("SCRAM-SHA-512")).port == broker.port
    assert {v for v, _ in broker.seen(SASL_AUTHENTICATE)} == {authenticate_max}
    assert server.authenticated == [("SCRAM-sha512", "ops")]


@pytest.mark.parametrize(
    "step, error, words",
    [
        (
            Raw(struct.pack(">i", 50 << 20)),
            ResponseError,
            "announced a 52428800-byte answer to SaslAuthenticate v2",
        ),
        (SILENT, AdminTimeoutError, "no answer from .* to SaslAuthenticate v2 within 0.3 s"),
    ],
)
def test_hostile_sasl_answers(scripted, call, step, error, words):
    # The SASL exchange gets the same size caps and deadline as every other request.
    broker = sasl_broker(scripted, SaslServer(USERS))
    broker.script[SASL_AUTHENTICATE] = [step]
    with pytest.raises(error, match=words):
        call(broker, "api_versions", timeout=0.3, **scram())


def test_ssl_context_instead_of_files(scripted, call, tls_files):  # noqa: F811
    import ssl

    broker = tls_broker(scripted, tls_files)
    context = ssl.create_default_context(cafile=tls_files.ca)
    assert (
        call(
            broker, "find_coordinator", "orders", security_protocol="SSL", ssl_context=context
        ).port
        == broker.port
    )
    strict = ssl.create_default_context()  # the system's CAs: not ours
    with pytest.raises(TlsCertificateError):
        call(broker, "api_versions", security_protocol="SSL", ssl_context=strict)


def test_a_client_leaving_mid_read_is_no_broker_error(scripted):  # noqa: F811
    # OpenSSL 3.6 writes its TLS 1.3 session tickets during the server's first read, so a
    # client that already left shows as EPIPE there, not only as a reset: either way the
    # scripted broker ends that connection quietly (the fixture fails on a broker error).
    broker = scripted()
    for error in (ConnectionResetError, BrokenPipeError, ConnectionAbortedError):

        class Gone:
            def recv(self, n, error=error):
                raise error

        assert broker._recv_exact(Gone(), 4) is None


def test_security_errors_carry_their_message_and_error_code(scripted, call, capsys):
    # SecurityError and its subclasses take (message, error) like every other AdminError.
    from fastkwire import cli

    broker = sasl_broker(scripted, SaslServer(USERS))
    with pytest.raises(SaslAuthenticationError) as info:
        call(broker, "api_versions", **scram(password="wrong-Secret-77"))
    assert str(info.value).startswith(f"{broker.address} refused SASL SCRAM-SHA-256 authentication")
    assert info.value.error.name == "SASL_AUTHENTICATION_FAILED" and info.value.error.code == 58
    code = cli.main(
        [
            "describe-group",
            "--bootstrap-server",
            broker.address,
            "--group",
            "g",
            "--json",
            "--security-protocol",
            "SASL_PLAINTEXT",
            "--sasl-mechanism",
            "SCRAM-SHA-256",
            "--sasl-username",
            "ops",
            "--sasl-password",
            "wrong-Secret-77",
        ]
    )
    error = json.loads(capsys.readouterr().out)["error"]
    assert (
        code == 3
        and error["error_code"] == 58
        and error["error_name"] == "SASL_AUTHENTICATION_FAILED"
    )
    assert error["message"].startswith(f"{broker.address} refused SASL")


# ---------------------------------------------------------------- secrets stay out of errors

LONE = "hunter\udcff2-Secret"  # what os.environ or argv gives for a byte that is not UTF-8


def _chain(exc):
    """The exception and every exception chained to it."""
    while exc is not None:
        yield exc
        exc = exc.__cause__ or exc.__context__


def assert_no_secret(exc, secret):
    for e in _chain(exc):
        assert secret not in str(e) and secret not in repr(e.args)
    assert exc.__context__ is None


@pytest.mark.parametrize(
    "make, words",
    [
        (lambda: Plain("ops", LONE), "SASL password is not valid Unicode"),
        (lambda: Scram("ops", LONE), "SASL password is not valid Unicode"),
        (lambda: Scram(LONE, "pw"), "SASL user name is not valid Unicode"),
        (lambda: OAuthBearer(LONE), "OAUTHBEARER token is not valid Unicode"),
    ],
)
def test_credentials_that_are_not_unicode_name_what_without_the_secret(make, words):
    with pytest.raises(SaslAuthError, match=words) as info:
        make()
    assert_no_secret(info.value, "hunter")


def test_security_refuses_a_password_that_is_not_unicode():
    with pytest.raises(ValueError, match="sasl_plain_password is not valid Unicode") as info:
        Security(
            "SASL_SSL",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username="ops",
            sasl_plain_password=LONE,
        )
    assert_no_secret(info.value, "hunter")


def test_failing_token_provider_leaves_no_context(scripted, call):
    broker = sasl_broker(scripted, SaslServer(tokens=["good-token"]))

    def provider():
        raise RuntimeError("refresh failed for secret abc123")

    async def async_provider():
        raise RuntimeError("refresh failed for secret abc123")

    providers = [provider] + ([async_provider] if call.mode == "async" else [])
    for p in providers:
        with pytest.raises(
            SaslAuthenticationError, match=r"token provider failed \(RuntimeError\)"
        ) as info:
            call(
                broker,
                "api_versions",
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="OAUTHBEARER",
                sasl_oauth_token_provider=p,
            )
        assert_no_secret(info.value, "abc123")


def test_tls_file_errors_name_the_option_not_the_path(tmp_path):
    joined = str(
        tmp_path / "ca.pemssl.key.password=hunter2"
    )  # a trailing backslash joined two lines
    with pytest.raises(ValueError, match="cannot read ssl_cafile: no such file") as info:
        Security("SSL", ssl_cafile=joined)
    assert_no_secret(info.value, "hunter2")
    with pytest.raises(ValueError, match=r"cannot load the TLS files \(ssl_cafile\)") as info:
        Security("SSL", ssl_cafile=str(tmp_path))  # a directory: an OSError without .reason
    assert_no_secret(info.value, str(tmp_path))


# ---------------------------------------------------------------- hostile SASL data


@pytest.mark.parametrize(
    "server_first, words",
    [
        (
            RFC_FIRST.replace(b"i=4096", b"i=" + b"9" * 5000),
            "5[0-9]{3} bytes long, more than the 4096",
        ),
        (
            RFC_FIRST.replace(b"i=4096", b"i=" + b"4" * 4000),
            "SCRAM iterations",
        ),  # under the size cap
        (b"m=ext," + RFC_FIRST, r"mandatory extension \(m=\)"),
        (RFC_FIRST + b"," + b"x=" + b"y" * 10000, "more than the 4096"),
    ],
)
def test_scram_refuses_hostile_first_messages_as_authentication_errors(server_first, words):
    client = Scram("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    client.start()
    with pytest.raises(SaslAuthError, match=words):
        client.step(server_first)


def test_scram_refuses_a_huge_final_message():
    client = Scram("user", "pencil", "sha256", nonce="rOprNGfwEbeRWgbNEkqO")
    client.start()
    client.step(RFC_FIRST)
    with pytest.raises(SaslAuthError, match="SCRAM final message is 10002 bytes long"):
        client.step(b"v=" + b"A" * 10000)


@pytest.mark.parametrize("challenge", [b"[" * 100_000, b"[" * 4000, b"{" * 3000])
def test_oauthbearer_hostile_error_status(challenge):
    client = OAuthBearer("tok")
    client.start()
    if len(challenge) > 4096:
        with pytest.raises(SaslAuthError, match="OAUTHBEARER error status is 100000 bytes long"):
            client.step(challenge)
    else:  # deep nesting within the size cap: an unreadable status, and the broker's refusal follows
        assert client.step(challenge) == b"\x01" and client.status == "unknown"


def test_hostile_scram_iterations_through_a_broker(scripted, call):
    # The broker's first message echoes our nonce and asks for 5,000 digits of iterations.
    broker = sasl_broker(scripted, SaslServer(USERS))

    def first(request, version):
        nonce = request.auth_bytes.split(b"r=", 1)[1]
        return SaslAuthenticateResponse(
            auth_bytes=b"r=" + nonce + b"x,s=QSXCR+Q6sek8bf92,i=" + b"7" * 5000
        )

    broker.script[SASL_AUTHENTICATE] = [first]
    with pytest.raises(
        SaslAuthenticationError, match="SCRAM first message is 50[0-9]{2} bytes long"
    ):
        call(broker, "api_versions", **scram())

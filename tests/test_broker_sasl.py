"""The broker's SASL login without a socket (fastkwire.broker._sasl.SaslSession): what Kafka 4's
SaslServerAuthenticator answers, driven by fastkwire's own SASL client mechanisms and by bytes
written here from RFC 5802; and the listener settings' checks (the security protocol, users,
TLS files). Real clients over real listeners: test_broker_security.py."""

import base64
import sys
from pathlib import Path
import hashlib
import hmac

import pytest

from fastkwire import (
    ApiVersionsRequest,
    DescribeClusterRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    decode_response,
    encode_request,
)
from fastkwire.broker import Broker
from fastkwire.broker._exchange import Close
from fastkwire.broker._sasl import PASS, SaslSession, Users
from fastkwire.sasl import Plain, SaslAuthError, Scram

from certs import tls_files  # noqa: F401 - a fixture

USERS = {"alice": "alice-Pass-1", "b,o=b": "bob-Pass-2"}
GENERIC = (
    "Authentication failed during authentication due to invalid credentials with SASL mechanism {}"
)


@pytest.fixture(scope="module")
def users():
    return Users(USERS)


def handshake(session, mechanism, version=1):
    frame = encode_request(SaslHandshakeRequest(mechanism=mechanism), version, 1, "t")
    return session.receive(frame)


def authenticate(session, token, version=2, correlation_id=2):
    frame = encode_request(SaslAuthenticateRequest(auth_bytes=token), version, correlation_id, "t")
    return session.receive(frame)


def answer(outcome, api_key, version):
    data = outcome.answer if isinstance(outcome, Close) else outcome
    return decode_response(data, api_key, version)[1]


def login(session, client, version=2):
    """Runs `client` (a fastkwire.sasl mechanism) through the session; the last outcome."""
    out = handshake(session, client.name)
    assert answer(out, 17, 1).error_code == 0
    token = client.start()
    while True:
        out = authenticate(session, token, version)
        if isinstance(out, Close):
            return out
        response = answer(out, 36, version)
        assert response.error_code == 0
        token = client.step(response.auth_bytes)
        if token is None:
            return out


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
@pytest.mark.parametrize("user", sorted(USERS))
def test_a_user_logs_in_with_each_mechanism(users, mechanism, user):
    session = SaslSession(users)
    client = (
        Plain(user, USERS[user])
        if mechanism == "PLAIN"
        else Scram(user, USERS[user], mechanism[len("SCRAM-") :].replace("-", "").lower())
    )
    login(session, client)
    assert session.complete and session.user == user and session.mechanism == mechanism


def test_a_wrong_plain_password_gets_kafkas_answer_then_the_end(users):
    for user, password in (("alice", "wrong"), ("nobody", "alice-Pass-1")):
        session = SaslSession(users)
        out = login(session, Plain(user, password))
        assert isinstance(out, Close) and not session.complete
        response = answer(out, 36, 2)
        assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
        assert response.error_message == "Authentication failed: Invalid username or password"


@pytest.mark.parametrize("user", ["alice", "nobody"])
def test_a_wrong_scram_password_or_user_gets_the_generic_message(users, user):
    session = SaslSession(users)
    out = login(session, Scram(user, "wrong", "sha512"))
    assert isinstance(out, Close) and not session.complete
    response = answer(out, 36, 2)
    assert response.error_code == 58
    assert response.error_message == GENERIC.format("SCRAM-SHA-512")


def scram_first(session, nonce="clientnonce", gs2="n,,", user="alice"):
    out = authenticate(session, f"{gs2}n={user},r={nonce}".encode())
    return answer(out, 36, 2).auth_bytes.decode()


def scram_proof(password, server_first, client_first_bare, without_proof, hash_name="sha256"):
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    salted = hashlib.pbkdf2_hmac(
        hash_name, password.encode(), base64.b64decode(attrs["s"]), int(attrs["i"])
    )
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    stored = hashlib.new(hash_name, client_key).digest()
    message = f"{client_first_bare},{server_first},{without_proof}".encode()
    signature = hmac.new(stored, message, hash_name).digest()
    return base64.b64encode(bytes(a ^ b for a, b in zip(client_key, signature))).decode()


def test_scram_salts_iterates_and_extends_the_client_nonce(users):
    session = SaslSession(users)
    handshake(session, "SCRAM-SHA-256")
    server_first = scram_first(session)
    attrs = dict(part.split("=", 1) for part in server_first.split(","))
    assert attrs["r"].startswith("clientnonce") and len(attrs["r"]) > len("clientnonce")
    assert attrs["i"] == "4096" and len(base64.b64decode(attrs["s"])) >= 16
    # another session, another server nonce; the salt is the user's credential's
    other = SaslSession(users)
    handshake(other, "SCRAM-SHA-256")
    other_attrs = dict(part.split("=", 1) for part in scram_first(other).split(","))
    assert other_attrs["r"] != attrs["r"] and other_attrs["s"] == attrs["s"]
    # the final message with the right proof is accepted: the server signature verifies
    without_proof = f"c=biws,r={attrs['r']}"
    proof = scram_proof(USERS["alice"], server_first, "n=alice,r=clientnonce", without_proof)
    out = authenticate(session, f"{without_proof},p={proof}".encode())
    assert answer(out, 36, 2).auth_bytes.startswith(b"v=") and session.complete


@pytest.mark.parametrize(
    "final",
    [
        "c=biws,r=clientnonce,p={proof}",  # the client's nonce alone: not the server's
        "c=eSws,r={nonce},p={proof}",  # channel binding that is not the gs2 header's
        "c=biws,r={nonce}",  # no proof
        "c=biws,r={nonce},p=bm90IGEgcHJvb2Y=",  # a proof of the wrong length
    ],
)
def test_scram_final_messages_that_do_not_hold_are_refused(users, final):
    session = SaslSession(users)
    handshake(session, "SCRAM-SHA-256")
    server_first = scram_first(session)
    nonce = dict(p.split("=", 1) for p in server_first.split(","))["r"]
    without_proof = final.rsplit(",p=", 1)[0].format(nonce=nonce)
    proof = scram_proof(USERS["alice"], server_first, "n=alice,r=clientnonce", without_proof)
    out = authenticate(session, final.format(nonce=nonce, proof=proof).encode())
    assert isinstance(out, Close) and not session.complete
    assert answer(out, 36, 2).error_message == GENERIC.format("SCRAM-SHA-256")


def test_scram_authorization_id_must_be_the_user(users):
    session = SaslSession(users)
    handshake(session, "SCRAM-SHA-256")
    out = authenticate(session, b"n,a=root,n=alice,r=abc")
    assert isinstance(out, Close)
    assert answer(out, 36, 2).error_message == (
        "Authentication failed: Client requested an authorization id that is different "
        "from username"
    )


def test_requests_before_the_login_end_the_connection(users):
    session = SaslSession(users)
    # ApiVersions goes on to the broker's handler; Metadata before the handshake ends it
    assert session.receive(encode_request(ApiVersionsRequest(), 3, 1, "t")) is PASS
    out = session.receive(encode_request(MetadataRequest(topics=None), 12, 2, "t"))
    assert isinstance(out, Close) and out.answer is None
    assert "Metadata during SASL handshake" in out.reason
    # after the handshake, another request than SaslAuthenticate: its error answer, the end
    session = SaslSession(users)
    handshake(session, "PLAIN")
    out = session.receive(encode_request(DescribeClusterRequest(), 1, 3, "t"))
    assert isinstance(out, Close) and answer(out, 60, 1).error_code == 34  # ILLEGAL_SASL_STATE


def test_a_mechanism_not_enabled_gets_the_list_then_the_end():
    session = SaslSession(Users(USERS, ["SCRAM-SHA-512"]))
    out = handshake(session, "PLAIN")
    assert isinstance(out, Close)
    response = answer(out, 17, 1)
    assert response.error_code == 33 and response.mechanisms == ["SCRAM-SHA-512"]


def test_a_v0_handshake_takes_bare_tokens(users):
    session = SaslSession(users)
    assert answer(handshake(session, "SCRAM-SHA-512", version=0), 17, 0).error_code == 0
    client = Scram("alice", USERS["alice"], "sha512")
    token = client.start()
    while not session.complete:
        out = session.receive(len(token).to_bytes(4, "big") + token)
        assert isinstance(out, bytes) and int.from_bytes(out[:4], "big") == len(out) - 4
        token = client.step(out[4:])
    assert token is None and session.user == "alice"
    # a wrong password over bare tokens: the connection ends, no answer (Kafka's v0)
    session = SaslSession(users)
    handshake(session, "PLAIN", version=0)
    token = Plain("alice", "wrong").start()
    out = session.receive(len(token).to_bytes(4, "big") + token)
    assert isinstance(out, Close) and out.answer is None


def test_the_server_signature_is_the_one_the_password_makes(users):
    # fastkwire's client checks it (a wrong one raises SaslAuthError): the server knows the
    # credential; a client holding another password does not accept it.
    for password, accepted in ((USERS["alice"], True), ("another", False)):
        session = SaslSession(users)
        handshake(session, "SCRAM-SHA-256")
        client = Scram("alice", USERS["alice"], "sha256")
        out = authenticate(session, client.start())
        server_first = answer(out, 36, 2).auth_bytes
        final = client.step(server_first)
        signature = answer(authenticate(session, final), 36, 2).auth_bytes
        check = Scram("alice", password, "sha256", nonce=client._nonce)
        check.start()
        check.step(server_first)
        if accepted:
            assert check.step(signature) is None
        else:
            with pytest.raises(SaslAuthError, match="server signature is wrong"):
                check.step(signature)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"users": {}}, "users: a SASL listener needs"),
        ({"users": {"a": 1}}, "users: 'a': a user is"),
        ({"users": {"a": "b"}, "sasl_mechanisms": ["GSSAPI"]}, "sasl_mechanisms: 'GSSAPI'"),
        ({"users": {"a": "b"}, "scram_iterations": 100}, "scram_iterations: from 4096"),
        ({"security_protocol": "SASL_PLAINTEXT"}, "users: a SASL_PLAINTEXT listener needs"),
        ({"security_protocol": "SSL"}, "tls_cert: a SSL listener needs"),
        ({"security_protocol": "TLS"}, "security_protocol: 'TLS' is not one of"),
        ({"listeners": ["HTTP://127.0.0.1:0"]}, "listeners: 'HTTP://127.0.0.1:0'"),
        (
            {"listeners": ["SSL://127.0.0.1:0", "PLAINTEXT://127.0.0.1:0"]},
            "listeners: every listener has the same security protocol",
        ),
        ({"listeners": ["PLAINTEXT://127.0.0.1:0"], "users": {"a": "b"}}, "users: given, but"),
        (
            {"tls_cert": "/nonexistent/cert.pem", "tls_key": "/nonexistent/key.pem"},
            "tls_cert/tls_key: cannot load",
        ),
        ({"tls_cert": "/nonexistent/cert.pem"}, "tls_cert and tls_key go together"),
        ({"sasl_mechanisms": ["PLAIN"]}, "sasl_mechanisms: given without users"),
        ({"faults": ["api=Fetch"]}, "a rule needs exactly one action"),
    ],
)
def test_settings_that_cannot_work_name_their_parameter(kwargs, message):
    kwargs.setdefault("listeners", [("127.0.0.1", 0)])
    with pytest.raises(ValueError) as e:
        Broker(**kwargs)
    assert message in str(e.value)


def test_the_protocol_follows_from_the_settings(tls_files):  # noqa: F811 - the fixture
    tls = {"tls_cert": tls_files.server_cert, "tls_key": tls_files.server_key}
    assert Broker().security_protocol == "PLAINTEXT"
    assert Broker(users={"a": "b"}).security_protocol == "SASL_PLAINTEXT"
    assert Broker(**tls).security_protocol == "SSL"
    assert Broker(users={"a": "b"}, **tls).security_protocol == "SASL_SSL"
    assert Broker("sasl_ssl://127.0.0.1:0", users={"a": "b"}, **tls).listeners == [("127.0.0.1", 0)]


def test_hostile_logins_keep_the_sessions_contract():
    """fuzz/hostile_sasl.py's contract over a short run (the long one: its --loop)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_sasl

    counts, findings, _ = hostile_sasl.run(1500, seed=7)
    assert findings == 0
    assert counts["logged in"] and counts["refused"] and counts["closed"]


def test_an_encrypted_key_takes_its_password(tls_files):  # noqa: F811 - the fixture
    files = {"tls_cert": tls_files.client_cert, "tls_key": tls_files.client_key}
    assert Broker(**files, tls_key_password=tls_files.key_password).tls is not None
    with pytest.raises(ValueError, match="tls_cert/tls_key: cannot load"):
        Broker(**files, tls_key_password="not-it")


def test_scram_credential_apis_answer_as_kafkas_controller():
    from fastkwire import (
        AlterUserScramCredentialsRequest as Alter,
        DescribeUserScramCredentialsRequest as Describe,
    )
    from fastkwire.broker import Apis, Cluster, Context

    apis = Apis(Cluster({0: ("127.0.0.1", 9092)}))  # no users given: an empty store

    def ask(request, key):
        got = []
        apis.handle(key, 0, request, Context(0), got.append)
        return got[0]

    upsert = Alter.ScramCredentialUpsertion
    answer = ask(
        Alter(
            upsertions=[
                upsert(name="", mechanism=1, iterations=4096, salt=b"s", salted_password=b"p"),
                upsert(name="a", mechanism=3, iterations=4096, salt=b"s", salted_password=b"p"),
                upsert(name="b", mechanism=2, iterations=20000, salt=b"s", salted_password=b"p"),
                upsert(name="c", mechanism=2, iterations=4096, salt=b"s", salted_password=b"p"),
            ],
            deletions=[Alter.ScramCredentialDeletion(name="d", mechanism=1)],
        ),
        51,
    )
    assert {(r.user, r.error_code, r.error_message) for r in answer.results} == {
        ("", 93, "Username must not be empty"),
        ("a", 33, "Unknown SCRAM mechanism"),
        ("b", 93, "Too many iterations"),
        ("c", 0, None),
        ("d", 91, "Attempt to delete a user credential that does not exist"),
    }
    answer = ask(Describe(users=[Describe.UserName(name="c")] * 2), 50)
    (result,) = answer.results
    assert (result.error_code, result.error_message) == (
        92,
        "Cannot describe SCRAM credentials for the same user twice in a single request: c",
    )
    (result,) = ask(Describe(users=None), 50).results
    assert result.user == "c" and [
        (i.mechanism, i.iterations) for i in result.credential_infos
    ] == [(2, 4096)]

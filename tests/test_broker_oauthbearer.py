"""The broker's SASL OAUTHBEARER login and KIP-368 re-authentication without a socket
(fastkwire.broker._sasl.SaslSession, _oauthbearer.py): what Kafka 4's OAuthBearerSaslServer,
OAuthBearerUnsecuredValidatorCallbackHandler and SaslServerAuthenticator answer, on a clock
the test drives, for good tokens and hostile ones; the settings' checks. Real clients over
real listeners: test_broker_oauthbearer_clients.py."""

import asyncio
import base64
import json
import sys
from pathlib import Path

import pytest

from fastkwire import (
    ApiVersionsRequest,
    MetadataRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    decode_response,
    encode_request,
)
from fastkwire.broker import Broker, InvalidToken, Token, UnsecuredValidator
from fastkwire.broker._exchange import Close
from fastkwire.broker._sasl import SaslSession, Users
from fastkwire.sasl import Plain

NOW = 1_800_000_000.0  # the tests' clock: seconds since the epoch
INVALID = b'{"status":"invalid_token"}'
GENERIC = (
    "Authentication failed during {} due to invalid credentials with SASL mechanism OAUTHBEARER"
)


class Clock:
    def __init__(self, now=NOW):
        self.now = now

    def __call__(self):
        return self.now


def b64(value):
    raw = value if isinstance(value, bytes) else json.dumps(value).encode()
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def jws(claims, header=None, signature=""):
    header = {"alg": "none"} if header is None else header
    return f"{b64(header)}.{b64(claims)}.{signature}"


def raw_jws(payload):
    return f"{b64({'alg': 'none'})}.{b64(payload)}."


def initial(token, authzid="", extensions=""):
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {token}{extensions}\x01\x01"


def claims(**more):
    return {"sub": "alice", "iat": NOW - 10, "exp": NOW + 60, **more}


def session_of(validator=None, max_reauth_ms=0, clock=None, users=None):
    clock = clock or Clock()
    if users is None:
        validator = validator or UnsecuredValidator(clock=clock)
        users = Users({}, oauthbearer=validator)
    return SaslSession(users, max_reauth_ms, clock)


def send(session, request, version, correlation_id=1):
    return session.receive(encode_request(request, version, correlation_id, "t"))


def handshake(session, mechanism="OAUTHBEARER", version=1):
    out = send(session, SaslHandshakeRequest(mechanism=mechanism), version)
    return out


def authenticate(session, data, version=2):
    data = data.encode() if isinstance(data, str) else data
    out = send(session, SaslAuthenticateRequest(auth_bytes=data), version, 2)
    answer = out.answer if isinstance(out, Close) else out
    response = None if answer is None else decode_response(answer, 36, version)[1]
    return out, response


def test_an_unsecured_token_logs_in_as_its_subject_for_its_remaining_life():
    session = session_of()
    assert decode_response(handshake(session), 17, 1)[1].error_code == 0
    out, response = authenticate(session, initial(jws(claims())))
    assert not isinstance(out, Close)
    assert response.error_code == 0 and response.auth_bytes == b""
    assert session.complete and session.user == "alice" and session.mechanism == "OAUTHBEARER"
    # Kafka sends the token's remaining life even with connections.max.reauth.ms off
    assert response.session_lifetime_ms == 60_000
    assert session.expires == NOW + 60


def test_the_principal_claim_scope_and_skew_are_kafkas_options():
    clock = Clock()
    validator = UnsecuredValidator(
        principal_claim="client_id",
        required_scope="read write",
        allowable_clock_skew_ms=5000,
        clock=clock,
    )
    token = jws(claims(client_id="svc", scope=["read", " write ", "x"], exp=NOW - 3))
    session = session_of(validator, clock=clock)
    handshake(session)
    out, response = authenticate(session, initial(token))
    assert session.user == "svc" and response.session_lifetime_ms == 0  # expired, but skew
    session = session_of(validator, clock=clock)
    handshake(session)
    out, response = authenticate(session, initial(jws(claims(client_id="svc", scope="read"))))
    assert response.auth_bytes == b'{"status":"insufficient_scope", "scope":"[read, write]"}'
    assert not session.complete


def refused(session, data, version=2):
    """Runs Kafka's failed exchange: the error JSON as a challenge, then the client's ^A;
    returns the first answer's bytes."""
    handshake(session)
    out, response = authenticate(session, data, version)
    assert not isinstance(out, Close) and not session.complete
    assert response.error_code == 0 and response.session_lifetime_ms == 0
    challenge = response.auth_bytes
    out, response = authenticate(session, b"\x01", version)
    assert isinstance(out, Close) and not session.complete
    assert response.error_code == 58  # SASL_AUTHENTICATION_FAILED
    assert response.error_message == challenge.decode()
    return challenge


BAD_TOKENS = {
    "expired": jws(claims(exp=NOW - 1)),
    "expires now": jws(claims(exp=NOW)),
    "no exp": jws({"sub": "alice"}),
    "exp not a number": jws(claims(exp=str(NOW + 60))),
    "exp a boolean": jws(claims(exp=True)),
    "exp not after iat": jws(claims(iat=NOW + 60)),
    "issued in the future": jws(claims(iat=NOW + 30, exp=NOW + 90)),
    "no sub": jws({"exp": NOW + 60}),
    "blank sub": jws(claims(sub=" \t")),
    "sub a number": jws(claims(sub=7)),
    "sub an object": jws(claims(sub={"a": 1})),
    "scope a number": jws(claims(scope=3)),
    "wrong alg": jws(claims(), {"alg": "HS256"}),
    "alg null": jws(claims(), {"alg": None}),
    "a signature": jws(claims(), signature="c2ln"),
    "two parts": f"{b64({'alg': 'none'})}.{b64(claims())}",
    "four parts": jws(claims()) + ".x",
    "empty parts": jws(claims()).replace(".", "..", 1),
    "bad base64": "a" + jws(claims()),
    "base64 of one char": f"a.{b64(claims())}.",
    "standard base64 alphabet": jws(claims()).replace("e", "+", 1),
    "non-JSON payload": raw_jws(b"not json"),
    "NaN exp": raw_jws(b'{"sub":"a","exp":NaN}'),
    "not UTF-8": raw_jws(b'{"sub":"\xff","exp":1e12}'),
    "deep JSON": raw_jws(b"[" * 100_000),
    "huge past exp": raw_jws(b'{"sub":"a","exp":-1' + b"0" * 400 + b"}"),
    "trailing garbage is ignored, expired": raw_jws(b'{"sub":"a","exp":1}{{{'),
    "huge": jws(claims(pad="x" * 300_000, exp=NOW - 1)),
}


@pytest.mark.parametrize("name", sorted(BAD_TOKENS))
@pytest.mark.parametrize("version", [1, 2])
def test_a_bad_token_gets_the_rfc7628_error_then_the_end(name, version):
    assert refused(session_of(), initial(BAD_TOKENS[name]), version) == INVALID


@pytest.mark.parametrize(
    "header",
    [{"typ": "JWT"}, ["alg", "none"], "none", 0],
    ids=["no alg", "an array", "a string", "a number"],
)
def test_a_header_without_alg_ends_the_connection_unanswered(header):
    # Kafka's unsecured JWS throws a NullPointerException here: an internal error, no answer
    session = session_of()
    handshake(session)
    out, response = authenticate(session, initial(jws(claims(), header)))
    assert isinstance(out, Close) and out.answer is None and not session.complete


@pytest.mark.parametrize(
    "data",
    [
        "auth=Bearer x.y.",  # no gs2 header
        "n,,auth=Bearer {t}\x01\x01",  # no ^A after the gs2 header
        "n,,\x01auth=Bearer {t}\x01",  # not ended by ^A^A
        "n,,\x01auth=Bearer {t}",
        "n,,\x01\x01",  # no auth
        "n,,\x01host=h\x01\x01",
        "n,,\x01auth=Basic {t}\x01\x01",  # not a bearer
        "n,,\x01auth=Bearer\x01\x01",
        "n,,\x01auth=Bearer {t} x\x01\x01",
        "n,,\x01auth=Bearer {t}\x011x=y\x01\x01",  # an extension's key is letters
        "n,,\x01auth=Bearer {t}\x01k=\x01\x01",  # an extension's value is not empty
        "y,,\x01auth=Bearer {t}\x01\x01",  # channel binding
        "n,a=x=2Cy=,\x01auth=Bearer {t}\x01\x01",  # a bad saslname
        "n,,\x01auth=Bearer {t}\x01\x01\x00",
        "n,,\x01auth=Bearer \u00e9{t}\x01\x01",
        "",
        "\x01",  # ^A before any error: read as an initial response
    ],
)
def test_a_message_kafka_cannot_read_gets_the_generic_refusal(data):
    session = session_of()
    handshake(session)
    out, response = authenticate(session, data.replace("{t}", jws(claims())))
    assert isinstance(out, Close) and not session.complete
    assert response.error_code == 58 and response.error_message == GENERIC.format("authentication")


def test_extensions_a_bearer_in_any_case_and_an_authzid_of_the_principal_log_in():
    session = session_of()
    handshake(session)
    data = initial(jws(claims()), "alice", "\x01traceId=a b\x01auth=Bearer " + jws(claims()))
    data = data.replace("auth=Bearer", "auth=bEaReR", 1)
    out, response = authenticate(session, data)
    assert response.error_code == 0 and session.complete and session.user == "alice"


def test_an_authzid_other_than_the_principal_is_refused_with_kafkas_message():
    session = session_of()
    handshake(session)
    out, response = authenticate(session, initial(jws(claims()), "bob"))
    assert isinstance(out, Close) and response.error_code == 58
    assert response.error_message == (
        "Authentication failed: Client requested an authorization id (bob) that is different "
        "from the token's principal name (alice)"
    )


def test_a_principal_that_is_no_utf8_is_refused_with_kafkas_question_mark():
    # a JSON escape of a lone surrogate: Java's String holds it and its UTF-8 says "?"
    token = raw_jws(b'{"sub":"a\\ud800","exp":%d}' % (NOW + 60))
    session = session_of()
    handshake(session)
    out, response = authenticate(session, initial(token, authzid="bob"))
    assert isinstance(out, Close) and response.error_code == 58
    assert "authorization id (bob) that is different from the token's principal name (a?)" in (
        response.error_message
    )
    clock = Clock()
    session = session_of(clock=clock)
    handshake(session)
    authenticate(session, initial(jws(claims())))
    clock.now += 2
    session.after_login(encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, 5, "t"))
    out, response = authenticate(session, initial(token))
    assert isinstance(out, Close) and response.error_code == 58
    assert response.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.a?"
    )


def test_the_clients_words_reach_the_log_as_one_short_line():
    # an authzid may hold control characters (RFC 7628's saslname), a principal anything:
    # the reason the broker logs must not forge log lines nor grow with the client's bytes
    forged = "x\r\n2026-01-01 INFO closed nothing"
    session = session_of()
    handshake(session)
    out, response = authenticate(session, initial(jws(claims()), authzid=forged))
    assert isinstance(out, Close) and forged in response.error_message  # Kafka's answer
    assert "\n" not in out.reason and "\r" not in out.reason
    long = forged + "y" * 40_000
    session = session_of()
    handshake(session, version=0)  # bare tokens: the same reason, no answer
    out = session.receive(_bare(initial(jws(claims()), authzid=long).encode()))
    assert isinstance(out, Close) and "\n" not in out.reason and len(out.reason) < 500


def test_a_refusal_too_long_for_its_answer_ends_the_login_unanswered():
    # Kafka's message names the authzid; over 32767 bytes Kafka cannot write its answer
    # (a string field's limit) and the connection ends without one
    session = session_of()
    handshake(session)
    out, response = authenticate(session, initial(jws(claims()), authzid="y" * 40_000))
    assert isinstance(out, Close) and out.answer is None and not session.complete
    assert len(out.reason) < 500


def test_after_the_error_a_new_initial_response_is_read_afresh():
    session = session_of()
    handshake(session)
    out, response = authenticate(session, initial(BAD_TOKENS["expired"]))
    assert response.auth_bytes == INVALID
    out, response = authenticate(session, initial(jws(claims())))
    assert response.error_code == 0 and session.complete and session.user == "alice"


def test_a_v0_handshake_takes_the_tokens_bare():
    session = session_of()
    handshake(session, version=0)
    assert session.raw
    out = session.receive(_bare(initial(BAD_TOKENS["no sub"]).encode()))
    assert out == _bare(INVALID)
    out = session.receive(_bare(b"\x01"))
    assert isinstance(out, Close) and out.answer is None and not session.complete
    session = session_of()
    handshake(session, version=0)
    assert session.receive(_bare(initial(jws(claims())).encode())) == _bare(b"")
    assert session.complete and session.user == "alice"


def _bare(token):
    return len(token).to_bytes(4, "big") + token


def test_a_validator_of_the_tests_own_decides():
    seen = []

    def validate(token):
        seen.append(token)
        if token == "let-me-in":
            return "carol"
        if token == "timed":
            return Token("dave", lifetime_ms=int(NOW * 1000) + 5000)
        if token == "scoped":
            raise InvalidToken("no", "insufficient_scope", "admin")
        raise ValueError("unknown token")

    for token, user, lifetime in (("let-me-in", "carol", 0), ("timed", "dave", 5000)):
        session = session_of(validate)
        handshake(session)
        out, response = authenticate(session, initial(token))
        assert session.user == user and response.session_lifetime_ms == lifetime
    assert refused(session_of(validate), initial("nope")) == INVALID
    scoped = refused(session_of(validate), initial("scoped"))

    def weird(token):
        raise InvalidToken("a status that is no text", "\ud800")

    assert refused(session_of(weird), initial("x")) == b'{"status":"?"}'
    assert scoped == b'{"status":"insufficient_scope", "scope":"admin"}'
    assert seen == ["let-me-in", "timed", "nope", "scoped"]


@pytest.mark.parametrize(
    "returned",
    [
        *("", "  ", None, 5, ("a", 1), Token(5), Token("a", "soon"), Token("a", 1.5)),
        *(Token("a", True), Token("a", 2**63), Token("a", -(2**63) - 1), Token("a", 10**400)),
    ],
)
def test_a_validator_giving_no_principal_logs_nobody_in(returned):  # nor fails the broker
    session = session_of(lambda token: returned)
    handshake(session)
    out, response = authenticate(session, initial("t"))
    assert not session.complete
    if isinstance(out, Close):
        assert out.answer is None  # not a name nor a Token: the validator's error
    else:
        assert response.auth_bytes == INVALID


@pytest.mark.parametrize("raised", [asyncio.CancelledError, GeneratorExit, BaseException])
def test_a_validator_raising_a_base_exception_ends_only_its_login(raised):
    # (pytest.fail's exception is one): the connection ends unanswered, as Kafka's does on
    # an error inside its callback handler; KeyboardInterrupt and SystemExit go through
    def validate(token):
        raise raised("the validator's own")

    session = session_of(validate)
    handshake(session)
    out, response = authenticate(session, initial("t"))
    assert isinstance(out, Close) and out.answer is None and not session.complete
    assert raised.__name__ in out.reason
    for stop in (KeyboardInterrupt, SystemExit):

        def stopping(token, stop=stop):
            raise stop()

        session = session_of(stopping)
        handshake(session)
        with pytest.raises(stop):
            authenticate(session, initial("t"))


# ---- KIP-368: re-authentication


def plain_session(max_reauth_ms, clock):
    return session_of(
        users=Users({"alice": "pw", "bob": "pw2"}), max_reauth_ms=max_reauth_ms, clock=clock
    )


def plain_login(session, user="alice", password="pw", version=2):
    out = handshake(session, "PLAIN")
    if isinstance(out, Close):
        return out, None
    token = Plain(user, password).start()
    return authenticate(session, token, version)


def test_session_lifetime_is_the_least_of_max_reauth_and_the_tokens_life():
    clock = Clock()
    for max_reauth_ms, exp, expected in ((0, 60, 60_000), (5000, 60, 5000), (90_000, 60, 60_000)):
        session = session_of(max_reauth_ms=max_reauth_ms, clock=clock)
        handshake(session)
        out, response = authenticate(session, initial(jws(claims(exp=NOW + exp))))
        assert response.session_lifetime_ms == expected
    session = plain_session(0, clock)
    out, response = plain_login(session)
    assert response.session_lifetime_ms == 0 and session.expires is None
    session = plain_session(2500, clock)
    out, response = plain_login(session)
    assert response.session_lifetime_ms == 2500 and session.expires == NOW + 2.5


def metadata():
    return encode_request(MetadataRequest(topics=None), 12, 9, "t")


def test_a_session_re_authenticates_mid_stream_and_an_expired_one_is_closed():
    clock = Clock()
    session = plain_session(2000, clock)
    plain_login(session)
    assert session.after_login(metadata()) is None  # served
    clock.now += 1.5
    out = session.after_login(encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 5, "t"))
    assert decode_response(out, 17, 1)[1].error_code == 0 and not session.complete
    out, response = authenticate(session, Plain("alice", "pw").start())
    assert response.error_code == 0 and response.session_lifetime_ms == 2000
    assert session.complete and session.expires == clock.now + 2
    clock.now += 2.001
    out = session.after_login(metadata())
    assert isinstance(out, Close) and out.answer is None  # Kafka's SocketServer: unanswered
    assert "expired" in out.reason


def test_an_expired_session_may_still_re_authenticate():
    clock = Clock()
    session = plain_session(1000, clock)
    plain_login(session)
    clock.now += 5
    out = session.after_login(encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 5, "t"))
    assert decode_response(out, 17, 1)[1].error_code == 0
    authenticate(session, Plain("alice", "pw").start())
    assert session.complete and session.after_login(metadata()) is None


def test_re_authentication_is_at_most_once_a_second():
    clock = Clock()
    session = plain_session(60_000, clock)
    plain_login(session)
    handshake_frame = encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 5, "t")
    session.after_login(handshake_frame)
    authenticate(session, Plain("alice", "pw").start())
    clock.now += 0.5
    assert session.after_login(handshake_frame) is None  # on to Apis: ILLEGAL_SASL_STATE
    clock.now += 0.5
    assert session.after_login(handshake_frame) is not None


def test_re_authentication_keeps_the_principal():
    clock = Clock()
    session = plain_session(60_000, clock)
    plain_login(session)
    session.after_login(encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 5, "t"))
    out, response = authenticate(session, Plain("bob", "pw2").start())
    assert isinstance(out, Close) and response.error_code == 58
    assert response.error_message == (
        "Cannot change principals during re-authentication from User.alice: User.bob"
    )


def test_re_authentication_keeps_the_mechanism():
    clock = Clock()
    users = Users(
        {"alice": "pw"}, ["PLAIN", "OAUTHBEARER"], oauthbearer=UnsecuredValidator(clock=clock)
    )
    session = SaslSession(users, 60_000, clock)
    plain_login(session)
    out = session.after_login(
        encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, 5, "t")
    )
    assert decode_response(out, 17, 1)[1].error_code == 0  # answered, as Kafka answers it
    out, response = authenticate(session, initial(jws(claims())))
    assert isinstance(out, Close) and out.answer is None and not session.complete


def test_a_failed_re_authentication_says_so():
    clock = Clock()
    session = plain_session(60_000, clock)
    plain_login(session)
    session.after_login(encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 5, "t"))
    out, response = authenticate(session, b"junk")
    assert isinstance(out, Close) and response.error_code == 58
    assert response.error_message == (
        "Authentication failed during re-authentication due to invalid credentials with SASL "
        "mechanism PLAIN"
    )
    # a request other than SaslAuthenticate while re-authenticating: ILLEGAL_SASL_STATE
    session = plain_session(60_000, clock)
    plain_login(session)
    session.after_login(encode_request(SaslHandshakeRequest(mechanism="PLAIN"), 1, 5, "t"))
    out = session.receive(encode_request(ApiVersionsRequest(), 3, 6, "t"))
    assert isinstance(out, Close)


def test_an_oauthbearer_session_re_authenticates_with_a_new_token():
    clock = Clock()
    session = session_of(clock=clock)
    handshake(session)
    authenticate(session, initial(jws(claims(exp=NOW + 10))))
    clock.now += 9
    out = session.after_login(
        encode_request(SaslHandshakeRequest(mechanism="OAUTHBEARER"), 1, 3, "t")
    )
    assert decode_response(out, 17, 1)[1].error_code == 0
    out, response = authenticate(session, initial(jws(claims(exp=clock.now + 30))))
    assert response.session_lifetime_ms == 30_000 and session.user == "alice"


# ---- settings


def test_the_settings_enable_oauthbearer():
    broker = Broker(oauthbearer=True)
    assert broker.security_protocol == "SASL_PLAINTEXT"
    assert broker.users.mechanisms == ["OAUTHBEARER"]
    assert isinstance(broker.users.oauthbearer, UnsecuredValidator)
    broker = Broker(users={"a": "b"}, oauthbearer=lambda token: "x", connections_max_reauth_ms=5)
    assert broker.users.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"]
    assert broker.connections_max_reauth_ms == 5
    broker = Broker(sasl_mechanisms=["OAUTHBEARER"])
    assert isinstance(broker.users.oauthbearer, UnsecuredValidator)
    assert Broker(users={"a": "b"}).users.mechanisms == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]


async def _async_validator(token):
    return "alice"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"users": {"a": "b"}, "oauthbearer": True, "sasl_mechanisms": ["PLAIN"]},
            "oauthbearer: given, but",
        ),
        (
            {"oauthbearer": True, "sasl_mechanisms": ["PLAIN", "OAUTHBEARER"]},
            "users: a SASL listener needs",
        ),
        ({"oauthbearer": "yes"}, "oauthbearer: True"),
        # the class, not a validator: each token would make one, and each login end
        ({"oauthbearer": UnsecuredValidator}, r"oauthbearer: .*UnsecuredValidator\(\)"),
        # a coroutine is no answer: the login cannot wait for one
        ({"oauthbearer": _async_validator}, "oauthbearer: an async function"),
        ({"oauthbearer": True, "connections_max_reauth_ms": -1}, "connections_max_reauth_ms"),
        ({"users": {"a": "b"}, "connections_max_reauth_ms": 1.5}, "connections_max_reauth_ms"),
        # Kafka's long: a session's lifetime must fit SaslAuthenticate's int64
        ({"users": {"a": "b"}, "connections_max_reauth_ms": 2**63}, "connections_max_reauth_ms"),
    ],
)
def test_oauthbearer_settings_that_cannot_work_name_their_parameter(kwargs, message):
    with pytest.raises((ValueError, TypeError), match=message):
        Broker(**kwargs)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"principal_claim": " "}, "principal_claim"),
        ({"scope_claim": None}, "scope_claim"),
        ({"required_scope": ["a\\b"]}, "required_scope"),
        ({"required_scope": 'a "b"'}, "required_scope"),
        ({"allowable_clock_skew_ms": -1}, "allowable_clock_skew_ms"),
        ({"allowable_clock_skew_ms": 2**31}, "allowable_clock_skew_ms"),
    ],
)
def test_unsecured_validator_options_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        UnsecuredValidator(**kwargs)


def test_hostile_oauthbearer_logins_keep_the_sessions_contract():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "fuzz"))
    try:
        import hostile_sasl
    finally:
        sys.path.pop(0)
    counts, findings, _ = hostile_sasl.run(400, 7, stop_after=1, oauthbearer=True)
    assert findings == 0
    for what in ("re-logged in", "re-refused", "expired", "refused"):
        assert counts.get(what, 0) > 0, counts


def test_fastkwires_own_client_mechanism_logs_in_and_reads_the_error_status():
    from fastkwire.sasl import OAuthBearer

    for token, user, status in (
        (jws(claims()), "alice", None),
        (BAD_TOKENS["expired"], None, "invalid_token"),
    ):
        session = session_of()
        handshake(session)
        client = OAuthBearer(token)
        out, response = authenticate(session, client.start())
        reply = client.step(response.auth_bytes)
        if reply is not None:
            out, response = authenticate(session, reply)
            assert isinstance(out, Close) and response.error_code == 58
        assert session.user == user and client.status == status

"""SASL on the broker's listeners, as Kafka 4 serves it: PLAIN (RFC 4616) and SCRAM-SHA-256/512
(RFC 5802, RFC 7677) against the users given at start.

A connection on a SASL listener has a `SaslSession` until it has authenticated. It takes
the frames first (Kafka's SaslServerAuthenticator):
- before the handshake: ApiVersions (answered by `Apis`) and SaslHandshake only; any other
  request ends the connection (Kafka: "Unexpected Kafka request of type ... during SASL
  handshake"). A mechanism that is not enabled gets UNSUPPORTED_SASL_MECHANISM with the list,
  then the connection ends.
- after a v1 handshake: SaslAuthenticate requests (KIP-152) carry the tokens; another request
  gets its error answer with ILLEGAL_SASL_STATE, then the connection ends. After a v0
  handshake the tokens come as bare size-prefixed frames, and go back the same way.
- a refused login gets SASL_AUTHENTICATION_FAILED with Kafka's message, then the connection
  ends. Before the login, a frame larger than `SASL_MAX_RECEIVE_BYTES` ends it (Kafka's
  sasl.server.max.receive.size).

SCRAM keeps Kafka's credentials (salt, iterations, stored key, server key) and never the
password; the client's proof, the nonce and the channel-binding attribute are checked.
After the login, SaslHandshake and SaslAuthenticate are the `Apis`' (_sasl_apis.py).
"""

import base64
import hashlib
import hmac
import secrets
from types import SimpleNamespace

from .. import (
    ApiVersionsRequest,
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
    decode_request,
    encode_response,
)
from .._explain_apis import api_names
from ..error_codes import by_name
from ..errors import DecodeError, UnsupportedVersionError
from ..proxy._faults import error_answer
from ..proxy._frames import request_header
from ..sasl import SCRAM_HASHES, SCRAM_MAX_ITERATIONS, SCRAM_MIN_ITERATIONS
from ._exchange import Close

MECHANISMS = ("PLAIN", *SCRAM_HASHES)
DEFAULT_SCRAM_ITERATIONS = 4096  # Kafka's kafka-configs default
SASL_MAX_RECEIVE_BYTES = 524288  # Kafka's sasl.server.max.receive.size
HANDSHAKE, AUTHENTICATE, COMPLETE = "handshake", "authenticate", "complete"
SASL_AUTHENTICATION_FAILED = by_name("SASL_AUTHENTICATION_FAILED").code
UNSUPPORTED_SASL_MECHANISM = by_name("UNSUPPORTED_SASL_MECHANISM").code
ILLEGAL_SASL_STATE = by_name("ILLEGAL_SASL_STATE").code
PASS = object()  # the frame goes on to Apis


class Refused(Exception):
    """A login refused; the message is what the client is told."""


def _generic(mechanism):
    # Kafka's words when the mechanism's own reason must not reach the client.
    return (
        "Authentication failed during authentication due to invalid credentials with SASL "
        f"mechanism {mechanism}"
    )


class Users:
    """The users a SASL listener knows: {name: password}. PLAIN checks the password; each
    SCRAM mechanism keeps a random salt, the iteration count and the keys derived from the
    password (Kafka's SCRAM credential), made once here."""

    def __init__(self, users, mechanisms=None, scram_iterations=DEFAULT_SCRAM_ITERATIONS):
        if not isinstance(users, dict) or not users:
            raise ValueError("users: a SASL listener needs a dict of at least one {name: password}")
        mechanisms = list(MECHANISMS if mechanisms is None else mechanisms)
        if isinstance(mechanisms, str) or not mechanisms:
            raise ValueError("sasl_mechanisms: a list of at least one mechanism")
        for m in mechanisms:
            if m not in MECHANISMS:
                raise ValueError(
                    f"sasl_mechanisms: {m!r} is not served (expected some of {', '.join(MECHANISMS)})"
                )
        if (
            isinstance(scram_iterations, bool)
            or not isinstance(scram_iterations, int)
            or not SCRAM_MIN_ITERATIONS <= scram_iterations <= SCRAM_MAX_ITERATIONS
        ):
            raise ValueError(
                f"scram_iterations: from {SCRAM_MIN_ITERATIONS} (Kafka's minimum) to "
                f"{SCRAM_MAX_ITERATIONS} (its clients' maximum), not {scram_iterations!r}"
            )
        self.mechanisms = list(dict.fromkeys(mechanisms))
        self.iterations = scram_iterations
        self._plain = {}
        self._scram = {m: {} for m in SCRAM_HASHES if m in self.mechanisms}
        for name, password in users.items():
            if not isinstance(name, str) or not name or not isinstance(password, str):
                raise ValueError(
                    f"users: {name!r}: a user is a non-empty name and a password (str)"
                )
            secret = _utf8(password, f"users: {name!r}'s password")
            _utf8(name, "users: a user name")
            if "PLAIN" in self.mechanisms:
                self._plain[name] = secret
            for mechanism, table in self._scram.items():
                table[name] = _scram_credential(SCRAM_HASHES[mechanism], secret, scram_iterations)

    @property
    def names(self):
        return sorted(set(self._plain) | {n for t in self._scram.values() for n in t})

    def server(self, mechanism):
        """A new exchange of `mechanism` (one of self.mechanisms)."""
        if mechanism == "PLAIN":
            return _PlainServer(self._plain)
        return _ScramServer(mechanism, self._scram[mechanism])


def _utf8(text, what):
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        pass  # raised outside the handler, so that no context shows the text
    raise ValueError(f"{what} is not valid Unicode (a lone surrogate)")


def _scram_credential(hash_name, password, iterations):
    salt = secrets.token_bytes(24)
    salted = hashlib.pbkdf2_hmac(hash_name, password, salt, iterations)
    client_key = hmac.new(salted, b"Client Key", hash_name).digest()
    return SimpleNamespace(
        salt=salt,
        iterations=iterations,
        stored_key=hashlib.new(hash_name, client_key).digest(),
        server_key=hmac.new(salted, b"Server Key", hash_name).digest(),
    )


class _PlainServer:
    """RFC 4616: [authzid] NUL authcid NUL passwd, one message."""

    name = "PLAIN"

    def __init__(self, passwords):
        self._passwords = passwords
        self.complete = False
        self.user = None

    def step(self, data):
        parts = bytes(data).split(b"\0", 2)
        if len(parts) != 3:
            raise Refused(_generic(self.name))  # Kafka: "expected 3 tokens" is not told
        authzid, user, password = parts
        if not user or not password:
            raise Refused(_generic(self.name))
        try:
            user = user.decode("utf-8")
            authzid = authzid.decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(_generic(self.name)) from None
        known = self._passwords.get(user)
        # compared whether the user is known or not: the time does not tell which
        matched = hmac.compare_digest(password, known if known is not None else b"")
        if known is None or not matched:
            raise Refused("Authentication failed: Invalid username or password")
        if authzid and authzid != user:
            raise Refused(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self.complete, self.user = True, user
        return b""


def _unescape(saslname):
    """RFC 5802's saslname: '=2C' is ',', '=3D' is '='; any other '=' is malformed."""
    out, i = [], 0
    while i < len(saslname):
        c = saslname[i]
        if c == "=":
            code = saslname[i + 1 : i + 3]
            if code not in ("2C", "3D"):
                return None
            out.append("," if code == "2C" else "=")
            i += 3
        else:
            out.append(c)
            i += 1
    return "".join(out)


class _ScramServer:
    """RFC 5802 server side: client-first, server-first (our nonce appended, the salt, the
    iterations), client-final (nonce, channel binding, proof checked), server-final."""

    def __init__(self, mechanism, credentials):
        self.name = mechanism
        self._hash = SCRAM_HASHES[mechanism]
        self._credentials = credentials
        self._state = "first"
        self.complete = False
        self.user = None

    def step(self, data):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError:
            raise Refused(_generic(self.name)) from None
        if self._state == "first":
            return self._first(text)
        if self._state == "final":
            return self._final(text)
        raise Refused(_generic(self.name))

    def _first(self, text):
        self._state = "failed"
        # gs2 header: "n," (no channel binding, as Kafka takes it), an optional "a=authzid", ","
        flag, _, rest = text.partition(",")
        authzid, sep, bare = rest.partition(",")
        if flag != "n" or not sep or (authzid and not authzid.startswith("a=")):
            raise Refused(_generic(self.name))
        attrs = bare.split(",")
        if len(attrs) < 2 or not attrs[0].startswith("n=") or not attrs[1].startswith("r="):
            raise Refused(_generic(self.name))
        user, nonce = _unescape(attrs[0][2:]), attrs[1][2:]
        credential = self._credentials.get(user) if user else None
        if credential is None or not nonce or not nonce.isprintable():
            raise Refused(_generic(self.name))
        if authzid and _unescape(authzid[2:]) != user:
            raise Refused(
                "Authentication failed: Client requested an authorization id that is different "
                "from username"
            )
        self._gs2_header = f"{flag},{authzid},"
        self._nonce = nonce + secrets.token_hex(16)
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._nonce},s={salt},i={credential.iterations}"
        self._client_first_bare = bare
        self._credential, self.user = credential, user
        self._state = "final"
        return self._server_first.encode()

    def _final(self, text):
        self._state = "failed"
        without_proof, sep, proof = text.rpartition(",p=")
        attrs = without_proof.split(",")
        channel = base64.b64encode(self._gs2_header.encode()).decode()
        if (
            not sep
            or len(attrs) < 2
            or attrs[0] != f"c={channel}"
            or attrs[1] != f"r={self._nonce}"
        ):
            raise Refused(_generic(self.name))
        try:
            proof = base64.b64decode(proof, validate=True)
        except ValueError:
            raise Refused(_generic(self.name)) from None
        credential = self._credential
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.new(credential.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(signature):
            raise Refused(_generic(self.name))
        client_key = bytes(a ^ b for a, b in zip(proof, signature))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise Refused(_generic(self.name))
        verifier = hmac.new(credential.server_key, auth_message, self._hash).digest()
        self._state, self.complete = "done", True
        return b"v=" + base64.b64encode(verifier)


class SaslSession:
    """One connection's login on a SASL listener; `receive(frame)` gives PASS (the frame goes
    on to Apis: an ApiVersions request), an answer's bytes, or a Close (with the answer to
    send before closing, where Kafka sends one)."""

    def __init__(self, users):
        self.users = users
        self.state = HANDSHAKE
        self.raw = False  # after a v0 handshake: bare tokens
        self.server = None
        self.user = None
        self.mechanism = None

    @property
    def complete(self):
        return self.state == COMPLETE

    def receive(self, frame):
        if self.state == AUTHENTICATE and self.raw:
            return self._raw_token(frame)
        header = request_header(frame)
        if header is None:
            return Close(f"a frame of {len(frame)} bytes before SASL authentication")
        name = api_names().get(header.api_key, f"API key {header.api_key}")
        if self.state == HANDSHAKE:
            if header.api_key == ApiVersionsRequest.API_KEY:
                return PASS
            if header.api_key != SaslHandshakeRequest.API_KEY:
                return Close(f"unexpected Kafka request of type {name} during SASL handshake")
            return self._handshake(frame, header)
        if header.api_key != SaslAuthenticateRequest.API_KEY:
            why = f"unexpected Kafka request of type {name} during SASL authentication"
            try:
                answer = error_answer(_exchange(header, frame), ILLEGAL_SASL_STATE)
            except (ValueError, DecodeError):
                answer = None
            return Close(why, answer)
        return self._authenticate(frame, header)

    def _decoded(self, frame, header, cls):
        if not cls.MIN_VERSION <= header.api_version <= cls.MAX_VERSION:
            return None
        try:
            return decode_request(frame, trailing="keep")[1]
        except (DecodeError, UnsupportedVersionError):
            return None

    def _handshake(self, frame, header):
        request = self._decoded(frame, header, SaslHandshakeRequest)
        if request is None:
            return Close(f"a SaslHandshake v{header.api_version} that cannot be read")
        enabled = self.users.mechanisms
        known = request.mechanism in enabled
        answer = _encode(
            SaslHandshakeResponse(
                error_code=0 if known else UNSUPPORTED_SASL_MECHANISM, mechanisms=list(enabled)
            ),
            header,
        )
        if not known:
            return Close(f"SASL mechanism {request.mechanism!r} is not enabled", answer)
        self.mechanism = request.mechanism
        self.server = self.users.server(request.mechanism)
        self.raw = header.api_version == 0
        self.state = AUTHENTICATE
        return answer

    def _authenticate(self, frame, header):
        request = self._decoded(frame, header, SaslAuthenticateRequest)
        if request is None:
            return Close(f"a SaslAuthenticate v{header.api_version} that cannot be read")
        try:
            token = self.server.step(request.auth_bytes)
        except Refused as e:
            answer = _encode(
                SaslAuthenticateResponse(
                    error_code=SASL_AUTHENTICATION_FAILED, error_message=str(e)
                ),
                header,
            )
            return Close(f"SASL {self.mechanism} authentication failed: {e}", answer)
        self._done()
        return _encode(SaslAuthenticateResponse(auth_bytes=token), header)

    def _raw_token(self, frame):
        try:
            token = self.server.step(frame[4:])
        except Refused as e:
            return Close(f"SASL {self.mechanism} authentication failed: {e}")
        self._done()
        return len(token).to_bytes(4, "big") + token

    def _done(self):
        if self.server.complete:
            self.state, self.user = COMPLETE, self.server.user


def _exchange(header, frame):
    return SimpleNamespace(
        api_key=header.api_key,
        api_version=header.api_version,
        correlation_id=header.correlation_id,
        request=frame,
    )


def _encode(response, header):
    return encode_response(response, header.api_version, header.correlation_id)

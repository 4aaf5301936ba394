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

The users and the mechanisms' server side are _credentials.py's.
After the login, SaslHandshake and SaslAuthenticate are the `Apis`' (_sasl_apis.py).
"""

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
from ._credentials import DEFAULT_SCRAM_ITERATIONS, MECHANISMS, Refused, Users
from ._exchange import Close

__all__ = ["DEFAULT_SCRAM_ITERATIONS", "MECHANISMS", "PASS", "SaslSession", "Users"]

SASL_MAX_RECEIVE_BYTES = 524288  # Kafka's sasl.server.max.receive.size
HANDSHAKE, AUTHENTICATE, COMPLETE = "handshake", "authenticate", "complete"
SASL_AUTHENTICATION_FAILED = by_name("SASL_AUTHENTICATION_FAILED").code
UNSUPPORTED_SASL_MECHANISM = by_name("UNSUPPORTED_SASL_MECHANISM").code
ILLEGAL_SASL_STATE = by_name("ILLEGAL_SASL_STATE").code
PASS = object()  # the frame goes on to Apis


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

"""SASL on the broker's listeners, as Kafka 4 serves it: PLAIN (RFC 4616) and SCRAM-SHA-256/512
(RFC 5802, RFC 7677) against the users given at start, OAUTHBEARER (RFC 7628) against a
token validator; and KIP-368's re-authentication.

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

- once logged in, a session has an end where Kafka gives it one (connections.max.reauth.ms
  above 0, or an OAUTHBEARER token's expiry: SaslAuthenticate v1+ tells the client how
  long). Such a session may log in again on its connection (a SaslHandshake, at most once a
  second, then SaslAuthenticate as above: the same mechanism and principal), and ends at
  its first other request once past its end (Kafka's KafkaChannel and SocketServer).

The users and the mechanisms' server side are _credentials.py's and _oauthbearer.py's.
After the login, SaslHandshake and SaslAuthenticate are the `Apis`' (_sasl_apis.py).
"""

import math
import time
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
from ..errors import DecodeError, EncodeError, UnsupportedVersionError
from ..proxy._faults import error_answer
from ..proxy._frames import request_header
from ._credentials import DEFAULT_SCRAM_ITERATIONS, MECHANISMS, Users
from ._sasl_refusal import Refused, Unanswered, generic_refusal
from ._exchange import Close

__all__ = ["DEFAULT_SCRAM_ITERATIONS", "MECHANISMS", "PASS", "SaslSession", "Users"]

SASL_MAX_RECEIVE_BYTES = 524288  # Kafka's sasl.server.max.receive.size
HANDSHAKE, AUTHENTICATE, COMPLETE = "handshake", "authenticate", "complete"
BAD_MECHANISM = "bad mechanism"  # a re-authentication asked for another mechanism
REAUTH_MIN_INTERVAL = 1.0  # seconds: Kafka's KafkaChannel begins at most one a second
SASL_AUTHENTICATION_FAILED = by_name("SASL_AUTHENTICATION_FAILED").code
UNSUPPORTED_SASL_MECHANISM = by_name("UNSUPPORTED_SASL_MECHANISM").code
ILLEGAL_SASL_STATE = by_name("ILLEGAL_SASL_STATE").code
PASS = object()  # the frame goes on to Apis


class SaslSession:
    """One connection's login on a SASL listener; `receive(frame)` gives PASS (the frame goes
    on to Apis: an ApiVersions request), an answer's bytes, or a Close (with the answer to
    send before closing, where Kafka sends one). Once logged in, `after_login(frame)` (only
    while the session has an expiry, `expires`) begins a re-authentication or ends an
    expired session. `max_reauth_ms`: Kafka's connections.max.reauth.ms; `clock`: seconds
    since the epoch (tokens' expiry is wall time)."""

    def __init__(self, users, max_reauth_ms=0, clock=time.time):
        self.users = users
        self.max_reauth_ms = max_reauth_ms
        self.clock = clock
        self.state = HANDSHAKE
        self.raw = False  # after a v0 handshake: bare tokens
        self.server = None
        self.user = None
        self.mechanism = None
        self.expires = None  # when the session ends (clock seconds); None: never
        self.previous = None  # (mechanism, user) of the session being re-authenticated
        self.reauth_began = None  # when the last re-authentication began (clock seconds)
        self._bad_mechanism = None  # why a re-authentication's next frame ends it

    @property
    def complete(self):
        return self.state == COMPLETE

    @property
    def _during(self):
        return "re-authentication" if self.previous else "authentication"

    def after_login(self, frame):
        """None (the frame goes on to Apis), or what it gets instead: a SaslHandshake begins
        a re-authentication where Kafka's KafkaChannel begins one (the session has an expiry,
        and the last one began at least a second ago); any other frame of an expired session
        ends the connection, unanswered, as Kafka's SocketServer ends it."""
        if self.expires is None:  # a session without an end: Kafka begins none
            return None
        header = request_header(frame)
        now = self.clock()
        if (
            header is not None
            and header.api_key == SaslHandshakeRequest.API_KEY
            and (self.reauth_began is None or now - self.reauth_began >= REAUTH_MIN_INTERVAL)
        ):
            self.reauth_began = now
            self.previous = (self.mechanism, self.user)
            self.state, self.server = HANDSHAKE, None
            return self.receive(frame)
        if now > self.expires:
            name = "a frame" if header is None else api_names().get(header.api_key, "a request")
            return Close(f"{name} after the SASL session expired (it was not re-authenticated)")
        return None

    def receive(self, frame):
        if self.state == BAD_MECHANISM:
            return Close(self._bad_mechanism)
        if self.state == AUTHENTICATE and self.raw:
            return self._raw_token(frame)
        header = request_header(frame)
        if header is None:
            return Close(f"a frame of {len(frame)} bytes before SASL authentication")
        name = api_names().get(header.api_key, f"API key {header.api_key}")
        if self.state == HANDSHAKE:
            if header.api_key == ApiVersionsRequest.API_KEY and not self.previous:
                return PASS
            if header.api_key != SaslHandshakeRequest.API_KEY:
                return Close(f"unexpected Kafka request of type {name} during SASL handshake")
            return self._handshake(frame, header)
        if header.api_key != SaslAuthenticateRequest.API_KEY:
            why = f"unexpected Kafka request of type {name} during SASL {self._during}"
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
            return Close(f"SASL mechanism {_logged(request.mechanism)} is not enabled", answer)
        self.raw = header.api_version == 0
        if self.previous and request.mechanism != self.previous[0]:
            # Kafka answers the handshake, then ends the connection at the next frame
            self._bad_mechanism = (
                f"SASL mechanism {_logged(request.mechanism)} requested by client is not "
                f"supported for re-authentication of mechanism {self.previous[0]!r}"
            )
            self.state = BAD_MECHANISM
            return answer
        self.mechanism = request.mechanism
        self.server = self.users.server(request.mechanism)
        self.state = AUTHENTICATE
        return answer

    def _authenticate(self, frame, header):
        request = self._decoded(frame, header, SaslAuthenticateRequest)
        if request is None:
            return Close(f"a SaslAuthenticate v{header.api_version} that cannot be read")
        try:
            token = self.server.step(request.auth_bytes)
            lifetime_ms = self._done()
        except Refused as e:
            message = self._told(e)
            try:
                answer = _encode(
                    SaslAuthenticateResponse(
                        error_code=SASL_AUTHENTICATION_FAILED, error_message=message
                    ),
                    header,
                )
            except EncodeError:  # a message over a string's 32767 bytes: Kafka's fails too
                answer = None
            return Close(self._failed(message), answer)
        except Unanswered as e:
            return Close(self._failed(str(e)))
        return _encode(
            SaslAuthenticateResponse(auth_bytes=token, session_lifetime_ms=lifetime_ms), header
        )

    def _raw_token(self, frame):
        try:
            token = self.server.step(frame[4:])
            self._done()
        except (Refused, Unanswered) as e:
            return Close(self._failed(self._told(e)))
        return len(token).to_bytes(4, "big") + token

    def _failed(self, message):
        """The reason logged for a failed login: the client's words escaped and cut."""
        return f"SASL {self.mechanism} {self._during} failed: {_logged(message)}"

    def _told(self, refusal):
        message = str(refusal)
        if self.previous and message == generic_refusal(self.mechanism):
            return generic_refusal(self.mechanism, self._during)
        # A token's principal may hold a lone surrogate (a JSON escape): Java's UTF-8 of
        # the message says "?" for it, and so must ours, or the answer cannot be encoded.
        return message.encode("utf-8", "replace").decode("utf-8")

    def _done(self):
        """The session's lifetime in ms once the exchange is complete (0: none), as Kafka's
        SaslServerAuthenticator works it out: the least of connections.max.reauth.ms (when
        above 0) and what is left of the credential's life (an OAUTHBEARER token's)."""
        server = self.server
        if not server.complete:
            return 0
        if self.previous and server.user != self.previous[1]:
            raise Refused(
                "Cannot change principals during re-authentication from "
                f"User.{self.previous[1]}: User.{server.user}"
            )
        now = self.clock()
        limits = [self.max_reauth_ms] if self.max_reauth_ms > 0 else []
        if server.lifetime_ms is not None:
            limits.append(server.lifetime_ms - math.floor(now * 1000))
        lifetime_ms = max(0, min(limits)) if limits else 0
        self.expires = now + lifetime_ms / 1000 if limits else None
        self.state, self.user, self.previous = COMPLETE, server.user, None
        return lifetime_ms


def _logged(text, limit=200):
    """A client's text in one log line: escaped (an authzid may hold control characters,
    a token's principal anything) and cut at `limit` characters."""
    return repr(text[:limit]) + ("..." if len(text) > limit else "")


def _exchange(header, frame):
    return SimpleNamespace(
        api_key=header.api_key,
        api_version=header.api_version,
        correlation_id=header.correlation_id,
        request=frame,
    )


def _encode(response, header):
    return encode_response(response, header.api_version, header.correlation_id)

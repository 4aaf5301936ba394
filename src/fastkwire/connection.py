"""Connections to Kafka brokers: blocking (`Connection`) and native asyncio (`AsyncConnection`).

    with Connection("broker", 9093, security_protocol="SASL_SSL", sasl_mechanism="SCRAM-SHA-512",
                    sasl_plain_username="ops", sasl_plain_password=secret, ssl_cafile="ca.pem") as conn:
        response = conn.request(MetadataRequest(topics=None))   # the highest common version

Opening one connects (TLS when the security protocol says so), asks ApiVersions (`.versions`),
and authenticates with SASL (SaslHandshake, then SaslAuthenticate; raw tokens after a v0
handshake), re-authenticating before the session the broker granted runs out
(`session_lifetime_ms`, KIP-368). `request` frames any message of this codec with a fresh
correlation id and checks the answer's. Every wait is bounded by a deadline, and an answer's
size is checked against what such an answer can take before anything is allocated. An
exchange that does not complete (a timeout, a refused size, a wrong correlation id, a
cancellation) closes the connection: its late answer would otherwise be read as the next
request's, so later requests fail with BrokerConnectionError and a new connection is needed.
AsyncConnection does the same on asyncio streams, in the event loop's own thread.

The protocol steps a connection takes when it opens (ApiVersions, SASL) are generators of
I/O steps that do no I/O of their own: `Connect`, `Request`, `Close` and `Sleep`.
`run_steps` runs them on blocking sockets and `run_steps_async` on asyncio; the admin
client's calls are written in the same steps and run by the same two runners.

Failures are `fastkwire.connection_errors` exceptions (`KafkaClientError` and its
subclasses); options that cannot work are ValueError (`OptionError`).
"""

import asyncio
import inspect
import os
import socket
import ssl
import struct
import time

from . import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    SaslAuthenticateRequest,
    SaslHandshakeRequest,
    __version__,
    decode_response,
    encode_request,
)
from ._printable import printable
from .connection_errors import (
    AnswerTooLargeError,
    BadResponseError,
    KafkaBrokerError,
    KafkaClientError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoCommonVersionError,
    OptionError,
    SaslAuthError,
    SaslMechanismError,
    TlsHandshakeError,
    TlsVerifyError,
)
from .error_codes import by_name, lookup
from .errors import DecodeError
from .sasl import MECHANISMS, make_mechanism, utf8

__all__ = [
    "Connection",
    "AsyncConnection",
    "Security",
    "Deadline",
    "Clock",
    "SYSTEM_CLOCK",
    "SECURITY_PROTOCOLS",
    "ANSWER_LIMITS",
    "answer_limit",
    "highest_common_version",
    "format_address",
    "Connect",
    "Request",
    "Close",
    "Sleep",
    "run_steps",
    "run_steps_async",
]

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
MAX_TIMEOUT_MS = 24 * 3600 * 1000  # a day: far beyond any admin call, and safe for socket timeouts
MAX_BROKER_TEXT = 500  # characters of a broker's text quoted in our errors
REAUTH_AT = 0.85  # re-authenticate after this share of the session lifetime, as Kafka's clients do

NONE = by_name("NONE").code
UNSUPPORTED_VERSION = by_name("UNSUPPORTED_VERSION").code
UNSUPPORTED_SASL_MECHANISM = by_name("UNSUPPORTED_SASL_MECHANISM").code
SASL_AUTHENTICATION_FAILED = by_name("SASL_AUTHENTICATION_FAILED").code

KIB, MIB = 1024, 1024 * 1024
# The largest answer a sane broker sends to each request, as (fixed part, per member
# asked): the receive buffer is allocated at the announced size, so a larger announcement
# is refused before anything is allocated. The request's own size is added on top, since
# answers echo the names sent. Other APIs may take DEFAULT_ANSWER_LIMIT (Fetch answers are
# large), or what the caller passes as max_answer_bytes (the admin client passes its own
# caps for the group APIs: they are its policy, not the connection's).
ANSWER_LIMITS = {
    ApiVersionsRequest.API_KEY: (256 * KIB, 0),
    FindCoordinatorRequest.API_KEY: (256 * KIB, 0),  # one host per key
    SaslHandshakeRequest.API_KEY: (64 * KIB, 0),
    SaslAuthenticateRequest.API_KEY: (1 * MIB, 0),
}
DEFAULT_ANSWER_LIMIT = 128 * MIB
RAW_SASL_LIMIT = 64 * KIB  # a server token after a SaslHandshake v0


def answer_limit(msg, request_size, limits=ANSWER_LIMITS):
    """The most bytes (after the size prefix) accepted in answer to `msg`, by `limits`."""
    fixed, per_member = limits.get(msg.API_KEY, (DEFAULT_ANSWER_LIMIT, 0))
    return fixed + per_member * len(getattr(msg, "members", None) or ()) + request_size


def highest_common_version(ranges, cls, lowest=0):
    """The highest version both sides support (and >= lowest), or None."""
    theirs = ranges.get(cls.API_KEY)
    if theirs is None:
        return None
    hi = min(theirs[1], cls.MAX_VERSION)
    lo = max(theirs[0], cls.MIN_VERSION, lowest)
    return hi if hi >= lo else None


def format_address(host, port):
    """HOST:PORT for messages, with a broker's odd characters escaped."""
    host = printable(host, MAX_BROKER_TEXT)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def api_name(msg):
    """'LeaveGroup' for a LeaveGroupRequest (a message or its class)."""
    name = msg.__name__ if isinstance(msg, type) else type(msg).__name__
    return name[: -len("Request")] if name.endswith("Request") else name


class Clock:
    """Where deadlines read the time and Sleep steps wait: the system's, or a test's fake."""

    now = staticmethod(time.monotonic)
    sleep = staticmethod(time.sleep)

    @staticmethod
    async def sleep_async(seconds):
        await asyncio.sleep(seconds)


SYSTEM_CLOCK = Clock()


class Deadline:
    """One time budget shared by every step of a call."""

    def __init__(self, seconds, clock=SYSTEM_CLOCK):
        self.seconds, self.clock = seconds, clock
        self.end = clock.now() + seconds

    def remaining(self):
        return self.end - self.clock.now()

    def share(self, n):
        """A deadline for 1/n of what is left (bootstrap servers share the time left: a silent
        one cannot use up the next one's)."""
        return self if n <= 1 else Deadline(max(self.remaining(), 0) / n, self.clock)


def check_timeout_ms(value, name="request_timeout_ms"):
    """`value` in seconds, or TypeError/ValueError when no socket could keep it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not 0 < value <= MAX_TIMEOUT_MS:  # also refuses nan
        raise ValueError(
            f"{name} must be more than 0 and at most {MAX_TIMEOUT_MS} (a day), not {value!r}"
        )
    return value / 1000.0


# ---------------------------------------------------------------- security options


class Security:
    """TLS and SASL options, named as kafka-python and aiokafka name them.

    Secrets (passwords, the token provider) are kept out of repr() and of every message.
    TLS options with a protocol that has no TLS are refused (they would be ignored, and the
    session would be plaintext), as is `ssl_context` with the TLS files it replaces. Only an
    explicit `ssl_check_hostname=False` turns the host name check off (None means the default).

    `ssl_strict_x509`: None keeps the interpreter's default (strict RFC 5280 checks of the
    certificates, VERIFY_X509_STRICT, from CPython 3.13 on), True asks for them on every
    interpreter, False accepts certificates that lack what they require (a key identifier,
    a critical basicConstraints, a CA's keyUsage), as older tools made them.
    """

    def __init__(
        self,
        security_protocol="PLAINTEXT",
        ssl_context=None,
        ssl_cafile=None,
        ssl_certfile=None,
        ssl_keyfile=None,
        ssl_password=None,
        ssl_check_hostname=True,
        ssl_strict_x509=None,
        sasl_mechanism="PLAIN",
        sasl_plain_username=None,
        sasl_plain_password=None,
        sasl_oauth_token_provider=None,
    ):
        if security_protocol not in SECURITY_PROTOCOLS:
            # Not quoted: a stray trailing backslash in a properties file can join a secret to it.
            raise OptionError(
                "{security_protocol} must be one of {known} (the value given is not shown)",
                "security_protocol",
                known=", ".join(SECURITY_PROTOCOLS),
            )
        self.security_protocol = security_protocol
        self.ssl = security_protocol in ("SSL", "SASL_SSL")
        self.sasl = security_protocol.startswith("SASL_")
        self.sasl_mechanism = sasl_mechanism
        self.sasl_plain_username = sasl_plain_username
        self._password = sasl_plain_password
        self._token_provider = sasl_oauth_token_provider
        self.ssl_cafile = ssl_cafile
        if ssl_check_hostname is None:
            ssl_check_hostname = True
        if not isinstance(
            ssl_check_hostname, bool
        ):  # bool(0) or bool("no") would turn the check off
            raise TypeError(
                f"ssl_check_hostname must be True or False, not {type(ssl_check_hostname).__name__}"
            )
        if ssl_strict_x509 is not None and not isinstance(ssl_strict_x509, bool):
            raise TypeError(
                f"ssl_strict_x509 must be True, False or None, not {type(ssl_strict_x509).__name__}"
            )
        tls = [
            name
            for name, value in (
                ("ssl_cafile", ssl_cafile),
                ("ssl_certfile", ssl_certfile),
                ("ssl_keyfile", ssl_keyfile),
                ("ssl_password", ssl_password),
                ("ssl_strict_x509", ssl_strict_x509),
            )
            if value is not None
        ] + ([] if ssl_check_hostname else ["ssl_check_hostname=False"])
        if not self.ssl and (tls or ssl_context is not None):
            given = [o.split("=")[0] for o in tls] or ["ssl_context"]
            raise OptionError(
                "TLS options are given (" + _placeholders(given) + "), but {security_protocol} "
                "{protocol} uses no TLS, so they would be ignored: use SSL or SASL_SSL",
                *given,
                "security_protocol",
                protocol=security_protocol,
                said={"ssl_check_hostname": "ssl_check_hostname=False"},
            )
        if ssl_context is not None and tls:
            raise ValueError(
                f"ssl_context replaces {', '.join(tls)}: give the context or those options, not both"
            )
        if self.sasl:
            if sasl_mechanism not in MECHANISMS:
                raise OptionError(
                    "{sasl_mechanism} must be one of {known} (the value given is not shown)",
                    "sasl_mechanism",
                    known=", ".join(MECHANISMS),
                )
            if sasl_mechanism == "OAUTHBEARER":
                if sasl_oauth_token_provider is None:
                    raise OptionError(
                        "{sasl_mechanism} OAUTHBEARER needs {sasl_oauth_token_provider}",
                        "sasl_oauth_token_provider",
                        "sasl_mechanism",
                    )
            elif not sasl_plain_username or sasl_plain_password is None:
                missing = "sasl_plain_password" if sasl_plain_username else "sasl_plain_username"
                raise OptionError(
                    "{sasl_mechanism} {mechanism} needs {sasl_plain_username} and {sasl_plain_password}",
                    missing,
                    "sasl_mechanism",
                    "sasl_plain_username",
                    "sasl_plain_password",
                    mechanism=sasl_mechanism,
                )
            else:
                utf8(sasl_plain_username, "sasl_plain_username", ValueError)
                utf8(sasl_plain_password, "sasl_plain_password", ValueError)
        self.ssl_context = None
        if self.ssl:
            self.ssl_context = ssl_context or _make_context(
                ssl_cafile,
                ssl_certfile,
                ssl_keyfile,
                ssl_password,
                ssl_check_hostname,
                ssl_strict_x509,
            )

    def __repr__(self):
        shown = [f"security_protocol={self.security_protocol!r}"]
        if self.sasl:
            shown.append(f"sasl_mechanism={self.sasl_mechanism!r}")
            if self.sasl_plain_username:
                shown.append(f"sasl_plain_username={self.sasl_plain_username!r}")
        if self.ssl_cafile:
            shown.append(f"ssl_cafile={self.ssl_cafile!r}")
        return f"Security({', '.join(shown)})"

    def _mechanism(self, token=None):
        return make_mechanism(self.sasl_mechanism, self.sasl_plain_username, self._password, token)

    def token(self):
        """The OAUTHBEARER token from the provider: a callable, or an object with .token()."""
        provider = self._token_provider
        try:
            return provider.token() if hasattr(provider, "token") else provider()
        except Exception as exc:  # noqa: BLE001 - its message could hold a secret: only the type
            failed = type(exc).__name__
        # Raised outside the handler: `from None` would still keep the provider's exception
        # as the error's __context__.
        raise SaslAuthError(f"the OAUTHBEARER token provider failed ({failed})")


def _make_context(cafile, certfile, keyfile, password, check_hostname, strict_x509=None):
    # Errors name the options, not the paths (a properties line joined to a path by a
    # trailing backslash can hold a secret; a caller that knows where a path came from can
    # show it with OptionError.render), and are raised outside the handlers, so that no
    # exception holding a path or the password is their context.
    loading = {"ssl_cafile": cafile} if cafile else {}
    try:
        context = ssl.create_default_context(cafile=cafile)
        context.check_hostname = check_hostname
        if strict_x509 is not None:
            context.verify_flags = (
                context.verify_flags | ssl.VERIFY_X509_STRICT
                if strict_x509
                else context.verify_flags & ~ssl.VERIFY_X509_STRICT
            )
        if certfile:
            loading = {"ssl_certfile": certfile, **({"ssl_keyfile": keyfile} if keyfile else {})}
            context.load_cert_chain(certfile, keyfile, password)
        return context
    except FileNotFoundError:
        # ssl's FileNotFoundError has no filename: say which of the files is missing.
        missing = [o for o, path in loading.items() if not os.path.exists(path)] or list(loading)
        error = OptionError("cannot read " + _placeholders(missing) + ": no such file", *missing)
    except (ssl.SSLError, OSError) as exc:
        reason = getattr(exc, "reason", None) or exc.strerror or type(exc).__name__
        named = _placeholders(loading) if loading else "the system's CA certificates"
        error = OptionError(
            "cannot load the TLS files (" + named + "): {reason} (PEM files expected; is "
            "{ssl_password} right?)",
            *loading,
            "ssl_password",
            reason=printable(reason, 100),
        )
    raise error


# OpenSSL's X509_V_ERR_* codes (x509_vfy.h), as SSLCertVerificationError.verify_code gives
# them: advice for the reason the verifier gave, and only for it.
_UNKNOWN_ISSUER = {2, 18, 19, 20, 21, 27}
_NOT_YET_VALID, _EXPIRED = 9, 10
_NAME_MISMATCH = {62, 64}  # host name, IP address
# The RFC 5280 profile checks that OpenSSL makes only with X509_V_FLAG_X509_STRICT: from
# SIGNATURE_ALGORITHM_INCONSISTENCY (78) and PATHLEN_INVALID_FOR_NON_CA (80) to
# EC_KEY_EXPLICIT_PARAMS (94), e.g. 85, a missing Authority Key Identifier.
_STRICT_ONLY = {78, *range(80, 95)}


def _verify_advice(code, strict):
    """What to check for a certificate the verifier refused with OpenSSL's `code`, as a
    parenthesis to append (empty where there is nothing more to say)."""
    if code in _UNKNOWN_ISSUER:
        return " (check ssl_cafile: it must hold the CA that signed the broker's certificate)"
    if code in _NAME_MISMATCH:
        return (
            " (connect with a name the certificate lists; ssl_check_hostname=False skips "
            "the host name check)"
        )
    if code in (_NOT_YET_VALID, _EXPIRED):
        return " (check the certificate's validity dates and this machine's clock)"
    if strict and code in _STRICT_ONLY:
        return (
            " (strict X.509 verification refused it, Python's default from 3.13 on: have "
            "the certificate reissued with what RFC 5280 requires, or set "
            "ssl_strict_x509=False to accept it)"
        )
    return ""


make_tls_context = _make_context  # the proxy's connections to brokers: the same files and errors


def _placeholders(options):
    return ", ".join("{%s}" % o for o in options)


# ---------------------------------------------------------------- protocol steps, without I/O


# The step vocabulary. A flow is a generator that yields these and is sent their answers;
# a failure is thrown into it (as a KafkaClientError) so that it may retry or fail over.


class Connect:
    """Open a connection (closed by the runner when the flow ends); answered with it.

    `options` are the connection's keyword arguments (client_id, security, ...)."""

    __slots__ = ("host", "port", "deadline", "options")

    def __init__(self, host, port, deadline=None, **options):
        self.host, self.port, self.deadline, self.options = host, port, deadline, options


class Request:
    """Send `msg` at `version` on `conn`; answered with the decoded answer.

    `conn=None` is the connection whose own steps these are (opening, SASL): those requests
    skip `request()`'s re-authentication and turn-taking, as they run inside them. `raw` is a
    SASL token sent without a request header (after a SaslHandshake v0)."""

    __slots__ = ("conn", "msg", "version", "raw", "max_answer_bytes", "check_frame")

    def __init__(
        self,
        conn=None,
        msg=None,
        version=None,
        *,
        raw=None,
        max_answer_bytes=None,
        check_frame=None,
    ):
        self.conn, self.msg, self.version, self.raw = conn, msg, version, raw
        self.max_answer_bytes, self.check_frame = max_answer_bytes, check_frame


class Close:
    __slots__ = ("conn",)

    def __init__(self, conn):
        self.conn = conn


class Sleep:
    """Wait `seconds` (on the run's clock)."""

    __slots__ = ("seconds",)

    def __init__(self, seconds):
        self.seconds = seconds


def _next_step(steps, answer, error):
    """(True, step), or (False, the flow's result) once it has returned."""
    try:
        return True, (steps.throw(error) if error is not None else steps.send(answer))
    except StopIteration as stop:
        return False, stop.value


def run_steps(steps, deadline, conn=None):
    """Run a flow on blocking sockets; its result. `conn` runs the `Request(conn=None)` steps.

    Connections the flow opened are closed when it ends, however it ends."""
    opened = []
    try:
        answer = error = None
        while True:
            going, step = _next_step(steps, answer, error)
            if not going:
                return step
            answer = error = None
            try:
                if isinstance(step, Request):
                    if step.conn is None:
                        answer = conn._step(step, deadline)
                    else:
                        answer = step.conn.request(
                            step.msg,
                            step.version,
                            deadline=deadline,
                            max_answer_bytes=step.max_answer_bytes,
                            check_frame=step.check_frame,
                        )
                elif isinstance(step, Connect):
                    answer = Connection(
                        step.host, step.port, deadline=step.deadline or deadline, **step.options
                    )
                    opened.append(answer)
                elif isinstance(step, Close):
                    step.conn.close()
                else:
                    deadline.clock.sleep(step.seconds)
            except KafkaClientError as exc:
                error = exc
    finally:
        steps.close()
        for c in opened:
            c.close()


async def run_steps_async(steps, deadline, conn=None):
    """`run_steps` on asyncio streams, in the event loop's thread."""
    opened = []
    try:
        answer = error = None
        while True:
            going, step = _next_step(steps, answer, error)
            if not going:
                return step
            answer = error = None
            try:
                if isinstance(step, Request):
                    if step.conn is None:
                        answer = await conn._step(step, deadline)
                    else:
                        answer = await step.conn.request(
                            step.msg,
                            step.version,
                            deadline=deadline,
                            max_answer_bytes=step.max_answer_bytes,
                            check_frame=step.check_frame,
                        )
                elif isinstance(step, Connect):
                    answer = await AsyncConnection.open(
                        step.host, step.port, deadline=step.deadline or deadline, **step.options
                    )
                    opened.append(answer)
                elif isinstance(step, Close):
                    step.conn.close()
                else:
                    await deadline.clock.sleep_async(step.seconds)
            except KafkaClientError as exc:
                error = exc
    finally:
        steps.close()
        for c in opened:
            c.close()


def _negotiate(address):
    """ApiVersions at our highest version, or at the broker's when it says it lacks ours."""
    version = ApiVersionsRequest.MAX_VERSION
    request = ApiVersionsRequest(
        client_software_name="fastkwire", client_software_version=__version__
    )
    for _ in range(3):
        response = yield Request(None, request, version)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        if response.error_code == UNSUPPORTED_VERSION:
            fallback = highest_common_version(ranges, ApiVersionsRequest)
            if fallback is not None and fallback < version:
                version = fallback
                continue
        if response.error_code != NONE:
            raise KafkaBrokerError(
                f"{address} refused ApiVersions: {lookup(response.error_code)}",
                lookup(response.error_code),
            )
        return ranges
    raise BadResponseError(f"{address} kept refusing every ApiVersions version")


def _authenticate(address, versions, security, mechanism):
    """SaslHandshake, then the mechanism's messages; returns the session lifetime in ms (0: none)."""
    name = security.sasl_mechanism
    handshake = highest_common_version(versions, SaslHandshakeRequest)
    authenticate = highest_common_version(versions, SaslAuthenticateRequest)
    if handshake is None:
        raise SaslMechanismError(
            f"{address} does not offer SASL (no SaslHandshake): is this a SASL listener? "
            "Check security_protocol"
        )
    framed = handshake >= 1 and authenticate is not None
    response = yield Request(None, SaslHandshakeRequest(mechanism=name), handshake if framed else 0)
    if response.error_code == UNSUPPORTED_SASL_MECHANISM:
        enabled = ", ".join(printable(m, 40) for m in response.mechanisms[:20]) or "none"
        if name in response.mechanisms:  # seen from Tansu: a listener without SASL set up
            raise SaslMechanismError(
                f"{address} refused SASL mechanism {name} as unsupported, yet lists it among "
                f"those it enables ({enabled}): the broker contradicts itself, so its SASL "
                "set-up for this listener is incomplete; check the broker's configuration",
                lookup(response.error_code),
            )
        raise SaslMechanismError(
            f"{address} does not enable SASL mechanism {name} (it enables: {enabled}): "
            "use sasl_mechanism to choose one it enables",
            lookup(response.error_code),
        )
    if response.error_code != NONE:
        raise SaslAuthError(
            f"{address} refused the SASL handshake: {lookup(response.error_code)}",
            lookup(response.error_code),
        )
    message, lifetime = mechanism.start(), 0
    while message is not None:
        if not framed:
            answer = yield Request(raw=message)
        else:
            reply = yield Request(None, SaslAuthenticateRequest(auth_bytes=message), authenticate)
            if reply.error_code != NONE:
                raise _refused(address, security, mechanism, reply)
            lifetime = getattr(reply, "session_lifetime_ms", 0) or 0
            answer = reply.auth_bytes or b""
        message = mechanism.step(answer)
    return lifetime


def _refused(address, security, mechanism, reply):
    error = lookup(reply.error_code)
    said = f" ({printable(reply.error_message, MAX_BROKER_TEXT)})" if reply.error_message else ""
    if security.sasl_mechanism == "OAUTHBEARER":
        status = (
            f", status {printable(mechanism.status, 40)!r}"
            if getattr(mechanism, "status", None)
            else ""
        )
        return SaslAuthError(
            f"{address} rejected the OAUTHBEARER token{status}: it has expired or is not valid for this "
            f"broker; fix the token provider{said}",
            error,
        )
    fix = (
        "check the user name and password"
        if reply.error_code == SASL_AUTHENTICATION_FAILED
        else str(error)
    )
    return SaslAuthError(
        f"{address} refused SASL {security.sasl_mechanism} authentication of user "
        f"{printable(security.sasl_plain_username, 100)!r}: {fix}{said}",
        error,
    )


# ---------------------------------------------------------------- shared by both connections


class _Base:
    def _init(self, host, port, client_id, security, request_timeout_ms, options):
        if security is not None and options:
            raise ValueError("give either security= or the security options, not both")
        self.host, self.port = host, port
        self.address = format_address(host, port)
        self.client_id = client_id
        self.security = security if security is not None else Security(**options)
        self.timeout = check_timeout_ms(request_timeout_ms)
        self.versions = {}  # api_key -> (min_version, max_version), from ApiVersions
        self.session_lifetime_ms = 0
        self._reauth_at = None
        self._correlation_id = 0
        self._closed_because = None  # once closed: why, for the requests that come after

    def __repr__(self):
        return f"{type(self).__name__}({self.address}, {self.security!r})"

    def version_for(self, cls, lowest=0):
        """The highest version of `cls` both sides support; NoCommonVersionError when none is."""
        version = highest_common_version(self.versions, cls, lowest)
        if version is None:
            theirs = self.versions.get(cls.API_KEY)
            has = f"v{theirs[0]}-v{theirs[1]}" if theirs else "none"
            raise NoCommonVersionError(
                f"{self.address} supports no version of {api_name(cls)} from "
                f"v{max(lowest, cls.MIN_VERSION)} to v{cls.MAX_VERSION} (it has {has})",
                lookup(UNSUPPORTED_VERSION),
            )
        return version

    def _deadline(self, deadline):
        return deadline if deadline is not None else Deadline(self.timeout)

    def _abandon(self, what):
        """Close for good: after an exchange that did not complete, the stream's position is
        unknown, and a late answer would be read as the next request's."""
        self._closed_because = f"{what} did not complete on it"
        self.close()

    def _check_open(self):
        if self._closed_because is not None:
            raise KafkaConnectionError(
                f"the connection to {self.address} is closed ({self._closed_because}): "
                "open a new one"
            )

    @staticmethod
    def _limit(msg, request, max_answer_bytes):
        # Plus the request's own size, as in ANSWER_LIMITS: answers echo the names sent.
        if max_answer_bytes is None:
            return answer_limit(msg, len(request))
        return max_answer_bytes + len(request)

    def _encode(self, msg, version):
        self._correlation_id += 1
        return encode_request(msg, version, self._correlation_id, self.client_id)

    def _check_size(self, head, limit, what, smallest=4):
        size = struct.unpack(">i", head)[0]
        if size < smallest:
            raise BadResponseError(
                f"{self.address} sent a frame size of {size} bytes in answer to {what}"
            )
        if size > limit:
            hint = (
                "this looks like a TLS alert: the listener speaks TLS, so use security_protocol SSL or SASL_SSL"
                if head[:2] == b"\x15\x03"
                else "is this a Kafka listener?"
            )
            raise AnswerTooLargeError(
                f"{self.address} announced a {size}-byte answer to {what}, more than the "
                f"{limit} bytes such an answer can take ({hint})",
                size,
                limit,
            )
        return size

    def _decode(self, frame, msg, version, what, deadline, check_frame=None):
        correlation_id = struct.unpack_from(">i", frame, 4)[0]
        if correlation_id != self._correlation_id:
            self._abandon(what)
            raise BadResponseError(
                f"{self.address} answered {what} with correlation id {correlation_id}, "
                f"expected {self._correlation_id}"
            )
        if check_frame is not None:
            check_frame(frame, version)
        answer = self._decoded(frame, msg, version, what)
        if deadline.remaining() <= 0:  # decoding counts against the deadline too
            raise KafkaTimeoutError(
                f"the answer of {self.address} to {what} was not decoded within "
                f"{deadline.seconds:g} s"
            )
        return answer

    def _decoded(self, frame, msg, version, what):
        # A broker that lacks our ApiVersions version answers in v0 with UNSUPPORTED_VERSION
        # (header v0 is 4 bytes, then the int16 error code).
        if (
            msg.API_KEY == ApiVersionsRequest.API_KEY
            and len(frame) >= 10
            and struct.unpack_from(">h", frame, 8)[0] == UNSUPPORTED_VERSION
        ):
            version = 0
        try:
            return decode_response(frame, msg.API_KEY, version)[1]
        except (DecodeError, ValueError) as exc:
            raise BadResponseError(
                f"could not decode the answer of {self.address} to {what}: "
                f"{printable(exc, MAX_BROKER_TEXT)}"
            ) from None

    def _reauth_due(self):
        return self._reauth_at is not None and time.monotonic() >= self._reauth_at

    def _authenticated(self, lifetime_ms):
        self.session_lifetime_ms = lifetime_ms
        self._reauth_at = (
            time.monotonic() + lifetime_ms / 1000 * REAUTH_AT if lifetime_ms > 0 else None
        )

    def _after_handshake(self, what):
        # With TLS 1.3 a broker checks the client's certificate after the handshake: one that
        # wants a certificate it trusts hangs up on the first request.
        return TlsHandshakeError(
            f"{self.address} hung up right after the TLS handshake, during {what}: it may want a "
            "client certificate it trusts (check ssl_certfile and ssl_keyfile)"
        )

    def _closed_error(self, what, got):
        if self.security.ssl and not self.versions and not got:
            return self._after_handshake(what)
        when = "before answering" if not got else "in the middle of its answer"
        return KafkaConnectionError(
            f"{self.address} closed the connection during {what} ({when})"
            f"{self._tls_hint() if not got else ''}"
        )

    def _timeout_error(self, deadline, what):
        return KafkaTimeoutError(
            f"no answer from {self.address} to {what} within {deadline.seconds:g} s"
        )

    def _broken(self, exc, what):
        if isinstance(exc, ssl.SSLError) and "CERTIFICATE" in (exc.reason or "").upper():
            return self._connect_error(
                exc, None
            )  # TLS 1.3 reports a refused client certificate here
        if (
            self.security.ssl
            and not self.versions
            and isinstance(exc, (ssl.SSLError, ConnectionResetError))
        ):
            return self._after_handshake(what)
        if isinstance(exc, ssl.SSLError):
            return TlsHandshakeError(
                f"TLS failed on the connection to {self.address} during {what}: "
                f"{printable(exc.reason or type(exc).__name__)}"
            )
        return KafkaConnectionError(
            f"connection to {self.address} failed during {what}: {_reason(exc)}{self._tls_hint()}"
        )

    def _tls_hint(self):
        # A TLS listener hangs up on the plaintext of a first request.
        if self.security.ssl or self.versions:
            return ""
        return " (if that listener speaks TLS, use security_protocol SSL or SASL_SSL)"

    def _connect_error(self, exc, deadline):
        """The KafkaClientError for a failed connect or TLS handshake."""
        if isinstance(exc, (socket.timeout, asyncio.TimeoutError)):
            return KafkaTimeoutError(
                f"could not connect to {self.address} within {deadline.seconds:g} s"
            )
        if isinstance(exc, ssl.SSLCertVerificationError):
            strict = bool(self.security.ssl_context.verify_flags & ssl.VERIFY_X509_STRICT)
            return TlsVerifyError(
                f"the TLS certificate of {self.address} could not be verified: "
                f"{printable(exc.verify_message or exc.reason, MAX_BROKER_TEXT)}"
                f"{_verify_advice(exc.verify_code, strict)}"
            )
        if isinstance(exc, ssl.SSLError):
            reason = exc.reason or type(exc).__name__
            if "CERTIFICATE" in reason.upper():
                return TlsVerifyError(
                    f"{self.address} refused the TLS handshake: {printable(reason)} (it wants a client "
                    "certificate it trusts: check ssl_certfile and ssl_keyfile)"
                )
            if isinstance(exc, ssl.SSLEOFError):
                reason = "the broker closed the connection"
            return TlsHandshakeError(
                f"TLS handshake with {self.address} failed: {printable(reason)} (is this a TLS "
                "listener? SSL and SASL_SSL need one)"
            )
        if isinstance(exc, (ConnectionResetError, BrokenPipeError)) and self.security.ssl:
            return TlsHandshakeError(
                f"TLS handshake with {self.address} failed: the connection was reset (is this a "
                "TLS listener? SSL and SASL_SSL need one)"
            )
        if isinstance(exc, UnicodeError):
            # The resolver's IDNA encoding refuses labels over 63 characters or empty ones.
            return KafkaConnectionError(
                f"could not connect to {self.address}: not a valid host name ({exc})"
            )
        return KafkaConnectionError(f"could not connect to {self.address}: {_reason(exc)}")


def _reason(exc):
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused (is a broker listening there?)"
    if isinstance(exc, ConnectionResetError):
        return "connection reset by the broker"
    if isinstance(exc, socket.gaierror):
        return f"cannot resolve the host name ({exc.strerror})"
    return exc.strerror or str(exc) or type(exc).__name__


# ---------------------------------------------------------------- blocking


def _connect(host, port, deadline):
    """A TCP connection to the first address of `host` that takes one, all of them within
    `deadline`: socket.create_connection would give each address the whole timeout, and a
    broker names the coordinator's host, so it could stretch a call by its address count."""
    error = None
    for family, kind, proto, _, address in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        left = deadline.remaining()
        if left <= 0:
            raise socket.timeout()
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(left)
            sock.connect(address)
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    if error is None or deadline.remaining() <= 0:
        raise socket.timeout()
    raise error


class Connection(_Base):
    """One blocking connection to a broker; every wait is bounded by a deadline.

    Security options are keyword arguments (see `Security`), or one `security=Security(...)`.
    `deadline` (a `Deadline`) bounds the opening when several steps share one budget. Use it
    from one thread at a time.
    """

    def __init__(
        self,
        host,
        port,
        *,
        client_id="fastkwire",
        security=None,
        request_timeout_ms=30000,
        deadline=None,
        **security_options,
    ):
        self._init(host, port, client_id, security, request_timeout_ms, security_options)
        deadline = self._deadline(deadline)
        self.sock = self._open(deadline)
        try:
            self.versions = run_steps(_negotiate(self.address), deadline, self)
            if self.security.sasl:
                self._login(deadline)
        except BaseException:
            self.close()
            raise

    def _open(self, deadline):
        left = deadline.remaining()
        if left <= 0:
            raise KafkaTimeoutError(
                f"no time left to connect to {self.address} (timeout {deadline.seconds:g} s)"
            )
        sock = None
        try:
            sock = _connect(self.host, self.port, deadline)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self.security.ssl:
                sock.settimeout(max(deadline.remaining(), 0.001))
                sock = self.security.ssl_context.wrap_socket(sock, server_hostname=self.host)
            return sock
        except (OSError, UnicodeError) as exc:
            if sock is not None:
                sock.close()
            raise self._connect_error(exc, deadline) from None

    def _login(self, deadline):
        token = self.security.token() if self.security.sasl_mechanism == "OAUTHBEARER" else None
        if inspect.isawaitable(token):
            token.close()
            raise SaslAuthError(
                "the OAUTHBEARER token provider is a coroutine: use AsyncConnection"
            )
        steps = _authenticate(
            self.address, self.versions, self.security, self.security._mechanism(token)
        )
        self._authenticated(run_steps(steps, deadline, self))

    def close(self):
        self._closed_because = self._closed_because or "closed by its user"
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def request(self, msg, version=None, *, deadline=None, max_answer_bytes=None, check_frame=None):
        """Send `msg` (at `version`, or the highest both sides support); return the decoded answer.

        `check_frame(frame, version)`, if given, sees the whole answer (size prefix included)
        before it is decoded, and may raise a KafkaClientError to refuse it (an answer that would
        cost too much to decode, say)."""
        deadline = self._deadline(deadline)
        if self._reauth_due():
            self._login(deadline)
        return self._exchange(
            msg,
            self.version_for(type(msg)) if version is None else version,
            deadline,
            max_answer_bytes,
            check_frame,
        )

    def _step(self, step, deadline):
        if step.raw is not None:
            return self._exchange_raw(step.raw, deadline)
        return self._exchange(
            step.msg, step.version, deadline, step.max_answer_bytes, step.check_frame
        )

    def _exchange(self, msg, version, deadline, limit=None, check_frame=None):
        what = f"{api_name(msg)} v{version}"
        request = self._encode(msg, version)
        frame = self._io(request, self._limit(msg, request, limit), deadline, what)
        return self._decode(frame, msg, version, what, deadline, check_frame)

    def _exchange_raw(self, token, deadline):
        return bytes(
            self._io(struct.pack(">i", len(token)) + token, RAW_SASL_LIMIT, deadline, "SASL", 0)[4:]
        )

    def _io(self, request, limit, deadline, what, smallest=4):
        self._check_open()
        try:
            self._settimeout(deadline)
            self.sock.sendall(request)
            head = bytearray(4)
            self._fill(head, deadline, what)
            size = self._check_size(head, limit, what, smallest)
            frame = bytearray(4 + size)
            frame[:4] = head
            with memoryview(frame) as view:
                self._fill(view[4:], deadline, what, started=True)
            return frame
        except socket.timeout:
            self._abandon(what)
            raise self._timeout_error(deadline, what) from None
        except OSError as exc:
            self._abandon(what)
            raise self._broken(exc, what) from None
        except BaseException:  # a refused size, a hang-up, an interrupt: the stream is mid-answer
            self._abandon(what)
            raise

    def _fill(self, buffer, deadline, what, started=False):
        # recv_into a buffer sized in advance: a broker sending one byte at a time costs
        # nothing more than one sending the whole answer at once.
        with memoryview(buffer) as view:
            got = 0
            while got < len(view):
                self._settimeout(deadline)
                n = self.sock.recv_into(view[got:])
                if not n:
                    raise self._closed_error(what, got or started)
                got += n

    def _settimeout(self, deadline):
        left = deadline.remaining()
        if left <= 0:
            raise socket.timeout()
        self.sock.settimeout(left)


# ---------------------------------------------------------------- asyncio


class AsyncConnection(_Base):
    """The same on asyncio streams: `conn = await AsyncConnection.open(host, port, ...)`.

    Nothing runs outside the event loop's thread (host names are resolved by the loop's
    resolver; numeric addresses need none). Concurrent requests on one connection take turns.
    A cancelled call closes the connection.
    """

    @classmethod
    async def open(
        cls,
        host,
        port,
        *,
        client_id="fastkwire",
        security=None,
        request_timeout_ms=30000,
        deadline=None,
        **security_options,
    ):
        self = cls()
        self._init(host, port, client_id, security, request_timeout_ms, security_options)
        self._transport = None
        self._turn = asyncio.Lock()  # one exchange at a time: answers come back in order
        deadline = self._deadline(deadline)
        await self._open(deadline)
        try:
            self.versions = await run_steps_async(_negotiate(self.address), deadline, self)
            if self.security.sasl:
                await self._login(deadline)
        except BaseException:
            self.close()
            raise
        return self

    async def _open(self, deadline):
        left = deadline.remaining()
        if left <= 0:
            raise KafkaTimeoutError(
                f"no time left to connect to {self.address} (timeout {deadline.seconds:g} s)"
            )
        context = self.security.ssl_context
        loop = asyncio.get_running_loop()
        try:
            self._transport, self._stream = await asyncio.wait_for(
                loop.create_connection(
                    _FrameStream,
                    self.host,
                    self.port,
                    ssl=context,
                    server_hostname=self.host if context else None,
                ),
                left,
            )
        except (OSError, UnicodeError, asyncio.TimeoutError) as exc:
            raise self._connect_error(exc, deadline) from None
        sock = self._transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def _login(self, deadline):
        token = self.security.token() if self.security.sasl_mechanism == "OAUTHBEARER" else None
        if inspect.isawaitable(token):
            failed = None
            try:
                token = await asyncio.wait_for(token, max(deadline.remaining(), 0.001))
            except asyncio.TimeoutError:
                raise KafkaTimeoutError(
                    "the OAUTHBEARER token provider did not answer in time"
                ) from None
            except Exception as exc:  # noqa: BLE001 - see Security.token
                failed = type(exc).__name__
            if failed is not None:  # raised outside the handler, as in Security.token
                raise SaslAuthError(f"the OAUTHBEARER token provider failed ({failed})")
        steps = _authenticate(
            self.address, self.versions, self.security, self.security._mechanism(token)
        )
        self._authenticated(await run_steps_async(steps, deadline, self))

    def close(self):
        self._closed_because = self._closed_because or "closed by its user"
        # abort(): at once, without waiting for the peer (a TLS close_notify could wait long).
        if self._transport is not None:
            self._transport.abort()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()

    async def request(
        self, msg, version=None, *, deadline=None, max_answer_bytes=None, check_frame=None
    ):
        """Send `msg` (at `version`, or the highest both sides support); return the decoded answer
        (`check_frame` as in `Connection.request`)."""
        deadline = self._deadline(deadline)
        version = self.version_for(type(msg)) if version is None else version
        try:
            try:
                await self._within(self._turn.acquire(), deadline)
            except asyncio.TimeoutError:
                raise self._timeout_error(
                    deadline, f"{api_name(msg)} v{version} (queued behind others)"
                ) from None
            try:
                if self._reauth_due():
                    await self._login(deadline)
                return await self._exchange(msg, version, deadline, max_answer_bytes, check_frame)
            finally:
                self._turn.release()
        except asyncio.CancelledError:
            self._abandon(f"{api_name(msg)} v{version} (cancelled)")
            raise

    async def _step(self, step, deadline):
        if step.raw is not None:
            return await self._exchange_raw(step.raw, deadline)
        return await self._exchange(
            step.msg, step.version, deadline, step.max_answer_bytes, step.check_frame
        )

    async def _exchange(self, msg, version, deadline, limit=None, check_frame=None):
        what = f"{api_name(msg)} v{version}"
        request = self._encode(msg, version)
        frame = await self._io(request, self._limit(msg, request, limit), deadline, what)
        return self._decode(frame, msg, version, what, deadline, check_frame)

    async def _exchange_raw(self, token, deadline):
        frame = await self._io(
            struct.pack(">i", len(token)) + token, RAW_SASL_LIMIT, deadline, "SASL", 0
        )
        return frame[4:]

    async def _io(self, request, limit, deadline, what, smallest=4):
        self._check_open()
        try:
            self._transport.write(request)
            await self._within(self._stream.drain(), deadline)
            head = await self._read(bytearray(4), deadline, what, False)
            size = self._check_size(head, limit, what, smallest)
            frame = bytearray(4 + size)
            frame[:4] = head
            with memoryview(frame) as view:
                await self._read(view[4:], deadline, what, True)
            return frame
        except asyncio.TimeoutError:
            self._abandon(what)
            raise self._timeout_error(deadline, what) from None
        except OSError as exc:
            self._abandon(what)
            raise self._broken(exc, what) from None
        except BaseException:  # see Connection._io (a cancellation included)
            self._abandon(what)
            raise

    async def _read(self, buffer, deadline, what, started):
        got = await self._within(self._stream.read_into(buffer), deadline)
        if got < len(buffer):
            raise self._closed_error(what, started or got)
        return buffer

    @staticmethod
    async def _within(awaitable, deadline):
        left = deadline.remaining()
        if left <= 0:
            if inspect.iscoroutine(awaitable):
                awaitable.close()
            raise asyncio.TimeoutError()
        return await asyncio.wait_for(awaitable, left)


class _FrameStream(asyncio.BufferedProtocol):
    """Reads straight into the buffer the caller sized from the frame's prefix, as the blocking
    connection's recv_into does: a broker that drips bytes costs no extra memory. Reading is
    paused while no read is waiting, so unasked bytes wait in the kernel, not here."""

    def __init__(self):
        self._target = None
        self._got = 0
        self._waiter = None
        self._closed = None  # the exception (or None) once the connection is lost
        self._lost = False
        self._drained = None  # set while writing is paused
        self._scratch = bytearray(1)

    def connection_made(self, transport):
        self._transport = transport
        transport.pause_reading()
        # uvloop starts reading once connection_made has returned, whatever was asked
        # here: paused again on the loop's next turn, before any answer can arrive.
        asyncio.get_running_loop().call_soon(self._pause_unless_reading)

    def _pause_unless_reading(self):
        if self._target is None and not self._lost and not self._transport.is_closing():
            self._transport.pause_reading()

    def get_buffer(self, sizehint):
        if self._target is None:  # a transport that delivers after pause_reading()
            return self._scratch
        return self._target[self._got :]

    def buffer_updated(self, nbytes):
        if self._target is None:
            self._fail(ConnectionError("bytes arrived while no answer was expected"))
            return
        self._got += nbytes
        if self._got == len(self._target):
            # Pause at once: a transport may ask for a buffer again before the reader
            # resumes, and an empty one reads as the end of the stream (TLS close_notify).
            self._transport.pause_reading()
            self._target = None
            self._wake()

    def eof_received(self):
        self._lost = True
        self._wake()
        return False

    def connection_lost(self, exc):
        self._lost = True
        self._closed = exc
        self._wake()
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)

    def _fail(self, exc):
        self._closed = exc
        self._lost = True
        self._transport.abort()
        self._wake()

    def _wake(self):
        if self._waiter is not None and not self._waiter.done():
            self._waiter.set_result(None)

    def pause_writing(self):
        self._drained = asyncio.get_running_loop().create_future()

    def resume_writing(self):
        if self._drained is not None and not self._drained.done():
            self._drained.set_result(None)
        self._drained = None

    async def drain(self):
        if self._drained is not None:
            await self._drained
        if self._lost:
            raise self._closed or ConnectionResetError("the connection was closed")

    async def read_into(self, buffer):
        """Fill `buffer`; the count read (short when the connection ended first)."""
        if not len(buffer):
            return 0
        view = self._target = memoryview(buffer)
        self._got = 0
        try:
            if not self._lost:
                self._waiter = asyncio.get_running_loop().create_future()
                self._transport.resume_reading()
                await self._waiter
            if self._closed is not None and self._got < len(buffer):
                raise self._closed
            return self._got
        finally:
            if not self._lost and self._transport.is_reading():
                self._transport.pause_reading()
            view.release()
            self._target = self._waiter = None

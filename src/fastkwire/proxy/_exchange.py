"""One request and its response as the proxy saw them (`Exchange`), and what else happens
on a connection (`ProxyEvent`). Decoding is for display only: it runs after the frames
were forwarded, on demand, and a frame that does not decode is shown with its error."""

import time

from .. import decode_request, decode_response
from .._explain_apis import api_names
from .._model import STRUCT, STRUCTS
from ..error_codes import error_name
from ..errors import DecodeError
from ._error_scan import response_error_codes

MAX_ERROR_WALK = 200_000  # structs visited when collecting error codes: bounded for huge answers
# Larger responses are not decoded for display (a decoded answer costs many times its
# bytes): their lines show the error codes read from the bytes, and no decode error.
DISPLAY_DECODE_LIMIT = 1024 * 1024


def api_name(api_key):
    name = api_names().get(api_key) if api_key is not None else None
    return name or f"api{api_key}"


class Exchange:
    """A request, and its response once it came (None: not yet, never for acks=0, or the
    connection ended first). Frames are whole, size prefix included."""

    __slots__ = (
        "conn",
        "client",
        "client_id",
        "broker",
        "api_key",
        "api_version",
        "correlation_id",
        "request",
        "response",
        "upstream_response",
        "time",
        "started",
        "finished",
        "expects_response",
        "fault",
        "local",
        "delay_ms",
        "_decoded",
        "_errors",
    )

    def __init__(self, conn, client, header, request, expects_response=True, broker=None):
        self.conn = conn  # the proxy's number for the client connection
        self.client = client  # "host:port" of the client
        self.broker = broker  # "host:port" of the upstream broker it went to
        self.client_id = header.client_id
        self.api_key = header.api_key
        self.api_version = header.api_version
        self.correlation_id = header.correlation_id
        self.request = request
        self.response = None  # as the client got it
        self.upstream_response = None  # the broker's, when the proxy changed it
        self.time = time.time()  # when the request arrived (wall clock)
        self.started = time.monotonic()
        self.finished = None
        self.expects_response = expects_response
        self.fault = None  # the fault rule's action, as text, if one acted
        self.local = False  # answered by the proxy, not the broker
        self.delay_ms = None  # a delay rule's hold on the response
        self._decoded = None
        self._errors = None

    @classmethod
    def restore(
        cls,
        conn,
        client,
        request,
        response,
        when,
        latency_ms,
        header,
        fault=None,
        upstream_response=None,
        expects_response=True,
        local=False,
        broker=None,
    ):
        """An exchange read back from a capture."""
        ex = cls(conn, client, header, request, expects_response, broker)
        ex.response = response
        ex.upstream_response = upstream_response
        ex.time = when
        ex.started = 0.0
        ex.finished = None if latency_ms is None else latency_ms / 1000
        ex.fault = fault
        ex.local = local
        return ex

    @property
    def api(self):
        return api_name(self.api_key)

    @property
    def latency_ms(self):
        return None if self.finished is None else (self.finished - self.started) * 1000

    @property
    def request_size(self):
        return len(self.request)

    @property
    def response_size(self):
        return None if self.response is None else len(self.response)

    def decoded_response(self):
        """(header, message, trailing bytes) of the response, or a DecodeError (never raised);
        None without a response. Bytes after the message are kept, not refused, as a client
        ignores them."""
        if self.response is None:
            return None
        if self._decoded is None:
            try:
                self._decoded = decode_response(
                    self.response, self.api_key, self.api_version, records="view", trailing="keep"
                )
            except (DecodeError, ValueError) as e:
                self._decoded = e if isinstance(e, DecodeError) else DecodeError(str(e), 4)
        return self._decoded

    def decode_error(self):
        """Why the response does not decode, as text with its offset in the frame; None if
        it decodes, or is larger than DISPLAY_DECODE_LIMIT (not decoded for display)."""
        if self.response is None or len(self.response) > DISPLAY_DECODE_LIMIT:
            return None
        got = self.decoded_response()
        if isinstance(got, DecodeError):
            return f"response: {describe_error(got)}"
        return None

    def request_decode_error(self):
        """Why the request does not decode (with its offset), or None; trailing bytes are kept."""
        try:
            decode_request(self.request, records="view", trailing="keep")
        except (DecodeError, ValueError) as e:
            return describe_error(e)
        return None

    def trailing_bytes(self):
        """How many bytes follow the end of the response's message (0 when it does not
        decode, or is larger than DISPLAY_DECODE_LIMIT)."""
        if self.response is None or len(self.response) > DISPLAY_DECODE_LIMIT:
            return 0
        got = self.decoded_response()
        return len(got[2]) if isinstance(got, tuple) else 0

    def error_codes(self):
        """The names of the non-zero error codes in the response, in the order found, each
        once. They are read from the frame's bytes, without decoding it into objects, up to
        the first error_scan.MAX_STEPS values; a frame that does not fit its layout gives
        those found before the misfit."""
        errors = self._errors  # one read: another thread may set it meanwhile
        if errors is None or self.response is not errors[0]:
            response = self.response
            codes = (
                []
                if response is None
                else response_error_codes(response, self.api_key, self.api_version)
            )
            errors = self._errors = (response, [error_name(c) for c in codes])
        return errors[1]


def describe_error(err):
    if isinstance(err, DecodeError):
        return f"{err} (offset {err.offset})" if "offset" not in str(err) else str(err)
    return str(err)


_WALKS = {}  # class -> (has error_code, struct fields, struct list fields)


def _walk_of(cls):
    walk = _WALKS.get(cls)
    if walk is None:
        fields = getattr(cls, "_FIELDS", ())
        walk = _WALKS[cls] = (
            any(n == "error_code" and k not in (STRUCT, STRUCTS) for n, k, _ in fields),
            tuple(n for n, k, _ in fields if k == STRUCT),
            tuple(n for n, k, _ in fields if k == STRUCTS),
        )
    return walk


def collect_error_codes(msg):
    """The distinct non-zero `error_code` values of a message and its structs, in order."""
    found = {}
    stack, visited = [msg], 0
    while stack and visited < MAX_ERROR_WALK:
        obj = stack.pop()
        visited += 1
        has_code, structs, lists = _walk_of(type(obj))
        if has_code and obj.error_code:
            found.setdefault(obj.error_code, None)
        nested = []
        for name in structs:
            value = getattr(obj, name)
            if value is not None:
                nested.append(value)
        for name in lists:
            value = getattr(obj, name)
            if value:
                nested.extend(value)
        if nested:
            stack.extend(reversed(nested))
    return list(found)


class ProxyEvent:
    """Something other than an exchange: a connection opened or closed, or went wrong. A
    frame forwarded without being paired (a request too short for a header, a response that
    answers no request in flight) is an error event that carries it: `frame`, and
    `from_client` (True for a request)."""

    __slots__ = ("kind", "conn", "client", "text", "time", "frame", "from_client")

    OPEN, CLOSE, ERROR = "open", "close", "error"
    TOKEN = "token"  # a raw SASL token (after a v0 SaslHandshake): forwarded, not paired

    def __init__(self, kind, conn, client, text, frame=None, from_client=None):
        self.kind = kind
        self.conn = conn
        self.client = client
        self.text = text
        self.time = time.time()
        self.frame = frame
        self.from_client = from_client

    def __repr__(self):
        return f"ProxyEvent({self.kind!r}, conn={self.conn}, {self.text!r})"

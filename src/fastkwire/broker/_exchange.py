"""From a request frame to its answer's bytes, without a socket: read the header, answer an
API or version that is not served as Kafka does, decode the request with the codec, hand it
to `Apis`, encode the answer at the request's version with its correlation id.

`answer_frame(apis, frame, node_id, client_host, done, connection)` calls `done(outcome)` exactly once,
now or later (a Fetch that waits): the answer's bytes (a tuple of bytes-like pieces, to be
written in order, for a Fetch answer with large records: _splice.py), `None` (an acks=0
Produce: nothing is sent), or a `Close` saying why the connection ends (a frame that does not decode, an answer
the version cannot carry). The server writes or closes; fuzz/hostile_requests.py checks these
outcomes against every mutated frame.
"""

import logging
import struct
from types import SimpleNamespace

from .. import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FetchRequest,
    decode_request,
    encode_response,
)
from ..error_codes import by_name
from ..errors import DecodeError, EncodeError, UnsupportedVersionError
from ..proxy._frames import request_header
from ._apis import CLOSE, NO_ANSWER, Context
from ._splice import encode_fetch

log = logging.getLogger("fastkwire.broker")

API_VERSIONS = ApiVersionsRequest.API_KEY
FETCH = FetchRequest.API_KEY  # its answers are spliced (_splice.py)
UNSUPPORTED_VERSION = by_name("UNSUPPORTED_VERSION").code
_KEY_VERSION = struct.Struct(">hh")  # a request header's first fields, after the size


class Close:
    """The connection ends; `reason` says why (for the log). `answer`: bytes written before
    it ends (Kafka's answer to a refused login), or None."""

    __slots__ = ("reason", "answer")

    def __init__(self, reason, answer=None):
        self.reason = reason
        self.answer = answer

    def __repr__(self):
        return f"Close({self.reason!r})"


def answer_frame(apis, frame, node_id, client_host, done, connection=None, listener=None):
    if len(frame) < 12:
        done(Close(f"a frame of {len(frame)} bytes is too short for a request header"))
        return
    key, version = _KEY_VERSION.unpack_from(frame, 4)  # the header is decoded once, below
    served = apis.versions().get(key)
    if served is None or not served[0] <= version <= served[1]:
        done(_unsupported(apis, request_header(frame), frame, served))
        return
    try:
        # Records as views of the frame: the log copies a batch once, as it keeps it.
        header, request, _ = decode_request(frame, records="view", trailing="keep")
    except (DecodeError, UnsupportedVersionError) as e:
        done(Close(f"a request that does not decode ({e})"))
        return
    ctx = Context(node_id, header.client_id or "", client_host, connection, listener)
    if apis.authorizer is not None:  # who asks: only an authorizer looks
        ctx.principal = getattr(connection, "principal", ctx.principal)
    replied = []

    def reply(response):
        if replied:
            raise RuntimeError(f"{type(request).__name__} was answered twice")
        replied.append(True)
        done(_encoded(response, key, version, header.correlation_id))

    try:
        apis.handle(key, version, request, ctx, reply)
    except Exception:  # noqa: BLE001 - a handler's bug ends this connection only
        log.exception(
            "answering %s v%d from %s failed", type(request).__name__, version, client_host
        )
        if not replied:
            replied.append(True)
            done(Close(f"answering {type(request).__name__} v{version} failed"))


def _encoded(response, api_key, version, correlation_id):
    if response is CLOSE:
        return Close("an acks=0 Produce failed (Kafka closes the connection to say so)")
    if response is NO_ANSWER:
        return None
    try:
        if api_key == FETCH:
            return encode_fetch(response, version, correlation_id)
        return encode_response(response, version, correlation_id)
    except (EncodeError, UnsupportedVersionError) as e:
        log.error("the answer to API key %d v%d does not encode: %s", api_key, version, e)
        return Close(f"the answer to API key {api_key} v{version} does not encode")


def _unsupported(apis, header, frame, served):
    """Kafka's answer to an API or version it does not serve: UNSUPPORTED_VERSION in the
    answer's top-level error code; where the answer has none, the connection closes."""
    if header.api_key == API_VERSIONS:
        # An ApiVersions newer than served: its v0 answer, listing what is served.
        R = ApiVersionsResponse
        response = R(
            error_code=UNSUPPORTED_VERSION,
            api_keys=[
                R.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                for k, (lo, hi) in sorted(apis.versions().items())
            ],
        )
        return encode_response(response, 0, header.correlation_id)
    try:
        return error_frame(header, frame, UNSUPPORTED_VERSION)
    except (ValueError, DecodeError) as e:
        what = "not served" if served is None else f"served at versions {served[0]}-{served[1]}"
        return Close(
            f"API key {header.api_key} v{header.api_version} ({what}) cannot be answered: {e}"
        )


def error_frame(header, frame, error_code):
    """The answer to request `frame` (`header`, its header) with `error_code`, as the proxy's
    fault rules make it; ValueError or DecodeError when it cannot be made."""
    from ..proxy._faults import error_answer  # rarely needed: imported on first use

    exchange = SimpleNamespace(
        api_key=header.api_key,
        api_version=header.api_version,
        correlation_id=header.correlation_id,
        request=frame,
    )
    return error_answer(exchange, error_code)

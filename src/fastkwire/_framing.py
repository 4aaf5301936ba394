"""Frames: int32 size, request or response header, body. Bound to one implementation."""

import struct
from functools import lru_cache

from . import errors as _e
from ._rules import byte_view
from .errors import DecodeError

_SIZE = struct.Struct(">i")


@lru_cache(maxsize=None)
def _api_versions_key():
    """ApiVersions' key, from its definition: read with the first frame, not at import."""
    from . import _schema

    return _schema.load("ApiVersionsRequest").api_key


def header_versions(api_key, flexible):
    """(request header version, response header version) of an API version whose
    messages are flexible or not."""
    # ApiVersions responses keep header v0 so that any client can read the error.
    return (2 if flexible else 1), (0 if api_key == _api_versions_key() else int(flexible))


def request_header_version(cls, version):
    return header_versions(cls.API_KEY, cls.is_flexible(version))[0]


def response_header_version(cls, version):
    return header_versions(cls.API_KEY, cls.is_flexible(version))[1]


def check_size(frame):
    """The frame's int32 size says how many bytes follow it (explain judges it so too)."""
    n = len(frame)
    if n < 4:
        raise _e.truncated(0, 4, n)
    size = _SIZE.unpack_from(frame, 0)[0]
    if size != n - 4:
        raise DecodeError(f"frame size {size} does not match the {n - 4} bytes that follow", 0)


def request_api(frame, requests):
    """(class, version) of a request frame, from its header's API key and version, as
    decode_request (and explain) refuse them: too short, unknown key, version out of range."""
    if len(frame) < 8:
        raise _e.truncated(4, 4, len(frame) - 4)
    api_key, version = struct.unpack_from(">hh", frame, 4)
    cls = requests.get(api_key)
    if cls is None:
        raise DecodeError(f"unknown API key {api_key}", 4)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise _e.bad_version(cls.__name__, version, f"{cls.MIN_VERSION}-{cls.MAX_VERSION}")
    return cls, version


def _body(cls, frame, version, pos, records):
    """The message after the header; it must end where the frame does."""
    msg, end = cls.decode_from(frame, version, pos, records=records)
    if end != len(frame):
        raise _e.trailing(end, len(frame) - end)
    return msg


def _frame(*parts):
    size = sum(len(p) for p in parts)
    if size > 0x7FFFFFFF:  # the size prefix is an int32
        raise _e.message_too_large()
    return b"".join((_SIZE.pack(size), *parts))  # one copy of the parts


TRAILING = ("error", "keep")


def _keep_trailing(trailing):
    """decode's `trailing=`: "error" (the default) refuses bytes after the message; "keep"
    returns them as a third item, as a broker ignores them (librdkafka sends such frames)."""
    if trailing == "error":
        return False
    if trailing == "keep":
        return True
    raise ValueError(f'trailing must be "error" or "keep", not {trailing!r}')


def _body_and_rest(cls, frame, version, pos, records):
    """The message after the header, and the bytes after it (trailing="keep")."""
    msg, end = cls.decode_from(frame, version, pos, records=records)
    return msg, bytes(frame[end:])


def bind(header_class, requests, responses):
    """Framing functions for one implementation's classes; header_class(name) gives
    its RequestHeader or ResponseHeader class."""

    def encode_request(msg, version, correlation_id, client_id=""):
        cls = type(msg)
        if cls.KIND != "request":
            raise TypeError(f"{cls.__name__} is not a request")
        header = header_class("RequestHeader")(
            request_api_key=cls.API_KEY,
            request_api_version=version,
            correlation_id=correlation_id,
            client_id=client_id,
        )
        body = msg.encode(version)
        return _frame(header.encode(request_header_version(cls, version)), body)

    def decode_request(frame, *, records="bytes", trailing="error"):
        keep = _keep_trailing(trailing)
        frame = byte_view(frame)
        check_size(frame)
        cls, version = request_api(frame, requests)
        header, pos = header_class("RequestHeader").decode_from(
            frame, request_header_version(cls, version), 4
        )
        if keep:
            return (header, *_body_and_rest(cls, frame, version, pos, records))
        return header, _body(cls, frame, version, pos, records)

    def encode_response(msg, version, correlation_id):
        cls = type(msg)
        if cls.KIND != "response":
            raise TypeError(f"{cls.__name__} is not a response")
        header = header_class("ResponseHeader")(correlation_id=correlation_id)
        body = msg.encode(version)
        return _frame(header.encode(response_header_version(cls, version)), body)

    def decode_response(frame, api_key, version, *, records="bytes", trailing="error"):
        keep = _keep_trailing(trailing)
        frame = byte_view(frame)
        check_size(frame)
        cls = responses.get(api_key)
        if cls is None:
            raise ValueError(f"unknown API key {api_key}")
        header, pos = header_class("ResponseHeader").decode_from(
            frame, response_header_version(cls, version), 4
        )
        if keep:
            return (header, *_body_and_rest(cls, frame, version, pos, records))
        return header, _body(cls, frame, version, pos, records)

    return encode_request, decode_request, encode_response, decode_response

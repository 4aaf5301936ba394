"""What the proxy reads of a frame without decoding it: the size prefix, the request
header's fixed fields and client id, a response's correlation id, and a Produce request's
acks (acks=0 gets no response, so such a request is never waited for).

Nothing here raises on a short or odd frame: a field that cannot be read is None, and the
frame is still forwarded as it is.
"""

import struct

SIZE = struct.Struct(">i")
_REQUEST_FIXED = struct.Struct(">hhi")
_INT16 = struct.Struct(">h")
PRODUCE = 0
_PRODUCE_FLEXIBLE = 9  # Produce v9+: header v2, compact transactional id


class RequestHeader:
    """The fields of a request header the proxy shows and matches rules on."""

    __slots__ = ("api_key", "api_version", "correlation_id", "client_id", "end")

    def __init__(self, api_key, api_version, correlation_id, client_id, end):
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.client_id = client_id  # None: null, or not readable
        self.end = end  # offset just after the client id (None if unread)


def request_header(frame):
    """The RequestHeader of a whole frame (size prefix included); None when the frame is
    too short for the api key, version and correlation id."""
    if len(frame) < 12:
        return None
    api_key, version, correlation_id = _REQUEST_FIXED.unpack_from(frame, 4)
    client_id, end = None, None
    if len(frame) >= 14:
        n = _INT16.unpack_from(frame, 12)[0]
        if n < 0:
            end = 14
        elif 14 + n <= len(frame):
            client_id = bytes(frame[14 : 14 + n]).decode("utf-8", "replace")
            end = 14 + n
    return RequestHeader(api_key, version, correlation_id, client_id, end)


def response_correlation_id(frame):
    """The correlation id of a response frame, or None if it is shorter than 8 bytes."""
    if len(frame) < 8:
        return None
    return SIZE.unpack_from(frame, 4)[0]


def uvarint(frame, pos):
    value, shift = 0, 0
    while shift < 35:
        if pos >= len(frame):
            raise IndexError(pos)
        b = frame[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
    raise IndexError(pos)


def produce_acks(frame, header):
    """A Produce request's acks, or None when it cannot be read (the request is then
    treated as one that gets a response)."""
    if header.api_key != PRODUCE or header.end is None:
        return None
    version = header.api_version
    pos = header.end
    try:
        if version >= _PRODUCE_FLEXIBLE:
            count, pos = uvarint(frame, pos)  # the header's tagged fields
            for _ in range(min(count, 64)):
                _, pos = uvarint(frame, pos)
                size, pos = uvarint(frame, pos)
                pos += size
            n, pos = uvarint(frame, pos)  # compact nullable transactional id
            pos += max(n - 1, 0)
        elif version >= 3:
            n = _INT16.unpack_from(frame, pos)[0]
            pos += 2 + max(n, 0)
        return _INT16.unpack_from(frame, pos)[0]
    except (IndexError, struct.error):
        return None

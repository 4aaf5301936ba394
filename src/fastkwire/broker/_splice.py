"""Fetch answers written without copying their records into them: the codec encodes the
answer with a 16-byte marker in place of each large `records` field, and the marker and the
length the codec wrote before it are swapped for the records' own length and the records,
as pieces the transport writes one after another. The layout stays the codec's: only a
records field's length prefix is written here, in the form the codec chose (a compact
uvarint of length + 1 in flexible versions, an int32 before them).
"""

import os
import struct

from .. import encode_response

SPLICE_MIN = 16 * 1024  # smaller records are encoded in place (pieces cost more than bytes)


class Pieces:
    """A partition's records as the log's pieces (PartitionLog.read_pieces), not joined:
    its len() is their size in bytes; encode_fetch writes them one after another."""

    __slots__ = ("pieces", "size")

    def __init__(self, pieces, size):
        self.pieces = pieces
        self.size = size

    def __len__(self):
        return self.size

    def joined(self):
        return b"".join(self.pieces)


def records_of(pieces, size):
    """What a Fetch answer carries for a partition read as (pieces, size): Pieces when it
    is spliced, else its bytes."""
    return Pieces(pieces, size) if size >= SPLICE_MIN else b"".join(pieces)


_MARK = 16
_COMPACT_MARK_PREFIX = _MARK + 1  # what a compact length prefix of the marker is (one byte)
_INT32_MARK_PREFIX = struct.pack(">i", _MARK)
_SIZE = struct.Struct(">i")
MAX_FRAME = 0x7FFFFFFF


def encode_fetch(response, version, correlation_id):
    """A FetchResponse's frame, as bytes, or as a tuple of bytes-like pieces when it carries
    records of SPLICE_MIN bytes or more (those are in it as they are, not copied)."""
    taken = []
    try:
        for topic in response.responses:
            for p in topic.partitions:
                data = p.records
                if type(data) is Pieces and len(data) < SPLICE_MIN:
                    p.records = data = data.joined()
                if data is not None and len(data) >= SPLICE_MIN:
                    mark = os.urandom(_MARK)
                    taken.append((p, mark, data))
                    p.records = mark
        encoded = encode_response(response, version, correlation_id)
    finally:
        for p, _, data in taken:
            p.records = data
    if not taken:
        return encoded
    pieces = _pieces(encoded, taken)
    if pieces is None:  # a marker not found where it should be: encode it whole instead
        for p, _, data in taken:
            if type(data) is Pieces:
                p.records = data.joined()
        return encode_response(response, version, correlation_id)
    return pieces


def _pieces(encoded, taken):
    pieces = [None]  # the size prefix, once the size is known
    pos = 4
    size = len(encoded) - 4
    for _, mark, data in taken:
        at = encoded.find(mark, pos)
        if at < 0:
            return None
        if encoded[at - 1] == _COMPACT_MARK_PREFIX:
            start, prefix = at - 1, _uvarint(len(data) + 1)
        elif encoded[at - 4 : at] == _INT32_MARK_PREFIX:
            start, prefix = at - 4, _SIZE.pack(len(data))
        else:
            return None
        pieces += (encoded[pos:start], prefix)
        if type(data) is Pieces:
            pieces += data.pieces
        else:
            pieces.append(data)
        size += len(prefix) + len(data) - (at + _MARK - start)
        pos = at + _MARK
    pieces.append(encoded[pos:])
    if size > MAX_FRAME:
        return None  # encoded whole, the codec refuses it as it refuses any such answer
    pieces[0] = _SIZE.pack(size)
    return tuple(pieces)


def _uvarint(v):
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)

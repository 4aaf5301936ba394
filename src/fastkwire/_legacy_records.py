"""Legacy message sets (magic 0 and 1), read only, in pure Python: brokers and topics
from before Kafka 0.11 send them, rarely and in small amounts.

A message: offset int64, size int32, then crc uint32 (CRC32 of the rest), magic int8,
attributes int8 (codec in bits 0-2, timestamp type in bit 3 for magic 1), timestamp
int64 (magic 1 only), key and value (int32 length, -1 for null). A compressed message
(a wrapper) holds a whole message set, compressed, as its value.
"""

import struct
import zlib

from . import _compression, _wire
from . import errors as _e
from .errors import DecodeError
from ._records_model import Record, RecordBatch

_HEAD = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
MIN_SIZE = {0: 14, 1: 22}
INT64_MAX = (1 << 63) - 1  # crc, magic, attributes, (timestamp,) key and value lengths


def _bytes(data, pos, end, seen=None, name=None):
    if end - pos < 4:
        raise DecodeError(f"truncated: needs 4 bytes, {end - pos} left", pos)
    (n,) = struct.unpack_from(">i", data, pos)
    if seen is not None:
        seen.leaf(name + "_length", pos, 4, n)
    pos += 4
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid length {n}", pos - 4)
        return None, pos
    if n > end - pos:
        raise DecodeError(f"truncated: needs {n} bytes, {end - pos} left", pos)
    return bytes(data[pos : pos + n]), pos + n


HEAD_FIELDS = _wire.LEGACY_HEAD


def read_message(data, pos, check_crc, limit_of, inner=False, seen=None):
    """The message at data[pos:] (its size already checked to fit, and to hold the
    magic byte, 0 or 1) -> RecordBatch. `seen` observes the reading (records.describe)."""
    size = struct.unpack_from(">i", data, pos + 8)[0]
    magic = data[pos + 16]
    if size < MIN_SIZE[magic]:
        raise DecodeError(f"message size {size} is shorter than a magic {magic} message", pos + 8)
    head = _HEAD.unpack_from(data, pos)
    offset, size, crc, magic, attrs = head
    end = pos + 12 + size
    if seen is not None:
        seen.open("message", pos)
        at = pos
        for (name, width), value in zip(HEAD_FIELDS, head):
            seen.leaf(name, at, width, value)
            at += width
    if check_crc:
        actual = zlib.crc32(data[pos + 16 : end])
        if actual != crc:
            raise DecodeError(
                f"CRC32 mismatch: the message says {crc:#010x}, its bytes give {actual:#010x}",
                pos + 12,
            )
    p = pos + 18
    timestamp = -1
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", data, p)
        if seen is not None:
            seen.leaf("timestamp", p, 8, timestamp)
        p += 8
    codec = attrs & 7
    key, p = _bytes(data, p, end, seen, "key")
    # A compressed value is shown as the messages it holds, below.
    value_start = p
    value, p = _bytes(data, p, end, seen if codec == 0 or codec > 3 else None, "value")
    if p != end:
        raise DecodeError(f"{_e.count(end - p, 'byte')} after the message's value", p)
    ts_type = (attrs >> 3) & 1 if magic == 1 else 0
    if codec > 3:
        raise DecodeError(f"unknown compression {codec} for magic {magic}", pos + 17)
    if codec == 0:
        records = [Record(offset, timestamp, key, value, [])]
    else:
        if inner:
            raise DecodeError("a compressed message inside a compressed message", pos + 17)
        if value is None:
            raise DecodeError("compressed message without a value", pos + 17)
        name = _compression.CODECS[codec]
        raw = bytes(_compression.decompress(name, value, limit_of(len(value)), end - len(value)))
        limit_of.took(len(raw))
        if seen is not None:
            seen.leaf("value_length", value_start, 4, len(value))
            seen.open("value", value_start + 4)
            seen.decompressed(name, len(raw))
        try:
            records = _inner(raw, check_crc, magic, limit_of, seen)
        except DecodeError as e:
            raise DecodeError(
                f"{e.reason} at offset {e.offset} of the decompressed messages", pos + 12
            ) from None
        if not records:
            raise DecodeError("compressed message holds no messages", pos + 12)
        if magic == 1:
            # Inner offsets are relative: the wrapper's offset is the last one's. (A
            # producer's wrapper says 0: its offsets are the producer's, kept as they are.)
            shift = offset - records[-1].offset
            if shift > 0 and max(r.offset for r in records) + shift > INT64_MAX:
                raise DecodeError("offset out of the int64 range", pos)
            for r in records:
                if shift >= 0:
                    r.offset += shift
                if ts_type == 1:
                    r.timestamp = timestamp
        if seen is not None:
            seen.close(end)  # the value
    if seen is not None:
        seen.close(end)  # the message
    stamps = [r.timestamp for r in records]
    return RecordBatch(
        base_offset=records[0].offset,
        partition_leader_epoch=-1,
        magic=magic,
        crc=crc,
        compression=_compression.CODECS[codec],
        timestamp_type=ts_type,
        is_transactional=False,
        is_control=False,
        last_offset_delta=records[-1].offset - records[0].offset,
        base_timestamp=stamps[0],
        max_timestamp=max(stamps),
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records=records,
    )


def _inner(data, check_crc, magic, limit_of, seen=None):
    """A decompressed message set: whole messages of the wrapper's magic, nothing else."""
    records = []
    pos = 0
    while pos < len(data):
        if len(data) - pos < 17:
            raise DecodeError("truncated message", pos)
        (size,) = struct.unpack_from(">i", data, pos + 8)
        if size < 5 or size > len(data) - pos - 12:
            raise DecodeError(
                f"message size {size} exceeds the {len(data) - pos - 12} bytes left", pos + 8
            )
        if data[pos + 16] != magic:
            raise DecodeError(f"magic {data[pos + 16]} inside a magic {magic} wrapper", pos + 16)
        records += read_message(data, pos, check_crc, limit_of, inner=True, seen=seen).records
        pos += 12 + size
    return records

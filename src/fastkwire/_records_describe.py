"""The byte layout of a `records` field, field by field, for tools that show it (explain).

describe(data) returns a list of Node: one per batch (or legacy message), then one
"tail" node for a cut-off batch at the end. A Node is (name, offset, size, value,
children); offsets count from the start of `data`, except below a compressed batch's
"records" node, whose children count from the start of the decompressed bytes (its
value says so). Values are the decoded numbers, bytes and strings.
"""
import struct
from typing import NamedTuple

from . import _compression, _records_python
from .errors import DecodeError, count_exceeds
from ._batches import MIN_BATCH_LENGTH, default_limit
from ._legacy_records import MIN_SIZE


class Node(NamedTuple):
    name: str
    offset: int
    size: int
    value: object = None
    children: tuple = ()


V2_FIELDS = [("base_offset", ">q"), ("batch_length", ">i"), ("partition_leader_epoch", ">i"),
             ("magic", ">b"), ("crc", ">I"), ("attributes", ">h"), ("last_offset_delta", ">i"),
             ("base_timestamp", ">q"), ("max_timestamp", ">q"), ("producer_id", ">q"),
             ("producer_epoch", ">h"), ("base_sequence", ">i"), ("record_count", ">i")]
LEGACY_FIELDS = [("offset", ">q"), ("message_size", ">i"), ("crc", ">I"), ("magic", ">b"),
                 ("attributes", ">b")]


def _fields(data, pos, fields):
    nodes = []
    for name, fmt in fields:
        size = struct.calcsize(fmt)
        nodes.append(Node(name, pos, size, struct.unpack_from(fmt, data, pos)[0]))
        pos += size
    return nodes, pos


def describe(data, *, max_decompressed=None, max_records=None, crc32c=_records_python.crc32c):
    data = bytes(data)
    out = []
    pos = 0
    while pos < len(data):
        left = len(data) - pos
        size = struct.unpack_from(">i", data, pos + 8)[0] if left >= 12 else None
        if size is not None and size < 0:
            raise DecodeError(f"invalid batch length {size}", pos + 8)
        if size is None or size > left - 12:
            out.append(Node("tail", pos, left, "a cut-off batch"))
            break
        if size < 5:
            raise DecodeError(f"batch length {size} is too short to hold the magic byte", pos + 8)
        magic = data[pos + 16]
        if magic == 2:
            out.append(_v2(data, pos, size, max_decompressed, max_records, crc32c))
        elif magic in (0, 1):
            out.append(_legacy(data, pos, max_decompressed, max_records))
        else:
            raise DecodeError(f"unknown magic {magic}", pos + 16)
        pos += 12 + size
    return out


def _v2(data, pos, size, max_decompressed, max_records, crc32c):
    if size < MIN_BATCH_LENGTH:
        raise DecodeError(f"batch length {size} is shorter than the batch header", pos + 8)
    head, start = _fields(data, pos, V2_FIELDS)
    end = pos + 12 + size
    fields = {n.name: n.value for n in head}
    codec = fields["attributes"] & 7
    if codec >= len(_compression.CODECS):
        raise DecodeError(f"unknown compression {codec}", pos + 21)
    count = fields["record_count"]
    # Absolute offsets and timestamps, as readers see them (LogAppendTime: the batch's).
    log_append_time = fields["max_timestamp"] if fields["attributes"] & 0x08 else None
    bases = (fields["base_offset"], fields["base_timestamp"], log_append_time)
    if codec == 0:
        records = Node("records", start, end - start, f"{count} records",
                       _records(data, start, end, count, max_records, bases))
    else:
        name = _compression.CODECS[codec]
        raw = bytes(_compression.decompress(name, data[start:end],
                                            max_decompressed or default_limit(end - start), start))
        records = Node("records", start, end - start,
                       f"{name}: {count} records in {len(raw)} decompressed bytes "
                       "(offsets below count from their start)", _records(raw, 0, len(raw), count, max_records, bases))
    crc_ok = crc32c(data[pos + 21:end]) == fields["crc"]
    summary = (f"magic 2, {count} records, {_compression.CODECS[codec]}"
               f"{'' if crc_ok else ', CRC mismatch'}")
    return Node("batch", pos, 12 + size, summary, tuple(head) + (records,))


def _varint(name, data, pos, end, max_bytes):
    value, nxt = _records_python._varint(data, pos, end, max_bytes)
    return Node(name, pos, nxt - pos, value), nxt


def _blob(name, data, pos, end, text=False):
    length, pos = _varint(f"{name}_length", data, pos, end, 5)
    n = length.value
    if n < -1:
        raise DecodeError(f"invalid length {n}", length.offset)
    if n > end - pos:
        raise DecodeError(f"truncated: needs {n} bytes, {end - pos} left", pos)
    if n < 0:
        return [length], pos
    value = data[pos:pos + n]
    if text:
        value = value.decode("utf-8", "replace")
    return [length, Node(name, pos, n, value)], pos + n


def _records(data, pos, end, count, max_records, bases):
    base_offset, base_timestamp, log_append_time = bases
    if count < 0 or count > (end - pos) // _records_python.MIN_RECORD:
        raise count_exceeds(pos, count, end - pos)
    out = []
    for i in range(count):
        if max_records is not None and i >= max_records:  # the rest in one node, unread
            out.append(Node(f"record[{i}..{count - 1}]", pos, end - pos, count - i))
            break
        start = pos
        length, pos = _varint("length", data, pos, end, 5)
        rend = pos + length.value
        if length.value < 6 or rend > end:
            raise DecodeError(f"invalid record length {length.value}", start)
        nodes = [length, Node("attributes", pos, 1, data[pos])]
        pos += 1
        for name, width in (("timestamp_delta", 10), ("offset_delta", 5)):
            node, pos = _varint(name, data, pos, rend, width)
            nodes.append(node)
        for name in ("key", "value"):
            more, pos = _blob(name, data, pos, rend)
            nodes += more
        hcount, pos = _varint("header_count", data, pos, rend, 5)
        nodes.append(hcount)
        if hcount.value < 0 or hcount.value > (rend - pos) // 2:
            raise count_exceeds(hcount.offset, hcount.value, rend - pos)
        for j in range(hcount.value):
            hstart = pos
            key, pos = _blob("key", data, pos, rend, text=True)
            value, pos = _blob("value", data, pos, rend)
            nodes.append(Node(f"header[{j}]", hstart, pos - hstart, None, tuple(key + value)))
        if pos != rend:
            raise DecodeError(f"record length {length.value} does not match its fields", start)
        timestamp = log_append_time if log_append_time is not None else base_timestamp + nodes[2].value
        out.append(Node(f"record[{i}]", start, pos - start,
                        f"offset {base_offset + nodes[3].value}, timestamp {timestamp}", tuple(nodes)))
    return tuple(out)


def _legacy(data, pos, max_decompressed, max_records):
    magic, size = data[pos + 16], struct.unpack_from(">i", data, pos + 8)[0]
    if size < MIN_SIZE[magic]:
        raise DecodeError(f"message size {size} is shorter than a magic {magic} message", pos + 8)
    head, p = _fields(data, pos, LEGACY_FIELDS)
    end = pos + 12 + size
    if magic == 1:
        head.append(Node("timestamp", p, 8, struct.unpack_from(">q", data, p)[0]))
        p += 8
    for name in ("key", "value"):
        if end - p < 4:
            raise DecodeError(f"truncated: needs 4 bytes, {end - p} left", p)
        n = struct.unpack_from(">i", data, p)[0]
        head.append(Node(f"{name}_length", p, 4, n))
        p += 4
        if n < -1 or n > end - p:
            raise DecodeError(f"invalid length {n}", p - 4)
        if n >= 0:
            head.append(Node(name, p, n, data[p:p + n]))
            p += n
    codec = head[4].value & 7
    if codec and codec < 4 and head[-1].name == "value":
        value = head[-1]
        raw = bytes(_compression.decompress(
            _compression.CODECS[codec], value.value,
            max_decompressed or default_limit(value.size), value.offset))
        head[-1] = value._replace(
            value=f"{_compression.CODECS[codec]}: messages in {len(raw)} decompressed bytes "
                  "(offsets below count from their start)",
            children=tuple(describe(raw, max_records=max_records)))
    return Node("message", pos, end - pos, f"magic {magic}", tuple(head))

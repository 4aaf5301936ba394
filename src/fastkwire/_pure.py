"""Wire primitives in pure Python: the twin of _core.pyx, same names, same behaviour.

Writers append to a bytearray and validate the value (raising EncodeError without a
path; the struct writers add it). Readers take (data, pos, end), return
(value, new_pos) and raise DecodeError at the offset where the value starts.
"""

import struct

from . import _bulk, _wire
from . import errors as _e
from ._rules import (
    byte_view,
    check_offset,
    check_type_name,
    check_version,
    float_value,
    int_value,
    merge_tags,
    parse_array_type,
    raw_bytes,
    seq_len,
    uuid_bytes,
)
from ._wire import MAX_LENGTH, MAX_MESSAGE, MAX_STRING, MAX_TAG, NUMPY_ARRAYS, RANGE, WIDTH
from .columns import TaskOffsetColumns
from .errors import DecodeError, EncodeError

_S = {
    k: struct.Struct(">" + p.fmt)
    for k, p in _wire.PRIMITIVES.items()
    if p.fmt is not None and k != "bool"
}

unpack_int8 = _S["int8"].unpack_from
unpack_int16 = _S["int16"].unpack_from
unpack_int32 = _S["int32"].unpack_from
unpack_int64 = _S["int64"].unpack_from
unpack_uint16 = _S["uint16"].unpack_from
unpack_uint32 = _S["uint32"].unpack_from
unpack_float64 = _S["float64"].unpack_from


# ---------------------------------------------------------------- writing


def _make_int_writer(kind):
    pack = _S[kind].pack

    def write(out, v):
        out += pack(int_value(kind, v))

    write.__name__ = f"w_{kind}"
    return write


w_int8 = _make_int_writer("int8")
w_int16 = _make_int_writer("int16")
w_int32 = _make_int_writer("int32")
w_int64 = _make_int_writer("int64")
w_uint16 = _make_int_writer("uint16")
w_uint32 = _make_int_writer("uint32")


def w_float64(out, v):
    out += _S["float64"].pack(float_value(v))


def w_bool(out, v):
    if v is not True and v is not False:
        raise _e.wrong_type("bool", v)
    out.append(1 if v else 0)


def w_uuid(out, v):
    out += uuid_bytes(v)


def w_uvarint(out, v):
    """Unsigned varint of at most 32 bits (lengths, counts, tags)."""
    if not 0 <= v <= 0xFFFFFFFF:
        raise _e.out_of_range("unsigned varint", v)
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _utf8(s):
    if type(s) is not str:
        raise _e.wrong_type("str", s)
    try:
        b = s.encode("utf-8")
    except UnicodeEncodeError:
        raise EncodeError("string is not encodable as UTF-8") from None
    if len(b) > MAX_STRING:
        raise EncodeError(f"string of {len(b)} UTF-8 bytes exceeds 32767")
    return b


# "classic": the non-compact forms, behind a fixed-width length ("legacy" names the
# magic 0/1 record formats, in the records modules).
def _put_classic(out, raw, width):
    """raw behind an int16 (strings, at most 32767 bytes) or int32 (bytes) length."""
    if width == 2:
        out += _S["int16"].pack(len(raw))
    else:
        w_count(out, len(raw), False)
    out += raw


def _put_compact(out, raw):
    """raw behind an unsigned varint length + 1."""
    n = len(raw)
    if n < 0x7F:  # the common case: a one-byte length
        out.append(n + 1)
    else:
        w_count(out, n, True)
    out += raw


def w_count(out, n, compact):
    """An array count or bytes length: an unsigned varint of n + 1, or an int32."""
    if n > MAX_LENGTH[compact]:
        raise _e.too_long(n, compact)
    if compact:
        w_uvarint(out, n + 1)
    else:
        out += _S["int32"].pack(n)


def w_string(out, s):
    _put_classic(out, _utf8(s), 2)


def w_nullable_string(out, s):
    if s is None:
        out += b"\xff\xff"
    else:
        w_string(out, s)


def w_compact_string(out, s):
    _put_compact(out, _utf8(s))


def w_compact_nullable_string(out, s):
    if s is None:
        out.append(0)
    else:
        w_compact_string(out, s)


def _raw(b):
    if type(b) is bytes:
        return b
    return raw_bytes(b)


def w_bytes(out, b):
    _put_classic(out, _raw(b), 4)


def w_nullable_bytes(out, b):
    if b is None:
        out += b"\xff\xff\xff\xff"
    else:
        w_bytes(out, b)


def w_compact_bytes(out, b):
    _put_compact(out, _raw(b))


def w_compact_nullable_bytes(out, b):
    if b is None:
        out.append(0)
    else:
        w_compact_bytes(out, b)


def w_array_len(out, items, compact, nullable):
    """Writes the count of an array (or its null marker) and returns the count."""
    if items is None:
        if not nullable:
            raise EncodeError("None where the array is not nullable")
        out += b"\x00" if compact else b"\xff\xff\xff\xff"
        return 0
    t = type(items)
    n = len(items) if t is list or t is tuple else seq_len(items)
    if compact and n < 0x7F:  # the common case: a one-byte count
        out.append(n + 1)
    else:
        w_count(out, n, compact)
    return n


def w_tags(out, known, unknown):
    """The tagged-field section; `known` as merge_tags takes it."""
    if not known and not unknown:  # the common case, and the compiled core's test
        out.append(0)
        return
    fields = merge_tags(known, unknown)
    w_uvarint(out, len(fields))
    for tag, payload in fields:
        w_uvarint(out, tag)
        w_uvarint(out, len(payload))
        out += payload


# ---------------------------------------------------------------- reading


def short(pos, need, end):
    return _e.truncated(pos, need, max(end - pos, 0))


def r_uvarint(data, pos, end):
    start = pos
    value = shift = 0
    while True:
        if pos >= end:
            raise short(start, pos - start + 1, end)
        b = data[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            if value > 0xFFFFFFFF:
                raise _e.varint_too_long(start, 5)
            return value, pos
        shift += 7
        if shift >= 35:
            raise _e.varint_too_long(start, 5)


def _make_int_reader(kind):
    unpack = _S[kind].unpack_from
    width = WIDTH[kind]

    def read(data, pos, end):
        if end - pos < width:
            raise short(pos, width, end)
        return unpack(data, pos)[0], pos + width

    read.__name__ = f"r_{kind}"
    return read


r_int8 = _make_int_reader("int8")
r_int16 = _make_int_reader("int16")
r_int32 = _make_int_reader("int32")
r_int64 = _make_int_reader("int64")
r_uint16 = _make_int_reader("uint16")
r_uint32 = _make_int_reader("uint32")
r_float64 = _make_int_reader("float64")


def r_bool(data, pos, end):
    if end - pos < 1:
        raise short(pos, 1, end)
    return data[pos] != 0, pos + 1


def r_uuid(data, pos, end):
    if end - pos < 16:
        raise short(pos, 16, end)
    from uuid import UUID  # here: uuid pulls platform and re into `import fastkwire`

    return UUID(bytes=bytes(data[pos : pos + 16])), pos + 16


def _text(data, start, pos, n, end):
    if n > MAX_STRING:
        raise _e.string_too_long(start, n)
    if end - pos < n:
        raise short(start, pos - start + n, end)
    try:
        return str(data[pos : pos + n], "utf-8"), pos + n
    except UnicodeDecodeError:
        raise _e.invalid_utf8(start) from None


def _classic(data, pos, end, nullable, width, body):
    """A value behind an int16 (strings) or int32 (bytes) length; -1 is null."""
    if end - pos < width:
        raise short(pos, width, end)
    n = (unpack_int16 if width == 2 else unpack_int32)(data, pos)[0]
    if n < 0:
        if n == -1:
            if nullable:
                return None, pos + width
            raise _e.null_not_allowed(pos)
        raise _e.bad_length(pos, n)
    return body(data, pos, pos + width, n, end)


def _compact(data, pos, end, nullable, body):
    """A value behind an unsigned varint length + 1; 0 is null."""
    n, p = r_uvarint(data, pos, end)
    if n == 0:
        if nullable:
            return None, p
        raise _e.null_not_allowed(pos)
    return body(data, pos, p, n - 1, end)


def _short_text(data, pos, end):
    """Fast path of a compact string: a one-byte length with all its text there, else
    None (the careful path then raises the precise error)."""
    if pos < end:
        n = data[pos]
        if 0 < n < 0x80 and pos + n <= end:
            try:
                return data[pos + 1 : pos + n].decode(), pos + n
            except UnicodeDecodeError:
                raise _e.invalid_utf8(pos) from None
    return None


def r_string(data, pos, end):
    return _classic(data, pos, end, False, 2, _text)


def r_nullable_string(data, pos, end):
    return _classic(data, pos, end, True, 2, _text)


def r_compact_string(data, pos, end):
    return _short_text(data, pos, end) or _compact(data, pos, end, False, _text)


def r_compact_nullable_string(data, pos, end):
    return _short_text(data, pos, end) or _compact(data, pos, end, True, _text)


def _blob(data, start, pos, n, end):
    if end - pos < n:
        raise short(start, pos - start + n, end)
    return bytes(data[pos : pos + n]), pos + n


def _view(data, start, pos, n, end):
    if end - pos < n:
        raise short(start, pos - start + n, end)
    return memoryview(data)[pos : pos + n], pos + n


def r_records_view(data, pos, end, compact, nullable):
    """A records field as a read-only view of the (bytes) input, not a copy."""
    if compact:
        return _compact(data, pos, end, nullable, _view)
    return _classic(data, pos, end, nullable, 4, _view)


def r_bytes(data, pos, end):
    return _classic(data, pos, end, False, 4, _blob)


def r_nullable_bytes(data, pos, end):
    return _classic(data, pos, end, True, 4, _blob)


def r_compact_bytes(data, pos, end):
    return _compact(data, pos, end, False, _blob)


def r_compact_nullable_bytes(data, pos, end):
    return _compact(data, pos, end, True, _blob)


def r_array_len(data, pos, end, compact, nullable, min_size):
    """Reads an array count; -1 for null. The count must fit in the bytes left."""
    start = pos
    if compact:
        n, pos = r_uvarint(data, pos, end)
        n -= 1
    else:
        if end - pos < 4:
            raise short(pos, 4, end)
        n = unpack_int32(data, pos)[0]
        pos += 4
        if n < -1:
            raise _e.bad_length(start, n)
    if n == -1:
        if not nullable:
            raise _e.null_not_allowed(start)
        return -1, pos
    if n * min_size > end - pos:
        raise _e.count_exceeds(start, n, end - pos)
    return n, pos


def r_tag_header(data, pos, end, last_tag):
    """Reads one tagged field's tag and size; returns (tag, size, payload_pos)."""
    start = pos
    tag, pos = r_uvarint(data, pos, end)
    if tag > MAX_TAG:  # a tag is an int32 (Kafka reads larger ones as negative)
        raise _e.tag_too_large(start, tag)
    if tag <= last_tag:
        raise _e.tags_out_of_order(start, tag)
    size_at = pos
    size, pos = r_uvarint(data, pos, end)
    if size > end - pos:
        raise _e.count_exceeds(size_at, size, end - pos)
    return tag, size, pos


def r_unknown_tags(data, pos, end):
    """A tagged-field section with no known tags: {tag: raw bytes} or None."""
    n, pos = r_uvarint(data, pos, end)
    if n == 0:
        return None, pos
    tags = {}
    last = -1
    for _ in range(n):
        tag, size, pos = r_tag_header(data, pos, end, last)
        tags[tag] = bytes(data[pos : pos + size])
        pos += size
        last = tag
    return tags, pos


def r_marker(data, pos, end):
    """The int8 before a nullable struct: -1 null, 1 present."""
    if end - pos < 1:
        raise short(pos, 1, end)
    m = unpack_int8(data, pos)[0]
    if m != -1 and m != 1:
        raise _e.bad_marker(pos, m)
    return m, pos + 1


# ---------------------------------------------------------------- arrays


def item_at(items, i, n):
    """Element i of an array whose count n is already written; the array must not have
    changed size since (a callback during encoding can change it). Subclasses of list
    and tuple are read as they store, like seq_len."""
    t = type(items)
    if (t is list or t is tuple) and len(items) == n:
        try:
            return items[i]
        except IndexError:  # shrunk since by another thread: _stored_item says so
            pass
    return _stored_item(items, i, n)


def _stored_item(items, i, n):
    """item_at for a subclass, or for a list that changed size (an error)."""
    base = list if isinstance(items, list) else tuple
    if base.__len__(items) != n:
        raise _e.changed_during_encode()
    try:
        return base.__getitem__(items, i)
    except IndexError:  # shrunk meanwhile by another thread
        raise _e.changed_during_encode() from None


def w_array(out, items, write_item, compact, nullable):
    """An array of primitive elements (strings, ...)."""
    n = w_array_len(out, items, compact, nullable)
    i = 0
    try:
        for i in range(n):
            write_item(out, item_at(items, i, n))
    except EncodeError as x:
        raise x.with_prefix(f"[{i}]") from None


def r_array(data, pos, end, read_item, compact, nullable, min_size):
    n, pos = r_array_len(data, pos, end, compact, nullable, min_size)
    if n < 0:
        return None, pos
    items = []
    i = 0
    try:
        for i in range(n):
            item, pos = read_item(data, pos, end)
            items.append(item)
    except DecodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return items, pos


def reserve(out, n):
    """Check that n more bytes keep the message within MAX_MESSAGE, before making them."""
    if n > MAX_MESSAGE - len(out):
        raise _e.message_too_large()


def w_int_array(out, items, kind, compact, nullable):
    if items is None:
        w_array_len(out, None, compact, nullable)
        return
    if not isinstance(items, (list, tuple)):
        if not (hasattr(items, "__array__") or hasattr(items, "typecode")):
            raise _e.wrong_type("list of int", items)
        # numpy arrays, array.array, ...: shape and type, then the count and the size it
        # takes (a zero-stride view can claim any length), then values, then one copy
        arr = _bulk.as_array(items, kind)
        n = len(arr)
        w_count(out, n, compact)
        reserve(out, n * WIDTH[kind])
        _bulk.check_values(arr, kind)
        _bulk.write(out, arr, kind)
        return
    seq = items
    n = w_array_len(out, seq, compact, nullable)
    if n and (type(seq) is list or type(seq) is tuple) and set(map(type, seq)) == {int}:
        # Plain ints: one struct call, which checks the range too; a value out of range
        # falls through to the loop below, which names it.
        try:
            out += struct.pack(f">{n}{_S[kind].format[-1]}", *seq)
            return
        except struct.error:
            pass
    pack = _S[kind].pack
    lo, hi = RANGE[kind]
    i = 0
    try:
        for i in range(n):
            v = item_at(seq, i, n)
            if type(v) is not int or not lo <= v <= hi:
                v = int_value(kind, v)
            out += pack(v)
    except EncodeError as x:
        raise x.with_prefix(f"[{i}]") from None


def r_int_array(data, pos, end, kind, compact, nullable, arrays):
    width = WIDTH[kind]
    n, pos = r_array_len(data, pos, end, compact, nullable, width)
    if n < 0:
        return None, pos
    stop = pos + n * width
    if arrays & NUMPY_ARRAYS:
        return _bulk.read(data, pos, n, kind), stop
    # one struct call for the whole array: far faster than one per element
    return list(struct.unpack_from(f">{n}{_S[kind].format[-1]}", data, pos)), stop


# Task offsets in columns (arrays="numpy"): rows of string, int32 partition, int64 offset
# and, in flexible versions, a tagged-field section.

_TASK_OFFSET = struct.Struct(_wire.TASK_OFFSET_ROW)
_TASK_FIELDS = _wire.TASK_OFFSET_FIELDS


def r_task_offsets(data, pos, end, compact, nullable, flexible, min_size, item):
    """A TaskOffset array as TaskOffsetColumns; `item` is the TaskOffset class."""
    n, pos = r_array_len(data, pos, end, compact, nullable, min_size)
    if n < 0:
        return None, pos
    read_str = r_compact_string if compact else r_string
    ids, parts, offsets, unknown = [], [], [], {}
    i = f = 0
    try:
        for i in range(n):
            f = 0
            s, pos = read_str(data, pos, end)
            f = 1
            if end - pos < 12:  # partition then offset: report the one that is short
                if end - pos >= 4:
                    f = 2
                    pos += 4
                raise short(pos, 4 if f == 1 else 8, end)
            p, o = _TASK_OFFSET.unpack_from(data, pos)
            pos += 12
            ids.append(s)
            parts.append(p)
            offsets.append(o)
            if flexible:
                f = 3
                tags, pos = r_unknown_tags(data, pos, end)
                if tags is not None:
                    unknown[i] = tags
    except DecodeError as x:
        raise x.with_prefix(_TASK_FIELDS[f]).with_prefix(f"[{i}]") from None
    import numpy as np

    return TaskOffsetColumns._of(
        ids, np.array(parts, dtype="i4"), np.array(offsets, dtype="i8"), unknown, item
    ), pos


def w_task_offsets(out, cols, compact, flexible):
    """TaskOffsetColumns in the layout of a TaskOffset array."""
    ids, parts, offsets, tags = _bulk.task_columns(cols)
    n = seq_len(ids)
    w_count(out, n, compact)
    parts = parts.tolist()
    offsets = offsets.tolist()
    write_str = w_compact_string if compact else w_string
    pack = _TASK_OFFSET.pack
    i = 0
    try:
        for i in range(n):
            write_str(out, item_at(ids, i, n))
            out += pack(parts[i], offsets[i])
            if flexible:
                w_tags(out, None, tags.get(i) if tags else None)
    except EncodeError as x:
        if not x.path:  # the string; the tags name themselves
            x = x.with_prefix("subtopology_id")
        raise x.with_prefix(f"[{i}]") from None


# ---------------------------------------------------------------- helpers for the codecs


_WINDOW = 4096


def read_from(reader, data, offset, version, arrays):
    """decode_from: the message at `offset` of `data`, as (message, end);
    reader(version) gives the function that reads that version.

    bytes are read in place. Any other buffer is read from a bytes copy of a window
    that starts at the offset: 4096 bytes, four times more after each try that ran out
    of them, up to the end. A copy of the whole buffer per call would make reading
    message after message from one buffer quadratic. A message read within a window is
    the one the whole buffer holds (readers never look past `end`, and running out of
    bytes is always an error), and the last try reads up to the real end, so errors are
    the same as from the whole buffer."""
    if type(data) is bytes:
        end = len(data)
        check_offset(offset, end)
        return reader(version)(data, offset, end, version, arrays)
    with memoryview(data) as whole, whole.cast("B") as view:
        end = len(view)
        check_offset(offset, end)
        read = reader(version)
        size = _WINDOW
        while True:
            stop = min(end, offset + size)
            window = view[offset:stop].tobytes()
            try:
                msg, pos = read(window, 0, len(window), version, arrays)
                return msg, offset + pos
            except DecodeError as x:
                if stop == end:
                    raise DecodeError(x.reason, x.offset + offset, x.path) from None
            size *= 4


def finish(out):
    """An encoded message as bytes: no larger than a frame can carry."""
    if len(out) > MAX_MESSAGE:
        raise _e.message_too_large()
    return bytes(out)


def write_into(buffer, offset, encode, version):
    """encode_into: encode(version) written into `buffer` at `offset`; returns its size.

    The buffer must be writable and C-contiguous (else TypeError) and the offset an int
    from 0 to its size in bytes (else EncodeError); a message larger than the room left
    is an EncodeError. On any error the buffer is left as it was. The buffer is held
    (so it cannot be resized) while the message is encoded, as the compiled core does."""
    check_version(version)
    try:
        whole = memoryview(buffer)
    except (TypeError, ValueError):  # not a buffer; a released memoryview
        raise _e.not_writable(buffer) from None
    with whole:
        if whole.readonly or not whole.c_contiguous:
            raise _e.not_writable(buffer)
        with whole.cast("B") as view:
            size = len(view)
            if type(offset) is not int or not 0 <= offset <= size:
                raise _e.bad_buffer_offset(offset, size)
            payload = encode(version)
            n = len(payload)
            if n > size - offset:
                raise _e.buffer_too_small(n, size - offset)
            view[offset : offset + n] = payload
            return n


# ---------------------------------------------------------------- primitive API
# encode(type, value) -> bytes and decode(type, data, offset=0) -> (value, end), the
# same in _core; used by the primitive test vectors and by tools.


def encode(type_name, value):
    check_type_name(type_name)
    out = bytearray()
    if type_name == "uvarint" and type(value) is not int:
        raise _e.out_of_range("unsigned varint", value)
    if type_name == "tagged_fields":
        w_tags(out, None, value)
    elif "[" in type_name:
        compact, nullable, elem = parse_array_type(type_name)
        if elem == "string":
            w_array(out, value, w_compact_string if compact else w_string, compact, nullable)
        else:
            w_int_array(out, value, elem, compact, nullable)
    else:
        globals()["w_" + type_name](out, value)
    return bytes(out)


def decode(type_name, data, offset=0):
    check_type_name(type_name)
    data = byte_view(data)
    end = len(data)
    check_offset(offset, end)
    if type_name == "tagged_fields":
        return r_unknown_tags(data, offset, end)
    if "[" in type_name:
        compact, nullable, elem = parse_array_type(type_name)
        if elem == "string":
            return r_array(
                data,
                offset,
                end,
                r_compact_string if compact else r_string,
                compact,
                nullable,
                1 if compact else 2,
            )
        return r_int_array(data, offset, end, elem, compact, nullable, 0)
    return globals()["r_" + type_name](data, offset, end)

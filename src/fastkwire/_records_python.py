"""The pure-Python kernel of fastkwire.records: the records inside one batch (magic 2),
read and written, and CRC32C. `_records.pyx` is its compiled twin, with the same
checks in the same order, so both raise the same errors on the same bytes."""

import struct

from . import _wire
from . import errors as _e

from .errors import (
    DecodeError,
    EncodeError,
    count_exceeds,
    invalid_utf8,
    truncated,
    varint_too_long,
)
from ._records_model import Record, RecordColumns

MIN_RECORD = _wire.MIN_RECORD  # a count of records is checked against it
MIN_HEADER = _wire.MIN_HEADER
INT64 = (-(1 << 63), (1 << 63) - 1)


def _crc_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc_table()


def crc_args(data, crc):
    """Both kernels' crc32c arguments, checked: `data` any C-contiguous bytes-like
    object (read as its bytes), `crc` an int in 0-4294967295 (the CRC to continue)
    -> (a memoryview of unsigned bytes, the int)."""
    if not isinstance(crc, int):
        raise TypeError(f"crc must be an int, not {type(crc).__name__}")
    if not 0 <= crc <= 0xFFFFFFFF:
        raise ValueError(f"crc must be in 0-4294967295, not {crc}")
    try:
        view = memoryview(data)
    except TypeError:
        raise TypeError(f"data must be a bytes-like object, not {type(data).__name__}") from None
    if not view.c_contiguous:
        raise BufferError("data must be C-contiguous")
    return view.cast("B") if view.format != "B" or view.ndim != 1 else view, int(crc)


def crc32c(data, crc=0):
    """CRC32C (Castagnoli) of `data`, byte by byte (slow: about a megabyte a second)."""
    view, crc = crc_args(data, crc)
    table = _TABLE
    crc ^= 0xFFFFFFFF
    for b in view:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _varint(buf, pos, end, max_bytes):
    """A zigzag varint of at most max_bytes (5: int32, 10: int64) -> (value, next pos)."""
    start = pos
    shift = result = 0
    while True:
        if pos >= end:
            raise truncated(pos, 1, 0)
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if pos - start >= max_bytes:
            raise varint_too_long(start, max_bytes)
    if result >> (7 * max_bytes - (3 if max_bytes == 5 else 6)):  # 32 or 64 bits
        raise varint_too_long(start, max_bytes)
    return (result >> 1) ^ -(result & 1), pos


def _bytes(buf, pos, end, seen=None, name=None):
    """A length and its bytes (None for -1); `seen` (describe's observer) is told both."""
    start = pos
    n, pos = _varint(buf, pos, end, 5)
    if seen is not None:
        seen.leaf(name + "_length", start, pos - start, n)
    if n < 0:
        if n != -1:
            raise DecodeError(f"invalid length {n}", start)
        return None, pos
    if n > end - pos:
        raise truncated(pos, n, end - pos)
    value = bytes(buf[pos : pos + n])
    if seen is not None:
        seen.leaf(name, pos, n, value)
    return value, pos + n


def decode_records(buf, pos, end, count, base_offset, base_timestamp, log_append_time, seen=None):
    """The `count` records in buf[pos:end] as Record objects. `log_append_time`, when
    not None, is every record's timestamp (the broker's, for LogAppendTime batches).
    `seen`, when given, observes the reading field by field (records.describe): it sees
    what this loop reads, where it reads it, and stops where this loop raises."""
    if count < 0 or count > (end - pos) // MIN_RECORD:
        raise count_exceeds(pos, count, end - pos)
    out = []
    append = out.append
    for i in range(count):
        start = pos
        if seen is not None:
            if seen.enough(i):  # the observer has seen as many records as it shows
                seen.rest(i, count, pos, end)
                return out
            seen.open(f"record[{i}]", start)
        length, pos = _varint(buf, pos, end, 5)
        if length < MIN_RECORD - 1 or length > end - pos:
            raise DecodeError(
                f"record length {length} exceeds the {end - pos} bytes left"
                if length > end - pos
                else f"invalid record length {length}",
                start,
            )
        rend = pos + length
        if seen is not None:
            seen.leaf("length", start, pos - start, length)
            seen.leaf("attributes", pos, 1, buf[pos])
        pos += 1  # attributes: unused
        at = pos
        ts_delta, pos = _varint(buf, pos, rend, 10)
        if seen is not None:
            seen.leaf("timestamp_delta", at, pos - at, ts_delta)
        at = pos
        offset_delta, pos = _varint(buf, pos, rend, 5)
        if seen is not None:
            seen.leaf("offset_delta", at, pos - at, offset_delta)
        key, pos = _bytes(buf, pos, rend, seen, "key")
        value, pos = _bytes(buf, pos, rend, seen, "value")
        hpos = pos
        n, pos = _varint(buf, pos, rend, 5)
        if seen is not None:
            seen.leaf("header_count", hpos, pos - hpos, n)
        if n < 0 or n > (rend - pos) // MIN_HEADER:
            raise count_exceeds(hpos, n, rend - pos)
        headers = []
        for j in range(n):
            kpos = pos
            if seen is not None:
                seen.open(f"header[{j}]", kpos)
            hkey, pos = _bytes(buf, pos, rend, seen, "key")
            if hkey is None:
                raise DecodeError("null header key", kpos)
            try:
                hkey = hkey.decode()
            except UnicodeDecodeError:
                raise invalid_utf8(kpos) from None
            hvalue, pos = _bytes(buf, pos, rend, seen, "value")
            if seen is not None:
                seen.close(pos)
            headers.append((hkey, hvalue))
        if pos != rend:
            raise DecodeError(f"record length {length} does not match its fields", start)
        offset = base_offset + offset_delta
        if log_append_time is None:
            timestamp = base_timestamp + ts_delta
            if not INT64[0] <= timestamp <= INT64[1]:
                raise DecodeError("timestamp out of the int64 range", start)
        else:
            timestamp = log_append_time
        if not INT64[0] <= offset <= INT64[1]:
            raise DecodeError(
                f"offset out of the int64 range (base offset {base_offset} + {offset_delta})",
                start,
            )
        if seen is not None:
            seen.close(pos, (offset, timestamp))
        append(Record(offset, timestamp, key, value, headers))
    if pos != end:
        raise DecodeError(
            f"{_e.count(end - pos, 'byte')} after the batch's {_e.count(count, 'record')}", pos
        )
    return out


# The most bytes (and header rows) a column of one read_columns call holds: its offsets
# are int32, as Arrow's binary type (not large_binary).
COLUMN_LIMIT = 0x7FFFFFFF
COLUMN_NAMES = ("key", "value", "headers.key", "headers.value", "headers.offsets")


def check_column_sizes(sizes, pos):
    """Both kernels' check, after each batch, of the column sizes so far: (key, value,
    header key and header value bytes, header rows)."""
    for name, size in zip(COLUMN_NAMES, sizes):
        if size > COLUMN_LIMIT:
            what = "header rows" if name == "headers.offsets" else "bytes"
            raise DecodeError(
                f"the {name} column of one read_columns call would pass "
                f"{COLUMN_LIMIT} {what} (its offsets are int32): read fewer "
                "batches per call",
                pos,
            )


def size_hints(data):
    """(records, bytes past their least) of the whole magic 2 batches at the start of
    `data`, from their headers alone: the columns' first arrays are made that large, not
    doubled batch after batch (a compressed batch may still grow them). (0, 0) for what
    does not read."""
    try:
        view = memoryview(data).cast("B")
    except (TypeError, ValueError):
        return 0, 0
    n, pos, rows, free = len(view), 0, 0, 0
    least = _wire.BATCH_HEADER_SIZE - 12
    at_count = _wire.BATCH_OFFSETS["record_count"]
    with view:
        while n - pos >= _wire.BATCH_HEADER_SIZE:
            (size,) = struct.unpack_from(">i", view, pos + 8)
            if size < least or size > n - pos - 12 or view[pos + 16] != 2:
                break
            (count,) = struct.unpack_from(">i", view, pos + at_count)
            body = size - least
            if 0 < count <= body // _wire.MIN_RECORD:  # as ColumnsBuilder.add measures it
                rows += count
                free += body - _wire.MIN_RECORD * count
            pos += 12 + size
    return rows, free


class ColumnsBuilder:
    """Columns filled batch after batch (read_columns): records first, columns at the end."""

    def __init__(self, rows_hint=0, bytes_hint=0):  # the hints size the compiled kernel's arrays
        self.records = []
        self.sizes = [0] * len(COLUMN_NAMES)

    def add(self, buf, pos, end, count, base_offset, base_timestamp, log_append_time):
        """Append the `count` records in buf[pos:end]."""
        self.add_records(
            decode_records(buf, pos, end, count, base_offset, base_timestamp, log_append_time), pos
        )

    def add_run(self, data, pos, check_crc):
        """The compiled kernel's run of plain batches read in one call; here every batch
        goes through the batch walk and add(), so none is taken: returns pos."""
        return pos

    def add_records(self, records, pos):
        sizes = self.sizes
        for r in records:
            sizes[0] += 0 if r.key is None else len(r.key)
            sizes[1] += 0 if r.value is None else len(r.value)
            sizes[4] += len(r.headers)
            for k, v in r.headers:
                sizes[2] += len(k.encode())
                sizes[3] += 0 if v is None else len(v)
        check_column_sizes(sizes, pos)
        self.records += records

    def finish(self, tail):
        cols = RecordColumns.from_records(self.records)
        cols.tail = tail
        return cols


def _zigzag(out, v):
    v = (v << 1) ^ (v >> 63)
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


def _check_bytes(v, path):
    if v is None or isinstance(v, bytes):
        return v
    if isinstance(v, (bytearray, memoryview)):
        return bytes(v)
    raise EncodeError(f"expected bytes or None, got {type(v).__name__}", path)


def _check_int(v, lo, hi, path, what):
    if type(v) is not int and not isinstance(v, int):
        raise EncodeError(f"expected int, got {type(v).__name__}", path)
    if not lo <= v <= hi:
        raise EncodeError(f"{what} {v} out of range", path)
    return v


def _array(values, kinds, path, what):
    import numpy as np

    try:
        arr = np.asarray(values)
    except Exception:  # noqa: BLE001 - whatever it is, it is not an array
        arr = None
    if arr is None or arr.ndim != 1 or arr.dtype.kind not in kinds:
        raise EncodeError(f"expected a one-dimensional {what} array", path)
    return arr


def _ascending(offsets, lo, hi):
    return (
        offsets[0] >= lo and offsets[-1] <= hi and all(a <= b for a, b in zip(offsets, offsets[1:]))
    )


def _binary_values(column, n, path):
    """The values of a BinaryColumn that should hold n, refused (naming the array)
    unless its arrays fit together: a column that lies must never write other bytes."""
    data = _array(getattr(column, "data", None), "u", path + ".data", "uint8")
    if data.itemsize != 1:
        raise EncodeError("expected a one-dimensional uint8 array", path + ".data")
    offsets = _array(getattr(column, "offsets", None), "iu", path + ".offsets", "integer").tolist()
    nulls = _array(getattr(column, "nulls", None), "b", path + ".nulls", "bool").tolist()
    if n is None:
        n = len(nulls)
    if len(nulls) != n:
        raise EncodeError(f"expected {n} null flags, got {len(nulls)}", path + ".nulls")
    raw = data.tobytes()
    if len(offsets) != n + 1 or not _ascending(offsets, 0, len(raw)):
        raise EncodeError(
            f"expected {n + 1} offsets ascending within the data's {len(raw)} bytes",
            path + ".offsets",
        )
    return [None if null else raw[offsets[i] : offsets[i + 1]] for i, null in enumerate(nulls)]


def _column_records(cols):
    """RecordColumns as Records, once every array is checked against the others."""
    offset = _array(cols.offset, "iu", "offset", "integer").tolist()
    timestamp = _array(cols.timestamp, "iu", "timestamp", "integer").tolist()
    n = len(offset)
    if len(timestamp) != n:
        raise EncodeError(f"expected {n} timestamps, got {len(timestamp)}", "timestamp")
    keys = _binary_values(cols.key, n, "key")
    values = _binary_values(cols.value, n, "value")
    headers = cols.headers
    hkeys = _binary_values(getattr(headers, "key", None), None, "headers.key")
    hn = len(hkeys)
    hvalues = _binary_values(getattr(headers, "value", None), hn, "headers.value")
    rows = _array(getattr(headers, "offsets", None), "iu", "headers.offsets", "integer").tolist()
    if len(rows) != n + 1 or rows[0] != 0 or not _ascending(rows, 0, hn) or rows[-1] != hn:
        raise EncodeError(
            f"expected {n + 1} header rows ascending from 0 to the {hn} headers", "headers.offsets"
        )
    if None in hkeys:
        raise EncodeError("a header key is null", "headers.key")
    try:
        names = [k.decode() for k in hkeys]
    except UnicodeDecodeError:
        raise EncodeError("a header key is not UTF-8", "headers.key") from None
    pairs = list(zip(names, hvalues))
    return [
        Record(offset[i], timestamp[i], keys[i], values[i], pairs[rows[i] : rows[i + 1]])
        for i in range(n)
    ]


def encode_records(records, base_offset, now):
    """The records section of a batch -> (bytes, count, last offset delta, first
    timestamp, max timestamp). `now` is the timestamp of records that have none."""
    if isinstance(records, RecordColumns):
        records = _column_records(records)
    records = list(records)
    if not records:
        raise EncodeError("a batch needs at least one record")
    stamps = []
    for i, r in enumerate(records):
        if not isinstance(r, Record):
            raise EncodeError(f"expected Record, got {type(r).__name__}", f"records[{i}]")
        ts = now if r.timestamp is None else r.timestamp
        stamps.append(_check_int(ts, *INT64, f"records[{i}].timestamp", "timestamp"))
    first = stamps[0]
    out = bytearray()
    rec = bytearray()
    delta = 0
    for i, r in enumerate(records):
        path = f"records[{i}]"
        delta = (
            i
            if r.offset is None
            else _check_int(r.offset, *INT64, path + ".offset", "offset") - base_offset
        )
        _check_int(delta, -(1 << 31), (1 << 31) - 1, path + ".offset", "offset delta")
        ts_delta = _check_int(stamps[i] - first, *INT64, path + ".timestamp", "timestamp delta")
        rec.clear()
        rec.append(0)
        _zigzag(rec, ts_delta)
        _zigzag(rec, delta)
        for name, v in (("key", r.key), ("value", r.value)):
            v = _check_bytes(v, f"{path}.{name}")
            if v is None:
                rec.append(1)  # zigzag(-1)
            else:
                _zigzag(rec, len(v))
                rec += v
        headers = r.headers
        if not isinstance(headers, (list, tuple)):
            raise EncodeError(
                f"expected a list of (str, bytes), got {type(headers).__name__}", f"{path}.headers"
            )
        if type(headers) is list:
            headers = tuple(headers)  # one read: its count and items agree, whatever
            # another thread does to the list meanwhile
        _zigzag(rec, len(headers))
        for j, h in enumerate(headers):
            hpath = f"{path}.headers[{j}]"
            if not isinstance(h, tuple) or len(h) != 2 or not isinstance(h[0], str):
                raise EncodeError("expected a (str, bytes or None) pair", hpath)
            k = h[0].encode()
            _zigzag(rec, len(k))
            rec += k
            v = _check_bytes(h[1], hpath)
            if v is None:
                rec.append(1)
            else:
                _zigzag(rec, len(v))
                rec += v
        _zigzag(out, len(rec))
        out += rec
    return bytes(out), len(records), delta, first, max(stamps)


_HEADER = struct.Struct(">" + "".join(fmt for _, fmt in _wire.BATCH_HEADER))


def encode_batch(
    records,
    base_offset,
    now,
    partition_leader_epoch,
    attributes,
    producer_id,
    producer_epoch,
    base_sequence,
):
    """A whole uncompressed batch: the header (fields checked by the caller), the records
    and the CRC32C of bytes 21.. (see _batches for the layout)."""
    body, count, last_delta, first, top = encode_records(records, base_offset, now)
    if len(body) > 0x7FFFFFFF - (_HEADER.size - 12):
        raise EncodeError("the batch would exceed 2147483647 bytes")
    out = bytearray(
        _HEADER.pack(
            base_offset,
            _HEADER.size - 12 + len(body),
            partition_leader_epoch,
            2,
            0,
            attributes,
            last_delta,
            first,
            top,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        )
    )
    out += body
    struct.pack_into(">I", out, 17, crc32c(memoryview(out)[21:]))
    return bytes(out)


def batch_headers(data, end):
    """The compiled kernel's batch_headers (the Arrow converter's batch fields), in Python."""
    import numpy as np

    view = memoryview(data).cast("B") if not isinstance(data, (bytes, bytearray)) else data
    if end < 0 or end > len(view):
        raise ValueError("end outside the data")
    rows = []
    pos = 0
    while pos < end:
        if end - pos < 17:
            raise ValueError(f"no whole batch at {pos}")
        base, size = struct.unpack_from(">qi", view, pos)
        magic = view[pos + 16]
        if (
            size < 5
            or size > end - pos - 12
            or (magic == 2 and size < _wire.BATCH_HEADER_SIZE - 12)
        ):
            raise ValueError(f"no whole batch at {pos}")
        if magic == 2:
            o = _wire.BATCH_OFFSETS
            (attrs,) = struct.unpack_from(">h", view, pos + o["attributes"])
            (delta,) = struct.unpack_from(">i", view, pos + o["last_offset_delta"])
            (producer,) = struct.unpack_from(">q", view, pos + o["producer_id"])
            (count,) = struct.unpack_from(">i", view, pos + o["record_count"])
        else:
            attrs, delta, producer, count = 0, 0, -1, 0
        rows.append((pos, magic, base, attrs, delta, producer, count))
        pos += 12 + size
    types = (np.int64, np.int8, np.int64, np.int16, np.int32, np.int64, np.int32)
    columns = list(zip(*rows)) if rows else [()] * len(types)
    return tuple(np.array(c, dtype=t) for c, t in zip(columns, types))

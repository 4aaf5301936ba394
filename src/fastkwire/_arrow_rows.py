"""Record-batch bytes to Arrow rows with the schema of Ray Data's `read_kafka`.

The one converter behind `read_kafka`/`iter_kafka` (Fetch answers) and the log-segment
reader (segment files): both hand it a partition's record-batch bytes.

    SCHEMA                 the pyarrow schema of the rows (below)
    empty_batch()          a RecordBatch of SCHEMA with no rows
    batches_to_arrow(data, *, topic, partition, read_committed=False,
                     aborted_transactions=(), check_crc=True, start_offset=None,
                     end_offset=None, max_decompressed=None)
        -> (pyarrow.RecordBatch, next_offset, tail)

`data` is bytes-like: record batches back to back (a Fetch partition's `records`, or a
region of a `.log` segment). Every whole batch is read by `records.read_columns` (CRC32C
checked unless `check_crc=False`; every codec; magic 0 and 1 message sets too), then:
- control batches (transaction markers) are never rows;
- with `read_committed`, the batches of aborted transactions are dropped: an aborted
  transaction is a (producer_id, first_offset) pair, or an object with those attributes
  (a Fetch answer's AbortedTransaction); a producer's transactional batches from its
  first_offset on are dropped until its abort marker, as Kafka's consumer does;
- rows whose offset is outside [start_offset, end_offset) are dropped (None: no bound).
`next_offset` is the offset after the last whole batch (control batches and compacted-away
records included): where the next read of this partition starts; None when `data` holds no
whole batch. `tail` is the bytes of a batch cut off at the end (b"" when none).
Bad bytes raise `fastkwire.DecodeError` with the byte offset in `data`.

The columns (Ray Data's names, types and order):
  offset int64, key binary, value binary, topic string, partition int32,
  timestamp int64 (ms), timestamp_type int32 (0 none, 1 create time, 2 log append time,
  as confluent-kafka numbers them), headers map<string, binary> (every header in order,
  repeated keys kept).
No Python object is made per record: offsets, timestamps, keys, values and headers are
the column buffers read_columns builds, wrapped by pyarrow.
"""

import struct

import numpy as np
import pyarrow as pa

from .records import read_columns
from ._wire import BATCH_OFFSETS

__all__ = ["SCHEMA", "batches_to_arrow", "empty_batch"]

SCHEMA = pa.schema(
    [
        ("offset", pa.int64()),
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("timestamp", pa.int64()),
        ("timestamp_type", pa.int32()),
        ("headers", pa.map_(pa.string(), pa.binary())),
    ]
)

# confluent-kafka's (and Ray's) numbers for timestamp_type.
TIMESTAMP_NOT_AVAILABLE, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME = 0, 1, 2
CONTROL_ABORT = 0

_LENGTH = struct.Struct(">i")
# base_offset, batch_length, then (magic 2) attributes, last_offset_delta, producer_id,
# record_count at their header offsets.
_ATTRS = BATCH_OFFSETS["attributes"]
_LAST_DELTA = BATCH_OFFSETS["last_offset_delta"]
_PRODUCER = BATCH_OFFSETS["producer_id"]
_COUNT = BATCH_OFFSETS["record_count"]
_MAGIC = BATCH_OFFSETS["magic"]
# A legacy message: offset int64, size int32, crc uint32, magic int8, then attributes int8.
_LEGACY_ATTRS = 17


def empty_batch():
    """A RecordBatch of SCHEMA with no rows."""
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in SCHEMA], schema=SCHEMA)


def _aborted_pairs(aborted_transactions):
    pairs = []
    for t in aborted_transactions or ():
        if isinstance(t, tuple):
            producer_id, first_offset = t
        else:
            producer_id, first_offset = t.producer_id, t.first_offset
        pairs.append((first_offset, producer_id))
    pairs.sort()
    return pairs


class _Batch:
    """What the row filter needs of one whole batch: its rows, its offsets, its kind."""

    __slots__ = ("rows", "last_offset", "ts_type", "keep", "control", "producer_id", "txn")

    def __init__(self, rows, last_offset, ts_type, keep, control, producer_id, txn):
        self.rows, self.last_offset, self.ts_type, self.keep = rows, last_offset, ts_type, keep
        self.control, self.producer_id, self.txn = control, producer_id, txn


def _walk(view, end, check_crc, max_decompressed):
    """The whole batches of view[:end] (already read and checked by read_columns)."""
    out = []
    pos = 0
    while pos < end:
        base = struct.unpack_from(">q", view, pos)[0]
        (size,) = _LENGTH.unpack_from(view, pos + 8)
        stop = pos + 12 + size
        magic = view[pos + _MAGIC]
        if magic == 2:
            (attrs,) = struct.unpack_from(">h", view, pos + _ATTRS)
            (delta,) = _LENGTH.unpack_from(view, pos + _LAST_DELTA)
            (producer_id,) = struct.unpack_from(">q", view, pos + _PRODUCER)
            (count,) = _LENGTH.unpack_from(view, pos + _COUNT)
            control = bool(attrs & 0x20)
            out.append(
                _Batch(
                    count,
                    base + delta,
                    TIMESTAMP_LOG_APPEND_TIME if attrs & 0x08 else TIMESTAMP_CREATE_TIME,
                    not control,
                    control,
                    producer_id,
                    bool(attrs & 0x10),
                )
            )
        else:
            # A legacy message (or a compressed wrapper of several): read on its own for
            # its count and last offset. Magic 0 has no timestamps; magic 1's attribute bit
            # 3 says log append time.
            cols = read_columns(view[pos:stop], check_crc=False, max_decompressed=max_decompressed)
            n = len(cols)
            attrs = view[pos + _LEGACY_ATTRS]
            ts_type = (
                TIMESTAMP_NOT_AVAILABLE
                if magic == 0
                else (TIMESTAMP_LOG_APPEND_TIME if attrs & 0x08 else TIMESTAMP_CREATE_TIME)
            )
            last = int(cols.offset[-1]) if n else base
            out.append(_Batch(n, last, ts_type, True, False, -1, False))
        pos = stop
    return out


def _drop_aborted(batches, cols, aborted):
    """read_committed: unmark the batches of aborted transactions (Kafka's consumer's rule:
    a transaction is aborted from its first offset up to its producer's abort marker)."""
    pending = list(aborted)  # (first_offset, producer_id), sorted
    active = set()
    row = 0
    for b in batches:
        if b.txn:
            while pending and pending[0][0] <= b.last_offset:
                active.add(pending.pop(0)[1])
            if b.control:
                if b.rows and b.producer_id in active:
                    key = cols.key[row]
                    if key is not None and struct.unpack_from(">h", key, 2)[0] == CONTROL_ABORT:
                        active.discard(b.producer_id)
            elif b.producer_id in active:
                b.keep = False
        row += b.rows


def batches_to_arrow(
    data,
    *,
    topic,
    partition,
    read_committed=False,
    aborted_transactions=(),
    check_crc=True,
    start_offset=None,
    end_offset=None,
    max_decompressed=None,
):
    """The rows of the whole record batches in `data`: (pyarrow.RecordBatch of SCHEMA,
    next_offset, tail). See the module's docstring."""
    cols = read_columns(data, check_crc=check_crc, max_decompressed=max_decompressed)
    tail = cols.tail
    view = data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")
    batches = _walk(view, len(view) - len(tail), check_crc, max_decompressed)
    next_offset = batches[-1].last_offset + 1 if batches else None
    n = len(cols)
    if read_committed and any(b.txn for b in batches):
        _drop_aborted(batches, cols, _aborted_pairs(aborted_transactions))

    counts = np.fromiter((b.rows for b in batches), dtype=np.int64, count=len(batches))
    offsets = cols.offset
    keep = None
    if not all(b.keep for b in batches):
        keep = np.repeat(np.fromiter((b.keep for b in batches), dtype=bool), counts)
    if start_offset is not None and n and offsets[0] < start_offset:
        keep = (offsets >= start_offset) if keep is None else keep & (offsets >= start_offset)
    if end_offset is not None and n and offsets[-1] >= end_offset:
        keep = (offsets < end_offset) if keep is None else keep & (offsets < end_offset)

    ts_types = set(b.ts_type for b in batches)
    if len(ts_types) == 1:
        ts_type = np.full(n, ts_types.pop(), dtype=np.int32)
    else:
        ts_type = np.repeat(
            np.fromiter((b.ts_type for b in batches), dtype=np.int32), counts
        ).astype(np.int32)

    h = cols.headers
    headers = pa.MapArray.from_arrays(
        pa.array(h.offsets, type=pa.int32()),
        h.key.to_arrow(pa.string()),
        h.value.to_arrow(pa.binary()),
    )
    table = pa.RecordBatch.from_arrays(
        [
            pa.array(offsets, type=pa.int64()),
            cols.key.to_arrow(pa.binary()),
            cols.value.to_arrow(pa.binary()),
            _repeated(topic, n),
            pa.array(np.full(n, partition, dtype=np.int32)),
            pa.array(cols.timestamp, type=pa.int64()),
            pa.array(ts_type),
            headers,
        ],
        schema=SCHEMA,
    )
    if keep is not None:
        table = _select(table, keep)
    return table, next_offset, tail


def _repeated(text, n):
    """A string column of `text` n times, from its buffers (pyarrow.repeat's first call
    loads pyarrow's compute functions: about a second, in every worker process)."""
    raw = text.encode()
    if len(raw) * n > 0x7FFFFFFF:  # past int32 offsets: pyarrow's own way
        return pa.repeat(pa.scalar(text, pa.string()), n)
    offsets = np.arange(n + 1, dtype=np.int32) * np.int32(len(raw))
    return pa.Array.from_buffers(
        pa.string(), n, [None, pa.py_buffer(offsets), pa.py_buffer(raw * n)]
    )


def _select(table, keep):
    """The kept rows: a zero-copy slice when they are one run (a range's ends), else a filter."""
    idx = np.flatnonzero(keep)
    if not idx.size:
        return table.slice(0, 0)
    first, last = int(idx[0]), int(idx[-1])
    if last - first + 1 == idx.size:
        return table.slice(first, idx.size)
    return table.filter(pa.array(keep))

"""Record-batch bytes to Arrow rows with the schema of Ray Data's `read_kafka`.

The one converter behind `read_kafka`/`iter_kafka` (Fetch answers) and the log-segment
reader (segment files): both hand it a partition's record-batch bytes.

    SCHEMA                 the pyarrow schema of the rows (below)
    empty_batch()          a RecordBatch of SCHEMA with no rows
    batches_to_arrow(data, *, topic, partition, read_committed=False,
                     aborted_transactions=(), check_crc=True, start_offset=None,
                     end_offset=None, max_decompressed=None, decompressed_budget=None,
                     previous_offset=None, next_segment=None)
        -> (pyarrow.RecordBatch, next_offset, tail)
    AbortedTransactions(pairs)  read_committed's state, carried from call to call

`data` is bytes-like: record batches back to back (a Fetch partition's `records`, or a
region of a `.log` segment). Every whole batch is read by `records.read_columns` (CRC32C
checked unless `check_crc=False`; every codec; magic 0 and 1 message sets too), then:
- the offsets must go forward: each batch starts after the one before it ended (and after
  `previous_offset`, the last offset read before `data`, when given), and ends before
  `next_segment` (when given); each record's offset lies in its batch's offsets, above
  the record's before it. A log never breaks this: a broker refuses such an append, so
  bytes that do are refused (DecodeError naming the partition and the offsets), not read
  as rows that would be out of order, doubled or outside the range;
- control batches (transaction markers) are never rows;
- with `read_committed`, the batches of aborted transactions are dropped: an aborted
  transaction is a (producer_id, first_offset) pair, or an object with those attributes
  (a Fetch answer's AbortedTransaction); a producer's transactional batches from its
  first_offset on are dropped until its abort marker, as Kafka's consumer does. An
  AbortedTransactions given instead carries that state across calls (a segment read a
  block at a time);
- rows whose offset is outside [start_offset, end_offset) are dropped (None: no bound).
`next_offset` is the offset after the last whole batch read (control batches and
compacted-away records included): where the next read of this partition starts; None when
`data` holds no whole batch. `tail` is the bytes not read: a batch cut off at the end (b""
when none), or, once the records decompressed in this call reach `decompressed_budget`
bytes, every batch after the one that took it there (the read stops there, so that a
block of compressed batches cannot decompress past about the budget plus one batch).
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

from .errors import DecodeError
from .records import _batch_headers, read_columns
from ._wire import BATCH_OFFSETS

__all__ = ["SCHEMA", "AbortedTransactions", "batches_to_arrow", "empty_batch"]

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

# The magic byte; a legacy message's attributes are the byte after it.
_MAGIC = BATCH_OFFSETS["magic"]


def empty_batch():
    """A RecordBatch of SCHEMA with no rows."""
    return pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in SCHEMA], schema=SCHEMA)


class AbortedTransactions:
    """read_committed's state over a partition's batches, in offset order (Kafka's
    consumer's rule): an aborted transaction (producer_id, first_offset) starts when a
    batch reaches its first offset and ends at its producer's abort marker; a producer's
    transactional batches are dropped while one of its transactions is aborted. Each
    transaction is taken once, by an index into the sorted list: linear in their number."""

    __slots__ = ("pending", "next", "active")

    def __init__(self, aborted_transactions=()):
        pairs = []
        for t in aborted_transactions or ():
            if isinstance(t, tuple):
                producer_id, first_offset = t
            else:
                producer_id, first_offset = t.producer_id, t.first_offset
            pairs.append((first_offset, producer_id))
        pairs.sort()
        self.pending = pairs  # (first_offset, producer_id), sorted
        self.next = 0  # pending[next:] have not started yet
        self.active = set()  # producers whose aborted transaction is under way

    def drop(self, batches, cols):
        """Unmark the kept batches of aborted transactions."""
        pending, active, i = self.pending, self.active, self.next
        first_rows = np.concatenate(([0], np.cumsum(batches.rows)[:-1]))
        for b in np.flatnonzero(batches.txn):
            last_offset, producer_id = int(batches.last_offset[b]), int(batches.producer_id[b])
            while i < len(pending) and pending[i][0] <= last_offset:
                active.add(pending[i][1])
                i += 1
            if batches.control[b]:
                if batches.rows[b] and producer_id in active:
                    key = cols.key[int(first_rows[b])]
                    if key is not None and struct.unpack_from(">h", key, 2)[0] == CONTROL_ABORT:
                        active.discard(producer_id)
            elif producer_id in active:
                batches.keep[b] = False
        self.next = i


class _Batches:
    """What the row filter needs of the whole batches, one item a batch (numpy arrays):
    their rows, last offsets, timestamp types, whether they are kept, control and
    transactional flags, producer ids."""

    __slots__ = (
        "at",
        "rows",
        "first_offset",
        "last_offset",
        "ts_type",
        "keep",
        "control",
        "producer_id",
        "txn",
    )


def _walk(view, end, check_crc, max_decompressed):
    """The whole batches of view[:end] (already read and checked by read_columns)."""
    at, magic, base, attrs, last_delta, producer_id, count = _batch_headers(view, end)
    out = _Batches()
    out.at = at
    out.rows = count.astype(np.int64)
    out.first_offset = base.copy()
    out.last_offset = base + last_delta
    out.control = (attrs & 0x20) != 0
    out.txn = (attrs & 0x10) != 0
    out.keep = ~out.control
    out.producer_id = producer_id
    out.ts_type = np.where(attrs & 0x08, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_CREATE_TIME).astype(
        np.int32
    )
    for i in np.flatnonzero(magic != 2):
        # A legacy message (or a compressed wrapper of several): read on its own for its
        # count and last offset. Magic 0 has no timestamps; magic 1's attributes (the
        # byte after the magic) say log append time in bit 3.
        pos = int(at[i])
        stop = pos + 12 + struct.unpack_from(">i", view, pos + 8)[0]
        cols = read_columns(view[pos:stop], check_crc=False, max_decompressed=max_decompressed)
        n = len(cols)
        out.rows[i] = n
        if n:  # a legacy wrapper's own offset is its last message's
            out.first_offset[i], out.last_offset[i] = int(cols.offset[0]), int(cols.offset[-1])
        if magic[i] == 0:
            out.ts_type[i] = TIMESTAMP_NOT_AVAILABLE
        elif view[pos + _MAGIC + 1] & 0x08:
            out.ts_type[i] = TIMESTAMP_LOG_APPEND_TIME
        else:
            out.ts_type[i] = TIMESTAMP_CREATE_TIME
    return out


def _refuse(reason, at, topic, partition):
    raise DecodeError(f"{topic}-{partition}: {reason}", int(at))


def _check_order(batches, offsets, topic, partition, previous_offset, next_segment):
    """Offsets that go forward, batch by batch and record by record (see the module's
    docstring), or a DecodeError at the first batch that does not."""
    first, last, at = batches.first_offset, batches.last_offset, batches.at
    if not len(first):
        return
    lo, hi = np.iinfo(np.int64).min, np.iinfo(np.int64).max  # (a file's name may say more)
    before = np.empty_like(last)  # the last offset before each batch
    before[0] = lo if previous_offset is None else min(max(previous_offset, lo), hi)
    if next_segment is not None and next_segment > hi:
        next_segment = None
    before[1:] = last[:-1]
    bad = np.flatnonzero((first <= before) | (last < first))
    if bad.size:
        i = bad[0]
        if last[i] < first[i]:
            what = f"the batch says its offsets run from {first[i]} back to {last[i]}"
        else:
            what = (
                f"a batch of offsets {first[i]} to {last[i]} comes after offset {before[i]}: "
                "batches out of order or overlapping"
            )
        _refuse(what, at[i], topic, partition)
    if next_segment is not None and last[-1] >= next_segment:
        i = int(np.argmax(last >= next_segment))
        _refuse(
            f"a batch of offsets {first[i]} to {last[i]} reaches the next segment, which "
            f"starts at offset {next_segment}",
            at[i],
            topic,
            partition,
        )
    if not len(offsets):
        return
    ends = np.cumsum(batches.rows)
    full = np.flatnonzero(batches.rows)
    starts = ends - batches.rows
    outside = (offsets[starts[full]] < first[full]) | (offsets[ends[full] - 1] > last[full])
    backwards = offsets[1:] <= offsets[:-1]
    if outside.any() or backwards.any():
        row = int(np.flatnonzero(backwards)[0]) + 1 if backwards.any() else None
        i = int(np.searchsorted(ends, row, side="right")) if row is not None else None
        j = int(full[np.flatnonzero(outside)[0]]) if outside.any() else None
        if i is None or (j is not None and j <= i):
            _refuse(
                f"a record of the batch of offsets {first[j]} to {last[j]} lies outside them",
                at[j],
                topic,
                partition,
            )
        _refuse(
            f"record offset {offsets[row]} comes after {offsets[row - 1]} in the batch of "
            f"offsets {first[i]} to {last[i]}",
            at[i],
            topic,
            partition,
        )


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
    decompressed_budget=None,
    previous_offset=None,
    next_segment=None,
):
    """The rows of the whole record batches in `data`: (pyarrow.RecordBatch of SCHEMA,
    next_offset, tail). See the module's docstring."""
    cols = read_columns(
        data,
        check_crc=check_crc,
        max_decompressed=max_decompressed,
        decompressed_budget=decompressed_budget,
    )
    tail = cols.tail
    view = data if isinstance(data, (bytes, bytearray)) else memoryview(data).cast("B")
    batches = _walk(view, len(view) - len(tail), check_crc, max_decompressed)
    next_offset = int(batches.last_offset[-1]) + 1 if len(batches.rows) else None
    n = len(cols)
    _check_order(batches, cols.offset, topic, partition, previous_offset, next_segment)
    if read_committed and batches.txn.any():
        if not isinstance(aborted_transactions, AbortedTransactions):
            aborted_transactions = AbortedTransactions(aborted_transactions)
        aborted_transactions.drop(batches, cols)

    counts = batches.rows
    offsets = cols.offset
    keep = None
    if not batches.keep.all():
        keep = np.repeat(batches.keep, counts)
    if start_offset is not None and n and offsets[0] < start_offset:
        keep = (offsets >= start_offset) if keep is None else keep & (offsets >= start_offset)
    if end_offset is not None and n and offsets[-1] >= end_offset:
        keep = (offsets < end_offset) if keep is None else keep & (offsets < end_offset)

    types = batches.ts_type
    if len(types) and (types == types[0]).all():
        ts_type = np.full(n, types[0], dtype=np.int32)
    else:
        ts_type = np.repeat(types, counts).astype(np.int32)

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

"""One partition's log, in memory: record batches (magic 2) kept as received, with the offsets
the log assigns written into their base offset field, a log start offset and a log end.

A plain object: `append` takes a Produce request's `records` bytes, `read` gives the bytes a
Fetch answers with, `offset_for` answers ListOffsets, `delete_before` is DeleteRecords. One
replica, so the high watermark is the log end. Errors are `LogError`s carrying Kafka's error
name, which the handlers put in their answers.
"""

import bisect
import struct
from array import array

from .. import records
from ..errors import DecodeError
from .._batches import HEADER, HEADER_SIZE
from .._wire import BATCH_CRC_START, BATCH_OFFSETS

_BASE_OFFSET = struct.Struct(">q")
_EPOCH = struct.Struct(">i")
_EPOCH_AT = BATCH_OFFSETS["partition_leader_epoch"]
_ATTRS_CONTROL = 0x20
_ATTRS_TRANSACTIONAL = 0x10
_ATTRS_LOG_APPEND_TIME = 0x08
_MAX_TIMESTAMP_AT = BATCH_OFFSETS["max_timestamp"]
_CRC_AT = BATCH_OFFSETS["crc"]
_LAST_DELTA_AT = BATCH_OFFSETS["last_offset_delta"]
_LAST_DELTA = struct.Struct(">i")
_CRC = struct.Struct(">I")
_INT64 = struct.Struct(">q")

# ListOffsets' special timestamps (Kafka's ListOffsetsRequest).
LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4  # KIP-405: without tiered storage, the log start
LATEST_TIERED = -5  # KIP-1005: nothing is tiered here
NO_TIMESTAMP = -1

DEFAULT_MAX_MESSAGE_BYTES = 1048588  # Kafka's max.message.bytes
# A batch at least this big, most of the (immutable) request frame it came in, is kept as
# a view of that frame, its base offset and leader epoch written in as it is read: no
# copy. Smaller ones are copied (a view and its frame would outweigh their bytes).
KEEP_VIEW_MIN = 4096
# A transaction marker's key (version, type) and value (version, coordinator epoch).
_MARKER_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")
_ABORT, _COMMIT = 0, 1


class LogError(Exception):
    """An append, read or listing the log refuses; `.error` is Kafka's error name."""

    def __init__(self, error, text):
        super().__init__(text)
        self.error = error


def _marker_type(batch):
    """COMMIT or ABORT: a control batch's marker type (its first record's key)."""
    (control,) = records.read_batches(batch, check_crc=False)
    key = control.records[0].key if control.records else None
    return _MARKER_KEY.unpack_from(key)[1] if key and len(key) >= 4 else _COMMIT


def _with_head(view, base, epoch):
    """The pieces of a batch kept as a view of its frame, with its base offset and leader
    epoch (fields the CRC does not cover)."""
    return (_BASE_OFFSET.pack(base), view[8:_EPOCH_AT], _EPOCH.pack(epoch), view[_EPOCH_AT + 4 :])


class BatchHead:
    """What the log needs of a batch's header, read without decompressing it."""

    __slots__ = (
        "size",
        "attributes",
        "last_offset_delta",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "count",
    )

    @property
    def is_transactional(self):
        return bool(self.attributes & _ATTRS_TRANSACTIONAL)

    @property
    def is_control(self):
        return bool(self.attributes & _ATTRS_CONTROL)

    @property
    def last_sequence(self):
        # Sequences wrap at int32's maximum (Kafka's DefaultRecordBatch.incrementSequence).
        return (self.base_sequence + self.last_offset_delta) % (1 << 31)


def read_batch_head(data, max_bytes=DEFAULT_MAX_MESSAGE_BYTES, allow_empty=False):
    """The BatchHead of `data`, which must be exactly one magic 2 batch whose CRC is right and
    whose size is at most `max_bytes`; LogError naming what is wrong otherwise. A batch of
    no records is one only with `allow_empty` (compaction keeps such batches in the log)."""
    n = len(data)
    if n < HEADER_SIZE:
        raise LogError(
            "CORRUPT_MESSAGE",
            f"records of {n} bytes are shorter than a record batch header ({HEADER_SIZE})",
        )
    (_, length, _, magic, crc, attrs, last_delta, _, max_ts, pid, epoch, base_seq, count) = (
        HEADER.unpack_from(data, 0)
    )
    if magic != 2:
        raise LogError("INVALID_RECORD", f"record batches must be magic 2, this one is {magic}")
    if length + 12 != n:
        if length + 12 < n:
            raise LogError(
                "INVALID_RECORD",
                "Produce v3+ must carry exactly one record batch per partition "
                f"(the first ends at byte {length + 12} of {n})",
            )
        raise LogError("CORRUPT_MESSAGE", f"the batch length says {length + 12} bytes, {n} arrived")
    if n > max_bytes:
        raise LogError(
            "MESSAGE_TOO_LARGE", f"a batch of {n} bytes is over max.message.bytes ({max_bytes})"
        )
    actual = records.crc32c(memoryview(data)[BATCH_CRC_START:])
    if actual != crc:
        raise LogError(
            "CORRUPT_MESSAGE",
            f"CRC32C mismatch: the batch says {crc:#010x}, its bytes give {actual:#010x}",
        )
    if count < (0 if allow_empty else 1) or last_delta < 0 or count - 1 > last_delta:
        raise LogError(
            "INVALID_RECORD",
            f"a batch of {count} records with last offset delta {last_delta} is not valid",
        )
    head = BatchHead()
    head.size = n
    head.attributes = attrs
    head.last_offset_delta = last_delta
    head.max_timestamp = max_ts
    head.producer_id = pid
    head.producer_epoch = epoch
    head.base_sequence = base_seq
    head.count = count
    return head


class PartitionLog:
    """The batches of one partition, in offset order."""

    __slots__ = (
        "log_start",
        "log_end",
        "_bases",
        "_batches",
        "_batch_epochs",
        "_max_ts",
        "bytes",
        "leader_epoch",
        "epochs",
        "ongoing",
        "aborted",
        "store",
    )

    def __init__(self, leader_epoch=0):
        self.ongoing = {}  # producer id -> first offset of its open transaction here
        self.aborted = []  # (producer id, first offset, marker offset) of aborted ones
        self.log_start = 0
        self.log_end = 0  # the next offset to assign
        self._bases = array("q")  # each batch's base offset (8 bytes each, not an int object)
        self._batches = []  # each batch's bytes, base offset written in (or a frame's view)
        self._batch_epochs = array("i")  # the leader epoch each was appended in
        self._max_ts = array("q")  # each batch's max timestamp
        self.bytes = 0
        self.leader_epoch = leader_epoch
        self.epochs = [(leader_epoch, 0)]  # (epoch, its start offset): the epoch cache
        self.store = None  # the segment files on disk (None: in memory only)

    def new_leader_epoch(self):
        """A new leader: the next epoch starts at the log end (Kafka's leader epoch cache;
        an epoch in which nothing was written gives way to the next)."""
        self.leader_epoch += 1
        if self.epochs and self.epochs[-1][1] == self.log_end:
            self.epochs.pop()
        self.epochs.append((self.leader_epoch, self.log_end))
        if self.store is not None:
            self.store.write_epochs(self.epochs)

    def end_offset_for(self, epoch):
        """OffsetForLeaderEpoch: (the largest epoch at or below `epoch`, where it ends) as
        Kafka's LeaderEpochFileCache.endOffsetFor answers; (-1, -1) past the current one."""
        if epoch == self.leader_epoch:
            return epoch, self.log_end
        starts = [e for e, _ in self.epochs]
        i = bisect.bisect_right(starts, epoch)
        if i == len(self.epochs):
            return -1, -1
        higher_start = self.epochs[i][1]
        if i == 0:
            return epoch, higher_start
        return self.epochs[i - 1][0], higher_start

    @property
    def high_watermark(self):
        return self.log_end  # one replica: everything appended is committed

    @property
    def last_stable_offset(self):
        """Where read_committed stops: the first offset of the oldest open transaction (not
        before the log start, which DeleteRecords may have moved past it)."""
        return max(min(self.ongoing.values(), default=self.high_watermark), self.log_start)

    def __len__(self):
        return len(self._batches)

    def append(self, head, data, now_ms=None, log_append_time=False):
        """Append one batch whose `head` was read by read_batch_head; returns its base offset.
        With `log_append_time`, the batch's max timestamp becomes `now_ms` and its
        timestamp type LogAppendTime (the CRC is computed again, as Kafka does)."""
        base = self.log_end
        max_ts = head.max_timestamp
        if log_append_time:
            max_ts = now_ms
            batch = bytearray(data)
            _BASE_OFFSET.pack_into(batch, 0, base)
            _EPOCH.pack_into(batch, _EPOCH_AT, self.leader_epoch)
            attrs_at = BATCH_CRC_START
            struct.pack_into(">h", batch, attrs_at, head.attributes | _ATTRS_LOG_APPEND_TIME)
            _INT64.pack_into(batch, _MAX_TIMESTAMP_AT, max_ts)
            _CRC.pack_into(batch, _CRC_AT, records.crc32c(memoryview(batch)[BATCH_CRC_START:]))
            batch = bytes(batch)
        elif (
            self.store is None
            and type(data) is memoryview
            and data.readonly
            and type(data.obj) is bytes
            and len(data) >= KEEP_VIEW_MIN
            and len(data.obj) - len(data) <= len(data) >> 3
        ):  # a view of the frame, which nothing can change: its head is written at reads
            batch = memoryview(data)
        else:  # one copy (Produce's records are a view of its frame), in one allocation
            with memoryview(data) as view:
                batch = b"".join(
                    (
                        _BASE_OFFSET.pack(base),
                        view[8:_EPOCH_AT],
                        _EPOCH.pack(self.leader_epoch),
                        view[_EPOCH_AT + 4 :],
                    )
                )
        self._bases.append(base)
        self._batches.append(batch)
        self._batch_epochs.append(self.leader_epoch)
        self._max_ts.append(max_ts)
        self.bytes += len(batch)
        self.log_end = base + head.last_offset_delta + 1
        if head.is_transactional and not head.is_control:
            self.ongoing.setdefault(head.producer_id, base)
        if self.store is not None:
            self.store.append(base, self.log_end - 1, batch, max_ts)
        return base

    def restore(self, batches, end, epochs=None, start=None):
        """Take back the batches a store recovered, [(base offset, last offset, bytes)], the
        log end it found and the leader epochs it kept; the transactions they leave open or aborted are found as
        the appends found them. `start`: its first segment's base (a compacted segment's
        first batch may come later). Returns the BatchHead of each (for the producer state)."""
        heads = []
        for base, last, batch in batches:
            head = read_batch_head(batch, len(batch), allow_empty=True)
            self._bases.append(base)
            self._batches.append(batch)
            self._batch_epochs.append(_EPOCH.unpack_from(batch, _EPOCH_AT)[0])
            self._max_ts.append(head.max_timestamp)
            self.bytes += len(batch)
            self.log_end = last + 1
            if head.is_control:
                first = self.ongoing.pop(head.producer_id, None)
                if first is not None and _marker_type(batch) == _ABORT:
                    self.aborted.append((head.producer_id, first, base))
            elif head.is_transactional:
                self.ongoing.setdefault(head.producer_id, base)
            heads.append((head, base))
        self.log_start = batches[0][0] if batches else end
        if start is not None and batches:
            self.log_start = min(max(start, 0), self.log_start)
        self.log_end = max(self.log_end, end)
        if not epochs:  # as Kafka rebuilds its epoch cache: where each epoch's batches start
            epochs = []
            for base, _, batch in batches:
                (epoch,) = _EPOCH.unpack_from(batch, _EPOCH_AT)
                if not epochs or epoch > epochs[-1][0]:
                    epochs.append((epoch, base))
        if epochs:
            self.epochs = list(epochs)
            self.leader_epoch = max(self.leader_epoch, self.epochs[-1][0])
        return heads

    def replace_cleaned(self, count, batches):
        """Compaction: the first `count` batches become `batches`, [(base offset, bytes,
        max timestamp)] in offset order, below the next batch kept (offsets keep their
        places: gaps where records went). The store is told apart (SegmentFiles.replace)."""
        self.bytes -= sum(len(b) for b in self._batches[:count])
        del self._bases[:count], self._batches[:count], self._max_ts[:count]
        del self._batch_epochs[:count]
        self._bases[0:0] = array("q", [b[0] for b in batches])
        self._batches[0:0] = [b[1] for b in batches]
        self._max_ts[0:0] = array("q", [b[2] for b in batches])
        self._batch_epochs[0:0] = array(
            "i", [_EPOCH.unpack_from(b[1], _EPOCH_AT)[0] for b in batches]
        )
        self.bytes += sum(len(b[1]) for b in batches)

    def write_marker(self, producer_id, epoch, commit, now_ms, coordinator_epoch=0):
        """End a transaction here: a control batch (COMMIT or ABORT) of `producer_id`,
        as the transaction coordinator writes it; returns its offset."""
        data = bytearray(
            records.write_batch(
                [
                    records.Record(
                        timestamp=now_ms,
                        key=_MARKER_KEY.pack(0, _COMMIT if commit else _ABORT),
                        value=_MARKER_VALUE.pack(0, coordinator_epoch),
                    )
                ],
                producer_id=producer_id,
                producer_epoch=epoch,
                base_sequence=-1,
                is_transactional=True,
            )
        )
        attrs_at = BATCH_CRC_START
        (attrs,) = struct.unpack_from(">h", data, attrs_at)
        struct.pack_into(">h", data, attrs_at, attrs | _ATTRS_CONTROL)
        _CRC.pack_into(data, _CRC_AT, records.crc32c(memoryview(data)[BATCH_CRC_START:]))
        data = bytes(data)
        offset = self.append(read_batch_head(data), data)
        first = self.ongoing.pop(producer_id, None)
        if first is not None and not commit:
            self.aborted.append((producer_id, first, offset))
        return offset

    def aborted_in(self, start, end):
        """(producer id, first offset) of the aborted transactions with records in
        [start, end): what a read_committed Fetch of that range must skip."""
        return [(pid, first) for pid, first, last in self.aborted if first < end and last >= start]

    def _first_batch_at(self, offset):
        """Index of the batch holding `offset` (or the first after it)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        if i < 0:
            return 0
        if self._last_offset(i) < offset:
            return i + 1
        return i

    def _last_offset(self, i):
        """Batch i's last offset, as its header says (compaction leaves gaps after it: a
        read from an offset in one starts at the next batch, as Kafka's)."""
        return self._bases[i] + _LAST_DELTA.unpack_from(self._batches[i], _LAST_DELTA_AT)[0]

    def check_offset(self, offset):
        if not self.log_start <= offset <= self.log_end:
            raise LogError(
                "OFFSET_OUT_OF_RANGE",
                f"offset {offset} is outside the log ({self.log_start} to {self.log_end})",
            )

    def read(self, offset, max_bytes, min_one=True, upto=None):
        """The whole batches from the one holding `offset` on, at most `max_bytes` of them,
        but the first batch whatever its size when `min_one` (Kafka's KIP-74 rule), and
        none that starts at or past `upto` (read_committed: the last stable offset); LogError
        OFFSET_OUT_OF_RANGE outside log start to log end."""
        return b"".join(self.read_pieces(offset, max_bytes, min_one, upto)[0])

    def read_pieces(self, offset, max_bytes, min_one=True, upto=None):
        """read()'s bytes as (pieces, their size): the batches as the log holds them, not
        joined (a Fetch answer writes them one after another)."""
        self.check_offset(offset)
        out = []
        size = 0
        for i in range(self._first_batch_at(offset), len(self._batches)):
            if upto is not None and self._bases[i] >= upto:
                break
            batch = self._batches[i]
            if size + len(batch) > max_bytes and not (min_one and not size):
                break
            if type(batch) is memoryview:  # kept as its frame has it: its head written here
                out += _with_head(batch, self._bases[i], self._batch_epochs[i])
            else:
                out.append(batch)
            size += len(batch)
        return out, size

    def _batch(self, i):
        """Batch i's bytes, its base offset and leader epoch in them."""
        batch = self._batches[i]
        if type(batch) is memoryview:
            return b"".join(_with_head(batch, self._bases[i], self._batch_epochs[i]))
        return batch

    def available(self, offset):
        """Bytes a read from `offset` could return (0 outside the log)."""
        if not self.log_start <= offset < self.log_end:
            return 0
        return sum(len(b) for b in self._batches[self._first_batch_at(offset) :])

    def offset_for(self, timestamp):
        """ListOffsets: (offset, timestamp) for a timestamp or one of the special values;
        (-1, -1) when no record has a timestamp at or after it."""
        if timestamp == LATEST:
            return self.log_end, NO_TIMESTAMP
        if timestamp in (EARLIEST, EARLIEST_LOCAL):
            return self.log_start, NO_TIMESTAMP
        if timestamp == LATEST_TIERED:
            return -1, NO_TIMESTAMP
        if timestamp == MAX_TIMESTAMP:
            return self._max_timestamp()
        if timestamp < 0:
            raise LogError("INVALID_REQUEST", f"timestamp {timestamp} is not a valid target")
        for i in range(self._first_batch_at(self.log_start), len(self._batches)):
            if self._max_ts[i] >= timestamp:
                for offset, ts in self._timestamps(i):
                    if offset >= self.log_start and ts >= timestamp:
                        return offset, ts
        return -1, NO_TIMESTAMP

    def _timestamps(self, i):
        """(offset, timestamp) of each record of batch i (it is decompressed for this)."""
        try:
            (batch,) = records.read_batches(self._batch(i), check_crc=False)
        except ImportError as e:  # a compressed batch without cramjam installed
            raise LogError(
                "UNKNOWN_SERVER_ERROR", f"batch at offset {self._bases[i]}: {e}"
            ) from None
        except DecodeError as e:  # its CRC held, but its records do not read
            raise LogError("CORRUPT_MESSAGE", f"batch at offset {self._bases[i]}: {e}") from None
        if batch.timestamp_type == 1:  # LogAppendTime: every record has the batch's time
            return [(r.offset, batch.max_timestamp) for r in batch.records]
        return [(r.offset, r.timestamp) for r in batch.records]

    def _max_timestamp(self):
        """The record with the largest timestamp (the first such), as Kafka 3.8+ answers."""
        best, best_i = None, None
        for i in range(self._first_batch_at(self.log_start), len(self._batches)):
            if best is None or self._max_ts[i] > best:
                best, best_i = self._max_ts[i], i
        if best_i is None:
            return -1, NO_TIMESTAMP
        for offset, ts in self._timestamps(best_i):
            if offset >= self.log_start and ts == best:
                return offset, ts
        return self._bases[best_i], best

    def delete_before(self, offset):
        """DeleteRecords: the log starts at `offset` (-1: the high watermark); returns the new
        log start. Batches wholly before it are dropped."""
        if offset == -1:
            offset = self.high_watermark
        if not 0 <= offset <= self.high_watermark:
            raise LogError(
                "OFFSET_OUT_OF_RANGE",
                f"cannot delete before offset {offset}: the high watermark is "
                f"{self.high_watermark}",
            )
        self._start_at(offset)
        return self.log_start

    def _start_at(self, offset):
        """The log starts at `offset` (if later than now): the batches wholly before go."""
        if offset > self.log_start:
            self.log_start = offset
            drop = self._first_batch_at(offset)
            if drop and self._last_offset(drop - 1) < offset:
                self.bytes -= sum(len(b) for b in self._batches[:drop])
                del self._bases[:drop], self._batches[:drop], self._max_ts[:drop]
                del self._batch_epochs[:drop]
            self.aborted = [a for a in self.aborted if a[2] >= offset]
            if self.store is not None:
                self.store.log_start_moved(offset, self.log_end)

    def retain(self, retention_bytes, retention_ms, now_ms):
        """Retention (Kafka's retention.bytes and retention.ms, -1: no limit): whole units
        from the start (segments on disk, batches in memory) go while the log stays at least
        `retention_bytes` without them, or while their newest timestamp is more than
        `retention_ms` old; the log start moves to the first unit kept. Returns the new log
        start."""
        if self.store is not None:
            units = [(s.base, s.size, s.max_ts) for s in self.store.segments if s.size]
        else:
            units = list(zip(self._bases, map(len, self._batches), self._max_ts))
        size = sum(u[1] for u in units)
        drop = 0
        for _, unit_size, max_ts in units:
            by_size = retention_bytes >= 0 and size - unit_size >= retention_bytes
            by_time = retention_ms >= 0 and now_ms - max_ts > retention_ms
            if not (by_size or by_time):
                break
            size -= unit_size
            drop += 1
        if drop:
            self._start_at(units[drop][0] if drop < len(units) else self.log_end)
        return self.log_start

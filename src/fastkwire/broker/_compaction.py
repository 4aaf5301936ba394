"""Log compaction, as Kafka 4.0's log cleaner does it where a client can tell
(LogCleaner, Cleaner, LogCleanerManager).

A partition of a topic whose `cleanup.policy` has `compact` keeps, below its cleanable
point, only the latest record of each key:

- The dirty part starts where the last pass ended (Kafka's cleaner-offset-checkpoint, the
  log start at first) and the cleanable part ends at the first segment that cannot be
  cleaned: the active one (the last: `segment.bytes` rolls it), the one holding the last
  stable offset, the first whose newest timestamp is less than `min.compaction.lag.ms` old.
  A pass runs when the cleanable bytes are more than `min.cleanable.dirty.ratio` of the
  clean and cleanable bytes together, or when a dirty segment's first batch is more than
  `max.compaction.lag.ms` old.
- The latest offset of each key is taken from the cleanable dirty part (aborted
  transactions' records not counted); then every batch from the log start to its end is
  filtered: a record stays when it is the latest of its key (keys the dirty part does not
  hold stay as they are); a record without a key goes; a tombstone (a null value) stays
  until its batch's delete horizon, set at the first pass that keeps it to the pass's time
  plus `delete.retention.ms` (the batch's base timestamp, attribute bit 0x40, as Kafka).
- Offsets stay: the batches kept keep their base and last offsets, producer id, epoch,
  base sequence, leader epoch and compression; an emptied batch goes, unless it is its
  producer's last (kept empty: the producer's sequence survives a reload) or the pass's last
  (the log's last offset survives). Aborted transactions' records go, and so do their
  markers once no batch of theirs is left; a commit marker goes once no batch of its
  transaction is left, past its delete horizon.

Segments in memory are the batches grouped by `segment.bytes` as a log directory would roll
them (from the dirty point on; a pass groups the cleaned part again, as Kafka groups the
cleaned segments); with a log directory they are the segment files, which a pass rewrites
(`SegmentFiles.replace`). Produce refuses records without a key on a compacted topic
(`check_keys`: INVALID_RECORD, as Kafka's LogValidator).
"""

import bisect
import hashlib
import logging
import os
import struct

from .. import _compression, records
from .._batches import HEADER, HEADER_SIZE
from .._wire import BATCH_CRC_START
from ._log import LogError
from ._segment_files import read_offset_checkpoint, write_checkpoint

DEFAULT_BACKOFF_MS = 15_000  # Kafka's log.cleaner.backoff.ms
CHECKPOINT_FILE = "cleaner-offset-checkpoint"  # Kafka's: the first dirty offset of each log
_DELETE_HORIZON = 0x40  # attributes: the base timestamp is the tombstones' delete horizon
_CONTROL = 0x20
_TRANSACTIONAL = 0x10
_LOG_APPEND_TIME = 0x08
_log = logging.getLogger("fastkwire.broker")
_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAP_KEY_MAX = 64  # longer keys are held in the offset map as their hash
_NO_LAG = "9223372036854775807"  # max.compaction.lag.ms's default: never due by time


def check_keys(data, topic, index):
    """Produce on a compacted topic: LogError INVALID_RECORD (with `record_errors`, the
    indexes of the records without a key) when a record of the batch `data` has none."""
    try:
        (batch,) = records.read_batches(data, check_crc=False)
    except ImportError:  # compressed, and cramjam is not installed: kept unchecked (a
        return  # pass then leaves the partition as it is, saying why)
    except ValueError as e:
        raise LogError("CORRUPT_MESSAGE", f"the batch's records do not read: {e}") from None
    if batch.is_control:
        return
    where = f"{topic}-{index}"
    missing = [i for i, r in enumerate(batch.records) if r.key is None]
    if missing:
        text = f"Compacted topic cannot accept message without key in topic partition {where}."
        errors = [(i, text) for i in missing]
        e = LogError(
            "INVALID_RECORD",
            f"One or more records have been rejected due to {len(errors)} record errors in "
            "total, and only showing the first three errors at most: "
            + "["
            + ", ".join(f"RecordError(batchIndex={i}, message='{m}')" for i, m in errors[:3])
            + "]",
        )
        e.record_errors = errors
        raise e


# ---------------------------------------------------------------- batches


class _Batch:
    """A batch of the log as the cleaner sees it: its header, its records read on demand."""

    __slots__ = (
        "base",
        "data",
        "attrs",
        "last",
        "first_ts",
        "max_ts",
        "pid",
        "epoch",
        "seq",
    )

    def __init__(self, base, data):
        (_, _, _, _, _, attrs, delta, first_ts, max_ts, pid, epoch, seq, _) = HEADER.unpack_from(
            data, 0
        )
        self.base, self.data, self.attrs = base, data, attrs
        self.last = base + delta
        self.first_ts, self.max_ts = first_ts, max_ts
        self.pid, self.epoch, self.seq = pid, epoch, seq

    @property
    def is_control(self):
        return bool(self.attrs & _CONTROL)

    @property
    def is_transactional(self):
        return bool(self.attrs & _TRANSACTIONAL)

    @property
    def horizon(self):
        """The delete horizon (ms) or None."""
        return self.first_ts if self.attrs & _DELETE_HORIZON else None

    def records(self):
        (batch,) = records.read_batches(self.data, check_crc=False)
        return batch.records


def _varint(out, n):
    n = (n << 1) ^ (n >> 63)  # zigzag
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _sized(out, value):
    if value is None:
        out.append(1)  # zigzag(-1)
    else:
        _varint(out, len(value))
        out += value


def _rewrite(batch, kept, horizon):
    """`batch` holding only the records `kept`, its offsets, producer fields, leader epoch
    and compression as they were (its last offset delta too: the producer's last sequence
    stays), the base timestamp `horizon` when one is set (with the attribute bit), else the
    first record's. records.write_batch cannot be used here: its base timestamp is always
    the first record's."""
    data = batch.data
    (_, _, leader_epoch, _, _, attrs, delta, *_rest) = HEADER.unpack_from(data, 0)
    append_time = attrs & _LOG_APPEND_TIME
    if not kept:  # Kafka's DefaultRecordBatch.writeEmptyHeader
        base_ts = -1
        max_ts = batch.max_ts
        body = b""
        attrs &= ~_DELETE_HORIZON & 0xFFF8  # no records: no codec
    else:
        # a LogAppendTime batch's records read as their batch's time (Kafka's reader)
        stamps = [batch.max_ts if append_time else r.timestamp for r in kept]
        if horizon is not None and not _fits(stamps, horizon):
            horizon = None  # a record's time too far before it: its tombstones stay
        if horizon is not None:
            base_ts = horizon
        elif _fits(stamps, stamps[0]):
            base_ts = stamps[0]
        else:  # records far apart in time: the batch's own base, which all of them fit
            base_ts = batch.first_ts
        max_ts = max(stamps)
        body = bytearray()
        rec = bytearray()
        for r, ts in zip(kept, stamps):
            rec.clear()
            rec.append(0)
            _varint(rec, ts - base_ts)
            _varint(rec, r.offset - batch.base)
            _sized(rec, r.key)
            _sized(rec, r.value)
            _varint(rec, len(r.headers))
            for name, value in r.headers:
                _sized(rec, name.encode())
                _sized(rec, value)
            _varint(body, len(rec))
            body += rec
        codec = _compression.CODECS[attrs & 0x07]
        if codec != "none":
            body = _compression.compress(codec, bytes(body))
        attrs = attrs | _DELETE_HORIZON if horizon is not None else attrs & ~_DELETE_HORIZON
    out = bytearray(
        HEADER.pack(
            batch.base,
            HEADER_SIZE - 12 + len(body),
            leader_epoch,
            2,
            0,
            attrs,
            delta,
            base_ts,
            max_ts,
            batch.pid,
            batch.epoch,
            batch.seq,
            len(kept),
        )
    )
    out += body
    struct.pack_into(">I", out, 17, records.crc32c(memoryview(out)[BATCH_CRC_START:]))
    return bytes(out), max_ts


def _fits(stamps, base_ts):
    """Whether every record's timestamp delta from `base_ts` is an int64 (a varlong a
    reader takes: Kafka's arithmetic wraps, readers here refuse what does not fit)."""
    return _INT64_MIN <= min(stamps) - base_ts and max(stamps) - base_ts <= _INT64_MAX


class _Transactions:
    """Kafka's CleanedTransactionMetadata: which batches belong to aborted transactions,
    and which markers may go."""

    def __init__(self, aborted):
        self._aborted = sorted(aborted, key=lambda a: a[1])  # (pid, first, marker offset)
        self._next = 0
        self._ongoing_aborted = {}  # pid -> [aborted entry, a batch of it seen]
        self._ongoing_committed = set()

    def _consume_up_to(self, offset):
        while self._next < len(self._aborted) and self._aborted[self._next][1] <= offset:
            entry = self._aborted[self._next]
            self._ongoing_aborted.setdefault(entry[0], [entry, False])
            self._next += 1

    def on_batch(self, batch):
        """A data batch: True when it belongs to an aborted transaction."""
        self._consume_up_to(batch.last)
        if not batch.is_transactional:
            return False
        aborted = self._ongoing_aborted.get(batch.pid)
        if aborted is not None:
            aborted[1] = True
            return True
        self._ongoing_committed.add(batch.pid)
        return False

    def on_control(self, batch, marker):
        """A marker ("abort", "commit", None when emptied): True when it may go."""
        self._consume_up_to(batch.last)
        if marker == "abort":
            aborted = self._ongoing_aborted.pop(batch.pid, None)
            return aborted is None or not aborted[1]  # kept until its batches are gone
        if marker == "commit":
            if batch.pid in self._ongoing_committed:
                self._ongoing_committed.discard(batch.pid)
                return False
            return True
        return marker is None  # an emptied marker may go; an unknown type stays


# ---------------------------------------------------------------- a partition


class _Segment:
    __slots__ = ("base", "lo", "hi", "size", "max_ts", "first_batch_ts")

    def __init__(self, base, lo, hi, size, max_ts, first_batch_ts):
        self.base, self.lo, self.hi = base, lo, hi  # its batches: indexes lo to hi (excl.)
        self.size, self.max_ts, self.first_batch_ts = size, max_ts, first_batch_ts


def _group(log, lo, hi, segment_bytes):
    """Batches lo..hi of `log` as segments rolled by `segment_bytes` (in memory)."""
    out = []
    for i in range(lo, hi):
        size = len(log._batches[i])
        seg = out[-1] if out else None
        if seg is None or (seg.size and seg.size + size > segment_bytes):
            seg = _Segment(log._bases[i], i, i, 0, -1, log._max_ts[i])
            out.append(seg)
        seg.hi = i + 1
        seg.size += size
        seg.max_ts = max(seg.max_ts, log._max_ts[i])
    return out


def _segments(log, first_dirty, segment_bytes):
    """The log's segments: its files' with a log directory, else the batches grouped as
    files would be, the clean part and the dirty part apart."""
    bases = log._bases
    if log.store is not None:
        out = []
        segs = log.store.segments
        for k, s in enumerate(segs):
            lo = bisect.bisect_left(bases, s.base)
            hi = bisect.bisect_left(bases, segs[k + 1].base) if k + 1 < len(segs) else len(bases)
            first_ts = log._max_ts[lo] if lo < hi else -1
            out.append(_Segment(s.base, lo, hi, s.size, s.max_ts, first_ts))
        return out or [_Segment(log.log_end, 0, len(bases), 0, -1, -1)]
    split = bisect.bisect_left(bases, first_dirty)
    segs = _group(log, 0, split, segment_bytes) + _group(log, split, len(bases), segment_bytes)
    if not segs:
        segs = [_Segment(log.log_end, 0, 0, 0, -1, -1)]
    return segs


class PassResult:
    """What one pass over a partition did."""

    def __init__(self, first_dirty, end, batches_before, batches_after, records_removed):
        self.first_dirty = first_dirty  # where the cleaned part started
        self.end = end  # the first offset not cleaned (the next pass's first dirty one)
        self.batches_before = batches_before
        self.batches_after = batches_after
        self.records_removed = records_removed

    def __repr__(self):
        return (
            f"PassResult(first_dirty={self.first_dirty}, end={self.end}, "
            f"batches {self.batches_before}->{self.batches_after}, "
            f"records removed {self.records_removed})"
        )


def _config(topic, name, kind=int):
    return kind(topic.config(name))


def cleanable_range(topic, partition, first_dirty, now_ms, force=False):
    """(first dirty offset, first uncleanable offset, segments) when the partition is due a
    pass (its dirty ratio, or max.compaction.lag.ms; `force`: any cleanable bytes), else
    None. As LogCleanerManager.cleanableOffsets and grabFilthiestCompactedLog."""
    log = partition.log
    if not len(log):
        return None
    if first_dirty is None or not log.log_start <= first_dirty <= log.log_end:
        first_dirty = log.log_start  # none yet, or no longer valid: from the log start
    segs = _segments(log, first_dirty, _config(topic, "segment.bytes"))
    bases = [s.base for s in segs]
    active = bases[-1]
    # the dirty segments but the active one: from the one holding the first dirty offset
    dirty = segs[max(bisect.bisect_right(bases, first_dirty) - 1, 0) : -1]
    uncleanable = min(log.last_stable_offset, active)
    lag = max(_config(topic, "min.compaction.lag.ms"), 0)
    if lag > 0:
        for s in dirty:
            if s.max_ts > now_ms - lag:
                uncleanable = min(uncleanable, s.base)
                break
    uncleanable = max(first_dirty, uncleanable)
    # the base of the segment holding it (Kafka's calculateCleanableBytes)
    first_uncleanable = bases[max(bisect.bisect_right(bases, uncleanable) - 1, 0)]
    clean_bytes = sum(s.size for s in segs if s.base < first_dirty)
    low = min(first_dirty, first_uncleanable)
    cleanable_bytes = sum(s.size for s in segs if low <= s.base < first_uncleanable)
    if cleanable_bytes <= 0:
        return None
    max_lag = max(_config(topic, "max.compaction.lag.ms"), 0)
    earliest = min((s.first_batch_ts for s in dirty if s.first_batch_ts > 0), default=None)
    due_now = earliest is not None and earliest < now_ms - max_lag
    ratio = cleanable_bytes / (clean_bytes + cleanable_bytes)
    if not (force or due_now or ratio > _config(topic, "min.cleanable.dirty.ratio", float)):
        return None
    return first_dirty, first_uncleanable, segs


def _first_at(log, offset):
    return bisect.bisect_left(log._bases, offset)


def clean_partition(topic, partition, first_dirty, now_ms, force=False):
    """One pass of the cleaner over `partition` (of `topic`) if it is due one (see
    cleanable_range); a PassResult, or None when it was not due."""
    found = cleanable_range(topic, partition, first_dirty, now_ms, force)
    if found is None:
        return None
    first_dirty, end, segs = found
    log = partition.log
    lo = _first_at(log, first_dirty)
    hi = _first_at(log, end)
    batches = [_Batch(log._bases[i], log._batch(i)) for i in range(hi)]
    # The offset map: the latest offset of each key of the dirty part (Kafka's
    # buildOffsetMap; aborted transactions' records not counted).
    latest = {}
    txns = _Transactions([a for a in log.aborted if a[2] >= first_dirty and a[1] < end])
    for b in batches[lo:]:
        if b.is_control:
            txns.on_control(b, _marker(b.records()))
        elif not txns.on_batch(b):
            for r in b.records():
                if r.key is not None and r.offset >= first_dirty:
                    latest[_map_key(r.key)] = r.offset
    last_of = _last_batches(log, partition)
    delete_retention = _config(topic, "delete.retention.ms")
    txns = _Transactions([a for a in log.aborted if a[1] < end])
    kept = []  # (base, bytes, max timestamp)
    removed = 0
    for b in batches:
        recs = b.records()  # decoded once a batch, not held past it
        if b.is_control:
            can_discard = txns.on_control(b, _marker(recs))
        else:
            can_discard = txns.on_batch(b)
        if b.is_control:
            horizon = b.horizon
            discard_records = can_discard and horizon is not None and horizon <= now_ms
        else:
            discard_records = can_discard
        retain_empty = (b.pid >= 0 and last_of.get(b.pid) == b.last) or b.last + 1 == end
        if discard_records and not retain_empty:
            removed += len(recs)
            continue
        if discard_records:
            keep = []
        elif b.is_control:
            keep = recs
        else:
            keep = [r for r in recs if _keep(r, latest, b.horizon, now_ms)]
        removed += len(recs) - len(keep)
        if keep:
            tombstones = any(r.value is None for r in keep) and not b.is_control
            set_horizon = (tombstones or (can_discard and b.is_control)) and b.horizon is None
            if len(keep) == len(recs) and not set_horizon:
                kept.append((b.base, b.data, b.max_ts))
                continue
            # saturated: delete.retention.ms may be up to int64's maximum (then: never)
            horizon = min(now_ms + delete_retention, _INT64_MAX) if set_horizon else b.horizon
            data, max_ts = _rewrite(b, keep, horizon)
            kept.append((b.base, data, max_ts))
        elif retain_empty:
            data, max_ts = _rewrite(b, [], None)
            kept.append((b.base, data, max_ts))
    # The cleaned batches replace those before `end` (Kafka keeps the aborted transactions
    # whose marker stays in the cleaned segment's transaction index).
    gone_markers = {b.base for b in batches} - {k[0] for k in kept}
    log.aborted = [a for a in log.aborted if a[2] not in gone_markers]
    groups = _regroup(kept, log, segs, end, _config(topic, "segment.bytes"))
    log.replace_cleaned(hi, kept)
    if log.store is not None:
        log.store.replace(end, groups)
    return PassResult(first_dirty, end, hi, len(kept), removed)


def _timed(topic):
    """Whether time alone can make a partition of `topic` due a pass."""
    return (
        _config(topic, "min.compaction.lag.ms") > 0
        or topic.config("max.compaction.lag.ms") != _NO_LAG
    )


def _map_key(key):
    """A key as the offset map holds it: one of more than 64 bytes as a 128-bit hash (an
    int: never equal to a key's bytes), as Kafka's SkimpyOffsetMap keeps an MD5 of each (a
    megabyte key may come from a few compressed bytes: holding every key of the dirty part
    would cost that many MB); shorter ones, most keys, as they are (hashing costs more)."""
    if len(key) <= _MAP_KEY_MAX:
        return key
    return int.from_bytes(hashlib.blake2b(key, digest_size=16).digest(), "big")


def _keep(record, latest, horizon, now_ms):
    """Cleaner.shouldRetainRecord for a data record."""
    if record.key is None:
        return False
    if record.offset < latest.get(_map_key(record.key), -1):
        return False
    return record.value is not None or horizon is None or now_ms < horizon


def _marker(recs):
    """A control batch's marker type, from its records: "abort", "commit", None (none)."""
    if not recs:
        return None
    try:
        return recs[0].control_type
    except (struct.error, AttributeError, TypeError):
        return "unknown"


def _last_batches(log, partition):
    """{producer id: last offset of the batch kept for it} of the producers the partition
    knows (Kafka's lastRecordsOfActiveProducers): its last data batch, which holds its last
    sequence, or its last marker when that marker's epoch is newer (it fences)."""
    out = {}
    markers = {}  # producer id -> (epoch, last offset) of its last marker
    for i in range(len(log) - 1, -1, -1):
        data = log._batches[i]  # the header's producer fields (a view's are written too)
        (_, _, _, _, _, attrs, delta, _, _, pid, epoch, _, _) = HEADER.unpack_from(data, 0)
        if pid < 0 or pid in out or pid not in partition.producers:
            continue
        last = log._bases[i] + delta
        if attrs & _CONTROL:
            markers.setdefault(pid, (epoch, last))
            continue
        marker = markers.get(pid)
        out[pid] = marker[1] if marker is not None and marker[0] > epoch else last
    for pid, (_, last) in markers.items():
        out.setdefault(pid, last)
    return out


def _regroup(kept, log, segs, end, segment_bytes):
    """The cleaned batches as the segments a log directory rewrites them into: the old
    segments below `end` grouped while their sizes together stay under segment.bytes
    (Kafka's groupSegmentsBySize), each group one segment named by its first one's base.
    [(segment base, [(base, last offset, bytes, max timestamp)])]."""
    olds = [s for s in segs if s.base < end]
    groups = []
    i = 0
    while i < len(olds):
        j = i + 1
        size = olds[i].size
        while j < len(olds) and size + olds[j].size <= segment_bytes:
            size += olds[j].size
            j += 1
        groups.append((olds[i].base, olds[j].base if j < len(olds) else end))
        i = j
    out = []
    k = 0
    for base, upper in groups:
        batches = []
        while k < len(kept) and kept[k][0] < upper:
            b_base, data, max_ts = kept[k]
            last = b_base + struct.unpack_from(">i", data, 23)[0]
            batches.append((b_base, last, data, max_ts))
            k += 1
        out.append((base, batches))
    return out


# ---------------------------------------------------------------- the cleaner


class LogCleaner:
    """Runs passes over the compacted partitions of `cluster`: `clean(now_ms)` cleans every
    partition due one and returns {(topic, index): PassResult}; `tick()` does it every
    `backoff_ms` (Kafka's log.cleaner.backoff.ms) on `clock` (seconds). With a log
    directory, the first dirty offsets are kept in its cleaner-offset-checkpoint."""

    def __init__(self, cluster, clock, wall_clock, backoff_ms=DEFAULT_BACKOFF_MS):
        if isinstance(backoff_ms, bool) or not isinstance(backoff_ms, int) or backoff_ms < 1:
            raise ValueError(f"log_cleaner_backoff_ms: a positive number of ms, not {backoff_ms!r}")
        self.cluster = cluster
        self.clock = clock
        self.wall_clock = wall_clock
        self.backoff_ms = backoff_ms
        self._next = None
        self.uncleanable = {}  # (topic name, index) -> why a pass over it failed
        self._uncleanable_ids = {}  # (topic name, index) -> the id of the topic it was of
        self._not_due = {}  # (topic name, index) -> what its log was when found not due
        self.first_dirty = {}  # (topic name, index) -> (topic id or None, first dirty offset)
        path = self._checkpoint_path()
        if path is not None:
            for key, offset in read_offset_checkpoint(path).items():
                self.first_dirty[key] = (None, offset)

    def _checkpoint_path(self):
        storage = self.cluster.storage
        return None if storage is None else os.path.join(storage.log_dir, CHECKPOINT_FILE)

    def tick(self):
        """Run a pass when one is due; the next one's time (clock seconds)."""
        now = self.clock()
        if self._next is None:
            self._next = now + self.backoff_ms / 1000
        elif now >= self._next:
            self._next = now + self.backoff_ms / 1000
            self.clean(int(self.wall_clock() * 1000))
        return self._next

    def clean(self, now_ms, force=False):
        done = {}
        for topic in list(self.cluster.topics.values()):
            if "compact" not in topic.config("cleanup.policy"):
                continue
            for partition in topic.partitions:
                key = (topic.name, partition.index)
                topic_id, first_dirty = self.first_dirty.get(key, (None, None))
                if topic_id is not None and topic_id != topic.id:
                    first_dirty = None  # a topic of that name made again
                if key in self.uncleanable:
                    if self._uncleanable_ids.get(key) == topic.id:
                        continue
                    del self.uncleanable[key]  # a topic of that name made again: forgotten,
                    del self._uncleanable_ids[key]  # as Kafka forgets deleted partitions
                log = partition.log
                # what the last look found not due stays so until the log or configs change
                # (the compaction lags aside: time alone makes those due)
                seen = (topic.id, log.log_start, log.log_end, len(log), str(topic.configs))
                if not force and self._not_due.get(key) == seen and not _timed(topic):
                    continue
                try:
                    result = clean_partition(topic, partition, first_dirty, now_ms, force)
                except (LogError, OSError, ValueError, ImportError, struct.error) as e:
                    # as Kafka marks a partition uncleanable: said once, left as it is
                    self.uncleanable[key] = str(e)
                    self._uncleanable_ids[key] = topic.id
                    _log.error("cannot compact %s-%d: %s", topic.name, partition.index, e)
                    continue
                if result is None:
                    self._not_due[key] = seen
                else:
                    self._not_due.pop(key, None)
                    self.first_dirty[key] = (topic.id, result.end)
                    done[key] = result
        if done:
            try:
                self._write_checkpoint()
            except OSError as e:  # the log directory: said; the next pass that cleans writes it
                _log.error("cannot write %s: %s", self._checkpoint_path(), e)
        return done

    def _write_checkpoint(self):
        path = self._checkpoint_path()
        if path is None:
            return
        topics = self.cluster.topics
        entries = [
            (name, index, offset)
            for (name, index), (_, offset) in sorted(self.first_dirty.items())
            if name in topics
        ]
        write_checkpoint(path, entries)

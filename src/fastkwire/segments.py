"""Kafka's log segments (the broker's `.log` files) read into Arrow rows.

    read_segments(paths, ...) -> pyarrow.Table         (the schema of read_kafka)
    iter_segments(paths, ...) -> iterator of pyarrow.RecordBatch, a block at a time
    plan_segments(paths, ...) -> [SegmentTask]          one per segment file, picklable
    read_task(task)           -> iterator of pyarrow.RecordBatch (what a worker runs)

A `.log` file is a partition's record batches as the broker stored them, back to back (magic
2; logs written before Kafka 0.11 may hold magic 0/1 message sets). Its name is its base
offset (20 digits); of the files beside it only the offset index (`.index`) is read, as a
checked hint of where a start offset is (`.timeindex`, `.txnindex`, `.snapshot` are not). The topic and partition come from the directory name, `topic-N` (topic names
may contain "-": the partition is after the last one).

Each path is a segment file, a partition directory, or a broker's log directory (every
partition directory in it: not `-delete`/`-future`/`-stray` ones, which are not live
partitions, nor topics whose names start with "__": `__cluster_metadata` is KRaft's own
log and `__consumer_offsets`/`__transaction_state` the broker's internal topics; name their
partition directory to read them). A path is local, a URI that pyarrow.fs knows
(`file://`, `s3://`, `gs://`, `hdfs://`, ...), or a path inside `filesystem=`.

Every batch's CRC is checked; a bad batch raises SegmentError (a DecodeError) naming the
file and the byte offset in it. A batch cut off at the end of a partition's last segment
is what a broker leaves while it writes (or after a crash, before its recovery): an error
by default, skipped with truncated="skip"; cut off anywhere else, it is always an error. So
is a last segment that turns to zeros up to its end (log.preallocate, or a batch a crash
tore): Kafka's recovery cuts it there, and truncated="skip" ends there. Offsets must go
forward, batch after batch, and stay within the segment's name and the next one's: a log
that breaks this is refused (a SegmentError naming the partition and the offsets), never
read as rows out of order, twice or outside the range. A block's compressed batches stop
after the one whose records take it to block_size decompressed bytes (docs/segments.md).

isolation_level="read_committed" reads a partition as Kafka's read_committed consumer
does: the batches of a transaction its producer aborted are dropped (the ABORT markers in
the log say which), and the rows stop at the first offset of a transaction that is still
open (no marker yet: the last stable offset). This costs a first pass over the batch
headers of the partition's segments.
"""

import os
import re
import struct
from datetime import datetime, timezone

try:
    import numpy as np
    import pyarrow as pa
    import pyarrow.fs as pafs
except ImportError as e:  # the extra names both
    raise ImportError(
        f"fastkwire.segments needs pyarrow and numpy (no {e.name}): pip install 'fastkwire[arrow]'"
    ) from None

from . import _arrow_rows  # noqa: E402 - after the extra's check
from .errors import DecodeError  # noqa: E402

__all__ = [
    "read_segments",
    "iter_segments",
    "plan_segments",
    "read_task",
    "SegmentTask",
    "SegmentError",
    "DEFAULT_BLOCK_SIZE",
]

DEFAULT_BLOCK_SIZE = 16 << 20  # bytes of a segment read and converted at a time
ISOLATION_LEVELS = ("read_uncommitted", "read_committed")
TRUNCATED = ("error", "skip")
TRUNCATED_HINT = ' (pass truncated="skip" to read up to it)'
SKIPPED_PREFIX = "__"  # internal topics (and KRaft's log) are not read from a log directory

_BATCH_START = struct.Struct(">qi")  # base offset, batch length
# base offset, length, epoch, magic, crc, attributes, last offset delta, base timestamp,
# max timestamp, producer id: the header fields the first pass reads.
_V2_HEAD = struct.Struct(">qiibIhiqqq")
_V2_HEAD_SIZE = _V2_HEAD.size + 6  # + producer epoch, base sequence: 57 bytes
HEADS_CHUNK = 1 << 20  # bytes the first pass reads at a time for the batch headers
_TRANSACTIONAL, _CONTROL = 0x10, 0x20
_TOPIC = re.compile(r"[a-zA-Z0-9._-]{1,249}")  # Kafka's legal topic names
_CONTROL_ABORT = 0


class SegmentError(DecodeError):
    """Bad bytes in a segment file: `.file` is the file, `.offset` the byte offset in it."""

    def __init__(self, reason, offset, file):
        self.file = file
        DecodeError.__init__(self, reason, offset)
        ValueError.__init__(self, f"{file}: {reason} at byte offset {offset}")

    def __reduce__(self):
        return (SegmentError, (self.reason, self.offset, self.file))


class SegmentTask:
    """One segment file to read: where it is, its partition, and what a reader needs to
    know of the rest of the partition (picklable: a distributed reader's unit of work).

    `aborted` lists the partition's aborted transactions that reach into this segment, as
    (producer_id, first_offset, marker_offset), under read_committed; `end_offset` is
    already bounded by the last stable offset there. `last` says the segment is the
    partition's last (the one a broker writes); `next_base_offset` is the next segment's
    base offset (its file name): this segment's offsets lie in [base_offset, it)."""

    __slots__ = (
        "filesystem",
        "path",
        "topic",
        "partition",
        "base_offset",
        "next_base_offset",
        "size",
        "last",
        "start_offset",
        "end_offset",
        "read_committed",
        "aborted",
        "check_crc",
        "truncated",
        "block_size",
        "max_decompressed",
    )

    def __init__(self, **fields):
        for name in self.__slots__:
            setattr(self, name, fields.get(name))

    def __reduce__(self):
        return (_task, ({n: getattr(self, n) for n in self.__slots__},))

    def __repr__(self):
        return (
            f"SegmentTask({self.topic}-{self.partition} {self.path!r}, {self.size} bytes, "
            f"offsets [{self.start_offset}, {self.end_offset}))"
        )


def _task(fields):
    return SegmentTask(**fields)


# ---------------------------------------------------------------- finding the segments


def partition_of(name):
    """(topic, partition) of a partition directory's name, or None when it is not one."""
    topic, dash, number = name.rpartition("-")
    if not (dash and _TOPIC.fullmatch(topic) and number.isascii() and number.isdigit()):
        return None
    return topic, int(number)


def _base_offset(name):
    stem = name[: -len(".log")]
    return int(stem) if stem.isascii() and stem.isdigit() else None


def _resolve(path, filesystem):
    """(filesystem, path inside it) of a user's path or URI."""
    path = os.fspath(path)
    if filesystem is not None:
        return filesystem, path
    if "://" in path:
        return pafs.FileSystem.from_uri(path)
    return pafs.LocalFileSystem(), os.path.abspath(path)


def _basename(path):
    return path.rstrip("/").rsplit("/", 1)[-1]


def _parent(path):
    return path.rstrip("/").rsplit("/", 1)[0] if "/" in path.rstrip("/") else ""


def _partition_files(fs, directory):
    infos = fs.get_file_info(pafs.FileSelector(directory))
    logs = [i for i in infos if i.base_name.endswith(".log")]
    for info in logs:
        _check_regular(info, info.path)
    return [i for i in logs if i.type == pafs.FileType.File]


def _check_regular(info, given):
    """A FIFO, a socket or a device named as a segment would be read until its writer
    stops (or for ever): refused, named."""
    if info.type == pafs.FileType.Unknown:
        raise ValueError(
            f"{given} is not a regular file or a directory (a FIFO, a socket or a device?): "
            "a log segment is a regular .log file"
        )


def find_segments(paths, *, filesystem=None):
    """{(topic, partition): [(filesystem, path, base_offset or None, size)]} of `paths`, each
    partition's segments in offset order."""
    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    found = {}
    where = {}  # (topic, partition) -> the directory it was found in
    seen = set()

    def claim(topic, partition, directory):
        key = (topic, partition)
        if where.setdefault(key, directory) != directory:
            raise ValueError(
                f"partition {topic}-{partition} is in both {where[key]} and {directory} "
                "(two replicas of one partition?): give one of them"
            )
        found.setdefault(key, [])

    def add(fs, info, topic, partition):
        if info.path not in seen:
            seen.add(info.path)
            found[topic, partition].append((fs, info.path, _base_offset(info.base_name), info.size))

    def add_directory(fs, directory, topic, partition):
        claim(topic, partition, directory)
        for f in _partition_files(fs, directory):
            add(fs, f, topic, partition)

    for given in paths:
        fs, path = _resolve(given, filesystem)
        info = fs.get_file_info(path)
        if info.type == pafs.FileType.NotFound:
            raise FileNotFoundError(f"no such segment file or directory: {given}")
        _check_regular(info, given)
        if info.type == pafs.FileType.File:
            directory = _parent(info.path)
            tp = partition_of(_basename(directory))
            if tp is None:
                raise ValueError(
                    f"cannot tell the topic and partition of {given}: a segment file sits in "
                    "its partition's directory, named topic-partition (such as orders-0)"
                )
            if not info.base_name.endswith(".log"):
                raise ValueError(f"{given} is not a log segment (a .log file)")
            claim(*tp, directory)
            add(fs, info, *tp)
            continue
        tp = partition_of(_basename(info.path))
        if tp is not None:
            add_directory(fs, info.path, *tp)
            continue
        partitions = 0
        for sub in fs.get_file_info(pafs.FileSelector(info.path)):
            tp = partition_of(sub.base_name)
            if sub.type != pafs.FileType.Directory or tp is None:
                continue
            if tp[0].startswith(SKIPPED_PREFIX):
                continue
            partitions += 1
            add_directory(fs, sub.path, *tp)
        if not partitions:
            raise ValueError(
                f"{given} holds no partition directories (named topic-partition, such as "
                "orders-0): is it a broker's log directory?"
            )
    for key, files in found.items():
        files.sort(key=lambda f: (f[2] is None, f[2] or 0, f[1]))
    return dict(sorted(found.items()))


# ---------------------------------------------------------------- the first pass


def _batch_heads(file, size):
    """(position, base offset, length, magic, attributes, last offset, producer id, max
    timestamp) of each whole batch of a segment file, reading headers only (legacy
    messages: attributes 0, producer -1, last offset their offset). The file is read
    HEADS_CHUNK bytes at a time, not a read a header."""
    pos, chunk, at = 0, b"", 0  # chunk: the file's bytes from `at`
    while size - pos >= 12:
        want = min(_V2_HEAD_SIZE, size - pos)
        if not at <= pos <= at + len(chunk) - want:
            at, chunk = pos, bytes(file.read_at(min(HEADS_CHUNK, size - pos), pos))
        base, length = _BATCH_START.unpack_from(chunk, pos - at)
        if length < 5 or length > size - pos - 12:
            return  # the row pass reports what is wrong (or cut off) here
        magic = chunk[pos - at + 16]
        if magic == 2 and want >= _V2_HEAD.size:
            head = _V2_HEAD.unpack_from(chunk, pos - at)
            attrs, delta, max_ts, producer = head[5], head[6], head[8], head[9]
            yield pos, base, length, magic, attrs, base + delta, producer, max_ts
        else:
            yield pos, base, length, magic, 0, base, -1, -1
        pos += 12 + length


def _control_type(file, pos, length, name, check_crc, max_decompressed):
    """The type of a control batch's first marker (0 abort, 1 commit), or None."""
    from .records import read_batches

    data = file.read_at(12 + length, pos)
    try:
        batches = read_batches(data, check_crc=check_crc, max_decompressed=max_decompressed)
    except DecodeError as e:
        raise SegmentError(e.reason, pos + e.offset, name) from None
    records = batches[0].records if batches else []
    if not records:
        return None
    t = records[0].control_type
    return 0 if t == "abort" else 1 if t == "commit" else None


def _transactions(files, check_crc, truncated, max_decompressed):
    """The partition's aborted transactions as rows of an array (producer_id, first_offset,
    marker_offset), and its last stable offset (the first offset of a transaction with no
    marker yet, or None). Every marker counts, so every segment is walked to its end: one
    whose headers stop before it (cut off, zeros, damage) is an error, but for the last
    one under truncated="skip", which ends there (a marker that does not read included)."""
    open_since = {}  # producer id -> the first offset of its open transaction
    aborted = []
    for i, (fs, path, _, size) in enumerate(files):
        skip = truncated == "skip" and i + 1 == len(files)
        with fs.open_input_file(path) as f:
            end = 0
            for pos, base, length, _, attrs, last, producer, _ in _batch_heads(f, size):
                end = pos + 12 + length
                if not attrs & _TRANSACTIONAL:
                    continue
                if not attrs & _CONTROL:
                    open_since.setdefault(producer, base)
                    continue
                try:
                    kind = _control_type(f, pos, length, path, check_crc, max_decompressed)
                except SegmentError:
                    if not skip:
                        raise
                    end = size  # a torn marker: the end of the log, as Kafka's recovery has it
                    break
                first = open_since.pop(producer, None)
                if kind == _CONTROL_ABORT and first is not None:
                    aborted.append((producer, first, base))
            if end < size and not skip:
                where = "the partition's last segment" if i + 1 == len(files) else "a segment"
                raise SegmentError(
                    f"{where}'s batches stop making sense here (a batch cut off, zeros, or "
                    "damage), and read_committed needs every transaction marker of the "
                    "partition" + (TRUNCATED_HINT if i + 1 == len(files) else ""),
                    end,
                    path,
                )
    aborted = np.array(aborted, dtype=np.int64).reshape(-1, 3)
    return aborted, min(open_since.values(), default=None)


def _offset_for_time(files, when, check_crc, max_decompressed):
    """Kafka's ListOffsets by timestamp over segment files: the first offset whose record's
    timestamp is at or after `when` (ms), or the offset after the last batch. Batches are
    read as the rows are: one at a time, each within `max_decompressed`."""
    from .records import read_columns

    after = None
    for fs, path, _, size in files:
        with fs.open_input_file(path) as f:
            for pos, base, length, magic, attrs, last, _, max_ts in _batch_heads(f, size):
                after = last + 1
                if attrs & _CONTROL:
                    continue
                if magic == 2 and max_ts < when:
                    continue
                try:
                    cols = read_columns(
                        f.read_at(12 + length, pos),
                        check_crc=check_crc,
                        max_decompressed=max_decompressed,
                    )
                except DecodeError as e:
                    raise SegmentError(e.reason, pos + e.offset, path) from None
                hits = (cols.timestamp >= when).nonzero()[0]
                if hits.size:
                    return int(cols.offset[hits[0]])
    return after


def _comparable(value):
    return _millis(value) if isinstance(value, datetime) else value


def _millis(when):
    if when.tzinfo is None:
        when = when.replace(tzinfo=timezone.utc)
    return int(when.timestamp() * 1000)


def _reaching(aborted, base, following):
    """The aborted transactions (an array of producer id, first offset, marker offset
    rows) that reach into the offsets [base, following) of one segment, as tuples: each
    segment's task carries what it needs, not the partition's whole list."""
    if aborted is None or not len(aborted):
        return ()
    keep = np.ones(len(aborted), dtype=bool)
    if base is not None:
        keep &= aborted[:, 2] >= base
    if following is not None:
        keep &= aborted[:, 1] < following
    return tuple(map(tuple, aborted[keep].tolist()))


# ---------------------------------------------------------------- planning


def _check_offset(value, name):
    if value is None or isinstance(value, datetime):
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{name} must be an offset (an int >= 0), a datetime or None, not {value!r}"
        )


def plan_segments(
    paths,
    *,
    filesystem=None,
    partitions=None,
    start_offset=None,
    end_offset=None,
    isolation_level="read_uncommitted",
    check_crc=True,
    truncated="error",
    block_size=DEFAULT_BLOCK_SIZE,
    max_decompressed=None,
):
    """The SegmentTasks of `paths` (see read_segments for the parameters), one per segment
    file that can hold rows in the range, in partition and offset order."""
    if isolation_level not in ISOLATION_LEVELS:
        raise ValueError(
            f"isolation_level must be one of {', '.join(ISOLATION_LEVELS)}, not {isolation_level!r}"
        )
    if truncated not in TRUNCATED:
        raise ValueError(f"truncated must be one of {', '.join(TRUNCATED)}, not {truncated!r}")
    _check_offset(start_offset, "start_offset")
    _check_offset(end_offset, "end_offset")
    if (
        start_offset is not None
        and end_offset is not None
        and isinstance(start_offset, datetime) == isinstance(end_offset, datetime)
        and _comparable(start_offset) > _comparable(end_offset)
    ):
        raise ValueError(f"start_offset {start_offset} is after end_offset {end_offset}")
    if not isinstance(block_size, int) or block_size < 64:
        raise ValueError(f"block_size must be an int of at least 64 bytes, not {block_size!r}")
    if partitions is not None:
        partitions = set(partitions)
    read_committed = isolation_level == "read_committed"
    tasks = []
    for (topic, partition), files in find_segments(paths, filesystem=filesystem).items():
        if partitions is not None and partition not in partitions:
            continue
        start, end = start_offset, end_offset
        if isinstance(start, datetime):
            start = _offset_for_time(files, _millis(start), check_crc, max_decompressed)
        if isinstance(end, datetime):
            end = _offset_for_time(files, _millis(end), check_crc, max_decompressed)
        aborted = None
        if read_committed:
            aborted, stable = _transactions(files, check_crc, truncated, max_decompressed)
            if stable is not None:
                end = stable if end is None else min(end, stable)
        for i, (fs, path, base, size) in enumerate(files):
            following = files[i + 1][2] if i + 1 < len(files) else None
            if start is not None and following is not None and following <= start:
                continue  # every offset of this segment is before the start
            if end is not None and base is not None and base >= end:
                break
            tasks.append(
                SegmentTask(
                    filesystem=fs,
                    path=path,
                    topic=topic,
                    partition=partition,
                    base_offset=base,
                    next_base_offset=following,
                    size=size,
                    last=i + 1 == len(files),
                    start_offset=start,
                    end_offset=end,
                    read_committed=read_committed,
                    aborted=_reaching(aborted, base, following),
                    check_crc=check_crc,
                    truncated=truncated,
                    block_size=block_size,
                    max_decompressed=max_decompressed,
                )
            )
    return tasks


# ---------------------------------------------------------------- reading


def _cut_off(task, pos, have, need):
    if task.last and task.truncated == "skip":
        return
    where = "the partition's last segment" if task.last else "a segment that is not the last"
    hint = TRUNCATED_HINT if task.last else ""
    raise SegmentError(
        f"a batch cut off at the end of {where}: {have} of its {need} bytes are in the file" + hint,
        pos,
        task.path,
    )


def _last_nonzero(f, start, size, chunk):
    """The position of the file's last byte that is not zero, at or after `start` (None:
    all zeros), reading backwards a chunk at a time."""
    end = size
    while end > start:
        n = min(chunk, end - start)
        found = np.flatnonzero(np.frombuffer(f.read_at(n, end - n), dtype=np.uint8))
        if found.size:
            return end - n + int(found[-1])
        end -= n
    return None


def _whole_batch(data):
    """Whether `data` starts with a whole batch (as its length says)."""
    return len(data) >= 12 and 12 + _BATCH_START.unpack_from(data)[1] <= len(data)


def _batch_holding(data, at):
    """(start, end) in `data` of the batch that holds byte `at`, as the lengths before it
    say; a header whose length cannot be right ends 12 bytes after its start."""
    pos, n = 0, len(data)
    while n - pos >= 12:
        length = _BATCH_START.unpack_from(data, pos)[1]
        end = pos + 12 + length if 5 <= length <= n - pos - 12 else pos + 12
        if at < end or end == pos + 12:
            return pos, end
        pos = end
    return pos, pos + 12


def _torn_tail(task, f, size, pos, data, error_at):
    """Where a segment's written bytes end, when the batch that does not read (the one
    holding byte `error_at` of `data`, read at file position `pos`) is followed by
    nothing but zeros: a broker's preallocated file (log.preallocate), or one a crash
    left, which Kafka's recovery truncates at that batch. None when it is not so."""
    start, end = _batch_holding(data, error_at)
    start, end = pos + start, pos + end
    last = _last_nonzero(f, start, size, max(task.block_size, 1 << 16))
    # Zeros from the batch's start, or from inside it on past its end (a batch can end
    # in zero bytes of its own: zeros that stop where it ends say nothing).
    if last is None or (last < end < size):
        return start, last is None
    return None


def _start_position(task, f, size):
    """(position, offset of the batch there) to start reading task.start_offset from, by
    the offset index beside the segment (`.index`: entries of int32 offset relative to the
    segment's base and int32 position; the offset is the last of the batches appended at
    that position, so every batch before the position ends before it). An index is a hint:
    the batch header it points at must be a magic 2 batch whose base offset lies between
    the segment's base and the entry's offset, else the segment is read from its start.
    (0, None) when there is no index, or nothing to skip."""
    base, start = task.base_offset, task.start_offset
    if start is None or base is None or start <= base:
        return 0, None
    try:
        with task.filesystem.open_input_file(task.path[: -len(".log")] + ".index") as index:
            raw = index.read()
    except (OSError, ValueError):
        return 0, None
    entries = np.frombuffer(raw, dtype=">i4", count=len(raw) // 8 * 2).reshape(-1, 2)
    rel, position = entries[:, 0].astype(np.int64), entries[:, 1].astype(np.int64)
    # The entries that ascend (a broker's active index is zeros past its last entry).
    bad = np.flatnonzero((np.diff(rel) <= 0) | (np.diff(position) <= 0))
    used = bad[0] + 1 if bad.size else len(rel)
    i = int(np.searchsorted(rel[:used], start - base, side="right")) - 1
    if i < 0:
        return 0, None
    at, claimed = int(position[i]), base + int(rel[i])
    if not 0 < at <= size - _V2_HEAD_SIZE:
        return 0, None
    head = bytes(f.read_at(_V2_HEAD_SIZE, at))
    first, length = _BATCH_START.unpack_from(head)
    if head[16] != 2 or not base <= first <= claimed or length > size - at - 12:
        return 0, None
    return at, first


def read_task(task):
    """The rows of one segment file (a SegmentTask), a block at a time, as
    pyarrow.RecordBatches of read_kafka's schema (blocks without rows are not yielded).
    A block is block_size bytes of the file, and the records decompressed from it stop
    after the batch that takes them to block_size bytes (the rest is the next block's)."""
    with task.filesystem.open_input_file(task.path) as f:
        size = f.size()
        pos, first = _start_position(task, f, size)
        block = task.block_size
        # The offset the reading starts at: the file's name says it, or the batch the
        # index pointed at does; the offsets must go forward from there.
        resume = task.base_offset if first is None else first
        if resume is None and size >= 8:  # a file not named by its offset: its first batch's
            resume = struct.unpack(">q", f.read_at(8, 0))[0]
        previous = None if resume is None else resume - 1
        aborted = ()
        if task.read_committed:
            # Only the transactions not yet ended by a marker before the start; the state
            # then goes from block to block.
            aborted = _arrow_rows.AbortedTransactions(
                [
                    (p, begin)
                    for p, begin, marker in task.aborted
                    if resume is None or marker >= resume
                ]
            )
        torn = None  # (where, all zeros, why, the file's size) of a tail of zeros
        data = None  # the block being read, from pos on
        while pos < size:
            if data is None:
                n = min(block, size - pos)
                f.seek(pos)
                data = f.read_buffer(n)  # from Arrow's pool (read_at would make a new bytes)
                if len(data) != n:
                    raise SegmentError(
                        f"the file ended after {len(data)} of {n} bytes", pos, task.path
                    )
            try:
                batch, next_offset, tail = _convert(task, data, aborted, previous)
            except DecodeError as e:
                torn = None if torn is not None else _torn_tail(task, f, size, pos, data, e.offset)
                if torn is None:
                    raise SegmentError(e.reason, pos + e.offset, task.path) from None
                # Kafka's recovery cuts the segment there: read up to it, then decide.
                torn = (*torn, e.reason, size)
                size, data = torn[0], None
                continue
            used = len(data) - len(tail)
            if batch.num_rows:
                yield batch
            if used:
                pos += used
                previous = next_offset - 1
                block = task.block_size
                # The decompressed budget stopped the read before the block's end: the
                # rest of the block is read next, without reading it from the file again.
                data = data.slice(used) if _whole_batch(tail) else None
                continue
            # No whole batch in the block: one larger than the block, or cut off at the end.
            need = 12 + _BATCH_START.unpack_from(tail)[1] if len(tail) >= 12 else 12
            if pos + need > size:
                _cut_off(task, pos, size - pos, need)
                return
            block, data = need, None
        if torn is not None:
            _torn(task, *torn)


def _convert(task, data, aborted, previous):
    return _arrow_rows.batches_to_arrow(
        data,
        topic=task.topic,
        partition=task.partition,
        read_committed=task.read_committed,
        aborted_transactions=aborted,
        check_crc=task.check_crc,
        start_offset=task.start_offset,
        end_offset=task.end_offset,
        max_decompressed=task.max_decompressed,
        decompressed_budget=task.block_size,
        previous_offset=previous,
        next_segment=task.next_base_offset,
    )


def _torn(task, at, zeros, why, size):
    """A segment whose bytes from `at` on are zeros, or a batch that does not read and then
    zeros: the end of the partition's last segment under truncated="skip" (as Kafka's
    recovery truncates it there), else an error."""
    if task.last and task.truncated == "skip":
        return
    where = "the partition's last segment" if task.last else "a segment that is not the last"
    what = (
        "is zeros from here" if zeros else f"holds a batch that does not read ({why}), then zeros"
    )
    raise SegmentError(
        f"{where} {what} to its end ({size - at} bytes: a preallocated file, or one a crash "
        "left before the broker's recovery)" + (TRUNCATED_HINT if task.last else ""),
        at,
        task.path,
    )


def iter_segments(paths, **options):
    """The rows of `paths` (read_segments' parameters) as pyarrow.RecordBatches, a block
    at a time: memory stays a few blocks however large the segments are (a block is
    block_size bytes of segment, and its compressed batches stop after the one that takes
    their records to block_size bytes; a batch larger than that is read whole)."""
    for task in plan_segments(paths, **options):
        yield from read_task(task)


def read_segments(
    paths,
    *,
    filesystem=None,
    partitions=None,
    start_offset=None,
    end_offset=None,
    isolation_level="read_uncommitted",
    check_crc=True,
    truncated="error",
    block_size=DEFAULT_BLOCK_SIZE,
    max_decompressed=None,
):
    """Kafka log segments into one pyarrow.Table with read_kafka's schema (offset, key,
    value, topic, partition, timestamp, timestamp_type, headers), partitions in (topic,
    partition) order, each in offset order.

    - `paths`: a path or URI, or a list of them: segment files (`.log`), partition
      directories (`topic-N`), or broker log directories; `filesystem`: a pyarrow.fs
      FileSystem the paths are in (default: local paths, or the URI's own).
    - `partitions`: the partition numbers to read (None: all).
    - `start_offset`/`end_offset`: the range [start, end) as offsets, or datetimes (the
      first offset whose timestamp is at or after it, as ListOffsets finds it); None: the
      whole log.
    - `isolation_level`: "read_uncommitted" (every data batch) or "read_committed"
      (aborted transactions dropped, stopping at the last stable offset).
    - `check_crc`: check each batch's CRC (default True).
    - `truncated`: "error" or "skip": what to do with a batch cut off at the end of a
      partition's last segment, or a last segment that turns to zeros up to its end.
    - `block_size`: bytes of segment read at a time, and the most a block's compressed
      batches decompress to before the block ends (plus the batch that crosses it).
    - `max_decompressed`: the most one compressed batch may decompress to (default: 64
      times its compressed size, at least 1 MiB, at most 256 MiB); past it, an error.
    """
    batches = list(
        iter_segments(
            paths,
            filesystem=filesystem,
            partitions=partitions,
            start_offset=start_offset,
            end_offset=end_offset,
            isolation_level=isolation_level,
            check_crc=check_crc,
            truncated=truncated,
            block_size=block_size,
            max_decompressed=max_decompressed,
        )
    )
    return pa.Table.from_batches(batches, schema=_arrow_rows.SCHEMA)

"""A partition's log on disk in Kafka's own format: a directory `<topic>-<partition>` of
segment files named by their first offset (20 digits), each `.log` the batches back to back
as received, beside an offset index (`.index`: int32 offset relative to the segment's base,
int32 position, an entry every index.interval.bytes) and a time index (`.timeindex`: int64
timestamp, int32 relative offset). A segment is rolled when the next batch would take it
past `segment.bytes`. `partition.metadata` holds the topic id and `leader-epoch-checkpoint`
the leader epochs, in Kafka's formats.

`recover()` reads the segments back as Kafka's recovery does: each batch's size, magic and
CRC are checked, and the log is cut at the first one that fails (a torn tail after a crash):
that segment is truncated there and the ones after it are deleted.
"""

import base64
import os
import re
import shutil
import struct
import uuid

from .. import records
from .._batches import HEADER, HEADER_SIZE
from .._wire import BATCH_CRC_START

INDEX_INTERVAL_BYTES = 4096  # Kafka's index.interval.bytes
_INDEX_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_BASE_AND_LENGTH = struct.Struct(">qi")
# A segment file's name: its base offset in 20 ASCII digits (str.isdigit() passes "\u00b2",
# which int() refuses, and "\u0663", which int() reads as 3; "4.log" is not 4's segment)
_SEGMENT_NAME = re.compile("[0-9]{20}")
_INT64_MAX = (1 << 63) - 1
_PARTITION = re.compile("[0-9]{1,9}")
_OFFSET = re.compile("-?[0-9]{1,18}")


def segment_name(base_offset):
    return f"{base_offset:020d}"


def segment_base(name, suffix):
    """The base offset of the segment file `name` ending in `suffix`, or None when it is not
    named as one (a stray file: left alone)."""
    if not name.endswith(suffix) or not _SEGMENT_NAME.fullmatch(name[: -len(suffix)]):
        return None
    base = int(name[: -len(suffix)])
    return base if base <= _INT64_MAX else None


def partition_dir(log_dir, topic, index):
    return os.path.join(log_dir, f"{topic}-{index}")


def _topic_id_text(topic_id):
    return base64.urlsafe_b64encode(topic_id.bytes).rstrip(b"=").decode()


def write_partition_metadata(path, topic_id):
    """Kafka's `partition.metadata`: the topic id the directory belongs to."""
    _write_replacing(
        os.path.join(path, "partition.metadata"),
        f"version: 0\ntopic_id: {_topic_id_text(topic_id)}\n",
    )


def read_partition_metadata(path):
    """The topic id (a uuid.UUID) of a partition directory, or None."""
    try:
        with open(os.path.join(path, "partition.metadata"), encoding="ascii") as f:
            fields = dict(line.split(": ", 1) for line in f.read().splitlines() if ": " in line)
        text = fields["topic_id"].strip()
        return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    except (OSError, KeyError, ValueError):
        return None


def write_checkpoint(path, entries):
    """A Kafka checkpoint file: version 0, the count, one entry a line."""
    lines = ["0", str(len(entries))] + [" ".join(str(v) for v in e) for e in entries]
    _write_replacing(path, "\n".join(lines) + "\n")


def read_checkpoint(path):
    """The entries of a checkpoint file (each a list of strings); [] when it is missing or
    not one."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().splitlines()
        if len(lines) < 2 or lines[0] != "0":
            return []
        return [line.split() for line in lines[2 : 2 + int(lines[1])]]
    except (OSError, ValueError):
        return []


def read_offset_checkpoint(path):
    """{(topic, partition): offset} of a Kafka offset checkpoint (`topic partition offset`
    lines); an entry whose numbers are not ASCII digits within int64 (a damaged file) is
    ignored, never a ValueError (str.isdigit() passes "\u00b2", which int() refuses)."""
    out = {}
    for e in read_checkpoint(path):
        if len(e) == 3 and _PARTITION.fullmatch(e[1]) and _OFFSET.fullmatch(e[2]):
            out[(e[0], int(e[1]))] = int(e[2])
    return out


def _write_replacing(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)


class _Segment:
    __slots__ = ("base", "size", "max_ts", "since_index", "index_max_ts")

    def __init__(self, base, size=0, max_ts=-1):
        self.base = base
        self.size = size
        self.max_ts = max_ts
        self.since_index = 0  # bytes appended since the last index entry
        self.index_max_ts = -1  # the largest timestamp the time index holds


class SegmentFiles:
    """One partition's segment files in directory `path` (made if missing)."""

    def __init__(self, path, topic_id=None, segment_bytes=None, on_log_start=None):
        self.path = path
        # () -> the topic's segment.bytes now; () -> None, called when the log start moved
        self.segment_bytes = segment_bytes
        self.on_log_start = on_log_start
        os.makedirs(path, exist_ok=True)
        if topic_id is not None:
            write_partition_metadata(path, topic_id)
        self.segments = []  # _Segment, in offset order; the last is the active one
        # The active segment's .log, opened at its first append (a partition not written
        # since the start holds no file open); its indexes are opened for each entry.
        self._log = None
        self.next_offset = 0  # the log end recover() found
        self._epochs = None  # leader epochs not written yet (at the next append or close)

    def _file(self, base, suffix):
        return os.path.join(self.path, segment_name(base) + suffix)

    # ---- writing

    def append(self, base, last_offset, batch, max_ts):
        """Write one batch (its offsets assigned) at the end, rolling a new segment first when
        it would take the active one past segment.bytes."""
        if self._epochs is not None:  # before the first batch of a new epoch
            self._write_epochs()
        seg = self.segments[-1] if self.segments else None
        if seg is None or (seg.size and seg.size + len(batch) > self.segment_bytes()):
            seg = self._roll(base)
        index, timeindex = _index_entries(seg, last_offset, max_ts)
        if index:
            _append_to(self._file(seg.base, ".index"), index)
        if timeindex:
            _append_to(self._file(seg.base, ".timeindex"), timeindex)
        if self._log is None:
            self._log = open(self._file(seg.base, ".log"), "ab")
        self._log.write(batch)
        self._log.flush()
        seg.size += len(batch)
        seg.since_index += len(batch)

    def _roll(self, base):
        self._close_files()
        seg = _Segment(base)
        self.segments.append(seg)
        for suffix in (".log", ".index", ".timeindex"):
            _append_to(self._file(base, suffix), b"")
        return seg

    def _close_files(self):
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self):
        if self._epochs is not None:
            self._write_epochs()
        self._close_files()

    def log_start_moved(self, offset, log_end):
        """The log starts at `offset` now: the segments wholly before it go, and the
        checkpoint of log starts is written."""
        self.delete_before(offset, log_end)
        if self.on_log_start is not None:
            self.on_log_start()

    def delete_before(self, offset, log_end):
        """Delete the segments wholly before `offset` (their successor starts at or before
        it); when that is every one, an empty segment starts at `log_end`, as Kafka rolls."""
        drop = 0
        while drop < len(self.segments):
            last = drop + 1 == len(self.segments)
            nxt = log_end if last else self.segments[drop + 1].base
            if nxt > offset or (last and self.segments[drop].size == 0):
                break
            drop += 1
        if not drop:
            return
        if drop == len(self.segments):
            self._close_files()
        for seg in self.segments[:drop]:
            for suffix in (".log", ".index", ".timeindex"):
                _remove(self._file(seg.base, suffix))
        del self.segments[:drop]
        if not self.segments:
            self._roll(log_end)

    def replace(self, end, groups):
        """Compaction rewrote the segments before `end`: `groups`, [(segment base, [(base,
        last offset, bytes, max timestamp)])], replace them, each group one segment named by
        its base (as Kafka's cleaner: written `.cleaned`, renamed `.swap`, the old segments
        deleted, then renamed `.log`; recovery completes the swaps a crash left). A group
        left without batches makes no segment: the next one takes its base (a segment's
        name, not its first batch, says where the log starts after a restart)."""
        old = [seg for seg in self.segments if seg.base < end]
        new = []
        empty_base = None
        for base, batches in groups:
            if not batches:
                empty_base = base if empty_base is None else empty_base
                continue
            if empty_base is not None:
                base, empty_base = empty_base, None
            seg = _Segment(base)
            index, timeindex = bytearray(), bytearray()
            with open(self._file(base, ".log.cleaned"), "wb") as f:
                for _, last, data, max_ts in batches:
                    entry, time_entry = _index_entries(seg, last, max_ts)
                    index += entry
                    timeindex += time_entry
                    f.write(data)
                    seg.size += len(data)
                    seg.since_index += len(data)
            new.append((seg, index, timeindex))
        for seg, _, _ in new:
            os.replace(self._file(seg.base, ".log.cleaned"), self._file(seg.base, ".log.swap"))
        for seg in old:
            for suffix in (".log", ".index", ".timeindex"):
                _remove(self._file(seg.base, suffix))
        for seg, index, timeindex in new:
            os.replace(self._file(seg.base, ".log.swap"), self._file(seg.base, ".log"))
            with open(self._file(seg.base, ".index"), "wb") as f:
                f.write(index)
            with open(self._file(seg.base, ".timeindex"), "wb") as f:
                f.write(timeindex)
        self.segments[: len(old)] = [seg for seg, _, _ in new]

    def _finish_swaps(self):
        """Complete a compaction a crash cut short (Kafka's recovery of `.swap` files): a
        swap file replaces the segments its offsets cover; a `.cleaned` one goes."""
        names = os.listdir(self.path)
        for name in names:
            if segment_base(name, ".log.cleaned") is not None:
                _remove(os.path.join(self.path, name))
        swaps = sorted(b for b in (segment_base(n, ".log.swap") for n in names) if b is not None)
        for base in swaps:
            path = self._file(base, ".log.swap")
            with open(path, "rb") as f:
                batches, _ = _read_batches(f.read(), None)
            last = batches[-1][1] if batches else base
            for other in os.listdir(self.path):
                other_base = segment_base(other, ".log")
                if other_base is not None and base <= other_base <= last:
                    _remove(os.path.join(self.path, other))
            os.replace(path, self._file(base, ".log"))

    def remove(self):
        """The partition is deleted: its directory goes."""
        self._epochs = None
        self._close_files()
        shutil.rmtree(self.path, ignore_errors=True)

    def write_epochs(self, epochs):
        """The leader epochs changed: written before the next batch (which carries the new
        epoch) or at close, so that many leader changes cost one write."""
        self._epochs = list(epochs)

    def _write_epochs(self):
        write_checkpoint(self.epochs_path, self._epochs)
        self._epochs = None

    def read_epochs(self):
        try:
            return [(int(e), int(o)) for e, o in read_checkpoint(self.epochs_path)]
        except ValueError:
            return []

    @property
    def epochs_path(self):
        return os.path.join(self.path, "leader-epoch-checkpoint")

    # ---- reading back

    def recover(self):
        """The batches of the segments on disk, [(base offset, last offset, bytes)], cut at
        the first that does not check or does not follow the offsets before it (its segment
        truncated there, the later ones deleted); a segment is named by its first batch's
        offset (or less, as compaction leaves it, when that is past the segment before), an
        empty last one by the log end (or later, as its name says, when it was
        empty already: the log end after retention deleted everything); the indexes are written
        again, as Kafka rebuilds them. `next_offset` is then the log end (an empty last
        segment's name says it when no batch does)."""
        self._finish_swaps()
        names = sorted(
            b for b in (segment_base(n, ".log") for n in os.listdir(self.path)) if b is not None
        )
        # First read everything, then change the files: renames cannot clobber a segment
        # not read yet.
        kept = []  # (name, bytes good, batches)
        out = []
        doomed = []
        for i, name in enumerate(names):
            if doomed:
                doomed.append(name)
                continue
            with open(self._file(name, ".log"), "rb") as f:
                data = f.read()
            expected = out[-1][1] + 1 if out else None
            batches, good = _read_batches(data, expected)
            cut = good < len(data)
            if batches or cut or i == len(names) - 1:
                kept.append((name, good, batches, len(data)))
                out += [(base, last, batch) for base, last, batch, _ in batches]
            else:
                doomed.append(name)  # an empty segment before others: the next starts there
            if cut:
                doomed.append(None)  # the log ends here: every later segment goes
        for name in names:
            for suffix in (".index", ".timeindex"):
                _remove(self._file(name, suffix))
        for name in doomed:
            if name is not None:
                _remove(self._file(name, ".log"))
        end = out[-1][1] + 1 if out else 0
        targets = []
        prev_end = 0
        for name, good, batches, size in kept:
            if good < size:
                with open(self._file(name, ".log"), "r+b") as f:
                    f.truncate(good)
            if batches:
                # its name, when no later than its first batch (compaction leaves segments
                # so) and not inside the segment before; else its first batch's offset
                targets.append(name if prev_end <= name <= batches[0][0] else batches[0][0])
                prev_end = batches[-1][1] + 1
            else:  # empty: its name says the log end, unless it held bytes that were bad
                targets.append(end if good < size else max(name, end))
        moving = [(n, t) for (n, *_), t in zip(kept, targets) if n != t]
        for name, _ in moving:
            os.replace(self._file(name, ".log"), self._file(name, ".log.recovering"))
        for name, target in moving:
            os.replace(self._file(name, ".log.recovering"), self._file(target, ".log"))
        for (_, _, batches, _), target in zip(kept, targets):
            seg = _Segment(target)
            self.segments.append(seg)
            index, timeindex = bytearray(), bytearray()
            for _, last, batch, max_ts in batches:
                entry, time_entry = _index_entries(seg, last, max_ts)
                index += entry
                timeindex += time_entry
                seg.size += len(batch)
                seg.since_index += len(batch)
            _append_to(self._file(target, ".index"), index)
            _append_to(self._file(target, ".timeindex"), timeindex)
        self.next_offset = max(end, self.segments[-1].base if self.segments else 0)
        return out


def _index_entries(seg, last_offset, max_ts):
    """The (offset index, time index) bytes due before a batch ending at `last_offset` is
    appended to `seg`: as Kafka's LogSegment, an entry when more than index.interval.bytes
    went in since the last, mapping the batch's last offset to its position (and the
    largest timestamp so far to its offset, when it grew)."""
    index = timeindex = b""
    if seg.since_index > INDEX_INTERVAL_BYTES:
        index = _INDEX_ENTRY.pack(last_offset - seg.base, seg.size)
        if seg.max_ts > seg.index_max_ts:
            timeindex = _TIME_ENTRY.pack(seg.max_ts, last_offset - seg.base)
            seg.index_max_ts = seg.max_ts
        seg.since_index = 0
    seg.max_ts = max(seg.max_ts, max_ts)
    return index, timeindex


def _append_to(path, data):
    with open(path, "ab") as f:
        f.write(data)


def _remove(path):
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


def _read_batches(data, expected):
    """([(base, last offset, bytes, max timestamp)], bytes good) of a segment's data: the
    batches up to the first that is cut off, not magic 2, fails its CRC, or does not follow
    the offset before it."""
    out = []
    pos, n = 0, len(data)
    view = memoryview(data)
    while pos + HEADER_SIZE <= n:
        base, length = _BASE_AND_LENGTH.unpack_from(data, pos)
        end = pos + 12 + length
        if length < HEADER_SIZE - 12 or end > n:
            break
        (_, _, _, magic, crc, _, last_delta, _, max_ts, *_rest) = HEADER.unpack_from(data, pos)
        if magic != 2 or records.crc32c(view[pos + BATCH_CRC_START : end]) != crc:
            break
        if expected is not None and base < expected:
            break
        out.append((base, base + last_delta, bytes(view[pos:end]), max_ts))
        expected = base + last_delta + 1
        pos = end
    return out, pos

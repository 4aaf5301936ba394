"""The batch layer of fastkwire.records, shared by both implementations: walks the
batches of a `records` field (whole ones; a cut-off tail is reported), reads and checks
each header, decompresses, and hands the records section to a kernel (`_records` or
`_records_python`) that reads or writes the records themselves.

RecordBatch v2 header (61 bytes, big-endian):
  0 base offset int64 | 8 batch length int32 (bytes after this field) | 12 partition
  leader epoch int32 | 16 magic int8 | 17 crc uint32 (CRC32C of bytes 21..end) |
  21 attributes int16 | 23 last offset delta int32 | 27 base timestamp int64 |
  35 max timestamp int64 | 43 producer id int64 | 51 producer epoch int16 |
  53 base sequence int32 | 57 record count int32 | 61 records
"""

import struct
import time

from . import _compression, _legacy_records, _wire
from .errors import DecodeError, EncodeError
from ._records_model import Batches, RecordBatch, as_control
from ._rules import require_numpy

HEADER_FIELDS = _wire.BATCH_HEADER
HEADER = struct.Struct(">" + "".join(fmt for _, fmt in HEADER_FIELDS))
HEADER_SIZE = HEADER.size  # 61
CRC_START = _wire.BATCH_CRC_START
MIN_BATCH_LENGTH = HEADER_SIZE - 12
INT16 = (-(1 << 15), (1 << 15) - 1)
INT32 = (-(1 << 31), (1 << 31) - 1)
INT64 = (-(1 << 63), (1 << 63) - 1)
DEFAULT_RATIO = 64
DEFAULT_FLOOR = 1 << 20
DEFAULT_CEILING = 256 << 20


def default_limit(compressed_size):
    """The most a batch may decompress to unless the caller says otherwise: 64 times its
    compressed size, at least 1 MiB, at most 256 MiB."""
    return min(max(DEFAULT_RATIO * compressed_size, DEFAULT_FLOOR), DEFAULT_CEILING)


class Allowance:
    """What the compressed batches of one read may decompress to: each at most
    `max_decompressed` (None: default_limit of its compressed size); `spent` counts what
    they did decompress to, for a read that stops after a budget."""

    __slots__ = ("max_decompressed", "spent")

    def __init__(self, max_decompressed):
        self.max_decompressed = max_decompressed
        self.spent = 0

    def __call__(self, compressed_size):
        return self.max_decompressed or default_limit(compressed_size)

    def took(self, size):
        self.spent += size


def _tail(seen, data, pos):
    if seen is not None:
        seen.leaf("tail", pos, len(data) - pos, "a cut-off batch")
    return bytes(data[pos:])


class Codec:
    """read_batches, read_columns and write_batch over one kernel."""

    def __init__(self, kernel):
        self.kernel = kernel

    def read_batches(self, data, *, check_crc=True, max_decompressed=None):
        """The whole batches in `data` (a Produce or Fetch `records` field) as a Batches
        list of RecordBatch; `.tail` is the bytes of a cut-off batch at the end."""
        out = Batches()
        out.tail = self._walk(
            data, check_crc, max_decompressed, self.kernel.decode_records, out.append, objects=True
        )
        return out

    def read_columns(
        self, data, *, check_crc=True, max_decompressed=None, decompressed_budget=None
    ):
        """Every record of the whole batches in `data` as one RecordColumns (control
        batches included, as their raw keys and values); `.tail` as for read_batches.
        With `decompressed_budget` (bytes), the read stops after the batch that takes the
        records decompressed so far to it: the batches after that one are not read, and
        `.tail` is their bytes (whole batches, then any cut-off one)."""
        require_numpy("records.read_columns")  # the columns are numpy arrays
        builder = self.kernel.ColumnsBuilder(*self.kernel.size_hints(data))
        tail = self._walk(
            data,
            check_crc,
            max_decompressed,
            builder.add,
            builder.add_records,
            objects=False,
            run=builder.add_run,
            budget=decompressed_budget,
        )
        return builder.finish(tail)

    def _walk(
        self,
        data,
        check_crc,
        max_decompressed,
        decode,
        emit,
        objects,
        seen=None,
        run=None,
        budget=None,
    ):
        """Read each whole batch: magic 2 batches' records through `decode`, then (objects)
        the RecordBatch or (columns) a legacy message's records to `emit`; returns the
        bytes of the cut-off tail. `seen` observes the reading (records.describe).
        `run(data, pos, check_crc)` (columns) takes the plain batches from pos on in one
        call, and returns where the walk goes on, batch by batch. With `budget`, the walk
        stops after the batch whose records take what was decompressed to it, and returns
        the rest of `data` (a view) as the tail."""
        if not isinstance(data, (bytes, bytearray)):
            # A view (decode(..., records="view") hands them out) is read in place.
            try:
                view = memoryview(data)
            except TypeError:
                data = bytes(data)
            else:
                data = view.cast("B") if view.c_contiguous else view.tobytes()
        n = len(data)
        pos = 0
        limit_of = Allowance(max_decompressed)
        while pos < n:
            if run is not None:
                pos = run(data, pos, check_crc)
                if pos >= n:
                    break
            left = n - pos
            if left < 12:
                return _tail(seen, data, pos)
            (size,) = struct.unpack_from(">i", data, pos + 8)
            if size < 0:
                raise DecodeError(f"invalid batch length {size}", pos + 8)
            if size > left - 12:
                return _tail(seen, data, pos)
            if size < 5:
                raise DecodeError(
                    f"batch length {size} is too short to hold the magic byte", pos + 8
                )
            magic = data[pos + 16]
            if magic == 2:
                batch = self._v2(data, pos, size, check_crc, limit_of, decode, objects, seen)
            elif magic in (0, 1):
                batch = _legacy_records.read_message(data, pos, check_crc, limit_of, seen=seen)
                if not objects:
                    batch = batch.records
            else:
                raise DecodeError(f"unknown magic {magic}", pos + 16)
            if objects:
                emit(batch)
            elif magic != 2:  # columns: add() has taken a magic 2 batch's records
                emit(batch, pos)
            pos += 12 + size
            if budget is not None and limit_of.spent >= budget and pos < n:
                return memoryview(data)[pos:]  # not read: the caller reads on from here
        return b""

    def _v2(self, data, pos, size, check_crc, limit_of, decode, objects, seen):
        if size < MIN_BATCH_LENGTH:
            raise DecodeError(f"batch length {size} is shorter than the batch header", pos + 8)
        header = HEADER.unpack_from(data, pos)
        (
            base_offset,
            _,
            epoch,
            magic,
            crc,
            attrs,
            last_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            count,
        ) = header
        end = pos + 12 + size
        if seen is not None:
            seen.open("batch", pos)
            at = pos
            for (name, fmt), value in zip(HEADER_FIELDS, header):
                width = struct.calcsize(fmt)
                seen.leaf(name, at, width, value)
                at += width
        if check_crc:
            actual = self.kernel.crc32c(memoryview(data)[pos + CRC_START : end])
            if actual != crc:
                raise DecodeError(
                    f"CRC32C mismatch: the batch says {crc:#010x}, its bytes give {actual:#010x}",
                    pos + 17,
                )
        codec = attrs & 7
        if codec >= len(_compression.CODECS):
            raise DecodeError(f"unknown compression {codec}", pos + 21)
        ts_type = (attrs >> 3) & 1
        log_append_time = max_ts if ts_type else None
        start = pos + HEADER_SIZE
        if seen is not None:
            seen.open("records", start)
        if codec == 0:
            records = decode(data, start, end, count, base_offset, base_ts, log_append_time)
        else:
            limit = limit_of(end - start)
            if count < 0 or count > limit // 7:
                raise DecodeError(
                    f"count {count} exceeds what max_decompressed ({limit} bytes) can hold",
                    pos + 57,
                )
            raw = _compression.decompress(
                _compression.CODECS[codec], memoryview(data)[start:end], limit, start
            )
            limit_of.took(len(raw))
            if seen is not None:
                seen.decompressed(_compression.CODECS[codec], len(raw))
            try:
                records = decode(raw, 0, len(raw), count, base_offset, base_ts, log_append_time)
            except DecodeError as e:
                raise DecodeError(
                    f"{e.reason} at offset {e.offset} of the decompressed records", start
                ) from None
        if seen is not None:
            seen.close(end)  # the records
            seen.close(end)  # the batch
        is_control = bool(attrs & 0x20)
        if not objects:
            return records
        if is_control:
            records = as_control(records, start)
        return RecordBatch(
            base_offset,
            epoch,
            magic,
            crc,
            _compression.CODECS[codec],
            ts_type,
            bool(attrs & 0x10),
            is_control,
            last_delta,
            base_ts,
            max_ts,
            producer_id,
            producer_epoch,
            base_sequence,
            records,
        )

    def write_batch(
        self,
        records,
        *,
        base_offset=0,
        compression="none",
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        is_transactional=False,
        timestamp_type=0,
        partition_leader_epoch=-1,
    ):
        """One RecordBatch (magic 2) of `records` (a list of Record, or RecordColumns).
        `compression` is one of _compression.CODECS, or None for "none" (as kafka-python
        and aiokafka take it)."""
        if compression is None:
            compression = "none"
        if compression not in _compression.CODECS:
            raise EncodeError(
                f"unknown compression {compression!r}; one of {', '.join(_compression.CODECS)}",
                "compression",
            )
        if timestamp_type not in (0, 1):
            raise EncodeError(
                f"timestamp_type must be 0 or 1, not {timestamp_type!r}", "timestamp_type"
            )
        codec = _compression.CODECS.index(compression)
        attrs = codec | (timestamp_type << 3) | (0x10 if is_transactional else 0)
        for name, value, (lo, hi) in (
            ("base_offset", base_offset, INT64),
            ("partition_leader_epoch", partition_leader_epoch, INT32),
            ("producer_id", producer_id, INT64),
            ("producer_epoch", producer_epoch, INT16),
            ("base_sequence", base_sequence, INT32),
        ):
            if not isinstance(value, int) or not lo <= value <= hi:
                raise EncodeError(f"{value!r} out of range for {name}", name)
        now = int(time.time() * 1000)
        if not codec:
            return self.kernel.encode_batch(
                records,
                base_offset,
                now,
                partition_leader_epoch,
                attrs,
                producer_id,
                producer_epoch,
                base_sequence,
            )
        body, count, last_delta, first_ts, max_ts = self.kernel.encode_records(
            records, base_offset, now
        )
        body = _compression.compress(compression, body)
        if len(body) > 0x7FFFFFFF - MIN_BATCH_LENGTH:
            raise EncodeError("the batch would exceed 2147483647 bytes")
        out = bytearray(
            HEADER.pack(
                base_offset,
                MIN_BATCH_LENGTH + len(body),
                partition_leader_epoch,
                2,
                0,
                attrs,
                last_delta,
                first_ts,
                max_ts,
                producer_id,
                producer_epoch,
                base_sequence,
                count,
            )
        )
        out += body
        struct.pack_into(">I", out, 17, self.kernel.crc32c(memoryview(out)[CRC_START:]))
        return bytes(out)

"""The objects of fastkwire.records: records, batches and record columns. Both
implementations build these same classes."""

import struct

from .errors import DecodeError


class Record:
    """One record. `offset` and `timestamp` are absolute (the batch's deltas applied);
    `key` and `value` are bytes or None (None is not b""); `headers` is a list of
    (str, bytes or None). For write_batch, `offset=None` means the record's position in
    the batch and `timestamp=None` the current time."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers")

    def __init__(self, offset=None, timestamp=None, key=None, value=None, headers=None):
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = [] if headers is None else headers

    def _fields(self):
        return (self.offset, self.timestamp, self.key, self.value, self.headers)

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        return type(self) is type(other) and self._fields() == other._fields()

    __hash__ = None

    def __repr__(self):
        return (
            f"{type(self).__name__}(offset={self.offset!r}, timestamp={self.timestamp!r}, "
            f"key={self.key!r}, value={self.value!r}, headers={self.headers!r})"
        )

    def __reduce__(self):
        return (type(self), self._fields())


CONTROL_TYPES = {0: "abort", 1: "commit"}


class ControlRecord(Record):
    """A record of a control batch (a transaction marker). Its key holds the control
    version and type, its value the marker's version and the coordinator epoch."""

    __slots__ = ()

    @property
    def control_type(self):
        """ "abort", "commit", or the number of a type this version does not know."""
        t = struct.unpack_from(">h", self.key, 2)[0]
        return CONTROL_TYPES.get(t, t)

    @property
    def coordinator_epoch(self):
        if self.value is None or len(self.value) < 6:
            return None
        return struct.unpack_from(">i", self.value, 2)[0]


def as_control(records, offset):
    """A control batch's records as ControlRecords (the key must hold version and type)."""
    out = []
    for r in records:
        if r.key is None or len(r.key) < 4:
            raise DecodeError("control record key shorter than 4 bytes", offset)
        out.append(ControlRecord(r.offset, r.timestamp, r.key, r.value, r.headers))
    return out


class RecordBatch:
    """One record batch (magic 2), or one legacy message (magic 0 or 1: a compressed
    wrapper holds its inner messages as `records`; producer fields are -1, the
    partition leader epoch -1, `crc` the message's CRC32)."""

    __slots__ = (
        "base_offset",
        "partition_leader_epoch",
        "magic",
        "crc",
        "compression",
        "timestamp_type",
        "is_transactional",
        "is_control",
        "last_offset_delta",
        "base_timestamp",
        "max_timestamp",
        "producer_id",
        "producer_epoch",
        "base_sequence",
        "records",
    )

    def __init__(
        self,
        base_offset,
        partition_leader_epoch,
        magic,
        crc,
        compression,
        timestamp_type,
        is_transactional,
        is_control,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        records,
    ):
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.magic = magic
        self.crc = crc
        self.compression = compression
        self.timestamp_type = timestamp_type
        self.is_transactional = is_transactional
        self.is_control = is_control
        self.last_offset_delta = last_offset_delta
        self.base_timestamp = base_timestamp
        self.max_timestamp = max_timestamp
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.records = records

    def _fields(self):
        return tuple(getattr(self, n) for n in self.__slots__)

    def __eq__(self, other):
        if not isinstance(other, RecordBatch):
            return NotImplemented
        return self._fields() == other._fields()

    __hash__ = None

    def __repr__(self):
        head = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__[:-1])
        return f"RecordBatch({head}, records=<{len(self.records)} records>)"


class Batches(list):
    """The whole batches of a `records` field, in order. `tail` is the bytes after them
    that do not make a whole batch (a Fetch response cut at its size limit: read them
    again with the rest once it arrives); b"" when the data ended with a whole batch."""

    tail = b""


class BinaryColumn:
    """A column of bytes-or-None values: `data` (uint8 array, the values back to back),
    `offsets` (int32 array of n + 1: value i is data[offsets[i]:offsets[i + 1]]) and
    `nulls` (bool array: True where the value is None)."""

    __slots__ = ("data", "offsets", "nulls")

    def __init__(self, data, offsets, nulls):
        self.data, self.offsets, self.nulls = data, offsets, nulls

    def __len__(self):
        return len(self.nulls)

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError("BinaryColumn index out of range")
        i %= n
        if self.nulls[i]:
            return None
        return self.data[self.offsets[i] : self.offsets[i + 1]].tobytes()

    def to_pylist(self):
        raw = self.data.tobytes()
        offs = self.offsets.tolist()
        return [
            None if null else raw[offs[i] : offs[i + 1]]
            for i, null in enumerate(self.nulls.tolist())
        ]

    def __eq__(self, other):
        if not isinstance(other, BinaryColumn):
            return NotImplemented
        return self.to_pylist() == other.to_pylist()

    __hash__ = None

    def __repr__(self):
        return f"BinaryColumn({self.to_pylist()!r})"

    def to_arrow(self, arrow_type):
        import numpy as np

        pa = _pyarrow()

        n = len(self)
        valid = (
            pa.py_buffer(np.packbits(~self.nulls, bitorder="little")) if self.nulls.any() else None
        )
        return pa.Array.from_buffers(
            arrow_type, n, [valid, pa.py_buffer(self.offsets), pa.py_buffer(self.data)]
        )


class HeaderColumns:
    """Every record's headers as columns: record i's headers are rows
    offsets[i]..offsets[i + 1] of `key` (UTF-8 bytes, never null) and `value`."""

    __slots__ = ("offsets", "key", "value")

    def __init__(self, offsets, key, value):
        self.offsets, self.key, self.value = offsets, key, value

    def to_pylist(self):
        keys = [k.decode() for k in self.key.to_pylist()]
        values = self.value.to_pylist()
        offs = self.offsets.tolist()
        return [
            list(zip(keys[offs[i] : offs[i + 1]], values[offs[i] : offs[i + 1]]))
            for i in range(len(offs) - 1)
        ]


class RecordColumns:
    """Records as columns: `offset` and `timestamp` (int64 arrays), `key` and `value`
    (BinaryColumn), `headers` (HeaderColumns). `tail` as for Batches. `len()`, indexing
    and iteration give Record objects."""

    __slots__ = ("offset", "timestamp", "key", "value", "headers", "tail")

    def __init__(self, offset, timestamp, key, value, headers, tail=b""):
        self.offset, self.timestamp, self.key, self.value = offset, timestamp, key, value
        self.headers, self.tail = headers, tail

    @classmethod
    def from_records(cls, records):
        """Columns of a list of Record (offsets and timestamps must be set)."""
        import numpy as np

        records = list(records)
        headers = [h for r in records for h in r.headers]
        hoffs = np.cumsum([0] + [len(r.headers) for r in records]).astype(np.int32)
        return cls(
            np.array([r.offset for r in records], dtype=np.int64),
            np.array([r.timestamp for r in records], dtype=np.int64),
            binary_column([r.key for r in records]),
            binary_column([r.value for r in records]),
            HeaderColumns(
                hoffs,
                binary_column([k.encode() for k, _ in headers]),
                binary_column([v for _, v in headers]),
            ),
        )

    def __len__(self):
        return len(self.offset)

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError("RecordColumns index out of range")
        i %= n
        h = self.headers
        lo, hi = int(h.offsets[i]), int(h.offsets[i + 1])
        return Record(
            int(self.offset[i]),
            int(self.timestamp[i]),
            self.key[i],
            self.value[i],
            [(h.key[j].decode(), h.value[j]) for j in range(lo, hi)],
        )

    def to_records(self):
        return [
            Record(o, t, k, v, h)
            for o, t, k, v, h in zip(
                self.offset.tolist(),
                self.timestamp.tolist(),
                self.key.to_pylist(),
                self.value.to_pylist(),
                self.headers.to_pylist(),
            )
        ]

    def __iter__(self):
        return iter(self.to_records())

    def __eq__(self, other):
        if isinstance(other, RecordColumns):
            return self.to_records() == other.to_records()
        if isinstance(other, list):
            return self.to_records() == other
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return f"RecordColumns(<{len(self)} records>, tail=<{len(self.tail)} bytes>)"

    def to_arrow(self):
        """A pyarrow RecordBatch (offset, timestamp, key, value, headers) over these
        buffers (the null masks become bitmaps; the rest is shared, not copied)."""
        pa = _pyarrow()

        h = self.headers
        hstruct = pa.StructArray.from_arrays(
            [h.key.to_arrow(pa.string()), h.value.to_arrow(pa.binary())], ["key", "value"]
        )
        headers = pa.ListArray.from_arrays(pa.array(h.offsets), hstruct)
        return pa.RecordBatch.from_arrays(
            [
                pa.array(self.offset),
                pa.array(self.timestamp),
                self.key.to_arrow(pa.binary()),
                self.value.to_arrow(pa.binary()),
                headers,
            ],
            ["offset", "timestamp", "key", "value", "headers"],
        )


def _pyarrow():
    try:
        import pyarrow
    except ImportError:
        raise ImportError("to_arrow needs pyarrow: pip install 'fastkwire[arrow]'") from None
    return pyarrow


def binary_column(values):
    """A BinaryColumn of a list of bytes-or-None."""
    import numpy as np

    nulls = np.array([v is None for v in values], dtype=bool)
    data = b"".join(v for v in values if v is not None)
    offs = np.zeros(len(values) + 1, dtype=np.int32)
    np.cumsum([0 if v is None else len(v) for v in values], out=offs[1:])
    return BinaryColumn(np.frombuffer(data, dtype=np.uint8).copy(), offs, nulls)

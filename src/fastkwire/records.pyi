"""Types of fastkwire.records. Its columns are numpy arrays, typed loosely: numpy is optional."""
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, ClassVar, Literal, NamedTuple

from typing_extensions import Buffer, Self, TypeAlias

_Compression: TypeAlias = Literal["none", "gzip", "snappy", "lz4", "zstd"]
_Header: TypeAlias = tuple[str, bytes | None]

__all__ = ["read_batches", "read_columns", "write_batch", "describe", "crc32c", "implementation", "Record",
           "ControlRecord", "RecordBatch", "Batches", "RecordColumns", "BinaryColumn",
           "HeaderColumns", "default_limit"]

implementation: Literal["cython", "python"]

class Record:
    # None only when writing: the record's position in the batch, the current time.
    offset: int | None
    timestamp: int | None
    key: bytes | None
    value: bytes | None
    headers: list[_Header]
    def __init__(
        self,
        offset: int | None = ...,
        timestamp: int | None = ...,
        key: bytes | None = ...,
        value: bytes | None = ...,
        headers: list[_Header] | None = ...,
    ) -> None: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class ControlRecord(Record):
    @property
    def control_type(self) -> str | int: ...
    @property
    def coordinator_epoch(self) -> int | None: ...

class RecordBatch:
    base_offset: int
    partition_leader_epoch: int
    magic: int
    crc: int
    compression: _Compression
    timestamp_type: int
    is_transactional: bool
    is_control: bool
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records: list[Record]
    def __init__(
        self,
        base_offset: int,
        partition_leader_epoch: int,
        magic: int,
        crc: int,
        compression: _Compression,
        timestamp_type: int,
        is_transactional: bool,
        is_control: bool,
        last_offset_delta: int,
        base_timestamp: int,
        max_timestamp: int,
        producer_id: int,
        producer_epoch: int,
        base_sequence: int,
        records: list[Record],
    ) -> None: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class Batches(list[RecordBatch]):
    tail: bytes

class BinaryColumn:
    data: Any  # numpy uint8 array: the values back to back
    offsets: Any  # numpy int32 array of len(self) + 1
    nulls: Any  # numpy bool array: True where the value is None
    def __init__(self, data: Any, offsets: Any, nulls: Any) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> bytes | None: ...
    def to_pylist(self) -> list[bytes | None]: ...
    def to_arrow(self, arrow_type: Any) -> Any: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class HeaderColumns:
    offsets: Any  # numpy int32 array: record i's headers are rows offsets[i]:offsets[i + 1]
    key: BinaryColumn
    value: BinaryColumn
    def __init__(self, offsets: Any, key: BinaryColumn, value: BinaryColumn) -> None: ...
    def to_pylist(self) -> list[list[_Header]]: ...

class RecordColumns:
    offset: Any  # numpy int64 array
    timestamp: Any  # numpy int64 array
    key: BinaryColumn
    value: BinaryColumn
    headers: HeaderColumns
    tail: bytes
    def __init__(
        self, offset: Any, timestamp: Any, key: BinaryColumn, value: BinaryColumn,
        headers: HeaderColumns, tail: bytes = ...,
    ) -> None: ...
    @classmethod
    def from_records(cls, records: Iterable[Record]) -> Self: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> Record: ...
    def __iter__(self) -> Iterator[Record]: ...
    def to_records(self) -> list[Record]: ...
    def to_arrow(self) -> Any: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

class _Span(NamedTuple):
    name: str
    offset: int
    size: int
    value: object = ...
    children: tuple[_Span, ...] = ...
    decompressed: bool = ...

def read_batches(data: Buffer, *, check_crc: bool = ..., max_decompressed: int | None = ...) -> Batches: ...
def read_columns(
    data: Buffer,
    *,
    check_crc: bool = ...,
    max_decompressed: int | None = ...,
    decompressed_budget: int | None = ...,
) -> RecordColumns: ...
def write_batch(
    records: Sequence[Record] | RecordColumns,
    *,
    base_offset: int = ...,
    compression: _Compression | None = ...,
    producer_id: int = ...,
    producer_epoch: int = ...,
    base_sequence: int = ...,
    is_transactional: bool = ...,
    timestamp_type: Literal[0, 1] = ...,
    partition_leader_epoch: int = ...,
) -> bytes: ...
def describe(data: Buffer, *, max_decompressed: int | None = ..., max_records: int | None = ...) -> list[_Span]: ...
def crc32c(data: Buffer, crc: int = ...) -> int: ...
def default_limit(compressed_size: int) -> int: ...

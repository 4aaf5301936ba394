"""Types of fastkwire.segments (pyarrow has no types: its objects are Any here)."""
import os
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import Any, Literal

from .errors import DecodeError

_Paths = str | os.PathLike[str] | Iterable[str | os.PathLike[str]]
_Offset = int | datetime | None
_Isolation = Literal["read_uncommitted", "read_committed"]

DEFAULT_BLOCK_SIZE: int

class SegmentError(DecodeError):
    file: str
    def __init__(self, reason: str, offset: int, file: str) -> None: ...

class SegmentTask:
    filesystem: Any
    path: str
    topic: str
    partition: int
    base_offset: int | None
    next_base_offset: int | None
    size: int
    last: bool
    start_offset: int | None
    end_offset: int | None
    read_committed: bool
    aborted: tuple[tuple[int, int, int], ...]
    check_crc: bool
    truncated: Literal["error", "skip"]
    block_size: int
    max_decompressed: int | None
    def __init__(self, **fields: Any) -> None: ...

def plan_segments(
    paths: _Paths,
    *,
    filesystem: Any = ...,
    partitions: Iterable[int] | None = ...,
    start_offset: _Offset = ...,
    end_offset: _Offset = ...,
    isolation_level: _Isolation = ...,
    check_crc: bool = ...,
    truncated: Literal["error", "skip"] = ...,
    block_size: int = ...,
    max_decompressed: int | None = ...,
) -> list[SegmentTask]: ...
def read_task(task: SegmentTask) -> Iterator[Any]: ...
def iter_segments(
    paths: _Paths,
    *,
    filesystem: Any = ...,
    partitions: Iterable[int] | None = ...,
    start_offset: _Offset = ...,
    end_offset: _Offset = ...,
    isolation_level: _Isolation = ...,
    check_crc: bool = ...,
    truncated: Literal["error", "skip"] = ...,
    block_size: int = ...,
    max_decompressed: int | None = ...,
) -> Iterator[Any]: ...
def read_segments(
    paths: _Paths,
    *,
    filesystem: Any = ...,
    partitions: Iterable[int] | None = ...,
    start_offset: _Offset = ...,
    end_offset: _Offset = ...,
    isolation_level: _Isolation = ...,
    check_crc: bool = ...,
    truncated: Literal["error", "skip"] = ...,
    block_size: int = ...,
    max_decompressed: int | None = ...,
) -> Any: ...

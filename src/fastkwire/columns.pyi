"""Types of TaskOffsetColumns. Its columns are numpy arrays, typed loosely: numpy is optional."""
from collections.abc import Iterable, Iterator
from typing import Any, ClassVar

from typing_extensions import Self

from ._message_types import StreamsGroupHeartbeatRequest as _Heartbeat

_TaskOffset = _Heartbeat.TaskOffset

class TaskOffsetColumns:
    subtopology_id: list[str]
    partition: Any
    offset: Any
    unknown_tagged_fields: dict[int, dict[int, bytes]]
    def __init__(
        self,
        subtopology_id: Iterable[str] = ...,
        partition: Iterable[int] = ...,
        offset: Iterable[int] = ...,
        unknown_tagged_fields: dict[int, dict[int, bytes]] | None = ...,
    ) -> None: ...
    @classmethod
    def from_list(cls, items: Iterable[_TaskOffset]) -> Self: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> _TaskOffset: ...
    def __iter__(self) -> Iterator[_TaskOffset]: ...
    def __eq__(self, other: object, /) -> bool: ...
    __hash__: ClassVar[None]  # type: ignore[assignment]

def check_lengths(cols: TaskOffsetColumns) -> None: ...

"""Columnar task offsets: StreamsGroupHeartbeatRequest.TaskOffsets and TaskEndOffsets as
three columns instead of one object per entry.

`Cls.decode(data, version, arrays="numpy")` returns these for the two fields, and
encoding accepts them as well as a list of TaskOffset. numpy is imported only when a
column is built.
"""

from . import _bulk
from ._rules import require_numpy
from .errors import EncodeError


class TaskOffsetColumns:
    """Task offsets as columns: `subtopology_id` (list of str), `partition` (int32 array),
    `offset` (int64 array), all the same length.

    `len()`, indexing and iteration give TaskOffset objects; `==` compares with another
    TaskOffsetColumns or with a list of TaskOffset. `unknown_tagged_fields` maps a row
    index to that row's tagged fields unknown to this version ({tag: raw bytes}); it is
    usually empty. The constructor validates and converts the columns (any integer
    array or list whose values fit), raising EncodeError naming the row and column.
    """

    __slots__ = ("subtopology_id", "partition", "offset", "unknown_tagged_fields", "_item")

    def __init__(self, subtopology_id=(), partition=(), offset=(), unknown_tagged_fields=None):
        require_numpy("TaskOffsetColumns")  # its columns are numpy arrays
        self.subtopology_id = _as_list(subtopology_id)
        self.partition = _bulk.column(partition, "int32", "partition")
        self.offset = _bulk.column(offset, "int64", "offset")
        self.unknown_tagged_fields = dict(unknown_tagged_fields or {})
        self._item = None
        check_lengths(self)

    @classmethod
    def _of(cls, subtopology_id, partition, offset, unknown, item):
        """From a decoder: columns already of the right types, no checks."""
        self = object.__new__(cls)
        self.subtopology_id = subtopology_id
        self.partition = partition
        self.offset = offset
        self.unknown_tagged_fields = unknown
        self._item = item
        return self

    @classmethod
    def from_list(cls, items):
        """From a list of TaskOffset."""
        items = _as_list(items)
        unknown = {
            i: dict(t.unknown_tagged_fields) for i, t in enumerate(items) if t.unknown_tagged_fields
        }
        return cls(
            [t.subtopology_id for t in items],
            [t.partition for t in items],
            [t.offset for t in items],
            unknown,
        )

    def __len__(self):
        return len(self.subtopology_id)

    def __getitem__(self, i):
        n = len(self)
        if not -n <= i < n:
            raise IndexError("TaskOffsetColumns index out of range")
        i %= n
        item = self._item or _default_item()
        return item(
            subtopology_id=self.subtopology_id[i],
            partition=int(self.partition[i]),
            offset=int(self.offset[i]),
            unknown_tagged_fields=self.unknown_tagged_fields.get(i),
        )

    def __iter__(self):
        item = self._item or _default_item()
        tags = self.unknown_tagged_fields
        import numpy as np

        for i, (s, p, o) in enumerate(
            zip(
                self.subtopology_id,
                np.asarray(self.partition).tolist(),
                np.asarray(self.offset).tolist(),
            )
        ):
            yield item(subtopology_id=s, partition=p, offset=o, unknown_tagged_fields=tags.get(i))

    def __eq__(self, other):
        if isinstance(other, TaskOffsetColumns):
            import numpy as np

            return (
                self.subtopology_id == other.subtopology_id
                and np.array_equal(self.partition, other.partition)
                and np.array_equal(self.offset, other.offset)
                and _tags(self.unknown_tagged_fields) == _tags(other.unknown_tagged_fields)
            )
        if isinstance(other, (list, tuple)):
            return len(self) == len(other) and all(map(_same_row, self, other))
        return NotImplemented

    __hash__ = None

    def __repr__(self):
        return (
            f"TaskOffsetColumns(subtopology_id={self.subtopology_id!r}, "
            f"partition={self.partition!r}, offset={self.offset!r})"
        )


def _as_list(items):
    """A new list of the items: a list's or tuple's as stored (a subclass's __len__ could
    ask list() to reserve room for 2**62 of them), any other iterable's as it yields them."""
    if isinstance(items, (list, tuple)):
        return _bulk.stored(items)
    return list(iter(items))


def check_lengths(cols):
    n = len(cols.subtopology_id)
    if len(cols.partition) != n or len(cols.offset) != n:
        raise EncodeError(
            f"TaskOffsetColumns: columns differ in length: subtopology_id {n}, "
            f"partition {len(cols.partition)}, offset {len(cols.offset)} (a task_offsets or "
            "task_end_offsets value has one of each a row)"
        )


def _tags(unknown):
    return {i: t for i, t in unknown.items() if t}


def _same_row(a, b):
    # Field by field: TaskOffset classes of the two implementations never compare equal.
    try:
        return (
            a.subtopology_id == b.subtopology_id
            and a.partition == b.partition
            and a.offset == b.offset
            and (a.unknown_tagged_fields or {}) == (b.unknown_tagged_fields or {})
        )
    except AttributeError:
        return False


# The package sets this at import (columns sit below the message classes, so they do
# not import them): the TaskOffset class of the implementation in use.
_default_item_class = None


def _default_item():
    return _default_item_class()

"""numpy glue for bulk integer arrays, shared by both implementations.

numpy is imported only when an array is encoded or `arrays="numpy"` is asked for, so
`import fastkwire` never pays for it. The compiled core reads arrays through the buffer
protocol itself and comes here only for the cold paths: canonical errors and inputs its
fast path does not take (objects without a buffer, exotic formats).
"""

from . import errors as _e
from ._rules import int_value, require_numpy, seq_len  # noqa: F401 - require_numpy: for _core
from ._wire import RANGE
from .errors import EncodeError

CODES = {"int16": "i2", "int32": "i4", "int64": "i8"}


def as_array(items, kind):
    """An integer array (numpy, array.array, ...) for a field of `kind`, as a
    one-dimensional numpy array of any integer dtype (a view where numpy can make one:
    nothing is copied or scanned yet). Raises EncodeError for another shape or a
    non-integer dtype (bool, float, object: never cast silently)."""
    import numpy as np

    arr = np.asarray(items)
    if arr.ndim != 1:
        raise EncodeError(f"expected a one-dimensional array, got {arr.ndim} dimensions")
    if arr.dtype.kind not in "iu":  # "b" (bool), "f", "O", ... are not integers
        raise EncodeError(f"expected an integer array for {kind}, got dtype {arr.dtype}")
    return arr


def check_values(arr, kind):
    """Raise EncodeError for the first value of `arr` (from as_array) out of range for
    `kind`, at its index, in the words the list path uses."""
    import numpy as np

    lo, hi = RANGE[kind]
    if arr.size and not np.can_cast(arr.dtype, CODES[kind], casting="safe"):
        # min/max first: no temporary array unless something is out of range
        if int(arr.min()) < lo or int(arr.max()) > hi:
            index = int(np.argmax((arr < lo) | (arr > hi)))
            raise _e.out_of_range(kind, int(arr[index])).with_prefix(f"[{index}]")


def as_int_array(items, kind):
    """as_array, with every value checked to fit `kind`."""
    arr = as_array(items, kind)
    check_values(arr, kind)
    return arr


def native(items, kind):
    """A validated, fresh C-contiguous native-order array of exactly `kind`. Lists and
    tuples are checked item by item, with the rules of the list path (a subclass is read
    as it stores: its own __len__ and __iter__ are not called)."""
    import numpy as np

    if isinstance(items, (list, tuple)):
        values = []
        for i, v in enumerate(stored(items)):
            try:
                values.append(int_value(kind, v))
            except EncodeError as x:
                raise x.with_prefix(f"[{i}]") from None
        return np.array(values, dtype=CODES[kind])
    return np.array(as_int_array(items, kind), dtype=CODES[kind], order="C")


def stored(items):
    """The items a list or tuple (or a subclass of either) stores, as a new list."""
    return list.copy(items) if isinstance(items, list) else list(tuple.__iter__(items))


def write(out, arr, kind):
    """Append a validated array to bytearray `out` as big-endian integers (one copy)."""
    import numpy as np

    # through a memoryview: `bytearray += ndarray` would be numpy's elementwise add
    out += memoryview(np.ascontiguousarray(arr, dtype=">" + CODES[kind]))


def read(data, pos, n, kind):
    """n big-endian integers at pos: a native-order array that owns its memory."""
    import numpy as np

    return np.frombuffer(data, dtype=">" + CODES[kind], count=n, offset=pos).astype(CODES[kind])


def column_input(items, kind, name):
    """A column of TaskOffsetColumns before its values are read: a list or tuple as it
    is, anything else as_array (so its length is its shape, whatever it claims)."""
    if isinstance(items, (list, tuple)):
        return items
    try:
        return as_array(items, kind)
    except EncodeError as x:
        raise EncodeError(x.reason, name) from None


def length(items):
    """The length of a column_input: a list's or tuple's stored items, an array's shape."""
    if isinstance(items, list):
        return list.__len__(items)
    if isinstance(items, tuple):
        return tuple.__len__(items)
    return items.shape[0]


def column(items, kind, name):
    """A column of TaskOffsetColumns as a fresh native array; errors name the row and column."""
    try:
        return native(items, kind)
    except EncodeError as x:
        raise EncodeError(x.reason, _e._join(x.path, name) if x.path else name) from None


def task_columns(cols):
    """(subtopology ids, int32 column, int64 column, unknown tags) of TaskOffsetColumns,
    as they are written. The lengths are measured first, from the lists' stored items
    and the arrays' shapes (a huge zero-stride column fails before it is converted),
    then each column is checked and copied to a fresh native array of exactly that
    length; the ids stay the list they are (a change to it during encoding is an error)."""
    ids = cols.subtopology_id
    n = seq_len(ids)
    parts = column_input(cols.partition, "int32", "partition")
    offsets = column_input(cols.offset, "int64", "offset")
    if length(parts) != n or length(offsets) != n:
        raise EncodeError(
            f"columns differ in length: subtopology_id {n}, "
            f"partition {length(parts)}, offset {length(offsets)}"
        )
    parts = column(parts, "int32", "partition")
    offsets = column(offsets, "int64", "offset")
    if len(parts) != n or len(offsets) != n:
        raise _e.changed_during_encode()
    tags = cols.unknown_tagged_fields
    if tags is not None and not isinstance(tags, dict):
        raise _e.wrong_type("dict", tags).with_prefix("unknown_tagged_fields")
    return ids, parts, offsets, tags

"""The rules both engines apply, in one place: what a value of each primitive type may
be, how unknown tags are checked and merged, what decode's options and a version may
be. The pure readers and writers (_pure), the compiled core (_core, _engine) and the
message classes import them from here; none of them repeats one.
"""

from . import errors as _e
from ._wire import MAX_MESSAGE, MAX_TAG, MAX_VERSION, NUMPY_ARRAYS, RANGE, RECORD_VIEWS
from .errors import EncodeError, UnsupportedVersionError


def require_numpy(what='arrays="numpy"'):
    """An ImportError that names the extra when numpy is missing (`what` needs it)."""
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise ImportError(f"{what} needs numpy: pip install 'fastkwire[numpy]'") from None


def index(v):
    """v.__index__(), which must give an int (an int subclass counts as its value)."""
    r = v.__index__()
    if type(r) is not int:
        if not isinstance(r, int):
            raise EncodeError(
                f"__index__ of {type(v).__name__} returned {type(r).__name__}, not int"
            )
        r = int.__index__(r)
    return r


def int_value(kind, v):
    if type(v) is not int:
        if isinstance(v, bool) or not hasattr(v, "__index__"):
            raise _e.wrong_type("int", v)
        v = index(v)
    lo, hi = RANGE[kind]
    if not lo <= v <= hi:
        raise _e.out_of_range(kind, v)
    return v


def float_value(v):
    if not isinstance(v, (float, int)) or isinstance(v, bool):
        raise _e.wrong_type("float", v)
    try:
        return float(v)
    except OverflowError:  # an int too large for a double
        raise _e.out_of_range("float64", v) from None


_UUID = None


def uuid_bytes(v):
    """The 16 bytes of a UUID (a subclass could make .bytes anything)."""
    global _UUID
    if _UUID is None:  # uuid on first use: it pulls platform and re into `import fastkwire`
        from uuid import UUID as _UUID
    if not isinstance(v, _UUID):
        raise _e.wrong_type("uuid.UUID", v)
    raw = v.bytes
    if type(raw) is not bytes or len(raw) != 16:
        raise EncodeError(f"{type(v).__name__}.bytes is not 16 bytes")
    return raw


def raw_bytes(b):
    """A bytes, bytearray or memoryview value (or subclass) as bytes, read once through
    its buffer: every byte of it whatever its item format, and never through a
    subclass's own __len__ or __bytes__."""
    if not isinstance(b, (bytes, bytearray, memoryview)):
        raise _e.wrong_type("bytes", b)
    try:
        view = memoryview(b)
    except ValueError:  # a released memoryview
        raise EncodeError(f"{type(b).__name__} cannot be read (released)") from None
    with view:
        if view.nbytes > MAX_MESSAGE:  # before the copy: a view can claim any size
            raise _e.message_too_large()
        return view.tobytes()


def seq_len(items):
    """The number of items a list or tuple holds. A subclass is read as what it stores:
    its own __len__ (which could say anything) is never called, nor __getitem__ or
    __iter__ (see item_at)."""
    t = type(items)
    if t is list or t is tuple:
        return len(items)
    if isinstance(items, list):
        return list.__len__(items)
    if isinstance(items, tuple):
        return tuple.__len__(items)
    raise _e.wrong_type("list", items)


def tag_items(unknown):
    """[(tag, bytes)] of an unknown_tagged_fields dict: tags are ints in 0-2147483647
    (what a reader accepts), values bytes-like. A dict subclass is read as it stores."""
    if not isinstance(unknown, dict):
        raise EncodeError(
            f"expected a dict of tag -> bytes, got {type(unknown).__name__}",
            "unknown_tagged_fields",
        )
    out = []
    for tag, payload in list(dict.items(unknown)):
        if type(tag) is not int or not 0 <= tag <= MAX_TAG:
            shown = _e.show(tag) if type(tag) is int else f"of type {type(tag).__name__}"
            raise EncodeError(f"tag {shown} is not an int in 0-2147483647", "unknown_tagged_fields")
        if not isinstance(payload, (bytes, bytearray, memoryview)):
            raise EncodeError(
                f"tag {tag}: expected bytes, got {type(payload).__name__}", "unknown_tagged_fields"
            )
        try:
            out.append((tag, payload if type(payload) is bytes else raw_bytes(payload)))
        except EncodeError as x:
            raise EncodeError(f"tag {tag}: {x.reason}", "unknown_tagged_fields") from None
    return out


def unknown_tags(value):
    """unknown_tagged_fields as a struct keeps it: None when empty, else the dict itself,
    its tags and values checked. Whether a tag is also a known field depends on the
    version, so encoding checks that."""
    if not value:
        return None
    tag_items(value)
    return value


def merge_tags(known, unknown):
    """The tagged fields to write, checked, in tag order.

    `known` is [(tag, payload)] of every tagged field the struct knows at this version,
    the payload None where the field keeps its default (it is then not written);
    `unknown` is the struct's {tag: bytes}, none of whose tags may be a known one (a
    reader would take it for that field)."""
    fields = [f for f in known or () if f[1] is not None]
    if not unknown:
        return fields
    taken = {tag for tag, _ in known or ()}
    for tag, payload in tag_items(unknown):
        if tag in taken:
            raise EncodeError(f"tag {tag} is also a known field", "unknown_tagged_fields")
        fields.append((tag, payload))
    fields.sort()
    return fields


def check_version(version):
    """A version argument: an exact int in 0-32767 (not a bool, an int subclass or
    anything with __index__), else UnsupportedVersionError. The compiled engine gives
    this same error for any value (its version_of calls this to say it)."""
    if type(version) is not int or not 0 <= version <= MAX_VERSION:
        raise UnsupportedVersionError(f"version must be an int in 0-32767, not {_e.show(version)}")
    return version


def check_offset(offset, end):
    if type(offset) is not int:
        raise ValueError(f"offset must be an int, not {type(offset).__name__}")
    if not 0 <= offset <= end:
        raise ValueError(f"offset {offset} is outside the data (0-{end})")


def byte_view(data):
    """The input as bytes, whatever buffer it came in (one copy for anything but bytes),
    so that lengths and offsets count bytes and slices have .decode()."""
    if type(data) is bytes:
        return data
    # A bytearray's or a view's bytes taken without exporting its buffer: on free-threaded
    # 3.13 the export counts are not atomic, so threads that share one and each made a view
    # of it could release it under the others.
    if type(data) is bytearray:
        return bytes(data[:])  # the slice is a private copy: exporting it races with no one
    if type(data) is memoryview and data.c_contiguous:
        return data.tobytes()
    return memoryview(data).cast("B").tobytes()


def check_arrays(arrays):
    """`arrays=` of decode: "list" (default) or "numpy"; returns a flag."""
    if arrays == "list":
        return 0
    if arrays == "numpy":
        require_numpy()
        return NUMPY_ARRAYS
    raise ValueError(f'arrays must be "list" or "numpy", not {arrays!r}')


def decode_options(arrays, records):
    """The flags of decode's `arrays=` and `records=` ("bytes", the default, or "view")."""
    flags = 0 if arrays == "list" else check_arrays(arrays)
    if records == "view":
        return flags | RECORD_VIEWS
    if records != "bytes":
        raise ValueError(f'records must be "bytes" or "view", not {records!r}')
    return flags


def check_type_name(type_name):
    if type_name not in PRIMITIVE_TYPES:
        raise ValueError(f"unknown primitive type {type_name!r}")


def parse_array_type(type_name):
    """'compact_nullable_array[int32]' -> (compact, nullable, 'int32')."""
    prefix, _, rest = type_name.partition("[")
    compact, nullable = _ARRAY_PREFIXES[prefix]
    return compact, nullable, rest.rstrip("]")


# The primitive API's type names (encode(type, value) and decode(type, data) of _pure
# and _core: the primitive test vectors and tools).
_SCALARS = (
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "float64",
    "bool",
    "uuid",
    "uvarint",
    "string",
    "nullable_string",
    "compact_string",
    "compact_nullable_string",
    "bytes",
    "nullable_bytes",
    "compact_bytes",
    "compact_nullable_bytes",
    "tagged_fields",
)
_ELEMENTS = ("int16", "int32", "int64", "string")
_ARRAY_PREFIXES = {
    "array": (False, False),
    "nullable_array": (False, True),
    "compact_array": (True, False),
    "compact_nullable_array": (True, True),
}
PRIMITIVE_TYPES = _SCALARS + tuple(f"{p}[{e}]" for p in _ARRAY_PREFIXES for e in _ELEMENTS)

"""The wire table: every fact of Kafka's wire format that more than one part of the
package uses, written once. Imports nothing.

The engines, the layouts, explain, the record kernels and the batch layer read these;
the compiled modules check at import that their enums say the same (a mismatch is an
ImportError, never a silent disagreement).
"""

from collections import namedtuple

# ---------------------------------------------------------------- field kinds
# How the engines read and write a field. The compiled engine's enum (_engine.pyx)
# numbers them the same way.
(
    K_BOOL,
    K_I8,
    K_I16,
    K_I32,
    K_I64,
    K_U16,
    K_U32,
    K_F64,
    K_UUID,
    K_STRING,
    K_BYTES,
    K_STRUCT,
    K_STRUCTS,
    K_INTS,
    K_STRINGS,
    K_SCALARS,
) = range(16)

# How a field's default is tested and made (_engine.pyx's enum).
D_VALUE = 0  # a shared immutable value, compared with ==
D_IS = 1  # None, True or False: compared by identity
D_LIST = 2  # a new empty list; "default" means empty
D_NEW = 3  # a new struct of defaults (never-null struct fields); compared with ==


# A primitive type of the schemas: its kind, its width on the wire when fixed, the
# (lowest, highest) of an integer type, and its struct format (big-endian) when fixed.
# (collections, not typing: `import fastkwire` does not pay for typing.)
Primitive = namedtuple("Primitive", "kind width range fmt")


PRIMITIVES = {
    "bool": Primitive(K_BOOL, 1, None, "?"),
    "int8": Primitive(K_I8, 1, (-(1 << 7), (1 << 7) - 1), "b"),
    "int16": Primitive(K_I16, 2, (-(1 << 15), (1 << 15) - 1), "h"),
    "int32": Primitive(K_I32, 4, (-(1 << 31), (1 << 31) - 1), "i"),
    "int64": Primitive(K_I64, 8, (-(1 << 63), (1 << 63) - 1), "q"),
    "uint16": Primitive(K_U16, 2, (0, (1 << 16) - 1), "H"),
    "uint32": Primitive(K_U32, 4, (0, (1 << 32) - 1), "I"),
    "float64": Primitive(K_F64, 8, None, "d"),
    "uuid": Primitive(K_UUID, 16, None, None),
    "string": Primitive(K_STRING, None, None, None),
    "bytes": Primitive(K_BYTES, None, None, None),
    "records": Primitive(K_BYTES, None, None, None),  # bytes holding record batches
}
WIDTH = {name: p.width for name, p in PRIMITIVES.items() if p.width is not None}
RANGE = {name: p.range for name, p in PRIMITIVES.items() if p.range is not None}
# The element types of integer arrays read in bulk (one struct call, or numpy).
BULK_INTS = ("int16", "int32", "int64")


def min_size(type_name: str, compact: bool) -> int:
    """Fewest bytes a value of a primitive type takes (for "a count fits the bytes left")."""
    width = WIDTH.get(type_name)
    if width is not None:
        return width
    if type_name == "string":
        return 1 if compact else 2  # an empty string: its length
    return 1 if compact else 4  # bytes, records


# ---------------------------------------------------------------- limits

MAX_VERSION = 0x7FFF  # an API version is an int16
MAX_STRING = 0x7FFF  # a string's length is an int16
MAX_MESSAGE = 0x7FFFFFFF  # a frame's size is an int32
MAX_TAG = 0x7FFFFFFF  # a tag is an int32 (Kafka reads larger ones as negative)
# The longest array or bytes value a length can carry: an int32, or a compact one (an
# unsigned varint of n + 1, at most 32 bits).
MAX_LENGTH = (0x7FFFFFFF, 0xFFFFFFFE)

# ---------------------------------------------------------------- decode options

NUMPY_ARRAYS = 1  # arrays="numpy"
RECORD_VIEWS = 2  # records="view"

# ---------------------------------------------------------------- record batches

# RecordBatch v2's header (61 bytes, big-endian), field by field: (name, struct format).
# The batch length counts the bytes after its own field; the CRC (CRC32C) covers the
# bytes from the attributes to the end; the record count is outside the compression.
BATCH_HEADER = (
    ("base_offset", "q"),
    ("batch_length", "i"),
    ("partition_leader_epoch", "i"),
    ("magic", "b"),
    ("crc", "I"),
    ("attributes", "h"),
    ("last_offset_delta", "i"),
    ("base_timestamp", "q"),
    ("max_timestamp", "q"),
    ("producer_id", "q"),
    ("producer_epoch", "h"),
    ("base_sequence", "i"),
    ("record_count", "i"),
)
_SIZES = {"b": 1, "h": 2, "i": 4, "I": 4, "q": 8}
# Where each header field starts.
BATCH_OFFSETS = {}
_at = 0
for _name, _fmt in BATCH_HEADER:
    BATCH_OFFSETS[_name] = _at
    _at += _SIZES[_fmt]
BATCH_HEADER_SIZE = _at  # 61
del _at, _name, _fmt
BATCH_CRC_START = BATCH_OFFSETS["attributes"]  # 21
# The smallest record: length, attributes, timestamp delta, offset delta, key length,
# value length, header count, one byte each; a header: key and value lengths.
MIN_RECORD = 7
MIN_HEADER = 2

# A legacy message's head (magic 0 and 1): (name, bytes). Magic 1 then has an int64
# timestamp; both then have key and value, each behind an int32 length (-1: null).
LEGACY_HEAD = (("offset", 8), ("message_size", 4), ("crc", 4), ("magic", 1), ("attributes", 1))

# ---------------------------------------------------------------- bulk structs

# A TaskOffset row in columns (arrays="numpy"): a string, then int32 partition and int64
# offset, then (flexible versions) its tagged fields; the names for error paths.
TASK_OFFSET_ROW = ">iq"
TASK_OFFSET_FIELDS = ("subtopology_id", "partition", "offset", "")

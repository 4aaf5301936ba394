"""Wire primitives against tests/vectors/primitives.json, in both implementations."""

import json
import math
import uuid
from pathlib import Path

import pytest

from fastkwire.errors import DecodeError, EncodeError

VECTORS = json.loads((Path(__file__).parent / "vectors" / "primitives.json").read_text())["vectors"]
GOOD = [v for v in VECTORS if "value" in v]
BAD = [v for v in VECTORS if "error" in v]


def _value(v):
    if isinstance(v, dict):
        if "hex" in v:
            return bytes.fromhex(v["hex"])
        if "uuid" in v:
            return uuid.UUID(v["uuid"])
        if "tags" in v:
            return {int(k): bytes.fromhex(x) for k, x in v["tags"].items()}
    return v


def _id(v):
    return f"{v['type']}:{v['hex'][:24]}"


@pytest.mark.parametrize("vec", GOOD, ids=_id)
def test_decode_and_encode(core, vec):
    raw = bytes.fromhex(vec["hex"])
    expected = _value(vec["value"])
    value, end = core.decode(vec["type"], raw)
    assert end == len(raw)
    assert value == expected and type(value) is type(expected)
    if isinstance(expected, float):
        assert math.copysign(1, value) == math.copysign(1, expected)
    assert core.encode(vec["type"], expected) == raw


@pytest.mark.parametrize("vec", BAD, ids=_id)
def test_malformed(core, vec):
    raw = bytes.fromhex(vec["hex"])
    with pytest.raises(DecodeError) as info:
        core.decode(vec["type"], raw)
    assert info.value.offset == vec["error"]["offset"]
    assert info.value.reason == vec["error"]["reason"]


@pytest.mark.parametrize("data", [bytearray(b"\x00\x03abc"), memoryview(b"zz\x00\x03abc")[2:]])
def test_decode_accepts_buffers(core, data):
    assert core.decode("string", data) == ("abc", 5)


def test_decode_at_offset(core):
    assert core.decode("int16", b"\xff\x00\x07", 1) == (7, 3)
    with pytest.raises(ValueError, match="outside the data"):
        core.decode("int16", b"\x00\x07", 3)
    with pytest.raises(ValueError, match="outside the data"):
        core.decode("int16", b"\x00\x07", -1)


OUT_OF_RANGE = [
    ("int8", 128),
    ("int8", -129),
    ("int16", 1 << 15),
    ("int16", -(1 << 15) - 1),
    ("int32", 1 << 31),
    ("int32", -(1 << 31) - 1),
    ("int64", 1 << 63),
    ("int64", -(1 << 63) - 1),
    ("uint16", -1),
    ("uint16", 1 << 16),
    ("uint32", -1),
    ("uint32", 1 << 32),
    ("uvarint", -1),
    ("uvarint", 1 << 32),
    ("compact_array[int32]", [0, 1 << 31]),
    ("array[int16]", [1 << 15]),
]


@pytest.mark.parametrize("type_name,value", OUT_OF_RANGE)
def test_encode_out_of_range(core, type_name, value):
    with pytest.raises(EncodeError, match="out of range"):
        core.encode(type_name, value)


def test_encode_error_names_array_index(core):
    with pytest.raises(EncodeError) as info:
        core.encode("compact_array[int32]", [1, 2, 1 << 40])
    assert info.value.path == "[2]"


WRONG_TYPE = [
    ("int32", "1"),
    ("int32", 1.0),
    ("int32", True),
    ("int16", None),
    ("bool", 1),
    ("string", b"x"),
    ("string", None),
    ("compact_string", 5),
    ("bytes", "x"),
    ("uuid", "00010203-0405-0607-0809-0a0b0c0d0e0f"),
    ("array[int32]", "12"),
    ("compact_array[int32]", None),
    ("array[string]", ["a", None]),
]


@pytest.mark.parametrize("type_name,value", WRONG_TYPE)
def test_encode_wrong_type(core, type_name, value):
    with pytest.raises(EncodeError):
        core.encode(type_name, value)


def test_string_limits(core):
    # 16383 two-byte characters: 32766 UTF-8 bytes behind a 3-byte length varint
    assert len(core.encode("compact_string", "é" * 16383)) == 3 + 32766
    with pytest.raises(EncodeError, match="exceeds 32767"):
        core.encode("string", "x" * 32768)
    with pytest.raises(EncodeError, match="not encodable"):
        core.encode("compact_string", "\ud800")


def test_index_objects_are_ints(core):
    class Index:
        def __index__(self):
            return 7

    assert core.encode("int32", Index()) == b"\x00\x00\x00\x07"


def test_tagged_field_checks(core):
    with pytest.raises(EncodeError, match="expected bytes"):
        core.encode("tagged_fields", {1: "text"})
    with pytest.raises(EncodeError, match="not an int"):
        core.encode("tagged_fields", {-1: b""})
    assert core.encode("tagged_fields", {9: b"\x01", 2: b""}) == b"\x02\x02\x00\x09\x01\x01"


def test_unknown_type_name(core):
    with pytest.raises(ValueError, match="unknown primitive type"):
        core.encode("int128", 1)

"""Hostile Python values through both encoders: the encode side of the differential fuzzer.

`check(seed)` builds, from one seed, the same message twice, once from the pure and
once from the compiled classes. Each field gets a valid value or, at random, a hostile
one; then the message is encoded in one way: `encode`, `encode_into` a buffer at an
offset, a request or response frame, or a wire primitive on its own. Both
implementations must give the same bytes or fail with the same exception class, and
`encode_into` must leave the two buffers alike (untouched on error). Bytes that were
produced must read back, in both, through fuzz/differential.py's decode oracle (which
also re-encodes them). Anything else raises Disagreement; a crash is a finding too
(tools/asan.sh runs this loop under AddressSanitizer).

The hostile values: ints out of range, huge (10**5000) or of the wrong type (bool,
float, str, None); int subclasses; objects whose __index__ returns a str, a huge int or
an int subclass, or raises; list and tuple subclasses whose __len__, __getitem__ and
__iter__ lie (claiming 0 to 2**62 items); strings too long, not encodable, of str
subclasses; numpy arrays of every integer dtype, byte order and stride, zero-stride
views claiming 2**30 to 2**62 items, 2-D, float, bool and object arrays; array.array;
TaskOffsetColumns whose columns were replaced after construction (a lying or longer
id list, a huge zero-stride column) or whose tag dict changes the ids while it is read;
unknown tagged fields whose tags collide with known ones, are negative or past
2**31-1, or whose values are not bytes; values whose __index__ or __eq__ grows,
shrinks, clears or reverses an array of the same message while it is encoded;
encode_into buffers that are read-only, non-contiguous, too small or of other item
types, at offsets that are negative, past the end, 2**70, floats or None; versions
out of range, past 64 bits, negative, of the wrong type or int subclasses (a version's
error must have the same class and the same message in both); bytes,
bytearray and memoryview values (released, non-contiguous, of other formats, or a
zero-stride view of 2**31 bytes) for the primitives.
"""

from __future__ import annotations

import array
import random
import sys
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential as D  # noqa: E402
from fastkwire import _pure, _rules, _schema  # noqa: E402
from fastkwire.columns import TaskOffsetColumns  # noqa: E402
from fastkwire.errors import UnsupportedVersionError  # noqa: E402

try:
    from fastkwire import _core
except ImportError:
    _core = None

try:
    import numpy as np
except ImportError:
    np = None

PY, CY = D.PY, D.CY
Disagreement = D.Disagreement
RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
NAMES = sorted(D.classes())
# Every tag some schema defines: set in unknown_tagged_fields, one a struct knows is refused.
KNOWN_TAGS = tuple(
    sorted(
        {
            f.tag
            for m in _schema.all_messages()
            for s in (m.root, *m.structs)
            for f in s.fields
            if f.tag is not None
        }
    )
)
HUGE = 10**5000  # repr() of it raises: error messages must not try


# ---------------------------------------------------------------- hostile objects


class IntSub(int):
    """An int subclass; `lying` ones say another value through __index__ and __eq__."""

    lying = False

    def __index__(self):
        return int(self) + 1 if self.lying else int(self)

    def __eq__(self, other):
        return True if self.lying else int(self) == other

    __hash__ = int.__hash__


class Index:
    """__index__ gives `value` (of any type), or raises it when it is an exception class."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        if isinstance(self.value, type) and issubclass(self.value, BaseException):
            raise self.value("from __index__")
        return self.value

    def __repr__(self):  # the same in both implementations' messages (no address)
        return f"Index({self.value!r})"


class Mutating:
    """An int whose __index__ and __eq__ first change one array of the message."""

    def __init__(self, maker, which, op, value):
        self.maker, self.which, self.op, self.value = maker, which, op, value

    def __index__(self):
        self.maker.mutate(self.which, self.op)
        return self.value

    def __eq__(self, other):
        self.maker.mutate(self.which, self.op)
        return False

    __hash__ = None


class LyingList(list):
    """A list whose __len__, __getitem__ and __iter__ disagree with what it holds."""

    def __init__(self, items, claim):
        super().__init__(items)
        self.claim = claim

    def __len__(self):
        return self.claim

    def __getitem__(self, i):
        raise IndexError("a lying list")

    def __iter__(self):
        return iter([0] * 3)


class LyingTuple(tuple):
    def __new__(cls, items, claim):
        self = super().__new__(cls, items)
        self.claim = claim
        return self

    def __len__(self):
        return self.claim

    def __getitem__(self, i):
        raise IndexError("a lying tuple")


class StrSub(str):
    pass


class BytesSub(bytes):
    def __len__(self):
        return 3

    def __bytes__(self):
        return b"lie"


class TagDict(dict):
    """A tag dict whose get (how TaskOffsetColumns' row tags are read) changes an array."""

    def __init__(self, items, maker, which, op):
        super().__init__(items)
        self.maker, self.which, self.op = maker, which, op

    def get(self, key, default=None):
        self.maker.mutate(self.which, self.op)
        return super().get(key, default)


class ArrayOnly:
    """An array through __array__ alone, without the buffer protocol."""

    def __init__(self, arr):
        self.arr = arr

    def __array__(self, dtype=None, copy=None):
        return self.arr


class BadUUID(uuid.UUID):
    @property
    def bytes(self):
        return b"short"


def zero_stride(n, dtype):
    """A numpy view of n items that all share one: any length for a few bytes."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=(n,), strides=(0,))


# ---------------------------------------------------------------- building a message


class Maker:
    """Builds one message from one seed with one implementation's classes. The same
    seed makes the same choices in the same order, whatever the module."""

    def __init__(self, mod, seed):
        self.mod = mod
        self.rng = random.Random(seed)
        self.lists = []  # every list made, in order: what Mutating values change
        self.hostility = self.rng.choice((0.0, 0.02, 0.1, 0.3))

    def hostile(self):
        return self.rng.random() < self.hostility

    def mutate(self, which, op):
        if not self.lists:
            return
        lst = self.lists[which % len(self.lists)]
        if op == "grow":
            lst.extend(list.copy(lst) * 3)
        elif op == "shrink" and list.__len__(lst):
            list.pop(lst)
        elif op == "clear":
            list.clear(lst)
        elif op == "reverse":
            list.reverse(lst)

    def keep(self, lst):
        self.lists.append(lst)
        return lst

    def mutating(self, value):
        op = self.rng.choice(("grow", "shrink", "clear", "reverse"))
        return Mutating(self, self.rng.randrange(64), op, value)

    # -- scalars
    def int_value(self, kind):
        lo, hi = RANGES[kind]
        r = self.rng
        if not self.hostile():
            return r.choice((0, 1, -1, lo, hi, r.randint(lo, hi))) if lo < 0 else r.randint(lo, hi)
        v = r.randint(lo, hi)
        return r.choice(
            (
                lo - 1,
                hi + 1,
                2**64,
                -(2**64),
                HUGE,
                True,
                1.5,
                "1",
                None,
                IntSub(v),
                _lying_int(v),
                Index(v),
                Index("7"),
                Index(2**70),
                Index(IntSub(v)),
                Index(True),
                Index(ValueError),
                Index(None),
                self.mutating(v),
                np.int64(v) if np is not None else v,
                np.uint64(2**64 - 1) if np is not None else v,
            )
        )

    def string(self):
        r = self.rng
        if not self.hostile():
            return r.choice(("", "g", "h\u00e9", "x" * r.randint(0, 40), "\U0001f600"))
        return r.choice(
            (
                None,
                StrSub("s"),
                b"bytes",
                5,
                "x" * 32767,
                "x" * 32768,
                "\u00e9" * 16384,
                "\ud800",
                "a\x00b",
                Index(3),
            )
        )

    def bool_value(self):
        if not self.hostile():
            return self.rng.random() < 0.5
        return self.rng.choice((0, 1, None, "True", IntSub(1), Index(1), self.mutating(1)))

    # -- arrays
    def container(self, items):
        """items as a list, or at random as something else that claims to be an array."""
        r = self.rng
        if not self.hostile():
            return self.keep(items)
        claim = r.choice((0, 1, 5, 2**31, 2**62))
        return r.choice(
            (
                lambda: tuple(items),
                lambda: self.keep(LyingList(items, claim)),
                lambda: LyingTuple(items, claim),
                lambda: None,
                lambda: {0: 1},
                lambda: iter(items),
                lambda: "abc",
                lambda: self.keep(items + [None]),
                lambda: self.keep(items + [7]),
            )
        )()

    def int_array(self, kind):
        r = self.rng
        n = r.randint(0, 5)
        if np is not None and self.hostile() and r.random() < 0.6:
            return self.numpy_array(kind, n)
        if self.hostile() and r.random() < 0.3:
            code = r.choice("bhiqBHIQd")
            hi = {"b": 127, "B": 255, "h": 32767, "H": 65535}.get(code, 1000)
            return array.array(code, [r.randint(0, hi) for _ in range(n)])
        return self.container([self.int_value(kind) for _ in range(n)])

    def numpy_array(self, kind, n):
        r = self.rng
        lo, hi = RANGES[kind]
        dtype = np.dtype(r.choice("bBhHiIqQ")).newbyteorder(r.choice("<>="))
        info = np.iinfo(dtype)
        choice = r.randrange(8)
        if choice == 0:  # claims more items than any message may hold: fails before a copy
            return zero_stride(r.choice((2**30, 2**31, 2**32 - 1, 2**32, 2**40)), dtype)
        if choice == 1:
            return np.zeros((2, 2), dtype)
        if choice == 2:
            return np.array([1.5] * n) if r.random() < 0.5 else np.array([True] * n)
        if choice == 3:
            return np.array([1, "x"], dtype=object)
        low, high = max(lo, int(info.min)), min(hi, int(info.max))
        if r.random() < 0.2:  # a value out of the field's range, where the dtype has one
            low, high = int(info.min), int(info.max)
        values = [r.randint(low, high) for _ in range(2 * n)]
        arr = np.array(values, dtype=dtype)
        if r.random() < 0.2:
            return ArrayOnly(r.choice((arr, zero_stride(2**40, dtype))))
        if choice == 4:
            return arr[::2]
        if choice == 5:
            return arr[::-1]
        if choice == 6:
            return zero_stride(n, dtype)
        return arr

    def struct_array(self, message, field, version):
        n = self.rng.randint(0, 3) if self.rng.random() < 0.8 else 0
        items = [self.struct(message, field.struct, version) for _ in range(n)]
        return self.container(items)

    # -- structs
    def struct(self, message, struct, version):
        cls = self.struct_class(message, struct)
        kwargs = {}
        for f in struct.fields:
            present = f.present(version)
            if not present and not self.hostile():
                continue
            kwargs[f.py_name] = self.value(message, f, version)
        if message.is_flexible(version) and self.rng.random() < 0.3:
            kwargs["unknown_tagged_fields"] = self.tags(safe=True)
        obj = cls(**kwargs)  # what it raises is an outcome too: see _encode
        if message.is_flexible(version) and self.hostile():
            obj._unknown = self.tags(safe=False)  # past the constructor's checks
        return obj

    def struct_class(self, message, struct):
        cls = getattr(self.mod, message.name)
        return cls if struct is message.root else getattr(cls, struct.name)

    def value(self, message, f, version):
        r = self.rng
        nullable = f.is_nullable(version)
        if f.is_struct:
            if f.is_array:
                items = self.struct_array(message, f, version)
                if f.struct.name == "TaskOffset" and r.random() < 0.5 and isinstance(items, list):
                    return self.columns(items)
                return items
            if nullable and r.random() < 0.3:
                return None
            if self.hostile():
                return r.choice((7, "x", []))
            return self.struct(message, f.struct, version)
        t = f.element_type
        if f.is_array:
            if t == "string":
                return self.container([self.string() for _ in range(r.randint(0, 3))])
            if t == "uuid":
                return self.container([self.uuid_value() for _ in range(r.randint(0, 3))])
            return self.int_array(t)
        if t == "string":
            return None if nullable and r.random() < 0.2 else self.string()
        if t == "bool":
            return self.bool_value()
        if t == "uuid":
            return self.uuid_value()
        if t == "float64":
            return r.choice((0.0, 1.5, -2.0, 1e308, float("inf"), 10**400, "x", True))
        if t in ("bytes", "records"):
            if nullable and r.random() < 0.2:
                return None
            return r.choice((b"", b"\x01\x02", bytearray(b"ab"), memoryview(b"abc"), "x", 5))
        return self.int_value(t)

    def uuid_value(self):
        """A uuid, sometimes something that only looks like one."""
        r = self.rng
        if self.hostile():
            return r.choice(("00000000-0000-0000-0000-000000000000", 0, b"\0" * 16, None))
        return uuid.UUID(int=r.getrandbits(128))

    def columns(self, items):
        """TaskOffsetColumns of the rows, then (sometimes) tampered with."""
        r = self.rng
        try:
            cols = TaskOffsetColumns.from_list(items)
        except Exception:  # noqa: BLE001 - hostile rows: the constructor refused them
            return items
        if not self.hostile():
            return cols
        n = len(cols.subtopology_id)
        op = r.randrange(7)
        if op == 0:
            cols.subtopology_id = self.keep(
                LyingList(cols.subtopology_id, r.choice((0, 2**31, 2**62)))
            )
        elif op == 1:
            cols.subtopology_id = self.keep(cols.subtopology_id + ["extra"] * r.randint(1, 3))
        elif op == 2 and np is not None:
            cols.partition = zero_stride(r.choice((n, 2**40, 2**59)), np.int64)
        elif op == 3:
            cols.offset = [1] * (n + 1)
        elif op == 4:
            cols.subtopology_id = tuple(cols.subtopology_id)
        elif op == 5:
            cols.unknown_tagged_fields = TagDict(
                {0: {900: b"x"}}, self, r.randrange(64), r.choice(("grow", "shrink", "clear"))
            )
            self.keep(cols.subtopology_id)
        else:
            cols.unknown_tagged_fields = r.choice(
                ({0: {-1: b""}}, {0: {1: "x"}}, [1], {0: 5}, None)
            )
        return cols

    def tags(self, safe):
        r = self.rng
        if safe:
            return r.choice(({900: b"\x01\x02"}, {max(KNOWN_TAGS) + 4: b"", 2**31 - 1: b"x"}, {}))
        return r.choice(
            (
                {r.choice(KNOWN_TAGS): b"\x01"},
                {-1: b""},
                {2**31: b""},
                {2**32: b""},
                {"a": b""},
                {5: "text"},
                {5: memoryview(b"abcd")[::2]},
                {5: bytearray(b"ab")},
                {5: BytesSub(b"abcdef")},
                {True: b""},
                [(5, b"")],
                {5: None},
                {HUGE: b""},
            )
        )


def _lying_int(v):
    x = IntSub(v)
    x.lying = True
    return x


# ---------------------------------------------------------------- the oracle


def outcome(fn):
    """("ok", value) or ("error", exception class); for a bad version, the class and
    the message (both engines must say the same about any version)."""
    try:
        return ("ok", fn())
    except UnsupportedVersionError as e:
        return ("error", type(e), str(e))
    except Exception as e:  # noqa: BLE001 - the class is what is compared
        return ("error", type(e))


def _pick_message(rng):
    name = rng.choice(NAMES)
    cls = getattr(PY, name)
    return _schema.load(name), rng.randint(cls.MIN_VERSION, cls.MAX_VERSION)


def build(mod, seed):
    """(message, how it is encoded) for one implementation; raises what construction raised."""
    maker = Maker(mod, seed)
    r = maker.rng
    message, version = _pick_message(r)
    msg = maker.struct(message, message.root, version)
    if maker.hostile():
        version = r.choice(HOSTILE_VERSIONS + (version, IntSub(version), Index(version)))
    return maker, message, msg, version


# Versions no encoder takes: each must be the pure codec's UnsupportedVersionError,
# word for word, from either implementation.
HOSTILE_VERSIONS = (
    -1,
    99,
    32767,
    32768,
    2**31,
    2**32,
    2**40,
    2**63 - 1,
    2**63,
    2**64,
    2**70,
    -(2**63),
    -(2**63) - 1,
    -(2**70),
    HUGE,
    "1",
    1.0,
    True,
    False,
    None,
    b"\x01",
)


def _buffer(r):
    """A fresh destination for encode_into and an offset, from a seeded Random."""
    size = r.choice((0, 3, 16, 64, 256, 4096, 4096, 65536))
    fill = bytes([0xA5]) * size
    kind = r.randrange(16)
    if kind == 0:
        buf = bytes(fill)
    elif kind == 1:
        buf = memoryview(bytearray(fill))[::2]
    elif kind == 2:
        buf = memoryview(bytearray(fill)).toreadonly()
    elif kind == 3 and np is not None:
        buf = np.frombuffer(bytearray(fill + bytes(-size % 4)), dtype=np.int32).copy()
    elif kind == 4:
        buf = array.array("i", bytes(fill + bytes(-size % 4)))
    elif kind == 5:
        buf = [0] * size
    elif kind == 6:
        buf = memoryview(bytearray(fill * 2))[size:]
    elif kind == 7:
        buf = memoryview(bytearray(fill))
        buf.release()
    else:
        buf = bytearray(fill)
    offset = r.choice((0, 0, 0, 1, 5, size // 2, size, size + 1, -1, 2**70, 1.0, None, True))
    return buf, offset


def _snapshot(buf):
    if isinstance(buf, list):
        return list(buf)
    try:
        return memoryview(buf).tobytes()
    except ValueError:  # released
        return None


def _encode(mod, seed, how):
    """The outcome of encoding the message of `seed` one way, in one implementation, and
    the destination buffer's bytes after it."""
    try:
        maker, message, msg, version = build(mod, seed)
    except Exception as e:  # noqa: BLE001
        return ("build error", type(e)), None
    r = random.Random(seed ^ 0x5EED)
    if how == "encode":
        return outcome(lambda: msg.encode(version)), None
    if how == "into":
        buf, offset = _buffer(r)
        got = outcome(lambda: msg.encode_into(buf, offset, version))
        return got, _snapshot(buf)
    correlation = r.choice((7, 7, 7, -1, 2**31, "x", Index(5)))
    if message.kind == "request":
        client = r.choice(("c", "c", "c", None, "x" * 40000, StrSub("c"), 5))
        return outcome(lambda: mod.encode_request(msg, version, correlation, client)), None
    if message.kind == "response":
        return outcome(lambda: mod.encode_response(msg, version, correlation)), None
    return outcome(lambda: msg.encode(version)), None


HOWS = ("encode", "into", "frame")


def check(seed):
    """Raise Disagreement unless both implementations encode the message of `seed` alike."""
    if CY is None:
        raise RuntimeError("the compiled extension is not built: nothing to compare with")
    how = HOWS[seed % len(HOWS)] if seed % 5 else "primitive"
    if how == "primitive":
        return check_primitive(seed)
    py, py_buf = _encode(PY, seed, how)
    cy, cy_buf = _encode(CY, seed, how)
    if _shown(py) != _shown(cy) or py_buf != cy_buf:
        raise Disagreement(
            f"seed {seed} ({how}):\n  pure:     {_shown(py)} {_short(py_buf)}\n"
            f"  compiled: {_shown(cy)} {_short(cy_buf)}"
        )
    if how == "into":
        data = _check_into(seed, py, py_buf)
    elif py[0] == "ok":
        data = py[1]
    else:
        return py
    if data is not None:
        _, message, _, version = build(PY, seed)
        if how == "frame" and message.kind == "request":
            target = ("request",)
        elif how == "frame" and message.kind == "response":
            target = ("response", message.api_key, version)
        else:
            target = ("body", message.name, version)
        got = D.check(target, data, with_explain=False)
        if got[0] != "ok":
            raise Disagreement(f"seed {seed}: {target} {data.hex()} does not read back: {got}")
    return py


def _check_into(seed, result, after):
    """encode_into wrote exactly what encode gives, and nothing else; on error, nothing.
    Returns the bytes written, or None."""
    before, offset = _buffer(random.Random(seed ^ 0x5EED))
    before = _snapshot(before)
    if result[0] != "ok":
        if after != before:
            raise Disagreement(
                f"seed {seed}: encode_into failed ({result[1].__name__}) but changed the buffer"
            )
        return None
    _, _, msg, version = build(PY, seed)
    body = msg.encode(version)
    n = result[1]
    if (
        n != len(body)
        or after[offset : offset + n] != body
        or after[:offset] != before[:offset]
        or after[offset + n :] != before[offset + n :]
    ):
        raise Disagreement(
            f"seed {seed}: encode_into at {offset} wrote {n} bytes: "
            f"{_short(after)}, encode gives {body.hex()}"
        )
    return body


def _shown(result):
    kind, value = result[:2]
    return (kind, value.hex() if isinstance(value, bytes) else value) + tuple(result[2:])


def _short(buf):
    if buf is None:
        return ""
    text = buf.hex() if isinstance(buf, bytes) else repr(buf)
    return text if len(text) < 200 else text[:200] + "..."


# ---------------------------------------------------------------- primitives on their own


def primitive_case(seed):
    """(type name, value) for one call of the primitive API."""
    r = random.Random(seed)
    t = r.choice(_rules.PRIMITIVE_TYPES)
    maker = Maker(PY, seed)  # plain values only: none of these needs a message
    maker.hostility = 0.5
    if t in RANGES:
        return t, maker.int_value(t)
    if t == "uvarint":
        return t, r.choice((0, 127, 2**32 - 1, 2**32, 2**64 - 1, 2**64, -1, "1", IntSub(3), 1.0))
    if t == "float64":
        return t, r.choice((0.0, -1.5, float("nan"), 10**400, True, "1", IntSub(2), 2**63))
    if t == "bool":
        return t, maker.bool_value()
    if t == "uuid":
        return t, r.choice((uuid.UUID(int=r.getrandbits(128)), BadUUID(int=5), "uuid", None))
    if "string" in t and "[" not in t:
        return t, maker.string()
    if "bytes" in t:
        return t, _bytes_value(r)
    if t == "tagged_fields":
        return t, maker.tags(safe=r.random() < 0.5)
    _, _, elem = _rules.parse_array_type(t)
    if elem == "string":
        return t, maker.container([maker.string() for _ in range(r.randint(0, 3))])
    return t, maker.int_array(elem)


def _bytes_value(r):
    choice = r.randrange(9)
    if choice == 0:
        return bytearray(b"\x01\x02\x03")
    if choice == 1:
        return memoryview(b"abcdef")[::2]
    if choice == 2:
        return memoryview(b"abcd").cast("H")
    if choice == 3:
        view = memoryview(b"gone")
        view.release()
        return view
    if choice == 4:
        return BytesSub(b"abcdef")
    if choice == 5 and np is not None:
        return memoryview(zero_stride(2**31, np.uint8))
    if choice == 6:
        return r.choice(("text", 5, None, [1, 2]))
    return bytes(r.randrange(256) for _ in range(r.randint(0, 8)))


def check_primitive(seed):
    t, _ = primitive_case(seed)
    py = outcome(lambda: _pure.encode(*primitive_case(seed)))
    cy = outcome(lambda: _core.encode(*primitive_case(seed)))
    if _shown(py) != _shown(cy):
        raise Disagreement(
            f"seed {seed} (primitive {t}):\n  pure:     {_shown(py)}\n  compiled: {_shown(cy)}"
        )
    if py[0] == "ok":
        for core in (_pure, _core):
            value, end = core.decode(t, py[1])
            if end != len(py[1]) or core.encode(t, value) != py[1]:
                raise Disagreement(
                    f"seed {seed} (primitive {t}): {py[1].hex()} does not read back in {core.__name__}"
                )
    return py


# ---------------------------------------------------------------- the collector


# Set (a count) by a caller while it is in a call into the compiled code: gc_stress then
# forces a collection wherever that call runs fastkwire's Python code (an error
# constructor, a rule), the only place CPython 3.12+ may collect inside it. (A profile
# function sees no c_call event for Cython's methods, so the caller says so.)
COMPILED_CALLS = [0]


def _fastkwire(frame):
    return frame.f_globals.get("__name__", "").startswith("fastkwire.")


def gc_stress():
    """Collect at (nearly) every allocation of a tracked object and, as each collection
    starts, walk the young objects as a debugger or a memory profiler does: iterate
    every list, tuple and dict and ask every object for its referents. A container the
    compiled core lets the collector see before it is whole (a list with NULL items)
    crashes the walk. Returns a function that undoes it and returns how many collections
    ran and how many of them ran inside a call into fastkwire's compiled code.

    CPython 3.12 and later (and free-threaded builds) collect only where Python code
    runs, never inside an allocation; so wherever the compiled code calls back into
    Python (the error constructors of a failing decode, a user's __index__ or property),
    a collection is forced there, while its containers may be half built."""
    import gc

    collections = [0]
    inside = [0]

    def walk(phase, info):
        if phase != "start":
            return
        collections[0] += 1
        for generation in (0, 1):
            for o in gc.get_objects(generation):
                t = type(o)
                if t is list or t is tuple:
                    tuple(o)
                elif t is dict:
                    tuple(o.items())
                gc.get_referents(o)

    calls = [0]

    def profile(frame, event, arg):
        if event == "call":
            if COMPILED_CALLS[0] and _fastkwire(frame):
                # fastkwire's Python code run by a compiled call (see COMPILED_CALLS):
                # collect right there, as it is entered
                if frame.f_back is None or not _fastkwire(frame.f_back):
                    inside[0] += 1
                    gc.collect(0)
                return
            # Elsewhere, where allocations no longer start collections (3.12+ collect at
            # the eval loop's checks; free-threaded builds once the young objects are a
            # quarter of the heap), one at every 20th call.
            calls[0] += 1
            if calls[0] % 20 == 0:
                gc.collect(0)

    threshold = gc.get_threshold()
    gc.callbacks.append(walk)
    gc.set_threshold(1)
    sys.setprofile(profile)

    def undo():
        sys.setprofile(None)
        gc.set_threshold(*threshold)
        gc.callbacks.remove(walk)
        return collections[0], inside[0]

    return undo

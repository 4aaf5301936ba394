"""Seeds, mutations and the differential oracle shared by the fuzz harness and the tests.

`check(target, data)` feeds the same bytes to the pure and the compiled implementation
(and, for whole frames, to `explain`) and raises `Disagreement` unless they agree: the
same decoded value, or a DecodeError with the same offset, reason and path. Any other
exception escapes as it is: a codec must never raise IndexError, struct.error, ... on
hostile bytes.

A target says how the bytes are read: ("request",) a request frame, ("response", api_key,
version) a response frame, ("body", class name, version) a bare message body (read with
arrays="list" and, where numpy is installed, arrays="numpy" too), ("records",) the
contents of a `records` field (fastkwire.records: batches, columns, CRC checked or not).
"""

from __future__ import annotations

import importlib
import random
import struct
import uuid
import zlib
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT / "tests") not in sys.path:
    sys.path.insert(0, str(ROOT / "tests"))  # tests/strategies.py: the value strategies

import fastkwire._messages_python as PY  # noqa: E402
from fastkwire._layout import layouts  # noqa: E402
from fastkwire.errors import DecodeError, UnsupportedVersionError  # noqa: E402

try:
    import fastkwire._messages_cython as CY
except ImportError:  # the harness says so; the tests skip
    CY = None

explain = importlib.import_module("fastkwire.explain").explain

try:  # bodies are read with arrays="numpy" as well, where numpy is installed
    import numpy  # noqa: F401

    ARRAYS = ("list", "numpy")
except ImportError:
    ARRAYS = ("list",)

SIZE = struct.Struct(">i")
# An unknown tag well above any tag a schema here defines.
UNKNOWN_TAG = 900


class Disagreement(AssertionError):
    """The two implementations (or explain) read the same bytes differently."""


# ---------------------------------------------------------------- targets


def classes():
    return {c.__name__: c for c in PY.MESSAGE_CLASSES}


def all_targets():
    """Every way the fuzzer reads bytes, in a fixed order (the fuzz input's selector indexes it)."""
    targets = [("request",)]
    for key, cls in sorted(PY.RESPONSE_CLASSES.items()):
        targets += [("response", key, v) for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]
    for name, cls in sorted(classes().items()):
        targets += [("body", name, v) for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1)]
    return targets + [("records",)]


TARGETS = all_targets()


def _read(mod, target, data, arrays="list"):
    kind = target[0]
    if kind == "request":
        return mod.decode_request(data)
    if kind == "response":
        return mod.decode_response(data, target[1], target[2])
    return getattr(mod, target[1]).decode(data, target[2], arrays=arrays)


def _as_tuple(result):
    return result if isinstance(result, tuple) else (result,)


def outcome(mod, target, data, arrays="list"):
    """("ok", messages) or the error as a comparable tuple."""
    try:
        return ("ok", _as_tuple(_read(mod, target, data, arrays)))
    except DecodeError as e:
        return ("DecodeError", e.offset, e.reason, e.path)
    except UnsupportedVersionError as e:  # decode_request: a version the API lacks
        return ("UnsupportedVersionError", str(e))


def _shown(result):
    if result[0] != "ok":
        return result
    # repr: NaN and -0.0 compare as written
    return ("ok", [repr(m.to_dict()) for m in result[1]])


def _records_outcome(codec, data):
    """What both record readers make of `data`, comparable across the kernels."""
    out = []
    for read, kw in (
        ("read_batches", {"check_crc": False}),
        ("read_batches", {}),
        ("read_columns", {"check_crc": False}),
    ):
        try:
            got = getattr(codec, read)(data, max_decompressed=1 << 16, **kw)
        except DecodeError as e:
            out.append(("DecodeError", e.offset, e.reason))
            continue
        if read == "read_columns":
            out.append(("ok", repr(got.to_records()), got.tail))
        else:
            out.append(("ok", repr([(b._fields()[:-1], b.records) for b in got]), got.tail))
    return out


def check_records(data):
    """Raise Disagreement unless both record kernels read `data` alike."""
    from fastkwire._batches import Codec

    py = _records_outcome(Codec(importlib.import_module("fastkwire._records_python")), data)
    if CY is not None:
        cy = _records_outcome(Codec(importlib.import_module("fastkwire._records")), data)
        if py != cy:
            raise Disagreement(f"records {bytes(data).hex()}:\n  pure:     {py}\n  compiled: {cy}")
    return py


def check(target, data, with_explain=True):
    """Raise Disagreement unless both implementations (and explain) agree on `data`."""
    if target[0] == "records":
        return check_records(data)
    py = outcome(PY, target, data)
    if CY is not None:
        cy = outcome(CY, target, data)
        if _shown(py) != _shown(cy):
            raise Disagreement(
                f"{target} {bytes(data).hex()}:\n  pure:     {_shown(py)}\n  compiled: {_shown(cy)}"
            )
        if py[0] == "ok":
            _check_reencode(target, py[1], cy[1])
        if target[0] == "body" and "numpy" in ARRAYS:
            for mod in (PY, CY):
                got = outcome(mod, target, data, "numpy")
                if _shown(got) != _shown(py):
                    raise Disagreement(
                        f"{target} {bytes(data).hex()}: arrays='numpy' in "
                        f"{mod.__name__}: {_shown(got)}, lists: {_shown(py)}"
                    )
    if with_explain and target[0] != "body":
        _check_explain(target, data, py)
    return py


def _versions(target, messages):
    """(class, version) of each decoded part: the header and the body, or the body."""
    if target[0] == "body":
        return [target[2]]
    if target[0] == "request":
        header = messages[0]
        version = header.request_api_version
        cls = PY.REQUEST_CLASSES[header.request_api_key]
        hv = 2 if cls.is_flexible(version) else 1
        return [hv, version]
    cls = PY.RESPONSE_CLASSES[target[1]]
    hv = 0 if target[1] == 18 else (1 if cls.is_flexible(target[2]) else 0)
    return [hv, target[2]]


def _check_reencode(target, py_msgs, cy_msgs):
    """A decoded message re-encodes to the same bytes in both implementations."""
    for version, p, c in zip(_versions(target, py_msgs), py_msgs, cy_msgs):
        a, b = p.encode(version), c.encode(version)
        if a != b:
            raise Disagreement(
                f"{target}: re-encoding differs at v{version}: {a.hex()} != {b.hex()}"
            )
        # The re-encoding is canonical, so it must read back to the same message (by its
        # repr where a float64 is NaN, which equals nothing, itself included).
        back = type(p).decode(a, version)
        if back != p and repr(back) != repr(p):
            raise Disagreement(f"{target}: {a.hex()} does not read back as {p!r}")


def _check_explain(target, data, py):
    """explain() reads frames like the codecs: same error offset and reason, or success,
    whatever the frame (a wrong size prefix included: explain observes decode's reading)."""
    args = () if target[0] == "request" else (target[1], target[2])
    try:
        explain(bytes(data), *args)
        got = ("ok",)
    except DecodeError as e:
        got = ("DecodeError", e.offset, e.reason)
    except UnsupportedVersionError as e:  # the API or version, judged as decode_request does
        got = ("UnsupportedVersionError", str(e))
    want = ("ok",) if py[0] == "ok" else py[:3]
    if got != want:
        raise Disagreement(f"{target} {bytes(data).hex()}: explain {got}, codecs {py}")


# ---------------------------------------------------------------- seeds


def full_dict(name, version, unknown_tags=True):
    """A to_dict() value with every field the version has set, non-null and non-default;
    top-level arrays of two, nested ones of one (to keep deep messages small); in flexible
    versions every struct also carries an unknown tagged field, so that every kind of
    length, count and tag has an instance on the wire."""
    lay = layouts(name).root(version)
    return _full_struct(lay, lay.flexible and unknown_tags, 0)


def _full_struct(lay, tags, depth):
    d = {}
    n = 2 if depth == 0 else 1
    for op in lay.ops:
        if op.mode == "absent":
            continue
        f = op.field
        if op.sub is not None:
            items = [_full_struct(op.sub, tags, depth + 1) for _ in range(n)]
        else:
            items = [_full_value(f.element_type) for _ in range(n)]
        d[op.name] = items if f.is_array else items[0]
    if tags:
        d["unknown_tagged_fields"] = {UNKNOWN_TAG: b"\x01\x02"}
    return d


def _full_value(t):
    if t == "string":
        return "\u00e9x"  # two-byte UTF-8 first: a changed lead byte is invalid UTF-8
    if t in ("bytes", "records"):
        return b"\x01\x02\x03"
    if t == "bool":
        return True
    if t == "float64":
        return 1.5
    if t == "uuid":
        return uuid.UUID(int=0x0123456789ABCDEF0123456789ABCDEF)
    return 1


def frame_of(mod, name, version, d, correlation_id=7):
    """(target, frame) for a request or response value, or (target, body) for a header."""
    cls = getattr(mod, name)
    msg = cls.from_dict(d)
    if cls.KIND == "request":
        return ("request",), mod.encode_request(msg, version, correlation_id, client_id="fz")
    if cls.KIND == "response":
        return ("response", cls.API_KEY, version), mod.encode_response(msg, version, correlation_id)
    return ("body", name, version), msg.encode(version)


def message_versions():
    for name, cls in sorted(classes().items()):
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            yield name, v


def sampled_dicts(name, version, n):
    """n varied valid values from tests/strategies.py, the same ones every run."""
    from hypothesis import HealthCheck, Phase, given, settings
    from strategies import message_dicts

    out = []

    @settings(
        database=None,
        derandomize=True,
        max_examples=n,
        phases=[Phase.generate],
        suppress_health_check=list(HealthCheck),
        deadline=None,
    )
    @given(message_dicts(name, version))
    def collect(d):
        out.append(d)

    collect()
    return out


def _legacy(offset, magic, key, value, timestamp):
    """One uncompressed legacy message (magic 0 or 1)."""
    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", timestamp) if magic else b"")
    for v in (key, value):
        body += struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


def record_seeds():
    """Valid `records` fields: batches plain and compressed, back to back, legacy."""
    from fastkwire._batches import Codec
    from fastkwire.records import Record

    codec = Codec(importlib.import_module("fastkwire._records_python"))
    rng = random.Random(14)
    recs = [
        Record(
            i,
            1000 + i,
            rng.choice([None, b"", b"key"]),
            rng.choice([None, b"", b"v" * 20]),
            [("h", rng.choice([None, b"x"]))] * (i % 3),
        )
        for i in range(6)
    ]
    plain = codec.write_batch(recs)
    # Past the columns reader's first guess (many headers, long values) and off its
    # fast path (a header key that is not ASCII): the measured path.
    wide = codec.write_batch(
        [
            Record(
                0,
                0,
                b"k" * 200,
                b"v" * 3000,
                [("h%d" % j, b"x" * 40) for j in range(7)] + [("é", None)],
            )
        ]
    )
    out = [
        plain,
        plain + codec.write_batch(recs[:2], base_offset=6),
        wide,
        _legacy(0, 0, b"k", b"v", -(1 << 63))
        + _legacy(3_000_000_000, 1, None, b"w", (1 << 63) - 1),
    ]
    try:
        import cramjam  # noqa: F401

        out += [codec.write_batch(recs, compression=c) for c in ("gzip", "snappy", "lz4", "zstd")]
    except ImportError:
        pass
    return [(("records",), data) for data in out]


def seeds(per_message=8):
    """[(target, bytes)]: valid frames and bodies of every message and version, and
    record batches."""
    out = []
    for name, v in message_versions():
        values = [full_dict(name, v)] + sampled_dicts(name, v, per_message)
        for d in values:
            target, data = frame_of(PY, name, v, d)
            out.append((target, data))
            if target[0] != "body":
                body = getattr(PY, name).from_dict(d).encode(v)
                out.append((("body", name, v), body))
    return out + record_seeds()


# ---------------------------------------------------------------- length sites


@dataclass(frozen=True)
class Site:
    """A length, count, tag size or null marker on the wire."""

    offset: int
    size: int
    form: str  # int16 | int32 | uvarint | marker
    kind: str  # string | bytes | array | tag_count | tag_size | marker
    nullable: bool
    content: int = 0  # bytes of string content after the length


def sites(frame, target):
    """Every Site of a valid frame, located with explain's tree and the schema."""
    args = () if target[0] == "request" else (target[1], target[2])
    root = explain(bytes(frame), *args, max_items=None)  # every site, none summarised
    info = root.value
    out = []
    header_node, body_node = root.children[1], root.children[2]
    hname = "RequestHeader" if target[0] == "request" else "ResponseHeader"
    _struct_sites(header_node, layouts(hname).root(info["header_version"]), out)
    _struct_sites(body_node, layouts(info["message"]).root(info["version"]), out)
    return out


def _struct_sites(node, lay, out):
    fields = {op.name: op for op in lay.ops}  # explain names fields as Python does
    for child in node.children:
        if child.name == "present":
            continue
        if child.name == "tagged_fields" and child.type == "uvarint":
            count = child.children[0] if child.children else child
            out.append(Site(count.offset, count.size, "uvarint", "tag_count", False))
            for entry in child.children[1:]:
                size = entry.children[1]
                out.append(Site(size.offset, size.size, "uvarint", "tag_size", False))
                if entry.name in fields:
                    _field_sites(entry.children[2], fields[entry.name], out)
            continue
        _field_sites(child, fields[child.name], out)


def _field_sites(node, op, out):
    f, compact, nullable = op.field, op.compact, op.nullable
    if f.is_array:
        length = node.children[0]
        out.append(Site(length.offset, length.size, length.type, "array", nullable))
        for item in node.children[1:]:
            if op.sub is not None:
                _struct_sites(item, op.sub, out)
            else:
                _prim_site(item, f.element_type, compact, False, out)
    elif op.sub is not None:
        if nullable and node.children and node.children[0].name == "present":
            m = node.children[0]
            out.append(Site(m.offset, 1, "marker", "marker", True))
        if node.value is not None:
            _struct_sites(node, op.sub, out)
    else:
        _prim_site(node, f.type, compact, nullable, out)


def _prim_site(node, t, compact, nullable, out):
    if t == "string":
        content = len(node.value.encode()) if node.value is not None else 0
    elif t in ("bytes", "records"):
        content = len(node.value) if node.value is not None else 0
    else:
        return
    kind = "string" if t == "string" else "bytes"
    if node.value is None:
        prefix = node.size
    else:
        prefix = node.size - content
    form = "uvarint" if compact else ("int16" if kind == "string" else "int32")
    out.append(Site(node.offset, prefix, form, kind, nullable, content))


# ---------------------------------------------------------------- writing values


def uvarint(v, width=0):
    """v as an unsigned varint, padded with continuation bytes to `width` bytes."""
    out = bytearray()
    while v >= 0x80 or len(out) + 1 < width:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def hostile_values(site):
    """(label, replacement bytes) that must each make the frame undecodable."""
    if site.form == "marker":
        return [(f"marker {m}", struct.pack(">b", m)) for m in (0, 2, 127, -128)]
    if site.form == "int16":
        values = [-2, -32768, 0x7FFF] + ([] if site.nullable else [-1])
        return [(f"int16 {n}", struct.pack(">h", n)) for n in values]
    if site.form == "int32":
        values = [-2, -(2**31), 0x7FFFFFFF] + ([] if site.nullable else [-1])
        return [(f"int32 {n}", struct.pack(">i", n)) for n in values]
    # uvarint: compact lengths are n+1, so 0xFFFFFFFF is -2 and 0x80000000 is 0x7fffffff.
    values = [0xFFFFFFFF, 0x80000000]
    if site.kind in ("string", "bytes", "array") and not site.nullable:
        values.append(0)
    if site.kind == "tag_count":
        values = [0x7FFFFFFF, 0xFFFFFFFF]
    out = [(f"uvarint {n:#x}", uvarint(n)) for n in values]
    # Six bytes or more, whatever the value they spell.
    out.append(("6-byte varint", uvarint(1, width=6)))
    out.append(("10-byte varint", uvarint(0, width=10)))
    return out


def fix_size(frame):
    """The frame with its size prefix made right for the bytes that follow."""
    if len(frame) < 4:
        return bytes(frame)
    return SIZE.pack(len(frame) - 4) + bytes(frame[4:])


def replace(data, offset, size, new):
    return bytes(data[:offset]) + new + bytes(data[offset + size :])


# ---------------------------------------------------------------- mutations

INTERESTING = [
    b"\x00",
    b"\xff",
    b"\x7f",
    b"\x80",
    b"\xff\xff",
    b"\x7f\xff",
    b"\x80\x00",
    b"\xff\xff\xff\xff",
    b"\xff\xff\xff\xfe",
    b"\x7f\xff\xff\xff",
    b"\x80\x00\x00\x00",
    b"\xff\xff\xff\xff\x0f",
    b"\x80\x80\x80\x80\x80\x01",
    b"\x00\x00\x00\x00",
]


def mutate(data, rng, pool=(), site_list=None):
    """One to three random mutations of `data`; `pool` gives bytes to splice from and
    `site_list` the length fields of `data` (set to extremes when given)."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(9)
        n = len(data)
        if op == 0 and n:  # flip bits
            for _ in range(rng.randint(1, 4)):
                data[rng.randrange(n)] ^= 1 << rng.randrange(8)
        elif op == 1:  # truncate
            del data[rng.randint(0, n) :]
        elif op == 2:  # extend or insert random bytes
            at = rng.choice((n, rng.randint(0, n)))
            data[at:at] = rng.randbytes(rng.randint(1, 16))
        elif op == 3 and pool:  # splice with another seed
            other = rng.choice(pool)
            data = data[: rng.randint(0, n)] + other[rng.randint(0, len(other)) :]
        elif op == 4:  # an interesting value over any position
            v = rng.choice(INTERESTING)
            at = rng.randint(0, n)
            data[at : at + len(v)] = v
        elif op == 5 and site_list:  # a length field set to an extreme
            s = rng.choice(site_list)
            if s.offset + s.size <= n:
                label, new = rng.choice(hostile_values(s) + _edge_values(s))
                data[s.offset : s.offset + s.size] = new
        elif op == 6 and n:  # duplicate or drop a chunk
            a = rng.randrange(n)
            b = min(n, a + rng.randint(1, 16))
            if rng.random() < 0.5:
                data[a:a] = data[a:b]
            else:
                del data[a:b]
        elif op == 7 and n:  # a random byte
            data[rng.randrange(n)] = rng.randrange(256)
        elif op == 8 and n:  # a legal-looking varint at any position
            at = rng.randrange(n)
            data[at : at + 1] = uvarint(rng.choice((0, 1, 0x7F, 0x80, 0x3FFF, 0xFFFFFFFF)))
    if rng.random() < 0.7:  # mostly keep the size prefix right, to get past it
        data = bytearray(fix_size(data))
    return bytes(data)


def _edge_values(site):
    """Lengths one off the truth: a byte short or one over."""
    if site.form == "marker":
        return [("marker 1", b"\x01"), ("marker -1", b"\xff")]
    if site.form in ("int16", "int32"):
        fmt = ">h" if site.form == "int16" else ">i"
        return [
            (f"{site.form} {n}", struct.pack(fmt, n))
            for n in (0, site.content + 1, max(site.content - 1, 0))
        ]
    return [(f"uvarint {n}", uvarint(n)) for n in (0, 1, site.content + 2, site.content)]


def target_index(target):
    return TARGETS.index(target)


def seeded_random(seed):
    return random.Random(seed)

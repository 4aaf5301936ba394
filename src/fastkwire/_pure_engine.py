"""The pure-Python engine: straight-line reader and writer functions per wire layout,
written as Python source and compiled the first time a layout is used.

Each distinct `Layout` (see `_layout`) becomes `_w_<n>(o, out, v)`, which appends the
struct to a bytearray, and `_r_<n>(data, pos, end, v, arrays)`, which returns
(struct, new pos). They live in one namespace per message and call each other and the
primitives of `_pure` by name.
"""
from __future__ import annotations

import struct
import threading

from . import _pure, _wire
from . import errors as _e
from ._pure import finish, read_from, write_into
from ._rules import byte_view, check_version, decode_options
from ._wire import NUMPY_ARRAYS, RECORD_VIEWS, WIDTH
from .columns import TaskOffsetColumns
from .errors import DecodeError, EncodeError

BULK_INTS = ("int16", "int32", "int64")  # int arrays with the bulk (numpy) path
# Unpackers of 0..126 big-endian ints of each kind: a compact array that short is read
# inline with one call (Metadata's replica lists, partition numbers).
_SHORT_ARRAYS = {k: tuple(struct.Struct(f">{n}{_wire.PRIMITIVES[k].fmt}") for n in range(127))
                 for k in BULK_INTS}
# Runs of these are packed and unpacked with one struct call.
_FORMAT = {"int8": "b", "int16": "h", "int32": "i", "int64": "q", "uint16": "H", "uint32": "I"}


class _Slow(Exception):
    """A value of a packed run is not a plain int: write the run field by field."""


def _runs(ops):
    """The ops in order, consecutive fixed-width integers grouped into lists."""
    out = []
    for op in ops:
        fixed = op.field.type in _FORMAT and not op.field.is_array
        if fixed and out and isinstance(out[-1], list):
            out[-1].append(op)
        else:
            out.append([op] if fixed else op)
    return [r[0] if isinstance(r, list) and len(r) == 1 else r for r in out]
_lock = threading.RLock()
L = None  # the _layout module, once a layout is compiled


class _Namespace:
    """Generated functions of one message (one family's classes)."""

    def __init__(self, root_cls):
        self.classes = root_cls._CLASSES
        self.env = {name: getattr(_pure, name) for name in dir(_pure) if name[:2] in ("w_", "r_")}
        self.env.update(_e=_e, _new=object.__new__, DecodeError=DecodeError, EncodeError=EncodeError,
                        _Slow=_Slow, _struct_error=struct.error,
                        TaskOffsetColumns=TaskOffsetColumns, item_at=_pure.item_at,
                        NUMPY_ARRAYS=NUMPY_ARRAYS, RECORD_VIEWS=RECORD_VIEWS,
                        _SHORT_ARRAYS=_SHORT_ARRAYS)
        self.names = {}  # Layout -> function suffix

    def fn(self, lay):
        """The suffix of the layout's functions, generating them (and their
        dependencies) on first use."""
        suffix = self.names.get(lay)
        if suffix is None:
            suffix = f"{lay.struct.name}_{lay.ident}"
            self.names[lay] = suffix
            for op in lay.ops:
                if op.sub is not None:
                    self.fn(op.sub)
            src = _LayoutSource(self, lay, suffix).source()
            exec(compile(src, f"<fastkwire layout {lay.message.name}.{suffix}>", "exec"), self.env)  # noqa: S102
        return suffix

    def const(self, value):
        """A name in the namespace bound to value (defaults that are not literals)."""
        name = f"_c{len(self.env)}"
        self.env[name] = value
        return name


def _string_fn(kind, op):
    return ("compact_" if op.compact else "") + ("nullable_" if op.nullable else "") + kind


class _LayoutSource:
    """Python source for one layout's writer and reader."""

    def __init__(self, ns, lay, suffix):
        global L
        from . import _layout as L  # imported with the first layout, not with the package

        self.ns, self.lay, self.suffix = ns, lay, suffix
        self.lines = []

    def out(self, line, ind):
        self.lines.append("    " * ind + line)

    def source(self):
        self.writer()
        self.reader()
        return "\n".join(self.lines) + "\n"

    def cls(self, struct):
        return self.ns.const(self.ns.classes[struct.name])

    def default_expr(self, op):
        kind = op.default_kind
        if kind == _wire.D_NEW:
            return f"{self.cls(op.field.struct)}()"
        if kind == _wire.D_LIST:
            return "[]"
        d = L.default_value(op.field)
        if d is None or isinstance(d, (bool, int, float, str, bytes)):
            return repr(d)
        return self.ns.const(d)

    def default_test(self, op, expr):
        """A Python expression that is true when expr holds the field's default."""
        kind = op.default_kind
        if kind == _wire.D_LIST:
            return f"not {expr}"
        if kind == _wire.D_IS:
            return f"{expr} is {op.field.default_value()!r}"
        return f"{expr} == {self.default_expr(op)}"

    # ---- writing
    def write_value(self, op, expr, target, ind):
        f, out = op.field, self.out
        if f.is_array:
            elem = f.element_type
            if f.is_struct:
                out(f"_items = {expr}", ind)
                if op.columns:
                    out(f"if isinstance(_items, {op.columns}):", ind)
                    out(f"w_task_offsets({target}, _items, {op.compact}, {op.sub.flexible})", ind + 1)
                    out("else:", ind)
                    ind += 1
                cls = self.cls(f.struct)
                out(f"_n = w_array_len({target}, _items, {op.compact}, {op.nullable})", ind)
                out("_i = 0", ind)
                out("try:", ind)
                out("for _i in range(_n):", ind + 1)
                out("_it = item_at(_items, _i, _n)", ind + 2)
                out(f"if type(_it) is not {cls}:", ind + 2)
                out(f"raise _e.wrong_type({f.struct.name!r}, _it)", ind + 3)
                out(f"_w_{self.ns.fn(op.sub)}(_it, {target}, v)", ind + 2)
                out("except EncodeError as _x:", ind)
                out('raise _x.with_prefix(f"[{_i}]") from None', ind + 1)
            elif elem in BULK_INTS:
                out(f"w_int_array({target}, {expr}, {elem!r}, {op.compact}, {op.nullable})", ind)
            else:
                item = ("compact_string" if op.compact else "string") if elem == "string" else elem
                out(f"w_array({target}, {expr}, w_{item}, {op.compact}, {op.nullable})", ind)
        elif f.is_struct:
            cls = self.cls(f.struct)
            out(f"_s = {expr}", ind)
            if op.nullable:
                out("if _s is None:", ind)
                out(f"{target}.append(0xFF)", ind + 1)
                out("else:", ind)
                out(f"{target}.append(1)", ind + 1)
                ind += 1
            out(f"if type(_s) is not {cls}:", ind)
            out(f"raise _e.wrong_type({f.struct.name!r}, _s)", ind + 1)
            out(f"_w_{self.ns.fn(op.sub)}(_s, {target}, v)", ind)
        elif f.type in ("string", "bytes", "records"):
            out(f"w_{_string_fn('string' if f.type == 'string' else 'bytes', op)}({target}, {expr})", ind)
        else:
            out(f"w_{f.type}({target}, {expr})", ind)

    def writer(self):
        lay, out = self.lay, self.out
        out(f"def _w_{self.suffix}(o, out, v):", 0)
        for op in lay.absent:
            if not op.field.ignorable:
                out(f"if not ({self.default_test(op, 'o.' + op.name)}):", 1)
                out(f"raise _e.absent_field({lay.message.name!r}, {op.name!r}, v, "
                    f"{L.version_text(op.field.versions)!r})", 2)
        out("_f = ''", 1)
        out("try:", 1)
        out("pass", 2)
        for run in _runs(lay.plain):
            if isinstance(run, list):
                self.write_run(run, 2)
                continue
            out(f"_f = {run.name!r}", 2)
            self.write_value(run, f"o.{run.name}", "out", 2)
        if lay.flexible:
            out("_known = []", 2)
            for op in lay.tagged:
                # every known tag is listed, None at its default: an unknown tag may not take it
                out(f"_f = {op.name!r}", 2)
                out(f"if {self.default_test(op, 'o.' + op.name)}:", 2)
                out(f"_known.append(({op.field.tag}, None))", 3)
                out("else:", 2)
                out("_t = bytearray()", 3)
                self.write_value(op, f"o.{op.name}", "_t", 3)
                out(f"_known.append(({op.field.tag}, bytes(_t)))", 3)
            out("_f = ''", 2)
            out("w_tags(out, _known, o._unknown)", 2)
        out("except EncodeError as _x:", 1)
        out("raise _x.with_prefix(_f) from None", 2)

    def write_run(self, run, ind):
        """Consecutive integers: one pack when all are plain ints in range, else field by
        field (which names the bad one)."""
        out = self.out
        names = [f"_v{k}" for k in range(len(run))]
        fmt = self.ns.const(struct.Struct(">" + "".join(_FORMAT[op.field.type] for op in run)))
        out(f"{', '.join(names)}, = {', '.join(f'o.{op.name}' for op in run)},", ind)
        out("try:", ind)
        test = " or ".join(f"type({n}) is not int" for n in names)
        out(f"if {test}:", ind + 1)
        out("raise _Slow", ind + 2)
        out(f"out += {fmt}.pack({', '.join(names)})", ind + 1)
        out("except (_Slow, _struct_error):", ind)
        for op, n in zip(run, names):
            out(f"_f = {op.name!r}", ind + 1)
            out(f"w_{op.field.type}(out, {n})", ind + 1)

    def read_run(self, run, ind):
        """Consecutive integers: one unpack when all their bytes are there."""
        out = self.out
        st = struct.Struct(">" + "".join(_FORMAT[op.field.type] for op in run))
        fmt = self.ns.const(st)
        out(f"if end - pos >= {st.size}:", ind)
        out(f"{', '.join(f'o.{op.name}' for op in run)}, = {fmt}.unpack_from(data, pos)", ind + 1)
        out(f"pos += {st.size}", ind + 1)
        out("else:", ind)
        for op in run:
            out(f"_f = {op.name!r}", ind + 1)
            out(f"o.{op.name}, pos = r_{op.field.type}(data, pos, end)", ind + 1)

    # ---- reading
    def read_value(self, op, target, end, ind):
        f, out = op.field, self.out
        if f.is_array:
            elem = f.element_type
            if f.is_struct:
                sub = self.ns.fn(op.sub)
                if op.columns:
                    out("if arrays & NUMPY_ARRAYS:", ind)
                    out(f"{target}, pos = r_task_offsets(data, pos, {end}, {op.compact}, {op.nullable}, "
                        f"{op.sub.flexible}, {op.sub.min_size}, {self.cls(f.struct)})", ind + 1)
                    out("else:", ind)
                    ind += 1
                out(f"_n, pos = r_array_len(data, pos, {end}, {op.compact}, {op.nullable}, "
                    f"{op.sub.min_size})", ind)
                out("if _n < 0:", ind)
                out(f"{target} = None", ind + 1)
                out("else:", ind)
                out("_items = []", ind + 1)
                out("_i = 0", ind + 1)
                out("try:", ind + 1)
                out("for _i in range(_n):", ind + 2)
                out(f"_it, pos = _r_{sub}(data, pos, {end}, v, arrays)", ind + 3)
                out("_items.append(_it)", ind + 3)
                out("except DecodeError as _x:", ind + 1)
                out('raise _x.with_prefix(f"[{_i}]") from None', ind + 2)
                out(f"{target} = _items", ind + 1)
            elif elem in BULK_INTS:
                if op.compact:
                    w = WIDTH[elem]
                    out(f"if not arrays & NUMPY_ARRAYS and pos < {end} and 0 < (_b := data[pos]) < 0x80 "
                        f"and pos + (_b - 1) * {w} < {end}:", ind)
                    out(f"{target} = list(_SHORT_ARRAYS[{elem!r}][_b - 1].unpack_from(data, pos + 1))", ind + 1)
                    out(f"pos += 1 + (_b - 1) * {w}", ind + 1)
                    out("else:", ind)
                    ind += 1
                out(f"{target}, pos = r_int_array(data, pos, {end}, {elem!r}, {op.compact}, "
                    f"{op.nullable}, arrays)", ind)
            else:
                item = ("compact_string" if op.compact else "string") if elem == "string" else elem
                out(f"{target}, pos = r_array(data, pos, {end}, r_{item}, {op.compact}, "
                    f"{op.nullable}, {op.element_min_size()})", ind)
        elif f.is_struct:
            sub = self.ns.fn(op.sub)
            if op.nullable:
                out(f"_mk, pos = r_marker(data, pos, {end})", ind)
                out("if _mk < 0:", ind)
                out(f"{target} = None", ind + 1)
                out("else:", ind)
                ind += 1
            out(f"{target}, pos = _r_{sub}(data, pos, {end}, v, arrays)", ind)
        elif f.type == "string" and op.compact:
            # A one-byte length with all its text there, inline. Invalid UTF-8 leaves pos
            # at the string, where the reader's handler reports it.
            out(f"if pos < {end} and 0 < (_b := data[pos]) < 0x80 and pos + _b <= {end}:", ind)
            out(f"{target} = data[pos + 1:pos + _b].decode()", ind + 1)
            out("pos += _b", ind + 1)
            out("else:", ind)
            out(f"{target}, pos = r_{_string_fn('string', op)}(data, pos, {end})", ind + 1)
        elif f.type == "records":
            out("if arrays & RECORD_VIEWS:", ind)
            out(f"{target}, pos = r_records_view(data, pos, {end}, {op.compact}, {op.nullable})", ind + 1)
            out("else:", ind)
            out(f"{target}, pos = r_{_string_fn('bytes', op)}(data, pos, {end})", ind + 1)
        elif f.type in ("string", "bytes"):
            kind = "string" if f.type == "string" else "bytes"
            out(f"{target}, pos = r_{_string_fn(kind, op)}(data, pos, {end})", ind)
        else:
            out(f"{target}, pos = r_{f.type}(data, pos, {end})", ind)

    def reader(self):
        lay, out = self.lay, self.out
        out("", 0)
        out(f"def _r_{self.suffix}(data, pos, end, v, arrays):", 0)
        out(f"o = _new({self.cls(lay.struct)})", 1)
        out("_f = ''", 1)
        out("try:", 1)
        out("pass", 2)
        for run in _runs(lay.plain):
            if isinstance(run, list):
                self.read_run(run, 2)
                continue
            out(f"_f = {run.name!r}", 2)
            self.read_value(run, f"o.{run.name}", "end", 2)
        tagged = lay.tagged
        if lay.flexible:
            out("_f = ''", 2)
            if not tagged:
                out("if pos < end and data[pos] == 0:  # no tagged fields: the common case", 2)
                out("o._unknown = None", 3)
                out("pos += 1", 3)
                out("else:", 2)
                out("o._unknown, pos = r_unknown_tags(data, pos, end)", 3)
            else:
                for op in tagged:
                    out(f"o.{op.name} = {self.default_expr(op)}", 2)
                out("_unknown = None", 2)
                out("_ntags, pos = r_uvarint(data, pos, end)", 2)
                out("_last = -1", 2)
                out("for _ in range(_ntags):", 2)
                out("_tag, _size, pos = r_tag_header(data, pos, end, _last)", 3)
                out("_last = _tag", 3)
                out("_tend = pos + _size", 3)
                for k, op in enumerate(tagged):
                    out(f"{'elif' if k else 'if'} _tag == {op.field.tag}:", 3)
                    out(f"_f = {op.name!r}", 4)
                    out("_tstart = pos", 4)
                    self.read_value(op, f"o.{op.name}", "_tend", 4)
                    out("if pos != _tend:", 4)
                    out("raise _e.tag_size_mismatch(_tstart, _tag)", 5)
                    out("_f = ''", 4)
                out("else:", 3)
                out("if _unknown is None:", 4)
                out("_unknown = {}", 5)
                out("_unknown[_tag] = bytes(data[pos:_tend])", 4)
                out("pos = _tend", 4)
                out("o._unknown = _unknown", 2)
        out("except DecodeError as _x:", 1)
        out("raise _x.with_prefix(_f) from None", 2)
        out("except UnicodeDecodeError:", 1)
        out("raise _e.invalid_utf8(pos).with_prefix(_f) from None", 2)
        for op in lay.absent:
            out(f"o.{op.name} = {self.default_expr(op)}", 1)
        if not lay.flexible:
            out("o._unknown = None", 1)
        out("return o, pos", 1)


def _functions(cls, version):
    """(writer, reader) of a message class at a version, compiled on first use."""
    cache = cls.__dict__.get("_pure_fns")
    if cache is None:
        with _lock:
            cache = cls.__dict__.get("_pure_fns")
            if cache is None:
                cache = {}
                type.__setattr__(cls, "_pure_fns", cache)
    fns = cache.get(version)
    if fns is None:
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise _e.bad_version(cls._NAME, version, cls._VERSIONS)
        with _lock:
            ns = cls.__dict__.get("_pure_ns")
            if ns is None:
                ns = _Namespace(cls)
                type.__setattr__(cls, "_pure_ns", ns)
            suffix = ns.fn(cls._LAYOUTS.root(version))
            fns = cache[version] = (ns.env[f"_w_{suffix}"], ns.env[f"_r_{suffix}"])
    return fns


class MessageMixin:
    """encode/decode of the pure engine, for the message classes of `_classes`."""

    __slots__ = ()

    def encode(self, version):
        """The message body at `version`, as bytes."""
        check_version(version)
        out = bytearray()
        _functions(type(self), version)[0](self, out, version)
        return finish(out)

    def encode_into(self, buffer, offset, version):
        """Write the body into a writable buffer at offset; returns the bytes written.

        On any error the buffer is left as it was.
        """
        return write_into(buffer, offset, self.encode, version)

    @classmethod
    def decode_from(cls, data, version, offset=0, arrays="list", records="bytes"):
        """Decode one message starting at offset; returns (message, end offset)."""
        check_version(version)
        flags = decode_options(arrays, records)
        return read_from(lambda v: _functions(cls, v)[1], data, offset, version, flags)

    @classmethod
    def decode(cls, data, version, arrays="list", records="bytes"):
        """Decode a whole message body; trailing bytes are an error."""
        data = byte_view(data)
        o, pos = cls.decode_from(data, version, 0, arrays, records)
        if pos != len(data):
            raise _e.trailing(pos, len(data) - pos)
        return o

    @classmethod
    def is_flexible(cls, version):
        return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN


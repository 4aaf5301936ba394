"""The pure-Python engine: straight-line reader and writer functions per wire layout,
written as Python source and compiled the first time a layout is used.

Each distinct `Layout` (see `_layout`) becomes `_w_<n>(o, out, v)`, which appends the
struct to a bytearray, and `_r_<n>(data, pos, end, v, arrays)`, which returns
(struct, new pos). They live in one namespace per message and call each other and the
primitives of `_pure` by name. What each field is comes from the layout's numbers
(`Op.kind`, `elem_kind`, `width`, `default_kind`: the wire table's), never from its type
name.

`read_observed` reads with an observer (explain's): a third function per layout,
`_o_<n>(data, pos, end, v, obs)`, written only when first observed, so the readers
decode uses carry no trace of it. It makes the same reads in the same order with the
same error paths, field by field (no packed runs or inline fast paths, whose results
and errors are those of the primitives they stand for), and tells the observer what it
read (see `read_observed`).
"""

from __future__ import annotations

import struct
import _thread  # threading's own RLock, without importing threading

from . import _pure, _wire
from . import errors as _e
from ._pure import finish, read_from, write_into
from ._rules import byte_view, check_version, decode_options
from ._wire import (
    D_IS,
    D_LIST,
    D_NEW,
    K_BYTES,
    K_INTS,
    K_SCALARS,
    K_STRING,
    K_STRINGS,
    K_STRUCT,
    K_STRUCTS,
    NUMPY_ARRAYS,
    PRIMITIVES,
    RECORD_VIEWS,
)
from .columns import TaskOffsetColumns
from .errors import DecodeError, EncodeError

# The name of each kind's primitives in _pure (r_int32, w_uuid, ...); records are bytes.
_NAME = {p.kind: name for name, p in PRIMITIVES.items() if name != "records"}
# Integer kinds, by struct format: runs of them are packed and unpacked with one call.
_FORMAT = {p.kind: p.fmt for p in PRIMITIVES.values() if p.range is not None}
# Unpackers of 0..126 big-endian ints of each bulk kind: a compact array that short is
# read inline with one call (Metadata's replica lists, partition numbers).
_SHORT_ARRAYS = {
    PRIMITIVES[name].kind: tuple(struct.Struct(f">{n}{PRIMITIVES[name].fmt}") for n in range(127))
    for name in _wire.BULK_INTS
}


class _Slow(Exception):
    """A value of a packed run is not a plain int: write the run field by field."""


def _runs(ops):
    """The ops in order, consecutive fixed-width integers grouped into lists."""
    out = []
    for op in ops:
        fixed = op.kind in _FORMAT
        if fixed and out and isinstance(out[-1], list):
            out[-1].append(op)
        else:
            out.append([op] if fixed else op)
    return [r[0] if isinstance(r, list) and len(r) == 1 else r for r in out]


_lock = _thread.RLock()
L = None  # the _layout module, once a layout is compiled


class _Namespace:
    """Generated functions of one message (one family's classes)."""

    def __init__(self, root_cls):
        self.classes = root_cls._CLASSES
        self.env = {name: getattr(_pure, name) for name in dir(_pure) if name[:2] in ("w_", "r_")}
        self.env.update(
            _e=_e,
            _new=object.__new__,
            DecodeError=DecodeError,
            EncodeError=EncodeError,
            _Slow=_Slow,
            _struct_error=struct.error,
            TaskOffsetColumns=TaskOffsetColumns,
            item_at=_pure.item_at,
            NUMPY_ARRAYS=NUMPY_ARRAYS,
            RECORD_VIEWS=RECORD_VIEWS,
            _SHORT_ARRAYS=_SHORT_ARRAYS,
        )
        self.names = {}  # Layout -> function suffix
        self.observed = set()  # layouts whose observed reader is written

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
            self.run(_LayoutSource(self, lay, suffix).source(), lay, suffix)
        return suffix

    def observed_fn(self, lay):
        """The suffix of the layout's observed reader, generating it on first use."""
        suffix = self.fn(lay)
        if lay not in self.observed:
            self.observed.add(lay)
            for op in lay.ops:
                if op.sub is not None:
                    self.observed_fn(op.sub)
            self.run(_LayoutSource(self, lay, suffix, observed=True).source(), lay, suffix)
        return suffix

    def run(self, src, lay, suffix):
        exec(compile(src, f"<fastkwire layout {lay.message.name}.{suffix}>", "exec"), self.env)  # noqa: S102

    def const(self, value):
        """A name in the namespace bound to value (defaults that are not literals)."""
        name = f"_c{len(self.env)}"
        self.env[name] = value
        return name


def _string_fn(kind, op):
    return ("compact_" if op.compact else "") + ("nullable_" if op.nullable else "") + kind


def _item_fn(op):
    """The _pure suffix that reads or writes one element of a primitive array."""
    if op.kind == K_STRINGS:
        return "compact_string" if op.compact else "string"
    return _NAME[op.elem_kind]


class _LayoutSource:
    """Python source for one layout's writer and reader (or, observed, its observed reader)."""

    def __init__(self, ns, lay, suffix, observed=False):
        global L
        from . import _layout as L  # imported with the first layout, not with the package

        self.ns, self.lay, self.suffix, self.observed = ns, lay, suffix, observed
        self.lines = []

    def out(self, line, ind):
        self.lines.append("    " * ind + line)

    def source(self):
        if self.observed:
            self.reader()
        else:
            self.writer()
            self.reader()
        return "\n".join(self.lines) + "\n"

    def cls(self, struct):
        return self.ns.const(self.ns.classes[struct.name])

    def default_expr(self, op):
        kind = op.default_kind
        if kind == D_NEW:
            return f"{self.cls(op.field.struct)}()"
        if kind == D_LIST:
            return "[]"
        d = op.default
        if d is None or isinstance(d, (bool, int, float, str, bytes)):
            return repr(d)
        return self.ns.const(d)

    def default_test(self, op, expr):
        """A Python expression that is true when expr holds the field's default."""
        kind = op.default_kind
        if kind == D_LIST:
            return f"not {expr}"
        if kind == D_IS:
            return f"{expr} is {op.default!r}"
        return f"{expr} == {self.default_expr(op)}"

    # ---- writing
    def write_value(self, op, expr, target, ind):
        f, out, kind = op.field, self.out, op.kind
        if kind == K_STRUCTS:
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
        elif kind == K_INTS:
            out(
                f"w_int_array({target}, {expr}, {_NAME[op.elem_kind]!r}, {op.compact}, {op.nullable})",
                ind,
            )
        elif kind in (K_STRINGS, K_SCALARS):
            out(f"w_array({target}, {expr}, w_{_item_fn(op)}, {op.compact}, {op.nullable})", ind)
        elif kind == K_STRUCT:
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
        elif kind in (K_STRING, K_BYTES):
            out(f"w_{_string_fn(_NAME[kind], op)}({target}, {expr})", ind)
        else:
            out(f"w_{_NAME[kind]}({target}, {expr})", ind)

    def writer(self):
        lay, out = self.lay, self.out
        out(f"def _w_{self.suffix}(o, out, v):", 0)
        for op in lay.absent:
            if not op.field.ignorable:
                out(f"if not ({self.default_test(op, 'o.' + op.name)}):", 1)
                out(
                    f"raise _e.absent_field({lay.message.name!r}, {op.name!r}, v, "
                    f"{L.version_text(op.field.versions)!r})",
                    2,
                )
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
        fmt = self.ns.const(struct.Struct(">" + "".join(_FORMAT[op.kind] for op in run)))
        out(f"{', '.join(names)}, = {', '.join(f'o.{op.name}' for op in run)},", ind)
        out("try:", ind)
        test = " or ".join(f"type({n}) is not int" for n in names)
        out(f"if {test}:", ind + 1)
        out("raise _Slow", ind + 2)
        out(f"out += {fmt}.pack({', '.join(names)})", ind + 1)
        out("except (_Slow, _struct_error):", ind)
        for op, n in zip(run, names):
            out(f"_f = {op.name!r}", ind + 1)
            out(f"w_{_NAME[op.kind]}(out, {n})", ind + 1)

    def read_run(self, run, ind):
        """Consecutive integers: one unpack when all their bytes are there."""
        out = self.out
        st = struct.Struct(">" + "".join(_FORMAT[op.kind] for op in run))
        fmt = self.ns.const(st)
        out(f"if end - pos >= {st.size}:", ind)
        out(f"{', '.join(f'o.{op.name}' for op in run)}, = {fmt}.unpack_from(data, pos)", ind + 1)
        out(f"pos += {st.size}", ind + 1)
        out("else:", ind)
        for op in run:
            out(f"_f = {op.name!r}", ind + 1)
            out(f"o.{op.name}, pos = r_{_NAME[op.kind]}(data, pos, end)", ind + 1)

    # ---- reading
    def sub_call(self, op, end):
        """The call that reads one struct of op's nested layout."""
        if self.observed:
            return f"_o_{self.ns.observed_fn(op.sub)}(data, pos, {end}, v, obs)"
        return f"_r_{self.ns.fn(op.sub)}(data, pos, {end}, v, arrays)"

    def read_value(self, op, target, end, ind):
        if not self.observed:
            self.read_plain_value(op, target, end, ind)
            return
        c = self.ns.const(op)
        self.out(f"_open('field', {c}, pos)", ind)
        self.read_observed_value(op, target, end, ind)
        self.out(f"_close(pos, {target})", ind)

    def read_items(self, op, target, end, ind, item, c=None):
        """An array: its count, then `_n` items, each read by the call `item`, into a list
        (None for a null array). Observed (`c`: the op's name in the namespace), the
        count and each item are told to the observer, which says which items to keep."""
        out, observed = self.out, self.observed
        if observed:
            out(f"_open('length', {c}, pos)", ind)
        out(
            f"_n, pos = r_array_len(data, pos, {end}, {op.compact}, {op.nullable}, "
            f"{op.element_min_size()})",
            ind,
        )
        if observed:
            out("_close(pos, _n)", ind)
        out("if _n < 0:", ind)
        out(f"{target} = None", ind + 1)
        out("else:", ind)
        out("_items = []", ind + 1)
        out("_i = 0", ind + 1)
        out("try:", ind + 1)
        out("for _i in range(_n):", ind + 2)
        if observed:
            out("_keep = _open('item', _i, pos)", ind + 3)
        out(f"_it, pos = {item}", ind + 3)
        if observed:
            out("_close(pos, _it)", ind + 3)
            out("if _keep:", ind + 3)
            out("_items.append(_it)", ind + 4)
        else:
            out("_items.append(_it)", ind + 3)
        out("except DecodeError as _x:", ind + 1)
        out('raise _x.with_prefix(f"[{_i}]") from None', ind + 2)
        out(f"{target} = _items", ind + 1)

    def read_struct(self, op, target, end, ind, c=None):
        """One nested struct, after its null marker if nullable (observed, told to the
        observer; `c` as for read_items)."""
        out = self.out
        if op.nullable:
            if self.observed:
                out(f"_open('marker', {c}, pos)", ind)
            out(f"_mk, pos = r_marker(data, pos, {end})", ind)
            if self.observed:
                out("_close(pos, _mk)", ind)
            out("if _mk < 0:", ind)
            out(f"{target} = None", ind + 1)
            out("else:", ind)
            ind += 1
        out(f"{target}, pos = {self.sub_call(op, end)}", ind)

    def read_plain_value(self, op, target, end, ind):
        f, out, kind = op.field, self.out, op.kind
        if kind == K_STRUCTS:
            if op.columns:
                out("if arrays & NUMPY_ARRAYS:", ind)
                out(
                    f"{target}, pos = r_task_offsets(data, pos, {end}, {op.compact}, {op.nullable}, "
                    f"{op.sub.flexible}, {op.sub.min_size}, {self.cls(f.struct)})",
                    ind + 1,
                )
                out("else:", ind)
                ind += 1
            self.read_items(op, target, end, ind, self.sub_call(op, end))
        elif kind == K_INTS:
            elem = op.elem_kind
            if op.compact:
                w = op.width
                out(
                    f"if not arrays & NUMPY_ARRAYS and pos < {end} and 0 < (_b := data[pos]) < 0x80 "
                    f"and pos + (_b - 1) * {w} < {end}:",
                    ind,
                )
                out(
                    f"{target} = list(_SHORT_ARRAYS[{elem}][_b - 1].unpack_from(data, pos + 1))",
                    ind + 1,
                )
                out(f"pos += 1 + (_b - 1) * {w}", ind + 1)
                out("else:", ind)
                ind += 1
            out(
                f"{target}, pos = r_int_array(data, pos, {end}, {_NAME[elem]!r}, {op.compact}, "
                f"{op.nullable}, arrays)",
                ind,
            )
        elif kind in (K_STRINGS, K_SCALARS):
            out(
                f"{target}, pos = r_array(data, pos, {end}, r_{_item_fn(op)}, {op.compact}, "
                f"{op.nullable}, {op.element_min_size()})",
                ind,
            )
        elif kind == K_STRUCT:
            self.read_struct(op, target, end, ind)
        elif kind == K_STRING and op.compact:
            # A one-byte length with all its text there, inline. Invalid UTF-8 leaves pos
            # at the string, where the reader's handler reports it.
            out(f"if pos < {end} and 0 < (_b := data[pos]) < 0x80 and pos + _b <= {end}:", ind)
            out(f"{target} = data[pos + 1:pos + _b].decode()", ind + 1)
            out("pos += _b", ind + 1)
            out("else:", ind)
            out(f"{target}, pos = r_{_string_fn('string', op)}(data, pos, {end})", ind + 1)
        elif op.records:
            out("if arrays & RECORD_VIEWS:", ind)
            out(
                f"{target}, pos = r_records_view(data, pos, {end}, {op.compact}, {op.nullable})",
                ind + 1,
            )
            out("else:", ind)
            out(f"{target}, pos = r_{_string_fn('bytes', op)}(data, pos, {end})", ind + 1)
        elif kind in (K_STRING, K_BYTES):
            out(f"{target}, pos = r_{_string_fn(_NAME[kind], op)}(data, pos, {end})", ind)
        else:
            out(f"{target}, pos = r_{_NAME[kind]}(data, pos, {end})", ind)

    def read_observed_value(self, op, target, end, ind):
        """What read_plain_value reads, one value at a time, each told to the observer:
        arrays as their length and their items (a struct's nested fields below it), a
        nullable struct's marker. Lists as arrays="list" reads them, bytes as
        records="bytes"; an item the observer does not keep is read and dropped."""
        out, kind = self.out, op.kind
        c = self.ns.const(op)
        if kind in (K_STRUCTS, K_INTS, K_STRINGS, K_SCALARS):
            item = (
                self.sub_call(op, end)
                if kind == K_STRUCTS
                else f"r_{_item_fn(op)}(data, pos, {end})"
            )
            self.read_items(op, target, end, ind, item, c)
        elif kind == K_STRUCT:
            self.read_struct(op, target, end, ind, c)
        elif kind in (K_STRING, K_BYTES):
            out(f"{target}, pos = r_{_string_fn(_NAME[kind], op)}(data, pos, {end})", ind)
        else:
            out(f"{target}, pos = r_{_NAME[kind]}(data, pos, {end})", ind)

    def reader(self):
        lay, out, observed = self.lay, self.out, self.observed
        out("", 0)
        if observed:
            out(f"def _o_{self.suffix}(data, pos, end, v, obs):", 0)
            out("_open, _close, _span = obs.open, obs.close, obs.span", 1)
        else:
            out(f"def _r_{self.suffix}(data, pos, end, v, arrays):", 0)
        out(f"o = _new({self.cls(lay.struct)})", 1)
        out("_f = ''", 1)
        out("try:", 1)
        out("pass", 2)
        for run in lay.plain if observed else _runs(lay.plain):
            if isinstance(run, list):
                self.read_run(run, 2)
                continue
            out(f"_f = {run.name!r}", 2)
            self.read_value(run, f"o.{run.name}", "end", 2)
        tagged = lay.tagged
        if lay.flexible:
            out("_f = ''", 2)
            if observed:
                self.observed_tags(tagged, 2)
            elif not tagged:
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
                self.known_tags(tagged, 3)
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

    def known_tags(self, tagged, ind):
        """The branches that read each known tag's value, which must fill its size; an
        `else:` follows for the unknown ones."""
        out = self.out
        for k, op in enumerate(tagged):
            out(f"{'elif' if k else 'if'} _tag == {op.field.tag}:", ind)
            out(f"_f = {op.name!r}", ind + 1)
            out("_tstart = pos", ind + 1)
            self.read_value(op, f"o.{op.name}", "_tend", ind + 1)
            out("if pos != _tend:", ind + 1)
            out("raise _e.tag_size_mismatch(_tstart, _tag)", ind + 2)
            out("_f = ''", ind + 1)

    def observed_tags(self, tagged, ind):
        """The tagged-field section as the observer sees it: the section, its count, each
        entry (its header, then its value or raw bytes)."""
        out = self.out
        for op in tagged:
            out(f"o.{op.name} = {self.default_expr(op)}", ind)
        out("_unknown = None", ind)
        out("_open('tags', None, pos)", ind)
        out("_at = pos", ind)
        out("_ntags, pos = r_uvarint(data, pos, end)", ind)
        out("_span('count', _at, pos, _ntags)", ind)
        out("_last = -1", ind)
        out("for _k in range(_ntags):", ind)
        out("_keep = _open('entry', _k, pos)", ind + 1)
        out("_at = pos", ind + 1)
        out("_tag, _size, pos = r_tag_header(data, pos, end, _last)", ind + 1)
        out("_span('header', _at, pos, (_tag, _size))", ind + 1)
        out("_last = _tag", ind + 1)
        out("_tend = pos + _size", ind + 1)
        self.known_tags(tagged, ind + 1)
        raw = ind + 1
        if tagged:
            out("else:", ind + 1)
            raw += 1
        out("_raw = bytes(data[pos:_tend])", raw)
        out("_span('raw', pos, _tend, _raw)", raw)
        out("if _keep:", raw)
        out("if _unknown is None:", raw + 1)
        out("_unknown = {}", raw + 2)
        out("_unknown[_tag] = _raw", raw + 1)
        out("pos = _tend", raw)
        out("_close(pos, _tag)", ind + 1)
        out("_close(pos, _ntags)", ind)
        out("o._unknown = _unknown", ind)


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


def read_observed(cls, data, pos, version, observer):
    """Read one message of `cls` from `data` (bytes) at `pos`, as decode_from reads it,
    telling `observer` what is read; returns (message, end).

    The observer has three methods. `open(what, subject, pos)` is called where a span
    starts, before it is read, and `close(end, value)` where the innermost open span
    ends, with what was read; so the observer knows every span's path, start, end and
    value, and after a DecodeError the spans still open are those the error is in.
    `span(what, start, end, value)` tells of a span already read. What they are:
    - open "field" (subject: the layout's Op) .. close(the field's value): each field,
      plain or a known tagged one; below it an array's spans, a struct's fields;
    - open "length" (Op) .. close(count, -1 for null): an array's count;
    - open "item" (index) .. close(item): one element; open returns whether the item is
      kept in the decoded list (an item not kept is read, checked and dropped);
    - open "marker" (Op) .. close(-1 or 1): a nullable struct's null marker;
    - open "tags" (None) .. close(count): a tagged-field section, in which span "count"
      (its count), then for each entry open "entry" (index; returns whether an unknown
      tag's bytes are kept) .. close(tag), in which span "header" ((tag, size)) and then
      the known field's "field", or span "raw" (an unknown tag's bytes).
    """
    check_version(version)
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise _e.bad_version(cls._NAME, version, cls._VERSIONS)
    _functions(cls, version)  # the namespace, and the reader decode would use
    with _lock:
        ns = cls.__dict__["_pure_ns"]
        read = ns.env[f"_o_{ns.observed_fn(cls._LAYOUTS.root(version))}"]
    return read(data, pos, len(data), version, observer)


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

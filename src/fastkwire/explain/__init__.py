"""The annotated byte layout of one Kafka frame: `explain(frame)`, a tree of `Node`s.

An interpreter over the schema definitions (`_schema`), independent of the generated
codecs, which do not track offsets. Every value is read with the pure-Python primitives
(`_pure`), so a malformed frame fails with the same reasons the codecs give.

`explain(frame)` returns a tree of `Node`s covering every byte of the frame: the size
prefix, each header and body field, array lengths, null markers and tagged-field counts.
Offsets are relative to the start of the frame (the int32 size prefix is byte 0).

A malformed frame raises `DecodeError`; the exception carries `.partial_tree`, the tree
up to the failing field. In it the node being read when decoding failed has `.error`
set (no node has, when the message decoded but the frame's size disagrees), and nodes
that were still open end at the error's offset.

The tree is bounded whatever the frame: an array shows its first `max_items` elements
and one "summary" node for the rest, which are read and checked (a malformed one fails
at its offset, as anywhere else) but get no nodes and keep no values. Text is formatted
only when a node is printed, and strings from the frame are printed escaped.

The tree's text forms are in `_explain_text`, the built-in examples in
`_explain_examples` (this module re-exports both), and `fastkwire explain` in `cli`.
"""
from __future__ import annotations

from .. import _explain_text, _pure, _wire
from .._explain_apis import api_names, header_versions, request_schemas, response_schemas
from .._explain_examples import example, example_names
from .._explain_text import hex_layout, render, render_tree, to_json
from .._layout import default_kind, layouts, version_text
from ..error_codes import error_name
from ..errors import DecodeError, bad_version, tag_size_mismatch, trailing, truncated

__all__ = ["Node", "explain", "example", "example_names", "render_tree", "hex_layout",
           "render", "to_json"]

SIZE_PREFIX = 4
DOC_WIDTH = _explain_text.DOC_WIDTH   # the text view's defaults, public here too
HEX_ROWS = _explain_text.HEX_ROWS
MAX_ITEMS = 100           # array elements (and tagged fields) shown per array by default
# Past max_items * NODES_PER_ITEM nodes in all, or FREE_NODES plus one per BYTES_PER_NODE
# input bytes, arrays show no elements: with a few hundred bytes a node, a small dense
# frame stays below 100 bytes of memory per input byte too.
NODES_PER_ITEM = 100
FREE_NODES = 500
BYTES_PER_NODE = 4


class Node:
    """One span of the frame. `value` is the decoded Python value (a dict for a struct,
    a list for an array: of its shown elements only, when it is summarised); `display`
    is how the text view prints it (None: not printed)."""

    # Slots and text made on demand: a tree may hold many thousands of nodes.
    __slots__ = ("name", "type", "offset", "size", "value", "children", "error",
                 "_display", "_description")

    def __init__(self, name, type, offset, size=None, value=None, display=None,
                 description="", children=None, error=None):
        self.name = name
        self.type = type
        self.offset = offset
        self.size = size                 # None only while the node is being read
        self.value = value
        self.children = [] if children is None else children
        self.error = error
        # Each is text or a function(node) -> text, called only when the node is printed.
        self._display = display
        self._description = description

    @property
    def display(self):
        d = self._display
        return d if d is None or isinstance(d, str) else d(self)

    @display.setter
    def display(self, text):
        self._display = text

    @property
    def description(self):
        d = self._description
        return d if isinstance(d, str) else d(self)

    @description.setter
    def description(self, text):
        self._description = text

    def __repr__(self):
        return f"Node({self.name!r}, {self.type!r}, offset={self.offset}, size={self.size})"

    @property
    def end(self) -> int:
        return self.offset + (self.size or 0)

    def walk(self):
        """This node and every node below it, depth first."""
        yield self
        for child in self.children:
            yield from child.walk()


# ---------------------------------------------------------------- schema lookups

def _default_dict(f):
    """A field's default as to_dict() shows it (a never-null struct: its fields' defaults)."""
    if default_kind(f) == _wire.D_NEW:
        return {g.py_name: _default_dict(g) for g in f.struct.fields}
    return f.default_value()


# ---------------------------------------------------------------- value display
# The walker gives nodes these functions rather than text; they run when a node is printed.

_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", '"': '\\"', "\\": "\\\\"}


def _escape_char(c: str) -> str:
    if c in _ESCAPES:
        return _ESCAPES[c]
    if c.isprintable():
        return c
    n = ord(c)
    return f"\\x{n:02x}" if n < 0x100 else f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _escape(text: str) -> str:
    """A string from the frame as inert text: control and format characters (escape
    sequences, bidi overrides, line breaks) as backslash escapes, and quotes escaped."""
    if text.isprintable() and '"' not in text and "\\" not in text:
        return text
    return "".join(_escape_char(c) for c in text)


def _quote(text: str, limit=60) -> str:
    return f'"{_escape(text[:limit])}..."' if len(text) > limit else f'"{_escape(text)}"'


def _show_string(value, compact) -> str:
    if value is None:
        return "null (compact, len+1=0)" if compact else "null (int16 len=-1)"
    n = len(value.encode("utf-8"))
    return f"{_quote(value)} (compact, len+1={n + 1})" if compact else f"{_quote(value)} (int16 len={n})"


def _hex(value: bytes, limit=32) -> str:
    text = value[:limit].hex()
    return text + "..." if len(value) > limit else text


def _show_bytes(value, compact) -> str:
    if value is None:
        return "null (compact, len+1=0)" if compact else "null (int32 len=-1)"
    shown = _hex(value) if value else "empty"
    return f"{shown} (compact, len+1={len(value) + 1})" if compact else f"{shown} (int32 len={len(value)})"


def _show_value(node) -> str:
    return str(node.value)


def _show_record_value(value):
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return _hex(value) if value else "empty"
    if isinstance(value, str):
        return _quote(value, 120)
    return str(value)


def _show_bool(node) -> str:
    return "true" if node.value else "false"


def _show_api_key(node) -> str:
    name = api_names().get(node.value)
    return f"{node.value} ({name})" if name else str(node.value)


def _show_error_code(node) -> str:
    return f"{node.value} ({error_name(node.value)})"


_SHOW_TEXT = {
    ("string", True): lambda node: _show_string(node.value, True),
    ("string", False): lambda node: _show_string(node.value, False),
    ("bytes", True): lambda node: _show_bytes(node.value, True),
    ("bytes", False): lambda node: _show_bytes(node.value, False),
}


def _shower(type_, compact, schema_name):
    """How a primitive field's value is printed."""
    if type_ in ("string", "bytes", "records"):
        return _SHOW_TEXT["string" if type_ == "string" else "bytes", compact]
    if type_ == "int16" and schema_name in ("RequestApiKey", "ApiKey"):
        return _show_api_key
    if type_ == "int16" and schema_name == "ErrorCode":
        return _show_error_code
    return _show_bool if type_ == "bool" else _show_value


def _count(length: Node) -> int:
    """The element count of an array's length node; -1 for null."""
    return length.value - 1 if length.type == "uvarint" else length.value


def _elements(n: int) -> str:
    return f"{n} element{'s' if n != 1 else ''}"


def _show_length(node) -> str:
    if node.type == "uvarint":
        return "0 (compact, null)" if node.value == 0 else f"{node.value} (compact, n+1)"
    return "-1 (null)" if node.value < 0 else str(node.value)


def _describe_length(node) -> str:
    n = _count(node)
    return "null array" if n < 0 else f"{_elements(n)} follow{'s' if n == 1 else ''}"


def _show_array(node) -> str:
    n = _count(node.children[0])
    return "null" if n < 0 else _elements(n)


def _show_marker(node) -> str:
    return f"{node.value} (null)" if node.value < 0 else f"{node.value} (present)"


def _show_tag(node) -> str:
    return f"tag {node.value}"


def _show_raw(node) -> str:
    return _hex(node.value) if node.value else "empty"


def _show_more_elements(node) -> str:
    return f"{node.value:,} more element{'s' if node.value != 1 else ''}, not shown"


def _show_more_tags(node) -> str:
    return f"{node.value:,} more tagged field{'s' if node.value != 1 else ''}, not shown"


SUMMARY_DOC = "read and checked, not shown (max_items, --max-items shows more)"


def _reader(type_, compact, nullable):
    """The _pure reader of a primitive type in its wire form."""
    if type_ in ("string", "bytes", "records"):
        kind = "string" if type_ == "string" else "bytes"
        return getattr(_pure, "r_" + ("compact_" if compact else "") + ("nullable_" if nullable else "") + kind)
    return getattr(_pure, "r_" + type_)


# ---------------------------------------------------------------- checking without showing
# Elements past the shown ones are read by these functions, compiled once per struct and
# version from the schema: the same reads, in the same order and with the same error
# paths as the walker's, but no nodes and no values.

_PLANS: dict = {}


def _plan(lay):
    """(fields, tagged, flexible) of a layout: [(python name, skip)] in wire order and
    {tag: (python name, skip)}, where skip(walker) reads one value."""
    plan = _PLANS.get(lay)     # layouts live as long as the process
    if plan is None:
        plan = _PLANS[lay] = (
            [(op.name, _skipper(op)) for op in lay.plain],
            {op.field.tag: (op.name, _skipper(op)) for op in lay.tagged},
            lay.flexible)
    return plan


def _items(op):
    """(skip one element, fixed width or None) of an array field."""
    if op.sub is not None:
        plan = _plan(op.sub)
        return (lambda w: w.skip_struct(plan)), None
    elem = op.field.element_type
    return _skip_value(_reader(elem, op.compact, False)), _wire.WIDTH.get(elem)


def _skip_value(read):
    def skip(w):
        w.pos = read(w.data, w.pos, w.end)[1]
    return skip


def _skipper(op):
    f, compact, nullable = op.field, op.compact, op.nullable
    if f.is_array:
        min_size = op.element_min_size()
        each, width = _items(op)

        def skip(w):
            count, w.pos = _pure.r_array_len(w.data, w.pos, w.end, compact, nullable, min_size)
            w.skip_items(each, width, 0, count)
        return skip
    if f.is_struct:
        plan = _plan(op.sub)

        def skip(w):
            if nullable:
                marker, w.pos = _pure.r_marker(w.data, w.pos, w.end)
                if marker != 1:
                    return
            w.skip_struct(plan)
        return skip
    return _skip_value(_reader(f.type, compact, nullable))


# ---------------------------------------------------------------- the interpreter

class _Walker:
    """Reads `data` from `pos` to `end`, appending a node for every value it shows."""

    def __init__(self, data: bytes, end: int, max_items: int | None):
        self.data = data
        self.end = end
        self.pos = 0
        self.max_items = max_items
        self.room = 0 if max_items is None else min(           # nodes left
            NODES_PER_ITEM * max_items, FREE_NODES + len(data) // BYTES_PER_NODE)

    def open(self, parent, name, type_, offset, description="") -> Node:
        node = Node(name, type_, offset, description=description)
        parent.children.append(node)
        self.room -= 1
        return node

    def shows(self, i) -> bool:
        """Whether element (or tagged field) i of its array (or section) gets nodes."""
        return self.max_items is None or (i < self.max_items and self.room > 0)

    def summary(self, parent, name, count, show, skip):
        """One node for the `count` elements that `skip()` reads without showing them."""
        node = self.open(parent, name, "summary", self.pos, SUMMARY_DOC)
        node.value = count
        skip()
        node.size = self.pos - node.offset
        node.display = show

    def leaf(self, parent, name, type_, reader, description="", show=_show_value):
        node = self.open(parent, name, type_, self.pos, description)
        node.value, self.pos = reader(self.data, self.pos, self.end)
        node.size = self.pos - node.offset
        node.display = show
        return node

    def struct_body(self, node, lay, tags_doc):
        values = {}
        for op in lay.ops:
            if op.mode == "plain":
                values[op.name] = self.field(node, op)
            else:
                values[op.name] = _default_dict(op.field)
        if lay.flexible:
            self.tagged_fields(node, lay, values, tags_doc)
        return values

    def field(self, parent, op):
        f = op.field
        name = op.name  # the Python name users type, in the header as in the body
        try:
            if f.is_array:
                return self.array(parent, name, op)
            if f.is_struct:
                return self.struct_field(parent, name, op)
            return self.primitive(parent, name, f.type, op.compact, op.nullable, f.doc, f.name).value
        except DecodeError as e:
            raise e.with_prefix(op.name) from None

    def primitive(self, parent, name, type_, compact, nullable, doc, schema_name=""):
        node = self.leaf(parent, name, type_, _reader(type_, compact, nullable), doc,
                         _shower(type_, compact, schema_name))
        if type_ == "records" and node.value:
            self.record_batches(node)
        return node

    # The record batches inside a records field (Produce, Fetch, ShareFetch): shown, not
    # checked as the Kafka message is (a broken batch is a note, not a broken frame).

    def record_batches(self, node):
        from .. import records       # on first use: most frames carry no records
        start = node.end - len(node.value)
        length = self.open(node, "length", "", node.offset, "the records' size in bytes")
        length.size, length.value, length.display = start - node.offset, len(node.value), _show_value
        try:
            batches = records.describe(node.value, max_records=self.max_items)
        except (DecodeError, ImportError) as e:   # ImportError: the compression extra
            note = self.open(node, "batches", "records", start, "the record batches in this field")
            note.size, note.display = len(node.value), f"not readable: {e}"
            return
        for batch in batches:
            self.record_node(node, batch, start, "")

    def record_node(self, parent, n, base, description):
        if (self.max_items is not None and self.room <= 0) or (n.size == 0 and not n.children):
            return   # (an empty key or value: its length node says so)
        node = self.open(parent, n.name, "", base + n.offset, description)
        node.size, node.value = n.size, n.value
        node.display = _show_record_value(n.value)
        # Below a compressed batch's records, offsets count in the decompressed bytes.
        inner = n.decompressed
        if inner:
            node.type = "compressed"
        base, description = (0, "offset in the decompressed bytes") if inner else (base, "")
        children = n.children
        for i, child in enumerate(children):
            if child.name.startswith("record[") and (".." in child.name or not self.shows(i)):
                rest = children[i:]   # records, maybe ending in describe's own summary
                count = sum(c.value if ".." in c.name else 1 for c in rest)
                more = Node(f"record[{i}..{i + count - 1}]", "summary", base + child.offset,
                            sum(c.size for c in rest), count, _show_more_elements, SUMMARY_DOC)
                node.children.append(more)
                break
            self.record_node(node, child, base, description)

    def array(self, parent, name, op):
        f, compact = op.field, op.compact
        node = self.open(parent, name, f.type, self.pos, f.doc)
        elem = f.element_type
        length = self.open(node, "length", "uvarint" if compact else "int32", self.pos)
        count, self.pos = _pure.r_array_len(self.data, self.pos, self.end, compact, op.nullable,
                                            op.element_min_size())
        length.size = self.pos - length.offset
        length.value = count + 1 if compact else count
        length.display, length.description, node.display = _show_length, _describe_length, _show_array
        if count >= 0:
            node.value = []
        for i in range(max(count, 0)):
            if not self.shows(i):
                each, width = _items(op)
                self.summary(node, f"{name}[{i}..{count - 1}]", count - i, _show_more_elements,
                             lambda: self.skip_items(each, width, i, count))
                break
            try:
                if op.sub is not None:
                    item = self.open(node, f"{name}[{i}]", elem, self.pos)
                    item.value = self.struct_body(item, op.sub, "number of tagged fields in this struct")
                    item.display = "struct"
                    item.size = self.pos - item.offset
                else:
                    item = self.primitive(node, f"{name}[{i}]", elem, compact, False, "")
            except DecodeError as e:
                raise e.with_prefix(f"[{i}]") from None
            node.value.append(item.value)
        node.size = self.pos - node.offset
        return node.value

    def struct_field(self, parent, name, op):
        node = self.open(parent, name, op.field.type, self.pos, op.field.doc)
        present = True
        if op.nullable:
            marker = self.leaf(node, "present", "int8", _pure.r_marker,
                               "null marker: -1 null, 1 present", _show_marker)
            present = marker.value == 1
        if present:
            node.value = self.struct_body(node, op.sub, "number of tagged fields in this struct")
        node.display = "struct" if present else "null"
        node.size = self.pos - node.offset
        return node.value

    def tagged_fields(self, parent, lay, values, doc):
        section = self.open(parent, "tagged_fields", "uvarint", self.pos, doc)
        start = self.pos
        count, self.pos = _pure.r_uvarint(self.data, start, self.end)
        section.value = count
        section.display = _show_value
        if count:
            # The section spans its fields too; the count itself gets a node of its own.
            c = self.open(section, "count", "uvarint", start, "number of tagged fields that follow")
            c.size, c.value, c.display = self.pos - start, count, _show_value
        known = {op.field.tag: op for op in lay.tagged}
        last = -1
        for i in range(count):
            if not self.shows(i):
                tagged = _plan(lay)[1]
                self.summary(section, f"tagged fields [{i}..{count - 1}]", count - i,
                             _show_more_tags, lambda: self.skip_tags(tagged, i, count, last))
                break
            entry = self.open(section, "tagged field", "tagged", self.pos)
            tag, size, payload = _pure.r_tag_header(self.data, self.pos, self.end, last)
            last = tag
            op = known.get(tag)
            entry.name = op.name if op else "unknown"
            entry.value = tag
            entry.display = _show_tag
            if op is None:   # a known field's own node below carries its description
                entry.description = "a tag this version does not define; kept as raw bytes"
            self.leaf(entry, "tag", "uvarint", _pure.r_uvarint, "tag number")
            self.leaf(entry, "size", "uvarint", _pure.r_uvarint, "bytes in the tagged value")
            if op is None:
                raw = self.leaf(entry, "data", "bytes",
                                lambda d, p, e: (bytes(d[p:p + size]), p + size),
                                "raw tagged value", _show_raw)
                values.setdefault("unknown_tagged_fields", {})[tag] = raw.value
            else:
                outer_end, self.end = self.end, payload + size
                values[op.name] = self.field(entry, op)
                self.end = outer_end
                if self.pos != payload + size:
                    raise tag_size_mismatch(payload, tag).with_prefix(op.name)
            entry.size = self.pos - entry.offset
        section.size = self.pos - start

    # Reading without showing: see _plan.

    def skip_struct(self, plan):
        fields, tagged, flexible = plan
        for name, skip in fields:
            try:
                skip(self)
            except DecodeError as e:
                raise e.with_prefix(name) from None
        if flexible:
            if self.pos < self.end and self.data[self.pos] == 0:    # no tagged fields: the usual
                self.pos += 1
                return
            count, self.pos = _pure.r_uvarint(self.data, self.pos, self.end)
            self.skip_tags(tagged, 0, count, -1)

    def skip_items(self, each, width, start, count):
        if width is not None:    # fixed width: the count was checked against the bytes left
            self.pos += max(count - start, 0) * width
            return
        for i in range(start, count):
            try:
                each(self)
            except DecodeError as e:
                raise e.with_prefix(f"[{i}]") from None

    def skip_tags(self, tagged, start, count, last):
        for _ in range(start, count):
            tag, size, self.pos = _pure.r_tag_header(self.data, self.pos, self.end, last)
            last, payload = tag, self.pos
            if tag not in tagged:
                self.pos += size
                continue
            name, skip = tagged[tag]
            outer_end, self.end = self.end, payload + size
            try:
                skip(self)
            except DecodeError as e:
                raise e.with_prefix(name) from None
            self.end = outer_end
            if self.pos != payload + size:
                raise tag_size_mismatch(payload, tag).with_prefix(name)


def _close_open_nodes(root: Node, err: DecodeError):
    """After a failure: open nodes end at the error; the innermost one failed (the root
    is open until the end, so it never counts as the failing node)."""
    node, failed = root, None
    while node is not None:
        if node.size is None:
            node.size = max(0, err.offset - node.offset)
            failed = node
        node = node.children[-1] if node.children else None
    if failed is not None and failed is not root:
        failed.error = err


def explain(frame, api_key: int | str | None = None, version: int | None = None, *,
            max_items: int | None = MAX_ITEMS) -> Node:
    """The annotated tree of one frame (int32 size prefix included).

    Requests are recognised from their header; for a response give `api_key` (the key,
    or the API's name: "LeaveGroup") and `version`. Raises DecodeError (with
    `.partial_tree`) on malformed input.

    An array (or tagged-field section) shows its first `max_items` elements, then one
    node of type "summary" for the rest, which are read and checked but not kept; once
    the tree holds `NODES_PER_ITEM * max_items` nodes, or `FREE_NODES` plus one per
    `BYTES_PER_NODE` bytes of the frame, further arrays show none. The tree thus stays
    small whatever the frame. `max_items=None` shows everything.
    """
    data = bytes(frame)
    if max_items is not None and (type(max_items) is not int or max_items < 0):
        raise ValueError(f"max_items must be a count or None, not {max_items!r}")
    if (api_key is None) != (version is None):
        raise ValueError("a response needs both api_key and version")
    if isinstance(api_key, str):
        api_key = _api_key_of(api_key)
    if api_key is not None:
        msg = response_schemas().get(api_key)
        if msg is None:
            raise ValueError(f"no response schema for API key {api_key}")
        if version not in msg.versions:
            raise bad_version(msg.name, version, version_text(msg.versions))
    root = Node("frame", "", 0, value={})
    w = _Walker(data, len(data), max_items)
    try:
        _frame(w, root, api_key, version)
    except DecodeError as err:
        _close_open_nodes(root, err)
        err.partial_tree = root
        raise
    return root


def _api_key_of(name: str) -> int:
    """The key of an API named "LeaveGroup" (or "LeaveGroupResponse")."""
    bare = name[: -len("Response")] if name.endswith("Response") else name
    keys = {n: k for k, n in api_names().items()}
    if bare not in keys:
        raise ValueError(f"api_key: no API named {name!r}")
    return keys[bare]


def _frame(w: _Walker, root: Node, api_key, version):
    info = root.value
    frame = w.open(root, "Frame", "", 0, "length-delimited framing")
    size = w.leaf(frame, "size", "int32", _pure.r_int32, "number of bytes that follow").value
    frame.size = w.pos
    info["size"] = size

    if api_key is None:
        msg, version, hdr_name, hv = _request_plan(w)
        # The API and version are judged as decode_request judges them, before the rest
        # of the header (which is still shown when it reads): the same error for the frame.
        refusal = None
        if w.end < 8:  # too short for the API key and version
            refusal = truncated(4, 4, max(w.end - 4, 0))
        elif msg is None:
            refusal = DecodeError(f"unknown API key {_pure.r_int16(w.data, 4, w.end)[0]}", 4)
        elif version not in msg.versions:
            refusal = bad_version(msg.name, version, f"{msg.versions.low}-{msg.versions.high}")
    else:
        refusal = None
        msg, hdr_name, hv = response_schemas()[api_key], "ResponseHeader", header_versions(api_key, version)[1]
    if msg is not None:
        root.name, root.type = msg.name, f"message v{version}"
        info.update(message=msg.name, version=version)
    info["header_version"] = hv

    header_layouts = layouts(hdr_name)
    header = w.open(root, hdr_name, f"v{hv}", w.pos, header_layouts.message.doc)
    try:
        info["header"] = header.value = w.struct_body(
            header, header_layouts.root(hv), "number of tagged fields in the header")
    except DecodeError as e:
        if refusal is not None:
            raise refusal from None
        raise e.with_prefix("header") from None
    header.size = w.pos - header.offset
    if refusal is not None:
        raise refusal

    body = w.open(root, msg.name, "struct", w.pos, msg.doc)
    info["body"] = body.value = w.struct_body(
        body, layouts(msg.name).root(version), "number of tagged fields in this struct")
    body.size = w.pos - body.offset
    root.size = w.pos

    # The size is checked last, so that a wrong one still shows the whole message.
    n = len(w.data)
    if size != n - SIZE_PREFIX and w.pos != SIZE_PREFIX + size:
        raise DecodeError(f"frame size {size} does not match the {n - 4} bytes that follow", 0)
    if w.pos < n:
        raise trailing(w.pos, n - w.pos)


def _request_plan(w: _Walker):
    """(message, version, header name, header version) from the api key and version."""
    try:
        key, _ = _pure.r_int16(w.data, 4, w.end)
        version, _ = _pure.r_int16(w.data, 6, w.end)
    except DecodeError:
        # Too short to tell: read it as header v1 and let that fail where it runs out.
        return None, None, "RequestHeader", 1
    msg = request_schemas().get(key)
    flexible = msg is not None and msg.is_flexible(version)
    return msg, version, "RequestHeader", 2 if flexible else 1

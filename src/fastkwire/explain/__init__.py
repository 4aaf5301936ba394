"""The annotated byte layout of one Kafka frame: `explain(frame)`, a tree of `Node`s.

An observer of the codec's own reading: the frame is checked by the framing functions
decode_request and decode_response use (`_framing`), and the header and body are read
by the pure engine's reader with an observer (`_pure_engine.read_observed`), which
tells this module every span it reads. So explain and decode fail with the same error
at the same offset by construction; this module only turns the spans into nodes.

`explain(frame)` returns a tree of `Node`s covering every byte of the frame: the size
prefix, each header and body field, array lengths, null markers and tagged-field counts.
Offsets are relative to the start of the frame (the int32 size prefix is byte 0).

A malformed frame raises `DecodeError` (the one decode raises); the exception carries
`.partial_tree`, the tree up to the failing field. In it the node being read when
reading failed has `.error` set, and nodes that were still open end at that error's
offset. A frame that decode refuses before reading it (a wrong size) is still read as
far as it goes: its tree shows the whole message, or the field where reading failed
(with that error), and the error raised is decode's.

The tree is bounded whatever the frame: an array shows its first `max_items` elements
and one "summary" node for the rest, which are read and checked (a malformed one fails
at its offset, as anywhere else) but get no nodes and keep no values. Text is formatted
only when a node is printed, and strings from the frame are printed escaped.

The tree's text forms are in `_explain_text`, the built-in examples in
`_explain_examples` (this module re-exports both), and `fastkwire explain` in `cli`.
"""

from __future__ import annotations

import struct

from .. import _explain_text, _framing, _pure, _wire
from .. import _messages_python as _classes
from .._explain_apis import api_names, response_schemas
from .._explain_examples import example, example_names
from .._explain_text import hex_layout, render, render_tree, to_json
from .._layout import default_kind, version_text
from .._pure_engine import read_observed
from ..error_codes import error_name
from ..errors import DecodeError, UnsupportedVersionError, bad_version, trailing

__all__ = [
    "Node",
    "explain",
    "response_readings",
    "reading_names",
    "example",
    "example_names",
    "render_tree",
    "hex_layout",
    "render",
    "to_json",
]

SIZE_PREFIX = 4
DOC_WIDTH = _explain_text.DOC_WIDTH  # the text view's defaults, public here too
HEX_ROWS = _explain_text.HEX_ROWS
MAX_ITEMS = 100  # array elements (and tagged fields) shown per array by default
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
    __slots__ = (
        "name",
        "type",
        "offset",
        "size",
        "value",
        "children",
        "error",
        "_display",
        "_description",
    )

    def __init__(
        self,
        name,
        type,
        offset,
        size=None,
        value=None,
        display=None,
        description="",
        children=None,
        error=None,
    ):
        self.name = name
        self.type = type
        self.offset = offset
        self.size = size  # None only while the node is being read
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
    return (
        f"{_quote(value)} (compact, len+1={n + 1})"
        if compact
        else f"{_quote(value)} (int16 len={n})"
    )


def _hex(value: bytes, limit=32) -> str:
    text = value[:limit].hex()
    return text + "..." if len(value) > limit else text


def _show_bytes(value, compact) -> str:
    if value is None:
        return "null (compact, len+1=0)" if compact else "null (int32 len=-1)"
    shown = _hex(value) if value else "empty"
    return (
        f"{shown} (compact, len+1={len(value) + 1})"
        if compact
        else f"{shown} (int32 len={len(value)})"
    )


def _show_value(node) -> str:
    return str(node.value)


def _show_record_value(value):
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        if not value:
            return "empty"
        try:
            text = bytes(value).decode("utf-8")
        except UnicodeDecodeError:
            return _hex(value)
        # Printable text (most keys and values are) reads as text, its bytes beside it.
        return f"{_quote(text)} (hex {_hex(value)})" if text.isprintable() else _hex(value)
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


# ---------------------------------------------------------------- the tree, as the codec reads

_SHOW_SPAN = {"marker": _show_marker, "tags": _show_value, "entry": _show_tag}
_ARRAYS = (_wire.K_STRUCTS, _wire.K_INTS, _wire.K_STRINGS, _wire.K_SCALARS)


class _Open:
    """A span the reader has opened and not yet closed."""

    __slots__ = ("node", "what", "op", "lay", "values", "count", "summary", "struct", "tags_doc")

    def __init__(self, node, what, op=None, lay=None):
        self.node = node
        self.what = what
        self.op = op  # the field's (or the array's) Op
        self.lay = lay  # a struct's layout
        self.values = None if lay is None else _struct_values(lay)  # as to_dict() shows them
        self.count = 0  # an array's or a section's count, once read
        self.summary = None  # the node standing for the elements not shown
        self.struct = None  # a section's (or an entry's) struct span
        self.tags_doc = "number of tagged fields in this struct"


def _struct_values(lay):
    """A struct's values before its fields are read, in schema order: a tagged field at
    its default until its tag is read (a field the version lacks is not in the message)."""
    return {
        op.name: _default_dict(op.field) if op.mode == "tagged" else None
        for op in lay.ops
        if op.mode != "absent"
    }


_KNOWN: dict = {}


def _known_tags(lay):
    """{tag: Op} of a layout's tagged fields (layouts live as long as the process)."""
    known = _KNOWN.get(lay)
    if known is None:
        known = _KNOWN[lay] = {op.field.tag: op for op in lay.tagged}
    return known


def _uvarint_end(data, pos):
    """Where the unsigned varint at pos ends (one the reader has read)."""
    while data[pos] & 0x80:
        pos += 1
    return pos + 1


class _Tree:
    """The observer of the pure engine's reader (`_pure_engine.read_observed`): a node
    for every span it reads, values for the shown ones. Elements past `max_items` (or
    past the node budget) get one summary node; the reader still reads and checks them,
    and drops them."""

    def __init__(self, data: bytes, max_items: int | None):
        self.data = data
        self.max_items = max_items
        self.room = (
            0
            if max_items is None
            else min(  # nodes left
                NODES_PER_ITEM * max_items, FREE_NODES + len(data) // BYTES_PER_NODE
            )
        )
        self.stack = []  # the open spans, innermost last
        self.quiet = 0  # depth inside an element that gets no nodes

    def add(self, parent, name, type_, offset, description="") -> Node:
        node = Node(name, type_, offset, description=description)
        parent.children.append(node)
        self.room -= 1
        return node

    def shows(self, i) -> bool:
        """Whether element (or tagged field) i of its array (or section) gets nodes."""
        return self.max_items is None or (i < self.max_items and self.room > 0)

    def read(self, node, cls, version, pos, tags_doc) -> int:
        """Read one struct of `cls` (a header or a body) at pos below `node`; its end."""
        lay = cls._LAYOUTS.root(version)
        span = _Open(node, "struct", lay=lay)
        span.tags_doc = tags_doc
        self.stack.append(span)
        end = read_observed(cls, self.data, pos, version, self)[1]
        self.stack.pop()
        node.size = end - node.offset
        node.value = span.values
        return end

    # The reader's calls (see read_observed).

    def open(self, what, subject, pos):
        if self.quiet:
            self.quiet += 1
            return False
        top = self.stack[-1]
        if what == "field":
            op = subject
            f = op.field
            node = self.add(top.node, op.name, f.type, pos, f.doc)
            span = _Open(node, what, op, op.sub if op.kind == _wire.K_STRUCT else None)
        elif what == "item":
            if not self.shows(subject):
                self.summarise(
                    top,
                    f"{top.op.name}[{subject}..{top.count - 1}]",
                    subject,
                    _show_more_elements,
                    pos,
                )
                return False
            op = top.op
            elem = op.field.element_type
            node = self.add(top.node, f"{op.name}[{subject}]", elem, pos)
            span = _Open(node, what, op, op.sub)
        elif what == "length":
            node = self.add(top.node, "length", "uvarint" if subject.compact else "int32", pos)
            span = _Open(node, what, subject)
        elif what == "marker":
            node = self.add(top.node, "present", "int8", pos, "null marker: -1 null, 1 present")
            span = _Open(node, what)
        elif what == "tags":
            node = self.add(top.node, "tagged_fields", "uvarint", pos, top.tags_doc)
            span = _Open(node, what)
            span.struct = top
        else:  # "entry"
            if not self.shows(subject):
                self.summarise(
                    top,
                    f"tagged fields [{subject}..{top.count - 1}]",
                    subject,
                    _show_more_tags,
                    pos,
                )
                return False
            node = self.add(top.node, "tagged field", "tagged", pos)
            span = _Open(node, what)
            span.struct = top.struct
        self.stack.append(span)
        return True

    def summarise(self, top, name, first, show, pos):
        """Element `first` of `top` on get no nodes: one summary node stands for them."""
        if top.summary is None:
            node = top.summary = self.add(top.node, name, "summary", pos, SUMMARY_DOC)
            node.value, node.display = top.count - first, show
        self.quiet = 1

    def close(self, pos, value):
        if self.quiet:
            self.quiet -= 1
            return
        span = self.stack.pop()
        node = span.node
        node.size = pos - node.offset
        what = span.what
        if span.summary is not None:
            span.summary.size = pos - span.summary.offset
        # (Displays are given as spans close: a node that failed shows no value.)
        if what == "field":
            op = span.op
            if op.kind == _wire.K_STRUCT:
                node.value = None if value is None else span.values
                node.display = "null" if value is None else "struct"
            elif op.kind not in _ARRAYS:  # an array's value is its shown items
                node.value = value
                node.display = _shower(op.field.type, op.compact, op.field.name)
                if op.records and value:
                    self.record_batches(node)
            parent = self.stack[-1]
            (parent.struct if parent.what == "entry" else parent).values[op.name] = node.value
        elif what == "item":
            if span.values is None:
                node.value, node.display = value, _shower(node.type, span.op.compact, "")
            else:
                node.value, node.display = span.values, "struct"
            self.stack[-1].node.value.append(node.value)
        elif what == "length":
            node.value = value + 1 if span.op.compact else value
            node.display, node.description = _show_length, _describe_length
            array = self.stack[-1]
            array.count = value
            array.node.display = _show_array
            if value >= 0:
                array.node.value = []
        else:  # marker, tags, entry
            node.value = value
            node.display = _SHOW_SPAN[what]

    def span(self, what, start, end, value):
        if self.quiet:
            return
        top = self.stack[-1]
        node = top.node
        if what == "count":
            top.count = node.value = value
            if value:
                # The section spans its fields too; the count itself gets a node of its own.
                c = self.add(node, "count", "uvarint", start, "number of tagged fields that follow")
                c.size, c.value, c.display = end - start, value, _show_value
        elif what == "header":
            tag, size = value
            op = _known_tags(top.struct.lay).get(tag)
            node.name, node.value = (op.name if op else "unknown"), tag
            if op is None:  # a known field's own node below carries its description
                node.description = "a tag this version does not define; kept as raw bytes"
            split = _uvarint_end(self.data, start)
            for name, at, stop, v, doc in (
                ("tag", start, split, tag, "tag number"),
                ("size", split, end, size, "bytes in the tagged value"),
            ):
                leaf = self.add(node, name, "uvarint", at, doc)
                leaf.size, leaf.value, leaf.display = stop - at, v, _show_value
        else:  # "raw": an unknown tag's bytes
            raw = self.add(node, "data", "bytes", start, "raw tagged value")
            raw.size, raw.value, raw.display = end - start, value, _show_raw
            top.struct.values.setdefault("unknown_tagged_fields", {})[node.value] = value

    # The record batches inside a records field (Produce, Fetch, ShareFetch): shown, not
    # checked as the Kafka message is (a broken batch is a note, not a broken frame).

    def record_batches(self, node):
        from .. import records  # on first use: most frames carry no records

        start = node.end - len(node.value)
        length = self.add(node, "length", "", node.offset, "the records' size in bytes")
        length.size, length.value, length.display = (
            start - node.offset,
            len(node.value),
            _show_value,
        )
        try:
            batches = records.describe(node.value, max_records=self.max_items)
        except (DecodeError, ImportError) as e:  # ImportError: the compression extra
            note = self.add(node, "batches", "records", start, "the record batches in this field")
            note.size, note.display = len(node.value), f"not readable: {e}"
            return
        for batch in batches:
            self.record_node(node, batch, start, "")

    def record_node(self, parent, n, base, description):
        if (self.max_items is not None and self.room <= 0) or (n.size == 0 and not n.children):
            return  # (an empty key or value: its length node says so)
        node = self.add(parent, n.name, "", base + n.offset, description)
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
                rest = children[i:]  # records, maybe ending in describe's own summary
                count = sum(c.value if ".." in c.name else 1 for c in rest)
                more = Node(
                    f"record[{i}..{i + count - 1}]",
                    "summary",
                    base + child.offset,
                    sum(c.size for c in rest),
                    count,
                    _show_more_elements,
                    SUMMARY_DOC,
                )
                node.children.append(more)
                break
            self.record_node(node, child, base, description)


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


def explain(
    frame,
    api_key: int | str | None = None,
    version: int | None = None,
    *,
    max_items: int | None = MAX_ITEMS,
    try_responses: bool = False,
) -> Node:
    """The annotated tree of one frame (int32 size prefix included).

    Requests are recognised from their header; for a response give `api_key` (the key,
    or the API's name: "LeaveGroup") and `version`. Raises DecodeError (with
    `.partial_tree`) on malformed input.

    A response header holds only a correlation id, so a response's bytes do not say
    which API they answer. With `try_responses=True` and no `api_key`, bytes that do not
    read as a request are tried as a response of every API and version
    (`response_readings`): when the readings that fit all belong to one API, the tree is
    that API's newest fitting version, and `root.value["reading"]` says why it was
    chosen; otherwise the request's error is raised, with `.response_readings` set to
    the readings that fit (none, or those of several APIs).

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
    try:
        _frame(_Tree(data, max_items), root, api_key, version)
    except DecodeError as err:
        _close_open_nodes(root, err)
        err.partial_tree = root
        if try_responses and api_key is None and _whole_frame(data):
            return _as_response(data, err, max_items)
        raise
    except UnsupportedVersionError as err:  # a request header's version out of range
        if try_responses and api_key is None:
            return _as_response(data, err, max_items)
        raise
    return root


def _whole_frame(data) -> bool:
    """Whether the size prefix counts exactly the bytes that follow: a cut (or overlong)
    frame reads as no response either, so trying them would only mislead."""
    return len(data) >= 4 and int.from_bytes(data[:4], "big", signed=True) == len(data) - 4


def response_readings(frame) -> list[tuple[int, int]]:
    """Every (api_key, version) whose response the codec's decode_response reads from the
    frame without error."""
    data = bytes(frame)
    fits = []
    for key, msg in sorted(response_schemas().items()):
        for version in range(msg.versions.low, msg.versions.high + 1):
            try:
                _classes.decode_response(data, key, version)
            except DecodeError:
                continue
            fits.append((key, version))
    return fits


def _as_response(data, err, max_items):
    """The frame read as the one API's response that fits it, else `err` (raised)."""
    readings = response_readings(data)
    err.response_readings = readings
    if not readings or len({key for key, _ in readings}) > 1:
        raise err
    key, version = readings[-1]
    root = explain(data, key, version, max_items=max_items)
    versions = [v for _, v in readings]
    name = response_schemas()[key].name
    fit = (
        f"only {name} v{version} reads"
        if len(versions) == 1
        else f"only {name} {_version_list(versions)} read"
    )
    why = "" if len(versions) == 1 else f" (shown as v{version}, the newest)"
    root.value = {
        "reading": (
            f"does not read as a request ({err}); read as a response: a response header does not say which "
            f"API it answers, and of every API and version {fit} these bytes exactly{why}"
        ),
        **root.value,
    }
    return root


def _version_list(versions) -> str:
    """[1, 2, 3, 5] -> "v1-v3, v5"."""
    runs = []
    for v in versions:
        if runs and v == runs[-1][1] + 1:
            runs[-1][1] = v
        else:
            runs.append([v, v])
    return ", ".join(f"v{a}" if a == b else f"v{a}-v{b}" for a, b in runs)


def reading_names(readings) -> str:
    """Response readings as text: "FetchResponse v7-v11, MetadataResponse v2"."""
    by_key: dict = {}
    for key, version in readings:
        by_key.setdefault(key, []).append(version)
    return ", ".join(
        f"{response_schemas()[key].name} {_version_list(vs)}" for key, vs in by_key.items()
    )


def _api_key_of(name: str) -> int:
    """The key of an API named "LeaveGroup" (or "LeaveGroupResponse")."""
    bare = name[: -len("Response")] if name.endswith("Response") else name
    keys = {n: k for k, n in api_names().items()}
    if bare not in keys:
        raise ValueError(f"api_key: no API named {name!r}")
    return keys[bare]


def _frame(tree: _Tree, root: Node, api_key, version):
    """The frame read as decode_request (or decode_response) reads it: the same checks in
    the same order, so the same error. The tree shows what reads past a refusal: the
    header after a refused API key or version, the whole message after a wrong size."""
    data = tree.data
    info = root.value
    frame = tree.add(root, "Frame", "", 0, "length-delimited framing")
    size = tree.add(frame, "size", "int32", 0, "number of bytes that follow")
    size.value, _ = _pure.r_int32(data, 0, len(data))
    size.size = frame.size = SIZE_PREFIX
    size.display = _show_value
    info["size"] = size.value
    size_error = api_error = None
    try:
        _framing.check_size(data)
    except DecodeError as e:
        size_error = e
    if api_key is None:
        header_cls = _classes.RequestHeader
        try:
            cls, version = _framing.request_api(data, _classes.REQUEST_CLASSES)
        except (DecodeError, UnsupportedVersionError) as e:
            api_error = e
            cls, version = _claimed_api(data)
        hv = 1 if cls is None else _framing.request_header_version(cls, version)
    else:
        header_cls = _classes.ResponseHeader
        cls = _classes.RESPONSE_CLASSES[api_key]
        hv = _framing.response_header_version(cls, version)
    if cls is not None:
        root.name, root.type = cls.__name__, f"message v{version}"
        info.update(message=cls.__name__, version=version)
    info["header_version"] = hv
    refusal = size_error or api_error  # what decode raises before it reads the header

    header = tree.add(
        root, header_cls.__name__, f"v{hv}", SIZE_PREFIX, header_cls._LAYOUTS.message.doc
    )
    try:
        pos = tree.read(
            header, header_cls, hv, SIZE_PREFIX, "number of tagged fields in the header"
        )
    except DecodeError as e:
        if refusal is not None:
            _close_open_nodes(root, e)
            raise refusal from None
        raise e.with_prefix("header") from None
    info["header"] = header.value
    if api_error is not None:  # no body: decode would not know which
        raise refusal

    body = tree.add(root, cls.__name__, "struct", pos, cls._LAYOUTS.message.doc)
    try:
        pos = tree.read(body, cls, version, pos, "number of tagged fields in this struct")
    except DecodeError as e:
        if refusal is not None:
            _close_open_nodes(root, e)
            raise refusal from None
        raise
    info["body"] = body.value
    root.size = pos
    if refusal is not None:
        raise refusal
    if pos < len(data):
        raise trailing(pos, len(data) - pos)


def _claimed_api(data):
    """(class or None, version) a refused request claims, to show its header with."""
    if len(data) < 8:
        return None, None
    key, version = struct.unpack_from(">hh", data, 4)
    return _classes.REQUEST_CLASSES.get(key), version

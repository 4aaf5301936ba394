"""The text forms of an explain tree: hex layout, object tree, title, JSON. The tree's
`Node`s are read by their attributes only, so this module needs no import of explain."""

from __future__ import annotations

import json
import uuid
from itertools import chain

DOC_WIDTH = 80  # descriptions longer than this are cut in the text view
HEX_ROWS = 4096  # rows of the hex layout printed by default (64 KiB)


def _hex_lines(data, max_rows):
    n = len(data)
    width = max(4, len(f"{max(n - 1, 0):x}"))
    yield f"byte layout ({n} bytes, 16 bytes per row)"
    yield " " * width + "  " + " ".join(f"{i:>2X}" for i in range(16))
    shown = n if max_rows is None else min(n, 16 * max_rows)
    for row in range(0, shown, 16):
        chunk = data[row : row + 16]
        text = "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)
        yield f"{row:0{width}x}  {' '.join(f'{b:02x}' for b in chunk):<47}  {text}"
    if shown < n:
        rows = (n - shown + 15) // 16
        yield f"... {rows:,} more row{'s' if rows != 1 else ''} (bytes 0x{shown:x}-0x{n - 1:x}) not shown"


def hex_layout(data: bytes, max_rows: int | None = HEX_ROWS) -> str:
    """Offsets and 16 bytes per row, with a printable-ASCII column; past `max_rows` rows
    (None: no limit) one line says how many more there are."""
    return "\n".join(_hex_lines(data, max_rows))


def _line(node, doc_width) -> str:
    parts = [node.name]
    if node.type:
        parts.append(node.type)
    if node.error is not None:
        parts.append(f"= !! {node.error.reason}")
    elif node.display is not None:
        parts.append(f"= {node.display}")
    parts.append(f"[0x{node.offset:04x}, {node.size}B]")
    doc = node.description
    if doc_width and len(doc) > doc_width:
        doc = doc[: doc_width - 3] + "..."
    if doc:
        parts.append(doc)
    return " ".join(parts)


def _child_lines(node, doc_width, prefix=""):
    last = len(node.children) - 1
    for i, child in enumerate(node.children):
        yield prefix + "+-- " + _line(child, doc_width)
        yield from _child_lines(child, doc_width, prefix + ("  " if i == last else "| "))


def _tree_lines(root, doc_width):
    return chain([_line(root, doc_width)], _child_lines(root, doc_width))


def render_tree(root, doc_width: int | None = DOC_WIDTH) -> str:
    """The object tree, one node a line, in the `+--` / `|` style."""
    return "\n".join(_tree_lines(root, doc_width))


def _title(root, nbytes: int) -> str:
    info = root.value or {}
    if "message" not in info:
        return f"{nbytes} bytes on the wire"
    kind = "request" if info["message"].endswith("Request") else "response"
    return (
        f"{info['message']} v{info['version']}, {kind} header v{info['header_version']}, "
        f"{nbytes} bytes on the wire"
    )


def render_lines(frame, root, doc_width, max_rows):
    """The lines of `render`, one at a time: the command line writes them in pieces."""
    data = bytes(frame)
    reading = (root.value or {}).get("reading")  # how a frame without an API was read
    head = [_title(root, len(data))] + ([f"reading: {reading}"] if reading else [])
    return chain(
        head + [""], _hex_lines(data, max_rows), ["", "object tree"], _tree_lines(root, doc_width)
    )


def render(frame, root, doc_width: int | None = DOC_WIDTH, max_rows: int | None = HEX_ROWS) -> str:
    """Title, hex layout and object tree: what `fastkwire explain` prints."""
    return "\n".join(render_lines(frame, root, doc_width, max_rows))


def _json_default(value):
    if isinstance(value, (bytes, bytearray)):
        return value.hex()
    if isinstance(value, uuid.UUID):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


# ASCII (the rest as \u escapes): valid on any stream, and no control character survives.
JSON_ENCODER = json.JSONEncoder(indent=2, ensure_ascii=True, default=_json_default)


def to_json(root) -> str:
    """The tree's values as JSON (ASCII): bytes as hex, UUIDs as text, snake_case keys.
    A summarised array lists its shown elements only."""
    return JSON_ENCODER.encode(root.value)


def message_value(frame, root) -> dict:
    """The tree's values with the body decoded whole, by the pure codec (the tree keeps
    the shown elements only). Only for a frame that explain read without error."""
    from . import _messages_python  # here: only --json needs it
    from ._layout import layouts

    info = dict(root.value)
    body = root.children[2]
    cls = getattr(_messages_python, info["message"])
    whole = cls.decode_from(frame, info["version"], body.offset)[0].to_dict()
    info["body"] = _version_fields(whole, layouts(info["message"]).root(info["version"]))
    return info


def _version_fields(value, lay):
    """A to_dict() value cut to the fields that `lay`'s version carries: to_dict() holds
    every field of every version, at its default where the version has none."""
    out = {}
    for op in lay.ops:
        if op.mode == "absent":
            continue
        v = value[op.name]
        if op.sub is not None and v is not None:
            v = (
                [_version_fields(x, op.sub) for x in v]
                if op.field.is_array
                else _version_fields(v, op.sub)
            )
        out[op.name] = v
    if "unknown_tagged_fields" in value:
        out["unknown_tagged_fields"] = value["unknown_tagged_fields"]
    return out

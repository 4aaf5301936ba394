"""explain with decode's `trailing=` option: a frame whose only fault is bytes after the end
of its message (which a broker ignores) gets its whole tree, with those bytes as a last
node named "trailing", instead of a DecodeError.

explain builds the whole tree before it checks for trailing bytes, so the tree its error
carries is complete; this takes it when the error is exactly that one.
"""

from ..errors import DecodeError, trailing as trailing_error
from ..explain import MAX_ITEMS, Node, explain

TRAILING = ("error", "keep")


def explain_frame(frame, api_key=None, version=None, *, max_items=MAX_ITEMS, trailing="error"):
    """`fastkwire.explain(frame, api_key, version, max_items=)`; with `trailing="keep"`,
    bytes after the message are a last node "trailing" (their offset, size and value; the
    root's value gets "trailing" as hex) rather than a DecodeError."""
    if trailing not in TRAILING:
        raise ValueError(f'trailing must be "error" or "keep", not {trailing!r}')
    data = bytes(frame)
    try:
        return explain(data, api_key, version, max_items=max_items)
    except DecodeError as err:
        tree = err.partial_tree
        extra = len(data) - err.offset
        if (
            trailing == "error"
            or tree is None
            or extra <= 0
            or err.reason != trailing_error(err.offset, extra).reason
            or any(node.error is not None for node in tree.walk())
        ):
            raise
        at = err.offset
    rest = data[at:]
    tree.children.append(
        Node(
            "trailing",
            f"{len(rest)} bytes",
            at,
            len(rest),
            value=rest,
            display=rest[:32].hex() + ("..." if len(rest) > 32 else ""),
            description="after the end of the message: a broker ignores them "
            '(kept: trailing="keep")',
        )
    )
    tree.value["trailing"] = rest.hex()
    tree.size = len(data)
    return tree

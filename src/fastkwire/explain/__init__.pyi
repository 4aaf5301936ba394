"""Types of fastkwire.explain: the annotated byte layout of a frame."""
from collections.abc import Iterator

from ..errors import DecodeError

__all__ = ["Node", "explain", "example", "example_names", "render_tree", "hex_layout",
           "render", "to_json"]

DOC_WIDTH: int | None
MAX_ITEMS: int
NODES_PER_ITEM: int
FREE_NODES: int
BYTES_PER_NODE: int
HEX_ROWS: int

class Node:
    name: str
    type: str
    offset: int
    size: int | None
    value: object
    children: list[Node]
    error: DecodeError | None
    display: str | None
    description: str
    def __init__(self, name: str, type: str, offset: int, size: int | None = ...,
                 value: object = ..., display: str | None = ..., description: str = ...,
                 children: list[Node] | None = ..., error: DecodeError | None = ...) -> None: ...
    @property
    def end(self) -> int: ...
    def walk(self) -> Iterator[Node]: ...

def explain(frame: bytes | bytearray | memoryview, api_key: int | str | None = ...,
            version: int | None = ..., *, max_items: int | None = ...) -> Node: ...
def header_versions(api_key: int, version: int) -> tuple[int, int]: ...
def example_names() -> list[str]: ...
def example(name: str) -> tuple[bytes, int | None, int | None]: ...
def hex_layout(data: bytes, max_rows: int | None = ...) -> str: ...
def render_tree(root: Node, doc_width: int | None = ...) -> str: ...
def render(frame: bytes, root: Node, doc_width: int | None = ...,
           max_rows: int | None = ...) -> str: ...
def to_json(root: Node) -> str: ...

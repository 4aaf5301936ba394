"""Types of the exceptions raised by the codecs."""
from typing import Any

__all__ = ["DecodeError", "EncodeError", "UnsupportedVersionError"]

class DecodeError(ValueError):
    reason: str
    offset: int
    path: str
    partial_tree: Any  # set by fastkwire.explain: the tree up to the failing field
    def __init__(self, reason: str, offset: int, path: str = ...) -> None: ...
    def with_prefix(self, prefix: str) -> DecodeError: ...

class EncodeError(ValueError):
    reason: str
    path: str
    def __init__(self, reason: str, path: str = ...) -> None: ...
    def with_prefix(self, prefix: str) -> EncodeError: ...

class UnsupportedVersionError(ValueError): ...

# The reason-building helpers are internal: typed loosely, so the stub need not follow them.
def __getattr__(name: str) -> Any: ...

"""Built-in example frames for explain: the smallest legal message of every API version."""

from __future__ import annotations

import re
import uuid

from . import _messages_python, _schema, _wire
from ._explain_apis import api_names, request_schemas, response_schemas

__all__ = ["example", "example_names"]


def _kebab(name: str) -> str:
    return _schema.snake_case(name).replace("_", "-")


def example_names() -> list[str]:
    """`leave-group-v5`, `leave-group-v5-response`, ... for every schema version."""
    names = []
    for msgs, suffix in ((request_schemas(), ""), (response_schemas(), "-response")):
        for key in sorted(msgs):
            m = msgs[key]
            api = _kebab(api_names().get(key) or m.name[: -len("Response")])
            names += [f"{api}-v{v}{suffix}" for v in range(m.versions.low, m.versions.high + 1)]
    return names


# The zero of each scalar kind (numbers zero, strings and bytes empty).
_ZERO = {
    _wire.K_BOOL: False,
    _wire.K_F64: 0.0,
    _wire.K_UUID: uuid.UUID(int=0),
    _wire.K_STRING: "",
    _wire.K_BYTES: b"",
}


def _smallest(cls, lay):
    """The smallest legal instance of a layout's struct: numbers zero, strings empty,
    every array one element, nullable structs present, tagged fields at their defaults
    (so not on the wire)."""
    values = {}
    for op in lay.plain:
        kind = op.kind
        if op.sub is not None:
            one = _smallest(cls._CLASSES[op.sub.struct.name], op.sub)
        else:
            one = _ZERO.get(op.elem_kind if op.elem_kind is not None else kind, 0)
        values[op.name] = (
            [one]
            if kind in (_wire.K_STRUCTS, _wire.K_INTS, _wire.K_STRINGS, _wire.K_SCALARS)
            else one
        )
    return cls(**values)


def example(name: str) -> tuple[bytes, int | None, int | None]:
    """(frame, api_key, version) of a named example, encoded by the codec; api_key and
    version are None for a request (it carries them in its header), as `explain` expects."""
    m = re.fullmatch(r"([a-z-]+)-v(\d+)(-response)?", name)
    if m is None or name not in example_names():
        raise ValueError(
            f"unknown example {name!r}: --list-examples lists them (e.g. leave-group-v5, "
            "leave-group-v5-response)"
        )
    version, is_response = int(m.group(2)), bool(m.group(3))
    key = next(k for k, n in api_names().items() if _kebab(n) == m.group(1))
    classes = _messages_python.RESPONSE_CLASSES if is_response else _messages_python.REQUEST_CLASSES
    cls = classes[key]
    msg = _smallest(cls, cls._LAYOUTS.root(version))
    if is_response:
        return _messages_python.encode_response(msg, version, 0), key, version
    return _messages_python.encode_request(msg, version, 0), None, None

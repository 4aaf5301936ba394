"""Built-in example frames for explain: the smallest legal message of every API version."""
from __future__ import annotations

import re

from . import _pure, _schema, _wire
from ._explain_apis import api_names, header_versions, request_schemas, response_schemas
from ._layout import layouts

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


def _write_zero(out, type_, compact):
    if type_ in _wire.WIDTH:
        out += bytes(_wire.WIDTH[type_])
    elif type_ == "string":
        _pure.w_compact_string(out, "") if compact else _pure.w_string(out, "")
    else:   # bytes; records too (none of the schemas here carry records)
        _pure.w_compact_bytes(out, b"") if compact else _pure.w_bytes(out, b"")


def _write_smallest(out, lay, overrides=None):
    """Smallest legal instance: numbers zero, strings empty, every array one element,
    nullable structs present, no tagged fields."""
    for op in lay.plain:
        f, compact = op.field, op.compact
        if overrides and f.name in overrides:
            getattr(_pure, "w_" + f.type)(out, overrides[f.name])
        elif f.is_array:
            _pure.w_uvarint(out, 2) if compact else _pure.w_int32(out, 1)
            if op.sub is not None:
                _write_smallest(out, op.sub)
            else:
                _write_zero(out, f.element_type, compact)
        elif f.is_struct:
            if op.nullable:
                _pure.w_int8(out, 1)
            _write_smallest(out, op.sub)
        else:
            _write_zero(out, f.type, compact)
    if lay.flexible:
        _pure.w_uvarint(out, 0)


def example(name: str) -> tuple[bytes, int | None, int | None]:
    """(frame, api_key, version) of a named example; api_key/version are None for a
    request (it carries them in its header), as `explain` expects."""
    m = re.fullmatch(r"([a-z-]+)-v(\d+)(-response)?", name)
    if m is None or name not in example_names():
        raise ValueError(f"unknown example {name!r}; try leave-group-v5, "
                         "leave-group-v5-response or streams-group-heartbeat-v0")
    version, is_response = int(m.group(2)), bool(m.group(3))
    key = next(k for k, n in api_names().items() if _kebab(n) == m.group(1))
    req_hv, resp_hv = header_versions(key, version)
    out = bytearray()
    if is_response:
        msg = response_schemas()[key]
        _write_smallest(out, layouts("ResponseHeader").root(resp_hv))
    else:
        msg = request_schemas()[key]
        _write_smallest(out, layouts("RequestHeader").root(req_hv),
                        {"RequestApiKey": key, "RequestApiVersion": version})
    _write_smallest(out, layouts(msg.name).root(version))
    frame = len(out).to_bytes(4, "big") + bytes(out)
    return (frame, key, version) if is_response else (frame, None, None)

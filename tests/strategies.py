"""Hypothesis strategies for to_dict() values, read from src/fastkwire/schemas/*.json.

The schema reading here is deliberately independent of the code generator: the peer
tests check the codecs against other libraries, so they must not share its
understanding of the definitions.
"""

from __future__ import annotations

import json
import re
import uuid
from functools import lru_cache
from pathlib import Path

from hypothesis import strategies as st

SCHEMA_DIR = Path(__file__).resolve().parents[1] / "src" / "fastkwire" / "schemas"

MESSAGE_NAMES = sorted(p.stem for p in SCHEMA_DIR.glob("*.json"))

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
}
# Any Unicode scalar value that UTF-8 can carry (no lone surrogates).
TEXT = st.text(st.characters(codec="utf-8"), max_size=8)
MAX_ITEMS = 3


def snake_case(name: str) -> str:
    """GroupInstanceId -> group_instance_id (the Python name of a schema field)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


def versions(text: str | None) -> range:
    """ "3", "3+", "0-2", "none" (or absent) as a range of versions."""
    if text is None or text == "none":
        return range(0)
    if text.endswith("+"):
        return range(int(text[:-1]), 2**15)
    low, _, high = text.partition("-")
    return range(int(low), int(high or low) + 1)


@lru_cache(maxsize=None)
def load_schema(name: str) -> dict:
    return json.loads((SCHEMA_DIR / f"{name}.json").read_text())


def message_versions(name: str) -> range:
    return versions(load_schema(name)["versions"])


def element_type(field: dict) -> str:
    return field["type"].removeprefix("[]")


def struct_fields(schema: dict, field: dict) -> list | None:
    """The fields of a struct-typed (or struct-array) field, or None for primitives."""
    if "fields" in field:
        return field["fields"]
    for struct in schema.get("structs", []):
        if struct["name"] == element_type(field):
            return struct["fields"]
    return None


def present(field: dict, version: int) -> bool:
    return version in versions(field["versions"])


def nullable(field: dict, version: int) -> bool:
    return version in versions(field.get("nullable"))


def default_value(schema: dict, field: dict):
    """The to_dict() value of a field left at its default (docs/architecture.md)."""
    if field["type"] == "uuid":
        return uuid.UUID(field["default"]) if field.get("default") else uuid.UUID(int=0)
    if "default" in field:
        return field["default"]
    if field["type"].startswith("[]"):
        return []
    sub = struct_fields(schema, field)
    if sub is not None:
        # a struct that is never null defaults to a struct of defaults
        return (
            None
            if "nullable" in field
            else {snake_case(f["name"]): default_value(schema, f) for f in sub}
        )
    return {"bool": False, "string": "", "bytes": b"", "records": b"", "float64": 0.0}.get(
        field["type"], 0
    )


@lru_cache(maxsize=None)  # building a strategy costs more than drawing from it
def message_dicts(name: str, version: int, error_codes: frozenset | None = None, narrow=None):
    """Valid to_dict() values of message `name` at `version`.

    Fields the version lacks stay at their defaults; null only where that version allows
    it. `error_codes`, if given, limits int16 ErrorCode fields to those values (for a peer
    that only represents the error codes it knows). `narrow(name, version, path)`, if
    given, may return a strategy to use instead for the primitive values (array elements)
    of the field at `path` (a tuple of snake_case keys), for a peer that represents that
    field with a narrower type; None keeps ours.
    """
    schema = load_schema(name)
    if version not in message_versions(name):
        raise ValueError(f"{name} has no version {version}")
    narrow_here = None if narrow is None else (lambda path: narrow(name, version, path))
    return _struct(schema, schema["fields"], version, error_codes, narrow_here, ())


def _struct(schema, fields, version, error_codes, narrow, path):
    parts = {}
    for field in fields:
        key = snake_case(field["name"])
        if present(field, version):
            parts[key] = _field(schema, field, version, error_codes, narrow, path + (key,))
        else:
            # builds(): a fresh default each time, never a shared mutable list.
            parts[snake_case(field["name"])] = st.builds(
                default_value, st.just(schema), st.just(field)
            )
    return st.fixed_dictionaries(parts)


def _field(schema, field, version, error_codes, narrow, path):
    sub = struct_fields(schema, field)
    if sub is not None:
        value = _struct(schema, sub, version, error_codes, narrow, path)
    else:
        value = narrow and narrow(path)
        if value is None:
            value = _primitive(element_type(field), field["name"], error_codes)
    if field["type"].startswith("[]"):
        value = st.lists(value, max_size=MAX_ITEMS)
    if nullable(field, version):
        value = st.none() | value
    return value


def _primitive(type_name, field_name, error_codes):
    if type_name == "int16" and field_name == "ErrorCode" and error_codes is not None:
        return st.sampled_from(sorted(error_codes))
    if type_name in INT_RANGES:
        low, high = INT_RANGES[type_name]
        return st.integers(low, high)
    if type_name == "string":
        return TEXT
    if type_name in ("bytes", "records"):
        return st.binary(max_size=8)
    if type_name == "bool":
        return st.booleans()
    if type_name == "float64":
        return st.floats(allow_nan=False)
    if type_name == "uuid":
        return st.uuids()
    raise NotImplementedError(f"no strategy for type {type_name!r}")

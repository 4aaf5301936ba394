"""Load the schema definitions (src/fastkwire/schemas/*.json) into a small model.

Read by the wire layouts (`_layout`), both engines, `explain` and the stub tool; nothing on the hot path.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from . import _wire

SCHEMA_DIR = Path(__file__).parent / "schemas"

PRIMITIVES = frozenset(_wire.PRIMITIVES)
NULL_UUID = uuid.UUID(int=0)
FIXED_WIDTH = _wire.WIDTH  # the wire widths of the fixed-width types


@dataclass(frozen=True)
class Versions:
    """An inclusive version range; `none` is empty (low > high)."""

    low: int
    high: int

    @classmethod
    def parse(cls, text: str | None) -> "Versions":
        if text is None or text == "none":
            return cls(0, -1)
        if text.endswith("+"):
            return cls(int(text[:-1]), 1 << 15)
        if "-" in text:
            low, high = text.split("-")
            return cls(int(low), int(high))
        return cls(int(text), int(text))

    def __contains__(self, version: int) -> bool:
        return self.low <= version <= self.high


@lru_cache(maxsize=None)  # one shared str per name: explain names every node by it
def snake_case(name: str) -> str:
    """GroupInstanceId -> group_instance_id, ThrottleTimeMs -> throttle_time_ms."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


@dataclass
class Field:
    name: str  # schema name, CamelCase
    type: str  # as written: "int32", "[]string", "MemberIdentity"
    versions: Versions
    nullable: Versions
    default: object  # Python value; None for null
    has_default: bool
    ignorable: bool
    tag: int | None
    tagged: Versions
    flexible_override: Versions | None
    doc: str
    struct: "Struct | None" = None  # for struct or []struct types
    columns: str | None = None  # []struct fields with a columnar form (arrays="numpy")

    @property
    def py_name(self) -> str:
        return snake_case(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def element_type(self) -> str:
        return self.type[2:] if self.is_array else self.type

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present(self, version: int) -> bool:
        return version in self.versions

    def is_nullable(self, version: int) -> bool:
        return version in self.nullable

    def is_tagged(self, version: int) -> bool:
        return self.tag is not None and version in self.tagged

    def default_value(self):
        """The Python default; arrays default to an empty list unless null is declared."""
        if self.has_default:
            return self.default
        if self.is_array:
            return []
        if self.is_struct:
            return None
        t = self.type
        if t == "bool":
            return False
        if t == "string":
            return ""
        if t in ("bytes", "records"):
            return b""
        if t == "uuid":
            return NULL_UUID
        if t == "float64":
            return 0.0
        return 0


@dataclass
class Struct:
    name: str
    fields: list[Field]
    owner: str  # the message whose namespace it lives in
    doc: str = ""
    nested: list["Struct"] = field(default_factory=list)


@dataclass
class Message:
    name: str
    kind: str  # request | response | header
    api_key: int | None
    versions: Versions
    flexible: Versions
    doc: str
    root: Struct
    structs: list[Struct]  # every struct besides the root, dependencies first

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible


def _parse_default(raw, ftype):
    if raw is None:
        return None
    if ftype in ("int8", "int16", "int32", "int64", "uint16", "uint32"):
        return int(raw)
    if ftype == "float64":
        return float(raw)
    if ftype == "bool":
        return raw if isinstance(raw, bool) else str(raw).lower() == "true"
    if ftype == "uuid":
        return uuid.UUID(raw)
    return raw


DESCRIPTIONS = SCHEMA_DIR / "descriptions" / "fields.json"


@lru_cache(maxsize=None)
def descriptions() -> tuple[dict, dict]:
    """(by field name, by "Struct.Field" or "Message.Struct.Field"): the meanings of the
    fields whose definitions give no doc. Kept apart from the definitions, which the
    converter rewrites from Kafka's facts, and written in our words, not Kafka's."""
    raw = json.loads(DESCRIPTIONS.read_text(encoding="utf-8"))
    return raw["fields"], raw["in"]


def describe(message_name: str, struct_name: str, field_name: str) -> str:
    """A field's meaning from the descriptions table, most specific entry first."""
    by_name, by_place = descriptions()
    return (
        by_place.get(f"{message_name}.{struct_name}.{field_name}")
        or by_place.get(f"{struct_name}.{field_name}")
        or by_name.get(field_name, "")
    )


def _build(
    message_name: str, raw_fields, shared: dict, out: list, struct_name: str, doc=""
) -> Struct:
    fields = []
    for rf in raw_fields:
        f = Field(
            name=rf["name"],
            type=rf["type"],
            versions=Versions.parse(rf["versions"]),
            nullable=Versions.parse(rf.get("nullable")),
            default=_parse_default(rf.get("default"), rf["type"]),
            has_default="default" in rf,
            ignorable=bool(rf.get("ignorable", False)),
            tag=rf.get("tag"),
            tagged=Versions.parse(rf.get("tagged")),
            flexible_override=Versions.parse(rf["flexible"]) if "flexible" in rf else None,
            doc=rf.get("doc") or describe(message_name, struct_name, rf["name"]),
            columns=rf.get("columns"),
        )
        elem = f.element_type
        if "fields" in rf:
            f.struct = _build(message_name, rf["fields"], shared, out, elem, rf.get("doc", ""))
        elif elem not in PRIMITIVES:
            if elem not in shared:
                raise ValueError(f"{message_name}: unknown type {f.type!r} for {f.name}")
            f.struct = shared[elem]
        fields.append(f)
    struct = Struct(struct_name, fields, message_name, doc)
    if struct_name != message_name:
        out.append(struct)
    return struct


@lru_cache(maxsize=None)
def load(name: str) -> Message:
    return load_file(SCHEMA_DIR / f"{name}.json")


def load_file(path: Path) -> Message:
    """Load one definition from any file (the converter's tests read a scratch directory)."""
    raw = json.loads(Path(path).read_text())
    out: list[Struct] = []
    shared: dict[str, Struct] = {}
    for rs in raw.get("structs", []):
        shared[rs["name"]] = _build(
            raw["name"], rs["fields"], shared, out, rs["name"], rs.get("doc", "")
        )
    root = _build(raw["name"], raw["fields"], shared, out, raw["name"], raw.get("doc", ""))
    return Message(
        name=raw["name"],
        kind=raw["kind"],
        api_key=raw.get("api_key"),
        versions=Versions.parse(raw["versions"]),
        flexible=Versions.parse(raw["flexible"]),
        doc=raw.get("doc", ""),
        root=root,
        structs=out,
    )


@lru_cache(maxsize=None)
def all_names() -> list[str]:
    return tuple(sorted(p.stem for p in SCHEMA_DIR.glob("*.json")))


def all_messages() -> list[Message]:
    return [load(n) for n in all_names()]


@lru_cache(maxsize=None)
def api_index(kind: str) -> dict[int, str]:
    """api_key -> message name, for requests or responses."""
    out = {}
    for name in all_names():
        raw = json.loads((SCHEMA_DIR / f"{name}.json").read_text())
        if raw["kind"] == kind:
            out[raw["api_key"]] = name
    return out

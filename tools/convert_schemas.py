#!/usr/bin/env python3
"""Convert Apache Kafka's message definitions into fastkwire's schema format.

    python tools/convert_schemas.py --kafka KAFKA_MESSAGE_DIR --out src/fastkwire/schemas
    python tools/convert_schemas.py --kafka KAFKA_MESSAGE_DIR --out DIR --check
    python tools/convert_schemas.py --error-codes

Stage 1 reads Kafka's JSON-with-comments files (clients/src/main/resources/common/message/
in Kafka's source tree) and keeps only the facts: names, versions, types, nullability,
defaults, tags. Kafka's prose ("about" texts and comments) is never copied.
Stage 2 (skipped with --no-kio) adds the versions newer than those files from the installed
kio package, which has one generated module per API and version.
When an output file exists, its project-only keys ("doc" texts and anything else that is
not a fact written here) are kept, matched by field path; PROTECTED files are never
overwritten. The format is described in docs/architecture.md, "Schema definition format".
"""
from __future__ import annotations

import argparse
import base64
import dataclasses
import datetime
import functools
import json
import re
import sys
import types
import typing
import uuid
from pathlib import Path
from pkgutil import resolve_name

# Kafka's "data" types: records stored in logs and group metadata, not request or response
# messages. Not converted yet; listed for later.
DATA_TYPES = (
    "ConsumerProtocolAssignment", "ConsumerProtocolSubscription", "DefaultPrincipalData",
    "KRaftVersionRecord", "LeaderChangeMessage", "SnapshotFooterRecord",
    "SnapshotHeaderRecord", "VotersRecord",
)
# Definitions this project maintains by hand beyond Kafka's facts: never overwritten.
PROTECTED = ("StreamsGroupHeartbeatRequest", "StreamsGroupHeartbeatResponse")

INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
UINT_BITS = {"uint16": 16, "uint32": 32}
PRIMITIVES = {*INT_BITS, *UINT_BITS, "float64", "bool", "uuid", "string", "bytes", "records"}

# Keys of Kafka's files: the ones we convert, and the ones we drop because they do not
# change the bytes (mapKey only shapes Kafka's Java collections).
MESSAGE_KEYS = {"apiKey", "type", "name", "validVersions", "flexibleVersions", "fields",
                "commonStructs", "latestVersionUnstable"}
MESSAGE_DROPPED = {"listeners", "deprecatedVersions"}
FIELD_KEYS = {"name", "type", "versions", "nullableVersions", "default", "ignorable", "tag",
              "taggedVersions", "flexibleVersions", "fields"}
FIELD_DROPPED = {"about", "mapKey", "entityType", "zeroCopy"}

# Our keys, in the order they are written; any other key of an existing file is kept.
TOP_ORDER = ("name", "kind", "api_key", "versions", "flexible", "unstable")
FIELD_ORDER = ("name", "type", "versions", "nullable", "default", "ignorable", "tag",
               "tagged", "flexible")
STRUCT_ORDER = ("name",)


class ConversionError(ValueError):
    pass


# ------------------------------------------------------------------ version ranges

def parse_range(text):
    """"3" -> (3, 3), "3+" -> (3, None), "0-2" -> (0, 2), "none" -> None."""
    text = text.strip()
    if text == "none":
        return None
    m = re.fullmatch(r"(\d+)(\+|-(\d+))?", text)
    if not m:
        raise ConversionError(f"unparseable version range {text!r}")
    low = int(m.group(1))
    if m.group(2) is None:
        return (low, low)
    if m.group(2) == "+":
        return (low, None)
    high = int(m.group(3))
    return (low, high) if low <= high else None


def format_range(rng):
    if rng is None:
        return "none"
    low, high = rng
    if high is None:
        return f"{low}+"
    return str(low) if low == high else f"{low}-{high}"


def in_range(rng, version):
    return rng is not None and rng[0] <= version and (rng[1] is None or version <= rng[1])


def intersect(a, b):
    if a is None or b is None:
        return None
    low = max(a[0], b[0])
    high = a[1] if b[1] is None else b[1] if a[1] is None else min(a[1], b[1])
    return (low, high) if high is None or low <= high else None


def close_range(rng, last):
    """rng cut off after version `last`."""
    if rng is None or rng[0] > last:
        return None
    return (rng[0], last if rng[1] is None else min(rng[1], last))


def open_range(rng, version):
    """rng extended so that it covers `version` and everything after it."""
    if rng is None:
        return (version, None)
    return (min(rng[0], version), None)


# ------------------------------------------------------------------ stage 1: Kafka's files

def strip_comments(text):
    """Drop // comments outside strings (Kafka's files are JSON plus line comments)."""
    out, i, in_string = [], 0, False
    while i < len(text):
        c = text[i]
        if in_string:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
            out.append(c)
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def read_kafka(path):
    try:
        return json.loads(strip_comments(Path(path).read_text(encoding="utf-8")))
    except json.JSONDecodeError as e:
        raise ConversionError(f"{path}: {e}") from None


def convert_default(raw, ftype, nullable, where):
    """Kafka writes defaults as strings ("0x7fffffff", "null", "false"); give them JSON types."""
    if raw is None or raw == "null":
        if nullable is None and ftype in PRIMITIVES:
            raise ConversionError(f"{where}: null default on a field that is never nullable")
        return None
    if ftype.startswith("[]") or ftype not in PRIMITIVES:
        raise ConversionError(f"{where}: only null can be the default of {ftype}")
    if ftype in INT_BITS or ftype in UINT_BITS:
        if isinstance(raw, bool):
            raise ConversionError(f"{where}: boolean default for {ftype}")
        if isinstance(raw, str):
            text = raw.strip().lower()
            negative = text.startswith("-")
            digits = text.lstrip("+-")
            value = int(digits, 16) if digits.startswith("0x") else int(digits, 10)
            value = -value if negative else value
        else:
            value = int(raw)
        bits = INT_BITS.get(ftype) or UINT_BITS[ftype]
        low, high = (-(1 << bits - 1), (1 << bits - 1) - 1) if ftype in INT_BITS else (0, (1 << bits) - 1)
        if not low <= value <= high:
            raise ConversionError(f"{where}: default {raw!r} out of range for {ftype}")
        return value
    if ftype == "float64":
        return float(raw)
    if ftype == "bool":
        if isinstance(raw, bool):
            return raw
        if str(raw).strip().lower() in ("true", "false"):
            return str(raw).strip().lower() == "true"
        raise ConversionError(f"{where}: boolean default {raw!r}")
    if ftype == "uuid":
        return str(parse_uuid(raw, where))
    if ftype == "string":
        return str(raw)
    raise ConversionError(f"{where}: a {ftype} field can only default to null")


def parse_uuid(raw, where):
    """Kafka prints UUIDs in URL-safe base64 (22 characters); accept that and the dashed form."""
    text = str(raw).strip()
    try:
        if len(text) == 22:
            return uuid.UUID(bytes=base64.urlsafe_b64decode(text + "=="))
        return uuid.UUID(text)
    except ValueError:
        raise ConversionError(f"{where}: uuid default {raw!r}") from None


def convert_field(raw, where, parent=(0, None)):
    """One field; version ranges are cut to the versions in which they can matter (Kafka
    writes "nullableVersions": "0+" on a field of versions "1+", "0+" inside a "12+" struct)."""
    where = f"{where}.{raw.get('name')}"
    unknown = set(raw) - FIELD_KEYS - FIELD_DROPPED
    if unknown:
        raise ConversionError(f"{where}: unknown keys {sorted(unknown)}")
    versions = intersect(parse_range(raw["versions"]), parent)
    if versions is None:
        raise ConversionError(f"{where}: present in no version of its parent")
    out = {"name": raw["name"], "type": raw["type"], "versions": format_range(versions)}
    nullable = intersect(parse_range(raw.get("nullableVersions", "none")), versions)
    if nullable is not None:
        out["nullable"] = format_range(nullable)
    if "default" in raw:
        out["default"] = convert_default(raw["default"], raw["type"], nullable, where)
    if raw.get("ignorable") is True:
        out["ignorable"] = True
    if "tag" in raw:
        out["tag"] = int(raw["tag"])      # Kafka sometimes writes the tag as a string
        out["tagged"] = format_range(intersect(parse_range(raw["taggedVersions"]), versions))
    elif "taggedVersions" in raw:
        raise ConversionError(f"{where}: taggedVersions without a tag")
    if "flexibleVersions" in raw:
        out["flexible"] = format_range(parse_range(raw["flexibleVersions"]))
    if "fields" in raw:
        out["fields"] = [convert_field(f, where, versions) for f in raw["fields"]]
    return out


def referenced_types(fields):
    """Struct names used anywhere inside `fields` (nested inline structs included)."""
    for f in fields:
        yield f["type"].removeprefix("[]")
        yield from referenced_types(f.get("fields", ()))


def order_structs(structs, where):
    """Shared structs with each one after the shared structs it uses (Kafka's order otherwise)."""
    names = {s["name"] for s in structs}
    deps = {s["name"]: (set(referenced_types(s["fields"])) & names) - {s["name"]} for s in structs}
    done, ordered, pending = set(), [], list(structs)
    while pending:
        ready = next((s for s in pending if deps[s["name"]] <= done), None)
        if ready is None:
            raise ConversionError(f"{where}: shared structs refer to each other in a cycle")
        pending.remove(ready)
        done.add(ready["name"])
        ordered.append(ready)
    return ordered


def convert_message(raw, where):
    unknown = set(raw) - MESSAGE_KEYS - MESSAGE_DROPPED
    if unknown:
        raise ConversionError(f"{where}: unknown keys {sorted(unknown)}")
    name = raw["name"]
    versions = parse_range(raw["validVersions"])
    msg = {"name": name, "kind": raw["type"]}
    if "apiKey" in raw:
        msg["api_key"] = raw["apiKey"]
    msg["versions"] = format_range(versions)
    msg["flexible"] = format_range(parse_range(raw["flexibleVersions"]))
    if raw.get("latestVersionUnstable") is True:
        msg["unstable"] = format_range((versions[1], versions[1]))
    msg["fields"] = [convert_field(f, name) for f in raw["fields"]]
    structs = [{"name": s["name"],
                "fields": [convert_field(f, f"{name}.{s['name']}") for f in s["fields"]]}
               for s in raw.get("commonStructs", ())]
    if structs:
        msg["structs"] = order_structs(structs, name)
    return msg


def convert_directory(kafka_dir, warn):
    """{name: definition} for every request, response and header in `kafka_dir`."""
    messages = {}
    for path in sorted(Path(kafka_dir).glob("*.json")):
        raw = read_kafka(path)
        kind = raw.get("type")
        if kind == "data":
            if raw.get("name") not in DATA_TYPES:
                warn(f"{path.name}: data type {raw.get('name')} is new; not converted")
            continue
        if kind not in ("request", "response", "header"):
            raise ConversionError(f"{path.name}: unknown message type {kind!r}")
        messages[raw["name"]] = convert_message(raw, path.name)
    # Kafka marks only the request; the response of that version is just as provisional.
    for name, msg in messages.items():
        partner = messages.get(name.removesuffix("Request") + "Response")
        if msg["kind"] == "request" and "unstable" in msg and partner is not None:
            partner["unstable"] = msg["unstable"]
            messages[partner["name"]] = ordered(partner, TOP_ORDER, tail=("fields", "structs"))
    return messages


# ------------------------------------------------------------------ stage 2: kio's newer versions

KIO_TYPES = {
    "int8": "int8", "int16": "int16", "int32": "int32", "int64": "int64", "uint16": "uint16",
    "uint32": "uint32", "float64": "float64", "bool": "bool", "uuid": "uuid",
    "string": "string", "bytes": "bytes", "records": "records",
    # kio's richer Python types over the same wire types
    "error_code": "int16", "timedelta_i32": "int32", "timedelta_i64": "int64",
    "datetime_i64": "int64",
}
# kio drops the "Ms" of Kafka's millisecond fields when it gives them these types.
KIO_MILLIS = ("timedelta_i32", "timedelta_i64", "datetime_i64")
NULLABLE_TYPES = ("string", "bytes", "records")
NO_DEFAULT = object()


def match_key(name):
    return name.replace("_", "").lower()


@dataclasses.dataclass
class KioField:
    name: str            # kio's snake_case name
    type: str            # our type text: "int32", "[]string", "[]TopicData"
    nullable: bool
    tag: int | None
    default: object      # JSON value, or NO_DEFAULT
    millis: bool         # kio dropped an "Ms" suffix
    struct: type | None  # kio's dataclass for struct types

    @property
    def keys(self):
        key = match_key(self.name)
        return (key + "ms", key) if self.millis else (key,)

    def camel_name(self):
        camel = "".join(part[:1].upper() + part[1:] for part in self.name.split("_"))
        return camel + "Ms" if self.millis else camel


def kio_default(value):
    if value is dataclasses.MISSING:
        return NO_DEFAULT
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, datetime.timedelta):
        return value // datetime.timedelta(milliseconds=1)
    if isinstance(value, uuid.UUID):
        return str(value)
    return NO_DEFAULT    # () for arrays, struct instances: Kafka's implied defaults


@functools.lru_cache(maxsize=None)
def kio_fields(cls):
    """The fields of one kio dataclass, as KioField tuples in wire order."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        annotation = hints[f.name]
        nullable = False
        if typing.get_origin(annotation) in (types.UnionType, typing.Union):
            args = [a for a in typing.get_args(annotation) if a is not type(None)]
            nullable = len(args) < len(typing.get_args(annotation))
            annotation = args[0]
        array = typing.get_origin(annotation) is tuple
        elem = typing.get_args(annotation)[0] if array else annotation
        if typing.get_origin(elem) in (types.UnionType, typing.Union):
            elem = [a for a in typing.get_args(elem) if a is not type(None)][0]
        kafka_type = f.metadata.get("kafka_type")
        if dataclasses.is_dataclass(elem):
            base, struct = elem.__name__, elem
        else:
            base, struct = KIO_TYPES[kafka_type], None
        default = kio_default(f.default)
        if not array and base in PRIMITIVES and base not in NULLABLE_TYPES:
            # kio writes every uuid as `UUID | None` (None: the zero uuid) and a -1 timestamp
            # as None; neither is a null on the wire.
            nullable = False
            if default is None:
                default = (type_default("uuid") if base == "uuid"
                           else -1 if kafka_type == "datetime_i64" else NO_DEFAULT)
        out.append(KioField(
            name=f.name, type=("[]" if array else "") + base, nullable=nullable,
            tag=f.metadata.get("tag"), default=default,
            millis=kafka_type in KIO_MILLIS, struct=struct))
    return tuple(out)


def kio_versions(msg):
    """{version: "module:Class" of kio's dataclass} for our message; {} if kio lacks it.

    Importing kio's modules is what takes time, so they are imported only when compared.
    """
    from kio.schema.index import api_key_map, schema_name_map
    from kio.static.constants import EntityType

    if msg["kind"] == "header":
        name, kind = {"RequestHeader": "request_header",
                      "ResponseHeader": "response_header"}[msg["name"]], EntityType.header
    else:
        name = api_key_map.get(msg["api_key"])
        kind = EntityType[msg["kind"]]
    out = {}
    for version, entities in schema_name_map.get(name, {}).items():
        if kind in entities:
            out[version] = entities[kind]
    return dict(sorted(out.items()))


def type_default(ftype):
    """The value a field holds when its definition gives no default (see _schema.py)."""
    if ftype.startswith("[]"):
        return ()
    return {"bool": False, "string": "", "float64": 0.0,
            "uuid": "00000000-0000-0000-0000-000000000000"}.get(
        ftype, 0 if ftype in INT_BITS or ftype in UINT_BITS else NO_DEFAULT)


class Extender:
    """Compares and extends one message definition with kio's dataclasses."""

    def __init__(self, msg, warn):
        self.msg = msg
        self.warn = warn
        self.shared = {s["name"]: s for s in msg.get("structs", ())}
        self.aliases = {}    # id(our field) -> kio's match key, for fields kio renamed

    def matches(self, f, kf):
        return match_key(f["name"]) in kf.keys or self.aliases.get(id(f)) in kf.keys

    def struct_fields(self, f):
        if "fields" in f:
            return f["fields"]
        return self.shared[f["type"].removeprefix("[]")]["fields"]

    def find(self, fields, kf, version):
        for f in fields:
            if in_range(parse_range(f["versions"]), version) and self.matches(f, kf):
                return f
        return None

    def compare(self, fields, cls, version, where):
        """Differences between our fields at `version` and kio's dataclass, as text."""
        diffs = []
        ours = [f for f in fields if in_range(parse_range(f["versions"]), version)]
        theirs = kio_fields(cls)
        paired = [(kf, self.find(ours, kf, version)) for kf in theirs]
        paired = self.pair_renamed(ours, paired, where)
        matched = [id(f) for _, f in paired if f is not None]
        for kf, f in paired:
            if f is None:
                diffs.append(f"{where}: kio has {kf.name} ({kf.type}), we do not")
        for f in ours:
            if id(f) not in matched:
                diffs.append(f"{where}.{f['name']}: not in kio")
        if [id(f) for f in ours if id(f) in matched] != matched:
            diffs.append(f"{where}: field order differs from kio")
        for kf, f in paired:
            if f is not None:
                diffs += self.compare_field(f, kf, version, f"{where}.{f['name']}")
        return diffs

    def pair_renamed(self, ours, paired, where):
        """Pair kio fields left unmatched with ours of the same types in the same gap.

        Kafka sometimes renames a field without changing the bytes (VoteRequest's
        CandidateId became ReplicaId); kio then has the new name in every version.
        """
        out, gap_kio, low = [], [], 0
        for kf, f in paired + [(None, None)]:
            if kf is not None and f is None:
                gap_kio.append(kf)
                continue
            high = len(ours) if kf is None else next(i for i, o in enumerate(ours) if o is f)
            matched = {id(o) for _, o in paired if o is not None}
            gap_ours = [o for o in ours[low:high] if id(o) not in matched]
            same = len(gap_ours) == len(gap_kio) and all(
                o["type"] == k.type or (k.struct and o["type"].startswith("[]") == k.type.startswith("[]"))
                for o, k in zip(gap_ours, gap_kio))
            for i, k in enumerate(gap_kio):
                o = gap_ours[i] if same else None
                if o is not None and id(o) not in self.aliases:
                    self.aliases[id(o)] = k.keys[0]
                    self.warn(f"{where}.{o['name']}: kio calls it {k.name}; kept our name")
                out.append((k, o))
            if kf is not None:
                out.append((kf, f))
                low = high + 1
            gap_kio = []
        return out

    def compare_field(self, f, kf, version, where):
        diffs = []
        ours_type = f["type"]
        if ours_type != kf.type and not (kf.struct and ours_type.startswith("[]") == kf.type.startswith("[]")):
            diffs.append(f"{where}: type {ours_type}, kio {kf.type}")
        nullable = in_range(parse_range(f.get("nullable", "none")), version)
        if nullable != kf.nullable and f["type"] != "uuid":
            diffs.append(f"{where}: nullable {nullable} in v{version}, kio {kf.nullable}")
        tag = f.get("tag") if in_range(parse_range(f.get("tagged", "none")), version) else None
        if tag != kf.tag:
            diffs.append(f"{where}: tag {tag} in v{version}, kio {kf.tag}")
        if kf.default is not NO_DEFAULT:
            ours = f["default"] if "default" in f else type_default(f["type"])
            theirs = kf.default
            if ours != theirs and not (ours == () and theirs is None):
                diffs.append(f"{where}: default {ours!r}, kio {theirs!r}")
        if kf.struct is not None and ours_type.removeprefix("[]") not in PRIMITIVES:
            diffs += self.compare(self.struct_fields(f), kf.struct, version, where)
        return diffs

    def extend(self, fields, cls, version, where, seen):
        """Make `fields` describe `version` as kio's `cls` does, given they describe version-1."""
        prev = version - 1
        theirs = kio_fields(cls)
        before = [f for f in fields if in_range(parse_range(f["versions"]), prev)]
        for f in before:
            kf = next((k for k in theirs if self.matches(f, k)), None)
            path = f"{where}.{f['name']}"
            if kf is None:
                self.warn(f"{path}: removed in v{version} (kio)")
                for key in ("versions", "nullable", "tagged"):
                    if key in f:
                        f[key] = format_range(close_range(parse_range(f[key]), prev))
                        if f[key] == "none" and key != "versions":
                            del f[key]
                continue
            f["versions"] = format_range(open_range(parse_range(f["versions"]), version))
            self.extend_field(f, kf, version, path, seen)
        for i, kf in enumerate(theirs):
            if self.find(before, kf, prev) is not None:
                continue
            clash = [f for f in fields if match_key(f["name"]) in kf.keys]
            if clash:
                self.warn(f"{where}.{kf.name}: kio brings back a field that ended earlier; skipped")
                continue
            new = self.new_field(kf, version, f"{where}.{kf.camel_name()}", seen)
            fields.insert(self.insert_at(fields, theirs, i, version), new)
            self.warn(f"{where}.{new['name']}: added in v{version} from kio ({new['type']}); "
                      "check its name, ignorable flag and default against Kafka")

    def insert_at(self, fields, theirs, i, version):
        """Where kio's i-th field goes: before the next field both have (so after the fields
        it replaces, as Kafka writes them), else at the end."""
        for later in theirs[i + 1:]:
            f = self.find(fields, later, version)
            if f is not None:
                return fields.index(f)
        return len(fields)

    def extend_field(self, f, kf, version, path, seen):
        if f["type"] != kf.type and not kf.struct:
            self.warn(f"{path}: kio has type {kf.type} in v{version}; kept {f['type']}")
        if f["type"] != "uuid":
            nullable = parse_range(f.get("nullable", "none"))
            if kf.nullable and not in_range(nullable, version):
                f["nullable"] = format_range(open_range(nullable, version))
                self.warn(f"{path}: nullable from v{version} (kio)")
            elif not kf.nullable and in_range(nullable, version):
                nullable = close_range(nullable, version - 1)
                self.warn(f"{path}: no longer nullable in v{version} (kio)")
                if nullable is None:
                    del f["nullable"]
                else:
                    f["nullable"] = format_range(nullable)
        tagged = parse_range(f.get("tagged", "none"))
        if kf.tag is not None and f.get("tag", kf.tag) == kf.tag and not in_range(tagged, version):
            f["tag"], f["tagged"] = kf.tag, format_range(open_range(tagged, version))
        elif kf.tag != (f.get("tag") if in_range(tagged, version) else None):
            self.warn(f"{path}: tag {f.get('tag')} (tagged {f.get('tagged')}) vs kio {kf.tag} "
                      f"in v{version}; kept ours")
        if kf.struct is None:
            return
        if "fields" in f:
            self.extend(f["fields"], kf.struct, version, path, seen)
        else:
            shared = f["type"].removeprefix("[]")
            if shared not in seen:    # a shared struct is extended once per version
                seen.add(shared)
                self.extend(self.shared[shared]["fields"], kf.struct, version, f"{path}<{shared}>", seen)

    def new_field(self, kf, version, where, seen):
        f = {"name": kf.camel_name(), "type": kf.type, "versions": f"{version}+"}
        if kf.nullable:
            f["nullable"] = f"{version}+"
        if kf.default is not NO_DEFAULT and kf.default != type_default(kf.type):
            f["default"] = kf.default
        if kf.tag is not None:
            f["tag"], f["tagged"] = kf.tag, f"{version}+"
        if kf.struct is not None:
            name = kf.type.removeprefix("[]")
            if name in self.shared:
                if name not in seen:
                    seen.add(name)
                    self.extend(self.shared[name]["fields"], kf.struct, version, where, seen)
            else:
                if name in set(referenced_types(self.msg["fields"])) | {self.msg["name"]}:
                    self.warn(f"{where}: kio's struct {name} has the name of another struct "
                              "of this message; rename one")
                f["fields"] = [self.new_field(k, version, f"{where}.{k.camel_name()}", seen)
                               for k in kio_fields(kf.struct)]
        return f

    def run(self, known, check_all):
        """Compare the newest version both have (or all of them), then add kio's newer ones."""
        name = self.msg["name"]
        low, high = parse_range(self.msg["versions"])
        flexible = parse_range(self.msg["flexible"])
        added = []
        for version, path in known.items():
            if version < high and not check_all:
                continue
            cls = resolve_name(path)
            if version <= high:
                for diff in self.compare(self.msg["fields"], cls, version, f"{name} v{version}"):
                    self.warn(f"{diff} (snapshot version; kept the snapshot's facts)")
                continue
            if version != high + 1:
                self.warn(f"{name}: kio skips from v{high} to v{version}; stopped")
                break
            if getattr(cls, "__flexible__", False) != in_range(flexible, version):
                self.warn(f"{name} v{version}: kio flexible={cls.__flexible__}, ours disagrees; stopped")
                break
            self.extend(self.msg["fields"], cls, version, name, set())
            high = version
            added.append(version)
            for diff in self.compare(self.msg["fields"], cls, version, f"{name} v{version}"):
                self.warn(f"{diff} (after extending)")
        lacking = [v for v in range(low, parse_range(self.msg["versions"])[1] + 1) if v not in known]
        if known and lacking:
            self.warn(f"{name}: kio lacks v{format_range((lacking[0], lacking[-1]))}"
                      f"{'' if len(lacking) == lacking[-1] - lacking[0] + 1 else ' (in part)'}; kept")
        if added:
            self.msg["versions"] = format_range((low, high))
            if "unstable" in self.msg:
                self.warn(f"{name}: v{self.msg['unstable']} was unstable in Kafka's files; "
                          f"kio adds v{format_range((added[0], added[-1]))}")
        return added


def extend_with_kio(messages, warn, check_all=False):
    """Stage 2; returns {name: [added versions]}."""
    from kio.schema.index import api_key_map
    added = {}
    for name in sorted(messages):
        msg = messages[name]
        known = kio_versions(msg)
        if not known:
            warn(f"{name}: kio does not know this API")
            continue
        if msg["kind"] != "header":
            expected = re.sub(r"(?<!^)(?=[A-Z])", "_", name.removesuffix(msg["kind"].title())).lower()
            if api_key_map[msg["api_key"]] != expected:
                warn(f"{name}: kio calls API {msg['api_key']} {api_key_map[msg['api_key']]!r}; "
                     "kept our name")
        versions = Extender(msg, warn).run(known, check_all)
        if versions:
            added[name] = versions
    ours = {m.get("api_key") for m in messages.values()}
    for key in sorted(set(api_key_map) - ours):
        warn(f"kio knows API {key} ({api_key_map[key]}), which Kafka's files lack; not converted")
    return added


# ------------------------------------------------------------------ merging and writing

def ordered(d, order, tail=("fields",)):
    """`d` with our keys first in `order`, then any other keys (as found), then `tail`."""
    out = {k: d[k] for k in order if k in d}
    out.update((k, v) for k, v in d.items() if k not in out and k not in tail)
    out.update((k, d[k]) for k in tail if k in d)
    return out


def merge_fields(new, old, where, warn):
    old_by_name = {f["name"]: f for f in old}
    for f in new:
        o = old_by_name.pop(f["name"], None)
        if o is None:
            continue
        for key, value in o.items():
            if key not in FIELD_ORDER and key != "fields":
                f[key] = value
        if "fields" in f and "fields" in o:
            merge_fields(f["fields"], o["fields"], f"{where}.{f['name']}", warn)
    for name in old_by_name:
        warn(f"{where}.{name}: in the existing file but not in Kafka's; dropped")


def merge(new, old, warn):
    """Keep the existing file's project-only keys (its "doc" texts, mostly)."""
    for key, value in old.items():
        if key not in TOP_ORDER and key not in ("fields", "structs"):
            new[key] = value
    merge_fields(new["fields"], old.get("fields", []), new["name"], warn)
    old_structs = {s["name"]: s for s in old.get("structs", [])}
    for s in new.get("structs", []):
        o = old_structs.pop(s["name"], None)
        if o is not None:
            s.update((k, v) for k, v in o.items() if k not in ("name", "fields"))
            merge_fields(s["fields"], o["fields"], f"{new['name']}.{s['name']}", warn)
    for name in old_structs:
        warn(f"{new['name']}: shared struct {name} only in the existing file; dropped")


def render_field(f, indent):
    f = ordered(f, FIELD_ORDER)
    if "fields" not in f or not f["fields"]:
        return indent + json.dumps(f)
    head = json.dumps({k: v for k, v in f.items() if k != "fields"})[:-1]
    inner = ",\n".join(render_field(c, indent + "  ") for c in f["fields"])
    return f'{indent}{head}, "fields": [\n{inner}\n{indent}]}}'


def render(msg):
    """The file text: top-level keys one per line, one field per line."""
    msg = ordered(msg, TOP_ORDER, tail=("fields", "structs"))
    parts = [f"  {json.dumps(k)}: {json.dumps(v)}" for k, v in msg.items() if k not in ("fields", "structs")]
    for key in ("fields", "structs"):
        if key not in msg:
            continue
        items = msg[key]
        if not items:
            parts.append(f'  "{key}": []')
            continue
        if key == "fields":
            body = ",\n".join(render_field(f, "    ") for f in items)
        else:
            body = ",\n".join(render_field(ordered(s, STRUCT_ORDER), "    ") for s in items)
        parts.append(f'  "{key}": [\n{body}\n  ]')
    return "{\n" + ",\n".join(parts) + "\n}\n"


def build(kafka_dir, out_dir, use_kio, warn, check_all=False):
    """{file name: text} the tool writes, the definitions, and {name: versions kio added}."""
    messages = convert_directory(kafka_dir, warn)
    added = extend_with_kio(messages, warn, check_all) if use_kio else {}
    outputs = {}
    for name in sorted(messages):
        target = Path(out_dir) / f"{name}.json"
        if target.exists():
            if name in PROTECTED:
                continue
            merge(messages[name], json.loads(target.read_text(encoding="utf-8")), warn)
        outputs[target.name] = render(messages[name])
    return outputs, messages, added


def count_fields(fields):
    return sum(1 + count_fields(f.get("fields", ())) for f in fields)


def summary(messages, added):
    apis = {m["api_key"] for m in messages.values() if "api_key" in m}
    versions = sum(parse_range(m["versions"])[1] - parse_range(m["versions"])[0] + 1
                   for m in messages.values())
    fields = sum(count_fields(m["fields"]) + sum(count_fields(s["fields"]) for s in m.get("structs", ()))
                 for m in messages.values())
    return (f"{len(messages)} messages ({len(apis)} APIs), {versions} message versions, "
            f"{fields} fields; kio added {sum(len(v) for v in added.values())} versions "
            f"to {len(added)} messages")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kafka", type=Path, help="directory of Kafka's message definitions")
    p.add_argument("--out", type=Path, help="schema directory to write (src/fastkwire/schemas)")
    p.add_argument("--no-kio", action="store_true", help="skip the versions newer than --kafka")
    p.add_argument("--kio-all-versions", action="store_true",
                   help="compare every version kio shares with --kafka, not only the newest")
    p.add_argument("--check", action="store_true", help="write nothing; exit 1 if --out differs")
    p.add_argument("--quiet", action="store_true", help="print no warnings, only the summary")
    p.add_argument("--error-codes", action="store_true",
                   help="check src/fastkwire/error_codes.py against kio's error codes")
    args = p.parse_args(argv)
    if args.error_codes or not args.no_kio:
        try:
            import kio  # noqa: F401
        except ImportError:
            p.error("this needs the kio package (pip install kio); conversion runs without "
                    "it when given --no-kio")
    if args.error_codes:
        return check_error_codes()
    if args.kafka is None or args.out is None:
        p.error("--kafka and --out are required")

    warnings = []
    try:
        outputs, messages, added = build(args.kafka, args.out, not args.no_kio, warnings.append,
                                         args.kio_all_versions)
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)

    differing = [n for n, text in outputs.items()
                 if not (args.out / n).exists() or (args.out / n).read_text(encoding="utf-8") != text]
    if args.check:
        for n in differing:
            print(f"differs: {args.out / n}")
        return 1 if differing else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n in differing:
        (args.out / n).write_text(outputs[n], encoding="utf-8")
    print(f"{summary(messages, added)}; {len(differing)} files written, {len(warnings)} warnings")
    return 0


# ------------------------------------------------------------------ error codes

def check_error_codes():
    """Every code kio knows must be in our table with kio's name and retriable flag.

    Descriptions are ours to write, so a missing code is printed as a row to complete by hand.
    """
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from fastkwire.error_codes import ERRORS
    from kio.schema.errors import ErrorCode as KioErrorCode

    problems = 0
    for e in sorted(KioErrorCode, key=int):
        name = e.name.upper()
        ours = ERRORS.get(int(e))
        if ours is None:
            problems += 1
            print(f'missing: ({int(e)}, "{name}", {e.retriable}, "<describe in our words>"),')
        elif (ours.name, ours.retriable) != (name, e.retriable):
            problems += 1
            print(f"differs: {int(e)}: ours {ours.name} retriable={ours.retriable}, "
                  f"kio {name} retriable={e.retriable}")
    extra = sorted(set(ERRORS) - {int(e) for e in KioErrorCode})
    if extra:
        print(f"codes kio does not know (kept): {extra}")
    print(f"{len(KioErrorCode)} kio error codes, {len(ERRORS)} in error_codes.py, {problems} to fix")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

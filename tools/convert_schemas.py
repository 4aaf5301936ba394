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
    "ConsumerProtocolAssignment",
    "ConsumerProtocolSubscription",
    "DefaultPrincipalData",
    "KRaftVersionRecord",
    "LeaderChangeMessage",
    "SnapshotFooterRecord",
    "SnapshotHeaderRecord",
    "VotersRecord",
)
# Definitions this project maintains by hand beyond Kafka's facts: never overwritten.
PROTECTED = ("StreamsGroupHeartbeatRequest", "StreamsGroupHeartbeatResponse")
# The share group (KIP-932) and streams group (KIP-1071) APIs: Kafka ships them as preview
# or early access, brokers offer them only when configured to, and Kafka has changed their
# versions in place (ReadShareGroupStateSummaryResponse v0). Every version is marked
# "unstable", whatever Kafka's latestVersionUnstable says.
PREVIEW_APIS = frozenset({76, 77, 78, 79, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92})
SNAPSHOT = "Kafka message definitions snapshot"

INT_BITS = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
UINT_BITS = {"uint16": 16, "uint32": 32}
PRIMITIVES = {*INT_BITS, *UINT_BITS, "float64", "bool", "uuid", "string", "bytes", "records"}

# Keys of Kafka's files: the ones we convert, and the ones we drop because they do not
# change the bytes (mapKey only shapes Kafka's Java collections).
MESSAGE_KEYS = {
    "apiKey",
    "type",
    "name",
    "validVersions",
    "flexibleVersions",
    "fields",
    "commonStructs",
    "latestVersionUnstable",
}
MESSAGE_DROPPED = {"listeners", "deprecatedVersions"}
FIELD_KEYS = {
    "name",
    "type",
    "versions",
    "nullableVersions",
    "default",
    "ignorable",
    "tag",
    "taggedVersions",
    "flexibleVersions",
    "fields",
}
FIELD_DROPPED = {"about", "mapKey", "entityType", "zeroCopy"}

# Our keys, in the order they are written; any other key of an existing file is kept.
TOP_ORDER = ("name", "kind", "api_key", "versions", "flexible", "unstable")
FIELD_ORDER = (
    "name",
    "type",
    "versions",
    "nullable",
    "default",
    "ignorable",
    "tag",
    "tagged",
    "flexible",
)
STRUCT_ORDER = ("name",)


class ConversionError(ValueError):
    pass


# ------------------------------------------------------------------ version ranges


def parse_range(text):
    """ "3" -> (3, 3), "3+" -> (3, None), "0-2" -> (0, 2), "none" -> None."""
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
        low, high = (
            (-(1 << bits - 1), (1 << bits - 1) - 1) if ftype in INT_BITS else (0, (1 << bits) - 1)
        )
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
        out["tag"] = int(raw["tag"])  # Kafka sometimes writes the tag as a string
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
    structs = [
        {
            "name": s["name"],
            "fields": [convert_field(f, f"{name}.{s['name']}") for f in s["fields"]],
        }
        for s in raw.get("commonStructs", ())
    ]
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
    mark_responses_unstable(messages)
    return messages


def mark_responses_unstable(messages):
    """Kafka marks only the request; the response of that version is just as provisional."""
    for name, msg in list(messages.items()):
        partner = messages.get(name.removesuffix("Request") + "Response")
        if msg["kind"] == "request" and partner is not None:
            if "unstable" in msg:
                partner["unstable"] = msg["unstable"]
            else:
                partner.pop("unstable", None)
            messages[partner["name"]] = ordered(partner, TOP_ORDER, tail=("fields", "structs"))


# ------------------------------------------------------------------ stage 1b: a newer Kafka's files


def convert_newer(messages, directory, label, warn):
    """Kafka's files of a newer release than the snapshot (kafka-python 3 ships some).

    An API the snapshot lacks, or names otherwise (Kafka renamed it), is taken whole from
    them; {old name: new name} of the renamed ones and the converted files are returned.
    Their facts about the APIs both have are applied later (apply_newer), after kio's.
    """
    newer = {}
    for path in sorted(Path(directory).glob("*.json")):
        raw = read_kafka(path)
        if raw.get("type") in ("request", "response", "header"):
            newer[raw["name"]] = convert_message(raw, f"{label}: {path.name}")
    mark_responses_unstable(newer)
    renamed = {}
    for name, msg in sorted(newer.items()):
        if name in messages:
            continue
        old = next(
            (
                n
                for n, m in messages.items()
                if msg["kind"] != "header"
                and (m["kind"], m.get("api_key")) == (msg["kind"], msg.get("api_key"))
            ),
            None,
        )
        if old is not None:
            renamed[old] = name
            del messages[old]
            warn(
                f"{old}: Kafka renamed API {msg['api_key']} {name}; converted from {label}, "
                "the old name stays an alias"
            )
        else:
            warn(f"{name}: not in the snapshot; converted from {label}")
        messages[name] = msg
    return newer, renamed


def apply_newer(messages, newer, label, warn, taken):
    """Where a newer Kafka's file and our definition disagree on a version both describe,
    the newer one wins: its unstable marks, and the ignorable flag of a field that some
    version of its file lacks (Kafka 4 dropped ClientId's flag with header v0, which we
    keep). Any other difference is reported, not applied. Returns {name: what it changed}."""
    changed = {}
    for name, theirs in sorted(newer.items()):
        msg = messages.get(name)
        if msg is None or name in taken or name in PROTECTED:
            continue
        both = versions_of(msg["versions"]) & versions_of(theirs["versions"])
        what = set()
        ours_unstable = versions_of(msg.get("unstable", "none")) if "unstable" in msg else set()
        their_unstable = versions_of(theirs["unstable"]) if "unstable" in theirs else set()
        unstable = (ours_unstable - versions_of(theirs["versions"])) | their_unstable
        if unstable != ours_unstable and msg.get("api_key") not in PREVIEW_APIS:
            spans = runs(sorted(unstable))
            if len(spans) > 1:
                warn(f"{name}: unstable versions {spans} from {label} are not one range; kept ours")
            else:
                warn(
                    f"{name}: unstable {msg.get('unstable', 'none')} -> "
                    f"{format_range(spans[0]) if spans else 'none'} ({label})"
                )
                if spans:
                    msg["unstable"] = format_range(spans[0])
                else:
                    del msg["unstable"]
                messages[name] = msg = ordered(msg, TOP_ORDER, tail=("fields", "structs"))
                what.add("unstable versions")
        their_versions = versions_of(theirs["versions"])
        for v in sorted(both):
            lines = compare_newer(
                msg,
                msg["fields"],
                theirs,
                theirs["fields"],
                v,
                their_versions,
                f"{name} v{v}",
                lambda w: warn(f"{w} ({label})"),
                what,
            )
            for line in lines:
                warn(f"{line} ({label}; not applied)")
        if what:
            changed[name] = sorted(what)
    return changed


def compare_newer(msg, fields, theirs, their_fields, version, their_versions, where, warn, what):
    shared = {s["name"]: s["fields"] for s in msg.get("structs", ())}
    their_shared = {s["name"]: s["fields"] for s in theirs.get("structs", ())}
    ours = [f for f in fields if in_range(parse_range(f["versions"]), version)]
    others = {f["name"]: f for f in their_fields if in_range(parse_range(f["versions"]), version)}
    for f in ours:
        t = others.get(f["name"])
        if t is None:
            continue
        lacking = [v for v in their_versions if not in_range(parse_range(t["versions"]), v)]
        if bool(f.get("ignorable")) != bool(t.get("ignorable")) and lacking:
            if t.get("ignorable"):
                f["ignorable"] = True
            else:
                del f["ignorable"]
            warn(
                f"{where}.{f['name']}: ignorable {bool(t.get('ignorable'))}, as the newer Kafka has it"
            )
            what.add("ignorable flags")
        sub = f.get("fields", shared.get(f["type"].removeprefix("[]")))
        their_sub = t.get("fields", their_shared.get(t["type"].removeprefix("[]")))
        if sub is not None and their_sub is not None:
            compare_newer(
                msg,
                sub,
                theirs,
                their_sub,
                version,
                their_versions,
                f"{where}.{f['name']}",
                warn,
                what,
            )
    # the rest, as the drift check reports it (ignorable differences that do not matter skipped)
    if fields is msg["fields"]:
        return [
            line
            for line in compare_facts(
                definition_facts(msg, version), definition_facts(theirs, version), where, True
            )
            if ": ignorable ours" not in line
        ]
    return []


# ------------------------------------------------------------------ stage 2: kio's newer versions

KIO_TYPES = {
    "int8": "int8",
    "int16": "int16",
    "int32": "int32",
    "int64": "int64",
    "uint16": "uint16",
    "uint32": "uint32",
    "float64": "float64",
    "bool": "bool",
    "uuid": "uuid",
    "string": "string",
    "bytes": "bytes",
    "records": "records",
    # kio's richer Python types over the same wire types
    "error_code": "int16",
    "timedelta_i32": "int32",
    "timedelta_i64": "int64",
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
    name: str  # kio's snake_case name
    type: str  # our type text: "int32", "[]string", "[]TopicData"
    nullable: bool
    tag: int | None
    default: object  # JSON value, or NO_DEFAULT
    millis: bool  # kio dropped an "Ms" suffix
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
    return NO_DEFAULT  # () for arrays, struct instances: Kafka's implied defaults


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
                default = (
                    type_default("uuid")
                    if base == "uuid"
                    else -1
                    if kafka_type == "datetime_i64"
                    else NO_DEFAULT
                )
        out.append(
            KioField(
                name=f.name,
                type=("[]" if array else "") + base,
                nullable=nullable,
                tag=f.metadata.get("tag"),
                default=default,
                millis=kafka_type in KIO_MILLIS,
                struct=struct,
            )
        )
    return tuple(out)


def kio_versions(msg):
    """{version: "module:Class" of kio's dataclass} for our message; {} if kio lacks it.

    Importing kio's modules is what takes time, so they are imported only when compared.
    """
    from kio.schema.index import api_key_map, schema_name_map
    from kio.static.constants import EntityType

    if msg["kind"] == "header":
        name, kind = (
            {"RequestHeader": "request_header", "ResponseHeader": "response_header"}[msg["name"]],
            EntityType.header,
        )
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
    return {
        "bool": False,
        "string": "",
        "float64": 0.0,
        "uuid": "00000000-0000-0000-0000-000000000000",
    }.get(ftype, 0 if ftype in INT_BITS or ftype in UINT_BITS else NO_DEFAULT)


class Extender:
    """Compares and extends one message definition with kio's dataclasses."""

    def __init__(self, msg, warn):
        self.msg = msg
        self.warn = warn
        self.shared = {s["name"]: s for s in msg.get("structs", ())}
        self.aliases = {}  # id(our field) -> kio's match key, for fields kio renamed

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
                o["type"] == k.type
                or (k.struct and o["type"].startswith("[]") == k.type.startswith("[]"))
                for o, k in zip(gap_ours, gap_kio)
            )
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
        if ours_type != kf.type and not (
            kf.struct and ours_type.startswith("[]") == kf.type.startswith("[]")
        ):
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
            self.warn(
                f"{where}.{new['name']}: added in v{version} from kio ({new['type']}); "
                "check its name, ignorable flag and default against Kafka"
            )

    def insert_at(self, fields, theirs, i, version):
        """Where kio's i-th field goes: before the next field both have (so after the fields
        it replaces, as Kafka writes them), else at the end."""
        for later in theirs[i + 1 :]:
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
            self.warn(
                f"{path}: tag {f.get('tag')} (tagged {f.get('tagged')}) vs kio {kf.tag} "
                f"in v{version}; kept ours"
            )
        if kf.struct is None:
            return
        if "fields" in f:
            self.extend(f["fields"], kf.struct, version, path, seen)
        else:
            shared = f["type"].removeprefix("[]")
            if shared not in seen:  # a shared struct is extended once per version
                seen.add(shared)
                self.extend(
                    self.shared[shared]["fields"], kf.struct, version, f"{path}<{shared}>", seen
                )

    def refresh(self, fields, cls, version, where, seen):
        """Make `fields` describe `version` as kio's `cls` does, where that only moves the
        first version of a field (Kafka changed an unstable version in place: a field
        added in v1 moved into v0, or one of v0 moved out)."""
        theirs = kio_fields(cls)
        ours = [f for f in fields if in_range(parse_range(f["versions"]), version)]
        for kf in theirs:
            f = self.find(ours, kf, version)
            path = f"{where}.{kf.camel_name()}"
            if f is None:
                later = next(
                    (
                        g
                        for g in fields
                        if self.matches(g, kf) and parse_range(g["versions"])[0] == version + 1
                    ),
                    None,
                )
                if later is None:
                    self.warn(f"{path}: kio has it in v{version}, we do not; not applied")
                    continue
                for key in ("versions", "nullable", "tagged"):
                    if key in later and parse_range(later[key])[0] == version + 1:
                        later[key] = format_range((version, parse_range(later[key])[1]))
                self.warn(
                    f"{where}.{later['name']}: in v{version} too, as kio has it (newer Kafka)"
                )
            elif kf.struct is not None and f["type"].removeprefix("[]") not in PRIMITIVES:
                if "fields" in f:
                    self.refresh(f["fields"], kf.struct, version, f"{where}.{f['name']}", seen)
                elif f["type"].removeprefix("[]") not in seen:
                    shared = f["type"].removeprefix("[]")
                    seen.add(shared)
                    self.refresh(
                        self.shared[shared]["fields"],
                        kf.struct,
                        version,
                        f"{where}<{shared}>",
                        seen,
                    )
        for f in ours:
            if any(self.matches(f, kf) for kf in theirs):
                continue
            rng = parse_range(f["versions"])
            if rng[0] != version or rng[1] == version:
                self.warn(f"{where}.{f['name']}: not in kio's v{version}; not applied")
                continue
            for key in ("versions", "nullable", "tagged"):
                if key in f and parse_range(f[key])[0] == version:
                    f[key] = format_range((version + 1, parse_range(f[key])[1]))
            self.warn(f"{where}.{f['name']}: from v{version + 1}, as kio has it (newer Kafka)")

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
                    self.warn(
                        f"{where}: kio's struct {name} has the name of another struct "
                        "of this message; rename one"
                    )
                f["fields"] = [
                    self.new_field(k, version, f"{where}.{k.camel_name()}", seen)
                    for k in kio_fields(kf.struct)
                ]
        return f

    def run(self, known, check_all):
        """Add kio's versions newer than ours, then compare the newest version both had (or
        all of them): where kio, which follows a newer Kafka, differs, its facts win."""
        name = self.msg["name"]
        low, high = parse_range(self.msg["versions"])
        snapshot_high = high
        flexible = parse_range(self.msg["flexible"])
        added, refreshed = [], []
        self.refreshed = refreshed
        if high in known:  # pairs up the fields kio renamed, before extending
            self.compare(self.msg["fields"], resolve_name(known[high]), high, f"{name} v{high}")
        for version, path in known.items():
            if version <= high:
                continue
            cls = resolve_name(path)
            if version != high + 1:
                self.warn(f"{name}: kio skips from v{high} to v{version}; stopped")
                break
            if getattr(cls, "__flexible__", False) != in_range(flexible, version):
                self.warn(
                    f"{name} v{version}: kio flexible={cls.__flexible__}, ours disagrees; stopped"
                )
                break
            self.extend(self.msg["fields"], cls, version, name, set())
            high = version
            added.append(version)
            for diff in self.compare(self.msg["fields"], cls, version, f"{name} v{version}"):
                self.warn(f"{diff} (after extending)")
        # Kafka changes unstable versions in place: compare all of theirs, not only the newest.
        every = check_all or "unstable" in self.msg or self.msg.get("api_key") in PREVIEW_APIS
        for version, path in known.items():
            if version > snapshot_high or version < snapshot_high and not every:
                continue
            cls = resolve_name(path)
            if self.compare(self.msg["fields"], cls, version, f"{name} v{version}"):
                self.refresh(self.msg["fields"], cls, version, name, set())
                refreshed.append(version)
                for diff in self.compare(self.msg["fields"], cls, version, f"{name} v{version}"):
                    self.warn(f"{diff} (snapshot version; kio's difference could not be applied)")
        lacking = [
            v for v in range(low, parse_range(self.msg["versions"])[1] + 1) if v not in known
        ]
        if known and lacking:
            self.warn(
                f"{name}: kio lacks v{format_range((lacking[0], lacking[-1]))}"
                f"{'' if len(lacking) == lacking[-1] - lacking[0] + 1 else ' (in part)'}; kept"
            )
        if added:
            self.msg["versions"] = format_range((low, high))
            if "unstable" in self.msg:
                self.warn(
                    f"{name}: v{self.msg['unstable']} was unstable in Kafka's files; "
                    f"kio adds v{format_range((added[0], added[-1]))}"
                )
        return added


def extend_with_kio(messages, warn, check_all=False, sources=None):
    """Stage 2; returns {name: [added versions]}. `sources` (name -> {source: what}) is
    told what came from kio."""
    from kio.schema.index import api_key_map

    label = kio_label()
    sources = {} if sources is None else sources
    added = {}
    for name in sorted(messages):
        msg = messages[name]
        known = kio_versions(msg)
        if not known:
            warn(f"{name}: kio does not know this API")
            continue
        if msg["kind"] != "header":
            expected = re.sub(
                r"(?<!^)(?=[A-Z])", "_", name.removesuffix(msg["kind"].title())
            ).lower()
            if api_key_map[msg["api_key"]] != expected:
                warn(
                    f"{name}: kio calls API {msg['api_key']} {api_key_map[msg['api_key']]!r}; "
                    "kept our name"
                )
        extender = Extender(msg, warn)
        versions = extender.run(known, check_all)
        if versions:
            added[name] = versions
            sources.setdefault(name, {})[label] = (
                f"v{format_range((versions[0], versions[-1]))} added"
            )
        if extender.refreshed:
            what = sources.setdefault(name, {})
            what[label] = "; ".join(
                filter(
                    None,
                    [
                        what.get(label),
                        "v"
                        + ", v".join(map(str, extender.refreshed))
                        + " as changed since the snapshot",
                    ],
                )
            )
    ours = {m.get("api_key") for m in messages.values()}
    for key in sorted(set(api_key_map) - ours):
        for kind in ("request", "response"):
            msg = kio_message(key, api_key_map[key], kind, warn)
            messages[msg["name"]] = msg
            added[msg["name"]] = list(versions_of(msg["versions"]))
            sources[msg["name"]] = {label: "every version (the snapshot lacks the API)"}
        warn(
            f"API {key} ({api_key_map[key]}): not in the snapshot; converted from kio alone "
            "(check ignorable flags and the names of new structs when Kafka's file is out)"
        )
    return added


def kio_label():
    import importlib.metadata

    return f"kio {importlib.metadata.version('kio')}"


def kio_message(api_key, api, kind, warn):
    """A whole definition from kio's dataclasses, for an API the snapshot lacks: the first
    version's fields are all new, later ones extend it as stage 2 does. A struct kio uses
    in more than one place becomes a shared struct (Kafka's commonStructs)."""
    from kio.schema.index import schema_name_map
    from kio.static.constants import EntityType

    name = "".join(part.title() for part in api.split("_")) + kind.title()
    known = {
        v: e[EntityType[kind]] for v, e in schema_name_map[api].items() if EntityType[kind] in e
    }
    classes = {v: resolve_name(path) for v, path in sorted(known.items())}
    low, high = min(classes), max(classes)
    if sorted(classes) != list(range(low, high + 1)):
        raise ConversionError(f"{name}: kio's versions {sorted(classes)} have gaps")
    flexible = [v for v, c in classes.items() if getattr(c, "__flexible__", False)]
    if flexible and flexible != list(range(flexible[0], high + 1)):
        raise ConversionError(f"{name}: kio's flexible versions {flexible} are not a range")
    uses = {}
    for cls in classes.values():
        here = {}

        def walk(c):
            for kf in kio_fields(c):
                if kf.struct is not None:
                    here[kf.struct.__name__] = here.get(kf.struct.__name__, 0) + 1
                    if here[kf.struct.__name__] == 1:
                        walk(kf.struct)

        walk(cls)
        for struct, n in here.items():
            uses[struct] = max(uses.get(struct, 0), n)
    msg = {
        "name": name,
        "kind": kind,
        "api_key": api_key,
        "versions": format_range((low, low)),
        "flexible": format_range((flexible[0], None)) if flexible else "none",
        "fields": [],
        "structs": [{"name": n, "fields": []} for n, k in sorted(uses.items()) if k > 1],
    }
    extender = Extender(msg, lambda w: None if "added in" in w else warn(w))
    for v, cls in classes.items():
        extender.extend(msg["fields"], cls, v, name, set())
        msg["versions"] = format_range((low, v))
    if msg["structs"]:
        msg["structs"] = order_structs(msg["structs"], name)
    else:
        del msg["structs"]
    return msg


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
    parts = [
        f"  {json.dumps(k)}: {json.dumps(v)}"
        for k, v in msg.items()
        if k not in ("fields", "structs")
    ]
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


def kafka_python_label():
    import importlib.metadata

    return f"kafka-python {importlib.metadata.version('kafka-python')}"


def build(kafka_dir, out_dir, use_kio, warn, check_all=False, newer="kafka-python"):
    """{file name: text} the tool writes, the definitions, and {name: versions kio added}.

    `newer`: a directory of a newer Kafka's files, "kafka-python" for the ones kafka-python
    3 ships (skipped when it is not installed), or None. What each file's facts came from
    is left in build.sources, the renamed APIs in build.renamed.
    """
    messages = convert_directory(kafka_dir, warn)
    sources = {name: {SNAPSHOT: f"v{m['versions']}"} for name, m in messages.items()}
    newer_defs, renamed, label = {}, {}, None
    if newer == "kafka-python":
        directory = kafka_python_dir()
        label = kafka_python_label() if directory is not None else None
    elif newer is not None:
        directory, label = Path(newer), f"Kafka's files in {Path(newer).name}"
    if label is not None:
        newer_defs, renamed = convert_newer(messages, directory, label, warn)
        for old, name in renamed.items():
            del sources[old]
            sources[name] = {
                label: f"every version (the snapshot calls API {messages[name]['api_key']} {old})"
            }
        for name in set(messages) - set(sources):
            sources[name] = {label: "every version (not in the snapshot)"}
    added = extend_with_kio(messages, warn, check_all, sources) if use_kio else {}
    if label is not None:
        for name, what in apply_newer(
            messages, newer_defs, label, warn, set(renamed.values())
        ).items():
            sources[name].setdefault(label, ", ".join(what))
    for name, msg in list(messages.items()):
        if msg.get("api_key") in PREVIEW_APIS and msg.get("unstable") != msg["versions"]:
            msg["unstable"] = msg["versions"]
            messages[name] = ordered(msg, TOP_ORDER, tail=("fields", "structs"))
    outputs = {}
    for name in sorted(messages):
        target = Path(out_dir) / f"{name}.json"
        if name in PROTECTED:
            sources[name] = {"this project": "maintained by hand (PROTECTED)"}
        if target.exists():
            if name in PROTECTED:
                continue
            merge(messages[name], json.loads(target.read_text(encoding="utf-8")), warn)
        outputs[target.name] = render(messages[name])
    build.sources = {f"{n}.json": sources[n] for n in sorted(sources)}
    build.renamed = dict(sorted(renamed.items()))
    return outputs, messages, added


def render_sources(sources, renamed):
    """The text of tools/schema_sources.json: which source each file's facts came from."""
    return json.dumps({"renamed": renamed, "files": sources}, indent=1) + "\n"


SOURCES_FILE = Path(__file__).resolve().parent / "schema_sources.json"


def count_fields(fields):
    return sum(1 + count_fields(f.get("fields", ())) for f in fields)


def summary(messages, added):
    apis = {m["api_key"] for m in messages.values() if "api_key" in m}
    versions = sum(
        parse_range(m["versions"])[1] - parse_range(m["versions"])[0] + 1 for m in messages.values()
    )
    fields = sum(
        count_fields(m["fields"]) + sum(count_fields(s["fields"]) for s in m.get("structs", ()))
        for m in messages.values()
    )
    return (
        f"{len(messages)} messages ({len(apis)} APIs), {versions} message versions, "
        f"{fields} fields; kio added {sum(len(v) for v in added.values())} versions "
        f"to {len(added)} messages"
    )


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kafka", type=Path, help="directory of Kafka's message definitions")
    p.add_argument("--out", type=Path, help="schema directory to write (src/fastkwire/schemas)")
    p.add_argument("--no-kio", action="store_true", help="skip the versions newer than --kafka")
    p.add_argument(
        "--newer",
        default="kafka-python",
        help="a newer Kafka's files: a directory, or kafka-python (the default: the "
        "ones kafka-python 3 ships, when installed)",
    )
    p.add_argument("--no-newer", action="store_true", help="skip --newer")
    p.add_argument(
        "--kio-all-versions",
        action="store_true",
        help="compare every version kio shares with --kafka, not only the newest",
    )
    p.add_argument(
        "--check",
        nargs="?",
        const=True,
        default=False,
        metavar="SOURCE",
        help="alone: write nothing, exit 1 if --out differs; with SOURCE (kio, "
        "kafka-python or a directory of Kafka's files): list each API, version "
        "and field where SOURCE differs from --out, exit 1 if any",
    )
    p.add_argument(
        "--sources",
        type=Path,
        default=None,
        help=f"where to record each file's sources (default: {SOURCES_FILE.name} "
        "beside this tool, when --out is the package's schema directory)",
    )
    p.add_argument("--quiet", action="store_true", help="print no warnings, only the summary")
    p.add_argument(
        "--error-codes",
        action="store_true",
        help="check src/fastkwire/error_codes.py against kio's error codes",
    )
    args = p.parse_args(argv)
    if isinstance(args.check, str):
        out = args.out or Path(__file__).resolve().parents[1] / "src" / "fastkwire" / "schemas"
        try:
            lines = drift(args.check, out)
        except (ConversionError, ImportError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for line in lines:
            print(line)
        print(f"{len(lines)} differences between {args.check} and {out}", file=sys.stderr)
        return 1 if lines else 0
    if args.error_codes or not args.no_kio:
        try:
            import kio  # noqa: F401
        except ImportError:
            p.error(
                "this needs the kio package (pip install kio); conversion runs without "
                "it when given --no-kio"
            )
    if args.error_codes:
        return check_error_codes()
    if args.kafka is None or args.out is None:
        p.error("--kafka and --out are required")
    package_schemas = Path(__file__).resolve().parents[1] / "src" / "fastkwire" / "schemas"
    sources_file = args.sources or (SOURCES_FILE if args.out.resolve() == package_schemas else None)

    warnings = []
    try:
        outputs, messages, added = build(
            args.kafka,
            args.out,
            not args.no_kio,
            warnings.append,
            args.kio_all_versions,
            None if args.no_newer else args.newer,
        )
    except ConversionError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if not args.quiet:
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)

    differing = [
        n
        for n, text in outputs.items()
        if not (args.out / n).exists() or (args.out / n).read_text(encoding="utf-8") != text
    ]
    # files of APIs Kafka renamed: the old name is an alias now, its file goes
    stale = [f"{old}.json" for old in build.renamed if (args.out / f"{old}.json").exists()]
    sources_text = render_sources(build.sources, build.renamed)
    sources_stale = sources_file is not None and (
        not sources_file.exists() or sources_file.read_text(encoding="utf-8") != sources_text
    )
    if args.check:
        for n in differing:
            print(f"differs: {args.out / n}")
        for n in stale:
            print(f"renamed API, remove: {args.out / n}")
        if sources_stale:
            print(f"differs: {sources_file}")
        return 1 if differing or stale or sources_stale else 0
    args.out.mkdir(parents=True, exist_ok=True)
    for n in differing:
        (args.out / n).write_text(outputs[n], encoding="utf-8")
    for n in stale:
        (args.out / n).unlink()
    if sources_stale:
        sources_file.write_text(sources_text, encoding="utf-8")
    print(
        f"{summary(messages, added)}; {len(differing)} files written, {len(stale)} removed, "
        f"{len(warnings)} warnings"
    )
    return 0


# ------------------------------------------------------------------ drift check


@dataclasses.dataclass(frozen=True)
class Fact:
    """One field at one version, as a source describes it; None: the source does not say."""

    name: str
    type: str  # struct types as "struct" / "[]struct": their names are not bytes
    nullable: bool | None
    tag: int | None
    default: object  # NO_DEFAULT: not said
    ignorable: bool | None
    fields: tuple | None  # the struct's own facts


def _wire_type(ftype):
    base = ftype.removeprefix("[]")
    return ftype if base in PRIMITIVES else ftype.replace(base, "struct")


def definition_facts(msg, version):
    """Facts of a definition in our format (a converted Kafka file, or ours) at `version`."""
    shared = {s["name"]: s for s in msg.get("structs", ())}

    def walk(fields):
        out = []
        for f in fields:
            if not in_range(parse_range(f["versions"]), version):
                continue
            sub = f.get("fields")
            if sub is None and f["type"].removeprefix("[]") in shared:
                sub = shared[f["type"].removeprefix("[]")]["fields"]
            out.append(
                Fact(
                    name=f["name"],
                    type=_wire_type(f["type"]),
                    nullable=in_range(parse_range(f.get("nullable", "none")), version),
                    tag=f.get("tag")
                    if in_range(parse_range(f.get("tagged", "none")), version)
                    else None,
                    default=f["default"] if "default" in f else type_default(f["type"]),
                    ignorable=bool(f.get("ignorable")),
                    fields=None if sub is None else tuple(walk(sub)),
                )
            )
        return out

    return tuple(walk(msg["fields"]))


def kio_facts(cls):
    """Facts of one kio dataclass: no ignorable flag, no nullability for uuids, names rebuilt."""
    out = []
    for kf in kio_fields(cls):
        out.append(
            Fact(
                name=kf.camel_name(),
                type=_wire_type(kf.type),
                nullable=None if kf.type == "uuid" else kf.nullable,
                tag=kf.tag,
                default=kf.default,
                ignorable=None,
                fields=None if kf.struct is None else kio_facts(kf.struct),
            )
        )
    return tuple(out)


def compare_facts(ours, theirs, where, exact_names):
    """Lines naming each field whose facts differ; fields are matched by name (kio's
    rebuilt names by match_key), a same-typed pair left over in one place as a rename."""
    lines = []
    key = (lambda f: f.name) if exact_names else (lambda f: match_key(f.name).removesuffix("ms"))
    their_keys = {key(t): t for t in theirs}
    our_keys = {key(o): o for o in ours}
    only_ours = [o for o in ours if key(o) not in their_keys]
    only_theirs = [t for t in theirs if key(t) not in our_keys]
    for o, t in zip(list(only_ours), list(only_theirs)):
        if o.type == t.type and ours.index(o) == theirs.index(t):
            lines.append(f"{where}.{o.name}: the source calls it {t.name}")
            lines += compare_facts(o.fields or (), t.fields or (), f"{where}.{o.name}", exact_names)
            only_ours.remove(o)
            only_theirs.remove(t)
    lines += [f"{where}.{o.name}: only ours ({o.type})" for o in only_ours]
    lines += [f"{where}.{t.name}: only the source has it ({t.type})" for t in only_theirs]
    common = [key(o) for o in ours if key(o) in their_keys]
    if common != [key(t) for t in theirs if key(t) in our_keys]:
        lines.append(f"{where}: fields in another order")
    for k in common:
        o, t = our_keys[k], their_keys[k]
        path = f"{where}.{o.name}"
        if exact_names and o.name != t.name:
            lines.append(f"{path}: the source spells it {t.name}")
        for attr in ("type", "nullable", "tag", "default", "ignorable"):
            a, b = getattr(o, attr), getattr(t, attr)
            if b is None and attr in ("nullable", "ignorable") or b is NO_DEFAULT:
                continue
            if attr == "default" and (a == b or a == () and b is None):
                continue
            if a != b:
                lines.append(f"{path}: {attr} ours {a!r}, source {b!r}")
        if o.fields is not None and t.fields is not None:
            lines += compare_facts(o.fields, t.fields, path, exact_names)
    return lines


def versions_of(rng):
    low, high = parse_range(rng)
    return set(range(low, high + 1))


def kafka_python_dir():
    """The Kafka definitions kafka-python 3 ships, or None without it."""
    try:
        import kafka.protocol.schemas.resources as resources
    except ImportError:
        return None
    return Path(resources.__path__[0])


def source_definitions(source):
    """{name: (definition, exact names, {version: facts or None})} of a drift-check source."""
    out = {}
    if source == "kio":
        from kio.schema.index import api_key_map, schema_name_map
        from kio.static.constants import EntityType

        for key, api in api_key_map.items():
            for kind in ("request", "response"):
                known = {
                    v: e[EntityType[kind]]
                    for v, e in schema_name_map.get(api, {}).items()
                    if EntityType[kind] in e
                }
                if not known:
                    continue
                name = "".join(p.title() for p in api.split("_")) + kind.title()
                classes = {v: resolve_name(path) for v, path in sorted(known.items())}
                flexible = [v for v, c in classes.items() if getattr(c, "__flexible__", False)]
                msg = {
                    "name": name,
                    "kind": kind,
                    "api_key": key,
                    "versions": format_range((min(classes), max(classes))),
                    "flexible": format_range((min(flexible), None)) if flexible else "none",
                }
                out[name] = (msg, False, {v: lambda c=c: kio_facts(c) for v, c in classes.items()})
        return out
    directory = kafka_python_dir() if source == "kafka-python" else Path(source)
    if directory is None or not directory.is_dir():
        raise ConversionError(
            f"no definitions at {source!r}: give kio, kafka-python or a directory"
        )
    converted = {}
    for path in sorted(directory.glob("*.json")):
        raw = read_kafka(path)
        if raw.get("type") in ("request", "response", "header"):
            converted[raw["name"]] = convert_message(raw, path.name)
    mark_responses_unstable(converted)
    for name, msg in converted.items():
        out[name] = (
            msg,
            True,
            {v: lambda v=v, m=msg: definition_facts(m, v) for v in versions_of(msg["versions"])},
        )
    return out


def drift(source, schema_dir):
    """Each API, version and field where `source` differs from the definitions in schema_dir."""
    ours = {
        p.stem: json.loads(p.read_text(encoding="utf-8"))
        for p in sorted(Path(schema_dir).glob("*.json"))
    }
    by_key = {(m.get("api_key"), m["kind"]): n for n, m in ours.items()}
    lines, matched = [], set()
    for name, (theirs, exact, facts) in sorted(source_definitions(source).items()):
        ours_name = (
            name
            if name in ours
            else (
                None
                if theirs["kind"] == "header"
                else by_key.get((theirs.get("api_key"), theirs["kind"]))
            )
        )
        matched.add(ours_name)
        if ours_name is None:
            lines.append(
                f"{name} (API {theirs.get('api_key')}): only the source has it, "
                f"versions {theirs['versions']}"
            )
            continue
        msg = ours[ours_name]
        where = ours_name
        if ours_name != name:
            lines.append(f"{ours_name}: the source calls API {theirs['api_key']} {name}")
        mine, their_versions = versions_of(msg["versions"]), set(facts)
        for label, missing in (
            ("only ours", mine - their_versions),
            ("only the source has", their_versions - mine),
        ):
            if missing:
                ranges = ", ".join(f"v{format_range(r)}" for r in runs(sorted(missing)))
                lines.append(f"{where}: {ranges} {label}")
        for v in sorted(mine & their_versions):
            flex = (
                in_range(parse_range(msg["flexible"]), v),
                in_range(parse_range(theirs["flexible"]), v),
            )
            if flex[0] != flex[1]:
                lines.append(f"{where} v{v}: flexible ours {flex[0]}, source {flex[1]}")
            if source != "kio" and msg.get("api_key") not in PREVIEW_APIS:  # ours: every version
                unstable = [
                    in_range(parse_range(m.get("unstable", "none")), v) for m in (msg, theirs)
                ]
                if unstable[0] != unstable[1]:
                    lines.append(f"{where} v{v}: unstable ours {unstable[0]}, source {unstable[1]}")
            lines += compare_facts(definition_facts(msg, v), facts[v](), f"{where} v{v}", exact)
    for name in sorted(set(ours) - matched):
        if source != "kio" or ours[name]["kind"] != "header":
            lines.append(f"{name}: the source does not have it")
    return collapse(lines)


def collapse(lines):
    """The same difference in consecutive versions as one line: "X v0-9.F: ..."."""
    out, groups = [], {}
    for line in lines:
        m = re.fullmatch(r"(\w+) v(\d+)([.:].*)", line)
        if m is None:
            out.append((line, None))
            continue
        key = (m[1], m[3])
        if key not in groups:
            groups[key] = []
            out.append((None, key))
        groups[key].append(int(m[2]))
    return [
        line
        if key is None
        else ", ".join(f"{key[0]} v{format_range(r)}{key[1]}" for r in runs(sorted(groups[key])))
        for line, key in out
    ]


def runs(numbers):
    """[0, 1, 2, 5] -> [(0, 2), (5, 5)]."""
    out = []
    for n in numbers:
        if out and out[-1][1] == n - 1:
            out[-1] = (out[-1][0], n)
        else:
            out.append((n, n))
    return out


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
            print(
                f"differs: {int(e)}: ours {ours.name} retriable={ours.retriable}, "
                f"kio {name} retriable={e.retriable}"
            )
    extra = sorted(set(ERRORS) - {int(e) for e in KioErrorCode})
    if extra:
        print(f"codes kio does not know (kept): {extra}")
    print(
        f"{len(KioErrorCode)} kio error codes, {len(ERRORS)} in error_codes.py, {problems} to fix"
    )
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

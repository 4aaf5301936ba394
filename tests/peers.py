"""Adapters to the peer codecs the cross-check tests compare against.

Peers (test dependencies only):
- kio (PyPI `kio`): frozen dataclasses generated from Apache Kafka's schemas, one module
  per version; native (Rust) parsing, Python serialisation.
- kafka-python 3 (PyPI `kafka-python>=3`): its schema-driven codec in kafka.protocol, and
  its legacy per-version classes (kafka.protocol.old) for the versions the codec lacks.

The common currency is our to_dict() form: snake_case keys, nested structs as dicts,
arrays as lists, null as None, every field of the message (those the version lacks at
their defaults). `<peer>_encode(name, version, d)` returns the body bytes (no header);
`<peer>_decode(name, version, data)` returns that dict form and insists that the peer
consumed every byte.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import importlib
import importlib.metadata
import io
import pkgutil
import re
import types
import typing
import uuid

from hypothesis import strategies as st
import kafka.protocol.admin
import kafka.protocol.consumer
import kafka.protocol.metadata
import kafka.protocol.old
import kafka.protocol.producer
import kafka.protocol.sasl
from kafka.protocol.api_header import RequestHeader as KpRequestHeader
from kafka.protocol.api_header import ResponseHeader as KpResponseHeader
from kafka.protocol.api_message import ApiMessage as KpApiMessage
from kafka.protocol.old.types import Array as KpLegacyArray
from kafka.protocol.old.types import Schema as KpLegacySchema
from kafka.protocol.schemas.fields.codecs import BitField as KpBitField

try:
    import kio.schema.index
    from kio.index import load_entity_schema
    from kio.schema.errors import ErrorCode
    from kio.serial import entity_reader, entity_writer
    from kio.static.constants import EntityType
except ImportError:  # no build for this Python (free-threaded 3.13): kio's cross-checks skip
    kio = ErrorCode = None

from strategies import (
    MESSAGE_NAMES,
    default_value,
    load_schema,
    present,
    snake_case,
    struct_fields,
    versions,
)

ONE_MS = datetime.timedelta(milliseconds=1)


# --- our dict form <-> the fields a version carries --------------------------------


def carried(name: str, version: int, d: dict) -> dict:
    """The part of `d` that `version` puts on the wire.

    A peer has no slot for a field its version lacks, so such a field must be at its
    default; anything else would be dropped silently and the comparison would lie.
    """
    schema = load_schema(name)
    return _carried(schema, schema["fields"], version, d, name)


def _carried(schema, fields, version, d, path):
    if d.get("unknown_tagged_fields"):
        raise ValueError(f"{path}: peers cannot carry unknown tagged fields")
    out = {}
    for field in fields:
        key = snake_case(field["name"])
        value = d[key]
        if not present(field, version):
            if value != default_value(schema, field):
                raise ValueError(f"{path}.{key}={value!r} is not in v{version}")
            continue
        sub = struct_fields(schema, field)
        if sub is not None and value is not None:
            if field["type"].startswith("[]"):
                value = [_carried(schema, sub, version, v, f"{path}.{key}[]") for v in value]
            else:
                value = _carried(schema, sub, version, value, f"{path}.{key}")
        out[key] = value
    return out


def complete(name: str, version: int, values: dict) -> dict:
    """Our to_dict() form from the field values a peer decoded for `version`."""
    schema = load_schema(name)
    return _complete(schema, schema["fields"], version, values, name)


def _complete(schema, fields, version, values, path):
    values = dict(values)
    out = {}
    for field in fields:
        key = snake_case(field["name"])
        if not present(field, version):
            out[key] = default_value(schema, field)
            continue
        if key not in values:
            raise ValueError(f"{path}.{key} (v{version}) is missing from the peer's value")
        value = values.pop(key)
        sub = struct_fields(schema, field)
        is_array = field["type"].startswith("[]")
        if sub is not None and value is not None:
            if is_array:
                value = [_complete(schema, sub, version, v, f"{path}.{key}[]") for v in value]
            else:
                value = _complete(schema, sub, version, value, f"{path}.{key}")
        elif is_array and value is not None:
            value = [_plain(v) for v in value]
        else:
            value = _plain(value)
        out[key] = value
    if values:
        raise ValueError(f"{path}: peer fields not in our v{version}: {sorted(values)}")
    return out


def _plain(value):
    """Peer scalar -> plain Python value (kio's int subclasses, memoryviews...)."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    return value


# --- kio ------------------------------------------------------------------------------


# Kafka renamed these after the definitions ours follow, keeping the bytes; kio has the
# new names in every version. API: ours -> kio's module; field: (kio's module, kio's
# class, kio's field) -> our snake_case name. (API 74, which Kafka renamed from
# ListClientMetricsResources to ListConfigResources, is defined under the new names now.)
KIO_API_NAMES: dict[str, str] = {}
KIO_FIELD_NAMES = {
    # KIP-996 (pre-vote): the sender of a Vote request is a replica, not yet a candidate;
    # ours keep the older names (the bytes are the same)
    ("vote.request", "PartitionData", "replica_epoch"): "candidate_epoch",
    ("vote.request", "PartitionData", "replica_id"): "candidate_id",
    ("vote.request", "PartitionData", "replica_directory_id"): "candidate_directory_id",
}


def _kio_location(name: str) -> tuple[str, EntityType]:
    """LeaveGroupRequest -> ("leave_group", request); RequestHeader -> (..., header)."""
    if name.endswith("Header"):
        return snake_case(name), EntityType.header
    for suffix, kind in (("Request", EntityType.request), ("Response", EntityType.response)):
        if name.endswith(suffix):
            api = name.removesuffix(suffix)
            return KIO_API_NAMES.get(api, snake_case(api)), kind
    raise ValueError(f"cannot place {name} in kio")


def _kio_versions(name: str) -> range | None:
    api, kind = _kio_location(name)
    found = sorted(
        v for v, kinds in kio.schema.index.schema_name_map.get(api, {}).items() if kind in kinds
    )
    if not found:
        return None
    assert found == list(range(found[0], found[-1] + 1)), (name, found)
    return range(found[0], found[-1] + 1)


def _kio_class(name: str, version: int) -> type:
    api, kind = _kio_location(name)
    return load_entity_schema(api, version, kind)


# kio's types for Kafka's millisecond fields; it drops their "Ms" suffix
# (throttle_time_ms -> throttle_time, log_append_time_ms -> log_append_time).
KIO_MS_TYPES = ("timedelta_i32", "timedelta_i64", "datetime_i64")
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
# The milliseconds kio's timedelta/datetime fields carry exactly: kio writes
# round(total_seconds() * 1000), a float, so a value is exact only while its
# microseconds fit a double's 53 bits.
KIO_DATETIME_MS = (0, 2**42)  # kio reads a timestamp through a float too (up to 2109)
KIO_TIMEDELTA_I64_MS = (-(2**42), 2**42)


def _kio_type(field: dataclasses.Field) -> str | None:
    return field.metadata.get("kafka_type")


def _kio_key(cls: type, field: dataclasses.Field) -> str:
    """Our name for a field of kio's dataclass `cls`."""
    module = cls.__module__.split(".")  # kio.schema.<api>.v<n>.<kind>
    renamed = KIO_FIELD_NAMES.get((f"{module[2]}.{module[-1]}", cls.__name__, field.name))
    if renamed is not None:
        return renamed
    # Every other name is Kafka's, snake_cased; kio appends "_" to names Python has (id_).
    name = field.name.removesuffix("_")
    if _kio_type(field) in KIO_MS_TYPES:
        return name + "_ms"
    return name


def _kio_shape(annotation) -> tuple[type, bool, bool]:
    """(element type, is array, element optional) of a kio annotation like tuple[X, ...] | None."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        (annotation,) = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) is tuple:
        element = typing.get_args(annotation)[0]
        args = typing.get_args(element)
        optional = type(None) in args
        if optional:
            (element,) = [a for a in args if a is not type(None)]
        return element, True, optional
    return annotation, False, False


def _to_kio(cls: type, values: dict):
    values = dict(values)
    kwargs = {}
    for field in dataclasses.fields(cls):
        key = _kio_key(cls, field)
        if key not in values:
            raise ValueError(f"kio {cls.__name__}.{field.name} has no counterpart {key!r}")
        value = values.pop(key)
        element, is_array, _ = _kio_shape(field.type)
        if dataclasses.is_dataclass(element):
            convert = lambda v: _to_kio(element, v)  # noqa: E731
        else:
            convert = lambda v: _to_kio_scalar(field, v)  # noqa: E731
        if value is not None:
            value = tuple(convert(v) for v in value) if is_array else convert(value)
        kwargs[field.name] = value
    if values:
        raise ValueError(f"kio {cls.__name__} lacks fields {sorted(values)}")
    return cls(**kwargs)


def _kio_optional(field: dataclasses.Field) -> bool:
    return type(None) in typing.get_args(field.type)


def _to_kio_scalar(field: dataclasses.Field, value):
    kafka_type = _kio_type(field)
    if kafka_type == "error_code":
        return ErrorCode(value)
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return value * ONE_MS
    if kafka_type == "datetime_i64":
        # kio's nullable timestamps write None as -1
        if value == -1 and _kio_optional(field):
            return None
        return EPOCH + value * ONE_MS
    return value


def _from_kio(entity) -> dict:
    out = {}
    for field in dataclasses.fields(entity):
        value = getattr(entity, field.name)
        if isinstance(value, tuple):
            value = [_from_kio_value(field, v) for v in value]
        elif value is not None or not _kio_shape(field.type)[1]:
            value = _from_kio_value(field, value)  # a null array stays None
        out[_kio_key(type(entity), field)] = value
    return out


def _from_kio_value(field: dataclasses.Field, value):
    if dataclasses.is_dataclass(value):
        return _from_kio(value)
    kafka_type = _kio_type(field)
    if kafka_type == "datetime_i64" and value is None:
        return -1
    if kafka_type == "uuid" and value is None:
        return uuid.UUID(int=0)  # kio reads the all-zero uuid as None
    if isinstance(value, datetime.datetime):
        value = value - EPOCH
    if isinstance(value, datetime.timedelta):
        ms, rest = divmod(value, ONE_MS)
        assert not rest, value
        return ms
    return _plain(value)


@functools.lru_cache(maxsize=None)
def _kio_field_types(name: str, version: int) -> dict:
    """{path of snake_case keys: kio's kafka_type} for every primitive field of kio's class."""
    found = {}

    def walk(cls, path):
        for field in dataclasses.fields(cls):
            element, _, _ = _kio_shape(field.type)
            here = path + (_kio_key(cls, field),)
            if dataclasses.is_dataclass(element):
                walk(element, here)
            else:
                found[here] = (_kio_type(field), _kio_optional(field))

    walk(_kio_class(name, version), ())
    return found


def kio_narrow(name: str, version: int, path: tuple):
    """The values kio can carry in the field at `path`, where narrower than the wire type."""
    if not peer_supports("kio", name, version):
        return None
    kafka_type, optional = _kio_field_types(name, version).get(path, (None, False))
    if kafka_type == "datetime_i64":
        times = st.integers(*KIO_DATETIME_MS)
        return st.just(-1) | times if optional else times
    if kafka_type == "timedelta_i64":
        return st.integers(*KIO_TIMEDELTA_I64_MS)
    if kafka_type == "error_code":  # also those not named ErrorCode
        return st.sampled_from(sorted(KIO_ERROR_CODES))
    return None


def kio_encode(name: str, version: int, d: dict) -> bytes:
    cls = _kio_class(name, version)
    buffer = io.BytesIO()
    entity_writer(cls)(buffer, _to_kio(cls, carried(name, version, d)))
    return buffer.getvalue()


def kio_decode(name: str, version: int, data: bytes) -> dict:
    entity, size = entity_reader(_kio_class(name, version))(data, 0)
    if size != len(data):
        raise ValueError(f"kio read {size} of {len(data)} bytes")
    return complete(name, version, _from_kio(entity))


# kio represents error codes as its ErrorCode enum, so it can only carry codes it knows.
KIO_ERROR_CODES = frozenset(int(code) for code in ErrorCode or ())


# --- kafka-python 3 -------------------------------------------------------------------


def _kp_messages(cls):
    for sub in cls.__subclasses__():
        yield sub
        yield from _kp_messages(sub)


# Every message class kafka-python defines under one of our names (its modules above
# register them all as subclasses of ApiMessage).
KP_CLASSES = {
    cls.__name__: cls
    for cls in (KpRequestHeader, KpResponseHeader, *_kp_messages(KpApiMessage))
    if cls.__name__ in MESSAGE_NAMES and getattr(cls, "_struct", None) is not None
}


def _kp_legacy_classes() -> dict:
    """{(name, version): class} of kafka-python's legacy protocol (kafka.protocol.old):
    one class per version (ProduceRequest_v0, ...) over a positional Schema."""
    found = {}
    for module in pkgutil.iter_modules(kafka.protocol.old.__path__):
        for attr, value in vars(
            importlib.import_module(f"kafka.protocol.old.{module.name}")
        ).items():
            match = re.fullmatch(r"(\w+)_v(\d+)", attr)
            if (
                match
                and match[1] in MESSAGE_NAMES
                and isinstance(getattr(value, "SCHEMA", None), KpLegacySchema)
            ):
                found[match[1], int(match[2])] = value
    return found


def _kp_codec_versions(name: str) -> range:
    cls = KP_CLASSES.get(name)
    if cls is None:
        return range(0)
    low, high = cls._valid_versions
    return range(low, high + 1)


# kafka-python 3 keeps its legacy classes for versions its schema-driven codec dropped
# with Kafka 4 (Produce v0-2, Fetch v0-3, ...); the adapter uses them for exactly those.
KP_LEGACY = {
    (name, version): cls
    for (name, version), cls in _kp_legacy_classes().items()
    if version not in _kp_codec_versions(name)
}


def _kp_versions(name: str) -> range | None:
    found = sorted({*_kp_codec_versions(name), *(v for n, v in KP_LEGACY if n == name)})
    if not found:
        return None
    assert found == list(range(found[0], found[-1] + 1)), (name, found)
    return range(found[0], found[-1] + 1)


def _kp_flexible(cls, version: int) -> bool:
    low, high = cls._flexible_versions
    return low <= version <= high


# kafka-python patches Kafka's int32 AuthorizedOperations fields (DescribeGroups group,
# DescribeCluster, Metadata cluster and topic) into a "bitfield": the set of the bits
# that are 1, None for the "not requested" value INT32_MIN (bit 31 alone). The wire is
# the same 4 bytes; Metadata and DescribeCluster also drop the Cluster/Topic prefix.


def _kp_is_bitfield(field) -> bool:
    return getattr(field, "_type", None) is KpBitField


def _to_bits(value: int) -> set | None:
    bits = {i for i in range(32) if (value & 0xFFFFFFFF) >> i & 1}
    return None if bits == {31} else bits


def _from_bits(bits: set | None) -> int:
    value = sum(1 << b for b in ({31} if bits is None else bits))
    return value - 2**32 if value >= 2**31 else value


def _our_key(keys, field) -> str:
    """Our name for a kafka-python field (its bitfields: cluster_authorized_operations...)."""
    found = [field.name] if field.name in keys else []
    if not found and _kp_is_bitfield(field):
        found = [k for k in keys if k.endswith("_" + field.name)]
    if len(found) != 1:
        raise ValueError(
            f"kafka-python field {field.name!r} has no single counterpart in {sorted(keys)}"
        )
    return found[0]


def _to_kp(struct, values: dict, version: int) -> dict:
    """Keyword arguments for a kafka-python data class (nested structs built too)."""
    values = dict(values)
    kwargs = {}
    # .fields, not ._fields: a struct array keeps its own parsed copy of its fields in
    # ._fields, while the data classes hang on its element struct's fields.
    for field in struct.fields.values():
        if not field.for_version_q(version):
            continue
        value = values.pop(_our_key(values, field))
        if value is not None and field.is_struct_array():
            value = [field.data_class(**_to_kp(field, v, version)) for v in value]
        elif value is not None and field.is_struct():
            value = field.data_class(**_to_kp(field, value, version))
        elif _kp_is_bitfield(field):
            value = _to_bits(value)
        kwargs[field.name] = value
    if values:
        raise ValueError(f"kafka-python {struct.name} lacks fields {sorted(values)}")
    return kwargs


def _from_kp(schema: dict, fields: list, struct, values: dict, version: int) -> dict:
    """kafka-python's to_dict() values under our names (`fields`: ours for `struct`)."""
    ours = {snake_case(f["name"]): f for f in fields}
    out = {}
    for field in struct.fields.values():
        if not field.for_version_q(version):
            continue
        key = _our_key(ours, field)
        value = values.pop(field.name)
        sub = struct_fields(schema, ours[key])
        if value is not None and field.is_struct_array():
            value = [_from_kp(schema, sub, field, v, version) for v in value]
        elif value is not None and field.is_struct():
            value = _from_kp(schema, sub, field, value, version)
        elif _kp_is_bitfield(field):
            value = _from_bits(value)
        out[key] = value
    if values:
        raise ValueError(
            f"kafka-python {struct.name} gave fields not in v{version}: {sorted(values)}"
        )
    return out


def _to_kp_legacy(schema, values: dict) -> tuple:
    """A legacy Schema's positional values, taken by its (Kafka's) field names."""
    values = dict(values)
    out = []
    for key, kind in zip(schema.names, schema.fields):
        if key not in values:
            raise ValueError(
                f"kafka-python legacy field {key!r} has no counterpart in {sorted(values)}"
            )
        value = values.pop(key)
        inner = kind.array_of if isinstance(kind, KpLegacyArray) else kind
        if isinstance(inner, KpLegacySchema) and value is not None:
            if isinstance(kind, KpLegacyArray):
                value = [_to_kp_legacy(inner, v) for v in value]
            else:
                value = _to_kp_legacy(inner, value)
        out.append(value)
    if values:
        raise ValueError(f"kafka-python legacy schema lacks fields {sorted(values)}")
    return tuple(out)


def _from_kp_legacy(schema, values: tuple) -> dict:
    out = {}
    for key, kind, value in zip(schema.names, schema.fields, values, strict=True):
        inner = kind.array_of if isinstance(kind, KpLegacyArray) else kind
        if isinstance(inner, KpLegacySchema) and value is not None:
            if isinstance(kind, KpLegacyArray):
                value = [_from_kp_legacy(inner, v) for v in value]
            else:
                value = _from_kp_legacy(inner, value)
        out[key] = value
    return out


def kp_encode(name: str, version: int, d: dict) -> bytes:
    if (name, version) in KP_LEGACY:
        return KP_LEGACY[name, version].SCHEMA.encode(
            _to_kp_legacy(KP_LEGACY[name, version].SCHEMA, carried(name, version, d))
        )
    cls = KP_CLASSES[name]
    kwargs = _to_kp(cls._struct, carried(name, version, d), version)
    if name.endswith("Header"):
        # ApiHeader.encode picks its version from flexibility: the lowest valid version
        # when not flexible, the first flexible one otherwise; that is ours exactly.
        return bytes(cls(version=version, **kwargs).encode(flexible=_kp_flexible(cls, version)))
    return bytes(cls[version](**kwargs).encode(version=version))


def kp_decode(name: str, version: int, data: bytes) -> dict:
    if (name, version) in KP_LEGACY:
        schema = KP_LEGACY[name, version].SCHEMA
        stream = io.BytesIO(data)
        values = schema.decode(stream)
        if stream.tell() != len(data):
            raise ValueError(f"kafka-python read {stream.tell()} of {len(data)} bytes")
        return complete(name, version, _from_kp_legacy(schema, values))
    cls = KP_CLASSES[name]
    flexible = _kp_flexible(cls, version)
    if name.endswith("Header"):
        stream = io.BytesIO(data)
        message = cls.decode(stream, flexible=flexible)
        used = stream.tell()
    else:
        # The decoder ApiMessage.decode runs, called directly so that we learn how many
        # bytes it used, and so that ApiVersionsResponse's client-side fallback (decode
        # as v0 whenever error_code != 0) does not replace the codec under test.
        decode = cls._struct.compiled_decode_from(
            version, compact=flexible, tagged=flexible, data_class=cls[None]
        )
        message, used = decode(memoryview(data), 0)
    if used != len(data):
        raise ValueError(f"kafka-python read {used} of {len(data)} bytes")
    if message.unknown_tags:
        raise ValueError(f"kafka-python saw unknown tags {message.unknown_tags}")
    schema = load_schema(name)
    values = _from_kp(schema, schema["fields"], cls._struct, message.to_dict(json=False), version)
    return complete(name, version, values)


# --- what each peer has ---------------------------------------------------------------

PEER_VERSIONS = {
    "kio": {n: r for n in MESSAGE_NAMES if kio and (r := _kio_versions(n)) is not None},
    "kafka-python": {n: r for n in MESSAGE_NAMES if (r := _kp_versions(n)) is not None},
}


def peer_has(peer: str, name: str, version: int) -> bool:
    """The peer defines this message version (maybe otherwise than ours)."""
    return version in PEER_VERSIONS[peer].get(name, range(0))


ENCODE = {"kio": kio_encode, "kafka-python": kp_encode}
DECODE = {"kio": kio_decode, "kafka-python": kp_decode}

PEER_RELEASES = {
    "kio": f"kio {importlib.metadata.version('kio')}" if kio else "kio (not installed)",
    "kafka-python": f"kafka-python {importlib.metadata.version('kafka-python')}",
}

# Documented reasons for every (peer, message, version) of ours a peer cannot check.
# test_peers fails on a gap missing from here, so no version drops out silently.
# Specific reasons first; the rest say what the peer's own tables hold.
PEER_GAPS = {
    ("kio", "RequestHeader", 0): "kio has request header v1-2 only (v0 lacks ClientId)",
    ("kafka-python", "RequestHeader", 0): "kafka-python declares request header versions 1-2",
    **{
        ("kafka-python", f"{api}{kind}", v): (
            f"kafka-python 3.0.12 has no {api} ({kip}): neither a message class nor its JSON"
        )
        for api, kip, top in (
            ("StreamsGroupHeartbeat", "KIP-1071", 0),
            ("StreamsGroupDescribe", "KIP-1071", 0),
            ("DescribeShareGroupOffsets", "KIP-932", 1),
            ("AlterShareGroupOffsets", "KIP-932", 0),
            ("DeleteShareGroupOffsets", "KIP-932", 0),
        )
        for kind in ("Request", "Response")
        for v in range(top + 1)
    },
}


def _missing_reason(peer: str, name: str) -> str:
    has = PEER_VERSIONS[peer].get(name)
    if has is None:
        return f"{PEER_RELEASES[peer]} has no {name}"
    return f"{PEER_RELEASES[peer]} has {name} v{has[0]}-{has[-1]} only"


# Versions a peer has but defines otherwise than ours, which follow the newest Kafka facts
# we have (tools/schema_sources.json says which source each file's came from): the bytes
# genuinely differ, so they are not compared. (kio's ReadShareGroupStateSummaryResponse v0,
# which Kafka changed in place, is ours now too.) test_peers checks that each difference still shows.
PEER_EXCLUDED = {
    ("kafka-python", "DescribeLogDirsRequest", 0): (
        "kafka-python's legacy DescribeLogDirsRequest_v0 has Topics[].Partitions as one int32; "
        "Kafka defines []int32 (in every version; kafka-python's own v1+ agrees)"
    ),
}
PEER_GAPS.update(PEER_EXCLUDED)

for _peer in PEER_VERSIONS:
    for _name in MESSAGE_NAMES:
        for _version in versions(load_schema(_name)["versions"]):
            if not peer_has(_peer, _name, _version):
                PEER_GAPS.setdefault((_peer, _name, _version), _missing_reason(_peer, _name))

# Per-peer limits on the values drawn for a message (see KIO_ERROR_CODES).
PEER_STRATEGY_ARGS = {
    "kio": {"error_codes": KIO_ERROR_CODES, "narrow": kio_narrow},
    "kafka-python": {},
}


def peer_supports(peer: str, name: str, version: int) -> bool:
    """The peer defines this message version as ours does."""
    return peer_has(peer, name, version) and (peer, name, version) not in PEER_EXCLUDED


def our_versions(name: str) -> range:
    return versions(load_schema(name)["versions"])

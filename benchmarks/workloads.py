"""Benchmark workloads and the contestants that run them.

Each workload's logical content is built once, as plain dicts keyed by snake_case field
names (the shape of fastkwire's ``to_dict()``). Every contestant turns that content into
its own objects once, outside the timed code, and exposes two zero-argument callables,
``encode`` and ``decode``. The Kafka codecs must all produce the same bytes, and they all
decode those same bytes; msgspec encodes the same content as msgpack (array_like
Structs), as the floor for turning content into Python objects and back.

``python benchmarks/workloads.py`` checks every contestant on every workload.
"""

import dataclasses
import datetime
import enum
import functools
import importlib
import io
import json
import random
import re
import struct
import types
import typing
import uuid
from pathlib import Path

# --------------------------------------------------------------------------------------
# Logical content
# --------------------------------------------------------------------------------------


def _member_ids(n, seed):
    """Ids shaped like the ones Kafka hands out: "<client.id>-<uuid4>", 40-50 characters."""
    rng = random.Random(seed)
    return [
        f"consumer-{1 + i % 12}-{uuid.UUID(int=rng.getrandbits(128), version=4)}" for i in range(n)
    ]


def leave_group_request(n):
    return {
        "group_id": "payments-ledger-consumers",
        "members": [
            {
                "member_id": member_id,
                "group_instance_id": f"payments-ledger-worker-{i:05d}",
                "reason": "removed by an operator: static member decommissioned (KIP-345)",
            }
            for i, member_id in enumerate(_member_ids(n, seed=n))
        ],
    }


def leave_group_response(n):
    return {
        "throttle_time_ms": 0,
        "error_code": 0,
        "members": [
            {
                "member_id": member_id,
                "group_instance_id": f"payments-ledger-worker-{i:05d}",
                # A few members are already gone: UNKNOWN_MEMBER_ID (25).
                "error_code": 25 if i % 17 == 0 else 0,
            }
            for i, member_id in enumerate(_member_ids(n, seed=n))
        ],
    }


def _topic_info(name):
    return {
        "name": name,
        "partitions": 0,
        "replication_factor": 1,
        "topic_configs": [{"key": "retention.ms", "value": "604800000"}],
    }


def heartbeat_small():
    """A small StreamsGroupHeartbeat v0 request: every field set, one element per list."""
    offsets = [{"subtopology_id": "abc-123", "partition": 0, "offset": 284729}]
    return {
        "group_id": "order-processors",
        "member_id": "consumer-1-abc123",
        "member_epoch": 12,
        "endpoint_information_epoch": 12,
        "instance_id": None,
        "rack_id": "abc-123",
        "rebalance_timeout_ms": 300000,
        "topology": {
            "epoch": 17,
            "subtopologies": [
                {
                    "subtopology_id": "abc-123",
                    "source_topics": ["value-1", "value-2"],
                    "source_topic_regex": ["value-1", "value-2"],
                    "state_changelog_topics": [_topic_info("orders")],
                    "repartition_sink_topics": ["value-1", "value-2"],
                    "repartition_source_topics": [_topic_info("orders")],
                    "copartition_groups": [
                        {
                            "source_topics": [1, 2],
                            "source_topic_regex": [1, 2],
                            "repartition_source_topics": [1, 2],
                        }
                    ],
                }
            ],
        },
        "active_tasks": [{"subtopology_id": "abc-123", "partitions": [1, 2, 3]}],
        "standby_tasks": [{"subtopology_id": "abc-123", "partitions": [1, 2, 3]}],
        "warmup_tasks": [{"subtopology_id": "abc-123", "partitions": [1, 2, 3]}],
        "process_id": "abc-123",
        "user_endpoint": {"host": "broker-1.kafka.local", "port": 9092},
        "client_tags": [{"key": "retention.ms", "value": "604800000"}],
        "task_offsets": offsets,
        "task_end_offsets": [dict(o) for o in offsets],
        "shutdown_application": True,
    }


def heartbeat_large(subtopologies=20, partitions=5000, offsets=1000):
    """The small example with big task lists: active and standby tasks of 20 subtopologies
    with 5000 partitions each, and 1000 task offsets."""
    content = heartbeat_small()
    content["active_tasks"] = [
        {"subtopology_id": str(s), "partitions": list(range(partitions))}
        for s in range(subtopologies)
    ]
    content["standby_tasks"] = [
        {"subtopology_id": str(s), "partitions": list(range(partitions, 2 * partitions))}
        for s in range(subtopologies)
    ]
    content["task_offsets"] = [
        {
            "subtopology_id": str(i % subtopologies),
            "partition": i // subtopologies,
            "offset": 10_000_000 + 37 * i,
        }
        for i in range(offsets)
    ]
    return content


def heartbeat_int32(n=1_000_000):
    """One []int32 field of n elements and little else: for array decoding against numpy."""
    return {
        "group_id": "order-processors",
        "member_id": "consumer-1-abc123",
        "member_epoch": 12,
        "endpoint_information_epoch": 12,
        "instance_id": None,
        "rack_id": None,
        "rebalance_timeout_ms": -1,
        "topology": None,
        "active_tasks": [{"subtopology_id": "0", "partitions": list(range(n))}],
        "standby_tasks": None,
        "warmup_tasks": None,
        "process_id": None,
        "user_endpoint": None,
        "client_tags": None,
        "task_offsets": None,
        "task_end_offsets": None,
        "shutdown_application": False,
    }


def _complete(message, version, content):
    """Content with every field of the version filled in (defaults where not given), as
    every peer wants all of them; built through fastkwire's pure classes."""
    from fastkwire import _messages_python as pure
    from fastkwire._layout import layouts

    full = getattr(pure, message).from_dict(content).to_dict()

    def keep(d, lay):  # only the fields the version has
        out = {}
        for op in lay.ops:
            if op.mode == "absent":
                continue
            v = d[op.name]
            if op.sub is not None and v is not None:
                v = [keep(x, op.sub) for x in v] if op.field.is_array else keep(v, op.sub)
            out[op.name] = v
        return out

    return keep(full, layouts(message).root(version))


def metadata_response(topics=1000, partitions=10):
    """A cluster's metadata: 1000 topics of 10 partitions on 6 brokers, replication 3."""
    rng = random.Random(12)
    brokers = [
        {"node_id": i, "host": f"broker-{i}.kafka.internal", "port": 9092, "rack": f"rack-{i % 3}"}
        for i in range(6)
    ]
    return _complete(
        "MetadataResponse",
        12,
        {
            "throttle_time_ms": 0,
            "brokers": brokers,
            "cluster_id": "kRaFtClUsTeR-Id_01234",
            "controller_id": 1,
            "topics": [
                {
                    "error_code": 0,
                    "name": f"orders.events.region-{t % 7}.topic-{t:05d}",
                    "topic_id": uuid.UUID(int=rng.getrandbits(128), version=4),
                    "is_internal": False,
                    "partitions": [
                        {
                            "error_code": 0,
                            "partition_index": p,
                            "leader_id": (t + p) % 6,
                            "leader_epoch": 17,
                            "replica_nodes": [(t + p + k) % 6 for k in range(3)],
                            "isr_nodes": [(t + p + k) % 6 for k in range(3)],
                            "offline_replicas": [],
                        }
                        for p in range(partitions)
                    ],
                    "topic_authorized_operations": -2147483648,
                }
                for t in range(topics)
            ],
        },
    )


def offset_commit_request(topics=100, partitions=100):
    return _complete(
        "OffsetCommitRequest",
        9,
        {
            "group_id": "payments-ledger-consumers",
            "generation_id_or_member_epoch": 42,
            "member_id": _member_ids(1, seed=3)[0],
            "group_instance_id": None,
            "topics": [
                {
                    "name": f"payments.ledger.topic-{t:03d}",
                    "partitions": [
                        {
                            "partition_index": p,
                            "committed_offset": 1_000_000 + 31 * p + t,
                            "committed_leader_epoch": 9,
                            "committed_metadata": "",
                        }
                        for p in range(partitions)
                    ],
                }
                for t in range(topics)
            ],
        },
    )


def fetch_response(partitions=100, size=16 * 1024):
    """100 partitions of one topic, each with 16 KB of record bytes (opaque here)."""
    rng = random.Random(16)
    return _complete(
        "FetchResponse",
        16,
        {
            "throttle_time_ms": 0,
            "error_code": 0,
            "session_id": 123456,
            "responses": [
                {
                    "topic_id": uuid.UUID(int=rng.getrandbits(128), version=4),
                    "partitions": [
                        {
                            "partition_index": p,
                            "error_code": 0,
                            "high_watermark": 5_000_000,
                            "last_stable_offset": 5_000_000,
                            "log_start_offset": 0,
                            "aborted_transactions": None,
                            "preferred_read_replica": -1,
                            "records": rng.randbytes(size),
                        }
                        for p in range(partitions)
                    ],
                }
            ],
        },
    )


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    title: str
    message: str  # fastkwire class name
    version: int
    build: typing.Callable[[], dict]

    @functools.cached_property
    def content(self):
        return self.build()


WORKLOADS = {
    w.name: w
    for w in [
        Workload(
            "lg_req_1",
            "LeaveGroup v5 request, 1 member",
            "LeaveGroupRequest",
            5,
            lambda: leave_group_request(1),
        ),
        Workload(
            "lg_req_100",
            "LeaveGroup v5 request, 100 members",
            "LeaveGroupRequest",
            5,
            lambda: leave_group_request(100),
        ),
        Workload(
            "lg_req_10000",
            "LeaveGroup v5 request, 10,000 members",
            "LeaveGroupRequest",
            5,
            lambda: leave_group_request(10_000),
        ),
        Workload(
            "lg_resp_100",
            "LeaveGroup v5 response, 100 members",
            "LeaveGroupResponse",
            5,
            lambda: leave_group_response(100),
        ),
        Workload(
            "sgh_small",
            "StreamsGroupHeartbeat v0 request, small example",
            "StreamsGroupHeartbeatRequest",
            0,
            heartbeat_small,
        ),
        Workload(
            "sgh_large",
            "StreamsGroupHeartbeat v0 request, 2x20x5000 tasks + 1000 offsets",
            "StreamsGroupHeartbeatRequest",
            0,
            heartbeat_large,
        ),
        Workload(
            "sgh_int32_1m",
            "StreamsGroupHeartbeat v0 request, one 1,000,000-element []int32",
            "StreamsGroupHeartbeatRequest",
            0,
            heartbeat_int32,
        ),
        Workload(
            "md_resp",
            "Metadata v12 response, 1,000 topics x 10 partitions",
            "MetadataResponse",
            12,
            metadata_response,
        ),
        Workload(
            "oc_req",
            "OffsetCommit v9 request, 100 topics x 100 partitions",
            "OffsetCommitRequest",
            9,
            offset_commit_request,
        ),
        Workload(
            "fetch_resp",
            "Fetch v16 response, 100 partitions of 16 KB records",
            "FetchResponse",
            16,
            fetch_response,
        ),
    ]
}

# The frame round trip: encode_request + decode_request of this workload.
FRAME_WORKLOAD = "lg_req_100"
CORRELATION_ID = 7
CLIENT_ID = "payments-ledger-admin"

# --------------------------------------------------------------------------------------
# Contestants
# --------------------------------------------------------------------------------------


class Skip(Exception):
    """The contestant cannot run this workload; the message says why."""


@dataclasses.dataclass
class Prepared:
    encode: typing.Callable[[], object]
    decode: typing.Callable[[], object]
    data: bytes  # what decode reads
    roundtrip: typing.Callable[[], object] | None = None  # frame round trip


def _import(name, what):
    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise Skip(f"{what} is not importable: {exc}") from None


_REFERENCE = {}


def reference_bytes(workload):
    """The Kafka bytes of a workload, written by kio; every Kafka codec must agree."""
    if workload.name not in _REFERENCE:
        _REFERENCE[workload.name] = bytes(_prepare_kio(workload, check=False).data)
    return _REFERENCE[workload.name]


def _check_same_bytes(name, workload, encoded):
    expected = reference_bytes(workload)
    if bytes(encoded) != expected:
        at = next(
            (i for i, (a, b) in enumerate(zip(bytes(encoded), expected)) if a != b),
            min(len(encoded), len(expected)),
        )
        raise AssertionError(
            f"{name} encodes {workload.name} differently from kio: {len(encoded)} vs {len(expected)} bytes, "
            f"first difference at byte {at}"
        )


# ---- fastkwire ------------------------------------------------------------------------


def _prepare_fastkwire(module_name, workload, arrays="list", records="bytes"):
    mod = _import(module_name, module_name)
    cls = getattr(mod, workload.message)
    version = workload.version
    data = reference_bytes(workload)
    if records != "bytes":
        # records="view": record fields as slices of the input, not copies.
        if workload.name != "fetch_resp":
            raise Skip(f"{workload.name} has no records field")
        msg = cls.from_dict(workload.content)
        if cls.decode(data, version, records=records) != msg:
            raise AssertionError(
                f"{module_name} records={records!r} does not decode {workload.name}"
            )
        return Prepared(
            encode=None,
            decode=functools.partial(cls.decode, data, version, records=records),
            data=data,
        )
    if arrays == "list":
        msg = cls.from_dict(workload.content)
    else:
        # Numpy input comes from a numpy decode, which is also what the encode benchmark
        # feeds in: int arrays as numpy arrays.
        try:
            msg = cls.decode(data, version, arrays=arrays)
        except Exception as exc:  # noqa: BLE001 - any failure means "not there yet"
            raise Skip(
                f"{cls.__name__}.decode(..., arrays={arrays!r}) does not work yet: {exc!r}"
            ) from None
    _check_same_bytes(module_name, workload, msg.encode(version))
    if arrays == "list":
        back = cls.decode(data, version)
        if back != msg:
            raise AssertionError(
                f"{module_name} does not decode {workload.name} back to the same message"
            )
    return Prepared(
        encode=functools.partial(msg.encode, version),
        decode=functools.partial(cls.decode, data, version, arrays=arrays)
        if arrays != "list"
        else functools.partial(cls.decode, data, version),
        data=data,
    )


def _fastkwire_frame(module_name, workload):
    # Each generated module carries encode_request/decode_request bound to its own classes.
    mod = _import(module_name, module_name)
    cls = getattr(mod, workload.message)
    msg = cls.from_dict(workload.content)
    version = workload.version
    encode_request, decode_request = mod.encode_request, mod.decode_request

    def roundtrip():
        return decode_request(encode_request(msg, version, CORRELATION_ID, CLIENT_ID))

    header, back = roundtrip()
    if back != msg or header.correlation_id != CORRELATION_ID or header.client_id != CLIENT_ID:
        raise AssertionError(f"{module_name} frame round trip changed the message or header")
    return roundtrip


# ---- kio (native Rust decoder, Python encoder) ------------------------------------------

_KIO_MODULES = {
    "LeaveGroupRequest": "kio.schema.leave_group.v5.request",
    "LeaveGroupResponse": "kio.schema.leave_group.v5.response",
    "StreamsGroupHeartbeatRequest": "kio.schema.streams_group_heartbeat.v0.request",
}


def _kio_module(workload):
    if workload.message in _KIO_MODULES:
        return _KIO_MODULES[workload.message]
    kind = "request" if workload.message.endswith("Request") else "response"
    api = re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", workload.message[: -len(kind)]).lower()
    return f"kio.schema.{api}.v{workload.version}.{kind}"


def _optional_inner(tp):
    if typing.get_origin(tp) in (typing.Union, types.UnionType):
        return next(a for a in typing.get_args(tp) if a is not type(None))
    return tp


def _build_typed(tp, value):
    """Content (dicts, lists) -> instances of the dataclasses/Structs named by type hints."""
    if value is None:
        return None
    tp = _optional_inner(tp)
    origin = typing.get_origin(tp)
    if origin in (tuple, list):
        item = typing.get_args(tp)[0]
        if not _is_record(_optional_inner(item)):
            return origin(value)
        return origin(_build_typed(item, v) for v in value)
    if _is_record(tp):
        hints = typing.get_type_hints(tp)
        kwargs = {}
        for name in _record_fields(tp):
            hint = hints[name]
            if name in value:
                kwargs[name] = _build_typed(hint, value[name])
            else:  # kio names durations without the unit: throttle_time <- throttle_time_ms
                kwargs[name] = hint.parse(datetime.timedelta(milliseconds=value[name + "_ms"]))
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    return value


def _is_record(tp):
    return isinstance(tp, type) and (
        dataclasses.is_dataclass(tp) or hasattr(tp, "__struct_fields__")
    )


def _record_fields(tp):
    if dataclasses.is_dataclass(tp):
        return [f.name for f in dataclasses.fields(tp)]
    return list(tp.__struct_fields__)


def _prepare_kio(workload, check=True):
    serial = _import("kio.serial", "kio")
    cls = getattr(_import(_kio_module(workload), "kio"), workload.message)
    msg = _build_typed(cls, workload.content)
    write = serial.entity_writer(cls)
    read = serial.entity_reader(cls)

    def encode():
        buf = io.BytesIO()
        write(buf, msg)
        return buf.getvalue()

    data = encode()
    if check:
        _check_same_bytes("kio", workload, data)
    back, size = read(data, 0)
    if back != msg or size != len(data):
        raise AssertionError(f"kio does not decode {workload.name} back to the same message")
    return Prepared(encode=encode, decode=functools.partial(read, data, 0), data=data)


def _kio_frame(workload):
    serial = _import("kio.serial", "kio")
    index = _import("kio.index", "kio")
    header_mod = _import("kio.schema.request_header.v2.header", "kio")
    cls = getattr(_import(_kio_module(workload), "kio"), workload.message)
    msg = _build_typed(cls, workload.content)
    header_cls = header_mod.RequestHeader
    write_header, write_body = serial.entity_writer(header_cls), serial.entity_writer(cls)
    read_header = serial.entity_reader(header_cls)
    # kio resolves schemas by dynamic import; cache it as any server loop would.
    request_schema = functools.cache(index.load_request_schema)
    body_readers = {}

    def roundtrip():
        buf = io.BytesIO()
        buf.write(b"\0\0\0\0")
        write_header(
            buf,
            header_cls(
                request_api_key=cls.__api_key__,
                request_api_version=cls.__version__,
                correlation_id=CORRELATION_ID,
                client_id=CLIENT_ID,
            ),
        )
        write_body(buf, msg)
        frame = buf.getbuffer()
        struct.pack_into(">i", frame, 0, len(frame) - 4)
        frame = bytes(frame)
        header, size = read_header(frame, 4)
        key = (header.request_api_key, header.request_api_version)
        reader = body_readers.get(key)
        if reader is None:
            reader = body_readers[key] = serial.entity_reader(request_schema(*key))
        body, _ = reader(frame, 4 + size)
        return header, body

    header, back = roundtrip()
    if back != msg or header.correlation_id != CORRELATION_ID:
        raise AssertionError("kio frame round trip changed the message")
    return roundtrip


# ---- kafka-python 3 (schema-driven, generated encode/decode functions) --------------------

_KAFKA_PYTHON_CLASSES = {
    "LeaveGroupRequest": "kafka.protocol.consumer.group",
    "LeaveGroupResponse": "kafka.protocol.consumer.group",
    "OffsetCommitRequest": "kafka.protocol.consumer.group",
}


def _kafka_python_class(name):
    if name in _KAFKA_PYTHON_CLASSES:
        return getattr(_import(_KAFKA_PYTHON_CLASSES[name], "kafka-python"), name)
    return _kafka_python_from_our_schema(name)


@functools.cache
def _kafka_python_from_our_schema(name):
    """kafka-python 3 ships no StreamsGroupHeartbeat schema. Give its schema machinery the
    same definition in Kafka's JSON format, translated from ours, so it runs its usual
    codec on it. Its class factory finds a schema by class name in its own resources, so
    we start from a schema it has and replace it through its json_patch hook."""
    api = _import("kafka.protocol.api_message", "kafka-python")
    ours = json.loads(
        (
            Path(__file__).resolve().parent.parent / "src/fastkwire/schemas" / f"{name}.json"
        ).read_text()
    )

    def field(f):
        out = {"name": f["name"], "type": f["type"], "versions": f["versions"]}
        if "nullable" in f:
            out["nullableVersions"] = f["nullable"]
        if "default" in f:
            out["default"] = "null" if f["default"] is None else f["default"]
        for ours_key, kafka_key in (
            ("tag", "tag"),
            ("tagged", "taggedVersions"),
            ("ignorable", "ignorable"),
        ):
            if ours_key in f:
                out[kafka_key] = f[ours_key]
        if "fields" in f:
            out["fields"] = [field(x) for x in f["fields"]]
        return out

    kafka_json = {
        "apiKey": ours["api_key"],
        "type": ours["kind"],
        "name": name,
        "validVersions": ours["versions"],
        "flexibleVersions": ours["flexible"],
        "fields": [field(f) for f in ours["fields"]],
        "commonStructs": [
            {"name": s["name"], "fields": [field(f) for f in s["fields"]]}
            for s in ours.get("structs", [])
        ],
    }
    schemas = _import("kafka.protocol.schemas.load_json", "kafka-python")
    schemas._resolve_common_structs(
        kafka_json["fields"], {s["name"]: s["fields"] for s in kafka_json["commonStructs"]}
    )

    def json_patch(metacls, stand_in):
        return kafka_json

    cls = type(api.ApiMessage)(
        "HeartbeatRequest", (api.ApiMessage,), {"json_patch": staticmethod(json_patch)}
    )
    cls.__name__ = cls.__qualname__ = name
    return cls


def _kafka_python_build(cls, value, version):
    fields = cls._struct.fields
    kwargs = {}
    for name, v in value.items():
        f = fields[name]
        if v is not None and f.is_struct_array():
            v = [_kafka_python_build(f.data_class, x, version) for x in v]
        elif v is not None and f.is_struct():
            v = _kafka_python_build(f.data_class, v, version)
        kwargs[name] = v
    return cls(version=version, **kwargs)


def _prepare_kafka_python(workload):
    if workload.message == "FetchResponse":
        # Its builder takes a struct given as a dict of defaults for a set value and
        # writes the tagged DivergingEpoch, CurrentLeader and SnapshotId of every
        # partition (41 bytes more each) where Kafka, kio and fastkwire leave them out.
        raise Skip("kafka-python writes tagged structs at their defaults (not the same bytes)")
    cls = _kafka_python_class(workload.message)
    version = workload.version
    msg = _kafka_python_build(cls, workload.content, version)
    _check_same_bytes("kafka-python", workload, msg.encode(version=version))
    data = reference_bytes(workload)
    if cls.decode(data, version=version) != msg:
        raise AssertionError(
            f"kafka-python does not decode {workload.name} back to the same message"
        )
    return Prepared(
        encode=functools.partial(msg.encode, version=version),
        decode=functools.partial(cls.decode, data, version=version),
        data=data,
    )


def _kafka_python_frame(workload):
    cls = _kafka_python_class(workload.message)
    version = workload.version
    msg = _kafka_python_build(cls, workload.content, version)
    msg.with_header(correlation_id=CORRELATION_ID, client_id=CLIENT_ID)
    classes = {cls.API_KEY: cls}

    def roundtrip():
        frame = bytes(msg.encode(header=True, framed=True))
        # A server reads api key and version from the header, then decodes the body.
        api_key, api_version = struct.unpack_from(">hh", frame, 4)
        back = classes[api_key].decode(frame, version=api_version, header=True, framed=True)
        return back.header, back

    header, back = roundtrip()
    if back != msg or header.correlation_id != CORRELATION_ID:
        raise AssertionError("kafka-python frame round trip changed the message")
    return roundtrip


# ---- msgspec (msgpack, array_like gc=False Structs): the floor --------------------------------------


@functools.cache
def _msgspec_types():
    msgspec = _import("msgspec", "msgspec")
    Struct = msgspec.Struct
    # gc=False, as fastkwire's decoded objects are untracked: the floor at its fastest.
    opts = {"array_like": True, "gc": False}

    class MemberIdentity(Struct, **opts):
        member_id: str
        group_instance_id: str | None = None
        reason: str | None = None

    class LeaveGroupRequest(Struct, **opts):
        group_id: str
        members: list[MemberIdentity]

    class MemberResponse(Struct, **opts):
        member_id: str
        group_instance_id: str | None
        error_code: int

    class LeaveGroupResponse(Struct, **opts):
        throttle_time_ms: int
        error_code: int
        members: list[MemberResponse]

    class KeyValue(Struct, **opts):
        key: str
        value: str

    class TopicInfo(Struct, **opts):
        name: str
        partitions: int
        replication_factor: int
        topic_configs: list[KeyValue]

    class CopartitionGroup(Struct, **opts):
        source_topics: list[int]
        source_topic_regex: list[int]
        repartition_source_topics: list[int]

    class Subtopology(Struct, **opts):
        subtopology_id: str
        source_topics: list[str]
        source_topic_regex: list[str]
        state_changelog_topics: list[TopicInfo]
        repartition_sink_topics: list[str]
        repartition_source_topics: list[TopicInfo]
        copartition_groups: list[CopartitionGroup]

    class Topology(Struct, **opts):
        epoch: int
        subtopologies: list[Subtopology]

    class TaskIds(Struct, **opts):
        subtopology_id: str
        partitions: list[int]

    class Endpoint(Struct, **opts):
        host: str
        port: int

    class TaskOffset(Struct, **opts):
        subtopology_id: str
        partition: int
        offset: int

    class StreamsGroupHeartbeatRequest(Struct, **opts):
        group_id: str
        member_id: str
        member_epoch: int
        endpoint_information_epoch: int
        instance_id: str | None
        rack_id: str | None
        rebalance_timeout_ms: int
        topology: Topology | None
        active_tasks: list[TaskIds] | None
        standby_tasks: list[TaskIds] | None
        warmup_tasks: list[TaskIds] | None
        process_id: str | None
        user_endpoint: Endpoint | None
        client_tags: list[KeyValue] | None
        task_offsets: list[TaskOffset] | None
        task_end_offsets: list[TaskOffset] | None
        shutdown_application: bool

    class Frame(Struct, **opts):
        request_api_key: int
        request_api_version: int
        correlation_id: int
        client_id: str | None
        body: LeaveGroupRequest

    return msgspec, {
        c.__name__: c
        for c in (LeaveGroupRequest, LeaveGroupResponse, StreamsGroupHeartbeatRequest, Frame)
    }


_MSGSPEC_SCALARS = {
    "bool": bool,
    "float64": float,
    "uuid": uuid.UUID,
    "string": str,
    "bytes": bytes,
    "records": bytes,
}


@functools.cache
def _msgspec_type(message, version):
    """array_like msgspec Structs with the fields of one message version, made from the
    same layouts fastkwire reads (for the workloads without hand-written Structs)."""
    msgspec = _import("msgspec", "msgspec")
    from fastkwire._layout import layouts

    def make(lay):
        fields = []
        for op in lay.ops:
            if op.mode == "absent":
                continue
            f = op.field
            tp = make(op.sub) if op.sub is not None else _MSGSPEC_SCALARS.get(f.element_type, int)
            if f.is_array:
                tp = list[tp]
            nullable = f.nullable.low <= f.nullable.high
            fields.append((op.name, tp | None if nullable else tp))
        return msgspec.defstruct(lay.struct.name, fields, array_like=True, gc=False)

    return make(layouts(message).root(version))


def _prepare_msgspec(workload):
    msgspec, types_ = _msgspec_types()
    cls = types_.get(workload.message) or _msgspec_type(workload.message, workload.version)
    msg = _build_typed(cls, workload.content)
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(cls)
    data = encoder.encode(msg)
    if decoder.decode(data) != msg:
        raise AssertionError(f"msgspec does not decode {workload.name} back to the same message")
    return Prepared(
        encode=functools.partial(encoder.encode, msg),
        decode=functools.partial(decoder.decode, data),
        data=data,
    )


def _msgspec_frame(workload):
    msgspec, types_ = _msgspec_types()
    body = _build_typed(types_[workload.message], workload.content)
    frame_cls = types_["Frame"]
    encoder, decoder = msgspec.msgpack.Encoder(), msgspec.msgpack.Decoder(frame_cls)

    def roundtrip():
        frame = decoder.decode(
            encoder.encode(frame_cls(13, workload.version, CORRELATION_ID, CLIENT_ID, body))
        )
        return frame, frame.body

    if roundtrip()[1] != body:
        raise AssertionError("msgspec frame round trip changed the message")
    return roundtrip


# ---- numpy baseline for the 1,000,000-element []int32 field --------------------------------


def _prepare_numpy_frombuffer(workload):
    np = _import("numpy", "numpy")
    data = reference_bytes(workload)
    (partitions,) = [t["partitions"] for t in workload.content["active_tasks"]]
    # The array is the only long run of big-endian 0, 1, 2, ...; its length prefix precedes it.
    offset = data.find(struct.pack(">3i", 0, 1, 2))
    count = len(partitions)
    decode = functools.partial(_frombuffer_astype, np, data, count, offset)
    if not (decode() == np.arange(count, dtype="i4")).all():
        raise AssertionError("numpy baseline did not find the int32 array")
    return Prepared(encode=None, decode=decode, data=data)


def _frombuffer_astype(np, data, count, offset):
    return np.frombuffer(data, ">i4", count, offset).astype("i4")


# ---- the table of contestants ---------------------------------------------------------------

CONTESTANTS = ["cython", "pure", "kafka-python", "kio", "msgspec"]
# Extra contestants for numpy arrays on the heartbeat workloads.
NUMPY_CONTESTANTS = ["cython-numpy", "pure-numpy"]
# Extra contestants for workloads with records fields: decode(..., records="view").
VIEW_CONTESTANTS = ["cython-views", "pure-views"]
BASELINES = ["numpy-frombuffer"]

_PREPARERS = {
    "cython": functools.partial(_prepare_fastkwire, "fastkwire._messages_cython"),
    "pure": functools.partial(_prepare_fastkwire, "fastkwire._messages_python"),
    "cython-numpy": functools.partial(
        _prepare_fastkwire, "fastkwire._messages_cython", arrays="numpy"
    ),
    "pure-numpy": functools.partial(
        _prepare_fastkwire, "fastkwire._messages_python", arrays="numpy"
    ),
    "cython-views": functools.partial(
        _prepare_fastkwire, "fastkwire._messages_cython", records="view"
    ),
    "pure-views": functools.partial(
        _prepare_fastkwire, "fastkwire._messages_python", records="view"
    ),
    "kafka-python": _prepare_kafka_python,
    "kio": _prepare_kio,
    "msgspec": _prepare_msgspec,
    "numpy-frombuffer": _prepare_numpy_frombuffer,
}

_FRAMERS = {
    "cython": functools.partial(_fastkwire_frame, "fastkwire._messages_cython"),
    "pure": functools.partial(_fastkwire_frame, "fastkwire._messages_python"),
    "kafka-python": _kafka_python_frame,
    "kio": _kio_frame,
    "msgspec": _msgspec_frame,
}

_CACHE = {}


def prepare(contestant, workload_name):
    """The contestant's Prepared for a workload, built once; raises Skip when it cannot run."""
    key = (contestant, workload_name)
    if key not in _CACHE:
        try:
            _CACHE[key] = _PREPARERS[contestant](WORKLOADS[workload_name])
        except Skip as exc:
            _CACHE[key] = exc
    result = _CACHE[key]
    if isinstance(result, Skip):
        raise result
    return result


def prepare_frame(contestant, workload_name=FRAME_WORKLOAD):
    key = (contestant, "frame:" + workload_name)
    if key not in _CACHE:
        try:
            _CACHE[key] = _FRAMERS[contestant](WORKLOADS[workload_name])
        except Skip as exc:
            _CACHE[key] = exc
    result = _CACHE[key]
    if isinstance(result, Skip):
        raise result
    return result


def main():
    """Check every contestant on every workload: same bytes, same content back."""
    failed = False
    for name in WORKLOADS:
        for contestant in CONTESTANTS + NUMPY_CONTESTANTS + BASELINES:
            if (
                contestant in NUMPY_CONTESTANTS + BASELINES
                and not name.startswith("sgh_large")
                and name != "sgh_int32_1m"
            ):
                continue
            if contestant in BASELINES and name != "sgh_int32_1m":
                continue
            try:
                p = prepare(contestant, name)
                print(f"ok    {name:14} {contestant:16} {len(p.data):>9} bytes")
            except Skip as exc:
                print(f"skip  {name:14} {contestant:16} {exc}")
            except Exception as exc:  # noqa: BLE001 - report them all
                failed = True
                print(f"FAIL  {name:14} {contestant:16} {exc!r}")
    for contestant in CONTESTANTS:
        try:
            prepare_frame(contestant)
            print(f"ok    frame {FRAME_WORKLOAD:8} {contestant}")
        except Skip as exc:
            print(f"skip  frame {FRAME_WORKLOAD:8} {contestant:16} {exc}")
        except Exception as exc:  # noqa: BLE001
            failed = True
            print(f"FAIL  frame {FRAME_WORKLOAD:8} {contestant:16} {exc!r}")
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The records Kafka's coordinators keep in their internal topics, as data, with their
encoding: `__consumer_offsets` holds committed offsets (OffsetCommitKey/Value), classic
groups (GroupMetadataKey/Value) and KIP-848 consumer groups (the ConsumerGroup* records, as
Kafka 4.0 writes them), `__transaction_state` each transactional id's state
(TransactionLogKey/Value).

A record's key is an int16 (the record type, which Kafka also calls the key version)
followed by the key's fields; its value an int16 version followed by that version's
fields; a null value (a tombstone) deletes the key. Versions at or above a format's first
flexible version use compact lengths (unsigned varints, length + 1) and end each struct
with tagged fields. The field lists are Kafka's facts (names, types, versions, tags).

These are Kafka's "data" types, which the codec's schemas do not hold (its message
classes are requests and responses), so this module reads and writes them itself. The
bytes come from files another party may have written: `decode_key` / `decode_value` check
every length against the bytes left and raise `RecordFormatError` naming the field and
the offset; a record type or value version this module does not know is
`UnknownRecordError` (the loader skips those, as Kafka's loader skips unknown types).
"""

import struct
import uuid
from dataclasses import dataclass

__all__ = [
    "CONSUMER_GROUP_RECORDS",
    "GROUP_METADATA",
    "OFFSET_COMMIT",
    "TRANSACTION_LOG",
    "RecordFormatError",
    "UnknownRecordError",
    "decode_key",
    "decode_value",
    "encode_key",
    "encode_value",
]


class RecordFormatError(ValueError):
    """Bytes that are not the record they claim to be; `.offset` is where, in the key or
    value, reading failed."""

    def __init__(self, text, offset):
        super().__init__(f"{text} at byte {offset}")
        self.offset = offset


class UnknownRecordError(ValueError):
    """A record type, or a value version, that this module does not know."""


@dataclass(frozen=True)
class Field:
    name: str
    type: str  # int8/16/32/64, string, bytes, uuid, []int32, []string, or [] (of `fields`)
    first: int = 0  # the first version that has it
    last: int = 32767  # the last one
    nullable_from: int = 32767  # versions from which it may be null
    default: object = None
    tag: int | None = None  # a tagged field (flexible versions only)
    fields: tuple = ()


@dataclass(frozen=True)
class Format:
    name: str
    versions: tuple  # (lowest, highest)
    flexible_from: int
    fields: tuple


@dataclass(frozen=True, eq=False)  # one object per type: compared and hashed by identity
class RecordType:
    """One kind of coordinator record: its key type(s) and key/value formats; `write` is the
    value version this broker writes."""

    name: str
    key_types: tuple
    key: Format
    value: Format
    write: int


OFFSET_COMMIT = RecordType(
    "OffsetCommit",
    (0, 1),  # 0 is the key of value versions 0 (kept by Kafka as LegacyOffsetCommitKey)
    Format(
        "OffsetCommitKey",
        (0, 1),
        32767,
        (Field("group", "string"), Field("topic", "string"), Field("partition", "int32")),
    ),
    Format(
        "OffsetCommitValue",
        (0, 4),
        4,
        (
            Field("offset", "int64"),
            Field("leader_epoch", "int32", first=3, default=-1),
            Field("metadata", "string"),
            Field("commit_timestamp", "int64"),
            Field("expire_timestamp", "int64", first=1, last=1, default=-1),
        ),
    ),
    write=3,
)

GROUP_METADATA = RecordType(
    "GroupMetadata",
    (2,),
    Format("GroupMetadataKey", (2, 2), 32767, (Field("group", "string"),)),
    Format(
        "GroupMetadataValue",
        (0, 4),
        4,
        (
            Field("protocol_type", "string"),
            Field("generation", "int32"),
            Field("protocol", "string", nullable_from=0),
            Field("leader", "string", nullable_from=0),
            Field("current_state_timestamp", "int64", first=2, default=-1),
            Field(
                "members",
                "[]",
                fields=(
                    Field("member_id", "string"),
                    Field("group_instance_id", "string", first=3, nullable_from=3),
                    Field("client_id", "string"),
                    Field("client_host", "string"),
                    Field("rebalance_timeout", "int32", first=1, default=-1),
                    Field("session_timeout", "int32"),
                    Field("subscription", "bytes"),
                    Field("assignment", "bytes"),
                ),
            ),
        ),
    ),
    write=3,
)

TRANSACTION_LOG = RecordType(
    "TransactionLog",
    (0,),
    Format("TransactionLogKey", (0, 0), 32767, (Field("transactional_id", "string"),)),
    Format(
        "TransactionLogValue",
        (0, 1),
        1,
        (
            Field("producer_id", "int64"),
            Field("previous_producer_id", "int64", first=1, default=-1, tag=0),
            Field("next_producer_id", "int64", first=1, default=-1, tag=1),
            Field("producer_epoch", "int16"),
            Field("transaction_timeout_ms", "int32"),
            Field("transaction_status", "int8"),
            Field(
                "transaction_partitions",
                "[]",
                nullable_from=0,
                fields=(Field("topic", "string"), Field("partition_ids", "[]int32")),
            ),
            Field("transaction_last_update_timestamp_ms", "int64"),
            Field("transaction_start_timestamp_ms", "int64"),
            Field("client_transaction_version", "int16", first=1, default=0, tag=2),
        ),
    ),
    write=0,
)


def _consumer_group(name, key_type, key_fields, value_fields):
    """A KIP-848 record type: a key of the group id (and more), a flexible value v0."""
    key = Format(f"{name}Key", (key_type, key_type), 32767, (Field("group", "string"), *key_fields))
    return RecordType(name, (key_type,), key, Format(f"{name}Value", (0, 0), 0, value_fields), 0)


_MEMBER_KEY = (Field("member_id", "string"),)
_TOPIC_PARTITIONS = (Field("topic_id", "uuid"), Field("partitions", "[]int32"))
# Kafka 4.0's: later versions add tagged fields (skipped here when read), and a member's
# ClassicMemberMetadata (tag 0, a classic protocol's member) is not kept by this broker.
CONSUMER_GROUP_METADATA = _consumer_group(
    "ConsumerGroupMetadata", 3, (), (Field("epoch", "int32"),)
)
CONSUMER_GROUP_PARTITION_METADATA = _consumer_group(
    "ConsumerGroupPartitionMetadata",
    4,
    (),
    (
        Field(
            "topics",
            "[]",
            fields=(
                Field("topic_id", "uuid"),
                Field("topic_name", "string"),
                Field("num_partitions", "int32"),
                Field(
                    "partition_metadata",
                    "[]",
                    fields=(Field("partition", "int32"), Field("racks", "[]string")),
                ),
            ),
        ),
    ),
)
CONSUMER_GROUP_MEMBER_METADATA = _consumer_group(
    "ConsumerGroupMemberMetadata",
    5,
    _MEMBER_KEY,
    (
        Field("instance_id", "string", nullable_from=0),
        Field("rack_id", "string", nullable_from=0),
        Field("client_id", "string"),
        Field("client_host", "string"),
        Field("subscribed_topic_names", "[]string"),
        Field("subscribed_topic_regex", "string", nullable_from=0),
        Field("rebalance_timeout_ms", "int32", default=-1),
        Field("server_assignor", "string", nullable_from=0),
    ),
)
CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA = _consumer_group(
    "ConsumerGroupTargetAssignmentMetadata", 6, (), (Field("assignment_epoch", "int32"),)
)
CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER = _consumer_group(
    "ConsumerGroupTargetAssignmentMember",
    7,
    _MEMBER_KEY,
    (Field("topic_partitions", "[]", fields=_TOPIC_PARTITIONS),),
)
CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT = _consumer_group(
    "ConsumerGroupCurrentMemberAssignment",
    8,
    _MEMBER_KEY,
    (
        Field("member_epoch", "int32"),
        Field("previous_member_epoch", "int32"),
        Field("state", "int8"),
        Field("assigned_partitions", "[]", fields=_TOPIC_PARTITIONS),
        Field("partitions_pending_revocation", "[]", fields=_TOPIC_PARTITIONS),
    ),
)
CONSUMER_GROUP_REGULAR_EXPRESSION = _consumer_group(
    "ConsumerGroupRegularExpression",
    16,
    (Field("regular_expression", "string"),),
    (Field("topics", "[]string"), Field("version", "int64"), Field("timestamp", "int64")),
)
CONSUMER_GROUP_RECORDS = (
    CONSUMER_GROUP_METADATA,
    CONSUMER_GROUP_PARTITION_METADATA,
    CONSUMER_GROUP_MEMBER_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA,
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER,
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT,
    CONSUMER_GROUP_REGULAR_EXPRESSION,
)
# ConsumerGroupCurrentMemberAssignmentValue's state: Kafka's MemberState values
MEMBER_STABLE, MEMBER_UNREVOKED_PARTITIONS, MEMBER_UNRELEASED_PARTITIONS = 0, 1, 2

# Kafka's TransactionState ids, as TransactionLogValue's transaction_status holds them
EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT = range(6)
DEAD, PREPARE_EPOCH_FENCE = 6, 7

_BY_KEY_TYPE = {
    "__consumer_offsets": {
        t: r for r in (OFFSET_COMMIT, GROUP_METADATA, *CONSUMER_GROUP_RECORDS) for t in r.key_types
    },
    "__transaction_state": {t: TRANSACTION_LOG for t in TRANSACTION_LOG.key_types},
}
_INTS = {"int8": struct.Struct(">b"), "int16": struct.Struct(">h")}
_INTS.update(int32=struct.Struct(">i"), int64=struct.Struct(">q"))
_INT16 = _INTS["int16"]
_ITEM_STRING = Field("item", "string")  # an item of a []string


# ---------------------------------------------------------------- writing


def encode_key(record_type, fields, key_type=None):
    """The key bytes of a record of `record_type` ({field name: value})."""
    key_type = record_type.key_types[-1] if key_type is None else key_type
    out = bytearray(_INT16.pack(key_type))
    _write_struct(out, record_type.key.fields, fields, key_type, False)
    return bytes(out)


def encode_value(record_type, fields, version=None):
    """The value bytes of a record of `record_type` at `version` (default: the one written)."""
    version = record_type.write if version is None else version
    out = bytearray(_INT16.pack(version))
    flexible = version >= record_type.value.flexible_from
    _write_struct(out, record_type.value.fields, fields, version, flexible)
    return bytes(out)


def _uvarint(out, n):
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _write_struct(out, fields, values, version, flexible):
    tagged = []
    for f in fields:
        if not f.first <= version <= f.last:
            continue
        value = values.get(f.name, f.default)
        if f.tag is not None:
            if flexible and value != f.default:
                body = bytearray()
                _write_value(body, f, value, version, flexible)
                tagged.append((f.tag, body))
            continue
        _write_value(out, f, value, version, flexible)
    if flexible:
        _uvarint(out, len(tagged))
        for tag, body in tagged:
            _uvarint(out, tag)
            _uvarint(out, len(body))
            out += body


def _write_length(out, n, flexible, wide):
    if flexible:
        _uvarint(out, n + 1)  # -1 (null) is 0
    else:
        out += (_INTS["int32"] if wide else _INT16).pack(n)


def _write_value(out, f, value, version, flexible):
    if f.type in _INTS:
        out += _INTS[f.type].pack(value)
    elif f.type == "uuid":
        out += value.bytes
    elif f.type in ("string", "bytes"):
        if value is None:
            _write_length(out, -1, flexible, f.type == "bytes")
            return
        raw = value.encode("utf-8") if f.type == "string" else bytes(value)
        _write_length(out, len(raw), flexible, f.type == "bytes")
        out += raw
    else:
        if value is None:
            _write_length(out, -1, flexible, True)
            return
        _write_length(out, len(value), flexible, True)
        for item in value:
            if f.type == "[]int32":
                out += _INTS["int32"].pack(item)
            elif f.type == "[]string":
                _write_value(out, _ITEM_STRING, item, version, flexible)
            else:
                _write_struct(out, f.fields, item, version, flexible)


# ---------------------------------------------------------------- reading


def record_type_of(topic, key):
    """(RecordType, key type) of a record key found in `topic`; UnknownRecordError for a key
    type this module does not know, RecordFormatError for a key too short to have one."""
    if len(key) < 2:
        raise RecordFormatError("the key ends before its type", 0)
    (key_type,) = _INT16.unpack_from(key, 0)
    record_type = _BY_KEY_TYPE[topic].get(key_type)
    if record_type is None:
        raise UnknownRecordError(f"record type {key_type} is not one {topic} holds here")
    return record_type, key_type


def decode_key(record_type, key_type, key):
    """{field: value} of key bytes (their type already read by record_type_of)."""
    r = _Reader(key, 2, record_type.key.name)
    fields = r.struct(record_type.key.fields, key_type, False, "")
    r.end()
    return fields


def decode_value(record_type, value):
    """(version, {field: value}) of value bytes."""
    r = _Reader(value, 0, record_type.value.name)
    version = r.int("int16", "the version")
    low, high = record_type.value.versions
    if not low <= version <= high:
        raise UnknownRecordError(
            f"{record_type.value.name} version {version} is not one known ({low}-{high})"
        )
    flexible = version >= record_type.value.flexible_from
    fields = r.struct(record_type.value.fields, version, flexible, "")
    r.end()
    return version, fields


class _Reader:
    def __init__(self, data, pos, name):
        self.data = bytes(data)
        self.pos = pos
        self.name = name  # the format's, for errors

    def fail(self, text):
        raise RecordFormatError(f"{self.name}: {text}", self.pos)

    def take(self, n, what):
        if n > len(self.data) - self.pos:
            self.fail(f"{what}: {n} bytes do not fit in the {len(self.data) - self.pos} left")
        raw = self.data[self.pos : self.pos + n]
        self.pos += n
        return raw

    def int(self, kind, what):
        s = _INTS[kind]
        return s.unpack(self.take(s.size, what))[0]

    def uvarint(self, what):
        n = shift = 0
        while True:
            if shift > 28:
                self.fail(f"{what}: a varint longer than 5 bytes")
            (byte,) = self.take(1, what)
            n |= (byte & 0x7F) << shift
            if byte < 0x80:
                return n
            shift += 7

    def length(self, flexible, wide, what):
        if flexible:
            return self.uvarint(what) - 1
        return self.int("int32" if wide else "int16", what)

    def struct(self, fields, version, flexible, path):
        out = {}
        by_tag = {}
        for f in fields:
            if not f.first <= version <= f.last:
                out[f.name] = f.default
            elif f.tag is not None:
                out[f.name] = f.default
                if flexible:
                    by_tag[f.tag] = f
            else:
                out[f.name] = self.value(f, version, flexible, path + f.name)
        if flexible:
            for _ in range(self.count(self.uvarint(path + "tagged fields"), 2, path + "tags")):
                tag = self.uvarint(path + "a tag")
                size = self.uvarint(path + "a tagged field's size")
                body = self.take(size, f"{path}tag {tag}")
                f = by_tag.get(tag)
                if f is not None:  # a tag this module does not know is skipped, as Kafka does
                    sub = _Reader(body, 0, f"{self.name} {path}{f.name}")
                    out[f.name] = sub.value(f, version, flexible, path + f.name)
                    sub.end()
        return out

    def count(self, n, item_size, what):
        if n > (len(self.data) - self.pos) // item_size:
            self.fail(f"{what}: {n} items do not fit in the {len(self.data) - self.pos} bytes left")
        return n

    def value(self, f, version, flexible, path):
        if f.type in _INTS:
            return self.int(f.type, path)
        if f.type == "uuid":
            return uuid.UUID(bytes=self.take(16, path))
        n = self.length(flexible, f.type != "string", path)
        if n < 0:
            if n == -1 and version >= f.nullable_from:
                return None
            self.fail(f"{path}: length {n}")
        if f.type == "string":
            raw = self.take(n, path)
            try:
                return raw.decode("utf-8")
            except UnicodeDecodeError:
                self.pos -= n
                self.fail(f"{path}: not UTF-8")
        if f.type == "bytes":
            return self.take(n, path)
        if f.type == "[]int32":
            return [self.int("int32", path) for _ in range(self.count(n, 4, path))]
        if f.type == "[]string":
            item = _ITEM_STRING
            return [
                self.value(item, version, flexible, f"{path}[{i}]")
                for i in range(self.count(n, 1, path))
            ]
        return [
            self.struct(f.fields, version, flexible, f"{path}[{i}].")
            for i in range(self.count(n, 1, path))
        ]

    def end(self):
        if self.pos != len(self.data):
            self.fail(f"{len(self.data) - self.pos} bytes past its end")

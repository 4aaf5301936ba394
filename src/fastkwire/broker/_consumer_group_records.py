"""KIP-848 consumer groups as Kafka 4.0's group coordinator keeps them in
`__consumer_offsets`: a group's epoch (ConsumerGroupMetadata), the topics it subscribes to
(ConsumerGroupPartitionMetadata), each regular expression's topics
(ConsumerGroupRegularExpression), each member's subscription (ConsumerGroupMemberMetadata),
the target assignment (ConsumerGroupTargetAssignmentMetadata/Member) and each member's
current assignment and epochs (ConsumerGroupCurrentMemberAssignment).

`ConsumerGroupWriter` turns a group's change into the records that changed, in the order
Kafka writes them (a member's records before the group's epoch; tombstones of a member's
assignments before its metadata's, of the group's epoch last), so that Kafka's loader could
replay them too. `restore_consumer_groups` builds the groups back from the last record of
each key, refusing values a group cannot hold with `CoordinatorStateError` naming the record.
"""

import collections

from ._consumer_groups import (
    STABLE,
    STATIC_LEAVE_EPOCH,
    UNRELEASED,
    UNREVOKED,
    ConsumerGroup,
    HeartbeatError,
    _Member,
    _pattern,
)
from ._assignors import ASSIGNORS
from ._coordinator_records import (
    CONSUMER_GROUP_CURRENT_MEMBER_ASSIGNMENT as CURRENT,
)
from ._coordinator_records import (
    CONSUMER_GROUP_MEMBER_METADATA as MEMBER,
)
from ._coordinator_records import (
    CONSUMER_GROUP_METADATA as EPOCH,
)
from ._coordinator_records import (
    CONSUMER_GROUP_PARTITION_METADATA as PARTITIONS,
)
from ._coordinator_records import (
    CONSUMER_GROUP_REGULAR_EXPRESSION as REGEX,
)
from ._coordinator_records import (
    CONSUMER_GROUP_TARGET_ASSIGNMENT_MEMBER as TARGET,
)
from ._coordinator_records import (
    CONSUMER_GROUP_TARGET_ASSIGNMENT_METADATA as TARGET_EPOCH,
)
from ._coordinator_records import (
    MEMBER_STABLE,
    MEMBER_UNRELEASED_PARTITIONS,
    MEMBER_UNREVOKED_PARTITIONS,
    encode_key,
    encode_value,
)

__all__ = ["ConsumerGroupWriter", "restore_consumer_groups"]

# The epochs are int32s in the answers and move on by one (as Kafka's, without wrapping):
# one read back must leave them room to, or a group's answers would not encode.
MAX_EPOCH = (1 << 31) - (1 << 24)

_STATE_VALUES = {
    STABLE: MEMBER_STABLE,
    UNREVOKED: MEMBER_UNREVOKED_PARTITIONS,
    UNRELEASED: MEMBER_UNRELEASED_PARTITIONS,
}
_STATES = {v: k for k, v in _STATE_VALUES.items()}
_MEMBER_TYPES = (MEMBER, TARGET, CURRENT)
# The order of a change's records: tombstones of members' records (assignments first), the
# records written, then tombstones of the group's own records (its epoch last).
_TOMBSTONE_FIRST = {CURRENT: 0, TARGET: 1, MEMBER: 2}
_WRITTEN = {MEMBER: 3, REGEX: 4, PARTITIONS: 5, EPOCH: 6, TARGET: 7, TARGET_EPOCH: 8, CURRENT: 9}
_TOMBSTONE_LAST = {TARGET_EPOCH: 10, REGEX: 11, PARTITIONS: 12, EPOCH: 13}


def _partitions(assignment):
    return [
        {"topic_id": tid, "partitions": sorted(ps)}
        for tid, ps in sorted(assignment.items(), key=lambda kv: str(kv[0]))
        if ps
    ]


def _member_records(group, member):
    """{(record type, key fields): value fields} of a member."""
    key = (group.group_id, member.member_id)
    return {
        (MEMBER, key): {
            "instance_id": member.instance_id,
            "rack_id": member.rack_id,
            "client_id": member.client_id,
            "client_host": member.client_host,
            "subscribed_topic_names": list(member.topic_names),
            "subscribed_topic_regex": member.regex,
            "rebalance_timeout_ms": member.rebalance_timeout_ms,
            "server_assignor": member.assignor,
        },
        (TARGET, key): {"topic_partitions": _partitions(group.target.get(member.member_id, {}))},
        (CURRENT, key): {
            "member_epoch": member.epoch,
            "previous_member_epoch": member.previous_epoch,
            "state": _STATE_VALUES[member.state],
            "assigned_partitions": _partitions(member.assigned),
            "partitions_pending_revocation": _partitions(member.revoking),
        },
    }


def _group_records(group, matching):
    """{(record type, key fields): value fields} of a whole group; `matching(regex)` gives
    the names of the group's topics a regular expression matches."""
    gid = group.group_id
    out = {
        (EPOCH, (gid,)): {"epoch": group.group_epoch},
        (PARTITIONS, (gid,)): {
            "topics": [
                {
                    "topic_id": tid,
                    "topic_name": name,
                    "num_partitions": count,
                    "partition_metadata": [],  # no racks known (Kafka: an empty list)
                }
                for name, (tid, count) in sorted(group.metadata.items())
            ]
        },
        (TARGET_EPOCH, (gid,)): {"assignment_epoch": group.assignment_epoch},
    }
    for regex in sorted({m.regex for m in group.members.values() if m.regex}):
        out[(REGEX, (gid, regex))] = {"topics": sorted(matching(regex)), "version": 0}
    for member in group.members.values():
        out.update(_member_records(group, member))
    return out


def _key_fields(record_type, key):
    names = [f.name for f in record_type.key.fields]
    return dict(zip(names, key))


class ConsumerGroupWriter:
    """The records of consumer groups' changes: what differs from what was written last
    (`written`: group id -> {(record type, key): value fields}, from the load at first)."""

    def __init__(self, consumer_groups, written=None):
        self.consumer = consumer_groups
        self.written = written or {}
        self._shape = {}  # group id -> (epochs, member ids) when all its records were written

    def changed(self, group_id, member_id=None):
        """[(record type, key bytes, value fields or None)] of `group_id`'s change (a
        tombstone for each record of a group or member gone); only `member_id`'s records
        when the group's epochs and members are as they were."""
        group = self.consumer.groups.get(group_id)
        held = self.written.get(group_id, {})
        if group is not None:
            shape = (group.group_epoch, group.assignment_epoch, tuple(group.members))
            member = group.members.get(member_id)
            if member is not None and self._shape.get(group_id) == shape:
                mine = _member_records(group, member)
                out = [(_WRITTEN[k[0]], k, v) for k, v in mine.items() if held.get(k) != v]
                held.update(mine)
                return self._encoded(out)
        now = {} if group is None else _group_records(group, self._matching(group))
        out = [(_WRITTEN[k[0]], k, v) for k, v in now.items() if held.get(k) != v]
        for k in held.keys() - now.keys():
            order = _TOMBSTONE_FIRST.get(k[0], _TOMBSTONE_LAST.get(k[0]))
            out.append((order, k, None))
        if group is None:
            self.written.pop(group_id, None)
            self._shape.pop(group_id, None)
        else:
            self.written[group_id] = now
            self._shape[group_id] = shape
        return self._encoded(out)

    @staticmethod
    def _encoded(out):
        out.sort(key=lambda item: (item[0], item[1][1]))
        return [(k[0], encode_key(k[0], _key_fields(k[0], k[1])), v) for _, k, v in out]

    def _matching(self, group):
        return lambda regex: self.consumer.regex_topics(group, regex)


def encode_record_value(record_type, fields, now_ms):
    """The value bytes of a consumer group record (None: a tombstone)."""
    if fields is None:
        return None
    if record_type is REGEX:
        fields = {**fields, "timestamp": now_ms}
    return encode_value(record_type, fields)


# ---------------------------------------------------------------- loading


def restore_consumer_groups(consumer_groups, found, error):
    """Build back the consumer groups of `found` ({(record type, key fields): (value fields,
    where)}, the last record of each key, tombstones left out) into `consumer_groups`;
    returns the writer's `written` for them. `error` is raised, naming where, for a value a
    group cannot hold."""
    by_group = collections.defaultdict(dict)
    for (record_type, key), (value, where) in found.items():
        by_group[key[0]][(record_type, key)] = (value, where)
    written = {}
    for group_id, held in by_group.items():
        group = _restore_group(group_id, held, error)
        consumer_groups.restore(group)
        written[group_id] = {k: _as_written(k[0], v) for k, (v, _) in held.items()}
    return written


def _as_written(record_type, value):
    if record_type is REGEX:  # its time is not compared: a record is written for its topics
        return {k: v for k, v in value.items() if k != "timestamp"}
    return value


def _restore_group(group_id, held, error):
    group = ConsumerGroup(group_id)
    members = {}
    for (record_type, key), (value, where) in held.items():
        if record_type is EPOCH:
            group.group_epoch = _epoch(value["epoch"], where, "ConsumerGroupMetadataValue:", error)
        elif record_type is TARGET_EPOCH:
            group.assignment_epoch = _epoch(
                value["assignment_epoch"],
                where,
                "ConsumerGroupTargetAssignmentMetadataValue: assignment",
                error,
            )
        elif record_type is PARTITIONS:
            group.metadata = {
                t["topic_name"]: (t["topic_id"], t["num_partitions"]) for t in value["topics"]
            }
        elif record_type is MEMBER:
            members[key[1]] = _restored_member(key[1], value, where, error)
    holders = {}  # (topic id, partition) -> the member holding or revoking it
    for (record_type, key), (value, where) in held.items():
        if record_type is CURRENT:
            member = members.get(key[1])
            if member is None:
                raise error(
                    f"{where}: ConsumerGroupCurrentMemberAssignment of member {key[1]!r} without "
                    "its ConsumerGroupMemberMetadata"
                )
            _restore_assignment(member, value, where, error)
            _held_once(holders, member, where, error)
        elif record_type is TARGET and key[1] in members:  # of members gone: not used
            group.target[key[1]] = _assignment(value["topic_partitions"])
    static = {}
    for member in members.values():
        if member.instance_id is not None:
            if member.instance_id in static:
                raise error(
                    f"{held[(MEMBER, (group_id, member.member_id))][1]}: "
                    f"ConsumerGroupMemberMetadataValue: instance id {member.instance_id!r} of "
                    f"members {static[member.instance_id]!r} and {member.member_id!r}"
                )
            static[member.instance_id] = member.member_id
        group.put(member)
        group.hold(member)
    return group


def _epoch(epoch, where, what, error, lowest=0):
    """An epoch a group can move on from (below MAX_EPOCH)."""
    if not lowest <= epoch < MAX_EPOCH:
        raise error(f"{where}: {what} epoch {epoch} is not one kept")
    return epoch


def _restored_member(member_id, value, where, error):
    member = _Member(member_id)
    member.instance_id = value["instance_id"]
    member.rack_id = value["rack_id"]
    member.client_id = value["client_id"]
    member.client_host = value["client_host"]
    member.topic_names = list(value["subscribed_topic_names"])
    member.rebalance_timeout_ms = value["rebalance_timeout_ms"]
    regex = value["subscribed_topic_regex"]
    if regex:
        try:
            _pattern(regex)
        except HeartbeatError as e:
            raise error(f"{where}: ConsumerGroupMemberMetadataValue: {e.message}") from None
    member.regex = regex or None
    assignor = value["server_assignor"]
    if assignor is not None and assignor not in ASSIGNORS:
        raise error(
            f"{where}: ConsumerGroupMemberMetadataValue: server assignor {assignor!r} is not "
            f"one of {', '.join(ASSIGNORS)}"
        )
    member.assignor = assignor
    return member


def _restore_assignment(member, value, where, error):
    what = "ConsumerGroupCurrentMemberAssignmentValue:"
    state = _STATES.get(value["state"])
    if state is None:
        raise error(f"{where}: {what} member state {value['state']} is not one kept")
    lowest = STATIC_LEAVE_EPOCH
    member.epoch = _epoch(value["member_epoch"], where, what + " member", error, lowest)
    member.previous_epoch = _epoch(
        value["previous_member_epoch"], where, what + " previous member", error, lowest
    )
    member.state = state
    member.assigned = _assignment(value["assigned_partitions"])
    member.revoking = _assignment(value["partitions_pending_revocation"])


def _held_once(holders, member, where, error):
    """A partition held (assigned or being revoked) by one member only, as Kafka's replay
    checks (ConsumerGroup.addPartitionEpochs): else two members would be answered it."""
    for parts in (member.assigned, member.revoking):
        for tid, ps in parts.items():
            for p in ps:
                other = holders.get((tid, p))
                holders[(tid, p)] = member.member_id
                if other is not None:  # another member's, or this one's assigned and revoked
                    raise error(
                        f"{where}: ConsumerGroupCurrentMemberAssignmentValue: partition {p} of "
                        f"topic {tid} is held by members {other!r} and {member.member_id!r}"
                    )


def _assignment(topic_partitions):
    out = {}
    for t in topic_partitions:
        out.setdefault(t["topic_id"], set()).update(t["partitions"])
    return out

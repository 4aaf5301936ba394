"""The broker's group coordinator: the classic groups (`_classic_groups`), the KIP-848
consumer groups (`_consumer_groups`) and the KIP-1071 streams groups (`_streams_groups`)
under one group id space, the offsets both commit
(`_offsets`), and the group admin APIs. Sans-IO: `handle()` takes a decoded request and
answers through `reply` (at once, or later for a parked JoinGroup or SyncGroup), and `tick()`
fires the timers on a clock that tests drive.

The behaviour follows Apache Kafka 4.x's group coordinator (its group-coordinator module and
KafkaApis) wherever a client can tell the difference.
"""

import time
from dataclasses import dataclass

from .. import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListGroupsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    StreamsGroupDescribeRequest,
    StreamsGroupDescribeResponse,
    StreamsGroupHeartbeatRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from ..error_codes import by_name
from ._classic_groups import CONSUMER_PROTOCOL, EMPTY, STABLE, ClassicGroups
from ._consumer_groups import ConsumerGroups
from ._limits import unique
from ._offsets import Committed, OffsetStore
from ._streams_groups import STREAMS_PROTOCOL, StreamsGroups
from ._timers import Timers

__all__ = ["GroupConfig", "GroupCoordinator", "VERSIONS"]


def _code(name):
    return by_name(name).code


NONE = 0
GROUP_ID_NOT_FOUND = _code("GROUP_ID_NOT_FOUND")
GROUP_SUBSCRIBED_TO_TOPIC = _code("GROUP_SUBSCRIBED_TO_TOPIC")
ILLEGAL_GENERATION = _code("ILLEGAL_GENERATION")
INCONSISTENT_GROUP_PROTOCOL = _code("INCONSISTENT_GROUP_PROTOCOL")
INVALID_GROUP_ID = _code("INVALID_GROUP_ID")
NON_EMPTY_GROUP = _code("NON_EMPTY_GROUP")
OFFSET_METADATA_TOO_LARGE = _code("OFFSET_METADATA_TOO_LARGE")
POLICY_VIOLATION = _code("POLICY_VIOLATION")
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")
UNKNOWN_TOPIC_OR_PARTITION = _code("UNKNOWN_TOPIC_OR_PARTITION")
UNSTABLE_OFFSET_COMMIT = _code("UNSTABLE_OFFSET_COMMIT")

# The versions served: what Kafka 4.x serves, within what the schemas know. OffsetCommit and
# OffsetFetch stop at 9: version 10 names topics by id, which this coordinator does not keep.
VERSIONS = {
    JoinGroupRequest.API_KEY: (0, 9),
    SyncGroupRequest.API_KEY: (0, 5),
    HeartbeatRequest.API_KEY: (0, 4),
    LeaveGroupRequest.API_KEY: (0, 5),
    OffsetCommitRequest.API_KEY: (2, 9),
    OffsetFetchRequest.API_KEY: (1, 9),
    ListGroupsRequest.API_KEY: (0, 5),
    DescribeGroupsRequest.API_KEY: (0, 6),
    DeleteGroupsRequest.API_KEY: (0, 2),
    OffsetDeleteRequest.API_KEY: (0, 0),
    ConsumerGroupHeartbeatRequest.API_KEY: (0, 1),
    ConsumerGroupDescribeRequest.API_KEY: (0, 1),
    TxnOffsetCommitRequest.API_KEY: (0, 5),
    StreamsGroupHeartbeatRequest.API_KEY: (0, 0),
    StreamsGroupDescribeRequest.API_KEY: (0, 0),
}

DEAD = "Dead"  # what a group that does not exist is described as
# DescribeGroups' authorized operations when asked for them: READ, DELETE and DESCRIBE (this
# broker has no ACLs, so a client may do all three); Kafka's "not asked" is INT32_MIN.
GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
OPERATIONS_NOT_ASKED = -(2**31)
OFFSET_COMMIT_GROUP_NOT_FOUND_MIN = 9  # before: ILLEGAL_GENERATION for a missing group
REQUIRE_STABLE_MIN = 7  # OffsetFetch v7+ may ask for no offsets of open transactions
DESCRIBE_NOT_FOUND_MIN = 6  # before: a missing group is described as Dead, without an error


@dataclass
class GroupConfig:
    """The coordinator's settings, named as Kafka's broker configs (dots as underscores) and
    with Kafka's defaults, except the initial rebalance delay (0 ms, not 3 s, for quick
    tests) and the group sizes: Kafka allows 2**31-1 members, here 1000 by default, since
    a client could otherwise add members without end (each costs the group's every
    rebalance its share of the work)."""

    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_initial_rebalance_delay_ms: int = 0
    group_max_size: int = 1000
    # How long a new member's parked JoinGroup may wait (fixed at 5 minutes in Kafka).
    group_new_member_join_timeout_ms: int = 300_000
    offsets_retention_minutes: int = 7 * 24 * 60
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    # KIP-848 consumer groups
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5000
    group_consumer_max_size: int = 1000
    # KIP-1071 streams groups
    group_streams_session_timeout_ms: int = 45_000
    group_streams_heartbeat_interval_ms: int = 5000
    group_streams_max_size: int = 1000
    # Groups of every protocol together (Kafka has no such limit): a new one past it gets
    # POLICY_VIOLATION (JoinGroup, ConsumerGroupHeartbeat, StreamsGroupHeartbeat, a simple
    # group's OffsetCommit).
    max_groups: int = 100_000


class GroupCoordinator:
    """Kafka's group coordinator, sans-IO: see the module's docstring. `topic_partitions(name)`
    gives a topic's partition count, or None when there is no such topic (not given: every
    topic exists); `topics()` gives every topic as {name: (topic id, partition count)}, for
    KIP-848 groups, whose assignments name topics by id (not given: there are none)."""

    API_KEYS = frozenset(VERSIONS)
    VERSIONS = VERSIONS

    def __init__(self, config=None, clock=time.monotonic, topic_partitions=None, topics=None):
        self.config = config if config is not None else GroupConfig()
        self.clock = clock
        # topic -> its partition count, or None for no such topic; not given: any topic exists.
        self.topic_partitions = topic_partitions
        self.timers = Timers(clock)
        self.offsets = OffsetStore()
        # Offsets of transactions not yet ended: producer id -> {(group, topic, partition): ...}
        self.pending = {}
        self.classic = ClassicGroups(self.config, clock, self.timers)
        self.groups = self.classic.groups  # classic groups by id
        self.consumer = ConsumerGroups(self.config, clock, self.timers, topics or dict)
        self.streams = StreamsGroups(self.config, clock, self.timers, topics or dict)
        self.classic.full = self.consumer.full = self.streams.full = self._full
        self._handlers = {
            JoinGroupRequest.API_KEY: self._join_group,
            SyncGroupRequest.API_KEY: self.classic.sync_group,
            HeartbeatRequest.API_KEY: self.classic.heartbeat,
            LeaveGroupRequest.API_KEY: self._leave_group,
            OffsetCommitRequest.API_KEY: self._offset_commit,
            OffsetFetchRequest.API_KEY: self._offset_fetch,
            ListGroupsRequest.API_KEY: self._list_groups,
            DescribeGroupsRequest.API_KEY: self._describe_groups,
            DeleteGroupsRequest.API_KEY: self._delete_groups,
            OffsetDeleteRequest.API_KEY: self._offset_delete,
            ConsumerGroupHeartbeatRequest.API_KEY: self._consumer_group_heartbeat,
            ConsumerGroupDescribeRequest.API_KEY: self._consumer_group_describe,
            TxnOffsetCommitRequest.API_KEY: self._txn_offset_commit,
            StreamsGroupHeartbeatRequest.API_KEY: self._streams_group_heartbeat,
            StreamsGroupDescribeRequest.API_KEY: self._streams_group_describe,
        }
        self.timers.schedule(
            "offsets-expiry", self.config.offsets_retention_check_interval_ms, self._expire_offsets
        )

    # -- the interface

    def handle(self, api_key, version, request, ctx, reply):
        """Answer `request` (decoded, of API `api_key` at `version`) through `reply`, exactly
        once: now, or later from another handle() or tick(). Timers that are due fire first,
        and those that came due meanwhile (a zero initial rebalance delay) fire after."""
        self.timers.fire()
        response = self._handlers[api_key](version, request, ctx, reply)
        if response is not None:
            reply(response)
        self.timers.fire()

    def tick(self):
        """Fire the timers that are due; returns the next deadline on the clock, or None."""
        return self.timers.fire()

    def _join_group(self, version, request, ctx, reply):
        modern = self.consumer.groups.get(request.group_id) or self._empty_streams_group_gone(
            request.group_id
        )
        if modern is not None:
            if modern.members:
                # Kafka takes classic members into a consumer group; this coordinator does not.
                return JoinGroupResponse(
                    throttle_time_ms=0,
                    error_code=INCONSISTENT_GROUP_PROTOCOL,
                    generation_id=-1,
                    protocol_type=None,
                    protocol_name=None if version >= 7 else "",
                    leader="",
                    member_id=request.member_id,
                    members=[],
                )
            self.consumer.drop(request.group_id)  # an empty one gives way (offsets stay)
        return self.classic.join_group(version, request, ctx, reply)

    def _empty_streams_group_gone(self, group_id):
        """A streams group of `group_id` if it has members (other protocols may not join it);
        an empty one gives way, as an empty consumer group does. None when there is none."""
        group = self.streams.groups.get(group_id)
        if group is not None and not group.members:
            del self.streams.groups[group_id]
            return None
        return group

    def _leave_group(self, version, request, ctx, reply):
        modern = self.consumer.groups.get(request.group_id)
        if modern is None or version < 3:
            return self.classic.leave_group(version, request, ctx, reply)
        leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        results = self.consumer.classic_leave(modern, leaving)
        return self.classic.leave_response(version, NONE, results)

    # ---------------------------------------------------------------- offsets

    def _partition_error(self, topic, partition):
        """UNKNOWN_TOPIC_OR_PARTITION for a partition the log does not have, else None."""
        if self.topic_partitions is None:
            return None
        count = self.topic_partitions(topic)
        if count is None or not 0 <= partition < count:
            return UNKNOWN_TOPIC_OR_PARTITION
        return None

    def _offset_commit(self, version, request, ctx, reply):
        results = self._commit(
            version, request, request.generation_id_or_member_epoch, None, version >= 6
        )
        return OffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=topic,
                    partitions=[
                        OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=p, error_code=e
                        )
                        for p, e in partitions
                    ],
                )
                for topic, partitions in results
            ],
        )

    def _txn_offset_commit(self, version, request, ctx, reply):
        """TxnOffsetCommit: the offsets wait, unseen, for `end_transaction`."""
        generation = request.generation_id if version >= 3 else -1
        results = self._commit(version, request, generation, request.producer_id, version >= 2)
        return TxnOffsetCommitResponse(
            throttle_time_ms=0,
            topics=[
                TxnOffsetCommitResponse.TxnOffsetCommitResponseTopic(
                    name=topic,
                    partitions=[
                        TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition(
                            partition_index=p, error_code=e
                        )
                        for p, e in partitions
                    ],
                )
                for topic, partitions in results
            ],
        )

    def end_transaction(self, producer_id, committed):
        """The transaction coordinator's word that `producer_id`'s transaction ended (EndTxn):
        its TxnOffsetCommit offsets become the groups' committed offsets, or are dropped."""
        offsets = self.pending.pop(producer_id, {})
        if committed:
            for (group_id, topic, partition), c in offsets.items():
                self.offsets.commit(group_id, topic, partition, c)

    def _pending_offset(self, group_id, topic, partition):
        key = (group_id, topic, partition)
        return any(key in offsets for offsets in self.pending.values())

    def _full(self):
        """True when no new group may be made (max_groups)."""
        held = len(self.classic.groups) + len(self.consumer.groups) + len(self.streams.groups)
        return held >= self.config.max_groups

    def _commit(self, version, request, generation, producer_id, leader_epochs):
        """An OffsetCommit's or TxnOffsetCommit's checks and writes (into the pending offsets
        of `producer_id` for a transaction): [(topic, [(partition, error code)])]."""
        transactional = producer_id is not None
        checks = {
            (t.name, p.partition_index): self._partition_error(t.name, p.partition_index)
            for t in request.topics
            for p in t.partitions
        }
        if not request.group_id:
            group_error = INVALID_GROUP_ID
        elif all(e is not None for e in checks.values()):
            group_error = None  # nothing reaches the coordinator
        else:
            group_error = self._commit_check(version, request, generation, transactional)
        now = self.clock()
        limit = self.config.offset_metadata_max_bytes
        results = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                error = checks[(t.name, p.partition_index)] or group_error
                metadata = p.committed_metadata
                if error is None and metadata is not None and len(metadata) > limit:
                    error = OFFSET_METADATA_TOO_LARGE
                if error is None:
                    epoch = p.committed_leader_epoch if leader_epochs else -1
                    committed = Committed(p.committed_offset, epoch, metadata or "", now)
                    if transactional:
                        key = (request.group_id, t.name, p.partition_index)
                        self.pending.setdefault(producer_id, {})[key] = committed
                    else:
                        self.offsets.commit(request.group_id, t.name, p.partition_index, committed)
                partitions.append((p.partition_index, error or NONE))
            results.append((t.name, partitions))
        return results

    def _commit_check(self, version, request, generation, transactional):
        """Kafka's validateOffsetCommit: an error code for the whole commit, or None."""
        streams = self.streams.groups.get(request.group_id)
        if streams is not None:
            return self.streams.commit_error(streams, request.member_id, generation)
        modern = self.consumer.groups.get(request.group_id)
        if modern is not None:
            return self.consumer.commit_error(
                modern, request.member_id, generation, version, transactional
            )
        group = self.groups.get(request.group_id)
        if group is None:
            if generation >= 0:
                if not transactional and version >= OFFSET_COMMIT_GROUP_NOT_FOUND_MIN:
                    return GROUP_ID_NOT_FOUND
                return ILLEGAL_GENERATION
            # A simple group: offsets committed outside group management.
            if self._full():
                return POLICY_VIOLATION
            self.classic.new_group(request.group_id)
            return None
        if generation < 0 and group.state == EMPTY:
            return None
        member_id, instance_id = request.member_id, request.group_instance_id
        if generation >= 0 or member_id or instance_id is not None:
            error = group.check_member(member_id, instance_id)
            if error is None and generation != group.generation:
                error = ILLEGAL_GENERATION
            return error
        # A commit without member or generation: only to an empty group, unless transactional.
        return None if group.state == EMPTY or transactional else UNKNOWN_MEMBER_ID

    def _offset_fetch(self, version, request, ctx, reply):
        stable = version >= REQUIRE_STABLE_MIN and request.require_stable
        if version >= 8:
            groups = [
                self._fetched_group(version, g, stable)
                for g in unique(request.groups, lambda g: g.group_id)
            ]
            return OffsetFetchResponse(throttle_time_ms=0, groups=groups)
        asked = (
            None
            if request.topics is None
            else [(t.name, t.partition_indexes) for t in request.topics]
        )
        topics = [
            OffsetFetchResponse.OffsetFetchResponseTopic(
                name=topic,
                partitions=[
                    OffsetFetchResponse.OffsetFetchResponsePartition(**fields)
                    for fields in partitions
                ],
            )
            for topic, partitions in self._fetched(request.group_id, asked, stable)
        ]
        return OffsetFetchResponse(throttle_time_ms=0, topics=topics, error_code=NONE)

    def _fetched_group(self, version, g, stable):
        """One group of an OffsetFetch v8+; a KIP-848 member asking (v9+) is checked first."""
        modern = self.consumer.groups.get(g.group_id)
        error = None
        if modern is not None and version >= 9:
            error = self.consumer.fetch_error(modern, g.member_id, g.member_epoch)
        if error is not None:
            return OffsetFetchResponse.OffsetFetchResponseGroup(
                group_id=g.group_id, topics=[], error_code=error
            )
        asked = None if g.topics is None else [(t.name, t.partition_indexes) for t in g.topics]
        return OffsetFetchResponse.OffsetFetchResponseGroup(
            group_id=g.group_id,
            topics=[
                OffsetFetchResponse.OffsetFetchResponseTopics(
                    name=topic,
                    partitions=[
                        OffsetFetchResponse.OffsetFetchResponsePartitions(**fields)
                        for fields in partitions
                    ],
                )
                for topic, partitions in self._fetched(g.group_id, asked, stable)
            ],
            error_code=NONE,
        )

    def _fetched(self, group_id, asked, stable=False):
        """[(topic, [partition fields])] for the partitions asked (None: every committed one);
        a partition without a committed offset answers offset -1, and when asked for stable
        offsets (v7+), one with a transaction's offset pending answers UNSTABLE_OFFSET_COMMIT."""
        if asked is None:
            committed = self.offsets.by_topic(group_id)
            asked = [(topic, list(partitions)) for topic, partitions in committed.items()]
        else:  # each topic and partition once, however often asked
            merged = {}
            for topic, partitions in asked:
                merged.setdefault(topic, {}).update(dict.fromkeys(partitions))
            asked = list(merged.items())
        out = []
        for topic, partitions in asked:
            rows = []
            for partition in partitions:
                c = self.offsets.get(group_id, topic, partition)
                unstable = stable and self._pending_offset(group_id, topic, partition)
                if unstable:
                    c = None
                rows.append(
                    {
                        "partition_index": partition,
                        "committed_offset": -1 if c is None else c.offset,
                        "committed_leader_epoch": -1 if c is None else c.leader_epoch,
                        "metadata": "" if c is None else c.metadata,
                        "error_code": UNSTABLE_OFFSET_COMMIT if unstable else NONE,
                    }
                )
            out.append((topic, rows))
        return out

    def _offset_delete(self, version, request, ctx, reply):
        def answer(error_code, topics=()):
            return OffsetDeleteResponse(
                error_code=error_code, throttle_time_ms=0, topics=list(topics)
            )

        if not request.group_id:
            return answer(INVALID_GROUP_ID)
        group = self.groups.get(request.group_id)
        modern = self.consumer.groups.get(request.group_id)
        if modern is not None:
            subscribed = modern.is_subscribed
        elif group is None:
            return answer(GROUP_ID_NOT_FOUND)
        elif group.state != EMPTY and group.protocol_type != CONSUMER_PROTOCOL:
            return answer(NON_EMPTY_GROUP)
        else:
            subscribed = group.is_subscribed if group.state != EMPTY else lambda _: False
        topics = []
        for t in request.topics:
            partitions = []
            for p in t.partitions:
                error = self._partition_error(t.name, p.partition_index)
                if error is None and subscribed(t.name):
                    error = GROUP_SUBSCRIBED_TO_TOPIC
                if error is None:
                    self.offsets.delete(request.group_id, t.name, p.partition_index)
                partitions.append(
                    OffsetDeleteResponse.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=error or NONE
                    )
                )
            topics.append(
                OffsetDeleteResponse.OffsetDeleteResponseTopic(name=t.name, partitions=partitions)
            )
        return answer(NONE, topics)

    def _expire_offsets(self):
        """Kafka's offset retention: a group's offsets go `offsets.retention.minutes` after it
        became empty (or after their commit, if later); an empty group without offsets goes."""
        now = self.clock()
        retention = self.config.offsets_retention_minutes * 60.0
        for group_id, group in list(self.groups.items()):
            if group.state == EMPTY:
                since = group.state_since
                self.offsets.expire(
                    group_id, lambda _, c: now - max(c.commit_time, since) < retention
                )
                if not self.offsets.has_offsets(group_id):
                    self.classic.forget(group)
            elif group.subscribed is not None:
                subscribed = group.subscribed
                self.offsets.expire(
                    group_id, lambda t, c: t in subscribed or now - c.commit_time < retention
                )
        for group_id, modern in list(self.consumer.groups.items()):
            if not modern.members:
                self.offsets.expire(group_id, lambda _, c: now - c.commit_time < retention)
                if not self.offsets.has_offsets(group_id):
                    self.consumer.drop(group_id)
            else:
                self.offsets.expire(
                    group_id,
                    lambda t, c: modern.is_subscribed(t) or now - c.commit_time < retention,
                )
        self.timers.schedule(
            "offsets-expiry", self.config.offsets_retention_check_interval_ms, self._expire_offsets
        )

    # ---------------------------------------------------------------- group admin

    def _list_groups(self, version, request, ctx, reply):
        states = {s.strip().lower() for s in request.states_filter} if version >= 4 else set()
        types = {t.strip().lower() for t in request.types_filter} if version >= 5 else set()
        every = [
            (g.group_id, g.protocol_type or "", g.state, "classic") for g in self.groups.values()
        ]
        every += [
            (g.group_id, CONSUMER_PROTOCOL, g.state, "consumer")
            for g in self.consumer.groups.values()
        ]
        every += [
            (g.group_id, STREAMS_PROTOCOL, g.state, "streams") for g in self.streams.groups.values()
        ]
        listed = [
            ListGroupsResponse.ListedGroup(
                group_id=group_id, protocol_type=protocol_type, group_state=state, group_type=kind
            )
            for group_id, protocol_type, state, kind in every
            if (not states or state.lower() in states) and (not types or kind in types)
        ]
        return ListGroupsResponse(throttle_time_ms=0, error_code=NONE, groups=listed)

    def _describe_groups(self, version, request, ctx, reply):
        operations = (
            GROUP_OPERATIONS if request.include_authorized_operations else OPERATIONS_NOT_ASKED
        )
        described = []
        for group_id in unique(request.groups):
            group = self.groups.get(group_id)
            if group is None:
                missing = version >= DESCRIBE_NOT_FOUND_MIN
                described.append(
                    DescribeGroupsResponse.DescribedGroup(
                        error_code=GROUP_ID_NOT_FOUND if missing else NONE,
                        error_message=f"Group {group_id} not found." if missing else None,
                        group_id=group_id,
                        group_state=DEAD,
                        protocol_type="",
                        protocol_data="",
                        members=[],
                        authorized_operations=operations,
                    )
                )
                continue
            stable = group.state == STABLE
            described.append(
                DescribeGroupsResponse.DescribedGroup(
                    error_code=NONE,
                    error_message=None,
                    group_id=group_id,
                    group_state=group.state,
                    protocol_type=group.protocol_type or "",
                    protocol_data=group.protocol_name if stable else "",
                    members=[
                        DescribeGroupsResponse.DescribedGroupMember(
                            member_id=m.member_id,
                            group_instance_id=m.instance_id,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            member_metadata=m.metadata(group.protocol_name) if stable else b"",
                            member_assignment=m.assignment,
                        )
                        for m in group.members.values()
                    ],
                    authorized_operations=operations,
                )
            )
        return DescribeGroupsResponse(throttle_time_ms=0, groups=described)

    def _delete_groups(self, version, request, ctx, reply):
        results = []
        for group_id in request.groups_names:
            group = self.groups.get(group_id)
            modern = self.consumer.groups.get(group_id)
            if not group_id:
                error = INVALID_GROUP_ID
            elif modern is not None:
                error = NON_EMPTY_GROUP if modern.members else NONE
                if not modern.members:
                    self.consumer.drop(group_id)
                    self.offsets.delete_group(group_id)
            elif group is None:
                error = GROUP_ID_NOT_FOUND
            elif group.state != EMPTY:
                error = NON_EMPTY_GROUP
            else:
                error = NONE
                self.classic.forget(group)
                self.offsets.delete_group(group_id)
            results.append(
                DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error)
            )
        return DeleteGroupsResponse(throttle_time_ms=0, results=results)

    # ---------------------------------------------------------------- KIP-848

    def _consumer_group_heartbeat(self, version, request, ctx, reply):
        if self._empty_streams_group_gone(request.group_id) is not None:
            return ConsumerGroupHeartbeatResponse(
                throttle_time_ms=0,
                error_code=GROUP_ID_NOT_FOUND,
                error_message=f"Group {request.group_id} is not a consumer group.",
                member_id=None,
                member_epoch=0,
                heartbeat_interval_ms=0,
                assignment=None,
            )
        return self.consumer.heartbeat(version, request, ctx, self.groups)

    def _consumer_group_describe(self, version, request, ctx, reply):
        operations = (
            GROUP_OPERATIONS if request.include_authorized_operations else OPERATIONS_NOT_ASKED
        )
        return ConsumerGroupDescribeResponse(
            throttle_time_ms=0,
            groups=self.consumer.describe(version, unique(request.group_ids), operations),
        )

    # ---------------------------------------------------------------- KIP-1071

    def _streams_group_heartbeat(self, version, request, ctx, reply):
        def taken(group_id):
            """Whether `group_id` is a group of another protocol; an empty one gives way
            (its offsets stay), as between the classic and the consumer protocol."""
            classic, modern = self.groups.get(group_id), self.consumer.groups.get(group_id)
            if modern is not None:
                if modern.members:
                    return True
                self.consumer.drop(group_id)
            if classic is not None:
                if classic.state != EMPTY:
                    return True
                self.classic.forget(classic)
            return False

        return self.streams.heartbeat(version, request, ctx, taken)

    def _streams_group_describe(self, version, request, ctx, reply):
        operations = (
            GROUP_OPERATIONS if request.include_authorized_operations else OPERATIONS_NOT_ASKED
        )
        return StreamsGroupDescribeResponse(
            throttle_time_ms=0, groups=self.streams.describe(request.group_ids, operations)
        )

"""KIP-848 consumer groups: ConsumerGroupHeartbeat and ConsumerGroupDescribe, with the group
epoch, a target assignment computed on the server (`_assignors`), and each member's
reconciliation towards it (partitions are revoked before they move, and a partition is
given to its next owner only once its last owner released it), as in Apache Kafka 4.x's
`GroupMetadataManager` and `CurrentAssignmentBuilder`.

Sans-IO, as the classic coordinator: `ConsumerGroups` is driven by the `GroupCoordinator`,
which owns the group ids, the timers and the offsets that both protocols share.
"""

import base64
import functools
import uuid

from .. import (
    ConsumerGroupDescribeResponse,
    ConsumerGroupHeartbeatResponse,
)
from ..error_codes import by_name
from ._assignors import ASSIGNORS, DEFAULT_ASSIGNOR

try:  # RE2, as Kafka's RE2J: matching in linear time, so no subscription can stall the broker
    import re2
except ImportError:  # the broker extra is not installed: regex subscriptions are refused
    re2 = None


def _code(name):
    return by_name(name).code


NONE = 0
FENCED_INSTANCE_ID = _code("FENCED_INSTANCE_ID")
FENCED_MEMBER_EPOCH = _code("FENCED_MEMBER_EPOCH")
GROUP_ID_NOT_FOUND = _code("GROUP_ID_NOT_FOUND")
GROUP_MAX_SIZE_REACHED = _code("GROUP_MAX_SIZE_REACHED")
INVALID_REGULAR_EXPRESSION = _code("INVALID_REGULAR_EXPRESSION")
INVALID_REQUEST = _code("INVALID_REQUEST")
POLICY_VIOLATION = _code("POLICY_VIOLATION")
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")
UNRELEASED_INSTANCE_ID = _code("UNRELEASED_INSTANCE_ID")
UNSUPPORTED_ASSIGNOR = _code("UNSUPPORTED_ASSIGNOR")
STALE_MEMBER_EPOCH = _code("STALE_MEMBER_EPOCH")
ILLEGAL_GENERATION = _code("ILLEGAL_GENERATION")
UNSUPPORTED_VERSION = _code("UNSUPPORTED_VERSION")

LEAVE_EPOCH = -1  # the member leaves the group
STATIC_LEAVE_EPOCH = -2  # a static member leaves for now, keeping its partitions
CLIENT_MEMBER_ID_MIN = 1  # ConsumerGroupHeartbeat v1+: the client makes its member id
REGEX_MIN = 1

# Member states (the reconciliation's) and group states, as Kafka names them.
STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_partitions", "unreleased_partitions"
G_EMPTY, G_ASSIGNING, G_RECONCILING, G_STABLE = "Empty", "Assigning", "Reconciling", "Stable"
CONSUMER_MEMBER_TYPE = 1  # ConsumerGroupDescribe v1's MemberType: uses the consumer protocol


# The topic names kept as regex matches (all regexes together): a client sending many
# regexes, each matching every topic, must not make the cache hold them all.
MATCHED_NAMES_KEPT = 1_000_000


@functools.lru_cache(maxsize=1024)
def _pattern(regex):
    """A subscription's regular expression, compiled (HeartbeatError when it cannot be)."""
    if re2 is None:
        raise HeartbeatError(
            INVALID_REQUEST,
            "SubscribedTopicRegex is not supported without the google-re2 package "
            "(pip install 'fastkwire[broker]').",
        )
    options = re2.Options()
    options.log_errors = False  # a bad pattern is the client's error, answered, not logged
    try:
        return re2.compile(regex, options)
    except re2.error as exc:
        reason = exc.args[0].decode("utf-8", "replace") if exc.args else ""
        raise HeartbeatError(
            INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex {regex} is invalid: {reason}"
        ) from None


class HeartbeatError(Exception):
    """A heartbeat's error answer (KIP-848's and KIP-1071's): its code and message."""

    def __init__(self, code, message):
        super().__init__(message)
        self.code, self.message = code, message


def new_member_id():
    """A member id as Kafka makes one (a random UUID in URL-safe base64, unpadded)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class _Member:
    def __init__(self, member_id):
        self.member_id = member_id
        self.instance_id = None
        self.rack_id = None
        self.client_id = ""
        self.client_host = ""
        self.rebalance_timeout_ms = -1
        self.topic_names = []
        self.regex = None
        self.assignor = None
        self.epoch = 0
        self.previous_epoch = 0
        self.state = STABLE
        self.assigned = {}  # topic id -> set of partitions
        self.revoking = {}  # topic id -> partitions pending revocation

    def copy(self, member_id):
        other = _Member(member_id)
        other.__dict__.update({k: v for k, v in self.__dict__.items() if k != "member_id"})
        other.assigned = {t: set(p) for t, p in self.assigned.items()}
        other.revoking = {}
        return other

    def reconciled_to(self, epoch):
        return self.state == STABLE and self.epoch == epoch


class ConsumerGroup:
    def __init__(self, group_id):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members = {}
        self.static = {}  # instance id -> member id
        self.target = {}  # member id -> {topic id: set of partitions}
        self.owners = {}  # (topic id, partition) -> epoch of the member holding or revoking it
        self.metadata = {}  # subscribed topic name -> (topic id, partition count)

    @property
    def state(self):
        if not self.members:
            return G_EMPTY
        if self.group_epoch > self.assignment_epoch:
            return G_ASSIGNING
        if any(not m.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return G_RECONCILING
        return G_STABLE

    def preferred_assignor(self):
        votes = {}
        for m in self.members.values():
            if m.assignor is not None:
                votes[m.assignor] = votes.get(m.assignor, 0) + 1
        return max(votes, key=votes.get) if votes else DEFAULT_ASSIGNOR

    def release(self, member):
        for parts in (member.assigned, member.revoking):
            for tid, ps in parts.items():
                for p in ps:
                    self.owners.pop((tid, p), None)

    def hold(self, member):
        for parts in (member.assigned, member.revoking):
            for tid, ps in parts.items():
                for p in ps:
                    self.owners[(tid, p)] = member.epoch

    def put(self, member):
        self.members[member.member_id] = member
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id

    def remove(self, member):
        self.release(member)
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)
        if (
            member.instance_id is not None
            and self.static.get(member.instance_id) == member.member_id
        ):
            del self.static[member.instance_id]

    def subscribed_names(self):
        return {n for m in self.members.values() for n in m.topic_names}

    def is_subscribed(self, topic):
        return topic in self.metadata


class ConsumerGroups:
    """The KIP-848 groups of a coordinator. `topics()` gives every topic of the log as
    {name: (topic id, partition count)}."""

    def __init__(self, config, clock, timers, topics):
        self.config, self.clock, self.timers, self.topics = config, clock, timers, topics
        # _matching()'s, for one topic list, dropped past MATCHED_NAMES_KEPT names in all
        self._matched_in, self._matched, self._matched_names = None, {}, 0
        self.full = lambda: False  # no new group may be made (the coordinator's max_groups)
        self.groups = {}
        # on_change(group id, member id or None): a group changed (only that member's
        # records, unless its epochs or members changed), or is gone; kept by the caller
        self.on_change = None

    def _changed(self, group_id, member_id=None):
        if self.on_change is not None:
            self.on_change(group_id, member_id)

    def drop(self, group_id):
        """Delete an empty group (its offsets are the coordinator's)."""
        if self.groups.pop(group_id, None) is not None:
            self._changed(group_id)

    def restore(self, group):
        """A group read back from its records: its members' sessions run from now, and a
        member revoking partitions has its rebalance timeout again, as Kafka's onLoaded."""
        self.groups[group.group_id] = group
        for member in group.members.values():
            self._schedule_session(group, member)
            if member.state == UNREVOKED:
                self.timers.schedule(
                    self._rebalance_key(group, member.member_id),
                    member.rebalance_timeout_ms,
                    lambda e=member.epoch, m=member.member_id: self._rebalance_expired(group, m, e),
                )

    def regex_topics(self, group, regex):
        """The names of `group`'s topics that `regex` matches (none for one that does not
        compile)."""
        try:
            return self._matching(regex, self.topics()) & group.metadata.keys()
        except HeartbeatError:
            return set()

    # ---------------------------------------------------------------- ConsumerGroupHeartbeat

    def heartbeat(self, version, request, ctx, classic_groups):
        """The answer to a ConsumerGroupHeartbeat; `classic_groups` are the classic groups by
        id (an empty one gives way to a consumer group of the same id)."""
        try:
            self._check(version, request)
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                answer = self._leave(request)
            else:
                answer = self._join_or_heartbeat(version, request, ctx, classic_groups)
            if request.group_id in self.groups:
                self._changed(request.group_id, answer.member_id)
            return answer
        except HeartbeatError as error:
            return ConsumerGroupHeartbeatResponse(
                throttle_time_ms=0,
                error_code=error.code,
                error_message=error.message,
                member_id=None,
                member_epoch=0,
                heartbeat_interval_ms=0,
                assignment=None,
            )

    def _check(self, version, r):
        def invalid(message):
            raise HeartbeatError(INVALID_REQUEST, message)

        if not r.group_id:
            invalid("GroupId can't be empty.")
        if r.instance_id == "":
            invalid("InstanceId can't be empty.")
        if r.rack_id == "":
            invalid("RackId can't be empty.")
        if version >= CLIENT_MEMBER_ID_MIN and not r.member_id:
            invalid("MemberId can't be empty.")
        if r.member_epoch > 0 or r.member_epoch == LEAVE_EPOCH:
            if not r.member_id:
                invalid("MemberId can't be empty.")
        elif r.member_epoch == 0:
            if r.rebalance_timeout_ms == -1:
                invalid("RebalanceTimeoutMs must be provided in first request.")
            if r.topic_partitions is None or r.topic_partitions:
                invalid("TopicPartitions must be empty when (re-)joining.")
            regex = r.subscribed_topic_regex if version >= REGEX_MIN else None
            if not r.subscribed_topic_names and not regex:
                invalid(
                    "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
                )
        elif r.member_epoch == STATIC_LEAVE_EPOCH:
            if not r.member_id:
                invalid("MemberId can't be empty.")
            if r.instance_id is None:
                invalid("InstanceId can't be null.")
        else:
            invalid("MemberEpoch is invalid.")
        if r.server_assignor is not None and r.server_assignor not in ASSIGNORS:
            raise HeartbeatError(
                UNSUPPORTED_ASSIGNOR,
                f"ServerAssignor {r.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(ASSIGNORS)}.",
            )
        regex = r.subscribed_topic_regex if version >= REGEX_MIN else None
        if regex:
            _pattern(regex)

    def _group(self, group_id, create, classic_groups):
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = classic_groups.get(group_id)
        if classic is not None and not (create and classic.state == "Empty"):
            raise HeartbeatError(GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        if not create:
            raise HeartbeatError(GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is None and self.full():
            raise HeartbeatError(
                POLICY_VIOLATION, "The coordinator holds its maximum of groups (max_groups)."
            )
        if classic is not None:
            del classic_groups[group_id]  # an empty classic group gives way (its offsets stay)
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _join_or_heartbeat(self, version, r, ctx, classic_groups):
        joining = r.member_epoch == 0
        group = self._group(r.group_id, joining, classic_groups)
        member_id = r.member_id or new_member_id()
        if len(group.members) >= self.config.group_consumer_max_size and (
            member_id not in group.members
        ):
            raise HeartbeatError(
                GROUP_MAX_SIZE_REACHED,
                "The consumer group has reached its maximum capacity of "
                f"{self.config.group_consumer_max_size} members.",
            )
        member, is_new = self._member(group, member_id, r)
        subscription = (member.topic_names, member.regex)
        assigned_before = {t: set(p) for t, p in member.assigned.items()}
        if r.instance_id is not None:
            member.instance_id = r.instance_id
            group.static[r.instance_id] = member.member_id
        if r.rack_id is not None:
            member.rack_id = r.rack_id
        if r.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = r.rebalance_timeout_ms
        if r.server_assignor is not None:
            member.assignor = r.server_assignor
        if r.subscribed_topic_names is not None:
            member.topic_names = list(r.subscribed_topic_names)
        regex = r.subscribed_topic_regex if version >= REGEX_MIN else None
        if regex is not None:
            member.regex = regex or None
        member.client_id = ctx.client_id
        host = ctx.client_host
        member.client_host = host if host.startswith("/") else "/" + host
        if is_new:
            group.put(member)
        bump = is_new or (member.topic_names, member.regex) != subscription
        metadata = self._subscription_metadata(group)
        if metadata != group.metadata:
            group.metadata = metadata
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        self._reconcile(group, member, r.topic_partitions)
        self._schedule_session(group, member)
        full = joining or (
            r.rebalance_timeout_ms != -1
            and r.subscribed_topic_names is not None
            and r.topic_partitions is not None
        )
        assignment = None
        if full or member.assigned != assigned_before:
            assignment = ConsumerGroupHeartbeatResponse.Assignment(
                topic_partitions=[
                    ConsumerGroupHeartbeatResponse.TopicPartitions(
                        topic_id=tid, partitions=sorted(ps)
                    )
                    for tid, ps in sorted(member.assigned.items(), key=lambda kv: str(kv[0]))
                ]
            )
        return ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0,
            error_code=NONE,
            error_message=None,
            member_id=member.member_id,
            member_epoch=member.epoch,
            heartbeat_interval_ms=self.config.group_consumer_heartbeat_interval_ms,
            assignment=assignment,
        )

    def _member(self, group, member_id, r):
        """(the member this heartbeat is from, whether it is new to the group): created,
        taken over or rejoining as in Kafka; HeartbeatError for an unknown, fenced or stale
        member. A member taken over or rejoining is already in the group."""
        joining = r.member_epoch == 0
        if r.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    raise HeartbeatError(
                        UNKNOWN_MEMBER_ID,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                return _Member(member_id), True
            if joining:
                # A known member rejoining from scratch (after an error on its side): it
                # starts again from epoch 0 and gives up what it had.
                fresh = member.copy(member_id)
                fresh.epoch = fresh.previous_epoch = 0
                fresh.state, fresh.assigned = STABLE, {}
                group.release(member)
                group.members[member_id] = fresh
                group.hold(fresh)
                return fresh, False
            self._check_epoch(member, r)
            return member, False
        existing_id = group.static.get(r.instance_id)
        existing = group.members.get(existing_id) if existing_id is not None else None
        if joining:
            if existing is None:
                current = group.members.get(member_id)
                if current is None:
                    return _Member(member_id), True
                # A known member id joining under another instance id: it moves to that one.
                if group.static.get(current.instance_id) == member_id:
                    del group.static[current.instance_id]
                return current, False
            if existing.member_id == member_id:
                return existing, False
            if existing.epoch != STATIC_LEAVE_EPOCH:
                raise HeartbeatError(
                    UNRELEASED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {r.instance_id} cannot join the "
                    f"group because the instance id is owned by {existing.member_id} member.",
                )
            # The static member is back (with a new member id): it takes its old place,
            # partitions and target, without a new group epoch. A member id another member
            # had: that member goes (its partitions and instance id free), as Kafka's
            # replacement writes the new member over it; the group's epoch moves on.
            displaced = group.members.get(member_id)
            if displaced is not None:
                group.remove(displaced)
                self.timers.cancel(self._session_key(group, member_id))
                self.timers.cancel(self._rebalance_key(group, member_id))
            member = existing.copy(member_id)
            member.epoch = member.previous_epoch = 0
            group.release(existing)
            group.members.pop(existing.member_id)
            group.target[member_id] = group.target.pop(existing.member_id, {})
            self.timers.cancel(self._session_key(group, existing.member_id))
            self.timers.cancel(self._rebalance_key(group, existing.member_id))
            group.members[member_id] = member
            group.static[r.instance_id] = member_id
            group.hold(member)
            return member, displaced is not None  # "new": the members changed, an epoch
        if existing is None:
            raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
        if existing.member_id != member_id:
            raise HeartbeatError(
                FENCED_INSTANCE_ID,
                f"Static member {member_id} with instance id {r.instance_id} was fenced by "
                f"member {existing.member_id}.",
            )
        self._check_epoch(existing, r)
        return existing, False

    @staticmethod
    def _check_epoch(member, r):
        epoch = r.member_epoch
        if epoch > member.epoch:
            raise HeartbeatError(
                FENCED_MEMBER_EPOCH,
                f"The consumer group member has a greater member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.epoch}). The member must abandon all "
                "its partitions and rejoin.",
            )
        if epoch < member.epoch and not (
            epoch == member.previous_epoch and _is_subset(r.topic_partitions, member.assigned)
        ):
            raise HeartbeatError(
                FENCED_MEMBER_EPOCH,
                f"The consumer group member has a smaller member epoch ({epoch}) than the one "
                f"known by the group coordinator ({member.epoch}). The member must abandon all "
                "its partitions and rejoin.",
            )

    def _subscription_metadata(self, group):
        topics = self.topics()
        names = group.subscribed_names()
        for regex in {m.regex for m in group.members.values() if m.regex}:
            names |= self._matching(regex, topics)
        return {n: topics[n] for n in sorted(names) if n in topics}

    def _matching(self, regex, topics):
        """The names in `topics` that `regex` matches, matched once per topic list (the
        cluster's stays the same object until a topic comes or goes): each heartbeat of
        each member matched every regex against every topic."""
        if self._matched_in is not topics or self._matched_names > MATCHED_NAMES_KEPT:
            self._matched_in, self._matched, self._matched_names = topics, {}, 0
        names = self._matched.get(regex)
        if names is None:
            pattern = _pattern(regex)
            names = self._matched[regex] = frozenset(n for n in topics if pattern.fullmatch(n))
            self._matched_names += len(names) + 1
        return names

    def _member_topics(self, group, member):
        names = set(member.topic_names)
        if member.regex:
            names |= self._matching(member.regex, self.topics()) & group.metadata.keys()
        return {group.metadata[n][0] for n in names if n in group.metadata}

    def _assign(self, group):
        topics = {tid: (name, count) for name, (tid, count) in group.metadata.items()}
        subscriptions = {m.member_id: self._member_topics(group, m) for m in group.members.values()}
        assignor = ASSIGNORS[group.preferred_assignor()]
        group.target = assignor(subscriptions, topics, group.target)
        group.assignment_epoch = group.group_epoch

    # ---------------------------------------------------------------- reconciliation

    def _reconcile(self, group, member, owned):
        """Kafka's CurrentAssignmentBuilder: move the member one step towards its target."""
        epoch = group.assignment_epoch
        if member.reconciled_to(epoch):
            return
        if member.state == STABLE:
            self._next_assignment(group, member, member.epoch, owned)
        elif member.state == UNREVOKED:
            if _owns_any(owned, member.revoking):
                return
            self._next_assignment(group, member, member.epoch + 1, owned)
        else:
            self._next_assignment(group, member, member.epoch, owned)
        if member.state == UNREVOKED:
            self.timers.schedule(
                self._rebalance_key(group, member.member_id),
                member.rebalance_timeout_ms,
                lambda e=member.epoch, m=member.member_id: self._rebalance_expired(group, m, e),
            )
        else:
            self.timers.cancel(self._rebalance_key(group, member.member_id))

    def _next_assignment(self, group, member, member_epoch, owned):
        target = group.target.get(member.member_id, {})
        assigned, revoking, pending = {}, {}, {}
        unreleased = False
        for tid in set(target) | set(member.assigned):
            want = target.get(tid, set())
            have = member.assigned.get(tid, set())
            keep = have & want
            gone = have - keep
            new = want - keep
            free = {p for p in new if (tid, p) not in group.owners}
            unreleased = unreleased or free != new
            if keep:
                assigned[tid] = keep
            if gone:
                revoking[tid] = gone
            if free:
                pending[tid] = free
        group.release(member)
        if revoking and _owns_any(owned, revoking):
            member.state = UNREVOKED
            self._set_epoch(member, member_epoch)
            member.assigned, member.revoking = assigned, revoking
        else:
            for tid, ps in pending.items():
                assigned.setdefault(tid, set()).update(ps)
            member.state = UNRELEASED if unreleased else STABLE
            self._set_epoch(member, group.assignment_epoch)
            member.assigned, member.revoking = assigned, {}
        group.hold(member)

    @staticmethod
    def _set_epoch(member, epoch):
        if epoch != member.epoch:
            member.previous_epoch, member.epoch = member.epoch, epoch

    # ---------------------------------------------------------------- leaving and timeouts

    def _leave(self, r):
        group = self.groups.get(r.group_id)
        if group is None:
            raise HeartbeatError(GROUP_ID_NOT_FOUND, f"Group {r.group_id} is not a consumer group.")
        if r.instance_id is None:
            member = group.members.get(r.member_id)
            if member is None:
                raise HeartbeatError(
                    UNKNOWN_MEMBER_ID,
                    f"Member {r.member_id} is not a member of group {group.group_id}.",
                )
        else:
            member_id = group.static.get(r.instance_id)
            member = group.members.get(member_id) if member_id is not None else None
            if member is None:
                raise HeartbeatError(UNKNOWN_MEMBER_ID, f"Instance id {r.instance_id} is unknown.")
            if member.member_id != r.member_id:
                raise HeartbeatError(
                    FENCED_INSTANCE_ID,
                    f"Static member {r.member_id} with instance id {r.instance_id} was fenced by "
                    f"member {member.member_id}.",
                )
            if r.member_epoch == STATIC_LEAVE_EPOCH:
                # It keeps its partitions, and its place, until its session ends.
                group.release(member)
                member.epoch, member.revoking = STATIC_LEAVE_EPOCH, {}
                group.hold(member)
                return self._left(r.member_id, STATIC_LEAVE_EPOCH)
        self.fence(group, member)
        return self._left(r.member_id, r.member_epoch)

    def _left(self, member_id, epoch):
        return ConsumerGroupHeartbeatResponse(
            throttle_time_ms=0,
            error_code=NONE,
            error_message=None,
            member_id=member_id,
            member_epoch=epoch,
            heartbeat_interval_ms=0,
            assignment=None,
        )

    def fence(self, group, member):
        """Remove a member (it left, or its session or rebalance timed out): its partitions
        are free and the group epoch moves on, so the next heartbeat reassigns them."""
        group.remove(member)
        group.metadata = self._subscription_metadata(group)
        group.group_epoch += 1
        self.timers.cancel(self._session_key(group, member.member_id))
        self.timers.cancel(self._rebalance_key(group, member.member_id))
        self._changed(group.group_id)

    def classic_leave(self, group, leaving):
        """A LeaveGroup (v3+) to a consumer group, as Kafka's classicGroupLeaveToConsumerGroup:
        a static member named by its group.instance.id with no member id is removed (the admin
        client's removal), and answered with its member id; naming a member id is for members
        of the classic protocol, which this coordinator does not take into consumer groups
        (UNKNOWN_MEMBER_ID), and one that is not the instance's is FENCED_INSTANCE_ID.
        `leaving`: [(member id, instance id or None)]; returns [(member id, instance id,
        error code)]."""
        results = []
        for member_id, instance_id in leaving:
            member = None
            if instance_id is not None:
                known = group.static.get(instance_id)
                member = group.members.get(known) if known is not None else None
            if member is None or (member_id and member_id != member.member_id):
                error = UNKNOWN_MEMBER_ID if member is None else FENCED_INSTANCE_ID
                results.append((member_id, instance_id, error))
                continue
            if member_id:  # its own member id: a member of the consumer protocol
                results.append((member_id, instance_id, UNKNOWN_MEMBER_ID))
                continue
            self.fence(group, member)
            results.append((member.member_id, instance_id, NONE))
        return results

    @staticmethod
    def _session_key(group, member_id):
        return ("consumer-session", group.group_id, member_id)

    @staticmethod
    def _rebalance_key(group, member_id):
        return ("consumer-rebalance", group.group_id, member_id)

    def _schedule_session(self, group, member):
        member_id = member.member_id
        self.timers.schedule(
            self._session_key(group, member_id),
            self.config.group_consumer_session_timeout_ms,
            lambda: self._expire(group, member_id),
        )

    def _expire(self, group, member_id):
        member = group.members.get(member_id)
        if self.groups.get(group.group_id) is group and member is not None:
            self.fence(group, member)

    def _rebalance_expired(self, group, member_id, epoch):
        member = group.members.get(member_id)
        if self.groups.get(group.group_id) is group and member is not None:
            if member.epoch == epoch and member.state == UNREVOKED:
                self.fence(group, member)

    # ---------------------------------------------------------------- offsets' checks

    def commit_error(self, group, member_id, member_epoch, version, transactional=False):
        """Kafka's ConsumerGroup.validateOffsetCommit: an error code, or None. A transactional
        commit (TxnOffsetCommit) is told ILLEGAL_GENERATION for a stale epoch."""
        if member_epoch < 0 and not group.members:
            return None
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if not transactional and version < 9:
            return UNSUPPORTED_VERSION
        if member_epoch == member.epoch:
            return None
        return ILLEGAL_GENERATION if transactional else STALE_MEMBER_EPOCH

    def fetch_error(self, group, member_id, member_epoch):
        if member_id is None and member_epoch < 0:
            return None
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        return None if member_epoch == member.epoch else STALE_MEMBER_EPOCH

    # ---------------------------------------------------------------- ConsumerGroupDescribe

    def describe(self, version, group_ids, operations):
        described = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                described.append(
                    ConsumerGroupDescribeResponse.DescribedGroup(
                        error_code=GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} not found.",
                        group_id=group_id,
                        group_state="",
                        group_epoch=0,
                        assignment_epoch=0,
                        assignor_name="",
                        members=[],
                        authorized_operations=operations,
                    )
                )
                continue
            names = {tid: name for name, (tid, _) in group.metadata.items()}
            described.append(
                ConsumerGroupDescribeResponse.DescribedGroup(
                    error_code=NONE,
                    error_message=None,
                    group_id=group_id,
                    group_state=group.state,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    assignor_name=group.preferred_assignor(),
                    members=[
                        ConsumerGroupDescribeResponse.Member(
                            member_id=m.member_id,
                            instance_id=m.instance_id,
                            rack_id=m.rack_id,
                            member_epoch=m.epoch,
                            client_id=m.client_id,
                            client_host=m.client_host,
                            subscribed_topic_names=list(m.topic_names),
                            subscribed_topic_regex=m.regex,
                            assignment=_described_assignment(m.assigned, names),
                            target_assignment=_described_assignment(
                                group.target.get(m.member_id, {}), names
                            ),
                            member_type=CONSUMER_MEMBER_TYPE if version >= 1 else -1,
                        )
                        for m in group.members.values()
                    ],
                    authorized_operations=operations,
                )
            )
        return described


def _described_assignment(assignment, names):
    return ConsumerGroupDescribeResponse.Assignment(
        topic_partitions=[
            ConsumerGroupDescribeResponse.TopicPartitions(
                topic_id=tid, topic_name=names.get(tid, ""), partitions=sorted(ps)
            )
            for tid, ps in sorted(assignment.items(), key=lambda kv: names.get(kv[0], ""))
        ]
    )


def _owns_any(owned, partitions):
    """Whether the member still reports any of `partitions`; a heartbeat without its owned
    partitions (null) is taken to still hold them, as in Kafka."""
    if owned is None:
        return True
    return any(p in partitions.get(t.topic_id, ()) for t in owned for p in t.partitions)


def _is_subset(owned, assigned):
    if owned is None:
        return False
    return all(set(t.partitions) <= assigned.get(t.topic_id, set()) for t in owned)

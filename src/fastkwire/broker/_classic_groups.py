"""Classic consumer groups: JoinGroup, SyncGroup, Heartbeat and LeaveGroup with Kafka's
generations, rebalances, session and rebalance timeouts and KIP-345 static members, as in
Apache Kafka 4.x's `GroupMetadataManager` and `ClassicGroup`, wherever a client can tell the
difference. Sans-IO: `ClassicGroups` is driven by the `GroupCoordinator` (`_groups.py`),
which owns the timers, the offsets and the group ids both protocols share; a JoinGroup or
SyncGroup that must wait is answered later through its `reply`.
"""

import uuid

from .. import (
    HeartbeatResponse,
    JoinGroupResponse,
    LeaveGroupResponse,
    SyncGroupResponse,
)
from ..consumer_protocol import decode_subscription
from ..error_codes import by_name


def _code(name):
    return by_name(name).code


NONE = 0
FENCED_INSTANCE_ID = _code("FENCED_INSTANCE_ID")
GROUP_MAX_SIZE_REACHED = _code("GROUP_MAX_SIZE_REACHED")
POLICY_VIOLATION = _code("POLICY_VIOLATION")
MAX_GENERATION = (1 << 31) - 1  # generation_id is an int32
MAX_STRING_BYTES = 32767  # a string with an int16 length
ILLEGAL_GENERATION = _code("ILLEGAL_GENERATION")
INCONSISTENT_GROUP_PROTOCOL = _code("INCONSISTENT_GROUP_PROTOCOL")
INVALID_GROUP_ID = _code("INVALID_GROUP_ID")
INVALID_SESSION_TIMEOUT = _code("INVALID_SESSION_TIMEOUT")
MEMBER_ID_REQUIRED = _code("MEMBER_ID_REQUIRED")
REBALANCE_IN_PROGRESS = _code("REBALANCE_IN_PROGRESS")
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")

EMPTY, PREPARING, COMPLETING, STABLE = (
    "Empty",
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
)
CONSUMER_PROTOCOL = "consumer"
JOIN_WITH_MEMBER_ID_MIN = 4  # JoinGroup v4+: an unknown dynamic member gets MEMBER_ID_REQUIRED
SKIP_ASSIGNMENT_MIN = 9
SYNC_PROTOCOL_REQUIRED_MIN = 5  # SyncGroup v5+ must name the protocol type and name
NOBODY_REJOINED_RETRY_MS = 1000


class _Member:
    """One member of a classic group; `join` and `sync` hold a parked request's
    (reply, version) until it is answered."""

    def __init__(self, member_id, instance_id, client_id, client_host, protocol_type):
        self.member_id = member_id
        self.instance_id = instance_id
        self.client_id = client_id
        self.client_host = client_host
        self.protocol_type = protocol_type
        self.protocols = []  # [(name, metadata)] in the member's order of preference
        self.rebalance_timeout_ms = 0
        self.session_timeout_ms = 0
        self.assignment = b""
        self.join = None
        self.sync = None
        self.is_new = False

    def metadata(self, protocol_name):
        return next((m for n, m in self.protocols if n == protocol_name), b"")

    def vote(self, candidates):
        return next(n for n, _ in self.protocols if n in candidates)

    def has_satisfied_heartbeat(self):
        # A new member can expire while it waits to join; one waiting for a rebalance cannot.
        return not self.is_new and (self.join is not None or self.sync is not None)


def _member_id(prefix):
    """Kafka's new member id, `<client or instance id>-<UUID>`, its prefix cut so that it
    stays a string of at most 32767 bytes (JoinGroup's before v6, the group's record)."""
    prefix = prefix.encode("utf-8")[: MAX_STRING_BYTES - 37].decode("utf-8", "ignore")
    return f"{prefix}-{uuid.uuid4()}"


class ClassicGroup:
    def __init__(self, group_id, now):
        self.group_id = group_id
        self.state = EMPTY
        self.previous_state = None
        self.state_since = now
        self.generation = 0
        self.protocol_type = None
        self.protocol_name = None
        self.leader = None
        self.members = {}  # member id -> _Member, in joining order
        self.static = {}  # group.instance.id -> member id
        self.pending_join = set()  # member ids given by MEMBER_ID_REQUIRED, not yet joined
        self.pending_sync = set()
        self.new_member_added = False
        self.subscribed = None  # topics of a "consumer" group's subscriptions; None: unknown

    def transition(self, state, now):
        self.previous_state, self.state, self.state_since = self.state, state, now

    def rebalance_timeout_ms(self):
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def all_joined(self):
        return not self.pending_join and all(m.join for m in self.members.values())

    def supports(self, protocol_type, names):
        if self.state == EMPTY:
            return bool(protocol_type) and bool(names)
        if self.protocol_type != protocol_type:
            return False
        return any(
            all(name in (n for n, _ in m.protocols) for m in self.members.values())
            for name in names
        )

    def select_protocol(self):
        members = list(self.members.values())
        candidates = {n for n, _ in members[0].protocols}
        for m in members[1:]:
            candidates &= {n for n, _ in m.protocols}
        votes = {}
        for m in members:
            name = m.vote(candidates)
            votes[name] = votes.get(name, 0) + 1
        return max(votes, key=votes.get)  # the first protocol voted for wins a tie

    def subscribed_topics(self):
        if self.protocol_type != CONSUMER_PROTOCOL:
            return None
        topics = set()
        try:
            for m in self.members.values():
                topics.update(decode_subscription(m.metadata(self.protocol_name)))
        except ValueError:
            return None  # unreadable: every topic counts as subscribed, as in Kafka
        return topics

    def is_subscribed(self, topic):
        if self.subscribed is not None:
            return topic in self.subscribed
        return self.protocol_type == CONSUMER_PROTOCOL

    def check_member(self, member_id, instance_id):
        """Kafka's validateMember: an error code, or None for a known member."""
        if instance_id is not None:
            known = self.static.get(instance_id)
            if known is None:
                return UNKNOWN_MEMBER_ID
            if known != member_id:
                return FENCED_INSTANCE_ID
        return None if member_id in self.members else UNKNOWN_MEMBER_ID

    def add(self, member):
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        self.pending_join.discard(member.member_id)

    def remove(self, member_id):
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            self.static.pop(member.instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_join.discard(member_id)
        self.pending_sync.discard(member_id)

    def joined_members(self):
        return [
            (m.member_id, m.instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]


# ---------------------------------------------------------------- responses at a version


def _join_response(
    version,
    error_code=NONE,
    member_id="",
    generation_id=-1,
    protocol_type=None,
    protocol_name=None,
    leader="",
    members=(),
    skip_assignment=False,
):
    if protocol_name is None and version < 7:
        protocol_name = ""  # nullable from v7
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=error_code,
        generation_id=generation_id,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        leader=leader,
        skip_assignment=skip_assignment and version >= SKIP_ASSIGNMENT_MIN,
        member_id=member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(
                member_id=m, group_instance_id=i, metadata=metadata
            )
            for m, i, metadata in members
        ],
    )


def _sync_response(error_code, assignment=b"", protocol_type=None, protocol_name=None):
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=error_code,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignment=assignment,
    )


class ClassicGroups:
    """The classic groups of a coordinator (`groups`: id -> ClassicGroup), with their timers
    on `timers` (a `Timers`) and `clock`."""

    def __init__(self, config, clock, timers):
        self.config, self.clock, self.timers = config, clock, timers
        self.groups = {}
        self.full = lambda: False  # no new group may be made (the coordinator's max_groups)
        # on_store(group, deleted): a group's state to keep (Kafka's GroupMetadata record),
        # after a rebalance ends (the leader's assignment, or no members) or when it is gone
        self.on_store = None

    def new_group(self, group_id):
        """An empty group (created by a JoinGroup, or by a simple group's OffsetCommit)."""
        group = self.groups[group_id] = ClassicGroup(group_id, self.clock())
        return group

    def forget(self, group):
        """Delete an empty group and its timers."""
        del self.groups[group.group_id]
        if self.on_store is not None:
            self.on_store(group, True)
        self.timers.cancel(self._join_key(group))
        self.timers.cancel(self._sync_key(group))

    def restore(self, group_id, generation, protocol_type, protocol_name, leader, members, since):
        """A group read back from its record (Kafka's GroupMetadataValue): `members` are
        (member id, instance id, client id, client host, rebalance timeout ms, session
        timeout ms, subscription, assignment), their protocol the one chosen; `since`: when
        it came to its state, on the clock. Stable if it has members, whose sessions run
        from now, as Kafka's coordinator loads it."""
        group = ClassicGroup(group_id, since)
        group.generation = generation
        for member_id, instance_id, client_id, host, rebalance, session, sub, given in members:
            member = _Member(member_id, instance_id, client_id, host, protocol_type)
            member.protocols = [(protocol_name, sub)] if protocol_name is not None else []
            member.session_timeout_ms = session
            member.rebalance_timeout_ms = rebalance if rebalance >= 0 else session
            member.assignment = given
            group.add(member)
        group.protocol_type = protocol_type or None
        group.protocol_name = protocol_name if group.members else None
        if leader in group.members:
            group.leader = leader
        group.subscribed = group.subscribed_topics()
        self.groups[group_id] = group
        if group.members:
            group.state = STABLE
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        return group

    # -- timers' keys

    @staticmethod
    def _heartbeat_key(group, member_id):
        return ("heartbeat", group.group_id, member_id)

    @staticmethod
    def _join_key(group):
        return ("join", group.group_id)

    @staticmethod
    def _sync_key(group):
        return ("sync", group.group_id)

    def _live(self, group):
        """True while `group` is still the group of its id (a timer may outlive it)."""
        return self.groups.get(group.group_id) is group

    def _transition(self, group, state):
        group.transition(state, self.clock())

    # -- parked requests

    def _answer_join(self, member, **fields):
        if member.join is not None:
            reply, version = member.join
            member.join = None
            reply(_join_response(version, **fields))

    def _answer_sync(self, member, response):
        if member.sync is not None:
            reply, _ = member.sync
            member.sync = None
            reply(response)
            return True
        return False

    def _park_join(self, member, reply, version):
        # A member that sends JoinGroup again while one waits has given up on the first.
        self._answer_join(member, error_code=REBALANCE_IN_PROGRESS, member_id=member.member_id)
        member.join = (reply, version)

    # ---------------------------------------------------------------- JoinGroup

    def join_group(self, version, request, ctx, reply):
        member_id = request.member_id
        if not request.group_id:
            return _join_response(version, INVALID_GROUP_ID, member_id)
        cfg = self.config
        if not (
            cfg.group_min_session_timeout_ms
            <= request.session_timeout_ms
            <= cfg.group_max_session_timeout_ms
        ):
            return _join_response(version, INVALID_SESSION_TIMEOUT, member_id)
        group = self.groups.get(request.group_id)
        if group is None:
            if member_id:
                return _join_response(version, UNKNOWN_MEMBER_ID, member_id)
            if self.full():
                return _join_response(version, POLICY_VIOLATION)
            group = self.new_group(request.group_id)
        if not self._accepts(group, member_id):
            group.remove(member_id)
            return _join_response(version, GROUP_MAX_SIZE_REACHED)
        names = [p.name for p in request.protocols]
        if not group.supports(request.protocol_type, names):
            return _join_response(version, INCONSISTENT_GROUP_PROTOCOL, member_id)
        if not member_id:
            return self._join_new_member(group, version, request, ctx, reply)
        return self._join_known_member(group, version, request, ctx, reply)

    def _accepts(self, group, member_id):
        limit = self.config.group_max_size
        if not member_id and len(group.members) + len(group.pending_join) >= limit:
            # Beyond Kafka: the members told MEMBER_ID_REQUIRED count too, or a client could
            # make them without end (each waits for its session timeout).
            return False
        if group.state == EMPTY:
            return True
        if group.state == PREPARING:
            member = group.members.get(member_id)
            waiting = sum(1 for m in group.members.values() if m.join)
            return (member is not None and member.join is not None) or waiting < limit
        return member_id in group.members or len(group.members) < limit

    def _join_new_member(self, group, version, request, ctx, reply):
        instance_id = request.group_instance_id
        new_id = _member_id(instance_id if instance_id is not None else ctx.client_id)
        if instance_id is not None:
            old_id = group.static.get(instance_id)
            if old_id is not None:
                return self._replace_static_member(group, version, request, old_id, new_id, reply)
            return self._add_member(group, version, request, ctx, new_id, reply)
        if version >= JOIN_WITH_MEMBER_ID_MIN:
            group.pending_join.add(new_id)
            self.timers.schedule(
                ("heartbeat", group.group_id, new_id),
                request.session_timeout_ms,
                lambda: self._expire_heartbeat(group, new_id),
            )
            return _join_response(version, MEMBER_ID_REQUIRED, new_id)
        return self._add_member(group, version, request, ctx, new_id, reply)

    def _join_known_member(self, group, version, request, ctx, reply):
        member_id = request.member_id
        if member_id in group.pending_join:
            return self._add_member(group, version, request, ctx, member_id, reply)
        error = group.check_member(member_id, request.group_instance_id)
        if error is not None:
            return _join_response(version, error, member_id)
        member = group.members[member_id]
        protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        same = protocols == member.protocols
        if group.state == PREPARING or (
            group.state in (COMPLETING, STABLE)
            and not same
            or (group.state == STABLE and member_id == group.leader)
        ):
            # Joining during a rebalance, new metadata, or the leader asking for a rebalance.
            self._update_member(member, version, request, reply)
            self._rebalance_or_complete_join(group)
            return None
        if group.state in (COMPLETING, STABLE):
            # The same metadata again (a lost JoinGroup answer): this generation's answer,
            # with the members for the leader while it has yet to assign.
            is_leader = member_id == group.leader
            return _join_response(
                version,
                member_id=member_id,
                generation_id=group.generation,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader,
                members=group.joined_members() if is_leader else (),
            )
        return _join_response(version, UNKNOWN_MEMBER_ID, member_id)

    def _update_member(self, member, version, request, reply):
        member.protocols = [(p.name, bytes(p.metadata)) for p in request.protocols]
        member.session_timeout_ms = request.session_timeout_ms
        member.rebalance_timeout_ms = (
            request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
        )
        self._park_join(member, reply, version)

    def _add_member(self, group, version, request, ctx, member_id, reply):
        host = ctx.client_host
        member = _Member(
            member_id,
            request.group_instance_id,
            ctx.client_id,
            host if host.startswith("/") else "/" + host,  # as Kafka prints an InetAddress
            request.protocol_type,
        )
        member.is_new = True
        if group.state == PREPARING and group.previous_state == EMPTY:
            group.new_member_added = True  # the initial rebalance waits a little longer
        group.add(member)
        self._update_member(member, version, request, reply)
        # A new member cannot heartbeat until it has its answer: its parked join expires instead.
        self._schedule_heartbeat(group, member, self.config.group_new_member_join_timeout_ms)
        self._rebalance_or_complete_join(group)
        return None

    def _replace_static_member(self, group, version, request, old_id, new_id, reply):
        """KIP-345: a static member rejoins with an unknown member id; its instance id now
        names the new member id, and the old one is fenced."""
        current_leader = group.leader
        old = group.members.pop(old_id)
        fenced = {"error_code": FENCED_INSTANCE_ID, "member_id": old_id}
        self._answer_join(old, **fenced)
        self._answer_sync(old, _sync_response(FENCED_INSTANCE_ID))
        self.timers.cancel(self._heartbeat_key(group, old_id))
        member = _Member(new_id, old.instance_id, old.client_id, old.client_host, old.protocol_type)
        member.protocols, member.assignment = old.protocols, old.assignment
        member.rebalance_timeout_ms = old.rebalance_timeout_ms
        member.session_timeout_ms = old.session_timeout_ms
        group.members[new_id] = member
        group.static[old.instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        self._update_member(member, version, request, reply)
        self._schedule_heartbeat(group, member)
        if group.state == STABLE:
            if group.protocol_name == group.select_protocol():
                # No rebalance: the member gets this generation back. From v9 a rejoining
                # leader gets the members and skips the assignment; before, it is told the
                # old leader id, so that it acts as a follower and syncs.
                is_leader = new_id == group.leader
                skipping = version >= SKIP_ASSIGNMENT_MIN
                self._answer_join(
                    member,
                    member_id=new_id,
                    generation_id=group.generation,
                    protocol_type=group.protocol_type,
                    protocol_name=group.protocol_name,
                    leader=group.leader if skipping else current_leader,
                    members=group.joined_members() if skipping and is_leader else (),
                    skip_assignment=skipping and is_leader,
                )
            else:
                self._rebalance_or_complete_join(group)
        elif group.state == COMPLETING:
            # The leader may be assigning to the old member id: rebalance.
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)
        return None

    # ---------------------------------------------------------------- rebalancing

    def _rebalance_or_complete_join(self, group):
        if group.state in (EMPTY, STABLE, COMPLETING):
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join(group)

    def _maybe_complete_join(self, group):
        if group.state == PREPARING and group.previous_state != EMPTY and group.all_joined():
            self._complete_join(group)

    def _prepare_rebalance(self, group):
        if group.state == COMPLETING:
            for member in group.members.values():
                member.assignment = b""
            self._propagate_assignment(group, REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self.timers.cancel(self._sync_key(group))
        initial = group.state == EMPTY
        if initial:
            delay = self.config.group_initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            self.timers.schedule(
                self._join_key(group),
                delay,
                lambda: self._initial_rebalance_due(group, delay, remaining),
            )
        self._transition(group, PREPARING)
        if not initial:
            if group.all_joined():
                self._complete_join(group)
            else:
                self._schedule_join_deadline(group)

    def _schedule_join_deadline(self, group, at_least_ms=0):
        self.timers.schedule(
            self._join_key(group),
            max(group.rebalance_timeout_ms(), at_least_ms),
            lambda: self._live(group) and self._complete_join(group),
        )

    def _initial_rebalance_due(self, group, delay, remaining):
        if not self._live(group):
            return
        if group.new_member_added and remaining:
            group.new_member_added = False
            next_delay = min(self.config.group_initial_rebalance_delay_ms, remaining)
            next_remaining = max(remaining - delay, 0)
            self.timers.schedule(
                self._join_key(group),
                next_delay,
                lambda: self._initial_rebalance_due(group, next_delay, next_remaining),
            )
        else:
            self._complete_join(group)

    def _complete_join(self, group):
        self.timers.cancel(self._join_key(group))
        for member in [m for m in group.members.values() if m.join is None]:
            if member.instance_id is None:  # static members keep their place
                group.remove(member.member_id)
                self.timers.cancel(self._heartbeat_key(group, member.member_id))
        if not self._elect_joined_leader(group) and group.members:
            # Nobody rejoined: wait again, until session timeouts empty the group (at least a
            # second apart, so that a zero rebalance timeout cannot keep the timers spinning).
            self._schedule_join_deadline(group, at_least_ms=NOBODY_REJOINED_RETRY_MS)
            return
        # an int32 in the answers: after its top (a group read back there), 1 again
        group.generation = group.generation + 1 if group.generation < MAX_GENERATION else 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed = group.subscribed_topics()
            self._transition(group, COMPLETING)
        else:
            group.protocol_name = None
            group.subscribed = group.subscribed_topics()
            self._transition(group, EMPTY)
        group.pending_sync.clear()
        if group.state == EMPTY:
            if self.on_store is not None:
                self.on_store(group, False)
            return
        for member in list(group.members.values()):
            is_leader = member.member_id == group.leader
            self._answer_join(
                member,
                member_id=member.member_id,
                generation_id=group.generation,
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                leader=group.leader,
                members=group.joined_members() if is_leader else (),
            )
            self._schedule_heartbeat(group, member)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation
        self.timers.schedule(
            self._sync_key(group),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(group, generation),
        )

    def _elect_joined_leader(self, group):
        if group.leader is None:
            return False
        if group.members[group.leader].join is not None:
            return True
        joined = next((m for m in group.members.values() if m.join is not None), None)
        if joined is None:
            return False
        group.leader = joined.member_id
        return True

    def _expire_pending_sync(self, group, generation):
        if not self._live(group) or generation != group.generation:
            return
        if group.state in (COMPLETING, STABLE) and group.pending_sync:
            for member_id in list(group.pending_sync):
                group.remove(member_id)
                self.timers.cancel(self._heartbeat_key(group, member_id))
            self._prepare_rebalance(group)

    def _propagate_assignment(self, group, error_code):
        ok = error_code == NONE
        for member in group.members.values():
            response = _sync_response(
                error_code,
                member.assignment,
                group.protocol_type if ok else None,
                group.protocol_name if ok else None,
            )
            if self._answer_sync(member, response):
                self._schedule_heartbeat(group, member)

    # ---------------------------------------------------------------- heartbeats

    def _schedule_heartbeat(self, group, member, timeout_ms=None):
        member_id = member.member_id
        self.timers.schedule(
            self._heartbeat_key(group, member_id),
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            lambda: self._expire_heartbeat(group, member_id),
        )

    def _expire_heartbeat(self, group, member_id):
        if not self._live(group):
            return
        if member_id in group.pending_join:
            group.pending_join.discard(member_id)
            if group.state == PREPARING and group.all_joined():
                self._complete_join(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_member(group, member)

    def _remove_member(self, group, member):
        self._answer_join(member, error_code=UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)
        if group.state in (STABLE, COMPLETING):
            self._rebalance_or_complete_join(group)
        elif group.state == PREPARING and group.all_joined():
            self._complete_join(group)

    # ---------------------------------------------------------------- SyncGroup, Heartbeat

    def sync_group(self, version, request, ctx, reply):
        if version >= SYNC_PROTOCOL_REQUIRED_MIN and (
            request.protocol_type is None or request.protocol_name is None
        ):
            return _sync_response(INCONSISTENT_GROUP_PROTOCOL)
        if not request.group_id:
            return _sync_response(INVALID_GROUP_ID)
        group = self.groups.get(request.group_id)
        if group is None:
            return _sync_response(UNKNOWN_MEMBER_ID)
        error = group.check_member(request.member_id, request.group_instance_id)
        if error is None and request.generation_id != group.generation:
            error = ILLEGAL_GENERATION
        if error is None and (
            (request.protocol_type is not None and request.protocol_type != group.protocol_type)
            or (request.protocol_name is not None and request.protocol_name != group.protocol_name)
        ):
            error = INCONSISTENT_GROUP_PROTOCOL
        if error is not None:
            return _sync_response(error)
        if group.state == PREPARING:
            return _sync_response(REBALANCE_IN_PROGRESS)
        member = group.members[request.member_id]
        self._synced(group, member.member_id)
        if group.state == COMPLETING:
            member.sync = (reply, version)
            if member.member_id == group.leader:
                given = {a.member_id: bytes(a.assignment) for a in request.assignments}
                for m in group.members.values():
                    m.assignment = given.get(m.member_id, b"")
                self._propagate_assignment(group, NONE)
                self._transition(group, STABLE)
                if self.on_store is not None:
                    self.on_store(group, False)
            return None
        return _sync_response(NONE, member.assignment, group.protocol_type, group.protocol_name)

    def _synced(self, group, member_id):
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self.timers.cancel(self._sync_key(group))

    def heartbeat(self, version, request, ctx, reply):
        if not request.group_id:
            return HeartbeatResponse(throttle_time_ms=0, error_code=INVALID_GROUP_ID)
        group = self.groups.get(request.group_id)
        if group is None:
            return HeartbeatResponse(throttle_time_ms=0, error_code=UNKNOWN_MEMBER_ID)
        error = group.check_member(request.member_id, request.group_instance_id)
        if error is None and request.generation_id != group.generation:
            error = ILLEGAL_GENERATION
        if error is None and group.state == EMPTY:
            error = UNKNOWN_MEMBER_ID
        if error is None:
            self._schedule_heartbeat(group, group.members[request.member_id])
            if group.state == PREPARING:
                error = REBALANCE_IN_PROGRESS
        return HeartbeatResponse(throttle_time_ms=0, error_code=error or NONE)

    # ---------------------------------------------------------------- LeaveGroup

    def leave_group(self, version, request, ctx, reply):
        if version < 3:
            leaving = [(request.member_id, None)]
        else:
            leaving = [(m.member_id, m.group_instance_id) for m in request.members]
        if not request.group_id:
            return self.leave_response(version, INVALID_GROUP_ID, [])
        group = self.groups.get(request.group_id)
        if group is None:
            results = [(m, i, UNKNOWN_MEMBER_ID) for m, i in leaving]
            return self.leave_response(version, NONE, results)
        results = []
        removed = False
        for member_id, instance_id in leaving:
            if not member_id:
                # Removal by group.instance.id (KIP-345), as the admin client sends it.
                known = group.static.get(instance_id) if instance_id is not None else None
                if known is None:
                    results.append((member_id, instance_id, UNKNOWN_MEMBER_ID))
                    continue
                self._leave(group, group.members[known])
            elif member_id in group.pending_join:
                group.pending_join.discard(member_id)
                self.timers.cancel(self._heartbeat_key(group, member_id))
            else:
                error = group.check_member(member_id, instance_id)
                if error is not None:
                    results.append((member_id, instance_id, error))
                    continue
                self._leave(group, group.members[member_id])
            results.append((member_id, instance_id, NONE))
            removed = True
        if removed:
            if group.state in (STABLE, COMPLETING):
                self._rebalance_or_complete_join(group)
            elif group.state == PREPARING:
                self._maybe_complete_join(group)
        return self.leave_response(version, NONE, results)

    def _leave(self, group, member):
        self.timers.cancel(self._heartbeat_key(group, member.member_id))
        self._answer_join(member, error_code=UNKNOWN_MEMBER_ID)
        group.remove(member.member_id)

    @staticmethod
    def leave_response(version, error_code, results):
        if version < 3:
            # One member: its error is the answer's.
            first = next((e for _, _, e in results if e != NONE), NONE)
            return LeaveGroupResponse(throttle_time_ms=0, error_code=error_code or first)
        return LeaveGroupResponse(
            throttle_time_ms=0,
            error_code=error_code,
            members=[
                LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
                for m, i, e in results
            ],
        )

"""KIP-1071 streams groups: StreamsGroupHeartbeat and StreamsGroupDescribe, as Apache Kafka
4.x's group coordinator serves them (`GroupMetadataManager.streamsGroupHeartbeat`), for the
parts a client can tell: the topology the first member brings, the tasks it makes (one per
partition of each subtopology's source topics), the group epoch, a sticky assignment of the
active tasks computed on the server, and each member's reconciliation towards it (a task is
revoked before it moves, and given to its next owner only once released).

Not served: standby and warm-up tasks (num.standby.replicas is 0, Kafka's default), the
creation of internal topics (repartition and changelog topics must exist: until they do the
group is NotReady and says MISSING_INTERNAL_TOPICS), regular expressions for source topics,
and static membership across a leave (epoch -2 leaves as -1 does).

Sans-IO, as the other protocols: `StreamsGroups` is driven by the `GroupCoordinator`, which
owns the group ids, the timers and the offsets.
"""

from .. import StreamsGroupDescribeResponse, StreamsGroupHeartbeatResponse
from ..error_codes import by_name
from ._cluster import ClusterError, check_topic_name
from ._consumer_groups import HeartbeatError


def _code(name):
    return by_name(name).code


NONE = 0
FENCED_MEMBER_EPOCH = _code("FENCED_MEMBER_EPOCH")
GROUP_ID_NOT_FOUND = _code("GROUP_ID_NOT_FOUND")
GROUP_MAX_SIZE_REACHED = _code("GROUP_MAX_SIZE_REACHED")
INVALID_REQUEST = _code("INVALID_REQUEST")
POLICY_VIOLATION = _code("POLICY_VIOLATION")
STALE_MEMBER_EPOCH = _code("STALE_MEMBER_EPOCH")
UNKNOWN_MEMBER_ID = _code("UNKNOWN_MEMBER_ID")
UNRELEASED_INSTANCE_ID = _code("UNRELEASED_INSTANCE_ID")
STREAMS_INVALID_TOPOLOGY = _code("STREAMS_INVALID_TOPOLOGY")

STREAMS_PROTOCOL = "streams"  # ListGroups' protocol type of a streams group
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Status codes of StreamsGroupHeartbeatResponse.Status (KIP-1071).
STALE_TOPOLOGY, MISSING_SOURCE_TOPICS, INCORRECTLY_PARTITIONED_TOPICS = 0, 1, 2
MISSING_INTERNAL_TOPICS, SHUTDOWN_APPLICATION = 3, 4

# Member states (the reconciliation's) and group states, as Kafka names them.
STABLE, UNREVOKED, UNRELEASED = "stable", "unrevoked_tasks", "unreleased_tasks"
G_EMPTY, G_NOT_READY, G_ASSIGNING = "Empty", "NotReady", "Assigning"
G_RECONCILING, G_STABLE = "Reconciling", "Stable"

# Fixed by Kafka's coordinator (its tests answer these): how far behind a warm-up task may be
# and how often a member reports its task offsets.
ACCEPTABLE_RECOVERY_LAG = 10_000
TASK_OFFSET_INTERVAL_MS = 60_000


class _Member:
    def __init__(self, member_id):
        self.member_id = member_id
        self.instance_id = None
        self.rack_id = None
        self.client_id = ""
        self.client_host = ""
        self.process_id = ""
        self.user_endpoint = None  # (host, port) or None
        self.client_tags = {}
        self.rebalance_timeout_ms = -1
        self.topology_epoch = 0
        self.epoch = 0
        self.previous_epoch = 0
        self.state = STABLE
        self.assigned = {}  # subtopology id -> set of partitions (active tasks)
        self.revoking = {}  # subtopology id -> partitions it must give up
        self.sent = None  # the assignment last sent to it


def _tasks(by_subtopology):
    return {(s, p) for s, ps in by_subtopology.items() for p in ps}


def _grouped(tasks):
    out = {}
    for s, p in tasks:
        out.setdefault(s, set()).add(p)
    return out


class StreamsGroup:
    def __init__(self, group_id):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members = {}
        self.topology = None  # the request's Topology, as the member with the newest sent it
        self.tasks = {}  # subtopology id -> task (partition) count, once the topology is ready
        self.statuses = []  # (status code, detail) while not ready
        self.target = {}  # member id -> set of (subtopology id, partition)
        self.owners = {}  # (subtopology id, partition) -> member id holding or revoking it

    @property
    def state(self):
        if not self.members:
            return G_EMPTY
        if self.topology is None or self.statuses:
            return G_NOT_READY
        if self.group_epoch > self.assignment_epoch:
            return G_ASSIGNING
        if any(
            m.state != STABLE or m.epoch != self.assignment_epoch for m in self.members.values()
        ):
            return G_RECONCILING
        return G_STABLE

    def release(self, member, tasks):
        for task in tasks:
            if self.owners.get(task) == member.member_id:
                del self.owners[task]

    def remove(self, member):
        self.release(member, _tasks(member.assigned) | _tasks(member.revoking))
        self.members.pop(member.member_id, None)
        self.target.pop(member.member_id, None)


def sticky_assignment(tasks, members, current):
    """Active tasks over `members` (ids, in order): each keeps what it has up to its quota
    (every member floor(n/m) tasks, and n % m of them one more: those that hold the most
    now, so that as few tasks as can move), the rest go to the members furthest below their
    quota. `current`: member id -> set of tasks it is assigned now."""
    tasks = sorted(tasks)
    if not members:
        return {}
    base, extra = divmod(len(tasks), len(members))
    held = {m: len(current.get(m, set()) & set(tasks)) for m in members}
    larger = sorted(members, key=lambda m: (-held[m], members.index(m)))[:extra]
    quota = {m: base + (m in larger) for m in members}
    out = {m: set() for m in members}
    free = set(tasks)
    for m in members:
        for task in sorted(current.get(m, ())):
            if task in free and len(out[m]) < quota[m]:
                out[m].add(task)
                free.discard(task)
    for task in tasks:
        if task in free:
            m = min(members, key=lambda m: (len(out[m]) - quota[m], members.index(m)))
            out[m].add(task)
    return out


# Kafka's Topic.isInternal: a streams topology may not name these.
INTERNAL_TOPICS = ("__consumer_offsets", "__transaction_state", "__share_group_state")


def topology_refusal(request):
    """Kafka's checks of a StreamsGroupHeartbeat's topology, made before the coordinator's
    (and, with an authorizer, right after READ on the group, before DESCRIBE on its
    topics): the answer refusing a topology that names internal topics or invalid topic
    names (STREAMS_INVALID_TOPOLOGY, nothing else set), or None."""
    if request.topology is None:
        return None
    named = {}  # the topics in the order Kafka lists them, once each
    for sub in request.topology.subtopologies:
        named.update(dict.fromkeys(sub.source_topics or ()))
        named.update(dict.fromkeys(sub.repartition_sink_topics or ()))
        named.update(dict.fromkeys(t.name for t in sub.repartition_source_topics or ()))
        named.update(dict.fromkeys(t.name for t in sub.state_changelog_topics or ()))
    internal = [n for n in named if n in INTERNAL_TOPICS]
    if internal:
        message = (
            f"Use of Kafka internal topics {','.join(internal)} in a Kafka Streams topology "
            "is prohibited."
        )
    else:
        invalid = [n for n in named if not _valid_topic_name(n)]
        if not invalid:
            return None
        message = f"Topic names {','.join(invalid)} are not valid topic names."
    return StreamsGroupHeartbeatResponse(
        throttle_time_ms=0,
        error_code=STREAMS_INVALID_TOPOLOGY,
        error_message=message,
        member_id="",
        member_epoch=0,
        heartbeat_interval_ms=0,
        acceptable_recovery_lag=0,
        task_offset_interval_ms=0,
        endpoint_information_epoch=0,
    )


def _valid_topic_name(name):
    try:
        check_topic_name(name)
    except ClusterError:
        return False
    return True


class StreamsGroups:
    """The streams groups of a coordinator. `topics()` gives every topic of the log as
    {name: (topic id, partition count)}."""

    def __init__(self, config, clock, timers, topics):
        self.config, self.clock, self.timers, self.topics = config, clock, timers, topics
        self.groups = {}
        self.full = lambda: False  # no new group may be made (the coordinator's max_groups)

    # ---------------------------------------------------------------- StreamsGroupHeartbeat

    def heartbeat(self, version, request, ctx, taken):
        """The answer to a StreamsGroupHeartbeat; `taken(group_id)` says whether the id is a
        group of another protocol (Kafka: GROUP_ID_NOT_FOUND, "not a streams group")."""
        refusal = topology_refusal(request)
        if refusal is not None:
            return refusal
        try:
            self._check(request)
            if request.group_id not in self.groups and taken(request.group_id):
                raise HeartbeatError(
                    GROUP_ID_NOT_FOUND, f"Group {request.group_id} is not a streams group."
                )
            if request.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
                return self._leave(request)
            return self._join_or_heartbeat(request, ctx)
        except HeartbeatError as error:
            return self._response(
                error_code=error.code, error_message=error.message, member_id=request.member_id
            )

    def _response(self, **fields):
        defaults = dict(
            throttle_time_ms=0,
            error_code=NONE,
            error_message=None,
            member_id="",
            member_epoch=0,
            heartbeat_interval_ms=self.config.group_streams_heartbeat_interval_ms,
            acceptable_recovery_lag=ACCEPTABLE_RECOVERY_LAG,
            task_offset_interval_ms=TASK_OFFSET_INTERVAL_MS,
            endpoint_information_epoch=0,
        )
        defaults.update(fields)
        return StreamsGroupHeartbeatResponse(**defaults)

    def _check(self, request):
        """Kafka's throwIfStreamsGroupHeartbeatRequestIsInvalid, for what this coordinator
        reads."""
        if not request.group_id:
            raise HeartbeatError(INVALID_REQUEST, "GroupId can't be empty.")
        if not request.member_id:
            raise HeartbeatError(INVALID_REQUEST, "MemberId can't be empty.")
        if request.instance_id == "":
            raise HeartbeatError(INVALID_REQUEST, "InstanceId can't be empty.")
        if request.member_epoch == JOIN_EPOCH:
            if request.rebalance_timeout_ms <= 0:
                raise HeartbeatError(
                    INVALID_REQUEST, "RebalanceTimeoutMs must be provided and positive."
                )
            if request.topology is None:
                raise HeartbeatError(INVALID_REQUEST, "Topology must be non-null when joining.")
            if None in (request.active_tasks, request.standby_tasks, request.warmup_tasks):
                raise HeartbeatError(
                    INVALID_REQUEST,
                    "Active, standby and warmup tasks must be non-null when joining.",
                )
            seen = set()
            for sub in request.topology.subtopologies:
                if sub.subtopology_id in seen:
                    raise HeartbeatError(
                        STREAMS_INVALID_TOPOLOGY,
                        f"Subtopology {sub.subtopology_id} is given more than once.",
                    )
                seen.add(sub.subtopology_id)
                for group_of in sub.copartition_groups:
                    for indexes, named in (
                        (group_of.source_topics, sub.source_topics),
                        (group_of.repartition_source_topics, sub.repartition_source_topics),
                    ):
                        if any(not 0 <= i < len(named) for i in indexes):
                            raise HeartbeatError(
                                STREAMS_INVALID_TOPOLOGY,
                                f"Subtopology {sub.subtopology_id}: a copartition group "
                                "names a topic it does not have.",
                            )
                if sub.source_topic_regex:
                    raise HeartbeatError(
                        STREAMS_INVALID_TOPOLOGY,
                        f"Subtopology {sub.subtopology_id}: source topics by regular "
                        "expression are not supported by this broker.",
                    )
        elif request.member_epoch < STATIC_LEAVE_EPOCH:
            raise HeartbeatError(INVALID_REQUEST, f"MemberEpoch {request.member_epoch} is invalid.")
        if request.member_epoch != JOIN_EPOCH and request.topology is not None:
            raise HeartbeatError(INVALID_REQUEST, "Topology can only be provided when joining.")

    def _join_or_heartbeat(self, request, ctx):
        group = self.groups.get(request.group_id)
        joining = request.member_epoch == JOIN_EPOCH
        if group is None:
            if not joining:
                raise HeartbeatError(
                    GROUP_ID_NOT_FOUND, f"Streams group {request.group_id} not found."
                )
            if self.full():
                raise HeartbeatError(
                    POLICY_VIOLATION, "The coordinator holds its maximum of groups (max_groups)."
                )
            group = self.groups[request.group_id] = StreamsGroup(request.group_id)
        member = group.members.get(request.member_id)
        bump = False
        if member is None:
            if not joining:
                raise HeartbeatError(
                    UNKNOWN_MEMBER_ID,
                    f"Member {request.member_id} is not a member of group {group.group_id}.",
                )
            if len(group.members) >= self.config.group_streams_max_size:
                raise HeartbeatError(
                    GROUP_MAX_SIZE_REACHED,
                    f"The streams group has reached its maximum capacity of "
                    f"{self.config.group_streams_max_size} members.",
                )
            if request.instance_id is not None and any(
                m.instance_id == request.instance_id for m in group.members.values()
            ):
                raise HeartbeatError(
                    UNRELEASED_INSTANCE_ID,
                    f"Static member {request.instance_id} is in use by another member.",
                )
            member = _Member(request.member_id)
            group.members[member.member_id] = member
            bump = True
        elif joining:
            # A known member joining again starts from nothing, as Kafka lets it.
            group.release(member, _tasks(member.assigned) | _tasks(member.revoking))
            member.assigned, member.revoking, member.sent = {}, {}, None
            member.state, member.epoch = STABLE, 0
        elif request.member_epoch != member.epoch and not (
            request.member_epoch == member.previous_epoch
            and request.active_tasks is not None
            and _tasks(_by_id(request.active_tasks)) <= _tasks(member.assigned)
        ):
            raise HeartbeatError(
                FENCED_MEMBER_EPOCH,
                f"The streams group member has an epoch ({request.member_epoch}) that does not "
                f"match its epoch ({member.epoch}).",
            )
        self._update_member(member, request, ctx)
        if joining:
            bump |= self._take_topology(group, request.topology)
        bump |= self._refresh_tasks(group)
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._assign(group)
        if request.active_tasks is not None:
            self._owned(group, member, _tasks(_by_id(request.active_tasks)))
        self._reconcile(group, member)
        self._schedule_session(group, member)
        statuses = list(group.statuses)
        if member.topology_epoch < (group.topology.epoch if group.topology else 0):
            statuses.append(
                (
                    STALE_TOPOLOGY,
                    f"The member's topology epoch {member.topology_epoch} is older "
                    f"than the group's {group.topology.epoch}.",
                )
            )
        tasks = None
        current = _tasks(member.assigned)
        if joining or current != member.sent:
            member.sent = current
            tasks = _task_ids(member.assigned)
        return self._response(
            member_id=member.member_id,
            member_epoch=member.epoch,
            status=[
                StreamsGroupHeartbeatResponse.Status(status_code=c, status_detail=d)
                for c, d in statuses
            ],
            active_tasks=tasks,
            standby_tasks=None if tasks is None else [],
            warmup_tasks=None if tasks is None else [],
        )

    def _update_member(self, member, request, ctx):
        member.client_id, member.client_host = ctx.client_id, ctx.client_host
        if request.instance_id is not None:
            member.instance_id = request.instance_id
        if request.rack_id is not None:
            member.rack_id = request.rack_id
        if request.rebalance_timeout_ms > 0:
            member.rebalance_timeout_ms = request.rebalance_timeout_ms
        if request.process_id is not None:
            member.process_id = request.process_id
        if request.user_endpoint is not None:
            member.user_endpoint = (request.user_endpoint.host, request.user_endpoint.port)
        if request.client_tags is not None:
            member.client_tags = {kv.key: kv.value for kv in request.client_tags}
        if request.topology is not None:
            member.topology_epoch = request.topology.epoch

    def _take_topology(self, group, topology):
        """The group's topology is the newest a member brought; True when it changed."""
        if group.topology is None or topology.epoch > group.topology.epoch:
            group.topology = topology
            return True
        return False

    def _refresh_tasks(self, group):
        """Tasks per subtopology from the topics as they are now; True when they changed."""
        topics = self.topics()
        tasks, statuses = {}, []
        missing_source, missing_internal = [], []
        for sub in group.topology.subtopologies if group.topology else ():
            counts = []
            for name in sub.source_topics:
                if name in topics:
                    counts.append(topics[name][1])
                else:
                    missing_source.append(name)
            for info in sub.repartition_source_topics:
                if info.name in topics:
                    counts.append(topics[info.name][1])
                else:
                    missing_internal.append(info.name)
            missing_internal += [i.name for i in sub.state_changelog_topics if i.name not in topics]
            for group_of in sub.copartition_groups:
                named = [sub.source_topics[i] for i in group_of.source_topics] + [
                    sub.repartition_source_topics[i].name
                    for i in group_of.repartition_source_topics
                ]
                sizes = {topics[n][1] for n in named if n in topics}
                if len(sizes) > 1:
                    statuses.append(
                        (
                            INCORRECTLY_PARTITIONED_TOPICS,
                            f"Following topics do not have the same number of partitions: "
                            f"[{', '.join(sorted(named))}]",
                        )
                    )
            tasks[sub.subtopology_id] = max(counts, default=0)
        if missing_source:
            statuses.append(
                (MISSING_SOURCE_TOPICS, f"Source topics {', '.join(missing_source)} are missing.")
            )
        if missing_internal:
            statuses.append(
                (
                    MISSING_INTERNAL_TOPICS,
                    f"Internal topics are missing: [{', '.join(missing_internal)}]",
                )
            )
        if statuses:
            tasks = {}
        changed = tasks != group.tasks
        group.tasks, group.statuses = tasks, statuses
        return changed

    def _assign(self, group):
        every = {(s, p) for s, n in group.tasks.items() for p in range(n)}
        members = sorted(group.members)
        current = {m: _tasks(group.members[m].assigned) for m in members}
        group.target = sticky_assignment(every, members, current)
        group.assignment_epoch = group.group_epoch

    def _owned(self, group, member, reported):
        """The member says it now runs `reported`: tasks it was revoking are released."""
        revoking = _tasks(member.revoking)
        released = revoking - reported
        if released:
            group.release(member, released)
            member.revoking = _grouped(revoking - released)

    def _reconcile(self, group, member):
        """One step towards the member's target: revoke first, then take what is free."""
        target = group.target.get(member.member_id, set())
        assigned = _tasks(member.assigned)
        if member.revoking:
            member.state = UNREVOKED
            return
        to_revoke = assigned - target
        if to_revoke:
            member.assigned = _grouped(assigned & target)
            member.revoking = _grouped(to_revoke)
            member.state = UNREVOKED
            self._schedule_revocation(group, member)
            return
        self.timers.cancel(("streams-revoke", group.group_id, member.member_id))
        free = {
            t
            for t in target - assigned
            if group.owners.get(t, member.member_id) == member.member_id
        }
        for task in free:
            group.owners[task] = member.member_id
        member.assigned = _grouped(assigned | free)
        member.state = STABLE if _tasks(member.assigned) == target else UNRELEASED
        if member.epoch != group.assignment_epoch:
            member.previous_epoch, member.epoch = member.epoch, group.assignment_epoch

    def _leave(self, request):
        group = self.groups.get(request.group_id)
        member = group.members.get(request.member_id) if group is not None else None
        if member is None:
            raise HeartbeatError(
                UNKNOWN_MEMBER_ID,
                f"Member {request.member_id} is not a member of group {request.group_id}.",
            )
        self._remove(group, member)
        return self._response(member_id=member.member_id, member_epoch=request.member_epoch)

    def _remove(self, group, member):
        group.remove(member)
        for kind in ("streams-session", "streams-revoke"):
            self.timers.cancel((kind, group.group_id, member.member_id))
        group.group_epoch += 1
        if group.members:
            self._refresh_tasks(group)
            self._assign(group)

    def _schedule_session(self, group, member):
        key = ("streams-session", group.group_id, member.member_id)
        self.timers.schedule(
            key,
            self.config.group_streams_session_timeout_ms,
            lambda: self._expire(group, member),
        )

    def _schedule_revocation(self, group, member):
        key = ("streams-revoke", group.group_id, member.member_id)
        if key not in self.timers:
            self.timers.schedule(
                key, member.rebalance_timeout_ms, lambda: self._expire(group, member)
            )

    def _expire(self, group, member):
        """A member silent for its session, or slow to revoke for its rebalance timeout, is
        fenced: removed, and its tasks go to the others."""
        if group.members.get(member.member_id) is member:
            self._remove(group, member)

    # ---------------------------------------------------------------- offsets

    def commit_error(self, group, member_id, epoch):
        """OffsetCommit from a streams member (Kafka's StreamsGroup.validateOffsetCommit)."""
        if epoch < 0 and not member_id:
            return None if not group.members else UNKNOWN_MEMBER_ID
        member = group.members.get(member_id)
        if member is None:
            return UNKNOWN_MEMBER_ID
        if epoch != member.epoch:
            return STALE_MEMBER_EPOCH
        return None

    # ---------------------------------------------------------------- StreamsGroupDescribe

    def describe(self, group_ids, operations):
        described = []
        for group_id in group_ids:
            group = self.groups.get(group_id)
            if group is None:
                described.append(
                    StreamsGroupDescribeResponse.DescribedGroup(
                        error_code=GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} not found.",
                        group_id=group_id,
                        group_state="",
                        group_epoch=0,
                        assignment_epoch=0,
                        topology=None,
                        members=[],
                        authorized_operations=operations,
                    )
                )
                continue
            described.append(
                StreamsGroupDescribeResponse.DescribedGroup(
                    error_code=NONE,
                    error_message=None,
                    group_id=group_id,
                    group_state=group.state,
                    group_epoch=group.group_epoch,
                    assignment_epoch=group.assignment_epoch,
                    topology=_described_topology(group.topology),
                    members=[_described_member(group, m) for m in group.members.values()],
                    authorized_operations=operations,
                )
            )
        return described


def _by_id(task_ids):
    return {t.subtopology_id: set(t.partitions) for t in task_ids}


def _task_ids(by_subtopology, cls=StreamsGroupHeartbeatResponse.TaskIds):
    return [
        cls(subtopology_id=s, partitions=sorted(ps))
        for s, ps in sorted(by_subtopology.items())
        if ps
    ]


def _described_topology(topology):
    if topology is None:
        return None
    R = StreamsGroupDescribeResponse

    def info(i):
        return R.TopicInfo(
            name=i.name,
            partitions=i.partitions,
            replication_factor=i.replication_factor,
            topic_configs=[R.KeyValue(key=kv.key, value=kv.value) for kv in i.topic_configs],
        )

    return R.Topology(
        epoch=topology.epoch,
        subtopologies=[
            R.Subtopology(
                subtopology_id=s.subtopology_id,
                source_topics=list(s.source_topics),
                repartition_sink_topics=list(s.repartition_sink_topics),
                state_changelog_topics=[info(i) for i in s.state_changelog_topics],
                repartition_source_topics=[info(i) for i in s.repartition_source_topics],
            )
            for s in topology.subtopologies
        ],
    )


def _described_member(group, member):
    R = StreamsGroupDescribeResponse

    def assignment(tasks):
        return R.Assignment(
            active_tasks=_task_ids(tasks, R.TaskIds), standby_tasks=[], warmup_tasks=[]
        )

    endpoint = member.user_endpoint
    return R.Member(
        member_id=member.member_id,
        member_epoch=member.epoch,
        instance_id=member.instance_id,
        rack_id=member.rack_id,
        client_id=member.client_id,
        client_host=member.client_host,
        topology_epoch=member.topology_epoch,
        process_id=member.process_id,
        user_endpoint=None if endpoint is None else R.Endpoint(host=endpoint[0], port=endpoint[1]),
        client_tags=[R.KeyValue(key=k, value=v) for k, v in sorted(member.client_tags.items())],
        task_offsets=[],
        task_end_offsets=[],
        assignment=assignment(member.assigned),
        target_assignment=assignment(_grouped(group.target.get(member.member_id, set()))),
        is_classic=False,
    )

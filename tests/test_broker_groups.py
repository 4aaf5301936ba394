"""The broker's classic group coordinator (fastkwire.broker._groups), driven directly on a
fake clock: every request goes through the codec at its version (encoded, then decoded as
the broker's server decodes it), and every answer is encoded at the request's version and
decoded as a client decodes it, so each test also proves the answers valid on the wire.
The Kafka behaviour each test pins is in its docstring.
"""

import itertools
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastkwire import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupHeartbeatRequest,
    DeleteGroupsRequest,
    DescribeGroupsRequest,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    HeartbeatRequest,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    SyncGroupRequest,
    TxnOffsetCommitRequest,
    decode_request,
    decode_response,
    encode_request,
    encode_response,
)
from fastkwire.admin import AdminClient, GroupNotFoundError
from fastkwire.broker._groups import VERSIONS, GroupConfig, GroupCoordinator
from fastkwire.connection import Close, Connect, Deadline, Request, Sleep
from fastkwire.consumer_protocol import decode_assignment, encode_assignment, encode_subscription
from fastkwire.error_codes import by_name

NONE = 0
E = {
    name: by_name(name).code
    for name in (
        "FENCED_INSTANCE_ID",
        "GROUP_ID_NOT_FOUND",
        "GROUP_MAX_SIZE_REACHED",
        "GROUP_SUBSCRIBED_TO_TOPIC",
        "ILLEGAL_GENERATION",
        "INCONSISTENT_GROUP_PROTOCOL",
        "INVALID_GROUP_ID",
        "INVALID_SESSION_TIMEOUT",
        "MEMBER_ID_REQUIRED",
        "NON_EMPTY_GROUP",
        "OFFSET_METADATA_TOO_LARGE",
        "REBALANCE_IN_PROGRESS",
        "UNKNOWN_MEMBER_ID",
        "UNKNOWN_TOPIC_OR_PARTITION",
    )
}
TOPICS = {"orders": 4, "audit": 1}
SESSION_MS, REBALANCE_MS = 10_000, 30_000


class Ctx:
    def __init__(self, client_id, client_host="127.0.0.1"):
        self.client_id, self.client_host = client_id, client_host


TOPIC_IDS = {name: uuid.UUID(int=n + 1) for n, name in enumerate(sorted(TOPICS))}


class Broker:
    """A coordinator on a fake clock, with the codec on both sides of it."""

    def __init__(self, config=None, topics=TOPICS):
        self.now = 100.0
        self.topics = {name: (TOPIC_IDS.get(name) or uuid.uuid4(), n) for name, n in topics.items()}
        self.coordinator = GroupCoordinator(
            config, lambda: self.now, topics.get, topics=lambda: dict(self.topics)
        )
        self.correlation = itertools.count(1)

    def send(self, request, version, client_id="client", host="127.0.0.1"):
        """A list that holds the decoded answer once there is one (parked requests: later)."""
        cid = next(self.correlation)
        header, decoded = decode_request(encode_request(request, version, cid, client_id))
        answers = []

        def reply(response):
            assert not answers, "answered twice"
            frame = encode_response(response, version, cid)
            answers.append(decode_response(frame, type(request).API_KEY, version)[1])

        self.coordinator.handle(
            type(request).API_KEY, version, decoded, Ctx(header.client_id, host), reply
        )
        return answers

    def call(self, request, version, **ctx):
        answers = self.send(request, version, **ctx)
        assert len(answers) == 1, f"{type(request).__name__} v{version} was parked"
        return answers[0]

    def advance(self, seconds):
        self.now += seconds
        return self.coordinator.tick()


def protocols(topics=("orders",), names=("range",)):
    return [
        JoinGroupRequest.JoinGroupRequestProtocol(
            name=n, metadata=encode_subscription(list(topics))
        )
        for n in names
    ]


def join(broker, group="g", member_id="", instance=None, version=9, client="c", **kw):
    request = JoinGroupRequest(
        group_id=group,
        session_timeout_ms=kw.pop("session_ms", SESSION_MS),
        rebalance_timeout_ms=kw.pop("rebalance_ms", REBALANCE_MS),
        member_id=member_id,
        group_instance_id=instance,
        protocol_type=kw.pop("protocol_type", "consumer"),
        protocols=kw.pop("protocols", None) or protocols(),
    )
    assert not kw
    return broker.send(request, version, client_id=client)


def sync(broker, member_id, generation, assignments=None, group="g", instance=None, version=5):
    request = SyncGroupRequest(
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance,
        protocol_type="consumer" if version >= 5 else None,
        protocol_name="range" if version >= 5 else None,
        assignments=[
            SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=m, assignment=encode_assignment(a)
            )
            for m, a in (assignments or {}).items()
        ],
    )
    return broker.send(request, version)


def heartbeat(broker, member_id, generation, group="g", instance=None, version=4):
    request = HeartbeatRequest(
        group_id=group, generation_id=generation, member_id=member_id, group_instance_id=instance
    )
    return broker.call(request, version).error_code


def leave(broker, members, group="g", version=5):
    request = LeaveGroupRequest(
        group_id=group,
        members=[
            LeaveGroupRequest.MemberIdentity(member_id=m, group_instance_id=i, reason="test")
            for m, i in members
        ],
    )
    return broker.call(request, version)


def describe(broker, group="g", version=5):
    return broker.call(DescribeGroupsRequest(groups=[group]), version).groups[0]


def assign_round_robin(members, topic="orders", partitions=4):
    """The leader's part in these tests: partitions dealt over the members in order."""
    ids = [m.member_id for m in members]
    return {m: {topic: list(range(partitions))[n :: len(ids)]} for n, m in enumerate(ids)}


def new_member(broker, client="c", version=9, **kw):
    """A dynamic member's first JoinGroup: MEMBER_ID_REQUIRED, then the member id to join with."""
    (answer,) = join(broker, client=client, version=version, **kw)
    assert answer.error_code == E["MEMBER_ID_REQUIRED"]
    assert answer.member_id.startswith(client + "-")
    return answer.member_id


def stable_group(broker, instances=(None, None), version=9):
    """A group of len(instances) members (None: dynamic), joined one after another and
    synced by the leader's round-robin assignment; returns (generation, [member ids])."""
    ids, generation = [], 0
    for n, instance in enumerate(instances):
        if instance is None:
            member_id = new_member(broker, client=f"c{n}", version=version)
            parked = join(broker, member_id=member_id, client=f"c{n}", version=version)
        else:
            parked = join(broker, instance=instance, client=f"c{n}", version=version)
        if ids:  # the others rejoin, as their heartbeats tell them to
            assert heartbeat(broker, ids[0], generation) == E["REBALANCE_IN_PROGRESS"]
            others = [join(broker, member_id=m, version=version) for m in ids]
            answers = [a[0] for a in others] + parked
        else:
            answers = parked
        assert len(answers) == n + 1, "every member has its JoinGroup answer"
        ids = [a.member_id for a in answers]
        generation = answers[0].generation_id
        leader = next(a for a in answers if a.member_id == a.leader)
        plan = assign_round_robin(leader.members)
        follower_syncs = [sync(broker, m, generation) for m in ids if m != leader.member_id]
        assert all(s == [] for s in follower_syncs), "followers wait for the leader"
        assert sync(broker, leader.member_id, generation, plan)[0].error_code == NONE
        for s in follower_syncs:
            assert s[0].error_code == NONE
    return generation, ids


# ---------------------------------------------------------------- join, sync, heartbeat


def test_join_sync_heartbeat_cycle():
    """JoinGroup v4+ of an unknown dynamic member: MEMBER_ID_REQUIRED with the member id
    (client id + "-" + uuid); the join with it completes generation 1 at once (initial delay
    0), the member leads and gets the members' metadata; its SyncGroup assignment comes back;
    heartbeats answer NONE; DescribeGroups shows the member Stable with metadata and assignment."""
    b = Broker()
    member_id = new_member(b, client="alpha")
    (answer,) = join(b, member_id=member_id, client="alpha")
    assert (answer.error_code, answer.generation_id, answer.leader) == (NONE, 1, member_id)
    assert (answer.protocol_type, answer.protocol_name, answer.skip_assignment) == (
        "consumer",
        "range",
        False,
    )
    assert [(m.member_id, m.group_instance_id) for m in answer.members] == [(member_id, None)]
    assert answer.members[0].metadata == encode_subscription(["orders"])
    (synced,) = sync(b, member_id, 1, {member_id: {"orders": [0, 1, 2, 3]}})
    assert synced.error_code == NONE
    assert decode_assignment(synced.assignment) == {"orders": [0, 1, 2, 3]}
    assert (synced.protocol_type, synced.protocol_name) == ("consumer", "range")
    assert heartbeat(b, member_id, 1) == NONE
    group = describe(b)
    assert (group.group_state, group.protocol_type, group.protocol_data) == (
        "Stable",
        "consumer",
        "range",
    )
    (m,) = group.members
    assert (m.member_id, m.client_id, m.client_host) == (member_id, "alpha", "/127.0.0.1")
    assert m.member_metadata == encode_subscription(["orders"])
    assert decode_assignment(m.member_assignment) == {"orders": [0, 1, 2, 3]}


def test_second_member_rebalances_and_followers_wait_for_the_leader():
    """A second member's join starts a rebalance: the first member's heartbeat says
    REBALANCE_IN_PROGRESS, its SyncGroup too; the rebalance completes when every known member
    has rejoined; the leader (the first member) alone gets the member list; a follower's
    SyncGroup waits for the leader's and then gets its own part."""
    b = Broker()
    generation, (first,) = stable_group(b, [None])
    second = new_member(b, client="beta")
    parked = join(b, member_id=second, client="beta")
    assert parked == []
    assert describe(b).group_state == "PreparingRebalance"
    assert heartbeat(b, first, generation) == E["REBALANCE_IN_PROGRESS"]
    assert sync(b, first, generation)[0].error_code == E["REBALANCE_IN_PROGRESS"]
    (leader,) = join(b, member_id=first)
    (follower,) = parked
    assert leader.generation_id == follower.generation_id == generation + 1
    assert leader.leader == follower.leader == first
    assert [m.member_id for m in leader.members] == [first, second]
    assert follower.members == []
    waiting = sync(b, second, generation + 1)
    assert waiting == []
    assert describe(b).group_state == "CompletingRebalance"
    plan = assign_round_robin(leader.members)
    assert decode_assignment(sync(b, first, generation + 1, plan)[0].assignment) == {
        "orders": [0, 2]
    }
    assert decode_assignment(waiting[0].assignment) == {"orders": [1, 3]}
    assert heartbeat(b, second, generation) == E["ILLEGAL_GENERATION"]
    assert heartbeat(b, second, generation + 1) == NONE


def test_rebalance_timeout_drops_dynamic_members_that_do_not_rejoin():
    """A rebalance completes at the rebalance timeout without the members that did not rejoin:
    dynamic ones are removed (their heartbeat then says UNKNOWN_MEMBER_ID)."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    third = new_member(b, client="gamma")
    parked = join(b, member_id=third, client="gamma")
    assert join(b, member_id=a) == []
    for _ in range(5):  # c heartbeats (so its session lives) but does not rejoin
        b.advance(REBALANCE_MS / 1000 / 6)
        assert heartbeat(b, c, generation) == E["REBALANCE_IN_PROGRESS"]
    assert parked == []
    b.advance(REBALANCE_MS / 1000 / 6)
    (answer,) = parked
    assert answer.generation_id == generation + 1 and answer.leader == a
    assert heartbeat(b, c, generation + 1) == E["UNKNOWN_MEMBER_ID"]
    assert {m.member_id for m in describe(b).members} == {a, third}


def test_session_timeout_evicts_and_rebalances():
    """A member that stops heartbeating is removed at its session timeout and the group
    rebalances; the survivor's next heartbeat says REBALANCE_IN_PROGRESS and its rejoin
    completes the next generation alone."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    for _ in range(2):
        b.advance(SESSION_MS / 1000 * 0.4)
        assert heartbeat(b, a, generation) == NONE
    b.advance(SESSION_MS / 1000 * 0.2)
    assert describe(b).group_state == "PreparingRebalance"  # c's session ended
    assert heartbeat(b, a, generation) == E["REBALANCE_IN_PROGRESS"]
    (answer,) = join(b, member_id=a)
    assert answer.generation_id == generation + 1
    assert [m.member_id for m in answer.members] == [a]
    assert heartbeat(b, c, generation) == E["UNKNOWN_MEMBER_ID"]


def test_pending_member_expires_at_its_session_timeout():
    """A member id handed out with MEMBER_ID_REQUIRED is pending until its holder joins with
    it; unused, it expires after the session timeout and is then an unknown member."""
    b = Broker()
    pending = new_member(b)
    b.advance(SESSION_MS / 1000 + 0.001)
    assert join(b, member_id=pending)[0].error_code == E["UNKNOWN_MEMBER_ID"]


def test_join_checks():
    """INVALID_GROUP_ID for an empty group id, INVALID_SESSION_TIMEOUT outside
    group.min/max.session.timeout.ms, UNKNOWN_MEMBER_ID for a member id the group never gave,
    INCONSISTENT_GROUP_PROTOCOL for another protocol type or no protocol in common,
    GROUP_MAX_SIZE_REACHED past group.max.size."""
    b = Broker()
    assert join(b, group="")[0].error_code == E["INVALID_GROUP_ID"]
    assert join(b, session_ms=5999)[0].error_code == E["INVALID_SESSION_TIMEOUT"]
    assert join(b, session_ms=1_800_001)[0].error_code == E["INVALID_SESSION_TIMEOUT"]
    assert join(b, group="other", member_id="made-up")[0].error_code == E["UNKNOWN_MEMBER_ID"]
    stable_group(b, [None])
    assert join(b, member_id="made-up")[0].error_code == E["UNKNOWN_MEMBER_ID"]
    other_type = join(b, protocol_type="connect")
    assert other_type[0].error_code == E["INCONSISTENT_GROUP_PROTOCOL"]
    no_common = join(b, protocols=protocols(names=("roundrobin",)))
    assert no_common[0].error_code == E["INCONSISTENT_GROUP_PROTOCOL"]
    full = Broker(GroupConfig(group_max_size=1))
    stable_group(full, [None])
    assert join(full, version=3)[0].error_code == E["GROUP_MAX_SIZE_REACHED"]
    # The size is checked first, as in Kafka: even an unknown member id is told the group is full.
    assert join(full, member_id="made-up")[0].error_code == E["GROUP_MAX_SIZE_REACHED"]


def test_protocol_chosen_by_votes_among_common_protocols():
    """The protocol is one every member supports, chosen by each member's first preference
    among those (Kafka's vote): here two of three prefer roundrobin."""
    b = Broker()
    prefs = [("range", "roundrobin"), ("roundrobin", "range", "sticky"), ("roundrobin", "range")]
    ids = [new_member(b, client=f"c{n}") for n in range(3)]
    # All three join the initial rebalance before its (zero) delay passes: the first join
    # completes it at once, so the others join the next generation together.
    first = join(b, member_id=ids[0], client="c0", protocols=protocols(names=prefs[0]))
    assert first[0].protocol_name == "range"
    waits = [
        join(b, member_id=m, client=f"c{n}", protocols=protocols(names=p))
        for n, (m, p) in enumerate(zip(ids, prefs))
        if n
    ]
    assert waits == [[], []]
    (again,) = join(b, member_id=ids[0], protocols=protocols(names=prefs[0]))
    assert again.protocol_name == "roundrobin"
    assert [w[0].protocol_name for w in waits] == ["roundrobin", "roundrobin"]


def test_join_versions_below_4_join_at_once():
    """Before JoinGroup v4 an unknown member is given its id and joins in one request; v0
    takes the session timeout as the rebalance timeout."""
    b = Broker()
    (answer,) = join(b, version=0)
    assert answer.error_code == NONE and answer.member_id.startswith("c-")
    assert answer.generation_id == 1 and answer.leader == answer.member_id


def test_known_member_rejoining_with_same_metadata_gets_the_generation_back():
    """A follower that rejoins a Stable group with unchanged metadata gets the current
    generation (no rebalance); changed metadata, or the leader's rejoin, rebalances."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    (same,) = join(b, member_id=c)
    assert (same.generation_id, same.leader, same.members) == (generation, a, [])
    assert heartbeat(b, a, generation) == NONE
    assert join(b, member_id=c, protocols=protocols(topics=("orders", "audit"))) == []
    assert heartbeat(b, a, generation) == E["REBALANCE_IN_PROGRESS"]


# ---------------------------------------------------------------- KIP-345 static members


def test_static_member_rejoin_keeps_the_generation_and_fences_the_old_id():
    """A static member that restarts (JoinGroup with its group.instance.id and no member id)
    replaces its old member id without a rebalance: same generation, its assignment kept, the
    others' heartbeats unaffected; its old member id is FENCED_INSTANCE_ID."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["i-a", "i-b"])
    assert c.startswith("i-b-")
    (answer,) = join(b, instance="i-b", client="c1")
    new_c = answer.member_id
    assert new_c != c and new_c.startswith("i-b-")
    assert (answer.error_code, answer.generation_id, answer.leader) == (NONE, generation, a)
    assert heartbeat(b, a, generation, instance="i-a") == NONE
    assert heartbeat(b, c, generation, instance="i-b") == E["FENCED_INSTANCE_ID"]
    assert sync(b, c, generation, instance="i-b")[0].error_code == E["FENCED_INSTANCE_ID"]
    (synced,) = sync(b, new_c, generation, instance="i-b")
    assert decode_assignment(synced.assignment) == {"orders": [1, 3]}
    group = describe(b)
    assert group.group_state == "Stable"
    assert [(m.member_id, m.group_instance_id) for m in group.members] == [
        (a, "i-a"),
        (new_c, "i-b"),
    ]


@pytest.mark.parametrize("version", [5, 8, 9])
def test_static_leader_rejoin(version):
    """The leader's special case: a restarted static leader rejoins without a rebalance.
    From JoinGroup v9 it is told it leads, gets the members and skip_assignment; before, the
    answer names the old leader id, so the client acts as a follower and syncs."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["i-a", "i-b"], version=version)
    (answer,) = join(b, instance="i-a", version=version)
    new_a = answer.member_id
    assert answer.generation_id == generation
    if version >= 9:
        assert answer.leader == new_a and answer.skip_assignment
        assert [m.member_id for m in answer.members] == [c, new_a]
    else:
        assert answer.leader == a and answer.members == []
    assert heartbeat(b, c, generation, instance="i-b") == NONE
    assert decode_assignment(sync(b, new_a, generation)[0].assignment) == {"orders": [0, 2]}


def test_static_rejoin_that_changes_the_protocol_rebalances():
    """A static member's rejoin whose new protocols change the group's selected protocol
    starts a rebalance (Kafka keeps the group's protocol consistent): a new generation."""
    b = Broker()
    (first,) = join(b, instance="i-a", protocols=protocols(names=("range", "roundrobin")))
    assert (first.generation_id, first.protocol_name) == (1, "range")
    assert sync(b, first.member_id, 1, {first.member_id: {"orders": [0]}})[0].error_code == NONE
    (again,) = join(b, instance="i-a", protocols=protocols(names=("range", "roundrobin")))
    assert again.generation_id == 1  # the same protocols: no rebalance
    (changed,) = join(b, instance="i-a", protocols=protocols(names=("roundrobin", "range")))
    assert (changed.generation_id, changed.protocol_name) == (2, "roundrobin")
    assert heartbeat(b, again.member_id, 1, instance="i-a") == E["FENCED_INSTANCE_ID"]


def test_static_member_replaced_while_its_join_is_parked_is_fenced():
    """A static member whose JoinGroup is parked in a rebalance and whose instance id then
    joins again (a second process with the same group.instance.id) gets FENCED_INSTANCE_ID
    for the parked join; the newcomer takes its place in the rebalance."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["i-a", "i-b"])
    old = join(b, member_id=c, instance="i-b", protocols=protocols(topics=("audit",)))
    assert old == [] and describe(b).group_state == "PreparingRebalance"
    newcomer = join(b, instance="i-b")
    assert old[0].error_code == E["FENCED_INSTANCE_ID"]
    (leader,) = join(b, member_id=a, instance="i-a")
    assert newcomer[0].generation_id == leader.generation_id == generation + 1
    assert {m.group_instance_id for m in leader.members} == {"i-a", "i-b"}


def test_static_members_stay_through_a_rebalance_they_miss():
    """Static members that do not rejoin before the rebalance timeout are not removed (only
    their session timeout removes them), unlike dynamic ones."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["i-a", "i-b"])
    parked = join(b, member_id=a, instance="i-a", protocols=protocols(topics=("audit",)))
    for _ in range(3):  # c heartbeats (its session lives on) but does not rejoin
        b.advance(REBALANCE_MS / 1000 / 4)
        assert heartbeat(b, c, generation, instance="i-b") == E["REBALANCE_IN_PROGRESS"]
    assert parked == []
    b.advance(REBALANCE_MS / 1000 / 4)
    (answer,) = parked
    assert [m.group_instance_id for m in answer.members] == ["i-a", "i-b"]


def test_mission_removal_by_instance_id_rebalances_at_once():
    """The mission's path: two static members; one dies without leaving (static members send
    no LeaveGroup on close). LeaveGroup v3+ naming its group.instance.id (member id "")
    removes it and starts the rebalance at once, far inside the session timeout: the
    survivor's next heartbeat is REBALANCE_IN_PROGRESS, its rejoin completes the generation
    alone, and it is assigned every partition."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["survivor", "dies"])
    start = b.now
    answer = leave(b, [("", "dies")])
    assert answer.error_code == NONE
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in answer.members] == [
        ("", "dies", NONE)
    ]
    assert describe(b).group_state == "PreparingRebalance"
    assert heartbeat(b, a, generation, instance="survivor") == E["REBALANCE_IN_PROGRESS"]
    (rejoined,) = join(b, member_id=a, instance="survivor")
    assert rejoined.generation_id == generation + 1 and rejoined.leader == a
    assert [m.group_instance_id for m in rejoined.members] == ["survivor"]
    plan = assign_round_robin(rejoined.members)
    (synced,) = sync(b, a, generation + 1, plan, instance="survivor")
    assert decode_assignment(synced.assignment) == {"orders": [0, 1, 2, 3]}
    assert b.now == start  # no timer had to pass
    assert heartbeat(b, c, generation, instance="dies") == E["UNKNOWN_MEMBER_ID"]


@pytest.mark.parametrize("version", [3, 4, 5])
def test_leave_group_batch_answers_per_member(version):
    """LeaveGroup v3+: each member named answers on its own: an unknown group.instance.id is
    UNKNOWN_MEMBER_ID, a member id that is not the one the instance id maps to is
    FENCED_INSTANCE_ID, a dynamic member by its member id leaves; the others are kept."""
    b = Broker()
    generation, (a, c, d) = stable_group(b, ["i-a", "i-b", None])
    answer = leave(
        b, [("", "nobody"), ("wrong-id", "i-b"), (d, None), ("", "i-a")], version=version
    )
    assert answer.error_code == NONE
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in answer.members] == [
        ("", "nobody", E["UNKNOWN_MEMBER_ID"]),
        ("wrong-id", "i-b", E["FENCED_INSTANCE_ID"]),
        (d, None, NONE),
        ("", "i-a", NONE),
    ]
    assert [m.group_instance_id for m in describe(b).members] == ["i-b"]
    missing = leave(b, [("", "i-b")], group="no-such-group", version=version)
    assert [m.error_code for m in missing.members] == [E["UNKNOWN_MEMBER_ID"]]


@pytest.mark.parametrize("version", [0, 1, 2])
def test_leave_group_single_member_versions(version):
    """LeaveGroup v0-2 names one member by its member id; its error is the answer's."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    single = lambda m: LeaveGroupRequest(group_id="g", member_id=m)  # noqa: E731
    assert b.call(single("unknown"), version).error_code == E["UNKNOWN_MEMBER_ID"]
    assert b.call(single(c), version).error_code == NONE
    assert heartbeat(b, a, generation) == E["REBALANCE_IN_PROGRESS"]


def test_leaving_member_ends_its_parked_join_and_completes_the_rebalance():
    """A member leaving during a rebalance no longer holds it up: the rebalance completes as
    soon as the remaining members have rejoined."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    parked = join(b, member_id=a, protocols=protocols(topics=("audit",)))
    assert parked == []
    assert leave(b, [(c, None)]).members[0].error_code == NONE
    assert parked[0].generation_id == generation + 1


def test_pending_sync_expiry_removes_members_that_never_sync():
    """After the join phase, members that send no SyncGroup within the rebalance timeout are
    removed and the group rebalances again."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    parked = join(b, member_id=c, protocols=protocols(topics=("audit",)))
    (leader,) = join(b, member_id=a)
    assert parked[0].generation_id == leader.generation_id == generation + 1
    sync(b, a, generation + 1, assign_round_robin(leader.members))
    for _ in range(6):  # both heartbeat; c never sends its SyncGroup
        assert heartbeat(b, a, generation + 1) == heartbeat(b, c, generation + 1) == NONE
        b.advance(REBALANCE_MS / 1000 / 6)
    assert describe(b).group_state == "PreparingRebalance"
    assert [m.member_id for m in describe(b).members] == [a]


# ---------------------------------------------------------------- offsets


def commit(b, offsets, group="g", generation=-1, member_id="", instance=None, version=9, meta=""):
    by_topic = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=partition,
                committed_offset=offset,
                committed_leader_epoch=3,
                committed_metadata=meta,
            )
        )
    request = OffsetCommitRequest(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance,
        topics=[
            OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    )
    answer = b.call(request, version)
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def fetch(b, topics, group="g", version=9):
    """{(topic, partition): (offset, metadata, error)}; topics None asks for all."""
    if version >= 8:
        request = OffsetFetchRequest(
            groups=[
                OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group,
                    topics=None
                    if topics is None
                    else [
                        OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in topics.items()
                    ],
                )
            ]
        )
        (answer,) = b.call(request, version).groups
    else:
        request = OffsetFetchRequest(
            group_id=group,
            topics=None
            if topics is None
            else [
                OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
                for t, p in topics.items()
            ],
        )
        answer = b.call(request, version)
    assert answer.error_code == NONE
    return {
        (t.name, p.partition_index): (p.committed_offset, p.metadata, p.error_code)
        for t in answer.topics
        for p in t.partitions
    }


@pytest.mark.parametrize("version", [2, 5, 7, 8, 9])
def test_simple_commit_creates_an_empty_group_and_fetch_reads_it(version):
    """OffsetCommit with generation -1 and no member (a consumer without group management,
    or the admin client) to an unknown group creates an Empty group and commits; unknown
    topics or partitions answer UNKNOWN_TOPIC_OR_PARTITION; OffsetFetch gives -1 for a
    partition without an offset."""
    b = Broker()
    errors = commit(b, {("orders", 0): 42, ("orders", 9): 1, ("nope", 0): 1}, version=version)
    assert errors == {
        ("orders", 0): NONE,
        ("orders", 9): E["UNKNOWN_TOPIC_OR_PARTITION"],
        ("nope", 0): E["UNKNOWN_TOPIC_OR_PARTITION"],
    }
    listed = b.call(ListGroupsRequest(), 3).groups
    assert [(g.group_id, g.protocol_type) for g in listed] == [("g", "")]
    for fetch_version in (1, 5, 7, 8, 9):
        assert fetch(b, {"orders": [0, 1]}, version=fetch_version) == {
            ("orders", 0): (42, "", NONE),
            ("orders", 1): (-1, "", NONE),
        }


def test_fetch_of_every_partition_and_of_several_groups():
    """OffsetFetch with topics null (v2+) gives every committed partition; v8+ asks several
    groups at once, and an unknown group answers -1 without an error."""
    b = Broker()
    commit(b, {("orders", 1): 5, ("audit", 0): 7, ("orders", 0): 3}, meta="m")
    assert fetch(b, None, version=7) == {
        ("audit", 0): (7, "m", NONE),
        ("orders", 0): (3, "m", NONE),
        ("orders", 1): (5, "m", NONE),
    }
    request = OffsetFetchRequest(
        groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None),
            OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="other",
                topics=[
                    OffsetFetchRequest.OffsetFetchRequestTopics(
                        name="orders", partition_indexes=[0]
                    )
                ],
            ),
        ]
    )
    answer = b.call(request, 8)
    assert [g.group_id for g in answer.groups] == ["g", "other"]
    assert answer.groups[1].topics[0].partitions[0].committed_offset == -1
    assert len([p for t in answer.groups[0].topics for p in t.partitions]) == 3


def test_group_commit_checks_generation_and_member():
    """A group member's commit needs its member id and the current generation:
    ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID (static); a simple commit to a
    non-empty group is UNKNOWN_MEMBER_ID; a commit with a generation to a group that does not
    exist is GROUP_ID_NOT_FOUND from v9, ILLEGAL_GENERATION before; metadata over
    offset.metadata.max.bytes is OFFSET_METADATA_TOO_LARGE."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["i-a", "i-b"])
    tp = {("orders", 0): 10}
    assert commit(b, tp, generation=generation, member_id=a, instance="i-a") == {
        ("orders", 0): NONE
    }
    assert (
        commit(b, tp, generation=generation + 1, member_id=a)[("orders", 0)]
        == E["ILLEGAL_GENERATION"]
    )
    assert (
        commit(b, tp, generation=generation, member_id="x")[("orders", 0)] == E["UNKNOWN_MEMBER_ID"]
    )
    assert (
        commit(b, tp, generation=generation, member_id=a, instance="i-b")[("orders", 0)]
        == E["FENCED_INSTANCE_ID"]
    )
    assert commit(b, tp)[("orders", 0)] == E["UNKNOWN_MEMBER_ID"]
    assert (
        commit(b, tp, group="none", generation=1, member_id="m")[("orders", 0)]
        == E["GROUP_ID_NOT_FOUND"]
    )
    assert (
        commit(b, tp, group="none", generation=1, member_id="m", version=8)[("orders", 0)]
        == E["ILLEGAL_GENERATION"]
    )
    too_long = commit(b, tp, generation=generation, member_id=a, meta="x" * 4097)
    assert too_long[("orders", 0)] == E["OFFSET_METADATA_TOO_LARGE"]
    assert fetch(b, {"orders": [0]}) == {("orders", 0): (10, "", NONE)}


def test_offsets_expire_after_retention_once_the_group_is_empty():
    """offsets.retention.minutes after an empty group's last commit its offsets go, and the
    group with them (checked every offsets.retention.check.interval.ms)."""
    b = Broker(GroupConfig(offsets_retention_minutes=1, offsets_retention_check_interval_ms=10_000))
    commit(b, {("orders", 0): 1})
    b.advance(50)
    assert fetch(b, {"orders": [0]})[("orders", 0)][0] == 1
    b.advance(20)
    assert fetch(b, {"orders": [0]})[("orders", 0)][0] == -1
    assert b.call(ListGroupsRequest(), 3).groups == []


def test_offset_delete():
    """OffsetDelete: GROUP_ID_NOT_FOUND for an unknown group; in a non-empty consumer group,
    GROUP_SUBSCRIBED_TO_TOPIC for topics its members subscribe to, and the others' offsets
    are deleted; NON_EMPTY_GROUP for a non-empty group of another protocol type."""
    b = Broker()
    generation, (a,) = stable_group(b, [None])
    commit(b, {("orders", 0): 1, ("audit", 0): 2}, generation=generation, member_id=a)

    def delete(group="g"):
        request = OffsetDeleteRequest(
            group_id=group,
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=t,
                    partitions=[
                        OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)
                    ],
                )
                for t in ("orders", "audit", "nope")
            ],
        )
        return b.call(request, 0)

    assert delete("none").error_code == E["GROUP_ID_NOT_FOUND"]
    answer = delete()
    assert answer.error_code == NONE
    assert [(t.name, t.partitions[0].error_code) for t in answer.topics] == [
        ("orders", E["GROUP_SUBSCRIBED_TO_TOPIC"]),
        ("audit", NONE),
        ("nope", E["UNKNOWN_TOPIC_OR_PARTITION"]),
    ]
    assert fetch(b, None) == {("orders", 0): (1, "", NONE)}
    join(b, group="connect", protocol_type="connect", version=3)
    assert delete("connect").error_code == E["NON_EMPTY_GROUP"]


# ---------------------------------------------------------------- group admin


def test_list_groups_with_state_and_type_filters():
    """ListGroups lists every group with its protocol type; v4+ filters by state (case
    insensitive), v5+ by type (every group here is "classic")."""
    b = Broker()
    stable_group(b, [None])
    commit(b, {("orders", 0): 1}, group="simple")

    def listed(version, **filters):
        answer = b.call(ListGroupsRequest(**filters), version)
        return sorted((g.group_id, g.protocol_type, g.group_state) for g in answer.groups)

    assert listed(4, states_filter=[]) == [("g", "consumer", "Stable"), ("simple", "", "Empty")]
    assert listed(4, states_filter=["stable"]) == [("g", "consumer", "Stable")]
    assert listed(5, states_filter=[], types_filter=["Classic"]) == listed(4, states_filter=[])
    assert listed(5, states_filter=[], types_filter=["consumer"]) == []


@pytest.mark.parametrize("version", [0, 3, 4, 5, 6])
def test_describe_groups(version):
    """DescribeGroups: members with group.instance.id (v4+), client id and host, metadata and
    assignment bytes; a group that does not exist is Dead, and from v6 GROUP_ID_NOT_FOUND;
    authorized operations only when asked."""
    b = Broker()
    stable_group(b, ["i-a", None])
    request = DescribeGroupsRequest(
        groups=["g", "none"], include_authorized_operations=version >= 3
    )
    g, none = b.call(request, version).groups
    assert (g.error_code, g.group_state, g.protocol_data) == (NONE, "Stable", "range")
    expected_instances = ["i-a", None] if version >= 4 else [None, None]
    assert [m.group_instance_id for m in g.members] == expected_instances
    assert [m.client_id for m in g.members] == ["c0", "c1"]
    assert [decode_assignment(m.member_assignment) for m in g.members] == [
        {"orders": [0, 2]},
        {"orders": [1, 3]},
    ]
    assert none.group_state == "Dead" and none.members == []
    assert none.error_code == (E["GROUP_ID_NOT_FOUND"] if version >= 6 else NONE)
    if version >= 3:
        assert g.authorized_operations == (1 << 3) | (1 << 6) | (1 << 8)


def test_delete_groups():
    """DeleteGroups: NON_EMPTY_GROUP for a group with members, GROUP_ID_NOT_FOUND for none;
    an empty group goes with its offsets."""
    b = Broker()
    stable_group(b, [None])
    commit(b, {("orders", 0): 1}, group="simple")
    answer = b.call(DeleteGroupsRequest(groups_names=["g", "simple", "none"]), 2)
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("g", E["NON_EMPTY_GROUP"]),
        ("simple", NONE),
        ("none", E["GROUP_ID_NOT_FOUND"]),
    ]
    assert fetch(b, {"orders": [0]}, group="simple")[("orders", 0)][0] == -1


def test_every_version_served_is_encodable():
    """A full group life (join, sync, heartbeat, commit, transactional commit, fetch, list,
    describe, leave, delete) at every version this coordinator serves: every answer encodes
    at its version."""
    assert VERSIONS[JoinGroupRequest.API_KEY] == (0, 9)
    for version in range(0, 10):
        b = Broker()
        old = version < 4
        if old:
            (joined,) = join(b, version=version)
        else:
            joined = join(b, member_id=new_member(b, version=version), version=version)[0]
        member_id, generation = joined.member_id, joined.generation_id
        for v in range(*VERSIONS[SyncGroupRequest.API_KEY]):
            assert sync(b, member_id, generation, {member_id: {"orders": [0]}}, version=v)
        for v in range(0, 5):
            assert heartbeat(b, member_id, generation, version=v) == NONE
        for v in range(2, 10):
            assert commit(
                b, {("orders", 0): v}, generation=generation, member_id=member_id, version=v
            )
        for v in range(1, 10):
            assert fetch(b, {"orders": [0]}, version=v)[("orders", 0)][0] == 9
        for v in range(0, 6):
            assert txn_commit(b, {("orders", 1): v}, producer_id=v, version=v) == {
                ("orders", 1): NONE
            }
        for v in range(0, 6):
            assert b.call(ListGroupsRequest(states_filter=[], types_filter=[]), v).groups
        for v in range(0, 7):
            assert describe(b, version=v).members
        b.call(LeaveGroupRequest(group_id="g", member_id=member_id), min(version, 2))
        assert describe(b).group_state == "Empty"
        assert b.call(DeleteGroupsRequest(groups_names=["g"]), version % 3).results


# ---------------------------------------------------------------- fastkwire's admin client


class _Conn:
    """What an admin flow's Connect step is answered with: a broker that is the coordinator."""

    host, port, address = "127.0.0.1", 9092, "127.0.0.1:9092"
    versions = {**VERSIONS, FindCoordinatorRequest.API_KEY: (0, 6)}


def run_admin(b, call):
    """Run an admin call's flow with its requests answered by the coordinator, through the
    codec and the admin's own frame checks."""
    flow_fn, *args = call
    flow = flow_fn(*args, Deadline(30.0))
    answer = None
    while True:
        try:
            step = flow.send(answer)
        except StopIteration as done:
            return done.value
        if isinstance(step, Connect):
            answer = _Conn()
        elif isinstance(step, (Close, Sleep)):
            answer = None
        else:
            assert isinstance(step, Request)
            if isinstance(step.msg, FindCoordinatorRequest):
                answer = FindCoordinatorResponse(
                    coordinators=[
                        FindCoordinatorResponse.Coordinator(
                            key=key, node_id=1, host="127.0.0.1", port=9092, error_code=0
                        )
                        for key in step.msg.coordinator_keys
                    ],
                    node_id=1,
                    host="127.0.0.1",
                    port=9092,
                )
                continue
            cid = next(b.correlation)
            frame = encode_request(step.msg, step.version, cid, "fastkwire-admin")
            header, decoded = decode_request(frame)
            answers = []
            b.coordinator.handle(
                header.request_api_key,
                step.version,
                decoded,
                Ctx("fastkwire-admin"),
                answers.append,
            )
            response_frame = encode_response(answers[0], step.version, cid)
            if step.check_frame is not None:
                step.check_frame(response_frame, step.version)
            answer = decode_response(response_frame, header.request_api_key, step.version)[1]


def test_admin_describe_and_remove_members_through_the_coordinator():
    """fastkwire's own admin flows (describe-group, remove-members --instance-id) against the
    coordinator: the description lists both instance ids with their assignments; removal by
    instance id succeeds for the known one and reports UNKNOWN_MEMBER_ID for an unknown one,
    and the group rebalances at once; remove-members --all (each member named by member id
    and instance id, as Kafka's Admin does) empties the group."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["i-a", "i-b"])
    admin = AdminClient("127.0.0.1:9092")
    group = run_admin(b, admin._describe_call("g"))
    assert (group.state, group.protocol_type, group.protocol) == ("Stable", "consumer", "range")
    assert [(m.group_instance_id, m.assignment) for m in group.members] == [
        ("i-a", {"orders": [0, 2]}),
        ("i-b", {"orders": [1, 3]}),
    ]
    result = run_admin(b, admin._removal_call("g", ["i-b", "i-zz"], "gone"))
    assert result.leave_group_version == 5
    assert [(m.group_instance_id, m.error_code) for m in result.members] == [
        ("i-b", NONE),
        ("i-zz", E["UNKNOWN_MEMBER_ID"]),
    ]
    assert heartbeat(b, a, generation, instance="i-a") == E["REBALANCE_IN_PROGRESS"]
    plan = run_admin(b, admin._plan_call("g", ["i-a", "i-b"], [], False))
    assert plan.members == [("", "i-a")] and plan.missing_instance_ids == ["i-b"]
    with pytest.raises(GroupNotFoundError):
        run_admin(b, admin._describe_call("none"))
    everyone = run_admin(b, admin._remove_call("g", [], [], True, None))
    assert [(m.group_instance_id, m.error_code) for m in everyone.members] == [("i-a", NONE)]
    assert run_admin(b, admin._describe_call("g")).members == []


def test_initial_rebalance_delay_waits_for_more_members():
    """group.initial.rebalance.delay.ms: the first rebalance of an empty group waits the delay,
    and again while new members keep joining (up to the rebalance timeout), so that members
    starting together share generation 1."""
    b = Broker(GroupConfig(group_initial_rebalance_delay_ms=3000))
    first = join(b, version=3, client="a")
    assert b.advance(2.0) == pytest.approx(b.now + 1.0)
    second = join(b, version=3, client="b")
    b.advance(1.0)
    assert first == second == []  # a member came during the delay: it is extended
    b.advance(3.0)
    assert first[0].generation_id == second[0].generation_id == 1
    assert len(first[0].members) == 2


def test_sync_group_v5_needs_the_protocol_type_and_name():
    """SyncGroup v5+ without its protocol type or name is INCONSISTENT_GROUP_PROTOCOL, as is
    one naming another protocol than the group's."""
    b = Broker()
    generation, (a,) = stable_group(b, [None])
    bare = SyncGroupRequest(group_id="g", generation_id=generation, member_id=a, assignments=[])
    assert b.call(bare, 5).error_code == E["INCONSISTENT_GROUP_PROTOCOL"]
    assert b.call(bare, 4).error_code == NONE
    other = SyncGroupRequest(
        group_id="g",
        generation_id=generation,
        member_id=a,
        protocol_type="consumer",
        protocol_name="roundrobin",
        assignments=[],
    )
    assert b.call(other, 5).error_code == E["INCONSISTENT_GROUP_PROTOCOL"]


def test_a_second_join_from_a_member_answers_the_first():
    """Every request is answered once: a member whose JoinGroup is parked and that sends
    another (it gave up on the first) has the first answered REBALANCE_IN_PROGRESS."""
    b = Broker()
    generation, (a, c) = stable_group(b, [None, None])
    first = join(b, member_id=a, protocols=protocols(topics=("audit",)))
    second = join(b, member_id=a, protocols=protocols(topics=("audit",)))
    assert first[0].error_code == E["REBALANCE_IN_PROGRESS"] and second == []
    join(b, member_id=c)
    assert second[0].generation_id == generation + 1


def test_static_member_that_stops_heartbeating_is_removed_at_its_session_timeout():
    """Static members leave no LeaveGroup behind, but their session still ends: without
    heartbeats the member is removed after session.timeout.ms and the group rebalances."""
    b = Broker()
    generation, (a, c) = stable_group(b, ["survivor", "dies"])
    b.advance(SESSION_MS / 1000 * 0.6)
    assert heartbeat(b, a, generation, instance="survivor") == NONE
    b.advance(SESSION_MS / 1000 * 0.6)
    assert heartbeat(b, a, generation, instance="survivor") == E["REBALANCE_IN_PROGRESS"]
    assert [m.group_instance_id for m in describe(b).members] == ["survivor"]


# ---------------------------------------------------------------- KIP-848 consumer groups

ORDERS = TOPIC_IDS["orders"]
CG_SESSION_S = 45.0


def cg_heartbeat(b, member_id, epoch, owned=(), group="cg", version=1, **kw):
    """A ConsumerGroupHeartbeat; `owned` is a list of orders partitions (None: not sent).
    Epoch 0 sends the full request (subscription and rebalance timeout)."""
    joining = epoch == 0
    request = ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=kw.pop("instance", None),
        rebalance_timeout_ms=kw.pop("rebalance_ms", REBALANCE_MS if joining else -1),
        subscribed_topic_names=kw.pop("topics", ["orders"] if joining else None),
        server_assignor=kw.pop("assignor", None),
        topic_partitions=None
        if owned is None
        else (
            [ConsumerGroupHeartbeatRequest.TopicPartitions(topic_id=ORDERS, partitions=list(owned))]
            if owned
            else []
        ),
        **({"subscribed_topic_regex": kw.pop("regex")} if "regex" in kw else {}),
    )
    assert not kw
    return b.call(request, version)


def partitions(answer, topic_id=ORDERS):
    """The orders partitions of a heartbeat's assignment; None when it sent none."""
    if answer.assignment is None:
        return None
    return sorted(
        p
        for t in answer.assignment.topic_partitions
        if t.topic_id == topic_id
        for p in t.partitions
    )


def cg_describe(b, group="cg", version=1):
    request = ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    return b.call(request, version).groups[0]


def test_consumer_group_first_member_gets_every_partition():
    """ConsumerGroupHeartbeat v1 (KIP-848): a member joins with its own member id at epoch 0;
    the group epoch becomes 1, the server-side assignor ("uniform" by default) gives it every
    partition of its subscription, by topic id, with the heartbeat interval; ConsumerGroupDescribe
    shows the group Stable with the member's assignment and target."""
    b = Broker()
    answer = cg_heartbeat(b, "m-a", 0)
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (NONE, "m-a", 1)
    assert answer.heartbeat_interval_ms == 5000
    assert partitions(answer) == [0, 1, 2, 3]
    again = cg_heartbeat(b, "m-a", 1, owned=[0, 1, 2, 3])
    assert again.member_epoch == 1 and again.assignment is None  # unchanged: not sent
    group = cg_describe(b)
    assert (group.group_state, group.group_epoch, group.assignment_epoch, group.assignor_name) == (
        "Stable",
        1,
        1,
        "uniform",
    )
    (m,) = group.members
    assert (m.member_id, m.member_epoch, m.subscribed_topic_names) == ("m-a", 1, ["orders"])
    assert [(t.topic_name, t.partitions) for t in m.assignment.topic_partitions] == [
        ("orders", [0, 1, 2, 3])
    ]
    assert m.target_assignment == m.assignment
    assert cg_describe(b, version=0).members[0].assignment == m.assignment


def test_consumer_group_partitions_move_only_after_revocation():
    """A second member bumps the group epoch; the new target splits the partitions, sticky
    for the first member. The newcomer gets nothing while the first still owns its share
    (unreleased); the first is asked to revoke (it keeps its epoch until it does), and only
    after its next heartbeat without them are they given to the newcomer."""
    b = Broker()
    cg_heartbeat(b, "m-a", 0)
    joined = cg_heartbeat(b, "m-b", 0)
    assert (joined.member_epoch, partitions(joined)) == (2, [])
    assert cg_describe(b).group_state == "Reconciling"
    revoke = cg_heartbeat(b, "m-a", 1, owned=[0, 1, 2, 3])
    assert (revoke.member_epoch, partitions(revoke)) == (1, [2, 3])
    waiting = cg_heartbeat(b, "m-b", 2, owned=[])
    assert waiting.assignment is None  # still nothing free
    revoked = cg_heartbeat(b, "m-a", 1, owned=[2, 3])
    assert revoked.member_epoch == 2
    moved = cg_heartbeat(b, "m-b", 2, owned=[])
    assert (moved.member_epoch, partitions(moved)) == (2, [0, 1])
    assert cg_describe(b).group_state == "Stable"


def test_consumer_group_leave_and_session_timeout_free_partitions():
    """Epoch -1 leaves the group (answered with epoch -1); a member without heartbeats for
    group.consumer.session.timeout.ms is fenced. Either way the group epoch moves on and the
    survivor's next heartbeat is given the freed partitions."""
    b = Broker()
    cg_heartbeat(b, "m-a", 0)
    cg_heartbeat(b, "m-b", 0)
    cg_heartbeat(b, "m-a", 1, owned=[0, 1, 2, 3])
    cg_heartbeat(b, "m-a", 1, owned=[2, 3])
    assert partitions(cg_heartbeat(b, "m-b", 2, owned=[])) == [0, 1]
    left = cg_heartbeat(b, "m-b", -1, owned=None)
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    back = cg_heartbeat(b, "m-a", 2, owned=[2, 3])
    assert (back.member_epoch, partitions(back)) == (3, [0, 1, 2, 3])
    cg_heartbeat(b, "m-c", 0)
    b.advance(CG_SESSION_S - 1)
    cg_heartbeat(b, "m-a", 3, owned=None)
    b.advance(2)  # m-c's session ended
    assert [m.member_id for m in cg_describe(b).members] == ["m-a"]
    assert cg_heartbeat(b, "m-c", 4, owned=None).error_code == E["UNKNOWN_MEMBER_ID"]


def test_consumer_group_static_member_comes_back_to_its_partitions():
    """A static member (instance id) that leaves with epoch -2 keeps its partitions and
    place; rejoining with a new member id and the same instance id it gets them back without
    a new group epoch. While the instance id is held by an active member, another joiner
    with it gets UNRELEASED_INSTANCE_ID; a heartbeat from a replaced member id is
    FENCED_INSTANCE_ID."""
    b = Broker()
    cg_heartbeat(b, "a-1", 0, instance="i-a")
    cg_heartbeat(b, "b-1", 0, instance="i-b")
    cg_heartbeat(b, "a-1", 1, owned=[0, 1, 2, 3], instance="i-a")
    cg_heartbeat(b, "a-1", 1, owned=[2, 3], instance="i-a")
    assert partitions(cg_heartbeat(b, "b-1", 2, owned=[], instance="i-b")) == [0, 1]
    taken = cg_heartbeat(b, "b-2", 0, instance="i-b")
    assert taken.error_code == by_name("UNRELEASED_INSTANCE_ID").code
    away = cg_heartbeat(b, "b-1", -2, owned=None, instance="i-b")
    assert (away.error_code, away.member_epoch) == (NONE, -2)
    epoch = cg_describe(b).group_epoch
    back = cg_heartbeat(b, "b-2", 0, instance="i-b")
    assert (back.member_epoch, partitions(back)) == (epoch, [0, 1])
    assert cg_describe(b).group_epoch == epoch
    stale = cg_heartbeat(b, "b-1", 2, owned=[0, 1], instance="i-b")
    assert stale.error_code == E["FENCED_INSTANCE_ID"]


def test_consumer_group_rebalance_timeout_fences_a_member_that_does_not_revoke():
    """A member asked to revoke partitions that still owns them after its rebalance timeout
    is fenced, and the partitions go to the others."""
    b = Broker()
    cg_heartbeat(b, "m-a", 0, rebalance_ms=10_000)
    cg_heartbeat(b, "m-b", 0)
    assert partitions(cg_heartbeat(b, "m-a", 1, owned=[0, 1, 2, 3])) == [2, 3]
    for _ in range(2):  # 8 s: both heartbeat, m-a still owns what it should give up
        b.advance(4)
        assert cg_heartbeat(b, "m-b", 2, owned=[]).assignment is None
        assert cg_heartbeat(b, "m-a", 1, owned=[0, 1, 2, 3]).error_code == NONE
    b.advance(4)  # past m-a's 10 s rebalance timeout
    assert [m.member_id for m in cg_describe(b).members] == ["m-b"]
    taken_over = cg_heartbeat(b, "m-b", 2, owned=[])
    assert (taken_over.member_epoch, partitions(taken_over)) == (3, [0, 1, 2, 3])
    assert cg_heartbeat(b, "m-a", 1, owned=[2, 3]).error_code == E["UNKNOWN_MEMBER_ID"]


def test_consumer_group_heartbeat_errors():
    """INVALID_REQUEST (v1 needs a member id; a first heartbeat needs a subscription),
    UNSUPPORTED_ASSIGNOR, FENCED_MEMBER_EPOCH for an epoch ahead of the coordinator's,
    UNKNOWN_MEMBER_ID, GROUP_ID_NOT_FOUND for a non-empty classic group of that id; v0 makes
    the member id when the client sends none."""
    b = Broker()
    assert cg_heartbeat(b, "", 0).error_code == by_name("INVALID_REQUEST").code
    assert cg_heartbeat(b, "m", 0, topics=[]).error_code == by_name("INVALID_REQUEST").code
    assert (
        cg_heartbeat(b, "m", 0, assignor="sticky").error_code
        == by_name("UNSUPPORTED_ASSIGNOR").code
    )
    made = cg_heartbeat(b, "", 0, version=0)
    assert made.error_code == NONE and len(made.member_id) == 22
    assert (
        cg_heartbeat(b, made.member_id, 5, owned=None).error_code
        == by_name("FENCED_MEMBER_EPOCH").code
    )
    assert cg_heartbeat(b, "stranger", 1, owned=None).error_code == E["UNKNOWN_MEMBER_ID"]
    stable_group(b, [None])
    classic = cg_heartbeat(b, "m", 0, group="g")
    assert classic.error_code == E["GROUP_ID_NOT_FOUND"]


def test_consumer_group_range_assignor_and_regex_subscription():
    """ServerAssignor "range" splits each topic in contiguous ranges by member id; a v1
    subscription by regular expression (RE2, as Kafka's) takes every topic whose whole name
    matches; a pattern RE2 cannot compile is INVALID_REGULAR_EXPRESSION."""
    pytest.importorskip("re2")
    b = Broker()
    bad = cg_heartbeat(b, "m", 0, topics=[], regex="(")
    assert bad.error_code == by_name("INVALID_REGULAR_EXPRESSION").code
    assert "missing )" in bad.error_message
    cg_heartbeat(b, "m-b", 0, assignor="range", topics=[], regex="ord.*|aud.*")
    cg_heartbeat(b, "m-a", 0, assignor="range", topics=["orders"])
    group = cg_describe(b)
    assert group.assignor_name == "range"
    target = {
        m.member_id: {t.topic_name: t.partitions for t in m.target_assignment.topic_partitions}
        for m in group.members
    }
    assert target == {"m-a": {"orders": [0, 1]}, "m-b": {"audit": [0], "orders": [2, 3]}}
    assert group.members[0].subscribed_topic_regex == "ord.*|aud.*"


def test_consumer_group_offsets_and_admin_apis():
    """OffsetCommit v9 from a KIP-848 member carries its member epoch: STALE_MEMBER_EPOCH for
    another; OffsetFetch v9 with a member id and epoch is checked likewise; ListGroups gives
    the group type "consumer"; DeleteGroups refuses it while it has members."""
    b = Broker()
    cg_heartbeat(b, "m-a", 0)
    assert commit(b, {("orders", 0): 7}, group="cg", generation=1, member_id="m-a") == {
        ("orders", 0): NONE
    }
    assert (
        commit(b, {("orders", 0): 8}, group="cg", generation=2, member_id="m-a")[("orders", 0)]
        == by_name("STALE_MEMBER_EPOCH").code
    )
    fetch_as = OffsetFetchRequest(
        groups=[
            OffsetFetchRequest.OffsetFetchRequestGroup(
                group_id="cg", member_id="m-a", member_epoch=0, topics=None
            )
        ]
    )
    assert b.call(fetch_as, 9).groups[0].error_code == by_name("STALE_MEMBER_EPOCH").code
    assert fetch(b, {"orders": [0]}, group="cg") == {("orders", 0): (7, "", NONE)}
    listed = b.call(ListGroupsRequest(states_filter=[], types_filter=["consumer"]), 5).groups
    assert [(g.group_id, g.group_type, g.protocol_type, g.group_state) for g in listed] == [
        ("cg", "consumer", "consumer", "Stable")
    ]
    deleted = b.call(DeleteGroupsRequest(groups_names=["cg"]), 2).results[0]
    assert deleted.error_code == E["NON_EMPTY_GROUP"]
    cg_heartbeat(b, "m-a", -1, owned=None)
    assert b.call(DeleteGroupsRequest(groups_names=["cg"]), 2).results[0].error_code == NONE


def test_admin_describes_a_consumer_group_through_consumer_group_describe():
    """fastkwire's describe-group asks ConsumerGroupDescribe first: a KIP-848 group is shown
    from it (members with their assignments by topic name)."""
    b = Broker()
    cg_heartbeat(b, "m-a", 0, instance="i-a")
    group = run_admin(b, AdminClient("127.0.0.1:9092")._describe_call("cg"))
    assert (group.state, group.protocol_type, group.protocol) == ("Stable", "consumer", "uniform")
    assert [(m.member_id, m.group_instance_id, m.assignment) for m in group.members] == [
        ("m-a", "i-a", {"orders": [0, 1, 2, 3]})
    ]


def test_consumer_group_regex_cannot_stall_the_coordinator():
    """A pattern that backtracks exponentially in Python's re ("(a|a)*b" on a long name) is
    matched by RE2 in linear time: the heartbeat is answered (no topic matches)."""
    pytest.importorskip("re2")
    b = Broker(topics={"a" * 200: 1, "orders": 4})
    answer = cg_heartbeat(b, "m", 0, topics=[], regex="(a|a)*b")
    assert (answer.error_code, answer.member_epoch, answer.assignment.topic_partitions) == (
        NONE,
        1,
        [],
    )


def test_consumer_group_regex_without_re2_names_the_extra(monkeypatch):
    """Without the broker extra (google-re2), a regex subscription is refused with
    INVALID_REQUEST naming the extra to install, as Kafka refused regexes it did not serve."""
    from fastkwire.broker import _consumer_groups

    monkeypatch.setattr(_consumer_groups, "re2", None)
    _consumer_groups._pattern.cache_clear()
    try:
        answer = cg_heartbeat(Broker(), "m", 0, topics=[], regex="ord.*")
    finally:
        _consumer_groups._pattern.cache_clear()
    assert answer.error_code == by_name("INVALID_REQUEST").code
    assert "fastkwire[broker]" in answer.error_message


def test_zero_rebalance_timeout_does_not_spin_the_timers():
    """A rebalance nobody rejoins waits for session timeouts; with members whose rebalance
    timeout is 0 (set by static rejoins, which need no rebalance) the coordinator still asks
    to be woken no sooner than a second later, not at once again and again (which would
    busy-loop the broker's event loop)."""
    b = Broker()
    generation, (a, c, d) = stable_group(b, ["i-a", "i-b", "i-c"])
    for instance in ("i-a", "i-b"):
        assert join(b, instance=instance, rebalance_ms=0)[0].generation_id == generation
    assert leave(b, [("", "i-c")]).members[0].error_code == NONE  # nobody rejoins
    assert describe(b).group_state == "PreparingRebalance"
    deadlines = [b.advance(0.001) for _ in range(3)]
    assert all(d is not None and d >= b.now + 0.9 for d in deadlines)
    assert describe(b).group_state == "PreparingRebalance"


def txn_commit(b, offsets, producer_id=7, group="g", generation=-1, member_id="", version=3):
    request = TxnOffsetCommitRequest(
        transactional_id="tx",
        group_id=group,
        producer_id=producer_id,
        producer_epoch=0,
        generation_id=generation,
        member_id=member_id,
        topics=[
            TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                        partition_index=partition, committed_offset=offset, committed_metadata=""
                    )
                ],
            )
            for (topic, partition), offset in offsets.items()
        ],
    )
    answer = b.call(request, version)
    return {(t.name, p.partition_index): p.error_code for t in answer.topics for p in t.partitions}


def test_transactional_offsets_wait_for_the_end_of_their_transaction():
    """TxnOffsetCommit (a transactional producer's sendOffsetsToTransaction): the offsets are
    invisible until the transaction commits (end_transaction, called by the transaction
    coordinator on EndTxn) and dropped if it aborts; meanwhile OffsetFetch v7+ asking for
    stable offsets gets UNSTABLE_OFFSET_COMMIT for those partitions. A member's commit is
    checked against its generation (ILLEGAL_GENERATION), and unlike OffsetCommit one without
    a generation is accepted by a group with members."""
    b = Broker()
    generation, (a,) = stable_group(b, [None])
    assert txn_commit(b, {("orders", 0): 5}, generation=generation, member_id=a) == {
        ("orders", 0): NONE
    }
    assert txn_commit(b, {("orders", 1): 6}, producer_id=8) == {("orders", 1): NONE}
    assert txn_commit(b, {("orders", 2): 6}, generation=generation + 1, member_id=a) == {
        ("orders", 2): E["ILLEGAL_GENERATION"]
    }
    assert txn_commit(b, {("nope", 0): 1}) == {("nope", 0): E["UNKNOWN_TOPIC_OR_PARTITION"]}
    assert fetch(b, {"orders": [0, 1]}) == {
        ("orders", 0): (-1, "", NONE),
        ("orders", 1): (-1, "", NONE),
    }
    stable = OffsetFetchRequest(
        groups=[OffsetFetchRequest.OffsetFetchRequestGroup(group_id="g", topics=None)],
        require_stable=True,
    )
    assert b.call(stable, 8).groups[0].topics == []  # nothing committed yet
    asked = OffsetFetchRequest(
        group_id="g",
        topics=[
            OffsetFetchRequest.OffsetFetchRequestTopic(name="orders", partition_indexes=[0, 2])
        ],
        require_stable=True,
    )
    rows = b.call(asked, 7).topics[0].partitions
    assert [(r.partition_index, r.committed_offset, r.error_code) for r in rows] == [
        (0, -1, by_name("UNSTABLE_OFFSET_COMMIT").code),
        (2, -1, NONE),
    ]
    b.coordinator.end_transaction(7, committed=True)
    b.coordinator.end_transaction(8, committed=False)
    assert fetch(b, {"orders": [0, 1]}) == {
        ("orders", 0): (5, "", NONE),
        ("orders", 1): (-1, "", NONE),
    }
    rows = b.call(asked, 7).topics[0].partitions
    assert [(r.partition_index, r.committed_offset, r.error_code) for r in rows] == [
        (0, 5, NONE),
        (2, -1, NONE),
    ]


# ---------------------------------------------------------------- random sequences


def _pick(data, options):
    return data.draw(st.sampled_from(options))


def _random_step(b, data, seen):
    """One random request (or a step of the clock) from a small world of groups, ids and
    generations, so that requests meet each other's state; returns the answer list."""
    group = _pick(data, ["g", "h", ""])
    # Ids by their order of appearance (their values are random), so that a test case draws
    # the same way each time Hypothesis replays it.
    known = ["", "bogus", *seen["members"]]
    member = known[data.draw(st.integers(0, 9)) % len(known)]
    instance = _pick(data, [None, "i0", "i1"])
    generation = _pick(data, [-1, 0, 1, 2, 3, 4])
    kind = _pick(
        data,
        [
            "join",
            "join",
            "sync",
            "heartbeat",
            "leave",
            "commit",
            "txn",
            "fetch",
            "admin",
            "cg",
            "cg",
            "advance",
            "end_txn",
        ],
    )
    if kind == "join":
        version = _pick(data, [0, 3, 4, 5, 7, 9])
        return join(
            b,
            group=group,
            member_id=member,
            instance=instance if version >= 5 else None,
            version=version,
            session_ms=_pick(data, [6000, 10_000, 5]),
            rebalance_ms=_pick(data, [0, 1000, 30_000]),
            protocols=protocols(names=_pick(data, [("range",), ("roundrobin", "range")])),
        )
    if kind == "sync":
        plan = {member: {"orders": [0]}} if data.draw(st.booleans()) else {}
        version = _pick(data, [0, 3, 4, 5])
        return sync(
            b,
            member,
            generation,
            plan,
            group=group,
            instance=instance if version >= 3 else None,
            version=version,
        )
    if kind == "heartbeat":
        version = _pick(data, [0, 3, 4])
        request = HeartbeatRequest(
            group_id=group,
            generation_id=generation,
            member_id=member,
            group_instance_id=instance if version >= 3 else None,
        )
        return b.send(request, version)
    if kind == "leave":
        return [leave(b, [(member, instance)], group=group, version=_pick(data, [3, 5]))]
    if kind == "commit":
        version = _pick(data, [2, 7, 9])
        return [
            commit(
                b,
                {("orders", 0): 1, ("nope", 0): 1},
                group=group,
                generation=generation,
                member_id=member,
                instance=instance if version >= 7 else None,
                version=version,
            )
        ]
    if kind == "txn":
        return [
            txn_commit(
                b,
                {("orders", 1): 2},
                producer_id=_pick(data, [1, 2]),
                group=group,
                generation=generation,
                member_id=member,
                version=3,
            )
        ]
    if kind == "end_txn":
        b.coordinator.end_transaction(_pick(data, [1, 2]), data.draw(st.booleans()))
        return [None]
    if kind == "fetch":
        version = _pick(data, [2, 7, 8, 9])
        return [fetch(b, _pick(data, [None, {"orders": [0, 1]}]), group=group, version=version)]
    if kind == "admin":
        request = _pick(
            data,
            [
                ListGroupsRequest(states_filter=[], types_filter=[]),
                DescribeGroupsRequest(groups=[group, "cg"]),
                DeleteGroupsRequest(groups_names=[group]),
                ConsumerGroupDescribeRequest(group_ids=[group, "cg"]),
            ],
        )
        return b.send(request, type(request).MAX_VERSION)
    if kind == "cg":
        epoch = _pick(data, [0, 0, 1, 2, -1, -2, 5])
        owned = _pick(data, [None, (), (0, 1), (2, 3)])
        return (
            [
                cg_heartbeat(
                    b,
                    member or "",
                    epoch,
                    owned=None if epoch else (),
                    group=_pick(data, ["cg", group]),
                    instance=instance,
                    topics=["orders"] if epoch == 0 else None,
                    rebalance_ms=REBALANCE_MS if epoch == 0 else -1,
                    version=1 if member else 0,
                )
            ]
            if epoch or owned is None
            else [None]
        )
    b.advance(_pick(data, [0.0, 0.5, 3.0, 11.0, 46.0]))
    return [None]


def _check_consistent(coordinator):
    for group in coordinator.groups.values():
        instances = {m.member_id: m.instance_id for m in group.members.values()}
        assert all(instances.get(m) == i for i, m in group.static.items()), (
            group.static,
            instances,
        )
        assert group.leader is None or group.leader in group.members
        assert group.pending_sync <= set(group.members)
        assert not group.members or group.protocol_type is not None
    for group in coordinator.consumer.groups.values():
        instances = {m.member_id: m.instance_id for m in group.members.values()}
        assert all(instances.get(m) == i for i, m in group.static.items()), (
            group.static,
            instances,
        )
        owners = {}
        for m in group.members.values():
            for parts in (m.assigned, m.revoking):
                for tid, ps in parts.items():
                    for p in ps:
                        assert (tid, p) not in owners, "a partition owned twice"
                        owners[(tid, p)] = m.member_id


def _random_sequence(data):
    b = Broker()
    seen = {"members": []}
    waiting = []
    for _ in range(data.draw(st.integers(1, 40))):
        answers = _random_step(b, data, seen)
        waiting.append(answers)
        for answers in waiting:
            for a in answers:
                member_id = getattr(a, "member_id", None)
                if member_id and member_id not in seen["members"]:
                    seen["members"].append(member_id)
        _check_consistent(b.coordinator)
    for _ in range(20):  # every parked request is answered once the timeouts have passed
        b.advance(400.0)
    assert all(len(a) == 1 for a in waiting)


SEQUENCES = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
SEQUENCES_LONG = settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))


@SEQUENCES
@given(st.data())
def test_random_request_sequences(data):
    """Random interleavings of every group API from a handful of ids, generations and
    versions, with the clock moving: the coordinator never raises, answers each request
    exactly once with an answer that encodes at its version (the harness checks both), keeps
    its maps consistent (instance ids, leader, pending syncs; no partition owned by two
    KIP-848 members), and answers every parked request once the timeouts have passed."""
    _random_sequence(data)


@pytest.mark.slow
@SEQUENCES_LONG
@given(st.data())
def test_random_request_sequences_long(data):
    _random_sequence(data)


def test_consumer_group_member_moving_to_another_instance_id():
    """A known member id joining again under another group.instance.id is that member, now
    under the new instance id: the old instance id no longer maps to it (found by the random
    sequences: the map kept both)."""
    b = Broker()
    cg_heartbeat(b, "m", 0, instance="i1")
    moved = cg_heartbeat(b, "m", 0, instance="i0")
    assert moved.error_code == NONE
    assert b.coordinator.consumer.groups["cg"].static == {"i0": "m"}
    assert cg_heartbeat(b, "other", 0, instance="i1").error_code == NONE
    assert [(m.member_id, m.instance_id) for m in cg_describe(b).members] == [
        ("m", "i0"),
        ("other", "i1"),
    ]


def test_consumer_group_static_member_removed_by_instance_id_with_leave_group():
    """LeaveGroup v3+ to a KIP-848 group, as Kafka's classicGroupLeaveToConsumerGroup answers
    it (the admin client's removal): a static member named by group.instance.id alone is
    removed and answered with its member id, and the group epoch moves on so the others
    take its partitions; an unknown instance id is UNKNOWN_MEMBER_ID, a member id that is not
    the instance's FENCED_INSTANCE_ID, and a consumer-protocol member named by its own
    member id UNKNOWN_MEMBER_ID (LeaveGroup by member id is for classic-protocol members)."""
    b = Broker()
    cg_heartbeat(b, "m-a", 0, instance="i-a")
    cg_heartbeat(b, "m-b", 0, instance="i-b")
    assert partitions(cg_heartbeat(b, "m-a", 1, owned=[0, 1, 2, 3])) == [2, 3]  # gives up 0, 1
    cg_heartbeat(b, "m-a", 1, owned=[2, 3])
    assert partitions(cg_heartbeat(b, "m-b", 2, owned=[])) == [0, 1]
    M = LeaveGroupRequest.MemberIdentity
    answer = b.call(
        LeaveGroupRequest(
            group_id="cg",
            members=[
                M(member_id="", group_instance_id="i-b"),
                M(member_id="", group_instance_id="ghost"),
                M(member_id="other", group_instance_id="i-a"),
                M(member_id="m-a", group_instance_id="i-a"),
            ],
        ),
        5,
    )
    assert [(m.member_id, m.group_instance_id, m.error_code) for m in answer.members] == [
        ("m-b", "i-b", NONE),
        ("", "ghost", E["UNKNOWN_MEMBER_ID"]),
        ("other", "i-a", E["FENCED_INSTANCE_ID"]),
        ("m-a", "i-a", E["UNKNOWN_MEMBER_ID"]),
    ]
    group = cg_describe(b)
    assert [m.member_id for m in group.members] == ["m-a"] and group.group_epoch == 3
    everything = cg_heartbeat(b, "m-a", 2, owned=[2, 3])
    assert (everything.member_epoch, partitions(everything)) == (3, [0, 1, 2, 3])

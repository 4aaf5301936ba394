"""KIP-1071 streams groups in the broker's group coordinator (fastkwire.broker._streams_groups),
driven directly on a fake clock through the codec on both sides (test_broker_groups.py's
`Broker`): StreamsGroupHeartbeat joins, tasks made from the topology, the sticky active-task
assignment and its reconciliation, the group's readiness, leaving, timeouts, errors, and
StreamsGroupDescribe. The Kafka behaviour each test pins is in its docstring."""

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastkwire import (
    ConsumerGroupHeartbeatRequest,
    ListGroupsRequest,
    OffsetCommitRequest,
    StreamsGroupDescribeRequest,
    StreamsGroupHeartbeatRequest,
)
from fastkwire.broker._streams_groups import sticky_assignment
from fastkwire.error_codes import by_name

from test_broker_groups import NONE, Broker

pytest.importorskip("fastkwire.broker._streams_groups")

E = {
    n: by_name(n).code
    for n in (
        "FENCED_MEMBER_EPOCH",
        "GROUP_ID_NOT_FOUND",
        "INVALID_REQUEST",
        "STALE_MEMBER_EPOCH",
        "STREAMS_INVALID_TOPOLOGY",
        "UNKNOWN_MEMBER_ID",
        "UNRELEASED_INSTANCE_ID",
    )
}
R = StreamsGroupHeartbeatRequest
SESSION_S, REBALANCE_MS = 45.0, 30_000


def topology(epoch=1, sources=("orders",), changelogs=(), copartitioned=False):
    return R.Topology(
        epoch=epoch,
        subtopologies=[
            R.Subtopology(
                subtopology_id="0",
                source_topics=list(sources),
                source_topic_regex=[],
                state_changelog_topics=[
                    R.TopicInfo(name=n, partitions=0, replication_factor=0, topic_configs=[])
                    for n in changelogs
                ],
                repartition_sink_topics=[],
                repartition_source_topics=[],
                copartition_groups=[
                    R.CopartitionGroup(
                        source_topics=list(range(len(sources))),
                        source_topic_regex=[],
                        repartition_source_topics=[],
                    )
                ]
                if copartitioned
                else [],
            )
        ],
    )


def hb(b, member_id, epoch, tasks=(), group="sg", **kw):
    """A StreamsGroupHeartbeat; `tasks`: the active tasks (partitions of subtopology "0") the
    member runs (None: not sent). Epoch 0 sends what a join sends."""
    joining = epoch == 0
    active = (
        None
        if tasks is None
        else ([R.TaskIds(subtopology_id="0", partitions=list(tasks))] if tasks else [])
    )
    request = R(
        group_id=group,
        member_id=member_id,
        member_epoch=epoch,
        endpoint_information_epoch=0,
        instance_id=kw.pop("instance", None),
        rebalance_timeout_ms=kw.pop("rebalance_ms", REBALANCE_MS if joining else -1),
        topology=kw.pop("topology", topology() if joining else None),
        active_tasks=active,
        standby_tasks=[] if joining else None,
        warmup_tasks=[] if joining else None,
        process_id=kw.pop("process", "p-" + member_id) if joining else None,
    )
    assert not kw
    return b.call(request, 0)


def active(answer):
    """The partitions of subtopology "0" the answer assigns; None when it sent none."""
    if answer.active_tasks is None:
        return None
    return sorted(p for t in answer.active_tasks if t.subtopology_id == "0" for p in t.partitions)


def describe(b, group="sg"):
    request = StreamsGroupDescribeRequest(group_ids=[group], include_authorized_operations=False)
    return b.call(request, 0).groups[0]


def statuses(answer):
    return [(s.status_code, s.status_detail) for s in answer.status or ()]


def test_a_topology_naming_internal_or_invalid_topics_is_refused_first():
    """As Kafka's KafkaApis, before its coordinator: a topology naming an internal topic
    (Topic.isInternal) or an invalid topic name is STREAMS_INVALID_TOPOLOGY with Kafka's
    message listing them once each in the order named, nothing else set, and no group made.
    Internal topics are reported before invalid names."""
    b = Broker()
    bad = topology(sources=("__consumer_offsets", "a b"), changelogs=("__transaction_state",))
    answer = hb(b, "m-a", 0, topology=bad)
    assert (answer.error_code, answer.error_message) == (
        E["STREAMS_INVALID_TOPOLOGY"],
        "Use of Kafka internal topics __consumer_offsets,__transaction_state in a Kafka "
        "Streams topology is prohibited.",
    )
    assert (answer.member_id, answer.member_epoch, answer.heartbeat_interval_ms) == ("", 0, 0)
    answer = hb(b, "m-a", 0, topology=topology(sources=("a b", "ok", "c?"), changelogs=("a b",)))
    assert (answer.error_code, answer.error_message) == (
        E["STREAMS_INVALID_TOPOLOGY"],
        "Topic names a b,c? are not valid topic names.",
    )
    assert describe(b).error_code == E["GROUP_ID_NOT_FOUND"]
    assert hb(b, "m-a", 0).error_code == NONE  # a valid topology then joins


def test_first_member_gets_every_task():
    """A member joins with its own member id, a topology and epoch 0: one task per partition of
    the subtopology's source topic, all its own; the group epoch becomes 1, and the answer
    carries Kafka's intervals (heartbeat 5 s, task offsets 60 s, recovery lag 10000) and no
    status. An unchanged assignment is not sent again. StreamsGroupDescribe shows the group
    Stable, its topology, and the member's assignment and target."""
    b = Broker()
    answer = hb(b, "m-a", 0)
    assert (answer.error_code, answer.member_id, answer.member_epoch) == (NONE, "m-a", 1)
    assert (
        answer.heartbeat_interval_ms,
        answer.task_offset_interval_ms,
        answer.acceptable_recovery_lag,
    ) == (5000, 60_000, 10_000)
    assert active(answer) == [0, 1, 2, 3] and answer.standby_tasks == [] and statuses(answer) == []
    again = hb(b, "m-a", 1, tasks=[0, 1, 2, 3])
    assert again.member_epoch == 1 and again.active_tasks is None
    group = describe(b)
    assert (group.error_code, group.group_state, group.group_epoch, group.assignment_epoch) == (
        NONE,
        "Stable",
        1,
        1,
    )
    assert group.topology.epoch == 1
    assert [(s.subtopology_id, s.source_topics) for s in group.topology.subtopologies] == [
        ("0", ["orders"])
    ]
    (m,) = group.members
    assert (m.member_id, m.member_epoch, m.process_id, m.client_id) == ("m-a", 1, "p-m-a", "client")
    assert [(t.subtopology_id, t.partitions) for t in m.assignment.active_tasks] == [
        ("0", [0, 1, 2, 3])
    ]
    assert m.target_assignment == m.assignment


def test_tasks_move_only_after_revocation():
    """A second member bumps the group epoch and the target splits the tasks, sticky for the
    first. The newcomer gets nothing the first still runs; the first is told to keep only its
    share (keeping its epoch until it stops reporting the rest), and only then do the rest
    go to the newcomer."""
    b = Broker()
    hb(b, "m-a", 0)
    joined = hb(b, "m-b", 0)
    assert (joined.member_epoch, active(joined)) == (2, [])
    assert describe(b).group_state == "Reconciling"
    revoke = hb(b, "m-a", 1, tasks=[0, 1, 2, 3])
    assert (revoke.member_epoch, active(revoke)) == (1, [0, 1])
    assert hb(b, "m-b", 2, tasks=[]).active_tasks is None  # nothing released yet
    revoked = hb(b, "m-a", 1, tasks=[0, 1])
    assert revoked.member_epoch == 2
    moved = hb(b, "m-b", 2, tasks=[])
    assert (moved.member_epoch, active(moved)) == (2, [2, 3])
    assert describe(b).group_state == "Stable"


def test_leave_session_timeout_and_rebalance_timeout_free_tasks():
    """Epoch -1 leaves: the group epoch is bumped and the other member takes every task. A
    member silent for the session timeout (45 s) is removed; one that does not give up its
    tasks within its rebalance timeout is fenced, and its tasks move."""
    b = Broker()
    hb(b, "m-a", 0)
    hb(b, "m-b", 0)
    hb(b, "m-a", 1, tasks=[0, 1, 2, 3])
    hb(b, "m-a", 1, tasks=[0, 1])
    hb(b, "m-b", 2, tasks=[])
    left = hb(b, "m-b", -1, tasks=None)
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    back = hb(b, "m-a", 2, tasks=[0, 1])
    assert (back.member_epoch, active(back)) == (3, [0, 1, 2, 3])

    hb(b, "m-c", 0)  # m-a must now give up two tasks
    assert active(hb(b, "m-a", 3, tasks=[0, 1, 2, 3])) == [0, 1]
    b.advance(REBALANCE_MS / 1000 + 1)  # m-a never gives them up: fenced at its rebalance timeout
    assert [m.member_id for m in describe(b).members] == ["m-c"]
    taken = hb(b, "m-c", 4, tasks=[])
    assert active(taken) == [0, 1, 2, 3]
    b.advance(SESSION_S + 1)
    assert describe(b).group_state == "Empty"


def test_a_group_is_not_ready_until_its_topics_exist():
    """Missing source or changelog topics leave the group NotReady with no tasks, and the
    heartbeat says why (MISSING_SOURCE_TOPICS 1, MISSING_INTERNAL_TOPICS 3); once the topics
    exist the next heartbeat bumps the group epoch and assigns. Source topics of one
    copartition group with different partition counts say INCORRECTLY_PARTITIONED_TOPICS."""
    b = Broker()
    answer = hb(b, "m-a", 0, topology=topology(sources=("clicks",), changelogs=("app-store",)))
    assert active(answer) == [] and describe(b).group_state == "NotReady"
    assert [c for c, _ in statuses(answer)] == [1, 3]
    assert "clicks" in statuses(answer)[0][1] and "app-store" in statuses(answer)[1][1]
    b.topics["clicks"] = (b.topics["orders"][0].__class__(int=99), 2)
    b.topics["app-store"] = (b.topics["orders"][0].__class__(int=98), 2)
    ready = hb(b, "m-a", 1, tasks=[])
    assert (ready.member_epoch, active(ready), statuses(ready)) == (2, [0, 1], [])
    odd = hb(
        b,
        "m-x",
        0,
        group="sg2",
        topology=topology(sources=("orders", "clicks"), copartitioned=True),
    )
    assert [c for c, _ in statuses(odd)] == [2] and active(odd) == []


def test_heartbeat_errors():
    """As Kafka's coordinator answers them: an empty member id or a join without topology
    is INVALID_REQUEST; source topics by regular expression are refused by name
    (STREAMS_INVALID_TOPOLOGY); an unknown member UNKNOWN_MEMBER_ID; a wrong epoch
    FENCED_MEMBER_EPOCH; an instance id in use UNRELEASED_INSTANCE_ID; a group id of a
    consumer group with members GROUP_ID_NOT_FOUND; StreamsGroupDescribe of a missing
    group GROUP_ID_NOT_FOUND."""
    b = Broker()
    assert hb(b, "", 0).error_code == E["INVALID_REQUEST"]
    assert hb(b, "m-a", 0, topology=None).error_code == E["INVALID_REQUEST"]
    regex = topology()
    regex.subtopologies[0].source_topic_regex = ["ord.*"]
    assert hb(b, "m-a", 0, topology=regex).error_code == E["STREAMS_INVALID_TOPOLOGY"]
    assert hb(b, "m-a", 1, tasks=[]).error_code == E["GROUP_ID_NOT_FOUND"]
    hb(b, "m-a", 0, instance="i-1")
    assert hb(b, "nobody", 1, tasks=[]).error_code == E["UNKNOWN_MEMBER_ID"]
    assert hb(b, "m-a", 7, tasks=[0, 1, 2, 3]).error_code == E["FENCED_MEMBER_EPOCH"]
    assert hb(b, "m-b", 0, instance="i-1").error_code == E["UNRELEASED_INSTANCE_ID"]
    b.call(
        ConsumerGroupHeartbeatRequest(
            group_id="cg",
            member_id="c-1",
            member_epoch=0,
            rebalance_timeout_ms=REBALANCE_MS,
            subscribed_topic_names=["orders"],
            topic_partitions=[],
        ),
        1,
    )
    assert hb(b, "m-z", 0, group="cg").error_code == E["GROUP_ID_NOT_FOUND"]
    missing = describe(b, "none")
    assert (missing.error_code, missing.error_message) == (
        E["GROUP_ID_NOT_FOUND"],
        "Group none not found.",
    )


def test_list_groups_and_offset_commits_of_a_streams_group():
    """ListGroups lists a streams group with type "streams"; OffsetCommit from a member is
    checked against its member epoch (STALE_MEMBER_EPOCH) and member id (UNKNOWN_MEMBER_ID)."""
    b = Broker()
    hb(b, "m-a", 0)
    listed = b.call(ListGroupsRequest(states_filter=[], types_filter=["streams"]), 5).groups
    assert [(g.group_id, g.protocol_type, g.group_state, g.group_type) for g in listed] == [
        ("sg", "streams", "Stable", "streams")
    ]

    def commit(member_id, epoch):
        request = OffsetCommitRequest(
            group_id="sg",
            generation_id_or_member_epoch=epoch,
            member_id=member_id,
            group_instance_id=None,
            topics=[
                OffsetCommitRequest.OffsetCommitRequestTopic(
                    name="orders",
                    partitions=[
                        OffsetCommitRequest.OffsetCommitRequestPartition(
                            partition_index=0,
                            committed_offset=5,
                            committed_leader_epoch=-1,
                            committed_metadata="",
                        )
                    ],
                )
            ],
        )
        return b.call(request, 9).topics[0].partitions[0].error_code

    assert commit("m-a", 1) == NONE
    assert commit("m-a", 0) == E["STALE_MEMBER_EPOCH"]
    assert commit("nobody", 1) == E["UNKNOWN_MEMBER_ID"]


def test_sticky_assignment_keeps_what_fits_and_balances_the_rest():
    tasks = {("0", p) for p in range(5)}
    out = sticky_assignment(tasks, ["a", "b"], {"a": set(tasks)})
    assert out == {"a": {("0", p) for p in range(3)}, "b": {("0", 3), ("0", 4)}}
    out = sticky_assignment(tasks, ["a", "b", "c"], {"c": {("0", 4), ("0", 0)}})
    assert sorted(len(v) for v in out.values()) == [1, 2, 2]
    assert out["c"] == {("0", 0), ("0", 4)} and set().union(*out.values()) == tasks
    assert sticky_assignment(tasks, [], {}) == {}


MEMBERS = ["m0", "m1", "m2"]


def _consistent(b):
    """No task held by two members; every held task is in the owners' map under its holder;
    no member's epoch past its group's."""
    for group in b.coordinator.streams.groups.values():
        held = {}
        for m in group.members.values():
            assert m.epoch <= group.group_epoch
            for s, ps in list(m.assigned.items()) + list(m.revoking.items()):
                for p in ps:
                    assert (s, p) not in held, (s, p, m.member_id, held[(s, p)])
                    held[(s, p)] = m.member_id
        assert held == group.owners


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_heartbeat_sequences_keep_tasks_owned_once(data):
    """Random joins, heartbeats (right, stale and made-up epochs; tasks reported right or
    wrong), leaves, topics growing and time passing: every request is answered once, in a
    frame that decodes at its version (the harness checks), and no task is ever held by two
    members."""
    b = Broker()
    epochs = {}
    for _ in range(data.draw(st.integers(1, 25))):
        op = data.draw(st.sampled_from(["join", "beat", "beat", "leave", "grow", "wait"]))
        member = data.draw(st.sampled_from(MEMBERS))
        if op == "join":
            answer = hb(b, member, 0, instance=data.draw(st.sampled_from([None, "i", member])))
        elif op == "beat":
            epoch = data.draw(st.sampled_from([epochs.get(member, 1), 0, 1, 99]))
            tasks = data.draw(st.one_of(st.none(), st.lists(st.integers(-1, 6), max_size=5)))
            if epoch == 0:
                answer = hb(b, member, 0)
            else:
                answer = hb(b, member, epoch, tasks=None if tasks is None else sorted(set(tasks)))
        elif op == "leave":
            answer = hb(b, member, data.draw(st.sampled_from([-1, -2])), tasks=None)
        elif op == "grow":
            tid, count = b.topics["orders"]
            b.topics["orders"] = (tid, count + 1)
            answer = None
        else:
            b.advance(data.draw(st.sampled_from([1.0, 31.0, 46.0])))
            answer = None
        if answer is not None and answer.error_code == NONE:
            epochs[member] = answer.member_epoch
        _consistent(b)


def test_other_protocols_do_not_join_a_streams_group_with_members():
    """JoinGroup to a streams group with members is INCONSISTENT_GROUP_PROTOCOL and a
    ConsumerGroupHeartbeat GROUP_ID_NOT_FOUND; once its members have left, the empty group
    gives way to a consumer group of the same id."""
    from test_broker_groups import join

    b = Broker()
    hb(b, "m-a", 0)
    (joined,) = join(b, group="sg", member_id="", version=3)
    assert joined.error_code == by_name("INCONSISTENT_GROUP_PROTOCOL").code

    def consumer_join():
        return b.call(
            ConsumerGroupHeartbeatRequest(
                group_id="sg",
                member_id="c-1",
                member_epoch=0,
                rebalance_timeout_ms=REBALANCE_MS,
                subscribed_topic_names=["orders"],
                topic_partitions=[],
            ),
            1,
        )

    assert consumer_join().error_code == E["GROUP_ID_NOT_FOUND"]
    hb(b, "m-a", -1, tasks=None)
    assert consumer_join().error_code == NONE
    assert "sg" not in b.coordinator.streams.groups

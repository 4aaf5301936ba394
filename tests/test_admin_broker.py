"""The admin client and CLI against a real group coordinator: fastkwire's broker
(fastkwire.testing.Broker), with real confluent-kafka members, static (group.instance.id)
and dynamic. Kafka's KIP-345 behaviour served here is no longer scripted: removal by
instance id, by member id and of everyone, the per-member errors (UNKNOWN_MEMBER_ID,
FENCED_INSTANCE_ID), describe-group for classic and KIP-848 groups, and the dry run. What a
broker cannot be made to do (moving and loading coordinators, dropped connections, old
versions, hostile answers) stays in test_admin_scripted.py and test_admin_hostile.py; Tansu
as the outside peer is test_admin_tansu.py."""

import asyncio
import itertools
import json
import time

import pytest

from fastkwire import cli
from fastkwire.admin import (
    AdminClient,
    AsyncAdminClient,
    FencedInstanceError,
    MemberRemovalError,
    UnknownInstanceError,
)
from fastkwire.testing import Broker

from broker import StaticGroup

pytest.importorskip("fastkwire.broker._groups", reason="no group coordinator in this tree")
pytest.importorskip("confluent_kafka", reason="the members are confluent-kafka consumers")

JOIN_TIMEOUT_S = 30
SESSION_TIMEOUT_MS = 60_000  # a removed member's partitions must move long before this
UNKNOWN_MEMBER_ID = 25
_names = itertools.count()


@pytest.fixture(scope="module")
def broker():
    with Broker() as b:
        yield b


@pytest.fixture(params=["sync", "async"])
def call(request, broker):
    def run(method, *args, **kwargs):
        if request.param == "sync":
            client = AdminClient(broker.bootstrap_servers, request_timeout_ms=10000)
            return getattr(client, method)(*args, **kwargs)

        async def go():
            client = AsyncAdminClient(broker.bootstrap_servers, request_timeout_ms=10000)
            return await getattr(client, method)(*args, **kwargs)

        return asyncio.run(go())

    return run


def formed(broker, static, dynamic=0):
    """A group of `static` members (instance ids NAME-instance-0...) and `dynamic` ones, each
    holding one partition of the group's own topic."""
    name = f"admin-{next(_names)}"
    group = StaticGroup(
        broker.bootstrap_servers,
        name,
        f"{name}-topic",
        static,
        session_timeout_ms=SESSION_TIMEOUT_MS,
        dynamic=dynamic,
    )
    try:
        assert group.wait_until(group.all_assigned, JOIN_TIMEOUT_S), [
            c.assignments for c in group.consumers
        ]
        assert group.wait_until(lambda: all(c.member_id() for c in group.consumers), 10)
    except BaseException:
        group.close()
        raise
    return group


@pytest.fixture
def make_group(broker):
    made = []

    def make(static, dynamic=0):
        made.append(formed(broker, static, dynamic))
        return made[-1]

    yield make
    for group in made:
        group.close()


def held_by(consumers, since):
    """The partitions `consumers` were last assigned, if every one was assigned after
    `since`; else None."""
    latest = [c.last_assignment() for c in consumers]
    if not all(a is not None and a[0] >= since for a in latest):
        return None
    return sorted(p for _, parts in latest for p in parts)


def test_removes_static_members_by_instance_id(broker, call, make_group):
    group = make_group(2)
    victim, survivor = group.consumers
    victim.pause_polling()  # silent from now on: as a process that crashed
    paused = time.monotonic()

    result = call("remove_members_from_group", group.group, [victim.instance_id, "ghost"], "why")

    assert result.leave_group_version == 5
    assert result.coordinator.port == int(broker.bootstrap_servers.rsplit(":", 1)[1])
    assert result.removed == [victim.instance_id]
    assert [(m.group_instance_id, m.error_code) for m in result.members] == [
        (victim.instance_id, 0),
        ("ghost", UNKNOWN_MEMBER_ID),
    ]
    ghost = result.failed["ghost"]
    assert (ghost.error_code, ghost.error_name, ghost.ok) == (
        UNKNOWN_MEMBER_ID,
        "UNKNOWN_MEMBER_ID",
        False,
    )
    with pytest.raises(UnknownInstanceError, match="ghost.*UNKNOWN_MEMBER_ID") as info:
        result.all()
    assert info.value.member is ghost
    data = json.loads(json.dumps(result.to_dict()))
    assert data["removed"] == [victim.instance_id] and data["failed"] == ["ghost"]
    assert [m["removed"] for m in data["members"]] == [True, False]

    # The coordinator rebalanced at once: the survivor holds both partitions within seconds.
    assert group.wait_until(lambda: held_by([survivor], paused) == [0, 1], 10), survivor.assignments
    # A member removed once is unknown the second time.
    again = call("remove_members_from_group", group.group, [victim.instance_id])
    assert again.removed == [] and again.failed[victim.instance_id].error_code == UNKNOWN_MEMBER_ID


def test_a_wrong_member_id_for_an_instance_is_fenced(call, make_group):
    group = make_group(2)
    first, second = group.consumers
    second.pause_polling()
    result = call(
        "leave_group", group.group, [("someone-else", first.instance_id), ("", second.instance_id)]
    )
    assert result.removed == [second.instance_id]
    assert result.failed[first.instance_id].error_name == "FENCED_INSTANCE_ID"
    with pytest.raises(FencedInstanceError, match="FENCED_INSTANCE_ID") as info:
        result.all()
    assert isinstance(info.value, MemberRemovalError)
    described = call("describe_group", group.group)
    assert [m.group_instance_id for m in described.members] == [first.instance_id]


def test_describe_a_classic_group(broker, call, make_group):
    group = make_group(2, dynamic=1)
    d = call("describe_group", group.group)
    assert (d.group_id, d.state, d.protocol_type, d.api) == (
        group.group,
        "Stable",
        "consumer",
        "DescribeGroups v6",
    )
    assert d.protocol == "range"  # confluent-kafka's first assignor
    assert d.coordinator.address == broker.bootstrap_servers
    by_member = {c.member_id(): c for c in group.consumers}
    assert sorted(m.member_id for m in d.members) == sorted(by_member)
    for m in d.members:
        consumer = by_member[m.member_id]
        assert m.group_instance_id == consumer.instance_id
        assert m.client_host == "/127.0.0.1"
        assert m.client_id == "rdkafka"
        assert m.assignment == {group.topic: consumer.last_assignment()[1]}


def test_describe_a_kip848_group_with_consumer_group_describe(broker, call):
    ck = pytest.importorskip("confluent_kafka")
    name = f"admin-{next(_names)}"
    broker.create_topic(name, partitions=3)
    consumer = ck.Consumer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "group.id": name,
            "group.protocol": "consumer",
            "group.instance.id": "kip848-a",
        }
    )
    try:
        consumer.subscribe([name])
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while len(consumer.assignment()) < 3 and time.monotonic() < deadline:
            consumer.poll(0.1)
        assert len(consumer.assignment()) == 3
        d = call("describe_group", name)
        assert (d.api, d.state, d.protocol_type, d.protocol) == (
            "ConsumerGroupDescribe v1",
            "Stable",
            "consumer",
            "uniform",
        )
        assert [(m.member_id, m.group_instance_id, m.assignment) for m in d.members] == [
            (consumer.memberid(), "kip848-a", {name: [0, 1, 2]})
        ]
    finally:
        consumer.close()


def test_remove_by_member_id_and_instance_id(call, make_group):
    group = make_group(2, dynamic=2)
    static_gone, static_kept, dynamic_gone, dynamic_kept = group.consumers
    for consumer in (static_gone, dynamic_gone):
        consumer.pause_polling()
    result = call(
        "remove_members",
        group.group,
        [static_gone.instance_id],
        [dynamic_gone.member_id(), "ghost"],
    )
    assert result.removed == [static_gone.instance_id, dynamic_gone.member_id()]
    assert list(result.failed) == ["ghost"]
    left = call("describe_group", group.group).members
    assert sorted(m.member_id for m in left) == sorted(
        [static_kept.member_id(), dynamic_kept.member_id()]
    )


def test_plan_then_remove_everyone(call, make_group):
    group = make_group(2, dynamic=1)
    static_a, static_b, dynamic = group.consumers
    plan = call("plan_removal", group.group, [static_a.instance_id, "ghost"], ["nobody"])
    assert plan.members == [("", static_a.instance_id)]
    assert plan.missing_instance_ids == ["ghost"] and plan.missing_member_ids == ["nobody"]
    everyone = call("plan_removal", group.group, remove_all=True).members
    # As Kafka's Admin does: every member by member id, with its instance id when it has one.
    assert sorted(everyone, key=str) == sorted(
        [(c.member_id(), c.instance_id) for c in group.consumers], key=str
    )
    assert len(call("describe_group", group.group).members) == 3  # the plan sent nothing

    for consumer in group.consumers:
        consumer.pause_polling()
    result = call("remove_members", group.group, remove_all=True, reason="drain")
    assert sorted(result.removed, key=str) == sorted(
        [static_a.instance_id, static_b.instance_id, dynamic.member_id()]
    )
    assert not result.failed
    d = call("describe_group", group.group)
    assert d.state == "Empty" and d.members == []
    empty = call("remove_members", group.group, remove_all=True)
    assert empty.members == []


def run_main(capsys, argv):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_describe_dry_run_and_removals(broker, make_group, capsys):
    group = make_group(2, dynamic=1)
    static_a, static_b, dynamic = group.consumers
    base = ["--bootstrap-server", broker.bootstrap_servers, "--group", group.group]

    code, out, err = run_main(capsys, ["describe-group", *base])
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == (
        f"Group '{group.group}': state Stable, protocol consumer/range, coordinator "
        f"{broker.bootstrap_servers} (node 0), 3 members (DescribeGroups v6)"
    )
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    assert rows[static_a.member_id()][:3] == [static_a.instance_id, "rdkafka", "/127.0.0.1"]
    assert rows[dynamic.member_id()][0] == "-"

    argv = ["remove-members", *base, "--instance-id", static_a.instance_id]
    code, out, err = run_main(capsys, argv + ["--instance-id", "ghost", "--dry-run"])
    assert code == 0 and err == ""
    assert "Dry run: nothing was sent." in out
    assert "Not in the group: group.instance.id 'ghost'" in out
    code, out, _ = run_main(capsys, argv + ["--dry-run", "--json"])
    assert json.loads(out)["would_remove"] == [
        {"member_id": "", "group_instance_id": static_a.instance_id}
    ]
    assert len(run_main(capsys, ["describe-group", *base, "--json"])[1].split('"member_id"')) == 4

    dynamic.pause_polling()
    code, out, _ = run_main(capsys, ["remove-members", *base, "--member-id", dynamic.member_id()])
    assert code == 0 and "1 of 1 members removed." in out

    static_a.pause_polling()
    static_b.pause_polling()
    code, out, _ = run_main(capsys, ["remove-members", *base, "--all", "--json"])
    data = json.loads(out)
    assert code == 0 and sorted(data["removed"]) == [static_a.instance_id, static_b.instance_id]
    code, out, _ = run_main(capsys, ["remove-members", *base, "--all"])
    assert code == 0 and "the group has no members, nothing was removed" in out

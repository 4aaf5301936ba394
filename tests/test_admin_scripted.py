"""The admin client and CLI against scripted brokers (tests/fakes.py) that play Apache
Kafka's KIP-345 behaviour and inject faults (moving coordinators, loading coordinators,
dropped, reset, slow and silent connections, brokers too old for LeaveGroup v3).
Hostile brokers are in test_admin_hostile.py."""

import asyncio
import json
import time

import pytest

from fastkwire import LeaveGroupResponse
from fastkwire import admin, cli, error_codes
from fastkwire.admin import (
    AdminClient,
    AdminTimeoutError,
    AsyncAdminClient,
    BrokerConnectionError,
    BrokerError,
    BrokerTooOldError,
    GroupAuthorizationError,
    GroupNotFoundError,
    GroupStateError,
    ResponseError,
)

from fakes import (  # noqa: F401 - scripted is a fixture
    FakeClock,
    API_VERSIONS,
    CLOSE,
    COORDINATOR_LOAD_IN_PROGRESS,
    COORDINATOR_NOT_AVAILABLE,
    FIND_COORDINATOR,
    GARBAGE,
    LEAVE_GROUP,
    NOT_COORDINATOR,
    RESET,
    SILENT,
    UNKNOWN_MEMBER_ID,
    WRONG_CORRELATION,
    Delay,
    Drop,
    KafkaLikeGroup,
    client,
    closed_port,
    coordinator_at,
    find_error,
    leave_error,
    one_coordinator,
    run_cli,
    scripted,
)


# ---------------------------------------------------------------- Apache Kafka behaviour


def test_removes_static_members_by_instance_id(scripted):
    broker, group = one_coordinator(scripted)
    result = client(broker).remove_members_from_group("orders", ["a", "b"], reason="scale down")

    assert result.removed == ["a", "b"]
    assert result.failed == {}
    assert result.all() is None
    assert [m.member_id for m in result.members] == ["a-0000", "b-0001"]
    assert result.leave_group_version == 5
    assert result.coordinator.port == broker.port and result.coordinator.node_id == 1
    assert group.static == {"c": "c-0002"}

    # What went over the wire: highest versions, batched FindCoordinator, KIP-345 identities.
    assert [k for k, _, _ in broker.requests] == [API_VERSIONS, FIND_COORDINATOR, LEAVE_GROUP]
    assert broker.seen(API_VERSIONS)[0][0] == 4
    version, find = broker.seen(FIND_COORDINATOR)[0]
    assert version == 6 and find.coordinator_keys == ["orders"] and find.key_type == 0
    version, leave = broker.seen(LEAVE_GROUP)[0]
    assert version == 5 and leave.group_id == "orders"
    assert [(m.member_id, m.group_instance_id, m.reason) for m in leave.members] == [
        ("", "a", "scale down"),
        ("", "b", "scale down"),
    ]


def test_member_level_error_sent_for_the_whole_request(scripted):
    # Some brokers answer a member-level code at the top with no member list.
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [leave_error(UNKNOWN_MEMBER_ID)],
    }
    result = client(broker).remove_members_from_group("orders", ["a", "b"])
    assert sorted(result.failed) == ["a", "b"]
    assert {m.error_code for m in result.members} == {UNKNOWN_MEMBER_ID}


def test_answer_missing_a_member_counts_as_failure(scripted):
    broker = scripted()

    def only_a(request, version):
        return LeaveGroupResponse(
            members=[
                LeaveGroupResponse.MemberResponse(
                    member_id="a-1", group_instance_id="a", error_code=0
                )
            ]
        )

    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], LEAVE_GROUP: [only_a]}
    result = client(broker).remove_members_from_group("orders", ["a", "b"])
    assert result.removed == ["a"]
    assert "did not mention" in result.failed["b"].describe()


@pytest.mark.parametrize(
    "find_range, leave_range, want_find, want_leave",
    [
        ((0, 3), (0, 4), 3, 4),  # pre-batching FindCoordinator, LeaveGroup without reason
        ((0, 0), (3, 3), 0, 3),
        ((1, 9), (2, 99), 6, 5),  # a newer broker: our highest versions
    ],
)
def test_negotiates_highest_common_versions(
    scripted, find_range, leave_range, want_find, want_leave
):
    versions = {API_VERSIONS: (0, 3), FIND_COORDINATOR: find_range, LEAVE_GROUP: leave_range}
    broker, group = one_coordinator(scripted, versions=versions)
    result = client(broker).remove_members_from_group("orders", ["a"], reason="why")
    assert result.removed == ["a"] and result.leave_group_version == want_leave

    assert broker.seen(API_VERSIONS)[-1][0] == 3
    version, find = broker.seen(FIND_COORDINATOR)[0]
    assert version == want_find
    if want_find >= 4:
        assert find.coordinator_keys == ["orders"]
    else:
        assert find.key == "orders"
    version, leave = broker.seen(LEAVE_GROUP)[0]
    assert version == want_leave
    assert leave.members[0].reason == ("why" if want_leave >= 5 else None)


def test_api_versions_falls_back_when_broker_lacks_our_version(scripted):
    versions = {API_VERSIONS: (0, 2), FIND_COORDINATOR: (0, 2), LEAVE_GROUP: (0, 3)}
    broker, _ = one_coordinator(scripted, versions=versions)
    ranges = client(broker).api_versions()
    assert ranges == versions
    assert [v for v, _ in broker.seen(API_VERSIONS)] == [4, 2]
    assert client(broker).remove_members_from_group("orders", ["a"]).removed == ["a"]


@pytest.mark.parametrize("leave_range", [(0, 2), None])
def test_broker_too_old_for_leave_by_instance_sends_nothing(scripted, leave_range):
    versions = {API_VERSIONS: (0, 2), FIND_COORDINATOR: (0, 2)}
    if leave_range:
        versions[LEAVE_GROUP] = leave_range
    broker, group = one_coordinator(scripted, versions=versions)
    with pytest.raises(
        BrokerTooOldError, match=r"too old.*LeaveGroup v3.*Nothing was sent"
    ) as info:
        client(broker).remove_members_from_group("orders", ["a"])
    assert info.value.error.name == "UNSUPPORTED_VERSION"
    assert {k for k, _, _ in broker.requests} == {API_VERSIONS}
    assert "a" in group.static


def test_coordinator_on_another_broker(scripted):
    group = KafkaLikeGroup(["a"])
    coordinator = scripted(
        versions={API_VERSIONS: (0, 4), FIND_COORDINATOR: (0, 6), LEAVE_GROUP: (0, 4)},
        script={LEAVE_GROUP: [group]},
        node_id=7,
    )
    bootstrap = scripted(script={FIND_COORDINATOR: [coordinator_at(coordinator, node_id=7)]})
    result = client(bootstrap).remove_members_from_group("orders", ["a"])
    assert result.removed == ["a"]
    assert result.coordinator.node_id == 7 and result.coordinator.port == coordinator.port
    # The coordinator's own ranges decide the LeaveGroup version.
    assert result.leave_group_version == 4
    assert [k for k, _, _ in bootstrap.requests] == [API_VERSIONS, FIND_COORDINATOR]
    assert [k for k, _, _ in coordinator.requests] == [API_VERSIONS, LEAVE_GROUP]


def test_find_coordinator_public_call(scripted):
    broker = scripted(
        versions={API_VERSIONS: (0, 4), FIND_COORDINATOR: (0, 3), LEAVE_GROUP: (0, 5)}
    )
    broker.script = {FIND_COORDINATOR: [coordinator_at(4321, node_id=3)]}
    found = client(broker).find_coordinator("orders")
    assert (found.node_id, found.host, found.port, found.address) == (
        3,
        "127.0.0.1",
        4321,
        "127.0.0.1:4321",
    )
    assert broker.seen(FIND_COORDINATOR)[0][0] == 3


# ---------------------------------------------------------------- retries


def test_not_coordinator_then_success(scripted):
    group = KafkaLikeGroup(["a"])
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [leave_error(NOT_COORDINATOR), group],
    }
    clock = FakeClock()
    result = client(broker, clock=clock).remove_members_from_group("orders", ["a"])
    assert result.removed == ["a"]
    # NOT_COORDINATOR sent the client back to FindCoordinator before the second LeaveGroup.
    assert [k for k, _, _ in broker.requests] == [
        API_VERSIONS,
        FIND_COORDINATOR,
        LEAVE_GROUP,
        FIND_COORDINATOR,
        LEAVE_GROUP,
    ]
    assert clock.slept == [0.1]


def test_coordinator_load_in_progress_is_retried_with_backoff(scripted):
    group = KafkaLikeGroup(["a"])
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [
            find_error(COORDINATOR_LOAD_IN_PROGRESS),
            find_error(COORDINATOR_LOAD_IN_PROGRESS),
            coordinator_at(broker),
        ],
        LEAVE_GROUP: [leave_error(COORDINATOR_LOAD_IN_PROGRESS), group],
    }
    clock = FakeClock()
    result = client(broker, clock=clock).remove_members_from_group("orders", ["a"])
    assert result.removed == ["a"]
    assert len(broker.seen(FIND_COORDINATOR)) == 4 and len(broker.seen(LEAVE_GROUP)) == 2
    # Backoff 0.1 + 0.2 before the third FindCoordinator, then 0.1 after the LeaveGroup retry.
    assert clock.slept == [0.1, 0.2, 0.1]


@pytest.mark.parametrize("where", ["find", "leave"])
def test_coordinator_never_available_times_out(scripted, where):
    broker = scripted()
    if where == "find":
        broker.script = {FIND_COORDINATOR: [find_error(COORDINATOR_NOT_AVAILABLE)]}
    else:
        broker.script = {
            FIND_COORDINATOR: [coordinator_at(broker)],
            LEAVE_GROUP: [leave_error(COORDINATOR_NOT_AVAILABLE)],
        }
    clock = FakeClock()
    with pytest.raises(AdminTimeoutError, match="COORDINATOR_NOT_AVAILABLE") as info:
        client(broker, timeout=1.0, clock=clock).remove_members_from_group("orders", ["a"])
    assert info.value.error.code == COORDINATOR_NOT_AVAILABLE
    assert isinstance(info.value, TimeoutError)
    # 0.1 + 0.2 + 0.4 slept; the next 0.8 would pass the 1 s deadline: four tries.
    assert clock.slept == [0.1, 0.2, 0.4]
    assert len(broker.seen(FIND_COORDINATOR)) == 4


# ---------------------------------------------------------------- request-level errors


@pytest.mark.parametrize(
    "code, exc, words",
    [
        (30, GroupAuthorizationError, "not authorized.*GROUP_AUTHORIZATION_FAILED"),
        (69, GroupNotFoundError, "does not exist.*GROUP_ID_NOT_FOUND"),
        (27, GroupStateError, "not in a state that can rebalance.*REBALANCE_IN_PROGRESS"),
        (35, BrokerTooOldError, "UNSUPPORTED_VERSION"),
        (42, BrokerError, "INVALID_REQUEST"),
    ],
)
def test_leave_group_request_level_errors(scripted, code, exc, words):
    broker = scripted()
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], LEAVE_GROUP: [leave_error(code)]}
    with pytest.raises(exc, match=words) as info:
        client(broker).remove_members_from_group("orders", ["a"])
    assert type(info.value) is exc  # distinct, not a sibling's subclass
    assert info.value.error.code == code
    assert len(broker.seen(LEAVE_GROUP)) == 1


def test_find_coordinator_authorization_error(scripted):
    broker = scripted(script={FIND_COORDINATOR: [find_error(30)]})
    with pytest.raises(GroupAuthorizationError, match="GROUP_AUTHORIZATION_FAILED"):
        client(broker).remove_members_from_group("orders", ["a"])
    assert broker.seen(LEAVE_GROUP) == []


# ---------------------------------------------------------------- connection faults


def test_dropped_connection_mid_response(scripted):
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [Drop(KafkaLikeGroup(["a"]))],
    }
    start = time.monotonic()
    with pytest.raises(
        BrokerConnectionError, match="closed the connection during LeaveGroup v5.*middle"
    ):
        client(broker).remove_members_from_group("orders", ["a"])
    assert time.monotonic() - start < 2.0


def test_connection_closed_before_answer(scripted):
    broker = scripted(script={API_VERSIONS: [CLOSE]})
    with pytest.raises(
        BrokerConnectionError, match="closed the connection during ApiVersions v4.*before"
    ):
        client(broker).api_versions()


def test_connection_reset(scripted):
    broker = scripted()
    broker.script = {FIND_COORDINATOR: [RESET]}
    with pytest.raises(BrokerConnectionError, match="FindCoordinator"):
        client(broker).find_coordinator("orders")


def test_answer_slower_than_timeout(scripted):
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [Delay(5.0, KafkaLikeGroup(["a"]))],
    }
    start = time.monotonic()
    with pytest.raises(AdminTimeoutError, match="no answer from .* to LeaveGroup v5 within 0.5 s"):
        client(broker, timeout=0.5).remove_members_from_group("orders", ["a"])
    assert time.monotonic() - start < 1.0


def test_silent_broker(scripted):
    broker = scripted(script={API_VERSIONS: [SILENT]})
    start = time.monotonic()
    with pytest.raises(AdminTimeoutError, match="ApiVersions"):
        client(broker, timeout=0.3).remove_members_from_group("orders", ["a"])
    assert time.monotonic() - start < 0.8


def test_refused_connection():
    port = closed_port()
    start = time.monotonic()
    with pytest.raises(BrokerConnectionError, match=f"127.0.0.1:{port}: connection refused"):
        client(f"127.0.0.1:{port}").remove_members_from_group("orders", ["a"])
    assert time.monotonic() - start < 1.0


def test_next_bootstrap_server_after_a_refusal(scripted):
    broker, _ = one_coordinator(scripted)
    servers = f"127.0.0.1:{closed_port()},{broker.address}"
    assert client(servers).remove_members_from_group("orders", ["a"]).removed == ["a"]
    with pytest.raises(BrokerConnectionError, match="no bootstrap server could be reached"):
        client(f"127.0.0.1:{closed_port()},127.0.0.1:{closed_port()}").api_versions()


def test_undecodable_answers(scripted):
    broker = scripted(script={API_VERSIONS: [GARBAGE]})
    with pytest.raises(ResponseError, match="could not decode"):
        client(broker).api_versions()
    broker = scripted()
    broker.script = {FIND_COORDINATOR: [WRONG_CORRELATION, coordinator_at(broker)]}
    with pytest.raises(ResponseError, match="correlation id"):
        client(broker).find_coordinator("orders")


# ---------------------------------------------------------------- argument checks and helpers


def test_parse_servers():
    assert admin.parse_servers("h:1, k ,[::1]:3") == [("h", 1), ("k", 9092), ("::1", 3)]
    assert admin.parse_servers(["a:5"]) == [("a", 5)]
    for bad in ["", "h:x", "h:0", ":5", "h:70000"]:
        with pytest.raises(ValueError):
            admin.parse_servers(bad)


def test_bad_arguments_fail_before_connecting():
    c = AdminClient("127.0.0.1:9", request_timeout_ms=100)
    for group, ids in [("orders", []), ("orders", ["a", "a"]), ("orders", [""]), ("", ["a"])]:
        with pytest.raises(ValueError):
            c.remove_members_from_group(group, ids)
    with pytest.raises(ValueError):
        AdminClient("h:1", request_timeout_ms=0)


def test_async_client(scripted):
    broker, _ = one_coordinator(scripted)

    async def go():
        c = AsyncAdminClient(broker.address, request_timeout_ms=5000)
        versions = await c.api_versions()
        result = await c.remove_members_from_group("orders", ["b"], reason="async")
        return versions, result

    versions, result = asyncio.run(go())
    assert versions[LEAVE_GROUP] == (0, 5)
    assert result.removed == ["b"]


# ---------------------------------------------------------------- error code table


def test_error_code_table_names_every_code_of_these_apis():
    assert sorted(error_codes.ERRORS) == list(range(-1, 134))
    names = [e.name for e in error_codes.ERRORS.values()]
    assert len(set(names)) == len(names)
    for api in ("ApiVersions", "FindCoordinator", "LeaveGroup", "StreamsGroupHeartbeat"):
        for name in error_codes.API_ERRORS[api]:
            assert error_codes.by_name(name).name == name
    known = {
        25: "UNKNOWN_MEMBER_ID",
        82: "FENCED_INSTANCE_ID",
        30: "GROUP_AUTHORIZATION_FAILED",
        69: "GROUP_ID_NOT_FOUND",
        16: "NOT_COORDINATOR",
        132: "STREAMS_TOPOLOGY_FENCED",
        -1: "UNKNOWN_SERVER_ERROR",
    }
    for code, name in known.items():
        assert error_codes.error_name(code) == name


def test_error_code_lookup():
    assert error_codes.lookup(16).retriable and error_codes.lookup(14).retriable
    assert not error_codes.lookup(25).retriable
    assert {c for c in admin.COORDINATOR_RETRY} == {
        error_codes.by_name(n).code
        for n in ("NOT_COORDINATOR", "COORDINATOR_NOT_AVAILABLE", "COORDINATOR_LOAD_IN_PROGRESS")
    }
    unknown = error_codes.lookup(4242)
    assert unknown.code == 4242 and "4242" in unknown.name and not unknown.retriable
    assert str(error_codes.lookup(25)).startswith("UNKNOWN_MEMBER_ID (25): ")
    with pytest.raises(KeyError):
        error_codes.by_name("NO_SUCH_ERROR")


# ---------------------------------------------------------------- command line


def test_cli_removes_and_prints_a_table(scripted, capsys):
    broker, group = one_coordinator(scripted)
    code = cli.main(
        [
            "remove-members",
            "--bootstrap-server",
            broker.address,
            "--group",
            "orders",
            "--instance-id",
            "a",
            "--instance-id",
            "b",
            "--reason",
            "scale down",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert f"coordinator {broker.address} (node 1), LeaveGroup v5" in out
    assert [line.split()[:2] for line in out.splitlines()[2:4]] == [
        ["a", "removed"],
        ["b", "removed"],
    ]
    assert "2 of 2 members removed." in out
    assert broker.seen(LEAVE_GROUP)[0][1].members[0].reason == "scale down"


def test_cli_partial_failure_json_exits_1(scripted, capsys):
    broker, _ = one_coordinator(scripted)
    code = cli.main(
        [
            "remove-members",
            "--bootstrap-server",
            broker.address,
            "--group",
            "orders",
            "--instance-id",
            "a",
            "--instance-id",
            "ghost",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["removed"] == ["a"] and data["failed"] == ["ghost"]
    assert data["members"][1]["error_name"] == "UNKNOWN_MEMBER_ID"


def test_cli_table_shows_member_errors(scripted, capsys):
    broker, _ = one_coordinator(scripted)
    assert (
        cli.main(
            [
                "remove-members",
                "--bootstrap-server",
                broker.address,
                "--group",
                "orders",
                "--instance-id",
                "ghost",
            ]
        )
        == 1
    )
    out = capsys.readouterr().out
    assert "ghost" in out and "FAILED" in out and "UNKNOWN_MEMBER_ID (25)" in out
    assert "0 of 1 members removed." in out


def test_cli_request_error_exits_3_without_traceback(scripted, capsys):
    broker = scripted(
        versions={API_VERSIONS: (0, 2), FIND_COORDINATOR: (0, 2), LEAVE_GROUP: (0, 2)}
    )
    code = cli.main(
        [
            "remove-members",
            "--bootstrap-server",
            broker.address,
            "--group",
            "orders",
            "--instance-id",
            "a",
        ]
    )
    captured = capsys.readouterr()
    assert code == 3
    assert captured.err.startswith("fastkwire remove-members: error: broker 127.0.0.1:")
    assert "Nothing was sent" in captured.err and "Traceback" not in captured.err

    code = cli.main(
        [
            "remove-members",
            "--bootstrap-server",
            broker.address,
            "--group",
            "orders",
            "--instance-id",
            "a",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 3
    assert (
        data["error"]["type"] == "BrokerTooOldError"
        and data["error"]["error_name"] == "UNSUPPORTED_VERSION"
    )


def test_invoke_consumer_rebalance_alias(scripted, capsys):
    broker, group = one_coordinator(scripted)
    code = cli.invoke_consumer_rebalance(
        ["--bootstrap-server", broker.address, "--group", "orders", "--instance-id", "c"]
    )
    assert code == 0 and "c" not in group.static
    assert "1 of 1 members removed." in capsys.readouterr().out


def test_cli_usage_errors(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["remove-members", "--bootstrap-server", "h:1", "--instance-id", "a"])
    assert info.value.code == 2 and "--group" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main(
            [
                "remove-members",
                "--bootstrap-server",
                "h:1",
                "--group",
                "g",
                "--instance-id",
                "a",
                "--timeout",
                "-1",
            ]
        )
    assert cli.main([]) == 2
    assert (
        cli.main(
            [
                "remove-members",
                "--bootstrap-server",
                "h:1",
                "--group",
                "g",
                "--instance-id",
                "a",
                "--instance-id",
                "a",
            ]
        )
        == 2
    )
    assert (
        cli.main(
            ["remove-members", "--bootstrap-server", "h:x", "--group", "g", "--instance-id", "a"]
        )
        == 2
    )
    assert "bad port" in capsys.readouterr().err
    assert "remove-members" in cli.SUBCOMMANDS


def test_console_scripts_point_at_the_cli():
    from importlib import metadata

    try:
        metadata.distribution("fastkwire")
    except metadata.PackageNotFoundError:
        pytest.skip("fastkwire is not installed, so it has no console scripts")
    scripts = {ep.name: ep for ep in metadata.entry_points(group="console_scripts")}
    # fastkwire.__main__.main: `fastkwire broker` runs with the broker's modules only, every
    # other command goes to fastkwire.cli (tests/test_broker_log.py checks both halves)
    from fastkwire import __main__ as entry

    assert scripts["fastkwire"].load() is entry.main
    assert scripts["kafka-invoke-consumer-rebalance"].load() is cli.invoke_consumer_rebalance


def test_cli_process_refused_and_silent(scripted):
    proc = run_cli(
        "remove-members",
        "--bootstrap-server",
        f"127.0.0.1:{closed_port()}",
        "--group",
        "g",
        "--instance-id",
        "a",
    )
    assert proc.returncode == 3
    assert "connection refused" in proc.stderr and "Traceback" not in proc.stderr

    broker = scripted(script={API_VERSIONS: [SILENT]})
    start = time.monotonic()
    proc = run_cli(
        "remove-members",
        "--bootstrap-server",
        broker.address,
        "--group",
        "g",
        "--instance-id",
        "a",
        "--timeout",
        "0.5",
    )
    assert time.monotonic() - start < 5.0
    assert proc.returncode == 3
    assert "no answer from" in proc.stderr and "Traceback" not in proc.stderr


def test_admin_package_keeps_every_public_name_and_documents_both_clients():
    # admin is a package (results, flows, clients): what users imported from the module stays.
    import importlib

    names = admin.__all__ + [
        "COORDINATOR_RETRY",
        "BACKOFF_START",
        "BACKOFF_MAX",
        "DEFAULT_PORT",
        "MAX_NAME_BYTES",
        "GROUP_STATE_ERRORS",
        "GROUP_NOT_FOUND_ERRORS",
        "FAILOVER_ERRORS",
    ]
    namespace = {}
    exec(f"from fastkwire.admin import {', '.join(names)}", namespace)
    assert all(name in namespace for name in names)
    assert [
        importlib.import_module(f"fastkwire.admin.{room}").__name__
        for room in ("results", "flows", "clients")
    ]
    calls = [n for n in vars(AdminClient) if not n.startswith("_")]
    assert sorted(calls) == sorted(n for n in vars(AsyncAdminClient) if not n.startswith("_"))
    for n in calls:
        assert getattr(AsyncAdminClient, n).__doc__ and getattr(AdminClient, n).__doc__, n


def test_check_removal_is_check_members_for_instance_ids():
    # One set of checks: check_removal adds the group, "at least one" and the reason.
    for ids in ([""], ["a", "a"], ["\udcff"], ["x" * 40000]):
        with pytest.raises(ValueError) as removal:
            admin.check_removal("g", ids)
        with pytest.raises(ValueError) as members:
            admin.check_members(ids)
        assert str(removal.value) == str(members.value)
    with pytest.raises(ValueError, match="^give at least one group.instance.id$"):
        admin.check_removal("g", [])
    assert admin.check_removal("g", ("a", "b"), reason="r") == ["a", "b"]

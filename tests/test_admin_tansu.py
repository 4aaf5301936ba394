"""The admin client against a real broker: Tansu, with real confluent-kafka consumers in a
static group (group.instance.id).

Known divergence: Tansu answers UNKNOWN_MEMBER_ID to a LeaveGroup that names a member by
group.instance.id alone (empty member id), where Apache Kafka removes that static member
(the scripted tests cover Kafka's behaviour). Tansu does remove a member named by its member
id, and these tests show that this rebalances the group at once.

One group is shared by the whole module: Tansu holds a join for about half the session
timeout, so every join or rebalance costs that long. The last test changes the group.
"""

import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

import fastkwire
from fastkwire import (
    ApiVersionsRequest,
    FindCoordinatorRequest,
    LeaveGroupRequest,
    decode_response,
    encode_request,
    encode_response,
)
from fastkwire import cli
from fastkwire.admin import AdminClient, UnknownInstanceError

from broker import (  # noqa: F401 - tansu_broker is a fixture
    StaticConsumer,
    StaticGroup,
    free_port,
    tansu_broker,
)

pytestmark = pytest.mark.broker

GROUP = "kip345-static"
TOPIC = "kip345-topic"
MEMBERS = 3
SESSION_TIMEOUT_S = 30  # Tansu completes a join after roughly half of it
JOIN_TIMEOUT_S = 60
UNKNOWN_MEMBER_ID = 25


@pytest.fixture(scope="module")
def static_group(tansu_broker):  # noqa: F811 - pytest fixture injection
    group = StaticGroup(
        tansu_broker.bootstrap,
        GROUP,
        TOPIC,
        MEMBERS,
        session_timeout_ms=SESSION_TIMEOUT_S * 1000,
        max_poll_interval_ms=SESSION_TIMEOUT_S * 1000,
    )
    try:
        if not group.wait_until(group.all_assigned, JOIN_TIMEOUT_S):
            pytest.fail(
                f"the static group did not form within {JOIN_TIMEOUT_S} s: "
                f"{[c.assignments for c in group.consumers]}\n{tansu_broker.log_text()}"
            )
        assert group.wait_until(lambda: all(c.member_id() for c in group.consumers), 10)
        yield group
    finally:
        group.close()


@pytest.fixture
def admin(tansu_broker):  # noqa: F811
    return AdminClient(tansu_broker.bootstrap, client_id="fastkwire-test", request_timeout_ms=10000)


def test_a_paused_member_polls_no_more():
    """pause_polling() returns once a poll in progress has ended. librdkafka serves rebalance
    callbacks inside poll, so a poll that outlived the pause took the member removed by
    test_remove_by_member_id_rebalances_at_once back into the group on a loaded machine."""
    consumer = StaticConsumer(f"127.0.0.1:{free_port()}", "g", "paused-0", "t", 30000)
    real = consumer.consumer
    started = threading.Event()
    polls = []  # (start, end) of each poll

    class Slow:  # a poll stretched as on a loaded machine
        def poll(self, timeout):
            start = time.monotonic()
            started.set()
            time.sleep(0.3)
            polls.append((start, time.monotonic()))

        def memberid(self):
            return None

        def close(self):
            real.close()

    consumer.consumer = Slow()
    try:
        assert started.wait(10)
        consumer.pause_polling()
        paused = time.monotonic()
        time.sleep(0.5)
        assert polls and all(end <= paused for _, end in polls), (paused, polls)
    finally:
        consumer.close()


def exchange(port, request, version, correlation_id):
    """Send one request over a fresh socket; return the raw response frame."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(encode_request(request, version, correlation_id, "fastkwire-test"))
        size = b""
        while len(size) < 4:
            chunk = sock.recv(4 - len(size))
            assert chunk, "Tansu closed the connection"
            size += chunk
        body = b""
        want = struct.unpack(">i", size)[0]
        while len(body) < want:
            chunk = sock.recv(want - len(body))
            assert chunk, "Tansu closed the connection mid-answer"
            body += chunk
    return size + body


VERSION_CASES = (
    [("ApiVersions", v) for v in range(0, 5)]
    + [("FindCoordinator", v) for v in range(0, 7)]
    + [("LeaveGroup", v) for v in range(0, 6)]
)


def probe_request(api, version):
    # The probe group has no members, so no LeaveGroup here touches the static group.
    if api == "ApiVersions":
        return ApiVersionsRequest(
            client_software_name="fastkwire", client_software_version=fastkwire.__version__
        )
    if api == "FindCoordinator":
        if version >= 4:
            return FindCoordinatorRequest(key_type=0, coordinator_keys=[GROUP, "probe-group"])
        return FindCoordinatorRequest(key=GROUP, key_type=0)
    if version >= 3:
        return LeaveGroupRequest(
            group_id="probe-group",
            members=[
                LeaveGroupRequest.MemberIdentity(
                    member_id="",
                    group_instance_id="probe-instance",
                    reason="probe" if version >= 5 else None,
                )
            ],
        )
    return LeaveGroupRequest(group_id="probe-group", member_id="probe-member")


@pytest.mark.parametrize("api, version", VERSION_CASES, ids=[f"{a}-v{v}" for a, v in VERSION_CASES])
def test_every_version_decodes(tansu_broker, api, version):  # noqa: F811
    request = probe_request(api, version)
    frame = exchange(tansu_broker.port, request, version, correlation_id=1000 + version)
    header, response = decode_response(frame, request.API_KEY, version)  # must consume every byte
    assert header.correlation_id == 1000 + version
    assert response.error_code == 0
    if api == "ApiVersions":
        ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
        assert ranges[18][1] >= 4 and ranges[10][1] >= 6 and ranges[13][1] >= 5
    elif api == "FindCoordinator":
        entries = response.coordinators if version >= 4 else [response]
        assert [(e.host, e.port, e.error_code) for e in entries] == [
            ("127.0.0.1", tansu_broker.port, 0)
        ] * len(entries)
        if version >= 4:
            assert [e.key for e in entries] == [GROUP, "probe-group"]
    elif version >= 3:
        assert [(m.group_instance_id, m.error_code) for m in response.members] == [
            ("probe-instance", UNKNOWN_MEMBER_ID)
        ]
    again = encode_response(response, version, header.correlation_id)
    assert decode_response(again, request.API_KEY, version)[1] == response
    if not (api == "ApiVersions" and version >= 3):
        # Byte for byte what Tansu sent. (In ApiVersions v3+ Tansu also writes the tagged
        # fields that hold their defaults, which Kafka's encoders, and ours, leave out.)
        assert again == frame


def test_api_versions_and_find_coordinator(admin, tansu_broker):  # noqa: F811
    ranges = admin.api_versions()
    assert ranges[13] == (0, 5) and ranges[10][1] >= 6 and ranges[18][1] >= 4
    coordinator = admin.find_coordinator(GROUP)
    assert (coordinator.host, coordinator.port) == ("127.0.0.1", tansu_broker.port)


def test_remove_by_instance_id_is_refused_by_tansu(admin, static_group):
    target = static_group.consumers[0]
    start = time.monotonic()
    result = admin.remove_members_from_group(
        GROUP, [target.instance_id, "no-such-instance"], reason="test"
    )

    assert result.leave_group_version == 5
    assert result.removed == []
    assert {i: m.error_name for i, m in result.failed.items()} == {
        target.instance_id: "UNKNOWN_MEMBER_ID",
        "no-such-instance": "UNKNOWN_MEMBER_ID",
    }
    with pytest.raises(UnknownInstanceError):
        result.all()
    # Nothing changed: with 1 s heartbeats a rebalance would have reached the members by now.
    time.sleep(3)
    assert not any(c.revoked_since(start) for c in static_group.consumers)
    assert static_group.all_assigned()


def test_unknown_group(admin):
    result = admin.remove_members_from_group("no-such-group", ["someone"])
    assert result.failed["someone"].error_code == UNKNOWN_MEMBER_ID


def test_cli_against_tansu(tansu_broker, static_group, capsys):  # noqa: F811
    instance = static_group.consumers[1].instance_id
    code = cli.main(
        [
            "remove-members",
            "--bootstrap-server",
            tansu_broker.bootstrap,
            "--group",
            GROUP,
            "--instance-id",
            instance,
            "--json",
            "--timeout",
            "10",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["failed"] == [instance]
    assert data["coordinator"]["port"] == tansu_broker.port

    code = cli.invoke_consumer_rebalance(
        ["--bootstrap-server", tansu_broker.bootstrap, "--group", GROUP, "--instance-id", instance]
    )
    out = capsys.readouterr().out
    assert code == 1 and "UNKNOWN_MEMBER_ID (25)" in out


def test_cli_process_against_tansu(tansu_broker):  # noqa: F811
    env = dict(os.environ)
    env["PYTHONPATH"] = (
        os.path.dirname(os.path.dirname(fastkwire.__file__))
        + os.pathsep
        + env.get("PYTHONPATH", "")
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "fastkwire.cli",
            "remove-members",
            "--bootstrap-server",
            tansu_broker.bootstrap,
            "--group",
            "no-such-group",
            "--instance-id",
            "x",
            "--timeout",
            "10",
        ],
        capture_output=True,
        text=True,
        timeout=30,
        env=env,
    )
    assert proc.returncode == 1, proc.stderr
    assert (
        "x" in proc.stdout and "UNKNOWN_MEMBER_ID" in proc.stdout and "Traceback" not in proc.stderr
    )


def test_remove_by_member_id_rebalances_at_once(admin, static_group):
    # Runs last: it takes a member out of the shared group.
    victim = static_group.consumers[-1]
    others = static_group.consumers[:-1]
    member_id = victim.member_id()
    victim.pause_polling()  # silent from now on, like a crashed process
    paused = time.monotonic()

    result = admin.leave_group(GROUP, [(member_id, victim.instance_id)], reason="scale down")
    assert result.removed == [victim.instance_id]
    assert result.members[0].member_id == member_id
    result.all()

    # The rebalance starts at once: the others are told on their next heartbeat.
    assert static_group.wait_until(lambda: all(c.revoked_since(paused) for c in others), 5)
    # ...and ends with the victim's partition handed over before its session could even expire.
    # (A loaded machine may take the group through more than one generation first: wait
    # for the last, the one where the others hold every partition.)
    deadline = SESSION_TIMEOUT_S - 2

    def held():
        latest = [c.last_assignment() for c in others]
        if not all(a is not None and a[0] >= paused for a in latest):
            return None
        return sorted(p for _, parts in latest for p in parts)

    assert static_group.wait_until(lambda: held() == list(range(MEMBERS)), deadline), (
        f"every partition not handed over within {deadline} s of the removal: {held()}"
    )
    took = time.monotonic() - paused
    assert took < SESSION_TIMEOUT_S

    # Gone for good: a second removal finds no such member.
    again = admin.leave_group(GROUP, [(member_id, victim.instance_id)])
    assert again.failed[victim.instance_id].error_code == UNKNOWN_MEMBER_ID

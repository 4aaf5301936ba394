"""describe-group and remove-members over SSL and SASL_SSL, against a real broker.

Tansu serves plaintext only and keeps no SCRAM credentials, so a TLS + SASL gateway of the
tests' own (tests/gateway.py: Python's ssl module, SCRAM per RFC 5802/7677) stands in front
of it, with certificates made for the test (tests/certs.py), and Tansu advertises the
gateway's address. Real static confluent-kafka consumers join through the same gateway with
their own SASL_SSL settings (SCRAM-SHA-512). The gateway requires SASL; for the SSL runs it
is switched to a TLS-only listener for new connections.

Tansu removes a member only when named by its member id (see test_admin_tansu.py), and
describes members by member id alone (no group.instance.id, client, host or assignment), so
the removals here use --member-id and --all, and the consumer protocol's assignment bytes
are checked where librdkafka's group leader sends them (SyncGroup, seen by the gateway).
"""

import json
import time
from types import SimpleNamespace

import pytest

from fastkwire import cli, decode_request
from fastkwire.admin import AdminClient, BrokerConnectionError
from fastkwire.consumer_protocol import decode_assignment

from broker import StaticGroup, running_tansu
from certs import server_context, tls_files  # noqa: F401 - tls_files is a fixture
from gateway import Gateway
from sasl_server import SaslServer

pytestmark = pytest.mark.broker

GROUP = "secured-static"
TOPIC = "secured-topic"
MEMBERS = 3
SESSION_TIMEOUT_S = 10
JOIN_TIMEOUT_S = 60
OPS_PASSWORD = "ops-Pass-5b1e"
CONSUMER_PASSWORD = "consumer-Pass-77aa"
LEAVE_GROUP = 13


@pytest.fixture(scope="module")
def secured(tls_files):  # noqa: F811
    server = SaslServer(
        {"ops": OPS_PASSWORD, "consumer": CONSUMER_PASSWORD},
        mechanisms=["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
    )
    gateway = Gateway(server_context(tls_files), server)
    try:
        for tansu in running_tansu(advertised_port=gateway.port):
            gateway.upstream_port = tansu.port
            yield SimpleNamespace(
                gateway=gateway,
                sasl=server,
                tansu=tansu,
                files=tls_files,
                bootstrap=f"127.0.0.1:{gateway.port}",
            )
    finally:
        gateway.close()
    assert not gateway.errors, gateway.errors


@pytest.fixture(scope="module")
def static_group(secured):
    config = {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "consumer",
        "sasl.password": CONSUMER_PASSWORD,
        "ssl.ca.location": secured.files.ca,
    }
    group = StaticGroup(
        secured.bootstrap,
        GROUP,
        TOPIC,
        MEMBERS,
        session_timeout_ms=SESSION_TIMEOUT_S * 1000,
        max_poll_interval_ms=SESSION_TIMEOUT_S * 1000,
        config=config,
    )
    try:
        if not group.wait_until(group.all_assigned, JOIN_TIMEOUT_S):
            pytest.fail(
                f"the static group did not form within {JOIN_TIMEOUT_S} s through the gateway: "
                f"{[c.assignments for c in group.consumers]}\n{secured.tansu.log_text()[-3000:]}"
            )
        assert group.wait_until(lambda: all(c.member_id() for c in group.consumers), 10)
        assert ("SCRAM-sha512", "consumer") in secured.sasl.authenticated  # they did log in here
        yield group
    finally:
        group.close()


def sasl_ssl_flags(secured, mechanism="SCRAM-SHA-512"):
    return [
        "--security-protocol",
        "SASL_SSL",
        "--sasl-mechanism",
        mechanism,
        "--sasl-username",
        "ops",
        "--ssl-cafile",
        secured.files.ca,
        "--timeout",
        "15",
    ]


def run_main(capsys, argv):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_describe_group_over_sasl_ssl(secured, static_group, capsys, monkeypatch):
    monkeypatch.setenv("FASTKWIRE_SASL_PASSWORD", OPS_PASSWORD)
    code, out, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            secured.bootstrap,
            "--group",
            GROUP,
            "--json",
            *sasl_ssl_flags(secured),
        ],
    )
    assert code == 0, err
    data = json.loads(out)
    assert data["state"] == "Stable" and data["protocol_type"] == "consumer"
    assert data["coordinator"]["port"] == secured.gateway.port  # advertised: the gateway
    # Tansu 0.6 describes each member by member id only: no group.instance.id, client id,
    # host or assignment (its ConsumerGroupDescribe of a classic group has no members at all).
    assert sorted(m["member_id"] for m in data["members"]) == sorted(
        c.member_id() for c in static_group.consumers
    )
    assert OPS_PASSWORD not in out + err
    assert ("SCRAM-sha512", "ops") in secured.sasl.authenticated

    code, out, _ = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            secured.bootstrap,
            "--group",
            GROUP,
            *sasl_ssl_flags(secured, "PLAIN"),
        ],
    )
    assert code == 0 and "state Stable, protocol consumer, " in out
    assert all(c.member_id() in out for c in static_group.consumers)


def test_real_assignment_bytes_decode(secured, static_group):
    # What Tansu does not echo, librdkafka's group leader sent through the gateway: each
    # member's ConsumerProtocolAssignment in SyncGroup. They decode to what each consumer holds.
    latest = {}
    for frame in secured.gateway.sync_groups:
        _, request = decode_request(frame)
        for a in request.assignments:
            latest[a.member_id] = decode_assignment(a.assignment)
    for consumer in static_group.consumers:
        assert latest[consumer.member_id()] == {TOPIC: consumer.last_assignment()[1]}


def test_dry_run_over_ssl_sends_nothing(secured, static_group, capsys):
    start = time.monotonic()
    secured.gateway.sasl_required = False  # a TLS-only listener for the connections made now
    try:
        sent_before = len(secured.gateway.forwarded)
        code, out, err = run_main(
            capsys,
            [
                "remove-members",
                "--bootstrap-server",
                secured.bootstrap,
                "--group",
                GROUP,
                "--all",
                "--dry-run",
                "--json",
                "--security-protocol",
                "SSL",
                "--ssl-cafile",
                secured.files.ca,
                "--timeout",
                "15",
            ],
        )
        assert code == 0, err
        plan = json.loads(out)
        assert sorted(m["member_id"] for m in plan["would_remove"]) == sorted(
            c.member_id() for c in static_group.consumers
        )
        code, out, err = run_main(
            capsys,
            [
                "remove-members",
                "--bootstrap-server",
                secured.bootstrap,
                "--group",
                GROUP,
                "--dry-run",
                "--member-id",
                static_group.consumers[0].member_id(),
                "--instance-id",
                "ghost",
                "--security-protocol",
                "SSL",
                "--ssl-cafile",
                secured.files.ca,
            ],
        )
        assert code == 0, err
        assert out.splitlines()[2].split() == [static_group.consumers[0].member_id(), "-"]
        assert "Not in the group: group.instance.id 'ghost'" in out
        assert LEAVE_GROUP not in [k for k, _ in secured.gateway.forwarded[sent_before:]]
    finally:
        secured.gateway.sasl_required = True
    time.sleep(2)
    assert not any(c.revoked_since(start) for c in static_group.consumers)


def test_refusals_through_the_gateway(secured, static_group, capsys):
    # TLS without SASL where SASL is required: the listener hangs up.
    before = secured.gateway.closed_unauthenticated
    with pytest.raises(BrokerConnectionError, match="closed the connection"):
        AdminClient(
            secured.bootstrap,
            request_timeout_ms=10000,
            security_protocol="SSL",
            ssl_cafile=secured.files.ca,
        ).describe_group(GROUP)
    assert secured.gateway.closed_unauthenticated == before + 1
    # A wrong password: exit 3, one line that says what to fix, no secret.
    code, out, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            secured.bootstrap,
            "--group",
            GROUP,
            *sasl_ssl_flags(secured),
            "--sasl-password",
            "not-" + OPS_PASSWORD,
        ],
    )
    assert code == 3 and out == ""
    warning, error = err.splitlines()  # the password on the command line deserves a warning
    assert "warning: --sasl-password on the command line is visible" in warning
    assert "check the user name and password" in error and OPS_PASSWORD not in err
    # Plain TCP to a TLS listener.
    code, _, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            secured.bootstrap,
            "--group",
            GROUP,
            "--timeout",
            "5",
        ],
    )
    assert code == 3 and "error:" in err


def test_remove_member_by_id_over_sasl_ssl_with_command_config(
    secured, static_group, tmp_path, capsys
):
    victim = static_group.consumers[-1]
    others = static_group.consumers[:-1]
    config = tmp_path / "admin.properties"
    config.write_text(
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        f'    username="ops" password="{OPS_PASSWORD}";\n'
        f"ssl.truststore.type=PEM\nssl.truststore.location={secured.files.ca}\n"
    )
    victim.pause_polling()
    paused = time.monotonic()
    code, out, err = run_main(
        capsys,
        [
            "remove-members",
            "--bootstrap-server",
            secured.bootstrap,
            "--group",
            GROUP,
            "--member-id",
            victim.member_id(),
            "--reason",
            "scale down",
            "--command-config",
            str(config),
            "--timeout",
            "15",
        ],
    )
    assert code == 0, out + err
    assert "1 of 1 members removed." in out and OPS_PASSWORD not in out + err
    # The others hear of it at once and share the victim's partition well before its session ends.
    assert static_group.wait_until(lambda: all(c.revoked_since(paused) for c in others), 5)
    assert static_group.wait_until(
        lambda: all(c.assigned_since(paused) for c in others), SESSION_TIMEOUT_S
    )
    assert sorted(p for c in others for p in c.assigned_since(paused)) == list(range(MEMBERS))


def test_remove_all_over_ssl(secured, static_group, capsys):
    # Runs last: it empties the group. Described over SASL_SSL, removed over SSL.
    client = AdminClient(
        secured.bootstrap,
        request_timeout_ms=15000,
        security_protocol="SASL_SSL",
        sasl_mechanism="SCRAM-SHA-512",
        sasl_plain_username="ops",
        sasl_plain_password=OPS_PASSWORD,
        ssl_cafile=secured.files.ca,
    )
    remaining = client.describe_group(GROUP)
    for c in static_group.consumers:
        c.pause_polling()
    secured.gateway.sasl_required = False
    try:
        code, out, err = run_main(
            capsys,
            [
                "remove-members",
                "--bootstrap-server",
                secured.bootstrap,
                "--group",
                GROUP,
                "--all",
                "--json",
                "--reason",
                "drain",
                "--security-protocol",
                "SSL",
                "--ssl-cafile",
                secured.files.ca,
                "--timeout",
                "15",
            ],
        )
    finally:
        secured.gateway.sasl_required = True
    assert code == 0, err
    result = json.loads(out)
    # Named by member id (Tansu reports no instance ids), each one removed.
    assert sorted(result["removed"]) == sorted(m.member_id for m in remaining.members) != []
    assert result["failed"] == []
    assert client.describe_group(GROUP).members == []

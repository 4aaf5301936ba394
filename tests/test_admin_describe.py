"""describe-group and the wider remove-members (--member-id, --all, --dry-run, failover)
against scripted brokers (tests/fakes.py), on both clients and the CLI; the consumer
protocol's assignment bytes; --command-config and secrets on the command line."""

import asyncio
import json
import os
import re
import subprocess
import sys
import threading

import pytest

from fastkwire import cli
from fastkwire.admin import (
    AdminClient,
    AsyncAdminClient,
    GroupAuthorizationError,
    GroupNotFoundError,
)
from fastkwire.client_config import parse_properties, security_options
from fastkwire.connection import Security
from fastkwire.consumer_protocol import decode_assignment, encode_assignment

from certs import server_context, tls_files  # noqa: F401 - tls_files is a fixture
from fakes import (  # noqa: F401 - scripted is a fixture
    FakeClock,
    API_VERSIONS,
    CONSUMER_GROUP_DESCRIBE,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    LEAVE_GROUP,
    MODERN,
    NOT_COORDINATOR,
    PACKAGE_ROOT,
    CLOSE,
    SILENT,
    DescribedKafkaGroup,
    closed_port,
    consumer_group_described,
    coordinator_at,
    described,
    run_cli,
    scripted,
    on_clock,
)


@pytest.fixture(params=["sync", "async"])
def call(request):
    def run(broker, method, *args, timeout=3.0, clock=None, **kwargs):
        servers = broker if isinstance(broker, str) else broker.address
        if request.param == "sync":
            client = on_clock(AdminClient(servers, request_timeout_ms=timeout * 1000), clock)
            return getattr(client, method)(*args, **kwargs)

        async def go():
            client = on_clock(AsyncAdminClient(servers, request_timeout_ms=timeout * 1000), clock)
            return await getattr(client, method)(*args, **kwargs)

        return asyncio.run(go())

    return run


def group_broker(scripted, static=("a", "b"), dynamic=(), versions=None):
    group = DescribedKafkaGroup(static, dynamic)
    broker = scripted(versions=versions)
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [group],
        DESCRIBE_GROUPS: [group.describe],
    }
    return broker, group


# ---------------------------------------------------------------- the assignment bytes


def test_assignment_round_trip_and_kafka_bytes():
    # Kafka's ConsumerProtocolAssignment v0 for {"t": [0, 2]} with null user data, by hand.
    kafka = bytes.fromhex("000000000001000174000000020000000000000002ffffffff")
    assert decode_assignment(kafka) == {"t": [0, 2]}
    assert encode_assignment({"t": [0, 2]}) == kafka
    assert decode_assignment(
        encode_assignment({"b": [3, 1], "a": []}, version=3, user_data=b"x")
    ) == {"b": [1, 3], "a": []}
    assert decode_assignment(b"") == {}


@pytest.mark.parametrize(
    "data, words",
    [
        (b"\x00", "inside the version at offset 0"),
        (bytes.fromhex("0000 7fffffff"), "topic count of 2147483647 at offset 2 does not fit"),
        (
            bytes.fromhex("0000 00000001 0009 7474 00000000"),
            "topic name of 9 bytes at offset 6 does not fit",
        ),
        (bytes.fromhex("0000 00000001 0001 74 00100000"), "partition count of 1048576 at offset 9"),
        (bytes.fromhex("0000 00000001 0001 ff 00000000"), "not UTF-8"),
        (bytes.fromhex("ffff"), "assignment version -1"),
    ],
)
def test_bad_assignment_bytes_name_the_offset(data, words):
    with pytest.raises(ValueError, match=words):
        decode_assignment(data)


# ---------------------------------------------------------------- describe


def test_classic_group_on_a_kip848_broker_falls_back(scripted, call):
    broker = scripted(versions={**MODERN, CONSUMER_GROUP_DESCRIBE: (0, 1)})
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        CONSUMER_GROUP_DESCRIBE: [consumer_group_described([], state="", error=69)],
        DESCRIBE_GROUPS: [described([("m1", None, {"t": [0]})])],
    }
    d = call(broker, "describe_group", "orders")
    assert d.api == "DescribeGroups v6" and d.members[0].member_id == "m1"
    assert len(broker.seen(CONSUMER_GROUP_DESCRIBE)) == 1


def test_kip848_answer_without_members_is_checked_with_describe_groups(scripted, call):
    # Tansu 0.6 answers ConsumerGroupDescribe for a classic group: its state, no members.
    broker = scripted(versions={**MODERN, CONSUMER_GROUP_DESCRIBE: (0, 0)})
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        CONSUMER_GROUP_DESCRIBE: [consumer_group_described([])],
        DESCRIBE_GROUPS: [described([("m1", "i1", {"t": [0]})])],
    }
    d = call(broker, "describe_group", "orders")
    assert d.api == "DescribeGroups v6" and [m.group_instance_id for m in d.members] == ["i1"]


def test_describe_errors_and_retries(scripted, call):
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        DESCRIBE_GROUPS: [described([], error=NOT_COORDINATOR), described([], state="Empty")],
    }
    clock = FakeClock()
    d = call(broker, "describe_group", "orders", clock=clock)
    assert d.state == "Empty" and d.members == [] and len(broker.seen(FIND_COORDINATOR)) == 2
    assert clock.slept == [0.1]
    broker.script[DESCRIBE_GROUPS] = [described([], error=30)]
    with pytest.raises(GroupAuthorizationError, match="not authorized to describe group 'orders'"):
        call(broker, "describe_group", "orders")
    broker.script[DESCRIBE_GROUPS] = [described([], error=69)]
    with pytest.raises(GroupNotFoundError):
        call(broker, "describe_group", "orders")


def test_unreadable_assignment_is_reported_not_raised(scripted, call):
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        DESCRIBE_GROUPS: [described([("m1", "i1", b"\x00\x00\x7f\xff\xff\xff")])],
    }
    member = call(broker, "describe_group", "orders").members[0]
    assert member.assignment == {} and "does not fit" in member.assignment_error


# ---------------------------------------------------------------- removal


def test_remove_by_member_id_and_instance_id(scripted, call):
    broker, group = group_broker(scripted, static=("a", "b"), dynamic=("dyn-1", "dyn-2"))
    result = call(broker, "remove_members", "orders", ["a"], ["dyn-2", "ghost"])
    assert result.removed == ["a", "dyn-2"] and list(result.failed) == ["ghost"]
    sent = broker.seen(LEAVE_GROUP)[0][1].members
    assert [(m.member_id, m.group_instance_id) for m in sent] == [
        ("", "a"),
        ("dyn-2", None),
        ("ghost", None),
    ]
    assert group.dynamic == ["dyn-1"] and list(group.static) == ["b"]


def test_remove_all_describes_then_removes_everyone(scripted, call):
    broker, group = group_broker(scripted, static=("a", "b"), dynamic=("dyn-1",))
    result = call(broker, "remove_members", "orders", remove_all=True, reason="drain")
    assert result.removed == ["a", "b", "dyn-1"] and not result.failed
    sent = broker.seen(LEAVE_GROUP)[0][1].members
    # As Kafka's Admin does: every member by member id, with its instance id when it has one.
    assert [(m.member_id, m.group_instance_id) for m in sent] == [
        ("a-0000", "a"),
        ("b-0001", "b"),
        ("dyn-1", None),
    ]
    assert group.static == {} and group.dynamic == []
    empty = call(broker, "remove_members", "orders", remove_all=True)
    assert empty.members == [] and len(broker.seen(LEAVE_GROUP)) == 1  # nothing left: nothing sent


def test_dry_run_on_a_broker_too_old_to_remove(scripted, call):
    from fastkwire.admin import BrokerTooOldError

    broker, _ = group_broker(scripted, versions={**MODERN, LEAVE_GROUP: (0, 2)})
    with pytest.raises(BrokerTooOldError, match="Nothing was sent"):
        call(broker, "plan_removal", "orders", ["a"])
    assert broker.seen(DESCRIBE_GROUPS) == []


def test_member_selection_is_checked_before_connecting():
    client = AdminClient(f"127.0.0.1:{closed_port()}", request_timeout_ms=500)
    for kwargs, words in [
        ({}, "at least one"),
        ({"group_instance_ids": ["a"], "remove_all": True}, "name no member"),
        ({"member_ids": ["m", "m"]}, "each member id may be given once"),
        ({"member_ids": [""]}, "member id must be a non-empty"),
    ]:
        with pytest.raises(ValueError, match=words):
            client.remove_members("orders", **kwargs)


def test_failover_to_the_next_bootstrap_server(scripted, call):
    closing = scripted(script={API_VERSIONS: [CLOSE]})
    broker, _ = group_broker(scripted)
    servers = f"127.0.0.1:{closed_port()},{closing.address},{broker.address}"
    # Refused, then hung up on, then the good one.
    assert call(servers, "remove_members", "orders", ["a"], timeout=4.0).removed == ["a"]


def test_bootstrap_servers_share_the_time_left():
    # The flow itself, on a fake clock: each server may use its share of what is left (a
    # silent one cannot use up the next one's time), and a timeout moves on to the next.
    from types import SimpleNamespace

    from fastkwire.connection import Connect, Deadline
    from fastkwire.connection_errors import KafkaConnectionError, KafkaTimeoutError

    clock = FakeClock()
    flow = AdminClient("a:1,b:2,c:3", request_timeout_ms=4000)._api_versions_flow(
        Deadline(4.0, clock)
    )
    step = next(flow)
    assert isinstance(step, Connect) and (step.host, step.port) == ("a", 1)
    assert step.deadline.remaining() == pytest.approx(4.0 / 3)
    step = flow.throw(KafkaConnectionError("refused"))
    assert step.host == "b" and step.deadline.remaining() == pytest.approx(2.0)
    clock.time += 2.0  # b was silent for its whole share
    step = flow.throw(KafkaTimeoutError("silent"))
    assert step.host == "c" and step.deadline.remaining() == pytest.approx(2.0)
    with pytest.raises(StopIteration) as done:
        flow.send(SimpleNamespace(host="c", port=3, versions={18: (0, 4)}))
    assert done.value.value == {18: (0, 4)}


# ---------------------------------------------------------------- command line


def run_main(capsys, argv):
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_cli_describe_group_table_and_json(scripted, capsys):
    broker, _ = group_broker(scripted, static=("a",), dynamic=("dyn-\x1b[2J",))
    code, out, err = run_main(
        capsys, ["describe-group", "--bootstrap-server", broker.address, "--group", "orders"]
    )
    assert code == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == (
        f"Group 'orders': state Stable, protocol consumer/range, coordinator {broker.address} "
        "(node 1), 2 members (DescribeGroups v6)"
    )
    assert lines[1].split() == [
        "MEMBER",
        "ID",
        "INSTANCE",
        "ID",
        "CLIENT",
        "ID",
        "HOST",
        "ASSIGNMENT",
    ]
    assert lines[2].split() == ["a-0000", "a", "client-a-0000", "/10.0.0.0", "orders:0"]
    assert lines[3].split()[:2] == [r"dyn-\x1b[2J", "-"] and all(
        line.isprintable() for line in lines
    )
    code, out, _ = run_main(
        capsys,
        ["describe-group", "--bootstrap-server", broker.address, "--group", "orders", "--json"],
    )
    data = json.loads(out)
    assert (
        code == 0
        and data["state"] == "Stable"
        and data["members"][0]["assignment"] == {"orders": [0]}
    )
    assert data["members"][1]["group_instance_id"] is None


def test_cli_says_when_the_broker_reports_no_instance_ids(scripted, capsys):
    # As Tansu 0.6 does for consumers started with group_instance_id: every member is
    # described without one, and a removal by one is UNKNOWN_MEMBER_ID.
    broker, group = group_broker(scripted, static=(), dynamic=("d1", "d2"))
    argv = ["remove-members", "--bootstrap-server", broker.address, "--group", "orders"]
    code, out, err = run_main(capsys, argv + ["--instance-id", "host-0", "--dry-run"])
    assert code == 0 and err == ""
    assert "Not in the group: group.instance.id 'host-0'" in out
    assert (
        "The broker reports no group.instance.id for any of the group's 2 members: if the "
        "consumers were started with one" in " ".join(out.split())
    )
    assert "static membership (KIP-345)" in out and "--member-id" in out
    code, out, err = run_main(capsys, argv + ["--instance-id", "host-0"])
    assert code != 0 and "UNKNOWN_MEMBER_ID" in out
    assert "The broker knows none of these group.instance.ids" in out
    # a group whose members do carry instance ids gets neither line for a real typo
    broker, group = group_broker(scripted, static=("a", "b"))
    argv = ["remove-members", "--bootstrap-server", broker.address, "--group", "orders"]
    code, out, _ = run_main(capsys, argv + ["--instance-id", "ghost", "--dry-run"])
    assert "Not in the group" in out and "reports no group.instance.id" not in out


@pytest.mark.parametrize(
    "argv_tail, words",
    [
        ([], "give at least one --instance-id or --member-id (or --all)"),
        (["--all", "--instance-id", "a"], "name no member"),
        (["--member-id", "m", "--member-id", "m"], "each member id may be given once"),
    ],
)
def test_cli_member_selection_usage_errors(capsys, argv_tail, words):
    code, _, err = run_main(
        capsys,
        [
            "remove-members",
            "--bootstrap-server",
            f"127.0.0.1:{closed_port()}",
            "--group",
            "g",
            *argv_tail,
        ],
    )
    assert code == 2 and words in err


SECRET = "s3cret-Value-0a9f"


@pytest.mark.parametrize(
    "argv_tail",
    [
        ["--sasl-password", SECRET, "--timeout", "nope"],
        [f"--sasl-password={SECRET}", "--security-protocol", "KERBEROS"],
        ["--sasl-passwd", SECRET],  # misspelt: argparse would list the value as unrecognized
        ["--ssl-password", SECRET, "--bogus"],
        ["--sasl-pass", SECRET],  # abbreviations are refused, not expanded
    ],
)
def test_cli_usage_errors_never_echo_a_secret(capsys, argv_tail):
    with pytest.raises(SystemExit) as info:
        cli.main(
            [
                "remove-members",
                "--bootstrap-server",
                "127.0.0.1:9",
                "--group",
                "g",
                "--instance-id",
                "a",
                *argv_tail,
            ]
        )
    err = capsys.readouterr().err
    assert info.value.code == 2 and "error:" in err
    assert SECRET not in err


def test_cli_sasl_without_a_sasl_protocol_is_a_usage_error(capsys):
    code, _, err = run_main(
        capsys,
        [
            "remove-members",
            "--bootstrap-server",
            "127.0.0.1:9",
            "--group",
            "g",
            "--instance-id",
            "a",
            "--sasl-mechanism",
            "PLAIN",
            "--sasl-username",
            "u",
            "--sasl-password",
            SECRET,
        ],
    )
    assert code == 2 and "uses no SASL" in err and SECRET not in err


@pytest.mark.parametrize(
    "argv_tail, words",
    [
        (
            ["--ssl-cafile", "never-read.pem"],
            r"TLS options are given \(--ssl-cafile 'never-read.pem'\), but --security-protocol PLAINTEXT",
        ),
        (
            ["--ssl-cafile", "ca.pem", "--no-ssl-check-hostname"],
            r"\(--ssl-cafile 'ca.pem', --no-ssl-check-hostname\)",
        ),
        (
            ["--no-ssl-strict-x509"],
            r"\(--no-ssl-strict-x509\), but --security-protocol PLAINTEXT",
        ),
        (
            [
                "--no-ssl-check-hostname",
                "--security-protocol",
                "SASL_PLAINTEXT",
                "--sasl-username",
                "u",
                "--sasl-password",
                SECRET,
            ],
            "SASL_PLAINTEXT uses no TLS",
        ),
    ],
)
def test_cli_tls_options_without_a_tls_protocol_are_a_usage_error(capsys, argv_tail, words):
    # Ignoring them would leave the session plaintext; nothing is read or sent.
    code, _, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            f"127.0.0.1:{closed_port()}",
            "--group",
            "g",
            *argv_tail,
        ],
    )
    assert code == 2 and re.search(words, err) and SECRET not in err


# ---------------------------------------------------------------- --command-config


def test_properties_file_parsing():
    text = (
        "# comment\n! other comment\nsecurity.protocol = SASL_SSL\nsasl.mechanism:SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required \\\n"
        '    username="ops" \\\n    password="p@ss word=1";\n'
        "ssl.truststore.location=/etc/ca.pem\nssl.endpoint.identification.algorithm=\n"
    )
    props = parse_properties(text)
    assert props["security.protocol"] == "SASL_SSL" and props["sasl.mechanism"] == "SCRAM-SHA-512"
    assert security_options(props) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "SCRAM-SHA-512",
        "ssl_cafile": "/etc/ca.pem",
        "ssl_check_hostname": False,
        "sasl_plain_username": "ops",
        "sasl_plain_password": "p@ss word=1",
    }
    plain = security_options(
        parse_properties(
            "security.protocol=SASL_PLAINTEXT\nsasl.jaas.config=org.apache.kafka.common.security.plain."
            'PlainLoginModule required username="u" password="pw";'
        )
    )
    assert plain["sasl_mechanism"] == "PLAIN" and plain["sasl_plain_password"] == "pw"


@pytest.mark.parametrize(
    "text, words",
    [
        ("ssl.truststore.location=/x.jks\nssl.truststore.type=JKS", "only PEM files"),
        (
            "sasl.jaas.config=com.sun.security.auth.module.Krb5LoginModule required;",
            "only PlainLoginModule",
        ),
        (
            'sasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=org.x.PlainLoginModule required username="u" '
            f'password="{SECRET}";',
            "does not go with PlainLoginModule",
        ),
        (
            f'sasl.jaas.config=org.x.ScramLoginModule required password="{SECRET}";',
            "does not go with",
        ),
        (
            f'sasl.mechanism=SCRAM-SHA-256\nsasl.jaas.config=org.x.ScramLoginModule required password="{SECRET}";',
            "needs username",
        ),
        (f"sasl.jaas.config=nonsense {SECRET}", "is not 'LoginModuleClass required"),
    ],
)
def test_bad_command_config_names_the_key_not_the_secret(text, words):
    with pytest.raises(ValueError, match=words) as info:
        security_options(parse_properties(text))
    assert SECRET not in str(info.value)


def test_cli_command_config_and_environment(scripted, tmp_path, capsys, monkeypatch):
    from sasl_server import SaslServer

    server = SaslServer({"ops": SECRET})
    broker = scripted(sasl=server)
    group = DescribedKafkaGroup(["a"])
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], DESCRIBE_GROUPS: [group.describe]}
    config = tmp_path / "client.properties"
    config.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-256\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="ops" password="{SECRET}";\n'
    )
    argv = ["describe-group", "--bootstrap-server", broker.address, "--group", "orders", "--json"]
    code, out, err = run_main(capsys, argv + ["--command-config", str(config)])
    assert code == 0 and json.loads(out)["members"][0]["group_instance_id"] == "a"
    assert SECRET not in out + err
    # A wrong password from the environment wins over the file: exit 3, one line, no secret.
    monkeypatch.setenv("FASTKWIRE_SASL_PASSWORD", "wrong-" + SECRET)
    code, out, err = run_main(capsys, argv + ["--command-config", str(config)])
    assert code == 3 and json.loads(out)["error"]["type"] == "SaslAuthenticationError"
    assert "check the user name and password" in err and SECRET not in out + err
    assert server.authenticated == [("SCRAM-sha256", "ops")]


def test_cli_process_tls_error_exits_3(scripted, tls_files):  # noqa: F811
    broker = scripted(tls=server_context(tls_files))
    proc = run_cli(
        "describe-group",
        "--bootstrap-server",
        broker.address,
        "--group",
        "g",
        "--security-protocol",
        "SSL",
        "--ssl-cafile",
        tls_files.other_ca,
        "--timeout",
        "5",
    )
    assert proc.returncode == 3 and proc.stdout == ""
    assert proc.stderr.startswith(
        "fastkwire describe-group: error: the TLS certificate of 127.0.0.1:"
    )
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_cli_oauthbearer_token_from_the_environment(scripted, capsys, monkeypatch):
    from sasl_server import SaslServer

    broker = scripted(sasl=SaslServer(tokens=["tok-" + SECRET]))
    group = DescribedKafkaGroup(["a"])
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], DESCRIBE_GROUPS: [group.describe]}
    argv = [
        "describe-group",
        "--bootstrap-server",
        broker.address,
        "--group",
        "orders",
        "--security-protocol",
        "SASL_PLAINTEXT",
        "--sasl-mechanism",
        "OAUTHBEARER",
    ]
    code, _, err = run_main(capsys, argv)
    assert code == 2 and "FASTKWIRE_SASL_OAUTH_TOKEN, which is not set" in err
    monkeypatch.setenv("FASTKWIRE_SASL_OAUTH_TOKEN", "tok-" + SECRET)
    code, out, err = run_main(capsys, argv)
    assert code == 0 and "coordinator" in out and ", 1 member (DescribeGroups v6)" in out
    monkeypatch.setenv("FASTKWIRE_SASL_OAUTH_TOKEN", "expired-" + SECRET)
    code, out, err = run_main(capsys, argv + ["--json"])
    assert code == 3 and "rejected the OAUTHBEARER token" in err
    assert SECRET not in out + err


def test_cli_command_config_keystore_for_a_client_certificate(
    scripted, tls_files, tmp_path, capsys
):  # noqa: F811
    broker = scripted(tls=server_context(tls_files, require_client_cert=True))
    group = DescribedKafkaGroup(["a"])
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], DESCRIBE_GROUPS: [group.describe]}
    config = tmp_path / "tls.properties"
    argv = [
        "describe-group",
        "--bootstrap-server",
        broker.address,
        "--group",
        "orders",
        "--command-config",
        str(config),
    ]
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={tls_files.ca}\n")
    code, _, err = run_main(capsys, argv)
    assert code == 3 and "client certificate" in err  # no keystore: the broker wants one
    config.write_text(
        f"security.protocol=SSL\nssl.truststore.location={tls_files.ca}\n"
        f"ssl.keystore.type=PEM\nssl.keystore.location={tls_files.client_bundle}\n"
    )
    code, out, err = run_main(capsys, argv)
    assert code == 0, err
    assert ", 1 member (DescribeGroups v6)" in out


# ---------------------------------------------------------------- properties and JAAS, as Kafka reads them

JAAS = "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "


@pytest.mark.parametrize(
    "value, words",
    [
        # Kafka refuses more than one login module: their options were merged.
        (
            'username="u" password="p"; org.x.ScramLoginModule required username="admin" password="q";',
            "more than one login module",
        ),
        (f'username="u" password="{SECRET};', "quote that is never closed"),
        (f'username="u" password={SECRET}', "must end its login module with ';'"),
    ],
)
def test_jaas_config_refusals(value, words):
    with pytest.raises(ValueError, match=words) as info:
        security_options(parse_properties(JAAS + value))
    assert SECRET not in str(info.value)


def test_properties_unicode_escapes_are_decoded_as_java_does():
    props = parse_properties(
        "sasl.mechanism=\\u0050LAIN\n" + JAAS + 'username="\\u00e9t\\u00E9" '
        'password="p\\ud83d\\ude00";\n\\u0073ecurity.protocol=SASL_SSL\n'
    )
    assert security_options(props) == {
        "security_protocol": "SASL_SSL",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": "\u00e9t\u00e9",
        "sasl_plain_password": "p\U0001f600",
    }
    with pytest.raises(ValueError, match=r"malformed \\uXXXX escape") as info:
        parse_properties(f"ssl.key.password={SECRET}\\u12")
    assert SECRET not in str(info.value)


def test_jaas_config_parsing_is_linear():
    # A long run of whitespace or of one word made the old regular expressions quadratic
    # (minutes for these); a subprocess bounds a regression instead of hanging the run.
    code = (
        "from fastkwire.client_config import parse_properties, security_options\n"
        "n = 200_000\n"
        "for value in ['required' + ' ' * n + 'x', 'required u=' + 'x' * n + ' ', 'required' + ' x=y' * n]:\n"
        "    try:\n"
        "        security_options(parse_properties('sasl.jaas.config=org.x.PlainLoginModule ' + value))\n"
        "    except ValueError as exc:\n"
        "        print(exc)\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONPATH=PACKAGE_ROOT),
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("is not 'LoginModuleClass required") == 1
    assert proc.stdout.count("must end its login module with ';'") == 2


def test_command_config_errors_never_quote_a_value_a_backslash_joined(tmp_path, capsys):
    # A trailing backslash joins the next line (a password) into the value, as Java does.
    config = tmp_path / "joined.properties"
    for joined in ("ssl.key.password=hunter2", "hunter2"):
        config.write_text(f"security.protocol=SASL_SSL\\\n{joined}\n")
        code, _, err = run_main(
            capsys,
            [
                "describe-group",
                "--bootstrap-server",
                "127.0.0.1:9",
                "--group",
                "g",
                "--command-config",
                str(config),
            ],
        )
        assert (
            code == 2
            and (
                f"security.protocol in {config} must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, "
                "SASL_SSL (the value given is not shown)"
            )
            in err
        )
        assert "HUNTER2" not in err.upper()
    with pytest.raises(ValueError, match="sasl_mechanism must be one of") as info:
        Security("SASL_SSL", sasl_mechanism="PLAINhunter2")
    assert "hunter2" not in str(info.value)
    for text in (
        f"sasl.mechanism=PLAIN\\\n{SECRET}\n{JAAS.replace('plain.Plain', 'scram.Scram')}u=1;",
        f"ssl.truststore.type=PEM\\\n{SECRET}\nssl.truststore.location=/x.pem",
        f"sasl.jaas.config=org.x.{SECRET} required;",
    ):
        with pytest.raises(ValueError) as info:
            security_options(parse_properties(text))
        assert SECRET.upper() not in str(info.value).upper()


def test_unknown_properties_keys_are_warned_about(tmp_path, capsys):
    config = tmp_path / "typo.properties"
    config.write_text(f"securty.protocol=SSL\nssl.truststore.location=/etc/ca.pem\n{SECRET}\n")
    code, _, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            f"127.0.0.1:{closed_port()}",
            "--group",
            "g",
            "--command-config",
            str(config),
        ],
    )
    lines = err.splitlines()
    assert "warning: the command config's key 'securty.protocol' is not used here" in lines[0]
    assert (
        "warning: the command config's key (a key that is not shown) is not used here" in lines[1]
    )
    # ...and the trust store without a TLS protocol is refused, not ignored.
    assert (
        code == 2
        and "TLS options are given (ssl.truststore.location in " in lines[2]
        and SECRET not in err
    )
    from fastkwire.client_config import UnusedConfigWarning

    with pytest.warns(UnusedConfigWarning, match="'bootstrap.servers' is not used here"):
        assert security_options(
            parse_properties("bootstrap.servers=b:9092\nsecurity.protocol=SSL")
        ) == {"security_protocol": "SSL"}


def test_command_config_that_is_a_fifo_is_refused(tmp_path, capsys):
    fifo = tmp_path / "client.properties"
    os.mkfifo(fifo)
    done = {}
    worker = threading.Thread(
        target=lambda: done.setdefault(
            "result",
            run_main(
                capsys,
                [
                    "describe-group",
                    "--bootstrap-server",
                    "127.0.0.1:9",
                    "--group",
                    "g",
                    "--command-config",
                    str(fifo),
                    "--timeout",
                    "1",
                ],
            ),
        )
    )
    worker.start()
    worker.join(5)
    if worker.is_alive():  # opening the FIFO waits for a writer: give it one, then fail
        with open(fifo, "w"):
            pass
        worker.join(5)
        pytest.fail("reading a FIFO as --command-config blocked")
    code, _, err = done["result"]
    assert code == 2 and "cannot read the command config" in err and "not a regular file" in err


def test_cli_warns_of_exposed_secrets(capsys, monkeypatch):
    argv = ["describe-group", "--bootstrap-server", "127.0.0.1:9", "--group", "g", "--group", ""]
    code, _, err = run_main(
        capsys,
        argv
        + [
            "--security-protocol",
            "SASL_PLAINTEXT",
            "--sasl-username",
            "u",
            "--sasl-password",
            SECRET,
        ],
    )
    assert "warning: --sasl-password on the command line is visible to other users" in err
    assert (
        "warning: SASL PLAIN over SASL_PLAINTEXT sends the password unencrypted" in err
        and SECRET not in err
    )
    monkeypatch.setenv("FASTKWIRE_SASL_OAUTH_TOKEN", SECRET)
    code, _, err = run_main(
        capsys, argv + ["--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "OAUTHBEARER"]
    )
    assert (
        err.count("warning:") == 1
        and "OAUTHBEARER over SASL_PLAINTEXT sends the token unencrypted" in err
    )
    monkeypatch.setenv("FASTKWIRE_SASL_PASSWORD", SECRET)
    code, _, err = run_main(
        capsys,
        argv
        + [
            "--security-protocol",
            "SASL_SSL",
            "--sasl-mechanism",
            "SCRAM-SHA-512",
            "--sasl-username",
            "u",
        ],
    )
    assert "warning:" not in err


def test_a_command_config_that_is_not_utf8_keeps_its_bytes_out_of_the_error(tmp_path):
    # The UnicodeDecodeError holds the whole file: it must not even be the error's context.
    config = tmp_path / "latin1.properties"
    config.write_bytes(f"ssl.key.password={SECRET}\n# caf\xe9\n".encode("latin-1"))
    from fastkwire.client_config import read_properties

    with pytest.raises(ValueError, match="is not UTF-8|: not UTF-8") as info:
        read_properties(str(config))
    assert info.value.__context__ is None and info.value.__cause__ is None


# ---------------------------------------------------------------- what a new user meets (issue 22)


@pytest.mark.parametrize("flag", ["--ssl-cafile", "--ssl-certfile"])
def test_cli_names_the_missing_tls_file_the_user_gave(capsys, tmp_path, flag):
    # ssl raises FileNotFoundError with filename=None: the message names the flag and its path.
    missing = str(tmp_path / "nonexistent.pem")
    code, _, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            f"127.0.0.1:{closed_port()}",
            "--group",
            "g",
            "--security-protocol",
            "SSL",
            flag,
            missing,
        ],
    )
    assert code == 2
    assert err.strip().endswith(f"error: cannot read {flag} {missing!r}: no such file"), err
    # From a command config, the key and the file (a value there is never quoted).
    config = tmp_path / "client.properties"
    config.write_text(f"security.protocol=SSL\nssl.truststore.location={missing}\n")
    code, _, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            f"127.0.0.1:{closed_port()}",
            "--group",
            "g",
            "--command-config",
            str(config),
        ],
    )
    assert code == 2 and f"cannot read ssl.truststore.location in {config}: no such file" in err


def test_library_option_errors_keep_the_parameter_names(tmp_path):
    missing = str(tmp_path / "nonexistent.pem")
    with pytest.raises(ValueError, match=r"^cannot read ssl_certfile: no such file$"):
        Security("SSL", ssl_certfile=missing, ssl_keyfile=__file__)  # the one missing file is named
    with pytest.raises(ValueError, match="^group_id must be a non-empty string, not ''$"):
        AdminClient("127.0.0.1:9").describe_group("")
    with pytest.raises(
        ValueError, match="^sasl_mechanism PLAIN needs sasl_plain_username and sasl_plain_password$"
    ):
        Security("SASL_SSL")


@pytest.mark.parametrize(
    "argv_tail, env, words",
    [
        (["--group", ""], {}, "error: --group must be a non-empty string, not ''"),
        (
            ["--group", "g", "--all", "--instance-id", "a"],
            {},
            "error: --all removes every member: name no member with it",
        ),
        (["--group", "g"], {}, "error: give at least one --instance-id or --member-id (or --all)"),
        (
            ["--group", "g", "--member-id", "m", "--security-protocol", "SASL_SSL"],
            {},
            "error: --sasl-mechanism PLAIN needs --sasl-username and --sasl-password",
        ),
        (
            [
                "--group",
                "g",
                "--member-id",
                "m",
                "--security-protocol",
                "SSL",
                "--ssl-cafile",
                __file__,
            ],
            {"FASTKWIRE_SSL_PASSWORD": "pw"},
            "is FASTKWIRE_SSL_PASSWORD right?)",
        ),
    ],
)
def test_cli_errors_name_the_flags_the_user_typed(capsys, monkeypatch, argv_tail, env, words):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    code, _, err = run_main(
        capsys, ["remove-members", "--bootstrap-server", f"127.0.0.1:{closed_port()}", *argv_tail]
    )
    assert code == 2 and words in err, err
    assert not re.search(
        r"\b(group_id|remove_all|sasl_plain_\w+|ssl_password|security_protocol)\b", err
    )


def test_cli_command_config_errors_name_the_key_and_the_file(capsys, tmp_path):
    config = tmp_path / "client.properties"
    config.write_text("security.protocol=TLS\n")
    code, _, err = run_main(
        capsys,
        [
            "describe-group",
            "--bootstrap-server",
            "127.0.0.1:9",
            "--group",
            "g",
            "--command-config",
            str(config),
        ],
    )
    assert (
        code == 2 and f"error: security.protocol in {config} must be one of PLAINTEXT, SSL" in err
    )


def test_cli_removal_table_is_headed_by_the_ids_given(scripted, capsys):
    broker, _ = group_broker(scripted, static=("a", "b"), dynamic=("dyn-1", "dyn-2"))
    base = ["remove-members", "--bootstrap-server", broker.address, "--group", "orders"]
    code, out, _ = run_main(capsys, [*base, "--member-id", "dyn-1"])
    lines = out.splitlines()
    assert (
        code == 0
        and lines[1].split() == ["MEMBER", "ID", "RESULT", "ERROR"]
        and lines[2].split() == ["dyn-1", "removed"]
    )
    code, out, _ = run_main(capsys, [*base, "--instance-id", "a", "--member-id", "dyn-2"])
    lines = out.splitlines()
    assert code == 0 and lines[1].split() == ["MEMBER", "ID", "INSTANCE", "ID", "RESULT", "ERROR"]
    assert [line.split()[:3] for line in lines[2:4]] == [
        ["a-0000", "a", "removed"],
        ["dyn-2", "-", "removed"],
    ]
    code, out, _ = run_main(capsys, [*base, "--instance-id", "b"])
    assert out.splitlines()[1].split() == ["INSTANCE", "ID", "RESULT", "ERROR"]


@pytest.mark.parametrize("state, exists", [("Empty", None), ("Dead", False), ("Stable", True)])
def test_describe_group_does_not_claim_an_empty_answer_exists(scripted, capsys, state, exists):
    # Tansu answers Empty, without members, for a group that never existed; Apache Kafka
    # answers Dead. Only Dead says the group is missing; Empty cannot tell.
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        DESCRIBE_GROUPS: [described([], state=state)],
    }
    args = ["describe-group", "--bootstrap-server", broker.address, "--group", "never-made"]
    code, out, _ = run_main(capsys, [*args, "--json"])
    assert code == 0 and json.loads(out)["exists"] is exists
    code, out, _ = run_main(capsys, args)
    said = {
        None: "does not tell an empty group from one that does not exist",
        False: "The group does not exist",
        True: None,
    }[exists]
    assert (said in out) if said else ("exist" not in out)

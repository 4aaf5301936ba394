"""The admin client and CLI against hostile brokers (tests/fakes.py): garbage bytes, made-up
frame sizes, wrong correlation ids, stalls and drips, endless NOT_COORDINATOR, coordinators
no one can connect to, and text built to rewrite the operator's terminal.

Each failure must be an AdminError subclass that names what went wrong, within the
request timeout, with memory bounded by what a sane answer takes; the CLI must exit 3 with
one line on stderr, free of control characters. Calls run on AdminClient and, where the
`call` fixture is used, on AsyncAdminClient too.
"""

import asyncio
import json
import re
import struct
import time
import tracemalloc

import pytest

from fastkwire import (
    FindCoordinatorRequest,
    LeaveGroupRequest,
    LeaveGroupResponse,
    cli,
    encode_response,
)
from fastkwire._printable import printable
from fastkwire.admin import (
    ANSWER_LIMITS,
    AdminClient,
    AdminTimeoutError,
    AsyncAdminClient,
    BrokerConnectionError,
    BrokerError,
    ResponseError,
    parse_servers,
)

from fakes import (  # noqa: F401 - scripted is a fixture
    FakeClock,
    API_VERSIONS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    MODERN,
    LEAVE_GROUP,
    NOT_COORDINATOR,
    SILENT,
    WRONG_CORRELATION,
    Drip,
    KafkaLikeGroup,
    Raw,
    closed_port,
    coordinator_at,
    find_error,
    leave_error,
    run_cli,
    scripted,
    on_clock,
)

INVALID_REQUEST = 42
HOSTILE_TEXT = (
    "boom\n\x1b[2J\x1b]0;owned\x07fake line\r\x7f\x9b31m\u202etxt.exe\u2028\u200b\ufeffend"
)
CONTROL_BYTES = [
    b"\x1b",
    b"\n",
    b"\r",
    b"\x07",
    b"\x7f",
    "\x9b".encode(),
    "\u202e".encode(),
    "\u2028".encode(),
    "\u200b".encode(),
    "\ufeff".encode(),
]


@pytest.fixture(params=["sync", "async"])
def call(request):
    """call(servers, method, *args, timeout=seconds): one call on AdminClient or AsyncAdminClient."""

    def run(servers, method, *args, timeout=1.0, clock=None):
        servers = servers if isinstance(servers, str) else servers.address
        if request.param == "sync":
            return getattr(
                on_clock(AdminClient(servers, request_timeout_ms=timeout * 1000), clock), method
            )(*args)

        async def go():
            client = on_clock(AsyncAdminClient(servers, request_timeout_ms=timeout * 1000), clock)
            return await getattr(client, method)(*args)

        return asyncio.run(go())

    return run


def removal(broker, *extra):
    return [
        "remove-members",
        "--bootstrap-server",
        broker if isinstance(broker, str) else broker.address,
        "--group",
        "orders",
        "--instance-id",
        "a",
        *extra,
    ]


def run_main(capsys, argv):
    """cli.main in this process: (exit code, stdout, stderr)."""
    code = cli.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_clean_line(err):
    assert err.endswith("\n") and err.count("\n") == 1, err
    assert err[:-1].isprintable(), err
    assert "Traceback" not in err


# ---------------------------------------------------------------- garbage and made-up sizes


@pytest.mark.parametrize(
    "data, words",
    [
        (
            b"HTTP/1.1 400 Bad Request\r\n\r\n",
            r"announced a 1213486160-byte answer to ApiVersions v4, more than "
            r"the \d+ bytes such an answer can take \(is this a Kafka listener",
        ),
        (b"\x15\x03\x03\x00\x02\x02\x46", r"announced a 352518912-byte answer"),  # a TLS alert
        (struct.pack(">i", 2**31 - 1), r"announced a 2147483647-byte answer"),
        (struct.pack(">i", -2), r"frame size of -2 bytes in answer to ApiVersions v4"),
        (struct.pack(">i", -(2**31)), r"frame size of -2147483648 bytes"),
        (struct.pack(">i", 0), r"frame size of 0 bytes"),
        (struct.pack(">i", 3) + b"\0\0\0", r"frame size of 3 bytes"),
    ],
)
def test_garbage_sizes_are_refused_at_once(scripted, call, data, words):
    broker = scripted(script={API_VERSIONS: [Raw(data)]})
    start = time.monotonic()
    with pytest.raises(ResponseError, match=words):
        call(broker, "api_versions", timeout=2.0)
    assert time.monotonic() - start < 1.0  # refused on the size, not after waiting for the body


def stated_limit(exc):
    return int(re.search(r"more than the (\d+) bytes", str(exc)).group(1))


@pytest.mark.parametrize(
    "api, announced", [(API_VERSIONS, 50 << 20), (FIND_COORDINATOR, 300 * 1024)]
)
def test_announced_size_is_capped_per_api(scripted, api, announced):
    # Sizes the old 64 MiB cap let through: refused on the size, the error names size and limit.
    broker = scripted()
    broker.script = {api: [Raw(struct.pack(">i", announced) + b"\0" * 16)]}
    name = {API_VERSIONS: "ApiVersions v4", FIND_COORDINATOR: "FindCoordinator v6"}[api]
    start = time.monotonic()
    with pytest.raises(
        ResponseError, match=f"announced a {announced}-byte answer to {name}, more than the"
    ) as info:
        AdminClient(broker.address, request_timeout_ms=2000).find_coordinator("orders")
    assert time.monotonic() - start < 1.0
    fixed = ANSWER_LIMITS[api][0]
    assert fixed < stated_limit(info.value) < fixed + 200  # plus the request's size


def big_leave_answer(request, version):
    # Member ids of 1000 characters: large, but what a broker may send for many members.
    return LeaveGroupResponse(
        members=[
            LeaveGroupResponse.MemberResponse(
                member_id=m.group_instance_id * 1000, group_instance_id=m.group_instance_id
            )
            for m in request.members
        ]
    )


def test_leave_group_limit_grows_with_the_members_asked(scripted):
    broker = scripted()
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], LEAVE_GROUP: [big_leave_answer]}
    ids = [
        f"{n:02x}" for n in range(40)
    ]  # 40 members, ~80 KB of answer: above the fixed part alone
    fixed, per_member = ANSWER_LIMITS[LEAVE_GROUP]
    assert 2 * 1000 * len(ids) > fixed
    result = AdminClient(broker.address, request_timeout_ms=5000).remove_members_from_group(
        "orders", ids
    )
    assert result.removed == ids

    # The same answer, too big for the one member asked.
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [
            lambda r, v: big_leave_answer(
                LeaveGroupRequest(
                    members=[LeaveGroupRequest.MemberIdentity(group_instance_id=i) for i in ids]
                ),
                v,
            )
        ],
    }
    with pytest.raises(
        ResponseError, match=r"announced a \d+-byte answer to LeaveGroup v5, more than the"
    ) as info:
        AdminClient(broker.address, request_timeout_ms=5000).remove_members_from_group(
            "orders", ["a"]
        )
    assert fixed + per_member < stated_limit(info.value) < fixed + per_member + 200


def test_well_sized_garbage_does_not_decode(scripted, call):
    # The right correlation id, then bytes no ApiVersions answer starts with.
    garbage = lambda cid: struct.pack(">ii", 4 + 64, cid) + bytes(range(200, 256)) + b"\xff" * 8  # noqa: E731
    broker = scripted(script={API_VERSIONS: [Raw(garbage)]})
    with pytest.raises(
        ResponseError,
        match=r"could not decode the answer of 127.0.0.1:\d+ to ApiVersions v4: "
        r".* at offset \d+",
    ):
        call(broker, "api_versions")


@pytest.mark.parametrize("api", [API_VERSIONS, FIND_COORDINATOR, LEAVE_GROUP])
def test_wrong_correlation_id(scripted, call, api):
    broker = scripted()
    group = KafkaLikeGroup(["a"])
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], LEAVE_GROUP: [group]}
    broker.script[api] = [WRONG_CORRELATION, broker.script.get(api, [broker._api_versions])[0]]
    with pytest.raises(ResponseError, match=r"with correlation id 100\d, expected \d"):
        call(broker, "remove_members_from_group", "orders", ["a"])
    assert [k for k, _, _ in broker.requests][-1] == api  # nothing more was asked after it


# ---------------------------------------------------------------- stalls and drips


@pytest.mark.parametrize("sent", [b"", b"\x00\x00", struct.pack(">i", 100) + b"\0" * 50])
def test_stall_anywhere_ends_at_the_deadline(scripted, call, sent):
    # Silence before the answer, inside the size prefix, after it, in the middle of the body.
    broker = scripted(script={API_VERSIONS: [Raw(sent) if sent else SILENT]})
    start = time.monotonic()
    with pytest.raises(
        AdminTimeoutError, match=r"no answer from 127.0.0.1:\d+ to ApiVersions v4 within 0.2 s"
    ):
        call(broker, "api_versions", timeout=0.2)
    assert 0.15 < time.monotonic() - start < 0.7


def test_slow_drip_cannot_stretch_the_deadline(scripted, call):
    # Every read is bounded by what is left of the whole call, not by its own timeout.
    broker = scripted()
    broker.script = {FIND_COORDINATOR: [Drip(coordinator_at(broker), interval=0.05)]}
    start = time.monotonic()
    with pytest.raises(AdminTimeoutError, match="FindCoordinator v6 within 0.3 s"):
        call(broker, "find_coordinator", "orders", timeout=0.3)
    assert time.monotonic() - start < 0.8


def test_fast_drip_is_read_correctly(scripted, call):
    broker = scripted()
    broker.script = {
        API_VERSIONS: [Drip(broker._api_versions)],
        FIND_COORDINATOR: [Drip(coordinator_at(broker))],
    }
    found = call(broker, "find_coordinator", "orders", timeout=3.0)
    assert (found.host, found.port, found.node_id) == ("127.0.0.1", broker.port, 1)


def traced_peak(fn):
    """The peak of traced memory while fn() runs (it may raise a BrokerError)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        try:
            fn()
        except BrokerError:
            pass
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_drip_memory_follows_the_announced_size(scripted, call):
    # A FindCoordinator answer of ~3 KB (mostly its error message), sent at once and then one
    # byte per segment: the drip may not cost more than a little extra. Kept in a list of
    # chunks, each byte cost over 100 traced bytes (~385 KB here; more in the resident size).
    answer = find_error(INVALID_REQUEST, error_message="x" * 3000)
    size = len(
        encode_response(answer(FindCoordinatorRequest(coordinator_keys=["orders"]), 6), 6, 1)
    )
    assert 3000 < size < 3100

    whole = scripted(script={FIND_COORDINATOR: [answer]})
    with pytest.raises(BrokerError, match="INVALID_REQUEST"):  # first use: warms caches up untraced
        call(whole, "find_coordinator", "orders")
    peak_whole = traced_peak(lambda: call(whole, "find_coordinator", "orders", timeout=5.0))
    drip = scripted(script={FIND_COORDINATOR: [Drip(answer, interval=0.0001)]})
    peak_drip = traced_peak(lambda: call(drip, "find_coordinator", "orders", timeout=5.0))
    assert len(drip.seen(FIND_COORDINATOR)) == 1
    assert peak_drip < peak_whole + 16 * 1024, (peak_whole, peak_drip)
    assert peak_drip < 64 * 1024 + 8 * size, (peak_whole, peak_drip)


def test_huge_announcement_allocates_nothing(scripted):
    broker = scripted(script={API_VERSIONS: [Raw(struct.pack(">i", 50 << 20) + b"\0" * 4096)]})
    client = AdminClient(broker.address, request_timeout_ms=2000)
    peak = traced_peak(lambda: pytest.raises(ResponseError, client.api_versions))
    assert peak < 64 * 1024


# ---------------------------------------------------------------- endless retries


@pytest.mark.parametrize("where", ["find", "leave", "elsewhere"])
def test_endless_not_coordinator_ends_at_the_deadline(scripted, call, where):
    broker = scripted()
    if where == "find":
        broker.script = {FIND_COORDINATOR: [find_error(NOT_COORDINATOR)]}
    elif where == "leave":
        broker.script = {
            FIND_COORDINATOR: [coordinator_at(broker)],
            LEAVE_GROUP: [leave_error(NOT_COORDINATOR)],
        }
    else:  # a coordinator elsewhere that always says it is not one
        other = scripted(script={LEAVE_GROUP: [leave_error(NOT_COORDINATOR)]})
        broker.script = {FIND_COORDINATOR: [coordinator_at(other)]}
    clock = FakeClock()
    with pytest.raises(
        AdminTimeoutError,
        match=r"gave up .*group 'orders'.* still answers NOT_COORDINATOR, "
        r"and the 0.5 s timeout would pass",
    ) as info:
        call(broker, "remove_members_from_group", "orders", ["a"], timeout=0.5, clock=clock)
    assert info.value.error.name == "NOT_COORDINATOR"
    # Backoff 0.1, 0.2, then the 0.4 would pass the deadline: three tries, not a busy loop.
    assert clock.slept == [0.1, 0.2]
    assert len(broker.seen(FIND_COORDINATOR)) == 3
    if where == "elsewhere":
        assert other.connections == 3


# ---------------------------------------------------------------- coordinators no one can reach


@pytest.mark.parametrize("host", ["a" * 64, "a..b", "x." + "b" * 70 + ".example"])
def test_coordinator_host_that_fails_idna(scripted, call, host):
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker, host=host)],
        LEAVE_GROUP: [KafkaLikeGroup(["a"])],
    }
    with pytest.raises(
        BrokerConnectionError, match=r"could not connect to .*: not a valid host name \(.*idna"
    ):
        call(broker, "remove_members_from_group", "orders", ["a"])


def test_bootstrap_host_that_fails_idna(call, capsys):
    with pytest.raises(BrokerConnectionError, match="not a valid host name"):
        call("a" * 64 + ":9092", "api_versions")
    code, _, err = run_main(capsys, removal("a..b:9092"))
    assert code == 3 and "not a valid host name" in err
    assert_one_clean_line(err)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"host": ""}, "an empty host"),
        (
            {"host": "evil\x1b[2J.example"},
            r"host 'evil\\x1b\[2J.example', which no host name can be",
        ),
        ({"host": "two words"}, "host 'two words'"),
        ({"host": "a\u202eb"}, r"host 'a\\u202eb'"),
        ({"port": 0}, "port 0, outside 1-65535"),
        ({"port": 65536}, "port 65536, outside 1-65535"),
        ({"port": 65536 + 9092}, "port 74628, outside 1-65535"),
        ({"port": -1}, "port -1, outside 1-65535"),
        ({"node_id": -1}, "node id -1"),
    ],
)
def test_unusable_coordinators_are_response_errors(scripted, call, changes, words):
    broker = scripted()
    changes = dict(changes)
    broker.script = {FIND_COORDINATOR: [coordinator_at(changes.pop("port", broker), **changes)]}
    with pytest.raises(
        ResponseError,
        match=r"127.0.0.1:\d+ answered FindCoordinator v6 with a coordinator that "
        r"has " + words,
    ) as info:
        call(broker, "find_coordinator", "orders")
    assert str(info.value).isprintable()


def test_unusable_coordinator_in_the_pre_batching_form(scripted):
    broker = scripted(
        versions={API_VERSIONS: (0, 3), FIND_COORDINATOR: (0, 3), LEAVE_GROUP: (0, 4)}
    )
    broker.script = {FIND_COORDINATOR: [coordinator_at(70000)]}
    with pytest.raises(
        ResponseError, match="FindCoordinator v3 with a coordinator that has port 70000"
    ):
        AdminClient(broker.address, request_timeout_ms=1000).find_coordinator("orders")


# ---------------------------------------------------------------- text that targets the terminal


def test_printable_escapes_what_moves_the_cursor():
    assert printable("plain text, ünïcode, 中文") == "plain text, ünïcode, 中文"
    escaped = printable(HOSTILE_TEXT)
    assert escaped.isprintable()
    assert escaped == (
        "boom\\n\\x1b[2J\\x1b]0;owned\\x07fake line\\r\\x7f\\x9b31m\\u202etxt.exe\\u2028"
        "\\u200b\\ufeffend"
    )
    assert printable("a\\x1b") == "a\\x1b"  # backslashes stay: escaping twice changes nothing
    assert printable(printable(HOSTILE_TEXT)) == escaped
    assert printable("y" * 30 + "\n", limit=10) == "y" * 10 + "... (21 more characters)"


def test_broker_error_message_is_escaped_and_cut(scripted, call):
    broker = scripted(
        script={FIND_COORDINATOR: [find_error(INVALID_REQUEST, HOSTILE_TEXT + "z" * 5000)]}
    )
    with pytest.raises(
        BrokerError, match=r"FindCoordinator for group 'orders' failed: INVALID_REQUEST"
    ) as info:
        call(broker, "find_coordinator", "orders")
    message = str(info.value)
    assert message.isprintable()
    assert r"(boom\n\x1b[2J" in message and "more characters)" in message
    assert len(message) < 1000


CLI_SCENARIOS = [
    "escape in message",
    "escape in host",
    "idna host",
    "empty host",
    "port 65536",
    "port 0",
    "port -1",
    "http",
    "negative size",
    "garbage",
    "correlation",
    "stall",
    "not coordinator",
]


def cli_scenario(broker, name):
    """(script, words in the error line) for a failing CLI run against `broker`."""
    return {
        "escape in message": (
            {FIND_COORDINATOR: [find_error(INVALID_REQUEST, HOSTILE_TEXT)]},
            r"INVALID_REQUEST .*\(boom\\n\\x1b\[2J",
        ),
        "escape in host": (
            {FIND_COORDINATOR: [coordinator_at(broker, host="h\x1b[31m\nx")]},
            r"host 'h\\x1b\[31m\\nx'",
        ),
        "idna host": (
            {FIND_COORDINATOR: [coordinator_at(broker, host="a" * 64)]},
            "not a valid host name",
        ),
        "empty host": ({FIND_COORDINATOR: [coordinator_at(broker, host="")]}, "an empty host"),
        "port 65536": ({FIND_COORDINATOR: [coordinator_at(65536)]}, "port 65536"),
        "port 0": ({FIND_COORDINATOR: [coordinator_at(0)]}, "port 0"),
        "port -1": ({FIND_COORDINATOR: [coordinator_at(-1)]}, "port -1"),
        "http": (
            {API_VERSIONS: [Raw(b"HTTP/1.1 400 Bad Request\r\n\r\n")]},
            "is this a Kafka listener",
        ),
        "negative size": ({API_VERSIONS: [Raw(struct.pack(">i", -1))]}, "frame size of -1"),
        "garbage": (
            {API_VERSIONS: [Raw(lambda cid: struct.pack(">ii", 12, cid) + b"\xff" * 8)]},
            "could not decode",
        ),
        "correlation": (
            {API_VERSIONS: [WRONG_CORRELATION, broker._api_versions]},
            "correlation id",
        ),
        "stall": ({API_VERSIONS: [Raw(struct.pack(">i", 100))]}, "no answer from .* within 0.3 s"),
        "not coordinator": (
            {FIND_COORDINATOR: [find_error(NOT_COORDINATOR)]},
            "still answers NOT_COORDINATOR",
        ),
    }[name]


@pytest.mark.parametrize("scenario", CLI_SCENARIOS)
def test_cli_exits_3_with_one_clean_line(scripted, capsys, scenario):
    broker = scripted()
    broker.script, words = cli_scenario(broker, scenario)
    code, out, err = run_main(capsys, removal(broker, "--timeout", "0.3"))
    assert code == 3
    assert out == ""
    assert err.startswith("fastkwire remove-members: error: ")
    assert_one_clean_line(err)
    assert re.search(words, err), err

    broker.script, _ = cli_scenario(broker, scenario)
    code, out, err = run_main(capsys, removal(broker, "--timeout", "0.3", "--json"))
    assert code == 3
    assert_one_clean_line(err)
    assert out.isascii() and all(c == "\n" or c.isprintable() for c in out)
    assert json.loads(out)["error"]["type"] in (
        "ResponseError",
        "BrokerError",
        "BrokerConnectionError",
        "AdminTimeoutError",
    )


def test_cli_process_prints_no_raw_control_bytes(scripted):
    # The bytes that reach the terminal, from a real process.
    broker = scripted(script={FIND_COORDINATOR: [find_error(INVALID_REQUEST, HOSTILE_TEXT)]})
    proc = run_cli(*removal(broker, "--timeout", "2"), text=False)
    assert proc.returncode == 3
    assert proc.stdout == b""
    assert proc.stderr.count(b"\n") == 1 and proc.stderr.endswith(b"\n")
    for raw in CONTROL_BYTES:
        assert raw not in proc.stderr[:-1], raw


def test_cli_table_and_json_escape_what_they_print(scripted, capsys):
    # The member id comes from the broker, the instance id from the command line: neither
    # reaches the terminal raw, in the table or in JSON.
    nasty_id = "a\x1b[2J\nb"
    member = LeaveGroupResponse.MemberResponse(
        member_id=HOSTILE_TEXT, group_instance_id=nasty_id, error_code=25
    )
    broker = scripted()
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        LEAVE_GROUP: [lambda r, v: LeaveGroupResponse(members=[member])],
    }
    argv = [
        "remove-members",
        "--bootstrap-server",
        broker.address,
        "--group",
        "orders",
        "--instance-id",
        nasty_id,
    ]
    code, out, err = run_main(capsys, argv)
    assert code == 1 and err == ""
    lines = out.splitlines()
    # the table, its count, and the hint for instance ids the broker does not know
    assert len(lines) == 5 and all(line.isprintable() for line in lines)
    assert lines[2].startswith(r"a\x1b[2J\nb  FAILED  UNKNOWN_MEMBER_ID (25)")
    assert lines[4].startswith("The broker knows none of these group.instance.ids")

    code, out, err = run_main(capsys, argv + ["--json"])
    assert code == 1 and out.isascii() and "\x1b" not in out and "\x7f" not in out
    data = json.loads(out)
    assert data["members"][0]["member_id"] == HOSTILE_TEXT and data["failed"] == [nasty_id]


# ---------------------------------------------------------------- bad input from the operator


@pytest.mark.parametrize("ms", [float("inf"), float("nan"), 1e300, 86_400_001, 0, -5])
def test_client_refuses_timeouts_it_cannot_keep(ms):
    for cls in (AdminClient, AsyncAdminClient):
        with pytest.raises(
            ValueError, match="request_timeout_ms must be more than 0 and at most 86400000"
        ):
            cls("127.0.0.1:9092", request_timeout_ms=ms)
    with pytest.raises(TypeError):
        AdminClient("127.0.0.1:9092", request_timeout_ms="10")


@pytest.mark.parametrize(
    "text", ["inf", "-inf", "nan", "1e300", "86401", "0", "0.0001", "-1", "ten"]
)
def test_cli_refuses_timeouts_as_usage_errors(capsys, text):
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
                f"--timeout={text}",
            ]
        )
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert "argument --timeout:" in err and "unexpected" not in err
    assert "between 0.001 and 86400 seconds" in err or "not a number" in err


def test_cli_longest_timeout_is_accepted(capsys):
    code, _, err = run_main(capsys, removal(f"127.0.0.1:{closed_port()}", "--timeout", "86400"))
    assert code == 3 and "connection refused" in err


BAD_SERVERS = [
    "[::1",
    "[::1]:99999",
    "[::1]x",
    "[::1]:",
    "[]:9092",
    "host:",
    ":9092",
    "h:0",
    "h:65536",
    "h:-1",
    "h:+5",
    "h:\u0665",
    "h:9092:",
    "a b:9092",
    "a\x1bb:9092",
    "a\u202eb:1",
    ",",
]


@pytest.mark.parametrize("servers", BAD_SERVERS)
def test_bad_bootstrap_servers_are_usage_errors(capsys, servers):
    with pytest.raises(ValueError):
        parse_servers(servers)
    code, out, err = run_main(capsys, removal(servers))
    assert code == 2 and out == ""
    assert "bootstrap server" in err
    assert_one_clean_line(err)


def test_good_bootstrap_servers():
    assert parse_servers(
        "[::1]:9093, [fe80::1%eth0], ::1,h,h:1,h:65535, xn--bcher-kva.example:9"
    ) == [
        ("::1", 9093),
        ("fe80::1%eth0", 9092),
        ("::1", 9092),
        ("h", 9092),
        ("h", 1),
        ("h", 65535),
        ("xn--bcher-kva.example", 9),
    ]


@pytest.mark.parametrize(
    "argv_tail, words",
    [
        (["--group", "", "--instance-id", "a"], "--group must be a non-empty string"),
        (["--group", "g", "--instance-id", ""], "group.instance.id must be a non-empty string"),
        (["--group", "g", "--instance-id", "a", "--instance-id", "a"], "may be given once"),
        (["--group", "g", "--instance-id", "\udcff"], "cannot be encoded as UTF-8"),
        (["--group", "g" * 40000, "--instance-id", "a"], "--group is 40000 bytes long"),
    ],
)
def test_cli_argument_errors_are_usage_errors_before_connecting(capsys, argv_tail, words):
    # A closed port: had anything been sent, the error would be "connection refused", exit 3.
    code, _, err = run_main(
        capsys, ["remove-members", "--bootstrap-server", f"127.0.0.1:{closed_port()}", *argv_tail]
    )
    assert code == 2 and words in err
    assert_one_clean_line(err)


# ---------------------------------------------------------------- groups with too many members

EMPTY_MEMBER = (
    b"\x01\x00\x01\x01\x01\x01\x00"  # DescribeGroups v6: empty strings and bytes, null instance id
)


def _uvarint(n):
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def empty_members_answer(announced, sent=None, groups=1):
    """A raw DescribeGroups v6 answer of `groups` groups, each announcing `announced` empty
    members and carrying `sent` of them (all, by default)."""

    def group(name):
        return (
            b"\0\0"
            + b"\0"
            + _uvarint(len(name) + 1)
            + name
            + b"\x07Stable\x09consumer\x06range"
            + _uvarint(announced + 1)
            + EMPTY_MEMBER * (announced if sent is None else sent)
            + struct.pack(">i", -(2**31))
            + b"\0"
        )

    def frame(cid):
        body = (
            struct.pack(">i", cid)
            + b"\0"
            + struct.pack(">i", 0)
            + _uvarint(groups + 1)
            + b"".join(group(b"orders" if n == 0 else b"other%d" % n) for n in range(groups))
            + b"\0"
        )
        return struct.pack(">i", len(body)) + body

    return Raw(frame)


def describe_broker(scripted, answer):
    broker = scripted()
    broker.script = {FIND_COORDINATOR: [coordinator_at(broker)], DESCRIBE_GROUPS: [answer]}
    return broker


def describe(broker, mode, **options):
    if mode == "sync":
        return AdminClient(broker.address, request_timeout_ms=5000, **options).describe_group(
            "orders"
        )

    async def go():
        return await AsyncAdminClient(
            broker.address, request_timeout_ms=5000, **options
        ).describe_group("orders")

    return asyncio.run(go())


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_group_members_are_capped_before_decoding(scripted, mode):
    broker = describe_broker(scripted, empty_members_answer(20_000))
    with pytest.raises(
        ResponseError,
        match=r"answered DescribeGroups v6 with 20000 members in group 'orders', "
        r"more than max_group_members \(10000\); raise it",
    ):
        describe(broker, mode)
    assert len(describe(broker, mode, max_group_members=20_000).members) == 20_000
    # 5 million members announced in a frame of a few bytes: refused on the count alone, so
    # the error is the count's, not the decoder's.
    broker.script[DESCRIBE_GROUPS] = [empty_members_answer(5_000_000, sent=3)]
    with pytest.raises(ResponseError, match="with 5000000 members in group 'orders'"):
        describe(broker, mode, max_group_members=20_000)


def test_an_answer_with_more_groups_than_asked_is_refused(scripted):
    broker = describe_broker(scripted, empty_members_answer(5_000, groups=4))
    with pytest.raises(
        ResponseError, match="answered DescribeGroups v6 with 4 groups, for the one asked"
    ):
        describe(broker, "sync")


def test_consumer_group_describe_members_are_capped_too(scripted):
    from fakes import CONSUMER_GROUP_DESCRIBE, consumer_group_described

    broker = scripted(versions={**MODERN, CONSUMER_GROUP_DESCRIBE: (0, 1)})
    broker.script = {
        FIND_COORDINATOR: [coordinator_at(broker)],
        CONSUMER_GROUP_DESCRIBE: [
            consumer_group_described([(f"m{n}", None, {"t": [n]}) for n in range(3)])
        ],
    }
    with pytest.raises(
        ResponseError, match=r"ConsumerGroupDescribe v1 with 3 members .* max_group_members \(2\)"
    ):
        describe(broker, "sync", max_group_members=2)
    assert len(describe(broker, "sync", max_group_members=3).members) == 3


def test_cli_max_members(scripted, capsys):
    broker = describe_broker(scripted, empty_members_answer(20_000))
    argv = ["describe-group", "--bootstrap-server", broker.address, "--group", "orders", "--json"]
    code, out, err = run_main(capsys, argv)
    assert code == 3 and "more than max_group_members (10000)" in err and "--max-members" in err
    assert json.loads(out)["error"]["type"] == "ResponseError"
    code, out, err = run_main(capsys, argv + ["--max-members", "20000"])
    assert code == 0 and len(json.loads(out)["members"]) == 20_000
    with pytest.raises(SystemExit):
        cli.main(argv + ["--max-members", "0"])
    assert "not a positive count: '0'" in capsys.readouterr().err

"""fastkwire.connection on its own: any request of the codec over one connection, blocking
and asyncio (in the event loop's thread only), deadlines, and cancellation."""

import asyncio
import os
import re
import socket
import ssl
import struct
import threading
import time

import pytest

from fastkwire import DescribeGroupsRequest, FindCoordinatorRequest
from fastkwire.admin import AsyncAdminClient
from fastkwire.admin_errors import AdminError, AdminTimeoutError
from fastkwire.connection_errors import (
    BadResponseError,
    KafkaConnectionError,
    KafkaTimeoutError,
    NoCommonVersionError,
)
from fastkwire.connection import AsyncConnection, Connection, Deadline, Security

from fakes import (  # noqa: F401 - scripted is a fixture
    API_VERSIONS,
    DESCRIBE_GROUPS,
    FIND_COORDINATOR,
    SILENT,
    Delay,
    LoopBroker,
    Raw,
    closed_port,
    coordinator_at,
    described,
    scripted,
)


def test_sync_connection_sends_any_request_at_the_highest_common_version(scripted):
    broker = scripted(
        versions={API_VERSIONS: (0, 3), DESCRIBE_GROUPS: (0, 4)},
        script={DESCRIBE_GROUPS: [described([("m-1", "i-1", {"t": [1, 0]})])]},
    )
    with Connection(
        "127.0.0.1", broker.port, client_id="conn-test", request_timeout_ms=3000
    ) as conn:
        assert conn.versions[DESCRIBE_GROUPS] == (0, 4)
        first = conn.request(DescribeGroupsRequest(groups=["orders"]))
        again = conn.request(DescribeGroupsRequest(groups=["orders"]), 2)
        assert first.groups[0].members[0].group_instance_id == "i-1"
        assert again.groups[0].members[0].member_id == "m-1"
        with pytest.raises(NoCommonVersionError, match="supports no version of FindCoordinator"):
            conn.request(FindCoordinatorRequest(key="g"))
    # ApiVersions v4, refused, again at the broker's v3; then each request at its version.
    assert [(k, v) for k, v, _ in broker.requests] == [
        (API_VERSIONS, 4),
        (API_VERSIONS, 3),
        (DESCRIBE_GROUPS, 4),
        (DESCRIBE_GROUPS, 2),
    ]


def test_per_call_deadline(scripted):
    broker = scripted(script={FIND_COORDINATOR: [SILENT]})
    with Connection("127.0.0.1", broker.port, request_timeout_ms=5000) as conn:
        start = time.monotonic()
        with pytest.raises(KafkaTimeoutError, match="FindCoordinator v6 within 0.2 s"):
            conn.request(
                FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]), deadline=Deadline(0.2)
            )
        assert time.monotonic() - start < 0.6


def test_security_repr_and_options_hide_secrets():
    security = Security(
        "SASL_PLAINTEXT",
        sasl_mechanism="SCRAM-SHA-256",
        sasl_plain_username="ops",
        sasl_plain_password="hunter2-secret",
    )
    assert "hunter2" not in repr(security) and "ops" in repr(security)
    for bad, words in [
        ({"security_protocol": "TLS"}, "security_protocol must be one of"),
        ({"security_protocol": "SASL_SSL", "sasl_mechanism": "GSSAPI"}, "sasl_mechanism must be"),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_plain_username": "u"},
            "needs sasl_plain_username",
        ),
        (
            {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "OAUTHBEARER"},
            "token_provider",
        ),
        ({"security_protocol": "SSL", "ssl_cafile": "/no/such/ca.pem"}, "no such file"),
    ]:
        with pytest.raises(ValueError, match=words):
            Security(**bad)


def _threads():
    return threading.active_count()


def test_async_many_concurrent_calls_start_no_thread():
    async def go():
        group = described([("m-1", "i-1", {"t": [0]})])
        broker = await LoopBroker({FIND_COORDINATOR: None, DESCRIBE_GROUPS: group}).start()
        broker.script[FIND_COORDINATOR] = coordinator_at(broker.port)
        before = _threads()
        client = AsyncAdminClient(broker.address, request_timeout_ms=5000)
        seen = []

        async def one(n):
            description = await client.describe_group(f"group-{n}")
            seen.append(_threads())
            return description

        descriptions = await asyncio.gather(*(one(n) for n in range(40)))
        async with await AsyncConnection.open("127.0.0.1", broker.port) as conn:
            # Concurrent requests on one connection take turns: each gets its own answer.
            answers = await asyncio.gather(
                *(conn.request(DescribeGroupsRequest(groups=[f"g{n}"])) for n in range(10))
            )
        after = _threads()
        for _ in range(100):  # the broker sees every close within a few loop iterations
            if not broker.open_connections:
                break
            await asyncio.sleep(0.01)
        open_now = broker.open_connections
        await broker.close()
        return before, seen, after, descriptions, answers, open_now

    before, seen, after, descriptions, answers, open_now = asyncio.run(go())
    assert [d.group_id for d in descriptions] == [f"group-{n}" for n in range(40)]
    assert all(d.members[0].assignment == {"t": [0]} for d in descriptions)
    assert [a.groups[0].group_id for a in answers] == [f"g{n}" for n in range(10)]
    assert set(seen) == {before} and after == before
    assert open_now == 0


def test_async_cancellation_closes_the_socket(scripted):
    # Half a size prefix, then the broker goes back to reading: it sees the client hang up.
    broker = scripted(script={FIND_COORDINATOR: [Raw(b"\0\0")]})

    async def go():
        client = AsyncAdminClient(broker.address, request_timeout_ms=10000)
        task = asyncio.ensure_future(client.find_coordinator("orders"))
        for _ in range(200):
            if broker.seen(FIND_COORDINATOR):
                break
            await asyncio.sleep(0.01)
        assert broker.connections == 1 and broker._open
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(0)  # the transport closes its socket on the next loop iteration
        return fds_of_process()

    fds = asyncio.run(go())
    deadline = time.monotonic() + 2
    while broker._open and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not broker._open  # the broker saw the connection end
    assert not any(f"127.0.0.1:{broker.port}" in peer for peer in fds)


def fds_of_process():
    """Peers of this process's open TCP sockets (Linux), as 'host:port' strings."""
    peers = []
    try:
        inodes = {os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd")}
        with open("/proc/net/tcp") as f:
            rows = f.read().splitlines()[1:]
    except OSError:
        return peers
    for row in rows:
        parts = row.split()
        if f"socket:[{parts[9]}]" in inodes and parts[3] == "01":  # ESTABLISHED
            ip, port = parts[2].split(":")
            peers.append(
                f"{'.'.join(str(int(ip[i : i + 2], 16)) for i in (6, 4, 2, 0))}:{int(port, 16)}"
            )
    return peers


def test_async_queued_request_keeps_its_own_deadline(scripted):
    broker = scripted(script={FIND_COORDINATOR: [Raw(b"\0\0")]})  # never a whole answer

    async def go():
        async with await AsyncConnection.open(
            "127.0.0.1", broker.port, request_timeout_ms=3000
        ) as conn:
            slow = asyncio.ensure_future(
                conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]))
            )
            await asyncio.sleep(0.05)
            start = time.monotonic()
            with pytest.raises(
                KafkaTimeoutError, match=r"DescribeGroups v\d \(queued behind others\) within 0.2 s"
            ):
                await conn.request(DescribeGroupsRequest(groups=["g"]), deadline=Deadline(0.2))
            waited = time.monotonic() - start
            slow.cancel()
            return waited

    assert asyncio.run(go()) < 0.6


def _addresses(*ports):
    """A getaddrinfo stand-in: the host has one 127.0.0.1 address per port."""
    return lambda host, port, *args, **kwargs: [
        (socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", ("127.0.0.1", p))
        for p in ports
    ]


def test_connect_shares_one_deadline_across_the_host_addresses(monkeypatch):
    # Five addresses that drop SYNs: each connect blocks until its own timeout.
    given = []

    def blackhole(sock, address):
        given.append(sock.gettimeout())
        time.sleep(sock.gettimeout())
        raise socket.timeout("timed out")

    monkeypatch.setattr(socket, "getaddrinfo", _addresses(*range(9001, 9006)))
    monkeypatch.setattr(socket.socket, "connect", blackhole)
    with pytest.raises(
        KafkaTimeoutError, match=r"could not connect to 127\.0\.0\.1:9092 within 0\.3 s"
    ):
        Connection("127.0.0.1", 9092, request_timeout_ms=300)
    assert given and sum(given) <= 0.3 + 0.01  # not 0.3 s for each of the five


def test_connect_tries_the_next_address_within_the_deadline(scripted, monkeypatch):
    broker = scripted()
    monkeypatch.setattr(socket, "getaddrinfo", _addresses(closed_port(), broker.port))
    with Connection("broker.invalid", 9092, request_timeout_ms=3000) as conn:
        assert conn.versions[API_VERSIONS] == (0, 4)
    assert broker.connections == 1


def test_a_timeout_closes_the_connection(scripted):
    # The late answer must not be read as the next request's: the connection is closed.
    broker = scripted(script={DESCRIBE_GROUPS: [Delay(0.3, described([])), described([])]})
    with Connection("127.0.0.1", broker.port, request_timeout_ms=3000) as conn:
        with pytest.raises(KafkaTimeoutError, match="DescribeGroups v6 within 0.1 s"):
            conn.request(DescribeGroupsRequest(groups=["g"]), deadline=Deadline(0.1))
        time.sleep(0.4)  # the late answer has arrived by now
        with pytest.raises(
            KafkaConnectionError,
            match=r"is closed \(DescribeGroups v6 did not complete on it\): "
            "open a new one",
        ):
            conn.request(DescribeGroupsRequest(groups=["g"]))
    assert len(broker.seen(DESCRIBE_GROUPS)) == 1


def test_an_async_timeout_closes_the_connection(scripted):
    broker = scripted(script={DESCRIBE_GROUPS: [Delay(0.3, described([])), described([])]})

    async def go():
        async with await AsyncConnection.open(
            "127.0.0.1", broker.port, request_timeout_ms=3000
        ) as conn:
            with pytest.raises(KafkaTimeoutError, match="DescribeGroups v6 within 0.1 s"):
                await conn.request(DescribeGroupsRequest(groups=["g"]), deadline=Deadline(0.1))
            await asyncio.sleep(0.4)
            with pytest.raises(
                KafkaConnectionError, match=r"is closed \(DescribeGroups v6 did not complete"
            ):
                await conn.request(DescribeGroupsRequest(groups=["g"]))

    asyncio.run(go())
    assert len(broker.seen(DESCRIBE_GROUPS)) == 1


def test_a_refused_answer_size_closes_the_connection(scripted):
    # Refused after its size prefix, the rest of that answer is still in the stream.
    broker = scripted(script={FIND_COORDINATOR: [Raw(struct.pack(">i", 64 << 20) + b"\0" * 64)]})
    with Connection("127.0.0.1", broker.port, request_timeout_ms=3000) as conn:
        with pytest.raises(BadResponseError, match="announced a 67108864-byte answer"):
            conn.request(FindCoordinatorRequest(key_type=0, coordinator_keys=["g"]))
        with pytest.raises(KafkaConnectionError, match="is closed"):
            conn.request(DescribeGroupsRequest(groups=["g"]))


@pytest.mark.parametrize(
    "options, words",
    [
        (
            {"ssl_cafile": "never-read.pem"},
            r"TLS options are given \(ssl_cafile\), but security_protocol PLAINTEXT "
            "uses no TLS",
        ),
        (
            {"ssl_cafile": "ca.pem", "ssl_check_hostname": False},
            r"\(ssl_cafile, ssl_check_hostname=False\)",
        ),
        (
            {
                "security_protocol": "SASL_PLAINTEXT",
                "sasl_plain_username": "u",
                "sasl_plain_password": "p",
                "ssl_certfile": "c.pem",
                "ssl_keyfile": "k.pem",
            },
            "ssl_certfile, ssl_keyfile.*SASL_PLAINTEXT uses no TLS",
        ),
        ({"ssl_context": ssl.create_default_context()}, r"\(ssl_context\)"),
        (
            {
                "security_protocol": "SSL",
                "ssl_context": ssl.create_default_context(),
                "ssl_cafile": "ca.pem",
            },
            "ssl_context replaces ssl_cafile",
        ),
    ],
)
def test_tls_options_that_would_be_ignored_are_refused(options, words):
    with pytest.raises(ValueError, match=words):
        Security(**options)


def test_strict_x509_is_the_interpreters_default_unless_asked():
    default = ssl.create_default_context().verify_flags & ssl.VERIFY_X509_STRICT
    assert Security("SSL").ssl_context.verify_flags & ssl.VERIFY_X509_STRICT == default
    assert Security("SSL", ssl_strict_x509=True).ssl_context.verify_flags & ssl.VERIFY_X509_STRICT
    relaxed = Security("SSL", ssl_strict_x509=False).ssl_context.verify_flags
    assert not relaxed & ssl.VERIFY_X509_STRICT
    # Only that flag changes (the partial-chain and other defaults stay).
    assert relaxed | default == ssl.create_default_context().verify_flags
    for value in (0, "no", 1):
        with pytest.raises(TypeError, match="ssl_strict_x509 must be True, False or None"):
            Security("SSL", ssl_strict_x509=value)
    with pytest.raises(ValueError, match=r"\(ssl_strict_x509\).*PLAINTEXT uses no TLS"):
        Security(ssl_strict_x509=False)
    with pytest.raises(ValueError, match="ssl_context replaces ssl_strict_x509"):
        Security("SSL", ssl_context=ssl.create_default_context(), ssl_strict_x509=False)


def test_only_an_explicit_false_turns_the_host_name_check_off():
    assert Security("SSL").ssl_context.check_hostname is True
    assert Security("SSL", ssl_check_hostname=None).ssl_context.check_hostname is True
    assert Security("SSL", ssl_check_hostname=False).ssl_context.check_hostname is False
    for value in (0, "", "false", []):
        with pytest.raises(TypeError, match="ssl_check_hostname must be True or False"):
            Security("SSL", ssl_check_hostname=value)


def test_decoding_counts_against_the_deadline(scripted, monkeypatch):
    import fastkwire.connection as connection

    broker = scripted(script={DESCRIBE_GROUPS: [described([])]})
    decode = connection.decode_response

    def slow_decode(*args, **kwargs):
        time.sleep(0.3)  # a decode that takes longer than the time left
        return decode(*args, **kwargs)

    with Connection("127.0.0.1", broker.port, request_timeout_ms=3000) as conn:
        monkeypatch.setattr(connection, "decode_response", slow_decode)
        with pytest.raises(
            KafkaTimeoutError,
            match="answer of .* to DescribeGroups v6 was not decoded within 0.2 s",
        ):
            conn.request(DescribeGroupsRequest(groups=["g"]), deadline=Deadline(0.2))
        assert (
            conn.request(DescribeGroupsRequest(groups=["g"])).groups[0].group_id == "g"
        )  # still usable


def test_a_request_over_a_connection_fails_with_connection_errors_not_admin_ones(scripted):
    # A Produce (or any request) over Connection is not an admin call: its timeout is the
    # connection layer's. The admin client's errors are its subclasses, never the reverse.
    from fastkwire import ProduceRequest
    from fastkwire.admin import AdminClient

    broker = scripted(versions={API_VERSIONS: (0, 4), 0: (3, 9)}, script={0: [SILENT]})
    with Connection("127.0.0.1", broker.port, request_timeout_ms=3000) as conn:
        with pytest.raises(
            KafkaTimeoutError, match=r"no answer from .* to Produce v9 within 0.1 s"
        ) as info:
            conn.request(
                ProduceRequest(acks=1, timeout_ms=100, topic_data=[]), deadline=Deadline(0.1)
            )
    assert not isinstance(info.value, AdminError) and isinstance(info.value, TimeoutError)
    assert issubclass(AdminTimeoutError, KafkaTimeoutError) and not issubclass(
        KafkaTimeoutError, AdminError
    )

    # The same failure inside an admin call is its admin twin, with the same message.
    silent = scripted(script={API_VERSIONS: [SILENT]})
    with pytest.raises(
        AdminTimeoutError, match=r"no answer from .* to ApiVersions v4 within 0.2 s"
    ):
        AdminClient(silent.address, request_timeout_ms=200).api_versions()


def test_group_answer_caps_are_the_admin_clients_passed_as_max_answer_bytes(scripted):
    # A 20 MiB DescribeGroups answer: more than the admin client's 16 MiB cap, less than a
    # bare connection's default, and within an explicit max_answer_bytes of 32 MiB.
    from fastkwire.admin import ANSWER_LIMITS
    from fastkwire.connection import ANSWER_LIMITS as CONNECTION_LIMITS, DEFAULT_ANSWER_LIMIT

    assert DESCRIBE_GROUPS not in CONNECTION_LIMITS and ANSWER_LIMITS[DESCRIBE_GROUPS] == (
        16 << 20,
        0,
    )
    announced = 20 << 20
    assert ANSWER_LIMITS[DESCRIBE_GROUPS][0] < announced < DEFAULT_ANSWER_LIMIT
    broker = scripted(script={DESCRIBE_GROUPS: [Raw(struct.pack(">i", announced))]})
    with Connection("127.0.0.1", broker.port, request_timeout_ms=3000) as conn:
        with pytest.raises(BadResponseError, match=r"more than the (\d+) bytes") as info:
            conn.request(DescribeGroupsRequest(groups=["g"]), max_answer_bytes=1 << 20)
    limit = int(re.search(r"more than the (\d+) bytes", str(info.value)).group(1))
    assert (1 << 20) < limit < (1 << 20) + 200  # plus the request's own size
    # Accepted on its size: the broker then sends no body, so the wait ends at the deadline.
    with Connection("127.0.0.1", broker.port, request_timeout_ms=3000) as conn:
        with pytest.raises(KafkaTimeoutError, match="DescribeGroups v6 within 0.2 s"):
            conn.request(DescribeGroupsRequest(groups=["g"]), deadline=Deadline(0.2))

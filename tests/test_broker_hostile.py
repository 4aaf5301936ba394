"""Hostile and odd clients against fastkwire.testing.Broker: garbage, a huge declared size, a
frame that never ends (slowloris), a frame that does not decode, more connections than
allowed. Each ends its own connection only: a well-behaved connection, open all along,
keeps being answered. An API or version that is not served is answered with Kafka's
UNSUPPORTED_VERSION, never a closed connection."""

import socket
import struct
import sys
import time
from pathlib import Path

import pytest

import fastkwire
from fastkwire import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    decode_response,
    encode_request,
)
from fastkwire.error_codes import by_name
from fastkwire.testing import Broker

TIMEOUT = 5.0
UNSUPPORTED_VERSION = by_name("UNSUPPORTED_VERSION").code


@pytest.fixture(scope="module")
def broker():
    # No group coordinator: JoinGroup stands for an API this broker does not serve.
    with Broker(max_frame_bytes=1 << 20, frame_timeout=0.5, max_connections=20, groups=None) as b:
        yield b


def connect(broker):
    host, port = next(iter(broker.addresses.values()))
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    return s


def read_frame(s):
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return head + body


def exchange(s, request, version, correlation_id=1):
    s.sendall(encode_request(request, version, correlation_id, "test"))
    frame = read_frame(s)
    assert frame is not None, "the connection was closed"
    return decode_response(frame, type(request).API_KEY, version)


def is_closed(s, timeout=TIMEOUT):
    s.settimeout(timeout)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def closed_now(s):
    """Whether the broker has closed `s`, without waiting."""
    s.setblocking(False)
    try:
        return s.recv(1, socket.MSG_PEEK) == b""
    except BlockingIOError:
        return False
    except ConnectionResetError:
        return True


def check_still_served(s, correlation_id):
    header, body = exchange(s, ApiVersionsRequest(), 3, correlation_id)
    assert header.correlation_id == correlation_id and body.error_code == 0


@pytest.fixture
def bystander(broker):
    """A connection open across the hostile one: still answered before and after."""
    s = connect(broker)
    check_still_served(s, 100)
    yield s
    check_still_served(s, 101)
    s.close()


def test_garbage_ends_its_connection_only(broker, bystander):
    s = connect(broker)
    s.sendall(b"\xff" * 64)  # a negative size prefix
    assert is_closed(s)
    s.close()


def test_a_huge_declared_size_ends_its_connection_without_reading_it(broker, bystander):
    s = connect(broker)
    s.sendall(struct.pack(">i", 0x7FFFFFF0) + b"x" * 100)
    assert is_closed(s)
    s.close()


def test_a_frame_that_never_ends_is_cut_off_after_frame_timeout(broker, bystander):
    s = connect(broker)
    s.sendall(struct.pack(">i", 1000) + b"\x00\x12")  # then nothing: a slowloris
    started = time.monotonic()
    assert is_closed(s)
    assert time.monotonic() - started < TIMEOUT
    s.close()


def test_a_request_that_does_not_decode_ends_its_connection(broker, bystander):
    s = connect(broker)
    frame = encode_request(ApiVersionsRequest(), 3, 5, "test")
    s.sendall(frame[:-2] + b"\xff\xff" + b"\x00" * 8)  # fields that run past the frame
    assert is_closed(s)
    s.close()


def test_too_short_for_a_header(broker, bystander):
    s = connect(broker)
    s.sendall(struct.pack(">i", 3) + b"abc")
    assert is_closed(s)
    s.close()


def test_an_api_not_served_gets_unsupported_version_and_the_connection_stays(broker):
    s = connect(broker)
    # JoinGroup: no group coordinator in this broker; a top-level error code answers it.
    # (Where the answer has none, as Produce v2's, the connection is closed, as Kafka does.)
    request = fastkwire.JoinGroupRequest(group_id="g", protocol_type="consumer", protocols=[])
    header, body = exchange(s, request, 5, 9)
    assert header.correlation_id == 9 and body.error_code == UNSUPPORTED_VERSION
    s.sendall(encode_request(fastkwire.DescribeClusterRequest(), 0, 10, "test"))
    header, body = decode_response(read_frame(s), fastkwire.DescribeClusterRequest.API_KEY, 0)
    assert header.correlation_id == 10 and body.error_code == 0
    check_still_served(s, 11)
    s.close()


def test_api_versions_newer_than_served_gets_its_v0_answer(broker):
    s = connect(broker)
    frame = bytearray(encode_request(ApiVersionsRequest(), 3, 12, "test"))
    struct.pack_into(">h", frame, 6, 99)  # a version from the future
    s.sendall(bytes(frame))
    header, body = decode_response(read_frame(s), ApiVersionsRequest.API_KEY, 0)
    assert header.correlation_id == 12 and body.error_code == UNSUPPORTED_VERSION
    served = {k.api_key: k.max_version for k in body.api_keys}
    assert served[ApiVersionsRequest.API_KEY] == ApiVersionsResponse.MAX_VERSION
    check_still_served(s, 13)
    s.close()


def test_connections_past_the_cap_are_closed(broker, bystander):
    extra = [connect(broker) for _ in range(30)]
    try:
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            closed = sum(closed_now(s) for s in extra)
            if closed >= 30 - 19:  # the bystander holds one of the 20
                break
            time.sleep(0.05)
        time.sleep(0.2)
        assert closed >= 30 - 19 and closed < 30  # some were let in, the rest refused
        assert broker.call(lambda: len(broker.broker.connections)) <= 20
    finally:
        for s in extra:
            s.close()


def test_a_client_that_sends_many_requests_at_once_gets_each_answer_in_order(broker):
    s = connect(broker)
    s.sendall(b"".join(encode_request(ApiVersionsRequest(), 3, i, "test") for i in range(200)))
    for i in range(200):
        header, _ = decode_response(read_frame(s), ApiVersionsRequest.API_KEY, 3)
        assert header.correlation_id == i
    s.close()


def test_mutated_frames_keep_the_request_paths_contract():
    """fuzz/hostile_requests.py's contract over a short run (the long one: its --loop)."""
    pytest.importorskip("cramjam")  # its seeds hold gzip batches
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_requests

    counts, findings, _ = hostile_requests.run(3000, seed=7)
    assert findings == 0
    assert counts["answered"] and counts["closed"] and counts["silent"]


def test_a_thousand_idle_half_frames_do_not_stop_a_bystander():
    """1,000 connections each holding half a frame: each is cut off at frame_timeout, and a
    connection that behaves is answered throughout."""
    import resource

    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2200:
        pytest.skip(f"needs 2,200 open files, the limit here is {soft}")
    with Broker(frame_timeout=1.0) as b:
        host, port = next(iter(b.addresses.values()))
        socks = []
        try:
            for _ in range(1000):
                s = socket.create_connection((host, port), timeout=TIMEOUT)
                s.sendall(struct.pack(">i", 100) + b"\x00\x12\x00")
                socks.append(s)
            good = socket.create_connection((host, port), timeout=TIMEOUT)
            check_still_served(good, 1)
            deadline = time.monotonic() + 3 * TIMEOUT
            while time.monotonic() < deadline and not all(closed_now(s) for s in socks):
                check_still_served(good, 2)
                time.sleep(0.2)
            assert all(closed_now(s) for s in socks)
            check_still_served(good, 3)
            good.close()
        finally:
            for s in socks:
                s.close()

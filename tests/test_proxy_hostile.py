"""Bad input through the proxy: a client that sends garbage, a 2 GB size prefix, or half a
frame and then nothing; an upstream that closes mid-response or answers what was never
asked. Each gives one clear event line, ends that connection only (another connection
keeps working throughout), and nothing grows without bound: a client that does not read
its answers is not read past `max_in_flight` requests.

The upstream is a small broker stand-in on 127.0.0.1: it answers each request with an
ApiVersions response carrying its correlation id, and misbehaves for some client ids.
"""

import socket
import struct
import threading
import time

import pytest

from fastkwire import ApiVersionsRequest, ApiVersionsResponse, encode_request, encode_response
from fastkwire.proxy import BackgroundProxy, event_line

TIMEOUT = 5.0


class FakeBroker:
    """Client ids: "cut" gets half an answer and a closed connection; "silent" no answer;
    "stray" an answer with another correlation id; anyone else a whole answer."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.received = {}  # client id -> requests received
        self.short = []  # frames too short for a request header, as received
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._accept, daemon=True)]
        self._threads[0].start()

    def _accept(self):
        while not self._stop.is_set():
            try:
                sock, _ = self.listener.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(sock,), daemon=True)
            self._threads.append(t)
            t.start()

    def _serve(self, sock):
        sock.settimeout(0.2)
        buf = b""
        with sock:
            while not self._stop.is_set():
                try:
                    data = sock.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + struct.unpack_from(">i", buf)[0]:
                    n = 4 + struct.unpack_from(">i", buf)[0]
                    frame, buf = buf[:n], buf[n:]
                    if not self._answer(sock, frame):
                        return

    def _answer(self, sock, frame):
        if len(frame) < 14:
            with self._lock:
                self.short.append(frame)
            return True
        correlation_id = struct.unpack_from(">i", frame, 8)[0]
        length = struct.unpack_from(">h", frame, 12)[0]
        client_id = frame[14 : 14 + length].decode() if length > 0 else ""
        with self._lock:
            self.received[client_id] = self.received.get(client_id, 0) + 1
        if client_id == "silent":
            return True
        answer = encode_response(
            ApiVersionsResponse(
                error_code=0,
                api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
            ),
            3,
            correlation_id + 1000 if client_id == "stray" else correlation_id,
        )
        if client_id == "cut":
            sock.sendall(answer[: len(answer) // 2])
            return False
        sock.sendall(answer)
        return True

    def count(self, client_id):
        with self._lock:
            return self.received.get(client_id, 0)

    def close(self):
        self._stop.set()
        self.listener.close()
        for t in self._threads:
            t.join(5)


@pytest.fixture
def broker():
    b = FakeBroker()
    yield b
    b.close()


def request(client_id, correlation_id=1):
    return encode_request(
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        3,
        correlation_id,
        client_id,
    )


def read_frame(sock):
    head = recv_exactly(sock, 4)
    return head + recv_exactly(sock, struct.unpack(">i", head)[0])


def recv_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError(f"closed after {len(data)} of {n} bytes")
        data += chunk
    return data


def closed_by_peer(sock):
    """True once the proxy has closed this connection (within TIMEOUT)."""
    sock.settimeout(TIMEOUT)
    try:
        while sock.recv(65536):
            pass
    except ConnectionResetError:
        pass
    except socket.timeout:
        return False
    return True


def connect(proxy):
    return socket.create_connection(proxy.address, timeout=TIMEOUT)


def round_trip(proxy, client_id="good"):
    with connect(proxy) as sock:
        sock.sendall(request(client_id, 42))
        answer = read_frame(sock)
    assert struct.unpack_from(">i", answer, 4)[0] == 42
    return answer


def wait_for_event(proxy, text, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = [e for e in proxy.events() if e.kind == "error" and text in e.text]
        if found:
            return found[0]
        time.sleep(0.02)
    raise AssertionError(f"no event with {text!r}: {[event_line(e) for e in proxy.events()]}")


@pytest.mark.parametrize(
    "garbage, what",
    [
        (
            b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
            "size prefix of 1195725856 bytes at stream offset 0",
        ),
        (b"\x7f\xff\xff\xff" + b"\x00" * 100, "size prefix of 2147483647 bytes at stream offset 0"),
        (b"\xff\xff\xff\xfe", "size prefix of -2 bytes at stream offset 0"),
    ],
)
def test_garbage_and_huge_size_prefixes(broker, garbage, what):
    with BackgroundProxy(f"127.0.0.1:{broker.port}", max_frame_bytes=1 << 20) as proxy:
        with connect(proxy) as good, connect(proxy) as bad:
            good.sendall(request("good", 1))
            assert struct.unpack_from(">i", read_frame(good), 4)[0] == 1
            # One whole request first: the error's stream offset counts from the start.
            bad.sendall(garbage)
            event = wait_for_event(proxy, what)
            assert (
                "limit 1048576: max_frame_bytes" in event.text and "not Kafka framing" in event.text
            )
            assert closed_by_peer(bad)
            good.sendall(request("good", 2))  # the other connection lives on
            assert struct.unpack_from(">i", read_frame(good), 4)[0] == 2
        assert broker.count("good") == 2


def test_stream_offset_of_a_bad_prefix_after_good_frames(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}") as proxy:
        with connect(proxy) as sock:
            first = request("good", 1)
            sock.sendall(first)
            read_frame(sock)
            sock.sendall(b"\x80\x00\x00\x00")
            wait_for_event(proxy, f"size prefix of -2147483648 bytes at stream offset {len(first)}")
            assert closed_by_peer(sock)


def test_half_a_frame_then_nothing(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}", frame_timeout=0.4) as proxy:
        with connect(proxy) as good, connect(proxy) as hang:
            frame = request("hang", 1)
            started = time.monotonic()
            hang.sendall(frame[: len(frame) // 2])
            event = wait_for_event(
                proxy, "client sent part of a frame and did not finish it within 0.4 s"
            )
            assert 0.4 <= time.monotonic() - started < 3
            assert "frame_timeout" in event.text
            assert closed_by_peer(hang)
            good.sendall(request("good", 3))
            assert struct.unpack_from(">i", read_frame(good), 4)[0] == 3
        assert broker.count("hang") == 0  # nothing of the half frame was forwarded


def test_a_busy_connection_always_mid_frame_is_not_timed_out(broker):
    # Every write ends inside a frame, so the proxy always holds part of one, but each is
    # finished in time: frame_timeout bounds one frame, not the connection.
    frames = [request("good", i) for i in range(40)]
    stream = b"".join(frames)
    size = len(frames[0])
    cuts = [0] + list(range(size // 2, len(stream), size)) + [len(stream)]  # never at a boundary
    with BackgroundProxy(f"127.0.0.1:{broker.port}", frame_timeout=0.4) as proxy:
        with connect(proxy) as sock:
            started = time.monotonic()
            for a, b in zip(cuts, cuts[1:]):
                sock.sendall(stream[a:b])
                time.sleep(0.03)
            assert time.monotonic() - started > 1.0  # well past frame_timeout
            answers = [struct.unpack_from(">i", read_frame(sock), 4)[0] for _ in frames]
        assert answers == list(range(40))
        assert not [e for e in proxy.events() if e.kind == "error"]


def test_half_a_size_prefix_then_close(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}") as proxy:
        with connect(proxy) as sock:
            sock.sendall(b"\x00\x00")
        wait_for_event(proxy, "client closed mid-request: 2 bytes of a size prefix")
        round_trip(proxy)


def test_upstream_closes_mid_response(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}") as proxy:
        with connect(proxy) as sock:
            sock.sendall(request("cut", 5))
            event = wait_for_event(proxy, "upstream closed mid-response")
            assert closed_by_peer(sock)
        assert "1 request unanswered" in wait_for_event(proxy, "1 request unanswered").text
        assert "-byte response (stream offset 0)" in event.text
        unanswered = [e for e in proxy.exchanges() if e.correlation_id == 5]
        assert len(unanswered) == 1 and unanswered[0].response is None
        round_trip(proxy)


def test_a_stray_answer_is_forwarded_and_reported(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}") as proxy:
        with connect(proxy) as sock:
            sock.sendall(request("stray", 7))
            answer = read_frame(sock)  # forwarded byte for byte, whatever it answers
            assert struct.unpack_from(">i", answer, 4)[0] == 1007
            wait_for_event(proxy, "correlation id 1007 answers no request in flight: forwarded")


def test_short_request_frames_are_forwarded(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}") as proxy:
        with connect(proxy) as sock:
            sock.sendall(b"\x00\x00\x00\x02\x00\x12")
            wait_for_event(proxy, "request frame of 6 bytes is too short for a request header")
            deadline = time.monotonic() + TIMEOUT
            while not broker.short and time.monotonic() < deadline:
                time.sleep(0.02)
            assert broker.short == [b"\x00\x00\x00\x02\x00\x12"]
            sock.sendall(request("good", 9))  # and the connection goes on
            assert struct.unpack_from(">i", read_frame(sock), 4)[0] == 9


def test_a_client_that_never_reads_is_not_read_past_max_in_flight(broker):
    in_flight = 8
    with BackgroundProxy(f"127.0.0.1:{broker.port}", max_in_flight=in_flight) as proxy:
        with connect(proxy) as sock:
            sock.sendall(b"".join(request("silent", i) for i in range(200)))
            deadline = time.monotonic() + TIMEOUT
            while broker.count("silent") < in_flight and time.monotonic() < deadline:
                time.sleep(0.02)
            time.sleep(0.3)  # time enough for more, were they read
            assert broker.count("silent") == in_flight
            round_trip(proxy)  # other connections are served meanwhile


def test_upstream_that_refuses_connections():
    with socket.create_server(("127.0.0.1", 0)) as s:
        port = s.getsockname()[1]  # closed on leaving: nobody listens there
    with BackgroundProxy(f"127.0.0.1:{port}") as proxy:
        with connect(proxy) as sock:
            assert closed_by_peer(sock)
        assert f"upstream 127.0.0.1:{port}" in wait_for_event(proxy, "upstream").text


@pytest.mark.parametrize(
    "kwargs, name",
    [
        ({"max_frame_bytes": 0}, "max_frame_bytes"),
        ({"max_frame_bytes": 1 << 31}, "max_frame_bytes"),
        ({"max_in_flight": -1}, "max_in_flight"),
        ({"frame_timeout": 0}, "frame_timeout"),
        ({"on_exchange": 3}, "on_exchange"),
        ({"advertised": "nowhere"}, "advertised"),
    ],
)
def test_library_errors_name_the_parameter(kwargs, name):
    from fastkwire.proxy import Proxy

    with pytest.raises(ValueError, match=name):
        Proxy("127.0.0.1:9092", **kwargs)
    with pytest.raises(ValueError, match="upstream"):
        Proxy("no port here")


def test_an_upstream_connect_that_times_out_says_so():
    from test_proxy_loop import unanswered_listener

    lsock, fillers = unanswered_listener()
    port = lsock.getsockname()[1]
    try:
        with BackgroundProxy(lsock.getsockname(), connect_timeout=0.5) as proxy:
            with connect(proxy) as sock:
                assert closed_by_peer(sock)
            event = wait_for_event(proxy, "upstream")
    finally:
        lsock.close()
        for s in fillers:
            s.close()
    assert event.text == f"upstream 127.0.0.1:{port}: timed out after 0.5 s (connect_timeout)"


def _reset(sock):
    """Closes with a TCP reset, as a client that closes with an answer unread does."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def wait_for_end(proxy, conn, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ends = [e for e in proxy.events() if e.conn == conn and e.kind in ("close", "error")]
        if ends:
            return ends[-1]
        time.sleep(0.02)
    raise AssertionError(f"connection {conn} did not end: {proxy.events()}")


def test_a_client_that_resets_between_frames_closed_and_mid_frame_failed(broker):
    """A reset is how many clients close (with an answer unread: under load, often): the
    proxy's line is a close, not an error, unless it cut a request short. (The asyncio
    path's lines; the compiled path reports its own.)"""
    with BackgroundProxy(f"127.0.0.1:{broker.port}", forward="python") as proxy:
        sock = connect(proxy)
        sock.sendall(request("good", 1))
        read_frame(sock)
        sock.sendall(request("silent", 2))  # never answered
        _wait_until(lambda: broker.count("silent") == 1)
        _reset(sock)
        end = wait_for_end(proxy, 1)
        assert (end.kind, end.text) == (
            "close",
            "client reset the connection; 1 request unanswered",
        )
        sock = connect(proxy)
        sock.sendall(request("good", 3)[:10])
        _wait_until(lambda: proxy.call(lambda: [c.held[0] for c in proxy.proxy._conns]) == [10])
        _reset(sock)
        end = wait_for_end(proxy, 2)
        assert (end.kind, end.text) == (
            "error",
            "client reset the connection mid-request (10 bytes of it received)",
        )
        round_trip(proxy)


def _wait_until(predicate, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_a_connection_accepted_as_the_proxy_closes_ends_before_close_returns(broker):
    """close() waits for every connection it accepted, one whose task had not started yet
    included (under load, one often had not): close() returns once each has ended and
    reported its exchanges, and nothing reaches the broker after that. (A proxy torn down
    with such a task still pending forwarded requests that were never reported.)"""
    import asyncio

    from fastkwire.proxy import Proxy

    async def main():
        proxy = Proxy(f"127.0.0.1:{broker.port}", forward="python")
        await proxy.start()
        closing, tasks = [], []
        accepted = proxy._accepted

        def accept_as_the_proxy_closes(side):
            closing.append(asyncio.ensure_future(proxy.close()))  # begins first
            accepted(side)
            tasks.append(side.conn.task)

        proxy._accepted = accept_as_the_proxy_closes
        sock = socket.create_connection(proxy.address, timeout=TIMEOUT)
        try:
            sock.sendall(request("silent", 1))
            deadline = time.monotonic() + TIMEOUT
            while not closing and time.monotonic() < deadline:
                await asyncio.sleep(0.01)
            await closing[0]
            ended = [t.done() for t in tasks]
            await asyncio.sleep(0.3)  # a connection still running would forward now
        finally:
            sock.close()
        return ended

    assert asyncio.run(main()) == [True]
    time.sleep(0.1)
    assert broker.count("silent") == 0

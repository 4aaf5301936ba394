"""The compiled forwarding path against the asyncio one: the same traffic through both gives
byte-identical captures and the same summary counts; which path a proxy takes, and why;
hostile peers end only their own connection on the compiled path (garbage, cut frames,
resets, a peer that never reads), with the asyncio path's lines. Only 127.0.0.1, every
wait bounded. The rest of the proxy suite runs on either path with
FASTKWIRE_PROXY_FORWARD=compiled or =python (the default, auto, takes the compiled path
wherever it can carry the connections)."""

import asyncio
import json
import os
import random
import socket
import struct
import subprocess
import sys
import threading
import time
import types

import pytest

import fastkwire as fk
from fastkwire.proxy import BackgroundProxy, Proxy, ProxyEvent, Rule
from fastkwire.cli import main
from fastkwire.proxy._compiled import compiled_forwarder

from test_proxy_cli import ProxyProcess, child_env

TIMEOUT = 10.0
SIZE = struct.Struct(">i")
needs_compiled = pytest.mark.skipif(
    compiled_forwarder()[0] is None, reason=f"no compiled path: {compiled_forwarder()[1]}"
)


HUGE = 3 * 1024 * 1024  # past the size the compiled path moves to its exchange, not copies


def answer_to(frame, size):
    """What ScriptedBroker answers to request `frame` with a body of `size` bytes."""
    cid = SIZE.unpack_from(frame, 8)[0]
    body = (frame[::-1] * (size // len(frame) + 1))[:size]
    return SIZE.pack(4 + len(body)) + SIZE.pack(cid) + body


class ScriptedBroker:
    """Answers every request of 12 bytes or more (not an acks=0 Produce, not client id
    "silent") with a frame made from the request (its correlation id, then the request's
    bytes reversed, as many as client id "big" (200 KB) or "huge" (HUGE) asks for); client
    id "stray" also gets an answer with another correlation id first."""

    def __init__(self):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self.sent = 0  # answers written whole
        self.open = 0  # connections not yet ended by the proxy
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
        with self._lock:
            self.open += 1
        try:
            self._frames(sock)
        finally:
            with self._lock:
                self.open -= 1

    def _frames(self, sock):
        sock.settimeout(0.2)
        buf = b""
        with sock:
            while not self._stop.is_set():
                try:
                    data = sock.recv(1 << 20)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                buf += data
                while len(buf) >= 4 and len(buf) >= 4 + SIZE.unpack_from(buf)[0]:
                    n = 4 + SIZE.unpack_from(buf)[0]
                    frame, buf = buf[:n], buf[n:]
                    try:
                        self._answer(sock, frame)
                    except OSError:
                        return

    def _answer(self, sock, frame):
        if len(frame) < 14:
            return
        key, version, cid = struct.unpack_from(">hhi", frame, 4)
        n = struct.unpack_from(">h", frame, 12)[0]
        client_id = frame[14 : 14 + n].decode() if n > 0 else ""
        if client_id == "silent":
            return
        if key == 0:
            _, message = fk.decode_request(frame)
            if message.acks == 0:
                return
        size = (
            HUGE if client_id == "huge" else 200_000 if client_id.startswith("big") else len(frame)
        )
        answer = answer_to(frame, size)
        if client_id == "stray":
            sock.settimeout(TIMEOUT)
            sock.sendall(answer[:4] + SIZE.pack(cid + 1000) + answer[8:])
        sock.settimeout(None)
        sock.sendall(answer)
        sock.settimeout(0.2)
        self.sent += 1

    def close(self):
        self._stop.set()
        self.listener.close()
        for t in self._threads:
            t.join(TIMEOUT)


@pytest.fixture
def broker():
    b = ScriptedBroker()
    yield b
    b.close()


def request(api_key, version, cid, client_id, message):
    return fk.encode_request(message, version, cid, client_id)


def api_versions(cid, client_id="app"):
    return request(18, 3, cid, client_id, fk.ApiVersionsRequest(client_software_name="t"))


def produce(cid, acks, version=9, client_id="app"):
    return request(0, version, cid, client_id, fk.ProduceRequest(acks=acks, timeout_ms=100))


def read_frame(sock):
    head = recv_exactly(sock, 4)
    return head + recv_exactly(sock, SIZE.unpack(head)[0])


def recv_exactly(sock, n):
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return bytes(out)


def answered(sock, cid):
    frame = read_frame(sock)
    assert SIZE.unpack_from(frame, 4)[0] == cid
    return frame


def traffic(address):
    """The same conversation every time: connections one after another, each waiting for
    the answers it expects, so that connection numbers and the order of lines repeat."""
    with socket.create_connection(address, timeout=TIMEOUT) as s:
        s.sendall(api_versions(1))
        answered(s, 1)
        s.sendall(produce(2, 1))
        answered(s, 2)
        s.sendall(produce(3, 0) + produce(4, -1, version=3))  # acks=0: no answer, not waited for
        answered(s, 4)
        s.sendall(b"".join(api_versions(cid) for cid in range(5, 10)))  # pipelined
        for cid in range(5, 10):
            answered(s, cid)
        s.sendall(b"\x00\x00\x00\x02\x00\x12")  # too short for a header: forwarded, unpaired
        big = api_versions(10, "big" + "x" * 3000) + bytes(3 * 1024 * 1024)
        big = SIZE.pack(len(big) - 4) + big[4:]
        for i in range(0, len(big), 70_001):  # a 3 MiB request in odd pieces
            s.sendall(big[i : i + 70_001])
        answered(s, 10)
        s.sendall(api_versions(11, "stray"))  # a stray answer first, then its own
        answered(s, 1011)
        answered(s, 11)
    with socket.create_connection(address, timeout=TIMEOUT) as s:
        s.sendall(api_versions(1, "other") + api_versions(2, "silent"))
        answered(s, 1)
    # the second connection ends with one request unanswered


def run_through_cli(broker, forward, tmp_path):
    record = tmp_path / f"{forward}.jsonl"
    proxy = ProxyProcess(
        "--upstream",
        f"127.0.0.1:{broker.port}",
        "--quiet",
        "--record",
        str(record),
        "--forward",
        forward,
        "--connections",
    )
    host, port = proxy.bootstrap.rsplit(":", 1)
    traffic((host, int(port)))
    proxy.streams.line_with("1 request unanswered", TIMEOUT)
    code, out, err = proxy.stop()
    assert code == 0, err
    assert ("compiled forwarding" in proxy.banner) == (forward == "compiled")
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    return lines, out, err


def comparable(lines):
    """Each connection's lines in order, without what differs from run to run (times, the
    client's port); connections by number."""
    by_conn = {}
    for d in lines:
        d = {k: v for k, v in d.items() if k not in ("time", "latency_ms", "client")}
        by_conn.setdefault(d["conn"], []).append(d)
    return by_conn


def counts(summary):
    """The summary table without its latency columns."""
    rows = []
    for line in summary.strip().splitlines():
        cells = line.split()
        rows.append(cells[:4] + cells[7:] if len(cells) >= 8 else cells)
    return rows


@needs_compiled
def test_both_paths_record_the_same_bytes_and_count_the_same(broker, tmp_path):
    compiled, c_out, c_err = run_through_cli(broker, "compiled", tmp_path)
    python, p_out, p_err = run_through_cli(broker, "python", tmp_path)
    c, p = comparable(compiled), comparable(python)
    assert sorted(c) == sorted(p) == [1, 2]
    for conn in c:
        assert len(c[conn]) == len(p[conn])
        for mine, theirs in zip(c[conn], p[conn]):
            assert mine == theirs
    # what the traffic holds, so that a path recording nothing cannot pass
    first = c[1]
    assert [d.get("correlation_id") for d in first if "unpaired" not in d] == list(range(1, 12))
    assert [d["why"] for d in first if "unpaired" in d] == [
        "request frame of 6 bytes is too short for a request header (12 bytes): forwarded as it is",
        "response with correlation id 1011 answers no request in flight: forwarded as it is",
    ]
    acks0 = [d for d in first if d.get("correlation_id") == 3][0]
    assert acks0["expects_response"] is False and acks0["response"] is None
    assert len(bytes.fromhex([d for d in first if d.get("correlation_id") == 10][0]["request"])) > (
        3 * 1024 * 1024
    )
    assert c[2][-1]["client_id"] == "silent" and c[2][-1]["response"] is None
    assert counts(c_out) == counts(p_out)
    assert counts(c_out)[-1] == ["13", "exchanges"]
    for err in (c_err, p_err):
        assert "1 request unanswered" in err


def test_which_path_a_proxy_takes(monkeypatch):
    monkeypatch.delenv("FASTKWIRE_PROXY_FORWARD", raising=False)
    available = compiled_forwarder()[0] is not None
    assert Proxy("127.0.0.1:9092").compiled is available
    assert Proxy("127.0.0.1:9092", forward="python").compiled is False
    # options that need Python per exchange take the asyncio path; asked for the compiled
    # one, the proxy refuses, naming both parameters (FASTKWIRE_PROXY_FORWARD=compiled is a
    # preference: the asyncio path, as with auto)
    for name, kwargs in (
        ("rules", {"rules": [Rule(api="Heartbeat", error=27)]}),
        ("rewrite_advertised", {"rewrite_advertised": True}),
        ("broker_ports", {"broker_ports": "30000-30009"}),
    ):
        assert Proxy("127.0.0.1:9092", forward="auto", **kwargs).compiled is False
        if available:
            with pytest.raises(ValueError, match=f"^forward: the compiled .* with {name} "):
                Proxy("127.0.0.1:9092", forward="compiled", **kwargs)
            monkeypatch.setenv("FASTKWIRE_PROXY_FORWARD", "compiled")
            assert Proxy("127.0.0.1:9092", **kwargs).compiled is False
            monkeypatch.delenv("FASTKWIRE_PROXY_FORWARD")
    with pytest.raises(ValueError, match="^forward: 'fast' is not one of auto, python, compiled"):
        Proxy("127.0.0.1:9092", forward="fast")
    monkeypatch.setenv("FASTKWIRE_PROXY_FORWARD", "c")
    with pytest.raises(ValueError, match="^FASTKWIRE_PROXY_FORWARD: 'c' is not one of"):
        Proxy("127.0.0.1:9092")
    monkeypatch.setenv("FASTKWIRE_PROXY_FORWARD", "python")
    assert Proxy("127.0.0.1:9092").compiled is False


def test_compiled_refused_where_it_cannot_run(monkeypatch):
    monkeypatch.setenv("FASTKWIRE_PURE", "1")
    with pytest.raises(ValueError, match="^forward: the compiled forwarding path is not available"):
        Proxy("127.0.0.1:9092", forward="compiled")
    assert Proxy("127.0.0.1:9092", forward="auto").compiled is False


# ---------------------------------------------------------------- hostile peers


def wait_for_events(proxy, text, count=1):
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        found = [e for e in proxy.events() if text in e.text]
        if len(found) >= count:
            return found
        time.sleep(0.02)
    raise AssertionError(f"fewer than {count} events with {text!r}: {proxy.events()}")


def served(proxy, cid=77):
    with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
        s.sendall(api_versions(cid, "good"))
        answered(s, cid)


@needs_compiled
def test_garbage_from_many_clients_ends_only_their_connections(broker):
    rng = random.Random(8)
    with BackgroundProxy(
        f"127.0.0.1:{broker.port}", forward="compiled", max_frame_bytes=1 << 20, frame_timeout=1.0
    ) as proxy:
        socks = []
        for i in range(40):
            s = socket.create_connection(proxy.address, timeout=TIMEOUT)
            kind = i % 4
            if kind == 0:  # a huge or negative size prefix
                s.sendall(SIZE.pack(rng.choice([-1, 1 << 30, 0x7FFFFFFF])) + b"x" * 10)
            elif kind == 1:  # random bytes
                s.sendall(bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200))))
            elif kind == 2:  # a frame cut short, then nothing (the frame timeout ends it)
                s.sendall(api_versions(i)[:-3])
            else:  # a whole request and part of another, then a reset
                s.sendall(api_versions(i) + api_versions(i + 1)[:9])
                answered(s, i)
                s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                s.close()
            socks.append(s)
            served(proxy, 100 + i)  # the others are served meanwhile
        wait_for_events(proxy, "did not finish it within 1 s (frame_timeout)", 10)
        for s in socks:
            s.close()
        closes, deadline = [], time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            closes = [e for e in proxy.events() if e.kind in (ProxyEvent.CLOSE, ProxyEvent.ERROR)]
            if len([e for e in closes if e.conn]) >= 80:  # the 40 hostile ones, the 40 good ones
                break
            time.sleep(0.05)
        assert len({e.conn for e in closes if e.conn}) == 80
        texts = [e.text for e in closes]
        assert sum("(limit 1048576: max_frame_bytes): not Kafka framing" in t for t in texts) >= 10
        assert sum("did not finish it within 1 s (frame_timeout)" in t for t in texts) >= 10
        assert sum(t == "client: Connection reset by peer" for t in texts) == 10
        served(proxy)
        assert proxy.proxy.requests_in_flight == 0


@needs_compiled
def test_a_client_that_never_reads_holds_a_bounded_amount(broker):
    """200 KB answers to a client that never reads: the proxy stops reading the broker once
    the socket buffers and its own 64 KiB are full, so the broker's writes stop too; other
    clients are served; closing the client ends its connection with its answers unsent."""
    with BackgroundProxy(f"127.0.0.1:{broker.port}", forward="compiled") as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            s.sendall(b"".join(api_versions(cid, "big") for cid in range(200)))
            time.sleep(1.0)
            stalled = broker.sent
            time.sleep(0.5)
            assert broker.sent == stalled < 200  # 40 MB asked for; the writes stopped
            served(proxy)
        wait_for_events(proxy, "client closed")
        served(proxy)


@needs_compiled
def test_large_answers_to_a_slow_reader_arrive_whole_and_are_recorded(broker):
    """3 MiB answers (moved out of the read buffer to their exchange, not copied), each
    followed at once by a small one, to a client that reads slowly while Python takes the
    exchanges: every byte arrives in order, and every exchange holds the answer as sent."""
    with BackgroundProxy(f"127.0.0.1:{broker.port}", forward="compiled") as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
            requests = [api_versions(cid, "huge" if cid % 2 else "app") for cid in range(1, 8)]
            s.sendall(b"".join(requests))
            expected = [
                answer_to(r, HUGE if i % 2 == 0 else len(r)) for i, r in enumerate(requests)
            ]
            got = bytearray()
            while len(got) < sum(map(len, expected)):
                chunk = s.recv(65536)
                assert chunk, f"closed after {len(got)} bytes"
                got += chunk
                time.sleep(0.0005)
            assert bytes(got) == b"".join(expected)
        wait_for_events(proxy, "client closed")
        mine = [ex for ex in proxy.exchanges() if ex.correlation_id in range(1, 8)]
        assert [ex.response for ex in mine] == expected
        served(proxy)
        assert proxy.proxy.requests_in_flight == 0


@needs_compiled
def test_sasl_handshake_v0_tokens_on_the_compiled_path(monkeypatch):
    from test_proxy_tls import (
        test_raw_tokens_after_a_v0_handshake_are_forwarded_and_recorded_unpaired as legacy_sasl,
    )

    monkeypatch.setenv("FASTKWIRE_PROXY_FORWARD", "compiled")
    legacy_sasl()


# ---------------------------------------------------------------- what the forwarder holds to


VERSIONS = {k: (c.MIN_VERSION, c.MAX_VERSION) for k, c in fk.REQUEST_CLASSES.items()}


def forwarder_pair(fw, conn=1):
    """(client, upstream): the far ends of two socket pairs joined through `fw`."""
    client, client_end = socket.socketpair()
    upstream, upstream_end = socket.socketpair()
    fw.add(conn, client_end.detach(), upstream_end.detach())
    for s in (client, upstream):
        s.settimeout(TIMEOUT)
    return client, upstream


def sasl_v0(client, upstream):
    """A v0 SaslHandshake through the pair, answered with error 0: raw tokens follow."""
    client.sendall(request(17, 0, 1, "app", fk.SaslHandshakeRequest(mechanism="PLAIN")))
    read_frame(upstream)
    body = SIZE.pack(1) + b"\x00\x00" + SIZE.pack(1) + b"\x00\x05PLAIN"
    upstream.sendall(SIZE.pack(len(body)) + body)
    answered(client, 1)


@needs_compiled
@pytest.mark.parametrize("max_buffered", [1 << 20, 1 << 30], ids=["1 MiB", "1 GiB"])
@pytest.mark.parametrize("tokens", [False, True], ids=["empty frames", "raw SASL tokens"])
def test_tiny_frames_fill_the_queue_only_to_its_limits(tokens, max_buffered):
    """Each frame of a client streaming empty frames (or raw SASL tokens) is an item for
    Python: the forwarder counts what an item costs, not the frame's 4 bytes, and caps the
    items too. Not taken, the queue stops at max_buffered or MAX_ITEMS, the client is
    no longer read; taken, everything flows. (It grew by a 150-byte item per 4 bytes.)"""
    from fastkwire import _forward

    count = 400_000
    fw = _forward.Forwarder(1 << 20, 1 << 20, 64, max_buffered, 30.0, VERSIONS)
    try:
        client, upstream = forwarder_pair(fw)
        if tokens:
            sasl_v0(client, upstream)
            fw.take()
        received = [0]

        def drain():
            while received[0] < 4 * count:
                try:
                    chunk = upstream.recv(1 << 16)
                except OSError:
                    return
                if not chunk:
                    return
                received[0] += len(chunk)

        threads = [
            threading.Thread(target=client.sendall, args=(bytes(4 * count),), daemon=True),
            threading.Thread(target=drain, daemon=True),
        ]
        for t in threads:
            t.start()
        last, deadline = -1, time.monotonic() + TIMEOUT
        while received[0] != last and time.monotonic() < deadline:  # until the upstream starves
            last = received[0]
            time.sleep(0.3)
        cost, items = fw.queued if hasattr(fw, "queued") else (None, None)
        taken = fw.take()
        # an item costs more than 150 bytes; MAX_ITEMS: 16384
        assert len(taken) <= min(max_buffered // 150, 16384) + 2
        assert received[0] < 4 * count
        assert items == len(taken) and cost <= max_buffered + 4096
        assert _forward.MAX_ITEMS == 16384
        kinds = {item[0] for item in taken}
        assert kinds <= {_forward.TOKEN if tokens else _forward.UNPAIRED_REQUEST, _forward.HOLDING}
        while received[0] < 4 * count and time.monotonic() < deadline + TIMEOUT:
            taken += fw.take()
            time.sleep(0.005)
        time.sleep(0.1)
        taken += fw.take()
        assert received[0] == 4 * count
        assert len([item for item in taken if item[0] != _forward.HOLDING]) == count
    finally:
        fw.close()


LYING_KEY = """
from fastkwire import _forward

class Liar(int):
    def __lt__(self, other): return True
    __le__ = __gt__ = __ge__ = __lt__

for versions in ({Liar(1 << 40): (0, 1)}, {5: (Liar(-70000), 3)}):
    try:
        _forward.Forwarder(1 << 20, 1 << 20, 16, 1 << 20, 1.0, versions)
    except ValueError as e:
        print("refused:", e)
"""


def test_a_lying_versions_key_is_refused_not_written_out_of_bounds():
    """An int subclass whose comparisons lie passed the range check in Python and then
    indexed the C table: a write 2 TiB away (SIGSEGV). Converted once, then checked."""
    pytest.importorskip("fastkwire._forward")
    r = subprocess.run(
        [sys.executable, "-c", LYING_KEY],
        env=child_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, (r.returncode, r.stderr[-3000:])
    assert r.stdout.splitlines() == [
        "refused: versions: api key 1099511627776 with versions 0-1: keys are 0-255 and "
        "versions 0-32767, the first no more than the last",
        "refused: versions: api key 5 with versions -70000-3: keys are 0-255 and "
        "versions 0-32767, the first no more than the last",
    ]


@needs_compiled
def test_limits_at_the_top_of_their_range_mean_no_limit():
    """max_frame near 2**64 wrapped the buffer's limit to 320 KiB (a 1 MiB frame never
    fitted: the thread spun); max_buffered of 2**63 wrapped twice the limit to 0 (every
    frame that arrived in pieces ended its connection)."""
    from fastkwire import _forward

    fw = _forward.Forwarder(2**64 - 1, 2**64 - 1, 2**64 - 1, 2**63, 30.0, VERSIONS)
    try:
        client, upstream = forwarder_pair(fw)
        frame = api_versions(1, "big")
        frame = SIZE.pack(len(frame) - 4 + (1 << 20)) + frame[4:] + bytes(1 << 20)
        client.sendall(frame[:5000])
        time.sleep(0.2)
        client.sendall(frame[5000:])
        assert recv_exactly(upstream, len(frame)) == frame
        assert not [item for item in fw.take() if item[0] == _forward.CLOSED]
    finally:
        fw.close()
    for args, name in (
        ((0, 1, 1, 1, 1.0), "max_frame"),
        ((1, 1, 0, 1, 1.0), "max_in_flight"),
        ((1, 1, 1, 1, float("nan")), "frame_timeout"),
        ((1, 1, 1, 1, -1.0), "frame_timeout"),
    ):
        with pytest.raises(ValueError, match=f"^{name}: must be"):
            _forward.Forwarder(*args, VERSIONS)


@needs_compiled
def test_add_refuses_one_descriptor_for_both_sides_and_leaves_it_open():
    from fastkwire import _forward

    fw = _forward.Forwarder(1 << 20, 1 << 20, 16, 1 << 20, 30.0, VERSIONS)
    a, b = socket.socketpair()
    try:
        for fds in ((a.fileno(), a.fileno()), (-1, a.fileno())):
            with pytest.raises(ValueError, match="^client_fd, upstream_fd: two open descriptors"):
                fw.add(1, *fds)
        time.sleep(0.1)
        a.sendall(b"still open")  # the forwarder never took (nor closed) it
        assert b.recv(100) == b"still open"
        assert fw.take() == []
    finally:
        fw.close()
        a.close()
        b.close()


@needs_compiled
@pytest.mark.parametrize(
    "tail, why",
    [
        (b"", "upstream closed"),
        (SIZE.pack(1000) + b"cut", "upstream closed mid-response: 7 bytes of a 1000-byte response"),
    ],
    ids=["whole", "cut"],
)
def test_an_upstream_that_ends_after_answering_still_reaches_a_slow_client(tail, why):
    """400 KB of answers, then the upstream's end (after a cut frame, or not), to a client
    that reads slowly: every whole answer arrives, then the end. (The forwarder flushed
    once at the upstream's end and closed both sockets: up to 64 KiB of whole answers
    lost, the client's last frame cut.)"""
    from fastkwire import _forward
    from fastkwire.proxy._compiled import _closed

    fw = _forward.Forwarder(1 << 20, 1 << 20, 16, 1 << 20, 30.0, VERSIONS)
    try:
        client, client_end = socket.socketpair()
        upstream, upstream_end = socket.socketpair()
        client_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        fw.add(1, client_end.detach(), upstream_end.detach())
        # 120 KB: past what the client's buffers and FW_HIGH_WATER take, so its reading
        # pauses, yet within the upstream's receive window with what the forwarder read, so
        # the upstream's FIN is sent. (400 KB could leave the FIN behind unsent data on a
        # loaded machine, whose receive buffer had not grown: an end never sent, not unseen.)
        answers = b"".join(answer_to(api_versions(cid), 10_000) for cid in range(12))
        threading.Thread(
            target=lambda: (upstream.sendall(answers + tail), upstream.shutdown(socket.SHUT_WR)),
            daemon=True,
        ).start()
        got = bytearray()
        client.settimeout(TIMEOUT)
        while chunk := client.recv(4096):
            got += chunk
            time.sleep(0.0005)
        assert len(got) == len(answers) and bytes(got) == answers
        time.sleep(0.1)
        (item,) = [item for item in fw.take() if item[0] == _forward.CLOSED]
        proxy = types.SimpleNamespace(frame_timeout=30.0, max_frame_bytes=1 << 20)
        assert _closed(_forward, proxy, item)[0].startswith(why)
    finally:
        fw.close()


@needs_compiled
def test_a_client_that_takes_nothing_after_its_upstream_ended_is_ended_after_frame_timeout():
    """The upstream's end waits for what it sent to reach the client, but not for ever: a
    client that takes nothing for frame_timeout is ended, with the bytes it left."""
    from fastkwire import _forward
    from fastkwire.proxy._compiled import _closed

    fw = _forward.Forwarder(1 << 20, 1 << 20, 16, 1 << 20, 1.0, VERSIONS)
    try:
        client, client_end = socket.socketpair()
        upstream, upstream_end = socket.socketpair()
        client_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        fw.add(1, client_end.detach(), upstream_end.detach())
        frame = answer_to(api_versions(1), 4000)
        upstream.sendall(frame * 10)
        upstream.shutdown(socket.SHUT_WR)
        closed, started = [], time.monotonic()
        while not closed and time.monotonic() < started + TIMEOUT:
            time.sleep(0.05)
            closed = [item for item in fw.take() if item[0] == _forward.CLOSED]
        assert time.monotonic() - started > 0.9  # not at the upstream's end: 1 s later
        (item,) = closed
        assert item[2:4] == (0, _forward.UNDELIVERED)
        left = item[4]
        assert 0 < left < len(frame) * 10
        got = bytearray()
        client.settimeout(TIMEOUT)
        while chunk := client.recv(65536):
            got += chunk
        assert len(got) + left == len(frame) * 10 and bytes(got) == (frame * 10)[: len(got)]
        proxy = types.SimpleNamespace(frame_timeout=1.0, max_frame_bytes=1 << 20)
        assert _closed(_forward, proxy, item)[0] == (
            f"upstream closed; client did not take the last {left} bytes of its answers "
            "within 1 s (frame_timeout): dropped"
        )
    finally:
        fw.close()


@needs_compiled
def test_clients_closing_before_the_hand_over_leave_no_upstream_open(broker):
    """Health checks and scanners: 100 clients that connect and close at once, half of
    them after one request. Each ends as "client closed", its upstream connection closes
    too, and each request reached the upstream and is recorded. (The hand-over read the
    socket of a transport already closed: 97 upstream connections were left open and the
    tasks died with AttributeError.)"""
    with BackgroundProxy(f"127.0.0.1:{broker.port}", forward="compiled") as proxy:
        for i in range(100):
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
                if i % 2:
                    s.sendall(api_versions(1000 + i, "silent"))
        wait_for_events(proxy, "client closed", 100)
        deadline = time.monotonic() + TIMEOUT
        while broker.open and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.open == 0
        assert not [e for e in proxy.events() if e.kind == ProxyEvent.ERROR]
        assert set(range(1001, 1100, 2)) <= {ex.correlation_id for ex in proxy.exchanges()}
        served(proxy)


@needs_compiled
def test_a_hand_over_after_the_forwarder_closed_leaks_nothing(broker):
    """A connection whose upstream connects while the proxy closes its compiled path:
    add() refuses, and both duplicated descriptors are closed (they leaked, and the
    upstream connection with them)."""
    with BackgroundProxy(f"127.0.0.1:{broker.port}", forward="compiled") as proxy:
        served(proxy)
        compiled = proxy.proxy._compiled
        asyncio.run_coroutine_threadsafe(compiled.close(), proxy._loop).result(TIMEOUT)
        deadline = time.monotonic() + TIMEOUT
        while broker.open and time.monotonic() < deadline:
            time.sleep(0.02)
        fds = len(os.listdir("/proc/self/fd"))
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as s:
            s.sendall(api_versions(5))
            try:
                assert s.recv(100) == b""
            except ConnectionResetError:
                pass
        wait_for_events(proxy, "proxy closing")
        while broker.open and time.monotonic() < deadline:
            time.sleep(0.02)
        assert broker.open == 0
        # the loop closes what it refused a moment later (asyncio's loop: after this returns)
        while len(os.listdir("/proc/self/fd")) > fds and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(os.listdir("/proc/self/fd")) <= fds


@needs_compiled
def test_forward_compiled_with_an_option_that_needs_python_is_a_usage_error(capsys):
    for flags, named in (
        (["--broker-ports", "30000-30009"], "--broker-ports"),
        (["--fault", "api=Heartbeat,error=27"], "--fault/--rules"),
        (["--rewrite-advertised"], "--rewrite-advertised"),
    ):
        try:
            code = main(["proxy", "--upstream", "127.0.0.1:9", "--forward", "compiled", *flags])
        except SystemExit as e:
            code = e.code
        err = capsys.readouterr().err
        assert code == 2
        assert (
            f"error: --forward: the compiled forwarding path cannot carry connections with "
            f"{named} (Python's work for every exchange): ask for auto" in err
        )


def tcp_pair():
    """(far end, near end) of one TCP connection on 127.0.0.1: a peer's close is a FIN
    (EPOLLRDHUP), not the hang-up a closed socket pair gives."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        far = socket.create_connection(listener.getsockname(), timeout=TIMEOUT)
        near, _ = listener.accept()
    far.settimeout(TIMEOUT)
    return far, near


def closed_items(fw, seconds):
    """The CLOSED items taken within `seconds` (at the first one)."""
    from fastkwire import _forward

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        closed = [item for item in fw.take() if item[0] == _forward.CLOSED]
        if closed:
            return closed
        time.sleep(0.05)
    return []


@needs_compiled
def test_a_client_that_closes_with_its_requests_unanswered_is_seen_to_end():
    """A client whose requests fill max_in_flight, then closes, to an upstream that never
    answers: its reading was paused, so its FIN went unseen and the pair stayed open for
    ever (no timeout runs while requests wait). Its end is seen: the request it sent
    after the limit still reaches the upstream, then the upstream's connection ends too."""
    from fastkwire import _forward

    fw = _forward.Forwarder(1 << 20, 1 << 20, 1, 1 << 20, 30.0, VERSIONS)
    try:
        client, client_end = tcp_pair()
        upstream, upstream_end = tcp_pair()
        fw.add(1, client_end.detach(), upstream_end.detach())
        first, second = api_versions(1, "silent"), api_versions(2, "silent")
        client.sendall(first + second)
        assert recv_exactly(upstream, len(first)) == first
        time.sleep(0.2)
        client.close()
        (item,) = closed_items(fw, 3.0)
        assert item[2:4] == (0, _forward.CLIENT_CLOSED) and item[7] == 2
        assert recv_exactly(upstream, len(second)) == second
        assert upstream.recv(10) == b""
    finally:
        fw.close()


@needs_compiled
def test_an_upstream_that_ends_while_its_client_takes_nothing_is_ended_after_frame_timeout():
    """An upstream sends more than the client takes (its reading pauses past 64 KiB
    waiting), then ends. Its FIN went unseen while its reading was paused, so neither the
    end nor frame_timeout ever started: the pair was held for ever by a client that reads
    nothing. The end is seen, and the client must take something every frame_timeout."""
    from fastkwire import _forward

    fw = _forward.Forwarder(1 << 20, 1 << 20, 16, 1 << 20, 1.0, VERSIONS)
    try:
        client, client_end = tcp_pair()
        upstream, upstream_end = tcp_pair()
        client_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        client.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        fw.add(1, client_end.detach(), upstream_end.detach())
        # 120 KB: past what the client's buffers and FW_HIGH_WATER take, so its reading
        # pauses, yet within the upstream's receive window with what the forwarder read, so
        # the upstream's FIN is sent. (400 KB could leave the FIN behind unsent data on a
        # loaded machine, whose receive buffer had not grown: an end never sent, not unseen.)
        answers = b"".join(answer_to(api_versions(cid), 10_000) for cid in range(12))
        upstream.sendall(answers)
        time.sleep(0.3)
        upstream.close()
        started = time.monotonic()
        # about a second here; a loaded machine (two test workers) has taken over 5 s
        (item,) = closed_items(fw, 20.0)
        assert time.monotonic() - started > 0.9  # a frame_timeout after the upstream's end
        assert item[2:4] == (0, _forward.UNDELIVERED)
        got = bytearray()
        while chunk := client.recv(65536):
            got += chunk
        assert bytes(got) == answers[: len(got)] and len(got) < len(answers)
    finally:
        fw.close()


@needs_compiled
def test_a_half_closed_client_still_gets_every_answer_and_costs_no_cpu_meanwhile():
    """A client that ends its stream (shutdown for writing) after its upstream ended, while
    the upstream's last answers wait for it: it still gets them all, and while it waits to
    read them the forwarding thread does not spin on its end (seen once, then no longer
    asked for). (A client's end before the upstream's ends the pair: its answers are
    dropped, as ever.)"""
    from fastkwire import _forward

    fw = _forward.Forwarder(1 << 20, 1 << 20, 16, 1 << 20, 30.0, VERSIONS)
    try:
        client, client_end = socket.socketpair()  # small buffers: the answers wait
        client.settimeout(TIMEOUT)
        upstream, upstream_end = tcp_pair()
        client_end.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        fw.add(1, client_end.detach(), upstream_end.detach())
        answers = b"".join(answer_to(api_versions(cid), 10_000) for cid in range(6))
        upstream.sendall(answers)  # under 64 KiB: all read, the upstream's end too
        upstream.shutdown(socket.SHUT_WR)
        time.sleep(0.2)
        client.shutdown(socket.SHUT_WR)
        time.sleep(0.2)
        cpu = time.process_time()
        time.sleep(1.0)
        assert time.process_time() - cpu < 0.5
        assert recv_exactly(client, len(answers)) == answers
        assert client.recv(10) == b""
    finally:
        fw.close()


@needs_compiled
def test_a_client_that_closes_while_clients_are_held_for_max_buffered_is_seen_to_end():
    """A client whose unanswered request takes the proxy past max_buffered_bytes (every
    client is then held between frames), then closes, to an upstream that never answers:
    its end was never read (held like the others), so its request was held for ever, and
    with it every other client. Its end is read: the pair ends and the hold lifts."""
    from fastkwire import _forward

    fw = _forward.Forwarder(4 << 20, 4 << 20, 64, 1 << 20, 30.0, VERSIONS)
    try:
        client, client_end = tcp_pair()
        upstream, upstream_end = tcp_pair()
        fw.add(1, client_end.detach(), upstream_end.detach())
        big = api_versions(1, "silent")
        big = SIZE.pack(len(big) - 4 + (3 << 19)) + big[4:] + bytes(3 << 19)  # 1.5 MiB
        sender = threading.Thread(target=client.sendall, args=(big,), daemon=True)
        sender.start()
        assert recv_exactly(upstream, len(big)) == big
        sender.join(TIMEOUT)
        client.sendall(api_versions(2))  # read only once the hold lifts
        time.sleep(0.3)
        assert [item[0] for item in fw.take()] == [_forward.HOLDING]
        client.close()
        (item,) = closed_items(fw, 3.0)
        assert item[2:4] == (0, _forward.CLIENT_CLOSED) and item[7] == 2
        assert read_frame(upstream) == api_versions(2)
        assert upstream.recv(10) == b""
    finally:
        fw.close()

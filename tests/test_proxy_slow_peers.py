"""The proxy when its own outputs or its peers are slow: a stdout nobody reads, a response
too large to decode for display, a delay rule or a client that pauses reading while a frame
is under way (the frame watchdog counts only time spent waiting on the peer), unpaired
frames in the capture files, the advertised-address rewrite keeping the response header's
bytes, and the caps on connections and on bytes buffered for all of them.

Upstreams are small threaded stand-ins on 127.0.0.1; every wait is bounded."""

import json
import signal
import socket
import struct
import subprocess
import sys
import threading
import time

import pytest

import fastkwire as fk
from fastkwire.proxy import BackgroundProxy, Rule
from fastkwire.proxy._rewrite import rewrite_advertised
from fastkwire.proxy._server import PeerClock

from test_proxy_cli import ChildStreams, child_env, listening_address
from test_proxy_hostile import FakeBroker, closed_by_peer, read_frame, request, wait_for_event

TIMEOUT = 10.0
SIZE = struct.Struct(">i")


@pytest.fixture
def broker():
    b = FakeBroker()
    yield b
    b.close()


class ScriptedUpstream:
    """Calls `answer(sock, frames)` with the request frames of each read (whole frames)."""

    def __init__(self, answer):
        self.answer = answer
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
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
                    data = sock.recv(1 << 20)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not data:
                    return
                buf += data
                frames = []
                while len(buf) >= 4 and len(buf) >= 4 + SIZE.unpack_from(buf)[0]:
                    n = 4 + SIZE.unpack_from(buf)[0]
                    frames.append(buf[:n])
                    buf = buf[n:]
                if frames:
                    try:
                        self.answer(sock, frames)
                    except OSError:
                        return

    def close(self):
        self._stop.set()
        self.listener.close()
        for t in self._threads:
            t.join(5)


def answer_to(frame, **fields):
    correlation_id = SIZE.unpack_from(frame, 8)[0]
    return fk.encode_response(fk.ApiVersionsResponse(error_code=0, **fields), 3, correlation_id)


# ---------------------------------------------------------------- stdout nobody reads


def test_a_stdout_nobody_reads_holds_no_exchange_back(broker):
    """`fastkwire proxy --json` with its stdout a pipe nobody reads: 3,000 exchanges on three
    connections all complete, and a new connection is answered at once. Each request
    carries 8 KiB more than its message (a broker ignores them), so the lines waiting for
    stdout hold more than their queue takes (16 MiB of frames): the lines that did not fit
    are counted on stderr at the end, and with the lines written they make every exchange."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "proxy", "--listen", "127.0.0.1:0"]
        + ["--upstream", f"127.0.0.1:{broker.port}", "--json"],
        stdout=subprocess.PIPE,  # never read until the end
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    streams = ChildStreams(proc, read_stdout=False)
    try:
        _, port = listening_address(streams)
        socks = [socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) for _ in range(3)]
        for sock in socks:
            sock.sendall(b"".join(padded(request("good", i), 8192) for i in range(1000)))
        for sock in socks:
            for i in range(1000):
                assert SIZE.unpack_from(read_frame(sock), 4)[0] == i
            sock.close()
        with socket.create_connection(("127.0.0.1", port), timeout=3) as late:
            late.sendall(request("good", 7))
            assert SIZE.unpack_from(read_frame(late), 4)[0] == 7
    finally:
        proc.send_signal(signal.SIGINT)
        code, out, err = streams.finish(60)
    assert code == 0, err
    lines = [json.loads(line) for line in out.splitlines()]
    shown = len([d for d in lines if "api" in d])
    dropped = [line for line in err.splitlines() if "lines not shown" in line]
    assert len(dropped) == 1, err
    not_shown = int(dropped[0].split("proxy: ", 1)[1].split()[0])
    assert not_shown > 0 and shown + not_shown == 3001, (shown, not_shown)
    assert lines[-1]["summary"]["apis"][0]["count"] == 3001  # the summary counts them all


def padded(frame, extra):
    return SIZE.pack(len(frame) - 4 + extra) + frame[4:] + b"\x00" * extra


def test_a_full_output_queue_drops_and_counts_lines():
    """The sink behind the proxy's lines: while its writer is stuck, offers past the queue's
    bound return at once, dropped and counted; once it moves, what was queued is written in
    order."""
    from fastkwire.proxy import QueuedSink

    gate, taken, written = threading.Event(), threading.Event(), []

    def write(item):
        taken.set()
        gate.wait(TIMEOUT)
        written.append(item)

    sink = QueuedSink(write, max_items=5, max_bytes=1000)
    assert sink.offer("stuck") and taken.wait(TIMEOUT)  # the writer now waits on the gate
    offered = [sink.offer(i, 10) for i in range(50)]
    assert offered == [True] * 4 + [False] * 46 and sink.dropped == 46  # "stuck" is the fifth
    gate.set()
    assert sink.close(TIMEOUT)
    assert written == ["stuck", 0, 1, 2, 3]

    gate.clear()
    taken.clear()
    written.clear()
    sink = QueuedSink(write, max_items=100, max_bytes=1000)
    assert sink.offer("stuck") and taken.wait(TIMEOUT)
    assert [sink.offer(*x) for x in (("a", 600), ("b", 600), ("c", 300))] == [True, False, True]
    gate.set()
    assert sink.close(TIMEOUT) and written == ["stuck", "a", "c"] and sink.dropped == 1


# ---------------------------------------------------------------- a response too large to decode


def list_groups_frame(correlation_id, groups, error_code=0):
    """A ListGroups v4 response of `groups` empty-named groups, built as bytes (4 per group)."""
    n = groups + 1
    count = bytearray()
    while True:
        count.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            break
    body = struct.pack(">ih", 0, error_code) + bytes(count) + b"\x01\x01\x01\x00" * groups + b"\x00"
    header = struct.pack(">i", correlation_id) + b"\x00"
    return SIZE.pack(len(header) + len(body)) + header + body


def list_groups_request(correlation_id):
    return fk.encode_request(fk.ListGroupsRequest(), 4, correlation_id, "big")


def test_a_large_answer_is_not_decoded_for_the_summary_or_on_the_loop(monkeypatch):
    """A 4 MB ListGroups answer (1M groups): its error code reaches the summary without a
    decode, read from the bytes off the event loop."""
    from fastkwire.proxy import _exchange

    big = {}

    def answer(sock, frames):
        for f in frames:
            cid = SIZE.unpack_from(f, 8)[0]
            sock.sendall(
                list_groups_frame(cid, 1_000_000, error_code=15) if cid == 1 else answer_to(f)
            )

    decoded, scanned_in = [], []
    real_decode, real_scan = _exchange.decode_response, _exchange.response_error_codes
    monkeypatch.setattr(
        _exchange,
        "decode_response",
        lambda f, *a, **k: decoded.append(len(f)) or real_decode(f, *a, **k),
    )

    def scan(frame, *args):
        scanned_in.append(threading.current_thread().name)
        return real_scan(frame, *args)

    monkeypatch.setattr(_exchange, "response_error_codes", scan)
    upstream = ScriptedUpstream(answer)
    try:
        with BackgroundProxy(f"127.0.0.1:{upstream.port}") as proxy:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as sock:
                sock.sendall(list_groups_request(1))
                big["frame"] = read_frame(sock)
                sock.sendall(request("good", 2))
                read_frame(sock)
            deadline = time.monotonic() + TIMEOUT
            while time.monotonic() < deadline and len(scanned_in) < 2:
                time.sleep(0.02)
            exchanges = proxy.exchanges()
            line = fk.proxy.exchange_line(exchanges[0])
        summary = proxy.summary.to_dict()["apis"]
    finally:
        upstream.close()
    assert len(big["frame"]) > 4_000_000
    assert {a["api"]: a["errors"] for a in summary}["ListGroups"] == {
        "COORDINATOR_NOT_AVAILABLE": 1
    }
    assert decoded == []  # not for the summary, and not for a line over the display limit
    assert "COORDINATOR_NOT_AVAILABLE" in line and "does not decode" not in line
    assert scanned_in[:2] == ["fastkwire-proxy-inspector"] * 2


# ---------------------------------------------------------------- the frame watchdog


def test_peer_clock_counts_only_waits_on_the_peer():
    clock = PeerClock()
    clock.reading(0.0)
    clock.read(0.1, completed=True, partial=True)  # a frame done, the next begun
    assert not clock.overdue(100.0, 1.0)  # the proxy's own wait (a delay, a drain) is free
    clock.reading(100.0)
    assert not clock.overdue(100.9, 1.0) and clock.overdue(101.1, 1.0)
    clock.read(100.5, completed=False, partial=True)
    clock.reading(200.0)
    assert clock.overdue(200.6, 1.0)  # 0.5 + 0.6 of waiting, 100 s apart
    clock.read(200.6, completed=True, partial=False)
    assert not clock.overdue(1000.0, 1.0)


def test_a_delay_rule_longer_than_the_frame_timeout_spares_a_healthy_answer():
    """Two pipelined answers: the first comes in two reads, the second of which also holds
    most of the second answer; a 2.5 s delay rule then holds the first, under a frame timeout
    of 1 s. The time the proxy itself holds the answers is not the upstream's fault."""

    def answer(sock, frames):
        answers = b"".join(answer_to(f) for f in frames)
        for piece in (answers[:5], answers[5:-10], answers[-10:]):
            sock.sendall(piece)
            time.sleep(0.1)

    upstream = ScriptedUpstream(answer)
    rule = Rule(api="ApiVersions", delay_ms=2500, times=1)
    try:
        with BackgroundProxy(f"127.0.0.1:{upstream.port}", rules=[rule], frame_timeout=1) as proxy:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as sock:
                sock.sendall(request("good", 1) + request("good", 2))
                got = [SIZE.unpack_from(read_frame(sock), 4)[0] for _ in range(2)]
            events = [e.text for e in proxy.events() if e.kind == "error"]
    finally:
        upstream.close()
    assert got == [1, 2] and events == []


def test_a_client_that_pauses_reading_still_gets_a_large_answer():
    """A 16 MB answer to a client that reads nothing for 2.5 s (frame timeout 1 s): the
    proxy's wait for room to write is not the upstream's fault."""

    def answer(sock, frames):
        for f in frames:
            body = b"\x00" * (16 * 1024 * 1024)
            frame = SIZE.pack(4 + len(body)) + struct.pack(">i", SIZE.unpack_from(f, 8)[0]) + body
            sock.sendall(frame)

    upstream = ScriptedUpstream(answer)
    try:
        with BackgroundProxy(f"127.0.0.1:{upstream.port}", frame_timeout=1) as proxy:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as sock:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)
                sock.sendall(request("good", 1))
                time.sleep(2.5)
                frame = read_large_frame(sock)
            events = [e.text for e in proxy.events() if e.kind == "error"]
    finally:
        upstream.close()
    assert (
        len(frame) == 8 + 16 * 1024 * 1024 and frame[4:8] == struct.pack(">i", 1) and events == []
    )


def read_large_frame(sock):
    """One frame, gathered in a bytearray (read_frame's bytes concatenation is quadratic)."""
    frame, want = bytearray(), 4
    while len(frame) < want:
        chunk = sock.recv(min(1 << 20, want - len(frame)))
        if not chunk:
            raise ConnectionError(f"closed after {len(frame)} of {want} bytes")
        frame += chunk
        if want == 4 and len(frame) == 4:
            want = 4 + SIZE.unpack_from(frame)[0]
    return bytes(frame)


def test_a_peer_that_stops_mid_frame_is_still_timed_out(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}", frame_timeout=0.5) as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as sock:
            sock.sendall(request("good", 1)[:9])
            assert closed_by_peer(sock)
        wait_for_event(proxy, "did not finish it within 0.5 s")


# ---------------------------------------------------------------- unpaired frames recorded


def test_unpaired_frames_are_in_the_capture_files(broker, tmp_path):
    pytest.importorskip("dpkt")
    record, pcap = tmp_path / "t.jsonl", tmp_path / "t.pcap"
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", "proxy", "--listen", "127.0.0.1:0"]
        + ["--upstream", f"127.0.0.1:{broker.port}", "--quiet"]
        + ["--record", str(record), "--pcap", str(pcap)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=child_env(),
    )
    streams = ChildStreams(proc)
    try:
        _, port = listening_address(streams)
        with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as sock:
            sock.sendall(request("stray", 5))  # answered with correlation id 1005
            stray = read_frame(sock)
            sock.sendall(b"\x00\x00\x00\x03abc" + request("good", 6))  # too short, then one
            assert SIZE.unpack_from(read_frame(sock), 4)[0] == 6
    finally:
        proc.send_signal(signal.SIGINT)
        streams.finish(60)
    lines = [json.loads(line) for line in record.read_text().splitlines()]
    unpaired = [(d["unpaired"], bytes.fromhex(d["frame"])) for d in lines if "unpaired" in d]
    assert sorted(unpaired) == [("request", b"\x00\x00\x00\x03abc"), ("response", stray)]
    exchanges = sorted((d for d in lines if "unpaired" not in d), key=lambda d: d["correlation_id"])
    assert [(d["correlation_id"], d["response"] is None) for d in exchanges] == [
        (5, True),
        (6, False),
    ]
    warned = []
    back = fk.proxy.read_capture(pcap, None, warned.append)
    assert [e.correlation_id for e in back] == [5, 6]
    assert len(warned) == 1 and "2 frames without a pair" in warned[0]
    with open(pcap, "rb") as f:  # the unpaired bytes are in the stream, in order
        payload = b"".join(fk_tcp_payloads(f))
    assert stray in payload and b"\x00\x00\x00\x03abc" in payload


def fk_tcp_payloads(f):
    import dpkt

    for _, buf in dpkt.pcap.Reader(f):
        yield dpkt.ethernet.Ethernet(buf).data.data.data


# ---------------------------------------------------------------- rewrite keeps the header


def test_the_rewrite_keeps_the_response_headers_tagged_fields():
    M = fk.MetadataResponse
    msg = M(brokers=[M.MetadataResponseBroker(node_id=1, host="broker", port=9092)], topics=[])
    plain = fk.encode_response(msg, 12, 77)
    tagged = b"\x01\x05\x03abc"  # header tagged fields: one field, tag 5, 3 bytes
    frame = SIZE.pack(len(plain) - 4 + len(tagged) - 1) + plain[4:8] + tagged + plain[9:]
    header, _ = fk.decode_response(frame, M.API_KEY, 12)
    assert header.unknown_tagged_fields == {5: b"abc"}
    new = rewrite_advertised(frame, M.API_KEY, 12, "proxy", 19092)
    assert new[4 : 8 + len(tagged)] == frame[4 : 8 + len(tagged)]
    header, got = fk.decode_response(new, M.API_KEY, 12)
    assert header.unknown_tagged_fields == {5: b"abc"}
    assert [(b.host, b.port) for b in got.brokers] == [("proxy", 19092)]


# ---------------------------------------------------------------- caps across connections


def test_connections_past_max_connections_are_refused(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}", max_connections=2) as proxy:
        a = socket.create_connection(proxy.address, timeout=TIMEOUT)
        b = socket.create_connection(proxy.address, timeout=TIMEOUT)
        a.sendall(request("good", 1))
        read_frame(a)
        b.sendall(request("good", 2))
        read_frame(b)
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as c:
            assert closed_by_peer(c)
        wait_for_event(proxy, "limit 2: max_connections")
        a.sendall(request("good", 3))  # the open ones go on
        assert SIZE.unpack_from(read_frame(a), 4)[0] == 3
        a.close()
        b.close()


def test_a_frame_past_twice_max_buffered_bytes_ends_the_connection_that_crossed_it(broker):
    with BackgroundProxy(f"127.0.0.1:{broker.port}", max_buffered_bytes=200_000) as proxy:
        with socket.create_connection(proxy.address, timeout=TIMEOUT) as good:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as hog:
                hog.sendall(SIZE.pack(1_000_000) + b"\x00" * 500_000)  # a frame under way
                assert closed_by_peer(hog)
            wait_for_event(proxy, "(twice the limit 200000: max_buffered_bytes)")
            good.sendall(request("good", 9))
            assert SIZE.unpack_from(read_frame(good), 4)[0] == 9
        assert proxy.call(lambda: proxy.proxy.buffered) == 0


def test_past_max_buffered_bytes_clients_are_not_read_until_answers_drain():
    """Whole requests awaiting answers past the limit: the client is not read (the broker
    sees no more requests) until answers drain; then everything is answered, in order,
    and no connection is ended."""
    release = threading.Event()
    seen = []

    def answer(sock, frames):
        seen.extend(frames)
        release.wait(TIMEOUT)
        for f in frames:
            sock.sendall(answer_to(f))

    upstream = ScriptedUpstream(answer)
    try:
        with BackgroundProxy(f"127.0.0.1:{upstream.port}", max_buffered_bytes=150_000) as proxy:
            with socket.create_connection(proxy.address, timeout=TIMEOUT) as sock:
                for i in range(8):  # 8 requests of 50 KB, one at a time: whole frames
                    sock.sendall(padded(request("good", i), 50_000))
                    time.sleep(0.05)
                wait_for_event(proxy, "clients are not read until answers drain")
                time.sleep(0.3)
                # Read and forwarded: up to the one request that crossed 150 KB, no more.
                pending = proxy.call(lambda: proxy.proxy.requests_in_flight)
                assert pending == 3  # 3 x 50 KB and their headers cross 150 KB
                release.set()
                for i in range(8):
                    assert SIZE.unpack_from(read_frame(sock), 4)[0] == i
            assert len(seen) == 8
            assert not [e for e in proxy.events() if "closing" in e.text]
    finally:
        release.set()
        upstream.close()

"""The compiled forwarding path against the asyncio one: the same traffic through both gives
byte-identical captures and the same summary counts; which path a proxy takes, and why;
hostile peers end only their own connection on the compiled path (garbage, cut frames,
resets, a peer that never reads), with the asyncio path's lines. Only 127.0.0.1, every
wait bounded. The rest of the proxy suite runs on either path with
FASTKWIRE_PROXY_FORWARD=compiled or =python (the default, auto, takes the compiled path
wherever it can carry the connections)."""

import json
import random
import socket
import struct
import threading
import time

import pytest

import fastkwire as fk
from fastkwire.proxy import BackgroundProxy, Proxy, ProxyEvent, Rule
from fastkwire.proxy._compiled import compiled_forwarder

from test_proxy_cli import ProxyProcess

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
    # options that need Python per exchange keep the asyncio path, even when asked
    for kwargs in (
        {"rules": [Rule(api="Heartbeat", error=27)]},
        {"rewrite_advertised": True},
        {"broker_ports": "30000-30009"},
    ):
        forward = "compiled" if available else "auto"
        assert Proxy("127.0.0.1:9092", forward=forward, **kwargs).compiled is False
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

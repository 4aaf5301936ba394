"""How the broker reads request frames (_server.py's _Connection, _frame_buffer.py): frames
cut anywhere across reads, several in one read, frames larger than a read (read in place
into a FrameBuffer when max_buffered_bytes has room for it, grown as they come when not),
and a declared size that allocates nothing before its bytes come."""

import random
import socket
import struct
import time

import pytest
from certs import tls_files  # noqa: F401 - a fixture

from fastkwire import (
    ApiVersionsRequest,
    FetchRequest,
    ProduceRequest,
    decode_response,
    encode_request,
    records,
)
from fastkwire.broker._frame_buffer import PureFrameBuffer
from fastkwire.testing import Broker

TIMEOUT = 10.0


def _read_frame(s):
    def take(n):
        data = b""
        while len(data) < n:
            chunk = s.recv(n - len(data))
            assert chunk, "the connection was closed"
            data += chunk
        return data

    head = take(4)
    return head + take(struct.unpack(">i", head)[0])


def _produce(topic, n, size, correlation_id):
    batch = records.write_batch(
        [records.Record(value=bytes([i % 251]) * size, timestamp=i) for i in range(n)]
    )
    P = ProduceRequest
    request = P(
        acks=1,
        timeout_ms=5000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)]
            )
        ],
    )
    return encode_request(request, 9, correlation_id, "frames"), n


def _fetch_all(s, topic, correlation_id):
    F = FetchRequest
    request = F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=64 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                partitions=[
                    F.FetchPartition(
                        partition=0,
                        fetch_offset=0,
                        partition_max_bytes=64 << 20,
                        log_start_offset=-1,
                        current_leader_epoch=-1,
                    )
                ],
            )
        ],
    )
    s.sendall(encode_request(request, 11, correlation_id, "frames"))
    _, body = decode_response(_read_frame(s), FetchRequest.API_KEY, 11)
    data = body.responses[0].partitions[0].records
    return [r for b in records.read_batches(data) for r in b.records]


def _connect(broker):
    host, port = next(iter(broker.addresses.values()))
    s = socket.create_connection((host, port), timeout=TIMEOUT)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def _state(broker):
    """(bytes held, bytes reserved) of the broker, read on its loop."""
    return broker.call(lambda: (broker.broker.buffered, broker.broker.reserved))


def _wait_until(check, timeout=TIMEOUT):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.02)
    return False


@pytest.mark.parametrize("room", [True, False])
def test_frames_cut_anywhere_are_answered_in_order_and_kept_whole(room):
    """Small and large Produce requests (one over the 256 KiB read) and ApiVersions, sent
    as one stream cut at random places (the size prefixes too): every answer comes, in
    order, and the records read back as sent. Without room under max_buffered_bytes (another
    connection's frame reserved most of it), the large frame grows as its bytes come
    instead of being allocated whole."""
    rng = random.Random(7)
    with Broker(max_buffered_bytes=1 << 20, groups=None) as broker:
        broker.create_topic("cut")
        hog = _connect(broker)
        if not room:
            hog.sendall(struct.pack(">i", 900_000) + b"\x00" * 10)
            assert _wait_until(lambda: _state(broker) == (14, 900_004 - 14)), _state(broker)
        s = _connect(broker)
        stream, expected, count = b"", [], 0
        for cid, (n, size) in enumerate([(1, 10), (3000, 100), (2, 5), (40, 100), (1, 1)]):
            frame, k = _produce("cut", n, size, cid + 1)
            stream += frame + encode_request(ApiVersionsRequest(), 3, 100 + cid, "frames")
            expected += [cid + 1, 100 + cid]
            count += k
        pos = 0
        while pos < len(stream):
            step = rng.choice([1, 2, 3, 5, 17, 4096, 70_000, 300_000])
            s.sendall(stream[pos : pos + step])
            pos += step
            if rng.random() < 0.2:
                time.sleep(0.002)  # the broker reads what came so far
        got = []
        for cid in expected:
            frame = _read_frame(s)
            got.append(struct.unpack_from(">i", frame, 4)[0])
            if cid < 100:
                _, body = decode_response(frame, ProduceRequest.API_KEY, 9)
                assert body.responses[0].partition_responses[0].error_code == 0
        assert got == expected
        values = [r.value for r in _fetch_all(s, "cut", 999)]
        assert len(values) == count
        assert values[:4] == [bytes([0]) * 10, bytes([0]) * 100, bytes([1]) * 100, bytes([2]) * 100]
        s.close()
        hog.close()
        assert _wait_until(lambda: _state(broker) == (0, 0)), _state(broker)


def test_a_declared_size_allocates_nothing_ahead_without_room():
    """A size prefix within max_frame_bytes but beyond the room under max_buffered_bytes,
    then a few bytes: the broker holds those bytes only (nothing reserved for the rest);
    with room, the frame's whole buffer is reserved, and it counts until the connection
    ends."""
    with Broker(max_frame_bytes=8 << 20, max_buffered_bytes=1 << 20, groups=None) as broker:
        big = _connect(broker)
        big.sendall(struct.pack(">i", 4 << 20) + b"\x00" * 10)
        assert _wait_until(lambda: _state(broker) == (14, 0)), _state(broker)
        small = _connect(broker)
        small.sendall(struct.pack(">i", 100_000) + b"\x00" * 6)
        assert _wait_until(lambda: _state(broker) == (24, 100_004 - 10)), _state(broker)
        small.close()
        big.close()
        assert _wait_until(lambda: _state(broker) == (0, 0)), _state(broker)


@pytest.mark.parametrize("kind", ["compiled", "pure"])
def test_frame_buffer_fills_in_place_and_hands_out_bytes_once(kind):
    if kind == "compiled":
        FrameBuffer = pytest.importorskip("fastkwire._framebuf").FrameBuffer
    else:
        FrameBuffer = PureFrameBuffer
    buf = FrameBuffer(10, b"abc")
    assert (buf.size, buf.filled, len(buf)) == (10, 3, 7)
    a, b = socket.socketpair()
    try:
        b.sendall(b"defg")
        view = memoryview(buf) if kind == "compiled" else buf.view()
        n = a.recv_into(view)
        view.release()
        assert not buf.written(n)
        with pytest.raises(ValueError, match="3 of its 10|7 of its 10"):
            buf.take()
        with pytest.raises(ValueError, match="n: 0 to"):
            buf.written(buf.size)
        b.sendall(b"hij")
        view = memoryview(buf) if kind == "compiled" else buf.view()
        n = a.recv_into(view)
        assert buf.written(n)
        if kind == "compiled":
            with pytest.raises(ValueError, match="exported"):
                buf.take()  # the view is still held
        view.release()
        data = buf.take()
        assert type(data) is bytes and data == b"abcdefghij"
        with pytest.raises(ValueError, match="taken"):
            buf.take()
        with pytest.raises((BufferError, ValueError)):
            memoryview(buf) if kind == "compiled" else buf.view()
    finally:
        a.close()
        b.close()
    with pytest.raises(ValueError, match="head"):
        FrameBuffer(2, b"abc")
    with pytest.raises(ValueError, match="size"):
        FrameBuffer(-1, b"")


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_frame_larger_than_a_tls_record_is_read_over_tls(tls_files, loop):  # noqa: F811
    """A Produce of 300 KB on an SSL listener: many TLS records, read into the frame's
    buffer as they are decrypted (asyncio's TLS transport slices the buffer it is given
    for each record after the first)."""
    import ssl

    if loop == "uvloop":
        pytest.importorskip("uvloop")
    with Broker(
        loop=loop, protocols=("SSL",), tls_cert=tls_files.server_cert, tls_key=tls_files.server_key
    ) as broker:
        broker.create_topic("tls")
        host, port = broker.bootstrap_servers_for("SSL").split(",")[0].rsplit(":", 1)
        context = ssl.create_default_context(cafile=tls_files.ca)
        raw = socket.create_connection((host, int(port)), timeout=TIMEOUT)
        with context.wrap_socket(raw, server_hostname=host) as s:
            frame, n = _produce("tls", 3000, 100, 1)
            assert len(frame) > 256 * 1024
            s.sendall(frame[:1000])  # the first read leaves most of the frame to come
            time.sleep(0.05)
            s.sendall(frame[1000:])
            _, body = decode_response(_read_frame(s), ProduceRequest.API_KEY, 9)
            assert body.responses[0].partition_responses[0].error_code == 0
            assert len(_fetch_all(s, "tls", 2)) == n


def test_the_frame_being_filled_is_not_reachable_through_the_collector():
    """gc.get_referents() on a FrameBuffer must not hand out the bytes it fills: that
    bytes is uninitialized memory until read, and a hash cached on it before it is full
    would be wrong once it is (a dict would not find the frame's bytes)."""
    import gc

    FrameBuffer = pytest.importorskip("fastkwire._framebuf").FrameBuffer
    frame = FrameBuffer(4, b"")
    assert not [r for r in gc.get_referents(frame) if isinstance(r, bytes)]
    with memoryview(frame) as into:
        into[:] = b"wxyz"
    frame.written(4)
    data = frame.take()
    assert {b"wxyz": 1}.get(data) == 1


@pytest.mark.parametrize("kind", ["compiled", "pure"])
def test_frame_buffer_slices_are_writable_views_of_the_part_not_read(kind):
    if kind == "compiled":
        FrameBuffer = pytest.importorskip("fastkwire._framebuf").FrameBuffer
    else:
        FrameBuffer = PureFrameBuffer
    frame = FrameBuffer(6, b"ab")
    part = frame[1:]
    assert len(part) == 3 and not part.readonly
    part[:] = b"xyz"
    part.release()
    with memoryview(frame) if kind == "compiled" else frame.view() as into:
        into[0] = ord("w")
    assert frame.written(4) is True
    assert frame.take() == b"abwxyz"


def test_a_frame_begun_past_max_buffered_bytes_does_not_stop_the_broker():
    """A frame larger than the room under max_buffered_bytes, sent in part: the connection
    holding it is not paused mid-frame (its bytes are freed only once it is whole, or the
    connection ends), so when its peer closes, what it held is released, and the other
    connections, paused between frames while the broker held too much, read again."""
    with Broker(max_frame_bytes=4 << 20, max_buffered_bytes=1 << 20, groups=None) as broker:
        big = _connect(broker)
        big.sendall(struct.pack(">i", 3 << 20) + bytes(1_200_000))
        assert _wait_until(lambda: _state(broker)[0] == 1_200_004), _state(broker)
        small = _connect(broker)
        small.sendall(encode_request(ApiVersionsRequest(), 3, 1, "frames"))
        assert struct.unpack_from(">i", _read_frame(small), 4)[0] == 1
        big.close()
        assert _wait_until(lambda: _state(broker) == (0, 0)), _state(broker)
        small.sendall(encode_request(ApiVersionsRequest(), 3, 2, "frames"))
        assert struct.unpack_from(">i", _read_frame(small), 4)[0] == 2
        small.close()

"""A load harness for the proxy: a broker stand-in and many client connections on one
asyncio loop, every byte of both directions checked.

Each connection `load-<i>` sends requests as fast as the answers come back, `window` in
flight: odd connections Produce v9 (a large request, a small answer), even ones Fetch v12
(a small request, a large answer holding `records` bytes). The broker answers every
request with a frame encoded by the codec (so the proxy's display decoding has real
work), correlation id patched in. Both ends keep a SHA-256 and a byte count of each
direction per connection, and the client checks that answers come in the order asked: a
lost, duplicated or reordered byte anywhere shows up as a mismatch.

Used by tests/test_proxy_load.py and benchmarks/proxy_cost.py.
"""

import asyncio
import hashlib
import os
import random
import struct
import time

from fastkwire import FetchResponse, ProduceResponse, encode_response

PRODUCE, FETCH, LIST_GROUPS = 0, 1, 16
POOL = os.urandom(1 << 20)  # request payloads are slices of this
SIZE = struct.Struct(">i")


def _fetch_answer(records):
    part = FetchResponse.PartitionData(
        partition_index=0, high_watermark=10, last_stable_offset=10, records=records
    )
    return encode_response(
        FetchResponse(
            responses=[FetchResponse.FetchableTopicResponse(topic="load", partitions=[part])]
        ),
        12,
        0,
    )


def _produce_answer():
    part = ProduceResponse.PartitionProduceResponse(index=0, base_offset=5)
    return encode_response(
        ProduceResponse(
            responses=[
                ProduceResponse.TopicProduceResponse(name="load", partition_responses=[part])
            ]
        ),
        9,
        0,
    )


class Templates:
    """Pre-encoded answers; each is patched with the request's correlation id."""

    def __init__(self, fetch_sizes):
        self.produce = _produce_answer()
        self.fetch = [_fetch_answer(POOL[:n]) for n in fetch_sizes]

    def add_list_groups(self, size):
        """A ListGroups v4 answer of about `size` bytes: empty-named groups, 4 bytes each,
        built as bytes (a message of millions of groups would take the test gigabytes)."""
        groups = (size - 20) // 4
        n, count = groups + 1, bytearray()
        while True:
            count.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                break
        body = b"\x00" * 6 + bytes(count) + b"\x01\x01\x01\x00" * groups + b"\x00"
        header = SIZE.pack(0) + b"\x00"  # correlation id (patched per answer), no tags
        self.list_groups = SIZE.pack(len(header) + len(body)) + header + body
        return len(self.list_groups)

    def answer(self, api_key, correlation_id, pick):
        if api_key == LIST_GROUPS:  # built for correlation id 0: no copy of it per answer
            if correlation_id:
                raise ValueError("ask ListGroups with correlation id 0")
            return self.list_groups
        frame = bytearray(
            self.produce if api_key == PRODUCE else self.fetch[pick % len(self.fetch)]
        )
        SIZE.pack_into(frame, 4, correlation_id)
        return bytes(frame)


def request(api_key, correlation_id, client_id, payload):
    cid = client_id.encode()
    version = 9 if api_key == PRODUCE else 12
    header = struct.pack(">hhih", api_key, version, correlation_id, len(cid)) + cid + b"\x00"
    if api_key == PRODUCE:  # transactional id null, acks=1, timeout: the proxy reads acks
        body = b"\x00" + struct.pack(">hi", 1, 30000) + payload
    else:
        body = payload
    return SIZE.pack(len(header) + len(body)) + header + body


class Side:
    """What one end saw and sent on one connection."""

    __slots__ = ("sent", "got", "sent_bytes", "got_bytes", "frames")

    def __init__(self):
        self.sent, self.got = hashlib.sha256(), hashlib.sha256()
        self.sent_bytes = self.got_bytes = self.frames = 0

    def send(self, data):
        self.sent.update(data)
        self.sent_bytes += len(data)

    def receive(self, data):
        self.got.update(data)
        self.got_bytes += len(data)

    def digest(self):
        return self.sent.hexdigest(), self.got.hexdigest(), self.sent_bytes, self.got_bytes


async def _read_frame(reader):
    head = await reader.readexactly(4)
    return head + await reader.readexactly(SIZE.unpack(head)[0])


class LoadBroker:
    """Answers every request; `sides[client_id]` is what it got and sent."""

    def __init__(self, templates):
        self.templates = templates
        self.sides = {}
        self.writers = set()
        self.server = None
        self.port = None

    async def start(self):
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=1 << 20)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def close(self):
        self.server.close()
        for w in list(self.writers):  # connections still open end here, not at the loop's end
            w.close()
        await self.server.wait_closed()
        for _ in range(100):
            if not self.writers:
                break
            await asyncio.sleep(0.01)

    async def _serve(self, reader, writer):
        side = None
        self.writers.add(writer)
        try:
            while True:
                try:
                    frame = await _read_frame(reader)
                except asyncio.IncompleteReadError:
                    return
                api_key, _, correlation_id, n = struct.unpack_from(">hhih", frame, 4)
                if side is None:
                    side = self.sides.setdefault(frame[14 : 14 + n].decode(), Side())
                side.receive(frame)
                side.frames += 1
                answer = self.templates.answer(api_key, correlation_id, correlation_id)
                side.send(answer)
                view = memoryview(answer)  # a large answer in pieces: asyncio copies no more
                for i in range(0, len(view), 1 << 20):
                    writer.write(view[i : i + (1 << 20)])
                    await writer.drain()
        except ConnectionError:
            return
        finally:
            self.writers.discard(writer)
            writer.close()


async def run_client(host, port, index, seconds, window, produce_sizes, latencies=None):
    """One connection at full speed for `seconds`; its Side, and in `latencies` (if given)
    each exchange's (time sent, seconds to its answer)."""
    client_id = f"load-{index}"
    api_key = PRODUCE if index % 2 else FETCH
    rng = random.Random(index)
    side = Side()
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    sent_at = {}
    expected = []
    correlation_id = 0
    deadline = time.monotonic() + seconds
    try:
        while True:
            while len(expected) < window and time.monotonic() < deadline:
                correlation_id += 1
                size = rng.choice(produce_sizes) if api_key == PRODUCE else rng.randrange(16, 128)
                start = rng.randrange(0, len(POOL) - size)
                frame = request(api_key, correlation_id, client_id, POOL[start : start + size])
                side.send(frame)
                side.frames += 1
                sent_at[correlation_id] = time.monotonic()
                expected.append(correlation_id)
                writer.write(frame)
            if not expected:
                break
            await writer.drain()
            answer = await _read_frame(reader)
            got = SIZE.unpack_from(answer, 4)[0]
            want = expected.pop(0)
            if got != want:
                raise AssertionError(
                    f"{client_id}: answer to correlation id {got} where {want} was next"
                )
            if latencies is not None:  # (when sent, how long the answer took)
                latencies.append((sent_at[got], time.monotonic() - sent_at[got]))
            del sent_at[got]
            side.receive(answer)
    finally:
        writer.close()
    return client_id, side


async def run_paced_client(host, port, index, seconds, interval, stamps):
    """One connection asking one small request every `interval` seconds (answered before the
    next), for `seconds`: (client id, Side); each exchange's (time sent, seconds to its
    answer) in `stamps`. Unlike run_client it leaves the proxy idle between requests, so a
    latency measures what delays an exchange, not a queue of them."""
    client_id = f"paced-{index}"
    api_key = PRODUCE if index % 2 else FETCH
    side = Side()
    reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
    deadline = time.monotonic() + seconds
    next_at = time.monotonic() + interval * random.Random(index).random()
    correlation_id = 0
    try:
        while True:
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
            if time.monotonic() >= deadline:
                break
            correlation_id += 1
            frame = request(api_key, correlation_id, client_id, POOL[:256])
            side.send(frame)
            side.frames += 1
            sent = time.monotonic()
            writer.write(frame)
            answer = await _read_frame(reader)
            stamps.append((sent, time.monotonic() - sent))
            if SIZE.unpack_from(answer, 4)[0] != correlation_id:
                raise AssertionError(f"{client_id}: answer to the wrong request")
            side.receive(answer)
            next_at = sent + interval
    finally:
        writer.close()
    return client_id, side


async def run_load(host, port, connections, seconds, window=4, produce_sizes=(512, 16384, 65536)):
    """{client id: Side} of `connections` clients run at once."""
    results = await asyncio.gather(
        *(run_client(host, port, i, seconds, window, produce_sizes) for i in range(connections))
    )
    return dict(results)


def compare(clients, broker_sides):
    """The differences between what each client sent and got and what the broker got and
    sent on its connection (empty: every byte arrived, in order)."""
    problems = []
    for client_id, c in clients.items():
        b = broker_sides.get(client_id)
        if b is None:
            problems.append(f"{client_id}: the broker never saw it")
            continue
        if (c.sent.hexdigest(), c.sent_bytes) != (b.got.hexdigest(), b.got_bytes):
            problems.append(
                f"{client_id}: sent {c.sent_bytes} bytes, the broker got {b.got_bytes} "
                "(or other bytes)"
            )
        if (c.got.hexdigest(), c.got_bytes) != (b.sent.hexdigest(), b.sent_bytes):
            problems.append(
                f"{client_id}: the broker sent {b.sent_bytes} bytes, the client got {c.got_bytes} "
                "(or other bytes)"
            )
    return problems

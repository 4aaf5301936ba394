"""The asyncio broker: listeners (one per node), connections that split frames, decode each
request with the codec, hand it to `Apis` and write the answer encoded at the request's
version.

A connection's requests are answered one at a time and in order, as Kafka does: the next
frame is taken once the answer to the one before is written (a Fetch waiting for data holds
the frames behind it). The proxy's caps and their defaults hold here too:
- `max_frame_bytes`: a size prefix above it (or below 0) is not Kafka framing; the
  connection ends.
- `max_pending_bytes`: frames a connection may queue behind the one being answered; past it,
  the connection is not read until they are answered.
- `max_buffered_bytes`: frames held for all connections together; past it, the connection
  that read last waits for room, past twice it, that connection ends.
- `frame_timeout`: seconds a started frame may take to arrive whole, counted only while the
  broker is reading (a slowloris ends, a client the broker paused does not).
- `max_connections`: more are closed as they arrive.
What a frame gets (an answer, nothing, or the end of its connection) is _exchange.py's.
"""

import asyncio
import collections
import logging
import socket
import time

from ..proxy._caps import (
    DEFAULT_FRAME_TIMEOUT,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_PENDING_BYTES,
    PeerClock,
    _positive,
    parse_address,
)
from ._apis import Apis
from ._cluster import DEFAULT_MAX_PARTITIONS, DEFAULT_OFFSETS_TOPIC_PARTITIONS, Cluster
from ._exchange import Close, answer_frame
from ._groups import GroupConfig, GroupCoordinator

log = logging.getLogger("fastkwire.broker")

FIRST_NODE_ID = 0
WATCH_INTERVAL_MAX = 1.0  # seconds between looks for overdue frames, at most
BIG_READ = 64 * 1024  # a read at least this big is held as it came, until its frame is whole


class _Connection(asyncio.Protocol):
    """One client connection: frames split in data_received, queued, answered in order."""

    def __init__(self, broker, node_id):
        self.broker = broker
        self.node_id = node_id
        self.transport = None
        self.host = ""
        self.held = []  # the pieces of a frame not yet whole, as read
        self.held_bytes = 0
        self.need = 0  # the size of that frame with its prefix, once its prefix is read
        self.consumed = 0  # stream offset of the first byte held, for error messages
        self.frames = collections.deque()
        self.queued = 0  # bytes of the frames in `frames`
        self.busy = False  # a request is being answered
        self.taking = False  # next() is taking frames (an answer given at once needs no call)
        self.closed = False
        self.paused = set()  # why reading is paused: "queue", "room", "write"
        self.write_paused = False
        self.clock = PeerClock()

    # ---- asyncio's calls

    def connection_made(self, transport):
        self.transport = transport
        broker = self.broker
        if len(broker.connections) >= broker.max_connections:
            log.warning(
                "refused a connection: %d open (limit %d: max_connections)",
                len(broker.connections),
                broker.max_connections,
            )
            self.closed = True
            transport.abort()
            return
        broker.connections.add(self)
        peer = transport.get_extra_info("peername") or ("", 0)
        self.host = str(peer[0])

    def data_received(self, data):
        if self.closed:
            return
        broker = self.broker
        data = bytes(data)  # asyncio gives bytes: no copy
        before = self.held_bytes
        if before:
            held = self.held
            if len(data) < BIG_READ:  # small reads share a bytearray: few pieces, whatever comes
                if type(held[-1]) is not bytearray:
                    held.append(bytearray())
                held[-1] += data
            else:
                held.append(data)
            self.held_bytes += len(data)
            # Part of a frame, still short of its size: its pieces are joined once, at the end.
            buf = None if self.held_bytes < self.need else b"".join(self.held)
        else:
            buf = data  # nothing held (the usual case): frames are taken from the read itself
        start = 0
        completed = 0
        if buf is not None:
            n = len(buf)
            limit = broker.max_frame_bytes
            while n - start >= 4:
                size = int.from_bytes(buf[start : start + 4], "big", signed=True)
                if size < 0 or size > limit:
                    self.end(
                        f"a request size prefix of {size} bytes at stream offset "
                        f"{self.consumed + start} (limit {limit}: max_frame_bytes): "
                        "not Kafka framing"
                    )
                    return
                end = start + 4 + size
                if end > n:
                    break
                frame = buf if start == 0 and end == n else buf[start:end]  # one copy at most
                self.frames.append(frame)
                self.queued += len(frame)
                completed += 1
                start = end
            self.held = [buf[start:] if start else buf] if start < n else []
            self.held_bytes = n - start
            self.need = 4 + size if n - start >= 4 else 0  # the held frame's whole size
            self.consumed += start
        broker.buffered += len(data)  # what this read added, now queued or held
        now = time.monotonic()
        self.clock.read(now, bool(completed), bool(self.held_bytes))
        if not self.paused:
            self.clock.reading(now)
        if self.queued > broker.max_pending_bytes:
            self.pause("queue")
        if broker.buffered > broker.max_buffered_bytes:
            if broker.buffered > 2 * broker.max_buffered_bytes:
                self.end(
                    f"{broker.buffered} bytes held for all connections (twice the limit "
                    f"{broker.max_buffered_bytes}: max_buffered_bytes)"
                )
                return
            self.pause("room")
            broker.waiting_room.append(self)
        if self.held_bytes and before == 0:
            broker.wake(partial=True)  # the watch looks for it to be overdue
        self.next()

    def eof_received(self):
        return False  # the client is done sending: close, as Kafka does

    def connection_lost(self, exc):
        self._release()

    def pause_writing(self):
        self.write_paused = True

    def resume_writing(self):
        self.write_paused = False
        self.next()

    # ---- reading

    def pause(self, reason):
        if not self.paused and not self.closed:
            self.transport.pause_reading()
            self.clock.pause(time.monotonic())
        self.paused.add(reason)

    def resume(self, reason):
        if reason not in self.paused:
            return
        self.paused.discard(reason)
        if not self.paused and not self.closed:
            self.transport.resume_reading()
            self.clock.reading(time.monotonic())

    def end(self, why):
        """Close this connection (only this one) and say why."""
        if self.closed:
            return
        log.info("closed the connection from %s: %s", self.host, why)
        self.transport.abort()
        self._release()

    def _release(self):
        if self in self.broker.connections:
            self.broker.connections.discard(self)
            if self.broker.apis is not None:
                self.broker.apis.forget(self)
        if not self.closed:
            self.closed = True
        self.broker.buffered -= self.queued + self.held_bytes
        self.queued = 0
        self.held = []
        self.held_bytes = 0
        self.frames.clear()
        self.broker.room()

    # ---- answering

    def next(self):
        """Take the next frame, unless one is being answered or the answers are not read."""
        self.taking = True
        try:
            while not self.busy and self.frames and not self.closed and not self.write_paused:
                frame = self.frames.popleft()
                self.queued -= len(frame)
                self.broker.buffered -= len(frame)
                if self.queued <= self.broker.max_pending_bytes:
                    self.resume("queue")
                self.busy = True
                self.request(frame)
        finally:
            self.taking = False
        if not self.frames:
            self.broker.room()

    def request(self, frame):
        apis = self.broker.apis
        answer_frame(apis, frame, self.node_id, self.host, self.answered, self)
        if apis.deadlines_changed:  # the watch looks again at the handlers' next deadline
            apis.deadlines_changed = False
            self.broker.wake()

    def answered(self, outcome):
        """The answer's bytes, None (nothing to send) or a Close: the next frame follows."""
        if self.closed:
            return
        if isinstance(outcome, Close):
            self.end(outcome.reason)
            return
        if type(outcome) is tuple:  # a Fetch answer's pieces, its records as the log has them
            self.transport.writelines(outcome)
        elif outcome is not None:
            self.transport.write(outcome)
        self.busy = False
        # Answered at once, inside next(): its loop takes the next frame. An answer may also
        # come from another connection's request (a Fetch that waited): then the next frame
        # is taken on the loop's next turn, not inside that request's handling.
        if not self.taking:
            asyncio.get_running_loop().call_soon(self.next)


def _group_coordinator(groups, cluster):
    if groups is None or groups is False:
        return None
    if callable(groups) and not isinstance(groups, GroupConfig):
        return groups(cluster)
    return GroupCoordinator(
        None if groups is True else groups,
        topic_partitions=cluster.partition_count,
        topics=cluster.topic_summary,
    )


class Broker:
    """A Kafka broker on asyncio: `listeners` are one (host, port) or "host:port" per node
    (port 0: a free one), node ids counting from `first_node_id`. Keyword arguments:
    `auto_create_topics` (Kafka's auto.create.topics.enable, on by default),
    `num_partitions` (of an auto-created topic), `max_partitions` (of all topics together),
    `offsets_topic_partitions` (Kafka's offsets.topic.num.partitions: __consumer_offsets'),
    `groups` (True: the group coordinator with Kafka's defaults, GroupConfig's; a
    GroupConfig; a function(cluster) making a coordinator; None: the group APIs are not
    served), and the caps above.

        broker = Broker([("127.0.0.1", 0)])
        await broker.start()
        print(broker.bootstrap_servers)
        await broker.serve_forever()
    """

    def __init__(
        self,
        listeners=(("127.0.0.1", 0),),
        *,
        first_node_id=FIRST_NODE_ID,
        auto_create_topics=True,
        num_partitions=1,
        max_partitions=DEFAULT_MAX_PARTITIONS,
        offsets_topic_partitions=DEFAULT_OFFSETS_TOPIC_PARTITIONS,
        groups=True,
        max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
        max_pending_bytes=DEFAULT_MAX_PENDING_BYTES,
        max_buffered_bytes=DEFAULT_MAX_BUFFERED_BYTES,
        max_connections=DEFAULT_MAX_CONNECTIONS,
        frame_timeout=DEFAULT_FRAME_TIMEOUT,
    ):
        if isinstance(listeners, (str, tuple)) and (
            isinstance(listeners, str) or isinstance(listeners[0], str)
        ):
            listeners = [listeners]
        self.listeners = [parse_address(a, "listeners") for a in listeners]
        if not self.listeners:
            raise ValueError("listeners: at least one HOST:PORT")
        self.first_node_id = first_node_id
        self.auto_create_topics = bool(auto_create_topics)
        self.num_partitions = _positive(num_partitions, "num_partitions")
        self.max_partitions = _positive(max_partitions, "max_partitions")
        self.offsets_topic_partitions = _positive(
            offsets_topic_partitions, "offsets_topic_partitions"
        )
        self.groups = groups
        self.max_frame_bytes = _positive(max_frame_bytes, "max_frame_bytes")
        if self.max_frame_bytes > 0x7FFFFFFF:
            raise ValueError("max_frame_bytes: a frame's int32 size cannot exceed 2147483647")
        self.max_pending_bytes = _positive(max_pending_bytes, "max_pending_bytes")
        self.max_buffered_bytes = _positive(max_buffered_bytes, "max_buffered_bytes")
        self.max_connections = _positive(max_connections, "max_connections")
        self.frame_timeout = _positive(frame_timeout, "frame_timeout", float)
        self.cluster = None
        self.apis = None
        self.connections = set()
        self.buffered = 0
        self.waiting_room = collections.deque()
        self._servers = []
        self._watch = None
        self._wake = None
        self._partial_seen = False

    @property
    def addresses(self):
        """{node id: (host, port)} of the listeners (the ports bound, once started)."""
        return dict(self.cluster.nodes)

    @property
    def bootstrap_servers(self):
        return ",".join(f"{h}:{p}" for h, p in self.cluster.nodes.values())

    async def start(self):
        loop = asyncio.get_running_loop()
        socks = []
        try:
            for host, port in self.listeners:
                family = socket.AF_INET6 if ":" in host else socket.AF_INET
                sock = socket.socket(family, socket.SOCK_STREAM)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(1024)
                sock.setblocking(False)
        except OSError:
            for s in socks:
                s.close()
            raise
        nodes = {
            self.first_node_id + i: (host, sock.getsockname()[1])
            for i, ((host, _), sock) in enumerate(zip(self.listeners, socks))
        }
        self.cluster = Cluster(
            nodes,
            auto_create_topics=self.auto_create_topics,
            num_partitions=self.num_partitions,
            max_partitions=self.max_partitions,
            offsets_topic_partitions=self.offsets_topic_partitions,
        )
        groups = _group_coordinator(self.groups, self.cluster)
        self.apis = Apis(self.cluster, groups=groups)
        for node_id, sock in zip(nodes, socks):
            server = await loop.create_server(
                lambda node_id=node_id: _Connection(self, node_id), sock=sock
            )
            self._servers.append(server)
        self._wake = asyncio.Event()
        self._watch = loop.create_task(self._watching())
        return self

    async def close(self):
        for server in self._servers:
            server.close()
        for conn in list(self.connections):
            conn.end("the broker is closing")
        if self._watch is not None:
            self._watch.cancel()
            try:
                await self._watch
            except asyncio.CancelledError:
                pass
        for server in self._servers:
            await server.wait_closed()
        self._servers = []

    async def serve_forever(self):
        await asyncio.Event().wait()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    def wake(self, partial=False):
        """The watch looks again: the handlers' deadlines may have changed, or (`partial`) a
        connection holds part of a frame."""
        if partial:
            self._partial_seen = True
        if self._wake is not None:
            self._wake.set()

    def room(self):
        """Connections that waited for room read again once the bytes held are under the cap."""
        while self.waiting_room and self.buffered <= self.max_buffered_bytes:
            self.waiting_room.popleft().resume("room")

    async def _watching(self):
        """Fires the handlers' deadlines (Fetch waits, group timers) and ends connections
        whose frame is overdue (looked for every `interval`, not at every wake-up)."""
        interval = min(self.frame_timeout / 4, WATCH_INTERVAL_MAX)
        loop = asyncio.get_running_loop()
        next_scan = None  # when to look for overdue frames; None: no partial frame known
        while True:
            deadline = self.apis.tick()
            now = time.monotonic()
            if self._partial_seen or (next_scan is not None and now >= next_scan):
                self._partial_seen = False
                partial = False
                for conn in [c for c in self.connections if c.clock.partial]:
                    partial = True
                    if conn.clock.overdue(now, self.frame_timeout):
                        conn.end(
                            f"a request frame took over {self.frame_timeout} s to arrive "
                            "(frame_timeout)"
                        )
                next_scan = now + interval if partial else None
            waits = [t - now for t in (deadline, next_scan) if t is not None]
            self._wake.clear()
            # A timer that sets the event, not wait_for: no task per wake-up (one a request).
            timer = loop.call_later(max(min(waits), 0), self._wake.set) if waits else None
            try:
                await self._wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()

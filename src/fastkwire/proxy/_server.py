"""The asyncio proxy: one upstream connection per client connection, frames forwarded byte
for byte in order, each response paired with its request by correlation id.

Each side of a connection is an asyncio protocol (`_Side`) that splits frames (the int32
size prefix, capped by `max_frame_bytes`) in `data_received`. A frame that needs nothing
but pairing goes straight to the other side's transport there and then (the header's
fixed fields are read, nothing is decoded); one that needs waiting (a fault rule, a full
pending queue, an answer whose addresses are rewritten, the SASL bookkeeping), and every
frame after it, is queued for the side's coroutine (`_requests`, `_responses`), which
deals with it in order. Requests wait for their responses in `pending` (in the order
sent; at most `max_in_flight` of them and `max_pending_bytes` of their frames, past which
the client is not read until answers come back). A fault rule may delay a response, drop
the connection, or answer in the broker's place; a local answer still goes out in its
request's turn. Observers (`on_exchange`, `on_event`) run after the frames were written,
so decoding for display never holds forwarding back.

Memory per connection is bounded by two partial frames (one each way, at most
`max_frame_bytes` each), the pending requests' frames (`max_pending_bytes`, plus the one
frame that crossed it), the frames queued for a coroutine (reading pauses past READ_SIZE
of them), and asyncio's write buffers (reading the other side pauses past 64 KiB); across
connections by `max_connections` and `max_buffered_bytes`.

Nothing slow runs on the event loop: the summary counts an exchange there, and its error
codes are read from the response's bytes by the inspector's thread (`_inspect`), handed
over in batches (one per INSPECT_BATCH_DELAY) through a bounded queue; what does not fit
in it is counted, not waited for.
"""

import asyncio
import collections
import ipaddress
import queue
import socket
import ssl
import threading
import time

from ._compiled import (
    CompiledPath,
    _detach,
    _Early,
    compiled_forwarder,
    compiled_refused,
    forward_kind,
    needs_python,
)
from ._exchange import Exchange, ProxyEvent, describe_error
from ._faults import Faults, error_answer
from ._accept import tls_handshake
from ._loop import ServerThread
from ._frames import PRODUCE, SIZE, produce_acks, request_header, response_correlation_id
from ._rewrite import (
    API_VERSIONS,
    FULL_LISTS,
    cap_versions,
    names_brokers,
    rewrite_addresses,
    rewritten,
)
from .. import REQUEST_CLASSES
from ._caps import (
    DEFAULT_FRAME_TIMEOUT,
    DEFAULT_MAX_BUFFERED_BYTES,
    DEFAULT_MAX_CONNECTIONS,
    DEFAULT_MAX_FRAME_BYTES,
    DEFAULT_MAX_PENDING_BYTES,
    MIB,
    PeerClock,
    _positive,
    parse_address,
)
from ._stats import Summary
from ..errors import DecodeError

DEFAULT_MAX_IN_FLIGHT = 1024  # clients keep about 5 in flight per connection
DEFAULT_CONNECT_TIMEOUT = 10.0
DEFAULT_MAX_BROKERS = 256  # brokers given a listener (or a port kept for them) at once
DEFAULT_BROKER_PORT_HOLD = 60.0  # seconds a broker that left keeps its port before reuse
CLOSED_PORT = 0  # told in place of a broker with no listener: nothing ever listens there
MAX_WARNED = 1024  # brokers without a listener named one by one in warnings
INSPECT_QUEUE = 10_000  # exchanges waiting for their error codes to be read
INSPECT_QUEUE_BYTES = 64 * MIB  # and their responses' bytes
INSPECT_BATCH_DELAY = 0.02  # seconds exchanges gather before the inspector reads them
READ_SIZE = 256 * 1024
WRITE_PIECE = 1 * MIB  # a larger frame is written in pieces of this size
WATCH_INTERVAL_MAX = 1.0
ROOM_POLL = 0.005  # seconds between looks at the bytes held, while clients wait for room


SASL_HANDSHAKE = 17


class _Broken(Exception):
    """A connection that cannot go on; the text says why."""


class _Side(asyncio.Protocol):
    """One side of a connection (0: the client's, 1: the upstream's). What arrives is split
    into frames in `data_received` and handed to the proxy there and then
    (`Proxy._arrived`), which forwards what needs no waiting straight to the other side's
    transport. Frames that need waiting (a fault rule, a full pending queue, an answer to
    rewrite) and everything after them go to `queue`, which the side's coroutine
    (`_requests`, `_responses`) works through in order; the end of the stream or the error
    that ends it is queued after the frames before it.

    Reading pauses for any of `holds`: the upstream not yet connected, the queue past
    READ_SIZE, the other side's write buffer full, the bytes held across connections past
    max_buffered_bytes, a broken stream."""

    __slots__ = (
        "proxy",
        "side",
        "conn",
        "listener",
        "transport",
        "buf",
        "consumed",
        "queue",
        "queued",
        "busy",
        "waiter",
        "holds",
        "write_paused",
        "drained",
        "lost",
        "ended",
    )

    def __init__(self, proxy, side, conn=None, listener=None):
        self.proxy = proxy
        self.side = side
        self.conn = conn
        self.listener = listener  # the client side's: the listener it came in on
        self.transport = None
        self.buf = bytearray()  # the start of a frame not yet whole
        self.consumed = 0  # stream offset of buf[0], for error messages
        self.queue = collections.deque()  # frames for the coroutine, then None or an error
        self.queued = 0  # bytes of the frames in it
        self.busy = False  # the coroutine works on frames: newer ones queue behind them
        self.waiter = None
        self.holds = set()
        self.write_paused = False
        self.drained = None
        self.lost = False
        self.ended = False  # the end (None or an error) is queued

    # ---- asyncio's calls

    def connection_made(self, transport):
        self.transport = transport
        if self.side == 0:
            self.hold("connect")
            # uvloop starts reading once connection_made has returned, whatever was asked
            # there: the pause is made again on the loop's next turn (one read may come
            # first, at most 256 KiB, queued like any frames that cannot go yet).
            asyncio.get_running_loop().call_soon(self._hold_again)
            self.proxy._accepted(self)

    def _hold_again(self):
        if self.holds and not self.transport.is_closing():
            self.transport.pause_reading()

    def data_received(self, data):
        proxy, conn, side = self.proxy, self.conn, self.side
        if self.buf:
            self.buf += data
            data = self.buf
        n = len(data)
        start = 0
        frames = []
        bad = None
        limit = proxy.max_frame_bytes
        whole = type(data) is bytes  # slices are copies already; a bytearray's are views
        while n - start >= 4:
            size = int.from_bytes(data[start : start + 4], "big", signed=True)
            if size < 0 or size > limit:
                name, what = ("client", "request") if side == 0 else ("upstream", "response")
                bad = _Broken(
                    f"{name} sent a {what} size prefix of {size} bytes at stream offset "
                    f"{self.consumed + start} (limit {limit}: max_frame_bytes): not Kafka framing"
                )
                break
            end = start + 4 + size
            if end > n:
                break
            frames.append(data[start:end] if whole else bytes(memoryview(data)[start:end]))
            start = end
        if bad is not None:
            self.buf = bytearray()
            self.hold("broken")
        elif start == n:
            if self.buf:
                self.buf = bytearray()  # a fresh buffer: a large frame's storage is not kept
        elif whole:
            self.buf = bytearray(data[start:] if start else data)
        elif start:
            del self.buf[:start]
        self.consumed += start
        partial = bool(self.buf)
        clock = conn.clocks[side]
        if partial or clock.partial:
            now = time.monotonic()
            clock.read(now, bool(frames), partial)
            if not self.holds:
                clock.reading(now)
        if partial or conn.held[side]:
            proxy._held(conn, side, len(self.buf))
        if frames:
            proxy._arrived(self, frames)
        if bad is not None:
            self.end(bad)
        elif proxy.buffered > proxy.max_buffered_bytes:
            proxy._over_limit(self)

    def eof_received(self):
        self.end_of_stream()

    def connection_lost(self, exc):
        self.lost = True
        if self.drained is not None and not self.drained.done():
            self.drained.set_exception(ConnectionResetError("Connection lost"))
        if exc is None:
            self.end_of_stream()
        else:
            self.end(exc)

    def pause_writing(self):
        self.write_paused = True
        self._other().hold("peer")

    def resume_writing(self):
        self.write_paused = False
        if self.drained is not None and not self.drained.done():
            self.drained.set_result(None)
        self._other().release("peer")

    # ---- the proxy's calls

    def _other(self):
        return (self.conn.uwriter if self.side == 0 else self.conn.cwriter) or _NO_SIDE

    def hold(self, reason):
        if not self.holds and self.transport is not None:
            self.transport.pause_reading()
            if self.conn is not None:
                self.conn.clocks[self.side].pause(time.monotonic())
        self.holds.add(reason)

    def release(self, reason):
        if reason not in self.holds:
            return
        self.holds.discard(reason)
        if not self.holds and not self.transport.is_closing():
            self.transport.resume_reading()
            self.conn.clocks[self.side].reading(time.monotonic())

    def push(self, frame):
        self.queue.append(frame)
        self.queued += len(frame)
        if self.queued > READ_SIZE:
            self.hold("queue")
        self._wake()

    def end(self, item):
        """Queues the end of the stream (None) or the error that ends it, once."""
        if not self.ended:
            self.ended = True
            self.queue.append(item)
            self._wake()

    def end_of_stream(self):
        if self.ended or self.conn is None:
            return
        if self.buf:
            name, what = ("client", "request") if self.side == 0 else ("upstream", "response")
            buf = self.buf
            need = (
                f"a {SIZE.unpack_from(buf, 0)[0]}-byte {what}" if len(buf) >= 4 else "a size prefix"
            )
            self.end(
                _Broken(
                    f"{name} closed mid-{what}: {len(buf)} bytes of {need} "
                    f"(stream offset {self.consumed})"
                )
            )
        else:
            self.end(None)

    def _wake(self):
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)

    async def batches(self):
        """Lists of the queued frames, in order, each taken once the one before has been
        dealt with; returns at the end of the stream, raises the error that ended it."""
        q = self.queue
        while True:
            while not q:
                self.busy = False
                self.waiter = asyncio.get_running_loop().create_future()
                try:
                    await self.waiter
                finally:
                    self.waiter = None
            self.busy = True
            frames = []
            while q and q[0] is not None and not isinstance(q[0], BaseException):
                frames.append(q.popleft())
            if frames:
                self.queued -= sum(map(len, frames))
                if self.queued <= READ_SIZE:
                    self.release("queue")
                yield frames
                continue
            item = q.popleft()
            if item is None:
                return
            raise item

    # ---- what the coroutines write with (a stream writer's calls)

    def write(self, data):
        self.transport.write(data)

    def writelines(self, data):
        self.transport.writelines(data)

    async def drain(self):
        if self.lost:
            raise ConnectionResetError("Connection lost")
        if self.write_paused:
            if self.drained is None or self.drained.done():
                self.drained = asyncio.get_running_loop().create_future()
            await self.drained

    def get_extra_info(self, name, default=None):
        return self.transport.get_extra_info(name, default)

    def close(self):
        self.transport.close()


class _NoSide:
    """The other side of a client not yet connected upstream: nothing to hold."""

    def hold(self, reason):
        pass

    def release(self, reason):
        pass


_NO_SIDE = _NoSide()


class _TlsAccept(asyncio.Protocol):
    """A TLS listener's protocol at accept: the client is counted in max_connections from
    here, and its socket goes to the handshake (`Proxy._tls_accepted`). Taken in
    connection_made, before any read (uvloop reads once after it returns otherwise)."""

    def __init__(self, proxy, listener):
        self.proxy, self.listener = proxy, listener

    def connection_made(self, transport):
        self.proxy._tls_accepted(transport, self.listener)


class _Conn:
    __slots__ = (
        "number",
        "client",
        "cwriter",
        "uwriter",
        "pending",
        "pending_bytes",
        "room",
        "clocks",
        "held",
        "broken",
        "task",
        "listener",
        "broker",
        "raw_sasl",
        "done",
        "forwarder",
        "ended",
    )

    def __init__(self, number, client, cwriter, listener):
        self.number = number
        self.client = client
        self.listener = listener  # the proxy's listener it came in on
        self.broker = f"{listener.upstream[0]}:{listener.upstream[1]}"
        self.raw_sasl = False  # after a v0 SaslHandshake: raw tokens until a request
        self.cwriter = cwriter  # the client's side (_Side), and the upstream's once connected
        self.uwriter = None
        self.pending = collections.deque()  # Exchanges awaiting their response, in order
        self.pending_bytes = 0
        self.room = asyncio.Event()
        self.room.set()
        self.clocks = (PeerClock(), PeerClock())  # (requests, responses): a partial frame's wait
        self.held = [0, 0]  # bytes of a partial frame held, by side
        self.broken = None  # why the watchdog ended it
        self.task = None
        self.done = False  # ending: nothing more is forwarded
        self.forwarder = None  # the compiled path's, once it carries the connection
        self.ended = None  # and its future: (why, kind, unanswered)

    def stop(self):
        """Nothing more is read or forwarded (a pump ended; the connection is ending)."""
        self.done = True
        for w in (self.cwriter, self.uwriter):
            if w is not None and w.transport is not None:
                w.hold("done")

    def match(self, correlation_id):
        """The pending exchange this response answers (the first forwarded one with its
        correlation id), or None."""
        for ex in self.pending:
            if not ex.local and ex.correlation_id == correlation_id:
                return ex
        return None

    def add(self, ex):
        self.pending.append(ex)
        self.pending_bytes += len(ex.request)
        return len(ex.request)

    def remove(self, ex):
        if self.pending and self.pending[0] is ex:
            self.pending.popleft()
        else:
            self.pending.remove(ex)
        self.pending_bytes -= len(ex.request)
        self.room.set()
        return len(ex.request)

    def abort(self):
        if self.forwarder is not None:
            self.forwarder.abort(self.number)
            return
        for w in (self.cwriter, self.uwriter):
            if w is not None and w.transport is not None:
                w.transport.abort()


class _Listener:
    """One of the proxy's listening sockets and the broker its connections go to."""

    __slots__ = (
        "upstream",
        "bind",
        "bound",
        "advertised",
        "server",
        "conns",
        "leaving",
        "left",
        "refused",
    )

    def __init__(self, upstream, bind, advertised):
        self.upstream = upstream  # (host, port) of the broker
        self.bind = bind  # (host, port) listened on; the port is kept once chosen
        self.bound = None  # the (ip, port) its socket is bound to
        self.advertised = advertised  # (host, port) told to clients
        self.server = None
        self.conns = 0
        self.leaving = False  # not in the cluster's last full list of brokers
        self.left = None  # when its listener closed after it left: its port is kept a while
        self.refused = None  # why it may have no listener (it is one of the proxy's own)


_LOOPBACK = {4: ipaddress.ip_address("127.0.0.1"), 6: ipaddress.ip_address("::1")}


def _ips(host):
    """The addresses `host` names without a lookup: an IP in any form the resolver takes
    for one (2130706433, 127.1, 0x7f.0.0.1, ::ffff:127.0.0.1: numeric only, no query goes
    out), or localhost's in any case and with a trailing dot; empty for any other name (the
    connection's own check catches those)."""
    if host.lower().rstrip(".") == "localhost":
        return (_LOOPBACK[4], _LOOPBACK[6])
    try:
        infos = socket.getaddrinfo(host, None, flags=socket.AI_NUMERICHOST)
    except (OSError, UnicodeError, ValueError):
        return ()
    found = {}
    for info in infos:
        ip = ipaddress.ip_address(info[4][0].partition("%")[0])
        found[getattr(ip, "ipv4_mapped", None) or ip] = None
    return tuple(found)


def _is_local(ip):
    """Whether `ip` is an address of this machine (the wildcard reaches it too)."""
    if ip.is_loopback or ip.is_unspecified:
        return True
    with socket.socket(socket.AF_INET6 if ip.version == 6 else socket.AF_INET) as s:
        try:
            s.bind((str(ip), 0))
        except OSError:
            return False
    return True


def _reached(host):
    """The addresses a connection to `host` reaches, as far as they are known without a
    lookup: connecting to the wildcard (0.0.0.0, ::) or to no host reaches the loopback."""
    return [_LOOPBACK[ip.version] if ip.is_unspecified else ip for ip in _ips(host or "localhost")]


def _names(address, bound):
    """Whether a connection to `address` (host, port) would reach the socket bound to
    `bound` (ip, port): the same port, and its IP, or any local one for a wildcard bind."""
    if address[1] != bound[1]:
        return False
    ours = _ips(bound[0] or "0.0.0.0")
    if not ours:
        return False
    if ours[0].is_unspecified:
        return any(_is_local(ip) for ip in _reached(address[0]))
    return any(ip in ours for ip in _reached(address[0]))


def _same_place(a, b):
    """Whether the addresses `a` and `b` (host, port) are one: the same port, and the same
    host name (in any case, a trailing dot or not) or IPs in common."""
    if a[1] != b[1]:
        return False
    if a[0].lower().rstrip(".") == b[0].lower().rstrip("."):
        return True
    return bool(set(_reached(a[0])) & set(_reached(b[0])))


def parse_port_range(value, param="broker_ports"):
    """(start, end) from "START-END" or a pair; ValueError naming `param`."""
    given = value
    if isinstance(value, str):
        start, sep, end = value.partition("-")
        if not sep or not start.isdigit() or not end.isdigit():
            raise ValueError(f"{param}: {value!r} is not START-END")
        value = (int(start), int(end))
    try:
        start, end = value
    except (TypeError, ValueError):
        raise ValueError(f"{param}: {value!r} is not START-END") from None
    if not (isinstance(start, int) and isinstance(end, int) and 0 < start <= end <= 65535):
        raise ValueError(f"{param}: {given!r} is not two ports with START <= END")
    return start, end


def _tls_reason(e):
    """A TLS failure in words, for a connection's line."""
    if isinstance(e, ssl.SSLCertVerificationError):
        return (
            f"TLS: the broker's certificate was refused: {e.verify_message or e.reason} "
            "(check the upstream CA file, and that the host name is in the certificate)"
        )
    return f"TLS: {e.reason or e}"


class Proxy:
    """A Kafka proxy on `listen` forwarding to `upstream` (each "host:port" or a pair).

    `on_exchange(exchange)` is called for every request once answered (or once sent, when
    no answer comes: acks=0; and for those still unanswered when the connection ends);
    `on_event(event)` for connections opening, closing and failing. `rules` (fault `Rule`s
    or their dicts; `seed` for their probabilities) and `rewrite_advertised` (put
    `advertised`, by default the listening address, into Metadata and FindCoordinator
    answers) change what goes through; nothing else is ever changed. `summary` counts every
    exchange by API.

    Several brokers: `broker_ports` ((start, end) or "START-END") and `broker_map`
    ({"broker-host:port": "local-host:port"}) give each broker the cluster names (in
    Metadata, FindCoordinator, DescribeCluster, KIP-951 node endpoints, the KRaft quorum's
    answers) a listener of its own, forwarding to that broker, and put the listeners'
    addresses into those answers. An answer naming brokers that cannot be read, or one
    answering no request, ends its connection: no client is told a broker's own address.
    A broker the cluster stops listing keeps its listener until its connections close.

    TLS: `tls` (an ssl.SSLContext for the server side) for clients, `upstream_tls` (a client
    SSLContext; its host name check applies) for the connections to brokers. Frames are
    seen decrypted; SASL passes through as it is.

    Use it in a running event loop (`async with Proxy(...) as p:`, then `p.address`), or
    from threads with `BackgroundProxy`.
    """

    def __init__(
        self,
        upstream,
        listen=("127.0.0.1", 0),
        *,
        on_exchange=None,
        on_event=None,
        rules=(),
        seed=None,
        rewrite_advertised=False,
        advertised=None,
        max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
        max_pending_bytes=DEFAULT_MAX_PENDING_BYTES,
        max_in_flight=DEFAULT_MAX_IN_FLIGHT,
        frame_timeout=DEFAULT_FRAME_TIMEOUT,
        connect_timeout=DEFAULT_CONNECT_TIMEOUT,
        max_connections=DEFAULT_MAX_CONNECTIONS,
        max_buffered_bytes=DEFAULT_MAX_BUFFERED_BYTES,
        broker_ports=None,
        broker_map=None,
        tls=None,
        upstream_tls=None,
        forward=None,
        max_brokers=DEFAULT_MAX_BROKERS,
        broker_port_hold=DEFAULT_BROKER_PORT_HOLD,
    ):
        self.upstream = parse_address(upstream, "upstream")
        self.listen = parse_address(listen, "listen")
        self.advertised = None if advertised is None else parse_address(advertised, "advertised")
        self.rewrite = bool(rewrite_advertised)
        self.broker_ports = None if broker_ports is None else parse_port_range(broker_ports)
        self.broker_map = {
            parse_address(b, "broker_map"): parse_address(local, "broker_map")
            for b, local in dict(broker_map or {}).items()
        }
        seen = {}
        for b, local in self.broker_map.items():
            other = next((o for o in seen if _same_place(o, local)), None)
            if other is not None:
                raise ValueError(
                    f"broker_map: {seen[other][0]}:{seen[other][1]} and {b[0]}:{b[1]} are both "
                    f"mapped to {local[0]}:{local[1]}: one listener forwards to one broker"
                )
            seen[local] = b
        self.mapped = self.broker_ports is not None or bool(self.broker_map)
        if self.mapped and self.rewrite:
            raise ValueError(
                "rewrite_advertised: one address for every broker, or a listener per broker "
                "(broker_ports, broker_map): not both"
            )
        for name, ctx in (("tls", tls), ("upstream_tls", upstream_tls)):
            if ctx is not None and not isinstance(ctx, ssl.SSLContext):
                raise ValueError(f"{name}: not an ssl.SSLContext: {ctx!r}")
        self.tls, self.upstream_tls = tls, upstream_tls
        if (
            (self.rewrite or self.broker_ports)
            and self.advertised is None
            and self.listen[0] in ("", "0.0.0.0", "::")
        ):
            raise ValueError(
                f"advertised: listening on {self.listen[0] or 'every address'}, the proxy "
                "cannot tell clients which address to use: give advertised"
            )
        self.max_frame_bytes = _positive(max_frame_bytes, "max_frame_bytes")
        if self.max_frame_bytes > 0x7FFFFFFF:
            raise ValueError("max_frame_bytes: a frame's int32 size cannot exceed 2147483647")
        self.max_pending_bytes = _positive(max_pending_bytes, "max_pending_bytes")
        self.max_in_flight = _positive(max_in_flight, "max_in_flight")
        self.frame_timeout = _positive(frame_timeout, "frame_timeout", float)
        self.connect_timeout = _positive(connect_timeout, "connect_timeout", float)
        self.max_connections = _positive(max_connections, "max_connections")
        self.max_buffered_bytes = _positive(max_buffered_bytes, "max_buffered_bytes")
        self.max_brokers = _positive(max_brokers, "max_brokers")
        self.broker_port_hold = _positive(broker_port_hold, "broker_port_hold", float)
        for name, f in (("on_exchange", on_exchange), ("on_event", on_event)):
            if f is not None and not callable(f):
                raise ValueError(f"{name}: not callable: {f!r}")
        self.on_exchange, self.on_event = on_exchange, on_event
        self.faults = rules if isinstance(rules, Faults) else Faults(rules, seed)
        self.forward = forward_kind(forward)
        self._forward_module, why = compiled_forwarder()
        if self.forward == "compiled" and self._forward_module is None:
            raise ValueError(f"forward: the compiled forwarding path is not available: {why}")
        # What needs Python per exchange: with any of it the asyncio path carries every
        # connection (parameter names; the CLI's banner says so when compiled was preferred).
        self.needs_python = tuple(needs_python(self))
        if forward == "compiled" and self.needs_python:  # asked for, not the variable's
            raise compiled_refused(self.needs_python)
        if self.forward == "python" or self.needs_python:
            self._forward_module = None  # every exchange needs Python: the asyncio path
        self._compiled = None  # the CompiledPath, once started
        self.summary = Summary()
        self.address = None
        self.callback_errors = []  # the first few exceptions observers raised
        self._server = None
        self._bootstrap = None
        self._brokers = {}  # upstream (host, port) -> _Listener (listening, or its port kept)
        self._by_port = {}  # port -> the (ip, port) of the brokers' listeners on it, listening
        self._gone = {}  # upstream -> _Listener of brokers whose listener closed, oldest first
        self._warned = set()  # brokers warned about as having no listener, until they get one
        self._servers = set()  # asyncio servers of the broker listeners
        self._starting = set()  # their create_server tasks, until done
        self._conns = set()
        self._handshakes = set()  # the tasks of TLS handshakes with clients under way
        self._tasks = set()  # every connection's task, from accept until it has ended
        self._closing = False  # close() began: a connection still starting forwards nothing
        self._count = 0
        self._watchdog = None
        self.buffered = 0  # bytes of frames held for all connections (partial and pending)
        self._holding = False  # clients' reads held back past max_buffered_bytes
        self._waiting_room = set()  # the client sides held for it
        self._inspect_queue = queue.SimpleQueue()  # batches of exchanges, then None
        self._inspect_batch = []  # exchanges gathering for the next batch
        self._inspect_in = [0, 0]  # exchanges and response bytes handed over (by the loop)
        self._inspect_out = [0, 0]  # and read (by the inspector's thread)
        self._inspector = None

    # ------------------------------------------------------------ life cycle

    async def start(self):
        self._bootstrap = _Listener(self.upstream, self.listen, None)
        self._server = await asyncio.get_running_loop().create_server(
            self._protocol(self._bootstrap), self.listen[0], self.listen[1]
        )
        self.address = self._server.sockets[0].getsockname()[:2]
        self._bootstrap.server = self._server
        if self.rewrite and self.advertised is None:
            self.advertised = (self.listen[0], self.address[1])
        if self.rewrite and _same_place(self.advertised, self.upstream):
            self._server.close()
            raise ValueError(
                f"advertised: {self.advertised[0]}:{self.advertised[1]} is the upstream broker's "
                "own address: every client would be told it and go around the proxy"
            )
        own = [*self._listening(), *self.broker_map.values()]
        for param, address in [("upstream", self.upstream)] + [
            ("broker_map", b) for b in self.broker_map
        ]:
            loop = next((a for a in own if _names(address, a)), None)
            if loop is not None:
                self._server.close()
                raise ValueError(
                    f"{param}: {address[0]}:{address[1]} is the proxy's own listening address "
                    f"{loop[0]}:{loop[1]}: it would forward to itself"
                )
        for broker, local in self.broker_map.items():  # fixed ports listen from the start
            self._listener_for(broker)
        self._watchdog = asyncio.create_task(self._watch())
        if self._forward_module is not None:
            self._compiled = CompiledPath(self, self._forward_module)
        self._inspector = threading.Thread(
            target=self._inspect, name="fastkwire-proxy-inspector", daemon=True
        )
        self._inspector.start()
        return self

    async def close(self):
        """Stops listening and ends every connection."""
        self._closing = True
        if self._server is not None:
            self._server.close()
        for task in list(self._starting) + list(self._handshakes):
            task.cancel()
        for lst in self._brokers.values():
            lst.server = None  # a listener still starting closes itself
        for server in list(self._servers):
            server.close()
        if self._compiled is not None:  # its connections end, and are told, first
            await self._compiled.close()
        for conn in list(self._conns):
            conn.abort()
        # Every connection's task, those accepted but not yet started included: each one
        # tells its observers of its last exchanges before the loop is gone.
        tasks = list(self._tasks)
        if tasks:
            await asyncio.wait(tasks, timeout=5)
        if self._watchdog is not None:
            self._watchdog.cancel()
        if self._server is not None:
            await self._server.wait_closed()
        for server in list(self._servers):
            await server.wait_closed()
        self._servers.clear()
        if self._inspector is not None:  # the summary is complete once it has caught up
            self._hand_over()
            self._inspect_queue.put(None)
            await asyncio.get_running_loop().run_in_executor(None, self._inspector.join, 10)
            self._inspector = None

    async def serve_forever(self):
        if self._server is None:
            await self.start()
        await self._server.serve_forever()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    @property
    def compiled(self):
        """Whether connections go through the compiled forwarding path."""
        return self._forward_module is not None

    def flush(self):
        """Tells the observers now of what the compiled path has forwarded (on the loop)."""
        if self._compiled is not None:
            self._compiled.drain()

    @property
    def requests_in_flight(self):
        """Requests forwarded and awaiting their answers, on all connections."""
        n = sum(len(c.pending) for c in self._conns)
        return n + (self._compiled.forwarder.in_flight if self._compiled is not None else 0)

    @property
    def connections(self):
        """Client connections open now."""
        return len(self._conns)

    @property
    def brokers(self):
        """{broker "host:port": the "host:port" clients are told} for every mapped broker
        listening now."""
        return {
            f"{b[0]}:{b[1]}": f"{lst.advertised[0]}:{lst.advertised[1]}"
            for b, lst in self._brokers.items()
            if lst.server is not None
        }

    # ------------------------------------------------------------ brokers' listeners

    def _listening(self, port=None):
        """The (ip, port) of every socket the proxy listens on (on `port`, if given)."""
        found = [sock.getsockname()[:2] for sock in self._server.sockets]
        if port is None:
            return found + [a for bound in self._by_port.values() for a in bound]
        return [a for a in found if a[1] == port] + self._by_port.get(port, [])

    def _own_address(self, address):
        """The proxy's listening address that `address` reaches, or None (only the sockets
        on its port are compared: an answer may name thousands of brokers)."""
        return next((a for a in self._listening(address[1]) if _names(address, a)), None)

    def _listener_for(self, broker):
        """The advertised address of `broker`'s listener, opening it if needed (the socket
        listens at once; connections wait in its backlog until the server takes them), or,
        when it can have none, an address where nothing listens (a warning says why)."""
        lst = self._brokers.get(broker)
        if lst is not None and lst.server is not None:
            lst.leaving = False
            return lst.advertised
        if lst is not None and lst.refused:
            return self._closed_door(broker, lst.refused)
        if lst is None and len(self._brokers) >= self.max_brokers:
            self._reclaim(self.max_brokers - 1)
            if len(self._brokers) >= self.max_brokers:  # first: a few steps per broker
                return self._closed_door(
                    broker,
                    f"the proxy already has {len(self._brokers)} brokers' listeners or kept "
                    f"ports (limit {self.max_brokers}: max_brokers)",
                )
        own = self._own_address(broker)
        if own is not None:
            return self._closed_door(
                broker,
                f"it is the proxy's own listener {own[0]}:{own[1]}, and no listener forwards "
                "to another of its own",
            )
        if self.broker_ports and self.broker_ports[0] <= broker[1] <= self.broker_ports[1]:
            if _names(broker, (self.listen[0], broker[1])):
                return self._closed_door(
                    broker,
                    f"it would be the proxy's own listener {self.listen[0]}:{broker[1]}, and no "
                    "listener forwards to another of its own",
                )
        if lst is None:
            lst = _Listener(broker, self.broker_map.get(broker), None)
            self._brokers[broker] = lst
        lst.leaving, lst.left = False, None
        self._gone.pop(broker, None)
        sock = self._bind(lst)
        if isinstance(sock, str) and broker not in self.broker_map and lst.bind is not None:
            lst.bind = None  # the port it had is taken meanwhile: another one
            sock = self._bind(lst)
        if isinstance(sock, str):
            if lst.bind is None:
                del self._brokers[broker]
            return self._closed_door(broker, sock)
        port = sock.getsockname()[1]
        lst.bound = sock.getsockname()[:2]
        self._by_port.setdefault(port, []).append(lst.bound)
        lst.bind = (lst.bind[0], port)
        host = lst.bind[0] if broker in self.broker_map else (self.advertised or self.listen)[0]
        if host in ("", "0.0.0.0", "::"):
            host = (self.advertised or ("127.0.0.1",))[0]
        lst.advertised = (host, port)
        lst.server = True  # listening; the asyncio server follows
        task = asyncio.get_running_loop().create_task(self._serve_listener(lst, sock))
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)
        self._warned.discard(broker)
        self._event_text(f"broker {broker[0]}:{broker[1]} mapped to {host}:{port}")
        return lst.advertised

    def _closed_door(self, broker, why):
        """What clients are told in place of a broker with no listener: the proxy's host and
        a port nothing listens on, so that no client ever goes around the proxy. One warning
        per broker (until it gets a listener), counted in the summary."""
        host = (self.advertised or self.listen)[0]
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        if broker not in self._warned and len(self._warned) < MAX_WARNED:
            self._warned.add(broker)
            self.summary.add_note("brokers withheld from clients (no listener)")
            self._event_text(
                f"broker {broker[0]}:{broker[1]} has no listener: {why}; clients are told "
                f"{host}:{CLOSED_PORT} in its place, where nothing listens (the proxy fails "
                "closed: no client is told a broker's own address)"
                + (
                    "; further brokers without a listener are not named one by one"
                    if len(self._warned) == MAX_WARNED
                    else ""
                ),
                ProxyEvent.ERROR,
            )
        return host, CLOSED_PORT

    def _bind(self, lst):
        """A listening socket for `lst`, or why there is none (text)."""
        tried = []
        candidates = (
            [lst.bind]
            if lst.bind is not None
            else ((self.listen[0], p) for p in self._free_ports())
        )
        named = {}  # port -> the brokers' addresses with that port
        for b in self._brokers:
            named.setdefault(b[1], []).append(b)
        told = (self.advertised or self.listen)[0]  # the host clients are told, with the port
        for bind in candidates:
            if lst.bind is None and any(
                _names(b, bind) or _same_place(b, (told, bind[1])) for b in named.get(bind[1], ())
            ):
                # A broker's own address: its listener would forward to itself, or clients
                # would be told that broker's own address.
                continue
            sock = socket.socket(socket.AF_INET6 if ":" in bind[0] else socket.AF_INET)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(bind)
                sock.listen(128)
                sock.setblocking(False)
            except OSError as e:
                sock.close()
                tried.append(f"{bind[0]}:{bind[1]}: {e.strerror or e}")
                if lst.bind is not None:
                    break
                continue
            lst.bind = bind
            return sock
        if lst.bind is not None:
            return f"--map {lst.bind[0]}:{lst.bind[1]} ({tried[-1] if tried else 'cannot listen'})"
        if self.broker_ports:
            return (
                f"no free port left in broker_ports {self.broker_ports[0]}-{self.broker_ports[1]}"
            )
        return "not in broker_map, and no broker_ports"

    def _free_ports(self):
        """The ports of broker_ports no broker has, lowest first; then those of brokers that
        left at least broker_port_hold ago, the longest gone first (they lose them)."""
        if self.broker_ports is None:
            return
        taken = {lst.bind[1] for lst in self._brokers.values() if lst.bind is not None}
        for port in range(self.broker_ports[0], self.broker_ports[1] + 1):
            if port not in taken:
                yield port
        while (lst := self._forget_oldest_gone()) is not None:
            if lst.bind is not None and self.broker_ports[0] <= lst.bind[1] <= self.broker_ports[1]:
                yield lst.bind[1]

    def _forget_oldest_gone(self):
        """The broker that left longest ago, forgotten (its port goes to another) if it left
        at least broker_port_hold ago; else None. The first of `_gone`: a step, not a scan."""
        lst = next(iter(self._gone.values()), None)
        if lst is None or time.monotonic() - lst.left < self.broker_port_hold:
            return None
        del self._gone[lst.upstream], self._brokers[lst.upstream]
        return lst

    def _reclaim(self, keep):
        """Forgets brokers that left long enough ago until at most `keep` are known."""
        while len(self._brokers) > keep and self._forget_oldest_gone() is not None:
            pass

    async def _serve_listener(self, lst, sock):
        try:
            server = await asyncio.get_running_loop().create_server(self._protocol(lst), sock=sock)
        except BaseException:
            sock.close()
            raise
        if lst.server is True:
            lst.server = server
            self._servers.add(server)
        else:  # closed before it started
            server.close()

    def _brokers_listed(self, named):
        """A full list of the cluster's brokers came: those no longer in it are leaving, and
        close their listener once their last connection has."""
        named = set(named)
        for broker, lst in self._brokers.items():
            if broker not in named and broker not in self.broker_map and lst.server is not None:
                lst.leaving = True
                if not lst.conns:
                    self._close_listener(lst)

    def _close_listener(self, lst, why=None):
        server, lst.server = lst.server, None
        lst.left = time.monotonic()
        self._gone.pop(lst.upstream, None)
        self._gone[lst.upstream] = lst  # the last to leave, last
        bound = self._by_port.get(lst.bound[1], [])
        if lst.bound in bound:
            bound.remove(lst.bound)
            if not bound:
                del self._by_port[lst.bound[1]]
        if server is not True and server is not None:
            server.close()
            self._servers.discard(server)
        b, a = lst.upstream, lst.advertised
        if why is not None:
            self._event_text(
                f"broker {b[0]}:{b[1]}: listener {a[0]}:{a[1]} closed: {why}", ProxyEvent.ERROR
            )
            return
        self._event_text(
            f"broker {b[0]}:{b[1]} left the cluster: listener {a[0]}:{a[1]} closed (the port "
            f"is kept for it {self.broker_port_hold:g} s: broker_port_hold)"
        )

    def _map(self, address):
        return self._listener_for(address)

    def _event_text(self, text, kind=ProxyEvent.OPEN):
        """An event of the proxy itself (conn 0), for the connection lines."""
        if self.on_event is None:
            return
        try:
            self.on_event(ProxyEvent(kind, 0, "proxy", text))
        except Exception as e:  # noqa: BLE001
            self._observer_failed(e)

    # ------------------------------------------------------------ observers

    def _emit(self, ex):
        self.summary.add_forwarded(ex)
        self._to_inspect(ex)
        try:
            if self.on_exchange is not None:
                self.on_exchange(ex)
        except Exception as e:  # noqa: BLE001 - an observer's bug must not end the connection
            self._observer_failed(e)

    def _to_inspect(self, ex):
        """Keeps the response for the inspector's thread, which reads its error codes: the
        exchanges of INSPECT_BATCH_DELAY go over together (one wake-up of that thread per
        batch). Past INSPECT_QUEUE of them, or INSPECT_QUEUE_BYTES of their responses,
        waiting to be read, the summary counts it as not inspected."""
        response = ex.response
        if not response:
            return
        size = len(response)
        if (
            self._inspector is None
            or self._inspect_in[0] - self._inspect_out[0] >= INSPECT_QUEUE
            or self._inspect_in[1] - self._inspect_out[1] + size > INSPECT_QUEUE_BYTES
        ):
            self.summary.not_inspected(ex.api)
            return
        counts = self._inspect_in  # the loop's counts; the thread keeps its own (_inspect_out)
        counts[0] += 1
        counts[1] += size
        batch = self._inspect_batch
        if not batch:
            asyncio.get_running_loop().call_later(INSPECT_BATCH_DELAY, self._hand_over)
        batch.append(ex)

    def _hand_over(self):
        if self._inspect_batch:
            batch, self._inspect_batch = self._inspect_batch, []
            self._inspect_queue.put(batch)

    def _inspect(self):
        """The inspector's thread: the error codes of each response, for the summary."""
        while True:
            batch = self._inspect_queue.get()
            if batch is None:
                return
            found, size = [], 0
            for ex in batch:
                try:
                    names = ex.error_codes()
                except Exception as e:  # noqa: BLE001 - a bug here must not stop the summary
                    names = []
                    self._observer_failed(e)
                size += len(ex.response)
                if names:
                    found.append((ex.api, names))
            with self.summary.lock:
                for api, names in found:
                    self.summary.add_errors(api, names)
            out = self._inspect_out
            out[0] += len(batch)
            out[1] += size

    def _event(self, kind, conn, text, frame=None, from_client=None):
        if self.on_event is None:
            return
        try:
            self.on_event(ProxyEvent(kind, conn.number, conn.client, text, frame, from_client))
        except Exception as e:  # noqa: BLE001
            self._observer_failed(e)

    def _observer_failed(self, e):
        if len(self.callback_errors) < 10:
            self.callback_errors.append(e)

    # ------------------------------------------------------------ connections

    def _protocol(self, listener):
        """The protocol factory of a listener's server."""
        if self.tls is not None:
            return lambda: _TlsAccept(self, listener)
        return lambda: _Side(self, 0, listener=listener)

    def _tls_accepted(self, transport, listener):
        """A client of a TLS listener was accepted: refused past max_connections (its
        handshake counts), else its handshake starts, bounded by connect_timeout."""
        peer = transport.get_extra_info("peername") or ("?", 0)
        if len(self._conns) + len(self._handshakes) >= self.max_connections:
            transport.abort()
            self._event_text(
                f"refused {peer[0]}:{peer[1]}: {len(self._conns) + len(self._handshakes)} "
                f"connections open (limit {self.max_connections}: max_connections)",
                ProxyEvent.ERROR,
            )
            return
        try:
            fd = _detach(transport)
        except OSError as e:  # out of file descriptors: the client is not left open, uncounted
            transport.abort()
            self._event_text(
                f"client {peer[0]}:{peer[1]}: TLS handshake not started: {e.strerror or e}",
                ProxyEvent.ERROR,
            )
            return
        task = asyncio.get_running_loop().create_task(self._tls_handshake(fd, listener, peer))
        self._handshakes.add(task)
        task.add_done_callback(self._handshakes.discard)

    async def _tls_handshake(self, fd, listener, peer):
        try:
            await tls_handshake(
                fd, lambda: _Side(self, 0, listener=listener), self.tls, self.connect_timeout
            )
        except (OSError, asyncio.TimeoutError) as e:
            self._event_text(
                f"client {peer[0]}:{peer[1]}: TLS handshake: {self._connect_failure(e)}",
                ProxyEvent.ERROR,
            )

    def _accepted(self, side):
        """A client connected (its side's connection_made): its connection's task starts."""
        self._count += 1
        peer = side.transport.get_extra_info("peername") or ("?", 0)
        conn = _Conn(self._count, f"{peer[0]}:{peer[1]}", side, side.listener)
        side.conn = conn
        conn.task = asyncio.get_running_loop().create_task(self._handle(conn))
        self._tasks.add(conn.task)
        conn.task.add_done_callback(self._tasks.discard)

    async def _handle(self, conn):
        listener = conn.listener
        if self._closing:  # accepted as the proxy began to close
            conn.cwriter.transport.abort()
            return
        if len(self._conns) >= self.max_connections:
            conn.cwriter.transport.abort()
            self._event(
                ProxyEvent.ERROR,
                conn,
                f"refused: {len(self._conns)} connections open "
                f"(limit {self.max_connections}: max_connections)",
            )
            return
        self._conns.add(conn)
        listener.conns += 1
        self._event(ProxyEvent.OPEN, conn, f"connected, for {conn.broker}")
        why, kind = "closed", ProxyEvent.CLOSE
        upstream = listener.upstream
        try:
            try:
                _, conn.uwriter = await asyncio.wait_for(
                    asyncio.get_running_loop().create_connection(
                        _Early if self._compiled is not None else lambda: _Side(self, 1, conn),
                        *upstream,
                        ssl=self.upstream_tls,
                        server_hostname=upstream[0] if self.upstream_tls else None,
                    ),
                    self.connect_timeout,
                )
            except (OSError, asyncio.TimeoutError) as e:
                reason = self._connect_failure(e)
                why, kind = f"upstream {upstream[0]}:{upstream[1]}: {reason}", ProxyEvent.ERROR
                return
            if self._closing:  # nothing is forwarded once close() has begun
                why = "proxy closing"
                return
            peer = conn.uwriter.get_extra_info("peername")
            own = None if peer is None else self._own_address(peer[:2])
            if own is not None:
                # A name that resolved to one of the proxy's own listeners: a loop.
                why = (
                    f"upstream {upstream[0]}:{upstream[1]} is the proxy's own listener "
                    f"{own[0]}:{own[1]}: refused, no listener forwards to another of its own"
                )
                kind = ProxyEvent.ERROR
                self.summary.add_note("connections refused: their upstream is the proxy itself")
                if listener is not self._bootstrap and listener.server is not None:
                    listener.refused = f"it reached the proxy's own listener {own[0]}:{own[1]}"
                    self._close_listener(listener, listener.refused)
                return
            local = conn.uwriter.get_extra_info("sockname") or ("?", 0)
            self._event(
                ProxyEvent.OPEN,
                conn,
                f"upstream {upstream[0]}:{upstream[1]} connected from {local[0]}:{local[1]}"
                + (" over TLS" if self.upstream_tls else ""),
            )
            if self._compiled is not None:
                end = conn.cwriter.queue[-1] if conn.cwriter.ended else None
                if isinstance(end, BaseException):  # broken before its upstream was connected
                    why, kind = describe_end(end, "client"), ProxyEvent.ERROR
                    conn.abort()
                    return
                upstream_side, conn.uwriter = conn.uwriter, None
                why, kind, unanswered = await self._compiled.carry(conn, upstream_side)
                if unanswered:
                    why += f"; {unanswered} request{'s' if unanswered != 1 else ''} unanswered"
                return
            conn.cwriter.release("connect")
            pumps = [
                asyncio.create_task(self._requests(conn)),
                asyncio.create_task(self._responses(conn)),
            ]
            done, rest = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            first = done.pop()
            for t in rest:
                t.cancel()
            await asyncio.gather(*rest, return_exceptions=True)
            if first.cancelled():
                why, kind = "proxy closing", ProxyEvent.CLOSE
            else:
                exc = first.exception()
                if exc is None:
                    why = first.result()
                elif isinstance(exc, ConnectionResetError) and (
                    first is pumps[0] or (conn.cwriter is not None and conn.cwriter.lost)
                ):
                    # How many clients close (with an answer still unread, or one being
                    # written to them: the answers' pump finds the client gone): not an
                    # error, unless a request was cut short by it.
                    why = "client reset the connection"
                    if conn.held[0]:
                        why += f" mid-request ({conn.held[0]} bytes of it received)"
                        kind = ProxyEvent.ERROR
                else:
                    why = describe_end(exc, "client" if first is pumps[0] else "upstream")
                    kind = ProxyEvent.ERROR
            if conn.broken:
                why, kind = conn.broken, ProxyEvent.ERROR
        except asyncio.CancelledError:
            why = "proxy closing"
        finally:
            unanswered = list(conn.pending)
            conn.pending.clear()
            self.buffered -= conn.pending_bytes + conn.held[0] + conn.held[1]
            conn.pending_bytes = conn.held[0] = conn.held[1] = 0
            if unanswered:
                why += (
                    f"; {len(unanswered)} request{'s' if len(unanswered) != 1 else ''} unanswered"
                )
            for ex in unanswered:
                self._emit(ex)
            if conn.forwarder is not None:
                pass  # the forwarding thread closed both sockets
            elif kind == ProxyEvent.ERROR:
                conn.abort()
            else:
                for w in (conn.cwriter, conn.uwriter):
                    if w is not None and w.transport is not None:
                        w.close()
            self._conns.discard(conn)
            listener.conns -= 1
            if listener.leaving and not listener.conns and listener.server is not None:
                self._close_listener(listener)
            self._event(kind, conn, why)

    def _connect_failure(self, e):
        """Why a connection to a broker failed, in words. wait_for's TimeoutError is an
        OSError on 3.11+ but has no strerror: it is the proxy's own connect_timeout."""
        if isinstance(e, ssl.SSLError):
            return _tls_reason(e)
        if isinstance(e, OSError) and e.strerror:
            return e.strerror
        if isinstance(e, (TimeoutError, asyncio.TimeoutError)):
            return f"timed out after {self.connect_timeout:g} s (connect_timeout)"
        return str(e) or type(e).__name__

    # ------------------------------------------------------------ forwarding

    def _arrived(self, side, frames):
        """Frames that just arrived on `side`: those that need no waiting are forwarded now,
        in `data_received`; from the first that does, they queue for the side's coroutine
        (and so do all while it has some)."""
        conn = side.conn
        if conn.done:
            return
        if not (side.busy or side.queue):
            done = (
                self._fast_requests(conn, frames)
                if side.side == 0
                else self._fast_responses(conn, frames)
            )
            if done == len(frames):
                return
            frames = frames[done:]
        for frame in frames:
            side.push(frame)

    def _fast_requests(self, conn, frames):
        """Forwards the leading requests that need nothing but pairing (no fault rules, no
        raw SASL tokens, room in the pending queue, a readable header, small enough to write
        in one piece); how many."""
        if self.faults or conn.raw_sasl or conn.uwriter is None:
            return 0
        sent = []
        count = 0
        for frame in frames:
            if (
                conn.pending_bytes > self.max_pending_bytes
                or len(conn.pending) >= self.max_in_flight
                or len(frame) > WRITE_PIECE
            ):
                break
            header = request_header(frame)
            if header is None:
                break
            ex = Exchange(
                conn.number,
                conn.client,
                header,
                frame,
                header.api_key != PRODUCE or produce_acks(frame, header) != 0,
                conn.broker,
            )
            if ex.expects_response:
                self.buffered += conn.add(ex)
            else:
                sent.append(ex)
            count += 1
        if count:
            transport = conn.uwriter.transport
            if count == 1:
                transport.write(frames[0])
            else:
                transport.writelines(frames[:count])
            if sent:
                now = time.monotonic()
                for ex in sent:
                    ex.finished = now
                    self._emit(ex)
        return count

    def _fast_responses(self, conn, frames):
        """Forwards the leading responses that answer a request in flight and need no
        rule, no rewriting and no SASL bookkeeping; how many."""
        out, done = [], []
        count = 0
        rewrite = self.rewrite or self.mapped
        for frame in frames:
            if len(frame) > WRITE_PIECE or len(frame) < 8:
                break
            ex = conn.match(int.from_bytes(frame[4:8], "big", signed=True))
            if (
                ex is None
                or ex.delay_ms
                or ex.api_key == SASL_HANDSHAKE
                or (rewrite and rewritten(ex.api_key, ex.api_version))
            ):
                break
            self._answered(conn, ex, frame, out, done)
            count += 1
        if out:
            transport = conn.cwriter.transport
            if len(out) == 1:
                transport.write(out[0])
            else:
                transport.writelines(out)
            now = time.monotonic()
            for ex in done:
                if ex.finished is None:
                    ex.finished = now
                self._emit(ex)
        return count

    def _answered(self, conn, ex, frame, out, done):
        """`frame` answers `ex`: both go out, and after them the local answers whose
        turn has come (they wait behind the upstream's answers, in order)."""
        out.append(frame)
        ex.response = frame
        self.buffered -= conn.remove(ex)
        done.append(ex)
        while conn.pending and conn.pending[0].local:
            lx = conn.pending[0]
            self.buffered -= conn.remove(lx)
            out.append(lx.response)
            done.append(lx)

    def _over_limit(self, side):
        """The frames held for all connections are past max_buffered_bytes after a read on
        `side`: a frame under way may finish (waiting, it would never drain), up to twice
        the limit; between frames, a client is not read until answers drain."""
        conn = side.conn
        if conn.held[side.side]:
            if self.buffered > 2 * self.max_buffered_bytes:
                what = ("request", "response")[side.side]
                side.hold("broken")
                side.end(
                    _Broken(
                        f"the proxy holds {self.buffered} bytes of frames for its connections "
                        f"(twice the limit {self.max_buffered_bytes}: max_buffered_bytes): "
                        f"closing the connection whose {what} crossed it"
                    )
                )
            return
        if side.side != 0:
            return
        if not self._holding:
            self._holding = True
            self._event(
                ProxyEvent.ERROR,
                conn,
                f"the proxy holds {self.buffered} bytes of frames for its connections "
                f"(limit {self.max_buffered_bytes}: max_buffered_bytes): clients are not read "
                "until answers drain",
            )
            asyncio.get_running_loop().call_later(ROOM_POLL, self._check_room)
        side.hold("room")
        self._waiting_room.add(side)

    def _check_room(self):
        """While clients wait for room: reads them again once answers have drained."""
        if self.buffered > self.max_buffered_bytes and self._waiting_room:
            asyncio.get_running_loop().call_later(ROOM_POLL, self._check_room)
            return
        self._holding = False
        waiting, self._waiting_room = self._waiting_room, set()
        for side in waiting:
            side.release("room")

    def _held(self, conn, side, size):
        self.buffered += size - conn.held[side]
        conn.held[side] = size

    async def _requests(self, conn):
        try:
            return await self._forward_requests(conn)
        finally:
            conn.stop()  # at once: no answer may slip through before the connection ends

    async def _responses(self, conn):
        try:
            return await self._forward_responses(conn)
        finally:
            conn.stop()

    async def _forward_requests(self, conn):
        upstream = conn.uwriter
        async for frames in conn.cwriter.batches():
            # Frames that arrived together go out together (one write); a fault that must
            # act in order flushes the ones before it first.
            out, sent = [], []
            for frame in frames:
                if (
                    conn.pending_bytes > self.max_pending_bytes
                    or len(conn.pending) >= self.max_in_flight
                ):
                    # Full: what is read waits here (at most one read's worth) for answers.
                    await self._forward(upstream, out, sent)
                    while (
                        conn.pending_bytes > self.max_pending_bytes
                        or len(conn.pending) >= self.max_in_flight
                    ):
                        conn.room.clear()
                        await conn.room.wait()
                header = request_header(frame)
                if conn.raw_sasl and not _looks_like_request(header):
                    # A raw SASL token after a v0 handshake: forwarded as it is, not paired.
                    self._event(ProxyEvent.TOKEN, conn, "SASL token", frame, True)
                    out.append(frame)
                    continue
                conn.raw_sasl = False
                if header is None:
                    self._event(
                        ProxyEvent.ERROR,
                        conn,
                        f"request frame of {len(frame)} bytes is too short for "
                        "a request header (12 bytes): forwarded as it is",
                        frame,
                        True,
                    )
                    out.append(frame)
                    continue
                ex = Exchange(
                    conn.number,
                    conn.client,
                    header,
                    frame,
                    produce_acks(frame, header) != 0,
                    conn.broker,
                )
                rule = self.faults.pick(header) if self.faults else None
                if rule is not None:
                    ex.fault = rule.name
                    if rule.disconnect == "before":
                        await self._forward(upstream, out, sent)
                        self._emit(ex)
                        raise _Broken(
                            f"fault {rule.name!r}: disconnected before forwarding "
                            f"{ex.api} v{ex.api_version} correlation id {ex.correlation_id}"
                        )
                    if rule.error_code is not None and self._answer_locally(conn, ex, rule):
                        continue
                    ex.delay_ms = rule.delay_ms
                if ex.expects_response:
                    self.buffered += conn.add(ex)
                else:
                    sent.append(ex)
                out.append(frame)
                if rule is not None and rule.disconnect == "after":
                    await self._forward(upstream, out, sent)
                    raise _Broken(
                        f"fault {rule.name!r}: disconnected after forwarding "
                        f"{ex.api} v{ex.api_version} correlation id {ex.correlation_id}"
                    )
            await self._forward(upstream, out, sent)
            if conn.cwriter.transport.get_write_buffer_size():
                await conn.cwriter.drain()  # local answers
            while (
                conn.pending_bytes > self.max_pending_bytes
                or len(conn.pending) >= self.max_in_flight
            ):
                conn.room.clear()
                await conn.room.wait()
        return "client closed"

    def _answer_locally(self, conn, ex, rule):
        """Answers with the rule's error in the broker's place: True, or False (with an event)
        when the response cannot carry it, and the request is forwarded instead."""
        try:
            answer = error_answer(ex, rule.error_code)
        except (ValueError, DecodeError) as e:
            self._event(
                ProxyEvent.ERROR,
                conn,
                f"fault {rule.name!r} cannot answer: {describe_error(e)}; forwarded instead",
            )
            ex.fault = None
            return False
        ex.local = True
        ex.response = answer
        if conn.pending:  # answered in its turn, after the requests before it
            self.buffered += conn.add(ex)
        else:
            conn.cwriter.write(answer)
            ex.finished = time.monotonic()
            self._emit(ex)
        return True

    async def _forward(self, writer, out, done):
        """Writes `out` in one go (a large frame in pieces, each after the one before has
        gone, so that asyncio never copies it whole), then tells the observers of `done`;
        waits while the writer's buffer is full."""
        if out:
            if sum(map(len, out)) <= WRITE_PIECE:
                writer.writelines(out) if len(out) > 1 else writer.write(out[0])
            else:
                for frame in out:
                    view = memoryview(frame)
                    for i in range(0, len(view), WRITE_PIECE):
                        writer.write(view[i : i + WRITE_PIECE])
                        if len(view) > WRITE_PIECE:
                            await writer.drain()
            now = time.monotonic()
            for ex in done:
                if ex.finished is None:
                    ex.finished = now
                self._emit(ex)
            out.clear()
            done.clear()
        await writer.drain()

    async def _forward_responses(self, conn):
        client = conn.cwriter
        async for frames in conn.uwriter.batches():
            out, done = [], []
            for frame in frames:
                cid = response_correlation_id(frame)
                ex = conn.match(cid)
                if ex is None and conn.raw_sasl:
                    self._event(ProxyEvent.TOKEN, conn, "SASL token", frame, False)
                    out.append(frame)
                    continue
                if ex is None and (self.rewrite or self.mapped):
                    # What it names cannot be known without its request: never forwarded
                    # unread by a proxy that keeps clients on itself (it fails closed). The
                    # event carries the frame, for the capture files.
                    await self._forward(client, out, done)
                    what = (
                        f"response frame of {len(frame)} bytes is too short for a correlation id"
                        if cid is None
                        else f"response with correlation id {cid} answers no request in flight"
                    )
                    self._event(
                        ProxyEvent.ERROR,
                        conn,
                        f"{what}: not forwarded, as the proxy cannot tell whether it names brokers",
                        frame,
                        False,
                    )
                    raise _Broken(f"upstream: {what}: the connection ends (the proxy fails closed)")
                if ex is None:
                    out.append(frame)
                    self._event(
                        ProxyEvent.ERROR,
                        conn,
                        f"response frame of {len(frame)} bytes is too short for a correlation id"
                        if cid is None
                        else f"response with correlation id {cid} answers no request "
                        "in flight: forwarded as it is",
                        frame,
                        False,
                    )
                    continue
                if ex.delay_ms:  # a delay rule holds the broker's answer (and those after it)
                    await self._forward(client, out, done)
                    await asyncio.sleep(ex.delay_ms / 1000)
                if ex.api_key == SASL_HANDSHAKE and ex.api_version == 0 and _no_error(frame):
                    conn.raw_sasl = True  # the tokens follow without Kafka headers
                if (self.rewrite or self.mapped) and ex.api_key == API_VERSIONS:
                    new = cap_versions(frame, ex.api_version)
                    if new is not frame:
                        ex.upstream_response, frame = frame, new
                elif (self.rewrite or self.mapped) and names_brokers(ex.api_key, ex.api_version):
                    try:
                        new, named = rewrite_addresses(
                            frame,
                            ex.api_key,
                            ex.api_version,
                            self._map if self.mapped else self._advertise,
                            self.max_frame_bytes,  # clients are sent no larger frame
                        )
                        if self.mapped and ex.api_key in FULL_LISTS:
                            self._brokers_listed(named)
                    except (DecodeError, ValueError) as e:
                        # Its brokers' addresses cannot be replaced: never forwarded as it
                        # came (a client would be told them; the proxy fails closed).
                        await self._forward(client, out, done)
                        raise _Broken(
                            f"{ex.api} v{ex.api_version} response does not decode: the "
                            "connection ends, as an answer naming brokers is never forwarded "
                            f"with their own addresses: {describe_error(e)}"
                        ) from None
                    if new is not frame:
                        ex.upstream_response, frame = frame, new
                self._answered(conn, ex, frame, out, done)
            await self._forward(client, out, done)
        return "upstream closed"

    def _advertise(self, _address):
        return self.advertised

    async def _watch(self):
        """Ends connections on which a frame has been arriving for longer than frame_timeout."""
        interval = min(WATCH_INTERVAL_MAX, self.frame_timeout / 4)
        while True:
            await asyncio.sleep(interval)
            now = time.monotonic()
            for conn in list(self._conns):
                for side, clock in enumerate(conn.clocks):
                    if conn.broken is None and clock.overdue(now, self.frame_timeout):
                        name = ("client", "upstream")[side]
                        conn.broken = (
                            f"{name} sent part of a frame and did not finish it within "
                            f"{self.frame_timeout:g} s (frame_timeout): closing"
                        )
                        conn.abort()


def describe_end(exc, side):
    """A connection's line for the exception that ended it on `side`."""
    if isinstance(exc, _Broken):
        return str(exc)
    if isinstance(exc, OSError):
        return f"{side}: {exc.strerror or exc!r}"
    return f"internal error: {type(exc).__name__}: {exc}"  # a bug: still one connection only


def _looks_like_request(header):
    """Whether a frame's first bytes read as a request header of a known API and version
    (what ends the raw SASL tokens of a v0 handshake)."""
    if header is None:
        return False
    cls = REQUEST_CLASSES.get(header.api_key)
    return cls is not None and cls.MIN_VERSION <= header.api_version <= cls.MAX_VERSION


def _no_error(frame):
    """A SaslHandshake answer's error code is 0 (its first field, after the header)."""
    return len(frame) >= 10 and frame[8:10] == b"\0\0"


class BackgroundProxy(ServerThread):
    """A Proxy on its own event loop in a thread, for blocking code and test suites:

        with BackgroundProxy("127.0.0.1:9092", rules=[Rule(api="Heartbeat", error=27)]) as p:
            client(bootstrap=f"127.0.0.1:{p.port}")
            p.exchanges()   # every exchange so far (kept up to `keep`, oldest first)

    Keyword arguments go to Proxy; observers given run in the proxy's thread. `loop`:
    "auto" (uvloop when installed), "asyncio" or "uvloop"; by default FASTKWIRE_PROXY_LOOP's."""

    def __init__(self, upstream, listen=("127.0.0.1", 0), *, keep=100_000, loop=None, **kwargs):
        self._on_exchange = kwargs.pop("on_exchange", None)
        self._on_event = kwargs.pop("on_event", None)
        self.keep = _positive(keep, "keep")
        self.proxy = Proxy(
            upstream, listen, on_exchange=self._exchange, on_event=self._eventf, **kwargs
        )
        self._lock = threading.Lock()
        self._exchanges = collections.deque(maxlen=self.keep)
        self._events = collections.deque(maxlen=self.keep)
        super().__init__(self.proxy, loop, name="proxy")

    def _exchange(self, ex):
        with self._lock:
            self._exchanges.append(ex)
        if self._on_exchange is not None:
            self._on_exchange(ex)

    def _eventf(self, event):
        with self._lock:
            self._events.append(event)
        if self._on_event is not None:
            self._on_event(event)

    @property
    def address(self):
        return self.proxy.address

    @property
    def port(self):
        return self.proxy.address[1]

    @property
    def bootstrap(self):
        return f"{self.proxy.address[0]}:{self.proxy.address[1]}"

    @property
    def summary(self):
        self._flush()
        return self.proxy.summary

    def exchanges(self):
        self._flush()
        with self._lock:
            return list(self._exchanges)

    def events(self):
        self._flush()
        with self._lock:
            return list(self._events)

    def _flush(self):
        """What the compiled path forwarded so far reaches the observers (and the summary)."""
        if not self.proxy.compiled or self._loop is None or not self._thread.is_alive():
            return
        if threading.current_thread() is self._thread:
            self.proxy.flush()
        else:
            try:
                self.call(self.proxy.flush)
            except RuntimeError:  # the loop stopped meanwhile
                pass

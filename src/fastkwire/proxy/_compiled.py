"""The compiled forwarding path's Python side: which path a proxy takes (`forward_kind`,
`compiled_forwarder`), the hand-over of a connection pair to the forwarding thread
(`CompiledPath.carry`), and what comes back from it in batches (`CompiledPath.drain`):
exchanges, unpaired frames, SASL tokens and ended connections, turned into the same
`Exchange`s and `ProxyEvent`s the asyncio path makes.

The compiled path carries a connection when nothing in the proxy's options needs Python
per exchange: no fault rules, no address rewriting or broker mapping, no TLS on either
side. Observers still see every exchange, at most BATCH_DELAY after it was answered.
"""

import asyncio
import os
import socket
import sys

from ..connection_errors import OptionError
from ._exchange import Exchange, ProxyEvent
from ._frames import request_header

FORWARDS = ("auto", "python", "compiled")
ENV = "FASTKWIRE_PROXY_FORWARD"
BATCH_DELAY = 0.02  # seconds the forwarding thread's items gather before the loop takes them


def forward_kind(kind=None):
    """The path asked for: `kind`, or FASTKWIRE_PROXY_FORWARD's, or "auto"; ValueError
    naming `forward` (or the variable) for anything else."""
    if kind is None:
        kind = os.environ.get(ENV, "").strip().lower() or "auto"
        if kind not in FORWARDS:
            raise ValueError(f"{ENV}: {kind!r} is not one of {', '.join(FORWARDS)}")
    if kind not in FORWARDS:
        raise ValueError(f"forward: {kind!r} is not one of {', '.join(FORWARDS)}")
    return kind


def compiled_forwarder():
    """The compiled module, or why there is none (text)."""
    if not sys.platform.startswith("linux"):
        return None, "it needs Linux (epoll)"
    if os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
        return None, "FASTKWIRE_PURE is set"
    try:
        from .. import _forward
    except ImportError as e:
        return None, f"the compiled module did not import ({e})"
    return _forward, None


def needs_python(proxy):
    """The parameters of `proxy` whose work is Python's, for every exchange: with any of
    them its connections take the asyncio path."""
    return [
        name
        for name, given in (
            ("rules", bool(proxy.faults)),
            ("rewrite_advertised", proxy.rewrite),
            ("broker_ports", proxy.broker_ports is not None),
            ("broker_map", bool(proxy.broker_map)),
            ("tls", proxy.tls is not None),
            ("upstream_tls", proxy.upstream_tls is not None),
        )
        if given
    ]


def compiled_refused(names):
    """The error for forward="compiled" asked for together with `names` (needs_python)."""
    return OptionError(
        "{forward}: the compiled forwarding path cannot carry connections with "
        + ", ".join("{%s}" % name for name in names)
        + " (Python's work for every exchange): ask for auto (it takes the Python path "
        "here) or python",
        "forward",
        *names,
    )


class _Early(asyncio.Protocol):
    """The upstream's side until the pair is handed over: keeps what arrives meanwhile."""

    def __init__(self):
        self.transport = None
        self.early = []

    def connection_made(self, transport):
        self.transport = transport
        transport.pause_reading()

    def data_received(self, data):
        self.early.append(bytes(data))

    def get_extra_info(self, name, default=None):
        return self.transport.get_extra_info(name, default)


class _Gone(asyncio.Protocol):
    """A detached transport's protocol: its socket now belongs to the forwarding thread."""


def _detach(transport):
    """A duplicate of the transport's socket; the transport is closed (the TCP connection
    stays open through the duplicate). A transport whose peer ended before the hand-over
    has no socket left: then one end of a socket pair whose other end is closed, so the
    forwarding thread forwards what was read before and meets the same end of stream."""
    sock = transport.get_extra_info("socket")
    fd = -1 if sock is None else sock.fileno()
    if fd >= 0:
        fd = os.dup(fd)
    else:
        ended, gone = socket.socketpair()
        gone.close()
        fd = ended.detach()
    transport.set_protocol(_Gone())
    transport.abort()
    return fd


class CompiledPath:
    """One proxy's forwarding thread and the connections it carries."""

    def __init__(self, proxy, module):
        from .. import REQUEST_CLASSES

        self.proxy = proxy
        self.module = module
        self.forwarder = module.Forwarder(
            proxy.max_frame_bytes,
            proxy.max_pending_bytes,
            proxy.max_in_flight,
            proxy.max_buffered_bytes,
            float(proxy.frame_timeout),
            {k: (c.MIN_VERSION, c.MAX_VERSION) for k, c in REQUEST_CLASSES.items()},
        )
        self.conns = {}  # number -> _Conn, while the thread carries it
        self._loop = asyncio.get_running_loop()
        self._fd = self.forwarder.notify_fd
        self._loop.add_reader(self._fd, self._ready)
        self._scheduled = None

    def carry(self, conn, upstream):
        """Hands the pair over (the client's side and the upstream's `_Early`); a future
        for (why, kind, unanswered) once it ends."""
        side = conn.cwriter
        early = [f for f in side.queue if isinstance(f, (bytes, bytearray))]
        early.append(bytes(side.buf))
        side.queue.clear()
        side.buf = bytearray()
        self.proxy._held(conn, 0, 0)
        conn.ended = self._loop.create_future()
        conn.forwarder = self.forwarder
        cfd = _detach(side.transport)
        try:
            ufd = _detach(upstream.transport)
        except BaseException:
            os.close(cfd)
            raise
        try:
            self.forwarder.add(conn.number, cfd, ufd, b"".join(early), b"".join(upstream.early))
        except BaseException as e:  # the descriptors are still ours
            os.close(cfd)
            os.close(ufd)
            if not isinstance(e, ValueError):
                raise
            conn.ended.set_result(("proxy closing", ProxyEvent.CLOSE, 0))  # the thread stopped
            return conn.ended
        self.conns[conn.number] = conn
        return conn.ended

    def _ready(self):
        try:
            os.read(self._fd, 8)
        except BlockingIOError:
            pass
        if self._scheduled is None:
            self._scheduled = self._loop.call_later(BATCH_DELAY, self.drain)

    def drain(self):
        """Takes what the thread has done and tells the proxy's observers, in order."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        m, proxy, conns = self.module, self.proxy, self.conns
        for item in self.forwarder.take():
            kind = item[0]
            conn = conns.get(item[1])
            if conn is None:
                continue
            if kind == m.EXCHANGE:
                _, _, _, _, _, expects, wall, start, end, request, response = item
                ex = Exchange(
                    conn.number, conn.client, request_header(request), request, expects, conn.broker
                )
                ex.time, ex.started, ex.finished, ex.response = wall, start, end, response
                proxy._emit(ex)
            elif kind == m.CLOSED:
                del conns[conn.number]
                if not conn.ended.done():
                    conn.ended.set_result(_closed(m, proxy, item))
            elif kind == m.HOLDING:
                proxy._event(
                    ProxyEvent.ERROR,
                    conn,
                    f"the proxy holds {item[2]} bytes of frames for its connections "
                    f"(limit {proxy.max_buffered_bytes}: max_buffered_bytes): clients are not "
                    "read until answers drain",
                )
            else:
                _, _, side, frame, cid = item
                if kind == m.TOKEN:
                    text = "SASL token"
                    event = ProxyEvent.TOKEN
                elif kind == m.UNPAIRED_REQUEST:
                    text = (
                        f"request frame of {len(frame)} bytes is too short for "
                        "a request header (12 bytes): forwarded as it is"
                    )
                    event = ProxyEvent.ERROR
                else:
                    text = (
                        f"response frame of {len(frame)} bytes is too short for a correlation id"
                        if cid is None
                        else f"response with correlation id {cid} answers no request "
                        "in flight: forwarded as it is"
                    )
                    event = ProxyEvent.ERROR
                proxy._event(event, conn, text, frame, side == 0)

    async def close(self):
        """Ends every connection it carries, tells the observers, stops the thread."""
        if self.conns:
            self.forwarder.abort_all()
            for _ in range(500):  # their ends come back within a turn or two of the thread
                await asyncio.sleep(0.01)
                self.drain()
                if not self.conns:
                    break
        self.drain()
        self._loop.remove_reader(self._fd)
        self.forwarder.close()


def _closed(m, proxy, item):
    """(why, kind, unanswered) of a CLOSED item, in the asyncio path's words."""
    _, _, side, reason, a, b, c, unanswered = item
    name, what = ("client", "request") if side == 0 else ("upstream", "response")
    if reason == m.CLIENT_CLOSED:
        return "client closed", ProxyEvent.CLOSE, unanswered
    if reason == m.UPSTREAM_CLOSED:
        return "upstream closed", ProxyEvent.CLOSE, unanswered
    if reason == m.ABORTED:
        return "proxy closing", ProxyEvent.CLOSE, unanswered
    if reason == m.BAD_PREFIX:
        why = (
            f"{name} sent a {what} size prefix of {a} bytes at stream offset {b} "
            f"(limit {proxy.max_frame_bytes}: max_frame_bytes): not Kafka framing"
        )
    elif reason == m.MID_FRAME:
        need = f"a {b}-byte {what}" if b >= 0 else "a size prefix"
        why = f"{name} closed mid-{what}: {a} bytes of {need} (stream offset {c})"
    elif reason == m.TIMEOUT:
        why = (
            f"{name} sent part of a frame and did not finish it within "
            f"{proxy.frame_timeout:g} s (frame_timeout): closing"
        )
    elif reason == m.UNDELIVERED:
        other, sent = ("upstream", "its answers") if side == 0 else ("client", "its requests")
        why = (
            f"{other} closed; {name} did not take the last {a} bytes of {sent} within "
            f"{proxy.frame_timeout:g} s (frame_timeout): dropped"
        )
    elif reason == m.TWICE_LIMIT:
        why = (
            f"the proxy holds {a} bytes of frames for its connections "
            f"(twice the limit {proxy.max_buffered_bytes}: max_buffered_bytes): "
            f"closing the connection whose {what} crossed it"
        )
    else:
        why = f"{name}: {os.strerror(a)}"
    return why, ProxyEvent.ERROR, unanswered

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
- `connections_max_idle_ms`: Kafka's connections.max.idle.ms (10 minutes): a connection
  that neither sends nor is sent a byte for that long is closed, as Kafka closes it.
What a client may make the broker hold beyond its connection (ACLs, transactional ids, a
Fetch's answer...) is capped by `limits` (_limits.py's Limits) and the group sizes
(GroupConfig).
What a frame gets (an answer, nothing, or the end of its connection) is _exchange.py's; on a
SASL listener a connection logs in first (_sasl.py); fault rules act before either (_faults.py).
On a TLS listener (SSL, SASL_SSL) the accepted socket goes to asyncio's TLS handshake
(_TlsAccept, as the proxy hands it over; the context is _security.py's).
"""

import asyncio
import collections
import functools
import logging
import os
import socket
import struct
import time

from ..proxy._accept import tls_handshake
from ..proxy._frames import request_header
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
from ._coordinator_state import CoordinatorState
from ._compaction import DEFAULT_BACKOFF_MS as DEFAULT_CLEANER_BACKOFF_MS
from ._compaction import LogCleaner
from ._disk_logs import DiskLogs
from ._authorize import Authorizer, principal_of, subject_name
from ._exchange import Close, answer_frame
from ._faults import apply as apply_fault
from ._faults import as_faults, as_rule
from ._fetch_sessions import DEFAULT_CACHE_SLOTS
from ._frame_buffer import COMPILED, FrameBuffer, readable
from ._groups import GroupConfig, GroupCoordinator
from ._sasl import DEFAULT_SCRAM_ITERATIONS, PASS, SASL_MAX_RECEIVE_BYTES, SaslSession, Users
from ._expiry import (
    PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
    PRODUCER_ID_EXPIRATION_MS,
    TRANSACTIONAL_ID_CLEANUP_INTERVAL_MS,
    TRANSACTIONAL_ID_EXPIRATION_MS,
)
from ._security import listener_protocols, node_listeners, server_context
from ._limits import Limits

log = logging.getLogger("fastkwire.broker")

FIRST_NODE_ID = 0
DEFAULT_RETENTION_CHECK_INTERVAL_MS = 300_000  # Kafka's log.retention.check.interval.ms
WATCH_INTERVAL_MAX = 1.0  # seconds between looks for overdue frames, at most
FAILED_ANSWER_CLOSE_DELAY = 0.1  # Kafka's connection.failed.authentication.delay.ms
DEFAULT_CONNECTIONS_MAX_IDLE_MS = 600_000  # Kafka's connections.max.idle.ms
IDLE_SCAN_MAX = 60.0  # seconds between looks for idle connections, at most
_SIZE = struct.Struct(">i")  # a frame's size prefix
READ_SIZE = 256 * 1024  # the scratch buffer reads go to (uvloop's own reads are this size)


# How soon timer work that failed is tried again.
TIMER_RETRY_S = 1.0


class _TimerWork:
    """Runs a step of the broker's timers (it gives the next deadline or None). A step that
    fails (a log directory that cannot be written, a defect) is logged and not run again
    for TIMER_RETRY_S, so that the other timers (frame and idle timeouts, retention) go on
    (it had ended the loop that runs them all) and a lasting failure is said once a second,
    not at every wake-up."""

    __slots__ = ("work", "what", "retry_at")

    def __init__(self, work, what):
        self.work, self.what, self.retry_at = work, what, None

    def __call__(self):
        now = time.monotonic()
        if self.retry_at is not None and now < self.retry_at:
            return self.retry_at
        try:
            deadline = self.work()
        except Exception:  # noqa: BLE001 - the timers must outlive any one of them
            log.exception("the broker's %s failed; tried again in %g s", self.what, TIMER_RETRY_S)
            self.retry_at = now + TIMER_RETRY_S
            return self.retry_at
        self.retry_at = None
        return deadline


class _Connection(asyncio.BufferedProtocol):
    """One client connection: frames split as read, queued, answered in order.

    Reads go into the broker's scratch buffer, and each frame whole in it is copied out
    once, as bytes; a frame left incomplete gets a FrameBuffer of its size (once its size
    prefix is checked), and the rest of it is read into that in place: no pieces joined.
    The bytes such buffers wait for count against max_buffered_bytes with the bytes held
    (`Broker.reserved`): without room, a frame's bytearray grows as its bytes come."""

    def __init__(self, broker, node_id, protocol):
        self.broker = broker
        self.node_id = node_id
        self.protocol = protocol  # its listener's (Kafka's listener name, here the protocol)
        self.transport = None
        self.host = ""
        self.partial = None  # the frame being read (a FrameBuffer or bytearray), or None
        self.held_bytes = 0  # the bytes of it read so far
        self.need = 0  # its size with its prefix, once its prefix is read (0: not yet)
        self.reserved = 0  # bytes of `partial` allocated ahead of its reads
        self.received = 0  # bytes read before the read being split, for error messages
        self.frames = collections.deque()
        self.queued = 0  # bytes of the frames in `frames`
        self.busy = False  # a request is being answered
        self.taking = False  # next() is taking frames (an answer given at once needs no call)
        self.closed = False
        self.paused = set()  # why reading is paused: "queue", "room", "write"
        self.write_paused = False
        self.clock = PeerClock()
        # On a SASL listener: the login, and a smaller frame cap until it is done (Kafka's).
        sasl = protocol.startswith("SASL_")
        self.sasl = SaslSession(broker.users, broker.connections_max_reauth_ms) if sasl else None
        self.limit = broker.max_frame_bytes if self.sasl is None else SASL_MAX_RECEIVE_BYTES
        self.active = time.monotonic()  # when a byte last came or went

    @property
    def principal(self):
        """Kafka's principal for this connection (what an authorizer checks): User:<name>
        after a SASL login, the certificate's subject on SSL with client certificates,
        else User:ANONYMOUS."""
        if self.sasl is not None:
            return principal_of(self.sasl.user)
        cert = self.transport.get_extra_info("peercert") if self.transport else None
        return principal_of(subject_name(cert["subject"]) if cert else None)

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

    def get_buffer(self, sizehint):
        if self.reserved:  # the rest of a frame whose buffer is allocated: read in place
            return readable(self.partial)
        return self.broker.scratch

    def buffer_updated(self, nbytes):
        if self.closed:
            return
        broker = self.broker
        self.active = now = time.monotonic()
        broker.buffered += nbytes  # what this read added, now queued or held
        before = self.held_bytes
        completed = False
        if self.reserved:
            self.held_bytes += nbytes
            self.reserved -= nbytes
            broker.reserved -= nbytes
            if self.partial.written(nbytes):
                # Taken as bytes by next(), on the loop's next turn: the transport holds
                # the buffer it read into until this call returns.
                completed = True
                self.frames.append(self.partial)
                self.queued += self.held_bytes
                self.partial, self.held_bytes, self.need = None, 0, 0
        else:
            queued = self.queued
            refused = self._split(broker.scratch, nbytes)
            if refused is not None:  # not Kafka framing: the bytes from it on are not held
                broker.buffered -= nbytes - (self.queued - queued + self.held_bytes - before)
                self.end(refused)
                return
            completed = self.queued > queued
        self.received += nbytes
        self.clock.read(now, completed, bool(self.held_bytes))
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
            if not self.held_bytes:
                # Only between frames: a frame begun frees its bytes once whole, so pausing
                # it mid-way could hold them (its peer's close unseen) until nothing reads.
                # It reads on, bounded by frame_timeout and the twice-the-limit end above.
                self.pause("room")
                broker.waiting_room.append(self)
        if self.held_bytes and before == 0:
            broker.wake(partial=True)  # the watch looks for it to be overdue
        if completed and type(self.frames[-1]) is not bytes:
            asyncio.get_running_loop().call_soon(self.next)
        else:
            self.next()

    def _split(self, data, n):
        """Takes the frames of a read of `n` bytes into `data` (the scratch buffer) and
        keeps what is left of it; None, or why the connection must end (not Kafka
        framing)."""
        start = 0
        if self.partial is not None:  # a frame read in part, its buffer growing as it comes
            partial = self.partial
            if not self.need:  # its size prefix is not whole yet
                at = self.received - len(partial)  # the frame's stream offset
                take = min(4 - len(partial), n)
                partial += data[:take]
                start = take
                self.held_bytes = len(partial)
                if self.held_bytes < 4:
                    return None
                refused = self._sized(partial, 0, at)
                if refused:
                    return refused
                if self.need > 4 and self._room(self.need - 4):  # its whole buffer, read in place
                    whole = self._allocate(partial, 4)
                    if start == n:
                        return None
                    with memoryview(whole) if COMPILED else whole.view() as into:
                        take = min(len(into), n - start)
                        into[:take] = data[start : start + take]
                    whole.written(take)
                    self.reserved -= take
                    self.broker.reserved -= take
                    self.held_bytes += take
                    if self.reserved:
                        return None
                    self._queue(whole.take())
                    self.partial, self.held_bytes, self.need = None, 0, 0
                    start += take
            if self.partial is not None:
                take = min(self.need - self.held_bytes, n - start)
                partial += data[start : start + take]
                self.held_bytes += take
                start += take
                if self.held_bytes < self.need:
                    return None
                self._queue(bytes(partial))
                self.partial, self.held_bytes, self.need = None, 0, 0
        limit = self.limit
        while n - start >= 4:
            size = _SIZE.unpack_from(data, start)[0]
            if not 0 <= size <= limit:
                return self._refusal(size, self.received + start)
            end = start + 4 + size
            if end > n:
                self.need = 4 + size
                break
            self._queue(data[start:end].tobytes())  # its own copy: the scratch is reused
            start = end
        if start < n:  # a frame begun: held in a bytearray of its own
            have = n - start
            if self.need and self._room(self.need - have):
                self._allocate(data[start:n], have)
            else:
                self.partial = bytearray(data[start:n])
            self.held_bytes = have
        return None

    def _sized(self, buf, start, offset):
        """Reads and checks the size prefix at `start` (stream offset `offset`): sets
        `need`; returns why the connection must end when it is not Kafka framing."""
        size = _SIZE.unpack_from(buf, start)[0]
        if not 0 <= size <= self.limit:
            return self._refusal(size, offset)
        self.need = 4 + size
        return None

    def _refusal(self, size, offset):
        during = self.sasl is not None and not self.sasl.complete
        cap = "during SASL authentication" if during else "max_frame_bytes"
        return (
            f"a request size prefix of {size} bytes at stream offset "
            f"{offset} (limit {self.limit}: {cap}): not Kafka framing"
        )

    def _room(self, ahead):
        """Whether a frame's buffer may be allocated `ahead` bytes before they are read: the
        bytes held and those so allocated stay within max_buffered_bytes."""
        broker = self.broker
        return broker.buffered + broker.reserved + ahead <= broker.max_buffered_bytes

    def _allocate(self, read, have):
        """A buffer of the whole frame, its first `have` bytes those `read`: the rest is
        reserved (counted in Broker.reserved until it is read)."""
        frame = self.partial = FrameBuffer(self.need, read)
        self.reserved = self.need - have
        self.broker.reserved += self.reserved
        return frame

    def _queue(self, frame):
        self.frames.append(frame)
        self.queued += len(frame)

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

    def end(self, why, answer=None):
        """Close this connection (only this one) and say why; `answer`: bytes written first."""
        if self.closed:
            return
        log.info("closed the connection from %s: %s", self.host, why)
        if answer:
            # Kafka's connection.failed.authentication.delay.ms: the client reads the answer
            # before it sees the end (and cannot retry a guess at once).
            self.transport.write(answer)
            self.transport.pause_reading()
            transport = self.transport
            self.broker.closing.add(transport)
            asyncio.get_running_loop().call_later(
                FAILED_ANSWER_CLOSE_DELAY, self.broker.close_later, transport
            )
        else:
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
        self.broker.reserved -= self.reserved
        self.queued = 0
        self.partial = None
        self.held_bytes = 0
        self.reserved = 0
        self.need = 0
        self.frames.clear()
        self.broker.room()

    # ---- answering

    def next(self):
        """Take the next frame, unless one is being answered or the answers are not read."""
        self.taking = True
        try:
            while not self.busy and self.frames and not self.closed and not self.write_paused:
                frame = self.frames.popleft()
                if type(frame) is not bytes:  # a FrameBuffer, read whole: its bytes
                    frame = frame.take()
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
        faults = self.broker.faults
        header = None
        if faults and not (self.sasl is not None and self.sasl.raw and not self.sasl.complete):
            header = request_header(frame)  # (a bare SASL token has no header to match)
        rule = faults.pick(header) if header is not None else None
        if rule is None:
            self._answer(frame, self.answered)
        else:
            apply_fault(
                rule,
                header,
                frame,
                lambda done: self._answer(frame, done),
                self.answered,
                asyncio.get_running_loop(),
            )
        apis = self.broker.apis
        if apis.deadlines_changed:  # the watch looks again at the handlers' next deadline
            apis.deadlines_changed = False
            self.broker.wake()

    def _answer(self, frame, done):
        sasl = self.sasl
        if sasl is not None:
            outcome = PASS
            if not sasl.complete:
                outcome = sasl.receive(frame)
            elif sasl.expires is not None:  # KIP-368: re-authenticated, or ended once expired
                outcome = sasl.after_login(frame)
                if outcome is None:
                    outcome = PASS
            # Kafka's smaller frame cap holds while a login (or a re-login) is under way
            self.limit = self.broker.max_frame_bytes if sasl.complete else SASL_MAX_RECEIVE_BYTES
            if outcome is not PASS:
                done(outcome)
                return
        answer_frame(self.broker.apis, frame, self.node_id, self.host, done, self, self.protocol)

    def answered(self, outcome):
        """The answer's bytes, None (nothing to send) or a Close: the next frame follows."""
        if self.closed:
            return
        if isinstance(outcome, Close):
            self.end(outcome.reason, outcome.answer)
            return
        if type(outcome) is tuple:  # a Fetch answer's pieces, its records as the log has them
            self.transport.writelines(outcome)
            self.active = time.monotonic()
        elif outcome is not None:
            self.transport.write(outcome)
            self.active = time.monotonic()
        self.busy = False
        # Answered at once, inside next(): its loop takes the next frame. An answer may also
        # come from another connection's request (a Fetch that waited): then the next frame
        # is taken on the loop's next turn, not inside that request's handling.
        if not self.taking:
            asyncio.get_running_loop().call_soon(self.next)


class _TlsAccept(asyncio.Protocol):
    """A TLS listener's protocol at accept, as the proxy's: the client counts in
    max_connections from here, and its socket goes to the handshake, bounded by
    frame_timeout. Taken in connection_made, before any read (uvloop reads once after it
    returns otherwise, and nothing may be read before the handshake)."""

    def __init__(self, broker, node_id, protocol):
        self.broker, self.node_id, self.protocol = broker, node_id, protocol

    def connection_made(self, transport):
        from ..proxy._compiled import _detach  # the proxy's hand-over of an accepted socket

        broker = self.broker
        held = len(broker.connections) + len(broker.handshakes)
        if held >= broker.max_connections:
            log.warning(
                "refused a connection: %d open or in a TLS handshake (limit %d: max_connections)",
                held,
                broker.max_connections,
            )
            transport.abort()
            return
        try:
            fd = _detach(transport)
        except OSError as e:  # out of file descriptors: refused, not left open uncounted
            log.warning("refused a connection: its TLS handshake cannot start: %s", e)
            transport.abort()
            return
        task = asyncio.get_running_loop().create_task(
            broker._tls_handshake(fd, self.node_id, self.protocol)
        )
        broker.handshakes.add(task)
        task.add_done_callback(broker.handshakes.discard)


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


def _listening_socket(host, port):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


class Broker:
    """A Kafka broker on asyncio: `listeners` are one (host, port), "host:port" or
    "PROTOCOL://host:port" per node (port 0: a free one), node ids counting from
    `first_node_id`; a node's several listeners of different protocols as Kafka's
    `listeners` value ("PLAINTEXT://host:0,SSL://host:0"), the same protocols every node
    (`bootstrap_servers_for(protocol)`: their addresses). Keyword arguments:
    `auto_create_topics` (Kafka's auto.create.topics.enable, on by default),
    `num_partitions` (of an auto-created topic), `max_partitions` (of all topics together),
    `offsets_topic_partitions` (Kafka's offsets.topic.num.partitions: __consumer_offsets'),
    `groups` (True: the group coordinator with Kafka's defaults, GroupConfig's; a
    GroupConfig; a function(cluster) making a coordinator; None: the group APIs are not
    served), the caps above, `log_dir` (a directory the logs are also written to, in
    Kafka's segment format, and read back from at start; None: memory only) and
    `retention_check_interval_ms` (Kafka's log.retention.check.interval.ms),
    `log_cleaner_backoff_ms` (Kafka's log.cleaner.backoff.ms: how often compacted topics'
    partitions are looked at, and cleaned when due; `clean_logs()` does it at once). Cluster shapes:
    `move_leader`, `stop_node`, `start_node`. `limits` (a Limits: what clients may make it
    hold), `fetch_session_cache_slots` (Kafka's max.incremental.fetch.session.cache.slots,
    1000; 0: every Fetch sessionless). Producer state expiry, Kafka's:
    `producer_id_expiration_ms` (1 day) checked every
    `producer_id_expiration_check_interval_ms` (10 minutes), `transactional_id_expiration_ms`
    (7 days) checked every `transactional_id_cleanup_interval_ms` (Kafka's
    transaction.remove.expired.transaction.cleanup.interval.ms, 1 hour).

    Security (Kafka's listener security protocols): `security_protocol` ("PLAINTEXT",
    "SSL", "SASL_PLAINTEXT", "SASL_SSL"; or a listener's prefix, "SASL_SSL://host:port";
    by default what the settings below imply), `users` ({name: password}: SASL PLAIN and
    SCRAM-SHA-256/512 logins), `oauthbearer` (SASL OAUTHBEARER: True for Kafka's unsecured
    JWS validation, an `UnsecuredValidator(...)` for its options, or a callable(token)
    giving the principal's name, raising to refuse), `sasl_mechanisms` (those enabled;
    default PLAIN and SCRAM with users, and OAUTHBEARER with `oauthbearer`),
    `connections_max_reauth_ms` (Kafka's connections.max.reauth.ms, KIP-368: 0, off; a
    session's lifetime is also an OAUTHBEARER token's),
    `scram_iterations` (4096), `tls_cert` and `tls_key` (PEM files; `tls_key_password`),
    `tls_client_cafile` (clients of an SSL listener must present a certificate these CAs
    signed; a SASL_SSL listener's log in instead, as Kafka ignores ssl.client.auth there).
    `authorizer` (Kafka's StandardAuthorizer: the ACLs are enforced): True, or an
    `Authorizer(super_users=["User:admin"], allow_everyone_if_no_acl_found=False)`; None
    (the default): every client may do everything.

    Faults: `faults` (the proxy's fault rules: Rule objects, dicts of their keys or
    "key=value,..." text; `fault_seed` for their probabilities); `add_fault(rule)` and
    `clear_faults()` change them while it runs.

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
        fetch_session_cache_slots=DEFAULT_CACHE_SLOTS,
        max_frame_bytes=DEFAULT_MAX_FRAME_BYTES,
        max_pending_bytes=DEFAULT_MAX_PENDING_BYTES,
        max_buffered_bytes=DEFAULT_MAX_BUFFERED_BYTES,
        max_connections=DEFAULT_MAX_CONNECTIONS,
        frame_timeout=DEFAULT_FRAME_TIMEOUT,
        log_dir=None,
        retention_check_interval_ms=DEFAULT_RETENTION_CHECK_INTERVAL_MS,
        log_cleaner_backoff_ms=DEFAULT_CLEANER_BACKOFF_MS,
        security_protocol=None,
        users=None,
        sasl_mechanisms=None,
        scram_iterations=DEFAULT_SCRAM_ITERATIONS,
        oauthbearer=None,
        connections_max_reauth_ms=0,
        tls_cert=None,
        tls_key=None,
        tls_key_password=None,
        tls_client_cafile=None,
        faults=None,
        fault_seed=None,
        connections_max_idle_ms=DEFAULT_CONNECTIONS_MAX_IDLE_MS,
        limits=None,
        authorizer=None,
        producer_id_expiration_ms=PRODUCER_ID_EXPIRATION_MS,
        producer_id_expiration_check_interval_ms=PRODUCER_ID_EXPIRATION_CHECK_INTERVAL_MS,
        transactional_id_expiration_ms=TRANSACTIONAL_ID_EXPIRATION_MS,
        transactional_id_cleanup_interval_ms=TRANSACTIONAL_ID_CLEANUP_INTERVAL_MS,
    ):
        if isinstance(listeners, (str, tuple)) and (
            isinstance(listeners, str) or isinstance(listeners[0], str)
        ):
            listeners = [listeners]
        split = [node_listeners(a) for a in listeners]
        # Each node's listeners' addresses (one, or several of different protocols); the
        # first is the node's address where no listener is named (addresses, bootstrap).
        self.node_listeners = [[parse_address(a, "listeners") for _, a in n] for n in split]
        self.listeners = [n[0] for n in self.node_listeners]
        if not self.listeners:
            raise ValueError("listeners: at least one HOST:PORT")
        tls = bool(tls_cert or tls_key or tls_client_cafile)
        # SASL is asked for by users or by OAUTHBEARER (its validator, or the mechanism named)
        oauth = oauthbearer is not None or "OAUTHBEARER" in (sasl_mechanisms or ())
        sasl = users is not None or oauth
        self.protocols = listener_protocols(security_protocol, split, sasl, tls)
        self.security_protocol = self.protocols[0]
        # The users, whatever the listeners: AlterUserScramCredentials may add SCRAM ones.
        self.users = Users(
            {} if users is None else users,
            sasl_mechanisms,
            scram_iterations,
            required=any(p.startswith("SASL_") for p in self.protocols),
            oauthbearer=oauthbearer,
        )
        if not sasl and sasl_mechanisms is not None:
            raise ValueError("sasl_mechanisms: given without users")
        if (
            isinstance(connections_max_reauth_ms, bool)
            or not isinstance(connections_max_reauth_ms, int)
            or not 0 <= connections_max_reauth_ms <= 2**63 - 1  # Kafka's long
        ):
            raise ValueError(
                "connections_max_reauth_ms: 0 (off) or more, to 9223372036854775807 (Kafka's "
                f"long), not {connections_max_reauth_ms!r}"
            )
        self.connections_max_reauth_ms = connections_max_reauth_ms
        self.tls = (
            server_context(tls_cert, tls_key, tls_key_password, tls_client_cafile) if tls else None
        )
        # Kafka (KIP-684) ignores ssl.client.auth on SASL_SSL listeners: the login says who.
        self.sasl_tls = self.tls
        if tls_client_cafile is not None and "SASL_SSL" in self.protocols:
            self.sasl_tls = server_context(tls_cert, tls_key, tls_key_password)
        self.tls_client_auth = tls_client_cafile is not None
        self.faults = as_faults(faults, fault_seed)
        self.first_node_id = first_node_id
        self.auto_create_topics = bool(auto_create_topics)
        self.num_partitions = _positive(num_partitions, "num_partitions")
        self.max_partitions = _positive(max_partitions, "max_partitions")
        self.offsets_topic_partitions = _positive(
            offsets_topic_partitions, "offsets_topic_partitions"
        )
        self.groups = groups
        if fetch_session_cache_slots < 0:
            raise ValueError(
                f"fetch_session_cache_slots: at least 0, not {fetch_session_cache_slots}"
            )
        self.fetch_session_cache_slots = fetch_session_cache_slots
        self.max_frame_bytes = _positive(max_frame_bytes, "max_frame_bytes")
        if self.max_frame_bytes > 0x7FFFFFFF:
            raise ValueError("max_frame_bytes: a frame's int32 size cannot exceed 2147483647")
        self.max_pending_bytes = _positive(max_pending_bytes, "max_pending_bytes")
        self.max_buffered_bytes = _positive(max_buffered_bytes, "max_buffered_bytes")
        self.max_connections = _positive(max_connections, "max_connections")
        self.frame_timeout = _positive(frame_timeout, "frame_timeout", float)
        self.log_dir = None if log_dir is None else os.fspath(log_dir)
        self.retention_check_interval_ms = _positive(
            retention_check_interval_ms, "retention_check_interval_ms"
        )
        self.log_cleaner_backoff_ms = _positive(log_cleaner_backoff_ms, "log_cleaner_backoff_ms")
        self.cleaner = None  # the LogCleaner, made at start
        self._storage = None
        self._next_retention = None
        self.connections_max_idle_ms = _positive(
            connections_max_idle_ms, "connections_max_idle_ms", float
        )
        if limits is not None and not isinstance(limits, Limits):
            raise TypeError(f"limits: a fastkwire.broker.Limits, not {type(limits).__name__}")
        self.limits = limits if limits is not None else Limits()
        if authorizer is True:
            authorizer = Authorizer()
        elif authorizer is False:
            authorizer = None
        if authorizer is not None and not isinstance(authorizer, Authorizer):
            raise TypeError(
                f"authorizer: True or a fastkwire.broker.Authorizer, not {type(authorizer).__name__}"
            )
        self.authorizer = authorizer
        self._expiry_settings = {
            "producer_id_expiration_ms": producer_id_expiration_ms,
            "producer_id_expiration_check_interval_ms": producer_id_expiration_check_interval_ms,
            "transactional_id_expiration_ms": transactional_id_expiration_ms,
            "transactional_id_cleanup_interval_ms": transactional_id_cleanup_interval_ms,
        }
        for name, value in self._expiry_settings.items():
            _positive(value, name)
        self.cluster = None
        self.apis = None
        self.connections = set()
        self.closing = set()  # transports that end once their last answer is out
        self.handshakes = set()  # TLS handshakes under way
        self.buffered = 0
        self.reserved = 0  # bytes of frame buffers allocated ahead of their reads
        self.scratch = memoryview(bytearray(READ_SIZE))  # every connection's reads, split at once
        self.waiting_room = collections.deque()
        self._servers = {}  # node id -> its asyncio server (a stopped node has none)
        self._watch = None
        self._wake = None
        self._partial_seen = False

    def add_fault(self, rule):
        """Adds a fault rule (a Rule, a dict of its keys or "key=value,..." text) after those
        there are; returns the Rule (its `matched` and `fired` count what it did)."""
        rule = as_rule(rule)
        self.faults.rules.append(rule)
        return rule

    def clear_faults(self):
        """Removes every fault rule."""
        self.faults.rules.clear()

    @property
    def addresses(self):
        """{node id: (host, port)} of the listeners (the ports bound, once started)."""
        return dict(self.cluster.nodes)

    @property
    def bootstrap_servers(self):
        """ "host:port,..." of every node's first listener."""
        return ",".join(f"{h}:{p}" for h, p in self.cluster.nodes.values())

    def bootstrap_servers_for(self, protocol):
        """ "host:port,..." of every node's listener of `protocol` (SSL, ...)."""
        if protocol not in self.protocols:
            raise ValueError(
                f"protocol: {protocol!r}: the listeners are {', '.join(self.protocols)}"
            )
        return ",".join(
            f"{h}:{p}" for h, p in (e[protocol] for e in self.cluster.listeners.values())
        )

    async def start(self):
        socks = []  # per node, a socket per listener
        try:
            for addresses in self.node_listeners:
                socks.append([])
                for host, port in addresses:
                    socks[-1].append(_listening_socket(host, port))
        except OSError:
            for s in (s for node in socks for s in node):
                s.close()
            raise
        bound = {  # node id -> {protocol: (host, port)}
            self.first_node_id + i: {
                protocol: (host, sock.getsockname()[1])
                for protocol, (host, _), sock in zip(self.protocols, addresses, node)
            }
            for i, (addresses, node) in enumerate(zip(self.node_listeners, socks))
        }
        nodes = {node: endpoints[self.protocols[0]] for node, endpoints in bound.items()}
        storage = None
        try:
            if self.log_dir is not None:
                storage = DiskLogs(self.log_dir)
            self.cluster = Cluster(
                nodes,
                auto_create_topics=self.auto_create_topics,
                num_partitions=self.num_partitions,
                max_partitions=self.max_partitions,
                offsets_topic_partitions=self.offsets_topic_partitions,
                cluster_id=None if storage is None else storage.cluster_id(),
            )
            self.cluster.listeners = bound
            if storage is not None:
                storage.attach(self.cluster, settle=False)
            groups = _group_coordinator(self.groups, self.cluster)
            self.apis = Apis(
                self.cluster,
                groups=groups,
                limits=self.limits,
                fetch_session_cache_slots=self.fetch_session_cache_slots,
                authorizer=self.authorizer,
                expiry=self._expiry_settings,
            )
            if storage is not None:  # the coordinators' records, read back and kept
                CoordinatorState(storage, self.cluster, groups, self.apis.transactions).load()
            self.cleaner = LogCleaner(
                self.cluster, time.monotonic, time.time, self.log_cleaner_backoff_ms
            )
        except BaseException:
            for s in (s for node in socks for s in node):
                s.close()
            if storage is not None:
                storage.close()
            raise
        self._storage = storage
        self.apis.security_protocol = self.security_protocol
        self.apis.users = self.users
        self.apis.static_configs = self._static_configs()
        for node_id, node_socks in zip(nodes, socks):
            await self._serve(node_id, node_socks)
        self._wake = asyncio.Event()
        self._watch = asyncio.get_running_loop().create_task(self._watching())
        return self

    def _static_configs(self):
        """The Kafka broker configs its settings amount to (DescribeConfigs shows them)."""
        configs = {
            "connections.max.idle.ms": str(int(self.connections_max_idle_ms)),
            "log.retention.check.interval.ms": str(self.retention_check_interval_ms),
            "log.cleaner.backoff.ms": str(self.log_cleaner_backoff_ms),
        }
        if self.log_dir is not None:
            configs["log.dirs"] = self.log_dir
        if any(p.startswith("SASL_") for p in self.protocols):
            configs["sasl.enabled.mechanisms"] = ",".join(self.users.mechanisms)
            configs["connections.max.reauth.ms"] = str(self.connections_max_reauth_ms)
        if self.tls is not None:
            configs["ssl.client.auth"] = "required" if self.tls_client_auth else "none"
            # (SASL_SSL listeners ignore it, as Kafka's do)
        return configs

    async def _serve(self, node_id, socks):
        """Node `node_id` serves its listeners' sockets (one per protocol)."""
        loop = asyncio.get_running_loop()
        servers = self._servers[node_id] = []
        for protocol, sock in zip(self.protocols, socks):
            kind = _TlsAccept if protocol.endswith("SSL") else _Connection
            servers.append(
                await loop.create_server(
                    functools.partial(kind, self, node_id, protocol), sock=sock
                )
            )

    # ---- the cluster's shape: what a client sees when leaders move and nodes stop

    def move_leader(self, topic, partition, node_id):
        """Node `node_id` leads `topic` `partition` from now on, in a new leader epoch:
        the old leader answers NOT_LEADER_OR_FOLLOWER, Metadata names the new one."""
        self.cluster.move_leader(topic, partition, node_id)
        self.apis.data_arrived()  # waiting Fetches of the old leader answer now

    async def stop_node(self, node_id):
        """Node `node_id` stops: its listener closes, its connections end, the partitions
        it led go to another of their replicas or have no leader (LEADER_NOT_AVAILABLE),
        the groups it coordinated to another node."""
        self.cluster.stop_node(node_id)
        servers = self._servers.pop(node_id)
        for server in servers:
            server.close()
        for conn in [c for c in self.connections if c.node_id == node_id]:
            conn.end(f"node {node_id} is stopping")
        for server in servers:
            await server.wait_closed()
        self.apis.data_arrived()

    async def start_node(self, node_id):
        """Node `node_id` (stopped) listens again on its address; the partitions left
        without a leader that it holds a replica of are led by it again."""
        if node_id not in self.cluster.stopped:
            raise ValueError(f"node_id: node {node_id} is running")
        endpoints = self.cluster.listeners[node_id]
        socks = []
        try:
            for protocol in self.protocols:
                socks.append(_listening_socket(*endpoints[protocol]))
        except OSError:
            for sock in socks:
                sock.close()
            raise
        await self._serve(node_id, socks)
        self.cluster.start_node(node_id)
        self.apis.data_arrived()

    def apply_retention(self):
        """Apply the topics' retention.bytes and retention.ms now (the broker does so every
        retention_check_interval_ms too); returns how many partitions' log start moved."""
        return len(self.cluster.apply_retention(int(time.time() * 1000)))

    def clean_logs(self, force=False):
        """Run the log cleaner now over the compacted topics' partitions due a pass (the
        broker does so every log_cleaner_backoff_ms too; `force`: every partition with
        cleanable bytes, whatever its dirty ratio); returns {(topic, partition): what the
        pass did}."""
        return self.cleaner.clean(int(time.time() * 1000), force)

    async def close(self):
        servers = [server for node in self._servers.values() for server in node]
        for server in servers:
            server.close()
        for conn in list(self.connections):
            conn.end("the broker is closing")
        for transport in list(self.closing):
            self.close_later(transport)
        for task in list(self.handshakes):
            task.cancel()
        if self.handshakes:
            await asyncio.gather(*self.handshakes, return_exceptions=True)
        if self._watch is not None:
            self._watch.cancel()
            try:
                await self._watch
            except asyncio.CancelledError:
                pass
        for server in servers:
            await server.wait_closed()
        self._servers = {}
        if self._storage is not None:
            self._storage.close()

    async def serve_forever(self):
        await asyncio.Event().wait()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()

    async def _tls_handshake(self, fd, node_id, protocol):
        try:
            await tls_handshake(
                fd,
                lambda: _Connection(self, node_id, protocol),
                self.sasl_tls if protocol == "SASL_SSL" else self.tls,
                self.frame_timeout,
            )
        except (OSError, asyncio.TimeoutError) as e:  # ssl.SSLError is an OSError
            why = "it took over frame_timeout" if isinstance(e, asyncio.TimeoutError) else e
            log.info("a TLS handshake on node %d failed: %s", node_id, why)

    def close_later(self, transport):
        """Ends a connection whose last answer was written (see _Connection.end)."""
        if transport in self.closing:
            self.closing.discard(transport)
            transport.close()

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

    def _retention_tick(self):
        """Retention, once retention_check_interval_ms has passed since the last one (or
        the start); the next time it is due. A failed one (the log directory) waits as long."""
        now = time.monotonic()
        due = self._next_retention
        if due is None or now >= due:
            self._next_retention = now + self.retention_check_interval_ms / 1000
            if due is not None:  # not at the start
                self.apply_retention()
        return self._next_retention

    async def _watching(self):
        """Fires the handlers' deadlines (Fetch waits, group timers) and ends connections
        whose frame is overdue (looked for every `interval`, not at every wake-up)."""
        interval = min(self.frame_timeout / 4, WATCH_INTERVAL_MAX)
        loop = asyncio.get_running_loop()
        next_scan = None  # when to look for overdue frames; None: no partial frame known
        idle = self.connections_max_idle_ms / 1000
        idle_interval = min(idle / 4, IDLE_SCAN_MAX)
        next_idle_scan = time.monotonic() + idle_interval
        ticks = _TimerWork(self.apis.tick, "timers (Fetch waits, transactions, groups)")
        expire = _TimerWork(lambda: self.apis.expiry.tick(), "producer and transactional id expiry")
        clean = _TimerWork(self.cleaner.tick, "log cleaner")
        retain = _TimerWork(self._retention_tick, "retention")
        while True:
            deadline = ticks()
            now = time.monotonic()
            retention = retain()
            # producer and transactional id expiry; log compaction
            expiry = expire()
            cleaning = clean()
            deadline = min(d for d in (deadline, retention, expiry, cleaning) if d is not None)
            if now >= next_idle_scan:
                for conn in [c for c in self.connections if now - c.active > idle]:
                    conn.end(
                        f"no bytes came or went for {self.connections_max_idle_ms:g} ms "
                        "(connections_max_idle_ms)"
                    )
                next_idle_scan = now + idle_interval
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
            waits = [t - now for t in (deadline, next_scan, next_idle_scan) if t is not None]
            self._wake.clear()
            # A timer that sets the event, not wait_for: no task per wake-up (one a request).
            timer = loop.call_later(max(min(waits), 0), self._wake.set) if waits else None
            try:
                await self._wake.wait()
            finally:
                if timer is not None:
                    timer.cancel()

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, freethreading_compatible=True
"""The proxy's compiled forwarding path: a thread of its own (C, no GIL) moves the bytes
of the connection pairs given to it (`add`), in whole frames, pairing each response with
its request; the proxy's event loop takes the finished exchanges, unpaired frames and
ended connections in batches (`take`), when `notify_fd` becomes readable. _forward.h has
the loop and its limits; fastkwire.proxy._server decides which connections come here.
Linux only: `AVAILABLE` is False elsewhere (and every call refuses).
"""
import threading

from libc.stdlib cimport malloc, free
from libc.string cimport memcpy
from cpython.bytes cimport PyBytes_FromStringAndSize

cdef extern from "_forward.h" nogil:
    int FW_AVAILABLE
    int FW_MAX_ITEMS
    ctypedef struct fw_item:
        fw_item *next
        int kind, side, api_key, version, expects, has_cid, reason
        long long conn, a, b, c, unanswered
        int cid
        double wall, start, end
        char *req
        size_t req_len
        char *resp
        size_t resp_len
    ctypedef struct fw_cmd:
        fw_cmd *next
        int kind, cfd, ufd
        long long conn
        char *initial[2]
        size_t initial_len[2]
    ctypedef struct fw_state:
        int notify_fd
        short min_version[256]
        short max_version[256]
    fw_state *fw_start(size_t, size_t, size_t, size_t, double)
    int fw_run(fw_state *)
    void fw_command(fw_state *, fw_cmd *)
    fw_item *fw_take(fw_state *)
    size_t fw_in_flight(fw_state *)
    size_t fw_queued(fw_state *, size_t *)
    void fw_free_item(fw_item *)
    void fw_destroy(fw_state *)

AVAILABLE = bool(FW_AVAILABLE)
MAX_ITEMS = FW_MAX_ITEMS  # items queued for `take` at most
EXCHANGE, UNPAIRED_REQUEST, UNPAIRED_RESPONSE, TOKEN, CLOSED, HOLDING = 1, 2, 3, 4, 5, 6
(CLIENT_CLOSED, UPSTREAM_CLOSED, BAD_PREFIX, MID_FRAME, TIMEOUT, OS_ERROR, TWICE_LIMIT,
 ABORTED, UNDELIVERED) = 1, 2, 3, 4, 5, 6, 7, 8, 9
# Limits past these mean no limit: they keep the loop's sums (twice max_buffered, a frame
# plus a read) far from wrapping. A frame's size is an int32.
cdef size_t _MAX_FRAME = 0x7FFFFFFF
cdef size_t _MAX_LIMIT = (<size_t>1) << 60


cdef char *_copy(bytes data) except? NULL:
    cdef Py_ssize_t n = len(data)
    if n == 0:
        return NULL
    cdef char *p = <char *>malloc(n)
    if p == NULL:
        raise MemoryError()
    memcpy(p, <char *>data, n)
    return p


cdef class Forwarder:
    """The forwarding thread and its connections. Limits as the proxy's options (bytes,
    requests, seconds); `versions`: {api key: (min, max)} of the requests known (what ends
    the raw SASL tokens of a v0 handshake)."""

    cdef fw_state *st
    cdef object lock

    def __cinit__(self, size_t max_frame, size_t max_pending, size_t max_in_flight,
                  size_t max_buffered, double frame_timeout, dict versions):
        if not FW_AVAILABLE:
            raise OSError("the compiled forwarding path needs Linux (epoll)")
        cdef short low[256]
        cdef short high[256]
        cdef long long k, lo, hi
        for name, value in (("max_frame", max_frame), ("max_pending", max_pending),
                            ("max_in_flight", max_in_flight), ("max_buffered", max_buffered)):
            if value == 0:
                raise ValueError(f"{name}: must be at least 1")
        if not frame_timeout > 0:
            raise ValueError(f"frame_timeout: must be more than 0 seconds, not {frame_timeout!r}")
        max_frame = min(max_frame, _MAX_FRAME)
        max_pending = min(max_pending, _MAX_LIMIT)
        max_in_flight = min(max_in_flight, _MAX_LIMIT)
        max_buffered = min(max_buffered, _MAX_LIMIT)
        for key in range(256):
            low[key] = high[key] = -1
        # Each value becomes a C integer once, then is checked: an int subclass's
        # comparisons never decide an index.
        for key, (first, last) in versions.items():
            try:
                k, lo, hi = key, first, last
            except (OverflowError, TypeError):
                raise ValueError(
                    f"versions: {key!r}: ({first!r}, {last!r}) is not an api key and two versions"
                ) from None
            if not (0 <= k < 256 and 0 <= lo <= hi <= 0x7FFF):
                raise ValueError(
                    f"versions: api key {k} with versions {lo}-{hi}: keys are 0-255 and "
                    "versions 0-32767, the first no more than the last"
                )
            low[k] = <short>lo
            high[k] = <short>hi
        self.lock = threading.Lock()
        self.st = fw_start(max_frame, max_pending, max_in_flight, max_buffered, frame_timeout)
        if self.st == NULL:
            raise MemoryError()
        memcpy(self.st.min_version, low, sizeof(low))
        memcpy(self.st.max_version, high, sizeof(high))
        cdef int err = fw_run(self.st)
        if err:
            fw_destroy(self.st)
            self.st = NULL
            raise OSError(err, "cannot start the forwarding thread")

    @property
    def notify_fd(self):
        """Readable when items wait to be taken (an eventfd: read 8 bytes to reset it)."""
        with self.lock:
            self._check()
            return self.st.notify_fd

    cdef _check(self):
        if self.st == NULL:
            raise ValueError("the forwarder is closed")

    def add(self, long long conn, int client_fd, int upstream_fd, bytes client_early=b"",
            bytes upstream_early=b""):
        """Hands a connection pair over: once this returns, the forwarder owns (and
        closes) both descriptors, and forwards first what was read from each before
        (`*_early`). When it raises, both are still the caller's."""
        if client_fd < 0 or upstream_fd < 0 or client_fd == upstream_fd:
            raise ValueError(
                f"client_fd, upstream_fd: two open descriptors, not {client_fd} and {upstream_fd}"
            )
        cdef fw_cmd *cmd = <fw_cmd *>malloc(sizeof(fw_cmd))
        if cmd == NULL:
            raise MemoryError()
        cmd.next = NULL
        cmd.kind = 1
        cmd.conn = conn
        cmd.cfd = client_fd
        cmd.ufd = upstream_fd
        cmd.initial[0] = cmd.initial[1] = NULL
        cmd.initial_len[0] = cmd.initial_len[1] = 0
        try:
            cmd.initial[0] = _copy(client_early)
            cmd.initial_len[0] = len(client_early)
            cmd.initial[1] = _copy(upstream_early)
            cmd.initial_len[1] = len(upstream_early)
            with self.lock:
                self._check()
                fw_command(self.st, cmd)
        except BaseException:
            free(cmd.initial[0])
            free(cmd.initial[1])
            free(cmd)
            raise

    cdef _command(self, int kind, long long conn):
        cdef fw_cmd *cmd = <fw_cmd *>malloc(sizeof(fw_cmd))
        if cmd == NULL:
            raise MemoryError()
        cmd.next = NULL
        cmd.kind = kind
        cmd.conn = conn
        cmd.cfd = cmd.ufd = -1
        cmd.initial[0] = cmd.initial[1] = NULL
        cmd.initial_len[0] = cmd.initial_len[1] = 0
        with self.lock:
            if self.st == NULL:
                free(cmd)
                return
            fw_command(self.st, cmd)

    def abort(self, long long conn):
        """Ends one connection (an item CLOSED, ABORTED follows)."""
        self._command(2, conn)

    def abort_all(self):
        self._command(3, 0)

    @property
    def in_flight(self):
        """Requests awaiting answers, on all its connections."""
        with self.lock:
            return 0 if self.st == NULL else fw_in_flight(self.st)

    @property
    def queued(self):
        """(bytes, items) waiting to be taken: what the items cost, frames included."""
        cdef size_t items = 0, cost = 0
        with self.lock:
            if self.st != NULL:
                cost = fw_queued(self.st, &items)
        return cost, items

    def take(self):
        """What has happened since the last call, oldest first, as tuples:
        (EXCHANGE, conn, api_key, version, correlation_id, expects_response, wall time,
        start, end or None, request, response or None);
        (UNPAIRED_REQUEST | UNPAIRED_RESPONSE | TOKEN, conn, side, frame, correlation id or None);
        (CLOSED, conn, side, reason, a, b, c, unanswered); (HOLDING, conn, bytes held)."""
        cdef fw_item *items = NULL
        cdef fw_item *it
        cdef fw_item *nxt
        with self.lock:
            if self.st == NULL:
                return []
            items = fw_take(self.st)
        out = []
        it = items
        try:
            while it != NULL:
                if it.kind == EXCHANGE:
                    out.append((
                        EXCHANGE, it.conn, it.api_key, it.version, it.cid, bool(it.expects),
                        it.wall, it.start, None if it.end < 0 else it.end,
                        PyBytes_FromStringAndSize(it.req, it.req_len),
                        None if it.resp == NULL else PyBytes_FromStringAndSize(it.resp, it.resp_len),
                    ))
                elif it.kind == CLOSED:
                    out.append((CLOSED, it.conn, it.side, it.reason, it.a, it.b, it.c, it.unanswered))
                elif it.kind == HOLDING:
                    out.append((HOLDING, it.conn, it.a))
                else:
                    out.append((
                        it.kind, it.conn, it.side,
                        PyBytes_FromStringAndSize(it.req, it.req_len),
                        it.cid if it.has_cid else None,
                    ))
                nxt = it.next
                fw_free_item(it)
                it = nxt
        finally:
            while it != NULL:  # a MemoryError part way: the rest is freed, not leaked
                nxt = it.next
                fw_free_item(it)
                it = nxt
        return out

    def close(self):
        """Ends every connection and stops the thread; what was not taken is dropped."""
        with self.lock:
            if self.st != NULL:
                with nogil:
                    fw_destroy(self.st)
                self.st = NULL

    def __dealloc__(self):
        if self.st != NULL:
            fw_destroy(self.st)
            self.st = NULL

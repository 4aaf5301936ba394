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
    void fw_free_item(fw_item *)
    void fw_destroy(fw_state *)

AVAILABLE = bool(FW_AVAILABLE)
EXCHANGE, UNPAIRED_REQUEST, UNPAIRED_RESPONSE, TOKEN, CLOSED, HOLDING = 1, 2, 3, 4, 5, 6
(CLIENT_CLOSED, UPSTREAM_CLOSED, BAD_PREFIX, MID_FRAME, TIMEOUT, OS_ERROR, TWICE_LIMIT,
 ABORTED) = 1, 2, 3, 4, 5, 6, 7, 8


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
        self.lock = threading.Lock()
        self.st = fw_start(max_frame, max_pending, max_in_flight, max_buffered, frame_timeout)
        if self.st == NULL:
            raise MemoryError()
        for key, (low, high) in versions.items():
            if 0 <= key < 256 and 0 <= low <= high <= 0x7FFF:
                self.st.min_version[key] = low
                self.st.max_version[key] = high
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
        """Hands a connection pair over: the forwarder owns (and closes) both descriptors,
        and forwards first what was read from each before (`*_early`)."""
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

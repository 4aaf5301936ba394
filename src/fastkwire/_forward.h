/* The proxy's compiled forwarding path (Linux): one thread, one epoll loop over every
 * connection pair it carries, the GIL never taken. Bytes move between the client's socket
 * and the upstream's in whole frames, in order, byte for byte; each request's header is
 * read in place, responses are paired with requests by correlation id, and each finished
 * exchange (both frames copied, its times) goes on a queue that Python takes in batches
 * (fw_take), off the forwarding path. Nothing here calls Python: _forward.pyx turns the
 * queue's items into Python values.
 *
 * Memory, per connection: one buffer per direction holding the whole frames not yet
 * written (reading stops past FW_HIGH_WATER of them, or while a large answer moved out of
 * it, shared with its exchange's item, is written) and the frame being read (at most
 * max_frame + 4 bytes: a size prefix is checked before it sizes anything, and a buffer
 * grows only as bytes arrive, never to what a prefix announces); the requests awaiting
 * answers (reading the client stops past max_pending bytes or max_in_flight requests).
 * Across connections: the partial frames, pending requests and queued exchanges are
 * `held`, each item counted at what it costs (FW_ITEM_COST beyond its frames); past
 * max_buffered, clients are not read between frames until the queue drains, and one whose
 * frame takes the total past twice the limit ends. The out queue holds at most
 * max_buffered and FW_MAX_ITEMS items: past either, whole frames already read wait in
 * their buffer unsplit and no upstream is read, until Python takes the queue.
 *
 * A peer's end of stream closes its socket; the connection ends once the whole frames it
 * sent before have reached the other side (that side's end or error ends it sooner, and
 * taking nothing for frame_timeout ends it as FW_UNDELIVERED). An end is seen while the
 * peer's reading is paused too (EPOLLRDHUP, asked for until seen once): a client's
 * requests are then read past the pending limits, and whatever that side holds must keep
 * going to the other side, or the same frame_timeout ends the pair. */
#ifndef FASTKWIRE_FORWARD_H
#define FASTKWIRE_FORWARD_H

#ifdef __linux__
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define FW_AVAILABLE 1
#define FW_READ_SIZE (256 * 1024)
#define FW_HIGH_WATER (64 * 1024)
#define FW_MIN_BUF (64 * 1024)
#define FW_MOVE_MIN (1024 * 1024) /* a response this large is moved to its item, not copied */
#define FW_API_KEYS 256
/* What one queued or pending item costs beyond its frames: the item and the allocator's
 * overhead of it and of its copies. An empty frame costs this much, not 4 bytes. */
#define FW_ITEM_COST (sizeof(fw_item) + 48)
/* Items queued for Python at most (its batch: a tuple and a bytes object each), whatever
 * their bytes; past it, as past max_buffered, the loop stops reading and splitting. */
#define FW_MAX_ITEMS 16384

enum { FW_EXCHANGE = 1, FW_UNPAIRED_REQUEST, FW_UNPAIRED_RESPONSE, FW_TOKEN, FW_CLOSED, FW_HOLDING };
struct fw_item;
static size_t fw_cost(const struct fw_item *it);
enum {
    FW_CLIENT_CLOSED = 1,
    FW_UPSTREAM_CLOSED,
    FW_BAD_PREFIX,   /* a = size, b = stream offset */
    FW_MID_FRAME,    /* a = bytes held, b = frame size or -1 (no whole prefix), c = offset */
    FW_TIMEOUT,
    FW_OS_ERROR,     /* a = errno */
    FW_TWICE_LIMIT,  /* a = bytes held */
    FW_ABORTED,
    FW_UNDELIVERED,  /* a = bytes the side did not take after the other side's end */
};

/* A large response's storage, moved out of its side's buffer rather than copied: the side
 * writes the frame from it while the exchange's item holds it for Python, and whichever
 * lets go last frees it. */
typedef struct {
    int refs; /* atomic */
    char *mem;
} fw_block;

static void fw_release(fw_block *b) {
    if (b && __atomic_sub_fetch(&b->refs, 1, __ATOMIC_ACQ_REL) == 0) {
        free(b->mem);
        free(b);
    }
}

typedef struct fw_item {
    struct fw_item *next;
    int kind;
    int side;               /* 0: the client's, 1: the upstream's */
    int64_t conn;
    int api_key, version, expects;
    int32_t cid;
    int has_cid;
    double wall, start, end; /* end < 0: no response */
    char *req;
    size_t req_len;
    char *resp;
    size_t resp_len;
    fw_block *resp_block;    /* resp points into it (a moved frame), or NULL: resp is its own */
    int64_t a, b, c;         /* FW_CLOSED: the reason's numbers; a = reason code in `side`'s */
    int reason;
    int64_t unanswered;
} fw_item;

typedef struct {
    int fd;
    char *buf;
    size_t cap, len, sent, parsed; /* [sent, parsed): whole frames to write; [parsed, len): partial */
    int64_t offset;                /* stream offset of buf[0] */
    int eof;
    uint32_t events;               /* registered with epoll */
    int partial;                   /* the frame-timeout clock (PeerClock in Python) */
    double waited, since;          /* since < 0: not reading */
    size_t held;                   /* bytes of the partial frame counted in `held` */
    int stalled;                   /* whole frames wait in buf for room (pending, queue) */
    fw_block *out;                 /* a large frame moved out of buf, written before [sent, parsed) */
    const char *out_data;
    size_t out_len, out_sent;
    int hup;                       /* its peer's end of stream was seen (EPOLLRDHUP) before it
                                      was read: while it waits unread, what this side holds
                                      must go on to the other side (fw_watch) */
    size_t hup_left;               /* bytes still to deliver at the last watch */
    double hup_since;              /* when they last went down */
} fw_side;

typedef struct fw_conn {
    int64_t id;
    fw_side s[2];
    struct { struct fw_conn *conn; int side; } tag[2];
    fw_item *pend_head, *pend_tail;
    size_t pend_count, pend_bytes;
    int raw_sasl;
    int dead;
    int closing;                   /* -1, or the side whose peer ended: its fd is closed and
                                      what it sent before goes on to the other side */
    size_t drain_left;             /* bytes still to deliver at the last watch */
    double drain_since;            /* when they last went down */
    struct fw_conn *prev, *next;
} fw_conn;

typedef struct fw_cmd {
    struct fw_cmd *next;
    int kind; /* 1 add, 2 abort one, 3 abort all, 4 stop */
    int64_t conn;
    int cfd, ufd;
    char *initial[2];
    size_t initial_len[2];
} fw_cmd;

typedef struct {
    int epfd, wake_fd, notify_fd;
    pthread_t thread;
    int started;
    pthread_mutex_t lock;
    fw_item *out_head, *out_tail; /* under lock */
    size_t queued;                /* cost of the out queue's items, frames included (atomic) */
    size_t queued_items;          /* items in the out queue (atomic) */
    fw_cmd *cmd_head, *cmd_tail;  /* under lock */
    size_t held;                  /* partial frames and pending requests, items' cost included
                                     (the loop's thread) */
    size_t in_flight;             /* requests awaiting answers, all connections (atomic) */
    int holding;                  /* clients held for room (atomic) */
    int queue_held;               /* upstreams not read, or frames not split, until the out
                                     queue drains below its limits (atomic) */
    fw_conn *conns;
    fw_conn *dead;                /* ended this turn: freed at its end (epoll may name them) */
    size_t max_frame, max_pending, max_in_flight, max_buffered;
    double frame_timeout;
    int16_t min_version[FW_API_KEYS], max_version[FW_API_KEYS];
} fw_state;

static double fw_now(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int32_t fw_be32(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (int32_t)(((uint32_t)u[0] << 24) | ((uint32_t)u[1] << 16) | ((uint32_t)u[2] << 8) | u[3]);
}

static inline int16_t fw_be16(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    return (int16_t)(((uint16_t)u[0] << 8) | u[1]);
}

static size_t fw_in_flight(fw_state *st) {
    return __atomic_load_n(&st->in_flight, __ATOMIC_RELAXED);
}

/* The out queue's cost in bytes, and its items in *items. */
static size_t fw_queued(fw_state *st, size_t *items) {
    *items = __atomic_load_n(&st->queued_items, __ATOMIC_RELAXED);
    return __atomic_load_n(&st->queued, __ATOMIC_RELAXED);
}

static size_t fw_total(fw_state *st) {
    return st->held + __atomic_load_n(&st->queued, __ATOMIC_RELAXED);
}

/* ------------------------------------------------------------------ the out queue */

static void fw_free_item(fw_item *it) {
    free(it->req);
    if (it->resp_block)
        fw_release(it->resp_block);
    else
        free(it->resp);
    free(it);
}

static void fw_push(fw_state *st, fw_item *it) {
    int was_empty;
    it->next = NULL;
    pthread_mutex_lock(&st->lock);
    was_empty = st->out_head == NULL;
    if (st->out_tail)
        st->out_tail->next = it;
    else
        st->out_head = it;
    st->out_tail = it;
    __atomic_add_fetch(&st->queued, fw_cost(it), __ATOMIC_RELAXED);
    __atomic_add_fetch(&st->queued_items, 1, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&st->lock);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t r = write(st->notify_fd, &one, sizeof one);
        (void)r;
    }
}

/* Every queued item, oldest first; the caller frees them (fw_free_item). Python's thread. */
static fw_item *fw_take(fw_state *st) {
    fw_item *items;
    size_t bytes = 0, count = 0;
    pthread_mutex_lock(&st->lock);
    items = st->out_head;
    st->out_head = st->out_tail = NULL;
    pthread_mutex_unlock(&st->lock);
    for (fw_item *it = items; it; it = it->next) {
        bytes += fw_cost(it);
        count++;
    }
    __atomic_sub_fetch(&st->queued, bytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&st->queued_items, count, __ATOMIC_RELAXED);
    if (bytes && (__atomic_load_n(&st->holding, __ATOMIC_RELAXED) ||
                  __atomic_load_n(&st->queue_held, __ATOMIC_RELAXED))) {
        uint64_t one = 1;
        ssize_t r = write(st->wake_fd, &one, sizeof one); /* room again, perhaps */
        (void)r;
    }
    return items;
}

static size_t fw_cost(const fw_item *it) {
    return FW_ITEM_COST + it->req_len + it->resp_len;
}

/* Whether items may be added to the out queue: it is within max_buffered and MAX_ITEMS.
 * Only the event loop's taking drains it, so whatever waits for it goes on. With what is
 * held too (`total`): whether a client may be read between frames. */
static int fw_queue_room(fw_state *st, int total) {
    size_t bytes = total ? fw_total(st) : __atomic_load_n(&st->queued, __ATOMIC_RELAXED);
    return bytes <= st->max_buffered &&
           __atomic_load_n(&st->queued_items, __ATOMIC_RELAXED) < FW_MAX_ITEMS;
}

static fw_item *fw_new_item(int kind, fw_conn *c, int side) {
    fw_item *it = calloc(1, sizeof *it);
    if (it) {
        it->kind = kind;
        it->conn = c->id;
        it->side = side;
        it->end = -1.0;
    }
    return it;
}

/* A frame as an item of its own (unpaired, a SASL token); 0 when memory ran out. */
static int fw_push_frame(fw_state *st, fw_conn *c, int kind, int side, const char *f, size_t n,
                         int has_cid, int32_t cid) {
    fw_item *it = fw_new_item(kind, c, side);
    if (!it || !(it->req = malloc(n ? n : 1))) {
        free(it);
        return 0;
    }
    memcpy(it->req, f, n);
    it->req_len = n;
    it->has_cid = has_cid;
    it->cid = cid;
    it->wall = fw_now(CLOCK_REALTIME);
    fw_push(st, it);
    return 1;
}

/* ------------------------------------------------------------------ frames */

static int fw_uvarint(const char *f, size_t n, uint64_t *pos, uint64_t *value) {
    uint64_t v = 0;
    for (int shift = 0; shift < 35; shift += 7) {
        if (*pos >= n)
            return 0;
        unsigned char b = (unsigned char)f[(*pos)++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) {
            *value = v;
            return 1;
        }
    }
    return 0;
}

/* Whether a Produce request gets a response: acks != 0, or acks unreadable (as
 * _frames.produce_acks: the client id, then the header's tags from v9, the transactional id
 * from v3, then acks). */
static int fw_produce_expects(const char *f, size_t n, int version) {
    uint64_t pos, count, x, size;
    if (n < 14)
        return 1;
    int16_t idlen = fw_be16(f + 12);
    if (idlen < 0)
        pos = 14;
    else if (14 + (size_t)idlen <= n)
        pos = 14 + (uint64_t)idlen;
    else
        return 1;
    if (version >= 9) {
        if (!fw_uvarint(f, n, &pos, &count))
            return 1;
        if (count > 64)
            count = 64;
        for (uint64_t i = 0; i < count; i++) {
            if (!fw_uvarint(f, n, &pos, &x) || !fw_uvarint(f, n, &pos, &size))
                return 1;
            pos += size;
        }
        if (!fw_uvarint(f, n, &pos, &x))
            return 1;
        if (x > 1)
            pos += x - 1;
    } else if (version >= 3) {
        if (pos + 2 > n)
            return 1;
        int16_t t = fw_be16(f + pos);
        pos += 2 + (t > 0 ? (uint64_t)t : 0);
    }
    if (pos > n || n - pos < 2)
        return 1;
    return fw_be16(f + pos) != 0;
}

static int fw_looks_like_request(fw_state *st, const char *f, size_t n) {
    if (n < 12)
        return 0;
    int key = fw_be16(f + 4), version = fw_be16(f + 6);
    if (key < 0 || key >= FW_API_KEYS || st->min_version[key] < 0)
        return 0;
    return st->min_version[key] <= version && version <= st->max_version[key];
}

/* A whole request frame arrived from the client (it is forwarded whatever it is). 0: out of
 * memory. */
static int fw_request(fw_state *st, fw_conn *c, const char *f, size_t n, double now) {
    if (c->raw_sasl && !fw_looks_like_request(st, f, n))
        return fw_push_frame(st, c, FW_TOKEN, 0, f, n, 0, 0);
    c->raw_sasl = 0;
    if (n < 12)
        return fw_push_frame(st, c, FW_UNPAIRED_REQUEST, 0, f, n, 0, 0);
    fw_item *it = fw_new_item(FW_EXCHANGE, c, 0);
    if (!it || !(it->req = malloc(n))) {
        free(it);
        return 0;
    }
    memcpy(it->req, f, n);
    it->req_len = n;
    it->api_key = fw_be16(f + 4);
    it->version = fw_be16(f + 6);
    it->cid = fw_be32(f + 8);
    it->expects = it->api_key != 0 || fw_produce_expects(f, n, it->version);
    it->wall = fw_now(CLOCK_REALTIME);
    it->start = now;
    if (it->expects) {
        if (c->pend_tail)
            c->pend_tail->next = it;
        else
            c->pend_head = it;
        c->pend_tail = it;
        c->pend_count++;
        __atomic_add_fetch(&st->in_flight, 1, __ATOMIC_RELAXED);
        c->pend_bytes += n;
        st->held += FW_ITEM_COST + n;
    } else {
        it->end = now;
        fw_push(st, it);
    }
    return 1;
}

/* A whole response frame arrived from the upstream; `moved`: its storage, shared with the
 * item rather than copied (fw_move_out). 0: out of memory. */
static int fw_response(fw_state *st, fw_conn *c, const char *f, size_t n, double now, fw_block *moved) {
    fw_item *it = NULL, *prev = NULL;
    int32_t cid = 0;
    if (n >= 8) {
        cid = fw_be32(f + 4);
        for (it = c->pend_head; it && it->cid != cid; it = it->next)
            prev = it;
    }
    if (!it)
        return fw_push_frame(st, c, c->raw_sasl ? FW_TOKEN : FW_UNPAIRED_RESPONSE, 1, f, n,
                             n >= 8, cid);
    if (moved) {
        __atomic_add_fetch(&moved->refs, 1, __ATOMIC_RELAXED);
        it->resp_block = moved;
        it->resp = (char *)f;
    } else {
        if (!(it->resp = malloc(n)))
            return 0;
        memcpy(it->resp, f, n);
    }
    it->resp_len = n;
    if (it->api_key == 17 && it->version == 0 && n >= 10 && f[8] == 0 && f[9] == 0)
        c->raw_sasl = 1; /* a v0 SaslHandshake: raw tokens follow, without Kafka headers */
    if (prev)
        prev->next = it->next;
    else
        c->pend_head = it->next;
    if (c->pend_tail == it)
        c->pend_tail = prev;
    c->pend_count--;
    __atomic_sub_fetch(&st->in_flight, 1, __ATOMIC_RELAXED);
    c->pend_bytes -= it->req_len;
    st->held -= FW_ITEM_COST + it->req_len;
    it->end = now;
    fw_push(st, it); /* queued before the response is written: the exchange is known first */
    return 1;
}

/* ------------------------------------------------------------------ connections */

static void fw_end(fw_state *st, fw_conn *c, int reason, int side, int64_t a, int64_t b, int64_t cc) {
    if (c->dead)
        return;
    c->dead = 1;
    int64_t unanswered = 0;
    for (fw_item *it = c->pend_head, *next; it; it = next) {
        next = it->next;
        st->held -= FW_ITEM_COST + it->req_len;
        unanswered++;
        fw_push(st, it); /* no response: the connection ended first */
    }
    c->pend_head = c->pend_tail = NULL;
    __atomic_sub_fetch(&st->in_flight, c->pend_count, __ATOMIC_RELAXED);
    c->pend_count = c->pend_bytes = 0;
    for (int i = 0; i < 2; i++) {
        st->held -= c->s[i].held;
        c->s[i].held = 0;
        if (c->s[i].fd >= 0) {
            epoll_ctl(st->epfd, EPOLL_CTL_DEL, c->s[i].fd, NULL);
            close(c->s[i].fd);
            c->s[i].fd = -1;
        }
        free(c->s[i].buf);
        c->s[i].buf = NULL;
        fw_release(c->s[i].out);
        c->s[i].out = NULL;
    }
    if (c->prev)
        c->prev->next = c->next;
    else
        st->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    c->prev = NULL;
    c->next = st->dead;
    st->dead = c;
    fw_item *it = fw_new_item(FW_CLOSED, c, side);
    if (it) { /* without memory for it, Python learns of the end when the proxy closes */
        it->reason = reason;
        it->a = a;
        it->b = b;
        it->c = cc;
        it->unanswered = unanswered;
        fw_push(st, it);
    }
}

/* Writes data[*sent, len) to side i's peer, as much as it takes: 1 when all of it went,
 * 0 when the socket is full or the connection ended. */
static int fw_send(fw_state *st, fw_conn *c, int i, const char *data, size_t *sent, size_t len) {
    while (*sent < len) {
        ssize_t w = send(c->s[1 - i].fd, data + *sent, len - *sent, MSG_NOSIGNAL);
        if (w > 0) {
            *sent += (size_t)w;
        } else if (w < 0 && errno == EINTR) {
            continue;
        } else if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        } else {
            fw_end(st, c, FW_OS_ERROR, 1 - i, w < 0 ? errno : EPIPE, 0, 0);
            return 0;
        }
    }
    return 1;
}

/* Writes side i's whole frames to the other side's socket, as much as it takes. */
static void fw_flush(fw_state *st, fw_conn *c, int i) {
    fw_side *s = &c->s[i];
    if (c->s[1 - i].fd < 0) { /* that peer has ended: what was for it is dropped */
        fw_release(s->out);
        s->out = NULL;
        s->sent = s->parsed;
    } else {
        if (s->out) { /* a moved frame goes first */
            if (!fw_send(st, c, i, s->out_data, &s->out_sent, s->out_len))
                return;
            fw_release(s->out);
            s->out = NULL;
        }
        if (!fw_send(st, c, i, s->buf, &s->sent, s->parsed))
            return;
    }
    if (s->sent == s->len) { /* nothing held: start at the buffer's beginning again */
        s->offset += (int64_t)s->len;
        s->sent = s->parsed = s->len = 0;
        if (s->cap > FW_MIN_BUF) { /* a large frame's storage is not kept */
            free(s->buf);
            s->buf = NULL;
            s->cap = 0;
        }
    }
}

/* Clients are not read between frames until what is held drains (answers, the queue). */
static void fw_hold_clients(fw_state *st, fw_conn *c) {
    if (!__atomic_load_n(&st->holding, __ATOMIC_RELAXED)) {
        __atomic_store_n(&st->holding, 1, __ATOMIC_RELAXED);
        fw_item *it = fw_new_item(FW_HOLDING, c, 0);
        if (it) {
            it->a = (int64_t)fw_total(st);
            fw_push(st, it);
        }
    }
}

/* Whether the client's requests wait for answers (max_pending, max_in_flight). Not once
 * its end is seen: its answers go nowhere, and what it sent before is bounded (by its
 * socket's buffer). */
static int fw_pending_full(fw_state *st, fw_conn *c) {
    if (c->s[0].hup || c->s[0].eof)
        return 0;
    return c->pend_bytes > st->max_pending || c->pend_count >= st->max_in_flight;
}

static int fw_may_read(fw_state *st, fw_conn *c, int i) {
    fw_side *s = &c->s[i];
    /* once the upstream has ended nothing more goes to it; once the client has, answers
     * are still read (and dropped) so that the requests it sent before can go out */
    if (c->closing == 1 || s->eof || s->stalled || s->out || s->parsed - s->sent >= FW_HIGH_WATER)
        return 0;
    if (i == 1 && !fw_queue_room(st, 0)) {
        /* answers, stray or not, wait in the socket until the event loop takes the queue */
        __atomic_store_n(&st->queue_held, 1, __ATOMIC_RELAXED);
        return 0;
    }
    if (i == 0 && !s->hup) { /* one that ended is read to its end: its FIN frees what it holds */
        if (fw_pending_full(st, c))
            return 0; /* a client that has ended is read to its end: its answers go nowhere */
        if (s->len == s->parsed && !fw_queue_room(st, 1)) {
            fw_hold_clients(st, c);
            return 0;
        }
    }
    return 1;
}

static void fw_closed_by(fw_state *st, fw_conn *c, int i);

/* Bytes side i still has to deliver to the other side: whole frames, split or not. */
static size_t fw_undelivered(fw_side *s) {
    size_t n = s->parsed - s->sent + (s->out ? s->out_len - s->out_sent : 0);
    if (s->stalled)
        n += s->len - s->parsed; /* whole frames first; a partial one at the end is never sent */
    return n;
}

/* Registers what each socket of `c` waits for now, and runs the frame clocks; a closing
 * connection whose ended side has delivered everything it sent ends here. */
static void fw_update(fw_state *st, fw_conn *c, double now) {
    if (c->dead)
        return;
    if (c->closing >= 0 && !fw_undelivered(&c->s[c->closing])) {
        fw_closed_by(st, c, c->closing);
        return;
    }
    for (int i = 0; i < 2; i++) {
        fw_side *s = &c->s[i];
        if (s->fd < 0)
            continue;
        int reading = fw_may_read(st, c, i);
        uint32_t ev = (reading ? EPOLLIN : 0) | (s->hup ? 0 : EPOLLRDHUP) |
                      (c->s[1 - i].parsed > c->s[1 - i].sent || c->s[1 - i].out ? EPOLLOUT : 0);
        if (reading && s->since < 0)
            s->since = now;
        else if (!reading && s->since >= 0) {
            if (s->partial)
                s->waited += now - s->since;
            s->since = -1.0;
        }
        if (ev != s->events) {
            struct epoll_event e = {.events = ev, .data.ptr = &c->tag[i]};
            epoll_ctl(st->epfd, EPOLL_CTL_MOD, s->fd, &e);
            s->events = ev;
        }
    }
}

/* Makes room in side i's buffer for a read; 0 when memory ran out. */
static int fw_room(fw_state *st, fw_side *s) {
    if (s->sent && s->cap - s->len < FW_READ_SIZE / 4) {
        memmove(s->buf, s->buf + s->sent, s->len - s->sent);
        s->offset += (int64_t)s->sent;
        s->len -= s->sent;
        s->parsed -= s->sent;
        s->sent = 0;
    }
    if (s->cap - s->len >= FW_READ_SIZE / 4 && s->buf)
        return 1;
    /* Grown as bytes arrive, never to an announced size; at most a frame, what waits to
     * be written (< FW_HIGH_WATER before a read) and one read. */
    size_t limit = st->max_frame + 4 + FW_HIGH_WATER + FW_READ_SIZE;
    size_t want = s->cap * 2;
    if (want < s->len + FW_READ_SIZE)
        want = s->len + FW_READ_SIZE;
    if (want < FW_MIN_BUF)
        want = FW_MIN_BUF;
    if (want > limit)
        want = limit;
    if (want <= s->cap)
        return 1;
    char *buf = realloc(s->buf, want);
    if (!buf)
        return 0;
    s->buf = buf;
    s->cap = want;
    return 1;
}

/* Moves the whole frame of n bytes at `parsed` (nothing before it left to write) out of side
 * s's buffer into a block written from `out`; what follows it goes to a buffer of its own
 * (at most one read). The block, or NULL without memory (nothing changed). */
static fw_block *fw_move_out(fw_side *s, size_t n) {
    size_t tail = s->len - s->parsed - n, cap = tail > FW_MIN_BUF ? tail : FW_MIN_BUF;
    fw_block *b = malloc(sizeof *b);
    char *buf = malloc(cap);
    if (!b || !buf) {
        free(b);
        free(buf);
        return NULL;
    }
    memcpy(buf, s->buf + s->parsed + n, tail);
    b->refs = 1;
    b->mem = s->buf;
    s->out = b;
    s->out_data = s->buf + s->parsed;
    s->out_len = n;
    s->out_sent = 0;
    s->offset += (int64_t)(s->parsed + n);
    s->buf = buf;
    s->cap = cap;
    s->len = tail;
    s->sent = s->parsed = 0;
    return b;
}

/* Splits what side i holds into frames, from `parsed` on; 0 when the connection ended. */
static int fw_split(fw_state *st, fw_conn *c, int i, double now) {
    fw_side *s = &c->s[i];
    int completed = 0, full = 0;
    s->stalled = 0;
    while (s->len - s->parsed >= 4) {
        if (i == 0 && fw_pending_full(st, c)) {
            full = 1; /* what was read waits (one read's worth at most) for answers */
            break;
        }
        int32_t size = fw_be32(s->buf + s->parsed);
        if (size < 0 || (size_t)size > st->max_frame) {
            fw_flush(st, c, i);
            fw_end(st, c, FW_BAD_PREFIX, i, size, s->offset + (int64_t)s->parsed, 0);
            return 0;
        }
        size_t n = (size_t)size + 4;
        if (s->len - s->parsed < n)
            break;
        if (!fw_queue_room(st, 0)) { /* a whole frame waits for the event loop to take the queue */
            __atomic_store_n(&st->queue_held, 1, __ATOMIC_RELAXED);
            full = 1;
            break;
        }
        /* A large answer with nothing before it left to write leaves the buffer for its
         * item: held once, not twice (and with a slow client, not a third time while
         * Python copies it). */
        fw_block *moved = NULL;
        if (i == 1 && n >= FW_MOVE_MIN && s->sent == s->parsed && !s->out)
            moved = fw_move_out(s, n); /* NULL without memory for it: copied instead */
        const char *f = moved ? s->out_data : s->buf + s->parsed;
        if (!(i == 0 ? fw_request(st, c, f, n, now) : fw_response(st, c, f, n, now, moved))) {
            fw_end(st, c, FW_OS_ERROR, i, ENOMEM, 0, 0);
            return 0;
        }
        if (!moved)
            s->parsed += n;
        completed = 1;
    }
    s->stalled = full;
    size_t rest = s->len - s->parsed, partial = full ? 0 : rest;
    st->held += rest - s->held;
    s->held = rest;
    /* The clock: only time spent reading while part of a frame was held counts. */
    if (s->since >= 0 && s->partial)
        s->waited += now - s->since;
    if (completed || !partial)
        s->waited = 0.0;
    s->partial = partial != 0;
    s->since = now;
    if (partial && fw_total(st) > 2 * st->max_buffered) {
        fw_end(st, c, FW_TWICE_LIMIT, i, (int64_t)fw_total(st), 0, 0);
        return 0;
    }
    return 1;
}

static void fw_closed_by(fw_state *st, fw_conn *c, int i) {
    fw_side *s = &c->s[i];
    if (s->len > s->parsed) {
        size_t have = s->len - s->parsed;
        int64_t need = have >= 4 ? fw_be32(s->buf + s->parsed) : -1;
        fw_end(st, c, FW_MID_FRAME, i, (int64_t)have, need, s->offset + (int64_t)s->parsed);
    } else {
        fw_end(st, c, i == 0 ? FW_CLIENT_CLOSED : FW_UPSTREAM_CLOSED, i, 0, 0, 0);
    }
}

/* Side i's peer ended its stream: its socket closes, and the connection ends once what it
 * sent before has reached the other side (fw_update), or that side is gone, or it took
 * nothing for frame_timeout (fw_watch). */
static void fw_ended(fw_state *st, fw_conn *c, int i, double now) {
    fw_side *s = &c->s[i];
    s->eof = 1;
    if (c->closing >= 0) { /* the other side had ended first: this one is gone too */
        fw_end(st, c, i == 0 ? FW_CLIENT_CLOSED : FW_UPSTREAM_CLOSED, i, 0, 0, 0);
        return;
    }
    c->closing = i;
    epoll_ctl(st->epfd, EPOLL_CTL_DEL, s->fd, NULL);
    close(s->fd);
    s->fd = -1;
    s->events = 0;
    if (i == 0 && s->stalled && !fw_split(st, c, 0, now))
        return;
    fw_flush(st, c, i);
    c->drain_left = fw_undelivered(s);
    c->drain_since = now;
}

static void fw_read(fw_state *st, fw_conn *c, int i, double now) {
    fw_side *s = &c->s[i];
    if (c->closing == 1) { /* the client hung up while the upstream's last frames go out */
        fw_end(st, c, FW_CLIENT_CLOSED, i, 0, 0, 0);
        return;
    }
    if (!fw_room(st, s)) {
        fw_end(st, c, FW_OS_ERROR, i, ENOMEM, 0, 0);
        return;
    }
    size_t space = s->cap - s->len;
    if (space > FW_READ_SIZE)
        space = FW_READ_SIZE;
    if (space == 0)
        return; /* full until the other side takes its frames (a hang-up waits for that) */
    ssize_t r = recv(s->fd, s->buf + s->len, space, 0);
    if (r < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
            return;
        fw_end(st, c, FW_OS_ERROR, i, errno, 0, 0);
        return;
    }
    if (r == 0) {
        fw_ended(st, c, i, now);
        return;
    }
    s->len += (size_t)r;
    if (fw_split(st, c, i, now))
        fw_flush(st, c, i);
    /* answers made room: requests read meanwhile go on */
    if (i == 1 && !c->dead && c->s[0].len > c->s[0].parsed && fw_split(st, c, 0, now))
        fw_flush(st, c, 0);
}

/* Side i's peer ended its stream, seen before the end was read (its reading paused): a
 * client's requests are no longer held by the pending limits (what it sent before its end
 * is bounded by its socket's buffer, and its answers go nowhere), and from now on what
 * this side holds must go on to the other side, something every frame_timeout (fw_watch):
 * otherwise a peer that ended while the other side took nothing held the pair for ever. */
static void fw_peer_ended(fw_state *st, fw_conn *c, int i, double now) {
    fw_side *s = &c->s[i];
    s->hup = 1;
    s->hup_left = fw_undelivered(s);
    s->hup_since = now;
    if (c->closing >= 0)
        return; /* the other side's end already runs its clock */
    if (i == 0 && s->stalled && fw_split(st, c, 0, now))
        fw_flush(st, c, 0);
}

static void fw_add(fw_state *st, fw_cmd *cmd) {
    fw_conn *c = calloc(1, sizeof *c);
    if (!c) {
        close(cmd->cfd);
        close(cmd->ufd);
        fw_conn tmp = {.id = cmd->conn};
        fw_item *it = fw_new_item(FW_CLOSED, &tmp, 0);
        if (it) {
            it->reason = FW_OS_ERROR;
            it->a = ENOMEM;
            fw_push(st, it);
        }
        return;
    }
    c->id = cmd->conn;
    c->closing = -1;
    c->s[0].fd = cmd->cfd;
    c->s[1].fd = cmd->ufd;
    double now = fw_now(CLOCK_MONOTONIC);
    for (int i = 0; i < 2; i++) {
        c->tag[i].conn = c;
        c->tag[i].side = i;
        c->s[i].since = -1.0;
        fcntl(c->s[i].fd, F_SETFL, fcntl(c->s[i].fd, F_GETFL) | O_NONBLOCK);
    }
    c->next = st->conns;
    if (st->conns)
        st->conns->prev = c;
    st->conns = c;
    for (int i = 0; i < 2; i++) {
        struct epoll_event e = {.events = 0, .data.ptr = &c->tag[i]};
        if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, c->s[i].fd, &e) < 0) {
            fw_end(st, c, FW_OS_ERROR, i, errno, 0, 0);
            return;
        }
    }
    for (int i = 0; i < 2 && !c->dead; i++) {
        if (cmd->initial_len[i]) { /* read before the pair came here (the client's: before
                                      its upstream was connected) */
            fw_side *s = &c->s[i];
            s->buf = cmd->initial[i];
            s->cap = s->len = cmd->initial_len[i];
            cmd->initial[i] = NULL;
            if (fw_split(st, c, i, now))
                fw_flush(st, c, i);
        }
    }
    fw_update(st, c, now);
}

static void fw_watch(fw_state *st, double now) {
    for (fw_conn *c = st->conns, *next; c; c = next) {
        next = c->next;
        if (c->closing >= 0) { /* the other side must take something every frame_timeout */
            size_t left = fw_undelivered(&c->s[c->closing]);
            if (left < c->drain_left) {
                c->drain_left = left;
                c->drain_since = now;
            } else if (now - c->drain_since > st->frame_timeout) {
                fw_end(st, c, FW_UNDELIVERED, 1 - c->closing, (int64_t)left, 0, 0);
            }
            continue;
        }
        for (int i = 0; i < 2 && !c->dead; i++) {
            fw_side *s = &c->s[i];
            if (!s->hup || s->fd < 0)
                continue;
            size_t left = fw_undelivered(s);
            if (left < s->hup_left || !left) {
                s->hup_left = left;
                s->hup_since = now;
            } else if (now - s->hup_since > st->frame_timeout) {
                fw_end(st, c, FW_UNDELIVERED, 1 - i, (int64_t)left, 0, 0);
            }
        }
        for (int i = 0; i < 2 && !c->dead; i++) {
            fw_side *s = &c->s[i];
            double waited = s->waited + (s->since >= 0 ? now - s->since : 0.0);
            if (s->partial && waited > st->frame_timeout)
                fw_end(st, c, FW_TIMEOUT, i, 0, 0, 0);
        }
    }
}

#define FW_BATCH 64

static void *fw_loop(void *arg) {
    fw_state *st = arg;
    struct epoll_event events[FW_BATCH];
    double interval = st->frame_timeout / 4 < 1.0 ? st->frame_timeout / 4 : 1.0;
    double next_watch = fw_now(CLOCK_MONOTONIC) + interval;
    for (;;) {
        int n = epoll_wait(st->epfd, events, FW_BATCH, (int)(interval * 1000) + 1);
        double now = fw_now(CLOCK_MONOTONIC);
        int stop = 0;
        for (int k = 0; k < n; k++) {
            if (events[k].data.ptr == NULL) { /* commands */
                uint64_t v;
                ssize_t r = read(st->wake_fd, &v, sizeof v);
                (void)r;
                pthread_mutex_lock(&st->lock);
                fw_cmd *cmds = st->cmd_head;
                st->cmd_head = st->cmd_tail = NULL;
                pthread_mutex_unlock(&st->lock);
                for (fw_cmd *cmd = cmds, *next; cmd; cmd = next) {
                    next = cmd->next;
                    if (cmd->kind == 1) {
                        fw_add(st, cmd);
                    } else if (cmd->kind == 2 || cmd->kind == 3 || cmd->kind == 4) {
                        for (fw_conn *c = st->conns, *cn; c; c = cn) {
                            cn = c->next;
                            if (cmd->kind != 2 || c->id == cmd->conn) {
                                fw_end(st, c, FW_ABORTED, 0, 0, 0, 0);
                            }
                        }
                        stop |= cmd->kind == 4;
                    }
                    free(cmd->initial[0]);
                    free(cmd->initial[1]);
                    free(cmd);
                }
                continue;
            }
            struct { fw_conn *conn; int side; } *tag = events[k].data.ptr;
            fw_conn *c = tag->conn;
            int i = tag->side;
            if (c->dead)
                continue;
            uint32_t ev = events[k].events;
            if (ev & EPOLLOUT)
                fw_flush(st, c, 1 - i);
            if (!c->dead && (ev & EPOLLERR)) {
                int err = 0;
                socklen_t len = sizeof err;
                getsockopt(c->s[i].fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err) {
                    fw_end(st, c, FW_OS_ERROR, i, err, 0, 0);
                    continue;
                }
            }
            /* a hang-up is reported whatever was asked: read on to the end of the stream */
            if (!c->dead && (((ev & EPOLLIN) && fw_may_read(st, c, i)) || (ev & (EPOLLHUP | EPOLLERR))))
                fw_read(st, c, i, now);
            if (!c->dead && (ev & EPOLLRDHUP) && !c->s[i].hup)
                fw_peer_ended(st, c, i, now); /* once: it is no longer asked for */
            fw_update(st, c, now);
        }
        while (st->dead) {
            fw_conn *c = st->dead;
            st->dead = c->next;
            free(c);
        }
        if (stop)
            return NULL;
        int again = 0;
        if (__atomic_load_n(&st->holding, __ATOMIC_RELAXED) && fw_queue_room(st, 1)) {
            __atomic_store_n(&st->holding, 0, __ATOMIC_RELAXED);
            again = 1;
        }
        if (__atomic_load_n(&st->queue_held, __ATOMIC_RELAXED) && fw_queue_room(st, 0)) {
            __atomic_store_n(&st->queue_held, 0, __ATOMIC_RELAXED);
            again = 1;
        }
        if (again) { /* room again: every connection splits what waits, and reads what it may */
            for (fw_conn *c = st->conns, *cn; c; c = cn) {
                cn = c->next;
                for (int i = 0; i < 2 && !c->dead; i++)
                    if (c->s[i].stalled && fw_split(st, c, i, now))
                        fw_flush(st, c, i);
                fw_update(st, c, now);
            }
            while (st->dead) { /* a split may have ended one */
                fw_conn *c = st->dead;
                st->dead = c->next;
                free(c);
            }
        }
        if (now >= next_watch) {
            fw_watch(st, now);
            next_watch = now + interval;
        }
    }
}

/* A new forwarder with its thread running; NULL (errno set) when it cannot start. */
static fw_state *fw_start(size_t max_frame, size_t max_pending, size_t max_in_flight,
                          size_t max_buffered, double frame_timeout) {
    fw_state *st = calloc(1, sizeof *st);
    if (!st)
        return NULL;
    st->max_frame = max_frame;
    st->max_pending = max_pending;
    st->max_in_flight = max_in_flight;
    st->max_buffered = max_buffered;
    st->frame_timeout = frame_timeout;
    for (int k = 0; k < FW_API_KEYS; k++)
        st->min_version[k] = st->max_version[k] = -1;
    pthread_mutex_init(&st->lock, NULL);
    st->epfd = epoll_create1(EPOLL_CLOEXEC);
    st->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    st->notify_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (st->epfd < 0 || st->wake_fd < 0 || st->notify_fd < 0)
        goto fail;
    struct epoll_event e = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(st->epfd, EPOLL_CTL_ADD, st->wake_fd, &e) < 0)
        goto fail;
    return st;
fail:;
    int err = errno;
    if (st->epfd >= 0)
        close(st->epfd);
    if (st->wake_fd >= 0)
        close(st->wake_fd);
    if (st->notify_fd >= 0)
        close(st->notify_fd);
    pthread_mutex_destroy(&st->lock);
    free(st);
    errno = err;
    return NULL;
}

static int fw_run(fw_state *st) {
    int err = pthread_create(&st->thread, NULL, fw_loop, st);
    st->started = err == 0;
    return err;
}

static void fw_command(fw_state *st, fw_cmd *cmd) {
    uint64_t one = 1;
    cmd->next = NULL;
    pthread_mutex_lock(&st->lock);
    if (st->cmd_tail)
        st->cmd_tail->next = cmd;
    else
        st->cmd_head = cmd;
    st->cmd_tail = cmd;
    pthread_mutex_unlock(&st->lock);
    ssize_t r = write(st->wake_fd, &one, sizeof one);
    (void)r;
}

/* Stops the thread (every connection ends) and frees everything. Python's thread. */
static void fw_destroy(fw_state *st) {
    if (st->started) {
        fw_cmd *cmd = calloc(1, sizeof *cmd);
        if (cmd) {
            cmd->kind = 4;
            fw_command(st, cmd);
            pthread_join(st->thread, NULL);
        }
        /* without memory for the command the thread keeps running: st is leaked, not freed */
        else
            return;
    }
    for (fw_item *it = fw_take(st), *next; it; it = next) {
        next = it->next;
        fw_free_item(it);
    }
    for (fw_cmd *cmd = st->cmd_head, *next; cmd; cmd = next) {
        next = cmd->next;
        if (cmd->kind == 1) {
            close(cmd->cfd);
            close(cmd->ufd);
        }
        free(cmd->initial[0]);
        free(cmd->initial[1]);
        free(cmd);
    }
    while (st->dead) {
        fw_conn *c = st->dead;
        st->dead = c->next;
        free(c);
    }
    close(st->epfd);
    close(st->wake_fd);
    close(st->notify_fd);
    pthread_mutex_destroy(&st->lock);
    free(st);
}

#else /* not Linux: the asyncio path only; these stubs let the module build and refuse */
#include <stddef.h>
#define FW_AVAILABLE 0
#define FW_MAX_ITEMS 0
typedef struct fw_item {
    struct fw_item *next;
    int kind, side, api_key, version, expects, has_cid, reason;
    long long conn, a, b, c, unanswered;
    int cid;
    double wall, start, end;
    char *req, *resp;
    size_t req_len, resp_len;
} fw_item;
typedef struct fw_cmd {
    struct fw_cmd *next;
    int kind, cfd, ufd;
    long long conn;
    char *initial[2];
    size_t initial_len[2];
} fw_cmd;
typedef struct {
    int notify_fd;
    short min_version[256], max_version[256];
    size_t held, queued;
} fw_state;
static fw_state *fw_start(size_t a, size_t b, size_t c, size_t d, double e) { return NULL; }
static int fw_run(fw_state *st) { return -1; }
static void fw_command(fw_state *st, fw_cmd *cmd) {}
static fw_item *fw_take(fw_state *st) { return NULL; }
static size_t fw_in_flight(fw_state *st) { return 0; }
static size_t fw_queued(fw_state *st, size_t *items) { *items = 0; return 0; }
static void fw_free_item(fw_item *it) {}
static void fw_destroy(fw_state *st) {}
#endif
#endif

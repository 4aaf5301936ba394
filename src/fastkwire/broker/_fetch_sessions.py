"""Incremental fetch sessions (KIP-227), as Kafka's FetchSessionCache / FetchManager keep
them: a client that asks for a session (session id 0, epoch 0) gets a session id in its
full answer; after that it sends, at each next epoch, only the partitions whose fetch
position changed and those it forgets, and is answered only the partitions with records,
an error, or a moved high watermark or log start.

Request metadata, as Kafka reads it:
- epoch -1 (FINAL): no session; one named is closed. Fetch v0-6 is always sessionless;
- epoch 0 (INITIAL): a full fetch that opens a new session (closing the one named), when
  the cache has room or can evict one;
- any other epoch: an incremental fetch of the session named, at the epoch it expects
  (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH otherwise).

The cache holds `max.incremental.fetch.session.cache.slots` sessions (1000). When it is
full, a new session may evict the least recently used one if that was unused for
`eviction_ms` (Kafka's 120 s), else the least valuable (unprivileged before privileged,
then fewest partitions, then lowest id) of those old enough, when the new one is worth
more (a follower's over a consumer's, or more partitions). Plain objects on a clock given
in milliseconds: `FetchSessionCache.new_context(request, version, now_ms)`.
"""

import random

INVALID_SESSION_ID = 0
INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_CACHE_SLOTS = 1000  # Kafka's max.incremental.fetch.session.cache.slots
DEFAULT_EVICTION_MS = 120_000  # Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
# Partitions all sessions of a node may hold together (Kafka has no such bound; here a
# client naming millions of partitions cannot make the cache keep them): past it a new
# session is not opened, and a session grown past it is closed.
DEFAULT_MAX_CACHED_PARTITIONS = 1_000_000
_INT32_MAX = 0x7FFFFFFF


def next_epoch(epoch):
    """The epoch a session expects after `epoch` (it wraps to 1, never to 0 or -1)."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == _INT32_MAX else epoch + 1


class SessionPartition:
    """A partition to read: its request parameters, and (in a session) the high watermark
    and log start last sent for it, so that an unchanged partition can be left out."""

    __slots__ = (
        "topic",
        "topic_id",
        "partition",
        "fetch_offset",
        "max_bytes",
        "leader_epoch",
        "high_watermark",
        "log_start",
    )

    def __init__(self, topic, topic_id, partition, fetch_offset, max_bytes, leader_epoch):
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.leader_epoch = leader_epoch
        self.high_watermark = -1  # never sent: its first answer includes it
        self.log_start = -1

    def update_request(self, other):
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.leader_epoch = other.leader_epoch

    def must_respond(self, error, high_watermark, log_start, records):
        """Whether its answer goes out in an incremental answer; remembers what was sent.
        An error is always sent, and forgets the high watermark so that the partition is
        sent again once the error is gone."""
        must = bool(records)
        if self.high_watermark != high_watermark:
            self.high_watermark = high_watermark
            must = True
        if self.log_start != log_start:
            self.log_start = log_start
            must = True
        if error:
            self.high_watermark = -1
            must = True
        return must


def _key(uses_topic_ids, topic, topic_id, partition):
    return (topic_id if uses_topic_ids else topic, partition)


def request_partitions(request, uses_topic_ids):
    """{key: SessionPartition} of the request's topics, in order (a repeated one: the last)."""
    out = {}
    for t in request.topics:
        for p in t.partitions:
            out[_key(uses_topic_ids, t.topic, t.topic_id, p.partition)] = SessionPartition(
                t.topic,
                t.topic_id,
                p.partition,
                p.fetch_offset,
                p.partition_max_bytes,
                p.current_leader_epoch,
            )
    return out


class FetchSession:
    __slots__ = (
        "id",
        "privileged",
        "partitions",
        "uses_topic_ids",
        "created_ms",
        "last_used_ms",
        "epoch",
        "cached_size",
        "evictable_by_all",
        "evictable_by_privileged",
    )

    def __init__(self, session_id, privileged, partitions, uses_topic_ids, now_ms):
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions  # {key: SessionPartition}, in the order they are read
        self.uses_topic_ids = uses_topic_ids
        self.created_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        # As of the last touch (Kafka's evictable trees are kept at touch time too).
        self.cached_size = 0
        self.evictable_by_all = False
        self.evictable_by_privileged = not privileged

    def update(self, wanted, forgotten):
        """An incremental request: partitions added or changed, and those forgotten."""
        for key, part in wanted.items():
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = part
            else:
                cached.update_request(part)
        for key in forgotten:
            self.partitions.pop(key, None)

    def sent_last(self, key):
        """A partition just sent goes to the end, so that the others are read first next
        time (no partition starves under max_bytes)."""
        self.partitions[key] = self.partitions.pop(key)


class FetchContext:
    """What one Fetch reads (`partitions`, in order) and how its answer is made
    (`respond`). `error` is a session error name (the answer then carries nothing)."""

    __slots__ = ("kind", "error", "partitions", "_cache", "_session", "_epoch", "_meta")

    def __init__(self, kind, partitions=(), error=None, cache=None, session=None, meta=None):
        self.kind = kind  # "sessionless", "full", "incremental" or "error"
        self.error = error
        self.partitions = list(partitions)
        self._cache = cache
        self._session = session
        self._epoch = session.epoch if session is not None else None
        self._meta = meta  # a full fetch's (privileged, uses topic ids)

    def respond(self, answers, now_ms):
        """(error name or None, session id, the answers to send) from `answers`, a list of
        tuples (SessionPartition, error name or None, high watermark, log start, records,
        ...) in `partitions`' order: a full fetch opens its session here, an incremental one
        leaves out what has not changed."""
        if self.kind == "error":
            return self.error, INVALID_SESSION_ID, []
        if self.kind == "sessionless":
            return None, INVALID_SESSION_ID, answers
        if self.kind == "full":
            privileged, uses_topic_ids = self._meta
            session_id = self._cache.maybe_create(now_ms, privileged, uses_topic_ids, answers)
            return None, session_id, answers
        session = self._session
        if session.epoch != self._epoch:  # another request of the session came in between
            return "INVALID_FETCH_SESSION_EPOCH", session.id, []
        sent = []
        for answer in answers:
            part, error, high_watermark, log_start, records = answer[:5]
            key = _key(session.uses_topic_ids, part.topic, part.topic_id, part.partition)
            if key in session.partitions and part.must_respond(
                error, high_watermark, log_start, records
            ):
                sent.append(answer)
                session.sent_last(key)
        return None, session.id, sent


class FetchSessionCache:
    """One broker's fetch sessions (Kafka's FetchSessionCache and FetchManager)."""

    def __init__(
        self,
        max_entries=DEFAULT_CACHE_SLOTS,
        eviction_ms=DEFAULT_EVICTION_MS,
        rng=None,
        max_cached_partitions=DEFAULT_MAX_CACHED_PARTITIONS,
    ):
        if max_entries < 0:
            raise ValueError(f"max_entries: at least 0, not {max_entries}")
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self.max_cached_partitions = max_cached_partitions
        self.sessions = {}  # id -> FetchSession
        self.evictions = 0
        self.total_partitions = 0  # of all sessions, as of their last touch
        self._rng = rng or random.Random()

    def __len__(self):
        return len(self.sessions)

    def get(self, session_id):
        return self.sessions.get(session_id)

    def remove(self, session_id):
        session = self.sessions.pop(session_id, None)
        if session is not None:
            self.total_partitions -= session.cached_size
        return session

    def new_context(self, request, version, now_ms):
        """The FetchContext of `request` (decoded at `version`): updates the session of an
        incremental fetch and moves it to its next epoch, as Kafka does on arrival."""
        uses_topic_ids = version >= 13
        wanted = request_partitions(request, uses_topic_ids)
        if version < 7:
            return FetchContext("sessionless", wanted.values())
        session_id, epoch = request.session_id, request.session_epoch
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                self.remove(session_id)  # a full fetch closes the session it names
            if epoch == FINAL_EPOCH:
                return FetchContext("sessionless", wanted.values())
            privileged = max(request.replica_id, request.replica_state.replica_id) >= 0
            return FetchContext(
                "full", wanted.values(), cache=self, meta=(privileged, uses_topic_ids)
            )
        session = self.sessions.get(session_id)
        if session is None:
            return FetchContext("error", error="FETCH_SESSION_ID_NOT_FOUND")
        if session.epoch != epoch:
            return FetchContext("error", error="INVALID_FETCH_SESSION_EPOCH")
        if session.uses_topic_ids != uses_topic_ids:  # v13+ against a session of names, or not
            return FetchContext("error", error="FETCH_SESSION_TOPIC_ID_ERROR")
        forgotten = [
            _key(uses_topic_ids, t.topic, t.topic_id, p)
            for t in request.forgotten_topics_data
            for p in t.partitions
        ]
        session.update(wanted, forgotten)
        if not session.partitions:  # nothing left: closed, and this fetch is sessionless
            self.remove(session.id)
            return FetchContext("sessionless", wanted.values())
        grown = self.total_partitions - session.cached_size + len(session.partitions)
        if grown > self.max_cached_partitions:  # the client starts over with a full fetch
            self.remove(session.id)
            return FetchContext("error", error="FETCH_SESSION_ID_NOT_FOUND")
        self.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        return FetchContext("incremental", session.partitions.values(), session=session)

    # ---- the cache

    def maybe_create(self, now_ms, privileged, uses_topic_ids, answers):
        """A new session for a full fetch's `answers` (those partitions as sent): its id,
        or 0 when the cache is full and nothing can be evicted for it."""
        size = len(answers)
        if self.total_partitions + size > self.max_cached_partitions:
            return INVALID_SESSION_ID
        if len(self.sessions) >= self.max_entries and not self._try_evict(privileged, size, now_ms):
            return INVALID_SESSION_ID
        partitions = {}
        for part, error, high_watermark, log_start, records, *_ in answers:
            key = _key(uses_topic_ids, part.topic, part.topic_id, part.partition)
            part.must_respond(error, high_watermark, log_start, records)  # what was sent
            partitions[key] = part
        session_id = self._new_id()
        session = FetchSession(session_id, privileged, partitions, uses_topic_ids, now_ms)
        self.sessions[session_id] = session
        self.touch(session, now_ms)
        return session_id

    def touch(self, session, now_ms):
        session.last_used_ms = now_ms
        self.total_partitions += len(session.partitions) - session.cached_size
        session.cached_size = len(session.partitions)
        old = now_ms - session.created_ms > self.eviction_ms
        session.evictable_by_privileged = not session.privileged or old
        session.evictable_by_all = old

    def _new_id(self):
        while True:
            session_id = self._rng.randint(1, _INT32_MAX - 1)
            if session_id not in self.sessions:
                return session_id

    def _try_evict(self, privileged, size, now_ms):
        if not self.sessions:
            return False
        lru = min(self.sessions.values(), key=lambda s: (s.last_used_ms, s.id))
        if now_ms - lru.last_used_ms > self.eviction_ms:
            return self._evict(lru)
        candidates = [
            s
            for s in self.sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        least = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
        # The newcomer's key has id 0: it must be worth strictly more than the least.
        if (privileged, size, 0) < (least.privileged, least.cached_size, least.id):
            return False
        return self._evict(least)

    def _evict(self, session):
        self.remove(session.id)
        self.evictions += 1
        return True

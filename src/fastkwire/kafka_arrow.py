"""Kafka topics into Arrow: `read_kafka` (a pyarrow.Table) and `iter_kafka` (RecordBatches).

    import fastkwire
    table = fastkwire.read_kafka("orders", bootstrap_servers="broker:9092")

The rows have Ray Data's `read_kafka` schema (`SCHEMA`: offset, key, value, topic,
partition, timestamp, timestamp_type, headers). Fetch answers are read into Arrow buffers
by `_arrow_rows.batches_to_arrow`, without a Python object per record.

How a read goes:
1. `plan(...)` asks Metadata for the partitions and their leaders and ListOffsets for the
   offsets ("earliest", timestamps), and takes "latest" from a Fetch answer's high
   watermark (its last stable offset under read_committed): some brokers answer
   ListOffsets "latest" with the base offset of the last batch, not the log end. It
   returns one `OffsetRange(topic, partition, start, end)` per partition (end exclusive),
   split into pieces of at most `records_per_range` offsets when asked (the unit of work of
   the Ray and Dask readers).
2. `read_ranges(ranges, ...)` fetches them: one thread and connection per leader, every
   leader at once, each sending its next Fetch as soon as the last one is in (while the
   previous answer is converted), handing over one answer per leader at a time, so
   memory is bounded by `block_size` per leader (each answer holds a quarter of it).
   NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH and the like refresh the metadata and send
   the partition to its new leader; OFFSET_OUT_OF_RANGE is a `KafkaReadError` naming the
   partition and the offsets it holds; a broker that goes away is retried once after a
   metadata refresh, then an error naming it and the partitions it was serving.
A read that fails raises: no partial table is returned as if whole.

The security options are the connection layer's (`fastkwire.connection.Security`), named as
kafka-python names them: security_protocol, ssl_context, ssl_cafile, ssl_certfile,
ssl_keyfile, ssl_password, ssl_check_hostname, sasl_mechanism, sasl_plain_username,
sasl_plain_password, sasl_oauth_token_provider.
"""

import datetime as _dt
import queue
import struct
import threading
import time

from . import FetchRequest, ListOffsetsRequest, MetadataRequest
from ._arrow_rows import SCHEMA, batches_to_arrow, empty_batch
from .admin.flows import parse_servers
from .connection import Connection, Security, format_address
from .connection_errors import (
    KafkaClientError,
    KafkaConnectionError,
    KafkaSecurityError,
    KafkaTimeoutError,
)
from .error_codes import by_name, lookup

__all__ = [
    "read_kafka",
    "iter_kafka",
    "plan",
    "read_ranges",
    "OffsetRange",
    "KafkaReadError",
    "SCHEMA",
    "DEFAULT_BLOCK_SIZE",
]

DEFAULT_BLOCK_SIZE = 16 << 20
# The connection layer's security options (fastkwire.connection.Security), kafka-python's names.
SECURITY_OPTIONS = (
    "security_protocol",
    "ssl_context",
    "ssl_cafile",
    "ssl_certfile",
    "ssl_keyfile",
    "ssl_password",
    "ssl_check_hostname",
    "sasl_mechanism",
    "sasl_plain_username",
    "sasl_plain_password",
    "sasl_oauth_token_provider",
)
FETCH_MAX_WAIT_MS = 500
ANSWER_SHARE = 4  # a Fetch answer holds at most block_size / ANSWER_SHARE bytes
MAX_LEADER_RETRIES = 10
MAX_BROKER_RETRIES = 1  # a broker that fails is tried once more after a metadata refresh
RETRY_BACKOFF = 0.2
MAX_EMPTY_FETCHES = 20  # answers in a row without a batch below the range's end
EARLIEST, LATEST = -2, -1
READ_COMMITTED = {"read_uncommitted": 0, "read_committed": 1}

NONE = 0
OFFSET_OUT_OF_RANGE = by_name("OFFSET_OUT_OF_RANGE").code
UNKNOWN_TOPIC_OR_PARTITION = by_name("UNKNOWN_TOPIC_OR_PARTITION").code
# Answers after which the partition's leader is looked up again.
LEADER_MOVED = frozenset(
    by_name(n).code
    for n in (
        "NOT_LEADER_OR_FOLLOWER",
        "LEADER_NOT_AVAILABLE",
        "FENCED_LEADER_EPOCH",
        "UNKNOWN_LEADER_EPOCH",
        "UNKNOWN_TOPIC_OR_PARTITION",
        "REPLICA_NOT_AVAILABLE",
        "KAFKA_STORAGE_ERROR",
        "NOT_ENOUGH_REPLICAS",
        "OFFSET_NOT_AVAILABLE",
    )
)

_LENGTH = struct.Struct(">i")


class KafkaReadError(KafkaClientError):
    """A topic or partition that cannot be read as asked (unknown, out of range, its broker
    gone). `.topic` and `.partition` say which (None when the error is not about one)."""

    def __init__(self, message, error=None, topic=None, partition=None):
        super().__init__(message, error)
        self.topic, self.partition = topic, partition


class OffsetRange:
    """Offsets [start, end) of one partition: a unit of work. Picklable, for workers."""

    __slots__ = ("topic", "partition", "start", "end")

    def __init__(self, topic, partition, start, end):
        self.topic, self.partition, self.start, self.end = topic, partition, start, end

    def __len__(self):
        return max(self.end - self.start, 0)

    def __repr__(self):
        return f"OffsetRange({self.topic!r}, {self.partition}, {self.start}, {self.end})"

    def __eq__(self, other):
        if not isinstance(other, OffsetRange):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self):
        return hash(self._key())

    def _key(self):
        return (self.topic, self.partition, self.start, self.end)

    def __reduce__(self):
        return (OffsetRange, self._key())

    def split(self, size):
        """Pieces of at most `size` offsets (compacted gaps make some hold fewer records)."""
        if size is None or len(self) <= size:
            return [self]
        return [
            OffsetRange(self.topic, self.partition, lo, min(lo + size, self.end))
            for lo in range(self.start, self.end, size)
        ]


def spread(ranges, tasks):
    """The offsets of `ranges`, in order, cut into `tasks` lists of ranges holding about
    the same number of offsets each (fewer lists when there are fewer offsets); a range is
    split where a list's share ends, so each offset is in exactly one list. The work of
    one task per CPU (fastkwire.ray's default)."""
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"tasks must be a positive int, not {tasks!r}")
    total = sum(len(r) for r in ranges)
    out, current, room = [], [], 0
    done = 0  # offsets handed out to the finished lists and `current`
    for r in ranges:
        lo = r.start
        while lo < r.end:
            if room == 0:
                if current:
                    out.append(current)
                # the next list's share: what is left over the lists still to make
                room = -(-(total - done) // (tasks - len(out)))
                current = []
            hi = min(r.end, lo + room)
            current.append(OffsetRange(r.topic, r.partition, lo, hi))
            room -= hi - lo
            done += hi - lo
            lo = hi
    if current:
        out.append(current)
    return out


def _name(topic, partition):
    return f"topic {topic!r} partition {partition}"


# ---------------------------------------------------------------- arguments


class ClientOptions:
    """bootstrap servers, security and timeouts, checked once; picklable (the options, not
    the TLS context, travel to workers, which build their own)."""

    def __init__(
        self,
        bootstrap_servers,
        client_id="fastkwire",
        request_timeout_ms=30000,
        **security,
    ):
        if not bootstrap_servers:
            raise ValueError("bootstrap_servers is empty: give HOST:PORT, or a list of them")
        unknown = sorted(set(security) - set(SECURITY_OPTIONS))
        if unknown:
            raise TypeError(
                f"unknown option {', '.join(unknown)} (the security options are "
                f"{', '.join(SECURITY_OPTIONS)}; also client_id, request_timeout_ms)"
            )
        self.servers = parse_servers(bootstrap_servers)
        self.bootstrap_servers = bootstrap_servers
        self.client_id = client_id
        self.request_timeout_ms = request_timeout_ms
        self.security_options = security
        self._security = Security(**security)

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_security"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._security = Security(**self.security_options)

    def connect(self, host, port):
        return Connection(
            host,
            port,
            client_id=self.client_id,
            security=self._security,
            request_timeout_ms=self.request_timeout_ms,
        )

    def bootstrap(self):
        """A connection to the first bootstrap server that answers."""
        failures = []
        for host, port in self.servers:
            try:
                return self.connect(host, port)
            except KafkaSecurityError:
                raise
            except KafkaClientError as exc:
                failures.append(str(exc))
        raise KafkaConnectionError("no bootstrap server could be reached: " + "; ".join(failures))


def _isolation(isolation_level):
    if isolation_level not in READ_COMMITTED:
        raise ValueError(
            f"isolation_level must be 'read_uncommitted' or 'read_committed', not {isolation_level!r}"
        )
    return READ_COMMITTED[isolation_level]


def _check_offset(value, name, word):
    """An int >= 0, `word` ("earliest"/"latest"), a datetime, or a {topic: {partition: ...}}."""
    if isinstance(value, dict):
        for topic, parts in value.items():
            if not isinstance(parts, dict):
                raise TypeError(f"{name}[{topic!r}] must map partitions to offsets")
            for p, v in parts.items():
                _check_offset(v, f"{name}[{topic!r}][{p!r}]", word)
        return
    if isinstance(value, bool) or not (isinstance(value, (int, _dt.datetime)) or value == word):
        raise ValueError(f"{name} must be an offset (int), {word!r} or a datetime, not {value!r}")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")


def _for(value, topic, partition, word):
    if isinstance(value, dict):
        return value.get(topic, {}).get(partition, word)
    return value


def _millis(when):
    if when.tzinfo is None:  # as Ray does: naive datetimes are UTC
        when = when.replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp() * 1000)


# ---------------------------------------------------------------- metadata and offsets


class Cluster:
    """The partitions' leaders, from Metadata asked on the planning connection."""

    def __init__(self, options):
        self.options = options
        self.conn = options.bootstrap()
        self.brokers = {}
        self.leaders = {}  # (topic, partition) -> (node, leader epoch)

    def close(self):
        self.conn.close()

    def refresh(self, topics):
        """Ask Metadata for `topics`; {topic: sorted partitions}. Unknown topics raise."""
        request = MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        try:
            answer = self.conn.request(request, self.conn.version_for(MetadataRequest, lowest=4))
        except (KafkaConnectionError, KafkaTimeoutError):
            # The broker asked before may be the one that went away: bootstrap again.
            self.conn.close()
            self.conn = self.options.bootstrap()
            answer = self.conn.request(request, self.conn.version_for(MetadataRequest, lowest=4))
        self.brokers = {b.node_id: (b.host, b.port) for b in answer.brokers}
        found = {}
        for t in answer.topics:
            if t.error_code == UNKNOWN_TOPIC_OR_PARTITION or (
                t.error_code == NONE and not t.partitions
            ):
                raise KafkaReadError(
                    f"topic {t.name!r} does not exist on {self.conn.address}",
                    lookup(UNKNOWN_TOPIC_OR_PARTITION),
                    topic=t.name,
                )
            if t.error_code != NONE:
                raise KafkaReadError(
                    f"Metadata for topic {t.name!r} failed: {lookup(t.error_code)}",
                    lookup(t.error_code),
                    topic=t.name,
                )
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = (p.leader_id, p.leader_epoch)
            found[t.name] = sorted(p.partition_index for p in t.partitions)
        for t in topics:
            if t not in found:
                raise KafkaReadError(
                    f"topic {t!r} is not in {self.conn.address}'s Metadata answer", topic=t
                )
        return found

    def leader(self, topic, partition):
        node, epoch = self.leaders[(topic, partition)]
        if node < 0 or node not in self.brokers:
            raise KafkaReadError(
                f"{_name(topic, partition)} has no leader now (node {node})",
                lookup(by_name("LEADER_NOT_AVAILABLE").code),
                topic,
                partition,
            )
        return node, epoch

    def connect(self, node):
        host, port = self.brokers[node]
        return self.options.connect(host, port)


def _by_leader(cluster, keys):
    groups = {}
    for topic, partition in keys:
        node, _ = cluster.leader(topic, partition)
        groups.setdefault(node, []).append((topic, partition))
    return groups


def _list_offsets(conn, keys, timestamp_of, isolation):
    """{(topic, partition): offset} of ListOffsets for each key's timestamp (-2, -1 or ms)."""
    version = conn.version_for(ListOffsetsRequest, lowest=1)
    topics = {}
    for topic, partition in keys:
        topics.setdefault(topic, []).append(
            ListOffsetsRequest.ListOffsetsPartition(
                partition_index=partition, timestamp=timestamp_of[(topic, partition)]
            )
        )
    answer = conn.request(
        ListOffsetsRequest(
            replica_id=-1,
            isolation_level=isolation,
            topics=[
                ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=ps)
                for t, ps in topics.items()
            ],
        ),
        version,
    )
    out = {}
    for t in answer.topics:
        for p in t.partitions:
            if p.error_code != NONE:
                raise KafkaReadError(
                    f"ListOffsets for {_name(t.name, p.partition_index)} failed on "
                    f"{conn.address}: {lookup(p.error_code)}",
                    lookup(p.error_code),
                    t.name,
                    p.partition_index,
                )
            out[(t.name, p.partition_index)] = p.offset
    return out


def _log_ends(conn, at, isolation, epochs):
    """{key: (high watermark or last stable offset, log start)} from one Fetch at `at`."""
    answer = _fetch(conn, {k: (o, 1) for k, o in at.items()}, isolation, epochs, min_bytes=0)
    out = {}
    for t in answer.responses:
        for p in t.partitions:
            key = (t.topic, p.partition_index)
            if p.error_code not in (NONE, OFFSET_OUT_OF_RANGE):
                raise KafkaReadError(
                    f"Fetch for {_name(*key)} failed on {conn.address}: {lookup(p.error_code)}",
                    lookup(p.error_code),
                    *key,
                )
            end = p.high_watermark
            if isolation and p.last_stable_offset >= 0:
                end = p.last_stable_offset
            out[key] = end
    return out


def _fetch(conn, wanted, isolation, epochs, *, max_bytes=DEFAULT_BLOCK_SIZE, min_bytes=1):
    """One Fetch of {key: (offset, partition max bytes)}."""
    version = min(conn.version_for(FetchRequest, lowest=4), 12)
    topics = {}
    for (topic, partition), (offset, most) in wanted.items():
        topics.setdefault(topic, []).append(
            FetchRequest.FetchPartition(
                partition=partition,
                current_leader_epoch=epochs.get((topic, partition), -1),
                fetch_offset=offset,
                partition_max_bytes=most,
            )
        )
    return conn.request(
        FetchRequest(
            replica_id=-1,
            max_wait_ms=FETCH_MAX_WAIT_MS,
            min_bytes=min_bytes,
            max_bytes=max_bytes,
            isolation_level=isolation,
            topics=[FetchRequest.FetchTopic(topic=t, partitions=ps) for t, ps in topics.items()],
        ),
        version,
    )


def plan(
    topics,
    *,
    bootstrap_servers,
    start_offset="earliest",
    end_offset="latest",
    partitions=None,
    isolation_level="read_uncommitted",
    records_per_range=None,
    options=None,
    **client,
):
    """The OffsetRanges a read of `topics` covers (see the module's docstring); ranges
    that are empty are left out. `records_per_range` splits each into pieces."""
    if isinstance(topics, str):
        topics = [topics]
    topics = list(topics)
    if not topics:
        raise ValueError("topics is empty: name at least one topic")
    isolation = _isolation(isolation_level)
    _check_offset(start_offset, "start_offset", "earliest")
    _check_offset(end_offset, "end_offset", "latest")
    if records_per_range is not None and (
        isinstance(records_per_range, bool)
        or not isinstance(records_per_range, int)
        or records_per_range < 1
    ):
        raise ValueError(f"records_per_range must be a positive int, not {records_per_range!r}")
    options = options or ClientOptions(bootstrap_servers, **client)
    cluster = Cluster(options)
    try:
        found = cluster.refresh(topics)
        keys = []
        for topic in topics:
            have = found[topic]
            wanted = have if partitions is None else list(partitions)
            missing = sorted(set(wanted) - set(have))
            if missing:
                raise KafkaReadError(
                    f"topic {topic!r} has no partition {', '.join(map(str, missing))} "
                    f"(it has {len(have)}: {_spans(have)})",
                    lookup(UNKNOWN_TOPIC_OR_PARTITION),
                    topic,
                    missing[0],
                )
            keys += [(topic, p) for p in wanted]
        bounds = _resolve(cluster, keys, start_offset, end_offset, isolation)
    finally:
        cluster.close()
    ranges = []
    for key in keys:
        start, end, low, high = bounds[key]
        if start > end:
            raise ValueError(
                f"start_offset {start} is after end_offset {end} for {_name(*key)} "
                f"(it holds offsets {low} to {high})"
            )
        if start < low or end > high:
            raise KafkaReadError(
                f"offsets {start} to {end} are outside what {_name(*key)} holds ({low} to {high})",
                lookup(OFFSET_OUT_OF_RANGE),
                *key,
            )
        if end > start:
            ranges += OffsetRange(key[0], key[1], start, end).split(records_per_range)
    return ranges


def _spans(numbers):
    return (
        f"{numbers[0]}-{numbers[-1]}"
        if numbers == list(range(numbers[0], numbers[-1] + 1))
        else ", ".join(map(str, numbers))
    )


def _resolve(cluster, keys, start_offset, end_offset, isolation):
    """{key: (start, end, log start, log end)}: every offset asked, as ints."""
    out = {}
    for node, group in _by_leader(cluster, keys).items():
        conn = cluster.connect(node)
        try:
            epochs = {k: cluster.leader(*k)[1] for k in group}
            earliest = _list_offsets(conn, group, dict.fromkeys(group, EARLIEST), isolation)
            listed = _list_offsets(conn, group, dict.fromkeys(group, LATEST), isolation)
            # The log end as the Fetch answer states it (see the module's docstring).
            ends = _log_ends(conn, listed, isolation, epochs)
            latest = {k: max(ends[k], listed[k]) if ends[k] >= 0 else listed[k] for k in group}
            asked = {}
            for which, value, word in (
                ("start", start_offset, "earliest"),
                ("end", end_offset, "latest"),
            ):
                for k in group:
                    v = _for(value, *k, word)
                    if isinstance(v, _dt.datetime):
                        asked[(which, k)] = _millis(v)
            by_time = {}
            for which in ("start", "end"):
                stamps = {k: ms for (w, k), ms in asked.items() if w == which}
                if stamps:
                    by_time[which] = _list_offsets(conn, list(stamps), stamps, isolation)
            for k in group:
                bound = []
                for which, value, word in (
                    ("start", start_offset, "earliest"),
                    ("end", end_offset, "latest"),
                ):
                    v = _for(value, *k, word)
                    if v == "earliest":
                        v = earliest[k]
                    elif v == "latest":
                        v = latest[k]
                    elif isinstance(v, _dt.datetime):
                        # No record at or after that time: the log end (an empty range).
                        v = by_time[which][k]
                        v = latest[k] if v < 0 else v
                    bound.append(v)
                out[k] = (bound[0], bound[1], earliest[k], latest[k])
        finally:
            conn.close()
    return out


# ---------------------------------------------------------------- fetching


def _batch_ends(data):
    """The offset after the last whole batch in `data` (None: no whole batch), read from
    the batch headers alone (the records are converted later, off this thread)."""
    n = len(data)
    pos = 0
    last = None
    while n - pos >= 12:
        (size,) = _LENGTH.unpack_from(data, pos + 8)
        if size < 0 or size > n - pos - 12:
            break
        if size >= 49 and data[pos + 16] == 2:
            base = struct.unpack_from(">q", data, pos)[0]
            (delta,) = _LENGTH.unpack_from(data, pos + 23)
            last = base + delta + 1
        else:  # a legacy message: its offset is the last of what it holds
            last = struct.unpack_from(">q", data, pos)[0] + 1
        pos += 12 + size
    return last


class _Leader(threading.Thread):
    """Fetches its partitions from one broker and hands each answer to the reader. It
    sends the next Fetch as soon as an answer is in, but hands that one over only once the
    reader has converted the one before (`credit`): two answers per leader at most."""

    def __init__(self, reader, node):
        super().__init__(name=f"fastkwire-fetch-{node}", daemon=True)
        self.reader, self.node = reader, node
        self.inbox = queue.Queue()  # (key, offset, end) to fetch
        self.active = {}  # key -> [next offset, end]
        self.credit = threading.Semaphore(1)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.dead = False

    def run(self):
        conn = None
        try:
            conn = self.reader.cluster.connect(self.node)
            self._loop(conn)
        except BaseException as exc:  # noqa: BLE001 - handed to the reader, which raises it
            with self.lock:  # from now on the reader gives its partitions to a new thread
                self.dead = True
                left = [(k, o, e) for k, (o, e) in self.active.items()]
                while True:
                    try:
                        item = self.inbox.get_nowait()
                    except queue.Empty:
                        break
                    if item[0] is not None:
                        left.append(item)
            self.reader.out.put(("gone", self.node, exc, left))
        finally:
            if conn is not None:
                conn.close()

    def take(self, key, offset, end):
        """Queue a partition for this thread; False once it has failed."""
        with self.lock:
            if self.dead:
                return False
            self.inbox.put((key, offset, end))
            return True

    def _hand_over(self, item):
        while not self.credit.acquire(timeout=0.1):
            if self.stop.is_set():
                return False
        self.reader.out.put(item)
        return True

    def _loop(self, conn):
        reader = self.reader
        active = self.active
        # What one answer may hold: a share of block_size, since an answer is held twice
        # while it is decoded (the frame and its records) and the next one is in flight.
        per_partition = answer_bytes = max(reader.block_size // ANSWER_SHARE, 1024)
        empty = 0
        while not self.stop.is_set():
            while True:
                try:
                    key, offset, end = self.inbox.get(block=not active, timeout=0.1)
                except queue.Empty:
                    break
                if key is None:
                    return
                active[key] = [offset, end]
            if not active:
                continue
            epochs = {k: reader.cluster.leaders.get(k, (None, -1))[1] for k in active}
            wanted = {k: (o, per_partition) for k, (o, _) in active.items()}
            answer = _fetch(conn, wanted, reader.isolation, epochs, max_bytes=answer_bytes)
            parts, moved, done = [], [], []
            for t in answer.responses:
                for p in t.partitions:
                    key = (t.topic, p.partition_index)
                    state = active.get(key)
                    if state is None:
                        continue
                    if p.error_code in LEADER_MOVED:
                        moved.append((key, state[0], state[1]))
                        del active[key]
                        continue
                    if p.error_code == OFFSET_OUT_OF_RANGE:
                        raise KafkaReadError(
                            f"offset {state[0]} is out of range for {_name(*key)}: "
                            f"{conn.address} holds offsets {p.log_start_offset} to "
                            f"{p.high_watermark} now (deleted or truncated while reading?)",
                            lookup(OFFSET_OUT_OF_RANGE),
                            *key,
                        )
                    if p.error_code != NONE:
                        raise KafkaReadError(
                            f"Fetch for {_name(*key)} at offset {state[0]} failed on "
                            f"{conn.address}: {lookup(p.error_code)}",
                            lookup(p.error_code),
                            *key,
                        )
                    records = p.records or b""
                    after = _batch_ends(records) if records else None
                    if after is None or after <= state[0]:
                        if records and len(records) >= per_partition:
                            # An old broker cut a batch larger than the limit: ask for more.
                            per_partition = min(per_partition * 2, 1 << 30)
                        elif p.high_watermark <= state[0]:
                            raise KafkaReadError(
                                f"{_name(*key)} ends at offset {p.high_watermark} on "
                                f"{conn.address}, before the {state[1]} this read was "
                                "planned to reach (truncated while reading?)",
                                topic=key[0],
                                partition=key[1],
                            )
                        continue
                    parts.append((key, state[0], state[1], records, p.aborted_transactions))
                    if after >= state[1]:
                        del active[key]
                        done.append(key)
                    else:
                        state[0] = after
            empty = 0 if parts else empty + 1
            if empty > MAX_EMPTY_FETCHES:
                names = ", ".join(f"{_name(*k)} at offset {s[0]}" for k, s in active.items())
                raise KafkaTimeoutError(f"{conn.address} sent no records for {names}")
            if (parts or moved or done) and not self._hand_over(
                ("answer", self, parts, moved, done)
            ):
                return


class _Reader:
    """The coordinator: leaders' threads, their answers converted in order per partition,
    and the metadata refresh when a partition moves or its broker goes away."""

    def __init__(self, ranges, options, isolation, block_size, check_crc):
        self.options, self.isolation, self.block_size = options, isolation, block_size
        self.check_crc = check_crc
        self.ranges = ranges
        self.cluster = Cluster(options)
        self.out = queue.Queue()  # bounded by the leaders' credit: one answer each
        self.leaders = {}
        self.retries = {}
        self.pending = 0  # partitions not done yet

    def start(self):
        self.cluster.refresh(sorted({r.topic for r in self.ranges}))
        for r in self.ranges:
            self.pending += 1
            self._assign((r.topic, r.partition), r.start, r.end)

    def _assign(self, key, offset, end):
        node, _ = self.cluster.leader(*key)
        leader = self.leaders.get(node)
        if leader is None or not leader.take(key, offset, end):
            leader = self.leaders[node] = _Leader(self, node)
            leader.take(key, offset, end)
            leader.start()

    def close(self):
        for leader in self.leaders.values():
            leader.stop.set()
            leader.inbox.put((None, 0, 0))
        for leader in self.leaders.values():
            leader.join(5)
        self.cluster.close()

    def _retry(self, key, what, limit):
        n = self.retries[(limit, key)] = self.retries.get((limit, key), 0) + 1
        if n > limit:
            raise KafkaReadError(
                f"{_name(*key)} could not be read: {what} (after {limit} metadata refreshes)",
                topic=key[0],
                partition=key[1],
            )
        time.sleep(min(RETRY_BACKOFF * n, 2.0))
        self.cluster.refresh([key[0]])

    def _convert(self, key, offset, end, records, aborted):
        batch, _, _ = batches_to_arrow(
            records,
            topic=key[0],
            partition=key[1],
            read_committed=bool(self.isolation),
            aborted_transactions=aborted or (),
            check_crc=self.check_crc,
            start_offset=offset,
            end_offset=end,
        )
        return batch

    def batches(self):
        """RecordBatches in the order the answers come (in offset order per partition)."""
        while self.pending:
            try:
                item = self.out.get(timeout=1.0)
            except queue.Empty:
                # Never wait for answers no thread will give (a defect here, not the broker's).
                if not any(leader.is_alive() for leader in self.leaders.values()):
                    raise RuntimeError(
                        f"fastkwire's reader lost track of {self.pending} partitions"
                    ) from None
                continue
            if item[0] == "answer":
                _, leader, parts, moved, done = item
                try:
                    for key, offset, end, records, aborted in parts:
                        batch = self._convert(key, offset, end, records, aborted)
                        if batch.num_rows:
                            yield batch
                finally:
                    leader.credit.release()
                self.pending -= len(done)
                for key, offset, end in moved:
                    self._retry(key, "its leader moved", MAX_LEADER_RETRIES)
                    self._assign(key, offset, end)
                continue
            _, node, exc, left = item  # "gone": the leader's thread ended on an error
            if self.leaders.get(node) is not None and self.leaders[node].dead:
                del self.leaders[node]
            if isinstance(exc, (KafkaReadError, KafkaSecurityError)) or not isinstance(
                exc, KafkaClientError
            ):
                raise exc
            host, port = self.cluster.brokers.get(node, ("?", 0))
            what = f"broker {node} ({format_address(host, port)}) failed: {exc}"
            for key, offset, end in left:
                failed = f"{_name(*key)} could not be read from offset {offset} to {end}: {what}"
                n = self.retries[("gone", key)] = self.retries.get(("gone", key), 0) + 1
                if n > MAX_BROKER_RETRIES:
                    raise KafkaReadError(failed, getattr(exc, "error", None), *key) from exc
                time.sleep(RETRY_BACKOFF)
                try:
                    self.cluster.refresh([key[0]])
                    self._assign(key, offset, end)
                except KafkaClientError as again:
                    raise KafkaReadError(
                        f"{failed}; then the metadata refresh failed: {again}",
                        getattr(exc, "error", None),
                        *key,
                    ) from exc


def read_ranges(
    ranges,
    *,
    options,
    isolation_level="read_uncommitted",
    block_size=DEFAULT_BLOCK_SIZE,
    check_crc=True,
):
    """RecordBatches (SCHEMA) of the rows in `ranges` (from `plan`), fetched from every
    leader at once; rows of one partition come in offset order."""
    isolation = _isolation(isolation_level)
    block_size = _check_block(block_size)
    ranges = [r for r in ranges if len(r)]
    if not ranges:
        return
    reader = _Reader(ranges, options, isolation, block_size, check_crc)
    try:
        reader.start()
        yield from reader.batches()
    finally:
        reader.close()


def _check_block(block_size):
    if isinstance(block_size, bool) or not isinstance(block_size, int) or block_size < 1024:
        raise ValueError(f"block_size must be an int of at least 1024 bytes, not {block_size!r}")
    return min(block_size, 0x7FFFFFFF)


def iter_kafka(
    topics,
    *,
    bootstrap_servers,
    start_offset="earliest",
    end_offset="latest",
    partitions=None,
    isolation_level="read_uncommitted",
    block_size=DEFAULT_BLOCK_SIZE,
    check_crc=True,
    **client,
):
    """pyarrow.RecordBatches of SCHEMA for the records of `topics` from `start_offset` to
    `end_offset` (exclusive), for topics larger than memory: about `block_size` bytes
    per leader are held at a time (each Fetch answer holds a quarter of it). Arguments as `read_kafka`'s."""
    _check_block(block_size)
    options = ClientOptions(bootstrap_servers, **client)
    ranges = plan(
        topics,
        bootstrap_servers=bootstrap_servers,
        start_offset=start_offset,
        end_offset=end_offset,
        partitions=partitions,
        isolation_level=isolation_level,
        options=options,
    )
    yield from read_ranges(
        ranges,
        options=options,
        isolation_level=isolation_level,
        block_size=block_size,
        check_crc=check_crc,
    )


def read_kafka(
    topics,
    *,
    bootstrap_servers,
    start_offset="earliest",
    end_offset="latest",
    partitions=None,
    isolation_level="read_uncommitted",
    block_size=DEFAULT_BLOCK_SIZE,
    check_crc=True,
    **client,
):
    """The records of `topics` as a pyarrow.Table with Ray Data's read_kafka schema.

    topics: a name or a list of names. bootstrap_servers: "host:port[,host:port]" or a
    list. start_offset / end_offset (end exclusive): an int, "earliest" / "latest", a
    datetime (the first offset whose timestamp is at or after it; naive means UTC), or
    {topic: {partition: offset}} (others take "earliest" / "latest"). partitions: the
    partition numbers to read (default all). isolation_level: "read_uncommitted" or
    "read_committed" (aborted transactions dropped, the end at the last stable offset).
    block_size: the memory budget per leader (a Fetch answer holds a quarter of it). Security options as kafka-python
    names them (security_protocol, ssl_cafile, sasl_mechanism, ...), client_id,
    request_timeout_ms. Rows of a partition are in offset order; partitions follow one
    another as their answers came."""
    batches = list(
        iter_kafka(
            topics,
            bootstrap_servers=bootstrap_servers,
            start_offset=start_offset,
            end_offset=end_offset,
            partitions=partitions,
            isolation_level=isolation_level,
            block_size=block_size,
            check_crc=check_crc,
            **client,
        )
    )
    import pyarrow as pa

    return pa.Table.from_batches(batches or [empty_batch()], schema=SCHEMA)

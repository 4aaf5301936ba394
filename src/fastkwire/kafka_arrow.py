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
   the Ray and Dask readers; at most MAX_RANGES pieces, `split_ranges`).
2. `read_ranges(ranges, ...)` fetches them: one thread and connection per leader (at most
   MAX_LEADER_THREADS at once), each sending its next Fetch as soon as the last one is in
   (while the previous answer is converted), handing over one answer per leader at a
   time, so memory is bounded by `block_size` per leader (a Fetch asks for a quarter of
   it; an answer over half of it is refused unread; its batches decompress to half of
   it at a time), or by one batch when a single batch is larger (a broker sends it
   whole, KIP-74: its partition is asked alone, and that answer may hold it). Partitions whose leader moved (NOT_LEADER_OR_FOLLOWER,
   FENCED_LEADER_EPOCH and the like) wait together for one metadata refresh, within one
   deadline (request_timeout_ms); OFFSET_OUT_OF_RANGE is a `KafkaReadError` naming the
   partition and the offsets it holds; a broker that goes away (planning included) is
   retried once after a metadata refresh, then an error naming it and the partitions.
A read that fails raises: no partial table is returned as if whole. No wait is longer
than the request timeout allows, whatever a broker answers (docs/arrow.md, "Against a
hostile broker", says what is promised and how fuzz/hostile_broker.py checks it).

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
import warnings
from concurrent.futures import ThreadPoolExecutor

from . import DecodeError, FetchRequest, ListOffsetsRequest, MetadataRequest

try:
    from ._arrow_rows import SCHEMA, AbortedTransactions, batches_to_arrow, empty_batch
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a child process
    if _missing.name not in ("numpy", "pyarrow"):
        raise
    raise ImportError(
        f"fastkwire.read_kafka needs {_missing.name}: pip install 'fastkwire[arrow]'"
    ) from _missing
from .connection import DEFAULT_ANSWER_LIMIT, Connection, Security, format_address
from .connection_errors import (
    AnswerTooLargeError,
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
CLOSE_WAIT = 5.0  # seconds close() waits for the fetch threads, all of them together
ANSWER_SHARE = 4  # a Fetch answer holds at most block_size / ANSWER_SHARE bytes
ANSWER_LIMIT_SHARE = 2  # an answer may be block_size / 2: room for one batch over max_bytes
# One batch larger than the block is read whole (a broker sends a partition's first batch
# whole however large, KIP-74), up to the connection's cap on an answer; compressed, it may
# decompress to this many times its size (or half the block, if more).
ONE_BATCH_LIMIT = DEFAULT_ANSWER_LIMIT
ONE_BATCH_RATIO = 8
ANSWER_HEADERS = 4096  # an answer's own fields, beside its records
PARTITION_HEADERS = 256  # a partition's fields in an answer (and its aborted transactions)
MAX_LEADER_RETRIES = 10
MAX_BROKER_RETRIES = 1  # a broker that fails is tried once more after a metadata refresh
RETRY_BACKOFF = 0.2
MAX_EMPTY_FETCHES = 20  # answers in a row without a batch below the range's end
# At most this many pieces from splitting a plan (records_per_range and the like): above it
# the pieces are made larger, with a warning, so planning stays O(partitions + pieces).
MAX_RANGES = 10_000
# At most this many leaders fetched from at once (a thread and a connection each); the
# partitions of other leaders wait for one to finish. A Metadata answer decides how many
# leaders there are: a hostile one must not make a thread per partition.
MAX_LEADER_THREADS = 32
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
        """Pieces of at most `size` offsets (compacted gaps make some hold fewer records);
        at most MAX_RANGES of them (`split_ranges` says when it makes them larger)."""
        return split_ranges([self], size)


def check_piece_size(size, name="records_per_range"):
    """`size` (offsets a piece): None or a positive int, else a ValueError naming `name`."""
    if size is not None and (isinstance(size, bool) or not isinstance(size, int) or size < 1):
        raise ValueError(f"{name} must be a positive int, not {size!r}")
    return size


def split_ranges(ranges, size, *, name="records_per_range", cap=MAX_RANGES):
    """`ranges` cut into pieces of at most `size` offsets (None: as they are). Never more
    than `cap` pieces plus one a range: when `size` would make more, the pieces are made
    larger and a RuntimeWarning (naming the parameter `name`) says so. O(pieces)."""
    if check_piece_size(size, name) is None:
        return list(ranges)
    total = sum(len(r) for r in ranges)
    pieces = sum(-(-len(r) // size) for r in ranges)
    if pieces > cap:
        wider = -(-total // cap)
        warnings.warn(
            f"{name}={size} would cut these {total} offsets into {pieces} pieces; "
            f"made pieces of {wider} offsets instead (at most {cap} pieces: "
            "fastkwire.kafka_arrow.MAX_RANGES)",
            RuntimeWarning,
            stacklevel=3,
        )
        size = wider
    out = []
    for r in ranges:
        for lo in range(r.start, r.end, size):
            out.append(OffsetRange(r.topic, r.partition, lo, min(lo + size, r.end)))
    return out


def spread(ranges, tasks, *, name="tasks", cap=MAX_RANGES):
    """The offsets of `ranges`, in order, cut into `tasks` lists of ranges holding about
    the same number of offsets each (fewer lists when there are fewer offsets); a range is
    split where a list's share ends, so each offset is in exactly one list. The work of
    one task per CPU (fastkwire.ray's default). At most `cap` lists: more tasks are made
    `cap`, with a RuntimeWarning naming the parameter `name`. O(ranges + lists)."""
    if isinstance(tasks, bool) or not isinstance(tasks, int) or tasks < 1:
        raise ValueError(f"{name} must be a positive int, not {tasks!r}")
    if tasks > cap:
        warnings.warn(
            f"{name}={tasks} is more than {cap} tasks: made {cap} "
            "(fastkwire.kafka_arrow.MAX_RANGES)",
            RuntimeWarning,
            stacklevel=3,
        )
        tasks = cap
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
        # Imported here: the admin package is a third of what importing this module (and
        # fastkwire.ray, in every Ray worker) would cost, and only the planning side needs it.
        from .admin.flows import parse_servers

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
                if isinstance(p, bool) or not isinstance(p, int):
                    raise TypeError(f"{name}[{topic!r}] has {p!r} for a partition: give ints")
                _check_offset(v, f"{name}[{topic!r}][{p!r}]", word)
        return
    if isinstance(value, bool) or not (isinstance(value, (int, _dt.datetime)) or value == word):
        raise ValueError(f"{name} must be an offset (int), {word!r} or a datetime, not {value!r}")
    if isinstance(value, int) and value < 0:
        raise ValueError(f"{name} must be >= 0, not {value}")


def _check_topics(topics):
    """`topics` (a name or names) as a list of distinct names, in the order given."""
    if isinstance(topics, str):
        topics = [topics]
    try:
        topics = list(topics)
    except TypeError:
        raise TypeError(
            f"topics must be a topic name or a list of names, not {type(topics).__name__} "
            f"{topics!r}"
        ) from None
    for t in topics:
        if not isinstance(t, str) or not t:
            raise TypeError(f"topics must hold topic names (non-empty str), not {t!r}")
    if not topics:
        raise ValueError("topics is empty: name at least one topic")
    return list(dict.fromkeys(topics))  # a topic named twice is read once


def _check_partitions(partitions):
    if partitions is None:
        return None
    try:
        partitions = list(partitions)
    except TypeError:
        raise TypeError(
            f"partitions must be a list of partition numbers, not {partitions!r}"
        ) from None
    for p in partitions:
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise ValueError(f"partitions must hold partition numbers (ints >= 0), not {p!r}")
    return list(dict.fromkeys(partitions))  # a partition named twice is read once


def _for(value, topic, partition, word):
    if isinstance(value, dict):
        return value.get(topic, {}).get(partition, word)
    return value


def _named(value, topic, partition):
    """Whether a {topic: {partition: offset}} gives this partition its own offset."""
    return isinstance(value, dict) and partition in value.get(topic, {})


def _millis(when):
    if when.tzinfo is None:  # as Ray does: naive datetimes are UTC
        when = when.replace(tzinfo=_dt.timezone.utc)
    return int(when.timestamp() * 1000)


def _holds(low, high):
    """What a partition with log start `low` and end `high` (exclusive) holds, in words."""
    if low < 0 or high < low:  # what a broker said that no log is
        return f"a log starting at offset {low} and ending at {high} (it says)"
    if high == low:
        return f"no records (its log starts and ends at offset {high})"
    return f"offsets {low} to {high - 1}"


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
            if t.name not in topics:
                continue  # not asked: nothing of it is read
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
                    f"Metadata for topic {t.name!r} failed on {self.conn.address}: "
                    f"{lookup(t.error_code)}",
                    lookup(t.error_code),
                    topic=t.name,
                )
            for p in t.partitions:
                self.leaders[(t.name, p.partition_index)] = (p.leader_id, p.leader_epoch)
            # A partition (or topic) listed twice is one partition.
            found[t.name] = sorted(
                set(found.get(t.name, ())) | {p.partition_index for p in t.partitions}
            )
        for t in topics:
            if t not in found:
                raise KafkaReadError(
                    f"topic {t!r} is not in {self.conn.address}'s Metadata answer", topic=t
                )
        return found

    def leader(self, topic, partition):
        node, epoch = self.leaders.get((topic, partition), (-1, -1))
        if node < 0 or node not in self.brokers:
            raise KafkaReadError(
                f"{_name(topic, partition)} has no leader now (the Metadata answer of "
                f"{self.conn.address} names node {node}"
                + ("" if node < 0 else ", a broker it does not list")
                + ")",
                lookup(by_name("LEADER_NOT_AVAILABLE").code),
                topic,
                partition,
            )
        return node, epoch

    def address(self, node):
        host, port = self.brokers.get(node, ("?", 0))
        return f"broker {node} ({format_address(host, port)})"

    def connect(self, node):
        address = self.brokers.get(node)
        if address is None:  # gone from the Metadata answer since it was named a leader
            raise KafkaConnectionError(
                f"broker {node} is not in the latest Metadata answer of {self.conn.address}"
            )
        return self.options.connect(*address)


def _by_leader(cluster, keys):
    groups = {}
    for topic, partition in keys:
        node, _ = cluster.leader(topic, partition)
        groups.setdefault(node, []).append((topic, partition))
    return groups


def _answered(conn, api, keys, entries):
    """{key: entry} of an answer's per-partition `entries` ((key, entry) pairs): every key
    asked must be there, once; others are ignored. An error names the broker."""
    out = {}
    for key, entry in entries:
        if key not in keys:
            continue
        if key in out:
            raise KafkaReadError(
                f"{conn.address} answered {api} for {_name(*key)} twice",
                topic=key[0],
                partition=key[1],
            )
        out[key] = entry
    for key in keys:
        if key not in out:
            raise KafkaReadError(
                f"{conn.address}'s {api} answer leaves out {_name(*key)}, which was asked",
                topic=key[0],
                partition=key[1],
            )
    return out


def _list_offsets(conn, keys, timestamp_of, isolation):
    """{(topic, partition): (offset, timestamp)} of ListOffsets for each key's timestamp
    (-2, -1 or ms)."""
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
    parts = _answered(
        conn,
        "ListOffsets",
        set(keys),
        (((t.name, p.partition_index), p) for t in answer.topics for p in t.partitions),
    )
    out = {}
    for key, p in parts.items():
        if p.error_code != NONE:
            raise KafkaReadError(
                f"ListOffsets for {_name(*key)} failed on {conn.address}: {lookup(p.error_code)}",
                lookup(p.error_code),
                *key,
            )
        out[key] = (p.offset, p.timestamp)
    return out


def _log_ends(conn, at, isolation, epochs):
    """{key: high watermark (or last stable offset)} from one Fetch at `at`."""
    answer = _fetch(
        conn,
        {k: (o, 1) for k, o in at.items()},
        isolation,
        epochs,
        min_bytes=0,
        answer_limit=DEFAULT_BLOCK_SIZE,
    )
    parts = _answered(
        conn,
        "Fetch",
        set(at),
        (((t.topic, p.partition_index), p) for t in answer.responses for p in t.partitions),
    )
    out = {}
    for key, p in parts.items():
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


def _fetch(
    conn,
    wanted,
    isolation,
    epochs,
    *,
    max_bytes=DEFAULT_BLOCK_SIZE,
    min_bytes=1,
    answer_limit=None,
    deadline=None,
    check_frame=None,
):
    """One Fetch of {key: (offset, partition max bytes)}; an answer over `answer_limit`
    bytes is refused before it is read."""
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
        max_answer_bytes=answer_limit,
        deadline=deadline,
        check_frame=check_frame,
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
    that are empty are left out. `records_per_range` splits each into pieces (at most
    MAX_RANGES of them: see `split_ranges`)."""
    topics = _check_topics(topics)
    partitions = _check_partitions(partitions)
    isolation = _isolation(isolation_level)
    _check_offset(start_offset, "start_offset", "earliest")
    _check_offset(end_offset, "end_offset", "latest")
    for name, value in (("start_offset", start_offset), ("end_offset", end_offset)):
        if isinstance(value, dict):
            for topic in value:
                if topic not in topics:
                    raise ValueError(
                        f"{name} names topic {topic!r}, which this read does not read "
                        f"(topics: {', '.join(map(repr, topics))})"
                    )
    check_piece_size(records_per_range)
    options = options or ClientOptions(bootstrap_servers, **client)
    cluster = Cluster(options)
    try:
        found = cluster.refresh(topics)
        keys = []
        for topic in topics:
            have = found[topic]
            wanted = have if partitions is None else partitions
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
        _check_named(keys, start_offset, end_offset)
        bounds = _resolve(cluster, keys, start_offset, end_offset, isolation)
    finally:
        cluster.close()
    ranges = []
    for key in keys:
        start, end = _range_of(key, bounds[key], start_offset, end_offset)
        if end > start:
            ranges.append(OffsetRange(key[0], key[1], start, end))
    return split_ranges(ranges, records_per_range)


def _check_named(keys, start_offset, end_offset):
    """Offsets given per partition name partitions being read; start <= end where both are
    the caller's ints."""
    reading = set(keys)
    for name, value in (("start_offset", start_offset), ("end_offset", end_offset)):
        if not isinstance(value, dict):
            continue
        for topic, parts in value.items():
            for p in parts:
                if (topic, p) not in reading:
                    read = sorted(q for t, q in keys if t == topic)
                    raise ValueError(
                        f"{name} names topic {topic!r} partition {p}, which this read does "
                        f"not read (it reads partitions {_spans(read)} of {topic!r})"
                    )
    for key in keys:
        start = _for(start_offset, *key, "earliest")
        end = _for(end_offset, *key, "latest")
        if type(start) is int and type(end) is int and start > end:
            raise ValueError(f"start_offset {start} is after end_offset {end} for {_name(*key)}")


def _range_of(key, bound, start_offset, end_offset):
    """[start, end) of `key` from what its broker answered (`bound`), by the rules of the
    arguments: an error names the broker and what it answered."""
    start, end, low, high, at = bound
    holds = f"{at} holds {_holds(low, high)}"
    if end > high:
        raise KafkaReadError(
            f"end_offset {end} is after the end of {_name(*key)}: {holds}",
            lookup(OFFSET_OUT_OF_RANGE),
            *key,
        )
    if start < low:
        raise KafkaReadError(
            f"start_offset {start} is before the start of {_name(*key)}: {holds} "
            "(deleted by retention?)",
            lookup(OFFSET_OUT_OF_RANGE),
            *key,
        )
    if start > high:
        if _named(start_offset, *key):
            raise KafkaReadError(
                f"start_offset {start} is after the end of {_name(*key)}: {holds}",
                lookup(OFFSET_OUT_OF_RANGE),
                *key,
            )
        return high, high  # an offset (or time) for every partition: this one ends before it
    return start, max(start, end)


def _spans(numbers):
    if not numbers:
        return "none"
    return (
        f"{numbers[0]}-{numbers[-1]}"
        if numbers == list(range(numbers[0], numbers[-1] + 1))
        else ", ".join(map(str, numbers))
    )


def _resolve(cluster, keys, start_offset, end_offset, isolation):
    """{key: (start, end, log start, log end, broker)}: every offset asked, as ints. The
    leaders are asked together (at most MAX_LEADER_THREADS at once), so planning takes
    about the slowest leader's time, not their sum; those that fail are asked again once,
    after one metadata refresh for all of them."""
    out = {}
    work = list(_by_leader(cluster, keys).items())
    for attempt in range(MAX_BROKER_RETRIES + 1):
        failed = []
        for (node, group), result in _ask_leaders(
            cluster, work, start_offset, end_offset, isolation
        ):
            if isinstance(result, dict):
                out.update(result)
                continue
            what = f"{cluster.address(node)} failed while planning: {result}"
            names = ", ".join(_name(*k) for k in group)
            if attempt >= MAX_BROKER_RETRIES:
                raise KafkaReadError(
                    f"could not find the offsets of {names}: {what}", None, *group[0]
                ) from result
            failed.append((group, names, what, result))
        if not failed:
            break
        time.sleep(RETRY_BACKOFF)
        group = [k for g, _, _, _ in failed for k in g]
        try:
            cluster.refresh(sorted({t for t, _ in group}))
            work = list(_by_leader(cluster, group).items())
        except KafkaClientError as again:
            _, names, what, failure = failed[0]
            raise KafkaReadError(
                f"could not find the offsets of {names}: {what}; then the metadata refresh "
                f"failed: {again}",
                None,
                *failed[0][0][0],
            ) from failure
    return out


def _ask_leaders(cluster, work, start_offset, end_offset, isolation):
    """((node, group), _resolve_on's answer or the connection error) for each leader of
    `work`, asked in threads of their own; another error is raised."""

    def ask(node, group):
        try:
            conn = cluster.connect(node)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            return exc
        try:
            return _resolve_on(conn, cluster, group, start_offset, end_offset, isolation)
        except (KafkaConnectionError, KafkaTimeoutError) as exc:
            return exc
        finally:
            conn.close()

    if len(work) == 1:
        return [(work[0], ask(*work[0]))]
    pool = ThreadPoolExecutor(min(len(work), MAX_LEADER_THREADS), "fastkwire-plan")
    try:
        futures = [(item, pool.submit(ask, *item)) for item in work]
        return [(item, future.result()) for item, future in futures]
    finally:
        # On an error, the requests under way end within their timeout, unwaited for.
        pool.shutdown(wait=False, cancel_futures=True)


def _resolve_on(conn, cluster, group, start_offset, end_offset, isolation):
    """_resolve's answers from one leader (`conn`) for its partitions (`group`)."""
    epochs = {k: cluster.leader(*k)[1] for k in group}
    earliest = _list_offsets(conn, group, dict.fromkeys(group, EARLIEST), isolation)
    listed = _list_offsets(conn, group, dict.fromkeys(group, LATEST), isolation)
    # The log end as the Fetch answer states it (see the module's docstring).
    ends = _log_ends(conn, {k: o for k, (o, _) in listed.items()}, isolation, epochs)
    low, high = {}, {}
    for k in group:
        low[k], listed_end = earliest[k][0], listed[k][0]
        high[k] = max(ends[k], listed_end) if ends[k] >= 0 else listed_end
        if low[k] < 0 or high[k] < low[k]:
            raise KafkaReadError(
                f"{conn.address} answered that {_name(*k)} starts at offset {low[k]} "
                f"(ListOffsets earliest) and ends at {high[k]} (ListOffsets latest "
                f"{listed_end}, Fetch high watermark {ends[k]}): no log is so",
                None,
                *k,
            )
    asked = {}
    for which, value, word in (("start", start_offset, "earliest"), ("end", end_offset, "latest")):
        for k in group:
            v = _for(value, *k, word)
            if isinstance(v, _dt.datetime):
                asked.setdefault(which, {})[k] = _millis(v)
    by_time = {w: _list_offsets(conn, list(s), s, isolation) for w, s in asked.items()}
    out = {}
    for k in group:
        bound = []
        for which, value, word in (
            ("start", start_offset, "earliest"),
            ("end", end_offset, "latest"),
        ):
            v = _for(value, *k, word)
            if v == "earliest":
                v = low[k]
            elif v == "latest":
                v = high[k]
            elif isinstance(v, _dt.datetime):
                offset, stamp = by_time[which][k]
                if offset < 0 or stamp < 0:
                    # No record at or after that time ("none", timestamp -1): the log end,
                    # so a start there reads nothing.
                    v = high[k]
                elif not low[k] <= offset <= high[k]:
                    raise KafkaReadError(
                        f"{conn.address} answered ListOffsets for {_name(*k)} at "
                        f"{value if not isinstance(value, dict) else v} with offset {offset}, "
                        f"outside the offsets {low[k]} to {high[k]} it says the log has",
                        None,
                        *k,
                    )
                else:
                    v = offset
            bound.append(v)
        out[k] = (bound[0], bound[1], low[k], high[k], conn.address)
    return out


# ---------------------------------------------------------------- fetching


def _batch_ends(data, end=None):
    """(the offset after the last whole batch in `data`, or None when there is none; the
    bytes those batches take), read from the batch headers alone (the records are
    converted later, off this thread). The batches end at the first one that does not
    start after the one before: an answer that goes backwards is read up to there, and the
    rest fetched again from where it stopped, so no offset comes twice. They end too at
    the first batch that starts at `end` or after (then the offset after them is `end`):
    what a broker sends past the range is not converted."""
    n = len(data)
    pos = 0
    last = None
    while n - pos >= 12:
        (size,) = _LENGTH.unpack_from(data, pos + 8)
        if size < 0 or size > n - pos - 12:
            break
        if size >= 49 and data[pos + 16] == 2:
            first = struct.unpack_from(">q", data, pos)[0]
            if end is not None and first >= end and (last is None or first >= last):
                return end, pos  # the range has nothing more (compacted, if nothing)
            (delta,) = _LENGTH.unpack_from(data, pos + 23)
            after = first + delta + 1
        else:  # a legacy message: its offset is the last of what it holds
            after = first = struct.unpack_from(">q", data, pos)[0] + 1
            first -= 1
        if last is not None and first < last or after <= first:
            break
        last = after
        pos += 12 + size
    return last, pos


def _first_batch_size(data):
    """The bytes the first batch in `data` takes, as its header says (None if it cannot)."""
    if len(data) < 12:
        return None
    (length,) = _LENGTH.unpack_from(data, 8)
    return 12 + length if length >= 0 else None


def _records_of(answer, key):
    """The records of `key` in a Fetch answer (its first mention), b"" if none."""
    for t in answer.responses:
        if t.topic == key[0]:
            for p in t.partitions:
                if p.partition_index == key[1]:
                    return p.records or b""
    return b""


def _compressed_spans(data):
    """(start, stop, 1 if compressed else 0) of each whole batch in `data`, from headers."""
    spans, n, pos = [], len(data), 0
    while n - pos >= 22:
        (size,) = _LENGTH.unpack_from(data, pos + 8)
        if size < 5 or size > n - pos - 12:
            break
        if data[pos + 16] == 2:
            codec = data[pos + 22] & 7  # the low byte of the attributes
        else:
            codec = data[pos + 17] & 7  # a legacy message's attributes
        spans.append((pos, pos + 12 + size, 1 if codec else 0))
        pos += 12 + size
    return spans or [(0, n, 0)]


class _Leader(threading.Thread):
    """Fetches its partitions from one broker and hands each answer to the reader. It
    sends the next Fetch as soon as an answer is in, but hands that one over only once the
    reader has converted the one before (`credit`): two answers per leader at most."""

    def __init__(self, reader, node):
        super().__init__(name=f"fastkwire-fetch-{node}", daemon=True)
        self.reader, self.node = reader, node
        self.conn = None
        self.inbox = queue.Queue()  # (key, offset, end) to fetch
        self.active = {}  # key -> [next offset, end]
        self.credit = threading.Semaphore(1)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.dead = False

    def run(self):
        try:
            self.conn = self.reader.cluster.connect(self.node)
            self._loop()
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
            self.reader.out.put(("gone", self, exc, left))
        finally:
            if self.conn is not None:
                self.conn.close()

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

    def _wait_converted(self):
        """Until the reader has converted what was handed over (False if stopped)."""
        while not self.credit.acquire(timeout=0.1):
            if self.stop.is_set():
                return False
        self.credit.release()
        return True

    def _fetch_alone(self, alone, active, most):
        """Fetch one partition alone (`alone`: key, partition max bytes, answer limit),
        for a batch larger than the block: the answer may hold that one batch past what
        any answer may (`most`), nothing more. (the answer, the size of that batch or 0)"""
        reader, conn = self.reader, self.conn
        key, part_bytes, limit = alone
        offset = active[key][0]
        frame = [0]
        try:
            answer = _fetch(
                conn,
                {key: (offset, part_bytes)},
                reader.isolation,
                {key: reader.cluster.leaders.get(key, (None, -1))[1]},
                max_bytes=part_bytes,
                answer_limit=limit,
                check_frame=lambda data, version: frame.__setitem__(0, len(data) - 4),
            )
        except AnswerTooLargeError as exc:
            raise KafkaReadError(
                f"{conn.address} announced a {exc.size}-byte answer to a Fetch of {_name(*key)} "
                f"alone at offset {offset}, more than the {exc.limit} bytes it may take "
                f"(what block_size={reader.block_size} allows, or one batch larger than it)",
                topic=key[0],
                partition=key[1],
            ) from None
        first = _first_batch_size(_records_of(answer, key)) or 0
        big = first if first > most else 0
        if frame[0] > most + big + ANSWER_HEADERS + PARTITION_HEADERS:
            raise KafkaReadError(
                f"{conn.address} answered a Fetch of {_name(*key)} at offset {offset} with "
                f"{frame[0]} bytes: more than one batch larger than block_size="
                f"{reader.block_size} (its first batch takes {first} bytes) and the "
                f"{most} bytes an answer may hold beside it",
                topic=key[0],
                partition=key[1],
            )
        return answer, big

    def _loop(self):
        reader = self.reader
        active = self.active
        # What one answer may hold: a share of block_size, since an answer is held twice
        # while it is decoded (the frame and its records) and the next one is in flight.
        per_partition = answer_bytes = max(reader.block_size // ANSWER_SHARE, 1024)
        # What an answer may be before it is refused unread: room for one batch larger
        # than max_bytes, never more; unless it holds one batch larger than the block
        # (`alone`, below).
        most = max(reader.block_size // ANSWER_LIMIT_SHARE, answer_bytes)
        one_batch = max(ONE_BATCH_LIMIT, most)
        # A partition to ask alone next: (key, partition max bytes, answer limit). A broker
        # sends a partition's first batch whole however large (KIP-74), so an answer
        # announced past `most` is refused unread, and its first partition asked alone:
        # that answer may hold one batch larger than the block, and only that.
        alone = None
        asks = {}  # key -> the bytes to ask for it next, when more than per_partition
        behind = {}  # key -> (first, last) offsets of an answer's batches before the offset
        empty, since = 0, time.monotonic()
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
                since = time.monotonic()
                continue
            conn, big = self.conn, 0
            if alone is not None and alone[0] in active:
                wanted = {alone[0]: (active[alone[0]][0], alone[1])}
                answer, big = self._fetch_alone(alone, active, most)
                alone = None
            else:
                alone = None
                epochs = {k: reader.cluster.leaders.get(k, (None, -1))[1] for k in active}
                wanted = {k: (o, asks.get(k, per_partition)) for k, (o, _) in active.items()}
                try:
                    answer = _fetch(
                        conn,
                        wanted,
                        reader.isolation,
                        epochs,
                        max_bytes=answer_bytes,
                        # the partitions' headers, and their aborted transactions
                        answer_limit=most + ANSWER_HEADERS + PARTITION_HEADERS * len(wanted),
                    )
                except AnswerTooLargeError as exc:
                    if exc.size > one_batch + ANSWER_HEADERS + PARTITION_HEADERS:
                        names = ", ".join(_name(*k) for k in wanted)
                        raise KafkaReadError(
                            f"{conn.address} announced a {exc.size}-byte answer to a Fetch of "
                            f"{names}, more than one batch may take ({one_batch} bytes)",
                            topic=next(iter(wanted))[0],
                            partition=next(iter(wanted))[1],
                        ) from None
                    # Unread, so the connection is gone: a new one asks for the first
                    # partition alone; the next refusal asks another first.
                    first = next(iter(active))
                    active[first] = active.pop(first)
                    alone = (first, per_partition, exc.size)
                    self.conn = None
                    self.conn = reader.cluster.connect(self.node)
                    continue
            parts, moved, done = [], [], []
            seen = set()
            for t in answer.responses:
                for p in t.partitions:
                    key = (t.topic, p.partition_index)
                    state = active.get(key)
                    if state is None or key in seen:
                        continue  # not asked, or answered twice: the first answer counts
                    seen.add(key)
                    if p.error_code in LEADER_MOVED:
                        moved.append((key, state[0], state[1], lookup(p.error_code)))
                        del active[key]
                        continue
                    if p.error_code == OFFSET_OUT_OF_RANGE:
                        raise KafkaReadError(
                            f"offset {state[0]} is out of range for {_name(*key)}: "
                            f"{conn.address} holds "
                            f"{_holds(p.log_start_offset, p.high_watermark)} now "
                            "(deleted or truncated while reading?)",
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
                    after, whole = _batch_ends(records, state[1])
                    if after is not None and whole < len(records):
                        records = records[:whole]  # up to where it goes backwards
                    if after is None or after <= state[0]:
                        if records and len(records) >= wanted.get(key, (0, per_partition))[1]:
                            # A batch larger than the limit was cut (as old brokers do): ask
                            # for more, up to the most an answer may be, or for that batch
                            # alone when it is larger than that.
                            need = _first_batch_size(records) or 0
                            if need <= len(records) or need > one_batch:
                                raise KafkaReadError(
                                    f"{conn.address} sent no whole batch of {_name(*key)} at "
                                    f"offset {state[0]} in {len(records)} bytes (its first "
                                    f"batch says it takes {need}; one batch may take "
                                    f"{one_batch})",
                                    topic=key[0],
                                    partition=key[1],
                                )
                            if need > most:
                                alone = (key, need, need + ANSWER_HEADERS + PARTITION_HEADERS)
                            else:
                                asks[key] = max(min(per_partition * 2, most), need)
                        elif p.high_watermark <= state[0]:
                            raise KafkaReadError(
                                f"{_name(*key)} ends at offset {p.high_watermark} on "
                                f"{conn.address}, before the {state[1]} this read was "
                                "planned to reach (truncated while reading?)",
                                topic=key[0],
                                partition=key[1],
                            )
                        elif after is not None:  # whole batches, all before the offset asked
                            behind[key] = (struct.unpack_from(">q", records)[0], after - 1)
                        continue
                    parts.append((key, state[0], state[1], records, p.aborted_transactions))
                    if after >= state[1]:
                        asks.pop(key, None)
                        del active[key]
                        done.append(key)
                    else:
                        state[0] = after
            if parts:
                empty, since = 0, time.monotonic()
                behind.clear()
            else:
                empty += 1
            if active and (
                empty > MAX_EMPTY_FETCHES or time.monotonic() - since > reader.stall_seconds
            ):
                names = ", ".join(
                    f"{_name(*k)} at offset {s[0]}"
                    + (
                        f" (only batches of offsets {behind[k][0]} to {behind[k][1]}, before it)"
                        if k in behind
                        else ""
                    )
                    for k, s in active.items()
                )
                raise KafkaTimeoutError(
                    f"{conn.address} sent no records for {names} in {empty} answers "
                    f"({time.monotonic() - since:.1f} s)"
                )
            if (parts or moved or done) and not self._hand_over(
                ("answer", self, parts, moved, done)
            ):
                return
            # An answer holding a batch larger than the block is converted before the next
            # Fetch is sent: memory stays about that batch, not two of them.
            if big and parts and not self._wait_converted():
                return


class _Reader:
    """The coordinator: leaders' threads, their answers converted in order per partition,
    and the metadata refresh when partitions move or their broker goes away: one refresh
    for every partition waiting for a leader, all within one deadline. Every wait is
    bounded by the request timeout, whatever the bookkeeping says."""

    def __init__(self, ranges, options, isolation, block_size, check_crc):
        self.options, self.isolation, self.block_size = options, isolation, block_size
        self.check_crc = check_crc
        # Each partition's ranges, in offset order, read one after the other.
        self.queued = {}
        for r in sorted(ranges, key=lambda r: (r.topic, r.partition, r.start)):
            key = (r.topic, r.partition)
            before = self.queued.setdefault(key, [])
            if before and r.start < before[-1][1]:
                raise ValueError(
                    f"ranges overlap: {_name(*key)} offsets {before[-1][0]} to {before[-1][1]} "
                    f"and {r.start} to {r.end} (each offset is read once)"
                )
            before.append((r.start, r.end))
        for key, spans in self.queued.items():
            spans.reverse()  # popped from the end: the lowest first
        timeout = options.request_timeout_ms / 1000
        # No records for this long is a stall (the leader raises), and the reader waits
        # for an answer at most a request more: nothing waits forever.
        self.stall_seconds = max(timeout, MAX_EMPTY_FETCHES * FETCH_MAX_WAIT_MS / 1000)
        self.patience = self.stall_seconds + timeout + 1.0
        self.move_deadline = timeout  # partitions without a leader wait at most this
        self.cluster = Cluster(options)
        self.out = queue.Queue()  # bounded by the leaders' credit: one answer each
        self.leaders = {}  # node -> its running _Leader
        self.finished = []  # leaders stopped to make room (joined at close)
        self.load = {}  # node -> partitions given to it and not finished
        self.waiting = {}  # node -> [(key, offset, end)] until a thread is free
        self.unplaced = {}  # key -> (offset, end, why, since): waiting for a leader
        self.rounds = 0  # metadata refreshes since every partition last had a leader
        self.retries = {}
        self.reading = set(self.queued)  # partitions not done yet
        self.pending = len(self.reading)

    def start(self):
        self.cluster.refresh(sorted({key[0] for key in self.queued}))
        for key in list(self.queued):
            self._next(key)

    def _next(self, key):
        """Give `key`'s next range to its leader; False when it has none left."""
        spans = self.queued[key]
        if not spans:
            return False
        start, end = spans.pop()
        try:
            node, _ = self.cluster.leader(*key)
        except KafkaReadError as exc:  # waits for a leader, within the deadline
            self._unplace(key, start, end, str(exc), "moved", MAX_LEADER_RETRIES)
        else:
            self._give(node, key, start, end)
        return True

    def _give(self, node, key, offset, end):
        leader = self.leaders.get(node)
        if leader is None and len(self.leaders) >= MAX_LEADER_THREADS:
            self.waiting.setdefault(node, []).append((key, offset, end))
            return
        if leader is None or not leader.take(key, offset, end):
            leader = self.leaders[node] = _Leader(self, node)
            leader.take(key, offset, end)
            leader.start()
        self.load[node] = self.load.get(node, 0) + 1

    def _finished(self, node, n):
        """`n` partitions of `node` are done or gone from it; a leader left with nothing
        makes room for a waiting one."""
        self.load[node] = self.load.get(node, 0) - n
        if self.load[node] > 0 or not self.waiting:
            return
        leader = self.leaders.pop(node, None)
        if leader is not None:  # it has nothing to fetch: it ends at once
            leader.stop.set()
            leader.inbox.put((None, 0, 0))
            leader.join(1.0)
            self.finished.append(leader)
        while self.waiting and len(self.leaders) < MAX_LEADER_THREADS:
            other, items = next(iter(self.waiting.items()))
            del self.waiting[other]
            for item in items:
                self._give(other, *item)

    def close(self):
        every = list(self.leaders.values()) + self.finished
        for leader in every:
            leader.stop.set()
            leader.inbox.put((None, 0, 0))
        # Waited for together: a thread in a slow request ends when it is answered (or
        # times out); the threads are daemons, so none outlives the process.
        deadline = time.monotonic() + CLOSE_WAIT
        for leader in every:
            leader.join(max(deadline - time.monotonic(), 0))
        self.cluster.close()

    def _unplace(self, key, offset, end, why, kind, limit):
        n = self.retries[(kind, key)] = self.retries.get((kind, key), 0) + 1
        if n > limit:
            raise KafkaReadError(
                f"{_name(*key)} could not be read from offset {offset} to {end}: {why} "
                f"(after {limit} metadata refreshes)",
                topic=key[0],
                partition=key[1],
            )
        self.unplaced[key] = (offset, end, why, time.monotonic())

    def _place(self):
        """One metadata refresh for every partition waiting for a leader, each sent to its
        leader; past the deadline, an error naming them and why."""
        self.rounds += 1
        oldest = min(since for _, _, _, since in self.unplaced.values())
        left = self.move_deadline - (time.monotonic() - oldest)
        time.sleep(max(min(RETRY_BACKOFF * self.rounds, 1.0, left), 0))
        problem = None
        try:
            self.cluster.refresh(sorted({key[0] for key in self.unplaced}))
        except KafkaClientError as exc:
            problem = f"then the metadata refresh failed: {exc}"
        for key, (offset, end, why, since) in list(self.unplaced.items()):
            if problem is None:
                try:
                    node, _ = self.cluster.leader(*key)
                except KafkaReadError as exc:
                    problem = f"then {exc}"
                else:
                    del self.unplaced[key]
                    self._give(node, key, offset, end)
                    continue
            if time.monotonic() - since >= self.move_deadline:
                raise KafkaReadError(
                    f"{_name(*key)} could not be read from offset {offset} to {end}: {why}; "
                    f"{problem} ({self.rounds} metadata refreshes in "
                    f"{time.monotonic() - since:.1f} s)",
                    topic=key[0],
                    partition=key[1],
                )
        if not self.unplaced:
            self.rounds = 0

    def _convert(self, node, key, offset, end, records, aborted):
        """The rows of one partition's answer, as RecordBatches. Its compressed batches
        may decompress to half of block_size in all: each to its share of it, and when
        one would take more, the answer is converted in halves (each half's batches
        then have a larger share), down to one batch that may take it all. Under
        read_committed the transactions' state runs from piece to piece, in offset order."""
        most = max(self.block_size // ANSWER_LIMIT_SHARE, 1024)
        spans = _compressed_spans(records)
        if aborted and self.isolation:
            aborted = AbortedTransactions(aborted)
        # The last offset of the pieces converted so far: a piece's batches start after it,
        # as they must in one piece (a legacy wrapper's messages are only known once read).
        before = [None]
        yield from self._convert_spans(
            node, key, offset, end, records, aborted, spans, most, before
        )

    def _convert_spans(self, node, key, offset, end, records, aborted, spans, most, before):
        compressed = sum(c for _, _, c in spans)
        lo, hi = spans[0][0], spans[-1][1]
        limit = max(most // max(compressed, 1), 1)
        if len(spans) == 1 and hi - lo > most:  # one batch larger than the block
            limit = max(most, ONE_BATCH_RATIO * (hi - lo))
        try:
            batch, after, _ = batches_to_arrow(
                records if (lo, hi) == (0, len(records)) else memoryview(records)[lo:hi],
                topic=key[0],
                partition=key[1],
                read_committed=bool(self.isolation),
                aborted_transactions=aborted or (),
                check_crc=self.check_crc,
                start_offset=offset,
                end_offset=end,
                max_decompressed=limit,
                previous_offset=before[0],
            )
        except DecodeError as exc:
            if "max_decompressed" not in str(exc):
                # The same error, saying whose bytes: the partition, the offset, the broker.
                where = f"{_name(*key)} from offset {offset} ({self.cluster.address(node)})"
                raise DecodeError(exc.reason, exc.offset + lo, f"{where} records") from exc
            if len(spans) > 1 and compressed > 1:
                half = len(spans) // 2
                for part in (spans[:half], spans[half:]):
                    yield from self._convert_spans(
                        node, key, offset, end, records, aborted, part, most, before
                    )
                return
            raise KafkaReadError(
                f"{_name(*key)} from offset {offset}: a batch from {self.cluster.address(node)} "
                f"decompresses to more than {limit} bytes, what block_size={self.block_size} "
                f"allows ({exc}; raise block_size if the batch is real)",
                topic=key[0],
                partition=key[1],
            ) from exc
        if after is not None:
            before[0] = after - 1
        if batch.num_rows:
            yield batch

    def _stuck(self):
        names = ", ".join(_name(*k) for k in sorted(self.reading))
        return KafkaTimeoutError(
            f"no answer from the leaders ({', '.join(map(self.cluster.address, self.leaders))}) "
            f"in {self.patience:.1f} s while reading {names}"
        )

    def batches(self):
        """RecordBatches in the order the answers come (in offset order per partition)."""
        heard = time.monotonic()
        while self.pending:
            if self.unplaced and self.out.empty():
                self._place()
            try:
                item = self.out.get(timeout=0.1 if self.unplaced else 1.0)
            except queue.Empty:
                if self.unplaced:
                    continue
                # Never wait for answers no thread will give (a defect here, not the broker's).
                if not any(leader.is_alive() for leader in self.leaders.values()):
                    raise RuntimeError(
                        f"fastkwire's reader lost track of {self.pending} partitions"
                    ) from None
                if time.monotonic() - heard > self.patience:
                    raise self._stuck() from None
                continue
            heard = time.monotonic()
            if item[0] == "answer":
                _, leader, parts, moved, done = item
                try:
                    for key, offset, end, records, aborted in parts:
                        yield from self._convert(leader.node, key, offset, end, records, aborted)
                finally:
                    leader.credit.release()
                for key, offset, end, error in moved:
                    self._unplace(
                        key, offset, end, f"its leader moved ({error})", "moved", MAX_LEADER_RETRIES
                    )
                for key in done:
                    if not self._next(key):
                        self.pending -= 1
                        self.reading.discard(key)
                if moved or done:
                    self._finished(leader.node, len(moved) + len(done))
                continue
            _, leader, exc, left = item  # "gone": the leader's thread ended on an error
            if self.leaders.get(leader.node) is leader:
                del self.leaders[leader.node]
            if isinstance(exc, (KafkaReadError, KafkaSecurityError)) or not isinstance(
                exc, KafkaClientError
            ):
                raise exc
            what = f"{self.cluster.address(leader.node)} failed: {exc}"
            for key, offset, end in left:
                try:
                    self._unplace(key, offset, end, what, "gone", MAX_BROKER_RETRIES)
                except KafkaReadError as failed:
                    raise KafkaReadError(
                        str(failed).replace(" (after 1 metadata refreshes)", ""),
                        getattr(exc, "error", None),
                        *key,
                    ) from exc
            self._finished(leader.node, len(left))


def read_ranges(
    ranges,
    *,
    options,
    isolation_level="read_uncommitted",
    block_size=DEFAULT_BLOCK_SIZE,
    check_crc=True,
):
    """RecordBatches (SCHEMA) of the rows in `ranges` (from `plan`), fetched from every
    leader at once; rows of one partition come in offset order. Ranges of one partition
    are read one after the other; ranges that overlap are refused (ValueError)."""
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
    block_size: the memory budget per leader (a Fetch answer holds a quarter of it; a
    batch larger than it is read whole). Security options as kafka-python names them
    (security_protocol, ssl_cafile, sasl_mechanism, ...), client_id, request_timeout_ms. Rows of a partition are in offset order; partitions follow one
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

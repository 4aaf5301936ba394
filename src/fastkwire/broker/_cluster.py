"""What the broker knows: its nodes, its topics (each with an id, partitions and configs) and
the producer ids it handed out. A plain object; the handlers read and change it.

Replicas are spread over the live nodes (partition p of a topic has its replicas from node
(first + p) % N on), its leader the first of them that runs. A group or transactional id is
coordinated by the leader of the __consumer_offsets partition its key hashes to, as in Kafka.
A node may be stopped and started (`stop_node`, `start_node`) and a leader moved
(`move_leader`): the leader epoch goes up at each change, as Kafka's controller does.
"""

import base64
import re
import uuid
import zlib

from ._log import PartitionLog
from ._producers import PartitionProducers, ProducerIds

# Kafka 4.0's topic configs and their defaults (LogConfig / TopicConfig): name -> (default
# value as Kafka shows it, DescribeConfigs' config type).
BOOLEAN, STRING, INT, SHORT, LONG, DOUBLE, LIST, CLASS, PASSWORD = range(1, 10)
LONG_MAX = "9223372036854775807"
INTERNAL_SEGMENT_BYTES = "104857600"  # the internal topics' segments (100 MiB), as Kafka's
TOPIC_CONFIGS = {
    "cleanup.policy": ("delete", LIST),
    "compression.gzip.level": ("-1", INT),
    "compression.lz4.level": ("9", INT),
    "compression.type": ("producer", STRING),
    "compression.zstd.level": ("3", INT),
    "delete.retention.ms": ("86400000", LONG),
    "file.delete.delay.ms": ("60000", LONG),
    "flush.messages": (LONG_MAX, LONG),
    "flush.ms": (LONG_MAX, LONG),
    "follower.replication.throttled.replicas": ("", LIST),
    "index.interval.bytes": ("4096", INT),
    "leader.replication.throttled.replicas": ("", LIST),
    "local.retention.bytes": ("-2", LONG),
    "local.retention.ms": ("-2", LONG),
    "max.compaction.lag.ms": (LONG_MAX, LONG),
    "max.message.bytes": ("1048588", INT),
    "message.timestamp.after.max.ms": ("3600000", LONG),
    "message.timestamp.before.max.ms": (LONG_MAX, LONG),
    "message.timestamp.type": ("CreateTime", STRING),
    "min.cleanable.dirty.ratio": ("0.5", DOUBLE),
    "min.compaction.lag.ms": ("0", LONG),
    "min.insync.replicas": ("1", INT),
    "preallocate": ("false", BOOLEAN),
    "remote.storage.enable": ("false", BOOLEAN),
    "retention.bytes": ("-1", LONG),
    "retention.ms": ("604800000", LONG),
    "segment.bytes": ("1073741824", INT),
    "segment.index.bytes": ("10485760", INT),
    "segment.jitter.ms": ("0", LONG),
    "segment.ms": ("604800000", LONG),
    "unclean.leader.election.enable": ("false", BOOLEAN),
}
# The values a config may take, beside what its type allows.
CHOICES = {
    "cleanup.policy": {"delete", "compact"},
    "compression.type": {"uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"},
    "message.timestamp.type": {"CreateTime", "LogAppendTime"},
}


def java_number(text):
    """`text`, unless it holds what Python's int() and float() take and Java's parsers do not
    (underscores, spaces around it): ValueError."""
    if "_" in text or text != text.strip():
        raise ValueError(f"{text!r} is not a number")
    return text


def java_int(text):
    """int(text) as Java's Integer.parseInt / Long.parseLong read it."""
    return int(java_number(text))


def check_config(name, value):
    """ClusterError INVALID_CONFIG unless `value` (a string) suits topic config `name`."""
    if name not in TOPIC_CONFIGS:
        raise ClusterError("INVALID_CONFIG", f"unknown topic config {name!r}")
    if value is None:
        raise ClusterError("INVALID_CONFIG", f"topic config {name!r} has a null value")
    kind = TOPIC_CONFIGS[name][1]
    trimmed = value.strip()  # as Kafka's ConfigDef reads a value
    try:
        if kind in (INT, SHORT, LONG):
            java_int(trimmed)
        elif kind == DOUBLE:
            float(java_number(trimmed))
    except ValueError:
        raise ClusterError("INVALID_CONFIG", f"{name}: {value!r} is not a number") from None
    if kind == BOOLEAN and trimmed.lower() not in ("true", "false"):
        raise ClusterError("INVALID_CONFIG", f"{name}: {value!r} is not true or false")
    allowed = CHOICES.get(name)
    if allowed is not None:
        given = [v.strip() for v in value.split(",")] if kind == LIST else [value]
        wrong = [v for v in given if v not in allowed]
        if wrong:
            raise ClusterError(
                "INVALID_CONFIG", f"{name}: {wrong[0]!r} is not one of {', '.join(sorted(allowed))}"
            )


# The broker configs a topic config falls back to (DescribeConfigs' synonyms).
BROKER_SYNONYMS = {
    "cleanup.policy": "log.cleanup.policy",
    "compression.type": "compression.type",
    "max.message.bytes": "message.max.bytes",
    "message.timestamp.type": "log.message.timestamp.type",
    "retention.bytes": "log.retention.bytes",
    "retention.ms": "log.retention.ms",
    "segment.bytes": "log.segment.bytes",
    "min.insync.replicas": "min.insync.replicas",
}

_LEGAL_NAME = re.compile(r"[a-zA-Z0-9._-]+")
MAX_NAME_LENGTH = 249
# Partitions the whole cluster may hold: a CreateTopics or CreatePartitions asking for
# more is refused, so that one request cannot make the broker allocate without bound.
DEFAULT_MAX_PARTITIONS = 100_000
# Kafka's internal topic of group offsets: made by the broker when a group coordinator is
# first looked up, with offsets.topic.num.partitions partitions (50 by default).
OFFSETS_TOPIC = "__consumer_offsets"
# The transaction coordinator's internal topic, made at its first write, with as many
# partitions as __consumer_offsets (a transactional id's is the one FindCoordinator hashes to).
TRANSACTION_STATE_TOPIC = "__transaction_state"
DEFAULT_OFFSETS_TOPIC_PARTITIONS = 50


class ClusterError(Exception):
    """A change the cluster refuses; `.error` is Kafka's error name."""

    def __init__(self, error, text):
        super().__init__(text)
        self.error = error


def check_topic_name(name):
    """ClusterError INVALID_TOPIC_EXCEPTION unless `name` is a legal Kafka topic name."""
    if not name or name in (".", ".."):
        raise ClusterError("INVALID_TOPIC_EXCEPTION", f"topic name {name!r} is not allowed")
    if len(name) > MAX_NAME_LENGTH:
        raise ClusterError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name[:40]!r}... is {len(name)} characters, at most {MAX_NAME_LENGTH}",
        )
    if not _LEGAL_NAME.fullmatch(name):
        raise ClusterError(
            "INVALID_TOPIC_EXCEPTION",
            f"topic name {name!r} holds characters other than ASCII letters, digits, '.', '_', '-'",
        )


NO_LEADER = -1
# Kafka's offsets.topic.replication.factor (3), at most the nodes there are.
OFFSETS_TOPIC_REPLICATION_FACTOR = 3


class Partition:
    __slots__ = ("index", "leader", "replicas", "log", "producers")

    def __init__(self, index, replicas, log=None):
        self.index = index
        self.replicas = replicas  # node ids, the preferred leader first
        self.leader = replicas[0]  # NO_LEADER while none of its replicas runs
        self.log = PartitionLog() if log is None else log
        self.producers = PartitionProducers()


class Topic:
    __slots__ = ("name", "id", "partitions", "configs", "replication_factor", "internal")

    def __init__(self, name, topic_id, configs, replication_factor, internal=False):
        self.name = name
        self.id = topic_id
        self.partitions = []
        self.configs = configs  # the configs set on the topic (not the defaults)
        self.replication_factor = replication_factor
        self.internal = internal  # the broker's own (__consumer_offsets): clients may not write

    def config(self, name):
        value = self.configs.get(name)
        return TOPIC_CONFIGS[name][0] if value is None else value

    @property
    def max_message_bytes(self):
        return int(self.config("max.message.bytes"))

    @property
    def log_append_time(self):
        return self.config("message.timestamp.type") == "LogAppendTime"


def _cluster_id():
    """A Kafka-style cluster id: a random UUID in unpadded URL-safe base64 (22 characters)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


class Cluster:
    """Nodes, topics and producer ids. `nodes` is {node id: (host, port)}; with
    `auto_create_topics`, Metadata and Produce create unknown topics of `num_partitions`.
    `offsets_topic_partitions` sizes __consumer_offsets, which is not counted in
    `max_partitions` (the cap is on what clients ask for)."""

    def __init__(
        self,
        nodes,
        *,
        auto_create_topics=True,
        num_partitions=1,
        cluster_id=None,
        max_partitions=DEFAULT_MAX_PARTITIONS,
        offsets_topic_partitions=DEFAULT_OFFSETS_TOPIC_PARTITIONS,
    ):
        if not nodes:
            raise ValueError("nodes: a cluster needs at least one node")
        self.nodes = dict(nodes)
        # node id -> {listener name (its protocol): (host, port)}, set by the server when
        # it binds them; a node missing here has only its address in `nodes`
        self.listeners = {}
        self.max_partitions = max_partitions
        if offsets_topic_partitions < 1:
            raise ValueError(
                f"offsets_topic_partitions: at least 1, not {offsets_topic_partitions}"
            )
        self.offsets_topic_partitions = offsets_topic_partitions
        self.partitions = 0  # of every topic together
        self.auto_create_topics = auto_create_topics
        self.num_partitions = num_partitions
        self.cluster_id = cluster_id or _cluster_id()
        self.stopped = set()  # node ids not running
        self.topics = {}  # name -> Topic
        self.topic_ids = {}  # uuid.UUID -> Topic
        self._summary = None  # topic_summary()'s, until a topic or partition comes or goes
        self.producer_ids = ProducerIds()
        # Where the logs are kept besides memory (DiskLogs): told of topics made and deleted.
        self.storage = None

    # ---- reads

    def node_ids(self):
        return sorted(self.nodes)

    def live_node_ids(self):
        return [n for n in sorted(self.nodes) if n not in self.stopped]

    def live_nodes(self, listener=None):
        """{node id: (host, port)} of the nodes running (what Metadata lists), the addresses
        of their listener named `listener`."""
        return {n: self.address(n, listener) for n in self.live_node_ids()}

    def address(self, node, listener=None):
        """(host, port) of `node`'s listener named `listener` (a client is told the addresses
        of the listener it came in on, as Kafka advertises them per listener name); its
        first listener's when None or unknown."""
        endpoints = self.listeners.get(node)
        if endpoints and listener in endpoints:
            return endpoints[listener]
        return self.nodes[node]

    @property
    def controller_id(self):
        live = self.live_node_ids()
        return live[0] if live else NO_LEADER

    def coordinator(self, key):
        """The node that coordinates group or transactional id `key`: the leader of the
        __consumer_offsets partition it hashes to (NO_LEADER when none runs)."""
        index = self.coordinator_partition(key)
        topic = self.topics.get(OFFSETS_TOPIC)
        if topic is not None and index < len(topic.partitions):
            return topic.partitions[index].leader
        return self._placement(OFFSETS_TOPIC, index, self.offsets_replication_factor())[0]

    def coordinator_partition(self, key):
        """The internal topics' partition that keeps group or transactional id `key`."""
        return zlib.crc32(key.encode("utf-8", "surrogatepass")) % self.offsets_topic_partitions

    def offsets_replication_factor(self):
        """Kafka's offsets.topic.replication.factor (3), at most the nodes that run."""
        return max(1, min(OFFSETS_TOPIC_REPLICATION_FACTOR, len(self.live_node_ids())))

    def _placement(self, topic_name, index, factor):
        """The replicas of a new partition: `factor` live nodes from (first + index) on."""
        ids = self.live_node_ids() or self.node_ids()
        first = zlib.crc32(topic_name.encode("utf-8", "surrogatepass")) + index
        return [ids[(first + k) % len(ids)] for k in range(min(factor, len(ids)))]

    def partition(self, topic_name, index):
        topic = self.topics.get(topic_name)
        if topic is None or not 0 <= index < len(topic.partitions):
            return None
        return topic.partitions[index]

    def topic_summary(self):
        """{name: (topic id, partition count)} of every topic (what KIP-848 groups assign):
        one dict, the same object until a topic or partition comes or goes (callers may cache
        what they derive from it by its identity; they must not change it)."""
        if self._summary is None:
            self._summary = {name: (t.id, len(t.partitions)) for name, t in self.topics.items()}
        return self._summary

    def partition_count(self, topic_name):
        topic = self.topics.get(topic_name)
        return None if topic is None else len(topic.partitions)

    # ---- changes

    def check_new_topic(self, name, num_partitions=-1, replication_factor=-1, configs=None):
        """(partitions, replication factor) a new topic gets; ClusterError if it cannot be."""
        check_topic_name(name)
        if name in self.topics:
            raise ClusterError("TOPIC_ALREADY_EXISTS", f"topic {name!r} already exists")
        partitions = self.num_partitions if num_partitions == -1 else num_partitions
        if partitions < 1:
            raise ClusterError(
                "INVALID_PARTITIONS", f"number of partitions must be at least 1, not {partitions}"
            )
        self._check_room(partitions)
        factor = 1 if replication_factor == -1 else replication_factor
        live = len(self.live_node_ids())
        if not 1 <= factor <= live:
            raise ClusterError(
                "INVALID_REPLICATION_FACTOR",
                f"replication factor {factor} is not between 1 and the {live} "
                "node(s) of this cluster that run",
            )
        for key, value in (configs or {}).items():
            check_config(key, value)
        return partitions, factor

    def create_topic(
        self, name, num_partitions=-1, replication_factor=-1, configs=None, topic_id=None
    ):
        partitions, factor = self.check_new_topic(name, num_partitions, replication_factor, configs)
        topic = Topic(name, topic_id or uuid.uuid4(), dict(configs or {}), factor)
        self.topics[name] = topic
        self.topic_ids[topic.id] = topic
        self._add_partitions(topic, partitions)
        if self.storage is not None:
            self.storage.topic_created(topic)
        return topic

    def configs_changed(self, topic):
        if self.storage is not None:
            self.storage.configs_changed(topic)

    def apply_retention(self, now_ms):
        """Kafka's retention.bytes and retention.ms on every partition (not the internal
        topic's); returns the partitions whose log start moved."""
        moved = []
        for topic in self.topics.values():
            if topic.internal or "delete" not in topic.config("cleanup.policy"):
                continue
            size, ms = int(topic.config("retention.bytes")), int(topic.config("retention.ms"))
            for partition in topic.partitions:
                start = partition.log.log_start
                if partition.log.retain(size, ms, now_ms) != start:
                    moved.append(partition)
        self.flush_storage()
        return moved

    def flush_storage(self):
        """Write what the storage holds back (the log starts that moved)."""
        if self.storage is not None:
            self.storage.flush()

    def auto_create(self, name):
        """The topic `name`, created if the cluster creates topics on first use; None when it
        does not exist and is not created."""
        topic = self.topics.get(name)
        if topic is None and self.auto_create_topics:
            if name in (OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC):
                topic = self.internal_topic(name)
            else:
                topic = self.create_topic(name)
        return topic

    def offsets_topic(self):
        return self.internal_topic(OFFSETS_TOPIC)

    def internal_topic(self, name, partitions=None, topic_id=None):
        """__consumer_offsets or __transaction_state, made on first call: internal,
        compacted, with `partitions` (default offsets_topic_partitions; a restart gives
        those its directory holds), its first partitions not counted in `max_partitions`
        (partitions added later are)."""
        topic = self.topics.get(name)
        if topic is None:
            count = max(partitions or 0, self.offsets_topic_partitions)
            topic = Topic(
                name,
                topic_id or uuid.uuid4(),
                # Kafka's offsets.topic.segment.bytes / transaction.state.log.segment.bytes
                {"cleanup.policy": "compact", "segment.bytes": INTERNAL_SEGMENT_BYTES},
                self.offsets_replication_factor(),
                True,
            )
            self.topics[name] = topic
            self.topic_ids[topic.id] = topic
            self._add_partitions(topic, count)
            self.partitions -= count  # only its growth is counted
        return topic

    def _check_room(self, more):
        if self.partitions + more > self.max_partitions:
            raise ClusterError(
                "INVALID_PARTITIONS",
                f"{more} more partitions would pass the cluster's {self.max_partitions} "
                f"(max_partitions; {self.partitions} exist)",
            )

    def _add_partitions(self, topic, count):
        self._summary = None
        self.partitions += count - len(topic.partitions)
        for index in range(len(topic.partitions), count):
            replicas = self._placement(topic.name, index, topic.replication_factor)
            log = None if self.storage is None else self.storage.new_log(topic, index)
            topic.partitions.append(Partition(index, replicas, log))

    def check_partition_count(self, name, count):
        topic = self.topics.get(name)
        if topic is None:
            raise ClusterError("UNKNOWN_TOPIC_OR_PARTITION", f"topic {name!r} does not exist")
        if count <= len(topic.partitions):
            raise ClusterError(
                "INVALID_PARTITIONS",
                f"topic {name!r} has {len(topic.partitions)} partitions; a new count must be "
                f"larger, not {count}",
            )
        self._check_room(count - len(topic.partitions))
        return topic

    def create_partitions(self, name, count):
        self._add_partitions(self.check_partition_count(name, count), count)

    def delete_topic(self, topic):
        self._summary = None
        self.partitions -= len(topic.partitions)
        if topic.internal:
            self.partitions += self.offsets_topic_partitions
        del self.topics[topic.name]
        del self.topic_ids[topic.id]
        if self.storage is not None:
            self.storage.topic_deleted(topic)

    # ---- nodes and leaders

    def _check_node(self, node_id):
        if node_id not in self.nodes:
            raise ValueError(f"node_id: no node {node_id!r} (the nodes are {self.node_ids()})")

    def _lead(self, partition, node_id):
        """`node_id` (or NO_LEADER) leads `partition` from now on, in a new leader epoch."""
        partition.leader = node_id
        partition.log.new_leader_epoch()

    def move_leader(self, topic_name, index, node_id):
        """Make running node `node_id` the leader of the partition; a node that holds no
        replica of it takes the place of the current leader's replica (a reassignment)."""
        self._check_node(node_id)
        if node_id in self.stopped:
            raise ValueError(f"node_id: node {node_id} is stopped")
        partition = self.partition(topic_name, index)
        if partition is None:
            raise ValueError(f"no partition {topic_name!r} {index}")
        if node_id not in partition.replicas:
            at = partition.replicas.index(partition.leader) if partition.leader >= 0 else 0
            partition.replicas[at] = node_id
        if partition.leader != node_id:
            self._lead(partition, node_id)
        return partition

    def stop_node(self, node_id):
        """Node `node_id` stops: each partition it led goes to the first of its other replicas
        that runs, or has no leader. Returns the partitions whose leader changed."""
        self._check_node(node_id)
        if node_id in self.stopped:
            raise ValueError(f"node_id: node {node_id} is stopped already")
        self.stopped.add(node_id)
        moved = []
        for partition in self.all_partitions():
            if partition.leader == node_id:
                live = [r for r in partition.replicas if r not in self.stopped]
                self._lead(partition, live[0] if live else NO_LEADER)
                moved.append(partition)
        return moved

    def start_node(self, node_id):
        """Node `node_id` runs again: the partitions left without a leader that it holds a
        replica of are led by it (the others keep their leaders, as Kafka's do until a
        preferred leader election). Returns the partitions whose leader changed."""
        self._check_node(node_id)
        if node_id not in self.stopped:
            raise ValueError(f"node_id: node {node_id} is running")
        self.stopped.discard(node_id)
        moved = []
        for partition in self.all_partitions():
            if partition.leader == NO_LEADER and node_id in partition.replicas:
                self._lead(partition, node_id)
                moved.append(partition)
        return moved

    def all_partitions(self):
        for topic in self.topics.values():
            yield from topic.partitions

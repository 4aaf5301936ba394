"""DescribeConfigs for a BROKER and a BROKER_LOGGER resource, as a Kafka 4.0 KRaft node
answers them (ConfigHelper): every broker config the table knows, with its value, its
source (STATIC_BROKER_CONFIG for what the node was started with, DEFAULT_CONFIG for the
rest), its synonyms in Kafka's order of precedence, `read_only` unless Kafka can change it
at run time (DynamicBrokerConfig.AllDynamicConfigs), its type and, when asked (v3+), a line
of documentation. The empty name describes the cluster-wide dynamic defaults (none here:
a broker's configs are static); a node id other than the node's own is INVALID_REQUEST.

The table holds Kafka 4.0's broker configs a client or tool looks at (its names, defaults
and types): the server's, the socket server's, the group and transaction coordinators',
and the `log.*` defaults behind the topic configs. The documentation lines (the brokers'
and the topics') are ours.
"""

import logging

from ._cluster import BOOLEAN, DOUBLE, INT, LIST, LONG, SHORT, STRING, ClusterError, java_int

# DescribeConfigs' config sources
DYNAMIC_BROKER_LOGGER_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 6, 4, 5
LONG_MAX, INT_MAX = "9223372036854775807", "2147483647"

# name -> (Kafka 4.0's default, config type, dynamic (Kafka can change it at run time), doc)
BROKER_CONFIGS = {
    # the node and its listeners
    "node.id": ("-1", INT, False, "The id of this node in the cluster."),
    "broker.id": ("-1", INT, False, "The broker's id: the node id in KRaft mode."),
    "process.roles": ("", LIST, False, "The roles this node plays: broker, controller."),
    "controller.listener.names": (None, STRING, False, "The listeners the controller uses."),
    "listeners": ("PLAINTEXT://:9092", LIST, True, "The addresses the node listens on."),
    # (read-only on a KRaft node: Kafka 4.0 answers so, and kafka-python's suite checks it)
    "advertised.listeners": (None, STRING, False, "The addresses given to clients."),
    "listener.security.protocol.map": (
        "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT",
        STRING,
        True,
        "Each listener name's security protocol.",
    ),
    "inter.broker.listener.name": (None, STRING, False, "The listener brokers talk on."),
    "security.inter.broker.protocol": ("PLAINTEXT", STRING, False, "Brokers' own protocol."),
    "broker.rack": (None, STRING, False, "The node's rack."),
    "sasl.enabled.mechanisms": ("GSSAPI", LIST, True, "The SASL mechanisms a login may use."),
    "ssl.client.auth": ("none", STRING, True, "Whether clients must present a certificate."),
    "connections.max.idle.ms": ("600000", LONG, False, "Idle connections close after this."),
    "connections.max.reauth.ms": (
        "0",
        LONG,
        False,
        "A SASL session's longest life before the client logs in again (0: no limit).",
    ),
    "connection.failed.authentication.delay.ms": (
        "100",
        INT,
        False,
        "How long a failed login waits before its connection closes.",
    ),
    "max.connections": (INT_MAX, INT, True, "Connections the node accepts at most."),
    "max.connections.per.ip": (INT_MAX, INT, True, "Connections from one address at most."),
    "socket.request.max.bytes": ("104857600", INT, False, "A request's largest size."),
    "num.network.threads": ("3", INT, True, "Threads reading and writing sockets."),
    "num.io.threads": ("8", INT, True, "Threads handling requests."),
    "background.threads": ("10", INT, True, "Threads for background work."),
    "log.dirs": (None, STRING, False, "The directories the logs are kept in."),
    "log.dir": ("/tmp/kafka-logs", STRING, False, "The log directory, when log.dirs is unset."),
    "metadata.log.dir": (None, STRING, False, "The directory of the metadata log."),
    # topics
    "auto.create.topics.enable": ("true", BOOLEAN, False, "Create unknown topics on use."),
    "delete.topic.enable": ("true", BOOLEAN, False, "Whether topics may be deleted."),
    "num.partitions": ("1", INT, False, "An auto-created topic's partitions."),
    "default.replication.factor": ("1", INT, False, "An auto-created topic's replicas."),
    "auto.leader.rebalance.enable": ("true", BOOLEAN, False, "Move leaders back by itself."),
    "message.max.bytes": ("1048588", INT, True, "A record batch's largest size."),
    "fetch.max.bytes": ("57671680", INT, False, "A Fetch answer's largest size."),
    "max.incremental.fetch.session.cache.slots": (
        "1000",
        INT,
        False,
        "Incremental fetch sessions kept at most.",
    ),
    "max.request.partition.size.limit": (
        "2000",
        INT,
        False,
        "Partitions DescribeTopicPartitions answers per page.",
    ),
    "compression.type": ("producer", STRING, True, "How the node compresses batches."),
    "compression.gzip.level": ("-1", INT, True, "The gzip level when the node compresses."),
    "compression.lz4.level": ("9", INT, True, "The lz4 level when the node compresses."),
    "compression.zstd.level": ("3", INT, True, "The zstd level when the node compresses."),
    "min.insync.replicas": ("1", INT, True, "Replicas an acks=all write needs."),
    "unclean.leader.election.enable": (
        "false",
        BOOLEAN,
        True,
        "Whether a replica out of sync may lead.",
    ),
    # the log defaults behind the topic configs (Kafka changes the primary names at run
    # time, not their hours and minutes forms)
    "log.cleanup.policy": ("delete", LIST, True, "Topics' default cleanup.policy."),
    "log.retention.ms": (None, LONG, True, "Topics' default retention.ms."),
    "log.retention.minutes": (None, INT, False, "retention.ms in minutes."),
    "log.retention.hours": ("168", INT, False, "retention.ms in hours."),
    "log.retention.bytes": ("-1", LONG, True, "Topics' default retention.bytes."),
    "log.retention.check.interval.ms": ("300000", LONG, False, "How often retention runs."),
    "log.segment.bytes": ("1073741824", INT, True, "Topics' default segment.bytes."),
    "log.roll.ms": (None, LONG, True, "Topics' default segment.ms."),
    "log.roll.hours": ("168", INT, False, "segment.ms in hours."),
    "log.roll.jitter.ms": (None, LONG, True, "Topics' default segment.jitter.ms."),
    "log.roll.jitter.hours": ("0", INT, False, "segment.jitter.ms in hours."),
    "log.index.size.max.bytes": ("10485760", INT, True, "Topics' default segment.index.bytes."),
    "log.index.interval.bytes": ("4096", INT, True, "Topics' default index.interval.bytes."),
    "log.flush.interval.messages": (LONG_MAX, LONG, True, "Topics' default flush.messages."),
    "log.flush.interval.ms": (None, LONG, True, "Topics' default flush.ms."),
    "log.flush.scheduler.interval.ms": (LONG_MAX, LONG, False, "How often logs are flushed."),
    "log.segment.delete.delay.ms": ("60000", LONG, True, "Topics' default file.delete.delay.ms."),
    "log.preallocate": ("false", BOOLEAN, True, "Topics' default preallocate."),
    "log.message.timestamp.type": ("CreateTime", STRING, True, "Topics' default timestamp type."),
    "log.message.timestamp.before.max.ms": (
        LONG_MAX,
        LONG,
        True,
        "Topics' default message.timestamp.before.max.ms.",
    ),
    "log.message.timestamp.after.max.ms": (
        "3600000",
        LONG,
        True,
        "Topics' default message.timestamp.after.max.ms.",
    ),
    "log.cleaner.enable": ("true", BOOLEAN, False, "Whether compaction runs."),
    "log.cleaner.backoff.ms": ("15000", LONG, True, "How often the cleaner looks for work."),
    "log.cleaner.min.cleanable.ratio": (
        "0.5",
        DOUBLE,
        True,
        "Topics' default min.cleanable.dirty.ratio.",
    ),
    "log.cleaner.delete.retention.ms": ("86400000", LONG, True, "delete.retention.ms's default."),
    "log.cleaner.min.compaction.lag.ms": ("0", LONG, True, "min.compaction.lag.ms's default."),
    "log.cleaner.max.compaction.lag.ms": (LONG_MAX, LONG, True, "max.compaction.lag.ms's default."),
    # the group coordinator
    "group.min.session.timeout.ms": ("6000", INT, False, "A classic member's least timeout."),
    "group.max.session.timeout.ms": ("1800000", INT, False, "A classic member's most timeout."),
    "group.initial.rebalance.delay.ms": ("3000", INT, False, "A new group's first wait."),
    "group.max.size": (INT_MAX, INT, False, "Members of a classic group at most."),
    "group.consumer.session.timeout.ms": ("45000", INT, False, "A consumer member's timeout."),
    "group.consumer.heartbeat.interval.ms": ("5000", INT, False, "A consumer's heartbeat."),
    "group.consumer.max.size": (INT_MAX, INT, False, "Members of a consumer group at most."),
    "group.coordinator.rebalance.protocols": (
        "classic,consumer",
        LIST,
        False,
        "The group protocols served.",
    ),
    "offsets.topic.num.partitions": ("50", INT, False, "__consumer_offsets' partitions."),
    "offsets.topic.replication.factor": ("3", SHORT, False, "__consumer_offsets' replicas."),
    "offsets.retention.minutes": ("10080", INT, False, "How long an empty group's offsets last."),
    "offsets.retention.check.interval.ms": ("600000", LONG, False, "How often offsets expire."),
    "offset.metadata.max.bytes": ("4096", INT, False, "A committed offset's metadata at most."),
    # the transaction coordinator and producer state
    "transaction.max.timeout.ms": ("900000", INT, False, "A transaction's longest timeout."),
    "transactional.id.expiration.ms": (
        "604800000",
        INT,
        False,
        "An idle transactional id is forgotten after this.",
    ),
    "transaction.state.log.num.partitions": ("50", INT, False, "__transaction_state's size."),
    "transaction.state.log.replication.factor": ("3", SHORT, False, "Its replicas."),
    "transaction.partition.verification.enable": (
        "true",
        BOOLEAN,
        True,
        "Leaders verify a transaction's first batch with the coordinator.",
    ),
    "producer.id.expiration.ms": (
        "86400000",
        INT,
        True,
        "An idle idempotent producer's state is forgotten after this.",
    ),
    "producer.id.expiration.check.interval.ms": (
        "600000",
        INT,
        False,
        "How often producers' state is looked at for expiry.",
    ),
    "transaction.remove.expired.transaction.cleanup.interval.ms": (
        "3600000",
        INT,
        False,
        "How often transactional ids are looked at for expiry.",
    ),
}

# A config and the others that say the same thing, the most precise first (Kafka's
# brokerConfigSynonyms); a config not named here is its own only synonym.
_SYNONYM_GROUPS = (
    ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    ("log.roll.ms", "log.roll.hours"),
    ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
)
SYNONYMS = {name: group for group in _SYNONYM_GROUPS for name in group}


def node_id_of(text):
    """The node id `text` names, written as Kafka's clients write one (String.valueOf):
    ValueError for other spellings ("00", "+0", another script's zero), each of which would
    otherwise name the node again in one request and be described again in full."""
    number = int(text) if text.isascii() else None
    if number is None or str(number) != text:
        raise ValueError(f"{text!r} is not a node id")
    return number


def broker_id(resource_name):
    """The node id a BROKER or BROKER_LOGGER resource names (see node_id_of)."""
    try:
        return node_id_of(resource_name)
    except ValueError:
        raise ClusterError(
            "INVALID_REQUEST", f"Broker id must be an integer, but it is: {resource_name}"
        ) from None


def describe_broker(R, node_id, resource_name, static, keys, synonyms, documentation, dynamic=None):
    """The DescribeConfigsResourceResults for BROKER `resource_name` on node `node_id`:
    `static` holds the configs the node was started with ({name: value}), `dynamic` (a
    DynamicBrokerConfigs) those changed since."""
    changed = {} if dynamic is None else dynamic.by_resource
    if not resource_name:  # the cluster's dynamic defaults
        return [
            _result(
                R,
                name,
                [(name, value, DYNAMIC_DEFAULT_BROKER_CONFIG)],
                synonyms,
                BROKER_CONFIGS[name][3] if documentation else None,
            )
            for name, value in sorted(changed.get("", {}).items())
            if not keys or name in keys
        ]
    if broker_id(resource_name) != node_id:
        raise ClusterError(
            "INVALID_REQUEST",
            f"Unexpected broker id, expected {node_id} or empty string, "
            f"but received {resource_name}",
        )
    layers = (
        (changed.get(str(node_id), {}), DYNAMIC_BROKER_CONFIG),
        (changed.get("", {}), DYNAMIC_DEFAULT_BROKER_CONFIG),
        (static, STATIC_BROKER_CONFIG),
    )
    out = []
    for name, (default, _, _, doc) in sorted(BROKER_CONFIGS.items()):
        if keys and name not in keys:
            continue
        found = []  # (name, value, source) in Kafka's order of precedence
        for layer, source in layers:
            for synonym in SYNONYMS.get(name, (name,)):
                if synonym in layer:
                    found.append((synonym, layer[synonym], source))
        for synonym in SYNONYMS.get(name, (name,)):
            if BROKER_CONFIGS[synonym][0] is not None:
                found.append((synonym, BROKER_CONFIGS[synonym][0], DEFAULT_CONFIG))
        # Kafka drops the synonyms before the config's own name (a finer one unset)
        while found and found[0][0] != name:
            found.pop(0)
        doc = doc if documentation else None
        if found:
            out.append(_result(R, name, found, synonyms, doc))
        else:  # a null default, nothing set: no synonym
            out.append(_result(R, name, [(name, default, DEFAULT_CONFIG)], False, doc))
    return out


def _result(R, name, found, synonyms, documentation):
    """Config `name`'s result from its synonyms' (name, value, source), the one in force
    first."""
    _, kind, dynamic, _ = BROKER_CONFIGS[name]
    return R.DescribeConfigsResourceResult(
        name=name,
        value=found[0][1],
        read_only=not dynamic,
        is_default=found[0][2] == DEFAULT_CONFIG,
        config_source=found[0][2],
        is_sensitive=False,
        synonyms=[R.DescribeConfigsSynonym(name=n, value=v, source=s) for n, v, s in found]
        if synonyms
        else [],
        config_type=kind,
        documentation=documentation,
    )


# Python's level names as log4j's, which a BROKER_LOGGER's values are
_LEVELS = {"CRITICAL": "FATAL", "WARNING": "WARN", "NOTSET": "INFO"}


def describe_loggers(R, node_id, resource_name, keys):
    """BROKER_LOGGER: the node's loggers (the root one and fastkwire's broker) and their
    levels, as Kafka lists its log4j loggers, each DYNAMIC_BROKER_LOGGER_CONFIG."""
    if not resource_name:
        raise ClusterError("INVALID_REQUEST", "Broker id must not be empty")
    if broker_id(resource_name) != node_id:
        raise ClusterError(
            "INVALID_REQUEST",
            f"Unexpected broker id, expected {node_id} but received {resource_name}",
        )
    loggers = {"root": logging.getLogger(), __package__: logging.getLogger(__package__)}
    out = []
    for name, logger in loggers.items():
        if keys and name not in keys:
            continue
        level = logging.getLevelName(logger.getEffectiveLevel())
        out.append(
            R.DescribeConfigsResourceResult(
                name=name,
                value=_LEVELS.get(level, level),
                read_only=False,
                is_default=False,
                config_source=DYNAMIC_BROKER_LOGGER_CONFIG,
                is_sensitive=False,
                synonyms=[],
                config_type=STRING,
                documentation=None,
            )
        )
    return out


# A line of documentation for each topic config (DescribeConfigs v3+ when asked; ours)
TOPIC_DOCUMENTATION = {
    "cleanup.policy": "delete (retention drops old segments) and/or compact.",
    "compression.gzip.level": "The gzip level when the topic compresses.",
    "compression.lz4.level": "The lz4 level when the topic compresses.",
    "compression.type": "How batches are kept: producer (as sent) or a codec.",
    "compression.zstd.level": "The zstd level when the topic compresses.",
    "delete.retention.ms": "How long a compacted topic keeps its tombstones.",
    "file.delete.delay.ms": "How long a deleted segment waits before its files go.",
    "flush.messages": "Records written between forced flushes.",
    "flush.ms": "Time between forced flushes.",
    "follower.replication.throttled.replicas": "Replicas whose following is throttled.",
    "index.interval.bytes": "Bytes between offset index entries.",
    "leader.replication.throttled.replicas": "Replicas whose leading is throttled.",
    "local.retention.bytes": "Bytes kept locally with tiered storage (-2: retention.bytes).",
    "local.retention.ms": "Time kept locally with tiered storage (-2: retention.ms).",
    "max.compaction.lag.ms": "The longest a record waits to be compacted.",
    "max.message.bytes": "A record batch's largest size.",
    "message.timestamp.after.max.ms": "How far in the future a timestamp may be.",
    "message.timestamp.before.max.ms": "How far in the past a timestamp may be.",
    "message.timestamp.type": "CreateTime (the producer's) or LogAppendTime (the broker's).",
    "min.cleanable.dirty.ratio": "The uncompacted share that starts a compaction.",
    "min.compaction.lag.ms": "The least time a record stays uncompacted.",
    "min.insync.replicas": "Replicas an acks=all write needs.",
    "preallocate": "Whether segment files are allocated whole.",
    "remote.storage.enable": "Whether the topic uses tiered storage.",
    "retention.bytes": "The most a partition keeps before old segments go (-1: no limit).",
    "retention.ms": "How long records are kept (-1: no limit).",
    "segment.bytes": "A segment file's largest size.",
    "segment.index.bytes": "An offset index file's largest size.",
    "segment.jitter.ms": "A random delay added to segment.ms.",
    "segment.ms": "Time after which a segment rolls.",
    "unclean.leader.election.enable": "Whether a replica out of sync may lead.",
}


# DescribeConfigs' sources of the configs changed at run time
DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG = 2, 3
# The dynamic configs this broker applies while it runs (Kafka changes more: refused here)
APPLIED_AT_RUN_TIME = {"producer.id.expiration.ms": 1}  # name -> its least value


class DynamicBrokerConfigs:
    """Broker configs changed while it runs (AlterConfigs and IncrementalAlterConfigs of a
    BROKER resource, as Kafka's ConfigAdminManager takes them): the node's own ("<node id>",
    sent to that node: DYNAMIC_BROKER_CONFIG) and the cluster's default (""
    DYNAMIC_DEFAULT_BROKER_CONFIG). `on_change()` is called after each change."""

    def __init__(self, on_change=None):
        self.by_resource = {}  # "" or a node id's text -> {name: value}
        self.on_change = on_change

    def value(self, name, node_id):
        """The node's value of `name`, its own before the cluster's; None when unset."""
        for key in (str(node_id), ""):
            value = self.by_resource.get(key, {}).get(name)
            if value is not None:
                return value
        return None

    def alter(self, node_id, resource_name, change, validate_only):
        """`change(current {name: value}, BROKER_CONFIGS)` gives the resource's new configs;
        ClusterError with Kafka's error when they cannot be."""
        if resource_name:
            try:
                named = node_id_of(resource_name)
            except ValueError:
                raise ClusterError(
                    "INVALID_REQUEST", f"Node id must be an integer, but it is: {resource_name}"
                ) from None
            if named != node_id:
                raise ClusterError(
                    "INVALID_REQUEST",
                    f"Unexpected broker id, expected {node_id}, but received {resource_name}",
                )
            resource_name = str(named)
        configs = change(dict(self.by_resource.get(resource_name, {})), BROKER_CONFIGS)
        for name, value in configs.items():
            _check_dynamic(name, value)
        if not validate_only:
            self.by_resource[resource_name] = configs
            if self.on_change is not None:
                self.on_change()


def _check_dynamic(name, value):
    entry = BROKER_CONFIGS.get(name)
    if entry is None:
        raise ClusterError("INVALID_CONFIG", f"unknown broker config {name!r}")
    if not entry[2]:
        raise ClusterError(
            "INVALID_REQUEST", f"Cannot update these configs dynamically: Set({name})"
        )
    least = APPLIED_AT_RUN_TIME.get(name)
    if least is None:
        raise ClusterError(
            "INVALID_REQUEST",
            f"{name}: Kafka changes it at run time, this broker does not (only "
            f"{', '.join(sorted(APPLIED_AT_RUN_TIME))})",
        )
    if value is None:
        raise ClusterError("INVALID_REQUEST", f"Null value not supported for : {name}")
    try:
        number = java_int(value.strip())  # Kafka's ConfigDef trims a number's text
    except ValueError:
        raise ClusterError("INVALID_CONFIG", f"{name}: {value!r} is not a number") from None
    if not least <= number < 1 << 31:
        raise ClusterError("INVALID_CONFIG", f"{name}: {value} is not from {least} to 2147483647")

"""A handler per API: each takes a decoded request (a fastkwire message object) and gives a
fastkwire response object; the codec does the bytes. `Apis.handle` routes a request to its
handler, or to the group coordinator for the group APIs, and calls `reply(response)` once:
at once, or later for a Fetch that waits for data (`tick()` fires those whose wait ended).

The versions served are Kafka 4.0's (KIP-896 removed the oldest), up to what the codec and
these handlers know. Behaviour follows Kafka's KafkaApis and ReplicaManager where a client
can tell.
"""

import collections
import functools
import time
import uuid

from .. import (
    REQUEST_CLASSES,
    AlterConfigsRequest,
    AlterConfigsResponse,
    ApiVersionsRequest,
    ApiVersionsResponse,
    CreatePartitionsRequest,
    CreatePartitionsResponse,
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteRecordsRequest,
    DeleteRecordsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeClusterRequest,
    DescribeClusterResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeTopicPartitionsRequest,
    DescribeTopicPartitionsResponse,
    FetchRequest,
    FetchResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
    HeartbeatRequest,
    InitProducerIdRequest,
    InitProducerIdResponse,
    JoinGroupRequest,
    LeaveGroupRequest,
    ListGroupsRequest,
    ListOffsetsRequest,
    ListOffsetsResponse,
    MetadataRequest,
    MetadataResponse,
    OffsetCommitRequest,
    OffsetDeleteRequest,
    OffsetFetchRequest,
    OffsetForLeaderEpochRequest,
    OffsetForLeaderEpochResponse,
    ProduceRequest,
    ProduceResponse,
    SyncGroupRequest,
)
from ..error_codes import by_name
from ._fit import fit
from ._limits import MAX_REQUEST_PARTITION_SIZE_LIMIT, Limits, unique
from ._cluster import (
    BROKER_SYNONYMS,
    LIST,
    TOPIC_CONFIGS,
    ClusterError,
    check_config,
    check_topic_name,
)
from ._broker_configs import (
    BROKER_CONFIGS,
    TOPIC_DOCUMENTATION,
    DynamicBrokerConfigs,
    describe_broker,
    describe_loggers,
)
from ._expiry import StateExpiry
from ._fetch_sessions import DEFAULT_CACHE_SLOTS, FetchSessionCache
from ._compaction import check_keys
from ._log import LATEST, LogError, read_batch_head
from ._splice import records_of
from ._not_coordinator import TRANSACTION_API_KEYS, coordinated, transaction_error
from ._acls import HANDLERS as ACL_HANDLERS
from ._acls import AclStore
from ._replica_apis import HANDLERS as REPLICA_HANDLERS
from ._sasl_apis import HANDLERS as SASL_HANDLERS
from ._transactions import HANDLERS as TRANSACTION_HANDLERS
from ._transactions import TransactionCoordinator, fenced_for

# Tell the server to close the connection instead of answering (acks=0 Produce errors: the
# producer gets no answer, so Kafka closes the connection to tell it something went wrong).
CLOSE = object()
# The answer to an acks=0 Produce: nothing is sent.
NO_ANSWER = object()
_ZERO_UUID = uuid.UUID(int=0)
NO_AUTHORIZED_OPERATIONS = -(1 << 31)
DEFAULT_CONFIG, DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG = 5, 1, 4
TOPIC_RESOURCE, BROKER_RESOURCE, BROKER_LOGGER_RESOURCE = 2, 4, 8
# GroupConfig's fields that are Kafka broker configs of the same name
GROUP_CONFIG_NAMES = (
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.initial.rebalance.delay.ms",
    "group.max.size",
    "group.consumer.session.timeout.ms",
    "group.consumer.heartbeat.interval.ms",
    "group.consumer.max.size",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes",
)
READ_COMMITTED = 1
GROUP_KEY, TRANSACTION_KEY = 0, 1
# APIs whose handling sets no deadline (a Fetch that waits says so itself).
_NO_DEADLINES = frozenset((ProduceRequest.API_KEY, FetchRequest.API_KEY))


def code(name):
    return by_name(name).code


NONE = 0
LEADER_NOT_AVAILABLE = code("LEADER_NOT_AVAILABLE")


class Context:
    """Who sent a request: what handlers and the group coordinator may look at."""

    __slots__ = ("node_id", "client_id", "client_host", "connection", "listener", "principal")

    def __init__(
        self,
        node_id,
        client_id="",
        client_host="",
        connection=None,
        listener=None,
        principal="User:ANONYMOUS",
    ):
        self.node_id = node_id
        self.client_id = client_id
        self.client_host = client_host
        self.connection = connection  # who to forget() when it closes (any object)
        # the listener it came in on (its protocol): answers name that listener's addresses
        self.listener = listener
        self.principal = principal  # Kafka's: User:<name> after a SASL login


class _WaitingFetch:
    __slots__ = ("deadline", "request", "version", "ctx", "reply", "context", "partitions")

    def __init__(self, deadline, request, version, ctx, reply, context, partitions):
        self.deadline = deadline
        self.request = request
        self.version = version
        self.ctx = ctx
        self.reply = reply
        self.context = context  # its fetch session's (FetchContext)
        self.partitions = partitions  # the Partitions it waits on: data elsewhere cannot help


def _answer_now(handler, apis, request, version, ctx, reply):
    """A handler of (apis, request, version, ctx) that always answers at once."""
    return handler(apis, request, version, ctx)


class Fitted:
    """A handler's answer that is already fit for its version (nothing outside it is set):
    handle() sends it as it is."""

    __slots__ = ("response",)

    def __init__(self, response):
        self.response = response


def _fitted(response, version):
    if response is CLOSE or response is NO_ANSWER:
        return response
    if type(response) is Fitted:
        return response.response
    return fit(response, version)


def _after(reply, after, version):
    """reply() passing an answer through `after` (the authorizer's) and fitting it again."""
    return lambda response: reply(
        response if response is CLOSE or response is NO_ANSWER else fit(after(response), version)
    )


def _fitting(reply, version):
    """reply() for a later answer (a Fetch that waited), fitting it to `version` first."""
    return lambda response: reply(_fitted(response, version))


class Apis:
    """The broker's request handling over a Cluster; `groups` (optional) is a group
    coordinator with API_KEYS, handle() and tick() (see GroupCoordinator)."""

    def __init__(
        self,
        cluster,
        *,
        clock=time.monotonic,
        wall_clock=time.time,
        groups=None,
        limits=None,
        fetch_session_cache_slots=DEFAULT_CACHE_SLOTS,
        authorizer=None,
        expiry=None,
    ):
        self.cluster = cluster
        self.clock = clock
        self.wall_clock = wall_clock
        self.groups = groups
        self.limits = limits if limits is not None else Limits()
        self.acls = AclStore(self.limits.max_acls)
        # An _authorize.Authorizer enforces the ACLs; None: every client may do everything.
        self.authorizer = None if authorizer is None else authorizer.bind(self.acls, cluster)
        self.security_protocol = "PLAINTEXT"  # the listeners', as DescribeConfigs shows them
        # Broker configs the node was started with beside the Cluster's and the limits'
        # (DescribeConfigs: STATIC_BROKER_CONFIG), {Kafka's name: value}: the server's.
        self.static_configs = {}
        self.users = (
            None  # the SCRAM credentials (_credentials.Users): the Broker's, or made on use
        )
        self.transactions = TransactionCoordinator(
            cluster,
            clock,
            self._transaction_ended,
            self.limits.max_transactional_ids,
            self.limits.transaction_max_timeout_ms,
        )
        # producer and transactional id expiry (`expiry`: StateExpiry's settings); periodic,
        # so the server fires it beside tick() (which says None when nothing waits)
        self.expiry = StateExpiry(cluster, self.transactions, clock, wall_clock, **(expiry or {}))
        # broker configs changed while it runs (those it applies: producer.id.expiration.ms)
        self.dynamic_configs = DynamicBrokerConfigs()
        self.expiry.overrides = self._producer_id_expiration_ms
        self._versions = None
        self._waiting = []  # Fetches waiting for min_bytes or their max_wait
        self.fetch_session_cache_slots = fetch_session_cache_slots
        self.fetch_sessions = {}  # node id -> its FetchSessionCache (sessions are a node's)
        # Set when a request may have brought a deadline nearer (tick() should be called
        # again): every API but Produce and a Fetch answered at once; the server clears it.
        self.deadlines_changed = False
        # API key -> (min version, max version, handler); the handlers' versions.
        self.served = {
            cls.API_KEY: (low, min(high, cls.MAX_VERSION), handler)
            for cls, low, high, handler in (
                (ProduceRequest, 3, 12, self.produce),
                (FetchRequest, 4, 17, self.fetch),
                (ListOffsetsRequest, 1, 10, self.list_offsets),
                (OffsetForLeaderEpochRequest, 2, 4, self.offset_for_leader_epoch),
                (MetadataRequest, 0, 12, self.metadata),
                (FindCoordinatorRequest, 0, 6, self.find_coordinator),
                (ApiVersionsRequest, 0, 4, self.api_versions),
                (CreateTopicsRequest, 2, 7, self.create_topics),
                (DeleteTopicsRequest, 1, 6, self.delete_topics),
                (DeleteRecordsRequest, 0, 2, self.delete_records),
                (InitProducerIdRequest, 0, 5, self.init_producer_id),
                (DescribeConfigsRequest, 1, 4, self.describe_configs),
                (AlterConfigsRequest, 0, 2, self.alter_configs),
                (IncrementalAlterConfigsRequest, 0, 1, self.incremental_alter_configs),
                (CreatePartitionsRequest, 0, 3, self.create_partitions),
                (DescribeClusterRequest, 0, 1, self.describe_cluster),
                (DescribeTopicPartitionsRequest, 0, 0, self.describe_topic_partitions),
                *(
                    (cls, low, high, functools.partial(_answer_now, handler, self))
                    for cls, low, high, handler in REPLICA_HANDLERS
                    + ACL_HANDLERS
                    + TRANSACTION_HANDLERS
                    + SASL_HANDLERS
                ),
            )
        }

    # ---- routing

    def versions(self):
        """{API key: (min, max)} of every API served, the group coordinator's included."""
        if self._versions is None:
            self._versions = self._all_versions()
        return self._versions

    def forget(self, connection):
        """A connection closed: the Fetches it left waiting are dropped unanswered."""
        self._waiting = [w for w in self._waiting if w.ctx.connection is not connection]

    def _all_versions(self):
        out = {key: (low, high) for key, (low, high, _) in self.served.items()}
        if self.groups is not None:
            # The coordinator's own ranges where it says them, else Kafka 4.0's.
            ranges = getattr(self.groups, "VERSIONS", GROUP_VERSIONS)
            for key in self.groups.API_KEYS:
                cls = REQUEST_CLASSES[key]
                low, high = ranges.get(key, (cls.MIN_VERSION, cls.MAX_VERSION))
                out[key] = (low, min(high, cls.MAX_VERSION))
        return out

    def handle(self, api_key, version, request, ctx, reply):
        """Answer `request` (decoded at `version`) by calling `reply(response)` once, now or
        from a later handle() or tick(); reply(CLOSE) asks for the connection to be closed,
        reply(NO_ANSWER) sends nothing (acks=0)."""
        if api_key not in _NO_DEADLINES:
            self.deadlines_changed = True
        if self.authorizer is not None:
            answer, after = self.authorizer.guard(api_key, version, request, ctx)
            if answer is not None:  # refused as a whole
                reply(_fitted(answer, version))
                return
            if after is not None:  # items refused: their errors join the handler's answer
                reply = _after(reply, after, version)
        served = self.served.get(api_key)
        if served is not None:
            if api_key in TRANSACTION_API_KEYS and len(self.cluster.nodes) > 1:
                refused = transaction_error(
                    api_key, version, request, self._coordinates(ctx.node_id)
                )
                if refused is not None:
                    reply(_fitted(refused, version))
                    return
            response = served[2](request, version, ctx, _fitting(reply, version))
            if response is not None:
                reply(_fitted(response, version))
        elif self.groups is not None and api_key in self.groups.API_KEYS:
            reply = _fitting(reply, version)
            if len(self.cluster.nodes) > 1:
                # Kafka's NOT_COORDINATOR for the groups another node coordinates.
                request, reply = coordinated(
                    api_key, version, request, reply, self._coordinates(ctx.node_id)
                )
                if request is None:
                    return
            self.groups.handle(api_key, version, request, ctx, reply)
        else:
            raise KeyError(api_key)

    def tick(self):
        """Answer the Fetches whose wait is over; returns the next deadline on the clock, or
        None when nothing waits."""
        deadlines = []
        if self._waiting:
            now = self.clock()
            still = []
            for w in self._waiting:
                if w.deadline <= now:
                    w.reply(self._fetch_answer(w)[0])
                else:
                    still.append(w)
                    deadlines.append(w.deadline)
            self._waiting = still
        _, nxt = self.transactions.expire(int(self.wall_clock() * 1000))
        self.data_arrived(self.transactions.take_marked())  # their last stable offset moved
        if nxt is not None:
            deadlines.append(nxt)
        if self.groups is not None:
            nxt = self.groups.tick()
            if nxt is not None:
                deadlines.append(nxt)
        return min(deadlines) if deadlines else None

    def _transaction_ended(self, producer_id, committed):
        if self.groups is not None and hasattr(self.groups, "end_transaction"):
            self.groups.end_transaction(producer_id, committed=committed)

    def data_arrived(self, partitions=None):
        """Data arrived in `partitions` (Partition objects; or their log start or last stable
        offset moved, or they were deleted): the Fetches waiting on them may now have their
        min_bytes. Only those are looked at again: a client parking Fetches of many
        partitions must not make every Produce elsewhere read them all again. None: every
        waiting Fetch (a leader moved or a node stopped)."""
        if not self._waiting or partitions is not None and not partitions:
            return
        partitions = None if partitions is None else set(partitions)
        still = []
        for w in self._waiting:
            if partitions is not None and partitions.isdisjoint(w.partitions):
                still.append(w)
                continue
            response, ready = self._fetch_answer(w, final=False)
            if ready:
                w.reply(response)
            else:
                still.append(w)
        self._waiting = still

    # ---- helpers

    def _coordinates(self, node_id):
        """owns(group id): whether node `node_id` coordinates that group."""
        coordinator = self.cluster.coordinator
        return lambda group_id: coordinator(group_id or "") == node_id

    def _leader_check(
        self, partition, ctx, current_leader_epoch=-1, missing="UNKNOWN_TOPIC_OR_PARTITION"
    ):
        """The error name when this node cannot serve `partition` (`missing` when it is None,
        not found); None when it can."""
        if partition is None:
            return missing
        if partition.leader != ctx.node_id:
            return "NOT_LEADER_OR_FOLLOWER"
        if current_leader_epoch >= 0:
            if current_leader_epoch > partition.log.leader_epoch:
                return "UNKNOWN_LEADER_EPOCH"
            if current_leader_epoch < partition.log.leader_epoch:
                return "FENCED_LEADER_EPOCH"
        return None

    def _current_leader(self, R, partition, error, leaders):
        """KIP-951: a NOT_LEADER or FENCED answer names the partition's leader and epoch (and
        `leaders`, a set, gathers the nodes to describe in node_endpoints)."""
        if error not in ("NOT_LEADER_OR_FOLLOWER", "FENCED_LEADER_EPOCH") or partition is None:
            return R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
        if partition.leader >= 0:
            leaders.add(partition.leader)
        return R.LeaderIdAndEpoch(
            leader_id=partition.leader, leader_epoch=partition.log.leader_epoch
        )

    def _node_endpoints(self, R, leaders, listener):
        address = self.cluster.address
        return [
            R.NodeEndpoint(node_id=n, host=h, port=p, rack=None)
            for n, (h, p) in ((n, address(n, listener)) for n in sorted(leaders))
        ]

    def _topic_by(self, name, topic_id, by_id):
        """(topic or None, error name when it is None)."""
        if by_id:
            topic = self.cluster.topic_ids.get(topic_id)
            return topic, "UNKNOWN_TOPIC_ID"
        return self.cluster.topics.get(name), "UNKNOWN_TOPIC_OR_PARTITION"

    # ---- ApiVersions

    def api_versions(self, request, version, ctx, reply):
        R = ApiVersionsResponse
        return R(
            error_code=NONE,
            api_keys=[
                R.ApiVersion(api_key=key, min_version=low, max_version=high)
                for key, (low, high) in sorted(self.versions().items())
            ],
        )

    # ---- Metadata

    def metadata(self, request, version, ctx, reply):
        R = MetadataResponse
        cluster = self.cluster
        auto = cluster.auto_create_topics and (version < 4 or request.allow_auto_topic_creation)
        topics = []
        if version < 12 and any(
            t.name is None or t.topic_id != _ZERO_UUID for t in request.topics or ()
        ):
            # Kafka: before v12 a topic needs its name and cannot be asked by id; the whole
            # request is refused, each topic named as asked ("" for none).
            return R(
                topics=[
                    R.MetadataResponseTopic(
                        error_code=code("INVALID_REQUEST"),
                        name=t.name or "",
                        topic_id=t.topic_id,
                        partitions=[],
                    )
                    for t in request.topics
                ]
            )
        if request.topics is None or (version == 0 and not request.topics):
            wanted = [(t, None) for t in cluster.topics.values()]
        else:
            wanted = []
            for t in unique(request.topics, lambda t: (t.name, t.topic_id)):
                if t.name is None:  # v10+: by topic id
                    topic = cluster.topic_ids.get(t.topic_id)
                    wanted.append(
                        (topic, None if topic else ("UNKNOWN_TOPIC_ID", None, t.topic_id))
                    )
                    continue
                topic = cluster.topics.get(t.name)
                error = None
                if topic is None:
                    try:
                        check_topic_name(t.name)
                        topic = cluster.auto_create(t.name) if auto else None
                        if topic is None:
                            error = "UNKNOWN_TOPIC_OR_PARTITION"
                    except ClusterError as e:
                        error = e.error
                wanted.append((topic, None if error is None else (error, t.name, None)))
        for topic, failed in wanted:
            if failed is not None:
                error, name, topic_id = failed
                topics.append(
                    R.MetadataResponseTopic(
                        error_code=code(error),
                        name=name,
                        topic_id=topic_id or _ZERO_UUID,
                        partitions=[],
                    )
                )
                continue
            topics.append(
                R.MetadataResponseTopic(
                    error_code=NONE,
                    name=topic.name,
                    topic_id=topic.id,
                    is_internal=topic.internal,
                    partitions=[
                        R.MetadataResponsePartition(
                            error_code=NONE if p.leader >= 0 else LEADER_NOT_AVAILABLE,
                            partition_index=p.index,
                            leader_id=p.leader,
                            leader_epoch=p.log.leader_epoch,
                            replica_nodes=list(p.replicas),
                            isr_nodes=[r for r in p.replicas if r not in cluster.stopped],
                            offline_replicas=[r for r in p.replicas if r in cluster.stopped],
                        )
                        for p in topic.partitions
                    ],
                )
            )
        return R(
            brokers=[
                R.MetadataResponseBroker(node_id=node, host=host, port=port, rack=None)
                for node, (host, port) in cluster.live_nodes(ctx.listener).items()
            ],
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            topics=topics,
        )

    # ---- DescribeTopicPartitions (KIP-966): Metadata's topics, paged by a cursor

    def describe_topic_partitions(self, request, version, ctx, reply):
        R = DescribeTopicPartitionsResponse
        cluster = self.cluster
        names = sorted({t.name for t in request.topics} if request.topics else cluster.topics)
        cursor = request.cursor
        if cursor is not None:
            names = [n for n in names if n >= cursor.topic_name]
        room = min(max(request.response_partition_limit, 1), MAX_REQUEST_PARTITION_SIZE_LIMIT)
        topics, next_cursor = [], None
        for name in names:
            topic = cluster.topics.get(name)
            if topic is None:
                topics.append(
                    R.DescribeTopicPartitionsResponseTopic(
                        error_code=code("UNKNOWN_TOPIC_OR_PARTITION"), name=name, partitions=[]
                    )
                )
                continue
            first = (
                cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
            )
            parts = topic.partitions[first:]
            if len(parts) > room:
                parts = parts[:room]
                next_cursor = R.Cursor(topic_name=name, partition_index=first + room)
            topics.append(
                R.DescribeTopicPartitionsResponseTopic(
                    error_code=NONE,
                    name=name,
                    topic_id=topic.id,
                    partitions=[
                        R.DescribeTopicPartitionsResponsePartition(
                            error_code=NONE if p.leader >= 0 else LEADER_NOT_AVAILABLE,
                            partition_index=p.index,
                            leader_id=p.leader,
                            leader_epoch=p.log.leader_epoch,
                            replica_nodes=list(p.replicas),
                            isr_nodes=[r for r in p.replicas if r not in cluster.stopped],
                            eligible_leader_replicas=[],
                            last_known_elr=[],
                            offline_replicas=[r for r in p.replicas if r in cluster.stopped],
                        )
                        for p in parts
                    ],
                )
            )
            room -= len(parts)
            if next_cursor is not None:
                break
            if room == 0 and name != names[-1]:
                following = names[names.index(name) + 1]
                next_cursor = R.Cursor(topic_name=following, partition_index=0)
                break
        return R(topics=topics, next_cursor=next_cursor)

    # ---- Produce

    def produce(self, request, version, ctx, reply):
        R = ProduceResponse
        acks = request.acks
        now_ms = int(self.wall_clock() * 1000)
        failed = False
        responses = []
        leaders = set()
        appended = []  # the partitions written to
        topics = self.cluster.topics
        for t in request.topic_data:
            topic = topics.get(t.name)
            partitions = () if topic is None else topic.partitions
            parts = []
            for p in t.partition_data:
                error, message, base, append_time = None, None, -1, -1
                record_errors = None
                log_start = -1
                index = p.index
                partition = partitions[index] if 0 <= index < len(partitions) else None
                if acks not in (0, 1, -1):
                    error = "INVALID_REQUIRED_ACKS"
                elif partition is None:
                    error = "UNKNOWN_TOPIC_OR_PARTITION"
                elif topic.internal:  # as Kafka's ReplicaManager refuses clients' appends
                    error = "INVALID_TOPIC_EXCEPTION"
                    message = f"Cannot append to internal topic {topic.name}"
                else:
                    error = self._leader_check(partition, ctx)
                if error is None:
                    try:
                        base, append_time = self._append(
                            topic, partition, p.records, now_ms, request, version
                        )
                        appended.append(partition)
                        log_start = partition.log.log_start
                    except LogError as e:
                        error, message = e.error, str(e)
                        record_errors = getattr(e, "record_errors", None)
                if error is not None:
                    failed = True
                if error is None:
                    parts.append(
                        R.PartitionProduceResponse(
                            index=index,
                            base_offset=base,
                            log_append_time_ms=append_time,
                            log_start_offset=log_start,
                        )
                    )
                    continue
                parts.append(
                    R.PartitionProduceResponse(
                        index=index,
                        error_code=code(error),
                        base_offset=base,
                        log_append_time_ms=append_time,
                        log_start_offset=log_start,
                        error_message=message,
                        current_leader=self._current_leader(R, partition, error, leaders),
                    )
                )
                if record_errors:  # Kafka's RecordValidationException: which records
                    parts[-1].record_errors = [
                        R.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
                        for i, m in record_errors
                    ]
            responses.append(R.TopicProduceResponse(name=t.name, partition_responses=parts))
        self.data_arrived(appended)
        if acks == 0:
            return CLOSE if failed else NO_ANSWER
        response = R(responses=responses)
        if leaders:
            response.node_endpoints = self._node_endpoints(R, leaders, ctx.listener)
        # Every partition appended at v5+ (log_start_offset): nothing set is outside the
        # version, and fit() would walk the answer for nothing.
        return Fitted(response) if not failed and version >= 5 else response

    def _append(self, topic, partition, data, now_ms, request, version):
        """(base offset, log append time or -1) of one partition's records, appended unless
        they repeat a batch the producer already wrote."""
        if data is None:
            raise LogError("CORRUPT_MESSAGE", "the partition's records are null")
        head = read_batch_head(data, topic.max_message_bytes)
        if head.is_control:  # markers are the transaction coordinator's (Kafka's LogValidator)
            raise LogError(
                "INVALID_RECORD",
                "Clients are not allowed to write control records in topic partition "
                f"{topic.name}-{partition.index}.",
            )
        if head.producer_id >= 0 and head.base_sequence < 0:  # Kafka's LogValidator too
            raise LogError(
                "INVALID_RECORD",
                f"Invalid sequence number {head.base_sequence} in record batch with "
                f"producerId {head.producer_id}",
            )
        if "compact" in topic.config("cleanup.policy"):
            check_keys(data, topic.name, partition.index)
        if (
            head.is_transactional
            and not head.is_control
            and request.transactional_id
            and head.producer_id not in partition.log.ongoing
        ):
            self._verify_in_transaction(topic, partition, head, request, version)
        log_append_time = topic.log_append_time
        append_time = now_ms if log_append_time else -1
        duplicate = partition.producers.check(head)
        if duplicate is not None:
            return duplicate, append_time
        base = partition.log.append(head, data, now_ms, log_append_time)
        partition.producers.appended(head, base, now_ms if log_append_time else None)
        return base, append_time

    def _verify_in_transaction(self, topic, partition, head, request, version):
        """A producer's first transactional batch in a partition must belong to its
        transaction under way, which has this partition (Kafka 4.0's verification, KIP-890
        part 1): else refused, with the errors Kafka's leader turns the coordinator's into."""
        error = self.transactions.verify(
            request.transactional_id,
            head.producer_id,
            head.producer_epoch,
            topic.name,
            partition.index,
        )
        if error is None:
            return
        if error == "PRODUCER_FENCED":
            error = "INVALID_PRODUCER_EPOCH"
        elif error == "TRANSACTION_ABORTABLE" and version <= 10:
            error = "INVALID_TXN_STATE"
        raise LogError(error, "Partition was not added to the transaction")

    # ---- Fetch

    def fetch(self, request, version, ctx, reply):
        cache = self.fetch_sessions.get(ctx.node_id)
        if cache is None:
            cache = self.fetch_sessions[ctx.node_id] = FetchSessionCache(
                self.fetch_session_cache_slots
            )
        context = cache.new_context(request, version, self._clock_ms())
        deadline = self.clock() + request.max_wait_ms / 1000
        waiting = _WaitingFetch(deadline, request, version, ctx, reply, context, set())
        response, ready = self._fetch_answer(waiting, final=request.max_wait_ms <= 0)
        if response is not None:
            return response
        by_id = version >= 13
        for p in context.partitions:
            topic, _ = self._topic_by(p.topic, p.topic_id, by_id)
            if topic is not None and 0 <= p.partition < len(topic.partitions):
                waiting.partitions.add(topic.partitions[p.partition])
        self._waiting.append(waiting)
        self.deadlines_changed = True
        return None

    def _clock_ms(self):
        return int(self.clock() * 1000)

    def _fetch_answer(self, w, final=True):
        """(response, ready): ready when it has min_bytes, an error, or nothing to wait for.
        The response is None while not ready and not `final`: making it updates the fetch
        session (opens it, or records what an incremental answer sent)."""
        context = w.context
        reads, ready = ([], True) if context.error else self._fetch_reads(w)
        if not (ready or final):
            return None, False
        error, session_id, reads = context.respond(reads, self._clock_ms())
        R = FetchResponse
        responses = []
        leaders = set()
        last = None
        for part, error_name, high_watermark, log_start, data, extra in reads:
            if last is None or (part.topic, part.topic_id) != last:
                last = (part.topic, part.topic_id)
                responses.append(
                    R.FetchableTopicResponse(topic=extra[0], topic_id=part.topic_id, partitions=[])
                )
            if error_name is not None:
                pd = R.PartitionData(
                    partition_index=part.partition,
                    error_code=code(error_name),
                    high_watermark=-1,
                    last_stable_offset=-1,
                    log_start_offset=-1,
                    aborted_transactions=None,
                    preferred_read_replica=-1,
                    records=b"",
                    current_leader=self._current_leader(R, extra[3], error_name, leaders),
                )
            else:
                pd = R.PartitionData(
                    partition_index=part.partition,
                    error_code=NONE,
                    high_watermark=high_watermark,
                    last_stable_offset=extra[1],
                    log_start_offset=log_start,
                    aborted_transactions=extra[2],
                    preferred_read_replica=-1,
                    records=data,
                )
            responses[-1].partitions.append(pd)
        response = R(
            error_code=NONE if error is None else code(error),
            session_id=session_id,
            responses=responses,
        )
        if leaders:
            response.node_endpoints = self._node_endpoints(R, leaders, w.ctx.listener)
        return response, True

    def _fetch_reads(self, w):
        """([(partition, error name, high watermark, log start, records, (topic name, last
        stable offset, aborted transactions, the Partition or None))], ready) of a Fetch's partitions, in order."""
        request, ctx = w.request, w.ctx
        by_id = w.version >= 13
        # Kafka's fetch.max.bytes: a client may not ask for an answer larger than the broker's
        # (a Fetch naming one partition many times would otherwise read it again each time).
        budget = min(request.max_bytes, self.limits.fetch_max_bytes)
        total = 0
        read_committed = request.isolation_level == READ_COMMITTED
        ready = not w.context.partitions
        topics = {}
        reads = []
        for p in w.context.partitions:
            found = topics.get((p.topic, p.topic_id))
            if found is None:
                found = topics[(p.topic, p.topic_id)] = self._topic_by(p.topic, p.topic_id, by_id)
            topic, missing = found
            name = p.topic if topic is None else topic.name
            partition = None
            if topic is not None and 0 <= p.partition < len(topic.partitions):
                partition = topic.partitions[p.partition]
            error = self._leader_check(partition, ctx, p.leader_epoch, missing)
            data = b""
            if error is None:
                log = partition.log
                limit = min(p.max_bytes, max(budget - total, 0))
                stable = log.last_stable_offset
                try:
                    pieces, size = log.read_pieces(
                        p.fetch_offset,
                        limit,
                        min_one=total == 0,
                        upto=stable if read_committed else None,
                    )
                    data = records_of(pieces, size)  # large ones spliced, not joined
                except LogError as e:
                    error = e.error
                total += len(data)
            if error is not None:
                ready = True
                reads.append((p, error, -1, -1, b"", (name, -1, None, partition)))
                continue
            aborted = None
            if read_committed:
                aborted = [
                    FetchResponse.AbortedTransaction(producer_id=pid, first_offset=first)
                    for pid, first in log.aborted_in(p.fetch_offset, stable)
                ]
            reads.append(
                (
                    p,
                    None,
                    log.high_watermark,
                    log.log_start,
                    data,
                    (name, stable, aborted, partition),
                )
            )
        if total >= request.min_bytes:
            ready = True
        return reads, ready

    # ---- ListOffsets

    def list_offsets(self, request, version, ctx, reply):
        R = ListOffsetsResponse
        read_committed = request.isolation_level == READ_COMMITTED
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.cluster.partition(t.name, p.partition_index)
                offset, ts, epoch = -1, -1, -1
                error = self._leader_check(partition, ctx, p.current_leader_epoch)
                if error is None:
                    try:
                        offset, ts = partition.log.offset_for(p.timestamp)
                        if read_committed and p.timestamp == LATEST:
                            offset = partition.log.last_stable_offset
                    except LogError as e:
                        error = e.error
                    if offset >= 0:
                        epoch = partition.log.leader_epoch
                parts.append(
                    R.ListOffsetsPartitionResponse(
                        partition_index=p.partition_index,
                        error_code=NONE if error is None else code(error),
                        timestamp=ts,
                        offset=offset,
                        leader_epoch=epoch,
                    )
                )
            topics.append(R.ListOffsetsTopicResponse(name=t.name, partitions=parts))
        return R(topics=topics)

    # ---- OffsetForLeaderEpoch: where a consumer's last seen epoch ends (KIP-320)

    def offset_for_leader_epoch(self, request, version, ctx, reply):
        R = OffsetForLeaderEpochResponse
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.cluster.partition(t.topic, p.partition)
                epoch, end = -1, -1
                error = self._leader_check(partition, ctx, p.current_leader_epoch)
                if error is None:
                    epoch, end = partition.log.end_offset_for(p.leader_epoch)
                parts.append(
                    R.EpochEndOffset(
                        error_code=NONE if error is None else code(error),
                        partition=p.partition,
                        leader_epoch=epoch,
                        end_offset=end,
                    )
                )
            topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
        return R(topics=topics)

    # ---- FindCoordinator

    def find_coordinator(self, request, version, ctx, reply):
        R = FindCoordinatorResponse
        keys = request.coordinator_keys if version >= 4 else [request.key]
        answers = []
        for key in keys:
            error, node = None, -1
            if request.key_type == GROUP_KEY and self.groups is None:
                error = "COORDINATOR_NOT_AVAILABLE"
            elif request.key_type not in (GROUP_KEY, TRANSACTION_KEY):
                error = "INVALID_REQUEST"
            else:
                if request.key_type == GROUP_KEY:
                    self.cluster.offsets_topic()  # Kafka makes it at the first lookup
                node = self.cluster.coordinator(key)
                if node < 0:
                    error = "COORDINATOR_NOT_AVAILABLE"
            host, port = self.cluster.address(node, ctx.listener) if node >= 0 else ("", -1)
            answers.append((key, NONE if error is None else code(error), node, host, port))
        if version >= 4:
            return R(
                coordinators=[
                    R.Coordinator(
                        key=k, node_id=n, host=h, port=p, error_code=e, error_message=None
                    )
                    for k, e, n, h, p in answers
                ]
            )
        _, e, n, h, p = answers[0]
        return R(error_code=e, error_message=None, node_id=n, host=h, port=p)

    # ---- InitProducerId

    def init_producer_id(self, request, version, ctx, reply):
        R = InitProducerIdResponse
        pid, epoch = (request.producer_id, request.producer_epoch) if version >= 3 else (-1, -1)
        if (pid == -1) != (epoch == -1):  # one named without the other, as Kafka refuses
            return R(error_code=code("INVALID_REQUEST"), producer_id=-1, producer_epoch=-1)
        if request.transactional_id is None:
            # Kafka's coordinator: a new id at epoch 0, whatever id and epoch were named
            return R(error_code=NONE, producer_id=self.cluster.producer_ids.new(), producer_epoch=0)
        pid, epoch, error = self.transactions.init(
            request.transactional_id,
            request.transaction_timeout_ms,
            pid,
            epoch,
            int(self.wall_clock() * 1000),
        )
        # an abandoned transaction was aborted: its partitions' last stable offset moved
        self.data_arrived(self.transactions.take_marked())
        error = fenced_for(error, version, 4)
        return R(
            error_code=NONE if error is None else code(error),
            producer_id=pid,
            producer_epoch=epoch,
        )

    # ---- topics

    def create_topics(self, request, version, ctx, reply):
        R = CreateTopicsResponse
        results = []
        named = collections.Counter(t.name for t in request.topics)
        for t in request.topics:
            configs = {c.name: c.value for c in t.configs}
            count, factor = t.num_partitions, t.replication_factor
            if t.assignments:
                count = len(t.assignments)
                factor = len(t.assignments[0].broker_ids)
            result = R.CreatableTopicResult(name=t.name, error_code=NONE, error_message=None)
            try:
                if named[t.name] > 1:
                    raise ClusterError(
                        "INVALID_REQUEST", f"topic {t.name!r} is named more than once"
                    )
                if t.assignments and (t.num_partitions != -1 or t.replication_factor != -1):
                    raise ClusterError(
                        "INVALID_REQUEST",
                        "both replica assignments and a partition count or replication factor",
                    )
                if request.validate_only:
                    count, factor = self.cluster.check_new_topic(t.name, count, factor, configs)
                    topic_id = _ZERO_UUID
                else:
                    topic = self.cluster.create_topic(t.name, count, factor, configs)
                    count, factor, topic_id = len(topic.partitions), factor, topic.id
                    factor = topic.replication_factor
            except ClusterError as e:
                result.error_code = code(e.error)
                result.error_message = str(e)
                result.num_partitions = -1
                result.replication_factor = -1
            else:
                result.topic_id = topic_id
                result.num_partitions = count
                result.replication_factor = factor
                result.configs = [
                    R.CreatableTopicConfigs(
                        name=name,
                        value=configs.get(name, default),
                        read_only=False,
                        config_source=DYNAMIC_TOPIC_CONFIG if name in configs else DEFAULT_CONFIG,
                        is_sensitive=False,
                    )
                    for name, (default, _) in sorted(TOPIC_CONFIGS.items())
                ]
            results.append(result)
        return R(topics=results)

    def delete_topics(self, request, version, ctx, reply):
        R = DeleteTopicsResponse
        if version >= 6:
            wanted = [(t.name, t.topic_id) for t in request.topics]
        else:
            wanted = [(name, None) for name in request.topic_names]
        results = []
        deleted = []  # their partitions: Fetches waiting on them answer with the error now
        for name, topic_id in wanted:
            by_id = name is None
            topic, missing = self._topic_by(name, topic_id, by_id)
            error = missing if topic is None else None
            if topic is not None:
                self.cluster.delete_topic(topic)
                deleted += topic.partitions
            results.append(
                R.DeletableTopicResult(
                    name=topic.name if topic is not None else name,
                    topic_id=topic.id if topic is not None else (topic_id or _ZERO_UUID),
                    error_code=NONE if error is None else code(error),
                    error_message=None,
                )
            )
        self.data_arrived(deleted)
        return R(responses=results)

    def create_partitions(self, request, version, ctx, reply):
        R = CreatePartitionsResponse
        results = []
        for t in request.topics:
            error, message = NONE, None
            try:
                if request.validate_only:
                    self.cluster.check_partition_count(t.name, t.count)
                else:
                    self.cluster.create_partitions(t.name, t.count)
            except ClusterError as e:
                error, message = code(e.error), str(e)
            results.append(
                R.CreatePartitionsTopicResult(name=t.name, error_code=error, error_message=message)
            )
        return R(results=results)

    def delete_records(self, request, version, ctx, reply):
        R = DeleteRecordsResponse
        topics = []
        for t in request.topics:
            parts = []
            for p in t.partitions:
                partition = self.cluster.partition(t.name, p.partition_index)
                low, error = -1, self._leader_check(partition, ctx)
                if error is None and "delete" not in self.cluster.topics[t.name].config(
                    "cleanup.policy"
                ):  # as Kafka's Partition.deleteRecordsOnLeader: a compacted log keeps its start
                    error = "POLICY_VIOLATION"
                if error is None:
                    try:
                        low = partition.log.delete_before(p.offset)
                    except LogError as e:
                        error = e.error
                parts.append(
                    R.DeleteRecordsPartitionResult(
                        partition_index=p.partition_index,
                        low_watermark=low,
                        error_code=NONE if error is None else code(error),
                    )
                )
            topics.append(R.DeleteRecordsTopicResult(name=t.name, partitions=parts))
        self.cluster.flush_storage()  # the log starts, written once for the request
        return R(topics=topics)

    # ---- configs and cluster

    def describe_configs(self, request, version, ctx, reply):
        R = DescribeConfigsResponse
        results = []
        for res in unique(request.resources, lambda r: (r.resource_type, r.resource_name)):
            result = R.DescribeConfigsResult(
                error_code=NONE,
                error_message=None,
                resource_type=res.resource_type,
                resource_name=res.resource_name,
                configs=[],
            )
            # a set, read once: not a list searched again for each config described
            keys = frozenset(res.configuration_keys or ())
            if res.resource_type == TOPIC_RESOURCE:
                topic = self.cluster.topics.get(res.resource_name)
                if topic is None:
                    result.error_code = code("UNKNOWN_TOPIC_OR_PARTITION")
                    result.error_message = f"topic {res.resource_name!r} does not exist"
                else:
                    result.configs = self._topic_configs(topic, keys, request, version)
            elif res.resource_type in (BROKER_RESOURCE, BROKER_LOGGER_RESOURCE):
                try:
                    if res.resource_type == BROKER_RESOURCE:
                        result.configs = describe_broker(
                            R,
                            ctx.node_id,
                            res.resource_name,
                            self._static_configs(ctx.node_id),
                            keys,
                            request.include_synonyms,
                            version >= 3 and request.include_documentation,
                            self.dynamic_configs,
                        )
                    else:
                        result.configs = describe_loggers(R, ctx.node_id, res.resource_name, keys)
                except ClusterError as e:
                    result.error_code, result.error_message = code(e.error), str(e)
            else:
                result.error_code = code("INVALID_REQUEST")
                result.error_message = f"resource type {res.resource_type} is not served here"
            results.append(result)
        return R(results=results)

    def alter_configs(self, request, version, ctx, reply):
        """AlterConfigs: a topic's configs become exactly those given."""
        return self._alter(
            AlterConfigsResponse,
            request,
            ctx,
            lambda old, configs, known: {c.name: c.value for c in configs},
        )

    def incremental_alter_configs(self, request, version, ctx, reply):
        """IncrementalAlterConfigs: SET, DELETE (back to the default), APPEND and SUBTRACT
        (list configs) one config at a time."""
        return self._alter(IncrementalAlterConfigsResponse, request, ctx, _apply_operations)

    def _alter(self, R, request, ctx, change):
        responses = []
        named = collections.Counter((r.resource_type, r.resource_name) for r in request.resources)
        for res in request.resources:
            error, message = NONE, None
            try:
                # Kafka's ConfigAdminManager.preprocess, for both APIs: each applied once, or none
                if named[res.resource_type, res.resource_name] > 1:
                    raise ClusterError("INVALID_REQUEST", "Each resource must appear at most once.")
                if len({c.name for c in res.configs}) < len(res.configs):
                    raise ClusterError("INVALID_REQUEST", "Error due to duplicate config keys")
                if res.resource_type == BROKER_RESOURCE:
                    self.dynamic_configs.alter(
                        ctx.node_id,
                        res.resource_name,
                        lambda old, known, res=res: change(old, res.configs, known),
                        request.validate_only,
                    )
                elif res.resource_type == TOPIC_RESOURCE:
                    self._alter_topic(res, request.validate_only, change)
                else:
                    raise ClusterError(
                        "INVALID_REQUEST",
                        f"resource type {res.resource_type}: only topic and broker configs "
                        "can be changed here",
                    )
            except ClusterError as e:
                error, message = code(e.error), str(e)
            responses.append(
                R.AlterConfigsResourceResponse(
                    error_code=error,
                    error_message=message,
                    resource_type=res.resource_type,
                    resource_name=res.resource_name,
                )
            )
        return R(responses=responses)

    def _alter_topic(self, res, validate_only, change):
        topic = self.cluster.topics.get(res.resource_name)
        if topic is None:
            raise ClusterError(
                "UNKNOWN_TOPIC_OR_PARTITION", f"topic {res.resource_name!r} does not exist"
            )
        configs = change(dict(topic.configs), res.configs, TOPIC_CONFIGS)
        for name, value in configs.items():
            check_config(name, value)
        if not validate_only:
            topic.configs = configs
            self.cluster.configs_changed(topic)

    def _topic_configs(self, topic, keys, request, version):
        R = DescribeConfigsResponse
        out = []
        documented = version >= 3 and request.include_documentation
        for name, (default, kind) in sorted(TOPIC_CONFIGS.items()):
            if keys and name not in keys:  # null or empty: all, as Kafka
                continue
            is_set = name in topic.configs
            synonyms = []
            if request.include_synonyms:
                if is_set:
                    synonyms.append(
                        R.DescribeConfigsSynonym(
                            name=name, value=topic.configs[name], source=DYNAMIC_TOPIC_CONFIG
                        )
                    )
                broker_name = BROKER_SYNONYMS.get(name)
                if broker_name is not None:
                    synonyms.append(
                        R.DescribeConfigsSynonym(
                            name=broker_name, value=default, source=DEFAULT_CONFIG
                        )
                    )
            out.append(
                R.DescribeConfigsResourceResult(
                    name=name,
                    value=topic.configs[name] if is_set else default,
                    read_only=False,
                    is_default=not is_set,
                    config_source=DYNAMIC_TOPIC_CONFIG if is_set else DEFAULT_CONFIG,
                    is_sensitive=False,
                    synonyms=synonyms,
                    config_type=kind,
                    documentation=TOPIC_DOCUMENTATION.get(name) if documented else None,
                )
            )
        return out

    def _static_configs(self, node_id):
        """The broker configs node `node_id` was started with, as Kafka's server.properties
        would hold them (DescribeConfigs' STATIC_BROKER_CONFIG): its listener and id, and
        those of the broker's settings that are not Kafka's defaults."""
        cluster = self.cluster
        endpoints = cluster.listeners.get(node_id) or {
            self.security_protocol: cluster.nodes[node_id]
        }
        listener = ",".join(f"{name}://{h}:{p}" for name, (h, p) in endpoints.items())
        settings = {
            **self.static_configs,
            "auto.create.topics.enable": str(cluster.auto_create_topics).lower(),
            "num.partitions": str(cluster.num_partitions),
            "offsets.topic.num.partitions": str(cluster.offsets_topic_partitions),
            "offsets.topic.replication.factor": str(cluster.offsets_replication_factor()),
            "transaction.state.log.replication.factor": str(cluster.offsets_replication_factor()),
            "fetch.max.bytes": str(self.limits.fetch_max_bytes),
            "transaction.max.timeout.ms": str(self.limits.transaction_max_timeout_ms),
            "max.incremental.fetch.session.cache.slots": str(self.fetch_session_cache_slots),
            "producer.id.expiration.ms": str(self.expiry.producer_id_expiration_ms),
            "producer.id.expiration.check.interval.ms": str(self.expiry.producer_check_ms),
            "transactional.id.expiration.ms": str(self.expiry.transactional_id_expiration_ms),
            "transaction.remove.expired.transaction.cleanup.interval.ms": str(
                self.expiry.transactional_check_ms
            ),
        }
        config = getattr(self.groups, "config", None)
        for name in GROUP_CONFIG_NAMES:
            value = getattr(config, name.replace(".", "_"), None)
            if value is not None:
                settings[name] = str(value)
        static = {
            name: value
            for name, value in settings.items()
            if value != BROKER_CONFIGS[name][0]  # only what differs from Kafka's default
        }
        static.update(
            {
                "listeners": listener,
                "advertised.listeners": listener,
                "node.id": str(node_id),
                "broker.id": str(node_id),
                "process.roles": "broker,controller",
            }
        )
        return static

    def _producer_id_expiration_ms(self, node_id):
        """producer.id.expiration.ms as changed for node `node_id` (None: not changed)."""
        value = self.dynamic_configs.value("producer.id.expiration.ms", node_id)
        return None if value is None else int(value)

    def describe_cluster(self, request, version, ctx, reply):
        R = DescribeClusterResponse
        if version >= 1 and request.endpoint_type != 1:
            return R(
                error_code=code("UNSUPPORTED_ENDPOINT_TYPE"),
                error_message=f"endpoint type {request.endpoint_type}: only brokers (1) are served",
                endpoint_type=request.endpoint_type,
                cluster_id="",
                controller_id=-1,
                brokers=[],
            )
        cluster = self.cluster
        return R(
            error_code=NONE,
            error_message=None,
            endpoint_type=1,
            cluster_id=cluster.cluster_id,
            controller_id=cluster.controller_id,
            brokers=[
                R.DescribeClusterBroker(broker_id=node, host=host, port=port, rack=None)
                for node, (host, port) in cluster.live_nodes(ctx.listener).items()
            ],
        )


SET, DELETE, APPEND, SUBTRACT = range(4)  # IncrementalAlterConfigs' operations


def _apply_operations(configs, changes, known):
    """IncrementalAlterConfigs' operations on `configs`, the configs `known` ({name:
    (default, config type, ...)}: TOPIC_CONFIGS or BROKER_CONFIGS)."""
    what = "topic" if known is TOPIC_CONFIGS else "broker"
    for c in changes:
        if c.name not in known:
            raise ClusterError("INVALID_CONFIG", f"unknown {what} config {c.name!r}")
        current = configs.get(c.name, known[c.name][0]) or ""
        items = [v for v in current.split(",") if v]
        if c.config_operation == SET:
            configs[c.name] = c.value
        elif c.config_operation == DELETE:
            configs.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if known[c.name][1] != LIST:
                raise ClusterError("INVALID_CONFIG", f"{c.name} is not a list: only SET or DELETE")
            # dicts, not lists: a long value must not cost its length squared
            present = dict.fromkeys(items)
            given = dict.fromkeys(v for v in (c.value or "").split(",") if v)
            if c.config_operation == APPEND:
                present.update(given)
            else:
                present = {v: None for v in present if v not in given}
            configs[c.name] = ",".join(present)
        else:
            raise ClusterError("INVALID_REQUEST", f"config operation {c.config_operation}")
    return configs


# Kafka 4.0's versions of the group APIs (KIP-896), for ApiVersions when a coordinator serves.
GROUP_VERSIONS = {
    cls.API_KEY: versions
    for cls, versions in (
        (OffsetCommitRequest, (2, 9)),
        (OffsetFetchRequest, (1, 9)),
        (JoinGroupRequest, (2, 9)),
        (HeartbeatRequest, (0, 4)),
        (LeaveGroupRequest, (0, 5)),
        (SyncGroupRequest, (0, 5)),
        (DescribeGroupsRequest, (0, 5)),
        (ListGroupsRequest, (0, 5)),
        (DeleteGroupsRequest, (0, 2)),
        (OffsetDeleteRequest, (0, 0)),
    )
}

"""The handlers of the APIs about replicas, leaders and log directories, as a cluster whose
replicas share one log answers them: a preferred election moves the leader to the first
replica when it runs, an unclean one gives a partition without a leader any replica that
runs; a reassignment to one replica moves the leader there; there is one log directory per
node, and the KRaft quorum is the controller alone. Each handler takes (apis, request,
version, ctx) and returns a response object, as Apis' own do."""

import uuid

from .. import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
    DescribeLogDirsRequest,
    DescribeLogDirsResponse,
    DescribeQuorumRequest,
    DescribeQuorumResponse,
    ElectLeadersRequest,
    ElectLeadersResponse,
    ListConfigResourcesRequest,
    ListConfigResourcesResponse,
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from ..error_codes import by_name

LOG_DIR = "/kafka-logs"  # the one log directory each node reports (in memory: no files)
METADATA_TOPIC = "__cluster_metadata"
TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
NONE = 0


def _code(name):
    return by_name(name).code


def _partitions(apis, topic_name, indexes):
    """[(index, error name or None, Partition or None)] of `indexes` of a topic."""
    topic = apis.cluster.topics.get(topic_name)
    out = []
    for i in indexes:
        partition = None if topic is None else apis.cluster.partition(topic_name, i)
        out.append((i, "UNKNOWN_TOPIC_OR_PARTITION" if partition is None else None, partition))
    return out


def elect_leaders(apis, request, version, ctx):
    R = ElectLeadersResponse
    wanted = request.topic_partitions
    if wanted is None:  # null: every partition
        pairs = [(t.name, [p.index for p in t.partitions]) for t in apis.cluster.topics.values()]
    else:
        pairs = [(t.topic, t.partitions) for t in wanted]
    results = []
    for name, indexes in pairs:
        parts = []
        for index, error, partition in _partitions(apis, name, indexes):
            if error is None:
                error = _elect(apis.cluster, name, partition, request.election_type)
            error_code = NONE if error is None else _code(error)
            parts.append(R.PartitionResult(partition_id=index, error_code=error_code))
        results.append(R.ReplicaElectionResult(topic=name, partition_result=parts))
    apis.data_arrived()  # Fetches waiting on a leader that changed answer now
    return R(error_code=NONE, replica_election_results=results)


PREFERRED, UNCLEAN = 0, 1  # ElectLeaders' election types


def _elect(cluster, topic, partition, election_type):
    """The error of one partition's election, after it (None: a new leader was elected).
    Preferred: its first replica leads, when it runs; unclean: any replica that runs leads
    a partition without a leader (the one log holds everything, so nothing is lost)."""
    running = [r for r in partition.replicas if r not in cluster.stopped]
    if election_type == UNCLEAN:
        if partition.leader >= 0:
            return "ELECTION_NOT_NEEDED"
        if not running:
            return "ELIGIBLE_LEADERS_NOT_AVAILABLE"
        cluster.move_leader(topic, partition.index, running[0])
        return None
    preferred = partition.replicas[0]
    if partition.leader == preferred:
        return "ELECTION_NOT_NEEDED"
    if preferred in cluster.stopped:
        return "PREFERRED_LEADER_NOT_AVAILABLE"
    cluster.move_leader(topic, partition.index, preferred)
    return None


def describe_log_dirs(apis, request, version, ctx):
    R = DescribeLogDirsResponse
    topics = []
    for topic in apis.cluster.topics.values():
        if request.topics is not None:
            asked = [t.partitions for t in request.topics if t.topic == topic.name]
            if not asked:
                continue
            wanted = set(asked[0])
        else:
            wanted = None
        parts = [
            R.DescribeLogDirsPartition(
                partition_index=p.index, partition_size=p.log.bytes, offset_lag=0
            )
            for p in topic.partitions
            if ctx.node_id in p.replicas and (wanted is None or p.index in wanted)
        ]
        if parts:
            topics.append(R.DescribeLogDirsTopic(name=topic.name, partitions=parts))
    return R(
        error_code=NONE,
        results=[R.DescribeLogDirsResult(error_code=NONE, log_dir=LOG_DIR, topics=topics)],
    )


def alter_replica_log_dirs(apis, request, version, ctx):
    R = AlterReplicaLogDirsResponse
    results = []
    for d in request.dirs:
        for t in d.topics:
            parts = []
            for index, error, partition in _partitions(apis, t.name, t.partitions):
                if error is None and ctx.node_id not in partition.replicas:
                    error = "NOT_LEADER_OR_FOLLOWER"  # this node holds no replica of it
                if error is None and d.path != LOG_DIR:
                    error = "LOG_DIR_NOT_FOUND"
                parts.append(
                    R.AlterReplicaLogDirPartitionResult(
                        partition_index=index, error_code=NONE if error is None else _code(error)
                    )
                )
            results.append(R.AlterReplicaLogDirTopicResult(topic_name=t.name, partitions=parts))
    return R(results=results)


def describe_quorum(apis, request, version, ctx):
    R = DescribeQuorumResponse
    cluster = apis.cluster
    controller = cluster.controller_id
    host, port = cluster.address(controller, ctx.listener)
    voter = R.ReplicaState(replica_id=controller, replica_directory_id=uuid.UUID(int=0))
    topics = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if t.topic_name != METADATA_TOPIC or p.partition_index != 0:
                parts.append(
                    R.PartitionData(
                        partition_index=p.partition_index,
                        error_code=_code("UNKNOWN_TOPIC_OR_PARTITION"),
                    )
                )
                continue
            parts.append(
                R.PartitionData(
                    partition_index=0,
                    error_code=NONE,
                    leader_id=controller,
                    leader_epoch=1,
                    high_watermark=0,
                    current_voters=[voter],
                    observers=[],
                )
            )
        topics.append(R.TopicData(topic_name=t.topic_name, partitions=parts))
    return R(
        error_code=NONE,
        topics=topics,
        nodes=[
            R.Node(
                node_id=controller,
                listeners=[R.Listener(name="CONTROLLER", host=host, port=port)],
            )
        ],
    )


def alter_partition_reassignments(apis, request, version, ctx):
    R = AlterPartitionReassignmentsResponse
    nodes = set(apis.cluster.live_node_ids())
    responses = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            (_, error, partition), message = _partitions(apis, t.name, [p.partition_index])[0], None
            if error is None and p.replicas is None:
                error, message = "NO_REASSIGNMENT_IN_PROGRESS", "no reassignment to cancel"
            elif error is None and (len(p.replicas) != 1 or not set(p.replicas) <= nodes):
                error = "INVALID_REPLICA_ASSIGNMENT"
                message = f"replicas {p.replicas}: one replica, on one of the nodes {sorted(nodes)}"
            elif error is None:
                # Moving the one replica moves the leader (a new leader epoch).
                apis.cluster.move_leader(t.name, p.partition_index, p.replicas[0])
                partition.replicas[:] = p.replicas
            parts.append(
                R.ReassignablePartitionResponse(
                    partition_index=p.partition_index,
                    error_code=NONE if error is None else _code(error),
                    error_message=message,
                )
            )
        responses.append(R.ReassignableTopicResponse(name=t.name, partitions=parts))
    return R(error_code=NONE, responses=responses)


def list_partition_reassignments(apis, request, version, ctx):
    # Reassignments complete at once: none is ever ongoing.
    return ListPartitionReassignmentsResponse(error_code=NONE, topics=[])


def list_config_resources(apis, request, version, ctx):
    R = ListConfigResourcesResponse
    types = set(request.resource_types) if version >= 1 else set()
    out = []
    if version >= 1 and (not types or TOPIC_RESOURCE in types):
        out += [
            R.ConfigResource(resource_name=name, resource_type=TOPIC_RESOURCE)
            for name in sorted(apis.cluster.topics)
        ]
    if version >= 1 and (not types or BROKER_RESOURCE in types):
        out += [
            R.ConfigResource(resource_name=str(node), resource_type=BROKER_RESOURCE)
            for node in apis.cluster.node_ids()
        ]
    # v0 (ListClientMetricsResources) lists client metrics subscriptions: there are none.
    return R(error_code=NONE, config_resources=out)


# (request class, Kafka 4.x's lowest version, highest, handler)
HANDLERS = (
    (ElectLeadersRequest, 0, 2, elect_leaders),
    (DescribeLogDirsRequest, 1, 4, describe_log_dirs),
    (AlterReplicaLogDirsRequest, 1, 2, alter_replica_log_dirs),
    (DescribeQuorumRequest, 0, 2, describe_quorum),
    (AlterPartitionReassignmentsRequest, 0, 0, alter_partition_reassignments),
    (ListPartitionReassignmentsRequest, 0, 0, list_partition_reassignments),
    (ListConfigResourcesRequest, 0, 1, list_config_resources),
)

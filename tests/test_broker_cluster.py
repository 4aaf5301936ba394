"""fastkwire.broker's cluster shapes without a socket: a partition's leader moved, nodes
stopped and started. What a client sees: NOT_LEADER_OR_FOLLOWER (with the new leader where
the version carries it), leader epochs bumped and checked (FENCED_LEADER_EPOCH,
UNKNOWN_LEADER_EPOCH), OffsetForLeaderEpoch over several epochs, Metadata's leaders,
replicas and offline replicas, LEADER_NOT_AVAILABLE, coordinators that move, and
NOT_COORDINATOR from a node that does not coordinate the group."""

import sys
from pathlib import Path

import pytest

import fastkwire
from fastkwire import records
from fastkwire.broker import Apis, Cluster, Context, GroupCoordinator
from fastkwire.error_codes import by_name
from fastkwire.records import Record

NODES = {0: ("127.0.0.1", 9092), 1: ("127.0.0.1", 9093), 2: ("127.0.0.1", 9094)}


def code(name):
    return by_name(name).code


@pytest.fixture
def apis():
    cluster = Cluster(NODES)
    return Apis(
        cluster,
        clock=lambda: 0.0,
        wall_clock=lambda: 1000.0,
        groups=GroupCoordinator(
            clock=lambda: 0.0,
            topic_partitions=cluster.partition_count,
            topics=cluster.topic_summary,
        ),
    )


def call(apis, request, version, node):
    out = []
    apis.handle(type(request).API_KEY, version, request, Context(node), out.append)
    assert len(out) == 1
    frame = fastkwire.encode_response(out[0], version, 7)
    return fastkwire.decode_response(frame, type(out[0]).API_KEY, version)[1]


def batch(n=1):
    return records.write_batch([Record(timestamp=5, key=None, value=b"v")] * n)


def produce(topic, partition, data):
    P = fastkwire.ProduceRequest
    return P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=partition, records=data)]
            )
        ],
    )


def fetch(topic, offset, epoch=-1, topic_id=None):
    F = fastkwire.FetchRequest
    return F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=topic_id or F.FetchTopic().topic_id,
                partitions=[
                    F.FetchPartition(
                        partition=0,
                        fetch_offset=offset,
                        current_leader_epoch=epoch,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


def list_offsets(topic, epoch=-1):
    L = fastkwire.ListOffsetsRequest
    return L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=topic,
                partitions=[
                    L.ListOffsetsPartition(
                        partition_index=0, timestamp=-1, current_leader_epoch=epoch
                    )
                ],
            )
        ],
    )


def epoch_end(topic, leader_epoch, current=-1):
    E = fastkwire.OffsetForLeaderEpochRequest
    return E(
        replica_id=-1,
        topics=[
            E.OffsetForLeaderTopic(
                topic=topic,
                partitions=[
                    E.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=current, leader_epoch=leader_epoch
                    )
                ],
            )
        ],
    )


def metadata(topic):
    M = fastkwire.MetadataRequest
    return M(topics=[M.MetadataRequestTopic(name=topic)], allow_auto_topic_creation=False)


def partition_of(response):
    return response.responses[0].partitions[0]


def test_a_moved_leader_is_named_by_the_old_one_and_fences_old_epochs(apis):
    apis.cluster.create_topic("t")
    old = apis.cluster.partition("t", 0).leader
    new = (old + 1) % 3
    assert (
        call(apis, produce("t", 0, batch(2)), 9, old).responses[0].partition_responses[0].error_code
        == 0
    )
    apis.cluster.move_leader("t", 0, new)
    # Produce v10+ and Fetch v12+ name the new leader and its epoch, with its address (KIP-951)
    r = call(apis, produce("t", 0, batch()), 11, old)
    p = r.responses[0].partition_responses[0]
    assert p.error_code == code("NOT_LEADER_OR_FOLLOWER")
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (new, 1)
    assert [(e.node_id, e.port) for e in r.node_endpoints] == [(new, NODES[new][1])]
    p = partition_of(call(apis, fetch("t", 0), 12, old))
    assert p.error_code == code("NOT_LEADER_OR_FOLLOWER")
    assert (p.current_leader.leader_id, p.current_leader.leader_epoch) == (new, 1)
    r = call(apis, fetch("", 0, topic_id=apis.cluster.topics["t"].id), 16, old)
    assert partition_of(r).current_leader.leader_id == new
    assert [e.node_id for e in r.node_endpoints] == [new]
    assert partition_of(call(apis, fetch("t", 0), 11, old)).error_code == code(
        "NOT_LEADER_OR_FOLLOWER"
    )  # before v12 the answer has no current leader: the error alone
    lo = call(apis, list_offsets("t"), 7, old).topics[0].partitions[0]
    assert lo.error_code == code("NOT_LEADER_OR_FOLLOWER")
    # the new leader: a client that still has epoch 0 is fenced, one from the future unknown
    assert partition_of(call(apis, fetch("t", 0, epoch=0), 12, new)).error_code == code(
        "FENCED_LEADER_EPOCH"
    )
    assert partition_of(call(apis, fetch("t", 0, epoch=2), 12, new)).error_code == code(
        "UNKNOWN_LEADER_EPOCH"
    )
    got = partition_of(call(apis, fetch("t", 0, epoch=1), 12, new))
    assert (got.error_code, got.high_watermark) == (0, 2)
    lo = call(apis, list_offsets("t", epoch=1), 7, new).topics[0].partitions[0]
    assert (lo.error_code, lo.offset, lo.leader_epoch) == (0, 2, 1)
    m = call(apis, metadata("t"), 12, new).topics[0].partitions[0]
    assert (m.leader_id, m.leader_epoch) == (new, 1)
    # what the new leader appends carries its epoch
    call(apis, produce("t", 0, batch()), 9, new)
    data = partition_of(call(apis, fetch("t", 0, epoch=1), 12, new)).records
    assert [b.partition_leader_epoch for b in records.read_batches(data)] == [0, 1]


def test_offset_for_leader_epoch_says_where_each_epoch_ended(apis):
    apis.cluster.create_topic("t")
    first = apis.cluster.partition("t", 0).leader
    call(apis, produce("t", 0, batch(3)), 9, first)  # epoch 0: offsets 0-2
    apis.cluster.move_leader("t", 0, (first + 1) % 3)  # epoch 1: nothing written
    apis.cluster.move_leader("t", 0, first)  # epoch 2: offsets 3-4
    call(apis, produce("t", 0, batch(2)), 9, first)

    def ask(epoch, current=-1):
        p = call(apis, epoch_end("t", epoch, current), 4, first).topics[0].partitions[0]
        return p.error_code, p.leader_epoch, p.end_offset

    assert ask(0) == (0, 0, 3)  # epoch 0 ended where epoch 2 started
    assert ask(1) == (0, 0, 3)  # no batch in epoch 1: the largest epoch below it is 0
    assert ask(2) == (0, 2, 5)  # the current epoch ends at the log end
    assert ask(3) == (0, -1, -1)  # past the current one: undefined
    assert ask(0, current=1) == (code("FENCED_LEADER_EPOCH"), -1, -1)
    assert ask(0, current=3) == (code("UNKNOWN_LEADER_EPOCH"), -1, -1)
    assert apis.cluster.partition("t", 0).log.leader_epoch == 2


def test_a_stopped_node_leaves_its_partitions_to_other_replicas_or_to_none(apis):
    cluster = apis.cluster
    cluster.create_topic("one", 3)  # replication factor 1
    cluster.create_topic("three", 3, 3)
    stop = cluster.partition("one", 0).leader
    alive = [n for n in NODES if n != stop]
    lost = [p.index for p in cluster.topics["one"].partitions if p.leader == stop]
    moved = cluster.stop_node(stop)
    assert {(p.index, p.leader) for p in moved if p in cluster.topics["one"].partitions} == {
        (i, -1) for i in lost
    }
    m = call(apis, metadata("one"), 12, alive[0])
    assert sorted(b.node_id for b in m.brokers) == alive
    assert m.controller_id == min(alive)
    for p in m.topics[0].partitions:
        if p.partition_index in lost:
            assert (p.error_code, p.leader_id, p.leader_epoch) == (
                code("LEADER_NOT_AVAILABLE"),
                -1,
                1,
            )
            assert (p.replica_nodes, p.isr_nodes, p.offline_replicas) == ([stop], [], [stop])
        else:
            assert (p.error_code, p.leader_epoch) == (0, 0) and p.leader_id in alive
    for p in call(apis, metadata("three"), 12, alive[0]).topics[0].partitions:
        # three replicas: the leader is another that runs; the stopped one is offline
        assert p.error_code == 0 and p.leader_id in alive and p.offline_replicas == [stop]
        assert sorted(p.isr_nodes) == alive and len(p.replica_nodes) == 3
    assert [p.index for p in cluster.topics["three"].partitions if p.log.leader_epoch == 1] == [
        p.index for p in moved if p in cluster.topics["three"].partitions
    ]
    # a topic made while a node is stopped has its replicas on the others
    with pytest.raises(Exception, match="replication factor 3"):
        cluster.create_topic("later", 1, 3)
    # the node comes back: the partitions without a leader are led by it again
    cluster.start_node(stop)
    m = call(apis, metadata("one"), 12, stop)
    assert len(m.brokers) == 3
    for p in m.topics[0].partitions:
        assert p.error_code == 0 and p.offline_replicas == []
        if p.partition_index in lost:
            assert (p.leader_id, p.leader_epoch) == (stop, 2)
    with pytest.raises(ValueError, match="node_id"):
        cluster.start_node(stop)  # running
    with pytest.raises(ValueError, match="node_id"):
        cluster.stop_node(7)  # no such node
    cluster.stop_node(stop)
    with pytest.raises(ValueError, match="stopped"):
        cluster.move_leader("one", 0, stop)


def find_coordinator(apis, group, node, key_type=0):
    F = fastkwire.FindCoordinatorRequest
    r = call(apis, F(key_type=key_type, coordinator_keys=[group]), 4, node)
    return r.coordinators[0].error_code, r.coordinators[0].node_id


def join(group):
    J = fastkwire.JoinGroupRequest
    return J(
        group_id=group,
        session_timeout_ms=10000,
        rebalance_timeout_ms=10000,
        member_id="",
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )


def test_group_requests_go_to_the_coordinator_which_moves_when_its_node_stops(apis):
    groups = [f"g{i}" for i in range(12)]
    owner = {g: find_coordinator(apis, g, 0)[1] for g in groups}
    assert set(owner.values()) == {0, 1, 2}  # spread over the nodes
    g = groups[0]
    other = (owner[g] + 1) % 3
    r = call(apis, join(g), 9, other)
    assert r.error_code == code("NOT_COORDINATOR")
    r = call(apis, join(g), 4, owner[g])  # v4: a new member is told its id
    assert r.error_code == code("MEMBER_ID_REQUIRED")
    # several groups in one request: those of other nodes get the error, the rest answers
    D = fastkwire.DescribeGroupsRequest
    described = call(apis, D(groups=groups), 5, owner[g]).groups
    assert sorted(x.group_id for x in described) == sorted(groups)
    for x in described:
        want = 0 if owner[x.group_id] == owner[g] else code("NOT_COORDINATOR")
        assert x.error_code == want, x.group_id
    OF = fastkwire.OffsetFetchRequest
    fetched = call(
        apis, OF(groups=[OF.OffsetFetchRequestGroup(group_id=x) for x in groups]), 8, other
    ).groups
    assert {x.group_id: x.error_code for x in fetched} == {
        x: 0 if owner[x] == other else code("NOT_COORDINATOR") for x in groups
    }
    assert call(apis, OF(group_id=g, topics=None), 7, other).error_code == code("NOT_COORDINATOR")
    # ListGroups on a node lists its own groups only (an admin client asks each node)
    listed = call(apis, fastkwire.ListGroupsRequest(), 4, owner[g]).groups
    assert [x.group_id for x in listed] == [g]
    assert call(apis, fastkwire.ListGroupsRequest(), 4, other).groups == []
    # the coordinator's node stops: the group is coordinated by another, state and all
    apis.cluster.stop_node(owner[g])
    err, now = find_coordinator(apis, g, other)
    assert err == 0 and now != owner[g]
    for x in groups:  # the groups of the other nodes stay where they were
        if owner[x] != owner[g]:
            assert find_coordinator(apis, x, now)[1] == owner[x]
    listed = call(apis, fastkwire.ListGroupsRequest(), 4, now).groups
    assert g in [x.group_id for x in listed]
    # every replica of its __consumer_offsets partition stopped: no coordinator
    for n in NODES:
        if n not in apis.cluster.stopped:
            apis.cluster.stop_node(n)
    assert find_coordinator(apis, g, now)[0] == code("COORDINATOR_NOT_AVAILABLE")
    assert find_coordinator(apis, "txn", now, key_type=1)[0] == code("COORDINATOR_NOT_AVAILABLE")


def test_streams_group_requests_go_to_the_coordinator(apis):
    """KIP-1071's StreamsGroupHeartbeat and StreamsGroupDescribe (group_ids, not group_id)
    get NOT_COORDINATOR from another node, as the other protocols' do (they once raised)."""
    groups = [f"s{i}" for i in range(12)]
    owner = {g: find_coordinator(apis, g, 0)[1] for g in groups}
    g = groups[0]
    other = (owner[g] + 1) % 3
    H = fastkwire.StreamsGroupHeartbeatRequest
    beat = H(group_id=g, member_id="m", member_epoch=0, rebalance_timeout_ms=1000, topology=None)
    r = call(apis, beat, 0, other)
    assert (r.error_code, r.member_id) == (code("NOT_COORDINATOR"), "m")
    D = fastkwire.StreamsGroupDescribeRequest
    described = call(apis, D(group_ids=groups), 0, owner[g]).groups
    assert sorted(x.group_id for x in described) == sorted(groups)
    for x in described:  # this node's groups: not found (none made); the others': elsewhere
        want = "GROUP_ID_NOT_FOUND" if owner[x.group_id] == owner[g] else "NOT_COORDINATOR"
        assert x.error_code == code(want), x.group_id


def test_one_node_takes_every_group_request(apis):
    one = Apis(Cluster({5: ("127.0.0.1", 1)}), groups=GroupCoordinator())
    assert find_coordinator(one, "any", 5) == (0, 5)
    assert call(one, join("any"), 4, 5).error_code == code("MEMBER_ID_REQUIRED")


def test_transaction_requests_go_to_the_transactional_ids_coordinator(apis):
    apis.cluster.create_topic("t")
    owner = find_coordinator(apis, "tx", 0, key_type=1)[1]
    other = (owner + 1) % 3
    init = fastkwire.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000)
    assert call(apis, init, 4, other).error_code == code("NOT_COORDINATOR")
    answer = call(apis, init, 4, owner)
    assert answer.error_code == 0
    pid, epoch = answer.producer_id, answer.producer_epoch
    idempotent = fastkwire.InitProducerIdRequest(transactional_id=None)
    assert call(apis, idempotent, 4, other).error_code == 0  # no id: any node
    A = fastkwire.AddPartitionsToTxnRequest
    adding = A(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name="t", partitions=[0])],
    )
    (result,) = call(apis, adding, 3, other).results_by_topic_v3_and_below
    assert result.results_by_partition[0].partition_error_code == code("NOT_COORDINATOR")
    (result,) = call(apis, adding, 3, owner).results_by_topic_v3_and_below
    assert result.results_by_partition[0].partition_error_code == 0
    offsets = fastkwire.AddOffsetsToTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g"
    )
    assert call(apis, offsets, 3, other).error_code == code("NOT_COORDINATOR")
    ending = fastkwire.EndTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True
    )
    assert call(apis, ending, 3, other).error_code == code("NOT_COORDINATOR")
    assert call(apis, ending, 3, owner).error_code == 0


def elect(apis, topic, election_type, node):
    E = fastkwire.ElectLeadersRequest
    r = call(
        apis,
        E(
            election_type=election_type,
            topic_partitions=[E.TopicPartitions(topic=topic, partitions=[0])],
            timeout_ms=1000,
        ),
        2,
        node,
    )
    return r.replica_election_results[0].partition_result[0].error_code


def test_elect_leaders_brings_the_preferred_replica_back(apis):
    cluster = apis.cluster
    cluster.create_topic("t", 1, 2)
    partition = cluster.partition("t", 0)
    preferred, second = partition.replicas
    assert elect(apis, "t", 0, preferred) == code("ELECTION_NOT_NEEDED")
    cluster.stop_node(preferred)
    assert (partition.leader, partition.log.leader_epoch) == (second, 1)
    assert elect(apis, "t", 0, second) == code("PREFERRED_LEADER_NOT_AVAILABLE")
    cluster.start_node(preferred)
    assert partition.leader == second  # a restarted node does not take its leadership back
    assert elect(apis, "t", 0, second) == 0
    assert (partition.leader, partition.log.leader_epoch) == (preferred, 2)
    # unclean: only for a partition without a leader, and only to a replica that runs
    cluster.create_topic("u", 1)
    (only,) = cluster.partition("u", 0).replicas
    other = (only + 1) % 3
    assert elect(apis, "u", 1, other) == code("ELECTION_NOT_NEEDED")
    cluster.stop_node(only)
    assert elect(apis, "u", 1, other) == code("ELIGIBLE_LEADERS_NOT_AVAILABLE")


def test_mutated_frames_keep_the_contract_while_the_cluster_changes():
    """fuzz/hostile_cluster.py's contract over a short run (the long one: its --loop)."""
    pytest.importorskip("cramjam")  # the seeds hold gzip batches
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    import hostile_cluster

    counts, findings, _ = hostile_cluster.run(2000, seed=7)
    assert findings == 0
    assert counts["answered"] and counts["closed"]

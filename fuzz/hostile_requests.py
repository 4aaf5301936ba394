"""Hostile request frames through the broker's request path (fastkwire.broker), no socket.

    python3 fuzz/hostile_requests.py --loop 20000 --seed 1 [--authorizer]

The seeds are valid requests of every API and version the broker serves (their defaults,
plus Produce with real record batches, Fetch and Metadata of a topic that exists); each
input is a seed mutated by fuzz/differential.py's mutations. Every frame goes through
`answer_frame` against one broker whose state carries over from input to input. The
contract, checked for each:
- the frame gets exactly one outcome, at once or (a Fetch that waits) once the clock has
  passed its wait: an answer, nothing, or the end of the connection (`Close`);
- an answer is a whole frame carrying the request's correlation id that decodes as that
  API's response at the request's version (v0 for an ApiVersions version not served);
- nothing is only ever the answer to a Produce with acks=0;
- no handler fails (an error logged by the broker is a finding);
- the logs stay logs: every partition's batches read back whole with their CRCs, base
  offsets rising from the log start to the log end, the last stable offset between them;
- the cluster holds at most its max_partitions.
One input in five is a flood instead: a valid request that asks the broker to hold, read or
do much (new transactional ids, idempotent producer ids, ACLs by the hundred, new group
members of both protocols, a Fetch naming one partition hundreds of times with max_bytes
2**31-1, a Metadata or OffsetFetch naming one thing again and again, long list configs
appended, data to read), sometimes mutated, in bursts of one kind. Beside the contract above, checked for every input:
- what a client can make the broker hold stays within its caps (Limits, the group sizes
  with their pending members, the timers live and kept);
- an answer is at most AMPLIFICATION times its request plus ANSWER_SLACK (a Fetch: the
  broker's fetch_max_bytes plus one batch): a few bytes asked again and again get no huge
  answer;
- no input takes over SLOW_INPUT seconds (work that grows with the square of a count
  shows as a hang long before memory does).
With --authorizer the broker enforces ACLs (_authorize.py) that allow the fuzzer's
principal some things and deny it others, so that refused requests, requests cut down to
what is allowed and CreateAcls/DeleteAcls changing the ACLs all go through the same contract.
With --log-dir the broker keeps its coordinators' state in a temporary log directory (some
JoinGroup floods then come from a client id of 32767 bytes); at the end, a broker started
on that directory must load what the coordinators wrote.
With --partial the fuzzer's principal may do all on its own topic, groups and transactional
ids, beside another principal's hidden topic, group and transactional id, some of that
principal's use (offsets, a KIP-848 member, a streams topology) in groups the fuzzer may
describe: it changes nothing hidden and no answer names a hidden topic, group or id.
With --stranger the broker enforces ACLs that grant everything to another principal and
nothing to the fuzzer's, and holds that principal's topic, group offsets and transactional
id; beside the contract above, checked for every input: the fuzzer's request changes
nothing (topics, partitions, logs, configs, ACLs, offsets, groups, transactional ids,
producer ids) and its answer names no topic, group or transactional id its request does
not name (Kafka leaves out, or refuses alike, what a client may not describe).
Anything else is printed with its input (hex) and counted; the exit status is 1 if any.
"""

import argparse
import logging
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import differential as D  # noqa: E402

import fastkwire  # noqa: E402
from fastkwire import records  # noqa: E402
from fastkwire.broker import (  # noqa: E402
    Apis,
    Authorizer,
    Cluster,
    Context,
    GroupConfig,
    GroupCoordinator,
    Limits,
)
from fastkwire.broker._acls import Acl  # noqa: E402
from fastkwire.broker._coordinator_state import CoordinatorState  # noqa: E402
from fastkwire.broker._disk_logs import DiskLogs  # noqa: E402
from fastkwire.broker._exchange import Close, answer_frame  # noqa: E402
from fastkwire.proxy._frames import produce_acks, request_header  # noqa: E402

TOPIC = "fuzz"
MAX_PARTITIONS = 2_000
# Caps smaller than the defaults, so that a short run reaches them.
LIMITS = Limits(fetch_max_bytes=256 << 10, max_acls=300, max_transactional_ids=100)
GROUPS = GroupConfig(
    group_max_size=40,
    group_consumer_max_size=40,
    group_consumer_session_timeout_ms=1_800_000,
    max_groups=20,
)
AMPLIFICATION = 16
ANSWER_SLACK = 1 << 20  # what the state itself may fill an answer with (all topics, offsets)
FETCH_SLACK = 1_048_588 + 4096  # one batch of max.message.bytes, and the answer's header
SLOW_INPUT = 10.0  # seconds; a bound for a hang, not a speed (the machine may be busy)


class Finding(Exception):
    pass


class _Errors(logging.Handler):
    def __init__(self):
        super().__init__(logging.ERROR)
        self.records = []

    def emit(self, record):
        self.records.append(self.format(record))


def fuzz_acls(apis):
    """ACLs for the fuzzer's principal (User:ANONYMOUS: no login): some allowed, some
    denied, and the right to change them (CreateAcls, DeleteAcls)."""
    me = "User:ANONYMOUS"
    for acl in (
        Acl(2, TOPIC, 3, me, "*", 2, 3),  # ALL on the seeds' topic
        Acl(2, "x", 4, me, "*", 4, 2),  # DENY WRITE on topics starting x
        Acl(2, "*", 3, "User:*", "*", 8, 3),  # DESCRIBE on every topic
        Acl(3, "g", 4, me, "*", 3, 3),  # READ on groups starting g
        Acl(3, "gx", 3, me, "*", 2, 2),  # DENY ALL on group gx
        Acl(4, "kafka-cluster", 3, me, "*", 7, 3),  # ALTER on the cluster: the ACL APIs
        Acl(5, "*", 3, me, "fuzz", 4, 3),  # WRITE on every transactional id, from its host
    ):
        apis.acls.add(acl)


OWNER = "User:owner"
SECRETS = ("hidden-topic-q7", "hidden-group-q7", "hidden-txn-q7")


def stranger_state(apis):
    """--stranger: ACLs granting everything to OWNER (none to the fuzzer's principal), and
    what OWNER made: a topic with data, a group's offsets, a transactional id."""
    for resource_type in (2, 3, 4, 5):
        name = "kafka-cluster" if resource_type == 4 else "*"
        apis.acls.add(Acl(resource_type, name, 3, OWNER, "*", 2, 3))  # ALLOW ALL
    topic, group, txn = SECRETS
    apis.cluster.create_topic(topic, 2)
    ctx = Context(0, "owner", "127.0.0.1", principal=OWNER)
    P, C = fastkwire.ProduceRequest, fastkwire.OffsetCommitRequest
    batch = records.write_batch([records.Record(timestamp=1, key=None, value=b"secret")])
    requests = (
        (9, P(acks=1, timeout_ms=100, topic_data=[
            P.TopicProduceData(name=topic, partition_data=[
                P.PartitionProduceData(index=0, records=batch)])])),
        (8, C(group_id=group, generation_id_or_member_epoch=-1, member_id="", topics=[
            C.OffsetCommitRequestTopic(name=topic, partitions=[
                C.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])])),
        (4, fastkwire.InitProducerIdRequest(transactional_id=txn, transaction_timeout_ms=60000)),
    )  # fmt: skip
    for version, request in requests:
        out = []
        apis.handle(type(request).API_KEY, version, request, ctx, out.append)
        fastkwire.encode_response(out[0], version, 1)


def partial_state(apis):
    """--partial: beside --stranger's, ACLs allowing the fuzzer's principal all on the seeds'
    topic, on every group but the hidden one (DENY wins) and on transactional
    ids tx*; and OWNER's use of groups it may describe with the hidden topic: committed
    offsets (o0), a KIP-848 member subscribed to it (o1), a streams topology reading it (o2)."""
    me = "User:ANONYMOUS"
    for acl in (
        Acl(2, TOPIC, 3, me, "*", 2, 3),
        Acl(3, "*", 3, me, "*", 2, 3),  # every group...
        Acl(3, SECRETS[1], 3, me, "*", 2, 2),  # ...but the hidden one: DENY wins
        Acl(5, "tx", 4, me, "*", 2, 3),
    ):
        apis.acls.add(acl)
    topic = SECRETS[0]
    ctx = Context(0, "owner", "127.0.0.1", principal=OWNER)
    C, H = fastkwire.OffsetCommitRequest, fastkwire.ConsumerGroupHeartbeatRequest
    S = fastkwire.StreamsGroupHeartbeatRequest
    subtopology = S.Subtopology(
        subtopology_id="0", source_topics=[topic], source_topic_regex=[],
        state_changelog_topics=[], repartition_sink_topics=[], repartition_source_topics=[],
        copartition_groups=[],
    )  # fmt: skip
    requests = (
        (8, C(group_id="o0", generation_id_or_member_epoch=-1, member_id="", topics=[
            C.OffsetCommitRequestTopic(name=n, partitions=[
                C.OffsetCommitRequestPartition(partition_index=0, committed_offset=1)])
            for n in (topic, TOPIC)])),
        (0, H(group_id="o1", member_id="owner-member", member_epoch=0, rebalance_timeout_ms=1000,
              subscribed_topic_names=[topic, TOPIC], topic_partitions=[])),
        (0, S(group_id="o2", member_id="owner-member", member_epoch=0,
              endpoint_information_epoch=0, rebalance_timeout_ms=1000,
              topology=S.Topology(epoch=1, subtopologies=[subtopology]), active_tasks=[],
              standby_tasks=[], warmup_tasks=[], process_id="p")),
    )  # fmt: skip
    for version, request in requests:
        out = []
        apis.handle(type(request).API_KEY, version, request, ctx, out.append)
        assert getattr(out[0], "error_code", 0) == 0, out[0]


def partial_seeds():
    """--partial: requests about the groups OWNER shares with the hidden topic."""
    out = []
    groups = ["o0", "o1", "o2"]
    describe = fastkwire.DescribeGroupsRequest(groups=groups, include_authorized_operations=True)
    out.append(fastkwire.encode_request(describe, 5, 12, "fuzz"))
    for cls in (fastkwire.ConsumerGroupDescribeRequest, fastkwire.StreamsGroupDescribeRequest):
        out.append(fastkwire.encode_request(cls(group_ids=groups), 0, 12, "fuzz"))
    OF = fastkwire.OffsetFetchRequest
    out += [fastkwire.encode_request(OF(group_id="o0", topics=None), v, 12, "fuzz") for v in (2, 7)]
    fetch = OF(groups=[OF.OffsetFetchRequestGroup(group_id="o0", topics=None)])
    out.append(fastkwire.encode_request(fetch, 9, 12, "fuzz"))
    return out


def hidden_state_of(apis):
    """What the fuzzer may not change with --partial: the hidden topic, group and
    transactional id, and the ACLs."""
    topic, group, txn = SECRETS
    t = apis.cluster.topics.get(topic)
    x = apis.transactions.transactions.get(txn)
    return (
        None
        if t is None
        else (dict(t.configs), [(p.log.log_start, p.log.log_end) for p in t.partitions]),
        apis.groups.offsets.by_topic(group),
        None if x is None else (x.producer_id, x.epoch, x.ongoing),
        set(apis.acls.acls),
    )


def state_of(apis):
    """What a request could change, as plain values (--stranger compares them)."""
    cluster, groups = apis.cluster, apis.groups
    return (
        {
            t.name: (dict(t.configs), [(p.log.log_start, p.log.log_end) for p in t.partitions])
            for t in cluster.topics.values()
        },
        set(apis.acls.acls),
        {g: groups.offsets.by_topic(g) for g in groups.offsets.groups()},
        {
            g.group_id: (g.state, g.generation, list(g.members), sorted(g.pending_join))
            for g in groups.classic.groups.values()
        },
        {g: sorted(x.members) for g, x in groups.consumer.groups.items()},
        {g: sorted(x.members) for g, x in groups.streams.groups.items()},
        {t: (x.producer_id, x.epoch, x.ongoing) for t, x in apis.transactions.transactions.items()},
        cluster.producer_ids._next,
    )


def make_broker(authorizer=False, stranger=False, log_dir=None, partial=False):
    clock = [0.0]
    storage = None if log_dir is None else DiskLogs(log_dir)
    cluster = Cluster(
        {0: ("127.0.0.1", 9092)},
        num_partitions=2,
        max_partitions=MAX_PARTITIONS,
        cluster_id=None if storage is None else storage.cluster_id(),
    )
    if storage is not None:
        storage.attach(cluster, settle=False)
    groups = GroupCoordinator(
        GROUPS,
        clock=lambda: clock[0],
        topic_partitions=cluster.partition_count,
        topics=cluster.topic_summary,
    )
    apis = Apis(
        cluster,
        clock=lambda: clock[0],
        groups=groups,
        limits=LIMITS,
        authorizer=Authorizer() if authorizer or stranger or partial else None,
    )
    if storage is not None:
        CoordinatorState(storage, cluster, groups, apis.transactions).load()
        apis.storage = storage  # closed by run()
    if TOPIC not in cluster.topics:
        cluster.create_topic(TOPIC, 2)
    if stranger or partial:
        stranger_state(apis)
    if partial:
        partial_state(apis)
    elif authorizer and not stranger:
        fuzz_acls(apis)
    return apis, clock


FLOOD_KINDS = 10


def flood(rng, kind, long_client_ids=False):
    """A valid request of `kind` that asks the broker to hold, read or do much (see the
    docstring)."""
    n = rng.choice((1, 10, 100, 600))
    tag = rng.getrandbits(32)
    if kind == 0:
        tid = None if rng.random() < 0.5 else f"tx-{tag}"
        request, version = fastkwire.InitProducerIdRequest(transactional_id=tid), 4
    elif kind == 1:
        C = fastkwire.CreateAclsRequest
        creations = [
            C.AclCreation(
                resource_type=2,
                resource_name=f"r{tag}-{i}",
                resource_pattern_type=3,
                principal="User:x",
                host="*",
                operation=3,
                permission_type=3,
            )
            for i in range(n)
        ]
        request, version = C(creations=creations), 3
    elif kind == 2:
        J = fastkwire.JoinGroupRequest
        request = J(
            group_id="flood",
            session_timeout_ms=1_800_000,  # the longest: pending members pile up
            rebalance_timeout_ms=30_000,
            member_id="",
            protocol_type="consumer",
            protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"m" * (n * 10))],
        )
        # versions that answer MEMBER_ID_REQUIRED at once (a parked JoinGroup would move the
        # clock past every session timeout; the mutated seeds park them)
        version = rng.choice((5, 9))
    elif kind == 3:
        H = fastkwire.ConsumerGroupHeartbeatRequest
        request = H(
            group_id="flood-848",
            member_id=f"m{tag}",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=[TOPIC],
            subscribed_topic_regex=rng.choice((None, ".*", f"auto-{tag % 7}.*", "(a+)+$")),
            server_assignor=None,
            topic_partitions=[],
        )
        version = 0 if request.subscribed_topic_regex is None else 1
    elif kind == 4:
        F = fastkwire.FetchRequest
        one = F.FetchPartition(partition=tag % 2, fetch_offset=0, partition_max_bytes=2**31 - 1)
        request = F(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=2**31 - 1,
            isolation_level=tag % 2,
            session_epoch=-1,
            topics=[F.FetchTopic(topic=TOPIC, partitions=[one] * n)],
        )
        version = 11
    elif kind == 5:
        M = fastkwire.MetadataRequest
        names = [TOPIC] * n if tag % 2 else [f"auto-{tag}-{i}" for i in range(min(n, 20))]
        request = M(topics=[M.MetadataRequestTopic(name=x) for x in names])
        version = 9
    elif kind == 6:
        OF = fastkwire.OffsetFetchRequest
        group = OF.OffsetFetchRequestGroup(group_id=f"o{tag % 5}", topics=None)
        request, version = OF(groups=[group] * n, require_stable=False), 8
    elif kind == 7:
        OC = fastkwire.OffsetCommitRequest
        request = OC(
            group_id=f"o{tag % 5}" if tag % 3 else f"new-{tag}",  # new groups: max_groups
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OC.OffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        OC.OffsetCommitRequestPartition(
                            partition_index=i % 2,
                            committed_offset=i,
                            committed_metadata="x" * rng.choice((0, 4096, 5000)),
                        )
                        for i in range(min(n, 20))
                    ],
                )
            ],
        )
        version = 8
    elif kind == 9:  # data for the Fetch floods to read again and again
        P = fastkwire.ProduceRequest
        batch = records.write_batch([records.Record(timestamp=tag, value=b"d" * (n * 100))])
        data = P.PartitionProduceData(index=tag % 2, records=batch)
        request = P(
            acks=1,
            timeout_ms=100,
            topic_data=[P.TopicProduceData(name=TOPIC, partition_data=[data])],
        )
        version = 9
    else:
        R = fastkwire.IncrementalAlterConfigsRequest
        value = ",".join(f"{i}:{tag % 7}" for i in range(n * 5))[:32767]
        config = R.AlterableConfig(
            name="follower.replication.throttled.replicas",
            config_operation=rng.choice((0, 2, 3)),
            value=value,
        )
        resource = R.AlterConfigsResource(resource_type=2, resource_name=TOPIC, configs=[config])
        request, version = R(resources=[resource], validate_only=False), 1
    client_id = "flood"
    if long_client_ids and kind == 2 and rng.random() < 0.3:
        client_id = "c" * 32767  # the most a header holds: member ids are made from it
    frame = fastkwire.encode_request(request, version, 20 + kind, client_id)
    return D.mutate(frame, rng, [frame]) if rng.random() < 0.2 else frame


def seeds(apis):
    """Valid request frames: every served API and version with its defaults, and a few
    that reach the log."""
    out = []
    for key, (low, high) in sorted(apis.versions().items()):
        cls = fastkwire.REQUEST_CLASSES[key]
        for version in range(low, high + 1):
            try:
                out.append(fastkwire.encode_request(cls(), version, 7, "fuzz"))
            except (ValueError, TypeError):
                pass  # a version whose required fields have no default
    batch = records.write_batch(
        [records.Record(timestamp=1000 + i, key=b"k", value=b"v" * i) for i in range(3)],
        compression="gzip",
    )
    idempotent = records.write_batch(
        [records.Record(timestamp=5, key=None, value=b"x")],
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
    )
    P = fastkwire.ProduceRequest
    for data, acks in ((batch, -1), (idempotent, 1), (batch, 0)):
        request = P(
            acks=acks,
            timeout_ms=100,
            topic_data=[
                P.TopicProduceData(
                    name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=data)]
                )
            ],
        )
        out += [fastkwire.encode_request(request, v, 8, "fuzz") for v in (3, 9, 12)]
    F = fastkwire.FetchRequest
    fetch = F(
        max_wait_ms=50,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=TOPIC,
                topic_id=apis.cluster.topics[TOPIC].id,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=512)],
            )
        ],
    )
    out += [fastkwire.encode_request(fetch, v, 9, "fuzz") for v in (4, 11, 13, 17)]
    # Fetch sessions: ones that open a session, and incremental ones of sessions opened
    # here (at the epoch they expect, naming a partition and forgetting the other).
    fetch.session_epoch = 0
    out += [fastkwire.encode_request(fetch, v, 9, "fuzz") for v in (7, 12, 13, 17)]
    topic_id = apis.cluster.topics[TOPIC].id
    fetch.forgotten_topics_data = [F.ForgottenTopic(topic=TOPIC, topic_id=topic_id, partitions=[1])]
    for version in (12, 17):
        opened = []
        fetch.session_id, fetch.session_epoch = 0, 0
        fetch.max_wait_ms = 0
        apis.handle(F.API_KEY, version, fetch, Context(0), opened.append)
        fetch.session_id, fetch.session_epoch = opened[0].session_id, 1
        fetch.max_wait_ms = 50
        out.append(fastkwire.encode_request(fetch, version, 9, "fuzz"))
    fetch.session_id, fetch.session_epoch, fetch.forgotten_topics_data = 0, -1, []
    L = fastkwire.ListOffsetsRequest
    listing = L(
        replica_id=-1,
        topics=[
            L.ListOffsetsTopic(
                name=TOPIC,
                partitions=[
                    L.ListOffsetsPartition(partition_index=0, timestamp=ts)
                    for ts in (-1, -2, -3, 0, 1001)
                ],
            )
        ],
    )
    out += [fastkwire.encode_request(listing, v, 11, "fuzz") for v in (1, 4, 10)]
    R = fastkwire.DeleteRecordsRequest
    deleting = R(
        topics=[
            R.DeleteRecordsTopic(
                name=TOPIC, partitions=[R.DeleteRecordsPartition(partition_index=1, offset=1)]
            )
        ]
    )
    out += [fastkwire.encode_request(deleting, v, 12, "fuzz") for v in (0, 2)]
    C = fastkwire.CreateTopicsRequest
    creating = C(
        topics=[C.CreatableTopic(name="new", num_partitions=3, replication_factor=1)],
        timeout_ms=100,
    )
    out += [fastkwire.encode_request(creating, v, 13, "fuzz") for v in (2, 5, 7)]
    G = fastkwire.CreatePartitionsRequest
    growing = G(topics=[G.CreatePartitionsTopic(name=TOPIC, count=3)], timeout_ms=100)
    out += [fastkwire.encode_request(growing, v, 14, "fuzz") for v in (0, 3)]
    # a transaction: its producer id is the first the broker hands out (make_broker's fresh)
    init = fastkwire.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=1000)
    out += [fastkwire.encode_request(init, v, 15, "fuzz") for v in (0, 4)]
    A = fastkwire.AddPartitionsToTxnRequest
    adding = A(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=1000,
        v3_and_below_producer_epoch=0,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=TOPIC, partitions=[0, 1])],
    )
    out += [fastkwire.encode_request(adding, v, 16, "fuzz") for v in (0, 3)]
    transactional = records.write_batch(
        [records.Record(timestamp=9, value=b"t")],
        producer_id=1000,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    request = P(
        transactional_id="tx",
        acks=-1,
        timeout_ms=100,
        topic_data=[
            P.TopicProduceData(
                name=TOPIC, partition_data=[P.PartitionProduceData(index=1, records=transactional)]
            )
        ],
    )
    out.append(fastkwire.encode_request(request, 9, 17, "fuzz"))
    for committed in (True, False):
        ending = fastkwire.EndTxnRequest(
            transactional_id="tx", producer_id=1000, producer_epoch=0, committed=committed
        )
        out += [fastkwire.encode_request(ending, v, 18, "fuzz") for v in (0, 4)]
    M = fastkwire.MetadataRequest
    meta = M(topics=[M.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=True)
    out += [fastkwire.encode_request(meta, v, 10, "fuzz") for v in (1, 9, 12)]
    # a node's configs and its loggers (described), and a dynamic broker config (changed)
    DC = fastkwire.DescribeConfigsRequest
    describing = DC(
        resources=[
            DC.DescribeConfigsResource(resource_type=kind, resource_name=name)
            for kind, name in ((4, "0"), (4, ""), (8, "0"), (4, "1"))
        ],
        include_synonyms=True,
        include_documentation=True,
    )
    out.append(fastkwire.encode_request(describing, 4, 19, "fuzz"))
    describing.include_documentation = False
    out.append(fastkwire.encode_request(describing, 1, 19, "fuzz"))
    IA = fastkwire.IncrementalAlterConfigsRequest
    changing = IA(
        resources=[
            IA.AlterConfigsResource(
                resource_type=4,
                resource_name=name,
                configs=[
                    IA.AlterableConfig(
                        name="producer.id.expiration.ms", config_operation=0, value="1000"
                    )
                ],
            )
            for name in ("0", "")
        ],
        validate_only=False,
    )
    out += [fastkwire.encode_request(changing, v, 20, "fuzz") for v in (0, 1)]
    return out


def check_one(apis, clock, errors, frame, node=0, stranger=False, partial=False):
    outcomes = []
    before = state_of(apis) if stranger else hidden_state_of(apis) if partial else None
    started = time.monotonic()
    answer_frame(apis, frame, node, "fuzz", outcomes.append)
    took = time.monotonic() - started
    if stranger and state_of(apis) != before:
        raise Finding("a principal without ACLs changed the broker's state")
    if partial and hidden_state_of(apis) != before:
        raise Finding("the fuzzer's principal changed what it has no ACL for")
    if took > SLOW_INPUT:
        raise Finding(f"one input took {took:.1f} s (over {SLOW_INPUT} s: work without bound)")
    # A Fetch that waits: past the longest wait an int32 of milliseconds asks. Otherwise a
    # little, so that what floods make (members, offsets) lives long enough to pile up.
    clock[0] += 2**31 / 1000 if not outcomes else 0.5
    apis.tick()
    if errors.records:
        raise Finding("the broker logged an error: " + errors.records[-1])
    if len(outcomes) != 1:
        raise Finding(f"{len(outcomes)} outcomes for one frame: {outcomes!r}")
    (outcome,) = outcomes
    if isinstance(outcome, Close):
        return "closed"
    header = request_header(frame)
    if outcome is None:
        if header is None or produce_acks(frame, header) != 0:
            raise Finding("no answer to a request that is not an acks=0 Produce")
        return "silent"
    if isinstance(outcome, tuple):  # a Fetch answer in pieces: they must make one frame
        outcome = b"".join(outcome)
    if not isinstance(outcome, bytes):
        raise Finding(f"an outcome of type {type(outcome).__name__}")
    (size,) = struct.unpack_from(">i", outcome)
    if size != len(outcome) - 4:
        raise Finding("an answer whose size prefix is wrong")
    version = header.api_version
    served = apis.versions().get(header.api_key)
    if header.api_key == fastkwire.ApiVersionsRequest.API_KEY and not (
        served[0] <= version <= served[1]
    ):
        version = 0  # an ApiVersions not served gets the v0 answer
    response_header, _ = fastkwire.decode_response(outcome, header.api_key, version)
    if response_header.correlation_id != header.correlation_id:
        raise Finding("an answer with another correlation id")
    bound = AMPLIFICATION * len(frame) + ANSWER_SLACK
    if header.api_key == fastkwire.FetchRequest.API_KEY:
        # the broker's fetch_max_bytes, one batch past it (KIP-74), each partition's header
        bound = apis.limits.fetch_max_bytes + FETCH_SLACK + 4 * len(frame)
    if len(outcome) > bound:
        raise Finding(f"an answer of {len(outcome)} bytes to a request of {len(frame)}")
    if stranger or partial:
        names = SECRETS if partial else (TOPIC, *SECRETS)
        for name in (n.encode() for n in names):
            if name in outcome[8:] and name not in frame:
                raise Finding(f"the answer names {name.decode()!r}, which its request does not")
    return "answered"


def check_caps(apis):
    """What a client can make the broker hold stays within its caps."""
    limits, cluster = apis.limits, apis.cluster
    if cluster.partitions > cluster.max_partitions:
        raise Finding(f"{cluster.partitions} partitions past max_partitions")
    held = {
        "max_acls": len(apis.acls),
        "max_transactional_ids": len(apis.transactions.transactions),
    }
    for name, count in held.items():
        if count > getattr(limits, name):
            raise Finding(f"{count} held past {name} ({getattr(limits, name)})")
    groups = apis.groups
    made = len(groups.classic.groups) + len(groups.consumer.groups)
    if made > GROUPS.max_groups:
        raise Finding(f"{made} groups past max_groups ({GROUPS.max_groups})")
    for group in groups.classic.groups.values():
        size = len(group.members) + len(group.pending_join)
        if size > GROUPS.group_max_size:
            raise Finding(f"classic group {group.group_id!r}: {size} members and pending")
    for group in groups.consumer.groups.values():
        if len(group.members) > GROUPS.group_consumer_max_size:
            raise Finding(f"consumer group {group.group_id!r}: {len(group.members)} members")
    timers = groups.timers
    if len(timers._heap) > 2 * len(timers) + 64 + 1:
        raise Finding(f"{len(timers._heap)} timers kept for {len(timers)} live ones")


def check_state(apis):
    check_caps(apis)
    cluster = apis.cluster
    for topic in cluster.topics.values():
        for p in topic.partitions:
            log = p.log
            if not log.log_start <= log.log_end:
                raise Finding(f"{topic.name}-{p.index}: log start past the log end")
            if log.log_start == log.log_end:
                continue
            if not log.log_start <= log.last_stable_offset <= log.log_end:
                raise Finding(f"{topic.name}-{p.index}: the last stable offset is outside the log")
            batches = records.read_batches(log.read(log.log_start, 1 << 40))
            bases = [b.base_offset for b in batches]
            if bases != sorted(set(bases)) or batches.tail:
                raise Finding(f"{topic.name}-{p.index}: batches out of order or cut")
            last = batches[-1]
            if last.base_offset + last.last_offset_delta + 1 != log.log_end:
                raise Finding(f"{topic.name}-{p.index}: the last batch does not end the log")


def run(
    loops, seed, stop_after=None, authorizer=False, stranger=False, log_dir=False, partial=False
):
    rng = random.Random(seed)
    errors = _Errors()
    logging.getLogger("fastkwire.broker").addHandler(errors)
    path = tempfile.mkdtemp(prefix="fk-hostile-requests-") if log_dir else None
    apis, clock = make_broker(authorizer, stranger, path, partial)
    pool = seeds(apis) + (partial_seeds() if partial else [])
    counts = {"answered": 0, "closed": 0, "silent": 0, "floods": 0}
    findings = 0
    burst = []
    started = time.monotonic()
    for i in range(loops):
        if not burst and rng.random() < 0.03:
            # floods come in bursts of one kind, as a hostile client sends them
            kind = rng.randrange(FLOOD_KINDS)
            burst = [flood(rng, kind, log_dir) for _ in range(rng.choice((1, 5, 60)))]
        if burst:
            frame = burst.pop()
            counts["floods"] += 1
        elif rng.random() < 0.9:
            frame = D.mutate(rng.choice(pool), rng, pool)
        else:
            frame = rng.choice(pool)
        try:
            counts[check_one(apis, clock, errors, frame, stranger=stranger, partial=partial)] += 1
            check_caps(apis)
            if i % 50 == 0:
                check_state(apis)
        except Finding as e:
            findings += 1
            errors.records.clear()
            print(f"finding at input {i}: {e}\n  input: {frame.hex()}", file=sys.stderr)
            if stop_after is not None and findings >= stop_after:
                break
    try:
        check_state(apis)
    except Finding as e:
        findings += 1
        print(f"finding at the end: {e}", file=sys.stderr)
    if path is not None:
        apis.storage.close()
        try:  # what the coordinators wrote loads back
            make_broker(log_dir=path)[0].storage.close()
        except Exception as e:  # noqa: BLE001 - the contract: no exception
            findings += 1
            print(f"finding at the restart: {type(e).__name__}: {e}", file=sys.stderr)
        shutil.rmtree(path, ignore_errors=True)
    logging.getLogger("fastkwire.broker").removeHandler(errors)
    took = time.monotonic() - started
    return counts, findings, took


def main(argv=None, run=run, loops=20000, doc=__doc__):
    """The command line of this fuzzer and of hostile_cluster's (its `run`, default --loop
    and docstring): the broker's log kept off the terminal (an error it logs is a finding)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--loop", type=int, default=loops, help="inputs to try")
    parser.add_argument("--seed", type=int, default=1)
    if run is globals()["run"]:  # this fuzzer's own run (hostile_cluster has none)
        parser.add_argument(
            "--authorizer", action="store_true", help="the broker enforces ACLs (see above)"
        )
        parser.add_argument(
            "--log-dir",
            action="store_true",
            help="the coordinators' state kept in a temporary log directory (see above)",
        )
        parser.add_argument(
            "--partial",
            action="store_true",
            help="ACLs that allow the fuzzer some things beside another's hidden ones (see above)",
        )
        parser.add_argument(
            "--stranger",
            action="store_true",
            help="ACLs that allow the fuzzer's principal nothing: it changes and learns nothing",
        )
    args = parser.parse_args(argv)
    logging.getLogger("fastkwire.broker").setLevel(logging.INFO)
    logging.getLogger("fastkwire.broker").propagate = False
    flags = ("authorizer", "stranger", "partial", "log_dir")
    extra = {k: True for k in flags if getattr(args, k, False)}
    counts, findings, took = run(args.loop, args.seed, **extra)
    floods = f" ({counts['floods']} floods)" if "floods" in counts else ""
    print(
        f"{args.loop} inputs in {took:.1f} s: {counts['answered']} answered, "
        f"{counts['closed']} connections closed, {counts['silent']} acks=0 produces{floods}; "
        f"{findings} finding(s)"
    )
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

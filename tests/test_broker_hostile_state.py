"""A hostile client against what the broker holds, not its connections: requests that decode
but would make the broker keep, read or do more than it may. Each is capped (Kafka's error
where Kafka has one, POLICY_VIOLATION where it has none), only the request past the cap is
refused, and what came before keeps being served. fuzz/hostile_requests.py's flood checks
the same as invariants."""

import socket
import struct
import sys
import time

import pytest

import fastkwire
from fastkwire import records
from fastkwire.broker import Apis, Cluster, Context, GroupConfig, GroupCoordinator, Limits
from fastkwire.broker._timers import Timers
from fastkwire.error_codes import by_name
from fastkwire.records import Record
from fastkwire.testing import Broker

TIMEOUT = 5.0


def code(name):
    return by_name(name).code


def make_apis(limits=None, groups=None):
    clock = [0.0]
    cluster = Cluster({0: ("127.0.0.1", 9092)})
    coordinator = GroupCoordinator(
        groups,
        clock=lambda: clock[0],
        topic_partitions=cluster.partition_count,
        topics=cluster.topic_summary,
    )
    apis = Apis(cluster, clock=lambda: clock[0], groups=coordinator, limits=limits)
    apis.fake_clock = clock
    return apis


def call(apis, request, version):
    out = []
    apis.handle(type(request).API_KEY, version, request, Context(0, "hostile"), out.append)
    assert len(out) == 1
    return out[0]


def test_a_fetch_naming_one_partition_many_times_gets_at_most_fetch_max_bytes():
    """Kafka's fetch.max.bytes (55 MiB) bounds an answer whatever max_bytes asks: a Fetch
    naming a 1 MB log 70 times with max_bytes 2**31-1 was answered with 70 MB."""
    apis = make_apis()
    apis.cluster.create_topic("t", 1)
    big = records.write_batch([Record(timestamp=1, key=None, value=b"x" * 1_000_000)])
    produced = call(apis, produced_request(big), 9)
    assert produced.responses[0].partition_responses[0].error_code == 0
    F = fastkwire.FetchRequest
    one = F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=2**31 - 1)
    request = F(
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=2**31 - 1,
        isolation_level=0,
        session_epoch=-1,
        topics=[F.FetchTopic(topic="t", partitions=[one] * 70)],
    )
    answer = call(apis, request, 11)
    sent = sum(len(p.records) for t in answer.responses for p in t.partitions)
    assert 0 < sent <= Limits().fetch_max_bytes
    assert Limits().fetch_max_bytes == 57_671_680  # Kafka's default
    # a partition named again is read once, as Kafka reads a request's partitions into a map
    assert [len(p.records) for t in answer.responses for p in t.partitions] == [len(big)]
    capped = make_apis(Limits(fetch_max_bytes=1024))
    capped.cluster.create_topic("t", 2)
    for index in (0, 1):
        produce = produced_request(big)
        produce.topic_data[0].partition_data[0].index = index
        call(capped, produce, 9)
    two = [
        F.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=2**31 - 1) for i in (0, 1)
    ]
    request.topics = [F.FetchTopic(topic="t", partitions=two)]
    answer = call(capped, request, 11)
    parts = answer.responses[0].partitions
    # the first batch whole (KIP-74), then nothing more past the broker's cap
    assert [len(p.records) for p in parts] == [len(big), 0]


def produced_request(data):
    P = fastkwire.ProduceRequest
    return P(
        acks=1,
        timeout_ms=100,
        topic_data=[
            P.TopicProduceData(
                name="t", partition_data=[P.PartitionProduceData(index=0, records=data)]
            )
        ],
    )


def acl(n):
    C = fastkwire.CreateAclsRequest
    return C.AclCreation(
        resource_type=2,
        resource_name=f"topic-{n}",
        resource_pattern_type=3,
        principal="User:x",
        host="*",
        operation=3,
        permission_type=3,
    )


def test_acls_past_max_acls_are_refused_and_those_kept_stay():
    apis = make_apis(Limits(max_acls=3))
    C = fastkwire.CreateAclsRequest
    answer = call(apis, C(creations=[acl(n) for n in (0, 1, 0, 2, 3, 4)]), 3)
    errors = [r.error_code for r in answer.results]
    # a duplicate is no new ACL; the fourth distinct one is past the cap
    assert errors == [0, 0, 0, 0, code("POLICY_VIOLATION"), code("POLICY_VIOLATION")]
    assert "max_acls" in answer.results[4].error_message
    assert len(apis.acls) == 3
    D = fastkwire.DeleteAclsRequest
    deleted = call(
        apis,
        D(
            filters=[
                D.DeleteAclsFilter(
                    resource_type_filter=1,
                    resource_name_filter="topic-1",
                    pattern_type_filter=1,
                    principal_filter=None,
                    host_filter=None,
                    operation=1,
                    permission_type=1,
                )
            ]
        ),
        3,
    )
    assert [m.resource_name for m in deleted.filter_results[0].matching_acls] == ["topic-1"]
    assert call(apis, C(creations=[acl(9)]), 3).results[0].error_code == 0  # room again
    assert [a.resource_name for a in apis.acls.acls] == ["topic-0", "topic-2", "topic-9"]


def init(apis, transactional_id, producer_id=-1, epoch=-1):
    request = fastkwire.InitProducerIdRequest(
        transactional_id=transactional_id,
        transaction_timeout_ms=60_000,
        producer_id=producer_id,
        producer_epoch=epoch,
    )
    return call(apis, request, 4)


def test_new_transactional_ids_past_the_cap_are_refused_known_ones_go_on():
    apis = make_apis(Limits(max_transactional_ids=2))
    first, second = init(apis, "a"), init(apis, "b")
    assert (first.error_code, second.error_code) == (0, 0)
    refused = init(apis, "c")
    assert (refused.error_code, refused.producer_id) == (code("POLICY_VIOLATION"), -1)
    again = init(apis, "a")  # a known id: a new epoch, as ever
    assert (again.error_code, again.producer_id, again.producer_epoch) == (
        0,
        first.producer_id,
        1,
    )
    assert sorted(apis.transactions.transactions) == ["a", "b"]


@pytest.mark.parametrize("timeout_ms", [0, -1, 900_001, 2**31 - 1])
def test_a_transaction_timeout_past_kafkas_maximum_is_refused(timeout_ms):
    """A transaction left open holds every read_committed consumer of its partitions back
    until it times out: Kafka refuses a timeout past transaction.max.timeout.ms (15 min)
    with INVALID_TRANSACTION_TIMEOUT; 2**31-1 ms (24 days) was accepted."""
    apis = make_apis()
    request = fastkwire.InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=timeout_ms
    )
    refused = call(apis, request, 4)
    assert refused.error_code == code("INVALID_TRANSACTION_TIMEOUT")
    assert "tx" not in apis.transactions.transactions
    request.transaction_timeout_ms = 900_000
    assert call(apis, request, 4).error_code == 0


def test_idempotent_producers_get_a_new_id_whatever_they_name():
    """InitProducerId without a transactional id kept an entry per producer id (to bump its
    epoch); Kafka's coordinator keeps nothing and hands out a new id at epoch 0."""
    apis = make_apis(Limits())
    ids = [init(apis, None) for _ in range(10)]
    assert len({r.producer_id for r in ids}) == 10
    assert {(r.error_code, r.producer_epoch) for r in ids} == {(0, 0)}
    for pid, epoch in ((ids[-1].producer_id, 0), (ids[0].producer_id, 7), (2**62, 32767)):
        again = init(apis, None, pid, epoch)
        assert (again.error_code, again.producer_epoch) == (0, 0)
        assert again.producer_id not in {r.producer_id for r in ids} | {pid}
        ids.append(again)
    # an id without an epoch, or an epoch without an id: refused, as Kafka refuses them
    for pid, epoch in ((ids[0].producer_id, -1), (-1, 0)):
        for transactional_id in (None, "tx"):
            refused = init(apis, transactional_id, pid, epoch)
            assert refused.error_code == code("INVALID_REQUEST")
            assert (refused.producer_id, refused.producer_epoch) == (-1, -1)
    assert "tx" not in apis.transactions.transactions


def join_new(apis, group="g"):
    J = fastkwire.JoinGroupRequest
    request = J(
        group_id=group,
        session_timeout_ms=30_000,
        rebalance_timeout_ms=30_000,
        member_id="",
        protocol_type="consumer",
        protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
    )
    return call(apis, request, 5)


def test_members_told_member_id_required_count_toward_group_max_size():
    """JoinGroup v4+ without a member id is told MEMBER_ID_REQUIRED and remembered until its
    session timeout: a client could make such pending members without end."""
    apis = make_apis(groups=GroupConfig(group_max_size=3))
    answers = [join_new(apis).error_code for _ in range(5)]
    required, full = code("MEMBER_ID_REQUIRED"), code("GROUP_MAX_SIZE_REACHED")
    assert answers == [required] * 3 + [full] * 2
    assert len(apis.groups.groups["g"].pending_join) == 3
    assert join_new(apis, group="other").error_code == required  # other groups go on
    apis.fake_clock[0] += 31  # the pending members' session timeout passes: room again
    apis.tick()
    assert join_new(apis).error_code == required


def test_group_sizes_are_bounded_by_default():
    """Kafka's group.max.size and group.consumer.max.size default to 2**31-1: here a client
    flooding a group with new members is refused past 1000."""
    apis = make_apis()
    answers = [join_new(apis).error_code for _ in range(1001)]
    assert answers.count(code("MEMBER_ID_REQUIRED")) == 1000
    assert answers[-1] == code("GROUP_MAX_SIZE_REACHED")
    assert GroupConfig().group_consumer_max_size == 1000


def calls_made(fn):
    """How many Python functions (generators and comprehensions included) `fn()` runs."""
    count = [0]

    def profile(frame, event, arg):
        if event == "call":
            count[0] += 1

    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(None)
    return count[0]


def test_the_work_of_a_tick_does_not_grow_with_the_timers_held():
    """Every request ends with a tick that looks for due timers; it looked at each timer
    (a pending member, a member's heartbeat...), so a client holding many made every other
    client's requests slower."""

    def work(n):
        timers = Timers(lambda: 0.0)
        for i in range(n):
            timers.schedule(("heartbeat", "g", i), 30_000 + i, lambda: None)
        return calls_made(timers.fire)

    few, many = work(10), work(10_000)
    assert many <= few + 5, (few, many)


def test_timers_fire_in_deadline_order_and_rescheduling_replaces():
    now = [0.0]
    timers = Timers(lambda: now[0])
    fired = []
    for key, delay in (("a", 300), ("b", 100), ("c", 200)):
        timers.schedule(key, delay, lambda key=key: fired.append(key))
    for _ in range(500):  # many reschedules: the replaced ones are dropped, not fired
        timers.schedule("b", 250, lambda: fired.append("b"))
    timers.cancel("c")
    assert timers.next_deadline() == 0.25 and len(timers) == 2
    now[0] = 1.0
    assert timers.fire() is None
    assert fired == ["b", "a"]


def test_a_timer_an_action_schedules_waits_for_the_next_fire():
    timers = Timers(lambda: 0.0)
    fired = []

    def again():
        fired.append(1)
        timers.schedule("x", 0, again)

    timers.schedule("x", 0, again)
    assert timers.fire() == 0.0
    assert fired == [1]


def test_append_to_a_list_config_keeps_each_value_once():
    apis = make_apis()
    apis.cluster.create_topic("t", 1)
    R = fastkwire.IncrementalAlterConfigsRequest
    name = "follower.replication.throttled.replicas"

    def change(operation, value):
        request = R(
            resources=[
                R.AlterConfigsResource(
                    resource_type=2,
                    resource_name="t",
                    configs=[R.AlterableConfig(name=name, config_operation=operation, value=value)],
                )
            ],
            validate_only=False,
        )
        assert call(apis, request, 1).responses[0].error_code == 0
        return apis.cluster.topics["t"].configs[name]

    assert change(2, "0:1,0:2,0:1") == "0:1,0:2"
    assert change(2, "0:2,0:3") == "0:1,0:2,0:3"
    assert change(3, "0:1,0:9") == "0:2,0:3"


def read_frame(s):
    head = b""
    while len(head) < 4:
        chunk = s.recv(4 - len(head))
        if not chunk:
            return None
        head += chunk
    (size,) = struct.unpack(">i", head)
    body = b""
    while len(body) < size:
        chunk = s.recv(size - len(body))
        if not chunk:
            return None
        body += chunk
    return body


def test_an_idle_connection_is_closed_after_connections_max_idle_ms():
    """Kafka closes a connection idle for connections.max.idle.ms; one that keeps talking
    stays."""
    with Broker(connections_max_idle_ms=400, groups=None) as broker:
        host, port = next(iter(broker.addresses.values()))
        idle = socket.create_connection((host, port), timeout=TIMEOUT)
        busy = socket.create_connection((host, port), timeout=TIMEOUT)
        request = fastkwire.encode_request(fastkwire.ApiVersionsRequest(), 0, 1, "t")
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            busy.sendall(request)
            assert read_frame(busy) is not None
            time.sleep(0.1)
        idle.settimeout(TIMEOUT)
        try:
            assert idle.recv(1) == b""  # closed by the broker
        except ConnectionResetError:
            pass
        busy.sendall(request)
        assert read_frame(busy) is not None
        idle.close()
        busy.close()


@pytest.mark.parametrize(
    "field, value",
    [
        ("fetch_max_bytes", 1023),
        ("max_acls", 0),
        ("max_transactional_ids", -1),
        ("max_acls", "9"),
        ("transaction_max_timeout_ms", 0),
    ],
)
def test_limits_name_a_bad_value(field, value):
    with pytest.raises(ValueError, match=field):
        Limits(**{field: value})


def encoded_size(response, api_key, version):
    return len(fastkwire.encode_response(response, version, 1))


def test_a_request_naming_one_thing_many_times_is_answered_about_it_once():
    """A few bytes repeated made answers thousands of times their size: Metadata naming a
    topic of 2000 partitions 500 times was answered with 26 MB, an OffsetFetch naming one
    group 50 times with its offsets 50 times. Kafka reads such names into sets."""
    apis = make_apis()
    apis.cluster.create_topic("t", 2000)
    M = fastkwire.MetadataRequest
    meta = call(apis, M(topics=[M.MetadataRequestTopic(name="t")] * 500), 9)
    assert [t.name for t in meta.topics] == ["t"]
    assert encoded_size(meta, M.API_KEY, 9) < 100_000
    DC = fastkwire.DescribeConfigsRequest
    resource = DC.DescribeConfigsResource(
        resource_type=2, resource_name="t", configuration_keys=None
    )
    configs = call(apis, DC(resources=[resource] * 500, include_synonyms=True), 4)
    assert [r.resource_name for r in configs.results] == ["t"]
    OC = fastkwire.OffsetCommitRequest
    commit = OC(
        group_id="h",
        generation_id_or_member_epoch=-1,
        member_id="",
        group_instance_id=None,
        topics=[
            OC.OffsetCommitRequestTopic(
                name="t",
                partitions=[
                    OC.OffsetCommitRequestPartition(
                        partition_index=i,
                        committed_offset=i,
                        committed_leader_epoch=-1,
                        committed_metadata="m" * 100,
                    )
                    for i in range(3)
                ],
            )
        ],
    )
    assert call(apis, commit, 8).topics[0].partitions[0].error_code == 0
    OF = fastkwire.OffsetFetchRequest
    group = OF.OffsetFetchRequestGroup(group_id="h", topics=None)
    fetched = call(apis, OF(groups=[group] * 50, require_stable=False), 8)
    assert [g.group_id for g in fetched.groups] == ["h"]
    again = OF.OffsetFetchRequestTopics(name="t", partition_indexes=[2, 1, 2, 2])
    asked = OF.OffsetFetchRequestGroup(group_id="h", topics=[again, again])
    fetched = call(apis, OF(groups=[asked], require_stable=False), 8)
    ((topic,),) = [g.topics for g in fetched.groups]
    assert [(p.partition_index, p.committed_offset) for p in topic.partitions] == [(2, 2), (1, 1)]
    DG = fastkwire.DescribeGroupsRequest
    described = call(apis, DG(groups=["h", "x", "h"] * 100), 5)
    assert [g.group_id for g in described.groups] == ["h", "x"]
    DT = fastkwire.DescribeTopicPartitionsRequest
    apis.cluster.create_topic("u", 3000)
    pages = call(
        apis, DT(topics=[DT.TopicRequest(name="u")] * 9, response_partition_limit=2**31 - 1), 0
    )
    # Kafka's max.request.partition.size.limit: 2000 partitions a page, then the cursor
    assert [len(t.partitions) for t in pages.topics] == [2000]
    assert (pages.next_cursor.topic_name, pages.next_cursor.partition_index) == ("u", 2000)


def test_data_wakes_only_the_fetches_waiting_on_its_partition():
    """Each Produce read every waiting Fetch again, whatever it waited on: twenty Fetches of
    10,000 partitions each, parked with max_wait 2**31-1, made each Produce to another
    topic take about a second, for every client."""
    apis = make_apis()
    apis.cluster.create_topic("big", 50)
    apis.cluster.create_topic("t", 1)
    F = fastkwire.FetchRequest

    def waiting_fetch(topic, partitions, isolation=0):
        request = F(
            max_wait_ms=2**31 - 1,
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=isolation,
            session_epoch=-1,
            topics=[
                F.FetchTopic(
                    topic=topic,
                    partitions=[
                        F.FetchPartition(partition=i, fetch_offset=0, partition_max_bytes=1 << 20)
                        for i in partitions
                    ],
                )
            ],
        )
        out = []
        apis.handle(F.API_KEY, 11, request, Context(0, "c", connection=object()), out.append)
        assert out == []  # parked
        return out

    many = [waiting_fetch("big", range(50)) for _ in range(5)]
    reads = []
    answer = apis._fetch_answer
    apis._fetch_answer = lambda *a, **k: reads.append(1) or answer(*a, **k)
    data = records.write_batch([Record(timestamp=1, key=None, value=b"v")])
    call(apis, produced_request(data), 9)  # to "t": nobody waits on it
    assert reads == [] and all(out == [] for out in many)
    P = fastkwire.ProduceRequest
    to_big = P(
        acks=1,
        timeout_ms=100,
        topic_data=[
            P.TopicProduceData(
                name="big", partition_data=[P.PartitionProduceData(index=7, records=data)]
            )
        ],
    )
    call(apis, to_big, 9)
    assert len(reads) == 5 and all(len(out) == 1 for out in many)
    answered = [p for t in many[0][0].responses for p in t.partitions if p.records]
    assert [p.partition_index for p in answered] == [7]
    # a deleted topic answers the Fetches waiting on it at once, with its error
    gone = waiting_fetch("big", [1])
    D = fastkwire.DeleteTopicsRequest
    call(apis, D(topic_names=["big"], timeout_ms=100), 4)
    assert gone[0].responses[0].partitions[0].error_code == code("UNKNOWN_TOPIC_OR_PARTITION")


def test_a_regex_subscription_is_matched_once_per_topic_list():
    """Each heartbeat of each KIP-848 member matched every subscribed regex against every
    topic (half a second a heartbeat with 20,000 topics, for every member of every group);
    the matches are kept until a topic comes or goes."""
    pytest.importorskip("re2")  # the broker extra's (no wheel for every interpreter yet)
    import fastkwire.broker._consumer_groups as consumer_groups

    apis = make_apis()
    for i in range(2000):
        apis.cluster.create_topic(f"t{i}", 1)
    summary = apis.cluster.topic_summary()
    matched = []
    pattern = consumer_groups._pattern

    class Counting:
        def __init__(self, regex):
            self.inner = pattern(regex)

        def fullmatch(self, name):
            matched.append(name)
            return self.inner.fullmatch(name)

    H = fastkwire.ConsumerGroupHeartbeatRequest

    def heartbeat(epoch, member_id="m"):
        request = H(
            group_id="g",
            member_id=member_id,
            member_epoch=epoch,
            rebalance_timeout_ms=1000,
            subscribed_topic_regex="t1.*" if epoch == 0 else None,
            server_assignor=None,
            topic_partitions=[] if epoch == 0 else None,
        )
        answer = call(apis, request, 1)
        assert answer.error_code == 0, answer.error_message
        return answer

    consumer_groups._pattern = Counting
    try:
        joined = heartbeat(0)
        first = len(matched)
        assert first == 2000  # every topic once, at the join
        for _ in range(10):
            heartbeat(joined.member_epoch)
        assert len(matched) == first  # nothing matched again
        assert apis.cluster.topic_summary() is summary
        apis.cluster.create_topic("t1-new", 1)  # a topic comes: matched again, and assigned
        assert apis.cluster.topic_summary() is not summary
        heartbeat(joined.member_epoch)
        assert len(matched) == first + 2001
        group = apis.groups.consumer.groups["g"]
        assert "t1-new" in group.metadata and "t2" not in group.metadata
    finally:
        consumer_groups._pattern = pattern


def test_new_groups_past_max_groups_are_refused_those_made_go_on():
    """Each JoinGroup, ConsumerGroupHeartbeat or simple OffsetCommit naming a new group id
    made a group (a simple group's offsets are kept 7 days): Kafka has no limit on their
    number; here max_groups, POLICY_VIOLATION past it."""
    apis = make_apis(groups=GroupConfig(max_groups=2))
    required, refused = code("MEMBER_ID_REQUIRED"), code("POLICY_VIOLATION")
    assert [join_new(apis, g).error_code for g in ("a", "b", "c")] == [required] * 2 + [refused]
    OC = fastkwire.OffsetCommitRequest
    apis.cluster.create_topic("t", 1)

    def commit(group):
        request = OC(
            group_id=group,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                OC.OffsetCommitRequestTopic(
                    name="t",
                    partitions=[
                        OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=5)
                    ],
                )
            ],
        )
        return call(apis, request, 8).topics[0].partitions[0].error_code

    assert commit("simple") == refused
    H = fastkwire.ConsumerGroupHeartbeatRequest
    heartbeat = H(
        group_id="modern",
        member_id="m",
        member_epoch=0,
        rebalance_timeout_ms=1000,
        subscribed_topic_names=["t"],
        server_assignor=None,
        topic_partitions=[],
    )
    answer = call(apis, heartbeat, 0)
    assert answer.error_code == refused and "max_groups" in answer.error_message
    assert join_new(apis, "a").error_code == required  # a group made goes on
    assert sorted(apis.groups.groups) == ["a", "b"] and not apis.groups.consumer.groups
    assert GroupConfig().max_groups == 100_000


def test_a_broker_takes_its_limits():
    with pytest.raises(TypeError, match="limits"):
        Broker(limits={"max_acls": 1})
    with Broker(limits=Limits(max_acls=1), groups=None) as broker:
        host, port = next(iter(broker.addresses.values()))
        with socket.create_connection((host, port), timeout=TIMEOUT) as s:
            C = fastkwire.CreateAclsRequest
            s.sendall(fastkwire.encode_request(C(creations=[acl(1), acl(2)]), 3, 5, "t"))
            frame = read_frame(s)
            _, answer = fastkwire.decode_response(
                struct.pack(">i", len(frame)) + frame, C.API_KEY, 3
            )
            errors = [r.error_code for r in answer.results]
            assert errors == [0, code("POLICY_VIOLATION")]


def test_the_uniform_assignor_does_not_look_at_every_member_for_every_partition():
    """Each KIP-848 join reassigns the group: the uniform assignor looked at every member for
    every partition (0.8 s for 200 members and 20,000 partitions, about 100 s for the 1000
    members and 100,000 partitions the defaults allow, at every join)."""
    from fastkwire.broker._assignors import uniform

    # topic ids as ints: a UUID's hash is Python code, which calls_made would count
    topics = {i + 1: (f"t{i:03d}", 20) for i in range(100)}  # 2000 partitions
    subscriptions = {f"m{i:03d}": set(topics) for i in range(100)}
    target = {}
    work = calls_made(lambda: target.update(uniform(subscriptions, topics, {})))
    assert work < 5 * 2000, work  # it was over 100 members x 2000 partitions
    counts = sorted(sum(len(p) for p in t.values()) for t in target.values())
    assert counts[0] == counts[-1] == 20
    subscriptions["m999"] = set(topics)  # one joins: the others keep most of theirs
    after = uniform(subscriptions, topics, target)
    counts = sorted(sum(len(p) for p in t.values()) for t in after.values())
    assert counts[-1] - counts[0] <= 1 and sum(counts) == 2000
    kept = sum(
        len(after[m].get(tid, set()) & parts) for m, t in target.items() for tid, parts in t.items()
    )
    assert kept >= 2000 - 20


def test_a_timer_whose_work_fails_leaves_the_other_timers_running(caplog):
    """A step of the broker's timers that raised (a write to a log directory that fails, a
    defect) ended the one loop that runs them all: idle and frame timeouts, Fetch waits,
    retention and expiry stopped with it. It is logged and tried again; the others go on."""
    with Broker(connections_max_idle_ms=400) as broker:
        failed = []

        def fail():
            failed.append(1)
            raise OSError(28, "No space left on device")

        def arm():
            broker.broker.apis.groups.timers.schedule("failing", 0, fail)
            broker.broker.apis.expiry.tick = fail
            broker.broker._wake.set()

        with caplog.at_level("ERROR", logger="fastkwire.broker"):
            started = time.monotonic()
            broker.call(arm)
            host, port = next(iter(broker.addresses.values()))
            idle = socket.create_connection((host, port), timeout=TIMEOUT)
            busy = socket.create_connection((host, port), timeout=TIMEOUT)
            request = fastkwire.encode_request(fastkwire.ApiVersionsRequest(), 0, 1, "t")
            for _ in range(30):  # many wake-ups of the timers' loop
                busy.sendall(request)
                assert read_frame(busy) is not None
                time.sleep(0.05)
            idle.settimeout(TIMEOUT)
            try:
                assert idle.recv(1) == b""  # the idle timeout still closes it
            except ConnectionResetError:
                pass
            idle.close()
            busy.close()
            elapsed = time.monotonic() - started
        assert len(failed) >= 2  # the timer's work, and expiry tried again
        assert "No space left on device" in caplog.text
        # a lasting failure is said about once a second, not at every wake-up
        said = [r for r in caplog.records if "expiry failed" in r.getMessage()]
        assert 1 <= len(said) <= elapsed + 2
        # the group timers still run: a timer scheduled after the failure fires
        fired = []
        broker.call(
            lambda: broker.broker.apis.groups.timers.schedule("next", 0, lambda: fired.append(1))
        )
        deadline = time.monotonic() + 5
        while not fired and time.monotonic() < deadline:
            broker.call(broker.broker._wake.set)
            time.sleep(0.05)
        assert fired

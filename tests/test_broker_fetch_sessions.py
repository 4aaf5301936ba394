"""Incremental fetch sessions (KIP-227) of fastkwire.broker: the session cache driven
without a socket (epochs, session errors, forgotten partitions, unchanged partitions left
out, the bounded cache and its eviction), the Fetch handler's answers through it, and
kafka-python 3 (which opens sessions) consuming through them from a real broker."""

import random
import uuid

import pytest

import fastkwire
from fastkwire import records
from fastkwire.broker import Apis, Cluster, Context
from fastkwire.broker._fetch_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    FetchSessionCache,
    next_epoch,
)
from fastkwire.error_codes import by_name
from fastkwire.records import Record

F = fastkwire.FetchRequest


def code(name):
    return by_name(name).code


def request(parts, session_id=0, epoch=INITIAL_EPOCH, forgotten=(), by_id=False, **kw):
    """A Fetch of {topic: [(partition, offset)]}; `forgotten` is [(topic, partition)]."""
    topics = {}
    for topic, items in parts.items():
        topics[topic] = F.FetchTopic(
            topic="" if by_id else topic,
            topic_id=topic if by_id else uuid.UUID(int=0),
            partitions=[
                F.FetchPartition(partition=p, fetch_offset=o, partition_max_bytes=1 << 20)
                for p, o in items
            ],
        )
    gone = {}
    for topic, p in forgotten:
        gone.setdefault(topic, []).append(p)
    return F(
        replica_id=-1,
        max_wait_ms=kw.get("max_wait_ms", 0),
        min_bytes=kw.get("min_bytes", 0),
        max_bytes=50 << 20,
        session_id=session_id,
        session_epoch=epoch,
        topics=list(topics.values()),
        forgotten_topics_data=[
            F.ForgottenTopic(
                topic="" if by_id else t,
                topic_id=t if by_id else uuid.UUID(int=0),
                partitions=ps,
            )
            for t, ps in gone.items()
        ],
    )


def answers(context, hw=5, log_start=0, data=b"", errors=()):
    """The reads a handler would make of the context's partitions: the same high
    watermark and log start for each; `errors` are partitions answered with an error."""
    return [
        (p, "NOT_LEADER_OR_FOLLOWER" if p.partition in errors else None, hw, log_start, data)
        for p in context.partitions
    ]


def open_session(cache, parts, now=0, version=12, closing=0):
    context = cache.new_context(request(parts, closing), version, now)
    assert context.kind == "full"
    error, session_id, sent = context.respond(answers(context), now)
    assert error is None and session_id != 0 and len(sent) == len(context.partitions)
    return session_id


# ---------------------------------------------------------------- epochs and kinds


def test_next_epoch_wraps_to_one_and_final_stays_final():
    assert next_epoch(INITIAL_EPOCH) == 1
    assert next_epoch(41) == 42
    assert next_epoch(0x7FFFFFFF) == 1
    assert next_epoch(FINAL_EPOCH) == FINAL_EPOCH


@pytest.mark.parametrize("version", [4, 6])
def test_fetch_before_v7_is_sessionless(version):
    cache = FetchSessionCache()
    context = cache.new_context(request({"t": [(0, 0)]}), version, 0)
    assert context.kind == "sessionless"
    assert context.respond(answers(context), 0)[1] == 0 and len(cache) == 0


def test_final_epoch_is_sessionless_and_closes_the_session_named():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0)]})
    context = cache.new_context(request({"t": [(0, 0)]}, sid, FINAL_EPOCH), 12, 1)
    assert context.kind == "sessionless" and cache.get(sid) is None
    assert context.respond(answers(context), 1)[1] == 0 and len(cache) == 0


def test_a_full_fetch_opens_a_session_at_epoch_one_and_a_new_full_fetch_replaces_it():
    cache = FetchSessionCache(rng=random.Random(7))
    sid = open_session(cache, {"t": [(0, 0), (1, 0)]})
    assert cache.get(sid).epoch == 1 and cache.total_partitions == 2
    again = open_session(cache, {"t": [(0, 3)]}, now=1, closing=sid)
    assert again != sid and cache.get(sid) is None and len(cache) == 1


def test_incremental_fetch_needs_a_known_session_at_its_epoch():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0)]})
    unknown = cache.new_context(request({}, sid + 1, 1), 12, 1)
    assert unknown.respond([], 1) == ("FETCH_SESSION_ID_NOT_FOUND", 0, [])
    stale = cache.new_context(request({}, sid, 2), 12, 1)  # the session expects 1
    assert stale.respond([], 1) == ("INVALID_FETCH_SESSION_EPOCH", 0, [])
    ok = cache.new_context(request({}, sid, 1), 12, 1)
    assert ok.kind == "incremental" and cache.get(sid).epoch == 2
    # The same request again (a retry at the old epoch) is refused: the epoch moved on.
    assert cache.new_context(request({}, sid, 1), 12, 1).error == "INVALID_FETCH_SESSION_EPOCH"


def test_a_session_keeps_to_topic_names_or_ids_as_it_began():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0)]}, version=12)
    by_id = cache.new_context(request({}, sid, 1, by_id=True), 13, 1)
    assert by_id.error == "FETCH_SESSION_TOPIC_ID_ERROR"
    tid = uuid.uuid4()
    sid2 = open_session(cache, {tid: [(0, 0)]}, version=13)
    assert cache.new_context(request({}, sid2, 1), 12, 1).error == "FETCH_SESSION_TOPIC_ID_ERROR"
    # The epoch is checked first, as Kafka does.
    assert cache.new_context(request({}, sid2, 5), 12, 1).error == "INVALID_FETCH_SESSION_EPOCH"


# ---------------------------------------------------------------- what is read and sent


def test_incremental_answers_leave_out_unchanged_partitions():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0), (1, 0), (2, 0)]})
    context = cache.new_context(request({}, sid, 1), 12, 1)
    # Every partition of the session is read, though the request named none.
    assert [p.partition for p in context.partitions] == [0, 1, 2]
    reads = answers(context)
    reads[1] = reads[1][:4] + (b"records",)  # new data on 1
    reads[2] = reads[2][:2] + (6,) + reads[2][3:]  # the high watermark of 2 moved
    error, got_sid, sent = context.respond(reads, 1)
    assert (error, got_sid) == (None, sid)
    assert [a[0].partition for a in sent] == [1, 2]
    # Nothing changed since: an empty answer.
    context = cache.new_context(request({}, sid, 2), 12, 2)
    reads = [(p, None, 6 if p.partition == 2 else 5, 0, b"") for p in context.partitions]
    assert context.respond(reads, 2) == (None, sid, [])
    # The log start moving is sent too.
    context = cache.new_context(request({}, sid, 3), 12, 3)
    reads = [
        (p, None, 6 if p.partition == 2 else 5, 2 * (p.partition == 0), b"")
        for p in context.partitions
    ]
    assert [a[0].partition for a in context.respond(reads, 3)[2]] == [0]


def test_partitions_sent_go_last_so_none_starves():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0), (1, 0), (2, 0)]})
    context = cache.new_context(request({}, sid, 1), 12, 1)
    reads = [(p, None, 5, 0, b"x" if p.partition == 0 else b"") for p in context.partitions]
    context.respond(reads, 1)
    assert [p.partition for p in cache.get(sid).partitions.values()] == [1, 2, 0]


def test_an_error_is_always_sent_and_the_partition_again_once_it_is_gone():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0), (1, 0)]})
    context = cache.new_context(request({}, sid, 1), 12, 1)
    sent = context.respond(answers(context, errors={1}), 1)[2]
    assert [(a[0].partition, a[1]) for a in sent] == [(1, "NOT_LEADER_OR_FOLLOWER")]
    context = cache.new_context(request({}, sid, 2), 12, 2)
    sent = context.respond(answers(context, errors={1}), 2)[2]
    assert [a[0].partition for a in sent] == [1]  # still in error: sent again
    context = cache.new_context(request({}, sid, 3), 12, 3)
    sent = context.respond(answers(context), 3)[2]
    assert [(a[0].partition, a[1]) for a in sent] == [(1, None)]  # healed: sent once more


def test_incremental_requests_add_change_and_forget_partitions():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0), (1, 0)]})
    context = cache.new_context(
        request({"t": [(1, 7)], "u": [(0, 3)]}, sid, 1, forgotten=[("t", 0)]), 12, 1
    )
    parts = {(p.topic, p.partition): p.fetch_offset for p in context.partitions}
    assert parts == {("t", 1): 7, ("u", 0): 3}
    # A partition new to the session is sent in its first answer, changed or not.
    sent = context.respond(answers(context), 1)[2]
    assert [(a[0].topic, a[0].partition) for a in sent] == [("u", 0)]
    assert cache.total_partitions == 2


def test_forgetting_every_partition_closes_the_session():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0)]})
    context = cache.new_context(request({}, sid, 1, forgotten=[("t", 0)]), 12, 1)
    assert context.kind == "sessionless" and cache.get(sid) is None
    assert context.respond([], 1) == (None, 0, [])


def test_a_session_changed_while_a_fetch_waited_refuses_the_older_answer():
    cache = FetchSessionCache()
    sid = open_session(cache, {"t": [(0, 0)]})
    waiting = cache.new_context(request({}, sid, 1), 12, 1)
    newer = cache.new_context(request({}, sid, 2), 12, 2)
    assert waiting.respond(answers(waiting), 3)[:2] == ("INVALID_FETCH_SESSION_EPOCH", sid)
    assert newer.respond(answers(newer), 3)[0] is None


# ---------------------------------------------------------------- the bounded cache


def test_a_full_cache_answers_sessionless_until_a_session_is_stale():
    cache = FetchSessionCache(max_entries=2, eviction_ms=1000)
    first = open_session(cache, {"t": [(0, 0)]}, now=0)
    second = open_session(cache, {"t": [(0, 0)]}, now=10)
    context = cache.new_context(request({"t": [(0, 0)]}), 12, 500)
    assert context.respond(answers(context), 500)[1] == 0  # no room: sessionless
    assert len(cache) == 2 and cache.evictions == 0
    # Past eviction_ms unused, the least recently used one gives way.
    third = open_session(cache, {"t": [(0, 0)]}, now=1001)
    assert cache.get(first) is None and cache.get(second) and cache.get(third)
    assert cache.evictions == 1


def test_a_bigger_session_evicts_a_smaller_one_old_enough():
    cache = FetchSessionCache(max_entries=1, eviction_ms=1000)
    small = open_session(cache, {"t": [(0, 0)]}, now=0)
    cache.new_context(request({}, small, 1), 12, 900)  # used lately: not stale
    big = {"t": [(0, 0), (1, 0)]}
    # Too young to be evicted by a consumer's session (created under eviction_ms ago).
    context = cache.new_context(request(big), 12, 950)
    assert context.respond(answers(context), 950)[1] == 0
    cache.new_context(request({}, small, 2), 12, 1500)  # touched once it is old
    # A session of the same size is not worth more: the old one stays.
    context = cache.new_context(request({"t": [(5, 0)]}), 12, 1600)
    assert context.respond(answers(context), 1600)[1] == 0 and cache.get(small)
    sid = open_session(cache, big, now=1700)
    assert cache.get(small) is None and cache.get(sid).epoch == 1


def test_a_followers_session_evicts_a_consumers():
    cache = FetchSessionCache(max_entries=1, eviction_ms=1000)
    consumer = open_session(cache, {"t": [(0, 0), (1, 0)]}, now=0)
    follower = request({"t": [(0, 0)]})
    follower.replica_id = 2
    context = cache.new_context(follower, 12, 10)
    sid = context.respond(answers(context), 10)[1]
    assert sid != 0 and cache.get(consumer) is None and cache.get(sid).privileged


def test_cache_slots_of_zero_make_every_fetch_sessionless():
    cache = FetchSessionCache(max_entries=0)
    context = cache.new_context(request({"t": [(0, 0)]}), 12, 0)
    assert context.respond(answers(context), 0)[1] == 0 and len(cache) == 0


def test_the_partitions_cached_are_bounded():
    cache = FetchSessionCache(max_cached_partitions=3)
    sid = open_session(cache, {"t": [(0, 0), (1, 0)]})
    context = cache.new_context(request({"t": [(0, 0), (1, 0)]}), 12, 0)
    assert context.respond(answers(context), 0)[1] == 0  # 2 more would make 4
    context = cache.new_context(request({"u": [(0, 0)]}, sid, 1), 12, 1)
    assert context.kind == "incremental" and cache.total_partitions == 3
    # Growing past the bound closes the session: the client starts over in full.
    context = cache.new_context(request({"v": [(0, 0)]}, sid, 2), 12, 2)
    assert context.error == "FETCH_SESSION_ID_NOT_FOUND"
    assert len(cache) == 0 and cache.total_partitions == 0


# ---------------------------------------------------------------- through the handler


def batch(*values):
    return records.write_batch([Record(timestamp=1, key=None, value=v) for v in values])


def roundtrip(response, version):
    frame = fastkwire.encode_response(response, version, 7)
    return fastkwire.decode_response(frame, type(response).API_KEY, version)[1]


def handle(apis, req, version=12, out=None):
    out = [] if out is None else out
    apis.handle(req.API_KEY, version, req, Context(0), out.append)
    return [roundtrip(r, version) for r in out]


@pytest.fixture
def apis():
    clock = [0.0]
    a = Apis(Cluster({0: ("127.0.0.1", 9092)}), clock=lambda: clock[0], wall_clock=lambda: 1.0)
    a.fake_clock = clock
    a.cluster.create_topic("t", num_partitions=3)
    return a


def produce(apis, partition, data):
    P = fastkwire.ProduceRequest
    req = P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="t", partition_data=[P.PartitionProduceData(index=partition, records=data)]
            )
        ],
    )
    assert handle(apis, req, 9)[0].responses[0].partition_responses[0].error_code == 0


def test_the_handler_answers_incrementally(apis):
    produce(apis, 1, batch(b"a", b"b"))
    (full,) = handle(apis, request({"t": [(0, 0), (1, 0), (2, 0)]}))
    assert full.error_code == 0 and full.session_id != 0
    assert [p.partition_index for t in full.responses for p in t.partitions] == [0, 1, 2]
    sid = full.session_id
    # The client moves its position on 1 (it read 2 records): only that is sent.
    (inc,) = handle(apis, request({"t": [(1, 2)]}, sid, 1))
    assert (inc.error_code, inc.session_id, inc.responses) == (0, sid, [])
    produce(apis, 2, batch(b"c"))
    (inc,) = handle(apis, request({}, sid, 2))
    assert [(t.topic, [p.partition_index for p in t.partitions]) for t in inc.responses] == [
        ("t", [2])
    ]
    assert [
        r.value for r in records.read_batches(inc.responses[0].partitions[0].records)[0].records
    ] == [b"c"]
    (bad,) = handle(apis, request({}, sid, 2))  # a replay of epoch 2
    assert bad.error_code == code("INVALID_FETCH_SESSION_EPOCH") and bad.responses == []


def test_a_waiting_incremental_fetch_is_answered_when_data_arrives(apis):
    (full,) = handle(apis, request({"t": [(0, 0), (1, 0)]}))
    out = []
    handle(apis, request({}, full.session_id, 1, max_wait_ms=500, min_bytes=1), out=out)
    assert out == [] and apis.tick() == 0.5  # waits: nothing new in the session
    produce(apis, 1, batch(b"z"))
    assert len(out) == 1
    answer = roundtrip(out[0], 12)
    assert answer.session_id == full.session_id
    assert [p.partition_index for t in answer.responses for p in t.partitions] == [1]


def test_sessions_are_kept_per_node():
    cluster = Cluster({0: ("127.0.0.1", 9092), 1: ("127.0.0.1", 9093)})
    apis = Apis(cluster)
    cluster.create_topic("t", num_partitions=2)
    out = []
    apis.handle(1, 12, request({"t": [(0, 0)]}), Context(0), out.append)
    sid = out[0].session_id
    apis.handle(1, 12, request({}, sid, 1), Context(1), out.append)
    assert out[1].error_code == code("FETCH_SESSION_ID_NOT_FOUND")


# ---------------------------------------------------------------- a real client


def spy_on_fetches(apis):
    """[(request session id, epoch, partitions named, answer session id)] of each Fetch
    the broker answers from now on."""
    low, high, handler = apis.served[fastkwire.FetchRequest.API_KEY]
    seen = []

    def spy(request, version, ctx, reply):
        named = sum(len(t.partitions) for t in request.topics)

        def replied(response):
            seen.append((request.session_id, request.session_epoch, named, response.session_id))
            reply(response)

        response = handler(request, version, ctx, replied)
        if response is not None:
            replied(response)

    apis.served[fastkwire.FetchRequest.API_KEY] = (low, high, spy)
    return seen


def consume_with_kafka_python(**broker_options):
    """kafka-python 3 consumes 3 partitions of 20 records; (what it got by partition, what
    was sent, the Fetches seen)."""
    kafka = pytest.importorskip("kafka")
    from fastkwire.testing import Broker

    with Broker(**broker_options) as broker:
        seen = broker.call(lambda: spy_on_fetches(broker.broker.apis))
        broker.create_topic("s", partitions=3)
        producer = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap_servers)
        sent = {p: [b"%d-%d" % (p, i) for i in range(20)] for p in range(3)}
        for p, vs in sent.items():
            for v in vs:
                producer.send("s", v, partition=p)
        producer.flush(20)
        producer.close(20)
        consumer = kafka.KafkaConsumer(
            bootstrap_servers=broker.bootstrap_servers,
            auto_offset_reset="earliest",
            consumer_timeout_ms=1500,
            max_partition_fetch_bytes=200,  # several fetches per partition
            fetch_max_wait_ms=50,
        )
        try:
            consumer.assign([kafka.TopicPartition("s", p) for p in range(3)])
            got = {}
            for m in consumer:
                got.setdefault(m.partition, []).append(m.value)
        finally:
            consumer.close()
        seen = list(seen)
    return got, sent, seen


def test_kafka_python_consumes_through_incremental_sessions():
    got, sent, seen = consume_with_kafka_python()
    assert got == sent  # consumption is unchanged
    opened = [s for s in seen if s[1] == INITIAL_EPOCH and s[3] != 0]
    incremental = [s for s in seen if s[0] != 0 and s[1] > 0]
    assert opened and incremental
    assert all(s[3] == s[0] for s in incremental)  # answered in the same session
    # Incremental requests name only what changed (fewer than the 3 partitions).
    assert any(s[2] < 3 for s in incremental)


def test_kafka_python_consumes_without_sessions_when_the_cache_has_no_slots():
    got, sent, seen = consume_with_kafka_python(fetch_session_cache_slots=0)
    assert got == sent
    assert seen and all(s[3] == 0 for s in seen)  # every answer sessionless
    assert not [s for s in seen if s[0] != 0]  # so the client never asks for one


def test_a_negative_cache_size_is_refused_by_name():
    from fastkwire.broker import Broker

    with pytest.raises(ValueError, match="fetch_session_cache_slots"):
        Broker(fetch_session_cache_slots=-1)
    with pytest.raises(ValueError, match="max_entries"):
        FetchSessionCache(max_entries=-1)

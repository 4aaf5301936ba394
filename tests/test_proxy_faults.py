"""Fault rules: a client sees each injected fault (the delay, measured; the disconnect, before
or after the broker got the request; the error code, in the broker's place), and the proxy
keeps serving its other connections meanwhile."""

import threading
import time
import uuid
from types import SimpleNamespace

import pytest

from fastkwire import (
    CreateTopicsRequest,
    FindCoordinatorRequest,
    HeartbeatRequest,
    MetadataRequest,
    ProduceRequest,
    decode_response,
    encode_request,
)
from fastkwire.connection import Connection
from fastkwire.connection_errors import KafkaClientError
from fastkwire.proxy import BackgroundProxy, Faults, Rule, RuleError, load_rules, read_rules_file
from fastkwire.proxy._faults import error_answer
from fastkwire.proxy._frames import RequestHeader

from broker import tansu_broker  # noqa: F401

HEARTBEAT, METADATA, FIND_COORDINATOR = 12, 3, 10
REBALANCE_IN_PROGRESS, NOT_COORDINATOR = 27, 16
DELAY_MS = 400


def connect(proxy, client_id="fault-test"):
    host, port = proxy.address
    return Connection(host, port, client_id=client_id, request_timeout_ms=10000)


def topic_names(conn, *names):
    answer = conn.request(
        MetadataRequest(
            topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names],
            allow_auto_topic_creation=False,
        )
    )
    return {t.name for t in answer.topics if t.error_code == 0}


@pytest.mark.broker
def test_error_answers_in_the_brokers_place(tansu_broker):
    rules = [
        Rule(api="Heartbeat", error="REBALANCE_IN_PROGRESS"),
        Rule(api="FindCoordinator", error="NOT_COORDINATOR", times=1),
    ]
    with BackgroundProxy(tansu_broker.bootstrap, rules=rules, rewrite_advertised=True) as proxy:
        with connect(proxy) as conn:
            beat = conn.request(HeartbeatRequest(group_id="g", generation_id=1, member_id="m"))
            assert beat.error_code == REBALANCE_IN_PROGRESS
            ask = FindCoordinatorRequest(coordinator_keys=["g"])
            first, second = conn.request(ask), conn.request(ask)
        assert [c.error_code for c in first.coordinators] == [NOT_COORDINATOR]
        assert [c.error_code for c in second.coordinators] == [0]  # times=1: the broker's answer
        assert second.coordinators[0].port == proxy.port
        exchanges = proxy.exchanges()
    local = [e for e in exchanges if e.local]
    assert [(e.api_key, e.error_codes()) for e in local] == [
        (HEARTBEAT, ["REBALANCE_IN_PROGRESS"]),
        (FIND_COORDINATOR, ["NOT_COORDINATOR"]),
    ]
    assert all(e.fault for e in local)
    assert rules[1].matched == 2 and rules[1].fired == 1


@pytest.mark.broker
def test_kafka_python_sees_not_coordinator(tansu_broker):
    from kafka import KafkaAdminClient
    from kafka.errors import NotCoordinatorError

    rule = Rule(api="FindCoordinator", error="NOT_COORDINATOR", times=1)
    with BackgroundProxy(tansu_broker.bootstrap, rules=[rule], rewrite_advertised=True) as proxy:
        admin = KafkaAdminClient(bootstrap_servers=proxy.bootstrap, request_timeout_ms=10000)
        try:
            with pytest.raises(NotCoordinatorError):
                admin.describe_groups(["fault-group"])
            try:
                admin.describe_groups(["fault-group"])
            except ValueError:
                pass  # kafka-python 3.0 cannot read Tansu's authorized operations; the answer came
        finally:
            admin.close()
        answers = [e for e in proxy.exchanges() if e.api_key == FIND_COORDINATOR]
    assert [e.local for e in answers] == [True, False], answers
    assert answers[0].error_codes() == ["NOT_COORDINATOR"] and answers[1].error_codes() == []


@pytest.mark.broker
def test_delay_holds_one_connection_only(tansu_broker):
    rule = Rule(api="Metadata", client_id="slow-*", delay_ms=DELAY_MS)
    with BackgroundProxy(tansu_broker.bootstrap, rules=[rule]) as proxy:
        slow, fast = connect(proxy, "slow-1"), connect(proxy, "fast-1")
        took = {}

        def timed(name, conn):
            started = time.monotonic()
            conn.request(MetadataRequest(topics=[]))
            took[name] = time.monotonic() - started

        worker = threading.Thread(target=timed, args=("slow", slow))
        worker.start()
        time.sleep(0.05)  # the slow request is being held now
        timed("fast", fast)
        fast_done_while_held = worker.is_alive()
        worker.join(10)
        slow.close()
        fast.close()
    assert took["slow"] >= DELAY_MS / 1000
    assert took["fast"] < DELAY_MS / 1000 / 2 and fast_done_while_held
    held = [e for e in proxy.exchanges() if e.fault]
    assert [e.client_id for e in held] == ["slow-1"] and held[0].latency_ms >= DELAY_MS


@pytest.mark.broker
def test_disconnect_before_and_after_the_request(tansu_broker):
    rules = [
        Rule(api="CreateTopics", client_id="before", disconnect="before"),
        Rule(api="CreateTopics", client_id="after", disconnect="after"),
    ]
    create = CreateTopicsRequest(
        timeout_ms=5000,
        topics=[
            CreateTopicsRequest.CreatableTopic(name="", num_partitions=1, replication_factor=1)
        ],
    )
    with BackgroundProxy(tansu_broker.bootstrap, rules=rules) as proxy:
        with connect(proxy, "observer") as observer:
            for when in ("before", "after"):
                create.topics[0].name = f"fault-{when}"
                with connect(proxy, when) as conn:
                    with pytest.raises(KafkaClientError):
                        conn.request(create)
                # The observer's connection lives on; the broker got only the "after" request.
                deadline = time.monotonic() + 5
                while (
                    when == "after"
                    and not topic_names(observer, "fault-after")
                    and time.monotonic() < deadline
                ):
                    time.sleep(0.1)
            assert topic_names(observer, "fault-before", "fault-after") == {"fault-after"}
        events = proxy.events()
    failed = [e.text for e in events if e.kind == "error"]
    assert any("disconnected before forwarding CreateTopics" in t for t in failed), failed
    assert any("disconnected after forwarding CreateTopics" in t for t in failed), failed


def header(api_key=HEARTBEAT, version=4, client_id="c"):
    return RequestHeader(api_key, version, 1, client_id, None)


def test_times_and_probability():
    faults = Faults([Rule(api="Heartbeat", error=27, times=3)])
    assert [faults.pick(header()) is not None for _ in range(5)] == [True] * 3 + [False] * 2
    # The same seed gives the same choices.
    a = Faults([Rule(api=12, delay_ms=1, probability=0.5)], seed=7)
    b = Faults([Rule(api=12, delay_ms=1, probability=0.5)], seed=7)
    runs = [[f.pick(header()) is not None for _ in range(200)] for f in (a, b)]
    assert runs[0] == runs[1] and 60 < sum(runs[0]) < 140
    never = Faults([Rule(api=12, delay_ms=1, probability=0)])
    assert not any(never.pick(header()) for _ in range(50))


def test_matching_by_version_and_client_id():
    rule = Rule(api="Heartbeat", version="3+", client_id="app-*", delay_ms=5)
    assert rule.matches(header(version=4, client_id="app-1"))
    assert not rule.matches(header(version=2, client_id="app-1"))
    assert not rule.matches(header(version=4, client_id="other"))
    assert not rule.matches(header(api_key=METADATA, version=4, client_id="app-1"))
    assert Rule(version="0-2", delay_ms=1).matches(header(api_key=METADATA, version=2))


@pytest.mark.parametrize(
    "spec, key",
    [
        ("api=Heartbeat", "exactly one action"),
        ("api=Heartbeat,delay_ms=5,error=27", "exactly one action"),
        ("api=Nope,delay_ms=5", "api"),
        ("api=Heartbeat,error=NOPE", "error"),
        ("api=Heartbeat,error=0", "error"),
        (
            "api=ListOffsets,error=NOT_LEADER_OR_FOLLOWER",
            "rule key 'error': ListOffsetsResponse has no top-level error_code",
        ),
        ("error=27", "rule key 'error': an error answer needs the api"),
        ("api=Fetch,delay_ms=-1", "delay_ms"),
        ("api=Fetch,delay_ms=5,probability=2", "probability"),
        ("api=Fetch,delay_ms=5,times=1.5", "times"),
        ("api=Fetch,disconnect=during", "disconnect"),
        ("api=Fetch,delay_ms=5,version=x", "version"),
        ("api=Fetch,delay_ms=5,colour=red", "'colour': not a rule key"),
        ("Fetch,delay_ms=5", "key=value"),
    ],
)
def test_bad_rules_name_the_key(spec, key):
    with pytest.raises(RuleError, match=key):
        Rule.parse(spec)


@pytest.mark.parametrize(
    "spec, message",
    [
        ("api=Fetc,delay_ms=1", "rule key 'api': unknown API 'Fetc' (did you mean 'Fetch'?)"),
        ("api=Fetch,disconect=before", "'disconect': not a rule key (did you mean 'disconnect'?)"),
        (
            "api=Fetch,disconnect=befor",
            "rule key 'disconnect': 'befor' is not 'before' or 'after' (did you mean 'before'?)",
        ),
        (
            "api=Heartbeat,error=not_coordinatr",
            "rule key 'error': unknown error name 'not_coordinatr' (did you mean 'NOT_COORDINATOR'?)",
        ),
        (
            "api=Fetch,disconnect=sideways",
            "rule key 'disconnect': 'sideways' is not 'before' or 'after'",
        ),
    ],
)
def test_a_near_miss_in_a_rule_says_what_was_meant(spec, message):
    with pytest.raises(RuleError) as err:
        Rule.parse(spec)
    assert str(err.value).startswith(message)


def test_the_command_line_says_error_once_for_a_bad_error_rule():
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-m", "fastkwire", "proxy", "--listen", "127.0.0.1:0", "--upstream"]
        + ["127.0.0.1:9", "--fault", "api=Heartbeat,error=NOPE"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == (
        "fastkwire proxy: error: argument --fault: rule key 'error': unknown error name 'NOPE'"
    )


def test_rules_file(tmp_path):
    path = tmp_path / "rules.json"
    path.write_text(
        '{"rules": [{"api": "FindCoordinator", "error": "NOT_COORDINATOR", "times": 3},'
        ' {"api": "Heartbeat", "error": "REBALANCE_IN_PROGRESS", "probability": 0.1},'
        ' {"api": "Fetch", "delay_ms": 200, "client_id": "consumer-1"},'
        ' {"api": "Produce", "disconnect": "before", "name": "cut producers"}]}'
    )
    rules = load_rules(path)
    assert read_rules_file(path)[1] is None
    assert [r.action for r in rules] == ["error", "error", "delay", "disconnect"]
    assert (
        rules[0].error_code == NOT_COORDINATOR
        and rules[0].times == 3
        and rules[3].name == "cut producers"
    )
    path.write_text('[{"api": "Fetch", "delay_ms": 1}, {"api": "Fetch"}]')
    with pytest.raises(RuleError, match="rule 2: a rule needs exactly one action"):
        load_rules(path)
    path.write_text('{"rules": [{"api": "Fetch", "delay_ms": 1}], "seed": 7}')
    assert read_rules_file(path)[1] == 7
    path.write_text('{"rules": [], "seed": "x"}')
    with pytest.raises(RuleError, match="seed"):
        load_rules(path)
    path.write_text('{"rules": [], "extra": 1}')
    with pytest.raises(RuleError, match="extra"):
        load_rules(path)
    path.write_text("{nope")
    with pytest.raises(RuleError, match="not JSON"):
        load_rules(path)


@pytest.mark.parametrize("version", [3, 9, 13])
def test_a_produce_error_answers_every_partition(version):
    topic_id = uuid.UUID(int=7) if version >= 13 else uuid.UUID(int=0)
    P = ProduceRequest
    request = P(
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            P.TopicProduceData(
                name="" if version >= 13 else "t",
                topic_id=topic_id,
                partition_data=[P.PartitionProduceData(index=i, records=None) for i in (0, 2)],
            )
        ],
    )
    exchange = SimpleNamespace(
        api_key=0,
        api_version=version,
        correlation_id=5,
        request=encode_request(request, version, 5),
    )
    header, response = decode_response(error_answer(exchange, 6), 0, version)
    assert header.correlation_id == 5
    (topic,) = response.responses
    assert (topic.name, topic.topic_id) == (("", topic_id) if version >= 13 else ("t", topic_id))
    assert [(p.index, p.error_code, p.base_offset) for p in topic.partition_responses] == [
        (0, 6, -1),
        (2, 6, -1),
    ]
    request.acks = 0  # no answer to carry it: the proxy forwards such a request instead
    exchange.request = encode_request(request, version, 5)
    with pytest.raises(ValueError, match="acks=0"):
        error_answer(exchange, 6)

"""fastkwire.proxy with real clients: confluent-kafka, kafka-python and aiokafka produce and
consume with every compression codec they have through the proxy to Tansu.

The chain is client -> fastkwire proxy (rewriting the advertised address, recording every
exchange) -> the tests' recording proxy -> Tansu, which advertises its own port: a client
that left the proxy after Metadata would bypass both, so seeing Produce and Fetch here
shows that the rewrite keeps clients on it. The recording proxy sees what the broker sent
and got, so the comparison proves byte-for-byte forwarding: every request, and every
response but the rewritten ones (whose originals the exchange keeps).
"""

import io
import json

import pytest

from fastkwire import decode_response
from fastkwire.cli import main
from fastkwire.proxy import BackgroundProxy, Summary, exchange_dict, exchange_line
from fastkwire.proxy import CaptureWriter, read_capture

from broker import running_tansu
from recording_proxy import RecordingProxy
from test_real_traffic_records import CLIENTS, SCRIPTS, available, create_topics, topic_of

pytestmark = pytest.mark.broker

PRODUCE, FETCH, METADATA, FIND_COORDINATOR = 0, 1, 3, 10


@pytest.fixture(scope="module")
def through_proxy(tmp_path_factory):
    """{client: codecs}, the proxy's exchanges, the recording proxy's, the capture's path."""
    # librdkafka's requests are part of what is checked (its 4-byte topics count, below).
    pytest.importorskip("confluent_kafka", reason="confluent-kafka is not installed")
    capture = tmp_path_factory.mktemp("proxy") / "capture.jsonl"
    recorder = RecordingProxy()
    brokers = running_tansu()
    try:
        broker = next(brokers)
        recorder.upstream_port = broker.port
        with (
            CaptureWriter(capture) as writer,
            BackgroundProxy(
                f"127.0.0.1:{recorder.port}", rewrite_advertised=True, on_exchange=writer.write
            ) as proxy,
        ):
            ran = {c: CLIENTS[c][1]() for c in SCRIPTS if available(c)}
            create_topics(
                proxy.bootstrap,
                [topic_of(c, codec) for c, codecs in ran.items() for codec in codecs],
            )
            for client, codecs in ran.items():
                SCRIPTS[client](proxy.bootstrap, codecs)
            # librdkafka's all-topics Metadata request: flexible, with a 4-byte topics count.
            from confluent_kafka.admin import AdminClient

            assert (
                AdminClient({"bootstrap.servers": proxy.bootstrap}).list_topics(timeout=15).topics
            )
            address = proxy.address
        # Taken once the proxy has stopped: an exchange still under way when the clients
        # were done (a request the recording proxy saw) is in the list then, unanswered.
        exchanges, events = proxy.exchanges(), proxy.events()
    finally:
        recorder.close()
        brokers.close()
    assert not recorder.errors, recorder.errors
    assert not proxy.proxy.callback_errors, proxy.proxy.callback_errors
    return ran, exchanges, events, recorder.snapshot(), capture, address


def address_holders(msg):
    if hasattr(msg, "brokers"):
        return list(msg.brokers)
    return list(msg.coordinators) if msg.coordinators else [msg]


def advertised(msg):
    return [(h.host, h.port) for h in address_holders(msg)]


def test_clients_stay_on_the_proxy(through_proxy):
    ran, exchanges, events, _, _, address = through_proxy
    assert "kafka-python" in ran and "confluent-kafka" in ran
    keys = {e.api_key for e in exchanges}
    assert {PRODUCE, FETCH, METADATA} <= keys, keys
    rewritten = [e for e in exchanges if e.upstream_response is not None]
    assert rewritten and {e.api_key for e in rewritten} <= {METADATA, FIND_COORDINATOR}
    assert METADATA in {e.api_key for e in rewritten}
    for e in rewritten:
        _, msg = decode_response(e.response, e.api_key, e.api_version)
        assert advertised(msg) and all(a == tuple(address) for a in advertised(msg))
        _, original = decode_response(e.upstream_response, e.api_key, e.api_version)
        assert all(a != tuple(address) for a in advertised(original))
        # Only the addresses changed.
        for holder in address_holders(original):
            holder.host, holder.port = address
        assert original == msg
    assert not [ev for ev in events if ev.kind == "error"], events


def test_every_frame_is_forwarded_byte_for_byte(through_proxy):
    _, exchanges, _, seen_by_broker, _, _ = through_proxy

    # The broker side's connections are the proxy's connections, one for one; compare each
    # connection's requests in order, and each response with what the broker sent.
    def by_connection(items, key):
        out = {}
        for e in items:
            out.setdefault(key(e), []).append(e)
        return out

    ours = by_connection(exchanges, lambda e: e.conn)
    theirs = list(by_connection(seen_by_broker, lambda e: e.connection).values())
    assert len(ours) == len(theirs)
    for conn, mine in ours.items():
        # The broker-side connection with the same requests in the same order, and the
        # same answers (an answer in flight when the client hung up never reached it).
        match = next(
            (
                t
                for t in theirs
                if [e.request for e in t] == [e.request for e in mine]
                and all(sent(e) in (None, b.response) for e, b in zip(mine, t))
            ),
            None,
        )
        assert match is not None, [exchange_line(e) for e in mine]
        theirs.remove(match)


def sent(e):
    """The broker's answer as the proxy got it."""
    return e.upstream_response if e.upstream_response is not None else e.response


def test_responses_are_paired_by_correlation_id(through_proxy):
    _, exchanges, _, _, _, _ = through_proxy
    unanswered = [e for e in exchanges if e.response is None and e.expects_response]
    answered = [e for e in exchanges if e.response is not None]
    assert len(answered) > 50
    for e in answered:
        assert int.from_bytes(e.response[4:8], "big", signed=True) == e.correlation_id
        assert e.latency_ms is not None and e.latency_ms >= 0
    # Only requests in flight when their client hung up go unanswered: nothing after them on
    # their connection was answered.
    last_answer = {}
    for i, e in enumerate(exchanges):
        if e.response is not None:
            last_answer[e.conn] = i
    assert all(
        i > last_answer.get(e.conn, -1) for i, e in enumerate(exchanges) if e in unanswered
    ), [exchange_line(e) for e in unanswered]
    line = exchange_line(answered[0])
    assert answered[0].api in line and f"#{answered[0].correlation_id}" in line
    d = exchange_dict(answered[0])
    assert json.loads(json.dumps(d)) == d and d["api"] == answered[0].api


def test_the_capture_has_every_exchange(through_proxy):
    _, exchanges, _, _, capture, _ = through_proxy
    back = list(read_capture(capture))
    assert [
        (e.conn, e.correlation_id, e.request, e.response, e.upstream_response) for e in back
    ] == [(e.conn, e.correlation_id, e.request, e.response, e.upstream_response) for e in exchanges]
    live, read = Summary(), Summary()
    for e in exchanges:
        live.add_exchange(e)
    for e in back:
        read.add_exchange(e)
    strip = [{k: v for k, v in a.items() if not k.endswith("_ms")} for a in live.to_dict()["apis"]]
    assert strip == [
        {k: v for k, v in a.items() if not k.endswith("_ms")} for a in read.to_dict()["apis"]
    ]


def test_explain_capture_reads_all_of_it(through_proxy, capsys):
    _, exchanges, _, _, capture, _ = through_proxy
    code = main(["explain", "--capture", str(capture)])
    out, err = capsys.readouterr()
    assert out.count("=== ") == len(exchanges)
    assert f"{len(exchanges)} exchanges" in err
    answered = sum(e.response is not None for e in exchanges)
    assert out.count("--- request") == len(exchanges) and out.count("--- response") == answered
    # Every frame decodes: the librdkafka Metadata requests with a 4-byte topics count show
    # their 3 trailing bytes (explain_frame's trailing="keep").
    failures = [line for line in out.splitlines() if line.startswith("!!")]
    assert not failures and code == 0, failures
    assert "+-- trailing 3 bytes = " in out
    stats = io.StringIO()
    assert main(["stats", str(capture)]) == 0
    out, _ = capsys.readouterr()
    stats.write(out)
    assert "Produce" in out and "Fetch" in out and f"{len(exchanges)} exchanges" in out

"""fastkwire.kafka_python, protocol layer: kafka-python's ApiMessage encode and decode on
fastkwire's engine give what stock kafka-python gives.

For every kafka-python message class and version (the newest of each by default, every
version with --run-slow): generated messages, written by fastkwire, decode to equal
objects stock and accelerated (==, repr, to_dict, the classes, tags, unknown tags, the
collector's view), re-encode to the same bytes, and seeded mutations and truncations
give equal results or the same exception type. Then the input forms kafka-python's
encoder takes (tuples, bare values, None, str for bytes, unset attributes).
"""

import gc
import os
import random
import re

import pytest

kafka = pytest.importorskip("kafka")
if not hasattr(kafka, "__version__") or not kafka.__version__.startswith("3."):
    pytest.skip("needs kafka-python 3", allow_module_level=True)

from hypothesis import HealthCheck, given, settings  # noqa: E402

import fastkwire  # noqa: E402
import fastkwire.kafka_python as fkp  # noqa: E402
import scope  # noqa: E402
from peers import KP_CLASSES  # noqa: E402
from strategies import message_dicts  # noqa: E402

PURE = os.environ.get("FASTKWIRE_PURE", "") not in ("", "0") or fastkwire.implementation != "cython"
pytestmark = pytest.mark.skipif(
    PURE or kafka.__version__ not in fkp.SUPPORTED,
    reason="the accelerator declines here (pure fastkwire or untested kafka-python)",
)

MESSAGES = {
    name: cls
    for name, cls in KP_CLASSES.items()
    if hasattr(cls, "API_KEY") and hasattr(fastkwire, name)
}


def _versions():
    pairs = []
    for name, cls in sorted(MESSAGES.items()):
        ours = getattr(fastkwire, name)
        shared = range(
            max(cls.min_version, ours.MIN_VERSION), min(cls.max_version, ours.MAX_VERSION) + 1
        )
        pairs += [(name, v) for v in scope.versions(name, shared)] if len(shared) else []
    return pairs


@pytest.fixture
def installed():
    assert fkp.install()
    yield
    fkp.uninstall()


def coverage():
    from fastkwire.kafka_python import _protocol

    return _protocol.coverage(MESSAGES.values())


def test_almost_every_version_runs_on_the_engine():
    cov = coverage()
    stock = {k: why for k, why in cov.items() if why is not None}
    assert len(cov) > 500
    assert len(stock) <= 0.02 * len(cov), stock
    assert all(why for why in stock.values())  # each names its reason


def test_a_covered_version_decodes_on_the_engine_not_through_kafka_pythons_codegen(installed):
    from kafka.protocol.metadata import MetadataResponse
    from fastkwire import _engine

    body = fastkwire.MetadataResponse(
        topics=[fastkwire.MetadataResponse.MetadataResponseTopic(name="t", partitions=[])]
    ).encode(12)
    decoder = MetadataResponse._struct.compiled_decode_from(12, True, True, MetadataResponse)
    assert type(decoder) is _engine.TargetDecoder
    MetadataResponse._struct._compiled_encoders.pop(
        ("decode", 12, True, True, MetadataResponse), None
    )
    got = MetadataResponse.decode(body, version=12)
    assert got.topics[0].name == "t" and type(got) is MetadataResponse
    # kafka-python's own generator never ran for it
    assert (
        "decode",
        12,
        True,
        True,
        MetadataResponse,
    ) not in MetadataResponse._struct._compiled_encoders


def outcome(fn):
    try:
        return "ok", fn()
    except Exception as exc:  # the type is what must agree
        return "raised", type(exc)


def stock_then_accelerated(fn):
    """(fn() with kafka-python stock, fn() with the accelerator installed); the
    accelerator is left uninstalled."""
    fkp.uninstall()
    stock = fn()
    assert fkp.install()
    try:
        return stock, fn()
    finally:
        fkp.uninstall()


def view(o, seen=None):
    """Everything a user can observe of a decoded kafka-python object, as plain data."""
    if isinstance(o, list):
        return ("list", gc.is_tracked(o), [view(x) for x in o])
    if hasattr(o, "_struct"):
        slots = {}
        for name in ("_version", "tags", "unknown_tags", *o._struct.fields):
            try:
                slots[name] = view(object.__getattribute__(o, name))
            except AttributeError:
                slots[name] = "<unset>"
        return (type(o), gc.is_tracked(o), slots)
    return (type(o), o)


def decode_both(cls, version, body):
    fkp.uninstall()
    stock = outcome(lambda: cls.decode(body, version=version))
    assert fkp.install()
    fast = outcome(lambda: cls.decode(body, version=version))
    return stock, fast


def encode(o, version):
    o._header = None  # decode leaves it unset; encode reads it
    return o.encode(version=version)


def check_both(cls, version, body):
    stock, fast = decode_both(cls, version, body)
    assert stock[0] == fast[0], (stock, fast, body.hex())
    if stock[0] == "raised":
        assert stock[1] is fast[1], body.hex()
        return
    s, f = stock[1], fast[1]
    assert view(s) == view(f), body.hex()
    assert s == f and repr(s) == repr(f) and s.to_dict() == f.to_dict()
    fkp.uninstall()
    stock_bytes = outcome(lambda: encode(s, version))
    assert fkp.install()
    fast_bytes = outcome(lambda: encode(f, version))
    assert stock_bytes == fast_bytes, body.hex()


@pytest.mark.parametrize("name,version", _versions())
def test_generated_messages_decode_and_encode_as_stock(name, version, installed):
    cls, ours = MESSAGES[name], getattr(fastkwire, name)

    @settings(
        max_examples=12,
        database=None,
        deadline=None,
        derandomize=True,
        suppress_health_check=list(HealthCheck),
    )
    @given(message_dicts(name, version))
    def run(d):
        body = ours.from_dict(d).encode(version)
        check_both(cls, version, body)
        rnd = random.Random(body)
        for _ in range(4):
            mutated = bytearray(body)
            if mutated:
                mutated[rnd.randrange(len(mutated))] ^= 1 << rnd.randrange(8)
            check_both(cls, version, bytes(mutated))
            check_both(cls, version, body[: rnd.randrange(len(body) + 1)])
        check_both(cls, version, body + b"\x00\x01")  # kafka-python ignores trailing bytes

    run()


def test_unknown_and_known_tags_land_where_kafka_python_puts_them(installed):
    FetchResponse = MESSAGES["FetchResponse"]
    # ResponseHeader-less FetchResponse v12 body: throttle, error, session, one topic
    # with one partition carrying an unknown tag 7 and the known tag 0 (diverging epoch)
    ours = fastkwire.FetchResponse
    P = ours.PartitionData
    msg = ours(
        responses=[
            ours.FetchableTopicResponse(
                topic="t",
                partitions=[
                    P(
                        partition_index=0,
                        records=b"",
                        diverging_epoch=ours.EpochEndOffset(epoch=3, end_offset=9),
                    )
                ],
            )
        ]
    )
    msg.responses[0].partitions[0]._unknown = {7: b"\x01\x02"}
    body = msg.encode(12)
    check_both(FetchResponse, 12, body)
    got = FetchResponse.decode(body, version=12)
    part = got.responses[0].partitions[0]
    assert part.tags == {"diverging_epoch"} and part.unknown_tags == {"_7": b"\x01\x02"}
    assert part.diverging_epoch.epoch == 3


def forms():
    MetadataRequest, MetadataResponse = MESSAGES["MetadataRequest"], MESSAGES["MetadataResponse"]
    LeaveGroupRequest, JoinGroupRequest = (
        MESSAGES["LeaveGroupRequest"],
        MESSAGES["JoinGroupRequest"],
    )
    Topic = MetadataRequest.MetadataRequestTopic
    yield (
        MetadataRequest,
        12,
        lambda: MetadataRequest(
            topics=[Topic(name="a"), Topic(name="b")], allow_auto_topic_creation=False
        ),
    )
    yield MetadataRequest, 12, lambda: MetadataRequest(topics=["a", "b"])  # bare values
    yield MetadataRequest, 12, lambda: MetadataRequest(topics=[("a",), ("b",)])  # tuples
    yield MetadataRequest, 12, lambda: MetadataRequest(topics=None)  # all topics
    yield MetadataRequest, 4, lambda: MetadataRequest(topics=[])
    yield MetadataRequest, 12, lambda: MetadataRequest(topics=[Topic(name=None)])
    yield MetadataRequest, 12, lambda: MetadataRequest()  # unset fields
    yield (
        MetadataResponse,
        12,
        lambda: MetadataResponse(
            topics=[MetadataResponse.MetadataResponseTopic(name="t", authorized_operations={1, 3})],
            authorized_operations=None,
        ),
    )
    yield (
        MetadataResponse,
        12,
        lambda: MetadataResponse(
            topics=[MetadataResponse.MetadataResponseTopic(name="t", authorized_operations={32})]
        ),
    )
    Member = LeaveGroupRequest.MemberIdentity
    yield (
        LeaveGroupRequest,
        5,
        lambda: LeaveGroupRequest(
            group_id="g", members=[Member(member_id="", group_instance_id="i-1", reason="r")]
        ),
    )
    yield LeaveGroupRequest, 5, lambda: LeaveGroupRequest(group_id="g", members=[("", "i-1", "r")])
    yield LeaveGroupRequest, 5, lambda: LeaveGroupRequest(group_id=7, members=[])  # str() of it
    yield (
        LeaveGroupRequest,
        5,
        lambda: LeaveGroupRequest(
            group_id="g",
            members=[Member(member_id="m", group_instance_id=None, reason=None), ("x", None, None)],
        ),
    )
    yield (
        LeaveGroupRequest,
        5,
        lambda: LeaveGroupRequest(group_id="g", members=[{"member_id": "m"}]),
    )
    yield (
        LeaveGroupRequest,
        5,
        lambda: LeaveGroupRequest(
            group_id="g", members=[Member(member_id="é" * 40000, group_instance_id=None)]
        ),
    )
    Protocol = JoinGroupRequest.JoinGroupRequestProtocol
    yield (
        JoinGroupRequest,
        9,
        lambda: JoinGroupRequest(
            group_id="g",
            session_timeout_ms=10,
            rebalance_timeout_ms=10,
            member_id="",
            group_instance_id=None,
            protocol_type="consumer",
            reason=None,
            protocols=[Protocol(name="range", metadata="text, not bytes")],
        ),
    )
    yield (
        JoinGroupRequest,
        9,
        lambda: JoinGroupRequest(group_id="g", session_timeout_ms=2**31, protocols=[]),
    )  # out of range
    yield (
        JoinGroupRequest,
        9,
        lambda: JoinGroupRequest(group_id="g", session_timeout_ms=1.5, protocols=[]),
    )


@pytest.mark.parametrize("index", range(len(list(forms()))))
def test_every_input_form_encodes_as_stock(index):
    cls, version, make = list(forms())[index]

    def run():
        msg = make()
        return msg.encode(version=version), msg.encode(version=version, header=False, framed=True)

    stock, fast = stock_then_accelerated(lambda: outcome(run))
    assert stock == fast


def test_hostile_counts_fail_as_stock_does(installed):
    from kafka.protocol.metadata import MetadataResponse

    for body in (
        b"\x00\x00\x00\x00" + b"\xff\xff\xff\x7f" * 3,
        b"\x00" * 3,
        b"\x00\x00\x00\x00\x7f\xff\xff\xff" + b"\x00" * 20,
    ):
        stock, fast = decode_both(MetadataResponse, 5, body)
        assert stock == fast and stock[0] == "raised"


# ---- KafkaProtocol's receive path ------------------------------------------------------


def exchange(chunks_of, requests, frames, caplog):
    """Send `requests` through a fresh KafkaProtocol, feed it `frames` (the responses)
    cut by chunks_of(data) -> [chunk]; the responses (or the exception type), the parser's
    state after, and what it logged."""
    from kafka.protocol.parser import KafkaProtocol

    parser = KafkaProtocol(client_id="t")
    for request in requests():
        parser.send_request(request)
    caplog.clear()
    got = []
    try:
        for chunk in chunks_of(b"".join(frames)):
            got += parser.receive_bytes(chunk)
        result = ("ok", [(cid, view(r), repr(r)) for cid, r in got])
    except Exception as exc:
        result = ("raised", type(exc), str(exc))
    state = (
        parser._receiving,
        parser._rbuffer is None,
        bytes(parser._header),
        parser._header.tell(),
        len(parser.in_flight_requests),
    )
    # (a memoryview chunk logs its address, which differs from run to run)
    logged = [
        (r.name, r.levelname, re.sub(r"0x[0-9a-f]+", "0x?", r.getMessage())) for r in caplog.records
    ]
    return result, state, logged


def cuttings(seed):
    yield lambda data: [data]
    yield lambda data: [data[i : i + 1] for i in range(len(data))]
    yield lambda data: [data[:3], data[3:]]

    def random_cuts(data):
        rnd = random.Random(seed)  # the same cuts for the stock and the accelerated run
        cuts = sorted(rnd.sample(range(1, len(data)), min(6, len(data) - 1)))
        return [data[a:b] for a, b in zip([0] + cuts, cuts + [len(data)])]

    yield random_cuts
    yield lambda data: [bytearray(data)]
    yield lambda data: [memoryview(data)]


def test_receive_bytes_gives_stock_responses_state_and_logs_for_any_cutting(caplog):
    import logging

    caplog.set_level(logging.DEBUG, logger="kafka")
    MetadataRequest, ApiVersionsRequest = (
        MESSAGES["MetadataRequest"],
        MESSAGES["ApiVersionsRequest"],
    )
    M = fastkwire.MetadataResponse
    metadata = M(
        brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=9092)],
        topics=[
            M.MetadataResponseTopic(
                name=f"t{i}",
                partitions=[
                    M.MetadataResponsePartition(partition_index=p, replica_nodes=[1], isr_nodes=[1])
                    for p in range(3)
                ],
            )
            for i in range(3)
        ],
    )
    versions = fastkwire.ApiVersionsResponse(
        api_keys=[
            fastkwire.ApiVersionsResponse.ApiVersion(api_key=3, min_version=0, max_version=12)
        ]
    )

    def requests():
        return [
            MetadataRequest[12](topics=None),
            ApiVersionsRequest[3](),
            MetadataRequest[12](topics=[]),
        ]

    good = [
        fastkwire.encode_response(metadata, 12, 1),
        fastkwire.encode_response(versions, 3, 2),
        fastkwire.encode_response(metadata, 12, 3),
    ]
    wrong_id = [good[0], fastkwire.encode_response(versions, 3, 9)]
    garbage = [good[0], struct_frame(b"\x00\x00\x00\x02" + b"\xff" * 7)]
    empty = [struct_frame(b"")]
    for frames in (good, wrong_id, garbage, empty, good[:1] + [good[1][:7]]):
        for i, cut in enumerate(cuttings(len(frames))):
            stock, fast = stock_then_accelerated(lambda: exchange(cut, requests, frames, caplog))
            assert stock == fast, (i, frames)


def struct_frame(payload):
    return len(payload).to_bytes(4, "big") + payload


def test_receive_bytes_gives_file_readers_and_replaced_processing_their_stock_path(caplog):
    # kafka.protocol.old's classes read a file-like buffer; a mocked or subclassed
    # _process_response must be the one called, as stock calls it.
    from kafka.protocol.old.api_versions import ApiVersionsRequest as OldApiVersionsRequest
    from kafka.protocol.parser import KafkaProtocol

    frame = b"\x00\x00\x00\x10\x00\x00\x00\x01\x00#\x00\x00\x00\x01\x00\x12\x00\x00\x00\x03"

    def old_class():
        parser = KafkaProtocol(client_id="t")
        parser.send_request(
            OldApiVersionsRequest[4](client_software_name="kp", client_software_version="1")
        )
        parser.send_bytes()
        return [(cid, repr(r)) for cid, r in parser.receive_bytes(frame)]

    def replaced():
        calls = []

        class Mine(KafkaProtocol):
            def _process_response(self, read_buffer):
                calls.append(bytes(read_buffer))
                return (0, "mine")

        parser = Mine(client_id="t")
        parser.send_request(MESSAGES["ApiVersionsRequest"][3]())
        return parser.receive_bytes(frame), calls

    for fn in (old_class, replaced):
        stock, fast = stock_then_accelerated(lambda: outcome(fn))
        assert stock == fast and stock[0] == "ok", (stock, fast)

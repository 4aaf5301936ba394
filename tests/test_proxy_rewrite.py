"""The proxy's walking address rewriter (fastkwire.proxy._rewrite's `walk_rewrite`, for
answers over DECODE_AT_MOST, 1 MiB) against the plain way of doing it (`decode_rewrite`, for the smaller
ones: decode the whole answer, replace, encode):
the same bytes for every rewritten API and version, the same refusals with the same
DecodeError on hostile frames, and a peak memory of a small multiple of the frame where
the plain way builds the whole answer (a Metadata answer of 200,000 partitions or of a
million brokers)."""

import pathlib
import random
import re
import struct
import sys
import tracemalloc
import zlib

import pytest

import fastkwire as fk
from fastkwire import _pure
from fastkwire.errors import DecodeError, EncodeError
from fastkwire.proxy._rewrite import (
    DECODE_AT_MOST,
    DECODE_BUDGET,
    FIRST_VERSION,
    decode_rewrite,
    rewrite_addresses,
    walk_rewrite,
)

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "fuzz"))
try:
    import differential
    import lying_broker
finally:
    sys.path.pop(0)

M = fk.MetadataResponse


def _rewritten_versions():
    for api_key, first in sorted(FIRST_VERSION.items()):
        cls = fk.RESPONSE_CLASSES[api_key]
        for v in range(max(first, cls.MIN_VERSION), cls.MAX_VERSION + 1):
            yield cls, v


REWRITTEN = list(_rewritten_versions())


def _mapping(calls):
    """A mapping that keeps some addresses, maps some to themselves and the others to
    hosts shorter or far longer (a longer length prefix, a larger tagged size)."""

    def mapped(address):
        calls.append(address)
        pick = zlib.crc32(repr(address).encode()) % 5
        if pick == 0:
            return None
        if pick == 1:
            return address
        host = ("p", "proxy.example", "h" * 200, "é" * 90)[pick - 1 if pick < 4 else 3]
        return host, 30000 + pick

    return mapped


def _same(frame, api_key, version):
    """Both rewriters on one frame: the same result, the same calls of the mapping."""
    mine, theirs = [], []
    got = walk_rewrite(frame, api_key, version, _mapping(mine))
    want = decode_rewrite(frame, api_key, version, _mapping(theirs))
    assert got == want
    assert (got[0] is frame) == (want[0] is frame)
    assert mine == theirs
    return got


def _answers(cls, version, n):
    dicts = differential.sampled_dicts(cls.__name__, version, n)
    dicts.append(differential.full_dict(cls.__name__, version))
    return [cls.from_dict(d) for d in dicts]


@pytest.mark.parametrize(
    "cls, version", REWRITTEN, ids=[f"{c.__name__}-v{v}" for c, v in REWRITTEN]
)
def test_the_rewriter_gives_the_plain_ways_bytes(cls, version):
    changed = 0
    for i, msg in enumerate(_answers(cls, version, 12)):
        frame = fk.encode_response(msg, version, i)
        new, _ = _same(frame, cls.API_KEY, version)
        changed += new is not frame
        # bytes after the message stay after it
        extra = b"\x00\x01trailing"
        frame = struct.pack(">i", len(frame) - 4 + len(extra)) + frame[4:] + extra
        new, _ = _same(frame, cls.API_KEY, version)
        assert new.endswith(extra)
    assert changed, "no answer had an address the mapping changed"


def _many_brokers(count, hosts, own_ports=False):
    """A Metadata v12 answer of `count` brokers (their hosts from `hosts`, in turn; port
    9092, or with `own_ports` each its own), one topic of no partitions: written entry by
    entry (a million broker objects would cost far more than what is measured)."""
    heads = [
        struct.pack(">i", i) + bytes([len(h.encode()) + 1]) + h.encode()
        for i, h in enumerate(hosts)
    ]
    if own_ports:
        entries = b"".join(
            heads[i % len(heads)] + struct.pack(">i", 1 + i) + b"\x00\x00" for i in range(count)
        )
    else:
        entries = b"".join(h + struct.pack(">i", 9092) + b"\x00\x00" for h in heads)
        assert count % len(heads) == 0
        entries *= count // len(heads)
    body = bytearray(struct.pack(">i", 0))
    n = count + 1
    while n >= 0x80:
        body.append((n & 0x7F) | 0x80)
        n >>= 7
    body.append(n)
    body += entries
    body += b"\x00" + struct.pack(">i", -1) + b"\x01\x00"  # cluster id, controller, topics, tags
    frame = struct.pack(">ii", len(body) + 5, 7) + b"\x00" + body
    if count == len(hosts) and not own_ports:  # the codec writes the same bytes
        brokers = [
            M.MetadataResponseBroker(node_id=i, host=h, port=9092) for i, h in enumerate(hosts)
        ]
        assert frame == fk.encode_response(M(brokers=brokers, topics=[]), 12, 7)
    return frame


def test_the_hand_written_answer_is_the_codecs():
    _many_brokers(3, ["10.0.0.1", "b.example", "c"])


def _peak(call):
    tracemalloc.start()
    try:
        result = call()
        current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return result, current, peak


def _measured(frame):
    """(peak bytes of rewriting it, of which the result kept, the addresses named), after
    a warm-up."""
    mapped = lambda address: ("proxy", 30001)  # noqa: E731
    walk_rewrite(_many_brokers(3, ["a", "b", "c"]), 3, 12, mapped)
    (new, named), kept, peak = _peak(lambda: walk_rewrite(frame, 3, 12, mapped))
    assert new is not frame and named
    return peak, kept, named


def test_a_metadata_answer_of_200000_partitions_costs_about_twice_its_size():
    parts = [
        M.MetadataResponsePartition(
            partition_index=i, leader_id=i % 3, replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2]
        )
        for i in range(200_000)
    ]
    brokers = [M.MetadataResponseBroker(node_id=i, host=f"10.0.0.{i}", port=9092) for i in range(3)]
    frame = fk.encode_response(
        M(brokers=brokers, topics=[M.MetadataResponseTopic(name="t", partitions=parts)]), 12, 1
    )
    del parts
    peak, _, _ = _measured(frame)
    # The output (a bytearray, then its bytes): decoding it whole took 10-16 times.
    assert peak < 3 * len(frame), (peak, len(frame))


# A million brokers take a minute under tracemalloc (each value it reads is traced): the
# default run measures a hundred thousand, the slow one a million.
BROKER_COUNTS = [100_000, pytest.param(1_000_000, marks=pytest.mark.slow)]


@pytest.mark.parametrize("count", BROKER_COUNTS)
def test_a_metadata_answer_naming_a_million_brokers_costs_about_twice_its_size(count):
    frame = _many_brokers(count, ["10.0.0.7", "kafka-2.example", "10.0.0.9", "k4"])
    peak, _, _ = _measured(frame)
    assert peak < 3 * len(frame), (peak, len(frame))


@pytest.mark.parametrize("count", BROKER_COUNTS)
def test_a_million_distinct_brokers_cost_their_list_and_about_twice_the_frame(count):
    """Each named address is in the list returned (the proxy's own listeners follow
    it), found once each through a dict: those are what the addresses cost; the walk
    itself adds about the output."""
    frame = _many_brokers(count, [f"b{i}.example" for i in range(1000)], own_ports=True)
    peak, kept, named = _measured(frame)
    assert len(named) == count
    once_each = sys.getsizeof(dict.fromkeys(named))
    assert peak - kept - once_each < 3 * len(frame), (peak, kept, once_each, len(frame))


def test_the_mapping_is_not_called_for_an_answer_that_does_not_decode():
    """The mapping opens listeners: an answer that names brokers and then does not
    decode must not open any."""
    brokers = [M.MetadataResponseBroker(node_id=1, host="10.0.0.1", port=9092)]
    frame = fk.encode_response(
        M(brokers=brokers, topics=[M.MetadataResponseTopic(name="t")]), 12, 1
    )
    cut = frame[:-3]
    cut = struct.pack(">i", len(cut) - 4) + cut[4:]
    calls = []
    with pytest.raises(DecodeError):
        walk_rewrite(cut, M.API_KEY, 12, _mapping(calls))
    assert calls == []


def _hostile(frame, api_key, version):
    """The rewriter refuses what decode refuses, with decode's error (offset, path)."""
    try:
        fk.decode_response(frame, api_key, version, records="view", trailing="keep")
    except DecodeError as e:
        with pytest.raises(DecodeError) as got:
            walk_rewrite(frame, api_key, version, _mapping([]))
        assert (got.value.offset, got.value.path, got.value.reason) == (e.offset, e.path, e.reason)
        return True
    if lying_broker.as_written(frame, api_key, version):
        _same(frame, api_key, version)
    else:  # the plain way re-encodes what it did not change (a bool of 2, say): the same message
        mine = walk_rewrite(frame, api_key, version, _mapping([]))
        theirs = decode_rewrite(frame, api_key, version, _mapping([]))
        assert mine[1] == theirs[1]
        decoded = [
            fk.decode_response(f, api_key, version, trailing="keep")[1:]
            for f in (mine[0], theirs[0])
        ]
        assert decoded[0][0].to_dict() == decoded[1][0].to_dict()
        assert decoded[0][1] == decoded[1][1]
    return False


@pytest.mark.parametrize(
    "cls, version", REWRITTEN, ids=[f"{c.__name__}-v{v}" for c, v in REWRITTEN]
)
def test_hostile_frames_are_refused_with_decodes_error(cls, version):
    msg = cls.from_dict(differential.full_dict(cls.__name__, version))
    frame = fk.encode_response(msg, version, 3)
    target = ("response", cls.API_KEY, version)
    refused = 0
    # cut anywhere (the size prefix kept right)
    for cut in range(8, len(frame)):
        refused += _hostile(differential.fix_size(frame[:cut]), cls.API_KEY, version)
    # every length, count, marker and tag set to values that cannot be, or one off
    for site in differential.sites(frame, target):
        for _, new in differential.hostile_values(site) + differential._edge_values(site):
            bad = differential.fix_size(differential.replace(frame, site.offset, site.size, new))
            refused += _hostile(bad, cls.API_KEY, version)
    # random mutations, the fuzzer's
    rng = random.Random(version * 1000 + cls.API_KEY)
    for _ in range(150):
        _hostile(differential.mutate(frame, rng), cls.API_KEY, version)
    assert refused > len(frame) // 2


def test_a_huge_count_is_refused_without_allocating_it():
    frame = _many_brokers(3, ["a", "b", "c"])
    bad = frame[:13] + b"\xfe\xff\xff\xff\x0f" + frame[14:]  # 2**32 - 3 brokers
    bad = struct.pack(">i", len(bad) - 4) + bad[4:]
    (_, _, peak) = _peak(
        lambda: pytest.raises(DecodeError, rewrite_addresses, bad, 3, 12, _mapping([]))
    )
    assert peak < 64 * 1024


def test_a_longer_host_grows_the_tagged_size_around_it():
    """Fetch v16's node endpoints are a tagged field: a host of 300 bytes makes its size
    take one more byte, the rest of the frame stays as it came."""
    F = fk.FetchResponse
    msg = F(node_endpoints=[F.NodeEndpoint(node_id=1, host="b1", port=9092)])
    frame = fk.encode_response(msg, 16, 9)
    new, named = walk_rewrite(frame, F.API_KEY, 16, lambda a: ("h" * 300, 30001))
    assert named == [("b1", 9092)]
    _, got = fk.decode_response(new, F.API_KEY, 16)
    assert [(e.host, e.port) for e in got.node_endpoints] == [("h" * 300, 30001)]
    assert new == decode_rewrite(frame, F.API_KEY, 16, lambda a: ("h" * 300, 30001))[0]


def test_answers_over_the_decode_limit_are_walked(monkeypatch):
    """rewrite_addresses decodes answers up to DECODE_AT_MOST (the compiled codec is faster
    at that) and walks larger ones, whose objects would take many times the frame; both
    give the same answer."""
    frame = _many_brokers(30_000, ["a", "b", "c"])
    used = []
    for name, real in (("decode_rewrite", decode_rewrite), ("walk_rewrite", walk_rewrite)):

        def spy(*args, name=name, real=real):
            used.append(name)
            return real(*args)

        monkeypatch.setattr(f"fastkwire.proxy._rewrite.{name}", spy)
    small = rewrite_addresses(frame, 3, 12, _mapping([]))
    monkeypatch.setattr("fastkwire.proxy._rewrite.DECODE_AT_MOST", len(frame) - 1)
    large = rewrite_addresses(frame, 3, 12, _mapping([]))
    assert used == ["decode_rewrite", "walk_rewrite"]
    assert small == large
    assert DECODE_AT_MOST == 1024 * 1024


def _tagged_filler(room):
    """A tagged-field section of empty unknown fields (tags 0, 1, 2...) taking `room` bytes
    at most: a dict entry each when decoded, for 2-4 bytes on the wire."""
    out, tag = bytearray(), 0
    while True:
        field = bytearray()
        _pure.w_uvarint(field, tag)
        field.append(0)
        if len(out) + len(field) + 5 > room:  # 5: the count's varint at most
            break
        out += field
        tag += 1
    count = bytearray()
    _pure.w_uvarint(count, tag)
    return bytes(count + out)


def _decoded_answers_at_the_limit():
    """Answers just under DECODE_AT_MOST whose decoded objects cost the most per byte: a
    million unknown tagged fields at the top, or a struct and a tagged field every 8 bytes."""
    answer = fk.encode_response(M(brokers=[M.MetadataResponseBroker(host="b", port=1)]), 12, 1)
    root_tags = answer[4:-1] + _tagged_filler(DECODE_AT_MOST - len(answer))
    Q = fk.DescribeQuorumResponse
    nodes = [Q.Node(node_id=100_000 + i) for i in range((DECODE_AT_MOST - 64) // 8)]
    for node in nodes:
        node._unknown = {0: b""}
    nodes[0].listeners = [Q.Listener(name="C", host="b", port=1)]
    many_structs = fk.encode_response(Q(nodes=nodes), 2, 1)[4:]
    return [
        (struct.pack(">i", len(root_tags)) + root_tags, M.API_KEY, 12),
        (struct.pack(">i", len(many_structs)) + many_structs, Q.API_KEY, 2),
    ]


@pytest.mark.parametrize("index", [0, 1], ids=["root-tags", "struct-tags"])
def test_an_answer_small_enough_to_decode_costs_at_most_64_mib(index):
    """Answers up to DECODE_AT_MOST are decoded whole: their objects cost up to some 50x
    the frame (a dict entry per unknown tagged field of 4 bytes), so the limit is what
    keeps that within DECODE_BUDGET. At 4 MiB, these took 210 and 197 MB."""
    frame, api_key, version = _decoded_answers_at_the_limit()[index]
    assert DECODE_AT_MOST - 64 <= len(frame) <= DECODE_AT_MOST
    mapped = lambda address: ("proxy", 30001)  # noqa: E731
    rewrite_addresses(frame, api_key, version, mapped)  # warms the caches
    (new, named), _, peak = _peak(lambda: rewrite_addresses(frame, api_key, version, mapped))
    assert named == [("b", 1)] and new != frame
    assert peak < DECODE_BUDGET == 64 * 1024 * 1024, (peak, len(frame))


def _empty_hosts(count):
    """A Metadata v12 answer of `count` brokers named by a port only (11 bytes each)."""
    entry = struct.pack(">i", 1) + b"\x01" + struct.pack(">i", 1) + b"\x00\x00"
    brokers = bytearray()
    _pure.w_uvarint(brokers, count + 1)
    body = b"\x00\x00\x00\x07\x00" + struct.pack(">i", 0) + brokers + entry * count
    body += b"\x00" + struct.pack(">i", -1) + b"\x01\x00"  # cluster, controller, topics
    return struct.pack(">i", len(body)) + body


@pytest.mark.parametrize("rewrite", [walk_rewrite, decode_rewrite, rewrite_addresses])
def test_an_answer_that_rewriting_would_grow_past_max_size_is_refused(rewrite):
    """Brokers of an empty host and a port each take 11 bytes: a 40-byte advertised host
    grew such an answer 4.4 times past the frame (a 128 MiB answer: 580 MB sent to the
    client, 1.2 GB at peak). Over max_size, it is refused, having grown little further."""
    frame = _empty_hosts(100_000)
    host = "kafka-proxy.prod.internal.example.com"
    mapped = lambda address: (host, 9092)  # noqa: E731
    new, named = rewrite(frame, 3, 12, mapped)
    assert named == [("", 1)] and len(new) > 4 * len(frame)
    assert rewrite(frame, 3, 12, mapped, len(new) - 4)[0] == new
    with pytest.raises(EncodeError, match=re.escape(f"over max_size ({2 * len(frame)})")):
        rewrite(frame, 3, 12, mapped, 2 * len(frame))
    if rewrite is walk_rewrite:  # it stops as it reaches max_size
        _, _, peak = _peak(
            lambda: pytest.raises(EncodeError, rewrite, frame, 3, 12, mapped, 2 * len(frame))
        )
        assert peak < 3 * len(frame), (peak, len(frame))


def test_an_answer_that_grows_then_shrinks_back_under_max_size_is_rewritten():
    """max_size is the rewritten answer's: a host made longer, then one made shorter by
    more, fit, and both rewriters agree (the walk judges what it has written, never a
    guess of what is to come)."""
    brokers = [
        M.MetadataResponseBroker(node_id=1, host="a", port=1),
        M.MetadataResponseBroker(node_id=2, host="b" * 30, port=2),
    ]
    frame = fk.encode_response(M(brokers=brokers), 12, 1)
    mapped = lambda address: ("x" * 11 if address[1] == 1 else "y", address[1])  # noqa: E731
    new, _ = decode_rewrite(frame, 3, 12, mapped)
    assert len(new) == len(frame) + 10 - 29
    for rewrite in (walk_rewrite, decode_rewrite):
        assert rewrite(frame, 3, 12, mapped, len(new) - 4)[0] == new
        with pytest.raises(EncodeError, match="over max_size"):
            rewrite(frame, 3, 12, mapped, len(new) - 5)

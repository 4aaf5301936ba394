"""What decoding builds: defaults made the way constructors make them, and (compiled
engine) objects the cyclic collector does not have to walk."""

import gc
import subprocess
import sys
import sysconfig
import textwrap
import weakref
from pathlib import Path

import pytest


def _fetch_with_defaults(impl):
    F = impl.FetchResponse
    part = F.PartitionData(partition_index=3, records=b"\x00" * 5)
    msg = F(responses=[F.FetchableTopicResponse(partitions=[part])])
    return F, msg


def test_tagged_struct_defaults_equal_a_constructed_struct(impl):
    # Fetch v16 partitions carry tagged structs (diverging_epoch, current_leader,
    # snapshot_id) that are absent from the bytes at their defaults.
    F, msg = _fetch_with_defaults(impl)
    got = F.decode(msg.encode(16), 16).responses[0].partitions[0]
    assert got == msg.responses[0].partitions[0]
    for name in ("diverging_epoch", "current_leader", "snapshot_id"):
        value = getattr(got, name)
        assert value == type(value)()
        assert repr(value) == repr(type(value)())
        assert value.unknown_tagged_fields == {}
    # Each decoded partition has its own default structs: changing one changes no other.
    two = F.decode(
        F(
            responses=[F.FetchableTopicResponse(partitions=[F.PartitionData(), F.PartitionData()])]
        ).encode(16),
        16,
    )
    a, b = two.responses[0].partitions
    assert a.diverging_epoch is not b.diverging_epoch
    a.diverging_epoch.epoch = 7
    assert b.diverging_epoch.epoch == -1


def test_absent_struct_fields_default_per_object(impl):
    # At v4 the tagged structs do not exist: they still read as structs of defaults.
    F, msg = _fetch_with_defaults(impl)
    got = F.decode(msg.encode(4), 4).responses[0].partitions[0]
    assert got.current_leader == F.PartitionData().current_leader
    # ... made per object, as at v16: changing one partition's changes no other.
    two = F(responses=[F.FetchableTopicResponse(partitions=[F.PartitionData()] * 2)])
    a, b = F.decode(two.encode(4), 4).responses[0].partitions
    assert a.snapshot_id is not b.snapshot_id and a.snapshot_id == b.snapshot_id
    a.snapshot_id.epoch = 3
    assert b.snapshot_id.epoch == -1


def test_compiled_decode_leaves_nothing_for_the_collector(impl):
    if impl.__name__.endswith("_python"):
        pytest.skip("the pure engine builds ordinary objects")
    M = impl.MetadataResponse
    msg = M(
        topics=[
            M.MetadataResponseTopic(
                name="t",
                partitions=[
                    M.MetadataResponsePartition(
                        partition_index=i, replica_nodes=[1, 2], isr_nodes=[1]
                    )
                    for i in range(3)
                ],
            )
        ]
    )
    got = M.decode(msg.encode(12), 12)
    topic = got.topics[0]
    for obj in (
        got,
        got.topics,
        topic,
        topic.partitions,
        topic.partitions[0],
        topic.partitions[0].replica_nodes,
        topic.partitions[0].offline_replicas,
    ):
        assert not gc.is_tracked(obj), type(obj)
    # Constructed messages too: the compiled engine's classes are plain types.
    assert not gc.is_tracked(msg) and not gc.is_tracked(msg.topics[0])


HAVE_GC = 1 << 14  # Py_TPFLAGS_HAVE_GC


def _compiled_only(impl):
    if impl.__name__.endswith("_python"):
        pytest.skip("the pure engine's classes are ordinary classes")


def test_compiled_classes_are_plain_types_without_a_collector_header(impl):
    _compiled_only(impl)
    L = impl.LeaveGroupRequest
    for cls in (L, L.MemberIdentity):
        assert not cls.__flags__ & HAVE_GC

    class Ordinary:
        __slots__ = tuple(L.__slots__)

    assert Ordinary.__flags__ & HAVE_GC
    # the same slots, without the collector's 16-byte header (a free-threaded build has
    # none: its collector's fields are in every object's own header)
    header = 0 if sysconfig.get_config_var("Py_GIL_DISABLED") else 16
    assert sys.getsizeof(L()) == sys.getsizeof(Ordinary()) - header


def test_plain_objects_release_what_they_hold(impl):
    _compiled_only(impl)
    L = impl.LeaveGroupRequest
    value = object()
    before = sys.getrefcount(value)
    msgs = [L(group_id=value, members=[L.MemberIdentity(member_id=value)]) for _ in range(1000)]
    assert sys.getrefcount(value) == before + 2000
    del msgs
    assert sys.getrefcount(value) == before


def test_a_chain_of_any_depth_is_freed_without_recursion(impl):
    _compiled_only(impl)
    # Plain objects have no trashcan: the deallocator frees nested ones iteratively.
    code = textwrap.dedent(f"""
        import fastkwire.{impl.__name__.rsplit(".", 1)[1]} as impl
        M = impl.LeaveGroupRequest.MemberIdentity
        x = M()
        for _ in range(2_000_000):
            x = M(member_id=x)
        del x
        print("freed")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "freed", out.stderr[-2000:]


def test_subclasses_of_plain_classes_work_and_are_freed(impl):
    _compiled_only(impl)
    L = impl.LeaveGroupRequest

    class WithDict(L):
        pass

    class WithSlots(L):
        __slots__ = ("extra",)

    value = object()
    before = sys.getrefcount(value)
    a = WithDict(group_id=value)
    a.note = value
    b = WithSlots(group_id=value)
    b.extra = value
    assert gc.is_tracked(a) and gc.is_tracked(b)  # subclasses adding state are collector types
    assert WithDict(group_id="g").encode(5) == L(group_id="g").encode(5)
    held = sys.getrefcount(value)  # (outside assert: its rewriting keeps temporaries)
    assert held == before + 4
    del a, b
    gc.collect()
    after = sys.getrefcount(value)
    assert after == before
    c = WithDict(group_id="g")
    c.me = c  # a cycle through a subclass instance: it has a __dict__, so the collector sees it
    ref = weakref.ref(c)
    del c
    gc.collect()
    assert ref() is None


def test_a_cycle_through_a_plain_object_is_never_collected(impl):
    # The documented trade-off (as msgspec's gc=False): the collector cannot see it.
    _compiled_only(impl)
    L = impl.LeaveGroupRequest

    class Marker:
        pass

    marker = Marker()
    ref = weakref.ref(marker)
    msg = L(group_id="g")
    msg.members = [msg, marker]
    del msg, marker
    gc.collect()
    assert ref() is not None


def _fetch_frames(impl, version):
    F = impl.FetchResponse
    msg = F(
        responses=[
            F.FetchableTopicResponse(
                partitions=[
                    F.PartitionData(partition_index=0, records=bytes(range(200))),
                    F.PartitionData(partition_index=1, records=None),
                    F.PartitionData(partition_index=2, records=b""),
                ]
            )
        ]
    )
    return F, msg, msg.encode(version)


@pytest.mark.parametrize("version", [4, 16])
def test_record_views_share_the_input_bytes(impl, version):
    F, msg, body = _fetch_frames(impl, version)
    got = F.decode(body, version, records="view")
    parts = got.responses[0].partitions
    assert isinstance(parts[0].records, memoryview)
    assert parts[0].records.obj is body and parts[0].records.readonly
    assert bytes(parts[0].records) == bytes(range(200))
    assert parts[1].records is None and bytes(parts[2].records) == b""
    assert got == msg and got.encode(version) == body  # a proxy re-encodes the views


@pytest.mark.parametrize("kind", [bytearray, memoryview])
def test_record_views_of_other_buffers_are_a_private_copy(impl, kind):
    F, msg, body = _fetch_frames(impl, 16)
    data = bytearray(body)
    got = F.decode(kind(data), 16, records="view")
    data[:] = bytes(len(data))  # the caller reuses its buffer
    assert bytes(got.responses[0].partitions[0].records) == bytes(range(200))
    data.extend(b"more")  # and can still resize it: no export of it is left open


def test_record_views_fail_exactly_where_bytes_fail(impl):
    F, msg, body = _fetch_frames(impl, 16)
    for cut in range(len(body)):
        errors = []
        for records in ("bytes", "view"):
            with pytest.raises(impl.DecodeError) as info:
                F.decode(body[:cut], 16, records=records)
            errors.append(str(info.value))
        assert errors[0] == errors[1]


def test_record_views_through_frames_and_decode_from(impl):
    F, msg, body = _fetch_frames(impl, 16)
    frame = impl.encode_response(msg, 16, correlation_id=9)
    header, got = impl.decode_response(frame, F.API_KEY, 16, records="view")
    assert header.correlation_id == 9 and got == msg
    assert isinstance(got.responses[0].partitions[0].records, memoryview)
    got, end = F.decode_from(b"xy" + body, 16, 2, records="view")
    assert end == len(body) + 2 and got == msg
    with pytest.raises(ValueError, match="records must be"):
        F.decode(body, 16, records="memoryview")


@pytest.mark.parametrize("n", [0, 1, 125, 126, 127, 128, 300])
def test_compact_int_arrays_of_every_count_width(impl, n):
    # Short arrays have a fast path in the pure engine; its edges are the one-byte count
    # (n + 1 < 0x80) and the array ending exactly at the end of the bytes.
    M = impl.MetadataResponse
    part = M.MetadataResponsePartition(
        partition_index=1,
        replica_nodes=list(range(-n // 2, n - n // 2)),
        isr_nodes=[2**31 - 1, -(2**31)][: n % 3],
        offline_replicas=[],
    )
    msg = M(topics=[M.MetadataResponseTopic(name="t", partitions=[part])])
    body = msg.encode(12)
    assert M.decode(body, 12) == msg
    # Every cut fails as the careful path says (the compiled engine has no fast path).
    compiled = pytest.importorskip("fastkwire._messages_cython").MetadataResponse
    for cut in range(len(body)):
        errors = []
        for cls in (M, compiled):
            with pytest.raises(impl.DecodeError) as info:
                cls.decode(body[:cut], 12)
            errors.append(str(info.value))
        assert errors[0] == errors[1]


def test_decoded_ints_and_int_lists_are_ordinary_values(impl):
    # The compiled engine shares one int object per small value (0 .. 16383) and makes
    # its lists without PyList_New: the values and lists must be what ints and lists are,
    # either side of the table's edges, for every integer width.
    edges = [-(2**31), -16385, -1, 0, 1, 256, 257, 16383, 16384, 2**31 - 1]
    M = impl.MetadataResponse
    part = M.MetadataResponsePartition(
        partition_index=16384, leader_id=16383, leader_epoch=-1, replica_nodes=edges
    )
    msg = M(topics=[M.MetadataResponseTopic(name="t", partitions=[part])])
    got = M.decode(msg.encode(12), 12).topics[0].partitions[0]
    assert got.replica_nodes == edges and type(got.replica_nodes) is list
    assert [type(x) for x in got.replica_nodes] == [int] * len(edges)
    assert (got.partition_index, got.leader_id, got.leader_epoch) == (16384, 16383, -1)
    nodes = got.replica_nodes
    nodes.extend(range(1000))  # grows past what the decoder allocated
    del nodes[:5]
    nodes.sort()
    assert nodes == sorted(edges[5:] + list(range(1000)))
    nodes[0] += 1  # ints are immutable: the shared one is not changed
    assert M.decode(msg.encode(12), 12).topics[0].partitions[0].replica_nodes == edges
    empty = (
        M.decode(
            M(topics=[M.MetadataResponseTopic(partitions=[M.MetadataResponsePartition()])]).encode(
                12
            ),
            12,
        )
        .topics[0]
        .partitions[0]
    )
    assert empty.offline_replicas == [] and empty.offline_replicas is not empty.isr_nodes
    empty.offline_replicas.append(1)
    assert empty.offline_replicas == [1]
    # int64 and int16 fields: past the table and negative.
    L = impl.ListOffsetsResponse
    p = L.ListOffsetsPartitionResponse(error_code=-1, offset=2**63 - 1, timestamp=-(2**63))
    r = L(topics=[L.ListOffsetsTopicResponse(name="t", partitions=[p])])
    back = L.decode(r.encode(8), 8).topics[0].partitions[0]
    assert (back.error_code, back.offset, back.timestamp) == (-1, 2**63 - 1, -(2**63))


# ---------------------------------------------------------------- the collector's view

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"
TESTS = Path(__file__).resolve().parent

# Run in a fresh interpreter: `setup` makes `calls` (functions that decode or encode)
# with the collector as usual; then each call runs under fuzz/hostile.py's gc_stress (a
# collection at nearly every allocation, and a walker over the young objects at each
# one), and must give what it gives without it. A container the compiled core let the
# collector see while it still had empty (NULL) slots crashes the walker: the process
# dies of SIGSEGV and the test fails, instead of pytest dying with it.
GC_SCRIPT = """
import gc, importlib, sys, uuid
sys.path[:0] = [{fuzz!r}, {tests!r}]
import hostile
mod = importlib.import_module({module!r})
core = importlib.import_module({core!r})
def failing(decode, body):
    # decode of body cut short past its middle, where the decoder has containers half
    # built when it makes the DecodeError (Python code: a collection is forced there)
    def call():
        out = []
        for k in (len(body) * 2 // 3, len(body) * 5 // 6, len(body) - 1):
            hostile.COMPILED_CALLS[0] += 1
            try:
                decode(body[:k])
                out.append(None)
            except Exception as e:
                out.append((type(e).__name__, e.args))
            finally:
                hostile.COMPILED_CALLS[0] -= 1
        return out
    return call
{setup}
calls += [failing(f, b) for f, b in cut]
def shown(x):
    return repr(x.to_dict()) if hasattr(x, "to_dict") else repr(x)
plain = [shown(call()) for call in calls]
undo = hostile.gc_stress()
stressed = []
for i, call in enumerate(calls):
    print("call", i, flush=True)
    stressed.append(shown(call()))
collections, inside = undo()
assert stressed == plain
print("whole", len(calls), "collections", collections, inside)
"""

GC_CASES = {
    # rd_structs: a list of structs, each a new object (an allocation the collector counts)
    "struct-array": """
L = mod.LeaveGroupRequest
body = L(group_id="g", members=[L.MemberIdentity(member_id=f"m{i}", group_instance_id="i", reason="r")
                                for i in range(200)]).encode(5)
calls = [lambda: L.decode(body, 5)]
cut = [(lambda b: L.decode(b, 5), body)]
""",
    # rd_structs inside rd_structs, with int arrays in the inner structs
    "nested-struct-arrays": """
M = mod.MetadataResponse
msg = M(topics=[M.MetadataResponseTopic(name=f"t{t}", partitions=[
    M.MetadataResponsePartition(partition_index=p, replica_nodes=[1, 2, 3], isr_nodes=[1])
    for p in range(20)]) for t in range(20)])
body = msg.encode(12)
calls = [lambda: M.decode(body, 12), lambda: M.decode(body, 12, arrays="numpy")]
cut = [(lambda b: M.decode(b, 12), body), (lambda b: M.decode(b, 12, arrays="numpy"), body)]
""",
    # rd_scalars: a uuid.UUID per item (Python code, and tracked objects)
    "uuid-array": """
B = mod.BrokerRegistrationRequest
body = B(broker_id=1, cluster_id="c", log_dirs=[uuid.UUID(int=i) for i in range(200)]).encode(4)
calls = [lambda: B.decode(body, 4)]
cut = [(lambda b: B.decode(b, 4), body)]
""",
    # rd_scalars reached through a tagged field (rd_tagged)
    "tagged-uuid-array": """
H = mod.BrokerHeartbeatRequest
body = H(broker_id=1, offline_log_dirs=[uuid.UUID(int=i) for i in range(200)],
         cordoned_log_dirs=[uuid.UUID(int=i) for i in range(50)]).encode(2)
calls = [lambda: H.decode(body, 2)]
cut = [(lambda b: H.decode(b, 2), body)]
""",
    # rd_int_array's ints (past the shared small ones: new objects), in struct arrays.
    # An int is no object the collector counts, so on CPython 3.11 the int list alone
    # cannot be caught half built; this still covers it, and the primitive case below
    "int-array": """
M = mod.MetadataResponse
msg = M(topics=[M.MetadataResponseTopic(name="t", partitions=[
    M.MetadataResponsePartition(partition_index=p, replica_nodes=list(range(20000, 20300)))
    for p in range(5)])])
body = msg.encode(12)
calls = [lambda: M.decode(body, 12)]
cut = [(lambda b: M.decode(b, 12), body)]
""",
    # rd_string_array
    "string-array": """
D = mod.DescribeGroupsRequest
body = D(groups=[f"group-{i}" for i in range(300)]).encode(5)
calls = [lambda: D.decode(body, 5)]
cut = [(lambda b: D.decode(b, 5), body)]
""",
    # the primitive API's arrays, which (unlike the engine's) are tracked when whole
    "primitive-arrays": """
ints = core.encode("compact_array[int32]", list(range(20000, 20500)))
strings = core.encode("array[string]", [f"s{i}" for i in range(300)])
calls = [lambda: core.decode("compact_array[int32]", ints),
         lambda: core.decode("array[string]", strings)]
cut = [(lambda b: core.decode("compact_array[int32]", b), ints),
       (lambda b: core.decode("array[string]", b), strings)]
assert gc.is_tracked(calls[0]()[0]) and gc.is_tracked(calls[1]()[0])
""",
    # every container path at once: every message and version the suite visits, all
    # fields set, read as lists, as numpy columns and with record views, and re-encoded
    "every-message": """
import differential as D, scope
calls, cut = [], []
for i, (name, v) in enumerate(scope.pairs(D.message_versions())):
    cls = getattr(mod, name)
    body = getattr(D.PY, name).from_dict(D.full_dict(name, v)).encode(v)
    for arrays in D.ARRAYS:
        calls.append(lambda cls=cls, body=body, v=v, a=arrays: cls.decode(body, v, arrays=a))
    calls.append(lambda cls=cls, body=body, v=v: cls.decode(body, v, records="view").encode(v))
    if i % 10 == 0:  # one message in ten also cut short
        cut.append((lambda b, cls=cls, v=v: cls.decode(b, v), body))
""",
}


@pytest.mark.parametrize("case", sorted(GC_CASES))
def test_the_collector_never_sees_a_half_built_container(impl, case):
    if impl.__name__.endswith("_python") and sysconfig.get_config_var("Py_GIL_DISABLED"):
        # The pure engine's containers are Python's own, whole whenever a collection can
        # run; it runs here on the GIL builds as the differential baseline. A free-threaded
        # collector has no young generation and walks the whole heap at each forced
        # collection: the pure engine's calls take minutes each there.
        pytest.skip("the pure engine under the collector stress: on the GIL builds only")
    core = "fastkwire._pure" if impl.__name__.endswith("_python") else "fastkwire._core"
    code = GC_SCRIPT.format(
        fuzz=str(FUZZ), tests=str(TESTS), module=impl.__name__, core=core, setup=GC_CASES[case]
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, (
        f"exit {out.returncode}{' (SIGSEGV)' if out.returncode == -11 else ''}"
        f"\n{out.stdout[-2000:]}\n{out.stderr[-4000:]}"
    )
    assert "whole" in out.stdout
    collections, inside = (int(x) for x in out.stdout.split()[-2:])
    # The stress ran collections during the calls (without them the walk guards nothing).
    assert collections > 0, out.stdout[-500:]
    # And, on every interpreter, inside the compiled ones: where a failing decode makes
    # its DecodeError (Python code) with its containers half built. CPython 3.12 and
    # later collect only where Python code runs, never in an allocation, so that is
    # where a collection can meet them there (gc_stress forces one at each such call).
    if not impl.__name__.endswith("_python"):
        assert inside > 0, out.stdout[-500:]


def test_decoded_uuids_are_what_uuid_makes_from_the_bytes(impl):
    # The compiled core fills uuid.UUID's slots itself (its __init__ costs microseconds);
    # the object must be the one UUID(bytes=...) makes, down to is_safe.
    import copy
    import pickle
    import uuid

    M = impl.MetadataResponse
    ids = [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.uuid4(), uuid.UUID(int=1)]
    msg = M(topics=[M.MetadataResponseTopic(name=f"t{i}", topic_id=u) for i, u in enumerate(ids)])
    got = [t.topic_id for t in M.decode(msg.encode(12), 12).topics]
    for u, g in zip(ids, got):
        want = uuid.UUID(bytes=u.bytes)
        assert type(g) is uuid.UUID
        assert (g.int, g.is_safe, hash(g), repr(g), str(g)) == (
            want.int,
            want.is_safe,
            hash(want),
            repr(want),
            str(want),
        )
        assert pickle.loads(pickle.dumps(g)) == want and copy.deepcopy(g) == want
        assert weakref.ref(g)() is g
        with pytest.raises(TypeError):
            g.int = 5
    assert gc.is_tracked(got[0])  # an ordinary UUID, as the pure engine's

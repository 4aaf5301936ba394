"""Hostile Python values given to the encoders, in both implementations.

Each test pins one way a value, a buffer or an argument could make an encoder write past
its memory, send memory it does not own, emit bytes the decoders reject, or fail with
something else than the documented error: counts and sizes past what the wire can carry,
list and tuple subclasses whose __len__ lies, zero-stride numpy views, TaskOffsetColumns
changed after construction, frames past 2 GiB, unknown tags that collide with known ones,
encode_into's arguments and buffers, and __index__ returning the wrong type. The
differential fuzzer (fuzz/hostile.py, run below for a bounded number of seeds) mixes all
of these at random.
"""

import array
import enum
import re
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastkwire.columns import TaskOffsetColumns
from fastkwire.errors import DecodeError, EncodeError

np = pytest.importorskip("numpy")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import hostile  # noqa: E402

TOO_LARGE = "the message would exceed 2147483647 bytes"


def zero_stride(n, dtype=np.int8):
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype), shape=(n,), strides=(0,))


def heartbeat(impl, partitions):
    S = impl.StreamsGroupHeartbeatRequest
    return S(
        group_id="g",
        member_id="m",
        active_tasks=[S.TaskIds(subtopology_id="s", partitions=partitions)],
    )


def peak_bytes(fn):
    """The most memory fn had allocated at once, as tracemalloc sees it (numpy's and
    CPython's allocations alike)."""
    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


# ---------------------------------------------------------------- 1: counts and sizes


@pytest.mark.parametrize("n", [2**62, 2**40, 2**32], ids=["2**62", "2**40", "2**32"])
def test_zero_stride_array_longer_than_a_count_can_say(impl, n):
    """The seed of the heap overflow: a count times a width wrapped, the room check
    passed. Now the count is checked against what a compact count can carry first."""
    with pytest.raises(EncodeError) as info:
        heartbeat(impl, zero_stride(n)).encode(0)
    assert info.value.reason == (
        f"length {n} exceeds 4294967294, the most a compact length can carry"
    )
    assert info.value.path == "active_tasks[0].partitions"


@pytest.mark.parametrize("n,dtype", [(2**29, np.int8), (2**31 - 1, np.int64), (2**32 - 2, np.int8)])
def test_array_larger_than_a_message_fails_before_any_allocation(impl, n, dtype):
    """A count the field can carry, but int32 items past what a frame can hold: an
    EncodeError before a byte of it is made (a few KiB at most are allocated)."""
    msg = heartbeat(impl, zero_stride(n, dtype))
    # The pure engine writes its encoder at first use (~1 MB): not what is measured here.
    heartbeat(impl, [1]).encode(0)

    def run():
        with pytest.raises(EncodeError) as info:
            msg.encode(0)
        assert info.value.reason.startswith(TOO_LARGE)
        assert info.value.path == ""  # the size of the whole message, not of a field

    assert peak_bytes(run) < 64 * 1024


@pytest.mark.parametrize(
    "kind,n,reason",
    [
        (
            "array[int32]",
            2**31,
            "length 2147483648 exceeds 2147483647, the most a int32 length can carry",
        ),
        (
            "nullable_array[int16]",
            2**40,
            "length 1099511627776 exceeds 2147483647, the most a int32 length can carry",
        ),
        (
            "compact_array[int32]",
            2**32 - 1,
            "length 4294967295 exceeds 4294967294, the most a compact length can carry",
        ),
        (
            "compact_nullable_array[int64]",
            2**32,
            "length 4294967296 exceeds 4294967294, the most a compact length can carry",
        ),
        ("compact_array[int16]", 2**30, TOO_LARGE),
        ("array[int64]", 2**28, TOO_LARGE),
    ],
)
def test_primitive_arrays_past_their_length_field(core, kind, n, reason):
    with pytest.raises(EncodeError) as info:
        core.encode(kind, zero_stride(n))
    assert info.value.reason.startswith(reason)


class ArrayOnly:
    """An array through __array__ alone: no buffer to read in place."""

    def __init__(self, arr):
        self.arr = arr

    def __array__(self, dtype=None, copy=None):
        return self.arr


def test_array_without_a_buffer_is_measured_before_it_is_converted(impl):
    assert heartbeat(impl, ArrayOnly(np.array([1, 2, 3], ">u2"))).encode(0) == heartbeat(
        impl, [1, 2, 3]
    ).encode(0)
    msg = heartbeat(impl, ArrayOnly(zero_stride(2**40, np.int64)))

    def run():
        with pytest.raises(EncodeError, match="length 1099511627776 exceeds"):
            msg.encode(0)

    assert peak_bytes(run) < 64 * 1024


def test_bytes_view_past_a_message_fails_before_the_copy(core):
    view = memoryview(zero_stride(2**31, np.uint8))

    def run():
        with pytest.raises(EncodeError, match=TOO_LARGE):
            core.encode("compact_bytes", view)

    assert peak_bytes(run) < 64 * 1024


class LyingList(list):
    def __init__(self, items, claim):
        super().__init__(items)
        self.claim = claim

    def __len__(self):
        return self.claim

    def __getitem__(self, i):
        raise AssertionError("an encoder called __getitem__")

    def __iter__(self):
        raise AssertionError("an encoder called __iter__")


class LyingTuple(tuple):
    def __len__(self):
        return 2**62


@pytest.mark.parametrize("claim", [0, 1, 5, 2**31, 2**62])
def test_list_subclass_is_written_as_it_stores(impl, claim):
    """A list subclass's __len__ can say anything; what is written is what it holds,
    for int arrays, string arrays and struct arrays alike."""
    plain = heartbeat(impl, [1, 2, 3]).encode(0)
    assert heartbeat(impl, LyingList([1, 2, 3], claim)).encode(0) == plain
    assert heartbeat(impl, LyingTuple((1, 2, 3))).encode(0) == plain
    F = impl.FindCoordinatorRequest
    assert F(coordinator_keys=LyingList(["a", "b"], claim)).encode(4) == F(
        coordinator_keys=["a", "b"]
    ).encode(4)
    L = impl.LeaveGroupRequest
    members = [L.MemberIdentity(member_id="a"), L.MemberIdentity(member_id="b")]
    assert L(members=LyingList(members, claim)).encode(5) == L(members=list(members)).encode(5)


def test_string_lengths_at_their_limit(impl):
    F = impl.FindCoordinatorRequest
    assert F.decode(F(key="x" * 32767).encode(3), 3).key == "x" * 32767
    for text in ("x" * 32768, "\u00e9" * 16384):
        with pytest.raises(EncodeError, match="exceeds 32767"):
            F(key=text).encode(3)


# ---------------------------------------------------------------- 2: TaskOffsetColumns


def columns_message(impl, **changes):
    cols = TaskOffsetColumns(["a", "b"], [1, 2], [10, 20])
    for name, value in changes.items():
        setattr(cols, name, value)
    return impl.StreamsGroupHeartbeatRequest(task_offsets=cols)


def test_columns_with_a_lying_id_list_write_what_it_holds(impl):
    want = columns_message(impl).encode(0)
    assert columns_message(impl, subtopology_id=LyingList(["a", "b"], 2**31)).encode(0) == want
    assert columns_message(impl, subtopology_id=LyingList(["a", "b"], 0)).encode(0) == want
    # the constructor too reads lists as they store (list() would reserve 2**62 slots)
    cols = TaskOffsetColumns(LyingList(["a", "b"], 2**62), LyingList([1, 2], 2**62), [10, 20])
    assert impl.StreamsGroupHeartbeatRequest(task_offsets=cols).encode(0) == want


@pytest.mark.parametrize(
    "change",
    [
        {"subtopology_id": ["a", "b", "c"]},
        {"subtopology_id": ["a"] * 10_000},
        {"partition": zero_stride(2**59, np.int64)},
        {"offset": zero_stride(3, np.int64)},
        {"partition": [1]},
    ],
    ids=["one-more-id", "many-more-ids", "huge-partition", "longer-offset", "shorter-partition"],
)
def test_columns_changed_after_construction_are_an_encode_error(impl, change):
    """The columns are measured from what is written: more ids than partitions used to
    send the heap that followed the arrays."""
    msg = columns_message(impl, **change)
    with pytest.raises(EncodeError, match="columns differ in length") as info:
        msg.encode(0)
    assert info.value.path == "task_offsets"


class GrowingTags(dict):
    """Row tags whose lookup adds ids while the rows are being written."""

    def __init__(self, ids):
        super().__init__({7: {}})  # not empty: it is looked into
        self.ids = ids

    def get(self, key, default=None):
        self.ids.extend(["z"] * 100)
        return default


def test_ids_that_grow_while_written_are_an_encode_error(impl):
    cols = TaskOffsetColumns(["a", "b"], [1, 2], [10, 20])
    cols.unknown_tagged_fields = GrowingTags(cols.subtopology_id)
    msg = impl.StreamsGroupHeartbeatRequest(task_offsets=cols)
    with pytest.raises(EncodeError) as info:
        msg.encode(0)
    assert info.value.reason == "a value changed while it was being encoded"


# ---------------------------------------------------------------- 8: frames past 2 GiB


def test_frame_past_2_gib_is_an_encode_error(impl):
    """The size prefix is an int32: a body that takes it past 2**31-1 bytes is an
    EncodeError (it was a struct.error). A zero-stride view stands in for 2 GiB."""

    class Huge(impl.LeaveGroupRequest):
        def encode(self, version):
            return memoryview(zero_stride(2**31 - 8, np.uint8))

    with pytest.raises(EncodeError, match=TOO_LARGE):
        impl.encode_request(Huge(), 5, 1)


# ---------------------------------------------------------------- 9: unknown tags


@pytest.mark.parametrize("tag", [0, 1, 2, 3])
@pytest.mark.parametrize("version", [3, 4])
def test_unknown_tag_of_a_known_field_at_its_default(impl, tag, version):
    """The known field is not written at its default, so the unknown tag used to go out
    under its number, to be read as that field (or rejected)."""
    msg = impl.ApiVersionsResponse(unknown_tagged_fields={tag: b"\x05"})
    with pytest.raises(EncodeError) as info:
        msg.encode(version)
    assert (info.value.reason, info.value.path) == (
        f"tag {tag} is also a known field",
        "unknown_tagged_fields",
    )
    # where the field is unknown (before v3 nothing is tagged) the tag goes nowhere
    assert impl.ApiVersionsResponse.decode(msg.encode(2), 2) == impl.ApiVersionsResponse()


@pytest.mark.parametrize(
    "tags,reason",
    [
        ({-1: b""}, "tag -1 is not an int in 0-2147483647"),
        ({2**31: b""}, "tag 2147483648 is not an int in 0-2147483647"),
        ({10**5000: b""}, "tag an int of 16610 bits is not an int in 0-2147483647"),
        ({"7": b""}, "tag of type str is not an int in 0-2147483647"),
        ({True: b""}, "tag of type bool is not an int in 0-2147483647"),
        ({7: "text"}, "tag 7: expected bytes, got str"),
        ({7: None}, "tag 7: expected bytes, got NoneType"),
        ([(7, b"")], "expected a dict of tag -> bytes, got list"),
    ],
)
def test_bad_unknown_tags_are_refused(impl, tags, reason):
    """At construction, on assignment, and (for a dict changed later) when encoding."""
    L = impl.LeaveGroupRequest
    with pytest.raises(EncodeError) as info:
        L(unknown_tagged_fields=tags)
    assert (info.value.reason, info.value.path) == (reason, "unknown_tagged_fields")
    msg = L()
    with pytest.raises(EncodeError):
        msg.unknown_tagged_fields = tags
    if isinstance(tags, dict):
        msg.unknown_tagged_fields.update(tags)
        member = L.MemberIdentity()
        member.unknown_tagged_fields.update(tags)
        for m, path in ((msg, ""), (L(members=[member]), "members[0].")):
            with pytest.raises(EncodeError) as info:
                m.encode(5)
            assert (info.value.reason, info.value.path) == (reason, path + "unknown_tagged_fields")


def test_unknown_tag_values_are_written_as_their_bytes(impl):
    L = impl.LeaveGroupRequest
    want = L(unknown_tagged_fields={7: b"ac"}).encode(5)
    for value in (bytearray(b"ac"), memoryview(b"abc")[::2], memoryview(b"ac")):
        assert L(unknown_tagged_fields={7: value}).encode(5) == want


def test_decoders_refuse_a_tag_past_int32(core):
    with pytest.raises(DecodeError) as info:
        core.decode("tagged_fields", bytes.fromhex("01808080800800"))
    assert (info.value.offset, info.value.reason) == (
        1,
        "tagged field 2147483648 exceeds 2147483647",
    )


# ---------------------------------------------------------------- 10: decode_from is linear


def test_decode_from_a_large_buffer_copies_only_the_message(impl):
    """decode_from on a bytearray or memoryview used to copy the whole buffer per call
    (reading N messages from it took N copies of it)."""
    L = impl.LeaveGroupRequest
    one = L(group_id="g", members=[L.MemberIdentity(member_id="a")]).encode(5)
    big = bytearray(one * (4_000_000 // len(one)))
    for data in (big, memoryview(big)):
        at = len(one) * 1000
        assert peak_bytes(lambda: L.decode_from(data, 5, at)) < 64 * 1024
        assert L.decode_from(data, 5, at) == L.decode_from(bytes(big), 5, at)


@pytest.mark.parametrize("members", [1, 300, 3000])
def test_decode_from_any_buffer_reads_like_bytes(impl, members):
    """Message after message, then a truncated one, from bytearray and memoryview:
    the same messages, ends and errors as from bytes, also for messages larger than
    the first bytes copied."""
    L = impl.LeaveGroupRequest
    msg = L(
        group_id="g",
        members=[L.MemberIdentity(member_id=f"member-{i}", reason="r") for i in range(members)],
    )
    one = msg.encode(5)
    raw = b"\x00" * 3 + one * 3 + one[:-5]
    for data in (bytearray(raw), memoryview(raw), array.array("B", raw)):
        pos = 3
        for _ in range(3):
            got, end = L.decode_from(data, 5, pos)
            assert got == msg and end == pos + len(one)
            pos = end
        with pytest.raises(DecodeError) as info:
            L.decode_from(data, 5, pos)
        with pytest.raises(DecodeError) as want:
            L.decode_from(raw, 5, pos)
        assert (info.value.offset, info.value.reason, info.value.path) == (
            want.value.offset,
            want.value.reason,
            want.value.path,
        )


def test_decode_from_a_bytearray_leaves_it_resizable(impl):
    """No buffer export outlives the call, even when it fails."""
    L = impl.LeaveGroupRequest
    short = bytearray(L(group_id="g").encode(5)[:-1])
    with pytest.raises(DecodeError) as info:
        L.decode_from(short, 5)
    short += b"\x00"  # a BufferError if a view of it were still held (by the traceback)
    assert info.value.offset >= 0
    short.clear()


# ---------------------------------------------------------------- 11: encode_into


def small(impl):
    return impl.LeaveGroupRequest(
        group_id="g", members=[impl.LeaveGroupRequest.MemberIdentity(member_id="m", reason="r")]
    )


@pytest.mark.parametrize(
    "offset, says",
    [
        (-1, "offset -1 is outside the buffer"),
        (65, "offset 65 is outside the buffer (0-64)"),
        (2**70, "is outside the buffer"),
        (-(2**70), "is outside the buffer"),
        (1.0, "offset must be an int, not float"),
        (None, "offset must be an int, not NoneType"),
        (True, "offset must be an int, not bool"),
        ("0", "offset must be an int, not str"),
    ],
    ids=["-1", "past-end", "2**70", "-2**70", "float", "None", "True", "str"],
)
def test_bad_offsets_are_encode_errors(impl, offset, says):
    """An offset that is not an int says so (it once read "offset 1.0 is outside the
    buffer (0-64)"); one outside the buffer says where the buffer ends."""
    buf = bytearray(b"\xa5" * 64)
    with pytest.raises(EncodeError, match=re.escape(says)):
        small(impl).encode_into(buf, offset, 5)
    assert buf == b"\xa5" * 64


def released():
    view = memoryview(bytearray(64))
    view.release()
    return view


@pytest.mark.parametrize(
    "make",
    [
        lambda: b"\xa5" * 64,
        lambda: memoryview(bytearray(64)).toreadonly(),
        lambda: memoryview(bytearray(128))[::2],
        lambda: np.zeros((8, 8), np.uint8).T,
        lambda: [0] * 64,
        lambda: "x" * 64,
        lambda: released(),
    ],
    ids=["bytes", "read-only", "strided", "fortran", "list", "str", "released"],
)
def test_buffers_that_cannot_be_written_are_type_errors(impl, make):
    with pytest.raises(TypeError, match="needs a writable, C-contiguous buffer"):
        small(impl).encode_into(make(), 0, 5)


@pytest.mark.parametrize(
    "make",
    [
        lambda n: bytearray(b"\xa5" * n),
        lambda n: memoryview(bytearray(b"\xa5" * (n + 9)))[9:],
        lambda n: array.array("B", b"\xa5" * n),
        lambda n: np.full(n, 0xA5, np.uint8),
        lambda n: np.full((1, n), 0xA5, np.uint8),
    ],
    ids=["bytearray", "memoryview", "array", "numpy", "numpy-2d"],
)
def test_encode_into_any_writable_buffer(impl, make):
    msg = small(impl)
    body = msg.encode(5)
    buf = make(len(body) + 7)
    assert msg.encode_into(buf, 3, 5) == len(body)
    raw = memoryview(buf).tobytes()
    assert raw == b"\xa5" * 3 + body + b"\xa5" * 4


def failing_messages(impl):
    """Messages whose encoding fails, early or late, small or past the stack area."""
    L = impl.LeaveGroupRequest
    many = [L.MemberIdentity(member_id="m" * 100) for _ in range(200)]
    return {
        "bad-first-field": L(group_id=5),
        "bad-last-member": L(group_id="g", members=many + [L.MemberIdentity(member_id=None)]),
        "bad-tag": L(
            group_id="g", members=many[:3] + [L.MemberIdentity(unknown_tagged_fields={900: b""})]
        ),
        "too-large-for-the-buffer": L(group_id="g", members=many),
        "bad-version": L(group_id="g"),
    }


@pytest.mark.parametrize(
    "case",
    ["bad-first-field", "bad-last-member", "bad-tag", "too-large-for-the-buffer", "bad-version"],
)
def test_encode_into_leaves_the_buffer_as_it_was_on_error(impl, case):
    msg = failing_messages(impl)[case]
    if case == "bad-tag":
        msg.members[3].unknown_tagged_fields[-5] = b""
    buf = bytearray(b"\xa5" * 4096)
    version = 99 if case == "bad-version" else 5
    with pytest.raises(ValueError):  # EncodeError, UnsupportedVersionError
        msg.encode_into(buf, 10, version)
    assert buf == b"\xa5" * 4096


def test_buffer_too_small_says_how_much_is_needed(impl):
    msg = small(impl)
    body = msg.encode(5)
    buf = bytearray(b"\xa5" * (len(body) + 1))
    with pytest.raises(EncodeError) as info:
        msg.encode_into(buf, 2, 5)
    assert info.value.reason == (
        f"buffer too small: the message takes {len(body)} bytes, {len(body) - 1} are available"
    )
    assert info.value.path == "" and buf == b"\xa5" * (len(body) + 1)
    empty = impl.ApiVersionsRequest().encode(0)
    assert empty == b"" and impl.ApiVersionsRequest().encode_into(buf, len(buf), 0) == 0


def test_encode_into_holds_the_buffer_while_encoding(impl):
    """A callback cannot resize the destination under the encoder."""
    buf = bytearray(b"\xa5" * 256)

    class Resizes:
        def __index__(self):
            buf.extend(b"\x00" * 1000)
            return 1

    msg = impl.LeaveGroupResponse(throttle_time_ms=Resizes())
    with pytest.raises(BufferError):
        msg.encode_into(buf, 0, 1)
    assert buf == b"\xa5" * 256


def test_known_tagged_field_errors_name_the_field(impl):
    A = impl.ApiVersionsResponse
    cases = [
        (dict(finalized_features_epoch="x"), "finalized_features_epoch"),
        (dict(zk_migration_ready=3), "zk_migration_ready"),
        (dict(supported_features=[A.SupportedFeatureKey(name=5)]), "supported_features[0].name"),
    ]
    for kwargs, path in cases:
        with pytest.raises(EncodeError) as info:
            A(**kwargs).encode(3)
        assert info.value.path == path


# ---------------------------------------------------------------- 12: __index__


class Index:
    def __init__(self, value):
        self.value = value

    def __index__(self):
        return self.value


class IntSub(int):
    pass


@pytest.mark.parametrize(
    "value,ok",
    [
        (Index("7"), False),
        (Index(None), False),
        (Index(2**70), False),
        (Index(1.0), False),
        (Index(7), True),
        (Index(IntSub(7)), True),
        (IntSub(7), True),
        (np.int16(7), True),
    ],
)
def test_index_must_give_an_int(impl, value, ok):
    msg = impl.LeaveGroupResponse(throttle_time_ms=value)
    if ok:
        assert msg.encode(1) == impl.LeaveGroupResponse(throttle_time_ms=7).encode(1)
    else:
        with pytest.raises(EncodeError) as info:
            msg.encode(1)
        assert info.value.path == "throttle_time_ms"


def test_huge_int_errors_do_not_print_it(impl):
    """repr() of an int past 4300 digits raises: the error names its size instead."""
    with pytest.raises(EncodeError, match="an int of 16610 bits out of range for int32"):
        impl.LeaveGroupResponse(throttle_time_ms=10**5000).encode(1)


# ---------------------------------------------------------------- the differential fuzzer


def _need_compiled():
    if hostile.CY is None:
        pytest.skip("compiled extension not built: nothing to compare with")


@settings(
    max_examples=300, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True
)
@given(st.integers(0, 2**48))
def test_hostile_values_encode_alike(seed):
    """Both encoders, on the same hostile message: the same bytes (which read back) or
    the same exception class, and the same buffer after encode_into."""
    _need_compiled()
    hostile.check(seed)


def test_hostile_oracle_catches_a_disagreement(monkeypatch):
    """The encode oracle is not vacuous: an encoder that writes one byte differently
    from its twin is reported."""
    _need_compiled()
    # a seed encoded with encode() (see hostile.check) that both encode alike
    seed = next(s for s in range(1000) if s % 5 and s % 3 == 0 and hostile.check(s)[0] == "ok")
    real_encode = hostile._encode

    def tampered(mod, s, how):
        got, buf = real_encode(mod, s, how)
        if mod is hostile.CY and got[0] == "ok":
            got = ("ok", got[1] + b"\x00")
        return got, buf

    monkeypatch.setattr(hostile, "_encode", tampered)
    with pytest.raises(hostile.Disagreement):
        hostile.check(seed)


# ---------------------------------------------------------------- 13: versions


class VersionSub(int):
    pass


class VersionIndex:
    def __index__(self):
        return 1

    def __repr__(self):  # no address: the two implementations' messages are compared
        return "VersionIndex()"


class VersionEnum(enum.IntEnum):
    V1 = 1


HOSTILE_VERSIONS = {
    "2**70": 2**70,
    "-2**70": -(2**70),
    "2**64": 2**64,
    "2**63": 2**63,
    "2**63-1": 2**63 - 1,
    "-2**63": -(2**63),
    "-2**63-1": -(2**63) - 1,
    "2**32": 2**32,
    "2**31": 2**31,
    "32768": 32768,
    "32767": 32767,
    "99": 99,
    "6": 6,
    "-1": -1,
    "10**5000": 10**5000,
    "True": True,
    "False": False,
    "1.0": 1.0,
    "nan": float("nan"),
    "1j": 1j,
    "'1'": "1",
    "b'1'": b"1",
    "None": None,
    "[1]": [1],
    "int-subclass": VersionSub(1),
    "huge-int-subclass": VersionSub(2**200),
    "IntEnum": VersionEnum.V1,
    "__index__": VersionIndex(),
}


def _outcome(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - the class and the words are compared
        return type(e), str(e)
    return None


def version_calls(mod):
    """Each entry point that takes a version, as a function of the version."""
    L = mod.LeaveGroupRequest
    msg = L(group_id="g", members=[L.MemberIdentity(member_id="m", reason="r")])
    body = msg.encode(5)
    frame = mod.encode_response(mod.LeaveGroupResponse(), 5, 7)
    header = mod.RequestHeader(request_api_key=L.API_KEY, request_api_version=5, correlation_id=7)
    return {
        "encode": lambda v: msg.encode(v),
        "encode_into": lambda v: msg.encode_into(bytearray(256), 3, v),
        "decode": lambda v: L.decode(body, v),
        "decode-bytearray": lambda v: L.decode(bytearray(body), v),
        "decode-numpy": lambda v: L.decode(body, v, arrays="numpy"),
        "decode-view": lambda v: L.decode(memoryview(body), v, records="view"),
        "decode_from": lambda v: L.decode_from(b"xy" + body, v, 2),
        "header-encode": lambda v: header.encode(v),
        "header-decode_from": lambda v: mod.RequestHeader.decode_from(header.encode(2), v),
        "encode_request": lambda v: mod.encode_request(msg, v, 7, "c"),
        "encode_response": lambda v: mod.encode_response(mod.LeaveGroupResponse(), v, 7),
        "decode_response": lambda v: mod.decode_response(frame, L.API_KEY, v),
    }


DIRECT = (
    "encode",
    "encode_into",
    "decode",
    "decode-bytearray",
    "decode-numpy",
    "decode-view",
    "decode_from",
    "header-encode",
    "header-decode_from",
)


@pytest.mark.parametrize("version", list(HOSTILE_VERSIONS.values()), ids=list(HOSTILE_VERSIONS))
def test_any_version_fails_as_in_the_pure_engine(impl, version):
    """The compiled engine read a version through a C integer once a class had a plan:
    2**63 and past were an OverflowError there. Every entry point, cold or warm, must
    give the pure engine's exception and words for any value."""
    import fastkwire._messages_python as pure

    calls, reference = version_calls(impl), version_calls(pure)
    for name in calls:
        got = _outcome(lambda: calls[name](version))
        want = _outcome(lambda: reference[name](version))
        assert got == want, (name, got, want)
        if name in DIRECT:
            assert want is not None and want[0] is impl.UnsupportedVersionError, (name, want)
            if type(version) is int and 0 <= version <= 32767:
                assert want[1].endswith(
                    f"has versions 0-{2 if 'header' in name else 5}, not {version}"
                )
            else:
                shown = (
                    f"an int of {version.bit_length()} bits"
                    if isinstance(version, int) and version.bit_length() > 128
                    else repr(version)
                )
                assert want[1] == f"version must be an int in 0-32767, not {shown}", (name, want)


def test_versions_fail_alike_on_first_use():
    """The same before any plan of the class exists (the engine's cold path), in a fresh
    interpreter per implementation."""
    code = (
        "import sys; sys.path.insert(0, {tests!r}); import test_hostile_values as T\n"
        "import fastkwire._messages_{which} as mod\n"
        "out = []\n"
        "for v in (2**70, 2**63, -(2**63) - 1, 99, None, '1', True):\n"
        "    for name in ('encode', 'decode', 'decode_from', 'encode_into'):\n"
        "        cls = mod.FindCoordinatorRequest\n"  # no plan of it yet
        "        out.append((name, T._outcome(lambda: {{'encode': lambda: cls().encode(v),\n"
        "            'decode': lambda: cls.decode(b'', v), 'decode_from': lambda: cls.decode_from(b'', v),\n"
        "            'encode_into': lambda: cls().encode_into(bytearray(9), 0, v)}}[name]())))\n"
        "print(repr([(n, t.__name__, m) for n, (t, m) in out]))\n"
    )
    results = []
    for which in ("python", "cython"):
        if which == "cython":
            pytest.importorskip("fastkwire._messages_cython")
        run = subprocess.run(
            [sys.executable, "-c", code.format(tests=str(Path(__file__).parent), which=which)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 0, run.stderr
        results.append(run.stdout)
    if len(results) == 2:
        assert results[0] == results[1]
    assert "OverflowError" not in results[0]


@pytest.mark.parametrize(
    "case",
    [
        "bad-options",
        "bad-offset",
        "out-of-range-and-bad-offset",
        "bad-data",
        "bad-buffer",
        "bad-buffer-offset",
    ],
)
def test_a_bad_version_among_bad_arguments_fails_as_in_the_pure_engine(impl, case):
    """Which argument is reported first when several are bad: the pure engine's order
    (decode: data, version, options; decode_from: version, options, data, offset, then the
    version against the message's range; encode_into: version, buffer, offset, range)."""
    import fastkwire._messages_python as pure

    def call(mod):
        L = mod.LeaveGroupRequest
        body = L(group_id="g").encode(5)
        return {
            "bad-options": lambda: L.decode_from(body, "5", arrays="tuple"),
            "bad-offset": lambda: L.decode_from(body, None, 10**6),
            "out-of-range-and-bad-offset": lambda: L.decode_from(body, 99, 10**6),
            "bad-data": lambda: L.decode(5, 99),
            "bad-buffer": lambda: L(group_id="g").encode_into(b"read-only", 0, 99),
            "bad-buffer-offset": lambda: L(group_id="g").encode_into(bytearray(9), 10, 99),
        }[case]()

    got, want = _outcome(lambda: call(impl)), _outcome(lambda: call(pure))
    assert want is not None
    if case == "bad-data":  # the words are the buffer protocol's own, which differ
        got, want = got[0], want[0]
    assert got == want


# Struct fields that must be at their default to be left out (a tagged struct at its
# default is not written; a struct of a version without the field must be at its default).
# The compiled engine answers the common cases in C and asks == for the rest; both engines
# must give the same bytes or the same error for each of these values.


def _struct_default_cases(impl):
    F = impl.FetchResponse
    Leader = type(F.PartitionData().current_leader)
    Sub = type("LeaderSub", (Leader,), {})

    def unset(p):
        del p.current_leader.leader_id

    def numpy_int(p):
        p.current_leader.leader_id = np.int32(-1)

    cases = {
        "untouched": lambda p: None,
        "a fresh default": lambda p: setattr(p, "current_leader", Leader()),
        "changed": lambda p: setattr(p.current_leader, "leader_id", 5),
        "changed back": lambda p: (
            setattr(p.current_leader, "leader_id", 5),
            setattr(p.current_leader, "leader_id", -1),
        ),
        "equal but not the same int": lambda p: setattr(
            p.current_leader, "leader_id", -(10**20) // 10**20
        ),
        "True for 1": lambda p: setattr(p.current_leader, "leader_epoch", True),
        "a float equal to the default": lambda p: setattr(p.current_leader, "leader_id", -1.0),
        "a string": lambda p: setattr(p.current_leader, "leader_id", "-1"),
        "None": lambda p: setattr(p.current_leader, "leader_id", None),
        "unknown tags": lambda p: setattr(p.current_leader, "unknown_tagged_fields", {7: b"x"}),
        "empty unknown tags": lambda p: setattr(p.current_leader, "unknown_tagged_fields", {}),
        "a subclass at its defaults": lambda p: setattr(p, "current_leader", Sub()),
        "an unset field": unset,
        "a numpy int": numpy_int,
        "another struct": lambda p: setattr(p, "current_leader", F.PartitionData().snapshot_id),
        "changed snapshot": lambda p: setattr(p.snapshot_id, "end_offset", 0),
    }
    return F, cases


def _encode_outcome(impl, version, change):
    F = impl.FetchResponse
    part = F.PartitionData(partition_index=1, records=b"")
    change(part)
    msg = F(responses=[F.FetchableTopicResponse(partitions=[part])])
    try:
        return msg.encode(version)
    except AttributeError as exc:
        # The interpreter words this one (3.13 names the type with its module): compare
        # the attribute it names, not the text.
        return "AttributeError", re.search(r"attribute '(\w+)'", str(exc)).group(1)
    except Exception as exc:  # noqa: BLE001 - the outcome compared is the error itself
        return type(exc).__name__, re.sub(r"0x[0-9a-f]+", "0x", str(exc))


@pytest.mark.parametrize("version", [11, 16])
def test_struct_defaults_give_the_same_outcome_in_both_engines(version):
    pure = pytest.importorskip("fastkwire._messages_python")
    compiled = pytest.importorskip("fastkwire._messages_cython")
    _, cases = _struct_default_cases(pure)
    names = list(cases)
    for name in names:
        want = _encode_outcome(pure, version, _struct_default_cases(pure)[1][name])
        got = _encode_outcome(compiled, version, _struct_default_cases(compiled)[1][name])
        assert got == want, name
    # The cases reach both answers: left out (same bytes as untouched) and refused/written.
    base = _encode_outcome(pure, version, cases["untouched"])
    outcomes = {n: _encode_outcome(pure, version, cases[n]) for n in names}
    assert outcomes["a fresh default"] == outcomes["changed back"] == base
    assert outcomes["changed"] != base and outcomes["unknown tags"] != base
    assert outcomes["a numpy int"] == base  # a numpy scalar compares as its number
    assert outcomes["an unset field"] == ("AttributeError", "leader_id")
    if version == 11:
        assert outcomes["changed"][0] == "UnsupportedVersionError"
        assert "current_leader" in outcomes["changed"][1]
        assert outcomes["a subclass at its defaults"] == outcomes["changed"]

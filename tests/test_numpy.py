"""numpy arrays for the bulk integer fields (issue 4), in both implementations.

Expected bytes come from the list path (itself checked against peer vectors) or are
built here with struct, never by the array path under test.
"""

import array
import os
import struct
import subprocess
import sys

import pytest

from fastkwire.columns import TaskOffsetColumns
from fastkwire.errors import DecodeError, EncodeError

np = pytest.importorskip("numpy")

INT_DTYPES = ["i1", "u1", "i2", "u2", "i4", "u4", "i8", "u8"]
FIELD_CODE = {"int16": "h", "int32": "i", "int64": "q"}


def heartbeat(impl, partitions=(1, 2, 3), offsets=3, copartition=(1, 2)):
    R = impl.StreamsGroupHeartbeatRequest
    return R(
        group_id="g",
        member_id="m",
        member_epoch=1,
        endpoint_information_epoch=1,
        rebalance_timeout_ms=1000,
        topology=R.Topology(
            epoch=1,
            subtopologies=[
                R.Subtopology(
                    subtopology_id="s",
                    source_topics=["t"],
                    copartition_groups=[R.CopartitionGroup(source_topics=list(copartition))],
                )
            ],
        ),
        active_tasks=[
            R.TaskIds(subtopology_id="0", partitions=list(partitions)),
            R.TaskIds(subtopology_id="1", partitions=[]),
        ],
        standby_tasks=[R.TaskIds(subtopology_id="0", partitions=[7, -8])],
        user_endpoint=R.Endpoint(host="h", port=9092),
        task_offsets=[
            R.TaskOffset(subtopology_id=str(i % 2), partition=i - 1, offset=(1 << 40) + i)
            for i in range(offsets)
        ],
        task_end_offsets=[],
    )


def wire(kind, values, compact=True):
    """A Kafka array of `kind`, built with struct."""
    head = bytes([len(values) + 1]) if compact else struct.pack(">i", len(values))
    return head + struct.pack(f">{len(values)}{FIELD_CODE[kind]}", *values)


# ---------------------------------------------------------------- 1. encoding from arrays


@pytest.mark.parametrize("dtype", INT_DTYPES)
@pytest.mark.parametrize("order", ["<", ">"])
@pytest.mark.parametrize("layout", ["contiguous", "strided", "reversed"])
@pytest.mark.parametrize("kind", ["int16", "int32", "int64"])
def test_encode_any_integer_array(core, dtype, order, layout, kind):
    info, bits = np.iinfo(dtype), int(kind[3:])
    lo, hi = max(info.min, -(1 << (bits - 1))), min(info.max, (1 << (bits - 1)) - 1)
    values = [lo, hi, 0, 1, lo + 1, hi - 1, 5]
    dt = np.dtype(dtype).newbyteorder(order)
    if layout == "contiguous":
        arr = np.array(values, dt)
    elif layout == "strided":
        arr = np.array(values, dt).repeat(3)[::3]
    else:
        arr = np.array(values[::-1], dt)[::-1]
    assert arr.tolist() == values
    assert core.encode(f"compact_array[{kind}]", arr) == wire(kind, values)
    assert core.encode(f"array[{kind}]", arr) == wire(kind, values, compact=False)


def test_strides_really_vary():
    a = np.arange(10, dtype="i4")
    assert a[::2].strides == (8,) and a[::-1].strides == (-4,)


@pytest.mark.parametrize(
    "make",
    [
        list,
        tuple,
        lambda v: array.array("i", v),
        lambda v: array.array("q", v),
        lambda v: array.array("H", v),
        lambda v: np.array(v, dtype="i4"),
    ],
    ids=["list", "tuple", "array-i", "array-q", "array-H", "numpy"],
)
def test_every_sequence_gives_the_same_message(impl, make):
    ref = heartbeat(impl)
    body = ref.encode(0)
    msg = heartbeat(impl)
    msg.active_tasks[0].partitions = make([1, 2, 3])
    msg.topology.subtopologies[0].copartition_groups[0].source_topics = make([1, 2])
    assert msg.encode(0) == body
    buf = bytearray(len(body) + 3)
    assert msg.encode_into(buf, 3, 0) == len(body)
    assert bytes(buf[3:]) == body


def test_large_random_arrays_round_trip(impl):
    rng = np.random.default_rng(4)
    parts = rng.integers(-(1 << 31), 1 << 31, size=100_000, dtype="i8")
    msg = heartbeat(impl)
    msg.active_tasks[0].partitions = parts.astype(">i8")[::-1]
    back = type(msg).decode(msg.encode(0), 0, arrays="numpy")
    assert np.array_equal(back.active_tasks[0].partitions, parts[::-1])
    listed = heartbeat(impl, partitions=parts[::-1].tolist())
    assert msg.encode(0) == listed.encode(0)


# ---------------------------------------------------------------- 2. decoding to arrays


def test_decode_numpy_gives_native_arrays_that_own_their_memory(impl):
    R = impl.StreamsGroupHeartbeatRequest
    data = bytearray(heartbeat(impl, partitions=[5, -6, 2**31 - 1]).encode(0))
    msg = R.decode(data, 0, arrays="numpy")
    parts = msg.active_tasks[0].partitions
    assert isinstance(parts, np.ndarray)
    assert parts.dtype == np.dtype("i4") and parts.dtype.isnative
    assert parts.tolist() == [5, -6, 2**31 - 1]
    assert parts.flags.owndata and parts.flags.writeable and parts.flags.c_contiguous
    assert msg.active_tasks[1].partitions.dtype == np.dtype("i4")
    assert len(msg.active_tasks[1].partitions) == 0
    groups = msg.topology.subtopologies[0].copartition_groups[0]
    assert groups.source_topics.dtype == np.dtype("i2") and groups.source_topics.tolist() == [1, 2]
    # independent of the input: changing the input afterwards changes nothing
    data[:] = bytes(len(data))
    assert parts.tolist() == [5, -6, 2**31 - 1]
    parts[0] = 9  # and writable without touching anything else
    assert parts[0] == 9


def test_decode_from_memoryview_at_an_offset(impl):
    R = impl.StreamsGroupHeartbeatRequest
    body = heartbeat(impl, partitions=[3, 4]).encode(0)
    view = memoryview(b"xyz" + body)
    msg, end = R.decode_from(view, 0, 3, arrays="numpy")
    assert end == len(view) and msg.active_tasks[0].partitions.tolist() == [3, 4]


def test_default_and_list_keep_lists(impl):
    R = impl.StreamsGroupHeartbeatRequest
    body = heartbeat(impl).encode(0)
    for msg in (R.decode(body, 0), R.decode(body, 0, arrays="list")):
        assert type(msg.active_tasks[0].partitions) is list
        assert type(msg.task_offsets) is list
        assert msg == heartbeat(impl)


def test_unknown_arrays_mode_is_rejected(impl):
    with pytest.raises(ValueError, match="arrays must be"):
        impl.StreamsGroupHeartbeatRequest.decode(heartbeat(impl).encode(0), 0, arrays="tuple")


def test_null_arrays_stay_none(impl):
    R = impl.StreamsGroupHeartbeatRequest
    msg = R(
        group_id="g",
        member_id="m",
        member_epoch=1,
        endpoint_information_epoch=1,
        rebalance_timeout_ms=1,
        active_tasks=None,
        task_offsets=None,
    )
    back = R.decode(msg.encode(0), 0, arrays="numpy")
    assert back.active_tasks is None and back.task_offsets is None and back.task_end_offsets is None


def test_response_partitions_decode_to_arrays(impl):
    S = impl.StreamsGroupHeartbeatResponse
    tp = S.TopicPartition(topic="orders", partitions=[0, 1, 2**31 - 1])
    msg = S(
        partitions_by_user_endpoint=[
            S.EndpointToPartitions(
                user_endpoint=S.Endpoint(host="h", port=1),
                active_partitions=[tp],
                standby_partitions=[],
            )
        ]
    )
    back = S.decode(msg.encode(0), 0, arrays="numpy")
    parts = back.partitions_by_user_endpoint[0].active_partitions[0].partitions
    assert parts.dtype == np.dtype("i4") and parts.tolist() == [0, 1, 2**31 - 1]
    assert back == msg
    assert back.encode(0) == msg.encode(0)


def test_numpy_message_equals_list_message(impl):
    R = impl.StreamsGroupHeartbeatRequest
    ref = heartbeat(impl)
    arr = R.decode(ref.encode(0), 0, arrays="numpy")
    assert arr == ref and ref == arr
    assert arr.to_dict() == ref.to_dict()
    assert R.from_dict(arr.to_dict()) == ref
    other = heartbeat(impl, partitions=[1, 2, 4])
    assert arr != other


# ---------------------------------------------------------------- 3. task offsets in columns


def test_task_offsets_decode_to_columns(impl):
    R = impl.StreamsGroupHeartbeatRequest
    ref = heartbeat(impl, offsets=5)
    msg = R.decode(ref.encode(0), 0, arrays="numpy")
    cols = msg.task_offsets
    assert isinstance(cols, TaskOffsetColumns) and isinstance(
        msg.task_end_offsets, TaskOffsetColumns
    )
    assert len(cols) == 5 and len(msg.task_end_offsets) == 0
    assert cols.subtopology_id == ["0", "1", "0", "1", "0"]
    assert cols.partition.dtype == np.dtype("i4") and cols.partition.tolist() == [-1, 0, 1, 2, 3]
    assert cols.offset.dtype == np.dtype("i8") and cols.offset.tolist() == [
        (1 << 40) + i for i in range(5)
    ]
    items = list(cols)
    assert all(type(t) is R.TaskOffset for t in items)
    assert items == ref.task_offsets
    assert cols[-1] == ref.task_offsets[4] and cols[0] == ref.task_offsets[0]
    with pytest.raises(IndexError):
        cols[5]
    assert cols == ref.task_offsets and ref.task_offsets == cols
    assert cols == R.decode(ref.encode(0), 0, arrays="numpy").task_offsets
    assert cols != heartbeat(impl, offsets=4).task_offsets
    assert cols != TaskOffsetColumns(["0"] * 5, [-1, 0, 1, 2, 3], [0] * 5)
    assert "TaskOffsetColumns(" in repr(cols)
    assert msg.encode(0) == ref.encode(0)


def test_columns_built_by_hand_encode_like_the_list(impl):
    ref = heartbeat(impl, offsets=4)
    msg = heartbeat(impl, offsets=0)
    msg.task_offsets = TaskOffsetColumns(
        ["0", "1", "0", "1"],
        np.array([-1, 0, 1, 2], dtype=">i8")[::1],
        array.array("q", [(1 << 40) + i for i in range(4)]),
    )
    msg.task_end_offsets = TaskOffsetColumns()
    assert msg.encode(0) == ref.encode(0)
    assert TaskOffsetColumns.from_list(ref.task_offsets) == ref.task_offsets


def test_columns_cross_implementations():
    import fastkwire._messages_python as pure

    try:
        import fastkwire._messages_cython as cy
    except ImportError:
        pytest.skip("compiled extension not built")
    body = heartbeat(pure, offsets=6).encode(0)
    a = pure.StreamsGroupHeartbeatRequest.decode(body, 0, arrays="numpy")
    b = cy.StreamsGroupHeartbeatRequest.decode(body, 0, arrays="numpy")
    assert a.task_offsets == b.task_offsets
    assert a.encode(0) == b.encode(0) == body
    # columns decoded by one implementation encode with the other
    a.task_offsets, b.task_offsets = b.task_offsets, a.task_offsets
    assert a.encode(0) == b.encode(0) == body


def test_unknown_tagged_fields_of_rows_survive_columns(impl):
    R = impl.StreamsGroupHeartbeatRequest
    ref = heartbeat(impl, offsets=3)
    ref.task_offsets[1].unknown_tagged_fields = {7: b"\x01\x02", 9: b""}
    body = ref.encode(0)
    cols = R.decode(body, 0, arrays="numpy").task_offsets
    assert cols.unknown_tagged_fields == {1: {7: b"\x01\x02", 9: b""}}
    assert list(cols)[1].unknown_tagged_fields == {7: b"\x01\x02", 9: b""}
    assert cols == ref.task_offsets
    assert R.decode(body, 0, arrays="numpy").encode(0) == body
    plain = heartbeat(impl, offsets=3)
    assert cols != plain.task_offsets


def decode_error(fn):
    try:
        fn()
    except DecodeError as x:
        return (x.offset, x.reason, x.path)
    return None


def test_malformed_input_fails_the_same_with_columns_and_arrays(impl):
    """Every truncation and a corrupted string give the same error in both modes."""
    R = impl.StreamsGroupHeartbeatRequest
    body = heartbeat(impl, offsets=3).encode(0)
    seen = set()
    for cut in range(len(body)):
        data = body[:cut]
        as_list = decode_error(lambda: R.decode(data, 0))
        assert as_list is not None
        assert decode_error(lambda: R.decode(data, 0, arrays="numpy")) == as_list
        seen.add(as_list[2].split("[")[0])
    assert {"task_offsets", "active_tasks", "task_end_offsets"} <= seen
    # an invalid UTF-8 subtopology id inside the task offsets
    at = body.index(b"\x02" + b"1" + struct.pack(">i", 0))  # row 1: "1", partition 0
    bad = body[: at + 1] + b"\xff" + body[at + 2 :]
    err = decode_error(lambda: R.decode(bad, 0))
    assert err[2] == "task_offsets[1].subtopology_id"
    assert decode_error(lambda: R.decode(bad, 0, arrays="numpy")) == err


# ---------------------------------------------------------------- 5. range and dtype errors


def encode_error(fn):
    with pytest.raises(EncodeError) as info:
        fn()
    return info.value


@pytest.mark.parametrize("as_array", [False, True], ids=["list", "numpy"])
@pytest.mark.parametrize("value", [2**31, -(2**31) - 1])
def test_int32_out_of_range_names_the_field(impl, as_array, value):
    msg = heartbeat(impl)
    parts = [1, value, 2**40]
    msg.active_tasks[0].partitions = np.array(parts, dtype="i8") if as_array else parts
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "active_tasks[0].partitions[1]"
    assert x.reason == f"{value} out of range for int32"


@pytest.mark.parametrize("dtype", ["u4", "u8", ">i8", "<i8"])
def test_int32_out_of_range_in_every_dtype(impl, dtype):
    msg = heartbeat(impl)
    msg.standby_tasks[0].partitions = np.array([0, 1, 2**31 + 5], dtype=dtype)[::-1]
    x = encode_error(lambda: msg.encode(0))
    assert (x.path, x.reason) == (
        "standby_tasks[0].partitions[0]",
        f"{2**31 + 5} out of range for int32",
    )


@pytest.mark.parametrize("as_array", [False, True], ids=["list", "numpy"])
def test_int16_index_out_of_range(impl, as_array):
    msg = heartbeat(impl)
    idx = [0, 2**15]
    msg.topology.subtopologies[0].copartition_groups[0].source_topics = (
        np.array(idx) if as_array else idx
    )
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "topology.subtopologies[0].copartition_groups[0].source_topics[1]"
    assert x.reason == "32768 out of range for int16"


def test_uint64_beyond_int64(core):
    big = np.array([1, 2**63], dtype="u8")
    x = encode_error(lambda: core.encode("compact_array[int64]", big))
    assert (x.path, x.reason) == ("[1]", f"{2**63} out of range for int64")
    ok = np.array([0, 2**63 - 1], dtype="u8")
    assert core.encode("compact_array[int64]", ok) == wire("int64", [0, 2**63 - 1])


@pytest.mark.parametrize("port", [-1, 65536, np.int64(-1), np.int32(70000), np.uint32(65536)])
def test_port_out_of_range(impl, port):
    msg = heartbeat(impl)
    msg.user_endpoint.port = port
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "user_endpoint.port" and "out of range for uint16" in x.reason


def test_numpy_scalars_that_fit_are_ints(impl):
    msg = heartbeat(impl)
    msg.user_endpoint.port = np.uint16(9092)
    msg.active_tasks[0].partitions = [np.int8(1), np.uint64(2), np.int32(3)]
    assert msg.encode(0) == heartbeat(impl).encode(0)


@pytest.mark.parametrize(
    "bad",
    [
        np.array([1.0, 2.0]),
        np.array([1, 2], dtype="f4"),
        np.array([1, 2], dtype=object),
        np.array([True, False]),
        np.array([[1, 2]], dtype="i4"),
        np.array(5, dtype="i4"),
        np.array(["2024-01-01"], dtype="datetime64[D]"),
        array.array("d", [1.0]),
        np.array([1, 2], dtype="i4").view("S4"),
    ],
    ids=["f8", "f4", "object", "bool", "2-D", "0-D", "datetime", "array-d", "bytes"],
)
def test_wrong_array_types_are_encode_errors(impl, bad):
    msg = heartbeat(impl)
    msg.active_tasks[0].partitions = bad
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "active_tasks[0].partitions"
    assert "expected" in x.reason
    buf = bytearray(4096)
    assert encode_error(lambda: msg.encode_into(buf, 0, 0)).reason == x.reason


def test_non_sequences_are_encode_errors(impl):
    for bad in (b"\x00\x01", "12", 7, {1, 2}, np.bool_(True), memoryview(np.array([1], "i4"))):
        msg = heartbeat(impl)
        msg.active_tasks[0].partitions = bad
        assert encode_error(lambda: msg.encode(0)).path.startswith("active_tasks[0].partitions")


def test_column_errors_name_row_and_column(impl):
    msg = heartbeat(impl, offsets=0)
    cols = TaskOffsetColumns(["a", "b"], [1, 2], [3, 4])
    msg.task_offsets = cols
    cols.partition = np.array([0, 2**31], dtype="i8")
    x = encode_error(lambda: msg.encode(0))
    assert (x.path, x.reason) == ("task_offsets[1].partition", f"{2**31} out of range for int32")
    cols.partition = np.array([0, 1], dtype="i4")
    cols.offset = np.array([1.5, 2.0])
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "task_offsets.offset" and "dtype float64" in x.reason
    cols.offset = np.array([1, 2], dtype="u8")
    cols.subtopology_id = ["a", 5]
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "task_offsets[1].subtopology_id"
    cols.subtopology_id = ["a"]
    x = encode_error(lambda: msg.encode(0))
    assert "differ in length" in x.reason
    cols.subtopology_id = ["a", "b"]
    cols.unknown_tagged_fields = {0: {"x": b""}}
    x = encode_error(lambda: msg.encode(0))
    assert x.path == "task_offsets[0].unknown_tagged_fields"
    cols.unknown_tagged_fields = {}
    assert msg.encode(0) == type(msg).decode(msg.encode(0), 0).encode(0)


def test_column_constructor_validates():
    with pytest.raises(EncodeError, match=r"\[1\]\.offset"):
        TaskOffsetColumns(["a", "b"], [1, 2], [0, 2**63])
    with pytest.raises(EncodeError) as e:
        TaskOffsetColumns(["a"], [1, 2], [1, 2])
    assert str(e.value) == (
        "TaskOffsetColumns: columns differ in length: subtopology_id 1, partition 2, offset 2 "
        "(a task_offsets or task_end_offsets value has one of each a row)"
    )
    with pytest.raises(EncodeError, match="dtype bool"):
        TaskOffsetColumns(["a"], np.array([True]), [1])


# ---------------------------------------------------------------- numpy stays lazy


def test_import_and_list_codecs_do_not_import_numpy():
    code = (
        "import sys, fastkwire\n"
        "from fastkwire import StreamsGroupHeartbeatRequest as R\n"
        "m = R(group_id='g', member_id='m', active_tasks=[R.TaskIds(subtopology_id='0', partitions=[1])])\n"
        "assert R.decode(m.encode(0), 0) == m\n"
        "assert 'numpy' not in sys.modules, 'numpy imported'\n"
        "R.decode(m.encode(0), 0, arrays='numpy')\n"
        "assert 'numpy' in sys.modules\n"
    )
    for pure in ("0", "1"):
        subprocess.run(
            [sys.executable, "-c", code], check=True, env=dict(os.environ, FASTKWIRE_PURE=pure)
        )

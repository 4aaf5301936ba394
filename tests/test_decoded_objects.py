"""What decoding builds: defaults made the way constructors make them, and (compiled
engine) objects the cyclic collector does not have to walk."""
import gc

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
    two = F.decode(F(responses=[F.FetchableTopicResponse(partitions=[F.PartitionData(), F.PartitionData()])]).encode(16), 16)
    a, b = two.responses[0].partitions
    assert a.diverging_epoch is not b.diverging_epoch
    a.diverging_epoch.epoch = 7
    assert b.diverging_epoch.epoch == -1


def test_absent_struct_fields_default_per_object(impl):
    # At v4 the tagged structs do not exist: they still read as structs of defaults.
    F, msg = _fetch_with_defaults(impl)
    got = F.decode(msg.encode(4), 4).responses[0].partitions[0]
    assert got.current_leader == F.PartitionData().current_leader


def test_compiled_decode_leaves_nothing_for_the_collector(impl):
    if impl.__name__.endswith("_python"):
        pytest.skip("the pure engine builds ordinary objects")
    M = impl.MetadataResponse
    msg = M(topics=[M.MetadataResponseTopic(name="t", partitions=[
        M.MetadataResponsePartition(partition_index=i, replica_nodes=[1, 2], isr_nodes=[1]) for i in range(3)])])
    got = M.decode(msg.encode(12), 12)
    topic = got.topics[0]
    for obj in (got, got.topics, topic, topic.partitions, topic.partitions[0],
                topic.partitions[0].replica_nodes, topic.partitions[0].offline_replicas):
        assert not gc.is_tracked(obj), type(obj)
    # A constructed message is an ordinary, tracked object.
    assert gc.is_tracked(msg)


def _fetch_frames(impl, version):
    F = impl.FetchResponse
    msg = F(responses=[F.FetchableTopicResponse(partitions=[
        F.PartitionData(partition_index=0, records=bytes(range(200))),
        F.PartitionData(partition_index=1, records=None),
        F.PartitionData(partition_index=2, records=b""),
    ])])
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
    part = M.MetadataResponsePartition(partition_index=1, replica_nodes=list(range(-n // 2, n - n // 2)),
                                       isr_nodes=[2**31 - 1, -2**31][: n % 3], offline_replicas=[])
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

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

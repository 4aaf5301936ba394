"""Message codecs against the vectors, in both implementations.

tests/vectors/messages.json holds bodies encoded by a peer (kio or kafka-python 3);
tests/vectors/frames.json whole frames, the seed pages' among them.
"""

import json
from pathlib import Path

import pytest

import scope

from fastkwire.errors import DecodeError, EncodeError, UnsupportedVersionError

HERE = Path(__file__).parent / "vectors"
BODIES = json.loads((HERE / "messages.json").read_text())["vectors"]
FRAMES = json.loads((HERE / "frames.json").read_text())["frames"]


@pytest.mark.parametrize(
    "vec", BODIES, ids=lambda v: f"{v['message']}-v{v['version']}-{v['sample']}"
)
def test_body_vector(impl, vec):
    cls = getattr(impl, vec["message"])
    raw = bytes.fromhex(vec["hex"])
    msg = cls.decode(raw, vec["version"])
    assert msg.to_dict() == vec["value"]
    assert cls.from_dict(vec["value"]) == msg
    assert msg.encode(vec["version"]) == raw


def test_every_message_version_has_a_vector(impl):
    # the messages the project started with; the others are checked against the peers
    # with --run-slow (tests/test_peers.py)
    have = {(v["message"], v["version"]) for v in BODIES}
    for cls in map(impl.FAMILY.get, sorted(scope.SEED_MESSAGES)):
        for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            if (cls.__name__, version) == ("RequestHeader", 0):
                continue  # no peer has it; covered in test_request_header_v0
            assert (cls.__name__, version) in have


def test_request_header_v0(impl):
    raw = bytes.fromhex("000d00020000002a")
    h = impl.RequestHeader.decode(raw, 0)
    assert (h.request_api_key, h.request_api_version, h.correlation_id) == (13, 2, 42)
    assert h.client_id == ""
    assert h.encode(0) == raw
    # ClientId is ignorable: header v0 drops it rather than failing
    assert (
        impl.RequestHeader(
            request_api_key=13, request_api_version=2, correlation_id=42, client_id="x"
        ).encode(0)
        == raw
    )


@pytest.mark.parametrize("frame", FRAMES, ids=lambda f: f["name"])
def test_frame_vector(impl, frame):
    raw = bytes.fromhex(frame["hex"])
    if frame["direction"] == "request":
        header, msg = impl.decode_request(raw)
        cls = impl.REQUEST_CLASSES[frame["api_key"]]
        again = impl.encode_request(
            cls.from_dict(frame["value"]),
            frame["version"],
            frame["header"]["correlation_id"],
            frame["header"]["client_id"],
        )
    else:
        header, msg = impl.decode_response(raw, frame["api_key"], frame["version"])
        cls = impl.RESPONSE_CLASSES[frame["api_key"]]
        again = impl.encode_response(
            cls.from_dict(frame["value"]), frame["version"], frame["header"]["correlation_id"]
        )
    assert header.to_dict() == frame["header"]
    assert msg.to_dict() == frame["value"]
    assert again == raw


def test_seed_leave_group_frames_are_22_bytes(impl):
    req = impl.LeaveGroupRequest(
        members=[
            impl.LeaveGroupRequest.MemberIdentity(member_id="", group_instance_id="", reason="")
        ]
    )
    assert len(impl.encode_request(req, 5, 0, "")) == 22
    resp = impl.LeaveGroupResponse(members=[impl.LeaveGroupResponse.MemberResponse()])
    assert len(impl.encode_response(resp, 5, 0)) == 22


SEED_HEARTBEAT = {
    "group_id": "order-processors",
    "member_id": "consumer-1-abc123",
    "member_epoch": 12,
    "endpoint_information_epoch": 12,
    "instance_id": None,
    "rack_id": "abc-123",
    "rebalance_timeout_ms": 300000,
    "topology": {
        "epoch": 17,
        "subtopologies": [
            {
                "subtopology_id": "abc-123",
                "source_topics": ["value-1", "value-2"],
                "source_topic_regex": ["value-1", "value-2"],
                "state_changelog_topics": [
                    {
                        "name": "orders",
                        "partitions": 0,
                        "replication_factor": 1,
                        "topic_configs": [{"key": "retention.ms", "value": "604800000"}],
                    }
                ],
                "repartition_sink_topics": ["value-1", "value-2"],
                "repartition_source_topics": [
                    {
                        "name": "orders",
                        "partitions": 0,
                        "replication_factor": 1,
                        "topic_configs": [{"key": "retention.ms", "value": "604800000"}],
                    }
                ],
                "copartition_groups": [
                    {
                        "source_topics": [1, 2],
                        "source_topic_regex": [1, 2],
                        "repartition_source_topics": [1, 2],
                    }
                ],
            }
        ],
    },
    "active_tasks": [{"subtopology_id": "abc-123", "partitions": [1, 2, 3]}],
    "standby_tasks": [{"subtopology_id": "abc-123", "partitions": [1, 2, 3]}],
    "warmup_tasks": [{"subtopology_id": "abc-123", "partitions": [1, 2, 3]}],
    "process_id": "abc-123",
    "user_endpoint": {"host": "broker-1.kafka.local", "port": 9092},
    "client_tags": [{"key": "retention.ms", "value": "604800000"}],
    "task_offsets": [{"subtopology_id": "abc-123", "partition": 0, "offset": 284729}],
    "task_end_offsets": [{"subtopology_id": "abc-123", "partition": 0, "offset": 284729}],
    "shutdown_application": True,
}


def test_seed_streams_heartbeat_round_trips(impl):
    msg = impl.StreamsGroupHeartbeatRequest.from_dict(SEED_HEARTBEAT)
    raw = msg.encode(0)
    back = impl.StreamsGroupHeartbeatRequest.decode(raw, 0)
    assert back == msg and back.to_dict() == SEED_HEARTBEAT
    assert back.topology.subtopologies[0].copartition_groups[0].source_topics == [1, 2]
    frame = impl.encode_request(msg, 0, 99, "streams-client")
    header, again = impl.decode_request(frame)
    assert header.request_api_key == 88 and header.correlation_id == 99 and again == msg


# ---------------------------------------------------------------- object API


def test_defaults_follow_the_schema(impl):
    m = impl.LeaveGroupRequest.MemberIdentity()
    assert (m.member_id, m.group_instance_id, m.reason) == ("", None, None)
    r = impl.LeaveGroupResponse.MemberResponse()
    assert r.group_instance_id == ""  # nullable, but no null default declared
    hb = impl.StreamsGroupHeartbeatRequest()
    assert hb.rebalance_timeout_ms == -1 and hb.topology is None and hb.active_tasks is None
    assert impl.ApiVersionsResponse().finalized_features_epoch == -1
    a, b = impl.LeaveGroupRequest(), impl.LeaveGroupRequest()
    a.members.append(1)
    assert b.members == []  # no shared mutable default


def test_nested_structs_are_class_attributes(impl):
    assert impl.LeaveGroupRequest.MemberIdentity.__name__.endswith("MemberIdentity")
    for name in (
        "Topology",
        "Subtopology",
        "TopicInfo",
        "CopartitionGroup",
        "KeyValue",
        "TaskIds",
        "Endpoint",
        "TaskOffset",
    ):
        assert hasattr(impl.StreamsGroupHeartbeatRequest, name)
    for name in ("Status", "EndpointToPartitions", "TopicPartition", "TaskIds", "Endpoint"):
        assert hasattr(impl.StreamsGroupHeartbeatResponse, name)
    assert (
        impl.StreamsGroupHeartbeatRequest.TaskIds is not impl.StreamsGroupHeartbeatResponse.TaskIds
    )


def test_repr_eq_and_keyword_only(impl):
    m = impl.LeaveGroupRequest(group_id="g")
    assert repr(m) == "LeaveGroupRequest(group_id='g', member_id='', members=[])"
    assert m == impl.LeaveGroupRequest(group_id="g") and m != impl.LeaveGroupRequest(group_id="h")
    assert m != impl.LeaveGroupResponse()
    with pytest.raises(TypeError):
        impl.LeaveGroupRequest("g")
    with pytest.raises(TypeError):
        impl.LeaveGroupRequest(no_such_field=1)
    with pytest.raises(TypeError):
        hash(m)


def test_from_dict_rejects_unknown_keys(impl):
    with pytest.raises(TypeError, match="bogus"):
        impl.LeaveGroupRequest.from_dict({"group_id": "g", "bogus": 1})


# ---------------------------------------------------------------- version rules


def test_version_out_of_range(impl):
    with pytest.raises(UnsupportedVersionError, match="LeaveGroupRequest has versions 0-5, not 6"):
        impl.LeaveGroupRequest().encode(6)
    with pytest.raises(UnsupportedVersionError):
        impl.LeaveGroupRequest.decode(b"", 6)
    with pytest.raises(UnsupportedVersionError):
        impl.StreamsGroupHeartbeatRequest().encode(1)


def test_non_ignorable_field_missing_from_version(impl):
    members = [impl.LeaveGroupRequest.MemberIdentity(member_id="m")]
    with pytest.raises(UnsupportedVersionError, match=r"LeaveGroupRequest.members .*version 2"):
        impl.LeaveGroupRequest(group_id="g", members=members).encode(2)
    with pytest.raises(UnsupportedVersionError, match="member_id"):
        impl.LeaveGroupRequest(group_id="g", member_id="m").encode(3)
    with pytest.raises(UnsupportedVersionError, match="key_type"):
        impl.FindCoordinatorRequest(key="g", key_type=1).encode(0)
    with pytest.raises(UnsupportedVersionError, match="coordinator_keys"):
        impl.FindCoordinatorRequest(coordinator_keys=["g"]).encode(3)


def test_ignorable_field_is_dropped(impl):
    m = impl.LeaveGroupRequest(
        group_id="g",
        members=[
            impl.LeaveGroupRequest.MemberIdentity(
                member_id="m", group_instance_id="i", reason="bye"
            )
        ],
    )
    back = impl.LeaveGroupRequest.decode(m.encode(4), 4)
    assert back.members[0].reason is None and back.members[0].group_instance_id == "i"
    r = impl.LeaveGroupResponse(throttle_time_ms=100, error_code=25)
    assert impl.LeaveGroupResponse.decode(r.encode(0), 0).throttle_time_ms == 0


def test_nullability_is_per_version(impl):
    m = impl.LeaveGroupRequest(members=[impl.LeaveGroupRequest.MemberIdentity(member_id=None)])
    with pytest.raises(EncodeError) as info:
        m.encode(5)
    assert info.value.path == "members[0].member_id"
    hb = impl.StreamsGroupHeartbeatRequest(
        topology=impl.StreamsGroupHeartbeatRequest.Topology(subtopologies=None)
    )
    with pytest.raises(EncodeError, match="topology.subtopologies"):
        hb.encode(0)


def test_tagged_fields_known_and_unknown(impl):
    r = impl.ApiVersionsResponse(
        api_keys=[impl.ApiVersionsResponse.ApiVersion(api_key=13, min_version=0, max_version=5)],
        supported_features=[
            impl.ApiVersionsResponse.SupportedFeatureKey(
                name="metadata.version", min_version=1, max_version=20
            )
        ],
        finalized_features_epoch=7,
        zk_migration_ready=True,
        unknown_tagged_fields={9: b"\xde\xad", 4: b""},
    )
    raw = r.encode(3)
    back = impl.ApiVersionsResponse.decode(raw, 3)
    assert back == r and back.unknown_tagged_fields == {4: b"", 9: b"\xde\xad"}
    assert back.encode(3) == raw
    # Known tags are not written at their defaults; tagged fields vanish before v3.
    assert impl.ApiVersionsResponse().encode(3)[-1] == 0
    assert impl.ApiVersionsResponse.decode(r.encode(2), 2).finalized_features_epoch == -1


def test_unknown_tags_survive_in_nested_structs(impl):
    raw = bytes.fromhex("026702026d0000010702abcd00")
    msg = impl.LeaveGroupRequest.decode(raw, 5)
    assert msg.members[0].unknown_tagged_fields == {7: b"\xab\xcd"}
    assert msg.encode(5) == raw


def test_unknown_tag_cannot_shadow_a_known_one(impl):
    r = impl.ApiVersionsResponse(finalized_features_epoch=3, unknown_tagged_fields={1: b"x"})
    with pytest.raises(EncodeError, match="known field"):
        r.encode(3)


def test_encode_into(impl):
    m = impl.LeaveGroupRequest(group_id="g")
    buf = bytearray(10)
    n = m.encode_into(buf, 3, 5)
    assert bytes(buf[3 : 3 + n]) == m.encode(5) and buf[:3] == b"\0\0\0"
    with pytest.raises(EncodeError, match="buffer too small"):
        m.encode_into(bytearray(3), 1, 5)
    with pytest.raises((TypeError, BufferError)):
        m.encode_into(b"immutable", 0, 5)


def test_decode_inputs_and_trailing_bytes(impl):
    raw = impl.LeaveGroupRequest(group_id="g").encode(5)
    for data in (raw, bytearray(raw), memoryview(raw)):
        assert impl.LeaveGroupRequest.decode(data, 5).group_id == "g"
    with pytest.raises(DecodeError) as info:
        impl.LeaveGroupRequest.decode(raw + b"\0", 5)
    assert info.value.offset == len(raw) and "trailing" in info.value.reason
    msg, end = impl.LeaveGroupRequest.decode_from(b"xx" + raw, 5, 2)
    assert end == 2 + len(raw) and msg.group_id == "g"


def test_decode_error_path_and_offset(impl):
    good = impl.LeaveGroupRequest(
        group_id="g",
        members=[
            impl.LeaveGroupRequest.MemberIdentity(member_id="a"),
            impl.LeaveGroupRequest.MemberIdentity(member_id="b", reason="r"),
        ],
    ).encode(5)
    bad = bytearray(good)
    bad[-4] = 0x09  # second member's reason length now runs past the end
    with pytest.raises(DecodeError) as info:
        impl.LeaveGroupRequest.decode(bytes(bad), 5)
    assert info.value.path == "members[1].reason"
    assert info.value.offset == len(good) - 4


def test_wrong_struct_type_is_an_encode_error(impl):
    m = impl.LeaveGroupRequest(members=[impl.LeaveGroupResponse.MemberResponse()])
    with pytest.raises(EncodeError, match="expected MemberIdentity"):
        m.encode(5)
    with pytest.raises(EncodeError, match=r"members\[0\]"):
        m.encode(5)


def test_uint16_and_int_ranges_are_checked(impl):
    hb = impl.StreamsGroupHeartbeatRequest(
        user_endpoint=impl.StreamsGroupHeartbeatRequest.Endpoint(host="h", port=-1)
    )
    with pytest.raises(EncodeError, match="user_endpoint.port"):
        hb.encode(0)
    hb.user_endpoint.port = 65536
    with pytest.raises(EncodeError, match="out of range for uint16"):
        hb.encode(0)
    with pytest.raises(EncodeError, match="correlation_id"):
        impl.encode_request(impl.LeaveGroupRequest(), 5, 1 << 31)


def test_framing_errors(impl):
    frame = impl.encode_request(impl.LeaveGroupRequest(group_id="g"), 5, 1)
    with pytest.raises(DecodeError, match="frame size"):
        impl.decode_request(frame[:-1])
    bogus = frame[:4] + b"\x7f\x7f" + frame[6:]
    with pytest.raises(DecodeError, match="unknown API key"):
        impl.decode_request(bogus)
    with pytest.raises(DecodeError) as info:
        impl.decode_request(b"\0\0")
    assert info.value.offset == 0
    with pytest.raises(TypeError):
        impl.encode_request(impl.LeaveGroupResponse(), 5, 1)


def test_messages_pickle(impl):
    import pickle

    m = impl.StreamsGroupHeartbeatRequest.from_dict(SEED_HEARTBEAT)
    m.unknown_tagged_fields = {5: b"\x01"}
    again = pickle.loads(pickle.dumps(m))
    assert again == m and type(again) is type(m)
    assert again.unknown_tagged_fields == {5: b"\x01"}

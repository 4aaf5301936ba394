"""`fastkwire explain`: the annotated tree, its text form, the examples and the CLI.

The LeaveGroup v5 examples are checked against the seed page byte for byte and node
for node; random messages are cross-checked against the pure codec.
"""

import argparse
import io
import json
import os
import subprocess
import sys
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import fastkwire._messages_python as codec
from fastkwire import _pure, _schema
from fastkwire.cli import configure_explain as configure, run_explain as run
from fastkwire.errors import DecodeError, UnsupportedVersionError
from fastkwire.explain import (
    BYTES_PER_NODE,
    FREE_NODES,
    HEX_ROWS,
    MAX_ITEMS,
    NODES_PER_ITEM,
    Node,
    example,
    example_names,
    explain,
    hex_layout,
    reading_names,
    render,
    render_tree,
    response_readings,
    to_json,
)

import strategies

LEAVE_GROUP = codec.LeaveGroupRequest.API_KEY
API_VERSIONS = codec.ApiVersionsRequest.API_KEY
FETCH = codec.FetchRequest.API_KEY

# The seed page's smallest LeaveGroup v5 request and response, size prefix included.
SEED_REQUEST = bytes.fromhex("00000012000d00050000000000000001020101010000")
SEED_RESPONSE = bytes.fromhex("00000012000000000000000000000002010100000000")


def in_version(msg, version):
    """msg.to_dict() without the fields `version` does not carry (to_dict() has every
    field of every version): what explain's tree and --json hold."""

    def cut(value, struct):
        out = {f.py_name: value[f.py_name] for f in struct.fields if f.present(version)}
        for f in struct.fields:
            v = out.get(f.py_name)
            if f.struct is not None and v is not None:
                out[f.py_name] = [cut(x, f.struct) for x in v] if f.is_array else cut(v, f.struct)
        if "unknown_tagged_fields" in value:
            out["unknown_tagged_fields"] = value["unknown_tagged_fields"]
        return out

    return cut(msg.to_dict(), _schema.load(type(msg).__name__).root)


# (depth, name, type, value as shown, offset, size) of every node on the seed page.
SEED_REQUEST_TREE = [
    (0, "LeaveGroupRequest", "message v5", None, 0x00, 22),
    (1, "Frame", "", None, 0x00, 4),
    (2, "size", "int32", "18", 0x00, 4),
    (1, "RequestHeader", "v2", None, 0x04, 11),
    (2, "request_api_key", "int16", "13 (LeaveGroup)", 0x04, 2),
    (2, "request_api_version", "int16", "5", 0x06, 2),
    (2, "correlation_id", "int32", "0", 0x08, 4),
    (2, "client_id", "string", '"" (int16 len=0)', 0x0C, 2),
    (2, "tagged_fields", "uvarint", "0", 0x0E, 1),
    (1, "LeaveGroupRequest", "struct", None, 0x0F, 7),
    (2, "group_id", "string", '"" (compact, len+1=1)', 0x0F, 1),
    (2, "members", "[]MemberIdentity", "1 element", 0x10, 5),
    (3, "length", "uvarint", "2 (compact, n+1)", 0x10, 1),
    (3, "members[0]", "MemberIdentity", "struct", 0x11, 4),
    (4, "member_id", "string", '"" (compact, len+1=1)', 0x11, 1),
    (4, "group_instance_id", "string", '"" (compact, len+1=1)', 0x12, 1),
    (4, "reason", "string", '"" (compact, len+1=1)', 0x13, 1),
    (4, "tagged_fields", "uvarint", "0", 0x14, 1),
    (2, "tagged_fields", "uvarint", "0", 0x15, 1),
]
SEED_RESPONSE_TREE = [
    (0, "LeaveGroupResponse", "message v5", None, 0x00, 22),
    (1, "Frame", "", None, 0x00, 4),
    (2, "size", "int32", "18", 0x00, 4),
    (1, "ResponseHeader", "v1", None, 0x04, 5),
    (2, "correlation_id", "int32", "0", 0x04, 4),
    (2, "tagged_fields", "uvarint", "0", 0x08, 1),
    (1, "LeaveGroupResponse", "struct", None, 0x09, 13),
    (2, "throttle_time_ms", "int32", "0", 0x09, 4),
    (2, "error_code", "int16", "0 (NONE)", 0x0D, 2),
    (2, "members", "[]MemberResponse", "1 element", 0x0F, 6),
    (3, "length", "uvarint", "2 (compact, n+1)", 0x0F, 1),
    (3, "members[0]", "MemberResponse", "struct", 0x10, 5),
    (4, "member_id", "string", '"" (compact, len+1=1)', 0x10, 1),
    (4, "group_instance_id", "string", '"" (compact, len+1=1)', 0x11, 1),
    (4, "error_code", "int16", "0 (NONE)", 0x12, 2),
    (4, "tagged_fields", "uvarint", "0", 0x14, 1),
    (2, "tagged_fields", "uvarint", "0", 0x15, 1),
]


def flatten(node, depth=0):
    yield depth, node
    for child in node.children:
        yield from flatten(child, depth + 1)


def shape(root):
    return [(d, n.name, n.type, n.display, n.offset, n.size) for d, n in flatten(root)]


def leaves(root):
    """Nodes without children; a compressed span counts as one (below it, offsets are in
    the decompressed bytes)."""
    if not root.children or root.type == "compressed":
        return [root]
    return [leaf for child in root.children for leaf in leaves(child)]


def assert_tiles(root, length):
    """Leaves cover bytes 0..length once each, in order; parents span their children."""
    pos = 0
    for leaf in leaves(root):
        assert leaf.offset == pos, (leaf.name, leaf.offset, pos)
        # Only an empty body (ApiVersionsRequest v0-2) spans no bytes.
        assert leaf.size > 0 or leaf.type == "struct", leaf.name
        pos += leaf.size
    assert pos == length
    for node in root.walk():
        if node.children and node.type != "compressed":
            assert node.offset == node.children[0].offset, node.name
            assert node.end == node.children[-1].end, node.name


# ---------------------------------------------------------------- the seed examples


def test_leave_group_v5_request_example_is_the_seed_frame():
    frame, api_key, version = example("leave-group-v5")
    assert frame == SEED_REQUEST
    assert (api_key, version) == (None, None)  # a request names itself in its header
    assert shape(explain(frame)) == SEED_REQUEST_TREE


def test_leave_group_v5_response_example_is_the_seed_frame():
    frame, api_key, version = example("leave-group-v5-response")
    assert frame == SEED_RESPONSE
    assert (api_key, version) == (LEAVE_GROUP, 5)
    assert shape(explain(frame, api_key, version)) == SEED_RESPONSE_TREE


def test_seed_frames_decode_with_the_codec():
    header, msg = codec.decode_request(SEED_REQUEST)
    assert (header.request_api_key, header.request_api_version) == (LEAVE_GROUP, 5)
    assert in_version(msg, 5) == explain(SEED_REQUEST).value["body"]
    _, resp = codec.decode_response(SEED_RESPONSE, LEAVE_GROUP, 5)
    assert in_version(resp, 5) == explain(SEED_RESPONSE, LEAVE_GROUP, 5).value["body"]


def test_streams_group_heartbeat_example_is_the_smallest_full_instance():
    frame, _, _ = example("streams-group-heartbeat-v0")
    root = explain(frame)
    assert_tiles(root, len(frame))
    body = root.value["body"]
    # Every array has one element and every nullable struct is present.
    arrays = [n for n in root.walk() if n.type.startswith("[]")]
    assert arrays and all(len(n.value) == 1 for n in arrays)
    assert body["topology"] is not None and body["user_endpoint"] is not None
    assert body["rebalance_timeout_ms"] == 0  # zero, not the schema default -1
    _, msg = codec.decode_request(frame)
    assert in_version(msg, 0) == body
    markers = [n for n in root.walk() if n.name == "present"]
    assert [(m.value, m.size) for m in markers] == [(1, 1), (1, 1)]


def test_descriptions_come_from_the_schema_definitions():
    root = explain(SEED_REQUEST)
    schema = _schema.load("LeaveGroupRequest")
    members = schema.root.fields[2]
    by_name = {n.name: n for n in root.walk()}
    assert by_name["group_id"].description == schema.root.fields[0].doc
    assert by_name["members"].description == members.doc
    assert by_name["reason"].description == members.struct.fields[2].doc
    header = _schema.load("RequestHeader").root
    assert by_name["correlation_id"].description == header.fields[2].doc


def test_every_field_node_has_a_description():
    """Issue 22: a ProduceRequest v1's fields (and most converted ones) had none."""
    by_name = {n.name: n for n in explain(example("produce-v1")[0]).walk()}
    assert by_name["acks"].description == _schema.descriptions()[0]["Acks"]
    assert by_name["acks"].description.startswith("Replicas that must have the records")
    for name in example_names():
        frame, api_key, version = example(name)
        header, body = explain(frame, api_key, version).children[1:]
        for node in [n for part in (header, body) for c in part.children for n in c.walk()]:
            # Array elements are described by their array; every other node has words.
            assert node.description or node.name.endswith("]"), (name, node)


def test_every_example_name_builds_a_frame_that_explains_and_decodes():
    names = example_names()
    assert {"leave-group-v5", "leave-group-v5-response", "streams-group-heartbeat-v0"} <= set(names)
    for name in names:
        frame, api_key, version = example(name)
        root = explain(frame, api_key, version)
        assert_tiles(root, len(frame))
        if api_key is None:
            header, msg = codec.decode_request(frame)
        else:
            _, msg = codec.decode_response(frame, api_key, version)
        assert (
            in_version(msg, header.request_api_version if api_key is None else version)
            == root.value["body"]
        ), name


def test_unknown_example_is_rejected():
    with pytest.raises(ValueError, match="unknown example"):
        example("leave-group-v9")


# ---------------------------------------------------------------- text output


def test_tree_text_follows_the_seed_layout():
    lines = render_tree(explain(SEED_REQUEST), doc_width=None).splitlines()
    assert lines[0] == "LeaveGroupRequest message v5 [0x0000, 22B]"
    assert lines[1] == "+-- Frame [0x0000, 4B] length-delimited framing"
    assert lines[2].startswith("| +-- size int32 = 18 [0x0000, 4B] ")
    assert (
        lines[4]
        == "| +-- request_api_key int16 = 13 (LeaveGroup) [0x0004, 2B] Which API the request is for."
    )
    assert lines[7].startswith('| +-- client_id string = "" (int16 len=0) [0x000c, 2B] ')
    assert lines[9].startswith("+-- LeaveGroupRequest struct [0x000f, 7B] ")
    assert lines[12] == "  | +-- length uvarint = 2 (compact, n+1) [0x0010, 1B] 1 element follows"
    assert lines[13] == "  | +-- members[0] MemberIdentity = struct [0x0011, 4B]"
    assert lines[16].startswith('  |   +-- reason string = "" (compact, len+1=1) [0x0013, 1B] ')
    assert (
        lines[18]
        == "  +-- tagged_fields uvarint = 0 [0x0015, 1B] number of tagged fields in this struct"
    )
    assert len(lines) == len(SEED_REQUEST_TREE)


def test_long_descriptions_are_shortened_unless_asked():
    root = explain(SEED_REQUEST)
    client_id = next(n for n in root.walk() if n.name == "client_id")
    assert len(client_id.description) > 80
    short = render_tree(root).splitlines()[7]
    assert short.endswith("...") and client_id.description not in short
    assert client_id.description in render_tree(root, doc_width=None).splitlines()[7]


def test_hex_layout_has_offsets_and_16_bytes_per_row():
    lines = hex_layout(SEED_REQUEST).splitlines()
    assert lines[0] == "byte layout (22 bytes, 16 bytes per row)"
    assert lines[1].split() == list("0123456789ABCDEF")
    assert lines[2].startswith("0000  00 00 00 12 00 0d 00 05 00 00 00 00 00 00 00 01  ")
    assert lines[3].startswith("0010  02 01 01 01 00 00 ")
    assert len(lines) == 4
    # Printable bytes show in the text column.
    assert hex_layout(b"\x00abc").splitlines()[2].endswith(".abc")
    assert hex_layout(bytes(0x10001), max_rows=None).splitlines()[-1].startswith("10000  00")


def test_hex_layout_stops_after_max_rows_with_a_note():
    lines = hex_layout(bytes(0x10001)).splitlines()  # 4097 rows, 4096 by default
    assert len(lines) == 2 + 4096 + 1
    assert lines[-2].startswith("0fff0  00")
    assert lines[-1] == "... 1 more row (bytes 0x10000-0x10000) not shown"
    lines = hex_layout(bytes(100), max_rows=2).splitlines()
    assert lines[-1] == "... 5 more rows (bytes 0x20-0x63) not shown"
    assert len(hex_layout(bytes(10_000_000), max_rows=3)) < 400


def test_render_has_title_layout_and_tree():
    text = render(SEED_RESPONSE, explain(SEED_RESPONSE, LEAVE_GROUP, 5))
    assert text.splitlines()[0] == "LeaveGroupResponse v5, response header v1, 22 bytes on the wire"
    assert "byte layout (22 bytes, 16 bytes per row)" in text
    assert "object tree\nLeaveGroupResponse message v5 [0x0000, 22B]" in text


def test_json_is_the_decoded_message():
    d = json.loads(to_json(explain(SEED_REQUEST)))
    assert d["header"] == {
        "request_api_key": 13,
        "request_api_version": 5,
        "correlation_id": 0,
        "client_id": "",
    }
    assert d["body"]["members"] == [{"member_id": "", "group_instance_id": "", "reason": ""}]
    assert (d["message"], d["version"], d["header_version"], d["size"]) == (
        "LeaveGroupRequest",
        5,
        2,
        18,
    )


# ---------------------------------------------------------------- decoding details


def test_non_flexible_version_uses_int16_strings_and_int32_counts():
    msg = codec.LeaveGroupRequest(
        group_id="g",
        members=[codec.LeaveGroupRequest.MemberIdentity(member_id="m", group_instance_id=None)],
    )
    frame = codec.encode_request(msg, 3, 99, None)
    root = explain(frame)
    assert_tiles(root, len(frame))
    nodes = {n.name: n for n in root.walk()}
    assert nodes["RequestHeader"].type == "v1"
    assert "tagged_fields" not in nodes
    assert nodes["client_id"].display == "null (int16 len=-1)"
    assert nodes["group_id"].display == '"g" (int16 len=1)'
    assert (nodes["length"].type, nodes["length"].display, nodes["length"].size) == (
        "int32",
        "1",
        4,
    )
    assert nodes["group_instance_id"].display == "null (int16 len=-1)"
    assert nodes["correlation_id"].value == 99


def test_null_struct_and_null_arrays():
    msg = codec.StreamsGroupHeartbeatRequest(group_id="g", member_id="m")
    frame = codec.encode_request(msg, 0, 1)
    root = explain(frame)
    assert_tiles(root, len(frame))
    nodes = {n.name: n for n in root.walk()}
    topology = nodes["topology"]
    assert (topology.display, topology.value, topology.size) == ("null", None, 1)
    assert [(c.name, c.value, c.display) for c in topology.children] == [
        ("present", -1, "-1 (null)")
    ]
    tasks = nodes["active_tasks"]
    assert (tasks.display, tasks.value) == ("null", None)
    assert [(c.name, c.display) for c in tasks.children] == [("length", "0 (compact, null)")]
    assert nodes["rebalance_timeout_ms"].value == -1
    assert nodes["instance_id"].display == "null (compact, len+1=0)"


def api_versions_v3(**tagged):
    msg = codec.ApiVersionsResponse(
        api_keys=[codec.ApiVersionsResponse.ApiVersion(api_key=13, min_version=0, max_version=5)],
        **tagged,
    )
    return codec.encode_response(msg, 3, 9)


def test_known_tagged_fields_are_decoded_by_tag():
    frame = api_versions_v3(
        finalized_features_epoch=7,
        supported_features=[
            codec.ApiVersionsResponse.SupportedFeatureKey(
                name="kraft", min_version=0, max_version=1
            )
        ],
    )
    root = explain(frame, API_VERSIONS, 3)
    assert_tiles(root, len(frame))
    assert root.value["header_version"] == 0  # ApiVersions answers with header v0
    body = root.children[-1]
    section = body.children[-1]
    assert (section.name, section.value) == ("tagged_fields", 2)
    assert [c.name for c in section.children] == [
        "count",
        "supported_features",
        "finalized_features_epoch",
    ]
    epoch = section.children[2]
    assert [c.name for c in epoch.children] == ["tag", "size", "finalized_features_epoch"]
    assert (epoch.display, epoch.children[1].value) == ("tag 1", 8)
    assert (epoch.children[2].type, epoch.children[2].value) == ("int64", 7)
    assert root.value["body"]["supported_features"] == [
        {"name": "kraft", "min_version": 0, "max_version": 1}
    ]
    assert root.value["body"]["zk_migration_ready"] is False  # absent: its default
    assert next(n for n in root.walk() if n.name == "api_key").display == "13 (LeaveGroup)"


def test_unknown_tagged_fields_are_shown_as_raw_bytes():
    base = api_versions_v3()
    assert base[-1] == 0  # empty tagged-field section at the end
    body = base[4:-1] + bytes([1, 9, 3]) + b"\xaa\xbb\xcc"
    frame = len(body).to_bytes(4, "big") + body
    root = explain(frame, API_VERSIONS, 3)
    assert_tiles(root, len(frame))
    entry = root.children[-1].children[-1].children[1]
    assert (entry.name, entry.display) == ("unknown", "tag 9")
    assert [(c.name, c.display) for c in entry.children] == [
        ("tag", "9"),
        ("size", "3"),
        ("data", "aabbcc"),
    ]
    assert root.value["body"]["unknown_tagged_fields"] == {9: b"\xaa\xbb\xcc"}
    assert json.loads(to_json(root))["body"]["unknown_tagged_fields"] == {"9": "aabbcc"}
    _, msg = codec.decode_response(frame, API_VERSIONS, 3)
    assert msg.unknown_tagged_fields == {9: b"\xaa\xbb\xcc"}


# ---------------------------------------------------------------- malformed frames


def leave_group_with_reason():
    msg = codec.LeaveGroupRequest(
        group_id="g",
        members=[
            codec.LeaveGroupRequest.MemberIdentity(
                member_id="m", group_instance_id="inst", reason="bye"
            )
        ],
    )
    frame = codec.encode_request(msg, 5, 1, "c")
    reason = next(n for n in explain(frame).walk() if n.name == "reason")
    return frame, reason.offset


def test_truncated_frame_gives_the_partial_tree_and_the_failing_field():
    full, at = leave_group_with_reason()
    cut = full[: at + 2]  # the length byte and one of the three of "bye"
    for frame in (with_size(cut[4:]), cut):
        with pytest.raises(DecodeError) as info:
            explain(frame)
        with pytest.raises(DecodeError) as theirs:
            codec.decode_request(frame)
        err = info.value
        assert (err.offset, err.reason) == (theirs.value.offset, theirs.value.reason)
        tree = err.partial_tree
        assert isinstance(tree, Node)
        failed = [n for n in tree.walk() if n.error is not None]
        assert [(n.name, n.offset, n.size) for n in failed] == [("reason", at, 0)]
        failure = failed[0].error
        assert (failure.offset, failure.path) == (at, "members[0].reason")
        assert failure.reason == "truncated: needs 4 bytes, 2 left"
    # With its size cut too, the frame fails where decode fails; with the size it had,
    # decode refuses it by its size, and the tree still shows where reading stopped.
    assert (
        err.reason
        == f"frame size {len(full) - 4} does not match the {len(cut) - 4} bytes that follow"
    )
    # Everything before the failing field is complete, with its values.
    names = [n.name for n in tree.walk()]
    assert names[-3:] == ["member_id", "group_instance_id", "reason"]
    assert next(n for n in tree.walk() if n.name == "group_instance_id").value == "inst"
    # Nodes still open when it failed end where it failed.
    assert next(n for n in tree.walk() if n.name == "members").end == at
    assert tree.value["message"] == "LeaveGroupRequest"


@pytest.mark.parametrize("max_items", [MAX_ITEMS, 0])  # 0: every element summarised
@pytest.mark.parametrize(
    "name",
    [
        "leave-group-v5",
        "leave-group-v3",
        "streams-group-heartbeat-v0",
        "api-versions-v3-response",
        "find-coordinator-v0-response",
    ],
)
def test_errors_match_the_codec_at_every_truncation(name, max_items):
    frame, api_key, version = example(name)
    for cut in range(8, len(frame)):
        short = (cut - 4).to_bytes(4, "big") + frame[4:cut]
        with pytest.raises(DecodeError) as mine:
            explain(short, api_key, version, max_items=max_items)
        with pytest.raises(DecodeError) as theirs:
            if api_key is None:
                codec.decode_request(short)
            else:
                codec.decode_response(short, api_key, version)
        assert (mine.value.offset, mine.value.reason) == (theirs.value.offset, theirs.value.reason)
        if mine.value.offset >= explain(frame, api_key, version).children[2].offset:
            assert mine.value.path == theirs.value.path  # body paths agree too
        tree = mine.value.partial_tree
        assert all(n.size is not None for n in tree.walk())


def test_wrong_size_prefix_still_shows_the_whole_message():
    frame = (17).to_bytes(4, "big") + SEED_REQUEST[4:]
    with pytest.raises(DecodeError) as info:
        explain(frame)
    assert info.value.offset == 0
    assert info.value.reason == "frame size 17 does not match the 18 bytes that follow"
    expected = [
        (2, "size", "int32", "17", 0, 4) if row[1] == "size" else row for row in SEED_REQUEST_TREE
    ]
    assert shape(info.value.partial_tree) == expected


def test_trailing_bytes_after_the_message():
    body = SEED_REQUEST[4:] + b"\x00"
    with pytest.raises(DecodeError) as info:
        explain(len(body).to_bytes(4, "big") + body)
    assert (info.value.offset, info.value.reason) == (22, "1 trailing byte after the message")
    # A complete frame followed by other bytes: its size is wrong, as decode_request says
    # (explain once said "2 trailing bytes"), and the tree shows the whole message.
    with pytest.raises(DecodeError) as info:
        explain(SEED_REQUEST + b"\x00\x00")
    assert (info.value.offset, info.value.reason) == (
        0,
        "frame size 18 does not match the 20 bytes that follow",
    )
    with pytest.raises(DecodeError) as theirs:
        codec.decode_request(SEED_REQUEST + b"\x00\x00")
    assert theirs.value.reason == info.value.reason
    assert info.value.partial_tree.children[2].end == 22


def test_tagged_value_must_fill_its_size():
    base = api_versions_v3()
    # Tag 1 (an int64) declared 9 bytes long: one byte too many.
    body = base[4:-1] + bytes([1, 1, 9]) + bytes(9)
    frame = len(body).to_bytes(4, "big") + body
    with pytest.raises(DecodeError) as info:
        explain(frame, API_VERSIONS, 3)
    payload = len(frame) - 9
    assert (info.value.offset, info.value.path) == (payload, "finalized_features_epoch")
    assert info.value.reason == "tagged field 1 does not fill its declared size"
    with pytest.raises(DecodeError) as theirs:
        codec.decode_response(frame, API_VERSIONS, 3)
    assert (theirs.value.offset, theirs.value.reason) == (payload, info.value.reason)


def test_unknown_api_key_and_version_are_refused_as_decode_request_refuses_them():
    """The same error as the codec's decode_request, whatever else the frame holds (explain
    once said "has no version 99" where decode_request said "has versions 0-5, not 99",
    and a short frame claiming version 99 reported a truncation first)."""
    frame = bytearray(SEED_REQUEST)
    frame[4:6] = (999).to_bytes(2, "big")
    with pytest.raises(DecodeError) as info:
        explain(bytes(frame))
    assert (info.value.offset, info.value.reason) == (4, "unknown API key 999")
    header = info.value.partial_tree.children[1]  # the header is still shown
    assert header.value["request_api_key"] == 999 and header.type == "v1"
    with pytest.raises(DecodeError) as theirs:
        codec.decode_request(bytes(frame))
    assert (theirs.value.offset, theirs.value.reason) == (4, "unknown API key 999")
    frame[4:8] = bytes.fromhex("000d0063")
    for data in (bytes(frame), with_size(bytes(frame[4:9]))):
        with pytest.raises(UnsupportedVersionError) as info:
            explain(data)
        assert str(info.value) == "LeaveGroupRequest has versions 0-5, not 99"
    with pytest.raises(UnsupportedVersionError) as theirs:
        codec.decode_request(bytes(frame))
    assert str(theirs.value) == str(info.value)


def test_bad_null_marker():
    frame, _, _ = example("streams-group-heartbeat-v0")
    root = explain(frame)
    marker = next(n for n in root.walk() if n.name == "present")
    bad = bytearray(frame)
    bad[marker.offset] = 2
    with pytest.raises(DecodeError) as info:
        explain(bytes(bad))
    assert (info.value.offset, info.value.path) == (marker.offset, "topology")
    failed = [n for n in info.value.partial_tree.walk() if n.error is not None]
    assert [n.name for n in failed] == ["present"]


def test_response_api_given_by_name():
    tree = shape(explain(SEED_RESPONSE, LEAVE_GROUP, 5))
    assert shape(explain(SEED_RESPONSE, "LeaveGroup", 5)) == tree
    assert shape(explain(SEED_RESPONSE, "LeaveGroupResponse", 5)) == tree
    with pytest.raises(ValueError, match="api_key: no API named 'LeaveGroop'"):
        explain(SEED_RESPONSE, "LeaveGroop", 5)


def test_response_arguments_are_checked():
    with pytest.raises(ValueError, match="both"):
        explain(SEED_RESPONSE, api_key=LEAVE_GROUP)
    with pytest.raises(ValueError, match="no response schema"):
        explain(SEED_RESPONSE, 999, 0)
    with pytest.raises(UnsupportedVersionError):
        explain(SEED_RESPONSE, LEAVE_GROUP, 6)


def test_too_short_for_a_size_prefix():
    with pytest.raises(DecodeError) as info:
        explain(b"\x00\x00")
    assert (info.value.offset, info.value.reason) == (0, "truncated: needs 4 bytes, 2 left")
    assert [n.name for n in info.value.partial_tree.walk()] == ["frame", "Frame", "size"]


# ---------------------------------------------------------------- against the codec, at random

MESSAGES = [
    (m.name, v)
    for m in _schema.all_messages()
    if m.kind != "header"
    for v in range(m.versions.low, m.versions.high + 1)
]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(MESSAGES).flatmap(
        lambda mv: st.tuples(st.just(mv), strategies.message_dicts(*mv))
    ),
    st.integers(-(2**31), 2**31 - 1),
)
def test_random_messages_agree_with_the_codec(case, correlation_id):
    (name, version), d = case
    cls = getattr(codec, name)
    msg = cls.from_dict(d)
    if name.endswith("Request"):
        frame = codec.encode_request(msg, version, correlation_id, "client")
        root = explain(frame)
        assert root.value["header"]["client_id"] == "client"
    else:
        frame = codec.encode_response(msg, version, correlation_id)
        root = explain(frame, cls.API_KEY, version)
    assert_tiles(root, len(frame))
    assert root.value["header"]["correlation_id"] == correlation_id
    assert root.value["body"] == in_version(msg, version)
    json.loads(to_json(root))


# ---------------------------------------------------------------- long arrays: summarised, still checked


def with_size(body: bytes) -> bytes:
    return len(body).to_bytes(4, "big") + body


def leave_group_frame(members, bad_member=None, bad=b""):
    """A LeaveGroup v5 request with `members` smallest members (4 bytes each, all strings
    empty), built by hand so that big ones are quick; member `bad_member` is `bad` instead."""
    body = bytearray(bytes.fromhex("000d000500000001000000") + b"\x02g")
    _pure.w_uvarint(body, members + 1)
    for i in range(members):
        body += bad if i == bad_member else b"\x01\x01\x01\x00"
    return with_size(bytes(body + b"\x00"))


def members_node(root):
    return next(n for n in root.walk() if n.name == "members")


def test_long_array_shows_max_items_elements_then_one_summary():
    frame = leave_group_frame(250)
    root = explain(frame, max_items=100)
    assert_tiles(root, len(frame))
    members = members_node(root)
    assert members.display == "250 elements"
    assert [c.name for c in members.children[:3]] == ["length", "members[0]", "members[1]"]
    assert len(members.children) == 1 + 100 + 1
    summary = members.children[-1]
    hidden = members.children[1].offset + 100 * 4
    assert (summary.name, summary.type, summary.value) == ("members[100..249]", "summary", 150)
    assert (summary.offset, summary.size, summary.children) == (hidden, 150 * 4, [])
    assert summary.display == "150 more elements, not shown"
    # Values are kept for the shown elements only.
    assert (
        root.value["body"]["members"]
        == [{"member_id": "", "group_instance_id": "", "reason": ""}] * 100
    )
    line = next(x for x in render_tree(root).splitlines() if "summary" in x)
    assert line == (
        f"  | +-- members[100..249] summary = 150 more elements, not shown "
        f"[0x{hidden:04x}, 600B] read and checked, not shown (max_items, --max-items shows more)"
    )
    assert shape(explain(frame)) == shape(root)  # 100 is the default
    everything = explain(frame, max_items=None)
    assert len(members_node(everything).children) == 251
    assert len(everything.value["body"]["members"]) == 250
    nothing = members_node(explain(frame, max_items=0))
    assert [(c.name, c.size) for c in nothing.children[1:]] == [("members[0..249]", 1000)]


def test_max_items_must_be_a_count_or_none():
    for bad in (-1, True, 1.5, "3"):
        with pytest.raises(ValueError, match="max_items"):
            explain(SEED_REQUEST, max_items=bad)


def nested_heartbeat(k, version=0):
    """StreamsGroupHeartbeat with k subtopologies of k changelog topics of k empty configs."""
    shb = codec.StreamsGroupHeartbeatRequest
    topic = shb.TopicInfo(name="", topic_configs=[shb.KeyValue(key="", value="")] * k)
    sub = shb.Subtopology(subtopology_id="", state_changelog_topics=[topic] * k)
    msg = shb(group_id="g", member_id="m", topology=shb.Topology(subtopologies=[sub] * k))
    return codec.encode_request(msg, version, 1)


def test_the_whole_tree_has_a_node_budget():
    # 30 shown of each of three nested arrays would be 27,000 configs: the budget stops it.
    frame = nested_heartbeat(30)
    root = explain(frame, max_items=30)
    assert_tiles(root, len(frame))
    nodes = sum(1 for _ in root.walk())
    assert NODES_PER_ITEM * 30 <= nodes <= NODES_PER_ITEM * 30 + 100
    # Spent within the first subtopology's topics: the rest of each array is summarised.
    subtopologies = next(n for n in root.walk() if n.name == "subtopologies")
    assert [c.name for c in subtopologies.children] == [
        "length",
        "subtopologies[0]",
        "subtopologies[1..29]",
    ]
    topics = next(n for n in subtopologies.walk() if n.name == "state_changelog_topics")
    assert topics.children[-1].type == "summary" and len(topics.children) < 1 + 30
    configs = [n for n in topics.walk() if n.name == "topic_configs"]
    assert sum(1 for n in configs if n.children[-1].type == "summary") == 1
    full = explain(frame, max_items=None)
    assert sum(1 for _ in full.walk()) > 27_000
    body = frame[root.children[2].offset :]
    assert full.value["body"] == in_version(codec.StreamsGroupHeartbeatRequest.decode(body, 0), 0)
    # A small dense frame: the budget is also a few hundred nodes plus one per 4 bytes.
    small = nested_heartbeat(13)
    assert len(small) < 9_000
    nodes = sum(1 for _ in explain(small).walk())
    budget = FREE_NODES + len(small) // BYTES_PER_NODE
    assert budget <= nodes <= budget + 100
    assert sum(1 for _ in explain(small, max_items=None).walk()) > 4 * 13**3


def test_malformed_element_past_the_summary_is_reported_at_its_offset(impl):
    # Member 250 of 300 has a MemberId of one byte that is not UTF-8.
    frame = leave_group_frame(300, bad_member=250, bad=b"\x02\xff\x01\x01\x00")
    with pytest.raises(DecodeError) as theirs:
        impl.decode_request(frame)
    members_at = 4 + 11 + 2 + 2  # size, header, group id, the count (uvarint 301)
    at = members_at + 250 * 4
    assert (theirs.value.offset, theirs.value.path) == (at, "members[250].member_id")
    for max_items in (MAX_ITEMS, 0, 7):
        with pytest.raises(DecodeError) as mine:
            explain(frame, max_items=max_items)
        err = mine.value
        assert (err.offset, err.reason, err.path) == (
            theirs.value.offset,
            theirs.value.reason,
            "members[250].member_id",
        )
        # The summary is the failing node, from the first hidden element to the error.
        failed = [n for n in err.partial_tree.walk() if n.error is not None]
        assert [(n.type, n.offset, n.end) for n in failed] == [
            ("summary", members_at + max_items * 4, at)
        ]
        assert f"!! {err.reason}" in render_tree(err.partial_tree)


def test_truncated_tail_of_a_summarised_array_fails_like_the_codec(impl):
    full = leave_group_frame(300)
    for cut in (len(full) - 1, len(full) - 3, len(full) - 600, len(full) - 601):
        frame = with_size(full[4:cut])
        with pytest.raises(DecodeError) as theirs:
            impl.decode_request(frame)
        with pytest.raises(DecodeError) as mine:
            explain(frame)
        assert (mine.value.offset, mine.value.reason, mine.value.path) == (
            theirs.value.offset,
            theirs.value.reason,
            theirs.value.path,
        )


def api_versions_with_tags(tags: dict):
    """An ApiVersionsResponse v3 whose tagged fields are `tags` ({tag: raw bytes}), in order."""
    base = api_versions_v3()
    body = bytearray(base[4:-1])
    _pure.w_uvarint(body, len(tags))
    for tag, raw in tags.items():
        _pure.w_uvarint(body, tag)
        _pure.w_uvarint(body, len(raw))
        body += raw
    return with_size(bytes(body))


def test_many_tagged_fields_are_summarised_and_still_checked(impl):
    tags = {t: b"\xaa" for t in range(10, 160)}
    tags[1] = (7).to_bytes(8, "big")  # a known one (FinalizedFeaturesEpoch)
    frame = api_versions_with_tags(dict(sorted(tags.items())))
    root = explain(frame, API_VERSIONS, 3, max_items=100)
    assert_tiles(root, len(frame))
    section = root.children[-1].children[-1]
    assert (section.name, len(section.children)) == ("tagged_fields", 1 + 100 + 1)
    summary = section.children[-1]
    assert (summary.name, summary.type, summary.value) == (
        "tagged fields [100..150]",
        "summary",
        51,
    )
    assert summary.display == "51 more tagged fields, not shown"
    assert root.value["body"]["finalized_features_epoch"] == 7
    # Out of order past the cut: the same error as the codec, from the summary.
    tags = {t: b"" for t in range(10, 160)}
    bad = api_versions_with_tags({**tags, 5: b""})
    with pytest.raises(DecodeError) as theirs:
        impl.decode_response(bad, API_VERSIONS, 3)
    with pytest.raises(DecodeError) as mine:
        explain(bad, API_VERSIONS, 3)
    assert (mine.value.offset, mine.value.reason) == (theirs.value.offset, theirs.value.reason)
    assert mine.value.reason == "tagged field 5 out of order or repeated"
    assert [n.type for n in mine.value.partial_tree.walk() if n.error] == ["summary"]
    # A known tag (an int64) that does not fill its size, past the cut; tag 0 is an empty array.
    wrong = api_versions_with_tags({0: b"\x01", 1: bytes(9)})
    for max_items in (0, 1):
        with pytest.raises(DecodeError) as mine:
            explain(wrong, API_VERSIONS, 3, max_items=max_items)
        with pytest.raises(DecodeError) as theirs:
            impl.decode_response(wrong, API_VERSIONS, 3)
        assert (mine.value.offset, mine.value.reason, mine.value.path) == (
            theirs.value.offset,
            theirs.value.reason,
            "finalized_features_epoch",
        )


def outcome(read):
    """(offset, reason, path) of the DecodeError `read()` raises, or None if it succeeds."""
    try:
        read()
    except DecodeError as e:
        return e.offset, e.reason, e.path
    return None


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.sampled_from(MESSAGES).flatmap(
        lambda mv: st.tuples(st.just(mv), strategies.message_dicts(*mv))
    ),
    st.data(),
)
def test_reading_without_showing_fails_like_reading_with_showing(impl, case, data):
    # max_items=0 reads every element with the summaries' checks, None with the nodes'.
    (name, version), d = case
    cls = getattr(codec, name)
    msg = cls.from_dict(d)
    if name.endswith("Request"):
        frame, args = codec.encode_request(msg, version, 1, "c"), ()
    else:
        frame, args = codec.encode_response(msg, version, 1), (cls.API_KEY, version)
    body_at = explain(frame, *args).children[2].offset
    if body_at == len(frame):
        return
    at = data.draw(st.integers(body_at, len(frame) - 1))
    if data.draw(st.booleans()):
        broken = with_size(frame[4:at])
    else:
        broken = bytearray(frame)
        broken[at] = data.draw(st.sampled_from([0, 1, 2, 0x7F, 0x80, 0xFF, broken[at] ^ 1]))
        broken = bytes(broken)
    shown = outcome(lambda: explain(broken, *args, max_items=None))
    assert outcome(lambda: explain(broken, *args, max_items=0)) == shown
    decode = (
        (lambda: impl.decode_request(broken))
        if not args
        else (lambda: impl.decode_response(broken, *args))
    )
    theirs = outcome(decode)
    assert (shown is None) == (theirs is None)
    if shown is not None:
        assert shown[:2] == theirs[:2]


# ---------------------------------------------------------------- bounded cost on adversarial frames


def empty_tasks_frame(size):
    shb = codec.StreamsGroupHeartbeatRequest
    tasks = [shb.TaskIds(subtopology_id="", partitions=[])] * (size // 3)  # 3 bytes each
    return codec.encode_request(shb(group_id="g", member_id="m", active_tasks=tasks), 0, 1), ()


ADVERSARIAL = {
    "leave-group members": lambda size: (leave_group_frame(size // 4), ()),
    "empty tasks": empty_tasks_frame,
    "nested arrays": lambda size: (nested_heartbeat(round((size / 3.5) ** (1 / 3))), ()),
    "tagged fields": lambda size: (
        api_versions_with_tags({t: b"" for t in range(10, size // 4)}),
        (API_VERSIONS, 3),
    ),
}
# tracemalloc slows explain down ~8 times: 1 MiB frames (4-5 s each) are in the slow runs.
SIZES = [
    ("leave-group members", 1 << 18),
    ("empty tasks", 1 << 16),
    ("nested arrays", 1 << 16),
    ("nested arrays", 1 << 13),
    ("tagged fields", 1 << 18),
] + [pytest.param(kind, 1 << 20, marks=pytest.mark.slow) for kind in ADVERSARIAL]


@pytest.mark.parametrize("kind, size", SIZES)
def test_memory_stays_small_on_adversarial_frames(kind, size):
    frame, args = ADVERSARIAL[kind](size)
    assert size * 0.8 < len(frame) < size * 1.2
    explain(ADVERSARIAL[kind](100)[0], *args)  # schemas and plans loaded outside the trace
    tracemalloc.start()
    try:
        root = explain(frame, *args)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100 * len(frame), f"{peak / len(frame):.0f} bytes per input byte"
    # Not just under the line: a bounded tree plus a few bytes per input byte.
    assert peak < (8 << 20) + 4 * len(frame), peak
    assert sum(1 for _ in root.walk()) <= NODES_PER_ITEM * MAX_ITEMS + 100


def test_render_of_a_big_frame_is_bounded():
    frame = leave_group_frame(1 << 18)  # 1 MiB
    text = render(frame, explain(frame))
    lines = text.splitlines()
    assert f"... {(len(frame) - 16 * HEX_ROWS + 15) // 16:,} more rows (bytes 0x10000-" in text
    assert len(lines) < HEX_ROWS + 1000  # the hex rows shown, and about 100 members
    assert len(text) < 500_000  # 1 MiB in full would be over 5 MB


# ---------------------------------------------------------------- strings from the frame are inert

NASTY = '\x1b[2J\x1b]0;owned\x07\u202egnp.exe\x9b31m\r\nfake\x00\x7f"\\caf\u00e9\u2028'


def nasty_frame():
    msg = codec.LeaveGroupRequest(
        group_id=NASTY,
        members=[codec.LeaveGroupRequest.MemberIdentity(member_id="m", reason=NASTY)],
    )
    return codec.encode_request(msg, 5, 1, "c")


def test_control_characters_in_strings_are_escaped_in_the_tree():
    text = render(nasty_frame(), explain(nasty_frame()))
    assert all(c.isprintable() for line in text.split("\n") for c in line)
    escaped = '"\\x1b[2J\\x1b]0;owned\\x07\\u202egnp.exe\\x9b31m\\r\\nfake\\x00\\x7f\\"\\\\caf\u00e9\\u2028"'
    lines = [x for x in text.split("\n") if escaped in x]
    assert [x.split("+-- ")[1].split()[0] for x in lines] == ["group_id", "reason"]


def test_json_is_ascii_and_reads_back_the_same_strings():
    out = to_json(explain(nasty_frame()))
    assert out.isascii() and all(c.isprintable() for c in out.replace("\n", ""))
    assert json.loads(out)["body"]["group_id"] == NASTY


# ---------------------------------------------------------------- command line


def cli(*argv, stdin=b""):
    args = configure(argparse.ArgumentParser()).parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    fake_in = io.TextIOWrapper(io.BytesIO(stdin))
    code = run(args, stdout=out, stderr=err, stdin=fake_in)
    return code, out.getvalue(), err.getvalue()


def test_cli_hex_argument_prints_layout_and_tree():
    code, out, err = cli(SEED_REQUEST.hex())
    assert (code, err) == (0, "")
    assert out.startswith("LeaveGroupRequest v5, request header v2, 22 bytes on the wire\n")
    assert "0010  02 01 01 01 00 00" in out
    assert out.rstrip().endswith(
        "+-- tagged_fields uvarint = 0 [0x0015, 1B] number of tagged fields in this struct"
    )


def test_cli_hex_may_be_split_and_spaced():
    spaced = " ".join(f"{b:02x}" for b in SEED_REQUEST)
    assert cli(*spaced.split())[1] == cli(SEED_REQUEST.hex())[1]


def test_cli_reads_hex_or_binary_from_a_file_and_stdin(tmp_path):
    expected = cli(SEED_REQUEST.hex())[1]
    (tmp_path / "f.bin").write_bytes(SEED_REQUEST)
    (tmp_path / "f.hex").write_text(
        "0x" + SEED_REQUEST.hex()[:20] + "\n" + SEED_REQUEST.hex()[20:] + "\n"
    )
    assert cli("--file", str(tmp_path / "f.bin")) == (0, expected, "")
    assert cli("--file", str(tmp_path / "f.hex")) == (0, expected, "")
    assert cli(stdin=SEED_REQUEST) == (0, expected, "")
    assert cli("-f", "-", stdin=SEED_REQUEST.hex().encode()) == (0, expected, "")


def test_cli_refuses_two_frames(tmp_path):
    """Hex and --file (or -f - for stdin) at once: refused, not one silently ignored."""
    (tmp_path / "f.bin").write_bytes(SEED_RESPONSE)
    for argv in (
        ("--file", str(tmp_path / "f.bin"), SEED_REQUEST.hex()),
        ("-f", "-", SEED_REQUEST.hex()),
    ):
        code, out, err = cli(*argv, stdin=SEED_RESPONSE)
        assert (code, out) == (2, "") and "not both" in err


def test_cli_version():
    import fastkwire
    from fastkwire.cli import main

    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire", "--version"], capture_output=True, text=True
    )
    core = "compiled core" if fastkwire.implementation == "cython" else "pure-Python core"
    assert done.stdout.startswith(f"fastkwire {fastkwire.__version__} ({core}")


def test_cli_response_needs_api_and_version():
    code, out, err = cli("--api", "LeaveGroup", "--version", "5", SEED_RESPONSE.hex())
    assert code == 0 and "LeaveGroupResponse message v5 [0x0000, 22B]" in out
    assert cli("--api", "leave-group", "--version", "5", SEED_RESPONSE.hex())[1] == out
    assert cli("--api", "13", "--version", "5", SEED_RESPONSE.hex())[1] == out
    code, out, err = cli("--api", "13", SEED_RESPONSE.hex())
    assert code == 2 and out == "" and "--api and --api-version" in err
    with pytest.raises(SystemExit):
        cli("--api", "NoSuchApi", "--version", "1", SEED_RESPONSE.hex())


def leave_group_v5_response():
    """A LeaveGroup v5 response that no other API's response reads (the seed's reads as
    several)."""
    resp = codec.LeaveGroupResponse(
        members=[
            codec.LeaveGroupResponse.MemberResponse(
                member_id="consumer-1-abc", group_instance_id="host-7", error_code=0
            )
        ]
    )
    return codec.encode_response(resp, 5, 7)


def test_a_response_without_its_api_is_read_as_the_one_api_that_fits():
    """Issue 22: a response given without its API was read as a request and failed deep
    inside (a Produce request's topic_data count); with try_responses it is read as the
    one API whose response reads the bytes exactly, and the tree says so."""
    frame = leave_group_v5_response()
    with pytest.raises(DecodeError) as info:  # strict by default, as decode_request
        explain(frame)
    assert info.value.path == "topic_data" and not hasattr(info.value, "response_readings")
    assert response_readings(frame) == [
        (LEAVE_GROUP, 4),
        (LEAVE_GROUP, 5),
    ]  # v4 and v5 lay it out alike
    root = explain(frame, try_responses=True)
    assert shape(root) == shape(explain(frame, LEAVE_GROUP, 5))
    assert root.value["reading"] == (
        f"does not read as a request ({info.value}); read as a response: a response header "
        "does not say which API it answers, and of every API and version only "
        "LeaveGroupResponse v4-v5 read these bytes exactly (shown as v5, the newest)"
    )
    assert root.value["message"] == "LeaveGroupResponse" and root.value["version"] == 5
    # A frame that reads as a request is read as one, with no note.
    assert "reading" not in explain(SEED_REQUEST, try_responses=True).value


def test_a_response_that_fits_several_apis_or_none_is_not_picked():
    with pytest.raises(DecodeError) as info:
        explain(SEED_RESPONSE, try_responses=True)
    readings = info.value.response_readings
    assert (LEAVE_GROUP, 5) in readings and len({key for key, _ in readings}) > 1
    assert info.value.partial_tree.value["message"] == "ProduceRequest"  # the request reading
    assert (
        reading_names([(FETCH, 7), (FETCH, 8), (FETCH, 10), (LEAVE_GROUP, 5)])
        == "FetchResponse v7-v8, v10, LeaveGroupResponse v5"
    )
    bad = bytearray(leave_group_v5_response())
    bad[-2] = 0x7F  # the last error code's high byte
    bad += b"\x00"
    bad[:4] = (len(bad) - 4).to_bytes(4, "big")
    with pytest.raises(DecodeError) as info:
        explain(bytes(bad), try_responses=True)
    assert info.value.response_readings == []


def test_cli_reads_a_response_file_without_api():
    code, out, err = cli(stdin=leave_group_v5_response().hex().encode())
    assert code == 0
    lines = out.splitlines()
    assert lines[0] == "LeaveGroupResponse v5, response header v1, 42 bytes on the wire"
    assert lines[1].startswith("reading: does not read as a request (topic_data: ")
    assert lines[1].endswith(
        "only LeaveGroupResponse v4-v5 read these bytes exactly (shown as v5, the newest)"
    )
    assert 'member_id string = "consumer-1-abc"' in out
    assert err == (
        "fastkwire explain: read as a response (its reading: line says why); "
        "--api and --api-version choose another reading\n"
    )
    code, out, _ = cli("--json", stdin=leave_group_v5_response().hex().encode())
    d = json.loads(out)
    assert code == 0 and d["reading"] == lines[1][len("reading: ") :]
    assert d["body"]["members"][0]["member_id"] == "consumer-1-abc"


def test_cli_says_responses_need_api_and_version():
    code, out, err = cli(SEED_RESPONSE.hex())
    assert code == 1 and "ProduceRequest message v0" in out
    first, hint = err.splitlines()
    assert first.startswith("DecodeError: topic_data: ")
    assert hint.startswith("fastkwire explain: if this is a response, it reads exactly as ")
    assert "LeaveGroupResponse v4-v5" in hint and hint.endswith(
        ": give --api and --api-version to say which"
    )
    code, _, err = cli("00000004000d0063")  # LeaveGroup v99: no such version
    assert code == 2 and err.splitlines() == [
        "fastkwire explain: LeaveGroupRequest has versions 0-5, not 99",
        "fastkwire explain: if this is a response, give --api and --api-version: a response header "
        "does not say which API it answers (and no response of any API and version reads "
        "these bytes exactly)",
    ]
    # Given --api and --api-version (or an example), no other reading is tried.
    code, _, err = cli("--api", "13", "--version", "5", SEED_REQUEST.hex())
    assert code == 1 and err.count("\n") == 1


def test_json_and_tree_show_only_the_fields_of_the_version():
    """Issue 22: --json showed a LeaveGroup v5 body's member_id, which only v0-2 carry."""
    code, out, _ = cli("--json", "--example", "leave-group-v5")
    body = json.loads(out)["body"]
    assert code == 0 and body == {
        "group_id": "",
        "members": [{"member_id": "", "group_instance_id": "", "reason": ""}],
    }
    code, out, _ = cli("--json", "--example", "leave-group-v2")
    assert json.loads(out)["body"] == {"group_id": "", "member_id": ""}
    assert explain(SEED_REQUEST).value["body"] == body
    names = [n.name for n in explain(SEED_REQUEST).children[2].children]
    assert names == ["group_id", "members", "tagged_fields"]
    # A tagged field is in its version even when not sent: shown at its default.
    frame, _, _ = example("api-versions-v3-response")
    assert explain(frame, API_VERSIONS, 3).value["body"]["finalized_features_epoch"] == -1


def test_cli_json():
    code, out, _ = cli("--json", "--api", "13", "--version", "5", SEED_RESPONSE.hex())
    assert code == 0
    d = json.loads(out)
    assert d["body"]["members"] == [{"member_id": "", "group_instance_id": "", "error_code": 0}]


def test_cli_examples_match_the_seed_offsets():
    code, out, _ = cli("--example", "leave-group-v5")
    assert code == 0 and out == cli(SEED_REQUEST.hex())[1]
    code, out, _ = cli("--example", "leave-group-v5-response")
    assert code == 0
    assert out == cli("--api", "13", "--version", "5", SEED_RESPONSE.hex())[1]
    code, out, _ = cli("--example", "streams-group-heartbeat-v0")
    assert code == 0 and "topology Topology = struct" in out
    code, _, err = cli("--example", "nope")
    assert code == 2 and "unknown example" in err


def test_cli_malformed_frame_prints_partial_tree_then_error():
    full, at = leave_group_with_reason()
    code, out, err = cli(with_size(full[4 : at + 2]).hex())
    assert code == 1
    last = out.rstrip().splitlines()[-1]
    # Open nodes are their parents' last children, hence no "|" on the way down.
    assert last.startswith(
        f"      +-- reason string = !! truncated: needs 4 bytes, 2 left [0x{at:04x}, 0B]"
    )
    assert err.startswith(
        f"DecodeError: members[0].reason: truncated: needs 4 bytes, 2 left at offset {at}\n"
        "fastkwire explain: if this is a response, give --api and --api-version"
    )
    # Cut without its size: decode_request's error (the size), the tree where reading stopped.
    code, out, err = cli(full[: at + 2].hex())
    assert code == 1 and out.rstrip().splitlines()[-1] == last
    assert err.startswith(
        f"DecodeError: frame size {len(full) - 4} does not match the {at - 2} bytes that follow"
    )


def test_cli_max_items_and_hex_rows():
    frame = leave_group_frame(12)
    code, out, _ = cli("--max-items", "5", frame.hex())
    assert code == 0
    assert "+-- members[4] MemberIdentity = struct" in out and "members[5] " not in out
    assert "+-- members[5..11] summary = 7 more elements, not shown" in out
    code, out, _ = cli("--max-items", "all", frame.hex())
    assert "members[11] MemberIdentity" in out and "summary" not in out
    code, out, _ = cli("--hex-rows", "1", frame.hex())
    assert "... 4 more rows (bytes 0x10-0x42) not shown" in out
    assert cli("--hex-rows", "all", frame.hex())[1].count("\n") == cli(frame.hex())[1].count("\n")
    with pytest.raises(SystemExit):
        cli("--max-items", "-1", frame.hex())


def test_cli_json_has_every_element_even_when_the_tree_summarises():
    frame = leave_group_frame(150)
    code, out, _ = cli("--json", "--max-items", "3", frame.hex())
    assert code == 0
    assert (
        json.loads(out)["body"]["members"]
        == [{"member_id": "", "group_instance_id": "", "reason": ""}] * 150
    )


def ascii_stream():
    return io.TextIOWrapper(io.BytesIO(), encoding="ascii")  # errors="strict"


def run_ascii(*argv):
    args = configure(argparse.ArgumentParser()).parse_args(argv)
    out, err = ascii_stream(), ascii_stream()
    code = run(args, stdout=out, stderr=err, stdin=io.TextIOWrapper(io.BytesIO()))
    out.flush()
    err.flush()
    return code, out.buffer.getvalue().decode("ascii"), err.buffer.getvalue().decode("ascii")


def test_cli_writes_to_an_ascii_only_stream():
    text = "caf\u00e9 \u2615 \U0001d11e"
    msg = codec.LeaveGroupRequest(
        group_id=text, members=[codec.LeaveGroupRequest.MemberIdentity(member_id="m")]
    )
    frame = codec.encode_request(msg, 5, 1, "c")
    code, out, err = run_ascii(frame.hex())
    assert (code, err) == (0, "")
    assert '= "caf\\xe9 \\u2615 \\U0001d11e" (compact, len+1=' in out
    code, out, err = run_ascii("--json", frame.hex())
    assert (code, err) == (0, "") and json.loads(out)["body"]["group_id"] == text
    # A malformed frame: the partial tree and the error message.
    code, out, err = run_ascii(frame[:-3].hex())
    assert code == 1 and "caf\\xe9" in out and err.startswith("DecodeError: ")
    code, out, err = run_ascii("--example", "caf\u00e9")
    assert (code, out) == (2, "") and "unknown example 'caf\\xe9'" in err


def test_cli_bad_input():
    code, out, err = cli("zz")
    assert (code, out) == (2, "") and "not hex" in err
    code, out, err = cli("000")  # an odd number of digits
    assert (code, out) == (2, "") and "odd number of hex digits (3)" in err
    code, _, err = cli("--file", "/nonexistent/frame.bin")
    assert code == 2 and "fastkwire explain:" in err


def test_python_dash_m_runs_the_cli():
    src = Path(__import__("fastkwire._schema").__file__).resolve().parent.parent
    env = dict(os.environ, PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire.explain", "--example", "leave-group-v5"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "members[0] MemberIdentity = struct [0x0011, 4B]" in done.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "fastkwire.explain", "00000001"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert bad.returncode == 1 and "DecodeError" in bad.stderr


def test_cli_on_an_ascii_stdout_process():
    src = Path(__import__("fastkwire._schema").__file__).resolve().parent.parent
    env = dict(
        os.environ,
        PYTHONPATH=str(src) + os.pathsep + os.environ.get("PYTHONPATH", ""),
        PYTHONIOENCODING="ascii",
        LC_ALL="C",
    )
    msg = codec.LeaveGroupRequest(group_id="gr\u00fcn\x1b[31m", members=[])
    frame = codec.encode_request(msg, 5, 1, "c")
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire.explain", frame.hex()],
        capture_output=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert b'group_id string = "gr\\xfcn\\x1b[31m" (compact, len+1=' in done.stdout
    assert done.stdout.isascii() and b"\x1b" not in done.stdout


# ---------------------------------------------------------------- explain and decode on mutated frames


def _newest_examples():
    """The built-in example of each API's request and response: the newest version, or
    every version with --run-slow."""
    import scope

    newest = {}
    for name in example_names():
        api, _, rest = name.rpartition("-v")
        version, _, response = rest.partition("-")
        newest.setdefault((api, response), []).append(name)
    return sorted(
        n for names in newest.values() for n in (names if scope.EVERY_VERSION else names[-1:])
    )


def mutated_frames(frame, rng, count):
    """Seeded mutations of a frame: bit flips, truncations with and without their size
    fixed, wrong size prefixes."""
    for i in range(count):
        kind = i % 4
        if kind == 0:
            bad = bytearray(frame)
            for _ in range(rng.randrange(1, 4)):
                bad[rng.randrange(len(bad))] ^= 1 << rng.randrange(8)
            yield bytes(bad)
        elif kind == 1:
            yield with_size(frame[4 : rng.randrange(4, len(frame))])
        elif kind == 2:
            yield frame[: rng.randrange(len(frame))]
        else:
            size = len(frame) - 4 + rng.choice([-2, -1, 1, 2, rng.randrange(-(1 << 31), 1 << 31)])
            yield size.to_bytes(4, "big", signed=True) + frame[4:]


def failure(read):
    """What read() raises: (offset, reason) of a DecodeError, the text of an
    UnsupportedVersionError; None if it reads."""
    try:
        read()
    except DecodeError as e:
        return e.offset, e.reason
    except UnsupportedVersionError as e:
        return str(e)
    return None


@pytest.mark.parametrize("name", _newest_examples())
def test_explain_and_decode_agree_on_mutated_frames(impl, name):
    """explain observes the codec's own reading: on any bytes, both fail with the same
    reason at the same offset, or neither fails."""
    import random

    frame, api_key, version = example(name)
    rng = random.Random(name)
    for bad in mutated_frames(frame, rng, 120):
        if api_key is None:
            theirs = failure(lambda: impl.decode_request(bad))
        else:
            theirs = failure(lambda: impl.decode_response(bad, api_key, version))
        assert failure(lambda: explain(bad, api_key, version)) == theirs, bad.hex()
        assert failure(lambda: explain(bad, api_key, version, max_items=0)) == theirs, bad.hex()


def test_cli_a_cut_request_gets_no_response_hint():
    # LeaveGroup v5 whose size prefix says 18 bytes follow, with 16 given: no response of
    # any API reads a cut frame either, so only the request's error is shown
    code, out, err = cli("00000012000d0005000000000000000102010101")
    assert code == 1
    assert err.splitlines()[-1] == (
        "DecodeError: frame size 18 does not match the 16 bytes that follow at offset 0"
    )
    assert "if this is a response" not in err


def test_cli_api_version_and_a_bare_version():
    frame = SEED_RESPONSE.hex()
    assert cli("--api", "13", "--api-version", "5", frame) == cli(
        "--api", "13", "--version", "5", frame
    )
    assert cli("--api", "13", "--api-version", "5", frame)[0] == 0
    with pytest.raises(SystemExit) as done:
        cli("--version")
    assert done.value.code == 0

"""Protocol currency: the APIs and versions newer than the Kafka message definitions
snapshot, the names Kafka changed, the preview APIs' unstable marks, and the record of
which source each definition's facts came from.

Byte equality with kio for every new or changed version, in both implementations; the
peer suite (test_peers) covers the rest of the protocol.
"""

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings

pytest.importorskip("kio", reason="kio (a peer codec) is not installed")
pytest.importorskip("kafka", reason="kafka-python (a peer codec) is not installed")

import peers  # noqa: E402
from strategies import MESSAGE_NAMES, message_dicts  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "src" / "fastkwire" / "schemas"
SOURCES = json.loads((ROOT / "tools" / "schema_sources.json").read_text())

# Every message version the snapshot did not have, or had otherwise than the newer Kafka.
NEW_VERSIONS = [
    *[(f"StreamsGroupDescribe{k}", 0) for k in ("Request", "Response")],
    *[(f"DescribeShareGroupOffsets{k}", v) for k in ("Request", "Response") for v in (0, 1)],
    *[(f"AlterShareGroupOffsets{k}", 0) for k in ("Request", "Response")],
    *[(f"DeleteShareGroupOffsets{k}", 0) for k in ("Request", "Response")],
    *[(f"ListConfigResources{k}", v) for k in ("Request", "Response") for v in (0, 1)],
    ("ReadShareGroupStateSummaryResponse", 0),
]
PREVIEW_APIS = {76, 77, 78, 79, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92}


def load(name):
    return json.loads((SCHEMAS / f"{name}.json").read_text())


@pytest.mark.parametrize(
    ("name", "version"), NEW_VERSIONS, ids=[f"{n}-v{v}" for n, v in NEW_VERSIONS]
)
def test_new_versions_match_kio_bytes(impl, name, version):
    assert peers.peer_supports("kio", name, version)
    cls = getattr(impl, name)

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(message_dicts(name, version, **peers.PEER_STRATEGY_ARGS["kio"]))
    def check(d):
        ours = cls.from_dict(d).encode(version)
        assert ours == peers.kio_encode(name, version, d)
        assert cls.decode(ours, version).to_dict() == d
        assert peers.kio_decode(name, version, ours) == d

    check()


def test_every_version_kio_knows_is_ours():
    """A kio release with an API or version we lack fails here: convert it (docs/adding-an-api.md)."""
    from kio.schema.index import api_key_map, schema_name_map
    from kio.static.constants import EntityType

    ours = {}
    for name in MESSAGE_NAMES:
        m = load(name)
        if "api_key" in m:
            low, _, high = m["versions"].partition("-")
            ours[m["api_key"], m["kind"]] = range(int(low), int(high or low) + 1)
    missing = []
    for key, api in api_key_map.items():
        for version, entities in schema_name_map[api].items():
            for kind in ("request", "response"):
                if EntityType[kind] in entities and version not in ours.get((key, kind), ()):
                    missing.append((api, kind, version))
    assert missing == []


def test_new_messages_are_named_after_kio_modules():
    for name, _ in NEW_VERSIONS:
        assert name in MESSAGE_NAMES
        assert peers._kio_versions(name) is not None


# ---------------------------------------------------------------- renamed APIs


def test_renamed_api_keeps_its_old_name(impl):
    import fastkwire
    from fastkwire import _family

    assert (
        SOURCES["renamed"]
        == _family.ALIASES
        == {
            "ListClientMetricsResourcesRequest": "ListConfigResourcesRequest",
            "ListClientMetricsResourcesResponse": "ListConfigResourcesResponse",
        }
    )
    for old, new in _family.ALIASES.items():
        assert getattr(impl, old) is getattr(impl, new)
        assert getattr(fastkwire, old) is getattr(fastkwire, new)
        assert old in impl.__all__ and old in dir(impl)
        assert not (SCHEMAS / f"{old}.json").exists()
    assert impl.REQUEST_CLASSES[74] is impl.ListClientMetricsResourcesRequest
    assert impl.RESPONSE_CLASSES[74] is impl.ListConfigResourcesResponse
    assert len([c for c in impl.MESSAGE_CLASSES if c.API_KEY == 74]) == 2
    # v0 is the old API: the same bytes under the old name
    old = impl.ListClientMetricsResourcesResponse(
        config_resources=[impl.ListClientMetricsResourcesResponse.ConfigResource(resource_name="m")]
    )
    assert old.encode(0) == bytes.fromhex("00000000 0000 02 026d 00 00")


def test_stubs_declare_the_old_names():
    # Both message modules' stubs re-export the one that declares the classes.
    text = (ROOT / "src" / "fastkwire" / "_message_types.pyi").read_text()
    for old, new in SOURCES["renamed"].items():
        assert f"\n{old} = {new}\n" in text
        assert f"    {old!r}," in text


# ---------------------------------------------------------------- preview APIs


@pytest.mark.parametrize(
    "name", [n for n in MESSAGE_NAMES if load(n).get("api_key") in PREVIEW_APIS]
)
def test_preview_apis_are_unstable_in_every_version_and_say_so(name):
    m = load(name)
    assert m["unstable"] == m["versions"]
    assert m["doc"].startswith("Preview API, may still change (unstable). ")


def test_explain_tells_that_a_preview_api_may_change():
    from fastkwire.explain import example, example_names, explain

    assert "streams-group-describe-v0" in example_names()
    assert "streams-group-describe-v0-response" in example_names()
    frame, key, version = example("streams-group-describe-v0-response")
    tree = explain(frame, key, version)
    body = [
        n for n in tree.walk() if n.name == "StreamsGroupDescribeResponse" and n.type == "struct"
    ][0]
    assert "may still change" in body.description
    frame, key, version = example("list-config-resources-v1")
    assert explain(frame, key, version).name == "ListConfigResourcesRequest"


def test_stable_apis_follow_kafkas_unstable_marks():
    # the newer Kafka (kafka-python 3's files) released EndTxn v5 and marks InitProducerId v6
    assert "unstable" not in load("EndTxnRequest") and "unstable" not in load("EndTxnResponse")
    assert (
        load("InitProducerIdRequest")["unstable"]
        == load("InitProducerIdResponse")["unstable"]
        == "6"
    )


# ---------------------------------------------------------------- StreamsGroupDescribe columns


def test_streams_group_describe_task_offsets_as_columns(impl):
    import numpy as np
    from fastkwire import TaskOffsetColumns

    r = impl.StreamsGroupDescribeResponse
    offsets = [
        r.TaskOffset(subtopology_id=f"s{i % 3}", partition=i, offset=10 * i) for i in range(50)
    ]
    d = r.from_dict(
        {
            "groups": [
                {
                    "group_id": "g",
                    "members": [
                        {
                            "member_id": "m",
                            "task_offsets": [o.to_dict() for o in offsets],
                            "task_end_offsets": [o.to_dict() for o in offsets[:5]],
                            "assignment": {
                                "active_tasks": [{"subtopology_id": "s0", "partitions": [1, 2, 3]}]
                            },
                        }
                    ],
                }
            ]
        }
    )
    body = d.encode(0)
    assert body == peers.kio_encode("StreamsGroupDescribeResponse", 0, d.to_dict())
    listed = r.decode(body, 0)
    assert listed == d
    columns = r.decode(body, 0, arrays="numpy")
    member = columns.groups[0].members[0]
    assert isinstance(member.task_offsets, TaskOffsetColumns)
    assert member.task_offsets.partition.dtype == np.int32
    assert member.task_offsets.offset.tolist() == [10 * i for i in range(50)]
    assert member.task_offsets.subtopology_id[:4] == ["s0", "s1", "s2", "s0"]
    assert isinstance(member.assignment.active_tasks[0].partitions, np.ndarray)
    # encoding takes either form, to the same bytes
    assert columns.encode(0) == body
    members = r.decode(body, 0).groups[0].members
    members[0].task_offsets = TaskOffsetColumns(
        subtopology_id=[o.subtopology_id for o in offsets],
        partition=np.arange(50, dtype=np.int32),
        offset=np.arange(50, dtype=np.int64) * 10,
    )
    assert r.decode(body, 0).encode(0) == body


def test_streams_group_describe_schema_uses_columns_where_heartbeat_does():
    heartbeat = {f["name"]: f for f in load("StreamsGroupHeartbeatRequest")["fields"]}
    assert heartbeat["TaskOffsets"]["columns"] == "TaskOffsetColumns"
    describe = load("StreamsGroupDescribeResponse")
    member = [f for f in describe["fields"][1]["fields"] if f["name"] == "Members"][0]
    by_name = {f["name"]: f for f in member["fields"]}
    for name in ("TaskOffsets", "TaskEndOffsets"):
        assert (
            by_name[name]["columns"] == "TaskOffsetColumns"
            and by_name[name]["type"] == "[]TaskOffset"
        )
    shared = {s["name"]: [f["name"] for f in s["fields"]] for s in describe["structs"]}
    assert shared["TaskOffset"] == ["SubtopologyId", "Partition", "Offset"]


# ---------------------------------------------------------------- sources


def test_every_definition_says_where_its_facts_came_from():
    files = SOURCES["files"]
    assert set(files) == {p.name for p in SCHEMAS.glob("*.json")}
    kio = next(label for label in files["StreamsGroupDescribeRequest.json"])
    assert kio.startswith("kio ")
    for name in (
        "StreamsGroupDescribe",
        "DescribeShareGroupOffsets",
        "AlterShareGroupOffsets",
        "DeleteShareGroupOffsets",
    ):
        for kind in ("Request", "Response"):
            assert list(files[f"{name}{kind}.json"]) == [kio]
    kafka_python = list(files["ListConfigResourcesRequest.json"])
    assert len(kafka_python) == 1 and kafka_python[0].startswith("kafka-python ")
    assert "changed since the snapshot" in files["ReadShareGroupStateSummaryResponse.json"][kio]
    assert list(files["LeaveGroupRequest.json"]) == ["Kafka message definitions snapshot"]
    assert files["StreamsGroupHeartbeatRequest.json"] == {
        "this project": "maintained by hand (PROTECTED)"
    }

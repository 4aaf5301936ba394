"""tools/convert_schemas.py: Kafka's message definitions (plus kio's newer versions) in our format.

Kafka's files are not part of this repository; a checkout keeps them at
../shared/kafka-schemas beside it. Without them these tests skip.
"""

import copy
import importlib.util
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

import test_schemas
from fastkwire import _schema

ROOT = Path(__file__).resolve().parents[1]
from scope import KAFKA_SCHEMAS as KAFKA, NO_KAFKA_SCHEMAS  # noqa: E402

SCHEMAS = ROOT / "src" / "fastkwire" / "schemas"
HAND_WRITTEN = (
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
    "RequestHeader",
    "ResponseHeader",
)

pytestmark = pytest.mark.skipif(not KAFKA.is_dir(), reason=NO_KAFKA_SCHEMAS)


def _load_tool():
    spec = importlib.util.spec_from_file_location(
        "convert_schemas", ROOT / "tools" / "convert_schemas.py"
    )
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


tool = _load_tool()


def convert(out_dir, use_kio, newer=None):
    """Kafka's snapshot (and kio's versions); `newer`="kafka-python" adds the newer Kafka files
    kafka-python 3 ships, as the default conversion does."""
    warnings = []
    outputs, messages, added = tool.build(KAFKA, out_dir, use_kio, warnings.append, newer=newer)
    return outputs, messages, added, warnings


def convert_and_write(out_dir, use_kio, newer=None):
    outputs, messages, added, warnings = convert(out_dir, use_kio, newer)
    for name, text in outputs.items():
        (out_dir / name).write_text(text)
    return out_dir, (outputs, messages, added, warnings)


@pytest.fixture(scope="module")
def plain(tmp_path_factory):
    """Kafka's files alone, converted into an empty directory."""
    return convert_and_write(tmp_path_factory.mktemp("plain"), use_kio=False)


@pytest.fixture(scope="module")
def with_kio(tmp_path_factory):
    """Kafka's files and kio's newer versions, converted into an empty directory."""
    pytest.importorskip("kio")
    return convert_and_write(tmp_path_factory.mktemp("kio"), use_kio=True)


@pytest.fixture(scope="module")
def every_source(tmp_path_factory):
    """The default conversion: the snapshot, kafka-python 3's newer Kafka files, kio."""
    pytest.importorskip("kio")
    pytest.importorskip("kafka.protocol.schemas.resources")
    return convert_and_write(tmp_path_factory.mktemp("all"), use_kio=True, newer="kafka-python")


def without_doc(value):
    if isinstance(value, dict):
        return {k: without_doc(v) for k, v in value.items() if k != "doc"}
    if isinstance(value, list):
        return [without_doc(v) for v in value]
    return value


def field(msg, path):
    """The field at "Topics.Partitions.Name" (by names through inline structs)."""
    fields = msg["fields"]
    for name in path.split("."):
        found = [f for f in fields if f["name"] == name]
        assert len(found) == 1, (path, name, [f["name"] for f in fields])
        f = found[0]
        fields = f.get("fields", [])
    return f


# ---------------------------------------------------------------- stage 1: Kafka's facts


@pytest.mark.parametrize("name", HAND_WRITTEN)
def test_converted_facts_equal_our_hand_written_definitions(plain, name):
    _, (_, messages, _, _) = plain
    ours = json.loads((SCHEMAS / f"{name}.json").read_text())
    assert messages[name] == without_doc(ours)


def test_existing_files_keep_their_docs_byte_for_byte(tmp_path):
    # The hand-written definitions and the protected ones (the others carry kio's newer
    # versions, which this run without kio would drop).
    for name in HAND_WRITTEN + tuple(tool.PROTECTED):
        shutil.copy(SCHEMAS / f"{name}.json", tmp_path)
    protected = tmp_path / "StreamsGroupHeartbeatRequest.json"
    protected.write_text(protected.read_text().replace("Streams group", "STREAMS GROUP"))
    before = protected.read_text()
    outputs, _, _, warnings = convert(tmp_path, use_kio=False)
    for name in HAND_WRITTEN:
        assert outputs[f"{name}.json"] == (SCHEMAS / f"{name}.json").read_text(), name
    assert not set(outputs) & {f"{n}.json" for n in tool.PROTECTED}
    assert (
        tool.main(
            ["--kafka", str(KAFKA), "--out", str(tmp_path), "--no-kio", "--no-newer", "--quiet"]
        )
        == 0
    )
    assert protected.read_text() == before
    assert not [w for w in warnings if "dropped" in w]


def test_merge_keeps_project_keys_and_drops_fields_kafka_lacks(tmp_path):
    ours = json.loads((SCHEMAS / "LeaveGroupRequest.json").read_text())
    field(ours, "Members.Reason")["note"] = "project-only key"
    ours["fields"].append({"name": "Invented", "type": "int8", "versions": "0+", "doc": "x"})
    field(ours, "GroupId")["versions"] = "1+"  # a fact: Kafka's value wins
    (tmp_path / "LeaveGroupRequest.json").write_text(json.dumps(ours))
    outputs, _, _, warnings = convert(tmp_path, use_kio=False)
    merged = json.loads(outputs["LeaveGroupRequest.json"])
    assert field(merged, "Members.Reason")["note"] == "project-only key"
    assert field(merged, "GroupId")["versions"] == "0+"
    assert field(merged, "GroupId")["doc"] == "Group the members are leaving."
    assert "Invented" not in [f["name"] for f in merged["fields"]]
    assert any("LeaveGroupRequest.Invented" in w and "dropped" in w for w in warnings)


def test_data_record_types_are_skipped_and_listed(plain):
    _, (_, messages, _, _) = plain
    data = {p.stem for p in KAFKA.glob("*.json") if tool.read_kafka(p)["type"] == "data"}
    assert data == set(tool.DATA_TYPES)
    assert not data & set(messages)
    kinds = {m["kind"] for m in messages.values()}
    assert kinds == {"request", "response", "header"}
    assert len(messages) == len(list(KAFKA.glob("*.json"))) - len(data)


def about_texts():
    texts = set()

    def walk(value):
        if isinstance(value, dict):
            if isinstance(value.get("about"), str):
                texts.add(value["about"])
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)

    for p in KAFKA.glob("*.json"):
        walk(tool.read_kafka(p))
    return texts


def strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield k
            yield from strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from strings(v)


def test_no_kafka_prose_in_the_output(with_kio):
    out, _ = with_kio
    about = about_texts()
    assert len(about) > 500  # the input does carry prose
    comments = {
        line.strip().lstrip("/").strip()
        for p in KAFKA.glob("*.json")
        for line in p.read_text().splitlines()
        if line.strip().startswith("//")
    }
    comments = {c for c in comments if len(c) > 20}
    for p in out.glob("*.json"):
        text = p.read_text()
        assert "//" not in text and '"about"' not in text and '"doc"' not in text, p.name
        found = set(strings(json.loads(text)))
        assert not found & about, (p.name, found & about)
        assert not found & comments, (p.name, found & comments)


def test_loose_values_are_normalised(plain):
    _, (_, messages, _, _) = plain
    # hex default, string defaults of every kind, tags written as strings
    assert field(messages["JoinGroupRequest"], "RebalanceTimeoutMs")["default"] == -1
    hex_defaults = [
        f
        for m in messages.values()
        for _, f in test_schemas.every_field(m)
        if f.get("default") == 0x7FFFFFFF
    ]
    assert hex_defaults
    assert field(messages["BrokerHeartbeatRequest"], "OfflineLogDirs")["tag"] == 0
    assert field(messages["LeaveGroupRequest"], "Members.Reason")["default"] is None
    assert field(messages["ApiVersionsResponse"], "ZkMigrationReady")["default"] is False
    assert "ignorable" not in field(messages["FindCoordinatorRequest"], "KeyType")
    for m in messages.values():
        for path, f in test_schemas.every_field(m):
            assert not isinstance(f.get("default"), str) or f["type"] == "string", path
            assert isinstance(f.get("tag", 0), int), path
    # a version range cut to the field's own versions
    assert field(messages["CreateTopicsResponse"], "Topics.ErrorMessage")["nullable"] == "1+"


@pytest.mark.parametrize(
    "raw, ftype, expected",
    [
        ("0x7fffffff", "int32", 2147483647),
        ("-0x10", "int64", -16),
        ("-1", "int16", -1),
        (7, "int8", 7),
        ("65535", "uint16", 65535),
        ("true", "bool", True),
        ("False", "bool", False),
        (False, "bool", False),
        ("1.5", "float64", 1.5),
        ("", "string", ""),
        ("x", "string", "x"),
        ("AAAAAAAAAAAAAAAAAAAAAA", "uuid", "00000000-0000-0000-0000-000000000000"),
        ("12345678-1234-5678-1234-567812345678", "uuid", "12345678-1234-5678-1234-567812345678"),
    ],
)
def test_default_normalisation(raw, ftype, expected):
    value = tool.convert_default(raw, ftype, None, "F")
    assert value == expected and type(value) is type(expected)


@pytest.mark.parametrize(
    "raw, ftype",
    [
        ("128", "int8"),
        ("-1", "uint16"),
        ("maybe", "bool"),
        ("0", "[]int32"),
        ("x", "bytes"),
        ("null", "int32"),
        ("not-a-uuid", "uuid"),
    ],
)
def test_bad_defaults_are_refused(raw, ftype):
    with pytest.raises(tool.ConversionError, match="F"):
        tool.convert_default(raw, ftype, None, "F")


def test_unknown_kafka_keys_are_refused():
    with pytest.raises(tool.ConversionError, match="Fancy"):
        tool.convert_field({"name": "X", "type": "int8", "versions": "0+", "Fancy": 1}, "M")


def test_shared_structs_come_before_their_users(plain):
    _, (_, messages, _, _) = plain
    structs = [s["name"] for s in messages["AddPartitionsToTxnResponse"]["structs"]]
    # Kafka lists the topic result (which uses the partition result) first
    assert structs == ["AddPartitionsToTxnPartitionResult", "AddPartitionsToTxnTopicResult"]
    a = {"name": "A", "fields": [{"name": "B", "type": "[]B", "versions": "0+"}]}
    b = {"name": "B", "fields": [{"name": "A", "type": "A", "versions": "0+"}]}
    with pytest.raises(tool.ConversionError, match="cycle"):
        tool.order_structs([a, b], "M")


def test_unstable_versions_are_marked_on_request_and_response(plain):
    _, (_, messages, _, _) = plain
    assert messages["EndTxnRequest"]["unstable"] == "5"
    assert messages["EndTxnResponse"]["unstable"] == "5"
    assert "unstable" not in messages["ProduceRequest"]
    unstable = {n for n, m in messages.items() if "unstable" in m}
    marked = {
        p.stem for p in KAFKA.glob("*.json") if tool.read_kafka(p).get("latestVersionUnstable")
    }
    preview = {n for n, m in messages.items() if m.get("api_key") in tool.PREVIEW_APIS}
    assert marked and marked <= unstable
    assert unstable == marked | {n.replace("Request", "Response") for n in marked} | preview
    # the preview APIs (share and streams groups) are unstable in every version
    for name in preview:
        assert messages[name]["unstable"] == messages[name]["versions"], name


def test_output_is_deterministic_and_check_mode_notices_changes(tmp_path):
    args = ["--kafka", str(KAFKA), "--out", str(tmp_path), "--no-kio", "--no-newer", "--quiet"]
    assert tool.main(args + ["--check"]) == 1  # empty directory
    assert tool.main(args) == 0
    first = {p.name: p.read_text() for p in tmp_path.iterdir()}
    assert tool.main(args + ["--check"]) == 0
    target = tmp_path / "FetchRequest.json"
    target.write_text(target.read_text().replace('"0+"', '"1+"', 1))
    assert tool.main(args + ["--check"]) == 1
    assert tool.main(args) == 0
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == first


def test_style_matches_the_hand_written_files(plain):
    _, (outputs, _, _, _) = plain
    text = outputs["FetchRequest.json"]
    lines = text.splitlines()
    assert lines[0] == "{" and lines[-1] == "}" and text.endswith("}\n")
    for line in lines[1:-1]:
        stripped = line.strip()
        if stripped.startswith('{"name"'):
            # one field per line: a whole JSON object, or one that opens its inline fields
            body = stripped.rstrip(",")
            if body.endswith('"fields": ['):
                json.loads(body[: -len(', "fields": [')] + "}")
            else:
                json.loads(body)
        else:
            assert re.fullmatch(r'"\w+": .*|\]\}?,?|\],?', stripped), line


# ---------------------------------------------------------------- loading and format rules


@pytest.mark.parametrize("stages", ["plain", "with_kio"])
def test_every_converted_file_loads_and_follows_the_format_rules(request, stages):
    out, (outputs, messages, _, _) = request.getfixturevalue(stages)
    assert len(outputs) == len(messages) > 170
    for p in sorted(out.glob("*.json")):
        msg = _schema.load_file(p)
        raw = json.loads(p.read_text())
        assert msg.name == raw["name"] == p.stem
        assert msg.versions == _schema.Versions.parse(raw["versions"])
        # the structural rules of tests/test_schemas.py, except that converted fields carry no doc
        test_schemas.test_message_version_ranges(raw)
        test_schemas.test_field_version_ranges(raw)
        test_schemas.test_nullable_only_on_nullable_types(raw)
        test_schemas.test_struct_types_are_defined(raw)
        test_schemas.test_shared_structs_are_used(raw)
        test_schemas.test_no_repeated_names_within_a_struct(raw)
    uuid_arrays = [
        f
        for m in messages.values()
        for _, f in test_schemas.every_field(m)
        if f["type"] == "[]uuid"
    ]
    assert uuid_arrays
    shared = _schema.load_file(out / "AddPartitionsToTxnResponse.json")
    assert [s.name for s in shared.structs][:2] == [
        "AddPartitionsToTxnPartitionResult",
        "AddPartitionsToTxnTopicResult",
    ]


def test_requests_and_responses_agree(with_kio):
    _, (_, messages, _, _) = with_kio
    for name, req in messages.items():
        if req["kind"] == "request":
            resp = messages[name.removesuffix("Request") + "Response"]
            for key in ("api_key", "versions", "flexible", "unstable"):
                assert req.get(key) == resp.get(key), (name, key)


# ---------------------------------------------------------------- stage 2: kio's newer versions


def test_kio_adds_produce_13_with_topic_ids(with_kio):
    from kio.schema.produce.v13.request import TopicProduceData

    _, (_, messages, added, _) = with_kio
    assert "topic_id" in {f.name for f in tool.dataclasses.fields(TopicProduceData)}
    req, resp = messages["ProduceRequest"], messages["ProduceResponse"]
    assert req["versions"] == resp["versions"] == "0-13"
    assert added["ProduceRequest"] == [12, 13]
    assert field(req, "TopicData.Name")["versions"] == "0-12"
    assert field(req, "TopicData.TopicId") == {"name": "TopicId", "type": "uuid", "versions": "13+"}
    assert [f["name"] for f in field(req, "TopicData")["fields"]] == [
        "Name",
        "TopicId",
        "PartitionData",
    ]
    assert field(resp, "Responses.Name")["versions"] == "0-12"
    assert field(resp, "Responses.TopicId")["versions"] == "13+"
    # kio's None for a -1 timestamp is not a null on the wire
    assert "nullable" not in field(resp, "Responses.PartitionResponses.LogAppendTimeMs")


def test_kio_adds_the_other_known_versions(with_kio):
    _, (_, messages, _, _) = with_kio
    fetch = messages["FetchRequest"]
    assert fetch["versions"] == "0-18"
    hw = field(fetch, "Topics.Partitions.HighWatermark")
    assert (hw["type"], hw["versions"], hw["tag"], hw["tagged"]) == ("int64", "18+", 1, "18+")
    meta = messages["MetadataResponse"]
    assert meta["versions"] == "0-13" and meta["fields"][-1]["name"] == "ErrorCode"
    assert meta["fields"][-1]["versions"] == "13+"
    for name, topics in (
        ("OffsetCommitRequest", "Topics"),
        ("OffsetCommitResponse", "Topics"),
        ("OffsetFetchRequest", "Groups.Topics"),
        ("OffsetFetchResponse", "Groups.Topics"),
    ):
        assert messages[name]["versions"].endswith("-10"), name
        assert field(messages[name], f"{topics}.Name")["versions"].endswith("-9"), name
        assert field(messages[name], f"{topics}.TopicId")["versions"] == "10+", name
    desc = messages["DescribeGroupsResponse"]
    assert desc["versions"] == "0-6"
    assert field(desc, "Groups.ErrorMessage") == {
        "name": "ErrorMessage",
        "type": "string",
        "versions": "6+",
        "nullable": "6+",
        "default": None,
    }


def test_kio_names_turn_back_into_kafkas(plain):
    """New fields from kio get CamelCase names rebuilt from kio's snake_case ones; on the
    newest version both know, the rule gives Kafka's own name for all but two fields."""
    pytest.importorskip("kio")
    _, (_, messages, _, _) = plain
    wrong, checked = set(), 0

    def walk(ext, fields, cls, version):
        nonlocal checked
        for kf in tool.kio_fields(cls):
            f = ext.find(fields, kf, version)
            if f is not None:
                checked += 1
                if kf.camel_name() != f["name"]:
                    wrong.add(f["name"])
                if kf.struct and f["type"].removeprefix("[]") not in tool.PRIMITIVES:
                    walk(ext, ext.struct_fields(f), kf.struct, version)

    for msg in messages.values():
        known = tool.kio_versions(msg)
        newest = tool.parse_range(msg["versions"])[1]
        if newest in known:
            ext = tool.Extender(copy.deepcopy(msg), lambda w: None)
            walk(ext, ext.msg["fields"], tool.resolve_name(known[newest]), newest)
    assert checked > 1000
    assert wrong == {"timeoutMs", "validateOnly"}  # CreatePartitionsRequest's own spelling


def test_kio_renames_keep_our_names(with_kio):
    _, (_, messages, _, warnings) = with_kio
    vote = messages["VoteRequest"]
    assert field(vote, "Topics.Partitions.CandidateId")["versions"] == "0+"
    assert any("CandidateId: kio calls it replica_id" in w for w in warnings)


def test_old_versions_kio_lacks_are_kept(with_kio):
    _, (_, messages, _, warnings) = with_kio
    assert messages["ShareFetchRequest"]["versions"] == "0-2"
    assert messages["ShareFetchRequest"]["unstable"] == "0-2"
    assert messages["RequestHeader"]["versions"] == "0-2"
    assert any(w.startswith("RequestHeader: kio lacks v0") for w in warnings)


def test_extended_definitions_match_kio_in_every_version_kio_has(with_kio):
    _, (_, messages, added, warnings) = with_kio
    assert sum(len(v) for v in added.values()) > 40
    assert not [w for w in warnings if "after extending" in w or "stopped" in w]
    for name, versions in added.items():
        ext = tool.Extender(messages[name], warnings.append)
        known = tool.kio_versions(messages[name])
        for v in versions:
            kio_class = tool.resolve_name(known[v])
            assert ext.compare(messages[name]["fields"], kio_class, v, name) == [], (name, v)


def test_the_comparison_notices_differences(with_kio):
    _, (_, messages, _, _) = with_kio
    from kio.schema.leave_group.v5.request import LeaveGroupRequest as Kio5

    msg = copy.deepcopy(messages["LeaveGroupRequest"])
    ext = tool.Extender(msg, lambda w: None)
    assert ext.compare(msg["fields"], Kio5, 5, "L") == []
    reason = field(msg, "Members.Reason")
    reason["nullable"] = "6+"
    reason["default"] = "why"
    field(msg, "Members.MemberId")["type"] = "int32"
    field(msg, "GroupId")["versions"] = "6+"
    diffs = ext.compare(msg["fields"], Kio5, 5, "L")
    assert any("Reason: nullable False" in d for d in diffs)
    assert any("Reason: default 'why'" in d for d in diffs)
    assert any("MemberId: type int32" in d for d in diffs)
    assert any("kio has group_id" in d for d in diffs)


def test_error_code_table_covers_every_kio_code(capsys, monkeypatch):
    kio_errors = pytest.importorskip("kio.schema.errors")
    from fastkwire import error_codes

    assert tool.check_error_codes() == 0
    for e in kio_errors.ErrorCode:
        ours = error_codes.lookup(int(e))
        assert (ours.name, ours.retriable) == (e.name.upper(), e.retriable)
        assert ours.description and not ours.name.startswith("UNKNOWN_ERROR_CODE")
    trimmed = dict(error_codes.ERRORS)
    del trimmed[133]
    monkeypatch.setattr(error_codes, "ERRORS", trimmed)
    capsys.readouterr()
    assert tool.check_error_codes() == 1
    assert '(133, "SHARE_SESSION_LIMIT_REACHED", True' in capsys.readouterr().out


# Every case where the sources disagree. The newer Kafka wins: kio (0.6.5) and the Kafka
# files kafka-python 3 ships both follow a Kafka newer than the snapshot. A new kio or
# kafka-python release that changes this list fails the test: review the new cases (each
# warning says what was applied) and record them here.
DISAGREEMENTS = [
    # API 74 renamed (KIP-1142): taken whole from the newer files; the old names are aliases
    "ListClientMetricsResourcesRequest: Kafka renamed API 74 ListConfigResourcesRequest",
    "ListClientMetricsResourcesResponse: Kafka renamed API 74 ListConfigResourcesResponse",
    # Kafka changed an unstable version in place: kio's v0 has LeaderEpoch
    "ReadShareGroupStateSummaryResponse.Results.Partitions.LeaderEpoch: in v0 too, as kio has it",
    # KIP-996 renamed Vote's fields, same bytes: ours keep the old names (no alias for fields)
    "VoteRequest v1.Topics.Partitions.CandidateDirectoryId: kio calls it replica_directory_id",
    "VoteRequest v1.Topics.Partitions.CandidateEpoch: kio calls it replica_epoch",
    "VoteRequest v1.Topics.Partitions.CandidateId: kio calls it replica_id",
    # the newer Kafka released EndTxn v5 and has InitProducerId v6 unstable
    "EndTxnRequest: unstable 5 -> none",
    "EndTxnResponse: unstable 5 -> none",
    "InitProducerIdRequest: unstable none -> 6",
    "InitProducerIdResponse: unstable none -> 6",
    # ignorable flags kio does not record, on fields some version lacks
    "AlterPartitionReassignmentsResponse v1.AllowReplicationFactorChange: ignorable True",
    "DescribeLogDirsResponse v5.Results.IsCordoned: ignorable True",
    "FetchRequest v18.Topics.Partitions.HighWatermark: ignorable True",
    "MetadataResponse v13.ErrorCode: ignorable True",
    "OffsetCommitRequest v10.Topics.TopicId: ignorable True",
    "OffsetCommitRequest v2.Topics.Name: ignorable True",
    "OffsetCommitResponse v10.Topics.TopicId: ignorable True",
    "OffsetCommitResponse v2.Topics.Name: ignorable True",
    "OffsetFetchRequest v10.Groups.Topics.TopicId: ignorable True",
    "OffsetFetchRequest v8.Groups.Topics.Name: ignorable True",
    "OffsetFetchResponse v10.Groups.Topics.TopicId: ignorable True",
    "OffsetFetchResponse v8.Groups.Topics.Name: ignorable True",
    "ProduceRequest v13.TopicData.TopicId: ignorable True",
    "ProduceRequest v3.TopicData.Name: ignorable True",
    "ProduceResponse v13.Responses.TopicId: ignorable True",
    "ProduceResponse v3.Responses.Name: ignorable True",
    "WriteTxnMarkersRequest v2.Markers.TransactionVersion: ignorable True",
]


def disagreements(warnings):
    marks = (
        "Kafka renamed API",
        "as kio has it",
        "kio calls it",
        ": unstable ",
        ": ignorable ",
        "not applied",
        "could not be applied",
        "stopped",
    )
    out = []
    for w in warnings:
        if any(m in w for m in marks) and "was unstable in Kafka's files" not in w:
            for cut in (
                "; converted",
                " (newer Kafka)",
                ", as the newer Kafka",
                "; kept our name",
                " (kafka-python",
            ):
                w = w.split(cut)[0]
            out.append(w)
    return sorted(out)


def test_every_disagreement_between_sources_is_recorded(every_source):
    _, (_, messages, _, warnings) = every_source
    assert disagreements(warnings) == sorted(DISAGREEMENTS)
    # what the newer Kafka's facts did
    summary = field(
        messages["ReadShareGroupStateSummaryResponse"], "Results.Partitions.LeaderEpoch"
    )
    assert summary["versions"] == "0+"
    assert field(messages["ProduceRequest"], "TopicData.Name").get("ignorable") is True
    # ClientId lost its flag in Kafka 4 along with header v0, which we keep: not applied
    assert field(messages["RequestHeader"], "ClientId")["ignorable"] is True
    assert "unstable" not in messages["EndTxnRequest"]
    assert "ListClientMetricsResourcesRequest" not in messages
    assert field(messages["ListConfigResourcesResponse"], "ConfigResources.ResourceName")


@pytest.mark.slow
def test_every_shared_version_agrees_but_the_recorded_cases(tmp_path):
    """Comparing every version kio shares with ours (not only the newest) finds nothing new."""
    pytest.importorskip("kio")
    warnings = []
    tool.build(KAFKA, tmp_path, True, warnings.append, check_all=True)
    found = disagreements(warnings)
    assert set(found) <= set(DISAGREEMENTS) | {
        w for w in found if "kio calls it" in w and w.startswith("VoteRequest v")
    }


def test_kio_alone_gives_the_apis_the_snapshot_lacks(every_source):
    _, (_, messages, added, warnings) = every_source
    for key, name in (
        (89, "StreamsGroupDescribe"),
        (90, "DescribeShareGroupOffsets"),
        (91, "AlterShareGroupOffsets"),
        (92, "DeleteShareGroupOffsets"),
    ):
        for kind in ("Request", "Response"):
            msg = messages[name + kind]
            assert msg["api_key"] == key and msg["flexible"] == "0+"
            assert msg["unstable"] == msg["versions"]
        assert any(w.startswith(f"API {key} ") and "from kio alone" in w for w in warnings)
    assert messages["DescribeShareGroupOffsetsResponse"]["versions"] == "0-1"
    lag = field(messages["DescribeShareGroupOffsetsResponse"], "Groups.Topics.Partitions.Lag")
    assert lag == {"name": "Lag", "type": "int64", "versions": "1+", "default": -1}
    # a struct kio uses in several places becomes a shared struct, each after those it uses
    describe = messages["StreamsGroupDescribeResponse"]
    shared = [s["name"] for s in describe["structs"]]
    assert set(shared) == {"KeyValue", "TaskIds", "Assignment", "TaskOffset", "TopicInfo"}
    assert shared.index("TaskIds") < shared.index("Assignment")
    assert shared.index("KeyValue") < shared.index("TopicInfo")
    assert field(describe, "Groups.Topology")["nullable"] == "0+"
    assert field(describe, "Groups.AuthorizedOperations")["default"] == -(2**31)
    # every version kio has agrees with the result
    for name in ("StreamsGroupDescribeResponse", "DescribeShareGroupOffsetsResponse"):
        ext = tool.Extender(messages[name], warnings.append)
        for v, path in tool.kio_versions(messages[name]).items():
            assert ext.compare(messages[name]["fields"], tool.resolve_name(path), v, name) == []


def test_sources_are_recorded_per_file(every_source, tmp_path):
    out, (outputs, _, _, _) = every_source
    sources = tool.build.sources
    assert set(sources) == set(outputs) | {f"{n}.json" for n in tool.PROTECTED}
    assert sources["ProduceRequest.json"][tool.SNAPSHOT] == "v0-11"
    assert any(
        label.startswith("kio ") and what == "v12-13 added"
        for label, what in sources["ProduceRequest.json"].items()
    )
    assert tool.build.renamed == {
        "ListClientMetricsResourcesRequest": "ListConfigResourcesRequest",
        "ListClientMetricsResourcesResponse": "ListConfigResourcesResponse",
    }
    committed = (ROOT / "tools" / "schema_sources.json").read_text()
    assert tool.render_sources(tool.build.sources, tool.build.renamed) == committed


# ---------------------------------------------------------------- the drift check


def test_drift_check_against_kio_lists_only_the_known_differences(capsys):
    pytest.importorskip("kio")
    assert tool.main(["--check", "kio"]) == 1
    lines = capsys.readouterr().out.splitlines()
    renames = [line for line in lines if "the source calls it" in line]
    assert renames and all(line.startswith("VoteRequest v") for line in renames)
    gone = {"ControlledShutdown", "LeaderAndIsr", "StopReplica", "UpdateMetadata"}
    others = [line for line in lines if line not in renames]
    assert all(
        line.split(":")[0].removesuffix("Request").removesuffix("Response").split(" ")[0] in gone
        or line.endswith("only ours")
        for line in others
    ), others


def test_drift_check_against_kafka_pythons_files():
    pytest.importorskip("kafka.protocol.schemas.resources")
    lines = tool.drift("kafka-python", SCHEMAS)
    facts = [line for line in lines if ": v" not in line and "does not have it" not in line]
    # ignorable flags are field-wide: Kafka 4 dropped ClientId's with header v0, kept here
    assert facts == ["RequestHeader v1-2.ClientId: ignorable ours True, source False"]


def test_drift_check_names_api_version_and_field(tmp_path, capsys):
    for name in ("LeaveGroupRequest", "LeaveGroupResponse"):
        shutil.copy(SCHEMAS / f"{name}.json", tmp_path)
    msg = json.loads((tmp_path / "LeaveGroupRequest.json").read_text())
    field(msg, "Members.Reason")["versions"] = "4+"  # Kafka: 5+
    field(msg, "Members.MemberId")["type"] = "int32"
    msg["fields"].append({"name": "Extra", "type": "int8", "versions": "3+"})
    (tmp_path / "LeaveGroupRequest.json").write_text(json.dumps(msg))
    kafka = tmp_path / "kafka"
    kafka.mkdir()
    for name in ("LeaveGroupRequest", "LeaveGroupResponse"):
        shutil.copy(KAFKA / f"{name}.json", kafka)
    assert tool.main(["--check", str(kafka), "--out", str(tmp_path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert "LeaveGroupRequest v4.Members.Reason: only ours (string)" in lines
    assert "LeaveGroupRequest v3-5.Members.MemberId: type ours 'int32', source 'string'" in lines
    assert "LeaveGroupRequest v3-5.Extra: only ours (int8)" in lines
    assert not [line for line in lines if line.startswith("LeaveGroupResponse")]
    msg = json.loads((SCHEMAS / "LeaveGroupRequest.json").read_text())
    (tmp_path / "LeaveGroupRequest.json").write_text(json.dumps(msg))
    assert tool.main(["--check", str(kafka), "--out", str(tmp_path)]) == 0


# ---------------------------------------------------------------- stage 2 on made-up dataclasses


def kio_like(name, **fields):
    """A dataclass shaped like kio's: annotations, kafka_type and tag in the metadata."""
    import dataclasses

    spec = []
    for fname, (annotation, meta, *default) in fields.items():
        kw = {"metadata": meta}
        if default:
            kw["default"] = default[0]
        spec.append((fname, annotation, dataclasses.field(**kw)))
    return dataclasses.make_dataclass(name, spec, kw_only=True)


def test_extension_of_a_made_up_message():
    import datetime
    import uuid

    part = kio_like("Part", index=(int, {"kafka_type": "int32"}))
    topic = kio_like(
        "Topic",
        topic_id=(uuid.UUID | None, {"kafka_type": "uuid"}),  # replaces Name
        partitions=(tuple[part, ...], {}),
        seen=(datetime.datetime | None, {"kafka_type": "datetime_i64"}, None),
    )
    v3 = kio_like(
        "Made",
        group=(str | None, {"kafka_type": "string"}, None),  # now nullable
        wait=(
            datetime.timedelta,
            {"kafka_type": "timedelta_i32"},
            datetime.timedelta(milliseconds=500),
        ),
        topics=(tuple[topic, ...], {}),
        extra=(tuple[int, ...] | None, {"kafka_type": "int8", "tag": 4}, None),
    )
    msg = {
        "name": "MadeRequest",
        "kind": "request",
        "api_key": 999,
        "versions": "0-2",
        "flexible": "0+",
        "fields": [
            {"name": "Group", "type": "string", "versions": "0+"},
            {"name": "Gone", "type": "string", "versions": "1+", "nullable": "1+"},
            {"name": "WaitMs", "type": "int32", "versions": "0+"},
            {
                "name": "Topics",
                "type": "[]Topic",
                "versions": "0+",
                "fields": [
                    {"name": "Name", "type": "string", "versions": "0+"},
                    {
                        "name": "Partitions",
                        "type": "[]Part",
                        "versions": "0+",
                        "fields": [{"name": "Index", "type": "int32", "versions": "0+"}],
                    },
                ],
            },
        ],
    }
    warnings = []
    ext = tool.Extender(msg, warnings.append)
    ext.extend(msg["fields"], v3, 3, "MadeRequest", set())
    assert msg["fields"] == [
        {"name": "Group", "type": "string", "versions": "0+", "nullable": "3+"},
        {"name": "Gone", "type": "string", "versions": "1-2", "nullable": "1-2"},
        {"name": "WaitMs", "type": "int32", "versions": "0+"},
        {
            "name": "Topics",
            "type": "[]Topic",
            "versions": "0+",
            "fields": [
                {"name": "Name", "type": "string", "versions": "0-2"},
                {"name": "TopicId", "type": "uuid", "versions": "3+"},
                {
                    "name": "Partitions",
                    "type": "[]Part",
                    "versions": "0+",
                    "fields": [{"name": "Index", "type": "int32", "versions": "0+"}],
                },
                {"name": "SeenMs", "type": "int64", "versions": "3+", "default": -1},
            ],
        },
        {
            "name": "Extra",
            "type": "[]int8",
            "versions": "3+",
            "nullable": "3+",
            "default": None,
            "tag": 4,
            "tagged": "3+",
        },
    ]
    # defaults of fields we already had are not taken from kio, only reported
    assert ext.compare(msg["fields"], v3, 3, "M") == [
        "M.Group: default '', kio None",
        "M.WaitMs: default 0, kio 500",
    ]
    assert any("Gone: removed in v3" in w for w in warnings)
    assert any("SeenMs: added in v3" in w for w in warnings)

    # a renamed field (same type, same place) pairs up and keeps our name
    renamed = kio_like(
        "Made",
        group=(str | None, {"kafka_type": "string"}, None),
        member=(int, {"kafka_type": "int16"}),
    )
    msg2 = {
        "name": "M",
        "versions": "0",
        "flexible": "0+",
        "fields": [
            {
                "name": "Group",
                "type": "string",
                "versions": "0+",
                "nullable": "0+",
                "default": None,
            },
            {"name": "Candidate", "type": "int16", "versions": "0+"},
        ],
    }
    ext2 = tool.Extender(msg2, warnings.append)
    assert ext2.compare(msg2["fields"], renamed, 0, "M") == []
    assert "M.Candidate: kio calls it member; kept our name" in warnings
    ext2.extend(msg2["fields"], renamed, 1, "M", set())
    assert [f["name"] for f in msg2["fields"]] == ["Group", "Candidate"]

    # a new struct named like one the message already has is flagged
    clash = kio_like("Made", again=(tuple[part, ...], {}))
    ext.extend(msg["fields"], clash, 4, "MadeRequest", set())
    assert any("kio's struct Part has the name of another struct" in w for w in warnings)

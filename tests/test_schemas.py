"""Structural checks of the schema definitions in src/fastkwire/schemas/.

The format is described in docs/architecture.md ("Schema definition format").
These tests read the JSON files directly and need neither implementation.
"""

import json
import re
from pathlib import Path

import pytest

SCHEMA_DIR = Path(__file__).resolve().parent.parent / "src" / "fastkwire" / "schemas"

# Written by hand, with our descriptions; the rest are converted from Kafka's definitions
# by tools/convert_schemas.py (facts only, descriptions where we have written them).
HAND_WRITTEN = {
    "RequestHeader",
    "ResponseHeader",
    "LeaveGroupRequest",
    "LeaveGroupResponse",
    "StreamsGroupHeartbeatRequest",
    "StreamsGroupHeartbeatResponse",
    "FindCoordinatorRequest",
    "FindCoordinatorResponse",
    "ApiVersionsRequest",
    "ApiVersionsResponse",
}
EXPECTED = {p.stem for p in SCHEMA_DIR.glob("*.json")}

PRIMITIVES = {
    "int8",
    "int16",
    "int32",
    "int64",
    "uint16",
    "uint32",
    "float64",
    "bool",
    "uuid",
    "string",
    "bytes",
    "records",
}
KINDS = {"request", "response", "header"}
MESSAGE_KEYS = {
    "name",
    "kind",
    "api_key",
    "versions",
    "flexible",
    "unstable",
    "doc",
    "fields",
    "structs",
}
FIELD_REQUIRED = {"name", "type", "versions"}
FIELD_KEYS = FIELD_REQUIRED | {
    "doc",
    "nullable",
    "default",
    "ignorable",
    "tag",
    "tagged",
    "flexible",
    "fields",
    "columns",
}
STRUCT_NAME = re.compile(r"^[A-Z][A-Za-z0-9]*$")
FIELD_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9]*$")  # Kafka spells a few camelCase


def parse_range(text):
    """Parse "3", "3+", "0-2" or "none" into (low, high); high None means open, "none" -> None."""
    assert isinstance(text, str), f"version range must be a string, got {text!r}"
    if text == "none":
        return None
    m = re.fullmatch(r"(\d+)(\+|-(\d+))?", text)
    assert m, f"unparseable version range {text!r}"
    low = int(m.group(1))
    if m.group(2) is None:
        return (low, low)
    if m.group(2) == "+":
        return (low, None)
    high = int(m.group(3))
    assert low <= high, f"empty version range {text!r}"
    return (low, high)


def within(inner, outer):
    """True if every version of inner (a parsed range) is in outer. "none" is within anything."""
    if inner is None:
        return True
    if outer is None:
        return False
    lo, hi = inner
    olo, ohi = outer
    if lo < olo:
        return False
    if ohi is None:
        return True
    return hi is not None and hi <= ohi


def clamp(rng, limit):
    """Intersect a parsed range with the message's closed version range."""
    if rng is None:
        return None
    lo, hi = rng
    llo, lhi = limit
    hi = lhi if hi is None else min(hi, lhi)
    lo = max(lo, llo)
    return (lo, hi) if lo <= hi else None


def load(name):
    with open(SCHEMA_DIR / f"{name}.json", encoding="utf-8") as fh:
        return json.load(fh)


def walk(fields, path):
    """Yield (path, field) for every field, depth first."""
    for f in fields:
        p = f"{path}.{f.get('name')}"
        yield p, f
        if "fields" in f:
            yield from walk(f["fields"], p)


def all_structs(msg):
    """Yield (struct_name, fields, where) for the top level, inline and shared structs."""
    yield msg["name"], msg["fields"], msg["name"]
    for p, f in walk(msg["fields"], msg["name"]):
        if "fields" in f:
            yield f["type"].removeprefix("[]"), f["fields"], p
    for s in msg.get("structs", []):
        yield s["name"], s["fields"], f"{msg['name']}.structs.{s['name']}"
        for p, f in walk(s["fields"], f"{msg['name']}.structs.{s['name']}"):
            if "fields" in f:
                yield f["type"].removeprefix("[]"), f["fields"], p


def every_field(msg):
    yield from walk(msg["fields"], msg["name"])
    for s in msg.get("structs", []):
        yield from walk(s["fields"], f"{msg['name']}.structs.{s['name']}")


def test_file_set_is_every_api_with_both_headers():
    found = {p.stem for p in SCHEMA_DIR.iterdir() if p.is_file()}
    assert {p.suffix for p in SCHEMA_DIR.iterdir() if p.is_file()} == {".json"}
    assert HAND_WRITTEN <= found and {"RequestHeader", "ResponseHeader"} <= found
    requests = {
        n[: -len("Request")] for n in found if n.endswith("Request") and n != "RequestHeader"
    }
    responses = {
        n[: -len("Response")] for n in found if n.endswith("Response") and n != "ResponseHeader"
    }
    assert requests == responses and len(requests) >= 89


@pytest.fixture(params=sorted(EXPECTED))
def msg(request):
    return load(request.param)


def test_top_level_keys(msg):
    assert set(msg) <= MESSAGE_KEYS, set(msg) - MESSAGE_KEYS
    for key in ("name", "kind", "versions", "flexible", "fields"):
        assert key in msg, key
    assert msg["kind"] in KINDS
    if msg["kind"] == "header":
        assert "api_key" not in msg
    else:
        assert isinstance(msg["api_key"], int) and not isinstance(msg["api_key"], bool)
        assert 0 <= msg["api_key"] < 2**15
        assert msg["name"].endswith("Request" if msg["kind"] == "request" else "Response")
    if msg["name"] in HAND_WRITTEN or "doc" in msg:
        assert isinstance(msg["doc"], str) and msg["doc"].strip() and "\n" not in msg["doc"]
    assert isinstance(msg["fields"], list)


def test_name_matches_file():
    for name in EXPECTED:
        assert load(name)["name"] == name


def test_message_version_ranges(msg):
    versions = parse_range(msg["versions"])
    assert versions is not None and versions[1] is not None, (
        "message versions must be a closed range"
    )
    assert within(parse_range(msg["flexible"]), (versions[0], None))
    if "unstable" in msg:
        assert within(parse_range(msg["unstable"]), versions), msg["unstable"]


def test_request_and_response_agree_on_versions():
    for name in EXPECTED:
        if name.endswith("Request") and name != "RequestHeader":
            req, resp = load(name), load(name[: -len("Request")] + "Response")
            assert req["api_key"] == resp["api_key"]
            assert req["versions"] == resp["versions"]
            assert req["flexible"] == resp["flexible"]


def test_field_keys_and_values(msg):
    for path, f in every_field(msg):
        assert FIELD_REQUIRED <= set(f), (path, FIELD_REQUIRED - set(f))
        assert set(f) <= FIELD_KEYS, (path, set(f) - FIELD_KEYS)
        assert FIELD_NAME.match(f["name"]), path
        if path.split(".")[0] in HAND_WRITTEN or "doc" in f:
            assert isinstance(f["doc"], str) and f["doc"].strip() and "\n" not in f["doc"], path
        if "ignorable" in f:
            assert f["ignorable"] is True, f"{path}: write ignorable only when true"
        if "default" in f:
            d, base = f["default"], f["type"]
            if d is None:
                assert "nullable" in f, f"{path}: null default on a non-nullable field"
            elif base == "bool":
                assert isinstance(d, bool), path
            elif base.startswith(("int", "uint")):
                assert isinstance(d, int) and not isinstance(d, bool), path
            elif base == "float64":
                assert isinstance(d, (int, float)) and not isinstance(d, bool), path
            elif base == "string":
                assert isinstance(d, str), path
            else:
                pytest.fail(f"{path}: unexpected default {d!r} for type {base}")
        if ("tag" in f) != ("tagged" in f):
            pytest.fail(f"{path}: tag and tagged go together")
        if "tag" in f:
            assert isinstance(f["tag"], int) and f["tag"] >= 0, path


def test_field_version_ranges(msg):
    versions = parse_range(msg["versions"])
    flexible = parse_range(msg["flexible"])

    def check(fields, path, parent):
        for f in fields:
            p = f"{path}.{f['name']}"
            fv = parse_range(f["versions"])
            assert fv is not None, f"{p}: a field needs at least one version"
            assert clamp(fv, versions) is not None, f"{p}: no version inside {msg['versions']}"
            assert within(clamp(fv, versions), versions), p
            assert within(fv, parent), f"{p}: versions {f['versions']} outside its parent's"
            for key in ("nullable", "tagged"):
                if key in f:
                    r = parse_range(f[key])
                    assert r is not None, f"{p}: {key} 'none' should be left out"
                    assert within(r, fv), f"{p}: {key} {f[key]} outside field versions"
                    assert within(clamp(r, versions), versions), p
            if "tagged" in f:
                assert within(parse_range(f["tagged"]), flexible), (
                    f"{p}: tagged outside the flexible versions"
                )
            if "flexible" in f:
                parse_range(f["flexible"])
            if "fields" in f:
                check(f["fields"], p, fv)

    check(msg["fields"], msg["name"], (versions[0], None))
    for s in msg.get("structs", []):
        check(s["fields"], f"{msg['name']}.structs.{s['name']}", (versions[0], None))


def test_nullable_only_on_nullable_types(msg):
    for path, f in every_field(msg):
        if "nullable" in f:
            base = f["type"]
            ok = (
                base.startswith("[]")
                or base in ("string", "bytes", "records")
                or base not in PRIMITIVES
            )
            assert ok, f"{path}: type {base} cannot be null"


def test_struct_types_are_defined(msg):
    shared = [s["name"] for s in msg.get("structs", [])]
    inline = [f["type"].removeprefix("[]") for _, f in every_field(msg) if "fields" in f]
    defined = shared + inline
    for name in defined:
        assert STRUCT_NAME.match(name), name
        assert name not in PRIMITIVES, name
    assert len(defined) == len(set(defined)), f"struct defined twice: {defined}"
    for s in msg.get("structs", []):
        assert set(s) == {"name", "fields"}, s["name"]
        assert s["fields"], s["name"]
    for path, f in every_field(msg):
        base = f["type"].removeprefix("[]")
        assert not base.startswith("[]"), f"{path}: nested arrays are not a Kafka type"
        if "fields" in f:
            assert base not in PRIMITIVES, f"{path}: inline fields on a primitive type"
            assert f["fields"], path
        elif base not in PRIMITIVES:
            assert base in shared, f"{path}: struct type {base} is not defined"


def test_shared_structs_are_used(msg):
    used = {f["type"].removeprefix("[]") for _, f in every_field(msg)}
    for s in msg.get("structs", []):
        assert s["name"] in used, f"shared struct {s['name']} is never referenced"


def test_no_repeated_names_within_a_struct(msg):
    for struct, fields, where in all_structs(msg):
        names = [f["name"] for f in fields]
        assert len(names) == len(set(names)), f"{where}: repeated field name in {names}"
        tags = [f["tag"] for f in fields if "tag" in f]
        assert len(tags) == len(set(tags)), f"{where}: repeated tag in {tags}"


# ---------------------------------------------------------------- descriptions


def loaded_fields():
    """(message, struct, field) for every field of every message, as the loader gives them."""
    from fastkwire import _schema

    for name in _schema.all_names():
        msg = _schema.load(name)
        for struct in [msg.root, *msg.structs]:
            for f in struct.fields:
                yield msg, struct, f


def test_every_field_of_every_message_has_a_description():
    """Issue 22: most converted fields had no description (the converter writes none:
    Kafka's texts are not ours); the descriptions table gives each one in our words."""
    missing = [f"{m.name}.{s.name}.{f.name}" for m, s, f in loaded_fields() if not f.doc.strip()]
    assert missing == []


def test_descriptions_table_has_no_stale_or_unused_entries():
    from fastkwire import _schema

    by_name, by_place = _schema.descriptions()
    assert all(
        t and t == t.strip() and t.endswith(".") for t in [*by_name.values(), *by_place.values()]
    )
    own = set()  # (message, struct, field) whose definition has a doc of its own
    for p in SCHEMA_DIR.glob("*.json"):
        raw = json.loads(p.read_text())
        for struct, fields, _ in all_structs(raw):
            own |= {(raw["name"], struct, f["name"]) for f in fields if f.get("doc")}
    names, places = set(), set()
    for m, s, f in loaded_fields():
        if (m.name, s.name, f.name) in own:
            continue
        for key in (f"{m.name}.{s.name}.{f.name}", f"{s.name}.{f.name}"):
            if key in by_place:
                places.add(key)
                break
        else:
            names.add(f.name)
    assert sorted(set(by_place) - places) == []
    assert sorted(set(by_name) - names) == []

"""Every message of the protocol, every version, in both implementations; and the
shipped definitions are what tools/convert_schemas.py makes of Kafka's."""

import importlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
from scope import KAFKA_SCHEMAS as KAFKA, NO_KAFKA_SCHEMAS  # noqa: E402

sys.path.insert(0, str(ROOT / "fuzz"))
import differential as D  # noqa: E402


def test_every_message_and_version_round_trips(impl):
    checked = 0
    for name, version in D.message_versions():
        cls = getattr(impl, name)
        for value in (cls(), cls.from_dict(D.full_dict(name, version))):
            body = value.encode(version)
            back = cls.decode(body, version)
            assert back.encode(version) == body, (name, version)
            checked += 1
        assert cls.decode(cls().encode(version), version) == cls(), (name, version)
    assert checked >= 2 * 727


def test_message_classes_cover_every_api(impl):
    assert len(impl.REQUEST_CLASSES) == len(impl.RESPONSE_CLASSES) >= 93
    for key, cls in impl.REQUEST_CLASSES.items():
        assert cls.API_KEY == key and impl.RESPONSE_CLASSES[key].API_KEY == key
        assert (cls.MIN_VERSION, cls.MAX_VERSION) == (
            impl.RESPONSE_CLASSES[key].MIN_VERSION,
            impl.RESPONSE_CLASSES[key].MAX_VERSION,
        )


def test_defaults_follow_the_schema(impl):
    # A struct that is never null defaults to a struct of defaults; a field may be named
    # like a builtin; uuids default to the null uuid.
    voter = impl.UpdateRaftVoterRequest
    assert isinstance(voter().k_raft_version_feature, voter.KRaftVersionFeature)
    assert impl.LeaderAndIsrRequest(type=1).type == 1
    produce = impl.ProduceRequest.TopicProduceData()
    assert str(produce.topic_id) == "00000000-0000-0000-0000-000000000000"


@pytest.mark.skipif(not KAFKA.is_dir(), reason=NO_KAFKA_SCHEMAS)
def test_shipped_definitions_are_what_the_converter_makes():
    # the default conversion reads the snapshot, kafka-python 3's newer Kafka files and kio
    pytest.importorskip("kio")
    pytest.importorskip("kafka.protocol.schemas.resources")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        tool = importlib.import_module("convert_schemas")
    finally:
        sys.path.pop(0)
    out = ROOT / "src" / "fastkwire" / "schemas"
    assert tool.main(["--kafka", str(KAFKA), "--out", str(out), "--check", "--quiet"]) == 0


def test_import_loads_no_definition():
    """`import fastkwire` must not pay for 180 messages: no definition is read and no
    schema model imported until a message is used."""
    code = (
        "import sys, fastkwire; "
        "assert 'fastkwire._schema' not in sys.modules, 'schema model imported'; "
        "assert 'fastkwire._layout' not in sys.modules, 'layouts imported'; "
        "fastkwire.LeaveGroupRequest; "
        "assert 'fastkwire._schema' in sys.modules"
    )
    import subprocess

    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_a_class_built_on_first_use_is_then_a_plain_module_attribute(impl):
    # Module __getattr__ runs once per name: later reads do not pay for it.
    import fastkwire

    cls = impl.OffsetFetchResponse
    assert vars(impl)["OffsetFetchResponse"] is cls
    assert fastkwire.OffsetFetchRequest is vars(fastkwire)["OffsetFetchRequest"]

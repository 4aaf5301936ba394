"""Both engines read and write every message of Kafka's definitions (converted by
tools/convert_schemas.py into a temporary directory; the package ships only the
messages it has reviewed so far)."""
import importlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KAFKA = ROOT.parent / "shared" / "kafka-schemas"

pytestmark = pytest.mark.skipif(not KAFKA.is_dir(), reason="Kafka's message definitions are not beside the checkout")


def _engines():
    out = [("python", "fastkwire._pure_engine")]
    if os.environ.get("FASTKWIRE_PURE", "") in ("", "0"):
        out.append(("cython", "fastkwire._engine"))
    return out


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """The schema loader pointed at a directory of every converted definition."""
    out = tmp_path_factory.mktemp("schemas")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        tool = importlib.import_module("convert_schemas")
    finally:
        sys.path.pop(0)
    for name in tool.PROTECTED:  # kept as the project has them
        (out / f"{name}.json").write_bytes((ROOT / "src" / "fastkwire" / "schemas" / f"{name}.json").read_bytes())
    assert tool.main(["--kafka", str(KAFKA), "--out", str(out), "--quiet"]) == 0
    from fastkwire import _layout, _schema

    caches = (_schema.load, _schema.all_names, _schema.api_index, _layout.layouts)
    saved = _schema.SCHEMA_DIR
    _schema.SCHEMA_DIR = out
    for c in caches:
        c.cache_clear()
    yield _schema
    _schema.SCHEMA_DIR = saved
    for c in caches:
        c.cache_clear()


@pytest.mark.parametrize("engine", [e for _, e in _engines()], ids=[n for n, _ in _engines()])
def test_every_message_and_version_round_trips(converted, engine):
    from fastkwire._classes import Family

    family = Family(f"test_all_apis_{engine}", importlib.import_module(engine).MessageMixin)
    names = converted.all_names()
    assert len(names) >= 180
    checked = 0
    for name in names:
        cls = family.get(name)
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            body = cls().encode(v)
            back = cls.decode(body, v)
            assert back == cls(), (name, v)
            assert back.encode(v) == body, (name, v)
            checked += 1
    assert checked >= 700
    # Never-null struct fields default to a struct of defaults, not None; a field may be
    # named like a builtin (LeaderAndIsrRequest.type).
    voter = family.get("UpdateRaftVoterRequest")
    assert isinstance(voter().k_raft_version_feature, voter.KRaftVersionFeature)
    assert family.get("LeaderAndIsrRequest")(type=1).type == 1

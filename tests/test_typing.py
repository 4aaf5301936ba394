"""The stubs: mypy --strict accepts the typed example, rejects misuse, and the stubs match
both the schemas (no drift) and the modules they describe (mypy's stubtest)."""

import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy is not installed")

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "typed_usage.py"
# Cython artefacts no stub should spell out: slot-wrapper __init__ signatures and the
# pickling helpers Cython adds to cdef classes.
CYTHON_ALLOWLIST = r"""

fastkwire\._messages_cython\.\w+\.__reduce_cython__
fastkwire\._messages_cython\.\w+\.__setstate_cython__
fastkwire\._messages_cython\.\w+
"""


def mypy(*args, cache):
    # MYPYPATH: the stubs in this checkout, whatever copy of fastkwire is installed.
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    # follow-imports=silent: the package's own .py modules are not what is checked here
    # (as for any installed package); the files named are, stubs included.
    cmd = [
        sys.executable,
        "-m",
        "mypy",
        "--strict",
        "--follow-imports=silent",
        "--cache-dir",
        str(cache),
        *map(str, args),
    ]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)


@pytest.mark.tooling
def test_stubs_pass_mypy_strict(tmp_path):
    stubs = sorted((ROOT / "src" / "fastkwire").glob("*.pyi"))
    assert {p.name for p in stubs} >= {
        "__init__.pyi",
        "_messages_python.pyi",
        "_messages_cython.pyi",
        "errors.pyi",
        "columns.pyi",
        "records.pyi",
    }
    assert (ROOT / "src" / "fastkwire" / "py.typed").exists()
    result = mypy(*stubs, cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.tooling
def test_typed_example_passes_mypy_strict(tmp_path):
    result = mypy(EXAMPLE, cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout


@pytest.mark.parametrize("pure", ["0", "1"], ids=["default", "pure"])
def test_typed_example_runs(pure):
    # The types describe what the codecs really do: the example asserts its results.
    env = {**os.environ, "FASTKWIRE_PURE": pure}
    result = subprocess.run([sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "DecodeError at offset" in result.stdout


@pytest.mark.tooling
def test_every_public_name_has_a_type(tmp_path):
    # Catches a name added to fastkwire.__all__ without a stub (mypy: no attribute).
    import fastkwire

    names = sorted(fastkwire.__all__)
    probe = tmp_path / "names.py"
    # Attribute access, not `from fastkwire import x`, which a submodule x would satisfy.
    probe.write_text("import fastkwire\n" + "".join(f"fastkwire.{n}\n" for n in names))
    result = mypy(probe, cache=tmp_path / "cache")
    assert result.returncode == 0, result.stdout + result.stderr


MISUSE = """\
from fastkwire import LeaveGroupRequest, TaskOffsetColumns, decode_request, encode_request, explain
ok = LeaveGroupRequest(group_id="g")
LeaveGroupRequest(group_id=5)
LeaveGroupRequest(grup_id="g")
LeaveGroupRequest.MemberIdentity(reason=3)
n: int = ok.encode(3)
LeaveGroupRequest.decode("text", 3)
LeaveGroupRequest.decode(b"", 3, arrays="tuple")
ok.group_id = None
encode_request(ok, "3", 1)
header, msg = decode_request(b"")
msg.no_such_field
TaskOffsetColumns(partition="12")
explain(b"", api_key=13.5, version=1)
from fastkwire import records
records.write_batch([b"not a record"])
records.write_batch([], compression="brotli")
records.read_batches("text")
"""


@pytest.mark.tooling
def test_mypy_rejects_misuse_on_every_bad_line(tmp_path):
    bad = tmp_path / "misuse.py"
    bad.write_text(MISUSE)
    result = mypy(bad, cache=tmp_path / "cache")
    flagged = {int(n) for n in re.findall(r"misuse\.py:(\d+): error", result.stdout)}
    assert flagged == set(range(3, 11)) | {12, 13, 14, 16, 17, 18}, (
        result.stdout
    )  # 1, 2, 11, 15 are fine


def test_stubs_match_the_schemas():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "make_stubs.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


MESSAGE_MODULES = ("fastkwire._messages_python", "fastkwire._messages_cython")


def stubtest(modules, tmp_path, shared_stub=None):
    """mypy's stubtest of `modules` against a copy of the stubs. A message module's stub
    only re-exports `_message_types` (which stubtest would then skip as checked
    elsewhere): the copy puts the shared stub in its place, so its classes are checked
    against each module's own."""
    stubs = tmp_path / "stubs"
    src = ROOT / "src"
    for path in src.joinpath("fastkwire").rglob("*.pyi"):
        target = stubs / path.relative_to(src)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(path.read_text())
    shared = shared_stub or (src / "fastkwire" / "_message_types.pyi").read_text()
    for module in set(modules) & set(MESSAGE_MODULES):
        (stubs / (module.replace(".", "/") + ".pyi")).write_text(shared)
    allowlist = tmp_path / "allowlist.txt"
    allowlist.write_text(CYTHON_ALLOWLIST)
    env = {**os.environ, "MYPYPATH": str(stubs)}
    cmd = [
        sys.executable,
        "-m",
        "mypy.stubtest",
        *modules,
        "--allowlist",
        str(allowlist),
        "--ignore-unused-allowlist",
        "--mypy-config-file",
        os.devnull,
    ]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True)


@pytest.mark.tooling
def test_stubs_match_the_runtime_modules(tmp_path):
    # One stubtest run for every module (each run builds the stubs anew: ~25 s apiece).
    modules = ["fastkwire.errors", "fastkwire.columns", "fastkwire.records"]
    for module in MESSAGE_MODULES:
        try:
            importlib.import_module(module)
            modules.append(module)
        except ImportError:
            assert module == "fastkwire._messages_cython", module  # the pure one always imports
    result = stubtest(modules, tmp_path)
    assert result.returncode == 0, result.stdout[-5000:] + result.stderr
    assert f"no issues found in {len(modules)} modules" in result.stdout, result.stdout[-500:]


def test_the_message_classes_are_declared_once():
    # One stub for both modules (each module's stub re-exports it)...
    pkg = ROOT / "src" / "fastkwire"
    for module in MESSAGE_MODULES:
        text = (pkg / (module.rsplit(".", 1)[1] + ".pyi")).read_text()
        assert "class " not in text and "from ._message_types import *" in text


@pytest.mark.tooling
def test_stubtest_finds_a_wrong_message_stub(tmp_path):
    # ...and the copy stubtest checks is not a vacuous re-export: a wrong signature fails.
    shared = (ROOT / "src" / "fastkwire" / "_message_types.pyi").read_text()
    wrong = shared.replace(
        "def is_flexible(cls, version: int) -> bool: ...",
        "def is_flexible(cls, version: int, extra: int) -> bool: ...",
        1,
    )
    assert wrong != shared
    result = stubtest(["fastkwire._messages_python"], tmp_path, shared_stub=wrong)
    assert result.returncode == 1 and 'runtime does not have parameter "extra"' in result.stdout

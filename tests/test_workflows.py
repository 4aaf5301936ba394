"""The GitHub workflows cannot run here, so check them against GitHub's workflow schema
(the copy bundled with check-jsonschema) and check that they do what the project needs."""

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.tooling
pytest.importorskip("check_jsonschema", reason="check-jsonschema is not installed")
from ruamel.yaml import YAML  # noqa: E402 - a dependency of check-jsonschema

WORKFLOWS = Path(__file__).resolve().parent.parent / ".github" / "workflows"
FILES = sorted(WORKFLOWS.glob("*.yml"))


def validate(*paths):
    cmd = [sys.executable, "-m", "check_jsonschema", "--builtin-schema", "vendor.github-workflows"]
    return subprocess.run([*cmd, *map(str, paths)], capture_output=True, text=True)


def load(name):
    return YAML(typ="safe").load((WORKFLOWS / name).read_text())


def steps(job):
    return [s.get("uses", "") + " " + s.get("run", "") for s in job["steps"]]


def test_the_three_workflows_exist():
    assert [p.name for p in FILES] == ["benchmarks.yml", "tests.yml", "wheels.yml"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_workflow_matches_github_schema(path):
    result = validate(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_schema_check_rejects_a_broken_workflow(tmp_path):
    # Proves the validation above is real: a job without runs-on is not a workflow.
    bad = tmp_path / "bad.yml"
    bad.write_text("on: push\njobs:\n  j:\n    steps:\n      - run: echo hi\n")
    result = validate(bad)
    assert result.returncode != 0
    assert "runs-on" in result.stdout + result.stderr


def test_tests_cover_every_python_and_both_implementations():
    job = load("tests.yml")["jobs"]["test"]
    matrix = job["strategy"]["matrix"]
    assert matrix["python-version"] == ["3.10", "3.11", "3.12", "3.13", "3.14", "3.15"]
    assert sorted(matrix["implementation"]) == ["cython", "python"]
    # Evaluated per matrix cell by GitHub: each variable is "1" in its own half only.
    assert job["env"]["FASTKWIRE_PURE"] == "${{ matrix.implementation == 'python' && '1' || '' }}"
    assert job["env"]["FASTKWIRE_REQUIRE_EXTENSION"] == (
        "${{ matrix.implementation == 'cython' && '1' || '' }}"
    )
    assert any("pytest" in s for s in steps(job))


def test_slow_packaging_tests_run_in_ci():
    job = load("tests.yml")["jobs"]["packaging"]
    run = [s for s in job["steps"] if "test_packaging.py" in s.get("run", "")]
    assert run and run[0]["env"]["FASTKWIRE_SLOW_TESTS"] == "1"


def test_wheels_build_sdist_and_all_platforms_and_publish_on_tags():
    wf = load("wheels.yml")
    assert "v*" in wf["on"]["push"]["tags"]
    jobs = wf["jobs"]
    assert any("python -m build --sdist" in s for s in steps(jobs["sdist"]))
    runners = {(e["os"], e["archs"]) for e in jobs["wheels"]["strategy"]["matrix"]["include"]}
    assert runners == {
        ("ubuntu-latest", "x86_64"),
        ("ubuntu-24.04-arm", "aarch64"),
        ("macos-latest", "x86_64 arm64"),
        ("windows-latest", "AMD64"),
    }
    assert any(s.startswith("pypa/cibuildwheel@") for s in steps(jobs["wheels"]))
    assert any(s.startswith("actions/upload-artifact@") for s in steps(jobs["wheels"]))
    publish = jobs["publish"]
    assert set(publish["needs"]) == {"sdist", "wheels"}
    assert "refs/tags/v" in publish["if"]
    # Trusted publishing: an OIDC token, no stored password.
    assert publish["permissions"] == {"id-token": "write"}
    assert any(s.startswith("pypa/gh-action-pypi-publish@") for s in steps(publish))
    assert "password" not in str(publish)


def test_benchmarks_keep_results_as_an_artifact():
    job = load("benchmarks.yml")["jobs"]["benchmarks"]
    run = next(s["run"] for s in job["steps"] if "pytest" in s.get("run", ""))
    assert "benchmarks" in run and "--benchmark-json=benchmark-results.json" in run
    upload = next(
        s for s in job["steps"] if s.get("uses", "").startswith("actions/upload-artifact@")
    )
    assert upload["with"]["path"].split() == ["benchmark-results.json", "benchmark-results.md"]

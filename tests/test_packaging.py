"""What users get from `pip install`: the sdist, installs from it, the manylinux wheel.

The build-and-install tests take minutes and install from PyPI (setuptools, the test
tools), so they run only when asked: FASTKWIRE_SLOW_TESTS=1 or `pytest --run-slow`.
They need `build`, `auditwheel<6.8.1` and patchelf (see tools/build_wheel.sh).
"""

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODULES = ["_core", "_engine"]
FALLBACK_MESSAGE = "installing the pure-Python implementation only"


def slow_enabled(config):
    try:
        flag = config.getoption("--run-slow")
    except ValueError:  # the option is not registered
        flag = False
    return bool(flag) or os.environ.get("FASTKWIRE_SLOW_TESTS") == "1"


@pytest.fixture(scope="module")
def slow(request):
    if not slow_enabled(request.config):
        pytest.skip("slow packaging test: set FASTKWIRE_SLOW_TESTS=1 or pass --run-slow")


def clean_env(**extra):
    """The environment minus anything that could make a child see src/ or change the build."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTKWIRE_")}
    env.pop("PYTHONPATH", None)
    env.update(extra)
    return env


def run(cmd, **kwargs):
    kwargs.setdefault("env", clean_env())
    result = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout}\n{result.stderr}"
    return result


def make_venv(path, system_site_packages=False):
    cmd = [sys.executable, "-m", "venv", path]
    run(cmd + ["--system-site-packages"] if system_site_packages else cmd)
    return path / ("Scripts" if os.name == "nt" else "bin") / "python"


def installed(python, cwd):
    """(implementation, file) of the fastkwire that `python` imports, away from the checkout."""
    code = "import fastkwire; print(fastkwire.implementation); print(fastkwire.__file__)"
    out = run([python, "-c", code], cwd=cwd).stdout.split()
    return out[0], Path(out[1])


@pytest.fixture(scope="module")
def sdist(slow, tmp_path_factory):
    out = tmp_path_factory.mktemp("sdist")
    run([sys.executable, "-m", "build", "--sdist", "--outdir", out, ROOT])
    (path,) = out.glob("fastkwire-*.tar.gz")
    return path


@pytest.fixture
def venv_without_cython(slow, tmp_path):
    python = make_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--quiet", "setuptools>=77"])
    # The point of the test: no Cython anywhere the build can see.
    probe = subprocess.run([python, "-c", "import Cython"], capture_output=True)
    assert probe.returncode != 0
    return python


@pytest.mark.slow
def test_sdist_holds_generated_c_and_schemas_and_no_binaries(sdist):
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    for module in MODULES:
        assert f"src/fastkwire/{module}.c" in names
        assert f"src/fastkwire/{module}.pyx" in names
    schemas = {
        p.relative_to(ROOT).as_posix() for p in (ROOT / "src/fastkwire/schemas").rglob("*.json")
    }
    assert "src/fastkwire/schemas/descriptions/fields.json" in schemas  # the fields' meanings
    assert schemas and schemas <= names
    assert "PKG-INFO" in names
    assert not [n for n in names if n.endswith((".so", ".pyd", ".pyc"))]


@pytest.mark.slow
def test_sdist_builds_with_a_compiler_and_no_cython(sdist, venv_without_cython, tmp_path):
    run([venv_without_cython, "-m", "pip", "install", "--no-build-isolation", "--no-deps", sdist])
    implementation, where = installed(venv_without_cython, tmp_path)
    assert implementation == "cython"
    assert (tmp_path / "venv") in where.parents


@pytest.mark.slow
def test_sdist_without_a_working_compiler_installs_pure_python_and_says_so(
    sdist, venv_without_cython, tmp_path
):
    # CC=false: a compiler that always fails, as on a machine without one.
    result = run(
        [
            venv_without_cython,
            "-m",
            "pip",
            "install",
            "-v",
            "--no-build-isolation",
            "--no-deps",
            sdist,
        ],
        env=clean_env(CC="false"),
    )
    assert "compiled core could not be built" in result.stdout + result.stderr
    assert FALLBACK_MESSAGE in result.stdout + result.stderr
    implementation, where = installed(venv_without_cython, tmp_path)
    assert implementation == "python"
    assert (tmp_path / "venv") in where.parents
    # and importing it says so, once, naming the way to silence it
    warned = run([venv_without_cython, "-c", "import fastkwire"], cwd=tmp_path).stderr
    assert warned.count("the compiled core did not import") == 1 and "FASTKWIRE_PURE=1" in warned
    quiet = run(
        [venv_without_cython, "-c", "import fastkwire"],
        cwd=tmp_path,
        env=clean_env(FASTKWIRE_PURE="1"),
    ).stderr
    assert quiet == ""


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="manylinux wheels are Linux only")
def test_manylinux_wheel_installs_and_passes_the_suite(slow, tmp_path):
    for tool in ("build", "auditwheel"):  # what tools/build_wheel.sh runs (see the README)
        pytest.importorskip(tool, reason=f"{tool} is not installed")
    if shutil.which("patchelf") is None:
        pytest.skip("patchelf is not installed (auditwheel repair needs it)")
    out = run(["bash", ROOT / "tools" / "build_wheel.sh", tmp_path / "wheelhouse"]).stdout
    wheel = Path(out.strip().splitlines()[-1])
    assert wheel.exists() and "manylinux" in wheel.name
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    for module in MODULES:
        assert any(n.startswith(f"fastkwire/{module}.") and n.endswith(".so") for n in names)
    assert not [n for n in names if n.endswith(".c")]
    # Nothing grafted: the core links only against what manylinux guarantees.
    assert not [n for n in names if ".libs/" in n]

    # Then cibuildwheel's test step, as it runs after building each wheel: a fresh venv
    # with its test-requires, and its test-command from a directory outside the checkout.
    config = cibuildwheel_config()
    python = make_venv(tmp_path / "venv")
    run([python, "-m", "pip", "install", "--quiet", *config["test-requires"]])
    run([python, "-m", "pip", "install", "--no-deps", "--no-index", wheel])
    implementation, where = installed(python, tmp_path)
    assert implementation == "cython"
    assert (tmp_path / "venv") in where.parents
    env = clean_env(
        PATH=f"{python.parent}{os.pathsep}{os.environ['PATH']}", **config["test-environment"]
    )
    for command in config["test-command"]:
        step = subprocess.run(
            command.replace("{project}", str(ROOT)),
            shell=True,
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
        )
        assert step.returncode == 0, command + "\n" + step.stdout[-5000:] + step.stderr[-2000:]
    assert " passed" in step.stdout  # the last command is the suite


@pytest.mark.tooling
def test_cibuildwheel_builds_cpython_310_to_315_and_314t_315t_on_every_target():
    pytest.importorskip("cibuildwheel", reason="cibuildwheel is not installed")
    expected = {
        "linux": {
            f"{lib}_{arch}" for lib in ("manylinux", "musllinux") for arch in ("x86_64", "aarch64")
        },
        "macos": {"macosx_x86_64", "macosx_arm64"},
        "windows": {"win_amd64"},
    }
    for platform, targets in expected.items():
        result = run(
            [
                sys.executable,
                "-m",
                "cibuildwheel",
                "--print-build-identifiers",
                "--platform",
                platform,
            ],
            cwd=ROOT,
        )
        got = set(result.stdout.split())
        want = {f"cp3{minor}-{t}" for minor in range(10, 16) for t in targets} | {
            f"cp3{minor}t-{t}" for minor in (14, 15) for t in targets
        }
        assert got == want, platform


def cibuildwheel_config():
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["cibuildwheel"]


@pytest.mark.tooling
def test_cibuildwheel_config_matches_its_schema():
    cibuildwheel = pytest.importorskip("cibuildwheel", reason="cibuildwheel is not installed")
    jsonschema = pytest.importorskip("jsonschema")
    schema_file = Path(cibuildwheel.__file__).parent / "resources" / "cibuildwheel.schema.json"
    schema = json.loads(schema_file.read_text())
    jsonschema.validate(cibuildwheel_config(), schema)
    # A misspelt option must not slip through.
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**cibuildwheel_config(), "test-comand": "pytest"}, schema)


@pytest.mark.tooling
def test_cibuildwheel_tests_the_installed_compiled_wheel():
    config = cibuildwheel_config()
    commands = config["test-command"]
    assert any("fastkwire.implementation != 'cython'" in c for c in commands)
    assert any("pytest {project}/tests" in c for c in commands)
    assert config["environment"]["FASTKWIRE_REQUIRE_EXTENSION"] == "1"
    assert config["test-environment"]["FASTKWIRE_REQUIRE_EXTENSION"] == "1"


PEERS_HIDDEN = """
import importlib.util, sys
HIDDEN = ("kio", "kafka", "cramjam", "aiokafka")
class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, Hide())
real = importlib.util.find_spec
importlib.util.find_spec = lambda name, package=None: (
    None if name.split(".")[0] in HIDDEN else real(name, package))
"""


def test_suite_collects_without_the_optional_peers(tmp_path):
    """Without kio, kafka-python, aiokafka and cramjam the suite collects: the tests that
    need one skip (a module that imported one at its top was a collection error)."""
    (tmp_path / "sitecustomize.py").write_text(PEERS_HIDDEN)
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(
            [str(tmp_path)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        ),
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            str(ROOT / "tests"),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "error" not in result.stdout.splitlines()[-1]


def test_the_compiled_modules_carry_no_debug_sections():
    # CPython's CFLAGS carry -g: without -g0 the debug sections were 11 of the wheel's
    # 13 MB of extension modules. A build asked for -g (CFLAGS) keeps them, as ASan's does.
    import importlib.machinery
    import os
    import sys

    if sys.platform != "linux" or "-g" in os.environ.get("CFLAGS", "").split():
        pytest.skip("ELF builds without CFLAGS=-g only")
    core = pytest.importorskip("fastkwire._core")
    assert core.__file__.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))
    with open(core.__file__, "rb") as f:
        image = f.read()
    assert image[:4] == b"\x7fELF"
    assert b".debug_info" not in image and b".debug_line" not in image

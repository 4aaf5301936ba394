"""Which implementation runs, and that a user hears of it: the warning on import when the
compiled core is missing (a build without a compiler), and `fastkwire --version`."""

import os
import re
import subprocess
import sys

import pytest

import fastkwire

# Run in a child: the compiled modules cannot be imported there, as after an install whose
# build failed (no C compiler), whatever this checkout has built.
WITHOUT_COMPILED_CORE = """
import importlib.abc, sys
COMPILED = {"fastkwire._core", "fastkwire._engine", "fastkwire._records", "fastkwire._kafka_python"}
class NotBuilt(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name in COMPILED:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
sys.meta_path.insert(0, NotBuilt())
"""


def child(code, pure=None):
    env = {k: v for k, v in os.environ.items() if k != "FASTKWIRE_PURE"}
    if pure is not None:
        env["FASTKWIRE_PURE"] = pure
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_COMPILED_CORE + code],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )


def test_a_missing_compiled_core_warns_on_import_and_names_fastkwire_pure():
    done = child("import fastkwire; import fastkwire; print(fastkwire.implementation)")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "python\n"
    assert done.stderr.count("RuntimeWarning") == 1  # once, on the first import
    assert re.search(
        r"the compiled core did not import \(No module named 'fastkwire\._\w+'\)", done.stderr
    )
    assert "FASTKWIRE_PURE=1" in done.stderr


@pytest.mark.parametrize("value", ["1", "yes"])
def test_choosing_pure_python_gives_no_warning(value):
    done = child("import fastkwire; print(fastkwire.implementation)", pure=value)
    assert (done.returncode, done.stdout, done.stderr) == (0, "python\n", "")


def test_version_says_which_core_and_why():
    done = child("from fastkwire.cli import main; main(['--version'])", pure="1")
    assert (
        done.stdout
        == f"fastkwire {fastkwire.__version__} (pure-Python core: FASTKWIRE_PURE is set)\n"
    )
    done = child(
        "import warnings; warnings.simplefilter('ignore')\n"
        "from fastkwire.cli import main; main(['--version'])"
    )
    assert re.fullmatch(
        re.escape(
            f"fastkwire {fastkwire.__version__} (pure-Python core: the compiled core did not "
        )
        + r"import: No module named 'fastkwire\._\w+'\)\n",
        done.stdout,
    )


def test_version_of_this_process():
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire", "--version"], capture_output=True, text=True, timeout=60
    )
    core = "compiled core" if fastkwire.implementation == "cython" else "pure-Python core: "
    assert done.returncode == 0 and done.stderr == ""
    assert done.stdout.startswith(f"fastkwire {fastkwire.__version__} ({core}")

"""Shell completion of `fastkwire` through the optional argcomplete: subcommands and
flags complete; without argcomplete, or when no shell asks, nothing changes."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("argcomplete", reason="the completion extra (argcomplete) is not installed")


def complete(line, tmp_path, block_argcomplete=False):
    """What argcomplete offers for the command line `line`, the cursor at its end."""
    out = tmp_path / "completions"
    env = dict(
        os.environ,
        _ARGCOMPLETE="1",
        COMP_LINE=line,
        COMP_POINT=str(len(line)),
        _ARGCOMPLETE_STDOUT_FILENAME=str(out),
    )
    code = "import sys; sys.argv[0] = 'fastkwire'\n"
    if block_argcomplete:
        code += "sys.modules['argcomplete'] = None\n"
    code += "from fastkwire.cli import main; sys.exit(main())"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    return done, (out.read_text().split() if out.exists() else None)


def test_subcommands_and_flags_complete(tmp_path):
    done, offered = complete("fastkwire expl", tmp_path)
    assert done.returncode == 0 and offered == ["explain"]
    _, offered = complete("fastkwire explain --list", tmp_path)
    assert offered == ["--list-examples"]
    _, offered = complete("fastkwire remove-members --inst", tmp_path)
    assert offered == ["--instance-id"]


def test_without_argcomplete_the_command_runs_as_before(tmp_path):
    done, offered = complete("fastkwire expl", tmp_path, block_argcomplete=True)
    assert offered is None
    assert done.returncode == 2 and "usage: fastkwire" in done.stderr  # no subcommand given


def test_the_entry_point_is_marked_for_global_completion():
    from fastkwire import cli

    with open(cli.__file__, encoding="utf-8") as f:
        assert "PYTHON_ARGCOMPLETE_OK" in f.read(1024)

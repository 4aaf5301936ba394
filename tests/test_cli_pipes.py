"""Every subcommand ends quietly when the reader of its output goes away (`| head`), as
Unix tools do: no "[Errno 32] Broken pipe", no traceback, exit 141 (what a shell shows for a
process SIGPIPE ended); and every subcommand's help lists its exit codes."""

import json
import subprocess
import sys

import pytest

import fastkwire._messages_python as codec
from fastkwire.cli import EXIT_CLOSED_PIPE, EXIT_CODES, build_parser


def write_capture(path, exchanges):
    """A JSON-lines capture as `fastkwire proxy --record` writes it."""
    with open(path, "w") as f:
        for cid in range(exchanges):
            req = codec.LeaveGroupRequest(
                group_id="orders",
                members=[codec.LeaveGroupRequest.MemberIdentity(group_instance_id=f"host-{cid}")],
            )
            resp = codec.LeaveGroupResponse()
            line = {
                "time": 1.0 + cid,
                "conn": 1,
                "client": "127.0.0.1:5000",
                "client_id": "ops",
                "api": "LeaveGroup",
                "api_key": 13,
                "version": 5,
                "correlation_id": cid,
                "latency_ms": 1.0,
                "fault": None,
                "local_answer": False,
                "expects_response": True,
                "request": codec.encode_request(req, 5, cid, client_id="ops").hex(),
                "response": codec.encode_response(resp, 5, cid).hex(),
            }
            f.write(json.dumps(line) + "\n")
    return path


def first_line_then_close(argv):
    """Runs `fastkwire ARGV | head -1`: reads one line, closes the pipe, waits."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "fastkwire", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    line = proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    return line.decode(), proc.wait(timeout=60), err


@pytest.mark.parametrize(
    "argv",
    [
        ["explain", "--capture", "{capture}"],
        ["explain", "--capture", "{capture}", "--json"],
        ["explain", "--file", "{big_frame}", "--api", "Metadata", "--version", "12"],
    ],
    ids=["capture", "capture-json", "frame"],
)
def test_a_closed_pipe_ends_the_command_quietly(tmp_path, argv):
    capture = write_capture(tmp_path / "traffic.jsonl", 2000)  # about 5 MB of explanation
    M = codec.MetadataResponse
    big = M(topics=[M.MetadataResponseTopic(name=f"topic-{i}") for i in range(5000)])
    big_frame = tmp_path / "metadata.bin"
    big_frame.write_bytes(codec.encode_response(big, 12, 1))
    argv = [a.format(capture=capture, big_frame=big_frame) for a in argv]
    line, code, err = first_line_then_close(argv)
    assert line  # it did start
    assert (code, err) == (EXIT_CLOSED_PIPE, "")


def test_the_old_failure_was_a_usage_error_with_errno_32(tmp_path):
    # What `explain --capture ... | head` printed before: the capture's own `except OSError`
    # took the closed pipe for a file it could not read. Now it never sees one.
    capture = write_capture(tmp_path / "traffic.jsonl", 2000)
    _, code, err = first_line_then_close(["explain", "--capture", str(capture)])
    assert "errno 32" not in err.lower() and "broken pipe" not in err.lower() and code != 2


def test_a_command_that_writes_nothing_keeps_its_exit_code():
    done = subprocess.run(
        [sys.executable, "-m", "fastkwire", "explain", "0000001"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "odd number of hex digits (7)" in done.stderr


def test_every_subcommand_help_lists_its_exit_codes():
    parser = build_parser()
    subcommands = next(a for a in parser._actions if a.dest == "command").choices
    assert set(subcommands) == set(EXIT_CODES)
    for name, sub in subcommands.items():
        text = sub.format_help()
        assert "\nexit codes:\n  0    " in text, name
        assert "  141  the output's reader went away" in text, name
    text = subcommands["remove-members"].format_help()
    assert "  1    the request went through but some member was not removed" in text

"""`fastkwire explain` on the command line: the list of built-in examples, and input
mistakes told as what they are (odd hex digits, a missing file)."""

import argparse
import io
import re

import pytest

from fastkwire._explain_examples import example_names
from fastkwire.cli import configure_explain, run_explain


def cli(*argv, stdin=b""):
    args = configure_explain(argparse.ArgumentParser()).parse_args(argv)
    out, err = io.StringIO(), io.StringIO()
    code = run_explain(args, stdout=out, stderr=err, stdin=io.TextIOWrapper(io.BytesIO(stdin)))
    return code, out.getvalue(), err.getvalue()


def test_list_examples_shows_every_api_with_its_versions():
    code, out, err = cli("--list-examples")
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].split() == ["API", "REQUESTS", "RESPONSES"]
    rows = {line.split()[0]: line.split()[1:] for line in lines[1:-1]}
    assert rows["leave-group"] == ["v0-v5", "v0-v5"]
    assert rows["allocate-producer-ids"] == ["v0", "v0"]
    names = example_names()
    bases = {re.sub(r"-v\d+(-response)?$", "", n) for n in names}
    assert set(rows) == bases
    assert lines[-1].startswith(f"{len(bases)} APIs, {len(names)} examples: --example NAME")


@pytest.mark.parametrize("api", ["LeaveGroup", "leave-group", "leave_group", "13"])
def test_list_examples_of_one_api_by_name_or_key(api):
    code, out, err = cli("--list-examples", api)
    assert (code, err) == (0, "")
    want = [f"leave-group-v{v}" for v in range(6)] + [
        f"leave-group-v{v}-response" for v in range(6)
    ]
    assert out.split() == want
    for name in out.split():  # each one listed is one --example explains
        assert cli("--example", name)[0] == 0


def test_list_examples_by_part_of_a_name():
    code, out, _ = cli("--list-examples", "share-group")
    names = out.split()
    assert code == 0
    assert sorted(names) == sorted(n for n in example_names() if "share-group" in n)
    assert "share-group-heartbeat-v1" in names and "describe-share-group-offsets-v0" in names


def test_list_examples_of_an_unknown_api_is_a_usage_error():
    code, out, err = cli("--list-examples", "nothing-like-it")
    assert (code, out) == (2, "")
    assert "no API is called 'nothing-like-it'" in err
    code, out, err = cli("--list-examples", "999")
    assert (code, out) == (2, "") and "no API has key 999" in err


def test_an_unknown_example_points_at_the_list():
    code, out, err = cli("--example", "list")
    assert (code, out) == (2, "")
    assert "unknown example 'list': --list-examples lists them" in err


def test_help_no_longer_ends_in_dots():
    text = configure_explain(argparse.ArgumentParser()).format_help()
    assert "--list-examples [API]" in text
    assert "streams-group-heartbeat-v0, ..." not in text


@pytest.mark.parametrize(
    "argv, said",
    [
        (["0000001"], "the frame on the command line: odd number of hex digits (7)"),
        (["00 00 00 1"], "the frame on the command line: odd number of hex digits (7)"),
        (["00zz"], "the frame on the command line: not hex: 'z' is not a hex digit"),
    ],
)
def test_hex_mistakes_on_the_command_line(argv, said):
    code, out, err = cli(*argv)
    assert (code, out) == (2, "") and said in err


def test_odd_hex_digits_in_a_file_or_on_stdin(tmp_path):
    f = tmp_path / "frame.hex"
    f.write_text("00000012000d0005000000000000000102010101000\n")  # 43 digits
    code, out, err = cli("--file", str(f))
    assert (code, out) == (2, "")
    assert f"--file '{f}' holds hex text with an odd number of hex digits (43)" in err
    code, _, err = cli("--file", "-", stdin=b"abc")
    assert code == 2 and "stdin holds hex text with an odd number of hex digits (3)" in err


def test_a_missing_file_is_named_without_errno(tmp_path):
    missing = tmp_path / "nope.bin"
    code, out, err = cli("--file", str(missing))
    assert (code, out) == (2, "")
    assert err == f"fastkwire explain: --file '{missing}': no such file or directory\n"
    code, out, err = cli("--capture", str(missing))
    assert code == 2 and "Errno" not in err and "no such file or directory" in err


def test_a_capture_filter_that_matches_nothing_says_what_the_capture_holds(tmp_path):
    from test_cli_pipes import write_capture

    capture = write_capture(tmp_path / "traffic.jsonl", 3)
    code, out, err = cli("--capture", str(capture), "--version", "99")
    assert (code, out) == (0, "")
    assert err == (
        "0 exchanges\n"
        "fastkwire explain: warning: none of the capture's 3 exchanges matched --version 99; "
        "it holds LeaveGroup v5 (3)\n"
    )
    code, _, err = cli("--capture", str(capture), "--api", "Metadata", "--client-id", "x")
    assert "matched --api Metadata --client-id 'x'" in err
    code, out, err = cli("--capture", str(capture), "--version", "5")
    assert code == 0 and err == "3 exchanges\n" and out.count("=== ") == 3

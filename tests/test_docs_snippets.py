"""Every snippet of README.md and docs/*.md runs as printed and shows what it prints.

How the documents are read (write new snippets this way):
- A ```python block runs; the blocks of one document run in order in one namespace, as a
  reader would paste them. A ```text block right after one (blank lines between at most)
  is what it prints, compared exactly except that a line `...` stands for any lines and
  `...` inside a line for any text (doctest's ELLIPSIS).
- A ```console block is commands (`$ fastkwire ...`), each followed by what it prints,
  compared the same way; each runs in this process through `fastkwire.cli.main`.
- The line before a block may say how to run it, in an HTML comment (GitHub hides it):
  `<!-- snippet: broker -->` runs it against the suite's broker (fastkwire.testing), with
  `127.0.0.1:9092` in the code standing for the broker's address; `<!-- snippet: compiled
  -->` needs the compiled core (skipped under FASTKWIRE_PURE=1); both may be given
  (`broker compiled`); `needs=MODULE` skips it, saying so, where that optional peer is
  not installed (a client library with no build for the interpreter under test), and
  `needs=fastkwire.aiokafka` (an accelerator) where it declines, with its reason;
  `<!-- snippet: skip REASON -->` is not run, and the test says why.
Other blocks (shell set-up commands, JSON, plain text) are not run here: .ci/run runs
README's set-up commands.
"""

import contextlib
import doctest
import importlib.util
import io
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest

import fastkwire
from broker import kafka_broker  # noqa: F401 - a fixture, requested only where a snippet needs it

ROOT = Path(__file__).resolve().parent.parent
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BROKER_PLACEHOLDER = "127.0.0.1:9092"
DIRECTIVE = re.compile(r"<!--\s*snippet:\s*(.*?)\s*-->")
FLAGS = {"broker", "compiled"}
FENCE = re.compile(r"^(\s*)```(\S*)\s*$")
RUN_KINDS = ("python", "console")


@dataclass
class Block:
    kind: str  # the fence's info string: python, console, text, ...
    line: int  # 1-based line of the opening fence
    text: str
    flags: frozenset = frozenset()  # of FLAGS
    skip: str = ""  # why it is not run, for a skipped one
    needs: tuple = ()  # modules it imports that the suite may run without
    output: str | None = None  # for python: the text block that follows
    where: str = field(default="", repr=False)


def read_blocks(path):
    """The fenced blocks of a markdown file, with their directives; a text block right
    after a python block becomes its output."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, i, previous = [], 0, ""
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            if lines[i].strip():
                previous = lines[i]
            i += 1
            continue
        indent, kind, start = m.group(1), m.group(2), i
        body = []
        i += 1
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i][len(indent) :] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{path.name}:{start + 1}: a fence that is never closed")
        where = f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}:{start + 1}"
        block = Block(kind, start + 1, "\n".join(body) + "\n", where=where)
        d = DIRECTIVE.search(previous)
        if d:
            words = d.group(1).split()
            if words[:1] == ["skip"]:
                block.skip = " ".join(words[1:])
                assert block.skip, f"{where}: a skipped snippet says why"
            else:
                block.needs = tuple(w[len("needs=") :] for w in words if w.startswith("needs="))
                words = [w for w in words if not w.startswith("needs=")]
                assert words and set(words) <= FLAGS, f"{where}: unknown directive {d.group(0)}"
                block.flags = frozenset(words)
        follows_code = blocks and blocks[-1].kind == "python" and previous.startswith("```")
        if kind == "text" and follows_code and blocks[-1].output is None:
            blocks[-1].output = block.text
        else:
            blocks.append(block)
        previous = lines[i]
        i += 1
    return blocks


def _matches(expected, got):
    checker = doctest.OutputChecker()
    return checker.check_output(expected, got, doctest.ELLIPSIS)


def _check_output(block, expected, got):
    if not _matches(expected, got):
        raise AssertionError(
            f"{block.where}: the snippet printed\n{got}\nbut the document shows\n{expected}"
        )


def run_python(block, namespace, broker):
    code = block.text
    if broker is not None:
        code = code.replace(BROKER_PLACEHOLDER, broker.bootstrap_servers)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, block.where, "exec"), namespace)  # noqa: S102 - the document's code
    if block.output is not None:
        expected = block.output
        if broker is not None:
            expected = expected.replace(BROKER_PLACEHOLDER, broker.bootstrap_servers)
        _check_output(block, expected, out.getvalue())


def console_commands(block):
    """(command, shown output) pairs of a console block."""
    pairs = []
    for line in block.text.splitlines():
        if line.startswith("$ "):
            pairs.append([line[2:], []])
        elif pairs:
            pairs[-1][1].append(line)
        else:
            raise AssertionError(f"{block.where}: output before any `$ ` command")
    return [(c, "\n".join(o) + "\n" if o else "") for c, o in pairs]


def run_console(block, capsys, broker):
    from fastkwire import cli

    for command, expected in console_commands(block):
        if broker is not None:
            command = command.replace(BROKER_PLACEHOLDER, broker.bootstrap_servers)
        argv = shlex.split(command)
        assert argv[0] == "fastkwire", f"{block.where}: only fastkwire commands run: {command}"
        capsys.readouterr()
        code = cli.main(argv[1:])
        got = capsys.readouterr().out
        assert code == 0, f"{block.where}: `{command}` exited {code}"
        _check_output(block, expected, got)


def _runnable(path):
    return [b for b in read_blocks(path) if b.kind in RUN_KINDS]


@pytest.mark.parametrize(
    "path", [d for d in DOCUMENTS if _runnable(d)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_every_snippet_runs_and_prints_what_the_document_shows(path, request, capsys):
    blocks = _runnable(path)
    namespace = {"__name__": "__snippet__"}
    skipped = []
    broker = None
    for block in blocks:
        if block.skip:
            skipped.append(f"{block.where}: {block.skip}")
            continue
        if "compiled" in block.flags and fastkwire.implementation != "cython":
            skipped.append(f"{block.where}: needs the compiled core")
            continue
        missing = [m for m in block.needs if importlib.util.find_spec(m) is None]
        if missing:
            skipped.append(f"{block.where}: needs {', '.join(missing)} (not installed)")
            continue
        declined = [
            f"{m} declines here: {why}"
            for m in block.needs
            if m.startswith("fastkwire.")
            and (why := importlib.import_module(m).unsupported_reason()) is not None
        ]
        if declined:
            skipped.append(f"{block.where}: {'; '.join(declined)}")
            continue
        if "broker" in block.flags and broker is None:
            broker = request.getfixturevalue("kafka_broker")
        use = broker if "broker" in block.flags else None
        if block.kind == "python":
            run_python(block, namespace, use)
        else:
            run_console(block, capsys, use)
    if skipped:
        # Everything that could run did; the report lists what could not, and why.
        request.node.user_properties.append(("skipped snippets", skipped))
        print("not run:", *skipped, sep="\n  ")


def test_the_reader_finds_outputs_directives_and_unclosed_fences(tmp_path):
    doc = tmp_path / "doc.md"
    doc.write_text(
        "Text.\n\n```python\nprint(1)\n```\n\n```text\n1\n```\n\n"
        "<!-- snippet: skip needs a cluster -->\n```python\nboom()\n```\n\n"
        "<!-- snippet: broker -->\n```console\n$ fastkwire --help\nusage: ...\n```\n\n```text\nnot an output\n```\n"
        "<!-- snippet: compiled needs=aiokafka -->\n```python\nimport aiokafka\n```\n"
    )
    blocks = read_blocks(doc)
    assert [(b.kind, set(b.flags), b.skip, b.output) for b in blocks] == [
        ("python", set(), "", "1\n"),
        ("python", set(), "needs a cluster", None),
        ("console", {"broker"}, "", None),
        ("text", set(), "", None),
        ("python", {"compiled"}, "", None),
    ]
    assert blocks[-1].needs == ("aiokafka",)
    assert console_commands(blocks[2]) == [("fastkwire --help", "usage: ...\n")]
    doc.write_text("```python\nprint(1)\n")
    with pytest.raises(AssertionError, match="never closed"):
        read_blocks(doc)


def test_a_snippet_that_prints_otherwise_fails():
    block = Block("python", 1, "print('two')\n", output="one\n", where="doc.md:1")
    with pytest.raises(AssertionError, match="printed\ntwo"):
        run_python(block, {}, None)
    block.output = "t...\n"
    run_python(block, {}, None)  # ELLIPSIS, as doctest

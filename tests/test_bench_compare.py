"""benchmarks/compare.py: a short summary by default, the tables behind --tables and in
the file -o writes, and nothing but the user's words in either (its CI call,
`compare.py --quick --json FILE -o FILE`, keeps working)."""

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
COMPARE = ROOT / "benchmarks" / "compare.py"


@pytest.fixture(scope="module")
def compare():
    sys.path.insert(0, str(COMPARE.parent))
    try:
        spec = importlib.util.spec_from_file_location("bench_compare", COMPARE)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.path.remove(str(COMPARE.parent))


def report(compare, load=3.0):
    """A pytest-benchmark JSON with every target's two contestants: ours 1000x faster than
    each peer, except on the first target's workload, where ours is slow (a miss)."""
    times = {}
    for _, group, ours, peer, _, _ in compare.TARGETS:
        workload, op = group.rsplit(" ", 1)
        times[(workload, op, ours)] = 1e-6
        times[(workload, op, peer)] = 1e-3
    workload, op = compare.TARGETS[0][1].rsplit(" ", 1)
    times[(workload, op, compare.TARGETS[0][2])] = 1.0
    benchmarks = [
        {
            "extra_info": {"contestant": c, "workload": w, "op": o},
            "stats": {"median": t, "min": t, "mean": t},
        }
        for (w, o, c), t in times.items()
    ]
    return {
        "datetime": "2026-12-02T01:00:00",
        "machine_info": {
            "cpu": {"brand_raw": "Some CPU", "count": 2},
            "python_implementation": "CPython",
            "python_version": "3.11.7",
            "fastkwire_bench_loadavg": load,
        },
        "benchmarks": benchmarks,
    }


def test_the_summary_is_short_and_says_a_quick_run_is_rough(compare):
    text, missed = compare.summary(report(compare), quick=True)
    lines = text.splitlines()
    assert len(lines) <= 40 and max(map(len, lines)) <= 110
    assert "A quick run: few rounds each, so these ratios are rough" in text
    results = compare.check_targets(compare.load_medians(report(compare)))
    misses = [r[0] for r in results if r[3] is False]
    assert missed == len(misses) >= 1 and None not in [r[3] for r in results]
    assert f"Targets: {len(results) - missed} met, {missed} missed, of {len(results)}." in text
    assert [line[len("  missed: ") :] for line in lines if line.startswith("  missed: ")] == misses
    assert compare.TARGETS[0][0] in misses
    assert "compiled core vs kafka-python: " in text
    assert "--tables" in text


def test_no_internal_words_in_labels_summary_or_tables(compare):
    tables, _ = compare.render(report(compare), quick=True)
    text = tables + compare.summary(report(compare), quick=True)[0]
    labels = [t[0] for t in compare.TARGETS]
    for words in (r"\bissue\b", r"\bseed\b", r"\bMISS\b", r"\b[a-z]+_[a-z]+_?\d* (en|de)code\b"):
        assert not re.search(words, text + "\n".join(labels), re.I), words
    assert len(labels) == len(set(labels))  # one target per comparison


def test_one_target_per_comparison_keeps_the_stricter_bound(compare):
    kept = compare._strictest(
        [
            ("a", "w decode", "cython", "msgspec", "within", 1.5),
            ("b", "w decode", "cython", "msgspec", "within", 1.0),
            ("c", "w decode", "cython", "kio", "faster", 1.2),
            ("d", "w decode", "cython", "kio", "faster", 1.5),
        ]
    )
    assert [t[0] for t in kept] == ["b", "d"]


def test_the_command_prints_the_summary_or_the_tables_and_writes_the_tables(tmp_path, compare):
    data = tmp_path / "bench.json"
    data.write_text(json.dumps(report(compare)))
    out = tmp_path / "bench.md"

    def run(*args):
        return subprocess.run(
            [sys.executable, str(COMPARE), "--from-json", str(data), *args],
            capture_output=True,
            text=True,
            timeout=60,
        )

    short = run("--quick", "-o", str(out))
    assert short.returncode == 0, short.stderr
    assert short.stdout.startswith("fastkwire benchmarks, 2026-12-02 01:00 UTC\n")
    assert "| workload |" not in short.stdout
    assert out.read_text().startswith("# fastkwire benchmark results") and "### Targets" in (
        out.read_text()
    )
    tables = run("--tables")
    assert "### Targets" in tables.stdout and "| missed |" in tables.stdout
    assert run("--check").returncode == 1  # a missed target


def test_without_the_bench_extra_it_says_what_to_install(compare, monkeypatch, capsys):
    monkeypatch.setattr(compare, "missing_tools", lambda: ["pytest_benchmark"])
    assert compare.main(["--quick"]) == 2
    assert 'pip install ".[bench]"' in capsys.readouterr().err


def test_a_quick_run_prints_the_summary_not_pytest_benchmarks_table(tmp_path):
    pytest.importorskip("pytest_benchmark")
    done = subprocess.run(
        [sys.executable, str(COMPARE), "--quick", "--json", str(tmp_path / "b.json")]
        + ["-o", str(tmp_path / "b.md"), "--", "-k", "test_free and cython and not 10000"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "Name (time in" not in done.stdout  # pytest-benchmark's table
    assert "Every median, ratio and target: --tables" in done.stdout
    assert "| workload |" in (tmp_path / "b.md").read_text()  # the tables went to -o

"""Run the benchmark suite; print a short summary (the speed-up over each peer, the
targets met and missed) and write every median, ratio and target as markdown.

    pip install ".[bench]"                       the peers and pytest-benchmark
    python benchmarks/compare.py                 full run: the summary, and the tables
                                                 written to benchmarks/results.md
    python benchmarks/compare.py --quick         smoke run with few rounds (rough ratios):
                                                 the summary only
    python benchmarks/compare.py --tables        the tables instead of the summary
    python benchmarks/compare.py --from-json F   an earlier --benchmark-json file, again
    python benchmarks/compare.py --check         exit 1 when a target is missed

Extra arguments after `--` go to pytest (for example `-- -k lg_req`). Ratios are taken
between medians of the same run. "x faster" is the peer's median over ours.
"""

import argparse
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from workloads import WORKLOADS  # noqa: E402 - after the path above

COLUMNS = [
    "cython",
    "pure",
    "cython-numpy",
    "pure-numpy",
    "cython-views",
    "pure-views",
    "kafka-python",
    "kio",
    "msgspec",
    "numpy-frombuffer",
]
OPS = ["encode", "decode", "frame", "free"]
STAT_NAMES = {"median": "medians", "min": "minimum times", "mean": "mean times"}
# (ours, peer) pairs shown in the ratio table.
RATIOS = [
    ("cython", "kafka-python"),
    ("cython", "kio"),
    ("cython", "msgspec"),
    ("pure", "kafka-python"),
    ("pure", "kio"),
    ("cython-numpy", "kio"),
]


def _targets():
    """(label, group, ours, peer, kind, bound); kind "faster": peer/ours >= bound,
    kind "within": ours/peer <= bound."""
    out = []
    for n, w in (("1", "lg_req_1"), ("100", "lg_req_100"), ("10,000", "lg_req_10000")):
        lg = f"LeaveGroup v5 request x{n}"
        out += [
            (
                f"{lg} encode: cython vs kafka-python",
                f"{w} encode",
                "cython",
                "kafka-python",
                "faster",
                20,
            ),
            (f"{lg} encode: cython vs msgspec", f"{w} encode", "cython", "msgspec", "within", 1.5),
            (f"{lg} decode: cython vs kio", f"{w} decode", "cython", "kio", "faster", 1.5),
            (f"{lg} decode: cython vs msgspec", f"{w} decode", "cython", "msgspec", "within", 1.5),
            (
                f"{lg} encode: pure vs kafka-python",
                f"{w} encode",
                "pure",
                "kafka-python",
                "faster",
                1,
            ),
            (
                f"{lg} decode: pure vs kafka-python",
                f"{w} decode",
                "pure",
                "kafka-python",
                "faster",
                1,
            ),
        ]
    out += [
        (
            "StreamsGroupHeartbeat large encode: cython vs kio",
            "sgh_large encode",
            "cython",
            "kio",
            "faster",
            20,
        ),
        (
            "StreamsGroupHeartbeat large decode (lists): cython vs kio",
            "sgh_large decode",
            "cython",
            "kio",
            "faster",
            1.5,
        ),
        (
            "StreamsGroupHeartbeat large decode (numpy): cython vs kio",
            "sgh_large decode",
            "cython-numpy",
            "kio",
            "faster",
            20,
        ),
        (
            "StreamsGroupHeartbeat large encode (from numpy): cython vs kio",
            "sgh_large encode",
            "cython-numpy",
            "kio",
            "faster",
            20,
        ),
        (
            "1,000,000 x int32 decode (numpy): cython vs frombuffer+astype",
            "sgh_int32_1m decode",
            "cython-numpy",
            "numpy-frombuffer",
            "within",
            1.5,
        ),
        (
            "LeaveGroup v5 request x10,000 decode: cython vs msgspec",
            "lg_req_10000 decode",
            "cython",
            "msgspec",
            "within",
            1.1,
        ),
        (
            "Metadata v12 response decode: cython vs kio",
            "md_resp decode",
            "cython",
            "kio",
            "faster",
            1.5,
        ),
        (
            "Metadata v12 response decode: cython vs msgspec",
            "md_resp decode",
            "cython",
            "msgspec",
            "within",
            1.3,
        ),
        (
            "Metadata v12 response encode: cython vs kafka-python",
            "md_resp encode",
            "cython",
            "kafka-python",
            "faster",
            20,
        ),
        (
            "OffsetCommit v9 request encode: cython vs kafka-python",
            "oc_req encode",
            "cython",
            "kafka-python",
            "faster",
            20,
        ),
        (
            "OffsetCommit v9 request decode: cython vs kio",
            "oc_req decode",
            "cython",
            "kio",
            "faster",
            1.5,
        ),
        (
            "Fetch v16 response decode: cython vs kio",
            "fetch_resp decode",
            "cython",
            "kio",
            "faster",
            3,
        ),
        (
            'Fetch v16 response decode, records="view": cython vs kio',
            "fetch_resp decode",
            "cython-views",
            "kio",
            "faster",
            3,
        ),
    ]
    out += [
        (
            "kafka-python Fetcher.PartitionRecords.take(), 10,000 records: accelerated vs stock",
            "kp_fetch_take decode",
            "cython",
            "kafka-python",
            "faster",
            6,
        ),
        (
            "kafka-python MemoryRecordsBuilder, 10,000 appends + close: accelerated vs stock",
            "kp_build encode",
            "cython",
            "kafka-python",
            "faster",
            3,
        ),
        (
            "kafka-python MetadataResponse v12 decode, 1,000 x 10: accelerated vs stock",
            "kp_metadata decode",
            "cython",
            "kafka-python",
            "faster",
            5,
        ),
        (
            "kafka-python Fetch v12 request + 1.6 MB response through KafkaProtocol: accelerated vs stock",
            "kp_fetch_exchange decode",
            "cython",
            "kafka-python",
            "faster",
            3,
        ),
    ]
    # The engine at msgspec's gc=False floor, and ahead of kio on every decode.
    for n, w, bound in (
        ("1", "lg_req_1", 1.2),
        ("100", "lg_req_100", 1.0),
        ("10,000", "lg_req_10000", 1.0),
    ):
        out.append(
            (
                f"LeaveGroup v5 request x{n} decode: cython vs msgspec",
                f"{w} decode",
                "cython",
                "msgspec",
                "within",
                bound,
            )
        )
    out.append(
        (
            "Metadata v12 response decode: cython vs msgspec",
            "md_resp decode",
            "cython",
            "msgspec",
            "within",
            0.54,
        )
    )
    out.append(
        (
            "LeaveGroup v5 request x10,000 freed: cython vs msgspec",
            "lg_req_10000 free",
            "cython",
            "msgspec",
            "within",
            1.0,
        )
    )
    for w in (
        "lg_req_1",
        "lg_req_100",
        "lg_req_10000",
        "lg_resp_100",
        "sgh_small",
        "sgh_large",
        "md_resp",
        "oc_req",
        "fetch_resp",
    ):
        out.append(
            (f"{_title(w, 'decode')}: cython vs kio", f"{w} decode", "cython", "kio", "faster", 1.2)
        )
    for w in ("md_resp", "oc_req", "fetch_resp"):
        for op in ("encode", "decode"):
            out.append(
                (
                    f"{_title(w, op)}: pure vs kafka-python",
                    f"{w} {op}",
                    "pure",
                    "kafka-python",
                    "faster",
                    1,
                )
            )
    return _strictest(out)


def _strictest(targets):
    """One target per comparison: where two bounds were set on the same one (a later,
    stricter goal), the stricter; meeting it meets the other."""
    kept = {}
    for t in targets:
        key = t[1:5]
        if key not in kept or (t[5] > kept[key][5] if t[4] == "faster" else t[5] < kept[key][5]):
            kept[key] = t
    return [t for t in targets if kept[t[1:5]] is t]


def missing_tools():
    """What the bench extra brings that is not installed (pytest-benchmark is required; a
    missing peer's rows are left out)."""
    return [m for m in ("pytest_benchmark",) if importlib.util.find_spec(m) is None]


def run_suite(json_path, quick, pytest_args):
    # Not an xdist worker's variables: pytest-benchmark disables itself under them (compare.py
    # run from a test that pytest-xdist runs).
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST_")}
    # More rounds than pytest-benchmark's default, for steadier medians; pytest_args,
    # given later on the command line, still override these.
    rounds = (
        []
        if quick
        else ["--benchmark-min-rounds=10", "--benchmark-max-time=2", "--benchmark-min-time=0.0001"]
    )
    if quick:
        env["FASTKWIRE_BENCH_QUICK"] = "1"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        str(HERE),
        "--benchmark-only",
        f"--benchmark-json={json_path}",
        "-p",
        "no:cacheprovider",
        "-q",
        # pytest-benchmark's own table (hundreds of lines) would come before the summary;
        # the file -o writes and --tables hold every number.
        "--benchmark-quiet",
        *rounds,
        *pytest_args,
    ]
    print("$", " ".join(cmd), file=sys.stderr)
    return subprocess.call(cmd, cwd=ROOT, env=env)


def load_medians(report, stat="median"):
    """{(workload, op): {contestant: seconds}}, the median (or another statistic) of the rounds."""
    medians = {}
    for b in report["benchmarks"]:
        info = b.get("extra_info", {})
        if "contestant" in info:
            medians.setdefault((info["workload"], info["op"]), {})[info["contestant"]] = b["stats"][
                stat
            ]
    return medians


def fmt_time(seconds):
    for unit, scale in (("s", 1), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def fmt_ratio(r):
    return f"{r:.3g}x" if r < 100 else f"{r:.0f}x"


def _rows(medians):
    order = {name: i for i, name in enumerate(WORKLOADS)}
    return sorted(
        medians, key=lambda k: (order.get(k[0], len(order)), OPS.index(k[1]) if k[1] in OPS else 9)
    )


def _title(workload, op):
    title = WORKLOADS[workload].title if workload in WORKLOADS else workload
    return f"{title}: {'request frame round trip' if op == 'frame' else op}"


TARGETS = _targets()

# The summary's speed-ups: (ours, peer, what ours is called).
SUMMARY_PAIRS = [
    ("cython", "kafka-python", "compiled core"),
    ("cython", "kio", "compiled core"),
    ("cython", "msgspec", "compiled core"),
    ("pure", "kafka-python", "pure Python"),
    ("pure", "kio", "pure Python"),
]


def check_targets(medians):
    """(label, needed, measured, ok) per target; ok None: not run."""
    out = []
    for label, group, ours, peer, kind, bound in TARGETS:
        workload, op = group.rsplit(" ", 1)
        m = medians.get((workload, op), {})
        needed = f">= {bound}x faster" if kind == "faster" else f"<= {bound}x its time"
        if ours not in m or peer not in m:
            out.append((label, needed, "not run", None))
            continue
        if kind == "faster":
            value = m[peer] / m[ours]
            ok = value >= bound
            measured = (
                f"{fmt_ratio(value)} faster" if value >= 1 else f"{fmt_ratio(1 / value)} slower"
            )
        else:
            value = m[ours] / m[peer]
            ok = value <= bound
            measured = f"{fmt_ratio(value)} its time"
        out.append((label, needed, measured, ok))
    return out


def _machine(report):
    mi = report.get("machine_info", {})
    cpu = mi.get("cpu", {})
    return (
        f"{cpu.get('brand_raw', mi.get('processor', '?'))}, {cpu.get('count', '?')} cores, "
        f"{mi.get('python_implementation', 'Python')} {mi.get('python_version', '')}"
    )


def _busy(report):
    mi = report.get("machine_info", {})
    load = mi.get("fastkwire_bench_loadavg")
    cores = mi.get("cpu", {}).get("count") or os.cpu_count() or 1
    return load, load is not None and load > cores * 0.75


def summary(report, quick=False, stat="median"):
    """A few lines: how the run went, the targets, each peer's speed-up over the workloads.
    The tables are `render`'s."""
    medians = load_medians(report, stat)
    when = report.get("datetime", "")[:16].replace("T", " ")
    load, busy = _busy(report)
    out = [f"fastkwire benchmarks, {when} UTC", f"on {_machine(report)}"]
    if load is not None:
        out[1] += f", load average {load:.2f}{' (busy)' if busy else ''}"
    if quick:
        out.append(
            "A quick run: few rounds each, so these ratios are rough (single ones move by up to"
        )
        out.append("2x between quick runs). Leave out --quick for a measurement.")
    elif busy:
        out.append(
            "The machine was busy: ratios near a target's bound can move by tens of percent."
        )
    out.append("")
    out.append(
        f"How many times faster ({STAT_NAMES[stat]}: the peer's time over ours; geometric mean):"
    )
    for ours, peer, name in SUMMARY_PAIRS:
        ratios = [m[peer] / m[ours] for m in medians.values() if ours in m and peer in m]
        if not ratios:
            continue
        mean = math.exp(sum(map(math.log, ratios)) / len(ratios))
        out.append(
            f"  {name} vs {peer}: {fmt_ratio(mean)} (from {fmt_ratio(min(ratios))} to "
            f"{fmt_ratio(max(ratios))} over {len(ratios)} workloads)"
        )
    results = check_targets(medians)
    met = sum(ok is True for *_, ok in results)
    missed = [r for r in results if r[3] is False]
    not_run = sum(ok is None for *_, ok in results)
    out.append("")
    out.append(
        f"Targets: {met} met, {len(missed)} missed"
        + (f", {not_run} not run (a contestant missing)" if not_run else "")
        + f", of {len(results)}."
    )
    for label, needed, measured, _ in missed:
        out.append(f"  missed: {label}")
        out.append(f"          needed {needed}, measured {measured}")
    for label, *_ in (r for r in results if r[3] is None):
        out.append(f"  not run: {label}")
    out.append("")
    out.append("Every median, ratio and target: --tables (and the file -o writes).")
    return "\n".join(out) + "\n", len(missed)


def render(report, quick=False, stat="median"):
    medians = load_medians(report, stat)
    rows = _rows(medians)
    cols = [c for c in COLUMNS if any(c in medians[r] for r in rows)]
    mi = report.get("machine_info", {})
    cpu = mi.get("cpu", {})
    versions = mi.get("fastkwire_bench_versions", {})
    out = []
    when = report.get("datetime", "")[:16].replace("T", " ")
    out.append(
        f"- Measured {when} UTC{' (QUICK smoke run: few rounds, not a measurement)' if quick else ''} on "
        f"{cpu.get('brand_raw', mi.get('processor', '?'))}, {cpu.get('count', '?')} cores, "
        f"{mi.get('system', '')} {mi.get('release', '')}, "
        f"{mi.get('python_implementation', 'Python')} {mi.get('python_version', '')}."
    )
    if "fastkwire_bench_loadavg" in mi:
        load = mi["fastkwire_bench_loadavg"]
        out.append(f"- Load average when the run started: {load:.2f}.")
        if load > (cpu.get("count") or os.cpu_count() or 1) * 0.75:
            out.append(
                "- **The machine was busy with other work: ratios near a target's bound can move "
                "by tens of percent from run to run; repeat the run on an idle machine to judge them.**"
            )
    if versions:
        out.append("- Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".")
    commit = report.get("commit_info", {})
    if commit.get("id"):
        out.append(
            f"- fastkwire commit {commit['id'][:10]}{' (with local changes)' if commit.get('dirty') else ''}."
        )
    out.append(
        f"- Times are pytest-benchmark {STAT_NAMES[stat]}; every column of a row ran in the same run on the same "
        "bytes (msgspec: the same content as msgpack)."
    )
    out.append("")
    out.append(f"### {STAT_NAMES[stat].capitalize()}")
    out.append("")
    out.append("| workload | " + " | ".join(cols) + " |")
    out.append("|---|" + "---:|" * len(cols))
    for r in rows:
        cells = [fmt_time(medians[r][c]) if c in medians[r] else "" for c in cols]
        out.append(f"| {_title(*r)} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("### Speed-up of fastkwire over each peer (peer median / ours; above 1x is faster)")
    out.append("")
    pairs = [(a, b) for a, b in RATIOS if a in cols and b in cols]
    if not pairs:
        out.append("(no fastkwire results in this run)")
        rows_for_ratios = []
    else:
        rows_for_ratios = rows
        out.append("| workload | " + " | ".join(f"{a} vs {b}" for a, b in pairs) + " |")
        out.append("|---|" + "---:|" * len(pairs))
    for r in rows_for_ratios:
        m = medians[r]
        cells = [fmt_ratio(m[b] / m[a]) if a in m and b in m else "" for a, b in pairs]
        out.append(f"| {_title(*r)} | " + " | ".join(cells) + " |")
    out.append("")
    out.append("### Targets")
    out.append("")
    out.append("| target | needed | measured | |")
    out.append("|---|---|---:|:---:|")
    results = check_targets(medians)
    for label, needed, measured, ok in results:
        mark = "-" if ok is None else "met" if ok else "missed"
        out.append(f"| {label} | {needed} | {measured} | {mark} |")
    missed = sum(ok is False for *_, ok in results)
    return "\n".join(out) + "\n", missed


def main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    pytest_args = []
    if "--" in argv:
        at = argv.index("--")
        argv, pytest_args = argv[:at], argv[at + 1 :]
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help="few rounds: a smoke run (also FASTKWIRE_BENCH_QUICK=1)",
    )
    ap.add_argument(
        "--json",
        default=str(ROOT / ".benchmarks" / "latest.json"),
        help="where pytest-benchmark writes its JSON",
    )
    ap.add_argument("--from-json", help="render this JSON instead of running the suite")
    ap.add_argument(
        "-o",
        "--output",
        help="markdown file to write (default: benchmarks/results.md on a full run)",
    )
    ap.add_argument(
        "--stat",
        default="median",
        choices=["median", "min", "mean"],
        help="statistic of the rounds to tabulate (min resists a busy machine)",
    )
    ap.add_argument("--check", action="store_true", help="exit 1 when a target is missed")
    ap.add_argument(
        "--tables",
        action="store_true",
        help="print every table (medians, ratios, targets) instead of the short summary",
    )
    args = ap.parse_args(argv)
    quick = args.quick or bool(os.environ.get("FASTKWIRE_BENCH_QUICK"))

    status = 0
    json_path = Path(args.from_json or args.json)
    if not args.from_json:
        if missing_tools():
            print(
                "the benchmarks need pytest-benchmark and the peers they compare with: "
                'pip install ".[bench]" (from the repository\'s root)',
                file=sys.stderr,
            )
            return 2
        json_path.parent.mkdir(parents=True, exist_ok=True)
        status = run_suite(json_path, quick, pytest_args)
        if not json_path.exists():
            print("pytest-benchmark wrote no JSON", file=sys.stderr)
            return status or 1
    report = json.loads(json_path.read_text())
    markdown, missed = render(report, quick=quick, stat=args.stat)
    print(markdown if args.tables else summary(report, quick=quick, stat=args.stat)[0])
    output = args.output or (None if quick or args.from_json else str(HERE / "results.md"))
    if output:
        Path(output).write_text("# fastkwire benchmark results\n\n" + markdown)
        print(f"wrote {output}", file=sys.stderr)
    if args.check and missed:
        print(f"{missed} target(s) missed", file=sys.stderr)
        status = status or 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())

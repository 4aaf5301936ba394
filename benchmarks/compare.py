"""Run the benchmark suite and render its medians, ratios and targets as markdown.

    python benchmarks/compare.py                 full run (~5 min): prints the tables and
                                                 writes benchmarks/results.md
    python benchmarks/compare.py --quick         smoke run with few rounds: prints only
    python benchmarks/compare.py --from-json F   render an earlier --benchmark-json file
    python benchmarks/compare.py --check         exit 1 when a target is missed

Extra arguments after `--` go to pytest (for example `-- -k lg_req`). Ratios are taken
between medians of the same run. "x faster" is the peer's median over ours.
"""

import argparse
import json
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
            "LeaveGroup v5 request x10,000 decode: cython vs msgspec (issue 13)",
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
            "kafka-python Fetcher.PartitionRecords.take(), 10,000 records: accelerated vs stock (issue 20)",
            "kp_fetch_take decode",
            "cython",
            "kafka-python",
            "faster",
            6,
        ),
        (
            "kafka-python MemoryRecordsBuilder, 10,000 appends + close: accelerated vs stock (issue 20)",
            "kp_build encode",
            "cython",
            "kafka-python",
            "faster",
            3,
        ),
        (
            "kafka-python MetadataResponse v12 decode, 1,000 x 10: accelerated vs stock (issue 20)",
            "kp_metadata decode",
            "cython",
            "kafka-python",
            "faster",
            5,
        ),
        (
            "kafka-python Fetch v12 request + 1.6 MB response through KafkaProtocol: accelerated vs stock "
            "(issue 20)",
            "kp_fetch_exchange decode",
            "cython",
            "kafka-python",
            "faster",
            3,
        ),
    ]
    # Issue 24: the engine at msgspec's gc=False floor, and ahead of kio on every decode.
    for n, w, bound in (
        ("1", "lg_req_1", 1.2),
        ("100", "lg_req_100", 1.0),
        ("10,000", "lg_req_10000", 1.0),
    ):
        out.append(
            (
                f"LeaveGroup v5 request x{n} decode: cython vs msgspec (issue 24)",
                f"{w} decode",
                "cython",
                "msgspec",
                "within",
                bound,
            )
        )
    out.append(
        (
            "Metadata v12 response decode: cython vs msgspec (issue 24)",
            "md_resp decode",
            "cython",
            "msgspec",
            "within",
            0.54,
        )
    )
    out.append(
        (
            "LeaveGroup v5 request x10,000 freed: cython vs msgspec (issue 24)",
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
            (f"{w} decode: cython vs kio (issue 24)", f"{w} decode", "cython", "kio", "faster", 1.2)
        )
    for w in ("md_resp", "oc_req", "fetch_resp"):
        for op in ("encode", "decode"):
            out.append(
                (
                    f"{w} {op}: pure vs kafka-python",
                    f"{w} {op}",
                    "pure",
                    "kafka-python",
                    "faster",
                    1,
                )
            )
    return out


TARGETS = _targets()


def run_suite(json_path, quick, pytest_args):
    env = dict(os.environ)
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
    missed = 0
    for label, group, ours, peer, kind, bound in TARGETS:
        workload, op = group.rsplit(" ", 1)
        m = medians.get((workload, op), {})
        needed = f">= {bound}x faster" if kind == "faster" else f"<= {bound}x its time"
        if ours not in m or peer not in m:
            out.append(f"| {label} | {needed} | not run | - |")
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
        missed += not ok
        out.append(f"| {label} | {needed} | {measured} | {'pass' if ok else 'MISS'} |")
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
    args = ap.parse_args(argv)
    quick = args.quick or bool(os.environ.get("FASTKWIRE_BENCH_QUICK"))

    status = 0
    json_path = Path(args.from_json or args.json)
    if not args.from_json:
        json_path.parent.mkdir(parents=True, exist_ok=True)
        status = run_suite(json_path, quick, pytest_args)
        if not json_path.exists():
            print("pytest-benchmark wrote no JSON", file=sys.stderr)
            return status or 1
    report = json.loads(json_path.read_text())
    markdown, missed = render(report, quick=quick, stat=args.stat)
    print(markdown)
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

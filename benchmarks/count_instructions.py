"""Count the instructions one call costs, under valgrind's callgrind: figures that do not
depend on the machine's load (the README's "instructions vs msgspec" column).

    python benchmarks/count_instructions.py md_resp lg_req_1 --ops decode free
    python benchmarks/count_instructions.py lg_req_100 --contestants cython msgspec --calls 20

Each count runs a fresh interpreter twice under callgrind: once preparing the workload
and calling it CALLS times, once preparing it only; the difference over CALLS is one
call's instructions, without start-up and preparation. "decode" includes freeing the
result (it is dropped at once), as in the timed benchmarks; "free" counts dropping a
decoded message alone (both of its runs decode CALLS messages; one of them drops them).
Needs valgrind (Debian: apt-get install valgrind).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PEERS = ["cython", "msgspec", "kio"]

# Run in the child: prepare, warm up, then the calls with the collector frozen. "hold"
# decodes as "free" does but keeps the messages; every run ends at os._exit, so the
# interpreter's teardown (which would free what "hold" kept) is in no count.
CHILD = """
import gc, os, sys
sys.path.insert(0, {here!r})
import workloads
contestant, workload, op, calls = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
p = workloads.prepare(contestant, workload)
fn = p.decode if op in ("free", "hold") else getattr(p, op)
fn()
held = [fn() for _ in range(calls)] if op in ("free", "hold") else []
gc.collect()
gc.freeze()
if op == "free":
    while held:
        held.pop()
elif op != "hold":
    for _ in range(calls):
        fn()
os._exit(0)
"""


def collected(contestant, workload, op, calls):
    """callgrind's total for one child run."""
    out = subprocess.run(
        [
            "valgrind",
            "--tool=callgrind",
            "--callgrind-out-file=/dev/null",
            sys.executable,
            "-c",
            CHILD.format(here=str(HERE)),
            contestant,
            workload,
            op,
            str(calls),
        ],
        capture_output=True,
        text=True,
        check=False,
        # A fixed hash seed: with a random one, start-up alone varies by 100,000s of
        # instructions from run to run.
        env={**os.environ, "PYTHONHASHSEED": "0"},
    )
    m = re.search(r"Collected : (\d+)", out.stderr)
    if out.returncode != 0 or m is None:
        tail = "\n".join(out.stderr.strip().splitlines()[-5:])
        raise RuntimeError(f"{contestant} {workload} {op}: the child failed\n{tail}")
    return int(m.group(1))


def per_call(contestant, workload, op, calls):
    """One call's instructions: the run with `calls` calls less the run without them."""
    if op == "free":
        base = collected(contestant, workload, "hold", calls)
    else:
        base = collected(contestant, workload, op, 0)
    return (collected(contestant, workload, op, calls) - base) / calls


def fmt(n):
    for unit, size in (("M", 1e6), ("k", 1e3)):
        if n >= size:
            return f"{n / size:.{1 if n < 100 * size else 0}f}{unit}"
    return f"{n:.0f}"


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("workloads", nargs="+", help="workload names (benchmarks/workloads.py)")
    ap.add_argument("--ops", nargs="+", default=["decode"], choices=["decode", "encode", "free"])
    ap.add_argument("--contestants", nargs="+", default=PEERS)
    ap.add_argument("--calls", type=int, default=5, help="calls per counted run")
    args = ap.parse_args(argv)
    if shutil.which("valgrind") is None:
        sys.exit("count_instructions.py needs valgrind (Debian: apt-get install valgrind)")
    peers = [c for c in args.contestants if c != "cython"]
    print("| workload | op | cython | " + " | ".join(f"vs {p}" for p in peers) + " |")
    print("|---|---|---:|" + "---:|" * len(peers))
    for name in args.workloads:
        for op in args.ops:
            ours = per_call("cython", name, op, args.calls)
            cells = []
            for p in peers:
                theirs = per_call(p, name, op, args.calls)
                cells.append(f"{ours / theirs:.2f}x ({fmt(theirs)})")
            print(f"| {name} | {op} | {fmt(ours)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

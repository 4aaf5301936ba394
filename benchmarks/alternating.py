"""Time contestants call by call, alternating, in one process: a check on the
pytest-benchmark run for machines whose speed changes from one second to the next.

    python benchmarks/alternating.py                      every workload, decode and encode
    python benchmarks/alternating.py lg_req_10000 md_resp --ops decode free

pytest-benchmark times one contestant after another, so on a machine with fast and slow
spells two peers can land in different spells. Here every round calls each contestant
once, in turn, so all of them see the same spells; the minimum over the rounds is the
figure least moved by other work. "free" times dropping a decoded message.
"""

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from compare import fmt_time  # noqa: E402 - after the path above
from workloads import WORKLOADS, Skip, prepare  # noqa: E402

PEERS = ["cython", "msgspec", "kio"]


def _timers(workload, op, contestants):
    """{contestant: a function returning the seconds of one call}."""
    out = {}
    for c in contestants:
        try:
            p = prepare(c, workload)
        except Skip:
            continue
        fn = p.decode if op == "free" else getattr(p, op)
        if fn is None:
            continue
        if op == "free":

            def one(fn=fn):
                held = fn()
                t = time.perf_counter()
                del held
                return time.perf_counter() - t

        else:

            def one(fn=fn):
                t = time.perf_counter()
                fn()
                return time.perf_counter() - t

        out[c] = one
    return out


def measure(workload, op, contestants, seconds):
    timers = _timers(workload, op, contestants)
    if "cython" not in timers:
        return None
    gc.collect()
    gc.freeze()
    try:
        one_round = max(sum(one() for one in timers.values()), 1e-7)
        rounds = max(20, min(5000, int(seconds / one_round)))
        times = {c: [] for c in timers}
        for _ in range(rounds):
            for c, one in timers.items():
                times[c].append(one())
    finally:
        gc.unfreeze()
    return rounds, {c: min(v) for c, v in times.items()}


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("workloads", nargs="*", help="workload names (default: all)")
    ap.add_argument(
        "--ops", nargs="+", default=["decode", "encode"], choices=["decode", "encode", "free"]
    )
    ap.add_argument("--contestants", nargs="+", default=PEERS)
    ap.add_argument("--seconds", type=float, default=1.5, help="about how long each row runs")
    args = ap.parse_args(argv)
    names = args.workloads or list(WORKLOADS)
    peers = [c for c in args.contestants if c != "cython"]
    print(
        "| workload | op | rounds | cython (min) | " + " | ".join(f"vs {p}" for p in peers) + " |"
    )
    print("|---|---|---:|---:|" + "---:|" * len(peers))
    for name in names:
        for op in args.ops:
            result = measure(name, op, ["cython", *peers], args.seconds)
            if result is None:
                continue
            rounds, mins = result
            ours = mins["cython"]
            cells = [f"{ours / mins[p]:.2f}x its time" if p in mins else "" for p in peers]
            print(f"| {name} | {op} | {rounds} | {fmt_time(ours)} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()

"""A fuzzer's inputs on several threads at once: each thread checks its own seeds with
the fuzzer's `check(seed)`, all of them while the others run theirs.

    python3 fuzz/threaded.py hostile_records --threads 4 --inputs 4000
    PYTHON_GIL=0 python3.13t fuzz/threaded.py hostile_reentrancy --threads 4 --inputs 2000

hostile_records compares the compiled columns writer with the pure one on every seed;
hostile_reentrancy runs every compiled entry point (the engine, the record kernel, the
kafka-python seams and its target plans) under a collector that rewrites inputs, and now
the gc callbacks and hostile dunders of one thread's input also strike while the other
threads' calls run. With it, one more thread is another owner of what the running
cases hold (the fuzzer's `owner_strike`): it closes the iterators being stepped, replaces
and drops the attributes and slots the routines read, and uninstalls and reinstalls the
accelerators whose guards they are using, in a loop until the checks end (`--no-owner`
leaves it out). A finding is what the fuzzer calls one (a disagreement, a SystemError),
or a crash.
"""

import argparse
import importlib
import random
import sys
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def walkers_own(e):
    """True for the SystemError CPython raises when `tuple(iterator)` finds, as it resizes
    the tuple it is filling, that something else holds a reference to it: the collector
    walker of a fuzzer on another thread, which takes every young object (as a debugger
    would). fastkwire's C code never resizes a tuple; Python code doing tuple(generator),
    fastkwire's or the standard library's, meets this under such a walker."""
    # CPython names its source file as its build spelled it: "Objects/tupleobject.c", or
    # the full path of a tree built elsewhere (tools/build_cpython.sh's)
    text = str(e)
    where = text.split(":", 1)[0]
    return (where == "Objects/tupleobject.c" or where.endswith("/Objects/tupleobject.c")) and (
        "bad argument to internal function" in text
    )


def run(module_name, inputs, threads, seed=1, quiet=False, owner=True):
    """Findings, as (seed, traceback text), of `inputs` seeds split among the threads
    (and, where the fuzzer has one and `owner`, its owner_strike looping in one more)."""
    fuzzer = importlib.import_module(module_name)
    check = fuzzer.check
    if hasattr(fuzzer, "warm"):
        fuzzer.warm()
    rng = random.Random(seed)
    seeds = [rng.getrandbits(48) for _ in range(inputs)]
    findings = []
    strike = getattr(fuzzer, "owner_strike", None) if owner else None
    barrier = threading.Barrier(threads + (strike is not None))
    done = threading.Event()

    def work(k):
        barrier.wait()
        for s in seeds[k::threads]:
            try:
                check(s)
            except SystemError as e:
                if walkers_own(e):
                    continue
                findings.append((s, e))
            except Exception as e:  # noqa: BLE001 - a finding
                # formatted once every thread is done: formatting compiles the source
                # lines (CPython's compiler), which the other threads' walkers must not see
                findings.append((s, e))
                if not quiet:
                    print(f"finding: seed {s}", file=sys.stderr)

    def own():
        owner_rng = random.Random(seed ^ 0x0DD)
        barrier.wait()
        while not done.is_set():
            try:
                strike(owner_rng)
            except SystemError as e:
                if not walkers_own(e):
                    findings.append(("owner", e))
            except Exception as e:  # noqa: BLE001 - a finding
                findings.append(("owner", e))

    pool = [threading.Thread(target=work, args=(k,)) for k in range(threads)]
    owners = [threading.Thread(target=own)] if strike is not None else []
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in pool + owners:
            t.start()
        for t in pool:
            t.join()
    finally:
        done.set()
        for t in owners:
            t.join()
        sys.setswitchinterval(old)
    return [(s, "".join(traceback.format_exception(e))) for s, e in findings]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("fuzzer", choices=["hostile_records", "hostile_reentrancy"])
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--inputs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-owner", action="store_true", help="no owner_strike thread")
    args = ap.parse_args()
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    started = time.monotonic()
    findings = run(args.fuzzer, args.inputs, args.threads, args.seed, owner=not args.no_owner)
    for s, text in findings[:3]:
        print(f"seed {s}:\n{text}", file=sys.stderr)
    print(
        f"{args.fuzzer}: {args.inputs} inputs on {args.threads} threads (GIL {'on' if gil else 'off'}) "
        f"in {time.monotonic() - started:.0f} s, {len(findings)} findings",
        file=sys.stderr,
    )
    sys.exit(1 if findings else 0)


if __name__ == "__main__":
    main()

"""Decode throughput on 2 threads against 1: how the compiled engine scales without the GIL.

    PYTHON_GIL=0 python3.13t benchmarks/threads_scaling.py
    PYTHON_GIL=0 python3.13t benchmarks/threads_scaling.py lg_req_100 md_resp --seconds 1

Each workload (benchmarks/workloads.py) is decoded (and the result dropped, as in the
timed benchmarks) by one thread CALLS times, then by THREADS threads CALLS times each,
started together; the scaling is the second throughput over the first (2.0 is perfect on
2 threads). The best of --repeat runs is kept, as timeit does. Wall-clock figures: quote
them with the machine's load, which is printed before and after (the load averages of
`uptime`). The last column compares the CPU time a call costs a thread running with the
others against running alone, which the load does not change: above 1.0 is what the
threads cost each other. On a GIL build the threads take turns: about 1.0x.
"""

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import workloads  # noqa: E402


def timed(fn, calls, threads):
    """(wall seconds, CPU seconds of the busiest thread) for `threads` threads to make
    `calls` calls each, started together."""
    barrier = threading.Barrier(threads + 1)
    done, cpu = [], []

    def run():
        barrier.wait()
        t0 = time.thread_time()
        for _ in range(calls):
            fn()
        cpu.append(time.thread_time() - t0)
        done.append(time.perf_counter())

    pool = [threading.Thread(target=run) for _ in range(threads)]
    for t in pool:
        t.start()
    barrier.wait()
    start = time.perf_counter()
    for t in pool:
        t.join()
    return max(done) - start, max(cpu)


def calls_for(fn, seconds):
    """About `seconds` worth of calls on one thread."""
    n, took = 1, 0.0
    while took < seconds / 10:
        n *= 2
        took = timed(fn, n, 1)[0]
    return max(1, int(n * seconds / took))


def decoder(name):
    """cls.decode of the workload's bytes, as fastkwire writes them (workloads.prepare
    asks kio for them, which not every interpreter has)."""
    from fastkwire import _messages_cython

    w = workloads.WORKLOADS[name]
    cls = getattr(_messages_cython, w.message)
    data, version = cls.from_dict(w.content).encode(w.version), w.version
    cls.decode(data, version)
    return lambda: cls.decode(data, version)


def control():
    x = 0
    for i in range(1000):
        x += i
    return x


def main(argv=None):
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("workloads", nargs="*", default=["lg_req_100", "md_resp"])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=1.0, help="one thread's time per run")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)
    gil = getattr(sys, "_is_gil_enabled", lambda: True)()
    print(
        f"Python {sys.version.split()[0]}, GIL {'on' if gil else 'off'}, "
        f"{os.cpu_count()} CPUs, load before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    print(
        f"| workload | calls/s, 1 thread | calls/s, {args.threads} threads | scaling | "
        "CPU per call, N vs 1 |"
    )
    print("|---|---:|---:|---:|---:|")
    for name in args.workloads:
        fn = decoder(name)
        calls = calls_for(fn, args.seconds)
        one = min(timed(fn, calls, 1) for _ in range(args.repeat))
        many = min(timed(fn, calls, args.threads) for _ in range(args.repeat))
        rate1, rate_n = calls / one[0], args.threads * calls / many[0]
        # CPU seconds a call costs each thread when they run together, against alone: above
        # 1.0 is what the threads cost each other (shared cache lines, locks), whatever
        # the load; a loaded machine lowers the wall-clock scaling only
        print(
            f"| {name} | {rate1:,.0f} | {rate_n:,.0f} | {rate_n / rate1:.2f}x | "
            f"{many[1] / one[1]:.2f} |"
        )
    # the control: a loop of plain Python, which shares nothing between the threads; its
    # scaling is what the machine gives two threads at this moment
    fn = control
    calls = calls_for(fn, args.seconds)
    one = min(timed(fn, calls, 1) for _ in range(args.repeat))
    many = min(timed(fn, calls, args.threads) for _ in range(args.repeat))
    rate1, rate_n = calls / one[0], args.threads * calls / many[0]
    print(
        f"| control: a Python loop | {rate1:,.0f} | {rate_n:,.0f} | {rate_n / rate1:.2f}x | "
        f"{many[1] / one[1]:.2f} |"
    )
    print(f"load after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()

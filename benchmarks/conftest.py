"""pytest-benchmark setup for the benchmark suite.

Benchmark files are named bench_*.py so that a plain `pytest` never collects them; they
are collected only when benchmarks/ is named on the command line:

    pytest benchmarks/ --benchmark-only
    python benchmarks/compare.py            # runs that and renders the table

FASTKWIRE_BENCH_QUICK=1 runs few, short rounds: a smoke run, not a measurement.
"""

import gc
import os
import sys
from pathlib import Path

import pytest

# Every contestant is single-threaded: numpy's idle BLAS threads, spinning on another
# core of a small machine, would only add noise.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # bench files import workloads


def _named_on_command_line(config):
    for arg in config.args:
        path = Path(arg.split("::")[0]).resolve()
        if path == HERE or HERE in path.parents:
            return True
    return False


def pytest_collect_file(file_path, parent):
    if (
        file_path.suffix == ".py"
        and file_path.name.startswith("bench_")
        and _named_on_command_line(parent.config)
        and not parent.session.isinitpath(file_path)  # pytest collects a named file itself
    ):
        return pytest.Module.from_parent(parent, path=file_path)
    return None


def pytest_configure(config):
    # kafka-python reads its schemas with a deprecated importlib call at import time.
    config.addinivalue_line(
        "filterwarnings", "ignore:(read|open)_text is deprecated:DeprecationWarning"
    )
    if os.environ.get("FASTKWIRE_BENCH_QUICK") and hasattr(config.option, "benchmark_max_time"):
        # Runs before pytest-benchmark reads its options (its hook is trylast).
        config.option.benchmark_min_rounds = 2
        config.option.benchmark_max_time = 0.001
        config.option.benchmark_warmup = False


@pytest.fixture
def timed(benchmark):
    """timed(workload, op, contestant): time one contestant's op ("encode", "decode" or
    "frame", the request frame round trip) on a workload. Each (workload, op) is one
    group, so one run holds every ratio; compare.py reads the labels from extra_info."""
    import workloads

    def run(workload, op, contestant):
        try:
            if op == "frame":
                fn = workloads.prepare_frame(contestant, workload)
            else:
                fn = getattr(workloads.prepare(contestant, workload), op)
        except workloads.Skip as exc:
            pytest.skip(str(exc))
        if fn is None:
            pytest.skip(f"{contestant} has no {op} for {workload}")
        # Keep the prepared inputs of every workload out of the collector's way: a long run
        # accumulates them, and scanning them would tax later benchmarks more than earlier.
        gc.collect()
        gc.freeze()
        benchmark.group = f"{workload} {op}"
        benchmark.extra_info.update(workload=workload, op=op, contestant=contestant)
        benchmark(fn)

    return run


def pytest_benchmark_update_machine_info(config, machine_info):
    """Record the versions measured, so a table rendered later names them."""
    from importlib import metadata

    versions = {}
    for dist in (
        "fastkwire",
        "kafka-python",
        "kio",
        "msgspec",
        "numpy",
        "Cython",
        "pytest-benchmark",
    ):
        try:
            versions[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            pass
    machine_info["fastkwire_bench_versions"] = versions
    if hasattr(os, "getloadavg"):  # other work on the machine skews the ratios
        machine_info["fastkwire_bench_loadavg"] = os.getloadavg()[0]
    machine_info.pop("node", None)  # the host name says nothing about speed

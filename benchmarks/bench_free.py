"""Freeing a decoded message: what a 1- and a 10,000-member LeaveGroup v5 request costs
to drop (the target: no slower than msgspec's gc=False Structs freeing the same)."""

import gc
import os

import pytest
from workloads import CONTESTANTS, Skip, prepare


@pytest.mark.parametrize("contestant", CONTESTANTS)
@pytest.mark.parametrize("workload", ["lg_req_1", "lg_req_10000"])
def test_free(benchmark, workload, contestant):
    try:
        decode = prepare(contestant, workload).decode
    except Skip as exc:
        pytest.skip(str(exc))
    held = []

    def setup():  # untimed: decode one message for the round to free
        held.append(decode())

    gc.collect()
    gc.freeze()
    benchmark.group = f"{workload} free"
    benchmark.extra_info.update(workload=workload, op="free", contestant=contestant)
    # pedantic with a setup times one call a round: the clear() that drops the message.
    rounds = (
        2 if os.environ.get("FASTKWIRE_BENCH_QUICK") else (2000 if workload == "lg_req_1" else 200)
    )
    benchmark.pedantic(held.clear, setup=setup, rounds=rounds, iterations=1, warmup_rounds=1)

"""StreamsGroupHeartbeat v0 request: a small example and a large one; and, for numpy
arrays, the large one and a single 1,000,000-element []int32 field.

The numpy contestants skip, saying why, until Cls.decode(..., arrays="numpy") works."""

import pytest
from workloads import CONTESTANTS, NUMPY_CONTESTANTS


@pytest.mark.parametrize("contestant", CONTESTANTS + NUMPY_CONTESTANTS)
@pytest.mark.parametrize("op", ["encode", "decode"])
@pytest.mark.parametrize("workload", ["sgh_small", "sgh_large"])
def test_streams_heartbeat(timed, workload, op, contestant):
    if workload == "sgh_small" and contestant in NUMPY_CONTESTANTS:
        pytest.skip("numpy arrays are only measured on the large heartbeat")
    timed(workload, op, contestant)


@pytest.mark.parametrize(
    "contestant", ["numpy-frombuffer", "cython-numpy", "pure-numpy", "cython", "kio"]
)
def test_int32_million(timed, contestant):
    timed("sgh_int32_1m", "decode", contestant)

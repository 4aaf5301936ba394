"""A request frame round trip: size prefix + request header + body, encoded then decoded
(fastkwire's encode_request/decode_request and each peer's equivalent)."""

import pytest
from workloads import CONTESTANTS, FRAME_WORKLOAD


@pytest.mark.parametrize("contestant", CONTESTANTS)
def test_frame_round_trip(timed, contestant):
    timed(FRAME_WORKLOAD, "frame", contestant)

"""LeaveGroup v5: request with 1, 100 and 10,000 members; response with 100 members."""

import pytest
from workloads import CONTESTANTS


@pytest.mark.parametrize("contestant", CONTESTANTS)
@pytest.mark.parametrize("op", ["encode", "decode"])
@pytest.mark.parametrize("workload", ["lg_req_1", "lg_req_100", "lg_req_10000", "lg_resp_100"])
def test_leave_group(timed, workload, op, contestant):
    timed(workload, op, contestant)

"""Messages beyond the first four APIs (ApiVersions, FindCoordinator, LeaveGroup,
StreamsGroupHeartbeat): a large Metadata v12 response, an OffsetCommit v9
request and a Fetch v16 response carrying record bytes."""

import pytest
from workloads import CONTESTANTS, VIEW_CONTESTANTS


@pytest.mark.parametrize("contestant", CONTESTANTS)
@pytest.mark.parametrize("op", ["encode", "decode"])
@pytest.mark.parametrize("workload", ["md_resp", "oc_req", "fetch_resp"])
def test_protocol(timed, workload, op, contestant):
    timed(workload, op, contestant)


@pytest.mark.parametrize("contestant", VIEW_CONTESTANTS)
def test_fetch_record_views(timed, contestant):
    timed("fetch_resp", "decode", contestant)

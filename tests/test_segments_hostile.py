"""A short run of fuzz/hostile_log.py: damaged, overlapping, zero-filled and bomb-laden
segment directories read through plan_segments and read_task, every seed checked against
the readers' contract (rows exactly as asked, or a SegmentError naming the file; bounded
time and decompressed bytes). The long run: `python fuzz/hostile_log.py --long`."""

import sys
from pathlib import Path

import pytest

pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
try:
    import hostile_log
finally:
    sys.path.pop(0)


def test_hostile_logs_keep_the_contract(tmp_path):
    outcomes = {}
    for seed in range(120):
        case = tmp_path / str(seed)
        case.mkdir()
        outcome, _, _ = hostile_log.check(seed, str(case))
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    # Both sides of the contract are reached: logs that read, and damage that is refused.
    assert outcomes.get("rows", 0) > 40 and outcomes.get("error", 0) > 20, outcomes


def test_the_model_is_kafkas_consumer():
    # The fuzzer's model of read_committed, on the log of test_segments'
    # test_read_committed_from_the_markers: aborted rows dropped, stopping at an open one.
    B = hostile_log.Batch
    log = [
        B(0, [(0, b"a"), (1, b"b")], b"", producer=7, txn=True),
        B(2, [(2, b"c")], b""),
        B(3, [(3, None)], b"", producer=7, txn=True, control=True, abort=True),
        B(4, [(4, b"d")], b"", producer=7, txn=True),
        B(5, [(5, None)], b"", producer=7, txn=True, control=True, abort=False),
        B(6, [(6, b"e")], b"", producer=8, txn=True),
        B(7, [(7, b"f")], b""),
    ]
    assert hostile_log.expected_rows(log, True, None, None) == [(2, b"c"), (4, b"d")]
    assert [o for o, _ in hostile_log.expected_rows(log, False, 1, 7)] == [1, 2, 4, 6]

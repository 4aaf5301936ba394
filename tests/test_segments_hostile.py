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


@pytest.mark.parametrize("lookup", ["time", "read_committed"])
def test_planning_decompresses_within_max_decompressed(tmp_path, monkeypatch, lookup):
    """Planning reads batches too: the first one at or after a start time, and every
    transaction marker under read_committed. It once read them with the default cap (64
    times the compressed size, up to 256 MiB), whatever max_decompressed said; here a 200
    KB batch under max_decompressed=150,000 is refused, naming the file."""
    pytest.importorskip("cramjam")
    import datetime
    import struct

    from fastkwire import _compression, records
    from fastkwire.records import Record
    from fastkwire.segments import SegmentError, plan_segments

    t0 = 1_700_000_000_000
    big = Record(None, t0, b"\0\0\0\0", bytes(200_000))  # an abort marker's key, for a marker
    data = bytearray(
        records.write_batch(
            [big],
            base_offset=0 if lookup == "time" else 1,
            compression="gzip",
            producer_id=7 if lookup == "read_committed" else -1,
            producer_epoch=0,
            is_transactional=lookup == "read_committed",
        )
    )
    if lookup == "read_committed":  # a marker, compressed: the broker never writes one so
        struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x20)
        struct.pack_into(">I", data, 17, records.crc32c(bytes(data[21:])))
        opened = records.write_batch(
            [Record(None, t0, None, b"x")],
            producer_id=7,
            producer_epoch=0,
            is_transactional=True,
        )
        data = bytearray(opened) + data
    directory = tmp_path / "t-0"
    directory.mkdir()
    segment = directory / "00000000000000000000.log"
    segment.write_bytes(bytes(data))

    limits = []
    decompress = _compression.decompress

    def spied(codec, raw, limit, *rest):
        limits.append(limit)
        return decompress(codec, raw, limit, *rest)

    monkeypatch.setattr(_compression, "decompress", spied)
    options = {"max_decompressed": 150_000}
    if lookup == "time":
        options["start_offset"] = datetime.datetime.fromtimestamp(t0 / 1000, datetime.timezone.utc)
    else:
        options["isolation_level"] = "read_committed"
    with pytest.raises(SegmentError) as info:
        plan_segments(str(directory), **options)
    assert info.value.file == str(segment) and "150000" in str(info.value)
    assert limits and max(limits) <= 150_000, limits

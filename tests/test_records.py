"""Record batches (magic 2): reading, writing, peers, hostile input. Every test runs on
both kernels through the `records_codec` fixture."""

import struct
import sys

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from fastkwire import DecodeError, EncodeError, _compression
from fastkwire._batches import HEADER
from fastkwire._records_python import crc32c
from fastkwire.records import Batches, ControlRecord, Record, RecordBatch

from record_peers import (
    AioBatch,
    AioBatchPy,
    AioBuilder,
    AioBuilderPy,
    KpBatch,
    KpBuilder,
    aiokafka,
    kafka_python,
)

RECORDS = [
    Record(0, 1_700_000_000_000, b"key", b"value", [("h", b"x"), ("n", None), ("", b"")]),
    Record(1, 1_700_000_000_005, None, b"", []),
    Record(2, 1_699_999_999_000, b"", None, [("\u00e9t\u00e9", b"\x00\xff")]),
]


def zz(n):
    """A zigzag varint."""
    v = (n << 1) ^ (n >> 63)
    out = bytearray()
    while v > 0x7F:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def make_batch(body, count, *, attrs=0, base_offset=0, base_ts=0, max_ts=0, length=None, crc=None):
    """A batch around a hand-made records section, with a right CRC unless given one."""
    size = HEADER.size - 12 + len(body) if length is None else length
    head = bytearray(
        HEADER.pack(
            base_offset, size, 0, 2, 0, attrs, count - 1, base_ts, max_ts, -1, -1, -1, count
        )
    )
    out = head + body
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])) if crc is None else crc)
    return bytes(out)


def raw_record(
    ts_delta=0, offset_delta=0, key=b"k", value=b"v", headers=(), length=None, extra=b""
):
    body = b"\x00" + zz(ts_delta) + zz(offset_delta)
    for v in (key, value):
        body += zz(-1) if v is None else zz(len(v)) + v
    body += zz(len(headers))
    for k, v in headers:
        body += zz(len(k)) + k + (zz(-1) if v is None else zz(len(v)) + v)
    body += extra
    return zz(len(body) if length is None else length) + body


def framed(body):
    """A record of hand-made fields, behind its (right) length."""
    return zz(len(body)) + body


def test_round_trip(records_codec):
    data = records_codec.write_batch(
        RECORDS,
        base_offset=0,
        producer_id=7,
        producer_epoch=2,
        base_sequence=40,
        partition_leader_epoch=5,
    )
    (batch,) = batches = records_codec.read_batches(data)
    assert isinstance(batches, Batches) and batches.tail == b""
    assert batch.records == RECORDS
    assert (batch.magic, batch.compression, batch.timestamp_type) == (2, "none", 0)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 2, 40)
    assert batch.partition_leader_epoch == 5
    assert batch.last_offset_delta == 2
    assert batch.base_timestamp == RECORDS[0].timestamp
    assert batch.max_timestamp == RECORDS[1].timestamp
    assert batch.crc == struct.unpack_from(">I", data, 17)[0]
    assert not batch.is_transactional and not batch.is_control
    assert records_codec.read_batches(data, check_crc=False) == batches


def test_null_and_empty_stay_distinct(records_codec):
    recs = [
        Record(i, 5, k, v, [])
        for i, (k, v) in enumerate([(None, None), (b"", b""), (None, b""), (b"", None)])
    ]
    got = records_codec.read_batches(records_codec.write_batch(recs))[0].records
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs]


def test_offsets_and_timestamps_default(records_codec):
    data = records_codec.write_batch([Record(value=b"a"), Record(value=b"b")], base_offset=100)
    got = records_codec.read_batches(data)[0]
    assert [r.offset for r in got.records] == [100, 101]
    assert all(abs(r.timestamp - got.base_timestamp) < 10_000 for r in got.records)
    assert got.base_timestamp > 1_600_000_000_000  # "now", in milliseconds


def test_base_offset_applies(records_codec):
    recs = [Record(1000 + 3 * i, 10 + i, None, b"x", []) for i in range(3)]
    batch = records_codec.read_batches(records_codec.write_batch(recs, base_offset=1000))[0]
    assert batch.base_offset == 1000 and batch.last_offset_delta == 6
    assert batch.records == recs


def test_transactional_and_log_append_time(records_codec):
    data = records_codec.write_batch(
        RECORDS,
        is_transactional=True,
        timestamp_type=1,
        producer_id=1,
        producer_epoch=0,
        base_sequence=0,
    )
    batch = records_codec.read_batches(data)[0]
    assert batch.is_transactional and batch.timestamp_type == 1
    # LogAppendTime: every record carries the batch's max timestamp, as Kafka's clients say.
    assert [r.timestamp for r in batch.records] == [batch.max_timestamp] * 3


def test_control_batch(records_codec):
    commit = raw_record(key=struct.pack(">hh", 0, 1), value=struct.pack(">hi", 0, 9))
    data = make_batch(commit, 1, attrs=0x30, base_offset=55)
    batch = records_codec.read_batches(data)[0]
    assert batch.is_control and batch.is_transactional
    (marker,) = batch.records
    assert isinstance(marker, ControlRecord)
    assert (marker.offset, marker.control_type, marker.coordinator_epoch) == (55, "commit", 9)
    abort = make_batch(raw_record(key=struct.pack(">hh", 0, 0), value=None), 1, attrs=0x30)
    assert records_codec.read_batches(abort)[0].records[0].control_type == "abort"
    short = make_batch(raw_record(key=b"\x00"), 1, attrs=0x20)
    with pytest.raises(DecodeError, match="control record key"):
        records_codec.read_batches(short)


def test_several_batches_and_tail(records_codec):
    a = records_codec.write_batch(RECORDS[:2])
    b = records_codec.write_batch(RECORDS[2:], base_offset=2)
    whole = a + b
    for cut in range(len(whole) + 1):
        got = records_codec.read_batches(whole[:cut])
        expected = 2 if cut == len(whole) else 1 if cut >= len(a) else 0
        assert len(got) == expected
        assert (
            got.tail == whole[len(a) if expected == 1 else len(whole) if expected == 2 else 0 : cut]
        )
    assert [r for batch in records_codec.read_batches(whole) for r in batch.records] == RECORDS


def test_views_are_read_in_place(records_codec):
    """A memoryview (what decode(..., records="view") hands out) is read where it lies,
    not copied first; other buffers and views read the same."""
    import array
    import tracemalloc

    big = [Record(i, i, None, None, []) for i in range(6_000)]  # 7 bytes a record
    data = records_codec.write_batch(big) + records_codec.write_batch(RECORDS[:2], base_offset=9)
    framed = b"xx" + data + b"yy"
    view = memoryview(framed)[2:-2]
    expected = records_codec.read_batches(data)

    def peak(arg):
        tracemalloc.start()
        try:
            got = records_codec.read_columns(arg)
            return got, tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    cols, from_bytes = peak(data)
    cols_view, from_view = peak(view)
    assert cols_view == cols == [r for b in expected for r in b.records]
    assert from_view < from_bytes + len(data) // 2  # no copy of the batch on the way
    assert records_codec.read_batches(view) == expected
    assert records_codec.read_batches(bytearray(data)) == expected
    words = array.array("H", data[: len(data) // 2 * 2])  # another item size: its bytes
    assert (
        records_codec.read_batches(words).tail
        == records_codec.read_batches(data[: len(words) * 2]).tail
    )
    spread = bytearray(2 * len(data))
    spread[::2] = data
    strided = memoryview(spread)[::2]  # not contiguous: copied, then read
    assert records_codec.read_batches(strided) == expected


def test_empty_input(records_codec):
    got = records_codec.read_batches(b"")
    assert got == [] and got.tail == b""


def test_repeated_timestamps_read_back(records_codec):
    # Records in one millisecond share a timestamp; runs of equal and changing deltas.
    stamps = [5, 5, 5, 7, 7, 5, -3, -3, 2**40, 5]
    recs = [Record(i, t, None, b"v", []) for i, t in enumerate(stamps)]
    got = records_codec.read_batches(records_codec.write_batch(recs))[0].records
    assert [r.timestamp for r in got] == stamps and got == recs
    assert records_codec.read_columns(records_codec.write_batch(recs)).timestamp.tolist() == stamps


def test_missing_cramjam_names_the_extra(records_codec, monkeypatch):
    # Runs with and without the compression extra installed.
    monkeypatch.setattr(_compression, "_cramjam", None)
    monkeypatch.setitem(sys.modules, "cramjam", None)
    with pytest.raises(ImportError, match=r"need cramjam: pip install .fastkwire\[compression\]"):
        records_codec.write_batch(RECORDS, compression="zstd")
    data = make_batch(b"\x00", 1, attrs=4)
    with pytest.raises(ImportError, match=r"need cramjam: pip install .fastkwire\[compression\]"):
        records_codec.read_batches(data)


# ---------------------------------------------------------------- peers


def _peer_records(batch):
    return [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


@pytest.mark.parametrize(
    "builder",
    [
        aiokafka(AioBuilder, "aiokafka"),
        aiokafka(AioBuilderPy, "aiokafka-py"),
        kafka_python(KpBuilder, "kafka-python"),
    ],
)
def test_peer_written_batches_equal_ours(records_codec, builder):
    b = builder(2, 0, 0, 3, 1, 17, 1 << 20)
    for r in RECORDS:
        b.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    theirs = bytes(b.build())
    epoch = struct.unpack_from(">i", theirs, 12)[0]  # aiokafka writes -1, kafka-python 0
    ours = records_codec.write_batch(
        RECORDS, producer_id=3, producer_epoch=1, base_sequence=17, partition_leader_epoch=epoch
    )
    assert ours == theirs
    assert records_codec.read_batches(theirs)[0].records == RECORDS


@pytest.mark.parametrize(
    "reader",
    [
        aiokafka(AioBatch, "aiokafka"),
        aiokafka(AioBatchPy, "aiokafka-py"),
        kafka_python(KpBatch, "kafka-python"),
    ],
)
def test_peers_read_ours(records_codec, reader):
    shifted = [Record(r.offset + 10**12, r.timestamp, r.key, r.value, r.headers) for r in RECORDS]
    batch = reader(records_codec.write_batch(shifted, base_offset=10**12))
    assert batch.validate_crc()
    assert _peer_records(batch) == shifted


HEADER_VALUE = st.one_of(st.none(), st.binary(max_size=8))
RECORD = st.builds(
    lambda k, v, h, dt: (k, v, h, dt),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.one_of(st.none(), st.binary(max_size=20)),
    st.lists(st.tuples(st.text(max_size=6), HEADER_VALUE), max_size=3),
    st.integers(-(2**40), 2**40),
)


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    items=st.lists(RECORD, min_size=1, max_size=6),
    base=st.integers(0, 2**62),
    gaps=st.lists(st.integers(0, 2**28), min_size=6, max_size=6),
    t0=st.integers(-(2**50), 2**50),
)
def test_hypothesis_round_trip_and_peers(records_codec, items, base, gaps, t0):
    offsets, o = [], base
    for i in range(len(items)):
        offsets.append(o)
        o += gaps[i] if i == 0 else 1 + gaps[i] // 4
    recs = [Record(off, t0 + dt, k, v, h) for off, (k, v, h, dt) in zip(offsets, items)]
    try:
        data = records_codec.write_batch(recs, base_offset=base)
    except EncodeError as e:  # an offset delta past int32: refused, never wrapped
        assert "offset delta" in str(e) and offsets[-1] - base > 2**31 - 1
        return
    assert records_codec.read_batches(data)[0].records == recs
    if KpBatch is None:
        return  # kafka-python is not installed: the round trip alone
    peer = KpBatch(data)
    assert peer.validate_crc()
    assert _peer_records(peer) == recs


# ---------------------------------------------------------------- hostile input


def test_crc_mismatch(records_codec):
    data = bytearray(records_codec.write_batch(RECORDS))
    data[-1] ^= 1
    with pytest.raises(DecodeError, match="CRC32C mismatch") as e:
        records_codec.read_batches(bytes(data))
    assert e.value.offset == 17
    # Skipping the check reads what is there.
    assert records_codec.read_batches(bytes(data), check_crc=False)[0].records[0].key == b"key"


@pytest.mark.parametrize(
    "body, count, reason",
    [
        (raw_record(length=200), 1, "record length 200 exceeds"),
        (raw_record(length=3), 1, "invalid record length 3"),
        (raw_record(length=-5), 1, "invalid record length -5"),
        (raw_record(extra=b"\x00"), 1, "record length .* does not match"),
        (raw_record() + b"\x00", 1, "1 byte after the batch's 1 record"),
        (raw_record(), 2, "count 2 exceeds"),
        (raw_record(), 10**9, "count 1000000000 exceeds"),
        (raw_record(), -1, "count -1 exceeds"),
        (b"\x80" * 6 + b"\x00", 1, "varint longer than 5 bytes"),
        (framed(b"\x00" + b"\xff" * 10 + b"\x01"), 1, "varint longer than 10 bytes"),
        (framed(b"\x00" + zz(0) + zz(0) + zz(-2) + b"\x00\x00\x00"), 1, "invalid length -2"),
        (raw_record(headers=[(b"\xff", b"")]), 1, "invalid UTF-8"),
        (
            framed(b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(1) + zz(-1) + zz(0)),
            1,
            "null header key",
        ),
        (framed(b"\x00" + zz(0) + zz(0) + zz(-1) + zz(-1) + zz(100)), 1, "count 100 exceeds"),
        (framed(b"\x00" + zz(0) + zz(0) + zz(50) + b"xxx"), 1, "truncated: needs 50 bytes, 3 left"),
    ],
)
def test_hostile_records(records_codec, body, count, reason):
    with pytest.raises(DecodeError, match=reason):
        records_codec.read_batches(make_batch(body, count))


def test_varint_past_32_bits(records_codec):
    # Five bytes, but a value past 32 bits: an int32 varint cannot carry it.
    body = b"\xff\xff\xff\xff\x7f" + raw_record()[1:]
    with pytest.raises(DecodeError, match="varint longer than 5 bytes or out of range"):
        records_codec.read_batches(make_batch(body, 1))


def test_offset_past_int64(records_codec):
    data = make_batch(raw_record(offset_delta=2**31 - 1), 1, base_offset=2**63 - 10)
    with pytest.raises(DecodeError, match="offset out of the int64 range"):
        records_codec.read_batches(data)


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda d: d[:8] + struct.pack(">i", -3) + d[12:], "invalid batch length -3"),
        (lambda d: d[:8] + struct.pack(">i", 20) + d[12:32], "shorter than the batch header"),
        (lambda d: d[:8] + struct.pack(">i", 2) + d[12:14], "too short to hold the magic"),
        (lambda d: d[:16] + b"\x07" + d[17:], "unknown magic 7"),
    ],
)
def test_hostile_headers(records_codec, mutate, reason):
    data = records_codec.write_batch(RECORDS)
    with pytest.raises(DecodeError, match=reason):
        records_codec.read_batches(mutate(data), check_crc=False)


def test_unknown_codec(records_codec):
    data = make_batch(raw_record(), 1, attrs=6)
    with pytest.raises(DecodeError, match="unknown compression 6"):
        records_codec.read_batches(data)


@pytest.mark.parametrize(
    "bad, path",
    [
        ([Record(0, 0, "text", b"", [])], "records[0].key"),
        ([Record(0, 0, None, 5, [])], "records[0].value"),
        ([Record(0, 0, None, None, [(b"k", b"v")])], "records[0].headers[0]"),
        ([Record(0, 0, None, None, [("k", "v")])], "records[0].headers[0]"),
        ([Record(0, 0, None, None, None), "x"], "records[1]"),
        ([Record(0, "t", None, None, [])], "records[0].timestamp"),
        ([Record(2**40, 0, None, None, [])], "records[0].offset"),
    ],
)
def test_encode_errors_name_the_field(records_codec, bad, path):
    with pytest.raises(EncodeError) as e:
        records_codec.write_batch(bad)
    assert e.value.path == path


def test_encode_refuses_empty_and_bad_options(records_codec):
    with pytest.raises(EncodeError, match="at least one record"):
        records_codec.write_batch([])
    with pytest.raises(EncodeError, match="unknown compression"):
        records_codec.write_batch(RECORDS, compression="brotli")
    with pytest.raises(EncodeError, match="out of range"):
        records_codec.write_batch(RECORDS, producer_epoch=1 << 20)


def test_crc32c_known_value():
    # The check value of CRC-32C (RFC 3720): "123456789" -> 0xE3069283.
    assert crc32c(b"123456789") == 0xE3069283
    assert crc32c(b"") == 0


def test_batch_objects():
    fields = {n: [] if n == "records" else 0 for n in RecordBatch.__slots__}
    a = RecordBatch(**fields)
    assert repr(a).endswith("records=<0 records>)")
    assert a == RecordBatch(**fields)
    with pytest.raises(TypeError):
        RecordBatch(bogus=1, **fields)
    assert Record(1, 2, b"k", None) == Record(1, 2, b"k", None, [])
    assert Record(1, 2, b"k", None) != Record(1, 2, b"k", b"")


def test_public_module_uses_the_packages_implementation():
    import fastkwire
    from fastkwire import records

    assert records.implementation == fastkwire.implementation
    data = records.write_batch(RECORDS, base_offset=0)
    assert records.read_batches(data)[0].records == RECORDS
    assert records.crc32c(b"123456789") == 0xE3069283


def test_repeated_and_near_repeated_headers(records_codec):
    # The compiled reader reuses a header equal to the previous one: only equal ones.
    values = [b"ab", b"ac", b"ab", None, b"", b"", None, b"ab"]
    recs = [
        Record(i, 0, None, None, [("h", v), ("g" if i % 2 else "h", v)])
        for i, v in enumerate(values)
    ]
    assert records_codec.read_batches(records_codec.write_batch(recs))[0].records == recs

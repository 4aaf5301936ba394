"""RecordColumns: read_columns, the binary columns, to_arrow, and writing from columns."""

import numpy as np
import pytest

from fastkwire import DecodeError
from fastkwire.records import BinaryColumn, Record, RecordColumns

from record_peers import needs_cramjam
from test_records import RECORDS, make_batch, raw_record

MANY = [
    Record(
        100 + i,
        1_000 + (i * 37) % 11,
        None if i % 4 == 0 else b"k%d" % i,
        None if i % 5 == 0 else b"v" * (i % 7),
        [("h%d" % (i % 3), None if i % 2 else b"x")] * (i % 3),
    )
    for i in range(50)
]


def test_columns_match_objects(records_codec):
    data = records_codec.write_batch(MANY[:20], base_offset=100) + records_codec.write_batch(
        MANY[20:], base_offset=120
    )
    cols = records_codec.read_columns(data + data[:30])
    assert isinstance(cols, RecordColumns) and cols.tail == data[:30]
    assert len(cols) == len(MANY)
    assert cols.to_records() == MANY == list(cols)
    assert cols == MANY
    assert [cols[i] for i in range(len(cols))] == MANY and cols[-1] == MANY[-1]
    assert cols.offset.dtype == np.int64 and cols.timestamp.dtype == np.int64
    assert cols.offset.tolist() == [r.offset for r in MANY]
    assert cols.timestamp.tolist() == [r.timestamp for r in MANY]
    assert cols.key.to_pylist() == [r.key for r in MANY]
    assert cols.value.to_pylist() == [r.value for r in MANY]
    assert cols.headers.to_pylist() == [r.headers for r in MANY]
    with pytest.raises(IndexError):
        cols[len(MANY)]


def test_binary_column_layout(records_codec):
    recs = [
        Record(0, 0, b"ab", None, []),
        Record(1, 0, None, b"", []),
        Record(2, 0, b"", b"xyz", []),
    ]
    cols = records_codec.read_columns(records_codec.write_batch(recs))
    key = cols.key
    assert key.data.dtype == np.uint8 and key.data.tobytes() == b"ab"
    assert key.offsets.tolist() == [0, 2, 2, 2]
    assert key.nulls.tolist() == [False, True, False]
    assert (
        len(key) == 3 and key[0] == b"ab" and key[1] is None and key[2] == b"" and key[-3] == b"ab"
    )
    assert cols.value.data.tobytes() == b"xyz" and cols.value.offsets.tolist() == [0, 0, 0, 3]
    assert cols.headers.offsets.tolist() == [0, 0, 0, 0] and len(cols.headers.key) == 0
    with pytest.raises(IndexError):
        key[3]


def test_empty_and_log_append_time(records_codec):
    cols = records_codec.read_columns(b"")
    assert len(cols) == 0 and cols.to_records() == [] and cols.tail == b""
    data = records_codec.write_batch(RECORDS, timestamp_type=1)
    cols = records_codec.read_columns(data)
    assert cols.timestamp.tolist() == [max(r.timestamp for r in RECORDS)] * len(RECORDS)


def test_control_batches_come_as_raw_records(records_codec):
    data = make_batch(
        raw_record(key=b"\x00\x00\x00\x01", value=b"\x00\x00\x00\x00\x00\x05"),
        1,
        attrs=0x30,
        base_offset=9,
    )
    cols = records_codec.read_columns(data)
    assert cols.key.to_pylist() == [b"\x00\x00\x00\x01"] and cols.offset.tolist() == [9]


def test_write_from_columns(records_codec):
    cols = RecordColumns.from_records(MANY)
    data = records_codec.write_batch(cols, base_offset=100)
    assert data == records_codec.write_batch(MANY, base_offset=100)
    assert records_codec.read_batches(data)[0].records == MANY


def test_to_arrow(records_codec):
    pa = pytest.importorskip("pyarrow")
    cols = records_codec.read_columns(records_codec.write_batch(MANY, base_offset=100))
    table = cols.to_arrow()
    assert table.schema.names == ["offset", "timestamp", "key", "value", "headers"]
    assert table.column("offset").to_pylist() == [r.offset for r in MANY]
    assert table.column("key").to_pylist() == [r.key for r in MANY]
    assert table.column("value").to_pylist() == [r.value for r in MANY]
    assert table.column("headers").to_pylist() == [
        [{"key": k, "value": v} for k, v in r.headers] for r in MANY
    ]
    assert table.column("value").type == pa.binary()
    # The value bytes are the column's own buffer, not a copy.
    buf = table.column("value").buffers()[2]
    assert buf.address == cols.value.data.ctypes.data


def test_binary_column_equality():
    a = BinaryColumn(
        np.frombuffer(b"ab", np.uint8), np.array([0, 2, 2], np.int32), np.array([False, True])
    )
    assert a.to_pylist() == [b"ab", None]
    assert a == BinaryColumn(
        np.frombuffer(b"ab", np.uint8), np.array([0, 2, 2], np.int32), np.array([False, True])
    )
    assert repr(a) == "BinaryColumn([b'ab', None])"


@needs_cramjam
def test_many_batches_grow_the_columns(records_codec):
    """Batch after batch, small then large: the arrays grow and keep what they had."""
    import random

    rng = random.Random(5)
    parts, expected, offset = [], [], 0
    for b in range(40):
        n = rng.choice([1, 2, 30])
        recs = [
            Record(
                offset + i,
                7,
                rng.choice([None, b"", rng.randbytes(rng.randrange(30))]),
                rng.choice([None, rng.randbytes(rng.randrange(200))]),
                [("k%d" % j, rng.choice([None, b"v" * j])) for j in range(rng.randrange(5))],
            )
            for i in range(n)
        ]
        parts.append(
            records_codec.write_batch(
                recs, base_offset=offset, compression="gzip" if b % 7 == 3 else "none"
            )
        )
        expected += recs
        offset += n
    cols = records_codec.read_columns(b"".join(parts))
    assert cols.to_records() == expected
    assert cols.key.offsets[-1] == len(cols.key.data) and cols.headers.offsets[-1] == len(
        cols.headers.key
    )


@pytest.mark.parametrize(
    "shape", ["many headers", "long header keys", "long header values", "then a bad one"]
)
def test_columns_past_the_first_guess_of_header_room(records_codec, shape):
    """The header columns start at a guess (two rows of up to 16 + 16 bytes per record)
    and are made as large as the batch could need when a batch holds more."""
    recs = [Record(i, 5, b"k", b"v", [("h", b"x")]) for i in range(8)]
    if shape == "many headers":
        recs[3].headers = [("h%d" % j, b"y") for j in range(40)]
    elif shape == "long header keys":
        recs[7].headers = [("k" * 300, None)]
    else:
        recs[0].headers = [("h", b"v" * 300), ("g", b"")]
    data = records_codec.write_batch(recs)
    first = [Record(100, 1, None, None, [("a", b"b")])]
    data = records_codec.write_batch(first, base_offset=100) + data  # a small batch first
    if shape == "then a bad one":
        bad = bytearray(data)
        assert bad[-3:] == b"h\x02x"
        bad[-3] = 0xFF  # the last header key is no longer UTF-8
        with pytest.raises(DecodeError) as ours:
            records_codec.read_columns(bytes(bad), check_crc=False)
        with pytest.raises(DecodeError) as objects:
            records_codec.read_batches(bytes(bad), check_crc=False)
        assert (ours.value.reason, ours.value.offset) == (
            objects.value.reason,
            objects.value.offset,
        )
        return
    cols = records_codec.read_columns(data)
    assert cols.to_records() == first + recs
    assert (
        cols.headers.offsets[-1]
        == len(cols.headers.key)
        == sum(len(r.headers) for r in first + recs)
    )


@needs_cramjam
def test_runs_of_plain_batches_and_the_batches_between(records_codec):
    """The compiled kernel takes runs of plain batches (uncompressed magic 2, CRC right,
    records the fast path reads) in one call and the walk reads the others between them:
    a compressed batch, a legacy message, a batch with a non-ASCII header key, a log
    append time batch. The rows are the objects' rows, in order, in both kernels."""
    kafka = pytest.importorskip("kafka.record.legacy_records")
    legacy = kafka.LegacyRecordBatchBuilder(magic=1, compression_type=0, batch_size=1 << 20)
    legacy.append(20, timestamp=7, key=b"lk", value=b"lv")
    parts = [
        records_codec.write_batch(MANY[:10], base_offset=100),
        records_codec.write_batch(MANY[10:20], base_offset=110),
        records_codec.write_batch(MANY[20:30], base_offset=120, compression="gzip"),
        bytes(legacy.build()),
        records_codec.write_batch([Record(None, 5, b"k", b"v", [("é", b"x")])], base_offset=21),
        records_codec.write_batch(MANY[30:40], base_offset=130, timestamp_type=1),
        records_codec.write_batch(MANY[40:], base_offset=140),
    ]
    data = b"".join(parts)
    want = [r for b in records_codec.read_batches(data) for r in b.records]
    cols = records_codec.read_columns(data + parts[0][:20])
    assert cols == want and cols.tail == parts[0][:20]
    assert [c for p in parts for c in records_codec.read_columns(p)] == want
    builder = records_codec.kernel.ColumnsBuilder()
    taken = builder.add_run(data, 0, True)
    if records_codec.kernel.__name__.endswith("_records_python"):
        assert taken == 0  # every batch goes through add()
    else:
        assert taken == len(parts[0]) + len(parts[1])  # up to the compressed one
        after_legacy = sum(map(len, parts[:4]))
        assert builder.add_run(data, after_legacy, True) == after_legacy  # the é key
        assert builder.add_run(data, after_legacy + len(parts[4]), True) == len(data)


def test_a_bad_batch_after_a_run_names_its_offset(records_codec):
    """A CRC mismatch or a bad record after a run of plain batches: the same error, at
    the same offset, as when the batch is read alone."""
    good = records_codec.write_batch(MANY[:10], base_offset=100) * 3
    bad_crc = bytearray(records_codec.write_batch(MANY[10:20], base_offset=110))
    bad_crc[70] ^= 1
    with pytest.raises(DecodeError, match="CRC32C mismatch") as e:
        records_codec.read_columns(good + bytes(bad_crc))
    assert e.value.offset == len(good) + 17
    bad_count = bytearray(records_codec.write_batch(MANY[10:20], base_offset=110))
    bad_count[60] += 1  # one record more than the batch holds
    with pytest.raises(DecodeError) as alone:
        records_codec.read_columns(bytes(bad_count), check_crc=False)
    with pytest.raises(DecodeError) as after:
        records_codec.read_columns(good + bytes(bad_count), check_crc=False)
    assert after.value.reason == alone.value.reason
    assert after.value.offset == alone.value.offset + len(good)


def test_size_hints_agree(records_codec):
    """Both kernels size the first arrays from the same headers: the records and the bytes
    past their least of the leading magic 2 batches; (0, 0) for what has none."""
    from fastkwire import _records_python

    one = records_codec.write_batch(MANY[:10], base_offset=100)
    two = records_codec.write_batch(MANY[10:], base_offset=110)
    body = len(one) - 61
    cases = [b"", b"\x00" * 10, one, one + two, one + two[:-1], bytearray(one), b"junk" * 40]
    for data in cases:
        assert records_codec.kernel.size_hints(data) == _records_python.size_hints(data)
    assert records_codec.kernel.size_hints(one) == (10, body - 7 * 10)
    strided = memoryview(one + one)[::2]  # not contiguous: no hints
    assert records_codec.kernel.size_hints(strided) == (0, 0)
    assert records_codec.kernel.size_hints(12345) == (0, 0)

"""The record-batch to Arrow converter (fastkwire._arrow_rows) on both record kernels:
rows against the kernel's own objects and kafka-python's reader, control batches,
aborted transactions, offset ranges, cut-off tails and bad bytes."""

import struct
import zlib

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from fastkwire import DecodeError  # noqa: E402
from fastkwire import _arrow_rows  # noqa: E402
from fastkwire.records import Record, crc32c  # noqa: E402

from record_peers import needs_cramjam  # noqa: E402

RECORDS = [
    Record(
        None,
        1_700_000_000_000 + i,
        None if i % 4 == 0 else b"k%d" % i,
        None if i % 5 == 0 else b"v" * (i % 7),
        [("h%d" % (i % 3), None if i % 2 else b"x")] * (i % 3),
    )
    for i in range(20)
]


@pytest.fixture
def codec(records_codec, monkeypatch):
    """The converter over one kernel's read_columns; the codec writes the test's batches."""
    monkeypatch.setattr(_arrow_rows, "read_columns", records_codec.read_columns)
    monkeypatch.setattr(_arrow_rows, "_batch_headers", records_codec.kernel.batch_headers)
    return records_codec


def rows(batch):
    """The rows as plain tuples, headers as lists of pairs."""
    return list(
        zip(
            batch.column("offset").to_pylist(),
            batch.column("key").to_pylist(),
            batch.column("value").to_pylist(),
            batch.column("timestamp").to_pylist(),
            batch.column("headers").to_pylist(),
        )
    )


def expected(codec, data):
    return [
        (r.offset, r.key, r.value, r.timestamp, list(r.headers))
        for b in codec.read_batches(data)
        if not b.is_control
        for r in b.records
    ]


def control_batch(codec, offset, producer_id, abort):
    """A transaction marker, as a broker writes it: a control batch of one record."""
    data = bytearray(
        codec.write_batch(
            [
                Record(
                    key=struct.pack(">hh", 0, 0 if abort else 1), value=b"\x00\x00\x00\x00\x00\x05"
                )
            ],
            base_offset=offset,
            producer_id=producer_id,
            producer_epoch=0,
            is_transactional=True,
        )
    )
    attrs = struct.unpack_from(">h", data, 21)[0] | 0x20
    struct.pack_into(">h", data, 21, attrs)
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    return bytes(data)


def test_schema_is_rays():
    assert [(f.name, str(f.type)) for f in _arrow_rows.SCHEMA] == [
        ("offset", "int64"),
        ("key", "binary"),
        ("value", "binary"),
        ("topic", "string"),
        ("partition", "int32"),
        ("timestamp", "int64"),
        ("timestamp_type", "int32"),
        ("headers", "map<string, binary>"),
    ]
    assert _arrow_rows.empty_batch().schema == _arrow_rows.SCHEMA
    assert _arrow_rows.empty_batch().num_rows == 0


def test_rows_match_the_kernels_objects(codec):
    data = codec.write_batch(RECORDS[:7], base_offset=10) + codec.write_batch(
        RECORDS[7:], base_offset=17, timestamp_type=1
    )
    batch, next_offset, tail = _arrow_rows.batches_to_arrow(data, topic="t", partition=3)
    assert batch.schema == _arrow_rows.SCHEMA
    assert rows(batch) == expected(codec, data)
    assert batch.column("topic").to_pylist() == ["t"] * 20
    assert batch.column("partition").to_pylist() == [3] * 20
    assert batch.column("timestamp_type").to_pylist() == [1] * 7 + [2] * 13
    assert next_offset == 30 and tail == b""
    # Null keys and values stay null, empty ones stay empty.
    assert batch.column("key").null_count == 5
    assert batch.column("value").to_pylist()[7] == b""


def test_rows_match_kafka_pythons_reader(codec):
    pytest.importorskip("kafka")
    from kafka.record import MemoryRecords

    data = codec.write_batch(RECORDS, base_offset=5)
    theirs = []
    recs = MemoryRecords(data)
    while recs.has_next():
        for r in recs.next_batch():
            theirs.append((r.offset, r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]))
    batch, _, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
    assert rows(batch) == theirs


@needs_cramjam
@pytest.mark.parametrize("compression", ["gzip", "snappy", "lz4", "zstd"])
def test_compressed(codec, compression):
    data = codec.write_batch(RECORDS, base_offset=0, compression=compression)
    batch, next_offset, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
    assert rows(batch) == expected(codec, data) and next_offset == 20


def test_control_records_are_never_rows(codec):
    data = codec.write_batch(
        RECORDS[:3], base_offset=0, producer_id=7, is_transactional=True
    ) + control_batch(codec, 3, 7, abort=False)
    batch, next_offset, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
    assert batch.column("offset").to_pylist() == [0, 1, 2] and next_offset == 4


def _transactions(codec):
    """Producer 7 aborts offsets 0-2 (marker at 3); producer 8 commits 4-5 (marker at 6);
    producer 7's next transaction, 7-8, commits (marker at 9)."""
    return b"".join(
        [
            codec.write_batch(RECORDS[:3], base_offset=0, producer_id=7, is_transactional=True),
            control_batch(codec, 3, 7, abort=True),
            codec.write_batch(RECORDS[3:5], base_offset=4, producer_id=8, is_transactional=True),
            control_batch(codec, 6, 8, abort=False),
            codec.write_batch(RECORDS[5:7], base_offset=7, producer_id=7, is_transactional=True),
            control_batch(codec, 9, 7, abort=False),
        ]
    )


def test_aborted_transactions_dropped_under_read_committed(codec):
    data = _transactions(codec)
    read = _arrow_rows.batches_to_arrow
    uncommitted, _, _ = read(data, topic="t", partition=0, aborted_transactions=[(7, 0)])
    assert uncommitted.column("offset").to_pylist() == [0, 1, 2, 4, 5, 7, 8]
    committed, next_offset, _ = read(
        data, topic="t", partition=0, read_committed=True, aborted_transactions=[(7, 0)]
    )
    assert committed.column("offset").to_pylist() == [4, 5, 7, 8] and next_offset == 10
    # A Fetch answer's AbortedTransaction objects are taken as they come.
    from fastkwire import FetchResponse

    aborted = FetchResponse.AbortedTransaction(producer_id=7, first_offset=0)
    same, _, _ = read(
        data, topic="t", partition=0, read_committed=True, aborted_transactions=[aborted]
    )
    assert same.column("offset").to_pylist() == [4, 5, 7, 8]
    # Without an aborted transaction listed, every data batch is committed.
    nothing, _, _ = read(data, topic="t", partition=0, read_committed=True)
    assert nothing.column("offset").to_pylist() == [0, 1, 2, 4, 5, 7, 8]


def test_offset_range(codec):
    data = codec.write_batch(RECORDS, base_offset=100)
    read = _arrow_rows.batches_to_arrow
    batch, next_offset, _ = read(data, topic="t", partition=0, start_offset=105, end_offset=112)
    assert batch.column("offset").to_pylist() == list(range(105, 112)) and next_offset == 120
    batch, _, _ = read(data, topic="t", partition=0, start_offset=500)
    assert batch.num_rows == 0 and batch.schema == _arrow_rows.SCHEMA


def test_range_and_control_gaps_together(codec):
    data = _transactions(codec)
    batch, _, _ = _arrow_rows.batches_to_arrow(
        data, topic="t", partition=0, start_offset=1, end_offset=8
    )
    assert batch.column("offset").to_pylist() == [1, 2, 4, 5, 7]


def test_compacted_gaps(codec):
    # A compacted batch keeps its offset range but not every offset in it.
    kept = [Record(offset=o, timestamp=1, key=b"k", value=b"v") for o in (50, 53, 59)]
    data = codec.write_batch(kept, base_offset=50)
    batch, next_offset, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
    assert batch.column("offset").to_pylist() == [50, 53, 59] and next_offset == 60


def test_cut_off_batch_is_the_tail(codec):
    first = codec.write_batch(RECORDS[:5], base_offset=0)
    second = codec.write_batch(RECORDS[5:], base_offset=5)
    cut = first + second[:40]
    batch, next_offset, tail = _arrow_rows.batches_to_arrow(cut, topic="t", partition=0)
    assert batch.num_rows == 5 and next_offset == 5 and tail == second[:40]
    batch, next_offset, tail = _arrow_rows.batches_to_arrow(second[:40], topic="t", partition=0)
    assert batch.num_rows == 0 and next_offset is None and tail == second[:40]
    # A view of a larger buffer reads the same.
    batch, _, _ = _arrow_rows.batches_to_arrow(memoryview(cut), topic="t", partition=0)
    assert batch.num_rows == 5


def test_legacy_message_sets(codec):
    pytest.importorskip("kafka")
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    for magic, ts_type in ((0, 0), (1, 1)):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
        for i in range(3):
            builder.append(
                i, timestamp=None if magic == 0 else 1000 + i, key=None, value=b"v%d" % i
            )
        data = bytes(builder.build())
        batch, next_offset, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
        assert batch.column("value").to_pylist() == [b"v0", b"v1", b"v2"]
        assert batch.column("timestamp_type").to_pylist() == [ts_type] * 3
        assert next_offset == 3


def test_legacy_timestamp_types(codec):
    """A magic 1 message's timestamp type is its attributes' bit 3 (the byte after the
    magic), as kafka-python reads it: create time and log append time, side by side with
    magic 0 and magic 2 batches in one input."""
    pytest.importorskip("kafka")
    from kafka.record import MemoryRecords
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    def legacy(magic, base, log_append):
        builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 20)
        for i in range(2):
            builder.append(
                base + i, timestamp=None if magic == 0 else 5000 + i, key=None, value=b"v"
            )
        data = bytearray(builder.build())
        if log_append:  # as a broker with message.timestamp.type=LogAppendTime stores it
            pos = 0
            while pos < len(data):
                (size,) = struct.unpack_from(">i", data, pos + 8)
                data[pos + 17] |= 0x08
                struct.pack_into(
                    ">I", data, pos + 12, zlib.crc32(bytes(data[pos + 16 : pos + 12 + size]))
                )
                pos += 12 + size
        return bytes(data)

    data = (
        legacy(1, 0, False)
        + legacy(1, 2, True)
        + legacy(0, 4, False)
        + codec.write_batch(RECORDS[:2], base_offset=6, timestamp_type=1)
        + codec.write_batch(RECORDS[:2], base_offset=8)
    )
    batch, next_offset, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
    assert batch.column("offset").to_pylist() == list(range(10))
    assert batch.column("timestamp_type").to_pylist() == [1, 1, 2, 2, 0, 0, 2, 2, 1, 1]
    assert next_offset == 10
    # kafka-python's own reading of the magic 1 messages agrees.
    for part, want in ((legacy(1, 0, False), 0), (legacy(1, 2, True), 1)):
        records = MemoryRecords(part)
        while (b := records.next_batch()) is not None:
            assert b.timestamp_type == want


def test_batch_headers_agree_and_check_lengths(records_codec):
    """Both kernels' batch_headers give the same fields, and refuse a length that does
    not fit (the converter only hands them what read_columns read)."""
    from fastkwire import _records_python

    data = records_codec.write_batch(
        RECORDS[:3], base_offset=7, producer_id=9, producer_epoch=0, is_transactional=True
    ) + control_batch(records_codec, 10, 9, abort=True)
    got = records_codec.kernel.batch_headers(data, len(data))
    want = _records_python.batch_headers(data, len(data))
    assert [a.tolist() for a in got] == [a.tolist() for a in want]
    at, magic, base, attrs, delta, producer, count = got
    assert at.tolist() == [0, len(data) - len(control_batch(records_codec, 10, 9, True))]
    assert magic.tolist() == [2, 2] and base.tolist() == [7, 10] and count.tolist() == [3, 1]
    assert producer.tolist() == [9, 9] and delta.tolist() == [2, 0]
    assert (attrs & 0x20).tolist() == [0, 0x20] and (attrs & 0x10).tolist() == [0x10, 0x10]
    assert [a.tolist() for a in records_codec.kernel.batch_headers(data, 0)] == [[]] * 7
    for end in (len(data) - 1, 30, len(data) + 1, -1):
        with pytest.raises(ValueError):
            records_codec.kernel.batch_headers(data, end)


APPEND_TIME = 1_700_000_009_999


def legacy_message_set(compression_type, log_append_time):
    """A magic 1 message set by kafka-python's legacy builder, of 3 messages with real
    (2023) timestamps; with log_append_time, as a broker does, the attributes' bit 3 set on
    each message (the wrapper, when compressed), its timestamp the append time, and the CRC
    made again."""
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(
        magic=1, compression_type=compression_type, batch_size=1 << 20
    )
    for i in range(3):
        builder.append(i, timestamp=1_700_000_000_000 + i, key=b"k%d" % i, value=b"v%d" % i)
    data = bytearray(builder.build())
    if log_append_time:
        pos = 0
        while pos < len(data):
            # offset int64, size int32, crc uint32, magic int8, attributes int8, timestamp
            data[pos + 17] |= 0x08
            struct.pack_into(">q", data, pos + 18, APPEND_TIME)
            end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
            struct.pack_into(">I", data, pos + 12, zlib.crc32(data[pos + 16 : end]))
            pos = end
    return bytes(data)


def kafka_python_rows(data):
    """kafka-python's reading: (offset, timestamp, timestamp_type, key, value), its
    timestamp types (0 create, 1 log append) in confluent-kafka's (and Ray's) numbers."""
    from kafka.record.memory_records import MemoryRecords

    out, records = [], MemoryRecords(data)
    while (batch := records.next_batch()) is not None:
        for r in batch:
            out.append((r.offset, r.timestamp, r.timestamp_type + 1, r.key, r.value))
    return out


def arrow_rows(table):
    return list(
        zip(
            *(
                table.column(c).to_pylist()
                for c in ("offset", "timestamp", "timestamp_type", "key", "value")
            )
        )
    )


@pytest.mark.parametrize(
    "compression_type",
    [0, pytest.param(1, marks=needs_cramjam)],
    ids=["uncompressed", "gzip"],
)
@pytest.mark.parametrize("log_append_time", [False, True], ids=["create", "log-append"])
def test_magic_1_timestamp_type_is_the_attributes_bit_3(
    codec, compression_type, log_append_time, tmp_path
):
    pytest.importorskip("kafka")
    from fastkwire import read_segments

    data = legacy_message_set(compression_type, log_append_time)
    want = kafka_python_rows(data)
    assert [r[1:3] for r in want] == (
        [(APPEND_TIME, 2)] * 3
        if log_append_time
        else [(1_700_000_000_000 + i, 1) for i in range(3)]
    )
    batch, next_offset, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=0)
    assert arrow_rows(batch) == want and next_offset == 3
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(data)
    assert arrow_rows(read_segments(tmp_path / "t-0")) == want


def test_corrupt_batch_names_the_offset(codec):
    first = codec.write_batch(RECORDS[:3])
    data = bytearray(first + codec.write_batch(RECORDS[3:], base_offset=3))
    data[len(first) + 70] ^= 0xFF  # inside the second batch's records
    with pytest.raises(DecodeError) as info:
        _arrow_rows.batches_to_arrow(bytes(data), topic="t", partition=0)
    assert "CRC32C" in str(info.value) and info.value.offset == len(first) + 17


# ---------------------------------------------------------------- offsets that go backwards


def batch_of(codec, offsets, base=None):
    """One batch of records at these offsets (deltas from `base`, its first by default)."""
    recs = [Record(offset=o, timestamp=1, key=b"k", value=b"%d" % o) for o in offsets]
    return codec.write_batch(recs, base_offset=offsets[0] if base is None else base)


def offsets_read(data, **bounds):
    batch, _, _ = _arrow_rows.batches_to_arrow(data, topic="t", partition=3, **bounds)
    return batch.column("offset").to_pylist()


def test_batches_out_of_order_or_overlapping_are_refused(codec):
    # The hostile review's answers: rows outside [0, 10) or given twice, out of order.
    b0_4, b5_9 = batch_of(codec, range(5)), batch_of(codec, range(5, 10))
    far = batch_of(codec, [1000, 1001])
    with pytest.raises(
        DecodeError, match="t-3: a batch of offsets 5 to 9 comes after offset 1001"
    ) as e:
        offsets_read(b0_4 + far + b5_9, start_offset=0, end_offset=10)
    assert e.value.offset == len(b0_4 + far)
    b5_6, b7_9 = batch_of(codec, [5, 6]), batch_of(codec, [7, 8, 9])
    with pytest.raises(DecodeError, match="offsets 0 to 4 comes after offset 6") as e:
        offsets_read(b5_6 + b0_4 + b7_9, start_offset=5, end_offset=10)
    assert e.value.offset == len(b5_6)
    # Overlapping by one offset, and the same batch twice.
    with pytest.raises(DecodeError, match="offsets 4 to 9 comes after offset 4"):
        offsets_read(b0_4 + batch_of(codec, range(4, 10)))
    with pytest.raises(DecodeError, match="out of order or overlapping"):
        offsets_read(b0_4 + b0_4, end_offset=3)
    # In order, the range is exactly the rows asked for, whatever the batches' ends.
    data = b0_4 + b5_9 + far
    assert offsets_read(data, start_offset=3, end_offset=8) == [3, 4, 5, 6, 7]
    assert offsets_read(data, start_offset=6, end_offset=1001) == [6, 7, 8, 9, 1000]


def test_records_must_go_forward_inside_their_batch(codec):
    with pytest.raises(DecodeError, match="t-3: record offset 3 comes after 5 in the batch of"):
        offsets_read(batch_of(codec, [0, 5, 3, 6]), start_offset=0, end_offset=10)
    with pytest.raises(DecodeError, match="record offset 2 comes after 2"):
        offsets_read(batch_of(codec, [0, 2, 2, 3]))
    # A record past its batch's last offset would be read again from the next offset on.
    data = bytearray(batch_of(codec, [0, 1, 2, 3]))
    struct.pack_into(">i", data, 23, 1)  # last offset delta: 1
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(DecodeError, match="a record of the batch of offsets 0 to 1 lies outside"):
        offsets_read(bytes(data))
    struct.pack_into(">i", data, 23, -1)  # the batch's last offset before its first
    struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
    with pytest.raises(DecodeError, match="run from 0 back to -1"):
        offsets_read(bytes(data))


def test_previous_offset_and_next_segment_bound_the_batches(codec):
    data = batch_of(codec, range(10, 15))
    assert offsets_read(data, previous_offset=9, next_segment=15) == list(range(10, 15))
    with pytest.raises(DecodeError, match="offsets 10 to 14 comes after offset 12"):
        offsets_read(data, previous_offset=12)
    with pytest.raises(DecodeError, match="reaches the next segment, which starts at offset 13"):
        offsets_read(data, next_segment=13)
    # Bounds past int64 (a segment file's name may say anything) do not overflow.
    assert offsets_read(data, previous_offset=-(2**70), next_segment=2**70) == list(range(10, 15))


def test_aborted_transactions_state_carries_across_calls(codec):
    # A segment read a block at a time hands one AbortedTransactions to every block: the
    # transaction that starts in one block and ends in a later one is dropped throughout,
    # and the producer's next transaction, after its abort marker, is kept.
    def txn(offset, producer_id=7):
        data = bytearray(batch_of(codec, [offset]))
        struct.pack_into(">h", data, 21, 0x10)  # transactional
        struct.pack_into(">q", data, 43, producer_id)
        struct.pack_into(">I", data, 17, crc32c(bytes(data[21:])))
        return bytes(data)

    blocks = [txn(0) + txn(1), txn(2) + control_batch(codec, 3, 7, abort=True), txn(4)]
    state = _arrow_rows.AbortedTransactions([(7, 0)])
    kept = []
    for block in blocks:
        batch, _, _ = _arrow_rows.batches_to_arrow(
            block, topic="t", partition=0, read_committed=True, aborted_transactions=state
        )
        kept += batch.column("offset").to_pylist()
    assert kept == [4]
    # Per call without the state, the later blocks would not know of the abort.
    assert state.next == 1 and state.active == set()


@needs_cramjam
def test_a_decompressed_budget_stops_the_read_after_the_batch_that_reaches_it(codec):
    # Every batch decompresses to 300 kB; a budget of 500 kB stops after the second.
    batches = [
        codec.write_batch(
            [Record(offset=i, timestamp=1, key=None, value=bytes(300_000))],
            base_offset=i,
            compression="zstd",
        )
        for i in range(5)
    ]
    data = b"".join(batches)
    read = _arrow_rows.batches_to_arrow
    batch, next_offset, tail = read(data, topic="t", partition=0, decompressed_budget=500_000)
    assert batch.column("offset").to_pylist() == [0, 1] and next_offset == 2
    assert bytes(tail) == b"".join(batches[2:])
    batch, next_offset, tail = read(tail, topic="t", partition=0, decompressed_budget=500_000)
    assert batch.column("offset").to_pylist() == [2, 3] and bytes(tail) == batches[4]
    # Without a budget, everything (each batch within its own limit).
    batch, next_offset, tail = read(data, topic="t", partition=0)
    assert batch.num_rows == 5 and next_offset == 5 and tail == b""

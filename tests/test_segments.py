"""fastkwire.read_segments: Kafka log segments written by real clients' batch builders
(kafka-python's MemoryRecordsBuilder, aiokafka's DefaultRecordBatchBuilder) and laid out as
a broker lays them out, read on both record kernels; the rows equal the Fetch path's (the
same bytes in a FetchResponse through the Arrow converter) and kafka-python's own reader's.
Paths and filesystems, cut-off and corrupt segments, transactions, offset ranges."""

import datetime
import os
import pickle
import struct

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")
import pyarrow.fs as pafs  # noqa: E402

import fastkwire  # noqa: E402
from fastkwire import DecodeError, FetchResponse, _arrow_rows, records, segments  # noqa: E402
from fastkwire.records import Record  # noqa: E402
from fastkwire.segments import SegmentError  # noqa: E402

from broker import kafka_broker  # noqa: E402, F401 - a fixture
from record_peers import HAVE_CRAMJAM, needs_aiokafka, needs_cramjam, needs_kafka_python  # noqa: E402

CODEC_ID = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
T0 = 1_700_000_000_000


def key(i):
    return None if i % 7 == 0 else b"key-%d" % i


def value(i):
    return None if i % 11 == 0 else (b"" if i % 13 == 0 else b"value %d " % i * (i % 9))


def headers(i):
    return [("h%d" % (i % 3), None if i % 4 == 0 else b"x%d" % i)] * (i % 3)


@pytest.fixture
def kernel(records_codec, monkeypatch):
    """read_segments over one record kernel (the converter's and the first pass's reads)."""
    monkeypatch.setattr(_arrow_rows, "read_columns", records_codec.read_columns)
    monkeypatch.setattr(records, "read_columns", records_codec.read_columns)
    monkeypatch.setattr(records, "read_batches", records_codec.read_batches)
    return records_codec


# ---------------------------------------------------------------- producers and a broker


def kafka_python_batches(n, codec="none", batch_size=4096):
    """What a kafka-python producer sends: MemoryRecordsBuilder batches, base offset 0."""
    from kafka.record.memory_records import MemoryRecordsBuilder

    out, i = [], 0
    while i < n:
        b = MemoryRecordsBuilder(2, CODEC_ID[codec], batch_size)
        while i < n and b.append(T0 + i, key(i), value(i), headers(i)) is not None:
            i += 1
        b.close()
        out.append(bytes(b.buffer()))
    return out


def aiokafka_batches(n, codec="none", batch_size=4096, producer_id=-1, transactional=False):
    """What an aiokafka producer sends: DefaultRecordBatchBuilder batches, base offset 0."""
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    out, i = [], 0
    while i < n:
        b = DefaultRecordBatchBuilder(
            2,
            CODEC_ID[codec],
            int(transactional),
            producer_id,
            0 if producer_id >= 0 else -1,
            0 if producer_id >= 0 else -1,
            batch_size,
        )
        j = 0
        while i < n and b.append(j, T0 + i, key(i), value(i), headers(i)) is not None:
            i, j = i + 1, j + 1
        out.append(bytes(b.build()))
    return out


def marker(producer_id, abort, coordinator_epoch=5):
    """A transaction marker as the broker writes it: a control batch of one record."""
    data = bytearray(
        records.write_batch(
            [
                Record(
                    key=struct.pack(">hh", 0, 0 if abort else 1),
                    value=struct.pack(">hi", 0, coordinator_epoch),
                )
            ],
            producer_id=producer_id,
            producer_epoch=0,
            is_transactional=True,
        )
    )
    struct.pack_into(">h", data, 21, struct.unpack_from(">h", data, 21)[0] | 0x20)
    struct.pack_into(">I", data, 17, records.crc32c(bytes(data[21:])))
    return bytes(data)


def offset_range(batch):
    """The first and last offsets in one batch (magic 2: its header; legacy: as kafka-python
    reads them)."""
    if batch[16] == 2:
        base = struct.unpack_from(">q", batch)[0]
        return base, base + struct.unpack_from(">i", batch, 23)[0]
    from kafka.record import MemoryRecords

    recs = MemoryRecords(batch)
    offsets = [r.offset for b in iter(recs.next_batch, None) for r in b]
    return min(offsets), max(offsets)


def lay_out(directory, batches, segment_bytes=8 << 10, leader_epoch=3):
    """A partition directory as a broker writes it: each magic 2 batch given the log's next
    offset and the leader's epoch (both outside the CRC), appended to the active segment,
    rolled past `segment_bytes`; segments named by their first offset, with an offset index
    and a time index entry per batch, and the broker's other files beside them. Legacy
    message sets are taken with their offsets. Returns the partition's bytes, in order."""
    os.makedirs(directory, exist_ok=True)
    segments_, next_offset = [], 0
    for batch in batches:
        batch = bytearray(batch)
        if batch[16] == 2:
            struct.pack_into(">q", batch, 0, next_offset)
            struct.pack_into(">i", batch, 12, leader_epoch)
        first, last = offset_range(bytes(batch))
        if not segments_ or len(segments_[-1][1]) + len(batch) > segment_bytes:
            segments_.append((first, bytearray(), [], []))
        base, data, index, timeindex = segments_[-1]
        index.append(struct.pack(">ii", last - base, len(data)))
        timeindex.append(struct.pack(">qi", T0 + last, last - base))
        data += batch
        next_offset = last + 1
    for base, data, index, timeindex in segments_:
        stem = os.path.join(directory, "%020d" % base)
        for ext, content in (
            (".log", data),
            (".index", b"".join(index)),
            (".timeindex", b"".join(timeindex)),
        ):
            with open(stem + ext, "wb") as f:
                f.write(content)
    for name in ("leader-epoch-checkpoint", "partition.metadata", "%020d.snapshot" % next_offset):
        with open(os.path.join(directory, name), "w") as f:
            f.write("0\n")
    return b"".join(bytes(s[1]) for s in segments_)


def log_dir(root):
    """A broker's log directory's own files and directories that are not partitions."""
    for name in ("meta.properties", "recovery-point-offset-checkpoint", ".lock"):
        with open(os.path.join(root, name), "w") as f:
            f.write("version=1\n")
    for name in (
        "__cluster_metadata-0",
        "orders-0.4f1c-delete",
        "orders-1.9e2a-future",
        "__consumer_offsets-7",
    ):
        lay_out(os.path.join(root, name), [records.write_batch([Record(None, 1, b"k", b"v")])])


# ---------------------------------------------------------------- references


def fetch_path_rows(data, topic, partition):
    """The same bytes as a broker's Fetch answer carries them, decoded, then converted."""
    answer = FetchResponse(
        responses=[
            FetchResponse.FetchableTopicResponse(
                topic=topic,
                partitions=[FetchResponse.PartitionData(partition_index=partition, records=data)],
            )
        ]
    )
    decoded = FetchResponse.decode(answer.encode(12), 12)
    part = decoded.responses[0].partitions[0]
    batch, _, tail = _arrow_rows.batches_to_arrow(part.records, topic=topic, partition=partition)
    assert tail == b""
    return pa.Table.from_batches([batch])


def kafka_python_rows(data):
    """kafka-python's reader over the same bytes: (offset, key, value, timestamp, headers)."""
    from kafka.record import MemoryRecords

    recs = MemoryRecords(data)
    out = []
    for batch in iter(recs.next_batch, None):
        if getattr(batch, "is_control_batch", False):
            continue
        out.extend(
            (r.offset, r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in batch
        )
    return out


def aiokafka_rows(data):
    """aiokafka's reader over the same bytes, as kafka_python_rows."""
    from aiokafka.record.memory_records import MemoryRecords

    recs = MemoryRecords(data)
    out = []
    for batch in iter(recs.next_batch, None):
        if batch.is_control_batch:
            continue
        out.extend(
            (r.offset, r.key, r.value, r.timestamp, [tuple(h) for h in r.headers]) for r in batch
        )
    return out


def rows(table):
    return list(
        zip(
            *(
                table.column(c).to_pylist()
                for c in ("offset", "key", "value", "timestamp", "headers")
            )
        )
    )


# ---------------------------------------------------------------- the proof


def _kafka_python_has(codec):
    try:
        import kafka.codec
    except ImportError:
        return False
    return codec == "none" or getattr(kafka.codec, f"has_{codec}")()


@needs_kafka_python
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_kafka_python_segments_read_as_the_fetch_path(kernel, tmp_path, codec):
    if not _kafka_python_has(codec):
        pytest.skip(f"kafka-python has no {codec} codec here (its library is not installed)")
    if codec != "none" and not HAVE_CRAMJAM:
        pytest.skip("reading compressed batches needs cramjam (the compression extra)")
    parts = {
        0: lay_out(tmp_path / "orders-0", kafka_python_batches(400, codec), segment_bytes=2000),
        1: lay_out(tmp_path / "orders-1", kafka_python_batches(150, codec), segment_bytes=2000),
    }
    log_dir(tmp_path)
    assert len(list((tmp_path / "orders-0").glob("*.log"))) >= 3  # rolled
    table = fastkwire.read_segments(tmp_path)
    assert table.schema == _arrow_rows.SCHEMA
    fetched = pa.concat_tables(
        [fetch_path_rows(parts[0], "orders", 0), fetch_path_rows(parts[1], "orders", 1)]
    )
    assert table.equals(fetched)
    assert rows(table.slice(0, 400)) == kafka_python_rows(parts[0])
    assert set(table.column("topic").to_pylist()) == {"orders"}
    assert table.column("partition").to_pylist() == [0] * 400 + [1] * 150
    assert table.column("offset").to_pylist() == list(range(400)) + list(range(150))


@needs_aiokafka
@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_aiokafka_segments_every_codec(kernel, tmp_path, codec):
    data = lay_out(tmp_path / "my-events.v2-12", aiokafka_batches(300, codec))
    table = fastkwire.read_segments(tmp_path / "my-events.v2-12")
    assert table.equals(fetch_path_rows(data, "my-events.v2", 12))
    assert rows(table) == aiokafka_rows(data)
    assert table.num_rows == 300 and table.column("partition")[0].as_py() == 12


@needs_kafka_python
@needs_cramjam  # the gzip wrappers
def test_legacy_message_sets_then_v2(kernel, tmp_path):
    # A log from before Kafka 0.11 (magic 0, then 1, gzip wrappers too) upgraded to v2.
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    batches, offset = [], 0
    for magic, codec in ((0, 0), (0, 1), (1, 0), (1, 1)):
        b = LegacyRecordBatchBuilder(magic, codec, 1 << 20)
        for _ in range(5):
            b.append(
                offset, None if magic == 0 else T0 + offset, key(offset), value(offset) or b"v"
            )
            offset += 1
        batches.append(bytes(b.build()))
    v2 = [bytearray(b) for b in kafka_python_batches(20)]
    for b in v2:  # the broker's next offsets
        struct.pack_into(">q", b, 0, offset)
        offset += struct.unpack_from(">i", b, 23)[0] + 1
    data = lay_out(tmp_path / "old-0", batches + [bytes(b) for b in v2], segment_bytes=400)
    table = fastkwire.read_segments(tmp_path / "old-0")
    assert table.equals(fetch_path_rows(data, "old", 0))
    assert table.column("offset").to_pylist() == list(range(40))
    assert table.column("timestamp_type").to_pylist()[:10] == [0] * 10  # magic 0: none
    # kafka-python says None for a magic 0 message's timestamp; Kafka's consumers say -1.
    theirs = [r[:3] + (-1 if r[3] is None else r[3],) + r[4:] for r in kafka_python_rows(data)]
    assert rows(table) == theirs


def _files(directory):
    return sorted(str(p) for p in directory.glob("*.log"))


@needs_kafka_python
def test_corrupt_segment_names_the_file_and_offset(kernel, tmp_path):
    lay_out(tmp_path / "t-0", kafka_python_batches(300))
    second = _files(tmp_path / "t-0")[1]
    data = bytearray(open(second, "rb").read())
    size = struct.unpack_from(">i", data, 8)[0]
    at = 12 + size  # the second batch of the file
    data[at + 100] ^= 0x01
    open(second, "wb").write(data)
    with pytest.raises(SegmentError) as info:
        fastkwire.read_segments(tmp_path / "t-0")
    e = info.value
    assert isinstance(e, DecodeError) and e.file == second and e.offset == at + 17
    assert str(e).startswith(second + ": CRC32C mismatch") and f"byte offset {at + 17}" in str(e)
    assert pickle.loads(pickle.dumps(e)).file == second
    # The same at a block boundary (a small block): the offset is still the file's.
    with pytest.raises(SegmentError) as info:
        fastkwire.read_segments(tmp_path / "t-0", block_size=1000)
    assert info.value.offset == at + 17
    # Unchecked, the flipped bit is read as it is.
    assert fastkwire.read_segments(tmp_path / "t-0", check_crc=False).num_rows == 300
    # A batch length past what a batch may be: named at its field.
    data[at + 100] ^= 0x01
    struct.pack_into(">i", data, at + 8, 3)
    open(second, "wb").write(data)
    with pytest.raises(SegmentError, match="batch length 3") as info:
        fastkwire.read_segments(tmp_path / "t-0")
    assert info.value.offset == at + 8 and info.value.file == second


@needs_kafka_python
def test_cut_off_batch(kernel, tmp_path):
    lay_out(tmp_path / "t-0", kafka_python_batches(300))
    files = _files(tmp_path / "t-0")
    whole = fastkwire.read_segments(tmp_path / "t-0")
    last = bytearray(open(files[-1], "rb").read())
    first_size = 12 + struct.unpack_from(">i", last, 8)[0]
    # The active segment stops inside its second batch (being written).
    cut = first_size + 30
    open(files[-1], "wb").write(last[:cut])
    with pytest.raises(SegmentError, match='truncated="skip"') as info:
        fastkwire.read_segments(tmp_path / "t-0")
    assert info.value.offset == first_size and info.value.file == files[-1]
    skipped = fastkwire.read_segments(tmp_path / "t-0", truncated="skip")
    kept_until = struct.unpack_from(">q", last, first_size)[0]
    assert skipped.equals(whole.slice(0, kept_until))
    # Fewer than 12 bytes of a header are cut off too.
    open(files[-1], "wb").write(last[: first_size + 5])
    assert fastkwire.read_segments(tmp_path / "t-0", truncated="skip").equals(skipped)
    # A segment that is not the last one cut off is damage, whatever `truncated` says.
    open(files[-1], "wb").write(last)
    first = open(files[0], "rb").read()
    open(files[0], "wb").write(first[:-10])
    with pytest.raises(SegmentError, match="not the last") as info:
        fastkwire.read_segments(tmp_path / "t-0", truncated="skip")
    assert info.value.file == files[0]


@needs_kafka_python
def test_a_batch_larger_than_the_block(kernel, tmp_path):
    lay_out(tmp_path / "t-0", kafka_python_batches(200, batch_size=1000))
    whole = fastkwire.read_segments(tmp_path / "t-0")
    assert fastkwire.read_segments(tmp_path / "t-0", block_size=64).equals(whole)
    blocks = list(fastkwire.iter_segments(tmp_path / "t-0", block_size=2000))
    assert len(blocks) > 4 and all(isinstance(b, pa.RecordBatch) for b in blocks)
    assert pa.Table.from_batches(blocks).equals(whole)


@pytest.mark.parametrize("codec", ["none", pytest.param("gzip", marks=needs_cramjam)])
def test_a_batch_of_megabytes_larger_than_the_block(tmp_path, codec):
    """One batch of 3 MiB between small ones, read with a block of 1 MiB: read whole (the
    block grows to that batch for it), then back to blocks."""
    import random

    def text(i):  # compresses about 2:1, as real records might
        return random.Random(i).randbytes(500).hex().encode()

    small = [Record(value=b"a%d" % i) for i in range(10)]
    big = [Record(value=text(i)) for i in range(3000)]
    batches = [
        records.write_batch(small, base_offset=0),
        records.write_batch(big, base_offset=10, compression=codec),
        records.write_batch(small, base_offset=3010),
    ]
    assert len(batches[1]) > 1 << 20
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(b"".join(batches))
    blocks = list(fastkwire.iter_segments(tmp_path / "t-0", block_size=1 << 20))
    table = pa.Table.from_batches(blocks)
    assert table.column("offset").to_pylist() == list(range(3020))
    assert table.column("value").to_pylist()[10:3010] == [r.value for r in big]
    part = fastkwire.read_segments(tmp_path / "t-0", block_size=1 << 20, start_offset=3000)
    assert part.column("offset").to_pylist() == list(range(3000, 3020))


@needs_kafka_python
@pytest.mark.parametrize(
    "base, message",
    [
        (-(2**63), "a batch of offsets -9223372036854775808 to -9223372036854775806 comes after"),
        (2**63 - 2, "offset out of the int64 range (base offset 9223372036854775806 + 2)"),
    ],
)
def test_a_base_offset_at_the_int64_edge_is_named(kernel, tmp_path, base, message):
    batch = records.write_batch([Record(value=b"x")] * 3, base_offset=0)
    (tmp_path / "t-0").mkdir()
    seg = tmp_path / "t-0" / "00000000000000000000.log"
    seg.write_bytes(struct.pack(">q", base) + batch[8:])
    for kw in ({}, {"start_offset": 1}, {"isolation_level": "read_committed"}):
        with pytest.raises(SegmentError) as info:
            fastkwire.read_segments(tmp_path / "t-0", **kw)
        assert str(seg) in str(info.value) and message in str(info.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_a_fifo_named_as_a_segment_is_refused(tmp_path):
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.log").write_bytes(
        records.write_batch([Record(value=b"x")], base_offset=0)
    )
    fifo = tmp_path / "t-0" / "00000000000000000001.log"
    os.mkfifo(fifo)
    for given in (fifo, tmp_path / "t-0", tmp_path):
        with pytest.raises(ValueError, match=f"{fifo} is not a regular file or a directory"):
            fastkwire.read_segments(given)


def test_paths_uris_and_filesystems(tmp_path):
    lay_out(tmp_path / "logs" / "a-b-0", kafka_python_batches(120))
    lay_out(tmp_path / "logs" / "a-b-1", kafka_python_batches(60))
    log_dir(tmp_path / "logs")
    whole = fastkwire.read_segments(tmp_path / "logs")
    assert whole.num_rows == 180 and set(whole.column("topic").to_pylist()) == {"a-b"}
    p0, p1 = tmp_path / "logs" / "a-b-0", tmp_path / "logs" / "a-b-1"
    # Partition directories, files (in any order, repeated), URIs, a filesystem.
    assert fastkwire.read_segments([str(p0), p1]).equals(whole)
    assert fastkwire.read_segments(_files(p1) + _files(p0)[::-1] + [p0]).equals(whole)
    assert fastkwire.read_segments(f"file://{tmp_path}/logs").equals(whole)
    sub = pafs.SubTreeFileSystem(str(tmp_path / "logs"), pafs.LocalFileSystem())
    assert fastkwire.read_segments(["a-b-0", "a-b-1"], filesystem=sub).equals(whole)
    mem = pafs._MockFileSystem()
    for path in _files(p0) + _files(p1):
        rel = os.path.relpath(path, tmp_path / "logs")
        mem.create_dir(os.path.dirname("bucket/" + rel))
        with mem.open_output_stream("bucket/" + rel) as f:
            f.write(open(path, "rb").read())
    assert fastkwire.read_segments("bucket", filesystem=mem).equals(whole)
    # Partition numbers to read.
    assert fastkwire.read_segments(tmp_path / "logs", partitions=[1]).equals(whole.slice(120))


def test_path_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such"):
        fastkwire.read_segments(tmp_path / "no-such")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match="no partition directories"):
        fastkwire.read_segments(tmp_path / "empty")
    (tmp_path / "loose.log").write_bytes(b"")
    with pytest.raises(ValueError, match="cannot tell the topic and partition"):
        fastkwire.read_segments(tmp_path / "loose.log")
    (tmp_path / "t-0").mkdir()
    (tmp_path / "t-0" / "00000000000000000000.index").write_bytes(b"")
    with pytest.raises(ValueError, match="not a log segment"):
        fastkwire.read_segments(tmp_path / "t-0" / "00000000000000000000.index")
    (tmp_path / "other" / "t-0").mkdir(parents=True)
    with pytest.raises(ValueError, match="two replicas"):
        fastkwire.read_segments([tmp_path / "t-0", tmp_path / "other" / "t-0"])
    # An empty partition directory has no rows (not an error).
    empty = fastkwire.read_segments(tmp_path / "t-0")
    assert empty.num_rows == 0 and empty.schema == _arrow_rows.SCHEMA
    for bad, match in (
        (dict(isolation_level="serializable"), "isolation_level"),
        (dict(truncated="ignore"), "truncated"),
        (dict(start_offset=-1), "start_offset"),
        (dict(end_offset="latest"), "end_offset"),
        (dict(block_size=0), "block_size"),
        (dict(start_offset=5, end_offset=3), "start_offset 5 is after end_offset 3"),
        (
            dict(
                start_offset=datetime.datetime(2026, 2, 1), end_offset=datetime.datetime(2026, 1, 1)
            ),
            "is after end_offset",
        ),
    ):
        with pytest.raises(ValueError, match=match):
            fastkwire.read_segments(tmp_path / "t-0", **bad)


@needs_kafka_python
def test_offset_and_time_ranges(kernel, tmp_path):
    lay_out(tmp_path / "t-0", kafka_python_batches(400))
    whole = fastkwire.read_segments(tmp_path / "t-0")
    plan = segments.plan_segments(tmp_path / "t-0")
    assert len(plan) >= 3
    # A range inside the last segment plans only it (the file names are base offsets).
    start = plan[-1].base_offset + 1
    assert [t.path for t in segments.plan_segments(tmp_path / "t-0", start_offset=start)] == [
        plan[-1].path
    ]
    assert fastkwire.read_segments(tmp_path / "t-0", start_offset=start).equals(whole.slice(start))
    assert [t.path for t in segments.plan_segments(tmp_path / "t-0", end_offset=5)] == [
        plan[0].path
    ]
    assert fastkwire.read_segments(tmp_path / "t-0", start_offset=10, end_offset=250).equals(
        whole.slice(10, 240)
    )
    # Datetimes: the first offset whose timestamp is at or after them (T0 + i here).
    at = datetime.datetime.fromtimestamp((T0 + 123) / 1000, datetime.timezone.utc)
    stop = datetime.datetime.fromtimestamp((T0 + 300) / 1000, datetime.timezone.utc)
    assert fastkwire.read_segments(tmp_path / "t-0", start_offset=at, end_offset=stop).equals(
        whole.slice(123, 177)
    )
    # A naive datetime is UTC; past the last record, nothing.
    late = datetime.datetime(2100, 1, 1)
    assert fastkwire.read_segments(tmp_path / "t-0", start_offset=late).num_rows == 0


@needs_aiokafka
@pytest.mark.parametrize("block_size", [segments.DEFAULT_BLOCK_SIZE, 300])
def test_read_committed_from_the_markers(kernel, tmp_path, block_size):
    def txn(producer_id, n):
        return aiokafka_batches(n, producer_id=producer_id, transactional=True, batch_size=200)

    plain = aiokafka_batches(3, batch_size=200)
    log = (
        txn(7, 4)  # 0-3: producer 7's first transaction ...
        + plain  # 4-6: not transactional
        + txn(8, 2)  # 7-8: producer 8's, committed at 9
        + [marker(8, abort=False)]
        + [marker(7, abort=True)]  # 10: ... aborted
        + plain  # 11-13
        + plain  # 14-16
        + txn(7, 3)  # 17-19: producer 7's next one, in a later segment, committed at 20
        + [marker(7, abort=False)]
        + txn(9, 2)  # 21-22: producer 9's, still open
        + plain  # 23-25
    )
    lay_out(tmp_path / "t-0", log, segment_bytes=400)
    files = _files(tmp_path / "t-0")
    assert len(files) >= 3  # the transactions cross segments
    # The abort marker (10) and producer 7's next transaction (17) are in two segments.
    assert any(10 < int(os.path.basename(f)[:-4]) <= 17 for f in files)
    everything = fastkwire.read_segments(tmp_path / "t-0", block_size=block_size)
    assert everything.column("offset").to_pylist() == [*range(9), *range(11, 20), *range(21, 26)]
    committed = fastkwire.read_segments(
        tmp_path / "t-0", isolation_level="read_committed", block_size=block_size
    )
    # Producer 7's aborted rows are gone, its later committed ones kept; the rows stop at
    # producer 9's open transaction (the last stable offset, 21), as a consumer's would.
    assert committed.column("offset").to_pylist() == [*range(4, 9), *range(11, 20)]
    task = segments.plan_segments(tmp_path / "t-0", isolation_level="read_committed")[0]
    assert task.aborted == ((7, 0, 10),) and task.end_offset == 21
    # Files whose names are not their base offsets (copies renamed in order): the same.
    for i, f in enumerate(files):
        os.rename(f, tmp_path / "t-0" / f"copy-{i}.log")
    renamed = fastkwire.read_segments(
        tmp_path / "t-0", isolation_level="read_committed", block_size=block_size
    )
    assert renamed.equals(committed)
    assert pickle.loads(pickle.dumps(task)).aborted == task.aborted


def test_segment_error_is_a_decode_error():
    e = SegmentError("CRC32C mismatch", 17, "/x/t-0/00000000000000000000.log")
    assert isinstance(e, DecodeError) and e.reason == "CRC32C mismatch" and e.offset == 17
    assert str(e) == "/x/t-0/00000000000000000000.log: CRC32C mismatch at byte offset 17"
    again = pickle.loads(pickle.dumps(e))
    assert (again.reason, again.offset, again.file, str(again)) == (e.reason, 17, e.file, str(e))


def test_partition_directory_names():
    of = segments.partition_of
    assert of("orders-0") == ("orders", 0)
    assert of("my-topic-name-12") == ("my-topic-name", 12)
    assert of("a.b_c-3") == ("a.b_c", 3)
    assert of("orders--1") == ("orders-", 1)  # a topic may end in "-"
    for name in (
        "orders",
        "orders-",
        "-3",
        "orders-x",
        "orders-0.4f1c-delete",
        "orders-1.9e2a-future",
        "orders-2.77aa-stray",
        "orders-٣",
        "lost+found-0",
        "my topic-0",
    ):
        assert of(name) is None, name


def test_every_flipped_byte_and_every_cut(kernel, tmp_path):
    # Bad bytes anywhere: rows, or a SegmentError naming the file; never another error,
    # a hang or a partial table. Cut anywhere: rows up to the cut with truncated="skip".
    d = tmp_path / "t-0"
    d.mkdir()
    recs = [Record(None, T0 + i, key(i), value(i), headers(i)) for i in range(8)]
    data = b"".join(kernel.write_batch(recs[i : i + 4], base_offset=i) for i in (0, 4))
    path = d / "00000000000000000000.log"
    path.write_bytes(data)
    whole = fastkwire.read_segments(d)
    assert whole.num_rows == 8
    ends = [0]
    while ends[-1] < len(data):
        ends.append(ends[-1] + 12 + struct.unpack_from(">i", data, ends[-1] + 8)[0])
    (task,) = segments.plan_segments(d, block_size=100)
    (skipping,) = segments.plan_segments(d, block_size=100, truncated="skip")

    def read(t):
        return pa.Table.from_batches(list(segments.read_task(t)), schema=_arrow_rows.SCHEMA)

    for i in range(len(data)):
        bad = bytearray(data)
        bad[i] ^= 0x41
        path.write_bytes(bad)
        try:
            read(task)
        except SegmentError as e:
            assert e.file == str(path) and 0 <= e.offset <= len(data)
    for cut in range(len(data)):
        path.write_bytes(data[:cut])
        kept = max(e for e in ends if e <= cut)
        assert read(skipping).equals(whole.slice(0, 4 * ends.index(kept)))
        if cut != kept:
            with pytest.raises(SegmentError, match="cut off"):
                read(task)


@needs_kafka_python
def test_a_brokers_partition_batches_as_a_segment_read_as_read_kafka(kafka_broker, tmp_path):  # noqa: F811
    # The batches a real broker stored (Fetch answers' records, as a broker lays them out
    # in its .log files) read from a segment file give what read_kafka gives.
    import kafka

    from fastkwire import FetchRequest, kafka_arrow

    topic = f"segments-{os.getpid()}"
    codecs = (None, "gzip") if HAVE_CRAMJAM else (None,)
    rows = 100 * len(codecs)
    for codec in codecs:
        producer = kafka.KafkaProducer(
            bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=5, compression_type=codec
        )
        for i in range(100):
            producer.send(
                topic,
                key=key(i),
                value=value(i) or b"v",
                headers=[(k, v or b"") for k, v in headers(i)],
                partition=0,
                timestamp_ms=T0 + i,
            )
        producer.flush(30)
        producer.close(30)
    expected = fastkwire.read_kafka(topic, bootstrap_servers=kafka_broker.bootstrap_servers)
    assert expected.num_rows == rows
    conn = kafka_arrow.ClientOptions(kafka_broker.bootstrap_servers).bootstrap()
    log, offset = b"", 0
    try:
        while offset < rows:
            answer = conn.request(
                FetchRequest(
                    replica_id=-1,
                    max_wait_ms=100,
                    min_bytes=1,
                    max_bytes=1 << 20,
                    topics=[
                        FetchRequest.FetchTopic(
                            topic=topic,
                            partitions=[
                                FetchRequest.FetchPartition(
                                    partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
                                )
                            ],
                        )
                    ],
                ),
                min(conn.version_for(FetchRequest, lowest=4), 12),
            )
            data = answer.responses[0].partitions[0].records
            whole = records.read_batches(data)
            assert whole, "the broker answered no whole batch"
            log += data[: len(data) - len(whole.tail)]
            offset = whole[-1].base_offset + whole[-1].last_offset_delta + 1
    finally:
        conn.close()
    (tmp_path / f"{topic}-0").mkdir()
    (tmp_path / f"{topic}-0" / "00000000000000000000.log").write_bytes(log)
    assert fastkwire.read_segments(tmp_path).equals(expected)


@needs_kafka_python
def test_the_offset_index_is_a_checked_hint(kernel, tmp_path):
    d = tmp_path / "t-0"
    lay_out(d, kafka_python_batches(400, batch_size=500), segment_bytes=1 << 20)
    index = d / "00000000000000000000.index"
    whole = fastkwire.read_segments(d)
    (task,) = segments.plan_segments(d, start_offset=300)
    with task.filesystem.open_input_file(task.path) as f:
        at, first = segments._start_position(task, f, task.size)
    assert at > 0 and first <= 300  # a later batch, which starts at or before 300
    assert fastkwire.read_segments(d, start_offset=300).equals(whole.slice(300))
    entries = index.read_bytes()
    # A broker's active index: zeros after the entries it has written.
    index.write_bytes(entries + bytes(800))
    assert segments._start_position(task, _native(task), task.size)[0] == at
    assert fastkwire.read_segments(d, start_offset=300).equals(whole.slice(300))
    # Wrong indexes: a position inside a batch, an offset smaller than the batch there
    # claims, a position past the file. Each is read from the start, rows unchanged.
    rel, pos = struct.unpack_from(">ii", entries, len(entries) - 8)
    for bad in (
        struct.pack(">ii", rel, pos + 3),
        struct.pack(">ii", 1, pos),
        struct.pack(">ii", rel, 1 << 30),
    ):
        index.write_bytes(bad)
        assert segments._start_position(task, _native(task), task.size) == (0, None)
        assert fastkwire.read_segments(d, start_offset=300).equals(whole.slice(300))
    index.unlink()
    assert segments._start_position(task, _native(task), task.size) == (0, None)
    assert fastkwire.read_segments(d, start_offset=300).equals(whole.slice(300))


def _native(task):
    return task.filesystem.open_input_file(task.path)


# ---------------------------------------------------------------- hostile logs


def _plain(base, n, kernel=records):
    return kernel.write_batch(
        [Record(None, T0 + base + i, b"k", b"v%d" % (base + i), []) for i in range(n)],
        base_offset=base,
    )


def test_overlapping_batches_and_segments_are_refused(kernel, tmp_path):
    # One file whose batches go back (0-4, 1000-1001, 5-9): rows outside the range and out
    # of order, before; now an error naming the partition, the offsets and the file.
    d = tmp_path / "t-0"
    d.mkdir()
    path = d / "00000000000000000000.log"
    path.write_bytes(_plain(0, 5) + _plain(1000, 2) + _plain(5, 5))
    for block_size in (64, segments.DEFAULT_BLOCK_SIZE):
        with pytest.raises(
            SegmentError, match="t-0: a batch of offsets 5 to 9 comes after offset 1001"
        ) as e:
            fastkwire.read_segments(d, start_offset=2, end_offset=8, block_size=block_size)
        assert e.value.file == str(path) and e.value.offset == len(_plain(0, 5) + _plain(1000, 2))
    # Two segments that overlap (0-9, and one named 5 holding 5-14): rows 5-9 twice, before.
    path.write_bytes(_plain(0, 10))
    (d / "00000000000000000005.log").write_bytes(_plain(5, 10))
    with pytest.raises(
        SegmentError, match="reaches the next segment, which starts at offset 5"
    ) as e:
        fastkwire.read_segments(d, start_offset=2, end_offset=12)
    assert e.value.file == str(path)
    # A segment holding offsets before its own name.
    path.write_bytes(_plain(0, 5))
    (d / "00000000000000000005.log").write_bytes(_plain(3, 10))
    with pytest.raises(SegmentError, match="offsets 3 to 12 comes after offset 4") as e:
        fastkwire.read_segments(d)
    assert e.value.file == str(d / "00000000000000000005.log")
    # Each segment's task is checked on its own (a distributed reader reads them apart).
    tasks = segments.plan_segments(d)
    assert [t.next_base_offset for t in tasks] == [5, None]
    with pytest.raises(SegmentError):
        list(segments.read_task(tasks[1]))


def test_zero_filled_tail_ends_the_last_segment_under_skip(kernel, tmp_path):
    # log.preallocate (or a crash) leaves the active segment zeros past its last batch:
    # Kafka's recovery cuts it there, and so does truncated="skip".
    d = tmp_path / "t-0"
    d.mkdir()
    data = _plain(0, 5) + _plain(5, 5)
    path = d / "00000000000000000000.log"
    path.write_bytes(data)
    whole = fastkwire.read_segments(d)
    for zeros in (5, 12, 61, 4096):
        path.write_bytes(data + bytes(zeros))
        for block_size in (64, 100, segments.DEFAULT_BLOCK_SIZE):
            got = fastkwire.read_segments(d, truncated="skip", block_size=block_size)
            assert got.equals(whole), (zeros, block_size)
            with pytest.raises(SegmentError, match='truncated="skip"') as e:
                fastkwire.read_segments(d, block_size=block_size)
            assert e.value.offset == len(data) and e.value.file == str(path)
            if zeros >= 12:
                assert "zeros from here to its end" in str(e.value)
    # A batch being written when the crash came: its first bytes, then zeros.
    first = _plain(0, 5)
    for written in (12, 30, len(data) - len(first) - 2):  # (its last byte is a zero)
        path.write_bytes(data[: len(first) + written] + bytes(4096))
        got = fastkwire.read_segments(d, truncated="skip", block_size=100)
        assert got.equals(whole.slice(0, 5)), written
        with pytest.raises(SegmentError, match="holds a batch that does not read") as e:
            fastkwire.read_segments(d)
        assert e.value.offset == len(first)
    # A damaged last batch with no zeros after it is damage, not a torn write.
    bad = bytearray(data)
    bad[-3] ^= 1
    path.write_bytes(bytes(bad))
    with pytest.raises(SegmentError, match="CRC32C"):
        fastkwire.read_segments(d, truncated="skip")
    # Zeros with a batch after them are damage, not a tail.
    path.write_bytes(data + bytes(100) + _plain(10, 2))
    with pytest.raises(SegmentError, match="batch length 0"):
        fastkwire.read_segments(d, truncated="skip")
    # A zero-filled segment that is not the last is damage whatever `truncated` says.
    path.write_bytes(data + bytes(100))
    (d / "00000000000000000010.log").write_bytes(_plain(10, 2))
    with pytest.raises(SegmentError, match="not the last is zeros") as e:
        fastkwire.read_segments(d, truncated="skip")
    assert e.value.offset == len(data)


@needs_cramjam
def test_a_block_decompresses_to_about_a_block(kernel, tmp_path, monkeypatch):
    # 300 batches of 1 MB of zeros, zstd: a 35 kB segment that decompresses to 300 MB.
    # Read with 2 MiB blocks, no block may decompress past the block and one batch.
    d = tmp_path / "t-0"
    d.mkdir()
    one = kernel.write_batch([Record(None, T0, None, bytes(1_000_000), [])], compression="zstd")
    (d / "00000000000000000000.log").write_bytes(
        b"".join(struct.pack(">q", i) + one[8:] for i in range(300))
    )
    from fastkwire import _compression

    decompress = _compression.decompress
    spent = [0]
    per_block = []

    def counted(*args):
        out = decompress(*args)
        spent[0] += len(out)
        return out

    convert = _arrow_rows.batches_to_arrow

    def one_block(*args, **kwargs):
        spent[0] = 0
        try:
            return convert(*args, **kwargs)
        finally:
            per_block.append(spent[0])

    monkeypatch.setattr(_compression, "decompress", counted)
    monkeypatch.setattr(_arrow_rows, "batches_to_arrow", one_block)
    block = 2 << 20
    rows = 0
    for batch in fastkwire.iter_segments(d, block_size=block):
        rows += batch.num_rows
        assert batch.nbytes < block + 2_000_000
    assert rows == 300
    each = sum(per_block) // 300  # a batch's records, decompressed (1 MB and their framing)
    assert sum(per_block) == 300 * each and 1_000_000 < each < 1_000_100
    assert max(per_block) <= block + each


def test_cut_off_advice_names_the_flag_in_dump(tmp_path, capsys):
    d = tmp_path / "t-0"
    d.mkdir()
    data = _plain(0, 5) + _plain(5, 5)
    (d / "00000000000000000000.log").write_bytes(data[:-7])
    from fastkwire.cli import main

    assert main(["dump", "--segments", str(d), "--to", str(tmp_path / "o.jsonl")]) == 3
    err = capsys.readouterr().err
    assert "(pass --truncated skip to read up to it)" in err and "truncated=" not in err
    with pytest.raises(SegmentError, match=r'\(pass truncated="skip" to read up to it\)'):
        fastkwire.read_segments(d)


def test_without_pyarrow_read_segments_names_the_extra(tmp_path):
    from test_optional_extras import missing

    got = missing(["pyarrow"], "import fastkwire\n", f"fastkwire.read_segments({str(tmp_path)!r})")
    assert got == [
        "ImportError",
        "fastkwire.segments needs pyarrow and numpy (no pyarrow): pip install 'fastkwire[arrow]'",
    ]


def test_read_committed_needs_every_marker_so_a_cut_anywhere_counts(kernel, tmp_path):
    # Producer 7's transaction (2-3) is committed by a marker in the last segment, which a
    # crash cut off. read_committed sees it open, so the rows stop at 2, before that
    # segment: the cut must still be an error unless truncated="skip" says otherwise.
    d = tmp_path / "t-0"
    d.mkdir()
    txn = bytearray(_plain(2, 2))
    struct.pack_into(">h", txn, 21, 0x10)  # transactional, producer 7
    struct.pack_into(">q", txn, 43, 7)
    struct.pack_into(">I", txn, 17, records.crc32c(bytes(txn[21:])))
    (d / "00000000000000000000.log").write_bytes(_plain(0, 2) + bytes(txn))
    commit = bytearray(marker(7, abort=False))
    struct.pack_into(">q", commit, 0, 4)
    (d / "00000000000000000004.log").write_bytes(bytes(commit) + _plain(5, 3)[:-9])
    with pytest.raises(SegmentError, match="read_committed needs every transaction marker") as e:
        fastkwire.read_segments(d, isolation_level="read_committed")
    assert e.value.file == str(d / "00000000000000000004.log")
    got = fastkwire.read_segments(d, isolation_level="read_committed", truncated="skip")
    assert got.column("offset").to_pylist() == [0, 1, 2, 3]

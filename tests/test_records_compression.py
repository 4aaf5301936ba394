"""Compressed record batches and legacy message sets (magic 0 and 1), on both kernels."""

import functools
import struct
import tracemalloc
import zlib

import pytest

from fastkwire import DecodeError, _compression
from fastkwire.records import Record, default_limit

pytest.importorskip("cramjam", reason="cramjam (the compression extra) is not installed")
pytest.importorskip("kafka", reason="kafka-python (the peer of these tests) is not installed")

from record_peers import (
    AioBatch,
    AioBuilder,
    AioLegacyBuilder,
    KpBatch,
    KpBuilder,  # noqa: E402
    KpLegacyBuilder,
    LEGACY,
    aio_codec,
    legacy as _legacy,
    needs_aiokafka,
)
from kafka import codec as kp_codec  # noqa: E402
from test_records import make_batch  # noqa: E402

CODECS = ["gzip", "snappy", "lz4", "zstd"]
CODEC_ID = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
RECORDS = [
    Record(
        i,
        1_600_000_000_000 + i * 7,
        b"key-%d" % i if i % 3 else None,
        b"value " * (i % 50) if i % 5 else None,
        [("n", b"%d" % i)] if i % 2 else [],
    )
    for i in range(300)
]


def _peer(batch):
    return [Record(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


@pytest.mark.parametrize("codec", CODECS)
def test_round_trip(records_codec, codec):
    data = records_codec.write_batch(RECORDS, compression=codec)
    assert len(data) < len(records_codec.write_batch(RECORDS)) // 2
    (batch,) = records_codec.read_batches(data)
    assert batch.compression == codec and batch.records == RECORDS
    assert records_codec.read_columns(data).to_records() == RECORDS


@needs_aiokafka
@pytest.mark.parametrize("codec", CODECS)
def test_aiokafka_writes_we_read(records_codec, codec):
    b = AioBuilder(2, CODEC_ID[codec], 0, -1, -1, -1, 1 << 22)
    for r in RECORDS:
        b.append(r.offset, r.timestamp, r.key, r.value, r.headers)
    (batch,) = records_codec.read_batches(bytes(b.build()))
    assert batch.compression == codec and batch.records == RECORDS


@needs_aiokafka
@pytest.mark.parametrize("codec", CODECS)
def test_peers_read_what_we_compress(records_codec, codec):
    data = records_codec.write_batch(RECORDS, compression=codec)
    assert _peer(AioBatch(data)) == RECORDS
    has = {
        "gzip": kp_codec.has_gzip,
        "snappy": kp_codec.has_snappy,
        "lz4": kp_codec.has_lz4,
        "zstd": kp_codec.has_zstd,
    }[codec]
    if has():  # kafka-python needs python-snappy, lz4 or zstandard for the others
        assert _peer(KpBatch(data)) == RECORDS
    if codec == "gzip":
        b = KpBuilder(2, 1, 0, -1, -1, -1, 1 << 22)
        for r in RECORDS:
            b.append(r.offset, r.timestamp, r.key, r.value, r.headers)
        assert records_codec.read_batches(bytes(b.build()))[0].records == RECORDS


@needs_aiokafka
def test_raw_snappy(records_codec):
    # librdkafka and others may send snappy without the xerial framing.
    plain = records_codec.write_batch(RECORDS)
    body = aio_codec.snappy_encode(plain[61:], xerial_compatible=False)
    data = make_batch(body, len(RECORDS), attrs=2, base_ts=struct.unpack_from(">q", plain, 27)[0])
    assert records_codec.read_batches(data)[0].records == RECORDS


def test_legacy_lz4_header_checksum(records_codec):
    """Kafka 0.8-0.9 wrote the lz4 frame header checksum over the magic number too."""
    plain = records_codec.write_batch(RECORDS)
    frame = _compression.compress("lz4", plain[61:])
    end = 6 + (8 if frame[4] & 0x08 else 0)
    assert frame[end] == (_compression.xxh32(frame[4:end]) >> 8) & 0xFF  # the right one
    broken = frame[:end] + bytes([(_compression.xxh32(frame[:end]) >> 8) & 0xFF]) + frame[end + 1 :]
    data = make_batch(broken, len(RECORDS), attrs=3, base_ts=struct.unpack_from(">q", plain, 27)[0])
    assert records_codec.read_batches(data)[0].records == RECORDS


@functools.lru_cache(maxsize=None)
def _bomb(codec, size):
    return _compression.compress(codec, bytes(size))


@pytest.mark.parametrize("codec", CODECS)
def test_decompression_bomb(records_codec, codec):
    body = _bomb(codec, 16 << 20)  # 16 MiB of zeros
    data = make_batch(body, 1, attrs=CODEC_ID[codec])
    limit = default_limit(len(body))
    tracemalloc.start()
    try:
        if codec != "snappy":  # snappy never expands past about 21x: the default never trips
            assert limit < 16 << 20
            with pytest.raises(DecodeError, match=f"exceed max_decompressed \\({limit} bytes"):
                records_codec.read_batches(data, check_crc=False)  # the default: 64x, >= 1 MiB
        with pytest.raises(DecodeError, match=r"exceed max_decompressed \(100000 bytes\)"):
            records_codec.read_batches(data, check_crc=False, max_decompressed=100_000)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < limit + (2 << 20), peak  # about the limit, never the 16 MiB


def test_snappy_length_that_lies(records_codec):
    # A raw snappy block whose preamble claims 2 GiB: refused before anything is made.
    data = make_batch(b"\xfe\xff\xff\xff\x07\x00", 1, attrs=2)
    with pytest.raises(DecodeError, match="exceed max_decompressed"):
        records_codec.read_batches(data)


@pytest.mark.parametrize("codec", CODECS)
def test_corrupt_compressed(records_codec, codec):
    body = bytearray(_compression.compress(codec, records_codec.write_batch(RECORDS)[61:]))
    body[len(body) // 2 :] = b"\xaa" * (len(body) - len(body) // 2)
    with pytest.raises(DecodeError) as e:
        records_codec.read_batches(make_batch(bytes(body), len(RECORDS), attrs=CODEC_ID[codec]))
    assert 61 <= e.value.offset < 61 + len(body)


def test_count_past_decompressed_limit(records_codec):
    data = make_batch(_compression.compress("gzip", b"x"), 10**8, attrs=1)
    with pytest.raises(DecodeError, match="count 100000000 exceeds what max_decompressed"):
        records_codec.read_batches(data)


def test_decompressed_records_errors_say_where(records_codec):
    body = _compression.compress("zstd", b"\x02\x00")  # a record of length 1
    with pytest.raises(DecodeError, match="of the decompressed records") as e:
        records_codec.read_batches(make_batch(body, 0, attrs=4))
    assert e.value.offset == 61


# ---------------------------------------------------------------- legacy message sets


def _expect(magic, items=LEGACY):
    return [Record(o, t if magic else -1, k, v, []) for o, t, k, v in items]


# aiokafka writes no lz4 for magic 0: test_legacy_magic0_lz4 makes one by hand.
@pytest.mark.parametrize(
    "builder, magic, codec",
    [
        pytest.param(b, m, c, marks=[needs_aiokafka] if b is AioLegacyBuilder else [])
        for b, c in [
            (KpLegacyBuilder, 0),
            (KpLegacyBuilder, 1),
            (AioLegacyBuilder, 2),
            (AioLegacyBuilder, 3),
        ]
        for m in (0, 1)
        if (m, c) != (0, 3)
    ],
)
def test_legacy_message_sets(records_codec, builder, magic, codec):
    data = _legacy(builder, magic, codec)
    batches = records_codec.read_batches(data)
    assert [r for b in batches for r in b.records] == _expect(magic)
    assert {b.magic for b in batches} == {magic}
    assert len(batches) == (len(LEGACY) if codec == 0 else 1)
    if codec:
        (wrapper,) = batches
        assert wrapper.compression == _compression.CODECS[codec]
        assert wrapper.base_offset == 0 and wrapper.last_offset_delta == 38
    assert records_codec.read_columns(data).to_records() == _expect(magic)


def test_legacy_then_tail(records_codec):
    data = _legacy(KpLegacyBuilder, 1, 0)
    got = records_codec.read_batches(data + data[:20])
    assert len(got) == len(LEGACY) and got.tail == data[:20]


def test_legacy_crc32(records_codec):
    data = bytearray(_legacy(KpLegacyBuilder, 1, 1))
    data[-1] ^= 0xFF
    with pytest.raises(DecodeError, match="CRC32 mismatch") as e:
        records_codec.read_batches(bytes(data))
    assert e.value.offset == 12
    with pytest.raises(DecodeError, match="corrupt gzip|decompressed"):
        records_codec.read_batches(bytes(data), check_crc=False)


def _message(magic, attrs, key, value, offset=0, ts=0):
    body = struct.pack(">bb", magic, attrs) + (struct.pack(">q", ts) if magic else b"")
    for v in (key, value):
        body += struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


@pytest.mark.parametrize(
    "data, reason",
    [
        (_message(1, 0, None, b"x")[:-5] + b"\xff\xff\xff\xfe" + b"x", "CRC32 mismatch"),
        (_message(1, 1, None, zlib.compress(b"")), "corrupt gzip"),
        (_message(1, 1, None, None), "compressed message without a value"),
        (_message(0, 4, None, b"x"), "unknown compression 4 for magic 0"),
        (
            _message(1, 1, None, _compression.compress("gzip", _message(1, 1, None, b"x"))),
            "a compressed message inside a compressed message",
        ),
        (
            _message(1, 1, None, _compression.compress("gzip", _message(0, 0, None, b"x"))),
            "magic 0 inside a magic 1 wrapper",
        ),
        (_message(1, 1, None, _compression.compress("gzip", b"")), "holds no messages"),
        (
            _message(1, 1, None, _compression.compress("gzip", _message(1, 0, None, b"x")[:-1])),
            "message size .* exceeds",
        ),
    ],
)
def test_hostile_legacy(records_codec, data, reason):
    with pytest.raises(DecodeError, match=reason):
        records_codec.read_batches(data)


def test_legacy_log_append_time(records_codec):
    inner = b"".join(_message(1, 0, None, b"v%d" % i, offset=i, ts=5) for i in range(3))
    data = _message(1, 1 | 8, None, _compression.compress("gzip", inner), offset=102, ts=999)
    (batch,) = records_codec.read_batches(data)
    assert batch.timestamp_type == 1
    assert [(r.offset, r.timestamp) for r in batch.records] == [(100, 999), (101, 999), (102, 999)]


def test_legacy_magic0_lz4(records_codec):
    """Magic 0 lz4, as Kafka 0.8-0.9 wrote it: the header checksum over the magic too."""
    inner = b"".join(_message(0, 0, b"k", b"v%d" % i, offset=7 + i) for i in range(3))
    frame = _compression.compress("lz4", inner)
    end = 6 + (8 if frame[4] & 0x08 else 0)
    broken = frame[:end] + bytes([(_compression.xxh32(frame[:end]) >> 8) & 0xFF]) + frame[end + 1 :]
    (batch,) = records_codec.read_batches(_message(0, 3, None, broken, offset=9))
    assert batch.compression == "lz4"
    assert batch.records == [Record(7 + i, -1, b"k", b"v%d" % i, []) for i in range(3)]

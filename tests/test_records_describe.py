"""records.describe: the byte layout of batches, for explain."""

import random

import pytest

from fastkwire import DecodeError
from fastkwire.records import Record, describe, write_batch

from record_peers import KpLegacyBuilder, legacy as _legacy, needs_cramjam, needs_kafka_python

RECS = [Record(0, 10, b"key", None, [("h", b"v"), ("n", None)]), Record(1, 12, None, b"val", [])]


def _contiguous(nodes, start, end):
    """The nodes tile [start, end) in order."""
    pos = start
    for n in nodes:
        assert n.offset == pos, n
        pos += n.size
    assert pos == end


def test_v2_batch_layout():
    data = write_batch(RECS, base_offset=7)
    (batch,) = describe(data + data[:20])[:1]
    assert (batch.name, batch.offset, batch.size) == ("batch", 0, len(data))
    assert batch.value == "magic 2, 2 records, none"
    names = [n.name for n in batch.children]
    assert names[:4] == ["base_offset", "batch_length", "partition_leader_epoch", "magic"]
    assert names[-1] == "records"
    _contiguous(batch.children, 0, len(data))
    fields = {n.name: n.value for n in batch.children}
    assert fields["base_offset"] == 7 and fields["record_count"] == 2 and fields["magic"] == 2
    records = batch.children[-1]
    _contiguous(records.children, records.offset, len(data))
    first = records.children[0]
    _contiguous(first.children, first.offset, first.offset + first.size)
    by_name = {n.name: n for n in first.children}
    key = by_name["key"]
    assert data[key.offset : key.offset + key.size] == b"key" == key.value
    assert by_name["value_length"].value == -1 and "value" not in by_name
    header = by_name["header[0]"]
    assert [(n.name, n.value) for n in header.children] == [
        ("key_length", 1),
        ("key", "h"),
        ("value_length", 1),
        ("value", b"v"),
    ]
    tail = describe(data + data[:20])[-1]
    assert (tail.name, tail.offset, tail.size) == ("tail", len(data), 20)


@needs_cramjam
def test_compressed_batch_layout():
    data = write_batch(RECS, compression="gzip")
    records = describe(data)[0].children[-1]
    assert records.value.startswith("gzip: 2 records in ")
    assert records.children[0].offset == 0  # counted in the decompressed bytes
    assert [n.value for n in records.children[1].children if n.name == "value"] == [b"val"]


def test_crc_mismatch_is_shown():
    data = bytearray(write_batch(RECS))
    data[-2] ^= 1  # a byte of the last value
    assert describe(bytes(data))[0].value.endswith("CRC mismatch")


@needs_cramjam
@needs_kafka_python
def test_legacy_layout():
    data = _legacy(KpLegacyBuilder, 1, 1)  # one gzip wrapper of 20 messages
    (message,) = describe(data)
    assert message.name == "message" and message.value == "magic 1"
    value = message.children[-1]
    assert value.value.startswith("gzip: messages in")
    assert len(value.children) == 20 and value.children[0].children[-1].name in (
        "value",
        "value_length",
    )


def test_bad_input():
    data = write_batch(RECS)
    with pytest.raises(DecodeError, match="unknown magic 9"):
        describe(data[:16] + b"\x09" + data[17:])
    with pytest.raises(DecodeError, match="invalid batch length -2"):
        describe(data[:8] + b"\xff\xff\xff\xfe" + data[12:])
    short = bytes(8) + (5).to_bytes(4, "big") + bytes(4) + b"\x01"  # a legacy message of 5 bytes
    with pytest.raises(DecodeError, match="message size 5 is shorter than a magic 1 message"):
        describe(short)


@needs_cramjam
@needs_kafka_python
def test_describe_never_raises_anything_but_decode_errors():
    import random

    rng = random.Random(7)
    seeds = [
        write_batch(RECS),
        write_batch(RECS, compression="zstd"),
        _legacy(KpLegacyBuilder, 1, 1),
        _legacy(KpLegacyBuilder, 0, 0),
    ]
    for _ in range(400):
        d = bytearray(rng.choice(seeds))
        for _ in range(rng.randrange(1, 4)):
            i = rng.randrange(len(d))
            if rng.random() < 0.2:
                del d[i:]
                break
            d[i] = rng.randrange(256)
        try:
            describe(bytes(d), max_decompressed=1 << 16)
        except DecodeError:
            pass


def test_max_records_stands_one_node_for_the_rest():
    recs = [Record(i, 10 + i, b"k", b"v" * i, []) for i in range(6)]
    data = write_batch(recs)
    full = describe(data)[0].children[-1].children
    cut = describe(data, max_records=2)[0].children[-1].children
    assert cut[:2] == full[:2]
    assert (cut[2].name, cut[2].value) == ("record[2..5]", 4)
    _contiguous(cut, full[0].offset, full[-1].offset + full[-1].size)
    assert describe(data, max_records=0)[0].children[-1].children[0].value == 6


def test_each_record_says_its_absolute_offset_and_timestamp():
    from fastkwire.records import read_batches

    data = write_batch(
        [Record(7 + i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(RECS)],
        base_offset=7,
    )
    recs = describe(data)[0].children[-1].children
    assert [r.value for r in recs] == ["offset 7, timestamp 10", "offset 8, timestamp 12"]
    assert [(r.offset, r.timestamp) for r in read_batches(data)[0].records] == [(7, 10), (8, 12)]


def test_log_append_time_records_show_the_batch_timestamp():
    from fastkwire.records import read_batches

    data = write_batch(RECS, timestamp_type=1)
    recs = describe(data)[0].children[-1].children
    read = read_batches(data)[0].records
    assert [r.value for r in recs] == [f"offset {r.offset}, timestamp {r.timestamp}" for r in read]
    assert {r.timestamp for r in read} == {12}


def _error(fn):
    try:
        fn()
    except DecodeError as e:
        return e.reason, e.offset
    return None


@pytest.mark.parametrize("seed", range(4))
def test_describe_and_read_batches_agree_on_mutated_batches(seed):
    """describe observes read_batches' own reading: on any bytes, both raise the same
    DecodeError at the same offset, or neither does. (Its own reader once said "invalid
    record length 63" where read_batches said "exceeds the 8 bytes left".)"""
    from fastkwire.records import read_batches
    from test_records_differential import _mutations, _seeds

    seeds = _seeds()
    if seed >= len(seeds):
        pytest.skip("the compressed seeds need cramjam")
    rng = random.Random(seed)
    for mutated in _mutations(seeds[seed], rng, 300):
        expect = _error(lambda: read_batches(mutated, check_crc=False, max_decompressed=1 << 16))
        assert _error(lambda: describe(mutated, max_decompressed=1 << 16)) == expect, mutated.hex()


@needs_cramjam
@needs_kafka_python
def test_describe_and_read_batches_agree_on_mutated_legacy_sets():
    from fastkwire.records import read_batches

    rng = random.Random(7)
    for data in (_legacy(KpLegacyBuilder, 1, 1), _legacy(KpLegacyBuilder, 0, 0)):
        for i in range(300):
            d = bytearray(data)
            d[rng.randrange(len(d))] ^= 1 << rng.randrange(8)
            d = bytes(d[: rng.randrange(len(d) + 1)]) if i % 5 == 0 else bytes(d)
            expect = _error(lambda: read_batches(d, check_crc=False))
            assert _error(lambda: describe(d)) == expect, d.hex()

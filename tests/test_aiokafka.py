"""fastkwire.aiokafka: aiokafka with and without the accelerator gives the same objects,
values, offsets and exceptions; install() patches all or nothing and uninstall() restores
every attribute it replaced (by identity).

Batches come from aiokafka's own builders (v2 with every codec it has here, legacy magic
0/1), plus control batches, transactions, LOG_APPEND_TIME and seeded hostile mutations,
read through both of aiokafka's record implementations (its C one and its Python one).
aiokafka's full suite runs with the plugin in tools/aiokafka_suite.sh.
"""

import asyncio
import importlib
import io
import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from accelerated import accel_fixture
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

aiokafka = pytest.importorskip("aiokafka")

from aiokafka import codec as acodec  # noqa: E402
from aiokafka import partitioner as apartitioner  # noqa: E402
from aiokafka.consumer import fetcher as afetcher  # noqa: E402
from aiokafka.errors import CorruptRecordException  # noqa: E402
from aiokafka.record import default_records as adr  # noqa: E402
from aiokafka.record import legacy_records as alr  # noqa: E402
from aiokafka.record import memory_records as amr  # noqa: E402
from aiokafka.record.util import calc_crc32c  # noqa: E402
from aiokafka.consumer.subscription_state import SubscriptionState  # noqa: E402
from aiokafka.structs import PartitionMetadata, TopicPartition  # noqa: E402

import fastkwire  # noqa: E402
import fastkwire.aiokafka as fka  # noqa: E402

PURE = os.environ.get("FASTKWIRE_PURE", "") not in ("", "0") or fastkwire.implementation != "cython"
SUPPORTED_HERE = aiokafka.__version__ in fka.SUPPORTED
needs_accel = pytest.mark.skipif(
    PURE or not SUPPORTED_HERE,
    reason="the accelerator declines here (pure fastkwire or untested aiokafka)",
)

TP = TopicPartition("topic", 3)
CODECS = [0] + [
    c
    for c, has in (
        (1, acodec.has_gzip),
        (2, acodec.has_snappy),
        (3, acodec.has_lz4),
        (4, acodec.has_zstd),
    )
    if has()
]
STOCK_MURMUR2 = apartitioner.murmur2


accel = accel_fixture(fka)  # accel(fn): (stock outcome, accelerated outcome)


# ---- batches -------------------------------------------------------------------------


def sample_records(rng, n):
    """(key, value, headers) with None keys and values, empty ones and headers."""
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else rng.randbytes(rng.choice((0, 3, 12)))
        value = None if i % 7 == 3 else rng.randbytes(rng.choice((0, 1, 100)))
        headers = [] if i % 3 else [("h", b"v"), ("é", None), ("", b"")][: i % 4]
        out.append((key, value, headers))
    return out


def v2_batch(records, compression=0, offset=0, transactional=False, producer_id=-1, ts=None):
    builder = adr.DefaultRecordBatchBuilder(
        2, compression, int(transactional), producer_id, 0 if producer_id >= 0 else -1, 0, 1 << 20
    )
    for i, (key, value, headers) in enumerate(records):
        builder.append(
            i, timestamp=(ts or 1_700_000_000_000) + i, key=key, value=value, headers=headers
        )
    data = bytearray(builder.build())
    struct.pack_into(">q", data, 0, offset)
    return bytes(data)


def legacy_batch(records, magic, compression=0, offset=0):
    builder = alr.LegacyRecordBatchBuilder(magic, compression, 1 << 20)
    for i, (key, value, _) in enumerate(records):
        builder.append(i, timestamp=1_700_000_000_000 + i if magic else None, key=key, value=value)
    data = bytearray(builder.build())
    if compression == 0:  # each message of an uncompressed set carries its own offset
        pos = 0
        while pos < len(data):
            struct.pack_into(">q", data, pos, offset + struct.unpack_from(">q", data, pos)[0])
            pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    else:
        struct.pack_into(">q", data, 0, offset + len(records) - 1)
    return bytes(data)


def with_attributes(data, set_bits, base_offset=None):
    """A v2 batch with attribute bits set (and its CRC made right again)."""
    buf = bytearray(data)
    attrs = struct.unpack_from(">h", buf, 21)[0] | set_bits
    struct.pack_into(">h", buf, 21, attrs)
    if base_offset is not None:
        struct.pack_into(">q", buf, 0, base_offset)
    struct.pack_into(">I", buf, 17, calc_crc32c(bytes(buf[21:])))
    return bytes(buf)


def control_batch(offset, kind, producer_id=7):
    """A transaction marker: kind 0 aborts, 1 commits."""
    data = v2_batch(
        [(struct.pack(">hh", 0, kind), b"\x00\x00\x00\x00\x00\x00", [])],
        producer_id=producer_id,
        transactional=True,
    )
    return with_attributes(data, 0x20, base_offset=offset)


def batch_sets():
    rng = random.Random(7)
    sets = {}
    for codec in CODECS:
        sets[f"v2 codec {codec}"] = v2_batch(sample_records(rng, 40), codec)
    sets["several batches"] = b"".join(
        v2_batch(sample_records(rng, n), CODECS[i % len(CODECS)], offset=off)
        for i, (n, off) in enumerate(((5, 0), (1, 5), (30, 6), (2, 36)))
    )
    sets["log append time"] = with_attributes(v2_batch(sample_records(rng, 9)), 0x08)
    for magic in (0, 1):
        for codec in CODECS[:2]:
            sets[f"legacy magic {magic} codec {codec}"] = legacy_batch(
                sample_records(rng, 12), magic, codec
            )
    recs = sample_records(rng, 4)
    sets["transactional, aborted and committed"] = b"".join(
        (
            v2_batch(recs, offset=0, transactional=True, producer_id=7),
            v2_batch(recs, offset=4, transactional=True, producer_id=8),
            control_batch(8, 0, producer_id=7),  # aborts producer 7's
            v2_batch(recs, offset=9, transactional=True, producer_id=7),
            control_batch(13, 1, producer_id=8),  # commits producer 8's
            control_batch(14, 1, producer_id=7),
        )
    )
    sets["a truncated last batch"] = sets["several batches"][:-17]
    sets["empty"] = b""
    return sets


BATCHES = batch_sets()
ABORTED = [(7, 0)]  # (producer id, first offset): what the broker sends for the set above


def consumer_records(
    data,
    records_class=None,
    fetch_offset=0,
    chunk=None,
    check_crcs=True,
    isolation=afetcher.READ_UNCOMMITTED,
    aborted=None,
    key_deserializer=None,
    value_deserializer=None,
):
    """fn(got): a PartitionRecords over data, drained as FetchResult.getall drains it
    (chunk records at a time), with next_fetch_offset after each step."""

    def fn(got):
        records = (records_class or amr.MemoryRecords)(data)
        pr = afetcher.PartitionRecords(
            TP,
            records,
            aborted,
            fetch_offset,
            key_deserializer,
            value_deserializer,
            check_crcs,
            isolation,
        )
        while True:
            taken = []
            for msg in pr:
                taken.append(msg)
                if chunk is not None and len(taken) >= chunk:
                    break
            got.append((taken, pr.next_fetch_offset))
            if not taken:
                break

    return fn


READERS = {"C records": amr.MemoryRecords, "Python records": amr._MemoryRecordsPy}


@needs_accel
@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize("name", sorted(BATCHES))
@pytest.mark.parametrize("chunk", [None, 1, 7])
def test_fetcher_consumer_records_equal(accel, name, reader, chunk):
    stock, fast = accel(consumer_records(BATCHES[name], READERS[reader], chunk=chunk))
    assert stock == fast
    if name != "empty":
        assert stock[0][0][0]  # records were read


@needs_accel
def test_fetcher_takes_the_compiled_loop_and_gives_aiokafkas_records(accel):
    from fastkwire import _aiokafka
    from aiokafka.structs import ConsumerRecord

    before = _aiokafka.fast_loops()
    stock, fast = accel(consumer_records(BATCHES["v2 codec 0"]))
    assert _aiokafka.fast_loops() == before + 1
    # aiokafka's C records are read through their getters, its Python ones by name
    assert _aiokafka.record_class() is adr.DefaultRecord
    assert adr.DefaultRecord.__module__ == "aiokafka.record._crecords.default_records"
    records = fast[0][0][0]
    assert [type(r) for r in records] == [ConsumerRecord] * 40
    assert [vars(r) for r in records] == [vars(r) for r in stock[0][0][0]]
    assert [repr(r) for r in records] == [repr(r) for r in stock[0][0][0]]
    assert all(type(r.headers) is tuple for r in records)


@needs_accel
@pytest.mark.parametrize("fetch_offset", [0, 3, 5, 6, 20, 37, 38, 100])
def test_fetcher_skips_below_fetch_offset(accel, fetch_offset):
    for data in (BATCHES["several batches"], BATCHES["legacy magic 1 codec 1"]):
        stock, fast = accel(consumer_records(data, fetch_offset=fetch_offset, chunk=4))
        assert stock == fast


@needs_accel
def test_fetcher_deserializers_run_as_stock(accel):
    calls = []

    def key(b):
        calls.append(("k", b))
        return None if b is None else b[::-1]

    def value(b):
        calls.append(("v", b))
        return None if b is None else len(b)

    def run(got):
        calls.clear()
        consumer_records(
            BATCHES["several batches"], chunk=3, key_deserializer=key, value_deserializer=value
        )(got)
        got.append(list(calls))

    stock, fast = accel(run)
    assert stock == fast and stock[0][-1]


@needs_accel
@pytest.mark.parametrize("fail_at", [0, 1, 6, 37])
def test_fetcher_deserializer_error_mid_batch(accel, fail_at):
    """The records before the failing one are taken, the error is the deserializer's, and
    the loop is finished afterwards (as stock's generator is)."""

    def run(got):
        seen = []

        def value(b):
            seen.append(b)
            if len(seen) == fail_at + 1:
                raise ValueError(f"bad value {len(seen)}")
            return b

        pr = afetcher.PartitionRecords(
            TP,
            amr.MemoryRecords(BATCHES["several batches"]),
            None,
            0,
            None,
            value,
            True,
            afetcher.READ_UNCOMMITTED,
        )
        try:
            while True:
                got.append((next(pr).offset, pr.next_fetch_offset))
        except StopIteration:
            got.append("stop")
        except ValueError as exc:
            got.append((str(exc), pr.next_fetch_offset))
        got.append(next(pr, "done"))
        got.append(len(seen))

    stock, fast = accel(run)
    assert stock == fast
    assert stock[0][-2] == "done"


@needs_accel
@pytest.mark.parametrize("isolation", [afetcher.READ_UNCOMMITTED, afetcher.READ_COMMITTED])
@pytest.mark.parametrize("reader", sorted(READERS))
def test_fetcher_transactions(accel, isolation, reader):
    data = BATCHES["transactional, aborted and committed"]
    for aborted in (None, ABORTED, [(7, 9)], [(9, 0), (7, 0)]):
        for chunk in (None, 2):
            stock, fast = accel(
                consumer_records(
                    data, READERS[reader], chunk=chunk, isolation=isolation, aborted=aborted
                )
            )
            assert stock == fast
    stock, _ = accel(consumer_records(data, READERS[reader], isolation=isolation, aborted=ABORTED))
    offsets = [r.offset for r in stock[0][0][0]]
    if isolation == afetcher.READ_COMMITTED:  # producer 7's aborted batch was skipped
        assert offsets == [4, 5, 6, 7, 9, 10, 11, 12]
    else:
        assert offsets == [*range(8), 9, 10, 11, 12]  # offset 8 is a marker


@needs_accel
@pytest.mark.parametrize("check_crcs", [True, False])
def test_fetcher_crc_checked_as_stock(accel, check_crcs):
    data = bytearray(BATCHES["several batches"])
    data[-3] ^= 0xFF  # the last batch's last record: its CRC no longer matches
    stock, fast = accel(consumer_records(bytes(data), check_crcs=check_crcs, chunk=10))
    assert stock == fast
    assert stock[1] is not None  # without the CRC check, the codec or the reader fails
    if check_crcs:
        assert stock[1][0] is CorruptRecordException and "Invalid CRC" in stock[1][1][0]


@needs_accel
def test_fetcher_reentry_is_refused_as_stock(accel):
    def run(got):
        holder = []

        def value(b):
            return next(holder[0])

        pr = afetcher.PartitionRecords(
            TP,
            amr.MemoryRecords(BATCHES["v2 codec 0"]),
            None,
            0,
            None,
            value,
            True,
            afetcher.READ_UNCOMMITTED,
        )
        holder.append(pr)
        next(pr)

    stock, fast = accel(run)
    assert stock == fast and stock[1][0] is ValueError


@needs_accel
@pytest.mark.parametrize("via", ["next", "getall"])
def test_a_loop_closed_inside_its_own_step_is_refused_as_stock(accel, via):
    """close() from inside a step (here a deserializer; a gc callback likewise) is a
    generator's ValueError: the step's fields stay its own (the compiled loop used to
    drop them under it on GIL builds)."""

    def closing(records):
        def value(b):
            if b and b.endswith(b"!"):
                records()._records_iterator.close()
            return b

        return value

    data = v2_batch([(b"k", b"v%d" % i + (b"!" if i == 5 else b""), []) for i in range(9)])

    def by_next(got):
        pr = afetcher.PartitionRecords(
            TP,
            amr.MemoryRecords(data),
            None,
            0,
            None,
            closing(lambda: pr),
            True,
            afetcher.READ_UNCOMMITTED,
        )
        for msg in pr:
            got.append((msg.offset, msg.value, pr.next_fetch_offset))

    calls = [("all", 3), ("all",), ("all",)]
    by_getall = fetch_results(data, calls, value_deserializer=closing)
    stock, fast = accel(by_next if via == "next" else by_getall)
    assert stock == fast
    assert stock[1] == (ValueError, ("generator already executing",))


@needs_accel
def test_the_records_and_partition_a_loop_started_with_are_its_own_as_stock(accel):
    """Stock's generator reads the PartitionRecords' _tp and _records when it starts and
    holds them: replacing either later changes nothing it yields (the compiled loop read
    the records at every batch, and the partition when the PartitionRecords was made)."""
    other = v2_batch([(b"other", b"x", [])] * 3, offset=1000)

    def fn(got):
        pr = afetcher.PartitionRecords(
            TP,
            amr.MemoryRecords(BATCHES["several batches"]),
            None,
            0,
            None,
            None,
            True,
            afetcher.READ_UNCOMMITTED,
        )
        pr._tp = TopicPartition("before", 1)  # read at the first next(), as stock's
        for i, msg in enumerate(pr):
            got.append((msg.topic, msg.partition, msg.offset, msg.key))
            if i == 2:
                pr._records = amr.MemoryRecords(other)
                pr._tp = TopicPartition("after", 2)

    stock, fast = accel(fn)
    assert stock == fast
    assert len(stock[0]) == 38 and {r[:2] for r in stock[0]} == {("before", 1)}


@needs_accel
def test_fetcher_uses_stock_where_its_record_maker_is_replaced(accel, monkeypatch):
    from fastkwire import _aiokafka

    def replaced(got):
        with monkeypatch.context() as m:
            m.setattr(
                afetcher.PartitionRecords,
                "_consumer_record",
                lambda self, tp, record: (tp.topic, record.offset),
            )
            consumer_records(BATCHES["v2 codec 0"])(got)

    before = _aiokafka.fast_loops()
    stock, fast = accel(replaced)  # install() sees stock's; the mock comes after
    assert stock == fast and stock[0][0][0][0] == ("topic", 0)
    assert _aiokafka.fast_loops() == before


def mutations(data, rng, n):
    for _ in range(n):
        buf = bytearray(data)
        kind = rng.randrange(3)
        if kind == 0:
            for _ in range(rng.randrange(1, 4)):
                buf[rng.randrange(61, len(buf))] = rng.randrange(256)
        elif kind == 1:
            del buf[rng.randrange(61, len(buf)) :]
        else:
            at = rng.randrange(61, len(buf))
            buf[at:at] = rng.randbytes(rng.randrange(1, 12))
        yield bytes(buf)


@needs_accel
@pytest.mark.parametrize(
    "name", ["v2 codec 0", "several batches", "legacy magic 1 codec 0", "log append time"]
)
def test_hostile_bytes_same_outcome(accel, name):
    rng = random.Random(name)
    for data in mutations(BATCHES[name], rng, 100):
        for reader in READERS.values():
            stock, fast = accel(consumer_records(data, reader, check_crcs=False, chunk=5))
            assert stock == fast, data.hex()


def header_batches():
    """Uncompressed v2 batches with several headers a record (the loop reads these from
    the bytes), one with a header key that is not UTF-8 and one with LOG_APPEND_TIME."""
    rng = random.Random(11)
    records = [
        (
            rng.randbytes(3),
            rng.randbytes(rng.choice((0, 5, 60))),
            [(f"k{j}", None if j % 2 else rng.randbytes(j)) for j in range(i % 4)],
        )
        for i in range(30)
    ]
    plain = v2_batch(records, offset=10)
    not_utf8 = bytearray(plain)
    at = plain.index(b"k1", 61)
    not_utf8[at] = 0xFF
    return {
        "headers": plain,
        "header key not UTF-8": with_attributes(bytes(not_utf8), 0),  # its CRC made right
        "headers, log append time": with_attributes(plain, 0x08),
    }


HEADER_BATCHES = header_batches()


@needs_accel
def test_uncompressed_v2_batches_are_read_from_the_bytes(accel):
    from fastkwire import _aiokafka

    cases = [("v2 codec 0", amr.MemoryRecords, 1), ("several batches", amr.MemoryRecords, 1)]
    cases += [("legacy magic 1 codec 0", amr.MemoryRecords, 0)]
    cases += [("v2 codec 0", amr._MemoryRecordsPy, 0)]  # its Python records: stock's
    cases += [(f"v2 codec {codec}", amr.MemoryRecords, 0) for codec in CODECS[1:]]
    for name, reader, raw in cases:
        before = _aiokafka.raw_batch_count()
        stock, fast = accel(consumer_records(BATCHES[name], reader))
        assert stock == fast and stock[0][0][0]
        assert _aiokafka.raw_batch_count() == before + raw, name


@needs_accel
@pytest.mark.parametrize("name", sorted(HEADER_BATCHES))
def test_records_read_from_the_bytes_as_stock(accel, name):
    data = HEADER_BATCHES[name]
    for chunk in (None, 1, 4):
        for fetch_offset in (0, 12, 39, 40):
            stock, fast = accel(consumer_records(data, chunk=chunk, fetch_offset=fetch_offset))
            assert stock == fast
    calls = [("all", 3), ("all", 0), ("one",), ("all",)]
    stock, fast = accel(fetch_results(data, calls))
    assert stock == fast
    if name == "header key not UTF-8":  # the record before it is taken, then its error
        assert stock[1][0] is UnicodeDecodeError
    else:
        assert [len(r.headers) for r in stock[0][0][0]] == [0, 1, 2]


@needs_accel
@pytest.mark.parametrize("name", sorted(HEADER_BATCHES))
def test_hostile_bytes_read_from_the_bytes_same_outcome(accel, name):
    """Mutated records: what the bytes path cannot read as stock goes to aiokafka's batch
    iterator, whose records or CorruptRecordException come out the same."""
    rng = random.Random(name)
    for data in mutations(HEADER_BATCHES[name], rng, 150):
        stock, fast = accel(consumer_records(data, check_crcs=False, chunk=3))
        assert stock == fast, data.hex()
        calls = [("all", 5), ("all",)]
        stock, fast = accel(fetch_results(data, calls, check_crcs=False))
        assert stock == fast, data.hex()


def varint(n):
    """A zigzag varint as Kafka writes one."""
    n = (n << 1) ^ (n >> 63)
    n &= (1 << 64) - 1
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def sized(data):
    """Kafka's nullable bytes in a v2 record: a varint size, then the bytes."""
    return varint(-1) if data is None else varint(len(data)) + data


@st.composite
def v2_record(draw):
    """A v2 record's bytes: mostly well formed, with a length that may be off by one,
    header keys that may not be UTF-8, timestamps and offsets at int64's edges."""
    edge = st.sampled_from([0, 1, -1, 2**62, -(2**63), 2**63 - 1])
    nullable = st.one_of(st.none(), st.binary(max_size=6))
    header_key = st.one_of(*[st.text(max_size=3).map(str.encode)] * 4, st.binary(max_size=3))
    headers = draw(st.lists(st.tuples(header_key, nullable), max_size=3))
    body = b"".join(
        (
            varint(draw(st.integers(-1, 3))),
            varint(draw(st.one_of(st.integers(-5, 5), edge))),
            varint(draw(st.one_of(st.integers(-2, 5), edge))),
            sized(draw(nullable)),
            sized(draw(nullable)),
            varint(draw(st.sampled_from([len(headers)] * 4 + [-1, len(headers) + 1]))),
            *(sized(key) + sized(value) for key, value in headers),
        )
    )
    return varint(len(body) + draw(st.sampled_from([0, 0, 0, 0, 1, -1]))) + body


# What a v2 batch's record region is made of: records, and now and then other bytes.
record_parts = st.lists(
    st.one_of(
        v2_record(),
        v2_record(),
        st.sampled_from([varint(-(2**63)), b"\xff" * 11, b"\x80", b""]),
        st.binary(max_size=4),
    ),
    max_size=6,
)


@needs_accel
@settings(
    max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    record_parts,
    st.sampled_from([0, 0, 0, 1, -1]),
    st.booleans(),
    st.sampled_from([0, 0, 5, -1, 2**63 - 3, -(2**63)]),
)
def test_any_record_bytes_same_outcome(accel, parts, count_off, log_append, base_offset):
    """Whatever bytes follow a v2 batch's header: stock's records or stock's exception."""
    header = bytearray(HEADER_BATCHES["headers"][:61])
    body = b"".join(parts)
    struct.pack_into(">qi", header, 0, base_offset, 49 + len(body))
    struct.pack_into(">h", header, 21, 0x08 if log_append else 0)
    struct.pack_into(">i", header, 57, len(parts) + count_off)
    data = bytes(header) + body
    stock, fast = accel(consumer_records(data, check_crcs=False, chunk=2))
    assert stock == fast


@needs_accel
@pytest.mark.parametrize(
    "records_class",
    [amr._MemoryRecordsPy, bytes, adr.DefaultRecordBatch],  # mutable; other layouts
)
def test_records_layout_not_as_checked_reads_through_aiokafka(accel, monkeypatch, records_class):
    """Where the class install() is given for the C MemoryRecords is not laid out as
    checked, no batch is read from the bytes, and the records are still stock's."""
    from fastkwire import _aiokafka
    from fastkwire.aiokafka import _seams

    c_class = _seams._c_class
    monkeypatch.setattr(
        _seams,
        "_c_class",
        lambda module, name: records_class if name == "MemoryRecords" else c_class(module, name),
    )
    before = _aiokafka.raw_batch_count()
    stock, fast = accel(consumer_records(HEADER_BATCHES["headers"]))
    assert stock == fast and stock[0][0][0]
    assert _aiokafka.raw_batch_count() == before


@needs_accel
@pytest.mark.parametrize("fail_at", [None, 0, 7, 29])
def test_getall_with_a_deserializer_sees_each_step_as_stock(accel, fail_at):
    """A deserializer that looks at the PartitionRecords each call sees the same
    next_fetch_offset and iterator as under stock's getall."""

    def deserializer(records):
        seen = []

        def value(b):
            pr = records()
            seen.append((b, pr.next_fetch_offset, pr._records_iterator is None))
            if len(seen) - 1 == fail_at:
                raise ValueError(f"bad value {len(seen)}")
            return seen[-1]

        return value

    calls = [("all", 4), ("all",), ("all",)]
    stock, fast = accel(
        fetch_results(HEADER_BATCHES["headers"], calls, value_deserializer=deserializer)
    )
    assert stock == fast


# ---- murmur2 -------------------------------------------------------------------------


@needs_accel
@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=80))
def test_murmur2_is_aiokafkas_for_every_input(data):
    fka.install()
    try:
        assert apartitioner.murmur2(data) == STOCK_MURMUR2(data)
        assert apartitioner.murmur2(bytearray(data)) == STOCK_MURMUR2(bytearray(data))
    finally:
        fka.uninstall()


@needs_accel
def test_murmur2_other_inputs_go_to_stock(accel):
    inputs = [[1, 2, 300, -1, 5], memoryview(b"abcdefg"), "text", None, 12, (0, 255)]

    def run(got):
        for value in inputs:
            try:
                got.append(apartitioner.murmur2(value))
            except Exception as exc:  # noqa: BLE001
                got.append((type(exc), exc.args))

    stock, fast = accel(run)
    assert stock == fast


@needs_accel
def test_partitioner_picks_the_same_partitions(accel):
    rng = random.Random(3)
    keys = [rng.randbytes(rng.randrange(0, 40)) for _ in range(500)]

    def run(got):
        part = apartitioner.DefaultPartitioner()
        got.extend(part(key, list(range(12)), list(range(12))) for key in keys)

    stock, fast = accel(run)
    assert stock == fast
    # Java's Utils.murmur2 vectors (Kafka's own tests, via kafka-python's)
    fka.install()
    try:
        assert apartitioner.murmur2(b"21") == (-973932308) & 0xFFFFFFFF
        assert apartitioner.murmur2(b"a-little-bit-long-string") == (-985981536) & 0xFFFFFFFF
        assert apartitioner.murmur2(b"a-little-bit-longer-string") == (-1486304829) & 0xFFFFFFFF
        assert apartitioner.murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == (
            -58897971 & 0xFFFFFFFF
        )
    finally:
        fka.uninstall()


# ---- the producer's partition choice: AIOKafkaProducer._partition ----------------------


def producer_with_partitions(by_topic, loop):
    """An unstarted AIOKafkaProducer whose cluster metadata lists by_topic's partitions
    ({topic: [(partition, leader), ...]}, inserted in that order)."""

    async def make():
        return aiokafka.AIOKafkaProducer(bootstrap_servers="127.0.0.1:1")

    producer = loop.run_until_complete(make())
    producer._metadata._partitions = {
        topic: {
            p: PartitionMetadata(topic, p, leader, [leader], [leader], None) for p, leader in parts
        }
        for topic, parts in by_topic.items()
    }
    return producer


def partition_calls(calls, setup=None):
    """fn(got): each call's AIOKafkaProducer._partition outcome (its value or exception),
    random seeded the same way (unkeyed records pick at random)."""

    def fn(got):
        rng = random.Random(5)
        order = list(range(40)) + [1000, 77, 4096, 513]
        rng.shuffle(order)
        by_topic = {
            "t": [(p, -1 if p % 3 == 0 else 1) for p in order],
            "one": [(0, 1)],
            "empty": [],
            "leaderless": [(0, -1), (1, -1)],
        }
        loop = asyncio.new_event_loop()
        try:
            producer = producer_with_partitions(by_topic, loop)
            if setup is not None:
                setup(producer)
            random.seed(11)
            for call in calls:
                try:
                    got.append(producer._partition(*call))
                except Exception as exc:  # noqa: BLE001 - compared with stock's
                    got.append((type(exc), exc.args))
        finally:
            loop.run_until_complete(producer.stop())
            loop.close()

    return fn


def keyed_calls():
    rng = random.Random(9)
    calls = []
    for topic, count in (("t", 120), ("one", 3), ("leaderless", 10)):
        for n in [rng.choice((0, 1, 3, 12, 40)) for _ in range(count)]:
            key = rng.randbytes(n)
            calls.append((topic, None, key, b"v", key, b"v"))
            calls.append((topic, None, key, b"v", bytearray(key), b"v"))
    return calls


ODD_CALLS = [
    ("t", None, None, b"v", None, b"v"),  # unkeyed: random among the available
    ("leaderless", None, None, b"v", None, b"v"),
    ("t", 5, b"k", b"v", b"k", b"v"),  # an explicit partition
    ("t", 9999, b"k", b"v", b"k", b"v"),  # AssertionError: not one of the topic's
    ("t", None, "k", b"v", "k", b"v"),  # a str key: stock's murmur2
    ("t", None, memoryview(b"key"), b"v", memoryview(b"key"), b"v"),
    ("missing", None, b"k", b"v", b"k", b"v"),  # TypeError: no partitions known
    ("empty", None, b"k", b"v", b"k", b"v"),  # ZeroDivisionError
    (["unhashable"], None, b"k", b"v", b"k", b"v"),
]


@needs_accel
def test_producer_partition_as_stock(accel):
    stock, fast = accel(partition_calls(keyed_calls() + ODD_CALLS))
    assert stock == fast
    values = stock[0]
    assert len(set(map(repr, values[: len(keyed_calls())]))) > 10  # many partitions hit


@needs_accel
def test_producer_partition_runs_no_python_for_keyed_records(accel):
    """The keyed choice is made in C: no Python function runs (stock runs _partition,
    ClusterMetadata's two partition lists and DefaultPartitioner.__call__)."""

    def fn(got):
        loop = asyncio.new_event_loop()
        try:
            producer = producer_with_partitions({"t": [(p, 1) for p in range(8)]}, loop)
            called = []
            sys.setprofile(
                lambda frame, event, arg: event == "call" and called.append(frame.f_code.co_name)
            )
            try:
                got.append(producer._partition("t", None, b"key", b"v", b"key", b"v"))
            finally:
                sys.setprofile(None)
            got.append(sorted(set(called)))
        finally:
            loop.run_until_complete(producer.stop())
            loop.close()

    (stock, _), (fast, _) = accel(fn)
    assert stock[0] == fast[0]
    assert "partitions_for_topic" in stock[1] and "__call__" in stock[1]
    assert fast[1] == []


class OtherPartitioner:
    def __call__(self, key, all_partitions, available):
        return all_partitions[-1], tuple(available)


@needs_accel
@pytest.mark.parametrize(
    "setup",
    [
        lambda p: setattr(p, "_partitioner", OtherPartitioner()),
        lambda p: setattr(p, "_partitioner", type("Sub", (apartitioner.DefaultPartitioner,), {})()),
        lambda p: setattr(
            p._metadata, "partitions_for_topic", lambda topic: {3, 1} if topic == "t" else None
        ),
        lambda p: setattr(p._metadata, "available_partitions_for_topic", lambda topic: {7}),
    ],
    ids=["other partitioner", "a subclass", "partitions replaced", "available replaced"],
)
def test_producer_partition_other_parts_run_as_stock(accel, setup):
    stock, fast = accel(partition_calls(keyed_calls() + ODD_CALLS, setup))
    assert stock == fast


# ---- the consumer's fetch context: SubscriptionState.fetch_context -----------------------


def fetch_context_steps(fn_body):
    """fn(got): fn_body(subscriptions, got) on a fresh SubscriptionState; then its count."""

    async def run(got):
        subscriptions = SubscriptionState()
        before = subscriptions._last_fetch_ended
        try:
            fn_body(subscriptions, got)
        finally:
            got.append(("count", subscriptions._fetch_count))
            got.append(("ended moved", subscriptions._last_fetch_ended != before))

    def fn(got):
        asyncio.run(run(got))

    return fn


def nested(s, got):
    with s.fetch_context():
        got.append(s._fetch_count)
        with s.fetch_context():
            got.append(s._fetch_count)
        got.append(s._fetch_count)
    got.append(s._fetch_count)


def raising(s, got):
    for exc in (ValueError("x"), StopIteration(), KeyboardInterrupt()):
        try:
            with s.fetch_context():
                raise exc
        except BaseException as caught:  # noqa: BLE001 - what leaves the block is compared
            got.append((type(caught), caught is exc, s._fetch_count))


def reentered(s, got):
    manager = s.fetch_context()
    got.append(manager.__enter__())
    manager.__enter__()


def misused(s, got):
    s.fetch_context(1)


@needs_accel
@pytest.mark.parametrize("body", [nested, raising, reentered, misused])
def test_fetch_context_as_stock(accel, body):
    stock, fast = accel(fetch_context_steps(body))
    assert stock == fast


# ---- install and uninstall -----------------------------------------------------------


def snapshot():
    """Identity of every attribute of every aiokafka module and class the table touches."""
    out = {}
    for name in (
        "aiokafka.partitioner",
        "aiokafka.consumer.fetcher",
        "aiokafka.producer.producer",
        "aiokafka.protocol.struct",
        "aiokafka.consumer.subscription_state",
        "aiokafka.cluster",
    ):
        module = importlib.import_module(name)
        for attr, value in list(vars(module).items()):
            out[(name, attr)] = value
            if isinstance(value, type):
                for cattr, cvalue in list(vars(value).items()):
                    out[(name, value.__qualname__, cattr)] = cvalue
    return out


def same(a, b):
    return a.keys() == b.keys() and all(a[k] is b[k] for k in a)


@needs_accel
def test_install_patches_every_seam_and_uninstall_restores_identity():
    before = snapshot()
    table = fka.patches()
    assert {(getattr(p.owner, "__qualname__", p.owner.__name__), p.attribute) for p in table} == {
        ("aiokafka.partitioner", "murmur2"),
        ("AIOKafkaProducer", "_partition"),
        ("SubscriptionState", "fetch_context"),
        ("PartitionRecords", "_unpack_records"),
        ("PartitionRecords", "__next__"),
        ("FetchResult", "getall"),
        ("Struct", "decode"),
    }
    assert fka.install() is True and fka.installed()
    try:
        for p in table:
            assert vars(p.owner)[p.attribute] is p.replacement
        assert apartitioner.murmur2 is not before[("aiokafka.partitioner", "murmur2")]
        assert fka.install() is True  # a second install is a no-op
    finally:
        fka.uninstall()
    assert not fka.installed()
    assert same(before, snapshot())
    fka.uninstall()  # and so is a second uninstall
    assert same(before, snapshot())


def test_install_declines_on_an_unknown_version(monkeypatch):
    before = snapshot()
    monkeypatch.setattr(aiokafka, "__version__", "0.14.99")
    with (
        pytest.raises(fka.UnsupportedAiokafka, match=r"aiokafka 0\.14\.99")
        if not PURE
        else pytest.raises(fka.UnsupportedAiokafka)
    ):
        fka.install()
    with pytest.warns(RuntimeWarning, match="not installed"):
        assert fka.install(strict=False) is False
    assert not fka.installed() and same(before, snapshot())
    with pytest.raises(fka.UnsupportedAiokafka):
        fka.patches()


def test_install_declines_under_fastkwire_pure(monkeypatch):
    before = snapshot()
    monkeypatch.setenv("FASTKWIRE_PURE", "1")
    with pytest.raises(fka.UnsupportedAiokafka, match="FASTKWIRE_PURE"):
        fka.install()
    assert not fka.installed() and same(before, snapshot())


@needs_accel
def test_install_declines_when_a_seam_is_missing_or_mocked(monkeypatch):
    before = snapshot()
    monkeypatch.delattr(afetcher.PartitionRecords, "_unpack_records")
    with pytest.raises(fka.UnsupportedAiokafka, match="_unpack_records"):
        fka.install()
    monkeypatch.undo()
    monkeypatch.setattr(apartitioner, "murmur2", lambda data: 0)
    with pytest.raises(fka.UnsupportedAiokafka, match="murmur2 is not aiokafka's own"):
        fka.install()
    monkeypatch.undo()
    assert not fka.installed() and same(before, snapshot())


@needs_accel
def test_pytest_plugin_installs_for_the_run(tmp_path):
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent("""
        import fastkwire.aiokafka as fka
        from aiokafka.consumer.fetcher import PartitionRecords
        def test_it():
            assert fka.installed()
            assert PartitionRecords._unpack_records.__module__ == "fastkwire._aiokafka"
    """)
    )
    # The fastkwire this run imported comes first: a source tree on sys.path (without the
    # compiled core, in a non-editable install) must not shadow it in the child.
    here = str(Path(fastkwire.__file__).resolve().parents[1])
    env = dict(
        os.environ,
        PYTHONPATH=os.pathsep.join([here] + [p for p in sys.path if p]),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
    )
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
        + ["-p", "fastkwire.aiokafka", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


# ---- FetchResult: getall and getone over the PartitionRecords ------------------------


def fetch_results(
    data, calls, pause_after=None, seek_after=None, check_crcs=True, value_deserializer=None
):
    """fn(got): a FetchResult over data with a real assignment, drained by `calls`
    (("all", max_records) or ("one",)), with the position after each call."""

    async def assigned():
        subscriptions = SubscriptionState()
        subscriptions.assign_from_user({TP})
        subscriptions.seek(TP, 0)
        return subscriptions

    def fn(got):
        loop = asyncio.new_event_loop()
        try:
            subscriptions = loop.run_until_complete(assigned())
            assignment = subscriptions.subscription.assignment
            pr = afetcher.PartitionRecords(
                TP,
                amr.MemoryRecords(data),
                None,
                0,
                None,
                value_deserializer and value_deserializer(lambda: pr),
                check_crcs,
                afetcher.READ_UNCOMMITTED,
            )
            result = afetcher.FetchResult(
                TP, assignment=assignment, partition_records=pr, backoff=0
            )
            for i, call in enumerate(calls):
                if i == pause_after:
                    subscriptions.pause(TP)
                if i == seek_after:
                    subscriptions.seek(TP, 3)
                taken = result.getone() if call[0] == "one" else result.getall(*call[1:])
                state = assignment.state_value(TP)
                got.append((taken, state.position, result.has_more(), pr._records_iterator is None))
        finally:
            loop.close()

    return fn


GETALL_CALLS = [
    [("all",)],
    [("all", None)],
    [("all", 1), ("all", 2), ("all", 0), ("all", -1), ("all", 100), ("all", 5)],
    [("one",)] * 42,
    [("all", 3), ("one",), ("all", 2**70), ("one",), ("all",)],
    [("all", 2.5), ("all", True), ("all", 7)],
]


@needs_accel
@pytest.mark.parametrize("calls", range(len(GETALL_CALLS)))
@pytest.mark.parametrize(
    "name", ["several batches", "v2 codec 0", "transactional, aborted and committed"]
)
def test_fetch_result_getall_and_getone_as_stock(accel, name, calls):
    stock, fast = accel(fetch_results(BATCHES[name], GETALL_CALLS[calls]))
    assert stock == fast
    assert stock[0][0][0]  # records were taken (the calls past the end fail as stock does)


@needs_accel
@pytest.mark.parametrize("pause_after,seek_after", [(1, None), (None, 1), (0, None)])
def test_fetch_result_unfetchable_partition_as_stock(accel, pause_after, seek_after):
    calls = [("all", 2), ("all", 2), ("one",), ("all",)]
    stock, fast = accel(fetch_results(BATCHES["several batches"], calls, pause_after, seek_after))
    assert stock == fast


@needs_accel
def test_partition_records_next_on_other_iterators_as_stock(accel):
    """aiokafka's own tests put a plain iterator (or None) where the loop goes."""

    def run(got):
        pr = afetcher.PartitionRecords(TP, amr.MemoryRecords(b""), [], 0, None, None, False, 0)
        pr._records_iterator = iter([1, None, 3])
        got.append(list(pr))
        got.append(pr._records_iterator)
        next(pr)  # None: stock's TypeError

    stock, fast = accel(run)
    assert stock == fast and stock[1][0] is TypeError


# ---- the protocol: Struct.decode ------------------------------------------------------


def response_classes():
    """Every aiokafka response class (name ..._vN) of its protocol modules."""
    from aiokafka.protocol.struct import Struct

    out = {}
    for name in (
        "metadata",
        "fetch",
        "produce",
        "offset",
        "coordination",
        "group",
        "commit",
        "admin",
        "transaction",
        "api",
    ):
        module = importlib.import_module(f"aiokafka.protocol.{name}")
        for attr, value in vars(module).items():
            if (
                isinstance(value, type)
                and issubclass(value, Struct)
                and "Response_v" in attr
                and value.__module__ == module.__name__
            ):
                out[attr] = value
    return out


RESPONSES = response_classes()


def schema_values(draw, schema, depth=0):
    """Values for an aiokafka Schema, drawn with hypothesis, in the shapes its decode gives."""
    from aiokafka.protocol import types as t

    def one(field):
        if field is t.Int8:
            return draw(st.integers(-(2**7), 2**7 - 1))
        if field is t.Int16:
            return draw(st.integers(-(2**15), 2**15 - 1))
        if field is t.Int32:
            return draw(st.integers(-(2**31), 2**31 - 1))
        if field is t.UInt32:
            return draw(st.integers(0, 2**32 - 1))
        if field is t.Int64:
            return draw(st.integers(-(2**63), 2**63 - 1))
        if field is t.Float64:
            return draw(st.floats(allow_nan=False))
        if field is t.Boolean:
            return draw(st.booleans())
        if field is t.Bytes:
            return draw(st.none() | st.binary(max_size=20))
        if isinstance(field, t.String):
            return draw(st.none() | st.text(max_size=8))
        if isinstance(field, t.Array):
            if depth > 3:
                return draw(st.none() | st.just([]))
            n = draw(st.integers(0, 3))
            return draw(st.none()) or [
                schema_values_one(draw, field.array_of, depth + 1) for _ in range(n)
            ]
        if isinstance(field, t.Schema):
            return schema_values(draw, field, depth + 1)
        raise LookupError(field)

    return tuple(one(f) for f in schema.fields)


def schema_values_one(draw, field, depth):
    from aiokafka.protocol import types as t

    if isinstance(field, t.Schema):
        return schema_values(draw, field, depth)
    return schema_values(draw, t.Schema(("x", field)), depth)[0]


def decode_outcome(cls, data, as_bytesio, prefix=b""):
    """cls.decode's result (with its repr, the types and collector tracking of its tree,
    and where it left the BytesIO), or its exception."""
    import gc

    src = io.BytesIO(prefix + data) if as_bytesio else data
    if as_bytesio:
        src.seek(len(prefix))
    try:
        value = cls.decode(src)
    except Exception as exc:  # noqa: BLE001 - the type and args are compared
        return ("raised", type(exc), str(exc))

    def shape(v):
        # lists are always tracked; a tuple of atomic values may already have been
        # untracked by a collection (CPython's own), so only lists' tracking is compared
        if isinstance(v, (list, tuple)):
            tracked = gc.is_tracked(v) if type(v) is list else None
            return (type(v).__name__, tracked, [shape(x) for x in v])
        return type(v).__name__

    return (
        value,
        repr(value),
        type(value),
        [shape(vars(value)[n]) for n in cls.SCHEMA.names],
        src.tell() if as_bytesio else None,
    )


@needs_accel
def test_struct_decode_plans_the_hot_responses():
    from fastkwire import _aiokafka

    fka.install()
    try:
        planned = {name for name, cls in RESPONSES.items() if _aiokafka.plan_for(cls) is not None}
    finally:
        fka.uninstall()
    for name in (
        "MetadataResponse_v5",
        "FetchResponse_v4",
        "ProduceResponse_v5",
        "OffsetResponse_v1",
        "FindCoordinatorResponse_v1",
        "JoinGroupResponse_v5",
        "SyncGroupResponse_v3",
    ):
        if name in RESPONSES:
            assert name in planned
    assert len(planned) > 50


@needs_accel
@settings(max_examples=300, deadline=None)
@given(st.data())
def test_struct_decode_gives_stocks_objects(data):
    from aiokafka.protocol import types as t

    name = data.draw(st.sampled_from(sorted(RESPONSES)))
    cls = RESPONSES[name]
    try:
        values = schema_values(data.draw, cls.SCHEMA)
    except LookupError:  # a type the plans do not read (flexible versions): stock's anyway
        values = None
    if values is not None:
        body = cls.SCHEMA.encode(values)
    else:
        body = data.draw(st.binary(max_size=64))
    cut = data.draw(st.sampled_from(["whole", "short", "flipped", "extra"]))
    if cut == "short" and body:
        body = body[: data.draw(st.integers(0, len(body) - 1))]
    elif cut == "flipped" and body:
        i = data.draw(st.integers(0, len(body) - 1))
        body = body[:i] + bytes([body[i] ^ data.draw(st.integers(1, 255))]) + body[i + 1 :]
    elif cut == "extra":
        body += b"\x00\x01"
    for as_bytesio in (False, True):
        stock = decode_outcome(cls, body, as_bytesio, prefix=b"\x07\x07")
        fka.install()
        try:
            fast = decode_outcome(cls, body, as_bytesio, prefix=b"\x07\x07")
        finally:
            fka.uninstall()
        assert stock == fast, (name, cut, body.hex())
    del t


@needs_accel
def test_struct_decode_edge_counts_and_strings(accel):
    """Counts and lengths at stock's edges: -1 (null), other negatives (an empty list for
    arrays, None for strings), counts past the bytes, strings that are not UTF-8."""
    from aiokafka.protocol.metadata import MetadataResponse_v0

    broker = struct.pack(">i", 1) + struct.pack(">h", 1) + b"h" + struct.pack(">i", 9)
    bodies = [
        struct.pack(">i", -1) + struct.pack(">i", -1),
        struct.pack(">i", -5) + struct.pack(">i", -2),
        struct.pack(">i", 1) + broker + struct.pack(">i", 0),
        struct.pack(">i", 2**31 - 1) + broker,
        struct.pack(">i", 1)
        + struct.pack(">i", 1)
        + struct.pack(">h", 2)
        + b"\xff\xfe"
        + struct.pack(">i", 9)
        + struct.pack(">i", 0),
        struct.pack(">i", 1)
        + struct.pack(">i", 1)
        + struct.pack(">h", -3)
        + struct.pack(">i", 9)
        + struct.pack(">i", 0),
        b"",
        b"\x00\x00",
    ]

    def run(got):
        for body in bodies:
            for as_bytesio in (False, True):
                got.append(decode_outcome(MetadataResponse_v0, body, as_bytesio))

    stock, fast = accel(run)
    assert stock == fast


@needs_accel
def test_struct_decode_of_empty_schemas(accel):
    """Schemas without fields (the shared empty tuple) at the top and inside arrays."""
    import gc

    from aiokafka.protocol.struct import Struct
    from aiokafka.protocol.types import Array, Int8, Schema

    class Empty(Struct):
        SCHEMA = Schema()

    class Holder(Struct):
        SCHEMA = Schema(
            ("items", Array(Schema())), ("tail", Int8), ("nested", Array(Array(Schema())))
        )

    body = struct.pack(">i", 3) + b"\x05" + struct.pack(">ii", 1, 2)

    def run(got):
        for cls, data in ((Empty, b""), (Empty, b"\x01"), (Holder, body), (Holder, body[:-1])):
            for as_bytesio in (False, True):
                got.append(decode_outcome(cls, data, as_bytesio))
        gc.collect()

    stock, fast = accel(run)
    assert stock == fast
    assert stock[0][4][0].items == [(), (), ()]
    from fastkwire import _aiokafka

    fka.install()
    try:
        assert _aiokafka.plan_for(Holder) is not None and _aiokafka.plan_for(Empty) == ()
    finally:
        fka.uninstall()


@needs_accel
def test_fetcher_calls_a_replaced_consumer_record_init(accel, monkeypatch):
    """The loop calls ConsumerRecord's own __init__ directly; one replaced after install()
    (a test's spy) is what gets called, as calling the class would."""
    from aiokafka.structs import ConsumerRecord

    calls = []
    original = ConsumerRecord.__init__

    def spy(self, *args, **kwargs):
        calls.append(args[2])
        original(self, *args, **kwargs)

    def run(got):
        calls.clear()
        with monkeypatch.context() as m:
            m.setattr(ConsumerRecord, "__init__", spy)
            try:
                consumer_records(BATCHES["several batches"], chunk=9)(got)
            finally:
                got.append(list(calls))

    stock, fast = accel(run)
    assert stock == fast and stock[0][-1] == list(range(38))

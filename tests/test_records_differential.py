"""The two kernels agree: on mutated batches (bytes flipped, cut, inserted), both give
the same records or the same DecodeError, word for word; and the CRC32C paths agree."""

import importlib
import importlib.util
import random

import pytest

from fastkwire import DecodeError
from fastkwire._batches import Codec
from fastkwire import _records_python
from fastkwire.records import Record
from record_peers import needs_cramjam

try:
    _records = importlib.import_module("fastkwire._records")
except ImportError:
    _records = None

pytestmark = pytest.mark.skipif(_records is None, reason="compiled extension not built")

PURE = Codec(_records_python)
COMPILED = Codec(_records) if _records else None


def _outcome(read, data, **kw):
    try:
        got = read(data, **kw)
    except DecodeError as e:
        return ("error", e.reason, e.offset)
    if hasattr(got, "to_records"):
        return ("columns", got.to_records(), got.tail)
    return ("batches", [(b._fields()[:-1], b.records) for b in got], got.tail)


def _seeds():
    rng = random.Random(14)
    recs = [
        Record(
            i,
            1_000 + rng.randrange(-50, 50),
            rng.choice([None, b"", rng.randbytes(5)]),
            rng.choice([None, b"", rng.randbytes(30)]),
            [
                (rng.choice(["a", "bb", "\u00e9"]), rng.choice([None, b"x"]))
                for _ in range(rng.randrange(3))
            ],
        )
        for i in range(12)
    ]
    plain = PURE.write_batch(recs, producer_id=5, producer_epoch=1, base_sequence=0)
    seeds = [plain, plain + PURE.write_batch(recs[:3], base_offset=12)]
    if importlib.util.find_spec("cramjam"):  # the compression extra
        seeds += [
            PURE.write_batch(recs, compression="zstd"),
            PURE.write_batch(recs, compression="snappy"),
        ]
    return seeds


def _mutations(data, rng, n):
    for _ in range(n):
        d = bytearray(data)
        kind = rng.randrange(4)
        i = rng.randrange(61 if kind < 3 and len(d) > 70 and rng.random() < 0.8 else 0, len(d))
        if kind == 0:
            d[i] ^= 1 << rng.randrange(8)
        elif kind == 1:
            d[i] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFF])
        elif kind == 2:
            d[i:i] = bytes([rng.choice([0x80, 0xFF, 0x01])]) * rng.randrange(1, 12)
        else:
            del d[i:]
        yield bytes(d)


@pytest.mark.parametrize(
    "seed", [0, 1, pytest.param(2, marks=needs_cramjam), pytest.param(3, marks=needs_cramjam)]
)
def test_kernels_agree_on_mutated_batches(seed):
    rng = random.Random(seed)
    data = _seeds()[seed]
    for mutated in _mutations(data, rng, 150):
        for read in ("read_batches", "read_columns"):
            a = _outcome(getattr(PURE, read), mutated, check_crc=False, max_decompressed=1 << 16)
            b = _outcome(
                getattr(COMPILED, read), mutated, check_crc=False, max_decompressed=1 << 16
            )
            assert a == b, (read, mutated.hex())
        # With the CRC checked, any change to the covered bytes is refused alike.
        assert _outcome(PURE.read_batches, mutated) == _outcome(COMPILED.read_batches, mutated)


@pytest.mark.slow
def test_kernels_agree_long():
    """5,000 mutations of each seed (with --run-slow; tools/asan.sh runs it under ASan)."""
    for seed, data in enumerate(_seeds()):
        rng = random.Random(1000 + seed)
        for mutated in _mutations(data, rng, 5000):
            for read in ("read_batches", "read_columns"):
                a = _outcome(
                    getattr(PURE, read), mutated, check_crc=False, max_decompressed=1 << 16
                )
                b = _outcome(
                    getattr(COMPILED, read), mutated, check_crc=False, max_decompressed=1 << 16
                )
                assert a == b, (read, mutated.hex())


def test_crc32c_paths_agree():
    rng = random.Random(3)
    for n in list(range(0, 40)) + [1000, 4097, 3 * 8192 - 1, 3 * 8192, 6 * 8192 + 5, 65536 + 3]:
        data = rng.randbytes(n)
        start = rng.randrange(0, 2**32)
        expected = _records_python.crc32c(data, start)
        assert _records.crc32c(data, start) == expected
        assert _records.crc32c_portable(data, start) == expected
        assert _records.crc32c(memoryview(data)) == _records_python.crc32c(data)


class Text(str):
    pass


def _encoded(codec, records, **kw):
    try:
        return codec.write_batch(records, **kw)[21:]  # after the CRC: equal inputs, equal bytes
    except Exception as e:  # noqa: BLE001 - the kinds and texts must agree
        return (type(e).__name__, str(e))


ODD = [
    [Record(0, 5, bytearray(b"k"), memoryview(b"v"), [])],
    [Record(0, 5, b"k", b"v", (("h", b"x"),))],
    [Record(0, 5, b"k", b"v", [(Text("h"), b"x")])],
    [Record(0, 5, b"k", b"v", [("h", bytearray(b"x"))])],
    [Record(0, 5, b"k", b"v", [("\ud800", b"x")])],
    [Record(0, 5, b"k", b"v", [("h", b"x", b"y")])],
    [Record(0, True, b"k", b"v", [])],
    [Record(0, 2**63, b"k", b"v", [])],
    [Record(0, -(2**63), b"k", None, []), Record(1, 2**63 - 1, None, b"v", [])],
    [Record(2**63 - 1, 0, None, None, [])],
    [Record(-5, 0, None, None, [])],
    [Record(None, 5, None, None, []), Record(None, 6, None, None, [])],
    [Record(0, 0, "k", None, [])],
    [Record(0, 0, None, None, None)],
    [Record(0, 0, None, None, [])] * 3,
    (Record(0, 0, None, None, []),),
]


@pytest.mark.parametrize("records", ODD, ids=range(len(ODD)))
def test_writers_agree_on_odd_values(records):
    assert _encoded(PURE, records) == _encoded(COMPILED, records)


def test_writers_agree_on_odd_columns():
    import numpy as np
    from fastkwire.records import RecordColumns

    cols = RecordColumns.from_records([Record(i, i, b"k", None, [("h", b"v")]) for i in range(4)])
    assert _encoded(PURE, cols) == _encoded(COMPILED, cols)
    shifted = RecordColumns.from_records(
        [Record(i, i, b"k", None, [("h", b"v")]) for i in range(4)]
    )
    shifted.key.data = np.frombuffer(b"xyz" + shifted.key.data.tobytes(), np.uint8)
    shifted.key.offsets = shifted.key.offsets + 3  # values need not start at 0
    assert _encoded(PURE, shifted) == _encoded(COMPILED, shifted) == _encoded(PURE, cols)
    cols.offset = cols.offset.astype(np.int32)  # another dtype: converted, same bytes
    cols.key.offsets = cols.key.offsets.astype(np.int64)
    assert _encoded(PURE, cols) == _encoded(COMPILED, cols)
    cols.headers.key.data = np.frombuffer(b"\xff" * 4, np.uint8)  # header keys "\xff": not UTF-8
    assert _encoded(PURE, cols) == _encoded(COMPILED, cols)
    assert _encoded(COMPILED, cols) == ("EncodeError", "headers.key: a header key is not UTF-8")


def test_writers_agree_on_lying_columns():
    """Offsets that point past the data or run backwards, and deltas just past their
    range: the compiled writer leaves them to the pure one, which says what it makes of
    them (the compiled one must never read outside the arrays)."""
    import numpy as np
    from fastkwire.records import RecordColumns

    def cols():
        return RecordColumns.from_records(
            [Record(i, i, b"k", b"v", [("h", b"v")]) for i in range(4)]
        )

    cases = []
    c = cols()
    c.headers.value.offsets = np.array([0, 1, 2, 3, 1 << 20], np.int32)  # past the data
    cases.append(c)
    c = cols()
    c.headers.key.offsets = np.array([0, 1, 0, 2, 3], np.int32)  # backwards
    cases.append(c)
    c = cols()
    c.headers.offsets = np.array([0, 2, 1, 3, 4], np.int32)  # header rows backwards
    cases.append(c)
    c = cols()
    c.headers.offsets = np.array([0, (1 << 31) - 1, 1, 3, 4], np.int32)  # past the rows, then back
    cases.append(c)
    for last in ((1 << 31) - 1, 1 << 31, -(1 << 31), -(1 << 31) - 1):  # offset delta range
        c = cols()
        c.offset = np.array([0, 1, 2, last], np.int64)
        cases.append(c)
    for stamps in (
        [-(1 << 63), 0, 1, (1 << 63) - 1],
        [(1 << 63) - 1, 0, 1, -1],
        [0, 5, (1 << 63) - 1, 2],
    ):
        c = cols()
        c.timestamp = np.array(stamps, np.int64)
        cases.append(c)
    for c in cases:
        assert _encoded(PURE, c) == _encoded(COMPILED, c)
    assert _encoded(COMPILED, cases[4])[0] != "EncodeError"  # delta 2**31 - 1 fits
    assert _encoded(COMPILED, cases[5])[0] == "EncodeError"


def _laid_out(values, rng, lead, null_bytes):
    """(data, offsets) of values back to back after `lead` random bytes, each null
    spanning up to null_bytes - 1 random bytes of its own."""
    data = bytearray(rng.randbytes(lead))
    offsets = [len(data)]
    for value in values:
        data += value if value is not None else rng.randbytes(rng.randrange(null_bytes))
        offsets.append(len(data))
    return data, offsets


def _padded(column, rng):
    """The same values with bytes between them and inside the null rows' spans: a
    writer must take each value from its own offsets and skip the nulls' bytes."""
    import numpy as np
    from fastkwire.records import BinaryColumn

    data, offsets = _laid_out(column.to_pylist(), rng, rng.randrange(3), 40)
    return BinaryColumn(
        np.frombuffer(bytes(data), np.uint8), np.array(offsets, np.int32), column.nulls.copy()
    )


LENGTHS = [0, 1, 3, 4, 7, 8, 15, 16, 17, 31, 32, 33, 63, 64, 100, 127, 128, 129, 300, 8200]


def test_column_writer_agrees_with_record_writers():
    """Random columns, value lengths around every copy path's edges and record bodies
    around the varint sizes of their length (so the room left for a length is sometimes
    too much and sometimes too little): the compiled writer from columns gives the bytes
    both writers give from the records."""
    from fastkwire.records import RecordColumns

    rng = random.Random(21)

    def value():
        return None if rng.random() < 0.15 else rng.randbytes(rng.choice(LENGTHS))

    for _ in range(60):
        base = rng.choice([0, 5, -(1 << 40)])
        stamp = rng.choice([0, 1 << 62, -(1 << 62)])
        records = [
            Record(
                base + rng.randrange(-1000, 1 << 20),
                stamp + rng.randrange(-(1 << 40), 1 << 40),
                value(),
                value(),
                [
                    (rng.choice(["", "h", "\u00e9" * 70]), value())
                    for _ in range(rng.choice([0, 0, 1, 2, 40]))
                ],
            )
            for _ in range(rng.randrange(1, 30))
        ]
        cols = RecordColumns.from_records(records)
        cols.key, cols.value = _padded(cols.key, rng), _padded(cols.value, rng)
        cols.headers.value = _padded(cols.headers.value, rng)
        expected = _encoded(PURE, records, base_offset=base)
        assert _encoded(COMPILED, cols, base_offset=base) == expected
        assert _encoded(PURE, cols, base_offset=base) == expected
        assert _encoded(COMPILED, records, base_offset=base) == expected


def test_writers_agree_on_random_lying_columns():
    """Random columns with at most one lie each: offsets out of order or past the data,
    arrays of the wrong length, header rows that do not add up, a null or non-UTF-8
    header key, deltas at the edges of their range. Both writers give the same bytes or
    the same error naming the array (the compiled one reads nothing outside the arrays:
    tools/asan.sh runs this too)."""
    import collections

    import numpy as np
    from fastkwire.records import BinaryColumn, HeaderColumns, RecordColumns

    rng = random.Random(22)
    edges32 = [-1, 2**31 - 1, -(2**31)]
    edges64 = [2**31, -(2**31) - 1, 2**63 - 1, -(2**63)]

    def column(n, lie, text=False):
        values = [
            None
            if rng.random() < 0.2 and not text
            else (
                rng.choice(["", "h", "\u00e9t"]).encode()
                if text
                else rng.randbytes(rng.randrange(20))
            )
            for _ in range(n)
        ]
        data, offs = _laid_out(values, rng, 0, 3)
        if lie == "offsets" and n:
            offs[rng.randrange(n + 1)] = rng.choice(edges32 + [len(data) + 1, offs[-1] // 2])
        elif lie == "length":
            offs = offs[:-1]
        elif lie == "nulls":
            values = values + [None]
        elif lie == "null" and n:
            values[rng.randrange(n)] = None
        elif lie == "utf8" and n:
            i = rng.randrange(n)
            data[offs[i] : offs[i]] = b"\xc3("
            offs[i + 1 :] = [o + 2 for o in offs[i + 1 :]]
        return BinaryColumn(
            np.frombuffer(bytes(data), np.uint8),
            np.array(offs, np.int32),
            np.array([v is None for v in values], bool),
        )

    outcomes = collections.Counter()
    for _ in range(400):
        n, hn = rng.randrange(1, 6), rng.randrange(0, 6)
        lie = rng.choice([None, None, "offsets", "length", "nulls", "rows", "edges"])
        where = rng.randrange(4)
        rows = [0] + sorted(rng.randrange(hn + 1) for _ in range(n - 1)) + [hn]
        if lie == "rows":
            rows[rng.randrange(n + 1)] = rng.choice(edges32 + [hn + 1])
        hlie = rng.choice(["null", "utf8"]) if where == 2 and lie is None else None
        cols = RecordColumns(
            np.array(
                [
                    rng.choice(edges64) if lie == "edges" and rng.random() < 0.5 else 7 + i
                    for i in range(n)
                ],
                np.int64,
            ),
            np.array(
                [
                    rng.choice(edges64) if lie == "edges" and rng.random() < 0.5 else 5
                    for _ in range(n)
                ],
                np.int64,
            ),
            column(n, lie if where == 0 else None),
            column(n, lie if where == 1 else None),
            HeaderColumns(
                np.array(rows, np.int32),
                column(hn, hlie or (lie if where == 2 else None), text=True),
                column(hn, lie if where == 3 else None),
            ),
        )
        base = rng.choice([0, 7] + ([2**31, -(2**31)] if lie == "edges" else []))
        outcome = _encoded(PURE, cols, base_offset=base)
        assert _encoded(COMPILED, cols, base_offset=base) == outcome
        outcomes["bytes" if isinstance(outcome, bytes) else outcome[1].split(":")[0]] += 1
    # Every kind of column was written, and every kind of lie refused.
    assert outcomes["bytes"] > 100, outcomes
    assert {
        "key.offsets",
        "value.nulls",
        "headers.offsets",
        "headers.key",
        "headers.value.offsets",
        "records[0].offset",
    } <= set(outcomes), outcomes

"""fastkwire.records against inputs that fight back: columns that change while they are
taken, the collector looking at half-built lists, columns past 2 GiB, legacy sets at the
int64 edges, and argument forms the two kernels must take or refuse alike."""

import os
import struct
import subprocess
import sys
import textwrap
import tracemalloc
import zlib
from pathlib import Path

import numpy as np
import pytest

from fastkwire import DecodeError, EncodeError, _compression, _records_python
from fastkwire.records import BinaryColumn, Record, RecordColumns

from record_peers import needs_cramjam
from test_records import make_batch, raw_record

ONE = [Record(0, 0, b"k", b"v", [])]


def run_isolated(code):
    """Run `code` in a fresh interpreter: a crash fails the test instead of the run."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr[-3000:]}"
    return done.stdout


def outcome(fn):
    try:
        return fn()
    except (EncodeError, DecodeError) as e:
        return type(e), str(e)


# ---------------------------------------------------------------- columns that change


def moving_columns(key_data, moved_to, how):
    """ONE as columns whose key offsets move to `moved_to` while the value column is
    taken: by an ndarray subclass's __array_finalize__ (`finalize`) or by a
    BinaryColumn property (`property`)."""
    cols = RecordColumns.from_records([Record(0, 0, key_data, b"v", [])])
    ko = cols.key.offsets
    if how == "finalize":

        class Nulls(np.ndarray):
            def __array_finalize__(self, obj):
                ko[1] = moved_to

        cols.value.nulls = cols.value.nulls.view(Nulls)
        ko[1] = len(key_data)
    else:

        class Moving(BinaryColumn):
            __slots__ = ("real",)

            def __init__(self, column):
                self.real, self.offsets, self.nulls = column.data, column.offsets, column.nulls

            @property
            def data(self):
                ko[1] = moved_to
                return self.real

        cols.value = Moving(cols.value)
    return cols


@pytest.mark.parametrize("how", ["finalize", "property"])
@pytest.mark.parametrize(
    "key_data, moved_to",
    [
        (b"k", 1 << 16),  # read past the key data
        (b"k" * 65536, 1 << 16),  # a record longer than the room made for it
        (b"k", 40),  # within the heap: its bytes would be written out
    ],
)
def test_columns_changed_while_taken(records_codec, key_data, moved_to, how):
    """The offsets are checked after every array is taken, so the writer writes the
    columns as they are once taken, or refuses them: never past the arrays."""
    cols = moving_columns(key_data, moved_to, how)
    got = outcome(lambda: records_codec.write_batch(cols))
    if isinstance(got, bytes):
        (batch,) = records_codec.read_batches(got)
        assert batch.records == [Record(0, 0, key_data, b"v", [])]
    else:
        assert got[0] is EncodeError and "key.offsets" in got[1]


def test_columns_changed_while_taken_in_a_fresh_interpreter():
    """The reproducer as given, where a heap overflow aborts the interpreter."""
    out = run_isolated("""
        import numpy as np
        from fastkwire import records
        from fastkwire.records import Record, RecordColumns
        cols = RecordColumns.from_records([Record(0, 0, b"k", b"v", [])]); ko = cols.key.offsets
        class Nulls(np.ndarray):
            def __array_finalize__(self, obj): ko[1] = 1 << 16
        cols.value.nulls = cols.value.nulls.view(Nulls); ko[1] = 1
        print(records.read_batches(records.write_batch(cols))[0].records[0].key)
    """)
    assert out.strip() == "b'k'"


@pytest.mark.parametrize(
    "data",
    [
        b"kv",
        memoryview(b"kv").cast("c"),
        np.array([True, False]),
        np.array([1, 2], dtype=np.int8),
        np.array([1, 2], dtype=np.uint16),
    ],
)
def test_binary_data_forms_agree(records_codec, data):
    """BinaryColumn.data must be a uint8 array: both kernels refuse everything else."""
    cols = RecordColumns.from_records([Record(0, 0, b"k", b"v", [])])
    cols.key = BinaryColumn(data, np.array([0, 1], dtype=np.int32), np.array([False]))
    with pytest.raises(EncodeError, match="expected a one-dimensional uint8 array") as e:
        records_codec.write_batch(cols)
    assert e.value.path == "key.data"


def test_binary_data_as_a_bytearray_written_alike(records_codec):
    """A bytearray is uint8 to numpy: the pure writer takes it, for both kernels."""
    cols = RecordColumns.from_records([Record(0, 0, b"k", b"v", [])])
    cols.key = BinaryColumn(bytearray(b"kv"), np.array([0, 1], dtype=np.int32), np.array([False]))
    assert records_codec.write_batch(cols) == records_codec.write_batch(ONE)


def test_columns_of_other_dtypes_written_alike(records_codec):
    """int64 offsets, a big-endian int64 offset column and a sliced (strided) array are
    not the compiled writer's arrays: the pure writer takes them, for both kernels."""
    expect = records_codec.write_batch([Record(5, 7, b"k", b"v", [("h", b"x")])])
    cols = RecordColumns.from_records([Record(5, 7, b"k", b"v", [("h", b"x")])])
    cols.key.offsets = cols.key.offsets.astype(np.int64)
    cols.offset = cols.offset.astype(">i8")
    cols.timestamp = np.array([7, 0], dtype=np.int64)[::2]
    assert records_codec.write_batch(cols) == expect


def test_record_subclass_is_written_from_its_attributes(records_codec):
    class Shown(Record):
        __slots__ = ("stored",)

        @property
        def value(self):
            return b"from the property"

        @value.setter
        def value(self, v):
            self.stored = v

    shown = Shown(0, 0, b"k", b"v", [])
    Record.value.__set__(shown, b"in the slot")  # what a slot reader would write
    data = records_codec.write_batch([shown])
    assert records_codec.read_batches(data)[0].records[0].value == b"from the property"


@pytest.mark.slow
def test_67_million_records_are_written(records_codec):
    """The compiled writer's first guess of the output is capped: a long list is not
    refused before anything is written (67,108,864 records once passed 2 GB)."""
    if records_codec.kernel is _records_python:
        pytest.skip("the pure writer makes no guess (and would take minutes)")
    r = Record(None, 0, None, None, [])
    data = records_codec.write_batch([r] * 67_108_864)
    assert struct.unpack_from(">i", data, 57)[0] == 67_108_864


# ---------------------------------------------------------------- the collector


@pytest.mark.parametrize("pure", ["0", "1"], ids=["default", "pure"])
def test_headers_lists_never_seen_half_built(pure, monkeypatch):
    """A gc callback walking gc.get_objects() during read_batches meets no list with
    NULL items (the reproducer crashed the interpreter)."""
    monkeypatch.setenv("FASTKWIRE_PURE", pure)
    out = run_isolated("""
        import gc, sys
        from fastkwire import records
        from fastkwire.errors import DecodeError
        from fastkwire.records import Record
        b = records.write_batch([Record(i, 0, b"k", b"v", [("a%d" % j, b"x") for j in range(50)])
                                 for i in range(50)])
        # The same batch claiming one record more: the reader fails past the 50th, its
        # records list half built, making the DecodeError (Python code: where CPython
        # 3.12+ can collect inside the call, so a collection is forced there).
        bad = b[:57] + (51).to_bytes(4, "big") + b[61:]
        seen, inside = [], [0]
        def walk(phase, info):
            if phase == "start":
                seen.append(sum(len(list(o)) for o in gc.get_objects(0) if type(o) is list))
        def profile(frame, event, arg):  # collections forced where allocations start none
            if event == "call":
                inside[0] += frame.f_globals.get("__name__") == "fastkwire.errors"
                gc.collect(0)
        gc.callbacks.append(walk)
        gc.set_threshold(1)
        sys.setprofile(profile)
        n = sum(len(r.headers) for r in records.read_batches(b)[0].records)
        try:
            records.read_batches(bad, check_crc=False)
        except DecodeError as e:
            failed = e.reason
        sys.setprofile(None)
        gc.callbacks.remove(walk)
        print(n, len(seen) > 10, inside[0] > 0, failed.startswith("truncated"))
    """)
    assert out.split() == ["2500", "True", "True", "True"]


# ---------------------------------------------------------------- 2 GiB of values


@pytest.mark.parametrize(
    "column, record",
    [
        ("value", lambda n: raw_record(key=None, value=b"x" * n)),
        ("key", lambda n: raw_record(key=b"x" * n, value=None)),
        ("headers.value", lambda n: raw_record(headers=[(b"h", b"x" * n)])),
    ],
)
def test_column_limit(records_codec, monkeypatch, column, record):
    """Past the limit of int32 offsets (lowered here), read_columns refuses the batch
    that passes it, naming the column; the same batches one at a time read."""
    monkeypatch.setattr(_records_python, "COLUMN_LIMIT", 100)
    first, second = make_batch(record(60), 1), make_batch(record(60), 1, base_offset=1)
    assert len(records_codec.read_columns(first)) == 1
    with pytest.raises(DecodeError, match=f"the {column} column of one read_columns call") as e:
        records_codec.read_columns(first + second)
    assert e.value.offset == len(first) + 61


def test_column_limit_counts_header_rows(records_codec, monkeypatch):
    monkeypatch.setattr(_records_python, "COLUMN_LIMIT", 3)
    data = make_batch(raw_record(headers=[(b"", None)] * 2), 1) * 2
    with pytest.raises(DecodeError, match="header rows"):
        records_codec.read_columns(data)


@pytest.mark.slow
@needs_cramjam
def test_two_one_gib_values_are_refused(records_codec):
    """The real case: int32 offsets would wrap (the second value read back as b"")."""
    inner = raw_record(key=None, value=bytes(1 << 30))
    comp = _compression.compress("zstd", inner)
    one = make_batch(comp, 1, attrs=4)
    with pytest.raises(DecodeError, match="the value column"):
        records_codec.read_columns(one + one, max_decompressed=(1 << 30) + 100)


# ---------------------------------------------------------------- sizes from the batch


@pytest.mark.parametrize("count", [0, 1])
def test_memory_sized_from_what_the_batch_can_hold(records_codec, count):
    """A batch that claims few records followed by megabytes of zeros is refused
    without arrays for the most those bytes could hold (once 9x their size)."""
    size = 16 << 20
    data = make_batch(bytes(size), count)
    tracemalloc.start()
    try:
        with pytest.raises(DecodeError):
            records_codec.read_columns(data, check_crc=False)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # count 0 holds nothing; one record at most one key and one value of its bytes.
    assert peak < (1 << 20 if count == 0 else 2 * size + (1 << 20))


def test_batches_past_the_first_guess_read_alike(records_codec):
    """Headers past the first guess, big values and non-ASCII keys: the measured path."""
    recs = [
        Record(i, i, b"k" * 300, b"v" * 5000, [("h%d" % j, b"x" * 40) for j in range(9)])
        for i in range(20)
    ] + [Record(20, 0, None, None, [("é", b"y"), ("ü", None)])]
    data = records_codec.write_batch(recs)
    assert records_codec.read_columns(data).to_records() == recs


# ---------------------------------------------------------------- legacy sets


def message(magic, attrs, key, value, offset=0, ts=0):
    body = struct.pack(">bb", magic, attrs) + (struct.pack(">q", ts) if magic else b"")
    for v in (key, value):
        body += struct.pack(">i", -1) if v is None else struct.pack(">i", len(v)) + v
    body = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(body)) + body


INT64_MAX = (1 << 63) - 1


@needs_cramjam
def test_legacy_columns_keep_any_int64(records_codec):
    """Columns of legacy messages are what read_batches gives: offsets 3e9 apart and
    timestamps at the int64 extremes in one set (the compiled kernel once re-encoded
    them as a v2 batch, which cannot hold them)."""
    inner = message(1, 0, b"k", b"v", offset=0, ts=-(1 << 63)) + message(
        1, 0, None, b"w", offset=3_000_000_000, ts=INT64_MAX
    )
    data = message(
        1, 1, None, _compression.compress("gzip", inner), offset=3_000_000_000
    ) + message(0, 0, b"", None, offset=INT64_MAX)
    expect = [r for b in records_codec.read_batches(data) for r in b.records]
    assert [r.offset for r in expect] == [0, 3_000_000_000, INT64_MAX]
    cols = records_codec.read_columns(data)
    assert cols.to_records() == expect
    assert cols.timestamp.tolist() == [-(1 << 63), INT64_MAX, -1]


@needs_cramjam
def test_legacy_shift_past_int64(records_codec):
    inner = message(1, 0, None, b"a", offset=0) + message(1, 0, None, b"b", offset=1)
    data = message(1, 1, None, _compression.compress("gzip", inner), offset=INT64_MAX)
    (batch,) = records_codec.read_batches(data)  # the last inner message is at the wrapper's
    assert [r.offset for r in batch.records] == [INT64_MAX - 1, INT64_MAX]
    inner = message(1, 0, None, b"a", offset=5) + message(1, 0, None, b"b", offset=1)
    data = message(1, 1, None, _compression.compress("gzip", inner), offset=INT64_MAX)
    for read in (records_codec.read_batches, records_codec.read_columns):
        with pytest.raises(DecodeError, match="offset out of the int64 range") as e:
            read(data)
        assert e.value.offset == 0


# ---------------------------------------------------------------- crc32c


@pytest.mark.parametrize(
    "data, crc",
    [
        (b"123456789", 0),
        (bytearray(b"123456789"), 0),
        (memoryview(b"x123456789")[1:], 0),
        (np.frombuffer(b"12345678", dtype=np.uint32), 7),
        (b"", 0xFFFFFFFF),
        (b"a", True),
    ],
)
def test_crc32c_takes_the_same_inputs(records_codec, data, crc):
    assert records_codec.kernel.crc32c(data, crc) == _records_python.crc32c(data, crc)


@pytest.mark.parametrize(
    "data, crc, error",
    [
        ("text", 0, TypeError),
        (123, 0, TypeError),
        ([1, 2], 0, TypeError),
        (None, 0, TypeError),
        (memoryview(b"abcdef")[::2], 0, BufferError),
        (np.zeros((4, 4), np.uint8)[:, 1], 0, BufferError),
        (b"x", -1, ValueError),
        (b"x", 1 << 32, ValueError),
        (b"x", 1 << 70, ValueError),
        (b"x", 1.0, TypeError),
        (b"x", "0", TypeError),
        (b"x", None, TypeError),
    ],
)
def test_crc32c_refuses_the_same_inputs(records_codec, data, crc, error):
    with pytest.raises(error) as expected:
        _records_python.crc32c(data, crc)
    with pytest.raises(error) as e:
        records_codec.kernel.crc32c(data, crc)
    assert str(e.value) == str(expected.value)


# ---------------------------------------------------------------- the fuzzer's columns


def test_hostile_columns_seeds():
    """A short run of fuzz/hostile_records.py (lying arrays, getters that rewrite an
    array while the writer takes the columns): the kernels agree on every seed."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
    try:
        import hostile_records
    finally:
        sys.path.pop(0)
    if hostile_records.CY is None or os.environ.get("FASTKWIRE_PURE"):
        pytest.skip("the compiled kernel is not in use: nothing to compare with")
    hooked = 0
    for seed in range(400):
        hostile_records.check(seed)
        hooked += hostile_records.build(seed)[1]
    assert hooked > 100


# ---------------------------------------------------------------- first-afternoon edges


def test_compression_none_is_no_compression(records_codec):
    assert records_codec.write_batch(ONE, compression=None) == records_codec.write_batch(ONE)


def test_to_arrow_without_pyarrow_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)  # import pyarrow now fails
    cols = RecordColumns.from_records(ONE)
    with pytest.raises(ImportError, match=r"pip install 'fastkwire\[arrow\]'"):
        cols.to_arrow()

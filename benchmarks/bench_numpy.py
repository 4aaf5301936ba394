"""Encoding a 1,000,000-element []int32 field from numpy arrays of several dtypes and
layouts, against numpy's own conversion to big-endian bytes.

bench_streams_heartbeat.py measures the numpy targets (the large heartbeat against kio,
decoding against frombuffer+astype); this file shows what the array's form costs on the
way in: native int32 (a byte swap), big-endian int32 (a copy), int64 (range-checked),
strided int32 (read in place). Not part of compare.py's tables.
"""

import importlib

import pytest

np = pytest.importorskip("numpy")

N = 1_000_000
FORMS = {
    "i4": lambda a: a.astype("i4"),
    ">i4": lambda a: a.astype(">i4"),
    "i8": lambda a: a.astype("i8"),
    "i4[::2]": lambda a: np.repeat(a.astype("i4"), 2)[::2],
}
MODULES = {"cython": "fastkwire._messages_cython", "pure": "fastkwire._messages_python"}


def _message(module, partitions):
    R = importlib.import_module(module).StreamsGroupHeartbeatRequest
    return R(
        group_id="order-processors",
        member_id="consumer-1",
        member_epoch=12,
        active_tasks=[R.TaskIds(subtopology_id="0", partitions=partitions)],
    )


@pytest.fixture(scope="module")
def expected():
    """The body, encoded from a plain list by the pure codec."""
    return _message(MODULES["pure"], list(range(N))).encode(0)


@pytest.mark.parametrize("form", list(FORMS))
@pytest.mark.parametrize("impl", list(MODULES))
def test_encode_int32_million_from_array(benchmark, expected, impl, form):
    try:
        msg = _message(MODULES[impl], FORMS[form](np.arange(N)))
    except ImportError as exc:
        pytest.skip(f"{impl} is not importable: {exc}")
    assert msg.encode(0) == expected
    benchmark.group = "1,000,000 x int32 encode from an array"
    benchmark.extra_info.update(impl=impl, form=form)
    benchmark(msg.encode, 0)


@pytest.mark.parametrize("form", list(FORMS))
def test_numpy_to_big_endian_bytes(benchmark, form):
    """numpy alone: the array as big-endian int32 bytes (no Kafka framing)."""
    arr = FORMS[form](np.arange(N))
    assert arr.astype(">i4").tobytes() == np.arange(N, dtype=">i4").tobytes()
    benchmark.group = "1,000,000 x int32 encode from an array"
    benchmark.extra_info.update(impl="numpy astype+tobytes", form=form)
    benchmark(lambda: arr.astype(">i4").tobytes())

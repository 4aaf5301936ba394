"""Every codec test runs against both implementations through the `impl` fixture."""
import importlib
import os

import pytest

IMPLEMENTATIONS = ["python", "cython"]


def _load(name):
    module = "fastkwire._messages_python" if name == "python" else "fastkwire._messages_cython"
    try:
        return importlib.import_module(module)
    except ImportError:
        return None


def _wanted():
    # FASTKWIRE_PURE=1 (the pure CI run) tests the pure implementation alone.
    if os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
        return ["python"]
    return IMPLEMENTATIONS


@pytest.fixture(params=_wanted())
def impl(request):
    """The generated message module of one implementation."""
    mod = _load(request.param)
    if mod is None:
        if os.environ.get("FASTKWIRE_REQUIRE_EXTENSION"):
            pytest.fail("the compiled extension did not import")
        pytest.skip("compiled extension not built")
    return mod


@pytest.fixture(params=_wanted())
def core(request):
    """The wire primitives of one implementation (_pure or _core)."""
    name = "fastkwire._pure" if request.param == "python" else "fastkwire._core"
    try:
        return importlib.import_module(name)
    except ImportError:
        if os.environ.get("FASTKWIRE_REQUIRE_EXTENSION"):
            pytest.fail("the compiled extension did not import")
        pytest.skip("compiled extension not built")


def pytest_addoption(parser):
    parser.addoption("--run-slow", action="store_true", help="run long tests (fuzzing, packaging)")


def pytest_collection_modifyitems(config, items):
    if config.getoption("--run-slow") or os.environ.get("FASTKWIRE_SLOW_TESTS"):
        return
    skip = pytest.mark.skip(reason="slow: run with --run-slow or FASTKWIRE_SLOW_TESTS=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(params=_wanted())
def records_codec(request):
    """fastkwire.records' read_batches/read_columns/write_batch over one implementation's
    kernel (_records_python or the compiled _records)."""
    from fastkwire._batches import Codec

    name = "fastkwire._records_python" if request.param == "python" else "fastkwire._records"
    try:
        kernel = importlib.import_module(name)
    except ImportError:
        if os.environ.get("FASTKWIRE_REQUIRE_EXTENSION"):
            pytest.fail("the compiled extension did not import")
        pytest.skip("compiled extension not built")
    return Codec(kernel)

"""Every codec test runs against both implementations through the `impl` fixture (the
message classes), `core` (the wire primitives) or `records_codec` (the record kernels).

Where a new test goes, by what it is about:
- one message's bytes against the vectors: test_messages.py; a primitive: test_primitives.py;
  every message and version at once: test_all_apis.py; against kio or kafka-python:
  test_peers.py (their adapters in peers.py);
- hostile bytes: test_robustness.py; hostile Python values: test_hostile_values.py; what
  decoding builds: test_decoded_objects.py; memory: test_memory.py; threads: test_threads.py;
- record batches: test_records.py (magic 2), _columns, _compression (and legacy sets),
  _describe, _differential (the kernels on mutated batches), _hostile_inputs (inputs that
  fight back); record peers live in record_peers.py;
- explain: test_explain.py, test_explain_records.py; the schema converter: test_convert.py;
  the definitions: test_schemas.py; the stubs: test_typing.py;
- connection, TLS and SASL: test_connection.py, test_sasl.py; admin against fakes:
  test_admin_scripted.py, test_admin_hostile.py; against fastkwire's broker: test_admin_broker.py;
  against Tansu: test_admin_tansu.py, test_admin_gateway.py; real clients' traffic: test_real_traffic*.py;
- the proxy (fastkwire.proxy): test_proxy*.py; trailing="keep": test_trailing.py;
- the broker (fastkwire.broker, fastkwire.testing): its plain objects and handlers without a
  socket: test_broker_log.py; real clients against it: test_broker_clients.py, and in
  groups: test_broker_groups_clients.py; hostile clients and the request path's fuzz
  smoke: test_broker_hostile.py;
- the accelerators: test_kafka_python*.py, test_aiokafka*.py (stock against accelerated:
  accelerated.py);
- what pip installs: test_packaging.py; the workflows: test_workflows.py.
A test that needs an optional peer (kio, kafka-python, aiokafka, cramjam) skips without it:
no module imports one at its top unguarded. Long runs carry @pytest.mark.slow (--run-slow).
"""

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
    """The message module of one implementation (its classes built from the schemas)."""
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


def slow_enabled(config):
    return bool(config.getoption("--run-slow") or os.environ.get("FASTKWIRE_SLOW_TESTS"))


def pytest_configure(config):
    # Before collection, in every xdist worker too: the walks of the protocol visit
    # every version (tests/scope.py) only when asked, whoever started pytest.
    import scope

    scope.EVERY_VERSION = slow_enabled(config)
    # FASTKWIRE_PROXY_LOOP=uvloop: every event loop of the run is uvloop's (the proxy's in
    # asyncio.run, BackgroundProxy's and the command's read the variable themselves).
    if os.environ.get("FASTKWIRE_PROXY_LOOP") == "uvloop":
        import asyncio

        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())


def pytest_collection_modifyitems(config, items):
    if slow_enabled(config):
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

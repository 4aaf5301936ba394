"""Encoding and decoding from several threads at once, and the free-threading declaration.

The codecs keep no mutable state of their own: everything they touch is the message or
the buffer passed in. So several threads sharing messages and input buffers must get
exactly what one thread gets. The switch interval is cut to a microsecond so that, on a
GIL build, the threads interleave as finely as the interpreter allows.
"""

import os
import subprocess
import sys
import sysconfig
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from fastkwire.errors import DecodeError, EncodeError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import differential as D  # noqa: E402
import scope  # noqa: E402

THREADS = 4
ROUNDS = 30
SRC = Path(__file__).resolve().parents[1] / "src" / "fastkwire"


def _work(impl):
    """[(cls, version, message, body, broken body)] for every message and version."""
    items = []
    for name, version in scope.pairs(D.message_versions()):
        cls = getattr(impl, name)
        for d in (D.full_dict(name, version), {}):
            msg = cls.from_dict(d)
            body = msg.encode(version)
            items.append((cls, version, msg, body, body[:-1] + b"\xff\xff"))
    return items


def _results(items, data_of=bytes):
    """What one pass over the items gives: bytes, decoded dicts and errors."""
    out = []
    for cls, version, msg, body, broken in items:
        decoded = cls.decode(data_of(body), version)
        try:
            cls.decode(data_of(broken), version)
            error = None
        except DecodeError as e:
            error = (e.offset, e.reason, e.path)
        out.append((msg.encode(version), repr(decoded.to_dict()), error))
    return out


def _in_threads(fn):
    """fn(thread index) in THREADS threads started together; their results in order."""
    barrier = threading.Barrier(THREADS)
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        with ThreadPoolExecutor(THREADS) as pool:
            return list(pool.map(lambda k: (barrier.wait(), fn(k))[1], range(THREADS)))
    finally:
        sys.setswitchinterval(old)


def test_threads_get_what_one_thread_gets(impl):
    items = _work(impl)
    expected = _results(items)
    assert all(e[2] is not None for e in expected)  # every broken body is rejected
    got = _in_threads(lambda k: [_results(items) for _ in range(ROUNDS)])
    for per_thread in got:
        for result in per_thread:
            assert result == expected


def test_threads_share_input_buffers(impl):
    """The same bytearray and memoryview objects, read by every thread at once."""
    items = _work(impl)
    expected = _results(items)
    shared = {body: bytearray(body) for _, _, _, body, _ in items}
    shared.update({broken: memoryview(bytearray(broken)) for *_, broken in items})
    got = _in_threads(lambda k: [_results(items, shared.__getitem__) for _ in range(ROUNDS)])
    for per_thread in got:
        for result in per_thread:
            assert result == expected


def test_threads_encode_into_one_buffer(impl):
    """Each thread writes its own slice of one shared buffer with encode_into."""
    items = _work(impl)
    size = sum(len(body) for *_, body, _ in items)
    buf = bytearray(size * THREADS)

    def fill(k):
        offset = k * size
        for _ in range(ROUNDS):
            at = offset
            for _, version, msg, body, _ in items:
                at += msg.encode_into(buf, at, version)
        return at - offset

    assert _in_threads(fill) == [size] * THREADS
    assert buf == b"".join(body for *_, body, _ in items) * THREADS


@pytest.mark.parametrize("change", ["grow", "shrink", "clear"])
def test_message_changed_during_encode_is_an_encode_error(impl, change):
    """A value whose __index__ changes an array mid-encode (what another thread could do
    on a build without the GIL) is an EncodeError in both codecs: never malformed bytes,
    never another exception."""
    cls = impl.ApiVersionsResponse
    msg = cls(api_keys=[cls.ApiVersion(api_key=i, max_version=1) for i in range(3)])
    changes = {
        "grow": lambda: msg.api_keys.extend(cls.ApiVersion(api_key=9) for _ in range(50)),
        "shrink": lambda: msg.api_keys.pop(),
        "clear": lambda: msg.api_keys.clear(),
    }

    class Sneaky:
        def __index__(self):
            changes[change]()
            return 5

    msg.api_keys[1].min_version = Sneaky()
    with pytest.raises(EncodeError) as info:
        msg.encode(3)
    assert info.value.reason == "a value changed while it was being encoded"


# ---------------------------------------------------------------- free-threading

EXTENSIONS = [
    "fastkwire._core",
    "fastkwire._engine",
    "fastkwire._records",
    "fastkwire._kafka_python",
    "fastkwire._aiokafka",
    "fastkwire._forward",
    "fastkwire._framebuf",
]


def test_every_extension_declares_it_runs_without_the_gil():
    """Each compiled module declares free-threading compatibility (Cython turns the
    directive into the Py_mod_gil slot): docs/robustness.md says what makes each safe
    without the GIL, and tests/test_thread_hammer.py attacks it."""
    declared = set()
    for path in sorted(SRC.glob("*.pyx")):
        first = path.read_text().splitlines()[0]
        assert first.startswith("# cython:"), path.name
        if "freethreading_compatible=True" in first:
            declared.add(f"fastkwire.{path.stem}")
    assert declared == set(EXTENSIONS)


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"),
    reason="needs a free-threaded (no-GIL) Python build",
)
def test_importing_the_extensions_leaves_the_gil_off():
    """On a free-threaded Python importing every extension leaves the GIL disabled, with
    no RuntimeWarning (one would be an error here)."""
    for name in EXTENSIONS:
        pytest.importorskip(name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHON_GIL"}
    code = f"import sys, {', '.join(EXTENSIONS)}; print(sys._is_gil_enabled())"
    out = subprocess.run(
        [sys.executable, "-W", "error::RuntimeWarning", "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.strip() == "False"
    assert "GIL" not in out.stderr


FIRST_USE = """
import sys, threading
sys.path.insert(0, {fuzz!r})
import differential as D
import fastkwire._messages_cython as C
name = "StreamsGroupHeartbeatRequest"
body = D.PY.StreamsGroupHeartbeatRequest.from_dict(D.full_dict(name, 0)).encode(0)
modes = ("list", "numpy") if "numpy" in D.ARRAYS else ("list",)
barrier = threading.Barrier(8)
results = []

def first_use(mode):
    barrier.wait()
    results.append(repr(C.StreamsGroupHeartbeatRequest.decode(body, 0, arrays=mode).to_dict()))

threads = [threading.Thread(target=first_use, args=(modes[i % len(modes)],)) for i in range(8)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert len(set(results)) == 1 and len(results) == 8, results
"""


@pytest.mark.skipif(
    not sysconfig.get_config_var("Py_GIL_DISABLED"),
    reason="needs a free-threaded (no-GIL) Python build",
)
def test_first_use_from_many_threads_at_once():
    """Tables the compiled core builds on first use (small ints, numpy dtypes) must come
    out right when eight threads get there at once, in fresh interpreters, 20 times."""
    pytest.importorskip("fastkwire._messages_cython")
    code = FIRST_USE.format(fuzz=str(Path(__file__).resolve().parents[1] / "fuzz"))
    for _ in range(20):
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)

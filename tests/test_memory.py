"""No memory grows over many encode/decode iterations, failing decodes included.

Each iteration encodes a message (to bytes and into a buffer), decodes it from a fresh
bytearray (a reference kept by mistake keeps that bytearray alive, so it shows), and
decodes three broken copies: cut short, invalid UTF-8 and a huge count. Growth is measured
after a warm-up, with tracemalloc (every Python allocation, by either implementation) and
with the process's resident set size (anything else).

The default suite runs 150 iterations over all messages; the slow one (--run-slow) 100,000.
"""

import gc
import os
import resource
import sys
import tracemalloc
from pathlib import Path

import pytest

from fastkwire.errors import DecodeError

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "fuzz"))
import differential as D  # noqa: E402

NAMES = sorted(D.classes())


def _broken(site_list, body):
    """Three broken copies of a body: cut short, invalid UTF-8, a huge count."""
    out = [body[: len(body) // 2]] if body else []
    for s in site_list:
        if s.kind == "string" and s.content:
            bad = bytearray(body)
            bad[s.offset + s.size] = 0xFF
            out.append(bytes(bad))
            break
    for s in site_list:
        if s.kind == "array":
            out.append(D.replace(body, s.offset, s.size, D.hostile_values(s)[-3][1]))
            break
    return out


def _items(impl, name):
    """[(cls, version, message, body, broken bodies)] for each version of one message."""
    cls = getattr(impl, name)
    items = []
    for version in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        msg = cls.from_dict(D.full_dict(name, version))
        body = msg.encode(version)
        target, frame = D.frame_of(D.PY, name, version, D.full_dict(name, version))
        if target[0] == "body":
            broken = [body[:-1]] if body else []
        else:
            # sites of the frame, moved to the body (which ends the frame)
            shift = len(frame) - len(body)
            found = [s for s in D.sites(frame, target) if s.offset >= shift]
            found = [
                D.Site(s.offset - shift, s.size, s.form, s.kind, s.nullable, s.content)
                for s in found
            ]
            broken = _broken(found, body)
        for bad in broken:
            with pytest.raises(DecodeError):
                cls.decode(bad, version)
        items.append((cls, version, msg, body, broken))
    return items


def _iterate(items, count):
    buf = bytearray(4096)
    for i in range(count):
        cls, version, msg, body, broken = items[i % len(items)]
        assert msg.encode(version) == body
        msg.encode_into(buf, 0, version)
        data = bytearray(body)
        cls.decode(data, version)
        for bad in broken:
            try:
                cls.decode(bytearray(bad), version)
            except DecodeError:
                pass


def _rss():
    """Resident set size in bytes (Linux: now; elsewhere: the peak, which also grows)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        scale = 1 if sys.platform == "darwin" else 1024
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale


def _growth(items, count):
    """(traced bytes, RSS bytes) gained over `count` iterations after a warm-up."""
    _iterate(items, min(count, 100))
    gc.collect()
    tracemalloc.start()
    try:
        # Each item once more under the tracer before the baseline: what is made once
        # while tracing (the free-threaded build's first traced allocations take a
        # 4 KiB block that stays) is no growth.
        _iterate(items, min(count, len(items)))
        gc.collect()
        traced0, rss0 = tracemalloc.get_traced_memory()[0], _rss()
        _iterate(items, count)
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - traced0, _rss() - rss0
    finally:
        tracemalloc.stop()


def _check(impl, names, count, traced_limit, rss_limit):
    items = [item for name in names for item in _items(impl, name)]
    traced, rss = _growth(items, count)
    print(f"{impl.__name__} {names}: {count} iterations, traced {traced:+d} B, RSS {rss:+d} B")
    # A leak of one small object per iteration would be count * ~50 bytes.
    assert traced < traced_limit, f"{names}: {traced} bytes traced after {count} iterations"
    # AddressSanitizer (tools/asan.sh) holds freed memory in quarantine: RSS then says
    # nothing about leaks, and the traced bytes above still do.
    if "ASAN_OPTIONS" not in os.environ:
        assert rss < rss_limit, f"{names}: RSS grew by {rss} bytes after {count} iterations"


def test_no_growth_short(impl):
    """Every version of every message, 150 iterations in all."""
    _check(impl, NAMES, 150, traced_limit=4 * 1024, rss_limit=4 << 20)


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
def test_no_growth_100k(impl, name):
    """100,000 iterations of each message, its versions in turn."""
    _check(impl, [name], 100_000, traced_limit=64 * 1024, rss_limit=2 << 20)


def test_decode_keeps_no_reference_to_its_input(impl):
    """A buffer export or a reference not released would raise the refcount for good."""
    for name in NAMES:
        for cls, version, _, body, broken in _items(impl, name):
            for data in [bytearray(body)] + [bytearray(b) for b in broken]:
                before = sys.getrefcount(data)
                for _ in range(100):
                    try:
                        cls.decode(data, version)
                    except DecodeError:
                        pass
                assert sys.getrefcount(data) == before, (name, version)
                data.append(0)  # resizable again: no buffer export left behind


def test_a_leak_would_be_seen(impl):
    """The measurement is not blind: keeping every decoded message is reported."""
    items = _items(impl, "LeaveGroupRequest")
    kept = []
    real_decode = items[0][0].decode

    class Keeping:
        @staticmethod
        def decode(data, version):
            kept.append(real_decode(data, version))

    leaky = [(Keeping, v, m, b, []) for _, v, m, b, _ in items]
    traced, _ = _growth(leaky, 150)
    assert traced > 4 * 1024

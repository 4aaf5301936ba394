"""Hostile calls on the broker's FrameBuffer (fastkwire._framebuf, compiled, and its pure
fallback) against its contract.

    python fuzz/hostile_framebuf.py --loop 20000 --seed 1     # the short run (CI, ~5 s)
    python fuzz/hostile_framebuf.py --long --seed 7           # 1,000,000 operations

Each case makes a FrameBuffer from a random size (negative, 0, small, up to 64 KiB, past
MAX_SIZE) and head (bytes, bytearray, memoryviews sliced, cast, strided or released,
array('i'), str, None, a head longer than the size), then runs random operations on it:
buffer exports (memoryview) held and released, writes of random bytes through them (into
the export's length only; an export is dropped once written() counts its read, as a
transport asks for a buffer for every read), written(n) with n anywhere (negative, past
the room left, huge), take() at any time, len(), and exports taken after take(). A model tracks what was
written, and the contract is checked as invariants:
- a bad size or head is a ValueError, TypeError or BufferError, nothing else;
- an export is exactly the part not yet counted as read (its length len(buf)), writable,
  one at a time; none after the frame is full or taken;
- written(n) counts n only within the room left (else ValueError, nothing counted) and
  says whether the frame is full;
- take() gives the frame's bytes (the head, then what was written through the exports,
  as counted) exactly once, as plain bytes, only when full and with no export held (the
  compiled one; the fallback copies, so a held view does not matter there);
- a slice of the buffer (buf[:], as asyncio's TLS transport takes) is an export like the
  buffer's own; a slice whose bounds' __index__ calls written(0), len() or take() changes
  nothing, and take() inside it is refused (the compiled one: the slice's export is held);
- the bytes being filled are never reachable through the collector (gc.get_referents):
  they are uninitialized until read, and a hash cached on them early would be wrong;
- the bytes CPython shares (b"", the 1-byte ones) are never written, whatever the size;
- no other exception, no crash (run it under ASan with tools/asan.sh for memory errors).
Anything else is printed with its case and counted; the exit status is 1 if any.
"""

import argparse
import array
import gc
import random
import sys

from fastkwire.broker._frame_buffer import MAX_SIZE, PureFrameBuffer

EXPECTED = (ValueError, TypeError, BufferError)
STATS = {"made": 0, "written": 0, "taken": 0}  # how far the cases went, printed


def _kinds():
    kinds = [("pure", PureFrameBuffer)]
    try:
        from fastkwire._framebuf import FrameBuffer
    except ImportError:
        print("fastkwire._framebuf is not built: the pure fallback only")
    else:
        kinds.append(("compiled", FrameBuffer))
    return kinds


def _head(rng):
    n = rng.choice([0, 1, 3, 4, 100, 5000])
    data = rng.randbytes(n)
    pick = rng.randrange(9)
    if pick == 0:
        return data, data
    if pick == 1:
        return bytearray(data), data
    if pick == 2:
        return memoryview(data)[1:], data[1:]
    if pick == 3:
        return memoryview(data)[::2], data[::2]  # strided: refused by the compiled one
    if pick == 4:
        v = memoryview(bytearray(data))
        v.release()
        return v, None  # released: refused
    if pick == 5:
        return array.array("i", [1, 2, 3]), None  # another format: refused or cast
    if pick == 6:
        return "text", None
    if pick == 7:
        return None, None
    return memoryview(data).cast("c"), data


def _size(rng, head_len):
    return rng.choice(
        [-1, 0, head_len, head_len + 1, head_len + rng.randrange(1, 70_000), MAX_SIZE + 1, -(2**62)]
    )


class _Meddling:
    """A slice bound whose __index__ calls the buffer (written(0), take(), len())."""

    def __init__(self, buf, call):
        self.buf, self.call, self.gave = buf, call, None

    def __index__(self):
        try:
            self.gave = self.call(self.buf)
        except EXPECTED:
            pass
        return 0


def _hostile_slice(rng, name, buf):
    """buf[a:b] with meddling bounds: refused, or a slice, released at once. take() inside
    the compiled one's slicing is refused (the slice's export is held); the fallback's
    slices are of its bytearray, so take() is not tried there."""
    calls = [lambda b: b.written(0), len] + ([lambda b: b.take()] if name == "compiled" else [])
    meddling = _Meddling(buf, rng.choice(calls))
    try:
        v = buf[meddling : rng.choice([None, 1, 2**62])]
    except EXPECTED:
        return
    assert type(meddling.gave) is not bytes, "take() gave the frame while a slice was made"
    v.release()


def case(rng, name, FrameBuffer, ops):
    head, model = _head(rng)
    size = _size(rng, len(model) if model is not None else 3)
    try:
        buf = FrameBuffer(size, head)
    except EXPECTED:
        return
    except OverflowError:
        if size >= 0 and size <= MAX_SIZE:
            raise AssertionError(f"OverflowError for size {size}") from None
        return
    STATS["made"] += 1
    head_bytes = bytes(memoryview(head).cast("B")) if model is None else model
    assert 0 <= size <= MAX_SIZE, f"size {size} accepted"
    assert len(head_bytes) <= size, "a head longer than the size accepted"
    want = bytearray(head_bytes)
    pending = bytearray()  # written through an export, not yet counted
    view = None
    taken = False
    for _ in range(ops):
        op = rng.randrange(6)
        room = size - len(want)
        if op == 0:  # an export: the buffer, or a whole slice (asyncio's TLS reads)
            try:
                if rng.random() < 0.3:
                    v = buf[rng.choice([slice(None), slice(0, None), slice(0, 2**62)])]
                else:
                    v = memoryview(buf) if name == "compiled" else buf.view()
            except EXPECTED:
                assert taken or room == 0 or (view is not None and name == "compiled"), (
                    "an export refused with room and none held"
                )
                continue
            assert not taken, "an export after take()"
            assert not v.readonly and len(v) == room == len(buf), (len(v), room)
            if view is not None:
                assert name != "compiled", "two exports at once"
                view.release()
            view, pending = v, bytearray()
        elif op == 1 and view is not None and len(view):  # bytes read into it
            k = rng.randrange(0, len(view) + 1)
            data = rng.randbytes(k)
            view[:k] = data
            pending = bytearray(data)
        elif op == 2:  # written(n)
            n = rng.choice([len(pending), len(pending), -1, room + 1, 2**40, 0])
            try:
                full = buf.written(n)
            except (ValueError, OverflowError):
                assert taken or not 0 <= n <= room, f"written({n}) refused with {room} left"
                continue
            assert not taken and 0 <= n <= room, f"written({n}) with {room} left"
            if n == len(pending):
                want += pending
            else:  # counted without data the model knows: the rest is unknown
                want += bytes(n)
                want = None if n else want
                if want is None:
                    return
            pending = bytearray()
            STATS["written"] += 1
            if view is not None:  # a transport asks for a buffer again for every read
                view.release()
                view = None
            assert full == (len(want) == size)
        elif op == 3:  # take()
            try:
                data = buf.take()
            except ValueError:
                assert taken or len(want) != size or (view is not None and name == "compiled")
                continue
            assert not taken and len(want) == size, "take() before the frame was full"
            assert type(data) is bytes and data == bytes(want), "take() gave other bytes"
            taken = True
            STATS["taken"] += 1
        elif op == 4 and view is not None:
            view.release()
            view = None
        elif op == 4:  # a slice whose index runs code on the buffer: no state changes
            _hostile_slice(rng, name, buf)
        else:
            assert len(buf) == (0 if taken else size - len(want)), "len() is not the room"
        if name == "compiled":  # the bytes being filled are the buffer's alone
            assert not [r for r in gc.get_referents(buf) if type(r) is bytes], (
                "the collector hands out the frame's bytes"
            )
    if view is not None:
        view.release()
    if size <= 1:  # CPython shares b"" and the 1-byte bytes: none was written through
        assert b"".join([]) == b"" and len(bytes(0)) == 0, "the empty bytes was written"
        assert all(bytes([i])[0] == i for i in range(256)), "a 1-byte bytes was written"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", type=int, default=20_000, help="cases")
    parser.add_argument("--long", action="store_true", help="100,000 cases of 10 operations")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    cases = 100_000 if args.long else args.loop
    findings = 0
    for name, FrameBuffer in _kinds():
        rng = random.Random(args.seed)
        for i in range(cases):
            state = rng.getstate()
            try:
                case(rng, name, FrameBuffer, 10)
            except Exception as e:  # noqa: BLE001 - a finding, printed with its case
                findings += 1
                print(f"{name} case {i}: {type(e).__name__}: {e}")
                rng.setstate(state)
                rng.random()
                if findings > 20:
                    break
        print(f"{name}: {cases} cases; {STATS}")
        STATS.update(made=0, written=0, taken=0)
    print(f"{findings} findings")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())

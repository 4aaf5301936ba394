"""Threads that decode, encode and free messages and record batches while other threads
change what they read: assign fields, grow and shrink lists, rewrite bytearrays and the
arrays of record columns, resize buffers.

Without the GIL (a free-threaded build, where the compiled modules declare they need none)
this is what the codecs must survive; with it, the threads still interleave at every
switch interval (cut to a microsecond here). Every outcome is checked: what an encoder
wrote reads back as one of the states the changing threads set, a decoder reads what was
in the buffer (each byte as one of the two versions the rewriting thread alternates), or
the call fails cleanly with the codec's own error. A crash fails the whole run.
"""

import os
import random
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fastkwire.errors import DecodeError, EncodeError

ROUNDS = 300  # calls per working thread
WORKERS = 2  # threads per working role
CHANGED = "a value changed while it was being encoded"
# CPython 3.13's free-threaded bytearray is not thread-safe itself: its export count is a
# plain int, so a resize in one thread can pass its "no exports" check while another
# thread takes one and reads (3.14 locks the bytearray). Resizing a bytearray that another
# thread reads is tested where the interpreter makes that safe.
RACY_BYTEARRAY = not getattr(sys, "_is_gil_enabled", lambda: True)() and sys.version_info < (3, 14)


def hammer(workers, changers):
    """Run each worker ROUNDS times in WORKERS threads and each changer in one thread until
    the workers are done, all started together; re-raise the first failure of any."""
    stop = threading.Event()
    failures = []
    threads = len(workers) * WORKERS + len(changers)
    barrier = threading.Barrier(threads)

    def work(fn, seed):
        rng = random.Random(seed)
        try:
            barrier.wait()
            for _ in range(ROUNDS):
                fn(rng)
        except BaseException as e:  # noqa: BLE001 - handed to the main thread
            failures.append(e)

    def change(fn, seed):
        rng = random.Random(seed)
        try:
            barrier.wait()
            while not stop.is_set():
                fn(rng)
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    started = [
        threading.Thread(target=work, args=(fn, i * 10 + k))
        for i, fn in enumerate(workers)
        for k in range(WORKERS)
    ]
    changing = [
        threading.Thread(target=change, args=(fn, 1000 + i)) for i, fn in enumerate(changers)
    ]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        for t in started + changing:
            t.start()
        for t in started:
            t.join()
        stop.set()
        for t in changing:
            t.join()
    finally:
        sys.setswitchinterval(old)
    if failures:
        raise failures[0]


# ---------------------------------------------------------------- messages


def _members(cls, tag, n):
    return [
        cls.MemberIdentity(
            member_id=f"{tag}{i}", group_instance_id=None if i % 2 else f"i{i}", reason="r"
        )
        for i in range(n)
    ]


def _allowed_member(d):
    """A member any changing thread below may have put in: m<i>, n<i> or x, as _members makes.
    A member's fields are read one at a time while another thread may be between its two
    assignments of a member (member_id "x", then group_instance_id None), so an x may still
    show its i<k> and an m<i> or n<i> already its None."""
    mid, gid = d["member_id"], d["group_instance_id"]
    if d["reason"] != "r":
        return False
    if mid == "x":
        return gid is None or (gid[:1] == "i" and gid[1:].isdigit())
    if mid[:1] not in ("m", "n") or not mid[1:].isdigit():
        return False
    i = int(mid[1:])
    return gid in (None, None if i % 2 else f"i{i}")


def _check_leave_group(cls, d):
    assert d["group_id"] in ("g", "h"), d
    assert all(_allowed_member(m) for m in d["members"]), d


def _leave_group_changers(cls, shared):
    """Threads that assign fields and change the members list of shared[0] in place."""

    def assign(rng):
        m = shared[0]
        m.members = _members(cls, rng.choice("mn"), rng.randrange(6))  # frees the old list
        m.group_id = rng.choice("gh")

    def in_place(rng):
        members = shared[0].members
        op = rng.randrange(4)
        try:
            if op == 0:
                members.append(cls.MemberIdentity(member_id="x", reason="r"))
            elif op == 1:
                members.pop()
            elif op == 2:
                members[rng.randrange(len(members))] = cls.MemberIdentity(member_id="x", reason="r")
            else:
                members[0].member_id = "x"
                members[0].group_instance_id = None
        except (IndexError, ValueError):  # emptied meanwhile
            pass

    return [assign, in_place]


def test_encoding_a_message_other_threads_change(impl):
    """Encoders of one LeaveGroup whose fields and members list other threads replace,
    grow, shrink and rewrite: bytes that read back as members some thread put in, or the
    EncodeError for a list that changed size while it was written."""
    cls = impl.LeaveGroupRequest
    shared = [cls(group_id="g", members=_members(cls, "m", 3))]

    def encode(rng):
        try:
            data = shared[0].encode(5)
        except EncodeError as e:
            assert e.reason == CHANGED, e
            return
        _check_leave_group(cls, cls.decode(data, 5).to_dict())

    hammer([encode], _leave_group_changers(cls, shared))


def test_decoding_converting_and_freeing_shared_messages(impl):
    """The mix that crashed LeaveGroup: threads decode a message and publish it (freeing
    the one before), read the published one with to_dict and encode, while others assign
    its fields and change its lists."""
    cls = impl.LeaveGroupRequest
    bodies = [
        cls(group_id=g, members=_members(cls, t, k)).encode(5)
        for g, t, k in (("g", "m", 3), ("h", "n", 5), ("g", "n", 0))
    ]
    expected = {b: cls.decode(b, 5).to_dict() for b in bodies}
    shared = [cls.decode(bodies[0], 5)]

    def decode_and_publish(rng):
        body = rng.choice(bodies)
        m = cls.decode(bytearray(body) if rng.random() < 0.5 else body, 5)
        assert m.to_dict() == expected[body]
        shared[0] = m  # the previous message is freed here, or by the last reader

    def read_shared(rng):
        m = shared[0]
        _check_leave_group(cls, m.to_dict())
        try:
            data = m.encode(5)
        except EncodeError as e:
            assert e.reason == CHANGED, e
            return
        _check_leave_group(cls, cls.decode(data, 5).to_dict())

    hammer([decode_and_publish, read_shared], _leave_group_changers(cls, shared))


def _metadata(cls, leader):
    topic = cls.MetadataResponseTopic(
        name="t",
        partitions=[
            cls.MetadataResponsePartition(
                partition_index=p,
                leader_id=leader + p,
                replica_nodes=[leader, leader + 1, p],
                isr_nodes=[leader],
                offline_replicas=[],
            )
            for p in range(8)
        ],
    )
    return cls(
        brokers=[cls.MetadataResponseBroker(node_id=leader, host="h", port=9092)], topics=[topic]
    )


def test_decoding_a_bytearray_another_thread_rewrites(impl):
    """Decoders of one bytearray that another thread rewrites in place between two
    encodings of the same size, and tries to resize: each decode reads every byte as one
    of the two (its re-encoding shows which), or is a DecodeError."""
    cls = impl.MetadataResponse
    a, b = (_metadata(cls, leader).encode(12) for leader in (1, 3))
    assert len(a) == len(b) and a != b
    buf = bytearray(a)

    def decode(rng):
        view = memoryview(buf) if rng.random() < 0.5 else buf
        try:
            m = cls.decode(view, 12)
        except DecodeError:
            return
        out = m.encode(12)
        assert len(out) == len(a)
        assert all(x in (y, z) for x, y, z in zip(out, a, b)), out

    def rewrite(rng):
        try:
            with memoryview(buf) as m:  # in place, while decoders hold it too
                m[: len(a)] = rng.choice((a, b))
        except (BufferError, ValueError):  # grown meanwhile (the resizer) or
            pass  # being resized by it

    def resize(rng):
        if RACY_BYTEARRAY:
            return
        try:
            if len(buf) > len(a):
                del buf[-1]
            else:
                buf.extend(b"\0")
        except BufferError:  # a decoder holds it: resizing waits for none
            pass

    hammer([decode], [rewrite, resize])


# ---------------------------------------------------------------- record batches


def _record(Record, rng):
    return Record(
        key=rng.choice((None, b"k")),
        value=rng.choice((b"v1", b"v22", None)),
        headers=[("h", rng.choice((b"x", None)))] * rng.randrange(3),
    )


def _check_records(batches):
    for batch in batches:
        for r in batch.records:
            assert r.key in (None, b"k") and r.value in (b"v1", b"v22", b"v333", None), r
            assert all(h in (("h", b"x"), ("h", None), ("h2", b"y")) for h in r.headers), r


def test_writing_records_other_threads_change(records_codec):
    """write_batch over one list of Records that other threads grow, shrink and rewrite,
    assigning the records' values and header lists and changing those lists in place:
    batches that read back as records some thread put in, never an IndexError or a crash."""
    from fastkwire.records import Record

    rng0 = random.Random(0)
    records = [_record(Record, rng0) for _ in range(100)]

    def write(rng):
        _check_records(records_codec.read_batches(records_codec.write_batch(records)))

    def change_list(rng):
        op = rng.randrange(3)
        try:
            if op == 0 and len(records) < 200:
                records.extend(_record(Record, rng) for _ in range(rng.randrange(1, 50)))
            elif op == 1 and len(records) > 50:
                del records[rng.randrange(1, len(records)) :]  # the writer may be past it
            else:
                records[rng.randrange(len(records))] = _record(Record, rng)
        except (IndexError, ValueError):
            pass

    def change_records(rng):
        try:
            r = records[rng.randrange(len(records))]
        except (IndexError, ValueError):
            return
        op = rng.randrange(4)
        if op == 0:
            r.value = rng.choice((b"v1", b"v333", None))
        elif op == 1:
            r.headers = [("h2", b"y")] * rng.randrange(4)  # frees the old list
        elif op == 2:
            r.headers.append(("h", b"x"))
        else:
            try:
                r.headers.pop()
            except IndexError:
                pass

    hammer([write], [change_list, change_records])


def test_writing_columns_another_thread_rewrites(records_codec):
    """write_batch over RecordColumns whose value offsets, timestamps and header offsets
    another thread rewrites in place: between two valid states (any element of either is
    valid too) and one whose last offset is far past the data. Batches that read back
    with each value a slice of the data one of the states makes, or an EncodeError; never
    bytes read past the data (what checking one state and writing another would do)."""
    np = pytest.importorskip("numpy")
    from fastkwire.records import Record, RecordColumns

    groups = 500  # records of 2, 4, 2 and 6 bytes, 14 bytes a group
    cols = RecordColumns.from_records(
        [
            Record(offset=i, timestamp=1000 + i, key=None, value=v, headers=[("h", b"x")] * (i % 2))
            for i in range(4 * groups)
            for v in [(b"aa", b"bbbb", b"cc", b"dddddd")[i % 4]]
        ]
    )
    data = bytes(cols.value.data)
    base = np.repeat(np.arange(groups, dtype=np.int32) * 14, 4)
    a = np.append(base + np.tile(np.array([0, 2, 6, 8], np.int32), groups), 14 * groups)
    b = np.append(base + np.tile(np.array([0, 1, 7, 8], np.int32), groups), 14 * groups)
    far = a.copy()
    far[-1] = 1 << 30  # past the data: refused when checked
    stamps = [np.arange(1000, 1000 + 4 * groups), np.arange(4 * groups)[::-1] * 2**30]
    rows = np.arange(4 * groups + 1, dtype=np.int32)
    hoffs = [(rows + 1) // 2, rows // 2]  # a header on every odd record, or every even one
    # each value: data[x:y] from either valid state, or to the end of the data (a writer
    # that read the far state's last offset, clamped by numpy)
    starts = set(a[:-1].tolist()) | set(b[:-1].tolist())
    allowed = {data[x:y] for s in (a, b) for t in (a, b) for x, y in zip(s[:-1], t[1:]) if x <= y}
    allowed |= {data[x:] for x in starts}

    def write(rng):
        try:
            out = records_codec.write_batch(cols)
        except EncodeError:
            return
        for batch in records_codec.read_batches(out):
            assert len(batch.records) == 4 * groups
            for r in batch.records:
                assert r.value in allowed, (r.offset, len(r.value))

    def rewrite(rng):
        cols.value.offsets[:] = rng.choice((a, b, far))
        cols.timestamp[:] = rng.choice(stamps)
        cols.headers.offsets[:] = rng.choice(hoffs)

    hammer([write], [rewrite])


# ---------------------------------------------------------------- the accelerators' seams


@pytest.mark.parametrize("module", ["fastkwire._kafka_python", "fastkwire._aiokafka"])
def test_murmur2_of_a_bytearray_another_thread_resizes(module):
    """The partitioners' murmur2 over a bytearray another thread grows and cuts: the hash
    of one of its two states (the resize waits for none: a BufferError in the resizer)."""
    if RACY_BYTEARRAY:
        pytest.skip("CPython 3.13t's bytearray is not safe to resize while another thread reads it")
    seam = pytest.importorskip(module)
    buf = bytearray(b"partition key " * 40_000)  # its own mapping: freed, it is unmapped
    short, long_ = bytes(buf), bytes(buf) + b"more"
    expected = {seam.murmur2(short), seam.murmur2(long_)}

    def hash_it(rng):
        assert seam.murmur2(buf) in expected

    def resize(rng):
        try:
            if len(buf) > len(short):
                del buf[-4:]
            else:
                buf.extend(b"more")  # new storage: the old one is freed
        except BufferError:  # a hash holds it: resizing waits for none
            pass

    hammer([hash_it], [resize])


# ---------------------------------------------------------------- the broker's frame buffer


def test_a_frame_buffer_filled_and_taken_by_several_threads():
    """The broker's in-place frame buffer with threads that write into its export, count
    what they wrote, slice it, and take it, all at once: one take per frame, and only of a
    full frame of exactly its size, its head kept and every other byte one a writer wrote;
    every refusal the buffer's own (ValueError, BufferError)."""
    framebuf = pytest.importorskip("fastkwire._framebuf")
    size, head = 512, b"HEAD"
    state = {"frame": framebuf.FrameBuffer(size, head), "taken": []}
    lock = threading.Lock()  # guards the test's own bookkeeping, never the buffer

    def fill(rng):
        fb = state["frame"]
        try:
            with memoryview(fb) as view:
                n = min(len(view), rng.randrange(1, 64))
                view[:n] = bytes([0x61 + rng.randrange(3)]) * n
            fb.written(n)
        except (ValueError, BufferError):
            pass

    def take(rng):
        fb = state["frame"]
        try:
            frame = fb.take()
        except ValueError:
            return
        assert type(frame) is bytes and len(frame) == size and frame[:4] == head
        assert set(frame[4:]) <= {0x61, 0x62, 0x63}
        with lock:
            state["taken"].append(fb)
            state["frame"] = framebuf.FrameBuffer(size, head)

    def peek(rng):
        fb = state["frame"]
        try:
            with memoryview(fb[rng.randrange(0, 4) :]) as view:
                len(view)
        except (ValueError, BufferError, TypeError):
            pass
        assert 4 <= fb.filled <= size

    hammer([fill, take], [peek])
    assert len(state["taken"]) == len(set(map(id, state["taken"])))  # each taken once


# ---------------------------------------------------------------- the fuzzers, threaded

FUZZ = Path(__file__).resolve().parents[1] / "fuzz"


@pytest.mark.parametrize(
    "fuzzer, inputs",
    [
        ("hostile_records", 800),
        ("hostile_reentrancy", 400),
    ],
)
def test_fuzzers_on_threads(fuzzer, inputs):
    """fuzz/threaded.py: the columns fuzzer (compiled writer against pure on every seed)
    and the reentrancy fuzzer (every compiled entry point, the kafka-python target plans
    among them, under a collector that rewrites inputs) on four threads at once, in a
    child process (a crash fails the test, not the suite)."""
    pytest.importorskip("fastkwire._records")
    pytest.importorskip("numpy")
    if os.environ.get("FASTKWIRE_PURE"):
        pytest.skip("the compiled core is not in use")
    out = subprocess.run(
        [
            sys.executable,
            str(FUZZ / "threaded.py"),
            fuzzer,
            "--threads",
            "4",
            "--inputs",
            str(inputs),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, f"exit {out.returncode}\n{out.stderr[-3000:]}"
    assert f"{inputs} inputs on 4 threads" in out.stderr and " 0 findings" in out.stderr

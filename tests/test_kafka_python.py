"""fastkwire.kafka_python: kafka-python 3 with and without the accelerator gives the same
objects, values, counters and exceptions; install() patches all or nothing and
uninstall() restores every attribute it replaced (by identity).

Batches come from kafka-python's own builder and from fastkwire's writer, plus control
batches, transactions, LOG_APPEND_TIME, legacy magic 0/1 and seeded hostile mutations.
kafka-python's full suite runs with the plugin in tools/kafka_python_suite.sh.
"""

import collections
import importlib
import os
import random
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from accelerated import accel_fixture, outcome
from record_peers import HAVE_CRAMJAM

kafka = pytest.importorskip("kafka")
if not hasattr(kafka, "__version__") or not kafka.__version__.startswith("3."):
    pytest.skip("needs kafka-python 3", allow_module_level=True)

import kafka.codec as kcodec  # noqa: E402
from kafka.consumer.fetcher import ConsumerRecord, Fetcher  # noqa: E402
from kafka.partitioner import default as kpartitioner  # noqa: E402
from kafka.record import default_records as kdr  # noqa: E402
from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder  # noqa: E402
from kafka.structs import TopicPartition  # noqa: E402

import fastkwire  # noqa: E402
import fastkwire.kafka_python as fkp  # noqa: E402
from fastkwire import records as frecords  # noqa: E402

PURE = os.environ.get("FASTKWIRE_PURE", "") not in ("", "0") or fastkwire.implementation != "cython"
SUPPORTED_HERE = kafka.__version__ in fkp.SUPPORTED
needs_accel = pytest.mark.skipif(
    PURE or not SUPPORTED_HERE,
    reason="the accelerator declines here (pure fastkwire or untested kafka-python)",
)

TP = TopicPartition("topic", 3)
CODECS = [0, 1] + [
    c for c, has in ((2, kcodec.has_snappy), (3, kcodec.has_lz4), (4, kcodec.has_zstd)) if has()
]


accel = accel_fixture(fkp)  # accel(fn): (stock outcome, accelerated outcome)


# ---- batches -------------------------------------------------------------------------


def kp_batch(records, magic=2, compression=0, offset=0, transactional=False, producer_id=-1):
    b = MemoryRecordsBuilder(
        magic,
        compression,
        1 << 30,
        offset=offset,
        transactional=transactional,
        producer_id=producer_id,
        producer_epoch=0 if producer_id != -1 else -1,
        base_sequence=0 if producer_id != -1 else -1,
    )
    for ts, key, value, headers in records:
        assert b.append(ts, key, value, headers if magic == 2 else None) is not None
    b.close()
    return bytes(b.buffer())


def with_attributes(data, set_bits, base_offset=None, epoch=None):
    """A v2 batch with attribute bits set (control, LOG_APPEND_TIME), its CRC redone."""
    buf = bytearray(data)
    attrs = struct.unpack_from(">h", buf, 21)[0] | set_bits
    struct.pack_into(">h", buf, 21, attrs)
    if base_offset is not None:
        struct.pack_into(">q", buf, 0, base_offset)
    if epoch is not None:
        struct.pack_into(">i", buf, 12, epoch)
    struct.pack_into(">I", buf, 17, frecords.crc32c(bytes(buf[21:])))
    return bytes(buf)


def sample_records(rng, n):
    out = []
    for i in range(n):
        key = None if i % 5 == 0 else rng.randbytes(rng.randrange(0, 20))
        value = None if i % 7 == 3 else rng.randbytes(rng.randrange(0, 300))
        headers = [
            (rng.choice(["h", "ключ", "", "x" * 20]), None if j % 3 == 2 else rng.randbytes(j))
            for j in range(i % 4)
        ]
        out.append((1_700_000_000_000 + rng.randrange(-5, 10_000), key, value, headers))
    return out


def control_batch(offset, kind, producer_id=7):
    data = kp_batch(
        [(1, struct.pack(">hh", 0, kind), b"\x00\x00\x00\x00\x00\x00", [])],
        offset=offset,
        transactional=True,
        producer_id=producer_id,
    )
    return with_attributes(data, 0x20, base_offset=offset)


def batch_sets():
    rng = random.Random(20)
    sets = {}
    for codec in CODECS:
        sets[f"kafka-python codec {codec}"] = kp_batch(sample_records(rng, 60), compression=codec)
    sets["several batches"] = b"".join(
        with_attributes(kp_batch(sample_records(rng, 9)), 0, base_offset=o, epoch=o // 9)
        for o in (0, 9, 18)
    )
    sets["log append time"] = with_attributes(
        kp_batch(sample_records(rng, 12)), 0x08, base_offset=50
    )
    sets["empty values and keys"] = kp_batch([(5, b"", b"", []), (6, None, None, [("k", b"")])])
    sets["transactional, aborted and committed"] = b"".join(
        [
            with_attributes(
                kp_batch(sample_records(rng, 4), transactional=True, producer_id=7),
                0,
                base_offset=0,
            ),
            control_batch(4, 0),
            with_attributes(
                kp_batch(sample_records(rng, 4), transactional=True, producer_id=8),
                0,
                base_offset=5,
            ),
            control_batch(9, 1, producer_id=8),
        ]
    )
    for compression in ("none", "gzip") if HAVE_CRAMJAM else ("none",):
        recs = [
            frecords.Record(
                i,
                1_600_000_000_000 + i * 3,
                rng.randbytes(8),
                rng.randbytes(40),
                [("a", b"1"), ("b", None)],
            )
            for i in range(40)
        ]
        sets[f"fastkwire writer {compression}"] = frecords.write_batch(
            recs, base_offset=1000, compression=compression, partition_leader_epoch=4
        )
    for magic in (0, 1):
        for codec in (0, 1):
            sets[f"legacy magic {magic} codec {codec}"] = kp_batch(
                [(1_700_000_000_000 + i, b"k%d" % i, b"v" * i, []) for i in range(6)],
                magic=magic,
                compression=codec,
            )
    return sets


BATCHES = batch_sets()


def record_view(record):
    view = [
        type(record),
        record.offset,
        record.timestamp,
        record.timestamp_type,
        record.key,
        record.value,
        record.headers,
        record.checksum,
        record.size_in_bytes,
        record.validate_crc(),
        repr(record),
    ]
    if isinstance(record, kdr.ControlRecord):
        view += [record.version, record.type, record.abort, record.commit]
    return view


def read_memory_records(data):
    def fn(got):
        records = MemoryRecords(data)
        while records.has_next():
            batch = records.next_batch()
            got.append(
                (
                    type(batch),
                    batch.base_offset,
                    batch.magic,
                    batch.validate_crc(),
                    str(batch) if isinstance(batch, kdr.DefaultRecordBatch) else None,
                )
            )
            for record in batch:
                got.append(record_view(record))
        got.append(records.valid_bytes())

    return fn


def take_all(data, **kw):
    fetch_offset = kw.pop("fetch_offset", 0)
    chunk = kw.pop("chunk", None)

    def fn(got):
        pr = Fetcher.PartitionRecords(fetch_offset, TP, MemoryRecords(data), **kw)
        try:
            while pr:
                got.append(pr.take(chunk))
                if not got[-1]:
                    break
        finally:
            got.append(
                (
                    pr.records_read,
                    pr.bytes_read,
                    pr.next_fetch_offset,
                    pr.leader_epoch,
                    sorted(pr.aborted_producer_ids),
                    bool(pr),
                )
            )

    return fn


# ---- the record layer ----------------------------------------------------------------


@needs_accel
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_memory_records_read_the_same(accel, name):
    stock, fast = accel(read_memory_records(BATCHES[name]))
    assert stock[1] is None and stock == fast


@needs_accel
def test_batch_reads_give_kafka_pythons_classes(accel):
    data = BATCHES["transactional, aborted and committed"]
    stock, fast = accel(read_memory_records(data))
    kinds = {row[0] for row in fast[0] if isinstance(row, list)}
    assert kinds == {kdr.DefaultRecord, kdr.ControlRecord}
    assert stock == fast


@needs_accel
def test_crc_failure_is_reported_the_same(accel):
    data = bytearray(BATCHES["kafka-python codec 0"])
    data[-1] ^= 1
    stock, fast = accel(read_memory_records(bytes(data)))
    assert stock == fast
    assert stock[0][0][3] is False  # validate_crc said so


# ---- the fetcher ---------------------------------------------------------------------


class Upper:
    """A user deserializer: runs as stock, once per record, in order."""

    def __init__(self):
        self.calls = []

    def deserialize(self, topic, headers, data):
        self.calls.append((topic, len(headers), data))
        return None if data is None else data.upper()


@needs_accel
@pytest.mark.parametrize("name", sorted(BATCHES))
@pytest.mark.parametrize("chunk", [None, 7])
def test_fetcher_consumer_records_equal(accel, name, chunk):
    stock, fast = accel(take_all(BATCHES[name], chunk=chunk))
    assert stock[1] is None and stock == fast
    assert all(type(r) is ConsumerRecord for part in fast[0][:-1] for r in part)


@needs_accel
def test_fetcher_reads_stock_batches_on_its_fast_loop(accel):
    from fastkwire import _kafka_python

    before = _kafka_python.fast_batches()
    stock, fast = accel(take_all(BATCHES["several batches"]))
    assert stock == fast and _kafka_python.fast_batches() == before + 3
    before = _kafka_python.fast_batches()
    accel(take_all(BATCHES["legacy magic 1 codec 1"]))  # legacy: kafka-python's records
    assert _kafka_python.fast_batches() == before


@needs_accel
def test_fetcher_deserializers_run_as_stock(accel):
    kd, vd = Upper(), Upper()
    stock, fast = accel(
        take_all(
            BATCHES["kafka-python codec 0"], key_deserializer=kd, value_deserializer=vd, chunk=10
        )
    )
    assert stock == fast
    assert len(kd.calls) == 2 * 60 and kd.calls[:60] == kd.calls[60:]


@needs_accel
def test_fetcher_deserializer_error_mid_batch(accel):
    class Fails:
        n = 0

        def deserialize(self, topic, headers, data):
            self.n += 1
            if self.n % 5 == 0:
                raise ValueError("bad value")
            return data

    stock, fast = accel(take_all(BATCHES["kafka-python codec 0"], value_deserializer=Fails()))
    # take() returns the four before it and raises on the next call
    assert [len(part) for part in stock[0][:-1]] == [4] and stock[1] == (ValueError, ("bad value",))
    assert stock == fast


@needs_accel
@pytest.mark.parametrize("isolation", [0, 1])
def test_fetcher_transactions(accel, isolation):
    from kafka.protocol.consumer import IsolationLevel

    aborted = collections.namedtuple("AbortedTransaction", "producer_id first_offset")
    txns = [aborted(producer_id=7, first_offset=0)]
    stock, fast = accel(
        take_all(
            BATCHES["transactional, aborted and committed"],
            isolation_level=IsolationLevel(isolation),
            aborted_transactions=txns,
        )
    )
    assert stock[1] is None and stock == fast
    offsets = [r.offset for part in fast[0][:-1] for r in part]
    assert offsets == ([5, 6, 7, 8] if isolation else [0, 1, 2, 3, 5, 6, 7, 8])


@needs_accel
@pytest.mark.parametrize("fetch_offset", [0, 13, 59, 60])
def test_fetcher_skips_below_fetch_offset(accel, fetch_offset):
    stock, fast = accel(take_all(BATCHES["kafka-python codec 1"], fetch_offset=fetch_offset))
    assert stock == fast


@needs_accel
def test_fetcher_crc_checked_as_stock(accel, monkeypatch):
    data = bytearray(BATCHES["several batches"])
    data[-3] ^= 0x40
    stock, fast = accel(take_all(bytes(data), check_crcs=True))
    assert stock == fast and stock[1][0].__name__ == "CorruptRecordError"
    # A mocked record check is still asked (kafka-python's own suite does this).
    answers = iter([True, True, False] * 2)
    monkeypatch.setattr(kdr.DefaultRecord, "validate_crc", lambda self: next(answers))
    stock, fast = accel(take_all(BATCHES["empty values and keys"] * 2, check_crcs=True))
    assert stock == fast and stock[1][0].__name__ == "CorruptRecordError"


# ---- hostile bytes -------------------------------------------------------------------


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
    "name",
    [
        "kafka-python codec 0",
        "several batches",
        "legacy magic 1 codec 0",
        "transactional, aborted and committed",
        "fastkwire writer none",
    ],
)
def test_hostile_bytes_same_outcome(accel, name):
    rng = random.Random(name)
    for data in mutations(BATCHES[name], rng, 150):
        for fn in (read_memory_records(data), take_all(data, check_crcs=False, chunk=5)):
            stock, fast = accel(fn)
            assert stock == fast, data.hex()


@needs_accel
def test_hostile_varints_and_lengths(accel):
    """Hand-made records at kafka-python's edges: negative lengths other than -1, varints
    past 64 bits, bad UTF-8, a header count too big for the bytes, sizes that do not add up."""

    def batch(body, count=1):
        header = struct.pack(
            ">qiibIhiqqqhii", 0, 49 + len(body), 0, 2, 0, 0, count - 1, 10, 10, -1, -1, -1, count
        )
        return with_attributes(header + body, 0)

    varint_big = b"\xff" * 9 + b"\x7f"
    bodies = [
        b"\x0c\x00\x00\x00\x05\x02a\x00",  # key length -3: None in kafka-python
        b"\x14\x00" + varint_big + b"\x00\x01\x01\x00",  # timestamp delta past 64 bits
        b"\x0a\x00\x00\x00\x01\x01\x02\x02\xff\x00",  # header key not UTF-8
        b"\x08\x00\x00\x00\x01\x01\x7e",  # 63 headers in no bytes
        b"\x06\x00\x00\x00\x01\x01\x00",  # length one too small
        b"\x0a\x00\x00\x00\x01\x01\x00",  # length too large
        b"\x08\x00\x00\x00\x01\x03\x01",  # header count -2
        b"\x08\x00\x00\x00\x7f\x01\x00",  # key longer than the record
        b"\x0a\x00\x00\x00\x01\x01\x02\x03\x00\x01",  # header key length -2
        b"\x00",  # nothing after the length
        b"",
    ]
    for body in bodies:
        for count in (1, 2):
            data = batch(body, count)
            for fn in (read_memory_records(data), take_all(data, check_crcs=False)):
                stock, fast = accel(fn)
                assert stock == fast, body.hex()


# ---- install and uninstall -----------------------------------------------------------


def snapshot():
    """Identity of every attribute of every kafka-python module and class the table touches."""
    names = [
        "kafka.record.default_records",
        "kafka.record.legacy_records",
        "kafka.record.memory_records",
        "kafka.record",
        "kafka.consumer.fetcher",
        "kafka.partitioner",
        "kafka.partitioner.default",
        "kafka.producer.record_accumulator",
        "kafka.producer.kafka",
        "kafka.protocol.schemas.fields.struct",
        "kafka.protocol.api_message",
        "kafka.protocol.parser",
    ]
    out = {}
    for name in names:
        module = importlib.import_module(name)
        for attr, value in list(vars(module).items()):
            out[(name, attr)] = value
            if isinstance(value, type):
                for cls in (value, *[v for v in vars(value).values() if isinstance(v, type)]):
                    for cattr, cvalue in list(vars(cls).items()):
                        out[(name, cls.__qualname__, cattr)] = cvalue
    return out


def same(a, b):
    return a.keys() == b.keys() and all(a[k] is b[k] for k in a)


@needs_accel
def test_install_patches_every_seam_and_uninstall_restores_identity():
    before = snapshot()
    table = fkp.patches()
    assert {
        (getattr(p.owner, "__qualname__", getattr(p.owner, "__name__", None)), p.attribute)
        for p in table
    } >= {
        ("DefaultRecordBatch", "__next__"),
        ("Fetcher.PartitionRecords", "_unpack_records"),
        ("kafka.partitioner.default", "murmur2"),
        ("kafka.partitioner", "murmur2"),
    }
    assert fkp.install() is True and fkp.installed()
    try:
        for p in table:
            assert vars(p.owner)[p.attribute] is p.replacement
            assert p.original is before[next(k for k in before if before[k] is p.original)]
        assert kpartitioner.murmur2 is not before[("kafka.partitioner.default", "murmur2")]
        assert fkp.install() is True  # a second install is a no-op
    finally:
        fkp.uninstall()
    assert not fkp.installed()
    assert same(before, snapshot())
    fkp.uninstall()  # and so is a second uninstall
    assert same(before, snapshot())


def test_install_declines_on_an_unknown_version(monkeypatch):
    before = snapshot()
    monkeypatch.setattr(kafka, "__version__", "3.0.99")
    with (
        pytest.raises(fkp.UnsupportedKafkaPython, match=r"kafka-python 3\.0\.99")
        if not PURE
        else pytest.raises(fkp.UnsupportedKafkaPython)
    ):
        fkp.install()
    with pytest.warns(RuntimeWarning, match="not installed"):
        assert fkp.install(strict=False) is False
    assert not fkp.installed() and same(before, snapshot())


def test_install_declines_under_fastkwire_pure(monkeypatch):
    before = snapshot()
    monkeypatch.setenv("FASTKWIRE_PURE", "1")
    with pytest.raises(fkp.UnsupportedKafkaPython, match="FASTKWIRE_PURE"):
        fkp.install()
    assert not fkp.installed() and same(before, snapshot())


@needs_accel
def test_install_declines_when_a_seam_is_missing(monkeypatch):
    before = snapshot()
    monkeypatch.delattr(Fetcher.PartitionRecords, "_unpack_records")
    with pytest.raises(fkp.UnsupportedKafkaPython, match="_unpack_records"):
        fkp.install()
    monkeypatch.undo()
    assert not fkp.installed() and same(before, snapshot())


@needs_accel
def test_pytest_plugin_installs_for_the_run(tmp_path):
    (tmp_path / "test_inner.py").write_text(
        textwrap.dedent("""
        import fastkwire.kafka_python as fkp
        from kafka.record.default_records import DefaultRecordBatch
        def test_it():
            assert fkp.installed()
            assert DefaultRecordBatch.__next__.__module__ == "fastkwire._kafka_python"
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
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "fastkwire.kafka_python",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout


# ---- murmur2 -------------------------------------------------------------------------


@needs_accel
def test_murmur2_matches_kafka_python():
    stock = kpartitioner.murmur2
    rng = random.Random(2)
    inputs = [b"", b"\x00", b"\xff" * 3, b"21", b"foobar", b"a-little-bit-long-string"]
    inputs += [rng.randbytes(n) for n in range(0, 70)] + [rng.randbytes(1000)]
    fkp.install()
    try:
        fast = kpartitioner.murmur2
        assert fast is not stock
        for data in inputs:
            assert fast(data) == stock(data) and fast(bytearray(data)) == stock(data)
        assert fast(memoryview(b"abcde")) == stock(memoryview(b"abcde"))  # taken by stock's code
        with pytest.raises(TypeError):
            fast(None)
    finally:
        fkp.uninstall()


def a_cluster(partitions=8, topics=("t", "u"), internal=("__consumer_offsets",)):
    """kafka-python's own ClusterMetadata, its table filled as a metadata response does."""
    from kafka.cluster import ClusterMetadata

    partition = collections.namedtuple("Partition", "leader_id")  # what the cluster reads
    cluster = ClusterMetadata()
    for topic in (*topics, *internal):
        cluster._partitions[topic] = {
            p: partition(-1 if p % 3 == 2 else 0) for p in reversed(range(partitions))
        }
    cluster.internal_topics = set(internal)
    return cluster


@needs_accel
@pytest.mark.parametrize(
    "case",
    [
        "keyed",
        "keyless",
        "unknown topic",
        "internal topic",
        "no partitions",
        "bytearray key",
        "str key",
        "murmur2 replaced",
        "cluster subclass",
        "cluster method replaced",
        "instance method replaced",
        "table replaced",
    ],
)
def test_default_partitioner_answers_as_stock(accel, monkeypatch, case):
    """DefaultPartitioner.partition: the same partitions, the same exceptions, and for
    keyless records the same random draws."""
    from kafka.cluster import ClusterMetadata
    from kafka.partitioner import DefaultPartitioner

    rng = random.Random(case)
    keys = [rng.randbytes(rng.randrange(0, 40)) for _ in range(200)]
    topic, partitions = "t", 8
    cluster = a_cluster()
    if case == "keyless":
        keys = [None] * 50
    elif case == "unknown topic":
        topic = "nope"
    elif case == "internal topic":
        topic = "__consumer_offsets"
    elif case == "no partitions":
        cluster = a_cluster(partitions=0)
    elif case == "bytearray key":
        keys = [bytearray(k) for k in keys]
    elif case == "str key":
        keys = ["k"]
    elif case == "cluster subclass":

        class Cluster(ClusterMetadata):
            def topics(self, exclude_internal_topics=True):
                return {"t"}

        cluster = Cluster()
        cluster._partitions = a_cluster()._partitions
    elif case == "cluster method replaced":
        monkeypatch.setattr(ClusterMetadata, "partitions_for_topic", lambda self, t: {0, 5})
    elif case == "table replaced":
        cluster._partitions = collections.OrderedDict(cluster._partitions)
    elif case == "instance method replaced":
        cluster.partitions_for_topic = lambda t: {1, 2, 3}

    def fn(got):
        random.seed(5)
        cluster_calls = []
        sys.setprofile(
            lambda frame, event, arg: (
                event == "call"
                and frame.f_code.co_filename.endswith("cluster.py")
                and cluster_calls.append(frame.f_code.co_name)
            )
        )
        murmur2 = kpartitioner.murmur2
        if case == "murmur2 replaced":  # after install(): the module's name is what is called
            kpartitioner.murmur2 = lambda data: len(data) * 7
        try:
            partitioner = DefaultPartitioner()
            for key in keys:
                got.append(partitioner.partition(topic, b"key", key, b"value", b"value", cluster))
        finally:
            sys.setprofile(None)
            kpartitioner.murmur2 = murmur2
        if case == "keyed":  # stock asks the cluster three times a record; the fast path never
            methods = [name for name in cluster_calls if not name.startswith("<")]
            assert len(methods) == (0 if fkp.installed() else 3 * len(keys))

    stock, fast = accel(fn)
    assert stock == fast
    if case == "keyed":
        assert stock[1] is None and set(stock[0]) == set(range(partitions))


# ---- the producer's builder ----------------------------------------------------------


def build_batch(plan, magic=2, compression=0, batch_size=1 << 20, **kw):
    """(metadata reprs and Nones, sizes, final bytes) of MemoryRecordsBuilder over plan."""

    def fn(got):
        b = MemoryRecordsBuilder(magic, compression, batch_size, **kw)
        for ts, key, value, headers in plan:
            meta = b.append(ts, key, value, headers)
            got.append((repr(meta), b.size_in_bytes(), b.is_full(), b.next_offset()))
        b.close()
        got.append((bytes(b.buffer()), b.compression_rate(), b.producer_id, b.base_sequence))

    return fn


class FakeClock:
    def __init__(self):
        self.reset()

    def reset(self):
        self.now = 1_700_000_000.0

    def __call__(self):
        self.now += 0.0015
        return self.now


@pytest.fixture
def frozen_append_clock(monkeypatch):
    """kafka-python's append reads its clock from a default argument: both runs get ours.
    And gzip's header carries the time of compression in seconds: stock's batch and ours
    differed in it when a second began between the two (seen once in a CI run)."""
    import gzip
    import types

    monkeypatch.setattr(gzip, "time", types.SimpleNamespace(time=lambda: 1_700_000_000.0))
    append = kdr.DefaultRecordBatchBuilder.append
    defaults = list(append.__defaults__)
    names = append.__code__.co_varnames[
        append.__code__.co_argcount - len(defaults) : append.__code__.co_argcount
    ]
    clock = FakeClock()
    defaults[names.index("time_time")] = clock
    monkeypatch.setattr(append, "__defaults__", tuple(defaults))
    return clock


@needs_accel
@pytest.mark.parametrize("codec", CODECS)
def test_builder_same_bytes(accel, codec, frozen_append_clock):
    rng = random.Random(codec)
    plan = (
        sample_records(rng, 80) + [(None, b"k", b"v", [("h", b"1")])] * 3 + [(2**40, None, b"", [])]
    )
    run = build_batch(plan, compression=codec)
    stock, fast = accel(lambda got: (frozen_append_clock.reset(), run(got)))
    assert stock[1] is None and stock == fast


@needs_accel
def test_builder_full_batches_and_compression_rule(accel, frozen_append_clock):
    rng = random.Random(3)
    plan = sample_records(rng, 200)
    for size in (0, 100, 1000, 5000):
        stock, fast = accel(build_batch(plan, batch_size=size))
        assert stock == fast
        assert any("None" == row[0] for row in stock[0][:-1]) or size == 0
    # Incompressible values go out uncompressed, compressible ones compressed: as stock.
    for value in (lambda: rng.randbytes(200), lambda: b"a" * 200):
        plan = [(i, None, value(), []) for i in range(50)]
        stock, fast = accel(build_batch(plan, compression=1))
        assert stock == fast


@needs_accel
def test_builder_transactional_state(accel):
    plan = [(i, b"k", b"v", []) for i in range(5)]
    stock, fast = accel(
        build_batch(plan, transactional=True, producer_id=99, producer_epoch=2, base_sequence=7)
    )
    assert stock == fast


@needs_accel
def test_builder_odd_inputs_as_stock(accel):
    """Inputs the compiled append leaves to kafka-python's: the same bytes or errors."""
    cases = [
        [(1, bytearray(b"k"), memoryview(b"v"), [])],
        [(1, b"k", b"v", [("h", bytearray(b"x"))])],
        [(1, b"k", b"v", (("h", b"x"), ("i", None)))],
        [(1, "str key", b"v", [])],
        [(1, b"k", 12, [])],
        [(True, b"k", b"v", [])],
        [(1.5, b"k", b"v", [])],
        [(1, b"k", b"v", [(b"bytes key", b"x")])],
        [(1, b"k", b"v", [("\udc80", b"x")])],
        [(1, b"k", b"v", [("h", b"x", b"extra")])],
        [(2**63 - 1, b"k", b"v", []), (-(2**63), b"k", b"v", [])],  # timestamp delta past int64
        [(2**70, b"k", b"v", [])],
    ]
    for plan in cases:
        stock, fast = accel(build_batch(plan))
        assert stock == fast, plan


@needs_accel
def test_builder_offsets_past_int64_as_stock(accel):
    def fn(got):
        b = kdr.DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 20)
        for offset in (0, 1, 2**40, 2**63 - 1, -5):
            got.append(repr(b.append(offset, 10, b"k", None, [])))
        got.append(bytes(b.build()))

    stock, fast = accel(fn)
    assert stock == fast


@needs_accel
def test_producer_batch_try_append_as_stock(accel, frozen_append_clock, monkeypatch):
    """ProducerBatch.try_append: the same futures (their fields), batch state and bytes,
    and the same errors, its module's names (time, FutureRecordMetadata) read at each call."""
    from kafka.producer import producer_batch as kpb

    def run(plan, batch_size=1 << 20, now=None):
        def fn(got):
            frozen_append_clock.reset()
            builder = MemoryRecordsBuilder(2, 0, batch_size)
            batch = kpb.ProducerBatch(TopicPartition("t", 0), builder, now=5.0)
            for ts, key, value, headers in plan:
                future = batch.try_append(ts, key, value, headers, now=now)
                got.append(None if future is None else (type(future).__name__, future.args))
                got.append((batch.record_count, batch.max_record_size, batch.last_append))
            got.append(len(batch._record_futures))
            builder.close()
            got.append(bytes(builder.buffer()))

        return fn

    rng = random.Random(11)
    # (a None header value is stock's TypeError in the header size: among the errors below)
    plan = [
        (ts, k, v, [(hk, hv or b"") for hk, hv in hs]) for ts, k, v, hs in sample_records(rng, 60)
    ]
    plan.append((7, None, None, [("h", b"1"), ("\u00e9", b"")]))
    stock, fast = accel(run(plan, now=12.5))
    assert stock[1] is None and stock == fast
    with monkeypatch.context() as m:  # stock reads the clock: both runs get the same one
        m.setattr(kpb.time, "monotonic", lambda: 42.0)
        stock, fast = accel(run(plan))
    assert stock[1] is None and stock == fast and stock[0][1][2] == 42.0
    stock, fast = accel(run(plan * 3, batch_size=600, now=1.0))
    assert stock == fast and None in stock[0]  # a full batch refuses, as stock's
    for headers in ([(b"bytes key", b"x")], [("h", None)], [("h", 5)], 7):  # stock's errors
        stock, fast = accel(run([(1, b"k", b"v", headers)], now=1.0))
        assert stock == fast and stock[1] is not None, headers
    # A test's replacement of the module's names is seen, as stock sees it.
    made = []

    class Recording(kpb.FutureRecordMetadata):
        def __init__(self, *args):
            made.append(args[1:])
            super().__init__(*args)

    monkeypatch.setattr(kpb, "FutureRecordMetadata", Recording)
    stock, fast = accel(run([(1, b"k", b"v", [])], now=1.0))
    assert stock == fast and stock[0][0][0] == "Recording" and made[0] == made[1]
    monkeypatch.delattr(kpb, "FutureRecordMetadata")
    stock, fast = accel(run([(1, b"k", b"v", [])], now=1.0))
    assert stock == fast and stock[1][0] is NameError


@needs_accel
def test_record_futures_as_stock(accel, frozen_append_clock, monkeypatch):
    """The futures try_append makes (compiled, without FutureRecordMetadata's and Future's
    __init__ frames): the same slots, registered on the batch's future the same way, and
    resolved to the same metadata or error; a Future.__init__ replaced is run, as stock's
    class call runs it."""
    import kafka.future
    from kafka.producer import producer_batch as kpb

    def run(resolve):
        def fn(got):
            frozen_append_clock.reset()
            builder = MemoryRecordsBuilder(2, 0, 1 << 20)
            batch = kpb.ProducerBatch(TopicPartition("t", 3), builder, now=5.0)
            futures = [
                batch.try_append(ts, b"k" * ts, b"v", [("h", b"x")] * (ts % 2), now=1.0)
                for ts in range(1, 5)
            ]
            pf = batch.produce_future
            for f in futures:
                got.append(
                    (
                        type(f),
                        f.is_done,
                        f.value,
                        f.exception,
                        f._callbacks,
                        f._errbacks,
                        type(f._lock),
                        f._produce_future is pf,
                        f.args,
                    )
                )
            got.append(
                [(cb.__self__ is f, cb.__func__.__name__) for f, cb in zip(futures, pf._callbacks)]
            )
            got.append(
                [(eb.__self__ is f, eb.__func__.__name__) for f, eb in zip(futures, pf._errbacks)]
            )
            if resolve == "success":
                pf.success((100, 77, None))
                got.append([f.get(0) for f in futures])
            else:
                pf.failure(KeyError("gone"))
                got.append([(type(f.exception), f.exception.args) for f in futures])

        return fn

    for resolve in ("success", "failure"):
        stock, fast = accel(run(resolve))
        assert stock[1] is None and stock == fast, resolve
    assert stock[0][0][-1] == (0, 1, None, 1, 1, 2)  # batch index, timestamp, crc, sizes

    def init_frames(fn):  # the two __init__s' Python frames while fn runs
        frames = []

        def profile(frame, event, arg):
            code = frame.f_code
            if event == "call" and code.co_name == "__init__" and "future" in code.co_filename:
                frames.append(frame.f_locals.get("self").__class__.__name__)

        def counted(got):
            sys.setprofile(profile)
            try:
                fn(got)
            finally:
                sys.setprofile(None)

        return counted, frames

    counted, frames = init_frames(run("success"))
    accel(counted)
    # stock: FutureProduceResult's two, then each record's two; accelerated: the batch's two
    assert frames.count("FutureRecordMetadata") == 8 and frames.count("FutureProduceResult") == 4
    made = []
    stock_init = kafka.future.Future.__init__

    def counting_init(self):
        made.append(type(self).__name__)
        stock_init(self)

    monkeypatch.setattr(kafka.future.Future, "__init__", counting_init)
    stock, fast = accel(run("success"))
    assert stock == fast and made.count("FutureRecordMetadata") == 8


@needs_accel
def test_record_accumulator_append_as_stock(accel, frozen_append_clock):
    """RecordAccumulator.append: the same results (futures, full, new batch, abort), the
    same batches and bytes, the same errors."""
    from kafka.producer.record_accumulator import RecordAccumulator

    rng = random.Random(5)
    plan = [
        (TopicPartition("t", i % 3), ts, k, v, [(hk, hv or b"") for hk, hv in hs])
        for i, (ts, k, v, hs) in enumerate(sample_records(rng, 120))
    ]

    def run(batch_size, abort_on_new_batch=False, **config):
        def fn(got):
            frozen_append_clock.reset()
            acc = RecordAccumulator(batch_size=batch_size, **config)
            for tp, ts, key, value, headers in plan:
                future, full, new, abort = acc.append(
                    tp, ts, key, value, headers, now=3.0, abort_on_new_batch=abort_on_new_batch
                )
                got.append((None if future is None else future.args, full, new, abort))
            got.append(acc._appends_in_progress.get())
            for tp, dq in sorted(acc._batches.items()):
                for batch in dq:
                    batch.records.close()
                    got.append((tp, batch.record_count, bytes(batch.records.buffer())))
            got.append(len(acc._incomplete.all()))

        return fn

    for batch_size in (16384, 700, 0):
        stock, fast = accel(run(batch_size))
        assert stock[1] is None and stock == fast, batch_size
    stock, fast = accel(run(16384, abort_on_new_batch=True))
    assert stock == fast and stock[0][0] == (None, False, False, True)

    def misuse(got):
        acc = RecordAccumulator()
        for tp in (("t", 0), TopicPartition("t", 0)):
            try:
                acc.append(tp, 1, b"k", b"v", [])
            except Exception as exc:  # noqa: BLE001 - compared with stock's
                got.append((type(exc), exc.args))
            acc.close() if hasattr(acc, "close") else setattr(acc, "_closed", True)
        got.append(acc._appends_in_progress.get())

    stock, fast = accel(misuse)
    assert stock == fast and len(stock[0]) == 3


@needs_accel
def test_producer_send_refuses_as_stock(accel):
    """KafkaProducer.send's checks, each refusal the same exception, and a metadata wait
    that times out the same way (nothing listens where this producer points)."""
    from kafka import KafkaProducer
    from kafka.serializer import Serializer

    class IntsAsStr(Serializer):
        def serialize(self, topic, value):
            return str(value) if isinstance(value, int) else value

    def fn(got):
        producer = KafkaProducer(
            bootstrap_servers="127.0.0.1:9",
            api_version=(2, 5),
            max_block_ms=50,
            key_serializer=IntsAsStr(),
        )
        try:
            for kwargs in (
                dict(value=None, key=None),
                dict(value=b"v", headers=("h", b"x")),
                dict(value=b"v", headers=[("h", "not bytes")]),
                dict(value=b"v", headers=[("h", b"x", b"extra")]),
                dict(value="str value"),
                dict(value=b"v", key=7),  # serialized to a str
                dict(value=b"v", key=b"k"),  # past the checks: the metadata wait times out
            ):
                try:
                    producer.send("t", **kwargs)
                except Exception as exc:  # noqa: BLE001 - compared with stock's
                    got.append((type(exc).__name__, exc.args))
        finally:
            producer.close(timeout=1)
        try:
            producer.send("t", value=b"v")
        except Exception as exc:  # noqa: BLE001
            got.append((type(exc).__name__, exc.args))

    stock, fast = accel(fn)
    assert stock[1] is None and stock == fast
    assert len(stock[0]) == 8 and stock[0][-1][0] == "IllegalStateError"


@needs_accel
def test_batches_from_either_builder_read_the_same_through_either_reader(frozen_append_clock):
    rng = random.Random(9)
    plan = sample_records(rng, 120)
    built = []
    for accelerated in (False, True):
        if accelerated:
            fkp.install()
        try:
            frozen_append_clock.reset()
            built.append(outcome(build_batch(plan))[0][-1][0])
        finally:
            fkp.uninstall()
    assert built[0] == built[1]
    reads = []
    for data in built:
        for accelerated in (False, True):
            if accelerated:
                fkp.install()
            try:
                reads.append((outcome(read_memory_records(data)), outcome(take_all(data))))
            finally:
                fkp.uninstall()
    assert all(r == reads[0] for r in reads) and reads[0][0][1] is None


@needs_accel
@pytest.mark.parametrize(
    "attr, value",
    [
        ("_header_data", (0,)),
        ("_header_data", [0] * 13),
        ("_buffer", b"\x00" * 80),
        ("_buffer", bytearray()),
        ("_pos", -5),
        ("_pos", 10**30),
        ("_pos", 1.5),
        ("_next_record_index", -1),
        ("_next_record_index", 10**30),
        ("_num_records", 10**6),
        ("_num_records", -(2**70)),
    ],
)
def test_hostile_batch_state_same_outcome(accel, attr, value):
    """A batch whose private state someone replaced: stock's outcome, and no crash."""
    data = BATCHES["kafka-python codec 0"]

    def read(got):
        batch = MemoryRecords(data).next_batch()
        setattr(batch, attr, value)
        for record in batch:
            got.append(record_view(record))

    class OneBatch:
        def __init__(self):
            self.batch = MemoryRecords(data).next_batch()
            setattr(self.batch, attr, value)

        def next_batch(self):
            batch, self.batch = self.batch, None
            return batch

    def fetch(got):
        pr = Fetcher.PartitionRecords(0, TP, OneBatch(), check_crcs=False)
        got.append(pr.take())

    for fn in (read, fetch):
        stock, fast = accel(fn)
        assert stock == fast


@needs_accel
def test_size_estimates_are_stocks_for_every_input(accel):
    B = kdr.DefaultRecordBatchBuilder
    rnd = random.Random(11)
    cases = [
        (b"k", b"v", []),
        (None, None, []),
        (b"k" * 200, b"v" * 20000, [("h", b"x"), ("é" * 100, None)]),
        ("str key", b"v", []),
        (b"k", bytearray(b"v"), []),
        (b"k", b"v", [("h", "str value")]),
        (b"k", b"v", (("h", b"x"),)),
        (b"k", b"v", [("\ud800", b"x")]),
        (b"k", b"v", [("h",)]),
        (b"k", 7, []),
        (b"k", b"v", None),
    ]
    cases += [
        (
            rnd.randbytes(rnd.randrange(300)),
            rnd.randbytes(rnd.randrange(70000)),
            [(str(i), rnd.randbytes(rnd.randrange(200))) for i in range(rnd.randrange(4))],
        )
        for _ in range(50)
    ]

    def sizes(got):
        for c in cases:
            for f in (B.size_of, B.estimate_size_in_bytes):
                try:
                    got.append(f(*c))
                except Exception as exc:  # noqa: BLE001 - the type is what is compared
                    got.append((type(exc), exc.args))

    stock, fast = accel(sizes)
    assert stock == fast and len(stock[0]) == 2 * len(cases)


# ---- MemoryRecords.next_batch and the batch it makes ---------------------------------


def batch_state(batch):
    """Everything a batch holds, read from its slots (unset ones as their exception)."""
    out = [type(batch)]
    for slot in ("_buffer", "_header_data", "_pos", "_num_records", "_next_record_index"):
        try:
            value = getattr(batch, slot)
        except AttributeError as exc:
            value = (AttributeError, str(exc))
        out.append((type(value), bytes(value) if isinstance(value, bytearray) else value))
    if isinstance(batch, kdr.DefaultRecordBatch):
        out.append(batch._decompressed)
    return out


def walk(make_records, steps=None):
    """next_batch() until None (or `steps` calls), with the walk's state after each."""

    def fn(got):
        records = make_records()
        for _ in range(steps or 1000):
            got.append((records.has_next(), records._pos, records._remaining_bytes))
            next_slice = records._next_slice
            got.append(None if next_slice is None else bytes(next_slice))
            batch = records.next_batch()
            if batch is None:
                break
            got.append(batch_state(batch))
            got.append(records.valid_bytes())
            if isinstance(batch, kdr.DefaultRecordBatch):
                got.append(batch.validate_crc())
                got.append([record_view(r) for r in batch])
        got.append(("end", records._pos, records._remaining_bytes, records.valid_bytes()))

    return fn


TWO_BATCHES = BATCHES["several batches"]


@needs_accel
@pytest.mark.parametrize(
    "wrap",
    [bytes, bytearray, memoryview, lambda d: memoryview(bytearray(d))],
    ids=["bytes", "bytearray", "memoryview", "memoryview of bytearray"],
)
@pytest.mark.parametrize("name", sorted(BATCHES))
def test_next_batch_walks_the_same(accel, name, wrap):
    stock, fast = accel(walk(lambda: MemoryRecords(wrap(BATCHES[name]))))
    assert stock[1] is None and stock == fast


@needs_accel
def test_next_batch_makes_batches_without_init():
    """The batch and its records are made in C (stock's __init__s are not called) with
    stock's slot values; its header tuple holds ints only, so it is made untracked, as the
    collector leaves it."""
    import gc

    calls = []
    init = kdr.DefaultRecordBatch.__init__
    fkp.install()
    try:
        inits = []
        memory = MemoryRecords(TWO_BATCHES)
        sys.setprofile(
            lambda frame, event, arg: (
                event == "call"
                and frame.f_code.co_name == "__init__"
                and inits.append(frame.f_code.co_filename)
            )
        )
        try:
            batch = memory.next_batch()
            records = list(batch)
        finally:
            sys.setprofile(None)
        assert inits == [] and len(records) == 9  # no DefaultRecordBatch, DefaultRecord __init__
        assert type(batch) is kdr.DefaultRecordBatch
        assert all(type(r) is kdr.DefaultRecord for r in records)
        assert not gc.is_tracked(batch._header_data)
        assert batch._header_data == kdr.DefaultRecordBatch.HEADER_STRUCT.unpack_from(TWO_BATCHES)
        # A changed __init__ (or any attribute of the class) is called as stock calls it.
        kdr.DefaultRecordBatch.__init__ = lambda self, b: calls.append(bytes(b)) or init(self, b)
        try:
            batch = MemoryRecords(TWO_BATCHES).next_batch()
        finally:
            kdr.DefaultRecordBatch.__init__ = init
        assert len(calls) == 1 and type(batch) is kdr.DefaultRecordBatch
    finally:
        fkp.uninstall()


def cut_and_bent(data):
    """Every prefix of data, and data with its batch lengths and magic bytes bent."""
    out = [data[:n] for n in range(0, len(data) + 1, 7)] + [data[:-1], data + b"\x00" * 11]
    for length in (-1, -(2**31), 0, 13, 14, 48, 49, 2**31 - 1):
        out.append(data[:8] + struct.pack(">i", length) + data[12:])
    for magic in (-128, -1, 0, 1, 3, 127):
        out.append(data[:16] + struct.pack(">b", magic) + data[17:])
    for size in (12, 25, 26, 27, 60, 61):
        out.append(struct.pack(">qi", 0, size - 12) + data[12:size])
    return out


@needs_accel
def test_next_batch_on_cut_and_bent_input(accel):
    """Truncated walks, lengths negative or past the end, short batches (stock's
    CorruptRecordError below 26 bytes, its struct.error below 61), every magic byte."""
    for data in cut_and_bent(TWO_BATCHES):
        for wrap in (bytes, bytearray, memoryview):
            for fn in (
                walk(lambda: MemoryRecords(wrap(data))),
                take_all(bytes(data), check_crcs=True),
            ):
                stock, fast = accel(fn)
                assert stock == fast, (data.hex(), wrap)


@needs_accel
def test_bad_crc_and_wrong_magic_give_stocks_exceptions(accel):
    bad_crc = bytearray(TWO_BATCHES)
    bad_crc[30] ^= 1
    magic_3 = bytearray(TWO_BATCHES)
    magic_3[16] = 3
    for data in (bytes(bad_crc), bytes(magic_3)):
        for fn in (walk(lambda: MemoryRecords(data)), take_all(data, check_crcs=True)):
            stock, fast = accel(fn)
            assert stock == fast
    stock, _ = accel(take_all(bytes(bad_crc), check_crcs=True))
    assert stock[1][0].__name__ == "CorruptRecordError"


class Sneaky(int):
    """An int that runs code where it is compared or used as an index."""

    def __index__(self):
        self.hits.append("index")
        return int(self)

    def __lt__(self, other):
        self.hits.append("lt")
        return int(self) < other

    def __ge__(self, other):
        self.hits.append("ge")
        return int(self) >= other


@needs_accel
@pytest.mark.parametrize(
    "attr, value",
    [
        ("_pos", -3),
        ("_pos", 10**20),
        ("_pos", 2.0),
        ("_pos", "sneaky"),
        ("_pos", None),
        ("_buffer", None),
        ("_buffer", b""),
        ("_buffer", "text"),
        ("_buffer", bytearray(b"\x00" * 30)),
        ("_buffer", memoryview(b"\x00" * 64).cast("B", (8, 8))),
        ("_buffer", memoryview(TWO_BATCHES)[::2]),
        ("_next_slice", b"\x00" * 70),
        ("_next_slice", memoryview(bytearray(TWO_BATCHES))),
        ("_next_slice", "released"),
        ("_next_slice", memoryview(TWO_BATCHES[: len(TWO_BATCHES) // 4 * 4]).cast("I")),
        ("_next_slice", 5),
        ("_remaining_bytes", 3),
    ],
)
def test_next_batch_on_replaced_state(accel, attr, value):
    """MemoryRecords state someone replaced: stock's outcome, and no crash."""
    hits = []
    Sneaky.hits = hits

    def make():
        records = MemoryRecords(TWO_BATCHES)
        v = value
        if v == "sneaky":
            v = Sneaky(0)
        elif v == "released":
            v = memoryview(TWO_BATCHES)[:100]
            v.release()
        setattr(records, attr, v)
        return records

    stock, fast = accel(walk(make, steps=5))
    assert stock == fast
    assert hits[: len(hits) // 2] == hits[len(hits) // 2 :]  # the same calls both ways


@needs_accel
@pytest.mark.parametrize(
    "owner, attr",
    [
        (kdr.DefaultRecordBatch, "magic"),
        (kdr.DefaultRecordBatch, "is_control_batch"),
        (kdr.DefaultRecordBatch, "leader_epoch"),
        (kdr.DefaultRecordBatch, "_maybe_uncompress"),
        (kdr.DefaultRecordBase, "HEADER_STRUCT"),
        (kdr.DefaultRecord, "offset"),
        (MemoryRecords, "_cache_next"),
    ],
)
@pytest.mark.parametrize("when", ["before install", "after install"])
def test_changed_classes_are_asked_as_stock_asks(accel, monkeypatch, owner, attr, when):
    """A property, method or constant someone replaced (a test's mock): the fetcher and the
    walk call it as stock does, whether it was replaced before install() or after."""
    calls = []
    original = vars(owner)[attr]
    if isinstance(original, property):
        replacement = property(lambda self: calls.append(attr) or original.fget(self))
    elif callable(original):

        def replacement(self, *a, **kw):
            calls.append(attr)
            return original(self, *a, **kw)

    else:
        replacement = struct.Struct(original.format)
    data = BATCHES["transactional, aborted and committed"] + TWO_BATCHES

    def fn(got):
        if when == "after install":
            monkeypatch.setattr(owner, attr, replacement)
        try:
            take_all(data, check_crcs=True, chunk=5)(got)
            walk(lambda: MemoryRecords(data))(got)
        finally:
            if when == "after install":
                monkeypatch.setattr(owner, attr, original)

    if when == "before install":
        monkeypatch.setattr(owner, attr, replacement)
    stock, fast = accel(fn)
    assert stock[1] is None and stock == fast
    if not isinstance(replacement, struct.Struct):
        assert calls and calls[: len(calls) // 2] == calls[len(calls) // 2 :]


@needs_accel
def test_a_replaced_batch_class_in_memory_records_is_called(accel, monkeypatch):
    """memory_records' own name DefaultRecordBatch is what next_batch calls, as stock."""
    from kafka.record import memory_records

    class Batch(kdr.DefaultRecordBatch):
        __slots__ = ()

    monkeypatch.setattr(memory_records, "DefaultRecordBatch", Batch)
    stock, fast = accel(walk(lambda: MemoryRecords(TWO_BATCHES)))
    assert stock == fast and fast[0][2][0] is Batch


@needs_accel
def test_header_tuples_are_untracked_and_equal(accel):
    """Record headers are (str, bytes-or-None) tuples: made untracked (as CPython's
    collector leaves them), equal to stock's."""
    import gc

    data = kp_batch([(1, b"k", b"v", [("a", b"1"), ("b", None)])] * 3)

    def fn(got):
        for record in Fetcher.PartitionRecords(0, TP, MemoryRecords(data)).take():
            got.append(record.headers)
            if fkp.installed():
                assert not any(gc.is_tracked(h) for h in record.headers)
                assert gc.is_tracked(record) and gc.is_tracked(record.headers)

    stock, fast = accel(fn)
    assert stock[1] is None and stock == fast


@needs_accel
def test_fast_path_stops_while_a_class_is_changed_and_resumes_after():
    from fastkwire import _kafka_python

    magic = vars(kdr.DefaultRecordBatch)["magic"]
    fkp.install()
    try:
        for changed in (False, True, True, False):
            if changed:
                kdr.DefaultRecordBatch.magic = property(lambda self: magic.fget(self))
            else:
                kdr.DefaultRecordBatch.magic = magic
            before = _kafka_python.fast_batches()
            got = take_all(TWO_BATCHES)
            out = []
            got(out)
            assert len(out[0]) == 27
            assert _kafka_python.fast_batches() == before + (0 if changed else 3)
    finally:
        kdr.DefaultRecordBatch.magic = magic
        fkp.uninstall()

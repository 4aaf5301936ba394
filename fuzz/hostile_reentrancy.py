"""Python code inside the compiled routines, on purpose: every entry point run while a
collection (and its gc.callbacks) can start at any allocation and rewrite what it finds.

    python3 fuzz/hostile_reentrancy.py --loop 2000 --seed 1

All three hostile reviews found their worst defects in one shape: a C routine checks
or takes something (a buffer's pointer, a list's size, a type), then allocates or calls
a dunder, and Python code running there changes what it holds. Each input (a seed)
picks one compiled entry point and runs it with, at once:

- the collector at threshold 1, and a gc callback that at a collection now and then
  mutates a bytearray, list or numpy array of the case (its inputs and what they hold)
  or a young bytearray or array `gc.get_objects(0)` finds: storage moved (same bytes),
  cut, grown, cleared or overwritten; lists reversed, cleared, grown, emptied; arrays
  overwritten or resized. At every collection it walks every young container (tuple(),
  items(), get_referents()), so a half-built one is seen;
- hostile arguments: ints whose __index__, __eq__, __ge__, __len__ mutate the same
  victims (a batch's state replaced by them, and its buffer by None or another);
- now and then, every list holding a small int (gc.get_referrers) is a victim too;
- the other owners of what a routine holds (the fourth review's shape: a loop and its
  closer, a guard and its replacer): now and then, instead of a mutation, the callback
  closes the iterator being stepped, replaces or drops an attribute the routine read
  (a message's or a Record's slot, a PartitionRecords' records, partition, iterator,
  deserializer, a batch's buffer or header), or uninstalls and reinstalls the
  accelerator whose guards and bindings the routine is using. fuzz/threaded.py runs
  the same acts from another thread (`owner_strike`) while the routines run.

The entry points: the engine's decode and decode_from (bytearray, memoryview, numpy
inputs; arrays="numpy", records="view") and encode and encode_into (fuzz/hostile.py's
hostile messages); the record kernel's read_batches, read_columns and write_batch; the
kafka-python seams (a batch's records, the builder, murmur2, the fetcher's loop, the
partitioner, the producer's try_append) and its target plans (kafka-python's messages
decoded and encoded through them); the aiokafka seams (the fetcher's record loop through
next(), getall() and getone(), Struct.decode, murmur2).

With the callback rewriting inputs midway, results depend on when collections run, so
the oracle is memory safety, not agreement: any Python exception is an outcome except
SystemError (a C-API misuse); a crash (under AddressSanitizer, any report) is the
finding. tools/asan.sh runs REENTRANCY_INPUTS of them (CI's ASan smoke: 1,500).
"""

import argparse
import gc
import importlib
import io
import random
import sys
import time
import traceback
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np  # noqa: E402

import differential as D  # noqa: E402
import hostile  # noqa: E402

CY = importlib.import_module("fastkwire._messages_cython")
from fastkwire._batches import Codec  # noqa: E402
from fastkwire.records import Record  # noqa: E402

RECORDS = Codec(importlib.import_module("fastkwire._records"))
RECORD_SEEDS = [data for _, data in D.record_seeds()]
VERSIONS = list(D.message_versions())
_SEEDS = {}


def message_seed(rng):
    """(target, bytes): every field set, a frame or a bare body of a random message and
    version (made on first use: making them all takes seconds, more under ASan)."""
    name, v = rng.choice(VERSIONS)
    if (name, v) not in _SEEDS:
        d = D.full_dict(name, v)
        _SEEDS[name, v] = (
            D.frame_of(D.PY, name, v, d),
            (("body", name, v), getattr(D.PY, name).from_dict(d).encode(v)),
        )
    return rng.choice(_SEEDS[name, v])


class Victims:
    """What the collector callback and the hostile dunders rewrite: the case's mutable
    objects, and (from the callback) the young buffers the collector sees."""

    def __init__(self, rng):
        self.rng = rng
        self.objects = []
        self.owners = []  # acts of another owner: close, replace, drop, reinstall
        self.active = False

    def own(self, *acts):
        """Acts another owner of what the case's routine holds may do meanwhile."""
        self.owners.extend(acts)

    def act(self, rng):
        """One owner's act, whatever it raises (a refusal is the routine holding on)."""
        if self.owners:
            try:
                rng.choice(self.owners)(rng)
            except Exception:  # noqa: BLE001, S110 - refused acts are the point
                pass

    def add(self, *objs):
        for o in objs:
            if hasattr(o, "_buffer") and hasattr(o, "_next_record_index"):  # a batch
                self.objects.append(o)
            elif type(o) in (bytearray, list, np.ndarray):
                self.objects.append(o)
                if type(o) is list:  # and what the list holds, one level down
                    self.objects.extend(x for x in o if type(x) in (bytearray, list))
        return objs[0] if len(objs) == 1 else objs

    def strike(self, young=()):
        if not self.active:
            return
        self.active = False  # what a mutation allocates must not strike again inside it
        try:
            pool = self.objects + [o for o in young if type(o) in (bytearray, np.ndarray)]
            roll = self.rng.random()
            if self.owners and roll < 0.1:
                self.act(self.rng)
            elif pool and roll < 0.3:  # one change now and then: deep paths too
                mutate(self.rng.choice(pool), self.rng)
        finally:
            self.active = True


def mutate(o, rng):
    """One change to a bytearray, list or array; whatever it raises (BufferError while
    the object is exported, ...) is the routine holding it, as it should."""
    k = rng.randrange(6)
    try:
        if hasattr(o, "_next_record_index"):  # a kafka-python batch: its buffer replaced
            o._buffer = rng.choice([None, bytearray(8), b"", bytearray(o._buffer or b"")])
        elif type(o) is bytearray:
            if k == 0 and o:  # same bytes, new storage: the old block is freed
                first = o[:1]
                del o[:1]
                o[0:0] = first
            elif k == 1:
                del o[len(o) // 2 :]
            elif k == 2:
                o.extend(bytes(rng.choice([1, 4096, 1 << 17])))
            elif k == 3:
                o.clear()
            elif k == 4 and o:
                o[rng.randrange(len(o))] = rng.randrange(256)
            else:
                o[:] = o[: len(o) // 3]
        elif type(o) is list:
            if k == 0:
                o.reverse()
            elif k == 1:
                o.clear()
            elif k == 2:
                o.extend([None, 1 << 70, "x", b"y"])
            elif k == 3 and o:
                o.pop()
            elif k == 4:
                o.insert(0, o)
            else:
                o[:] = o[: len(o) // 2]
        elif type(o) is np.ndarray:
            if k < 3 and o.flags.writeable:
                o.fill(rng.randrange(-128, 128))
            else:
                o.resize(rng.randrange(0, 8), refcheck=True)
    except Exception:  # noqa: BLE001, S110 - refused changes are the point
        pass


def walk_young():
    """As a debugger or memory profiler does: read every young container."""
    young = gc.get_objects(0)
    for o in young:
        t = type(o)
        if t is list or t is tuple:
            tuple(o)
        elif t is dict:
            tuple(o.items())
        gc.get_referents(o)
    return young


class Hostile(int):
    """An int whose dunders run the victims' mutations first."""

    victims = None

    def _hit(self):
        if Hostile.victims is not None:
            Hostile.victims.strike()

    def __index__(self):
        self._hit()
        return int(self)

    def __eq__(self, other):
        self._hit()
        return int(self) == other

    def __ge__(self, other):
        self._hit()
        return int(self) >= other

    def __lt__(self, other):
        self._hit()
        return int(self) < other

    def __len__(self):
        self._hit()
        return 2

    __hash__ = int.__hash__


class HostileList(list):
    def __len__(self):
        if Hostile.victims is not None:
            Hostile.victims.strike()
        return super().__len__()


def as_input(data, rng, victims):
    """The bytes as a caller might pass them, registered as victims when mutable."""
    k = rng.randrange(4)
    if k == 0:
        return data
    buf = victims.add(bytearray(data))
    if k == 1:
        return buf
    if k == 2:
        return memoryview(buf)
    return victims.add(np.frombuffer(buf, np.uint8).copy())


# ---------------------------------------------------------------- the entry points


def engine_decode(rng, victims):
    target, data = message_seed(rng)
    data = D.mutate(bytearray(data), rng) if rng.random() < 0.3 else data
    arg = as_input(bytes(data), rng, victims)
    if target[0] == "request":
        return CY.decode_request(arg)
    if target[0] == "response":
        return CY.decode_response(arg, target[1], target[2])
    cls = getattr(CY, target[1])
    arrays = rng.choice(["list", "numpy"])
    records = rng.choice(["bytes", "view"])
    version = Hostile(target[2]) if rng.random() < 0.2 else target[2]
    if rng.random() < 0.5:
        return cls.decode(arg, version, arrays=arrays, records=records)
    offset = Hostile(0) if rng.random() < 0.3 else 0
    return cls.decode_from(arg, version, offset, arrays=arrays, records=records)


def engine_encode(rng, victims):
    seed = rng.getrandbits(48)
    _, _, message, version = hostile.build(CY, seed)
    for name in type(message).__slots__:
        victims.add(getattr(message, name, None))
    victims.own(lambda rng: replace_slot(message, rng))
    if rng.random() < 0.5:
        return message.encode(version)
    buf = victims.add(bytearray(rng.choice([0, 64, 4096, 1 << 17])))
    return message.encode_into(buf, Hostile(0) if rng.random() < 0.3 else 0, version)


def records_read(rng, victims):
    data = rng.choice(RECORD_SEEDS)
    data = D.mutate(bytearray(data), rng) if rng.random() < 0.3 else data
    arg = as_input(bytes(data), rng, victims)
    if rng.random() < 0.5:
        return RECORDS.read_batches(arg, check_crc=rng.random() < 0.5, max_decompressed=1 << 16)
    return RECORDS.read_columns(arg, check_crc=False, max_decompressed=1 << 16)


def replace_slot(obj, rng):
    """Another owner's assignment to one of obj's slots: the old value dropped (freed
    where the routine held no reference of its own), a new one of any type."""
    names = [n for n in type(obj).__slots__ if not n.startswith("__")]
    if names:
        setattr(obj, rng.choice(names), rng.choice(REPLACEMENTS)())


REPLACEMENTS = (
    lambda: None,
    lambda: 0,
    lambda: b"",
    lambda: bytearray(b"r" * 300),
    lambda: [],
    lambda: [("h", b"x")],
    lambda: "s" * 40,
)


def records_write(rng, victims):
    records = []
    for i in range(rng.randrange(1, 8)):
        headers = victims.add([("h", victims.add(bytearray(b"x" * rng.randrange(40))))])
        key = rng.choice([None, b"k", victims.add(bytearray(b"key" * 30))])
        records.append(Record(i, 1000 + i, key, b"v" * rng.randrange(300), headers))
    victims.own(*(lambda rng, r=r: replace_slot(r, rng) for r in records))
    records = victims.add(HostileList(records) if rng.random() < 0.3 else records)
    if rng.random() < 0.3:
        return RECORDS.write_batch(records).hex()
    cols = RECORDS.read_columns(RECORDS.write_batch(list(records)))
    for name in ("offset", "timestamp"):
        victims.add(getattr(cols, name))
    for column in (cols.key, cols.value):
        victims.add(column.data, column.offsets, column.nulls)
    return RECORDS.write_batch(cols)


_KAFKA = None


def kafka_parts():
    """kafka-python's pieces with the accelerator installed, or None without them."""
    global _KAFKA
    if _KAFKA is None:
        try:
            from kafka.protocol.metadata import MetadataRequest, MetadataResponse
            from kafka.record.memory_records import MemoryRecords, MemoryRecordsBuilder

            import fastkwire.kafka_python as fkp
        except ImportError:
            _KAFKA = False
            return None
        if not fkp.install():
            _KAFKA = False
            return None
        b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 20)
        for i in range(40):
            b.append(timestamp=1, key=b"k%d" % i, value=b"v" * 50, headers=[("h", b"x")] * 2)
        b.close()
        body = CY.MetadataResponse(
            topics=[
                CY.MetadataResponse.MetadataResponseTopic(
                    name="t",
                    partitions=[
                        CY.MetadataResponse.MetadataResponsePartition(
                            partition_index=i, replica_nodes=[1, 2]
                        )
                        for i in range(5)
                    ],
                )
            ]
        ).encode(12)
        _KAFKA = (
            MemoryRecords,
            MemoryRecordsBuilder,
            bytes(b.buffer()),
            MetadataRequest,
            MetadataResponse,
            body,
        )
    return _KAFKA or None


def reinstall(accelerator):
    """Another owner's uninstall(); install(): every guard and binding the routine may
    be using replaced (the old ones dropped)."""

    def act(rng):
        accelerator.uninstall()
        accelerator.install()

    return act


class Rebinding:
    """Another owner's reinstall with one of the library's classes rebound in its module
    (to a twin of another layout, or back): an instance a routine makes without calling
    its class must be of the class it checked, filled at that class's offsets."""

    def __init__(self, accelerator, module, name, twin):
        self.accelerator, self.module, self.name = accelerator, module, name
        self.stock, self.twin = getattr(module, name), twin

    def act(self, rng):
        self.accelerator.uninstall()
        rebound = getattr(self.module, self.name) is self.stock
        setattr(self.module, self.name, self.twin if rebound else self.stock)
        self.accelerator.install()

    def restore(self):
        """The stock class back (a case starts with it)."""
        if getattr(self.module, self.name) is not self.stock:
            self.accelerator.uninstall()
            setattr(self.module, self.name, self.stock)
            self.accelerator.install()


def wide_twin(cls):
    """A class with cls's methods and slots, its slots after 64 others (CPython lays
    slots out sorted by name): every slot at another offset than in cls."""
    own = {
        k: v
        for k, v in vars(cls).items()
        if k not in ("__slots__", "__dict__", "__weakref__")
        and type(v) is not types.MemberDescriptorType
    }
    own["__slots__"] = tuple(f"_a{i:02d}" for i in range(64)) + tuple(cls.__slots__)
    return type(cls)(cls.__name__, cls.__bases__, own)


_REBIND = {}


def rebinding(key, make):
    if key not in _REBIND:
        _REBIND[key] = make()
    return _REBIND[key]


def kafka_python(rng, victims):
    parts = kafka_parts()
    if parts is None:
        return None
    MemoryRecords, MemoryRecordsBuilder, batch_bytes, _, MetadataResponse, body = parts
    from kafka.record import default_records

    import fastkwire.kafka_python as fkp

    record = rebinding(
        "kafka DefaultRecord",
        lambda: Rebinding(
            fkp, default_records, "DefaultRecord", wide_twin(default_records.DefaultRecord)
        ),
    )
    record.restore()
    fkp.install()  # another thread's reinstall may have left it out
    victims.own(reinstall(fkp), record.act)
    k = rng.randrange(7)
    if k == 0:  # a batch's records, its state replaced by hostile ints at random
        data = D.mutate(bytearray(batch_bytes), rng) if rng.random() < 0.3 else batch_bytes
        batch = MemoryRecords(bytes(data)).next_batch()
        if batch is None:
            return None
        iter(batch)
        victims.add(batch._buffer, batch)
        victims.own(
            lambda rng: setattr(batch, "_header_data", rng.choice([None, (), batch._header_data])),
        )
        for name in ("_next_record_index", "_num_records", "_pos"):
            if rng.random() < 0.2:
                setattr(batch, name, Hostile(getattr(batch, name)))
        return [(r.offset, r.key, r.headers) for r in batch]
    if k == 1:  # the builder, with headers and values that change while appended
        b = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
        for i in range(rng.randrange(1, 20)):
            headers = victims.add([("h", b"x" * rng.randrange(30))])
            b.append(
                timestamp=Hostile(5) if rng.random() < 0.1 else 5,
                key=b"k",
                value=b"v" * rng.randrange(100),
                headers=headers,
            )
        b.close()
        return bytes(b.buffer())
    if k == 2:
        from kafka.partitioner import default

        return default.murmur2(victims.add(bytearray(rng.randbytes(rng.randrange(64)))))
    if k == 4:  # the fetcher's loop: its MemoryRecords' state replaced, its generator closed
        from kafka.consumer.fetcher import Fetcher
        from kafka.structs import TopicPartition

        data = D.mutate(bytearray(batch_bytes), rng) if rng.random() < 0.3 else batch_bytes
        records = MemoryRecords(bytes(data) * rng.randrange(1, 3))
        pr = Fetcher.PartitionRecords(0, TopicPartition("t", 0), records)
        victims.own(
            lambda rng: pr.record_iterator.close(),
            lambda rng: setattr(records, "_next_slice", None),
            lambda rng: setattr(records, "_buffer", rng.choice([b"", bytearray(9), None])),
        )
        return [(r.offset, r.key, r.headers) for r in pr.take()]
    if k == 5:  # the partitioner: the cluster's table replaced and emptied
        from collections import namedtuple

        from kafka.cluster import ClusterMetadata
        from kafka.partitioner.default import DefaultPartitioner

        cluster = ClusterMetadata()
        leader = namedtuple("Partition", "leader_id")
        cluster._partitions["t"] = {i: leader(0) for i in range(rng.randrange(1, 9))}
        victims.own(
            lambda rng: cluster._partitions.clear(),
            lambda rng: cluster._partitions.__setitem__("t", {}),
            lambda rng: setattr(cluster, "_partitions", {"t": {1: leader(0)}}),
        )
        partitioner = DefaultPartitioner()
        return [
            partitioner.partition("t", key, key, None, None, cluster)
            for key in (b"k%d" % i for i in range(rng.randrange(1, 30)))
        ]
    if k == 6:  # the producer's batch: its futures made while the classes are replaced
        from kafka.producer.producer_batch import ProducerBatch
        from kafka.structs import TopicPartition

        builder = MemoryRecordsBuilder(magic=2, compression_type=0, batch_size=1 << 16)
        batch = ProducerBatch(TopicPartition("t", 0), builder)
        return [
            getattr(batch.try_append(1, b"k", b"v" * i, [("h", b"x")]), "args", None)
            for i in range(rng.randrange(1, 20))
        ]
    data = D.mutate(bytearray(body), rng) if rng.random() < 0.5 else body
    got = MetadataResponse.decode(as_input(bytes(data), rng, victims), version=12)
    got._header = None
    for topic in got.topics or ():
        victims.add(topic.partitions)
    return got.encode(version=12)


_AIOKAFKA = None


def aiokafka_parts():
    """aiokafka's pieces with the accelerator installed, or None without them."""
    global _AIOKAFKA
    if _AIOKAFKA is None:
        try:
            from aiokafka.consumer import fetcher
            from aiokafka.partitioner import murmur2
            from aiokafka.protocol.metadata import MetadataResponse_v5
            from aiokafka.record import default_records, memory_records
            from aiokafka.structs import TopicPartition

            import fastkwire.aiokafka as fka
            from fastkwire import _aiokafka
        except ImportError:
            _AIOKAFKA = False
            return None
        if fka.unsupported_reason() is not None or not fka.install():  # a declined release
            _AIOKAFKA = False
            return None
        batches = []
        for n, compression in enumerate((0, 0, 1)):
            b = default_records.DefaultRecordBatchBuilder(2, compression, 0, -1, -1, 0, 1 << 20)
            for i in range(30):
                b.append(i, timestamp=1, key=b"k%d" % i, value=b"v" * 60, headers=[("h", b"x")] * 2)
            data = bytearray(b.build())
            data[:8] = (n * 30).to_bytes(8, "big")
            batches.append(bytes(data))
        body = CY.MetadataResponse(
            brokers=[CY.MetadataResponse.MetadataResponseBroker(node_id=1, host="h", port=9092)],
            topics=[
                CY.MetadataResponse.MetadataResponseTopic(
                    name="t",
                    partitions=[
                        CY.MetadataResponse.MetadataResponsePartition(
                            partition_index=i, replica_nodes=[1, 2], isr_nodes=[1]
                        )
                        for i in range(5)
                    ],
                )
            ],
        ).encode(5)
        _AIOKAFKA = (
            fka,
            _aiokafka,
            fetcher,
            memory_records.MemoryRecords,
            TopicPartition,
            b"".join(batches),
            MetadataResponse_v5,
            body,
            murmur2,
        )
    return _AIOKAFKA or None


def dict_twin(cls):
    """A dict subclass taking cls's dataclass fields (object.__new__ does not make a
    dict: a routine that makes it so, then its __init__, gives a dict without its table)."""
    names = tuple(cls.__dataclass_fields__)

    class Twin(dict):
        def __init__(self, *args, **kwargs):
            fields = {**dict(zip(names, args)), **kwargs}
            super().__init__(fields)
            self.__dict__.update(fields)

    Twin.__name__ = cls.__name__
    return Twin


class Result:
    """What FetchResult.getall asks of its FetchResult, without its assignment."""

    _partition_records = property(lambda self: self.pr, lambda self, value: None)
    _topic_partition = None

    def check_assignment(self, tp):
        return True

    def has_more(self):
        return True

    def _update_position(self):
        pass


def aiokafka(rng, victims):
    parts = aiokafka_parts()
    if parts is None:
        return None
    fka, _aiokafka, fetcher, MemoryRecords, TopicPartition, data, Metadata, body, murmur2 = parts
    record = rebinding(
        "aiokafka ConsumerRecord",
        lambda: Rebinding(fka, fetcher, "ConsumerRecord", dict_twin(fetcher.ConsumerRecord)),
    )
    record.restore()
    fka.install()  # another thread's reinstall may have left it out
    victims.own(reinstall(fka), record.act)
    k = rng.randrange(5)
    if k == 0:
        arg = body if rng.random() < 0.5 else D.mutate(bytearray(body), rng)
        return Metadata.decode(io.BytesIO(arg) if rng.random() < 0.5 else bytes(arg))
    if k == 1:
        return murmur2(victims.add(bytearray(rng.randbytes(rng.randrange(64)))))
    # the fetcher's loop, and what its PartitionRecords holds closed, replaced, dropped
    if rng.random() < 0.3:
        data = bytes(D.mutate(bytearray(data), rng))
    deserialize = rng.choice([None, lambda b: b])
    pr = fetcher.PartitionRecords(
        TopicPartition("t", 0),
        MemoryRecords(data),
        None,
        0,
        None,
        deserialize,
        rng.random() < 0.5,
        fetcher.READ_UNCOMMITTED,
    )

    def close(rng):
        pr._records_iterator.close()

    victims.own(
        close,
        lambda rng: setattr(pr, "_records", rng.choice([None, MemoryRecords(b"")])),
        lambda rng: setattr(pr, "_records_iterator", None),
        lambda rng: setattr(pr, "_tp", TopicPartition("u", 1)),
        lambda rng: setattr(pr, "_value_deserializer", rng.choice([None, bytes])),
        lambda rng: setattr(pr, "next_fetch_offset", rng.randrange(100)),
    )
    if k == 2:
        return [r.offset for r in pr]
    if k == 3:
        result = Result()
        result.pr = pr
        taken = []
        for _ in range(100):
            got = _aiokafka.fetch_result_getall(result, rng.choice([None, 1, 7]))
            if not got:
                break
            taken += got
        return len(taken)
    return [getattr(next(pr, None), "offset", None) for _ in range(rng.randrange(1, 100))]


ENTRY_POINTS = (engine_decode, engine_encode, records_read, records_write, kafka_python, aiokafka)
# The cases running now (their Victims): another thread's owner_strike acts on them.
LIVE = set()


def warm():
    """Make before any thread runs what the entry points make on first use: the message
    classes (made by exec) and kafka-python's parts (imports). CPython's compiler and
    unmarshaller fill lists they have already made while they allocate, so a collection
    there shows walk_young a list with empty slots, which crashes it: a walker on another
    thread meeting CPython's own half-built objects, not fastkwire's."""
    for name in CY.__all__:
        getattr(CY, name)
    kafka_parts()
    aiokafka_parts()
    try:
        from collections import namedtuple  # noqa: F401

        from kafka.cluster import ClusterMetadata  # noqa: F401
        from kafka.consumer.fetcher import Fetcher  # noqa: F401
        from kafka.partitioner import default  # noqa: F401
        from kafka.producer.producer_batch import ProducerBatch  # noqa: F401
    except ImportError:
        pass
    for seed in range(len(ENTRY_POINTS) * 4):  # every path's first use, imports and all
        try:
            check(seed)
        except Exception:  # noqa: BLE001, S110 - a finding shows again in the run
            pass


def owner_strike(rng):
    """Another thread's act on a case running now: one of its owners' acts (close,
    replace, drop, reinstall) or one of its mutations (fuzz/threaded.py calls this in a
    loop while the threads check their seeds)."""
    live = list(LIVE)
    if not live:
        return
    victims = rng.choice(live)
    objects = list(victims.objects)  # a copy: the case's own thread may change the list meanwhile
    if victims.owners and rng.random() < 0.5:
        victims.act(rng)
    elif objects:
        mutate(rng.choice(objects), rng)


def aiokafkas_own(error):
    """The SystemError was raised in aiokafka's compiled record readers, which stock meets
    on the same bytes (its legacy reader passes a negative key or value length to
    PyBytes_FromStringAndSize): theirs to fix, not a finding here."""
    tb = error.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return "aiokafka/record/_crecords/" in tb.tb_frame.f_code.co_filename.replace("\\", "/")


def check(seed):
    """One input: an entry point, run under the mutating collector."""
    rng = random.Random(seed)
    entry = ENTRY_POINTS[seed % len(ENTRY_POINTS)]
    victims = Victims(random.Random(seed ^ 0xBAD))

    def callback(phase, info):
        if phase == "start":
            victims.strike(walk_young())

    if rng.random() < 0.03:
        # what holds a small int: a table the decoder reads must not be among them
        for holder in gc.get_referrers(rng.randrange(257, 16384)):
            victims.add(holder)
    threshold = gc.get_threshold()
    Hostile.victims = victims
    gc.callbacks.append(callback)
    gc.set_threshold(1)
    victims.active = True
    LIVE.add(victims)
    try:
        entry(rng, victims)
        return entry.__name__, "ok"
    except SystemError as e:
        if not aiokafkas_own(e):
            raise
        return entry.__name__, "aiokafka's SystemError"
    except Exception as e:  # noqa: BLE001 - any exception but SystemError is an outcome
        return entry.__name__, type(e).__name__
    finally:
        LIVE.discard(victims)
        victims.active = False
        gc.callbacks.remove(callback)
        gc.set_threshold(*threshold)
        Hostile.victims = None


def run_loop(count, seed):
    rng = random.Random(seed)
    findings = 0
    outcomes = {}
    started = time.monotonic()
    for i in range(1, count + 1):
        case = rng.getrandbits(48)
        try:
            name, result = check(case)
            outcomes[name, result] = outcomes.get((name, result), 0) + 1
        except Exception:  # noqa: BLE001 - a finding
            findings += 1
            print(f"finding {findings} at input {i}: seed {case}", file=sys.stderr)
            traceback.print_exc()
        if i % 500 == 0:
            print(f"#{i} inputs, {findings} findings", file=sys.stderr)
    elapsed = time.monotonic() - started
    shown = ", ".join(f"{n}:{r} {c}" for (n, r), c in sorted(outcomes.items()))
    print(
        f"done: {count} inputs in {elapsed:.0f} s, {findings} findings ({shown})", file=sys.stderr
    )
    return findings


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--loop", type=int, default=2000, help="inputs to run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--replay", type=int, help="check one input (a seed a finding printed)")
    args = parser.parse_args()
    if args.replay is not None:
        print(check(args.replay))
        return
    sys.exit(1 if run_loop(args.loop, args.seed) else 0)


if __name__ == "__main__":
    main()

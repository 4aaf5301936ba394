# cython: language_level=3, binding=True, boundscheck=False, wraparound=False, cdivision=True
"""The compiled half of fastkwire.aiokafka: aiokafka's partitioner hash and its
producer's partition choice, its fetcher's per-record loop, its consumer's fetch context
and its protocol Struct.decode, producing aiokafka's own objects.

The records themselves are still read by aiokafka's own batch classes (its C reader, its
decompression, its CorruptRecordException messages); what runs here instead of Python is
the loop around them: the offset check, the deserializers, the ConsumerRecord. Nothing
here is called before bind() and bind_protocol() have given it aiokafka's classes.
"""
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.object cimport PyObject, PyObject_IsTrue
from cpython.ref cimport Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t
from libc.string cimport memcpy
from types import FunctionType

cdef extern from "Python.h":
    const Py_ssize_t PY_SSIZE_T_MAX
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    void PyObject_GC_UnTrack(object o)
    void PyObject_GC_Track(object o)
    bint PyMethod_Check(object o)
    PyObject* PyMethod_GET_FUNCTION(object o)
    PyObject* PyMethod_GET_SELF(object o)


cdef extern from "_aiokafka.h":
    object getter_value "fka_get"(object descr, object obj)
    bint is_getter "fka_is_getter"(object descr)
    object new_object "fka_new"(object type)


cdef extern from "_murmur2.h":
    uint32_t murmur2_hash "fk_murmur2"(const unsigned char* p, Py_ssize_t n) nogil


# aiokafka's objects, given by bind() (fastkwire.aiokafka.install).
cdef object stock_murmur2 = None
cdef object stock_unpack_records = None
cdef object stock_consumer_record = None
cdef object PartitionRecords = None
cdef object ConsumerRecord = None
cdef object fetcher_module = None
cdef object READ_COMMITTED = None
# ConsumerRecord's own __init__ (a dataclass's), called on object.__new__'s instance as
# calling the class would; None where the class is not that plain (then it is called)
cdef object record_init = None
# aiokafka's C record class and its fields' getset descriptors, read without the
# attribute lookup (None where its records are another class: its Python ones)
cdef object CRecord = None
cdef object get_offset, get_timestamp, get_timestamp_type, get_key, get_value, get_headers
cdef Py_ssize_t fast_iterators = 0  # loops taken by the compiled path (tests ask)


def bind(**kw):
    """Take aiokafka's classes and stock functions (install() calls this)."""
    global stock_murmur2, stock_unpack_records, stock_consumer_record, PartitionRecords
    global ConsumerRecord, fetcher_module, READ_COMMITTED
    stock_murmur2 = kw["stock_murmur2"]
    stock_unpack_records = kw["stock_unpack_records"]
    stock_consumer_record = kw["stock_consumer_record"]
    PartitionRecords = kw["PartitionRecords"]
    ConsumerRecord = kw["ConsumerRecord"]
    fetcher_module = kw["fetcher_module"]
    READ_COMMITTED = kw["READ_COMMITTED"]
    bind_record_class(kw["CRecord"])
    global record_init
    init = vars(ConsumerRecord).get("__init__") if type(ConsumerRecord) is type else None
    plain = ConsumerRecord.__new__ is object.__new__ and type(init) is FunctionType
    record_init = init if plain else None
    global stock_fetch_context, subscription_module, stock_partition, DefaultPartitioner
    global stock_partitioner_call, partitioner_module, ClusterMetadata
    global stock_partitions_for_topic, stock_available_partitions
    stock_fetch_context = kw["stock_fetch_context"]
    subscription_module = kw["subscription_module"]
    global reentry_error_args
    reentry_error_args = reentry_error()
    stock_partition = kw["stock_partition"]
    DefaultPartitioner = kw["DefaultPartitioner"]
    stock_partitioner_call = vars(DefaultPartitioner)["__call__"]
    partitioner_module = kw["partitioner_module"]
    ClusterMetadata = kw["ClusterMetadata"]
    stock_partitions_for_topic = vars(ClusterMetadata)["partitions_for_topic"]
    stock_available_partitions = vars(ClusterMetadata)["available_partitions_for_topic"]


cdef bind_record_class(cls):
    """Take aiokafka's C DefaultRecord's getters when they are what its attributes are:
    a type whose attributes cannot be set, without instance dicts, the fields getset
    descriptors and checksum the class's None."""
    global CRecord, get_offset, get_timestamp, get_timestamp_type, get_key, get_value
    global get_headers
    CRecord = None
    if cls is None or not isinstance(cls, type) or cls.__dictoffset__ != 0:
        return
    try:
        cls.__fastkwire_probe__ = 1  # an immutable type refuses: a test's mock cannot land
    except TypeError:
        pass
    else:
        del cls.__fastkwire_probe__
        return
    names = ("offset", "timestamp", "timestamp_type", "key", "value", "headers")
    descrs = [vars(cls).get(name) for name in names]
    if not all(d is not None and is_getter(d) for d in descrs):
        return
    if "checksum" not in vars(cls) or vars(cls)["checksum"] is not None:
        return
    if any(name in vars(base) for base in cls.__mro__[1:] for name in names):
        return
    get_offset, get_timestamp, get_timestamp_type, get_key, get_value, get_headers = descrs
    CRecord = cls


def record_class():
    """The record class whose fields the loop reads through their getters, or None."""
    return CRecord


def fast_loops():
    """How many PartitionRecords loops the compiled path has run (not stock's)."""
    return fast_iterators


# ---- the partitioner -----------------------------------------------------------------

def murmur2(data):
    """aiokafka.partitioner.murmur2 (Java's Utils.murmur2) for bytes and bytearray;
    anything else goes to aiokafka's own function."""
    if type(data) is bytes:
        return murmur2_hash(<const unsigned char*><bytes>data, len(<bytes>data))
    if type(data) is bytearray:
        return murmur2_hash(<const unsigned char*>PyByteArray_AS_STRING(data),
                            PyByteArray_GET_SIZE(data))
    return stock_murmur2(data)


# ---- the fetcher's loop ----------------------------------------------------------------

def unpack_records(self):
    """PartitionRecords._unpack_records: an iterator doing what stock's generator does.

    Taken while the record maker stock's loop calls is stock's (_consumer_record on the
    class, ConsumerRecord in the fetcher module): otherwise it is stock's generator."""
    global fast_iterators
    if (getattr(type(self), "_consumer_record", None) is not stock_consumer_record
            or "_consumer_record" in getattr(self, "__dict__", ())
            or getattr(fetcher_module, "ConsumerRecord", None) is not ConsumerRecord):
        return stock_unpack_records(self)
    fast_iterators += 1
    return RecordsLoop(self)


def partition_records_next(self):
    """PartitionRecords.__next__: the next record of its loop; at the end the loop is
    dropped (stock breaks the reference cycle so) and StopIteration raised."""
    record = next_record(self)
    if record is END:
        raise StopIteration
    return record


cdef object builtin_next = next
cdef object END = object()  # next_record's "no more records"


cdef object next_record(object records):
    """partition_records_next's record, or END where it raises StopIteration."""
    it = records._records_iterator
    if type(it) is RecordsLoop:
        record = (<RecordsLoop>it).take()
        if record is None:
            records._records_iterator = None
            return END
        return record
    try:
        return builtin_next(it)  # its errors word for word (None: not an iterator)
    except StopIteration:
        records._records_iterator = None
        return END


def fetch_result_getall(self, max_records=None):
    """FetchResult.getall: stock's steps, its loop over the PartitionRecords in C."""
    cdef list taken = []
    cdef Py_ssize_t limit = -1
    tp = self._topic_partition
    if not self.check_assignment(tp) or not self.has_more():
        return []
    if type(max_records) is int and max_records >= 0:
        limit = max_records if max_records <= PY_SSIZE_T_MAX else PY_SSIZE_T_MAX
    records = self._partition_records
    it = iter(records)
    fast = it is records and type(records) is PartitionRecords and (
        type(records).__next__ is partition_records_next)
    while True:
        if fast:
            msg = next_record(records)
            if msg is END:
                break
        else:
            try:
                msg = next(it)
            except StopIteration:
                break
        taken.append(msg)
        if limit >= 0:
            if len(taken) >= limit:
                self._update_position()
                return taken
        elif max_records is not None and len(taken) >= max_records:
            self._update_position()
            return taken
    self._update_position()
    self._partition_records = None
    return taken


cdef class RecordsLoop:
    """Stock's _unpack_records generator as an iterator: the same batches asked for in
    the same order, the same attributes of the PartitionRecords set at the same points,
    the deserializers called one record at a time as the records are taken. Like a
    generator it is finished once it has raised, and refuses to be re-entered."""

    cdef object owner  # the PartitionRecords
    cdef object topic, partition
    cdef object batch  # the batch whose records are being taken, or None
    cdef object batch_records  # iter(batch): the batch itself, or a generator (v0/v1)
    cdef object init  # record_init while it is still the class's __init__, else None
    cdef bint done, running

    def __cinit__(self, owner):
        self.owner = owner
        tp = owner._tp
        self.topic = tp.topic
        self.partition = tp.partition
        self.batch = None
        init = record_init
        if init is not None and vars(ConsumerRecord).get("__init__") is not init:
            init = None
        self.init = init

    def __iter__(self):
        return self

    def __next__(self):
        record = self.take()
        if record is None:
            raise StopIteration
        return record

    cdef object take(self):
        """The next ConsumerRecord, or None when there are no more."""
        if self.done:
            return None
        if self.running:
            raise ValueError("generator already executing")
        self.running = True
        try:
            record = self.step()
        except BaseException:
            self.done = True
            self.batch = self.batch_records = None
            raise
        finally:
            self.running = False
        if record is None:
            self.done = True
        return record

    def close(self):
        """As a generator's close(): nothing more is taken."""
        self.done = True
        self.batch = self.batch_records = None

    cdef object step(self):
        """The next ConsumerRecord, or None when the records are done."""
        cdef object owner = self.owner
        cdef object batch, record, offset, key, value, deserialize
        cdef bint c_record
        while True:
            if self.batch is None:
                batch = self.next_batch()
                if batch is None:
                    return None
                self.batch_records = iter(batch)
                self.batch = batch
            try:
                record = next(self.batch_records)
            except StopIteration:
                # Message format v2 keeps the last offset even when compaction removed
                # the last record: the next fetch starts after the whole batch.
                batch = self.batch
                self.batch = self.batch_records = None
                owner.next_fetch_offset = batch.next_offset
                continue
            c_record = type(record) is CRecord
            offset = getter_value(get_offset, record) if c_record else record.offset
            # Past the wanted offset only (a compressed message set may start before it).
            if offset < owner.next_fetch_offset:
                continue
            if c_record:
                key = getter_value(get_key, record)
                value = getter_value(get_value, record)
            else:
                key = record.key
                value = record.value
            key_size = len(key) if key is not None else -1
            value_size = len(value) if value is not None else -1
            deserialize = owner._key_deserializer
            if PyObject_IsTrue(deserialize):
                key = deserialize(key)
            deserialize = owner._value_deserializer
            if PyObject_IsTrue(deserialize):
                value = deserialize(value)
            if c_record and self.init is not None:
                consumer_record = new_object(ConsumerRecord)
                returned = self.init(
                    consumer_record, self.topic, self.partition, offset,
                    getter_value(get_timestamp, record), getter_value(get_timestamp_type, record),
                    key, value, None, key_size, value_size,
                    tuple(getter_value(get_headers, record)))
                if returned is not None:
                    raise TypeError(
                        f"__init__() should return None, not '{type(returned).__name__}'")
            elif c_record:
                consumer_record = ConsumerRecord(
                    self.topic, self.partition, offset, getter_value(get_timestamp, record),
                    getter_value(get_timestamp_type, record), key, value, None, key_size,
                    value_size, tuple(getter_value(get_headers, record)))
            else:
                consumer_record = ConsumerRecord(
                    self.topic, self.partition, offset, record.timestamp,
                    record.timestamp_type, key, value, record.checksum, key_size, value_size,
                    tuple(record.headers))
            owner.next_fetch_offset = offset + 1
            return consumer_record

    cdef object next_batch(self):
        """The next batch whose records are to be taken; None at the end.
        Stock's checks, in its order: CRC, aborted transactions, control batches."""
        cdef object owner = self.owner
        records = owner._records
        while records.has_next():
            batch = records.next_batch()
            if owner._check_crcs and not batch.validate_crc():
                raise fetcher_module.Errors.CorruptRecordException(
                    f"Invalid CRC - {owner._tp}")
            if owner._isolation_level == READ_COMMITTED and batch.producer_id is not None:
                owner._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and owner._contains_abort_marker(batch):
                    owner._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in owner._aborted_producers:
                    fetcher_module.log.debug(
                        "Skipping aborted record batch from partition %s with"
                        " producer_id %s and offsets %s to %s",
                        owner._tp,
                        batch.producer_id,
                        batch.base_offset,
                        batch.next_offset - 1,
                    )
                    owner.next_fetch_offset = batch.next_offset
                    continue
            if batch.is_control_batch:  # skipped at every isolation level
                owner.next_fetch_offset = batch.next_offset
                continue
            return batch
        return None


# ---- the consumer's fetch context ------------------------------------------------------

cdef object stock_fetch_context = None  # SubscriptionState.fetch_context (a contextmanager)
cdef object subscription_module = None  # aiokafka.consumer.subscription_state
cdef tuple reentry_error_args = ()  # the AttributeError's args stock's gives on re-entry


cdef tuple reentry_error():
    """The args of the AttributeError a contextlib context manager raises when entered
    twice (it deletes its arguments on entry; the wording is the Python version's)."""
    import contextlib

    manager = contextlib._GeneratorContextManager.__new__(contextlib._GeneratorContextManager)
    try:
        del manager.args
    except AttributeError as exc:
        return exc.args
    return ("args",)


def fetch_context(self, *args, **kwargs):
    """SubscriptionState.fetch_context(): getone() and getmany() enter it once a call.
    Stock's is a generator made a context manager; this is the same steps without the
    generator. Other call shapes go to stock's."""
    if args or kwargs:
        return stock_fetch_context(self, *args, **kwargs)
    return FetchContext(self)


cdef class FetchContext:
    """What stock's fetch_context generator does around its yield: the count of running
    fetches up on entry, down on a clean exit, and the time the last one ended. As with
    the generator, an exception out of the block leaves the count as it is (the generator
    is closed before its decrement) and is not suppressed."""

    cdef object state
    cdef bint entered

    def __cinit__(self, state):
        self.state = state

    def __enter__(self):
        if self.entered:  # as stock's: its arguments are gone after the first entry
            raise AttributeError(*reentry_error_args)
        self.entered = True
        self.state._fetch_count += 1
        return None

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            state = self.state
            state._fetch_count -= 1
            if state._fetch_count == 0:
                state._last_fetch_ended = subscription_module.time.monotonic()
        return False


# ---- the producer's partition choice ---------------------------------------------------

cdef object stock_partition = None  # AIOKafkaProducer._partition
cdef object DefaultPartitioner = None, stock_partitioner_call = None
cdef object partitioner_module = None
cdef object ClusterMetadata = None
cdef object stock_partitions_for_topic = None, stock_available_partitions = None


cdef inline bint is_method_of(object bound, object owner, object function):
    """bound is function bound to owner: what owner.name gives where the name is still
    its class's own method (not an instance's attribute, a subclass's or a mock)."""
    return (PyMethod_Check(bound) and PyMethod_GET_FUNCTION(bound) == <PyObject*>function
            and PyMethod_GET_SELF(bound) == <PyObject*>owner)


def producer_partition(self, *args, **kwargs):
    """AIOKafkaProducer._partition(topic, partition, key, value, serialized_key,
    serialized_value): a keyed record without a partition, aiokafka's DefaultPartitioner
    and its ClusterMetadata get the partition stock's steps give (the same list of all
    partitions, made as stock makes it, indexed by murmur2), without its Python frames.
    The list of available partitions, which the keyed choice does not read, is not made
    (its making reads the partitions' metadata and nothing else). Everything else goes
    to stock's."""
    if len(args) != 6 or kwargs or args[1] is not None:
        return stock_partition(self, *args, **kwargs)
    topic = args[0]
    key = args[4]
    if type(key) is not bytes and type(key) is not bytearray:
        return stock_partition(self, *args)
    partitioner = self._partitioner
    metadata = self._metadata
    if (type(partitioner) is not DefaultPartitioner
            or vars(DefaultPartitioner).get("__call__") is not stock_partitioner_call
            or partitioner_module.__dict__.get("murmur2") is not murmur2
            or type(metadata) is not ClusterMetadata
            or not is_method_of(metadata.partitions_for_topic, metadata,
                                stock_partitions_for_topic)
            or not is_method_of(metadata.available_partitions_for_topic, metadata,
                                stock_available_partitions)):
        return stock_partition(self, *args)
    partitions = metadata._partitions
    if type(partitions) is not dict or type(topic) is not str:
        return stock_partition(self, *args)
    by_id = (<dict>partitions).get(topic)
    if type(by_id) is not dict or not by_id:
        return stock_partition(self, *args)
    # list(set(d.keys())): set() of a keys view fills the set in the dict's order one key
    # at a time (no presizing), which is what fixes the list's order
    cdef list all_partitions = list(set((<dict>by_id).keys()))
    cdef Py_ssize_t count = len(all_partitions)
    cdef uint32_t h
    if count == 0:  # not after a non-empty dict, but the modulo below must never see 0
        return stock_partition(self, *args)
    if type(key) is bytes:
        h = murmur2_hash(<const unsigned char*><bytes>key, len(<bytes>key))
    else:
        h = murmur2_hash(<const unsigned char*>PyByteArray_AS_STRING(key),
                         PyByteArray_GET_SIZE(key))
    return all_partitions[<Py_ssize_t>((h & 0x7FFFFFFF) % <uint64_t>count)]


# ---- the protocol: Struct.decode -------------------------------------------------------
#
# aiokafka decodes a response by walking its class's SCHEMA: ints from struct.unpack,
# strings and bytes read by length, arrays as lists, nested schemas as tuples, then
# cls(*values). A schema made only of the types below is compiled once per class into a
# plan of (kind, argument) pairs and read here into the same values; anything the plan
# does not read exactly as stock (short data, a string that is not UTF-8, a count past
# the bytes) starts over in stock's decode, which then raises or reads as it does.

cdef enum Kind:
    K_INT8 = 1
    K_INT16
    K_INT32
    K_INT64
    K_UINT32
    K_FLOAT64
    K_BOOL
    K_BYTES
    K_STRING
    K_ARRAY
    K_SCHEMA


class Fallback(Exception):
    """The plan cannot read this the way stock would: stock reads it."""


cdef object stock_struct_decode = None  # Struct.decode's function (its classmethod's)
cdef object types_module = None
cdef object BytesIO = None
cdef dict scalar_kinds = {}  # aiokafka's type class -> its Kind
cdef object String = None, Array = None, Schema = None
cdef dict stock_decoders = {}  # type -> its decode as install() found it
cdef dict plans = {}  # Struct class -> (its SCHEMA when planned, the plan or None)


def bind_protocol(**kw):
    """Take aiokafka's protocol types (install() calls this)."""
    global stock_struct_decode, types_module, BytesIO, String, Array, Schema
    stock_struct_decode = kw["stock_struct_decode"]
    types_module = kw["types_module"]
    BytesIO = kw["BytesIO"]
    t = types_module
    scalar_kinds.clear()
    for name, kind in (("Int8", K_INT8), ("Int16", K_INT16), ("Int32", K_INT32),
                       ("Int64", K_INT64), ("UInt32", K_UINT32), ("Float64", K_FLOAT64),
                       ("Boolean", K_BOOL), ("Bytes", K_BYTES)):
        scalar_kinds[getattr(t, name)] = kind
    String, Array, Schema = t.String, t.Array, t.Schema
    stock_decoders.clear()
    for cls in (*scalar_kinds, String, Array, Schema):
        stock_decoders[cls] = vars(cls).get("decode")
    plans.clear()


cdef bint own_decode(cls):
    """cls's decode is still the one install() found (a mock sends it to stock)."""
    return vars(cls).get("decode") is stock_decoders.get(cls, False)


cdef object plan_of_value(field):
    """The plan of one schema field, or None where the plan would not read it as stock."""
    cdef object kind
    if isinstance(field, type):
        kind = scalar_kinds.get(field)
        if kind is None or not own_decode(field):
            return None
        return (kind, None)
    if type(field) is String:
        if vars(field) != {"encoding": "utf-8"} or not own_decode(String):
            return None
        return (K_STRING, None)
    if type(field) is Array:
        if not own_decode(Array) or list(vars(field)) != ["array_of"]:
            return None
        item = plan_of_value(field.array_of)
        return None if item is None else (K_ARRAY, item)
    if type(field) is Schema:
        items = plan_of_schema(field)
        return None if items is None else (K_SCHEMA, items)
    return None


cdef object plan_of_schema(schema):
    """A tuple of the plans of schema's fields, or None."""
    if not own_decode(Schema):
        return None
    fields = schema.fields
    if type(fields) is not tuple:
        return None
    out = []
    for field in fields:
        p = plan_of_value(field)
        if p is None:
            return None
        out.append(p)
    return tuple(out)


cdef object plan_of(cls):
    """cls's plan (made on first use, again when its SCHEMA is another), or None."""
    schema = getattr(cls, "SCHEMA", None)
    cached = plans.get(cls)
    if cached is not None and (<tuple>cached)[0] is schema:
        return (<tuple>cached)[1]
    plan = plan_of_schema(schema) if type(schema) is Schema else None
    plans[cls] = (schema, plan)
    return plan


cdef struct Cursor:
    const unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t end


cdef inline const unsigned char* take(Cursor* c, Py_ssize_t n) except NULL:
    if n < 0 or c.end - c.pos < n:
        raise Fallback()
    c.pos += n
    return c.buf + c.pos - n


cdef inline int32_t be32(const unsigned char* p) noexcept:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef object read_value(tuple plan, Cursor* c):
    cdef int kind = plan[0]
    cdef const unsigned char* p
    cdef int32_t n
    cdef int64_t v
    cdef uint64_t u
    cdef double d
    cdef list items
    if kind == K_INT32:
        return be32(take(c, 4))
    if kind == K_STRING:
        p = take(c, 2)
        n = <int16_t>((p[0] << 8) | p[1])
        if n < 0:
            return None
        p = take(c, n)
        try:
            return PyUnicode_DecodeUTF8(<const char*>p, n, NULL)
        except UnicodeDecodeError:
            raise Fallback()
    if kind == K_INT16:
        p = take(c, 2)
        return <int16_t>((p[0] << 8) | p[1])
    if kind == K_ARRAY:
        n = be32(take(c, 4))
        if n == -1:
            return None
        if n > c.end - c.pos:  # more items than bytes: stock decides
            raise Fallback()
        items = []
        PyObject_GC_UnTrack(items)
        item = <tuple>plan[1]
        for _ in range(n):  # a negative count other than -1 is an empty list, as stock's range()
            items.append(read_value(item, c))
        return items
    if kind == K_SCHEMA:
        return read_schema(<tuple>plan[1], c)
    if kind == K_INT64:
        p = take(c, 8)
        u = ((<uint64_t>be32(p) << 32) | <uint32_t>be32(p + 4))
        return <int64_t>u
    if kind == K_INT8:
        return <signed char>take(c, 1)[0]
    if kind == K_BOOL:
        return take(c, 1)[0] != 0
    if kind == K_BYTES:
        n = be32(take(c, 4))
        if n < 0:
            return None
        p = take(c, n)
        return PyBytes_FromStringAndSize(<const char*>p, n)
    if kind == K_UINT32:
        return <uint32_t>be32(take(c, 4))
    if kind == K_FLOAT64:
        p = take(c, 8)
        u = ((<uint64_t>be32(p) << 32) | <uint32_t>be32(p + 4))
        memcpy(&d, &u, 8)
        return d
    raise Fallback()


cdef tuple read_schema(tuple plans_, Cursor* c):
    """A schema's values as stock's Schema.decode gives them: a tuple. It and every list
    and tuple read into it are out of the collector's sight until track_tree() (no
    collection walks a half-read tree, nor the same objects again and again)."""
    cdef Py_ssize_t i, n = len(plans_)
    cdef tuple values
    if n == 0:
        return ()  # the shared empty tuple: never tracked, so track_tree leaves it
    values = PyTuple_New(n)
    PyObject_GC_UnTrack(values)
    for i in range(n):
        value = read_value(<tuple>plans_[i], c)
        Py_INCREF(value)
        PyTuple_SET_ITEM(values, i, value)
    return values


cdef void track_tree(object plan, object value) noexcept:
    """Hand read_schema's containers (value read by plan) to the collector, as stock's
    would be: every list and tuple of the tree tracked."""
    cdef int kind = (<tuple>plan)[0]
    cdef Py_ssize_t i
    if kind == K_SCHEMA:
        if len(<tuple>value) == 0:
            return
        plans_ = <tuple>(<tuple>plan)[1]
        for i in range(len(<tuple>value)):
            track_tree((<tuple>plans_)[i], (<tuple>value)[i])
        PyObject_GC_Track(value)
    elif kind == K_ARRAY and value is not None:
        item = (<tuple>plan)[1]
        if (<tuple>item)[0] == K_ARRAY or (<tuple>item)[0] == K_SCHEMA:
            for i in range(len(<list>value)):
                track_tree(item, (<list>value)[i])
        PyObject_GC_Track(value)


def struct_decode(cls, data):
    """Struct.decode: cls's values read by its plan, cls(*values) as stock makes it; the
    BytesIO left where stock would leave it. Other input, classes without a plan and
    data the plan would not read as stock go to stock's decode."""
    cdef Py_ssize_t end = 0
    plan = plan_of(cls)
    if plan is not None:
        if type(data) is bytes:
            values = read_all(<tuple>plan, data, 0, &end)
            if values is not None:
                return cls(*values)
        elif type(data) is BytesIO:
            start = data.tell()
            buffer = data.getbuffer()
            try:
                values = read_all(<tuple>plan, buffer, start, &end)
            finally:
                buffer.release()
            if values is not None:
                data.seek(end)
                return cls(*values)
    return stock_struct_decode(cls, data)


cdef object read_all(tuple plan, const unsigned char[::1] view, Py_ssize_t start,
                     Py_ssize_t* end):
    """The values of plan read from view at start (end set past them), or None where
    stock must read them."""
    cdef Cursor c
    if view.shape[0] == 0 or start < 0 or start > view.shape[0]:
        return None
    c.buf = &view[0]
    c.pos = start
    c.end = view.shape[0]
    try:
        values = read_schema(plan, &c)
    except Fallback:
        return None
    track_tree((K_SCHEMA, plan), values)
    end[0] = c.pos
    return values


def plan_for(cls):
    """The plan struct_decode reads cls with, or None (tests ask)."""
    return plan_of(cls)

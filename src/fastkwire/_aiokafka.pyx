# cython: language_level=3, binding=True, boundscheck=False, wraparound=False, cdivision=True, freethreading_compatible=True
"""The compiled half of fastkwire.aiokafka: aiokafka's partitioner hash and its
producer's partition choice, its fetcher's per-record loop, its consumer's fetch context
and its protocol Struct.decode, producing aiokafka's own objects.

Batches come from aiokafka's own MemoryRecords. An uncompressed v2 batch's records are
read here from its bytes as aiokafka's C reader reads them; every other batch, and any
record that reader would read otherwise or refuse, goes through aiokafka's own batch
classes (its C reader, its decompression, its CorruptRecordException messages). Around
them runs the loop: the offset check, the deserializers, the ConsumerRecord. Nothing
here is called before bind() and bind_protocol() have given it aiokafka's classes.
"""
cimport cython
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from cpython.object cimport PyObject, PyObject_IsTrue
from cpython.ref cimport Py_DECREF, Py_INCREF
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from libc.stdint cimport int16_t, int32_t, int64_t, uint32_t, uint64_t

from fastkwire._murmur2 cimport murmur2_of
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
    Py_ssize_t records_struct_size "fka_records_size"()
    PyObject* records_buffer "fka_records_buffer"(object records, Py_ssize_t* pos)
    Py_ssize_t records_pos "fka_records_pos"(object records)
    bint add64 "fka_add64"(int64_t a, int64_t b, int64_t* out)


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
# aiokafka's C MemoryRecords and DefaultRecordBatch where the records object's layout
# was checked at bind(): the loop then reads uncompressed v2 records from its bytes
# (None: every record comes from aiokafka's batch objects)
cdef object CMemoryRecords = None
cdef object CRecordBatch = None
cdef Py_ssize_t raw_batches = 0  # batches whose records were read from the bytes (tests ask)


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
    bind_memory_records(kw["CMemoryRecords"], kw["CRecordBatch"])
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


cdef bint immutable_type(cls):
    """cls is a type whose attributes cannot be set (a test's mock cannot land on it)."""
    if not isinstance(cls, type):
        return False
    try:
        cls.__fastkwire_probe__ = 1
    except TypeError:
        return True
    del cls.__fastkwire_probe__
    return False


# Two empty v2 batch headers (61 bytes each, length 49, magic 2) and 3 bytes more: what
# bind_memory_records checks the records layout with.
cdef bytes EMPTY_BATCHES = (
    (b"\0" * 8 + (49).to_bytes(4, "big") + b"\0" * 4 + b"\x02" + b"\0" * 44) * 2 + b"\0" * 3)


cdef bind_memory_records(records_cls, batch_cls):
    """Take aiokafka's C MemoryRecords when its instances are laid out as _aiokafka.h's
    fka_memory_records says: checked on a live instance, its buffer and its position
    read before and after each of two next_batch() calls."""
    global CMemoryRecords, CRecordBatch
    cdef Py_ssize_t pos = -1
    cdef PyObject* buffer
    CMemoryRecords = CRecordBatch = None
    if not (immutable_type(records_cls) and immutable_type(batch_cls)):
        return
    if (records_cls.__basicsize__ != records_struct_size() or records_cls.__dictoffset__
            or records_cls.__weakrefoffset__ or records_cls.__mro__ != (records_cls, object)):
        return
    data = bytes(EMPTY_BATCHES)
    records = records_cls(data)
    buffer = records_buffer(records, &pos)
    if buffer == NULL:
        return
    same = buffer == <PyObject*>data
    Py_DECREF(<object>buffer)
    if not same or pos != 0:
        return
    for end in (61, 122):
        if type(records.next_batch()) is not batch_cls or records_pos(records) != end:
            return
    if records.has_next() or records_pos(records) != 122:
        return
    CMemoryRecords = records_cls
    CRecordBatch = batch_cls


def raw_batch_count():
    """How many batches the loop has read from the records' bytes (tests ask)."""
    return raw_batches


cdef bind_record_class(cls):
    """Take aiokafka's C DefaultRecord's getters when they are what its attributes are:
    a type whose attributes cannot be set, without instance dicts, the fields getset
    descriptors and checksum the class's None."""
    global CRecord, get_offset, get_timestamp, get_timestamp_type, get_key, get_value
    global get_headers
    CRecord = None
    if not immutable_type(cls) or cls.__dictoffset__ != 0:
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
    cdef uint32_t h
    if murmur2_of(data, &h):
        return h
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
        if fast and (max_records is None or limit >= 0):
            loop = records._records_iterator
            if type(loop) is RecordsLoop:
                if (<RecordsLoop>loop).drain(taken, limit):
                    records._records_iterator = None
                    break
                if limit >= 0 and len(taken) >= limit:
                    self._update_position()
                    return taken
                continue
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
    # what stock's generator reads from it when it starts (its first next()) and then
    # holds as its own locals: replacing the PartitionRecords' attributes later changes
    # nothing here, as nothing there
    cdef bint started
    cdef object tp, records, topic, partition
    cdef object batch  # the batch whose records are being taken, or None
    cdef object batch_records  # iter(batch): the batch itself, or a generator (v0/v1)
    # The class its records are made of without calling it (object.__new__, then init),
    # taken once with the init checked against it: never a class rebound since (install()
    # again after the module's ConsumerRecord was replaced) whose __new__ is not object's
    cdef object record_cls
    cdef object init  # record_init while it is still record_cls's __init__, else None
    cdef bint done, running
    # Reading the current batch's records from the bytes (raw is not None): the
    # MemoryRecords' buffer (owned), the position in it, the batch's end and header
    cdef object raw
    cdef Py_ssize_t raw_pos, raw_end
    cdef int64_t base_offset, first_timestamp, max_timestamp
    cdef int32_t num_records, index
    cdef bint log_append_time
    # the record read_raw() read last (its offset and timestamp in C)
    cdef int64_t r_offset, r_timestamp
    cdef Py_ssize_t r_key_size, r_value_size
    cdef object r_key, r_value, r_headers
    # drain(): while quiet, no Python code but ours and the dataclass __init__ has run
    # since the PartitionRecords' attributes were last read (its deserializers were
    # both unset), so next_fetch is its next_fetch_offset, written back (flush) before
    # anything else can look at it
    cdef bint draining, quiet
    cdef object next_fetch

    def __cinit__(self, owner):
        self.owner = owner
        self.batch = None
        cls = ConsumerRecord
        init = record_init
        if init is not None and not (type(cls) is type and cls.__new__ is object.__new__
                                     and vars(cls).get("__init__") is init):
            init = None
        self.record_cls = cls
        self.init = init

    def __iter__(self):
        return self

    def __next__(self):
        record = self.take()
        if record is None:
            raise StopIteration
        return record

    cdef int enter(self) except -1:
        """Begin a step: 1, or 0 where the loop is done. A step already running (another
        thread's, or this one's whose callback steps or closes it again) is refused, as a
        generator refuses it: every build, tested and set as one step."""
        cdef int state
        with cython.critical_section(self):
            state = 1 if self.done else 2 if self.running else 0
            if state == 0:
                self.running = True
        if state == 2:
            raise ValueError("generator already executing")
        return state == 0

    cdef void leave(self, bint done) noexcept:
        """End the step enter() began; done: the loop is finished (its end, or an error)."""
        with cython.critical_section(self):
            if done:
                self.done = True
            self.running = False

    cdef object take(self):
        """The next ConsumerRecord, or None when there are no more."""
        if not self.enter():
            return None
        try:
            record = self.step()
        except BaseException:
            # still running: no other step, and no close(), touches the fields meanwhile
            self.drop()
            self.leave(True)
            raise
        self.leave(record is None)
        return record

    cdef int drain(self, list taken, Py_ssize_t limit) except -1:
        """Append records to taken as FetchResult.getall's loop does, until limit
        (len(taken) >= limit, where limit >= 0) or until a deserializer has run (the
        caller then reads the PartitionRecords' iterator again, as stock does a record).
        1 when the records are done (stock's StopIteration), else 0. Stepping as take()
        does: one step of one loop at a time, whichever of the two takes it."""
        cdef int ended = 0
        cdef bint failed = False
        if not self.enter():
            return 1
        self.draining = True
        try:
            while True:
                record = self.step()
                if record is None:
                    ended = 1
                    break
                taken.append(record)
                if (limit >= 0 and len(taken) >= limit) or not self.quiet:
                    break
        except BaseException:
            failed = True
            self.drop()
            raise
        finally:
            self.draining = False
            try:
                self.flush()
            finally:
                self.leave(failed or ended)
        return ended

    cdef flush(self):
        """Give the PartitionRecords the next_fetch_offset a quiet stretch kept."""
        if self.quiet:
            self.quiet = False
            next_fetch, self.next_fetch = self.next_fetch, None
            self.owner.next_fetch_offset = next_fetch

    def close(self):
        """As a generator's close(): nothing more is taken. Refused while a step runs
        (another thread's, or a callback's inside this one's: a collection can run one
        wherever the step allocates), as a generator refuses it: the step's fields, and
        the buffer it is reading, stay its own until it ends."""
        cdef bint running, first
        with cython.critical_section(self):
            running = self.running
            first = not running and not self.done
            if not running:
                self.done = True
        if running:
            raise ValueError("generator already executing")
        if first:  # done from now on: no step starts again, and only one closer clears
            self.drop()

    cdef drop(self):
        """What a finished generator's frame lets go of (a step's, or close()'s, only)."""
        self.batch = self.batch_records = self.raw = self.records = None

    cdef int read_raw(self) except -2:
        """The next record of the batch read from the bytes into the r_ fields: 1, or 0
        at the batch's clean end. -1 where aiokafka's batch would read anything else
        (bytes out of bounds, a negative count, a header key that is not UTF-8, sizes
        that disagree, an overflow, bytes left over): its own iterator then reads it,
        to give what it gives or raise what it raises. Reads only what stock's
        DefaultRecordBatch._read_msg reads, in its order, with its arithmetic."""
        cdef bytes raw = self.raw  # held while read: what follows allocates
        cdef const unsigned char* buf = <const unsigned char*>PyBytes_AS_STRING(raw)
        cdef Py_ssize_t pos = self.raw_pos, end = self.raw_end, start
        cdef int64_t length, attrs, ts_delta, offset_delta, key_len, value_len, count
        cdef int64_t offset, timestamp
        cdef list headers
        if self.index >= self.num_records:
            return 0 if pos == end else -1
        if not read_varint(buf, &pos, end, &length):
            return -1
        start = pos
        if not (read_varint(buf, &pos, end, &attrs) and read_varint(buf, &pos, end, &ts_delta)):
            return -1
        if self.log_append_time:
            timestamp = self.max_timestamp
        elif not add64(self.first_timestamp, ts_delta, &timestamp):
            return -1
        if not read_varint(buf, &pos, end, &offset_delta):
            return -1
        if not add64(self.base_offset, offset_delta, &offset):
            return -1
        if not read_varint(buf, &pos, end, &key_len):
            return -1
        if key_len >= 0:
            if key_len > end - pos:
                return -1
            key = PyBytes_FromStringAndSize(<const char*>buf + pos, <Py_ssize_t>key_len)
            pos += <Py_ssize_t>key_len
        else:
            key = None
        if not read_varint(buf, &pos, end, &value_len):
            return -1
        if value_len >= 0:
            if value_len > end - pos:
                return -1
            value = PyBytes_FromStringAndSize(<const char*>buf + pos, <Py_ssize_t>value_len)
            pos += <Py_ssize_t>value_len
        else:
            value = None
        if not read_varint(buf, &pos, end, &count) or count < 0:
            return -1
        if count == 0:
            header_tuple = ()
        else:
            headers = []
            while count > 0:
                h_value = read_header(buf, &pos, end)
                if h_value is None:
                    return -1
                headers.append(h_value)
                count -= 1
            header_tuple = tuple(headers)
        if pos - start != length:
            return -1
        self.raw_pos = pos
        self.index += 1
        self.r_offset = offset
        self.r_timestamp = timestamp
        self.r_key = key
        self.r_key_size = key_len if key_len >= 0 else -1
        self.r_value = value
        self.r_value_size = value_len if value_len >= 0 else -1
        self.r_headers = header_tuple
        return 1

    cdef object raw_consumer_record(self, object offset, object key, object value):
        """The ConsumerRecord of the record read_raw() read, as step() makes one."""
        cdef object timestamp = PyLong_FromLongLong(self.r_timestamp)
        cdef object timestamp_type = 1 if self.log_append_time else 0
        if self.init is not None and self.record_cls is ConsumerRecord:
            consumer_record = new_object(self.record_cls)
            returned = self.init(
                consumer_record, self.topic, self.partition, offset, timestamp,
                timestamp_type, key, value, None, self.r_key_size, self.r_value_size,
                self.r_headers)
            if returned is not None:
                raise TypeError(
                    f"__init__() should return None, not '{type(returned).__name__}'")
            return consumer_record
        return ConsumerRecord(
            self.topic, self.partition, offset, timestamp, timestamp_type, key, value, None,
            self.r_key_size, self.r_value_size, self.r_headers)

    cdef object step(self):
        """The next ConsumerRecord, or None when the records are done."""
        cdef object owner = self.owner
        cdef object batch, record, offset, key, value, deserialize
        cdef bint c_record
        cdef int status
        cdef Py_ssize_t skip
        if not self.started:  # stock's generator's first lines
            self.started = True
            tp = owner._tp
            self.tp = tp
            self.records = owner._records
            self.topic = tp.topic
            self.partition = tp.partition
        while True:
            if self.batch is None:
                self.flush()  # aiokafka's methods run in next_batch()
                batch = self.next_batch()
                if batch is None:
                    return None
                if self.raw is None:
                    self.batch_records = iter(batch)
                self.batch = batch
            if self.raw is not None:
                status = self.read_raw()
                if status == 1:
                    offset = PyLong_FromLongLong(self.r_offset)
                    if offset < (self.next_fetch if self.quiet else owner.next_fetch_offset):
                        continue
                    key = self.r_key
                    value = self.r_value
                    self.r_key = self.r_value = None
                    if not self.quiet:
                        ran = False
                        deserialize = owner._key_deserializer
                        if PyObject_IsTrue(deserialize):
                            ran = True
                            key = deserialize(key)
                        deserialize = owner._value_deserializer
                        if PyObject_IsTrue(deserialize):
                            ran = True
                            value = deserialize(value)
                        self.quiet = self.draining and not ran
                    consumer_record = self.raw_consumer_record(offset, key, value)
                    if self.quiet:
                        self.next_fetch = offset + 1
                    else:
                        owner.next_fetch_offset = offset + 1
                    return consumer_record
                self.raw = self.r_key = self.r_value = self.r_headers = None
                if status == 0:
                    batch = self.batch
                    self.batch = self.batch_records = None
                    if self.quiet:
                        self.next_fetch = batch.next_offset
                    else:
                        owner.next_fetch_offset = batch.next_offset
                    continue
                self.flush()
                # What the bytes path does not read as stock: aiokafka's iterator reads
                # the batch again, past the records already taken, and goes on from there.
                self.batch_records = iter(self.batch)
                for skip in range(self.index):
                    next(self.batch_records)
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
            if c_record and self.init is not None and self.record_cls is ConsumerRecord:
                consumer_record = new_object(self.record_cls)
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
        cdef Py_ssize_t start = -1, end = -1, unused
        cdef PyObject* buffer
        cdef object raw = None
        records = self.records
        cdef bint from_bytes = CMemoryRecords is not None and type(records) is CMemoryRecords
        while records.has_next():
            if from_bytes:
                start = records_pos(records)
            batch = records.next_batch()
            raw = None
            if from_bytes and type(batch) is CRecordBatch:
                # read at once, with no Python code between: the batch is buffer[start:end].
                # Free-threaded, no lock is needed: MemoryRecords sets its buffer once, in
                # __init__, and begin_raw bounds start and end by the buffer's size.
                end = records_pos(records)
                buffer = records_buffer(records, &unused)
                if buffer != NULL:
                    raw = <object>buffer
                    Py_DECREF(raw)  # records_buffer's reference: raw holds one
            if owner._check_crcs and not batch.validate_crc():
                raise fetcher_module.Errors.CorruptRecordException(
                    f"Invalid CRC - {self.tp}")
            if owner._isolation_level == READ_COMMITTED and batch.producer_id is not None:
                owner._consume_aborted_up_to(batch.base_offset)
                if batch.is_control_batch and owner._contains_abort_marker(batch):
                    owner._aborted_producers.discard(batch.producer_id)
                if batch.is_transactional and batch.producer_id in owner._aborted_producers:
                    fetcher_module.log.debug(
                        "Skipping aborted record batch from partition %s with"
                        " producer_id %s and offsets %s to %s",
                        self.tp,
                        batch.producer_id,
                        batch.base_offset,
                        batch.next_offset - 1,
                    )
                    owner.next_fetch_offset = batch.next_offset
                    continue
            if batch.is_control_batch:  # skipped at every isolation level
                owner.next_fetch_offset = batch.next_offset
                continue
            if raw is not None:
                self.begin_raw(raw, start, end)
            return batch
        return None

    cdef begin_raw(self, bytes raw, Py_ssize_t start, Py_ssize_t end):
        """Read the batch raw[start:end] from the bytes where it is an uncompressed v2
        batch whose header is all there (aiokafka's batch read the same header); any
        other batch is read by aiokafka's own iterator."""
        global raw_batches
        cdef const unsigned char* p
        if start < 0 or end > PyBytes_GET_SIZE(raw) or end - start < FIRST_RECORD_OFFSET:
            return
        p = <const unsigned char*>PyBytes_AS_STRING(raw) + start
        attributes = be16(p + 21)
        if attributes & 0x07:  # compressed: aiokafka's codecs
            return
        self.raw = raw
        self.raw_pos = start + FIRST_RECORD_OFFSET
        self.raw_end = end
        self.base_offset = be64(p)
        self.first_timestamp = be64(p + 27)
        self.max_timestamp = be64(p + 35)
        self.num_records = be32(p + 57)
        self.log_append_time = (attributes & 0x08) != 0
        self.index = 0
        raw_batches += 1


cdef enum:
    FIRST_RECORD_OFFSET = 61  # a v2 batch's header: its records start here


cdef inline int16_t be16(const unsigned char* p) noexcept:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline int64_t be64(const unsigned char* p) noexcept:
    return <int64_t>((<uint64_t><uint32_t>be32(p) << 32) | <uint32_t>be32(p + 4))


cdef inline bint read_varint(const unsigned char* buf, Py_ssize_t* pos, Py_ssize_t end,
                             int64_t* out) noexcept:
    """aiokafka's decode_varint64 (zigzag, at most 10 bytes) of buf[pos:end]: False where
    it would read past end or raise."""
    cdef int shift = 0
    cdef uint64_t value = 0
    cdef unsigned char byte
    cdef Py_ssize_t p = pos[0]
    while True:
        if p >= end:
            return False
        byte = buf[p]
        p += 1
        if byte & 0x80:
            value |= <uint64_t>(byte & 0x7f) << shift
            shift += 7
            if shift > 63:
                return False
        else:
            value |= <uint64_t>byte << shift
            break
    out[0] = <int64_t>(value >> 1) ^ -<int64_t>(value & 1)
    pos[0] = p
    return True


cdef object read_header(const unsigned char* buf, Py_ssize_t* pos, Py_ssize_t end):
    """One record header as aiokafka's batch makes it, (key, value), read from
    buf[pos:end]; None where its batch would read anything else."""
    cdef int64_t key_len, value_len
    cdef Py_ssize_t p = pos[0]
    if not read_varint(buf, &p, end, &key_len) or key_len < 0 or key_len > end - p:
        return None
    try:
        key = PyUnicode_DecodeUTF8(<const char*>buf + p, <Py_ssize_t>key_len, NULL)
    except UnicodeDecodeError:
        return None
    p += <Py_ssize_t>key_len
    if not read_varint(buf, &p, end, &value_len):
        return None
    if value_len >= 0:
        if value_len > end - p:
            return None
        value = PyBytes_FromStringAndSize(<const char*>buf + p, <Py_ssize_t>value_len)
        p += <Py_ssize_t>value_len
    else:
        value = None
    pos[0] = p
    return (key, value)


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
    if not murmur2_of(key, &h):  # never for bytes or a bytearray (checked above)
        return stock_partition(self, *args)
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


# Plans nest no deeper than this: reading (and planning) recurses in C, where a deep or
# cyclic SCHEMA would overflow the C stack; deeper schemas are stock's to read.
cdef enum:
    MAX_PLAN_DEPTH = 64


cdef object plan_of_value(field, int depth):
    """The plan of one schema field, or None where the plan would not read it as stock."""
    cdef object kind
    if depth > MAX_PLAN_DEPTH:
        return None
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
        item = plan_of_value(field.array_of, depth + 1)
        return None if item is None else (K_ARRAY, item)
    if type(field) is Schema:
        items = plan_of_schema(field, depth + 1)
        return None if items is None else (K_SCHEMA, items)
    return None


cdef object plan_of_schema(schema, int depth):
    """A tuple of the plans of schema's fields, or None."""
    if depth > MAX_PLAN_DEPTH or not own_decode(Schema):
        return None
    fields = schema.fields
    if type(fields) is not tuple:
        return None
    out = []
    for field in fields:
        p = plan_of_value(field, depth)
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
    plan = plan_of_schema(schema, 0) if type(schema) is Schema else None
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

# cython: language_level=3, binding=True, boundscheck=False, wraparound=False, cdivision=True, freethreading_compatible=True
"""The compiled half of fastkwire.kafka_python: kafka-python's record reading and its
fetcher's per-record loop, producing kafka-python's own objects.

Every reader here takes the well-formed path only. On anything else (a length past the
end, a varint past 64 bits, a bad header key, a size that does not add up) it hands the
record to kafka-python's own code, which then raises or truncates exactly as stock does.
Nothing here is called before bind() has given it kafka-python's classes.
"""
cimport cython
from cpython.bytearray cimport (PyByteArray_AS_STRING, PyByteArray_FromStringAndSize,
                                 PyByteArray_GET_SIZE, PyByteArray_Resize)
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from libc.string cimport memcpy
from types import FunctionType, GetSetDescriptorType, MemberDescriptorType
from struct import pack_into as struct_pack_into, unpack_from as struct_unpack_from
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.ref cimport PyObject
from libc.stdint cimport int32_t, int64_t, uint32_t, uint64_t

from fastkwire._murmur2 cimport murmur2_of


cdef extern from "Python.h":
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    const char* PyUnicode_AsUTF8AndSize(object s, Py_ssize_t* size)
    void PyErr_Clear()


cdef extern from "_ft.h":
    bint FREE_THREADED "FK_FREE_THREADED"


cdef extern from "_kafka_python.h":
    PyObject* type_attr "fkp_type_attr"(object type, object name) except? NULL
    object new_object "fkp_new"(object type)
    object tuple_of "fkp_tuple_of"(PyObject* tp, PyObject** items, Py_ssize_t n)
    void set_slot "fkp_set_slot"(object o, Py_ssize_t offset, object value)
    unsigned int version_tag "fkp_version_tag"(object type)
    unsigned int assign_version_tag "fkp_assign_version_tag"(object type)
    unsigned int load_tag "fkp_load_tag"(const unsigned int* p)
    void store_tag "fkp_store_tag"(unsigned int* p, unsigned int v)
    object batch_header "fkp_batch_header"(const unsigned char* p)
    object atomic_pair "fkp_atomic_pair"(object a, object b)


cdef extern from "_slots.h":
    Py_ssize_t slot_offset "fk_slot_offset"(object cls, object name) except -1


cdef extern from "_crc32c.h":
    void fkw_crc32c_setup()
    uint32_t fkw_crc32c(uint32_t crc, const unsigned char* p, size_t n) nogil


fkw_crc32c_setup()


# kafka-python's objects, given by bind() (fastkwire.kafka_python.install).
cdef object DefaultRecordBatch = None
cdef object DefaultRecord = None
cdef object ControlRecord = None
cdef object CorruptRecordError = None
cdef object stock_batch_next = None
cdef object stock_murmur2 = None
cdef object crc32c = None
cdef object PartitionRecords = None
cdef object stock_deserialize = None
cdef object ConsumerRecord = None
cdef object fetcher_module = None
cdef Py_ssize_t fast_batch_count = 0  # batches the fetcher's fast loop read (tests ask)
# MemoryRecords, the module whose names its next_batch reads, and its stock method
cdef object MemoryRecords = None
cdef dict memory_records_names = None
cdef object stock_next_batch = None
# Whether kafka-python's classes are still as install() left them (see ClassGuard).
# Every bind() (every install()) replaces them, dropping the old ones; a gc callback or
# another thread may do that while a fast path runs a guard's check. So they are read
# through guard() only, which gives the caller a reference of its own, and published
# under the same critical section (free-threaded builds; the GIL's atomicity elsewhere).
cdef object guards_lock = []  # only its critical section is used
cdef ClassGuard memory_records_guard = None
cdef ClassGuard batch_guard = None
cdef ClassGuard record_guard = None


cdef enum Guarded:
    G_MEMORY_RECORDS
    G_BATCH
    G_RECORD
    G_CLUSTER
    G_RECORD_FUTURE


cdef ClassGuard guard(int which):
    """The guard bind() published last for a class, held for the caller."""
    cdef ClassGuard g = None
    with cython.critical_section(guards_lock):
        if which == G_BATCH:
            g = batch_guard
        elif which == G_RECORD:
            g = record_guard
        elif which == G_MEMORY_RECORDS:
            g = memory_records_guard
        elif which == G_CLUSTER:
            g = cluster_guard
        else:
            g = record_future_guard
    return g
# The slots the fast paths set on the instances they make without __init__, in a guard's
# `at` (its class's offsets, taken with it: an instance is made of the guard's class and
# filled at the guard's offsets, never at those of a class a later bind() published)
cdef tuple BATCH_SLOTS = ("_buffer", "_header_data", "_pos", "_num_records",
                          "_next_record_index", "_decompressed")
cdef enum:  # their indices in a guard's `at`
    AT_BUFFER, AT_HEADER_DATA, AT_POS, AT_NUM_RECORDS, AT_NEXT_RECORD_INDEX, AT_DECOMPRESSED
cdef tuple RECORD_SLOTS = ("_size_in_bytes", "_offset", "_timestamp", "_timestamp_type", "_key",
                           "_value", "_headers")
cdef enum:
    AT_SIZE_IN_BYTES, AT_OFFSET, AT_TIMESTAMP, AT_TIMESTAMP_TYPE, AT_KEY, AT_VALUE, AT_HEADERS
cdef tuple FUTURE_SLOTS = ("is_done", "value", "exception", "_callbacks", "_errbacks", "_lock",
                           "_produce_future", "args")
cdef enum:
    FUT_IS_DONE, FUT_VALUE, FUT_EXCEPTION, FUT_CALLBACKS, FUT_ERRBACKS, FUT_LOCK
    FUT_PRODUCE_FUTURE, FUT_ARGS
cdef enum:
    MAX_SLOTS = 8


def fast_batches():
    """How many batches the fetcher's loop has read without kafka-python's records."""
    return fast_batch_count


def bind(patches=(), **kw):
    """Take kafka-python's classes and stock functions (install() calls this, before it
    sets `patches`, the Patch rows of the seam table)."""
    global DefaultRecordBatch, DefaultRecord, ControlRecord, CorruptRecordError
    global stock_batch_next, stock_murmur2, crc32c, PartitionRecords
    global stock_deserialize, ConsumerRecord, fetcher_module
    global MemoryRecords, memory_records_names, stock_next_batch
    global memory_records_guard, batch_guard, record_guard
    DefaultRecordBatch = kw["DefaultRecordBatch"]
    DefaultRecord = kw["DefaultRecord"]
    ControlRecord = kw["ControlRecord"]
    CorruptRecordError = kw["CorruptRecordError"]
    stock_batch_next = kw["stock_batch_next"]
    stock_murmur2 = kw["stock_murmur2"]
    crc32c = kw["crc32c"]
    PartitionRecords = kw["PartitionRecords"]
    stock_deserialize = genuine(PartitionRecords.__dict__["_deserialize"])
    fetcher_module = kw["fetcher_module"]
    cr = fetcher_module.ConsumerRecord
    # tuple_of fills a tuple's item array: only for kafka-python's 13-field namedtuple.
    is_namedtuple = (isinstance(cr, type) and issubclass(cr, tuple)
                     and cr.__basicsize__ == tuple.__basicsize__
                     and cr.__itemsize__ == tuple.__itemsize__
                     and cr.__module__ == "kafka.consumer.fetcher"
                     and len(getattr(cr, "_fields", ())) == 13)
    ConsumerRecord = cr if is_namedtuple else object()
    MemoryRecords = kw["MemoryRecords"]
    memory_records_names = vars(kw["memory_records_module"])
    stock_next_batch = kw["stock_next_batch"]
    installed = {(p.owner, p.attribute): p.replacement for p in patches}
    made = (ClassGuard(MemoryRecords, installed),
            ClassGuard(DefaultRecordBatch, installed, BATCH_SLOTS),
            ClassGuard(DefaultRecord, installed, RECORD_SLOTS))
    replaced = (memory_records_guard, batch_guard, record_guard)  # dropped after the swap
    with cython.critical_section(guards_lock):
        memory_records_guard, batch_guard, record_guard = made
    del replaced


cdef object MISSING = object()
cdef object NOARG = object()  # stand-in for stock's cached defaults (builder_append, memory_next_batch)


cdef bint kafka_pythons_own(value, str module):
    """value, found in a class of `module`, is what kafka-python defined there: its own
    function, property or class/static method, or plain data (a constant, a slot)."""
    if isinstance(value, (classmethod, staticmethod)):
        value = value.__func__
    if isinstance(value, property):
        return all(f is None or kafka_pythons_own(f, module)
                   for f in (value.fget, value.fset, value.fdel))
    if type(value) is FunctionType:
        return value.__module__ == module
    if type(value) is MemberDescriptorType or type(value) is GetSetDescriptorType:
        return True  # a slot, or the __dict__ / __weakref__ CPython gives a class
    return not callable(value) and not hasattr(type(value), "__get__")


cdef class ClassGuard:
    """Whether a kafka-python class, with every class on its MRO, still holds what
    install() left there: the fast paths that skip its methods (its properties, the
    records it would make) are taken only then.

    The first check, and any after a change, compares every attribute of every class on
    the MRO with the snapshot by identity; then the class's version tag is remembered.
    CPython changes that tag whenever an attribute of the class or of a base is set or
    deleted, so until then one integer comparison is the check. A class found changed
    has its tag remembered too: it is not compared again until it changes again."""
    cdef object cls
    cdef tuple mro
    cdef list snapshot  # (class, {name: value}) along the MRO
    cdef unsigned int tag
    cdef bint replaced  # something not kafka-python's was in place at install (a mock)
    cdef unsigned int changed_tag  # the tag of a state found changed (0: none)
    cdef Py_ssize_t at[MAX_SLOTS]  # the offsets of the slots named at its making, in order

    def __init__(self, cls, installed, tuple slots=()):
        cdef Py_ssize_t i
        if len(slots) > MAX_SLOTS:
            raise ValueError(f"at most {MAX_SLOTS} slots")
        for i in range(len(slots)):
            self.at[i] = slot_offset(cls, slots[i])
        self.cls = cls
        self.mro = cls.__mro__
        self.snapshot = [
            (k, {name: installed.get((k, name), value) for name, value in vars(k).items()})
            for k in self.mro]
        self.replaced = not all(
            (k, name) in installed or kafka_pythons_own(value, k.__module__)
            for k in self.mro if k.__module__.startswith("kafka.")
            for name, value in vars(k).items())
        self.tag = 0
        self.changed_tag = 0

    cdef inline bint ok(self):
        """Call it on a guard held (guard()): recheck() runs Python code."""
        cdef unsigned int tag = version_tag(self.cls)
        if tag != 0:
            if tag == load_tag(&self.tag):
                return True
            if tag == load_tag(&self.changed_tag):
                return False
        return self.recheck()

    cdef bint recheck(self):
        # The tag is taken before the comparison, which allocates (a gc callback may
        # change the class meanwhile): a class changed during it has another tag by then,
        # so the one remembered never vouches for a state that was not compared.
        cdef unsigned int tag
        store_tag(&self.tag, 0)
        tag = assign_version_tag(self.cls)
        if not self.unchanged():
            store_tag(&self.changed_tag, tag)  # not compared again until it changes
            return False
        store_tag(&self.tag, tag)
        return True

    cdef bint unchanged(self):
        if self.replaced or self.cls.__mro__ != self.mro:
            return False
        for k, names in self.snapshot:
            d = vars(k)
            if len(d) != len(<dict>names):
                return False
            for name, value in (<dict>names).items():
                if d.get(name, MISSING) is not value:
                    return False
        return True


cdef object genuine(value):
    """value when it is kafka-python's own function or property, else a marker that
    matches nothing (a mock in place at install must not pass for stock)."""
    f = value.fget if isinstance(value, property) else value
    if getattr(f, "__module__", None) in ("kafka.record.default_records", "kafka.consumer.fetcher"):
        return value
    return object()


# ---- one record of a v2 batch ------------------------------------------------------

cdef inline int read_varint(const unsigned char* p, Py_ssize_t n, Py_ssize_t* pos,
                            int64_t* out) noexcept:
    """kafka-python's decode_varint (zigzag), or -1 where it would read past the end or
    go past 64 bits (a big int or its ValueError: kafka-python's code handles those)."""
    cdef uint64_t result = 0
    cdef int shift = 0
    cdef unsigned char b
    cdef Py_ssize_t i = pos[0]
    while True:
        if i >= n:
            return -1
        b = p[i]
        i += 1
        if shift == 63 and b > 1:
            return -1
        result |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
    out[0] = <int64_t>((result >> 1) ^ (0 - (result & 1)))
    pos[0] = i
    return 0


cdef class Cursor:
    """One record read: where it ends and what it holds."""
    cdef Py_ssize_t pos
    cdef int64_t length, ts_delta, offset_delta, header_size
    cdef object key, value, headers


cdef inline object read_bytes(const unsigned char* p, Py_ssize_t n, Py_ssize_t* pos,
                              int* ok):
    """NULLABLE bytes: None for any negative length (as kafka-python), else the bytes;
    ok[0] = 0 where the bytes run past the end."""
    cdef int64_t size
    if read_varint(p, n, pos, &size) < 0:
        ok[0] = 0
        return None
    if size < 0:
        return None
    if size > n - pos[0]:
        ok[0] = 0
        return None
    out = PyBytes_FromStringAndSize(<const char*>p + pos[0], <Py_ssize_t>size)
    pos[0] += <Py_ssize_t>size
    return out


cdef int read_record(Cursor c, bytearray buf) except -1:
    """Read the record at c.pos into c: 1 when read, 0 when kafka-python's own reader
    must take it (c.pos unchanged then).

    The read holds an export of the bytearray: what it allocates (the headers list, a
    tuple per header) can run a collection, and a gc callback that resized the array
    would free the bytes being read. Resizing meanwhile is a BufferError instead."""
    cdef Py_buffer view
    cdef int r
    if buf is None:
        return 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    try:
        r = read_held(c, <const unsigned char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    return r


cdef int read_held(Cursor c, const unsigned char* p, Py_ssize_t n) except -1:
    """read_record's reading, of n bytes at p that the caller holds still."""
    cdef Py_ssize_t pos = c.pos, start, i
    cdef int64_t length, attrs, count, size, header_size = 0
    cdef int ok = 1
    if pos < 0 or pos > n:
        return 0
    if read_varint(p, n, &pos, &length) < 0:
        return 0
    start = pos
    if (read_varint(p, n, &pos, &attrs) < 0 or read_varint(p, n, &pos, &c.ts_delta) < 0
            or read_varint(p, n, &pos, &c.offset_delta) < 0):
        return 0
    key = read_bytes(p, n, &pos, &ok)
    if not ok:
        return 0
    value = read_bytes(p, n, &pos, &ok)
    if not ok:
        return 0
    # Each header takes 2 bytes at least: a larger count is kafka-python's to fail on.
    if read_varint(p, n, &pos, &count) < 0 or count < 0 or count > (n - pos) // 2:
        return 0
    headers = []  # appended to, so the collector never meets an unfilled list
    for i in range(<Py_ssize_t>count):
        if read_varint(p, n, &pos, &size) < 0 or size < 0 or size > n - pos:
            return 0
        try:
            h_key = PyUnicode_DecodeUTF8(<const char*>p + pos, <Py_ssize_t>size, NULL)
        except UnicodeDecodeError:
            return 0
        pos += <Py_ssize_t>size
        header_size += size
        h_value = read_bytes(p, n, &pos, &ok)
        if not ok:
            return 0
        if h_value is not None:
            header_size += len(<bytes>h_value)
        headers.append(atomic_pair(h_key, h_value))  # untracked: a str and bytes or None
    if pos - start != length:
        return 0
    c.pos = pos
    c.length = length
    c.key = key
    c.value = value
    c.headers = headers
    c.header_size = header_size if count else -1
    return 1


cdef extern from *:
    bint __builtin_add_overflow(int64_t a, int64_t b, int64_t* out) nogil
    bint __builtin_sub_overflow(int64_t a, int64_t b, int64_t* out) nogil


cdef inline object offset_of(int64_t base, int64_t delta):
    """base + delta as kafka-python's ints give it (past int64 too)."""
    cdef int64_t out
    if __builtin_add_overflow(base, delta, &out):
        return <object>base + <object>delta
    return out


cdef inline bint in_range(v, Py_ssize_t high):
    """v an int from 0 to high (a position, a count: what the C code takes)."""
    return type(v) is int and 0 <= v <= high


cdef inline bint stock_header(header):
    """The 13 fields HEADER_STRUCT unpacks (indexed below without a bounds check)."""
    return type(header) is tuple and len(<tuple>header) == 13


cdef object record_timestamp(tuple header, Cursor c):
    """kafka-python's: the max timestamp under LOG_APPEND_TIME, else first + delta."""
    if <int>header[5] & 0x08:
        return header[8]
    return offset_of(<int64_t>header[7], c.ts_delta)


def batch_next(self):
    """DefaultRecordBatch.__next__: stock's reading of one record, compiled."""
    cdef Cursor c
    cdef ClassGuard g
    if type(self) is not DefaultRecordBatch or not guard(G_BATCH).ok():
        return stock_batch_next(self)  # a subclass, or a class someone changed: stock's reads
    # stock's order: the index first (a user's __ge__ may run and change the batch),
    # then the state read, checked and used as these locals, with no Python code between
    if self._next_record_index >= self._num_records:
        return stock_batch_next(self)
    header = self._header_data
    buf = self._buffer
    pos = self._pos
    if type(buf) is not bytearray or not stock_header(header) or not in_range(pos, len(buf)):
        return stock_batch_next(self)
    c = Cursor()
    c.pos = pos
    if not read_record(c, buf):
        return stock_batch_next(self)
    self._pos = c.pos
    attrs = <int>header[5]
    offset = offset_of(<int64_t>header[0], c.offset_delta)
    timestamp = record_timestamp(header, c)
    timestamp_type = 1 if attrs & 0x08 else 0
    g = guard(G_RECORD)
    if not attrs & 0x20 and g.ok():
        msg = new_object(g.cls)  # what its __init__ sets, set in its slots
        set_slot(msg, g.at[AT_SIZE_IN_BYTES], c.length)
        set_slot(msg, g.at[AT_OFFSET], offset)
        set_slot(msg, g.at[AT_TIMESTAMP], timestamp)
        set_slot(msg, g.at[AT_TIMESTAMP_TYPE], timestamp_type)
        set_slot(msg, g.at[AT_KEY], c.key)
        set_slot(msg, g.at[AT_VALUE], c.value)
        set_slot(msg, g.at[AT_HEADERS], c.headers)
    else:
        cls = ControlRecord if attrs & 0x20 else DefaultRecord
        try:
            msg = cls(c.length, offset, timestamp, timestamp_type, c.key, c.value, c.headers)
        except (ValueError, IndexError) as err:
            raise CorruptRecordError("Found invalid record structure: {!r}".format(err))
    self._next_record_index += 1
    return msg


def batch_validate_crc(self):
    """DefaultRecordBatch.validate_crc with fastkwire's CRC32C (the CPU's instruction)."""
    assert self._decompressed is False, \
        "Validate should be called before iteration"
    if type(self) is DefaultRecordBatch and guard(G_BATCH).ok():
        header = self._header_data
        buf = self._buffer
        if stock_header(header) and type(buf) is bytearray:
            return header[4] == bytearray_crc(buf)
    return self.crc == crc32c(memoryview(self._buffer)[21:])  # from ATTRIBUTES_OFFSET


cdef object bytearray_crc(bytearray buf):
    """CRC32C of buf[21:] (from the batch's attributes on), as an int; a buffer export
    held while reading (a bytearray shorter than that: the CRC of nothing, as stock's
    empty slice)."""
    cdef Py_buffer view
    cdef uint32_t c = 0
    PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
    if view.len > 21:
        c = fkw_crc32c(0, <const unsigned char*>view.buf + 21, <size_t>(view.len - 21))
    PyBuffer_Release(&view)
    return c


# ---- MemoryRecords: the walk from batch to batch -----------------------------------

cdef int cache_next(self) except -1:
    """MemoryRecords._cache_next, for a bytes, bytearray or flat byte memoryview buffer
    and an int position inside it; 0 where stock's own code must do it (other buffers, a
    negative batch length, which stock slices in its own way)."""
    cdef Py_buffer view
    cdef Py_ssize_t pos, n, slice_end
    cdef int32_t length
    cdef const unsigned char* p
    buffer = self._buffer
    pos_o = self._pos
    t = type(buffer)
    if type(pos_o) is not int or not (t is bytes or t is bytearray or t is memoryview):
        return 0
    if t is memoryview and not flat_bytes(buffer):
        return 0
    PyObject_GetBuffer(buffer, &view, PyBUF_SIMPLE)
    try:
        n = view.len
        if not 0 <= pos_o <= n:
            return 0
        pos = pos_o
        if n - pos < 12:  # LOG_OVERHEAD
            slice_end = -1
        else:
            p = <const unsigned char*>view.buf + pos + 8  # LENGTH_OFFSET
            length = <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16)
                               | (<uint32_t>p[2] << 8) | <uint32_t>p[3])
            if length < 0:
                return 0
            slice_end = pos + 12 + length
            if slice_end > n:
                slice_end = -1
    finally:
        PyBuffer_Release(&view)
    if slice_end < 0:
        self._remaining_bytes = n - pos
        self._next_slice = None
        return 1
    self._next_slice = memoryview(buffer)[pos:slice_end]
    self._pos = slice_end
    return 1


cdef extern from "Python.h":
    Py_buffer* PyMemoryView_GET_BUFFER(object mv)


cdef inline bint flat_bytes(mv):
    """A memoryview whose items are its bytes, in one run (len() counts its bytes)."""
    cdef Py_buffer* b = PyMemoryView_GET_BUFFER(mv)
    return b.ndim == 1 and b.itemsize == 1 and (b.strides == NULL or b.strides[0] == 1)


def memory_next_batch(self, _min_slice=NOARG, _magic_offset=NOARG):
    """MemoryRecords.next_batch: the same steps, the slice taken in C and a v2 batch's
    DefaultRecordBatch made without its __init__ (the same slots, the same values).
    Its cached defaults given, or a class changed, and it is stock's own code."""
    if (_min_slice is not NOARG or _magic_offset is not NOARG
            or type(self) is not MemoryRecords or not guard(G_MEMORY_RECORDS).ok()):
        kw = {name: v for name, v in (("_min_slice", _min_slice), ("_magic_offset", _magic_offset))
              if v is not NOARG}
        return stock_next_batch(self, **kw)
    return next_batch(self)


cdef object next_batch_of(records):
    """records.next_batch(), without the call where it is ours on a MemoryRecords."""
    if type(records) is MemoryRecords and guard(G_MEMORY_RECORDS).ok():
        return next_batch(records)
    return records.next_batch()


cdef object next_batch(self):
    """next_batch's body for a MemoryRecords whose class is as install() left it."""
    cdef Py_buffer view
    cdef ClassGuard g
    cdef signed char magic
    next_slice = self._next_slice
    if next_slice is None:
        return None
    # stock's defaults are MIN_SLICE 26 and MAGIC_OFFSET 16 (checked by install())
    if type(next_slice) is not memoryview or not flat_bytes(next_slice) or len(next_slice) < 26:
        return stock_next_batch(self)  # its error for a short slice, its steps for others
    if not cache_next(self):
        self._cache_next()
    try:
        PyObject_GetBuffer(next_slice, &view, PyBUF_SIMPLE)
    except ValueError:  # released meanwhile: stock's read of the magic fails the same way
        return stock_batch_of(next_slice)
    try:
        if view.len < 26:  # never for a slice that had 26 bytes; checked all the same
            magic = 2
            batch_bytes = None
        else:
            magic = (<const signed char*>view.buf)[16]
            batch_bytes = None
            if magic > 1 and view.len >= 61:
                batch_bytes = PyByteArray_FromStringAndSize(<const char*>view.buf, view.len)
    finally:
        PyBuffer_Release(&view)
    if batch_bytes is None:
        return stock_batch_of(next_slice)
    cls = memory_records_names.get("DefaultRecordBatch")
    g = guard(G_BATCH)
    if cls is not g.cls or not g.ok():
        return cls(next_slice)
    return new_batch(g, batch_bytes)


cdef object stock_batch_of(next_slice):
    """The end of stock's next_batch: the magic read and the batch class called."""
    magic, = struct_unpack_from(">b", next_slice, 16)
    if magic <= 1:
        return memory_records_names["LegacyRecordBatch"](next_slice, magic)
    return memory_records_names["DefaultRecordBatch"](next_slice)


cdef object new_batch(ClassGuard g, bytearray buf):
    """g.cls(buf) (DefaultRecordBatch, its guard g checked) for a bytearray of 61 bytes at
    least that nothing else holds: what its __init__ sets, set in its slots."""
    header = batch_header(<const unsigned char*>PyByteArray_AS_STRING(buf))
    batch = new_object(g.cls)
    set_slot(batch, g.at[AT_BUFFER], buf)
    set_slot(batch, g.at[AT_HEADER_DATA], header)
    set_slot(batch, g.at[AT_POS], 61)  # HEADER_STRUCT.size
    set_slot(batch, g.at[AT_NUM_RECORDS], (<tuple>header)[12])
    set_slot(batch, g.at[AT_NEXT_RECORD_INDEX], 0)
    set_slot(batch, g.at[AT_DECOMPRESSED], False)
    return batch


# ---- the fetcher's loop ------------------------------------------------------------

cdef bint batch_crc_ok(batch, tuple header) except -1:
    """batch.validate_crc() for a stock batch (header: its _header_data), its assertion
    included."""
    assert batch._decompressed is False, \
        "Validate should be called before iteration"
    buf = batch._buffer
    if type(buf) is not bytearray:
        return batch.validate_crc()
    return header[4] == bytearray_crc(buf)


cdef object consumer_record(object cr, tuple fields):
    if cr is ConsumerRecord:
        return tuple.__new__(cr, fields)
    return cr(*fields)


cdef inline object add_to(dict d, str name, object n):
    """d[name] += n, for attributes kept in an instance's __dict__."""
    value = d[name] + n
    d[name] = value
    return value


def unpack_records(self, tp, records, key_deserializer, value_deserializer):
    """Fetcher.PartitionRecords._unpack_records, compiled: the same steps in the same
    order, and for stock v2 batches the records read straight into ConsumerRecords."""
    global fast_batch_count
    cdef Cursor c = Cursor()
    cdef Py_ssize_t idx, count
    cdef PyObject* items[13]  # a ConsumerRecord's fields, borrowed from the objects below
    cdef object timestamp, timestamp_type, key_size_o, value_size_o, header_size_o
    cdef int64_t base_offset, off_v, next_v, next_off = 0
    cdef bint have_next = False
    cdef bint fast_deserialize
    Errors = fetcher_module.Errors
    IsolationLevel = fetcher_module.IsolationLevel
    log = fetcher_module.log
    cr = fetcher_module.ConsumerRecord
    try:
        batch = next_batch_of(records)
        last_batch = None
        while batch is not None:
            last_batch = batch
            # A DefaultRecordBatch as install() left its class: its header read here, not
            # through its properties (the same values, as the properties compute them).
            stock_batch = type(batch) is DefaultRecordBatch and guard(G_BATCH).ok()
            header = None
            if stock_batch:
                header = batch._header_data
                stock_batch = stock_header(header)

            if self.check_crcs and not (batch_crc_ok(batch, header) if stock_batch
                                        else batch.validate_crc()):
                raise Errors.CorruptRecordError(
                        "Record batch for partition %s at offset %s failed crc check" % (
                            self.topic_partition, batch.base_offset))

            if (header[3] if stock_batch else batch.magic) == 2:
                self.leader_epoch = header[2] if stock_batch else batch.leader_epoch
                if (self.isolation_level == IsolationLevel.READ_COMMITTED
                        and (header[9] > -1 if stock_batch else batch.has_producer_id())):
                    self._consume_aborted_transactions_up_to(batch.last_offset)

                    producer_id = batch.producer_id
                    if self._contains_abort_marker(batch):
                        try:
                            self.aborted_producer_ids.remove(producer_id)
                        except KeyError:
                            pass
                    elif self._is_batch_aborted(batch):
                        log.debug("Skipping aborted record batch from partition %s with producer_id %s and"
                                  " offsets %s to %s",
                                  self.topic_partition, producer_id, batch.base_offset, batch.last_offset)
                        self.next_fetch_offset = batch.next_offset
                        batch = next_batch_of(records)
                        continue

                if (header[5] & 0x20 if stock_batch else batch.is_control_batch):
                    self.next_fetch_offset = (header[0] + header[6] + 1 if stock_batch
                                              else batch.next_offset)
                    batch = next_batch_of(records)
                    continue

            if stock_batch:
                # a v2 data batch whose records are DefaultRecords as install() left them
                stock_batch = (header[3] == 2 and not header[5] & 0x20 and guard(G_RECORD).ok()
                               and batch._header_data is header)
            if not stock_batch:
                for record in batch:
                    yield record_to_consumer_record(
                        self, tp, cr, record, key_deserializer, value_deserializer)
                batch = next_batch_of(records)
                continue

            # The stock loop, record by record, without the DefaultRecord in between.
            if stock_batch and not header[5] & 0x07:
                batch._decompressed = True  # what iter(batch) does without compression
            else:
                iter(batch)  # decompresses, as `for record in batch` does
            header = batch._header_data
            if not stock_header(header):  # replaced while decompressing: stock's records
                for record in batch:
                    yield record_to_consumer_record(
                        self, tp, cr, record, key_deserializer, value_deserializer)
                batch = next_batch_of(records)
                continue
            fast_batch_count += 1
            # With no deserializers stock's _deserialize returns its data: skipped.
            fast_deserialize = (
                key_deserializer is None and value_deserializer is None
                and getattr(type(self), "_deserialize", None) is stock_deserialize
                and "_deserialize" not in getattr(self, "__dict__", ()))
            base_offset = header[0]
            timestamp_type = 1 if <int>header[5] & 0x08 else 0
            leader_epoch = self.leader_epoch
            # The counters straight in the instance dict when nothing else could own them.
            attrs = None
            if type(self) is PartitionRecords:
                attrs = self.__dict__
                if not ("records_read" in attrs and "bytes_read" in attrs):
                    attrs = None
            buf = batch._buffer
            if (type(buf) is not bytearray or not in_range(batch._pos, len(buf))
                    or not in_range(batch._next_record_index, 2**31)
                    or not in_range(batch._num_records, 2**31)):
                for record in batch:  # state stock's batch would never have: stock's records
                    yield record_to_consumer_record(
                        self, tp, cr, record, key_deserializer, value_deserializer)
                batch = next_batch_of(records)
                continue
            c.pos = batch._pos
            idx = batch._next_record_index
            count_o = batch._num_records
            count = count_o
            if idx < count:
                topic = tp.topic
                partition = tp.partition
            while idx < count:
                if type(buf) is not bytearray or not read_record(c, buf):
                    # kafka-python's reader takes this record: it raises or reads it.
                    batch._pos = c.pos
                    batch._next_record_index = idx
                    record = next(batch)
                    buf = batch._buffer
                    c.pos = batch._pos
                    idx = batch._next_record_index
                    yield record_to_consumer_record(
                        self, tp, cr, record, key_deserializer, value_deserializer)
                    continue
                idx += 1
                # The record after the last is usually at the offset stored as the next
                # fetch offset: that int is reused (one int made per record, not two).
                if (__builtin_add_overflow(base_offset, c.offset_delta, &off_v)
                        or __builtin_add_overflow(off_v, 1, &next_v)):
                    offset = offset_of(base_offset, c.offset_delta)  # past int64
                    next_o = offset + 1
                    have_next = False
                else:
                    offset = next_o if have_next and off_v == next_off else off_v
                    next_o = next_v
                    next_off = next_v
                    have_next = True
                key = c.key
                value = c.value
                headers = c.headers
                key_size = len(<bytes>key) if key is not None else -1
                value_size = len(<bytes>value) if value is not None else -1
                if not fast_deserialize:
                    key = self._deserialize(key_deserializer, topic, headers, key)
                    value = self._deserialize(value_deserializer, topic, headers, value)
                if attrs is not None:
                    add_to(attrs, "records_read", 1)
                    add_to(attrs, "bytes_read", c.length)
                    attrs["next_fetch_offset"] = next_o
                else:
                    self.records_read += 1
                    self.bytes_read += c.length
                    self.next_fetch_offset = next_o
                if cr is ConsumerRecord:
                    items[0] = <PyObject*>topic
                    items[1] = <PyObject*>partition
                    items[2] = <PyObject*>leader_epoch
                    items[3] = <PyObject*>offset
                    timestamp = record_timestamp(header, c)
                    items[4] = <PyObject*>timestamp
                    items[5] = <PyObject*>timestamp_type
                    items[6] = <PyObject*>key
                    items[7] = <PyObject*>value
                    items[8] = <PyObject*>headers
                    items[9] = <PyObject*>None
                    key_size_o = key_size
                    items[10] = <PyObject*>key_size_o
                    value_size_o = value_size
                    items[11] = <PyObject*>value_size_o
                    header_size_o = c.header_size
                    items[12] = <PyObject*>header_size_o
                    yield tuple_of(<PyObject*>cr, items, 13)
                else:
                    yield cr(topic, partition, leader_epoch, offset, record_timestamp(header, c),
                             timestamp_type, key, value, headers, None,
                             key_size, value_size, c.header_size)
            batch._pos = c.pos
            batch._next_record_index = idx
            # The end of the batch: stock's __next__ raises on bytes left over. Asked only
            # where it might (its class changed, or its state).
            if not (stock_batch and guard(G_BATCH).ok() and batch._buffer is buf
                    and type(buf) is bytearray and c.pos == len(<bytearray>buf)
                    and batch._num_records is count_o):
                next(batch, None)
            batch = next_batch_of(records)
        else:
            if last_batch and last_batch.magic == 2:
                self.next_fetch_offset = last_batch.next_offset
            self.drain()

    except StopIteration:
        log.exception('StopIteration raised unpacking messageset')
        raise RuntimeError('StopIteration raised unpacking messageset')


cdef object record_to_consumer_record(self, tp, cr, record, key_deserializer,
                                      value_deserializer):
    """The stock loop's body for one record object (legacy, mocked or unusual batches)."""
    if self.check_crcs and not record.validate_crc():
        raise fetcher_module.Errors.CorruptRecordError(
                "Record for partition %s at offset %s failed crc check" % (
                    self.topic_partition, record.offset))
    key_size = len(record.key) if record.key is not None else -1
    value_size = len(record.value) if record.value is not None else -1
    key = self._deserialize(key_deserializer, tp.topic, record.headers, record.key)
    value = self._deserialize(value_deserializer, tp.topic, record.headers, record.value)
    headers = record.headers
    header_size = sum(
        len(h_key.encode("utf-8")) + (len(h_val) if h_val is not None else 0) for h_key, h_val in
        headers) if headers else -1
    self.records_read += 1
    self.bytes_read += record.size_in_bytes
    self.next_fetch_offset = record.offset + 1
    return consumer_record(cr, (
        tp.topic, tp.partition, self.leader_epoch, record.offset, record.timestamp,
        record.timestamp_type, key, value, record.headers, record.checksum,
        key_size, value_size, header_size))


# ---- the default partitioner's hash ------------------------------------------------

def murmur2(data):
    """kafka.partitioner.default.murmur2 (Java's Utils.murmur2) for bytes and bytearray;
    anything else goes to kafka-python's own function."""
    cdef uint32_t h
    if murmur2_of(data, &h):
        return h
    return stock_murmur2(data)


# ---- the default partitioner -------------------------------------------------------

cdef object ClusterMetadata = None
cdef ClassGuard cluster_guard = None
cdef dict partitioner_names = None  # kafka.partitioner.default's globals (its murmur2)
cdef object stock_partition = None


def bind_partitioner(patches, ClusterMetadata_cls, partitioner_module, stock_partition_fn):
    """Take kafka-python's cluster class and partitioner (install() calls this)."""
    global ClusterMetadata, cluster_guard, partitioner_names, stock_partition
    ClusterMetadata = ClusterMetadata_cls
    made = ClassGuard(ClusterMetadata, {(p.owner, p.attribute): p.replacement for p in patches})
    replaced = cluster_guard  # dropped after the swap (see guard())
    with cython.critical_section(guards_lock):
        cluster_guard = made
    del replaced
    partitioner_names = vars(partitioner_module)
    stock_partition = stock_partition_fn


def default_partition(self, topic, key, serialized_key, value, serialized_value, cluster):
    """DefaultPartitioner.partition for a keyed record on kafka-python's own
    ClusterMetadata: the same answer and the same ValueError, from the cluster's topic
    table without the sets stock builds to ask it (topics(), partitions_for_topic(),
    and available_partitions_for_topic(), whose answer a keyed record does not use).
    Keyless records (random.choice over the available partitions) and anything else
    are stock's."""
    if serialized_key is None or type(cluster) is not ClusterMetadata or not guard(G_CLUSTER).ok():
        return stock_partition(self, topic, key, serialized_key, value, serialized_value, cluster)
    own = cluster.__dict__  # an instance's own topics() (a test's mock) is what stock calls
    partitions = own.get("_partitions")
    internal = own.get("internal_topics")
    if (type(partitions) is not dict or type(internal) is not set or "topics" in own
            or "partitions_for_topic" in own or "available_partitions_for_topic" in own):
        return stock_partition(self, topic, key, serialized_key, value, serialized_value, cluster)
    # topic in topics(): in the table and not internal
    if topic not in <dict>partitions or topic in <set>internal:
        raise ValueError("Topic %s not found in ClusterMetadata" % (topic,))
    by_partition = (<dict>partitions)[topic]
    if type(by_partition) is not dict:
        return stock_partition(self, topic, key, serialized_key, value, serialized_value, cluster)
    all_partitions = sorted(<dict>by_partition)  # sorted(set(keys)): the keys are distinct
    hash_fn = partitioner_names.get("murmur2")
    idx = murmur2(serialized_key) if hash_fn is murmur2 else hash_fn(serialized_key)
    idx &= 0x7fffffff
    idx %= len(all_partitions)
    return all_partitions[idx]


# ---- the producer's v2 batch builder -----------------------------------------------

cdef object DefaultRecordBatchBuilder = None
cdef object DefaultRecordMetadata = None
cdef object stock_builder_append = None
cdef object stock_time = None  # the time.time stock's append bound as its default
cdef object metadata_init = None  # DefaultRecordMetadata.__init__ as install() found it


def bind_builder(**kw):
    """Take kafka-python's builder classes (install() calls this)."""
    global DefaultRecordBatchBuilder, DefaultRecordMetadata, stock_builder_append, stock_time
    global metadata_init, producer_batch_names, stock_try_append, accumulator_names
    global producer_names, FutureRecordMetadata, record_future_guard, future_names
    FutureRecordMetadata = kw["FutureRecordMetadata"]
    made = ClassGuard(FutureRecordMetadata, {}, FUTURE_SLOTS)
    replaced = record_future_guard  # dropped after the swap (see guard())
    with cython.critical_section(guards_lock):
        record_future_guard = made
    del replaced
    future_names = vars(kw["future_module"])
    producer_batch_names = vars(kw["producer_batch_module"])
    accumulator_names = vars(kw["accumulator_module"])
    producer_names = vars(kw["producer_module"])
    stock_try_append = kw["stock_try_append"]
    DefaultRecordBatchBuilder = kw["DefaultRecordBatchBuilder"]
    DefaultRecordMetadata = kw["DefaultRecordMetadata"]
    metadata_init = genuine(DefaultRecordMetadata.__dict__["__init__"])
    stock_builder_append = kw["stock_builder_append"]
    stock_time = kw["stock_time"]


cdef inline int zigzag_size(int64_t v) noexcept:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef int n = 1
    while z >= 0x80:
        z >>= 7
        n += 1
    return n


cdef inline unsigned char* put_zigzag(unsigned char* o, int64_t v) noexcept:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    while z >= 0x80:
        o[0] = <unsigned char>(z | 0x80)
        o += 1
        z >>= 7
    o[0] = <unsigned char>z
    return o + 1


cdef inline bint is_int64(object v, int64_t* out):
    """v an exact int within int64 (the only ints the fast path takes)."""
    if type(v) is not int:
        return False
    try:
        out[0] = v
    except OverflowError:
        return False
    return True


cdef inline unsigned char* put_bytes(unsigned char* o, object b) noexcept:
    cdef Py_ssize_t n
    if b is None:
        o[0] = 1  # varint -1
        return o + 1
    n = len(<bytes>b)
    o = put_zigzag(o, n)
    if n:
        memcpy(o, <const char*><bytes>b, n)
    return o + n


cdef inline Py_ssize_t bytes_size(object b) noexcept:
    if b is None:
        return 1
    return zigzag_size(len(<bytes>b)) + len(<bytes>b)




def builder_append(self, offset, timestamp, key, value, headers, encode_varint=NOARG,
                   size_of_varint=NOARG, get_type=NOARG, type_int=NOARG, time_time=NOARG,
                   byte_like=NOARG, bytearray_type=NOARG, len_func=NOARG, zero_len_varint=NOARG):
    """DefaultRecordBatchBuilder.append: stock's record bytes and rules, compiled, for
    int offsets and timestamps, bytes or None keys and values, and headers as (str, bytes
    or None) pairs; anything else (and every error) is stock's own code. The keyword
    arguments are stock's (its cached globals): given any, stock's code runs."""
    cdef int64_t off, ts, first, ts_delta
    cdef Py_ssize_t size, message_len, required, old, klen
    cdef const char* k
    cdef tuple hs
    cdef Py_buffer view
    if (encode_varint is not NOARG or size_of_varint is not NOARG or get_type is not NOARG
            or type_int is not NOARG or time_time is not NOARG or byte_like is not NOARG
            or bytearray_type is not NOARG or len_func is not NOARG or zero_len_varint is not NOARG):
        kw = {name: v for name, v in (
            ("encode_varint", encode_varint), ("size_of_varint", size_of_varint),
            ("get_type", get_type), ("type_int", type_int), ("time_time", time_time),
            ("byte_like", byte_like), ("bytearray_type", bytearray_type), ("len_func", len_func),
            ("zero_len_varint", zero_len_varint)) if v is not NOARG}
        return stock_builder_append(self, offset, timestamp, key, value, headers, **kw)
    if (type(self) is not DefaultRecordBatchBuilder or not is_int64(offset, &off)
            or not (key is None or type(key) is bytes) or not (value is None or type(value) is bytes)
            or not (type(headers) is list or type(headers) is tuple)):
        return stock_builder_append(self, offset, timestamp, key, value, headers)
    buf = self._buffer
    first_ts = self._first_timestamp
    if (type(buf) is not bytearray or not (first_ts is None or type(first_ts) is int)
            or type(self._batch_size) is not int):
        return stock_builder_append(self, offset, timestamp, key, value, headers)
    # Headers checked and measured first (a tuple of our own: what is written cannot
    # change); anything odd and stock's code takes the record.
    hs = tuple(headers)
    size = 0
    for h in hs:
        if type(h) is not tuple or len(<tuple>h) != 2:
            return stock_builder_append(self, offset, timestamp, key, value, headers)
        h_key, h_value = <tuple>h
        if type(h_key) is not str or not (h_value is None or type(h_value) is bytes):
            return stock_builder_append(self, offset, timestamp, key, value, headers)
        if PyUnicode_AsUTF8AndSize(h_key, &klen) == NULL:  # a lone surrogate
            PyErr_Clear()
            return stock_builder_append(self, offset, timestamp, key, value, headers)
        size += zigzag_size(klen) + klen + bytes_size(h_value)
    if timestamp is None:
        timestamp = int(stock_time() * 1000)
    if not is_int64(timestamp, &ts):
        return stock_builder_append(self, offset, timestamp, key, value, headers)
    if first_ts is None:
        ts_delta = 0
    else:
        if (not is_int64(first_ts, &first) or type(self._max_timestamp) is not int
                or __builtin_sub_overflow(ts, first, &ts_delta)):
            return stock_builder_append(self, offset, timestamp, key, value, headers)
    message_len = (1 + zigzag_size(ts_delta) + zigzag_size(off) + bytes_size(key)
                   + bytes_size(value) + zigzag_size(len(hs)) + size)
    required = message_len + zigzag_size(message_len)
    # As stock: the first record's timestamps are set before the room check, which it
    # always passes; later records that do not fit leave the builder as it was.
    if first_ts is None:
        self._first_timestamp = timestamp
        self._max_timestamp = timestamp
    elif required + len(<bytearray>buf) > self._batch_size:
        return None
    if self._max_timestamp < timestamp:
        self._max_timestamp = timestamp
    self._num_records += 1
    self._last_offset = offset
    old = len(<bytearray>buf)
    PyByteArray_Resize(buf, old + required)
    if FREE_THREADED:
        # Another thread may resize the buffer meanwhile: write under an export, which
        # holds it still, and only where the bytes are still this record's room.
        PyObject_GetBuffer(buf, &view, PyBUF_SIMPLE)
        try:
            if view.len != old + required:
                raise RuntimeError("the batch buffer was resized while a record was appended")
            put_record(<unsigned char*>view.buf + old, message_len, ts_delta, off, key, value, hs)
        finally:
            PyBuffer_Release(&view)
    else:
        put_record(<unsigned char*>PyByteArray_AS_STRING(buf) + old, message_len, ts_delta,
                   off, key, value, hs)
    return record_metadata(offset, required, timestamp)


cdef inline void put_record(unsigned char* o, Py_ssize_t message_len, int64_t ts_delta, int64_t off,
                     object key, object value, tuple hs) noexcept:
    """builder_append's record bytes at o (its room measured by the caller)."""
    cdef Py_ssize_t klen
    cdef const char* k
    o = put_zigzag(o, message_len)
    o[0] = 0  # attributes
    o = put_zigzag(o + 1, ts_delta)
    o = put_zigzag(o, off)
    o = put_bytes(o, key)
    o = put_bytes(o, value)
    o = put_zigzag(o, len(hs))
    for h in hs:
        k = PyUnicode_AsUTF8AndSize((<tuple>h)[0], &klen)  # cached by the pass above
        o = put_zigzag(o, klen)
        memcpy(o, k, klen)
        o = put_bytes(o + klen, (<tuple>h)[1])


cdef object record_metadata(offset, size, timestamp):
    """DefaultRecordMetadata(offset, size, timestamp); its __init__ only sets the three
    slots, so while it is stock's they are set here without the call."""
    if (type_attr(DefaultRecordMetadata, "__init__") != <PyObject*>metadata_init
            or type_attr(DefaultRecordMetadata, "__new__") != NULL):
        return DefaultRecordMetadata(offset, size, timestamp)
    m = new_object(DefaultRecordMetadata)
    m._offset = offset
    m._size = size
    m._timestamp = timestamp
    return m


def memory_builder_append(self, timestamp, key, value, headers=None):
    """MemoryRecordsBuilder.append, compiled: the same steps."""
    if headers is None:
        headers = []
    if self._closed:
        return None

    offset = self._next_offset
    metadata = self._builder.append(offset, timestamp, key, value, headers)
    if metadata is None:
        return None

    self._next_offset += 1
    return metadata


cdef dict producer_batch_names = None  # kafka.producer.producer_batch's globals
cdef object stock_try_append = None
cdef object FutureRecordMetadata = None  # kafka.producer.future's, as install() found it
cdef ClassGuard record_future_guard = None
cdef dict future_names = None  # kafka.future's globals (its Future.__init__ reads threading)


cdef object record_future(ClassGuard g, object produce_future, tuple args):
    """FutureRecordMetadata(produce_future, *args) while the class and Future hold what
    install() found (g, its guard, checked): their two __init__s' steps without their
    frames (the slots set in the same order, then the same _add_cb_eb call). Its inputs
    are made before the instance, so no Python code runs while it is part filled."""
    callbacks = []
    errbacks = []
    lock = global_name(future_names, "threading").Lock()
    future = object.__new__(g.cls)
    set_slot(future, g.at[FUT_IS_DONE], False)
    set_slot(future, g.at[FUT_VALUE], None)
    set_slot(future, g.at[FUT_EXCEPTION], None)
    set_slot(future, g.at[FUT_CALLBACKS], callbacks)
    set_slot(future, g.at[FUT_ERRBACKS], errbacks)
    set_slot(future, g.at[FUT_LOCK], lock)
    set_slot(future, g.at[FUT_PRODUCE_FUTURE], produce_future)
    set_slot(future, g.at[FUT_ARGS], args)
    produce_future._add_cb_eb(future._produce_success, future.failure)
    return future


def batch_try_append(self, timestamp_ms, key, value, headers, now=None):
    """ProducerBatch.try_append, compiled: the same steps, in the same order, with the
    names its module binds (time, FutureRecordMetadata) read from that module at each
    call, as stock's code reads them."""
    cdef ClassGuard g
    names = producer_batch_names
    if "time" not in names or "FutureRecordMetadata" not in names:
        return stock_try_append(self, timestamp_ms, key, value, headers, now)
    metadata = self.records.append(timestamp_ms, key, value, headers)
    if metadata is None:
        return None

    now = names["time"].monotonic() if now is None else now
    self.max_record_size = max(self.max_record_size, metadata.size)
    self.last_append = now
    future_class = names["FutureRecordMetadata"]
    produce_future = self.produce_future
    args = (
        metadata.offset,
        metadata.timestamp,
        metadata.crc,
        len(key) if key is not None else -1,
        len(value) if value is not None else -1,
        sum([len(h_key.encode("utf-8")) + len(h_val) for h_key, h_val in headers])
        if headers else -1)
    g = guard(G_RECORD_FUTURE)
    if future_class is g.cls and g.ok():
        future = record_future(g, produce_future, args)
    else:
        future = future_class(produce_future, *args)
    self._record_futures.append(future)
    return future


cdef dict accumulator_names = None  # kafka.producer.record_accumulator's globals


cdef object global_name(dict names, str name):
    """A module's global as its functions read it (no builtin has these names)."""
    try:
        return names[name]
    except KeyError:
        raise NameError(f"name '{name}' is not defined") from None


@cython.wraparound(True)  # dq[-1], as in Python
def accumulator_append(self, tp, timestamp_ms, key, value, headers, now=None,
                       abort_on_new_batch=False):
    """RecordAccumulator.append, compiled: the same steps, in the same order, its
    module's names read from that module at each call, as stock's code reads them."""
    names = accumulator_names
    if not isinstance(tp, global_name(names, "TopicPartition")):
        raise TypeError('not TopicPartition')
    if self._closed:
        raise global_name(names, "Errors").IllegalStateError('RecordAccumulator is closed')
    now = global_name(names, "time").monotonic() if now is None else now
    self._appends_in_progress.increment()
    try:
        with self._tp_lock(tp):
            dq = self._batches[tp]
            if dq:
                last = dq[-1]
                future = last.try_append(timestamp_ms, key, value, headers, now=now)
                if future is not None:
                    batch_is_full = len(dq) > 1 or last.records.is_full()
                    return future, batch_is_full, False, False

        if abort_on_new_batch:
            return None, False, False, True

        with self._tp_lock(tp):
            if self._closed:
                raise global_name(names, "Errors").IllegalStateError(
                    'RecordAccumulator is closed')

            if dq:
                last = dq[-1]
                future = last.try_append(timestamp_ms, key, value, headers, now=now)
                if future is not None:
                    batch_is_full = len(dq) > 1 or last.records.is_full()
                    return future, batch_is_full, False, False

            if self._transaction_manager and self.config['message_version'] < 2:
                raise global_name(names, "Errors").UnsupportedVersionError(
                    "Attempting to use idempotence with a broker which"
                    " does not support the required message format (v2)."
                    " The broker must be version 0.11 or later.")
            records = global_name(names, "MemoryRecordsBuilder")(
                self.config['message_version'],
                self.config['compression_attrs'],
                self.config['batch_size']
            )

            batch = global_name(names, "ProducerBatch")(tp, records, now=now)
            future = batch.try_append(timestamp_ms, key, value, headers, now=now)
            if not future:
                raise Exception()

            dq.append(batch)
            self._incomplete.add(batch)
            batch_is_full = len(dq) > 1 or batch.records.is_full()
            return future, batch_is_full, True, False
    finally:
        self._appends_in_progress.decrement()


cdef dict producer_names = None  # kafka.producer.kafka's globals


def producer_send(self, topic, value=None, key=None, headers=None, partition=None,
                  timestamp_ms=None):
    """KafkaProducer.send, compiled: the same steps, in the same order, its module's
    names read from that module at each call, as stock's code reads them."""
    names = producer_names
    if self._closed:
        raise global_name(names, "Errors").IllegalStateError('KafkaProducer already closed!')
    if value is None and self.config['api_version'] < (0, 8, 1):
        raise ValueError('Null messages require kafka >= 0.8.1')
    if value is None and key is None:
        raise ValueError('Need at least one: key or value')
    if headers is None:
        headers = []
    if not isinstance(headers, list):
        raise TypeError('headers must be list-type')
    if not all(isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], str)
               and isinstance(item[1], bytes) for item in headers):
        raise TypeError('All headers items must be (str, bytes) tuples')

    key_bytes = self._serialize(
        self.config['key_serializer'],
        topic, headers, key)
    value_bytes = self._serialize(
        self.config['value_serializer'],
        topic, headers, value)
    if type(key_bytes) not in (bytes, bytearray, memoryview, type(None)):
        raise TypeError("Unsupported type for serialized key: %s" % type(key_bytes))
    if type(value_bytes) not in (bytes, bytearray, memoryview, type(None)):
        raise TypeError("Unsupported type for serialized value: %s" % type(value_bytes))

    if self._metadata.partitions_for_topic(topic) is None:
        try:
            self._wait_on_metadata(topic, self.config['max_block_ms'])
        except global_name(names, "Errors").BrokerResponseError as e:
            global_name(names, "log").error(
                "%s: Exception occurred waiting for metadata during message send: %s",
                str(self), e)
            return global_name(names, "FutureRecordMetadata")(
                global_name(names, "FutureProduceResult")(
                    global_name(names, "TopicPartition")(topic, partition)),
                -1, None, None,
                len(key_bytes) if key_bytes is not None else -1,
                len(value_bytes) if value_bytes is not None else -1,
                sum([len(h_key.encode("utf-8")) + len(h_value) for h_key, h_value in headers])
                if headers else -1,
            ).failure(e)

    explicit_partition = partition is not None
    partition = self._partition(topic, partition, key, value, key_bytes, value_bytes)
    if partition is None:
        raise ValueError(f'Partitioner did not assign a partition for topic {topic}!')

    message_size = self._estimate_size_in_bytes(key_bytes, value_bytes, headers)
    self._ensure_valid_record_size(message_size)

    tp = global_name(names, "TopicPartition")(topic, partition)
    global_name(names, "log").debug(
        "%s: Sending (key=%r value=%r headers=%r) to %s", str(self), key, value, headers, tp)

    if self._transaction_manager and self._transaction_manager.is_transactional():
        self._transaction_manager.maybe_add_partition_to_transaction(tp)

    sticky_eligible = not explicit_partition and key_bytes is None
    result = self._accumulator.append(tp, timestamp_ms, key_bytes, value_bytes, headers,
                                      abort_on_new_batch=sticky_eligible)
    future, batch_is_full, new_batch_created, abort_for_new_batch = result
    if abort_for_new_batch:
        prev_partition = partition
        on_new_batch = getattr(self.config['partitioner'], 'on_new_batch', None)
        if on_new_batch is not None:
            on_new_batch(topic, self._metadata, prev_partition)
        partition = self._partition(topic, None, key, value, key_bytes, value_bytes)
        tp = global_name(names, "TopicPartition")(topic, partition)
        if self._transaction_manager and self._transaction_manager.is_transactional():
            self._transaction_manager.maybe_add_partition_to_transaction(tp)
        result = self._accumulator.append(tp, timestamp_ms, key_bytes, value_bytes, headers,
                                          abort_on_new_batch=False)
        future, batch_is_full, new_batch_created, _ = result

    if batch_is_full or new_batch_created:
        global_name(names, "log").debug(
            "%s: Waking up the sender since %s is either full or"
            " getting a new batch", str(self), tp)
        self._sender.wakeup()
    return future


def builder_write_header(self, use_compression_type=True):
    """DefaultRecordBatchBuilder.write_header with fastkwire's CRC32C."""
    batch_len = len(self._buffer)
    self.HEADER_STRUCT.pack_into(
        self._buffer, 0,
        0,
        batch_len - self.AFTER_LEN_OFFSET,
        0,
        self._magic,
        0,
        self._get_attributes(use_compression_type),
        self._last_offset,
        self._first_timestamp or 0,
        self._max_timestamp or 0,
        self._producer_id,
        self._producer_epoch,
        self._base_sequence,
        self._num_records
    )
    crc = crc32c(memoryview(self._buffer)[self.ATTRIBUTES_OFFSET:])
    struct_pack_into(">I", self._buffer, self.CRC_OFFSET, crc)


# ---- size estimates (the producer asks one per record before appending)

cdef object stock_size_of = None            # the functions under stock's classmethods
cdef object stock_estimate_size = None


def bind_sizes(stock_size_of_fn, stock_estimate_fn):
    global stock_size_of, stock_estimate_size
    stock_size_of = stock_size_of_fn
    stock_estimate_size = stock_estimate_fn


cdef Py_ssize_t record_size_of(object key, object value, object headers) except -2:
    """DefaultRecordBatchBuilder.size_of for bytes-or-None keys and values and a list of
    (str, bytes or None) headers; -1 for any other input (stock's to size)."""
    cdef Py_ssize_t size = 0, n
    cdef const char* utf8
    if (key is not None and type(key) is not bytes) or (value is not None and type(value) is not bytes):
        return -1
    if type(headers) is not list:
        return -1
    size += bytes_size(key) + bytes_size(value) + zigzag_size(len(<list>headers))
    for h in <list>headers:
        if type(h) is not tuple or len(<tuple>h) != 2:
            return -1
        h_key, h_value = <tuple>h
        if type(h_key) is not str or (h_value is not None and type(h_value) is not bytes):
            return -1
        utf8 = PyUnicode_AsUTF8AndSize(h_key, &n)
        if utf8 == NULL:
            PyErr_Clear()
            return -1
        size += zigzag_size(n) + n + bytes_size(h_value)
    return size


def size_of(cls, key, value, headers):
    """DefaultRecordBatchBuilder.size_of, compiled for the inputs the producer gives."""
    cdef Py_ssize_t size
    if cls is DefaultRecordBatchBuilder:
        size = record_size_of(key, value, headers)
        if size >= 0:
            return size
    return stock_size_of(cls, key, value, headers)


def estimate_size_in_bytes(cls, key, value, headers):
    """DefaultRecordBatchBuilder.estimate_size_in_bytes, compiled likewise (its class
    constants read from the class, as stock reads them)."""
    cdef Py_ssize_t size
    # stock calls cls.size_of: taken here only while that is still this module's
    if cls is DefaultRecordBatchBuilder and getattr(cls.__dict__.get("size_of"), "__func__", None) is size_of:
        size = record_size_of(key, value, headers)
        if size >= 0:
            return cls.HEADER_STRUCT.size + cls.MAX_RECORD_OVERHEAD + size
    return stock_estimate_size(cls, key, value, headers)

# cython: language_level=3, wraparound=False, freethreading_compatible=True
"""Compiled wire primitives: the twin of _pure.py.

The inline hot paths are in _core.pxd; this module holds the cold paths (errors,
tagged fields, numpy) and the Python-level `encode(type, value)` / `decode(type, data)`
that the primitive test vectors exercise.
"""
import _thread  # threading's own locks, without importing threading

from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyObject_CheckBuffer,
                             PyBUF_SIMPLE, PyBUF_WRITABLE, PyBUF_RECORDS_RO, PyBUF_READ,
                             PyBUF_C_CONTIGUOUS)
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.memoryview cimport PyMemoryView_FromMemory
from cpython.exc cimport PyErr_Clear, PyErr_ExceptionMatches
from cpython.list cimport PyList_GET_ITEM
from cpython.ref cimport PyObject, Py_DECREF, Py_INCREF, Py_XDECREF
from libc.stdint cimport INT64_MAX, uint8_t
from libc.string cimport memcpy
from cpython.mem cimport PyMem_RawMalloc

from fastkwire import _bulk, _rules, _wire
from fastkwire import columns as _columns
from fastkwire import errors as _e
from fastkwire.errors import DecodeError, EncodeError

check_arrays = _rules.check_arrays
decode_options = _rules.decode_options
merge_tags = _rules.merge_tags
_KINDS = ("int8", "int16", "int32", "int64", "uint16", "uint32")
_BULK_KIND = {2: "int16", 4: "int32", 8: "int64"}


# ---------------------------------------------------------------- errors

cdef int raise_short(Py_ssize_t start, Py_ssize_t need, Py_ssize_t end) except -1:
    raise _e.truncated(start, need, max(end - start, 0))

cdef int raise_varint(Py_ssize_t start, int max_bytes) except -1:
    raise _e.varint_too_long(start, max_bytes)

cdef int raise_null(Py_ssize_t start) except -1:
    raise _e.null_not_allowed(start)

cdef int raise_bad_length(Py_ssize_t start, long long n) except -1:
    raise _e.bad_length(start, n)

cdef int raise_count(Py_ssize_t start, long long n, Py_ssize_t left) except -1:
    raise _e.count_exceeds(start, n, left)

cdef int raise_utf8(Py_ssize_t start) except -1:
    PyErr_Clear()
    raise _e.invalid_utf8(start)

cdef int raise_string_too_long(Py_ssize_t start, long long n) except -1:
    raise _e.string_too_long(start, n)

cdef int raise_marker(Py_ssize_t start, int m) except -1:
    raise _e.bad_marker(start, m)

cdef int raise_changed() except -1:
    raise _e.changed_during_encode()

cdef int raise_not_str(object s) except -1:
    raise _e.wrong_type("str", s)

cdef int raise_not_encodable() except -1:
    PyErr_Clear()
    raise EncodeError("string is not encodable as UTF-8")

cdef int raise_string_length(Py_ssize_t n) except -1:
    raise EncodeError(f"string of {n} UTF-8 bytes exceeds 32767")

cdef int raise_null_array() except -1:
    raise EncodeError("None where the array is not nullable")

cdef int raise_not_list(object items) except -1:
    raise _e.wrong_type("list", items)

cdef int raise_too_long(Py_ssize_t n, int compact) except -1:
    raise _e.too_long(<size_t>n, compact)

cdef int raise_too_large() except -1:
    raise _e.message_too_large()

cdef long long rd_uvarint_long(Cursor* c) except -1:
    """rd_uvarint past its one-byte case."""
    cdef Py_ssize_t start = c.pos
    cdef unsigned long long value = 0
    cdef int shift = 0
    cdef unsigned char b
    while True:
        if c.pos >= c.end:
            raise_short(start, c.pos - start + 1, c.end)
        b = c.buf[c.pos]
        c.pos += 1
        value |= (<unsigned long long>(b & 0x7F)) << shift
        if not b & 0x80:
            if value > 0xFFFFFFFFULL:
                raise_varint(start, 5)
            return <long long>value
        shift += 7
        if shift >= 35:
            raise_varint(start, 5)

cdef long long as_int_slow(object v, int kind) except? -1:
    """The pure codec's rules (`_rules.int_value`): ints and __index__ objects, never bool."""
    return _rules.int_value(_KINDS[kind], v)

cdef object unknown_tags_slow(object value):
    return _rules.unknown_tags(value)


cdef Py_ssize_t start_at(object offset, Py_ssize_t n) except -1:
    """decode_from's offset, checked with the pure codec's rules and words."""
    if type(offset) is not int or not 0 <= offset <= n:
        _rules.check_offset(offset, n)  # raises
    return offset


# ---------------------------------------------------------------- output buffers

cdef extern from "Python.h":
    PyObject* _new_bytes "PyBytes_FromStringAndSize"(const char* s, Py_ssize_t n)
    int _PyBytes_Resize(PyObject** pv, Py_ssize_t newsize) except -1
    # no `except`: open_into looks at the error itself
    int _get_buffer "PyObject_GetBuffer"(object obj, Py_buffer* view, int flags)


cdef int open_buf(Buf* b, Py_ssize_t capacity) except -1:
    """A growable buffer: a fresh bytes object, ours alone until close_buf hands it out."""
    capacity = min(max(capacity, 32), MAX_MESSAGE)
    b.owner = _new_bytes(NULL, capacity)
    if b.owner == NULL:
        raise MemoryError()
    b.start = b.p = <unsigned char*>PyBytes_AS_STRING(<object>b.owner)
    b.end = b.start + capacity
    b.dest = NULL
    return 0


cdef int grow(Buf* b, Py_ssize_t need) except -1:
    """Room for `need` more bytes, or an EncodeError if the message would pass
    MAX_MESSAGE (checked before any size is computed, so nothing here can overflow)."""
    cdef Py_ssize_t used = b.p - b.start
    cdef Py_ssize_t capacity = b.end - b.start
    cdef PyObject* raw = b.owner
    if need < 0 or need > MAX_MESSAGE - used:
        raise_too_large()
    # double, or what is needed and a little more; never past the limit
    capacity = 2 * capacity if capacity <= MAX_MESSAGE // 2 else MAX_MESSAGE
    if capacity < used + need:
        capacity = used + need + 64 if used + need <= MAX_MESSAGE - 64 else MAX_MESSAGE
    if raw == NULL:  # encode_into's scratch area: move to a bytes object of our own
        raw = _new_bytes(NULL, capacity)
        if raw == NULL:
            raise MemoryError()
        memcpy(PyBytes_AS_STRING(<object>raw), b.start, used)
    else:
        b.owner = NULL  # _PyBytes_Resize frees the object if it fails
        _PyBytes_Resize(&raw, capacity)
    b.owner = raw
    b.start = <unsigned char*>PyBytes_AS_STRING(<object>raw)
    b.p = b.start + used
    b.end = b.start + capacity
    return 0


cdef object close_buf(Buf* b):
    """The bytes written so far, as a bytes object of exactly that size."""
    cdef PyObject* raw = b.owner
    b.owner = NULL
    _PyBytes_Resize(&raw, b.p - b.start)
    out = <object>raw
    Py_DECREF(out)  # <object> took a reference; we hand over the one we owned
    return out


cdef void discard_buf(Buf* b) noexcept:
    if b.owner != NULL:
        Py_XDECREF(b.owner)
        b.owner = NULL


cdef int open_into(Buf* b, object buffer, Py_buffer* view, object offset,
                   unsigned char* scratch, Py_ssize_t hint) except -1:
    """encode_into: hold the caller's buffer (so it cannot be resized meanwhile) and
    check the offset, then encode as `encode` does, into `scratch` (SCRATCH bytes) or,
    when the last message was larger, a bytes object of `hint` bytes. close_into copies
    the finished message to the caller's buffer if it fits: on any error the buffer is
    left as it was. The caller releases with release_into."""
    cdef int overflow = 0
    cdef long long at = -1
    if _get_buffer(buffer, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0:
        # not a buffer, read-only, not C-contiguous (numpy says so with a ValueError),
        # released: one TypeError, as the pure encoder gives
        if (PyErr_ExceptionMatches(TypeError) or PyErr_ExceptionMatches(BufferError)
                or PyErr_ExceptionMatches(ValueError)):
            PyErr_Clear()
            raise _e.not_writable(buffer)
        return -1  # the exporter's own error
    if type(offset) is int:
        at = PyLong_AsLongLongAndOverflow(offset, &overflow)
    if overflow or not 0 <= at <= view.len:
        PyBuffer_Release(view)
        raise _e.bad_buffer_offset(offset, view.len)
    b.dest = <unsigned char*>view.buf + at
    b.dest_room = view.len - at
    b.owner = NULL
    b.start = b.p = scratch
    b.end = scratch + <Py_ssize_t>SCRATCH
    if hint > SCRATCH:
        try:
            grow(b, hint)
        except BaseException:
            PyBuffer_Release(view)
            raise
    return 0


cdef int raise_buffer_too_small(Py_ssize_t need, Py_ssize_t available) except -1:
    raise _e.buffer_too_small(need, available)


cdef bytes encode_value(write_fn wr, object o, int v, str name):
    """A value on its own, as bytes (a known tagged field's payload); errors name it."""
    cdef Buf b
    open_buf(&b, 64)
    try:
        wr(o, &b, v)
        return close_buf(&b)
    except EncodeError as x:
        raise x.with_prefix(name) from None
    finally:
        discard_buf(&b)


# ---------------------------------------------------------------- reading, cold

cdef object rd_bool(Cursor* c):
    if c.end - c.pos < 1:
        raise_short(c.pos, 1, c.end)
    c.pos += 1
    return c.buf[c.pos - 1] != 0

cdef object rd_float64(Cursor* c):
    cdef uint64_t bits = <uint64_t>rd_i64(c)
    cdef double d
    memcpy(&d, &bits, 8)
    return d

cdef extern from "Python.h":
    PyObject* PyLong_FromSsize_t(Py_ssize_t v)
    object _PyLong_FromByteArray(const unsigned char* b, size_t n, int little_endian, int signed)


# uuid is imported by the first UUID decoded, not by `import fastkwire` (it pulls platform
# and re: a third of the import's cost). The offsets of uuid.UUID's slots stay 0 when UUID
# is not the slotted class this module knows (then UUIDs are made by calling it); the class
# is published last, so a reader that sees it also sees the offsets and is_safe's value.
cdef object _UUID = None
cdef object _UUID_UNKNOWN = None
cdef Py_ssize_t _UUID_INT = 0
cdef Py_ssize_t _UUID_SAFE = 0


cdef Py_ssize_t _uuid_slot(object cls, str name):
    try:
        return slot_offset(cls, name)
    except TypeError:
        return 0


cdef object uuid_class():
    global _UUID, _UUID_UNKNOWN, _UUID_INT, _UUID_SAFE
    if _UUID is None:
        with _init_lock:  # set once: a replaced global could be freed under a reader
            if _UUID is None:
                import uuid
                cls = uuid.UUID
                _UUID_UNKNOWN = uuid.SafeUUID.unknown
                if cls.__new__ is object.__new__:  # else only its constructor makes one
                    _UUID_INT = _uuid_slot(cls, "int")
                    _UUID_SAFE = _uuid_slot(cls, "is_safe")
                _UUID = cls
    return _UUID


cdef object rd_uuid(Cursor* c):
    if c.end - c.pos < 16:
        raise_short(c.pos, 16, c.end)
    c.pos += 16
    cls = uuid_class()
    if _UUID_INT == 0 or _UUID_SAFE == 0:
        return cls(bytes=rd_raw_at(c, c.pos - 16, 16))
    # What UUID(bytes=...) makes (its int, is_safe unknown), without its Python __init__
    # (1-2 us a UUID: most of a Metadata topic's decode). Both values exist before the
    # object does, so no Python code runs while its slots are empty.
    value = _PyLong_FromByteArray(c.buf + c.pos - 16, 16, 0, 0)
    u = alloc_instance(cls)
    Py_INCREF(value)
    (<PyObject**>(<char*><PyObject*>u + _UUID_INT))[0] = <PyObject*>value
    Py_INCREF(_UUID_UNKNOWN)
    (<PyObject**>(<char*><PyObject*>u + _UUID_SAFE))[0] = <PyObject*>_UUID_UNKNOWN
    return u

cdef bytes rd_raw_at(Cursor* c, Py_ssize_t pos, Py_ssize_t n):
    return PyBytes_FromStringAndSize(<const char*>c.buf + pos, n)

cdef object rd_raw(Cursor* c, Py_ssize_t n):
    if c.end - c.pos < n:
        raise_short(c.pos, n, c.end)
    c.pos += n
    return rd_raw_at(c, c.pos - n, n)

# "classic": the non-compact forms, as in _pure ("legacy" is the magic 0/1 record formats).
cdef long long classic_len(Cursor* c, int width, int nullable) except -2:
    """An int16 (strings) or int32 (bytes) length; -1 for null where that is allowed."""
    cdef Py_ssize_t start = c.pos
    cdef long long n = rd_i16(c) if width == 2 else rd_i32(c)
    if n < 0:
        if n == -1:
            if nullable:
                return -1
            raise_null(start)
        raise_bad_length(start, n)
    return n

cdef object _classic_string(Cursor* c, int nullable):
    cdef Py_ssize_t start = c.pos
    cdef long long n = classic_len(c, 2, nullable)
    return None if n < 0 else take_str(c, start, n)

cdef object rd_string(Cursor* c):
    return _classic_string(c, 0)

cdef object rd_nullable_string(Cursor* c):
    return _classic_string(c, 1)

cdef Py_ssize_t bytes_span(Cursor* c, int compact, int nullable) except -2:
    """Reads a bytes value's length (-1: null) and moves past the value, whose bytes
    must all be there; the value starts at c.pos minus the length."""
    cdef Py_ssize_t start = c.pos
    cdef long long n
    if compact:
        n = rd_uvarint(c)
        if n == 0:
            if nullable:
                return -1
            raise_null(start)
        n -= 1
    else:
        n = classic_len(c, 4, nullable)
        if n < 0:
            return -1
    if c.end - c.pos < n:
        raise_short(start, c.pos - start + n, c.end)
    c.pos += n
    return n

cdef object _bytes(Cursor* c, int compact, int nullable):
    cdef Py_ssize_t n = bytes_span(c, compact, nullable)
    return None if n < 0 else rd_raw_at(c, c.pos - n, n)

cdef object rd_bytes(Cursor* c):
    return _bytes(c, 0, 0)

cdef object rd_nullable_bytes(Cursor* c):
    return _bytes(c, 0, 1)

cdef object rd_compact_bytes(Cursor* c):
    return _bytes(c, 1, 0)

cdef object rd_compact_nullable_bytes(Cursor* c):
    return _bytes(c, 1, 1)


# ---- numpy arrays, without a compile-time dependency on numpy: numpy is imported on
# first use and arrays are filled through the buffer protocol.

# Tables built on first use, once, under this lock.
cdef object _init_lock = _thread.allocate_lock()
cdef object _numpy = None
cdef tuple _native = None  # int16, int32, int64 in native order
cdef tuple _big_endian = None    # the same, big-endian

cdef int dtype_index(int width) noexcept:
    return 0 if width == 2 else 1 if width == 4 else 2

cdef object numpy_module():
    global _numpy, _native, _big_endian
    if _numpy is None:
        with _init_lock:  # set once: a replaced global could be freed under a reader
            if _numpy is None:
                import numpy
                _native = (numpy.dtype("i2"), numpy.dtype("i4"), numpy.dtype("i8"))
                _big_endian = (numpy.dtype(">i2"), numpy.dtype(">i4"), numpy.dtype(">i8"))
                _numpy = numpy
    return _numpy


cdef object new_array(Py_ssize_t n, int width):
    """An uninitialised native-order numpy array of n integers of `width` bytes."""
    return numpy_module().empty(n, _native[dtype_index(width)])


cdef void* array_data(object arr, Py_buffer* view) except NULL:
    """The memory of a C-contiguous writable array (new_array's); release `view` after."""
    PyObject_GetBuffer(arr, view, PyBUF_SIMPLE | PyBUF_WRITABLE)
    return view.buf


cdef object wire_array(const unsigned char* p, Py_ssize_t n, int width):
    """n big-endian integers at p as a new native-order array that owns its memory.
    numpy's byte-swapping copy reads them through a temporary view of the input: one
    allocation, one pass, and vectorised (about twice as fast as a portable C loop)."""
    np = numpy_module()
    k = dtype_index(width)
    view = PyMemoryView_FromMemory(<char*>p, n * width, PyBUF_READ)
    return np.frombuffer(view, _big_endian[k]).astype(_native[k])


# Partition numbers and broker ids are small: sharing one int object per value (ints are
# immutable) saves an allocation per element decoded. Built at import (about half a
# millisecond), so readers need no check or lock. The table is C memory holding its own
# reference to each int, never freed: no Python object is its storage, so nothing a user
# reaches (gc.get_referrers of a decoded int) can reorder or free what decode reads.
cdef PyObject** _small = <PyObject**>PyMem_RawMalloc(SMALL_INTS * sizeof(PyObject*))
if _small == NULL:
    raise MemoryError()
cdef Py_ssize_t _i
for _i in range(SMALL_INTS):
    _small[_i] = <PyObject*>PyLong_FromSsize_t(_i)  # the new reference is the table's
    if _small[_i] == NULL:
        raise MemoryError()


cdef PyObject** small_int_table() except NULL:
    """The int objects 0 .. SMALL_INTS-1 as an array of borrowed references, never
    replaced."""
    return _small


cdef object rd_int_array(Cursor* c, int width, int compact, int nullable, int arrays):
    cdef Py_ssize_t n = rd_array_len(c, compact, nullable, width)
    cdef Py_ssize_t i
    cdef const unsigned char* p
    cdef PyObject** ints = _small
    cdef list out
    if n < 0:
        return None
    p = c.buf + c.pos
    c.pos += n * width  # rd_array_len checked the n * width bytes are there
    if arrays:
        return wire_array(p, n, width)
    out = new_list(n)  # untracked while it has empty slots
    # One loop per width: the width tested once, not per element.
    if width == 4:
        for i in range(n):
            list_set_new(out, i, new_int(ints, <int32_t>load32(p + 4 * i)))
    elif width == 2:
        for i in range(n):
            list_set_new(out, i, new_int(ints, <int16_t>load16(p + 2 * i)))
    else:
        for i in range(n):
            list_set_new(out, i, new_int(ints, <int64_t>load64(p + 8 * i)))
    return out  # untracked, as the engine keeps the lists it decodes: see _read


cdef tuple _TASK_FIELDS = ("subtopology_id", "partition", "offset", "")

cdef object rd_task_offsets(Cursor* c, int compact, int nullable, int flexible,
                            Py_ssize_t min_size, object item):
    """A TaskOffset array (string, int32, int64, tags) as TaskOffsetColumns."""
    cdef Py_ssize_t n = rd_array_len(c, compact, nullable, min_size)
    cdef Py_ssize_t i = 0
    cdef int f = 0
    cdef Py_buffer pv, ov
    cdef int32_t* parts
    cdef int64_t* offsets
    cdef list ids
    cdef dict unknown = {}
    if n < 0:
        return None
    ids = [None] * n
    part_arr = new_array(n, 4)
    off_arr = new_array(n, 8)
    parts = <int32_t*>array_data(part_arr, &pv)
    try:
        offsets = <int64_t*>array_data(off_arr, &ov)
        try:
            for i in range(n):
                f = 0
                ids[i] = rd_compact_string(c) if compact else rd_string(c)
                f = 1
                parts[i] = rd_i32(c)
                f = 2
                offsets[i] = rd_i64(c)
                if flexible:
                    f = 3
                    tags = rd_unknown_tags(c)
                    if tags is not None:
                        unknown[i] = tags
        finally:
            PyBuffer_Release(&ov)
    except DecodeError as x:
        raise x.with_prefix(_TASK_FIELDS[f]).with_prefix(f"[{i}]") from None
    finally:
        PyBuffer_Release(&pv)
    return _columns.TaskOffsetColumns._of(ids, part_arr, off_arr, unknown, item)


cdef object rd_string_array(Cursor* c, int compact, int nullable):
    cdef Py_ssize_t n = rd_array_len(c, compact, nullable, 1 if compact else 2)
    cdef Py_ssize_t i = 0
    cdef list out
    if n < 0:
        return None
    out = [None] * n
    try:
        for i in range(n):
            out[i] = rd_compact_string(c) if compact else rd_string(c)
    except DecodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return out


cdef Py_ssize_t rd_tag_header(Cursor* c, Py_ssize_t last, Py_ssize_t* size) except -1:
    cdef Py_ssize_t start = c.pos
    cdef long long tag = rd_uvarint(c)
    cdef Py_ssize_t size_at
    if tag > 0x7FFFFFFF:  # a tag is an int32 (Kafka reads larger ones as negative)
        raise _e.tag_too_large(start, tag)
    if tag <= last:
        raise _e.tags_out_of_order(start, tag)
    size_at = c.pos
    size[0] = rd_uvarint(c)
    if size[0] > c.end - c.pos:
        raise_count(size_at, size[0], c.end - c.pos)
    return tag


cdef object rd_tags_slow(Cursor* c, long long n):
    cdef dict tags = {}
    cdef Py_ssize_t last = -1, size, k
    for k in range(n):
        last = rd_tag_header(c, last, &size)
        tags[last] = rd_raw(c, size)
    return tags


# ---------------------------------------------------------------- writing, cold

cdef int wr_bool(Buf* b, object v) except -1:
    if v is not True and v is not False:
        raise _e.wrong_type("bool", v)
    return wr_i8(b, 1 if v else 0)

cdef int wr_float64(Buf* b, object v) except -1:
    cdef double d = _rules.float_value(v)
    cdef uint64_t bits
    memcpy(&bits, &d, 8)
    return wr_i64(b, <int64_t>bits)

cdef int wr_uuid(Buf* b, object v) except -1:
    cdef bytes raw = _rules.uuid_bytes(v)  # exactly 16 bytes, checked
    return put_raw(b, <const char*>PyBytes_AS_STRING(raw), 16)

cdef bytes _as_bytes(object v):
    if type(v) is bytes:
        return v
    return _rules.raw_bytes(v)

cdef int wr_bytes(Buf* b, object v) except -1:
    cdef bytes raw = _as_bytes(v)
    wr_count(b, len(raw), 0)
    return put_raw(b, PyBytes_AS_STRING(raw), len(raw))

cdef int wr_nullable_bytes(Buf* b, object v) except -1:
    if v is None:
        return wr_i32(b, -1)
    return wr_bytes(b, v)

cdef int wr_compact_bytes(Buf* b, object v) except -1:
    cdef bytes raw = _as_bytes(v)
    wr_count(b, len(raw), 1)
    return put_raw(b, PyBytes_AS_STRING(raw), len(raw))

cdef int wr_compact_nullable_bytes(Buf* b, object v) except -1:
    if v is None:
        return wr_uvarint(b, 0)
    return wr_compact_bytes(b, v)


# ---- integer arrays from numpy, array.array or any 1-D integer buffer: read in place
# (any width, signedness, byte order and stride), range-checked and written big-endian
# in one pass. Anything else, and every error, goes through _bulk (canonical messages).

cdef enum:
    NATIVE, LITTLE, BIG

cdef struct IntBuf:
    const unsigned char* buf
    Py_ssize_t n, stride
    int size, is_signed, order


cdef bint _is_int_array(object items):
    """An array (numpy, array.array), read in bulk, as w_int_array in _pure decides;
    lists and tuples go the per-element way."""
    return hasattr(items, "__array__") or hasattr(items, "typecode")


cdef int open_ints(object items, Py_buffer* view, IntBuf* b) except -1:
    """Acquire a 1-D integer buffer; 0 (nothing held) when items has none we read."""
    cdef const char* f
    if not PyObject_CheckBuffer(items):
        return 0
    try:
        PyObject_GetBuffer(items, view, PyBUF_RECORDS_RO)
    except Exception:  # e.g. numpy datetimes: not an integer buffer, _bulk will say why
        return 0
    f = view.format
    if f == NULL:  # no format means unsigned bytes
        f = "B"
    b.order = NATIVE
    if f[0] == b"<":
        b.order = LITTLE
    elif f[0] == b">" or f[0] == b"!":
        b.order = BIG
    if f[0] in b"@=<>!":
        f += 1
    b.is_signed = f[0] in b"bhilqn"
    if (view.ndim != 1 or f[0] == 0 or f[1] != 0 or not (b.is_signed or f[0] in b"BHILQN")
            or view.itemsize not in (1, 2, 4, 8)):
        PyBuffer_Release(view)
        return 0
    b.buf = <const unsigned char*>view.buf
    b.n = view.shape[0]
    b.stride = view.strides[0]
    b.size = <int>view.itemsize
    return 1


cdef inline uint64_t load_raw(const unsigned char* p, int size, int order) noexcept nogil:
    cdef uint64_t u = 0
    cdef uint16_t u16
    cdef uint32_t u32
    cdef int k
    if order == NATIVE:
        if size == 1:
            return p[0]
        if size == 2:
            memcpy(&u16, p, 2)
            return u16
        if size == 4:
            memcpy(&u32, p, 4)
            return u32
        memcpy(&u, p, 8)
        return u
    if order == BIG:
        for k in range(size):
            u = (u << 8) | p[k]
    else:
        for k in range(size - 1, -1, -1):
            u = (u << 8) | p[k]
    return u


ctypedef fused native_int:
    int8_t
    uint8_t
    int16_t
    uint16_t
    int32_t
    uint32_t
    int64_t
    uint64_t


cdef Py_ssize_t put_native(const native_int* first, Py_ssize_t n, Py_ssize_t stride,
                           unsigned char* out, int width, int64_t lo, int64_t hi) noexcept nogil:
    """put_ints for a native-order source, one copy per element type: each loop is a
    plain load, the range check and a byte-swapping store."""
    cdef const unsigned char* p = <const unsigned char*>first
    cdef native_int v
    cdef Py_ssize_t i
    cdef bint unsigned = (native_int is uint8_t or native_int is uint16_t or
                          native_int is uint32_t or native_int is uint64_t)
    # a narrower type always fits (the compiler drops the check from that loop)
    cdef bint check = <int>sizeof(native_int) > width or (unsigned and <int>sizeof(native_int) == width)
    for i in range(n):
        memcpy(&v, p + i * stride, sizeof(native_int))
        if not check:
            pass
        elif native_int is uint8_t or native_int is uint16_t or native_int is uint32_t or native_int is uint64_t:
            if <uint64_t>v > <uint64_t>hi:
                return i
        elif v < lo or v > hi:
            return i
        if width == 4:
            store32(out + 4 * i, <uint32_t>v)
        elif width == 2:
            store16(out + 2 * i, <uint16_t>v)
        else:
            store64(out + 8 * i, <uint64_t>v)
    return -1


cdef Py_ssize_t put_ints(unsigned char* out, IntBuf* b, int width) noexcept nogil:
    """Write b's values big-endian, `width` bytes each; -1, or the index of the first
    value out of range (the output is then partly written)."""
    cdef Py_ssize_t i
    cdef const unsigned char* p = b.buf
    cdef uint64_t u
    cdef int64_t x
    cdef int64_t hi = (<int64_t>1 << (8 * width - 1)) - 1 if width < 8 else INT64_MAX
    cdef int64_t lo = -hi - 1
    if b.order == NATIVE:
        if b.size == 1:
            return put_native(<const int8_t*>p, b.n, b.stride, out, width, lo, hi) if b.is_signed else \
                put_native(<const uint8_t*>p, b.n, b.stride, out, width, lo, hi)
        if b.size == 2:
            return put_native(<const int16_t*>p, b.n, b.stride, out, width, lo, hi) if b.is_signed else \
                put_native(<const uint16_t*>p, b.n, b.stride, out, width, lo, hi)
        if b.size == 4:
            return put_native(<const int32_t*>p, b.n, b.stride, out, width, lo, hi) if b.is_signed else \
                put_native(<const uint32_t*>p, b.n, b.stride, out, width, lo, hi)
        return put_native(<const int64_t*>p, b.n, b.stride, out, width, lo, hi) if b.is_signed else \
            put_native(<const uint64_t*>p, b.n, b.stride, out, width, lo, hi)
    if b.is_signed and b.size == width and b.order == BIG and b.stride == width:
        memcpy(out, p, b.n * width)  # already the wire format
        return -1
    # the other byte order: byte by byte
    for i in range(b.n):
        u = load_raw(p + i * b.stride, b.size, b.order)
        if b.is_signed:
            if b.size == 1:
                x = <int8_t>u
            elif b.size == 2:
                x = <int16_t>u
            elif b.size == 4:
                x = <int32_t>u
            else:
                x = <int64_t>u
        elif u > <uint64_t>INT64_MAX:
            return i
        else:
            x = <int64_t>u
        if x < lo or x > hi:
            return i
        if width == 4:
            store32(out + 4 * i, <uint32_t>x)
        elif width == 2:
            store16(out + 2 * i, <uint16_t>x)
        else:
            store64(out + 8 * i, <uint64_t>x)
    return -1


cdef int wr_int_array(Buf* b, object items, int width, int compact, int nullable) except -1:
    cdef Py_ssize_t i = 0, n
    cdef unsigned char* p
    cdef int64_t x
    if items is None:
        wr_array_len(b, None, compact, nullable)
        return 0
    if not isinstance(items, (list, tuple)):
        if not _is_int_array(items):
            raise _e.wrong_type("list of int", items)
        return _wr_int_buffer(b, items, width, compact)
    n = wr_array_len(b, items, compact, nullable)
    p = room(b, mul_size(n, width))
    try:
        for i in range(n):
            x = fk_plain_int(items, i, n, width)  # _ft.h
            if x == INT64_MIN:  # not an exact int in range: the careful conversion
                item = item_at(items, i, n)
                x = as_i32(item) if width == 4 else as_i16(item) if width == 2 else as_i64(item)
            if width == 4:
                store32(p + 4 * i, <uint32_t>x)
            elif width == 2:
                store16(p + 2 * i, <uint16_t>x)
            else:
                store64(p + 8 * i, <uint64_t>x)
    except EncodeError as err:
        raise err.with_prefix(f"[{i}]") from None
    b.p = p + n * width
    return 0


cdef int _wr_int_buffer(Buf* b, object items, int width, int compact) except -1:
    """An integer buffer, its length its shape (whatever the object claims): the count,
    then the room it takes (checked before any byte is made), then the values."""
    cdef Py_buffer view
    cdef IntBuf ints
    cdef Py_ssize_t bad
    cdef unsigned char* p
    if not open_ints(items, &view, &ints):
        # no buffer we read (or an unusual format): numpy checks shape and type
        items = _bulk.as_array(items, _BULK_KIND[width])
        if not open_ints(items, &view, &ints):
            mul_size(len(items), width)  # too large to convert: the error, before a copy
            items = _bulk.native(items, _BULK_KIND[width])
            open_ints(items, &view, &ints)
    try:
        wr_count(b, ints.n, compact)
        p = room(b, mul_size(ints.n, width))
        bad = put_ints(p, &ints, width)
    finally:
        PyBuffer_Release(&view)
    if bad >= 0:
        _bulk.as_int_array(items, _BULK_KIND[width])  # raises the error for the first bad value
        raise_changed()
    b.p = p + ints.n * width
    return 0


# ---- TaskOffsetColumns, written in the layout of a TaskOffset array

cdef int wr_task_offsets(Buf* b, object cols, int compact, int flexible) except -1:
    cdef Py_ssize_t i = 0, n
    cdef Py_buffer pv, ov
    cdef const int32_t* parts
    cdef const int64_t* offsets
    # ids stay the caller's list; the columns are fresh arrays of its length
    ids, part_arr, off_arr, tags = _bulk.task_columns(cols)
    n = seq_len(ids)
    wr_count(b, n, compact)
    PyObject_GetBuffer(part_arr, &pv, PyBUF_SIMPLE)
    try:
        PyObject_GetBuffer(off_arr, &ov, PyBUF_SIMPLE)
        parts = <const int32_t*>pv.buf
        offsets = <const int64_t*>ov.buf
        try:
            if pv.len != 4 * n or ov.len != 8 * n:  # the memory read is what was measured
                raise_changed()
            for i in range(n):
                if compact:
                    wr_compact_string(b, item_at(ids, i, n))
                else:
                    wr_string(b, item_at(ids, i, n))
                wr_i32(b, parts[i])
                wr_i64(b, offsets[i])
                if flexible:
                    wr_tags(b, None, tags.get(i) if tags else None)
        finally:
            PyBuffer_Release(&ov)
    except EncodeError as x:
        raise _task_error(x, i) from None
    finally:
        PyBuffer_Release(&pv)
    return 0


cdef object _task_error(object x, Py_ssize_t i):
    if not x.path:  # the string; the tags name themselves
        x = x.with_prefix("subtopology_id")
    return x.with_prefix(f"[{i}]")


cdef int wr_string_array(Buf* b, object items, int compact, int nullable) except -1:
    cdef Py_ssize_t i = 0
    cdef Py_ssize_t n = wr_array_len(b, items, compact, nullable)
    try:
        for i in range(n):
            if compact:
                wr_compact_string(b, item_at(items, i, n))
            else:
                wr_string(b, item_at(items, i, n))
    except EncodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return 0


cdef int wr_tags_slow(Buf* b, object known, object unknown) except -1:
    fields = merge_tags(known, unknown)
    wr_uvarint(b, len(fields))
    for tag, payload in fields:
        wr_uvarint(b, tag)
        wr_uvarint(b, len(payload))
        put_raw(b, PyBytes_AS_STRING(payload), len(payload))
    return 0


# ---------------------------------------------------------------- primitive API
# encode(type, value) -> bytes and decode(type, data, offset=0) -> (value, end), the same
# in _pure; used by the primitive test vectors and by tools.

cdef int _write(str t, object v, Buf* b) except -1:
    if t == "int8":
        return wr_i8(b, as_i8(v))
    if t == "int16":
        return wr_i16(b, as_i16(v))
    if t == "int32":
        return wr_i32(b, as_i32(v))
    if t == "int64":
        return wr_i64(b, as_i64(v))
    if t == "uint16":
        return wr_u16(b, as_u16(v))
    if t == "uint32":
        return wr_u32(b, as_u32(v))
    if t == "float64":
        return wr_float64(b, v)
    if t == "bool":
        return wr_bool(b, v)
    if t == "uuid":
        return wr_uuid(b, v)
    if t == "uvarint":
        if type(v) is not int or not 0 <= v <= 0xFFFFFFFF:
            raise _e.out_of_range("unsigned varint", v)
        return wr_uvarint(b, v)
    if t == "string":
        return wr_string(b, v)
    if t == "nullable_string":
        return wr_nullable_string(b, v)
    if t == "compact_string":
        return wr_compact_string(b, v)
    if t == "compact_nullable_string":
        return wr_compact_nullable_string(b, v)
    if t == "bytes":
        return wr_bytes(b, v)
    if t == "nullable_bytes":
        return wr_nullable_bytes(b, v)
    if t == "compact_bytes":
        return wr_compact_bytes(b, v)
    if t == "compact_nullable_bytes":
        return wr_compact_nullable_bytes(b, v)
    if t == "tagged_fields":
        return wr_tags(b, None, v)
    compact, nullable, elem = _rules.parse_array_type(t)
    if elem == "string":
        return wr_string_array(b, v, compact, nullable)
    return wr_int_array(b, v, _wire.WIDTH[elem], compact, nullable)


def encode(str type_name, value):
    """Encode one primitive value of `type_name` (see _rules.PRIMITIVE_TYPES)."""
    cdef Buf b
    _rules.check_type_name(type_name)
    open_buf(&b, 64)
    try:
        _write(type_name, value, &b)
        return close_buf(&b)
    finally:
        discard_buf(&b)


cdef object _read(str t, Cursor* c):
    if t == "int8":
        return rd_i8(c)
    if t == "int16":
        return rd_i16(c)
    if t == "int32":
        return rd_i32(c)
    if t == "int64":
        return rd_i64(c)
    if t == "uint16":
        return rd_u16(c)
    if t == "uint32":
        return rd_u32(c)
    if t == "float64":
        return rd_float64(c)
    if t == "bool":
        return rd_bool(c)
    if t == "uuid":
        return rd_uuid(c)
    if t == "uvarint":
        return rd_uvarint(c)
    if t == "string":
        return rd_string(c)
    if t == "nullable_string":
        return rd_nullable_string(c)
    if t == "compact_string":
        return rd_compact_string(c)
    if t == "compact_nullable_string":
        return rd_compact_nullable_string(c)
    if t == "bytes":
        return rd_bytes(c)
    if t == "nullable_bytes":
        return rd_nullable_bytes(c)
    if t == "compact_bytes":
        return rd_compact_bytes(c)
    if t == "compact_nullable_bytes":
        return rd_compact_nullable_bytes(c)
    if t == "tagged_fields":
        return rd_unknown_tags(c)
    compact, nullable, elem = _rules.parse_array_type(t)
    if elem == "string":
        return rd_string_array(c, compact, nullable)
    items = rd_int_array(c, _wire.WIDTH[elem], compact, nullable, 0)
    if items is not None:
        PyObject_GC_Track(<PyObject*>items)  # whole: an ordinary list, as the pure codec's
    return items


def decode(str type_name, data, offset=0):
    """Decode one primitive value at offset; returns (value, end offset)."""
    _rules.check_type_name(type_name)
    cdef Py_buffer view
    cdef Cursor c
    cdef int held = open_input(&c, data, &view)
    try:
        c.pos = start_at(offset, c.end)
        value = _read(type_name, &c)
    finally:
        if held:
            PyBuffer_Release(&view)
    return value, c.pos

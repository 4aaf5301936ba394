# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True
"""The compiled kernel of fastkwire.records, the twin of _records_python.py: the records
inside one batch read (as objects or columns) and written, and CRC32C.

Every read checks the bytes left before it reads or allocates; a count is checked
against the bytes that could hold it before a list or array is made. The checks and
their order are the pure kernel's, so both raise the same DecodeError on the same bytes.
"""
cimport cython
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.list cimport PyList_New, PyList_SET_ITEM
from cpython.tuple cimport PyTuple_New, PyTuple_SET_ITEM
from cpython.ref cimport PyObject, Py_INCREF, Py_XDECREF
from cpython.list cimport PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT64_MAX, INT64_MIN
from libc.string cimport memcmp, memcpy, memmove, memset

from fastkwire import errors as _e
from fastkwire._records_model import BinaryColumn, HeaderColumns, Record, RecordColumns
from fastkwire import _records_python
from fastkwire.errors import DecodeError


cdef extern from "_crc32c.h":
    void fkw_crc32c_setup()
    uint32_t fkw_crc32c(uint32_t crc, const unsigned char* p, size_t n) nogil
    uint32_t fkw_crc32c_table(uint32_t crc, const unsigned char* p, size_t n) nogil
    int fkw_crc_hw_on


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject* (*tp_alloc)(PyTypeObject*, Py_ssize_t)
    ctypedef struct PyMemberDef:
        Py_ssize_t offset
    ctypedef struct PyMemberDescrObject:
        PyMemberDef* d_member
    void PyObject_GC_UnTrack(void* o)
    void PyObject_GC_Track(void* o)
    object PyUnicode_DecodeUTF8(const char* s, Py_ssize_t size, const char* errors)
    const char* PyUnicode_AsUTF8AndSize(PyObject* s, Py_ssize_t* size)
    bint PyBytes_CheckExact(PyObject* o)
    bint PyUnicode_CheckExact(PyObject* o)
    bint PyLong_CheckExact(PyObject* o)
    bint PyList_CheckExact(PyObject* o)
    bint PyTuple_CheckExact(PyObject* o)
    long long PyLong_AsLongLongAndOverflow(PyObject* o, int* overflow)
    char* PyBytes_AS_STRING_P "PyBytes_AS_STRING"(PyObject* o)
    PyObject* PyBytes_New "PyBytes_FromStringAndSize"(const char* s, Py_ssize_t n)
    int _PyBytes_Resize(PyObject** o, Py_ssize_t n)
    void Py_SET_SIZE(PyObject* o, Py_ssize_t n)
    Py_ssize_t PyBytes_GET_SIZE_P "PyBytes_GET_SIZE"(PyObject* o)
    void PyErr_Clear()
    PyObject* Py_None


fkw_crc32c_setup()

DEF MIN_RECORD = 7
DEF MIN_HEADER = 2
DEF HEADER = 61  # a batch's header, before its records


cdef inline object crc_input(object data, object crc, uint32_t* start):
    """data as something with a simple buffer, and crc as a uint32: the common forms
    taken as they are, anything else through the pure kernel's checks (one contract,
    the same errors)."""
    cdef int overflow = 0
    cdef long long c
    if PyLong_CheckExact(<PyObject*>crc):
        c = PyLong_AsLongLongAndOverflow(<PyObject*>crc, &overflow)
        if not overflow and 0 <= c <= 0xFFFFFFFF and (
                type(data) is bytes or type(data) is bytearray
                or (type(data) is memoryview and (<memoryview>data).c_contiguous)):
            start[0] = <uint32_t>c
            return data
    data, crc = _records_python.crc_args(data, crc)
    start[0] = crc
    return data


def crc32c(data, crc=0):
    """CRC32C of a C-contiguous bytes-like object (the CPU's instruction where it has
    one), continuing from `crc` (an int in 0-4294967295)."""
    cdef Py_buffer view
    cdef uint32_t c
    data = crc_input(data, crc, &c)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        with nogil:
            c = fkw_crc32c(c, <const unsigned char*>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return c


def crc32c_portable(data, crc=0):
    """CRC32C by the slicing-by-8 table, whatever the CPU (to test one against the other)."""
    cdef Py_buffer view
    cdef uint32_t c
    data = crc_input(data, crc, &c)
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        c = fkw_crc32c_table(c, <const unsigned char*>view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return c


def crc32c_hardware():
    """True when crc32c uses the CPU's instruction."""
    return bool(fkw_crc_hw_on)


# ---------------------------------------------------------------- Record objects

cdef Py_ssize_t slot_offset(object cls, str name) except -1:
    return (<PyMemberDescrObject*><PyObject*>cls.__dict__[name]).d_member.offset

cdef PyTypeObject* RECORD_TYPE = <PyTypeObject*><PyObject*>Record
cdef Py_ssize_t S_OFFSET = slot_offset(Record, "offset")
cdef Py_ssize_t S_TIMESTAMP = slot_offset(Record, "timestamp")
cdef Py_ssize_t S_KEY = slot_offset(Record, "key")
cdef Py_ssize_t S_VALUE = slot_offset(Record, "value")
cdef Py_ssize_t S_HEADERS = slot_offset(Record, "headers")

cdef inline void put(PyObject* o, Py_ssize_t offset, object v) noexcept:
    # A fresh object: its slots are NULL.
    Py_INCREF(v)
    (<PyObject**>(<char*>o + offset))[0] = <PyObject*>v

cdef extern from *:
    """
    #define fkw_gc_new(tp) ((PyObject*)PyObject_GC_New(PyObject, (tp)))
    """
    PyObject* gc_new "fkw_gc_new"(PyTypeObject* tp)

# A Record's memory is its header and its five slots, nothing else (no __dict__, no
# __weakref__), so a record can be made without zeroing or the collector's tracking:
# every slot is set before anything sees it.
cdef bint RECORD_BARE = (Record.__basicsize__ == object.__basicsize__ + 5 * sizeof(PyObject*)
                         and Record.__itemsize__ == 0 and Record.__dictoffset__ == 0
                         and Record.__weakrefoffset__ == 0)


cdef inline object new_record(object offset, object timestamp, object key, object value,
                              object headers):
    cdef PyObject* o
    if RECORD_BARE:
        o = gc_new(RECORD_TYPE)  # untracked
    else:
        o = RECORD_TYPE.tp_alloc(RECORD_TYPE, 0)
    if o == NULL:
        raise MemoryError()
    # Nothing a decoded record holds can make a cycle through it (as the message
    # engine's objects): the collector need not walk ten thousand of them.
    if not RECORD_BARE:
        PyObject_GC_UnTrack(o)
    put(o, S_OFFSET, offset)
    put(o, S_TIMESTAMP, timestamp)
    put(o, S_KEY, key)
    put(o, S_VALUE, value)
    put(o, S_HEADERS, headers)
    r = <object>o
    Py_XDECREF(o)  # <object> took its own reference
    return r


# ---------------------------------------------------------------- reading

cdef struct Cur:
    const unsigned char* b
    Py_ssize_t pos
    Py_ssize_t end


cdef int raise_truncated(Py_ssize_t pos, Py_ssize_t need, Py_ssize_t left) except -1:
    raise _e.truncated(pos, need, left)

cdef int raise_varint(Py_ssize_t start, int max_bytes) except -1:
    raise _e.varint_too_long(start, max_bytes)

cdef int raise_reason(str reason, Py_ssize_t pos) except -1:
    raise DecodeError(reason, pos)


cdef inline int64_t rd_varint(Cur* c, Py_ssize_t end, int max_bytes) except? -1:
    """A zigzag varint of at most max_bytes (5: int32, 10: int64) ending before `end`."""
    cdef uint64_t x, y
    if end - c.pos >= 2:  # the usual one and two bytes, without the loop
        x = c.b[c.pos]
        if x < 0x80:
            c.pos += 1
            return <int64_t>(x >> 1) ^ -<int64_t>(x & 1)
        y = c.b[c.pos + 1]
        if y < 0x80:
            c.pos += 2
            x = (x & 0x7F) | (y << 7)
            return <int64_t>(x >> 1) ^ -<int64_t>(x & 1)
    return rd_varint_loop(c, end, max_bytes)


cdef int64_t rd_varint_loop(Cur* c, Py_ssize_t end, int max_bytes) except? -1:
    cdef Py_ssize_t start = c.pos, p = c.pos
    cdef uint64_t result = 0
    cdef uint64_t part
    cdef int shift = 0
    cdef bint over = False
    cdef unsigned char x
    while True:
        if p >= end:
            raise_truncated(p, 1, 0)
        x = c.b[p]
        p += 1
        part = x & 0x7F
        if shift == 63 and part > 1:
            over = True
        result |= part << shift
        if not (x & 0x80):
            break
        shift += 7
        if p - start >= max_bytes:
            raise_varint(start, max_bytes)
    if over or (max_bytes == 5 and (result >> 32)):
        raise_varint(start, max_bytes)
    c.pos = p
    return <int64_t>(result >> 1) ^ -<int64_t>(result & 1)


cdef inline int64_t rd_len(Cur* c, Py_ssize_t end) except -2:
    """A length (-1: null) whose bytes are checked to follow within `end`."""
    cdef uint64_t x
    cdef int64_t n
    if end - c.pos >= 1:  # the usual one-byte length that fits, without the checks below
        x = c.b[c.pos]
        if x < 0x80:
            n = <int64_t>(x >> 1) ^ -<int64_t>(x & 1)
            if n >= -1 and n <= end - c.pos - 1:
                c.pos += 1
                return n
    return rd_len_slow(c, end)


cdef int64_t rd_len_slow(Cur* c, Py_ssize_t end) except -2:
    cdef Py_ssize_t start = c.pos
    cdef int64_t n = rd_varint(c, end, 5)
    if n < 0:
        if n != -1:
            raise_reason(f"invalid length {n}", start)
        return -1
    if n > end - c.pos:
        raise_truncated(c.pos, n, end - c.pos)
    return n


cdef inline bint same_bytes(const unsigned char* p, const unsigned char* q, int64_t n) noexcept:
    """n bytes equal; the first compared in place (header keys are often one byte)."""
    return n == 0 or (p[0] == q[0] and (n == 1 or memcmp(p + 1, q + 1, n - 1) == 0))


cdef inline object take_bytes(Cur* c, int64_t n):
    if n < 0:
        return None
    v = PyBytes_FromStringAndSize(<const char*>c.b + c.pos, n)
    c.pos += n
    return v


cdef inline bint in_int64(int64_t a, int64_t b) noexcept nogil:
    """a + b stays within int64."""
    return not ((b > 0 and a > INT64_MAX - b) or (b < 0 and a < INT64_MIN - b))


cdef struct Bin:
    # A binary column being filled: values back to back, n + 1 offsets, null flags.
    unsigned char* data
    Py_ssize_t used
    Py_ssize_t cap  # the bytes data can take
    int32_t* offs
    uint8_t* nulls


cdef int raise_changed() except -1:
    raise RuntimeError("the records' bytes changed while they were read")


cdef inline int bin_put(Bin* b, Py_ssize_t row, Cur* c, int64_t n, bint measure) except -1:
    """Value `row` of a column: the n bytes at the cursor (n < 0: null); when measuring,
    only counted. The room was measured on these bytes, but code run since (growing
    the arrays) could have changed a buffer that is not bytes: checked, never trusted."""
    if measure:
        if n > 0:
            b.used += n
            c.pos += n
        return 0
    if n > b.cap - b.used:
        raise_changed()
    if n < 0:
        b.nulls[row] = 1
    else:
        b.nulls[row] = 0
        memcpy(b.data + b.used, c.b + c.pos, n)
        b.used += n
        c.pos += n
    b.offs[row + 1] = <int32_t>b.used
    return 0


cdef int bin_put_bytes(Bin* b, Py_ssize_t row, bytes v) except -1:
    """Value `row` of a column: v's bytes, or null for None."""
    cdef Py_ssize_t n
    if v is None:
        b.nulls[row] = 1
    else:
        n = len(v)
        if n > b.cap - b.used:
            raise_changed()
        b.nulls[row] = 0
        memcpy(b.data + b.used, PyBytes_AS_STRING(v), n)
        b.used += n
    b.offs[row + 1] = <int32_t>b.used
    return 0


cdef struct Cols:
    int64_t* offset
    int64_t* timestamp
    Bin key
    Bin value
    Bin hkey
    Bin hvalue
    int32_t* hoffs
    Py_ssize_t hrows
    Py_ssize_t hrow_end  # the header rows the arrays can take
    bint measure  # count the bytes and header rows only (the arrays are not touched)


def decode_records(data, Py_ssize_t pos, Py_ssize_t end, long long count,
                   int64_t base_offset, int64_t base_timestamp, log_append_time):
    """The `count` records in data[pos:end] as Record objects (see _records_python)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if end > view.len or pos < 0 or pos > end:
            raise ValueError("records section outside the data")
        return _decode(<const unsigned char*>view.buf, pos, end, count, base_offset,
                       base_timestamp, log_append_time, NULL)
    finally:
        PyBuffer_Release(&view)


cdef object _decode(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, long long count,
                    int64_t base_offset, int64_t base_timestamp, object log_append_time,
                    Cols* cols):
    """One loop for both forms: Record objects (cols NULL, returns the list) or columns
    (written into *cols, returns None)."""
    if count < 0 or count > (end - pos) // MIN_RECORD:
        raise _e.count_exceeds(pos, count, end - pos)
    cdef Cur c
    c.b = b
    c.pos = pos
    c.end = end
    cdef Py_ssize_t i, j, start, rend, kpos, hpos
    cdef int64_t length, ts_delta, offset_delta, n, klen, vlen
    cdef bint fixed_ts = log_append_time is not None
    cdef int64_t fixed = log_append_time if fixed_ts else 0
    cdef list out = PyList_New(count) if cols == NULL else None
    if out is not None:
        # Out of the collector's young generation while it fills (each collection the
        # record objects trigger would walk it), back in when done.
        PyObject_GC_UnTrack(<PyObject*>out)
    cdef list headers = None
    cdef tuple pair
    # Header keys repeat from record to record: the last one's str is reused when the
    # bytes are equal, saving a decode and an object per header.
    cdef const unsigned char* last_key = NULL
    cdef Py_ssize_t last_len = -1
    cdef object last_str = None
    cdef tuple last_pair = None
    cdef object last_pair_key = None
    cdef int64_t last_vlen = -2
    cdef const unsigned char* last_value = NULL
    # Records of a batch often share a timestamp (all produced in one millisecond): the
    # last one's int is reused while the delta repeats.
    cdef object stamp = log_append_time
    cdef int64_t stamp_delta = 0
    cdef bint have_stamp = fixed_ts
    for i in range(count):
        start = c.pos
        length = rd_varint(&c, end, 5)
        if length < MIN_RECORD - 1 or length > end - c.pos:
            if length > end - c.pos:
                raise_reason(f"record length {length} exceeds the {end - c.pos} bytes left", start)
            raise_reason(f"invalid record length {length}", start)
        rend = c.pos + length
        c.pos += 1  # attributes: unused
        ts_delta = rd_varint(&c, rend, 10)
        offset_delta = rd_varint(&c, rend, 5)
        if cols == NULL:
            klen = rd_len(&c, rend)
            key = take_bytes(&c, klen)
            vlen = rd_len(&c, rend)
            value = take_bytes(&c, vlen)
        else:
            klen = rd_len(&c, rend)
            bin_put(&cols.key, i, &c, klen, cols.measure)
            vlen = rd_len(&c, rend)
            bin_put(&cols.value, i, &c, vlen, cols.measure)
        hpos = c.pos
        n = rd_varint(&c, rend, 5)
        if n < 0 or n > (rend - c.pos) // MIN_HEADER:
            raise _e.count_exceeds(hpos, n, rend - c.pos)
        if cols == NULL:
            headers = PyList_New(n)
            # Until every item is set, the collector (which the tuples below may start)
            # must not see it: a gc callback walking gc.get_objects() would meet NULLs.
            # Nothing a record's headers hold can make a cycle, so it stays untracked.
            PyObject_GC_UnTrack(<PyObject*>headers)
        for j in range(n):
            kpos = c.pos
            klen = rd_varint(&c, rend, 5)
            if klen < 0:
                if klen != -1:
                    raise_reason(f"invalid length {klen}", kpos)
                raise_reason("null header key", kpos)
            if klen > rend - c.pos:
                raise_truncated(c.pos, klen, rend - c.pos)
            if klen == last_len and same_bytes(b + c.pos, last_key, klen):
                hkey = last_str
            else:
                try:
                    hkey = PyUnicode_DecodeUTF8(<const char*>b + c.pos, klen, NULL)
                except UnicodeDecodeError:
                    raise _e.invalid_utf8(kpos) from None
                last_key, last_len, last_str = b + c.pos, klen, hkey
            if cols == NULL:
                c.pos += klen
                vlen = rd_len(&c, rend)
                # A header equal to the last one made (same key object, same value bytes)
                # is the same tuple: it cannot change, and constant headers are common.
                if hkey is last_pair_key and vlen == last_vlen and (
                        vlen <= 0 or same_bytes(b + c.pos, last_value, vlen)):
                    c.pos += max(vlen, 0)
                    pair = last_pair
                else:
                    last_value = b + c.pos
                    hvalue = take_bytes(&c, vlen)
                    pair = PyTuple_New(2)
                    Py_INCREF(hkey)
                    PyTuple_SET_ITEM(pair, 0, hkey)
                    Py_INCREF(hvalue)
                    PyTuple_SET_ITEM(pair, 1, hvalue)
                    PyObject_GC_UnTrack(<PyObject*>pair)  # a str and bytes: never in a cycle
                    last_pair, last_pair_key, last_vlen = pair, hkey, vlen
                Py_INCREF(pair)
                PyList_SET_ITEM(headers, j, pair)
            else:
                if cols.hrows >= cols.hrow_end and not cols.measure:
                    raise_changed()
                bin_put(&cols.hkey, cols.hrows, &c, klen, cols.measure)
                vlen = rd_len(&c, rend)
                bin_put(&cols.hvalue, cols.hrows, &c, vlen, cols.measure)
                cols.hrows += 1
        if c.pos != rend:
            raise_reason(f"record length {length} does not match its fields", start)
        if not fixed_ts and not in_int64(base_timestamp, ts_delta):
            raise_reason("timestamp out of the int64 range", start)
        if not in_int64(base_offset, offset_delta):
            raise_reason("offset out of the int64 range", start)
        if cols != NULL:
            if not cols.measure:
                cols.offset[i] = base_offset + offset_delta
                cols.timestamp[i] = fixed if fixed_ts else base_timestamp + ts_delta
                cols.hoffs[i + 1] = <int32_t>cols.hrows
            continue
        if not have_stamp or (not fixed_ts and ts_delta != stamp_delta):
            stamp, stamp_delta, have_stamp = base_timestamp + ts_delta, ts_delta, True
        r = new_record(base_offset + offset_delta, stamp, key, value, headers)
        Py_INCREF(r)
        PyList_SET_ITEM(out, i, r)
    if c.pos != end:
        raise_reason(f"{end - c.pos} bytes after the batch's {count} records", c.pos)
    if out is not None:
        PyObject_GC_Track(<PyObject*>out)
    return out


# ---------------------------------------------------------------- the columns' fast path
#
# Valid batches take this path: plain pointers and inline varints, no error texts. Any
# doubt (a bad varint, a length past the bytes, a non-ASCII header key that is not the
# last one seen, ...) makes it give up, and the general loop (_decode) reads the batch
# again and raises the error, word for word as the pure kernel does.

cdef inline bint vint(const unsigned char** pp, const unsigned char* e, int64_t* out,
                      int max_bytes) noexcept nogil:
    """A zigzag varint of at most max_bytes before `e`; False when there is none."""
    cdef const unsigned char* p = pp[0]
    cdef uint64_t x, result = 0
    cdef int shift = 0
    if p < e and p[0] < 0x80:
        x = p[0]
        pp[0] = p + 1
        out[0] = <int64_t>(x >> 1) ^ -<int64_t>(x & 1)
        return True
    while True:
        if p >= e or shift >= 7 * max_bytes:
            return False
        x = p[0]
        p += 1
        if shift == 63 and (x & 0x7F) > 1:
            return False
        result |= (x & 0x7F) << shift
        if not (x & 0x80):
            break
        shift += 7
    if max_bytes == 5 and (result >> 32):
        return False
    pp[0] = p
    out[0] = <int64_t>(result >> 1) ^ -<int64_t>(result & 1)
    return True


cdef inline bint take_len(const unsigned char** pp, const unsigned char* e, int64_t* n,
                          bint nullable) noexcept nogil:
    if not vint(pp, e, n, 5):
        return False
    if n[0] < 0:
        return nullable and n[0] == -1
    return n[0] <= e - pp[0]


cdef inline void col_put(Bin* b, Py_ssize_t row, const unsigned char** pp, int64_t n) noexcept nogil:
    if n < 0:
        b.nulls[row] = 1
    else:
        b.nulls[row] = 0
        copy_bytes(b.data + b.used, pp[0], n)
        b.used += n
        pp[0] += n
    b.offs[row + 1] = <int32_t>b.used


cdef inline bint ascii(const unsigned char* p, int64_t n) noexcept nogil:
    cdef int64_t i
    cdef unsigned char bits = 0
    for i in range(n):  # no early exit: a loop the compiler can vectorize
        bits |= p[i]
    return bits < 0x80


cdef bint _columns_fast(const unsigned char* b, Py_ssize_t pos, Py_ssize_t end, long long count,
                        int64_t base_offset, int64_t base_timestamp, bint fixed_ts,
                        int64_t fixed, Cols* cols) noexcept nogil:
    """Fill *cols from valid records; False (cols half filled) at the first doubt."""
    cdef const unsigned char* p = b + pos
    cdef const unsigned char* e = b + end
    cdef const unsigned char* re
    cdef int64_t length, ts_delta, offset_delta, n, hn
    cdef long long i, j
    if count < 0 or count > (end - pos) // MIN_RECORD:
        return False
    for i in range(count):
        if not vint(&p, e, &length, 5) or length < MIN_RECORD - 1 or length > e - p:
            return False
        re = p + length
        p += 1
        if not vint(&p, re, &ts_delta, 10) or not vint(&p, re, &offset_delta, 5):
            return False
        if not take_len(&p, re, &n, True) or n > cols.key.cap - cols.key.used:
            return False
        col_put(&cols.key, i, &p, n)
        if not take_len(&p, re, &n, True) or n > cols.value.cap - cols.value.used:
            return False
        col_put(&cols.value, i, &p, n)
        if not vint(&p, re, &hn, 5) or hn < 0 or hn > (re - p) // MIN_HEADER:
            return False
        for j in range(hn):
            if cols.hrows >= cols.hrow_end:
                return False
            if not take_len(&p, re, &n, False) or not ascii(p, n) \
                    or n > cols.hkey.cap - cols.hkey.used:
                return False
            col_put(&cols.hkey, cols.hrows, &p, n)
            if not take_len(&p, re, &n, True) or n > cols.hvalue.cap - cols.hvalue.used:
                return False
            col_put(&cols.hvalue, cols.hrows, &p, n)
            cols.hrows += 1
        if p != re or not in_int64(base_offset, offset_delta):
            return False
        if not fixed_ts and not in_int64(base_timestamp, ts_delta):
            return False
        cols.offset[i] = base_offset + offset_delta
        cols.timestamp[i] = fixed if fixed_ts else base_timestamp + ts_delta
        cols.hoffs[i + 1] = <int32_t>cols.hrows
    return p == e


def varint_walk(data, Py_ssize_t pos, Py_ssize_t end, long long count):
    """Walk the records' varints and skip their bytes, making nothing, with the readers
    of the columns' fast path: the floor that benchmarks/bench_records.py measures
    read_columns against. Returns the bytes walked, or -1 at a bad varint."""
    cdef Py_buffer view
    cdef const unsigned char* p
    cdef const unsigned char* e
    cdef long long i
    cdef int64_t n, j, hn
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if end > view.len or pos < 0 or pos > end:
            raise ValueError("records section outside the data")
        p = <const unsigned char*>view.buf + pos
        e = <const unsigned char*>view.buf + end
        for i in range(count):
            if not vint(&p, e, &n, 5) or p + 1 > e:
                return -1
            p += 1
            if not vint(&p, e, &n, 10) or not vint(&p, e, &n, 5):
                return -1
            for j in range(2):
                if not take_len(&p, e, &n, True):
                    return -1
                p += max(n, 0)
            if not vint(&p, e, &hn, 5):
                return -1
            for j in range(2 * hn):
                if not take_len(&p, e, &n, True):
                    return -1
                p += max(n, 0)
        return p - (<const unsigned char*>view.buf + pos)
    finally:
        PyBuffer_Release(&view)


cdef object _np = None


cdef inline (Py_ssize_t, Py_ssize_t) header_room(Py_ssize_t rows, Py_ssize_t free):
    """A first guess of the header rows and of the bytes of each header column that a
    batch of `rows` records holds, `free` bytes past the records' least: two headers of
    up to 16 + 16 bytes per record (never more than the most those bytes could hold)."""
    return min(2 * rows, free // MIN_HEADER), min(32 * rows, free)


cdef void* array_ptr(object arr) except NULL:
    cdef Py_buffer view
    cdef void* p
    PyObject_GetBuffer(arr, &view, PyBUF_SIMPLE)
    p = view.buf
    PyBuffer_Release(&view)  # the array keeps its memory; only a regrow replaces it
    return p


# The arrays of a ColumnsBuilder, in this order: per record (offset, timestamp, key
# nulls, value nulls; key offsets, value offsets and header offsets have one more),
# bytes (key, value, header key, header value data), per header row (nulls; offsets one more).
cdef enum:
    A_OFFSET, A_TIMESTAMP, A_KEY_DATA, A_KEY_OFFS, A_KEY_NULLS, A_VALUE_DATA, A_VALUE_OFFS,
    A_VALUE_NULLS, A_HKEY_DATA, A_HKEY_OFFS, A_HKEY_NULLS, A_HVALUE_DATA, A_HVALUE_OFFS,
    A_HVALUE_NULLS, A_HOFFS, N_ARRAYS


# Their element types (offsets are the int32 ones); as numpy dtypes, with their item
# sizes, once numpy is imported.
cdef tuple DTYPE_NAMES = ("int64", "int64", "uint8", "int32", "bool", "uint8", "int32", "bool",
                           "uint8", "int32", "bool", "uint8", "int32", "bool", "int32")
cdef tuple _DTYPES = None
cdef Py_ssize_t ITEM_SIZES[N_ARRAYS]


cdef class ColumnsBuilder:
    """Columns filled batch after batch (read_columns): arrays sized for the most the
    bytes of a batch could need, doubled when the next batch needs more, and cut to what
    was used (as views: the untouched pages cost address space, not memory) at the end."""
    cdef list arrays
    cdef void* ptrs[N_ARRAYS]  # where each array's items are (NULL: none yet)
    cdef Cols cols
    cdef Py_ssize_t rows, row_cap, hrow_cap
    cdef Py_ssize_t data_cap[4]

    def __cinit__(self):
        global _np, _DTYPES
        cdef int i
        if _np is None:
            import numpy
            _DTYPES = tuple(numpy.dtype(name) for name in DTYPE_NAMES)
            for i in range(N_ARRAYS):
                ITEM_SIZES[i] = _DTYPES[i].itemsize
            _np = numpy
        self.arrays = [None] * N_ARRAYS
        memset(self.ptrs, 0, sizeof(self.ptrs))
        self.rows = self.row_cap = self.hrow_cap = 0
        self.data_cap[0] = self.data_cap[1] = self.data_cap[2] = self.data_cap[3] = -1
        self.cols.key.used = self.cols.value.used = self.cols.hkey.used = self.cols.hvalue.used = 0
        self.cols.hrows = 0

    cdef int _grow(self, Py_ssize_t rows, Py_ssize_t hrows) except -1:
        """Make room for `rows` records and `hrows` header rows (all their arrays)."""
        cdef Py_ssize_t row_cap = max(rows, 2 * self.row_cap)
        cdef Py_ssize_t hrow_cap = max(hrows, 2 * self.hrow_cap)
        grow_rows = rows > self.row_cap or self.arrays[A_OFFSET] is None
        grow_hrows = hrows > self.hrow_cap or self.arrays[A_HKEY_OFFS] is None
        if grow_rows:
            for i, extra in ((A_OFFSET, 0), (A_TIMESTAMP, 0), (A_KEY_OFFS, 1), (A_KEY_NULLS, 0),
                             (A_VALUE_OFFS, 1), (A_VALUE_NULLS, 0), (A_HOFFS, 1)):
                self._replace(i, row_cap + extra, self.rows + extra)
            self.row_cap = row_cap
        if grow_hrows:
            for i, extra in ((A_HKEY_OFFS, 1), (A_HKEY_NULLS, 0), (A_HVALUE_OFFS, 1),
                             (A_HVALUE_NULLS, 0)):
                self._replace(i, hrow_cap + extra, self.cols.hrows + extra)
            self.hrow_cap = hrow_cap
        self._point()
        return 0

    cdef int _first(self, Py_ssize_t rows, Py_ssize_t size, Py_ssize_t hrows,
                    Py_ssize_t hbytes) except -1:
        """The arrays for a first batch (`size` bytes for keys and for values, `hrows`
        header rows of `hbytes` bytes for keys and for values), in the order of the enum,
        as views of one allocation. (Made one by one,
        glibc's malloc gave the pages of the later ones back to the system when a call's
        arrays were freed, and every call faulted them in again: up to +70%. One block
        raises malloc's thresholds to its size, so the next call gets the same pages.)"""
        cdef Py_ssize_t at = 0, i
        cdef Py_ssize_t counts[N_ARRAYS]
        cdef Py_ssize_t starts[N_ARRAYS]
        counts[:] = [rows, rows, size, rows + 1, rows, size, rows + 1, rows,
                     hbytes, hrows + 1, hrows, hbytes, hrows + 1, hrows, rows + 1]
        for i in range(N_ARRAYS):
            counts[i] = max(counts[i], 1)
            starts[i] = at
            at += (counts[i] * ITEM_SIZES[i] + 63) & ~63  # 64-byte aligned (as the block)
        block = _np.empty(at, _np.uint8)
        cdef char* base = <char*>array_ptr(block)
        for i in range(N_ARRAYS):
            self.arrays[i] = _np.ndarray((counts[i],), _DTYPES[i], block, starts[i])
            self.ptrs[i] = base + starts[i]
        self.row_cap, self.hrow_cap = rows, hrows
        self.data_cap[0] = self.data_cap[1] = size
        self.data_cap[2] = self.data_cap[3] = hbytes
        self._point()
        # Offsets start at 0.
        self.cols.key.offs[0] = self.cols.value.offs[0] = self.cols.hoffs[0] = 0
        self.cols.hkey.offs[0] = self.cols.hvalue.offs[0] = 0
        return 0

    cdef int _room(self, Py_ssize_t rows, Py_ssize_t kbytes, Py_ssize_t vbytes,
                   Py_ssize_t hrows, Py_ssize_t hkbytes, Py_ssize_t hvbytes) except -1:
        """Room for `rows` more records with `kbytes` and `vbytes` of keys and values,
        and `hrows` more header rows with `hkbytes` and `hvbytes` of keys and values."""
        self._grow(self.rows + rows, self.cols.hrows + hrows)
        for which, i, need in ((0, A_KEY_DATA, kbytes), (1, A_VALUE_DATA, vbytes),
                               (2, A_HKEY_DATA, hkbytes), (3, A_HVALUE_DATA, hvbytes)):
            self._data(which, i, need)
        return 0

    cdef int _replace(self, int i, Py_ssize_t n, Py_ssize_t keep) except -1:
        old = self.arrays[i]
        new = _np.empty(max(n, 1), _DTYPES[i])
        if old is not None:
            new[:keep] = old[:keep]
        elif DTYPE_NAMES[i] == "int32":
            new[0] = 0  # offsets start at 0
        self.arrays[i] = new
        self.ptrs[i] = array_ptr(new)
        return 0

    cdef int _data(self, int which, int i, Py_ssize_t need) except -1:
        """Room for `need` more bytes in data array i (column `which` of four)."""
        cdef Bin* b = &self.cols.key
        if which == 1:
            b = &self.cols.value
        elif which == 2:
            b = &self.cols.hkey
        elif which == 3:
            b = &self.cols.hvalue
        if b.used + need <= self.data_cap[which]:
            return 0
        cap = max(b.used + need, 2 * self.data_cap[which])
        self._replace(i, cap, b.used)
        self.data_cap[which] = cap
        self._point()
        return 0

    cdef Cols _batch_cols(self, Py_ssize_t r0):
        """The same Cols, its per-record arrays moved on to a batch's first row."""
        cdef Cols sub = self.cols
        sub.offset += r0
        sub.timestamp += r0
        sub.hoffs += r0
        sub.key.offs += r0
        sub.key.nulls += r0
        sub.value.offs += r0
        sub.value.nulls += r0
        return sub

    cdef int _point(self) except -1:
        cdef Cols* c = &self.cols
        c.offset = <int64_t*>self.ptrs[A_OFFSET]
        c.timestamp = <int64_t*>self.ptrs[A_TIMESTAMP]
        c.hoffs = <int32_t*>self.ptrs[A_HOFFS]
        c.hrow_end = self.hrow_cap
        c.measure = False
        c.key.cap, c.value.cap = self.data_cap[0], self.data_cap[1]
        c.hkey.cap, c.hvalue.cap = self.data_cap[2], self.data_cap[3]
        self._point_bin(&c.key, A_KEY_DATA, A_KEY_OFFS, A_KEY_NULLS)
        self._point_bin(&c.value, A_VALUE_DATA, A_VALUE_OFFS, A_VALUE_NULLS)
        self._point_bin(&c.hkey, A_HKEY_DATA, A_HKEY_OFFS, A_HKEY_NULLS)
        self._point_bin(&c.hvalue, A_HVALUE_DATA, A_HVALUE_OFFS, A_HVALUE_NULLS)
        return 0

    cdef int _point_bin(self, Bin* b, int d, int o, int nl) except -1:
        b.data = <unsigned char*>self.ptrs[d]
        b.offs = <int32_t*>self.ptrs[o]
        b.nulls = <uint8_t*>self.ptrs[nl]
        return 0

    def add(self, data, Py_ssize_t pos, Py_ssize_t end, long long count, int64_t base_offset,
            int64_t base_timestamp, log_append_time):
        """Append the `count` records in data[pos:end] (the kernels' checks and errors)."""
        if count < 0 or count > (end - pos) // MIN_RECORD:
            raise _e.count_exceeds(pos, count, end - pos)
        # The bytes past the least that `count` records take: the most their keys,
        # values and headers can hold (a batch that claims no records holds none: its
        # bytes, if any, are an error the measuring pass below raises).
        cdef Py_ssize_t free = end - pos - MIN_RECORD * count if count else 0, hrows, hbytes
        cdef Py_buffer view
        cdef Cols sub
        cdef Py_ssize_t r0 = self.rows
        cdef const unsigned char* b
        cdef int64_t fixed = log_append_time if log_append_time is not None else 0
        hrows, hbytes = header_room(count, free)
        if self.arrays[A_OFFSET] is None:
            self._first(count, free, hrows, hbytes)
        # Room for the most the keys and values can take, and header_room's guess for
        # the headers, which the fast path checks as it fills. (Room for the most
        # headers, one row per 2 bytes, is mostly never touched, yet so large that
        # malloc returned its pages to the system after every call.)
        self._room(count, free, free, hrows, hbytes, hbytes)
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            if end > view.len or pos < 0 or pos > end:
                raise ValueError("records section outside the data")
            b = <const unsigned char*>view.buf
            sub = self._batch_cols(r0)
            if not _columns_fast(b, pos, end, count, base_offset, base_timestamp,
                                 log_append_time is not None, fixed, &sub):
                # Past the guess, or something is off: the general loop measures the
                # batch (or raises its error, as the pure kernel does), and the room it
                # needs is made before the batch is read again.
                sub = self._batch_cols(r0)
                sub.measure = True
                sub.key.used = sub.value.used = sub.hkey.used = sub.hvalue.used = sub.hrows = 0
                _decode(b, pos, end, count, base_offset, base_timestamp, log_append_time, &sub)
                self._room(count, sub.key.used, sub.value.used, sub.hrows, sub.hkey.used,
                           sub.hvalue.used)
                sub = self._batch_cols(r0)
                if not _columns_fast(b, pos, end, count, base_offset, base_timestamp,
                                     log_append_time is not None, fixed, &sub):
                    sub = self._batch_cols(r0)  # a header key that is not ASCII
                    _decode(b, pos, end, count, base_offset, base_timestamp, log_append_time,
                            &sub)
        finally:
            PyBuffer_Release(&view)
        _records_python.check_column_sizes(
            (sub.key.used, sub.value.used, sub.hkey.used, sub.hvalue.used, sub.hrows), pos)
        self.cols.key.used = sub.key.used
        self.cols.value.used = sub.value.used
        self.cols.hkey.used = sub.hkey.used
        self.cols.hvalue.used = sub.hvalue.used
        self.cols.hrows = sub.hrows
        self.rows = r0 + count

    def add_records(self, records, Py_ssize_t pos):
        """Append Record objects of a legacy message (offsets and timestamps any int64,
        keys and values bytes or None, no headers) read at `pos`."""
        cdef Py_ssize_t n = len(records), i, r0 = self.rows, kbytes = 0, vbytes = 0
        cdef Cols* c = &self.cols
        if n == 0:
            return
        for r in records:
            kbytes += 0 if r.key is None else len(r.key)
            vbytes += 0 if r.value is None else len(r.value)
        _records_python.check_column_sizes(
            (c.key.used + kbytes, c.value.used + vbytes, c.hkey.used, c.hvalue.used, c.hrows), pos)
        if self.arrays[A_OFFSET] is None:
            self._first(n, max(kbytes, vbytes), 0, 0)
        self._room(n, kbytes, vbytes, 0, 0, 0)
        for i in range(n):
            r = records[i]
            c.offset[r0 + i] = r.offset
            c.timestamp[r0 + i] = r.timestamp
            c.hoffs[r0 + i + 1] = <int32_t>c.hrows
            bin_put_bytes(&c.key, r0 + i, r.key)
            bin_put_bytes(&c.value, r0 + i, r.value)
        self.rows = r0 + n

    def finish(self, tail):
        cdef Cols* c = &self.cols
        if self.arrays[A_OFFSET] is None:  # no record at all
            self._grow(0, 0)
        n, h = self.rows, c.hrows
        sizes = (n, n, c.key.used, n + 1, n, c.value.used, n + 1, n, c.hkey.used, h + 1, h,
                 c.hvalue.used, h + 1, h, n + 1)
        (offset, timestamp, kd, ko, kn, vd, vo, vn, hkd, hko, hkn, hvd, hvo, hvn, hoffs) = [
            (arr if arr is not None else _np.empty(0, _np.uint8))[:size]
            for arr, size in zip(self.arrays, sizes)]
        return RecordColumns(offset, timestamp, BinaryColumn(kd, ko, kn),
                             BinaryColumn(vd, vo, vn),
                             HeaderColumns(hoffs, BinaryColumn(hkd, hko, hkn),
                                           BinaryColumn(hvd, hvo, hvn)), tail)


# ---------------------------------------------------------------- writing
#
# The compiled writer takes the common shapes (a list or tuple of Record holding ints,
# bytes or None, and lists of (str, bytes or None); RecordColumns of the right dtypes).
# Anything else, valid or not, goes to the pure writer, which converts what it can and
# raises the EncodeError naming the field: both kernels accept and refuse the same values.

cdef struct W:
    # The output is written straight into a bytes object, grown (and finally cut to
    # size) in place: no second copy of a megabyte batch.
    PyObject* owner
    unsigned char* buf
    Py_ssize_t used
    Py_ssize_t cap


cdef inline void w_open(W* w) noexcept:
    w.owner = NULL
    w.buf = NULL
    w.used = 0
    w.cap = 0


cdef object w_take(W* w):
    """The bytes written (the object itself, cut to size); w is empty after."""
    if w.owner == NULL:
        return b""
    if w.cap - w.used <= w.used >> 2:
        # Little room left over: the object only shows fewer bytes (as msgspec does),
        # since a realloc to fit would make the allocator map fresh pages on every
        # call for a batch of the same size, all of which then fault in.
        Py_SET_SIZE(w.owner, w.used)
        w.buf[w.used] = 0
    elif _PyBytes_Resize(&w.owner, w.used) < 0:
        w.owner = NULL
        raise MemoryError()
    out = <object>w.owner
    Py_XDECREF(w.owner)  # <object> took its own reference
    w.owner = NULL
    return out


cdef inline void w_close(W* w) noexcept:
    Py_XDECREF(w.owner)
    w.owner = NULL


cdef inline int w_room(W* w, Py_ssize_t n) except -1:
    if w.cap - w.used >= n:
        return 0
    return w_grow(w, n)


cdef int w_grow(W* w, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef unsigned char* p
    if n > 0x7FFFFFFF or w.used > 0x7FFFFFFF:
        raise _e.message_too_large()
    cap = max(w.cap * 2, w.used + n)
    if w.owner == NULL:
        w.owner = PyBytes_New(NULL, cap)
        if w.owner == NULL:
            raise MemoryError()
    elif _PyBytes_Resize(&w.owner, cap) < 0:
        w.owner = NULL  # freed by the failed resize
        raise MemoryError()
    w.buf = <unsigned char*>PyBytes_AS_STRING_P(w.owner)
    w.cap = cap
    return 0


cdef inline void w_uvarint(W* w, uint64_t v) noexcept:
    """Needs 10 bytes of room."""
    w.used = put_uvarint(w.buf + w.used, v) - w.buf


cdef inline uint64_t zz(int64_t v) noexcept:
    return (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)


cdef inline int w_blob(W* w, const char* p, Py_ssize_t n) except -1:
    """A length (n < 0: null) and its bytes."""
    if n < 0:
        w_room(w, 1)
        w.buf[w.used] = 1
        w.used += 1
        return 0
    w_room(w, 10 + n)
    w_uvarint(w, zz(n))
    copy_bytes(w.buf + w.used, <const unsigned char*>p, n)
    w.used += n
    return 0


cdef inline int w_obj(W* w, PyObject* v) except -1:
    """None or exact bytes: 1 when written, 0 for anything else (left to the pure writer)."""
    if v == Py_None:
        w_blob(w, NULL, -1)
        return 1
    if not PyBytes_CheckExact(v):
        return 0
    w_blob(w, PyBytes_AS_STRING_P(v), PyBytes_GET_SIZE_P(v))
    return 1


cdef extern from *:
    """
    /* The bytes of an unsigned varint: one per started 7 bits, without a loop. */
    static inline int fkw_uvarint_size(unsigned long long v) {
    #if defined(__GNUC__) || defined(__clang__)
        return (int)(((63 - __builtin_clzll(v | 1)) * 9 + 73) >> 6);
    #else
        int n = 1;
        while (v > 0x7F) { v >>= 7; n++; }
        return n;
    #endif
    }
    """
    int uvarint_size "fkw_uvarint_size"(uint64_t v) noexcept nogil


cdef inline int begin_record(W* w, int64_t ts_delta, int64_t delta, int guess) except -1:
    """Start a record, leaving `guess` bytes for its length (the previous record's: the
    records of a batch are mostly alike, so the body seldom has to move)."""
    w_room(w, 5 + 1 + 10 + 10)
    w.used += guess
    w.buf[w.used] = 0  # attributes
    w.used += 1
    w_uvarint(w, zz(ts_delta))
    w_uvarint(w, zz(delta))
    return 0


cdef inline int end_record(W* w, Py_ssize_t start, int guess) except -1:
    """Put the length before the record's body, which starts `guess` bytes after
    `start`; returns the length's size (the next record's guess)."""
    cdef Py_ssize_t body = w.used - start - guess
    cdef uint64_t length = zz(body)
    cdef int size = uvarint_size(length)
    if size != guess:
        w_room(w, 5)  # the body may move right by up to 4 bytes
        memmove(w.buf + start + size, w.buf + start + guess, body)
    w.used = start
    w_uvarint(w, length)
    w.used += body
    return size


cdef inline bint as_i64(PyObject* v, int64_t* out) noexcept:
    cdef int overflow = 0
    if not PyLong_CheckExact(v):
        return False
    out[0] = PyLong_AsLongLongAndOverflow(v, &overflow)
    return not overflow


cdef inline bint sub_ok(int64_t a, int64_t b, int64_t* out) noexcept:
    """a - b without leaving int64."""
    if (b < 0 and a > INT64_MAX + b) or (b > 0 and a < INT64_MIN + b):
        return False
    out[0] = a - b
    return True


cdef inline PyObject* slot_of(object o, Py_ssize_t offset) noexcept:
    return (<PyObject**>(<char*><PyObject*>o + offset))[0]


cdef object _encode_objects(object records, int64_t base_offset, int64_t now, W* w):
    """Write the records after w.used -> (count, last offset delta, first and max
    timestamp), or None for the pure writer to do."""
    cdef Py_ssize_t n = len(records), i, j, hn, klen, start
    cdef int64_t ts, first = 0, top = 0, delta = 0, ts_delta
    cdef PyObject* v
    cdef PyObject* h
    cdef PyObject* item
    cdef const char* k
    cdef int guess = 2
    if n == 0:
        return None
    # A first guess (the buffer grows as needed): a guess for every record of a huge
    # list would pass the 2 GB limit before anything is written.
    w_room(w, min(n, 1 << 16) * 32)
    for i in range(n):
        r = records[i]
        # Record itself: a subclass may hide a slot behind a property, which only the
        # pure writer reads. (No Python code runs in this loop, so neither the list nor
        # a record can change under the borrowed references it holds.)
        if type(r) is not Record:
            return None
        v = slot_of(r, S_TIMESTAMP)
        if v == NULL:
            return None
        if v == Py_None:
            ts = now
        elif not as_i64(v, &ts):
            return None
        if i == 0:
            first = top = ts
        elif ts > top:
            top = ts
        v = slot_of(r, S_OFFSET)
        if v == NULL:
            return None
        if v == Py_None:
            delta = i
        elif not as_i64(v, &delta) or not sub_ok(delta, base_offset, &delta):
            return None
        if delta < -0x80000000 or delta > 0x7FFFFFFF or not sub_ok(ts, first, &ts_delta):
            return None
        start = w.used
        begin_record(w, ts_delta, delta, guess)
        v = slot_of(r, S_KEY)
        if v == NULL or not w_obj(w, v):
            return None
        v = slot_of(r, S_VALUE)
        if v == NULL or not w_obj(w, v):
            return None
        h = slot_of(r, S_HEADERS)
        if h == NULL or not PyList_CheckExact(h):
            return None
        hn = PyList_GET_SIZE(<object>h)
        w_room(w, 5)
        w_uvarint(w, zz(hn))
        for j in range(hn):
            item = PyList_GET_ITEM(<object>h, j)
            if not PyTuple_CheckExact(item) or PyTuple_GET_SIZE(<object>item) != 2:
                return None
            v = PyTuple_GET_ITEM(<object>item, 0)
            if not PyUnicode_CheckExact(v):
                return None
            k = PyUnicode_AsUTF8AndSize(v, &klen)
            if k == NULL:  # a lone surrogate: the pure writer says so
                PyErr_Clear()
                return None
            w_blob(w, k, klen)
            if not w_obj(w, PyTuple_GET_ITEM(<object>item, 1)):
                return None
        guess = end_record(w, start, guess)
    if len(records) != n:
        return None  # changed while written: let the pure writer see what is there now
    return n, delta, first, top


cdef object _encode_columns(object cols, int64_t base_offset, W* w):
    """As _encode_objects, from RecordColumns. The columns are checked and measured with
    loops over whole arrays, the output is made at the most they can take, and one pass
    writes each record, leaving room for its length as long as the previous record's
    (the records of a batch are mostly alike, so the body seldom moves).

    Every array is taken (a fixed view of an exact ndarray) before any is checked: an
    attribute read can run user code, which could rewrite an array already checked.
    From the first check to the last byte written no Python code runs."""
    cdef const int64_t[::1] offset
    cdef const int64_t[::1] timestamp
    cdef const int32_t[::1] hoffs_view
    try:
        headers = cols.headers
        offset = exact_array(cols.offset, DT_INT64)
        timestamp = exact_array(cols.timestamp, DT_INT64)
        hoffs_view = exact_array(headers.offsets, DT_INT32)
        key = _Bin(cols.key)
        value = _Bin(cols.value)
        hkey = _Bin(headers.key)
        hvalue = _Bin(headers.value)
    except (ValueError, TypeError, AttributeError, BufferError):
        return None  # not arrays of these types: the pure writer converts or refuses them
    key.check()
    value.check()
    hkey.check()
    hvalue.check()
    cdef Py_ssize_t n = offset.shape[0], i, hn
    if n == 0 or timestamp.shape[0] != n or hoffs_view.shape[0] != n + 1 or not key.fits(n) \
            or not value.fits(n) or hoffs_view[0] != 0:
        return None
    hn = hkey.n
    if not hkey.fits(hn) or not hvalue.fits(hn) or hoffs_view[n] != hn or not hkey.all_utf8():
        return None
    cdef const int64_t* offs = &offset[0]
    cdef const int64_t* stamps = &timestamp[0]
    cdef const int32_t* hoffs = &hoffs_view[0]
    cdef CBin k = key.view(), v = value.view(), hk = hkey.view(), hv = hvalue.view()
    cdef int64_t lo = offs[0], hi = offs[0], first = stamps[0], low = first, top = first, d
    cdef uint32_t most_headers = 0
    cdef bint ascending = True
    cdef Py_ssize_t most, j, body
    cdef uint64_t header, record
    cdef unsigned char* o
    cdef unsigned char* start
    cdef int room, size, ts_width, offset_width, count_width
    # No early exit: loops the compiler can vectorize, one per element width.
    for i in range(n):
        lo = min(lo, offs[i])
        hi = max(hi, offs[i])
        low = min(low, stamps[i])
        top = max(top, stamps[i])
    for i in range(n):
        ascending &= hoffs[i] <= hoffs[i + 1]
        # Wraps where the rows descend, which the check above refuses.
        most_headers = max(most_headers, <uint32_t>hoffs[i + 1] - <uint32_t>hoffs[i])
    # Header rows ascend from 0 to hn (both checked above): each header is one record's.
    # The deltas of all records fit when those of the extremes do.
    if not ascending or not sub_ok(lo, base_offset, &d) or d < -0x80000000 \
            or not sub_ok(hi, base_offset, &d) or d > 0x7FFFFFFF \
            or not sub_ok(low, first, &d) or not sub_ok(top, first, &d):
        return None
    # The most the records can take, near what they do take (the bytes are cut to size
    # in place only when little is left over): every value's bytes (the offsets
    # ascend, so the spans bound them) and, per value, delta and count, the size of the
    # largest one's varint.
    ts_width = uvarint_size(max(zz(low - first), zz(top - first)))
    offset_width = uvarint_size(max(zz(lo - base_offset), zz(hi - base_offset)))
    count_width = uvarint_size(zz(most_headers))
    header = hk.width + <uint64_t>hk.longest + hv.width + <uint64_t>hv.longest
    record = 1 + ts_width + offset_width + k.width + <uint64_t>k.longest + v.width \
        + <uint64_t>v.longest + count_width
    # The longest record body, counted up to 2 GB (more and the batch is refused below).
    if record > 0x7FFFFFFF or (most_headers and header > (0x7FFFFFFF - record) // <uint64_t>most_headers):
        record = 0x7FFFFFFF
    else:
        record += most_headers * header
    room = uvarint_size(zz(record))  # the most a record's length takes
    most = k.span + v.span + hk.span + hv.span + (hk.width + hv.width) * hn \
        + (room + 1 + ts_width + offset_width + k.width + v.width + count_width) * n
    if most > 0x7FFFFFFF:
        return None  # past 2 GB: the pure writer says what is wrong
    w_room(w, most)
    o = w.buf + w.used
    for i in range(n):
        start = o
        o += room
        o[0] = 0  # attributes
        o = put_uvarint(o + 1, zz(stamps[i] - first))
        o = put_uvarint(o, zz(offs[i] - base_offset))
        o = put_value(o, &k, i)
        o = put_value(o, &v, i)
        o = put_uvarint(o, zz(hoffs[i + 1] - hoffs[i]))
        for j in range(hoffs[i], hoffs[i + 1]):
            o = put_value(o, &hk, j)
            o = put_value(o, &hv, j)
        body = o - start - room
        size = uvarint_size(zz(body))
        if size != room:  # never past the most its length takes, counted in `most`
            memmove(start + size, start + room, body)
            room = size
        put_uvarint(start, zz(body))
        o = start + size + body
    w.used = o - w.buf
    return n, offs[n - 1] - base_offset, first, top


cdef extern from *:
    """
    #if defined(__GNUC__) || defined(__clang__)
    #define FKW_ALWAYS_INLINE static inline __attribute__((always_inline))
    #else
    #define FKW_ALWAYS_INLINE static inline
    #endif

    /* A checked binary column: its values' offsets ascend within its data. */
    typedef struct {
        const unsigned char* data;
        const int32_t* offs;
        const uint8_t* nulls;
        Py_ssize_t span;     /* from the first value's start to the last one's end */
        Py_ssize_t longest;  /* the longest value's bytes */
        int width;           /* the bytes of that value's length: the most any takes */
    } fkw_column;

    FKW_ALWAYS_INLINE unsigned char* fkw_put_uvarint(unsigned char* o, uint64_t v) {
        while (v > 0x7F) {
            *o++ = (unsigned char)((v & 0x7F) | 0x80);
            v >>= 7;
        }
        *o = (unsigned char)v;
        return o + 1;
    }

    /* memcpy, with copies up to 128 bytes (keys, values, header fields) done in place:
       a call to memcpy costs more than copying them (read_columns: a fifth faster). */
    FKW_ALWAYS_INLINE void fkw_copy(unsigned char* d, const unsigned char* s, size_t n) {
        uint64_t a, b;
        uint32_t c, e;
        size_t k;
        if (n > 128) {
            memcpy(d, s, n);
        } else if (n > 16) {  /* 16-byte moves, the last one overlapping */
            for (k = 0; k + 16 < n; k += 16) {
                memcpy(&a, s + k, 8); memcpy(&b, s + k + 8, 8);
                memcpy(d + k, &a, 8); memcpy(d + k + 8, &b, 8);
            }
            memcpy(&a, s + n - 16, 8); memcpy(&b, s + n - 8, 8);
            memcpy(d + n - 16, &a, 8); memcpy(d + n - 8, &b, 8);
        } else if (n >= 8) {  /* two 8-byte moves that may overlap */
            memcpy(&a, s, 8); memcpy(&b, s + n - 8, 8);
            memcpy(d, &a, 8); memcpy(d + n - 8, &b, 8);
        } else if (n >= 4) {
            memcpy(&c, s, 4); memcpy(&e, s + n - 4, 4);
            memcpy(d, &c, 4); memcpy(d + n - 4, &e, 4);
        } else {
            while (n--) *d++ = *s++;
        }
    }

    /* Value i of a checked column: its length (zigzag) and bytes, or -1 for null. */
    FKW_ALWAYS_INLINE unsigned char* fkw_put_value(unsigned char* o, const fkw_column* b,
                                                   Py_ssize_t i) {
        size_t n = (size_t)(b->offs[i + 1] - b->offs[i]);
        if (b->nulls[i]) {
            *o = 1;
            return o + 1;
        }
        o = fkw_put_uvarint(o, (uint64_t)n << 1);
        fkw_copy(o, b->data + b->offs[i], n);
        return o + n;
    }
    """
    ctypedef struct CBin "fkw_column":
        const unsigned char* data
        const int32_t* offs
        const uint8_t* nulls
        Py_ssize_t span
        Py_ssize_t longest
        int width
    unsigned char* put_uvarint "fkw_put_uvarint"(unsigned char* o, uint64_t v) noexcept nogil
    unsigned char* put_value "fkw_put_value"(unsigned char* o, const CBin* b, Py_ssize_t i) noexcept nogil
    void copy_bytes "fkw_copy"(unsigned char* d, const unsigned char* s, size_t n) noexcept nogil


# The dtypes the compiled writer takes, by index into DTYPE_NUMS (numpy's type numbers,
# looked up when numpy is first needed: objects are written without it).
cdef enum:
    DT_UINT8, DT_INT32, DT_INT64, DT_BOOL
cdef object _ndarray = None
cdef int DTYPE_NUMS[4]


cdef object exact_array(object a, int dtype):
    """`a` itself when it is an ndarray (not a subclass: no hook of a user's runs when it
    is viewed) of that native dtype; TypeError otherwise (the pure writer then decides)."""
    global _ndarray
    cdef int i
    if _ndarray is None:
        import numpy
        for i, name in enumerate(("uint8", "int32", "int64", "bool")):
            DTYPE_NUMS[i] = numpy.dtype(name).num
        _ndarray = numpy.ndarray
    if type(a) is not _ndarray or a.dtype.num != DTYPE_NUMS[dtype] or not a.dtype.isnative:
        raise TypeError("not an ndarray of the kernel's dtype")
    return a


@cython.final
cdef class _Bin:
    """A BinaryColumn's arrays, checked once: offsets ascending within the data."""
    cdef const uint8_t[::1] data
    cdef const int32_t[::1] offs
    cdef const uint8_t[::1] nulls
    cdef Py_ssize_t n
    cdef Py_ssize_t size
    cdef Py_ssize_t longest  # the longest value's bytes
    cdef bint ok

    def __cinit__(self, col):
        # Taken only: _encode_columns checks once every column is taken.
        data, offs, nulls = col.data, col.offsets, col.nulls
        self.data = exact_array(data, DT_UINT8)
        self.offs = exact_array(offs, DT_INT32)
        self.nulls = exact_array(nulls, DT_BOOL)  # bools are one byte, 0 or 1
        self.n = self.nulls.shape[0]
        self.size = self.data.shape[0]
        self.ok = False

    cdef void check(self) noexcept:
        """Offsets ascending within the data; the longest value's bytes."""
        cdef Py_ssize_t i
        cdef const int32_t* o
        cdef bint ascending = True
        cdef uint32_t longest = 0
        self.ok = self.offs.shape[0] == self.n + 1 and self.offs[0] >= 0
        if self.ok:
            o = &self.offs[0]
            for i in range(self.n):  # no early exit: a loop the compiler can vectorize
                ascending &= o[i] <= o[i + 1]
                # Wraps where the offsets descend, which refuses the column anyway.
                longest = max(longest, <uint32_t>o[i + 1] - <uint32_t>o[i])
            self.ok = ascending and o[self.n] <= self.size
            self.longest = longest

    cdef bint fits(self, Py_ssize_t n):
        return self.ok and self.n == n

    cdef CBin view(self) noexcept:
        cdef CBin b
        b.data = <const unsigned char*>(&self.data[0] if self.size else <const uint8_t*>b"")
        b.offs = &self.offs[0]
        b.nulls = &self.nulls[0] if self.n else NULL
        b.span = self.offs[self.n] - self.offs[0]
        b.longest = self.longest
        b.width = uvarint_size(zz(self.longest))
        return b

    cdef inline const char* at(self, Py_ssize_t i) noexcept:
        if self.size == 0:
            return b""
        return <const char*>&self.data[0] + self.offs[i]

    cdef bint all_utf8(self):
        """Every value is UTF-8, none null (header keys: the pure writer decodes them)."""
        cdef Py_ssize_t i
        cdef uint8_t any_null = 0
        if self.n == 0:
            return True
        for i in range(self.n):  # no early exit: a loop the compiler can vectorize
            any_null |= self.nulls[i]
        if any_null:
            return False
        # Keys are mostly ASCII: one look at all their bytes instead of one per key.
        if ascii(<const unsigned char*>self.at(0), self.offs[self.n] - self.offs[0]):
            return True
        for i in range(self.n):
            if not self.utf8(i):
                return False
        return True

    cdef bint utf8(self, Py_ssize_t i):
        cdef Py_ssize_t n = self.offs[i + 1] - self.offs[i]
        if self.nulls[i]:
            return False
        if ascii(<const unsigned char*>self.at(i), n):
            return True  # the usual header key
        try:
            PyUnicode_DecodeUTF8(self.at(i), n, NULL)
        except UnicodeDecodeError:
            return False
        return True


cdef object _encode(object records, int64_t base_offset, int64_t now, W* w):
    if isinstance(records, RecordColumns):
        return _encode_columns(records, base_offset, w)
    if type(records) is list or type(records) is tuple:
        return _encode_objects(records, base_offset, now, w)
    return None


def encode_records(records, int64_t base_offset, int64_t now):
    """The records section of a batch (see _records_python.encode_records)."""
    cdef W w
    w_open(&w)
    try:
        done = _encode(records, base_offset, now, &w)
        if done is None:
            return _records_python.encode_records(records, base_offset, now)
        return (w_take(&w),) + done
    finally:
        w_close(&w)


cdef inline void put_be(unsigned char* p, uint64_t v, int width) noexcept:
    cdef int i
    for i in range(width):
        p[width - 1 - i] = <unsigned char>(v >> (8 * i))


def encode_batch(records, int64_t base_offset, int64_t now, int32_t partition_leader_epoch,
                 int16_t attributes, int64_t producer_id, int16_t producer_epoch,
                 int32_t base_sequence):
    """A whole uncompressed batch (see _records_python.encode_batch), built in one buffer."""
    cdef W w
    cdef Py_ssize_t n
    cdef uint32_t crc
    w_open(&w)
    try:
        w_room(&w, HEADER)
        w.used = HEADER
        done = _encode(records, base_offset, now, &w)
        if done is None:
            body, count, last_delta, first, top = _records_python.encode_records(
                records, base_offset, now)
            n = len(body)
            w_room(&w, n)
            memcpy(w.buf + HEADER, PyBytes_AS_STRING(body), n)
            w.used = HEADER + n
        else:
            count, last_delta, first, top = done
        if w.used - 12 > 0x7FFFFFFF:
            raise _e.EncodeError("the batch would exceed 2147483647 bytes")
        put_be(w.buf, <uint64_t>base_offset, 8)
        put_be(w.buf + 8, <uint64_t>(w.used - 12), 4)
        put_be(w.buf + 12, <uint64_t><uint32_t>partition_leader_epoch, 4)
        w.buf[16] = 2
        put_be(w.buf + 21, <uint64_t><uint16_t>attributes, 2)
        put_be(w.buf + 23, <uint64_t><uint32_t><int32_t>last_delta, 4)
        put_be(w.buf + 27, <uint64_t><int64_t>first, 8)
        put_be(w.buf + 35, <uint64_t><int64_t>top, 8)
        put_be(w.buf + 43, <uint64_t>producer_id, 8)
        put_be(w.buf + 51, <uint64_t><uint16_t>producer_epoch, 2)
        put_be(w.buf + 53, <uint64_t><uint32_t>base_sequence, 4)
        put_be(w.buf + 57, <uint64_t><uint32_t><int32_t>count, 4)
        with nogil:
            crc = fkw_crc32c(0, w.buf + 21, w.used - 21)
        put_be(w.buf + 17, crc, 4)
        return w_take(&w)
    finally:
        w_close(&w)

# cython: language_level=3
# Wire primitives for the compiled codecs. Hot paths are inline here; cold paths (errors,
# tagged fields, numpy) live in _core.pyx. Every read checks the bytes left first; every
# write checks the room left. Sizes are measured once, from what is written: a list's or
# tuple's stored items (never a subclass's own __len__), a buffer's shape.
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.long cimport PyLong_FromLongLong
from cpython.list cimport PyList_Check, PyList_GET_ITEM, PyList_GET_SIZE
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdint cimport INT64_MIN, INT64_MAX
from libc.string cimport memcpy


cdef extern from "_untracked_list.h":
    PyObject* fk_untracked_list(Py_ssize_t n)

cdef extern from "_ft.h":
    # Reads of what another thread may change meanwhile (see _ft.h): the GIL build's
    # plain loads, and on a free-threaded build the ones CPython makes safe.
    bint FREE_THREADED "FK_FREE_THREADED"
    object fk_steal(PyObject* o)                        # hands over a new reference
    list fk_steal_list "fk_steal"(PyObject* o)          # the same, of a list
    PyObject* fk_none()                                 # a new reference to None
    PyObject* fk_slot_ref(object o, Py_ssize_t offset)  # new reference or NULL
    PyObject* fk_list_item(object items, Py_ssize_t i, Py_ssize_t n)  # new reference or NULL
    PyObject* fk_dict_get_ref(object d, object key)     # new reference or NULL
    int64_t fk_plain_int(object items, Py_ssize_t i, Py_ssize_t n, int width)
    void fk_read_slots(object o, const Py_ssize_t* offs, int n, PyObject** out)
    void fk_release_slots(PyObject** v, int n)
    PyObject* fk_list_now(object items) except NULL

cdef extern from "_slots.h":
    # The offset of a writable object slot `name` in instances of cls, checked (the one
    # helper every offset the compiled code writes at comes from); else TypeError.
    Py_ssize_t slot_offset "fk_slot_offset"(object cls, object name) except -1

cdef extern from "Python.h":
    PyObject* _decode_utf8 "PyUnicode_DecodeUTF8"(const char* s, Py_ssize_t size, const char* errors)
    PyObject* _new_str "PyUnicode_New"(Py_ssize_t size, Py_UCS4 maxchar)
    PyObject* _new_long "PyLong_FromLongLong"(long long v)
    # PyList_SET_ITEM with the item as a new reference, which the list takes
    void list_set_new "PyList_SET_ITEM"(object items, Py_ssize_t i, PyObject* v)
    ctypedef struct PyASCIIObject:
        pass
    const char* _as_utf8 "PyUnicode_AsUTF8AndSize"(object s, Py_ssize_t* size)
    long long PyLong_AsLongLongAndOverflow(object o, int* overflow)
    bint PyUnicode_IS_COMPACT_ASCII(object s)
    Py_ssize_t PyUnicode_GET_LENGTH(object s)
    void* PyUnicode_DATA(object s)
    void PyObject_GC_UnTrack(void* o)
    void PyObject_GC_Track(void* o)
    ctypedef struct PyListObject:
        PyObject** ob_item
    ctypedef struct PyTypeObject:
        PyObject* (*tp_alloc)(PyTypeObject*, Py_ssize_t)


cdef struct Cursor:
    const unsigned char* buf
    Py_ssize_t pos
    Py_ssize_t end
    PyObject* whole        # records="view": a memoryview of all of buf (borrowed), else NULL


cdef struct Buf:
    unsigned char* start
    unsigned char* p       # the write position
    unsigned char* end
    PyObject* owner        # the bytes object being filled, or NULL in encode_into's scratch area
    unsigned char* dest    # encode_into: where the finished message is copied
    Py_ssize_t dest_room   # and the bytes there


cdef enum:
    MAX_MESSAGE = 0x7FFFFFFF  # a frame's size is an int32
    SCRATCH = 8192            # encode_into's area on the stack, for most messages
    SMALL_INTS = 16384        # small_int_table()'s size


# ---- cold paths, implemented in _core.pyx
cdef int raise_short(Py_ssize_t start, Py_ssize_t need, Py_ssize_t end) except -1
cdef int raise_varint(Py_ssize_t start, int max_bytes) except -1
cdef int raise_null(Py_ssize_t start) except -1
cdef int raise_bad_length(Py_ssize_t start, long long n) except -1
cdef int raise_count(Py_ssize_t start, long long n, Py_ssize_t left) except -1
cdef int raise_utf8(Py_ssize_t start) except -1
cdef int raise_string_too_long(Py_ssize_t start, long long n) except -1
cdef int raise_marker(Py_ssize_t start, int m) except -1
cdef int raise_changed() except -1
cdef int raise_not_str(object s) except -1
cdef int raise_not_encodable() except -1
cdef int raise_string_length(Py_ssize_t n) except -1
cdef int raise_null_array() except -1
cdef int raise_not_list(object items) except -1
cdef int raise_too_long(Py_ssize_t n, int compact) except -1
cdef int raise_too_large() except -1
cdef long long as_int_slow(object v, int kind) except? -1
cdef long long rd_uvarint_long(Cursor* c) except -1
cdef object unknown_tags_slow(object value)
cdef Py_ssize_t start_at(object offset, Py_ssize_t n) except -1
cdef int grow(Buf* b, Py_ssize_t need) except -1
cdef int open_buf(Buf* b, Py_ssize_t capacity) except -1
cdef object close_buf(Buf* b)
cdef void discard_buf(Buf* b) noexcept
cdef int open_into(Buf* b, object buffer, Py_buffer* view, object offset,
                   unsigned char* scratch, Py_ssize_t hint) except -1
cdef int raise_buffer_too_small(Py_ssize_t need, Py_ssize_t available) except -1

cdef object rd_bool(Cursor* c)
cdef object rd_float64(Cursor* c)
cdef object rd_uuid(Cursor* c)
cdef object rd_raw(Cursor* c, Py_ssize_t n)
cdef object rd_string(Cursor* c)
cdef object rd_nullable_string(Cursor* c)
cdef Py_ssize_t bytes_span(Cursor* c, int compact, int nullable) except -2
cdef object rd_bytes(Cursor* c)
cdef object rd_nullable_bytes(Cursor* c)
cdef object rd_compact_bytes(Cursor* c)
cdef object rd_compact_nullable_bytes(Cursor* c)
# a list of ints comes back untracked by the collector (see new_list), or a numpy array
cdef PyObject** small_int_table() except NULL
cdef object rd_int_array(Cursor* c, int width, int compact, int nullable, int arrays)
cdef object rd_task_offsets(Cursor* c, int compact, int nullable, int flexible,
                            Py_ssize_t min_size, object item)
cdef object rd_string_array(Cursor* c, int compact, int nullable)
cdef object rd_tags_slow(Cursor* c, long long n)
cdef Py_ssize_t rd_tag_header(Cursor* c, Py_ssize_t last, Py_ssize_t* size) except -1

cdef int wr_bool(Buf* b, object v) except -1
cdef int wr_float64(Buf* b, object v) except -1
cdef int wr_uuid(Buf* b, object v) except -1
cdef int wr_bytes(Buf* b, object v) except -1
cdef int wr_nullable_bytes(Buf* b, object v) except -1
cdef int wr_compact_bytes(Buf* b, object v) except -1
cdef int wr_compact_nullable_bytes(Buf* b, object v) except -1
cdef int wr_int_array(Buf* b, object items, int width, int compact, int nullable) except -1
cdef int wr_task_offsets(Buf* b, object cols, int compact, int flexible) except -1
cdef int wr_string_array(Buf* b, object items, int compact, int nullable) except -1
cdef int wr_tags_slow(Buf* b, object known, object unknown) except -1

ctypedef int (*write_fn)(object, Buf*, int) except -1
cdef bytes encode_value(write_fn wr, object o, int v, str name)


# ---- byte order

cdef inline uint16_t load16(const unsigned char* p) noexcept nogil:
    return (<uint16_t>p[0] << 8) | p[1]

cdef inline uint32_t load32(const unsigned char* p) noexcept nogil:
    return (<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3]

cdef inline uint64_t load64(const unsigned char* p) noexcept nogil:
    return (<uint64_t>load32(p) << 32) | load32(p + 4)

cdef inline void store16(unsigned char* p, uint16_t v) noexcept nogil:
    p[0] = v >> 8
    p[1] = v & 0xFF

cdef inline void store32(unsigned char* p, uint32_t v) noexcept nogil:
    p[0] = v >> 24
    p[1] = (v >> 16) & 0xFF
    p[2] = (v >> 8) & 0xFF
    p[3] = v & 0xFF

cdef inline void store64(unsigned char* p, uint64_t v) noexcept nogil:
    store32(p, <uint32_t>(v >> 32))
    store32(p + 4, <uint32_t>v)


# ---- objects of a class, slot by slot

cdef inline object alloc_instance(object cls):
    """A new instance of cls from its tp_alloc: every slot NULL, no __init__ run."""
    cdef PyObject* o = (<PyTypeObject*><PyObject*>cls).tp_alloc(<PyTypeObject*><PyObject*>cls, 0)
    if o == NULL:
        raise MemoryError()
    return fk_steal(o)


# ---- reading

cdef inline list new_list(Py_ssize_t n):
    """A list of n empty (NULL) slots for the caller to fill with PyList_SET_ITEM, out of
    the collector's sight (_untracked_list.h): a gc.callbacks hook or a gc.get_objects()
    walker (debuggers, memory profilers) run by an allocation while it fills would
    otherwise be handed a list with NULL items, and crash on them. The caller tracks it
    (PyObject_GC_Track) once it is whole, or leaves it untracked as the engine leaves the
    lists it decodes."""
    cdef PyObject* o = fk_untracked_list(n)
    if o == NULL:
        raise MemoryError()
    return fk_steal_list(o)


cdef inline PyObject* new_int(PyObject** small, long long x) except NULL:
    """x as an int object (a new reference): a shared one from small_int_table() when it
    has it."""
    cdef PyObject* r
    if <unsigned long long>x < SMALL_INTS:
        r = small[x]
        Py_INCREF(<object>r)
        return r
    return _new_long(x)


cdef inline object int_of(PyObject** small, long long x):
    """x as an int object: a shared one from small_int_table() when it has it."""
    return fk_steal(new_int(small, x))


cdef inline int open_input(Cursor* c, object data, Py_buffer* view) except -1:
    """Point the cursor at all of data's bytes. Returns 1 when it took a buffer view,
    which the caller must release; bytes are read in place (the caller holds them)."""
    c.pos = 0
    c.whole = NULL
    if type(data) is bytes:
        c.buf = <const unsigned char*>PyBytes_AS_STRING(data)
        c.end = PyBytes_GET_SIZE(data)
        return 0
    PyObject_GetBuffer(data, view, PyBUF_SIMPLE)
    c.buf = <const unsigned char*>view.buf
    c.end = view.len
    return 1

cdef inline long long rd_uvarint(Cursor* c) except -1:
    """Unsigned varint of at most 32 bits (5 bytes): one byte here, longer ones in
    rd_uvarint_long (this stays small enough to be inlined everywhere)."""
    if c.pos < c.end and c.buf[c.pos] < 0x80:
        c.pos += 1
        return c.buf[c.pos - 1]
    return rd_uvarint_long(c)

cdef inline int8_t rd_i8(Cursor* c) except? -1:
    if c.end - c.pos < 1:
        raise_short(c.pos, 1, c.end)
    c.pos += 1
    return <int8_t>c.buf[c.pos - 1]

cdef inline int16_t rd_i16(Cursor* c) except? -1:
    if c.end - c.pos < 2:
        raise_short(c.pos, 2, c.end)
    c.pos += 2
    return <int16_t>load16(c.buf + c.pos - 2)

cdef inline uint16_t rd_u16(Cursor* c) except? 0xFFFF:
    if c.end - c.pos < 2:
        raise_short(c.pos, 2, c.end)
    c.pos += 2
    return load16(c.buf + c.pos - 2)

cdef inline int32_t rd_i32(Cursor* c) except? -1:
    if c.end - c.pos < 4:
        raise_short(c.pos, 4, c.end)
    c.pos += 4
    return <int32_t>load32(c.buf + c.pos - 4)

cdef inline uint32_t rd_u32(Cursor* c) except? 0xFFFFFFFF:
    if c.end - c.pos < 4:
        raise_short(c.pos, 4, c.end)
    c.pos += 4
    return load32(c.buf + c.pos - 4)

cdef inline int64_t rd_i64(Cursor* c) except? -1:
    if c.end - c.pos < 8:
        raise_short(c.pos, 8, c.end)
    c.pos += 8
    return <int64_t>load64(c.buf + c.pos - 8)

cdef inline int rd_marker(Cursor* c) except -2:
    """The int8 before a nullable struct: -1 null, 1 present."""
    cdef int8_t m
    if c.end - c.pos < 1:
        raise_short(c.pos, 1, c.end)
    m = <int8_t>c.buf[c.pos]
    if m != -1 and m != 1:
        raise_marker(c.pos, m)
    c.pos += 1
    return m

cdef inline bint is_ascii(const unsigned char* p, Py_ssize_t n) noexcept nogil:
    cdef uint64_t word, acc = 0
    cdef Py_ssize_t i = 0
    while i + 8 <= n:
        memcpy(&word, p + i, 8)
        acc |= word
        i += 8
    while i < n:
        acc |= p[i]
        i += 1
    return (acc & 0x8080808080808080ULL) == 0


cdef inline PyObject* new_str(Cursor* c, Py_ssize_t start, long long n) except NULL:
    """The n bytes at c as a str (a new reference); start is where their length began."""
    cdef PyObject* r
    if n > 0x7FFF:
        raise_string_too_long(start, n)
    if c.end - c.pos < n:
        raise_short(start, c.pos - start + n, c.end)
    if is_ascii(c.buf + c.pos, <Py_ssize_t>n):
        # ASCII is its own UTF-8: a compact ASCII str filled directly (Kafka's strings
        # nearly always are; PyUnicode_DecodeUTF8's set-up costs more than the copy).
        # Such a str keeps its characters right after its header (PyUnicode_DATA's
        # answer for it, without testing its kind).
        r = _new_str(<Py_ssize_t>n, 127)
        if r == NULL:
            raise MemoryError()
        memcpy(<PyASCIIObject*>r + 1, c.buf + c.pos, <size_t>n)
    else:
        r = _decode_utf8(<const char*>c.buf + c.pos, <Py_ssize_t>n, NULL)
        if r == NULL:
            raise_utf8(start)
    c.pos += n
    return r

cdef inline object take_str(Cursor* c, Py_ssize_t start, long long n):
    return fk_steal(new_str(c, start, n))

cdef inline PyObject* new_compact_str(Cursor* c, bint nullable) except NULL:
    """A compact (nullable) string as a new reference, None for null."""
    cdef Py_ssize_t start = c.pos
    cdef long long n = rd_uvarint(c)
    if n == 0:
        if not nullable:
            raise_null(start)
        return fk_none()
    return new_str(c, start, n - 1)

cdef inline object rd_compact_string(Cursor* c):
    return fk_steal(new_compact_str(c, False))

cdef inline object rd_compact_nullable_string(Cursor* c):
    return fk_steal(new_compact_str(c, True))

cdef inline Py_ssize_t rd_array_len(Cursor* c, int compact, int nullable, Py_ssize_t min_size) except -2:
    """An array count, -1 for null; the count must fit in the bytes left."""
    cdef Py_ssize_t start = c.pos
    cdef long long n
    if compact:
        n = rd_uvarint(c) - 1
    else:
        n = rd_i32(c)
        if n < -1:
            raise_bad_length(start, n)
    if n == -1:
        if not nullable:
            raise_null(start)
        return -1
    if n * min_size > c.end - c.pos:
        raise_count(start, n, c.end - c.pos)
    return <Py_ssize_t>n

cdef inline PyObject* new_unknown_tags(Cursor* c) except NULL:
    """A tagged-field section with no known tags: None, or {tag: raw bytes} (a new
    reference)."""
    cdef long long n = rd_uvarint(c)
    if n == 0:
        return fk_none()
    v = rd_tags_slow(c, n)
    Py_INCREF(v)
    return <PyObject*>v

cdef inline object rd_unknown_tags(Cursor* c):
    return fk_steal(new_unknown_tags(c))


# ---- writing: one pass into a buffer that grows on demand (a bytes object being
# filled), or into a caller's fixed buffer, where running out of room is an error.

cdef inline int uvarint_size(unsigned long long v) noexcept nogil:
    cdef int n = 1
    while v >= 0x80:
        v >>= 7
        n += 1
    return n

cdef inline Py_ssize_t close_into(Buf* b) except -1:
    """encode_into: copy the finished message to the caller's buffer; returns its size."""
    cdef Py_ssize_t n = b.p - b.start
    if n > b.dest_room:
        raise_buffer_too_small(n, b.dest_room)
    memcpy(b.dest, b.start, n)
    return n

cdef inline void release_into(Buf* b, Py_buffer* view) noexcept:
    if b.owner != NULL:  # a message too large for the scratch area
        Py_XDECREF(b.owner)
        b.owner = NULL
    PyBuffer_Release(view)

cdef inline unsigned char* room(Buf* b, Py_ssize_t n) except NULL:
    """Where the next n bytes go; the caller advances b.p past what it wrote. Compared
    unsigned, a negative n (a size that overflowed) exceeds any room: grow rejects it."""
    if <size_t>(b.end - b.p) < <size_t>n:
        grow(b, n)
    return b.p

cdef inline Py_ssize_t mul_size(Py_ssize_t n, int width) except -1:
    """The bytes of n items of `width` bytes; an error past what a message may hold,
    before the product can overflow."""
    if <size_t>n > <size_t>(MAX_MESSAGE // width):
        raise_too_large()
    return n * width

cdef inline int wr_uvarint(Buf* b, unsigned long long v) except -1:
    cdef unsigned char* p = room(b, uvarint_size(v))
    while v >= 0x80:
        p[0] = (v & 0x7F) | 0x80
        p += 1
        v >>= 7
    p[0] = <unsigned char>v
    b.p = p + 1
    return 0

cdef inline long long as_int(object v, long long lo, long long hi, int kind) except? -1:
    cdef int overflow = 0
    cdef long long x
    if type(v) is int:
        x = PyLong_AsLongLongAndOverflow(v, &overflow)
        if overflow == 0 and lo <= x <= hi:
            return x
    return as_int_slow(v, kind)

cdef inline int8_t as_i8(object v) except? -1:
    return <int8_t>as_int(v, -128, 127, 0)

cdef inline int16_t as_i16(object v) except? -1:
    return <int16_t>as_int(v, -32768, 32767, 1)

cdef inline int32_t as_i32(object v) except? -1:
    return <int32_t>as_int(v, -2147483648LL, 2147483647LL, 2)

cdef inline int64_t as_i64(object v) except? -1:
    return <int64_t>as_int(v, INT64_MIN, INT64_MAX, 3)

cdef inline uint16_t as_u16(object v) except? 0xFFFF:
    return <uint16_t>as_int(v, 0, 65535, 4)

cdef inline uint32_t as_u32(object v) except? 0xFFFFFFFF:
    return <uint32_t>as_int(v, 0, 4294967295LL, 5)

cdef inline int wr_i8(Buf* b, int8_t v) except -1:
    room(b, 1)[0] = <unsigned char>v
    b.p += 1
    return 0

cdef inline int wr_i16(Buf* b, int16_t v) except -1:
    store16(room(b, 2), <uint16_t>v)
    b.p += 2
    return 0

cdef inline int wr_u16(Buf* b, uint16_t v) except -1:
    store16(room(b, 2), v)
    b.p += 2
    return 0

cdef inline int wr_i32(Buf* b, int32_t v) except -1:
    store32(room(b, 4), <uint32_t>v)
    b.p += 4
    return 0

cdef inline int wr_u32(Buf* b, uint32_t v) except -1:
    store32(room(b, 4), v)
    b.p += 4
    return 0

cdef inline int wr_i64(Buf* b, int64_t v) except -1:
    store64(room(b, 8), <uint64_t>v)
    b.p += 8
    return 0

cdef inline const char* utf8_of(object s, Py_ssize_t* n) except NULL:
    """The UTF-8 of a str, without copying it."""
    cdef const char* data
    if type(s) is not str:
        raise_not_str(s)
    if PyUnicode_IS_COMPACT_ASCII(s):
        # ASCII strings store their characters as one byte each: that is their UTF-8.
        n[0] = PyUnicode_GET_LENGTH(s)
        data = <const char*>PyUnicode_DATA(s)
    else:
        data = _as_utf8(s, n)  # CPython caches it in the object
    if data == NULL:
        raise_not_encodable()
    if n[0] > 0x7FFF:
        raise_string_length(n[0])
    return data

cdef inline int put_raw(Buf* b, const char* data, Py_ssize_t n) except -1:
    memcpy(room(b, n), data, n)
    b.p += n
    return 0

cdef inline int wr_string(Buf* b, object s) except -1:
    cdef Py_ssize_t n
    cdef const char* data = utf8_of(s, &n)
    wr_i16(b, <int16_t>n)
    return put_raw(b, data, n)

cdef inline int wr_nullable_string(Buf* b, object s) except -1:
    if s is None:
        return wr_i16(b, -1)
    return wr_string(b, s)

cdef inline int wr_compact_string(Buf* b, object s) except -1:
    cdef Py_ssize_t n
    cdef const char* data = utf8_of(s, &n)
    wr_uvarint(b, n + 1)
    return put_raw(b, data, n)

cdef inline int wr_compact_nullable_string(Buf* b, object s) except -1:
    if s is None:
        return wr_uvarint(b, 0)
    return wr_compact_string(b, s)

cdef inline int wr_count(Buf* b, Py_ssize_t n, int compact) except -1:
    """An array count or bytes length: an unsigned varint of n + 1 (at most 32 bits), or
    an int32; anything larger than the field can say is an EncodeError."""
    if compact:
        if <size_t>n > 0xFFFFFFFEU:
            raise_too_long(n, compact)
        return wr_uvarint(b, <unsigned long long>n + 1)
    if <size_t>n > 0x7FFFFFFFU:
        raise_too_long(n, compact)
    return wr_i32(b, <int32_t>n)

cdef inline Py_ssize_t seq_len(object items) except -1:
    """How many items a list or tuple stores. A subclass is read as what it stores: its
    own __len__ (which could say anything) is never called, nor __getitem__."""
    if PyList_Check(items):
        return PyList_GET_SIZE(items)
    if PyTuple_Check(items):
        return PyTuple_GET_SIZE(items)
    raise_not_list(items)

cdef inline Py_ssize_t wr_array_len(Buf* b, object items, int compact, int nullable) except -1:
    """Writes an array's count (or its null marker) and returns the count (0 for null)."""
    cdef Py_ssize_t n
    if items is None:
        if not nullable:
            raise_null_array()
        if compact:
            wr_uvarint(b, 0)
        else:
            wr_i32(b, -1)
        return 0
    n = seq_len(items)
    wr_count(b, n, compact)
    return n

cdef inline object item_at(object items, Py_ssize_t i, Py_ssize_t n):
    """Element i of a list or tuple whose count n is already written; a list must not
    have changed size since (a callback during encoding can change it)."""
    cdef PyObject* v
    if PyList_Check(items):
        v = fk_list_item(items, i, n)  # NULL: its size changed
        if v == NULL:
            raise_changed()
        return fk_steal(v)
    if PyTuple_Check(items):
        return <object>PyTuple_GET_ITEM(items, i)  # immutable: its size is n
    raise_not_list(items)

cdef inline object unknown_tags(object value):
    """unknown_tagged_fields as a struct keeps it: None when empty, else the dict, checked."""
    if value is None:
        return None
    return unknown_tags_slow(value)

cdef inline int wr_tags(Buf* b, object known, object unknown) except -1:
    if not known and not unknown:
        return wr_uvarint(b, 0)
    return wr_tags_slow(b, known, unknown)

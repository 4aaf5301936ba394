# Writing the records of a batch (included by _records.pyx): from Record objects and
# from RecordColumns, into one bytes object.

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


cdef object _encode_objects(object records, int64_t base_offset, int64_t now, W* w):
    """Write the records after w.used -> (count, last offset delta, first and max
    timestamp), or None for the pure writer to do. A list is read as it is now: under the
    GIL no Python code runs while it is written; on a free-threaded build, where another
    thread may shrink it meanwhile, from a copy made under its lock (_ft.h)."""
    cdef PyObject* items
    if type(records) is not list:
        return _encode_items(records, base_offset, now, w)
    items = fk_list_now(records)
    try:
        return _encode_items(<object>items, base_offset, now, w)
    finally:
        fk_release_slots(&items, 1)


cdef object _encode_items(object records, int64_t base_offset, int64_t now, W* w):
    cdef Py_ssize_t n = len(records), i, j, hn, klen, start
    cdef int64_t ts, first = 0, top = 0, delta = 0, ts_delta
    cdef PyObject* v
    cdef PyObject* h
    cdef PyObject* item
    cdef PyObject* held[R_HELD]  # a record's slots and its headers' items (fk_read_slots)
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
        # pure writer reads. (No Python code runs in this loop; what another thread may
        # change meanwhile on a free-threaded build is read with references of our own.)
        if type(r) is not Record:
            return None
        fk_read_slots(r, RECORD_SLOTS, R_HEADER_ITEMS, held)
        held[R_HEADER_ITEMS] = NULL
        try:
            v = held[R_TIMESTAMP]
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
            v = held[R_OFFSET]
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
            v = held[R_KEY]
            if v == NULL or not w_obj(w, v):
                return None
            v = held[R_VALUE]
            if v == NULL or not w_obj(w, v):
                return None
            h = held[R_HEADERS]
            if h == NULL or not PyList_CheckExact(h):
                return None
            h = held[R_HEADER_ITEMS] = fk_list_now(<object>h)
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
        finally:
            fk_release_slots(held, R_HELD)
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
    From the first check to the last byte written no Python code runs. Another thread may
    still write into the arrays meanwhile, on any build: numpy lets go of the GIL while it
    copies a large array (`cols.value.offsets[:] = other`). So every array the sizes and
    bounds come from (all but the bytes and the null flags) is read from a copy of our own,
    made once every getter has run: the values checked are the values written."""
    cdef const int64_t[::1] offset
    cdef const int64_t[::1] timestamp
    cdef const int32_t[::1] hoffs_view
    try:
        headers = cols.headers
        offset_a = exact_array(cols.offset, DT_INT64)
        offset = offset_a
        timestamp_a = exact_array(cols.timestamp, DT_INT64)
        timestamp = timestamp_a
        hoffs_a = exact_array(headers.offsets, DT_INT32)
        hoffs_view = hoffs_a
        key = _Bin(cols.key)
        value = _Bin(cols.value)
        hkey = _Bin(headers.key)
        hvalue = _Bin(headers.value)
    except (ValueError, TypeError, AttributeError, BufferError):
        return None  # not arrays of these types: the pure writer converts or refuses them
    # every getter has run: copies of what sizes and bounds come from
    offset = offset_a.copy()
    timestamp = timestamp_a.copy()
    hoffs_view = hoffs_a.copy()
    key.own()
    value.own()
    hkey.own()
    hvalue.own()
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



# The dtypes the compiled writer takes, by index into DTYPE_NUMS (numpy's type numbers,
# looked up when numpy is first needed: objects are written without it).
cdef enum:
    DT_UINT8, DT_INT32, DT_INT64, DT_BOOL
cdef object _ndarray = None
cdef int DTYPE_NUMS[4]


cdef object _ndarray_lock = _thread.allocate_lock()


cdef object exact_array(object a, int dtype):
    """`a` itself when it is an ndarray (not a subclass: no hook of a user's runs when it
    is viewed) of that native dtype; TypeError otherwise (the pure writer then decides)."""
    global _ndarray
    cdef int i
    if _ndarray is None:
        with _ndarray_lock:  # set once: a replaced global could be freed under a reader
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
    cdef object offs_a     # the offsets array itself (own() copies it)
    cdef Py_ssize_t n
    cdef Py_ssize_t size
    cdef Py_ssize_t longest  # the longest value's bytes
    cdef bint ok

    def __cinit__(self, col):
        # Taken only: _encode_columns checks once every column is taken.
        data, offs, nulls = col.data, col.offsets, col.nulls
        self.data = exact_array(data, DT_UINT8)
        self.offs_a = exact_array(offs, DT_INT32)
        self.offs = self.offs_a
        self.nulls = exact_array(nulls, DT_BOOL)  # bools are one byte, 0 or 1
        self.n = self.nulls.shape[0]
        self.size = self.data.shape[0]
        self.ok = False

    cdef int own(self) except -1:
        """Read the offsets from a copy of our own from now on (see _encode_columns)."""
        self.offs = self.offs_a.copy()
        return 0

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
        put_be(w.buf + AT_LENGTH, <uint64_t>(w.used - 12), 4)
        put_be(w.buf + AT_EPOCH, <uint64_t><uint32_t>partition_leader_epoch, 4)
        w.buf[AT_MAGIC] = 2
        put_be(w.buf + AT_ATTRIBUTES, <uint64_t><uint16_t>attributes, 2)
        put_be(w.buf + AT_LAST_DELTA, <uint64_t><uint32_t><int32_t>last_delta, 4)
        put_be(w.buf + AT_BASE_TS, <uint64_t><int64_t>first, 8)
        put_be(w.buf + AT_MAX_TS, <uint64_t><int64_t>top, 8)
        put_be(w.buf + AT_PRODUCER_ID, <uint64_t>producer_id, 8)
        put_be(w.buf + AT_PRODUCER_EPOCH, <uint64_t><uint16_t>producer_epoch, 2)
        put_be(w.buf + AT_SEQUENCE, <uint64_t><uint32_t>base_sequence, 4)
        put_be(w.buf + AT_COUNT, <uint64_t><uint32_t><int32_t>count, 4)
        with nogil:
            crc = fkw_crc32c(0, w.buf + AT_ATTRIBUTES, w.used - AT_ATTRIBUTES)
        put_be(w.buf + AT_CRC, crc, 4)
        return w_take(&w)
    finally:
        w_close(&w)

# Reading into columns (included by _records.pyx): the fast path and ColumnsBuilder.

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


cdef object _np = None

cdef inline int32_t be32(const unsigned char* p) noexcept nogil:
    return <int32_t>((<uint32_t>p[0] << 24) | (<uint32_t>p[1] << 16) | (<uint32_t>p[2] << 8) | p[3])


cdef inline int16_t be16(const unsigned char* p) noexcept nogil:
    return <int16_t>((p[0] << 8) | p[1])


cdef inline int64_t be64(const unsigned char* p) noexcept nogil:
    return <int64_t>((<uint64_t><uint32_t>be32(p) << 32) | <uint32_t>be32(p + 4))


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


cdef object _np_lock = _thread.allocate_lock()


cdef int load_numpy() except -1:
    global _np, _DTYPES
    cdef int i
    if _np is None:
        with _np_lock:  # set once: a replaced global could be freed under a reader
            if _np is None:
                import numpy
                _DTYPES = tuple(numpy.dtype(name) for name in DTYPE_NAMES)
                for i in range(N_ARRAYS):
                    ITEM_SIZES[i] = _DTYPES[i].itemsize
                _np = numpy
    return 0


cdef class ColumnsBuilder:
    """Columns filled batch after batch (read_columns): arrays sized for the most the
    bytes of a batch could need, doubled when the next batch needs more, and cut to what
    was used (as views: the untouched pages cost address space, not memory) at the end."""
    cdef list arrays
    cdef void* ptrs[N_ARRAYS]  # where each array's items are (NULL: none yet)
    cdef Cols cols
    cdef Py_ssize_t rows, row_cap, hrow_cap
    cdef Py_ssize_t data_cap[4]
    cdef Py_ssize_t rows_hint, bytes_hint

    def __cinit__(self, Py_ssize_t rows_hint=0, Py_ssize_t bytes_hint=0):
        """rows_hint / bytes_hint: the records and the bytes past their least that every
        batch to come holds together, if known: the first arrays are made that large, so
        that the batches after the first do not copy them as they grow."""
        load_numpy()
        self.arrays = [None] * N_ARRAYS
        memset(self.ptrs, 0, sizeof(self.ptrs))
        self.rows = self.row_cap = self.hrow_cap = 0
        self.data_cap[0] = self.data_cap[1] = self.data_cap[2] = self.data_cap[3] = -1
        self.cols.key.used = self.cols.value.used = self.cols.hkey.used = self.cols.hvalue.used = 0
        self.cols.hrows = 0
        self.rows_hint, self.bytes_hint = max(rows_hint, 0), max(bytes_hint, 0)

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
            first_rows, first_free = max(count, self.rows_hint), max(free, self.bytes_hint)
            first_hrows, first_hbytes = header_room(first_rows, first_free)
            self._first(first_rows, first_free, max(hrows, first_hrows), max(hbytes, first_hbytes))
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

    def add_run(self, data, Py_ssize_t pos, bint check_crc):
        """Take the whole batches from data[pos:] on that need nothing but the fast path:
        uncompressed magic 2 batches, CRC32C right (when check_crc), records that read
        on the first try. Return where it stopped: at the first batch it did not take
        (the batch walk reads that one, and raises its error if it has one), or the end.
        (The walk's header reads and checks, here in C: they cost as much as a 16 KiB
        batch's records when made in Python.)"""
        cdef Py_buffer view
        cdef const unsigned char* b
        cdef Py_ssize_t n, size, end, start, free, hrows, hbytes, r0
        cdef long long count
        cdef int attrs
        cdef int64_t base_offset, base_ts, max_ts
        cdef Cols sub
        cdef bint appended
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)  # held: the data cannot be resized
        try:
            b = <const unsigned char*>view.buf
            n = view.len
            while 0 <= pos and n - pos >= HEADER:
                size = be32(b + pos + AT_LENGTH)
                if size < HEADER - 12 or size > n - pos - 12 or b[pos + AT_MAGIC] != 2:
                    break
                attrs = be16(b + pos + AT_ATTRIBUTES)
                if attrs & 7:  # compressed
                    break
                end = pos + 12 + size
                start = pos + HEADER
                count = be32(b + pos + AT_COUNT)
                if count < 0 or count > (end - start) // MIN_RECORD:
                    break
                if check_crc and fkw_crc32c(0, b + pos + AT_CRC + 4, end - pos - AT_CRC - 4) \
                        != <uint32_t>be32(b + pos + AT_CRC):
                    break
                base_offset = be64(b + pos)
                base_ts = be64(b + pos + AT_BASE_TS)
                max_ts = be64(b + pos + AT_MAX_TS)
                free = end - start - MIN_RECORD * count if count else 0
                hrows, hbytes = header_room(count, free)
                if self.arrays[A_OFFSET] is None:
                    first_rows, first_free = max(count, self.rows_hint), max(free, self.bytes_hint)
                    first_hrows, first_hbytes = header_room(first_rows, first_free)
                    self._first(first_rows, first_free, max(hrows, first_hrows),
                                max(hbytes, first_hbytes))
                r0 = self.rows
                self._room(count, free, free, hrows, hbytes, hbytes)
                if self.rows != r0 or r0 + count > self.row_cap:
                    raise RuntimeError("a ColumnsBuilder was used while it grew")
                sub = self._batch_cols(r0)
                if not _columns_fast(b, start, end, count, base_offset, base_ts, attrs & 8,
                                     max_ts, &sub):
                    break
                if max(sub.key.used, sub.value.used, sub.hkey.used, sub.hvalue.used,
                       sub.hrows) > _records_python.COLUMN_LIMIT:
                    break  # add() raises the error
                self.cols.key.used = sub.key.used
                self.cols.value.used = sub.value.used
                self.cols.hkey.used = sub.hkey.used
                self.cols.hvalue.used = sub.hvalue.used
                self.cols.hrows = sub.hrows
                self.rows = r0 + count
                pos = end
        finally:
            PyBuffer_Release(&view)
        return pos

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


def size_hints(data):
    """(records, bytes past their least) of the whole magic 2 batches at the start of
    `data`: _records_python.size_hints, in C."""
    cdef Py_buffer view
    cdef const unsigned char* b
    cdef Py_ssize_t n, pos = 0, size, rows = 0, free = 0, body
    cdef long long count
    try:
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    except (TypeError, BufferError, ValueError):
        return 0, 0
    b = <const unsigned char*>view.buf
    n = view.len
    while n - pos >= HEADER:
        size = be32(b + pos + AT_LENGTH)
        if size < HEADER - 12 or size > n - pos - 12 or b[pos + AT_MAGIC] != 2:
            break
        count = be32(b + pos + AT_COUNT)
        body = size - (HEADER - 12)
        if 0 < count <= body // MIN_RECORD:
            rows += count
            free += body - MIN_RECORD * count
        pos += 12 + size
    PyBuffer_Release(&view)
    return rows, free


def batch_headers(data, Py_ssize_t end):
    """The header fields of the whole batches in data[:end] that the Arrow converter reads,
    as numpy arrays, one item a batch: (position, magic, base offset, attributes (of magic
    2 batches; 0 else), last offset delta, producer id, record count). `data[:end]` is
    batches read_columns has read: a length that does not fit raises ValueError."""
    cdef Py_buffer view
    cdef const unsigned char* b
    cdef Py_ssize_t pos, size, k, n = 0
    cdef int64_t* p_at
    cdef int8_t* p_magic
    cdef int64_t* p_base
    cdef int16_t* p_attrs
    cdef int32_t* p_delta
    cdef int64_t* p_producer
    cdef int32_t* p_count
    load_numpy()
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if end < 0 or end > view.len:
            raise ValueError("end outside the data")
        b = <const unsigned char*>view.buf
        pos = 0
        while pos < end:  # count, checking every length
            if end - pos < 17:
                raise ValueError(f"no whole batch at {pos}")
            size = be32(b + pos + AT_LENGTH)
            if size < 5 or size > end - pos - 12 or (b[pos + AT_MAGIC] == 2 and size < HEADER - 12):
                raise ValueError(f"no whole batch at {pos}")
            pos += 12 + size
            n += 1
        at = _np.empty(n, _np.int64)
        magic = _np.empty(n, _np.int8)
        base = _np.empty(n, _np.int64)
        attrs = _np.zeros(n, _np.int16)
        last_delta = _np.zeros(n, _np.int32)
        producer = _np.full(n, -1, _np.int64)
        count = _np.zeros(n, _np.int32)
        p_at = <int64_t*>array_ptr(at)
        p_magic = <int8_t*>array_ptr(magic)
        p_base = <int64_t*>array_ptr(base)
        p_attrs = <int16_t*>array_ptr(attrs)
        p_delta = <int32_t*>array_ptr(last_delta)
        p_producer = <int64_t*>array_ptr(producer)
        p_count = <int32_t*>array_ptr(count)
        pos = 0
        for k in range(n):
            # Checked again: code run by the allocations above could have changed the bytes.
            size = be32(b + pos + AT_LENGTH)
            if size < 5 or size > end - pos - 12 or (b[pos + AT_MAGIC] == 2 and size < HEADER - 12):
                raise_changed()
            p_at[k] = pos
            p_magic[k] = <int8_t>b[pos + AT_MAGIC]
            p_base[k] = be64(b + pos)
            if b[pos + AT_MAGIC] == 2:
                p_attrs[k] = be16(b + pos + AT_ATTRIBUTES)
                p_delta[k] = be32(b + pos + AT_LAST_DELTA)
                p_producer[k] = be64(b + pos + AT_PRODUCER_ID)
                p_count[k] = be32(b + pos + AT_COUNT)
            pos += 12 + size
    finally:
        PyBuffer_Release(&view)
    return at, magic, base, attrs, last_delta, producer, count

# Reading the records of a batch (included by _records.pyx): one checked loop for
# Record objects and for columns (where it also measures a batch for the columns).

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
            raise_reason(
                f"offset out of the int64 range (base offset {base_offset} + {offset_delta})",
                start,
            )
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
        raise_reason(
            f"{_e.count(end - c.pos, 'byte')} after the batch's {_e.count(count, 'record')}", c.pos
        )
    if out is not None:
        PyObject_GC_Track(<PyObject*>out)
    return out

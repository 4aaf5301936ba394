# CRC32C (included by _records.pyx): the checked arguments, then the C of _crc32c.h.

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

# The partitioners' key hash for the client accelerators (_kafka_python.pyx, _aiokafka.pyx).
from cpython.buffer cimport PyBUF_SIMPLE, PyBuffer_Release, PyObject_GetBuffer
from cpython.bytearray cimport PyByteArray_AS_STRING, PyByteArray_GET_SIZE
from libc.stdint cimport uint32_t


cdef extern from "_murmur2.h":
    uint32_t murmur2_hash "fk_murmur2"(const unsigned char* p, Py_ssize_t n) nogil


cdef extern from "_ft.h":
    bint FREE_THREADED_BUILD "FK_FREE_THREADED"


cdef inline bint murmur2_of(object data, uint32_t* h) except -1:
    """Java's Utils.murmur2 of bytes or a bytearray into h: True, or False (h untouched)
    for any other type, which the client's own function hashes."""
    cdef Py_buffer view
    if type(data) is bytes:
        h[0] = murmur2_hash(<const unsigned char*><bytes>data, len(<bytes>data))
        return True
    if type(data) is not bytearray:
        return False
    if not FREE_THREADED_BUILD:  # nothing can resize it while the hash runs
        h[0] = murmur2_hash(<const unsigned char*>PyByteArray_AS_STRING(data),
                            PyByteArray_GET_SIZE(data))
        return True
    # Without the GIL another thread may resize it meanwhile: an export holds it still
    # (that thread's resize is a BufferError then).
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    h[0] = murmur2_hash(<const unsigned char*>view.buf, view.len)
    PyBuffer_Release(&view)
    return True

# cython: language_level=3, boundscheck=False, wraparound=False, cdivision=True, freethreading_compatible=True
"""The compiled kernel of fastkwire.records, the twin of _records_python.py: the records
inside one batch read (as objects or columns) and written, and CRC32C.

By concern, in include files: _records_crc.pxi (CRC32C), _records_read.pxi (the
records as objects, and the checked loop that columns fall back on), _records_columns.pxi
(columns), _records_write.pxi (writing); the C helpers are in _records.h.

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
from libc.stdint cimport int8_t, int16_t, int32_t, int64_t, uint8_t, uint16_t, uint32_t, uint64_t, INT64_MAX, INT64_MIN
from libc.string cimport memcmp, memcpy, memmove, memset

import _thread  # threading's own locks, without importing threading

from fastkwire import errors as _e
from fastkwire._records_model import BinaryColumn, HeaderColumns, Record, RecordColumns
from fastkwire import _records_python, _wire
from fastkwire.errors import DecodeError


cdef extern from "_crc32c.h":
    void fkw_crc32c_setup()
    uint32_t fkw_crc32c(uint32_t crc, const unsigned char* p, size_t n) nogil
    uint32_t fkw_crc32c_table(uint32_t crc, const unsigned char* p, size_t n) nogil
    int fkw_crc_hw_on


cdef extern from "Python.h":
    ctypedef struct PyTypeObject:
        PyObject* (*tp_alloc)(PyTypeObject*, Py_ssize_t)
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


cdef extern from "_slots.h":
    # the same checked offsets as the engine's (_core.pxd)
    Py_ssize_t slot_offset "fk_slot_offset"(object cls, object name) except -1


cdef extern from "_ft.h":
    # Reads of what another thread may change meanwhile (see _ft.h)
    void fk_read_slots(object o, const Py_ssize_t* offs, int n, PyObject** out)
    void fk_release_slots(PyObject** v, int n)
    PyObject* fk_list_now(object items) except NULL


cdef extern from "_records.h":
    PyObject* gc_new "fkw_gc_new"(PyTypeObject* tp)
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
    int uvarint_size "fkw_uvarint_size"(uint64_t v) noexcept nogil


fkw_crc32c_setup()

DEF MIN_RECORD = 7
DEF MIN_HEADER = 2
DEF HEADER = 61  # a batch's header, before its records
# The wire table's numbers, or the module does not load.
if (MIN_RECORD, MIN_HEADER, HEADER) != (_wire.MIN_RECORD, _wire.MIN_HEADER, _wire.BATCH_HEADER_SIZE):
    raise ImportError("fastkwire._records was built for another wire table (_wire.py)")
# Where encode_batch puts each header field.
cdef Py_ssize_t AT_LENGTH = _wire.BATCH_OFFSETS["batch_length"]
cdef Py_ssize_t AT_EPOCH = _wire.BATCH_OFFSETS["partition_leader_epoch"]
cdef Py_ssize_t AT_MAGIC = _wire.BATCH_OFFSETS["magic"]
cdef Py_ssize_t AT_CRC = _wire.BATCH_OFFSETS["crc"]
cdef Py_ssize_t AT_ATTRIBUTES = _wire.BATCH_OFFSETS["attributes"]
cdef Py_ssize_t AT_LAST_DELTA = _wire.BATCH_OFFSETS["last_offset_delta"]
cdef Py_ssize_t AT_BASE_TS = _wire.BATCH_OFFSETS["base_timestamp"]
cdef Py_ssize_t AT_MAX_TS = _wire.BATCH_OFFSETS["max_timestamp"]
cdef Py_ssize_t AT_PRODUCER_ID = _wire.BATCH_OFFSETS["producer_id"]
cdef Py_ssize_t AT_PRODUCER_EPOCH = _wire.BATCH_OFFSETS["producer_epoch"]
cdef Py_ssize_t AT_SEQUENCE = _wire.BATCH_OFFSETS["base_sequence"]
cdef Py_ssize_t AT_COUNT = _wire.BATCH_OFFSETS["record_count"]


include "_records_crc.pxi"


# ---------------------------------------------------------------- Record objects

cdef PyTypeObject* RECORD_TYPE = <PyTypeObject*><PyObject*>Record
cdef Py_ssize_t S_OFFSET = slot_offset(Record, "offset")
cdef Py_ssize_t S_TIMESTAMP = slot_offset(Record, "timestamp")
cdef Py_ssize_t S_KEY = slot_offset(Record, "key")
cdef Py_ssize_t S_VALUE = slot_offset(Record, "value")
cdef Py_ssize_t S_HEADERS = slot_offset(Record, "headers")
# The slots the writer reads of a Record, at once (fk_read_slots), in this order; then the
# headers list's items as they are now (fk_list_now).
cdef enum:
    R_TIMESTAMP, R_OFFSET, R_KEY, R_VALUE, R_HEADERS, R_HEADER_ITEMS, R_HELD
cdef Py_ssize_t RECORD_SLOTS[5]
RECORD_SLOTS[:] = [S_TIMESTAMP, S_OFFSET, S_KEY, S_VALUE, S_HEADERS]

cdef inline void put(PyObject* o, Py_ssize_t offset, object v) noexcept:
    # A fresh object: its slots are NULL.
    Py_INCREF(v)
    (<PyObject**>(<char*>o + offset))[0] = <PyObject*>v


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


include "_records_read.pxi"
include "_records_columns.pxi"
include "_records_write.pxi"

/* C helpers of _aiokafka.pyx. */
#ifndef FASTKWIRE_AIOKAFKA_H
#define FASTKWIRE_AIOKAFKA_H
#include <Python.h>
#include <stdint.h>

/* The getset descriptor's getter for obj: what obj.name gives where the descriptor is
 * the attribute of obj's type (an immutable type without instance dicts, checked by the
 * caller), without the attribute lookup. */
static inline PyObject *fka_get(PyObject *descr, PyObject *obj) {
    PyGetSetDef *def = ((PyGetSetDescrObject *)descr)->d_getset;
    return def->get(obj, def->closure);
}

/* 1 when descr is a getset descriptor with a getter. */
static inline int fka_is_getter(PyObject *descr) {
    return Py_IS_TYPE(descr, &PyGetSetDescr_Type) &&
           ((PyGetSetDescrObject *)descr)->d_getset->get != NULL;
}
/* object.__new__(type): what calling type does before its __init__, where type's
 * __new__ is object's (checked by the caller). */
static inline PyObject *fka_new(PyObject *type) {
    PyObject *args = PyTuple_New(0), *o;
    if (args == NULL)
        return NULL;
    o = PyBaseObject_Type.tp_new((PyTypeObject *)type, args, NULL);
    Py_DECREF(args);
    return o;
}

/* aiokafka's compiled MemoryRecords (0.14.0: a Cython class with a vtable, then
 * `bytes _buffer` and `Py_ssize_t _pos`). Its layout is checked once against a live
 * instance (fka_records_layout_ok) before the loop reads a records object of that
 * exact type through it. */
typedef struct {
    PyObject_HEAD
    void *vtab;
    PyObject *buffer;
    Py_ssize_t pos;
} fka_memory_records;

static inline Py_ssize_t fka_records_size(void) { return (Py_ssize_t)sizeof(fka_memory_records); }

/* records' buffer, a new reference (NULL where it is not bytes), and its position. */
static inline PyObject *fka_records_buffer(PyObject *records, Py_ssize_t *pos) {
    fka_memory_records *r = (fka_memory_records *)records;
    PyObject *buffer = r->buffer;
    if (buffer == NULL || !PyBytes_CheckExact(buffer))
        return NULL;
    *pos = r->pos;
    Py_INCREF(buffer);
    return buffer;
}

static inline Py_ssize_t fka_records_pos(PyObject *records) {
    return ((fka_memory_records *)records)->pos;
}

/* *out = a + b: 0 where the sum does not fit in int64 (nothing written). */
static inline int fka_add64(int64_t a, int64_t b, int64_t *out) {
    if ((b > 0 && a > INT64_MAX - b) || (b < 0 && a < INT64_MIN - b))
        return 0;
    *out = a + b;
    return 1;
}
#endif

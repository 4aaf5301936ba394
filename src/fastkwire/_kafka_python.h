/* C helpers of _kafka_python.pyx. */
#ifndef FASTKWIRE_KAFKA_PYTHON_H
#define FASTKWIRE_KAFKA_PYTHON_H
#include <Python.h>
#include <stdint.h>

/* An instance of the tuple subclass tp (a namedtuple) holding items[0..n-1], as
 * tuple.__new__(tp, items) makes it. Below 3.14 the steps of CPython's
 * tuple_subtype_new without its argument parsing: tp_alloc, then the items, with
 * nothing in between that could run the collector. From 3.14 tuples cache their hash,
 * which tp_new resets; so there it goes through tp_new. */
static PyObject *fkp_tuple_of(PyObject *type, PyObject *const *items, Py_ssize_t n) {
    PyTypeObject *tp = (PyTypeObject *)type;
#if PY_VERSION_HEX < 0x030E0000
    PyObject *o = tp->tp_alloc(tp, n);
    if (o == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(o, i, items[i]);
    }
    return o;
#else
    PyObject *t = PyTuple_New(n), *args, *o;
    if (t == NULL)
        return NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(items[i]);
        PyTuple_SET_ITEM(t, i, items[i]);
    }
    args = PyTuple_Pack(1, t);
    Py_DECREF(t);
    if (args == NULL)
        return NULL;
    o = PyTuple_Type.tp_new(tp, args, NULL);
    Py_DECREF(args);
    return o;
#endif
}


/* type.__dict__[name] without the mappingproxy (borrowed; NULL when absent). */
static PyObject *fkp_type_attr(PyObject *type, PyObject *name) {
    PyObject *d = ((PyTypeObject *)type)->tp_dict;
    return d ? PyDict_GetItemWithError(d, name) : NULL;
}

/* type.__new__(type), as object.__new__ makes it for a class without a __new__ of its own. */
static PyObject *fkp_new(PyObject *type) {
    PyTypeObject *tp = (PyTypeObject *)type;
    PyObject *args = PyTuple_New(0), *o;
    if (args == NULL)
        return NULL;
    o = tp->tp_new(tp, args, NULL);
    Py_DECREF(args);
    return o;
}

/* An object slot of o at offset off (from fk_slot_offset) set to v: a new reference
 * stored, the old value released after. */
static void fkp_set_slot(PyObject *o, Py_ssize_t off, PyObject *v) {
    PyObject **slot = (PyObject **)((char *)o + off);
    PyObject *old = *slot;
    Py_INCREF(v);
    *slot = v;
    Py_XDECREF(old);
}

/* The class's version tag: CPython gives a class a new one (or 0) whenever an attribute
 * of it or of a base changes, so an unchanged nonzero tag means an unchanged class. */
static unsigned int fkp_version_tag(PyObject *type) {
#ifdef Py_GIL_DISABLED
    /* another thread may change the class meanwhile: CPython loads it atomically too */
    return __atomic_load_n(&((PyTypeObject *)type)->tp_version_tag, __ATOMIC_RELAXED);
#else
    return ((PyTypeObject *)type)->tp_version_tag;
#endif
}

/* A ClassGuard's remembered tags: threads sharing one guard read and write them at once
 * on a free-threaded build (any value read is one some thread stored). */
static inline unsigned int fkp_load_tag(const unsigned int *p) {
#ifdef Py_GIL_DISABLED
    return __atomic_load_n(p, __ATOMIC_RELAXED);
#else
    return *p;
#endif
}

static inline void fkp_store_tag(unsigned int *p, unsigned int v) {
#ifdef Py_GIL_DISABLED
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
#else
    *p = v;
#endif
}

/* Ask CPython to give the class a version tag now (a lookup through its cache does). */
static unsigned int fkp_assign_version_tag(PyObject *type) {
#if PY_VERSION_HEX >= 0x030C0000
    PyUnstable_Type_AssignVersionTag((PyTypeObject *)type);
#else
    PyObject *name = PyUnicode_InternFromString("__init__");
    if (name == NULL) {
        PyErr_Clear();
        return 0;
    }
    (void)_PyType_Lookup((PyTypeObject *)type, name);
    Py_DECREF(name);
#endif
    return fkp_version_tag(type);
}

static inline uint64_t fkp_be(const unsigned char *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v = (v << 8) | p[i];
    return v;
}

/* kafka-python's DefaultRecordBatch.HEADER_STRUCT.unpack_from(p) (">qiibIhiqqqhii", 61
 * bytes the caller has checked): a tuple of 13 ints. It holds only ints, so it is made
 * untracked, as CPython's collector would leave it at its first pass. */
static PyObject *fkp_batch_header(const unsigned char *p) {
    static const unsigned char at[13] = {0, 8, 12, 16, 17, 21, 23, 27, 35, 43, 51, 53, 57};
    static const unsigned char size[13] = {8, 4, 4, 1, 4, 2, 4, 8, 8, 8, 2, 4, 4};
    PyObject *t = PyTuple_New(13);
    if (t == NULL)
        return NULL;
    PyObject_GC_UnTrack(t);
    for (int i = 0; i < 13; i++) {
        uint64_t raw = fkp_be(p + at[i], size[i]);
        PyObject *v;
        if (i == 4)  /* the CRC: unsigned */
            v = PyLong_FromUnsignedLong((unsigned long)raw);
        else if (size[i] == 8)
            v = PyLong_FromLongLong((long long)raw);
        else if (size[i] == 4)
            v = PyLong_FromLong((long)(int32_t)(uint32_t)raw);
        else if (size[i] == 2)
            v = PyLong_FromLong((long)(int16_t)(uint16_t)raw);
        else
            v = PyLong_FromLong((long)(int8_t)(uint8_t)raw);
        if (v == NULL) {
            Py_DECREF(t);  /* unfilled items are NULL: tuple dealloc skips them */
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, v);
    }
    return t;
}

/* (a, b) for a str and bytes-or-None: untracked, as the collector would leave it. */
static PyObject *fkp_atomic_pair(PyObject *a, PyObject *b) {
    PyObject *t = PyTuple_New(2);
    if (t == NULL)
        return NULL;
    PyObject_GC_UnTrack(t);
    Py_INCREF(a);
    PyTuple_SET_ITEM(t, 0, a);
    Py_INCREF(b);
    PyTuple_SET_ITEM(t, 1, b);
    return t;
}

#endif

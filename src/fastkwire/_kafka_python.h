/* C helpers of _kafka_python.pyx. */
#ifndef FASTKWIRE_KAFKA_PYTHON_H
#define FASTKWIRE_KAFKA_PYTHON_H
#include <Python.h>

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

#endif

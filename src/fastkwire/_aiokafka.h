/* C helpers of _aiokafka.pyx. */
#ifndef FASTKWIRE_AIOKAFKA_H
#define FASTKWIRE_AIOKAFKA_H
#include <Python.h>

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
#endif

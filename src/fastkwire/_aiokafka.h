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
#endif

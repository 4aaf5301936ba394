/* A list of n empty (NULL) slots that the collector has never seen.
 *
 * PyList_New tracks its list at once, so a caller that fills it slot by slot must untrack
 * it first (a collection run by an allocation while it fills would hand gc.get_objects()
 * walkers a list with NULL items). Allocating the list object ourselves skips the
 * track-then-untrack and PyList_New's generality, for the small lists a Metadata
 * response is made of (three per partition). list_dealloc frees it as any list: the
 * object with tp_free, the slots with PyMem_Free. The free-threaded build keeps its slots behind a header of its own, so
 * there the list comes from PyList_New. */
#ifndef FASTKWIRE_UNTRACKED_LIST_H
#define FASTKWIRE_UNTRACKED_LIST_H
#include <Python.h>

static PyObject* fk_untracked_list(Py_ssize_t n)
{
#ifdef Py_GIL_DISABLED
    PyObject* o = PyList_New(n);
    if (o != NULL)
        PyObject_GC_UnTrack(o);
    return o;
#else
    PyListObject* o;
    PyObject** items = NULL;
    if (n < 0 || (size_t)n > PY_SSIZE_T_MAX / sizeof(PyObject*)) {
        PyErr_NoMemory();
        return NULL;
    }
    if (n > 0) {
        items = (PyObject**)PyMem_Calloc((size_t)n, sizeof(PyObject*));  /* NULL: a list
                                                 * freed half-filled (a decode error) */
        if (items == NULL)
            return PyErr_NoMemory();
    }
    o = PyObject_GC_New(PyListObject, &PyList_Type);  /* not tracked until asked */
    if (o == NULL) {
        PyMem_Free(items);
        return NULL;
    }
    o->ob_item = items;
    Py_SET_SIZE(o, n);
    o->allocated = n;
    return (PyObject*)o;
#endif
}

#endif

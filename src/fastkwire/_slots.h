/* The offset of an object slot in a class's instances, checked as CPython's own member
 * descriptors check before they read or write one (descrobject.c, structmember.c).
 *
 * The compiled code writes decoded values straight into instances at these offsets, so
 * an offset is taken only from what the class really carries: the attribute found on
 * its MRO (never a metaclass's or instance's __getattr__) must be a member descriptor
 * (a slot, not a property or another class's object), declared by the class or one of
 * its bases (a descriptor copied from an unrelated class describes another layout), of
 * an object slot that may be written (T_OBJECT_EX, not read-only), lying inside the
 * instance. Anything else is the TypeError CPython gives for such a descriptor.
 * No Python code runs here: _PyType_Lookup reads the type's dicts and its cache. */
#ifndef FASTKWIRE_SLOTS_H
#define FASTKWIRE_SLOTS_H
#include <Python.h>
#ifndef Py_T_OBJECT_EX  /* before 3.12 the member types lived in structmember.h */
#include <structmember.h>
#define Py_T_OBJECT_EX T_OBJECT_EX
#define Py_READONLY READONLY
#endif

static Py_ssize_t fk_slot_offset(PyObject* cls, PyObject* name)
{
    PyTypeObject* t = (PyTypeObject*)cls;
    PyObject* descr;
    PyMemberDescrObject* m;
    Py_ssize_t off;
    if (!PyType_Check(cls) || !PyUnicode_Check(name)) {
        PyErr_SetString(PyExc_TypeError, "a slot of a class is asked by its name");
        return -1;
    }
    descr = _PyType_Lookup(t, name);  /* borrowed; the class keeps it */
    if (descr == NULL) {
        if (!PyErr_Occurred())
            PyErr_Format(PyExc_TypeError, "%s has no slot %R", t->tp_name, name);
        return -1;
    }
    if (!Py_IS_TYPE(descr, &PyMemberDescr_Type)) {
        PyErr_Format(PyExc_TypeError, "%s.%U is not a slot (a %s)", t->tp_name, name,
                     Py_TYPE(descr)->tp_name);
        return -1;
    }
    m = (PyMemberDescrObject*)descr;
    if (!PyType_IsSubtype(t, m->d_common.d_type)) {
        /* CPython's words when such a descriptor meets an instance of this class */
        PyErr_Format(PyExc_TypeError, "descriptor '%U' for '%s' objects doesn't apply to a "
                     "'%s' object", name, m->d_common.d_type->tp_name, t->tp_name);
        return -1;
    }
    off = m->d_member->offset;
    if (m->d_member->type != Py_T_OBJECT_EX || (m->d_member->flags & Py_READONLY)) {
        PyErr_Format(PyExc_TypeError, "%s.%U is not a writable object slot", t->tp_name, name);
        return -1;
    }
    if (off < (Py_ssize_t)sizeof(PyObject)
            || off > m->d_common.d_type->tp_basicsize - (Py_ssize_t)sizeof(PyObject*)
            || off % (Py_ssize_t)sizeof(PyObject*) != 0) {
        PyErr_Format(PyExc_TypeError, "%s.%U: offset %zd outside its instances", t->tp_name,
                     name, off);
        return -1;
    }
    return off;
}

#endif

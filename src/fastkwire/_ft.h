/* Reading what another thread may change at the same time, on a free-threaded build.
 *
 * Under the GIL no Python code runs between a load and the reference the compiled code
 * takes, so a slot's or a list item's pointer may be read and used as it is. Without the
 * GIL another thread may assign the attribute or the list item meanwhile, and free the
 * old value between the load and the Py_INCREF. Each helper here is the GIL build's plain
 * read there, and on a free-threaded build the read CPython's own code makes safe:
 * a slot under the object's critical section (which PyMember_SetOne, every attribute
 * assignment to a slot, also holds while it swaps the pointer), a list item through
 * PyList_GetItemRef, a list's items through a copy made under the list's lock.
 */
#ifndef FASTKWIRE_FT_H
#define FASTKWIRE_FT_H
#include <Python.h>
#include <stdint.h>

#ifdef Py_GIL_DISABLED
#define FK_FREE_THREADED 1
#else
#define FK_FREE_THREADED 0
#endif

/* A reference the caller owns, passed through: Cython takes a C function returning
 * `object` as handing over a new reference. */
static inline PyObject* fk_steal(PyObject* o)
{
    return o;
}

/* A new reference to None. None is immortal from 3.12 on: its count is never changed
 * (Py_RETURN_NONE there takes no reference), which saves the immortality check. */
static inline PyObject* fk_none(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return Py_None;
#else
    return Py_NewRef(Py_None);
#endif
}

/* A new reference to the object in the slot at `offset` of o, or NULL (no error) when
 * the slot is empty. */
static inline PyObject* fk_slot_ref(PyObject* o, Py_ssize_t offset)
{
    PyObject** p = (PyObject**)((char*)o + offset);
#ifdef Py_GIL_DISABLED
    PyObject* v;
    Py_BEGIN_CRITICAL_SECTION(o);
    v = Py_XNewRef(*p);
    Py_END_CRITICAL_SECTION();
    return v;
#else
    return Py_XNewRef(*p);
#endif
}

/* The slots at offs[0..n) of o, read at once into out: borrowed under the GIL (the caller
 * runs no Python code while it uses them), new references on a free-threaded build, which
 * fk_release_slots drops. */
static inline void fk_read_slots(PyObject* o, const Py_ssize_t* offs, int n, PyObject** out)
{
    int k;
#ifdef Py_GIL_DISABLED
    Py_BEGIN_CRITICAL_SECTION(o);
    for (k = 0; k < n; k++)
        out[k] = Py_XNewRef(*(PyObject**)((char*)o + offs[k]));
    Py_END_CRITICAL_SECTION();
#else
    for (k = 0; k < n; k++)
        out[k] = *(PyObject**)((char*)o + offs[k]);
#endif
}

static inline void fk_release_slots(PyObject** v, int n)
{
#ifdef Py_GIL_DISABLED
    int k;
    for (k = 0; k < n; k++)
        Py_CLEAR(v[k]);
#else
    (void)v;
    (void)n;
#endif
}

/* A list's items as they are now, for a loop that reads them with PyList_GET_ITEM: the
 * list itself under the GIL (borrowed: nothing can change it while the loop runs), a copy
 * made under the list's lock on a free-threaded build (a new reference, which
 * fk_release_slots drops); NULL with an exception if the copy fails. */
static inline PyObject* fk_list_now(PyObject* list)
{
#ifdef Py_GIL_DISABLED
    return PyList_GetSlice(list, 0, PY_SSIZE_T_MAX);
#else
    return list;
#endif
}

/* Item i of a list whose size must still be n, as a new reference; NULL (no error)
 * when its size changed (an encoder then says "changed while encoded"). */
static inline PyObject* fk_list_item(PyObject* list, Py_ssize_t i, Py_ssize_t n)
{
#ifdef Py_GIL_DISABLED
    PyObject* v;
    if (PyList_GET_SIZE(list) != n)
        return NULL;
    v = PyList_GetItemRef(list, i);  /* NULL and IndexError if it shrank meanwhile */
    if (v == NULL)
        PyErr_Clear();
    return v;
#else
    if (PyList_GET_SIZE(list) != n)
        return NULL;
    return Py_NewRef(PyList_GET_ITEM(list, i));
#endif
}

/* Item i of a list (of size n when measured) when it is an exact int from -2**63+1 to
 * 2**63-1 that fits `width` bytes; else INT64_MIN (the caller then takes the careful way,
 * which also finds a list that changed size). Under the GIL the item is read without a
 * reference: nothing can free it while its value is read. */
static inline int64_t fk_plain_int(PyObject* items, Py_ssize_t i, Py_ssize_t n, int width)
{
    PyObject* it;
    int overflow = 0;
    long long x;
    if (!PyList_Check(items) || PyList_GET_SIZE(items) != n)
        return INT64_MIN;
#ifdef Py_GIL_DISABLED
    it = PyList_GetItemRef(items, i);
    if (it == NULL) {
        PyErr_Clear();
        return INT64_MIN;
    }
    x = PyLong_CheckExact(it) ? PyLong_AsLongLongAndOverflow(it, &overflow) : INT64_MIN;
    Py_DECREF(it);
#else
    it = PyList_GET_ITEM(items, i);
    if (!PyLong_CheckExact(it))
        return INT64_MIN;
    x = PyLong_AsLongLongAndOverflow(it, &overflow);
#endif
    if (overflow || x == INT64_MIN)
        return INT64_MIN;
    if ((width == 4 && !(x >= -2147483648LL && x <= 2147483647LL))
            || (width == 2 && !(x >= -32768 && x <= 32767)))
        return INT64_MIN;
    return x;
}

/* A new reference to d[key], or NULL (no error) when absent. */
static inline PyObject* fk_dict_get_ref(PyObject* d, PyObject* key)
{
#ifdef Py_GIL_DISABLED
    PyObject* v = NULL;
    if (PyDict_GetItemRef(d, key, &v) < 0)
        PyErr_Clear();
    return v;
#else
    return Py_XNewRef(PyDict_GetItem(d, key));
#endif
}

/* The plan used last and its version (the engine's cache, see plan_of); the plan is
 * borrowed: the engine keeps every plan it published for as long as the module lives.
 * Per thread on a free-threaded build, so that threads decoding different messages do
 * not overwrite each other's pair and no thread reads a pair another is writing; one for
 * the process under the GIL (no Python code runs between the two writes), where a
 * thread-local would cost a call per read in a shared library. */
#ifdef Py_GIL_DISABLED
#if defined(_MSC_VER)
#define FK_LAST __declspec(thread)
#else
#define FK_LAST _Thread_local
#endif
#else
#define FK_LAST
#endif
static FK_LAST PyObject* fk_last_plan = NULL;
static FK_LAST int fk_last_version = -1;

static inline PyObject* fk_cached_plan(int version)
{
    return fk_last_version == version ? fk_last_plan : NULL;
}

static inline void fk_cache_plan(PyObject* p, int version)
{
    fk_last_plan = p;
    fk_last_version = version;
}

#endif

/* Message and struct classes whose instances carry no collector header, as msgspec's
 * gc=False Structs: allocated without the 16-byte GC head, never tracked, freed by a
 * deallocator of our own.
 *
 * A class made by `type()` with __slots__ is a collector type. fk_make_plain() turns one
 * (before it has instances) into a plain type: it clears Py_TPFLAGS_HAVE_GC, frees with
 * PyObject_Free and deallocates with fk_dealloc. It refuses any class whose layout it
 * cannot vouch for: bases without state of their own (the size of a bare object: the
 * mixins), object slots from there to the class's size (the caller checks them against
 * the slot descriptors), no __dict__, no __weakref__, no finalizer. Its base may be a
 * collector type (every class made by `type()` is one): the base's deallocator is never
 * called, fk_dealloc frees the whole object.
 *
 * The trade-off msgspec documents for gc=False: a reference cycle through such an object
 * (a message appended to a list held by its own attribute) is never collected.
 *
 * fk_alloc allocates one without PyType_GenericAlloc's generality (item counts, the
 * collector, calloc's size arithmetic): a plain instance is basicsize bytes of object
 * slots, all NULL until the engine or __init__ fills them.
 *
 * fk_dealloc frees nested plain objects in place up to FK_DEPTH levels, and past that
 * iteratively: a plain object reaching zero that deep goes on a pending stack, freed once
 * the outermost free is done, so a chain of any depth built through attributes (plain
 * objects have no trashcan) costs bounded C stack. In place first because deferring
 * every object (the first design) touched each one twice, the second time after the
 * rest of a wide message had pushed it out of the cache: a 10,000-member LeaveGroup
 * freed at 1.5x msgspec's time with 0.63x its instructions.
 *
 * On a free-threaded build plain_class's gc.disable() does not stop another thread's
 * gc.collect(), whose callbacks could make an instance of a class before it is plain:
 * there that is harmless (fk_free).
 *
 * The depth and the pending stack are per thread, and the stack belongs to the outermost
 * free under way in that thread (it lives in that call's frame, grown on the heap only
 * past FK_INLINE objects, and is gone when the call returns). A finalizer or another
 * thread's frees cannot meet it: when they were process-wide, one thread sitting in a
 * finalizer 64 levels down sent every other thread's frees to the pending stack, where
 * they waited (+55 MB over 20,000 decode-and-free rounds). Per thread, it needs no lock
 * on a free-threaded build either.
 */
#ifndef FASTKWIRE_PLAIN_TYPES_H
#define FASTKWIRE_PLAIN_TYPES_H
#include <Python.h>

#define FK_DEPTH 64   /* nested frees done in place; each level is a few C frames */
#define FK_INLINE 64  /* pending objects held in the outermost call's frame */

#if defined(_MSC_VER)
#define FK_THREAD_LOCAL __declspec(thread)
#else
#define FK_THREAD_LOCAL _Thread_local
#endif

typedef struct {
    PyObject** items;
    Py_ssize_t n, cap;
    PyObject* inline_items[FK_INLINE];
} fk_pending_stack;

static FK_THREAD_LOCAL int fk_depth = 0;  /* this thread's fk_dealloc calls under way */
static FK_THREAD_LOCAL fk_pending_stack* fk_pending = NULL;  /* the outermost call's */

static void fk_dealloc(PyObject* self);

static PyObject* fk_alloc(PyTypeObject* type, Py_ssize_t nitems)
{
    PyObject* self = (PyObject*)PyObject_Malloc((size_t)type->tp_basicsize);
    (void)nitems;  /* plain types have no items (fk_make_plain checks tp_itemsize) */
    if (self == NULL)
        return PyErr_NoMemory();
    memset(self, 0, (size_t)type->tp_basicsize);
    return PyObject_Init(self, type);  /* takes a reference to the (heap) type */
}

static void fk_free(PyObject* self)
{
    PyTypeObject* type = Py_TYPE(self);
    PyTypeObject* own = type;
    Py_ssize_t off;
    while (own->tp_dealloc != fk_dealloc)  /* a subclass's subtype_dealloc called us */
        own = own->tp_base;
    for (off = own->tp_base->tp_basicsize; off < own->tp_basicsize; off += sizeof(PyObject*)) {
        PyObject** slot = (PyObject**)((char*)self + off);
        Py_CLEAR(*slot);
    }
#ifdef Py_GIL_DISABLED
    /* Made while its class was still a collector type: without the GIL, another thread's
     * gc.collect() can run its callbacks while plain_class turns the class, and one may
     * find the class and make an instance. This build puts no collector header before
     * an object (its collector state is in the object's own header), so PyObject_Free
     * frees that instance whole; it is only untracked first. */
    PyObject_GC_UnTrack(self);
#endif
    type->tp_free(self);
    Py_DECREF(type);  /* instances of heap types hold a reference to their type */
}

static int fk_defer(fk_pending_stack* st, PyObject* self)
{
    if (st->n == st->cap) {
        Py_ssize_t cap = st->cap * 2;
        PyObject** grown;
        if (st->items == st->inline_items) {
            grown = (PyObject**)PyMem_RawMalloc((size_t)cap * sizeof(PyObject*));
            if (grown != NULL)
                memcpy(grown, st->items, (size_t)st->n * sizeof(PyObject*));
        } else {
            grown = (PyObject**)PyMem_RawRealloc(st->items, (size_t)cap * sizeof(PyObject*));
        }
        if (grown == NULL)
            return 0;  /* no room: the caller frees it now, recursing one level */
        st->items = grown;
        st->cap = cap;
    }
    st->items[st->n++] = self;
    return 1;
}

static void fk_dealloc(PyObject* self)
{
    fk_pending_stack own;
    /* Too deep: leave it to this thread's outermost call (a subclass's instance, freed
     * through its own subtype_dealloc, or no room on the stack: freed here, one level
     * deeper). */
    if (fk_depth >= FK_DEPTH && fk_pending != NULL && Py_TYPE(self)->tp_dealloc == fk_dealloc
            && fk_defer(fk_pending, self))
        return;
    if (fk_depth == 0) {
        own.items = own.inline_items;
        own.n = 0;
        own.cap = FK_INLINE;
        fk_pending = &own;
    }
    fk_depth++;
    fk_free(self);
    fk_depth--;
    if (fk_depth == 0) {
        fk_depth = 1;  /* what these frees reach deeply is pending on `own` again */
        while (own.n)
            fk_free(own.items[--own.n]);
        fk_depth = 0;
        fk_pending = NULL;
        if (own.items != own.inline_items)
            PyMem_RawFree(own.items);
    }
}

/* 0 when cls is now plain (or already was), -1 with an exception set. */
static int fk_make_plain(PyObject* cls)
{
    PyTypeObject* t = (PyTypeObject*)cls;
    PyTypeObject* base;
    if (!PyType_Check(cls) || !(t->tp_flags & Py_TPFLAGS_HEAPTYPE)) {
        PyErr_SetString(PyExc_TypeError, "fk_make_plain: not a class made by type()");
        return -1;
    }
    if (t->tp_dealloc == fk_dealloc)
        return 0;
    if (t->tp_alloc != PyType_GenericAlloc) {
        PyErr_Format(PyExc_TypeError, "%s: allocated by a tp_alloc of its own", t->tp_name);
        return -1;
    }
    base = t->tp_base;
    if (base == NULL || base->tp_basicsize != (Py_ssize_t)sizeof(PyObject) || t->tp_dictoffset != 0
            || t->tp_weaklistoffset != 0 || t->tp_finalize != NULL || t->tp_del != NULL
            || t->tp_itemsize != 0 || base->tp_itemsize != 0
            || (t->tp_basicsize - base->tp_basicsize) % (Py_ssize_t)sizeof(PyObject*) != 0) {
        PyErr_Format(PyExc_TypeError, "%s: not a layout of object slots only "
                     "(base size %zd, dict %zd, weakref %zd, finalizer %d, del %d)", t->tp_name,
                     base ? base->tp_basicsize : -1, t->tp_dictoffset, t->tp_weaklistoffset,
                     t->tp_finalize != NULL, t->tp_del != NULL);
        return -1;
    }
    t->tp_flags &= ~Py_TPFLAGS_HAVE_GC;
    t->tp_alloc = fk_alloc;
    t->tp_free = PyObject_Free;
    t->tp_dealloc = fk_dealloc;
    t->tp_is_gc = NULL;
    PyType_Modified(t);
    return 0;
}

#endif

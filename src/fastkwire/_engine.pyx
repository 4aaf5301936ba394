# cython: language_level=3, wraparound=False, boundscheck=False, freethreading_compatible=True
"""The compiled engine: one loop that reads and writes any struct from a compact plan.

The first time a message class meets a version, its wire layout (`_layout`) is compiled
into a `Plan`: an array of field descriptions (wire kind, flags, the slot offset of the
field in the object, the nested plan). Encoding and decoding walk that array; objects
are allocated with tp_alloc and their slots read and written at their offsets, as
msgspec does for its structs. The code does not grow with the number of messages.
"""
cimport cython
from cpython.ref cimport PyObject, Py_INCREF, Py_DECREF, Py_XDECREF
from cpython.mem cimport PyMem_Calloc, PyMem_Free
from cpython.buffer cimport PyBuffer_Release
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.list cimport PyList_SET_ITEM, PyList_CheckExact, PyList_GET_SIZE
from cpython.object cimport PyObject_RichCompareBool, Py_NE
from cpython.dict cimport PyDict_GetItem
from cpython.long cimport PyLong_FromUnsignedLong
from fastkwire._core cimport *

import gc as _gc
import _thread  # threading's own locks, without importing threading

from fastkwire import _wire
from fastkwire import errors as _e
from fastkwire._core import decode_options
from fastkwire._rules import check_version
from fastkwire.columns import TaskOffsetColumns
from fastkwire.errors import DecodeError, EncodeError


cdef extern from "_plain_types.h":
    int fk_make_plain(object cls) except -1


cdef extern from "Python.h":
    int PyObject_IS_GC(PyObject* o)
    int PyType_IsSubtype(PyTypeObject* a, PyTypeObject* b)
    bint PyType_IS_GC(PyTypeObject* t)
    PyTypeObject* Py_TYPE(PyObject* o)


# Wire kinds of a field (the wire table's K_ numbers: checked below).
cdef enum:
    K_BOOL, K_I8, K_I16, K_I32, K_I64, K_U16, K_U32, K_F64, K_UUID,
    K_STRING, K_BYTES, K_STRUCT,
    K_STRUCTS, K_INTS, K_STRINGS, K_SCALARS

# Flags of decode's options (the pure codec's decode_options makes them).
cdef enum:
    NUMPY_ARRAYS = 1   # arrays="numpy"
    RECORD_VIEWS = 2   # records="view"

# How a field's default is tested and made.
cdef enum:
    D_VALUE,   # a shared immutable value, compared with ==
    D_IS,      # None, True or False: compared by identity
    D_LIST,    # a new empty list; "default" means empty
    D_NEW      # a new struct of defaults (never-null struct fields); compared with ==

# The enums above are the wire table's numbers, or the module does not load.
if ((K_BOOL, K_I8, K_I16, K_I32, K_I64, K_U16, K_U32, K_F64, K_UUID, K_STRING, K_BYTES,
     K_STRUCT, K_STRUCTS, K_INTS, K_STRINGS, K_SCALARS) != tuple(range(16))
        or (_wire.K_SCALARS, _wire.K_STRUCT) != (K_SCALARS, K_STRUCT)
        or (D_VALUE, D_IS, D_LIST, D_NEW) != (_wire.D_VALUE, _wire.D_IS, _wire.D_LIST, _wire.D_NEW)
        or (NUMPY_ARRAYS, RECORD_VIEWS) != (_wire.NUMPY_ARRAYS, _wire.RECORD_VIEWS)
        or MAX_MESSAGE != _wire.MAX_MESSAGE):
    raise ImportError("fastkwire._engine was built for another wire table (_wire.py)")

cdef PyObject** _small_ints = small_int_table()  # shared int objects, see int_of
cdef object _UNSET = object()  # slot_value's answer for an empty slot, where None is a value
cdef dict _WIDTHS = {p.kind: p.width for p in _wire.PRIMITIVES.values() if p.width is not None}


cdef struct Field:
    int kind
    int elem               # element kind of K_SCALARS; byte width of K_INTS
    bint compact
    bint nullable
    bint columns           # []struct with a columnar form (arrays="numpy")
    bint ignorable
    bint records           # a records field: a view of the input with records="view"
    int dflt               # D_VALUE, D_IS or D_LIST
    Py_ssize_t offset      # the field's slot in the object
    long long tag
    PyObject* name         # borrowed: the Plan keeps every object it points to alive
    PyObject* versions     # the versions that have the field, as text (for errors)
    PyObject* default
    PyObject* cls          # the struct class of K_STRUCT / K_STRUCTS
    PyObject* sub          # the Plan of that struct
    int conv               # target plans: how the target class holds the value (C_ below)


@cython.no_gc
cdef class Plan:
    """One struct at one version, compiled.

    Its Fields point at objects without references of their own; `keep` holds them. So
    nothing a user reaches may be `keep`: the class is no collector type (a plan is
    never in a cycle: plans point down to sub-plans and values, which never point back),
    so gc.get_referents(plan) is empty, and `keep` is untracked from its creation
    (keep_list), so neither gc.get_objects() nor gc.get_referrers() finds it."""
    cdef Field* plain
    cdef Field* tagged     # sorted by tag
    cdef Field* absent
    cdef Py_ssize_t nplain, ntagged, nabsent
    cdef object cls
    cdef object struct_name
    cdef object message_name
    cdef Py_ssize_t unknown_offset
    cdef bint flexible
    cdef Py_ssize_t min_size
    cdef Py_ssize_t size_hint   # the last encoded size: the next buffer's first guess
    cdef list keep
    cdef object root_cls        # a message's root plan: the class it was compiled for
    # Target plans only (_engine_target.pxi): objects of a class the engine did not make.
    cdef bint target
    cdef bint single            # one untagged field: array items may be bare values
    cdef Py_ssize_t version_offset, tags_offset
    cdef object version_obj

    def __dealloc__(self):
        PyMem_Free(self.plain)
        PyMem_Free(self.tagged)
        PyMem_Free(self.absent)


# ---------------------------------------------------------------- compiling plans

cdef list keep_list(list items):
    """A Plan's `keep`: a list the collector never sees (see Plan)."""
    PyObject_GC_UnTrack(<PyObject*>items)
    return items


cdef object _lock = _thread.RLock()
cdef object _class_lock = _thread.allocate_lock()  # plain_class's
cdef dict _roots = {}   # message class -> list of Plan or None, indexed by version
cdef dict _subs = {}    # message class -> {Layout: Plan}
cdef list _published = keep_list([])  # every plan put in _roots, never dropped


cdef int fill(Field* f, object op, object cls, object root, dict memo, list keep) except -1:
    """A Field from a layout's Op: its kinds as the layout worked them out (the wire
    table's numbers), its slot, its default and its nested plan."""
    from fastkwire._layout import version_text  # not at import: see _classes
    field = op.field
    f.offset = slot_offset(cls, op.name)
    f.compact = op.compact
    f.nullable = op.nullable
    f.ignorable = field.ignorable
    f.tag = field.tag if field.tag is not None else -1
    name = op.name
    keep.append(name)
    f.name = <PyObject*>name
    f.dflt = op.default_kind
    d = op.default
    if f.dflt == D_NEW:
        d = root._CLASSES[field.struct.name]
    elif f.dflt == D_LIST:
        d = None
    keep.append(d)
    f.default = <PyObject*>d
    versions = version_text(field.versions)
    keep.append(versions)
    f.versions = <PyObject*>versions
    f.records = op.records
    if op.mode == "absent":
        if f.dflt == D_NEW:
            # Its default struct is made from a plan of the struct where the field exists
            # (any version's plan sets every field): cls() costs microseconds a message.
            lay = root._LAYOUTS.get(field.struct, field.versions.low)
            sub = compile_layout(root, lay, memo)
            keep.append(sub)
            f.sub = <PyObject*>sub
        return 0  # only its default and its slot are used
    f.kind = op.kind
    if f.kind == K_STRUCT or f.kind == K_STRUCTS:
        if op.sub is None:
            raise ValueError(f"{op.name}: a struct field without a layout")
        sub = compile_layout(root, op.sub, memo)
        keep.append(sub)
        f.sub = <PyObject*>sub
        f.cls = <PyObject*>(<Plan>sub).cls
        f.columns = op.columns is not None
    elif f.kind == K_INTS:
        f.elem = op.width
    elif f.kind == K_SCALARS:
        if op.width is None:
            raise NotImplementedError(f"arrays of {field.element_type}")
        f.elem = op.elem_kind
    return 0


cdef Field* fields_of(list ops, object cls, object root, dict memo, list keep) except NULL:
    cdef Field* out = <Field*>PyMem_Calloc(len(ops) + 1, sizeof(Field))
    cdef Py_ssize_t i
    if out == NULL:
        raise MemoryError()
    try:
        for i in range(len(ops)):
            fill(&out[i], ops[i], cls, root, memo, keep)
    except BaseException:
        PyMem_Free(out)
        raise
    return out


cdef Plan compile_layout(object root, object lay, dict memo):
    cdef Plan p = memo.get(lay)
    if p is not None:
        return p
    p = Plan.__new__(Plan)
    p.keep = keep_list([])
    p.cls = root._CLASSES[lay.struct.name]
    p.struct_name = lay.struct.name
    p.message_name = lay.message.name
    p.flexible = lay.flexible
    p.min_size = lay.min_size
    p.size_hint = 64
    p.unknown_offset = slot_offset(p.cls, "_unknown")
    plain, tagged, absent = lay.plain, lay.tagged, lay.absent
    p.plain = fields_of(plain, p.cls, root, memo, p.keep)
    p.nplain = len(plain)
    p.tagged = fields_of(tagged, p.cls, root, memo, p.keep)
    p.ntagged = len(tagged)
    p.absent = fields_of(absent, p.cls, root, memo, p.keep)
    p.nabsent = len(absent)
    memo[lay] = p
    return p


cdef Plan build_plan(object cls, int version):
    if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        raise _e.bad_version(cls._NAME, version, cls._VERSIONS)
    with _lock:
        plans = _roots.get(cls)
        if type(plans) is not list or len(plans) != cls.MAX_VERSION + 1:
            plans = [None] * (cls.MAX_VERSION + 1)
            _roots[cls] = plans
        p = plans[version]
        if type(p) is not Plan or (<Plan>p).root_cls is not cls:
            memo = _subs.setdefault(cls, {})
            p = compile_layout(cls, cls._LAYOUTS.root(version), memo)
            # encode writes from self at the plan's offsets: they must be self's class's
            # (a subclass whose _CLASSES or _LAYOUTS name another root class is refused)
            made = (<Plan>p).cls
            if not PyType_IsSubtype(<PyTypeObject*><PyObject*>cls, <PyTypeObject*><PyObject*>made):
                raise TypeError(f"{cls.__name__}: its layout is of {made.__name__}, "
                                "not of a base of it")
            (<Plan>p).root_cls = cls
            _published.append(p)  # for as long as the module: plan_of's cache borrows it
            plans[version] = p  # published last: readers without the lock see a whole plan
    return p


cdef inline int version_of(object version) except -1:
    """A version argument as a C int: an exact int in 0-32767, else the pure codec's
    UnsupportedVersionError, whatever the value (an int past 64 bits, a float, None...).
    Every entry point reads its version here first, as the pure engine does."""
    cdef int overflow = 0
    cdef long long v
    if type(version) is int:
        v = PyLong_AsLongLongAndOverflow(version, &overflow)  # cannot fail for an int
        if overflow == 0 and 0 <= v <= 0x7FFF:
            return <int>v
    check_version(version)  # raises
    raise AssertionError(f"check_version passed {version!r}")


cdef extern from "_ft.h":
    PyObject* fk_cached_plan(int version)  # the last plan if of this version, borrowed
    void fk_cache_plan(PyObject* p, int version)


cdef inline Plan plan_of(object cls, int version):
    """The plan of a version that version_of returned: the one used last (per thread on
    a free-threaded build, _ft.h), from the table, or compiled (and the version checked
    against the class's range) on first use."""
    cdef PyObject* last = fk_cached_plan(version)
    if last != NULL and (<Plan>last).root_cls is cls:
        return <Plan>last
    # (_roots is a module global, so a user may reach it: what it holds is checked; read
    # with references of our own, since another thread may be publishing a plan)
    cdef PyObject* raw = fk_dict_get_ref(_roots, cls)
    plans = None if raw == NULL else fk_steal(raw)
    if type(plans) is list:
        raw = fk_list_item(plans, version, PyList_GET_SIZE(plans)) \
            if version < PyList_GET_SIZE(plans) else NULL
        found = None if raw == NULL else fk_steal(raw)
        if type(found) is Plan and (<Plan>found).root_cls is cls:
            fk_cache_plan(<PyObject*>found, version)  # kept alive by _published
            return <Plan>found
    return build_plan(cls, version)


# ---------------------------------------------------------------- slots

cdef inline void put(object o, Py_ssize_t offset, object v) noexcept:
    cdef PyObject** slot = <PyObject**>(<char*><PyObject*>o + offset)
    cdef PyObject* old = slot[0]
    Py_INCREF(v)
    slot[0] = <PyObject*>v
    Py_XDECREF(old)

cdef int raise_unset(Field* f) except -1:
    raise EncodeError(f"{<object>f.name} is not set")

cdef inline PyObject* fresh_slot(object o, Py_ssize_t offset) noexcept:
    """The slot of an object this call made and has not handed out (borrowed)."""
    return (<PyObject**>(<char*><PyObject*>o + offset))[0]

cdef inline object slot_value(object o, Py_ssize_t offset, object unset):
    """What the slot holds, or `unset`; a reference of our own, read safely against
    another thread assigning the attribute meanwhile (_ft.h)."""
    cdef PyObject* v = fk_slot_ref(o, offset)
    if v == NULL:
        return unset
    return fk_steal(v)

cdef inline object take(object o, Field* f):
    """The field's value (a new reference), or EncodeError when it is unset."""
    cdef PyObject* v = fk_slot_ref(o, f.offset)
    if v == NULL:
        raise_unset(f)
    return fk_steal(v)

cdef object default_of(Field* f):
    if f.dflt == D_LIST:
        return []
    if f.dflt == D_NEW:
        if f.sub != NULL:  # made here: the class's Python __init__ is slow per message
            return new_default(<Plan>f.sub)
        return (<object>f.default)()
    return <object>f.default


cdef inline int put_defaults(object o, Field* fields, Py_ssize_t n) except -1:
    """Each field's default into the slots of a new object (all NULL)."""
    cdef Py_ssize_t i
    cdef Field* f
    for i in range(n):
        f = &fields[i]
        if f.dflt == D_VALUE or f.dflt == D_IS:  # shared immutable values: no call
            Py_INCREF(<object>f.default)
            (<PyObject**>(<char*><PyObject*>o + f.offset))[0] = f.default
        else:
            put(o, f.offset, default_of(f))
    return 0


cdef object new_default(Plan p):
    """A struct with every field of its version at its default, as cls() makes it."""
    o = fk_steal(new_object(<PyObject*>p.cls))
    put_defaults(o, p.plain, p.nplain)
    put_defaults(o, p.tagged, p.ntagged)
    put_defaults(o, p.absent, p.nabsent)
    put(o, p.unknown_offset, None)
    return o


cdef int field_is_default(Field* f, object x) except -2:
    """One field of a struct against the default's value, as the classes' == compares
    them (_model.struct_eq): 1 or 0, or -1 for a value that is not a builtin scalar or
    list (a numpy array, a user's type), whose == only Python may answer."""
    if f.dflt == D_NEW:
        return struct_is_default(<Plan>f.sub, x) if f.sub != NULL else -1
    if f.dflt == D_LIST:
        return (PyList_GET_SIZE(x) == 0) if type(x) is list else -1
    d = <object>f.default
    if x is d:
        return 1
    t = type(x)
    if x is None or t is int or t is str or t is bytes or t is bool or t is float:
        return 0 if PyObject_RichCompareBool(x, d, Py_NE) else 1  # struct_eq's x != y
    return -1


cdef int struct_is_default(Plan p, object v) except -2:
    """v == p.cls() (a struct of defaults) without making one: 1, 0, or -1 when only
    Python's == can tell (a subclass, an unset slot, a value field_is_default leaves)."""
    cdef Py_ssize_t i
    cdef Field* groups[3]
    cdef Py_ssize_t counts[3]
    cdef int g, r
    if type(v) is not p.cls:
        return -1
    groups[0], groups[1], groups[2] = p.plain, p.tagged, p.absent
    counts[0], counts[1], counts[2] = p.nplain, p.ntagged, p.nabsent
    for g in range(3):
        for i in range(counts[g]):
            x = slot_value(v, groups[g][i].offset, _UNSET)
            if x is _UNSET:
                return -1
            r = field_is_default(&groups[g][i], x)
            if r != 1:
                return r
    x = slot_value(v, p.unknown_offset, _UNSET)
    if x is _UNSET:
        return -1
    if x is None:
        return 1
    if type(x) is dict or type(x) is list:
        return 0 if x else 1  # struct_eq: (a._unknown or None) == None
    return -1


cdef inline bint is_default(Field* f, object v) except -1:
    cdef int r
    if f.dflt == D_LIST:
        return not v
    if f.dflt == D_IS:
        return v is <object>f.default
    if f.dflt == D_NEW:
        if f.sub != NULL:  # the common answers without the class's Python __init__ and ==
            r = struct_is_default(<Plan>f.sub, v)
            if r >= 0:
                return r
        return v == (<object>f.default)()
    return v == <object>f.default

cdef inline PyObject* new_object(PyObject* cls) except NULL:
    """A new instance of cls from its tp_alloc (a new reference): every slot NULL, no
    __init__ run, not tracked by the collector."""
    cdef PyObject* o = (<PyTypeObject*>cls).tp_alloc(<PyTypeObject*>cls, 0)
    if o == NULL:
        raise MemoryError()
    # Like msgspec's gc=False structs: nothing these objects hold can make a cycle
    # through them unless a user builds one, so the collector need not walk them. The
    # message classes are plain types (plain_class below): no collector header at all.
    # (A heap type's instances are collector objects exactly when it has the flag.)
    if PyType_IS_GC(Py_TYPE(o)):
        PyObject_GC_UnTrack(o)
    return o


def plain_class(name, bases, ns):
    """type(name, bases, ns) for a message or struct class whose instances are plain
    objects, as msgspec's gc=False Structs (_plain_types.h): no collector header, never
    tracked, freed by our own deallocator.

    Turning a class plain is sound only before it has instances (they would be freed
    without their collector header), so the class is made and turned here, with no
    Python code able to run in between: bases whose metaclass is `type` and that have
    no __init_subclass__ of their own, a first namespace of strings only (nothing with a
    __set_name__), and no collection (whose callbacks could find the new class). The
    rest of the namespace is set on the plain class after. Its layout must be its object
    slots, from its base's size to its own (checked from its slot descriptors)."""
    cdef Py_ssize_t start, end
    if type(name) is not str or type(bases) is not tuple or type(ns) is not dict:
        raise TypeError("plain_class(name: str, bases: tuple, ns: dict)")
    slots = ns.get("__slots__")
    if type(slots) is not tuple or any(type(n) is not str for n in slots):
        raise TypeError(f"{name}: __slots__ must be a tuple of str")
    for base in bases:
        if type(base) is not type:
            raise TypeError(f"{name}: a base whose metaclass is not type")
        for k in base.__mro__:
            if k is not object and "__init_subclass__" in k.__dict__:
                raise TypeError(f"{name}: a base with an __init_subclass__")
    first = {"__slots__": slots}
    for key in ("__module__", "__qualname__", "__doc__"):
        value = ns.get(key)
        if value is not None and type(value) is not str:
            raise TypeError(f"{name}: {key} must be a str")
        if key in ns:
            first[key] = value
    # Under the GIL, no collection means no Python code at all. On a free-threaded build
    # another thread's gc.collect() is not stopped by gc.disable(), but there an instance
    # made before the class is plain is freed safely (_plain_types.h, fk_free). The lock
    # keeps two threads making classes from re-enabling the collector under each other;
    # a lock of its own, taken with no other held here (plans are built under _lock while
    # they make classes, which another thread may be making under its own lock).
    with _class_lock:
        collecting = _gc.isenabled()
        _gc.disable()
        try:
            cls = type(name, bases, first)
            start, end = cls.__base__.__basicsize__, cls.__basicsize__
            offsets = sorted([slot_offset(cls, n) for n in slots])
            if offsets != list(range(start, end, sizeof(PyObject*))):
                raise TypeError(f"{name}: its slots are not its whole layout")
            fk_make_plain(cls)
        finally:
            if collecting:
                _gc.enable()
    for key, value in ns.items():
        if key not in first:
            setattr(cls, key, value)
    return cls


cdef inline object untracked(object items):
    # A decoded list holds scalars and untracked structs only, so (as for the structs)
    # the collector need not walk it; a cycle a user builds through it is never freed.
    if PyList_CheckExact(items):
        PyObject_GC_UnTrack(<PyObject*>items)
    return items


# ---------------------------------------------------------------- decoding

cdef object views_of(Cursor* c, object data, Py_buffer* view, int held, int opts):
    """For records="view": a memoryview of the input that record fields slice, set in
    the cursor. bytes are shared as they are; any other buffer is copied once into bytes
    (and its view released here), so the slices never change under the caller."""
    if not opts & RECORD_VIEWS:
        return None
    if held:
        data = PyBytes_FromStringAndSize(<const char*>c.buf, c.end)
    whole = memoryview(data)
    if held:  # last: nothing below can fail, so the caller releases the view on errors
        PyBuffer_Release(view)
        c.buf = <const unsigned char*>PyBytes_AS_STRING(data)
    c.whole = <PyObject*>whole
    return whole


cdef object read_message(object cls, object data, object version, object offset, object arrays,
                         object records, bint to_the_end, Py_ssize_t* end):
    """decode and decode_from: the message at offset; with to_the_end, trailing bytes are
    an error. Sets *end to where the message ends.

    The arguments are checked in the pure engine's order, so that a call with more than
    one bad argument fails as it does there: decode reads its data first, decode_from
    its version and options; then the offset, and last the version against the
    message's range."""
    cdef Cursor c
    cdef Py_buffer view
    cdef int v = 0, opts = 0, held = 0
    cdef Plan p
    if not to_the_end:
        v = version_of(version)
        opts = 0 if arrays == "list" and records == "bytes" else decode_options(arrays, records)
    held = open_input(&c, data, &view)
    try:
        if to_the_end:
            v = version_of(version)
            opts = 0 if arrays == "list" and records == "bytes" else decode_options(arrays, records)
        whole = views_of(&c, data, &view, held, opts)
        held = held and whole is None
        c.pos = start_at(offset, c.end)
        p = plan_of(cls, v)
        o = fk_steal(rd_struct(p, &c, opts))
        if to_the_end and c.pos != c.end:
            raise _e.trailing(c.pos, c.end - c.pos)
    finally:
        if held:
            PyBuffer_Release(&view)
    end[0] = c.pos
    return o


cdef inline object rd_scalar(int kind, Cursor* c, bint compact, bint nullable):
    if kind == K_STRING:
        if compact:
            return rd_compact_nullable_string(c) if nullable else rd_compact_string(c)
        return rd_nullable_string(c) if nullable else rd_string(c)
    elif kind == K_I32:
        return int_of(_small_ints, rd_i32(c))
    elif kind == K_I16:
        return int_of(_small_ints, rd_i16(c))
    elif kind == K_I64:
        return int_of(_small_ints, rd_i64(c))
    elif kind == K_I8:
        return int_of(_small_ints, rd_i8(c))
    elif kind == K_BOOL:
        return rd_bool(c)
    elif kind == K_U16:
        return int_of(_small_ints, rd_u16(c))
    elif kind == K_U32:
        return PyLong_FromUnsignedLong(rd_u32(c))
    elif kind == K_F64:
        return rd_float64(c)
    elif kind == K_UUID:
        return rd_uuid(c)
    else:
        if compact:
            return rd_compact_nullable_bytes(c) if nullable else rd_compact_bytes(c)
        return rd_nullable_bytes(c) if nullable else rd_bytes(c)


cdef object rd_structs(Field* f, Cursor* c, int arrays):
    cdef Plan sub = <Plan>f.sub
    cdef Py_ssize_t n, i = 0
    if f.columns and arrays & NUMPY_ARRAYS:
        return rd_task_offsets(c, f.compact, f.nullable, sub.flexible, sub.min_size, sub.cls)
    n = rd_array_len(c, f.compact, f.nullable, sub.min_size)
    if n < 0:
        return None
    items = new_list(n)  # untracked: the struct objects made below can run a collection
    try:
        for i in range(n):
            list_set_new(items, i, rd_struct(sub, c, arrays))
    except DecodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return items


cdef object rd_scalars(Field* f, Cursor* c):
    cdef Py_ssize_t n = rd_array_len(c, f.compact, f.nullable, _WIDTHS[f.elem])
    cdef Py_ssize_t i = 0
    if n < 0:
        return None
    items = new_list(n)  # untracked: a uuid.UUID made below can run a collection
    try:
        for i in range(n):
            it = rd_scalar(f.elem, c, f.compact, False)
            Py_INCREF(it)
            PyList_SET_ITEM(items, i, it)
    except DecodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return items


cdef object rd_view(Cursor* c, bint compact, bint nullable):
    """A records field as a slice of the input's memoryview: no copy."""
    cdef Py_ssize_t n = bytes_span(c, compact, nullable)
    return None if n < 0 else (<object>c.whole)[c.pos - n:c.pos]


cdef inline object rd_field(Field* f, Cursor* c, int arrays):
    if f.kind <= K_BYTES:
        if f.records and c.whole != NULL:
            return rd_view(c, f.compact, f.nullable)
        return rd_scalar(f.kind, c, f.compact, f.nullable)
    elif f.kind == K_STRUCT:
        if f.nullable and rd_marker(c) < 0:
            return None
        return fk_steal(rd_struct(<Plan>f.sub, c, arrays))
    elif f.kind == K_STRUCTS:
        return rd_structs(f, c, arrays)  # a list made untracked, or columns
    elif f.kind == K_INTS:
        return rd_int_array(c, f.elem, f.compact, f.nullable, arrays & NUMPY_ARRAYS)  # untracked
    elif f.kind == K_STRINGS:
        return untracked(rd_string_array(c, f.compact, f.nullable))
    else:
        return rd_scalars(f, c)  # made untracked


cdef object rd_tagged(Plan p, object o, Cursor* c, int arrays, Field** where):
    """The tagged-field section: known tags into their slots (defaults first), the rest
    returned as {tag: raw bytes} or None."""
    cdef Py_ssize_t i, k, ntags, size, tend, tstart, saved_end
    cdef Py_ssize_t last = -1
    cdef Field* f
    unknown = None
    for i in range(p.ntagged):
        put(o, p.tagged[i].offset, default_of(&p.tagged[i]))
    ntags = rd_uvarint(c)
    for k in range(ntags):
        where[0] = NULL
        last = rd_tag_header(c, last, &size)
        tend = c.pos + size
        f = NULL
        for i in range(p.ntagged):
            if p.tagged[i].tag == last:
                f = &p.tagged[i]
                break
        if f == NULL:
            if unknown is None:
                unknown = {}
            unknown[last] = rd_raw(c, size)
            continue
        where[0] = f
        tstart = c.pos
        saved_end = c.end
        c.end = tend  # the value must fit its declared size
        try:
            put(o, f.offset, rd_field(f, c, arrays))
        finally:
            c.end = saved_end
        if c.pos != tend:
            raise _e.tag_size_mismatch(tstart, last)
    where[0] = NULL
    return unknown


cdef int rd_boxed(Field* f, Cursor* c, int arrays, PyObject** slot) except -1:
    v = rd_field(f, c, arrays)
    Py_INCREF(v)
    slot[0] = <PyObject*>v
    return 0


cdef inline int rd_into(Field* f, Cursor* c, int arrays, PyObject** slot) except -1:
    """Field f's value into an empty slot of a struct being read, which takes the new
    reference: strings, ints and structs without a Python temporary (whose reference
    the slot would take and the caller drop), the other kinds through rd_field."""
    cdef int kind = f.kind
    if kind == K_STRING and f.compact:
        slot[0] = new_compact_str(c, f.nullable)
    elif kind == K_I32:
        slot[0] = new_int(_small_ints, rd_i32(c))
    elif kind == K_I16:
        slot[0] = new_int(_small_ints, rd_i16(c))
    elif kind == K_STRUCT and not f.nullable:
        slot[0] = rd_struct(<Plan>f.sub, c, arrays)
    else:
        rd_boxed(f, c, arrays, slot)
    return 0


cdef int rd_fields(Plan p, PyObject* o, Cursor* c, int arrays, Field** where) except -1:
    """The fields of p into the empty slots of o; *where is the field being read."""
    cdef Py_ssize_t i
    cdef char* base = <char*>o
    for i in range(p.nplain):
        where[0] = &p.plain[i]
        rd_into(where[0], c, arrays, <PyObject**>(base + where[0].offset))
    where[0] = NULL
    if not p.flexible:
        (<PyObject**>(base + p.unknown_offset))[0] = fk_none()
    elif p.ntagged == 0:
        (<PyObject**>(base + p.unknown_offset))[0] = new_unknown_tags(c)
    else:
        put(<object>o, p.unknown_offset, rd_tagged(p, <object>o, c, arrays, where))
    return put_defaults(<object>o, p.absent, p.nabsent)


cdef PyObject* rd_struct(Plan p, Cursor* c, int arrays) except NULL:
    """The struct at c, as a new reference (which its caller's container or slot takes
    over: no pair of reference counts per struct)."""
    cdef Field* where = NULL
    cdef PyObject* o = new_object(<PyObject*>p.cls)
    try:
        rd_fields(p, o, c, arrays, &where)
    except BaseException as x:
        Py_DECREF(<object>o)  # freed half-read: its empty slots are NULL
        if isinstance(x, DecodeError):
            raise x.with_prefix(<object>where.name if where != NULL else "") from None
        raise
    return o


# ---------------------------------------------------------------- encoding

cdef inline int wr_scalar(int kind, Buf* b, object v, bint compact, bint nullable) except -1:
    if kind == K_STRING:
        if compact:
            return wr_compact_nullable_string(b, v) if nullable else wr_compact_string(b, v)
        return wr_nullable_string(b, v) if nullable else wr_string(b, v)
    elif kind == K_I32:
        return wr_i32(b, as_i32(v))
    elif kind == K_I16:
        return wr_i16(b, as_i16(v))
    elif kind == K_I64:
        return wr_i64(b, as_i64(v))
    elif kind == K_I8:
        return wr_i8(b, as_i8(v))
    elif kind == K_BOOL:
        return wr_bool(b, v)
    elif kind == K_U16:
        return wr_u16(b, as_u16(v))
    elif kind == K_U32:
        return wr_u32(b, as_u32(v))
    elif kind == K_F64:
        return wr_float64(b, v)
    elif kind == K_UUID:
        return wr_uuid(b, v)
    else:
        if compact:
            return wr_compact_nullable_bytes(b, v) if nullable else wr_compact_bytes(b, v)
        return wr_nullable_bytes(b, v) if nullable else wr_bytes(b, v)


cdef int wr_one(Field* f, Buf* b, object v, int version) except -1:
    """A struct value of field f, after its type check."""
    cdef Plan sub = <Plan>f.sub
    if type(v) is not sub.cls:
        raise _e.wrong_type(sub.struct_name, v)
    return wr_struct(sub, v, b, version)


cdef int wr_structs(Field* f, Buf* b, object items, int version) except -1:
    cdef Py_ssize_t n, i = 0
    if f.columns and isinstance(items, TaskOffsetColumns):
        return wr_task_offsets(b, items, f.compact, (<Plan>f.sub).flexible)
    n = wr_array_len(b, items, f.compact, f.nullable)
    try:
        for i in range(n):
            wr_one(f, b, item_at(items, i, n), version)
    except EncodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return 0


cdef int wr_scalars(Field* f, Buf* b, object items) except -1:
    cdef Py_ssize_t n, i = 0
    n = wr_array_len(b, items, f.compact, f.nullable)
    try:
        for i in range(n):
            wr_scalar(f.elem, b, item_at(items, i, n), f.compact, False)
    except EncodeError as x:
        raise x.with_prefix(f"[{i}]") from None
    return 0


cdef inline int wr_field(Field* f, Buf* b, object v, int version) except -1:
    if f.kind <= K_BYTES:
        return wr_scalar(f.kind, b, v, f.compact, f.nullable)
    elif f.kind == K_STRUCT:
        if f.nullable:
            if v is None:
                return wr_i8(b, -1)
            wr_i8(b, 1)
        return wr_one(f, b, v, version)
    elif f.kind == K_STRUCTS:
        return wr_structs(f, b, v, version)
    elif f.kind == K_INTS:
        return wr_int_array(b, v, f.elem, f.compact, f.nullable)
    elif f.kind == K_STRINGS:
        return wr_string_array(b, v, f.compact, f.nullable)
    else:
        return wr_scalars(f, b, v)


cdef bytes encode_tagged(Field* f, object v, int version):
    cdef Buf b
    open_buf(&b, 16)
    try:
        wr_field(f, &b, v, version)
        return close_buf(&b)
    finally:
        discard_buf(&b)


cdef int wr_tagged(Plan p, object o, Buf* b, Field** where, int version) except -1:
    cdef Py_ssize_t i, j
    cdef Field* f
    cdef list known = None
    unknown = slot_value(o, p.unknown_offset, None)
    for i in range(p.ntagged):
        f = &p.tagged[i]
        where[0] = f
        v = take(o, f)
        payload = None if is_default(f, v) else encode_tagged(f, v, version)
        if payload is not None and known is None:
            known = [(p.tagged[j].tag, None) for j in range(i)]
        if known is not None:
            known.append((f.tag, payload))
    where[0] = NULL
    if known is None:  # every known tag at its default: the common case, no list
        if not unknown:
            return wr_uvarint(b, 0)
        known = [(p.tagged[j].tag, None) for j in range(p.ntagged)]
    # every known tag is listed, None at its default: an unknown tag may not take it
    return wr_tags(b, known, unknown)


cdef int wr_struct(Plan p, object o, Buf* b, int version) except -1:
    cdef Py_ssize_t i
    cdef Field* where = NULL
    for i in range(p.nabsent):
        where = &p.absent[i]
        if not where.ignorable and not is_default(where, take(o, where)):
            raise _e.absent_field(p.message_name, <object>where.name, version, <object>where.versions)
    try:
        for i in range(p.nplain):
            where = &p.plain[i]
            if where.kind <= K_BYTES:  # the common kinds without wr_field's call
                wr_scalar(where.kind, b, take(o, where), where.compact, where.nullable)
            else:
                wr_field(where, b, take(o, where), version)
        where = NULL
        if p.flexible:
            if p.ntagged:
                wr_tagged(p, o, b, &where, version)
            else:
                wr_tags(b, None, slot_value(o, p.unknown_offset, None))
    except EncodeError as x:
        raise x.with_prefix(<object>where.name if where != NULL else "") from None
    return 0


# ---------------------------------------------------------------- the message API

cdef class MessageMixin:
    """encode/decode of the compiled engine, for the message classes of `_classes`."""

    def encode(self, version):
        """The message body at `version`, as bytes."""
        cdef int v = version_of(version)
        cdef Plan p = plan_of(type(self), v)
        cdef Buf b
        open_buf(&b, p.size_hint)
        try:
            wr_struct(p, self, &b, v)
            p.size_hint = b.p - b.start
            return close_buf(&b)
        finally:
            discard_buf(&b)

    def encode_into(self, buffer, offset, version):
        """Write the body into a writable buffer at offset; returns the bytes written.

        On any error the buffer is left as it was.
        """
        cdef Plan p
        cdef Buf b
        cdef Py_buffer view
        cdef unsigned char scratch[SCRATCH]
        cdef int v = version_of(version)  # the pure engine's order: version, buffer, offset, range
        open_into(&b, buffer, &view, offset, scratch, 0)
        try:
            p = plan_of(type(self), v)
            wr_struct(p, self, &b, v)
            return close_into(&b)
        finally:
            release_into(&b, &view)

    @classmethod
    def decode_from(cls, data, version, offset=0, arrays="list", records="bytes"):
        """Decode one message starting at offset; returns (message, end offset)."""
        cdef Py_ssize_t end
        o = read_message(cls, data, version, offset, arrays, records, False, &end)
        return o, end

    @classmethod
    def decode(cls, data, version, arrays="list", records="bytes"):
        """Decode a whole message body; trailing bytes are an error."""
        cdef Py_ssize_t end
        return read_message(cls, data, version, 0, arrays, records, True, &end)

    @classmethod
    def is_flexible(cls, version):
        return cls.FLEXIBLE_MIN is not None and version >= cls.FLEXIBLE_MIN


include "_engine_target.pxi"


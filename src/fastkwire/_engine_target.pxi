# Target plans: the engine reading into, and writing from, classes it did not make.
#
# A target plan is a Plan compiled from one of our layouts and a description of another
# library's classes (a `spec`: class, version and, per field, its slot name, default and
# value conversion; kafka_python/_protocol.py builds them for kafka-python 3). It fills
# that library's objects as its own codec fills them: its version and tag slots set,
# fields absent from the version left unset, tagged fields set only when present, its
# forms of values (a zero UUID as None, flag bits as a set). Objects and lists are made
# out of the collector's sight and all tracked once the message is whole (so collections
# during a decode do not walk them over and over), as the other codec's are.
#
# The plan reads and writes only what it can read or write exactly as the other codec
# would. Anything else (bytes the other codec reads leniently, value forms it converts,
# input it rejects) raises TargetMismatch before any output is given, and the caller runs
# the other codec instead: its results and its exceptions, unchanged.
from cpython.object cimport PyObject_RichCompareBool, Py_NE
from cpython.tuple cimport PyTuple_Check, PyTuple_GET_ITEM, PyTuple_GET_SIZE


cdef extern from "Python.h":
    int PyObject_GC_IsTracked(object o)


class TargetMismatch(Exception):
    """This value or these bytes are for the target's own codec (never escapes the
    target codecs below: they run that codec instead)."""


NO_DEFAULT = object()  # a spec field whose class has no default to read for an unset slot

# Value conversions of a target field (a spec field's `conv`).
cdef enum:
    CONV_NONE
    CONV_UUID_NONE   # the zero UUID is held as None (and None is written as zero)
    CONV_BITFIELD    # an int32 of flag bits held as a set of bit numbers; None is bit 31 alone

C_NONE, C_UUID_NONE, C_BITFIELD = CONV_NONE, CONV_UUID_NONE, CONV_BITFIELD

cdef bytes _ZERO16 = bytes(16)


cdef int mismatch() except -1:
    raise TargetMismatch()


# ---------------------------------------------------------------- compiling

cdef int fill_target(Field* f, object op, object t, object cls, list keep) except -1:
    name = t.name
    default = t.default
    keep.append(name)
    keep.append(default)
    f.offset = slot_offset(cls, name)
    f.name = <PyObject*>name
    f.versions = <PyObject*>name
    f.default = <PyObject*>default
    f.dflt = D_VALUE
    f.compact = op.compact
    f.nullable = op.nullable
    f.tag = op.field.tag if op.field.tag is not None else -1
    f.conv = t.conv
    f.kind = op.kind
    if f.kind == K_STRUCT or f.kind == K_STRUCTS:
        sub = compile_target(op.sub, t.sub)
        keep.append(sub)
        f.sub = <PyObject*>sub
        f.cls = <PyObject*>(<Plan>sub).cls
    elif f.kind == K_INTS:
        f.elem = op.width
    elif f.kind == K_SCALARS:
        if op.width is None:
            raise NotImplementedError(f"arrays of {op.field.element_type}")
        f.elem = op.elem_kind
    return 0


cdef Field* target_fields(list pairs, object cls, list keep) except NULL:
    cdef Field* out = <Field*>PyMem_Calloc(len(pairs) + 1, sizeof(Field))
    cdef Py_ssize_t i
    if out == NULL:
        raise MemoryError()
    try:
        for i in range(len(pairs)):
            fill_target(&out[i], pairs[i][0], pairs[i][1], cls, keep)
    except BaseException:
        PyMem_Free(out)
        raise
    return out


cdef Plan compile_target(object lay, object spec):
    cdef Plan p = Plan.__new__(Plan)
    cls = spec.cls
    p.keep = keep_list([spec])
    p.target = True
    p.cls = cls
    p.struct_name = lay.struct.name
    p.message_name = lay.message.name
    p.flexible = lay.flexible
    p.min_size = lay.min_size
    p.size_hint = 64
    p.single = spec.single
    p.version_obj = spec.version
    p.version_offset = slot_offset(cls, "_version")
    p.tags_offset = slot_offset(cls, "tags")
    p.unknown_offset = slot_offset(cls, "unknown_tags")
    pairs = list(zip(lay.ops, spec.fields))
    plain = [(op, t) for op, t in pairs if op.mode == "plain"]
    tagged = [(op, t) for op, t in pairs if op.mode == "tagged"]  # as declared: the order they are written
    p.plain = target_fields(plain, cls, p.keep)
    p.nplain = len(plain)
    p.tagged = target_fields(tagged, cls, p.keep)
    p.ntagged = len(tagged)
    p.nabsent = 0  # absent fields stay unset, as the target codec leaves them
    return p


# ---------------------------------------------------------------- reading

cdef inline void track(object o) noexcept:
    # (a value a target class's constructor stored, inside a tagged field, may be of any
    # type: only collector objects not yet tracked are tracked)
    if PyObject_IS_GC(<PyObject*>o) and not PyObject_GC_IsTracked(o):
        PyObject_GC_Track(<PyObject*>o)


cdef void track_tree(Plan p, object o) noexcept:
    """Track a decoded object and every list and object under it, as the target codec's
    are (the engine made them untracked)."""
    cdef Py_ssize_t i, j, n
    cdef Field* f
    cdef PyObject* v
    track(o)
    for j in range(p.nplain + p.ntagged):
        f = &p.plain[j] if j < p.nplain else &p.tagged[j - p.nplain]
        if f.kind <= K_BYTES:
            continue
        v = fresh_slot(o, f.offset)
        if v == NULL or <object>v is None:
            continue
        if f.kind == K_STRUCT:
            if type(<object>v) is (<Plan>f.sub).cls:
                track_tree(<Plan>f.sub, <object>v)
            continue
        track(<object>v)
        if f.kind == K_STRUCTS and PyList_CheckExact(<object>v):
            n = PyList_GET_SIZE(<object>v)
            for i in range(n):
                it = <object>PyList_GET_ITEM(<object>v, i)
                if type(it) is (<Plan>f.sub).cls:
                    track_tree(<Plan>f.sub, it)


cdef object new_target(object cls):
    r = alloc_instance(cls)
    PyObject_GC_UnTrack(<PyObject*>r)  # until the message is whole: track_tree
    return r


cdef object rd_uuid_t(Cursor* c):
    cdef int i
    if c.end - c.pos < 16:
        raise_short(c.pos, 16, c.end)
    for i in range(16):
        if c.buf[c.pos + i]:
            return rd_uuid(c)
    c.pos += 16
    return None


cdef object bits_of(object v):
    """An int32 of flag bits as kafka-python holds it: the set of the bit numbers that
    are 1, None for bit 31 alone (Kafka's "not requested")."""
    cdef uint32_t bits = <uint32_t>(<int32_t>v)
    cdef int i
    if bits == 0x80000000U:
        return None
    s = set()
    for i in range(32):
        if bits >> i & 1:
            s.add(i)
    return s


cdef uint32_t bits_from(object v) except? 0xFFFFFFFF:
    """The int32 of a set of bit numbers (None: bit 31 alone); anything else, or a bit
    outside 0-31, is kafka-python's to refuse."""
    cdef uint32_t bits = 0
    if v is None:
        return 0x80000000U
    if type(v) is not set and type(v) is not frozenset:
        mismatch()
    for b in v:
        if type(b) is not int or not 0 <= b < 32:
            mismatch()
        bits |= 1U << <int>b
    return bits


cdef object rd_value_t(Field* f, Cursor* c, bint in_tag):
    cdef Py_ssize_t n, i
    if f.kind <= K_BYTES:
        if f.conv == CONV_UUID_NONE:
            return rd_uuid_t(c)
        v = rd_scalar(f.kind, c, f.compact, f.nullable)
        if f.conv == CONV_BITFIELD:
            return bits_of(v)
        return v
    elif f.kind == K_STRUCT:
        if f.nullable and rd_marker(c) < 0:
            return None
        return rd_struct_t(<Plan>f.sub, c, in_tag)
    elif f.kind == K_STRUCTS:
        n = rd_array_len(c, f.compact, f.nullable, (<Plan>f.sub).min_size)
        if n < 0:
            return None
        items = new_list(n)
        for i in range(n):
            it = rd_struct_t(<Plan>f.sub, c, in_tag)
            Py_INCREF(it)
            PyList_SET_ITEM(items, i, it)
        return items
    elif f.kind == K_INTS:
        v = rd_int_array(c, f.elem, f.compact, f.nullable, 0)
        return v
    elif f.kind == K_STRINGS:
        v = rd_string_array(c, f.compact, f.nullable)
        return v
    n = rd_array_len(c, f.compact, f.nullable, _WIDTHS[f.elem])
    if n < 0:
        return None
    items = new_list(n)
    for i in range(n):
        it = rd_uuid_t(c) if f.conv == CONV_UUID_NONE else rd_scalar(f.elem, c, f.compact, False)
        Py_INCREF(it)
        PyList_SET_ITEM(items, i, it)
    return items


cdef int rd_tags_t(Plan p, object o, Cursor* c) except -1:
    """The tagged-field section: known tags into their slots (and their names into the
    object's tags set), the rest into unknown_tags as {"_<tag>": raw bytes}."""
    cdef Py_ssize_t i, k, size, tend, saved_end
    cdef Py_ssize_t last = -1
    cdef Field* f
    cdef long long ntags = rd_uvarint(c)
    if ntags == 0:
        return 0
    tags = None
    unknown = None
    for k in range(ntags):
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
            unknown[f"_{last}"] = rd_raw(c, size)
            continue
        saved_end = c.end
        c.end = tend
        try:
            v = rd_value_t(f, c, True)
        finally:
            c.end = saved_end
        if c.pos != tend:
            mismatch()  # the target codec reads the value and ignores the declared size
        put(o, f.offset, v)
        if tags is None:
            tags = set()
        tags.add(<object>f.name)
    put(o, p.tags_offset, tags)
    put(o, p.unknown_offset, unknown)
    return 0


cdef object rd_struct_t(Plan p, Cursor* c, bint in_tag):
    cdef Py_ssize_t i
    if in_tag:
        # Inside a tagged field kafka-python reads a struct with its generic reader:
        # the constructor, and an empty tag section of its own.
        kwargs = {}
        for i in range(p.nplain):
            kwargs[<object>p.plain[i].name] = rd_value_t(&p.plain[i], c, True)
        if p.flexible and rd_uvarint(c) != 0:
            mismatch()
        return p.cls(version=p.version_obj, **kwargs)
    o = new_target(p.cls)
    put(o, p.version_offset, p.version_obj)
    put(o, p.tags_offset, None)
    put(o, p.unknown_offset, None)
    for i in range(p.nplain):
        put(o, p.plain[i].offset, rd_value_t(&p.plain[i], c, False))
    if p.flexible:
        rd_tags_t(p, o, c)
    return o


# ---------------------------------------------------------------- writing

cdef enum:
    FORM_OBJECT   # an instance of the plan's class: slots, or the class default when unset
    FORM_TUPLE    # a tuple of the version's untagged fields, in order


cdef inline object slot_or_default(object o, Field* f):
    cdef PyObject* v = fk_slot_ref(o, f.offset)
    if v != NULL:
        return fk_steal(v)
    if <object>f.default is NO_DEFAULT:
        mismatch()
    return <object>f.default


cdef inline object value_t(object o, Field* f, Py_ssize_t i, int form):
    if form == FORM_TUPLE:
        if i >= PyTuple_GET_SIZE(o):
            mismatch()
        return <object>PyTuple_GET_ITEM(o, i)
    return slot_or_default(o, f)


cdef int wr_null_array(Buf* b, bint compact) except -1:
    # kafka-python writes a None array as null whatever the field's nullability
    return wr_uvarint(b, 0) if compact else wr_i32(b, -1)


cdef int wr_value_t(Field* f, Buf* b, object v, bint in_tag) except -1:
    cdef Py_ssize_t n, i
    cdef Plan sub
    if f.kind <= K_BYTES:
        if f.conv == CONV_UUID_NONE and v is None:
            return put_raw(b, PyBytes_AS_STRING(_ZERO16), 16)
        if f.conv == CONV_BITFIELD:
            return wr_u32(b, bits_from(v))
        # a None string or bytes is written as null whatever the field's nullability
        return wr_scalar(f.kind, b, v, f.compact, f.nullable or v is None)
    elif f.kind == K_STRUCT:
        if f.nullable:
            if v is None:
                return wr_i8(b, -1)
            wr_i8(b, 1)
        if type(v) is not <object>f.cls:
            mismatch()
        return wr_struct_t(<Plan>f.sub, v, b, in_tag, FORM_OBJECT)
    elif f.kind == K_STRUCTS:
        return wr_structs_t(f, b, v, in_tag)
    if v is None:
        return wr_null_array(b, f.compact)
    if f.kind == K_INTS:
        return wr_int_array(b, v, f.elem, f.compact, f.nullable)
    elif f.kind == K_STRINGS:
        return wr_string_array(b, v, f.compact, f.nullable)
    n = wr_array_len(b, v, f.compact, f.nullable)
    for i in range(n):
        it = item_at(v, i, n)
        if f.conv == CONV_UUID_NONE and it is None:
            put_raw(b, PyBytes_AS_STRING(_ZERO16), 16)
        else:
            wr_scalar(f.elem, b, it, f.compact, False)
    return 0


cdef int wr_single_t(Plan sub, Buf* b, object it, bint in_tag) except -1:
    """An item of an array of one-field structs, in the forms kafka-python takes there."""
    cdef Field* g = &sub.plain[0]
    cdef Py_ssize_t i
    if PyTuple_Check(it):
        if PyTuple_GET_SIZE(it) < 1:
            mismatch()
        v = <object>PyTuple_GET_ITEM(it, 0)
    elif type(it) is sub.cls:
        v = slot_or_default(it, g)
    elif in_tag:
        if not isinstance(it, (str, int, float)):
            mismatch()
        v = it
    else:
        if hasattr(it, <object>g.name):
            mismatch()
        v = it
    if not in_tag:
        # its tag section comes from the value, which holds no tagged fields
        for i in range(sub.ntagged):
            if hasattr(v, <object>sub.tagged[i].name):
                mismatch()
    wr_value_t(g, b, v, in_tag)
    if sub.flexible:
        wr_uvarint(b, 0)
    return 0


cdef int wr_structs_t(Field* f, Buf* b, object items, bint in_tag) except -1:
    cdef Plan sub = <Plan>f.sub
    cdef Py_ssize_t n, i
    cdef bint tuples
    if items is None:
        return wr_null_array(b, f.compact)
    if not PyList_Check(items) and not PyTuple_Check(items):
        mismatch()
    n = wr_array_len(b, items, f.compact, True)
    if sub.single:
        for i in range(n):
            wr_single_t(sub, b, item_at(items, i, n), in_tag)
        return 0
    # kafka-python decides by the first item: tuples throughout, or objects throughout
    tuples = n > 0 and PyTuple_Check(item_at(items, 0, n))
    for i in range(n):
        it = item_at(items, i, n)
        if PyTuple_Check(it) and (tuples or in_tag):
            wr_struct_t(sub, it, b, in_tag, FORM_TUPLE)
        elif type(it) is sub.cls and not tuples:
            wr_struct_t(sub, it, b, in_tag, FORM_OBJECT)
        else:
            mismatch()
    return 0


cdef bytes encode_tag_value(Field* f, object v):
    cdef Buf b
    open_buf(&b, 16)
    try:
        wr_value_t(f, &b, v, True)
        return close_buf(&b)
    finally:
        discard_buf(&b)


cdef int wr_tags_t(Plan p, object o, Buf* b) except -1:
    """Tagged fields whose value differs from the class default, in declared order (what
    kafka-python writes; it never writes unknown_tags)."""
    cdef Py_ssize_t i
    cdef Field* f
    written = []
    for i in range(p.ntagged):
        f = &p.tagged[i]
        v = slot_or_default(o, f)
        if PyObject_RichCompareBool(v, <object>f.default, Py_NE):
            written.append((f.tag, encode_tag_value(f, v)))
    wr_uvarint(b, len(written))
    for tag, raw in written:
        wr_uvarint(b, tag)
        wr_uvarint(b, len(<bytes>raw))
        put_raw(b, PyBytes_AS_STRING(raw), len(<bytes>raw))
    return 0


cdef int wr_struct_t(Plan p, object o, Buf* b, bint in_tag, int form) except -1:
    cdef Py_ssize_t i
    for i in range(p.nplain):
        wr_value_t(&p.plain[i], b, value_t(o, &p.plain[i], i, form), in_tag)
    if p.flexible:
        if in_tag or form == FORM_TUPLE:
            wr_uvarint(b, 0)  # kafka-python writes no tags there
        else:
            wr_tags_t(p, o, b)
    return 0


# ---------------------------------------------------------------- the codecs

cdef class TargetCodec:
    """What the decoder and encoder share: the plan, and the target codec's own function
    for what the plan cannot do exactly, made only when first needed."""
    cdef Plan plan
    cdef object stock_factory
    cdef object stock

    def stock_codec(self):
        """The target codec's own function, made on first use."""
        if self.stock is None:
            self.stock = self.stock_factory()
        return self.stock


cdef class TargetDecoder(TargetCodec):
    """f(data, pos) -> (object, end): the target codec's compiled-decoder signature.
    Bytes it cannot read exactly as that codec would go to that codec."""

    def __call__(self, data, pos):
        cdef Cursor c
        cdef Py_buffer view
        cdef int held = open_input(&c, data, &view)
        o = None
        try:
            c.pos = start_at(pos, c.end)
            o = rd_struct_t(self.plan, &c, False)
            track_tree(self.plan, o)
        except Exception:
            o = None
        finally:
            if held:
                PyBuffer_Release(&view)
        if o is None:
            return self.stock_codec()(data, pos)
        return o, c.pos


cdef class TargetEncoder(TargetCodec):
    """f(item, out): the target codec's compiled-encoder signature (out has buf, pos and
    ensure(n)). Input it cannot write exactly as that codec would goes to that codec."""

    def __call__(self, item, out):
        cdef Buf b
        cdef Plan p = self.plan
        raw = None
        open_buf(&b, p.size_hint)
        try:
            if type(item) is p.cls:
                wr_struct_t(p, item, &b, False, FORM_OBJECT)
                p.size_hint = b.p - b.start
                raw = close_buf(&b)
        except Exception:
            raw = None
        finally:
            discard_buf(&b)
        if raw is None:
            return self.stock_codec()(item, out)
        n = len(<bytes>raw)
        out.ensure(n)
        pos = out.pos
        out.buf[pos:pos + n] = raw
        out.pos = pos + n


def target_codecs(layout, spec, stock_decoder, stock_encoder):
    """(decoder, encoder) for one struct at one version: `layout` is our layout of it,
    `spec` the target classes' description, stock_* make the target codec's own."""
    cdef Plan p = compile_target(layout, spec)
    cdef TargetDecoder d = TargetDecoder.__new__(TargetDecoder)
    cdef TargetEncoder e = TargetEncoder.__new__(TargetEncoder)
    d.plan = p
    d.stock_factory = stock_decoder
    e.plan = p
    e.stock_factory = stock_encoder
    return d, e

"""Message classes, made from the schema definitions the first time a message is used.

`make_message_class` makes one message's classes for one engine (compiled or pure): the
message class with its nested struct classes as attributes, `__slots__` for the fields, a
keyword-only constructor with the schema's defaults, and the shared behaviour of
`_model` (==, repr, to_dict/from_dict, pickling). The engine's `MessageMixin` adds
encode/decode. Nothing here runs per encoded or decoded message.
"""

from __future__ import annotations


from . import _model
from ._rules import unknown_tags


class _Fresh:
    """The default of an argument whose value is made anew for each instance (a list, a
    struct); its repr says what an instance gets, for help() and signatures."""

    __slots__ = ("text",)

    def __init__(self, text):
        self.text = text

    def __repr__(self):
        return self.text


_DEFAULT = _Fresh("[]")  # marks 'argument not given' for list defaults


class StructBase:
    """Behaviour every message and struct class shares."""

    __slots__ = ()
    __hash__ = None

    @property
    def unknown_tagged_fields(self):
        """Tagged fields this version of fastkwire does not know: {tag: raw bytes}."""
        if self._unknown is None:
            self._unknown = {}
        return self._unknown

    @unknown_tagged_fields.setter
    def unknown_tagged_fields(self, value):
        self._unknown = unknown_tags(value)

    def __eq__(self, other):
        return _model.struct_eq(self, other)

    def __ne__(self, other):
        r = _model.struct_eq(self, other)
        return r if r is NotImplemented else not r

    def __repr__(self):
        return _model.struct_repr(self)

    def __reduce__(self):
        return (_model.from_dict, (type(self), self.to_dict()))

    def to_dict(self):
        return _model.to_dict(self)

    @classmethod
    def from_dict(cls, d):
        return _model.from_dict(cls, d)


def _field_kind(f) -> int:
    if f.is_struct:
        return _model.STRUCTS if f.is_array else _model.STRUCT
    return _model.VALUE


class _LazyInit:
    """A class's __init__ until it is first called: the keyword-only __init__ is compiled
    then and put in its place. Most classes a program loads are never constructed by keyword
    (decoding makes their objects without __init__), and compiling is most of what loading
    a class costs. inspect.signature sees the compiled one's."""

    __slots__ = ("_args", "_init")
    __name__ = "__init__"

    def __init__(self, struct, module, classes):
        self._args = (struct, module, classes)
        self._init = None

    def _compiled(self, cls):
        init = self._init
        if init is None:
            init = self._init = _make_init(*self._args)
        for owner in cls.__mro__:  # the class this stands in: __init__ is its own now
            if owner.__dict__.get("__init__") is self:
                owner.__init__ = init
                break
        return init

    def __get__(self, obj, cls=None):
        if obj is None:
            return self
        return self._compiled(cls or type(obj)).__get__(obj, cls)

    def __call__(self, obj, *args, **kwargs):  # called from the class: __init__(obj, ...)
        self._compiled(type(obj))(obj, *args, **kwargs)

    @property
    def __signature__(self):
        import inspect

        if self._init is None:
            self._init = _make_init(*self._args)
        return inspect.signature(self._init)


def _make_init(struct, module: str, classes: dict):
    """A keyword-only __init__ with the schema's defaults, compiled once per class."""
    from . import _wire
    from ._layout import default_kind, default_value

    params, body, env = ["self", "*_positional"], [], {"_DEFAULT": _DEFAULT, "_check": unknown_tags}
    for i, f in enumerate(struct.fields):
        d = default_value(f)
        name = f.py_name
        kind = default_kind(f)
        if kind == _wire.D_NEW:
            env[f"_s{i}"] = classes[f.struct.name]
            env[f"_n{i}"] = _Fresh(f"{f.struct.name}()")
            params.append(f"{name}=_n{i}")
            body.append(f"    self.{name} = _s{i}() if {name} is _n{i} else {name}")
        elif kind == _wire.D_LIST:
            params.append(f"{name}=_DEFAULT")
            body.append(f"    self.{name} = [] if {name} is _DEFAULT else {name}")
        else:
            env[f"_d{i}"] = d
            params.append(f"{name}=_d{i}")
            body.append(f"    self.{name} = {name}")
    params.append("unknown_tagged_fields=None")
    body.append("    self._unknown = _check(unknown_tagged_fields)")
    # A wrong keyword is told with the class and its fields, not Python's bare TypeError;
    # the signature shown (help(), inspect) is the one without the catch-all.
    shown = f"def __init__({', '.join(['self', '*', *params[2:]])}): pass\n"
    params.append("**_wrong")
    body.insert(0, "    if _wrong: _refuse(self, _wrong)")
    body.insert(0, "    if _positional: _positional_refused(self, _positional)")
    env["_refuse"] = _wrong_keywords
    env["_positional_refused"] = _positional_arguments
    src = f"def __init__({', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<{module}.{struct.name}.__init__>", "exec"), env)  # noqa: S102
    init = env["__init__"]
    exec(compile(shown, "<signature>", "exec"), env)  # noqa: S102
    # inspect.signature (help(), IDEs) follows __wrapped__ to the shown signature; setting
    # __signature__ would need inspect at import.
    init.__wrapped__ = env["__init__"]
    return init


def _positional_arguments(obj, args):
    cls = type(obj)
    fields = [name for name, _, _ in cls._FIELDS]
    example = ", ".join(f"{name}=..." for name in fields[: len(args)]) or "..."
    raise TypeError(
        f"{cls.__qualname__}() takes its fields as keywords only "
        f"({len(args)} positional argument{'s' if len(args) != 1 else ''} given): "
        f"{cls.__qualname__}({example})"
    )


def _wrong_keywords(obj, wrong):
    cls = type(obj)
    fields = [name for name, _, _ in cls._FIELDS] + ["unknown_tagged_fields"]
    name = next(iter(wrong))
    import difflib  # only on this error path

    close = difflib.get_close_matches(name, fields, n=1, cutoff=0.5)
    raise TypeError(
        f"{cls.__qualname__} has no field {name!r}"
        + (f" (did you mean {close[0]!r}?)" if close else "")
        + f"; its fields: {', '.join(fields)}"
    )


def _plain_doc(m, struct, root):
    """A docstring for a struct whose definition gives none: what it is, from the schema."""
    from ._layout import version_text

    fields = ", ".join(f.py_name for f in struct.fields) or "none"
    if root and m.api_key is None:
        return f"{m.name}, versions {version_text(m.versions)}. Fields: {fields}."
    if root:
        api = m.name[: -len(m.kind)] if m.name.lower().endswith(m.kind) else m.name
        return (
            f"The {m.kind} of Kafka's {api} API (key {m.api_key}), versions "
            f"{version_text(m.versions)}. Fields: {fields}."
        )
    holders = [
        f"{s.name}.{f.py_name}"
        for s in (*m.structs, m.root)
        for f in s.fields
        if f.is_struct and f.struct is struct
    ]
    where = f" ({' or '.join(holders)})" if holders else ""
    return f"Part of {m.name}{where}. Fields: {fields}."


def make_message_class(
    name: str, module: str, mixin: type, struct_base: type = StructBase, make=type
) -> type:
    """The class of one message (its struct classes as attributes), for one engine's
    `mixin`; `module` is where the classes say they live; `make(name, bases, ns)` makes
    each class (`type`, or the compiled engine's plain_class)."""
    # Not at import: `import fastkwire` reads no schema (the engines import _layout late too).
    from . import _schema
    from ._layout import layouts, version_text

    m = _schema.load(name)
    by_struct: dict[str, type] = {}
    for struct in list(m.structs) + [m.root]:
        root = struct is m.root
        ns = {
            "__slots__": tuple(f.py_name for f in struct.fields) + ("_unknown",),
            "__module__": module,
            "__qualname__": name if root else f"{name}.{struct.name}",
            "__doc__": struct.doc or _plain_doc(m, struct, root),
            "__init__": _LazyInit(struct, module, by_struct),
            "_NAME": struct.name,
            "_FIELDS": tuple(
                (f.py_name, _field_kind(f), by_struct.get(f.struct.name) if f.is_struct else None)
                for f in struct.fields
            ),
            "_MESSAGE": name,
            "_STRUCT": struct,
            "_CLASSES": by_struct,
        }
        if root:
            flex = m.flexible.low if m.flexible.low <= m.flexible.high else None
            ns.update(
                API_KEY=m.api_key,
                MIN_VERSION=m.versions.low,
                MAX_VERSION=m.versions.high,
                FLEXIBLE_MIN=flex,
                KIND=m.kind,
                _VERSIONS=version_text(m.versions),
                _LAYOUTS=layouts(name),
            )
            bases = (struct_base, mixin)
        else:
            bases = (struct_base,)
        by_struct[struct.name] = make(struct.name, bases, ns)
    cls = by_struct[m.root.name]
    for struct in m.structs:
        setattr(cls, struct.name, by_struct[struct.name])
    return cls

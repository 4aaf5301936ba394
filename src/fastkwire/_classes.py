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

_DEFAULT = object()  # marks 'argument not given' for list defaults


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


def _make_init(struct, module: str, classes: dict):
    """A keyword-only __init__ with the schema's defaults, compiled once per class."""
    from . import _wire
    from ._layout import default_kind, default_value

    params, body, env = ["self", "*"], [], {"_DEFAULT": _DEFAULT, "_check": unknown_tags}
    for i, f in enumerate(struct.fields):
        d = default_value(f)
        name = f.py_name
        kind = default_kind(f)
        if kind == _wire.D_NEW:
            env[f"_s{i}"] = classes[f.struct.name]
            params.append(f"{name}=_DEFAULT")
            body.append(f"    self.{name} = _s{i}() if {name} is _DEFAULT else {name}")
        elif kind == _wire.D_LIST:
            params.append(f"{name}=_DEFAULT")
            body.append(f"    self.{name} = [] if {name} is _DEFAULT else {name}")
        else:
            env[f"_d{i}"] = d
            params.append(f"{name}=_d{i}")
            body.append(f"    self.{name} = {name}")
    params.append("unknown_tagged_fields=None")
    body.append("    self._unknown = _check(unknown_tagged_fields)")
    src = f"def __init__({', '.join(params)}):\n" + "\n".join(body) + "\n"
    exec(compile(src, f"<{module}.{struct.name}.__init__>", "exec"), env)  # noqa: S102
    return env["__init__"]


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
            "__doc__": struct.doc or None,
            "__init__": _make_init(struct, module, by_struct),
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

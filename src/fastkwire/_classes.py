"""Message classes, made from the schema definitions the first time a message is used.

A `Family` is one set of classes bound to one engine (compiled or pure): the message
class with its nested struct classes as attributes, `__slots__` for the fields, a
keyword-only constructor with the schema's defaults, and the shared behaviour of
`_model` (==, repr, to_dict/from_dict, pickling). The engine's `MessageMixin` adds
encode/decode. Nothing here runs per encoded or decoded message.
"""
from __future__ import annotations

import os
import threading

from . import _model
from ._rules import unknown_tags

# The definitions are read (and the schema model imported) only when a class is built,
# so that `import fastkwire` stays cheap.
_SCHEMA_DIR = os.path.join(os.path.dirname(__file__), "schemas")

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


class Family:
    """The message classes of one engine, built on first use (thread-safe)."""

    def __init__(self, module: str, mixin: type, struct_base: type = StructBase):
        self.module = module
        self.mixin = mixin
        self.struct_base = struct_base
        self._lock = threading.RLock()
        self._classes: dict[str, type] = {}
        self._names = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = tuple(sorted(n[:-5] for n in os.listdir(_SCHEMA_DIR) if n.endswith(".json")))
        return self._names

    def get(self, name: str) -> type:
        cls = self._classes.get(name)
        if cls is None:
            with self._lock:
                cls = self._classes.get(name)
                if cls is None:
                    if name not in self.names():
                        raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
                    cls = self._build(name)
                    self._classes[name] = cls
        return cls

    def _build(self, name: str) -> type:
        from . import _schema
        from ._layout import layouts, version_text

        m = _schema.load(name)
        by_struct: dict[str, type] = {}
        for struct in list(m.structs) + [m.root]:
            root = struct is m.root
            ns = {
                "__slots__": tuple(f.py_name for f in struct.fields) + ("_unknown",),
                "__module__": self.module,
                "__qualname__": name if root else f"{name}.{struct.name}",
                "__doc__": struct.doc or None,
                "__init__": _make_init(struct, self.module, by_struct),
                "_NAME": struct.name,
                "_FIELDS": tuple((f.py_name, _field_kind(f), by_struct.get(f.struct.name) if f.is_struct else None)
                                 for f in struct.fields),
                "_MESSAGE": name,
                "_STRUCT": struct,
                "_CLASSES": by_struct,
            }
            if root:
                flex = m.flexible.low if m.flexible.low <= m.flexible.high else None
                ns.update(API_KEY=m.api_key, MIN_VERSION=m.versions.low, MAX_VERSION=m.versions.high,
                          FLEXIBLE_MIN=flex, KIND=m.kind, _VERSIONS=version_text(m.versions),
                          _LAYOUTS=layouts(name))
                bases = (self.struct_base, self.mixin)
            else:
                bases = (self.struct_base,)
            by_struct[struct.name] = type(struct.name, bases, ns)
        cls = by_struct[m.root.name]
        for struct in m.structs:
            setattr(cls, struct.name, by_struct[struct.name])
        return cls

    def by_api_key(self, kind: str) -> dict[int, type]:
        """api_key -> message class of one kind, loading each class only when asked."""
        return _LazyRegistry(self, kind)


class _LazyRegistry(dict):
    """A dict of api_key -> class whose classes are built when looked up."""

    def __init__(self, family: Family, kind: str):
        super().__init__()
        self._family = family
        self._kind = kind
        self._index = None

    @property
    def _names(self):
        """api_key -> message name, read from the definitions on first use."""
        if self._index is None:
            from . import _schema

            self._index = _schema.api_index(self._kind)
        return self._index

    def __missing__(self, key):
        name = self._names.get(key)
        if name is None:
            raise KeyError(key)
        cls = self._family.get(name)
        self[key] = cls
        return cls

    def get(self, key, default=None):
        try:
            return self[key]
        except (KeyError, TypeError):
            return default

    def __contains__(self, key):
        return key in self._names

    def __iter__(self):
        return iter(sorted(self._names))

    def __len__(self):
        return len(self._names)

    def keys(self):
        return sorted(self._names)

    def values(self):
        return [self[k] for k in self.keys()]

    def items(self):
        return [(k, self[k]) for k in self.keys()]

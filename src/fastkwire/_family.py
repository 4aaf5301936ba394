"""What the two message modules (`_messages_python`, `_messages_cython`) share: a
`Family`, one engine's set of message classes built on first use (`_classes` makes each),
and `install()`, which makes a module its home (REQUEST_CLASSES/RESPONSE_CLASSES too)."""

from __future__ import annotations

import os
import _thread  # threading's own RLock, without importing threading

from . import _framing
from ._classes import StructBase, make_message_class
from .errors import DecodeError, EncodeError, UnsupportedVersionError

# The definitions are read (and the schema model imported) only when a class is built,
# so that `import fastkwire` stays cheap.
_SCHEMA_DIR = os.path.join(os.path.dirname(__file__), "schemas")

# Old names of APIs Kafka renamed: each is the same class as the new name (the converter
# lists the renames in tools/schema_sources.json; KIP-1142 renamed API 74).
ALIASES = {
    "ListClientMetricsResourcesRequest": "ListConfigResourcesRequest",
    "ListClientMetricsResourcesResponse": "ListConfigResourcesResponse",
}


class Family:
    """The message classes of one engine, built on first use (thread-safe)."""

    def __init__(self, module: str, mixin: type, struct_base: type = StructBase, make=type):
        self.module = module
        self.mixin = mixin
        self.struct_base = struct_base
        self.make = make  # makes each class: type(name, bases, ns) or the same signature
        self._lock = _thread.RLock()
        self._classes: dict[str, type] = {}
        self._names = None

    def names(self) -> list[str]:
        if self._names is None:
            self._names = tuple(
                sorted(n[:-5] for n in os.listdir(_SCHEMA_DIR) if n.endswith(".json"))
            )
        return self._names

    def get(self, name: str) -> type:
        cls = self._classes.get(name)
        if cls is None:
            with self._lock:
                cls = self._classes.get(name)
                if cls is None:
                    if name not in self.names():
                        raise AttributeError(f"module {self.module!r} has no attribute {name!r}")
                    cls = make_message_class(
                        name, self.module, self.mixin, self.struct_base, self.make
                    )
                    self._classes[name] = cls
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


def install(module_globals, mixin, make=type):
    """Turn a module into the home of one engine's message classes (`make`, type's
    signature, makes each class of the engine's family)."""
    family = Family(module_globals["__name__"], mixin, make=make)
    requests = family.by_api_key("request")
    responses = family.by_api_key("response")
    encode_request, decode_request, encode_response, decode_response = _framing.bind(
        family.get, requests, responses
    )
    names = list(family.names())
    module_globals.update(
        FAMILY=family,
        REQUEST_CLASSES=requests,
        RESPONSE_CLASSES=responses,
        encode_request=encode_request,
        decode_request=decode_request,
        encode_response=encode_response,
        decode_response=decode_response,
        DecodeError=DecodeError,
        EncodeError=EncodeError,
        UnsupportedVersionError=UnsupportedVersionError,
        __all__=names
        + list(ALIASES)
        + [
            "REQUEST_CLASSES",
            "RESPONSE_CLASSES",
            "MESSAGE_CLASSES",
            "encode_request",
            "decode_request",
            "encode_response",
            "decode_response",
            "DecodeError",
            "EncodeError",
            "UnsupportedVersionError",
        ],
    )

    def __getattr__(name):
        if name == "MESSAGE_CLASSES":  # every message: built only when asked for
            classes = tuple(family.get(n) for n in names)
            module_globals[name] = classes
            return classes
        if name.startswith("__"):
            raise AttributeError(name)
        cls = family.get(ALIASES.get(name, name))
        module_globals[name] = cls  # later lookups are plain attribute reads
        return cls

    def __dir__():
        return sorted(set(module_globals) | set(names) | set(ALIASES))

    module_globals["__getattr__"] = __getattr__
    module_globals["__dir__"] = __dir__

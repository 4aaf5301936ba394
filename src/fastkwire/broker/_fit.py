"""Fitting a response object to the version it is answered at: handlers fill in every field
they know, and `fit` puts back the default of each field that version does not carry (the
codec refuses a non-default value there, as Kafka's generated code does). The definitions say
which fields each version has; nothing here is written per API."""

import uuid
from functools import lru_cache

from .. import _schema

# Defaults that may be one object for every message (nothing can change them).
_SHARED = frozenset((int, str, bytes, bool, float, type(None), uuid.UUID))


def fit(message, version):
    """`message` (a response object) with the fields outside `version` at their defaults."""
    _fit(message, _plan(type(message).__name__, version))
    return message


def _fit(obj, plan):
    defaults = None  # an object of defaults, as the class's constructor makes them
    for name, absent, nested in plan:
        if absent:
            if defaults is None:
                defaults = _defaults(type(obj))
            value = getattr(defaults, name)
            if type(value) is list:
                value = list(value)  # its own (a default list is empty)
            elif type(value) not in _SHARED:  # a struct of defaults: its own
                value = type(value)()
            setattr(obj, name, value)
        elif nested is not None:
            value = getattr(obj, name)
            if value is None:
                continue
            if isinstance(value, list):
                for item in value:
                    _fit(item, nested)
            else:
                _fit(value, nested)


@lru_cache(maxsize=None)
def _defaults(cls):
    """One object of defaults per class, only read."""
    return cls()


@lru_cache(maxsize=None)
def _plan(message_name, version):
    return _struct_plan(_schema.load(message_name).root, version)


def _struct_plan(struct, version):
    plan = []
    for f in struct.fields:
        if not f.present(version):
            plan.append((f.py_name, True, None))
        elif f.struct is not None:
            nested = _struct_plan(f.struct, version)
            if nested:
                plan.append((f.py_name, False, nested))
    return tuple(plan)

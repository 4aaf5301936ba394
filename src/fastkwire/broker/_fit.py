"""Fitting a response object to the version it is answered at: handlers fill in every field
they know, and `fit` puts back the default of each field that version does not carry (the
codec refuses a non-default value there, as Kafka's generated code does). The definitions say
which fields each version has; nothing here is written per API."""

from functools import lru_cache

from .. import _schema


def fit(message, version):
    """`message` (a response object) with the fields outside `version` at their defaults."""
    _fit(message, _plan(type(message).__name__, version))
    return message


def _fit(obj, plan):
    fresh = None  # an object of defaults, as the class's constructor makes them
    for name, absent, nested in plan:
        if absent:
            if fresh is None:
                fresh = type(obj)()
            setattr(obj, name, getattr(fresh, name))
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

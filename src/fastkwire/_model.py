"""Behaviour shared by every message and struct class, in both implementations.

Each class carries `_FIELDS`: a tuple of (python_name, kind, struct_class) where kind is
VALUE, STRUCT (a nested struct or None) or STRUCTS (a list of structs or None). These
helpers are not on the encode/decode path.
"""

VALUE, STRUCT, STRUCTS = 0, 1, 2


def struct_eq(a, b):
    if type(a) is not type(b):
        return NotImplemented
    for name, _, _ in a._FIELDS:
        x, y = getattr(a, name), getattr(b, name)
        if x is y:
            continue
        if _is_array(x) or _is_array(y):
            if not _array_eq(x, y):
                return False
        elif x != y:
            return False
    return (a._unknown or None) == (b._unknown or None)


def _is_array(x):
    # numpy scalars have __array__ too, but compare as numbers (ndim 0)
    return (
        hasattr(x, "__array__") and not isinstance(x, (list, tuple)) and getattr(x, "ndim", 1) != 0
    )


def _array_eq(x, y):
    """Arrays compare by content, whether they are lists or numpy arrays."""
    if x is None or y is None:
        return x is y
    return len(x) == len(y) and all(int(p) == int(q) for p, q in zip(x, y))


def struct_repr(o):
    parts = [f"{name}={getattr(o, name)!r}" for name, _, _ in o._FIELDS]
    if o._unknown:
        parts.append(f"unknown_tagged_fields={o._unknown!r}")
    return f"{o._NAME}({', '.join(parts)})"


def to_dict(o):
    from uuid import UUID  # here, not at import: uuid pulls platform and re

    plain = (int, str, bytes, float, UUID)
    d = {}
    for name, kind, _ in o._FIELDS:
        v = getattr(o, name)
        if v is None:
            d[name] = None
        elif kind == STRUCT:
            d[name] = to_dict(v)
        elif kind == STRUCTS:
            d[name] = [to_dict(x) for x in v]
        elif isinstance(v, (list, tuple)) or _is_array(v):
            # numpy integers become ints; strings, uuids and the like stay as they are
            d[name] = [x if isinstance(x, plain) else int(x) for x in v]
        else:
            d[name] = v
    if o._unknown:
        d["unknown_tagged_fields"] = dict(o._unknown)
    return d


def from_dict(cls, d):
    kwargs = {}
    for name, kind, sub in cls._FIELDS:
        if name not in d:
            continue
        v = d[name]
        if v is not None and kind == STRUCT:
            v = from_dict(sub, v)
        elif v is not None and kind == STRUCTS:
            v = [from_dict(sub, x) for x in v]
        kwargs[name] = v
    unknown = set(d) - {f[0] for f in cls._FIELDS} - {"unknown_tagged_fields"}
    if unknown:
        raise TypeError(f"{cls._NAME} has no field(s) {', '.join(sorted(unknown))}")
    if d.get("unknown_tagged_fields"):
        kwargs["unknown_tagged_fields"] = {
            int(k): bytes(v) for k, v in d["unknown_tagged_fields"].items()
        }
    return cls(**kwargs)

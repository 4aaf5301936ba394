"""numpy glue for bulk integer arrays. numpy is imported only when an array is used."""
from .errors import EncodeError

_DTYPES = {"int16": "i2", "int32": "i4", "int64": "i8"}
_RANGE = {"int16": (-(1 << 15), (1 << 15) - 1), "int32": (-(1 << 31), (1 << 31) - 1),
          "int64": (-(1 << 63), (1 << 63) - 1)}


def require_numpy():
    try:
        import numpy  # noqa: F401
    except ImportError:
        raise ImportError('arrays="numpy" needs numpy: pip install fastkwire[numpy]') from None


def as_int_array(items, kind):
    """Validate an integer array for a field of `kind`; returns a numpy array."""
    import numpy as np

    arr = np.asarray(items)
    if arr.ndim != 1:
        raise EncodeError(f"expected a one-dimensional array, got {arr.ndim} dimensions")
    if arr.dtype.kind not in "iu":
        raise EncodeError(f"expected an integer array for {kind}, got dtype {arr.dtype}")
    if kind not in _DTYPES:
        raise EncodeError(f"no bulk arrays for {kind}")
    lo, hi = _RANGE[kind]
    if arr.size and np.can_cast(arr.dtype, np.dtype(_DTYPES[kind])) is False:
        mn, mx = int(arr.min()), int(arr.max())
        if mn < lo or mx > hi:
            bad = mn if mn < lo else mx
            index = int(np.argmax(arr == bad))
            raise EncodeError(f"{bad!r} out of range for {kind}", f"[{index}]")
    return arr


def to_wire(arr, kind):
    """Big-endian bytes of a validated array."""
    return arr.astype(">" + _DTYPES[kind], copy=False).tobytes()


def from_wire(data, pos, n, kind):
    """n big-endian integers at pos, as a native-order array that owns its memory."""
    import numpy as np

    return np.frombuffer(data, dtype=">" + _DTYPES[kind], count=n, offset=pos).astype(_DTYPES[kind])

"""Hostile RecordColumns for write_batch, built from a seed: arrays that lie about each
other, and getters that rewrite an array while the writer takes the columns.

`check(seed)` builds the columns twice from the seed and writes them with the pure and
with the compiled kernel. Without a getter that rewrites, both must give the same bytes
or the same error. With one, the compiled kernel takes every array before it checks
any, and falls back to the pure writer (which runs the getters again) when it does not
write itself, so its result must be the pure writer's on the columns either as built or
as rewritten. Anything else (or a crash, under AddressSanitizer) is a finding.
"""

import importlib
import random

import numpy as np

from fastkwire import EncodeError
from fastkwire._batches import Codec
from fastkwire.records import Record, RecordColumns

PURE = Codec(importlib.import_module("fastkwire._records_python"))
try:
    CY = Codec(importlib.import_module("fastkwire._records"))
except ImportError:
    CY = None

EXTREMES = [0, 1, -1, 40, 1 << 16, (1 << 31) - 1, -(1 << 31)]
# The arrays of RecordColumns: where each one is (BinaryColumns, then attribute).
ARRAYS = [("offset",), ("timestamp",), ("headers", "offsets")] + [
    (*col, part)
    for col in (("key",), ("value",), ("headers", "key"), ("headers", "value"))
    for part in ("data", "offsets", "nulls")
]


def _value(rng):
    kind = rng.random()
    if kind < 0.15:
        return None
    if kind < 0.2:
        return rng.randbytes(rng.choice([129, 300, 70_000]))
    return rng.randbytes(rng.randrange(0, 20))


def _records(rng):
    out = []
    for i in range(rng.randrange(1, 6)):
        headers = [
            (rng.choice(["a", "key", "é", ""]) * rng.randrange(1, 3), _value(rng))
            for _ in range(rng.randrange(0, 4))
        ]
        offset = i + (rng.choice([-(1 << 31), 1 << 31, 1 << 62]) if rng.random() < 0.05 else 0)
        out.append(
            Record(offset, rng.randrange(-(1 << 40), 1 << 40), _value(rng), _value(rng), headers)
        )
    return out


def _get(cols, path):
    obj = cols
    for name in path:
        obj = getattr(obj, name)
    return obj


def _item(rng, arr):
    """A value that arr's dtype holds, often one at an edge."""
    if arr.dtype == bool:
        return True
    info = np.iinfo(arr.dtype)
    return min(max(rng.choice(EXTREMES), info.min), info.max)


def _lie(rng, cols):
    """One array made to disagree with the others."""
    path = rng.choice(ARRAYS)
    owner, name = _get(cols, path[:-1]), path[-1]
    arr = getattr(owner, name)
    how = rng.randrange(4)
    if how == 0 and len(arr):
        arr = arr.copy()
        arr[rng.randrange(len(arr))] = _item(rng, arr)
    elif how == 1:
        arr = arr[:-1] if len(arr) else np.append(arr, arr.dtype.type(0))
    elif how == 2:
        arr = arr.astype(rng.choice([np.int64, np.uint8, np.int32, bool]))
    else:
        arr = np.asfortranarray(np.stack([arr, arr]))[0]  # strided
    setattr(owner, name, arr)


def _hooked(obj, attr, action):
    """obj as an instance of a subclass whose `attr` runs `action` when read."""
    cls = type(obj)

    class Hooked(cls):
        __slots__ = ("stored",)

    def read(self):
        action()
        return self.stored

    setattr(Hooked, attr, property(read))
    out = Hooked.__new__(Hooked)
    for name in cls.__slots__:
        if name != attr:
            setattr(out, name, getattr(obj, name))
    out.stored = getattr(obj, attr)
    return out


def _rewriter(rng, cols):
    """A getter that rewrites one item of an array: (install, apply), where apply()
    makes the same change at once (the columns 'as rewritten')."""
    path = rng.choice(ARRAYS)
    arr = _get(cols, path)
    if not len(arr):
        return None
    i = rng.randrange(len(arr))
    value = _item(rng, arr)

    def apply():
        arr[i] = value  # the array as taken now: a getter must not read through itself

    where = rng.choice(
        [("key",), ("value",), ("headers",), ("headers", "key"), ("headers", "value")]
    )
    owner = _get(cols, where[:-1])
    target = getattr(owner, where[-1])
    attr = rng.choice(target.__slots__)

    def install():
        setattr(owner, where[-1], _hooked(target, attr, apply))

    return install, apply


def build(seed, rewritten=False):
    """The columns of `seed` -> (columns, whether a getter rewrites an array). With
    `rewritten`, the rewrite is made before the writer sees them."""
    rng = random.Random(seed)
    recs = _records(rng)
    cols = RecordColumns.from_records(recs)
    if rng.random() < 0.3:
        _lie(rng, cols)
    hook = _rewriter(rng, cols) if rng.random() < 0.6 else None
    if hook is not None:
        install, apply = hook
        if rewritten:
            apply()
        install()
    return cols, hook is not None


def outcome(codec, cols):
    try:
        return codec.write_batch(cols)
    except EncodeError as e:
        return ("EncodeError", str(e))


def check(seed):
    """One seed; raises AssertionError on a disagreement, returns the compiled outcome."""
    cols, hooked = build(seed)
    cy = outcome(CY, cols)
    allowed = [outcome(PURE, build(seed)[0])]
    if hooked:
        allowed.append(outcome(PURE, build(seed, rewritten=True)[0]))
    assert cy in allowed, f"seed {seed}: compiled {cy!r:.200}, pure {allowed!r:.400}"
    if isinstance(cy, bytes):
        PURE.read_batches(cy)  # whatever was written reads back
    return cy

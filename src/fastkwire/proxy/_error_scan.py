"""The error codes of a response frame, read from its bytes without building its objects.

A response's summary line and the per-API table need only its non-zero `error_code`
values. Decoding a whole answer for them costs many times the frame in objects (a 30 MB
ListGroups answer of 10M groups is 10M objects), so this walks the response's layout
(its walk plan, `_walk`) and skips what it does not need: fixed-width values by their
width, strings and bytes by their length, arrays of fixed-size structs without error codes
in one step.

The walk is bounded: it stops after MAX_STEPS values (arrays of fixed-width values and
skippable structs count as one), so a huge answer costs a bounded amount of CPU, and the
codes are those found up to there. It never raises: bytes that do not fit their layout
end the walk with what was found.
"""

import struct
from functools import lru_cache

from .. import RESPONSE_CLASSES
from .._framing import response_header_version
from ._walk import BYTES, FIXED, FIXED_ARRAY, STRING, STRINGS, STRUCT, plan

MAX_STEPS = 50_000

_I8, _I16, _I32 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i")


class _Stop(Exception):
    """The walk ends here: out of bytes, a length that does not fit, or out of steps."""


class _Scan:
    __slots__ = ("data", "end", "steps", "found")

    def __init__(self, data, end):
        self.data, self.end = data, end
        self.steps = MAX_STEPS
        self.found = {}

    def tick(self):
        self.steps -= 1
        if self.steps < 0:
            raise _Stop

    def uvarint(self, pos):
        value, shift, data = 0, 0, self.data
        while shift < 35:
            if pos >= self.end:
                raise _Stop
            b = data[pos]
            pos += 1
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value, pos
            shift += 7
        raise _Stop

    def fixed(self, pos, fmt):
        if pos + fmt.size > self.end:
            raise _Stop
        return fmt.unpack_from(self.data, pos)[0], pos + fmt.size

    def length(self, pos, compact, legacy):
        """A length or count: -1 for null."""
        if compact:
            n, pos = self.uvarint(pos)
            return n - 1, pos
        return self.fixed(pos, legacy)

    def skip(self, pos, n):
        pos += n
        if n < 0 or pos > self.end:
            raise _Stop
        return pos

    def struct(self, walk, pos):
        self.tick()
        for what, width, compact, nullable, sub, is_code, _, _ in walk.steps:
            if what == FIXED:
                if is_code:
                    code, pos = self.fixed(pos, _I16)
                    if code:
                        self.found.setdefault(code, None)
                else:
                    pos = self.skip(pos, width)
            elif what == STRING:
                n, pos = self.length(pos, compact, _I16)
                if n > 0:
                    pos = self.skip(pos, n)
            elif what == BYTES:
                n, pos = self.length(pos, compact, _I32)
                if n > 0:
                    pos = self.skip(pos, n)
            elif what == STRUCT:
                if nullable:
                    present, pos = self.fixed(pos, _I8)
                    if present < 0:
                        continue
                pos = self.struct(sub, pos)
            else:
                n, pos = self.length(pos, compact, _I32)
                if n <= 0:
                    continue
                if what == FIXED_ARRAY:
                    self.tick()
                    pos = self.skip(pos, n * width)
                elif what == STRINGS:
                    for _ in range(n):
                        self.tick()
                        m, pos = self.length(pos, compact, _I16)
                        if m > 0:
                            pos = self.skip(pos, m)
                elif sub.fixed_size is not None:
                    self.tick()
                    pos = self.skip(pos, n * sub.fixed_size)
                else:
                    if n > self.end - pos:  # each element takes at least a byte
                        raise _Stop
                    for _ in range(n):
                        pos = self.struct(sub, pos)
        if walk.flexible:
            count, pos = self.uvarint(pos)
            for _ in range(count):
                self.tick()
                tag, pos = self.uvarint(pos)
                size, pos = self.uvarint(pos)
                end = self.skip(pos, size)
                step = walk.tagged.get(tag)
                if step is not None and step[4] is not None and step[4].has_errors:
                    self._tagged(step, pos, end)
                pos = end
        return pos

    def _tagged(self, step, pos, end):
        outer, self.end = self.end, end
        try:
            what, _, compact, _, sub = step[:5]
            if what == STRUCT:
                self.struct(sub, pos)
            else:
                n, pos = self.length(pos, compact, _I32)
                for _ in range(max(n, 0)):
                    pos = self.struct(sub, pos)
        except _Stop:
            if self.steps < 0:
                raise
        finally:
            self.end = outer


@lru_cache(maxsize=4096)
def _root(api_key, version):
    """(walk of the response's body, whether its header has tagged fields), or None when
    the codec does not know the API or version, or its response has no error code."""
    cls = RESPONSE_CLASSES.get(api_key)
    if cls is None or version is None or not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
        return None
    walk = plan(cls._LAYOUTS.root(version))
    if not walk.has_errors:
        return None
    return walk, response_header_version(cls, version) >= 1


def response_error_codes(frame, api_key, version):
    """The distinct non-zero error codes of a response frame (size prefix included), in the
    order found, within MAX_STEPS values; [] for an API or version the codec does not know."""
    root = _root(api_key, version)
    if root is None:
        return []
    walk, header_tags = root
    scan = _Scan(frame, len(frame))
    try:
        pos = 8  # size prefix and correlation id
        if header_tags:
            count, pos = scan.uvarint(pos)
            for _ in range(count):
                scan.tick()
                _, pos = scan.uvarint(pos)
                size, pos = scan.uvarint(pos)
                pos = scan.skip(pos, size)
        scan.struct(walk, pos)
    except _Stop:
        pass
    return list(scan.found)

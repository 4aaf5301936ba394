"""Exceptions raised by the codecs, and the texts of their reasons.

Both implementations build their errors here, so the same bad input gives the same
error, word for word, whichever implementation read it.
"""

__all__ = ["DecodeError", "EncodeError", "UnsupportedVersionError"]


def _join(prefix, path):
    if not path:
        return prefix
    if not prefix:
        return path
    return prefix + path if path.startswith("[") else f"{prefix}.{path}"


class DecodeError(ValueError):
    """Malformed input: `.offset` is where the failing value starts, `.path` which field."""

    partial_tree = None  # fastkwire.explain sets it: the tree up to the failing field

    def __init__(self, reason, offset, path=""):
        self.reason = reason
        self.offset = offset
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{reason} at offset {offset}")

    def with_prefix(self, prefix):
        """The same error seen one level further out (`members` + `[3].reason`)."""
        return DecodeError(self.reason, self.offset, _join(prefix, self.path))

    def __reduce__(self):
        return (DecodeError, (self.reason, self.offset, self.path))


class EncodeError(ValueError):
    """A value that cannot be written: `.path` names the field, `.reason` what is wrong."""

    _whole = False  # an error of the whole message (its size): no field path is added

    def __init__(self, reason, path=""):
        self.reason = reason
        self.path = path
        super().__init__(f"{path}: {reason}" if path else reason)

    def with_prefix(self, prefix):
        if self._whole:
            return self
        return EncodeError(self.reason, _join(prefix, self.path))

    def __reduce__(self):
        return (EncodeError, (self.reason, self.path))


class UnsupportedVersionError(ValueError):
    """A version outside a message's range, or a field the version cannot carry."""


# Reasons shared by both implementations.


def truncated(offset, need, left):
    return DecodeError(f"truncated: needs {need} bytes, {left} left", offset)


def varint_too_long(offset, max_bytes):
    return DecodeError(f"varint longer than {max_bytes} bytes or out of range", offset)


def bad_length(offset, length):
    return DecodeError(f"invalid length {length}", offset)


def null_not_allowed(offset):
    return DecodeError("null where the field is not nullable", offset)


def count_exceeds(offset, count, left):
    return DecodeError(f"count {count} exceeds the {left} bytes left", offset)


def invalid_utf8(offset):
    return DecodeError("invalid UTF-8 in string", offset)


def string_too_long(offset, length):
    return DecodeError(f"string length {length} exceeds 32767", offset)


def _s(n):
    return "" if n == 1 else "s"


def count(n, noun):
    """A count and its noun: "1 byte", "2 bytes"."""
    return f"{n} {noun}{_s(n)}"


def trailing(offset, extra):
    return DecodeError(f"{extra} trailing byte{_s(extra)} after the message", offset)


def tags_out_of_order(offset, tag):
    return DecodeError(f"tagged field {tag} out of order or repeated", offset)


def tag_too_large(offset, tag):
    return DecodeError(f"tagged field {tag} exceeds 2147483647", offset)


def tag_size_mismatch(offset, tag):
    return DecodeError(f"tagged field {tag} does not fill its declared size", offset)


def show(value):
    """An int for an error message: in full unless it is huge (repr of an int past 4300
    digits raises, and a megabyte of digits helps nobody)."""
    if isinstance(value, int) and int.bit_length(value) > 128:
        return f"an int of {int.bit_length(value)} bits"
    return repr(value)


def out_of_range(kind, value):
    return EncodeError(f"{show(value)} out of range for {kind}")


def wrong_type(expected, value):
    return EncodeError(f"expected {expected}, got {type(value).__name__}")


def bad_marker(offset, value):
    return DecodeError(f"invalid presence marker {value} (expected -1 or 1)", offset)


def too_long(n, compact):
    """A count or length that its field cannot carry: an int32 holds 2**31-1, a compact
    form (an unsigned varint of n + 1, at most 32 bits) 2**32-2."""
    form, limit = ("compact", 0xFFFFFFFE) if compact else ("int32", 0x7FFFFFFF)
    return EncodeError(f"length {n} exceeds {limit}, the most a {form} length can carry")


def _whole_message(reason):
    e = EncodeError(reason)
    e._whole = True
    return e


def message_too_large():
    return _whole_message("the message would exceed 2147483647 bytes, the most a frame can carry")


def buffer_too_small(need, available):
    return _whole_message(
        f"buffer too small: the message takes {need} bytes, {available} are available"
    )


def bad_buffer_offset(offset, size):
    if type(offset) is not int:
        return EncodeError(f"offset must be an int, not {type(offset).__name__}")
    return EncodeError(f"offset {offset} is outside the buffer (0-{size})")


def not_writable(buffer):
    return TypeError(
        f"encode_into needs a writable, C-contiguous buffer, not {type(buffer).__name__}"
    )


def changed_during_encode():
    return EncodeError("a value changed while it was being encoded")


def absent_field(message, field, version, versions):
    return UnsupportedVersionError(
        f"{message}.{field} has a non-default value but version {version} cannot carry it "
        f"(the field exists in versions {versions})"
    )


def bad_version(message, version, versions):
    return UnsupportedVersionError(f"{message} has versions {versions}, not {version!r}")

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

    def __init__(self, reason, path=""):
        self.reason = reason
        self.path = path
        super().__init__(f"{path}: {reason}" if path else reason)

    def with_prefix(self, prefix):
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


def trailing(offset, extra):
    return DecodeError(f"{extra} trailing bytes after the message", offset)


def tags_out_of_order(offset, tag):
    return DecodeError(f"tagged field {tag} out of order or repeated", offset)


def tag_size_mismatch(offset, tag):
    return DecodeError(f"tagged field {tag} does not fill its declared size", offset)


def out_of_range(kind, value):
    return EncodeError(f"{value!r} out of range for {kind}")


def wrong_type(expected, value):
    return EncodeError(f"expected {expected}, got {type(value).__name__}")


def bad_marker(offset, value):
    return DecodeError(f"invalid presence marker {value} (expected -1 or 1)", offset)


def changed_during_encode():
    return EncodeError("a value changed while it was being encoded")


def absent_field(message, field, version, versions):
    return UnsupportedVersionError(
        f"{message}.{field} has a non-default value but version {version} cannot carry it "
        f"(the field exists in versions {versions})"
    )


def bad_version(message, version, versions):
    return UnsupportedVersionError(f"{message} has versions {versions}, not {version!r}")


def check_tag_collision(unknown, known_tags, struct):
    """An unknown tagged field must not use a tag the struct knows at this version: it
    would decode as that field."""
    for tag in known_tags:
        if tag in unknown:
            raise EncodeError(f"unknown tagged field {tag} has the tag of a known field of {struct}")

"""Exceptions raised by the codecs. Shared by both implementations."""

__all__ = ["DecodeError", "EncodeError", "UnsupportedVersionError"]


class DecodeError(ValueError):
    """Malformed input: `.offset` is where the failing value starts, `.path` which field."""

    def __init__(self, reason, offset, path=""):
        self.reason = reason
        self.offset = offset
        self.path = path
        where = f"{path}: " if path else ""
        super().__init__(f"{where}{reason} at offset {offset}")

    def with_prefix(self, prefix):
        """The same error, one struct further out (`members[3]` + `.reason`)."""
        path = f"{prefix}.{self.path}" if self.path and not self.path.startswith("[") else f"{prefix}{self.path}"
        return DecodeError(self.reason, self.offset, path)

    def __reduce__(self):
        return (DecodeError, (self.reason, self.offset, self.path))


class EncodeError(ValueError):
    """A value that cannot be written: names the field and the value."""


class UnsupportedVersionError(ValueError):
    """A version outside a message's range, or a field the version cannot carry."""

"""Text from a broker made safe to print on one terminal line.

A broker chooses its error messages, host names and member ids, so printed as they are
they could move the cursor, rewrite the screen (escape sequences), add lines, or reorder
what follows (bidi controls). `printable` escapes every character Python does not call
printable (C0 and C1 controls, DEL, format characters such as bidi overrides and
zero-width spaces, line and paragraph separators, unusual spaces) the way `repr` does:
ESC becomes the four characters `\\x1b`, U+202E `\\u202e`.
"""

__all__ = ["os_error_text", "printable"]

ELLIPSIS = "..."


def printable(text, limit=None):
    """`text` with its non-printable characters escaped; cut to about `limit` characters."""
    text = str(text)
    cut = 0
    if limit is not None and len(text) > limit:
        cut = len(text) - limit
        text = text[:limit]
    if not text.isprintable():
        text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)
    return f"{text}{ELLIPSIS} ({cut} more characters)" if cut else text


def os_error_text(error):
    """An OSError as a user reads it: `'traffic.pcap': no such file or directory`, not
    `[Errno 2] No such file or directory: 'traffic.pcap'`."""
    what = error.strerror or str(error)
    what = what[:1].lower() + what[1:]
    return f"{printable(repr(error.filename))}: {what}" if error.filename is not None else what

"""The byte layout of a `records` field, field by field, for tools that show it (explain).

describe(data) returns a list of Span: one per batch (or legacy message), then one
"tail" span for a cut-off batch at the end. A Span is (name, offset, size, value,
children, decompressed); offsets count from the start of `data`, except below a
compressed batch's "records" span (or a legacy message's "value"), whose children count
from the start of the decompressed bytes (`decompressed` is True). Values are the
decoded numbers, bytes and strings.

describe is not a reader of its own: the readers of read_batches (the batch layer and
the pure kernel) tell a SpanRecorder what they read, so describe raises the error read_batches
raises, at the same offset (CRCs aside: describe shows a mismatch instead).
"""

from typing import NamedTuple

from . import _records_python
from ._batches import Codec
from ._compression import CODECS


class Span(NamedTuple):
    name: str
    offset: int
    size: int
    value: object = None
    children: tuple = ()
    # The children's offsets count from the start of the decompressed bytes.
    decompressed: bool = False


class SpanRecorder:
    """The observer the readers tell what they read, where (see _batches and
    _records_python): it builds the Span tree of what they read, and nothing else. So
    describe raises what read_batches raises, at the same offset."""

    def __init__(self, data, max_records, crc32c):
        self.data, self.max_records, self.crc32c = data, max_records, crc32c
        self.stack = [["top", 0, [], False, None]]  # name, offset, children, inflated, note

    def open(self, name, offset):
        self.stack.append([name, offset, [], False, None])

    def leaf(self, name, offset, size, value):
        if name == "key" and self.stack[-1][0].startswith("header["):
            value = value.decode("utf-8", "replace")  # header keys are text
        self.stack[-1][2].append(Span(name, offset, size, value))

    def decompressed(self, codec, size):
        self.stack[-1][3] = True
        self.stack[-1][4] = (codec, size)

    def enough(self, i):
        return self.max_records is not None and i >= self.max_records

    def rest(self, i, count, pos, end):
        """Records i..count-1, unread: one node."""
        self.leaf(f"record[{i}..{count - 1}]", pos, end - pos, count - i)

    def close(self, end, facts=None):
        name, offset, children, inflated, note = self.stack.pop()
        value = self._value(name, offset, end, children, note, facts)
        self.stack[-1][2].append(Span(name, offset, end - offset, value, tuple(children), inflated))

    def _value(self, name, offset, end, children, note, facts):
        if name.startswith("record["):
            return "offset %d, timestamp %d" % facts
        if name == "records":
            count = next(n.value for n in self.stack[-1][2] if n.name == "record_count")
            if note is None:
                return _records(count)
            codec, size = note
            return (
                f"{codec}: {_records(count)} in {size} decompressed bytes "
                "(offsets below count from their start)"
            )
        if name == "batch":
            fields = {n.name: n.value for n in children}
            codec = CODECS[fields["attributes"] & 7]
            crc_ok = self.crc32c(self.data[offset + 21 : end]) == fields["crc"]
            return (
                f"magic 2, {_records(fields['record_count'])}, {codec}"
                f"{'' if crc_ok else ', CRC mismatch'}"
            )
        if name == "message":
            return f"magic {children[3].value}"
        if name == "value" and note is not None:
            codec, size = note
            return (
                f"{codec}: messages in {size} decompressed bytes "
                "(offsets below count from their start)"
            )
        return None


def _records(n):
    return f"{n} record" if n == 1 else f"{n} records"


def describe(data, *, max_decompressed=None, max_records=None, crc32c=_records_python.crc32c):
    """The batches in `data` as Span trees, read by the pure kernel (CRCs not checked:
    a mismatch is shown in the batch's summary)."""
    data = bytes(data)
    seen = SpanRecorder(data, max_records, crc32c)

    def decode(buf, pos, end, count, base_offset, base_timestamp, log_append_time):
        return _records_python.decode_records(
            buf, pos, end, count, base_offset, base_timestamp, log_append_time, seen
        )

    Codec(_records_python)._walk(
        data, False, max_decompressed, decode, lambda batch: None, objects=True, seen=seen
    )
    return seen.stack[0][2]

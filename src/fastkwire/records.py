"""Kafka record batches: the data inside Produce requests and Fetch responses.

A Produce or Fetch message's `records` field stays bytes; this module opens it:

    from fastkwire import records
    for batch in records.read_batches(partition.records):
        for r in batch.records:
            r.offset, r.timestamp, r.key, r.value, r.headers

- read_batches(data, *, check_crc=True, max_decompressed=None) -> Batches, a list of
  RecordBatch whose `.tail` is the bytes of a cut-off batch at the end (a Fetch response
  stops at its size limit mid-batch; that is not an error).
- read_columns(data, ...) -> RecordColumns: offsets and timestamps as int64 arrays, keys,
  values and headers as binary columns, without an object per record (needs numpy).
- write_batch(records, *, base_offset=0, compression="none", ...) -> bytes: one batch.
- describe(data): the byte layout of the batches, field by field (for explain).

Magic 2 batches are read and written; legacy message sets (magic 0 and 1) are read.
Compressed batches need cramjam (`pip install 'fastkwire[compression]'`). The compiled
kernel is used when fastkwire's compiled core is; `records.implementation` says which.
"""

from . import implementation as _implementation
from ._batches import Codec, default_limit
from ._records_model import (
    Batches,
    BinaryColumn,
    ControlRecord,
    HeaderColumns,
    Record,
    RecordBatch,
    RecordColumns,
)

__all__ = [
    "read_batches",
    "read_columns",
    "write_batch",
    "describe",
    "crc32c",
    "implementation",
    "Record",
    "ControlRecord",
    "RecordBatch",
    "Batches",
    "RecordColumns",
    "BinaryColumn",
    "HeaderColumns",
    "default_limit",
]

# The compiled kernel where the compiled core is in use (and was built with it).
implementation = "python"
if _implementation == "cython":
    try:
        from . import _records as _kernel

        implementation = "cython"
    except ImportError:
        pass
if implementation == "python":
    from . import _records_python as _kernel

_codec = Codec(_kernel)
read_batches = _codec.read_batches
read_columns = _codec.read_columns
write_batch = _codec.write_batch
crc32c = _kernel.crc32c
_batch_headers = _kernel.batch_headers  # the Arrow converter's batch fields


def describe(data, *, max_decompressed=None, max_records=None):
    """The batches in `data` as trees of Span(name, offset, size, value, children,
    decompressed), read by read_batches' own readers (so they raise what it raises); past
    `max_records` records of a batch, one node "record[i..n-1]" stands for the rest (its
    value: how many; they are not read)."""
    from ._records_describe import describe as _describe

    return _describe(
        data, max_decompressed=max_decompressed, max_records=max_records, crc32c=crc32c
    )

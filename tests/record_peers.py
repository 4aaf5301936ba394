"""The record-batch peers and the compression library, for the records tests.

kafka-python is a test requirement everywhere; aiokafka (C extensions) and cramjam (the
compression extra) may lack wheels for a Python the built wheels are tested on
(cibuildwheel's test step installs only pure or widely built packages). Without any of
them the tests that need it skip, and the rest still run.
"""

import importlib.util

import pytest

try:
    from kafka.record.default_records import (
        DefaultRecordBatch as KpBatch,
        DefaultRecordBatchBuilder as KpBuilder,
    )
    from kafka.record.legacy_records import LegacyRecordBatchBuilder as KpLegacyBuilder
except ImportError:
    KpBatch = KpBuilder = KpLegacyBuilder = None

__all__ = [
    "KpBatch",
    "KpBuilder",
    "KpLegacyBuilder",
    "needs_kafka_python",
    "kafka_python",
    "AioBatch",
    "AioBatchPy",
    "AioBuilder",
    "AioBuilderPy",
    "AioLegacyBuilder",
    "aio_codec",
    "needs_aiokafka",
    "needs_cramjam",
    "HAVE_CRAMJAM",
    "skip_unless_kafka_python_reads",
    "aiokafka",
    "LEGACY",
    "legacy",
]

try:
    from aiokafka import codec as aio_codec
    from aiokafka.record.default_records import (
        DefaultRecordBatch as AioBatch,
        DefaultRecordBatchBuilder as AioBuilder,
        _DefaultRecordBatchPy as AioBatchPy,
        _DefaultRecordBatchBuilderPy as AioBuilderPy,
    )
    from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as AioLegacyBuilder
except ImportError:
    aio_codec = AioBatch = AioBuilder = AioBatchPy = AioBuilderPy = AioLegacyBuilder = None

needs_aiokafka = pytest.mark.skipif(AioBatch is None, reason="aiokafka is not installed")
needs_kafka_python = pytest.mark.skipif(KpBatch is None, reason="kafka-python is not installed")
HAVE_CRAMJAM = importlib.util.find_spec("cramjam") is not None
needs_cramjam = pytest.mark.skipif(
    not HAVE_CRAMJAM,
    reason="cramjam (the compression extra) is not installed",
)


# kafka-python decompresses with a library per codec, some without a wheel for every Python
# (lz4 and zstandard had none for 3.15 when it came out).
KAFKA_PYTHON_CODEC_LIBRARY = {"snappy": "python-snappy", "lz4": "lz4", "zstd": "zstandard"}


def skip_unless_kafka_python_reads(codecs):
    """Skip the test when kafka-python cannot decompress batches in one of `codecs`."""
    from kafka import codec

    missing = [
        c for c in KAFKA_PYTHON_CODEC_LIBRARY if c in codecs and not getattr(codec, f"has_{c}")()
    ]
    if missing:
        libraries = ", ".join(KAFKA_PYTHON_CODEC_LIBRARY[c] for c in missing)
        pytest.skip(
            f"kafka-python cannot read {'/'.join(missing)} batches here ({libraries} not installed)"
        )


def aiokafka(value, id):
    """A parameter that needs aiokafka."""
    return pytest.param(value, id=id, marks=needs_aiokafka)


def kafka_python(value, id):
    """A parameter that needs kafka-python."""
    return pytest.param(value, id=id, marks=needs_kafka_python)


# Legacy message sets (magic 0 and 1) as kafka-python or aiokafka write them.
LEGACY = [
    (i * 2, 1_500_000_000_000 + i, b"k%d" % i if i % 2 else None, b"v%d" % i if i % 3 else None)
    for i in range(20)
]


def legacy(builder, magic, codec, items=LEGACY):
    b = builder(magic, codec, 1 << 20)
    for offset, ts, key, value in items:
        b.append(offset, ts if magic else None, key, value)
    return bytes(b.build())

"""Kafka into a Dask DataFrame: `fastkwire.dask.read_kafka`.

    import fastkwire.dask
    df = fastkwire.dask.read_kafka("orders", bootstrap_servers="broker:9092")

One partition of the frame per offset range (`records_per_partition` offsets at most, so a
large Kafka partition is read by several workers), through `dask.dataframe.from_map`; the
columns are Ray's read_kafka schema as pyarrow-backed dtypes (`pandas.ArrowDtype`). Each
piece is fetched by fastkwire's reader (`fastkwire.kafka_arrow`) where Dask runs it. Needs
Dask: `pip install "fastkwire[dask]"`.
"""

try:
    import dask.dataframe as dd
    import pandas as pd
except ModuleNotFoundError as _missing:  # pragma: no cover - exercised in a child process
    if (_missing.name or "").split(".")[0] not in ("dask", "pandas", "pyarrow", "numpy"):
        raise
    raise ImportError(
        f"fastkwire.dask needs Dask's DataFrame ({_missing.name} is missing): "
        "pip install 'fastkwire[dask]'"
    ) from _missing

from . import kafka_arrow, segments

__all__ = ["read_kafka", "DEFAULT_RECORDS_PER_PARTITION", "meta", "read_segments"]

DEFAULT_RECORDS_PER_PARTITION = 1_000_000


def _frame(table):
    return table.to_pandas(types_mapper=pd.ArrowDtype)


def meta():
    """The empty frame of the schema (what Dask is told each piece looks like)."""
    return _frame(kafka_arrow.SCHEMA.empty_table())


class _ReadRange:
    """One offset range to a pandas DataFrame (picklable: it travels to the workers)."""

    def __init__(self, options, isolation_level, block_size, check_crc):
        self.options, self.isolation_level = options, isolation_level
        self.block_size, self.check_crc = block_size, check_crc

    def __call__(self, offset_range):
        import pyarrow as pa

        batches = list(
            kafka_arrow.read_ranges(
                [offset_range],
                options=self.options,
                isolation_level=self.isolation_level,
                block_size=self.block_size,
                check_crc=self.check_crc,
            )
        )
        return _frame(pa.Table.from_batches(batches, schema=kafka_arrow.SCHEMA))


def read_kafka(
    topics,
    *,
    bootstrap_servers,
    start_offset="earliest",
    end_offset="latest",
    partitions=None,
    isolation_level="read_uncommitted",
    records_per_partition=DEFAULT_RECORDS_PER_PARTITION,
    block_size=kafka_arrow.DEFAULT_BLOCK_SIZE,
    check_crc=True,
    **client,
):
    """A dask.dataframe.DataFrame of the records of `topics`; arguments as
    fastkwire.read_kafka's, plus records_per_partition (offsets per piece)."""
    kafka_arrow.check_piece_size(records_per_partition, "records_per_partition")
    options = kafka_arrow.ClientOptions(bootstrap_servers, **client)
    ranges = kafka_arrow.plan(
        topics,
        bootstrap_servers=bootstrap_servers,
        start_offset=start_offset,
        end_offset=end_offset,
        partitions=partitions,
        isolation_level=isolation_level,
        options=options,
    )
    ranges = kafka_arrow.split_ranges(ranges, records_per_partition, name="records_per_partition")
    if not ranges:
        return dd.from_pandas(meta(), npartitions=1)
    return dd.from_map(
        _ReadRange(options, isolation_level, block_size, check_crc),
        ranges,
        meta=meta(),
        label="fastkwire-read-kafka",
        enforce_metadata=False,
    )


# ---------------------------------------------------------------- log segments


def _read_segment(task):
    """One segment file (a fastkwire.segments.SegmentTask) to a pandas DataFrame."""
    import pyarrow as pa

    batches = list(segments.read_task(task))
    return _frame(pa.Table.from_batches(batches, schema=kafka_arrow.SCHEMA))


def read_segments(paths, **options):
    """A dask.dataframe.DataFrame of Kafka log segments, one piece per segment file;
    arguments as fastkwire.read_segments'."""
    tasks = segments.plan_segments(paths, **options)
    if not tasks:
        return dd.from_pandas(meta(), npartitions=1)
    return dd.from_map(
        _read_segment,
        tasks,
        meta=meta(),
        label="fastkwire-read-segments",
        enforce_metadata=False,
    )

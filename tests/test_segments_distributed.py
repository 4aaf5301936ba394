"""Log segments on Ray (started here, local) and Dask (a distributed.LocalCluster of 2
workers): one read task per segment file, the same rows as fastkwire.read_segments."""

import pytest

pa = pytest.importorskip("pyarrow")
pytest.importorskip("numpy")

from fastkwire import records, segments  # noqa: E402
from fastkwire.records import Record  # noqa: E402
from local_ray import local_ray  # noqa: E402


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    """Two partitions, each in three segment files."""
    root = tmp_path_factory.mktemp("logs")
    for partition in range(2):
        d = root / f"events-{partition}"
        d.mkdir()
        for base in (0, 40, 80):
            data = b"".join(
                records.write_batch(
                    [
                        Record(None, 1_000 + o, b"k%d" % o, b"p%d-%d" % (partition, o))
                        for o in range(b, b + 10)
                    ],
                    base_offset=b,
                )
                for b in range(base, base + 40, 10)
            )
            (d / ("%020d.log" % base)).write_bytes(data)
    return root


def sorted_rows(table):
    return sorted(zip(*(table.column(c).to_pylist() for c in ("partition", "offset", "value"))))


def test_ray(log):
    with local_ray():
        import fastkwire.ray

        ds = fastkwire.ray.read_segments(log)
        source = fastkwire.ray.SegmentDatasource(log)
        assert len(source.get_read_tasks(1)) == 6  # one per segment file
        table = pa.Table.from_pandas(ds.to_pandas(), preserve_index=False)
        assert sorted_rows(table) == sorted_rows(fastkwire.read_segments(log))
        assert table.num_rows == 240
        ranged = fastkwire.ray.read_segments(log, start_offset=85, partitions=[1])
        assert sorted(ranged.to_pandas()["offset"]) == list(range(85, 120))


def test_dask(log):
    pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    import fastkwire.dask

    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as cluster,
        distributed.Client(cluster),
    ):
        df = fastkwire.dask.read_segments(log)
        assert df.npartitions == 6  # one per segment file
        frame = df.compute()
        table = pa.Table.from_pandas(frame, preserve_index=False)
        assert sorted_rows(table) == sorted_rows(fastkwire.read_segments(log))
        assert str(frame.dtypes["value"]) == "binary[pyarrow]"
        # A bad segment fails the whole read.
        bad = log / "events-1" / "00000000000000000040.log"
        data = bytearray(bad.read_bytes())
        data[-1] ^= 1
        bad.write_bytes(data)
        try:
            with pytest.raises(segments.SegmentError, match="00000000000000000040.log"):
                fastkwire.dask.read_segments(log).compute()
        finally:
            data[-1] ^= 1
            bad.write_bytes(data)

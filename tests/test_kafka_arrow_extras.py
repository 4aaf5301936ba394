"""The Kafka readers without their extras: an ImportError naming the extra to install,
never a bare ModuleNotFoundError (each case in a child where the library cannot be
imported; `missing` is test_optional_extras.py's)."""

import pytest

from test_optional_extras import missing


@pytest.mark.parametrize("library", ["numpy", "pyarrow"])
def test_read_kafka_names_the_arrow_extra(library):
    got = missing([library], "import fastkwire\n", "fastkwire.read_kafka")
    assert got == [
        "ImportError",
        f"fastkwire.read_kafka needs {library}: pip install 'fastkwire[arrow]'",
    ]


def test_fastkwire_ray_names_the_ray_extra():
    pytest.importorskip("ray.data")
    got = missing(["ray"], "", "import fastkwire.ray")
    assert got[0] == "ImportError" and got[1].startswith("fastkwire.ray needs Ray Data")
    assert got[1].endswith("pip install 'fastkwire[ray]'")


def test_fastkwire_dask_names_the_dask_extra():
    pytest.importorskip("dask.dataframe")
    got = missing(["dask"], "", "import fastkwire.dask")
    assert got[0] == "ImportError" and got[1].startswith("fastkwire.dask needs Dask's DataFrame")
    assert got[1].endswith("pip install 'fastkwire[dask]'")

"""Each optional dependency, when missing, is an ImportError that names the extra to
install (`pip install 'fastkwire[numpy]'`), never a bare ModuleNotFoundError. Each case
runs in a child in which that library cannot be imported, with this run's implementation."""

import json
import subprocess
import sys

import pytest

from fastkwire import records

BLOCK = """
import importlib.abc, sys
BLOCKED = {blocked!r}
class NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
sys.meta_path.insert(0, NotInstalled())
"""

TRY = """
try:
    {call}
except ImportError as e:
    print(json.dumps([type(e).__name__, str(e)]))
else:
    print(json.dumps(None))
"""


def missing(blocked, setup, call):
    code = BLOCK.format(blocked=set(blocked)) + "import json\n" + setup + TRY.format(call=call)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


PLAIN = records.write_batch([records.Record(key=b"k", value=b"v")]).hex()


def test_read_columns_without_numpy_names_the_extra():
    got = missing(
        ["numpy"],
        f"from fastkwire import records\ndata = bytes.fromhex({PLAIN!r})\n",
        "records.read_columns(data)",
    )
    assert got == [
        "ImportError",
        "records.read_columns needs numpy: pip install 'fastkwire[numpy]'",
    ]


def test_read_batches_needs_no_numpy():
    got = missing(
        ["numpy"],
        f"from fastkwire import records\ndata = bytes.fromhex({PLAIN!r})\n",
        "assert records.read_batches(data)[0].records[0].value == b'v'",
    )
    assert got is None


def test_numpy_arrays_without_numpy_names_the_extra():
    got = missing(
        ["numpy"],
        "import fastkwire\nM = fastkwire.LeaveGroupResponse\nbody = M().encode(5)\n",
        "M.decode(body, 5, arrays='numpy')",
    )
    assert got == ["ImportError", "arrays=\"numpy\" needs numpy: pip install 'fastkwire[numpy]'"]


def test_to_arrow_without_pyarrow_names_the_extra():
    pytest.importorskip("numpy")
    got = missing(
        ["pyarrow"],
        f"from fastkwire import records\ncols = records.read_columns(bytes.fromhex({PLAIN!r}))\n",
        "cols.to_arrow()",
    )
    assert got[0] == "ImportError" and "fastkwire[arrow]" in got[1]


def test_a_compressed_batch_without_cramjam_names_the_extra():
    pytest.importorskip("cramjam")
    gz = records.write_batch([records.Record(value=b"v" * 100)], compression="gzip").hex()
    got = missing(
        ["cramjam"],
        f"from fastkwire import records\ndata = bytes.fromhex({gz!r})\n",
        "records.read_batches(data)",
    )
    assert got[0] == "ImportError" and "fastkwire[compression]" in got[1]


def test_a_pcap_without_dpkt_names_the_extra(tmp_path):
    pcap = tmp_path / "traffic.pcap"
    # a pcap file's global header: magic, version 2.4, zone, sigfigs, snaplen, Ethernet
    pcap.write_bytes(bytes.fromhex("d4c3b2a1020004000000000000000000ffff000001000000"))
    got = missing(
        ["dpkt"],
        "from fastkwire.proxy import read_capture\n",
        f"list(read_capture({str(pcap)!r}))",
    )
    assert got[0] == "ImportError" and "fastkwire[pcap]" in got[1]


def test_task_offset_columns_without_numpy_names_the_extra():
    got = missing(
        ["numpy"],
        "from fastkwire import TaskOffsetColumns\n",
        "TaskOffsetColumns(['a'], [1], [2])",
    )
    assert got == ["ImportError", "TaskOffsetColumns needs numpy: pip install 'fastkwire[numpy]'"]

"""Ray in local mode for the tests, its session files in a temporary folder of their own
(removed after) rather than the system's /tmp/ray, where Ray leaves every session."""

import contextlib
import shutil
import tempfile

import pytest


@contextlib.contextmanager
def local_ray(num_cpus=2):
    """ray.init for the duration; yields the ray module (the test skips without Ray Data)."""
    ray = pytest.importorskip("ray")
    pytest.importorskip("ray.data")
    # short: Ray's unix sockets live under it, and their paths may not pass 107 bytes
    folder = tempfile.mkdtemp(prefix="fk-ray-")
    ray.init(
        num_cpus=num_cpus,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=folder,
    )
    try:
        yield ray
    finally:
        ray.shutdown()
        shutil.rmtree(folder, ignore_errors=True)

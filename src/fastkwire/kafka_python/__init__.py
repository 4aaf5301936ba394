"""fastkwire inside kafka-python 3: a drop-in accelerator.

    import fastkwire.kafka_python
    fastkwire.kafka_python.install()     # before clients are made
    ...
    fastkwire.kafka_python.uninstall()   # kafka-python exactly as it was

install() checks that kafka-python is a version this was tested against (SUPPORTED),
that fastkwire's compiled core is in use and that every seam in the table exists, and
only then sets every patch at once. Otherwise it changes nothing and raises
UnsupportedKafkaPython naming the reason (install(strict=False) warns and returns False
instead). Results are kafka-python's own classes, values and exceptions.

The module is also a pytest plugin: `python -m pytest -p fastkwire.kafka_python` runs a
suite with the accelerator installed.
"""

import sys

from .._accelerator import Accelerator
from ._seams import SUPPORTED, Patch, build_patches

__all__ = [
    "SUPPORTED",
    "Patch",
    "UnsupportedKafkaPython",
    "install",
    "uninstall",
    "installed",
    "patches",
]


class UnsupportedKafkaPython(RuntimeError):
    """install() declined: kafka-python, or fastkwire's build, is not one it supports."""


def _bind(table):
    from fastkwire import _kafka_python

    from . import _parser, _protocol

    _kafka_python.bind(**table.bindings)
    _kafka_python.bind_builder(**table.builder)
    _kafka_python.bind_sizes(**table.sizes)
    _kafka_python.bind_partitioner(**table.partitioner)
    _protocol.bind(**table.protocol)
    _parser.bind(**table.parser)


def _forget():
    protocol = sys.modules.get(f"{__name__}._protocol")
    if protocol is not None:
        protocol.clear()  # codecs made for classes kafka-python may since have dropped


_accelerator = Accelerator(
    package=__name__,
    library="kafka-python",
    module="kafka",
    helper="_kafka_python",
    supported=SUPPORTED,
    build_patches=build_patches,
    bind=_bind,
    error=UnsupportedKafkaPython,
    forget=_forget,
)
install = _accelerator.install
uninstall = _accelerator.uninstall
installed = _accelerator.installed
patches = _accelerator.patches

# pytest plugin: `python -m pytest -p fastkwire.kafka_python`
pytest_configure = _accelerator.pytest_configure
pytest_unconfigure = _accelerator.pytest_unconfigure
pytest_report_header = _accelerator.pytest_report_header

"""fastkwire inside aiokafka: a drop-in accelerator.

    import fastkwire.aiokafka
    fastkwire.aiokafka.install()     # before clients are made
    ...
    fastkwire.aiokafka.uninstall()   # aiokafka exactly as it was

install() checks that aiokafka is a version this was tested against (SUPPORTED; DECLINED
says why some others are not), that
fastkwire's compiled core is in use and that every seam in the table exists, and only
then sets every patch at once. Otherwise it changes nothing and raises
UnsupportedAiokafka naming the reason (install(strict=False) warns and returns False
instead). Results are aiokafka's own classes, values and exceptions.

The module is also a pytest plugin: `python -m pytest -p fastkwire.aiokafka` runs a suite
with the accelerator installed.
"""

from .._accelerator import Accelerator
from ._seams import DECLINED, SUPPORTED, Patch, build_patches

__all__ = [
    "SUPPORTED",
    "DECLINED",
    "Patch",
    "UnsupportedAiokafka",
    "install",
    "uninstall",
    "installed",
    "patches",
    "unsupported_reason",
]


class UnsupportedAiokafka(RuntimeError):
    """install() declined: aiokafka, or fastkwire's build, is not one it supports."""


def _bind(table):
    from fastkwire import _aiokafka

    _aiokafka.bind(**table.bindings)
    _aiokafka.bind_protocol(**table.protocol)


_accelerator = Accelerator(
    package=__name__,
    library="aiokafka",
    module="aiokafka",
    helper="_aiokafka",
    supported=SUPPORTED,
    declined=DECLINED,
    build_patches=build_patches,
    bind=_bind,
    error=UnsupportedAiokafka,
)
install = _accelerator.install
uninstall = _accelerator.uninstall
installed = _accelerator.installed
patches = _accelerator.patches
unsupported_reason = _accelerator.unsupported_reason

# pytest plugin: `python -m pytest -p fastkwire.aiokafka`
pytest_configure = _accelerator.pytest_configure
pytest_unconfigure = _accelerator.pytest_unconfigure
pytest_report_header = _accelerator.pytest_report_header

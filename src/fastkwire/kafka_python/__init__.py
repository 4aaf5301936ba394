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

import os
import sys
import warnings

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


_applied = []  # the Patches set by install(), in order; empty when not installed


def _decline_reason():
    """Why install() must not patch, or None."""
    if os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
        return "FASTKWIRE_PURE is set: the accelerator needs fastkwire's compiled core"
    import fastkwire

    if fastkwire.implementation != "cython":
        return "fastkwire's compiled core is not built: the accelerator needs it"
    try:
        from fastkwire import _kafka_python  # noqa: F401
    except ImportError as exc:
        return f"fastkwire's compiled kafka-python helper is missing ({exc})"
    try:
        import kafka
    except ImportError:
        return "kafka-python is not installed"
    version = getattr(kafka, "__version__", "unknown")
    if version not in SUPPORTED:
        return (
            f"kafka-python {version} is not a version fastkwire.kafka_python was "
            f"tested with (supported: {', '.join(SUPPORTED)})"
        )
    return None


def install(strict=True):
    """Patch kafka-python; True when installed (already installed counts).

    Declines, changing nothing, on an untested kafka-python, under FASTKWIRE_PURE=1 or
    without the compiled core: raises UnsupportedKafkaPython, or with strict=False
    warns (RuntimeWarning) and returns False."""
    if _applied:
        return True
    reason = _decline_reason()
    table = None
    if reason is None:
        try:
            table = build_patches()  # finds every seam, or raises naming the missing one
        except LookupError as exc:
            import kafka

            reason = f"kafka-python {kafka.__version__}: {exc}"
    if reason is not None:
        if strict:
            raise UnsupportedKafkaPython(reason)
        warnings.warn(
            f"fastkwire.kafka_python not installed: {reason}", RuntimeWarning, stacklevel=2
        )
        return False
    from fastkwire import _kafka_python

    from . import _parser, _protocol

    _kafka_python.bind(**table.bindings)
    _kafka_python.bind_builder(**table.builder)
    _kafka_python.bind_sizes(**table.sizes)
    _protocol.bind(**table.protocol)
    _parser.bind(**table.parser)
    for patch in table.patches:  # plain setattr: nothing here can fail half-way
        setattr(patch.owner, patch.attribute, patch.replacement)
        _applied.append(patch)
    return True


def uninstall():
    """Put back every original install() replaced (no-op when not installed)."""
    while _applied:
        patch = _applied.pop()
        setattr(patch.owner, patch.attribute, patch.original)
    protocol = sys.modules.get(f"{__name__}._protocol")
    if protocol is not None:
        protocol.clear()  # codecs made for classes kafka-python may since have dropped


def installed():
    """True while install()'s patches are in place."""
    return bool(_applied)


def patches():
    """The table install() applies: Patch(owner, attribute, original, replacement) per
    binding site. Raises UnsupportedKafkaPython where install() would decline."""
    if _applied:
        return list(_applied)
    reason = _decline_reason()
    if reason is not None:
        raise UnsupportedKafkaPython(reason)
    try:
        return list(build_patches().patches)
    except LookupError as exc:
        raise UnsupportedKafkaPython(str(exc)) from None


# ---- pytest plugin: `python -m pytest -p fastkwire.kafka_python` -------------------


def pytest_configure(config):
    install()


def pytest_unconfigure(config):
    uninstall()


def pytest_report_header(config):
    import kafka

    return (
        f"fastkwire.kafka_python: installed={installed()} (kafka-python "
        f"{kafka.__version__}, {len(_applied)} patches)"
    )

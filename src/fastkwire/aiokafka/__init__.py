"""fastkwire inside aiokafka: a drop-in accelerator.

    import fastkwire.aiokafka
    fastkwire.aiokafka.install()     # before clients are made
    ...
    fastkwire.aiokafka.uninstall()   # aiokafka exactly as it was

install() checks that aiokafka is a version this was tested against (SUPPORTED), that
fastkwire's compiled core is in use and that every seam in the table exists, and only
then sets every patch at once. Otherwise it changes nothing and raises
UnsupportedAiokafka naming the reason (install(strict=False) warns and returns False
instead). Results are aiokafka's own classes, values and exceptions.

The module is also a pytest plugin: `python -m pytest -p fastkwire.aiokafka` runs a suite
with the accelerator installed.
"""

import os
import warnings

from ._seams import SUPPORTED, Patch, build_patches

__all__ = [
    "SUPPORTED",
    "Patch",
    "UnsupportedAiokafka",
    "install",
    "uninstall",
    "installed",
    "patches",
]


class UnsupportedAiokafka(RuntimeError):
    """install() declined: aiokafka, or fastkwire's build, is not one it supports."""


_applied = []  # the Patches set by install(), in order; empty when not installed


def _decline_reason():
    """Why install() must not patch, or None."""
    if os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
        return "FASTKWIRE_PURE is set: the accelerator needs fastkwire's compiled core"
    import fastkwire

    if fastkwire.implementation != "cython":
        return "fastkwire's compiled core is not built: the accelerator needs it"
    try:
        from fastkwire import _aiokafka  # noqa: F401
    except ImportError as exc:
        return f"fastkwire's compiled aiokafka helper is missing ({exc})"
    try:
        import aiokafka
    except ImportError:
        return "aiokafka is not installed"
    version = getattr(aiokafka, "__version__", "unknown")
    if version not in SUPPORTED:
        return (
            f"aiokafka {version} is not a version fastkwire.aiokafka was "
            f"tested with (supported: {', '.join(SUPPORTED)})"
        )
    return None


def _table():
    """The seams, or the reason install() must decline."""
    reason = _decline_reason()
    if reason is not None:
        return None, reason
    try:
        return build_patches(), None  # finds every seam, or raises naming the missing one
    except LookupError as exc:
        import aiokafka

        return None, f"aiokafka {aiokafka.__version__}: {exc}"


def install(strict=True):
    """Patch aiokafka; True when installed (already installed counts).

    Declines, changing nothing, on an untested aiokafka, under FASTKWIRE_PURE=1 or
    without the compiled core: raises UnsupportedAiokafka, or with strict=False warns
    (RuntimeWarning) and returns False."""
    if _applied:
        return True
    table, reason = _table()
    if reason is not None:
        if strict:
            raise UnsupportedAiokafka(reason)
        warnings.warn(f"fastkwire.aiokafka not installed: {reason}", RuntimeWarning, stacklevel=2)
        return False
    from fastkwire import _aiokafka

    _aiokafka.bind(**table.bindings)
    _aiokafka.bind_protocol(**table.protocol)
    for patch in table.patches:  # plain setattr: nothing here can fail half-way
        setattr(patch.owner, patch.attribute, patch.replacement)
        _applied.append(patch)
    return True


def uninstall():
    """Put back every original install() replaced (no-op when not installed)."""
    while _applied:
        patch = _applied.pop()
        setattr(patch.owner, patch.attribute, patch.original)


def installed():
    """True while install()'s patches are in place."""
    return bool(_applied)


def patches():
    """The table install() applies: Patch(owner, attribute, original, replacement) per
    binding site. Raises UnsupportedAiokafka where install() would decline."""
    if _applied:
        return list(_applied)
    table, reason = _table()
    if reason is not None:
        raise UnsupportedAiokafka(reason)
    return list(table.patches)


# ---- pytest plugin: `python -m pytest -p fastkwire.aiokafka` -------------------------


def pytest_configure(config):
    install()


def pytest_unconfigure(config):
    uninstall()


def pytest_report_header(config):
    import aiokafka

    return (
        f"fastkwire.aiokafka: installed={installed()} (aiokafka "
        f"{aiokafka.__version__}, {len(_applied)} patches)"
    )

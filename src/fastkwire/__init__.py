"""fastkwire: a fast Kafka wire-protocol codec.

The compiled core is used when it is importable; FASTKWIRE_PURE=1 forces the pure-Python
implementation. `fastkwire.implementation` says which one is running. Message classes
(`fastkwire.LeaveGroupRequest`, ...) are built the first time they are used.
"""

import os as _os
import sys as _sys

from .errors import DecodeError, EncodeError, UnsupportedVersionError

# Why this implementation runs, for `fastkwire --version`.
if _os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
    from . import _messages_python as _messages

    implementation, _why = "python", "FASTKWIRE_PURE is set"
else:
    try:
        from . import _messages_cython as _messages

        implementation, _why = "cython", "compiled"
    except ImportError as _missing:
        from . import _messages_python as _messages

        implementation, _why = "python", f"the compiled core did not import: {_missing}"
        # A build without a compiler installs anyway: say so where the user looks.
        import warnings as _warnings

        _warnings.warn(
            f"fastkwire: the compiled core did not import ({_missing}), so the pure-Python "
            "implementation runs, several times slower. Reinstall with a C compiler for the "
            "compiled core, or set FASTKWIRE_PURE=1 to choose pure Python without this warning.",
            RuntimeWarning,
            stacklevel=2,
        )
        del _missing

REQUEST_CLASSES = _messages.REQUEST_CLASSES
RESPONSE_CLASSES = _messages.RESPONSE_CLASSES
encode_request = _messages.encode_request
decode_request = _messages.decode_request
encode_response = _messages.encode_response
decode_response = _messages.decode_response

from . import columns as _columns  # noqa: E402
from .columns import TaskOffsetColumns  # noqa: E402

# Rows of TaskOffsetColumns made by hand come out as this implementation's TaskOffset.
_columns._default_item_class = lambda: _messages.StreamsGroupHeartbeatRequest.TaskOffset

__version__ = "0.1.0"
__all__ = list(_messages.__all__) + [
    "DecodeError",
    "EncodeError",
    "UnsupportedVersionError",
    "TaskOffsetColumns",
    "explain",
    "read_kafka",
    "iter_kafka",
    "read_segments",
    "iter_segments",
    "implementation",
    "__version__",
]


def __getattr__(name):
    if name == "explain":  # imported on first use: explain loads every schema it shows
        from .explain import explain

        globals()["explain"] = explain  # the import bound the submodule under this name
        return explain
    if name in ("read_kafka", "iter_kafka"):  # imported on first use: they need pyarrow
        from . import kafka_arrow

        value = globals()[name] = getattr(kafka_arrow, name)
        return value
    if name in ("read_segments", "iter_segments"):  # Kafka's log files; needs pyarrow
        from . import segments

        value = globals()[name] = getattr(segments, name)
        return value
    if name.startswith("__"):
        raise AttributeError(name)
    try:
        value = getattr(_messages, name)
    except AttributeError:
        raise AttributeError(_no_attribute(name), name=name, obj=_sys.modules[__name__]) from None
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def _no_attribute(name):
    """The error for fastkwire.<name>, in the package's own name, with what was meant."""
    import importlib.util
    import difflib

    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        return (
            f"module 'fastkwire' has no attribute {name!r}: fastkwire.{name} is a module; "
            f"import it first (import fastkwire.{name})"
        )
    close = difflib.get_close_matches(name, __dir__(), n=1, cutoff=0.8)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"module 'fastkwire' has no attribute {name!r}{hint}"


def __dir__():
    return sorted(set(globals()) | set(__all__))

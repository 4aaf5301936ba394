"""fastkwire: a fast Kafka wire-protocol codec.

The compiled core is used when it is importable; FASTKWIRE_PURE=1 forces the pure-Python
implementation. `fastkwire.implementation` says which one is running.
"""
import os as _os

from .errors import DecodeError, EncodeError, UnsupportedVersionError

if _os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
    from ._messages_python import *  # noqa: F403
    from ._messages_python import __all__ as _names
    implementation = "python"
else:
    try:
        from ._messages_cython import *  # noqa: F403
        from ._messages_cython import __all__ as _names
        implementation = "cython"
    except ImportError:
        from ._messages_python import *  # noqa: F403
        from ._messages_python import __all__ as _names
        implementation = "python"

from .columns import TaskOffsetColumns  # noqa: E402
from .explain import explain  # noqa: E402 - after the codecs it describes

__version__ = "0.1.0"
__all__ = list(_names) + ["TaskOffsetColumns", "explain", "implementation", "__version__"]

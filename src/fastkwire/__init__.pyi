"""Types of fastkwire's public API (both implementations share it)."""
from typing import Literal

from ._message_types import *
from .columns import TaskOffsetColumns as TaskOffsetColumns
from .errors import DecodeError as DecodeError
from .errors import EncodeError as EncodeError
from .errors import UnsupportedVersionError as UnsupportedVersionError
from .explain import explain as explain

implementation: Literal["cython", "python"]
__version__: str

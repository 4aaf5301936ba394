"""Types of fastkwire's public API (both implementations share it)."""
from typing import Literal

from ._message_types import *
from .columns import TaskOffsetColumns as TaskOffsetColumns
from .errors import DecodeError as DecodeError
from .errors import EncodeError as EncodeError
from .errors import UnsupportedVersionError as UnsupportedVersionError
from .explain import explain as explain
from .kafka_arrow import iter_kafka as iter_kafka
from .kafka_arrow import read_kafka as read_kafka
from .segments import iter_segments as iter_segments
from .segments import read_segments as read_segments

implementation: Literal["cython", "python"]
__version__: str

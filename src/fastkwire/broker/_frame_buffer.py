"""A frame read in place, handed out as bytes once whole: the compiled FrameBuffer
(fastkwire._framebuf: the bytes object itself is filled, no copy) or this module's
fallback (a bytearray, copied into bytes at the end). FASTKWIRE_PURE=1 takes the fallback."""

import os

MAX_SIZE = 0x7FFFFFFF + 4


class PureFrameBuffer:
    """FrameBuffer's fallback: the same calls, a bytearray filled through a view."""

    def __init__(self, size, head):
        head = memoryview(head).cast("B")
        if not 0 <= size <= MAX_SIZE:
            raise ValueError(f"size: 0 to {MAX_SIZE}, not {size}")
        if len(head) > size:
            raise ValueError(f"head: {len(head)} bytes, more than the frame's size {size}")
        self._data = bytearray(size)
        self._data[: len(head)] = head
        self.size = size
        self.filled = len(head)

    def __len__(self):
        return 0 if self._data is None else self.size - self.filled

    def __buffer__(self, flags):  # Python 3.12+; older ones read through view()
        return self.view()

    def __getitem__(self, index):  # as the compiled one's: a slice of view()
        return self.view()[index]

    def view(self):
        if self._data is None:
            raise BufferError("the frame was taken")
        return memoryview(self._data)[self.filled :]

    def written(self, n):
        if self._data is None:
            raise ValueError("the frame was taken")
        if not 0 <= n <= self.size - self.filled:
            raise ValueError(f"n: 0 to {self.size - self.filled}, not {n}")
        self.filled += n
        return self.filled == self.size

    def take(self):
        if self._data is None:
            raise ValueError("the frame was taken")
        if self.filled != self.size:
            raise ValueError(f"the frame has {self.filled} of its {self.size} bytes")
        data, self._data = bytes(self._data), None
        return data


def _compiled():
    if os.environ.get("FASTKWIRE_PURE", "") not in ("", "0"):
        return None
    try:
        from .._framebuf import FrameBuffer
    except ImportError:
        return None
    return FrameBuffer


FrameBuffer = _compiled() or PureFrameBuffer
COMPILED = FrameBuffer is not PureFrameBuffer


def readable(buf):
    """What a transport reads into for `buf`: the buffer itself (compiled), or a view."""
    return buf if COMPILED else buf.view()

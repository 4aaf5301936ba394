# cython: language_level=3, boundscheck=False, wraparound=False, freethreading_compatible=True
"""A request frame read in place into the bytes object it becomes: the broker's reads of a
frame that spans reads go straight into it (no pieces joined, no copy out of a bytearray),
and once every byte has come it is handed out as plain, immutable bytes.

The bytes object is made uninitialized and is this object's alone until `take()`: its
unread part is never seen (take() refuses until it is full), and it is written only
through the one buffer export at a time that `__getbuffer__` gives (the part not yet
read) while it is held here. fastkwire.broker._frame_buffer has the pure-Python fallback.
"""
cimport cython
from cpython.buffer cimport PyBUF_FORMAT
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize
from libc.string cimport memcpy

MAX_SIZE = 0x7FFFFFFF + 4  # a Kafka frame: an int32 size and its 4-byte prefix
cdef char *_FORMAT = "B"


# Not tracked by the collector: gc.get_referents() would hand out the bytes being filled
# (uninitialized memory, and a bytes whose hash, once cached, its later bytes make wrong).
# It holds only that bytes object, which can be in no cycle.
@cython.no_gc
cdef class FrameBuffer:
    """FrameBuffer(size, head): a frame of `size` bytes whose first bytes are `head`
    (bytes-like, at most `size`); the rest is read into it through its buffer (writable,
    the part not yet read), `written(n)` counting what a read put there."""

    cdef object _data  # the bytes being filled; None once taken
    cdef Py_ssize_t _size
    cdef Py_ssize_t _filled
    cdef Py_ssize_t _exports
    cdef Py_ssize_t _shape
    cdef Py_ssize_t _stride

    def __cinit__(self, Py_ssize_t size, head):
        if head is None:  # a typed memoryview would take None as an empty view
            raise TypeError("head: a bytes-like object, not None")
        cdef const unsigned char[::1] h = head  # taken before any check
        cdef Py_ssize_t n = h.shape[0]
        if size < 0 or size > MAX_SIZE:
            raise ValueError(f"size: 0 to {MAX_SIZE}, not {size}")
        if n > size:
            raise ValueError(f"head: {n} bytes, more than the frame's size {size}")
        data = PyBytes_FromStringAndSize(NULL, size)
        if n:
            memcpy(PyBytes_AS_STRING(data), &h[0], n)
        self._data = data
        self._size = size
        self._filled = n
        self._stride = 1

    @property
    def size(self):
        return self._size

    @property
    def filled(self):
        with cython.critical_section(self):  # written() moves it, maybe on another thread
            return self._filled

    def __len__(self):
        """The bytes still to read (what a read into it may take)."""
        with cython.critical_section(self):
            return 0 if self._data is None else self._size - self._filled

    def __getitem__(self, index):
        """A slice of the part not yet read, as a writable memoryview (asyncio's TLS
        transport reads each record after the first into buf[offset:])."""
        return memoryview(self)[index]

    def __getbuffer__(self, Py_buffer *buffer, int flags):
        with cython.critical_section(self):
            if self._data is None:
                raise BufferError("the frame was taken")
            if self._exports:
                raise BufferError("the frame's buffer is already exported")
            if self._filled >= self._size:
                raise BufferError("the frame is full")
            self._shape = self._size - self._filled
            buffer.buf = <void *>(PyBytes_AS_STRING(self._data) + self._filled)
            buffer.len = self._shape
            buffer.obj = self
            buffer.readonly = 0
            buffer.itemsize = 1
            buffer.format = _FORMAT if flags & PyBUF_FORMAT else NULL
            buffer.ndim = 1
            buffer.shape = &self._shape
            buffer.strides = &self._stride
            buffer.suboffsets = NULL
            buffer.internal = NULL
            self._exports += 1

    def __releasebuffer__(self, Py_buffer *buffer):
        with cython.critical_section(self):
            self._exports -= 1

    def written(self, Py_ssize_t n):
        """A read put `n` bytes at the end of what was filled; whether the frame is full."""
        with cython.critical_section(self):
            if self._data is None:
                raise ValueError("the frame was taken")
            if n < 0 or n > self._size - self._filled:
                raise ValueError(f"n: 0 to {self._size - self._filled}, not {n}")
            self._filled += n
            return self._filled == self._size

    def take(self):
        """The frame, as bytes (once: the buffer is empty after); ValueError before it is
        full or while its buffer is exported."""
        with cython.critical_section(self):
            if self._data is None:
                raise ValueError("the frame was taken")
            if self._filled != self._size:
                raise ValueError(f"the frame has {self._filled} of its {self._size} bytes")
            if self._exports:
                raise ValueError("the frame's buffer is still exported")
            data = self._data
            self._data = None
            return data

"""The four codecs of Kafka record batches, through cramjam (the `compression` extra).

Decompression never writes past a limit: each codec decompresses into a buffer of a
fixed size (cramjam's `decompress_into` fails rather than grow it), starting small and
doubling up to the limit, so a small bomb costs at most the limit, never more.
"""

import struct

from .errors import DecodeError

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")  # index = the attributes' codec bits

# Kafka's Java producer frames snappy as the xerial library does: this header, then
# blocks of (big-endian int32 length, raw snappy), each from at most 32 KiB of input.
XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
XERIAL_BLOCK = 32 * 1024
_FIRST_GUESS = 64 * 1024

_cramjam = None


def cramjam():
    global _cramjam
    if _cramjam is None:
        try:
            import cramjam as module
        except ImportError:
            raise ImportError(
                "compressed record batches need cramjam: pip install 'fastkwire[compression]'"
            ) from None
        _cramjam = module
    return _cramjam


def compress(codec, data):
    """`data` compressed as Kafka producers do (lz4: frames of independent blocks)."""
    cj = cramjam()
    if codec == "gzip":
        return bytes(cj.gzip.compress(data))
    if codec == "snappy":
        view = memoryview(data)
        parts = [XERIAL_HEADER]
        for i in range(0, len(view), XERIAL_BLOCK):
            block = bytes(cj.snappy.compress_raw(view[i : i + XERIAL_BLOCK]))
            parts += (struct.pack(">i", len(block)), block)
        return b"".join(parts)
    if codec == "lz4":
        c = cj.lz4.Compressor(content_checksum=False, block_linked=False)
        c.compress(data)
        return bytes(c.finish())
    if codec == "zstd":
        return bytes(cj.zstd.compress(data))
    raise ValueError(f"unknown compression {codec!r}; one of {', '.join(CODECS)}")


def decompress(codec, data, limit, offset):
    """`data` decompressed (a bytearray of at most `limit` bytes). `offset` is where the
    compressed bytes start in the caller's input, for the errors."""
    cj = cramjam()
    if codec == "snappy":
        return _snappy(cj, memoryview(data), limit, offset)
    if codec == "lz4":
        data = _fix_lz4_header(data)
    mod = {"gzip": cj.gzip, "lz4": cj.lz4, "zstd": cj.zstd}[codec]
    hint = _size_hint(codec, memoryview(data))
    size = min(limit, hint if hint is not None else max(_FIRST_GUESS, 4 * len(data)))
    while True:
        out = bytearray(size + 1)  # one spare byte: a full buffer means "more to come"
        try:
            n = mod.decompress_into(data, out)
        except cj.DecompressionError as exc:
            # cramjam's ways of saying the output did not fit (zstd's when the frame
            # header announces more than the buffer holds).
            if "whole buffer" not in str(exc) and "too small" not in str(exc):
                raise DecodeError(f"corrupt {codec} data ({exc})", offset) from None
            n = size + 1
        if n <= size:
            del out[n:]
            return out
        if size >= limit:
            raise _too_big(limit, offset)
        out = None  # freed before the next, larger buffer is made
        size = min(limit, size * 2)


def _size_hint(codec, data):
    """What the compressed bytes say they expand to, if they say (maybe a lie: it only
    sizes the first buffer, which doubles up to the limit when the data needs more)."""
    if codec == "gzip" and len(data) >= 18:
        return int.from_bytes(data[-4:], "little")  # ISIZE: the size modulo 2**32
    if codec == "zstd" and len(data) >= 6 and bytes(data[:4]) == b"\x28\xb5\x2f\xfd":
        fhd = data[4]
        fcs_size = (0, 2, 4, 8)[fhd >> 6]
        single = (fhd >> 5) & 1
        if fcs_size == 0 and single:
            fcs_size = 1
        if not fcs_size:
            return None
        pos = 5 + (0 if single else 1) + (0, 1, 2, 4)[fhd & 3]
        if len(data) < pos + fcs_size:
            return None
        n = int.from_bytes(data[pos : pos + fcs_size], "little")
        return n + 256 if fcs_size == 2 else n
    if codec == "lz4" and len(data) >= 7 and bytes(data[:4]) == b"\x04\x22\x4d\x18":
        return _lz4_bound(data)
    return None


def _lz4_bound(data):
    """An lz4 frame's most output: its blocks (walked by their headers) times the
    frame's maximum block size."""
    flg, bd = data[4], data[5]
    block_max = 1 << (8 + 2 * ((bd >> 4) & 7))  # 4: 64 KiB ... 7: 4 MiB
    pos = 7 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)  # content size, dict id
    block_checksum = 4 if flg & 0x10 else 0
    blocks = 0
    while len(data) - pos >= 4:
        size = int.from_bytes(data[pos : pos + 4], "little") & 0x7FFFFFFF
        if size == 0:
            break
        pos += 4 + size + block_checksum
        blocks += 1
    return blocks * block_max


def _too_big(limit, offset):
    return DecodeError(f"decompressed records exceed max_decompressed ({limit} bytes)", offset)


def _snappy(cj, data, limit, offset):
    """Xerial-framed when the header says so, else one raw snappy block."""
    if bytes(data[:8]) != XERIAL_HEADER[:8] or len(data) < 16:
        return _snappy_block(cj, data, limit, 0, offset)
    out = bytearray()
    pos = 16
    while pos < len(data):
        if len(data) - pos < 4:
            raise DecodeError("truncated xerial snappy block length", offset + pos)
        (n,) = struct.unpack_from(">i", data, pos)
        if n < 0 or n > len(data) - pos - 4:
            raise DecodeError(f"xerial snappy block length {n} exceeds the data", offset + pos)
        out += _snappy_block(cj, data[pos + 4 : pos + 4 + n], limit, len(out), offset + pos + 4)
        pos += 4 + n
    return out


def _snappy_block(cj, block, limit, done, offset):
    """One raw block, after `done` bytes of output."""
    try:
        n = cj.snappy.decompress_raw_len(block)  # what the block's preamble claims
    except cj.DecompressionError as exc:
        raise DecodeError(f"corrupt snappy data ({exc})", offset) from None
    if n > limit - done:
        raise _too_big(limit, offset)
    out = bytearray(n)
    try:
        written = cj.snappy.decompress_raw_into(block, out)
    except cj.DecompressionError as exc:
        raise DecodeError(f"corrupt snappy data ({exc})", offset) from None
    del out[written:]
    return out


def _fix_lz4_header(data):
    """Kafka before 0.10 (magic 0) wrote the lz4 frame's header checksum over the magic
    number as well; a frame whose checksum is wrong that way gets the right one."""
    data = bytes(data)
    if len(data) < 7 or data[:4] != b"\x04\x22\x4d\x18":
        return data
    end = 6 + (8 if data[4] & 0x08 else 0)  # descriptor: FLG, BD, optional content size
    if len(data) <= end:
        return data
    right = (xxh32(data[4:end]) >> 8) & 0xFF
    if data[end] != right and data[end] == (xxh32(data[0:end]) >> 8) & 0xFF:
        return data[:end] + bytes([right]) + data[end + 1 :]
    return data


_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M = 0xFFFFFFFF


def _rotl(x, r):
    return ((x << r) | (x >> (32 - r))) & _M


def xxh32(data, seed=0):
    """xxHash32 of a few bytes (lz4 frame descriptors: under 16 bytes, so no stripes)."""
    n = len(data)
    assert n < 16
    h = (seed + _P5 + n) & _M
    i = 0
    while i + 4 <= n:
        h = _rotl((h + int.from_bytes(data[i : i + 4], "little") * _P3) & _M, 17) * _P4 & _M
        i += 4
    while i < n:
        h = _rotl((h + data[i] * _P5) & _M, 11) * _P1 & _M
        i += 1
    h ^= h >> 15
    h = h * _P2 & _M
    h ^= h >> 13
    h = h * _P3 & _M
    return h ^ (h >> 16)

# cython: language_level=3
"""The compression codecs of Kafka's record batches: gzip, snappy (raw and xerial-framed),
lz4 (frame), zstd — as Kafka's clients write them.

Invariants:
- called once per batch, never per record; the codec libraries are imported on first use,
  so a project using only uncompressed batches does not load them;
- decompression is bounded: nothing allocates more than the caller's limit (plus one
  step) for a block, whatever the block claims (a decompression bomb guard).
"""
from libc.stdint cimport uint8_t, int32_t, uint64_t
from cpython.bytes cimport PyBytes_FromStringAndSize

from broker._native.buffer cimport kb_load_be32, kb_read_uvarint

COMPRESSION_NAMES = ("none", "gzip", "snappy", "lz4", "zstd")


def compression_code(value):
    """0..4 from a codec name ('none', 'gzip', 'snappy', 'lz4', 'zstd'), None or an int."""
    if value is None:
        return 0
    if isinstance(value, int):
        if 0 <= value <= 4:
            return value
        raise ValueError(f"unknown compression codec {value}")
    try:
        return COMPRESSION_NAMES.index(str(value).lower())
    except ValueError:
        raise ValueError(f"unknown compression codec {value!r} "
                         f"(expected one of {', '.join(COMPRESSION_NAMES)})") from None


# ---------------------------------------------------------------- decompression
# Called once per batch (never per record). The codec libraries are imported lazily so
# that a project using only uncompressed batches does not pay for them.

cdef object _zlib = None
cdef object _cramjam = None
cdef object _lz4frame = None
cdef object _zstd = None

XERIAL_MAGIC = b"\x82SNAPPY\x00"


cdef int MAX_GZIP_MEMBERS = 64


cdef object _gunzip(const uint8_t *data, Py_ssize_t length, Py_ssize_t limit):
    global _zlib
    if _zlib is None:
        import zlib
        _zlib = zlib
    out = []
    total = 0
    members = 0
    rest = PyBytes_FromStringAndSize(<const char *>data, length)
    while rest:
        # every further member costs a copy of the rest of the block (zlib's
        # unused_data): a block of thousands of tiny members would take quadratic time.
        # Kafka's clients write one member; a few concatenated ones are still read.
        members += 1
        if members > MAX_GZIP_MEMBERS:
            raise ValueError(f"more than {MAX_GZIP_MEMBERS} gzip members in one records block")
        d = _zlib.decompressobj(47)          # gzip or zlib header, auto-detected
        chunk = d.decompress(rest, limit - total + 1)
        total += len(chunk)
        out.append(chunk)
        if total > limit:
            raise OverflowError
        if not d.eof:
            if d.unconsumed_tail:
                raise OverflowError
            raise ValueError("truncated gzip stream")
        rest = d.unused_data                 # further gzip members, if any
    return b"".join(out)


cdef int _snappy_check(const uint8_t *p, Py_ssize_t n, Py_ssize_t room) except -1:
    """Checks the preamble of a raw snappy block (its uncompressed length, a varint)
    before cramjam allocates that many bytes: OverflowError when it exceeds `room`,
    ValueError when `n` input bytes cannot expand to it (snappy's densest element, a copy
    with a 2-byte offset, yields 64 bytes from 3)."""
    cdef uint64_t declared = 0
    cdef int k = kb_read_uvarint(p, p + n, 5, &declared)
    if k <= 0 or declared > 0xFFFFFFFF:
        raise ValueError("corrupt snappy preamble")
    if <uint64_t>(n - k) * 22 < declared:
        raise ValueError(f"snappy block of {n} bytes claims {declared} uncompressed bytes")
    if declared > <uint64_t>room:
        raise OverflowError
    return 0


cdef object _unsnappy(const uint8_t *data, Py_ssize_t length, Py_ssize_t limit):
    global _cramjam
    if _cramjam is None:
        import cramjam
        _cramjam = cramjam
    cdef Py_ssize_t pos
    cdef int32_t block
    raw = PyBytes_FromStringAndSize(<const char *>data, length)
    if length >= 16 and raw[:8] == XERIAL_MAGIC:
        # xerial (snappy-java) framing: 16-byte header, then [int32 length][raw block]...
        out = []
        total = 0
        pos = 16
        while pos < length:
            if length - pos < 4:
                raise ValueError("truncated xerial block length")
            block = <int32_t>kb_load_be32(data + pos)
            pos += 4
            if block < 0 or block > length - pos:
                raise ValueError("xerial block length out of range")
            _snappy_check(data + pos, block, limit - total)
            chunk = bytes(_cramjam.snappy.decompress_raw(raw[pos:pos + block]))
            total += len(chunk)
            if total > limit:
                raise OverflowError
            out.append(chunk)
            pos += block
        return b"".join(out)
    _snappy_check(data, length, limit)
    return bytes(_cramjam.snappy.decompress_raw(raw))


cdef object _unlz4(const uint8_t *data, Py_ssize_t length, Py_ssize_t limit):
    global _lz4frame
    if _lz4frame is None:
        import lz4.frame
        _lz4frame = lz4.frame
    # The output is taken in growing steps: python-lz4 allocates max_length bytes up
    # front, so asking for limit + 1 at once would reserve the whole limit (1 GiB by
    # default) for every batch, and fail outright where address space is capped.
    d = _lz4frame.LZ4FrameDecompressor()
    src = PyBytes_FromStringAndSize(<const char *>data, length)
    out = []
    total = 0
    step = max(65536, 4 * length)
    while True:
        want = min(step, limit + 1 - total)
        chunk = d.decompress(src, want)
        src = b""
        total += len(chunk)
        out.append(chunk)
        if total > limit:
            raise OverflowError
        if d.eof or len(chunk) < want:
            break
        step *= 2
    if not d.eof:
        raise ValueError("truncated lz4 frame")
    return out[0] if len(out) == 1 else b"".join(out)


cdef object _unzstd(const uint8_t *data, Py_ssize_t length, Py_ssize_t limit):
    global _zstd
    if _zstd is None:
        import zstandard
        _zstd = zstandard
    # read(n) allocates n bytes up front: read in growing steps, never the whole limit
    reader = _zstd.ZstdDecompressor().stream_reader(
        PyBytes_FromStringAndSize(<const char *>data, length), read_across_frames=True)
    parts = []
    total = 0
    step = max(65536, 4 * length)
    while True:
        more = reader.read(min(step, limit + 1 - total))
        if not more:
            break
        parts.append(more)
        total += len(more)
        if total > limit:
            raise OverflowError
        step *= 2
    return parts[0] if len(parts) == 1 else b"".join(parts)


cdef object inflate(int codec, const uint8_t *data, Py_ssize_t length, Py_ssize_t limit):
    """The records block decompressed (bytes); None for an unknown codec. OverflowError
    when it would exceed `limit` bytes; another exception for a corrupt block (records.pyx
    turns both into a CorruptRecordError naming the batch)."""
    if codec == CODEC_GZIP:
        return _gunzip(data, length, limit)
    if codec == CODEC_SNAPPY:
        return _unsnappy(data, length, limit)
    if codec == CODEC_LZ4:
        return _unlz4(data, length, limit)
    if codec == CODEC_ZSTD:
        return _unzstd(data, length, limit)
    return None


# ---------------------------------------------------------------- compression

cdef object _gzip_mod = None


def compress_block(int codec, data, level=None):
    """Compresses a records block as Kafka's clients do: gzip (one member), snappy in
    xerial framing (what the Java client writes), lz4 frame with independent blocks, zstd
    frame."""
    global _gzip_mod, _cramjam, _lz4frame, _zstd
    data = bytes(data)
    if codec == CODEC_NONE:
        return data
    if codec == CODEC_GZIP:
        if _gzip_mod is None:
            import gzip
            _gzip_mod = gzip
        return _gzip_mod.compress(data, 6 if level is None else level, mtime=0)
    if codec == CODEC_SNAPPY:
        if _cramjam is None:
            import cramjam
            _cramjam = cramjam
        parts = [XERIAL_MAGIC, b"\x00\x00\x00\x01\x00\x00\x00\x01"]
        for start in range(0, len(data), 32768):
            block = bytes(_cramjam.snappy.compress_raw(data[start:start + 32768]))
            parts.append(len(block).to_bytes(4, "big"))
            parts.append(block)
        return b"".join(parts)
    if codec == CODEC_LZ4:
        if _lz4frame is None:
            import lz4.frame
            _lz4frame = lz4.frame
        return _lz4frame.compress(data, block_linked=False,
                                  compression_level=0 if level is None else level)
    if codec == CODEC_ZSTD:
        if _zstd is None:
            import zstandard
            _zstd = zstandard
        return _zstd.ZstdCompressor(level=3 if level is None else level).compress(data)
    raise ValueError(f"unknown compression codec {codec}")

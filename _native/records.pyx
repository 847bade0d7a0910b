# cython: language_level=3
"""Kafka RecordBatch v2: a zero-copy view, validation, in-place offset assignment,
iteration over a buffer of batches and record decoding. The compression codecs are in
codecs.pyx, the batch builder in builder.pyx.

The layout is drawn in records.pxd. Invariants:
- A RecordBatch never copies the bytes it views; it holds the exporter's buffer (so a
  bytearray under it cannot be resized) until it is garbage collected.
- Nothing here reads outside the buffer it was given: every length is checked against
  the end of the buffer before it is used. Corrupt or hostile input raises
  CorruptRecordError (a ValueError) naming the byte position.
- set_base_offset / set_partition_leader_epoch write only bytes before the CRC'd range.
"""
cimport cython
from libc.stdlib cimport malloc, free
from libc.stdint cimport uint8_t, int8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from cpython.buffer cimport (PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE,
                             PyBUF_WRITABLE)
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING
from cpython.unicode cimport PyUnicode_DecodeUTF8

from broker._native.buffer cimport (kb_read_varint, kb_load_be16, kb_load_be32, kb_load_be64,
                                    kb_store_be16, kb_store_be32, kb_store_be64, kb_export_bytes)
from broker._native.crc32c cimport crc32c_raw
from broker._native.codecs cimport inflate

from broker._native.codecs import COMPRESSION_NAMES

cdef extern from "kb_utf8.h" nogil:
    int kb_utf8_valid(const uint8_t *s, size_t n)


class CorruptRecordError(ValueError):
    """Bytes that are not a valid record batch. `position` is the byte offset (in the
    buffer or file being read) where the problem was found, or None."""

    def __init__(self, message, position=None):
        super().__init__(message)
        self.position = position


# Decompressed records block larger than this is refused (a decompression bomb guard).
DEFAULT_DECOMPRESS_LIMIT = 1 << 30


# ---------------------------------------------------------------- batch checks

cdef int batch_check(const uint8_t *p, Py_ssize_t avail, bint check_crc,
                     Py_ssize_t *size) noexcept nogil:
    cdef int32_t batch_length
    cdef uint32_t stored
    if avail < LOG_OVERHEAD:
        return CHECK_PARTIAL
    batch_length = <int32_t>kb_load_be32(p + OFF_BATCH_LENGTH)
    if batch_length < HEADER_SIZE - LOG_OVERHEAD:
        return CHECK_BAD_LENGTH
    size[0] = LOG_OVERHEAD + <Py_ssize_t>batch_length
    if avail > OFF_MAGIC and p[OFF_MAGIC] != 2:
        return CHECK_BAD_MAGIC
    if avail < size[0]:
        return CHECK_PARTIAL
    if <int32_t>kb_load_be32(p + OFF_RECORD_COUNT) < 0 or <int32_t>kb_load_be32(p + OFF_LAST_OFFSET_DELTA) < 0:
        return CHECK_BAD_COUNT
    if check_crc:
        stored = kb_load_be32(p + OFF_CRC)
        if crc32c_raw(0, p + OFF_ATTRIBUTES, size[0] - OFF_ATTRIBUTES) != stored:
            return CHECK_BAD_CRC
    return CHECK_OK


cdef str check_message(int rc, const uint8_t *p, Py_ssize_t avail, Py_ssize_t size):
    if rc == CHECK_PARTIAL:
        if avail < LOG_OVERHEAD:
            return f"only {avail} bytes, a batch needs at least {HEADER_SIZE}"
        return f"batch of {size} bytes but only {avail} bytes remain"
    if rc == CHECK_BAD_LENGTH:
        return f"batchLength {<int32_t>kb_load_be32(p + OFF_BATCH_LENGTH)} is smaller than a batch header"
    if rc == CHECK_BAD_MAGIC:
        return f"magic {<int8_t>p[OFF_MAGIC]}, only RecordBatch v2 (magic 2) is supported"
    if rc == CHECK_BAD_COUNT:
        return (f"negative recordCount {<int32_t>kb_load_be32(p + OFF_RECORD_COUNT)} or "
                f"lastOffsetDelta {<int32_t>kb_load_be32(p + OFF_LAST_OFFSET_DELTA)}")
    if rc == CHECK_BAD_CRC:
        return (f"CRC-32C mismatch: stored 0x{kb_load_be32(p + OFF_CRC):08x}, computed "
                f"0x{crc32c_raw(0, p + OFF_ATTRIBUTES, size - OFF_ATTRIBUTES):08x}")
    return "ok"


cdef str record_error(int rc):
    if rc == REC_TRUNCATED:
        return "truncated"
    if rc == REC_BAD_VARINT:
        return "varint too long"
    if rc == REC_BAD_LENGTH:
        return "invalid length"
    return "ok"


cdef object decompress(int codec, const uint8_t *data, Py_ssize_t length, Py_ssize_t limit,
                       Py_ssize_t position):
    """The records block of a compressed batch, decompressed (bytes). `position` is the
    batch's byte offset, for the error message."""
    if limit < 0:
        # the codecs take a negative output bound as "unbounded"
        raise ValueError(f"negative decompress limit {limit}")
    try:
        out = inflate(codec, data, length, limit)
    except OverflowError:
        raise CorruptRecordError(
            f"record batch at byte {position}: {COMPRESSION_NAMES[codec]} records block "
            f"decompresses to more than {limit} bytes", position) from None
    except Exception as exc:
        raise CorruptRecordError(
            f"record batch at byte {position}: cannot decompress "
            f"{COMPRESSION_NAMES[codec]} records block: {exc}", position) from None
    if out is None:
        raise CorruptRecordError(f"record batch at byte {position}: unknown compression codec "
                                 f"{codec}", position)
    return out


def decompress_block(int codec, data, Py_ssize_t limit=DEFAULT_DECOMPRESS_LIMIT):
    """Decompresses a records block compressed with `codec` (1..4)."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return decompress(codec, <const uint8_t *>view.buf, view.len, limit, 0)
    finally:
        PyBuffer_Release(&view)


# ---------------------------------------------------------------- buffer holder

@cython.final
cdef class _BufferRef:
    """Holds one Py_buffer for any number of RecordBatch views into it."""
    cdef Py_buffer view
    cdef bint writable
    cdef bint held

    def __cinit__(self, object obj):
        try:
            PyObject_GetBuffer(obj, &self.view, PyBUF_WRITABLE)
            self.writable = True
        except (BufferError, TypeError):
            PyObject_GetBuffer(obj, &self.view, PyBUF_SIMPLE)
            self.writable = False
        self.held = True

    def __dealloc__(self):
        if self.held:
            PyBuffer_Release(&self.view)
            self.held = False


cdef _BufferRef _EMPTY_REF = _BufferRef(bytes(HEADER_SIZE))


# ---------------------------------------------------------------- records

@cython.final
cdef class Record:
    """One decoded record: absolute offset and timestamp, key, value (bytes or None) and
    headers as a list of (str, bytes | None)."""
    cdef readonly int64_t offset
    cdef readonly int64_t timestamp
    cdef readonly object key
    cdef readonly object value
    cdef readonly list headers
    cdef readonly int attributes

    def __repr__(self):
        return (f"Record(offset={self.offset}, timestamp={self.timestamp}, key={self.key!r}, "
                f"value={self.value!r}, headers={self.headers!r})")

    def __eq__(self, other):
        if not isinstance(other, Record):
            return NotImplemented
        o = <Record>other
        return (self.offset == o.offset and self.timestamp == o.timestamp and
                self.key == o.key and self.value == o.value and self.headers == o.headers)


cdef inline object _bytes_or_none(const uint8_t *p, int32_t n):
    if p == NULL:
        return None
    return PyBytes_FromStringAndSize(<const char *>p, n)


cdef list _decode_records(const uint8_t *p, const uint8_t *end, int32_t count,
                          int64_t base_offset, int64_t base_timestamp, bint log_append_time,
                          int64_t max_timestamp, Py_ssize_t batch_position,
                          Py_ssize_t body_position, bint whole=True):
    """Decodes `count` records in [p, end). body_position is the byte offset of p in the
    source (for uncompressed batches) or -1 (inside a decompressed block). With whole,
    the records must end exactly at `end` (False: only the first `count` are read)."""
    cdef RecordView rv
    cdef HeaderView hv
    cdef int rc
    cdef int32_t i, _j
    cdef const uint8_t *start = p
    cdef const uint8_t *hp
    cdef Record rec
    out = []
    for i in range(count):
        rc = parse_record(p, end, &rv)
        if rc != REC_OK:
            _raise_record(rc, i, batch_position, body_position, p - start)
        rec = Record.__new__(Record)
        rec.offset = base_offset + rv.offset_delta
        rec.timestamp = max_timestamp if log_append_time else base_timestamp + rv.timestamp_delta
        rec.attributes = rv.attributes
        rec.key = _bytes_or_none(rv.key, rv.key_len)
        rec.value = _bytes_or_none(rv.value, rv.value_len)
        headers = []
        hp = rv.headers
        for _j in range(rv.header_count):
            rc = parse_header(&hp, rv.end, &hv)
            if rc != REC_OK:
                _raise_record(rc, i, batch_position, body_position, p - start)
            if not kb_utf8_valid(hv.key, hv.key_len):
                _raise_record(-1, i, batch_position, body_position, p - start)
            headers.append((PyUnicode_DecodeUTF8(<const char *>hv.key, hv.key_len, NULL),
                            _bytes_or_none(hv.value, hv.value_len)))
        if hp != rv.end:
            _raise_record(REC_BAD_LENGTH, i, batch_position, body_position, p - start)
        rec.headers = headers
        out.append(rec)
        p = rv.end
    if whole and p != end:
        raise CorruptRecordError(
            f"record batch at byte {batch_position}: {end - p} bytes left after "
            f"{count} records", batch_position)
    return out


cdef void _raise_record(int rc, int32_t index, Py_ssize_t batch_position,
                        Py_ssize_t body_position, Py_ssize_t rel) except *:
    what = "header key is not UTF-8" if rc == -1 else record_error(rc)
    if body_position >= 0:
        where = f"at byte {body_position + rel}"
        pos = body_position + rel
    else:
        where = f"at byte {rel} of the decompressed records"
        pos = batch_position
    raise CorruptRecordError(
        f"record {index} of the batch at byte {batch_position}: {what} ({where})", pos)


# ---------------------------------------------------------------- the batch view

@cython.final
cdef class RecordBatch:
    """A zero-copy view of the RecordBatch v2 at `position` in `buffer`.

    Construction checks only that the buffer holds the whole batch (per its batchLength)
    and that magic is 2; `validate()` also checks the CRC-32C.
    """
    cdef _BufferRef _ref
    cdef const uint8_t *_p
    cdef Py_ssize_t _size
    cdef readonly Py_ssize_t position

    def __cinit__(self, *args, **kwargs):
        # until _init runs (e.g. RecordBatch.__new__ without __init__) the view points at
        # an all-zero, read-only header: every method answers (validate() raises: batchLength 0)
        # instead of dereferencing NULL
        self._ref = _EMPTY_REF
        self._p = <const uint8_t *>_EMPTY_REF.view.buf
        self._size = HEADER_SIZE

    def __init__(self, buffer, Py_ssize_t position=0):
        ref = buffer if isinstance(buffer, _BufferRef) else _BufferRef(buffer)
        self._init(ref, position)

    cdef int _init(self, _BufferRef ref, Py_ssize_t position) except -1:
        cdef Py_ssize_t size = 0
        cdef const uint8_t *p
        if position < 0 or position > ref.view.len:
            raise ValueError(f"position {position} outside a buffer of {ref.view.len} bytes")
        p = <const uint8_t *>ref.view.buf + position
        rc = batch_check(p, ref.view.len - position, False, &size)
        if rc != CHECK_OK:
            raise CorruptRecordError(
                f"record batch at byte {position}: {check_message(rc, p, ref.view.len - position, size)}",
                position)
        self._ref = ref
        self._p = p
        self._size = size
        self.position = position
        return 0

    # -- header fields
    @property
    def base_offset(self):
        return <int64_t>kb_load_be64(self._p + OFF_BASE_OFFSET)

    @property
    def batch_length(self):
        return <int32_t>kb_load_be32(self._p + OFF_BATCH_LENGTH)

    @property
    def partition_leader_epoch(self):
        return <int32_t>kb_load_be32(self._p + OFF_PARTITION_LEADER_EPOCH)

    @property
    def magic(self):
        return <int8_t>self._p[OFF_MAGIC]

    @property
    def crc(self):
        return kb_load_be32(self._p + OFF_CRC)

    @property
    def attributes(self):
        return <int16_t>kb_load_be16(self._p + OFF_ATTRIBUTES)

    @property
    def compression(self):
        """Codec number: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd."""
        return kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK

    @property
    def compression_name(self):
        c = kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK
        return COMPRESSION_NAMES[c] if c < 5 else f"unknown({c})"

    @property
    def timestamp_type(self):
        """0 = CreateTime, 1 = LogAppendTime."""
        return 1 if kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_TIMESTAMP_TYPE else 0

    @property
    def is_transactional(self):
        return bool(kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_TRANSACTIONAL)

    @property
    def is_control(self):
        return bool(kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_CONTROL)

    @property
    def has_delete_horizon(self):
        return bool(kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_DELETE_HORIZON)

    @property
    def last_offset_delta(self):
        return <int32_t>kb_load_be32(self._p + OFF_LAST_OFFSET_DELTA)

    @property
    def base_timestamp(self):
        return <int64_t>kb_load_be64(self._p + OFF_BASE_TIMESTAMP)

    @property
    def max_timestamp(self):
        return <int64_t>kb_load_be64(self._p + OFF_MAX_TIMESTAMP)

    @property
    def producer_id(self):
        return <int64_t>kb_load_be64(self._p + OFF_PRODUCER_ID)

    @property
    def producer_epoch(self):
        return <int16_t>kb_load_be16(self._p + OFF_PRODUCER_EPOCH)

    @property
    def base_sequence(self):
        return <int32_t>kb_load_be32(self._p + OFF_BASE_SEQUENCE)

    @property
    def record_count(self):
        return <int32_t>kb_load_be32(self._p + OFF_RECORD_COUNT)

    # -- derived
    @property
    def last_offset(self):
        return <int64_t>kb_load_be64(self._p) + <int32_t>kb_load_be32(self._p + OFF_LAST_OFFSET_DELTA)

    @property
    def next_offset(self):
        return <int64_t>kb_load_be64(self._p) + <int32_t>kb_load_be32(self._p + OFF_LAST_OFFSET_DELTA) + 1

    @property
    def size(self):
        """Total bytes of this batch (12 + batchLength)."""
        return self._size

    @property
    def writable(self):
        return self._ref.writable

    def __len__(self):
        return self._size

    def __repr__(self):
        return (f"RecordBatch(base_offset={self.base_offset}, last_offset_delta="
                f"{self.last_offset_delta}, record_count={self.record_count}, size={self._size}, "
                f"compression={self.compression_name}, position={self.position})")

    # -- checks
    def compute_crc(self):
        """CRC-32C of the bytes the crc field covers (attributes to the end)."""
        return crc32c_raw(0, self._p + OFF_ATTRIBUTES, self._size - OFF_ATTRIBUTES)

    def is_valid(self):
        cdef Py_ssize_t size = 0
        return batch_check(self._p, self._size, True, &size) == CHECK_OK

    def validate(self):
        """Raises CorruptRecordError unless magic, lengths, counts and CRC-32C are right."""
        cdef Py_ssize_t size = 0
        rc = batch_check(self._p, self._size, True, &size)
        if rc != CHECK_OK:
            raise CorruptRecordError(
                f"record batch at byte {self.position}: {check_message(rc, self._p, self._size, size)}",
                self.position)

    # -- in-place rewrites (before the CRC'd range: the CRC stays valid)
    cdef uint8_t *_writable_ptr(self) except NULL:
        if not self._ref.writable:
            raise TypeError("the buffer under this RecordBatch is read-only")
        return <uint8_t *>self._p

    def set_base_offset(self, int64_t base_offset):
        kb_store_be64(self._writable_ptr() + OFF_BASE_OFFSET, <uint64_t>base_offset)

    def set_partition_leader_epoch(self, int32_t epoch):
        kb_store_be32(self._writable_ptr() + OFF_PARTITION_LEADER_EPOCH, <uint32_t>epoch)

    def set_log_append_time(self, int64_t timestamp):
        """Stamps the batch with the broker's time (topic message.timestamp.type =
        LogAppendTime): sets the timestamp-type attribute and maxTimestamp, which every
        record then reports, and recomputes the CRC-32C (these fields are CRC'd)."""
        cdef uint8_t *p = self._writable_ptr()
        cdef uint16_t attrs = kb_load_be16(p + OFF_ATTRIBUTES) | ATTR_TIMESTAMP_TYPE
        kb_store_be16(p + OFF_ATTRIBUTES, attrs)
        kb_store_be64(p + OFF_MAX_TIMESTAMP, <uint64_t>timestamp)
        kb_store_be32(p + OFF_CRC, crc32c_raw(0, p + OFF_ATTRIBUTES, self._size - OFF_ATTRIBUTES))

    # -- bytes
    def tobytes(self):
        return PyBytes_FromStringAndSize(<const char *>self._p, self._size)

    def memoryview(self):
        """A memoryview of exactly this batch's bytes (no copy; read-only unless the
        underlying buffer is writable)."""
        return memoryview(_ExportView(self))

    # -- records
    def records(self, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT, Py_ssize_t max_records=-1):
        """Decodes the records (decompressing the block if needed) -> list[Record]; with
        max_records >= 0, only that many from the start."""
        cdef int codec = kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK
        cdef int32_t count = <int32_t>kb_load_be32(self._p + OFF_RECORD_COUNT)
        cdef int64_t base_offset = <int64_t>kb_load_be64(self._p)
        cdef int64_t base_ts = <int64_t>kb_load_be64(self._p + OFF_BASE_TIMESTAMP)
        cdef int64_t max_ts = <int64_t>kb_load_be64(self._p + OFF_MAX_TIMESTAMP)
        cdef bint lat = (kb_load_be16(self._p + OFF_ATTRIBUTES) & ATTR_TIMESTAMP_TYPE) != 0
        cdef const uint8_t *body = self._p + HEADER_SIZE
        cdef Py_ssize_t body_len = self._size - HEADER_SIZE
        cdef bint whole = True
        if count < 0:
            raise CorruptRecordError(f"record batch at byte {self.position}: negative recordCount",
                                     self.position)
        if 0 <= max_records < count:
            count = <int32_t>max_records
            whole = False
        if codec == CODEC_NONE:
            return _decode_records(body, body + body_len, count, base_offset, base_ts, lat,
                                   max_ts, self.position, self.position + HEADER_SIZE, whole)
        block = decompress(codec, body, body_len, decompress_limit, self.position)
        cdef const uint8_t *bp = <const uint8_t *>PyBytes_AS_STRING(block)
        return _decode_records(bp, bp + len(block), count, base_offset, base_ts, lat, max_ts,
                               self.position, -1, whole)

    def __iter__(self):
        return iter(self.records())


@cython.final
cdef class _ExportView:
    """Exports one batch's bytes through the buffer protocol (keeps the batch alive)."""
    cdef RecordBatch batch

    def __cinit__(self, RecordBatch batch):
        self.batch = batch

    def __getbuffer__(self, Py_buffer *buf, int flags):
        cdef bint ro = not self.batch._ref.writable
        if (flags & PyBUF_WRITABLE) and ro:
            raise BufferError("read-only batch")
        kb_export_bytes(buf, <void *>self.batch._p, self.batch._size, ro)
        buf.obj = self

    def __releasebuffer__(self, Py_buffer *buf):
        pass


# ---------------------------------------------------------------- iteration

@cython.final
cdef class BatchIterator:
    """Iterates the batches in a buffer from `position`. Stops cleanly at a partial batch
    (a torn tail); `bytes_consumed` is then the end of the last whole batch relative to
    the start position, and `position` the absolute offset where iteration stopped.
    Corrupt lengths or magic raise CorruptRecordError naming the byte offset; with
    validate=True the CRC of each batch is checked too."""
    cdef _BufferRef _ref
    cdef Py_ssize_t _start
    cdef readonly Py_ssize_t position
    cdef readonly bint validate
    cdef readonly bint partial

    def __cinit__(self, buffer, Py_ssize_t position=0, bint validate=False):
        self._ref = buffer if isinstance(buffer, _BufferRef) else _BufferRef(buffer)
        if position < 0 or position > self._ref.view.len:
            raise ValueError(f"position {position} outside a buffer of {self._ref.view.len} bytes")
        self._start = position
        self.position = position
        self.validate = validate
        self.partial = False

    @property
    def bytes_consumed(self):
        return self.position - self._start

    def __iter__(self):
        return self

    def __next__(self):
        cdef Py_ssize_t avail = self._ref.view.len - self.position
        cdef Py_ssize_t size = 0
        cdef const uint8_t *p = <const uint8_t *>self._ref.view.buf + self.position
        cdef RecordBatch b
        if avail == 0:
            raise StopIteration
        rc = batch_check(p, avail, self.validate, &size)
        if rc == CHECK_PARTIAL:
            self.partial = True
            raise StopIteration
        if rc != CHECK_OK:
            raise CorruptRecordError(
                f"record batch at byte {self.position}: {check_message(rc, p, avail, size)}",
                self.position)
        b = RecordBatch.__new__(RecordBatch)
        b._ref = self._ref
        b._p = p
        b._size = size
        b.position = self.position
        self.position += size
        return b


def iter_batches(buffer, Py_ssize_t position=0, *, bint validate=False):
    """Batches in `buffer` from `position`, as RecordBatch views: see BatchIterator."""
    return BatchIterator(buffer, position, validate)


cdef enum:
    PRODUCER_OK = 0
    PRODUCER_BAD_COUNT = 1         # recordCount <= 0 or != lastOffsetDelta + 1
    PRODUCER_CONTROL = 2           # clients may not write control batches
    PRODUCER_BAD_SEQUENCE = 3      # a producer id with a negative base sequence
    PRODUCER_BAD_CODEC = 4         # compression codec > 4
    PRODUCER_BAD_RECORDS = 5       # the records do not fill the batch exactly (uncompressed)


cdef int producer_check(const uint8_t *p, Py_ssize_t size) noexcept nogil:
    """Kafka's LogValidator.validateBatch, from the header only — plus, for uncompressed
    batches, a walk over the record length varints (no decoding) that checks exactly
    recordCount records fill the batch."""
    cdef int32_t count = <int32_t>kb_load_be32(p + OFF_RECORD_COUNT)
    cdef int32_t delta = <int32_t>kb_load_be32(p + OFF_LAST_OFFSET_DELTA)
    cdef uint16_t attrs = kb_load_be16(p + OFF_ATTRIBUTES)
    cdef const uint8_t *r
    cdef const uint8_t *end
    cdef int32_t _i, length
    cdef int k
    if count <= 0 or <int64_t>delta + 1 != count:
        return PRODUCER_BAD_COUNT
    if attrs & ATTR_CONTROL:
        return PRODUCER_CONTROL
    if (attrs & ATTR_COMPRESSION_MASK) > CODEC_ZSTD:
        return PRODUCER_BAD_CODEC
    if <int64_t>kb_load_be64(p + OFF_PRODUCER_ID) >= 0 and <int32_t>kb_load_be32(p + OFF_BASE_SEQUENCE) < 0:
        return PRODUCER_BAD_SEQUENCE
    if attrs & ATTR_COMPRESSION_MASK == CODEC_NONE:
        r = p + HEADER_SIZE
        end = p + size
        for _i in range(count):
            k = kb_read_varint(r, end, &length)
            if k <= 0 or length < 0 or length > end - r - k:
                return PRODUCER_BAD_RECORDS
            r += k + length
        if r != end:
            return PRODUCER_BAD_RECORDS
    return PRODUCER_OK


_PRODUCER_PROBLEMS = {
    PRODUCER_BAD_COUNT: "recordCount must be positive and equal lastOffsetDelta + 1",
    PRODUCER_CONTROL: "clients may not write control batches",
    PRODUCER_BAD_SEQUENCE: "a batch with a producer id needs a base sequence >= 0",
    PRODUCER_BAD_CODEC: "unknown compression codec",
    PRODUCER_BAD_RECORDS: "the records do not match recordCount or the batch length",
}


class InvalidRecordError(CorruptRecordError):
    """A batch whose bytes are intact (CRC good) but which a producer may not write
    (Kafka's InvalidRecordException -> error INVALID_RECORD)."""


def assign_offsets(buffer, int64_t base_offset, int32_t partition_leader_epoch=-1,
                   bint validate=True, bint producer_checks=False):
    """Validates every batch in `buffer` (which must be writable and hold whole batches
    only) and rewrites their base offsets densely from `base_offset` and their partition
    leader epoch, in place. Returns (next_offset, batch_count, record_count,
    max_timestamp, offset_of_max_timestamp).

    With producer_checks (batches straight from a client), also Kafka's batch rules:
    recordCount == lastOffsetDelta + 1 > 0, no control batch, a known codec, a base
    sequence with a producer id, and for uncompressed batches exactly recordCount
    records — InvalidRecordError otherwise. Nothing is rewritten unless every batch
    passes.

    This is the broker's append path: O(1) work per batch (CRC aside), never per record
    in Python.
    """
    cdef _BufferRef ref = _BufferRef(buffer)
    cdef Py_ssize_t pos = 0, size = 0, n = ref.view.len
    cdef uint8_t *p
    cdef int rc = CHECK_OK, prc = PRODUCER_OK
    cdef int64_t offset = base_offset
    cdef int64_t max_ts = -1, max_ts_offset = -1, ts
    cdef int32_t delta
    cdef Py_ssize_t batches = 0
    cdef int64_t records = 0
    if not ref.writable:
        raise TypeError("assign_offsets needs a writable buffer (bytearray, memoryview of one)")
    p = <uint8_t *>ref.view.buf
    with nogil:
        # pass 1: check everything, change nothing
        while pos < n:
            rc = batch_check(p + pos, n - pos, validate, &size)
            if rc != CHECK_OK:
                break
            if producer_checks:
                prc = producer_check(p + pos, size)
                if prc != PRODUCER_OK:
                    break
            pos += size
    if rc != CHECK_OK:
        raise CorruptRecordError(
            f"record batch at byte {pos}: {check_message(rc, p + pos, n - pos, size)}", pos)
    if prc != PRODUCER_OK:
        raise InvalidRecordError(f"record batch at byte {pos}: {_PRODUCER_PROBLEMS[prc]}", pos)
    pos = 0
    with nogil:
        while pos < n:
            size = LOG_OVERHEAD + <int32_t>kb_load_be32(p + pos + OFF_BATCH_LENGTH)
            delta = <int32_t>kb_load_be32(p + pos + OFF_LAST_OFFSET_DELTA)
            kb_store_be64(p + pos, <uint64_t>offset)
            kb_store_be32(p + pos + OFF_PARTITION_LEADER_EPOCH, <uint32_t>partition_leader_epoch)
            ts = <int64_t>kb_load_be64(p + pos + OFF_MAX_TIMESTAMP)
            if ts > max_ts:
                max_ts = ts
                max_ts_offset = offset + delta
            records += <int32_t>kb_load_be32(p + pos + OFF_RECORD_COUNT)
            offset += <int64_t>delta + 1
            batches += 1
            pos += size
    return offset, batches, records, max_ts, max_ts_offset


def require_keys(buffer, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Raises InvalidRecordError naming the first record whose key is null: a compacted
    topic refuses them, as Kafka does (compaction keeps the latest record per key).
    Compressed batches are decompressed to look (Kafka does the same for compacted
    topics). Batches must already have passed batch_check (assign_offsets)."""
    cdef _BufferRef ref = _BufferRef(buffer)
    cdef const uint8_t *p = <const uint8_t *>ref.view.buf
    cdef Py_ssize_t n = ref.view.len, pos = 0, size = 0
    cdef const uint8_t *q
    cdef const uint8_t *start
    cdef const uint8_t *end
    cdef RecordView rv
    cdef int rc, codec
    cdef int32_t i = 0, count
    cdef int32_t missing = -1
    while pos < n:
        rc = batch_check(p + pos, n - pos, False, &size)
        if rc != CHECK_OK:
            raise CorruptRecordError(
                f"record batch at byte {pos}: {check_message(rc, p + pos, n - pos, size)}", pos)
        codec = kb_load_be16(p + pos + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK
        count = <int32_t>kb_load_be32(p + pos + OFF_RECORD_COUNT)
        block = None
        if codec == CODEC_NONE:
            q = p + pos + HEADER_SIZE
            end = p + pos + size
        else:
            block = decompress(codec, p + pos + HEADER_SIZE, size - HEADER_SIZE, decompress_limit, pos)
            q = <const uint8_t *>PyBytes_AS_STRING(block)
            end = q + len(block)
        start = q
        with nogil:
            rc = REC_OK
            for i in range(count):
                rc = parse_record(q, end, &rv)
                if rc != REC_OK:
                    break
                if rv.key == NULL:
                    missing = i
                    break
                q = rv.end
        if rc != REC_OK:
            _raise_record(rc, i, pos, pos + HEADER_SIZE if codec == CODEC_NONE else -1, q - start)
        if missing >= 0:
            raise InvalidRecordError(
                f"record {missing} of the batch at byte {pos} has no key: a compacted topic "
                f"needs a key on every record", pos)
        pos += size


# ---------------------------------------------------------------- schema ids on produce


@cython.final
cdef class SchemaIds:
    """An immutable set of schema ids (int32), looked up in C: what one side (key or value)
    of a topic with schema validation allows (broker/registry/validation.py builds them
    from the registry's view). A sorted array and a binary search: no Python object per
    lookup."""
    cdef int32_t *_ids
    cdef Py_ssize_t _n

    def __cinit__(self, ids=()):
        cdef list values = sorted({int(i) for i in ids})
        cdef Py_ssize_t i
        self._n = len(values)
        self._ids = <int32_t *>malloc(max(self._n, 1) * sizeof(int32_t))
        if self._ids == NULL:
            raise MemoryError()
        for i in range(self._n):
            if not -2**31 <= values[i] < 2**31:
                raise ValueError(f"schema id {values[i]} does not fit an int32")
            self._ids[i] = <int32_t>values[i]

    def __dealloc__(self):
        free(self._ids)

    cdef inline bint has(self, int32_t v) noexcept nogil:
        cdef Py_ssize_t lo = 0, hi = self._n, mid
        while lo < hi:
            mid = (lo + hi) >> 1
            if self._ids[mid] < v:
                lo = mid + 1
            else:
                hi = mid
        return lo < self._n and self._ids[lo] == v

    def __contains__(self, value):
        return -2**31 <= value < 2**31 and self.has(<int32_t>value)

    def __len__(self):
        return self._n

    def __iter__(self):
        return iter([self._ids[i] for i in range(self._n)])

    def __repr__(self):
        return f"SchemaIds({list(self)})"


# check_schema_ids problems, per side
cdef enum:
    FRAME_OK = 0
    FRAME_SHORT = 1            # fewer than 5 bytes: no magic byte and schema id
    FRAME_MAGIC = 2            # the first byte is not 0
    FRAME_UNKNOWN_ID = 3       # an id the side's SchemaIds does not hold

#: the problem codes check_schema_ids reports (broker/registry/validation.py words them)
FRAME_PROBLEMS = {FRAME_SHORT: "short", FRAME_MAGIC: "magic", FRAME_UNKNOWN_ID: "unknown id"}


cdef inline int _frame(const uint8_t *p, int32_t n, SchemaIds ids, int32_t *found) noexcept nogil:
    """Confluent's wire format: magic byte 0, a 4-byte big-endian schema id, the payload.
    A null field (p NULL) passes: a tombstone, or a record without a key."""
    if p == NULL:
        return FRAME_OK
    if n < 5:
        return FRAME_SHORT
    if p[0] != 0:
        return FRAME_MAGIC
    found[0] = <int32_t>kb_load_be32(p + 1)
    if not ids.has(found[0]):
        return FRAME_UNKNOWN_ID
    return FRAME_OK


cdef inline int _skip_varint(const uint8_t **pp, const uint8_t *end, int max_bytes) noexcept nogil:
    """Steps over a varint without decoding it (a value nobody reads)."""
    cdef const uint8_t *p = pp[0]
    cdef int i
    for i in range(max_bytes):
        if p + i >= end:
            return REC_TRUNCATED
        if not (p[i] & 0x80):
            pp[0] = p + i + 1
            return REC_OK
    return REC_BAD_VARINT


cdef inline int _len_field(const uint8_t **pp, const uint8_t *end, const uint8_t **data,
                           int32_t *length) noexcept nogil:
    """read_len_field, with a branch for the common one-byte length (0..63)."""
    cdef const uint8_t *p = pp[0]
    if p < end and p[0] < 0x80 and not (p[0] & 1):
        length[0] = p[0] >> 1
        if length[0] > end - p - 1:
            return REC_TRUNCATED
        data[0] = p + 1
        pp[0] = p + 1 + length[0]
        return REC_OK
    return read_len_field(pp, end, data, length)


cdef inline int _key_and_value(const uint8_t *p, const uint8_t *end, RecordView *r) noexcept nogil:
    """The record at p's key, value and end (r.key, r.value and their lengths, r.end),
    never reading at or past `end`: parse_record's walk without the timestamp and offset
    deltas decoded (stepped over) and without the headers (the record's length bounds
    them; nothing here reads them)."""
    cdef int n, rc
    cdef int32_t length
    n = kb_read_varint(p, end, &length)
    if n == 0:
        return REC_TRUNCATED
    if n < 0:
        return REC_BAD_VARINT
    p += n
    if length < 0:
        return REC_BAD_LENGTH
    if length > end - p:
        return REC_TRUNCATED
    end = p + length
    r.end = end
    if p >= end:
        return REC_TRUNCATED
    p += 1                                  # attributes
    rc = _skip_varint(&p, end, 10)          # timestampDelta
    if rc != REC_OK:
        return rc
    rc = _skip_varint(&p, end, 5)           # offsetDelta
    if rc != REC_OK:
        return rc
    rc = _len_field(&p, end, &r.key, &r.key_len)
    if rc != REC_OK:
        return rc
    return _len_field(&p, end, &r.value, &r.value_len)


def check_schema_ids(buffer, SchemaIds key_ids, SchemaIds value_ids, Py_ssize_t max_errors=100,
                     Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """Checks every record of the batches in `buffer` (a Produce's records for one
    partition, already through assign_offsets) for Confluent's framing: magic byte 0,
    then a 4-byte big-endian schema id that `key_ids` (keys) or `value_ids` (values)
    holds; a side whose set is None is not checked; a null key or value passes.
    Control batches (transaction markers) are not checked. Compressed batches are
    decompressed (one buffer per batch, nothing per record).

    None when every record passes; otherwise a list of up to `max_errors` tuples
    (record index, side: 0 key / 1 value, problem: FRAME_PROBLEMS' code, the schema id
    found or -1), the index counting records from the first batch of `buffer`.
    CorruptRecordError for records that do not parse."""
    cdef _BufferRef ref = _BufferRef(buffer)
    cdef const uint8_t *p = <const uint8_t *>ref.view.buf
    cdef Py_ssize_t n = ref.view.len, pos = 0, size = 0
    cdef const uint8_t *q
    cdef const uint8_t *start
    cdef const uint8_t *end
    cdef RecordView rv
    cdef int rc, codec, kp, vp
    cdef int32_t i = 0, count, kid = -1, vid = -1
    cdef int64_t index = 0
    cdef bint check_keys = key_ids is not None, check_values = value_ids is not None
    cdef list errors = None
    if max_errors < 1:
        raise ValueError(f"max_errors must be at least 1, not {max_errors}")
    while pos < n:
        rc = batch_check(p + pos, n - pos, False, &size)
        if rc != CHECK_OK:
            raise CorruptRecordError(
                f"record batch at byte {pos}: {check_message(rc, p + pos, n - pos, size)}", pos)
        if kb_load_be16(p + pos + OFF_ATTRIBUTES) & ATTR_CONTROL:
            pos += size
            continue
        codec = kb_load_be16(p + pos + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK
        count = <int32_t>kb_load_be32(p + pos + OFF_RECORD_COUNT)
        block = None
        if codec == CODEC_NONE:
            q = p + pos + HEADER_SIZE
            end = p + pos + size
        else:
            block = decompress(codec, p + pos + HEADER_SIZE, size - HEADER_SIZE, decompress_limit, pos)
            q = <const uint8_t *>PyBytes_AS_STRING(block)
            end = q + len(block)
        start = q
        i = 0
        while i < count:
            with nogil:
                rc = REC_OK
                kp = vp = FRAME_OK
                while i < count:
                    rc = _key_and_value(q, end, &rv)
                    if rc != REC_OK:
                        break
                    q = rv.end
                    if check_keys:
                        kp = _frame(rv.key, rv.key_len, key_ids, &kid)
                    if check_values:
                        vp = _frame(rv.value, rv.value_len, value_ids, &vid)
                    i += 1
                    index += 1
                    if kp != FRAME_OK or vp != FRAME_OK:
                        break
            if rc != REC_OK:
                _raise_record(rc, i, pos, pos + HEADER_SIZE if codec == CODEC_NONE else -1, q - start)
            if kp == FRAME_OK and vp == FRAME_OK:
                break
            if errors is None:
                errors = []
            if kp != FRAME_OK:
                errors.append((index - 1, 0, kp, kid if kp == FRAME_UNKNOWN_ID else -1))
            if vp != FRAME_OK and len(errors) < max_errors:
                errors.append((index - 1, 1, vp, vid if vp == FRAME_UNKNOWN_ID else -1))
            if len(errors) >= max_errors:
                return errors[:max_errors]
            kp = vp = FRAME_OK
        pos += size
    return errors

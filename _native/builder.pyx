# cython: language_level=3
"""The batch builder: records encoded into one Kafka RecordBatch v2 (layout in
records.pxd), compressed with any of Kafka's codecs (codecs.pyx), CRC-32C set.

Invariants:
- offset deltas are 0, 1, 2 ... in append order; the base offset is left to the broker;
- the builder's memory is exported read-only (view()) and never changes while a view
  is alive (BufferError instead).
"""
cimport cython
from libc.stdint cimport uint8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.string cimport memcpy
from libc.stdlib cimport free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_WRITABLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

from broker._native.buffer cimport (kb_store_be16, kb_store_be32, kb_store_be64, kb_write_varint,
                                    kb_write_varlong, kb_varint_size, kb_varlong_size, kb_export_bytes, kb_reserve)
from broker._native.crc32c cimport crc32c_raw
from broker._native.codecs cimport CODEC_NONE
from broker._native.records cimport (HEADER_SIZE, LOG_OVERHEAD, OFF_BASE_OFFSET, OFF_BATCH_LENGTH,
                                     OFF_PARTITION_LEADER_EPOCH, OFF_MAGIC, OFF_CRC, OFF_ATTRIBUTES,
                                     OFF_LAST_OFFSET_DELTA, OFF_BASE_TIMESTAMP, OFF_MAX_TIMESTAMP,
                                     OFF_PRODUCER_ID, OFF_PRODUCER_EPOCH, OFF_BASE_SEQUENCE,
                                     OFF_RECORD_COUNT, ATTR_TIMESTAMP_TYPE, ATTR_TRANSACTIONAL, ATTR_CONTROL)

import time as _time

from broker._native.codecs import compress_block, compression_code

cdef extern from "kb_utf8.h" nogil:
    int kb_utf8_valid(const uint8_t *s, size_t n)


cdef inline bint _key_buffer(key, Py_buffer *view, const uint8_t **p, Py_ssize_t *n) except -1:
    """Holds the buffer of a record key (None: a null key, nothing held); True when the
    caller must release `view`."""
    if key is None:
        return False
    PyObject_GetBuffer(key, view, PyBUF_SIMPLE)
    p[0] = <const uint8_t *>view.buf
    n[0] = view.len
    return True


@cython.final
cdef class BatchBuilder:
    """Encodes records into one RecordBatch v2.

        b = BatchBuilder(compression="zstd")
        b.append(timestamp_ms, b"key", b"value", [("h", b"v")])
        data = b.build()          # bytes: a valid batch (CRC-32C set), base offset 0

    Offsets deltas are 0, 1, 2 ... in append order; the broker assigns the base offset.
    """
    cdef uint8_t *_buf
    cdef Py_ssize_t _len
    cdef Py_ssize_t _cap
    cdef int32_t _count
    cdef int64_t _base_ts
    cdef int64_t _max_ts
    cdef readonly int compression
    cdef readonly int64_t base_offset
    cdef readonly int32_t partition_leader_epoch
    cdef readonly int64_t producer_id
    cdef readonly int16_t producer_epoch
    cdef readonly int32_t base_sequence
    cdef readonly bint is_transactional
    cdef readonly bint is_control
    cdef readonly int timestamp_type
    cdef object _level
    cdef Py_ssize_t _exports

    def __cinit__(self):
        self._buf = NULL
        self._len = 0
        self._cap = 0
        # room for the header from the start, so that a builder made with __new__ (no
        # __init__) still builds within its buffer instead of writing past it
        self._reserve(HEADER_SIZE + 256)
        self._len = HEADER_SIZE

    def __init__(self, compression=None, *, int64_t base_offset=0,
                 int32_t partition_leader_epoch=-1, int64_t producer_id=-1,
                 int16_t producer_epoch=-1, int32_t base_sequence=-1,
                 bint is_transactional=False, bint is_control=False, int timestamp_type=0,
                 compression_level=None):
        self.compression = compression_code(compression)
        self.base_offset = base_offset
        self.partition_leader_epoch = partition_leader_epoch
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.base_sequence = base_sequence
        self.is_transactional = is_transactional
        self.is_control = is_control
        if timestamp_type not in (0, 1):
            raise ValueError("timestamp_type must be 0 (CreateTime) or 1 (LogAppendTime)")
        self.timestamp_type = timestamp_type
        self._level = compression_level
        self._count = 0
        self._base_ts = 0
        self._max_ts = -1
        self._reserve(HEADER_SIZE + 256)
        self._len = HEADER_SIZE

    def __dealloc__(self):
        if self._buf != NULL:
            free(self._buf)
            self._buf = NULL

    cdef int _reserve(self, Py_ssize_t need) except -1:
        return kb_reserve(&self._buf, &self._cap, need, 512)

    cdef int64_t _timestamp_delta(self, timestamp) except? -1:
        """The delta of a record's timestamp (ms, None = now) to the batch's first one,
        which the batch's first record sets."""
        cdef int64_t ts = <int64_t>(_time.time() * 1000) if timestamp is None else <int64_t>timestamp
        if self._count == 0:
            self._base_ts = ts
        return ts - self._base_ts

    def __len__(self):
        return self._count

    @property
    def record_count(self):
        return self._count

    @property
    def size_in_bytes(self):
        """Bytes so far, uncompressed (header included): a batch.size trigger."""
        return self._len

    cpdef int32_t append(self, timestamp, key, value, headers=None) except -1:
        """Adds one record; `timestamp` in ms (None = now). Returns its offset delta."""
        cdef int64_t ts
        cdef const uint8_t *kp = NULL
        cdef const uint8_t *vp = NULL
        cdef Py_ssize_t klen = -1, vlen = -1, body, hsize = 0
        cdef int64_t ts_delta
        cdef Py_buffer kview, vview
        cdef bint kheld = False, vheld = False
        cdef uint8_t *w
        cdef int32_t delta = self._count
        self._check_mutable()
        if self._count == 0x7FFFFFFF:
            raise OverflowError("a batch holds at most 2**31-1 records")
        ts_delta = self._timestamp_delta(timestamp)
        ts = self._base_ts + ts_delta
        try:
            kheld = _key_buffer(key, &kview, &kp, &klen)
            if value is not None:
                PyObject_GetBuffer(value, &vview, PyBUF_SIMPLE)
                vheld = True
                vp = <const uint8_t *>vview.buf
                vlen = vview.len
            if klen > 0x7FFFFFFF or vlen > 0x7FFFFFFF:
                raise OverflowError("key or value larger than 2 GiB")
            encoded_headers = _encode_headers(headers) if headers else None
            if encoded_headers is not None:
                hsize = len(encoded_headers)
            body = (1 + kb_varlong_size(ts_delta) + kb_varint_size(delta)
                    + kb_varint_size(<int32_t>klen) + (klen if klen > 0 else 0)
                    + kb_varint_size(<int32_t>vlen) + (vlen if vlen > 0 else 0)
                    + (hsize if hsize else 1))
            if body > 0x7FFFFFFF:
                raise OverflowError("record larger than 2 GiB")
            self._reserve(self._len + body + 5)
            w = self._buf + self._len
            w += kb_write_varint(w, <int32_t>body)
            w[0] = 0
            w += 1
            w += kb_write_varlong(w, ts_delta)
            w += kb_write_varint(w, delta)
            w += kb_write_varint(w, <int32_t>klen)
            if klen > 0:
                memcpy(w, kp, klen)
                w += klen
            w += kb_write_varint(w, <int32_t>vlen)
            if vlen > 0:
                memcpy(w, vp, vlen)
                w += vlen
            if hsize:
                memcpy(w, PyBytes_AS_STRING(encoded_headers), hsize)
                w += hsize
            else:
                w[0] = 0            # headerCount varint 0
                w += 1
            self._len = w - self._buf
        finally:
            if kheld:
                PyBuffer_Release(&kview)
            if vheld:
                PyBuffer_Release(&vview)
        if ts > self._max_ts or self._count == 0:
            self._max_ts = ts
        self._count += 1
        return delta

    def append_repeated(self, value, Py_ssize_t count, timestamp=None, key=None):
        """Appends `count` records with the same key, value and timestamp (no headers):
        the load generator's fast path, one C loop instead of `count` Python calls.
        Returns the offset delta of the first one."""
        cdef Py_buffer vview, kview
        cdef bint kheld = False
        cdef const uint8_t *vp
        cdef const uint8_t *kp = NULL
        cdef Py_ssize_t vlen, klen = -1, body, rec_max, i
        cdef int64_t ts, ts_delta
        cdef int32_t first = self._count
        cdef uint8_t *w
        if count < 0:
            raise ValueError("negative count")
        self._check_mutable()
        if count == 0:
            return first
        if <int64_t>self._count + count > 0x7FFFFFFF:
            raise OverflowError("a batch holds at most 2**31-1 records")
        ts_delta = self._timestamp_delta(timestamp)
        ts = self._base_ts + ts_delta
        PyObject_GetBuffer(value, &vview, PyBUF_SIMPLE)
        try:
            kheld = _key_buffer(key, &kview, &kp, &klen)
            vp = <const uint8_t *>vview.buf
            vlen = vview.len
            if klen > 0x7FFFFFFF or vlen > 0x7FFFFFFF:
                raise OverflowError("key or value larger than 2 GiB")
            # the largest record body (offset delta varint of the last record)
            rec_max = (1 + kb_varlong_size(ts_delta) + 5 + kb_varint_size(<int32_t>klen) + (klen if klen > 0 else 0)
                       + kb_varint_size(<int32_t>vlen) + vlen + 1)
            self._reserve(self._len + count * (rec_max + 5))
            w = self._buf + self._len
            with nogil:
                for i in range(count):
                    body = (1 + kb_varlong_size(ts_delta) + kb_varint_size(<int32_t>(first + i))
                            + kb_varint_size(<int32_t>klen) + (klen if klen > 0 else 0)
                            + kb_varint_size(<int32_t>vlen) + vlen + 1)
                    w += kb_write_varint(w, <int32_t>body)
                    w[0] = 0
                    w += 1
                    w += kb_write_varlong(w, ts_delta)
                    w += kb_write_varint(w, <int32_t>(first + i))
                    w += kb_write_varint(w, <int32_t>klen)
                    if klen > 0:
                        memcpy(w, kp, klen)
                        w += klen
                    w += kb_write_varint(w, <int32_t>vlen)
                    memcpy(w, vp, vlen)
                    w += vlen
                    w[0] = 0
                    w += 1
            self._len = w - self._buf
        finally:
            PyBuffer_Release(&vview)
            if kheld:
                PyBuffer_Release(&kview)
        if ts > self._max_ts or first == 0:
            self._max_ts = ts
        self._count += <int32_t>count
        return first

    cdef int16_t _attrs(self):
        cdef int16_t attrs = self.compression
        if self.timestamp_type:
            attrs |= ATTR_TIMESTAMP_TYPE
        if self.is_transactional:
            attrs |= ATTR_TRANSACTIONAL
        if self.is_control:
            attrs |= ATTR_CONTROL
        return attrs

    cdef int _write_header(self, uint8_t *h, Py_ssize_t body_len, int16_t attrs) except -1:
        """Fills the 61-byte header at h (records block of body_len bytes follows) and its CRC."""
        if HEADER_SIZE - LOG_OVERHEAD + body_len > 0x7FFFFFFF:
            raise OverflowError("batch larger than 2 GiB")
        kb_store_be64(h + OFF_BASE_OFFSET, <uint64_t>self.base_offset)
        kb_store_be32(h + OFF_BATCH_LENGTH, <uint32_t>(HEADER_SIZE - LOG_OVERHEAD + body_len))
        kb_store_be32(h + OFF_PARTITION_LEADER_EPOCH, <uint32_t>self.partition_leader_epoch)
        h[OFF_MAGIC] = 2
        kb_store_be16(h + OFF_ATTRIBUTES, <uint16_t>attrs)
        kb_store_be32(h + OFF_LAST_OFFSET_DELTA, <uint32_t>(self._count - 1 if self._count else 0))
        kb_store_be64(h + OFF_BASE_TIMESTAMP, <uint64_t>(self._base_ts if self._count else -1))
        kb_store_be64(h + OFF_MAX_TIMESTAMP, <uint64_t>(self._max_ts if self._count else -1))
        kb_store_be64(h + OFF_PRODUCER_ID, <uint64_t>self.producer_id)
        kb_store_be16(h + OFF_PRODUCER_EPOCH, <uint16_t>self.producer_epoch)
        kb_store_be32(h + OFF_BASE_SEQUENCE, <uint32_t>self.base_sequence)
        kb_store_be32(h + OFF_RECORD_COUNT, <uint32_t>self._count)
        kb_store_be32(h + OFF_CRC, crc32c_raw(0, h + OFF_ATTRIBUTES, HEADER_SIZE - OFF_ATTRIBUTES + body_len))
        return 0

    def build(self):
        """The finished batch as bytes. The builder may be reused after reset()."""
        cdef int16_t attrs = self._attrs()
        cdef Py_ssize_t body_len = self._len - HEADER_SIZE
        cdef uint8_t *h
        if self.compression != CODEC_NONE:
            block = compress_block(self.compression,
                                   PyBytes_FromStringAndSize(<const char *>self._buf + HEADER_SIZE, body_len),
                                   self._level)
            out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + len(block))
            h = <uint8_t *>PyBytes_AS_STRING(out)
            memcpy(h + HEADER_SIZE, PyBytes_AS_STRING(block), len(block))
            body_len = len(block)
        else:
            out = PyBytes_FromStringAndSize(<const char *>self._buf, self._len)
            h = <uint8_t *>PyBytes_AS_STRING(out)
        self._write_header(h, body_len, attrs)
        return out

    def view(self):
        """The finished batch as a read-only memoryview of the builder's own memory (no
        copy). Uncompressed batches only (a compressed one is a new block anyway: use
        build()). While a view is alive the builder refuses to change (BufferError)."""
        if self.compression != CODEC_NONE:
            raise ValueError("view() is for uncompressed batches; use build()")
        self._check_mutable()
        self._write_header(self._buf, self._len - HEADER_SIZE, self._attrs())
        return memoryview(self)

    def __getbuffer__(self, Py_buffer *buf, int flags):
        if flags & PyBUF_WRITABLE:
            raise BufferError("a batch builder's view is read-only")
        kb_export_bytes(buf, <void *>self._buf, self._len, True)
        buf.obj = self
        self._exports += 1

    def __releasebuffer__(self, Py_buffer *buf):
        self._exports -= 1

    cdef int _check_mutable(self) except -1:
        if self._exports:
            raise BufferError("the batch builder has a live view(); release it before changing the builder")
        return 0

    def reset(self):
        """Forgets the records appended so far (keeps the settings and the memory)."""
        self._check_mutable()
        self._len = HEADER_SIZE
        self._count = 0
        self._max_ts = -1
        self._base_ts = 0


cdef bytes _encode_headers(headers):
    """headerCount varint + headers, for a sequence of (key str|bytes, value bytes|None)."""
    cdef uint8_t tmp[10]
    cdef int n
    parts = []
    count = 0
    for k, v in headers:
        kb = k.encode("utf-8") if isinstance(k, str) else bytes(k)
        if not kb_utf8_valid(<const uint8_t *><const char *>kb, len(kb)):
            raise ValueError(f"header key {k!r} is not valid UTF-8")
        n = kb_write_varint(tmp, <int32_t>len(kb))
        parts.append(PyBytes_FromStringAndSize(<char *>tmp, n))
        parts.append(kb)
        if v is None:
            n = kb_write_varint(tmp, -1)
            parts.append(PyBytes_FromStringAndSize(<char *>tmp, n))
        else:
            vb = bytes(v)
            n = kb_write_varint(tmp, <int32_t>len(vb))
            parts.append(PyBytes_FromStringAndSize(<char *>tmp, n))
            parts.append(vb)
        count += 1
    n = kb_write_varint(tmp, <int32_t>count)
    return PyBytes_FromStringAndSize(<char *>tmp, n) + b"".join(parts)

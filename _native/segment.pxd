# cython: language_level=3
"""One log segment: <base offset, 20 digits>.log with its .index and .timeindex.

The .log holds RecordBatch v2 bytes back to back, exactly as producers sent them (with
base offsets assigned): on disk = on the wire.
"""
from libc.stdint cimport uint8_t, int32_t, int64_t

from broker._native.index cimport OffsetIndex, TimeIndex

cdef enum:
    SCAN_CHUNK = 16384


cdef class Segment:
    cdef int _fd
    cdef readonly int64_t base_offset
    cdef readonly str directory
    cdef readonly str log_path
    cdef readonly OffsetIndex offset_index
    cdef readonly TimeIndex time_index
    cdef readonly int index_interval_bytes
    cdef readonly bint writable
    cdef readonly double created
    cdef readonly Py_ssize_t recovered_truncated_bytes
    cdef readonly str recovery_reason
    cdef Py_ssize_t _size
    cdef int64_t _next_offset
    cdef Py_ssize_t _since_index
    cdef int64_t _max_ts
    cdef int64_t _max_ts_offset
    cdef int64_t _first_batch_ts
    # scan buffer for batch headers (pread in chunks)
    cdef uint8_t _chunk[SCAN_CHUNK]
    cdef Py_ssize_t _chunk_pos
    cdef Py_ssize_t _chunk_len

    cdef int _check_open(self) except -1
    cdef const uint8_t *_header_at(self, Py_ssize_t pos, Py_ssize_t *avail) except? NULL
    cdef int _pwrite_all(self, const uint8_t *p, Py_ssize_t n, Py_ssize_t pos) except -1
    cdef int _load(self) except -1
    cdef Py_ssize_t _scan_tail(self, Py_ssize_t pos) except -2
    cdef Py_ssize_t c_translate(self, int64_t offset, Py_ssize_t starting_position,
                                Py_ssize_t *size) except -2

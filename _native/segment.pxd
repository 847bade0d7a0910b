# cython: language_level=3
"""One log segment: <base offset, 20 digits>.log with its .index and .timeindex.

The .log holds RecordBatch v2 bytes back to back, exactly as producers sent them (with
base offsets assigned): on disk = on the wire.

Open files: see segment.pyx (an active segment keeps its .log open; inactive ones open
on demand, in a least-recently-used set of bounded size managed by one thread; other
threads borrow what they need).
"""
from cpython.ref cimport PyObject
from libc.stdint cimport uint8_t, int32_t, int64_t

from broker._native.index cimport OffsetIndex, TimeIndex

cdef enum:
    SCAN_CHUNK = 16384


cdef class Segment:
    cdef int _fd                     # the .log; -1 while released (or closed)
    cdef bint _closed
    cdef bint _active                # appended to: keeps its files, not in the LRU set
    cdef int _pins                   # users that need the files open (see _acquire)
    cdef PyObject *_lru_prev         # neighbours in the LRU set (borrowed references)
    cdef PyObject *_lru_next
    cdef bint _in_lru
    cdef bint _held                  # closed, its descriptor kept open by pins and counted
    cdef readonly int64_t base_offset
    cdef readonly str directory
    cdef readonly str log_path
    cdef bytes _blog_path            # log_path, encoded once
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
    cdef Py_ssize_t _alloc_end       # the .log's blocks are allocated up to here (-1: not done here)
    # scan buffer for batch headers (pread in chunks of SCAN_CHUNK), allocated on
    # demand and freed with the files: an idle segment costs a few hundred bytes
    cdef uint8_t *_chunk
    cdef Py_ssize_t _chunk_pos
    cdef Py_ssize_t _chunk_len

    cdef int _check_open(self) except -1
    cdef int _acquire(self) except -1
    cdef void _unpin(self) noexcept
    cdef int _reopen(self) except -1
    cdef int _admit(self) except -1
    cdef void _join_open_set(self) noexcept
    cdef void _mark_closed(self) noexcept
    cdef void _release_files(self) noexcept
    cdef int _deactivate(self) except -1
    cdef void _allocate(self, Py_ssize_t end) noexcept
    cdef void _trim_allocation(self) noexcept
    cdef const uint8_t *_header_at(self, Py_ssize_t pos, Py_ssize_t *avail) except? NULL
    cdef int _pwrite_all(self, const uint8_t *p, Py_ssize_t n, Py_ssize_t pos) except -1
    cdef int _load(self) except -1
    cdef Py_ssize_t _scan_tail(self, Py_ssize_t pos) except -2
    cdef Py_ssize_t c_translate(self, int64_t offset, Py_ssize_t starting_position,
                                Py_ssize_t *size) except -2
    cdef object _find_offset_by_timestamp(self, int64_t timestamp, int64_t starting_offset)
    cdef Py_ssize_t _recover(self) except -1
    cdef Py_ssize_t _truncate_to(self, int64_t offset) except -1

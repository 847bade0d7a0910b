# cython: language_level=3
"""Kafka's sparse segment indexes, memory-mapped.

.index (OffsetIndex), 8-byte entries, big-endian:

    +----------------------------+----------------------------+
    | relative offset  int32     | position in .log  int32    |
    +----------------------------+----------------------------+

.timeindex (TimeIndex), 12-byte entries, big-endian:

    +--------------------------------------------+----------------------------+
    | timestamp  int64                           | relative offset  int32     |
    +--------------------------------------------+----------------------------+

relative offset = offset - base_offset of the segment. Entries increase strictly (offset
index) or never decrease (time index: timestamp strictly, offset non-decreasing).
"""
from libc.stdint cimport uint8_t, int32_t, int64_t


cdef class _MappedIndex:
    cdef int fd
    cdef uint8_t *mm
    cdef Py_ssize_t mapped_len
    cdef Py_ssize_t _entries
    cdef Py_ssize_t _max_entries
    cdef int entry_size
    cdef readonly int64_t base_offset
    cdef readonly str path
    cdef readonly bint writable
    cdef readonly Py_ssize_t max_index_size

    cdef int _setup(self, str path, int64_t base_offset, Py_ssize_t max_index_size,
                    bint writable, int entry_size) except -1
    cdef int _map(self, Py_ssize_t length) except -1
    cdef int _unmap(self) except -1
    cdef int _check_open(self) except -1
    cdef int _resize(self, Py_ssize_t new_size) except -1
    cdef Py_ssize_t _warm_first(self) noexcept nogil


cdef class OffsetIndex(_MappedIndex):
    cdef int64_t _last_offset
    cdef int c_append(self, int64_t offset, int32_t position) except -1
    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *offset, int32_t *position) noexcept nogil
    cdef int64_t c_entry_offset(self, Py_ssize_t n) noexcept nogil


cdef class TimeIndex(_MappedIndex):
    cdef int64_t _last_timestamp
    cdef int64_t _last_offset
    cdef void _set_last(self)
    cdef int64_t _ts(self, Py_ssize_t n) noexcept nogil
    cdef int c_maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check) except -1
    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *timestamp, int64_t *offset) noexcept nogil

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
    cdef uint8_t *mm                 # read-only mapping of the file; NULL until needed
    cdef Py_ssize_t mapped_len
    cdef uint8_t *_pending           # entries not written to the file yet (memory)
    cdef Py_ssize_t _persisted       # entries in the file: [0, _persisted) via mm
    cdef Py_ssize_t _entries         # all entries: the file's, then the pending ones
    cdef Py_ssize_t _max_entries
    cdef Py_ssize_t _file_len        # bytes of the file as last seen or written
    cdef int entry_size
    cdef bint _closed
    cdef readonly int64_t base_offset
    cdef readonly str path
    cdef bytes _bpath                # path, encoded once: opening runs no Python code
    cdef readonly bint writable
    cdef readonly Py_ssize_t max_index_size

    cdef int _setup(self, str path, int64_t base_offset, Py_ssize_t max_index_size,
                    bint writable, int entry_size) except -1
    cdef int _ready(self) except -1
    cdef int _map_fd(self, int fd) except -1
    cdef void _unmap(self) noexcept
    cdef int _check_open(self) except -1
    cdef int _set_capacity(self, Py_ssize_t entries) except -1
    cdef int _persist(self) except -1
    cdef bint _persist_quietly(self)
    cdef int _cut_file(self, Py_ssize_t entries) except -1
    cdef int _drop_to(self, Py_ssize_t entries) except -1
    cdef int _push(self, const uint8_t *entry) except -1
    cdef int _deactivate(self) except -1
    cdef const uint8_t *_at(self, Py_ssize_t n) noexcept nogil
    cdef Py_ssize_t _warm_first(self) noexcept nogil
    cdef int64_t _key(self, Py_ssize_t n) noexcept nogil
    cdef Py_ssize_t _search(self, int64_t target) noexcept nogil


cdef class OffsetIndex(_MappedIndex):
    cdef int64_t _last_offset
    cdef int c_append(self, int64_t offset, int32_t position) except -1
    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *offset, int32_t *position) noexcept nogil
    cdef int64_t c_entry_offset(self, Py_ssize_t n) noexcept nogil
    cdef int32_t c_entry_position(self, Py_ssize_t n) noexcept nogil


cdef class TimeIndex(_MappedIndex):
    cdef int64_t _last_timestamp
    cdef int64_t _last_offset
    cdef int _set_last(self) except -1
    cdef int64_t _ts(self, Py_ssize_t n) noexcept nogil
    cdef int c_maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check) except -1
    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *timestamp, int64_t *offset) noexcept nogil

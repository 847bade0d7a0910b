# cython: language_level=3
"""Kafka's sparse .index / .timeindex files (layout in index.pxd), memory-mapped.

Lifecycle, as in Kafka's AbstractIndex:
- A writable index is preallocated to max_index_size (rounded down to whole entries) and
  mapped read-only; entries are appended with pwrite(2) into the same page cache the
  mapping reads. (Writing through a shared mapping costs a page_mkwrite fault per fresh
  page — measured at ~30 ms on this project's CI disk — while pwrite costs microseconds.) `trim()` shrinks the file to its valid entries
  (on roll and on close), `resize()` grows it again when a trimmed index becomes active.
- Opening an existing file takes its length as the entry count (Kafka's rule: a cleanly
  closed index was trimmed). After a crash the preallocated tail is zeros; the log
  rebuilds such indexes during recovery, `sanity_check()` detects them.
- Lookups find the greatest entry <= target by binary search over the warm tail first
  (the last 8 KiB of entries, the pages consumers touch most), then the cold rest.

Thread safety: one thread at a time (the owning Log serializes appends, lookups and
trims). No Python buffer is ever exported over the mapping, so remapping is safe.
"""
cimport cython
from libc.stdint cimport uint8_t, int32_t, int64_t, uint32_t, uint64_t
from libc.errno cimport errno, EINTR
from libc.string cimport strerror
from posix.fcntl cimport open as c_open, O_RDWR, O_RDONLY, O_CREAT
from posix.unistd cimport close as c_close, ftruncate
from posix.stat cimport struct_stat, fstat
from posix.mman cimport mmap, munmap, msync, PROT_READ, PROT_WRITE, MAP_SHARED, MS_SYNC

from broker._native.buffer cimport kb_load_be32, kb_load_be64, kb_store_be32, kb_store_be64

import os

cdef extern from "sys/mman.h":
    void *MAP_FAILED

cdef enum:
    WARM_BYTES = 8192
    OFFSET_ENTRY = 8
    TIME_ENTRY = 12

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


class CorruptIndexError(ValueError):
    """An index file whose contents cannot be right (rebuild it from the log)."""


cdef extern from "unistd.h" nogil:
    int fdatasync(int fd)
    ssize_t pwrite(int fd, const void *buf, size_t count, long offset)


cdef int _pwrite_entry(int fd, const uint8_t *entry, int size, Py_ssize_t pos, str path) except -1:
    cdef ssize_t n
    while True:
        n = pwrite(fd, entry, size, pos)
        if n == size:
            return 0
        if n < 0 and errno == EINTR:
            continue
        raise _oserror("cannot write index entry", path)


cdef object _oserror(str what, str path):
    cdef int e = errno
    return OSError(e, f"{what}: {strerror(e).decode()}", path)


cdef class _MappedIndex:
    def __cinit__(self, *args, **kwargs):
        self.fd = -1
        self.mm = NULL
        self.mapped_len = 0

    cdef int _setup(self, str path, int64_t base_offset, Py_ssize_t max_index_size,
                    bint writable, int entry_size) except -1:
        cdef struct_stat st
        cdef Py_ssize_t length
        self.path = path
        self.base_offset = base_offset
        self.writable = writable
        self.entry_size = entry_size
        if max_index_size < entry_size:
            raise ValueError(f"max_index_size {max_index_size} is smaller than one entry")
        self.max_index_size = max_index_size
        bpath = os.fsencode(path)
        self.fd = c_open(bpath, (O_RDWR | O_CREAT) if writable else O_RDONLY, 0o644)
        if self.fd < 0:
            raise _oserror("cannot open index", path)
        if fstat(self.fd, &st) != 0:
            raise _oserror("cannot stat index", path)
        length = st.st_size
        self._entries = length // entry_size
        if writable and length == 0:
            # a new index is preallocated (Kafka's rule): the file holds max_index_size
            # bytes, entries at the front; an existing one keeps its length until resize()
            length = max_index_size
            length -= length % entry_size
            if ftruncate(self.fd, length) != 0:
                raise _oserror("cannot preallocate index", path)
        self._map(length)
        return 0

    cdef int _map(self, Py_ssize_t length) except -1:
        cdef void *p
        self._unmap()
        self._max_entries = length // self.entry_size
        if length == 0:
            return 0
        p = mmap(NULL, length, PROT_READ, MAP_SHARED, self.fd, 0)
        if p == MAP_FAILED:
            raise _oserror("cannot mmap index", self.path)
        self.mm = <uint8_t *>p
        self.mapped_len = length
        return 0

    cdef int _unmap(self) except -1:
        if self.mm != NULL:
            munmap(self.mm, self.mapped_len)
            self.mm = NULL
            self.mapped_len = 0
        return 0

    cdef int _check_open(self) except -1:
        if self.fd < 0:
            raise ValueError(f"index {self.path} is closed")
        return 0

    cdef int _resize(self, Py_ssize_t new_size) except -1:
        cdef Py_ssize_t length = new_size - new_size % self.entry_size
        if length < self._entries * self.entry_size:
            length = self._entries * self.entry_size
        self._unmap()
        if self.writable and ftruncate(self.fd, length) != 0:
            raise _oserror("cannot resize index", self.path)
        self._map(length)
        return 0

    cdef Py_ssize_t _warm_first(self) noexcept nogil:
        cdef Py_ssize_t warm = WARM_BYTES // self.entry_size
        cdef Py_ssize_t first = self._entries - 1 - warm
        return first if first > 0 else 0

    # -- Python API shared by both indexes
    @property
    def entries(self):
        return self._entries

    @property
    def max_entries(self):
        return self._max_entries

    @property
    def is_full(self):
        return self._entries >= self._max_entries

    @property
    def size_in_bytes(self):
        """Bytes of valid entries."""
        return self._entries * self.entry_size

    @property
    def closed(self):
        return self.fd < 0

    def resize(self, Py_ssize_t new_size):
        """Grows or shrinks the file (never below its entries) and remaps it."""
        self._check_open()
        self._resize(new_size)

    def trim(self):
        """Shrinks the file to its valid entries (Kafka's trimToValidSize)."""
        self._check_open()
        self._resize(self._entries * self.entry_size)

    def flush(self):
        """fdatasync(2)s the index file (entries are written with pwrite)."""
        self._check_open()
        if self.mm != NULL and self.writable:
            with nogil:
                fdatasync(self.fd)

    def close(self):
        """Trims (when writable) and closes. Idempotent."""
        if self.fd < 0:
            return
        try:
            if self.writable:
                self._resize(self._entries * self.entry_size)
        finally:
            self._unmap()
            c_close(self.fd)
            self.fd = -1

    def rename(self, str new_path):
        """Renames the file (the mapping stays valid)."""
        os.rename(self.path, new_path)
        self.path = new_path

    def delete(self):
        """Closes and removes the file."""
        self.close()
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __dealloc__(self):
        if self.mm != NULL:
            munmap(self.mm, self.mapped_len)
            self.mm = NULL
        if self.fd >= 0:
            c_close(self.fd)
            self.fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


@cython.final
cdef class OffsetIndex(_MappedIndex):
    """Maps offsets to positions in the segment's .log, one entry every
    index.interval.bytes. `lookup(offset)` -> (offset, position) of the greatest entry
    <= offset, or (base_offset, 0) when there is none."""

    def __init__(self, str path, int64_t base_offset, Py_ssize_t max_index_size=DEFAULT_MAX_INDEX_SIZE,
                 bint writable=True):
        self._setup(path, base_offset, max_index_size, writable, OFFSET_ENTRY)
        self._last_offset = self.c_entry_offset(self._entries - 1) if self._entries else base_offset

    cdef int64_t c_entry_offset(self, Py_ssize_t n) noexcept nogil:
        return self.base_offset + <int32_t>kb_load_be32(self.mm + n * OFFSET_ENTRY)

    cdef int c_append(self, int64_t offset, int32_t position) except -1:
        cdef int64_t rel = offset - self.base_offset
        if self.fd < 0:
            raise ValueError(f"index {self.path} is closed")
        if not self.writable:
            raise ValueError(f"index {self.path} is read-only")
        if self._entries >= self._max_entries:
            raise ValueError(f"index {self.path} is full ({self._entries} entries)")
        if self._entries and offset <= self._last_offset:
            raise ValueError(f"offset {offset} is not larger than the last indexed offset "
                             f"{self._last_offset} in {self.path}")
        if rel < 0 or rel > 0x7FFFFFFF:
            raise ValueError(f"offset {offset} out of range for base offset {self.base_offset}")
        if position < 0:
            raise ValueError(f"negative position {position}")
        cdef uint8_t entry[OFFSET_ENTRY]
        kb_store_be32(entry, <uint32_t>rel)
        kb_store_be32(entry + 4, <uint32_t>position)
        _pwrite_entry(self.fd, entry, OFFSET_ENTRY, self._entries * OFFSET_ENTRY, self.path)
        self._entries += 1
        self._last_offset = offset
        return 0

    def append(self, int64_t offset, int32_t position):
        self.c_append(offset, position)

    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *offset, int32_t *position) noexcept nogil:
        """Index of the greatest entry <= target, or -1."""
        cdef Py_ssize_t lo, hi, mid, n = self._entries
        if n == 0 or self.mm == NULL or target < self.c_entry_offset(0):
            return -1
        lo = self._warm_first()
        if target < self.c_entry_offset(lo):
            hi = lo
            lo = 0
        else:
            hi = n - 1
        # invariant: entry(lo) <= target; find the last such entry in [lo, hi]
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            if self.c_entry_offset(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        offset[0] = self.c_entry_offset(lo)
        position[0] = <int32_t>kb_load_be32(self.mm + lo * OFFSET_ENTRY + 4)
        return lo

    def lookup(self, int64_t target_offset):
        """(offset, position) of the greatest entry <= target_offset, else (base_offset, 0)."""
        cdef int64_t off
        cdef int32_t pos
        if self.c_lookup(target_offset, &off, &pos) < 0:
            return (self.base_offset, 0)
        return (off, pos)

    def entry(self, Py_ssize_t n):
        """The n-th entry as (offset, position)."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} of {self._entries}")
        return (self.c_entry_offset(n), <int32_t>kb_load_be32(self.mm + n * OFFSET_ENTRY + 4))

    @property
    def last_offset(self):
        """Offset of the last entry (base_offset when empty)."""
        return self._last_offset

    def truncate_to(self, int64_t offset):
        """Removes every entry whose offset is >= offset."""
        cdef int64_t off
        cdef int32_t pos
        cdef Py_ssize_t i
        self._check_open()
        i = self.c_lookup(offset, &off, &pos)
        if i < 0:
            self._entries = 0
        elif off == offset:
            self._entries = i
        else:
            self._entries = i + 1
        self._last_offset = self.c_entry_offset(self._entries - 1) if self._entries else self.base_offset

    def truncate(self):
        """Removes every entry."""
        self._check_open()
        self._entries = 0
        self._last_offset = self.base_offset

    def sanity_check(self, bint full=True):
        """Raises CorruptIndexError unless entries increase strictly from base_offset and
        positions never decrease (catches a crash's zero-filled tail). With full=False
        only the first and last entries are compared: O(1), what opening a segment does."""
        cdef Py_ssize_t i
        cdef int64_t prev_off = -1
        cdef int32_t prev_pos = -1, pos
        cdef int64_t off
        self._check_open()
        if not full and self._entries >= 2:
            off = self.c_entry_offset(self._entries - 1)
            pos = <int32_t>kb_load_be32(self.mm + (self._entries - 1) * OFFSET_ENTRY + 4)
            if off <= self.c_entry_offset(0) or pos < <int32_t>kb_load_be32(self.mm + 4) or pos < 0:
                raise CorruptIndexError(
                    f"corrupt offset index {self.path}: last entry (offset {off}, position {pos}) does not "
                    f"follow the first; a crash left a preallocated tail")
            return
        for i in range(self._entries):
            off = self.c_entry_offset(i)
            pos = <int32_t>kb_load_be32(self.mm + i * OFFSET_ENTRY + 4)
            if off < self.base_offset or (i and off <= prev_off) or pos < 0 or pos < prev_pos:
                raise CorruptIndexError(
                    f"corrupt offset index {self.path}: entry {i} (offset {off}, position {pos}) "
                    f"at byte {i * OFFSET_ENTRY} follows (offset {prev_off}, position {prev_pos})")
            prev_off = off
            prev_pos = pos


@cython.final
cdef class TimeIndex(_MappedIndex):
    """Maps timestamps to offsets. `lookup(ts)` -> (timestamp, offset) of the greatest
    entry with timestamp <= ts, or (-1, base_offset) when there is none."""

    def __init__(self, str path, int64_t base_offset, Py_ssize_t max_index_size=DEFAULT_MAX_INDEX_SIZE,
                 bint writable=True):
        self._setup(path, base_offset, max_index_size, writable, TIME_ENTRY)
        self._set_last()

    cdef void _set_last(self):
        cdef Py_ssize_t n = self._entries
        if n:
            self._last_timestamp = <int64_t>kb_load_be64(self.mm + (n - 1) * TIME_ENTRY)
            self._last_offset = self.base_offset + <int32_t>kb_load_be32(self.mm + (n - 1) * TIME_ENTRY + 8)
        else:
            self._last_timestamp = -1
            self._last_offset = self.base_offset

    cdef int64_t _ts(self, Py_ssize_t n) noexcept nogil:
        return <int64_t>kb_load_be64(self.mm + n * TIME_ENTRY)

    cdef int c_maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check) except -1:
        """Appends (timestamp, offset) when timestamp is larger than the last entry's."""
        cdef int64_t rel = offset - self.base_offset
        if self.fd < 0:
            raise ValueError(f"index {self.path} is closed")
        if not self.writable:
            raise ValueError(f"index {self.path} is read-only")
        if not skip_full_check and self._entries >= self._max_entries:
            raise ValueError(f"time index {self.path} is full ({self._entries} entries)")
        if self._entries and offset < self._last_offset:
            raise ValueError(f"offset {offset} is smaller than the last indexed offset "
                             f"{self._last_offset} in {self.path}")
        if self._entries and timestamp <= self._last_timestamp:
            return 0
        if self._entries >= self._max_entries:
            return 0                    # full: only reachable with skip_full_check
        if rel < 0 or rel > 0x7FFFFFFF:
            raise ValueError(f"offset {offset} out of range for base offset {self.base_offset}")
        cdef uint8_t entry[TIME_ENTRY]
        kb_store_be64(entry, <uint64_t>timestamp)
        kb_store_be32(entry + 8, <uint32_t>rel)
        _pwrite_entry(self.fd, entry, TIME_ENTRY, self._entries * TIME_ENTRY, self.path)
        self._entries += 1
        self._last_timestamp = timestamp
        self._last_offset = offset
        return 1

    def maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check=False):
        """Appends when timestamp exceeds the last entry's; returns whether it did."""
        return bool(self.c_maybe_append(timestamp, offset, skip_full_check))

    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *timestamp, int64_t *offset) noexcept nogil:
        cdef Py_ssize_t lo, hi, mid, n = self._entries
        if n == 0 or self.mm == NULL or target < self._ts(0):
            return -1
        lo = self._warm_first()
        if target < self._ts(lo):
            hi = lo
            lo = 0
        else:
            hi = n - 1
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            if self._ts(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        timestamp[0] = self._ts(lo)
        offset[0] = self.base_offset + <int32_t>kb_load_be32(self.mm + lo * TIME_ENTRY + 8)
        return lo

    def lookup(self, int64_t target_timestamp):
        """(timestamp, offset) of the greatest entry with timestamp <= target, else
        (-1, base_offset)."""
        cdef int64_t ts, off
        if self.c_lookup(target_timestamp, &ts, &off) < 0:
            return (-1, self.base_offset)
        return (ts, off)

    def entry(self, Py_ssize_t n):
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} of {self._entries}")
        return (self._ts(n), self.base_offset + <int32_t>kb_load_be32(self.mm + n * TIME_ENTRY + 8))

    @property
    def last_entry(self):
        """(timestamp, offset) of the last entry, (-1, base_offset) when empty."""
        return (self._last_timestamp, self._last_offset)

    def truncate_to(self, int64_t offset):
        """Removes every entry whose offset is >= offset."""
        cdef Py_ssize_t i
        self._check_open()
        # offsets are non-decreasing: drop from the first entry with offset >= offset
        i = self._entries
        while i > 0 and self.base_offset + <int32_t>kb_load_be32(self.mm + (i - 1) * TIME_ENTRY + 8) >= offset:
            i -= 1
        self._entries = i
        self._set_last()

    def truncate(self):
        self._check_open()
        self._entries = 0
        self._set_last()

    def sanity_check(self, bint full=True):
        """Raises CorruptIndexError unless timestamps increase strictly and offsets never
        decrease nor fall below base_offset. full=False compares first and last only."""
        cdef Py_ssize_t i
        cdef int64_t ts, off, prev_ts = -1, prev_off = -1
        self._check_open()
        if not full and self._entries >= 2:
            if self._ts(self._entries - 1) <= self._ts(0) or \
                    <int32_t>kb_load_be32(self.mm + (self._entries - 1) * TIME_ENTRY + 8) < \
                    <int32_t>kb_load_be32(self.mm + 8):
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: last entry does not follow the first; a crash "
                    f"left a preallocated tail")
            return
        for i in range(self._entries):
            ts = self._ts(i)
            off = self.base_offset + <int32_t>kb_load_be32(self.mm + i * TIME_ENTRY + 8)
            if off < self.base_offset or (i and (ts <= prev_ts or off < prev_off)):
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: entry {i} (timestamp {ts}, offset {off}) "
                    f"at byte {i * TIME_ENTRY} follows (timestamp {prev_ts}, offset {prev_off})")
            prev_ts = ts
            prev_off = off

# cython: language_level=3
"""Kafka's sparse .index / .timeindex files (layout in index.pxd), memory-mapped.

Lifecycle (Kafka's AbstractIndex, without holding files open):
- An index holds no file descriptor. The file is opened to be mapped (read-only,
  MAP_SHARED) and closed at once, as Kafka closes an index file once mapped; it is
  opened again only for the moment of a write, a truncation or an fsync.
- The file holds exactly its entries: nothing is preallocated. New entries wait in
  memory (at most PENDING_ENTRIES of them) and are written with one pwrite(2) when that
  many have gathered, and by flush(), trim() and close(). Lookups see them at once.
  (A kill -9 loses the pending ones: the index is sparse, so the segment stays readable,
  and the log re-indexes whatever lies above its recovery point anyway.)
- The mapping covers the index's capacity (max_index_size for the active segment, the
  entries for an inactive one): beyond the end of the file it is address space only,
  never touched. No page of the mapping lies outside the file's data, so a full disk
  (tmpfs allocates pages on read faults) cannot raise SIGBUS here.
- `release()` drops the mapping (an inactive segment's indexes, once idle); the next
  lookup maps the file again.
- Opening an existing file takes its length as the entry count (Kafka's rule: a cleanly
  closed index was trimmed). Files of older versions were preallocated: a crash left a
  sparse zero tail, which is not counted (SEEK_HOLE) and which `sanity_check()` notices
  when it lies within a page of data.
- Lookups find the greatest entry <= target by binary search over the warm tail first
  (the last 8 KiB of entries, the pages consumers touch most), then the cold rest.

Writes that fail (disk full) raise OSError from flush() and trim(); when appends write
a batch of pending entries, a failure keeps the entries in memory and a later write
retries; once PENDING_ENTRIES wait, further entries are dropped (a sparser index).

Thread safety: one thread at a time (the owning segment serializes appends, lookups and
trims), except that flush() may run in a worker thread: every method holds the GIL and
runs no Python code between reading and updating the entry counts (paths are encoded
once), so a write of pending entries is atomic with respect to appends and lookups. No
Python buffer is ever exported over the mapping, so remapping is safe.
"""
cimport cython
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from libc.stdint cimport uint8_t, int32_t, int64_t, uint32_t, uint64_t
from libc.errno cimport errno, EINTR
from libc.string cimport strerror, memcpy
from posix.fcntl cimport open as c_open, O_RDWR, O_RDONLY, O_WRONLY, O_CREAT, O_CLOEXEC
from posix.unistd cimport close as c_close, ftruncate
from posix.types cimport off_t
from posix.stat cimport struct_stat, fstat
from posix.mman cimport mmap, munmap, PROT_READ, MAP_SHARED

from broker._native.buffer cimport kb_load_be32, kb_load_be64, kb_store_be32, kb_store_be64

import os

cdef extern from "sys/mman.h":
    void *MAP_FAILED

cdef extern from "unistd.h" nogil:
    int fdatasync(int fd)
    ssize_t pwrite(int fd, const void *buf, size_t count, off_t offset)
    off_t lseek(int fd, off_t offset, int whence)
    enum: SEEK_HOLE

cdef enum:
    WARM_BYTES = 8192
    OFFSET_ENTRY = 8
    TIME_ENTRY = 12
    PENDING_ENTRIES = 64

DEFAULT_MAX_INDEX_SIZE = 10 * 1024 * 1024


class CorruptIndexError(ValueError):
    """An index file whose contents cannot be right (rebuild it from the log)."""


cdef object _oserror(str what, str path):
    cdef int e = errno
    return OSError(e, f"{what}: {strerror(e).decode()}", path)


cdef int _open(_MappedIndex idx, int flags, str what) except -1:
    cdef int fd = c_open(idx._bpath, flags | O_CLOEXEC, 0o644)
    if fd < 0:
        raise _oserror(what, idx.path)
    return fd


cdef class _MappedIndex:
    def __cinit__(self, *args, **kwargs):
        self.mm = NULL
        self.mapped_len = 0
        self._pending = NULL

    cdef int _setup(self, str path, int64_t base_offset, Py_ssize_t max_index_size,
                    bint writable, int entry_size) except -1:
        cdef struct_stat st
        cdef Py_ssize_t length
        cdef off_t hole
        cdef int fd
        self.path = path
        self._bpath = os.fsencode(path)
        self.base_offset = base_offset
        self.writable = writable
        self.entry_size = entry_size
        if max_index_size < entry_size:
            raise ValueError(f"max_index_size {max_index_size} is smaller than one entry")
        self.max_index_size = max_index_size
        fd = _open(self, (O_RDWR | O_CREAT) if writable else O_RDONLY, "cannot open index")
        try:
            if fstat(fd, &st) != 0:
                raise _oserror("cannot stat index", path)
            self._file_len = length = st.st_size
            if length > 0:
                # a preallocated tail (older versions) is a hole, not entries
                hole = lseek(fd, 0, SEEK_HOLE)
                if 0 <= hole < length:
                    length = hole
            self._entries = self._persisted = length // entry_size
            # a new index may grow to max_index_size; an existing one keeps its entries
            # as its capacity until resize() (when its segment becomes the active one)
            if writable and self._entries == 0:
                self._max_entries = max_index_size // entry_size
            else:
                self._max_entries = self._entries
            if self._persisted:
                self._map_fd(fd)
        finally:
            c_close(fd)
        return 0

    cdef int _map_fd(self, int fd) except -1:
        cdef void *p
        cdef Py_ssize_t length = max(self._max_entries, self._persisted) * self.entry_size
        self._unmap()
        if length == 0:
            return 0
        p = mmap(NULL, length, PROT_READ, MAP_SHARED, fd, 0)
        if p == MAP_FAILED:
            raise _oserror("cannot mmap index", self.path)
        self.mm = <uint8_t *>p
        self.mapped_len = length
        return 0

    cdef int _ready(self) except -1:
        """Maps the file when entries are in it and it is not mapped."""
        cdef int fd
        if self.mm != NULL or self._persisted == 0:
            return 0
        self._check_open()
        fd = _open(self, O_RDONLY, "cannot open index")
        try:
            self._map_fd(fd)
        finally:
            c_close(fd)
        return 0

    cdef void _unmap(self) noexcept:
        if self.mm != NULL:
            munmap(self.mm, self.mapped_len)
            self.mm = NULL
            self.mapped_len = 0

    cdef int _check_open(self) except -1:
        if self._closed or self.path is None:
            raise ValueError(f"index {self.path} is closed")
        return 0

    cdef int _set_capacity(self, Py_ssize_t entries) except -1:
        if entries < self._entries:
            entries = self._entries
        if entries != self._max_entries:
            self._max_entries = entries
            self._unmap()                       # mapped again, at the new length, when needed
        return 0

    cdef const uint8_t *_at(self, Py_ssize_t n) noexcept nogil:
        """The n-th entry (the caller made sure of _ready())."""
        if n < self._persisted:
            return self.mm + n * self.entry_size
        return self._pending + (n - self._persisted) * self.entry_size

    cdef int _persist(self) except -1:
        """Writes the pending entries to the file (one pwrite). Raises OSError."""
        cdef Py_ssize_t n = (self._entries - self._persisted) * self.entry_size
        cdef Py_ssize_t pos = self._persisted * self.entry_size
        cdef Py_ssize_t done = 0
        cdef ssize_t w
        cdef int fd
        if n == 0:
            return 0
        fd = _open(self, O_WRONLY, "cannot open index")
        try:
            while done < n:
                w = pwrite(fd, self._pending + done, n - done, pos + done)
                if w < 0:
                    if errno == EINTR:
                        continue
                    raise _oserror("cannot write index entries", self.path)
                done += w
        finally:
            c_close(fd)
            if pos + done > self._file_len:
                self._file_len = pos + done
        self._persisted = self._entries
        return 0

    cdef bint _persist_quietly(self):
        """_persist(), True when it worked; a failure keeps the entries pending."""
        try:
            self._persist()
        except OSError:
            return False
        return True

    cdef int _cut_file(self, Py_ssize_t entries) except -1:
        """Makes the file exactly `entries` long (entries must be written already)."""
        cdef Py_ssize_t length = entries * self.entry_size
        cdef int fd
        if not self.writable or self._file_len == length:
            return 0
        fd = _open(self, O_WRONLY, "cannot open index")
        try:
            if ftruncate(fd, length) != 0:
                raise _oserror("cannot truncate index", self.path)
        finally:
            c_close(fd)
        self._file_len = length
        return 0

    cdef int _drop_to(self, Py_ssize_t entries) except -1:
        """Keeps the first `entries` entries. Entries written to the file beyond them are
        cut from it at once (a crash must not bring them back)."""
        if entries < self._persisted:
            self._entries = self._persisted = entries
            self._cut_file(entries)
        elif entries < self._entries:
            self._entries = entries
        return 0

    cdef int _push(self, const uint8_t *entry) except -1:
        """Adds an entry (validated by the caller): 1, or 0 when it was dropped because
        PENDING_ENTRIES entries wait for a write that keeps failing."""
        cdef Py_ssize_t waiting = self._entries - self._persisted
        if waiting >= PENDING_ENTRIES:
            if not self._persist_quietly():
                return 0
            waiting = 0
        if self._pending == NULL:
            self._pending = <uint8_t *>PyMem_Malloc(PENDING_ENTRIES * self.entry_size)
            if self._pending == NULL:
                raise MemoryError()
        memcpy(self._pending + waiting * self.entry_size, entry, self.entry_size)
        self._entries += 1
        if waiting + 1 == PENDING_ENTRIES:
            self._persist_quietly()
        return 1

    cdef int _deactivate(self) except -1:
        """The segment stops growing: entries written if possible, the file cut to them,
        the capacity to the entries (Kafka's trimToValidSize). Never raises for a full
        disk: unwritten entries stay pending."""
        if self.writable and self._persist_quietly():
            self._cut_file(self._entries)
        self._set_capacity(self._entries)
        return 0

    cdef Py_ssize_t _warm_first(self) noexcept nogil:
        cdef Py_ssize_t warm = WARM_BYTES // self.entry_size
        cdef Py_ssize_t first = self._entries - 1 - warm
        return first if first > 0 else 0

    cdef int64_t _key(self, Py_ssize_t n) noexcept nogil:
        """What lookups search by: entry n's offset (offset index) or timestamp (time index)."""
        if self.entry_size == OFFSET_ENTRY:
            return self.base_offset + <int32_t>kb_load_be32(self._at(n))
        return <int64_t>kb_load_be64(self._at(n))

    cdef Py_ssize_t _search(self, int64_t target) noexcept nogil:
        """The one binary search of both indexes: the position of the greatest entry whose
        key is <= target, or -1; the warm tail first, then the cold rest (the caller made
        sure of _ready())."""
        cdef Py_ssize_t lo, hi, mid, n = self._entries
        if n == 0 or (self.mm == NULL and self._persisted > 0) or target < self._key(0):
            return -1
        lo = self._warm_first()
        if target < self._key(lo):
            hi = lo
            lo = 0
        else:
            hi = n - 1
        # invariant: key(lo) <= target; find the last such entry in [lo, hi]
        while lo < hi:
            mid = lo + (hi - lo + 1) // 2
            if self._key(mid) <= target:
                lo = mid
            else:
                hi = mid - 1
        return lo

    # -- Python API shared by both indexes
    @property
    def entries(self):
        return self._entries

    @property
    def pending_entries(self):
        """Entries held in memory, not written to the file yet."""
        return self._entries - self._persisted

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
        return self._closed or self.path is None

    @property
    def mapped(self):
        """Whether the file is mapped now (it is mapped again on demand)."""
        return self.mm != NULL

    def resize(self, Py_ssize_t new_size):
        """Sets the capacity to new_size bytes of entries (never below the entries); the
        file is not touched (it always holds just the entries)."""
        self._check_open()
        self._set_capacity(new_size // self.entry_size)

    def trim(self):
        """Writes the pending entries, cuts the file to the entries and the capacity to
        them (Kafka's trimToValidSize). Raises OSError when the entries cannot be written."""
        self._check_open()
        if self.writable:
            self._persist()
            self._cut_file(self._entries)
        self._set_capacity(self._entries)

    def flush(self):
        """Writes the pending entries and fdatasync(2)s the file."""
        cdef int fd, rc
        self._check_open()
        if not self.writable:
            return
        self._persist()
        fd = _open(self, O_RDONLY, "cannot open index")
        try:
            with nogil:
                rc = fdatasync(fd)
            if rc != 0:
                raise _oserror("cannot fsync index", self.path)
        finally:
            c_close(fd)

    def release(self):
        """Drops the mapping (it comes back with the next lookup); entries stay known."""
        self._unmap()

    def close(self):
        """Writes the pending entries (when writable; entries a full disk refuses are
        lost, which leaves a sparser index) and cuts the file to them. Idempotent."""
        if self._closed or self.path is None:
            return
        try:
            if self.writable and self._persist_quietly():
                self._cut_file(self._entries)
        finally:
            self._unmap()
            PyMem_Free(self._pending)
            self._pending = NULL
            self._closed = True

    def rename(self, str new_path):
        """Renames the file (the mapping stays valid)."""
        os.rename(self.path, new_path)
        self.path = new_path
        self._bpath = os.fsencode(new_path)

    def delete(self):
        """Closes, dropping pending entries, and removes the file."""
        if self.path is None:
            return
        self._unmap()
        PyMem_Free(self._pending)
        self._pending = NULL
        self._entries = self._persisted
        self._closed = True
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass

    def __dealloc__(self):
        # like a crash: pending entries are lost
        self._unmap()
        PyMem_Free(self._pending)
        self._pending = NULL

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
        return self.base_offset + <int32_t>kb_load_be32(self._at(n))

    cdef int32_t c_entry_position(self, Py_ssize_t n) noexcept nogil:
        return <int32_t>kb_load_be32(self._at(n) + 4)

    cdef int c_append(self, int64_t offset, int32_t position) except -1:
        cdef int64_t rel = offset - self.base_offset
        self._check_open()
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
        if self._push(entry):
            self._last_offset = offset
        return 0

    def append(self, int64_t offset, int32_t position):
        self.c_append(offset, position)

    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *offset, int32_t *position) noexcept nogil:
        """Index of the greatest entry <= target, or -1 (the caller made sure of _ready())."""
        cdef Py_ssize_t i = self._search(target)
        if i >= 0:
            offset[0] = self.c_entry_offset(i)
            position[0] = self.c_entry_position(i)
        return i

    def lookup(self, int64_t target_offset):
        """(offset, position) of the greatest entry <= target_offset, else (base_offset, 0)."""
        cdef int64_t off
        cdef int32_t pos
        self._ready()
        if self.c_lookup(target_offset, &off, &pos) < 0:
            return (self.base_offset, 0)
        return (off, pos)

    def entry(self, Py_ssize_t n):
        """The n-th entry as (offset, position)."""
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} of {self._entries}")
        self._ready()
        return (self.c_entry_offset(n), self.c_entry_position(n))

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
        self._ready()
        i = self.c_lookup(offset, &off, &pos)
        if i < 0:
            i = 0
        elif off != offset:
            i += 1
        self._drop_to(i)
        self._last_offset = self.c_entry_offset(self._entries - 1) if self._entries else self.base_offset

    def truncate(self):
        """Removes every entry."""
        self._check_open()
        self._drop_to(0)
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
        self._ready()
        if not full and self._entries >= 2:
            off = self.c_entry_offset(self._entries - 1)
            pos = self.c_entry_position(self._entries - 1)
            if off <= self.c_entry_offset(0) or pos < self.c_entry_position(0) or pos < 0:
                raise CorruptIndexError(
                    f"corrupt offset index {self.path}: last entry (offset {off}, position {pos}) does not "
                    f"follow the first; a crash left a preallocated tail")
            return
        for i in range(self._entries):
            off = self.c_entry_offset(i)
            pos = self.c_entry_position(i)
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

    cdef int _set_last(self) except -1:
        cdef Py_ssize_t n = self._entries
        if n:
            self._ready()
            self._last_timestamp = self._ts(n - 1)
            self._last_offset = self.base_offset + <int32_t>kb_load_be32(self._at(n - 1) + 8)
        else:
            self._last_timestamp = -1
            self._last_offset = self.base_offset
        return 0

    cdef int64_t _ts(self, Py_ssize_t n) noexcept nogil:
        return <int64_t>kb_load_be64(self._at(n))

    cdef int c_maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check) except -1:
        """Appends (timestamp, offset) when timestamp is larger than the last entry's."""
        cdef int64_t rel = offset - self.base_offset
        self._check_open()
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
        if not self._push(entry):
            return 0
        self._last_timestamp = timestamp
        self._last_offset = offset
        return 1

    def maybe_append(self, int64_t timestamp, int64_t offset, bint skip_full_check=False):
        """Appends when timestamp exceeds the last entry's; returns whether it did."""
        return bool(self.c_maybe_append(timestamp, offset, skip_full_check))

    cdef Py_ssize_t c_lookup(self, int64_t target, int64_t *timestamp, int64_t *offset) noexcept nogil:
        """Index of the greatest entry with timestamp <= target, or -1."""
        cdef Py_ssize_t i = self._search(target)
        if i >= 0:
            timestamp[0] = self._ts(i)
            offset[0] = self.base_offset + <int32_t>kb_load_be32(self._at(i) + 8)
        return i

    def lookup(self, int64_t target_timestamp):
        """(timestamp, offset) of the greatest entry with timestamp <= target, else
        (-1, base_offset)."""
        cdef int64_t ts, off
        self._ready()
        if self.c_lookup(target_timestamp, &ts, &off) < 0:
            return (-1, self.base_offset)
        return (ts, off)

    def entry(self, Py_ssize_t n):
        if n < 0 or n >= self._entries:
            raise IndexError(f"entry {n} of {self._entries}")
        self._ready()
        return (self._ts(n), self.base_offset + <int32_t>kb_load_be32(self._at(n) + 8))

    @property
    def last_entry(self):
        """(timestamp, offset) of the last entry, (-1, base_offset) when empty."""
        return (self._last_timestamp, self._last_offset)

    def truncate_to(self, int64_t offset):
        """Removes every entry whose offset is >= offset."""
        cdef Py_ssize_t i
        self._check_open()
        self._ready()
        # offsets are non-decreasing: drop from the first entry with offset >= offset
        i = self._entries
        while i > 0 and self.base_offset + <int32_t>kb_load_be32(self._at(i - 1) + 8) >= offset:
            i -= 1
        self._drop_to(i)
        self._set_last()

    def truncate(self):
        self._check_open()
        self._drop_to(0)
        self._set_last()

    def sanity_check(self, bint full=True):
        """Raises CorruptIndexError unless timestamps increase strictly and offsets never
        decrease nor fall below base_offset. full=False compares first and last only."""
        cdef Py_ssize_t i
        cdef int64_t ts, off, prev_ts = -1, prev_off = -1
        self._check_open()
        self._ready()
        if not full and self._entries >= 2:
            if self._ts(self._entries - 1) <= self._ts(0) or \
                    <int32_t>kb_load_be32(self._at(self._entries - 1) + 8) < <int32_t>kb_load_be32(self._at(0) + 8):
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: last entry does not follow the first; a crash "
                    f"left a preallocated tail")
            return
        for i in range(self._entries):
            ts = self._ts(i)
            off = self.base_offset + <int32_t>kb_load_be32(self._at(i) + 8)
            if off < self.base_offset or (i and (ts <= prev_ts or off < prev_off)):
                raise CorruptIndexError(
                    f"corrupt time index {self.path}: entry {i} (timestamp {ts}, offset {off}) "
                    f"at byte {i * TIME_ENTRY} follows (timestamp {prev_ts}, offset {prev_off})")
            prev_ts = ts
            prev_off = off

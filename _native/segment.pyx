# cython: language_level=3
"""An append-only log segment with its offset and time indexes (Kafka's LogSegment).

Files, named by the segment's base offset as 20 digits (Kafka's names):

    00000000000000000000.log         record batches back to back (on disk = on the wire)
    00000000000000000000.index       OffsetIndex: an entry every index_interval_bytes
    00000000000000000000.timeindex   TimeIndex: max timestamp so far -> its offset

Invariants:
- `size` bytes of the .log are whole, valid batches with strictly increasing offsets,
  all >= base_offset and within base_offset + 2**31 - 1 (relative offsets are int32).
- An offset index entry (last offset of batch B, position of B) is added when more than
  index_interval_bytes were appended since the previous entry, so a lookup followed by a
  forward scan of batch headers finds any offset.
- `recover()` re-validates every batch (lengths, magic, CRC-32C, offsets), truncates the
  file at the first invalid or torn batch and rebuilds both indexes.

Open files. A segment's state (size, next offset, timestamps, index entry counts) lives
in memory; its files are open only while needed, so a broker with 100,000 segments does
not need 300,000 file descriptors:
- Indexes hold no descriptor (index.pyx), only mappings.
- The active segment (a new, empty one, or one given resize_indexes()) keeps its .log
  open. A segment becomes inactive with roll(); one opened with data is inactive.
- An inactive segment opens its .log (and maps its indexes) on demand and joins the
  open set, least recently used last. The set holds at most the limit given to
  `set_open_segment_limit()`: the least recently used unpinned members are released
  (the .log closed, the index mappings and the scan buffer dropped) as soon as a member
  joins, and they reopen on their next use. The set is managed by the thread that set
  the limit (the broker's event loop), and only there are members released, so a
  descriptor that thread got from a segment stays valid until it returns to its loop.
  When every member is pinned, that thread's reopens are refused with EMFILE.
- Other threads (fsync, compaction) never add to the set: a segment they need open is
  borrowed, its .log opened for as long as they pin it and closed by the last unpin
  (unless the event loop took it into the set meanwhile). What they hold is bounded by
  how many of them run, which the broker budgets apart from the set.
- `pin()` keeps a segment's files open until `unpin()` (a read in flight, as a FileSlice
  sent with sendfile(2)); close() and delete() of a pinned segment close its .log only
  when the last pin goes, so no descriptor is ever closed under a send. Until then a
  descriptor that was the set's (or an active segment's) still counts against the
  limit, and the unpin() that ends a send applies the limit again at once.

Allocation ahead. An append past the blocks already allocated to the .log first has
ALLOCATE_AHEAD more bytes allocated beyond it (fallocate(2), FALLOC_FL_KEEP_SIZE: the
file's size, and so what any reader or recovery sees, stays what was written). A write
into allocated blocks skips the file system's per-page block reservation: on ext4 a
128 KiB pwrite(2) into the page cache costs about a quarter less CPU, writeback included
(bench/RESULTS.md). What was allocated beyond the end is freed when the segment stops
being the active one (roll, release, close) and when a writable segment with more blocks
than data is opened (after a crash). A file system that cannot gets plain writes, as
before; on a full disk the next append tries again: allocating is never an error of its
own. At most ALLOCATE_AHEAD (1 MiB) per active segment is allocated and unused.

Thread safety: a Segment is used by one thread at a time, except that flush() and
read_bytes() may run in worker threads (fsync, compaction) beside the event loop; every
method that touches the files pins the segment while it runs.
"""
cimport cython
from cpython.mem cimport PyMem_Malloc, PyMem_Free
from cpython.pythread cimport PyThread_get_thread_ident
from cpython.ref cimport PyObject
from libc.stdint cimport uint8_t, int32_t, int64_t
from libc.errno cimport errno, EINTR, EMFILE, EOPNOTSUPP, ENOSYS
from libc.string cimport strerror
from posix.fcntl cimport open as c_open, O_RDWR, O_RDONLY, O_CREAT, O_CLOEXEC
from posix.unistd cimport close as c_close, ftruncate, pread, pwrite
from posix.stat cimport struct_stat, fstat
from posix.mman cimport mmap, munmap, PROT_READ, MAP_SHARED
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

from broker._native.buffer cimport kb_load_be32, kb_load_be64
from broker._native.records cimport (batch_check, CHECK_OK, CHECK_PARTIAL, HEADER_SIZE,
                                     LOG_OVERHEAD, OFF_LAST_OFFSET_DELTA, OFF_MAX_TIMESTAMP,
                                     OFF_BATCH_LENGTH)
from broker._native.index cimport OffsetIndex, TimeIndex

import os
import time as _time

from broker._native.records import CorruptRecordError, RecordBatch
from broker._native.index import CorruptIndexError, DEFAULT_MAX_INDEX_SIZE

cdef extern from "unistd.h" nogil:
    int fdatasync(int fd)

cdef extern from "fcntl.h" nogil:
    int fallocate(int fd, int mode, long offset, long length)
    int FALLOC_FL_KEEP_SIZE

cdef extern from "sys/mman.h" nogil:
    void *MAP_FAILED
    int madvise(void *addr, size_t length, int advice)
    int MADV_SEQUENTIAL

cdef enum:
    GIL_RELEASE_BYTES = 65536

#: bytes allocated beyond an append that needs new blocks (see "Allocation ahead" above); 0: none
ALLOCATE_AHEAD = 1 << 20
cdef Py_ssize_t _allocate_ahead = ALLOCATE_AHEAD


def set_allocate_ahead(Py_ssize_t nbytes):
    """How many bytes beyond an append are allocated with it (0: none); for tests and
    benchmarks comparing the two."""
    global _allocate_ahead
    if nbytes < 0:
        raise ValueError("allocate ahead must be >= 0")
    _allocate_ahead = nbytes


DEFAULT_INDEX_INTERVAL_BYTES = 4096
LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIMEINDEX_SUFFIX = ".timeindex"


def file_name(int64_t base_offset, str suffix=LOG_SUFFIX):
    """Kafka's file name for a segment: the base offset as 20 digits, then the suffix."""
    return f"{base_offset:020d}{suffix}"


def parse_base_offset(str name):
    """Base offset from a segment file name ('00000000000000000042.log' -> 42), else None."""
    stem, dot, _ = name.partition(".")
    if len(stem) == 20 and stem.isdigit() and dot:
        return int(stem)
    return None


cdef object _oserror(str what, str path):
    cdef int e = errno
    return OSError(e, f"{what}: {strerror(e).decode()}", path)


# ---------------------------------------------------------------- open inactive segments
# The open set: a doubly linked list of the inactive segments whose files are open, most
# recently used first. Its links are borrowed references: a segment leaves the list when
# released, closed, deleted or deallocated. Only touched with the GIL held.

cdef PyObject *_lru_head = NULL
cdef PyObject *_lru_tail = NULL
cdef Py_ssize_t _lru_count = 0
cdef Py_ssize_t _lru_held = 0            # descriptors of closed segments kept open by pins
cdef Py_ssize_t _lru_limit = -1          # no limit
cdef long _lru_owner = 0                 # the thread that manages the set (set with the limit)


cdef inline bint _manages() noexcept:
    """Whether the calling thread manages the open set: the one that set the limit, or
    any thread while there is no limit (nothing is released then)."""
    return _lru_limit < 0 or PyThread_get_thread_ident() == _lru_owner


cdef inline bint _over_limit() noexcept:
    return _lru_limit >= 0 and _lru_count + _lru_held > _lru_limit


cdef void _lru_unlink(Segment s) noexcept:
    if not s._in_lru:
        return
    global _lru_head, _lru_tail, _lru_count
    if s._lru_prev != NULL:
        (<Segment>s._lru_prev)._lru_next = s._lru_next
    else:
        _lru_head = s._lru_next
    if s._lru_next != NULL:
        (<Segment>s._lru_next)._lru_prev = s._lru_prev
    else:
        _lru_tail = s._lru_prev
    s._lru_prev = s._lru_next = NULL
    s._in_lru = False
    _lru_count -= 1


cdef void _lru_push_front(Segment s) noexcept:
    global _lru_head, _lru_tail, _lru_count
    _lru_unlink(s)
    s._lru_prev = NULL
    s._lru_next = _lru_head
    if _lru_head != NULL:
        (<Segment>_lru_head)._lru_prev = <PyObject *>s
    _lru_head = <PyObject *>s
    if _lru_tail == NULL:
        _lru_tail = <PyObject *>s
    s._in_lru = True
    _lru_count += 1


cdef void _lru_touch(Segment s) noexcept:
    if s._in_lru and _lru_head != <PyObject *>s:
        _lru_unlink(s)
        _lru_push_front(s)


cdef void _lru_trim() noexcept:
    """Releases the least recently used unpinned segments beyond the limit (owner only)."""
    cdef PyObject *cur
    cdef Segment s
    if not _over_limit() or PyThread_get_thread_ident() != _lru_owner:
        return
    cur = _lru_tail
    while cur != NULL and _over_limit():
        s = <Segment>cur
        cur = s._lru_prev
        if s._pins == 0:
            s._release_files()


def set_open_segment_limit(Py_ssize_t limit):
    """At most `limit` inactive segments keep their files open (-1: no limit); the
    calling thread becomes the one that releases them. Applies at once."""
    global _lru_limit, _lru_owner
    if limit < -1:
        raise ValueError(f"limit must be >= -1, not {limit}")
    _lru_limit = limit
    _lru_owner = PyThread_get_thread_ident()
    _lru_trim()


def open_segment_limit():
    """The limit set with set_open_segment_limit() (-1: none)."""
    return _lru_limit


def open_inactive_segments():
    """The descriptors counted against the limit now: inactive segments whose files are
    open in the set, and closed segments whose files pins keep open."""
    return _lru_count + _lru_held


@cython.final
cdef class Segment:
    """Segment(directory, base_offset, *, index_interval_bytes=4096,
    max_index_size=10 MiB, writable=True)

    Opens the segment's files in `directory`, creating them when missing (writable only).
    An existing segment's end (next offset, max timestamp) is found from its last index
    entries plus a scan of the batch headers after them; if that scan or the index sanity
    check fails, the segment is recovered (see recover()): `recovery_reason` says what
    was wrong (None when nothing was) and `recovered_truncated_bytes` how many bytes were
    cut. A writable segment whose .log is empty is the active one; any other is inactive
    (see the module docstring).
    """

    def __cinit__(self, *args, **kwargs):
        self._fd = -1
        self._alloc_end = 0
        self._chunk = NULL
        self._chunk_pos = 0
        self._chunk_len = 0

    def __init__(self, str directory, int64_t base_offset, *,
                 int index_interval_bytes=DEFAULT_INDEX_INTERVAL_BYTES,
                 Py_ssize_t max_index_size=DEFAULT_MAX_INDEX_SIZE, bint writable=True):
        if base_offset < 0:
            raise ValueError(f"negative base offset {base_offset}")
        if index_interval_bytes < 0:
            raise ValueError("index_interval_bytes must be >= 0")
        self.directory = directory
        self.base_offset = base_offset
        self.index_interval_bytes = index_interval_bytes
        self.writable = writable
        self.created = _time.time()
        self.recovered_truncated_bytes = 0
        self.recovery_reason = None
        self.log_path = os.path.join(directory, file_name(base_offset, LOG_SUFFIX))
        self._blog_path = os.fsencode(self.log_path)
        self._fd = c_open(self._blog_path, ((O_RDWR | O_CREAT) if writable else O_RDONLY) | O_CLOEXEC, 0o644)
        if self._fd < 0:
            raise _oserror("cannot open segment", self.log_path)
        self._pins = 1
        try:
            self.offset_index = OffsetIndex(os.path.join(directory, file_name(base_offset, INDEX_SUFFIX)),
                                            base_offset, max_index_size, writable)
            self.time_index = TimeIndex(os.path.join(directory, file_name(base_offset, TIMEINDEX_SUFFIX)),
                                        base_offset, max_index_size, writable)
            self._load()
        except BaseException:
            self._pins = 0
            self.close()
            raise
        self._active = writable and self._size == 0
        if self._active:
            self.offset_index.resize(max_index_size)
            self.time_index.resize(max_index_size)
        else:
            self._join_open_set()
        self._unpin()                   # borrowed (another thread opened it): released here

    # ------------------------------------------------------------ internals

    cdef int _check_open(self) except -1:
        if self._closed or self.log_path is None:
            raise ValueError(f"segment {self.log_path} is closed")
        return 0

    cdef int _acquire(self) except -1:
        """Pins the segment, reopening its files when released; every method that
        touches the files runs between _acquire() and _unpin()."""
        self._check_open()
        self._pins += 1
        try:
            if self._fd < 0:
                self._reopen()
            elif self._in_lru:
                _lru_touch(self)
                if _over_limit():
                    _lru_trim()                 # members pinned when it last grew are free now
            elif not self._active and _manages():
                self._admit()                   # borrowed by another thread: it joins the set
        except BaseException:
            self._unpin()
            raise
        return 0

    cdef void _unpin(self) noexcept:
        global _lru_held
        self._pins -= 1
        if self._pins or self._fd < 0:
            return
        if self._closed:
            c_close(self._fd)               # closed while pinned: the last user closes
            self._fd = -1
            if self._held:
                self._held = False
                _lru_held -= 1
        elif not self._active and not self._in_lru:
            self._release_files()           # borrowed: the last user closes

    cdef int _reopen(self) except -1:
        """Opens the .log again: an inactive segment joins the open set (on the thread
        that manages it) or is borrowed (any other thread)."""
        cdef int fd = c_open(self._blog_path, (O_RDWR if self.writable else O_RDONLY) | O_CLOEXEC)
        if fd < 0:
            raise _oserror("cannot open segment", self.log_path)
        self._fd = fd
        self._chunk_len = 0
        if not self._active and _manages():
            try:
                self._admit()
            except OSError:
                self._release_files()
                raise
        return 0

    cdef int _admit(self) except -1:
        """Puts an inactive segment with its .log open into the open set (managing thread),
        releasing the least recently used beyond the limit. When every other member is
        pinned (reads in flight) it is refused with EMFILE and stays out of the set: the
        descriptors beyond the limit belong to connections."""
        _lru_push_front(self)
        _lru_trim()
        if _over_limit():
            _lru_unlink(self)
            raise OSError(EMFILE, f"cannot open segment: {_lru_limit} inactive segments are open and in "
                                  f"use (the open-file limit allows no more)", self.log_path)
        return 0

    cdef void _join_open_set(self) noexcept:
        """An open segment that just became inactive joins the open set on the managing
        thread, even beyond the limit when every member is pinned (the next use there
        trims); on other threads it is borrowed, closed by its last unpin."""
        if _manages():
            _lru_push_front(self)
            _lru_trim()

    cdef void _mark_closed(self) noexcept:
        """close()/delete(): leaves the set; a descriptor the set or the active segment
        held stays counted against the limit while pins keep it open."""
        global _lru_held
        if self._closed:
            return
        if self._fd >= 0 and self._pins and (self._in_lru or self._active) and not self._held:
            self._held = True
            _lru_held += 1
        self._closed = True
        _lru_unlink(self)

    cdef void _release_files(self) noexcept:
        if self._fd >= 0:
            c_close(self._fd)
            self._fd = -1
        if self.offset_index is not None:
            self.offset_index._unmap()
        if self.time_index is not None:
            self.time_index._unmap()
        PyMem_Free(self._chunk)
        self._chunk = NULL
        self._chunk_len = 0
        _lru_unlink(self)

    cdef int _deactivate(self) except -1:
        self._trim_allocation()
        self.offset_index._deactivate()
        self.time_index._deactivate()
        if self._active:
            self._active = False
            if self._fd >= 0 and not self._in_lru:
                self._join_open_set()
        return 0

    cdef void _allocate(self, Py_ssize_t end) noexcept:
        """Allocates the .log's blocks up to `end` plus ALLOCATE_AHEAD (see the module
        docstring). A file system without fallocate(2) gets plain writes for this segment
        from now on; any other failure (a full disk) is tried again by the next append."""
        cdef Py_ssize_t start = self._alloc_end if self._alloc_end > self._size else self._size
        cdef int rc
        end += _allocate_ahead
        with nogil:
            rc = fallocate(self._fd, FALLOC_FL_KEEP_SIZE, start, end - start)
        if rc == 0:
            self._alloc_end = end
        elif errno == EOPNOTSUPP or errno == ENOSYS:
            self._alloc_end = -1

    cdef void _trim_allocation(self) noexcept:
        """Frees the blocks allocated beyond the end of the .log (ftruncate(2) to its own
        size does that); a failure leaves them (harmless: the size is the data's)."""
        if self._alloc_end > self._size and self._fd >= 0:
            ftruncate(self._fd, self._size)
        if self._alloc_end > 0:
            self._alloc_end = 0

    cdef const uint8_t *_header_at(self, Py_ssize_t pos, Py_ssize_t *avail) except? NULL:
        """Pointer to the bytes at `pos` with avail[0] of them buffered (up to a batch
        header's worth when the file has them); NULL with avail 0 at end of file."""
        cdef Py_ssize_t n
        if self._chunk != NULL and pos >= self._chunk_pos and pos + HEADER_SIZE <= self._chunk_pos + self._chunk_len:
            avail[0] = self._chunk_pos + self._chunk_len - pos
            return self._chunk + (pos - self._chunk_pos)
        if self._chunk == NULL:
            self._chunk = <uint8_t *>PyMem_Malloc(SCAN_CHUNK)
            if self._chunk == NULL:
                raise MemoryError()
        while True:
            with nogil:
                n = pread(self._fd, self._chunk, SCAN_CHUNK, pos)
            if n >= 0:
                break
            if errno != EINTR:
                raise _oserror("cannot read segment", self.log_path)
        self._chunk_pos = pos
        self._chunk_len = n
        avail[0] = n
        if n == 0:
            return NULL
        return self._chunk

    cdef int _pwrite_all(self, const uint8_t *p, Py_ssize_t n, Py_ssize_t pos) except -1:
        cdef Py_ssize_t done = 0, w
        while done < n:
            if n - done >= GIL_RELEASE_BYTES:
                with nogil:
                    w = pwrite(self._fd, p + done, n - done, pos + done)
            else:
                w = pwrite(self._fd, p + done, n - done, pos + done)
            if w < 0:
                if errno == EINTR:
                    continue
                err = _oserror("cannot write segment", self.log_path)
                ftruncate(self._fd, pos)          # leave no partial batch behind
                raise err
            done += w
        return 0

    cdef int _load(self) except -1:
        cdef struct_stat st
        cdef Py_ssize_t start, avail
        cdef int32_t pos
        cdef const uint8_t *h
        if fstat(self._fd, &st) != 0:
            raise _oserror("cannot stat segment", self.log_path)
        self._size = st.st_size
        if self.writable and <int64_t>st.st_blocks * 512 > <int64_t>st.st_size + 65536:
            ftruncate(self._fd, st.st_size)         # blocks allocated ahead before a crash
        self._next_offset = self.base_offset
        self._max_ts = -1
        self._max_ts_offset = self.base_offset
        self._first_batch_ts = -1
        self._since_index = 0
        self._chunk_len = 0
        try:
            self.offset_index.sanity_check(False)
            self.time_index.sanity_check(False)
            if self.offset_index._entries == 0 and self._size > 2 * self.index_interval_bytes + 65536:
                # a log with data but no index entries lost its index (deleted or never
                # written): rebuild it (a lone huge batch also lands here: harmless)
                raise CorruptIndexError(f"offset index {self.offset_index.path} is empty")
            if self.offset_index._entries:
                pos = self.offset_index.c_entry_position(self.offset_index._entries - 1)
                if pos >= self._size:
                    raise CorruptIndexError(f"offset index {self.offset_index.path} points past the log")
                start = pos
            else:
                start = 0
            if self.time_index._entries:
                self._max_ts, self._max_ts_offset = self.time_index.last_entry
            if self._scan_tail(start) < 0:
                raise CorruptRecordError(f"torn or corrupt batch in {self.log_path}")
        except (CorruptIndexError, CorruptRecordError) as exc:
            if not self.writable:
                raise
            self.recovery_reason = str(exc)
            self.recovered_truncated_bytes = self.recover()
            return 0
        if self._size > 0:
            h = self._header_at(0, &avail)
            if h != NULL and avail >= HEADER_SIZE:
                self._first_batch_ts = <int64_t>kb_load_be64(h + OFF_MAX_TIMESTAMP)
        return 0

    cdef Py_ssize_t _scan_tail(self, Py_ssize_t pos) except -2:
        """Walks batch headers from `pos` to the end of the log, updating next offset and
        max timestamp. Returns 0, or -1 when a header is corrupt or the tail torn."""
        cdef Py_ssize_t avail, size
        cdef const uint8_t *h
        cdef int64_t last, ts
        cdef int rc
        self._since_index = 0
        while pos < self._size:
            h = self._header_at(pos, &avail)
            if h == NULL or avail < HEADER_SIZE:
                return -1
            rc = batch_check(h, HEADER_SIZE, False, &size)
            if rc != CHECK_PARTIAL and rc != CHECK_OK:
                return -1
            if size < HEADER_SIZE or pos + size > self._size:
                return -1
            last = <int64_t>kb_load_be64(h) + <int32_t>kb_load_be32(h + OFF_LAST_OFFSET_DELTA)
            ts = <int64_t>kb_load_be64(h + OFF_MAX_TIMESTAMP)
            if <int64_t>kb_load_be64(h) < self._next_offset or last - self.base_offset > 0x7FFFFFFF:
                return -1
            if ts > self._max_ts:
                self._max_ts = ts
                self._max_ts_offset = last
            self._next_offset = last + 1
            self._since_index += size
            pos += size
        return 0

    cdef Py_ssize_t c_translate(self, int64_t offset, Py_ssize_t starting_position,
                                Py_ssize_t *size) except -2:
        """Position of the first batch at or after starting_position whose last offset is
        >= offset; -1 when there is none. The caller holds a pin (_acquire)."""
        cdef int64_t ioff
        cdef int32_t ipos
        cdef Py_ssize_t pos, avail, bsize
        cdef const uint8_t *h
        cdef int rc
        pos = 0
        self.offset_index._ready()
        if self.offset_index.c_lookup(offset, &ioff, &ipos) >= 0:
            pos = ipos
        if starting_position > pos:
            pos = starting_position
        while pos < self._size:
            h = self._header_at(pos, &avail)
            if h == NULL or avail < HEADER_SIZE:
                raise CorruptRecordError(f"{self.log_path}: truncated batch header at byte {pos}", pos)
            rc = batch_check(h, HEADER_SIZE, False, &bsize)
            if (rc != CHECK_OK and rc != CHECK_PARTIAL) or pos + bsize > self._size:
                raise CorruptRecordError(f"{self.log_path}: corrupt batch header at byte {pos}", pos)
            if <int64_t>kb_load_be64(h) + <int32_t>kb_load_be32(h + OFF_LAST_OFFSET_DELTA) >= offset:
                size[0] = bsize
                return pos
            pos += bsize
        return -1

    # ------------------------------------------------------------ properties

    @property
    def size(self):
        """Bytes in the .log."""
        return self._size

    @property
    def next_offset(self):
        """One past the last offset in this segment (base_offset when empty)."""
        return self._next_offset

    @property
    def is_empty(self):
        return self._size == 0

    @property
    def max_timestamp(self):
        """Largest batch max timestamp appended so far (-1 when none)."""
        return self._max_ts

    @property
    def offset_of_max_timestamp(self):
        return self._max_ts_offset

    @property
    def first_batch_timestamp(self):
        """Max timestamp of the first batch (-1 when empty): what segment.ms rolls on."""
        return self._first_batch_ts

    @property
    def fd(self):
        """The .log's descriptor (opened again if the segment was released). Valid until
        the calling thread lets another release happen: pin() to hold it longer. On a
        thread that does not manage the open set an inactive segment is borrowed and
        closed again at once (-1): pin() there."""
        self._acquire()
        self._unpin()
        return self._fd

    @property
    def closed(self):
        return self._closed or self.log_path is None

    @property
    def active(self):
        """Whether this is an active segment (keeps its files; not in the LRU set)."""
        return self._active

    @property
    def files_open(self):
        """Whether the .log is open now (an inactive segment may have been released)."""
        return self._fd >= 0

    @property
    def pins(self):
        return self._pins

    def __repr__(self):
        return (f"Segment(base_offset={self.base_offset}, next_offset={self._next_offset}, "
                f"size={self._size}, path={self.log_path!r})")

    # ------------------------------------------------------------ open files

    def pin(self):
        """Keeps the files open until unpin() (across releases, close() and delete());
        returns the .log's descriptor, valid until then."""
        self._acquire()
        return self._fd

    def unpin(self):
        """Ends a pin; on the managing thread, the end of the last pins that held the open
        set beyond its limit releases what is over it at once."""
        if self._pins <= 0:
            raise ValueError(f"segment {self.log_path} is not pinned")
        self._unpin()
        if _over_limit():
            _lru_trim()

    def release(self):
        """Closes the files of an idle segment now (an active one becomes inactive
        first); they reopen on the next use. Does nothing while the segment is pinned."""
        if self._closed or self.log_path is None or self._pins:
            return
        if self._active:
            self._deactivate()
        self._release_files()

    # ------------------------------------------------------------ append / read

    def append(self, data):
        """Appends whole batches (offsets already assigned, first base offset >= next
        offset) and indexes them. Returns the position of the first appended byte."""
        cdef Py_buffer view
        cdef const uint8_t *p
        cdef Py_ssize_t pos = 0, n, size = 0, start
        cdef int rc
        cdef int64_t base, last, ts, expect
        cdef int64_t max_ts, max_ts_off, first_ts
        cdef Py_ssize_t since
        cdef list entries = []
        self._check_open()
        if not self.writable:
            raise ValueError(f"segment {self.log_path} is read-only")
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t *>view.buf
            n = view.len
            if n == 0:
                return self._size
            if self._size + n > 0x7FFFFFFF:
                raise ValueError(f"segment {self.log_path} would exceed 2 GiB; roll first")
            # pass 1: check every header and plan the index entries (no side effects)
            expect = self._next_offset
            max_ts = self._max_ts
            max_ts_off = self._max_ts_offset
            first_ts = self._first_batch_ts
            since = self._since_index
            while pos < n:
                rc = batch_check(p + pos, n - pos, False, &size)
                if rc != CHECK_OK:
                    raise CorruptRecordError(
                        f"append to {self.log_path}: invalid or partial batch at byte {pos} of the input",
                        pos)
                base = <int64_t>kb_load_be64(p + pos)
                last = base + <int32_t>kb_load_be32(p + pos + OFF_LAST_OFFSET_DELTA)
                ts = <int64_t>kb_load_be64(p + pos + OFF_MAX_TIMESTAMP)
                if base < expect:
                    raise ValueError(f"append to {self.log_path}: base offset {base} is below "
                                     f"the next offset {expect}")
                if last - self.base_offset > 0x7FFFFFFF:
                    raise ValueError(f"append to {self.log_path}: offset {last} does not fit "
                                     f"a segment based at {self.base_offset}; roll first")
                if first_ts == -1 and self._size + pos == 0:
                    first_ts = ts
                if ts > max_ts:
                    max_ts = ts
                    max_ts_off = last
                if since > self.index_interval_bytes:
                    entries.append((last, self._size + pos, max_ts, max_ts_off))
                    since = 0
                since += size
                expect = last + 1
                pos += size
            start = self._size
            self._acquire()
            try:
                if start + n > self._alloc_end >= 0 and _allocate_ahead > 0 and self._active:
                    self._allocate(start + n)
                self._pwrite_all(p, n, start)
            finally:
                self._unpin()
        finally:
            PyBuffer_Release(&view)
        self._size = start + n
        self._next_offset = expect
        self._max_ts = max_ts
        self._max_ts_offset = max_ts_off
        self._first_batch_ts = first_ts
        self._since_index = since
        self._chunk_len = 0
        for last, ipos, ts, tso in entries:
            if not self.offset_index.is_full:
                self.offset_index.c_append(last, ipos)
            if not self.time_index.is_full:
                self.time_index.c_maybe_append(ts, tso, False)
        return start

    def translate_offset(self, int64_t offset, Py_ssize_t starting_position=0):
        """(position, size) of the first batch whose last offset is >= offset, or None."""
        cdef Py_ssize_t size = 0, pos
        self._acquire()
        try:
            pos = self.c_translate(offset, starting_position, &size)
        finally:
            self._unpin()
        if pos < 0:
            return None
        return (pos, size)

    def read(self, Py_ssize_t position, Py_ssize_t max_bytes, Py_ssize_t max_position=-1):
        """The slice (fd, position, length) of the .log from `position`: at most max_bytes,
        never past max_position (when >= 0) nor the end of the log. The descriptor is
        valid as `fd`'s is: pin() the segment to keep it across a release."""
        cdef Py_ssize_t end
        self._acquire()
        self._unpin()
        if position < 0 or max_bytes < 0:
            raise ValueError("negative position or max_bytes")
        end = self._size if max_position < 0 or max_position > self._size else max_position
        if position >= end:
            return (self._fd, position, 0)
        return (self._fd, position, min(max_bytes, end - position))

    def read_from_offset(self, int64_t offset, Py_ssize_t max_bytes, Py_ssize_t max_position=-1,
                         bint min_one_batch=True):
        """The slice (fd, position, length) starting at the batch holding `offset`, at most
        max_bytes (or the whole first batch when min_one_batch and it is larger), never past
        max_position (when >= 0). None when no batch at or after `offset` lies below it.
        The descriptor is valid as `fd`'s is."""
        cdef Py_ssize_t size = 0, end, length, pos
        if max_bytes < 0:
            raise ValueError("negative max_bytes")
        self._acquire()
        try:
            pos = self.c_translate(offset, 0, &size)
        finally:
            self._unpin()
        if pos < 0:
            return None
        end = self._size if max_position < 0 or max_position > self._size else max_position
        if pos >= end:
            return None
        length = max_bytes
        if min_one_batch and size > length:
            length = size
        if length > end - pos:
            length = end - pos
        return (self._fd, pos, length)

    def read_bytes(self, Py_ssize_t position, Py_ssize_t length):
        """A copy of log bytes [position, position + length) (clamped to the log)."""
        cdef Py_ssize_t n, done = 0
        cdef char *buf
        self._check_open()
        if position < 0 or length < 0:
            raise ValueError("negative position or length")
        if position >= self._size:
            return b""
        if length > self._size - position:
            length = self._size - position
        out = PyBytes_FromStringAndSize(NULL, length)
        buf = PyBytes_AS_STRING(out)
        self._acquire()
        try:
            while done < length:
                with nogil:
                    n = pread(self._fd, buf + done, length - done, position + done)
                if n < 0:
                    if errno == EINTR:
                        continue
                    raise _oserror("cannot read segment", self.log_path)
                if n == 0:
                    raise CorruptRecordError(f"{self.log_path} shrank under a read at byte {position + done}",
                                             position + done)
                done += n
        finally:
            self._unpin()
        return out

    def find_offset_by_timestamp(self, int64_t timestamp, int64_t starting_offset=-1):
        """(offset, timestamp) of the first record with timestamp >= `timestamp` and
        offset >= starting_offset, or None when there is none in this segment."""
        self._acquire()
        try:
            return self._find_offset_by_timestamp(timestamp, starting_offset)
        finally:
            self._unpin()

    cdef object _find_offset_by_timestamp(self, int64_t timestamp, int64_t starting_offset):
        cdef int64_t ts_entry, off_entry, ioff
        cdef int32_t ipos
        cdef Py_ssize_t pos = 0, size = 0, avail
        cdef const uint8_t *h
        self.time_index._ready()
        self.offset_index._ready()
        if self.time_index.c_lookup(timestamp, &ts_entry, &off_entry) >= 0:
            if self.offset_index.c_lookup(off_entry, &ioff, &ipos) >= 0:
                pos = ipos
        if starting_offset > self.base_offset:
            size = 0
            start = self.c_translate(starting_offset, 0, &size)
            if start < 0:
                return None
            if start > pos:
                pos = start
        while pos < self._size:
            h = self._header_at(pos, &avail)
            if h == NULL or avail < HEADER_SIZE:
                raise CorruptRecordError(f"{self.log_path}: truncated batch header at byte {pos}", pos)
            size = LOG_OVERHEAD + <int32_t>kb_load_be32(h + OFF_BATCH_LENGTH)
            if size < HEADER_SIZE or pos + size > self._size:
                raise CorruptRecordError(f"{self.log_path}: corrupt batch header at byte {pos}", pos)
            if <int64_t>kb_load_be64(h + OFF_MAX_TIMESTAMP) >= timestamp:
                batch = RecordBatch(self.read_bytes(pos, size))
                for rec in batch.records():
                    if rec.timestamp >= timestamp and rec.offset >= starting_offset:
                        return (rec.offset, rec.timestamp)
            pos += size
        return None

    # ------------------------------------------------------------ recovery

    def recover(self):
        """Re-validates every batch (lengths, magic 2, CRC-32C, increasing offsets within
        this segment), truncates the log at the first invalid or torn batch and rebuilds
        both indexes from scratch. Returns the number of bytes truncated."""
        if not self.writable:
            self._check_open()
            raise ValueError(f"segment {self.log_path} is read-only")
        self._acquire()
        try:
            return self._recover()
        finally:
            self._unpin()

    cdef Py_ssize_t _recover(self) except -1:
        cdef struct_stat st
        cdef void *m = NULL
        cdef const uint8_t *p
        cdef Py_ssize_t n, pos = 0, size = 0, since = 0
        cdef int64_t expect, base, last, ts
        cdef int rc
        if fstat(self._fd, &st) != 0:
            raise _oserror("cannot stat segment", self.log_path)
        n = st.st_size
        self.offset_index.truncate()
        self.time_index.truncate()
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        self._next_offset = self.base_offset
        self._max_ts = -1
        self._max_ts_offset = self.base_offset
        self._first_batch_ts = -1
        expect = self.base_offset
        if n > 0:
            m = mmap(NULL, n, PROT_READ, MAP_SHARED, self._fd, 0)
            if m == MAP_FAILED:
                raise _oserror("cannot mmap segment", self.log_path)
        try:
            p = <const uint8_t *>m
            if n > 0:
                madvise(m, n, MADV_SEQUENTIAL)
            while pos < n:
                with nogil:
                    rc = batch_check(p + pos, n - pos, True, &size)
                if rc != CHECK_OK:
                    break
                base = <int64_t>kb_load_be64(p + pos)
                last = base + <int32_t>kb_load_be32(p + pos + OFF_LAST_OFFSET_DELTA)
                if base < expect or last - self.base_offset > 0x7FFFFFFF:
                    break
                ts = <int64_t>kb_load_be64(p + pos + OFF_MAX_TIMESTAMP)
                if pos == 0:
                    self._first_batch_ts = ts
                if ts > self._max_ts:
                    self._max_ts = ts
                    self._max_ts_offset = last
                if since > self.index_interval_bytes:
                    if not self.offset_index.is_full:
                        self.offset_index.c_append(last, <int32_t>pos)
                    if not self.time_index.is_full:
                        self.time_index.c_maybe_append(self._max_ts, self._max_ts_offset, False)
                    since = 0
                since += size
                expect = last + 1
                pos += size
        finally:
            if m != NULL:
                munmap(m, n)
        if pos < n:
            if ftruncate(self._fd, pos) != 0:
                raise _oserror("cannot truncate segment", self.log_path)
        self._size = pos
        self._next_offset = expect
        self._since_index = since
        self._chunk_len = 0
        if not self._active:
            # an inactive segment's indexes hold just their entries
            self.offset_index._deactivate()
            self.time_index._deactivate()
        return n - pos

    def truncate_to(self, int64_t offset):
        """Removes every batch whose last offset is >= offset (so a batch holding `offset`
        goes entirely, as in Kafka) and the index entries >= offset. Returns bytes removed."""
        self._acquire()
        try:
            return self._truncate_to(offset)
        finally:
            self._unpin()

    cdef Py_ssize_t _truncate_to(self, int64_t offset) except -1:
        cdef Py_ssize_t size = 0, pos, removed
        pos = self.c_translate(offset, 0, &size)
        if pos < 0:
            return 0
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        if ftruncate(self._fd, pos) != 0:
            raise _oserror("cannot truncate segment", self.log_path)
        if self._alloc_end > 0:
            self._alloc_end = 0                     # the blocks beyond pos went with the rest
        removed = self._size - pos
        self._size = pos
        self._chunk_len = 0
        # recompute the end state from the remaining index entries and headers
        self._next_offset = self.base_offset
        self._max_ts, self._max_ts_offset = self.time_index.last_entry
        if self._max_ts == -1:
            self._max_ts_offset = self.base_offset
        start = 0
        if self.offset_index.entries:
            start = self.offset_index.entry(self.offset_index.entries - 1)[1]
        if self._scan_tail(start) < 0:
            raise CorruptRecordError(f"{self.log_path}: corrupt batch while truncating", start)
        if self._size == 0:
            self._first_batch_ts = -1
            self.created = _time.time()
        return removed

    # ------------------------------------------------------------ lifecycle

    def roll(self):
        """Makes this segment inactive: records the final max timestamp in the time index,
        writes both indexes' entries and trims their files to them (Kafka's
        onBecomeInactiveSegment). A full disk leaves index entries in memory, written later."""
        self._acquire()
        try:
            if self.writable and self._max_ts >= 0:
                self.time_index.c_maybe_append(self._max_ts, self._max_ts_offset, True)
            self._deactivate()
        finally:
            self._unpin()

    def resize_indexes(self, Py_ssize_t max_index_size):
        """Makes this the active segment again: the indexes may grow to max_index_size."""
        self._acquire()
        try:
            self.offset_index.resize(max_index_size)
            self.time_index.resize(max_index_size)
            self._active = True
            _lru_unlink(self)
        finally:
            self._unpin()

    def flush(self):
        """fdatasync(2)s the log and writes and fdatasyncs the indexes."""
        cdef int rc
        self._acquire()
        try:
            with nogil:
                rc = fdatasync(self._fd)
            if rc != 0:
                raise _oserror("cannot fsync segment", self.log_path)
            self.offset_index.flush()
            self.time_index.flush()
        finally:
            self._unpin()

    def close(self):
        """Writes and trims the indexes (when writable) and closes every file; a pinned
        .log closes with its last unpin(). Idempotent."""
        if self._closed:
            return
        self._trim_allocation()
        self._mark_closed()
        try:
            if self.offset_index is not None:
                self.offset_index.close()
        finally:
            try:
                if self.time_index is not None:
                    self.time_index.close()
            finally:
                PyMem_Free(self._chunk)
                self._chunk = NULL
                if self._fd >= 0 and self._pins == 0:
                    c_close(self._fd)
                    self._fd = -1

    def delete(self):
        """Closes and removes the .log, .index and .timeindex files (unwritten index
        entries are dropped; a pinned .log stays readable until its last unpin())."""
        self._mark_closed()
        if self.offset_index is not None:
            self.offset_index.delete()
        if self.time_index is not None:
            self.time_index.delete()
        PyMem_Free(self._chunk)
        self._chunk = NULL
        if self._fd >= 0 and self._pins == 0:
            c_close(self._fd)
            self._fd = -1
        if self.log_path is not None:
            try:
                os.unlink(self.log_path)
            except FileNotFoundError:
                pass

    def __dealloc__(self):
        global _lru_held
        _lru_unlink(self)
        if self._held:
            _lru_held -= 1
        PyMem_Free(self._chunk)
        self._chunk = NULL
        if self._fd >= 0:
            c_close(self._fd)
            self._fd = -1

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

# cython: language_level=3
"""Log compaction in C: the key -> latest offset map and the batch filter (Kafka's
SkimpyOffsetMap and LogCleaner's record filter).

OffsetMap keys are 128-bit hashes of the record keys (two independent 64-bit hashes),
so the map's memory is fixed per entry (24 bytes) whatever the key sizes; a false match
needs both hashes to collide. Like Kafka, the map has a fixed capacity: add_batches()
stops at the batch that would overfill it and says where, so a cleaning pass covers
what fits and the next pass continues.

filter_batches() keeps a record when it is the latest for its key (or its key is not in
the map, or null), drops superseded records, and drops tombstones (null values) that lie
below `tombstone_offset_limit` in batches older than `delete_horizon_ms`. A batch whose
records all stay is copied byte for byte; a batch that loses some keeps its base offset,
last offset delta, timestamps and producer fields (so offsets never move), and gets the
kept records' bytes verbatim (recompressed with its codec when it was compressed) and a
new CRC-32C; a batch that loses all its records disappears. Control batches stay.
"""
cimport cython
from libc.stdint cimport uint8_t, uint32_t, uint64_t, int32_t, int64_t
from libc.stdlib cimport calloc, free
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING, PyBytes_GET_SIZE

from broker._native.buffer cimport kb_load_be16, kb_load_be32, kb_load_be64, kb_store_be32
from broker._native.crc32c cimport crc32c_raw
from broker._native.records cimport (batch_check, decompress, parse_record, RecordView, CHECK_OK,
                                     CHECK_PARTIAL, REC_OK, HEADER_SIZE, LOG_OVERHEAD, OFF_ATTRIBUTES,
                                     OFF_BATCH_LENGTH, OFF_CRC, OFF_RECORD_COUNT, OFF_MAX_TIMESTAMP,
                                     OFF_LAST_OFFSET_DELTA, ATTR_COMPRESSION_MASK, ATTR_CONTROL,
                                     CODEC_NONE, record_error)

from broker._native.codecs import compress_block
from broker._native.records import CorruptRecordError, DEFAULT_DECOMPRESS_LIMIT

cdef extern from "kb_hash.h" nogil:
    uint64_t kb_hash64(const uint8_t *p, size_t n, uint64_t seed)
    uint64_t SEED1 "KB_SEED1"
    uint64_t SEED2 "KB_SEED2"


cdef struct Slot:
    uint64_t h1
    uint64_t h2
    int64_t offset          # -1: empty


@cython.final
cdef class OffsetMap:
    """Fixed-capacity map from record-key hash to the latest offset seen for it."""
    cdef Slot *slots
    cdef Py_ssize_t mask
    cdef Py_ssize_t _size
    cdef readonly Py_ssize_t capacity
    cdef readonly int64_t last_offset

    def __cinit__(self, Py_ssize_t capacity=1 << 20):
        cdef Py_ssize_t n = 16
        cdef Py_ssize_t i
        if capacity < 1:
            raise ValueError("capacity must be >= 1")
        while n * 3 < capacity * 4:          # load factor <= 0.75 at capacity
            n *= 2
        self.slots = <Slot *>calloc(n, sizeof(Slot))
        if self.slots == NULL:
            raise MemoryError()
        for i in range(n):
            self.slots[i].offset = -1
        self.mask = n - 1
        self.capacity = capacity
        self._size = 0
        self.last_offset = -1

    def __dealloc__(self):
        free(self.slots)

    def __len__(self):
        return self._size

    @property
    def full(self):
        return self._size >= self.capacity

    cdef inline Py_ssize_t _find(self, uint64_t h1, uint64_t h2) noexcept nogil:
        cdef Py_ssize_t i = <Py_ssize_t>(h1 & <uint64_t>self.mask)
        while self.slots[i].offset != -1:
            if self.slots[i].h1 == h1 and self.slots[i].h2 == h2:
                return i
            i = (i + 1) & self.mask
        return i

    cdef inline bint _put(self, const uint8_t *key, Py_ssize_t n, int64_t offset) noexcept nogil:
        """False when the map is full and the key is new."""
        cdef uint64_t h1 = kb_hash64(key, n, SEED1)
        cdef uint64_t h2 = kb_hash64(key, n, SEED2)
        cdef Py_ssize_t i = self._find(h1, h2)
        if self.slots[i].offset == -1:
            if self._size >= self.capacity:
                return False
            self._size += 1
            self.slots[i].h1 = h1
            self.slots[i].h2 = h2
        if offset > self.slots[i].offset:
            self.slots[i].offset = offset
        return True

    cdef inline int64_t _get(self, const uint8_t *key, Py_ssize_t n) noexcept nogil:
        cdef uint64_t h1 = kb_hash64(key, n, SEED1)
        cdef uint64_t h2 = kb_hash64(key, n, SEED2)
        return self.slots[self._find(h1, h2)].offset

    def get(self, key):
        """Latest offset recorded for `key` (bytes), or -1."""
        cdef Py_buffer view
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        try:
            return self._get(<const uint8_t *>view.buf, view.len)
        finally:
            PyBuffer_Release(&view)

    def put(self, key, int64_t offset):
        cdef Py_buffer view
        PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
        try:
            if not self._put(<const uint8_t *>view.buf, view.len, offset):
                raise OverflowError("offset map full")
        finally:
            PyBuffer_Release(&view)

    def add_batches(self, data, int64_t start_offset=0, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
        """Records every keyed record at or above start_offset in the batches of `data`.
        Returns the offset after the last batch taken whole: a batch whose new keys do
        not fit is left out entirely (the map may already hold some of its keys, which
        only makes the cleaner keep more). Control batches are skipped."""
        cdef Py_buffer view
        cdef const uint8_t *p
        cdef Py_ssize_t pos = 0, size = 0, n
        cdef int rc
        cdef int64_t base, last, nxt = -1
        PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
        try:
            p = <const uint8_t *>view.buf
            n = view.len
            while pos < n:
                rc = batch_check(p + pos, n - pos, False, &size)
                if rc == CHECK_PARTIAL:
                    break
                if rc != CHECK_OK:
                    raise CorruptRecordError(f"record batch at byte {pos}: invalid header", pos)
                base = <int64_t>kb_load_be64(p + pos)
                last = base + <int32_t>kb_load_be32(p + pos + OFF_LAST_OFFSET_DELTA)
                if last >= start_offset and not (kb_load_be16(p + pos + OFF_ATTRIBUTES) & ATTR_CONTROL):
                    if not self._add_batch(p + pos, size, pos, start_offset, decompress_limit):
                        return nxt if nxt >= 0 else base
                nxt = last + 1
                if nxt - 1 > self.last_offset:
                    self.last_offset = nxt - 1
                pos += size
            return nxt
        finally:
            PyBuffer_Release(&view)

    cdef bint _add_batch(self, const uint8_t *b, Py_ssize_t size, Py_ssize_t pos, int64_t start_offset,
                         Py_ssize_t limit) except -1:
        cdef int codec = kb_load_be16(b + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK
        cdef int32_t count = <int32_t>kb_load_be32(b + OFF_RECORD_COUNT)
        cdef int64_t base = <int64_t>kb_load_be64(b)
        cdef const uint8_t *r
        cdef const uint8_t *end
        cdef RecordView rv
        cdef int32_t i
        cdef int rc
        if codec == CODEC_NONE:
            r = b + HEADER_SIZE
            end = b + size
        else:
            block = decompress(codec, b + HEADER_SIZE, size - HEADER_SIZE, limit, pos)
            r = <const uint8_t *>PyBytes_AS_STRING(block)
            end = r + PyBytes_GET_SIZE(block)
        # room check first: never half-record a batch
        if self._size + count > self.capacity:
            if self._size == 0:
                raise OverflowError(f"a batch of {count} records does not fit an offset map of "
                                    f"{self.capacity} entries")
            return False
        for i in range(count):
            rc = parse_record(r, end, &rv)
            if rc != REC_OK:
                raise CorruptRecordError(f"record batch at byte {pos}: record {i} {record_error(rc)}", pos)
            if rv.key != NULL and base + rv.offset_delta >= start_offset:
                self._put(rv.key, rv.key_len, base + rv.offset_delta)
            r = rv.end
        return True


def filter_batches(data, OffsetMap offset_map, int64_t delete_horizon_ms=-1, int64_t tombstone_offset_limit=-1,
                   Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT):
    """The batches of `data` with superseded records (and expired tombstones) removed ->
    (bytes, records kept, records removed). Offsets, timestamps and producer fields of
    kept records never change."""
    cdef Py_buffer view
    cdef const uint8_t *p
    cdef const uint8_t *b
    cdef const uint8_t *r
    cdef const uint8_t *end
    cdef Py_ssize_t pos = 0, size = 0, n
    cdef int rc, codec
    cdef int32_t count, i, kept_n
    cdef int64_t base, off, latest, batch_max_ts
    cdef RecordView rv
    cdef bint keep, drop_tombstones
    cdef list out = []
    cdef list kept
    cdef Py_ssize_t total_kept = 0, total_removed = 0
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        p = <const uint8_t *>view.buf
        n = view.len
        while pos < n:
            rc = batch_check(p + pos, n - pos, False, &size)
            if rc == CHECK_PARTIAL:
                break
            if rc != CHECK_OK:
                raise CorruptRecordError(f"record batch at byte {pos}: invalid header", pos)
            b = p + pos
            if kb_load_be16(b + OFF_ATTRIBUTES) & ATTR_CONTROL:
                out.append(PyBytes_FromStringAndSize(<const char *>b, size))
                pos += size
                continue
            codec = kb_load_be16(b + OFF_ATTRIBUTES) & ATTR_COMPRESSION_MASK
            count = <int32_t>kb_load_be32(b + OFF_RECORD_COUNT)
            base = <int64_t>kb_load_be64(b)
            batch_max_ts = <int64_t>kb_load_be64(b + OFF_MAX_TIMESTAMP)
            drop_tombstones = delete_horizon_ms >= 0 and batch_max_ts < delete_horizon_ms
            block = None
            if codec == CODEC_NONE:
                r = b + HEADER_SIZE
                end = b + size
            else:
                block = decompress(codec, b + HEADER_SIZE, size - HEADER_SIZE, decompress_limit, pos)
                r = <const uint8_t *>PyBytes_AS_STRING(block)
                end = r + PyBytes_GET_SIZE(block)
            kept = []
            kept_n = 0
            for i in range(count):
                rc = parse_record(r, end, &rv)
                if rc != REC_OK:
                    raise CorruptRecordError(f"record batch at byte {pos}: record {i} {record_error(rc)}", pos)
                off = base + rv.offset_delta
                keep = True
                if rv.key != NULL:
                    latest = offset_map._get(rv.key, rv.key_len)
                    if latest > off:
                        keep = False
                    elif rv.value == NULL and drop_tombstones and off < tombstone_offset_limit:
                        keep = False
                if keep:
                    kept_n += 1
                    kept.append((<Py_ssize_t>(r - (b + HEADER_SIZE) if codec == CODEC_NONE
                                              else r - <const uint8_t *>PyBytes_AS_STRING(block)),
                                 <Py_ssize_t>(rv.end - r)))
                r = rv.end
            total_kept += kept_n
            total_removed += count - kept_n
            if kept_n == count:
                out.append(PyBytes_FromStringAndSize(<const char *>b, size))
            elif kept_n > 0:
                src = PyBytes_FromStringAndSize(<const char *>b + HEADER_SIZE, size - HEADER_SIZE) \
                    if codec == CODEC_NONE else block
                body = b"".join([src[s:s + l] for s, l in kept])
                if codec != CODEC_NONE:
                    body = compress_block(codec, body)
                out.append(_rebuild(b, body, kept_n))
            pos += size
        return b"".join(out), total_kept, total_removed
    finally:
        PyBuffer_Release(&view)


cdef bytes _rebuild(const uint8_t *header, bytes body, int32_t count):
    """A batch with `header`'s fields, `body` as its records block and a new length,
    record count and CRC-32C."""
    cdef Py_ssize_t n = HEADER_SIZE + len(body)
    out = PyBytes_FromStringAndSize(NULL, n)
    cdef uint8_t *o = <uint8_t *>PyBytes_AS_STRING(out)
    memcpy(o, header, HEADER_SIZE)
    memcpy(o + HEADER_SIZE, PyBytes_AS_STRING(body), len(body))
    kb_store_be32(o + OFF_BATCH_LENGTH, <uint32_t>(n - LOG_OVERHEAD))
    kb_store_be32(o + OFF_RECORD_COUNT, <uint32_t>count)
    kb_store_be32(o + OFF_CRC, crc32c_raw(0, o + OFF_ATTRIBUTES, n - OFF_ATTRIBUTES))
    return out

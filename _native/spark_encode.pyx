# cython: language_level=3
"""Arrow columns -> RecordBatch v2, in C: the Spark sink's write path (no per-row Python).

The sink (broker/spark/writer.py) hands over the Arrow buffers of its columns, each
binary-like column described by a tuple

    (validity bitmap or None, int32 offsets, data or None, array offset)

as pyarrow lays out binary and string arrays (`arr.buffers()` and `arr.offset`), and gets
back finished record batches, one or more per partition:

    parts = assign_partitions(n, num_partitions, key, explicit, sticky)
            # bytes of n int32: the explicit partition column where set (checked to be in
            # range), else Kafka's default partitioner: murmur2(key) for keyed rows, the
            # `sticky` partition for rows without a key
    for partition, batch, count in encode_batches(n, parts, key, value, headers,
                                                  timestamp_ms, compression, batch_bytes):
        ...   # batch: bytes of a valid batch (CRC-32C set), base offset 0

headers is None or (list validity or None, int32 list offsets, list array offset,
key column, value column) for list<struct<key: string, value: binary>> (the struct's
children as flattened by pyarrow). A batch holds records of one partition in row order
and closes before its uncompressed size would pass batch_bytes (it always takes at least
one record). producer_id / producer_epoch / sequences / transactional fill the batch
header fields an idempotent or transactional producer sets: `sequences` maps partition ->
next sequence number and is advanced in place.

Record v2 layout written here (Kafka's DefaultRecord):
    length varint | attributes int8 = 0 | timestampDelta varlong = 0 | offsetDelta varint |
    keyLength varint (-1 null) | key | valueLength varint (-1 null) | value |
    headerCount varint | (headerKeyLength varint | key | headerValueLength varint | value)*
"""
cimport cython
from libc.stdint cimport uint8_t, int16_t, int32_t, int64_t, uint16_t, uint32_t, uint64_t
from libc.stdlib cimport malloc, realloc, free
from libc.string cimport memcpy
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize, PyBytes_AS_STRING

from broker._native.buffer cimport (kb_store_be16, kb_store_be32, kb_store_be64, kb_write_varint,
                                    kb_varint_size, kb_reserve)
from broker._native.crc32c cimport crc32c_raw
from broker._native.partitioner cimport c_partition_of
from broker._native.records cimport (HEADER_SIZE, LOG_OVERHEAD, OFF_BASE_OFFSET, OFF_BATCH_LENGTH,
                                     OFF_PARTITION_LEADER_EPOCH, OFF_MAGIC, OFF_CRC, OFF_ATTRIBUTES,
                                     OFF_LAST_OFFSET_DELTA, OFF_BASE_TIMESTAMP, OFF_MAX_TIMESTAMP,
                                     OFF_PRODUCER_ID, OFF_PRODUCER_EPOCH, OFF_BASE_SEQUENCE,
                                     OFF_RECORD_COUNT, ATTR_TRANSACTIONAL, CODEC_NONE)

from broker._native.codecs import compress_block, compression_code

cdef uint8_t _EMPTY[1]


# ---------------------------------------------------------------- Arrow column views

cdef struct BinCol:
    const uint8_t *validity      # NULL: no nulls
    const int32_t *offsets
    const uint8_t *data
    Py_ssize_t data_len
    Py_ssize_t offset            # the array's offset into its buffers
    Py_ssize_t length            # rows addressable: offsets has offset + length + 1 entries


@cython.final
cdef class _Views:
    """Holds the Py_buffers of the Arrow buffers for the duration of a call."""
    cdef Py_buffer views[16]
    cdef int count

    def __cinit__(self):
        self.count = 0

    cdef const uint8_t *get(self, obj, Py_ssize_t *length) except? NULL:
        if obj is None:
            length[0] = 0
            return NULL
        if self.count == 16:
            raise ValueError("too many buffers")
        PyObject_GetBuffer(obj, &self.views[self.count], PyBUF_SIMPLE)
        self.count += 1
        length[0] = self.views[self.count - 1].len
        return <const uint8_t *>self.views[self.count - 1].buf

    def __dealloc__(self):
        cdef int i
        for i in range(self.count):
            PyBuffer_Release(&self.views[i])
        self.count = 0


cdef int bin_col(_Views v, object desc, Py_ssize_t rows, BinCol *c, str what) except -1:
    """desc = (validity, offsets, data, offset) -> c, checking the buffers' sizes."""
    cdef Py_ssize_t vlen, olen
    validity, offsets, data, offset = desc
    c.offset = offset
    c.length = rows
    if c.offset < 0 or rows < 0:
        raise ValueError(f"{what}: negative array offset or length")
    c.validity = v.get(validity, &vlen)
    if c.validity != NULL and vlen * 8 < c.offset + rows:
        raise ValueError(f"{what}: validity bitmap too short")
    c.offsets = <const int32_t *>v.get(offsets, &olen)
    if c.offsets == NULL or olen < (c.offset + rows + 1) * 4:
        raise ValueError(f"{what}: offsets buffer too short")
    c.data = v.get(data, &c.data_len)
    if c.data == NULL:
        c.data = _EMPTY
        c.data_len = 0
    return 0


cdef inline int bin_get(const BinCol *c, Py_ssize_t i, const uint8_t **p, int32_t *n) noexcept nogil:
    """Row i: 1 with p/n set, 0 if null, -1 if the offsets are inconsistent."""
    cdef Py_ssize_t j = c.offset + i
    cdef int32_t s, e
    if c.validity != NULL and not ((c.validity[j >> 3] >> (j & 7)) & 1):
        return 0
    s = c.offsets[j]
    e = c.offsets[j + 1]
    if s < 0 or e < s or e > c.data_len:
        return -1
    p[0] = c.data + s
    n[0] = e - s
    return 1


# ---------------------------------------------------------------- partitioning

def assign_partitions(Py_ssize_t n, int32_t num_partitions, key=None, explicit=None, int32_t sticky=0):
    """The partition of each of n rows, as bytes of n native int32.

    explicit: None or (validity or None, int32 values, offset), a partition column; a
    null entry falls back to the key. key: a binary column descriptor or None. Rows with
    neither go to `sticky`. ValueError names the first row whose explicit partition is
    out of [0, num_partitions)."""
    cdef _Views v = _Views()
    cdef BinCol kc
    cdef bint has_key = key is not None
    cdef const uint8_t *ev = NULL
    cdef const int32_t *evals = NULL
    cdef Py_ssize_t eoff = 0, elen = 0, vlen = 0, i, j, bad = -1
    cdef int32_t *out
    cdef const uint8_t *kp
    cdef int32_t kn, part
    cdef int rc
    if num_partitions < 1:
        raise ValueError("num_partitions must be >= 1")
    if sticky < 0 or sticky >= num_partitions:
        raise ValueError("sticky partition out of range")
    if has_key:
        bin_col(v, key, n, &kc, "key")
    if explicit is not None:
        evalid, evalues, eoff = explicit
        ev = v.get(evalid, &vlen)
        evals = <const int32_t *>v.get(evalues, &elen)
        if evals == NULL or elen < (eoff + n) * 4 or (ev != NULL and vlen * 8 < eoff + n):
            raise ValueError("partition column buffers too short")
    result = PyBytes_FromStringAndSize(NULL, n * 4)
    out = <int32_t *>PyBytes_AS_STRING(result)
    with nogil:
        for i in range(n):
            j = eoff + i
            if evals != NULL and (ev == NULL or ((ev[j >> 3] >> (j & 7)) & 1)):
                part = evals[j]
                if part < 0 or part >= num_partitions:
                    bad = i
                    break
                out[i] = part
                continue
            if has_key:
                rc = bin_get(&kc, i, &kp, &kn)
                if rc < 0:
                    bad = -2 - i
                    break
                if rc == 1:
                    out[i] = c_partition_of(kp, kn, num_partitions)
                    continue
            out[i] = sticky
    if bad >= 0:
        raise ValueError(f"row {bad}: partition {evals[eoff + bad]} is out of range: the topic has "
                         f"{num_partitions} partition(s)")
    if bad < -1:
        raise ValueError(f"key column: inconsistent offsets at row {-2 - bad}")
    return result


# ---------------------------------------------------------------- batch encoding

cdef struct Out:
    uint8_t *buf
    Py_ssize_t length
    Py_ssize_t cap


cdef int out_reserve(Out *o, Py_ssize_t extra) except -1:
    return kb_reserve(&o.buf, &o.cap, o.length + extra, 1 << 16)


cdef object finish_batch(Out *o, int32_t count, int64_t ts, int codec, object level, int64_t producer_id,
                         int16_t producer_epoch, int32_t base_sequence, bint transactional):
    """The batch in o (header space + records) as bytes, header and CRC written."""
    cdef Py_ssize_t body_len = o.length - HEADER_SIZE
    cdef uint8_t *h
    cdef int16_t attrs = codec
    if transactional:
        attrs |= ATTR_TRANSACTIONAL
    if codec != CODEC_NONE:
        block = compress_block(codec, PyBytes_FromStringAndSize(<const char *>o.buf + HEADER_SIZE, body_len), level)
        body_len = len(block)
        out = PyBytes_FromStringAndSize(NULL, HEADER_SIZE + body_len)
        h = <uint8_t *>PyBytes_AS_STRING(out)
        memcpy(h + HEADER_SIZE, PyBytes_AS_STRING(block), body_len)
    else:
        out = PyBytes_FromStringAndSize(<const char *>o.buf, o.length)
        h = <uint8_t *>PyBytes_AS_STRING(out)
    if HEADER_SIZE - LOG_OVERHEAD + body_len > 0x7FFFFFFF:
        raise OverflowError("batch larger than 2 GiB")
    kb_store_be64(h + OFF_BASE_OFFSET, 0)
    kb_store_be32(h + OFF_BATCH_LENGTH, <uint32_t>(HEADER_SIZE - LOG_OVERHEAD + body_len))
    kb_store_be32(h + OFF_PARTITION_LEADER_EPOCH, <uint32_t>-1)
    h[OFF_MAGIC] = 2
    kb_store_be16(h + OFF_ATTRIBUTES, <uint16_t>attrs)
    kb_store_be32(h + OFF_LAST_OFFSET_DELTA, <uint32_t>(count - 1))
    kb_store_be64(h + OFF_BASE_TIMESTAMP, <uint64_t>ts)
    kb_store_be64(h + OFF_MAX_TIMESTAMP, <uint64_t>ts)
    kb_store_be64(h + OFF_PRODUCER_ID, <uint64_t>producer_id)
    kb_store_be16(h + OFF_PRODUCER_EPOCH, <uint16_t>producer_epoch)
    kb_store_be32(h + OFF_BASE_SEQUENCE, <uint32_t>base_sequence)
    kb_store_be32(h + OFF_RECORD_COUNT, <uint32_t>count)
    kb_store_be32(h + OFF_CRC, crc32c_raw(0, h + OFF_ATTRIBUTES, HEADER_SIZE - OFF_ATTRIBUTES + body_len))
    return out


cdef enum:
    ENC_OK = 0
    ENC_BAD_OFFSETS = -1
    ENC_NULL_HEADER_KEY = -2
    ENC_TOO_LARGE = -3
    ENC_NOMEM = -4


cdef int append_record(Out *o, Py_ssize_t row, int32_t delta, const BinCol *key, const BinCol *value,
                       bint has_headers, const uint8_t *hvalid, const int32_t *hoffs, Py_ssize_t hoff,
                       const BinCol *hkey, const BinCol *hval) noexcept nogil:
    cdef const uint8_t *kp = NULL
    cdef const uint8_t *vp = NULL
    cdef const uint8_t *hkp
    cdef const uint8_t *hvp
    cdef int32_t kn = -1, vn = -1, hkn, hvn, hcount = 0, hfirst = 0
    cdef int rc
    cdef Py_ssize_t body, j, hsize = 0, need
    cdef int32_t h
    cdef uint8_t *w
    cdef uint8_t *nb
    if key != NULL:
        rc = bin_get(key, row, &kp, &kn)
        if rc < 0:
            return ENC_BAD_OFFSETS
        if rc == 0:
            kn = -1
    if value != NULL:
        rc = bin_get(value, row, &vp, &vn)
        if rc < 0:
            return ENC_BAD_OFFSETS
        if rc == 0:
            vn = -1
    if has_headers:
        j = hoff + row
        if hvalid == NULL or ((hvalid[j >> 3] >> (j & 7)) & 1):
            hfirst = hoffs[j]
            hcount = hoffs[j + 1] - hfirst
            if hfirst < 0 or hcount < 0 or hfirst + hcount > hkey.length:
                return ENC_BAD_OFFSETS
            for h in range(hcount):
                rc = bin_get(hkey, hfirst + h, &hkp, &hkn)
                if rc < 0:
                    return ENC_BAD_OFFSETS
                if rc == 0:
                    return ENC_NULL_HEADER_KEY
                rc = bin_get(hval, hfirst + h, &hvp, &hvn)
                if rc < 0:
                    return ENC_BAD_OFFSETS
                if rc == 0:
                    hvn = -1
                hsize += kb_varint_size(hkn) + hkn + kb_varint_size(hvn) + (hvn if hvn > 0 else 0)
    body = (1 + 1 + kb_varint_size(delta) + kb_varint_size(kn) + (kn if kn > 0 else 0)
            + kb_varint_size(vn) + (vn if vn > 0 else 0) + kb_varint_size(hcount) + hsize)
    if body > 0x7FFFFFF0:
        return ENC_TOO_LARGE
    need = o.length + body + 5
    if need > o.cap:
        need = need if need > o.cap * 2 else o.cap * 2
        nb = <uint8_t *>realloc(o.buf, need)
        if nb == NULL:
            return ENC_NOMEM
        o.buf = nb
        o.cap = need
    w = o.buf + o.length
    w += kb_write_varint(w, <int32_t>body)
    w[0] = 0                            # attributes
    w[1] = 0                            # timestampDelta varlong 0
    w += 2
    w += kb_write_varint(w, delta)
    w += kb_write_varint(w, kn)
    if kn > 0:
        memcpy(w, kp, kn)
        w += kn
    w += kb_write_varint(w, vn)
    if vn > 0:
        memcpy(w, vp, vn)
        w += vn
    w += kb_write_varint(w, hcount)
    for h in range(hcount):
        bin_get(hkey, hfirst + h, &hkp, &hkn)
        rc = bin_get(hval, hfirst + h, &hvp, &hvn)
        if rc == 0:
            hvn = -1
        w += kb_write_varint(w, hkn)
        memcpy(w, hkp, hkn)
        w += hkn
        w += kb_write_varint(w, hvn)
        if hvn > 0:
            memcpy(w, hvp, hvn)
            w += hvn
    o.length = w - o.buf
    return ENC_OK


def encode_batches(Py_ssize_t n, partitions, key, value, headers=None, int64_t timestamp_ms=0,
                   compression=None, Py_ssize_t batch_bytes=1 << 20, *, compression_level=None,
                   int64_t producer_id=-1, int producer_epoch=-1, dict sequences=None,
                   bint transactional=False):
    """Record batches of the n rows: [(partition, batch bytes, record count)], partitions
    in ascending order, rows in their order within each partition.

    partitions: bytes-like of n native int32 (assign_partitions' result). key / value: a
    binary column descriptor or None (every record's key / value null). headers: None or
    (list validity, list offsets, list offset, key column, value column)."""
    cdef _Views v = _Views()
    cdef BinCol kc, vc, hk, hv
    cdef BinCol *kp = NULL
    cdef BinCol *vp = NULL
    cdef const uint8_t *hvalid = NULL
    cdef const int32_t *hoffs = NULL
    cdef Py_ssize_t hoff = 0, plen, hvlen, holen, i, start, base_len
    cdef bint has_headers = headers is not None
    cdef const int32_t *parts
    cdef int32_t p, maxp = -1, count
    cdef int codec = compression_code(compression)
    cdef int rc = ENC_OK
    cdef Py_ssize_t *counts = NULL
    cdef Py_ssize_t *order = NULL
    cdef Out o
    cdef int32_t seq
    o.buf = NULL
    o.length = 0
    o.cap = 0
    if batch_bytes < HEADER_SIZE + 1:
        raise ValueError("batch_bytes too small")
    parts = <const int32_t *>v.get(partitions, &plen)
    if n < 0 or (n and (parts == NULL or plen < n * 4)):
        raise ValueError("partitions: need n int32 values")
    if key is not None:
        bin_col(v, key, n, &kc, "key")
        kp = &kc
    if value is not None:
        bin_col(v, value, n, &vc, "value")
        vp = &vc
    if has_headers:
        lvalid, loffs, hoff, hkey, hval = headers
        hvalid = v.get(lvalid, &hvlen)
        hoffs = <const int32_t *>v.get(loffs, &holen)
        if hoffs == NULL or holen < (hoff + n + 1) * 4 or (hvalid != NULL and hvlen * 8 < hoff + n):
            raise ValueError("headers: list buffers too short")
        # the children: as many rows as the last list offset says
        bin_col(v, hkey, hoffs[hoff + n] if n else 0, &hk, "header key")
        bin_col(v, hval, hoffs[hoff + n] if n else 0, &hv, "header value")
    result = []
    if n == 0:
        return result
    for i in range(n):
        if parts[i] < 0:
            raise ValueError(f"row {i}: negative partition")
        if parts[i] > maxp:
            maxp = parts[i]
    # counting sort of the rows by partition (stable)
    counts = <Py_ssize_t *>malloc((maxp + 2) * sizeof(Py_ssize_t))
    order = <Py_ssize_t *>malloc(n * sizeof(Py_ssize_t))
    if counts == NULL or order == NULL:
        free(counts)
        free(order)
        raise MemoryError()
    try:
        for i in range(maxp + 2):
            counts[i] = 0
        for i in range(n):
            counts[parts[i] + 1] += 1
        for i in range(maxp + 1):
            counts[i + 1] += counts[i]
        for i in range(n):
            order[counts[parts[i]]] = i
            counts[parts[i]] += 1
        # counts[p] is now the end of partition p's rows in order; starts are counts[p-1]
        out_reserve(&o, batch_bytes + HEADER_SIZE)
        start = 0
        for p in range(maxp + 1):
            if counts[p] == start:
                continue
            i = start
            while i < counts[p]:
                o.length = HEADER_SIZE
                count = 0
                with nogil:
                    while i < counts[p]:
                        base_len = o.length
                        rc = append_record(&o, order[i], count, kp, vp, has_headers, hvalid, hoffs, hoff, &hk, &hv)
                        if rc != ENC_OK:
                            break
                        if count and o.length > batch_bytes:
                            o.length = base_len         # does not fit: next batch
                            break
                        count += 1
                        i += 1
                        if count == 0x7FFFFFFF:
                            break
                if rc != ENC_OK:
                    break
                seq = -1
                if sequences is not None:
                    seq = sequences.get(p, 0)
                    sequences[p] = (seq + count) & 0x7FFFFFFF
                result.append((p, finish_batch(&o, count, timestamp_ms, codec, compression_level, producer_id,
                                               <int16_t>producer_epoch, seq, transactional), count))
            if rc != ENC_OK:
                break
            start = counts[p]
    finally:
        free(o.buf)
        free(counts)
        free(order)
    if rc == ENC_BAD_OFFSETS:
        raise ValueError("inconsistent Arrow offsets in the key, value or headers columns")
    if rc == ENC_NULL_HEADER_KEY:
        raise ValueError("a header has a null key (header keys are strings)")
    if rc == ENC_TOO_LARGE:
        raise OverflowError("record larger than 2 GiB")
    if rc == ENC_NOMEM:
        raise MemoryError()
    return result

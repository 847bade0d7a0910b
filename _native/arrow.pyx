# cython: language_level=3
"""Record batches -> one pyarrow.RecordBatch, decoded in C (the Spark path).

Columns (SCHEMA):

    offset     int64                                   not null
    timestamp  timestamp[ms]                           not null
    key        binary                                  null when the record's key is null
    value      binary                                  null when the value is null
    headers    list<struct<key: string, value: binary>> not null (possibly empty)

No Python object is created per record: the Arrow buffers are filled from the batch
bytes by C loops (with the GIL released for uncompressed batches) and handed to pyarrow
without a copy. Compressed batches are decompressed once per batch.
"""
cimport cython
from libc.stdint cimport uint8_t, int32_t, int64_t, uint32_t
from libc.string cimport memcpy, memset
from libc.stdlib cimport free
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE

from broker._native.buffer cimport kb_export_bytes, kb_load_be16, kb_load_be32, kb_load_be64
from broker._native.records cimport (batch_check, decompress, record_error, parse_record,
                                     parse_header, RecordView, HeaderView, CHECK_OK,
                                     CHECK_PARTIAL, REC_OK, HEADER_SIZE, OFF_ATTRIBUTES,
                                     OFF_RECORD_COUNT, OFF_BASE_TIMESTAMP, OFF_MAX_TIMESTAMP,
                                     OFF_LAST_OFFSET_DELTA, ATTR_COMPRESSION_MASK,
                                     ATTR_TIMESTAMP_TYPE, ATTR_CONTROL, CODEC_NONE)

from broker._native.records import CorruptRecordError, DEFAULT_DECOMPRESS_LIMIT

cdef extern from "stdlib.h" nogil:
    int posix_memalign(void **memptr, size_t alignment, size_t size)

cdef extern from "kb_utf8.h" nogil:
    int kb_utf8_valid(const uint8_t *s, size_t n)

cdef enum:
    ALIGN = 64
    E_OK = 0
    E_NOMEM = -1
    E_OVERFLOW = -2
    E_UTF8 = -3
    INT32_LIMIT = 0x7FFFFFFF


# ---------------------------------------------------------------- growable buffers

cdef struct GrowBuf:
    uint8_t *data
    Py_ssize_t length
    Py_ssize_t cap


cdef int gb_reserve(GrowBuf *b, Py_ssize_t extra) noexcept nogil:
    cdef Py_ssize_t need = b.length + extra
    cdef Py_ssize_t cap
    cdef void *p = NULL
    if need <= b.cap:
        return E_OK
    cap = b.cap * 2 if b.cap else 256
    while cap < need:
        cap *= 2
    if posix_memalign(&p, ALIGN, <size_t>cap) != 0:
        return E_NOMEM
    if b.length:
        memcpy(p, b.data, b.length)
    memset(<uint8_t *>p + b.length, 0, cap - b.length)
    free(b.data)
    b.data = <uint8_t *>p
    b.cap = cap
    return E_OK


cdef inline int gb_put_i64(GrowBuf *b, int64_t v) noexcept nogil:
    if b.length + 8 > b.cap and gb_reserve(b, 8) != E_OK:
        return E_NOMEM
    memcpy(b.data + b.length, &v, 8)
    b.length += 8
    return E_OK


cdef inline int gb_put_i32(GrowBuf *b, int32_t v) noexcept nogil:
    if b.length + 4 > b.cap and gb_reserve(b, 4) != E_OK:
        return E_NOMEM
    memcpy(b.data + b.length, &v, 4)
    b.length += 4
    return E_OK


cdef inline int gb_put(GrowBuf *b, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    if b.length + n > b.cap and gb_reserve(b, n) != E_OK:
        return E_NOMEM
    memcpy(b.data + b.length, p, n)
    b.length += n
    return E_OK


@cython.final
cdef class _OwnedBuffer:
    """Owns a malloc'd block and exports it through the buffer protocol (to pyarrow)."""
    cdef uint8_t *data
    cdef Py_ssize_t length

    def __getbuffer__(self, Py_buffer *buf, int flags):
        kb_export_bytes(buf, <void *>self.data, self.length, True)
        buf.obj = self

    def __releasebuffer__(self, Py_buffer *buf):
        pass

    def __dealloc__(self):
        free(self.data)
        self.data = NULL


cdef object _take(GrowBuf *b):
    """Hands the block to a pyarrow.Buffer (no copy); b is left empty."""
    cdef _OwnedBuffer o = _OwnedBuffer.__new__(_OwnedBuffer)
    # a column that never grew (no records) has no block yet; pyarrow aborts the process
    # on a Py_buffer whose pointer is NULL, so give it an empty, aligned one
    if b.data == NULL and gb_reserve(b, 1) != E_OK:
        raise MemoryError()
    o.data = b.data
    o.length = b.length
    b.data = NULL
    b.length = 0
    b.cap = 0
    return _pa.py_buffer(o)


# ---------------------------------------------------------------- column builders

cdef struct BinCol:
    GrowBuf offsets          # int32, n + 1
    GrowBuf data
    GrowBuf validity         # bitmap
    Py_ssize_t nulls
    Py_ssize_t count


cdef int bin_init(BinCol *c, Py_ssize_t rows, Py_ssize_t data_bytes, bint nullable) noexcept nogil:
    if gb_reserve(&c.offsets, (rows + 1) * 4) != E_OK:
        return E_NOMEM
    if gb_reserve(&c.data, data_bytes if data_bytes > 0 else 64) != E_OK:
        return E_NOMEM
    if nullable and gb_reserve(&c.validity, rows // 8 + 1) != E_OK:
        return E_NOMEM
    return gb_put_i32(&c.offsets, 0)


cdef inline int bin_append(BinCol *c, const uint8_t *p, int32_t n) noexcept nogil:
    """Appends a value (p == NULL: null)."""
    cdef Py_ssize_t byte_i = c.count >> 3
    if c.validity.cap <= byte_i and gb_reserve(&c.validity, byte_i + 1 - c.validity.length) != E_OK:
        return E_NOMEM
    if byte_i >= c.validity.length:
        c.validity.length = byte_i + 1
    if p == NULL:
        c.nulls += 1
    else:
        c.validity.data[byte_i] |= <uint8_t>(1 << (c.count & 7))
        if n:
            if c.data.length + n > INT32_LIMIT:
                return E_OVERFLOW
            if gb_put(&c.data, p, n) != E_OK:
                return E_NOMEM
    c.count += 1
    return gb_put_i32(&c.offsets, <int32_t>c.data.length)


cdef void bin_free(BinCol *c) noexcept nogil:
    free(c.offsets.data)
    free(c.data.data)
    free(c.validity.data)
    memset(c, 0, sizeof(BinCol))


cdef struct Columns:
    GrowBuf offsets          # int64
    GrowBuf timestamps       # int64
    BinCol key
    BinCol value
    GrowBuf header_offsets   # int32, n + 1 (list offsets)
    BinCol hkey
    BinCol hvalue
    Py_ssize_t rows
    int64_t start_offset
    int64_t end_offset
    bint check_utf8


cdef void cols_free(Columns *c) noexcept nogil:
    free(c.offsets.data)
    free(c.timestamps.data)
    free(c.header_offsets.data)
    bin_free(&c.key)
    bin_free(&c.value)
    bin_free(&c.hkey)
    bin_free(&c.hvalue)


cdef int decode_run(Columns *c, const uint8_t *p, const uint8_t *end, int32_t count,
                    int64_t base_offset, int64_t base_ts, int64_t max_ts, bint log_append_time,
                    Py_ssize_t *bad_at, int *rec_rc) noexcept nogil:
    """Decodes `count` records from [p, end) into the columns. Returns E_OK, a negative
    E_* code, or 1 (a record error: rec_rc says which, bad_at the byte offset from p)."""
    cdef RecordView rv
    cdef HeaderView hv
    cdef const uint8_t *start = p
    cdef const uint8_t *hp
    cdef int rc
    cdef int32_t _i, _j
    cdef int64_t offset
    for _i in range(count):
        rc = parse_record(p, end, &rv)
        if rc != REC_OK:
            bad_at[0] = p - start
            rec_rc[0] = rc
            return 1
        offset = base_offset + rv.offset_delta
        if offset < c.start_offset or offset >= c.end_offset:
            # outside the requested range: still check its headers' framing
            hp = rv.headers
            for _j in range(rv.header_count):
                rc = parse_header(&hp, rv.end, &hv)
                if rc != REC_OK:
                    bad_at[0] = p - start
                    rec_rc[0] = rc
                    return 1
            p = rv.end
            continue
        if gb_put_i64(&c.offsets, offset) != E_OK:
            return E_NOMEM
        if gb_put_i64(&c.timestamps, max_ts if log_append_time else base_ts + rv.timestamp_delta) != E_OK:
            return E_NOMEM
        rc = bin_append(&c.key, rv.key, rv.key_len)
        if rc != E_OK:
            return rc
        rc = bin_append(&c.value, rv.value, rv.value_len)
        if rc != E_OK:
            return rc
        hp = rv.headers
        for _j in range(rv.header_count):
            rc = parse_header(&hp, rv.end, &hv)
            if rc != REC_OK:
                bad_at[0] = p - start
                rec_rc[0] = rc
                return 1
            if c.check_utf8 and not kb_utf8_valid(hv.key, hv.key_len):
                bad_at[0] = p - start
                return E_UTF8
            rc = bin_append(&c.hkey, hv.key, hv.key_len)
            if rc != E_OK:
                return rc
            rc = bin_append(&c.hvalue, hv.value, hv.value_len)
            if rc != E_OK:
                return rc
        if hp != rv.end:
            bad_at[0] = p - start
            rec_rc[0] = 3        # REC_BAD_LENGTH
            return 1
        if c.hkey.count > INT32_LIMIT:
            return E_OVERFLOW
        if gb_put_i32(&c.header_offsets, <int32_t>c.hkey.count) != E_OK:
            return E_NOMEM
        c.rows += 1
        p = rv.end
    if p != end:
        bad_at[0] = p - start
        rec_rc[0] = 3
        return 1
    return E_OK


# ---------------------------------------------------------------- pyarrow glue

cdef object _pa = None
cdef object _SCHEMA = None
cdef object _HEADER_TYPE = None


cdef object _arrow():
    global _pa, _SCHEMA, _HEADER_TYPE
    if _pa is None:
        import pyarrow
        _pa = pyarrow
        _HEADER_TYPE = pyarrow.list_(pyarrow.struct([
            pyarrow.field("key", pyarrow.string(), nullable=False),
            pyarrow.field("value", pyarrow.binary()),
        ]))
        _SCHEMA = pyarrow.schema([
            pyarrow.field("offset", pyarrow.int64(), nullable=False),
            pyarrow.field("timestamp", pyarrow.timestamp("ms"), nullable=False),
            pyarrow.field("key", pyarrow.binary()),
            pyarrow.field("value", pyarrow.binary()),
            pyarrow.field("headers", _HEADER_TYPE, nullable=False),
        ])
    return _pa


def arrow_schema():
    """The pyarrow.Schema of batches_to_arrow's result."""
    _arrow()
    return _SCHEMA


cdef object _bin_array(object typ, BinCol *c):
    validity = _take(&c.validity) if c.nulls else None
    n = c.count
    nulls = c.nulls
    offsets = _take(&c.offsets)
    data = _take(&c.data)
    return _pa.Array.from_buffers(typ, n, [validity, offsets, data], null_count=nulls)


def batches_to_arrow(data, start_offset=None, end_offset=None, *, bint validate=True,
                     bint skip_control=True, Py_ssize_t decompress_limit=DEFAULT_DECOMPRESS_LIMIT,
                     bint check_utf8=True):
    """Decodes the record batches in `data` (any buffer of batches back to back, e.g. a
    Fetch response's records; a partial batch at the end is ignored) into one
    pyarrow.RecordBatch with arrow_schema().

    start_offset / end_offset keep only records with start <= offset < end. Control
    batches (transaction markers) are skipped unless skip_control is False. With
    validate, every batch's CRC-32C is checked. Corrupt input raises CorruptRecordError
    naming the byte offset.
    """
    cdef Py_buffer view
    cdef Columns c
    cdef const uint8_t *base
    cdef const uint8_t *p
    cdef const uint8_t *body
    cdef const uint8_t *bend
    cdef Py_ssize_t n, pos = 0, size = 0, total_records = 0, total_bytes = 0, bad_at = 0
    cdef int rc, rec_rc = 0, codec
    cdef int32_t count
    cdef uint32_t attrs
    cdef int64_t bo, last, bts, mts
    _arrow()
    memset(&c, 0, sizeof(Columns))
    c.start_offset = -(1 << 62) if start_offset is None else start_offset
    c.end_offset = (1 << 62) if end_offset is None else end_offset
    c.check_utf8 = check_utf8
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        base = <const uint8_t *>view.buf
        n = view.len
        # pass 1: batch headers only, to size the buffers
        while pos < n:
            rc = batch_check(base + pos, n - pos, validate, &size)
            if rc == CHECK_PARTIAL:
                break
            if rc != CHECK_OK:
                if validate:
                    from broker._native.records import RecordBatch
                    RecordBatch(data, pos).validate()      # raises with the precise reason
                raise CorruptRecordError(f"record batch at byte {pos}: invalid header", pos)
            # an estimate for preallocation only (the buffers grow as needed): recordCount
            # is not trusted beyond the batch's size, each record taking at least one byte
            # of it, so a lying count cannot make us allocate gigabytes
            count = <int32_t>kb_load_be32(base + pos + OFF_RECORD_COUNT)
            total_records += count if count <= size - HEADER_SIZE else size - HEADER_SIZE
            total_bytes += size - HEADER_SIZE
            pos += size
        n = pos
        if (bin_init(&c.key, total_records, 0, True) != E_OK
                or bin_init(&c.value, total_records, total_bytes, True) != E_OK
                or bin_init(&c.hkey, 0, 0, True) != E_OK
                or bin_init(&c.hvalue, 0, 0, True) != E_OK
                or gb_reserve(&c.offsets, total_records * 8) != E_OK
                or gb_reserve(&c.timestamps, total_records * 8) != E_OK
                or gb_reserve(&c.header_offsets, (total_records + 1) * 4) != E_OK
                or gb_put_i32(&c.header_offsets, 0) != E_OK):
            raise MemoryError()
        # pass 2: records
        pos = 0
        while pos < n:
            p = base + pos
            size = 12 + <int32_t>kb_load_be32(p + 8)
            attrs = kb_load_be16(p + OFF_ATTRIBUTES)
            bo = <int64_t>kb_load_be64(p)
            last = bo + <int32_t>kb_load_be32(p + OFF_LAST_OFFSET_DELTA)
            if (skip_control and attrs & ATTR_CONTROL) or last < c.start_offset:
                pos += size
                continue
            if bo >= c.end_offset:
                break
            count = <int32_t>kb_load_be32(p + OFF_RECORD_COUNT)
            bts = <int64_t>kb_load_be64(p + OFF_BASE_TIMESTAMP)
            mts = <int64_t>kb_load_be64(p + OFF_MAX_TIMESTAMP)
            codec = attrs & ATTR_COMPRESSION_MASK
            if codec == CODEC_NONE:
                with nogil:
                    rc = decode_run(&c, p + HEADER_SIZE, p + size, count, bo, bts, mts,
                                    (attrs & ATTR_TIMESTAMP_TYPE) != 0, &bad_at, &rec_rc)
                if rc != E_OK:
                    bad_at += pos + HEADER_SIZE
            else:
                block = decompress(codec, p + HEADER_SIZE, size - HEADER_SIZE, decompress_limit, pos)
                body = <const uint8_t *>PyBytes_AS_STRING(block)
                bend = body + PyBytes_GET_SIZE(block)
                rc = decode_run(&c, body, bend, count, bo, bts, mts,
                                (attrs & ATTR_TIMESTAMP_TYPE) != 0, &bad_at, &rec_rc)
                if rc != E_OK:
                    bad_at = pos
            if rc == E_NOMEM:
                raise MemoryError()
            if rc == E_OVERFLOW:
                raise ValueError("more than 2 GiB of keys, values or headers in one Arrow batch; "
                                 "decode fewer batches at a time")
            if rc == E_UTF8:
                raise CorruptRecordError(f"record batch at byte {pos}: header key is not UTF-8 "
                                         f"(near byte {bad_at})", bad_at)
            if rc != E_OK:
                raise CorruptRecordError(f"record batch at byte {pos}: record "
                                         f"{record_error(rec_rc)} at byte {bad_at}", bad_at)
            pos += size
        # hand the buffers to pyarrow
        pa = _pa
        rows = c.rows
        offsets = pa.Array.from_buffers(pa.int64(), rows, [None, _take(&c.offsets)])
        timestamps = pa.Array.from_buffers(pa.timestamp("ms"), rows, [None, _take(&c.timestamps)])
        keys = _bin_array(pa.binary(), &c.key)
        values = _bin_array(pa.binary(), &c.value)
        hkeys = _bin_array(pa.string(), &c.hkey)
        hvalues = _bin_array(pa.binary(), &c.hvalue)
        struct_type = _HEADER_TYPE.value_type
        structs = pa.StructArray.from_arrays([hkeys, hvalues], fields=list(struct_type))
        headers = pa.Array.from_buffers(_HEADER_TYPE, rows, [None, _take(&c.header_offsets)],
                                        children=[structs])
        return pa.RecordBatch.from_arrays([offsets, timestamps, keys, values, headers],
                                          schema=_SCHEMA)
    finally:
        PyBuffer_Release(&view)
        cols_free(&c)

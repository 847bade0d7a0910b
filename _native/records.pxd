# cython: language_level=3
"""RecordBatch v2 at the C level, for the other native modules (segment, arrow).

Batch header, big-endian, 61 bytes (Kafka's DefaultRecordBatch):

    0  baseOffset            int64
    8  batchLength           int32   bytes after this field (total size = 12 + batchLength)
   12  partitionLeaderEpoch  int32
   16  magic                 int8    = 2
   17  crc                   uint32  CRC-32C of bytes [21, 12 + batchLength)
   21  attributes            int16   bits 0-2 codec, 3 timestamp type, 4 transactional,
                                     5 control, 6 delete horizon
   23  lastOffsetDelta       int32
   27  baseTimestamp         int64
   35  maxTimestamp          int64
   43  producerId            int64
   51  producerEpoch         int16
   53  baseSequence          int32
   57  recordCount           int32
   61  records ...           (one compressed block when the codec is not 0)

Record (inside the records block):

    length varint | attributes int8 | timestampDelta varlong | offsetDelta varint |
    keyLength varint (-1 = null) | key | valueLength varint (-1 = null) | value |
    headerCount varint | headers (keyLength varint, key utf-8, valueLength varint, value)

baseOffset and partitionLeaderEpoch lie before the CRC'd range: the broker rewrites them
in place without recomputing the CRC.
"""
from libc.stdint cimport uint8_t, int8_t, int16_t, int32_t, int64_t, uint32_t

from broker._native.buffer cimport kb_read_varint, kb_read_varlong
from broker._native.codecs cimport CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD

cdef enum:
    HEADER_SIZE = 61
    LOG_OVERHEAD = 12          # baseOffset + batchLength
    OFF_BASE_OFFSET = 0
    OFF_BATCH_LENGTH = 8
    OFF_PARTITION_LEADER_EPOCH = 12
    OFF_MAGIC = 16
    OFF_CRC = 17
    OFF_ATTRIBUTES = 21
    OFF_LAST_OFFSET_DELTA = 23
    OFF_BASE_TIMESTAMP = 27
    OFF_MAX_TIMESTAMP = 35
    OFF_PRODUCER_ID = 43
    OFF_PRODUCER_EPOCH = 51
    OFF_BASE_SEQUENCE = 53
    OFF_RECORD_COUNT = 57

    ATTR_COMPRESSION_MASK = 0x07
    ATTR_TIMESTAMP_TYPE = 0x08
    ATTR_TRANSACTIONAL = 0x10
    ATTR_CONTROL = 0x20
    ATTR_DELETE_HORIZON = 0x40

# batch_check results
cdef enum:
    CHECK_OK = 0
    CHECK_PARTIAL = 1          # the buffer ends inside this batch (a torn tail)
    CHECK_BAD_LENGTH = 2       # batchLength smaller than a header
    CHECK_BAD_MAGIC = 3
    CHECK_BAD_CRC = 4
    CHECK_BAD_COUNT = 5        # negative recordCount or lastOffsetDelta

# parse_record results
cdef enum:
    REC_OK = 0
    REC_TRUNCATED = 1          # a varint or field runs past the record / buffer
    REC_BAD_VARINT = 2         # a varint longer than its type allows
    REC_BAD_LENGTH = 3         # negative length (other than -1 for null) or inconsistent sizes


cdef struct RecordView:
    int32_t size               # bytes of the record after its length varint
    int8_t attributes
    int64_t timestamp_delta
    int32_t offset_delta
    const uint8_t *key         # NULL when key_len == -1
    int32_t key_len
    const uint8_t *value       # NULL when value_len == -1
    int32_t value_len
    int32_t header_count
    const uint8_t *headers     # start of the first header
    const uint8_t *end         # first byte after this record


cdef struct HeaderView:
    const uint8_t *key
    int32_t key_len
    const uint8_t *value       # NULL when value_len == -1
    int32_t value_len


cdef int batch_check(const uint8_t *p, Py_ssize_t avail, bint check_crc,
                     Py_ssize_t *size) noexcept nogil


cdef inline int read_len_field(const uint8_t **pp, const uint8_t *end,
                               const uint8_t **data, int32_t *length) noexcept nogil:
    """A varint length (-1 = null) then that many bytes, all before `end`."""
    cdef int n = kb_read_varint(pp[0], end, length)
    if n == 0:
        return REC_TRUNCATED
    if n < 0:
        return REC_BAD_VARINT
    pp[0] += n
    if length[0] == -1:
        data[0] = NULL
        return REC_OK
    if length[0] < 0:
        return REC_BAD_LENGTH
    if length[0] > end - pp[0]:
        return REC_TRUNCATED
    data[0] = pp[0]
    pp[0] += length[0]
    return REC_OK


cdef inline int parse_record(const uint8_t *p, const uint8_t *end, RecordView *r) noexcept nogil:
    """Parses the record at p (never reading at or past `end`). Headers are left
    unparsed: r.headers points at the first one and parse_header walks them."""
    cdef int n
    cdef int rc
    cdef int32_t length
    n = kb_read_varint(p, end, &length)
    if n == 0:
        return REC_TRUNCATED
    if n < 0:
        return REC_BAD_VARINT
    p += n
    if length < 0:
        return REC_BAD_LENGTH
    if length > end - p:
        return REC_TRUNCATED
    r.size = length
    end = p + length
    r.end = end
    if p >= end:
        return REC_TRUNCATED
    r.attributes = <int8_t>p[0]
    p += 1
    n = kb_read_varlong(p, end, &r.timestamp_delta)
    if n <= 0:
        return REC_TRUNCATED if n == 0 else REC_BAD_VARINT
    p += n
    n = kb_read_varint(p, end, &r.offset_delta)
    if n <= 0:
        return REC_TRUNCATED if n == 0 else REC_BAD_VARINT
    p += n
    rc = read_len_field(&p, end, &r.key, &r.key_len)
    if rc != REC_OK:
        return rc
    rc = read_len_field(&p, end, &r.value, &r.value_len)
    if rc != REC_OK:
        return rc
    n = kb_read_varint(p, end, &r.header_count)
    if n <= 0:
        return REC_TRUNCATED if n == 0 else REC_BAD_VARINT
    p += n
    if r.header_count < 0:
        return REC_BAD_LENGTH
    # each header needs at least two bytes: this bounds the count before any allocation
    if r.header_count > (end - p) // 2:
        return REC_TRUNCATED
    r.headers = p
    return REC_OK


cdef inline int parse_header(const uint8_t **pp, const uint8_t *end, HeaderView *h) noexcept nogil:
    cdef int rc = read_len_field(pp, end, &h.key, &h.key_len)
    if rc != REC_OK:
        return rc
    if h.key == NULL:
        return REC_BAD_LENGTH          # header keys are never null
    return read_len_field(pp, end, &h.value, &h.value_len)


cdef inline int skip_headers(const RecordView *r) noexcept nogil:
    """Walks the headers and checks the record ends exactly where its length says."""
    cdef const uint8_t *p = r.headers
    cdef HeaderView h
    cdef int rc
    cdef int32_t _i
    for _i in range(r.header_count):
        rc = parse_header(&p, r.end, &h)
        if rc != REC_OK:
            return rc
    if p != r.end:
        return REC_BAD_LENGTH
    return REC_OK


cdef object decompress(int codec, const uint8_t *data, Py_ssize_t length, Py_ssize_t limit,
                       Py_ssize_t position)
cdef str record_error(int rc)

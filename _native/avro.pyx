# cython: language_level=3
"""Registry-framed Avro (and Protobuf, JSON) -> Arrow columns, decoded in C (the Spark
source's valueFormat=avro / protobuf / json-schema); and Arrow columns -> framed Avro (the
sink's, `encode`).

Protobuf programs (broker.spark.protobuf) use the same columns with ops of their own: a
message op lists its fields (number, op, flags) and the decoder finds each field of the
record by number, skips unknown ones by wire type, makes absent ones null and closes the
lists of repeated ones (packed or not); Confluent's message indexes are skipped. JSON
programs parse the text after the id (strings unescaped into the column, numbers by
type, unknown properties skipped, absent ones null).

Input: a binary Arrow column (the Kafka values or keys batches_to_arrow gave), each value
Confluent's framing: a 0 byte, the writer schema's id (4 bytes, big-endian), the Avro
binary encoding of one datum. Output: the buffers of the reader schema's Arrow columns.

Nothing here knows Avro's JSON schemas. broker.spark.avro parses them (fastavro), once
per schema, and compiles each writer schema, resolved against the reader schema as the
Avro specification's schema resolution says, into a *program*: a flat array of ops
(six int32 each: code, column, a, b, c, d), an int32 array of op and constant indices
(`kids`) and a byte blob of constants (enum symbols, encoded defaults). The reader schema
becomes a *layout*: one entry per Arrow column (kind, first child, child count). The
decoder walks the program per record, appending to the columns; no Python object is
created per record.

A record that does not decode (no magic byte, an id without a program, truncated or
malformed bytes, a string that is not UTF-8, an enum symbol or union branch the reader
schema cannot take) is, in PERMISSIVE mode, a null row (every column rolled back to its
state before the record), and in FAILFAST mode the end of the call: the row index and
the reason come back to the caller, who raises.
"""
cimport cython
from libc.stdint cimport uint8_t, int32_t, int64_t, uint32_t, uint64_t, INT64_MAX
from libc.string cimport memcpy, memset, memcmp, memmove
from libc.stdlib cimport free, calloc
from libc.stdio cimport snprintf

from broker._native.buffer cimport kb_export_bytes, kb_load_be32

cdef extern from "stdlib.h" nogil:
    int posix_memalign(void **memptr, size_t alignment, size_t size)

cdef extern from "kb_utf8.h" nogil:
    int kb_utf8_valid(const uint8_t *s, size_t n)

cdef extern from *:
    """
    /* whether a little-endian int128 has at most `precision` decimal digits */
    static inline int kb_dec_fits(const unsigned char *le, int precision) {
        __int128 v = 0;
        for (int i = 15; i >= 0; i--) v = (v << 8) | le[i];
        unsigned __int128 m = v < 0 ? -(unsigned __int128)v : (unsigned __int128)v;
        unsigned __int128 limit = 1;
        for (int i = 0; i < precision; i++) limit *= 10;
        return m < limit;
    }
    """
    int kb_dec_fits(const uint8_t *le, int precision) nogil


# ---------------------------------------------------------------- constants (shared with broker/spark/avro.py)

# column kinds
cpdef enum:
    K_BOOL = 0
    K_I32 = 1
    K_I64 = 2
    K_F32 = 3
    K_F64 = 4
    K_BIN = 5
    K_DEC = 6
    K_STRUCT = 7
    K_LIST = 8
    K_MAP = 9

# op codes
cpdef enum:
    OP_SKIP_NULL = 0
    OP_SKIP_BOOL = 1
    OP_SKIP_VARINT = 2
    OP_SKIP_FIXED = 3
    OP_SKIP_BYTES = 4
    OP_SKIP_RECORD = 5
    OP_SKIP_ARRAY = 6
    OP_SKIP_MAP = 7
    OP_SKIP_UNION = 8
    OP_NULL = 9
    OP_BOOL = 10
    OP_INT_I32 = 11
    OP_INT_I64 = 12
    OP_LONG_I64 = 13
    OP_LONG_MS_US = 14
    OP_INT_F32 = 15
    OP_INT_F64 = 16
    OP_LONG_F32 = 17
    OP_LONG_F64 = 18
    OP_FLOAT_F32 = 19
    OP_FLOAT_F64 = 20
    OP_DOUBLE_F64 = 21
    OP_BYTES_BIN = 22
    OP_FIXED_BIN = 23
    OP_ENUM = 24
    OP_DEC_BYTES = 25
    OP_DEC_FIXED = 26
    OP_RECORD = 27
    OP_ARRAY = 28
    OP_MAP = 29
    OP_UNION = 30
    OP_ERROR = 31
    OP_DEFAULT = 32
    # Protobuf (valueFormat=protobuf): a message, and the values of its fields by wire type
    OP_PB_MSG = 33          # a: kids start of (field number, op, flags) per field, b: count
    OP_PB_VARINT_I32 = 34   # int32, uint32 (two's complement truncated to 32 bits)
    OP_PB_VARINT_I64 = 35   # int64, uint64
    OP_PB_ZIGZAG_I32 = 36   # sint32
    OP_PB_ZIGZAG_I64 = 37   # sint64
    OP_PB_BOOL = 38
    OP_PB_FIXED32 = 39      # fixed32, sfixed32, float (4 bytes as they are)
    OP_PB_FIXED64 = 40      # fixed64, sfixed64, double
    OP_PB_BYTES = 41        # a: 1 = UTF-8 checked (string)
    OP_PB_ENUM = 42         # a: kids start of (number, blob offset, length), b: count
    OP_PB_SUBMSG = 43       # a: the OP_PB_MSG of the nested message
    OP_PB_TIMESTAMP = 44    # google.protobuf.Timestamp -> microseconds
    OP_PB_MAPENTRY = 45     # a: key op, b: value op (a map field's entry message)
    # JSON (valueFormat=json-schema): values by JSON type; `null` is a null of any of them
    OP_JS_OBJECT = 46       # a: kids start of (name blob offset, length, op) per property, b: count
    OP_JS_STRING = 47
    OP_JS_INT = 48          # an integer literal -> int64
    OP_JS_NUMBER = 49       # any number -> double
    OP_JS_BOOL = 50
    OP_JS_ARRAY = 51        # a: item op
    OP_JS_MAP = 52          # a: value op (an object of any keys)
    OP_LAST = 52

# why a record did not decode (the reason codes the caller turns into words)
cpdef enum:
    R_OK = 0
    R_NOT_FRAMED = 1
    R_UNKNOWN_ID = 2
    R_TRUNCATED = 3
    R_BAD_VARINT = 4
    R_BAD_LENGTH = 5
    R_BAD_UTF8 = 6
    R_BAD_ENUM = 7
    R_BAD_BRANCH = 8
    R_BAD_DECIMAL = 9
    R_OVERFLOW = 10
    R_TOO_DEEP = 11
    R_NOMEM = 12
    R_DUPLICATE = 13
    R_WIRE_TYPE = 14
    R_BAD_JSON = 15

REASONS = {
    R_NOT_FRAMED: "not registry-framed (no magic byte 0 and 4-byte schema id)",
    R_UNKNOWN_ID: "carries a schema id the registry does not know",
    R_TRUNCATED: "ends before the datum does (truncated)",
    R_BAD_VARINT: "has a malformed varint",
    R_BAD_LENGTH: "has a negative or oversized length or count",
    R_BAD_UTF8: "has a string that is not valid UTF-8",
    R_BAD_ENUM: "has an enum symbol the reader schema does not have (and it has no default)",
    R_BAD_BRANCH: "has a union branch the reader schema cannot read",
    R_BAD_DECIMAL: "has a decimal that does not fit its precision",
    R_OVERFLOW: "has a value too large for its column",
    R_TOO_DEEP: "nests deeper than the decoder allows",
    R_NOMEM: "needs more memory than could be allocated",
    R_DUPLICATE: "has a field that is not repeated more than once",
    R_WIRE_TYPE: "has a field of the wrong wire type (or a group)",
    R_BAD_JSON: "is not JSON of the reader schema's types",
}

# flags of a Protobuf message's field
cpdef enum:
    PB_REPEATED = 1
    PB_PACKABLE = 2     # a repeated scalar that may come packed (wire type 2)

cdef enum:
    ALIGN = 64
    INT32_LIMIT = 0x7FFFFFFF
    MAX_DEPTH = 64


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
        return 0
    cap = b.cap * 2 if b.cap else 256
    while cap < need:
        cap *= 2
    if posix_memalign(&p, ALIGN, <size_t>cap) != 0:
        return -1
    if b.length:
        memcpy(p, b.data, b.length)
    memset(<uint8_t *>p + b.length, 0, cap - b.length)
    free(b.data)
    b.data = <uint8_t *>p
    b.cap = cap
    return 0


cdef inline int gb_put(GrowBuf *b, const void *p, Py_ssize_t n) noexcept nogil:
    if b.length + n > b.cap and gb_reserve(b, n) != 0:
        return -1
    memcpy(b.data + b.length, p, n)
    b.length += n
    return 0


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
    cdef _OwnedBuffer o = _OwnedBuffer.__new__(_OwnedBuffer)
    if b.data == NULL and gb_reserve(b, 1) != 0:
        raise MemoryError()
    o.data = b.data
    o.length = b.length
    b.data = NULL
    b.length = 0
    b.cap = 0
    return o


# ---------------------------------------------------------------- columns

cdef struct Col:
    int kind
    int kid0            # first child column (STRUCT: its fields; LIST: the items; MAP: key, value)
    int nkids
    int width           # bytes per value of a fixed-width column
    int precision       # DEC: the decimal's precision (digits)
    GrowBuf validity
    GrowBuf data        # values (fixed width, bit-packed for BOOL) or bytes (BIN)
    GrowBuf offsets     # int32, count + 1 (BIN, LIST, MAP)
    Py_ssize_t count
    Py_ssize_t nulls


cdef struct Mark:
    Py_ssize_t count
    Py_ssize_t nulls
    Py_ssize_t data_len
    Py_ssize_t offsets_len


cdef struct Prog:
    int32_t id
    const int32_t *ops
    Py_ssize_t nops
    const int32_t *kids
    Py_ssize_t nkids
    const uint8_t *blob
    int32_t root
    int fmt             # 0 Avro, 1 Protobuf, 2 JSON


cdef struct Dec:
    Col *cols
    int ncols
    Mark *marks
    const Prog *prog
    int depth


cdef inline int col_valid(Col *c) noexcept nogil:
    """Marks the next slot valid (the value itself is appended by the caller)."""
    cdef Py_ssize_t byte_i = c.count >> 3
    if byte_i >= c.validity.length:
        if gb_reserve(&c.validity, byte_i + 1 - c.validity.length) != 0:
            return R_NOMEM
        c.validity.length = byte_i + 1
    c.validity.data[byte_i] |= <uint8_t>(1 << (c.count & 7))
    c.count += 1
    return 0


cdef inline int col_slot(Col *c) noexcept nogil:
    """Makes room for the next slot's validity bit, left 0 (null)."""
    cdef Py_ssize_t byte_i = c.count >> 3
    if byte_i >= c.validity.length:
        if gb_reserve(&c.validity, byte_i + 1 - c.validity.length) != 0:
            return R_NOMEM
        c.validity.length = byte_i + 1
    return 0


cdef inline int put_bool(Col *c, bint v) noexcept nogil:
    cdef Py_ssize_t byte_i = c.count >> 3
    if byte_i >= c.data.length:
        if gb_reserve(&c.data, byte_i + 1 - c.data.length) != 0:
            return R_NOMEM
        c.data.length = byte_i + 1
    if v:
        c.data.data[byte_i] |= <uint8_t>(1 << (c.count & 7))
    return col_valid(c)


cdef inline int put_fixed(Col *c, const void *v) noexcept nogil:
    cdef Py_ssize_t w = c.width
    if c.data.length + w > c.data.cap and gb_reserve(&c.data, w) != 0:
        return R_NOMEM
    # the widths are 4, 8 and 16: constant-size copies the compiler turns into moves
    if w == 8:
        memcpy(c.data.data + c.data.length, v, 8)
    elif w == 4:
        memcpy(c.data.data + c.data.length, v, 4)
    else:
        memcpy(c.data.data + c.data.length, v, 16)
    c.data.length += w
    return col_valid(c)


cdef inline int put_i32(GrowBuf *b, int32_t v) noexcept nogil:
    if b.length + 4 > b.cap and gb_reserve(b, 4) != 0:
        return -1
    memcpy(b.data + b.length, &v, 4)
    b.length += 4
    return 0


cdef inline int put_bin(Col *c, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    cdef int32_t end
    if c.data.length + n > INT32_LIMIT:
        return R_OVERFLOW
    if n and gb_put(&c.data, p, n) != 0:
        return R_NOMEM
    end = <int32_t>c.data.length
    if put_i32(&c.offsets, end) != 0:
        return R_NOMEM
    return col_valid(c)


cdef int put_null(Dec *d, int ci) noexcept nogil:
    """Appends a null to column ci (and a placeholder to a struct's children)."""
    cdef Col *c = &d.cols[ci]
    cdef int32_t end
    cdef int k, rc
    cdef uint8_t zero[16]
    rc = col_slot(c)
    if rc:
        return rc
    if c.kind == K_BOOL:
        if (c.count >> 3) >= c.data.length:
            if gb_reserve(&c.data, (c.count >> 3) + 1 - c.data.length) != 0:
                return R_NOMEM
            c.data.length = (c.count >> 3) + 1
    elif c.kind == K_BIN or c.kind == K_LIST or c.kind == K_MAP:
        end = <int32_t>(c.data.length if c.kind == K_BIN else 0)
        if c.kind != K_BIN:
            # the end offset of the previous slot (a null list has no items)
            memcpy(&end, c.offsets.data + c.offsets.length - 4, 4)
        if gb_put(&c.offsets, &end, 4) != 0:
            return R_NOMEM
    elif c.kind == K_STRUCT:
        for k in range(c.nkids):
            rc = put_null(d, c.kid0 + k)
            if rc:
                return rc
    else:
        memset(zero, 0, 16)
        if gb_put(&c.data, zero, c.width) != 0:
            return R_NOMEM
    c.count += 1
    c.nulls += 1
    return 0


cdef void mark_all(Dec *d) noexcept nogil:
    cdef int i
    cdef Col *c
    for i in range(d.ncols):
        c = &d.cols[i]
        d.marks[i].count = c.count
        d.marks[i].nulls = c.nulls
        d.marks[i].data_len = c.data.length
        d.marks[i].offsets_len = c.offsets.length


cdef void rollback(Dec *d) noexcept nogil:
    """Every column back to its state at the last mark_all (a record that failed)."""
    cdef int i
    cdef Col *c
    cdef Py_ssize_t k
    for i in range(d.ncols):
        c = &d.cols[i]
        for k in range(d.marks[i].count, c.count):
            c.validity.data[k >> 3] &= <uint8_t>~(1 << (k & 7))
            if c.kind == K_BOOL:
                c.data.data[k >> 3] &= <uint8_t>~(1 << (k & 7))
        c.count = d.marks[i].count
        c.nulls = d.marks[i].nulls
        if c.kind != K_BOOL:
            c.data.length = d.marks[i].data_len
        c.offsets.length = d.marks[i].offsets_len


# ---------------------------------------------------------------- Avro primitives

cdef inline int rd_uvarint(const uint8_t **pp, const uint8_t *end, uint64_t *out) noexcept nogil:
    cdef const uint8_t *p = pp[0]
    cdef uint64_t v = 0
    cdef int shift = 0
    cdef uint8_t b
    while True:
        if p >= end:
            return R_TRUNCATED
        b = p[0]
        p += 1
        if shift == 63 and (b & 0x7E):
            return R_BAD_VARINT
        v |= (<uint64_t>(b & 0x7F)) << shift
        if not (b & 0x80):
            break
        shift += 7
        if shift > 63:
            return R_BAD_VARINT
    pp[0] = p
    out[0] = v
    return 0


cdef inline int rd_long(const uint8_t **pp, const uint8_t *end, int64_t *out) noexcept nogil:
    """Avro's long: a zigzag varint (Protobuf's plain varints are rd_uvarint)."""
    cdef uint64_t v
    cdef int rc = rd_uvarint(pp, end, &v)
    if rc:
        return rc
    out[0] = <int64_t>((v >> 1) ^ (0 - (v & 1)))
    return 0


cdef inline int rd_int(const uint8_t **pp, const uint8_t *end, int64_t *out) noexcept nogil:
    cdef int rc = rd_long(pp, end, out)
    if rc:
        return rc
    if out[0] < -2147483648 or out[0] > 2147483647:
        return R_BAD_VARINT
    return 0


cdef inline int rd_len(const uint8_t **pp, const uint8_t *end, Py_ssize_t *n) noexcept nogil:
    cdef int64_t v
    cdef int rc = rd_long(pp, end, &v)
    if rc:
        return rc
    if v < 0:
        return R_BAD_LENGTH
    if v > end - pp[0]:
        return R_TRUNCATED
    n[0] = <Py_ssize_t>v
    return 0


cdef inline int rd_block(const uint8_t **pp, const uint8_t *end, int64_t *count) noexcept nogil:
    """An array or map block's item count (a negative count is followed by the block's
    size in bytes, read and ignored). A count above the bytes left is refused: every
    item the compiler lets through takes at least one byte."""
    cdef int64_t size
    cdef int rc = rd_long(pp, end, count)
    if rc:
        return rc
    if count[0] < 0:
        if count[0] < -INT64_MAX:
            return R_BAD_LENGTH
        count[0] = -count[0]
        rc = rd_long(pp, end, &size)
        if rc:
            return rc
        if size < 0:
            return R_BAD_LENGTH
    if count[0] > end - pp[0]:
        return R_BAD_LENGTH
    return 0


cdef inline int put_decimal(Col *c, const uint8_t *p, Py_ssize_t n) noexcept nogil:
    """A big-endian two's complement integer of n bytes -> a little-endian int128."""
    cdef uint8_t out[16]
    cdef uint8_t fill
    cdef Py_ssize_t i
    if n == 0:
        memset(out, 0, 16)
        return put_fixed(c, out)
    fill = 0xFF if p[0] & 0x80 else 0
    if n > 16:
        # only sign extension may go beyond 16 bytes
        for i in range(n - 16):
            if p[i] != fill:
                return R_BAD_DECIMAL
        if (p[n - 16] & 0x80) != (fill & 0x80):
            return R_BAD_DECIMAL
        p += n - 16
        n = 16
    memset(out, fill, 16)
    for i in range(n):
        out[i] = p[n - 1 - i]
    if not kb_dec_fits(out, c.precision):
        return R_BAD_DECIMAL
    return put_fixed(c, out)


# ---------------------------------------------------------------- the interpreter

cdef int run(Dec *d, int32_t opi, const uint8_t **pp, const uint8_t *end) noexcept nogil:
    cdef const int32_t *op = d.prog.ops + 6 * opi
    cdef int code = op[0]
    cdef Col *c = &d.cols[op[1]] if op[1] >= 0 else NULL
    cdef int rc = 0
    cdef int64_t v, count, _i
    cdef Py_ssize_t n
    cdef int32_t i32, end32
    cdef float f32
    cdef double f64
    cdef const uint8_t *p
    cdef const uint8_t *q
    cdef const int32_t *kids
    d.depth += 1
    if d.depth > MAX_DEPTH:
        return R_TOO_DEEP
    if code == OP_SKIP_NULL or code == OP_NULL:
        if code == OP_NULL:
            rc = put_null(d, op[1])
    elif code == OP_SKIP_BOOL or code == OP_BOOL:
        if pp[0] >= end:
            rc = R_TRUNCATED
        elif pp[0][0] > 1:
            rc = R_BAD_VARINT
        else:
            if code == OP_BOOL:
                rc = put_bool(c, pp[0][0])
            pp[0] += 1
    elif code == OP_SKIP_VARINT:
        rc = rd_long(pp, end, &v)
    elif code == OP_SKIP_FIXED:
        if end - pp[0] < op[2]:
            rc = R_TRUNCATED
        else:
            pp[0] += op[2]
    elif code == OP_SKIP_BYTES:
        rc = rd_len(pp, end, &n)
        if not rc:
            pp[0] += n
    elif code == OP_SKIP_RECORD or code == OP_RECORD:
        kids = d.prog.kids + op[2]
        for i in range(op[3]):
            rc = run(d, kids[i], pp, end)
            if rc:
                break
        if not rc and code == OP_RECORD:
            rc = col_valid(c)
    elif code == OP_SKIP_ARRAY or code == OP_ARRAY or code == OP_SKIP_MAP or code == OP_MAP:
        n = 0
        while True:
            rc = rd_block(pp, end, &count)
            if rc or count == 0:
                break
            for _i in range(count):
                if code == OP_SKIP_MAP or code == OP_MAP:
                    rc = rd_len(pp, end, &n)
                    if rc:
                        break
                    if code == OP_MAP:
                        if not kb_utf8_valid(pp[0], n):
                            rc = R_BAD_UTF8
                            break
                        rc = put_bin(&d.cols[c.kid0], pp[0], n)
                        if rc:
                            break
                    pp[0] += n
                rc = run(d, op[2], pp, end)
                if rc:
                    break
            if rc:
                break
            if code == OP_ARRAY or code == OP_MAP:
                if d.cols[c.kid0 + (1 if code == OP_MAP else 0)].count > INT32_LIMIT:
                    rc = R_OVERFLOW
                    break
        if not rc and (code == OP_ARRAY or code == OP_MAP):
            end32 = <int32_t>d.cols[c.kid0 + (1 if code == OP_MAP else 0)].count
            if gb_put(&c.offsets, &end32, 4) != 0:
                rc = R_NOMEM
            else:
                rc = col_valid(c)
    elif code == OP_SKIP_UNION or code == OP_UNION:
        rc = rd_long(pp, end, &v)
        if not rc:
            if v < 0 or v >= op[3]:
                rc = R_BAD_BRANCH
            else:
                rc = run(d, d.prog.kids[op[2] + v], pp, end)
    elif code == OP_INT_I32:
        rc = rd_int(pp, end, &v)
        if not rc:
            i32 = <int32_t>v
            rc = put_fixed(c, &i32)
    elif code == OP_INT_I64 or code == OP_LONG_I64:
        rc = rd_int(pp, end, &v) if code == OP_INT_I64 else rd_long(pp, end, &v)
        if not rc:
            rc = put_fixed(c, &v)
    elif code == OP_LONG_MS_US:
        rc = rd_long(pp, end, &v)
        if not rc:
            if v > INT64_MAX // 1000 or v < -(INT64_MAX // 1000):
                rc = R_OVERFLOW
            else:
                v *= 1000
                rc = put_fixed(c, &v)
    elif code == OP_INT_F32 or code == OP_LONG_F32:
        rc = rd_int(pp, end, &v) if code == OP_INT_F32 else rd_long(pp, end, &v)
        if not rc:
            f32 = <float>v
            rc = put_fixed(c, &f32)
    elif code == OP_INT_F64 or code == OP_LONG_F64:
        rc = rd_int(pp, end, &v) if code == OP_INT_F64 else rd_long(pp, end, &v)
        if not rc:
            f64 = <double>v
            rc = put_fixed(c, &f64)
    elif code == OP_FLOAT_F32 or code == OP_FLOAT_F64:
        if end - pp[0] < 4:
            rc = R_TRUNCATED
        else:
            memcpy(&f32, pp[0], 4)      # Avro floats are little-endian, as this machine
            pp[0] += 4
            if code == OP_FLOAT_F32:
                rc = put_fixed(c, &f32)
            else:
                f64 = f32
                rc = put_fixed(c, &f64)
    elif code == OP_DOUBLE_F64:
        if end - pp[0] < 8:
            rc = R_TRUNCATED
        else:
            rc = put_fixed(c, pp[0])
            pp[0] += 8
    elif code == OP_BYTES_BIN or code == OP_DEC_BYTES:
        rc = rd_len(pp, end, &n)
        if not rc:
            if code == OP_DEC_BYTES:
                rc = put_decimal(c, pp[0], n)
            elif op[2] and not kb_utf8_valid(pp[0], n):
                rc = R_BAD_UTF8
            else:
                rc = put_bin(c, pp[0], n)
            pp[0] += n
    elif code == OP_FIXED_BIN or code == OP_DEC_FIXED:
        if end - pp[0] < op[2]:
            rc = R_TRUNCATED
        else:
            rc = put_decimal(c, pp[0], op[2]) if code == OP_DEC_FIXED else put_bin(c, pp[0], op[2])
            pp[0] += op[2]
    elif code == OP_ENUM:
        rc = rd_int(pp, end, &v)
        if not rc:
            if v < 0 or v >= op[3]:
                rc = R_BAD_ENUM
            else:
                kids = d.prog.kids + op[2]
                if kids[2 * v] < 0:
                    rc = R_BAD_ENUM
                else:
                    rc = put_bin(c, d.prog.blob + kids[2 * v], kids[2 * v + 1])
    elif code == OP_DEFAULT:
        p = d.prog.blob + op[3]
        q = p + op[4]
        rc = run(d, op[2], &p, q)
    else:   # OP_ERROR
        rc = op[2]
    d.depth -= 1
    return rc


# ---------------------------------------------------------------- Protobuf

cdef inline int pb_skip(const uint8_t **pp, const uint8_t *end, int wt) noexcept nogil:
    cdef int64_t v
    cdef Py_ssize_t n
    if wt == 0:
        return rd_uvarint(pp, end, <uint64_t *>&v)
    if wt == 1:
        if end - pp[0] < 8:
            return R_TRUNCATED
        pp[0] += 8
        return 0
    if wt == 2:
        if rd_plen(pp, end, &n):
            return R_BAD_LENGTH
        pp[0] += n
        return 0
    if wt == 5:
        if end - pp[0] < 4:
            return R_TRUNCATED
        pp[0] += 4
        return 0
    return R_WIRE_TYPE


cdef inline int rd_plen(const uint8_t **pp, const uint8_t *end, Py_ssize_t *n) noexcept nogil:
    cdef uint64_t v
    cdef int rc = rd_uvarint(pp, end, &v)
    if rc:
        return rc
    if v > <uint64_t>(end - pp[0]):
        return R_TRUNCATED
    n[0] = <Py_ssize_t>v
    return 0


cdef int pb_value(Dec *d, int32_t opi, const uint8_t **pp, const uint8_t *end, int wt) noexcept nogil:
    """One value of a field (wire type wt, checked here) into the op's column."""
    cdef const int32_t *op = d.prog.ops + 6 * opi
    cdef int code = op[0]
    cdef Col *c = &d.cols[op[1]]
    cdef uint64_t u
    cdef int64_t v
    cdef int32_t i32
    cdef Py_ssize_t n, j
    cdef const uint8_t *q
    cdef const int32_t *kids
    cdef int rc
    cdef int64_t secs = 0, nanos = 0
    cdef uint64_t tag
    if code == OP_PB_VARINT_I32 or code == OP_PB_VARINT_I64 or code == OP_PB_ZIGZAG_I32 \
            or code == OP_PB_ZIGZAG_I64 or code == OP_PB_BOOL or code == OP_PB_ENUM:
        if wt != 0:
            return R_WIRE_TYPE
        rc = rd_uvarint(pp, end, &u)
        if rc:
            return rc
        if code == OP_PB_ZIGZAG_I32 or code == OP_PB_ZIGZAG_I64:
            v = <int64_t>((u >> 1) ^ (0 - (u & 1)))
        else:
            v = <int64_t>u
        if code == OP_PB_VARINT_I32 or code == OP_PB_ZIGZAG_I32:
            i32 = <int32_t>v
            return put_fixed(c, &i32)
        if code == OP_PB_BOOL:
            return put_bool(c, u != 0)
        if code == OP_PB_ENUM:
            kids = d.prog.kids + op[2]
            for j in range(op[3]):
                if kids[3 * j] == <int32_t>v:
                    return put_bin(c, d.prog.blob + kids[3 * j + 1], kids[3 * j + 2])
            return put_null(d, op[1])      # a number the reader's enum does not name
        return put_fixed(c, &v)
    if code == OP_PB_FIXED32:
        if wt != 5:
            return R_WIRE_TYPE
        if end - pp[0] < 4:
            return R_TRUNCATED
        rc = put_fixed(c, pp[0])
        pp[0] += 4
        return rc
    if code == OP_PB_FIXED64:
        if wt != 1:
            return R_WIRE_TYPE
        if end - pp[0] < 8:
            return R_TRUNCATED
        rc = put_fixed(c, pp[0])
        pp[0] += 8
        return rc
    if wt != 2:
        return R_WIRE_TYPE
    rc = rd_plen(pp, end, &n)
    if rc:
        return rc
    q = pp[0]
    pp[0] += n
    if code == OP_PB_BYTES:
        if op[2] and not kb_utf8_valid(q, n):
            return R_BAD_UTF8
        return put_bin(c, q, n)
    if code == OP_PB_SUBMSG:
        return pb_message(d, op[2], &q, q + n)
    if code == OP_PB_TIMESTAMP:
        while q < pp[0]:
            rc = rd_uvarint(&q, pp[0], &tag)
            if rc:
                return rc
            if tag == 8 or tag == 16:
                rc = rd_uvarint(&q, pp[0], &u)
                if rc:
                    return rc
                if tag == 8:
                    secs = <int64_t>u
                else:
                    nanos = <int32_t>u
            else:
                rc = pb_skip(&q, pp[0], tag & 7)
                if rc:
                    return rc
        if secs > INT64_MAX // 1000000 - 1 or secs < -(INT64_MAX // 1000000 - 1):
            return R_OVERFLOW
        v = secs * 1000000 + nanos // 1000
        return put_fixed(c, &v)
    # OP_PB_MAPENTRY: key (field 1) and value (field 2), each defaulted when absent
    return pb_entry(d, op, &q, q + n)


cdef int pb_entry(Dec *d, const int32_t *op, const uint8_t **pp, const uint8_t *end) noexcept nogil:
    cdef Col *c = &d.cols[op[1]]
    cdef uint64_t tag
    cdef int rc, fn
    cdef bint have_key = False, have_value = False
    cdef uint8_t empty = 0
    while pp[0] < end:
        rc = rd_uvarint(pp, end, &tag)
        if rc:
            return rc
        fn = <int>(tag >> 3)
        if fn == 1 and not have_key:
            if (tag & 7) != 2:
                return R_WIRE_TYPE
            rc = pb_value(d, op[2], pp, end, 2)
            have_key = True
        elif fn == 2 and not have_value:
            rc = pb_value(d, op[3], pp, end, tag & 7)
            have_value = True
        elif fn == 1 or fn == 2:
            return R_DUPLICATE
        else:
            rc = pb_skip(pp, end, tag & 7)
        if rc:
            return rc
    if not have_key:
        rc = put_bin(&d.cols[c.kid0], &empty, 0)
        if rc:
            return rc
    if not have_value:
        rc = put_null(d, c.kid0 + 1)
        if rc:
            return rc
    return 0


cdef int pb_message(Dec *d, int32_t opi, const uint8_t **pp, const uint8_t *end) noexcept nogil:
    """A message's fields into its struct column's children; absent ones null, repeated
    ones a list of what came (packed or not)."""
    cdef const int32_t *op = d.prog.ops + 6 * opi
    cdef const int32_t *kids = d.prog.kids + op[2]
    cdef int nf = op[3], k, rc, wt, found
    cdef uint64_t seen = 0, tag
    cdef Col *c = &d.cols[op[1]]
    cdef Col *lc
    cdef const int32_t *vop
    cdef const uint8_t *q
    cdef const uint8_t *qend
    cdef Py_ssize_t n
    cdef int32_t end32
    d.depth += 1
    if d.depth > MAX_DEPTH:
        return R_TOO_DEEP
    while pp[0] < end:
        rc = rd_uvarint(pp, end, &tag)
        if rc:
            return rc
        wt = <int>(tag & 7)
        found = -1
        for k in range(nf):
            if <uint64_t>kids[3 * k] == (tag >> 3):
                found = k
                break
        if found < 0:
            rc = pb_skip(pp, end, wt)
            if rc:
                return rc
            continue
        if kids[3 * found + 2] & PB_REPEATED:
            lc = &d.cols[c.kid0 + found]
            vop = d.prog.ops + 6 * kids[3 * found + 1]
            if wt == 2 and kids[3 * found + 2] & PB_PACKABLE:
                rc = rd_plen(pp, end, &n)
                if rc:
                    return rc
                q = pp[0]
                qend = q + n
                pp[0] = qend
                wt = 5 if vop[0] == OP_PB_FIXED32 else (1 if vop[0] == OP_PB_FIXED64 else 0)
                while q < qend:
                    rc = pb_value(d, kids[3 * found + 1], &q, qend, wt)
                    if rc:
                        return rc
            else:
                rc = pb_value(d, kids[3 * found + 1], pp, end, wt)
                if rc:
                    return rc
            if d.cols[lc.kid0].count > INT32_LIMIT:
                return R_OVERFLOW
            seen |= (<uint64_t>1) << found
            continue
        if seen & ((<uint64_t>1) << found):
            return R_DUPLICATE
        seen |= (<uint64_t>1) << found
        rc = pb_value(d, kids[3 * found + 1], pp, end, wt)
        if rc:
            return rc
    for k in range(nf):
        if kids[3 * k + 2] & PB_REPEATED:
            lc = &d.cols[c.kid0 + k]
            end32 = <int32_t>d.cols[lc.kid0 + (1 if lc.kind == K_MAP else 0)].count
            if gb_put(&lc.offsets, &end32, 4) != 0:
                return R_NOMEM
            rc = col_valid(lc)
        elif not seen & ((<uint64_t>1) << k):
            rc = put_null(d, c.kid0 + k)
        else:
            rc = 0
        if rc:
            return rc
    d.depth -= 1
    return col_valid(c)


# ---------------------------------------------------------------- JSON

cdef extern from "stdlib.h" nogil:
    double strtod(const char *s, char **end)


cdef inline void js_ws(const uint8_t **pp, const uint8_t *end) noexcept nogil:
    while pp[0] < end and (pp[0][0] == 32 or pp[0][0] == 9 or pp[0][0] == 10 or pp[0][0] == 13):
        pp[0] += 1


cdef inline int js_lit(const uint8_t **pp, const uint8_t *end, const char *word, int n) noexcept nogil:
    cdef int i
    if end - pp[0] < n:
        return R_BAD_JSON
    for i in range(n):
        if pp[0][i] != <uint8_t>word[i]:
            return R_BAD_JSON
    pp[0] += n
    return 0


cdef inline int hexval(uint8_t c) noexcept nogil:
    if 48 <= c <= 57:
        return c - 48
    if 97 <= c <= 102:
        return c - 87
    if 65 <= c <= 70:
        return c - 55
    return -1


cdef int js_string(const uint8_t **pp, const uint8_t *end, GrowBuf *out) noexcept nogil:
    """A JSON string at pp (after its opening quote is checked here) -> UTF-8 in out
    (out NULL: skipped). Escapes decoded; raw bytes must be valid UTF-8."""
    cdef const uint8_t *p = pp[0]
    cdef const uint8_t *run
    cdef uint32_t cp, lo
    cdef int k, h
    cdef uint8_t enc[4]
    cdef int n
    if p >= end or p[0] != 34:
        return R_BAD_JSON
    p += 1
    run = p
    while True:
        if p >= end:
            return R_TRUNCATED
        if p[0] == 34 or p[0] == 92:
            if p > run:
                if not kb_utf8_valid(run, p - run):
                    return R_BAD_UTF8
                if out != NULL and gb_put(out, run, p - run) != 0:
                    return R_NOMEM
            if p[0] == 34:
                pp[0] = p + 1
                return 0
            p += 1
            if p >= end:
                return R_TRUNCATED
            n = 1
            if p[0] == 110:
                enc[0] = 10
            elif p[0] == 116:
                enc[0] = 9
            elif p[0] == 114:
                enc[0] = 13
            elif p[0] == 98:
                enc[0] = 8
            elif p[0] == 102:
                enc[0] = 12
            elif p[0] == 34 or p[0] == 92 or p[0] == 47:
                enc[0] = p[0]
            elif p[0] == 117:
                if end - p < 5:
                    return R_TRUNCATED
                cp = 0
                for k in range(1, 5):
                    h = hexval(p[k])
                    if h < 0:
                        return R_BAD_JSON
                    cp = (cp << 4) | <uint32_t>h
                p += 4
                if 0xD800 <= cp <= 0xDBFF:
                    if end - p < 7 or p[1] != 92 or p[2] != 117:
                        return R_BAD_JSON
                    lo = 0
                    for k in range(3, 7):
                        h = hexval(p[k])
                        if h < 0:
                            return R_BAD_JSON
                        lo = (lo << 4) | <uint32_t>h
                    if not 0xDC00 <= lo <= 0xDFFF:
                        return R_BAD_JSON
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00)
                    p += 6
                elif 0xDC00 <= cp <= 0xDFFF:
                    return R_BAD_JSON
                if cp < 0x80:
                    enc[0] = <uint8_t>cp
                elif cp < 0x800:
                    enc[0] = <uint8_t>(0xC0 | (cp >> 6))
                    enc[1] = <uint8_t>(0x80 | (cp & 0x3F))
                    n = 2
                elif cp < 0x10000:
                    enc[0] = <uint8_t>(0xE0 | (cp >> 12))
                    enc[1] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
                    enc[2] = <uint8_t>(0x80 | (cp & 0x3F))
                    n = 3
                else:
                    enc[0] = <uint8_t>(0xF0 | (cp >> 18))
                    enc[1] = <uint8_t>(0x80 | ((cp >> 12) & 0x3F))
                    enc[2] = <uint8_t>(0x80 | ((cp >> 6) & 0x3F))
                    enc[3] = <uint8_t>(0x80 | (cp & 0x3F))
                    n = 4
            else:
                return R_BAD_JSON
            if out != NULL and gb_put(out, enc, n) != 0:
                return R_NOMEM
            p += 1
            run = p
        elif p[0] < 32:
            return R_BAD_JSON
        else:
            p += 1


cdef int js_number(const uint8_t **pp, const uint8_t *end, bint integer, int64_t *iv, double *dv) noexcept nogil:
    """A JSON number; integer: digits only (no fraction, no exponent), into iv."""
    cdef const uint8_t *p = pp[0]
    cdef const uint8_t *start = p
    cdef bint neg = False, frac = False
    cdef uint64_t acc = 0
    cdef char tmp[350]
    cdef char *stop
    if p < end and p[0] == 45:
        neg = True
        p += 1
    if p >= end or not (48 <= p[0] <= 57):
        return R_BAD_JSON
    if p[0] == 48 and p + 1 < end and 48 <= p[1] <= 57:
        return R_BAD_JSON
    while p < end and 48 <= p[0] <= 57:
        if acc > (<uint64_t>1 << 63) // 10:
            acc = <uint64_t>1 << 63
            acc += 1
        else:
            acc = acc * 10 + (p[0] - 48)
        p += 1
    if p < end and p[0] == 46:
        frac = True
        p += 1
        if p >= end or not (48 <= p[0] <= 57):
            return R_BAD_JSON
        while p < end and 48 <= p[0] <= 57:
            p += 1
    if p < end and (p[0] == 101 or p[0] == 69):
        frac = True
        p += 1
        if p < end and (p[0] == 43 or p[0] == 45):
            p += 1
        if p >= end or not (48 <= p[0] <= 57):
            return R_BAD_JSON
        while p < end and 48 <= p[0] <= 57:
            p += 1
    pp[0] = p
    if integer:
        if frac:
            return R_BAD_JSON
        if acc > (<uint64_t>1 << 63) or (not neg and acc == (<uint64_t>1 << 63)):
            return R_OVERFLOW
        iv[0] = -<int64_t>(acc - 1) - 1 if neg and acc else (<int64_t>acc if not neg else 0)
        return 0
    if p - start >= 349:     # longer than any double needs (strtod wants it NUL-terminated)
        return R_BAD_JSON
    memcpy(tmp, start, p - start)
    tmp[p - start] = 0
    dv[0] = strtod(tmp, &stop)
    return 0


cdef int js_skip(const uint8_t **pp, const uint8_t *end, int depth) noexcept nogil:
    cdef int rc
    cdef uint8_t close
    cdef bint obj
    cdef int64_t iv
    cdef double dv
    if depth > MAX_DEPTH:
        return R_TOO_DEEP
    js_ws(pp, end)
    if pp[0] >= end:
        return R_TRUNCATED
    if pp[0][0] == 34:
        return js_string(pp, end, NULL)
    if pp[0][0] == 123 or pp[0][0] == 91:
        close = 125 if pp[0][0] == 123 else 93
        obj = pp[0][0] == 123
        pp[0] += 1
        js_ws(pp, end)
        if pp[0] < end and pp[0][0] == close:
            pp[0] += 1
            return 0
        while True:
            if obj:
                js_ws(pp, end)
                rc = js_string(pp, end, NULL)
                if rc:
                    return rc
                js_ws(pp, end)
                if pp[0] >= end or pp[0][0] != 58:
                    return R_BAD_JSON
                pp[0] += 1
            rc = js_skip(pp, end, depth + 1)
            if rc:
                return rc
            js_ws(pp, end)
            if pp[0] >= end:
                return R_TRUNCATED
            if pp[0][0] == close:
                pp[0] += 1
                return 0
            if pp[0][0] != 44:
                return R_BAD_JSON
            pp[0] += 1
    if pp[0][0] == 116:
        return js_lit(pp, end, "true", 4)
    if pp[0][0] == 102:
        return js_lit(pp, end, "false", 5)
    if pp[0][0] == 110:
        return js_lit(pp, end, "null", 4)
    return js_number(pp, end, False, &iv, &dv)


cdef int js_value(Dec *d, int32_t opi, const uint8_t **pp, const uint8_t *end) noexcept nogil:
    cdef const int32_t *op = d.prog.ops + 6 * opi
    cdef int code = op[0], rc, k, nf, found
    cdef Col *c = &d.cols[op[1]]
    cdef int64_t iv
    cdef double dv
    cdef int32_t end32
    cdef const int32_t *kids
    cdef uint64_t seen = 0
    cdef GrowBuf key
    d.depth += 1
    if d.depth > MAX_DEPTH:
        return R_TOO_DEEP
    js_ws(pp, end)
    if pp[0] >= end:
        return R_TRUNCATED
    if pp[0][0] == 110:
        rc = js_lit(pp, end, "null", 4)
        if not rc:
            rc = put_null(d, op[1])
        d.depth -= 1
        return rc
    if code == OP_JS_STRING:
        rc = js_string(pp, end, &c.data)
        if rc:
            return rc
        if c.data.length > INT32_LIMIT:
            return R_OVERFLOW
        end32 = <int32_t>c.data.length
        if gb_put(&c.offsets, &end32, 4) != 0:
            return R_NOMEM
        rc = col_valid(c)
    elif code == OP_JS_INT or code == OP_JS_NUMBER:
        rc = js_number(pp, end, code == OP_JS_INT, &iv, &dv)
        if rc:
            return rc
        rc = put_fixed(c, &iv) if code == OP_JS_INT else put_fixed(c, &dv)
    elif code == OP_JS_BOOL:
        k = pp[0][0] == 116
        rc = js_lit(pp, end, "true", 4) if k else js_lit(pp, end, "false", 5)
        if rc:
            return rc
        rc = put_bool(c, k)
    elif code == OP_JS_ARRAY:
        if pp[0][0] != 91:
            return R_BAD_JSON
        pp[0] += 1
        js_ws(pp, end)
        if pp[0] < end and pp[0][0] == 93:
            pp[0] += 1
        else:
            while True:
                rc = js_value(d, op[2], pp, end)
                if rc:
                    return rc
                js_ws(pp, end)
                if pp[0] >= end:
                    return R_TRUNCATED
                if pp[0][0] == 93:
                    pp[0] += 1
                    break
                if pp[0][0] != 44:
                    return R_BAD_JSON
                pp[0] += 1
        if d.cols[c.kid0].count > INT32_LIMIT:
            return R_OVERFLOW
        end32 = <int32_t>d.cols[c.kid0].count
        if gb_put(&c.offsets, &end32, 4) != 0:
            return R_NOMEM
        rc = col_valid(c)
    else:   # OP_JS_OBJECT, OP_JS_MAP
        if pp[0][0] != 123:
            return R_BAD_JSON
        pp[0] += 1
        kids = d.prog.kids + op[2]
        nf = op[3]
        memset(&key, 0, sizeof(GrowBuf))
        js_ws(pp, end)
        rc = 0
        if pp[0] < end and pp[0][0] == 125:
            pp[0] += 1
        else:
            while True:
                js_ws(pp, end)
                if code == OP_JS_MAP:
                    rc = js_string(pp, end, &d.cols[c.kid0].data)
                    if rc:
                        break
                    end32 = <int32_t>d.cols[c.kid0].data.length
                    if gb_put(&d.cols[c.kid0].offsets, &end32, 4) != 0:
                        rc = R_NOMEM
                        break
                    rc = col_valid(&d.cols[c.kid0])
                    if rc:
                        break
                else:
                    key.length = 0
                    rc = js_string(pp, end, &key)
                    if rc:
                        break
                js_ws(pp, end)
                if pp[0] >= end or pp[0][0] != 58:
                    rc = R_BAD_JSON
                    break
                pp[0] += 1
                if code == OP_JS_MAP:
                    rc = js_value(d, op[2], pp, end)
                else:
                    found = -1
                    for k in range(nf):
                        if kids[3 * k + 1] == key.length and (key.length == 0 or memcmp(
                                d.prog.blob + kids[3 * k], key.data, key.length) == 0):
                            found = k
                            break
                    if found < 0:
                        rc = js_skip(pp, end, d.depth)
                    elif seen & ((<uint64_t>1) << found):
                        rc = R_DUPLICATE
                    else:
                        seen |= (<uint64_t>1) << found
                        rc = js_value(d, kids[3 * found + 2], pp, end)
                if rc:
                    break
                js_ws(pp, end)
                if pp[0] >= end:
                    rc = R_TRUNCATED
                    break
                if pp[0][0] == 125:
                    pp[0] += 1
                    break
                if pp[0][0] != 44:
                    rc = R_BAD_JSON
                    break
                pp[0] += 1
        free(key.data)
        if rc:
            return rc
        if code == OP_JS_MAP:
            end32 = <int32_t>d.cols[c.kid0].count
            if gb_put(&c.offsets, &end32, 4) != 0:
                return R_NOMEM
            rc = col_valid(c)
        else:
            for k in range(nf):
                if not seen & ((<uint64_t>1) << k):
                    rc = put_null(d, c.kid0 + k)
                    if rc:
                        return rc
            rc = col_valid(c)
    d.depth -= 1
    return rc


cdef int js_frame(Dec *d, int32_t root, const uint8_t **pp, const uint8_t *end) noexcept nogil:
    """A whole JSON document: the value, then nothing but whitespace."""
    cdef int rc = js_value(d, root, pp, end)
    if rc:
        return rc
    js_ws(pp, end)
    return 0 if pp[0] == end else R_BAD_JSON


cdef int pb_frame(Dec *d, int32_t root, const uint8_t **pp, const uint8_t *end) noexcept nogil:
    """Confluent's Protobuf framing after the id: the message indexes (a zigzag count, then
    that many zigzag indexes; a lone 0 is [0]), skipped (the reader's message decides), then
    the message."""
    cdef int64_t count, v, _i
    cdef int rc = rd_long(pp, end, &count)
    if rc:
        return rc
    if count < 0 or count > end - pp[0]:
        return R_BAD_LENGTH
    for _i in range(count):
        rc = rd_long(pp, end, &v)
        if rc:
            return rc
    return pb_message(d, root, pp, end)


# ---------------------------------------------------------------- the Python face

cdef class Program:
    """One writer schema, compiled against the reader schema (see the module docstring)."""
    cdef readonly int32_t schema_id
    cdef bytes ops
    cdef bytes kids
    cdef bytes blob
    cdef readonly int32_t root
    cdef readonly int fmt

    def __init__(self, int32_t schema_id, bytes ops, bytes kids, bytes blob, int32_t root, int ncols,
                 int fmt=0):
        cdef Py_ssize_t nops = len(ops) // 24
        cdef Py_ssize_t nkids = len(kids) // 4
        cdef const int32_t *o = <const int32_t *><const char *>ops
        cdef const int32_t *k = <const int32_t *><const char *>kids
        cdef Py_ssize_t i, j, n
        if len(ops) % 24 or len(kids) % 4 or not (0 <= root < nops):
            raise ValueError("malformed Avro program")
        # a program is checked once, so the interpreter needs no bounds checks: every
        # op index, kid range, column and constant lies inside its arrays
        for i in range(nops):
            code = o[6 * i]
            if not (0 <= code <= OP_LAST) or not (-1 <= o[6 * i + 1] < ncols):
                raise ValueError(f"malformed Avro program (op {i})")
            if code >= OP_NULL and code not in (OP_UNION, OP_ERROR, OP_DEFAULT) and o[6 * i + 1] < 0:
                raise ValueError(f"malformed Avro program (op {i} has no column)")
            if code in (OP_SKIP_RECORD, OP_RECORD, OP_SKIP_UNION, OP_UNION):
                if o[6 * i + 2] < 0 or o[6 * i + 3] < 0 or o[6 * i + 2] + o[6 * i + 3] > nkids:
                    raise ValueError(f"malformed Avro program (op {i})")
                for j in range(o[6 * i + 3]):
                    if not (0 <= k[o[6 * i + 2] + j] < nops):
                        raise ValueError(f"malformed Avro program (op {i})")
            elif code in (OP_SKIP_ARRAY, OP_ARRAY, OP_SKIP_MAP, OP_MAP):
                if not (0 <= o[6 * i + 2] < nops):
                    raise ValueError(f"malformed Avro program (op {i})")
            elif code in (OP_SKIP_FIXED, OP_FIXED_BIN, OP_DEC_FIXED):
                if o[6 * i + 2] < 0:
                    raise ValueError(f"malformed Avro program (op {i})")
            elif code == OP_ENUM:
                n = o[6 * i + 3]
                if o[6 * i + 2] < 0 or n < 0 or o[6 * i + 2] + 2 * n > nkids:
                    raise ValueError(f"malformed Avro program (op {i})")
                for j in range(n):
                    if k[o[6 * i + 2] + 2 * j] >= 0 and (
                            k[o[6 * i + 2] + 2 * j + 1] < 0
                            or k[o[6 * i + 2] + 2 * j] + k[o[6 * i + 2] + 2 * j + 1] > len(blob)):
                        raise ValueError(f"malformed Avro program (op {i})")
            elif code == OP_DEFAULT:
                if (not (0 <= o[6 * i + 2] < nops) or o[6 * i + 3] < 0 or o[6 * i + 4] < 0
                        or o[6 * i + 3] + o[6 * i + 4] > len(blob)):
                    raise ValueError(f"malformed Avro program (op {i})")
            elif code == OP_PB_MSG:
                n = o[6 * i + 3]
                if o[6 * i + 2] < 0 or not 0 <= n <= 64 or o[6 * i + 2] + 3 * n > nkids:
                    raise ValueError(f"malformed Protobuf program (op {i})")
                for j in range(n):
                    if not (0 <= k[o[6 * i + 2] + 3 * j + 1] < nops):
                        raise ValueError(f"malformed Protobuf program (op {i})")
            elif code == OP_PB_ENUM:
                n = o[6 * i + 3]
                if o[6 * i + 2] < 0 or n < 0 or o[6 * i + 2] + 3 * n > nkids:
                    raise ValueError(f"malformed Protobuf program (op {i})")
                for j in range(n):
                    if (k[o[6 * i + 2] + 3 * j + 1] < 0 or k[o[6 * i + 2] + 3 * j + 2] < 0
                            or k[o[6 * i + 2] + 3 * j + 1] + k[o[6 * i + 2] + 3 * j + 2] > len(blob)):
                        raise ValueError(f"malformed Protobuf program (op {i})")
            elif code == OP_PB_SUBMSG:
                if not (0 <= o[6 * i + 2] < nops) or o[6 * o[6 * i + 2]] != OP_PB_MSG:
                    raise ValueError(f"malformed Protobuf program (op {i})")
            elif code == OP_JS_OBJECT:
                n = o[6 * i + 3]
                if o[6 * i + 2] < 0 or not 0 <= n <= 64 or o[6 * i + 2] + 3 * n > nkids:
                    raise ValueError(f"malformed JSON program (op {i})")
                for j in range(n):
                    if (k[o[6 * i + 2] + 3 * j] < 0 or k[o[6 * i + 2] + 3 * j + 1] < 0
                            or k[o[6 * i + 2] + 3 * j] + k[o[6 * i + 2] + 3 * j + 1] > len(blob)
                            or not (0 <= k[o[6 * i + 2] + 3 * j + 2] < nops)):
                        raise ValueError(f"malformed JSON program (op {i})")
            elif code in (OP_JS_ARRAY, OP_JS_MAP):
                if not (0 <= o[6 * i + 2] < nops):
                    raise ValueError(f"malformed JSON program (op {i})")
            elif code == OP_PB_MAPENTRY:
                if not (0 <= o[6 * i + 2] < nops) or not (0 <= o[6 * i + 3] < nops):
                    raise ValueError(f"malformed Protobuf program (op {i})")
        if fmt == 1 and o[6 * root] != OP_PB_MSG:
            raise ValueError("malformed Protobuf program (the root is not a message)")
        if fmt == 2 and not OP_JS_OBJECT <= o[6 * root] <= OP_JS_MAP:
            raise ValueError("malformed JSON program")
        if not 0 <= fmt <= 2:
            raise ValueError("malformed program (format)")
        self.fmt = fmt
        self.schema_id = schema_id
        self.ops = ops
        self.kids = kids
        self.blob = blob
        self.root = root


def scan_ids(values):
    """The distinct schema ids of the registry-framed values of a binary pyarrow array
    (nulls and values too short to be framed are left out), as a sorted list."""
    cdef const int32_t *offs
    cdef const uint8_t *data
    cdef Py_ssize_t i, n = len(values), base = values.offset
    cdef int32_t a, b, sid
    cdef int32_t ids[256]
    cdef int nids = 0, j
    cdef bint found
    bufs = values.buffers()
    if n == 0 or bufs[2] is None:
        return []
    offs = <const int32_t *><size_t>bufs[1].address
    data = <const uint8_t *><size_t>bufs[2].address
    for i in range(base, base + n):
        a = offs[i]
        b = offs[i + 1]
        if b - a >= 5 and data[a] == 0:
            sid = <int32_t>kb_load_be32(data + a + 1)
            found = False
            for j in range(nids):
                if ids[j] == sid:
                    found = True
                    break
            if not found:
                if nids == 256:
                    break       # more ids than any real read has: the rest are unknown ids
                ids[nids] = sid
                nids += 1
    return sorted([ids[j] for j in range(nids)])


def decode(values, layout, programs, bint permissive):
    """Decodes a binary pyarrow array of registry-framed Avro values.

    layout: [(kind, kid0, nkids, precision)] per column, column 0 the top-level one
    (precision: a decimal column's; 0 for the others).
    programs: the Programs of the ids that may occur (an id without one: R_UNKNOWN_ID).
    Returns (columns, bad_row, reason, schema_id): columns is [(count, nulls, validity,
    data, offsets)] per column (the buffers as objects exporting the buffer protocol, or
    None); bad_row is -1, or in FAILFAST mode the row that failed (columns then None).
    A null value is a null row.
    """
    cdef Py_ssize_t n = len(values), base = values.offset, i, r
    cdef int ncols = len(layout), ci, rc = 0, nprogs = len(programs), pi
    cdef const int32_t *offs = NULL
    cdef const uint8_t *data = NULL
    cdef const uint8_t *vbits = NULL
    cdef const uint8_t *p
    cdef const uint8_t *end
    cdef int32_t sid, bad_sid = -1
    cdef Py_ssize_t bad = -1
    cdef Dec d
    cdef Prog *progs = NULL
    cdef Program prog
    cdef int cur = -1
    cdef Col *c
    if ncols < 1:
        raise ValueError("empty layout")
    bufs = values.buffers()
    if n and bufs[2] is not None:
        offs = <const int32_t *><size_t>bufs[1].address
        data = <const uint8_t *><size_t>bufs[2].address
    if bufs[0] is not None:
        vbits = <const uint8_t *><size_t>bufs[0].address
    memset(&d, 0, sizeof(Dec))
    d.cols = <Col *>calloc(ncols, sizeof(Col))
    d.marks = <Mark *>calloc(ncols, sizeof(Mark))
    progs = <Prog *>calloc(nprogs + 1, sizeof(Prog))
    d.ncols = ncols
    try:
        if d.cols == NULL or d.marks == NULL or progs == NULL:
            raise MemoryError()
        for ci, (kind, kid0, nkids, width) in enumerate(layout):
            if not (K_BOOL <= kind <= K_MAP) or kid0 < 0 or nkids < 0 or kid0 + nkids > ncols:
                raise ValueError("malformed layout")
            if kind in (K_STRUCT, K_LIST, K_MAP) and nkids and kid0 <= ci:
                raise ValueError("malformed layout (a child must come after its parent)")
            if (kind == K_LIST and nkids != 1) or (kind == K_MAP and nkids != 2):
                raise ValueError("malformed layout")
            if kind == K_MAP and layout[kid0][0] != K_BIN:
                raise ValueError("malformed layout (map keys are strings)")
            d.cols[ci].kind = kind
            d.cols[ci].kid0 = kid0
            d.cols[ci].nkids = nkids
            d.cols[ci].width = {K_I32: 4, K_I64: 8, K_F32: 4, K_F64: 8, K_DEC: 16}.get(kind, 0)
            if kind == K_DEC:
                if not 1 <= width <= 38:
                    raise ValueError("malformed layout (a decimal's precision is 1..38)")
                d.cols[ci].precision = width
            if kind in (K_BIN, K_LIST, K_MAP):
                if gb_reserve(&d.cols[ci].offsets, 4 * (n + 1)) != 0:
                    raise MemoryError()
                d.cols[ci].offsets.length = 4      # the first offset, 0
            # room for one value per row up front (columns inside lists or maps grow on)
            if gb_reserve(&d.cols[ci].validity, (n + 7) // 8) != 0 or (
                d.cols[ci].width and gb_reserve(&d.cols[ci].data, n * d.cols[ci].width) != 0
            ):
                raise MemoryError()
        for pi, prog in enumerate(programs):
            progs[pi].id = prog.schema_id
            progs[pi].ops = <const int32_t *><const char *>prog.ops
            progs[pi].nops = len(prog.ops) // 24
            progs[pi].kids = <const int32_t *><const char *>prog.kids
            progs[pi].blob = <const uint8_t *><const char *>prog.blob
            progs[pi].root = prog.root
            progs[pi].fmt = prog.fmt
        for r in range(n):
            i = base + r
            mark_all(&d)
            if vbits != NULL and not (vbits[i >> 3] >> (i & 7)) & 1:
                rc = put_null(&d, 0)
                if rc:
                    raise MemoryError()
                continue
            p = data + offs[i] if data != NULL else NULL
            end = data + offs[i + 1] if data != NULL else NULL
            if end - p < 5 or p[0] != 0:
                rc = R_NOT_FRAMED
                sid = -1
            else:
                sid = <int32_t>kb_load_be32(p + 1)
                p += 5
                if cur < 0 or progs[cur].id != sid:
                    cur = -1
                    for pi in range(nprogs):
                        if progs[pi].id == sid:
                            cur = pi
                            break
                if cur < 0:
                    rc = R_UNKNOWN_ID
                else:
                    d.prog = &progs[cur]
                    d.depth = 0
                    if progs[cur].fmt == 1:
                        rc = pb_frame(&d, progs[cur].root, &p, end)
                    elif progs[cur].fmt == 2:
                        rc = js_frame(&d, progs[cur].root, &p, end)
                    else:
                        rc = run(&d, progs[cur].root, &p, end)
            if rc:
                if rc == R_NOMEM:
                    raise MemoryError()
                rollback(&d)
                if not permissive:
                    bad = r
                    bad_sid = sid
                    break
                rc = put_null(&d, 0)
                if rc:
                    raise MemoryError()
                rc = R_OK
        if bad >= 0:
            return None, bad, rc, bad_sid
        out = []
        for ci in range(ncols):
            c = &d.cols[ci]
            if c.kind == K_BOOL and c.data.length < (c.count + 7) // 8:
                if gb_reserve(&c.data, (c.count + 7) // 8 - c.data.length) != 0:
                    raise MemoryError()
                c.data.length = (c.count + 7) // 8
            out.append((
                c.count,
                c.nulls,
                _take(&c.validity) if c.nulls else None,
                _take(&c.data) if c.kind not in (K_STRUCT, K_LIST, K_MAP) else None,
                _take(&c.offsets) if c.kind in (K_BIN, K_LIST, K_MAP) else None,
            ))
        return out, -1, R_OK, -1
    finally:
        if d.cols != NULL:
            for ci in range(ncols):
                free(d.cols[ci].validity.data)
                free(d.cols[ci].data.data)
                free(d.cols[ci].offsets.data)
            free(d.cols)
        free(d.marks)
        free(progs)


# ---------------------------------------------------------------- encoding (the sink)

cpdef enum:
    E_BOOL = 0
    E_INT = 1           # from int32 (int, date)
    E_LONG32 = 2        # long from int32
    E_LONG = 3          # from int64 (long, timestamps)
    E_FLOAT = 4
    E_DOUBLE = 5
    E_FLOAT_DOUBLE = 6  # double from float32
    E_BYTES = 7         # from binary or string (int32 offsets)
    E_DEC_BYTES = 8     # bytes decimal from decimal128
    E_RECORD = 9
    E_ARRAY = 10
    E_MAP = 11
    E_LAST = 11


cdef struct ENode:
    int kind
    int null_branch     # the union's null branch, -1: not a union (a null is an error)
    int value_branch
    const uint8_t *validity
    const uint8_t *data
    const int32_t *offsets
    Py_ssize_t offset   # the Arrow array's offset
    Py_ssize_t length
    int kid0            # RECORD: first field's node; ARRAY: items; MAP: keys, values
    int nkids


cdef inline int w_long(GrowBuf *b, int64_t v) noexcept nogil:
    cdef uint64_t z = (<uint64_t>v << 1) ^ <uint64_t>(v >> 63)
    cdef uint8_t tmp[10]
    cdef int n = 0
    while z > 0x7F:
        tmp[n] = <uint8_t>((z & 0x7F) | 0x80)
        z >>= 7
        n += 1
    tmp[n] = <uint8_t>z
    return gb_put(b, tmp, n + 1)


cdef int enc(ENode *nodes, int ni, Py_ssize_t i, GrowBuf *b, int *bad_node) noexcept nogil:
    """Writes logical row i of node ni. 0, or -1 (no memory), or 1 (a null where the
    schema takes none: bad_node says which)."""
    cdef ENode *n = &nodes[ni]
    cdef Py_ssize_t p = n.offset + i, j, a, e
    cdef int rc, k
    cdef uint8_t one
    cdef float f
    cdef double d
    cdef int32_t i32
    cdef int64_t i64
    cdef uint8_t le[16]
    cdef uint8_t be[16]
    cdef int start
    if n.validity != NULL and not (n.validity[p >> 3] >> (p & 7)) & 1:
        if n.null_branch < 0:
            bad_node[0] = ni
            return 1
        return w_long(b, n.null_branch)
    if n.null_branch >= 0 and w_long(b, n.value_branch) != 0:
        return -1
    if n.kind == E_BOOL:
        one = (n.data[p >> 3] >> (p & 7)) & 1
        return gb_put(b, &one, 1)
    if n.kind == E_INT or n.kind == E_LONG32:
        memcpy(&i32, n.data + 4 * p, 4)
        return w_long(b, i32)
    if n.kind == E_LONG:
        memcpy(&i64, n.data + 8 * p, 8)
        return w_long(b, i64)
    if n.kind == E_FLOAT:
        return gb_put(b, n.data + 4 * p, 4)
    if n.kind == E_DOUBLE:
        return gb_put(b, n.data + 8 * p, 8)
    if n.kind == E_FLOAT_DOUBLE:
        memcpy(&f, n.data + 4 * p, 4)
        d = f
        return gb_put(b, &d, 8)
    if n.kind == E_BYTES:
        a = n.offsets[p]
        e = n.offsets[p + 1]
        if w_long(b, e - a) != 0:
            return -1
        return gb_put(b, n.data + a, e - a)
    if n.kind == E_DEC_BYTES:
        memcpy(le, n.data + 16 * p, 16)
        for k in range(16):
            be[k] = le[15 - k]
        # the shortest two's complement: drop leading bytes that only extend the sign
        start = 0
        while start < 15 and ((be[start] == 0 and not (be[start + 1] & 0x80))
                              or (be[start] == 0xFF and (be[start + 1] & 0x80))):
            start += 1
        if w_long(b, 16 - start) != 0:
            return -1
        return gb_put(b, be + start, 16 - start)
    if n.kind == E_RECORD:
        for k in range(n.nkids):
            rc = enc(nodes, n.kid0 + k, i, b, bad_node)
            if rc:
                return rc
        return 0
    # ARRAY / MAP: one block of all the items, then the 0 that ends the list
    a = n.offsets[p]
    e = n.offsets[p + 1]
    if e > a:
        if w_long(b, e - a) != 0:
            return -1
        for j in range(a, e):
            if n.kind == E_MAP:
                rc = enc(nodes, n.kid0, j, b, bad_node)
                if rc:
                    return rc
                rc = enc(nodes, n.kid0 + 1, j, b, bad_node)
            else:
                rc = enc(nodes, n.kid0, j, b, bad_node)
            if rc:
                return rc
    one = 0
    return gb_put(b, &one, 1)


def encode(nodes, bytes header):
    """Encodes node 0 (an Arrow array, described by `nodes`: [(kind, null_branch,
    value_branch, array, kid0, nkids)], every kid after its parent) row by row into
    header + the Avro datum. Returns (offsets, data, validity, null_count, bad_row,
    bad_node): a null top-level row (of a nullable schema: none) is a null value;
    bad_row >= 0 when a row has a null the schema has no null branch for."""
    cdef int nn = len(nodes), k, bad_node = -1, rc
    cdef ENode *en = <ENode *>calloc(nn if nn else 1, sizeof(ENode))
    cdef GrowBuf offsets, data, validity
    cdef Py_ssize_t i, length, nulls = 0, bad_row = -1, p
    cdef int32_t end32
    cdef const uint8_t *hp = header
    cdef Py_ssize_t hn = len(header)
    memset(&offsets, 0, sizeof(GrowBuf))
    memset(&data, 0, sizeof(GrowBuf))
    memset(&validity, 0, sizeof(GrowBuf))
    keep = []
    try:
        if en == NULL:
            raise MemoryError()
        for k, (kind, null_branch, value_branch, arr, kid0, nkids) in enumerate(nodes):
            if not (E_BOOL <= kind <= E_LAST) or kid0 < 0 or nkids < 0 or kid0 + nkids > nn:
                raise ValueError("malformed encoder nodes")
            if nkids and kid0 <= k:
                raise ValueError("malformed encoder nodes (a kid must come after its parent)")
            bufs = arr.buffers()
            keep.append(bufs)
            en[k].kind = kind
            en[k].null_branch = null_branch
            en[k].value_branch = value_branch
            en[k].offset = arr.offset
            en[k].length = len(arr)
            en[k].kid0 = kid0
            en[k].nkids = nkids
            en[k].validity = <const uint8_t *><size_t>bufs[0].address if bufs[0] is not None else NULL
            if kind in (E_BYTES, E_ARRAY, E_MAP):
                en[k].offsets = <const int32_t *><size_t>bufs[1].address if bufs[1] is not None else NULL
                if kind == E_BYTES:
                    en[k].data = <const uint8_t *><size_t>bufs[2].address if bufs[2] is not None else NULL
            elif kind != E_RECORD:
                en[k].data = <const uint8_t *><size_t>bufs[1].address if bufs[1] is not None else NULL
        length = en[0].length
        if (gb_reserve(&offsets, 4 * (length + 1)) != 0 or gb_reserve(&validity, length // 8 + 1) != 0
                or gb_reserve(&data, length * 16 + 64) != 0):
            raise MemoryError()
        end32 = 0
        gb_put(&offsets, &end32, 4)
        validity.length = length // 8 + 1
        with nogil:
            for i in range(length):
                p = en[0].offset + i
                if en[0].validity != NULL and not (en[0].validity[p >> 3] >> (p & 7)) & 1:
                    nulls += 1
                else:
                    validity.data[i >> 3] |= <uint8_t>(1 << (i & 7))
                    rc = gb_put(&data, hp, hn)
                    if rc == 0:
                        # the top level's null branch is the row itself: encode the value
                        k = en[0].null_branch
                        en[0].null_branch = -1
                        rc = enc(en, 0, i, &data, &bad_node)
                        en[0].null_branch = k
                    if rc:
                        bad_row = i if rc == 1 else -2
                        break
                if data.length > INT32_LIMIT:
                    bad_row = -3
                    break
                end32 = <int32_t>data.length
                if gb_put(&offsets, &end32, 4) != 0:
                    bad_row = -2
                    break
        if bad_row == -2:
            raise MemoryError()
        if bad_row == -3:
            raise OverflowError("the encoded values of one Arrow batch exceed 2 GiB")
        if bad_row >= 0:
            return None, None, None, 0, bad_row, bad_node
        return _take(&offsets), _take(&data), _take(&validity) if nulls else None, nulls, -1, -1
    finally:
        free(en)
        free(offsets.data)
        free(data.data)
        free(validity.data)


# ---------------------------------------------------------------- encoding Protobuf and JSON (the sink)
#
# The sink's valueFormat=protobuf / json-schema (broker/spark/schema_sink.py): as `encode`
# above, a tree of nodes describes the Arrow arrays and what each is written as; the
# nodes are tuples (kind, a, b, array, kid0, nkids, blob, table):
#
#   Protobuf  a: the field's tag (number << 3 | wire type) as its message writes it; b:
#             flags (X_PACKED: a repeated scalar written packed; X_UTF8: binary checked
#             to be UTF-8 for a string field); blob/table: an enum's names and
#             (name offset, name length, number) int32 triples
#   JSON      a: X_NULLABLE when the schema admits null (else a null is an error); b: a
#             decimal's scale; blob: a struct field's key, written before its value
#             (`"name":`, escaped)

cpdef enum:
    # Protobuf values by column type and wire encoding
    PE_BOOL = 0
    PE_I32_VARINT = 1       # int32 column: int32, int64, uint64 (sign-extended)
    PE_I32_UVARINT = 2      # int32 column: uint32 (zero-extended)
    PE_I32_ZIGZAG = 3       # int32 column: sint32, sint64
    PE_I32_FIXED32 = 4      # int32 column: fixed32, sfixed32
    PE_I32_FIXED64 = 5      # int32 column: fixed64, sfixed64 (sign-extended)
    PE_I64_VARINT = 6       # int64 column: int64, uint64
    PE_I64_ZIGZAG = 7       # int64 column: sint64
    PE_I64_FIXED64 = 8      # int64 column: fixed64, sfixed64
    PE_F32 = 9              # float column: float
    PE_F32_F64 = 10         # float column: double
    PE_F64 = 11             # double column: double
    PE_BYTES = 12           # string or binary column: string, bytes
    PE_ENUM = 13            # string column: an enum, by name
    PE_MSG = 14             # struct column: a message (kids: its fields)
    PE_TIMESTAMP = 15       # timestamp[us] column: google.protobuf.Timestamp
    PE_LIST = 16            # list column: a repeated field (kid: the element)
    PE_MAP = 17             # map column: a map field (kids: key, value)
    PE_LAST = 17
    # JSON values by column type
    JE_BOOL = 20
    JE_I32 = 21
    JE_I64 = 22
    JE_F32 = 23
    JE_F64 = 24
    JE_STRING = 25          # string (or binary checked to be UTF-8): escaped
    JE_BASE64 = 26          # binary: a base64 string
    JE_DECIMAL = 27         # decimal128: a number, exactly (b: the scale)
    JE_DATE = 28            # date32: "YYYY-MM-DD"
    JE_TIMESTAMP = 29       # timestamp[us] with a zone: "YYYY-MM-DDTHH:MM:SS[.ffffff]Z"
    JE_TIMESTAMP_NTZ = 30   # timestamp[us] without: the same without the Z
    JE_OBJECT = 31          # struct: an object (kids: its properties, each with its key)
    JE_ARRAY = 32
    JE_MAP = 33             # map<string, V>: an object
    JE_LAST = 33
    # flags
    X_PACKED = 1
    X_UTF8 = 2
    X_NULLABLE = 4
    # why a row could not be written (with the node)
    X_NULL = 1              # a null where the schema takes none
    X_BAD_ENUM = 2          # a string the enum does not name
    X_BAD_UTF8 = 3          # a binary value that is not UTF-8, for a string
    X_NOT_FINITE = 4        # NaN or an infinity, which JSON has no number for


cdef extern from *:
    """
    #include <stdio.h>
    #include <stdlib.h>
    /* the unscaled little-endian int128 `le` with `scale` decimals, as plain text */
    static int kb_dec_text(const unsigned char *le, int scale, char *out) {
        __int128 v = 0;
        for (int i = 15; i >= 0; i--) v = (v << 8) | le[i];
        unsigned __int128 m = v < 0 ? -(unsigned __int128)v : (unsigned __int128)v;
        char digits[48];
        int n = 0;
        do { digits[n++] = (char)('0' + (int)(m % 10)); m /= 10; } while (m);
        while (n <= scale) digits[n++] = '0';
        int k = 0;
        if (v < 0) out[k++] = '-';
        for (int i = n - 1; i >= 0; i--) {
            out[k++] = digits[i];
            if (i == scale && scale > 0) out[k++] = '.';
        }
        return k;
    }
    /* days since 1970-01-01 -> the proleptic Gregorian civil date (H. Hinnant's algorithm) */
    static void kb_civil(long long z, long long *y, int *m, int *d) {
        z += 719468;
        long long era = (z >= 0 ? z : z - 146096) / 146097;
        long long doe = z - era * 146097;
        long long yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        long long doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        long long mp = (5 * doy + 2) / 153;
        *d = (int)(doy - (153 * mp + 2) / 5 + 1);
        *m = (int)(mp < 10 ? mp + 3 : mp - 9);
        *y = yoe + era * 400 + (*m <= 2);
    }
    /* v in decimal; the length */
    static int kb_int_text(long long v, char *out) {
        char tmp[24];
        unsigned long long m = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;
        int n = 0, k = 0;
        do { tmp[n++] = (char)('0' + (int)(m % 10)); m /= 10; } while (m);
        if (v < 0) out[k++] = '-';
        while (n) out[k++] = tmp[--n];
        return k;
    }
    /* v (>= 0) in exactly `width` digits */
    static void kb_digits(long long v, int width, char *out) {
        for (int i = width - 1; i >= 0; i--) { out[i] = (char)('0' + (int)(v % 10)); v /= 10; }
    }
    /* the shortest text that reads back as the same double (or float, `single`) */
    static int kb_real_text(double v, int single, char *out) {
        int n = 0;
        for (int prec = single ? 6 : 15; prec <= (single ? 9 : 17); prec++) {
            n = snprintf(out, 40, "%.*g", prec, v);
            if (single ? (strtof(out, NULL) == (float)v) : (strtod(out, NULL) == v)) break;
        }
        int frac = 0;
        for (int i = 0; i < n; i++) if (out[i] == '.' || out[i] == 'e' || out[i] == 'E') frac = 1;
        if (!frac) { out[n++] = '.'; out[n++] = '0'; }
        return n;
    }
    """
    int kb_dec_text(const uint8_t *le, int scale, char *out) nogil
    void kb_civil(long long z, long long *y, int *m, int *d) nogil
    int kb_real_text(double v, int single, char *out) nogil
    int kb_int_text(long long v, char *out) nogil
    void kb_digits(long long v, int width, char *out) nogil


cdef extern from "math.h" nogil:
    bint isfinite(double x)

cdef int64_t DAY_US = 86400 * <int64_t>1000000
cdef int64_t HOUR_US = 3600 * <int64_t>1000000


cdef struct XNode:
    int kind
    int64_t a           # Protobuf: the tag; JSON: flags
    int b               # Protobuf: flags; JSON: the scale
    const uint8_t *validity
    const uint8_t *data
    const int32_t *offsets
    Py_ssize_t offset
    Py_ssize_t length
    int kid0
    int nkids
    const uint8_t *blob
    Py_ssize_t blob_len
    const int32_t *table
    int ntable


cdef inline bint x_null(XNode *n, Py_ssize_t p) noexcept nogil:
    return n.validity != NULL and not (n.validity[p >> 3] >> (p & 7)) & 1


cdef inline int w_uvarint(GrowBuf *b, uint64_t z) noexcept nogil:
    cdef uint8_t tmp[10]
    cdef int n = 0
    while z > 0x7F:
        tmp[n] = <uint8_t>((z & 0x7F) | 0x80)
        z >>= 7
        n += 1
    tmp[n] = <uint8_t>z
    return gb_put(b, tmp, n + 1)


cdef inline int pb_open(GrowBuf *b, Py_ssize_t *start) noexcept nogil:
    """Room for a length (one byte; pb_close moves the body when the length needs more)."""
    cdef uint8_t zero = 0
    start[0] = b.length
    return gb_put(b, &zero, 1)


cdef int pb_close(GrowBuf *b, Py_ssize_t start) noexcept nogil:
    cdef Py_ssize_t body = b.length - start - 1
    cdef uint8_t tmp[10]
    cdef int n = 0
    cdef uint64_t z = <uint64_t>body
    while z > 0x7F:
        tmp[n] = <uint8_t>((z & 0x7F) | 0x80)
        z >>= 7
        n += 1
    tmp[n] = <uint8_t>z
    n += 1
    if n > 1:
        if gb_reserve(b, n - 1) != 0:
            return -1
        memmove(b.data + start + n, b.data + start + 1, body)
        b.length += n - 1
    memcpy(b.data + start, tmp, n)
    return 0


cdef int pe_value(XNode *nodes, int ni, Py_ssize_t i, GrowBuf *b, int *bad_node) noexcept nogil:
    """The value of logical row i of node ni, without its tag: 0, -1 (no memory), or a
    reason X_* (bad_node says where)."""
    cdef XNode *n = &nodes[ni]
    cdef Py_ssize_t p = n.offset + i, s, e, start
    cdef int32_t i32
    cdef int64_t i64, secs
    cdef float f
    cdef double d
    cdef uint8_t one
    cdef int k, rc
    if n.kind == PE_BOOL:
        one = (n.data[p >> 3] >> (p & 7)) & 1
        return gb_put(b, &one, 1)
    if n.kind <= PE_I32_FIXED64:
        memcpy(&i32, n.data + 4 * p, 4)
        if n.kind == PE_I32_VARINT:
            return w_uvarint(b, <uint64_t><int64_t>i32)
        if n.kind == PE_I32_UVARINT:
            return w_uvarint(b, <uint32_t>i32)
        if n.kind == PE_I32_ZIGZAG:
            return w_long(b, i32)
        if n.kind == PE_I32_FIXED32:
            return gb_put(b, &i32, 4)
        i64 = i32
        return gb_put(b, &i64, 8)
    if n.kind <= PE_I64_FIXED64:
        memcpy(&i64, n.data + 8 * p, 8)
        if n.kind == PE_I64_VARINT:
            return w_uvarint(b, <uint64_t>i64)
        if n.kind == PE_I64_ZIGZAG:
            return w_long(b, i64)
        return gb_put(b, &i64, 8)
    if n.kind == PE_F32:
        return gb_put(b, n.data + 4 * p, 4)
    if n.kind == PE_F32_F64:
        memcpy(&f, n.data + 4 * p, 4)
        d = f
        return gb_put(b, &d, 8)
    if n.kind == PE_F64:
        return gb_put(b, n.data + 8 * p, 8)
    if n.kind == PE_BYTES or n.kind == PE_ENUM:
        s = n.offsets[p]
        e = n.offsets[p + 1]
        if n.kind == PE_ENUM:
            for k in range(n.ntable):
                if n.table[3 * k + 1] == e - s and memcmp(n.blob + n.table[3 * k], n.data + s, e - s) == 0:
                    return w_uvarint(b, <uint64_t><int64_t>n.table[3 * k + 2])
            bad_node[0] = ni
            return X_BAD_ENUM
        if (n.b & X_UTF8) and not kb_utf8_valid(n.data + s, e - s):
            bad_node[0] = ni
            return X_BAD_UTF8
        if w_uvarint(b, <uint64_t>(e - s)) != 0:
            return -1
        return gb_put(b, n.data + s, e - s)
    if n.kind == PE_TIMESTAMP:
        memcpy(&i64, n.data + 8 * p, 8)
        secs = i64 // 1000000 if i64 >= 0 else -((-(i64 + 1)) // 1000000) - 1
        if pb_open(b, &start) != 0:
            return -1
        if secs != 0 and (gb_put(b, b"\x08", 1) != 0 or w_uvarint(b, <uint64_t>secs) != 0):
            return -1
        i64 = (i64 - secs * 1000000) * 1000
        if i64 != 0 and (gb_put(b, b"\x10", 1) != 0 or w_uvarint(b, <uint64_t>i64) != 0):
            return -1
        return pb_close(b, start)
    # PE_MSG
    if pb_open(b, &start) != 0:
        return -1
    rc = pe_fields(nodes, ni, i, b, bad_node)
    if rc:
        return rc
    return pb_close(b, start)


cdef int pe_fields(XNode *nodes, int ni, Py_ssize_t i, GrowBuf *b, int *bad_node) noexcept nogil:
    """The fields of the message of node ni (a struct) at logical row i: a null field is
    absent, a repeated one each of its elements (or packed), a map one entry per pair."""
    cdef XNode *m = &nodes[ni]
    cdef XNode *n
    cdef XNode *el
    cdef int k, rc, ki
    cdef Py_ssize_t p, j, s, e, start, entry
    for k in range(m.nkids):
        ki = m.kid0 + k
        n = &nodes[ki]
        p = n.offset + i
        if x_null(n, p):
            continue
        if n.kind == PE_LIST:
            s = n.offsets[p]
            e = n.offsets[p + 1]
            if s == e:
                continue
            el = &nodes[n.kid0]
            if n.b & X_PACKED:
                if w_uvarint(b, <uint64_t>n.a) != 0 or pb_open(b, &start) != 0:
                    return -1
            for j in range(s, e):
                if x_null(el, el.offset + j):
                    bad_node[0] = n.kid0
                    return X_NULL
                if not (n.b & X_PACKED) and w_uvarint(b, <uint64_t>el.a) != 0:
                    return -1
                rc = pe_value(nodes, n.kid0, j, b, bad_node)
                if rc:
                    return rc
            if n.b & X_PACKED and pb_close(b, start) != 0:
                return -1
            continue
        if n.kind == PE_MAP:
            s = n.offsets[p]
            e = n.offsets[p + 1]
            for j in range(s, e):
                if w_uvarint(b, <uint64_t>n.a) != 0 or pb_open(b, &entry) != 0:
                    return -1
                el = &nodes[n.kid0]
                if w_uvarint(b, <uint64_t>el.a) != 0:
                    return -1
                rc = pe_value(nodes, n.kid0, j, b, bad_node)
                if rc:
                    return rc
                el = &nodes[n.kid0 + 1]
                if not x_null(el, el.offset + j):          # a null value: the entry without one
                    if w_uvarint(b, <uint64_t>el.a) != 0:
                        return -1
                    rc = pe_value(nodes, n.kid0 + 1, j, b, bad_node)
                    if rc:
                        return rc
                if pb_close(b, entry) != 0:
                    return -1
            continue
        if w_uvarint(b, <uint64_t>n.a) != 0:
            return -1
        rc = pe_value(nodes, ki, i, b, bad_node)
        if rc:
            return rc
    return 0


cdef int js_put_string(GrowBuf *b, const uint8_t *s, Py_ssize_t n) noexcept nogil:
    """s as a JSON string: ", \\ and the control characters escaped, the rest as it is."""
    cdef Py_ssize_t j, run = 0
    cdef uint8_t c
    cdef int k
    cdef uint8_t esc[6]
    cdef const char *hexd = b"0123456789abcdef"
    if gb_reserve(b, n + 2) != 0:
        return -1
    b.data[b.length] = 34
    b.length += 1
    for j in range(n):
        c = s[j]
        if c >= 0x20 and c != 34 and c != 92:
            continue
        if j > run and gb_put(b, s + run, j - run) != 0:
            return -1
        run = j + 1
        esc[0] = 92
        if c == 34 or c == 92:
            esc[1] = c
            k = 2
        elif c == 10:
            esc[1] = 110
            k = 2
        elif c == 13:
            esc[1] = 114
            k = 2
        elif c == 9:
            esc[1] = 116
            k = 2
        elif c == 8:
            esc[1] = 98
            k = 2
        elif c == 12:
            esc[1] = 102
            k = 2
        else:
            esc[1] = 117
            esc[2] = 48
            esc[3] = 48
            esc[4] = hexd[c >> 4]
            esc[5] = hexd[c & 15]
            k = 6
        if gb_put(b, esc, k) != 0:
            return -1
    if n > run and gb_put(b, s + run, n - run) != 0:
        return -1
    return gb_put(b, b'"', 1)


cdef int js_put_base64(GrowBuf *b, const uint8_t *s, Py_ssize_t n) noexcept nogil:
    cdef const char *alpha = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"
    cdef Py_ssize_t j, need = 4 * ((n + 2) // 3) + 2
    cdef uint8_t *w
    cdef uint32_t v
    if gb_reserve(b, need) != 0:
        return -1
    w = b.data + b.length
    w[0] = 34
    w += 1
    j = 0
    while j + 3 <= n:
        v = (<uint32_t>s[j] << 16) | (<uint32_t>s[j + 1] << 8) | s[j + 2]
        w[0] = alpha[v >> 18]
        w[1] = alpha[(v >> 12) & 63]
        w[2] = alpha[(v >> 6) & 63]
        w[3] = alpha[v & 63]
        w += 4
        j += 3
    if n - j == 1:
        v = <uint32_t>s[j] << 16
        w[0] = alpha[v >> 18]
        w[1] = alpha[(v >> 12) & 63]
        w[2] = 61
        w[3] = 61
        w += 4
    elif n - j == 2:
        v = (<uint32_t>s[j] << 16) | (<uint32_t>s[j + 1] << 8)
        w[0] = alpha[v >> 18]
        w[1] = alpha[(v >> 12) & 63]
        w[2] = alpha[(v >> 6) & 63]
        w[3] = 61
        w += 4
    w[0] = 34
    w += 1
    b.length = w - b.data
    return 0


cdef int js_put_time(GrowBuf *b, int64_t micros, bint date_only, bint zone) noexcept nogil:
    cdef char tmp[64]
    cdef int64_t days, rest
    cdef long long y
    cdef int m, d, n
    if date_only:
        days = micros
        rest = 0
    else:
        days = micros // DAY_US if micros >= 0 else -((-(micros + 1)) // DAY_US) - 1
        rest = micros - days * DAY_US
    kb_civil(days, &y, &m, &d)
    if 0 <= y <= 9999:
        tmp[0] = 34
        kb_digits(y, 4, tmp + 1)
        n = 5
    else:
        n = snprintf(tmp, 64, b'"%04lld', y)
    tmp[n] = 45
    kb_digits(m, 2, tmp + n + 1)
    tmp[n + 3] = 45
    kb_digits(d, 2, tmp + n + 4)
    n += 6
    if not date_only:
        tmp[n] = 84
        kb_digits(rest // HOUR_US, 2, tmp + n + 1)
        tmp[n + 3] = 58
        kb_digits((rest // 60000000) % 60, 2, tmp + n + 4)
        tmp[n + 6] = 58
        kb_digits((rest // 1000000) % 60, 2, tmp + n + 7)
        n += 9
        if rest % 1000000:
            tmp[n] = 46
            kb_digits(rest % 1000000, 6, tmp + n + 1)
            n += 7
        if zone:
            tmp[n] = 90
            n += 1
    tmp[n] = 34
    return gb_put(b, tmp, n + 1)


cdef int je_value(XNode *nodes, int ni, Py_ssize_t i, GrowBuf *b, int *bad_node) noexcept nogil:
    """Logical row i of node ni as JSON: 0, -1 (no memory) or a reason X_*."""
    cdef XNode *n = &nodes[ni]
    cdef XNode *kid
    cdef Py_ssize_t p = n.offset + i, s, e, j
    cdef int32_t i32
    cdef int64_t i64
    cdef float f
    cdef double d
    cdef char tmp[64]
    cdef int k, rc, len_
    if x_null(n, p):
        if not (n.a & X_NULLABLE):
            bad_node[0] = ni
            return X_NULL
        return gb_put(b, b"null", 4)
    if n.kind == JE_BOOL:
        if (n.data[p >> 3] >> (p & 7)) & 1:
            return gb_put(b, b"true", 4)
        return gb_put(b, b"false", 5)
    if n.kind == JE_I32:
        memcpy(&i32, n.data + 4 * p, 4)
        len_ = kb_int_text(i32, tmp)
        return gb_put(b, tmp, len_)
    if n.kind == JE_I64:
        memcpy(&i64, n.data + 8 * p, 8)
        len_ = kb_int_text(<long long>i64, tmp)
        return gb_put(b, tmp, len_)
    if n.kind == JE_F32 or n.kind == JE_F64:
        if n.kind == JE_F32:
            memcpy(&f, n.data + 4 * p, 4)
            d = f
        else:
            memcpy(&d, n.data + 8 * p, 8)
        if not isfinite(d):
            bad_node[0] = ni
            return X_NOT_FINITE
        len_ = kb_real_text(d, n.kind == JE_F32, tmp)
        return gb_put(b, tmp, len_)
    if n.kind == JE_STRING or n.kind == JE_BASE64:
        s = n.offsets[p]
        e = n.offsets[p + 1]
        if n.kind == JE_BASE64:
            return js_put_base64(b, n.data + s, e - s)
        if (n.b & X_UTF8) and not kb_utf8_valid(n.data + s, e - s):
            bad_node[0] = ni
            return X_BAD_UTF8
        return js_put_string(b, n.data + s, e - s)
    if n.kind == JE_DECIMAL:
        len_ = kb_dec_text(n.data + 16 * p, n.b, tmp)
        return gb_put(b, tmp, len_)
    if n.kind == JE_DATE:
        memcpy(&i32, n.data + 4 * p, 4)
        return js_put_time(b, i32, True, False)
    if n.kind == JE_TIMESTAMP or n.kind == JE_TIMESTAMP_NTZ:
        memcpy(&i64, n.data + 8 * p, 8)
        return js_put_time(b, i64, False, n.kind == JE_TIMESTAMP)
    if n.kind == JE_OBJECT:
        if gb_put(b, b"{", 1) != 0:
            return -1
        for k in range(n.nkids):
            kid = &nodes[n.kid0 + k]
            if k and gb_put(b, b",", 1) != 0:
                return -1
            if gb_put(b, kid.blob, kid.blob_len) != 0:
                return -1
            rc = je_value(nodes, n.kid0 + k, i, b, bad_node)
            if rc:
                return rc
        return gb_put(b, b"}", 1)
    # JE_ARRAY, JE_MAP
    s = n.offsets[p]
    e = n.offsets[p + 1]
    if gb_put(b, b"[" if n.kind == JE_ARRAY else b"{", 1) != 0:
        return -1
    for j in range(s, e):
        if j > s and gb_put(b, b",", 1) != 0:
            return -1
        if n.kind == JE_MAP:
            kid = &nodes[n.kid0]
            rc = je_value(nodes, n.kid0, j, b, bad_node)
            if rc:
                return rc
            if gb_put(b, b":", 1) != 0:
                return -1
            rc = je_value(nodes, n.kid0 + 1, j, b, bad_node)
        else:
            rc = je_value(nodes, n.kid0, j, b, bad_node)
        if rc:
            return rc
    return gb_put(b, b"]" if n.kind == JE_ARRAY else b"}", 1)


def encode_schema(nodes, bytes header, bint protobuf):
    """Encodes node 0 row by row into header + the Protobuf message (its fields: node 0
    is a PE_MSG) or the JSON text. nodes: [(kind, a, b, array, kid0, nkids, blob or None,
    table or None)], every kid after its parent. Returns (offsets, data, validity,
    null_count, bad_row, bad_node, reason): a null top-level row is a null value;
    bad_row >= 0 when a row cannot be written (reason X_*, at bad_node)."""
    cdef int nn = len(nodes), k, bad_node = -1, rc = 0
    cdef XNode *xn = <XNode *>calloc(nn if nn else 1, sizeof(XNode))
    cdef GrowBuf offsets, data, validity
    cdef Py_ssize_t i, j, length, nulls = 0, bad_row = -1, p, blen
    cdef int32_t end32
    cdef const uint8_t *hp = header
    cdef Py_ssize_t hn = len(header)
    cdef int lo = PE_BOOL if protobuf else JE_BOOL
    cdef int hi = PE_LAST if protobuf else JE_LAST
    cdef const uint8_t[:] view
    memset(&offsets, 0, sizeof(GrowBuf))
    memset(&data, 0, sizeof(GrowBuf))
    memset(&validity, 0, sizeof(GrowBuf))
    keep = []
    try:
        if xn == NULL:
            raise MemoryError()
        if nn == 0:
            raise ValueError("no encoder nodes")
        for k, (kind, a, b, arr, kid0, nkids, blob, table) in enumerate(nodes):
            if not (lo <= kind <= hi) or kid0 < 0 or nkids < 0 or kid0 + nkids > nn:
                raise ValueError("malformed encoder nodes")
            if nkids and kid0 <= k:
                raise ValueError("malformed encoder nodes (a kid must come after its parent)")
            if kind in (PE_LIST, JE_ARRAY) and nkids != 1 or kind in (PE_MAP, JE_MAP) and nkids != 2:
                raise ValueError("malformed encoder nodes (a list has one kid, a map two)")
            bufs = arr.buffers()
            keep.append(bufs)
            xn[k].kind = kind
            xn[k].a = a
            xn[k].b = b
            xn[k].offset = arr.offset
            xn[k].length = len(arr)
            xn[k].kid0 = kid0
            xn[k].nkids = nkids
            xn[k].validity = <const uint8_t *><size_t>bufs[0].address if bufs[0] is not None else NULL
            if kind in (PE_BYTES, PE_ENUM, JE_STRING, JE_BASE64, PE_LIST, PE_MAP, JE_ARRAY, JE_MAP):
                if bufs[1] is None:
                    raise ValueError("malformed encoder nodes (no offsets)")
                xn[k].offsets = <const int32_t *><size_t>bufs[1].address
                if kind in (PE_BYTES, PE_ENUM, JE_STRING, JE_BASE64):
                    if bufs[2] is not None:
                        xn[k].data = <const uint8_t *><size_t>bufs[2].address
                    else:
                        xn[k].data = <const uint8_t *>b""     # every value empty
            elif kind not in (PE_MSG, JE_OBJECT):
                if bufs[1] is None:
                    raise ValueError("malformed encoder nodes (no data)")
                xn[k].data = <const uint8_t *><size_t>bufs[1].address
            if blob is not None:
                keep.append(blob)
                view = blob
                xn[k].blob = &view[0] if len(blob) else <const uint8_t *>b""
                xn[k].blob_len = len(blob)
            if table is not None:
                keep.append(table)
                view = table
                if len(table) % 12 or (len(table) and blob is None):
                    raise ValueError("malformed encoder nodes (an enum table is int32 triples)")
                xn[k].table = <const int32_t *>&view[0] if len(table) else NULL
                xn[k].ntable = len(table) // 12
                blen = xn[k].blob_len
                for j in range(xn[k].ntable):
                    if xn[k].table[3 * j] < 0 or xn[k].table[3 * j + 1] < 0 \
                            or xn[k].table[3 * j] + xn[k].table[3 * j + 1] > blen:
                        raise ValueError("malformed encoder nodes (an enum name outside the blob)")
        if protobuf and xn[0].kind != PE_MSG:
            raise ValueError("the top level of a Protobuf value is a message")
        length = xn[0].length
        if (gb_reserve(&offsets, 4 * (length + 1)) != 0 or gb_reserve(&validity, length // 8 + 1) != 0
                or gb_reserve(&data, length * 16 + 64) != 0):
            raise MemoryError()
        end32 = 0
        gb_put(&offsets, &end32, 4)
        validity.length = length // 8 + 1
        with nogil:
            for i in range(length):
                p = xn[0].offset + i
                if x_null(&xn[0], p):
                    nulls += 1
                else:
                    validity.data[i >> 3] |= <uint8_t>(1 << (i & 7))
                    rc = gb_put(&data, hp, hn)
                    if rc == 0:
                        if protobuf:
                            rc = pe_fields(xn, 0, i, &data, &bad_node)
                        else:
                            rc = je_value(xn, 0, i, &data, &bad_node)
                    if rc:
                        bad_row = i if rc > 0 else -2
                        break
                if data.length > INT32_LIMIT:
                    bad_row = -3
                    break
                end32 = <int32_t>data.length
                if gb_put(&offsets, &end32, 4) != 0:
                    bad_row = -2
                    break
        if bad_row == -2:
            raise MemoryError()
        if bad_row == -3:
            raise OverflowError("the encoded values of one Arrow batch exceed 2 GiB")
        if bad_row >= 0:
            return None, None, None, 0, bad_row, bad_node, rc
        return _take(&offsets), _take(&data), _take(&validity) if nulls else None, nulls, -1, -1, 0
    finally:
        free(xn)
        free(offsets.data)
        free(data.data)
        free(validity.data)

# cython: language_level=3
"""Wire primitives for the other native modules: big-endian integers and zigzag varints.

All are `static inline` C (include/kb_wire.h); readers are bounds-checked against `end`.
"""
from libc.stdint cimport uint8_t, uint16_t, uint32_t, uint64_t, int32_t, int64_t
from libc.stdlib cimport realloc

cdef extern from "kb_wire.h" nogil:
    uint16_t kb_load_be16(const uint8_t *p)
    uint32_t kb_load_be32(const uint8_t *p)
    uint64_t kb_load_be64(const uint8_t *p)
    void kb_store_be16(uint8_t *p, uint16_t v)
    void kb_store_be32(uint8_t *p, uint32_t v)
    void kb_store_be64(uint8_t *p, uint64_t v)
    int kb_read_uvarint(const uint8_t *p, const uint8_t *end, int max_bytes, uint64_t *out)
    int kb_read_varint(const uint8_t *p, const uint8_t *end, int32_t *out)
    int kb_read_varlong(const uint8_t *p, const uint8_t *end, int64_t *out)
    int kb_write_uvarint(uint8_t *p, uint64_t v)
    int kb_write_varint(uint8_t *p, int32_t v)
    int kb_write_varlong(uint8_t *p, int64_t v)
    int kb_varint_size(int32_t v)
    int kb_varlong_size(int64_t v)


cdef inline void kb_export_bytes(Py_buffer *buf, void *data, Py_ssize_t length, bint readonly) noexcept:
    """Fills a __getbuffer__ request for `length` contiguous bytes at `data`; the caller
    sets buf.obj (Cython keeps its reference)."""
    buf.buf = data
    buf.len = length
    buf.readonly = readonly
    buf.itemsize = 1
    buf.format = NULL
    buf.ndim = 1
    buf.shape = NULL
    buf.strides = NULL
    buf.suboffsets = NULL
    buf.internal = NULL


cdef inline int kb_reserve(uint8_t **buf, Py_ssize_t *cap, Py_ssize_t need, Py_ssize_t first) except -1:
    """Grows a realloc'd output buffer to hold at least `need` bytes (doubling, from
    `first` bytes); MemoryError when it cannot."""
    cdef Py_ssize_t size
    cdef uint8_t *grown
    if need <= cap[0]:
        return 0
    size = cap[0] * 2 if cap[0] else first
    while size < need:
        size *= 2
    grown = <uint8_t *>realloc(buf[0], size)
    if grown == NULL:
        raise MemoryError()
    buf[0] = grown
    cap[0] = size
    return 0

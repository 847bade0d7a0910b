# cython: language_level=3
"""Kafka's variable-length integers from Python (the C versions live in kb_wire.h), and
a bytearray allocated without being zeroed (a receive buffer the socket fills).

read_* functions take any buffer and a position and return (value, next_position);
they raise ValueError naming the position when the input ends inside a varint or the
varint runs longer than its type allows.
"""
from libc.stdint cimport uint8_t, uint64_t, int32_t, int64_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE
from cpython.bytes cimport PyBytes_FromStringAndSize
from cpython.bytearray cimport PyByteArray_FromStringAndSize


cdef object _read(object data, Py_ssize_t pos, int kind):
    cdef Py_buffer view
    cdef int n
    cdef int32_t v32
    cdef int64_t v64
    cdef uint64_t u
    # a Python object: left untyped, Cython would infer one C type spanning int32, int64
    # and uint64 (uint64), turning every negative value into a huge positive one
    cdef object value
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        if pos < 0 or pos > view.len:
            raise ValueError(f"position {pos} outside a buffer of {view.len} bytes")
        p = <const uint8_t *>view.buf
        end = p + view.len
        if kind == 0:
            n = kb_read_varint(p + pos, end, &v32)
            value = v32
        elif kind == 1:
            n = kb_read_varlong(p + pos, end, &v64)
            value = v64
        else:
            n = kb_read_uvarint(p + pos, end, 5, &u)
            value = u
        if n == 0:
            raise ValueError(f"truncated varint at byte {pos}")
        if n < 0:
            raise ValueError(f"varint too long at byte {pos}")
        return value, pos + n
    finally:
        PyBuffer_Release(&view)


def read_varint(data, Py_ssize_t pos=0):
    """Zigzag int32 varint at `pos` -> (value, next_pos)."""
    return _read(data, pos, 0)


def read_varlong(data, Py_ssize_t pos=0):
    """Zigzag int64 varlong at `pos` -> (value, next_pos)."""
    return _read(data, pos, 1)


def read_unsigned_varint(data, Py_ssize_t pos=0):
    """Unsigned varint (up to 32 bits, the protocol's compact lengths) -> (value, next_pos)."""
    value, nxt = _read(data, pos, 2)
    if value > 0xFFFFFFFF:
        raise ValueError(f"unsigned varint out of range at byte {pos}")
    return value, nxt


def write_varint(int32_t value):
    """Zigzag int32 varint bytes."""
    cdef uint8_t tmp[10]
    cdef int n = kb_write_varint(tmp, value)
    return PyBytes_FromStringAndSize(<char *>tmp, n)


def write_varlong(int64_t value):
    """Zigzag int64 varlong bytes."""
    cdef uint8_t tmp[10]
    cdef int n = kb_write_varlong(tmp, value)
    return PyBytes_FromStringAndSize(<char *>tmp, n)


def write_unsigned_varint(unsigned int value):
    """Unsigned varint bytes (the protocol's compact lengths and tag numbers)."""
    cdef uint8_t tmp[10]
    cdef int n = kb_write_uvarint(tmp, value)
    return PyBytes_FromStringAndSize(<char *>tmp, n)


def uninitialized_bytearray(Py_ssize_t size):
    """A bytearray of `size` bytes whose content is whatever malloc returned: bytearray(size)
    writes zeros over it first, which for a frame about to be received whole is a pass over
    its memory for nothing (and commits every page of a fresh mapping at once, where a
    receive commits them as bytes arrive). Only for a buffer that is written whole before
    it is read. MemoryError when it cannot be had; ValueError below 0."""
    if size < 0:
        raise ValueError(f"negative size {size}")
    return PyByteArray_FromStringAndSize(NULL, size)

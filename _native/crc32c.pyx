# cython: language_level=3
"""CRC-32C (Castagnoli) over any buffer, without copying.

The implementation (SSE4.2 / ARMv8 CRC instructions, or slicing-by-8 tables) is chosen
once, at import, from what the CPU reports; `implementation()` names it.
Buffers are taken through the buffer protocol (bytes, bytearray, memoryview, mmap,
pyarrow.Buffer, numpy arrays ...), read-only, and the GIL is released while summing
buffers of 64 KiB and more.
"""
from libc.stdint cimport uint32_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE, PyBUF_ANY_CONTIGUOUS

kb_crc32c_init()

cdef enum:
    GIL_RELEASE_BYTES = 65536


cdef uint32_t crc32c_raw(uint32_t crc, const void *buf, size_t length) noexcept nogil:
    return kb_crc32c(crc, buf, length)


cdef object _run(int which, object data, uint32_t crc):
    cdef Py_buffer view
    cdef uint32_t out
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE | PyBUF_ANY_CONTIGUOUS)
    try:
        if view.len >= GIL_RELEASE_BYTES:
            with nogil:
                if which == 0:
                    out = kb_crc32c(crc, view.buf, <size_t>view.len)
                elif which == 1:
                    out = kb_crc32c_sw(crc, view.buf, <size_t>view.len)
                else:
                    out = kb_crc32c_hw(crc, view.buf, <size_t>view.len)
        else:
            if which == 0:
                out = kb_crc32c(crc, view.buf, <size_t>view.len)
            elif which == 1:
                out = kb_crc32c_sw(crc, view.buf, <size_t>view.len)
            else:
                out = kb_crc32c_hw(crc, view.buf, <size_t>view.len)
    finally:
        PyBuffer_Release(&view)
    return out


def crc32c(data, unsigned int crc=0):
    """CRC-32C of `data`, continuing from `crc` (the CRC-32C of the preceding bytes)."""
    return _run(0, data, crc)


def crc32c_software(data, unsigned int crc=0):
    """CRC-32C with the portable table path, whatever the CPU (for tests and benchmarks)."""
    return _run(1, data, crc)


def crc32c_hardware(data, unsigned int crc=0):
    """CRC-32C with the CPU's CRC instructions; RuntimeError when the CPU lacks them."""
    if not kb_crc32c_hw_available():
        raise RuntimeError("this CPU has no CRC-32C instructions (SSE4.2 / ARMv8 CRC)")
    return _run(2, data, crc)


def hardware_available():
    """True when the CPU has CRC-32C instructions (SSE4.2 on x86_64, CRC on aarch64)."""
    return bool(kb_crc32c_hw_available())


def implementation():
    """The implementation in use: 'sse4.2', 'armv8-crc' or 'slicing-by-8'."""
    return kb_crc32c_impl().decode()

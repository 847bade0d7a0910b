# cython: language_level=3
"""C-level CRC-32C for other native modules: `from broker._native.crc32c cimport crc32c_raw`."""
from libc.stdint cimport uint32_t

cdef extern from "kb_crc32c.h" nogil:
    void kb_crc32c_init()
    uint32_t kb_crc32c(uint32_t crc, const void *buf, size_t length)
    uint32_t kb_crc32c_sw(uint32_t crc, const void *buf, size_t length)
    uint32_t kb_crc32c_hw(uint32_t crc, const void *buf, size_t length)
    int kb_crc32c_hw_available()
    const char *kb_crc32c_impl()

# Callable from any module that cimports this one (shared through the module's C API,
# so the tables live once, in broker._native.crc32c).
cdef uint32_t crc32c_raw(uint32_t crc, const void *buf, size_t length) noexcept nogil

# cython: language_level=3
"""Kafka's compression codecs at the C level, for the other native modules (records).

The codec of a batch is bits 0-2 of its attributes (records.pxd).
"""
from libc.stdint cimport uint8_t

cdef enum:
    CODEC_NONE = 0
    CODEC_GZIP = 1
    CODEC_SNAPPY = 2
    CODEC_LZ4 = 3
    CODEC_ZSTD = 4

cdef object inflate(int codec, const uint8_t *data, Py_ssize_t length, Py_ssize_t limit)

# cython: language_level=3
"""Kafka's default partitioner for Python callers (the client's producer); the C
functions are in partitioner.pxd, where spark_encode inlines them."""
from libc.stdint cimport uint8_t, int32_t
from cpython.buffer cimport PyObject_GetBuffer, PyBuffer_Release, PyBUF_SIMPLE


def murmur2(data):
    """Kafka's murmur2 of a bytes-like object, as a signed int32."""
    cdef Py_buffer view
    PyObject_GetBuffer(data, &view, PyBUF_SIMPLE)
    try:
        return c_murmur2(<const uint8_t *>view.buf, <int32_t>view.len)
    finally:
        PyBuffer_Release(&view)


def partition_for_key(key, int32_t num_partitions):
    """The partition Kafka's default partitioner gives a record with this key."""
    cdef Py_buffer view
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    PyObject_GetBuffer(key, &view, PyBUF_SIMPLE)
    try:
        return c_partition_of(<const uint8_t *>view.buf, <int32_t>view.len, num_partitions)
    finally:
        PyBuffer_Release(&view)

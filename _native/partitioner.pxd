# cython: language_level=3
"""Kafka's default partitioner at the C level, for the other native modules (spark_encode).

A keyed record goes to partition (murmur2(key) & 0x7FFFFFFF) % partitions, as Kafka's
Java client puts it (org.apache.kafka.common.utils.Utils.murmur2, seed 0x9747B28C, the
key's bytes read as little-endian 32-bit words): keys land where Kafka's own tools put
them.
"""
from libc.stdint cimport uint8_t, int32_t, uint32_t


cdef inline int32_t c_murmur2(const uint8_t *data, int32_t length) noexcept nogil:
    """Kafka's murmur2, as a signed int32."""
    cdef uint32_t m = 0x5BD1E995U
    cdef uint32_t h = 0x9747B28CU ^ <uint32_t>length
    cdef int32_t n4 = length // 4
    cdef int32_t i
    cdef uint32_t k
    for i in range(n4):
        k = (<uint32_t>data[4 * i] | (<uint32_t>data[4 * i + 1] << 8) | (<uint32_t>data[4 * i + 2] << 16)
             | (<uint32_t>data[4 * i + 3] << 24))
        k *= m
        k ^= k >> 24
        k *= m
        h *= m
        h ^= k
    i = n4 * 4
    if (length & 3) == 3:
        h ^= <uint32_t>data[i + 2] << 16
    if (length & 3) >= 2:
        h ^= <uint32_t>data[i + 1] << 8
    if (length & 3) >= 1:
        h ^= <uint32_t>data[i]
        h *= m
    h ^= h >> 13
    h *= m
    h ^= h >> 15
    return <int32_t>h


cdef inline int32_t c_partition_of(const uint8_t *key, int32_t length, int32_t num_partitions) noexcept nogil:
    """The partition of a keyed record among num_partitions (> 0)."""
    return (c_murmur2(key, length) & 0x7FFFFFFF) % num_partitions

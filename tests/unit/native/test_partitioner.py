"""Kafka's default partitioner in the native core: murmur2 as Kafka's Utils.murmur2
computes it (the values of Kafka's own unit test), and the partition of a key."""

import pytest

from broker.native import murmur2, partition_for_key

KAFKA_CASES = [
    (b"21", -973932308),
    (b"foobar", -790332482),
    (b"a-little-bit-long-string", -985981536),
    (b"a-little-bit-longer-string", -1486304829),
    (b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
    (b"abc", 479470107),
]


@pytest.mark.parametrize("data, expected", KAFKA_CASES)
def test_murmur2_is_kafkas(data, expected):
    assert murmur2(data) == expected
    assert murmur2(bytearray(data)) == murmur2(memoryview(data)) == expected


def test_every_tail_length():
    # 0 to 3 bytes after the last whole word take different branches
    values = {murmur2(b"k" * n) for n in range(12)}
    assert len(values) == 12


def test_partition_for_key_is_the_positive_hash_modulo():
    for data, h in KAFKA_CASES:
        for n in (1, 3, 7, 100):
            assert partition_for_key(data, n) == (h & 0x7FFFFFFF) % n


def test_partition_for_key_refuses_no_partitions():
    with pytest.raises(ValueError, match="num_partitions"):
        partition_for_key(b"k", 0)

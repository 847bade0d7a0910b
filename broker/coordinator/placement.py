"""Where a coordinator key lives: its partition of the coordinator's internal topic.

Kafka places a group id (GroupMetadataManager.partitionFor), a transactional id
(TransactionStateManager.partitionFor) and a share group's key alike:
`Utils.abs(key.hashCode()) % partitions`, with Java's String.hashCode. Clients and
Kafka's own tools compute the same partition, so it must be Java's to the bit.
"""

from __future__ import annotations


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (over UTF-16 code units), as a signed int32."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(key: str, partitions: int) -> int:
    """Utils.abs(key.hashCode()) % partitions, where Utils.abs maps Integer.MIN_VALUE to 0."""
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions

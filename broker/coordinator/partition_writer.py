"""What a coordinator needs of its internal topic's partitions and of the cluster: the
small interfaces the coordinator layer sees them through (Kafka's PartitionWriter of
coordinator-common). server/partition_writer.py implements PartitionWriter on the
broker's ReplicaManager; the metadata cache is a ClusterView. Neither the runtime nor
the coordinators above it see the broker.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Protocol

from broker.cluster.metadata import BrokerInfo, TopicInfo
from broker.log import TopicPartition


class PartitionWrite(Protocol):
    """One append to a coordinator's partition (PartitionWriter.append). Its codes are
    Kafka's append errors; each coordinator maps them to its own answers."""

    @property
    def error(self) -> int:
        """0 when the records are in the local log; else why the append failed
        (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS, MESSAGE_TOO_LARGE,
        KAFKA_STORAGE_ERROR ...)."""
        ...

    @property
    def error_message(self) -> str | None: ...

    @property
    def last_offset(self) -> int: ...

    async def wait(self) -> int:
        """0 once the high watermark covers the records (with the ISR still at least
        min.insync.replicas) and the flush policy is met; else NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        NOT_LEADER_OR_FOLLOWER (no longer leading, or the records lost meanwhile),
        KAFKA_STORAGE_ERROR, REQUEST_TIMED_OUT — or the append's own error."""
        ...


class PartitionWriter(Protocol):
    """What a coordinator needs of the partitions of its internal topic."""

    def is_leader(self, tp: TopicPartition) -> bool: ...

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The partition's leader epoch: the coordinator epoch of what is loaded from it."""
        ...

    def append(self, tp: TopicPartition, records: bytearray, timeout_ms: int) -> PartitionWrite:
        """Appends as leader with acks=all, synchronously: when it returns without an
        error the records are in the local log (whatever happens next, a crash of this
        process included, they are there); `wait()` on the result waits, at most
        timeout_ms, for the ISR."""
        ...

    def loadable_range(self, tp: TopicPartition) -> tuple[int, int]:
        """(log start offset, log end offset): a new leader loads up to its log end, as
        Kafka's coordinators do — its high watermark may still lag behind writes the
        previous leader acknowledged (they are in its log: it was in the ISR)."""
        ...

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, end: int) -> bytes:
        """The whole batches from `offset` below `end`, about max_bytes of them."""
        ...


class ClusterView(Protocol):
    """What a coordinator reads of the cluster (the metadata cache)."""

    def topic(self, name: str) -> TopicInfo | None: ...
    def brokers(self) -> Mapping[int, BrokerInfo]: ...
    async def wait_for(self, predicate: Callable[[], bool], timeout: float) -> bool: ...

"""The coordinator runtime's PartitionWriter (broker/coordinator/partition_writer.py), which
the group and transaction coordinators write and load through, on this broker's replicas:
every write is one ReplicaManager.append_records with acks=-1 and origin COORDINATOR (so
__consumer_offsets, an internal topic, accepts it), appended synchronously; its wait —
the high watermark covering the records, the topic's flush policy — is the replication
layer's, the same as an acks=all produce's.

The codes are the replication layer's (NOT_LEADER_OR_FOLLOWER, NOT_ENOUGH_REPLICAS,
NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT, KAFKA_STORAGE_ERROR ...); each
coordinator maps them as Kafka's does (GroupMetadataManager, TransactionStateManager).

Kafka's CoordinatorPartitionWriter plays the same part for its new group coordinator.
"""

from __future__ import annotations

from broker.cluster.replica.delayed_produce import AppendResult
from broker.cluster.replica.manager import AppendOrigin, ReplicaManager
from broker.log import TopicPartition


class CoordinatorWrite:
    """One write of a coordinator (a PartitionWrite)."""

    __slots__ = ("_result",)

    def __init__(self, result: AppendResult) -> None:
        self._result = result

    @property
    def error(self) -> int:
        return self._result.partitions[0].error

    @property
    def error_message(self) -> str | None:
        return self._result.partitions[0].error_message

    @property
    def last_offset(self) -> int:
        return self._result.partitions[0].last_offset

    async def wait(self) -> int:
        return (await self._result.wait())[0].error


class ReplicaPartitionWriter:
    def __init__(self, replicas: ReplicaManager):
        self.replicas = replicas

    def is_leader(self, tp: TopicPartition) -> bool:
        return self.replicas.is_leader(tp)

    def leader_epoch(self, tp: TopicPartition) -> int:
        """The partition's leader epoch (the transaction coordinator's coordinator epoch)."""
        part = self.replicas.partitions.get(tp)
        return part.leader_epoch if part is not None else -1

    def append(self, tp: TopicPartition, records: bytearray, timeout_ms: int) -> CoordinatorWrite:
        return CoordinatorWrite(self.replicas.append_records([(tp, records)], -1, timeout_ms, AppendOrigin.COORDINATOR))

    def loadable_range(self, tp: TopicPartition) -> tuple[int, int]:
        lg = self.replicas.partitions[tp].log
        return lg.log_start_offset, lg.log_end_offset

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, end: int) -> bytes:
        return self.replicas.partitions[tp].log.read_bytes(offset, max_bytes, end)

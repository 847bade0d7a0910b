"""The group coordinator's PartitionWriter (broker/group/metadata_manager.py) on this
broker's replicas: appends as leader with acks=all, waits in the purgatory until the
high watermark covers the records (as an acks=all produce: then checks the ISR against
min.insync.replicas), applies the topic's flush policy.

Kafka's CoordinatorPartitionWriter plays the same part for its new group coordinator.
"""
from __future__ import annotations

import asyncio

from broker.cluster.replica.manager import ReplicaManager
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError


class ReplicaPartitionWriter:
    def __init__(self, replicas: ReplicaManager):
        self.replicas = replicas
        self.purgatory = replicas.purgatory

    def is_leader(self, tp: TopicPartition) -> bool:
        return self.replicas.is_leader(tp)

    def append(self, tp: TopicPartition, records: bytearray) -> int:
        part = self.replicas.get(tp)
        if part is None:
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part.append_as_leader(records, -1).last_offset

    async def wait_committed(self, tp: TopicPartition, last_offset: int, timeout: float) -> int:
        """As a produce with acks=all waits (handlers/produce.py): 0 once the high watermark
        is past `last_offset` and the ISR is still at least min.insync.replicas (else
        COORDINATOR_NOT_AVAILABLE, Kafka's answer to NOT_ENOUGH_REPLICAS_AFTER_APPEND);
        NOT_COORDINATOR when this broker stopped leading, or leads again but lost the
        records meanwhile; REQUEST_TIMED_OUT."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        epoch: int | None = None
        while True:
            part = self.replicas.get(tp)
            if part is None or not part.is_leader:
                return ErrorCode.NOT_COORDINATOR
            if epoch is None:
                epoch = part.log.leader_epochs.epoch_for_offset(last_offset)
            elif part.leader_epoch != epoch and not part.holds(epoch, last_offset + 1):
                return ErrorCode.NOT_COORDINATOR
            if part.log.high_watermark > last_offset:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.purgatory.wait_for_high_watermark(tp, remaining)
        if not part.enough_replicas():
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if part.log.needs_flush():
            flushed = part.log.schedule_flush()
            if flushed is not None:
                await flushed
        return 0

    def loadable_range(self, tp: TopicPartition) -> tuple[int, int]:
        lg = self.replicas.partitions[tp].log
        return lg.log_start_offset, lg.log_end_offset

    def read(self, tp: TopicPartition, offset: int, max_bytes: int, end: int) -> bytes:
        return self.replicas.partitions[tp].log.read_bytes(offset, max_bytes, end)

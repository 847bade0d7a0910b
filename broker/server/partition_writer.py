"""The group coordinator's PartitionWriter (broker/group/metadata_manager.py) on this
broker's replicas: appends as leader with acks=all, waits in the purgatory until the
high watermark covers the records, applies the topic's flush policy.

Kafka's CoordinatorPartitionWriter plays the same part for its new group coordinator.
"""
from __future__ import annotations

import asyncio

from broker.cluster.replica.manager import ReplicaManager
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.server.purgatory import Purgatory


class ReplicaPartitionWriter:
    def __init__(self, replicas: ReplicaManager, purgatory: Purgatory):
        self.replicas = replicas
        self.purgatory = purgatory

    def is_leader(self, tp: TopicPartition) -> bool:
        return self.replicas.is_leader(tp)

    def append(self, tp: TopicPartition, records: bytearray) -> int:
        part = self.replicas.get(tp)
        if part is None:
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part.append_as_leader(records, -1).last_offset

    async def wait_committed(self, tp: TopicPartition, last_offset: int, timeout: float) -> int:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            part = self.replicas.get(tp)
            if part is None or not part.is_leader:
                return ErrorCode.NOT_COORDINATOR
            if part.log.high_watermark > last_offset:
                break
            remaining = deadline - loop.time()
            if remaining <= 0:
                return ErrorCode.REQUEST_TIMED_OUT
            await self.purgatory.wait_for_high_watermark(tp, remaining)
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

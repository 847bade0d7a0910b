"""A partition as this broker sees it: its log plus leadership, ISR and high watermark
(Kafka's Partition). The high watermark is the smallest log end offset among the ISR;
on a broker alone (ISR = itself) it follows the log end at once.

Every move of the log end or of the high watermark is reported to the listener (the
server's purgatory, where waiting fetches and produces sleep), so nothing that waits
polls.

All methods run on the event loop thread.
"""
from __future__ import annotations

import time
from typing import Protocol

from broker.cluster.metadata import PartitionState
from broker.log import Log, LogAppendInfo, TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError


class PartitionListener(Protocol):
    """Told when a partition moves (the server's purgatory implements it)."""

    def high_watermark_moved(self, tp: TopicPartition) -> None: ...
    def log_end_moved(self, tp: TopicPartition) -> None: ...
    def partition_changed(self, tp: TopicPartition) -> None: ...


class _NoListener:
    def high_watermark_moved(self, tp: TopicPartition) -> None:
        pass

    def log_end_moved(self, tp: TopicPartition) -> None:
        pass

    def partition_changed(self, tp: TopicPartition) -> None:
        pass


NO_LISTENER: PartitionListener = _NoListener()


class Partition:
    def __init__(self, tp: TopicPartition, log: Log, state: PartitionState, broker_id: int,
                 listener: PartitionListener = NO_LISTENER):
        self.tp = tp
        self.log = log
        self.broker_id = broker_id
        self.state = state
        self.listener = listener
        # follower id -> (log end offset, last caught-up time)
        self.follower_leo: dict[int, int] = {}
        self.follower_caught_up: dict[int, float] = {}
        self._become_leader_if_elected()

    def _become_leader_if_elected(self) -> None:
        """A new leader records where its epoch starts (Kafka's makeLeader)."""
        if self.is_leader:
            self.log.leader_epochs.assign(self.state.leader_epoch, self.log.log_end_offset)

    @property
    def is_leader(self) -> bool:
        return self.state.leader == self.broker_id

    @property
    def leader_epoch(self) -> int:
        return self.state.leader_epoch

    def update_state(self, state: PartitionState) -> None:
        self.state = state
        self._become_leader_if_elected()
        self.maybe_increment_high_watermark()
        self.listener.partition_changed(self.tp)

    def check_leader(self, current_leader_epoch: int = -1) -> None:
        """Raises NOT_LEADER_OR_FOLLOWER / FENCED / UNKNOWN leader epoch as Kafka does."""
        if not self.is_leader:
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        if current_leader_epoch >= 0:
            if current_leader_epoch < self.state.leader_epoch:
                raise KafkaProtocolError(ErrorCode.FENCED_LEADER_EPOCH)
            if current_leader_epoch > self.state.leader_epoch:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_LEADER_EPOCH)

    def append_as_leader(self, records, required_acks: int) -> LogAppendInfo:
        """Validates, assigns offsets and appends; advances the high watermark when the
        ISR allows. acks=-1 below min.insync.replicas -> NOT_ENOUGH_REPLICAS."""
        self.check_leader()
        if required_acks == -1 and len(self.state.isr) < self.log.config.min_insync_replicas:
            raise KafkaProtocolError(ErrorCode.NOT_ENOUGH_REPLICAS,
                                     f"ISR {self.state.isr} is smaller than min.insync.replicas "
                                     f"{self.log.config.min_insync_replicas}")
        info = self.log.append_as_leader(records, self.state.leader_epoch)
        if not info.duplicate:
            self.listener.log_end_moved(self.tp)
            self.maybe_increment_high_watermark()
        return info

    def maybe_increment_high_watermark(self) -> None:
        if not self.is_leader:
            return
        leo = self.log.log_end_offset
        for replica in self.state.isr:
            if replica != self.broker_id:
                leo = min(leo, self.follower_leo.get(replica, 0))
        if leo > self.log.high_watermark and self.log.update_high_watermark(leo):
            self.listener.high_watermark_moved(self.tp)

    def update_follower(self, replica_id: int, fetch_offset: int) -> None:
        """A follower fetched from `fetch_offset`: everything below is on its log."""
        self.follower_leo[replica_id] = fetch_offset
        if fetch_offset >= self.log.log_end_offset:
            self.follower_caught_up[replica_id] = time.monotonic()
        self.maybe_increment_high_watermark()

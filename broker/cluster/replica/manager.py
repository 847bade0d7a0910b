"""ReplicaManager: the partitions this broker hosts (Kafka's ReplicaManager).

It owns the partition map, creates each partition's log when the broker learns it is a
replica, applies leadership changes (become leader / become follower) and stops and
deletes replicas. Request handlers look partitions up here:

    partition(topic, p)                 the local replica or UNKNOWN_TOPIC_OR_PARTITION /
                                        NOT_LEADER_OR_FOLLOWER (known topic, not hosted here)
    leader_partition(topic, p, epoch)   the same, and it must lead at that leader epoch

Listeners registered with `on_leadership_change` learn which partitions this broker
started or stopped leading (the group coordinator loads and unloads its
__consumer_offsets partitions this way).

All methods run on the event loop thread.
"""
from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable

from broker.cluster.cache import MetadataCache
from broker.cluster.metadata import PartitionState
from broker.cluster.replica.partition import NO_LISTENER, Partition, PartitionListener
from broker.log import LogManager, TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError

log = logging.getLogger(__name__)

LeadershipListener = Callable[[list[TopicPartition], list[TopicPartition]], None]


class ReplicaManager:
    def __init__(self, broker_id: int, logs: LogManager, metadata: MetadataCache,
                 listener: PartitionListener = NO_LISTENER):
        self.broker_id = broker_id
        self.logs = logs
        self.metadata = metadata
        self.listener = listener
        self.partitions: dict[TopicPartition, Partition] = {}
        self._leadership_listeners: list[LeadershipListener] = []

    def on_leadership_change(self, fn: LeadershipListener) -> None:
        """fn(became_leader, became_follower) after every change of local leadership."""
        self._leadership_listeners.append(fn)

    # ------------------------------------------------------------------ lookups

    def get(self, tp: TopicPartition) -> Partition | None:
        return self.partitions.get(tp)

    def partition(self, topic: str, index: int) -> Partition:
        """The local partition or KafkaProtocolError(UNKNOWN_TOPIC_OR_PARTITION /
        NOT_LEADER_OR_FOLLOWER)."""
        part = self.partitions.get(TopicPartition(topic, index))
        if part is None:
            if self.metadata.partition_state(topic, index) is None:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            raise KafkaProtocolError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
        return part

    def leader_partition(self, topic: str, index: int, current_leader_epoch: int = -1) -> Partition:
        part = self.partition(topic, index)
        part.check_leader(current_leader_epoch)
        return part

    def is_leader(self, tp: TopicPartition) -> bool:
        part = self.partitions.get(tp)
        return part is not None and part.is_leader

    # ------------------------------------------------------------------ state changes

    def apply_states(self, topic: str, topic_id: uuid.UUID, states: Iterable[PartitionState]) -> None:
        """Makes this broker a replica of each partition it is assigned (creating or
        opening its log) in the role the state gives it."""
        became_leader: list[TopicPartition] = []
        became_follower: list[TopicPartition] = []
        for state in states:
            if self.broker_id not in state.replicas:
                continue
            tp = TopicPartition(topic, state.partition)
            part = self.partitions.get(tp)
            was_leader = part is not None and part.is_leader
            if part is None:
                lg = self.logs.get_or_create(tp, topic_id)
                lg.update_config(self.metadata.log_config(topic))
                part = self.partitions[tp] = Partition(tp, lg, state, self.broker_id, self.listener)
                # After a crash the checkpointed high watermark is older than the log:
                # a leader moves it up to what its ISR holds at once (Kafka does so on
                # becoming leader), or acknowledged records stay invisible until the
                # next append.
                part.maybe_increment_high_watermark()
            else:
                part.update_state(state)
            if part.is_leader and not was_leader:
                became_leader.append(tp)
            elif was_leader and not part.is_leader:
                became_follower.append(tp)
        self._tell(became_leader, became_follower)

    def stop_replicas(self, tps: Iterable[TopicPartition], delete: bool) -> None:
        """No longer a replica of these partitions (deleting their logs when `delete`)."""
        stopped_leading = []
        for tp in tps:
            part = self.partitions.pop(tp, None)
            if part is not None and part.is_leader:
                stopped_leading.append(tp)
            if delete:
                self.logs.delete(tp)
            self.listener.partition_changed(tp)
        self._tell([], stopped_leading)

    def _tell(self, became_leader: list[TopicPartition], became_follower: list[TopicPartition]) -> None:
        if not (became_leader or became_follower):
            return
        for fn in self._leadership_listeners:
            try:
                fn(became_leader, became_follower)
            except Exception:
                log.exception("leadership listener %r failed", fn)

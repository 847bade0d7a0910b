"""The share coordinator (KIP-932; Kafka's ShareCoordinatorService and
ShareCoordinatorShard): where share groups' share-partition state lives, on the internal
topic __share_group_state, on the coordinator runtime (broker/coordinator/runtime.py).

A share-partition — one group's view of one topic partition — is keyed
"group:topic id:partition" (records.coordinator_key) and placed on one partition of
the topic like a group id on __consumer_offsets; the broker leading that partition is
the share-partition's share coordinator (FindCoordinator key type 2). Its state: the
state epoch (the group coordinator's, bumped when the state is initialized again, e.g.
by an offset reset), the leader epoch of the share-partition leader that last read it,
the start offset, the delivery-complete count (KIP-1226) and the state batches (ranges of
offsets past the start offset with their delivery state and count; records.StateBatch).

What the five state APIs do, as Kafka 4.4's shard does it:

- Initialize (stateEpoch, startOffset) writes a snapshot (snapshot epoch one more than
  the last, or 0), leader epoch 0, no batches; FENCED_STATE_EPOCH below the stored state
  epoch.
- Read (leaderEpoch) answers the state; a share-partition never initialized is
  INVALID_REQUEST ("Read operation on uninitialized share partition not allowed.");
  FENCED_LEADER_EPOCH below the stored leader epoch; a new leader epoch is written (an
  update record) before the answer.
- Write (stateEpoch, leaderEpoch, startOffset, batches, deliveryCompleteCount) writes an
  update record — a snapshot every `share.coordinator.snapshot.update.records.per.snapshot`
  updates, with all batches combined. The start offset only moves forward. FENCED_LEADER_EPOCH
  or FENCED_STATE_EPOCH below the stored epochs; INVALID_REQUEST before Initialize.
- Delete writes the snapshot key's tombstone (nothing for a share-partition not there).
- ReadSummary answers the start offset, epochs and delivery-complete count without
  fencing (-1 start offset when never initialized).

Each also answers INVALID_REQUEST for a zero topic id, a negative partition (or epoch)
and UNKNOWN_TOPIC_OR_PARTITION for a partition the metadata does not have.

Writes go through the runtime with acks=all and wait for the ISR; what they change is
applied to the shard only then, by replaying the record just written (so what is
served is what a new coordinator replays), and only if the partition is still loaded at
the epoch the write began under (else NOT_COORDINATOR). Writes to one share-partition
are serialized (one lock per key); different share-partitions proceed together. A read
sees only state whose record the ISR has.

Every `share.coordinator.state.topic.prune.interval.ms` the partitions led here are pruned
as Kafka's prune job does: their start moves (DeleteRecords) up to the lowest offset of
the share-partitions' last snapshots, below which a load needs nothing.

The topic is created on first use (FindCoordinator) as Kafka 4.4 creates it:
cleanup.policy=delete with retention.ms=-1 (compaction would keep only a share-partition's
last update record and lose the others), share.coordinator.state.topic.* for partitions,
replication factor, min ISR and segment size.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from broker.coordinator.loader import LoadSummary
from broker.coordinator.partition_writer import ClusterView, PartitionWriter
from broker.coordinator.runtime import CoordinatorRuntime
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.share import records as R
from broker.share.records import Key, ShareGroupOffset, StateBatch

log = logging.getLogger(__name__)

STATE_TOPIC = "__share_group_state"

#: Kafka's messages for the shard's INVALID_REQUEST answers
NULL_TOPIC_ID = "The topic id cannot be null."
NEGATIVE_PARTITION_ID = "The partition id cannot be a negative number."
NEGATIVE_LEADER_EPOCH = "The leader epoch cannot be a negative number."
NEGATIVE_STATE_EPOCH = "The state epoch cannot be a negative number."
WRITE_UNINITIALIZED = "Write operation on uninitialized share partition not allowed."
READ_UNINITIALIZED = "Read operation on uninitialized share partition not allowed."

#: an append's error -> what the share coordinator answers (as the other coordinators)
_WRITE_ERRORS: dict[int, int] = {
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.REQUEST_TIMED_OUT: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.MESSAGE_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
    ErrorCode.RECORD_LIST_TOO_LARGE: ErrorCode.UNKNOWN_SERVER_ERROR,
}


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class ShareState:
    """What ReadShareGroupState (or its summary) answers for one share-partition."""

    error: int  # 0, or the Kafka error code
    state_epoch: int = -1
    start_offset: int = -1  # -1: never initialized
    delivery_complete_count: int = -1
    leader_epoch: int = -1
    batches: list[StateBatch] = field(default_factory=list)
    error_message: str | None = None


class ShareShard:
    """One partition of __share_group_state (a CoordinatorShard): the state of the
    share-partitions placed on it, kept as Kafka's shard keeps it (the state, and the
    leader epoch, state epoch and updates-since-the-snapshot of each key)."""

    def __init__(self, coordinator: ShareCoordinator, partition: int, epoch: int) -> None:
        self.coordinator = coordinator
        self.partition = partition
        self.epoch = epoch
        self.states: dict[Key, ShareGroupOffset] = {}
        self.leader_epochs: dict[Key, int] = {}
        self.state_epochs: dict[Key, int] = {}
        self.update_counts: dict[Key, int] = {}
        #: the offset of each share-partition's last snapshot: what is below the lowest of
        #: them is no longer needed (redundant_offset)
        self.snapshot_offsets: dict[Key, int] = {}
        #: the last offset replayed (-1: none)
        self.last_offset = -1
        #: where the partition was last pruned to
        self.pruned = -1
        self.active = False

    # ------------------------------------------------------------------ replay

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes, value: bytes | None) -> None:
        rtype, k, v = R.decode(key, value)
        self.last_offset = max(self.last_offset, offset)
        if rtype == R.SNAPSHOT:
            self._snapshot(k, v)
            if v is None:
                self.snapshot_offsets.pop(k, None)
            else:
                self.snapshot_offsets[k] = offset
        else:
            self._update(k, v)

    def redundant_offset(self) -> int | None:
        """The offset below which the partition holds nothing a load needs (Kafka's
        lastRedundantOffset): the lowest of the share-partitions' last snapshots, or past
        the last record when no share-partition is left; None when unknown."""
        if not self.states:
            return self.last_offset + 1 if self.last_offset >= 0 else None
        if any(k not in self.snapshot_offsets for k in self.states):
            return None
        return min(self.snapshot_offsets[k] for k in self.states)

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        """__share_group_state holds no transactions."""

    def _snapshot(self, k: Key, v: Any) -> None:
        if v is None:  # tombstone: the share-partition's state is deleted
            self.states.pop(k, None)
            self.leader_epochs.pop(k, None)
            self.state_epochs.pop(k, None)
            self.update_counts.pop(k, None)
            return
        self._max(self.leader_epochs, k, v.leader_epoch)
        self._max(self.state_epochs, k, v.state_epoch)
        self.states[k] = ShareGroupOffset(
            v.snapshot_epoch,
            v.state_epoch,
            v.leader_epoch,
            v.start_offset,
            v.delivery_complete_count,
            tuple(R.batches_of(v)),
            v.create_timestamp,
            v.write_timestamp,
        )
        n = self.update_counts.get(k)
        if n is not None and n >= self.coordinator.updates_per_snapshot:
            self.update_counts[k] = 0

    def _update(self, k: Key, v: Any) -> None:
        if v is None:
            return  # Kafka never writes an update tombstone
        self._max(self.leader_epochs, k, v.leader_epoch)
        cur = self.states.get(k)
        new = R.batches_of(v)
        if cur is None:
            self.states[k] = ShareGroupOffset(
                v.snapshot_epoch, 0, v.leader_epoch, v.start_offset, v.delivery_complete_count, tuple(new)
            )
        else:
            start = cur.start_offset if v.start_offset == -1 else v.start_offset
            self.states[k] = ShareGroupOffset(
                cur.snapshot_epoch,
                cur.state_epoch,
                cur.leader_epoch if v.leader_epoch == -1 else v.leader_epoch,
                start,
                v.delivery_complete_count,
                tuple(R.combine(cur.batches, new, start)),
                cur.create_timestamp,
                cur.write_timestamp,
            )
        self.update_counts[k] = self.update_counts.get(k, 0) + 1

    @staticmethod
    def _max(m: dict[Key, int], k: Key, epoch: int) -> None:
        if m.get(k, epoch) <= epoch:
            m[k] = epoch

    def on_loaded(self, summary: LoadSummary) -> None:
        self.active = True
        if self.states:
            log.info(
                "loaded %d share-partitions from %s-%d (coordinator epoch %d) in %.3f s",
                len(self.states),
                STATE_TOPIC,
                self.partition,
                self.epoch,
                summary.seconds,
            )

    def on_unloaded(self) -> None:
        self.active = False


class ShareCoordinator:
    def __init__(
        self,
        config: Any,
        writer: PartitionWriter,
        metadata: ClusterView,
        create_topic: Callable[[int, int, dict[str, str]], Awaitable[object]],
        topic_partitions: Callable[[uuid.UUID], int | None],
        clock: Callable[[], int] = now_ms,
        delete_records: Callable[[TopicPartition, int], int] | None = None,
    ) -> None:
        """`topic_partitions(topic id)`: the topic's partition count, None when the
        metadata has no such topic. `delete_records(partition, offset)`: moves a partition
        led here to start at `offset` (DeleteRecords), for the prune job."""
        self.config = config
        self.create_topic = create_topic
        self.topic_partitions = topic_partitions
        self.clock = clock
        self.updates_per_snapshot: int = config["share.coordinator.snapshot.update.records.per.snapshot"]
        self.write_timeout_ms: int = config["share.coordinator.write.timeout.ms"]
        self.prune_interval_ms: int = config["share.coordinator.state.topic.prune.interval.ms"]
        self.delete_records = delete_records
        self._locks: dict[Key, tuple[asyncio.Lock, int]] = {}
        self.runtime: CoordinatorRuntime[ShareShard] = CoordinatorRuntime(
            STATE_TOPIC,
            config["share.coordinator.state.topic.num.partitions"],
            writer,
            metadata,
            lambda partition, epoch: ShareShard(self, partition, epoch),
        )

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        if self.runtime.refresh_partitions():
            self.runtime.load_all()
        if self.delete_records is not None:
            self.runtime.every(self.prune_interval_ms, self.prune, "pruning __share_group_state")

    def prune(self) -> int:
        """Moves the start of each partition led here past what no load needs any more
        (Kafka's share-group state topic prune job): below every share-partition's last
        snapshot. Returns how many partitions moved."""
        if self.delete_records is None:
            return 0
        moved = 0
        for p in range(self.runtime.num_partitions):
            shard = self.runtime.shard(p)
            if shard is None or not shard.active:
                continue
            offset = shard.redundant_offset()
            if offset is None or offset <= shard.pruned:
                continue
            tp = TopicPartition(STATE_TOPIC, p)
            try:
                shard.pruned = self.delete_records(tp, offset)
            except Exception as exc:  # above the high watermark still, no longer the leader ...
                log.debug("%s: pruning to %d: %s", tp, offset, exc)
                continue
            moved += 1
            log.debug("%s: pruned to %d", tp, shard.pruned)
        return moved

    async def shutdown(self) -> None:
        await self.runtime.close()

    def leadership_changed(self, became_leader: list[TopicPartition], became_follower: list[TopicPartition]) -> None:
        self.runtime.leadership_changed(became_leader, became_follower)

    # ------------------------------------------------------------------ placement

    def has_topic(self) -> bool:
        return self.runtime.has_topic()

    async def ensure_topic(self) -> None:
        """Creates __share_group_state on first use (FindCoordinator), as Kafka 4.4 does."""
        cfg = self.config
        await self.runtime.ensure_topic(
            self.create_topic,
            cfg["share.coordinator.state.topic.num.partitions"],
            cfg["share.coordinator.state.topic.replication.factor"],
            "share.coordinator.state.topic.replication.factor",
            lambda rf: {
                "cleanup.policy": "delete",
                "retention.ms": "-1",
                "compression.type": "uncompressed",
                "min.insync.replicas": str(min(cfg["share.coordinator.state.topic.min.isr"], rf)),
                "segment.bytes": str(cfg["share.coordinator.state.topic.segment.bytes"]),
                "unclean.leader.election.enable": "false",
            },
        )

    def coordinator_node(self, key: str) -> int:
        return self.runtime.coordinator_node(key)

    def partition_for(self, key: str) -> int:
        return self.runtime.partition_for(key)

    def check(self, group_id: str, topic_id: uuid.UUID, partition: int) -> int:
        """0 when the share-partition's coordinator is active here, else the error."""
        return self.runtime.check(R.coordinator_key(group_id, topic_id, partition))

    def _shard(self, k: Key) -> tuple[int, ShareShard | None]:
        """(error, the loaded shard of the key's partition)."""
        ck = R.coordinator_key(*k)
        err = self.runtime.check(ck)
        if err:
            return err, None
        shard = self.runtime.shard(self.runtime.partition_for(ck))
        if shard is None:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, None
        return 0, shard

    def _topic_error(self, topic_id: uuid.UUID, partition: int) -> int:
        n = self.topic_partitions(topic_id)
        return 0 if n is not None and partition < n else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION

    # ------------------------------------------------------------------ writing

    async def _serial(self, k: Key) -> asyncio.Lock:
        lock, users = self._locks.get(k, (None, 0))
        if lock is None:
            lock = asyncio.Lock()
        self._locks[k] = (lock, users + 1)
        await lock.acquire()
        return lock

    def _release(self, k: Key, lock: asyncio.Lock) -> None:
        lock.release()
        _, users = self._locks[k]
        if users <= 1:
            del self._locks[k]
        else:
            self._locks[k] = (lock, users - 1)

    async def _append(self, shard: ShareShard, record: tuple[bytes, bytes | None]) -> int:
        """Writes one record to the shard's partition, waits for the ISR, then replays
        it into the shard (0), or the error answered."""
        p = shard.partition
        try:
            write = self.runtime.append(p, [record], self.clock(), self.write_timeout_ms)
        except Exception as exc:  # e.g. no longer the leader between the check and now
            log.info("%s-%d: writing share state failed: %s", STATE_TOPIC, p, exc)
            return ErrorCode.NOT_COORDINATOR
        code = write.error or await write.wait()
        if code:
            mapped = _WRITE_ERRORS.get(code, code)
            log.info(
                "%s-%d: writing share state failed: %s (answered %s)",
                STATE_TOPIC,
                p,
                ErrorCode(code).name if code in ErrorCode._value2member_map_ else code,
                ErrorCode(mapped).name if mapped in ErrorCode._value2member_map_ else mapped,
            )
            return mapped
        if self.runtime.shard(p) is not shard or self.runtime.epoch(p) != shard.epoch or not shard.active:
            return ErrorCode.NOT_COORDINATOR  # moved meanwhile: the new coordinator replays it
        shard.replay(write.last_offset, -1, -1, record[0], record[1])
        return 0

    # ------------------------------------------------------------------ the state APIs

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, state_epoch: int, start_offset: int
    ) -> tuple[int, str | None]:
        """InitializeShareGroupState for one share-partition: (error, message)."""
        k = (group_id, topic_id, partition)
        if topic_id.int == 0:
            return ErrorCode.INVALID_REQUEST, NULL_TOPIC_ID
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID
        err, shard = self._shard(k)
        if shard is None:
            return err, None
        lock = await self._serial(k)
        try:
            err, shard = self._shard(k)
            if shard is None:
                return err, None
            if state_epoch < 0:
                return ErrorCode.INVALID_REQUEST, NEGATIVE_STATE_EPOCH
            stored = shard.state_epochs.get(k)
            if stored is not None and stored > state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH, None
            if self._topic_error(topic_id, partition):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            cur = shard.states.get(k)
            now = self.clock()
            state = ShareGroupOffset(
                snapshot_epoch=0 if cur is None else cur.snapshot_epoch + 1,
                state_epoch=state_epoch,
                leader_epoch=0,
                start_offset=start_offset,
                delivery_complete_count=-1 if start_offset == -1 else 0,
                batches=(),
                create_timestamp=now,
                write_timestamp=now,
            )
            return await self._append(shard, R.snapshot_record(k, state)), None
        finally:
            self._release(k, lock)

    async def read(self, group_id: str, topic_id: uuid.UUID, partition: int, leader_epoch: int) -> ShareState:
        """ReadShareGroupState for one share-partition."""
        k = (group_id, topic_id, partition)
        if topic_id.int == 0:
            return ShareState(ErrorCode.INVALID_REQUEST, error_message=NULL_TOPIC_ID)
        if partition < 0:
            return ShareState(ErrorCode.INVALID_REQUEST, error_message=NEGATIVE_PARTITION_ID)
        if leader_epoch < 0:
            return ShareState(ErrorCode.INVALID_REQUEST, error_message=NEGATIVE_LEADER_EPOCH)
        err, shard = self._shard(k)
        if shard is None:
            return ShareState(err)
        lock = await self._serial(k)
        try:
            err, shard = self._shard(k)
            if shard is None:
                return ShareState(err)
            cur = shard.states.get(k)
            if cur is None:
                return ShareState(ErrorCode.INVALID_REQUEST, error_message=READ_UNINITIALIZED)
            stored = shard.leader_epochs.get(k)
            if stored is not None and stored > leader_epoch:
                return ShareState(ErrorCode.FENCED_LEADER_EPOCH)
            if self._topic_error(topic_id, partition):
                return ShareState(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            answer = ShareState(
                0,
                cur.state_epoch,
                cur.start_offset,
                cur.delivery_complete_count,
                leader_epoch,
                list(cur.batches),
            )
            if stored != leader_epoch:
                # the new leader epoch is written before the answer (Kafka 4.4's
                # readStateAndMaybeUpdateLeaderEpoch)
                record = self._state_record(
                    shard, k, cur.state_epoch, leader_epoch, cur.start_offset, cur.delivery_complete_count, (), True
                )
                err = await self._append(shard, record)
                if err:
                    return ShareState(err)
            return answer
        finally:
            self._release(k, lock)

    async def write(
        self,
        group_id: str,
        topic_id: uuid.UUID,
        partition: int,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        batches: Iterable[StateBatch],
        delivery_complete_count: int = -1,
    ) -> tuple[int, str | None]:
        """WriteShareGroupState for one share-partition: (error, message)."""
        k = (group_id, topic_id, partition)
        if topic_id.int == 0:
            return ErrorCode.INVALID_REQUEST, NULL_TOPIC_ID
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID
        if leader_epoch < 0:
            return ErrorCode.INVALID_REQUEST, NEGATIVE_LEADER_EPOCH
        if state_epoch < 0:
            return ErrorCode.INVALID_REQUEST, NEGATIVE_STATE_EPOCH
        err, shard = self._shard(k)
        if shard is None:
            return err, None
        lock = await self._serial(k)
        try:
            err, shard = self._shard(k)
            if shard is None:
                return err, None
            if k not in shard.states:
                return ErrorCode.INVALID_REQUEST, WRITE_UNINITIALIZED
            stored = shard.leader_epochs.get(k)
            if stored is not None and stored > leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH, None
            stored = shard.state_epochs.get(k)
            if stored is not None and stored > state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH, None
            if self._topic_error(topic_id, partition):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            record = self._state_record(
                shard, k, state_epoch, leader_epoch, start_offset, delivery_complete_count, tuple(batches), False
            )
            return await self._append(shard, record), None
        finally:
            self._release(k, lock)

    def _state_record(
        self,
        shard: ShareShard,
        k: Key,
        state_epoch: int,
        leader_epoch: int,
        start_offset: int,
        delivery_complete_count: int,
        batches: tuple[StateBatch, ...],
        update_leader_epoch: bool,
    ) -> tuple[bytes, bytes]:
        """The record a write makes (Kafka 4.4's generateShareStateRecord): an update,
        or a snapshot of everything once updates_per_snapshot updates were written. The
        leader epoch changes only on a read's update; the start offset only moves on."""
        cur = shard.states[k]
        epoch = leader_epoch if update_leader_epoch else cur.leader_epoch
        start = max(start_offset, cur.start_offset)
        dcc = delivery_complete_count
        if start_offset == cur.start_offset:
            dcc = max(delivery_complete_count, cur.delivery_complete_count)
        elif start_offset < cur.start_offset:
            dcc = cur.delivery_complete_count
        if shard.update_counts.get(k, 0) >= self.updates_per_snapshot:
            now = self.clock()
            snap = ShareGroupOffset(
                cur.snapshot_epoch + 1,
                cur.state_epoch,
                epoch,
                start,
                dcc,
                tuple(R.combine(cur.batches, batches, start)),
                now,
                now,
            )
            return R.snapshot_record(k, snap)
        return R.update_record(k, cur.snapshot_epoch, epoch, start, dcc, R.combine((), batches, start))

    async def delete(self, group_id: str, topic_id: uuid.UUID, partition: int) -> tuple[int, str | None]:
        """DeleteShareGroupState for one share-partition: (error, message)."""
        k = (group_id, topic_id, partition)
        if topic_id.int == 0:
            return ErrorCode.INVALID_REQUEST, NULL_TOPIC_ID
        if partition < 0:
            return ErrorCode.INVALID_REQUEST, NEGATIVE_PARTITION_ID
        err, shard = self._shard(k)
        if shard is None:
            return err, None
        lock = await self._serial(k)
        try:
            err, shard = self._shard(k)
            if shard is None:
                return err, None
            if self._topic_error(topic_id, partition):
                return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None
            if k not in shard.states:
                return 0, None
            return await self._append(shard, R.tombstone(k)), None
        finally:
            self._release(k, lock)

    def read_summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> ShareState:
        """ReadShareGroupStateSummary for one share-partition (no fencing, no write)."""
        k = (group_id, topic_id, partition)
        if topic_id.int == 0:
            return ShareState(ErrorCode.INVALID_REQUEST, error_message=NULL_TOPIC_ID)
        if partition < 0:
            return ShareState(ErrorCode.INVALID_REQUEST, error_message=NEGATIVE_PARTITION_ID)
        err, shard = self._shard(k)
        if shard is None:
            return ShareState(err)
        if self._topic_error(topic_id, partition):
            return ShareState(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        cur = shard.states.get(k)
        if cur is None:
            return ShareState(0, 0, -1, -1, 0)
        return ShareState(0, cur.state_epoch, cur.start_offset, cur.delivery_complete_count, cur.leader_epoch)

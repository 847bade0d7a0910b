"""The group metadata manager (Kafka's GroupMetadataManager): the groups this broker
coordinates, as they are stored in __consumer_offsets.

Groups live in memory; every change that must survive a restart is first appended to the
group's partition of __consumer_offsets (a compacted internal topic, Kafka's schema in
records.py) and only then applied: offset commits, group metadata after each completed
rebalance, tombstones for deleted groups, expired offsets and offsets of deleted topics.
A partition is loaded (replayed into the cache) when this broker becomes its leader and
unloaded when it stops leading it: the coordinator of a group moves with the leadership
of its offsets partition.

Transactional offset commits (TxnOffsetCommit, KIP-98/KIP-447) are appended as a
transactional batch of the producer and held per group and producer id
(`Group.pending_txn_offsets`) until the transaction's marker reaches the partition:
a COMMIT makes them the committed offsets, an ABORT drops them
(`complete_txn_offsets`, called by the WriteTxnMarkers path; a load replays the markers
the same way). OffsetFetch with require_stable answers UNSTABLE_OFFSET_COMMIT for a
partition with such a pending commit.

What every coordinator on a compacted internal topic does alike is the coordinator
runtime's (broker/coordinator/): placing a group on its partition, loading a partition
when this broker becomes its leader (a GroupShard replays it) and unloading it when it
stops, appending through the narrow PartitionWriter, the offset expiration timer. The
manager sees the cluster through the runtime's ClusterView (the metadata cache); it
never sees the broker. Membership (joins, syncs, heartbeats, their timers) is the
coordinator's (coordinator.py), which learns of loaded and unloaded groups through the
two callbacks.

Everything runs on the broker's event loop.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from broker.coordinator import ClusterView, CoordinatorRuntime, LoadSummary, PartitionWrite, PartitionWriter
from broker.group import group_records as CR, records as R
from broker.group.consumer_group import ConsumerGroup
from broker.group.group import Group, GroupState, Member
from broker.group.records import OffsetAndMetadata
from broker.group.share_group import ShareGroup
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

OFFSETS_TOPIC = "__consumer_offsets"

S = GroupState

# how Kafka's GroupMetadataManager answers an append to __consumer_offsets that failed,
# or whose wait for the ISR did (_coordinator_error)
_COORDINATOR_ERRORS: dict[int, int] = {
    ErrorCode.NOT_LEADER_OR_FOLLOWER: ErrorCode.NOT_COORDINATOR,
    ErrorCode.KAFKA_STORAGE_ERROR: ErrorCode.NOT_COORDINATOR,
    ErrorCode.UNKNOWN_TOPIC_OR_PARTITION: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS: ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND: ErrorCode.COORDINATOR_NOT_AVAILABLE,
}
# ... too large: INVALID_COMMIT_OFFSET_SIZE for offsets, UNKNOWN_SERVER_ERROR for group metadata
_TOO_LARGE = (ErrorCode.MESSAGE_TOO_LARGE, ErrorCode.RECORD_LIST_TOO_LARGE)


def now_ms() -> int:
    return int(time.time() * 1000)


def _coordinator_error(code: int, offsets: bool) -> int:
    """The answer to an offset commit (offsets=True) or a group metadata write whose append
    to __consumer_offsets, or whose wait for the ISR, failed with `code` (Kafka's
    GroupMetadataManager): too large is INVALID_COMMIT_OFFSET_SIZE (offsets) or
    UNKNOWN_SERVER_ERROR (e.g. members' metadata beyond max.message.bytes); a timeout
    REBALANCE_IN_PROGRESS for group metadata; the rest as _COORDINATOR_ERRORS."""
    if code in _TOO_LARGE:
        return ErrorCode.INVALID_COMMIT_OFFSET_SIZE if offsets else ErrorCode.UNKNOWN_SERVER_ERROR
    if code == ErrorCode.REQUEST_TIMED_OUT and not offsets:
        return ErrorCode.REBALANCE_IN_PROGRESS
    return _COORDINATOR_ERRORS.get(code, code)


def _name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


PendingTxnOffsets = dict[int, dict[str, dict[tuple[str, int], OffsetAndMetadata]]]


class GroupShard:
    """One partition of __consumer_offsets as the coordinator runtime loads it (a
    CoordinatorShard): replays the partition's records into the groups they describe,
    which join the manager's groups when the load completes and leave them when this
    broker stops leading the partition."""

    def __init__(self, manager: GroupMetadataManager, partition: int) -> None:
        self.manager = manager
        self.partition = partition
        self._loading: dict[str, Group] = {}
        #: KIP-848 consumer groups (their records: group_records.py)
        self._loading_consumer: dict[str, ConsumerGroup] = {}
        #: KIP-932 share groups (their records: group_records.py too)
        self._loading_share: dict[str, ShareGroup] = {}
        #: transactional offset commits replayed, per producer id and group, until their marker
        self._pending_txn: PendingTxnOffsets = {}

    def _group(self, gid: str) -> Group:
        g = self._loading.get(gid)
        if g is None:
            g = self._loading[gid] = Group(gid)
        return g

    def replay(self, offset: int, producer_id: int, producer_epoch: int, key: bytes, value: bytes | None) -> None:
        if CR.is_consumer_group_key(key):
            CR.replay(self._loading_consumer, key, value)
            return
        if CR.is_share_group_key(key):
            CR.replay_share(self._loading_share, key, value)
            return
        k = R.decode_key(key)
        if len(k) == 4:
            _, gid, topic, partition = k
            if producer_id >= 0 and value is not None:
                self._pending_txn.setdefault(producer_id, {}).setdefault(gid, {})[(topic, partition)] = (
                    R.decode_offset_value(value)
                )
                return
            g = self._group(gid)
            if value is None:
                g.offsets.pop((topic, partition), None)
            else:
                g.offsets[(topic, partition)] = R.decode_offset_value(value)
            return
        _, gid = k
        if value is None:
            tombstoned = self._loading.get(gid)
            if tombstoned is not None:
                tombstoned.members.clear()
                tombstoned.static_members.clear()
                tombstoned.protocol_type = tombstoned.protocol_name = tombstoned.leader_id = None
                tombstoned.generation_id = 0
            return
        meta = R.decode_group_value(value)
        g = self._group(gid)
        g.protocol_type = meta.protocol_type
        g.generation_id = meta.generation
        g.protocol_name = meta.protocol
        g.leader_id = meta.leader
        g.state_timestamp = meta.current_state_timestamp
        g.members = {}
        g.static_members = {}
        for mm in meta.members:
            proto = [(meta.protocol, mm.subscription)] if meta.protocol else []
            m = Member(
                mm.member_id,
                mm.group_instance_id,
                mm.client_id,
                mm.client_host,
                mm.session_timeout,
                mm.rebalance_timeout,
                meta.protocol_type,
                proto,
                mm.assignment,
            )
            g.members[m.member_id] = m
            if m.group_instance_id:
                g.static_members[m.group_instance_id] = m.member_id

    def replay_marker(self, producer_id: int, producer_epoch: int, commit: bool) -> None:
        by_group = self._pending_txn.pop(producer_id, None)
        if not by_group or not commit:
            return
        for gid, offs in by_group.items():
            self._group(gid).offsets.update(offs)

    def on_loaded(self, summary: LoadSummary) -> None:
        for pid, by_group in self._pending_txn.items():  # transactions still open
            for gid, offs in by_group.items():
                self._group(gid).pending_txn_offsets[pid] = offs
        loaded, self._loading, self._pending_txn = self._loading, {}, {}
        consumer, self._loading_consumer = self._loading_consumer, {}
        self.manager.consumer_groups.update(consumer)
        for cg in consumer.values():
            self.manager.on_consumer_group_loaded(cg)
        share, self._loading_share = self._loading_share, {}
        self.manager.share_groups.update(share)
        for sg in share.values():
            self.manager.on_share_group_loaded(sg)
        for gid, g in loaded.items():
            if not g.members and not g.offsets and g.protocol_type is None and not g.pending_txn_offsets:
                continue
            self.manager.groups[gid] = g
            self.manager.on_group_loaded(g)
        if summary.records:
            log.info(
                "loaded %d groups from %s-%d (%d records) in %.3f s",
                len(loaded),
                OFFSETS_TOPIC,
                self.partition,
                summary.records,
                summary.seconds,
            )

    def on_unloaded(self) -> None:
        """This broker no longer leads the partition: its groups move to the new leader
        (members get NOT_COORDINATOR and find it)."""
        manager = self.manager
        for gid, g in list(manager.groups.items()):
            if manager.partition_for(gid) == self.partition:
                del manager.groups[gid]
                manager.on_group_unloaded(g)
                g.state = S.DEAD
        for gid in [gid for gid in manager.consumer_groups if manager.partition_for(gid) == self.partition]:
            del manager.consumer_groups[gid]
        for gid in [gid for gid in manager.share_groups if manager.partition_for(gid) == self.partition]:
            manager.on_share_group_unloaded(manager.share_groups.pop(gid))


class GroupMetadataManager:
    def __init__(
        self,
        config: Any,
        writer: PartitionWriter,
        metadata: ClusterView,
        create_offsets_topic: Callable[[int, int, dict[str, str]], Awaitable[object]],
        on_group_loaded: Callable[[Group], None] = lambda g: None,
        on_group_unloaded: Callable[[Group], None] = lambda g: None,
    ) -> None:
        self.config = config
        self.metadata = metadata
        self.create_offsets_topic = create_offsets_topic
        self.on_group_loaded = on_group_loaded
        self.on_group_unloaded = on_group_unloaded
        self.groups: dict[str, Group] = {}
        #: the KIP-848 consumer groups of the partitions this broker leads (their state:
        #: consumer_group.py; their heartbeats: consumer_coordinator.py)
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        self.on_consumer_group_loaded: Callable[[ConsumerGroup], None] = lambda g: None
        #: the KIP-932 share groups of those partitions (share_group.py, share_coordinator.py)
        self.share_groups: dict[str, ShareGroup] = {}
        self.on_share_group_loaded: Callable[[ShareGroup], None] = lambda g: None
        self.on_share_group_unloaded: Callable[[ShareGroup], None] = lambda g: None
        self.runtime: CoordinatorRuntime[GroupShard] = CoordinatorRuntime(
            OFFSETS_TOPIC,
            config["offsets.topic.num.partitions"],
            writer,
            metadata,
            lambda partition, _epoch: GroupShard(self, partition),
        )

    @property
    def writer(self) -> PartitionWriter:
        return self.runtime.writer

    @property
    def num_partitions(self) -> int:
        return self.runtime.num_partitions

    # ------------------------------------------------------------------ lifecycle

    async def startup(self) -> None:
        if self.runtime.refresh_partitions():
            self.runtime.load_all()
        self.runtime.every(self.config["offsets.retention.check.interval.ms"], self.expire_offsets, "offset expiration")

    async def shutdown(self) -> None:
        await self.runtime.close()

    # ------------------------------------------------------------------ placement

    def has_offsets_topic(self) -> bool:
        return self.runtime.has_topic()

    async def ensure_offsets_topic(self) -> None:
        """Creates __consumer_offsets (compacted) on first use, as Kafka does, with
        offsets.topic.replication.factor replicas (fewer, with a warning, while the
        cluster has fewer live brokers), and waits (bounded) for it to have leaders."""
        await self.runtime.ensure_topic(
            self.create_offsets_topic,
            self.config["offsets.topic.num.partitions"],
            self.config["offsets.topic.replication.factor"],
            "offsets.topic.replication.factor",
            lambda _rf: {
                "cleanup.policy": "compact",
                "segment.bytes": str(self.config["offsets.topic.segment.bytes"]),
                "compression.type": "producer",
            },
        )

    def partition_for(self, group_id: str) -> int:
        return self.runtime.partition_for(group_id)

    def coordinator_node(self, group_id: str) -> int:
        return self.runtime.coordinator_node(group_id)

    def check_coordinator(self, group_id: str) -> int:
        """0, or the error a request for this group gets here."""
        if not group_id:
            return ErrorCode.INVALID_GROUP_ID
        return self.runtime.check(group_id)

    # ------------------------------------------------------------------ loading

    def load_all(self) -> None:
        self.runtime.load_all()

    def leadership_changed(self, became_leader: list[TopicPartition], became_follower: list[TopicPartition]) -> None:
        """The replica manager's leadership listener (the runtime loads and unloads)."""
        self.runtime.leadership_changed(became_leader, became_follower)

    # ------------------------------------------------------------------ transactional offsets

    def complete_txn_offsets(self, p: int, pid: int, commit: bool) -> None:
        """The marker of producer `pid`'s transaction reached partition p of
        __consumer_offsets: its offset commits become visible (commit) or go (abort)."""
        for gid, g in self.groups.items():
            if self.partition_for(gid) != p:
                continue
            offs = g.pending_txn_offsets.pop(pid, None)
            if offs and commit:
                g.offsets.update(offs)

    async def store_txn_offsets(
        self, g: Group, pid: int, epoch: int, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> dict[tuple[str, int], int]:
        """TxnOffsetCommit: the offsets, as a transactional batch of the producer, pending
        until the transaction's marker."""
        result: dict[tuple[str, int], int] = {}
        good: dict[tuple[str, int], OffsetAndMetadata] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        limit = self.config["offset.metadata.max.bytes"]
        p = self.partition_for(g.group_id)
        ts = now_ms()
        for (topic, partition), om in offsets.items():
            info = self.metadata.topic(topic)
            if info is None or partition not in info.partitions:
                result[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if om.metadata is not None and len(om.metadata.encode("utf-8")) > limit:
                result[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            om.metadata = om.metadata or ""
            if om.commit_timestamp < 0:
                om.commit_timestamp = ts
            good[(topic, partition)] = om
            entries.append((R.offset_key(g.group_id, topic, partition), R.offset_value(om)))
        if not good:
            return result
        if not self.writer.is_leader(TopicPartition(OFFSETS_TOPIC, p)):
            return {**result, **{tp: ErrorCode.NOT_COORDINATOR for tp in good}}
        write = self.runtime.append(p, entries, ts, self.config["request.timeout.ms"], producer=(pid, epoch))
        err = _coordinator_error(write.error, True) if write.error else await self.await_durable(write, True)
        if err == ErrorCode.INVALID_PRODUCER_EPOCH:
            err = ErrorCode.PRODUCER_FENCED
        for tp in good:
            result[tp] = err
        if not err:
            g.pending_txn_offsets.setdefault(pid, {}).update(good)
        return result

    def has_pending_txn_offset(self, group_id: str, tp: tuple[str, int]) -> bool:
        g = self.groups.get(group_id)
        return g is not None and any(tp in offs for offs in g.pending_txn_offsets.values())

    # ------------------------------------------------------------------ storage

    async def store(self, group_id: str, entries: Sequence[tuple[bytes, bytes | None]], offsets: bool = True) -> int:
        """Appends records to the group's partition of __consumer_offsets; returns an
        error code (0 when durable on the ISR), mapped as Kafka's GroupMetadataManager
        maps append errors for offset commits (offsets=True) or group metadata."""
        err, write = self.append(group_id, entries, offsets)
        if write is None:
            return err
        return await self.await_durable(write, offsets)

    def append(
        self, group_id: str, entries: Sequence[tuple[bytes, bytes | None]], offsets: bool
    ) -> tuple[int, PartitionWrite | None]:
        """The synchronous half of store: (0, the write) once the records are in the local
        log (so they survive a crash of this process), or (mapped error, None)."""
        p = self.partition_for(group_id)
        if not self.writer.is_leader(TopicPartition(OFFSETS_TOPIC, p)):
            return ErrorCode.NOT_COORDINATOR, None
        write = self.runtime.append(p, entries, now_ms(), self.config["request.timeout.ms"])
        if write.error:
            log.warning("cannot store group %s: %s (%s)", group_id, _name(write.error), write.error_message)
            return _coordinator_error(write.error, offsets), None
        return 0, write

    async def await_durable(self, write: PartitionWrite, offsets: bool) -> int:
        """The asynchronous half of store: waits for the high watermark (the ISR) and
        the flush policy."""
        err = await write.wait()
        return _coordinator_error(err, offsets) if err else 0

    def group_record(self, g: Group) -> tuple[bytes, bytes]:
        members = [
            R.MemberMetadata(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata_for(g.protocol_name) if g.protocol_name else b"",
                m.assignment,
            )
            for m in g.members.values()
        ]
        meta = R.GroupMetadata(
            g.protocol_type or "", g.generation_id, g.protocol_name, g.leader_id, g.state_timestamp, members
        )
        return R.group_key(g.group_id), R.group_value(meta)

    # ------------------------------------------------------------------ offsets

    async def store_offsets(
        self, g: Group, offsets: dict[tuple[str, int], OffsetAndMetadata]
    ) -> dict[tuple[str, int], int]:
        """Validates and stores committed offsets (the member was validated already)."""
        result: dict[tuple[str, int], int] = {}
        entries: list[tuple[bytes, bytes | None]] = []
        good: dict[tuple[str, int], OffsetAndMetadata] = {}
        limit = self.config["offset.metadata.max.bytes"]
        for (topic, partition), om in offsets.items():
            info = self.metadata.topic(topic)
            if info is None or partition not in info.partitions:
                result[(topic, partition)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                continue
            if om.metadata is not None and len(om.metadata.encode("utf-8")) > limit:
                result[(topic, partition)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            om.metadata = om.metadata or ""
            if om.commit_timestamp < 0:
                om.commit_timestamp = now_ms()
            good[(topic, partition)] = om
            entries.append((R.offset_key(g.group_id, topic, partition), R.offset_value(om)))
        if entries:
            err = await self.store(g.group_id, entries)
            for tp, om in good.items():
                result[tp] = err
                if not err:
                    g.offsets[tp] = om
        return result

    def fetch_offsets(
        self, group_id: str, partitions: list[tuple[str, int]] | None
    ) -> tuple[int, dict[tuple[str, int], OffsetAndMetadata | None]]:
        err = self.check_coordinator(group_id)
        if err:
            return err, {}
        g = self.groups.get(group_id)
        if partitions is None:
            return 0, dict(g.offsets) if g is not None else {}
        return 0, {tp: (g.offsets.get(tp) if g is not None else None) for tp in partitions}

    # ------------------------------------------------------------------ deleted topics, expiry

    def topic_deleted(self, topic: str) -> int:
        """Kafka's handleDeletedPartitions: every group forgets its committed offsets for
        a deleted topic (tombstones in __consumer_offsets, so a topic created again under
        the same name starts without them, also after a restart); an empty group left with
        nothing is removed. Synchronous: the tombstones are in the local log when this
        returns. Returns the number of offsets removed."""
        removed = 0
        if topic == OFFSETS_TOPIC:
            return 0
        for g in list(self.groups.values()):
            gone = [tp for tp in g.offsets if tp[0] == topic]
            if not gone or self.check_coordinator(g.group_id):
                continue
            entries = [(R.offset_key(g.group_id, t, p), None) for t, p in gone]
            drop_group = g.is_(S.EMPTY) and len(gone) == len(g.offsets) and not g.pending_members
            if drop_group:
                entries.append((R.group_key(g.group_id), None))
            err, _ = self.append(g.group_id, entries, True)
            if err:
                log.warning(
                    "group %s: cannot remove the offsets of deleted topic %s: %s",
                    g.group_id,
                    topic,
                    ErrorCode(err).name,
                )
                continue
            for tp in gone:
                g.offsets.pop(tp, None)
            removed += len(gone)
            if drop_group:
                self.on_group_unloaded(g)
                g.state = S.DEAD
                self.groups.pop(g.group_id, None)
        if removed:
            log.info("removed %d committed offsets of deleted topic %s", removed, topic)
        return removed

    async def expire_offsets(self, now: int | None = None) -> int:
        """Removes the committed offsets of empty groups older than offsets.retention.minutes
        (KIP-211: counted from when the group became empty; for groups that only commit,
        from each commit) and drops groups left with nothing. Returns offsets removed."""
        now = now_ms() if now is None else now
        retention = self.config["offsets.retention.minutes"] * 60_000
        removed = 0
        for g in list(self.groups.values()):
            if not g.is_(S.EMPTY) or self.check_coordinator(g.group_id):
                continue
            consumer_group = bool(g.protocol_type)
            expired = []
            for tp, om in g.offsets.items():
                if om.expire_timestamp >= 0:
                    gone = now >= om.expire_timestamp
                elif consumer_group and g.state_timestamp >= 0:
                    gone = now - g.state_timestamp >= retention
                else:
                    gone = now - om.commit_timestamp >= retention
                if gone:
                    expired.append(tp)
            if not expired and (g.offsets or g.pending_members):
                continue
            entries = [(R.offset_key(g.group_id, t, p), None) for t, p in expired]
            # Kafka's cleanupGroupMetadata: an empty group left without offsets goes too
            # (also one that never got further than a join: nothing of it was stored)
            drop_group = len(expired) == len(g.offsets) and not g.pending_members
            if drop_group and (expired or g.generation_id > 0 or g.protocol_type):
                entries.append((R.group_key(g.group_id), None))
            if entries and await self.store(g.group_id, entries):
                continue
            for tp in expired:
                g.offsets.pop(tp, None)
            removed += len(expired)
            if expired:
                log.info("group %s: %d committed offsets expired", g.group_id, len(expired))
            if drop_group and g.is_(S.EMPTY) and not g.offsets and not g.pending_members:
                g.state = S.DEAD
                self.groups.pop(g.group_id, None)
        return removed

"""The share-group offset admin (KIP-932's DescribeShareGroupOffsets, AlterShareGroupOffsets,
DeleteShareGroupOffsets; Kafka's GroupCoordinatorService and GroupMetadataManager parts
of them): served by the share group's coordinator, on the share-partitions' state through
the persister (persister.py).

- describe: each share-partition's start offset and leader epoch from its state summary
  (start offset -1: never initialized), with the lag (v1, KIP-1226) as Kafka 4.4 computes
  it: the partition's latest offset (ListOffsets latest, at its leader) minus the start
  offset minus the delivery-complete count; -1 when any of them is unknown. Topics not
  named (null): every share-partition of the group that has state. Kafka keeps the
  partitions a group initialized in its ShareGroupStatePartitionMetadata record; kbroker
  does not keep that record yet, so "every" is found by asking the summary of every
  partition of every topic and keeping those initialized (one request per partition, to
  its share coordinator, all at once).
- alter: the group must be empty (NON_EMPTY_GROUP, "The group is not empty."); each
  share-partition is initialized again at the start offset given, with a state epoch
  above its current one so that a share-partition leader still holding the old state is
  fenced (FENCED_STATE_EPOCH) on its next write and reads the new state. A group that does
  not exist yet gets its share-partitions' state all the same (Kafka creates the group
  record too; kbroker leaves that to the group's first member).
- delete: the group must exist (GROUP_ID_NOT_FOUND) and be empty (NON_EMPTY_GROUP); every
  partition of each topic named has its state deleted.
- a share group deleted (DeleteGroups) has its state deleted with it (DeleteStateWithGroup,
  a listener of the share-group coordinator).

An unknown topic (or partition) is UNKNOWN_TOPIC_OR_PARTITION, as Kafka answers it.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.list_offsets import ListOffsetsRequest

if TYPE_CHECKING:
    from broker.cluster.cache import MetadataCache
    from broker.cluster.replica.manager import ReplicaManager
    from broker.share.persister import Persister


class BrokerServices(Protocol):
    """What the offset admin uses of the broker (the server's BrokerServices has it)."""

    @property
    def metadata(self) -> MetadataCache: ...

    @property
    def replicas(self) -> ReplicaManager: ...

    @property
    def broker_id(self) -> int: ...

    @property
    def share_persister(self) -> Persister: ...


log = logging.getLogger(__name__)

NOT_EMPTY = "The group is not empty."
UNKNOWN_TOPIC = "This server does not host this topic-partition."
LATEST = -1


@dataclass
class PartitionOffset:
    partition: int
    start_offset: int = -1
    leader_epoch: int = -1
    lag: int = -1
    error: int = 0
    error_message: str | None = None


@dataclass
class TopicOffsets:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionOffset]


def _topic(services: BrokerServices, name: str) -> tuple[uuid.UUID, int] | None:
    info = services.metadata.topic(name)
    if info is None:
        return None
    return info.topic_id, len(info.partitions)


async def latest_offsets(services: BrokerServices, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
    """Each partition's latest offset (ListOffsets latest, read_uncommitted: the high
    watermark) asked of its leader; a partition whose leader did not answer is left out."""
    out: dict[tuple[str, int], int] = {}
    remote: dict[int, list[tuple[str, int]]] = {}
    for t, p in tps:
        state = services.metadata.partition_state(t, p)
        if state is None or state.leader < 0:
            continue
        if state.leader == services.broker_id:
            try:
                found = services.replicas.leader_partition(t, p, -1).log.offset_for_timestamp(LATEST)
            except KafkaProtocolError:
                continue
            if found is not None:
                out[(t, p)] = found[0]
        else:
            remote.setdefault(state.leader, []).append((t, p))

    async def ask(node: int, parts: list[tuple[str, int]]) -> None:
        ch = services.share_persister.channel(node)
        if ch is None:
            return
        by: dict[str, list[int]] = {}
        for t, p in parts:
            by.setdefault(t, []).append(p)
        L = ListOffsetsRequest
        req = L(
            replica_id=-1,
            isolation_level=0,
            topics=[
                L.ListOffsetsTopic(
                    name=t,
                    partitions=[L.ListOffsetsPartition(partition_index=p, timestamp=LATEST) for p in ps],
                )
                for t, ps in by.items()
            ],
        )
        try:
            resp = await ch.request(req)
        except Exception:
            return
        for rt in resp.topics:
            for rp in rt.partitions:
                if not rp.error_code:
                    out[(rt.name, rp.partition_index)] = rp.offset

    await asyncio.gather(*(ask(n, ps) for n, ps in remote.items()))
    return out


async def describe(
    services: BrokerServices, group_id: str, topics: list[tuple[str, list[int]]] | None
) -> list[TopicOffsets]:
    """The share-partitions' offsets (topics None: all the group has)."""
    wanted: list[tuple[str, uuid.UUID, list[int]]] = []
    unknown: list[TopicOffsets] = []
    every = topics is None
    if topics is None:
        for name, info in sorted(services.metadata.topics().items()):
            if not info.internal and not name.startswith("__"):
                wanted.append((name, info.topic_id, sorted(info.partitions)))
    else:
        for name, parts in topics:
            found = _topic(services, name)
            if found is None:
                unknown.append(
                    TopicOffsets(
                        name,
                        uuid.UUID(int=0),
                        [
                            PartitionOffset(p, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, error_message=UNKNOWN_TOPIC)
                            for p in parts
                        ],
                    )
                )
            else:
                wanted.append((name, found[0], parts))
    keys = [(tid, p) for _name, tid, parts in wanted for p in parts]
    summaries = await services.share_persister.read_summary(group_id, keys)
    ends = await latest_offsets(
        services,
        [(name, p) for name, tid, parts in wanted for p in parts if summaries[(tid, p)].start_offset >= 0],
    )
    out: list[TopicOffsets] = []
    for name, tid, parts in wanted:
        rows = []
        for p in parts:
            s = summaries[(tid, p)]
            if every and (s.error or s.start_offset < 0):
                continue
            row = PartitionOffset(p, error=s.error, error_message=s.error_message)
            if not s.error:
                row.start_offset = s.start_offset
                row.leader_epoch = s.leader_epoch
                end = ends.get((name, p))
                if end is not None and s.start_offset >= 0 and s.delivery_complete_count >= 0:
                    row.lag = end - s.start_offset - s.delivery_complete_count
            rows.append(row)
        if rows or not every:
            out.append(TopicOffsets(name, tid, rows))
    return out + unknown


async def alter(
    services: BrokerServices, group_id: str, topics: list[tuple[str, list[tuple[int, int]]]]
) -> list[TopicOffsets]:
    """Initializes each share-partition again at its new start offset."""
    out: list[TopicOffsets] = []
    todo: list[tuple[PartitionOffset, uuid.UUID, int]] = []
    for name, parts in topics:
        found = _topic(services, name)
        tid = found[0] if found is not None else uuid.UUID(int=0)
        rows = []
        for p, start in parts:
            row = PartitionOffset(p)
            rows.append(row)
            if found is None or p < 0 or p >= found[1]:
                row.error, row.error_message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC
            elif start < -1:
                row.error = ErrorCode.INVALID_REQUEST
                row.error_message = f"start offset {start} of {name}-{p}: an offset, or -1"
            else:
                todo.append((row, tid, start))
        out.append(TopicOffsets(name, tid, rows))
    persister = services.share_persister
    summaries = await persister.read_summary(group_id, [(tid, row.partition) for row, tid, _ in todo])

    async def one(row: PartitionOffset, tid: uuid.UUID, start: int) -> None:
        s = summaries[(tid, row.partition)]
        if s.error:
            row.error, row.error_message = s.error, s.error_message
            return
        row.error = await persister.initialize(group_id, tid, row.partition, max(s.state_epoch + 1, 0), start)

    await asyncio.gather(*(one(*t) for t in todo))
    return out


async def delete(
    services: BrokerServices, group_id: str, topics: list[str]
) -> list[tuple[str, uuid.UUID, int, str | None]]:
    """(topic, topic id, error, message) for each topic named: every partition's state deleted."""
    out: list[tuple[str, uuid.UUID, int, str | None]] = []
    todo: list[tuple[int, str, uuid.UUID, int]] = []
    for name in topics:
        found = _topic(services, name)
        if found is None:
            out.append((name, uuid.UUID(int=0), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, UNKNOWN_TOPIC))
        else:
            todo.append((len(out), name, found[0], found[1]))
            out.append((name, found[0], 0, None))
    codes = await services.share_persister.delete(group_id, [(tid, p) for _i, _n, tid, n in todo for p in range(n)])
    for i, name, tid, n in todo:
        err = next((codes[(tid, p)] for p in range(n) if codes[(tid, p)]), 0)
        out[i] = (name, tid, err, None)
    return out


class DeleteStateWithGroup:
    """A share-group listener (broker/group/share_coordinator.py): a deleted share group's
    share-partitions' state goes too, as Kafka's DeleteGroups of a share group deletes it
    through the persister. In the background, after the group's records are gone; a
    failure is logged (the state is left, as after a failed DeleteShareGroupOffsets)."""

    def __init__(self, services: BrokerServices, spawn: Callable[[Coroutine[Any, Any, Any]], None]) -> None:
        self.services = services
        self.spawn = spawn

    def on_member_left(self, group_id: str, member_id: str) -> None:
        """Nothing: the state stays while the group lives."""

    def on_group_deleted(self, group_id: str) -> None:
        self.spawn(self._delete(group_id))

    async def _delete(self, group_id: str) -> None:
        try:
            found = await describe(self.services, group_id, None)
            keys = [(t.topic_id, p.partition) for t in found for p in t.partitions]
            codes = await self.services.share_persister.delete(group_id, keys)
        except Exception:
            log.exception("deleting the share-partition state of deleted share group %s failed", group_id)
            return
        failed = {k: c for k, c in codes.items() if c}
        if failed:
            log.warning("deleted share group %s: its state of %s was not deleted: %s", group_id, sorted(failed), failed)
        elif keys:
            log.info("deleted share group %s: the state of its %d share-partitions deleted", group_id, len(keys))

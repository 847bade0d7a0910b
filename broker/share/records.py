"""__share_group_state's records as Kafka 4.x's share coordinator writes them (its
ShareCoordinatorRecordSerde): the key is an int16 record type then the key struct at
version 0, the value an int16 version (0) then the value struct; a null value is a
tombstone. The structs are Kafka's (broker/protocol/schema/Share*.json, generated into
broker/protocol/messages/).

    type  key                                  value
    0     ShareSnapshotKey (group, topic id,   ShareSnapshotValue: the share-partition's whole
          partition)                           state: snapshot, state and leader epochs, start
                                               offset, delivery-complete count, the state
                                               batches, create and write timestamps
    1     ShareUpdateKey (the same)            ShareUpdateValue: what a write changed: leader
                                               epoch, start offset, delivery-complete count
                                               and the batches written (no state epoch)

A tombstone of the snapshot key deletes the share-partition's state (DeleteShareGroupState).

`combine` merges state batches as Kafka's PersisterStateBatchCombiner does: batches below
the start offset are dropped (one straddling it is cut), and where batches overlap the one
of the higher delivery count wins, at equal counts the higher delivery state (so a record
acknowledged, 2, or archived, 4, stays so); adjacent batches of the same state and count
are joined. The result is sorted and disjoint.
"""

from __future__ import annotations

import heapq
import struct
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from broker.protocol.messages import (
    ShareSnapshotKey,
    ShareSnapshotValue,
    ShareUpdateKey,
    ShareUpdateValue,
)

SNAPSHOT, UPDATE = 0, 1

_H = struct.Struct(">h")

#: Kafka's RecordState ids as the persister stores them
AVAILABLE, ACKNOWLEDGED, ARCHIVED = 0, 2, 4


@dataclass(frozen=True)
class StateBatch:
    """Kafka's PersisterStateBatch: the records first_offset..last_offset (inclusive)
    share a delivery state and a delivery count."""

    first_offset: int
    last_offset: int
    delivery_state: int  # 0 available, 2 acknowledged, 4 archived (Kafka's RecordState ids)
    delivery_count: int


@dataclass(frozen=True)
class ShareGroupOffset:
    """A share-partition's state as the coordinator holds it (Kafka's ShareGroupOffset)."""

    snapshot_epoch: int
    state_epoch: int
    leader_epoch: int
    start_offset: int
    delivery_complete_count: int = -1
    batches: tuple[StateBatch, ...] = field(default_factory=tuple)
    create_timestamp: int = -1
    write_timestamp: int = -1


#: (group id, topic id, partition): one share-partition
Key = tuple[str, uuid.UUID, int]


def coordinator_key(group_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The key the share coordinator is found and placed by (Kafka's
    SharePartitionKey.asCoordinatorKey): "group:topic id:partition", the topic id as
    Kafka prints it."""
    from broker.uuids import uuid_text

    return f"{group_id}:{uuid_text(topic_id)}:{partition}"


def parse_coordinator_key(text: str) -> Key:
    """Inverse of coordinator_key (the group id may itself hold ':'); ValueError for
    anything else."""
    from broker.uuids import parse_uuid

    group, sep, rest = text.rpartition(":")
    group, sep2, topic = group.rpartition(":")
    if not sep or not sep2 or not group:
        raise ValueError(f"{text!r} is not a share-partition key (group:topic id:partition)")
    try:
        partition = int(rest)
    except ValueError:
        raise ValueError(f"{text!r}: the partition {rest!r} is not a number") from None
    if partition < 0 or not rest.isdigit():
        raise ValueError(f"{text!r}: the partition {rest!r} is not a partition index")
    return group, parse_uuid(topic, "topic id"), partition


# ---------------------------------------------------------------------- encoding


def _batches(cls: type, batches: Iterable[StateBatch]) -> list[object]:
    return [
        cls(
            first_offset=b.first_offset,
            last_offset=b.last_offset,
            delivery_state=b.delivery_state,
            delivery_count=b.delivery_count,
        )
        for b in batches
    ]


def snapshot_record(key: Key, s: ShareGroupOffset) -> tuple[bytes, bytes]:
    group, topic_id, partition = key
    k = _H.pack(SNAPSHOT) + bytes(ShareSnapshotKey(group_id=group, topic_id=topic_id, partition=partition).encode(0))
    v = ShareSnapshotValue(
        snapshot_epoch=s.snapshot_epoch,
        state_epoch=s.state_epoch,
        leader_epoch=s.leader_epoch,
        start_offset=s.start_offset,
        delivery_complete_count=s.delivery_complete_count,
        create_timestamp=s.create_timestamp,
        write_timestamp=s.write_timestamp,
        state_batches=_batches(ShareSnapshotValue.StateBatch, s.batches),
    )
    return k, _H.pack(0) + bytes(v.encode(0))


def update_record(
    key: Key,
    snapshot_epoch: int,
    leader_epoch: int,
    start_offset: int,
    delivery_complete_count: int,
    batches: Iterable[StateBatch],
) -> tuple[bytes, bytes]:
    group, topic_id, partition = key
    k = _H.pack(UPDATE) + bytes(ShareUpdateKey(group_id=group, topic_id=topic_id, partition=partition).encode(0))
    v = ShareUpdateValue(
        snapshot_epoch=snapshot_epoch,
        leader_epoch=leader_epoch,
        start_offset=start_offset,
        delivery_complete_count=delivery_complete_count,
        state_batches=_batches(ShareUpdateValue.StateBatch, batches),
    )
    return k, _H.pack(0) + bytes(v.encode(0))


def tombstone(key: Key) -> tuple[bytes, None]:
    group, topic_id, partition = key
    k = _H.pack(SNAPSHOT) + bytes(ShareSnapshotKey(group_id=group, topic_id=topic_id, partition=partition).encode(0))
    return k, None


# ---------------------------------------------------------------------- decoding


def decode(key: bytes, value: bytes | None) -> tuple[int, Key, ShareSnapshotValue | ShareUpdateValue | None]:
    """(record type, key, value or None for a tombstone). ValueError: not a record of
    this topic (an unknown type or version, a truncated struct)."""
    if len(key) < 2:
        raise ValueError("share state key shorter than 2 bytes")
    (rtype,) = _H.unpack_from(key, 0)
    if rtype not in (SNAPSHOT, UPDATE):
        raise ValueError(f"unknown share state record type {rtype}")
    kcls = ShareSnapshotKey if rtype == SNAPSHOT else ShareUpdateKey
    try:
        k = kcls.decode(memoryview(key)[2:], 0)
    except Exception as exc:
        raise ValueError(f"unreadable share state key: {exc}") from None
    if value is None:
        return rtype, (k.group_id, k.topic_id, k.partition), None
    if len(value) < 2:
        raise ValueError("share state value shorter than 2 bytes")
    (version,) = _H.unpack_from(value, 0)
    if version != 0:
        raise ValueError(f"unknown share state value version {version}")
    vcls = ShareSnapshotValue if rtype == SNAPSHOT else ShareUpdateValue
    try:
        v = vcls.decode(memoryview(value)[2:], 0)
    except Exception as exc:
        raise ValueError(f"unreadable share state value: {exc}") from None
    return rtype, (k.group_id, k.topic_id, k.partition), v


def batches_of(value: ShareSnapshotValue | ShareUpdateValue) -> list[StateBatch]:
    return [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in value.state_batches]


# ---------------------------------------------------------------------- combining batches


def combine(so_far: Iterable[StateBatch], new: Iterable[StateBatch], start_offset: int) -> list[StateBatch]:
    """The batches of so_far and new merged (the module docstring says how)."""
    batches: list[StateBatch] = []
    for b in (*so_far, *new):
        if b.last_offset < b.first_offset:
            continue
        if start_offset != -1:
            if b.last_offset < start_offset:
                continue
            if b.first_offset < start_offset:
                b = StateBatch(start_offset, b.last_offset, b.delivery_state, b.delivery_count)
        batches.append(b)
    if len(batches) < 2:
        return batches
    batches.sort(key=lambda b: b.first_offset)
    points = sorted({b.first_offset for b in batches} | {b.last_offset + 1 for b in batches})
    out: list[StateBatch] = []
    active: list[tuple[int, int, int, int]] = []  # (-count, -state, order, last offset)
    i = 0
    n = len(batches)
    for j in range(len(points) - 1):
        lo, hi = points[j], points[j + 1] - 1
        while i < n and batches[i].first_offset == lo:
            b = batches[i]
            heapq.heappush(active, (-b.delivery_count, -b.delivery_state, i, b.last_offset))
            i += 1
        while active and active[0][3] < lo:
            heapq.heappop(active)
        if not active:
            continue
        count, state = -active[0][0], -active[0][1]
        prev = out[-1] if out else None
        if (
            prev is not None
            and prev.last_offset + 1 == lo
            and prev.delivery_state == state
            and prev.delivery_count == count
        ):
            out[-1] = StateBatch(prev.first_offset, hi, state, count)
        else:
            out.append(StateBatch(lo, hi, state, count))
    return out

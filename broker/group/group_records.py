"""The records of KIP-848 consumer groups in __consumer_offsets, as Kafka 4.x writes them
(its group coordinator's CoordinatorRecordSerde): the key is an int16 record type then the
key struct at version 0, the value an int16 version then the value struct; a null value
is a tombstone. The structs are Kafka's (broker/protocol/schema/ConsumerGroup*.json,
generated into broker/protocol/messages/).

    type  key                                     value
    3     ConsumerGroupMetadataKey (group)        ConsumerGroupMetadataValue: the group epoch
    5     ConsumerGroupMemberMetadataKey (group,  ConsumerGroupMemberMetadataValue: what the
          member)                                 member subscribes to, its client, assignor
    6     ConsumerGroupTargetAssignmentMetadata-  ...Value: the assignment epoch
          Key (group)
    7     ConsumerGroupTargetAssignmentMemberKey  ...Value: the member's target
    8     ConsumerGroupCurrentMemberAssignment-   ...Value: the member's epochs, state,
          Key (group, member)                     assigned and pending-revocation partitions

Kafka 4.x no longer writes ConsumerGroupPartitionMetadata (type 4, the subscribed topics'
metadata: since KIP-1101 a hash in ConsumerGroupMetadataValue stands for it); replay
reads and ignores it. kbroker recomputes the subscribed topics' partition counts from the
metadata cache when a loaded group next heartbeats, and writes MetadataHash 0.

`records_after` gives the records a heartbeat's result calls for (in the order Kafka
appends them: member, group epoch, target, current assignment), `replay` applies one
record to the groups being loaded.

KIP-932 share groups (share_group.py) have records of their own, in the same framing
(`share_records_after`, `share_group_tombstones`, `replay_share`):

    type  key                                     value
    10    ShareGroupMemberMetadataKey             ...Value: rack, client, subscribed topics
    11    ShareGroupMetadataKey (group)           ...Value: the group epoch (MetadataHash 0)
    12    ShareGroupTargetAssignmentMetadataKey   ...Value: the assignment epoch
    13    ShareGroupTargetAssignmentMemberKey     ...Value: the member's target
    14    ShareGroupCurrentMemberAssignmentKey    ...Value: the member's epochs and partitions
    15    ShareGroupStatePartitionMetadataKey     ...Value: which partitions' share state the
                                                  group coordinator initialized

kbroker's group coordinator does not track share-state initialization (the share-partition
leader initializes a partition it finds uninitialized), so it writes no type 15; replay
reads it and keeps nothing, as it does type 9 (the ShareGroupPartitionMetadata of Kafka
before KIP-1101, which 4.x no longer writes).
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Any

from broker.group.consumer_group import Assignment, ConsumerGroup, ConsumerMember, HeartbeatResult, MemberState
from broker.group.share_group import STABLE_MEMBER_STATE, ShareGroup, ShareHeartbeatResult, ShareMember
from broker.protocol.messages import (
    ConsumerGroupCurrentMemberAssignmentKey as CurrentKey,
    ConsumerGroupCurrentMemberAssignmentValue as CurrentValue,
    ConsumerGroupMemberMetadataKey as MemberKey,
    ConsumerGroupMemberMetadataValue as MemberValue,
    ConsumerGroupMetadataKey as GroupKey,
    ConsumerGroupMetadataValue as GroupValue,
    ConsumerGroupPartitionMetadataKey as PartitionMetadataKey,
    ConsumerGroupTargetAssignmentMemberKey as TargetMemberKey,
    ConsumerGroupTargetAssignmentMemberValue as TargetMemberValue,
    ConsumerGroupTargetAssignmentMetadataKey as TargetKey,
    ConsumerGroupTargetAssignmentMetadataValue as TargetValue,
    ShareGroupCurrentMemberAssignmentKey as ShareCurrentKey,
    ShareGroupCurrentMemberAssignmentValue as ShareCurrentValue,
    ShareGroupMemberMetadataKey as ShareMemberKey,
    ShareGroupMemberMetadataValue as ShareMemberValue,
    ShareGroupMetadataKey as ShareGroupKey,
    ShareGroupMetadataValue as ShareGroupValue,
    ShareGroupStatePartitionMetadataKey as ShareStatePartitionKey,
    ShareGroupTargetAssignmentMemberKey as ShareTargetMemberKey,
    ShareGroupTargetAssignmentMemberValue as ShareTargetMemberValue,
    ShareGroupTargetAssignmentMetadataKey as ShareTargetKey,
    ShareGroupTargetAssignmentMetadataValue as ShareTargetValue,
)

__all__ = [
    "RECORD_TYPES",
    "Record",
    "SHARE_RECORD_TYPES",
    "group_tombstones",
    "is_consumer_group_key",
    "is_share_group_key",
    "records_after",
    "replay",
    "replay_share",
    "share_group_tombstones",
    "share_records_after",
]

#: (key bytes, value bytes or None)
Record = tuple[bytes, bytes | None]

_H = struct.Struct(">h")

#: record type -> (key class, value class)
RECORD_TYPES = {
    3: (GroupKey, GroupValue),
    4: (PartitionMetadataKey, None),
    5: (MemberKey, MemberValue),
    6: (TargetKey, TargetValue),
    7: (TargetMemberKey, TargetMemberValue),
    8: (CurrentKey, CurrentValue),
}


def _key(record_type: int, key: object) -> bytes:
    return _H.pack(record_type) + bytes(key.encode(0))  # type: ignore[attr-defined]


def _value(value: object) -> bytes:
    return _H.pack(0) + bytes(value.encode(0))  # type: ignore[attr-defined]


def _topic_partitions(cls: type, a: Assignment) -> list[Any]:
    return [cls(topic_id=t, partitions=sorted(a[t])) for t in sorted(a) if a[t]]


def _assignment(tps: Iterable[Any]) -> Assignment:
    return {tp.topic_id: frozenset(tp.partitions) for tp in tps if tp.partitions}


def group_record(g: ConsumerGroup) -> Record:
    return _key(3, GroupKey(group_id=g.group_id)), _value(GroupValue(epoch=g.group_epoch))


def member_record(g: ConsumerGroup, m: ConsumerMember) -> Record:
    value = MemberValue(
        instance_id=m.instance_id,
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=sorted(m.subscribed_topic_names),
        subscribed_topic_regex=m.subscribed_topic_regex,
        rebalance_timeout_ms=m.rebalance_timeout_ms,
        server_assignor=m.server_assignor,
    )
    return _key(5, MemberKey(group_id=g.group_id, member_id=m.member_id)), _value(value)


def target_records(g: ConsumerGroup) -> list[Record]:
    out: list[Record] = [
        (
            _key(7, TargetMemberKey(group_id=g.group_id, member_id=mid)),
            _value(TargetMemberValue(topic_partitions=_topic_partitions(TargetMemberValue.TopicPartition, a))),
        )
        for mid, a in sorted(g.target.items())
    ]
    out.append((_key(6, TargetKey(group_id=g.group_id)), _value(TargetValue(assignment_epoch=g.assignment_epoch))))
    return out


def current_record(g: ConsumerGroup, m: ConsumerMember) -> Record:
    tp = CurrentValue.TopicPartitions
    value = CurrentValue(
        member_epoch=m.member_epoch,
        previous_member_epoch=m.previous_member_epoch,
        state=int(m.state),
        assigned_partitions=_topic_partitions(tp, m.assigned),
        partitions_pending_revocation=_topic_partitions(tp, m.pending_revocation),
    )
    return _key(8, CurrentKey(group_id=g.group_id, member_id=m.member_id)), _value(value)


def member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member gone: its current assignment, target and metadata (Kafka's order)."""
    return [
        (_key(8, CurrentKey(group_id=group_id, member_id=member_id)), None),
        (_key(7, TargetMemberKey(group_id=group_id, member_id=member_id)), None),
        (_key(5, MemberKey(group_id=group_id, member_id=member_id)), None),
    ]


def group_tombstones(g: ConsumerGroup) -> list[Record]:
    """A group deleted: its members' records, then the target's and the group's."""
    out: list[Record] = []
    for mid in sorted(g.members):
        out += member_tombstones(g.group_id, mid)
    out.append((_key(6, TargetKey(group_id=g.group_id)), None))
    out.append((_key(3, GroupKey(group_id=g.group_id)), None))
    return out


def records_after(g: ConsumerGroup, result: HeartbeatResult) -> list[Record]:
    """What a heartbeat changed, to append before it is answered."""
    if result.left:
        out = member_tombstones(g.group_id, result.member_id)
        out.append(group_record(g))
        if result.target_changed:
            out += target_records(g)
        return out
    m = g.members[result.member_id]
    out = []
    if result.replaced is not None:
        # a static member back under a new member id: the old id's records go, the new
        # one's target is the old one's
        out += member_tombstones(g.group_id, result.replaced)
        out.append(member_record(g, m))
        out.append(
            (
                _key(7, TargetMemberKey(group_id=g.group_id, member_id=m.member_id)),
                _value(
                    TargetMemberValue(
                        topic_partitions=_topic_partitions(
                            TargetMemberValue.TopicPartition, g.target.get(m.member_id, {})
                        )
                    )
                ),
            )
        )
        out.append(current_record(g, m))
    if result.member_changed and result.replaced is None:
        out.append(member_record(g, m))
    if result.group_epoch_changed:
        out.append(group_record(g))
    if result.target_changed:
        out += target_records(g)
    if result.assignment_changed:
        out.append(current_record(g, m))
    return out


def is_consumer_group_key(key: bytes) -> bool:
    return len(key) >= 2 and _H.unpack_from(key)[0] in RECORD_TYPES


def replay(groups: dict[str, ConsumerGroup], key: bytes, value: bytes | None) -> None:
    """Applies one record (of a type in RECORD_TYPES) to `groups`. Raises ValueError for
    a record it cannot read."""
    (record_type,) = _H.unpack_from(key)
    key_cls, value_cls = RECORD_TYPES[record_type]
    k = key_cls.decode(memoryview(key)[2:], 0)
    gid = k.group_id
    if value_cls is None:
        return  # ConsumerGroupPartitionMetadata: not kept (see the module docstring)
    v = None
    if value is not None:
        (version,) = _H.unpack_from(value)
        if version != 0:
            raise ValueError(f"record type {record_type}: value version {version} is not known")
        v = value_cls.decode(memoryview(value)[2:], 0)
    g = groups.get(gid)
    if g is None:
        if v is None:
            return
        g = groups[gid] = ConsumerGroup(gid)
    if record_type == 3:
        if v is None:
            del groups[gid]
        else:
            g.group_epoch = v.epoch
    elif record_type == 6:
        if v is not None:
            g.assignment_epoch = v.assignment_epoch
    elif record_type == 5:
        if v is None:
            g.members.pop(k.member_id, None)
        else:
            m = g.members.get(k.member_id) or ConsumerMember(k.member_id)
            m.instance_id, m.rack_id = v.instance_id, v.rack_id
            m.client_id, m.client_host = v.client_id, v.client_host
            m.subscribed_topic_names = frozenset(v.subscribed_topic_names)
            m.subscribed_topic_regex = v.subscribed_topic_regex
            m.rebalance_timeout_ms, m.server_assignor = v.rebalance_timeout_ms, v.server_assignor
            g.members[k.member_id] = m
    elif record_type == 7:
        if v is None:
            g.target.pop(k.member_id, None)
        else:
            g.target[k.member_id] = _assignment(v.topic_partitions)
    elif record_type == 8:
        # compaction may leave a member's assignment before its metadata: either creates it
        if v is None:
            return
        m = g.members.get(k.member_id) or ConsumerMember(k.member_id)
        g.members[k.member_id] = m
        m.member_epoch, m.previous_member_epoch = v.member_epoch, v.previous_member_epoch
        try:
            m.state = MemberState(v.state)
        except ValueError:
            m.state = MemberState.UNKNOWN
        m.assigned = _assignment(v.assigned_partitions)
        m.pending_revocation = _assignment(v.partitions_pending_revocation)


# ---------------------------------------------------------------------- share groups

#: record type -> (key class, value class); None: read and not kept
SHARE_RECORD_TYPES: dict[int, tuple[type | None, type | None]] = {
    9: (None, None),  # ShareGroupPartitionMetadata: Kafka before KIP-1101
    10: (ShareMemberKey, ShareMemberValue),
    11: (ShareGroupKey, ShareGroupValue),
    12: (ShareTargetKey, ShareTargetValue),
    13: (ShareTargetMemberKey, ShareTargetMemberValue),
    14: (ShareCurrentKey, ShareCurrentValue),
    15: (ShareStatePartitionKey, None),
}


def share_group_record(g: ShareGroup) -> Record:
    return _key(11, ShareGroupKey(group_id=g.group_id)), _value(ShareGroupValue(epoch=g.group_epoch, metadata_hash=0))


def share_member_record(g: ShareGroup, m: ShareMember) -> Record:
    value = ShareMemberValue(
        rack_id=m.rack_id,
        client_id=m.client_id,
        client_host=m.client_host,
        subscribed_topic_names=sorted(m.subscribed_topic_names),
    )
    return _key(10, ShareMemberKey(group_id=g.group_id, member_id=m.member_id)), _value(value)


def share_target_records(g: ShareGroup) -> list[Record]:
    tp = ShareTargetMemberValue.TopicPartition
    out: list[Record] = [
        (
            _key(13, ShareTargetMemberKey(group_id=g.group_id, member_id=mid)),
            _value(ShareTargetMemberValue(topic_partitions=_topic_partitions(tp, a))),
        )
        for mid, a in sorted(g.target.items())
    ]
    out.append(
        (_key(12, ShareTargetKey(group_id=g.group_id)), _value(ShareTargetValue(assignment_epoch=g.assignment_epoch)))
    )
    return out


def share_current_record(g: ShareGroup, m: ShareMember) -> Record:
    value = ShareCurrentValue(
        member_epoch=m.member_epoch,
        previous_member_epoch=m.previous_member_epoch,
        state=STABLE_MEMBER_STATE,
        assigned_partitions=_topic_partitions(ShareCurrentValue.TopicPartitions, m.assigned),
    )
    return _key(14, ShareCurrentKey(group_id=g.group_id, member_id=m.member_id)), _value(value)


def share_member_tombstones(group_id: str, member_id: str) -> list[Record]:
    """A member gone: its current assignment, target and metadata (Kafka's order)."""
    return [
        (_key(14, ShareCurrentKey(group_id=group_id, member_id=member_id)), None),
        (_key(13, ShareTargetMemberKey(group_id=group_id, member_id=member_id)), None),
        (_key(10, ShareMemberKey(group_id=group_id, member_id=member_id)), None),
    ]


def share_group_tombstones(g: ShareGroup) -> list[Record]:
    """A share group deleted: its members' records, then the target's and the group's."""
    out: list[Record] = []
    for mid in sorted(g.members):
        out += share_member_tombstones(g.group_id, mid)
    out.append((_key(12, ShareTargetKey(group_id=g.group_id)), None))
    out.append((_key(11, ShareGroupKey(group_id=g.group_id)), None))
    return out


def share_records_after(g: ShareGroup, result: ShareHeartbeatResult) -> list[Record]:
    """What a share heartbeat (or an expiry) changed, to append before it is answered."""
    if result.left:
        out = share_member_tombstones(g.group_id, result.member_id)
        out.append(share_group_record(g))
        if result.target_changed:
            out += share_target_records(g)
        return out
    m = g.members[result.member_id]
    out = []
    if result.member_changed:
        out.append(share_member_record(g, m))
    if result.group_epoch_changed:
        out.append(share_group_record(g))
    if result.target_changed:
        out += share_target_records(g)
    if result.assignment_changed:
        out.append(share_current_record(g, m))
    return out


def is_share_group_key(key: bytes) -> bool:
    return len(key) >= 2 and _H.unpack_from(key)[0] in SHARE_RECORD_TYPES


def replay_share(groups: dict[str, ShareGroup], key: bytes, value: bytes | None) -> None:
    """Applies one share-group record (a type in SHARE_RECORD_TYPES) to `groups`. Raises
    ValueError for a record it cannot read."""
    (record_type,) = _H.unpack_from(key)
    key_cls, value_cls = SHARE_RECORD_TYPES[record_type]
    if key_cls is None or value_cls is None:
        return  # not kept (see the module docstring)
    k = key_cls.decode(memoryview(key)[2:], 0)  # type: ignore[attr-defined]
    gid = k.group_id
    v = None
    if value is not None:
        (version,) = _H.unpack_from(value)
        if version != 0:
            raise ValueError(f"record type {record_type}: value version {version} is not known")
        v = value_cls.decode(memoryview(value)[2:], 0)  # type: ignore[attr-defined]
    g = groups.get(gid)
    if g is None:
        if v is None:
            return
        g = groups[gid] = ShareGroup(gid)
    if record_type == 11:
        if v is None:
            del groups[gid]
        else:
            g.group_epoch = v.epoch
    elif record_type == 12:
        if v is not None:
            g.assignment_epoch = v.assignment_epoch
    elif record_type == 10:
        if v is None:
            g.members.pop(k.member_id, None)
        else:
            m = g.members.get(k.member_id) or ShareMember(k.member_id)
            m.rack_id, m.client_id, m.client_host = v.rack_id, v.client_id, v.client_host
            m.subscribed_topic_names = frozenset(v.subscribed_topic_names)
            g.members[k.member_id] = m
    elif record_type == 13:
        if v is None:
            g.target.pop(k.member_id, None)
        else:
            g.target[k.member_id] = _assignment(v.topic_partitions)
    elif record_type == 14:
        # compaction may leave a member's assignment before its metadata: either creates it
        if v is None:
            return
        m = g.members.get(k.member_id) or ShareMember(k.member_id)
        g.members[k.member_id] = m
        m.member_epoch, m.previous_member_epoch = v.member_epoch, v.previous_member_epoch
        m.assigned = _assignment(v.assigned_partitions)

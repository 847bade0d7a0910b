"""KIP-932 share groups (Kafka's ShareGroup and ShareGroupMember): the membership of a
share group on its group coordinator, beside KIP-848's consumer groups (consumer_group.py),
whose vocabulary it shares.

Sans-I/O and synchronous, like consumer_group.py: the coordinator (share_coordinator.py)
feeds it heartbeats, expiries and the subscribed topics' metadata; it answers what a
ShareGroupHeartbeat response carries and what changed, for the records group_records.py
appends to __consumer_offsets (and replays on the coordinator that loads the partition).

The model, as Kafka 4.4 has it:

- The **group epoch** goes up by one when a member joins or leaves, when a subscription
  changes, when a subscribed topic appears, goes or grows.
- The **target assignment** is what the `simple` assignor (`simple_assign`) computes for
  the group epoch; the **assignment epoch** catches up with the group epoch on the next
  heartbeat of any member.
- There is no revocation step: a share partition may be read by several members at once,
  so a member takes its target at once (its epoch becomes the assignment epoch) and the
  heartbeat's answer carries it whenever it changed.
- A heartbeat must carry the member's epoch or its previous one (an answer may have been
  lost); any other is FENCED_MEMBER_EPOCH. A member id the group does not know, on any
  epoch but 0, is UNKNOWN_MEMBER_ID. Epoch 0 joins (the client chooses its member id).
- A group holds at most `group.share.max.size` members (GROUP_MAX_SIZE_REACHED).

States: Empty (no member) or Stable (Kafka's ShareGroupState; Dead once deleted).
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from broker.group.consumer_group import Assignment, HeartbeatError, TopicsView
from broker.protocol.errors import ErrorCode

__all__ = [
    "ASSIGNOR_NAME",
    "ShareGroup",
    "ShareGroupState",
    "ShareHeartbeat",
    "ShareHeartbeatResult",
    "ShareMember",
    "simple_assign",
]

ASSIGNOR_NAME = "simple"
LEAVE_EPOCH = -1
#: Kafka's MemberState.STABLE: a share member is never anything else
STABLE_MEMBER_STATE = 0


class ShareGroupState(str, enum.Enum):
    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    member_epoch: int = 0
    previous_member_epoch: int = 0
    assigned: Assignment = field(default_factory=dict)


@dataclass
class ShareHeartbeat:
    """A ShareGroupHeartbeat's fields (None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass
class ShareHeartbeatResult:
    member_id: str
    member_epoch: int
    #: the member's assignment when the answer must carry it (None: unchanged)
    assignment: Assignment | None
    #: what changed, for the records (group_records.py)
    group_epoch_changed: bool = False
    target_changed: bool = False
    member_changed: bool = False
    assignment_changed: bool = False
    left: bool = False


def simple_assign(
    members: Mapping[str, frozenset[uuid.UUID]],
    partitions: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
) -> dict[str, Assignment]:
    """Kafka 4.4's `simple` share assignor (SimpleHomogeneousAssignmentBuilder), for the
    members subscribed to the same topics: every partition goes to
    `sharing = ceil(members / partitions)` members, and the `sharing * partitions`
    assignments are spread as evenly as the members go (member i of n gets
    ceil(s*(i+1)) - ceil(s*i) of them, s = sharing*partitions/n). It is sticky: a member
    keeps what it had (up to its share, each partition up to `sharing` members), then the
    rest is handed out partition by partition to members short of their share.

    Members subscribed to different topics (Kafka's heterogeneous builder) are assigned
    topic by topic, among the members subscribed to each: the same rule per topic
    (kbroker's simplification; Kafka balances the heterogeneous case across topics)."""
    out: dict[str, Assignment] = {m: {} for m in members}
    groups: dict[frozenset[uuid.UUID], list[str]] = {}
    for mid in sorted(members):
        subscribed = frozenset(t for t in members[mid] if t in partitions)
        if subscribed:
            groups.setdefault(subscribed, []).append(mid)
    if len(groups) <= 1:
        for topics, mids in groups.items():
            _homogeneous(mids, topics, partitions, previous, out)
        return out
    for t in sorted(partitions):
        mids = [m for m in sorted(members) if t in members[m]]
        if mids:
            _homogeneous(mids, frozenset([t]), partitions, previous, out)
    return out


def _homogeneous(
    mids: list[str],
    topics: frozenset[uuid.UUID],
    partitions: Mapping[uuid.UUID, int],
    previous: Mapping[str, Assignment],
    out: dict[str, Assignment],
) -> None:
    targets = [(t, p) for t in sorted(topics) for p in range(partitions[t])]
    if not targets or not mids:
        return
    n = len(mids)
    sharing = (n + len(targets) - 1) // len(targets)
    s = sharing * len(targets) / n
    desired = [_ceil(s * (i + 1)) - _ceil(s * i) for i in range(n)]
    wanted = set(targets)
    by_member: dict[str, set[tuple[uuid.UUID, int]]] = {}
    by_partition: dict[tuple[uuid.UUID, int], list[str]] = {tp: [] for tp in targets}
    # keep what each member had (still assignable), up to its share
    for i, mid in enumerate(mids):
        kept = sorted((t, p) for t, ps in previous.get(mid, {}).items() for p in ps if (t, p) in wanted)
        kept = kept[: desired[i]]
        by_member[mid] = set(kept)
        for tp in kept:
            by_partition[tp].append(mid)
    # a partition shared by more members than it should be gives up the extra ones
    for tp, holders in by_partition.items():
        while len(holders) > sharing:
            by_member[holders.pop()].discard(tp)
    # the rest, partition by partition, to the members short of their share
    short = [mid for i, mid in enumerate(mids) if len(by_member[mid]) < desired[i]]
    quota = dict(zip(mids, desired, strict=True))
    while short:
        progress = False
        for tp in targets:
            if len(by_partition[tp]) >= sharing:
                continue
            for mid in short:
                if tp not in by_member[mid]:
                    by_member[mid].add(tp)
                    by_partition[tp].append(mid)
                    progress = True
                    if len(by_member[mid]) >= quota[mid]:
                        short.remove(mid)
                    break
            if not short:
                break
        if not progress:
            break
    for mid in mids:
        a: dict[uuid.UUID, set[int]] = {}
        for t, p in by_member[mid]:
            a.setdefault(t, set()).add(p)
        for t, ps in a.items():
            out[mid][t] = out[mid].get(t, frozenset()) | frozenset(ps)


def _ceil(x: float) -> int:
    i = int(x)
    return i if i >= x else i + 1


class ShareGroup:
    """One share group on its coordinator."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.target: dict[str, Assignment] = {}
        #: the subscribed topics' partition counts the target was computed for (None: not
        #: known yet, a group loaded from its records: `known_partitions` tells)
        self.topic_partitions: dict[uuid.UUID, int] | None = None

    @property
    def state(self) -> ShareGroupState:
        return ShareGroupState.STABLE if self.members else ShareGroupState.EMPTY

    def subscribed_topics(self, topics: TopicsView) -> dict[uuid.UUID, int]:
        names: frozenset[str] = frozenset()
        for m in self.members.values():
            names |= m.subscribed_topic_names
        return topics.resolve(names)

    def known_partitions(self) -> dict[uuid.UUID, int]:
        """The partition counts the target stands for: the simple assignor gives every
        subscribed partition to at least one member, so the target names them all (a
        loaded group's records carry no partition metadata; Kafka 4.4 keeps a hash)."""
        if self.topic_partitions is None:
            counts: dict[uuid.UUID, int] = {}
            for a in self.target.values():
                for t, ps in a.items():
                    if ps:
                        counts[t] = max(counts.get(t, 0), max(ps) + 1)
            self.topic_partitions = counts
        return self.topic_partitions

    def compute_target(self, topics: TopicsView) -> None:
        partitions = self.subscribed_topics(topics)
        self.target = simple_assign(
            {mid: frozenset(topics.resolve(m.subscribed_topic_names)) for mid, m in self.members.items()},
            partitions,
            self.target,
        )
        self.topic_partitions = partitions
        self.assignment_epoch = self.group_epoch

    def remove_member(self, member_id: str) -> bool:
        """Removes a member (left, expired); the group epoch goes up."""
        if self.members.pop(member_id, None) is None:
            return False
        self.target.pop(member_id, None)
        self.group_epoch += 1
        return True

    def heartbeat(self, req: ShareHeartbeat, topics: TopicsView, max_size: int) -> ShareHeartbeatResult:
        """One ShareGroupHeartbeat (checked for its shape by the caller). Raises
        HeartbeatError for an answer with an error code."""
        member = self.members.get(req.member_id)
        if req.member_epoch == LEAVE_EPOCH:
            if member is None:
                raise HeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {self.group_id}."
                )
            self.remove_member(req.member_id)
            return ShareHeartbeatResult(req.member_id, LEAVE_EPOCH, None, group_epoch_changed=True, left=True)
        if member is None and len(self.members) >= max_size:
            raise HeartbeatError(
                ErrorCode.GROUP_MAX_SIZE_REACHED,
                f"The share group has reached its maximum capacity of {max_size} members.",
            )
        result = ShareHeartbeatResult(req.member_id, 0, None)
        if member is None:
            if req.member_epoch != 0:
                raise HeartbeatError(
                    ErrorCode.UNKNOWN_MEMBER_ID, f"Member {req.member_id} is not a member of group {self.group_id}."
                )
            member = ShareMember(req.member_id)
            result.member_changed = True
        elif req.member_epoch != 0:
            if req.member_epoch > member.member_epoch:
                raise HeartbeatError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The share group member has a greater member epoch ({req.member_epoch}) than the one known by "
                    f"the group coordinator ({member.member_epoch}). The member must abandon all its partitions "
                    "and rejoin.",
                )
            if req.member_epoch < member.member_epoch and req.member_epoch != member.previous_member_epoch:
                raise HeartbeatError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The share group member has a smaller member epoch ({req.member_epoch}) than the one known by "
                    f"the group coordinator ({member.member_epoch}), and it does not match the previous member "
                    f"epoch ({member.previous_member_epoch}). The member must abandon all its partitions and rejoin.",
                )
        changed_sub = False
        if req.rack_id is not None and req.rack_id != member.rack_id:
            member.rack_id = req.rack_id
            result.member_changed = True
        if req.subscribed_topic_names is not None:
            names = frozenset(req.subscribed_topic_names)
            if names != member.subscribed_topic_names:
                member.subscribed_topic_names = names
                result.member_changed = changed_sub = True
        if (req.client_id, req.client_host) != (member.client_id, member.client_host):
            member.client_id, member.client_host = req.client_id, req.client_host
            result.member_changed = True
        new = req.member_id not in self.members
        self.members[req.member_id] = member
        if new or changed_sub or self.subscribed_topics(topics) != self.known_partitions():
            self.group_epoch += 1
            result.group_epoch_changed = True
        if self.assignment_epoch != self.group_epoch:
            self.compute_target(topics)
            result.target_changed = True
        # no revocation step: the member takes its target at the assignment epoch at once
        before = member.assigned
        target = self.target.get(req.member_id, {})
        if member.member_epoch != self.assignment_epoch or member.assigned != target:
            member.previous_member_epoch = member.member_epoch
            member.member_epoch = self.assignment_epoch
            member.assigned = dict(target)
            result.assignment_changed = True
        result.member_epoch = member.member_epoch
        if req.member_epoch == 0 or member.assigned != before:
            result.assignment = dict(member.assigned)
        return result

"""KIP-848 consumer groups (Kafka's modern ConsumerGroup, its members and their
reconciliation): the broker-driven protocol's state, beside the classic groups of group.py.

Sans-I/O and synchronous: no timers, no writes, no clock of its own. The coordinator
feeds it heartbeats (`ConsumerGroup.heartbeat`), expiries and the subscribed topics'
metadata; it answers what a ConsumerGroupHeartbeat response carries and the records to
append to __consumer_offsets (group_records.py encodes them as Kafka 4.x does, and
`replay` rebuilds the same group from them on the coordinator that loads the partition).

The model:

- The **group epoch** goes up by one whenever what the assignment depends on changes:
  a member joins or leaves, a subscription or assignor changes, a subscribed topic's
  partition count changes.
- The **target assignment** is what the group's server-side assignor (assignors.py)
  computes for the group epoch; its epoch, the **assignment epoch**, catches up with the
  group epoch on the next heartbeat of any member.
- Each member **reconciles** its current assignment towards its target (`reconcile`):
  it first gives up what it must (UNREVOKED_PARTITIONS: the partitions stay its own,
  pending revocation, until a heartbeat no longer lists them), then takes the new ones
  at the target's epoch; a partition another member still holds (assigned or pending
  revocation) is held back (UNRELEASED_PARTITIONS) until that member lets it go. So a
  partition never belongs to two members at once (`owners`, the check the tests make).
- A member's **epoch** is the epoch of the assignment it holds. A heartbeat must carry
  it: a newer one, or an older one other than the previous epoch the member may not have
  heard of yet, is FENCED_MEMBER_EPOCH; an unknown member id is UNKNOWN_MEMBER_ID.

Group states, as KIP-848 names them: Empty (no member), Assigning (the target is behind
the group epoch), Reconciling (some member is not at the target yet), Stable.
"""

from __future__ import annotations

import enum
import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from broker.group.assignors import ASSIGNORS, AssignmentSpec, MemberSpec
from broker.protocol.errors import ErrorCode

__all__ = [
    "Assignment",
    "ConsumerGroup",
    "ConsumerGroupState",
    "ConsumerMember",
    "HeartbeatError",
    "HeartbeatRequest",
    "HeartbeatResult",
    "MemberState",
    "TopicsView",
    "reconcile",
]

#: topic id -> partitions
Assignment = dict[uuid.UUID, frozenset[int]]

LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class MemberState(enum.IntEnum):
    """A member's reconciliation state; the values are the ones Kafka persists
    (ConsumerGroupCurrentMemberAssignmentValue.State)."""

    STABLE = 0
    UNREVOKED_PARTITIONS = 1
    UNRELEASED_PARTITIONS = 2
    UNKNOWN = 127


class ConsumerGroupState(str, enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


class HeartbeatError(Exception):
    """A heartbeat answered with an error code (and Kafka's message for it)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass
class TopicsView:
    """The subscribed topics as the metadata cache has them: name -> (id, partitions)."""

    by_name: Mapping[str, tuple[uuid.UUID, int]]

    def resolve(self, names: frozenset[str]) -> dict[uuid.UUID, int]:
        return {self.by_name[n][0]: self.by_name[n][1] for n in sorted(names) if n in self.by_name}

    def matching(self, regex: re.Pattern[str]) -> frozenset[str]:
        return frozenset(n for n in self.by_name if regex.fullmatch(n) and not n.startswith("__"))


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: frozenset[str] = frozenset()
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Assignment = field(default_factory=dict)
    pending_revocation: Assignment = field(default_factory=dict)

    def subscribed_names(self, topics: TopicsView) -> frozenset[str]:
        names = self.subscribed_topic_names
        if self.subscribed_topic_regex:
            names = names | topics.matching(re.compile(self.subscribed_topic_regex))
        return names


@dataclass
class HeartbeatRequest:
    """A ConsumerGroupHeartbeat's fields (None: unchanged since the last heartbeat)."""

    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    #: the partitions the member owns (None: unchanged)
    owned: Assignment | None = None
    client_id: str = ""
    client_host: str = ""


@dataclass
class HeartbeatResult:
    member_id: str
    member_epoch: int
    #: the member's assignment, when the answer must carry it (None: unchanged)
    assignment: Assignment | None
    #: what changed, for the records (group_records.py)
    group_epoch_changed: bool = False
    target_changed: bool = False
    member_changed: bool = False
    assignment_changed: bool = False
    left: bool = False
    #: a static member's previous member id, when it came back under a new one
    replaced: str | None = None


def _union(a: Assignment, b: Assignment) -> Assignment:
    out = dict(a)
    for t, ps in b.items():
        out[t] = out.get(t, frozenset()) | ps
    return out


def _owns_any(owned: Assignment | None, of: Assignment) -> bool:
    """Whether the member's reported partitions still include any of `of` (None: it did
    not say, so it may)."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in of.items())


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    subscribed: frozenset[uuid.UUID],
    held_by_other: Callable[[uuid.UUID, int], bool],
    owned: Assignment | None,
) -> ConsumerMember:
    """The member's next state towards `target` (Kafka's CurrentAssignmentBuilder). The
    member is not changed; the caller applies the returned one."""
    if member.state == MemberState.UNREVOKED_PARTITIONS and _owns_any(owned, member.pending_revocation):
        return member  # still revoking
    if member.state == MemberState.STABLE and member.member_epoch == target_epoch:
        return member
    if member.state == MemberState.UNKNOWN:
        if owned is None or any(owned.values()):
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, "The member is in an unknown state; it must rejoin.")
    keep: Assignment = {}
    revoke: Assignment = {}
    pending: Assignment = {}
    unreleased = False
    for t in set(target) | set(member.assigned):
        want = target.get(t, frozenset()) if t in subscribed else frozenset()
        have = member.assigned.get(t, frozenset())
        if have & want:
            keep[t] = have & want
        if have - want:
            revoke[t] = have - want
        new = {p for p in want - have if not held_by_other(t, p)}
        if len(new) < len(want - have):
            unreleased = True
        if new:
            pending[t] = frozenset(new)
    nxt = ConsumerMember(**{k: getattr(member, k) for k in member.__dataclass_fields__})
    if revoke and _owns_any(owned, revoke):
        nxt.state = MemberState.UNREVOKED_PARTITIONS
        nxt.assigned = keep
        nxt.pending_revocation = revoke
        return nxt
    nxt.previous_member_epoch = member.member_epoch
    nxt.member_epoch = target_epoch
    nxt.assigned = _union(keep, pending)
    nxt.pending_revocation = {}
    nxt.state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return nxt


class ConsumerGroup:
    """One KIP-848 group on its coordinator."""

    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Assignment] = {}
        #: the subscribed topics' partition counts the target was computed for
        self.topic_partitions: dict[uuid.UUID, int] = {}

    # ------------------------------------------------------------------ views

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.assignment_epoch != self.group_epoch:
            return ConsumerGroupState.ASSIGNING
        for m in self.members.values():
            if m.member_epoch == STATIC_LEAVE_EPOCH:
                continue  # a static member away: its partitions wait for it
            if m.state != MemberState.STABLE or m.member_epoch != self.assignment_epoch:
                return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def owners(self) -> dict[tuple[uuid.UUID, int], list[str]]:
        """(topic id, partition) -> the members holding it (assigned or pending
        revocation): never more than one."""
        out: dict[tuple[uuid.UUID, int], list[str]] = {}
        for m in self.members.values():
            for a in (m.assigned, m.pending_revocation):
                for t, ps in a.items():
                    for p in ps:
                        out.setdefault((t, p), []).append(m.member_id)
        return out

    def _held_by_other(self, member_id: str) -> Callable[[uuid.UUID, int], bool]:
        held: set[tuple[uuid.UUID, int]] = set()
        for m in self.members.values():
            if m.member_id == member_id:
                continue
            for a in (m.assigned, m.pending_revocation):
                for t, ps in a.items():
                    held.update((t, p) for p in ps)
        return lambda t, p: (t, p) in held

    def subscribed_topics(self, topics: TopicsView) -> dict[uuid.UUID, int]:
        names: frozenset[str] = frozenset()
        for m in self.members.values():
            names |= m.subscribed_names(topics)
        return topics.resolve(names)

    # ------------------------------------------------------------------ changes

    def _bump(self) -> None:
        self.group_epoch += 1

    def preferred_assignor(self, default: str) -> str:
        """The assignor most members ask for (ties by name); none asked: the default."""
        names = {m.server_assignor for m in self.members.values() if m.server_assignor}
        if not names:
            return default
        counts = {n: sum(1 for m in self.members.values() if m.server_assignor == n) for n in names}
        return min(counts, key=lambda n: (-counts[n], n))

    def compute_target(self, topics: TopicsView, default_assignor: str) -> None:
        """The target assignment for the group epoch (Kafka: on the next heartbeat
        after a change)."""
        partitions = self.subscribed_topics(topics)
        assignor = self.preferred_assignor(default_assignor)
        spec = AssignmentSpec(
            members={
                m.member_id: MemberSpec(
                    topics=frozenset(topics.resolve(m.subscribed_names(topics))),
                    previous=self.target.get(m.member_id, {}),
                )
                for m in self.members.values()
            },
            partitions=partitions,
        )
        computed = ASSIGNORS[assignor](spec)
        self.target = {mid: computed.get(mid, {}) for mid in self.members}
        self.topic_partitions = partitions
        self.assignment_epoch = self.group_epoch

    def remove_member(self, member_id: str) -> bool:
        """Removes a member (left, expired, fenced); the group epoch goes up."""
        if self.members.pop(member_id, None) is None:
            return False
        self.target.pop(member_id, None)
        self._bump()
        return True

    def heartbeat(
        self,
        req: HeartbeatRequest,
        topics: TopicsView,
        assignors: list[str],
        new_member_id: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> HeartbeatResult:
        """One ConsumerGroupHeartbeat (validated by the caller for its shape). Raises
        HeartbeatError for an answer with an error code."""
        if req.server_assignor is not None and req.server_assignor not in assignors:
            raise HeartbeatError(
                ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported."
            )
        if req.subscribed_topic_regex:
            try:
                re.compile(req.subscribed_topic_regex)
            except re.error as exc:
                raise HeartbeatError(
                    ErrorCode.INVALID_REGULAR_EXPRESSION,
                    f"SubscribedTopicRegex {req.subscribed_topic_regex} is not a valid regular expression: {exc}",
                ) from None
        member_id = req.member_id or new_member_id()
        member = self.members.get(member_id)
        if req.member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            if member is None:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
            if req.member_epoch == STATIC_LEAVE_EPOCH and member.instance_id is not None:
                # a static member that will be back: it keeps its partitions (no rebalance)
                # until it rejoins under its instance id or its session ends
                if member.member_epoch != STATIC_LEAVE_EPOCH:
                    member.previous_member_epoch = member.member_epoch
                    member.member_epoch = STATIC_LEAVE_EPOCH
                return HeartbeatResult(member_id, STATIC_LEAVE_EPOCH, None, assignment_changed=True)
            self.remove_member(member_id)
            return HeartbeatResult(member_id, req.member_epoch, None, group_epoch_changed=True, left=True)
        result = HeartbeatResult(member_id, 0, None)
        if member is None:
            if req.member_epoch != 0:
                raise HeartbeatError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of the group.")
            member = ConsumerMember(member_id)
            result.member_changed = True
            if req.instance_id is not None:
                old = next((m for m in self.members.values() if m.instance_id == req.instance_id), None)
                if old is not None:
                    if old.member_epoch != STATIC_LEAVE_EPOCH:
                        raise HeartbeatError(
                            ErrorCode.UNRELEASED_INSTANCE_ID,
                            f"Static member {old.member_id} with instance id {req.instance_id} is not released yet.",
                        )
                    # the static member is back under a new member id: it takes the old
                    # one's place, epoch and partitions
                    member = ConsumerMember(
                        **{k: getattr(old, k) for k in old.__dataclass_fields__ if k != "member_id"},
                        member_id=member_id,
                    )
                    member.member_epoch = old.previous_member_epoch
                    del self.members[old.member_id]
                    self.members[member_id] = member
                    self.target[member_id] = self.target.pop(old.member_id, {})
                    result.replaced = old.member_id
        elif member.member_epoch == STATIC_LEAVE_EPOCH and req.member_epoch != 0:
            raise HeartbeatError(ErrorCode.FENCED_MEMBER_EPOCH, "The static member left the group; it must rejoin.")
        elif req.member_epoch != 0 and req.member_epoch != member.member_epoch:
            lost_answer = (
                req.member_epoch == member.previous_member_epoch
                and req.owned is not None
                and all(ps <= member.assigned.get(t, frozenset()) for t, ps in req.owned.items())
            )
            if req.member_epoch > member.member_epoch or not lost_answer:
                raise HeartbeatError(
                    ErrorCode.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a smaller member epoch ({req.member_epoch}) than the one known "
                    f"by the group coordinator ({member.member_epoch}). The member must abandon all its partitions "
                    "and rejoin."
                    if req.member_epoch < member.member_epoch
                    else f"The consumer group member has a greater member epoch ({req.member_epoch}) than the one "
                    f"known by the group coordinator ({member.member_epoch}). The member must abandon all its "
                    "partitions and rejoin.",
                )
        # what the member says of itself
        changed_sub = False
        updates: dict[str, object] = {"client_id": req.client_id, "client_host": req.client_host}
        if req.instance_id is not None:
            updates["instance_id"] = req.instance_id
        if req.rack_id is not None:
            updates["rack_id"] = req.rack_id
        if req.rebalance_timeout_ms != -1:
            updates["rebalance_timeout_ms"] = req.rebalance_timeout_ms
        if req.subscribed_topic_names is not None:
            updates["subscribed_topic_names"] = frozenset(req.subscribed_topic_names)
        if req.subscribed_topic_regex is not None:
            updates["subscribed_topic_regex"] = req.subscribed_topic_regex or None
        if req.server_assignor is not None:
            updates["server_assignor"] = req.server_assignor or None
        for k, v in updates.items():
            if getattr(member, k) != v:
                if k in ("subscribed_topic_names", "subscribed_topic_regex", "server_assignor"):
                    changed_sub = True
                if k not in ("client_id", "client_host") or not result.member_changed:
                    result.member_changed = True
                setattr(member, k, v)
        new = member_id not in self.members
        self.members[member_id] = member
        if new or changed_sub:
            self._bump()
            result.group_epoch_changed = True
        elif self.subscribed_topics(topics) != self.topic_partitions:
            self._bump()  # a subscribed topic appeared, went or grew
            result.group_epoch_changed = True
        if self.assignment_epoch != self.group_epoch:
            self.compute_target(topics, assignors[0])
            result.target_changed = True
        subscribed = frozenset(topics.resolve(member.subscribed_names(topics)))
        before = (member.member_epoch, member.state, member.assigned, member.pending_revocation)
        nxt = reconcile(
            member,
            self.assignment_epoch,
            self.target.get(member_id, {}),
            subscribed,
            self._held_by_other(member_id),
            req.owned,
        )
        self.members[member_id] = nxt
        after = (nxt.member_epoch, nxt.state, nxt.assigned, nxt.pending_revocation)
        result.assignment_changed = before != after
        result.member_epoch = nxt.member_epoch
        # the answer carries the assignment when the member joins, sends everything (after
        # a lost answer, say) or its assignment changed
        full = (
            req.rebalance_timeout_ms != -1
            and req.owned is not None
            and (req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None)
        )
        if req.member_epoch == 0 or full or nxt.assigned != before[2]:
            result.assignment = dict(nxt.assigned)
        return result

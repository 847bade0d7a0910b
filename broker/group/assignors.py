"""KIP-848's server-side assignors (`group.consumer.assignors`): `uniform` and `range`.

An assignor maps the group's members (each with the topics it subscribes to) and the
subscribed topics' partition counts to a target assignment: member id -> topic id ->
partitions. Both are deterministic (the same input gives the same target on every
coordinator, so a group moving to another broker computes what the old one would have)
and keep every partition of a subscribed topic assigned to exactly one member
subscribed to it, as long as one is.

- ``uniform`` (the default, Kafka's UniformAssignor): balanced and sticky. A member keeps
  the partitions it was given before up to its share, the rest go to the members with
  the fewest partitions, then partitions move from the fullest members to the emptiest
  eligible ones until no move makes it more even. With the same subscription everywhere
  the counts differ by at most one, and a member joining or leaving moves only the
  partitions it must.
- ``range`` (Kafka's RangeAssignor, server side): per topic, the members subscribed to it
  in member-id order each take a contiguous range, the first ``partitions % members``
  one partition more. Co-partitioned topics land together; it is not sticky.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

__all__ = [
    "ASSIGNORS",
    "AssignmentSpec",
    "MemberSpec",
    "TargetAssignment",
    "check_assignors",
    "range_assign",
    "uniform_assign",
]

#: member id -> topic id -> partitions
TargetAssignment = dict[str, dict[uuid.UUID, frozenset[int]]]


@dataclass(frozen=True)
class MemberSpec:
    """What the assignor needs of a member: the topics it subscribes to (ids, resolved)
    and what it was given before (its previous target, for stickiness)."""

    topics: frozenset[uuid.UUID]
    previous: Mapping[uuid.UUID, frozenset[int]]


@dataclass(frozen=True)
class AssignmentSpec:
    members: Mapping[str, MemberSpec]
    #: topic id -> partition count, for every subscribed topic that exists
    partitions: Mapping[uuid.UUID, int]


def _collect(owned: dict[str, list[tuple[uuid.UUID, int]]]) -> TargetAssignment:
    out: TargetAssignment = {}
    for member, tps in owned.items():
        by_topic: dict[uuid.UUID, set[int]] = {}
        for t, p in tps:
            by_topic.setdefault(t, set()).add(p)
        out[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


def uniform_assign(spec: AssignmentSpec) -> TargetAssignment:
    members = sorted(spec.members)
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    if not members:
        return {}
    eligible: dict[uuid.UUID, list[str]] = {
        t: [m for m in members if t in spec.members[m].topics] for t in sorted(spec.partitions)
    }
    all_tps = [(t, p) for t in sorted(spec.partitions) for p in range(spec.partitions[t]) if eligible[t]]
    # a member's share: its eligible partitions spread over the members they could go to
    share = {m: 0.0 for m in members}
    for t, ms in eligible.items():
        for m in ms:
            share[m] += spec.partitions[t] / len(ms)
    taken: set[tuple[uuid.UUID, int]] = set()
    # 1. stickiness: keep what was given before, up to the share rounded up
    for m in members:
        quota = int(share[m]) + (1 if share[m] % 1 else 0)
        prev = [
            (t, p)
            for t in sorted(spec.members[m].previous)
            if t in spec.members[m].topics and t in spec.partitions
            for p in sorted(spec.members[m].previous[t])
            if p < spec.partitions[t]
        ]
        for tp in prev:
            if len(owned[m]) >= quota:
                break
            if tp not in taken:
                taken.add(tp)
                owned[m].append(tp)
    # 2. the rest to the eligible member with the fewest partitions
    for tp in all_tps:
        if tp in taken:
            continue
        m = min(eligible[tp[0]], key=lambda x: (len(owned[x]), x))
        owned[m].append(tp)
        taken.add(tp)
    # 3. even out: move a partition from a fuller member to an eligible emptier one while
    # that narrows the gap by at least two
    changed = True
    while changed:
        changed = False
        for src in sorted(members, key=lambda x: (-len(owned[x]), x)):
            for tp in reversed(owned[src]):
                dst = min(eligible[tp[0]], key=lambda x: (len(owned[x]), x))
                if len(owned[dst]) + 1 < len(owned[src]):
                    owned[src].remove(tp)
                    owned[dst].append(tp)
                    changed = True
                    break
            if changed:
                break
    return _collect(owned)


def range_assign(spec: AssignmentSpec) -> TargetAssignment:
    members = sorted(spec.members)
    owned: dict[str, list[tuple[uuid.UUID, int]]] = {m: [] for m in members}
    for t in sorted(spec.partitions):
        ms = [m for m in members if t in spec.members[m].topics]
        if not ms:
            continue
        n = spec.partitions[t]
        each, extra = divmod(n, len(ms))
        start = 0
        for i, m in enumerate(ms):
            count = each + (1 if i < extra else 0)
            owned[m].extend((t, p) for p in range(start, start + count))
            start += count
    return _collect(owned)


#: name -> assignor, as `group.consumer.assignors` and a heartbeat's ServerAssignor name them
ASSIGNORS = {"uniform": uniform_assign, "range": range_assign}


def check_assignors(names: Sequence[str]) -> list[str]:
    """The names of `names` no assignor has."""
    return [n for n in names if n not in ASSIGNORS]

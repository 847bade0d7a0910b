"""`broker topics reassign --balance`: a plan that evens out replicas and preferred leaders
across brokers with few moves, without putting two replicas of a partition in one rack
where the partition had them in distinct racks. Pure: assignment in, plan out.

1. Replicas: each broker's share is the total over the brokers, rounded down or up (the
   brokers holding most keep the larger shares, so that the fewest replicas move). While
   a broker holds more than its share and another less, one replica moves from the first
   to the second, in the same position of the partition's list: a partition where the
   giver is not the preferred replica first (leaderships stay), never onto a broker that
   already is a replica, never making two replicas share a rack that did not.
2. Preferred leaders (the first replica, which leads after a preferred election):
   while a broker is first in more partitions than its share and another in fewer, a
   partition having both as replicas swaps them (an order change: no data moves).

Only the partitions whose list changed are in the plan.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

Plan = dict[tuple[str, int], list[int]]


def _shares(counts: Mapping[int, int], total: int) -> dict[int, int]:
    n = len(counts)
    base, extra = divmod(total, n)
    ranked = sorted(counts, key=lambda b: (-counts[b], b))
    return {b: base + (1 if i < extra else 0) for i, b in enumerate(ranked)}


def _distinct_racks(replicas: Sequence[int], racks: Mapping[int, str | None]) -> int:
    return len({racks.get(r) for r in replicas if racks.get(r) is not None})


def balance(current: Mapping[tuple[str, int], Sequence[int]], racks: Mapping[int, str | None]) -> Plan:
    """The plan (changed partitions only) over the brokers of `racks` (id -> rack or None)."""
    brokers = sorted(racks)
    if not brokers:
        return {}
    work: Plan = {tp: list(r) for tp, r in sorted(current.items())}
    _even_replicas(work, brokers, racks)
    _even_leaders(work, brokers)
    return {tp: r for tp, r in work.items() if r != list(current[tp])}


def _even_replicas(work: Plan, brokers: list[int], racks: Mapping[int, str | None]) -> None:
    counts = {b: 0 for b in brokers}
    for replicas in work.values():
        for r in replicas:
            if r in counts:
                counts[r] += 1
    total = sum(counts.values())
    share = _shares(counts, total)
    for _ in range(total + 1):
        over = sorted((b for b in brokers if counts[b] > share[b]), key=lambda b: (share[b] - counts[b], b))
        under = sorted((b for b in brokers if counts[b] < share[b]), key=lambda b: (counts[b] - share[b], b))
        move = next(
            ((tp, giver, taker) for giver in over for taker in under for tp in _candidates(work, giver, taker, racks)),
            None,
        )
        if move is None:
            return
        tp, giver, taker = move
        replicas = work[tp]
        replicas[replicas.index(giver)] = taker
        counts[giver] -= 1
        counts[taker] += 1


def _candidates(work: Plan, giver: int, taker: int, racks: Mapping[int, str | None]) -> list[tuple[str, int]]:
    out = []
    for tp, replicas in work.items():
        if giver not in replicas or taker in replicas:
            continue
        after = [taker if r == giver else r for r in replicas]
        if _distinct_racks(after, racks) < _distinct_racks(replicas, racks):
            continue
        out.append(tp)
    # a partition the giver does not lead first, then in order
    return sorted(out, key=lambda tp: (work[tp][0] == giver, tp))


def _even_leaders(work: Plan, brokers: list[int]) -> None:
    counts = {b: 0 for b in brokers}
    for replicas in work.values():
        if replicas and replicas[0] in counts:
            counts[replicas[0]] += 1
    share = _shares(counts, sum(counts.values()))
    for _ in range(len(work) + 1):
        over = [b for b in sorted(brokers) if counts[b] > share[b]]
        under = [b for b in sorted(brokers) if counts[b] < share[b]]
        swap = next(
            ((tp, o, u) for o in over for u in under for tp, r in work.items() if r and r[0] == o and u in r), None
        )
        if swap is None:
            return
        tp, o, u = swap
        r = work[tp]
        i = r.index(u)
        r[0], r[i] = u, o
        counts[o] -= 1
        counts[u] += 1

"""Replication throttles (KIP-73) as pure parts, for reassignments: not wired to any fetch
yet (the next step: the leader leaves throttled partitions out of a follower's fetch
answer while its rate is exceeded, the follower leaves them out of its fetch requests).

- `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`
  (topic configs): `*`, empty, or `partition:broker` pairs (Kafka's
  ThrottledReplicaListValidator); a broker throttles the partitions whose pairs name it
  (QuotaConfigHandler.updateThrottledList).
- the throttles kafka-reassign-partitions --throttle sets for a plan
  (ReassignPartitionsCommand.calculateLeaderThrottles / calculateFollowerThrottles): on the
  leader side every current replica of a moving partition, on the follower side the
  replicas being added.
- `RateMeter`: bytes per second over a window of samples (Kafka's quota Rate with
  replication.quota.window.num = 11 samples of replication.quota.window.size.seconds = 1).
"""
from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

ALL = "*"
_PAIR = re.compile(r"\s*(\d+)\s*:\s*(\d+)\s*")


@dataclass(frozen=True)
class ThrottledReplicas:
    """A parsed throttled-replicas list: every replica (`*`) or (partition, broker) pairs."""

    all: bool = False
    pairs: frozenset[tuple[int, int]] = frozenset()

    def partitions_on(self, broker_id: int, partitions: Sequence[int]) -> frozenset[int]:
        """The partitions of `partitions` this list throttles on broker `broker_id`."""
        if self.all:
            return frozenset(partitions)
        return frozenset(p for p in partitions if (p, broker_id) in self.pairs)


def parse_throttled_replicas(value: str) -> ThrottledReplicas:
    """ValueError (Kafka's words) for anything but `*`, empty, or partition:broker pairs."""
    text = value.strip()
    if text == ALL:
        return ThrottledReplicas(all=True)
    if not text:
        return ThrottledReplicas()
    pairs = set()
    for item in text.split(","):
        m = _PAIR.fullmatch(item)
        if m is None:
            raise ValueError(f"{value!r} must be the wildcard (*) or a list of replicas in the form "
                             f"[PartitionId]:[BrokerId],[PartitionId]:[BrokerId],...")
        pairs.add((int(m[1]), int(m[2])))
    return ThrottledReplicas(pairs=frozenset(pairs))


def format_throttled_replicas(pairs: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(set(pairs)))


def reassignment_throttles(current: Mapping[tuple[str, int], Sequence[int]],
                           proposed: Mapping[tuple[str, int], Sequence[int]]
                           ) -> tuple[dict[str, str], dict[str, str]]:
    """({topic: leader throttled replicas}, {topic: follower throttled replicas}) for the
    partitions whose replicas a plan changes: every current replica on the leader side
    (whichever leads while it moves), the replicas being added on the follower side."""
    leader: dict[str, list[tuple[int, int]]] = {}
    follower: dict[str, list[tuple[int, int]]] = {}
    for (topic, p), target in sorted(proposed.items()):
        now = list(current.get((topic, p), ()))
        if list(target) == now:
            continue
        leader.setdefault(topic, []).extend((p, r) for r in now)
        follower.setdefault(topic, []).extend((p, r) for r in target if r not in now)
    return ({t: format_throttled_replicas(v) for t, v in leader.items()},
            {t: format_throttled_replicas(v) for t, v in follower.items() if v})


class RateMeter:
    """Bytes per second over the last `samples` windows of `window_s` seconds (the current,
    partial one included, as Kafka's SampledStat: the elapsed time counts at least
    samples - 1 full windows, so a first burst is not taken for a huge rate)."""

    def __init__(self, samples: int = 11, window_s: float = 1.0):
        if samples < 2 or window_s <= 0:
            raise ValueError("a rate needs at least 2 samples of a positive window")
        self.samples = samples
        self.window_s = window_s
        self._windows: dict[int, float] = {}       # window index -> bytes

    def record(self, n: float, now: float) -> None:
        w = int(now // self.window_s)
        self._windows[w] = self._windows.get(w, 0.0) + n
        for old in [k for k in self._windows if k <= w - self.samples]:
            del self._windows[old]

    def rate(self, now: float) -> float:
        w = int(now // self.window_s)
        live = {k: v for k, v in self._windows.items() if k > w - self.samples}
        if not live:
            return 0.0
        oldest = min(live)
        elapsed = now - oldest * self.window_s
        elapsed = max(elapsed, (self.samples - 1) * self.window_s)
        return sum(live.values()) / elapsed

    def exceeded(self, bound: float | None, now: float) -> bool:
        """Above `bound` bytes/s (None: no bound)."""
        return bound is not None and self.rate(now) > bound

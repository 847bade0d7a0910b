"""Replication throttles (KIP-73), Kafka's ReplicationQuotaManager: what reassignments use
to move data without starving the brokers.

- `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`
  (topic configs): `*`, empty, or `partition:broker` pairs (Kafka's
  ThrottledReplicaListValidator); a broker throttles the partitions whose pairs name it,
  every partition with `*` (TopicConfigHandler.parseThrottledPartitions).
- `leader.replication.throttled.rate` / `follower.replication.throttled.rate` (dynamic
  broker configs, bytes/s): the bound of each side's `ReplicationQuota`, measured over
  `replication.quota.window.num` windows of `replication.quota.window.size.seconds`
  (Kafka's 11 of 1 s) as Kafka's SimpleRate.
- leader side (ReplicaManager.readFromLocalLog): a follower's fetch gets no data for a
  throttled partition it is not in sync for while the leader quota is exceeded; the
  bytes sent for throttled partitions are recorded (KafkaApis.sizeOfThrottledPartitions).
- follower side (ReplicaFetcherThread): a throttled partition not in sync is left out of
  the fetch request while the follower quota is exceeded; its bytes fetched are recorded.
- the throttles kafka-reassign-partitions --throttle sets for a plan
  (ReassignPartitionsCommand.calculateLeaderThrottles / calculateFollowerThrottles): on the
  leader side every current replica of a moving partition, on the follower side the
  replicas being added.

Unlike Kafka, one answer (leader side) or request (follower side) carries at most one
window's worth of a bound's bytes for throttled partitions (as a consumer's quota bounds
its fetches, Kafka's getMaxValueInQuotaWindow): with replica.fetch.max.bytes per
partition and several fetchers, a throttle of 1 MB/s would otherwise take many MB at
once and hold the rate only on average over tens of seconds.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from broker.config import check_throttled_replicas

log = logging.getLogger(__name__)

ALL = "*"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
#: Kafka's QuotaConfigs.QUOTA_BYTES_PER_SECOND_DEFAULT (Long.MAX_VALUE): no bound
UNBOUNDED = 2**63 - 1
_PAIR = re.compile(r"([0-9]+):([0-9]+)")


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

    def on_broker(self, broker_id: int) -> frozenset[int] | None:
        """What broker `broker_id` throttles of the topic: None for every partition (`*`),
        else the partitions whose pairs name it (Kafka's markThrottled)."""
        if self.all:
            return None
        return frozenset(p for p, b in self.pairs if b == broker_id)


def parse_throttled_replicas(value: str | Sequence[str]) -> ThrottledReplicas:
    """ValueError (Kafka's words) for anything but `*`, empty, or partition:broker pairs
    (empty items are allowed, as Kafka's)."""
    items = value.split(",") if isinstance(value, str) else list(value)
    problem = check_throttled_replicas(items)
    if problem is not None:
        raise ValueError(f"{value!r} {problem}")
    stripped = [x.strip() for x in items]
    if "".join(stripped) == ALL:
        return ThrottledReplicas(all=True)
    pairs = set()
    for item in stripped:
        m = _PAIR.fullmatch(item)
        if m is not None:
            pairs.add((int(m[1]), int(m[2])))
    return ThrottledReplicas(pairs=frozenset(pairs))


def format_throttled_replicas(pairs: Sequence[tuple[int, int]]) -> str:
    return ",".join(f"{p}:{b}" for p, b in sorted(set(pairs)))


def reassignment_throttles(
    current: Mapping[tuple[str, int], Sequence[int]],
    proposed: Mapping[tuple[str, int], Sequence[int]],
    ongoing: Mapping[tuple[str, int], tuple[Sequence[int], Sequence[int]]] | None = None,
) -> tuple[dict[str, str], dict[str, str]]:
    """({topic: leader throttled replicas}, {topic: follower throttled replicas}) for the
    partitions of a plan: every source replica on the leader side (whichever leads while
    it moves), the replicas being added on the follower side. As Kafka's tool, a plan's
    partition that does not move still gets its leader-side throttles.
    `ongoing` ({(topic, partition): (replicas, adding)}, the reassignments in progress):
    their sources are their original replicas, and those the plan leaves alone keep their
    throttles (Kafka's calculateProposedMoveMap, for --additional)."""
    moves: dict[tuple[str, int], tuple[list[int], list[int]]] = {}
    for tp, (replicas, adding) in (ongoing or {}).items():
        moves[tp] = ([r for r in replicas if r not in adding], list(adding))
    for tp, target in proposed.items():
        sources = moves[tp][0] if tp in moves else list(current.get(tp, ()))
        moves[tp] = (sources, [r for r in target if r not in sources])
    leader: dict[str, list[tuple[int, int]]] = {}
    follower: dict[str, list[tuple[int, int]]] = {}
    for (topic, p), (sources, destinations) in sorted(moves.items()):
        leader.setdefault(topic, []).extend((p, r) for r in sources)
        follower.setdefault(topic, []).extend((p, r) for r in destinations)
    return (
        {t: format_throttled_replicas(v) for t, v in leader.items()},
        {t: format_throttled_replicas(v) for t, v in follower.items() if v},
    )


class RateMeter:
    """Bytes per second over the last `samples` windows of `window_s` seconds, the current
    partial one included. As Kafka's Rate, the elapsed time counts at least samples - 1
    full windows, so a first burst is not taken for a huge rate; with `simple`, as
    Kafka's SimpleRate (what replication quotas use), at least one window."""

    def __init__(self, samples: int = 11, window_s: float = 1.0, simple: bool = False):
        if samples < 2 or window_s <= 0:
            raise ValueError("a rate needs at least 2 samples of a positive window")
        self.samples = samples
        self.window_s = window_s
        self.min_elapsed = window_s if simple else (samples - 1) * window_s
        self._windows: dict[int, float] = {}  # window index -> bytes

    def record(self, n: float, now: float) -> None:
        w = int(now // self.window_s)
        windows = self._windows
        windows[w] = windows.get(w, 0.0) + n
        if len(windows) > self.samples:
            for old in [k for k in windows if k <= w - self.samples]:
                del windows[old]

    def rate(self, now: float) -> float:
        first = int(now // self.window_s) - self.samples + 1  # the oldest window still counted
        total = 0.0
        oldest = None
        for k, v in self._windows.items():
            if k >= first:
                total += v
                if oldest is None or k < oldest:
                    oldest = k
        if oldest is None:
            return 0.0
        return total / max(now - oldest * self.window_s, self.min_elapsed)

    def exceeded(self, bound: float | None, now: float) -> bool:
        """Above `bound` bytes/s (None: no bound)."""
        return bound is not None and self.rate(now) > bound


class ReplicationQuota:
    """One side's throttle on this broker (Kafka's ReplicationQuotaManager for
    LeaderReplication or FollowerReplication): the partitions it throttles, per topic,
    and the rate of their bytes held to `bound` (None: unbounded)."""

    def __init__(self, name: str, broker_id: int, samples: int = 11, window_s: float = 1.0):
        self.name = name
        self.broker_id = broker_id
        self.meter = RateMeter(samples, window_s, simple=True)
        self.bound: float | None = None
        #: topic -> its throttled partitions here (None: all of them)
        self.topics: dict[str, frozenset[int] | None] = {}
        #: bytes recorded in all (the metrics' counter)
        self.throttled_bytes = 0

    @property
    def window_s(self) -> float:
        return self.meter.window_s

    def set_bound(self, bound: float | None) -> None:
        """Kafka's updateQuota: bytes/s, None (or Long.MAX_VALUE) for none."""
        self.bound = None if bound is None or bound >= UNBOUNDED else float(bound)

    def set_throttled(self, topic: str, value: str | Sequence[str] | None) -> None:
        """A topic's throttled-replicas config changed (Kafka's updateThrottledList): the
        partitions whose pairs name this broker, all with `*`; none when unset or empty."""
        parsed = None
        if value is not None and (value if isinstance(value, str) else "".join(value)).strip():
            try:
                parsed = parse_throttled_replicas(value)
            except ValueError as exc:
                log.warning("%s: topic %s: %s ignored: %s", self.name, topic, value, exc)
        if parsed is None:
            self.topics.pop(topic, None)
            return
        self.topics[topic] = parsed.on_broker(self.broker_id)

    def is_throttled(self, topic: str, partition: int) -> bool:
        """Kafka's isThrottled: the partition is on this side's list here."""
        topics = self.topics
        if not topics or topic not in topics:
            return False
        parts = topics[topic]
        return parts is None or partition in parts

    def exceeded(self, now: float | None = None) -> bool:
        """Kafka's isQuotaExceeded: the rate is above the bound."""
        bound = self.bound
        if bound is None:
            return False
        return self.meter.rate(time.monotonic() if now is None else now) > bound

    def record(self, n: int, now: float | None = None) -> None:
        """Bytes of throttled partitions (counted even when not exceeded, as Kafka's)."""
        if n > 0:
            self.throttled_bytes += n
            self.meter.record(n, time.monotonic() if now is None else now)

    def rate(self, now: float | None = None) -> float:
        return self.meter.rate(time.monotonic() if now is None else now)

    def window_bytes(self) -> int:
        """What one answer or request may carry for throttled partitions: one window's
        worth of the bound (at least 1), unlimited without a bound."""
        if self.bound is None:
            return 0x7FFFFFFF
        return max(int(min(self.bound * self.window_s, 0x7FFFFFFF)), 1)


class ReplicationQuotas:
    """This broker's leader and follower replication throttles (Kafka's
    QuotaManagers.leader / .follower), kept current from topic configs and dynamic
    broker configs."""

    def __init__(self, broker_id: int, samples: int = 11, window_s: float = 1.0):
        self.leader = ReplicationQuota("LeaderReplication", broker_id, samples, window_s)
        self.follower = ReplicationQuota("FollowerReplication", broker_id, samples, window_s)

    def topic_configs_changed(self, topic: str, configs: Mapping[str, str] | None) -> None:
        """A topic's configs (None: the topic is gone): its throttled lists on both sides."""
        configs = configs or {}
        self.leader.set_throttled(topic, configs.get(LEADER_REPLICAS))
        self.follower.set_throttled(topic, configs.get(FOLLOWER_REPLICAS))

    def set_rates(self, leader: float | None, follower: float | None) -> bool:
        """The bounds from the dynamic broker configs; whether one changed."""
        before = (self.leader.bound, self.follower.bound)
        self.leader.set_bound(leader)
        self.follower.set_bound(follower)
        return before != (self.leader.bound, self.follower.bound)


def throttled_rates(
    per_broker: Mapping[str, object], default: Mapping[str, object]
) -> tuple[float | None, float | None]:
    """(leader, follower) bytes/s from the dynamic configs of this broker, else the
    cluster default's (parsed values; None: unbounded)."""
    out = []
    for key in (LEADER_RATE, FOLLOWER_RATE):
        value = per_broker.get(key, default.get(key))
        out.append(None if value is None else float(value))  # type: ignore[arg-type]
    return out[0], out[1]

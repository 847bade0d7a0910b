"""Replication throttles (broker/cluster/replica/throttle.py): Kafka's throttled-replicas
lists and which partitions each broker throttles, the throttles kafka-reassign-partitions
--throttle sets for a plan, the sampled rates and the quota a throttle is held to."""

import pytest

from broker.cluster.replica.throttle import (
    UNBOUNDED,
    RateMeter,
    ReplicationQuota,
    ReplicationQuotas,
    ThrottledReplicas,
    parse_throttled_replicas,
    reassignment_throttles,
    throttled_rates,
)
from broker.config import ConfigError, check_throttled_replicas, validate_topic_configs


def test_throttled_replica_lists_as_kafka_takes_them():
    assert parse_throttled_replicas("*") == ThrottledReplicas(all=True)
    assert parse_throttled_replicas(" * ") == ThrottledReplicas(all=True)
    assert parse_throttled_replicas(" ") == ThrottledReplicas()
    t = parse_throttled_replicas("0:1, 1:2,0:3")
    assert t.pairs == {(0, 1), (1, 2), (0, 3)}
    assert t.partitions_on(1, range(3)) == {0}
    assert t.partitions_on(3, range(3)) == {0}
    assert t.partitions_on(4, range(3)) == frozenset()
    assert parse_throttled_replicas("*").partitions_on(9, [0, 1]) == {0, 1}
    # empty items are fine, as Kafka's ThrottledReplicaListValidator ("([0-9]+:[0-9]+)?")
    assert parse_throttled_replicas("0:1,,2:1,").pairs == {(0, 1), (2, 1)}
    assert parse_throttled_replicas(["0:1", "2:1"]).pairs == {(0, 1), (2, 1)}
    for bad in ("0", "a:1", "0:1;1:2", "-1:2", "*,0:1", "0:*"):
        with pytest.raises(ValueError, match="must be the literal '\\*' or a list of replicas"):
            parse_throttled_replicas(bad)
    assert check_throttled_replicas(["*"]) is None and check_throttled_replicas([]) is None


def test_each_broker_throttles_the_partitions_its_id_names():
    t = parse_throttled_replicas("0:1,1:2,2:1,3:3")
    assert t.on_broker(1) == {0, 2}
    assert t.on_broker(2) == {1}
    assert t.on_broker(7) == frozenset()
    assert parse_throttled_replicas("*").on_broker(7) is None  # all of them
    q = ReplicationQuota("LeaderReplication", broker_id=1)
    q.set_throttled("t", "0:1,1:2,2:1")
    q.set_throttled("u", "*")
    q.set_throttled("v", "0:2")  # names another broker only
    assert [p for p in range(4) if q.is_throttled("t", p)] == [0, 2]
    assert all(q.is_throttled("u", p) for p in range(5))
    assert not any(q.is_throttled("v", p) for p in range(3))
    assert not q.is_throttled("w", 0)
    q.set_throttled("t", "")  # removed (Kafka's removeThrottle)
    q.set_throttled("u", None)
    assert not q.is_throttled("t", 0) and not q.is_throttled("u", 0)
    q.set_throttled("x", "garbage")  # a foreign value: not throttled
    assert not q.is_throttled("x", 0)


def test_a_topics_configs_set_both_sides():
    quotas = ReplicationQuotas(broker_id=2)
    quotas.topic_configs_changed(
        "t",
        {
            "leader.replication.throttled.replicas": "0:1,0:2,1:3",
            "follower.replication.throttled.replicas": "1:2",
            "retention.ms": "1000",
        },
    )
    assert quotas.leader.is_throttled("t", 0) and not quotas.leader.is_throttled("t", 1)
    assert quotas.follower.is_throttled("t", 1) and not quotas.follower.is_throttled("t", 0)
    quotas.topic_configs_changed("t", None)  # the topic is gone
    assert not quotas.leader.topics and not quotas.follower.topics


def test_the_topic_configs_are_validated_as_kafka():
    assert validate_topic_configs(
        {"leader.replication.throttled.replicas": "0:1,1:2", "follower.replication.throttled.replicas": "*"}
    ) == {"leader.replication.throttled.replicas": ["0:1", "1:2"], "follower.replication.throttled.replicas": ["*"]}
    with pytest.raises(ConfigError, match="follower.replication.throttled.replicas.*must be the literal"):
        validate_topic_configs({"follower.replication.throttled.replicas": "0-1"})


def test_the_rates_come_from_this_broker_then_the_cluster_default():
    assert throttled_rates({}, {}) == (None, None)
    assert throttled_rates(
        {"leader.replication.throttled.rate": 1000},
        {"leader.replication.throttled.rate": 5, "follower.replication.throttled.rate": 7},
    ) == (1000.0, 7.0)
    quotas = ReplicationQuotas(broker_id=1)
    assert quotas.set_rates(1000.0, None) and not quotas.set_rates(1000.0, None)
    assert quotas.leader.bound == 1000.0 and quotas.follower.bound is None
    quotas.set_rates(UNBOUNDED, UNBOUNDED)  # Kafka's default: Long.MAX_VALUE
    assert quotas.leader.bound is None and quotas.follower.bound is None


def test_a_plans_throttles_as_kafkas_tool_sets_them():
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [1]}
    proposed = {("t", 0): [4, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [2]}
    leader, follower = reassignment_throttles(current, proposed)
    # every current replica of the plan's partitions, a partition that stays put too (as
    # Kafka's calculateProposedMoveMap), on the leader side; the replicas being added on
    # the follower side
    assert leader == {"t": "0:1,0:2,0:3,1:1,1:2,1:3", "u": "0:1"}
    assert follower == {"t": "0:4", "u": "0:2"}
    assert reassignment_throttles(current, {("t", 1): [2, 3, 1]}) == ({"t": "1:1,1:2,1:3"}, {})
    # with reassignments in progress (--additional): their sources are the original
    # replicas, and those the plan does not name keep their throttles
    ongoing = {("t", 0): ([4, 2, 3, 1], [4]), ("v", 3): ([5, 6], [6])}
    leader, follower = reassignment_throttles(current, {("t", 0): [5, 2, 3]}, ongoing)
    assert leader == {"t": "0:1,0:2,0:3", "v": "3:5"}
    assert follower == {"t": "0:5", "v": "3:6"}


def test_the_rate_is_sampled_over_the_window():
    m = RateMeter(samples=11, window_s=1.0)
    m.record(10_000, 0.5)
    assert m.rate(0.5) == pytest.approx(1000.0)  # a first burst counts over 10 s, not 0.5 s
    for s in range(1, 30):
        m.record(5_000, s + 0.5)
    assert m.rate(29.99) == pytest.approx(5_000 * 11 / 10.99, rel=0.01)
    assert m.exceeded(4_000, 29.99) and not m.exceeded(6_000, 29.99) and not m.exceeded(None, 29.99)
    assert m.rate(60.0) == 0.0  # nothing in the window any more
    with pytest.raises(ValueError):
        RateMeter(samples=1)


def test_a_simple_rate_counts_a_first_burst_over_one_window():
    """Kafka's SimpleRate (replication quotas): at least one window, not samples - 1."""
    m = RateMeter(samples=11, window_s=1.0, simple=True)
    m.record(10_000, 100.5)
    assert m.rate(100.5) == pytest.approx(10_000.0)
    assert m.rate(103.0) == pytest.approx(10_000 / 3.0)  # since the window it fell in began
    assert m.rate(111.0) == 0.0  # out of the 11 windows


def test_the_quota_is_exceeded_above_its_bound_only():
    q = ReplicationQuota("FollowerReplication", broker_id=1)
    assert not q.exceeded(0.0) and q.window_bytes() == 0x7FFFFFFF  # no bound
    q.record(10**9, 0.0)
    assert not q.exceeded(0.5)
    q.set_bound(1000)
    assert q.exceeded(0.5) and q.window_bytes() == 1000
    q.set_bound(10**9)
    assert not q.exceeded(0.5)
    assert q.throttled_bytes == 10**9
    q.record(0, 0.5)
    q.record(-5, 0.5)
    assert q.throttled_bytes == 10**9


@pytest.mark.parametrize("bound", [100_000, 1_000_000, 20_000_000])
def test_a_sender_that_waits_while_exceeded_is_held_to_the_bound(bound):
    """The quota arithmetic as the fetch paths use it: every 10 ms, while the quota is not
    exceeded, one round moves at most one window's bytes; over any 20 s stretch (after
    the start, and long after), the rate is the bound within a few percent."""
    q = ReplicationQuota("FollowerReplication", broker_id=1)
    q.set_bound(bound)
    moved = {}
    total = 0
    for tick in range(6000):  # 60 s
        now = tick / 100
        if not q.exceeded(now):
            n = min(q.window_bytes(), 4 * 1024 * 1024)  # replica.fetch.max.bytes x partitions
            q.record(n, now)
            total += n
        moved[tick] = total
    for start in (0, 1000, 3000):
        rate = (moved[start + 2000] - moved[start]) / 20.0
        assert rate == pytest.approx(bound, rel=0.05), (start, rate)

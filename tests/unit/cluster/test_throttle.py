"""Replication throttles' pure parts (broker/cluster/replica/throttle.py): Kafka's
throttled-replicas lists, the throttles kafka-reassign-partitions --throttle sets for a
plan, and the sampled rate a throttle is held to."""
import pytest

from broker.cluster.replica.throttle import (
    RateMeter,
    ThrottledReplicas,
    parse_throttled_replicas,
    reassignment_throttles,
)


def test_throttled_replica_lists_as_kafka_takes_them():
    assert parse_throttled_replicas("*") == ThrottledReplicas(all=True)
    assert parse_throttled_replicas(" ") == ThrottledReplicas()
    t = parse_throttled_replicas("0:1, 1:2,0:3")
    assert t.pairs == {(0, 1), (1, 2), (0, 3)}
    assert t.partitions_on(1, range(3)) == {0}
    assert t.partitions_on(3, range(3)) == {0}
    assert t.partitions_on(4, range(3)) == frozenset()
    assert parse_throttled_replicas("*").partitions_on(9, [0, 1]) == {0, 1}
    for bad in ("0", "a:1", "0:1,", "0:1;1:2", "-1:2"):
        with pytest.raises(ValueError, match="wildcard"):
            parse_throttled_replicas(bad)


def test_a_plans_throttles_as_kafkas_tool_sets_them():
    current = {("t", 0): [1, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [1]}
    proposed = {("t", 0): [4, 2, 3], ("t", 1): [2, 3, 1], ("u", 0): [2]}
    leader, follower = reassignment_throttles(current, proposed)
    assert leader == {"t": "0:1,0:2,0:3", "u": "0:1"}       # every current replica of a moving partition
    assert follower == {"t": "0:4", "u": "0:2"}             # the replicas being added
    assert reassignment_throttles(current, current) == ({}, {})


def test_the_rate_is_sampled_over_the_window():
    m = RateMeter(samples=11, window_s=1.0)
    m.record(10_000, 0.5)
    assert m.rate(0.5) == pytest.approx(1000.0)            # a first burst counts over 10 s, not 0.5 s
    for s in range(1, 30):
        m.record(5_000, s + 0.5)
    assert m.rate(29.99) == pytest.approx(5_000 * 11 / 10.99, rel=0.01)
    assert m.exceeded(4_000, 29.99) and not m.exceeded(6_000, 29.99) and not m.exceeded(None, 29.99)
    assert m.rate(60.0) == 0.0                              # nothing in the window any more
    with pytest.raises(ValueError):
        RateMeter(samples=1)

"""Leader selection tables (the shape of Kafka's PartitionLeaderElectionAlgorithmsTest),
plus properties: the leader is always a live replica, in the ISR unless unclean."""

import pytest
from hypothesis import given, strategies as st

from broker.cluster.controller.election import (
    controlled_shutdown_leader,
    offline_partition_leader,
    preferred_replica_leader,
    reassign_partition_leader,
)


@pytest.mark.parametrize(
    "replicas, isr, live, unclean_enabled, expected",
    [
        ([2, 4], [2, 4], {4}, False, (4, False)),  # first live ISR member
        ([2, 4], [2, 4], {2, 4}, False, (2, False)),  # assignment order decides
        ([4, 2], [2, 4], {2, 4}, False, (4, False)),  # ... not ISR order
        ([2, 4], [2], {4}, False, (None, False)),  # last ISR member gone, unclean off
        ([2, 4], [2], {4}, True, (4, True)),  # ... unclean on: an out-of-sync replica
        ([1, 2, 3], [1], {2, 3}, True, (2, True)),  # the first live one
        ([1, 2, 3], [1, 3], {2, 3}, True, (3, False)),  # a live ISR member wins even when unclean is on
        ([2, 4], [2, 4], set(), True, (None, False)),  # nobody alive
        ([2, 4], [2, 4, 7], {7}, True, (None, False)),  # a live broker that is not a replica never leads
    ],
)
def test_offline_partition_leader(replicas, isr, live, unclean_enabled, expected):
    assert offline_partition_leader(replicas, isr, live, unclean_enabled) == expected


@pytest.mark.parametrize(
    "reassignment, isr, live, expected",
    [
        ([2, 4], [2, 4], {4}, 4),
        ([2, 4], [2, 4], {2, 4}, 2),
        ([4, 2], [2, 4], {2, 4}, 4),  # the target assignment's order
        ([2, 4], [2], {4}, None),  # 4 not in sync yet
        ([5, 6], [1, 2], {1, 2, 5, 6}, None),  # only target replicas may lead
    ],
)
def test_reassign_partition_leader(reassignment, isr, live, expected):
    assert reassign_partition_leader(reassignment, isr, live) == expected


@pytest.mark.parametrize(
    "replicas, isr, live, expected",
    [
        ([2, 4], [2, 4], {2, 4}, 2),
        ([2, 4], [4], {2, 4}, None),  # preferred out of the ISR
        ([2, 4], [2, 4], {4}, None),  # preferred not live: nobody else is preferred
        ([], [], {1}, None),
    ],
)
def test_preferred_replica_leader(replicas, isr, live, expected):
    assert preferred_replica_leader(replicas, isr, live) == expected


@pytest.mark.parametrize(
    "replicas, isr, live, shutting_down, expected",
    [
        ([2, 4], [2, 4], {2, 4}, {2}, 4),
        ([2, 4], [2], {2, 4}, {2}, None),  # no other ISR member: the leader stays
        ([2, 4, 6], [2, 4, 6], {2, 4, 6}, {2, 4}, 6),
        ([2, 4, 6], [2, 4, 6], {2, 6}, {2}, 6),  # 4 is not live
        ([2, 4, 6], [2, 6], {2, 4, 6}, {2}, 6),  # 4 is not in the ISR
    ],
)
def test_controlled_shutdown_leader(replicas, isr, live, shutting_down, expected):
    assert controlled_shutdown_leader(replicas, isr, live, shutting_down) == expected


@st.composite
def partitions(draw):
    replicas = draw(st.lists(st.integers(0, 9), min_size=1, max_size=5, unique=True))
    isr = draw(st.lists(st.sampled_from(replicas), unique=True))
    live = draw(st.sets(st.integers(0, 9)))
    return replicas, isr, live


@given(partitions(), st.booleans())
def test_offline_leader_is_live_and_in_sync_unless_unclean(partition, unclean_enabled):
    replicas, isr, live = partition
    leader, unclean = offline_partition_leader(replicas, isr, live, unclean_enabled)
    if leader is None:
        assert not unclean
        assert not (set(isr) & live) and (not unclean_enabled or not (set(replicas) & live))
    else:
        assert leader in replicas and leader in live
        assert unclean == (leader not in isr)
        assert not unclean or unclean_enabled


@given(partitions(), st.sets(st.integers(0, 9)))
def test_controlled_shutdown_leader_is_never_shutting_down(partition, shutting_down):
    replicas, isr, live = partition
    leader = controlled_shutdown_leader(replicas, isr, live, shutting_down)
    if leader is not None:
        assert leader in live and leader in isr and leader not in shutting_down
    else:
        assert not (set(isr) & set(replicas) & live) - shutting_down

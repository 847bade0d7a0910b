"""Replica assignment (Kafka's AdminUtils / AdminZkClient rules): tables worked out by hand
from the algorithm, Kafka's documented example, errors with Kafka's codes and messages,
and the distribution properties for any brokers and racks (hypothesis)."""

import random
from collections import Counter

import pytest
from hypothesis import given, strategies as st

from broker.cluster.controller.assignment import (
    assign_new_partitions,
    assign_replicas,
    rack_alternated_broker_list,
    validate_manual_assignment,
)
from broker.protocol.errors import ErrorCode, KafkaProtocolError


def no_racks(*ids):
    return {b: None for b in ids}


def raises(code, message, fn, *args, **kwargs):
    with pytest.raises(KafkaProtocolError) as info:
        fn(*args, **kwargs)
    assert (info.value.code, info.value.message) == (code, message)


# ---------------------------------------------------------------- exact tables


def test_round_robin_three_brokers_six_partitions():
    # start 0, shift 0: followers at +1, +2; at partition 3 the shift becomes 1: +2, +1
    assert assign_replicas(no_racks(1, 2, 3), 6, 3, fixed_start_index=0) == {
        0: [1, 2, 3],
        1: [2, 3, 1],
        2: [3, 1, 2],
        3: [1, 3, 2],
        4: [2, 1, 3],
        5: [3, 2, 1],
    }


def test_round_robin_start_index_also_fixes_the_shift():
    # start 1, shift 1: the first follower sits 1 + (1 % 3) = 2 places after the leader
    assert assign_replicas(no_racks(3, 0, 2, 1), 4, 2, fixed_start_index=1) == {
        0: [1, 3],
        1: [2, 0],
        2: [3, 1],
        3: [0, 2],
    }


def test_round_robin_matches_kafkas_documented_table():
    # AdminUtils' javadoc / AdminRackAwareTest: 5 brokers, 10 partitions, RF 3, start 0
    assert assign_replicas(no_racks(*range(5)), 10, 3, fixed_start_index=0) == {
        0: [0, 1, 2],
        1: [1, 2, 3],
        2: [2, 3, 4],
        3: [3, 4, 0],
        4: [4, 0, 1],
        5: [0, 2, 3],
        6: [1, 3, 4],
        7: [2, 4, 0],
        8: [3, 0, 1],
        9: [4, 1, 2],
    }


def test_rack_alternated_broker_list():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 5, 4, 2]
    del racks[5]
    assert rack_alternated_broker_list(racks) == [0, 3, 1, 4, 2]


def test_rack_aware_matches_kafkas_documented_table():
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert assign_replicas(racks, 7, 3, fixed_start_index=0) == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],
    }  # second round: followers shifted, not 0, 3, 1 again


def test_rack_aware_skips_a_follower_on_a_rack_already_used():
    # alternated list [1, 3, 2]; partition 2 leads on 2 (rack a): the next broker, 1, is
    # also on rack a while rack b has no replica, so 3 is taken instead
    racks = {1: "a", 2: "a", 3: "b"}
    assert assign_replicas(racks, 4, 2, fixed_start_index=0) == {0: [1, 3], 1: [3, 2], 2: [2, 3], 3: [1, 3]}


def test_rack_aware_more_replicas_than_racks():
    # alternated [1, 3, 2, 4]; once both racks hold a replica any unused broker will do
    racks = {1: "a", 2: "a", 3: "b", 4: "b"}
    assert assign_replicas(racks, 4, 3, fixed_start_index=0) == {0: [1, 3, 2], 1: [3, 2, 4], 2: [2, 4, 1], 3: [4, 1, 3]}


def test_start_partition_id_numbers_the_partitions():
    assert assign_replicas(no_racks(1, 2, 3), 2, 3, start_partition_id=3, fixed_start_index=0) == {
        3: [1, 3, 2],
        4: [2, 1, 3],
    }  # partition 3 is (3 + 0) % 3 = index 0, and grows the shift to 1


# ---------------------------------------------------------------- randomness


def test_seeded_rng_is_deterministic_and_two_draws_are_used():
    brokers = no_racks(*range(1, 7))
    first = assign_replicas(brokers, 12, 3, rng=random.Random(42))
    assert assign_replicas(brokers, 12, 3, rng=random.Random(42)) == first
    draws = random.Random(42)
    start, shift = draws.randrange(6), draws.randrange(6)
    assert first[0][0] == 1 + start
    assert first[0][1] == 1 + (start + 1 + shift % 5) % 6


def test_random_start_varies_the_preferred_leaders():
    brokers = no_racks(1, 2, 3, 4, 5)
    leaders = {assign_replicas(brokers, 1, 1, rng=random.Random(seed))[0][0] for seed in range(50)}
    assert leaders == {1, 2, 3, 4, 5}


# ---------------------------------------------------------------- errors


def test_errors_with_kafkas_codes_and_messages():
    raises(
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor: 3 larger than available brokers: 2.",
        assign_replicas,
        no_racks(1, 2),
        6,
        3,
    )
    raises(
        ErrorCode.INVALID_PARTITIONS,
        "Number of partitions must be larger than 0.",
        assign_replicas,
        no_racks(1, 2),
        0,
        1,
    )
    raises(
        ErrorCode.INVALID_PARTITIONS,
        "Number of partitions must be larger than 0.",
        assign_replicas,
        no_racks(1, 2),
        -3,
        1,
    )
    raises(
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor must be larger than 0.",
        assign_replicas,
        no_racks(1, 2),
        1,
        0,
    )
    raises(
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor: 1 larger than available brokers: 0.",
        assign_replicas,
        {},
        1,
        1,
    )


def test_some_brokers_without_rack_refused_as_kafka_does():
    raises(
        ErrorCode.UNKNOWN_SERVER_ERROR,
        "Not all brokers have rack information for replica rack aware assignment.",
        assign_replicas,
        {1: "a", 2: None, 3: "b"},
        3,
        2,
    )


# ---------------------------------------------------------------- CreatePartitions


def test_new_partitions_continue_the_topics_round_robin():
    brokers = no_racks(1, 2, 3)
    whole = assign_replicas(brokers, 5, 3, fixed_start_index=0)
    existing = {p: whole[p] for p in range(3)}
    assert assign_new_partitions(existing, brokers, 5) == {3: whole[3], 4: whole[4]}


def test_new_partitions_start_at_partition_0s_first_replica():
    brokers = no_racks(1, 2, 3, 5)
    # partition 0 led by 2 (index 1): start index 1, shift 1, partitions from 1
    assert assign_new_partitions({0: [2, 3]}, brokers, 3) == {1: [3, 1], 2: [5, 2]}
    # partition 0 led by a broker gone since (4): the next id up, 5 (index 3)
    assert assign_new_partitions({0: [4]}, brokers, 2) == {1: [1]}
    # above every id: index 0
    assert assign_new_partitions({0: [9]}, brokers, 2) == {1: [2]}


def test_new_partitions_errors():
    brokers = no_racks(1, 2, 3)
    existing = {0: [1, 2], 1: [2, 3]}
    raises(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist.", assign_new_partitions, {}, brokers, 3)
    raises(
        ErrorCode.INVALID_PARTITIONS,
        "Topic currently has 2 partitions, which is higher than the requested 1.",
        assign_new_partitions,
        existing,
        brokers,
        1,
    )
    raises(ErrorCode.INVALID_PARTITIONS, "Topic already has 2 partitions.", assign_new_partitions, existing, brokers, 2)
    raises(
        ErrorCode.INVALID_REPLICATION_FACTOR,
        "Replication factor: 2 larger than available brokers: 1.",
        assign_new_partitions,
        existing,
        no_racks(1),
        3,
    )


def test_new_partitions_with_explicit_assignments():
    brokers = no_racks(1, 2, 3)
    existing = {0: [1, 2], 1: [2, 3]}
    assert assign_new_partitions(existing, brokers, 4, [[3, 1], [1, 3]]) == {2: [3, 1], 3: [1, 3]}
    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
    raises(
        code,
        "Unknown broker(s) in replica assignment: 4, 7.",
        assign_new_partitions,
        existing,
        brokers,
        4,
        [[7, 1], [4, 1]],
    )
    raises(
        code,
        "Increasing the number of partitions by 2 but 1 assignments provided.",
        assign_new_partitions,
        existing,
        brokers,
        4,
        [[3, 1]],
    )
    raises(
        code,
        "Cannot have replication factor of 0 for partition id 3.",
        assign_new_partitions,
        existing,
        brokers,
        4,
        [[3, 1], []],
    )
    raises(
        code,
        "Duplicate brokers not allowed in replica assignment: 1, 1 for partition id 2.",
        assign_new_partitions,
        existing,
        brokers,
        4,
        [[1, 1], [1, 2]],
    )
    raises(
        code,
        "Inconsistent replication factor between partitions, partition 0 has 2 while partitions [2, 3] "
        "have replication factors [1, 3], respectively.",
        assign_new_partitions,
        existing,
        brokers,
        4,
        [[1], [1, 2, 3]],
    )


# ---------------------------------------------------------------- CreateTopics with explicit replicas


def test_manual_assignment_accepted():
    validate_manual_assignment({0: [1, 2], 1: [2, 3], 2: [3, 1]}, no_racks(1, 2, 3))


@pytest.mark.parametrize(
    "assignment, message",
    [
        ({0: [1, 2], 1: [2, 3, 1]}, "All partitions should have the same number of replicas"),
        ({0: [1, 2], 2: [2, 3]}, "partitions should be a consecutive 0-based integer sequence"),
        ({1: [1, 2]}, "partitions should be a consecutive 0-based integer sequence"),
        ({0: [1, 2], 1: [3, 3]}, "Duplicate brokers not allowed in replica assignment: 3, 3 for partition id 1."),
        ({0: []}, "Cannot have replication factor of 0 for partition id 0."),
        ({0: [1, 9]}, "Unknown broker(s) in replica assignment: 9."),
    ],
)
def test_manual_assignment_refused(assignment, message):
    raises(ErrorCode.INVALID_REPLICA_ASSIGNMENT, message, validate_manual_assignment, assignment, no_racks(1, 2, 3))


# ---------------------------------------------------------------- properties


@st.composite
def clusters(draw):
    ids = draw(st.lists(st.integers(0, 100), min_size=1, max_size=9, unique=True))
    if draw(st.booleans()):
        brokers = {b: None for b in ids}
    else:
        names = draw(st.lists(st.sampled_from("abcd"), min_size=len(ids), max_size=len(ids)))
        brokers = dict(zip(ids, names))
    rf = draw(st.integers(1, len(ids)))
    return brokers, draw(st.integers(1, 40)), rf, draw(st.integers(0, 2**32))


@given(clusters())
def test_every_assignment_is_well_formed(cluster):
    brokers, num_partitions, rf, seed = cluster
    assignment = assign_replicas(brokers, num_partitions, rf, rng=random.Random(seed))
    assert sorted(assignment) == list(range(num_partitions))
    for replicas in assignment.values():
        assert len(replicas) == rf == len(set(replicas))
        assert set(replicas) <= set(brokers)
    leaders = Counter(replicas[0] for replicas in assignment.values())
    counts = [leaders.get(b, 0) for b in brokers]
    assert max(counts) - min(counts) <= 1  # each leads num_partitions / n, give or take one


@given(clusters())
def test_rack_aware_spreads_racks(cluster):
    brokers, num_partitions, rf, seed = cluster
    if None in brokers.values():
        return
    num_racks = len(set(brokers.values()))
    for replicas in assign_replicas(brokers, num_partitions, rf, rng=random.Random(seed)).values():
        racks = [brokers[b] for b in replicas]
        if num_racks >= rf:
            assert len(set(racks)) == rf  # distinct racks
        else:
            assert len(set(racks)) == num_racks  # every rack holds one


@given(st.integers(2, 8), st.integers(0, 2**32))
def test_followers_of_a_brokers_partitions_spread_over_all_others(n, seed):
    brokers = no_racks(*range(n))
    assignment = assign_replicas(brokers, n * (n - 1), 2, rng=random.Random(seed))
    for b in brokers:
        followers = [r[1] for r in assignment.values() if r[0] == b]
        assert sorted(followers) == sorted(set(brokers) - {b})


@given(st.integers(1, 8), st.integers(1, 5), st.data())
def test_replicas_even_over_full_rounds(n, rounds, data):
    rf = data.draw(st.integers(1, n))
    assignment = assign_replicas(
        no_racks(*range(n)), n * rounds, rf, rng=random.Random(data.draw(st.integers(0, 2**32)))
    )
    held = Counter(b for replicas in assignment.values() for b in replicas)
    assert set(held.values()) == {rounds * rf}


@given(clusters(), st.integers(1, 20))
def test_new_partitions_are_well_formed(cluster, more):
    brokers, num_partitions, rf, seed = cluster
    existing = assign_replicas(brokers, num_partitions, rf, rng=random.Random(seed))
    new = assign_new_partitions(existing, brokers, num_partitions + more)
    assert sorted(new) == list(range(num_partitions, num_partitions + more))
    assert all(len(r) == rf == len(set(r)) and set(r) <= set(brokers) for r in new.values())

"""Partition reassignment's pure decisions (broker/cluster/controller/reassignment_decisions.py):
RS/AR/RR as Kafka's ReplicaAssignment computes them, the validation of a request with
Kafka's error codes, the start (epoch bump), completion (target in the ISR), the finish
(leader from the target, removed replicas out of the ISR), cancel, and a new target
replacing one in progress; then hypothesis properties of any reassignment."""

from hypothesis import given, strategies as st

from broker.cluster.controller.decisions import ClusterView, Failure, LeaderAndIsr, PartitionView
from broker.cluster.controller.reassignment_decisions import (
    ReplicaAssignment,
    bump,
    finish,
    in_progress,
    is_complete,
    plan,
    unneeded,
)
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode

TP = TopicPartition("t", 0)
E = ErrorCode


def view(replicas, state, live=(1, 2, 3, 4), shutting_down=()):
    return ClusterView(
        frozenset(live),
        {},
        frozenset(shutting_down),
        {TP: PartitionView("t", 0, tuple(replicas), state)},
        lambda _t: False,
    )


def state(leader, isr, leader_epoch=5, partition_epoch=9):
    return LeaderAndIsr(leader, leader_epoch, tuple(isr), partition_epoch)


def test_rs_ar_rr_as_kafka_computes_them():
    a = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 3))
    assert a == ReplicaAssignment((4, 2, 3, 1), adding=(4,), removing=(1,))
    assert a.original == (2, 3, 1)
    assert a.target == (4, 2, 3)
    assert a.being_reassigned
    # entirely new replicas: RS = target ++ original
    b = ReplicaAssignment((1, 2, 3)).reassign_to((4, 5, 6))
    assert b == ReplicaAssignment((4, 5, 6, 1, 2, 3), (4, 5, 6), (1, 2, 3))
    # the same replicas in another order: nothing to add or remove, only the order changes
    c = ReplicaAssignment((1, 2, 3)).reassign_to((3, 1, 2))
    assert c == ReplicaAssignment((3, 1, 2)) and not c.being_reassigned


def test_a_new_target_starts_again_from_the_original_replicas():
    moving = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 3))
    again = moving.reassign_to((5, 2, 3))
    assert again == ReplicaAssignment((5, 2, 3, 1), (5,), (1,))
    assert unneeded(moving, again) == (4,)  # the replica being added before is stopped and deleted


def test_plan_errors_in_kafkas_order():
    v = view((1, 2, 3), state(1, (1, 2, 3)))
    cur = ReplicaAssignment((1, 2, 3))

    def err(result):
        assert isinstance(result, Failure), result
        return result.error

    assert err(plan(v, TP, cur, ())) == E.INVALID_REPLICA_ASSIGNMENT
    assert err(plan(v, TP, cur, (1, 1, 2))) == E.INVALID_REPLICA_ASSIGNMENT
    assert err(plan(v, TP, cur, (1, -2))) == E.INVALID_REPLICA_ASSIGNMENT
    assert err(plan(v, TP, cur, (1, 2, 7))) == E.INVALID_REPLICA_ASSIGNMENT  # 7 is not a live broker
    assert "not alive" in plan(v, TP, cur, (1, 2, 7)).message
    assert err(plan(v, TP, cur, None)) == E.NO_REASSIGNMENT_IN_PROGRESS
    assert err(plan(v, TP, None, None)) == E.NO_REASSIGNMENT_IN_PROGRESS
    assert err(plan(v, TP, None, (1, 2))) == E.UNKNOWN_TOPIC_OR_PARTITION
    assert err(plan(v, TP, cur, (4, 2, 3), deleting=True)) == E.UNKNOWN_TOPIC_OR_PARTITION
    # a dead broker that already is a replica may stay in the target: only additions must live
    dead3 = view((1, 2, 3), state(1, (1, 2)), live=(1, 2, 4))
    assert plan(dead3, TP, cur, (4, 2, 3)) == ReplicaAssignment((4, 2, 3, 1), (4,), (1,))


def test_cancel_goes_back_to_the_original_replicas():
    """As Kafka: the target becomes the original replicas (RS - AR, in RS's order), nothing
    is being added or removed any more, and the replicas that were being added are
    `unneeded`: stopped and deleted, out of the ISR."""
    moving = ReplicaAssignment((1, 2, 3)).reassign_to((4, 5, 3))
    assert moving == ReplicaAssignment((4, 5, 3, 1, 2), (4, 5), (1, 2))
    v = view(moving.replicas, state(1, (1, 2, 3, 4)))
    back = plan(v, TP, moving, None)
    assert back == ReplicaAssignment((3, 1, 2))
    assert unneeded(moving, back) == (4, 5)
    # the original replicas are in the ISR: the cancel completes at once
    assert is_complete(state(1, (1, 2, 3)), back)
    assert finish(v, TP, back) == state(1, (1, 2, 3), leader_epoch=6, partition_epoch=10)


def test_a_replaced_reassignment_takes_its_unneeded_replicas_out_of_the_isr():
    moving = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 3))
    again = moving.reassign_to((5, 2, 3))
    v = view(moving.replicas, state(1, (1, 2, 3, 4)), live=(1, 2, 3, 4, 5))
    assert bump(v, TP, again) == state(1, (1, 2, 3), leader_epoch=6, partition_epoch=10)
    # 4 had become leader (a preferred election): 5 is not in the ISR, 2 is first of RS in it
    v = view(moving.replicas, state(4, (1, 2, 3, 4)), live=(1, 2, 3, 4, 5))
    assert bump(v, TP, again) == state(2, (1, 2, 3), leader_epoch=6, partition_epoch=10)


def test_bump_keeps_leader_and_isr():
    v = view((4, 2, 3, 1), state(1, (1, 2, 3)))
    assert bump(v, TP) == state(1, (1, 2, 3), leader_epoch=6, partition_epoch=10)
    assert bump(view((1,), None), TP) is None


def test_complete_only_when_every_target_replica_is_in_the_isr():
    a = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 3))
    assert not is_complete(state(1, (1, 2, 3)), a)
    assert is_complete(state(1, (1, 2, 3, 4)), a)
    assert not is_complete(None, a)
    assert is_complete(None, ReplicaAssignment((1, 2)))


def test_finish_moves_the_leader_into_the_target_and_drops_the_removed():
    a = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 3))
    v = view(a.replicas, state(1, (1, 2, 3, 4)))
    # 1 leads but leaves: the first target replica online and in the ISR leads (4)
    assert finish(v, TP, a) == state(4, (2, 3, 4), leader_epoch=6, partition_epoch=10)
    # a leader that stays keeps leading
    v2 = view(a.replicas, state(2, (1, 2, 3, 4)))
    assert finish(v2, TP, a) == state(2, (2, 3, 4), leader_epoch=6, partition_epoch=10)
    # 4 shutting down: 2 leads
    v3 = view(a.replicas, state(1, (1, 2, 3, 4)), shutting_down=(4,))
    assert finish(v3, TP, a).leader == 2
    # no target replica can lead: the reassignment waits
    v4 = view(a.replicas, state(1, (1, 4)), live=(1, 2, 3))
    f = finish(v4, TP, a)
    assert isinstance(f, Failure) and f.error == E.ELIGIBLE_LEADERS_NOT_AVAILABLE


def test_in_progress_picks_the_partitions_being_reassigned():
    a = ReplicaAssignment((1, 2, 3)).reassign_to((4, 2, 3))
    other = TopicPartition("t", 1)
    assert in_progress({TP: a, other: ReplicaAssignment((1, 2))}) == {TP: a}


brokers = st.integers(min_value=1, max_value=6)


@given(
    st.lists(brokers, min_size=1, max_size=4, unique=True),
    st.lists(brokers, min_size=1, max_size=4, unique=True),
    st.lists(brokers, min_size=1, max_size=4, unique=True),
)
def test_any_reassignment(original, first, second):
    """RS holds target and original; AR and RR are their differences; the target comes
    first (its first replica is the preferred leader); a second target starts from the
    original replicas; finishing with the whole target in the ISR gives a leader from the
    target and an ISR without the removed replicas."""
    start = ReplicaAssignment(tuple(original))
    for target in (first, second):
        a = start.reassign_to(target)
        assert a.replicas[: len(target)] == tuple(target)
        assert set(a.replicas) == set(target) | set(original)
        assert set(a.adding) == set(target) - set(original)
        assert set(a.removing) == set(original) - set(target)
        assert a.target == tuple(target) and set(a.original) == set(original)
        start = a if target is first else start
    a = ReplicaAssignment(tuple(original)).reassign_to(first)
    isr = tuple(dict.fromkeys(tuple(original) + tuple(first)))
    v = view(a.replicas, state(original[0], isr), live=range(1, 7))
    assert is_complete(v.partitions[TP].state, a)
    done = finish(v, TP, a)
    assert isinstance(done, LeaderAndIsr)
    assert done.leader in first and set(done.isr) == set(first) and done.leader in done.isr
    assert done.leader_epoch == 6 and done.partition_epoch == 10

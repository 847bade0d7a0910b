"""The controller's decisions on snapshots: scenario tables on 3 brokers with RF 3 (broker
deaths, returns, controlled shutdown, AlterPartition, preferred leaders, ElectLeaders),
then hypothesis properties over any cluster: no dead or shutting-down leader, the ISR a
non-empty set of replicas holding the leader, epochs moving up by one, unclean elections
only where enabled."""

import pytest
from hypothesis import given, strategies as st

from broker.cluster.controller.decisions import (
    NO_LEADER,
    RECOVERED,
    RECOVERING,
    ClusterView,
    Decision,
    Failure,
    LeaderAndIsr,
    PartitionView,
    alter_partition,
    controlled_shutdown,
    initial_states,
    on_broker_failure,
    on_broker_startup,
    preferred_election,
    preferred_leader_imbalance,
    unclean_election,
)
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError

T0, T1, T2 = TopicPartition("t", 0), TopicPartition("t", 1), TopicPartition("t", 2)
ELIGIBLE = ErrorCode.ELIGIBLE_LEADERS_NOT_AVAILABLE


def state(leader, leader_epoch, isr, partition_epoch, recovery=RECOVERED):
    return LeaderAndIsr(leader, leader_epoch, tuple(isr), partition_epoch, recovery)


def cluster(partitions, live=(1, 2, 3), shutting_down=(), unclean=()):
    """partitions: {tp: (replicas, state or None)}; unclean: topics with unclean election on."""
    views = {
        TopicPartition(*tp): PartitionView(tp[0], tp[1], tuple(replicas), st)
        for tp, (replicas, st) in partitions.items()
    }
    return ClusterView(frozenset(live), {}, frozenset(shutting_down), views, lambda topic: topic in unclean)


def healthy(**kwargs):
    """3 brokers, 3 partitions, RF 3, every ISR full, the preferred replica leading."""
    return cluster(
        {
            T0: ([1, 2, 3], state(1, 5, [1, 2, 3], 7)),
            T1: ([2, 3, 1], state(2, 5, [2, 3, 1], 7)),
            T2: ([3, 1, 2], state(3, 5, [3, 1, 2], 7)),
        },
        **kwargs,
    )


def failure(why_contains, code=ELIGIBLE):
    class Matches:
        def __eq__(self, other):
            return isinstance(other, Failure) and other.error == code and why_contains in other.message

        def __repr__(self):
            return f"Failure({code.name}, ...{why_contains}...)"

    return Matches()


# ---------------------------------------------------------------- new partitions


def test_live_racks_feed_the_assignment():
    view = ClusterView(frozenset({1, 2, 4}), {1: "a", 2: "b", 3: "a"}, frozenset({2}), {}, lambda topic: False)
    assert view.live_racks() == {1: "a", 2: "b", 4: None}


def test_initial_states_first_online_replica_leads_all_online_in_isr():
    view = cluster(
        {T0: ([3, 1, 2], None), T1: ([2, 3, 1], None), T2: ([1, 2, 3], None)}, live=(1, 2, 3, 4), shutting_down=(3,)
    )
    assert initial_states(view, [T0, T1, ("t", 2)]) == Decision(
        {T0: state(1, 0, [1, 2], 0), T1: state(2, 0, [2, 1], 0), T2: state(1, 0, [1, 2], 0)}, {}
    )


def test_initial_states_without_an_online_replica_or_partition():
    view = cluster({T0: ([4, 5], None), T1: ([1], state(1, 3, [1], 3))})
    decision = initial_states(view, [T0, T1, TopicPartition("nope", 0)])
    assert decision.states == {}  # T1 already has a state: left alone
    assert decision.failed == {
        T0: failure("No replica of t-0 is online"),
        TopicPartition("nope", 0): Failure(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
    }


# ---------------------------------------------------------------- broker failure


def test_kill_one_broker_leader_moves_and_isrs_shrink():
    decision = on_broker_failure(healthy(), [3])
    assert decision == Decision(
        {
            T0: state(1, 6, [1, 2], 8),  # follower 3 leaves the ISR, epoch bumped
            T1: state(2, 6, [2, 1], 8),
            T2: state(1, 6, [1, 2], 8),  # led by 3: first live ISR member in assignment order [3, 1, 2]
        },
        {},
    )


def test_kill_two_brokers_the_third_leads_everything():
    assert on_broker_failure(healthy(), [2, 3]).states == {
        T0: state(1, 6, [1], 8),
        T1: state(1, 6, [1], 8),
        T2: state(1, 6, [1], 8),
    }


def test_dead_brokers_may_already_be_gone_from_the_view():
    assert on_broker_failure(healthy(live=(1, 2)), [3]) == on_broker_failure(healthy(), [3])


def test_kill_a_follower_not_in_the_isr_changes_nothing():
    view = cluster({T0: ([1, 2, 3], state(1, 5, [1, 2], 7))})
    assert on_broker_failure(view, [3]) == Decision({}, {})


def test_kill_the_last_isr_member_unclean_disabled():
    # 2 and 3 are alive but out of sync: nobody may lead; the ISR keeps 1 so 1 can come back
    view = cluster({T0: ([1, 2, 3], state(1, 5, [1], 7))})
    decision = on_broker_failure(view, [1])
    assert decision.states == {T0: state(NO_LEADER, 6, [1], 8)}
    assert decision.failed == {
        T0: failure("No member of the ISR [1] of t-0 is online, and unclean leader election is disabled.")
    }


def test_kill_the_last_isr_member_unclean_enabled():
    view = cluster({T0: ([1, 2, 3], state(1, 5, [1], 7))}, unclean=("t",))
    assert on_broker_failure(view, [1]) == Decision({T0: state(2, 6, [2], 8, RECOVERING)}, {})


def test_unclean_is_per_topic():
    view = cluster(
        {T0: ([1, 2], state(1, 5, [1], 7)), TopicPartition("u", 0): ([1, 2], state(1, 5, [1], 7))}, unclean=("u",)
    )
    decision = on_broker_failure(view, [1])
    assert decision.states == {T0: state(NO_LEADER, 6, [1], 8), TopicPartition("u", 0): state(2, 6, [2], 8, RECOVERING)}
    assert set(decision.failed) == {T0}


def test_kill_every_isr_member_at_once_keeps_the_old_leader_in_the_isr():
    view = cluster({T0: ([1, 2, 3], state(2, 5, [1, 2], 7))})
    decision = on_broker_failure(view, [1, 2])
    assert decision.states == {T0: state(NO_LEADER, 6, [2], 8)}
    assert set(decision.failed) == {T0}


def test_kill_everything():
    decision = on_broker_failure(healthy(), [1, 2, 3])
    assert decision.states == {
        T0: state(NO_LEADER, 6, [1], 8),
        T1: state(NO_LEADER, 6, [2], 8),
        T2: state(NO_LEADER, 6, [3], 8),
    }
    assert decision.failed == {tp: failure("is online") for tp in (T0, T1, T2)}


def test_an_already_offline_partition_is_reported_but_not_rewritten():
    view = cluster({T0: ([1, 2, 3], state(NO_LEADER, 6, [1], 8)), T1: ([2, 3], state(2, 1, [2, 3], 1))}, live=(2, 3))
    decision = on_broker_failure(view, [3])
    assert decision.states == {T1: state(2, 2, [2], 2)}
    assert set(decision.failed) == {T0}


def test_a_shutting_down_member_leaves_the_isr_of_a_new_leader():
    view = cluster({T0: ([1, 2, 3], state(1, 5, [1, 2, 3], 7))}, shutting_down=(2,))
    assert on_broker_failure(view, [1]).states == {T0: state(3, 6, [3], 8)}


def test_partition_created_while_no_replica_was_online_gets_a_leader_on_failure_of_another():
    view = cluster({T0: ([4, 2], None)}, live=(1, 2, 3))
    assert on_broker_failure(view, [1]).states == {T0: state(2, 0, [2], 0)}


# ---------------------------------------------------------------- broker startup


def test_return_of_the_last_isr_member_leads_again_cleanly():
    view = cluster({T0: ([1, 2, 3], state(NO_LEADER, 6, [1], 8))}, live=(2, 3))
    assert on_broker_startup(view, [1]) == Decision({T0: state(1, 7, [1], 9)}, {})


def test_return_of_an_out_of_sync_replica():
    view = cluster({T0: ([1, 2, 3], state(NO_LEADER, 6, [1], 8))}, live=())
    decision = on_broker_startup(view, [2])
    assert decision.states == {}
    assert decision.failed == {T0: failure("unclean leader election is disabled")}
    view = cluster({T0: ([1, 2, 3], state(NO_LEADER, 6, [1], 8))}, live=(), unclean=("t",))
    assert on_broker_startup(view, [2]) == Decision({T0: state(2, 7, [2], 9, RECOVERING)}, {})


def test_return_of_a_follower_changes_no_healthy_partition():
    view = cluster({T0: ([1, 2, 3], state(1, 6, [1, 2], 8))}, live=(1, 2))
    assert on_broker_startup(view, [3]) == Decision({}, {})  # it rejoins the ISR via AlterPartition


def test_return_of_a_replica_of_a_never_started_partition():
    view = cluster({T0: ([4, 5], None)})
    assert on_broker_startup(view, [5]) == Decision({T0: state(5, 0, [5], 0)}, {})


def test_a_restarted_broker_is_no_longer_shutting_down():
    view = cluster({T0: ([1, 2], state(NO_LEADER, 4, [1], 4))}, live=(1, 2), shutting_down=(1,))
    assert on_broker_startup(view, [1]).states == {T0: state(1, 5, [1], 5)}


# ---------------------------------------------------------------- controlled shutdown


def test_controlled_shutdown_of_a_leader():
    decision = controlled_shutdown(healthy(), 1)
    assert decision == Decision(
        {
            T0: state(2, 6, [2, 3], 8),  # led by 1: next ISR member in assignment order
            T1: state(2, 6, [2, 3], 8),  # followed by 1: 1 leaves the ISR
            T2: state(3, 6, [3, 2], 8),
        },
        {},
    )


def test_controlled_shutdown_of_a_follower_only():
    view = cluster({T0: ([1, 2, 3], state(1, 5, [1, 2, 3], 7)), T1: ([1, 3], state(1, 2, [1], 2))})
    assert controlled_shutdown(view, 3) == Decision({T0: state(1, 6, [1, 2], 8)}, {})


def test_controlled_shutdown_leader_without_another_isr_member_remains():
    view = cluster(
        {
            T0: ([1, 2, 3], state(1, 5, [1], 7)),
            T1: ([1], state(1, 5, [1], 7)),  # one replica: not acted on, not remaining
            T2: ([2, 1], state(2, 5, [2, 1], 7)),
        }
    )
    decision = controlled_shutdown(view, 1)
    assert decision.states == {T2: state(2, 6, [2], 8)}
    assert decision.failed == {T0: failure("No other online member in the ISR [1] of t-0.")}


def test_controlled_shutdown_excludes_every_shutting_down_broker():
    view = healthy(shutting_down=(2,))
    assert controlled_shutdown(view, 1).states[T0] == state(3, 6, [3], 8)


def test_controlled_shutdown_is_idempotent_for_a_retry():
    first = controlled_shutdown(healthy(), 1)
    after = cluster(
        {tp: (healthy().partitions[tp].replicas, st) for tp, st in first.states.items()}, shutting_down=(1,)
    )
    assert controlled_shutdown(after, 1) == Decision({}, {})


def test_controlled_shutdown_of_an_unknown_broker():
    with pytest.raises(KafkaProtocolError) as info:
        controlled_shutdown(healthy(), 7)
    assert (info.value.code, info.value.message) == (ErrorCode.BROKER_NOT_AVAILABLE, "Broker id 7 does not exist.")


# ---------------------------------------------------------------- AlterPartition


def alter(view=None, *, broker=1, leader_epoch=5, isr=(1, 2), partition_epoch=7, **kwargs):
    return alter_partition(view or healthy(), "t", 0, broker, leader_epoch, isr, partition_epoch, **kwargs)


def test_alter_partition_shrink_and_expand():
    assert alter(isr=(1, 2)) == state(1, 5, [1, 2], 8)  # leader epoch kept, version + 1
    shrunk = cluster({T0: ([1, 2, 3], state(1, 5, [1, 2], 8))})
    assert alter(shrunk, isr=(1, 2, 3), partition_epoch=8) == state(1, 5, [1, 2, 3], 9)


@pytest.mark.parametrize(
    "kwargs, expected",
    [
        (dict(leader_epoch=4), ErrorCode.FENCED_LEADER_EPOCH),
        (dict(leader_epoch=6), ErrorCode.NOT_CONTROLLER),  # the leader knows more than us
        (dict(partition_epoch=8), ErrorCode.NOT_CONTROLLER),
        (dict(partition_epoch=6), ErrorCode.INVALID_UPDATE_VERSION),  # raced another change
        (dict(broker=2), ErrorCode.INVALID_REQUEST),  # not the leader
        (dict(isr=(1, 4)), ErrorCode.INVALID_REQUEST),  # not a replica
        (dict(isr=(2, 3)), ErrorCode.INVALID_REQUEST),  # without the leader
        (dict(isr=(1, 1)), ErrorCode.INVALID_REQUEST),
        (dict(isr=(1,), leader_recovery_state=RECOVERING), ErrorCode.INVALID_REQUEST),  # RECOVERED -> RECOVERING
    ],
)
def test_alter_partition_refused(kwargs, expected):
    assert alter(**kwargs) == expected


def test_alter_partition_stale_leader_epoch_checked_before_anything_else():
    assert alter(broker=2, leader_epoch=4, isr=(9,), partition_epoch=1) == ErrorCode.FENCED_LEADER_EPOCH


def test_alter_partition_unknown_partition():
    assert alter_partition(healthy(), "t", 9, 1, 5, (1,), 7) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert alter_partition(healthy(), "x", 0, 1, 5, (1,), 7) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert alter(cluster({T0: ([1, 2], None)})) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_partition_retry_of_an_applied_change_answers_the_current_state():
    current = state(1, 5, [1, 2], 8)
    view = cluster({T0: ([1, 2, 3], current)})
    assert alter(view, isr=(1, 2), partition_epoch=7) is current  # nothing to write
    assert alter(view, isr=(1, 2), partition_epoch=8) is current


def test_alter_partition_ineligible_replicas():
    down = cluster({T0: ([1, 2, 3], state(1, 5, [1, 2], 7))}, live=(1, 2))
    assert alter(down, isr=(1, 2, 3)) == ErrorCode.INELIGIBLE_REPLICA
    assert alter(down, isr=(1, 2, 3), version=1) == ErrorCode.OPERATION_NOT_ATTEMPTED
    stopping = cluster({T0: ([1, 2, 3], state(1, 5, [1, 2], 7))}, shutting_down=(3,))
    assert alter(stopping, isr=(1, 2, 3)) == ErrorCode.INELIGIBLE_REPLICA
    assert alter(healthy(shutting_down=(3,)), isr=(1, 2)) == state(1, 5, [1, 2], 8)
    # the ISR asked for is the current one: answered as is, whoever is in it (Kafka's order)
    assert alter(healthy(live=(1, 2)), isr=(1, 2, 3)) == healthy().partitions[T0].state


def test_alter_partition_recovery():
    view = cluster({T0: ([1, 2, 3], state(2, 6, [2], 8, RECOVERING))})
    assert (
        alter(view, broker=2, leader_epoch=6, isr=(2, 3), partition_epoch=8, leader_recovery_state=RECOVERING)
        == ErrorCode.INVALID_REQUEST
    )
    assert alter(view, broker=2, leader_epoch=6, isr=(2,), partition_epoch=8) == state(2, 6, [2], 9)
    assert alter(
        view, broker=2, leader_epoch=6, isr=(2,), partition_epoch=8, leader_recovery_state=RECOVERING
    ) == state(2, 6, [2], 8, RECOVERING)  # already so


# ---------------------------------------------------------------- preferred leaders


def imbalanced(**kwargs):
    """Broker 1 is preferred for t-0 and t-3 but leads neither (2 took over while 1 was away)."""
    return cluster(
        {
            T0: ([1, 2, 3], state(2, 6, [2, 3, 1], 8)),
            TopicPartition("t", 3): ([1, 3, 2], state(3, 6, [3, 2, 1], 8)),
            T1: ([2, 3, 1], state(2, 5, [2, 3, 1], 7)),
            T2: ([3, 1, 2], state(3, 5, [3, 1, 2], 7)),
        },
        **kwargs,
    )


def test_imbalance_moves_leadership_back_to_the_preferred_replica():
    assert preferred_leader_imbalance(imbalanced(), 10) == [T0, TopicPartition("t", 3)]
    decision = preferred_election(imbalanced(), [T0])
    assert decision == Decision({T0: state(1, 7, [2, 3, 1], 9)}, {})  # ISR unchanged


def test_imbalance_only_above_the_percentage():
    view = cluster({T0: ([1, 2], state(2, 6, [2, 1], 8)), T1: ([1, 2], state(1, 6, [1, 2], 8))})
    assert preferred_leader_imbalance(view, 50) == []  # 1 of 2 = 50%: not above
    assert preferred_leader_imbalance(view, 49) == [T0]


def test_imbalance_only_where_the_preferred_replica_can_lead():
    not_in_sync = cluster(
        {T0: ([1, 2, 3], state(2, 6, [2, 3], 8)), TopicPartition("t", 3): ([1, 3, 2], state(3, 6, [3, 2, 1], 8))}
    )
    assert preferred_leader_imbalance(not_in_sync, 10) == [TopicPartition("t", 3)]
    assert preferred_leader_imbalance(imbalanced(shutting_down=(1,)), 10) == []
    assert preferred_leader_imbalance(imbalanced(live=(2, 3)), 10) == []


def test_preferred_election_answers():
    view = imbalanced(live=(2, 3))
    decision = preferred_election(view, [T0, T1, TopicPartition("t", 9)])
    assert decision.states == {}
    assert decision.failed == {
        T0: failure(
            "The preferred replica of t-0 is not online or not in the ISR [2, 3, 1].",
            ErrorCode.PREFERRED_LEADER_NOT_AVAILABLE,
        ),
        T1: Failure(ErrorCode.ELECTION_NOT_NEEDED),
        TopicPartition("t", 9): Failure(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
    }


def test_unclean_election_answers():
    view = cluster(
        {
            T0: ([1, 2, 3], state(NO_LEADER, 6, [1], 8)),  # 1 is dead
            T1: ([2, 3], state(2, 5, [2, 3], 7)),
            T2: ([1, 4], state(NO_LEADER, 6, [1], 8)),
            TopicPartition("t", 3): ([3, 2], state(3, 4, [3, 2], 4)),
        },
        live=(2, 3),
        shutting_down=(3,),
    )
    decision = unclean_election(view, [T0, T1, T2, ("t", 3), ("x", 0)])
    assert decision.states == {
        T0: state(2, 7, [2], 9, RECOVERING),  # unclean although the topic does not enable it
        TopicPartition("t", 3): state(2, 5, [2], 5),  # leader shutting down: a clean election
    }
    assert decision.failed == {
        T1: Failure(ErrorCode.ELECTION_NOT_NEEDED),
        T2: failure("No replica of t-2 is online"),
        TopicPartition("x", 0): Failure(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist."),
    }


# ---------------------------------------------------------------- properties

TOPICS = ("a", "b")


@st.composite
def states_for(draw, replicas):
    epoch, version = draw(st.integers(0, 50)), draw(st.integers(0, 50))
    if draw(st.integers(0, 4)) == 0:  # offline: the last ISR member is gone
        return state(NO_LEADER, epoch, [draw(st.sampled_from(replicas))], version)
    leader = draw(st.sampled_from(replicas))
    others = draw(st.lists(st.sampled_from(replicas), unique=True))
    isr = [leader] + [r for r in others if r != leader]
    unclean = len(isr) == 1 and draw(st.booleans())
    return state(leader, epoch, isr, version, RECOVERING if unclean else RECOVERED)


@st.composite
def clusters(draw):
    brokers = list(range(1, draw(st.integers(1, 5)) + 1))
    live = draw(st.sets(st.sampled_from(brokers)))
    shutting_down = draw(st.sets(st.sampled_from(sorted(live)))) if live else set()
    partitions = {}
    for topic in TOPICS:
        for p in range(draw(st.integers(0, 4))):
            replicas = draw(st.permutations(brokers))[: draw(st.integers(1, len(brokers)))]
            partitions[(topic, p)] = (replicas, draw(st.none() | states_for(replicas)))
    unclean = draw(st.sets(st.sampled_from(TOPICS)))
    return cluster(partitions, live=live, shutting_down=shutting_down, unclean=unclean)


def check_states(view, decision, online, *, unclean_allowed):
    """The invariants of every new state, against the old view; `online`: who may lead."""
    for tp, new in decision.states.items():
        pv = view.partitions[tp]
        old = pv.state
        assert new.isr and len(set(new.isr)) == len(new.isr) and set(new.isr) <= set(pv.replicas)
        assert new.leader == NO_LEADER or new.leader in new.isr
        picked = new.leader != NO_LEADER and (old is None or new.leader != old.leader)
        assert not picked or new.leader in online  # an ISR shrink may keep a leader not yet known dead
        if old is None:
            assert (new.leader_epoch, new.partition_epoch) == (0, 0)
            continue
        assert new.leader_epoch == old.leader_epoch + 1  # never decreases, bumped on each change
        assert new.partition_epoch == old.partition_epoch + 1  # one conditional write
        if new.leader != NO_LEADER and new.leader not in old.isr:
            assert unclean_allowed(pv.topic)
            assert new.isr == (new.leader,) and new.leader_recovery_state == RECOVERING
        assert (new.leader, new.isr) != (old.leader, old.isr)  # no write without a change


@given(clusters(), st.data())
def test_broker_failure_properties(view, data):
    dead = data.draw(st.sets(st.sampled_from(sorted(view.live_brokers)))) if view.live_brokers else set()
    decision = on_broker_failure(view, dead)
    online = (view.live_brokers - dead) - view.shutting_down
    check_states(view, decision, online, unclean_allowed=view.unclean_enabled)
    for tp, pv in view.partitions.items():
        after = decision.states.get(tp, pv.state)
        if after is None:
            assert tp in decision.failed
            continue
        assert after.leader not in dead
        assert len(after.isr) == 1 or not set(after.isr) & dead  # the dead leave, but never the last one
        if after.leader == NO_LEADER or after.leader not in view.live_brokers - dead:
            assert tp in decision.failed


@given(clusters(), st.data())
def test_broker_startup_properties(view, data):
    new = data.draw(st.sets(st.sampled_from(range(1, 6))))
    decision = on_broker_startup(view, new)
    online = (view.live_brokers | new) - (view.shutting_down - new)
    check_states(view, decision, online, unclean_allowed=view.unclean_enabled)
    assert set(decision.states).isdisjoint(decision.failed)


@given(clusters(), st.data())
def test_controlled_shutdown_properties(view, data):
    if not view.live_brokers:
        return
    broker = data.draw(st.sampled_from(sorted(view.live_brokers)))
    decision = controlled_shutdown(view, broker)
    shutting_down = view.shutting_down | {broker}
    check_states(view, decision, view.live_brokers - shutting_down, unclean_allowed=lambda topic: False)
    for tp, pv in view.partitions.items():
        after = decision.states.get(tp, pv.state)
        if after is None or broker not in pv.replicas or len(pv.replicas) < 2:
            continue
        assert (after.leader == broker) == (tp in decision.failed)
        assert broker not in after.isr or after.isr == (broker,) or after.leader == broker


@given(clusters())
def test_elect_leaders_properties(view):
    everything = list(view.partitions)
    preferred = preferred_election(view, everything)
    online = view.live_brokers - view.shutting_down
    check_states(view, preferred, online, unclean_allowed=lambda topic: False)
    for tp, new in preferred.states.items():
        assert new.leader == view.partitions[tp].replicas[0] and new.isr == view.partitions[tp].state.isr
    assert set(preferred_leader_imbalance(view, 0)) <= set(preferred.states)
    unclean = unclean_election(view, everything)
    check_states(view, unclean, online, unclean_allowed=lambda topic: True)
    for decision in (preferred, unclean):
        assert set(decision.states) | set(decision.failed) == set(everything)
        assert set(decision.states).isdisjoint(decision.failed)


@given(clusters(), st.data())
def test_alter_partition_properties(view, data):
    if not view.partitions:
        return
    tp = data.draw(st.sampled_from(sorted(view.partitions)))
    pv = view.partitions[tp]
    current = pv.state
    broker = data.draw(st.sampled_from(range(1, 6)))
    isr = data.draw(st.lists(st.integers(1, 6), max_size=6))
    epochs = (current.leader_epoch, current.partition_epoch) if current else (0, 0)
    leader_epoch = data.draw(st.sampled_from([epochs[0] - 1, epochs[0], epochs[0] + 1]))
    partition_epoch = data.draw(st.sampled_from([epochs[1] - 1, epochs[1], epochs[1] + 1]))
    result = alter_partition(view, tp.topic, tp.partition, broker, leader_epoch, isr, partition_epoch)
    if isinstance(result, ErrorCode):
        return
    assert result.leader == current.leader == broker and result.leader_epoch == current.leader_epoch
    if result is not current:
        assert result.partition_epoch == current.partition_epoch + 1 == partition_epoch + 1
        assert broker in result.isr and set(result.isr) <= set(pv.replicas)
        assert all(view.is_online(r) for r in result.isr)

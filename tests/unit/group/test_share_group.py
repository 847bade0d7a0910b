"""KIP-932 share-group membership (broker/group/share_group.py), its `simple` assignor and
its records: members joining and leaving in random order, every subscribed partition
always assigned to ceil(members / partitions) members (a partition to several members
once there are more members than partitions), the assignments as even as Kafka 4.4's
SimpleHomogeneousAssignmentBuilder makes them, epochs fenced as Kafka 4.4 fences them,
and the records of every step replayed on another coordinator give the same group."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from broker.group import group_records as GR
from broker.group.consumer_group import HeartbeatError, TopicsView
from broker.group.share_group import ShareGroup, ShareGroupState, ShareHeartbeat, simple_assign
from broker.protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = TopicsView({"orders": (T1, 4), "audit": (T2, 1)})


def _count(assignment: dict[str, dict[uuid.UUID, frozenset[int]]]) -> dict[tuple[uuid.UUID, int], int]:
    out: dict[tuple[uuid.UUID, int], int] = {}
    for a in assignment.values():
        for t, ps in a.items():
            for p in ps:
                out[(t, p)] = out.get((t, p), 0) + 1
    return out


@pytest.mark.parametrize(("members", "partitions"), [(1, 4), (3, 4), (4, 4), (5, 4), (8, 4), (9, 4), (4, 1), (7, 3)])
def test_simple_assignor_spreads_partitions_and_shares_them_when_members_outnumber_them(members, partitions):
    mids = {f"m{i}": frozenset([T1]) for i in range(members)}
    a = simple_assign(mids, {T1: partitions}, {})
    sharing = -(-members // partitions)
    counts = _count(a)
    assert counts == {(T1, p): sharing for p in range(partitions)}
    sizes = sorted(sum(len(ps) for ps in x.values()) for x in a.values())
    assert sizes[-1] - sizes[0] <= 1 and sum(sizes) == sharing * partitions
    assert all(len(ps) == len(set(ps)) for x in a.values() for ps in x.values())


def test_simple_assignor_is_sticky():
    before = simple_assign({"a": frozenset([T1]), "b": frozenset([T1])}, {T1: 4}, {})
    after = simple_assign({"a": frozenset([T1]), "b": frozenset([T1]), "c": frozenset([T1])}, {T1: 4}, before)
    # each old member keeps at least what its new share allows of what it had
    for mid in ("a", "b"):
        assert after[mid][T1] <= before[mid][T1]
    assert _count(after) == {(T1, p): 1 for p in range(4)}


def test_members_of_different_subscriptions_get_only_their_topics():
    a = simple_assign({"a": frozenset([T1]), "b": frozenset([T2]), "c": frozenset([T1, T2])}, {T1: 4, T2: 1}, {})
    assert set(a["a"]) == {T1} and set(a["b"]) == {T2}
    # topic by topic among its subscribers: audit's one partition goes to both b and c
    assert _count(a)[(T2, 0)] == 2 and all(_count(a)[(T1, p)] == 1 for p in range(4))


def _hb(g: ShareGroup, member: str, epoch: int, topics: list[str] | None = None, max_size: int = 200):
    return g.heartbeat(ShareHeartbeat(g.group_id, member, epoch, subscribed_topic_names=topics), TOPICS, max_size)


def test_join_heartbeat_and_leave_and_the_errors_kafka_answers():
    g = ShareGroup("g")
    assert g.state == ShareGroupState.EMPTY
    r = _hb(g, "a", 0, ["orders"])
    assert (r.member_epoch, r.assignment) == (1, {T1: frozenset(range(4))}) and g.state == ShareGroupState.STABLE
    r = _hb(g, "b", 0, ["orders"])
    assert r.member_epoch == 2 and sum(len(ps) for ps in r.assignment.values()) == 2
    # a learns its new assignment directly (no revocation step), at the new epoch
    r = _hb(g, "a", 1)
    assert r.member_epoch == 2 and sum(len(ps) for ps in r.assignment.values()) == 2
    # nothing changed: no assignment in the answer
    assert _hb(g, "a", 2).assignment is None
    # the previous epoch is accepted (a lost answer); a newer one is fenced
    assert _hb(g, "a", 1).member_epoch == 2
    with pytest.raises(HeartbeatError) as e:
        _hb(g, "a", 3)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as e:
        _hb(g, "nobody", 2)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    assert e.value.message == "Member nobody is not a member of group g."
    with pytest.raises(HeartbeatError) as e:
        _hb(g, "nobody", -1)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(HeartbeatError) as e:
        _hb(g, "c", 0, ["orders"], max_size=2)
    assert e.value.code == ErrorCode.GROUP_MAX_SIZE_REACHED
    r = _hb(g, "b", -1)
    assert r.left and r.member_epoch == -1 and set(g.members) == {"a"} and g.group_epoch == 3


def test_fencing_messages_are_kafkas():
    g = ShareGroup("g")
    _hb(g, "a", 0, ["orders"])
    _hb(g, "b", 0, ["orders"])
    _hb(g, "a", 1)  # a: epoch 2, previous 1
    with pytest.raises(HeartbeatError) as e:
        _hb(g, "a", 5)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    assert e.value.message.startswith("The share group member has a greater member epoch (5) than the one known")
    _hb(g, "c", 0, ["orders"])
    _hb(g, "a", 2)  # a: epoch 3, previous 2
    with pytest.raises(HeartbeatError) as e:
        _hb(g, "a", 1)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    assert "and it does not match the previous member epoch (2)" in e.value.message


def test_random_joins_and_leaves_replayed_on_another_coordinator_give_the_same_group():
    seed = int(os.environ.get("SEED", random.randrange(1 << 30)))
    print("seed", seed)
    rnd = random.Random(seed)
    g = ShareGroup("g")
    log: list[GR.Record] = []
    epochs: dict[str, int] = {}
    for step in range(200):
        action = rnd.random()
        if not epochs or action < 0.3:
            mid = f"m{step}"
            r = _hb(g, mid, 0, rnd.choice([["orders"], ["orders", "audit"]]))
        elif action < 0.45:
            mid = rnd.choice(sorted(epochs))
            r = _hb(g, mid, -1)
        elif action < 0.55:
            mid = rnd.choice(sorted(epochs))
            r = _hb(g, mid, epochs[mid], rnd.choice([["audit"], ["orders"], ["orders", "audit"]]))
        else:
            mid = rnd.choice(sorted(epochs))
            r = _hb(g, mid, epochs[mid])
        log += GR.share_records_after(g, r)
        if r.left:
            epochs.pop(mid)
        else:
            epochs[mid] = r.member_epoch
        # every subscribed partition is assigned in the target (to as many members as it should be)
        if g.members and g.assignment_epoch == g.group_epoch:
            subscribed = g.subscribed_topics(TOPICS)
            counts = _count(g.target)
            assert {tp for tp in counts} == {(t, p) for t, n in subscribed.items() for p in range(n)}
    loaded: dict[str, ShareGroup] = {}
    for key, value in log:
        assert GR.is_share_group_key(key) and not GR.is_consumer_group_key(key)
        GR.replay_share(loaded, key, value)
    if not g.members:
        assert "g" not in loaded or not loaded["g"].members
        return
    h = loaded["g"]
    assert (h.group_epoch, h.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    assert h.target == g.target
    assert {
        m: (x.member_epoch, x.previous_member_epoch, x.assigned, x.subscribed_topic_names) for m, x in h.members.items()
    } == {
        m: (x.member_epoch, x.previous_member_epoch, x.assigned, x.subscribed_topic_names) for m, x in g.members.items()
    }
    # deleting writes tombstones that leave nothing
    for m in list(g.members):
        g.remove_member(m)
    for key, value in GR.share_group_tombstones(h):
        GR.replay_share(loaded, key, value)
    assert "g" not in loaded


def test_a_loaded_group_bumps_its_epoch_only_when_a_topic_changed_meanwhile():
    g = ShareGroup("g")
    log = GR.share_records_after(g, _hb(g, "a", 0, ["orders"]))
    log += GR.share_records_after(g, _hb(g, "b", 0, ["orders"]))
    log += GR.share_records_after(g, _hb(g, "a", 1))
    loaded: dict[str, ShareGroup] = {}
    for key, value in log:
        GR.replay_share(loaded, key, value)
    h = loaded["g"]
    r = h.heartbeat(ShareHeartbeat("g", "a", 2), TOPICS, 200)
    assert r.member_epoch == 2 and not r.group_epoch_changed and r.assignment is None
    # orders grew from 4 to 6 partitions while no coordinator had the group loaded
    loaded = {}
    for key, value in log:
        GR.replay_share(loaded, key, value)
    grown = TopicsView({"orders": (T1, 6), "audit": (T2, 1)})
    r = loaded["g"].heartbeat(ShareHeartbeat("g", "a", 2), grown, 200)
    assert r.group_epoch_changed and r.member_epoch == 3
    assert set(_count(loaded["g"].target)) == {(T1, p) for p in range(6)}

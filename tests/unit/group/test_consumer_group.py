"""KIP-848's group state (broker/group/consumer_group.py), its assignors and its records:
members joining and leaving in random order, each a simulated client that revokes what
its assignment no longer has before it reports what it owns; no partition is ever owned
by two clients at once, the group settles Stable with every partition assigned, and the
records of every step replayed on another coordinator give the same group."""

from __future__ import annotations

import os
import random
import uuid

import pytest

from broker.group import group_records as GR
from broker.group.assignors import AssignmentSpec, MemberSpec, range_assign, uniform_assign
from broker.group.consumer_group import (
    ConsumerGroup,
    ConsumerGroupState,
    HeartbeatError,
    HeartbeatRequest,
    MemberState,
    TopicsView,
)
from broker.protocol.errors import ErrorCode

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TOPICS = TopicsView({"orders": (T1, 12), "audit": (T2, 3)})
ASSIGNORS = ["uniform", "range"]


class Client:
    """A consumer as KIP-848 has it reconcile: it applies an assignment by revoking what
    the assignment no longer has, then taking the rest, and reports what it owns."""

    def __init__(self, member_id: str, topics: list[str], assignor: str | None = None) -> None:
        self.member_id = member_id
        self.topics = topics
        self.assignor = assignor
        self.epoch = 0
        self.owned: dict[uuid.UUID, frozenset[int]] = {}
        self.revoked = 0
        self.inbox = None  # an answer not acted on yet

    def request(self, group_id: str = "g") -> HeartbeatRequest:
        first = self.epoch == 0
        return HeartbeatRequest(
            group_id=group_id,
            member_id=self.member_id,
            member_epoch=self.epoch,
            rebalance_timeout_ms=30000 if first else -1,
            subscribed_topic_names=self.topics if first else None,
            server_assignor=self.assignor if first else None,
            owned=dict(self.owned),
        )

    def apply(self, result) -> None:
        self.epoch = result.member_epoch
        if result.assignment is not None:
            new = {t: ps for t, ps in result.assignment.items() if ps}
            for t, ps in self.owned.items():
                self.revoked += len(ps - new.get(t, frozenset()))
            self.owned = new


def owned_twice(clients) -> list:
    seen: dict = {}
    twice = []
    for c in clients:
        for t, ps in c.owned.items():
            for p in ps:
                if (t, p) in seen:
                    twice.append((t, p, seen[(t, p)], c.member_id))
                seen[(t, p)] = c.member_id
    return twice


def beat(g: ConsumerGroup, c: Client, log: list, lazy: bool = False) -> None:
    """One heartbeat. `lazy`: the client acts on the answer (its callbacks run) only just
    before its next heartbeat, so the others heartbeat while it still owns what it was
    told to give up."""
    if c.inbox is not None:
        c.apply(c.inbox)
        c.inbox = None
    result = g.heartbeat(c.request(), TOPICS, ASSIGNORS)
    log += GR.records_after(g, result)
    if lazy:
        c.inbox = result
    else:
        c.apply(result)


def settle(g: ConsumerGroup, clients: list, log: list, rng: random.Random, rounds: int = 30) -> None:
    for _ in range(rounds):
        for c in rng.sample(clients, len(clients)):
            beat(g, c, log, lazy=rng.random() < 0.5)
            assert not owned_twice(clients)
            assert all(len(v) == 1 for v in g.owners().values())
        if g.state == ConsumerGroupState.STABLE:
            # one more round: every client hears its final assignment and acts on it
            for c in clients:
                beat(g, c, log)
            return
    raise AssertionError(f"not stable after {rounds} rounds: {g.state}")


def assert_same(a: ConsumerGroup, b: ConsumerGroup) -> None:
    assert (a.group_epoch, a.assignment_epoch) == (b.group_epoch, b.assignment_epoch)
    assert a.target == b.target
    assert a.members.keys() == b.members.keys()
    for mid, m in a.members.items():
        assert m == b.members[mid], mid


@pytest.mark.parametrize("assignor", ["uniform", "range"])
def test_members_join_and_leave_one_by_one_without_a_partition_owned_twice(assignor):
    seed = int(os.environ.get("KIP848_SEED", random.randrange(1 << 30)))
    print("seed", seed)
    rng = random.Random(seed)
    g = ConsumerGroup("g")
    log: list = []
    clients: list[Client] = []
    for i in range(rng.randint(3, 6)):
        clients.append(Client(f"m{i}", ["orders"], assignor))
        settle(g, clients, log, rng)
        counts = sorted(len(c.owned.get(T1, ())) for c in clients)
        assert sum(counts) == 12 and counts[-1] - counts[0] <= 1, f"seed {seed}"
        replayed: dict = {}
        for k, v in log:
            GR.replay(replayed, k, v)
        assert_same(g, replayed["g"])
    while len(clients) > 1:
        gone = clients.pop(rng.randrange(len(clients)))
        gone.owned, gone.inbox = {}, None  # revokes everything, then leaves
        result = g.heartbeat(HeartbeatRequest("g", gone.member_id, -1), TOPICS, ASSIGNORS)
        assert result.left and result.member_epoch == -1
        log += GR.records_after(g, result)
        settle(g, clients, log, rng)
        assert sum(len(c.owned.get(T1, ())) for c in clients) == 12, f"seed {seed}"
    replayed = {}
    for k, v in log:
        GR.replay(replayed, k, v)
    assert_same(g, replayed["g"])


def test_uniform_moves_only_what_it_must_when_a_member_joins():
    rng = random.Random(5)
    g = ConsumerGroup("g")
    log: list = []
    clients = [Client(f"m{i}", ["orders"]) for i in range(3)]
    settle(g, clients, log, rng)
    before = {c.member_id: c.owned[T1] for c in clients}
    for c in clients:
        c.revoked = 0
    clients.append(Client("m3", ["orders"]))
    settle(g, clients, log, rng)
    assert sum(c.revoked for c in clients) == 3  # 4 each: one from each of the three
    for c in clients[:3]:
        assert c.owned[T1] <= before[c.member_id]


def test_revoke_before_assign_holds_a_partition_until_its_owner_lets_go():
    g = ConsumerGroup("g")
    a, b = Client("a", ["audit"]), Client("b", ["audit"])
    log: list = []
    beat(g, a, log)
    assert a.owned == {T2: frozenset({0, 1, 2})} and a.epoch == 1
    beat(g, b, log)  # joins: epoch 2, but all three are a's still
    assert b.epoch == 2 and b.owned == {} and g.members["b"].state == MemberState.UNRELEASED_PARTITIONS
    # a hears it must give one up; it keeps its epoch until it has
    result = g.heartbeat(HeartbeatRequest("a", "a", 1, owned=dict(a.owned)), TOPICS, ASSIGNORS)
    assert result.member_epoch == 1 and g.members["a"].state == MemberState.UNREVOKED_PARTITIONS
    a.apply(result)
    assert len(a.owned[T2]) == 2 and len(g.members["a"].pending_revocation[T2]) == 1
    beat(g, b, log)
    assert b.owned == {}  # not yet: a has not said it let go
    beat(g, a, log)
    assert a.epoch == 2 and g.members["a"].state == MemberState.STABLE
    beat(g, b, log)
    assert len(b.owned[T2]) == 1 and not owned_twice([a, b]) and g.state == ConsumerGroupState.STABLE


def test_epochs_and_error_codes_as_kafka_answers():
    g = ConsumerGroup("g")
    a = Client("a", ["orders"])
    beat(g, a, [])
    beat(g, a, [])
    assert a.epoch == 1
    with pytest.raises(HeartbeatError) as e:
        g.heartbeat(HeartbeatRequest("g", "a", 7, owned={}), TOPICS, ASSIGNORS)
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH
    with pytest.raises(HeartbeatError) as e:
        g.heartbeat(HeartbeatRequest("g", "nobody", 3), TOPICS, ASSIGNORS)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(HeartbeatError) as e:
        g.heartbeat(HeartbeatRequest("g", "nobody", -1), TOPICS, ASSIGNORS)
    assert e.value.code == ErrorCode.UNKNOWN_MEMBER_ID
    with pytest.raises(HeartbeatError) as e:
        g.heartbeat(HeartbeatRequest("g", "c", 0, server_assignor="sticky"), TOPICS, ASSIGNORS)
    assert e.value.code == ErrorCode.UNSUPPORTED_ASSIGNOR
    with pytest.raises(HeartbeatError) as e:
        g.heartbeat(HeartbeatRequest("g", "c", 0, subscribed_topic_regex="or(ders"), TOPICS, ASSIGNORS)
    assert e.value.code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert "c" not in g.members
    # a member that missed the answer bumping its epoch may come back with the previous one
    b = Client("b", ["orders"])
    beat(g, b, [])  # group epoch 2: a must give partitions up, b waits
    while g.state != ConsumerGroupState.STABLE:
        beat(g, a, [])
        beat(g, b, [])
    m = g.members["a"]
    assert m.previous_member_epoch < m.member_epoch
    ok = g.heartbeat(HeartbeatRequest("g", "a", m.previous_member_epoch, owned=dict(a.owned)), TOPICS, ASSIGNORS)
    assert ok.member_epoch == m.member_epoch
    with pytest.raises(HeartbeatError) as e:  # ... but not owning more than it was given
        g.heartbeat(
            HeartbeatRequest("g", "a", m.previous_member_epoch, owned={T1: frozenset(range(12))}), TOPICS, ASSIGNORS
        )
    assert e.value.code == ErrorCode.FENCED_MEMBER_EPOCH


def test_a_regex_subscription_takes_topics_created_afterwards():
    g = ConsumerGroup("g")
    req = HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="or.*", owned={})
    r = g.heartbeat(req, TOPICS, ASSIGNORS)
    assert set(r.assignment) == {T1}
    T3 = uuid.UUID(int=3)
    more = TopicsView({**TOPICS.by_name, "orders-eu": (T3, 2)})
    r = g.heartbeat(HeartbeatRequest("g", "a", r.member_epoch, owned=r.assignment), more, ASSIGNORS)
    assert r.assignment == {T1: frozenset(range(12)), T3: frozenset({0, 1})} and r.member_epoch == 2


def test_assignors():
    members = {m: MemberSpec(frozenset({T1, T2}), {}) for m in ("b", "a", "c")}
    spec = AssignmentSpec(members, {T1: 7, T2: 3})
    r = range_assign(spec)
    assert r["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assert r["c"] == {T1: frozenset({5, 6}), T2: frozenset({2})}
    u = uniform_assign(spec)
    counts = sorted(sum(len(ps) for ps in u[m].values()) for m in members)
    assert counts[-1] - counts[0] <= 1 and sum(counts) == 10
    # only members subscribed to a topic get its partitions
    spec = AssignmentSpec({"a": MemberSpec(frozenset({T1}), {}), "b": MemberSpec(frozenset({T2}), {})}, {T1: 4, T2: 2})
    for assign in (range_assign, uniform_assign):
        out = assign(spec)
        assert out["a"] == {T1: frozenset(range(4))} and out["b"] == {T2: frozenset({0, 1})}
    # sticky: the previous target is kept as far as balance allows
    prev = {T1: frozenset({0, 1, 2})}
    spec = AssignmentSpec({"a": MemberSpec(frozenset({T1}), prev), "b": MemberSpec(frozenset({T1}), {})}, {T1: 6})
    assert uniform_assign(spec)["a"] == {T1: frozenset({0, 1, 2})}


def test_an_unknown_record_value_version_is_a_clear_error():
    g = ConsumerGroup("g")
    beat(g, Client("a", ["orders"]), log := [])
    key, value = GR.group_record(g)
    with pytest.raises(ValueError, match="value version 5"):
        GR.replay({}, key, b"\x00\x05" + value[2:])
    groups: dict = {}
    for k, v in log:
        GR.replay(groups, k, v)
    for k, v in GR.group_tombstones(groups["g"]):
        GR.replay(groups, k, v)
    assert groups == {}


def test_a_static_member_leaves_and_comes_back_under_a_new_member_id_without_a_rebalance():
    g = ConsumerGroup("g")
    log: list = []

    def hb(mid, epoch, owned=None, **kw):
        req = HeartbeatRequest("g", mid, epoch, owned=owned, **kw)
        r = g.heartbeat(req, TOPICS, ASSIGNORS)
        log.extend(GR.records_after(g, r))
        return r

    a = hb("a1", 0, {}, instance_id="host-a", rebalance_timeout_ms=1000, subscribed_topic_names=["audit"])
    b = hb("b1", 0, {}, instance_id="host-b", rebalance_timeout_ms=1000, subscribed_topic_names=["audit"])
    for _ in range(3):
        a = hb("a1", a.member_epoch, a.assignment if a.assignment is not None else None)
        b = hb("b1", b.member_epoch, b.assignment if b.assignment is not None else None)
    assert g.state == ConsumerGroupState.STABLE
    epoch, a_parts = g.group_epoch, g.members["a1"].assigned
    left = hb("a1", -2)
    assert left.member_epoch == -2 and not left.left and g.members["a1"].assigned == a_parts
    assert g.group_epoch == epoch  # no rebalance: b keeps its partitions, a's wait
    with pytest.raises(HeartbeatError) as e:  # the instance id is taken while a1 is active
        hb("b2", 0, {}, instance_id="host-b", rebalance_timeout_ms=1000, subscribed_topic_names=["audit"])
    assert e.value.code == ErrorCode.UNRELEASED_INSTANCE_ID
    back = hb("a2", 0, {}, instance_id="host-a", rebalance_timeout_ms=1000, subscribed_topic_names=["audit"])
    assert "a1" not in g.members and g.members["a2"].assigned == a_parts and back.assignment == a_parts
    assert g.group_epoch == epoch and back.member_epoch == epoch and g.state == ConsumerGroupState.STABLE
    replayed: dict = {}
    for k, v in log:
        GR.replay(replayed, k, v)
    assert_same(g, replayed["g"])

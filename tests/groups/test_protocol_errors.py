"""The group APIs spoken directly (the project's protocol codec over a socket), one
member per connection: KIP-394 member ids, Kafka's error codes for bad input — unknown
protocol type, stale generations, members not in the group, commits during a rebalance,
oversize metadata, fenced static members — and after each of them the group is still
consistent (same members, same generation, heartbeats and commits still accepted)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from broker.protocol.errors import ErrorCode as E
from broker.protocol.messages.consumer_protocol_assignment import ConsumerProtocolAssignment as A
from broker.protocol.messages.consumer_protocol_subscription import ConsumerProtocolSubscription
from broker.protocol.messages.delete_groups import DeleteGroupsRequest
from broker.protocol.messages.heartbeat import HeartbeatRequest
from broker.protocol.messages.join_group import JoinGroupRequest
from broker.protocol.messages.leave_group import LeaveGroupRequest
from broker.protocol.messages.offset_commit import OffsetCommitRequest as O
from broker.protocol.messages.offset_delete import OffsetDeleteRequest as OD
from broker.protocol.messages.sync_group import SyncGroupRequest
from tests.groups.helpers import committed, connect, create_topic, describe, find_coordinator, wait_until

BROKER_CONFIG = {"group.max.session.timeout.ms": 60000, "offsets.retention.check.interval.ms": 300}


def subscription(*topics) -> bytes:
    return ConsumerProtocolSubscription(topics=list(topics)).encode_versioned(0)


def assignment(topic, partitions) -> bytes:
    return A(assigned_partitions=[A.TopicPartition(topic=topic, partitions=list(partitions))]).encode_versioned(0)


class Raw:
    """One group member on its own connection; requests are blocking."""

    def __init__(
        self,
        bootstrap,
        group,
        topic="t",
        *,
        protocol_type="consumer",
        protocols=None,
        session_ms=10000,
        rebalance_ms=10000,
        instance_id=None,
        client_id="raw",
    ):
        self.conn = connect(bootstrap)
        self.group = group
        self.protocol_type = protocol_type
        self.protocols = protocols if protocols is not None else [("range", subscription(topic))]
        self.session_ms = session_ms
        self.rebalance_ms = rebalance_ms
        self.instance_id = instance_id
        self.client_id = client_id
        self.member_id = ""
        self.generation = -1
        self.leader = ""
        self.members = []

    def close(self):
        self.conn.close()

    def join_once(self, version=7, member_id=None):
        r = self.conn.request(
            JoinGroupRequest(
                group_id=self.group,
                session_timeout_ms=self.session_ms,
                rebalance_timeout_ms=self.rebalance_ms,
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance_id,
                protocol_type=self.protocol_type,
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in self.protocols],
            ),
            version,
            timeout=30,
        )
        if r.error_code in (0, E.MEMBER_ID_REQUIRED):
            self.member_id = r.member_id
        if r.error_code == 0:
            self.generation = r.generation_id
            self.leader = r.leader
            self.members = [m.member_id for m in r.members]
        return r

    def join(self, version=7):
        r = self.join_once(version)
        if r.error_code == E.MEMBER_ID_REQUIRED:
            r = self.join_once(version)
        assert r.error_code == 0, E(r.error_code).name
        return r

    def sync(
        self,
        assignments=None,
        generation=None,
        member_id=None,
        version=5,
        protocol_type="consumer",
        protocol_name="range",
    ):
        return self.conn.request(
            SyncGroupRequest(
                group_id=self.group,
                generation_id=self.generation if generation is None else generation,
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance_id,
                protocol_type=protocol_type,
                protocol_name=protocol_name,
                assignments=[
                    SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
                    for m, a in (assignments or {}).items()
                ],
            ),
            version,
            timeout=30,
        )

    def heartbeat(self, generation=None, member_id=None, instance_id=None):
        return self.conn.request(
            HeartbeatRequest(
                group_id=self.group,
                generation_id=self.generation if generation is None else generation,
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance_id if instance_id is None else instance_id,
            )
        ).error_code

    def commit(self, topic, offsets, generation=None, member_id=None, metadata=None, version=None):
        """offsets: {partition: offset}; metadata: {partition: str}; -> {partition: error}"""
        r = self.conn.request(
            O(
                group_id=self.group,
                generation_id_or_member_epoch=self.generation if generation is None else generation,
                member_id=self.member_id if member_id is None else member_id,
                group_instance_id=self.instance_id,
                topics=[
                    O.OffsetCommitRequestTopic(
                        name=topic,
                        partitions=[
                            O.OffsetCommitRequestPartition(
                                partition_index=p, committed_offset=o, committed_metadata=(metadata or {}).get(p, "")
                            )
                            for p, o in sorted(offsets.items())
                        ],
                    )
                ],
            ),
            version,
        )
        return {p.partition_index: p.error_code for t in r.topics for p in t.partitions}

    def leave(self, version=4):
        r = self.conn.request(
            LeaveGroupRequest(
                group_id=self.group,
                member_id=self.member_id,
                members=[
                    LeaveGroupRequest.MemberIdentity(member_id=self.member_id, group_instance_id=self.instance_id)
                ],
            ),
            version,
        )
        return r.error_code if version < 3 else (r.error_code, [m.error_code for m in r.members])


@pytest.fixture
def pool():
    with ThreadPoolExecutor(4) as ex:
        yield ex


@pytest.fixture
def topic(broker, name):
    create_topic(broker.bootstrap, name, 2)
    return name


@pytest.fixture
def group(broker, name):
    g = f"{name}-g"
    assert find_coordinator(broker.bootstrap, g)[0] == 0
    return g


@pytest.fixture
def members(request):
    made = []
    yield made
    for m in made:
        m.close()


def stable_single(broker, group, topic, members, **kw) -> Raw:
    """A group with one member (the leader), Stable, owning both partitions."""
    a = Raw(broker.bootstrap, group, topic, client_id="a", **kw)
    members.append(a)
    a.join()
    assert a.leader == a.member_id and a.members == [a.member_id]
    s = a.sync({a.member_id: assignment(topic, [0, 1])})
    assert s.error_code == 0
    return a


def listed(broker) -> dict[str, str]:
    from broker.protocol.messages.list_groups import ListGroupsRequest

    with connect(broker.bootstrap) as conn:
        return {g.group_id: g.group_state for g in conn.request(ListGroupsRequest(states_filter=[])).groups}


def state(broker, group):
    d = describe(broker.bootstrap, group)
    return d["state"], sorted(d["members"])


def test_an_abandoned_member_id_leaves_no_group_behind(broker, group, topic, members):
    a = Raw(broker.bootstrap, group, topic, session_ms=1000)
    members.append(a)
    assert a.join_once(version=4).error_code == E.MEMBER_ID_REQUIRED
    assert listed(broker).get(group) == "Empty"
    # the member never comes back: its pending id expires with its session, and the
    # periodic cleanup (offsets.retention.check.interval.ms) drops the empty group
    wait_until(lambda: group not in listed(broker), 20, "the empty group to go")
    assert a.join_once(version=4).error_code == E.UNKNOWN_MEMBER_ID


def test_member_id_required_then_join(broker, group, topic, members):
    a = Raw(broker.bootstrap, group, topic)
    members.append(a)
    r = a.join_once(version=4)
    assert r.error_code == E.MEMBER_ID_REQUIRED and r.member_id and r.generation_id == -1
    given = r.member_id
    r = a.join_once(version=4)
    assert r.error_code == 0 and r.member_id == given and r.leader == given and r.generation_id >= 1
    # v3 (before KIP-394) joins at once with an id chosen by the coordinator
    b = Raw(broker.bootstrap, f"{group}-v3", topic)
    members.append(b)
    find_coordinator(broker.bootstrap, b.group)
    r = b.join_once(version=3)
    assert r.error_code == 0 and r.member_id and r.generation_id >= 1


def test_protocol_mismatches_are_inconsistent_group_protocol(broker, group, topic, members):
    a = stable_single(broker, group, topic, members)
    gen = a.generation
    other_type = Raw(broker.bootstrap, group, topic, protocol_type="connect")
    no_common = Raw(broker.bootstrap, group, topic, protocols=[("sticky-x", subscription(topic))])
    members += [other_type, no_common]
    for raw in (other_type, no_common):
        for version in (3, 7):
            r = raw.join_once(version=version)
            assert r.error_code == E.INCONSISTENT_GROUP_PROTOCOL, (version, E(r.error_code).name)
    # a new group needs a protocol type and at least one protocol
    for kw in ({"protocol_type": ""}, {"protocols": []}):
        raw = Raw(broker.bootstrap, f"{group}-new", topic, **kw)
        members.append(raw)
        find_coordinator(broker.bootstrap, raw.group)
        assert raw.join_once(version=7).error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # SyncGroup v5 checks the protocol type and name too
    assert a.sync(protocol_type="connect").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    assert a.sync(protocol_name="roundrobin").error_code == E.INCONSISTENT_GROUP_PROTOCOL
    # the group is untouched
    assert state(broker, group) == ("Stable", [a.member_id])
    assert a.heartbeat() == 0 and a.generation == gen
    assert a.commit(topic, {0: 1}) == {0: 0}
    # and the refused joins left no empty group behind
    assert f"{group}-new" not in listed(broker)
    assert describe(broker.bootstrap, f"{group}-new")["state"] == "Dead"


def test_stale_generation_and_unknown_member(broker, group, topic, members):
    a = stable_single(broker, group, topic, members)
    gen = a.generation
    assert a.sync(generation=gen - 1).error_code == E.ILLEGAL_GENERATION
    assert a.sync(generation=gen + 1).error_code == E.ILLEGAL_GENERATION
    assert a.sync(member_id="nobody").error_code == E.UNKNOWN_MEMBER_ID
    assert a.heartbeat(generation=gen - 1) == E.ILLEGAL_GENERATION
    assert a.heartbeat(member_id="nobody") == E.UNKNOWN_MEMBER_ID
    assert a.commit(topic, {0: 5}, generation=gen - 1) == {0: E.ILLEGAL_GENERATION}
    assert a.commit(topic, {0: 5}, member_id="nobody") == {0: E.UNKNOWN_MEMBER_ID}
    # a "simple" commit (no generation, no member) into a group managed by members
    assert a.commit(topic, {0: 5}, generation=-1, member_id="") == {0: E.UNKNOWN_MEMBER_ID}
    # a member id the group never handed out cannot join with it
    r = a.join_once(member_id="made-up-id")
    assert r.error_code == E.UNKNOWN_MEMBER_ID
    # JoinGroup of an existing member with the wrong timeouts
    low = Raw(broker.bootstrap, group, topic, session_ms=500)
    high = Raw(broker.bootstrap, group, topic, session_ms=120000)
    members += [low, high]
    assert low.join_once().error_code == E.INVALID_SESSION_TIMEOUT
    assert high.join_once().error_code == E.INVALID_SESSION_TIMEOUT
    # nothing was committed, nothing changed
    assert committed(broker.bootstrap, group, {topic: 2}) == {}
    assert state(broker, group) == ("Stable", [a.member_id])
    assert a.heartbeat() == 0
    assert a.sync().error_code == 0 and A.decode_versioned(a.sync().assignment)[0].assigned_partitions[
        0
    ].partitions == [0, 1]


def test_requests_for_groups_that_do_not_exist(broker, group, topic, members):
    ghost = Raw(broker.bootstrap, group, topic)
    members.append(ghost)
    ghost.member_id, ghost.generation = "ghost", 3
    assert ghost.heartbeat() == E.UNKNOWN_MEMBER_ID
    assert ghost.sync().error_code == E.UNKNOWN_MEMBER_ID
    # Kafka: a commit with a generation for a group the coordinator does not know
    assert ghost.commit(topic, {0: 1}) == {0: E.ILLEGAL_GENERATION}
    assert ghost.join_once().error_code == E.UNKNOWN_MEMBER_ID
    assert ghost.leave(version=2) == E.UNKNOWN_MEMBER_ID
    assert ghost.leave(version=4) == (0, [E.UNKNOWN_MEMBER_ID])
    empty = Raw(broker.bootstrap, "", topic)
    members.append(empty)
    assert empty.join_once().error_code == E.INVALID_GROUP_ID
    # none of it created the group
    assert committed(broker.bootstrap, group, {topic: 2}) == {}
    with connect(broker.bootstrap) as conn:
        r = conn.request(DeleteGroupsRequest(groups_names=[group]))
    assert r.results[0].error_code == E.GROUP_ID_NOT_FOUND


def test_offset_commit_metadata_limits_and_unknown_topics(broker, group, topic, members):
    a = stable_single(broker, group, topic, members)
    limit = 4096  # offset.metadata.max.bytes default
    res = a.commit(topic, {0: 10, 1: 20}, metadata={0: "x" * (limit + 1), 1: "y" * limit})
    assert res == {0: E.OFFSET_METADATA_TOO_LARGE, 1: 0}
    # the limit counts bytes, not characters
    res = a.commit(topic, {0: 11}, metadata={0: "\u00e9" * (limit // 2 + 1)})
    assert res == {0: E.OFFSET_METADATA_TOO_LARGE}
    assert a.commit("no-such-topic", {0: 1}) == {0: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert a.commit(topic, {7: 1}) == {7: E.UNKNOWN_TOPIC_OR_PARTITION}
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 1): 20}
    with connect(broker.bootstrap) as conn:
        from broker.protocol.messages.offset_fetch import OffsetFetchRequest as F

        r = conn.request(F(group_id=group, topics=[F.OffsetFetchRequestTopic(name=topic, partition_indexes=[0, 1])]), 7)
    meta = {p.partition_index: (p.committed_offset, p.metadata) for t in r.topics for p in t.partitions}
    assert meta == {0: (-1, ""), 1: (20, "y" * limit)}
    assert state(broker, group) == ("Stable", [a.member_id]) and a.heartbeat() == 0


def test_a_rebalance_step_by_step(broker, group, topic, members, pool):
    a = stable_single(broker, group, topic, members)
    gen1 = a.generation
    b = Raw(broker.bootstrap, group, topic, client_id="b")
    members.append(b)
    r = b.join_once()
    assert r.error_code == E.MEMBER_ID_REQUIRED
    b_join = pool.submit(b.join_once)  # waits for a to rejoin
    wait_until(lambda: describe(broker.bootstrap, group)["state"] == "PreparingRebalance", 10, "PreparingRebalance")
    # PreparingRebalance: heartbeats say rejoin, SyncGroup is refused, commits of the
    # current generation are still accepted
    assert a.heartbeat() == E.REBALANCE_IN_PROGRESS
    assert a.sync().error_code == E.REBALANCE_IN_PROGRESS
    assert a.commit(topic, {0: 3}) == {0: 0}
    assert a.commit(topic, {0: 4}, member_id="nobody") == {0: E.UNKNOWN_MEMBER_ID}
    a.join()
    rb = b_join.result(15)
    assert rb.error_code == 0
    gen2 = a.generation
    assert gen2 == gen1 + 1 and rb.generation_id == gen2
    assert a.leader == a.member_id == rb.leader and sorted(a.members) == sorted([a.member_id, b.member_id])
    assert rb.members == []  # only the leader gets the member list
    # CompletingRebalance: b's SyncGroup waits for the leader; commits are refused
    assert describe(broker.bootstrap, group)["state"] == "CompletingRebalance"
    b_sync = pool.submit(b.sync)
    assert a.commit(topic, {0: 5}) == {0: E.REBALANCE_IN_PROGRESS}
    assert a.commit(topic, {0: 5}, generation=gen1) == {0: E.ILLEGAL_GENERATION}
    assert a.heartbeat() == 0
    time.sleep(0.2)
    assert not b_sync.done()
    s = a.sync({a.member_id: assignment(topic, [0]), b.member_id: assignment(topic, [1])})
    assert s.error_code == 0
    sb = b_sync.result(10)
    assert sb.error_code == 0
    assert A.decode_versioned(sb.assignment)[0].assigned_partitions[0].partitions == [1]
    assert A.decode_versioned(s.assignment)[0].assigned_partitions[0].partitions == [0]
    d = describe(broker.bootstrap, group)
    assert d["state"] == "Stable" and {m: x["assignment"] for m, x in d["members"].items()} == {
        a.member_id: {topic: [0]},
        b.member_id: {topic: [1]},
    }
    # Stable again: both commit with the new generation, the old one is refused
    assert a.commit(topic, {0: 6}) == {0: 0}
    assert b.commit(topic, {1: 7}) == {1: 0}
    assert b.commit(topic, {1: 8}, generation=gen1) == {1: E.ILLEGAL_GENERATION}
    assert committed(broker.bootstrap, group, {topic: 2}) == {(topic, 0): 6, (topic, 1): 7}
    # the leader leaves: b is told to rejoin and becomes the leader of the next generation
    assert a.leave() == (0, [0])
    assert b.heartbeat() == E.REBALANCE_IN_PROGRESS
    rb = b.join_once()
    assert rb.error_code == 0 and rb.leader == b.member_id and rb.generation_id == gen2 + 1
    assert b.sync({b.member_id: assignment(topic, [0, 1])}).error_code == 0
    assert state(broker, group) == ("Stable", [b.member_id])
    assert a.heartbeat() == E.UNKNOWN_MEMBER_ID


def test_a_silent_member_is_expired_after_its_session_timeout(broker, group, topic, members):
    a = stable_single(broker, group, topic, members, session_ms=5000)
    b = Raw(broker.bootstrap, group, topic, session_ms=1000, client_id="silent")
    members.append(b)
    with ThreadPoolExecutor(1) as ex:
        assert b.join_once().error_code == E.MEMBER_ID_REQUIRED
        fut = ex.submit(b.join_once)
        wait_until(lambda: a.heartbeat() == E.REBALANCE_IN_PROGRESS, 10, "the rebalance")
        a.join()
        assert fut.result(10).error_code == 0
    assert a.sync({a.member_id: assignment(topic, [0]), b.member_id: assignment(topic, [1])}).error_code == 0
    gen = a.generation
    # b never syncs nor heartbeats: after 1 s it is out, and a is told to rejoin
    wait_until(lambda: a.heartbeat() == E.REBALANCE_IN_PROGRESS, 10, "b's session to expire", interval=0.3)
    assert b.heartbeat() == E.UNKNOWN_MEMBER_ID
    a.join()
    assert a.generation == gen + 1 and a.members == [a.member_id]
    assert a.sync({a.member_id: assignment(topic, [0, 1])}).error_code == 0
    assert state(broker, group) == ("Stable", [a.member_id])


def test_static_members_are_fenced(broker, group, topic, members):
    a = stable_single(broker, group, topic, members, instance_id="instance-a")
    gen, old_id = a.generation, a.member_id
    # the same instance restarts: new member id, no rebalance (generation unchanged)
    a2 = Raw(broker.bootstrap, group, topic, instance_id="instance-a")
    members.append(a2)
    r = a2.join_once()
    assert r.error_code == 0 and r.member_id != old_id and r.generation_id == gen
    assert a2.sync().error_code == 0
    assert state(broker, group) == ("Stable", [a2.member_id])
    # the old incarnation is fenced everywhere
    assert a.heartbeat() == E.FENCED_INSTANCE_ID
    assert a.sync().error_code == E.FENCED_INSTANCE_ID
    assert a.commit(topic, {0: 1}) == {0: E.FENCED_INSTANCE_ID}
    assert a.join_once().error_code == E.FENCED_INSTANCE_ID
    assert a.leave() == (0, [E.FENCED_INSTANCE_ID])
    # an instance id the group does not know is not "fenced", it is unknown
    stranger = Raw(broker.bootstrap, group, topic, instance_id="instance-z")
    members.append(stranger)
    stranger.member_id, stranger.generation = "nobody-z", gen
    assert stranger.heartbeat() == E.UNKNOWN_MEMBER_ID
    assert stranger.leave() == (0, [E.UNKNOWN_MEMBER_ID])
    assert a2.heartbeat() == 0 and a2.commit(topic, {0: 2}) == {0: 0}
    assert state(broker, group) == ("Stable", [a2.member_id])


def test_delete_groups_and_offset_delete(broker, group, topic, members, name):
    other = f"{name}-other"
    create_topic(broker.bootstrap, other, 1)
    a = stable_single(broker, group, topic, members)
    assert a.commit(topic, {0: 1, 1: 2}) == {0: 0, 1: 0}
    assert a.commit(other, {0: 3}) == {0: 0}
    with connect(broker.bootstrap) as conn:
        r = conn.request(DeleteGroupsRequest(groups_names=[group, f"{group}-nope"]))
        assert [x.error_code for x in r.results] == [E.NON_EMPTY_GROUP, E.GROUP_ID_NOT_FOUND]
        # OffsetDelete: not for a topic the members subscribe to; fine for another one
        r = conn.request(
            OD(
                group_id=group,
                topics=[
                    OD.OffsetDeleteRequestTopic(
                        name=topic, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)]
                    ),
                    OD.OffsetDeleteRequestTopic(
                        name=other, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)]
                    ),
                ],
            )
        )
        assert r.error_code == 0
        assert {t.name: [p.error_code for p in t.partitions] for t in r.topics} == {
            topic: [E.GROUP_SUBSCRIBED_TO_TOPIC],
            other: [0],
        }
        assert committed(broker.bootstrap, group) == {(topic, 0): 1, (topic, 1): 2}
        assert a.leave() == (0, [0])
        assert state(broker, group) == ("Empty", [])
        r = conn.request(DeleteGroupsRequest(groups_names=[group]))
        assert r.results[0].error_code == 0
        r = conn.request(
            OD(
                group_id=group,
                topics=[
                    OD.OffsetDeleteRequestTopic(
                        name=topic, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)]
                    )
                ],
            )
        )
        assert r.error_code == E.GROUP_ID_NOT_FOUND
    assert committed(broker.bootstrap, group) == {}


def test_oversize_group_metadata_is_refused_and_the_group_recovers(broker, group, topic, members):
    """A subscription so large that the group's record exceeds message.max.bytes: the
    leader's SyncGroup fails as Kafka's does (UNKNOWN_SERVER_ERROR), the group goes back
    to rebalancing, and it completes once the member rejoins with sane metadata."""
    huge = Raw(broker.bootstrap, group, topic, protocols=[("range", subscription(topic) + b"\0" * (1 << 20) + b"\1")])
    members.append(huge)
    huge.join()
    s = huge.sync({huge.member_id: assignment(topic, [0, 1])})
    assert s.error_code == E.UNKNOWN_SERVER_ERROR
    assert describe(broker.bootstrap, group)["state"] == "PreparingRebalance"
    assert huge.heartbeat() == E.REBALANCE_IN_PROGRESS
    huge.protocols = [("range", subscription(topic))]
    huge.join()
    assert huge.sync({huge.member_id: assignment(topic, [0, 1])}).error_code == 0
    assert state(broker, group) == ("Stable", [huge.member_id])
    assert huge.commit(topic, {0: 1}) == {0: 0}


def test_an_oversize_commit_is_invalid_commit_offset_size(broker, group, name, members):
    """Many partitions with maximal metadata in one commit: the batch for
    __consumer_offsets exceeds max.message.bytes; Kafka answers INVALID_COMMIT_OFFSET_SIZE."""
    wide = f"{name}-wide"
    create_topic(broker.bootstrap, wide, 300)
    a = stable_single(broker, group, wide, members)
    res = a.commit(wide, {p: p for p in range(300)}, metadata={p: "m" * 4000 for p in range(300)})
    assert res == {p: E.INVALID_COMMIT_OFFSET_SIZE for p in range(300)}
    assert committed(broker.bootstrap, group, {wide: 300}) == {}
    assert a.commit(wide, {0: 1}, metadata={0: "m" * 4000}) == {0: 0}
    assert state(broker, group) == ("Stable", [a.member_id]) and a.heartbeat() == 0


def test_a_member_that_does_not_rejoin_is_dropped_at_the_rebalance_timeout(broker, group, topic, members, pool):
    """b keeps heartbeating (so its session never expires) but never rejoins: the
    rebalance completes without it once the rebalance timeout (the members' largest) is up."""
    a = Raw(broker.bootstrap, group, topic, rebalance_ms=1500, client_id="a")
    b = Raw(broker.bootstrap, group, topic, rebalance_ms=1500, client_id="b")
    c = Raw(broker.bootstrap, group, topic, rebalance_ms=1500, client_id="c")
    members += [a, b, c]
    a.join()
    assert a.sync({a.member_id: assignment(topic, [0, 1])}).error_code == 0
    b_join = pool.submit(b.join)
    wait_until(lambda: a.heartbeat() == E.REBALANCE_IN_PROGRESS, 10, "b's join")
    a.join()
    b_join.result(15)
    assert a.leader == a.member_id and a.generation == b.generation
    b_sync = pool.submit(b.sync)
    assert a.sync({a.member_id: assignment(topic, [0]), b.member_id: assignment(topic, [1])}).error_code == 0
    assert b_sync.result(10).error_code == 0
    gen = a.generation
    c_join = pool.submit(c.join)
    wait_until(lambda: a.heartbeat() == E.REBALANCE_IN_PROGRESS, 10, "the rebalance")
    a_join = pool.submit(a.join_once)
    t_end = time.monotonic() + 10
    while not c_join.done() and time.monotonic() < t_end:
        assert b.heartbeat() in (E.REBALANCE_IN_PROGRESS, E.UNKNOWN_MEMBER_ID)
        time.sleep(0.3)
    assert c_join.result(1).error_code == 0 and a_join.result(10).error_code == 0
    assert a.generation == c.generation == gen + 1
    assert sorted(a.members or c.members) == sorted([a.member_id, c.member_id])
    assert b.heartbeat() == E.UNKNOWN_MEMBER_ID
    assert b.commit(topic, {1: 1}) == {1: E.UNKNOWN_MEMBER_ID}

"""KIP-932 share-group membership on a real `broker serve`, spoken with kbroker's own
protocol client (broker/client): members join with ShareGroupHeartbeat v1 and get their
assignments at once (a partition to several members when they outnumber the partitions),
ShareGroupDescribe, ListGroups (type "share") and `broker share-groups` show them, a member
that stops heartbeating is removed after `group.share.session.timeout.ms`, a leave and a
DeleteGroups end the group, and the group survives the broker's restart (replayed from
its records in __consumer_offsets). Bad input gets the codes Kafka 4.4 answers."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import uuid

from broker.client import Cluster
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from broker.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest
from broker.protocol.messages.delete_groups import DeleteGroupsRequest
from broker.protocol.messages.describe_groups import DescribeGroupsRequest
from broker.protocol.messages.join_group import JoinGroupRequest
from broker.protocol.messages.list_groups import ListGroupsRequest
from broker.protocol.messages.offset_fetch import OffsetFetchRequest
from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from broker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.groups.helpers import (
    ROOT,
    child_env,
    connect,
    create_topic,
    find_coordinator,
    simple_commit,
    wait_until,
)

SESSION_MS = 4000
BROKER_CONFIG = {
    "group.share.session.timeout.ms": SESSION_MS,
    "group.share.heartbeat.interval.ms": 300,
    # below Kafka's default bounds (group configs' min/max, checked at start)
    "group.share.min.session.timeout.ms": SESSION_MS,
    "group.share.min.heartbeat.interval.ms": 300,
}


def hb(bootstrap: str, group: str, member: str, epoch: int, topics: list[str] | None = None, rack: str | None = None):
    with connect(bootstrap) as conn:
        return conn.request(
            ShareGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch, rack_id=rack, subscribed_topic_names=topics
            )
        )


def coordinator_ready(bootstrap: str, group: str) -> None:
    """FindCoordinator first, as clients do (it creates __consumer_offsets)."""
    wait_until(lambda: find_coordinator(bootstrap, group)[0] == 0, 30, f"a coordinator for {group}")


def assigned(r) -> dict[uuid.UUID, list[int]]:
    return {tp.topic_id: sorted(tp.partitions) for tp in r.assignment.topic_partitions}


def describe(bootstrap: str, group: str):
    with connect(bootstrap) as conn:
        return conn.request(ShareGroupDescribeRequest(group_ids=[group])).groups[0]


def listed(bootstrap: str, types: list[str]) -> dict[str, tuple[str, str, str]]:
    with connect(bootstrap) as conn:
        r = conn.request(ListGroupsRequest(states_filter=[], types_filter=types))
    return {g.group_id: (g.group_state, g.protocol_type, g.group_type) for g in r.groups}


def cli(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *args],
        capture_output=True,
        text=True,
        env=child_env(),
        cwd=ROOT,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return r.stdout


def members_view(bootstrap: str, group: str) -> dict[str, tuple[int, list[tuple[str, int]]]]:
    g = describe(bootstrap, group)
    assert g.error_code == 0, g
    return {
        m.member_id: (
            m.member_epoch,
            sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions),
        )
        for m in g.members
    }


@contextlib.contextmanager
def heartbeating(bootstrap: str, group: str, epochs: dict[str, int], lock: threading.Lock):
    """Heartbeats the members of `epochs` every 300 ms in a thread until the block ends
    (their epochs kept current), so that the slow parts of a test on a loaded machine
    (CLI processes starting) never let a member's session run out. A member taken out of
    `epochs` (under `lock`) stops heartbeating."""
    stop = threading.Event()
    errors: list[object] = []

    def beat():
        while not stop.wait(0.3):
            with lock:
                for m in list(epochs):
                    r = hb(bootstrap, group, m, epochs[m])
                    if r.error_code:
                        errors.append(r)
                        return
                    epochs[m] = r.member_epoch

    t = threading.Thread(target=beat, daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join(10)
    assert not errors, errors


def test_members_share_partitions_and_every_view_shows_them(broker, name):
    create_topic(broker.bootstrap, name, 2)
    with Cluster(broker.bootstrap) as c:
        tid = c.topic(name, wait_s=10).topic_id
    group = f"sg-{name}"
    coordinator_ready(broker.bootstrap, group)
    r = hb(broker.bootstrap, group, "member-a", 0, [name], rack="rack-1")
    assert r.error_code == 0, r
    assert (r.member_id, r.member_epoch, r.heartbeat_interval_ms) == ("member-a", 1, 300)
    assert assigned(r) == {tid: [0, 1]}
    # two more: three members on two partitions, so each partition goes to two of them
    for m in ("member-b", "member-c"):
        assert hb(broker.bootstrap, group, m, 0, [name]).error_code == 0
    epochs = {}
    for m in ("member-a", "member-b", "member-c"):
        r = hb(broker.bootstrap, group, m, 3 if m == "member-c" else (1 if m == "member-a" else 2))
        assert r.error_code == 0 and r.member_epoch == 3, r
        epochs[m] = r.member_epoch
    live = contextlib.ExitStack()
    lock = threading.Lock()
    live.enter_context(heartbeating(broker.bootstrap, group, epochs, lock))
    view = members_view(broker.bootstrap, group)
    assert set(view) == {"member-a", "member-b", "member-c"} and {e for e, _ in view.values()} == {3}
    holders: dict[tuple[str, int], int] = {}
    for _, parts in view.values():
        assert 1 <= len(parts) <= 2
        for tp in parts:
            holders[tp] = holders.get(tp, 0) + 1
    assert holders == {(name, 0): 2, (name, 1): 2}
    g = describe(broker.bootstrap, group)
    assert (g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name) == ("Stable", 3, 3, "simple")
    a = next(m for m in g.members if m.member_id == "member-a")
    assert a.rack_id == "rack-1" and a.subscribed_topic_names == [name] and a.client_host.startswith("/127.0.0.1")
    # ListGroups: type "share", protocol type "share"; not among classic or consumer groups
    assert listed(broker.bootstrap, ["share"])[group] == ("Stable", "share", "share")
    assert group in listed(broker.bootstrap, [])
    assert group not in listed(broker.bootstrap, ["classic", "consumer"])
    # DescribeGroups: not a classic group, Dead as Kafka answers up to v5
    with connect(broker.bootstrap) as conn:
        d = conn.request(DescribeGroupsRequest(groups=[group])).groups[0]
    assert (d.error_code, d.group_state, d.members) == (0, "Dead", [])
    # the CLI (the commands docs/share-groups.md shows)
    out = cli("share-groups", "list", "--bootstrap", broker.bootstrap)
    assert f"{group}\tStable" in out.splitlines()
    out = cli("share-groups", "describe", group, "--state", "--bootstrap", broker.bootstrap)
    head, row = out.splitlines()
    assert head.split("\t")[:4] == ["GROUP", "COORDINATOR (ID)", "ASSIGNMENT-STRATEGY", "STATE"]
    assert row.split("\t")[2:] == ["simple", "Stable", "3", "3", "3"]
    out = cli("share-groups", "describe", group, "--members", "--bootstrap", broker.bootstrap)
    rows = {line.split("\t")[1]: line.split("\t") for line in out.splitlines()[1:]}
    assert set(rows) == {"member-a", "member-b", "member-c"}
    for mid, (_, parts) in view.items():
        assert rows[mid][2] == "3" and rows[mid][5] == str(len(parts))
        assert rows[mid][6] == f"{name}:" + ",".join(str(p) for _, p in parts)

    # a member that stops heartbeating is removed after the session timeout; the others
    # keep heartbeating and get every partition between them
    with lock:
        del epochs["member-c"]

    def two_left():
        return set(members_view(broker.bootstrap, group)) == {"member-a", "member-b"}

    wait_until(two_left, SESSION_MS / 1000 * 5, "member-c to be removed after its session timeout", interval=0.3)

    def one_each():  # the survivors take their new assignments at their next heartbeat
        holders: dict[tuple[str, int], int] = {}
        for _, parts in members_view(broker.bootstrap, group).values():
            for tp in parts:
                holders[tp] = holders.get(tp, 0) + 1
        return holders == {(name, 0): 1, (name, 1): 1}

    wait_until(one_each, 30, "each partition held by one of the two members left", interval=0.3)
    live.close()
    # leaving, then deleting
    with connect(broker.bootstrap) as conn:
        r = conn.request(DeleteGroupsRequest(groups_names=[group]))
    assert r.results[0].error_code == ErrorCode.NON_EMPTY_GROUP
    for m in ("member-a", "member-b"):
        r = hb(broker.bootstrap, group, m, -1)
        assert (r.error_code, r.member_epoch) == (0, -1), r
    assert listed(broker.bootstrap, ["share"])[group][0] == "Empty"
    with connect(broker.bootstrap) as conn:
        r = conn.request(DeleteGroupsRequest(groups_names=[group]))
    assert r.results[0].error_code == 0
    assert group not in listed(broker.bootstrap, [])
    g = describe(broker.bootstrap, group)
    assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group} not found.")


def test_bad_input_gets_kafkas_codes(broker, name):
    create_topic(broker.bootstrap, name, 1)
    group = f"sg-{name}"
    coordinator_ready(broker.bootstrap, group)
    assert hb(broker.bootstrap, group, "a", 0, [name]).member_epoch == 1
    assert hb(broker.bootstrap, group, "b", 0, [name]).member_epoch == 2
    assert hb(broker.bootstrap, group, "a", 1).member_epoch == 2  # a: epoch 2, previous 1
    assert hb(broker.bootstrap, group, "b", 0, [name]).member_epoch == 2  # a rejoin keeps the member
    # stale (neither the epoch nor the previous one) and future epochs
    assert hb(broker.bootstrap, group, "c", 0, [name]).member_epoch == 3
    assert hb(broker.bootstrap, group, "a", 2).member_epoch == 3  # a: epoch 3, previous 2
    r = hb(broker.bootstrap, group, "a", 1)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "smaller member epoch (1)" in r.error_message
    r = hb(broker.bootstrap, group, "a", 9)
    assert r.error_code == ErrorCode.FENCED_MEMBER_EPOCH and "greater member epoch (9)" in r.error_message
    r = hb(broker.bootstrap, group, "nobody", 3)
    assert (r.error_code, r.error_message) == (
        ErrorCode.UNKNOWN_MEMBER_ID,
        f"Member nobody is not a member of group {group}.",
    )
    assert hb(broker.bootstrap, group, "nobody", -1).error_code == ErrorCode.UNKNOWN_MEMBER_ID
    assert hb(broker.bootstrap, f"{group}-none", "x", 1).error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # the request's shape, with Kafka 4.4's messages
    for kwargs, message in [
        ({"member_id": "", "member_epoch": 0, "topics": [name]}, "MemberId can't be empty."),
        ({"member_id": "z", "member_epoch": 0, "topics": None}, "SubscribedTopicNames must be set in first request."),
        ({"member_id": "z", "member_epoch": 0, "topics": []}, "SubscribedTopicNames must be set in first request."),
        ({"member_id": "z", "member_epoch": -2, "topics": None}, "MemberEpoch is invalid."),
        ({"member_id": "z", "member_epoch": 0, "topics": [name], "rack": " "}, "RackId can't be empty."),
    ]:
        r = hb(
            broker.bootstrap, group, kwargs["member_id"], kwargs["member_epoch"], kwargs["topics"], kwargs.get("rack")
        )
        assert (r.error_code, r.error_message) == (ErrorCode.INVALID_REQUEST, message)
    # a consumer group's id is not a share group's, and the other way round
    cgroup = f"cg-{name}"
    with connect(broker.bootstrap) as conn:
        r = conn.request(
            ConsumerGroupHeartbeatRequest(
                group_id=cgroup,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[name],
                topic_partitions=[],
            )
        )
        assert r.error_code == 0, r
        r = conn.request(
            ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=str(uuid.uuid4()),
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[name],
                topic_partitions=[],
            )
        )
        assert (r.error_code, r.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {group} is not a consumer group.",
        )
        # a classic JoinGroup to a share group: INCONSISTENT_GROUP_PROTOCOL
        j = conn.request(
            JoinGroupRequest(
                group_id=group,
                session_timeout_ms=10000,
                rebalance_timeout_ms=10000,
                member_id="",
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")],
            ),
            5,
        )
        assert j.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
    r = hb(broker.bootstrap, cgroup, "s", 0, [name])
    assert (r.error_code, r.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {cgroup} is not a share group.")
    g = describe(broker.bootstrap, cgroup)
    assert (g.error_code, g.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {cgroup} is not a share group.")
    # a share group has no committed offsets: OffsetCommit and OffsetFetch refuse its id
    # (and a commit does not turn it into a classic group), ConsumerGroupDescribe too
    assert simple_commit(broker.bootstrap, group, name, {0: 5}) == {0: ErrorCode.GROUP_ID_NOT_FOUND}
    with connect(broker.bootstrap) as conn:
        f = conn.request(OffsetFetchRequest(group_id=group, topics=None), 7)
        assert f.error_code == ErrorCode.GROUP_ID_NOT_FOUND
        d = conn.request(ConsumerGroupDescribeRequest(group_ids=[group])).groups[0]
        assert (d.error_code, d.error_message) == (
            ErrorCode.GROUP_ID_NOT_FOUND,
            f"Group {group} is not a consumer group.",
        )
    assert hb(broker.bootstrap, group, "a", 3).error_code == 0
    # a classic group that only holds committed offsets is a classic group too (as Kafka's)
    offsets_only = f"offsets-{name}"
    assert simple_commit(broker.bootstrap, offsets_only, name, {0: 0}) == {0: 0}
    r = hb(broker.bootstrap, offsets_only, "s", 0, [name])
    assert (r.error_code, r.error_message) == (
        ErrorCode.GROUP_ID_NOT_FOUND,
        f"Group {offsets_only} is not a share group.",
    )


def test_the_group_survives_a_restart_of_its_coordinator(broker, name):
    create_topic(broker.bootstrap, name, 3)
    group = f"sg-{name}"
    coordinator_ready(broker.bootstrap, group)
    hb(broker.bootstrap, group, "a", 0, [name])
    hb(broker.bootstrap, group, "b", 0, [name])
    r = hb(broker.bootstrap, group, "a", 1)
    assert r.member_epoch == 2
    before = members_view(broker.bootstrap, group)
    g = describe(broker.bootstrap, group)
    broker.restart()
    after = wait_until(
        lambda: describe(broker.bootstrap, group).error_code == 0 and members_view(broker.bootstrap, group),
        30,
        "the share group to be loaded again",
    )
    assert after == before
    h = describe(broker.bootstrap, group)
    assert (h.group_epoch, h.assignment_epoch) == (g.group_epoch, g.assignment_epoch)
    # the members carry on at their epochs (no new epoch: the topics did not change)
    assert hb(broker.bootstrap, group, "a", 2).member_epoch == 2
    assert hb(broker.bootstrap, group, "b", 2).error_code == 0


def test_share_groups_disabled_answer_unsupported_version(tmp_path, name):
    """group.share.enable=false: the share-group APIs answer UNSUPPORTED_VERSION, as Kafka
    answers while its share.version feature is 0."""
    from tests.groups.helpers import GROUP_CONFIG
    from tests.support.broker_proc import BrokerProcess

    with BrokerProcess(tmp_path / "data", config={**GROUP_CONFIG, "group.share.enable": "false"}) as b:
        create_topic(b.bootstrap, name, 1)
        coordinator_ready(b.bootstrap, "off")
        r = hb(b.bootstrap, "off", "a", 0, [name])
        assert r.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert describe(b.bootstrap, "off").error_code == ErrorCode.UNSUPPORTED_VERSION
        assert "off" not in listed(b.bootstrap, ["share"])

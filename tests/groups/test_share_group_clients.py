"""Share-group membership with a real share consumer: franz-go's (kgo.ShareGroup, pinned
in tests/go/go.mod, `goclients franz-share`, tests/go/share.go) against a real `broker
serve`, and Kafka's Admin client describing the group. Three consumers join a share group on a two-partition topic; the broker's
ShareGroupDescribe and `broker share-groups describe --members` show the three with
their client ids, and each partition assigned to two of them (three members, two
partitions: Kafka's simple assignor shares them). One stopped cleanly leaves at once
(epoch -1); one killed -9 stays a member until its session timeout, then is removed and
the survivor gets every partition.

Kafka's kafka-share-groups lists and describes the members, and moves, shows and
deletes an empty group's start offsets. (Records read by share consumers:
test_share_delivery_clients.py.)"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from tests.groups.helpers import ROOT, child_env, connect, create_topic, wait_until
from tests.support.deps import missing

pytestmark = pytest.mark.interop

GO_BIN = ROOT / "tests" / "go" / "bin" / "goclients"
SESSION_MS = 6000
BROKER_CONFIG = {
    "group.share.session.timeout.ms": SESSION_MS,
    "group.share.heartbeat.interval.ms": 500,
    # below Kafka's default bounds (group configs' min/max, checked at start)
    "group.share.min.session.timeout.ms": SESSION_MS,
    "group.share.min.heartbeat.interval.ms": 500,
}


def members(bootstrap: str, group: str) -> dict[str, tuple[str, int, list[tuple[str, int]]]]:
    """member id -> (client id, epoch, [(topic, partition)]) from ShareGroupDescribe."""
    with connect(bootstrap) as conn:
        g = conn.request(ShareGroupDescribeRequest(group_ids=[group])).groups[0]
    if g.error_code:
        return {}
    return {
        m.member_id: (
            m.client_id,
            m.member_epoch,
            sorted((tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions),
        )
        for m in g.members
    }


def test_franz_go_share_consumers_join_leave_and_expire(broker, name, tmp_path):
    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    create_topic(broker.bootstrap, name, 2)
    group = f"share-{name}"
    procs: dict[str, subprocess.Popen] = {}
    try:
        for i in range(3):
            cid = f"franz-share-{i}"
            procs[cid] = subprocess.Popen(
                [str(GO_BIN), "franz-share", broker.bootstrap, name, group, cid],
                stdout=open(tmp_path / f"{cid}.out", "w"),
                stderr=open(tmp_path / f"{cid}.err", "w"),
            )

        def settled():
            m = members(broker.bootstrap, group)
            epochs = {e for _, e, _ in m.values()}
            return m if len(m) == 3 and len(epochs) == 1 else None

        view = wait_until(settled, 60, "three franz-go share consumers in the group")
        assert sorted(c for c, _, _ in view.values()) == ["franz-share-0", "franz-share-1", "franz-share-2"]
        holders: dict[tuple[str, int], int] = {}
        for _, _, parts in view.values():
            assert parts, view
            for tp in parts:
                holders[tp] = holders.get(tp, 0) + 1
        assert holders == {(name, 0): 2, (name, 1): 2}
        # the CLI shows the same members and assignments
        r = subprocess.run(
            [sys.executable, "-m", "broker.cli.main", "share-groups", "describe", group, "--members"]
            + ["--bootstrap", broker.bootstrap],
            capture_output=True,
            text=True,
            env=child_env(),
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        rows = {line.split("\t")[1]: line.split("\t") for line in r.stdout.splitlines()[1:]}
        assert set(rows) == set(view)
        for mid, (cid, epoch, parts) in view.items():
            assert rows[mid][3].startswith("/127.0.0.1") and rows[mid][4] == cid and rows[mid][2] == str(epoch)
            assert rows[mid][6] == f"{name}:" + ",".join(str(p) for _, p in parts)
        # a consumer closed cleanly leaves at once (well within its session timeout)
        started = time.monotonic()
        procs["franz-share-0"].send_signal(signal.SIGTERM)
        assert procs["franz-share-0"].wait(timeout=30) == 0
        wait_until(
            lambda: (
                sorted(c for c, _, _ in members(broker.bootstrap, group).values()) == ["franz-share-1", "franz-share-2"]
            ),
            30,
            "franz-share-0 to leave",
        )
        assert time.monotonic() - started < SESSION_MS / 1000
        # one killed -9: still a member until its session timeout, then removed
        killed = procs["franz-share-1"]
        os.kill(killed.pid, signal.SIGKILL)
        killed.wait(timeout=10)
        killed_at = time.monotonic()
        time.sleep(SESSION_MS / 1000 / 3)
        assert "franz-share-1" in {c for c, _, _ in members(broker.bootstrap, group).values()}
        survivor = wait_until(
            lambda: (
                (m := members(broker.bootstrap, group))
                and [c for c, _, _ in m.values()] == ["franz-share-2"]
                and next(iter(m.values()))
            ),
            SESSION_MS / 1000 * 4,
            "the killed consumer to be removed after its session timeout",
        )
        # the session runs from its last heartbeat (at most one interval, 0.5 s, before the kill)
        assert time.monotonic() - killed_at >= SESSION_MS / 1000 - 1.0
        wait_until(
            lambda: next(iter(members(broker.bootstrap, group).values()))[2] == [(name, 0), (name, 1)],
            30,
            "the survivor to get both partitions",
        )
        assert survivor[0] == "franz-share-2"
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_kafkas_admin_client_lists_and_describes_a_share_group(broker, name, tmp_path):
    """Kafka's Admin client (tests/jvm ShareChecks describe): listGroups with the share
    type and describeShareGroups (ShareGroupDescribe) of a group of two franz-go share
    consumers answer what the broker has: type Share, state Stable, the coordinator, the
    epochs, each member's client id, host, epoch and partitions."""
    from tests.support.kafka_tools import java_program

    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    create_topic(broker.bootstrap, name, 2)
    group = f"share-admin-{name}"
    procs = [
        subprocess.Popen(
            [str(GO_BIN), "franz-share", broker.bootstrap, name, group, f"franz-{i}"],
            stdout=open(tmp_path / f"franz-{i}.out", "w"),
            stderr=open(tmp_path / f"franz-{i}.err", "w"),
        )
        for i in range(2)
    ]
    try:

        def settled():
            m = members(broker.bootstrap, group)
            return m if len(m) == 2 and len({e for _, e, _ in m.values()}) == 1 else None

        view = wait_until(settled, 60, "two share consumers in the group")
        run = java_program("ShareChecks", "describe", broker.bootstrap, group)
        facts = {f["check"]: f for f in (json.loads(line) for line in run.lines if line.startswith("{"))}
        assert f"{group}:Share:Stable" in facts["share-list"]["groups"]
        d = facts["share-describe"]
        assert d["state"] == "Stable" and d["coordinator"] == 0
        epoch = next(iter(view.values()))[1]
        assert (d["group_epoch"], d["assignment_epoch"]) == (epoch, epoch)
        assert {
            mid: (m["client"], m["epoch"], sorted(tuple(p.rsplit(":", 1)) for p in m["partitions"]))
            for mid, m in d["members"].items()
        } == {mid: (c, e, [(t, str(p)) for t, p in parts]) for mid, (c, e, parts) in view.items()}
        assert all(m["host"].startswith("/127.0.0.1") for m in d["members"].values())
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait(timeout=10)


def test_kafkas_share_groups_tool_lists_and_describes_membership(broker, name):
    """Kafka's kafka-share-groups (the tools jar of tests/jvm/pom.xml): --list (with --state), --describe
    --members and --state (with --verbose: epochs) read what the broker has."""
    from broker.client import BrokerConnection
    from broker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
    from tests.groups.helpers import find_coordinator
    from tests.support.kafka_tools import kafka_tool

    create_topic(broker.bootstrap, name, 2)
    group = f"share-tool-{name}"
    wait_until(lambda: find_coordinator(broker.bootstrap, group)[0] == 0, 30, "a coordinator")
    host, port = broker.bootstrap.rsplit(":", 1)
    conn = BrokerConnection(host, int(port), client_id="worker")
    epochs = {}
    for m in ("w1", "w2"):
        r = conn.request(
            ShareGroupHeartbeatRequest(group_id=group, member_id=m, member_epoch=0, subscribed_topic_names=[name])
        )
        assert r.error_code == 0, r
        epochs[m] = r.member_epoch
    # the members keep their sessions while the tool runs (heartbeats at their epochs)
    stop = threading.Event()

    errors: list = []

    def heartbeat():
        while not stop.wait(0.3):
            for m, e in list(epochs.items()):
                r = conn.request(ShareGroupHeartbeatRequest(group_id=group, member_id=m, member_epoch=e))
                if r.error_code:
                    errors.append(r)
                epochs[m] = r.member_epoch

    beating = threading.Thread(target=heartbeat, daemon=True)
    beating.start()
    try:
        wait_until(lambda: set(epochs.values()) == {2}, 30, "both members at epoch 2")

        def tool(*args: str) -> list[list[str]]:
            out = kafka_tool("kafka-share-groups", "--bootstrap-server", broker.bootstrap, *args).stdout
            return [line.split() for line in out.splitlines() if line.strip()]

        assert [group] in tool("--list")
        assert [group, "Stable"] in tool("--list", "--state", "Stable")
        assert [group, "Stable"] not in tool("--list", "--state", "Empty")
        rows = tool("--describe", "--group", group, "--members", "--verbose")
        assert rows[0] == ["GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "MEMBER-EPOCH", "ASSIGNMENT"]
        assert sorted(rows[1:]) == [
            [group, "w1", "/127.0.0.1", "worker", "1", "2", f"{name}:0"],
            [group, "w2", "/127.0.0.1", "worker", "1", "2", f"{name}:1"],
        ]
        rows = tool("--describe", "--group", group, "--state", "--verbose")
        assert rows[0][-4:] == ["STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"]
        assert rows[1][-4:] == ["Stable", "2", "2", "2"]
    finally:
        stop.set()
        beating.join(10)
        conn.close()
    assert not errors


def test_kafkas_share_groups_tool_resets_describes_and_deletes_offsets(broker, name):
    """Kafka's kafka-share-groups on a share group whose members have left: --reset-offsets
    (plan, then --execute), --describe (the start offsets and lag: its default view),
    --delete-offsets and --delete, each checked against what the broker then answers
    (`broker share-groups describe`, ListGroups)."""
    from broker.client import BrokerConnection
    from broker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
    from tests.groups.helpers import find_coordinator
    from tests.support.kafka_tools import kafka_tool

    create_topic(broker.bootstrap, name, 2)
    import confluent_kafka as ck

    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        p.produce(name, f"v{i}".encode(), partition=i % 2)
    assert p.flush(30) == 0
    group = f"share-offsets-{name}"
    wait_until(lambda: find_coordinator(broker.bootstrap, group)[0] == 0, 30, "a coordinator")
    host, port = broker.bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port), client_id="worker") as conn:
        r = conn.request(
            ShareGroupHeartbeatRequest(group_id=group, member_id="w1", member_epoch=0, subscribed_topic_names=[name])
        )
        assert r.error_code == 0, r
        r = conn.request(ShareGroupHeartbeatRequest(group_id=group, member_id="w1", member_epoch=-1))
        assert r.error_code == 0, r

    def tool(*args: str) -> list[list[str]]:
        out = kafka_tool("kafka-share-groups", "--bootstrap-server", broker.bootstrap, *args).stdout
        return [line.split() for line in out.splitlines() if line.strip()]

    def table(rows: list[list[str]], *cols: str) -> list[tuple[str, ...]]:
        head = rows[0]
        return sorted(tuple(r[head.index(c)] for c in cols) for r in rows[1:])

    def ours() -> list[tuple[str, ...]]:
        r = subprocess.run(
            [sys.executable, "-m", "broker.cli.main", "share-groups", "describe", group, "-b", broker.bootstrap],
            env=child_env(),
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, r.stderr
        return table([line.split("\t") for line in r.stdout.splitlines()], "PARTITION", "START-OFFSET", "LAG")

    plan = tool("--reset-offsets", "--group", group, "--topic", name, "--to-offset", "3", "--dry-run")
    assert table(plan, "TOPIC", "PARTITION", "NEW-OFFSET") == [(name, "0", "3"), (name, "1", "3")]
    tool("--reset-offsets", "--group", group, "--topic", name, "--to-offset", "3", "--execute")
    assert ours() == [("0", "3", "7"), ("1", "3", "7")]
    rows = tool("--describe", "--group", group)
    assert table(rows, "TOPIC", "PARTITION", "START-OFFSET", "LAG") == [(name, "0", "3", "7"), (name, "1", "3", "7")]
    tool("--reset-offsets", "--group", group, "--topic", name, "--to-earliest", "--execute")
    assert ours() == [("0", "0", "10"), ("1", "0", "10")]
    tool("--delete-offsets", "--group", group, "--topic", name)
    assert ours() == []
    tool("--delete", "--group", group)
    assert [group] not in tool("--list")

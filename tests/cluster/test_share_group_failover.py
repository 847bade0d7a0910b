"""A share group across a coordinator failover on the 3-broker cluster: two franz-go share
consumers (tests/go/share.go) are members when the broker leading the group's
__consumer_offsets partition is killed -9. The partition's new leader loads the group
from its records (share_group.py's records, replayed), the consumers find it
(NOT_COORDINATOR -> FindCoordinator) and carry on: the same members, at the epochs and
with the assignments they had (nothing about the group changed), and a third consumer
joining afterwards is assigned by the new coordinator."""

from __future__ import annotations

import subprocess

import pytest

from broker.client import BrokerConnection
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from tests.cluster.test_durability import create
from tests.groups.helpers import ROOT, offsets_partition, wait_until
from tests.support.deps import missing

pytestmark = pytest.mark.interop

GO_BIN = ROOT / "tests" / "go" / "bin" / "goclients"
OFFSETS_PARTITIONS = 10


def _members(cluster, group: str):
    """member id -> (client id, epoch, partitions) as the group's coordinator describes it,
    or None while there is none that knows the group."""
    for i in cluster.live_ids():
        host, port = cluster.broker(i).bootstrap.rsplit(":", 1)
        try:
            with BrokerConnection(host, int(port), timeout=5) as conn:
                f = conn.request(FindCoordinatorRequest(key=group, key_type=0), 1)
                if f.error_code:
                    continue
            with BrokerConnection(f.host, f.port, timeout=5) as conn:
                g = conn.request(ShareGroupDescribeRequest(group_ids=[group])).groups[0]
        except Exception as exc:
            print("describe via", i, "failed:", repr(exc))
            continue
        if g.error_code:
            print("describe via", i, ":", g.error_code, g.error_message)
            return None
        return {
            m.member_id: (
                m.client_id,
                m.member_epoch,
                sorted(p for tp in m.assignment.topic_partitions for p in tp.partitions),
            )
            for m in g.members
        }
    return None


def test_a_share_group_survives_its_coordinators_death(make_cluster, tmp_path):
    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    cluster = make_cluster(
        3,
        config={
            "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
            "group.share.heartbeat.interval.ms": 500,
            "group.share.session.timeout.ms": 15000,
            # below Kafka's default bounds (group configs' min/max, checked at start)
            "group.share.min.heartbeat.interval.ms": 500,
            "group.share.min.session.timeout.ms": 15000,
        },
    )
    topic, group = "sgf", "sgf-group"
    create(cluster, topic)
    procs = []
    try:
        for i in range(2):
            procs.append(
                subprocess.Popen(
                    [str(GO_BIN), "franz-share", cluster.bootstrap, topic, group, f"franz-share-{i}"],
                    stdout=open(tmp_path / f"c{i}.out", "w"),
                    stderr=open(tmp_path / f"c{i}.err", "w"),
                )
            )

        def settled(n: int):
            def probe():
                m = _members(cluster, group)
                return m if m and len(m) == n and len({e for _, e, _ in m.values()}) == 1 else None

            return probe

        before = wait_until(settled(2), 60, "two share consumers in the group")
        p = offsets_partition(group, OFFSETS_PARTITIONS)
        coordinator = cluster.leader_of("__consumer_offsets", p)
        cluster.kill(coordinator)
        new = cluster.wait_for_leader("__consumer_offsets", p, not_in={coordinator})
        assert new != coordinator
        # the new coordinator loaded the group: the same members, epochs and assignments
        after = wait_until(lambda: _members(cluster, group), 30, "the group from the new coordinator")
        assert after == before
        # the consumers heartbeat to the new coordinator: still members well past a few
        # heartbeat intervals, and a third joins and is assigned alongside them
        procs.append(
            subprocess.Popen(
                [str(GO_BIN), "franz-share", cluster.bootstrap, topic, group, "franz-share-2"],
                stdout=open(tmp_path / "c2.out", "w"),
                stderr=open(tmp_path / "c2.err", "w"),
            )
        )
        three = wait_until(settled(3), 60, "three share consumers after the failover")
        assert set(before) <= set(three)
        assert sorted(c for c, _, _ in three.values()) == ["franz-share-0", "franz-share-1", "franz-share-2"]
        counts: dict[int, int] = {}
        for _, _, parts in three.values():
            for q in parts:
                counts[q] = counts.get(q, 0) + 1
        assert counts == {q: 1 for q in range(3)}  # three members, three partitions
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(timeout=10)

"""A share partition's in-flight state across its leader killed -9, on the 3-broker
cluster: the share-partition leader writes its state through the share persister to
__share_group_state (replicated, on whichever broker coordinates the key), and the
partition's new leader reads it back.

A follower answers a ShareFetch NOT_LEADER_OR_FOLLOWER with the leader and its endpoint.
A share consumer (kbroker's own client speaking ShareFetch/ShareAcknowledge) acquires 30
records on the leader, accepts 0..9, releases 10..14 and holds 15..29; the leader is
killed -9. On the new leader nothing accepted is delivered again; 10..14 and the held
15..29 (written as acquired by the acknowledgement's write: a lock does not survive its
leader) come again with delivery count 2; once they are accepted the state read back
from the share coordinator has its start offset past the last record."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.client import Cluster as Client
from broker.client.connection import BrokerConnection
from broker.client.producer import Producer
from broker.protocol.errors import ErrorCode
from broker.share.coordinator import STATE_TOPIC
from broker.share.partition import ACCEPT, RELEASE
from broker.share.records import coordinator_key
from tests.cluster.test_share_state_failover import CONFIG as STATE_CONFIG, persister_for
from tests.unit.share.share_client import Member, records, runs

pytestmark = pytest.mark.timeout(300)

# __share_group_state as the test persister (persister_for) expects it
CONFIG = {**STATE_CONFIG, "min.insync.replicas": 2}
GROUP = "sg-failover"
N = 30


def _connect(cluster, broker_id: int) -> BrokerConnection:
    host, port = cluster.broker(broker_id).bootstrap.rsplit(":", 1)
    return BrokerConnection(host, int(port), timeout=30)


def _fetch_until(member: Member, want: int, deadline: float):
    """ShareFetch until `want` records came (a new leader may still be loading the state:
    its errors are retried)."""
    got = []
    while len(got) < want and time.monotonic() < deadline:
        err, d = member.fetch(max_wait_ms=500)
        assert err == 0, ErrorCode(err).name
        if d is not None and d.error_code:
            time.sleep(0.2)
            continue
        got += records(d)
    return got


def test_in_flight_share_state_survives_its_leader_killed(make_cluster):
    cluster = make_cluster(3, config=CONFIG)
    with Client(cluster.bootstrap) as c:
        c.create_topic("q", 1, 3)
        tid = c.topic("q", wait_s=20).topic_id
    leader = cluster.wait_for_leader("q", 0)
    # a follower answers NOT_LEADER_OR_FOLLOWER with the leader and its endpoint
    follower = next(i for i in cluster.live_ids() if i != leader)
    x = Member(_connect(cluster, follower), GROUP, tid, "member-x")
    err, d = x.fetch()
    assert err == 0 and d.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    assert d.current_leader.leader_id == leader and d.current_leader.leader_epoch >= 0
    assert [(e.node_id, e.port) for e in x.last.node_endpoints] == [
        (leader, int(cluster.broker(leader).bootstrap.rsplit(":", 1)[1]))
    ]
    x.conn.close()
    a = Member(_connect(cluster, leader), GROUP, tid, "member-a")
    err, _ = a.fetch()  # initializes the share partition at the latest offset (0)
    assert err == 0
    with Client(cluster.bootstrap) as c:
        p = Producer(c, acks=-1, linger_ms=0)
        for i in range(N):
            p.send("q", b"v%d" % i, partition=0)
        p.flush()
        p.close()
    got = _fetch_until(a, N, time.monotonic() + 60)
    assert [(o, n) for o, _v, n in got] == [(o, 1) for o in range(N)]
    err, d = a.acknowledge([(0, 9, ACCEPT), (10, 14, RELEASE)])
    assert err == 0 and d.error_code == 0
    a.conn.close()
    cluster.kill(leader)
    new = cluster.wait_for_leader("q", 0, not_in={leader})
    b = Member(_connect(cluster, new), GROUP, tid, "member-b")
    assert b.fetch(max_records=0)[0] == 0  # opens the session
    again = _fetch_until(b, N - 10, time.monotonic() + 90)
    assert sorted((o, n) for o, _v, n in again) == [(o, 2) for o in range(10, N)]
    err, d = b.acknowledge(runs(again))
    assert err == 0 and d.error_code == 0
    assert records(b.fetch(max_wait_ms=300)[1]) == []

    async def read():
        persister = persister_for(cluster)
        try:
            return await persister.read_summary(GROUP, [(tid, 0)])
        finally:
            await persister.close()

    st = asyncio.run(read())[(tid, 0)]
    assert st.error == 0 and st.start_offset == N


def test_acknowledged_records_stay_so_across_the_share_coordinator_killed(make_cluster):
    """Issue 36's test 4: the broker coordinating the share-partition's state (the leader of
    its __share_group_state partition) is killed -9 mid-run. Acknowledgements made after
    the kill are answered once the new coordinator has them (the persister finds it);
    when the topic partition's leader then changes too (the only way its state is read
    again), nothing acknowledged is delivered again and every record in flight is, with
    delivery count 2."""
    cluster = make_cluster(3, config=CONFIG)
    with Client(cluster.bootstrap) as c:
        c.create_topic("q4", 1, 3)
        tid = c.topic("q4", wait_s=20).topic_id
    leader = cluster.wait_for_leader("q4", 0)
    a = Member(_connect(cluster, leader), GROUP, tid, "member-a")
    assert a.fetch()[0] == 0  # initializes the share partition: __share_group_state exists now
    with Client(cluster.bootstrap) as c:
        p = Producer(c, acks=-1, linger_ms=0)
        for i in range(N):
            p.send("q4", b"v%d" % i, partition=0)
        p.flush()
        p.close()
    got = _fetch_until(a, N, time.monotonic() + 60)
    assert len(got) == N
    assert a.acknowledge([(0, 9, ACCEPT)])[1].error_code == 0
    finder = persister_for(cluster)
    coordinator = cluster.leader_of(STATE_TOPIC, finder.coordinator.partition_for(coordinator_key(GROUP, tid, 0)))
    assert coordinator in (1, 2, 3)
    cluster.kill(coordinator)
    acked = set(range(10))
    if coordinator != leader:
        # the leader goes on; its next acknowledgement waits for the new coordinator
        t0 = time.monotonic()
        err, d = a.acknowledge([(10, 19, ACCEPT)])
        assert err == 0 and d.error_code == 0, ErrorCode(d.error_code).name
        print(f"acknowledged through the new coordinator after {time.monotonic() - t0:.1f} s")
        acked |= set(range(10, 20))
        a.conn.close()
        # the coordinator's broker back, then the topic partition's leader moves: its new
        # leader reads the state from the share coordinator
        cluster.start(coordinator)
        cluster.wait_for_isr("q4", 0, {1, 2, 3}, timeout=60)
        cluster.kill(leader)
        gone = {leader}
    else:
        a.conn.close()
        gone = {coordinator}
    new = cluster.wait_for_leader("q4", 0, not_in=gone)
    b = Member(_connect(cluster, new), GROUP, tid, "member-b")
    assert b.fetch(max_records=0)[0] == 0
    again = _fetch_until(b, N - len(acked), time.monotonic() + 90)
    assert sorted((o, n) for o, _v, n in again) == [(o, 2) for o in range(N) if o not in acked]
    assert b.acknowledge(runs(again))[1].error_code == 0
    assert records(b.fetch(max_wait_ms=300)[1]) == []

"""The cluster on uvloop, the loop `broker serve` picks by default (--event-loop auto).

The rest of tests/cluster runs its brokers on asyncio's own loop; this runs the
inter-broker paths once on uvloop: the controller's requests to every broker, followers'
fetches of megabytes (received in place into their frames, broker/cluster/channel.py),
a leader's kill -9 and the new leader's election, and the old leader rejoining as a
follower. uvloop's transports are not asyncio.Transport subclasses and its
BufferedProtocol calls differ from asyncio's; a channel that only works on asyncio fails
here (brokers never hear the controller)."""

from __future__ import annotations

import os

from tests.cluster.test_failover import read, segment_bytes
from tests.support.deps import require_module

TOPIC = "uv-cluster"


def test_replication_and_failover_on_uvloop(make_cluster):
    require_module("uvloop")
    from broker.client import Cluster as Client, Producer

    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 6000}, event_loop="uvloop")
    for i in cluster.ids:
        assert "event loop: uvloop" in cluster.broker(i).log_path.read_text(errors="replace")
    # every broker heard the controller: it lists all three
    for i in cluster.ids:
        assert sorted(cluster.registered_ids(via=i)) == [1, 2, 3]
    with Client(cluster.bootstrap) as c:
        c.create_topic(TOPIC, 1, 3, {"min.insync.replicas": "2"})
    cluster.wait_for_leader(TOPIC, 0, everywhere=True)
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})

    values = [os.urandom(1000) + b"%08d" % i for i in range(6000)]  # 6 MB: followers fetch megabytes
    with Producer(cluster.bootstrap, acks=-1, batch_size=1 << 20) as p:
        for v in values[:3000]:
            p.send(TOPIC, v, partition=0)
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})

    leader = cluster.leader_of(TOPIC, 0)
    cluster.kill(leader)
    new_leader = cluster.wait_for_leader(TOPIC, 0, not_in=(leader,))
    assert new_leader != leader
    with Producer(cluster.bootstrap, acks=-1, batch_size=1 << 20) as p:
        for v in values[3000:]:
            p.send(TOPIC, v, partition=0)
    cluster.start(leader)
    cluster.wait_for_isr(TOPIC, 0, {1, 2, 3})

    assert read(cluster.bootstrap, TOPIC) == values  # nothing lost, nothing twice
    logs = {i: segment_bytes(cluster, i, TOPIC) for i in cluster.ids}
    assert len(logs[leader]) > 6_000_000
    assert logs[1] == logs[2] == logs[3]  # the replicas are byte-identical

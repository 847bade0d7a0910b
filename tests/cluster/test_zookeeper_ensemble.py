"""The cluster on a three-server ZooKeeper ensemble (issue 20, test 1): losing the
ensemble's leader (kill -9), then losing quorum (two of three SIGSTOPped for 10 s) and
getting it back, under idempotent acks=all load. As Kafka: no broker exits, leaders keep
serving while their sessions survive, everything recovers by itself; the checker of the
fault suite (tests/faults/checker.py) finds no acknowledged record lost and none written
twice, and every ISR is whole again at the end.

Each ZooKeeper server and each broker has its own loopback address (tests/support/cluster.py,
distinct hosts): the brokers' connect string names three hosts, and each broker's
connections to them leave from its own address. The seed (which two servers are stopped,
and in which order they come back) is printed; every wait is bounded.
"""

from __future__ import annotations

import random
import time

import pytest

from broker.client import Cluster as Client
from tests.faults.workload import FAULT_CONFIG, Workload, replica_logs
from tests.support.cluster import Cluster
from tests.support.deps import missing
from tests.support.zookeeper import available as zookeeper_available, four_letter_word

pytestmark = pytest.mark.slow

SEED = 2001
TOPIC = "ens"
PARTITIONS = 2
QUORUM_LOSS_S = 10.0


def all_running(c: Cluster) -> None:
    states = {i: c.state(i) for i in c.ids}
    assert all(s in ("running", "paused") for s in states.values()), f"a broker exited: {states}"


LOST = "ZooKeeper connection lost"


def log_count(c: Cluster, broker_id: int, text: str) -> int:
    return c.broker(broker_id).log_path.read_text(errors="replace").count(text)


def zookeeper_clients(server) -> set[str]:
    """The source addresses of the connections a ZooKeeper server lists ('cons')."""
    out = set()
    for line in four_letter_word(server.port, "cons", host=server.host).splitlines():
        line = line.strip()
        if line.startswith("/"):
            out.add(line[1:].split("[", 1)[0].rsplit(":", 1)[0])
    return out


def test_cluster_rides_out_losing_the_zookeeper_leader_then_quorum(request, tmp_path):
    what = zookeeper_available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless, or run 'make test' as root")
    print(f"\nZooKeeper ensemble test: seed {SEED}")
    rng = random.Random(SEED)
    c = Cluster(tmp_path / "cluster", n=3, config=FAULT_CONFIG, distinct_hosts=True, ensemble=3)
    request.node.kbroker_clusters = [c]
    ens = c.zookeeper
    try:
        c.start()
        assert c.zk_connect.count(",") == 2 and len({s.host for s in ens.servers}) == 3
        with Client(c.bootstrap) as client:
            client.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        for p in range(PARTITIONS):
            c.wait_for_isr(TOPIC, p, {1, 2, 3}, everywhere=True)
        w = Workload(c.bootstrap, TOPIC, PARTITIONS).start()
        t0 = time.monotonic()
        try:
            w.wait_for_acks(200)
            # every broker's session leaves from its own address, whichever server it chose
            brokers = {c.host_of(i) for i in c.ids}
            seen = set().union(*(zookeeper_clients(s) for s in ens.servers))
            assert brokers <= seen, f"broker addresses {sorted(brokers)}, ZooKeeper's clients {sorted(seen)}"

            # 1. kill -9 the ensemble's leader: the two others elect a new one
            old = ens.wait_for_quorum()
            old.kill()
            new = ens.wait_for_quorum(members=[s for s in ens.servers if s is not old])
            print(
                f"ZooKeeper leader {old.myid} killed; {new.myid} leads after {time.monotonic() - t0:.1f} s of the run"
            )
            w.wait_for_acks(200)
            all_running(c)
            old.start(wait=False)
            ens.wait_for_quorum()

            # 2. two of three stopped for 10 s, the leader one of them: no quorum, then it comes
            # back. The leader wakes with its clock 10 s on and, with the follower stopped beside
            # it, may expire the brokers' sessions at once: they register again on new ones.
            leader = ens.wait_for_quorum()
            stopped = [leader, rng.choice([s for s in ens.servers if s is not leader])]
            print(f"SIGSTOP ZooKeeper servers {[s.myid for s in stopped]} for {QUORUM_LOSS_S:g} s")
            lost = {i: log_count(c, i, LOST) for i in c.ids}
            for s in stopped:
                s.pause()
            try:
                deadline = time.monotonic() + QUORUM_LOSS_S
                # the remaining server gives up its clients once it sees no quorum (syncLimit)
                time.sleep(QUORUM_LOSS_S / 2)
                acked = w.acked()
                while time.monotonic() < deadline:
                    all_running(c)
                    time.sleep(0.5)
                # the leaders kept serving acks=all with the ISR they had: no ZooKeeper needed
                during = w.acked() - acked
                assert during > 100, f"{during} records acknowledged in the last {QUORUM_LOSS_S / 2:g} s of the outage"
                # and every broker saw its ZooKeeper connection go
                assert all(log_count(c, i, LOST) > lost[i] for i in c.ids), "a broker never lost ZooKeeper"
            finally:
                for s in rng.sample(stopped, 2):
                    s.resume()
            back = time.monotonic()
            ens.wait_for_quorum(timeout=60)
            c.wait_for_brokers([1, 2, 3], timeout=60)
            for p in range(PARTITIONS):
                c.wait_for_isr(TOPIC, p, {1, 2, 3}, timeout=60, everywhere=True)
            print(f"quorum, registrations and ISRs back {time.monotonic() - back:.1f} s after SIGCONT")
            w.wait_for_acks(200)
            all_running(c)
        finally:
            w.stop()
        result = w.check(replica_logs(c, TOPIC, PARTITIONS))
        print(f"ensemble run ({time.monotonic() - t0:.0f} s): {result.summary()}")
        assert result.ok, result.summary()
        assert result.counts["producer_fatal"] == 0, result.summary()
        assert result.epoch_bump_duplicates == 0, result.summary()
        assert result.counts["acked"] > 600
        for p in range(PARTITIONS):
            assert set(c.isr_of(TOPIC, p)) == {1, 2, 3}
        all_running(c)
    finally:
        c.close()

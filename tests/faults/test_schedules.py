"""Nemesis schedules under load, each checked by the Jepsen-style checker: no acknowledged
record lost, no record at two offsets (an idempotent producer) or duplicates counted (a
plain one), offsets dense, polls monotonic, no read later truncated, no commit beyond
the log, and at the end every replica's log byte-identical.

One 3-broker cluster on distinct loopback addresses (its own ZooKeeper) serves the module;
each schedule has its own topic (2 partitions, replication 3, min.insync.replicas 2), an
idempotent and a plain acks=all producer and a consumer running throughout, one fault held
for a while, healed, the cluster back to full ISRs, then the final read. Seeds are fixed
and printed (`-s` shows them): a failure reruns exactly the same choices (timings vary).
"""

from __future__ import annotations

import random
import time

import pytest

from broker.client import Cluster as Client
from broker.protocol.messages.create_topics import CreateTopicsRequest
from tests.faults.nemesis import Nemesis
from tests.faults.workload import FAULT_CONFIG, Workload, replica_logs
from tests.support import netfault
from tests.support.cluster import Cluster, poll_until
from tests.support.deps import missing
from tests.support.zookeeper import available as zookeeper_available

pytestmark = pytest.mark.slow

PARTITIONS = 2
WARMUP_ACKS = 200
AFTER_ACKS = 200


@pytest.fixture(scope="module")
def schedule_cluster(tmp_path_factory):
    for what in (netfault.available(), zookeeper_available()):
        if what is not None:
            missing(what, "the fault tests need root, iptables, ZooKeeper and java: run 'make test' as root")
    c = Cluster(tmp_path_factory.mktemp("faults"), n=3, config=FAULT_CONFIG, distinct_hosts=True)
    try:
        c.start()
        yield c
    finally:
        c.close()


@pytest.fixture
def cluster(request, schedule_cluster):
    request.node.kbroker_clusters = [schedule_cluster]  # logs in a failure's report
    return schedule_cluster


def create_topic(c: Cluster, topic: str, assignment: list[list[int]] | None = None) -> None:
    """PARTITIONS partitions, 3 replicas (or the given replicas of each, the first leading),
    min.insync.replicas 2."""
    configs = {"min.insync.replicas": "2"}
    with Client(c.bootstrap) as client:
        if assignment is None:
            client.create_topic(topic, PARTITIONS, 3, configs)
            return
        C = CreateTopicsRequest
        req = C(
            topics=[
                C.CreatableTopic(
                    name=topic,
                    num_partitions=-1,
                    replication_factor=-1,
                    assignments=[
                        C.CreatableReplicaAssignment(partition_index=p, broker_ids=r) for p, r in enumerate(assignment)
                    ],
                    configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
                )
            ],
            timeout_ms=30000,
            validate_only=False,
        )
        r = client.controller().request(req).topics[0]
        assert r.error_code == 0, r


def run_schedule(
    c: Cluster, net, name: str, seed: int, fault, hold_s: float, assignment: list[list[int]] | None = None, heal=None
) -> object:
    """Load, `fault(nemesis, topic)` held for hold_s, heal (the nemesis, then `heal()`),
    recover, check."""
    print(f"\nschedule {name}: seed {seed}")
    rng = random.Random(seed)
    topic = f"{name}-{seed}"
    create_topic(c, topic, assignment)
    nem = Nemesis(c, net, rng)
    nem.wait_healthy({topic: PARTITIONS})
    w = Workload(c.bootstrap, topic, PARTITIONS).start()
    t0 = time.monotonic()
    try:
        w.wait_for_acks(WARMUP_ACKS)
        fault(nem, topic)
        time.sleep(hold_s)
        print(f"before healing: {views(c, topic)}")
        if heal is not None:
            heal()
        nem.heal()
        print(f"recovered in {nem.wait_healthy({topic: PARTITIONS}):.1f} s")
        w.wait_for_acks(AFTER_ACKS)
    finally:
        if heal is not None:
            heal()
        nem.heal()
        w.stop()
    result = w.check(replica_logs(c, topic, PARTITIONS))
    print(f"{name} (seed {seed}, {time.monotonic() - t0:.0f} s): {result.summary()}")
    return result


def views(c: Cluster, topic: str) -> str:
    """Partition 0's leader and ISR as each live broker sees it."""
    seen = {}
    for i in c.live_ids():
        try:
            p = c.partition(topic, 0, via=i)
            seen[i] = (p.leader, p.isr) if p is not None else None
        except Exception as exc:  # a broker cut off may not answer in time
            seen[i] = type(exc).__name__
    return f"{topic}-0 (leader, isr) by broker: {seen}"


def test_leader_isolated_from_followers_and_zookeeper(cluster, net):
    r = run_schedule(cluster, net, "isolated-leader", 1601, lambda n, t: n.isolate_leader(t, 0), hold_s=10)
    assert r.ok, r.summary()


def test_leader_cut_from_zookeeper_only(cluster, net):
    r = run_schedule(cluster, net, "leader-zk", 1602, lambda n, t: n.cut_leader_from_zookeeper(t, 0), hold_s=10)
    assert r.ok, r.summary()


def test_follower_isolated_past_the_lag_time_then_healed(cluster, net):
    # the follower leads nothing of the topic and is not the controller: it is isolated as
    # a follower only (an isolated leader is the first schedule)
    controller = cluster.wait_for_controller(timeout=30)
    follower = next(i for i in cluster.ids if i != controller)
    leader = next(i for i in cluster.ids if i not in (controller, follower))

    def fault(n: Nemesis, topic: str) -> None:
        n.net.isolate(n.host(follower), n.others(follower))
        n._did(f"follower {follower} of {topic} isolated from the brokers")

        def shrunk():
            isr = cluster.isr_of(topic, 0, via=leader)
            return follower not in isr, isr, f"ISR {isr} at leader {leader}"

        isr = poll_until(f"follower {follower} out of the ISR", shrunk, timeout=20)
        print(f"ISR without follower {follower}: {isr}")

    r = run_schedule(
        cluster,
        net,
        "isolated-follower",
        1603,
        fault,
        hold_s=2,
        assignment=[[leader, controller, follower], [controller, leader, follower]],
    )
    assert r.ok, r.summary()


def test_controller_cut_from_zookeeper(cluster, net):
    r = run_schedule(cluster, net, "controller-zk", 1604, lambda n, t: n.cut_controller_from_zookeeper(), hold_s=10)
    assert r.ok, r.summary()


def test_leader_killed(cluster, net):
    r = run_schedule(cluster, net, "kill-leader", 1605, lambda n, t: n.kill_leader(t, 0), hold_s=3)
    assert r.ok, r.summary()


def test_leader_paused_past_its_session(cluster, net):
    r = run_schedule(cluster, net, "pause-leader", 1606, lambda n, t: n.pause_leader(t, 0), hold_s=10)
    assert r.ok, r.summary()


def test_isr_expansion_whose_zookeeper_answer_is_lost(cluster, net):
    """A follower rejoins while the controller is deaf to ZooKeeper: the ISR expansion is
    sent to ZooKeeper but its answer lost (the leader's AlterPartition times out; a retried
    write may meet a new znode version: issue 16 defects 2 and 3). The leader must not end
    up believing a smaller ISR than ZooKeeper's (Kafka's handleAlterPartitionError): when
    that follower then stalls, the leader shrinks it out, so that killing the two others
    leaves no electable replica rather than electing one without acknowledged records.
    (On the code of issue 16's filing this passed: the leader's retried expansion made its
    view agree again before the stall.)"""
    c = cluster

    def fault(n: Nemesis, topic: str) -> None:
        leader = n.leader(topic, 0)
        controller = c.wait_for_controller(timeout=30)
        follower = n.follower(topic, 0, not_controller=True)
        other = next(i for i in c.ids if i not in (leader, follower))
        n.net.isolate(n.host(follower), n.others(follower))
        poll_until(
            f"follower {follower} out of the ISR",
            lambda: (follower not in (isr := c.isr_of(topic, 0, via=leader)), isr, f"ISR {isr}"),
            timeout=20,
        )
        n.net.cut(c.zk_host, n.host(controller), both=False)
        for h in n.others(follower):
            n.net.heal(n.host(follower), h)
        print(f"follower {follower} back; controller {controller} deaf to ZooKeeper")
        time.sleep(5)
        n.net.heal()
        time.sleep(3)
        print(f"after the lost answer: {views(c, topic)}")
        c.pause(follower)
        n.paused.add(follower)
        time.sleep(6)
        print(f"follower {follower} stalled: {views(c, topic)}")
        c.kill(leader)
        c.kill(other)
        n.killed.update({leader, other})
        c.resume(follower)
        n.paused.discard(follower)
        print(f"leader {leader} and broker {other} killed, follower {follower} resumed")
        time.sleep(8)
        print(f"with {follower} alone: {views(c, topic)}")

    r = run_schedule(c, net, "lost-isr-answer", 1607, fault, hold_s=0)
    assert r.ok, r.summary()

"""Faults for a distinct-host Cluster (tests/support/cluster.py): network partitions by
iptables (tests/support/netfault.py), SIGSTOP, kill -9, a full disk (when the brokers'
data dirs are small tmpfs mounts, tests/support/small_fs.py); and healing all of them.

    nem = Nemesis(cluster, net, random.Random(seed))
    what = nem.isolate_leader("t", 0)      # a line saying what was done (to print)
    nem.heal()                             # rules removed, paused brokers resumed, killed ones
                                           # started again; then wait_healthy()
    nem.random_fault(["t"])                # one fault chosen by the seeded rng

A fault is applied on a healthy cluster's view (who leads, who controls), as a live broker
answers it; heal() undoes every fault applied since the last heal, in any order.
"""

from __future__ import annotations

import random
import time

from tests.support.cluster import Cluster
from tests.support.netfault import NetFaults
from tests.support.small_fs import SmallFs


class Nemesis:
    def __init__(
        self,
        cluster: Cluster,
        net: NetFaults,
        rng: random.Random | None = None,
        log=print,
        disks: dict[int, SmallFs] | None = None,
    ):
        if cluster.block is None:
            raise ValueError("the nemesis needs a Cluster(distinct_hosts=True)")
        self.c, self.net = cluster, net
        self.rng = rng or random.Random(0)
        self.log = log
        self.paused: set[int] = set()
        self.killed: set[int] = set()
        self.applied: list[str] = []
        #: each broker's data file system, when on a small tmpfs of its own (disk faults)
        self.disks = disks or {}
        self.filled: set[int] = set()

    # ------------------------------------------------------------------ who is who

    def host(self, broker_id: int) -> str:
        return self.c.host_of(broker_id)

    def others(self, broker_id: int) -> list[str]:
        return [self.host(i) for i in self.c.ids if i != broker_id]

    def leader(self, topic: str, partition: int) -> int:
        return self.c.wait_for_leader(topic, partition, timeout=30)

    def follower(self, topic: str, partition: int, not_controller: bool = False) -> int:
        """A follower of the partition (with not_controller, not the controller either,
        when there is such a follower)."""
        leader = self.leader(topic, partition)
        followers = [i for i in self.c.replicas_of(topic, partition) if i != leader]
        if not_controller:
            controller = self.c.wait_for_controller(timeout=30)
            followers = [i for i in followers if i != controller] or followers
        return self.rng.choice(followers)

    def _did(self, what: str) -> str:
        self.applied.append(what)
        self.log(f"nemesis: {what}")
        return what

    # ------------------------------------------------------------------ faults

    def isolate_leader(self, topic: str, partition: int) -> str:
        """The leader cut from the other brokers and ZooKeeper; clients still reach it."""
        leader = self.leader(topic, partition)
        self.net.isolate(self.host(leader), [*self.others(leader), self.c.zk_host])
        return self._did(f"leader {leader} of {topic}-{partition} isolated from brokers and ZooKeeper")

    def cut_leader_from_zookeeper(self, topic: str, partition: int) -> str:
        leader = self.leader(topic, partition)
        self.net.cut(self.host(leader), self.c.zk_host)
        return self._did(f"leader {leader} of {topic}-{partition} cut from ZooKeeper")

    def isolate_follower(self, topic: str, partition: int, not_controller: bool = False) -> int:
        """A follower cut from the other brokers (its ZooKeeper session lives on); its id.
        (The controller as that follower: the leader cannot reach it to shrink the ISR.)"""
        follower = self.follower(topic, partition, not_controller)
        self.net.isolate(self.host(follower), self.others(follower))
        self._did(f"follower {follower} of {topic}-{partition} isolated from the brokers")
        return follower

    def cut_controller_from_zookeeper(self) -> str:
        controller = self.c.wait_for_controller(timeout=30)
        self.net.cut(self.host(controller), self.c.zk_host)
        return self._did(f"controller {controller} cut from ZooKeeper")

    def deafen_controller(self) -> str:
        """ZooKeeper's answers to the controller dropped, its requests delivered: a write
        applied whose answer never comes (the connection is lost, the request retried)."""
        controller = self.c.wait_for_controller(timeout=30)
        self.net.cut(self.c.zk_host, self.host(controller), both=False)
        return self._did(f"controller {controller} deaf to ZooKeeper (its answers dropped)")

    def fill_disk(self, topic: str, partition: int, leader: bool = True) -> str:
        """The leader's (or a follower's) data file system filled up: ENOSPC."""
        broker = self.leader(topic, partition) if leader else self.follower(topic, partition)
        self.disks[broker].fill()
        self.filled.add(broker)
        return self._did(f"{'leader' if leader else 'follower'} {broker} of {topic}-{partition}: disk full")

    def fill_follower_disk(self, topic: str, partition: int) -> str:
        return self.fill_disk(topic, partition, leader=False)

    def kill_leader(self, topic: str, partition: int) -> str:
        leader = self.leader(topic, partition)
        self.c.kill(leader)
        self.killed.add(leader)
        return self._did(f"leader {leader} of {topic}-{partition} killed (-9)")

    def pause_leader(self, topic: str, partition: int) -> str:
        leader = self.leader(topic, partition)
        self.c.pause(leader)
        self.paused.add(leader)
        return self._did(f"leader {leader} of {topic}-{partition} paused (SIGSTOP)")

    def random_partition(self) -> str:
        """The brokers and ZooKeeper split into two random non-empty sides."""
        nodes = [self.c.zk_host, *(self.host(i) for i in self.c.ids)]
        self.rng.shuffle(nodes)
        k = self.rng.randint(1, len(nodes) - 1)
        a, b = nodes[:k], nodes[k:]
        self.net.partition(a, b)
        return self._did(f"partition {self._names(a)} | {self._names(b)}")

    def _names(self, hosts) -> str:
        names = {self.c.zk_host: "zk", **{self.host(i): str(i) for i in self.c.ids}}
        return "{" + ",".join(sorted(names[h] for h in hosts)) + "}"

    FAULTS = (
        "isolate_leader",
        "cut_leader_from_zookeeper",
        "isolate_follower",
        "cut_controller_from_zookeeper",
        "deafen_controller",
        "kill_leader",
        "pause_leader",
        "random_partition",
    )

    DISK_FAULTS = ("fill_disk", "fill_follower_disk")

    def random_fault(self, topics: list[str], partitions: int = 1) -> str:
        name = self.rng.choice(self.FAULTS + (self.DISK_FAULTS if self.disks else ()))
        fault = getattr(self, name)
        if name in ("cut_controller_from_zookeeper", "deafen_controller", "random_partition"):
            fault()
        else:
            fault(self.rng.choice(topics), self.rng.randrange(partitions))
        return self.applied[-1]

    # ------------------------------------------------------------------ healing

    def heal(self) -> str:
        """Every fault undone: rules removed, paused brokers resumed, killed ones started
        (which waits until their old sessions expired)."""
        self.net.heal()
        for i in sorted(self.filled):
            self.disks[i].free()
        for i in sorted(self.paused):
            self.c.resume(i)
        for i in sorted(self.killed):
            self.c.start(i)
        self.paused.clear()
        self.killed.clear()
        self.filled.clear()
        self.applied.clear()
        self.log("nemesis: healed")
        return "healed"

    def wait_healthy(self, topics: dict[str, int], timeout: float | None = None) -> float:
        """Every broker registered, and every partition of `topics` ({topic: partitions})
        led with its full ISR, as each broker sees it; the seconds it took."""
        t0 = time.monotonic()
        self.c.wait_for_brokers(self.c.ids, timeout=timeout)
        for topic, n in topics.items():
            for p in range(n):
                replicas = self.c.replicas_of(topic, p)
                self.c.wait_for_isr(topic, p, replicas, timeout=timeout, everywhere=True)
                self.c.wait_for_leader(topic, p, timeout=timeout, everywhere=True)
        return time.monotonic() - t0

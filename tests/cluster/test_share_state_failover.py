"""Share-partition state across a share coordinator's failover, on the 3-broker cluster:
the persister (broker/share/persister.py, run here in the test process, a broker of no
cluster: every call goes over the wire to the share coordinator it finds in the
cluster's metadata) writes share-partition state while the broker leading the
__share_group_state partition of the written keys is killed -9. The partition's new
leader loads what the ISR had; the persister finds it (NOT_COORDINATOR, a dead channel
-> the metadata again); every write that was acknowledged reads back from the new
coordinator.

Each write acknowledges a range of offsets of its own (state 2, acknowledged), so that
what an acknowledged write left is checkable whatever happened to the writes around
it. Bounded in time; the random seed (which keys, how many writes before the kill) is
printed (KBROKER_SHARE_FAILOVER_SEED=N runs it again)."""

from __future__ import annotations

import asyncio
import os
import random
import time
import uuid

import pytest

from broker.client import Cluster as Client
from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.config import BrokerConfig
from broker.protocol.errors import ErrorCode as E
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.share.coordinator import STATE_TOPIC, ShareCoordinator
from broker.share.persister import Persister
from broker.share.records import ACKNOWLEDGED, StateBatch, coordinator_key
from tests.support.cluster import NoLiveBroker

pytestmark = pytest.mark.timeout(300)

STATE_PARTITIONS = 5
CONFIG = {
    "share.coordinator.state.topic.num.partitions": STATE_PARTITIONS,
    "share.coordinator.state.topic.replication.factor": 3,
    "share.coordinator.state.topic.min.isr": 2,
}
GROUP = "sg"
RANGE = 10  # offsets per write
WRITE_S = 120  # the whole run's bound


class LiveView:
    """What the persister reads of the metadata cache, asked of a live broker each time."""

    def __init__(self, cluster):
        self.cluster = cluster

    def topic(self, name):
        try:
            _, resp = self.cluster.metadata([name], timeout=5)
        except NoLiveBroker:
            return None
        t = resp.topics[0]
        if t.error_code or not t.partitions:
            return None
        return TopicInfo(
            name,
            t.topic_id,
            {
                p.partition_index: PartitionState(p.partition_index, list(p.replica_nodes), p.leader_id)
                for p in t.partitions
            },
        )

    def brokers(self):
        try:
            _, resp = self.cluster.metadata([], timeout=5)
        except NoLiveBroker:
            return {}
        return {b.node_id: BrokerInfo(b.node_id, b.host, b.port) for b in resp.brokers}

    async def wait_for(self, predicate, timeout):
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                return False
            await asyncio.sleep(0.1)
        return True


class NotALeader:
    """The partition writer of a process that leads no partition."""

    def is_leader(self, tp):
        return False

    def leader_epoch(self, tp):
        return -1


def persister_for(cluster) -> Persister:
    view = LiveView(cluster)

    async def create(_partitions, _rf, _configs):
        # as a broker would: FindCoordinator of a share key makes a broker create the topic
        with Client(cluster.bootstrap, timeout=10) as c:
            c.any_connection().request(
                FindCoordinatorRequest(key_type=2, coordinator_keys=[f"{GROUP}:AAAAAAAAAAAAAAAAAAAAAQ:0"]), 6
            )

    def topic_partitions(_topic_id):
        return None

    coordinator = ShareCoordinator(BrokerConfig(CONFIG), NotALeader(), view, create, topic_partitions)
    return Persister(-1, coordinator, view)  # type: ignore[arg-type]


def covered(batches: list[StateBatch], first: int, last: int) -> bool:
    """Is every offset first..last in an acknowledged batch?"""
    need = first
    for b in batches:
        if b.first_offset <= need <= b.last_offset:
            if b.delivery_state != ACKNOWLEDGED:
                return False
            need = b.last_offset + 1
            if need > last:
                return True
    return False


def test_acknowledged_share_state_survives_its_coordinator_killed(make_cluster):
    seed = int(os.environ.get("KBROKER_SHARE_FAILOVER_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (KBROKER_SHARE_FAILOVER_SEED={seed} runs it again)")
    rnd = random.Random(seed)
    cluster = make_cluster(3, config=CONFIG)
    with Client(cluster.bootstrap) as c:
        c.create_topic("shared", 4, 3)
        topic_id = c.topic("shared", wait_s=20).topic_id
    keys = [(topic_id, p) for p in range(4)]
    before_kill = rnd.randrange(20, 40)

    async def run() -> tuple[dict, int, int]:
        persister = persister_for(cluster)
        acked: dict[tuple[uuid.UUID, int], list[int]] = {k: [] for k in keys}
        try:
            for tid, p in keys:
                assert await persister.initialize(GROUP, tid, p, 0, 0) == 0
            victim_key = rnd.choice(keys)
            state_partition = persister.coordinator.partition_for(coordinator_key(GROUP, *victim_key))
            victim = cluster.leader_of(STATE_TOPIC, state_partition)
            assert victim in (1, 2, 3)
            deadline = time.monotonic() + WRITE_S
            i = killed_at = 0
            # writes go on until 30 acknowledged after the kill (each retried by the
            # persister across the failover), within the bound
            while time.monotonic() < deadline:
                if i == before_kill:
                    cluster.kill(victim)
                    killed_at = sum(len(v) for v in acked.values())
                tid, p = victim_key if rnd.random() < 0.6 else rnd.choice(keys)
                code = await persister.write(
                    GROUP, tid, p, 0, 1, 0, [StateBatch(i * RANGE, i * RANGE + RANGE - 1, ACKNOWLEDGED, 1)]
                )
                # an error only when no coordinator answered within the persister's retries;
                # anything else (INVALID_REQUEST: the state's Initialize lost) is a defect
                assert code in (0, E.NOT_COORDINATOR, E.COORDINATOR_NOT_AVAILABLE, E.COORDINATOR_LOAD_IN_PROGRESS), (
                    f"write {i} to partition {p}: {E(code).name}"
                )
                if code == 0:
                    acked[(tid, p)].append(i)
                i += 1
                if i > before_kill and sum(len(v) for v in acked.values()) - killed_at >= 30:
                    break
            after_kill = sum(len(v) for v in acked.values()) - killed_at
            assert after_kill >= 30, f"only {after_kill} writes acknowledged after the kill within {WRITE_S} s"
            new = cluster.wait_for_leader(STATE_TOPIC, state_partition, not_in={victim})
            # every acknowledged write reads back from the new coordinator
            lost = []
            for tid, p in keys:
                state = await persister.read(GROUP, tid, p, 1)
                assert state.error == 0 and state.start_offset == 0, state
                lost += [
                    (p, n) for n in acked[(tid, p)] if not covered(state.batches, n * RANGE, n * RANGE + RANGE - 1)
                ]
            assert not lost, f"acknowledged writes lost (partition, write): {lost}"
            return acked, victim, new
        finally:
            await persister.close()

    acked, victim, new = asyncio.run(asyncio.wait_for(run(), WRITE_S + 90))
    assert new != victim and sum(len(v) for v in acked.values()) >= before_kill

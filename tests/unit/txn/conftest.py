"""What the transaction coordinator's unit tests run it on: a real log of
__transaction_state (one partition, this broker its leader), a cluster view, a marker
sender that records what it is asked, and producer ids. `env` gives (make, writer,
markers, clock, config); make() starts a coordinator that has loaded the partition."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.config import BrokerConfig
from broker.log import Log, TopicPartition
from broker.txn.coordinator import TXN_TOPIC, Marker, TransactionCoordinator
from tests.support.coordinator_log import LogWriter

TP = TopicPartition(TXN_TOPIC, 0)


class Cluster:
    def __init__(self):
        self.topics = {
            TXN_TOPIC: TopicInfo(TXN_TOPIC, uuid.uuid4(), {0: PartitionState(0, [1], 1)}),
            "out": TopicInfo("out", uuid.uuid4(), {0: PartitionState(0, [1], 1), 1: PartitionState(1, [2], 2)}),
        }

    def topic(self, name):
        return self.topics.get(name)

    def brokers(self):
        return {1: BrokerInfo(1, "127.0.0.1", 1), 2: BrokerInfo(2, "127.0.0.1", 2)}

    async def wait_for(self, predicate, timeout):
        return predicate()


class Markers:
    """The marker sender: answers `answer` for every partition, after `delay_s` (a
    partition whose marker write waits for a stuck follower)."""

    def __init__(self):
        self.sent: list[tuple[int, Marker]] = []
        self.answer = 0
        self.delay_s = 0.0

    async def send(self, broker_id, markers):
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        self.sent.extend((broker_id, m) for m in markers)
        return {(m.producer_id, t, p): self.answer for m in markers for t, p in m.partitions}

    async def verify(self, broker_id, txn_id, pid, epoch, partitions):
        return {}


class Ids:
    def __init__(self):
        self.next = 5000

    async def generate(self):
        self.next += 1
        return self.next


@pytest.fixture
def env(tmp_path):
    cfg = BrokerConfig(
        {"log.dir": str(tmp_path), "transaction.state.log.num.partitions": "1", "transaction.max.timeout.ms": "60000"}
    )
    lg = Log.load(str(tmp_path / "__transaction_state-0"), TP, cfg.log_config({"cleanup.policy": "compact"}))
    writer, cluster, markers = LogWriter(lg), Cluster(), Markers()
    clock = [1_000_000]

    def make():
        c = TransactionCoordinator(cfg, writer, cluster, Ids(), markers, _no_create, clock=lambda: clock[0])
        c.load_all()
        return c

    yield make, writer, markers, clock, cfg
    lg.close()


async def _no_create(*a):
    raise AssertionError("the topic exists")

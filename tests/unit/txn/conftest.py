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

TP = TopicPartition(TXN_TOPIC, 0)


class Write:
    def __init__(self, error=0, last=-1):
        self.error, self.error_message, self.last_offset = error, None, last

    async def wait(self):
        return self.error


class LogWriter:
    """__transaction_state's one partition on a real Log; `fail` makes appends fail."""

    def __init__(self, lg: Log):
        self.log = lg
        self.leader = True
        self.epoch = 3
        self.fail = 0

    def is_leader(self, tp):
        return self.leader

    def leader_epoch(self, tp):
        return self.epoch

    def append(self, tp, records, timeout_ms):
        if self.fail:
            return Write(self.fail)
        info = self.log.append_as_leader(records, self.epoch)
        self.log.update_high_watermark(self.log.log_end_offset)
        return Write(0, info.last_offset)

    def loadable_range(self, tp):
        return self.log.log_start_offset, self.log.log_end_offset

    def read(self, tp, offset, max_bytes, end):
        return self.log.read_bytes(offset, max_bytes, end)


class Cluster:
    def __init__(self):
        self.topics = {TXN_TOPIC: TopicInfo(TXN_TOPIC, uuid.uuid4(), {0: PartitionState(0, [1], 1)}),
                       "out": TopicInfo("out", uuid.uuid4(), {0: PartitionState(0, [1], 1),
                                                               1: PartitionState(1, [2], 2)})}

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
    cfg = BrokerConfig({"log.dir": str(tmp_path), "transaction.state.log.num.partitions": "1",
                        "transaction.max.timeout.ms": "60000"})
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

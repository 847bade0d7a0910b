"""The coordinator runtime (broker/coordinator/) on a real Log of a compacted internal
topic: placement, loading a partition into a shard (records, transactional records, their
markers, an unreadable record, a load in many chunks), becoming and ceasing to be
coordinator with the partition's leadership, writes, the topic's creation and the jobs."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.config import BrokerConfig
from broker.coordinator import CoordinatorRuntime, LoadSummary, partition_for
from broker.log import Log, TopicPartition
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.support.coordinator_log import LogWriter

TOPIC = "__test_state"
TP = TopicPartition(TOPIC, 0)


class Cluster:
    def __init__(self, partitions=1, brokers=1):
        self.topics = {}
        if partitions:
            self.topics[TOPIC] = TopicInfo(
                TOPIC, uuid.uuid4(), {p: PartitionState(p, [1], 1) for p in range(partitions)}
            )
        self.live = {b: BrokerInfo(b, "127.0.0.1", b) for b in range(1, brokers + 1)}

    def topic(self, name):
        return self.topics.get(name)

    def brokers(self):
        return self.live

    async def wait_for(self, predicate, timeout):
        return predicate()


class Shard:
    """A shard that records what it is told: key -> value (None: a tombstone), the
    records of open transactions per producer, and its lifecycle."""

    def __init__(self, partition, epoch, events):
        self.partition, self.epoch, self.events = partition, epoch, events
        self.state: dict[bytes, bytes | None] = {}
        self.pending: dict[int, dict[bytes, bytes | None]] = {}
        self.summary: LoadSummary | None = None

    def replay(self, offset, producer_id, producer_epoch, key, value):
        if key.startswith(b"bad"):
            raise ValueError("unreadable")
        if producer_id >= 0:
            self.pending.setdefault(producer_id, {})[key] = value
        else:
            self.state[key] = value

    def replay_marker(self, producer_id, producer_epoch, commit):
        done = self.pending.pop(producer_id, {})
        if commit:
            self.state.update(done)

    def on_loaded(self, summary):
        self.summary = summary
        self.events.append(("loaded", self.partition, self.epoch))

    def on_unloaded(self):
        self.events.append(("unloaded", self.partition, self.epoch))


@pytest.fixture
def env(tmp_path):
    cfg = BrokerConfig({"log.dir": str(tmp_path)})
    lg = Log.load(str(tmp_path / f"{TOPIC}-0"), TP, cfg.log_config({"cleanup.policy": "compact"}))
    writer, events = LogWriter(lg, client=False), []

    def make(cluster=None):
        return CoordinatorRuntime(TOPIC, 1, writer, cluster or Cluster(), lambda p, epoch: Shard(p, epoch, events))

    yield make, writer, events
    lg.close()


def test_placement_is_kafkas_and_follows_the_topics_partition_count():
    rt = CoordinatorRuntime(TOPIC, 50, None, Cluster(partitions=3), lambda p, e: None)
    assert rt.partition_for("hello") == partition_for("hello", 50) == 99162322 % 50
    assert rt.refresh_partitions() and rt.num_partitions == 3
    assert rt.partition_for("hello") == 99162322 % 3
    assert rt.coordinator_node("hello") == 1
    assert not CoordinatorRuntime(TOPIC, 50, None, Cluster(partitions=0), lambda p, e: None).refresh_partitions()


def test_a_loaded_partition_holds_what_was_written_and_committed(env):
    make, writer, events = env
    rt = make()
    writer.append(TP, bytearray(_batch([(b"a", b"1"), (b"b", b"1")])), 1000)
    writer.append(TP, bytearray(_batch([(b"a", b"2"), (b"b", None)])), 1000)
    rt.append(0, [(b"t", b"committed")], 0, 1000, producer=(7, 0))
    writer.marker(7, 0, commit=True)
    rt.append(0, [(b"u", b"aborted")], 0, 1000, producer=(8, 0))
    writer.marker(8, 0, commit=False)
    rt.append(0, [(b"v", b"open")], 0, 1000, producer=(9, 0))
    rt.load_all()
    shard = rt.shard(0)
    assert shard.state == {b"a": b"2", b"b": None, b"t": b"committed"}
    assert shard.pending == {9: {b"v": b"open"}}
    assert shard.summary.records == 7 and shard.summary.bytes > 0
    assert events == [("loaded", 0, 3)] and rt.epoch(0) == 3


def test_an_unreadable_record_is_skipped_and_the_rest_loaded(env, caplog):
    make, writer, _ = env
    writer.append(TP, bytearray(_batch([(b"a", b"1"), (b"bad", b"?"), (b"c", b"3")])), 1000)
    rt = make()
    rt.load_all()
    assert rt.shard(0).state == {b"a": b"1", b"c": b"3"}
    assert "skipping an unreadable record" in caplog.text


def test_a_partition_larger_than_a_chunk_loads_in_many_reads(env):
    make, writer, _ = env
    for i in range(50):
        writer.append(TP, bytearray(_batch([(b"k%d" % i, b"x" * 100)])), 1000)
    rt = make()
    rt.load_chunk = 300
    rt.load_all()
    assert len(rt.shard(0).state) == 50 and writer.reads > 10


def test_the_coordinator_follows_the_partitions_leadership(env):
    make, writer, events = env
    rt = make()
    writer.leader = False
    rt.load_all()
    assert rt.check("k") == ErrorCode.NOT_COORDINATOR and rt.shard(0) is None
    writer.leader = True
    assert rt.check("k") == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS  # led, the listener not told yet
    rt.leadership_changed([TP], [])
    assert rt.check("k") == 0 and events == [("loaded", 0, 3)]
    rt.leadership_changed([TopicPartition("other", 0)], [TopicPartition("other", 0)])
    rt.leadership_changed([TP], [])  # the same epoch: nothing to do
    assert events == [("loaded", 0, 3)]
    writer.leader = False
    rt.leadership_changed([], [TP])
    assert rt.check("k") == ErrorCode.NOT_COORDINATOR and rt.epoch(0) is None
    assert events[-1] == ("unloaded", 0, 3)
    rt.leadership_changed([], [TP])  # not loaded: not told twice
    writer.leader, writer.epoch = True, 5
    rt.leadership_changed([TP], [])
    assert rt.epoch(0) == 5 and events[-1] == ("loaded", 0, 5)


def test_a_load_of_an_older_epoch_is_replaced(env):
    make, writer, events = env
    rt = make()
    rt.load_all()
    writer.epoch = 4
    rt.leadership_changed([TP], [])
    assert events == [("loaded", 0, 3), ("unloaded", 0, 3), ("loaded", 0, 4)] and rt.epoch(0) == 4


def test_without_the_topic_the_coordinator_is_not_available(env):
    make, _, _ = env
    rt = make(Cluster(partitions=0))
    assert rt.check("k") == ErrorCode.COORDINATOR_NOT_AVAILABLE
    assert rt.coordinator_node("k") == -1


def test_ensure_topic_creates_it_with_the_replicas_there_are_and_loads_it(env):
    make, _, events = env
    cluster = Cluster(partitions=0, brokers=2)
    rt = make(cluster)
    created = []

    async def create(partitions, rf, configs):
        created.append((partitions, rf, configs))
        cluster.topics[TOPIC] = TopicInfo(TOPIC, uuid.uuid4(), {0: PartitionState(0, [1], 1)})

    asyncio.run(rt.ensure_topic(create, 1, 3, "test.replication.factor", lambda rf: {"min.insync.replicas": str(rf)}))
    assert created == [(1, 2, {"min.insync.replicas": "2"})]
    assert rt.check("k") == 0 and events == [("loaded", 0, 3)]
    asyncio.run(rt.ensure_topic(create, 1, 3, "test.replication.factor", lambda rf: {}))
    assert len(created) == 1  # there already


def test_ensure_topic_takes_a_topic_created_meanwhile(env):
    make, _, _ = env
    cluster = Cluster(partitions=0)
    rt = make(cluster)

    async def create(partitions, rf, configs):
        cluster.topics[TOPIC] = TopicInfo(TOPIC, uuid.uuid4(), {0: PartitionState(0, [1], 1)})
        raise KafkaProtocolError(ErrorCode.TOPIC_ALREADY_EXISTS)

    asyncio.run(rt.ensure_topic(create, 1, 1, "x", lambda rf: {}))
    assert rt.check("k") == 0


def test_a_job_runs_every_interval_past_its_failures_until_close(env):
    make, _, _ = env

    async def main():
        rt = make()
        runs = []

        def job():
            runs.append(1)
            if len(runs) == 2:
                raise RuntimeError("once")

        async def slow():
            await asyncio.sleep(3600)

        rt.every(5, job, "the test job")
        rt.spawn(slow())
        while len(runs) < 4:
            await asyncio.sleep(0.005)
        await rt.close()
        n = len(runs)
        await asyncio.sleep(0.05)
        assert len(runs) == n and rt.closed and not rt._tasks

    asyncio.run(asyncio.wait_for(main(), 10))


def _batch(records):
    from broker.native import BatchBuilder

    b = BatchBuilder()
    for k, v in records:
        b.append(0, k, v)
    return b.build()

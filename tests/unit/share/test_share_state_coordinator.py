"""The share coordinator (broker/share/) over a real log of __share_group_state (one
partition, this broker its leader): its records byte for byte in Kafka 4.4's layout,
how state batches combine, the five state operations with Kafka's answers (fencing by
state and leader epoch, uninitialized share-partitions, unknown topics), snapshots every
`share.coordinator.snapshot.update.records.per.snapshot` updates, and a new coordinator
replaying the log to the same state."""

from __future__ import annotations

import asyncio
import struct
import uuid

import pytest

from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.config import BrokerConfig
from broker.log import Log, TopicPartition
from broker.protocol.errors import ErrorCode as E
from broker.share import records as R
from broker.share.coordinator import READ_UNINITIALIZED, STATE_TOPIC, ShareCoordinator
from broker.share.records import ShareGroupOffset, StateBatch as B
from tests.support.coordinator_log import LogWriter

TP = TopicPartition(STATE_TOPIC, 0)
TOPIC_ID = uuid.UUID("12345678-1234-5678-1234-567812345678")
OTHER_ID = uuid.UUID(int=7)


class Cluster:
    def __init__(self):
        self.topics = {STATE_TOPIC: TopicInfo(STATE_TOPIC, uuid.uuid4(), {0: PartitionState(0, [1], 1)})}

    def topic(self, name):
        return self.topics.get(name)

    def brokers(self):
        return {1: BrokerInfo(1, "127.0.0.1", 1)}

    async def wait_for(self, predicate, timeout):
        return predicate()


@pytest.fixture
def env(tmp_path):
    cfg = BrokerConfig(
        {
            "log.dir": str(tmp_path),
            "share.coordinator.state.topic.num.partitions": 1,
            "share.coordinator.snapshot.update.records.per.snapshot": 2,
        }
    )
    lg = Log.load(str(tmp_path / f"{STATE_TOPIC}-0"), TP, cfg.log_config({"cleanup.policy": "delete"}))
    writer = LogWriter(lg, client=False)

    def make():
        c = ShareCoordinator(
            cfg,
            writer,
            Cluster(),
            _no_create,
            lambda tid: 3 if tid == TOPIC_ID else None,
            clock=lambda: 1000,
            delete_records=lambda tp, offset: lg.delete_records(offset),
        )
        c.runtime.load_all()
        return c

    yield make, writer, lg
    lg.close()


async def _no_create(*_a):
    raise AssertionError("the topic exists")


def run(coro):
    return asyncio.run(coro)


def _records(lg):
    from broker.native import iter_batches

    out = []
    for batch in iter_batches(lg.read_bytes(0, 1 << 20, lg.log_end_offset)):
        for rec in batch.records():
            out.append(R.decode(bytes(rec.key), None if rec.value is None else bytes(rec.value)))
    return out


# ---------------------------------------------------------------------- records


def test_the_records_are_kafkas_bytes():
    key = ("g", TOPIC_ID, 5)
    state = ShareGroupOffset(1, 2, 3, 100, 7, (B(100, 104, 2, 1),), 11, 12)
    k, v = R.snapshot_record(key, state)
    # key: record type 0, then ShareSnapshotKey v0 (not flexible): string, uuid, int32
    assert k == struct.pack(">hh", 0, 1) + b"g" + TOPIC_ID.bytes + struct.pack(">i", 5)
    # value: version 0, then ShareSnapshotValue v0 (flexible): the epochs, start offset,
    # the timestamps, a compact array of batches, then tag 0 (DeliveryCompleteCount)
    assert v == (
        struct.pack(">hiiiqqq", 0, 1, 2, 3, 100, 11, 12)
        + bytes([2])
        + struct.pack(">qqbh", 100, 104, 2, 1)
        + bytes([0])
        + bytes([1, 0, 4])
        + struct.pack(">i", 7)
    )
    assert R.decode(k, v)[0:2] == (R.SNAPSHOT, key)
    k2, v2 = R.update_record(key, 1, 3, 100, -1, [B(105, 105, 0, 2)])
    assert k2[:2] == struct.pack(">h", 1) and k2[2:] == k[2:]
    rtype, k2d, value = R.decode(k2, v2)
    assert (rtype, k2d) == (R.UPDATE, key)
    assert (value.snapshot_epoch, value.leader_epoch, value.start_offset, value.delivery_complete_count) == (
        1,
        3,
        100,
        -1,
    )
    assert R.batches_of(value) == [B(105, 105, 0, 2)]
    assert R.decode(*R.tombstone(key)) == (R.SNAPSHOT, key, None)


def test_unreadable_records_are_value_errors():
    for key, value in [(b"\x00", b""), (b"\x00\x09abc", None), (b"\x00\x00\x00\x05ab", None)]:
        with pytest.raises(ValueError):
            R.decode(key, value)
    k, _ = R.tombstone(("g", TOPIC_ID, 0))
    with pytest.raises(ValueError):
        R.decode(k, b"\x00\x01" + b"\x00" * 40)  # an unknown value version


def test_coordinator_keys_are_kafkas_and_parse_back():
    text = R.coordinator_key("my:group", TOPIC_ID, 3)
    assert text == "my:group:EjRWeBI0VngSNFZ4EjRWeA:3"
    assert R.parse_coordinator_key(text) == ("my:group", TOPIC_ID, 3)
    for bad in ("", "g", "g:EjRWeBI0VngSNFZ4EjRWeA", "g:notanid:1", "g:EjRWeBI0VngSNFZ4EjRWeA:-1", ":x:1"):
        with pytest.raises(ValueError):
            R.parse_coordinator_key(bad)


def test_batches_combine_by_delivery_count_then_state():
    # the higher delivery count wins where batches overlap, whichever came first
    assert R.combine([B(0, 9, 0, 2)], [B(5, 14, 0, 1)], -1) == [B(0, 9, 0, 2), B(10, 14, 0, 1)]
    # at equal counts the higher state: acknowledged (2) over available (0)
    assert R.combine([B(0, 9, 2, 1)], [B(0, 9, 0, 1)], -1) == [B(0, 9, 2, 1)]
    assert R.combine([B(0, 9, 0, 1)], [B(3, 4, 4, 1)], -1) == [B(0, 2, 0, 1), B(3, 4, 4, 1), B(5, 9, 0, 1)]
    # adjacent batches alike are joined; what is below the start offset goes, a straddler is cut
    assert R.combine([B(0, 4, 2, 1)], [B(5, 9, 2, 1), B(12, 12, 0, 1)], 3) == [B(3, 9, 2, 1), B(12, 12, 0, 1)]
    assert R.combine([B(0, 4, 2, 1)], [], 5) == []


# ---------------------------------------------------------------------- the operations


def test_state_is_initialized_written_read_and_replayed_by_a_new_coordinator(env):
    make, writer, lg = env

    async def go():
        c = make()
        # never initialized: Kafka's INVALID_REQUEST for a read and a write
        s = await c.read("g", TOPIC_ID, 0, 1)
        assert (s.error, s.error_message) == (E.INVALID_REQUEST, READ_UNINITIALIZED)
        assert (await c.write("g", TOPIC_ID, 0, 0, 1, 0, []))[0] == E.INVALID_REQUEST
        assert c.read_summary("g", TOPIC_ID, 0).start_offset == -1
        assert await c.initialize("g", TOPIC_ID, 0, 0, 10) == (0, None)
        s = await c.read("g", TOPIC_ID, 0, 1)
        assert (s.error, s.start_offset, s.state_epoch, s.batches) == (0, 10, 0, [])
        writes = [
            (10, [B(10, 14, 0, 1)]),
            (10, [B(10, 12, 2, 1)]),  # 2 updates since the snapshot (the read's, one write): a snapshot
            (13, [B(13, 13, 4, 2)]),
            (15, [B(15, 19, 2, 1)]),
        ]
        for start, batches in writes:
            assert await c.write("g", TOPIC_ID, 0, 0, 1, start, batches, 1) == (0, None)
        s = await c.read("g", TOPIC_ID, 0, 1)
        assert s.start_offset == 15 and s.batches == [B(15, 19, 2, 1)]
        # a start offset that goes back is ignored; batches below it as well
        assert (await c.write("g", TOPIC_ID, 0, 0, 1, 12, [B(12, 16, 0, 3)]))[0] == 0
        s = await c.read("g", TOPIC_ID, 0, 1)
        assert s.start_offset == 15 and s.batches == [B(15, 16, 0, 3), B(17, 19, 2, 1)]
        kinds = [(t, v is None) for t, _k, v in _records(lg)]
        # Initialize's snapshot, the read's leader epoch update, a write's update, a
        # snapshot, 2 updates, a snapshot (every 2 updates: per.snapshot is 2 here)
        assert [t for t, _ in kinds] == [R.SNAPSHOT, R.UPDATE, R.UPDATE, R.SNAPSHOT, R.UPDATE, R.UPDATE, R.SNAPSHOT]
        before = c.runtime.shard(0).states[("g", TOPIC_ID, 0)]
        await c.shutdown()
        again = make()
        assert again.runtime.shard(0).states[("g", TOPIC_ID, 0)] == before
        summary = again.read_summary("g", TOPIC_ID, 0)
        assert (summary.start_offset, summary.leader_epoch, summary.state_epoch) == (15, 1, 0)
        await again.shutdown()

    run(go())


def test_epochs_fence_as_kafka_does(env):
    make, _writer, _lg = env

    async def go():
        c = make()
        assert (await c.initialize("g", TOPIC_ID, 1, 3, 0))[0] == 0
        assert (await c.initialize("g", TOPIC_ID, 1, 2, 0))[0] == E.FENCED_STATE_EPOCH
        assert (await c.read("g", TOPIC_ID, 1, 5)).error == 0  # leader epoch 5 recorded
        assert (await c.read("g", TOPIC_ID, 1, 4)).error == E.FENCED_LEADER_EPOCH
        assert (await c.write("g", TOPIC_ID, 1, 3, 4, 0, []))[0] == E.FENCED_LEADER_EPOCH
        assert (await c.write("g", TOPIC_ID, 1, 2, 5, 0, []))[0] == E.FENCED_STATE_EPOCH
        assert (await c.write("g", TOPIC_ID, 1, 3, 5, 0, [B(0, 0, 2, 1)]))[0] == 0
        # a new state epoch (an offset reset) starts over
        assert (await c.initialize("g", TOPIC_ID, 1, 4, 50))[0] == 0
        s = await c.read("g", TOPIC_ID, 1, 5)
        assert (s.state_epoch, s.start_offset, s.batches) == (4, 50, [])
        assert (await c.write("g", TOPIC_ID, 1, 3, 5, 0, []))[0] == E.FENCED_STATE_EPOCH
        await c.shutdown()

    run(go())


def test_bad_input_and_deletion(env):
    make, writer, _lg = env

    async def go():
        c = make()
        assert (await c.initialize("g", uuid.UUID(int=0), 0, 0, 0))[0] == E.INVALID_REQUEST
        assert (await c.initialize("g", TOPIC_ID, -1, 0, 0))[0] == E.INVALID_REQUEST
        assert (await c.initialize("g", TOPIC_ID, 0, -1, 0))[0] == E.INVALID_REQUEST
        assert (await c.read("g", TOPIC_ID, 0, -1)).error == E.INVALID_REQUEST
        assert (await c.initialize("g", OTHER_ID, 0, 0, 0))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
        assert (await c.initialize("g", TOPIC_ID, 3, 0, 0))[0] == E.UNKNOWN_TOPIC_OR_PARTITION
        assert (await c.delete("g", TOPIC_ID, 0)) == (0, None)  # nothing there: nothing to do
        assert (await c.initialize("g", TOPIC_ID, 0, 0, 5))[0] == 0
        assert (await c.delete("g", TOPIC_ID, 0)) == (0, None)
        assert (await c.read("g", TOPIC_ID, 0, 0)).error_message == READ_UNINITIALIZED
        # an append that fails is answered as the other coordinators answer it
        writer.fail = E.NOT_ENOUGH_REPLICAS
        assert (await c.initialize("g", TOPIC_ID, 0, 0, 5))[0] == E.COORDINATOR_NOT_AVAILABLE
        writer.fail = 0
        # no longer the leader: NOT_COORDINATOR
        writer.leader = False
        assert (await c.initialize("g", TOPIC_ID, 0, 0, 5))[0] == E.NOT_COORDINATOR
        assert c.read_summary("g", TOPIC_ID, 0).error == E.NOT_COORDINATOR
        await c.shutdown()
        writer.leader = True
        again = make()
        assert again.read_summary("g", TOPIC_ID, 0).start_offset == -1  # the tombstone replayed
        await again.shutdown()

    run(go())


def test_writes_to_one_share_partition_are_applied_in_order(env):
    make, _writer, _lg = env

    async def go():
        c = make()
        assert (await c.initialize("g", TOPIC_ID, 2, 0, 0))[0] == 0
        answers = await asyncio.gather(*(c.write("g", TOPIC_ID, 2, 0, 0, i, [B(i, i, 2, 1)]) for i in range(0, 20)))
        assert all(a == (0, None) for a in answers)
        s = await c.read("g", TOPIC_ID, 2, 0)
        assert s.start_offset == 19 and s.batches == [B(19, 19, 2, 1)]
        await c.shutdown()

    run(go())


# ---------------------------------------------------------------------- the persister, in process


def test_the_persister_serves_this_brokers_share_partitions_in_process(env):
    from broker.share.persister import Persister

    make, _writer, _lg = env

    async def go():
        c = make()
        persister = Persister(1, c, Cluster())  # broker 1 leads __share_group_state-0
        s = await persister.read("g", TOPIC_ID, 0, 0)
        assert (s.error, s.start_offset) == (0, -1)  # never initialized: start offset -1, no error
        assert await persister.initialize("g", TOPIC_ID, 0, 0, 7) == 0
        assert await persister.write("g", TOPIC_ID, 0, 0, 0, 7, [B(7, 9, 2, 1)], 3) == 0
        s = await persister.read("g", TOPIC_ID, 0, 0)
        assert (s.error, s.start_offset, s.batches) == (0, 7, [B(7, 9, 2, 1)])
        assert await persister.write("g", TOPIC_ID, 0, 0, 0, 7, [], 3) == 0
        summary = await persister.read_summary("g", [(TOPIC_ID, 0), (TOPIC_ID, 1)])
        assert summary[(TOPIC_ID, 0)].start_offset == 7 and summary[(TOPIC_ID, 0)].delivery_complete_count == 3
        assert summary[(TOPIC_ID, 1)].start_offset == -1
        assert await persister.delete("g", [(TOPIC_ID, 0), (OTHER_ID, 0)]) == {
            (TOPIC_ID, 0): 0,
            (OTHER_ID, 0): E.UNKNOWN_TOPIC_OR_PARTITION,
        }
        assert (await persister.read("g", TOPIC_ID, 0, 0)).start_offset == -1
        assert await persister.write("", TOPIC_ID, 0, 0, 0, 0, []) == E.INVALID_REQUEST
        assert (await persister.read("g", TOPIC_ID, 0, 0)).error == 0
        # no coordinator within the bound: the last error, not a hang
        persister.retry_s = 0.2
        _writer.leader = False
        assert await persister.initialize("g", TOPIC_ID, 0, 0, 7) == E.NOT_COORDINATOR
        await persister.close()
        await c.shutdown()

    run(go())


def test_pruning_keeps_what_a_load_needs(env):
    """The partition's start moves to the lowest of the share-partitions' last snapshots;
    a new coordinator loading what is left has the same state."""
    make, _writer, lg = env

    async def go():
        c = make()
        assert c.prune() == 0  # nothing written yet
        assert (await c.initialize("g", TOPIC_ID, 0, 0, 0))[0] == 0
        assert (await c.initialize("g", TOPIC_ID, 1, 0, 0))[0] == 0
        for i in range(7):  # snapshots at the 3rd and 6th write (per.snapshot is 2)
            assert (await c.write("g", TOPIC_ID, 0, 0, 0, 0, [B(i, i, 2, 1)]))[0] == 0
        shard = c.runtime.shard(0)
        # share-partition 1's only snapshot is its Initialize at offset 1: nothing moves below it
        assert shard.redundant_offset() == 1 and c.prune() == 1 and lg.log_start_offset == 1
        assert (await c.write("g", TOPIC_ID, 1, 0, 0, 0, [B(0, 0, 4, 1)]))[0] == 0
        assert (await c.write("g", TOPIC_ID, 1, 0, 0, 0, [B(1, 1, 4, 1)]))[0] == 0
        assert (await c.write("g", TOPIC_ID, 1, 0, 0, 0, [B(2, 2, 4, 1)]))[0] == 0  # its snapshot
        snap0 = shard.snapshot_offsets[("g", TOPIC_ID, 0)]
        assert shard.redundant_offset() == snap0 and c.prune() == 1 and lg.log_start_offset == snap0
        before = dict(shard.states)
        await c.shutdown()
        again = make()
        assert again.runtime.shard(0).states == before
        # every share-partition deleted: the whole partition is redundant
        for p in (0, 1):
            assert (await again.delete("g", TOPIC_ID, p))[0] == 0
        assert again.prune() == 1 and lg.log_start_offset == lg.log_end_offset
        await again.shutdown()
        assert make().runtime.shard(0).states == {}

    run(go())

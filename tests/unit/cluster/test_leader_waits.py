"""What waits for the ISR on a leader — an acks=all produce and a group commit, both through
ReplicaManager.append_records (cluster/replica/delayed_produce.py) — on a real
ReplicaManager, Partition and Log, while the leadership moves under it (issue 16, defects 6
and 8). The group commits go through the group coordinator's own error mapping
(GroupMetadataManager over server/partition_writer.py)."""
import asyncio

from broker.cluster.metadata import PartitionState
from broker.cluster.replica.manager import AppendOrigin, ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.config import BrokerConfig
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from broker.log import TopicPartition
from broker.log.log import Log
from broker.protocol.errors import ErrorCode
from broker.server.partition_writer import ReplicaPartitionWriter
from tests.unit.log._support import TP, batch, log_config

OFFSETS_TP = TopicPartition(OFFSETS_TOPIC, 0)


class Metadata:
    """The part of the MetadataCache the ReplicaManager's lookups use."""

    def partition_state(self, topic, partition):
        return None


def state(leader, epoch, isr, partition_epoch):
    return PartitionState(0, [1, 2, 3], leader, epoch, list(isr), 1, partition_epoch)


def setup(tmp_path, min_isr=2, tp=TP):
    """Broker 1 leads `tp` at epoch 5 with ISR [1, 2, 3]."""
    replicas = ReplicaManager(1, None, Metadata())
    lg = Log.load(str(tmp_path / str(tp)), tp, log_config(tmp_path, {"min.insync.replicas": min_isr}))
    part = replicas.partitions[tp] = Partition(tp, lg, state(1, 5, (1, 2, 3), 7), 1, replicas.purgatory,
                                               lambda p, isr: None)
    return part, replicas


def waiting_produce(replicas, n=3, timeout_ms=5000):
    result = replicas.append_records([(TP, batch(n))], -1, timeout_ms, AppendOrigin.CLIENT)
    assert result.pending
    return result.partitions[0], asyncio.ensure_future(result.wait())


def group_commit(replicas):
    """A group's offset commit through the metadata manager: (task answering its code)."""
    config = BrokerConfig({"offsets.topic.num.partitions": 1, "request.timeout.ms": 5000})
    manager = GroupMetadataManager(config, ReplicaPartitionWriter(replicas), None, None)
    err, write = manager.append("g", [(b"k", b"v"), (b"k2", b"v")], True)
    assert err == 0 and write.last_offset == 1
    return asyncio.ensure_future(manager.await_durable(write, True))


def test_an_acks_all_produce_keeps_waiting_across_a_new_leader_epoch(tmp_path):
    # the controller bumps the leader epoch on every ISR shrink (decisions.py): the batch is
    # still on this leader and commits once the remaining ISR has it
    async def main():
        part, replicas = setup(tmp_path)
        r, task = waiting_produce(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(1, 6, (1, 2), 8))             # 3 dropped: a new epoch, same leader
        await asyncio.sleep(0.01)
        assert not task.done()
        part.update_follower(2, 3)
        await asyncio.wait_for(task, 2)
        assert (r.error, r.base_offset, r.last_offset) == (0, 0, 2)
    asyncio.run(main())


def test_an_acks_all_produce_fails_when_this_broker_stops_leading(tmp_path):
    async def main():
        part, replicas = setup(tmp_path)
        r, task = waiting_produce(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2, 3), 8))
        await asyncio.wait_for(task, 2)
        assert r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert "stopped leading" in r.error_message
    asyncio.run(main())


def test_an_acks_all_produce_fails_when_its_batch_was_truncated_while_leading_again(tmp_path):
    # A -> B -> A before the waiter runs again: the log was cut below the batch as a
    # follower and other records now hold its offsets; the high watermark passing the
    # batch's end must not acknowledge it (Kafka's checkEnoughReplicasReachOffset would)
    async def main():
        part, replicas = setup(tmp_path)
        r, task = waiting_produce(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2), 8))             # following 2
        part.truncate_to(0)
        part.update_state(state(1, 7, (1, 2), 9))             # leading again
        part.append_as_leader(batch(5), -1)
        part.update_follower(2, 5)
        assert part.log.high_watermark == 5
        await asyncio.wait_for(task, 2)
        assert r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert "truncated" in r.error_message
    asyncio.run(main())


def test_an_acks_all_produce_fails_when_the_isr_shrank_below_min_insync_replicas_meanwhile(tmp_path):
    async def main():
        part, replicas = setup(tmp_path)
        r, task = waiting_produce(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(1, 6, (1,), 8))               # 2 and 3 dropped: the leader alone
        assert part.log.high_watermark == 3
        await asyncio.wait_for(task, 2)
        assert r.error == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
    asyncio.run(main())


def test_a_group_commit_fails_when_the_isr_shrank_below_min_insync_replicas_meanwhile(tmp_path):
    # as an acks=all produce answers NOT_ENOUGH_REPLICAS_AFTER_APPEND, which Kafka's
    # GroupMetadataManager turns into COORDINATOR_NOT_AVAILABLE
    async def main():
        part, replicas = setup(tmp_path, tp=OFFSETS_TP)
        task = group_commit(replicas)
        await asyncio.sleep(0.01)
        assert not task.done()
        part.update_state(state(1, 6, (1,), 8))               # 2 and 3 dropped: the leader alone
        assert part.log.high_watermark == 2
        assert await asyncio.wait_for(task, 2) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    asyncio.run(main())


def test_a_group_commit_keeps_waiting_across_a_new_leader_epoch(tmp_path):
    async def main():
        part, replicas = setup(tmp_path, tp=OFFSETS_TP)
        task = group_commit(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(1, 6, (1, 2), 8))
        await asyncio.sleep(0.01)
        assert not task.done()
        part.update_follower(2, 2)
        assert await asyncio.wait_for(task, 2) == 0
    asyncio.run(main())


def test_a_group_commit_fails_when_this_broker_stops_leading(tmp_path):
    async def main():
        part, replicas = setup(tmp_path, tp=OFFSETS_TP)
        task = group_commit(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2, 3), 8))
        assert await asyncio.wait_for(task, 2) == ErrorCode.NOT_COORDINATOR
    asyncio.run(main())


def test_a_group_commit_fails_when_its_records_were_truncated_while_leading_again(tmp_path):
    async def main():
        part, replicas = setup(tmp_path, tp=OFFSETS_TP)
        task = group_commit(replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2), 8))
        part.truncate_to(0)
        part.update_state(state(1, 7, (1, 2), 9))
        part.append_as_leader(batch(4), -1)
        part.update_follower(2, 4)
        assert await asyncio.wait_for(task, 2) == ErrorCode.NOT_COORDINATOR
    asyncio.run(main())


def test_a_group_commit_times_out(tmp_path):
    async def main():
        _, replicas = setup(tmp_path, tp=OFFSETS_TP)
        config = BrokerConfig({"offsets.topic.num.partitions": 1, "request.timeout.ms": 50})
        manager = GroupMetadataManager(config, ReplicaPartitionWriter(replicas), None, None)
        _, write = manager.append("g", [(b"k", b"v")], True)
        assert await asyncio.wait_for(manager.await_durable(write, True), 2) == ErrorCode.REQUEST_TIMED_OUT
        _, write = manager.append("g", [(b"k", b"v")], False)        # group metadata
        assert await asyncio.wait_for(manager.await_durable(write, False), 2) == ErrorCode.REBALANCE_IN_PROGRESS
    asyncio.run(main())

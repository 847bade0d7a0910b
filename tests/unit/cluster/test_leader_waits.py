"""What waits for the ISR on a leader — an acks=all produce (handlers/produce.py) and a group
commit (server/partition_writer.py) — on a real Partition, Log and Purgatory, while the
leadership moves under it (issue 16, defects 6 and 8)."""
import asyncio

from broker.cluster.metadata import PartitionState
from broker.cluster.replica.partition import Partition
from broker.cluster.replica.purgatory import Purgatory
from broker.log.log import Log
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.produce import ProduceResponse
from broker.server.handlers.produce import _await_replication
from broker.server.partition_writer import ReplicaPartitionWriter
from tests.unit.log._support import TP, batch, log_config


class Replicas:
    """The part of the ReplicaManager the waiters use."""

    def __init__(self, part, purgatory):
        self.partitions = {part.tp: part}
        self.purgatory = purgatory

    def get(self, tp):
        return self.partitions.get(tp)

    def is_leader(self, tp):
        return tp in self.partitions and self.partitions[tp].is_leader


def state(leader, epoch, isr, partition_epoch):
    return PartitionState(0, [1, 2, 3], leader, epoch, list(isr), 1, partition_epoch)


def setup(tmp_path, min_isr=2):
    lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path, {"min.insync.replicas": min_isr}))
    purgatory = Purgatory()
    part = Partition(TP, lg, state(1, 5, (1, 2, 3), 7), 1, purgatory, lambda p, isr: None)
    return part, purgatory, Replicas(part, purgatory)


def waiting_produce(part, purgatory, replicas, n=3, timeout_ms=5000):
    info = part.append_as_leader(batch(n), -1)
    r = ProduceResponse.PartitionProduceResponse(index=0, error_code=0, base_offset=info.base_offset)
    task = asyncio.ensure_future(_await_replication(purgatory, replicas,
                                                    [(r, part, info.last_offset + 1, part.leader_epoch)], timeout_ms))
    return r, task


def test_an_acks_all_produce_keeps_waiting_across_a_new_leader_epoch(tmp_path):
    # the controller bumps the leader epoch on every ISR shrink (decisions.py): the batch is
    # still on this leader and commits once the remaining ISR has it
    async def main():
        part, purgatory, replicas = setup(tmp_path)
        r, task = waiting_produce(part, purgatory, replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(1, 6, (1, 2), 8))             # 3 dropped: a new epoch, same leader
        await asyncio.sleep(0.01)
        assert not task.done()
        part.update_follower(2, 3)
        await asyncio.wait_for(task, 2)
        assert r.error_code == 0
    asyncio.run(main())


def test_an_acks_all_produce_fails_when_this_broker_stops_leading(tmp_path):
    async def main():
        part, purgatory, replicas = setup(tmp_path)
        r, task = waiting_produce(part, purgatory, replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2, 3), 8))
        await asyncio.wait_for(task, 2)
        assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(main())


def test_an_acks_all_produce_fails_when_its_batch_was_truncated_while_leading_again(tmp_path):
    # A -> B -> A before the waiter runs again: the log was cut below the batch as a
    # follower and other records now hold its offsets; the high watermark passing the
    # batch's end must not acknowledge it (Kafka's checkEnoughReplicasReachOffset would)
    async def main():
        part, purgatory, replicas = setup(tmp_path)
        r, task = waiting_produce(part, purgatory, replicas)
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2), 8))             # following 2
        part.truncate_to(0)
        part.update_state(state(1, 7, (1, 2), 9))             # leading again
        part.append_as_leader(batch(5), -1)
        part.update_follower(2, 5)
        assert part.log.high_watermark == 5
        await asyncio.wait_for(task, 2)
        assert r.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    asyncio.run(main())


def test_a_group_commit_fails_when_the_isr_shrank_below_min_insync_replicas_meanwhile(tmp_path):
    # as an acks=all produce answers NOT_ENOUGH_REPLICAS_AFTER_APPEND, which Kafka's
    # GroupMetadataManager turns into COORDINATOR_NOT_AVAILABLE
    async def main():
        part, purgatory, replicas = setup(tmp_path)
        writer = ReplicaPartitionWriter(replicas)
        last = writer.append(TP, batch(2))
        task = asyncio.ensure_future(writer.wait_committed(TP, last, 5))
        await asyncio.sleep(0.01)
        part.update_state(state(1, 6, (1,), 8))               # 2 and 3 dropped: the leader alone
        assert part.log.high_watermark == 2
        assert await asyncio.wait_for(task, 2) == ErrorCode.COORDINATOR_NOT_AVAILABLE
    asyncio.run(main())


def test_a_group_commit_keeps_waiting_across_a_new_leader_epoch(tmp_path):
    async def main():
        part, purgatory, replicas = setup(tmp_path)
        writer = ReplicaPartitionWriter(replicas)
        last = writer.append(TP, batch(2))
        task = asyncio.ensure_future(writer.wait_committed(TP, last, 5))
        await asyncio.sleep(0.01)
        part.update_state(state(1, 6, (1, 2), 8))
        await asyncio.sleep(0.01)
        assert not task.done()
        part.update_follower(2, 2)
        assert await asyncio.wait_for(task, 2) == 0
    asyncio.run(main())


def test_a_group_commit_fails_when_its_records_were_truncated_while_leading_again(tmp_path):
    async def main():
        part, purgatory, replicas = setup(tmp_path)
        writer = ReplicaPartitionWriter(replicas)
        last = writer.append(TP, batch(2))
        task = asyncio.ensure_future(writer.wait_committed(TP, last, 5))
        await asyncio.sleep(0.01)
        part.update_state(state(2, 6, (1, 2), 8))
        part.truncate_to(0)
        part.update_state(state(1, 7, (1, 2), 9))
        part.append_as_leader(batch(4), -1)
        part.update_follower(2, 4)
        assert await asyncio.wait_for(task, 2) == ErrorCode.NOT_COORDINATOR
    asyncio.run(main())

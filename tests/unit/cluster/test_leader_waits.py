"""What waits for the ISR on a leader — an acks=all produce and a group commit, both through
ReplicaManager.append_records (cluster/replica/delayed_produce.py) — on a real
ReplicaManager, Partition and Log, while the leadership moves under it (issue 16, defects 6
and 8). The group commits go through the group coordinator's own error mapping
(GroupMetadataManager over server/partition_writer.py)."""

import asyncio
import uuid

import pytest

from broker.cluster.metadata import PartitionState
from broker.cluster.replica.manager import AppendOrigin, ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.config import BrokerConfig
from broker.group.metadata_manager import OFFSETS_TOPIC, GroupMetadataManager
from broker.log import TopicPartition
from broker.log.log import Log
from broker.protocol.errors import ErrorCode, KafkaProtocolError
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
    part = replicas.partitions[tp] = Partition(
        tp, lg, state(1, 5, (1, 2, 3), 7), 1, replicas.purgatory, lambda p, isr: None
    )
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
        part.update_state(state(1, 6, (1, 2), 8))  # 3 dropped: a new epoch, same leader
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
        part.update_state(state(2, 6, (1, 2), 8))  # following 2
        part.truncate_to(0)
        part.update_state(state(1, 7, (1, 2), 9))  # leading again
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
        part.update_state(state(1, 6, (1,), 8))  # 2 and 3 dropped: the leader alone
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
        part.update_state(state(1, 6, (1,), 8))  # 2 and 3 dropped: the leader alone
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
        _, write = manager.append("g", [(b"k", b"v")], False)  # group metadata
        assert await asyncio.wait_for(manager.await_durable(write, False), 2) == ErrorCode.REBALANCE_IN_PROGRESS

    asyncio.run(main())


# ---------------------------------------------------------------- a session expiry (resign_leadership)


def resigned(tmp_path):
    """Broker 1 (broker epoch 40) leads at epoch 5 with an acks=all produce waiting when its
    ZooKeeper session expires."""
    part, replicas = setup(tmp_path)
    replicas.broker_epoch = 40
    r, task = waiting_produce(replicas)
    assert replicas.resign_leadership("the ZooKeeper session expired") == [TP]
    return part, replicas, r, task


def leader_and_isr(replicas, leader, epoch, partition_epoch, broker_epoch):
    return replicas.become_leader_or_follower(
        [(TP.topic, uuid.uuid4(), state(leader, epoch, (1, 2, 3), partition_epoch))], {}, None, broker_epoch
    )


def test_an_expired_session_ends_leadership_and_what_waits_on_it(tmp_path):
    # a paused leader resuming must not answer from a log the new leader has outgrown: the
    # waiting produce fails, appends and leader reads are refused, no ISR change is pending
    async def main():
        part, replicas, r, task = resigned(tmp_path)
        await asyncio.wait_for(task, 2)
        assert r.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert not part.is_leader and part.leader_epoch == 5 and part.pending_isr is None
        for epoch in (-1, 5):
            with pytest.raises(KafkaProtocolError) as exc:
                replicas.leader_partition(TP.topic, TP.partition, epoch)
            assert exc.value.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
        assert replicas.resign_leadership("again") == []  # nothing left to resign

    asyncio.run(main())


def test_a_resigned_partition_is_led_again_only_by_a_controller_that_saw_the_new_registration(tmp_path):
    async def main():
        part, replicas, _r, task = resigned(tmp_path)
        await asyncio.wait_for(task, 2)
        # the same leadership, from a controller still holding the old registration: not taken
        assert leader_and_isr(replicas, 1, 5, 7, 40) == {TP: 0}
        assert not part.is_leader
        assert leader_and_isr(replicas, 1, 5, 8, -1) == {TP: 0}  # (no broker epoch carried)
        assert not part.is_leader
        # the broker registered again (epoch 41); the controller's full LeaderAndIsr to it
        assert leader_and_isr(replicas, 1, 5, 7, 41) == {TP: 0}
        assert part.is_leader and part.leader_epoch == 5 and TP not in replicas.resigned
        part.append_as_leader(batch(2), 1)  # it leads: appends go in

    asyncio.run(main())


@pytest.mark.parametrize("leader,epoch", [(1, 6), (2, 5), (2, 6)])
def test_a_newer_epoch_or_another_leader_applies_to_a_resigned_partition_at_once(tmp_path, leader, epoch):
    # a newer epoch was written to ZooKeeper after the expiry; another leader is followed
    async def main():
        part, replicas, _r, task = resigned(tmp_path)
        await asyncio.wait_for(task, 2)
        assert leader_and_isr(replicas, leader, epoch, 9, 40) == {TP: 0}
        assert part.is_leader == (leader == 1) and part.leader_epoch == epoch and part.state.leader == leader
        assert TP not in replicas.resigned

    asyncio.run(main())

"""The controller's partition reassignments (broker/cluster/controller/reassignments.py)
over the in-memory store of test_controller.py, its requests to brokers captured: what
the topic node and the partition states hold at each step, who hears what, cancel, a
replaced reassignment, and a new controller resuming a reassignment it finds."""

import asyncio
import uuid

from broker.cluster.controller.controller import Controller
from broker.cluster.controller.reassignment_decisions import ReplicaAssignment
from broker.cluster.store.znodes import TopicAssignment
from broker.config import BrokerConfig
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest
from tests.unit.cluster.test_controller import Channels, ClusterStore, reg, settle, states

TP = TopicPartition("t", 0)
E = ErrorCode


async def start(tmp_path, brokers=(1, 2, 3, 4), store=None):
    if store is None:
        store = ClusterStore(str(tmp_path))
        for b in brokers:
            await store.register_broker(reg(b))
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "auto.leader.rebalance.enable": False})
    c = Controller(1, cfg, store, local=None)
    c.channels = Channels()
    await c.startup()
    await settle(c)
    return c, store


def told(c, kind):
    """{broker: [(topic, partition, fields...)]} of the captured requests of `kind`."""
    out = {}
    for b, r in c.channels.take(kind):
        for t in r.topic_states:
            for p in t.partition_states:
                out.setdefault(b, []).append((t.topic_name, p))
    return out


async def isr_to(c, store, isr):
    """The leader asks for an ISR (AlterPartition), as a leader does when followers catch up."""
    s = states(c, "t")[0]
    err, res = await c.alter_partition(
        s.leader, store.epochs[s.leader], [("t", 0, s.leader_epoch, list(isr), s.partition_epoch, 0)]
    )
    assert err == 0 and not isinstance(res[("t", 0)], int), res
    await settle(c)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_a_reassignment_adds_catches_up_switches_the_leader_and_removes(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3], 1: [2, 3, 1]}, {})
        await settle(c)
        c.channels.sent.clear()
        before = states(c, "t")[0]
        res = await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        assert res == {TP: None}
        # the topic node: RS = target ++ original, AR, RR (Kafka's version 3 JSON)
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (4, 2, 3, 1), 1: (2, 3, 1)}, {0: (4,)}, {0: (1,)})
        s = states(c, "t")[0]
        assert (s.leader, s.isr, s.leader_epoch) == (1, before.isr, before.leader_epoch + 1)
        lai = told(c, LeaderAndIsrRequest)
        assert sorted(lai) == [1, 2, 3, 4]  # every replica of RS, the new one too
        p = lai[4][0][1]
        assert (list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)) == ([4, 2, 3, 1], [4], [1])
        assert told(c, StopReplicaRequest) == {}
        assert await c.reassignments.listing() == {TP: ReplicaAssignment((4, 2, 3, 1), (4,), (1,))}
        # the new replica caught up: the leader adds it to the ISR, the reassignment finishes
        c.channels.sent.clear()
        await isr_to(c, store, [1, 2, 3, 4])
        s = states(c, "t")[0]
        assert s.leader == 4 and s.isr == (2, 3, 4)  # a leader from the target; 1 out of the ISR
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (4, 2, 3), 1: (2, 3, 1)})
        lai = told(c, LeaderAndIsrRequest)
        assert sorted(lai) == [2, 3, 4]  # the target only
        stop = told(c, StopReplicaRequest)
        assert list(stop) == [1]
        ((_, p),) = stop[1]
        assert p.delete_partition and p.leader_epoch == s.leader_epoch
        umd = c.channels.take(UpdateMetadataRequest)
        assert {b for b, _ in umd} == {1, 2, 3, 4}
        assert await c.reassignments.listing() == {}
        await c.shutdown()

    run(main())


def test_errors_as_kafka_answers_them(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", uuid.uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        res = await c.reassignments.alter(
            {TP: None, TopicPartition("t", 5): [1, 2], TopicPartition("nope", 0): [1], TopicPartition("t", 1): None}
        )
        assert res[TP].error == E.NO_REASSIGNMENT_IN_PROGRESS
        assert res[TopicPartition("t", 5)].error == E.UNKNOWN_TOPIC_OR_PARTITION
        assert res[TopicPartition("nope", 0)].error == E.UNKNOWN_TOPIC_OR_PARTITION
        assert res[TopicPartition("t", 1)].error == E.NO_REASSIGNMENT_IN_PROGRESS
        res = await c.reassignments.alter({TP: [1, 9]})
        assert res[TP].error == E.INVALID_REPLICA_ASSIGNMENT
        res = await c.reassignments.alter({TP: [1, 1]})
        assert res[TP].error == E.INVALID_REPLICA_ASSIGNMENT
        assert (await store.get_topic_assignment("t"))[1] == 0  # nothing written
        await c.shutdown()

    run(main())


def test_cancel_reverts_to_the_original_replicas_and_deletes_the_added(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        c.channels.sent.clear()
        res = await c.reassignments.alter({TP: None})
        await settle(c)
        assert res == {TP: None}
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (2, 3, 1)})
        s = states(c, "t")[0]
        assert s.leader == 1 and set(s.isr) == {1, 2, 3}
        stop = told(c, StopReplicaRequest)
        assert list(stop) == [4] and stop[4][0][1].delete_partition
        assert await c.reassignments.listing() == {}
        await c.shutdown()

    run(main())


def test_a_new_target_replaces_the_one_in_progress(tmp_path):
    async def main():
        c, store = await start(tmp_path, brokers=(1, 2, 3, 4, 5))
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        c.channels.sent.clear()
        await c.reassignments.alter({TP: [5, 2, 3]})
        await settle(c)
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (5, 2, 3, 1)}, {0: (5,)}, {0: (1,)})
        stop = told(c, StopReplicaRequest)
        assert list(stop) == [4] and stop[4][0][1].delete_partition
        await c.shutdown()

    run(main())


def test_a_new_controller_resumes_and_finishes_a_reassignment(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        epoch = states(c, "t")[0].leader_epoch
        await c.shutdown()
        # a new controller reads the reassignment in the topic node and resumes it
        c2, _ = await start(tmp_path, store=store)
        assert await c2.reassignments.listing() == {TP: ReplicaAssignment((4, 2, 3, 1), (4,), (1,))}
        assert states(c2, "t")[0].leader_epoch == epoch + 1  # its replicas were told again
        assert 4 in told(c2, LeaderAndIsrRequest)
        await isr_to(c2, store, [1, 2, 3, 4])
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (4, 2, 3)})
        assert states(c2, "t")[0].leader == 4
        await c2.shutdown()

    run(main())


def test_a_reassignment_found_complete_by_a_new_controller_is_finished_at_once(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        await c.shutdown()
        # the ISR expansion was recorded, and the controller died before finishing
        ((state, version),) = (await store.get_partition_states("t")).values()
        from broker.cluster.store.znodes import LeaderIsrState

        fence = (await store.try_elect_controller(1))[1]
        await store.update_partition_states(
            {("t", 0): (LeaderIsrState(1, state.leader_epoch, (1, 2, 3, 4), state.controller_epoch), version)}, fence
        )
        c2, _ = await start(tmp_path, store=store)
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (4, 2, 3)})
        assert await c2.reassignments.listing() == {}
        await c2.shutdown()

    run(main())


def test_a_topic_being_reassigned_is_deleted_after_its_reassignment(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", uuid.uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        await store.mark_topic_for_deletion("t")
        await settle(c)
        assert "t" in c.ctx.assignments  # waits
        res = await c.reassignments.alter({TP: [4, 2, 3]})
        assert res[TP].error == E.UNKNOWN_TOPIC_OR_PARTITION
        await isr_to(c, store, [1, 2, 3, 4])
        for _ in range(20):
            await settle(c)
            if "t" not in c.ctx.assignments:
                break
            await asyncio.sleep(0.05)
        assert "t" not in c.ctx.assignments
        await c.shutdown()

    run(main())


def test_partitions_added_meanwhile_are_kept_and_get_their_states(tmp_path):
    """The topic node changed under the controller (partitions added by another broker's
    admin before the controller heard of it): its write conflicts, it reads the node
    again and writes again with the new partitions, which still get their states."""

    async def main():
        c, store = await start(tmp_path)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        c.reassignments.c.ctx.topic_versions["t"] = 0
        # another writer adds partition 1; the controller's event for it runs after ours
        await store.set_topic_assignment("t", tid, {0: [1, 2, 3], 1: [2, 3, 1]}, 0)
        res = await c.reassignments.alter({TP: [4, 2, 3]})
        assert res == {TP: None}
        await settle(c)
        node, _ = await store.get_topic_assignment("t")
        assert node.partitions == {0: (4, 2, 3, 1), 1: (2, 3, 1)} and node.adding_replicas == {0: (4,)}
        assert 1 in states(c, "t")
        await c.shutdown()

    run(main())


def test_a_dead_new_replica_holds_the_reassignment_until_it_is_cancelled(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        tid = uuid.uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        await c.reassignments.alter({TP: [4, 2, 3]})
        await settle(c)
        store.unregister(4)
        await settle(c)
        assert TP in await c.reassignments.listing()  # it waits for 4
        res = await c.reassignments.alter({TP: [5, 2, 3]})  # a replica to add must be alive
        assert res[TP].error == E.INVALID_REPLICA_ASSIGNMENT
        c.channels.sent.clear()
        assert await c.reassignments.alter({TP: None}) == {TP: None}
        await settle(c)
        assert await c.reassignments.listing() == {}
        node, _ = await store.get_topic_assignment("t")
        assert node == TopicAssignment(tid, {0: (2, 3, 1)})
        assert told(c, StopReplicaRequest) == {}  # nobody to tell: 4 is dead
        s = states(c, "t")[0]
        assert s.leader == 1 and set(s.isr) == {1, 2, 3}
        await c.shutdown()

    run(main())

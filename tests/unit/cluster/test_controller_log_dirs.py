"""The controller and a failed log dir (Kafka's onBrokerLogDirFailure, ZooKeeper mode): the
broker's /log_dir_event_notification is read and deleted, the broker is sent LeaderAndIsr
for all its replicas, the partitions it answers KAFKA_STORAGE_ERROR for are offline
replicas — they leave the ISR, their leadership moves to an online ISR member — and
UpdateMetadata names them in offline_replicas. Over the in-memory store of
test_controller.py, the brokers' answers scripted."""

import asyncio
import uuid

from test_controller import Channels, reg, run, settle, start, states
from test_decisions import T0, T1, T2, cluster, state

from broker.cluster.controller import decisions as D
from broker.cluster.controller.decisions import LeaderAndIsr
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from broker.protocol.messages.update_metadata import UpdateMetadataRequest

T = "t"
P0, P1, P2 = TopicPartition(T, 0), TopicPartition(T, 1), TopicPartition(T, 2)


class FailedDirs(Channels):
    """Answers LeaderAndIsr as the brokers would: KAFKA_STORAGE_ERROR for the partitions
    in `offline[broker]`, NONE for the others."""

    def __init__(self):
        super().__init__()
        self.offline: dict[int, set[TopicPartition]] = {}

    def send(self, broker_id, request, version, callback=None):
        self.sent.append((broker_id, request))
        if callback is not None:
            response = self.answer(broker_id, request)
            asyncio.get_running_loop().call_soon(callback, broker_id, request, response)
        return True

    def answer(self, broker_id, request):
        if not isinstance(request, LeaderAndIsrRequest):
            return type("R", (), {"error_code": 0})()
        R = LeaderAndIsrResponse
        bad = self.offline.get(broker_id, set())
        return R(
            error_code=0,
            topics=[
                R.LeaderAndIsrTopicError(
                    topic_id=t.topic_id,
                    partition_errors=[
                        R.LeaderAndIsrPartitionError(
                            partition_index=p.partition_index,
                            error_code=ErrorCode.KAFKA_STORAGE_ERROR
                            if TopicPartition(t.topic_name, p.partition_index) in bad
                            else ErrorCode.NONE,
                        )
                        for p in t.partition_states
                    ],
                )
                for t in request.topic_states
            ],
        )


async def cluster_with_topic(tmp_path):
    c, store = await start(tmp_path)
    c.channels = FailedDirs()
    c.channels.set_brokers([])
    # broker 2 leads t-0, follows t-1 and t-2
    await store.create_topic(T, uuid.uuid4(), {0: [2, 1, 3], 1: [1, 2, 3], 2: [3, 2, 1]}, {})
    await settle(c)
    c.channels.sent.clear()
    return c, store


def offline_replicas(c, tp):
    """What the last UpdateMetadata to broker 1 said of `tp`'s offline replicas."""
    for b, r in reversed(c.channels.sent):
        if b == 1 and isinstance(r, UpdateMetadataRequest):
            for t in r.topic_states:
                for p in t.partition_states:
                    if (t.topic_name, p.partition_index) == (tp.topic, tp.partition):
                        return p.offline_replicas
    return None


def test_a_log_dir_event_moves_leadership_off_the_offline_replicas_and_shrinks_their_isrs(tmp_path):
    async def main():
        c, store = await cluster_with_topic(tmp_path)
        c.channels.offline[2] = {P0, P2}  # broker 2's dir with t-0 and t-2 failed
        await store.create_log_dir_event_notification(2)
        await settle(c)
        assert await store.get_log_dir_events() == {}  # handled notifications are deleted
        asked = [r for b, r in c.channels.sent if b == 2 and isinstance(r, LeaderAndIsrRequest)]
        assert asked and sorted(
            (t.topic_name, p.partition_index) for t in asked[0].topic_states for p in t.partition_states
        ) == [(T, 0), (T, 1), (T, 2)]
        s = states(c, T)
        assert (s[0].leader, s[0].isr, s[0].leader_epoch) == (1, (1, 3), 1)  # the ISR's next online member
        assert (s[2].leader, s[2].isr) == (3, (3, 1))  # a follower leaves the ISR
        assert (s[1].leader, s[1].isr, s[1].leader_epoch) == (1, (1, 2, 3), 0)  # its other dir: untouched
        stored = await store.get_partition_states(T)
        assert stored[0][0].leader == 1 and 2 not in stored[0][0].isr
        assert c.ctx.offline_replicas == {2: {P0, P2}}
        assert offline_replicas(c, P0) == [2] and offline_replicas(c, P2) == [2]
        # an offline replica cannot come back into the ISR while its broker lives on
        err, res = await c.alter_partition(1, store.epochs[1], [(T, 0, 1, [1, 3, 2], s[0].partition_epoch, 0)])
        assert res[(T, 0)] == ErrorCode.INELIGIBLE_REPLICA
        # a second event changes nothing already known
        before = dict(c.ctx.states)
        await store.create_log_dir_event_notification(2)
        await settle(c)
        assert c.ctx.states == before
        await c.shutdown()

    run(main())


def test_a_broker_registering_again_after_repair_has_its_replicas_online_and_back_in_the_isr(tmp_path):
    async def main():
        c, store = await cluster_with_topic(tmp_path)
        c.channels.offline[2] = {P0}
        await store.create_log_dir_event_notification(2)
        await settle(c)
        assert 2 not in states(c, T)[0].isr
        # the broker restarts with the dir repaired: a new registration, every replica online
        c.channels.offline[2] = set()
        c.channels.sent.clear()
        await store.register_broker(reg(2))
        await settle(c)
        assert c.ctx.offline_replicas == {}
        assert any(b == 2 and isinstance(r, LeaderAndIsrRequest) for b, r in c.channels.sent)
        s0 = states(c, T)[0]
        # it catches up as a follower; its leader asks for it back in the ISR, granted now
        err, res = await c.alter_partition(
            s0.leader, store.epochs[s0.leader], [(T, 0, s0.leader_epoch, [1, 3, 2], s0.partition_epoch, 0)]
        )
        assert err == ErrorCode.NONE and isinstance(res[(T, 0)], LeaderAndIsr) and res[(T, 0)].isr == (1, 3, 2)
        assert offline_replicas(c, P0) == []
        await c.shutdown()

    run(main())


def test_an_answer_without_storage_errors_brings_a_replica_back_online(tmp_path):
    """A new controller learns offline replicas only from the answers to its full
    LeaderAndIsr (pending notifications are dropped at failover, as Kafka's); a later
    answer without the error marks the replica online again."""

    async def main():
        c, store = await cluster_with_topic(tmp_path)
        c.channels.offline[3] = {P2}
        await store.create_log_dir_event_notification(3)
        await settle(c)
        assert states(c, T)[2].leader == 2 and c.ctx.offline_replicas == {3: {P2}}
        c.channels.offline[3] = set()
        await store.create_log_dir_event_notification(3)
        await settle(c)
        assert c.ctx.offline_replicas == {}
        await c.shutdown()

    run(main())


def test_a_broker_alone_keeps_its_offline_partition_without_a_leader(tmp_path):
    async def main():
        c, store = await start(tmp_path, brokers=(1,))
        c.channels = FailedDirs()
        await store.create_topic(T, uuid.uuid4(), {0: [1], 1: [1]}, {})
        await settle(c)
        c.channels.offline[1] = {P0}
        await store.create_log_dir_event_notification(1)
        await settle(c)
        s = states(c, T)
        assert (s[0].leader, s[0].isr) == (D.NO_LEADER, (1,))  # offline: LEADER_NOT_AVAILABLE
        assert (s[1].leader, s[1].isr) == (1, (1,))
        await c.shutdown()

    run(main())


# ---------------------------------------------------------------- the pure decision


def test_on_replicas_offline_elects_from_the_online_isr_and_never_empties_an_isr():
    view = cluster(
        {
            T0: ([1, 2, 3], state(1, 5, [1, 2, 3], 7)),
            T1: ([2, 3, 1], state(2, 5, [2, 1], 7)),
            T2: ([3], state(3, 5, [3], 7)),
        }
    )
    d = D.on_replicas_offline(view, {T0: [1], T1: [2, 1], T2: [3]})
    assert d.states[T0] == state(2, 6, [2, 3], 8)
    assert d.states[T1] == state(D.NO_LEADER, 6, [2], 8)  # nobody online in its ISR: offline, ISR of one
    assert T1 in d.failed and T2 in d.failed
    assert d.states[T2] == state(D.NO_LEADER, 6, [3], 8)


def test_offline_replicas_are_not_preferred_nor_given_leadership_at_controlled_shutdown():
    view = cluster({T0: ([1, 2, 3], state(2, 5, [1, 2, 3], 7))})
    view = D.replace(view, offline={T0: frozenset({1})})
    assert T0 in D.preferred_election(view, [T0]).failed
    d = D.controlled_shutdown(view, 2)
    assert d.states[T0].leader == 3

"""The controller (broker/cluster/controller/controller.py) over an in-memory store with
several brokers, its requests to brokers captured: what it writes and what it tells,
without ZooKeeper, sockets or processes."""

import asyncio

import pytest

from broker.cluster.controller.controller import Controller, ControllerMovedError
from broker.cluster.store.file import FileMetadataStore
from broker.cluster.store.znodes import BrokerRegistration, EndPoint
from broker.config import BrokerConfig
from broker.log import TopicPartition
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest


class ClusterStore(FileMetadataStore):
    """The embedded store with a registry of several brokers (register / unregister)."""

    def __init__(self, directory):
        super().__init__(directory)
        self.regs: dict[int, BrokerRegistration] = {}
        self.epochs: dict[int, int] = {}
        self._next_epoch = 100

    async def register_broker(self, registration):
        self._next_epoch += 1
        self.regs[registration.broker_id] = registration
        self.epochs[registration.broker_id] = self._next_epoch
        self._notify("brokers", frozenset(self.regs))
        return self._next_epoch

    def unregister(self, broker_id):
        del self.regs[broker_id]
        del self.epochs[broker_id]
        self._notify("brokers", frozenset(self.regs))

    async def get_brokers(self):
        return dict(self.regs)

    async def get_brokers_and_epochs(self):
        return {b: (r, self.epochs[b]) for b, r in self.regs.items()}


class Channels:
    """Captures what the controller sends."""

    def __init__(self):
        self.sent = []
        self.brokers = []

    def set_brokers(self, brokers):
        self.brokers = sorted(b.broker_id for b in brokers)

    def send(self, broker_id, request, version, callback=None):
        self.sent.append((broker_id, request))
        if callback is not None:
            asyncio.get_running_loop().call_soon(callback, broker_id, request, type("R", (), {"error_code": 0})())
        return True

    async def close(self):
        pass

    def take(self, kind):
        out = [(b, r) for b, r in self.sent if isinstance(r, kind)]
        self.sent = [(b, r) for b, r in self.sent if not isinstance(r, kind)]
        return out


def reg(b, tv=2):
    features = {} if tv is None else {"transaction.version": (0, tv)}
    return BrokerRegistration(b, (EndPoint("PLAINTEXT", "127.0.0.1", 9000 + b),), features=features)


async def settle(controller):
    """Lets the controller's event queue drain."""
    for _ in range(50):
        await asyncio.sleep(0)
        if controller._events.empty():
            await asyncio.sleep(0.01)
            if controller._events.empty():
                return


async def start(tmp_path, brokers=(1, 2, 3), **config):
    store = ClusterStore(str(tmp_path))
    for b in brokers:
        await store.register_broker(reg(b))
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "auto.leader.rebalance.enable": False, **config})
    c = Controller(1, cfg, store, local=None)
    c.channels = Channels()
    await c.startup()
    await settle(c)
    return c, store


def states(c, topic):
    return {tp.partition: s for tp, s in c.ctx.states.items() if tp.topic == topic}


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def test_a_new_topic_gets_leaders_and_every_replica_and_broker_hears_of_it(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        assert c.active and c.epoch == 1
        c.channels.sent.clear()
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2, 3], 1: [2, 3, 1]}, {})
        await settle(c)
        s = states(c, "t")
        assert (s[0].leader, s[0].isr, s[0].leader_epoch) == (1, (1, 2, 3), 0)
        assert (s[1].leader, s[1].isr) == (2, (2, 3, 1))
        stored = await store.get_partition_states("t")
        assert stored[0][0].leader == 1 and stored[0][0].controller_epoch == 1
        lai = c.channels.take(LeaderAndIsrRequest)
        assert sorted(b for b, _ in lai) == [1, 2, 3]
        for _, r in lai:
            assert r.controller_epoch == 1 and all(p.is_new for t in r.topic_states for p in t.partition_states)
        assert sorted(b for b, _ in c.channels.take(UpdateMetadataRequest)) == [1, 2, 3]
        await c.shutdown()

    run(main())


def test_a_dead_leader_is_replaced_from_the_isr_with_a_new_epoch(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3], 1: [1, 2, 3]}, {})
        await settle(c)
        v0 = await store.get_partition_states("t")
        c.channels.sent.clear()
        store.unregister(2)
        await settle(c)
        s = states(c, "t")
        assert s[0].leader == 1 and s[0].leader_epoch == 1 and 2 not in s[0].isr
        assert s[1].leader == 1 and s[1].isr == (1, 3) and s[1].leader_epoch == 1  # a dead follower leaves too
        after = await store.get_partition_states("t")
        assert after[0][1] == v0[0][1] + 1  # one conditional write each
        told = {b for b, _ in c.channels.take(LeaderAndIsrRequest)}
        assert told == {1, 3}  # the dead broker is not told
        assert c.channels.brokers == [1, 3]
        await c.shutdown()

    run(main())


def test_with_every_isr_member_dead_the_partition_stays_offline_unless_unclean(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        tid = __import__("uuid").uuid4()
        await store.create_topic("t", tid, {0: [1, 2, 3]}, {})
        await settle(c)
        # the ISR shrank to 2 (the leader asked; the controller recorded it)
        err, res = await c.alter_partition(1, store.epochs[1], [("t", 0, 0, [1, 2], 0, 0)])
        assert err == 0 and res[("t", 0)].isr == (1, 2)
        store.unregister(2)
        store.unregister(1)
        await settle(c)
        s = states(c, "t")[0]
        assert s.leader == -1 and s.isr in ((1,), (2,))  # offline; the last ISR member is kept
        await store.set_topic_configs("t", {"unclean.leader.election.enable": "true"})
        await settle(c)
        s = states(c, "t")[0]
        assert s.leader == 3 and s.isr == (3,) and s.leader_recovery_state == 1
        await c.shutdown()

    run(main())


def test_alter_partition_is_conditional_on_the_partition_epoch(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        e1 = store.epochs[1]
        err, res = await c.alter_partition(1, e1, [("t", 0, 0, [1, 2], 0, 0)])
        assert res[("t", 0)].partition_epoch == 1
        err, res = await c.alter_partition(1, e1, [("t", 0, 0, [1], 0, 0)])  # stale version
        assert res[("t", 0)] == ErrorCode.INVALID_UPDATE_VERSION
        err, res = await c.alter_partition(2, store.epochs[2], [("t", 0, 0, [1, 2], 1, 0)])  # not the leader
        assert res[("t", 0)] == ErrorCode.INVALID_REQUEST
        err, res = await c.alter_partition(1, e1 - 1, [("t", 0, 0, [1, 2], 1, 0)])
        assert err == ErrorCode.STALE_BROKER_EPOCH
        assert states(c, "t")[0].isr == (1, 2)
        await c.shutdown()

    run(main())


def test_controlled_shutdown_moves_leadership_and_reports_what_cannot_move(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3], 1: [1, 2, 3]}, {})
        await store.create_topic("solo", __import__("uuid").uuid4(), {0: [2]}, {})
        await settle(c)
        c.channels.sent.clear()
        err, remaining = await c.controlled_shutdown(2, store.epochs[2])
        assert err == 0 and remaining == []  # an RF=1 partition is not acted on
        s = states(c, "t")
        assert s[0].leader == 1 and 2 not in s[0].isr
        assert 2 not in s[1].isr
        stops = c.channels.take(StopReplicaRequest)
        assert [b for b, _ in stops] == [2]  # it stops following what it left
        err, _ = await c.controlled_shutdown(2, store.epochs[2] - 1)
        assert err == ErrorCode.STALE_BROKER_EPOCH
        await c.shutdown()

    run(main())


def test_a_controller_whose_epoch_moved_on_writes_nothing_and_resigns_then_is_elected_again(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        before = await store.get_partition_states("t")
        store._controller_epoch += 1  # another controller won meanwhile
        with pytest.raises(ControllerMovedError):
            await c.alter_partition(1, store.epochs[1], [("t", 0, 0, [1, 2], 0, 0)])
        assert await store.get_partition_states("t") == before
        await settle(c)
        # it resigned; the embedded store lets the same broker win again, with a new epoch
        assert c.failovers == 2 and c.epoch == 3 == store._controller_epoch
        await c.shutdown()

    run(main())


def test_topic_deletion_stops_and_deletes_replicas_then_forgets_the_topic(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2]}, {})
        await settle(c)
        c.channels.sent.clear()
        await store.mark_topic_for_deletion("t")
        await settle(c)
        await asyncio.sleep(0.05)
        await settle(c)
        stops = c.channels.take(StopReplicaRequest)
        assert sorted(b for b, _ in stops) == [1, 2]
        assert all(p.delete_partition for _, r in stops for t in r.topic_states for p in t.partition_states)
        assert "t" not in await store.get_topic_names()
        assert TopicPartition("t", 0) not in c.ctx.states
        await c.shutdown()

    run(main())


def test_a_returning_broker_gets_the_full_state_of_its_replicas(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        store.unregister(3)
        await settle(c)
        c.channels.sent.clear()
        await store.register_broker(reg(3))
        await settle(c)
        lai = [r for b, r in c.channels.take(LeaderAndIsrRequest) if b == 3]
        assert lai and lai[-1].type == 1  # the full set for the new broker
        assert [p.leader for t in lai[-1].topic_states for p in t.partition_states] == [1]
        await c.shutdown()

    run(main())


def test_a_new_controller_takes_brokers_that_died_unwatched_out_of_every_isr(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3], 1: [1, 2, 3], 2: [3, 1, 2]}, {})
        await settle(c)
        await c.shutdown()  # no controller watches now
        store.unregister(2)
        c2 = Controller(1, c.config, store, local=None)
        c2.channels = Channels()
        await c2.startup()
        await settle(c2)
        s = states(c2, "t")
        assert s[0].leader == 1 and s[0].isr == (1, 3)  # it led: replaced
        assert s[1].leader == 1 and s[1].isr == (1, 3)  # it followed: out of the ISR at once
        assert s[2].leader == 3 and s[2].isr == (3, 1)
        stored = await store.get_partition_states("t")
        assert all(2 not in stored[p][0].isr for p in (0, 1, 2))
        await c2.shutdown()

    run(main())


# ---------------------------------------------------------------- writes of uncertain outcome (issue 16, defect 3)


class LostAnswerStore(ClusterStore):
    """A store whose next conditional writes are applied but answered as a version
    conflict: what ZooKeeper answers a multi-op sent again after a connection loss when
    the first send had been applied. `lose` counts them down; `raise_after` raises
    instead (the connection stayed lost: outcome unknown) after applying."""

    def __init__(self, directory):
        super().__init__(directory)
        self.lose = 0
        self.raise_after = 0
        self.writes = 0

    async def update_partition_states(self, updates, controller_epoch_zk_version):
        self.writes += 1
        out = await super().update_partition_states(updates, controller_epoch_zk_version)
        if self.raise_after > 0:
            self.raise_after -= 1
            raise ConnectionError("ZooKeeper connection lost")
        if self.lose > 0:
            self.lose -= 1
            from broker.cluster.store.errors import BadVersion

            return {
                tp: BadVersion("applied, answered as a conflict") if isinstance(v, int) else v for tp, v in out.items()
            }
        return out

    def bump(self, topic, p, leader, isr, leader_epoch):
        """Someone else changes a state (the controller's context does not know)."""
        s = self._topics[topic]["states"][p]
        s.update(leader=leader, isr=list(isr), leader_epoch=leader_epoch)
        s["version"] += 1


async def start_lost(tmp_path, brokers=(1, 2, 3)):
    store = LostAnswerStore(str(tmp_path))
    for b in brokers:
        await store.register_broker(reg(b))
    cfg = BrokerConfig({"log.dirs": str(tmp_path), "auto.leader.rebalance.enable": False})
    c = Controller(1, cfg, store, local=None)
    c.channels = Channels()
    await c.startup()
    await settle(c)
    return c, store


def told(c, tp):
    """{broker: (leader, leader epoch, isr)} of the LeaderAndIsr requests sent for tp."""
    out = {}
    for b, r in c.channels.take(LeaderAndIsrRequest):
        for t in r.topic_states:
            for p in t.partition_states:
                if (t.topic_name, p.partition_index) == tp:
                    out[b] = (p.leader, p.leader_epoch, tuple(p.isr))
    return out


def test_an_election_applied_but_answered_as_a_conflict_is_announced(tmp_path):
    async def main():
        c, store = await start_lost(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3]}, {})
        await settle(c)
        c.channels.sent.clear()
        store.lose = 1
        store.unregister(2)  # the leader dies
        await settle(c)
        stored = (await store.get_partition_states("t"))[0]
        assert (stored[0].leader, stored[0].isr) == (1, (1, 3)) and stored[1] == 1
        s = states(c, "t")[0]
        assert (s.leader, s.isr, s.partition_epoch) == (1, (1, 3), 1)
        assert told(c, ("t", 0)) == {1: (1, 1, (1, 3)), 3: (1, 1, (1, 3))}  # the new leader hears it leads
        assert store.writes == 1  # recognised, not written again
        await c.shutdown()

    run(main())


def test_an_isr_change_applied_but_answered_as_a_conflict_is_answered_as_applied(tmp_path):
    async def main():
        c, store = await start_lost(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        store.lose = 1
        err, res = await c.alter_partition(1, store.epochs[1], [("t", 0, 0, [1, 2, 3][:2], 0, 0)])
        assert err == 0
        got = res[("t", 0)]
        assert not isinstance(got, int), got  # not INVALID_UPDATE_VERSION: it was applied
        assert (got.leader, got.isr, got.leader_epoch, got.partition_epoch) == (1, (1, 2), 0, 1)
        assert (await store.get_partition_states("t"))[0][1] == 1
        await c.shutdown()

    run(main())


def test_a_state_changed_under_the_controller_is_decided_again_and_announced(tmp_path):
    async def main():
        c, store = await start_lost(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3]}, {})
        await settle(c)
        store.bump("t", 0, leader=2, isr=[2, 3], leader_epoch=0)  # 1 left the ISR behind its back
        c.channels.sent.clear()
        store.unregister(2)
        await settle(c)
        stored = (await store.get_partition_states("t"))[0]
        # decided again from what ZooKeeper holds: 1 is not in the ISR, 3 is
        assert (stored[0].leader, stored[0].isr, stored[0].leader_epoch, stored[1]) == (3, (3,), 1, 2)
        assert states(c, "t")[0].leader == 3
        assert told(c, ("t", 0)) == {1: (3, 1, (3,)), 3: (3, 1, (3,))}
        await c.shutdown()

    run(main())


def test_a_state_that_keeps_changing_is_given_up_after_bounded_rounds(tmp_path):
    from broker.cluster.controller import controller as ctl

    async def main():
        c, store = await start_lost(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3]}, {})
        await settle(c)
        real = store.update_partition_states

        async def racing(updates, epoch_version):
            for topic, p in updates:
                store.bump(topic, p, leader=2, isr=[2, 1, 3], leader_epoch=0)
            return await real(updates, epoch_version)

        store.update_partition_states = racing
        store.unregister(2)
        await settle(c)
        assert store.writes == ctl.WRITE_ROUNDS
        assert c.active  # the event ended; the controller goes on
        await c.shutdown()

    run(main())


def test_an_isr_change_of_unknown_outcome_is_not_answered_as_not_applied(tmp_path, monkeypatch):
    from broker.cluster.controller import controller as ctl

    monkeypatch.setattr(ctl, "RECONCILE_BACKOFF_S", 0.01, raising=False)

    async def main():
        c, store = await start_lost(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [1, 2, 3]}, {})
        await settle(c)
        c.channels.sent.clear()
        store.raise_after = 1  # applied, then the connection stays lost
        err, res = await c.alter_partition(1, store.epochs[1], [("t", 0, 0, [1, 2], 0, 0)])
        assert err == 0 and res[("t", 0)] == ErrorCode.REQUEST_TIMED_OUT  # the leader keeps [1,2,3], asks again
        await asyncio.sleep(0.05)
        await settle(c)
        # the controller read the state again and announced what ZooKeeper holds
        s = states(c, "t")[0]
        assert (s.isr, s.partition_epoch) == ((1, 2), 1)
        assert told(c, ("t", 0)) == {b: (1, 0, (1, 2)) for b in (1, 2, 3)}
        # the leader's retry is answered with the applied state
        err, res = await c.alter_partition(1, store.epochs[1], [("t", 0, 0, [1, 2], 0, 0)])
        assert res[("t", 0)].isr == (1, 2) and res[("t", 0)].partition_epoch == 1
        await c.shutdown()

    run(main())


def test_an_election_of_unknown_outcome_is_read_again_and_announced(tmp_path, monkeypatch):
    from broker.cluster.controller import controller as ctl

    monkeypatch.setattr(ctl, "RECONCILE_BACKOFF_S", 0.01, raising=False)

    async def main():
        c, store = await start_lost(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [2, 1, 3]}, {})
        await settle(c)
        c.channels.sent.clear()
        store.raise_after = 1  # applied, then the connection stays lost
        store.unregister(2)  # the leader dies
        await settle(c)
        await asyncio.sleep(0.05)
        await settle(c)
        assert states(c, "t")[0].leader == 1
        assert told(c, ("t", 0)) == {1: (1, 1, (1, 3)), 3: (1, 1, (1, 3))}  # the new leader hears it leads
        await c.shutdown()

    run(main())


# ---------------------------------------------------------------- refused control requests (issue 16, defect 8)


class Answer:
    def __init__(self, error_code):
        self.error_code = error_code


def test_a_request_refused_for_a_reason_that_passes_is_sent_again_in_order(monkeypatch):
    from broker.cluster.controller import channel_manager as cm

    monkeypatch.setattr(cm, "RETRY_BACKOFF_S", 0.001)

    async def main():
        delivered = []
        refusals = [ErrorCode.CLUSTER_AUTHORIZATION_FAILED, ErrorCode.STALE_BROKER_EPOCH]

        async def local(request):  # this broker's ZooKeeper server lags: it refuses twice
            delivered.append(request)
            return Answer(refusals.pop(0) if refusals else ErrorCode.NONE)

        m = cm.ControllerChannelManager(1, local)
        m.set_brokers([cm.BrokerEndpoint(1, "127.0.0.1", 9001, None, 7)])
        answers = []
        m.send(1, "LeaderAndIsr", 7, lambda b, req, resp: answers.append((req, resp.error_code)))
        m.send(1, "UpdateMetadata", 8, lambda b, req, resp: answers.append((req, resp.error_code)))
        for _ in range(200):
            if len(answers) == 2:
                break
            await asyncio.sleep(0.005)
        assert answers == [("LeaderAndIsr", 0), ("UpdateMetadata", 0)]
        assert delivered == ["LeaderAndIsr"] * 3 + ["UpdateMetadata"]  # nothing overtook it
        await m.close()

    run(main())


def test_refusals_are_sent_again_a_bounded_number_of_times_and_a_stale_epoch_not_at_all(monkeypatch):
    from broker.cluster.controller import channel_manager as cm

    monkeypatch.setattr(cm, "RETRY_BACKOFF_S", 0.001)
    monkeypatch.setattr(cm, "REFUSED_BACKOFF_MAX_S", 0.001)

    async def main():
        delivered = []
        answer = {
            "LeaderAndIsr": ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            "StopReplica": ErrorCode.STALE_CONTROLLER_EPOCH,
            "UpdateMetadata": ErrorCode.NONE,
        }

        async def local(request):
            delivered.append(request)
            return Answer(answer[request])

        stale = []
        m = cm.ControllerChannelManager(1, local, on_stale=stale.append)
        m.set_brokers([cm.BrokerEndpoint(1, "127.0.0.1", 9001, None, 7)])
        answers = []
        for req in ("LeaderAndIsr", "StopReplica", "UpdateMetadata"):
            m.send(1, req, 0, lambda b, req, resp: answers.append((req, resp.error_code)))
        for _ in range(400):
            if len(answers) == 3:
                break
            await asyncio.sleep(0.005)
        assert [a for a, _ in answers] == ["LeaderAndIsr", "StopReplica", "UpdateMetadata"]
        assert delivered.count("LeaderAndIsr") == cm.REFUSED_RETRIES + 1
        assert delivered.count("StopReplica") == 1 and stale == [1]
        await m.close()

    run(main())


def test_a_broker_that_knows_a_newer_controller_epoch_makes_the_controller_check_and_resign(tmp_path):
    async def main():
        c, store = await start(tmp_path)
        assert c.epoch == 1
        store._controller_epoch += 1  # another controller won meanwhile
        store._controller = 2
        c._on_stale_epoch(3)
        await settle(c)
        assert not c.active
        await c.shutdown()

    run(main())


def test_a_broker_refusing_a_stale_broker_epoch_has_the_controller_read_the_brokers_again(tmp_path):
    # found by the long fault run: broker 3's session expired while the controller was cut
    # from ZooKeeper; it registered again under a new broker epoch and the controller never
    # learned it: every LeaderAndIsr it sent was refused STALE_BROKER_EPOCH, every
    # AlterPartition of broker 3 too, and broker 3 never rejoined an ISR
    async def main():
        c, store = await start(tmp_path)
        await store.create_topic("t", __import__("uuid").uuid4(), {0: [3, 1, 2]}, {})
        await settle(c)
        old = c.ctx.brokers[3].epoch
        store.epochs[3] = old + 50  # re-registered, no watch event seen
        c.channels.sent.clear()
        c._on_stale_broker_epoch(3)  # its refusal of a request
        await settle(c)
        assert c.ctx.brokers[3].epoch == old + 50
        to_3 = [r for b, r in c.channels.take(LeaderAndIsrRequest) if b == 3]
        assert to_3 and all(r.broker_epoch == old + 50 for r in to_3)
        # an AlterPartition claiming the newer registration has the same effect
        store.epochs[3] = old + 60
        err, _ = await c.alter_partition(3, old + 60, [])
        assert err == ErrorCode.STALE_BROKER_EPOCH
        await settle(c)
        assert c.ctx.brokers[3].epoch == old + 60
        await c.shutdown()

    run(main())


class LaggingStore:
    """The ZooKeeper server a broker is connected to, behind the leader: its reads show the
    previous controller until a sync() makes it catch up."""

    def __init__(self):
        self.synced = False
        self.syncs = 0

    async def sync(self, path="/"):
        self.syncs += 1
        self.synced = True

    async def get_controller_id(self):
        return 1 if self.synced else 3

    async def get_controller_epoch(self):
        return (2, 2) if self.synced else (1, 1)

    async def get_brokers_and_epochs(self):
        return {2: (reg(2), 12 if self.synced else 11)}


def test_a_broker_checks_a_new_controller_against_a_synced_zookeeper(tmp_path):
    from broker.server.broker import Broker

    async def main():
        store = LaggingStore()
        b = Broker(
            BrokerConfig({"log.dirs": str(tmp_path), "broker.id": 2, "zookeeper.connect": "127.0.0.1:2181"}),
            store=store,
        )
        b.broker_epoch = 11
        # controller 1 was elected with epoch 2; this broker's ZooKeeper server had not seen it
        assert await b.check_control_request("LeaderAndIsr", 1, 2, 11) == ErrorCode.NONE
        assert store.syncs == 1
        assert await b.check_control_request("UpdateMetadata", 1, 2, 11) == ErrorCode.NONE
        assert store.syncs == 1  # once per controller change
        # this broker re-registered (epoch 12) and the controller saw it first
        store.synced = False
        assert await b.check_control_request("LeaderAndIsr", 1, 2, 12) == ErrorCode.NONE
        assert store.syncs == 2

    run(main())


def test_the_finalized_transaction_version_is_the_lowest_any_live_broker_supports(tmp_path):
    """/feature follows the live brokers' registrations: one broker at transaction.version
    1 (or one that registers no features) holds the cluster below 2; a broker that dies
    no longer counts; the features' epoch (the znode's version) grows with each change,
    and nothing is written when nothing changed."""

    async def main():
        store = ClusterStore(str(tmp_path))
        await store.register_broker(reg(1))
        await store.register_broker(reg(2))
        await store.register_broker(reg(3, tv=1))
        seen = []
        await store.watch_finalized_features(seen.append)
        cfg = BrokerConfig({"log.dirs": str(tmp_path), "auto.leader.rebalance.enable": False})
        c = Controller(1, cfg, store, local=None)
        c.channels = Channels()
        await c.startup()
        await settle(c)
        assert await store.get_finalized_features() == ({"transaction.version": 1}, 0)
        await store.register_broker(reg(3))  # restarted at 2
        await settle(c)
        assert await store.get_finalized_features() == ({"transaction.version": 2}, 1)
        await store.register_broker(reg(4, tv=None))  # knows no features
        await settle(c)
        assert await store.get_finalized_features() == ({}, 2)
        store.unregister(4)
        await settle(c)
        assert await store.get_finalized_features() == ({"transaction.version": 2}, 3)
        await store.register_broker(reg(2))  # bounced, same level: nothing written
        await settle(c)
        assert await store.get_finalized_features() == ({"transaction.version": 2}, 3)
        assert seen == [
            ({"transaction.version": 1}, 0),
            ({"transaction.version": 2}, 1),
            ({}, 2),
            ({"transaction.version": 2}, 3),
        ]
        await c.shutdown()

    run(main())

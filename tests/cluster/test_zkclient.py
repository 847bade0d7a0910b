"""KafkaZkClient against a real ZooKeeper (Debian's package): every operation, the races
that matter (controller election, a zombie controller fenced, stale versions, a broker
id registered twice), watches delivered on the event loop's thread, session expiry and
re-registration, ZooKeeper unreachable at start, ZooKeeper killed and restarted.

Each test gets a fresh chroot (conftest.zk_connect) and runs its own event loop; every
wait is bounded. Sessions are expired the way ZooKeeper's own tests do it: a second
client connects with the same session id and password, then closes the session."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import time
import uuid

import pytest
from kazoo.client import KazooClient

from broker.cluster.metadata import SessionEvent
from broker.cluster.store.errors import (
    BadVersion,
    BrokerIdInUse,
    ControllerMoved,
    NoSuchTopic,
    StoreError,
    StoreUnavailable,
    TopicExists,
)
from broker.cluster.store.zkclient import KafkaZkClient
from broker.cluster.store.zksession import ZkSession
from broker.cluster.store.znodes import (
    PERSISTENT_PATHS,
    BrokerIdZNode,
    BrokerRegistration,
    EndPoint,
    LeaderIsrState,
    TopicPartition,
    TopicZNode,
)
from tests.support.ports import free_port

SESSION_TIMEOUT_MS = 2000
TEST_TIMEOUT = 30.0

pytestmark = pytest.mark.timeout(60)


def run(fn):
    """Runs an async test on a fresh event loop (in this, the main, thread), bounded."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(fn(*args, **kwargs), TEST_TIMEOUT))

    return wrapper


@contextlib.asynccontextmanager
async def client(connect: str, **kwargs):
    kwargs.setdefault("session_timeout_ms", SESSION_TIMEOUT_MS)
    zk = KafkaZkClient(connect, **kwargs)
    await zk.start()
    try:
        yield zk
    finally:
        await zk.close()


def registration(broker_id: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(
        broker_id, (EndPoint("PLAINTEXT", "127.0.0.1", port),), rack="r1", timestamp=int(time.time() * 1000)
    )


async def until(predicate, what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def expire_session(connect: str, zk: KafkaZkClient) -> None:
    """Takes over zk's session with a second client and closes it: ZooKeeper expires it."""

    def take_over() -> None:
        other = KazooClient(connect.split("/", 1)[0], client_id=zk.client_id, timeout=SESSION_TIMEOUT_MS / 1000)
        other.start(timeout=10)
        other.stop()
        other.close()

    await asyncio.to_thread(take_over)


def raw(connect: str) -> KazooClient:
    """A plain blocking kazoo client on the test's chroot, to look behind the client's back."""
    c = KazooClient(connect, timeout=SESSION_TIMEOUT_MS / 1000)
    c.start(timeout=10)
    return c


# ---------------------------------------------------------------- start, chroot, cluster id


@run
async def test_start_creates_a_nested_chroot_and_kafkas_persistent_paths(zk_connect):
    connect = zk_connect + "/nested/kb"
    async with client(connect):
        pass
    r = raw(connect.split("/", 1)[0])
    try:
        chroot = "/" + connect.split("/", 1)[1]
        for path in (
            "/brokers/ids",
            "/brokers/topics",
            "/config/changes",
            "/config/topics",
            "/admin/delete_topics",
            "/latest_producer_id_block",
        ):
            assert r.exists(chroot + path) is not None, path
        assert r.exists("/brokers") is None  # nothing outside the chroot
    finally:
        r.stop()
        r.close()


@run
async def test_a_session_alone_creates_its_chroot_and_none_of_kafkas_znodes(zk_connect):
    """The split: ZkSession is the connection (and its chroot); Kafka's paths are KafkaZkClient's."""
    session = ZkSession(zk_connect, session_timeout_ms=SESSION_TIMEOUT_MS)
    await session.start()
    try:
        assert session.connected and session.is_own_session(session.session_id)
        assert await session.exists("/") and await session.children("/") == []
        await session.ensure_path("/a/b")
        assert await session.children("/a") == ["b"] and await session.get("/nope") is None
    finally:
        await session.close()
    with pytest.raises(StoreError, match="not started"):
        await session.get("/a")
    async with client(zk_connect) as zk:
        assert zk.connected
    r = raw(zk_connect)
    try:
        assert set(r.get_children("/")) == {"a"} | {path.split("/")[1] for path in PERSISTENT_PATHS}
    finally:
        r.stop()
        r.close()


@run
async def test_cluster_id_is_created_once(zk_connect):
    async with client(zk_connect) as a, client(zk_connect) as b:
        ids = await asyncio.gather(
            a.get_or_create_cluster_id("first-id-AAAAAAAAAAAAA"), b.get_or_create_cluster_id("second-id-BBBBBBBBBBBB")
        )
        assert ids[0] == ids[1] and ids[0] in ("first-id-AAAAAAAAAAAAA", "second-id-BBBBBBBBBBBB")
        assert await b.get_or_create_cluster_id("third") == ids[0]


@run
async def test_unreachable_zookeeper_raises_after_the_connection_timeout():
    connect = f"127.0.0.1:{free_port()}/kb"  # nothing listens there
    zk = KafkaZkClient(connect, connection_timeout_ms=1500)
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as e:
        await zk.start()
    assert time.monotonic() - started >= 1.4  # it kept trying until the timeout
    assert str(e.value) == f"ZooKeeper at {connect} is unreachable: no connection within 1500 ms"
    assert isinstance(e.value, StoreError)


def test_malformed_connect_string_is_refused_at_once():
    with pytest.raises(ValueError, match="zookeeper.connect 'localhost/kb': no host:port|is not host:port"):
        KafkaZkClient("localhost/kb")


# ---------------------------------------------------------------- brokers


@run
async def test_register_broker_epoch_and_id_in_use(zk_connect):
    async with client(zk_connect) as a, client(zk_connect) as b:
        epoch = await a.register_broker(registration(1))
        assert epoch > 0
        assert await a.register_broker(registration(1)) == epoch  # same session: the same node
        with pytest.raises(BrokerIdInUse, match=r"broker id 1 is already registered in ZooKeeper at .*session 0x"):
            await b.register_broker(registration(1, 9093))
        epoch2 = await b.register_broker(registration(2, 9093))
        assert epoch2 > epoch
        brokers = await b.get_brokers_and_epochs()
        assert brokers.keys() == {1, 2}
        assert brokers[1][1] == epoch and brokers[2][1] == epoch2
        assert brokers[1][0].endpoints == (EndPoint("PLAINTEXT", "127.0.0.1", 9092),) and brokers[1][0].rack == "r1"
        r = raw(zk_connect)
        try:
            data, stat = r.get(BrokerIdZNode.path(1))
            assert stat.ephemeralOwner == a.session_id and stat.czxid == epoch
            assert data == BrokerIdZNode.encode(brokers[1][0])
        finally:
            r.stop()
            r.close()
    async with client(zk_connect) as c:  # a's session closed: its node went with it
        assert (await c.get_brokers()).keys() == set()
        assert await c.register_broker(registration(1)) > epoch2


@run
async def test_register_broker_waits_out_a_gone_holder_and_refuses_a_live_one(zk_connect, caplog):
    """holder_gone decides: None refuses at once (live, nothing waited); a reason waits,
    one log line, until the holder's node goes (here: its session closes mid-wait), then
    registers; a node that stays past the session timeout + slack is BrokerIdInUse(live=False)."""
    import broker.cluster.store.zkclient as zkclient

    caplog.set_level("WARNING", logger=zkclient.__name__)
    asked = []

    async def alive(held):
        asked.append(held)
        return None

    async def gone(held):
        asked.append(held)
        return "it is a test"

    async with client(zk_connect) as b:
        async with client(zk_connect) as a:
            await a.register_broker(registration(1))
            t0 = time.monotonic()
            with pytest.raises(BrokerIdInUse) as e:
                await b.register_broker(registration(1, 9093), alive)
            assert e.value.live and time.monotonic() - t0 < 1.0
            # what holder_gone was given: the registration in ZooKeeper, a's
            assert len(asked) == 1 and asked[0].broker_id == 1 and asked[0].endpoints == registration(1).endpoints
            assert not [r for r in caplog.records if "waiting up to" in r.getMessage()]

            # a holder that never goes: refused after the session timeout + the slack, not live
            t0 = time.monotonic()
            with pytest.raises(BrokerIdInUse) as e:
                await b.register_broker(registration(1, 9093), gone)
            waited = time.monotonic() - t0
            assert not e.value.live and "still registered" in str(e.value)
            assert SESSION_TIMEOUT_MS / 1000 <= waited < (SESSION_TIMEOUT_MS + zkclient.EXPIRY_SLACK_MS) / 1000 + 2

            # a holder whose node goes while b waits: b registers then
            caplog.clear()
            waiting = asyncio.create_task(b.register_broker(registration(1, 9093), gone))
            await asyncio.sleep(0.5)
            assert not waiting.done()
        # a's session closed: its node is gone
        epoch = await asyncio.wait_for(waiting, 10)
        lines = [r.getMessage() for r in caplog.records if "waiting up to" in r.getMessage()]
        assert len(lines) == 1 and "broker 1" in lines[0] and "it is a test" in lines[0], lines
        brokers = await b.get_brokers_and_epochs()
        assert brokers[1][1] == epoch and brokers[1][0].endpoints == (EndPoint("PLAINTEXT", "127.0.0.1", 9093),)


@run
async def test_broker_ids_watch_fires_on_the_loop_thread(zk_connect):
    loop_thread = threading.get_ident()
    seen: list[tuple[frozenset, int]] = []
    async with client(zk_connect) as watcher:
        assert await watcher.watch_broker_ids(lambda ids: seen.append((ids, threading.get_ident()))) == frozenset()
        async with client(zk_connect) as a:
            await a.register_broker(registration(1))
            await until(lambda: seen and seen[-1][0] == {1}, "broker 1 seen")
            async with client(zk_connect) as b:
                await b.register_broker(registration(2))
                await until(lambda: seen[-1][0] == {1, 2}, "brokers 1, 2 seen")
            await until(lambda: seen[-1][0] == {1}, "broker 2 gone")
        await until(lambda: seen[-1][0] == frozenset(), "broker 1 gone")
    assert {thread for _, thread in seen} == {loop_thread}
    assert [ids for ids, _ in seen] == [{1}, {1, 2}, {1}, frozenset()]  # each change once, in order


@run
async def test_broker_ids_watch_reports_a_broker_that_registered_again_under_the_same_id(zk_connect):
    # a broker whose session expired and that registered again before the controller read
    # the ids leaves the same set of ids: the controller must still hear (its broker epoch
    # changed). Deleted and created again in one multi-op here: one event, the same ids.
    seen: list[frozenset] = []
    async with client(zk_connect) as watcher, client(zk_connect) as a:
        epoch = await a.register_broker(registration(3))
        assert await watcher.watch_broker_ids(seen.append) == {3}
        path, data = BrokerIdZNode.path(3), BrokerIdZNode.encode(registration(3))
        c = raw(zk_connect)
        try:
            t = c.transaction()
            t.delete(path)
            t.create(path, data, ephemeral=True)
            t.commit()
            await until(lambda: seen == [frozenset({3})], "the re-registration reported")
            assert (await watcher.get_brokers_and_epochs())[3][1] > epoch
        finally:
            c.stop()
            c.close()


# ---------------------------------------------------------------- controller


@run
async def test_controller_race_one_winner_and_epochs_increase(zk_connect):
    epochs = []
    async with client(zk_connect) as observer:
        changes: list = []
        assert await observer.watch_controller(changes.append) is None
        for _round in range(3):
            async with client(zk_connect) as a, client(zk_connect) as b:
                results = await asyncio.gather(a.try_elect_controller(1), b.try_elect_controller(2))
                winners = [r for r in results if r is not None]
                assert len(winners) == 1, results
                winner_id = 1 if results[0] is not None else 2
                assert await observer.get_controller_id() == winner_id
                epoch, zk_version = winners[0]
                assert await observer.get_controller_epoch() == (epoch, zk_version)
                epochs.append(epoch)
                await until(lambda w=winner_id: changes and changes[-1] == w, "the watch sees the winner")
                # the loser cannot take over while the winner lives
                loser = b if winner_id == 1 else a
                assert await loser.try_elect_controller(3 - winner_id) is None
            await until(lambda: changes[-1] is None, "the watch sees the controller gone")
    assert epochs == sorted(set(epochs)) and epochs[0] == 1 and len(epochs) == 3


@run
async def test_zombie_controller_is_fenced(zk_connect):
    state = LeaderIsrState(leader=1, leader_epoch=0, isr=(1, 2), controller_epoch=1)
    async with client(zk_connect) as old, client(zk_connect) as new:
        old_epoch, old_version = await old.try_elect_controller(1)
        await old.create_topic("t", uuid.uuid4(), {0: [1, 2], 1: [2, 1]}, {})
        assert await old.create_partition_states("t", {0: state}, old_version) == {0: 0}
        # the old controller's session expires (ephemeral /controller gone) but it does
        # not know yet: a zombie. Another broker wins.
        await expire_session(zk_connect, old)
        await until(lambda: old.connected, "the zombie reconnected")
        new_epoch, new_version = await new.try_elect_controller(2)
        assert new_epoch == old_epoch + 1
        bumped = LeaderIsrState(2, 1, (2,), old_epoch)
        with pytest.raises(ControllerMoved):
            await old.update_partition_states({("t", 0): (bumped, 0)}, old_version)
        with pytest.raises(ControllerMoved):
            await old.create_partition_states("t", {1: state}, old_version)
        with pytest.raises(ControllerMoved):
            await old.delete_topic_znodes("t", old_version)
        assert (await new.get_partition_states("t")) == {0: (state, 0)}  # nothing written
        assert await new.update_partition_states({("t", 0): (bumped, 0)}, new_version) == {("t", 0): 1}
        assert await new.create_partition_states("t", {1: state}, new_version) == {1: 0}


@run
async def test_partition_state_conditional_updates(zk_connect):
    async with client(zk_connect) as zk:
        _, fence = await zk.try_elect_controller(1)
        await zk.create_topic("t", uuid.uuid4(), {0: [1], 1: [1]}, {})
        s0 = LeaderIsrState(1, 0, (1,), 1)
        assert await zk.create_partition_states("t", {0: s0, 1: s0}, fence) == {0: 0, 1: 0}
        again = await zk.create_partition_states("t", {0: s0}, fence)
        assert isinstance(again[0], BadVersion)  # it exists already
        s1 = LeaderIsrState(1, 1, (1,), 1)
        result = await zk.update_partition_states({("t", 0): (s1, 0), ("t", 1): (s1, 7), ("t", 9): (s1, 0)}, fence)
        assert result[("t", 0)] == 1
        assert isinstance(result[("t", 1)], BadVersion) and "zk version 7" in str(result[("t", 1)])
        assert isinstance(result[("t", 9)], NoSuchTopic)
        assert await zk.get_partition_states("t") == {0: (s1, 1), 1: (s0, 0)}
        # a second writer with the version it read: one of two concurrent writers wins
        both = await asyncio.gather(
            zk.update_partition_states({("t", 1): (s1, 0)}, fence),
            zk.update_partition_states({("t", 1): (LeaderIsrState(1, 2, (1,), 1), 0)}, fence),
        )
        assert sorted(type(r[("t", 1)]).__name__ for r in both) == ["BadVersion", "int"]
        assert await zk.get_partition_states("nope") == {}


# ---------------------------------------------------------------- topics and configs


@run
async def test_topics_create_read_watch_and_add_partitions(zk_connect):
    topic_id = uuid.uuid4()
    async with client(zk_connect) as zk, client(zk_connect) as other:
        names: list = []
        assert await other.watch_topics(names.append) == frozenset()
        await zk.create_topic("clicks", topic_id, {0: [1, 2], 1: [2, 1]}, {"retention.ms": "1000"})
        with pytest.raises(TopicExists, match="'clicks' already exists"):
            await other.create_topic("clicks", uuid.uuid4(), {0: [1]}, {})
        await until(lambda: names and names[-1] == {"clicks"}, "the topic watch")
        assert await other.get_topic_names() == {"clicks"}
        assert await other.get_topic("clicks") == (topic_id, {0: [1, 2], 1: [2, 1]}, 0)
        assert await other.get_topic_configs("clicks") == {"retention.ms": "1000"}
        r = raw(zk_connect)
        try:  # the node is Kafka's v3 JSON with the topic id in Kafka's base64
            data, _ = r.get(TopicZNode.path("clicks"))
            assert TopicZNode.decode("clicks", data).topic_id == topic_id and b'"version":3' in data
        finally:
            r.stop()
            r.close()
        with pytest.raises(NoSuchTopic):
            await zk.get_topic("views")

        changes: list = []
        assert (await other.watch_topic("clicks", changes.append))[2] == 0
        assert await zk.set_topic_assignment("clicks", topic_id, {0: [1, 2], 1: [2, 1], 2: [1, 2]}, 0) == 1
        await until(
            lambda: changes and changes[-1] == (topic_id, {0: [1, 2], 1: [2, 1], 2: [1, 2]}, 1),
            "the partition addition",
        )
        with pytest.raises(BadVersion):
            await zk.set_topic_assignment("clicks", topic_id, {0: [1]}, 0)
        with pytest.raises(NoSuchTopic):
            await zk.set_topic_assignment("views", None, {0: [1]}, 0)
        other.unwatch_topic("clicks")
        await zk.set_topic_assignment("clicks", topic_id, {0: [2, 1]}, 1)
        await asyncio.sleep(0.2)
        assert changes[-1][2] == 1  # unwatched: no more calls


@run
async def test_topic_configs_and_change_notifications(zk_connect):
    async with client(zk_connect) as zk, client(zk_connect) as other:
        await zk.create_topic("old", uuid.uuid4(), {0: [1]}, {})
        await zk.set_topic_configs("old", {"retention.ms": "1"})  # before the watch: not delivered
        changes: list = []
        await other.watch_config_changes(changes.append)
        await zk.create_topic("clicks", uuid.uuid4(), {0: [1]}, {})
        await zk.set_topic_configs("clicks", {"cleanup.policy": "compact"})
        await zk.set_topic_configs("old", {})
        await until(lambda: sum(changes, []) == ["topics/clicks", "topics/old"], "two notifications")
        assert await other.get_topic_configs("clicks") == {"cleanup.policy": "compact"}
        assert await other.get_topic_configs("old") == {}
        assert await other.get_topic_configs("views") == {}
        with pytest.raises(NoSuchTopic):
            await zk.set_topic_configs("views", {"retention.ms": "1"})


@run
async def test_topic_deletion(zk_connect):
    async with client(zk_connect) as zk:
        _, fence = await zk.try_elect_controller(1)
        marked: list = []
        assert await zk.watch_topic_deletions(marked.append) == frozenset()
        names: list = []
        await zk.watch_topics(names.append)
        await zk.create_topic("t", uuid.uuid4(), {0: [1], 1: [1]}, {"retention.ms": "5"})
        await zk.create_partition_states(
            "t", {0: LeaderIsrState(1, 0, (1,), 1), 1: LeaderIsrState(1, 0, (1,), 1)}, fence
        )
        await zk.mark_topic_for_deletion("t")
        await zk.mark_topic_for_deletion("t")  # twice is fine
        with pytest.raises(NoSuchTopic):
            await zk.mark_topic_for_deletion("views")
        await until(lambda: marked and marked[-1] == {"t"}, "the deletion watch")
        assert await zk.get_topics_marked_for_deletion() == {"t"}
        with pytest.raises(TopicExists):  # still there until deleted
            await zk.create_topic("t", uuid.uuid4(), {0: [1]}, {})
        await zk.delete_topic_znodes("t", fence)
        await until(lambda: marked[-1] == frozenset() and names[-1] == frozenset(), "topic and marker gone")
        assert await zk.get_topic_configs("t") == {} and await zk.get_partition_states("t") == {}
        await zk.delete_topic_znodes("t", fence)  # nothing left: fine
        await zk.create_topic("t", uuid.uuid4(), {0: [1]}, {})  # the name is free again


@run
async def test_preferred_replica_election_node(zk_connect):
    async with client(zk_connect) as zk:
        _, fence = await zk.try_elect_controller(1)
        seen: list = []
        assert await zk.watch_preferred_replica_election(seen.append) == frozenset()
        await zk.create_preferred_replica_election([TopicPartition("t", 0), TopicPartition("t", 1)])
        with pytest.raises(StoreError, match="already in progress"):
            await zk.create_preferred_replica_election([TopicPartition("t", 2)])
        await until(lambda: seen and seen[-1] == {TopicPartition("t", 0), TopicPartition("t", 1)}, "the request")
        assert await zk.get_preferred_replica_election() == seen[-1]
        with pytest.raises(ControllerMoved):
            await zk.delete_preferred_replica_election(fence + 1)
        await zk.delete_preferred_replica_election(fence)
        await until(lambda: seen[-1] == frozenset(), "the request handled")


@run
async def test_producer_id_blocks_are_disjoint_across_brokers(zk_connect):
    async with client(zk_connect) as a, client(zk_connect) as b:
        blocks = await asyncio.gather(*(zk.allocate_producer_id_block(i, 100) for i in range(8) for zk in (a, b)))
        blocks = sorted(blocks)
        assert blocks[0] == (0, 99)
        assert all(nxt[0] == prev[1] + 1 and nxt[1] - nxt[0] == 99 for prev, nxt in zip(blocks, blocks[1:]))
        assert await a.allocate_producer_id_block(1) == (1600, 2599)


# ---------------------------------------------------------------- sessions


@run
async def test_session_expiry_removes_the_registration_and_a_new_session_reregisters(zk_connect):
    async with client(zk_connect) as watcher, client(zk_connect) as broker:
        ids: list = []
        await watcher.watch_broker_ids(ids.append)
        own: list = []  # a watch of the client whose session expires
        await broker.watch_broker_ids(own.append)
        events: list = []
        threads: set = set()

        def on_event(event: SessionEvent) -> None:
            events.append(event)
            threads.add(threading.get_ident())
            if event is SessionEvent.NEW_SESSION:  # what the broker does: register again
                asyncio.ensure_future(broker.register_broker(registration(1)))

        broker.add_session_listener(on_event)
        first_epoch = await broker.register_broker(registration(1))
        await until(lambda: ids and ids[-1] == {1}, "registered")
        old_session = broker.session_id
        await expire_session(zk_connect, broker)
        await until(lambda: {1} in ids[:-1] and frozenset() in ids, "the registration gone")
        await until(lambda: ids[-1] == {1}, "registered again")
        assert events[-2:] == [SessionEvent.EXPIRED, SessionEvent.NEW_SESSION]
        assert threads == {threading.get_ident()}
        assert broker.session_id != old_session
        ((_, epoch),) = (await watcher.get_brokers_and_epochs()).values()
        assert epoch > first_epoch  # a new broker epoch
        await until(lambda: own and own[-1] == {1}, "the expired client's watch, re-armed")
        async with client(zk_connect) as b:
            await b.register_broker(registration(2))
            await until(lambda: own[-1] == {1, 2}, "the re-armed watch still firing")


@run
async def test_zookeeper_killed_and_restarted_operations_resume(own_zookeeper):
    server = own_zookeeper
    async with client(server.chroot("kb"), session_timeout_ms=6000, connection_timeout_ms=20000) as zk:
        events: list = []
        zk.add_session_listener(events.append)
        await zk.register_broker(registration(1))
        ids: list = []
        assert await zk.watch_broker_ids(ids.append) == {1}
        await asyncio.to_thread(server.kill)
        await until(lambda: SessionEvent.DISCONNECTED in events, "the disconnection")
        pending = asyncio.ensure_future(zk.get_or_create_cluster_id("cluster-during-outage"))
        await asyncio.sleep(0.3)
        assert not pending.done()  # waiting for ZooKeeper, not failing
        server.start()
        assert await asyncio.wait_for(pending, 15) == "cluster-during-outage"
        await until(lambda: events[-1] in (SessionEvent.RECONNECTED, SessionEvent.NEW_SESSION), "reconnection")
        if events[-1] is SessionEvent.RECONNECTED:  # the session survived: so did the registration
            assert (await zk.get_brokers()).keys() == {1}
            # re-read after the reconnection: the same ids (delivered again, since a broker
            # may have registered again meanwhile under the same id)
            assert all(i == {1} for i in ids), ids
        assert await zk.get_or_create_cluster_id("other") == "cluster-during-outage"
        async with client(server.chroot("kb")) as other:  # the watch was re-armed
            await other.register_broker(registration(2))
            await until(lambda: ids and 2 in ids[-1], "broker 2 seen after the restart")


@run
async def test_zookeeper_down_longer_than_the_connection_timeout(own_zookeeper):
    server = own_zookeeper
    async with client(server.connect, connection_timeout_ms=1000) as zk:
        server.kill()
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match=f"ZooKeeper at {server.connect} is unreachable"):
            await zk.get_brokers()
        assert time.monotonic() - started < 10
        server.start()
        await until(lambda: zk.connected, "reconnected")
        assert await zk.get_brokers() == {}

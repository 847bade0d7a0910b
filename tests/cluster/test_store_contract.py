"""Both metadata stores, KafkaZkClient on a real ZooKeeper and the embedded FileMetadataStore,
raise the same classes of broker/cluster/store/errors.py for the same situations: a topic
that exists, a topic (or partition state) that does not, a conditional write at a stale
version, a write fenced by a controller epoch that a newer controller has replaced. The
callers (topic administration, the broker, the controller) catch these classes whichever
store is configured. The file store's runs need no ZooKeeper."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import uuid

import pytest
from kazoo.client import KazooClient

from broker.cluster.store import errors
from broker.cluster.store.file import FileMetadataStore
from broker.cluster.store.zkclient import KafkaZkClient
from broker.cluster.store.znodes import ControllerZNode, LeaderIsrState

pytestmark = pytest.mark.timeout(60)


class FileBackend:
    def __init__(self, directory: str):
        self.directory = directory

    @contextlib.asynccontextmanager
    async def open(self):
        store = FileMetadataStore(self.directory)
        await store.start()
        try:
            yield store
        finally:
            await store.close()

    async def elect_another_controller(self, store) -> None:
        """A broker alone wins every election: each one is a new controller epoch."""
        assert await store.try_elect_controller(1) is not None


class ZooKeeperBackend:
    def __init__(self, connect: str):
        self.connect = connect
        self.others: list[KafkaZkClient] = []

    @contextlib.asynccontextmanager
    async def open(self):
        store = KafkaZkClient(self.connect, session_timeout_ms=4000)
        await store.start()
        try:
            yield store
        finally:
            await store.close()
            for other in self.others:
                await other.close()

    async def elect_another_controller(self, store) -> None:
        """The controller's /controller is gone (as when its session expires) and another
        broker is elected: the old controller does not know yet."""

        def delete_controller() -> None:
            raw = KazooClient(self.connect, timeout=4)
            raw.start(timeout=10)
            try:
                raw.delete(ControllerZNode.PATH)
            finally:
                raw.stop()
                raw.close()

        await asyncio.to_thread(delete_controller)
        other = KafkaZkClient(self.connect, session_timeout_ms=4000)
        self.others.append(other)
        await other.start()
        assert await other.try_elect_controller(2) is not None


@pytest.fixture(params=["file", "zookeeper"])
def backend(request, tmp_path):
    if request.param == "file":
        return FileBackend(str(tmp_path))
    return ZooKeeperBackend(request.getfixturevalue("zk_connect"))


def run(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return asyncio.run(asyncio.wait_for(fn(*args, **kwargs), 30))

    return wrapper


def raises(cls):
    """pytest.raises, and the error is exactly errors.py's class (not a look-alike)."""

    class Exactly(contextlib.AbstractContextManager):
        def __enter__(self):
            self.ctx = pytest.raises(cls)
            self.info = self.ctx.__enter__()
            return self.info

        def __exit__(self, *exc):
            suppressed = self.ctx.__exit__(*exc)
            assert type(self.info.value) is cls, type(self.info.value)
            return suppressed

    return Exactly()


STATE = LeaderIsrState(leader=1, leader_epoch=0, isr=(1,), controller_epoch=1)


@run
async def test_topic_exists(backend):
    async with backend.open() as store:
        await store.create_topic("t", uuid.uuid4(), {0: [1]}, {})
        with raises(errors.TopicExists):
            await store.create_topic("t", uuid.uuid4(), {0: [1]}, {})
        await store.mark_topic_for_deletion("t")
        with raises(errors.TopicExists):  # until the controller has deleted it
            await store.create_topic("t", uuid.uuid4(), {0: [1]}, {})


@run
async def test_no_such_topic(backend):
    async with backend.open() as store:
        with raises(errors.NoSuchTopic):
            await store.get_topic("nope")
        with raises(errors.NoSuchTopic):
            await store.set_topic_assignment("nope", None, {0: [1]}, 0)
        with raises(errors.NoSuchTopic):
            await store.set_topic_configs("nope", {"retention.ms": "1"})
        with raises(errors.NoSuchTopic):
            await store.mark_topic_for_deletion("nope")
        assert await store.get_topic_names() == frozenset()  # none of them created it


@run
async def test_bad_version(backend):
    async with backend.open() as store:
        topic_id = uuid.uuid4()
        await store.create_topic("t", topic_id, {0: [1]}, {})
        assert await store.set_topic_assignment("t", topic_id, {0: [1], 1: [1]}, 0) == 1
        with raises(errors.BadVersion):  # written at version 0 by someone else first
            await store.set_topic_assignment("t", topic_id, {0: [1], 1: [1], 2: [1]}, 0)
        assert (await store.get_topic("t"))[1] == {0: [1], 1: [1]}


@run
async def test_partition_state_results_are_the_same_classes(backend):
    async with backend.open() as store:
        _, fence = await store.try_elect_controller(1)
        await store.create_topic("t", uuid.uuid4(), {0: [1], 1: [1]}, {})
        assert await store.create_partition_states("t", {0: STATE}, fence) == {0: 0}
        again = await store.create_partition_states("t", {0: STATE, 1: STATE}, fence)
        assert type(again[0]) is errors.BadVersion and again[1] == 0
        moved = LeaderIsrState(1, 1, (1,), 1)
        result = await store.update_partition_states(
            {("t", 0): (moved, 0), ("t", 1): (moved, 5), ("t", 2): (moved, 0), ("nope", 0): (moved, 0)}, fence
        )
        assert result[("t", 0)] == 1
        assert type(result[("t", 1)]) is errors.BadVersion
        assert type(result[("t", 2)]) is errors.NoSuchTopic
        assert type(result[("nope", 0)]) is errors.NoSuchTopic
        assert await store.get_partition_states("t") == {0: (moved, 1), 1: (STATE, 0)}


@run
async def test_controller_moved(backend):
    async with backend.open() as store:
        _, fence = await store.try_elect_controller(1)
        await store.create_topic("t", uuid.uuid4(), {0: [1], 1: [1]}, {})
        assert await store.create_partition_states("t", {0: STATE}, fence) == {0: 0}
        await backend.elect_another_controller(store)
        moved = LeaderIsrState(1, 1, (1,), 1)
        with raises(errors.ControllerMoved):
            await store.update_partition_states({("t", 0): (moved, 0)}, fence)
        with raises(errors.ControllerMoved):
            await store.create_partition_states("t", {1: STATE}, fence)
        with raises(errors.ControllerMoved):
            await store.delete_topic_znodes("t", fence)
        # nothing written by the replaced controller
        assert await store.get_partition_states("t") == {0: (STATE, 0)}
        assert await store.get_topic_names() == {"t"}


@run
async def test_reassignment_in_the_topic_node(backend):
    """KIP-455's adding/removing replicas live in the topic node (Kafka 3.x's version 3
    JSON); the controller's write is conditional on the node's version and fenced by the
    controller epoch; a partition addition keeps them."""
    from broker.cluster.store.znodes import TopicAssignment

    async with backend.open() as store:
        _, fence = await store.try_elect_controller(1)
        topic_id = uuid.uuid4()
        await store.create_topic("t", topic_id, {0: [1, 2], 1: [2, 1]}, {})
        got, version = await store.get_topic_assignment("t")
        assert got == TopicAssignment(topic_id, {0: (1, 2), 1: (2, 1)}) and version == 0
        moving = TopicAssignment(topic_id, {0: (3, 1, 2), 1: (2, 1)}, {0: (3,)}, {0: (1, 2)})
        assert await store.set_topic_reassignment("t", moving, 0, fence) == 1
        assert await store.get_topic_assignment("t") == (moving, 1)
        assert (await store.get_topic("t"))[1] == {0: [3, 1, 2], 1: [2, 1]}
        with raises(errors.BadVersion):
            await store.set_topic_reassignment("t", moving, 0, fence)
        with raises(errors.NoSuchTopic):
            await store.set_topic_reassignment("nope", moving, 0, fence)
        # a partition addition (topic administration's write) keeps them
        assert await store.set_topic_assignment("t", topic_id, {0: [3, 1, 2], 1: [2, 1], 2: [1, 2]}, 1) == 2
        grown = TopicAssignment(topic_id, {0: (3, 1, 2), 1: (2, 1), 2: (1, 2)}, {0: (3,)}, {0: (1, 2)})
        assert await store.get_topic_assignment("t") == (grown, 2)
        done = TopicAssignment(topic_id, {0: (3,), 1: (2, 1), 2: (1, 2)})
        assert await store.set_topic_reassignment("t", done, 2, fence) == 3
        await backend.elect_another_controller(store)
        with raises(errors.ControllerMoved):
            await store.set_topic_reassignment("t", moving, 3, fence)
        assert await store.get_topic_assignment("t") == (done, 3)  # nothing written


@run
async def test_user_credentials_and_acls_with_their_notifications(backend):
    """SCRAM credentials under /config/users and ACLs under /kafka-acl (Kafka's layout in
    ZooKeeper), read back alike from both stores; a change is announced to a watcher (on
    ZooKeeper: another client's write, seen through /config/changes and /kafka-acl-changes
    within a second)."""
    from broker.security.acl import AclBinding, Operation, PatternType, Permission, ResourceType

    async with backend.open() as store:
        users: list = []
        acls: list = []
        await store.watch_config_changes(users.extend)
        await store.watch_acl_changes(acls.extend)
        writer = store
        if isinstance(backend, ZooKeeperBackend):
            writer = KafkaZkClient(backend.connect, session_timeout_ms=4000)
            backend.others.append(writer)
            await writer.start()
        await writer.set_user_config(
            "alice smith*", {"SCRAM-SHA-512": "salt=YQ==,stored_key=Yg==,server_key=Yw==,iterations=4096"}
        )
        literal = (ResourceType.TOPIC, "t", PatternType.LITERAL)
        prefixed = (ResourceType.GROUP, "g-", PatternType.PREFIXED)
        read = AclBinding(*literal, "User:alice", "*", Operation.READ, Permission.ALLOW)
        deny = AclBinding(*prefixed, "User:*", "10.0.0.0/8", Operation.ALL, Permission.DENY)
        new = await writer.update_acls({literal: lambda s: s | {read}, prefixed: lambda s: s | {deny}})
        assert new == {literal: {read}, prefixed: {deny}}
        deadline = asyncio.get_running_loop().time() + 1.0
        while (not users or len(acls) < 2) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert users == ["users/alice%20smith%2A"]
        assert sorted(acls) == sorted([literal, prefixed])
        assert (await store.get_user_configs()) == {
            "alice smith*": {"SCRAM-SHA-512": "salt=YQ==,stored_key=Yg==,server_key=Yw==,iterations=4096"}
        }
        assert sorted(await store.get_acls(), key=str) == sorted([read, deny], key=str)
        assert await store.get_resource_acls(prefixed) == [deny]
        await writer.update_acls({literal: lambda s: set()})
        assert await store.get_acls() == [deny]


@run
async def test_dynamic_broker_configs_with_their_notifications(backend):
    """Dynamic broker configs under /config/brokers/<id> and /config/brokers/<default>
    (Kafka's layout), read back alike from both stores, each change announced as
    brokers/<entity> (on ZooKeeper: another client's write, through /config/changes);
    the file store keeps them across a reopening."""
    async with backend.open() as store:
        changes: list = []
        await store.watch_config_changes(changes.extend)
        writer = store
        if isinstance(backend, ZooKeeperBackend):
            writer = KafkaZkClient(backend.connect, session_timeout_ms=4000)
            backend.others.append(writer)
            await writer.start()
        assert await store.get_broker_config("<default>") == {}
        await writer.set_broker_config("<default>", {"message.max.bytes": "2000"})
        await writer.set_broker_config("2", {"log.retention.ms": "1000", "max.connections": "9"})
        deadline = asyncio.get_running_loop().time() + 1.0
        while len(changes) < 2 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert changes == ["brokers/<default>", "brokers/2"]
        assert await store.get_broker_config("<default>") == {"message.max.bytes": "2000"}
        assert await store.get_broker_config("2") == {"log.retention.ms": "1000", "max.connections": "9"}
        await writer.set_broker_config("2", {})
        assert await store.get_broker_config("2") == {}
    async with backend.open() as store:
        assert await store.get_broker_config("<default>") == {"message.max.bytes": "2000"}


@run
async def test_group_configs_with_their_notifications(backend):
    """Group configs under /config/groups/<sanitized group id>, read back alike from both
    stores by group id (a "/" or a space in it, "." alone), each change announced as
    groups/<sanitized id>; an empty set removes the group's entry; the file store keeps
    them across a reopening."""
    async with backend.open() as store:
        changes: list = []
        await store.watch_config_changes(changes.extend)
        writer = store
        if isinstance(backend, ZooKeeperBackend):
            writer = KafkaZkClient(backend.connect, session_timeout_ms=4000)
            backend.others.append(writer)
            await writer.start()
        assert await store.get_group_configs() == {}
        await writer.set_group_config("orders/eu west", {"consumer.session.timeout.ms": "50000"})
        await writer.set_group_config(".", {"share.auto.offset.reset": "earliest"})
        await writer.set_group_config("gone", {"share.delivery.count.limit": "3"})
        await writer.set_group_config("gone", {})
        deadline = asyncio.get_running_loop().time() + 1.0
        while len(changes) < 4 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert changes == ["groups/orders%2Feu%20west", "groups/%2E", "groups/gone", "groups/gone"]
        assert await store.get_group_config("orders/eu west") == {"consumer.session.timeout.ms": "50000"}
        assert await store.get_group_configs() == {
            "orders/eu west": {"consumer.session.timeout.ms": "50000"},
            ".": {"share.auto.offset.reset": "earliest"},
        }
    async with backend.open() as store:
        assert await store.get_group_config(".") == {"share.auto.offset.reset": "earliest"}


@run
async def test_log_dir_events(backend):
    """A broker's log dir failure: /log_dir_event_notification/log_dir_event_<seq> with
    Kafka's JSON, seen by the controller's watch (on ZooKeeper, another client's write),
    read back with the broker's id, deleted only by the current controller."""
    async with backend.open() as store:
        _, fence = await store.try_elect_controller(1)
        seen: list = []
        await store.watch_log_dir_events(seen.append)
        writer = store
        if isinstance(backend, ZooKeeperBackend):
            writer = KafkaZkClient(backend.connect, session_timeout_ms=4000)
            backend.others.append(writer)
            await writer.start()
        await writer.create_log_dir_event_notification(2)
        await writer.create_log_dir_event_notification(3)
        deadline = asyncio.get_running_loop().time() + 2.0
        while not any(len(names) == 2 for names in seen) and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        events = await store.get_log_dir_events()
        assert sorted(events.values()) == [2, 3] and all(n.startswith("log_dir_event_") for n in events)
        assert any(sorted(names) == sorted(events) for names in seen)
        if isinstance(backend, ZooKeeperBackend):

            def raw_json() -> bytes:
                raw = KazooClient(backend.connect, timeout=4)
                raw.start(timeout=10)
                try:
                    name = min(events)
                    return raw.get(f"/log_dir_event_notification/{name}")[0]
                finally:
                    raw.stop()
                    raw.close()

            assert json.loads(await asyncio.to_thread(raw_json)) == {"version": 1, "broker": 2, "event": 1}
        first = min(events)
        await store.delete_log_dir_events([first], fence)
        assert list(await store.get_log_dir_events()) == [n for n in sorted(events) if n != first]
        await backend.elect_another_controller(store)
        with raises(errors.ControllerMoved):
            await store.delete_log_dir_events(list(events), fence)
        assert len(await store.get_log_dir_events()) == 1


@run
async def test_client_quota_entities_with_their_notifications(backend):
    """Quota entities under /config/users, /config/users/<u>/clients and /config/clients
    (names sanitized, <default> as is), read back alike from both stores, each change
    announced with its entity path; a user's quota beside its SCRAM credential in one map."""
    async with backend.open() as store:
        paths: list = []
        await store.watch_config_changes(paths.extend)
        writer = store
        if isinstance(backend, ZooKeeperBackend):
            writer = KafkaZkClient(backend.connect, session_timeout_ms=4000)
            backend.others.append(writer)
            await writer.start()
        scram = {"SCRAM-SHA-512": "salt=YQ==,stored_key=Yg==,server_key=Yw==,iterations=4096"}
        await writer.set_user_config("bob", scram)
        await writer.set_entity_config("users/bob", {**scram, "producer_byte_rate": "1024"})
        await writer.set_entity_config("users/<default>/clients/a%20b", {"consumer_byte_rate": "2048"})
        await writer.set_entity_config("clients/<default>", {"request_percentage": "50.0"})
        deadline = asyncio.get_running_loop().time() + 1.0
        while len(paths) < 4 and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert paths == ["users/bob", "users/bob", "users/<default>/clients/a%20b", "clients/<default>"]
        assert await store.get_client_quota_configs() == {
            "users/bob": {**scram, "producer_byte_rate": "1024"},
            "users/<default>/clients/a%20b": {"consumer_byte_rate": "2048"},
            "clients/<default>": {"request_percentage": "50.0"},
        } | ({"users/<default>": {}} if isinstance(backend, ZooKeeperBackend) else {})
        assert (await store.get_user_configs())["bob"] == {**scram, "producer_byte_rate": "1024"}
        assert await store.get_entity_config("users/<default>/clients/a%20b") == {"consumer_byte_rate": "2048"}
        await writer.set_entity_config("clients/<default>", {})
        assert await store.get_entity_config("clients/<default>") == {}
        with pytest.raises(ValueError):
            await store.get_entity_config("topics/t")


@run
async def test_finalized_features_fenced_watched_and_as_kafka_writes_them(backend):
    """/feature: absent at first (no level, epoch -1); written by the controller only
    (fenced by its epoch), created then updated, each write the next epoch (the znode's
    version); the watch sees each change; in ZooKeeper, Kafka's FeatureZNode JSON."""
    async with backend.open() as store:
        assert await store.get_finalized_features() == ({}, -1)
        _, fence = await store.try_elect_controller(1)
        seen: list = []
        assert await store.watch_finalized_features(seen.append) == ({}, -1)
        assert await store.set_finalized_features({"transaction.version": 1}, fence) == 0
        assert await store.set_finalized_features({"transaction.version": 2}, fence) == 1
        assert await store.get_finalized_features() == ({"transaction.version": 2}, 1)
        deadline = asyncio.get_running_loop().time() + 2.0
        while seen[-1:] != [({"transaction.version": 2}, 1)] and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)
        assert seen[-1] == ({"transaction.version": 2}, 1)
        if isinstance(backend, ZooKeeperBackend):

            def raw_json() -> bytes:
                raw = KazooClient(backend.connect, timeout=4)
                raw.start(timeout=10)
                try:
                    return raw.get("/feature")[0]
                finally:
                    raw.stop()
                    raw.close()

            assert json.loads(await asyncio.to_thread(raw_json)) == {
                "features": {"transaction.version": {"max_version_level": 2}},
                "version": 2,
                "status": 1,
            }
        await backend.elect_another_controller(store)
        with raises(errors.ControllerMoved):
            await store.set_finalized_features({"transaction.version": 1}, fence)
        assert await store.get_finalized_features() == ({"transaction.version": 2}, 1)

"""Topic administration's rules (broker/server/admin.py) over an in-memory metadata store
and metadata cache: what is refused with which error, what reaches the store, and what
the answer waits for — without ZooKeeper, sockets or processes."""

import asyncio
import uuid

import pytest

from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.cluster.store.errors import BadVersion, NoSuchTopic, TopicExists
from broker.config import BrokerConfig
from broker.log.manager import LogCapacityError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.server.admin import TopicAdmin

E = ErrorCode


class Store:
    """The metadata store's admin half, in memory; `fail` raises once from the next write."""

    def __init__(self):
        self.topics: dict[str, tuple[uuid.UUID, dict[int, list[int]], int]] = {}
        self.configs: dict[str, dict[str, str]] = {}
        self.marked: list[str] = []
        self.writes: list[tuple] = []
        self.fail: Exception | None = None
        self.reassigning: dict[str, dict[int, tuple[int, ...]]] = {}  # topic -> adding replicas

    def _maybe_fail(self):
        if self.fail is not None:
            exc, self.fail = self.fail, None
            raise exc

    async def create_topic(self, name, topic_id, assignment, configs):
        self._maybe_fail()
        self.writes.append(("create", name, dict(assignment), dict(configs)))
        self.topics[name] = (topic_id, {p: list(r) for p, r in assignment.items()}, 0)

    async def get_topic(self, name):
        if name not in self.topics:
            raise NoSuchTopic(name)
        return self.topics[name]

    async def get_topic_assignment(self, name):
        from broker.cluster.store.znodes import TopicAssignment

        topic_id, parts, version = await self.get_topic(name)
        return TopicAssignment(
            topic_id, {p: tuple(r) for p, r in parts.items()}, self.reassigning.get(name, {})
        ), version

    async def set_topic_assignment(self, name, topic_id, assignment, version):
        self._maybe_fail()
        self.writes.append(("assign", name, dict(assignment)))
        self.topics[name] = (topic_id, assignment, version + 1)

    async def mark_topic_for_deletion(self, name):
        self._maybe_fail()
        self.writes.append(("delete", name))
        self.marked.append(name)

    async def set_topic_configs(self, name, configs):
        self.writes.append(("configs", name, dict(configs)))
        self.configs[name] = dict(configs)


class Cache:
    """The metadata cache as admin reads it; `online` decides whether wait_for sees the
    controller's work done (a controller that acts at once) or never (one that is slow)."""

    def __init__(self, store: Store, brokers=(1, 2, 3)):
        self.store = store
        self._brokers = {b: BrokerInfo(b, "127.0.0.1", 9000 + b, rack=None) for b in brokers}
        self.online = True
        self.waited: list[float] = []

    def brokers(self):
        return self._brokers

    def topic(self, name):
        if name in self.store.marked or name not in self.store.topics:
            return None
        topic_id, assignment, _ = self.store.topics[name]
        parts = {p: PartitionState(p, r, r[0] if self.online else -1, 0, list(r)) for p, r in assignment.items()}
        return TopicInfo(name, topic_id, parts, dict(self.store.configs.get(name, {})))

    async def wait_for(self, predicate, timeout):
        self.waited.append(timeout)
        return predicate() if self.online else False


def make(capacity=None, **config):
    cfg = BrokerConfig({"broker.id": 1, "num.partitions": 2, "default.replication.factor": 2, **config})
    store = Store()
    cache = Cache(store)
    admin = TopicAdmin(cfg, store, cache, capacity or (lambda n: None))
    return admin, store, cache


def code_of(coro) -> int:
    with pytest.raises(KafkaProtocolError) as info:
        asyncio.run(coro)
    return info.value.code


def test_a_topic_is_created_with_the_broker_defaults():
    admin, store, _ = make()
    info = asyncio.run(admin.create_topic("t"))
    assert len(info.partitions) == 2 and info.replication_factor == 2
    ((what, name, assignment, configs),) = store.writes
    assert (what, name, configs) == ("create", "t", {})
    assert all(len(set(r)) == 2 and set(r) <= {1, 2, 3} for r in assignment.values())


@pytest.mark.parametrize(
    "name, kwargs, code",
    [
        ("bad/name", {}, E.INVALID_TOPIC_EXCEPTION),
        ("t", {"configs": {"cleanup.policy": "sometimes"}}, E.INVALID_CONFIG),
        ("t", {"num_partitions": 3, "assignments": {0: [1], 1: [2]}}, E.INVALID_REQUEST),
        ("t", {"replication_factor": 1, "assignments": {0: [1]}}, E.INVALID_REQUEST),
        ("t", {"assignments": {0: [1, 1]}}, E.INVALID_REPLICA_ASSIGNMENT),
        ("t", {"assignments": {0: [1, 9]}}, E.INVALID_REPLICA_ASSIGNMENT),
        ("t", {"assignments": {0: []}}, E.INVALID_REPLICA_ASSIGNMENT),
        ("t", {"assignments": {0: [1], 2: [2]}}, E.INVALID_REPLICA_ASSIGNMENT),
        ("t", {"replication_factor": 4}, E.INVALID_REPLICATION_FACTOR),
    ],
)
def test_an_invalid_create_is_refused_and_writes_nothing(name, kwargs, code):
    admin, store, _ = make()
    assert code_of(admin.create_topic(name, **kwargs)) == code
    assert store.writes == []


def test_an_existing_topic_is_refused_before_the_store_and_in_a_race_with_it():
    admin, store, _ = make()
    asyncio.run(admin.create_topic("t"))
    assert code_of(admin.create_topic("t")) == E.TOPIC_ALREADY_EXISTS
    store.fail = TopicExists("t")  # another broker created it meanwhile
    assert code_of(admin.create_topic("u")) == E.TOPIC_ALREADY_EXISTS
    assert [w[1] for w in store.writes] == ["t"]


def test_a_topic_this_broker_cannot_open_is_not_created():
    def full(n):
        if n:
            raise LogCapacityError(f"{n} more logs do not fit")

    admin, store, _ = make(capacity=full)
    assert code_of(admin.create_topic("t", assignments={0: [1], 1: [2]})) == E.POLICY_VIOLATION
    assert store.writes == []
    # partitions elsewhere do not count against this broker
    asyncio.run(admin.create_topic("t", assignments={0: [2], 1: [3]}))
    assert store.writes[0][1] == "t"


def test_the_answer_waits_for_leaders_and_times_out_without_them():
    admin, store, cache = make()
    cache.online = False
    assert code_of(admin.create_topic("t", timeout_ms=1500)) == E.REQUEST_TIMED_OUT
    assert store.writes[0][:2] == ("create", "t")  # written: the controller finishes later
    assert cache.waited == [1.5]


def test_auto_creation_follows_the_setting_and_the_name_rules():
    admin, store, _ = make(**{"auto.create.topics.enable": False})
    assert asyncio.run(admin.auto_create_topic("t")) is None
    admin, store, _ = make()
    assert asyncio.run(admin.auto_create_topic("bad/name")) is None
    assert store.writes == []
    assert asyncio.run(admin.auto_create_topic("t")).name == "t"
    assert asyncio.run(admin.auto_create_topic("t")).name == "t"  # already there: no error
    assert len(store.writes) == 1


def test_deletion_rules():
    admin, store, _ = make(**{"delete.topic.enable": False})
    asyncio.run(admin.create_topic("t"))
    assert code_of(admin.delete_topic("t")) == E.TOPIC_DELETION_DISABLED
    admin, store, _ = make()
    assert code_of(admin.delete_topic("nope")) == E.UNKNOWN_TOPIC_OR_PARTITION
    asyncio.run(admin.create_topic("t"))
    asyncio.run(admin.delete_topic("t"))
    assert store.writes[-1] == ("delete", "t")


@pytest.mark.parametrize(
    "count, assignments, code",
    [
        (2, None, E.INVALID_PARTITIONS),
        (1, None, E.INVALID_PARTITIONS),
        (4, [[1, 2]], E.INVALID_REPLICA_ASSIGNMENT),
        (3, [[1, 1]], E.INVALID_REPLICA_ASSIGNMENT),
        (3, [[1, 7]], E.INVALID_REPLICA_ASSIGNMENT),
    ],
)
def test_invalid_new_partitions_are_refused(count, assignments, code):
    admin, store, _ = make()
    asyncio.run(admin.create_topic("t"))
    assert code_of(admin.create_partitions("t", count, assignments)) == code
    assert [w[0] for w in store.writes] == ["create"]


def test_new_partitions_keep_the_old_assignment_and_validate_only_writes_nothing():
    admin, store, _ = make()
    asyncio.run(admin.create_topic("t"))
    before = store.topics["t"][1]
    asyncio.run(admin.create_partitions("t", 4, validate_only=True))
    assert [w[0] for w in store.writes] == ["create"]
    asyncio.run(admin.create_partitions("t", 4, [[3, 1], [2, 3]]))
    assert store.writes[-1] == ("assign", "t", {**before, 2: [3, 1], 3: [2, 3]})


def test_new_partitions_refused_when_the_assignment_moved_meanwhile():
    admin, store, _ = make()
    asyncio.run(admin.create_topic("t"))
    store.fail = BadVersion("t")
    assert code_of(admin.create_partitions("t", 3)) == E.REASSIGNMENT_IN_PROGRESS
    assert code_of(admin.create_partitions("nope", 3)) == E.UNKNOWN_TOPIC_OR_PARTITION


def test_new_partitions_refused_while_a_reassignment_is_in_progress():
    """As Kafka's addPartitions: the topic node carries adding/removing replicas the
    controller is working through; a new partition waits for the end."""
    admin, store, _ = make()
    asyncio.run(admin.create_topic("t"))
    store.reassigning["t"] = {0: (3,)}
    assert code_of(admin.create_partitions("t", 3)) == E.REASSIGNMENT_IN_PROGRESS
    assert [w[0] for w in store.writes] == ["create"]


def test_topic_configs_are_validated_and_validate_only_writes_nothing():
    admin, store, _ = make()
    asyncio.run(admin.create_topic("t"))
    assert code_of(admin.set_topic_configs("t", {"retention.ms": "soon"})) == E.INVALID_CONFIG
    assert code_of(admin.set_topic_configs("nope", {"retention.ms": "1000"})) == E.UNKNOWN_TOPIC_OR_PARTITION
    asyncio.run(admin.set_topic_configs("t", {"retention.ms": "1000"}, validate_only=True))
    assert [w[0] for w in store.writes] == ["create"]
    asyncio.run(admin.set_topic_configs("t", {"retention.ms": "1000"}))
    assert store.writes[-1] == ("configs", "t", {"retention.ms": "1000"})

"""KafkaZkClient: the cluster's ZooKeeper operations (Kafka's kafka.zk.KafkaZkClient and
the parts of AdminZkClient and ZkProducerIdManager the cluster needs), as coroutines, on
Kafka's znodes (znodes.py: paths and JSON).

It is built on a ZkSession (zksession.py, Kafka's ZooKeeperClient), which owns the kazoo
client, the connection and session, the thread -> loop bridge and re-armed watches:
every operation here is a sequence of the session's requests (`op`, `get`, `children`,
`commit`, `watch`...). Its invariants hold here: every method is called on the loop
that called `start()`, nothing blocks the loop, watch callbacks and session listeners
run on the loop; an operation issued while the connection is down waits for it (up to
`connection_timeout_ms`, then StoreUnavailable) and one in flight during a loss is sent
again, so creates and multi-ops here are written so that a repeat is recognised (a
NodeExists for this session's own node, a BadVersion for a state already written).

Fencing, as Kafka's controller: partition states and topic deletions are written in a
multi-op whose first op checks /controller_epoch's zk version, so the writes of a
controller that lost the election fail with ControllerMoved. Partition states are also
conditional on their own zk version (the partition epoch): BadVersion.

Errors: every method raises errors.py's StoreError and its subclasses (StoreUnavailable,
BrokerIdInUse, TopicExists, NoSuchTopic, BadVersion, ControllerMoved), the same classes
as the embedded store (file.py) for the same situations; a kazoo error that a method
does not translate leaves as a plain StoreError (`_public`); znodes.ZNodeDataError for a
znode whose data cannot be decoded. kazoo is imported only here and in zksession.py,
and only a broker with `zookeeper.connect` imports this module.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

from kazoo.exceptions import (
    BadVersionError,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from broker.cluster.metadata import SessionEvent
from broker.cluster.store import acls as acl_store
from broker.cluster.store.errors import (
    BadVersion,
    BrokerIdInUse,
    ControllerMoved,
    NoSuchTopic,
    StoreError,
    TopicExists,
)
from broker.cluster.store.zksession import (
    DEFAULT_SESSION_TIMEOUT_MS,
    KazooWatcher,
    Watch,
    ZkSession,
    ZnodeStat,
)
from broker.cluster.store.znodes import (
    INT64_MAX,
    PERSISTENT_PATHS,
    AclZNodes,
    BrokerIdsZNode,
    BrokerIdZNode,
    BrokerRegistration,
    ClusterIdZNode,
    ConfigEntityChangeNotificationSequenceZNode,
    ConfigEntityChangeNotificationZNode,
    ConfigEntityTypeZNode,
    ConfigEntityZNode,
    ControllerEpochZNode,
    ControllerRegistration,
    ControllerZNode,
    DeleteTopicsTopicZNode,
    DeleteTopicsZNode,
    FeatureZNode,
    LeaderIsrState,
    LogDirEventNotificationSequenceZNode,
    LogDirEventNotificationZNode,
    PreferredReplicaElectionZNode,
    ProducerIdBlock,
    ProducerIdBlockZNode,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
    TopicsZNode,
    TopicZNode,
    ZNodeDataError,
    desanitize,
    group_znode_name,
    sanitize,
    sequence_number,
)
from broker.log import TopicPartition
from broker.metrics.stats import Histogram
from broker.security.acl import AclBinding, PatternType, ResourceType

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
K = TypeVar("K")
#: get_topic's value: (topic id, {partition: replicas}, zk version)
TopicValue = tuple[uuid.UUID | None, dict[int, list[int]], int]

#: holder_gone(registered): why the broker holding a registration is gone, or None
HolderGone = Callable[[BrokerRegistration], Awaitable[str | None]]

CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka purges config change notifications this old
#: beyond the session timeout, how late ZooKeeper may expire a session (its expiry runs
#: once per tick: tickTime is 2000 ms in ZooKeeper's sample configuration)
EXPIRY_SLACK_MS = 2000
#: how often a broker waiting for a dead session's registration to go looks again
EXPIRY_POLL_S = 0.25
PRODUCER_ID_BLOCK_SIZE = 1000


def _public(
    fn: Callable[Concatenate[KafkaZkClient, P], Awaitable[T]],
) -> Callable[Concatenate[KafkaZkClient, P], Coroutine[Any, Any, T]]:
    """Any kazoo error that a method does not translate itself leaves as a StoreError."""

    @functools.wraps(fn)
    async def wrapper(self: KafkaZkClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await fn(self, *args, **kwargs)
        except KazooException as e:
            raise StoreError(f"ZooKeeper {fn.__name__} failed: {type(e).__name__} {e}".rstrip()) from e

    return wrapper


def _multi_error(results: list[Any]) -> tuple[int, Exception] | None:
    """The failed op of a multi-op (index, error), or None if it succeeded. The ops that
    did not fail themselves report RolledBackError / RuntimeInconsistency."""
    for i, r in enumerate(results):
        if isinstance(r, Exception) and not isinstance(r, (RolledBackError, RuntimeInconsistency)):
            return i, r
    return None


class KafkaZkClient:
    """See the module docstring. `connect` is ZooKeeper's connect string with an
    optional chroot ('h1:2181,h2:2181/kb'); ValueError at once if it is malformed."""

    def __init__(
        self,
        connect: str,
        *,
        session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
        connection_timeout_ms: int | None = None,
    ):
        self.connect = connect
        self._session = ZkSession(
            connect, session_timeout_ms=session_timeout_ms, connection_timeout_ms=connection_timeout_ms
        )
        self._topic_watches: dict[str, list[Watch]] = {}

    # ------------------------------------------------------------ session

    @property
    def connected(self) -> bool:
        return self._session.connected

    @property
    def request_latency(self) -> Histogram:
        """Round trips of its requests in seconds (Kafka's ZooKeeperRequestLatencyMs)."""
        return self._session.latency

    @property
    def session_id(self) -> int | None:
        return self._session.session_id

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password): what a second client needs to take over (and so
        expire) this session, as ZooKeeper's own tests do."""
        return self._session.client_id

    async def start(self) -> None:
        """Connects (retrying until connection_timeout_ms, then StoreUnavailable), creates
        the chroot if missing, then Kafka's persistent paths."""
        await self._session.start()
        await asyncio.gather(*(self._session.ensure_path(path) for path in PERSISTENT_PATHS))

    async def close(self) -> None:
        """Closes the session: ZooKeeper deletes this client's ephemeral nodes at once."""
        self._topic_watches.clear()
        await self._session.close()

    def add_session_listener(self, callback: Callable[[SessionEvent], None]) -> None:
        self._session.add_session_listener(callback)

    @property
    def _zk(self) -> Any:
        """The kazoo client, to build the session's requests (kazoo has no type stubs)."""
        return self._session.kazoo

    # ------------------------------------------------------------ cluster id

    @_public
    async def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster id in /cluster/id, created as `proposed` if there is none."""
        while True:
            try:
                await self._session.op(
                    lambda: self._zk.create_async(ClusterIdZNode.PATH, ClusterIdZNode.encode(proposed), makepath=True)
                )
                return proposed
            except NodeExistsError:
                got = await self._session.get(ClusterIdZNode.PATH)
                if got is not None:
                    return ClusterIdZNode.decode(got[0])

    # ------------------------------------------------------------ brokers

    @_public
    async def register_broker(self, registration: BrokerRegistration, holder_gone: HolderGone | None = None) -> int:
        """Creates the ephemeral /brokers/ids/<id>; returns the broker epoch (the node's
        czxid, as Kafka). A node left by one of this client's own earlier sessions is
        replaced (Kafka's KAFKA-7165). Another session's node: BrokerIdInUse at once,
        unless `holder_gone(registered)` gives a reason why the broker that holds it is
        gone (broker/cluster/registration.py: a broker killed -9 whose session ZooKeeper
        has not expired yet); then this waits, saying so in one log line, until ZooKeeper
        deletes the node, at most the session timeout plus EXPIRY_SLACK_MS, and registers;
        BrokerIdInUse(live=False) if the node is still there then."""
        path = BrokerIdZNode.path(registration.broker_id)
        data = BrokerIdZNode.encode(registration)
        waiting_for: int | None = None  # the holding session whose expiry is awaited
        deadline = 0.0
        wait_ms = self._session.session_timeout_ms + EXPIRY_SLACK_MS
        while True:
            try:
                _, stat = cast(
                    "tuple[str, ZnodeStat]",
                    await self._session.op(
                        lambda: self._zk.create_async(path, data, ephemeral=True, include_data=True)
                    ),
                )
                log.info("registered broker %d at %s, broker epoch %d", registration.broker_id, path, stat.czxid)
                return stat.czxid
            except NodeExistsError:
                pass
            got = await self._session.get(path)
            if got is None:
                continue  # gone meanwhile: create again
            owner = got[1].ephemeralOwner
            if owner == self.session_id:
                return got[1].czxid  # ours: a create repeated after a connection loss
            if self._session.is_own_session(owner):
                try:
                    await self._session.op(lambda: self._zk.delete_async(path, version=got[1].version))
                except (NoNodeError, BadVersionError):
                    pass
                continue
            if owner != waiting_for:  # a holder not judged yet
                why = None
                if holder_gone is not None:
                    try:
                        why = await holder_gone(BrokerIdZNode.decode(registration.broker_id, got[0]))
                    except ZNodeDataError:
                        why = None  # unreadable: nothing says its broker is gone
                if why is None:
                    raise BrokerIdInUse(
                        f"broker id {registration.broker_id} is already registered in ZooKeeper "
                        f"at {self.connect} (by session 0x{owner:x})"
                    )
                waiting_for, deadline = owner, time.monotonic() + wait_ms / 1000
                log.warning(
                    "broker %d: %s is still registered by session 0x%x of a broker that is gone (%s): "
                    "waiting up to %d ms (zookeeper.session.timeout.ms + %d ms) for ZooKeeper to expire "
                    "it",
                    registration.broker_id,
                    path,
                    owner,
                    why,
                    wait_ms,
                    EXPIRY_SLACK_MS,
                )
            if time.monotonic() >= deadline:
                raise BrokerIdInUse(
                    f"broker id {registration.broker_id} is still registered in ZooKeeper at "
                    f"{self.connect} by session 0x{owner:x}, {wait_ms} ms after this broker "
                    f"started waiting for it to expire",
                    live=False,
                )
            await asyncio.sleep(EXPIRY_POLL_S)

    @_public
    async def get_brokers(self) -> dict[int, BrokerRegistration]:
        return {b: reg for b, (reg, _) in (await self.get_brokers_and_epochs()).items()}

    @_public
    async def get_brokers_and_epochs(self) -> dict[int, tuple[BrokerRegistration, int]]:
        """Every registered broker with its broker epoch (czxid)."""
        ids = _broker_ids(await self._session.children(BrokerIdsZNode.PATH))
        got = await asyncio.gather(*(self._session.get(BrokerIdZNode.path(b)) for b in ids))
        return {b: (BrokerIdZNode.decode(b, g[0]), g[1].czxid) for b, g in zip(ids, got) if g is not None}

    @_public
    async def watch_broker_ids(self, callback: Callable[[frozenset[int]], None]) -> frozenset[int]:
        """The registered broker ids now; callback(ids) each time the registrations change,
        also when the ids read are the same: a broker whose session expired and that
        registered again before the read (its broker epoch changed; the caller compares)."""

        async def read(watcher: KazooWatcher) -> frozenset[int]:
            return frozenset(_broker_ids(await self._session.children(BrokerIdsZNode.PATH, watcher)))

        return (await self._session.watch(read, callback, deliver_equal=True))[1]

    # ------------------------------------------------------------ controller

    @_public
    async def try_elect_controller(self, broker_id: int) -> tuple[int, int] | None:
        """Kafka's registerControllerAndIncrementControllerEpoch: creates the ephemeral
        /controller and bumps /controller_epoch in one multi-op conditional on the epoch's
        zk version. Returns (new epoch, its zk version) — the fence of every controller
        write — or None if another broker is (or just became) controller."""
        current = await self._get_or_create_controller_epoch()
        epoch, zk_version = current[0] + 1, current[1]
        registration = ControllerZNode.encode(ControllerRegistration(broker_id, int(time.time() * 1000)))

        def build(tx: Any) -> None:
            tx.create(ControllerZNode.PATH, registration, ephemeral=True)
            tx.set_data(ControllerEpochZNode.PATH, ControllerEpochZNode.encode(epoch), version=zk_version)

        results = await self._session.commit(build)
        failed = _multi_error(results)
        if failed is None:
            log.info("broker %d elected controller, epoch %d", broker_id, epoch)
            return epoch, results[1].version
        if not isinstance(failed[1], (NodeExistsError, BadVersionError)):
            raise failed[1]
        # lost, or won with a request repeated after a connection loss: look
        if await self.get_controller_id() == broker_id:
            now = await self.get_controller_epoch()
            if now is not None and now[0] == epoch:
                return now
        return None

    async def _get_or_create_controller_epoch(self) -> tuple[int, int]:
        while True:
            got = await self.get_controller_epoch()
            if got is not None:
                return got
            try:
                await self._session.op(
                    lambda: self._zk.create_async(
                        ControllerEpochZNode.PATH, ControllerEpochZNode.encode(ControllerEpochZNode.INITIAL_EPOCH)
                    )
                )
                return ControllerEpochZNode.INITIAL_EPOCH, ControllerEpochZNode.INITIAL_EPOCH_ZK_VERSION
            except NodeExistsError:
                pass

    @_public
    async def sync(self, path: str = "/") -> None:
        """ZooKeeper's sync: the server this client is connected to catches up with the
        leader, so that the reads sent after it see every write committed before it, by any
        client (a server answers reads from its own copy, which may lag behind)."""
        await self._session.op(lambda: self._zk.sync_async(path))

    @_public
    async def get_controller_id(self) -> int | None:
        got = await self._session.get(ControllerZNode.PATH)
        return None if got is None else ControllerZNode.decode(got[0]).broker_id

    @_public
    async def watch_controller(self, callback: Callable[[int | None], None]) -> int | None:
        """The controller's broker id now (None: no controller); callback on each change."""

        async def read(watcher: KazooWatcher) -> int | None:
            got = await self._session.get_watched(ControllerZNode.PATH, watcher)
            return None if got is None else ControllerZNode.decode(got[0]).broker_id

        return (await self._session.watch(read, callback))[1]

    @_public
    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zk version) of /controller_epoch, None before the first election."""
        got = await self._session.get(ControllerEpochZNode.PATH)
        return None if got is None else (ControllerEpochZNode.decode(got[0]), got[1].version)

    # ------------------------------------------------------------ finalized features

    @_public
    async def get_finalized_features(self) -> tuple[dict[str, int], int]:
        """(/feature's levels, its zk version: the features' epoch); ({}, -1) when absent."""
        got = await self._session.get(FeatureZNode.PATH)
        return ({}, -1) if got is None else (FeatureZNode.decode(got[0]), got[1].version)

    @_public
    async def watch_finalized_features(
        self, callback: Callable[[tuple[dict[str, int], int]], None]
    ) -> tuple[dict[str, int], int]:
        """The finalized features now (as get_finalized_features); callback on each change."""

        async def read(watcher: KazooWatcher) -> tuple[dict[str, int], int]:
            got = await self._session.get_watched(FeatureZNode.PATH, watcher)
            return ({}, -1) if got is None else (FeatureZNode.decode(got[0]), got[1].version)

        return (await self._session.watch(read, callback))[1]

    @_public
    async def set_finalized_features(self, levels: Mapping[str, int], controller_epoch_zk_version: int) -> int:
        """Writes /feature (creates it the first time), fenced by the controller's epoch;
        returns the new epoch (zk version)."""
        data = FeatureZNode.encode(levels)
        while True:
            exists = await self._session.get(FeatureZNode.PATH) is not None

            def build(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                if exists:
                    tx.set_data(FeatureZNode.PATH, data)
                else:
                    tx.create(FeatureZNode.PATH, data)

            results = await self._session.commit(build)
            if self._check_fence(results, controller_epoch_zk_version, tolerate=(NodeExistsError, NoNodeError)):
                continue  # created or deleted meanwhile: again, the other way
            return 0 if not exists else int(results[1].version)

    # ------------------------------------------------------------ topics

    @_public
    async def create_topic(
        self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, Iterable[int]], configs: Mapping[str, str]
    ) -> None:
        """As Kafka's AdminZkClient: the config node first (not atomic with the rest: a
        config without a topic node is harmless), then /brokers/topics/<t>, which the
        controller watches. TopicExists if the topic node exists (also while it is being
        deleted)."""
        path = TopicZNode.path(name)
        if await self._session.op(lambda: self._zk.exists_async(path)) is not None:
            raise TopicExists(f"topic {name!r} already exists")
        await self._write_entity_config(ConfigEntityTypeZNode.TOPIC, name, configs)
        data = TopicZNode.encode(TopicAssignment(topic_id, _assignment(assignment)))
        try:
            await self._session.op(lambda: self._zk.create_async(path, data))
        except NodeExistsError:
            raise TopicExists(f"topic {name!r} already exists") from None

    @_public
    async def get_topic_names(self) -> frozenset[str]:
        return frozenset(await self._session.children(TopicsZNode.PATH))

    @_public
    async def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]:
        """The topic names now; callback(names) on each creation or deletion."""

        async def read(watcher: KazooWatcher) -> frozenset[str]:
            return frozenset(await self._session.children(TopicsZNode.PATH, watcher))

        return (await self._session.watch(read, callback))[1]

    @_public
    async def get_topic(self, name: str) -> tuple[uuid.UUID | None, dict[int, list[int]], int]:
        """(topic id, partition -> replicas, zk version); NoSuchTopic."""
        got = await self._session.get(TopicZNode.path(name))
        if got is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        return _topic_value(name, got)

    @_public
    async def watch_topic(self, name: str, callback: Callable[[TopicValue | None], None]) -> TopicValue | None:
        """get_topic's value now (None: no such topic); callback(value or None) on each
        change of the topic node (partitions added, the topic deleted). unwatch_topic ends it."""
        path = TopicZNode.path(name)

        async def read(watcher: KazooWatcher) -> TopicValue | None:
            got = await self._session.get_watched(path, watcher)
            return None if got is None else _topic_value(name, got)

        w, value = await self._session.watch(read, callback)
        self._topic_watches.setdefault(name, []).append(w)
        return value

    def unwatch_topic(self, name: str) -> None:
        for w in self._topic_watches.pop(name, []):
            self._session.unwatch(w)

    @_public
    async def set_topic_assignment(
        self, name: str, topic_id: uuid.UUID | None, assignment: Mapping[int, Iterable[int]], expected_version: int
    ) -> int:
        """Rewrites the topic node if its zk version is still `expected_version` (partition
        additions); returns the new zk version. BadVersion, NoSuchTopic."""
        path = TopicZNode.path(name)
        got = await self._session.get(path)
        if got is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        current = TopicZNode.decode(name, got[0])
        # a reassignment's adding/removing replicas stay (the write fails anyway if the
        # controller rewrote the node since `expected_version`)
        data = TopicZNode.encode(
            TopicAssignment(topic_id, _assignment(assignment), current.adding_replicas, current.removing_replicas)
        )
        try:
            stat = cast(
                ZnodeStat, await self._session.op(lambda: self._zk.set_async(path, data, version=expected_version))
            )
        except BadVersionError:
            raise BadVersion(f"{path} is no longer at zk version {expected_version}") from None
        except NoNodeError:
            raise NoSuchTopic(f"topic {name!r} does not exist") from None
        return stat.version

    @_public
    async def get_topic_assignment(self, name: str) -> tuple[TopicAssignment, int]:
        """The whole topic node (with the replicas a reassignment adds and removes,
        KIP-455) and its zk version; NoSuchTopic."""
        got = await self._session.get(TopicZNode.path(name))
        if got is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        return TopicZNode.decode(name, got[0]), got[1].version

    @_public
    async def set_topic_reassignment(
        self, name: str, assignment: TopicAssignment, expected_version: int, controller_epoch_zk_version: int
    ) -> int:
        """The controller's write of a topic node during a reassignment (replicas, adding
        and removing replicas): conditional on the node's zk version and fenced by the
        controller epoch, in one multi-op. Returns the new zk version. BadVersion,
        NoSuchTopic, ControllerMoved."""
        path = TopicZNode.path(name)
        data = TopicZNode.encode(assignment)

        def build(tx: Any) -> None:
            self._fence(tx, controller_epoch_zk_version)
            tx.set_data(path, data, version=expected_version)

        results = await self._session.commit(build)
        failed = self._check_fence(results, controller_epoch_zk_version, tolerate=(BadVersionError, NoNodeError))
        if failed is None:
            return cast(ZnodeStat, results[1]).version
        if isinstance(failed, NoNodeError):
            raise NoSuchTopic(f"topic {name!r} does not exist")
        raise BadVersion(f"{path} is no longer at zk version {expected_version}")

    # ------------------------------------------------------------ partition states

    @_public
    async def get_partition_states(self, topic: str) -> dict[int, tuple[LeaderIsrState, int]]:
        """partition -> (state, zk version) for every partition that has a state node."""
        children = await self._session.children(TopicPartitionsZNode.path(topic))
        partitions = sorted(int(p) for p in children if p.isdigit())
        got = await asyncio.gather(*(self._session.get(TopicPartitionStateZNode.path(topic, p)) for p in partitions))
        return {
            p: (TopicPartitionStateZNode.decode(topic, p, g[0]), g[1].version)
            for p, g in zip(partitions, got)
            if g is not None
        }

    @_public
    async def create_partition_states(
        self, topic: str, states: Mapping[int, LeaderIsrState], controller_epoch_zk_version: int
    ) -> dict[int, int | BadVersion]:
        """Creates the state nodes of new partitions (and their parents), fenced by the
        controller epoch. partition -> zk version of the new node (0), or BadVersion if the
        state node already exists. ControllerMoved if the epoch changed."""
        parent = TopicPartitionsZNode.path(topic)
        if await self._session.op(lambda: self._zk.exists_async(parent)) is None:

            def build_parent(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                tx.create(parent)

            results = await self._session.commit(build_parent)
            self._check_fence(results, controller_epoch_zk_version, tolerate=NodeExistsError)
        partition_nodes = set(await self._session.children(parent))

        async def create(p: int, state: LeaderIsrState) -> int | BadVersion:
            def build(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                if str(p) not in partition_nodes:
                    tx.create(TopicPartitionZNode.path(topic, p))
                tx.create(TopicPartitionStateZNode.path(topic, p), TopicPartitionStateZNode.encode(state))

            results = await self._session.commit(build)
            failed = self._check_fence(results, controller_epoch_zk_version, tolerate=NodeExistsError)
            if failed is None:
                return 0
            return BadVersion(f"{TopicPartitionStateZNode.path(topic, p)} already exists")

        done = await asyncio.gather(*(create(p, s) for p, s in states.items()), return_exceptions=True)
        return _gathered(dict(zip(states, done)))

    @_public
    async def update_partition_states(
        self, updates: Mapping[tuple[str, int], tuple[LeaderIsrState, int]], controller_epoch_zk_version: int
    ) -> dict[tuple[str, int], int | BadVersion | NoSuchTopic]:
        """Writes each (topic, partition) state if its zk version is still the expected
        one, all fenced by the controller epoch's zk version (one multi-op each, sent
        together). Returns the new zk version, or BadVersion (someone wrote first: read
        and decide again), or NoSuchTopic (no state node). ControllerMoved if the epoch
        changed: then nothing was written by this controller."""

        async def update(tp: tuple[str, int], state: LeaderIsrState, expected: int) -> int | BadVersion | NoSuchTopic:
            path = TopicPartitionStateZNode.path(*tp)

            def build(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                tx.set_data(path, TopicPartitionStateZNode.encode(state), version=expected)

            results = await self._session.commit(build)
            failed = self._check_fence(results, controller_epoch_zk_version, tolerate=(BadVersionError, NoNodeError))
            if failed is None:
                return cast(ZnodeStat, results[1]).version
            if isinstance(failed, NoNodeError):
                return NoSuchTopic(f"{path} does not exist")
            return BadVersion(f"{path} is no longer at zk version {expected}")

        done = await asyncio.gather(*(update(tp, s, v) for tp, (s, v) in updates.items()), return_exceptions=True)
        return _gathered(dict(zip(updates, done)))

    @staticmethod
    def _fence(tx: Any, controller_epoch_zk_version: int) -> None:
        tx.check(ControllerEpochZNode.PATH, controller_epoch_zk_version)

    @staticmethod
    def _check_fence(
        results: list[Any], controller_epoch_zk_version: int, tolerate: tuple[type[Exception], ...]
    ) -> Exception | None:
        """None if the fenced multi-op succeeded; the error of a later op if it is one of
        `tolerate`; ControllerMoved if the fence failed; any other error raises."""
        failed = _multi_error(results)
        if failed is None:
            return None
        index, error = failed
        if index == 0:
            raise ControllerMoved(
                f"{ControllerEpochZNode.PATH} is no longer at zk version "
                f"{controller_epoch_zk_version}: another controller was elected"
            )
        if isinstance(error, tolerate):
            return error
        raise error

    # ------------------------------------------------------------ configs

    @_public
    async def get_topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides ({} if none)."""
        got = await self._session.get(ConfigEntityZNode.path(ConfigEntityTypeZNode.TOPIC, name))
        return {} if got is None else ConfigEntityZNode.decode(ConfigEntityTypeZNode.TOPIC, name, got[0])

    @_public
    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replaces the topic's overrides, then notifies every broker through a sequential
        /config/changes/config_change_ node (Kafka's AdminZkClient.changeTopicConfig)."""
        if await self._session.op(lambda: self._zk.exists_async(TopicZNode.path(name))) is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        await self._write_entity_config(ConfigEntityTypeZNode.TOPIC, name, configs)
        data = ConfigEntityChangeNotificationSequenceZNode.encode(f"{ConfigEntityTypeZNode.TOPIC}/{name}")
        await self._session.op(
            lambda: self._zk.create_async(
                ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH, data, sequence=True, makepath=True
            )
        )

    @_public
    async def get_broker_config(self, entity: str) -> dict[str, str]:
        """The dynamic configs of a broker ('1') or of the cluster default ('<default>'),
        /config/brokers/<entity> ({} if none)."""
        got = await self._session.get(ConfigEntityZNode.path(ConfigEntityTypeZNode.BROKER, entity))
        return {} if got is None else ConfigEntityZNode.decode(ConfigEntityTypeZNode.BROKER, entity, got[0])

    @_public
    async def set_broker_config(self, entity: str, configs: Mapping[str, str]) -> None:
        """Replaces /config/brokers/<entity>, then notifies every broker with a
        brokers/<entity> change (Kafka's AdminZkClient.changeBrokerConfig)."""
        await self._write_entity_config(ConfigEntityTypeZNode.BROKER, entity, configs)
        data = ConfigEntityChangeNotificationSequenceZNode.encode(f"{ConfigEntityTypeZNode.BROKER}/{entity}")
        await self._session.op(
            lambda: self._zk.create_async(
                ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH, data, sequence=True, makepath=True
            )
        )

    @_public
    async def get_group_configs(self) -> dict[str, dict[str, str]]:
        """Every group's configs (/config/groups/<sanitized group id>), by group id."""
        names = await self._session.children(ConfigEntityTypeZNode.path(ConfigEntityTypeZNode.GROUP))
        out = {}
        for n in names:
            got = await self._session.get(ConfigEntityZNode.path(ConfigEntityTypeZNode.GROUP, n))
            if got is not None:
                configs = ConfigEntityZNode.decode(ConfigEntityTypeZNode.GROUP, n, got[0])
                if configs:
                    out[desanitize(n)] = configs
        return out

    @_public
    async def get_group_config(self, group: str) -> dict[str, str]:
        n = group_znode_name(group)
        got = await self._session.get(ConfigEntityZNode.path(ConfigEntityTypeZNode.GROUP, n))
        return {} if got is None else ConfigEntityZNode.decode(ConfigEntityTypeZNode.GROUP, n, got[0])

    @_public
    async def set_group_config(self, group: str, configs: Mapping[str, str]) -> None:
        """Replaces the group's configs, then notifies every broker with a
        groups/<sanitized group id> change (as a topic's configs are changed)."""
        n = group_znode_name(group)
        await self._write_entity_config(ConfigEntityTypeZNode.GROUP, n, configs)
        data = ConfigEntityChangeNotificationSequenceZNode.encode(f"{ConfigEntityTypeZNode.GROUP}/{n}")
        await self._session.op(
            lambda: self._zk.create_async(
                ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH, data, sequence=True, makepath=True
            )
        )

    @_public
    async def get_user_configs(self) -> dict[str, dict[str, str]]:
        """Every user's config (/config/users/<sanitized user>), by user name."""
        names = await self._session.children(ConfigEntityTypeZNode.path(ConfigEntityTypeZNode.USER))
        out = {}
        for n in names:
            got = await self._session.get(ConfigEntityZNode.path(ConfigEntityTypeZNode.USER, n))
            if got is not None:
                out[desanitize(n)] = ConfigEntityZNode.decode(ConfigEntityTypeZNode.USER, n, got[0])
        return out

    @_public
    async def get_user_config(self, user: str) -> dict[str, str]:
        n = sanitize(user)
        got = await self._session.get(ConfigEntityZNode.path(ConfigEntityTypeZNode.USER, n))
        return {} if got is None else ConfigEntityZNode.decode(ConfigEntityTypeZNode.USER, n, got[0])

    @_public
    async def set_user_config(self, user: str, configs: Mapping[str, str]) -> None:
        """Replaces the user's config (Kafka's AdminZkClient.changeUserOrUserClientIdConfig:
        the node, then a users/<sanitized user> change notification every broker follows)."""
        n = sanitize(user)
        await self._write_entity_config(ConfigEntityTypeZNode.USER, n, configs)
        data = ConfigEntityChangeNotificationSequenceZNode.encode(f"{ConfigEntityTypeZNode.USER}/{n}")
        await self._session.op(
            lambda: self._zk.create_async(
                ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH, data, sequence=True, makepath=True
            )
        )

    # ------------------------------------------------------------ client quotas

    @_public
    async def get_client_quota_configs(self) -> dict[str, dict[str, str]]:
        """The config of every /config/users/<u>, /config/users/<u>/clients/<c> and
        /config/clients/<c>, by entity path ('users/alice', 'users/alice/clients/app',
        'clients/app'; names as the znodes spell them)."""
        out: dict[str, dict[str, str]] = {}
        users_root = ConfigEntityTypeZNode.path(ConfigEntityTypeZNode.USER)
        clients_root = ConfigEntityTypeZNode.path(ConfigEntityTypeZNode.CLIENT)
        for u in await self._session.children(users_root):
            await self._read_entity(out, f"users/{u}")
            for c in await self._session.children(f"{users_root}/{u}/clients"):
                await self._read_entity(out, f"users/{u}/clients/{c}")
        for c in await self._session.children(clients_root):
            await self._read_entity(out, f"clients/{c}")
        return out

    async def _read_entity(self, out: dict[str, dict[str, str]], path: str) -> None:
        got = await self._session.get(ConfigEntityZNode.entity_path(path))
        if got is not None:
            out[path] = ConfigEntityZNode.decode_path(path, got[0])

    @_public
    async def get_entity_config(self, path: str) -> dict[str, str]:
        """The config map of /config/<path> ({} if none)."""
        got = await self._session.get(ConfigEntityZNode.entity_path(path))
        return {} if got is None else ConfigEntityZNode.decode_path(path, got[0])

    @_public
    async def set_entity_config(self, path: str, configs: Mapping[str, str]) -> None:
        """Replaces /config/<path>'s config map, then notifies every broker with the
        entity path (Kafka's AdminZkClient.changeConfigs for users and clients)."""
        data = ConfigEntityZNode.encode(configs)
        znode = ConfigEntityZNode.entity_path(path)
        while True:
            try:
                await self._session.op(lambda: self._zk.set_async(znode, data))
                break
            except NoNodeError:
                pass
            try:
                await self._session.op(lambda: self._zk.create_async(znode, data, makepath=True))
                break
            except NodeExistsError:
                pass
        note = ConfigEntityChangeNotificationSequenceZNode.encode(path)
        await self._session.op(
            lambda: self._zk.create_async(
                ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH, note, sequence=True, makepath=True
            )
        )

    # ------------------------------------------------------------ ACLs

    @_public
    async def get_acls(self) -> list[AclBinding]:
        """Every ACL under /kafka-acl and /kafka-acl-extended/prefixed."""
        out: list[AclBinding] = []
        for pattern in (PatternType.LITERAL, PatternType.PREFIXED):
            root = AclZNodes.root(pattern.name)
            for tname in await self._session.children(root):
                rtype = acl_store.type_from_name(tname)
                if rtype is None:
                    continue
                for name in await self._session.children(f"{root}/{tname}"):
                    path = f"{root}/{tname}/{name}"
                    got = await self._session.get(path)
                    if got is not None:
                        out += acl_store.bindings((rtype, name, pattern), AclZNodes.decode(path, got[0]))
        return out

    @_public
    async def get_resource_acls(self, resource: acl_store.Resource) -> list[AclBinding]:
        rtype, name, pattern = resource
        path = AclZNodes.path(pattern.name, acl_store.type_name(rtype), name)
        got = await self._session.get(path)
        return [] if got is None else acl_store.bindings(resource, AclZNodes.decode(path, got[0]))

    @_public
    async def update_acls(
        self, changes: Mapping[acl_store.Resource, Callable[[set[AclBinding]], set[AclBinding]]]
    ) -> dict[acl_store.Resource, set[AclBinding]]:
        """update_resource_acls for each resource, together; the new ACLs of each."""
        resources = list(changes)
        done = await asyncio.gather(*(self.update_resource_acls(r, changes[r]) for r in resources))
        return dict(zip(resources, done))

    async def update_resource_acls(
        self, resource: acl_store.Resource, change: Callable[[set[AclBinding]], set[AclBinding]]
    ) -> set[AclBinding]:
        """Applies `change` to a resource's ACLs with a conditional write (retried when
        another broker wrote first, as Kafka's AclAuthorizer), then announces it on
        /kafka-acl-changes (or -extended-changes). Returns the new ACLs."""
        rtype, name, pattern = resource
        path = AclZNodes.path(pattern.name, acl_store.type_name(rtype), name)
        while True:
            got = await self._session.get(path)
            current = set() if got is None else set(acl_store.bindings(resource, AclZNodes.decode(path, got[0])))
            new = change(set(current))
            if new == current:
                return new
            data = AclZNodes.encode(acl_store.entry(b) for b in sorted(new, key=str))
            try:
                if got is None:
                    await self._session.op(lambda: self._zk.create_async(path, data, makepath=True))
                elif not new:
                    await self._session.op(lambda: self._zk.delete_async(path, version=got[1].version))
                else:
                    await self._session.op(lambda: self._zk.set_async(path, data, version=got[1].version))
            except (BadVersionError, NodeExistsError, NoNodeError):
                continue
            change_data = AclZNodes.encode_change(pattern.name, rtype.name, name)
            await self._session.op(
                lambda: self._zk.create_async(
                    AclZNodes.change_path(pattern.name), change_data, sequence=True, makepath=True
                )
            )
            return new

    @_public
    async def watch_acl_changes(self, callback: Callable[[list[acl_store.Resource]], None]) -> None:
        """callback(resources whose ACLs changed) for each batch of ACL change
        notifications (literal and prefixed) created after this call."""
        for root, literal in ((AclZNodes.LITERAL_CHANGES, True), (AclZNodes.EXTENDED_CHANGES, False)):
            await self._watch_sequence(root, AclZNodes.CHANGE_PREFIX, _acl_change_decoder(literal), callback)

    async def _watch_sequence(
        self, parent: str, prefix: str, decode: Callable[[str, bytes], Any], callback: Callable[[list[Any]], None]
    ) -> None:
        last: list[int | None] = [None]
        ctimes: dict[str, int] = {}

        async def read(watcher: KazooWatcher) -> list[Any]:
            names = await self._session.children(parent, watcher)
            numbered = sorted((sequence_number(n, prefix), n) for n in names if _is_sequence(n, prefix))
            if last[0] is None:
                last[0] = numbered[-1][0] if numbered else -1
                return []
            out = []
            for seq, n in numbered:
                if seq <= last[0]:
                    continue
                got = await self._session.get(f"{parent}/{n}")
                last[0] = seq
                if got is not None:
                    ctimes[n] = got[1].ctime
                    try:
                        item = decode(f"{parent}/{n}", got[0])
                    except ValueError as exc:
                        log.warning("ignoring %s/%s: %s", parent, n, exc)
                        continue
                    if item is not None:
                        out.append(item)
            horizon = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_MS
            for n in [n for n, ctime in ctimes.items() if ctime < horizon]:
                del ctimes[n]
                try:
                    await self._session.op(lambda: self._zk.delete_async(f"{parent}/{n}"))
                except NoNodeError:
                    pass
            return out

        def deliver(items: list[Any]) -> None:
            if items:
                callback(items)

        await self._session.watch(read, deliver, deliver_equal=True)

    async def _write_entity_config(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        path = ConfigEntityZNode.path(entity_type, name)
        data = ConfigEntityZNode.encode(configs)
        while True:
            try:
                await self._session.op(lambda: self._zk.set_async(path, data))
                return
            except NoNodeError:
                pass
            try:
                await self._session.op(lambda: self._zk.create_async(path, data, makepath=True))
                return
            except NodeExistsError:
                pass

    @_public
    async def watch_config_changes(self, callback: Callable[[list[str]], None]) -> None:
        """callback(entity paths, e.g. ['topics/clicks']) for each batch of config change
        notifications created after this call, in order. Notifications older than 15
        minutes are purged, as Kafka's ZkNodeChangeNotificationListener does."""
        prefix = ConfigEntityChangeNotificationSequenceZNode.PREFIX
        parent = ConfigEntityChangeNotificationZNode.PATH
        last: list[int | None] = [None]  # the last sequence number handled (None: arming)
        ctimes: dict[str, int] = {}  # handled notifications not yet purged

        async def read(watcher: KazooWatcher) -> list[str]:
            names = await self._session.children(parent, watcher)
            numbered = sorted((sequence_number(n, prefix), n) for n in names if _is_sequence(n, prefix))
            if last[0] is None:  # arming: only what comes after this call
                last[0] = numbered[-1][0] if numbered else -1
                return []
            paths = []
            for seq, n in numbered:
                if seq <= last[0]:
                    continue
                got = await self._session.get(f"{parent}/{n}")
                last[0] = seq
                if got is not None:
                    ctimes[n] = got[1].ctime
                    paths.append(ConfigEntityChangeNotificationSequenceZNode.decode(f"{parent}/{n}", got[0]))
            await self._purge_config_changes(ctimes)
            return paths

        def deliver(paths: list[str]) -> None:
            if paths:
                callback(paths)

        await self._session.watch(read, deliver, deliver_equal=True)

    async def _purge_config_changes(self, ctimes: dict[str, int]) -> None:
        horizon = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_MS
        for name in [n for n, ctime in ctimes.items() if ctime < horizon]:
            del ctimes[name]
            try:
                await self._session.op(
                    lambda: self._zk.delete_async(f"{ConfigEntityChangeNotificationZNode.PATH}/{name}")
                )
            except NoNodeError:
                pass

    # ------------------------------------------------------------ topic deletion

    @_public
    async def mark_topic_for_deletion(self, name: str) -> None:
        """Creates /admin/delete_topics/<t> for the controller; NoSuchTopic. Marking a
        topic twice is not an error (Kafka's admin manager swallows it too)."""
        if await self._session.op(lambda: self._zk.exists_async(TopicZNode.path(name))) is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        try:
            await self._session.op(lambda: self._zk.create_async(DeleteTopicsTopicZNode.path(name), makepath=True))
        except NodeExistsError:
            pass

    @_public
    async def get_topics_marked_for_deletion(self) -> frozenset[str]:
        return frozenset(await self._session.children(DeleteTopicsZNode.PATH))

    @_public
    async def watch_topic_deletions(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]:
        """The topics marked for deletion now; callback(topics) on each change."""

        async def read(watcher: KazooWatcher) -> frozenset[str]:
            return frozenset(await self._session.children(DeleteTopicsZNode.PATH, watcher))

        return (await self._session.watch(read, callback))[1]

    @_public
    async def delete_topic_znodes(self, name: str, controller_epoch_zk_version: int) -> None:
        """The controller's last step of a deletion: the partition states, the topic node,
        its config and its deletion marker go in one multi-op fenced by the controller
        epoch (ControllerMoved). Nothing left to delete is not an error."""
        while True:
            paths = await self._topic_znodes(name)
            if not paths:
                return

            def build(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                for path in paths:
                    tx.delete(path)

            results = await self._session.commit(build)
            if self._check_fence(results, controller_epoch_zk_version, tolerate=(NoNodeError, NotEmptyError)) is None:
                log.info("deleted the znodes of topic %s", name)
                return
            # a node appeared or vanished meanwhile: look again

    async def _topic_znodes(self, name: str) -> list[str]:
        """The existing znodes of a topic, children before parents."""
        out = []
        topic = TopicZNode.path(name)
        if await self._session.op(lambda: self._zk.exists_async(topic)) is not None:
            partitions = TopicPartitionsZNode.path(name)
            for p in await self._session.children(partitions):
                out += [f"{partitions}/{p}/{c}" for c in await self._session.children(f"{partitions}/{p}")]
                out.append(f"{partitions}/{p}")
            if await self._session.op(lambda: self._zk.exists_async(partitions)) is not None:
                out.append(partitions)
            out.append(topic)
        for path in (ConfigEntityZNode.path(ConfigEntityTypeZNode.TOPIC, name), DeleteTopicsTopicZNode.path(name)):
            if await self._session.exists(path):
                out.append(path)
        return out

    # ------------------------------------------------------------ log dir events

    @_public
    async def create_log_dir_event_notification(self, broker_id: int) -> None:
        """A log dir of `broker_id` failed: /log_dir_event_notification/log_dir_event_<seq>
        (Kafka's KafkaZkClient.propagateLogDirEvent)."""
        await self._session.op(
            lambda: self._zk.create_async(
                LogDirEventNotificationSequenceZNode.CREATE_PATH,
                LogDirEventNotificationSequenceZNode.encode(broker_id),
                sequence=True,
                makepath=True,
            )
        )

    @_public
    async def get_log_dir_events(self) -> dict[str, int | None]:
        """The pending notifications: {node name: broker id (None: unreadable)}."""
        parent = LogDirEventNotificationZNode.PATH
        prefix = LogDirEventNotificationSequenceZNode.PREFIX
        try:
            names = sorted(n for n in await self._session.children(parent) if _is_sequence(n, prefix))
        except NoNodeError:
            return {}
        out: dict[str, int | None] = {}
        for n in names:
            got = await self._session.get(f"{parent}/{n}")
            if got is None:
                continue
            try:
                out[n] = LogDirEventNotificationSequenceZNode.decode(f"{parent}/{n}", got[0])
            except ValueError as exc:
                log.warning("ignoring %s/%s: %s", parent, n, exc)
                out[n] = None
        return out

    @_public
    async def delete_log_dir_events(self, names: Iterable[str], controller_epoch_zk_version: int) -> None:
        """Removes handled notifications, fenced by the controller epoch (ControllerMoved);
        one already gone is not an error."""
        for n in names:
            path = f"{LogDirEventNotificationZNode.PATH}/{n}"

            def build(tx: Any, path: str = path) -> None:
                self._fence(tx, controller_epoch_zk_version)
                tx.delete(path)

            results = await self._session.commit(build)
            self._check_fence(results, controller_epoch_zk_version, tolerate=(NoNodeError,))

    @_public
    async def watch_log_dir_events(self, callback: Callable[[list[str]], None]) -> None:
        """callback(node names) whenever the notifications change (the controller's
        LogDirEventNotificationHandler)."""

        async def read(watcher: KazooWatcher) -> list[str]:
            return sorted(await self._session.children(LogDirEventNotificationZNode.PATH, watcher))

        def deliver(names: list[str]) -> None:
            if names:
                callback(names)

        await self._session.ensure_path(LogDirEventNotificationZNode.PATH)
        await self._session.watch(read, deliver, deliver_equal=True)

    # ------------------------------------------------------------ preferred replica election

    @_public
    async def create_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        """What Kafka's old preferred-replica-election tool writes; NodeExists is a
        StoreError (an election is already pending)."""
        try:
            await self._session.op(
                lambda: self._zk.create_async(
                    PreferredReplicaElectionZNode.PATH, PreferredReplicaElectionZNode.encode(partitions), makepath=True
                )
            )
        except NodeExistsError:
            raise StoreError("a preferred replica election is already in progress") from None

    @_public
    async def get_preferred_replica_election(self) -> frozenset[TopicPartition]:
        got = await self._session.get(PreferredReplicaElectionZNode.PATH)
        return frozenset() if got is None else PreferredReplicaElectionZNode.decode(got[0])

    @_public
    async def watch_preferred_replica_election(
        self, callback: Callable[[frozenset[TopicPartition]], None]
    ) -> frozenset[TopicPartition]:
        """The partitions asked for now (empty: none); callback(partitions) on each change."""

        async def read(watcher: KazooWatcher) -> frozenset[TopicPartition]:
            got = await self._session.get_watched(PreferredReplicaElectionZNode.PATH, watcher)
            return frozenset() if got is None else PreferredReplicaElectionZNode.decode(got[0])

        return (await self._session.watch(read, callback))[1]

    @_public
    async def delete_preferred_replica_election(self, controller_epoch_zk_version: int) -> None:
        def build(tx: Any) -> None:
            self._fence(tx, controller_epoch_zk_version)
            tx.delete(PreferredReplicaElectionZNode.PATH)

        results = await self._session.commit(build)
        self._check_fence(results, controller_epoch_zk_version, tolerate=NoNodeError)

    # ------------------------------------------------------------ producer ids

    @_public
    async def allocate_producer_id_block(self, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> tuple[int, int]:
        """The next block of producer ids (first, last), claimed with a conditional update
        of /latest_producer_id_block, retried when another broker claimed one first (Kafka's
        ZkProducerIdManager)."""
        path = ProducerIdBlockZNode.PATH
        while True:
            got = await self._session.get(path)
            if got is None:
                await self._session.op(lambda: self._zk.ensure_path_async(path))
                continue
            data, stat = got
            start = ProducerIdBlockZNode.decode(data).block_end + 1 if data else 0
            if start > INT64_MAX - size:
                raise StoreError("every producer id has been allocated")
            block = ProducerIdBlock(broker_id, start, start + size - 1)
            try:
                await self._session.op(
                    lambda: self._zk.set_async(path, ProducerIdBlockZNode.encode(block), version=stat.version)
                )
            except BadVersionError:
                continue
            log.info("broker %d acquired producer ids %d..%d", broker_id, block.block_start, block.block_end)
            return block.block_start, block.block_end


# ---------------------------------------------------------------- helpers


def _broker_ids(children: Iterable[str]) -> list[int]:
    ids = []
    for c in children:
        if c.isascii() and c.isdigit():
            ids.append(int(c))
        else:
            log.warning("ignoring %s/%s: not a broker id", BrokerIdsZNode.PATH, c)
    return sorted(ids)


def _assignment(assignment: Mapping[int, Iterable[int]]) -> dict[int, tuple[int, ...]]:
    return {int(p): tuple(replicas) for p, replicas in assignment.items()}


def _topic_value(name: str, got: tuple[bytes, ZnodeStat]) -> TopicValue:
    a = TopicZNode.decode(name, got[0])
    return a.topic_id, {p: list(r) for p, r in sorted(a.partitions.items())}, got[1].version


def _acl_change_decoder(literal: bool) -> Callable[[str, bytes], acl_store.Resource | None]:
    def decode(path: str, data: bytes) -> acl_store.Resource | None:
        pattern, kind, name = AclZNodes.decode_change(path, data, literal)
        try:
            return ResourceType[kind], name, PatternType[pattern]
        except KeyError:
            return None

    return decode


def _is_sequence(name: str, prefix: str) -> bool:
    try:
        sequence_number(name, prefix)
        return True
    except ValueError:
        return False


def _gathered(results: dict[K, Any]) -> dict[K, Any]:
    """Results of gather(return_exceptions=True) over per-partition writes, which return
    BadVersion / NoSuchTopic as values: anything else that was raised (ControllerMoved
    first) propagates."""
    raised = [
        v for v in results.values() if isinstance(v, BaseException) and not isinstance(v, (BadVersion, NoSuchTopic))
    ]
    for error in sorted(raised, key=lambda e: not isinstance(e, ControllerMoved)):
        raise error
    return results

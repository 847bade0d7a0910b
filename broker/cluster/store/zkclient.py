"""KafkaZkClient: the cluster's ZooKeeper operations (Kafka's kafka.zk.KafkaZkClient and
the parts of AdminZkClient and ZkProducerIdManager the cluster needs), as coroutines.

kazoo runs its own threads (a connection thread and a callback thread); the broker runs
one asyncio loop. The bridge between them:

- Every operation is `async def`, built on kazoo's `*_async` requests whose completion
  is handed to the loop with `loop.call_soon_threadsafe`. Nothing here blocks the loop.
  All methods must be called from the loop that called `start()`.
- Watch callbacks and session listeners are plain callables, always invoked ON THE
  LOOP, never on a kazoo thread. A `watch_*` method returns the current value and arms
  a watch that is re-armed after each firing: the callback gets each new value (a
  value equal to the last delivered one is not delivered again). After a reconnection
  or a new session the watches are re-armed and re-read, so nothing missed while
  disconnected stays missed.
- An operation issued while the connection is down waits for it to come back (the same
  session or a new one) and runs then; in flight during a loss, it is sent again (as
  Kafka's retryRequestUntilConnected does; creates and multi-ops are written so a
  repeat is recognised). If no connection comes back within `connection_timeout_ms`
  the operation raises StoreUnavailable.

Session events (SessionEvent), delivered on the loop to `add_session_listener`
callbacks: DISCONNECTED (the session may still live: ephemerals stay), RECONNECTED
(same session back), EXPIRED (the session is gone: ZooKeeper deleted this client's
ephemeral nodes, /brokers/ids/<id> and maybe /controller), NEW_SESSION (connected again
with a new session: re-register; kazoo reconnects by itself).

Fencing, as Kafka's controller: partition states and topic deletions are written in a
multi-op whose first op checks /controller_epoch's zk version, so the writes of a
controller that lost the election fail with ControllerMoved. Partition states are also
conditional on their own zk version (the partition epoch): BadVersion.

Source address: kazoo's connections leave from the address the broker listens on when
it names a specific IP (broker.cluster.channel.bind_outgoing; `_kazoo_client` gives kazoo
a connection handler that binds), like the broker's connections to other brokers.

Errors: every method raises StoreError subclasses (StoreUnavailable, BrokerIdInUse,
TopicExists, NoSuchTopic, BadVersion, ControllerMoved), or znodes.ZNodeDataError for a
znode whose data cannot be decoded. kazoo is imported only here, and only a broker with
`zookeeper.connect` imports this module.
"""
from __future__ import annotations

import asyncio
import enum
import functools
import logging
import socket
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine, Iterable, Mapping
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.handlers import utils as kazoo_utils
from kazoo.handlers.threading import SequentialThreadingHandler

from broker.cluster.channel import source_address
from broker.cluster.store.errors import (
    BadVersion,
    BrokerIdInUse,
    ControllerMoved,
    NoSuchTopic,
    StoreError,
    StoreUnavailable,
    TopicExists,
)
from broker.cluster.store.znodes import (
    INT64_MAX,
    PERSISTENT_PATHS,
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
    LeaderIsrState,
    PreferredReplicaElectionZNode,
    ProducerIdBlock,
    ProducerIdBlockZNode,
    TopicAssignment,
    TopicPartitionStateZNode,
    TopicPartitionsZNode,
    TopicPartitionZNode,
    TopicsZNode,
    TopicZNode,
    parse_connect_string,
    sequence_number,
)
from broker.log import TopicPartition

log = logging.getLogger(__name__)

T = TypeVar("T")
P = ParamSpec("P")
K = TypeVar("K")
#: a kazoo watch function (called with a WatchedEvent on kazoo's thread)
KazooWatcher = Callable[[Any], None]
#: get_topic's value: (topic id, {partition: replicas}, zk version)
TopicValue = tuple[uuid.UUID | None, dict[int, list[int]], int]


class ZnodeStat(Protocol):
    """What this client reads of kazoo's ZnodeStat (kazoo has no type stubs)."""

    czxid: int
    ctime: int
    version: int
    ephemeralOwner: int


DEFAULT_SESSION_TIMEOUT_MS = 18000          # zookeeper.session.timeout.ms
CONFIG_CHANGE_EXPIRATION_MS = 15 * 60 * 1000  # Kafka purges config change notifications this old
PRODUCER_ID_BLOCK_SIZE = 1000
RETRY_BACKOFF_S = 0.02

# kazoo's own reconnection: at once, then backing off to at most a second between tries
_CONNECTION_RETRY = {"max_tries": -1, "delay": 0.1, "backoff": 2, "max_delay": 1.0}
_RETRIABLE = (ConnectionLoss, SessionExpiredError)


class _BoundSockets:
    """The `socket` module as kazoo's connection code uses it, except that
    create_connection leaves from the source address for the destination."""

    def __getattr__(self, name: str) -> Any:
        return getattr(socket, name)

    @staticmethod
    def create_connection(address: tuple[str, int], timeout: float | None = None) -> socket.socket:
        return socket.create_connection(address, timeout, source_address=source_address(address[0]))


class _BoundHandler(SequentialThreadingHandler):  # type: ignore[misc]
    """kazoo's threading handler, its connections bound to the broker's address."""

    def create_connection(self, *args: Any, **kwargs: Any) -> socket.socket:
        return cast(socket.socket, kazoo_utils.create_tcp_connection(_BoundSockets(), *args, **kwargs))


def _kazoo_client(hosts: str, timeout_s: float, **kwargs: Any) -> KazooClient:
    """A KazooClient whose connections leave from this broker's address (see above)."""
    return KazooClient(hosts=hosts, timeout=timeout_s, handler=_BoundHandler(), **kwargs)


class SessionEvent(enum.Enum):
    DISCONNECTED = "disconnected"
    RECONNECTED = "reconnected"
    EXPIRED = "expired"
    NEW_SESSION = "new session"


def _public(fn: Callable[Concatenate[KafkaZkClient, P], Awaitable[T]]
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


class _Watch:
    """One re-armed kazoo watch. `read(watcher)` reads the value and leaves `watcher` as a
    one-shot kazoo watch; each firing re-reads (re-arming) on the loop, one read at a
    time, and hands new values to `callback`."""

    def __init__(self, zk: KafkaZkClient, read: Callable[[KazooWatcher], Awaitable[Any]],
                 callback: Callable[[Any], None], deliver_equal: bool = False):
        self._zk = zk
        self._read = read
        self._callback = callback
        self._deliver_equal = deliver_equal
        self._watcher = zk._watcher(self.fired)
        self._dirty = False
        self._armed = False
        self._task: asyncio.Task[None] | None = None
        self.active = True
        self.last: Any = None

    async def arm(self) -> Any:
        self.last = await self._read(self._watcher)
        self._armed = True
        if self._dirty:             # fired while arming: read again
            self.fired()
        return self.last

    def fired(self) -> None:
        if not self.active:
            return
        self._dirty = True
        if self._armed and (self._task is None or self._task.done()):
            self._task = asyncio.ensure_future(self._refresh())

    def cancel(self) -> None:
        self.active = False
        if self._task is not None:
            self._task.cancel()

    async def _refresh(self) -> None:
        while self._dirty and self.active:
            self._dirty = False
            try:
                value = await self._read(self._watcher)
            except StoreUnavailable:
                return              # re-armed by the next (re)connection
            except Exception:
                log.exception("ZooKeeper watch: reading the new value failed")
                return
            if not self.active or (value == self.last and not self._deliver_equal):
                continue
            self.last = value
            try:
                self._callback(value)
            except Exception:
                log.exception("ZooKeeper watch callback failed")


class KafkaZkClient:
    """See the module docstring. `connect` is ZooKeeper's connect string with an
    optional chroot ('h1:2181,h2:2181/kb'); ValueError at once if it is malformed."""

    def __init__(self, connect: str, *, session_timeout_ms: int = DEFAULT_SESSION_TIMEOUT_MS,
                 connection_timeout_ms: int | None = None):
        self.connect = connect
        self.hosts, self.chroot = parse_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None \
            else session_timeout_ms
        self._kazoo: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop        # start() binds it
        self._connected = asyncio.Event()
        self._expired = False
        self._disconnected = False
        self._closing = False
        self._inflight: set[asyncio.Future[Any]] = set()
        self._give_up: asyncio.TimerHandle | None = None
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._watches: list[_Watch] = []
        self._topic_watches: dict[str, list[_Watch]] = {}
        self._own_session_ids: set[int] = set()

    # ------------------------------------------------------------ connection

    @property
    def connected(self) -> bool:
        return self._connected.is_set()

    @property
    def session_id(self) -> int | None:
        cid = self._kazoo.client_id if self._kazoo is not None else None
        return cid[0] if cid else None

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        """(session id, password): what a second client needs to take over (and so
        expire) this session, as ZooKeeper's own tests do."""
        return self._kazoo.client_id if self._kazoo is not None else None

    async def start(self) -> None:
        """Connects (retrying until connection_timeout_ms, then StoreUnavailable), creates
        the chroot if missing, then Kafka's persistent paths."""
        self._loop = asyncio.get_running_loop()
        self._closing = False
        self._kazoo = _kazoo_client(self.connect, self.session_timeout_ms / 1000,
                                    connection_retry=dict(_CONNECTION_RETRY))
        self._kazoo.add_listener(self._kazoo_state)
        self._kazoo.start_async()
        try:
            await asyncio.wait_for(self._connected.wait(), self.connection_timeout_ms / 1000)
        except asyncio.TimeoutError:
            self._closing = True
            await self._stop_kazoo()
            raise StoreUnavailable(self._unavailable()) from None
        log.info("connected to ZooKeeper at %s (session 0x%x, timeout %d ms)", self.connect,
                 self.session_id or 0, self.session_timeout_ms)
        if self.chroot and await self._op(lambda: self._zk.exists_async("/")) is None:
            await self._create_chroot()
        await asyncio.gather(*(self._ensure_path(path) for path in PERSISTENT_PATHS))

    async def _ensure_path(self, path: str) -> None:
        await self._op(lambda: self._zk.ensure_path_async(path))

    async def _exists(self, path: str) -> bool:
        return await self._op(lambda: self._zk.exists_async(path)) is not None

    async def close(self) -> None:
        """Closes the session: ZooKeeper deletes this client's ephemeral nodes at once."""
        self._closing = True
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        self._topic_watches.clear()
        if self._give_up is not None:
            self._give_up.cancel()
        await self._stop_kazoo()
        for fut in list(self._inflight):
            if not fut.done():
                fut.set_exception(StoreError("ZooKeeper client closed"))

    def add_session_listener(self, callback: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.append(callback)

    def _unavailable(self) -> str:
        return (f"ZooKeeper at {self.connect} is unreachable: no connection within "
                f"{self.connection_timeout_ms} ms")

    async def _stop_kazoo(self) -> None:
        kazoo = self._kazoo
        if kazoo is None:
            return

        def stop() -> None:       # joins kazoo's threads: never on the loop
            kazoo.stop()
            kazoo.close()
        await self._loop.run_in_executor(None, stop)

    async def _create_chroot(self) -> None:
        """Kafka creates a missing chroot with a client outside it, then uses it."""
        def create() -> None:
            outside = _kazoo_client(self.hosts, self.session_timeout_ms / 1000)
            try:
                outside.start(timeout=self.connection_timeout_ms / 1000)
                outside.ensure_path(self.chroot)
            finally:
                outside.stop()
                outside.close()
        try:
            await self._loop.run_in_executor(None, create)
        except Exception as e:          # kazoo's timeout is not a KazooException
            raise StoreUnavailable(f"{self._unavailable()} (creating chroot {self.chroot}: {e!r})") from e
        log.info("created ZooKeeper chroot %s", self.chroot)

    def _kazoo_state(self, state: str) -> None:
        """kazoo's state listener, on kazoo's connection thread: hand over to the loop."""
        session_id = self.session_id
        try:
            self._loop.call_soon_threadsafe(self._state_changed, state, session_id)
        except RuntimeError:        # the loop is closed: nothing left to tell
            pass

    def _state_changed(self, state: str, session_id: int | None) -> None:
        if self._closing:
            return
        if state == KazooState.CONNECTED:
            self._connected.set()
            if self._give_up is not None:
                self._give_up.cancel()
                self._give_up = None
            if session_id:
                self._own_session_ids.add(session_id)
            event = SessionEvent.NEW_SESSION if self._expired else \
                SessionEvent.RECONNECTED if self._disconnected else None
            self._expired = self._disconnected = False
            if event is None:
                return
            log.info("ZooKeeper %s (session 0x%x)", event.value, session_id or 0)
            for w in self._watches:     # kazoo dropped every watch with the connection
                w.fired()
            self._emit(event)
            return
        self._connected.clear()
        if state == KazooState.SUSPENDED:
            self._disconnected = True
            log.warning("ZooKeeper connection lost; waiting up to %d ms for it to come back",
                        self.connection_timeout_ms)
            if self._give_up is None:
                self._give_up = self._loop.call_later(self.connection_timeout_ms / 1000, self._fail_inflight)
            self._emit(SessionEvent.DISCONNECTED)
        elif state == KazooState.LOST:
            self._expired = True
            log.warning("ZooKeeper session expired: its ephemeral nodes are gone")
            # requests kazoo had queued for the old session are dropped without an answer
            for fut in list(self._inflight):
                if not fut.done():
                    fut.set_exception(SessionExpiredError())
            self._emit(SessionEvent.EXPIRED)

    def _fail_inflight(self) -> None:
        self._give_up = None
        for fut in list(self._inflight):
            if not fut.done():
                fut.set_exception(StoreUnavailable(self._unavailable()))

    def _emit(self, event: SessionEvent) -> None:
        for cb in list(self._session_listeners):
            try:
                cb(event)
            except Exception:
                log.exception("ZooKeeper session listener failed on %s", event.value)

    # ------------------------------------------------------------ kazoo -> asyncio

    def _bridge(self, result: Any) -> asyncio.Future[Any]:
        """An asyncio future settled on the loop when kazoo's async result (an
        IAsyncResult) is."""
        loop = self._loop
        fut: asyncio.Future[Any] = loop.create_future()
        self._inflight.add(fut)
        fut.add_done_callback(self._inflight.discard)

        def settle(r: Any) -> None:
            if fut.done():
                return
            if r.successful():
                fut.set_result(r.value)
            else:
                fut.set_exception(r.exception)

        def done(r: Any) -> None:        # kazoo's callback thread
            try:
                loop.call_soon_threadsafe(settle, r)
            except RuntimeError:
                pass
        result.rawlink(done)
        return fut

    def _watcher(self, fired: Callable[[], None]) -> KazooWatcher:
        """A kazoo watch function that calls `fired` on the loop."""
        loop = self._loop

        def watch(event: Any) -> None:   # kazoo's callback thread
            try:
                loop.call_soon_threadsafe(fired)
            except RuntimeError:
                pass
        return watch

    @property
    def _zk(self) -> Any:
        """The kazoo client (kazoo has no type stubs); _op runs requests only while it is started."""
        if self._kazoo is None:
            raise StoreError("ZooKeeper client is not started")
        return self._kazoo

    async def _op(self, request: Callable[[], Any]) -> Any:
        """Runs `request()` (a kazoo *_async call) until it gets an answer from ZooKeeper;
        again after a connection loss or session expiry; StoreUnavailable if the connection
        stays away for connection_timeout_ms. ZooKeeper's own answers (NoNode...) raise."""
        while True:
            if self._kazoo is None or self._closing:
                raise StoreError("ZooKeeper client is not started")
            if not self._connected.is_set():
                try:
                    await asyncio.wait_for(self._connected.wait(), self.connection_timeout_ms / 1000)
                except asyncio.TimeoutError:
                    raise StoreUnavailable(self._unavailable()) from None
            try:
                return await self._bridge(request())
            except ConnectionClosedError:
                raise StoreError("ZooKeeper client closed") from None
            except _RETRIABLE:
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def _get(self, path: str, watch: KazooWatcher | None = None) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None if the node does not exist."""
        try:
            return cast("tuple[bytes, ZnodeStat]", await self._op(lambda: self._zk.get_async(path, watch=watch)))
        except NoNodeError:
            return None

    async def _get_watched(self, path: str, watch: KazooWatcher) -> tuple[bytes, ZnodeStat] | None:
        """A data watch that also sees the node being created: getData leaves no watch on
        a missing node, exists does."""
        while True:
            got = await self._get(path, watch)
            if got is not None:
                return got
            if await self._op(lambda: self._zk.exists_async(path, watch=watch)) is None:
                return None

    async def _children(self, path: str, watch: KazooWatcher | None = None) -> list[str]:
        try:
            return cast("list[str]", await self._op(lambda: self._zk.get_children_async(path, watch=watch)))
        except NoNodeError:
            return []

    async def _commit(self, build: Callable[[Any], None]) -> list[Any]:
        """One multi-op; `build(transaction)` adds its ops (again on a retry)."""
        def request() -> Any:
            tx = self._zk.transaction()
            build(tx)
            return tx.commit_async()
        return cast("list[Any]", await self._op(request))

    async def _watch(self, read: Callable[[KazooWatcher], Awaitable[T]], callback: Callable[[T], None],
                     deliver_equal: bool = False) -> tuple[_Watch, T]:
        w = _Watch(self, read, callback, deliver_equal)
        self._watches.append(w)
        try:
            return w, await w.arm()
        except BaseException:
            self._watches.remove(w)
            raise

    # ------------------------------------------------------------ cluster id

    @_public
    async def get_or_create_cluster_id(self, proposed: str) -> str:
        """The cluster id in /cluster/id, created as `proposed` if there is none."""
        while True:
            try:
                await self._op(lambda: self._zk.create_async(
                    ClusterIdZNode.PATH, ClusterIdZNode.encode(proposed), makepath=True))
                return proposed
            except NodeExistsError:
                got = await self._get(ClusterIdZNode.PATH)
                if got is not None:
                    return ClusterIdZNode.decode(got[0])

    # ------------------------------------------------------------ brokers

    @_public
    async def register_broker(self, registration: BrokerRegistration) -> int:
        """Creates the ephemeral /brokers/ids/<id>; returns the broker epoch (the node's
        czxid, as Kafka). BrokerIdInUse if another live session holds the id. A node left
        by one of this client's own earlier sessions is replaced (Kafka's KAFKA-7165)."""
        path = BrokerIdZNode.path(registration.broker_id)
        data = BrokerIdZNode.encode(registration)
        while True:
            try:
                _, stat = cast("tuple[str, ZnodeStat]", await self._op(lambda: self._zk.create_async(
                    path, data, ephemeral=True, include_data=True)))
                log.info("registered broker %d at %s, broker epoch %d", registration.broker_id, path, stat.czxid)
                return stat.czxid
            except NodeExistsError:
                pass
            got = await self._get(path)
            if got is None:
                continue                      # gone meanwhile: create again
            owner = got[1].ephemeralOwner
            if owner == self.session_id:
                return got[1].czxid           # ours: a create repeated after a connection loss
            if owner not in self._own_session_ids:
                raise BrokerIdInUse(f"broker id {registration.broker_id} is already registered in ZooKeeper "
                                    f"at {self.connect} (by session 0x{owner:x})")
            try:
                await self._op(lambda: self._zk.delete_async(path, version=got[1].version))
            except (NoNodeError, BadVersionError):
                pass

    @_public
    async def get_brokers(self) -> dict[int, BrokerRegistration]:
        return {b: reg for b, (reg, _) in (await self.get_brokers_and_epochs()).items()}

    @_public
    async def get_brokers_and_epochs(self) -> dict[int, tuple[BrokerRegistration, int]]:
        """Every registered broker with its broker epoch (czxid)."""
        ids = _broker_ids(await self._children(BrokerIdsZNode.PATH))
        got = await asyncio.gather(*(self._get(BrokerIdZNode.path(b)) for b in ids))
        return {b: (BrokerIdZNode.decode(b, g[0]), g[1].czxid) for b, g in zip(ids, got) if g is not None}

    @_public
    async def watch_broker_ids(self, callback: Callable[[frozenset[int]], None]) -> frozenset[int]:
        """The registered broker ids now; callback(ids) each time the registrations change,
        also when the ids read are the same: a broker whose session expired and that
        registered again before the read (its broker epoch changed; the caller compares)."""
        async def read(watcher: KazooWatcher) -> frozenset[int]:
            return frozenset(_broker_ids(await self._children(BrokerIdsZNode.PATH, watcher)))
        return (await self._watch(read, callback, deliver_equal=True))[1]

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
        results = await self._commit(build)
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
                await self._op(lambda: self._zk.create_async(
                    ControllerEpochZNode.PATH, ControllerEpochZNode.encode(ControllerEpochZNode.INITIAL_EPOCH)))
                return ControllerEpochZNode.INITIAL_EPOCH, ControllerEpochZNode.INITIAL_EPOCH_ZK_VERSION
            except NodeExistsError:
                pass

    @_public
    async def sync(self, path: str = "/") -> None:
        """ZooKeeper's sync: the server this client is connected to catches up with the
        leader, so that the reads sent after it see every write committed before it, by any
        client (a server answers reads from its own copy, which may lag behind)."""
        await self._op(lambda: self._zk.sync_async(path))

    @_public
    async def get_controller_id(self) -> int | None:
        got = await self._get(ControllerZNode.PATH)
        return None if got is None else ControllerZNode.decode(got[0]).broker_id

    @_public
    async def watch_controller(self, callback: Callable[[int | None], None]) -> int | None:
        """The controller's broker id now (None: no controller); callback on each change."""
        async def read(watcher: KazooWatcher) -> int | None:
            got = await self._get_watched(ControllerZNode.PATH, watcher)
            return None if got is None else ControllerZNode.decode(got[0]).broker_id
        return (await self._watch(read, callback))[1]

    @_public
    async def get_controller_epoch(self) -> tuple[int, int] | None:
        """(epoch, zk version) of /controller_epoch, None before the first election."""
        got = await self._get(ControllerEpochZNode.PATH)
        return None if got is None else (ControllerEpochZNode.decode(got[0]), got[1].version)

    # ------------------------------------------------------------ topics

    @_public
    async def create_topic(self, name: str, topic_id: uuid.UUID, assignment: Mapping[int, Iterable[int]],
                           configs: Mapping[str, str]) -> None:
        """As Kafka's AdminZkClient: the config node first (not atomic with the rest: a
        config without a topic node is harmless), then /brokers/topics/<t>, which the
        controller watches. TopicExists if the topic node exists (also while it is being
        deleted)."""
        path = TopicZNode.path(name)
        if await self._op(lambda: self._zk.exists_async(path)) is not None:
            raise TopicExists(f"topic {name!r} already exists")
        await self._write_entity_config(ConfigEntityTypeZNode.TOPIC, name, configs)
        data = TopicZNode.encode(TopicAssignment(topic_id, _assignment(assignment)))
        try:
            await self._op(lambda: self._zk.create_async(path, data))
        except NodeExistsError:
            raise TopicExists(f"topic {name!r} already exists") from None

    @_public
    async def get_topic_names(self) -> frozenset[str]:
        return frozenset(await self._children(TopicsZNode.PATH))

    @_public
    async def watch_topics(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]:
        """The topic names now; callback(names) on each creation or deletion."""
        async def read(watcher: KazooWatcher) -> frozenset[str]:
            return frozenset(await self._children(TopicsZNode.PATH, watcher))
        return (await self._watch(read, callback))[1]

    @_public
    async def get_topic(self, name: str) -> tuple[uuid.UUID | None, dict[int, list[int]], int]:
        """(topic id, partition -> replicas, zk version); NoSuchTopic."""
        got = await self._get(TopicZNode.path(name))
        if got is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        return _topic_value(name, got)

    @_public
    async def watch_topic(self, name: str, callback: Callable[[TopicValue | None], None]) -> TopicValue | None:
        """get_topic's value now (None: no such topic); callback(value or None) on each
        change of the topic node (partitions added, the topic deleted). unwatch_topic ends it."""
        path = TopicZNode.path(name)

        async def read(watcher: KazooWatcher) -> TopicValue | None:
            got = await self._get_watched(path, watcher)
            return None if got is None else _topic_value(name, got)
        w, value = await self._watch(read, callback)
        self._topic_watches.setdefault(name, []).append(w)
        return value

    def unwatch_topic(self, name: str) -> None:
        for w in self._topic_watches.pop(name, []):
            w.cancel()
            if w in self._watches:
                self._watches.remove(w)

    @_public
    async def set_topic_assignment(self, name: str, topic_id: uuid.UUID | None,
                                   assignment: Mapping[int, Iterable[int]], expected_version: int) -> int:
        """Rewrites the topic node if its zk version is still `expected_version` (partition
        additions); returns the new zk version. BadVersion, NoSuchTopic."""
        path = TopicZNode.path(name)
        data = TopicZNode.encode(TopicAssignment(topic_id, _assignment(assignment)))
        try:
            stat = cast(ZnodeStat, await self._op(lambda: self._zk.set_async(path, data, version=expected_version)))
        except BadVersionError:
            raise BadVersion(f"{path} is no longer at zk version {expected_version}") from None
        except NoNodeError:
            raise NoSuchTopic(f"topic {name!r} does not exist") from None
        return stat.version

    # ------------------------------------------------------------ partition states

    @_public
    async def get_partition_states(self, topic: str) -> dict[int, tuple[LeaderIsrState, int]]:
        """partition -> (state, zk version) for every partition that has a state node."""
        partitions = sorted(int(p) for p in await self._children(TopicPartitionsZNode.path(topic)) if p.isdigit())
        got = await asyncio.gather(*(self._get(TopicPartitionStateZNode.path(topic, p)) for p in partitions))
        return {p: (TopicPartitionStateZNode.decode(topic, p, g[0]), g[1].version)
                for p, g in zip(partitions, got) if g is not None}

    @_public
    async def create_partition_states(self, topic: str, states: Mapping[int, LeaderIsrState],
                                      controller_epoch_zk_version: int) -> dict[int, int | BadVersion]:
        """Creates the state nodes of new partitions (and their parents), fenced by the
        controller epoch. partition -> zk version of the new node (0), or BadVersion if the
        state node already exists. ControllerMoved if the epoch changed."""
        parent = TopicPartitionsZNode.path(topic)
        if await self._op(lambda: self._zk.exists_async(parent)) is None:
            def build_parent(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                tx.create(parent)
            results = await self._commit(build_parent)
            self._check_fence(results, controller_epoch_zk_version, tolerate=NodeExistsError)
        partition_nodes = set(await self._children(parent))

        async def create(p: int, state: LeaderIsrState) -> int | BadVersion:
            def build(tx: Any) -> None:
                self._fence(tx, controller_epoch_zk_version)
                if str(p) not in partition_nodes:
                    tx.create(TopicPartitionZNode.path(topic, p))
                tx.create(TopicPartitionStateZNode.path(topic, p), TopicPartitionStateZNode.encode(state))
            results = await self._commit(build)
            failed = self._check_fence(results, controller_epoch_zk_version, tolerate=NodeExistsError)
            if failed is None:
                return 0
            return BadVersion(f"{TopicPartitionStateZNode.path(topic, p)} already exists")
        done = await asyncio.gather(*(create(p, s) for p, s in states.items()), return_exceptions=True)
        return _gathered(dict(zip(states, done)))

    @_public
    async def update_partition_states(self, updates: Mapping[tuple[str, int], tuple[LeaderIsrState, int]],
                                      controller_epoch_zk_version: int
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
            results = await self._commit(build)
            failed = self._check_fence(results, controller_epoch_zk_version,
                                       tolerate=(BadVersionError, NoNodeError))
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
    def _check_fence(results: list[Any], controller_epoch_zk_version: int,
                     tolerate: tuple[type[Exception], ...]) -> Exception | None:
        """None if the fenced multi-op succeeded; the error of a later op if it is one of
        `tolerate`; ControllerMoved if the fence failed; any other error raises."""
        failed = _multi_error(results)
        if failed is None:
            return None
        index, error = failed
        if index == 0:
            raise ControllerMoved(f"{ControllerEpochZNode.PATH} is no longer at zk version "
                                  f"{controller_epoch_zk_version}: another controller was elected")
        if isinstance(error, tolerate):
            return error
        raise error

    # ------------------------------------------------------------ configs

    @_public
    async def get_topic_configs(self, name: str) -> dict[str, str]:
        """The topic's config overrides ({} if none)."""
        got = await self._get(ConfigEntityZNode.path(ConfigEntityTypeZNode.TOPIC, name))
        return {} if got is None else ConfigEntityZNode.decode(ConfigEntityTypeZNode.TOPIC, name, got[0])

    @_public
    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        """Replaces the topic's overrides, then notifies every broker through a sequential
        /config/changes/config_change_ node (Kafka's AdminZkClient.changeTopicConfig)."""
        if await self._op(lambda: self._zk.exists_async(TopicZNode.path(name))) is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        await self._write_entity_config(ConfigEntityTypeZNode.TOPIC, name, configs)
        data = ConfigEntityChangeNotificationSequenceZNode.encode(f"{ConfigEntityTypeZNode.TOPIC}/{name}")
        await self._op(lambda: self._zk.create_async(
            ConfigEntityChangeNotificationSequenceZNode.CREATE_PATH, data, sequence=True, makepath=True))

    async def _write_entity_config(self, entity_type: str, name: str, configs: Mapping[str, str]) -> None:
        path = ConfigEntityZNode.path(entity_type, name)
        data = ConfigEntityZNode.encode(configs)
        while True:
            try:
                await self._op(lambda: self._zk.set_async(path, data))
                return
            except NoNodeError:
                pass
            try:
                await self._op(lambda: self._zk.create_async(path, data, makepath=True))
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
        last: list[int | None] = [None]      # the last sequence number handled (None: arming)
        ctimes: dict[str, int] = {}          # handled notifications not yet purged

        async def read(watcher: KazooWatcher) -> list[str]:
            names = await self._children(parent, watcher)
            numbered = sorted((sequence_number(n, prefix), n) for n in names if _is_sequence(n, prefix))
            if last[0] is None:              # arming: only what comes after this call
                last[0] = numbered[-1][0] if numbered else -1
                return []
            paths = []
            for seq, n in numbered:
                if seq <= last[0]:
                    continue
                got = await self._get(f"{parent}/{n}")
                last[0] = seq
                if got is not None:
                    ctimes[n] = got[1].ctime
                    paths.append(ConfigEntityChangeNotificationSequenceZNode.decode(f"{parent}/{n}", got[0]))
            await self._purge_config_changes(ctimes)
            return paths

        def deliver(paths: list[str]) -> None:
            if paths:
                callback(paths)
        await self._watch(read, deliver, deliver_equal=True)

    async def _purge_config_changes(self, ctimes: dict[str, int]) -> None:
        horizon = time.time() * 1000 - CONFIG_CHANGE_EXPIRATION_MS
        for name in [n for n, ctime in ctimes.items() if ctime < horizon]:
            del ctimes[name]
            try:
                await self._op(lambda: self._zk.delete_async(f"{ConfigEntityChangeNotificationZNode.PATH}/{name}"))
            except NoNodeError:
                pass

    # ------------------------------------------------------------ topic deletion

    @_public
    async def mark_topic_for_deletion(self, name: str) -> None:
        """Creates /admin/delete_topics/<t> for the controller; NoSuchTopic. Marking a
        topic twice is not an error (Kafka's admin manager swallows it too)."""
        if await self._op(lambda: self._zk.exists_async(TopicZNode.path(name))) is None:
            raise NoSuchTopic(f"topic {name!r} does not exist")
        try:
            await self._op(lambda: self._zk.create_async(DeleteTopicsTopicZNode.path(name), makepath=True))
        except NodeExistsError:
            pass

    @_public
    async def get_topics_marked_for_deletion(self) -> frozenset[str]:
        return frozenset(await self._children(DeleteTopicsZNode.PATH))

    @_public
    async def watch_topic_deletions(self, callback: Callable[[frozenset[str]], None]) -> frozenset[str]:
        """The topics marked for deletion now; callback(topics) on each change."""
        async def read(watcher: KazooWatcher) -> frozenset[str]:
            return frozenset(await self._children(DeleteTopicsZNode.PATH, watcher))
        return (await self._watch(read, callback))[1]

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
            results = await self._commit(build)
            if self._check_fence(results, controller_epoch_zk_version, tolerate=(NoNodeError, NotEmptyError)) is None:
                log.info("deleted the znodes of topic %s", name)
                return
            # a node appeared or vanished meanwhile: look again

    async def _topic_znodes(self, name: str) -> list[str]:
        """The existing znodes of a topic, children before parents."""
        out = []
        topic = TopicZNode.path(name)
        if await self._op(lambda: self._zk.exists_async(topic)) is not None:
            partitions = TopicPartitionsZNode.path(name)
            for p in await self._children(partitions):
                out += [f"{partitions}/{p}/{c}" for c in await self._children(f"{partitions}/{p}")]
                out.append(f"{partitions}/{p}")
            if await self._op(lambda: self._zk.exists_async(partitions)) is not None:
                out.append(partitions)
            out.append(topic)
        for path in (ConfigEntityZNode.path(ConfigEntityTypeZNode.TOPIC, name), DeleteTopicsTopicZNode.path(name)):
            if await self._exists(path):
                out.append(path)
        return out

    # ------------------------------------------------------------ preferred replica election

    @_public
    async def create_preferred_replica_election(self, partitions: Iterable[TopicPartition]) -> None:
        """What Kafka's old preferred-replica-election tool writes; NodeExists is a
        StoreError (an election is already pending)."""
        try:
            await self._op(lambda: self._zk.create_async(
                PreferredReplicaElectionZNode.PATH, PreferredReplicaElectionZNode.encode(partitions), makepath=True))
        except NodeExistsError:
            raise StoreError("a preferred replica election is already in progress") from None

    @_public
    async def get_preferred_replica_election(self) -> frozenset[TopicPartition]:
        got = await self._get(PreferredReplicaElectionZNode.PATH)
        return frozenset() if got is None else PreferredReplicaElectionZNode.decode(got[0])

    @_public
    async def watch_preferred_replica_election(self, callback: Callable[[frozenset[TopicPartition]], None]
                                               ) -> frozenset[TopicPartition]:
        """The partitions asked for now (empty: none); callback(partitions) on each change."""
        async def read(watcher: KazooWatcher) -> frozenset[TopicPartition]:
            got = await self._get_watched(PreferredReplicaElectionZNode.PATH, watcher)
            return frozenset() if got is None else PreferredReplicaElectionZNode.decode(got[0])
        return (await self._watch(read, callback))[1]

    @_public
    async def delete_preferred_replica_election(self, controller_epoch_zk_version: int) -> None:
        def build(tx: Any) -> None:
            self._fence(tx, controller_epoch_zk_version)
            tx.delete(PreferredReplicaElectionZNode.PATH)
        results = await self._commit(build)
        self._check_fence(results, controller_epoch_zk_version, tolerate=NoNodeError)

    # ------------------------------------------------------------ producer ids

    @_public
    async def allocate_producer_id_block(self, broker_id: int, size: int = PRODUCER_ID_BLOCK_SIZE) -> tuple[int, int]:
        """The next block of producer ids (first, last), claimed with a conditional update
        of /latest_producer_id_block, retried when another broker claimed one first (Kafka's
        ZkProducerIdManager)."""
        path = ProducerIdBlockZNode.PATH
        while True:
            got = await self._get(path)
            if got is None:
                await self._op(lambda: self._zk.ensure_path_async(path))
                continue
            data, stat = got
            start = ProducerIdBlockZNode.decode(data).block_end + 1 if data else 0
            if start > INT64_MAX - size:
                raise StoreError("every producer id has been allocated")
            block = ProducerIdBlock(broker_id, start, start + size - 1)
            try:
                await self._op(lambda: self._zk.set_async(path, ProducerIdBlockZNode.encode(block),
                                                             version=stat.version))
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
    raised = [v for v in results.values() if isinstance(v, BaseException) and not isinstance(v, (BadVersion, NoSuchTopic))]
    for error in sorted(raised, key=lambda e: not isinstance(e, ControllerMoved)):
        raise error
    return results

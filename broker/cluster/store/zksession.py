"""ZkSession: the ZooKeeper session of a broker, as coroutines (Kafka's ZooKeeperClient):
the kazoo client's lifecycle, connection and session state and events, and the bridge
between kazoo's threads and the broker's asyncio loop. It knows nothing of Kafka's znodes:
KafkaZkClient (zkclient.py) builds Kafka's operations on its primitives.

Threads: kazoo runs its own (a connection thread and a callback thread); the broker runs
one asyncio loop. Invariants:

- Every method and property is called on the loop that called `start()`, never on a
  kazoo thread. Nothing here blocks the loop: requests are kazoo's `*_async` calls whose
  completion is handed to the loop with `loop.call_soon_threadsafe` (`_bridge`); stopping
  kazoo (which joins its threads) and creating the chroot run in the loop's executor.
- What kazoo calls on its threads — the state listener (`_kazoo_state`), the completion
  of a request, a watch firing (`_watcher`) — only hands over to the loop; all state is
  read and written on the loop.
- Session listeners and watch callbacks are plain callables, always invoked ON THE LOOP.
  `watch(read, callback)` returns the current value and arms a watch that is re-armed
  after each firing: the callback gets each new value (a value equal to the last
  delivered one is not delivered again, unless `deliver_equal`). After a reconnection or
  a new session every watch is re-read and re-armed, so nothing missed while
  disconnected stays missed.
- `op(request)`: a request issued while the connection is down waits for it to come
  back (the same session or a new one) and runs then; in flight during a loss, it is
  sent again (as Kafka's retryRequestUntilConnected; callers write creates and multi-ops
  so that a repeat is recognised). If no connection comes back within
  `connection_timeout_ms` the request raises StoreUnavailable, and so does every request
  in flight when a disconnection has lasted that long. Requests in flight when the
  session expires are sent again on the new one (kazoo drops them unanswered).

Session events (SessionEvent), delivered on the loop to `add_session_listener`
callbacks: DISCONNECTED (the session may still live: ephemerals stay), RECONNECTED
(same session back), EXPIRED (the session is gone: ZooKeeper deleted this client's
ephemeral nodes), NEW_SESSION (connected again with a new session: re-register; kazoo
reconnects by itself).

Source address: kazoo's connections leave from the address the broker listens on when
it names a specific IP (broker.cluster.channel.bind_outgoing; `_kazoo_client` gives kazoo
a connection handler that binds), like the broker's connections to other brokers.

Errors: StoreUnavailable (above), StoreError when the session is closed or not started;
ZooKeeper's own answers (kazoo's NoNodeError, NodeExistsError...) are raised as they are,
for the caller to translate. kazoo is imported only here and in zkclient.py, and only a
broker with `zookeeper.connect` imports them.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar, cast

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    ConnectionClosedError,
    ConnectionLoss,
    NoNodeError,
    SessionExpiredError,
)
from kazoo.handlers import utils as kazoo_utils
from kazoo.handlers.threading import SequentialThreadingHandler

from broker.cluster.channel import source_address
from broker.cluster.metadata import SessionEvent
from broker.cluster.store.errors import StoreError, StoreUnavailable
from broker.cluster.store.znodes import parse_connect_string
from broker.metrics.stats import Histogram
from broker.timeouts import wait_for

log = logging.getLogger(__name__)

T = TypeVar("T")
#: a kazoo watch function (called with a WatchedEvent on kazoo's thread)
KazooWatcher = Callable[[Any], None]


class ZnodeStat(Protocol):
    """What is read of kazoo's ZnodeStat (kazoo has no type stubs)."""

    czxid: int
    ctime: int
    version: int
    ephemeralOwner: int


DEFAULT_SESSION_TIMEOUT_MS = 18000  # zookeeper.session.timeout.ms
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


class Watch:
    """One re-armed kazoo watch. `read(watcher)` reads the value and leaves `watcher` as a
    one-shot kazoo watch; each firing re-reads (re-arming) on the loop, one read at a
    time, and hands new values to `callback`."""

    def __init__(
        self,
        session: ZkSession,
        read: Callable[[KazooWatcher], Awaitable[Any]],
        callback: Callable[[Any], None],
        deliver_equal: bool = False,
    ):
        self._read = read
        self._callback = callback
        self._deliver_equal = deliver_equal
        self._watcher = session._watcher(self.fired)
        self._dirty = False
        self._armed = False
        self._task: asyncio.Task[None] | None = None
        self.active = True
        self.last: Any = None

    async def arm(self) -> Any:
        self.last = await self._read(self._watcher)
        self._armed = True
        if self._dirty:  # fired while arming: read again
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
                return  # re-armed by the next (re)connection
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


class ZkSession:
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
        self.hosts, self.chroot = parse_connect_string(connect)
        self.session_timeout_ms = session_timeout_ms
        self.connection_timeout_ms = connection_timeout_ms if connection_timeout_ms is not None else session_timeout_ms
        self._kazoo: KazooClient | None = None
        self._loop: asyncio.AbstractEventLoop  # start() binds it
        self._connected = asyncio.Event()
        self._expired = False
        self._disconnected = False
        self._closing = False
        self._inflight: set[asyncio.Future[Any]] = set()
        self._give_up: asyncio.TimerHandle | None = None
        self._session_listeners: list[Callable[[SessionEvent], None]] = []
        self._watches: list[Watch] = []
        self._own_session_ids: set[int] = set()
        #: each request's round trip in seconds (Kafka's ZooKeeperRequestLatencyMs)
        self.latency = Histogram()

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
        """Connects (retrying until connection_timeout_ms, then StoreUnavailable), then
        creates the chroot if missing."""
        self._loop = asyncio.get_running_loop()
        self._closing = False
        self._kazoo = _kazoo_client(
            self.connect, self.session_timeout_ms / 1000, connection_retry=dict(_CONNECTION_RETRY)
        )
        self._kazoo.add_listener(self._kazoo_state)
        self._kazoo.start_async()
        try:
            await wait_for(self._connected.wait(), self.connection_timeout_ms / 1000)
        except asyncio.TimeoutError:
            self._closing = True
            await self._stop_kazoo()
            raise StoreUnavailable(self._unavailable()) from None
        log.info(
            "connected to ZooKeeper at %s (session 0x%x, timeout %d ms)",
            self.connect,
            self.session_id or 0,
            self.session_timeout_ms,
        )
        if self.chroot and await self.op(lambda: self.kazoo.exists_async("/")) is None:
            await self._create_chroot()

    async def close(self) -> None:
        """Closes the session: ZooKeeper deletes this client's ephemeral nodes at once."""
        self._closing = True
        for w in self._watches:
            w.cancel()
        self._watches.clear()
        if self._give_up is not None:
            self._give_up.cancel()
        await self._stop_kazoo()
        for fut in list(self._inflight):
            if not fut.done():
                fut.set_exception(StoreError("ZooKeeper client closed"))

    def add_session_listener(self, callback: Callable[[SessionEvent], None]) -> None:
        self._session_listeners.append(callback)

    def _unavailable(self) -> str:
        return f"ZooKeeper at {self.connect} is unreachable: no connection within {self.connection_timeout_ms} ms"

    async def _stop_kazoo(self) -> None:
        kazoo = self._kazoo
        if kazoo is None:
            return

        def stop() -> None:  # joins kazoo's threads: never on the loop
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
        except Exception as e:  # kazoo's timeout is not a KazooException
            raise StoreUnavailable(f"{self._unavailable()} (creating chroot {self.chroot}: {e!r})") from e
        log.info("created ZooKeeper chroot %s", self.chroot)

    def _kazoo_state(self, state: str) -> None:
        """kazoo's state listener, on kazoo's connection thread: hand over to the loop."""
        session_id = self.session_id
        try:
            self._loop.call_soon_threadsafe(self._state_changed, state, session_id)
        except RuntimeError:  # the loop is closed: nothing left to tell
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
            event = (
                SessionEvent.NEW_SESSION if self._expired else SessionEvent.RECONNECTED if self._disconnected else None
            )
            self._expired = self._disconnected = False
            if event is None:
                return
            log.info("ZooKeeper %s (session 0x%x)", event.value, session_id or 0)
            for w in self._watches:  # kazoo dropped every watch with the connection
                w.fired()
            self._emit(event)
            return
        self._connected.clear()
        if state == KazooState.SUSPENDED:
            self._disconnected = True
            log.warning(
                "ZooKeeper connection lost; waiting up to %d ms for it to come back", self.connection_timeout_ms
            )
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

        def done(r: Any) -> None:  # kazoo's callback thread
            try:
                loop.call_soon_threadsafe(settle, r)
            except RuntimeError:
                pass

        result.rawlink(done)
        return fut

    def _watcher(self, fired: Callable[[], None]) -> KazooWatcher:
        """A kazoo watch function that calls `fired` on the loop."""
        loop = self._loop

        def watch(event: Any) -> None:  # kazoo's callback thread
            try:
                loop.call_soon_threadsafe(fired)
            except RuntimeError:
                pass

        return watch

    @property
    def kazoo(self) -> Any:
        """The kazoo client (kazoo has no type stubs), to build requests for `op`, which
        runs them only while it is started."""
        if self._kazoo is None:
            raise StoreError("ZooKeeper client is not started")
        return self._kazoo

    async def op(self, request: Callable[[], Any]) -> Any:
        """Runs `request()` (a kazoo *_async call) until it gets an answer from ZooKeeper;
        again after a connection loss or session expiry; StoreUnavailable if the connection
        stays away for connection_timeout_ms. ZooKeeper's own answers (NoNode...) raise."""
        while True:
            if self._kazoo is None or self._closing:
                raise StoreError("ZooKeeper client is not started")
            if not self._connected.is_set():
                try:
                    await wait_for(self._connected.wait(), self.connection_timeout_ms / 1000)
                except asyncio.TimeoutError:
                    raise StoreUnavailable(self._unavailable()) from None
            try:
                started = time.monotonic()
                result = await self._bridge(request())
                self.latency.observe(time.monotonic() - started)
                return result
            except ConnectionClosedError:
                raise StoreError("ZooKeeper client closed") from None
            except _RETRIABLE:
                await asyncio.sleep(RETRY_BACKOFF_S)

    async def get(self, path: str, watch: KazooWatcher | None = None) -> tuple[bytes, ZnodeStat] | None:
        """(data, stat), or None if the node does not exist."""
        try:
            return cast("tuple[bytes, ZnodeStat]", await self.op(lambda: self.kazoo.get_async(path, watch=watch)))
        except NoNodeError:
            return None

    async def get_watched(self, path: str, watch: KazooWatcher) -> tuple[bytes, ZnodeStat] | None:
        """A data watch that also sees the node being created: getData leaves no watch on
        a missing node, exists does."""
        while True:
            got = await self.get(path, watch)
            if got is not None:
                return got
            if await self.op(lambda: self.kazoo.exists_async(path, watch=watch)) is None:
                return None

    async def children(self, path: str, watch: KazooWatcher | None = None) -> list[str]:
        try:
            return cast("list[str]", await self.op(lambda: self.kazoo.get_children_async(path, watch=watch)))
        except NoNodeError:
            return []

    async def commit(self, build: Callable[[Any], None]) -> list[Any]:
        """One multi-op; `build(transaction)` adds its ops (again on a retry)."""

        def request() -> Any:
            tx = self.kazoo.transaction()
            build(tx)
            return tx.commit_async()

        return cast("list[Any]", await self.op(request))

    async def exists(self, path: str) -> bool:
        return await self.op(lambda: self.kazoo.exists_async(path)) is not None

    async def ensure_path(self, path: str) -> None:
        await self.op(lambda: self.kazoo.ensure_path_async(path))

    async def watch(
        self, read: Callable[[KazooWatcher], Awaitable[T]], callback: Callable[[T], None], deliver_equal: bool = False
    ) -> tuple[Watch, T]:
        """Arms a watch: `read(watcher)` reads the value leaving `watcher` as kazoo's watch
        (get/get_watched/children take it); returns (the watch, the value now) and calls
        `callback` with each new value (see Watch), until `unwatch` or close."""
        w = Watch(self, read, callback, deliver_equal)
        self._watches.append(w)
        try:
            return w, await w.arm()
        except BaseException:
            self._watches.remove(w)
            raise

    def unwatch(self, w: Watch) -> None:
        w.cancel()
        if w in self._watches:
            self._watches.remove(w)

    def is_own_session(self, session_id: int) -> bool:
        """Whether `session_id` is one of this client's sessions, the current one or one
        that expired (its ephemeral nodes may outlive it for a moment)."""
        return session_id in self._own_session_ids

"""The listening socket and request dispatch.

dispatch(connection, frame):
    DIRECT_PATHS[api key](frame)                  a common Produce answered from its frame
                                                  (handlers/produce.py direct), when the
                                                  connection needs none of what follows
    header  = decode_request_header(frame)        unreadable -> close the connection
    handler = HANDLERS[api key]                   unknown key -> close (as Kafka does)
    version outside the handler's range           ApiVersions -> v0 error 35 with our
                                                  ranges; below the range, where the
                                                  protocol defines the version and the
                                                  handler has error_response -> error 35
                                                  in every error code (as Kafka does);
                                                  others -> close (as Kafka does)
    request = decode body                         malformed -> close (as Kafka does);
                                                  bytes after the body are ignored (as
                                                  Kafka does: librdkafka sends some)
    response = await handler.handle(ctx, request) None -> no response (acks=0);
                                                  out of descriptors or memory (EMFILE,
                                                  ENFILE ...) -> UNKNOWN_SERVER_ERROR in
                                                  every error code, with the reason
                                                  (protocol/error_response.py)
    -> encode_response parts for the connection's output queue

Kafka's own SocketServer closes connections on the same conditions; clients reconnect.

Accepting (Kafka's Acceptor and ConnectionQuotas):
- at max.connections open, the listening socket is not read: new clients wait in the
  listen backlog until a connection closes;
- beyond max.connections.per.ip (or its override for the address) a new connection is
  closed at once;
- when accept(2) fails for want of resources (EMFILE, ENFILE, ENOBUFS, ENOMEM) the
  listening socket is left alone for a backoff that doubles up to ACCEPT_BACKOFF_MAX_S,
  and the failure is logged once per LOG_INTERVAL_S: never a loop spinning on it;
- a connection idle for connections.max.idle.ms (no complete request received, nothing
  in progress, nothing to send) is closed, as a truncated frame left open would
  otherwise be held forever — also one whose client trickles a frame's bytes;
- a connection of a TLS or SASL listener is "authenticating" until its TLS handshake and
  SASL authentication are done: one still authenticating after
  connections.max.unauthenticated.ms is closed, and at most
  max.connections.unauthenticated of them are open (by default half the process's
  open-file limit): a new one beyond it closes the oldest. Connections that
  authenticated, and the files the broker opens, always have the other half; a client
  authenticates in milliseconds, so a flood of connections that never do cannot keep
  one that does out.
"""

from __future__ import annotations

import asyncio
import collections
import errno
import ipaddress
import logging
import resource
import socket
import time
from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, cast

from broker.config import Listener, parse_ip_overrides
from broker.metrics.stats import RequestStats, stats_key
from broker.protocol import codec
from broker.protocol._runtime import Message
from broker.protocol.codec import BufferLike
from broker.protocol.error_response import error_response
from broker.protocol.errors import ErrorCode
from broker.protocol.types import ProtocolDecodeError
from broker.server.connection import Connection, RequestMemory
from broker.server.handlers import (
    DIRECT_PATHS,
    ERROR_RESPONSES,
    HANDLERS,
    TV2_VERSIONS,
    max_version,
    unsupported_api_versions_response,
)
from broker.server.logsetup import request_log_api
from broker.server.stall import StallGuard

if TYPE_CHECKING:
    from broker.protocol.messages.request_header import RequestHeader
    from broker.security.api_rights import Right
    from broker.security.listener import ListenerSecurity
    from broker.server.handlers import Handler
    from broker.server.quotas import ClientQuotas
    from broker.server.services import BrokerServices

log = logging.getLogger(__name__)
#: failed logins and TLS handshakes, refused requests, ACL changes: one line each with the
#: principal and the client's address, held to one line per interval like the bad-request
#: warnings (a guessing client cannot fill the disk)
audit = logging.getLogger("broker.audit")
request_log = logging.getLogger("broker.request")

ACCEPT_BATCH = 64
ACCEPT_BACKOFF_MIN_S = 0.05
ACCEPT_BACKOFF_MAX_S = 1.0
LOG_INTERVAL_S = 10.0
#: accept(2) failures that mean "no resources now", not "this client went away"
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM})


class ThrottledLog:
    """A log line that repeats at most once per interval, saying how many were held back."""

    def __init__(self, interval_s: float = LOG_INTERVAL_S, logger: logging.Logger | None = None):
        self.log = logger or log
        self.interval_s = interval_s
        self._last = -interval_s
        self._held = 0

    def __call__(self, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last < self.interval_s:
            self._held += 1
            return
        if self._held:
            msg += f" ({self._held} more in the last {now - self._last:.0f} s)"
        self.log.log(level, msg, *args)
        self._last = now
        self._held = 0


class RequestContext:
    """What a handler sees besides its request (server/context.py's protocol)."""

    __slots__ = ("services", "connection", "header", "api_version", "received", "errors", "throttle_ms")

    def __init__(self, services: BrokerServices, connection: Connection, header: RequestHeader, received: float):
        self.services = services
        self.connection = connection
        self.header = header
        self.api_version = header.request_api_version
        self.received = received
        #: False when the handler knows its response holds no error code (the metrics then
        #: need not look through it: Produce and Fetch say so); None: unknown
        self.errors: bool | None = None
        #: the throttle time a quota asks of this answer (ms; set by the Fetch handler and the server)
        self.throttle_ms = 0

    @property
    def listener_name(self) -> str:
        return self.connection.listener_name

    @property
    def principal(self) -> str:
        return self.connection.principal

    def has_right(self, right: Right, name: str) -> bool:
        """Whether the client holds `right` (one of its API's row in API_RIGHTS,
        broker/security/api_rights.py) on the resource `name`: always without an
        authorizer; a refusal is written to the audit log (rate-held) when the row says so
        (Metadata filtering topics out is not a refused request)."""
        authz = self.services.authorizer
        if authz is None:
            return True
        conn = self.connection
        operation, resource_type = right.operation, right.resource_type
        if authz.authorize(conn.principal, conn.host, operation, resource_type, name):
            return True
        if right.audited:
            conn.server.audit_refused(
                conn, f"{operation.name} on {resource_type.name} {name!r} (api key {self.header.request_api_key})"
            )
        return False

    def has_right_on_some(self, right: Right) -> bool:
        """Whether the client holds `right` on some resource of its type (Kafka's
        authorizeByResourceType); never audited."""
        authz = self.services.authorizer
        conn = self.connection
        return authz is None or authz.authorized_any(conn.principal, conn.host, right.operation, right.resource_type)


def _warn_if_capped(sock: socket.socket, option: int, key: str, value: int, sysctl: str, checked: set[str]) -> None:
    """One warning when the kernel gave `sock` less than `key` asks (Linux doubles what it
    is given for its bookkeeping, and caps it at `sysctl`); once per key in `checked`."""
    if key in checked:
        return
    checked.add(key)
    got = sock.getsockopt(socket.SOL_SOCKET, option) // 2
    if got < value:
        log.warning(
            "%s=%d is above what %s allows: the buffer is %d bytes (raise %s to give it more)",
            key,
            value,
            sysctl,
            got,
            sysctl,
        )


class Acceptor:
    """One listener's socket (Kafka's Acceptor): its address, name and security protocol."""

    __slots__ = ("listener", "host", "port", "sock", "accepting", "security")

    def __init__(self, listener: Listener, security: ListenerSecurity | None = None):
        self.listener = listener
        self.host = listener.host
        self.port = listener.port
        self.sock: socket.socket | None = None
        self.accepting = False
        #: what a connection of this listener needs beyond plaintext (TLS, SASL); None: plaintext
        self.security = security

    @property
    def name(self) -> str:
        return self.listener.name

    def __repr__(self) -> str:
        return f"{self.listener.name}://{self.host}:{self.port}"


class Server:
    def __init__(
        self,
        services: BrokerServices,
        listeners: list[Listener] | None = None,
        securities: Mapping[str, ListenerSecurity] | None = None,
        measure: bool = False,
    ):
        self.services = services
        config = services.config
        self.acceptors = [Acceptor(x, (securities or {}).get(x.name)) for x in (listeners or config.endpoints)]
        self.loop: asyncio.AbstractEventLoop  # start() binds it
        self.connections: set[Connection] = set()
        self.requests_handled = 0
        #: holds requests after the process stood still (broker/server/stall.py); a
        #: ZooKeeper broker's only
        self.stall: StallGuard | None = None
        #: the requests' counts, timings (each connection observes its own) and error codes,
        #: counted when `measure` (metrics.listener); None: not counted
        self.request_stats: RequestStats | None = RequestStats() if measure else None
        #: the client quotas (broker/server/quotas.py); None: never throttled
        self.quotas: ClientQuotas | None = getattr(services, "quotas", None)
        #: log.request.api: this API's requests and answers are logged at DEBUG (-1: none)
        self.request_log_api = request_log_api(services.config)
        #: api key -> the newest version served, for the APIs whose newest versions are
        #: transaction.version 2's when that is off (empty at 2: nothing to check)
        self.version_caps: dict[int, int] = {}
        self.update_version_caps()
        #: SO_SNDBUF of each accepted connection and SO_RCVBUF of the listening sockets
        #: (inherited by what they accept); -1: the kernel's autotuning
        self.send_buffer = config["socket.send.buffer.bytes"]
        self.receive_buffer = config["socket.receive.buffer.bytes"]
        self._buffers_checked: set[str] = set()  # the buffer keys checked against the kernel's cap
        self.max_connections = config["max.connections"]
        self.max_connections_per_ip = config["max.connections.per.ip"]
        self.ip_limits: dict[str, int] = {}
        self.per_ip: collections.Counter[str] = collections.Counter()
        idle_ms = config["connections.max.idle.ms"]
        self.idle_s: float | None = None if idle_ms < 0 else idle_ms / 1000
        #: queued.max.request.bytes (None: unbounded, Kafka's default) and the bound of one
        #: connection's requests behind one in flight (connection.py)
        queued = config["queued.max.request.bytes"]
        self.request_memory = RequestMemory(queued) if queued > 0 else None
        self.max_queued_bytes_per_connection: int = config["queued.max.request.bytes.per.connection"]
        #: the connections still authenticating (TLS handshake, SASL), oldest first, with
        #: when they were accepted
        self.authenticating: dict[Connection, float] = {}
        self.unauthenticated_s = config["connections.max.unauthenticated.ms"] / 1000
        self.max_unauthenticated = max_unauthenticated(config["max.connections.unauthenticated"])
        self._auth_deadline: asyncio.TimerHandle | None = None
        self._log_unauthenticated = ThrottledLog()
        self._serving = False  # serve() opens the door
        self._backoff: asyncio.TimerHandle | None = None
        self._backoff_s = 0.0
        self._idle_sweep: asyncio.TimerHandle | None = None
        self._log_accept_failure = ThrottledLog()
        self._log_at_max = ThrottledLog()
        self._log_per_ip = ThrottledLog()
        # requests that close their connection: at most one line per interval, however
        # many a broken or hostile client sends (the rest are counted in the next line)
        self.log_bad_request = ThrottledLog()
        self._audit_failures = ThrottledLog(logger=audit)
        self._audit_refused = ThrottledLog(logger=audit)
        self._audit_changes = ThrottledLog(1.0, logger=audit)

    def set_securities(self, securities: Mapping[str, ListenerSecurity]) -> None:
        """Each listener's ListenerSecurity (broker/security/listener.py), before start()."""
        for acceptor in self.acceptors:
            sec = securities.get(acceptor.name)
            acceptor.security = sec if sec is not None and (sec.ssl_context or sec.sasl) else None

    def reconfigure_connection_limits(self) -> None:
        """max.connections, max.connections.per.ip and its overrides changed (dynamic
        broker configs): new connections count against the new limits at once; open ones
        stay (as Kafka's). OSError when an override's host does not resolve (nothing changed)."""
        config = self.services.config
        ip_limits = _resolve_ip_overrides(config["max.connections.per.ip.overrides"])
        self.ip_limits = ip_limits
        self.max_connections = config["max.connections"]
        self.max_connections_per_ip = config["max.connections.per.ip"]
        if hasattr(self, "loop"):
            self._update_accepting()

    def connection_counts(self) -> dict[str, int]:
        """Open connections per listener name, every listener named (Kafka's
        connection-count, tagged with its listener)."""
        counts = {a.name: 0 for a in self.acceptors}
        for conn in self.connections:
            counts[conn.listener_name] = counts.get(conn.listener_name, 0) + 1
        return counts

    def audit_refused(self, conn: Connection, what: str) -> None:
        """A refused request: one audit line, held as the rest."""
        self._audit_refused(
            logging.WARNING,
            "refused %s from %s on %s: %s",
            conn.principal,
            peer_ip(conn.address),
            conn.listener_name,
            what,
        )

    def audit_change(self, conn: Connection, what: str) -> None:
        """An ACL change (one line per request, naming the first ACLs and the count), held
        as the rest."""
        self._audit_changes(
            logging.INFO, "%s by %s from %s on %s", what, conn.principal, peer_ip(conn.address), conn.listener_name
        )

    def audit_failure(self, conn: Connection, what: str) -> None:
        """A failed authentication (TLS or SASL): one audit line, held as above."""
        self._audit_failures(
            logging.WARNING,
            "%s from %s on %s (principal %s)",
            what,
            peer_ip(conn.address),
            conn.listener_name,
            conn.principal,
        )

    @property
    def port(self) -> int:
        """The bound port of the first listener."""
        return self.acceptors[0].port

    def bound_port(self, listener_name: str) -> int:
        return next(a.port for a in self.acceptors if a.name == listener_name)

    def start(self, serve: bool = True) -> None:
        """Binds every listener; OSError saying which address could not be listened on (or
        which host of max.connections.per.ip.overrides does not resolve). Without
        `serve`, connections wait in the listen backlog until serve(): the broker binds
        its ports first (a taken port stops it before it registers anywhere) but answers
        nobody before it has registered (Kafka's startProcessingRequests)."""
        self.loop = asyncio.get_running_loop()
        self.ip_limits = _resolve_ip_overrides(self.services.config["max.connections.per.ip.overrides"])
        try:
            for acceptor in self.acceptors:
                self._bind(acceptor)
        except OSError:
            self.stop_listening()
            raise
        if serve:
            self.serve()
        if self.idle_s is not None:
            self._idle_sweep = self.loop.call_later(self._idle_sweep_s, self._close_idle)

    def _bind(self, acceptor: Acceptor) -> None:
        try:
            infos = socket.getaddrinfo(
                acceptor.host or None, acceptor.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
            )
            family, socktype, proto, _, addr = infos[0]
            sock = socket.socket(family, socktype, proto)
        except OSError as exc:
            raise _listen_error(acceptor, exc) from None
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if self.receive_buffer >= 0:
                # before listen(2): the window scale of what it accepts is chosen from it
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, self.receive_buffer)
                _warn_if_capped(
                    sock,
                    socket.SO_RCVBUF,
                    "socket.receive.buffer.bytes",
                    self.receive_buffer,
                    "net.core.rmem_max",
                    self._buffers_checked,
                )
            sock.bind(addr)
            sock.listen(1024)
        except OSError as exc:
            sock.close()
            raise _listen_error(acceptor, exc) from None
        sock.setblocking(False)
        acceptor.sock = sock
        acceptor.port = sock.getsockname()[1]

    # ------------------------------------------------------------------ accepting

    def serve(self) -> None:
        """Starts accepting the connections waiting in the listen backlogs and new ones."""
        self._serving = True
        self._update_accepting()

    def _update_accepting(self) -> None:
        """Reads the listening sockets exactly while a connection may be accepted."""
        want_any = self._serving and self._backoff is None and len(self.connections) < self.max_connections
        for acceptor in self.acceptors:
            sock = acceptor.sock
            want = want_any and sock is not None
            if want and not acceptor.accepting:
                assert sock is not None
                self.loop.add_reader(sock.fileno(), self._accept, acceptor)
            elif not want and acceptor.accepting:
                assert sock is not None  # stop_listening stops accepting before it drops the socket
                self.loop.remove_reader(sock.fileno())
            acceptor.accepting = want

    def _accept(self, acceptor: Acceptor) -> None:
        sock = acceptor.sock
        assert sock is not None  # read only while listening
        for _ in range(ACCEPT_BATCH):
            if len(self.connections) >= self.max_connections:
                self._log_at_max(
                    logging.WARNING,
                    "max.connections (%d) reached: new connections wait in the listen backlog until one closes",
                    self.max_connections,
                )
                self._update_accepting()
                return
            try:
                conn_sock, addr = sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                if exc.errno in RESOURCE_ERRNOS:
                    self._back_off(exc)
                else:  # e.g. ECONNABORTED: that client gave up
                    log.debug("accept failed: %s", exc)
                return
            self._backoff_s = 0.0
            ip = peer_ip(addr)
            limit = self.ip_limits.get(ip, self.max_connections_per_ip)
            if self.per_ip[ip] >= limit:
                self._log_per_ip(
                    logging.WARNING, "%s: max.connections.per.ip (%d) reached; connection closed", ip, limit
                )
                conn_sock.close()
                continue
            self.per_ip[ip] += 1
            if self.send_buffer >= 0:
                # Kafka's default, 100 KiB: a Fetch's sendfile(2) costs about a third less
                # CPU per byte than with the kernel's autotuned buffer (bench/RESULTS.md)
                try:
                    conn_sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.send_buffer)
                    _warn_if_capped(
                        conn_sock,
                        socket.SO_SNDBUF,
                        "socket.send.buffer.bytes",
                        self.send_buffer,
                        "net.core.wmem_max",
                        self._buffers_checked,
                    )
                except OSError as exc:
                    log.debug("%s: SO_SNDBUF not set: %s", addr, exc)
            conn = Connection(self, conn_sock, addr, acceptor)
            self.connections.add(conn)
            if conn.authenticating:
                self._authenticating(conn)

    def _back_off(self, exc: OSError) -> None:
        self._backoff_s = min(max(2 * self._backoff_s, ACCEPT_BACKOFF_MIN_S), ACCEPT_BACKOFF_MAX_S)
        self._log_accept_failure(
            logging.WARNING,
            "accept failed: %s (%d connections open); new connections wait, accepting again in %.2f s",
            exc.strerror or exc,
            len(self.connections),
            self._backoff_s,
        )
        self._backoff = self.loop.call_later(self._backoff_s, self._end_backoff)
        self._update_accepting()

    def _end_backoff(self) -> None:
        self._backoff = None
        self._update_accepting()

    def _authenticating(self, conn: Connection) -> None:
        """A new connection that must authenticate: the oldest still authenticating is
        closed when max.connections.unauthenticated are open; the deadline is armed."""
        waiting = self.authenticating
        if len(waiting) >= self.max_unauthenticated:
            oldest = next(iter(waiting))
            self._log_unauthenticated(
                logging.WARNING,
                "max.connections.unauthenticated (%d) reached: the oldest connection still authenticating (%s) closed",
                self.max_unauthenticated,
                peer_ip(oldest.address),
            )
            oldest.close()
        waiting[conn] = self.loop.time()
        if self._auth_deadline is None:
            self._auth_deadline = self.loop.call_later(self.unauthenticated_s, self._close_unauthenticated)

    def connection_established(self, conn: Connection) -> None:
        """The connection completed its TLS handshake and SASL authentication."""
        self.authenticating.pop(conn, None)

    def _close_unauthenticated(self) -> None:
        """Closes the connections that have been authenticating for longer than
        connections.max.unauthenticated.ms; runs again when the next one's time is up."""
        self._auth_deadline = None
        now = self.loop.time()
        expired = []
        for conn, accepted in self.authenticating.items():
            if accepted + self.unauthenticated_s > now:
                break
            expired.append(conn)
        for conn in expired:
            self.audit_failure(
                conn,
                "authentication not completed within connections.max.unauthenticated.ms "
                f"({self.unauthenticated_s * 1000:.0f} ms); closing",
            )
            conn.close()
        if self.authenticating:
            first = next(iter(self.authenticating.values()))
            self._auth_deadline = self.loop.call_at(first + self.unauthenticated_s, self._close_unauthenticated)

    def connection_closed(self, conn: Connection) -> None:
        self.authenticating.pop(conn, None)
        share = getattr(self.services, "share_partitions", None)  # a test's services may have none
        if share is not None:
            share.connection_closed(conn)  # the share sessions it opened end
        if conn in self.connections:
            self.connections.discard(conn)
            ip = peer_ip(conn.address)
            self.per_ip[ip] -= 1
            if self.per_ip[ip] <= 0:
                del self.per_ip[ip]
        self._update_accepting()

    # ------------------------------------------------------------------ idle connections

    @property
    def _idle_sweep_s(self) -> float:
        assert self.idle_s is not None  # no sweep without connections.max.idle.ms
        return min(max(self.idle_s / 10, 0.01), 10.0)

    def _close_idle(self) -> None:
        assert self.idle_s is not None
        oldest = self.loop.time() - self.idle_s
        for conn in [c for c in self.connections if c.last_active < oldest and c.idle]:
            log.debug("%s: idle for longer than connections.max.idle.ms; closing", conn)
            conn.close()
        self._idle_sweep = self.loop.call_later(self._idle_sweep_s, self._close_idle)

    def stop_listening(self) -> None:
        if self.stall is not None:
            self.stall.close()
        for handle in (self._backoff, self._idle_sweep, self._auth_deadline):
            if handle is not None:
                handle.cancel()
        self._backoff = self._idle_sweep = self._auth_deadline = None
        for acceptor in self.acceptors:
            if acceptor.sock is not None:
                if acceptor.accepting:
                    self.loop.remove_reader(acceptor.sock.fileno())
                    acceptor.accepting = False
                acceptor.sock.close()
                acceptor.sock = None

    async def close_connections(self, timeout: float = 5.0) -> None:
        """Closes every connection; its waiting requests are cancelled. Waits (bounded) for
        them to end, and names any that did not (they are left behind)."""
        conns = list(self.connections)
        tasks = [t for c in conns for t in c.waiting_tasks()]
        for conn in conns:
            conn.close()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for t in pending:
                frames = t.get_stack()
                where = (
                    f"{frames[-1].f_code.co_filename}:{frames[-1].f_lineno} ({frames[-1].f_code.co_name})"
                    if frames
                    else "an unknown place"
                )
                log.error(
                    "a request's task was still running %.0f s after its connection closed, at %s; left behind",
                    timeout,
                    where,
                )

    def update_version_caps(self) -> None:
        """The versions served follow the broker's transaction.version (which in a
        cluster follows the controller's finalized level)."""
        level = self.services.transaction_version
        self.version_caps = {
            k: max_version(k, level) for k in TV2_VERSIONS if max_version(k, level) < HANDLERS[k].MAX_VERSION
        }

    def takes_direct(self, conn: Connection, api_key: int) -> bool:
        """May a request of this connection take its API's direct path (handlers/__init__.py
        DIRECT_PATHS: Produce's)? Not with an authorizer, client quotas, a request log of
        the API or a SASL authenticator on the connection: the general path applies those."""
        quotas = self.quotas
        return (
            conn.authenticator is None
            and self.request_log_api != api_key
            and self.services.authorizer is None
            and (quotas is None or not quotas.enabled)
        )

    def dispatch(self, conn: Connection, frame: BufferLike) -> list[Any] | Awaitable[list[Any] | None] | None:
        """Handles one request frame. Returns the response parts, None (no response, or
        the connection was closed), or an awaitable of either when the handler must wait
        (long polls, acks=all, group rebalances). Handlers that can answer at once are
        plain functions, so most requests complete inside the read callback."""
        received = self.loop.time()  # the loop's clock: handlers compare deadlines with it
        stall = self.stall
        if stall is not None and stall.stalled(received):
            return stall.hold(self.dispatch, conn, frame)  # the process stood still: stall.py
        decoded = None  # a request a direct path read, and left to this one
        direct = DIRECT_PATHS.get(codec.request_api_key(frame))
        if direct is not None and self.takes_direct(conn, direct.API_KEY):
            taken = direct.direct(self.services, frame, self.version_caps)  # a Produce answered at once
            if isinstance(taken, tuple):  # Answered
                parts, client_id, errors = taken
                if conn.client_id is None:
                    conn.client_id = client_id
                if errors is not None and self.request_stats is not None:
                    self.request_stats.count_errors(direct.API_KEY, errors)
                self.requests_handled += 1
                return parts
            decoded = taken
        try:
            header, body_offset = codec.decode_request_header(frame)
        except ProtocolDecodeError as exc:
            self.log_bad_request(logging.WARNING, "%s: unreadable request header (%s); closing", conn, exc)
            conn.close()
            return None
        api_key = header.request_api_key
        version = header.request_api_version
        auth = conn.authenticator
        if auth is not None and not auth.allows(api_key, received):
            if not conn.closing:
                why = "session expired" if auth.authenticated else "before authentication completed"
                self.audit_refused(conn, f"api key {api_key} {why}; closing")
                conn.close()
            return None
        handler = HANDLERS.get(api_key)
        if handler is None:
            self.log_bad_request(
                logging.WARNING, "%s: unknown api key %d (client %r); closing", conn, api_key, header.client_id
            )
            conn.close()
            return None
        if not handler.MIN_VERSION <= version <= handler.MAX_VERSION or (
            self.version_caps and version > self.version_caps.get(api_key, version)
        ):
            if api_key == 18:
                return codec.encode_response(
                    (header.correlation_id, 18, 0), unsupported_api_versions_response(self.services.transaction_version)
                )
            return self._unsupported_version(conn, handler, header, frame)
        try:
            request = (
                decoded if decoded is not None else codec.decode_request_body(frame, api_key, version, body_offset)
            )
        except ProtocolDecodeError as exc:
            self.log_bad_request(
                logging.WARNING,
                "%s: malformed %s v%d request: %s; closing",
                conn,
                handler.__name__.rsplit(".", 1)[-1],
                version,
                exc,
            )
            conn.close()
            return None
        if conn.client_id is None:
            conn.client_id = header.client_id
        ctx = RequestContext(self.services, conn, header, received)
        quotas = self.quotas
        try:
            if quotas is not None and quotas.enabled and api_key not in QUOTA_EXEMPT:
                quotas.for_connection(conn, header.client_id)
                started = time.perf_counter()
                response = handler.handle(ctx, request)
                self._record_quotas(ctx, conn, header, len(frame), time.perf_counter() - started)
            else:
                response = handler.handle(ctx, request)
        except OSError as exc:
            if exc.errno not in RESOURCE_ERRNOS:
                raise
            response = self._out_of_resources(conn, header, request, exc)
        if hasattr(type(response), "__await__"):  # inspect.isawaitable, minus the ABC check
            return self._finish(
                header, cast("Awaitable[Message | None]", response), ctx, request, api_key == self.request_log_api
            )
        self.requests_handled += 1
        if api_key == self.request_log_api:
            self._log_request(conn, header, request, cast("Message | None", response))
        if response is None:
            if ctx.throttle_ms:
                conn.mute(ctx.throttle_ms / 1000)  # acks=0: no answer, but the channel is muted
            return None
        if self.request_stats is not None and ctx.errors is not False:
            self.request_stats.count_errors(stats_key(api_key, conn.follower), response)
        if ctx.throttle_ms:
            return self._throttled(conn, header, cast(Message, response), ctx.throttle_ms)
        return codec.encode_response(header, cast(Message, response))

    # ------------------------------------------------------------------ quotas

    def _record_quotas(
        self, ctx: RequestContext, conn: Connection, header: RequestHeader, size: int, elapsed_s: float
    ) -> None:
        """Records the request against its client's quotas (Produce: its bytes; every
        request but a follower's: its handling time) and sets the answer's throttle time:
        the largest any of them asks (the Fetch handler records its answer's bytes)."""
        produce, _, request = conn.quota_sensors
        now_ms = time.monotonic() * 1000
        throttle = ctx.throttle_ms
        if produce is not None and header.request_api_key == 0:
            throttle = max(throttle, produce.record(size, now_ms))
        if request is not None and not conn.follower:
            throttle = max(throttle, request.record(elapsed_s * 100.0, now_ms))  # percent of one thread
        ctx.throttle_ms = throttle

    def _throttled(
        self, conn: Connection, header: RequestHeader, response: Message, throttle_ms: int
    ) -> list[Any] | Awaitable[list[Any]]:
        """An answer a quota throttles: it says so (throttle_time_ms), and the connection
        reads nothing more for that long. Versions before KIP-219 (the client does not
        wait by itself) get the answer only after the throttle time, as Kafka sends it."""
        if hasattr(response, "throttle_time_ms"):
            response.throttle_time_ms = max(response.throttle_time_ms or 0, throttle_ms)
        parts = codec.encode_response(header, response)
        seconds = throttle_ms / 1000
        conn.mute(seconds)
        if header.request_api_version >= CLIENT_THROTTLES_FROM.get(header.request_api_key, 0):
            return parts
        return _later(parts, seconds)

    def _unsupported_version(
        self, conn: Connection, handler: Handler, header: RequestHeader, frame: BufferLike
    ) -> list[Any] | None:
        """A request outside the handler's version range: answered with UNSUPPORTED_VERSION
        when it is older than the range and readable (a client that skipped ApiVersions),
        else the connection is closed (newer than advertised, or nothing to answer in)."""
        version = header.request_api_version
        name = handler.__name__.rsplit(".", 1)[-1]
        old = ERROR_RESPONSES.get(header.request_api_key)
        error_response = None if old is None else old.error_response
        if error_response is not None and version < handler.MIN_VERSION:
            try:
                _, request = codec.decode_request(frame)
            except ProtocolDecodeError:
                request = None
            response = None if request is None else error_response(request, ErrorCode.UNSUPPORTED_VERSION)
            if response is not None:
                log.info(
                    "%s: %s v%d is older than this broker serves (%d-%d); answered UNSUPPORTED_VERSION",
                    conn,
                    name,
                    version,
                    handler.MIN_VERSION,
                    handler.MAX_VERSION,
                )
                return codec.encode_response(header, response)
        self.log_bad_request(
            logging.WARNING,
            "%s: unsupported version %d of api %s (supported %d-%d); closing",
            conn,
            version,
            name,
            handler.MIN_VERSION,
            handler.MAX_VERSION,
        )
        conn.close()
        return None

    def _log_request(self, conn: Connection, header: RequestHeader, request: Message, response: Message | None) -> None:
        """Kafka's request log (kafka.request.logger at DEBUG): the request, its answer,
        the client and the time it took."""
        request_log.debug(
            "completed %s v%d correlation id %d from %s (client %r) in %.3f ms: request %r, response %r",
            request.__class__.__name__.removesuffix("Request"),
            header.request_api_version,
            header.correlation_id,
            conn,
            header.client_id,
            1000 * (self.loop.time() - conn.last_active),
            request,
            response,
        )

    def _out_of_resources(self, conn: Connection, header: RequestHeader, request: Any, exc: OSError) -> Message | None:
        """A request whose handling ran out of descriptors or memory (EMFILE, ENFILE ...):
        answered UNKNOWN_SERVER_ERROR in every error code with the reason, as Kafka answers
        a request its handler failed on, never with the connection dropped (but an acks=0
        Produce, which has no answer: its connection is closed, Kafka's way of telling)."""
        reason = exc.strerror or str(exc)
        if header.request_api_key == 0 and request.acks == 0:
            self.log_bad_request(logging.WARNING, "%s: acks=0 Produce failed: %s; closing", conn, reason)
            conn.close()
            return None
        self.log_bad_request(
            logging.WARNING,
            "%s: %s v%d failed: %s; answered UNKNOWN_SERVER_ERROR",
            conn,
            HANDLERS[header.request_api_key].__name__.rsplit(".", 1)[-1],
            header.request_api_version,
            reason,
        )
        return error_response(
            header.request_api_key, header.request_api_version, request, ErrorCode.UNKNOWN_SERVER_ERROR, reason
        )

    async def _finish(
        self,
        header: RequestHeader,
        awaitable: Awaitable[Message | None],
        ctx: RequestContext,
        request: Message,
        logged: bool,
    ) -> list[Any] | None:
        try:
            response = await awaitable
        except OSError as exc:
            if exc.errno not in RESOURCE_ERRNOS:
                raise
            response = self._out_of_resources(ctx.connection, header, request, exc)
        self.requests_handled += 1
        if logged:
            self._log_request(ctx.connection, header, request, response)
        if response is None:
            if ctx.throttle_ms:
                ctx.connection.mute(ctx.throttle_ms / 1000)
            return None
        if self.request_stats is not None and ctx.errors is not False:
            key = header.request_api_key
            self.request_stats.count_errors(stats_key(key, ctx.connection.follower), response)
        if ctx.throttle_ms:
            parts = self._throttled(ctx.connection, header, response, ctx.throttle_ms)
            return (await parts) if not isinstance(parts, list) else parts
        return codec.encode_response(header, response)


#: the inter-broker APIs: never recorded against a client quota (Kafka exempts cluster actions)
QUOTA_EXEMPT = frozenset({4, 5, 6, 7, 27, 56, 17, 36})
#: api key -> the first version whose clients wait out throttle_time_ms themselves (KIP-219);
#: older ones get their answer after it. APIs not named: every version.
CLIENT_THROTTLES_FROM = {
    0: 6,
    1: 8,
    2: 3,
    3: 6,
    8: 4,
    9: 4,
    10: 2,
    11: 3,
    12: 2,
    13: 2,
    14: 2,
    15: 2,
    16: 2,
    18: 2,
    19: 3,
    20: 2,
    21: 1,
    22: 1,
    23: 2,
    24: 1,
    25: 1,
    26: 1,
    28: 1,
    29: 1,
    30: 1,
    31: 1,
    32: 2,
    33: 1,
    35: 1,
    37: 1,
    42: 1,
}


async def _later(parts: list[Any], seconds: float) -> list[Any]:
    await asyncio.sleep(seconds)
    return parts


def _listen_error(acceptor: Acceptor, exc: OSError) -> OSError:
    host = f"[{acceptor.host}]" if ":" in acceptor.host else acceptor.host or "*"
    error = OSError(f"cannot listen on {host}:{acceptor.port}: {exc.strerror or exc}")
    error.errno = exc.errno
    return error


def max_unauthenticated(configured: int) -> int:
    """max.connections.unauthenticated: as configured, or (-1) half the process's limit of
    open files (RLIMIT_NOFILE's soft limit), at least 1."""
    if configured >= 0:
        return max(configured, 1)
    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return INT_MAX
    return max(soft // 2, 1)


INT_MAX = 2**31 - 1


def peer_ip(address: Any) -> str:
    """A peer's address as max.connections.per.ip counts it (IPv4 on a dual-stack socket
    as IPv4)."""
    ip = address[0] if isinstance(address, tuple) else str(address)
    return ip[7:] if ip.startswith("::ffff:") and "." in ip else ip


def _resolve_ip_overrides(text: str) -> dict[str, int]:
    """max.connections.per.ip.overrides by address: names resolve to every address they
    have (as Kafka resolves them once, at start)."""
    out: dict[str, int] = {}
    for host, count in parse_ip_overrides(text).items():
        try:
            out[ipaddress.ip_address(host).compressed] = count
            continue
        except ValueError:
            pass
        try:
            infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise OSError(f"max.connections.per.ip.overrides: cannot resolve {host}: {exc.strerror or exc}") from None
        for info in infos:
            out[peer_ip(info[4])] = count
    return out

"""The listening socket and request dispatch.

dispatch(connection, frame):
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
    response = await handler.handle(ctx, request) None -> no response (acks=0)
    -> encode_response parts for the connection's output queue

Kafka's own SocketServer closes connections on the same conditions; clients reconnect.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import socket
from typing import TYPE_CHECKING

from broker.protocol import codec
from broker.protocol.errors import ErrorCode
from broker.protocol.types import ProtocolDecodeError
from broker.server.connection import Connection
from broker.server.handlers import HANDLERS, unsupported_api_versions_response

if TYPE_CHECKING:
    from broker.server.broker import Broker

log = logging.getLogger(__name__)


class RequestContext:
    """What a handler sees besides its request."""

    __slots__ = ("broker", "connection", "header", "api_version", "received")

    def __init__(self, broker: Broker, connection: Connection, header, received: float):
        self.broker = broker
        self.connection = connection
        self.header = header
        self.api_version = header.request_api_version
        self.received = received


class Server:
    def __init__(self, broker: Broker, host: str, port: int):
        self.broker = broker
        self.host = host
        self.port = port
        self.loop: asyncio.AbstractEventLoop | None = None
        self.sock: socket.socket | None = None
        self.connections: set[Connection] = set()
        self.requests_handled = 0

    def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        infos = socket.getaddrinfo(self.host or None, self.port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
        family, socktype, proto, _, addr = infos[0]
        sock = socket.socket(family, socktype, proto)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.listen(1024)
        sock.setblocking(False)
        self.sock = sock
        self.port = sock.getsockname()[1]
        self.loop.add_reader(sock.fileno(), self._accept)

    def _accept(self) -> None:
        for _ in range(64):
            try:
                conn_sock, addr = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:
                log.warning("accept failed: %s", exc)
                return
            self.connections.add(Connection(self, conn_sock, addr))

    def connection_closed(self, conn: Connection) -> None:
        self.connections.discard(conn)

    def stop_listening(self) -> None:
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None

    async def close_connections(self) -> None:
        conns = list(self.connections)
        tasks = [c._waiting for c in conns if c._waiting is not None]
        for conn in conns:
            conn.close()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)

    def dispatch(self, conn: Connection, frame):
        """Handles one request frame. Returns the response parts, None (no response, or
        the connection was closed), or an awaitable of either when the handler must wait
        (long polls, acks=all, group rebalances). Handlers that can answer at once are
        plain functions, so most requests complete inside the read callback."""
        received = self.loop.time()          # the loop's clock: handlers compare deadlines with it
        try:
            header, body_offset = codec.decode_request_header(frame)
        except ProtocolDecodeError as exc:
            log.warning("%s: unreadable request header (%s); closing", conn, exc)
            conn.close()
            return None
        api_key = header.request_api_key
        version = header.request_api_version
        handler = HANDLERS.get(api_key)
        if handler is None:
            log.warning("%s: unknown api key %d (client %r); closing", conn, api_key, header.client_id)
            conn.close()
            return None
        if not handler.MIN_VERSION <= version <= handler.MAX_VERSION:
            if api_key == 18:
                return codec.encode_response((header.correlation_id, 18, 0), unsupported_api_versions_response())
            return self._unsupported_version(conn, handler, header, frame)
        try:
            _, request = codec.decode_request(frame)
        except ProtocolDecodeError as exc:
            log.warning("%s: malformed %s v%d request: %s; closing", conn,
                        handler.__name__.rsplit(".", 1)[-1], version, exc)
            conn.close()
            return None
        if conn.client_id is None:
            conn.client_id = header.client_id
        ctx = RequestContext(self.broker, conn, header, received)
        response = handler.handle(ctx, request)
        if inspect.isawaitable(response):
            return self._finish(header, response)
        self.requests_handled += 1
        if response is None:
            return None
        return codec.encode_response(header, response)

    def _unsupported_version(self, conn: Connection, handler, header, frame):
        """A request outside the handler's version range: answered with UNSUPPORTED_VERSION
        when it is older than the range and readable (a client that skipped ApiVersions),
        else the connection is closed (newer than advertised, or nothing to answer in)."""
        version = header.request_api_version
        name = handler.__name__.rsplit(".", 1)[-1]
        error_response = getattr(handler, "error_response", None)
        if error_response is not None and version < handler.MIN_VERSION:
            try:
                _, request = codec.decode_request(frame)
            except ProtocolDecodeError:
                request = None
            response = None if request is None else error_response(request, ErrorCode.UNSUPPORTED_VERSION)
            if response is not None:
                log.info("%s: %s v%d is older than this broker serves (%d-%d); answered UNSUPPORTED_VERSION",
                         conn, name, version, handler.MIN_VERSION, handler.MAX_VERSION)
                return codec.encode_response(header, response)
        log.warning("%s: unsupported version %d of api %s (supported %d-%d); closing", conn, version, name,
                    handler.MIN_VERSION, handler.MAX_VERSION)
        conn.close()
        return None

    async def _finish(self, header, awaitable) -> list | None:
        response = await awaitable
        self.requests_handled += 1
        if response is None:
            return None
        return codec.encode_response(header, response)

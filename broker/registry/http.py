"""HTTP/1.1 for the registry: a server on the broker's event loop, and the small client
a broker forwards writes to the writer with.

The server (asyncio.Protocol, one per connection): persistent connections (HTTP/1.1's
default; `Connection: close` and HTTP/1.0 close after the answer), requests answered in
the order they came (pipelining), bodies by Content-Length or chunked, `Expect:
100-continue` answered. A request whose handler answers at once (a read served from the
view, credentials already checked) is answered in the same callback that read it, without
a task; one that must wait (a write, a first password check) runs as a task while the
connection reads nothing more. Limits: a request head over 16 KiB is answered 431, a body
over max_body 413, a malformed request 400, each closing the connection; a connection
silent for IDLE_S (or whose head takes longer than HEAD_TIMEOUT_S) is closed. TLS is the
asyncio transport's (Python's ssl), its handshake bounded by HEAD_TIMEOUT_S.

Runs on the event loop thread.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from broker.timeouts import wait_for

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_S = 30.0
IDLE_S = 600.0
SWEEP_S = 5.0
JSON_TYPE = b"application/vnd.schemaregistry.v1+json"

_REASONS = {
    100: "Continue",
    200: "OK",
    204: "No Content",
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    405: "Method Not Allowed",
    409: "Conflict",
    411: "Length Required",
    413: "Payload Too Large",
    415: "Unsupported Media Type",
    422: "Unprocessable Entity",
    429: "Too Many Requests",
    431: "Request Header Fields Too Large",
    500: "Internal Server Error",
    501: "Not Implemented",
    503: "Service Unavailable",
}


@dataclass
class Request:
    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    peer: str
    _parts: tuple[list[str], dict[str, list[str]]] | None = field(default=None, repr=False)

    def _split(self) -> tuple[list[str], dict[str, list[str]]]:
        if self._parts is None:
            url = urlsplit(self.target)
            segments = [unquote(s) for s in url.path.split("/") if s]
            self._parts = (segments, parse_qs(url.query, keep_blank_values=True))
        return self._parts

    @property
    def segments(self) -> list[str]:
        """The path's segments, percent-decoded (a subject may hold any character)."""
        return self._split()[0]

    def query(self, name: str, default: str = "") -> str:
        values = self._split()[1].get(name)
        return values[-1] if values else default

    def flag(self, name: str) -> bool:
        return self.query(name).lower() == "true"


@dataclass
class Response:
    status: int
    body: bytes = b""
    content_type: bytes = JSON_TYPE
    headers: tuple[tuple[bytes, bytes], ...] = ()


Handler = Callable[[Request], Response | Awaitable[Response]]


class HttpServer:
    def __init__(
        self,
        handler: Handler,
        host: str,
        port: int,
        ssl_context: ssl.SSLContext | None = None,
        max_body: int = 16 * 1024 * 1024,
        name: str = "schema registry",
    ):
        self.handler = handler
        self.host = host
        self.port = port
        self.ssl_context = ssl_context
        self.max_body = max_body
        self.name = name
        self.connections: set[_Connection] = set()
        self._server: asyncio.base_events.Server | None = None
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            self._server = await loop.create_server(
                lambda: _Connection(self),
                self.host or None,
                self.port,
                family=socket.AF_UNSPEC,
                reuse_address=True,
                ssl=self.ssl_context,
                backlog=1024,
                ssl_handshake_timeout=HEAD_TIMEOUT_S if self.ssl_context is not None else None,
            )
        except OSError as exc:
            raise OSError(
                f"{self.name}: cannot listen on {self.host or '*'}:{self.port}: {exc.strerror or exc}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._sweeper = loop.create_task(self._sweep())

    async def close(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
        if self._server is not None:
            self._server.close()
        for conn in list(self.connections):
            conn.close()
        if self._server is not None:
            try:
                await wait_for(self._server.wait_closed(), 5.0)
            except asyncio.TimeoutError:
                pass

    async def _sweep(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_S)
            now = time.monotonic()
            for conn in list(self.connections):
                if conn.busy:
                    continue
                limit = HEAD_TIMEOUT_S if conn.buf else IDLE_S
                if now - conn.last_active > limit:
                    conn.close()


class _Connection(asyncio.Protocol):
    def __init__(self, server: HttpServer):
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.busy = False  # a handler's task runs: nothing more is read until it answers
        self.closing = False
        self.last_active = time.monotonic()
        self.peer = "?"
        self._continue_sent = False

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        peer = transport.get_extra_info("peername")
        self.peer = peer[0] if peer else "?"
        sock = transport.get_extra_info("socket")
        if sock is not None:
            try:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                pass
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.connections.discard(self)

    def close(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        self.buf += data
        if not self.busy:
            self._process()

    def _process(self) -> None:
        while self.buf and not self.busy and not self.closing:
            parsed = self._next_request()
            if parsed is None:
                return
            request, keep_alive = parsed
            try:
                result = self.server.handler(request)
            except Exception:
                log.exception("%s: request %s %s failed", self.server.name, request.method, request.target)
                result = _internal_error()
            if isinstance(result, Response):
                self._send(result, keep_alive)
                continue
            self.busy = True
            task: asyncio.Future[Response] = asyncio.ensure_future(result)
            task.add_done_callback(functools.partial(self._done, keep_alive=keep_alive))
            return

    def _done(self, task: asyncio.Future[Response], *, keep_alive: bool) -> None:
        self.busy = False
        if task.cancelled():
            self.close()
            return
        exc = task.exception()
        if exc is not None:
            log.error("%s: a request failed", self.server.name, exc_info=exc)
            response = _internal_error()
        else:
            response = task.result()
        self.last_active = time.monotonic()
        self._send(response, keep_alive)
        if not self.closing:
            self._process()

    def _send(self, r: Response, keep_alive: bool) -> None:
        if self.transport is None or self.closing:
            return
        extra = b"".join(b"%s: %s\r\n" % h for h in r.headers)
        self.transport.write(
            b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\n%s%s\r\n%s"
            % (
                r.status,
                _REASONS.get(r.status, "Unknown").encode(),
                r.content_type,
                len(r.body),
                extra,
                b"" if keep_alive else b"Connection: close\r\n",
                r.body,
            )
        )
        if not keep_alive:
            self.closing = True
            self.transport.close()

    def _fail(self, status: int, message: str) -> None:
        import json

        body = json.dumps({"error_code": status, "message": message}).encode()
        self._send(Response(status, body), keep_alive=False)

    def _next_request(self) -> tuple[Request, bool] | None:
        """The next complete request in the buffer (consumed), or None (more bytes needed,
        or the connection was failed)."""
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            if len(buf) > MAX_HEAD:
                self._fail(431, "HTTP 431 Request Header Fields Too Large")
            return None
        if end > MAX_HEAD:
            self._fail(431, "HTTP 431 Request Header Fields Too Large")
            return None
        try:
            head = bytes(buf[:end]).decode("latin-1")
            line, *header_lines = head.split("\r\n")
            method, target, version = line.split(" ")
            headers = {}
            for h in header_lines:
                name, sep, value = h.partition(":")
                if not sep:
                    raise ValueError(h)
                headers[name.strip().lower()] = value.strip()
        except ValueError:
            self._fail(400, "HTTP 400 Bad Request")
            return None
        if not version.startswith("HTTP/1."):
            self._fail(400, "HTTP 400 Bad Request")
            return None
        body_start = end + 4
        chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        if chunked:
            got = _dechunk(buf, body_start, self.server.max_body)
            if isinstance(got, str):
                if got == "too large":
                    self._fail(413, "HTTP 413 Payload Too Large")
                else:
                    self._fail(400, "HTTP 400 Bad Request")
                return None
            if got is None:
                self._maybe_continue(headers)
                return None
            body, consumed = got
        else:
            try:
                length = int(headers.get("content-length", "0"))
                if length < 0:
                    raise ValueError
            except ValueError:
                self._fail(400, "HTTP 400 Bad Request")
                return None
            if length > self.server.max_body:
                self._fail(413, "HTTP 413 Payload Too Large")
                return None
            if len(buf) < body_start + length:
                self._maybe_continue(headers)
                return None
            body = bytes(buf[body_start : body_start + length])
            consumed = body_start + length
        del buf[:consumed]
        self._continue_sent = False
        conn = headers.get("connection", "").lower()
        keep_alive = ("close" not in conn) if version == "HTTP/1.1" else ("keep-alive" in conn)
        return Request(method, target, headers, body, self.peer), keep_alive

    def _maybe_continue(self, headers: dict[str, str]) -> None:
        if (
            headers.get("expect", "").lower() == "100-continue"
            and not self._continue_sent
            and self.transport is not None
        ):
            self._continue_sent = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")


def _dechunk(buf: bytearray, pos: int, limit: int) -> tuple[bytes, int] | str | None:
    """A chunked body from buf[pos:]: (body, bytes consumed up to its end), None when
    incomplete, "bad" or "too large"."""
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None
        try:
            size = int(bytes(buf[pos:eol]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            return "bad"
        pos = eol + 2
        if size == 0:
            end = buf.find(b"\r\n\r\n", pos - 2)
            if end < 0:
                return None
            return bytes(out), end + 4
        if len(out) + size > limit:
            return "too large"
        if len(buf) < pos + size + 2:
            return None
        out += buf[pos : pos + size]
        pos += size + 2


def _internal_error() -> Response:
    return Response(500, b'{"error_code":500,"message":"Internal Server Error"}')


# ---------------------------------------------------------------------------- the client


class HttpClient:
    """Requests to another broker's registry (forwarded writes): one persistent
    connection per URL at a time, a fresh one when it was closed or failed."""

    def __init__(self, ssl_context: ssl.SSLContext | None = None, timeout: float = 30.0):
        self.ssl_context = ssl_context
        self.timeout = timeout
        self._idle: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}

    async def request(
        self, url: str, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body); OSError or asyncio.TimeoutError when the other side
        cannot be reached or does not answer."""
        return await wait_for(self._request(url, method, target, headers, body), self.timeout)

    async def _request(
        self, url: str, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, dict[str, str], bytes]:
        u = urlsplit(url)
        pool = self._idle.setdefault(url, [])
        for attempt in range(2):
            fresh = not pool
            if pool:
                reader, writer = pool.pop()
            else:
                reader, writer = await asyncio.open_connection(
                    u.hostname,
                    u.port,
                    ssl=self.ssl_context if u.scheme == "https" else None,
                    server_hostname=u.hostname if u.scheme == "https" else None,
                )
            try:
                head = [f"{method} {target} HTTP/1.1", f"Host: {u.netloc}", f"Content-Length: {len(body)}"]
                head += [f"{k}: {v}" for k, v in headers.items()]
                writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
                await writer.drain()
                status_line = await reader.readuntil(b"\r\n")
                status = int(status_line.split(b" ", 2)[1])
                got: dict[str, str] = {}
                while True:
                    line = await reader.readuntil(b"\r\n")
                    if line == b"\r\n":
                        break
                    k, _, v = line.decode("latin-1").partition(":")
                    got[k.strip().lower()] = v.strip()
                data = await reader.readexactly(int(got.get("content-length", "0")))
            except (OSError, asyncio.IncompleteReadError, ValueError, IndexError) as exc:
                writer.close()
                if fresh or attempt:
                    raise OSError(f"{url}: {exc}") from None
                continue  # a kept connection the other side had closed: once more, afresh
            if got.get("connection", "").lower() == "close":
                writer.close()
            else:
                pool.append((reader, writer))
            return status, got, data
        raise OSError(f"{url}: no answer")

    async def close(self) -> None:
        for pool in self._idle.values():
            for _reader, writer in pool:
                writer.close()
        self._idle.clear()

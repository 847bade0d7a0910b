"""The metrics listener: a small HTTP/1.1 server on the broker's own event loop.

GET only, one request per connection (Connection: close). It runs on the broker's loop
so that a scrape or a status page reads the broker's state between two events, as a
request handler does, without locks. Anything else than a GET of a known path is 404 /
405; a request line or headers beyond 16 KiB, or slower than 10 s (the TLS handshake
included), closes the connection.

With `metrics.listener.web.config.file` (broker/metrics/webconfig.py) it speaks TLS, and
with basic_auth_users every request, whatever its path (/metrics, the status page,
/status.json, a 404), needs a user's credentials first: without them, or wrong, it is
answered 401 with `WWW-Authenticate: Basic`, and a wrong password or unknown user is one
`broker.audit` line (held to one per 10 s).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
from typing import TYPE_CHECKING

from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from broker.metrics.status import History, StatusProbe, render_html, snapshot
from broker.metrics.webconfig import BasicAuth, WebConfig, credentials
from broker.server.server import ThrottledLog, audit
from broker.timeouts import wait_for

if TYPE_CHECKING:
    from broker.metrics.exporter import BrokerMetrics

log = logging.getLogger(__name__)

MAX_HEAD = 16 * 1024
HEAD_TIMEOUT_S = 10.0


class MetricsServer:
    def __init__(self, metrics: BrokerMetrics, host: str, port: int, web: WebConfig | None = None):
        self.metrics = metrics
        self.host = host
        self.port = port
        self.web = web
        self.ssl_context = web.ssl_context if web is not None else None
        self.auth = BasicAuth(web.users) if web is not None and web.users else None
        self._headers = (
            b"".join(b"%s: %s\r\n" % (k.encode(), v.encode("latin-1")) for k, v in web.headers)
            if web is not None
            else b""
        )
        self._audit = ThrottledLog(logger=audit)
        self.history = History(metrics)
        self.probe = StatusProbe(metrics.broker)
        self._server: asyncio.base_events.Server | None = None
        self._sampler: asyncio.Task[None] | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        try:
            self._server = await asyncio.start_server(
                self._client,
                self.host or None,
                self.port,
                family=socket.AF_UNSPEC,
                reuse_address=True,
                ssl=self.ssl_context,
                ssl_handshake_timeout=HEAD_TIMEOUT_S if self.ssl_context is not None else None,
            )
        except OSError as exc:
            raise OSError(
                f"metrics.listener: cannot listen on {self.host or '*'}:{self.port}: "
                f"{os.strerror(exc.errno) if exc.errno else exc}"
            ) from None
        self.port = self._server.sockets[0].getsockname()[1]
        self._sampler = asyncio.get_running_loop().create_task(self.history.run())

    async def close(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
        if self._server is not None:
            self._server.close()
        for task in list(self._clients):
            task.cancel()
        if self._server is not None:
            await self._server.wait_closed()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._clients.add(task)
        try:
            try:
                head = await wait_for(reader.readuntil(b"\r\n\r\n"), HEAD_TIMEOUT_S)
            except (asyncio.TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
                return
            if len(head) > MAX_HEAD:
                return
            refused = await self._refused(head, writer)
            status, ctype, body = refused or await self._answer(head)
            extra = self._headers + (
                b'WWW-Authenticate: Basic realm="kbroker", charset="UTF-8"\r\n' if status == 401 else b""
            )
            writer.write(
                b"HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %d\r\nCache-Control: no-store\r\n"
                b"%sConnection: close\r\n\r\n" % (status, _REASONS[status], ctype.encode(), len(body), extra)
            )
            if not head.startswith(b"HEAD "):
                writer.write(body)
            await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        except Exception:
            log.exception("metrics listener: request failed")
        finally:
            if task is not None:
                self._clients.discard(task)
            writer.close()

    async def _refused(self, head: bytes, writer: asyncio.StreamWriter) -> tuple[int, str, bytes] | None:
        """Basic authentication, before anything else is looked at: None when the request
        may go on, else the answer."""
        if self.auth is None:
            return None
        authorization = _header(head, b"authorization")
        verdict = await self.auth.check(authorization) if authorization else False
        if verdict:
            return None
        if verdict is None:
            return 429, "text/plain", b"too many authentication checks waiting; try again\n"
        if authorization:
            creds = credentials(authorization)
            user = creds[0].decode("utf-8", "replace") if creds is not None else None
            peer = writer.get_extra_info("peername")
            self._audit(
                logging.WARNING,
                "metrics listener: basic authentication failed (user %r) from %s",
                user,
                peer[0] if peer else "?",
            )
        return 401, "text/plain", b"unauthorized\n"

    async def _answer(self, head: bytes) -> tuple[int, str, bytes]:
        try:
            method, target, _ = head.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
        except ValueError:
            return 400, "text/plain", b"bad request\n"
        path = target.split("?", 1)[0]
        if path not in ("/", "/status", "/status.json", "/metrics"):
            return 404, "text/plain", b"not found: try /metrics, / or /status.json\n"
        if method not in ("GET", "HEAD"):
            return 405, "text/plain", b"only GET\n"
        if path == "/metrics":
            # the figures are read here, on the loop, between two events; the text is
            # written in a worker thread (with a thousand partitions that is most of the
            # scrape's time, which the loop does not wait through)
            # the format the scraper asks for (Accept), as prometheus_client's own exporter
            # chooses it: Prometheus' text format 0.0.4, or OpenMetrics
            encoder, content_type = choose_encoder(_header(head, b"accept"))
            snapshot_ = _Collected(list(self.metrics.registry.collect()))
            body = await asyncio.get_running_loop().run_in_executor(None, encoder, snapshot_)
            return 200, content_type, body
        down = await self.probe.down_brokers()
        data = snapshot(self.metrics.broker, self.history, down)
        if path == "/status.json":
            return 200, "application/json", json.dumps(data, separators=(",", ":")).encode()
        return 200, "text/html; charset=utf-8", render_html(data).encode()


def _header(head: bytes, name: bytes) -> str:
    """A request header's value ('' when absent)."""
    for line in head.split(b"\r\n")[1:]:
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == name:
            return value.strip().decode("latin-1")
    return ""


class _Collected:
    """Metric families already collected, as generate_latest() asks a registry for them."""

    def __init__(self, families: list[Metric]):
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    404: b"Not Found",
    405: b"Method Not Allowed",
    429: b"Too Many Requests",
}

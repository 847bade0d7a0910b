"""BrokerChannel: an asyncio connection from this broker to another one (Kafka's
NetworkClient as the controller's channel manager and the replica fetchers use it).

    ch = BrokerChannel(host, port, client_id="broker-1-fetcher")
    resp = await ch.request(FetchRequest(...))         # connects (and negotiates) on first use
    resps = await asyncio.gather(ch.request(a), ch.request(b))   # pipelined, answered in order
    await ch.close()

Built on the sans-I/O codec (broker/protocol/codec.py) and FrameReader, never blocking the
event loop. Answers are read by an asyncio BufferedProtocol: a large one (a follower's
Fetch of a megabyte) goes from the socket (or from OpenSSL) straight into its frame's own
buffer (FrameReader.direct_buffer), which is what the decoder slices and the follower
appends from, with no copy between; small ones are read into one scratch buffer and
copied into their frames once. Requests are pipelined on one connection and their answers matched by
correlation id in order. Any failure — refused connection, closed socket, undecodable
answer, a request not answered within its timeout — fails every request in flight with
ChannelError and closes the connection; the next request connects again, after
`reconnect_backoff` seconds when the previous attempt failed (so a dead peer is not
hammered). Versions are negotiated with ApiVersions on each new connection: a request
goes out at the highest version both sides speak, unless the caller names one.

Outgoing connections leave from the address this broker listens on when its listener
names a specific IP address (`bind_outgoing`, called once at startup; the ZooKeeper client
uses the same source, see `source_address`): peers and firewalls then see one address per
broker (useful on multi-homed machines; the fault tests cut brokers apart by address on
loopback). A wildcard or a host name binds nothing: the kernel chooses, as before.

All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import ipaddress
import logging
import socket
import time
from typing import Any, cast

from broker.protocol import codec
from broker.protocol._runtime import Message
from broker.protocol.api import ApiKey, client_versions
from broker.protocol.errors import ErrorCode
from broker.protocol.framing import FrameReader
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest
from broker.protocol.types import ProtocolDecodeError
from broker.security.listener import ClientSecurity
from broker.security.sasl import SaslClient
from broker.security.scram import ScramError
from broker.timeouts import wait_for

log = logging.getLogger(__name__)

RECV_SIZE = 256 * 1024


#: the specific IP address outgoing connections leave from (None: the kernel chooses)
_source_ip: ipaddress.IPv4Address | ipaddress.IPv6Address | None = None


def bind_outgoing(listen_host: str | None) -> None:
    """Outgoing connections of this process (BrokerChannel, the ZooKeeper client) leave
    from `listen_host` when it is a specific IP address; a wildcard ('', 0.0.0.0, ::),
    a host name or None binds nothing."""
    global _source_ip
    try:
        ip = ipaddress.ip_address((listen_host or "").strip("[]"))
    except ValueError:
        ip = None
    _source_ip = None if ip is None or ip.is_unspecified else ip


#: how this process's channels reach other brokers (the inter-broker listener's security)
_client_security: ClientSecurity | None = None


def set_client_security(security: ClientSecurity | None) -> None:
    """TLS (and SASL) for every BrokerChannel made after this call; None: plaintext."""
    global _client_security
    _client_security = security


def source_address(dest_ip: str) -> tuple[str, int] | None:
    """(source ip, 0) for a connection to `dest_ip` (an IP address), or None: unbound,
    also when the source could not reach it (another family, or a loopback source to a
    destination off this machine)."""
    src = _source_ip
    if src is None:
        return None
    try:
        dest = ipaddress.ip_address(dest_ip.split("%", 1)[0])
    except ValueError:
        return None
    if dest.version != src.version or (src.is_loopback and not dest.is_loopback):
        return None
    return str(src), 0


async def _local_addr(host: str, port: int) -> tuple[str, int] | None:
    """The source address for a connection to host:port (resolved when a name)."""
    if _source_ip is None:
        return None
    try:
        return source_address(str(ipaddress.ip_address(host.strip("[]"))))
    except ValueError:
        pass
    infos = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    for family, *_, sockaddr in infos:
        if family in (socket.AF_INET, socket.AF_INET6) and (local := source_address(str(sockaddr[0]))):
            return local
    return None


class ChannelError(Exception):
    """The peer could not be reached or did not answer (not a Kafka error code)."""


class _AnswerProtocol(asyncio.BufferedProtocol):
    """Reads a channel's answers: frames into its FrameReader, each complete one handed
    to the channel; the connection's end or a bad frame fails the channel."""

    def __init__(self, channel: BrokerChannel):
        self.channel = channel
        self.frames = FrameReader(channel.max_frame_size)
        self.transport: asyncio.Transport | None = None
        self._scratch = bytearray(RECV_SIZE)
        self._direct = False  # the buffer handed out is the frame's own
        self.failed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses: no isinstance here
        self.transport = cast(asyncio.Transport, transport)

    def get_buffer(self, sizehint: int) -> memoryview:
        buf = self.frames.direct_buffer()
        if buf is not None:
            self._direct = True
            return buf
        self._direct = False
        return memoryview(self._scratch)[: self.frames.read_size(RECV_SIZE)]

    def buffer_updated(self, nbytes: int) -> None:
        if self.failed:
            return
        frames = self.frames
        try:
            if self._direct:
                frames.direct_received(nbytes)
            else:
                frames.feed(memoryview(self._scratch)[:nbytes])
            while True:
                frame = frames.next_frame()
                if frame is None:
                    break
                self.channel._deliver(frame)
        except (ChannelError, ValueError, ProtocolDecodeError) as exc:
            self._failed(exc if isinstance(exc, ChannelError) else ChannelError(f"{self.channel}: {exc}"))

    def eof_received(self) -> bool:
        self._failed(ChannelError(f"{self.channel}: connection closed by the peer"))
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._failed(
            ChannelError(f"{self.channel}: connection closed by the peer" + (f" ({exc})" if exc is not None else ""))
        )

    def _failed(self, exc: ChannelError) -> None:
        if self.failed:
            return
        self.failed = True
        channel = self.channel
        if channel._protocol is self:  # not a connection the channel already dropped
            if not channel.closed:
                log.debug("%s: %s", channel, exc)
            channel._fail(exc)


class BrokerChannel:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kbroker",
        request_timeout: float = 30.0,
        connect_timeout: float = 5.0,
        reconnect_backoff: float = 0.05,
        max_frame_size: int = 1 << 30,
    ):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.request_timeout = request_timeout
        self.connect_timeout = connect_timeout
        self.reconnect_backoff = reconnect_backoff
        self.max_frame_size = max_frame_size
        self.versions: dict[int, tuple[int, int]] = {}
        self._protocol: _AnswerProtocol | None = None
        self._writer: asyncio.Transport | None = None
        self._connecting: asyncio.Future[None] | None = None
        self._inflight: collections.deque[tuple[int, int, int, asyncio.Future[Any]]] = collections.deque()
        self._next_cid = 1
        self._last_failure = 0.0
        self.closed = False
        self.security = _client_security

    def __repr__(self) -> str:
        return f"BrokerChannel({self.host}:{self.port})"

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    # ------------------------------------------------------------------ requests

    async def request(self, request: Any, version: int | None = None, timeout: float | None = None) -> Any:
        """Sends `request` and returns the decoded response; ChannelError on failure."""
        if self.closed:
            raise ChannelError(f"{self} is closed")
        if not self.connected:
            await self._connect()
        api_key = int(request.API_KEY)
        if version is None:
            version = self.version_for(api_key)
        return await self._send(api_key, version, request, self.request_timeout if timeout is None else timeout)

    def version_for(self, api_key: int) -> int:
        ours = client_versions(api_key)
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise ChannelError(f"{self}: the broker does not support {ApiKey(api_key).name}")
        lo, hi = max(theirs[0], ours[0]), min(theirs[1], ours[1])
        if lo > hi:
            raise ChannelError(f"{self}: no common version of {ApiKey(api_key).name}")
        return hi

    async def _send(self, api_key: int, version: int, request: Message, timeout: float) -> Any:
        writer = self._writer
        if writer is None:
            raise ChannelError(f"{self}: not connected")
        cid = self._next_cid
        self._next_cid = (self._next_cid + 1) & 0x7FFFFFFF
        fut = asyncio.get_running_loop().create_future()
        self._inflight.append((cid, api_key, version, fut))
        try:
            for part in codec.encode_request_parts(api_key, version, cid, self.client_id, request):
                writer.write(part)
        except Exception as exc:  # encoding a bad request: nothing was sent
            self._fail(ChannelError(f"{self}: cannot encode {ApiKey(api_key).name} v{version}: {exc}"))
            raise ChannelError(f"{self}: cannot encode {ApiKey(api_key).name} v{version}: {exc}") from exc
        try:
            return await wait_for(asyncio.shield(fut), timeout)
        except asyncio.TimeoutError:
            # answers come in order: a late answer would confuse every later request
            self._fail(ChannelError(f"{self}: no answer to {ApiKey(api_key).name} within {timeout:.1f} s"))
            raise ChannelError(f"{self}: no answer to {ApiKey(api_key).name} within {timeout:.1f} s") from None

    # ------------------------------------------------------------------ connection

    async def _connect(self) -> None:
        if self._connecting is not None:
            await asyncio.shield(self._connecting)
            if not self.connected:
                raise ChannelError(f"cannot connect to {self.host}:{self.port}")
            return
        loop = asyncio.get_running_loop()
        self._connecting = loop.create_future()
        try:
            wait = self._last_failure + self.reconnect_backoff - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)
            try:
                transport, protocol = await wait_for(self._open(), self.connect_timeout)
            except (OSError, asyncio.TimeoutError) as exc:
                self._last_failure = time.monotonic()
                raise ChannelError(
                    f"cannot connect to {self.host}:{self.port}: {getattr(exc, 'strerror', None) or exc or 'timed out'}"
                ) from None
            self._writer, self._protocol = transport, protocol
            if protocol.failed:  # the peer closed before we looked
                raise ChannelError(f"{self}: connection closed by the peer")
            resp = await self._send(
                int(ApiKey.API_VERSIONS),
                3,
                ApiVersionsRequest(client_software_name="kbroker", client_software_version="1"),
                self.connect_timeout,
            )
            if resp.error_code != ErrorCode.NONE:
                raise ChannelError(f"{self}: ApiVersions failed with {ErrorCode(resp.error_code).name}")
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            security = self.security
            if security is not None and security.sasl_mechanism is not None:
                await self._authenticate(security)
        except BaseException:
            self._last_failure = time.monotonic()
            self._drop_connection()
            raise
        finally:
            fut, self._connecting = self._connecting, None
            if not fut.done():
                fut.set_result(None)

    async def _authenticate(self, security: ClientSecurity) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the mechanism's exchange is over
        (PLAIN, SCRAM); ChannelError when the peer refuses."""
        assert security.sasl_mechanism is not None
        resp = await self._send(
            int(ApiKey.SASL_HANDSHAKE), 1, SaslHandshakeRequest(mechanism=security.sasl_mechanism), self.connect_timeout
        )
        if resp.error_code != ErrorCode.NONE:
            raise ChannelError(
                f"{self}: SASL mechanism {security.sasl_mechanism} refused "
                f"({ErrorCode(resp.error_code).name}; the broker offers {resp.mechanisms})"
            )
        client = SaslClient(security.sasl_mechanism, security.sasl_username or "", security.sasl_password or "")
        version = min(self.versions.get(int(ApiKey.SASL_AUTHENTICATE), (0, 0))[1], 2)
        token = client.step(None)
        while token is not None:
            resp = await self._send(
                int(ApiKey.SASL_AUTHENTICATE), version, SaslAuthenticateRequest(auth_bytes=token), self.connect_timeout
            )
            if resp.error_code != ErrorCode.NONE:
                raise ChannelError(f"{self}: SASL authentication failed: {resp.error_message}")
            try:
                token = client.step(bytes(resp.auth_bytes))
            except ScramError as exc:
                raise ChannelError(f"{self}: SASL authentication failed: {exc}") from None

    async def _open(self) -> tuple[asyncio.Transport, _AnswerProtocol]:
        local = await _local_addr(self.host, self.port)
        security = self.security
        ctx = security.ssl_context if security is not None else None
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.create_connection(
            lambda: _AnswerProtocol(self),
            self.host,
            self.port,
            local_addr=local,
            ssl=ctx,
            ssl_handshake_timeout=self.connect_timeout if ctx else None,
        )
        # typed asyncio.Transport; uvloop's TCPTransport is not a subclass, so no isinstance
        return transport, protocol

    def _deliver(self, frame: bytes | bytearray | memoryview) -> None:
        if not self._inflight:
            raise ChannelError(f"{self}: an answer nobody asked for")
        cid, api_key, version, fut = self._inflight.popleft()
        got = codec.response_correlation_id(frame)
        if got != cid:
            raise ChannelError(f"{self}: correlation id {got} does not match the request's {cid}")
        _, resp = codec.decode_response(api_key, version, frame)
        if not fut.done():
            fut.set_result(resp)

    def _fail(self, exc: ChannelError) -> None:
        """Fails every request in flight and drops the connection."""
        self._last_failure = time.monotonic()
        inflight, self._inflight = self._inflight, collections.deque()
        for _, _, _, fut in inflight:
            if not fut.done():
                fut.set_exception(exc)
                fut.exception()  # retrieved: a caller that timed out is gone
        self._drop_connection()

    def _drop_connection(self) -> None:
        writer, self._writer = self._writer, None
        protocol, self._protocol = self._protocol, None
        if protocol is not None:
            protocol.failed = True  # what it still reads is for nobody
        if writer is not None:
            writer.close()

    def reset(self, reason: str) -> None:
        """Fails every request in flight with ChannelError(reason) and drops the
        connection (its owner found it stalled); the next request connects again."""
        if self._writer is not None or self._inflight:
            self._fail(ChannelError(reason))

    async def close(self) -> None:
        self.closed = True
        self._fail(ChannelError(f"{self} is closed"))

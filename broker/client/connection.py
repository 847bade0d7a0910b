"""A blocking connection to one broker, on broker.protocol (the project's own lean client).

    conn = BrokerConnection("127.0.0.1", 9092)        # connects, negotiates ApiVersions
    resp = conn.request(MetadataRequest(topics=None))  # highest version both sides speak
    cid = conn.send(req); ...; resp = conn.receive()   # pipelining: answers come in order

Used by the CLI, the tests, the perf tool and the Spark source's executors. Not
thread-safe: one thread per connection.
"""

from __future__ import annotations

import select
import socket
import ssl
import time
from collections import deque

from broker import __version__
from broker.protocol import codec
from broker.protocol.api import ApiKey, client_versions
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.framing import FrameReader
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.security.listener import ClientSecurity

RECV_SIZE = 1 << 20


class ClientError(Exception):
    """A network or protocol failure on the client side (not a Kafka error code)."""


class BrokerConnection:
    def __init__(
        self,
        host: str,
        port: int,
        *,
        client_id: str = "kbroker-client",
        timeout: float = 30.0,
        max_frame_size: int = 1 << 30,
        security: ClientSecurity | None = None,
    ):
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self.security = security
        try:
            self.sock = socket.create_connection((host, port), timeout=timeout)
        except OSError as exc:
            raise ClientError(f"cannot connect to {host}:{port}: {exc.strerror or exc}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if security is not None and security.ssl_context is not None:
            try:
                self.sock = security.ssl_context.wrap_socket(self.sock, server_hostname=host)
            except (ssl.SSLError, OSError) as exc:
                self.sock.close()
                raise ClientError(f"TLS with {host}:{port} failed: {getattr(exc, 'reason', None) or exc}") from None
        self._frames = FrameReader(max_frame_size)
        self._next_cid = 1
        self._inflight: deque = deque()  # (correlation id, api key, version)
        self._early: bytes | bytearray | memoryview | None = None  # a frame response_ready() read ahead
        self.versions: dict[int, tuple[int, int]] = {}
        self._negotiate()

    def __repr__(self) -> str:
        return f"BrokerConnection({self.host}:{self.port})"

    # ------------------------------------------------------------------ versions

    def _negotiate(self) -> None:
        for version in (3, 0):
            req = ApiVersionsRequest(client_software_name="kbroker", client_software_version=__version__)
            resp = self.request(req, version=version)
            if resp.error_code == ErrorCode.UNSUPPORTED_VERSION and version != 0:
                continue
            if resp.error_code != 0:
                raise KafkaProtocolError(resp.error_code, "ApiVersions")
            self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
            if self.security is not None and self.security.sasl_mechanism is not None:
                self._authenticate()
            return

    def _authenticate(self) -> None:
        """SaslHandshake v1, then SaslAuthenticate until the exchange is over; ClientError
        (the broker's message) when refused."""
        from broker.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
        from broker.protocol.messages.sasl_handshake import SaslHandshakeRequest
        from broker.security.sasl import SaslClient
        from broker.security.scram import ScramError

        security = self.security
        assert security is not None and security.sasl_mechanism is not None
        resp = self.request(SaslHandshakeRequest(mechanism=security.sasl_mechanism), version=1)
        if resp.error_code != 0:
            raise ClientError(
                f"{self}: SASL mechanism {security.sasl_mechanism} refused "
                f"({ErrorCode(resp.error_code).name}; the broker offers {', '.join(resp.mechanisms)})"
            )
        client = SaslClient(security.sasl_mechanism, security.sasl_username or "", security.sasl_password or "")
        token = client.step(None)
        while token is not None:
            resp = self.request(
                SaslAuthenticateRequest(auth_bytes=token),
                version=min(self.versions.get(int(ApiKey.SASL_AUTHENTICATE), (0, 0))[1], 2),
            )
            if resp.error_code != 0:
                self.close()
                raise ClientError(f"{self}: {ErrorCode(resp.error_code).name}: {resp.error_message}")
            try:
                token = client.step(bytes(resp.auth_bytes))
            except ScramError as exc:
                raise ClientError(f"{self}: SASL authentication failed: {exc}") from None

    def version_for(self, api_key: int) -> int:
        """The highest version of `api_key` both this client and the broker speak."""
        ours = client_versions(api_key)
        if api_key == ApiKey.API_VERSIONS and not self.versions:
            return 3
        theirs = self.versions.get(api_key)
        if theirs is None:
            raise ClientError(f"broker {self.host}:{self.port} does not support {ApiKey(api_key).name}")
        lo = max(theirs[0], ours[0])
        hi = min(theirs[1], ours[1])
        if lo > hi:
            raise ClientError(f"no common version of {ApiKey(api_key).name} (broker {theirs}, client {ours})")
        return hi

    # ------------------------------------------------------------------ requests

    def send(self, request, version: int | None = None, expect_response: bool = True) -> int:
        try:
            return self._send(request, version, expect_response)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # KeyboardInterrupt (Ctrl-C, the CLI's SIGTERM) between two bytes of a
                # request: what the broker got is unknown, the connection cannot be reused
                self.close()
            raise

    def _send(self, request, version: int | None, expect_response: bool) -> int:
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key)
        cid = self._next_cid
        self._next_cid = (self._next_cid + 1) & 0x7FFFFFFF
        parts = codec.encode_request_parts(api_key, version, cid, self.client_id, request)
        try:
            if len(parts) == 1:
                self.sock.sendall(parts[0])
            else:
                _sendmsg_all(self.sock, parts)
        except OSError as exc:
            self.close()
            raise ClientError(f"send to {self.host}:{self.port} failed: {exc}") from None
        if expect_response:
            self._inflight.append((cid, api_key, version))
        return cid

    def receive(self, timeout: float | None = None):
        """The response to the oldest request in flight."""
        try:
            return self._receive(timeout)
        except BaseException as exc:
            if not isinstance(exc, Exception):
                # interrupted while waiting for (or reading) an answer: the answer would be
                # taken for the next request's, or read half: the connection is dropped
                self.close()
            raise

    def _receive(self, timeout: float | None):
        if not self._inflight:
            raise ClientError("no request in flight")
        cid, api_key, version = self._inflight[0]
        frame = self._read_frame(self.timeout if timeout is None else timeout)
        self._inflight.popleft()
        got = codec.response_correlation_id(frame)
        if got != cid:
            self.close()
            raise ClientError(f"correlation id {got} does not match the request's {cid}")
        _, resp = codec.decode_response(api_key, version, frame)
        return resp

    def request(self, request, version: int | None = None, timeout: float | None = None):
        self.send(request, version)
        return self.receive(timeout)

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def response_ready(self) -> bool:
        """Whether the answer to the oldest request in flight is already here (never
        blocks): lets a pipelining caller collect answers as they arrive."""
        if not self._inflight:
            return False
        if self._early is not None:
            return True
        frame = self._frames.next_frame()
        if frame is None:
            pending = isinstance(self.sock, ssl.SSLSocket) and self.sock.pending()
            readable, _, _ = ([self.sock], None, None) if pending else select.select([self.sock], [], [], 0)
            if not readable:
                return False
            try:
                self._recv()
            except OSError as exc:
                self.close()
                raise ClientError(f"connection to {self.host}:{self.port} failed: {exc}") from None
            frame = self._frames.next_frame()
            if frame is None:
                return False
        self._early = frame
        return True

    def _read_frame(self, timeout: float):
        early = self._early
        if early is not None:
            self._early = None
            return early
        deadline = time.monotonic() + timeout
        while True:
            frame = self._frames.next_frame()
            if frame is not None:
                return frame
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise ClientError(f"timed out waiting for {self.host}:{self.port}")
            self.sock.settimeout(remaining)
            try:
                self._recv()
            except TimeoutError:
                self.close()
                raise ClientError(f"timed out waiting for {self.host}:{self.port}") from None
            except OSError as exc:
                self.close()
                raise ClientError(f"connection to {self.host}:{self.port} failed: {exc}") from None

    def _recv(self) -> None:
        """One read into the frame reader: the rest of a large answer (a Fetch's records)
        straight into its frame's buffer, else up to RECV_SIZE bytes the reader copies.
        ClientError when the broker closed the connection; OSError as the socket raises."""
        frames = self._frames
        buf = frames.direct_buffer()
        if buf is not None:
            n = self.sock.recv_into(buf)
            if n:
                frames.direct_received(n)
        else:
            data = self.sock.recv(frames.read_size(RECV_SIZE))
            n = len(data)
            if n:
                frames.feed(data)
        if not n:
            self.close()
            raise ClientError(f"connection to {self.host}:{self.port} closed by the broker")

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    @property
    def closed(self) -> bool:
        """Closed (by close(), a failure, or an interrupted request): open a new one."""
        return self.sock.fileno() == -1

    def __enter__(self) -> BrokerConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _sendmsg_all(sock: socket.socket, parts: list) -> None:
    """sendmsg(2) until every part is written (large records parts are not copied). A TLS
    socket has no sendmsg: each part goes through sendall, still without joining them."""
    views = [memoryview(p).cast("B") for p in parts]
    if isinstance(sock, ssl.SSLSocket):
        for v in views:
            sock.sendall(v)
        return
    while views:
        n = sock.sendmsg(views[:64])
        while n:
            if n >= len(views[0]):
                n -= len(views[0])
                views.pop(0)
            else:
                views[0] = views[0][n:]
                n = 0

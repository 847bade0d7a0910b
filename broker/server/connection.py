"""One client connection, driven directly by the event loop's reader/writer callbacks.

Not an asyncio Transport: a Fetch response is written as its encoded header bytes and
then file ranges sent with sendfile(2) straight from the segment files, and a transport
would not let us interleave that with its own buffer (uvloop has no sock_sendfile at
all). So the connection owns its non-blocking socket:

    recv -> FrameReader -> pending frames -> handled in order, inside the read
         callback, for at most TURN_BUDGET_S per event loop turn (the rest in a later
         turn, after the other connections had theirs; a handler that must wait
         continues in a task, and the frames behind it wait their turn — except
         Produce behind Produce, see below)
         -> response parts [bytes, FileSlice, ...] -> in-flight slots, in request
         order -> output
    output queue -> sendmsg(2) for bytes / sendfile(2) for file ranges; on EAGAIN the
                    loop's writer callback resumes where it stopped.

A large request (a Produce of a megabyte) is received in place: once its size is read,
the rest goes with socket.recv_into straight into the frame's own buffer, which is what
the handler decodes and appends from (FrameReader.direct_buffer); only small frames, and
a large frame's first bytes, are copied out of the bytes recv(2) returned. Over TLS the
same, from OpenSSL's decrypted records (SSLSocket.recv_into).

Invariants:
- Requests on one connection are handled in order and answered in order. A request
  that must wait holds back the requests behind it (Kafka mutes a connection while its
  request is in flight), with one exception: Produce requests behind a waiting Produce
  (acks=all waiting for the ISR, or for an fsync) are appended at once, up to
  MAX_INFLIGHT_PRODUCE of them, and wait together; their answers still go out in
  request order. Appends happen in arrival order either way — a Produce handler appends
  before it returns its awaitable — so what this changes is only that a producer with
  several requests in flight (librdkafka's and the Java client's default is 5) gets its
  batches replicated together instead of one round trip of the followers each. Not
  behind a Produce that waits on its transaction's coordinator before appending
  (hold_produces): those behind it wait for its answer.
- One connection takes at most TURN_BUDGET_S of handling per event loop turn (at least
  one request): a client pipelining thousands of requests cannot stall the others (Kafka
  polls its connections in turn, one request each; cheap requests are taken in batches
  here, so that their answers still go out together).
- The connection's phase (handshaking, authenticating, ready, draining, closed) and the
  holds on its reading (muted, output, frames, behind a request in flight, broker memory)
  are connection_state.py's table: reading is a function of them (_may_read), applied by
  _update_reading whenever one of their inputs changes. Kafka mutes a connection while
  one of its requests is in flight; this one reads on up to
  queued.max.request.bytes.per.connection behind it, so a client's small pipelined
  requests keep their pace while a long poll of its holds no more than that behind it.
- Every byte counted in queued_bytes is released exactly once: as its frame is handed
  to dispatch, or when the connection closes.
- Every FileSlice handed to the output queue is closed exactly once: after it is sent
  or when the connection closes.
- All methods run on the event loop thread.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import ssl
from collections.abc import Awaitable, Iterable
from typing import TYPE_CHECKING, Any, cast

from broker.metrics.stats import FETCH_FOLLOWER as _FETCH_FOLLOWER
from broker.native import sendfile
from broker.protocol.framing import FrameReader
from broker.server.connection_state import Event, Hold, Phase, initial_phase, next_phase

if TYPE_CHECKING:
    from broker.protocol.codec import BufferLike
    from broker.server.quotas import Sensor
    from broker.server.server import Acceptor, Server

log = logging.getLogger(__name__)

RECV_SIZE = 256 * 1024
MAX_PENDING_FRAMES = 64
MAX_PENDING_OUTPUT = 8 * 1024 * 1024
SENDMSG_MAX_PARTS = 64
TURN_BUDGET_S = 0.0005
TLS_CHUNK = 512 * 1024  # bytes handed to OpenSSL at once (it cuts 16 KiB records)
MAX_INFLIGHT_PRODUCE = 8
_PRODUCE = 0
_MUTED, _OUTPUT, _FRAMES, _BEHIND, _MEMORY = (
    h.value for h in (Hold.MUTED, Hold.OUTPUT, Hold.FRAMES, Hold.BEHIND, Hold.MEMORY)
)
_FETCH = 1
#: a request's timing, with metrics on: api key, arrival, dispatch start and end, answer ready
_Timing = tuple[int, float, float, float, float]


class RequestMemory:
    """queued.max.request.bytes: the requests received and not yet handled on all
    connections of a broker, together (Kafka's MemoryPool of its SocketServer). A
    connection counts its waiting frames and the frame it is receiving at that frame's
    announced size; once `used` reaches `limit`, no connection starts reading another
    frame (one in the middle of a frame finishes it, as Kafka lets a receive whose buffer
    was allocated finish), and the connections that stopped resume as soon as handled
    requests bring `used` below `limit` again."""

    __slots__ = ("limit", "used", "waiting")

    def __init__(self, limit: int):
        self.limit = limit
        self.used = 0
        self.waiting: dict[Connection, None] = {}  # stopped for memory, in the order they stopped

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    def add(self, delta: int) -> None:
        self.used += delta
        if delta < 0 and self.waiting and self.used < self.limit:
            waiting = list(self.waiting)
            self.waiting.clear()
            for conn in waiting:
                conn._update_reading()

    def wait(self, conn: Connection) -> None:
        self.waiting[conn] = None

    def forget(self, conn: Connection) -> None:
        """The connection closed: its bytes are free, and it waits for nothing."""
        self.waiting.pop(conn, None)
        if conn.queued_bytes:
            self.add(-conn.queued_bytes)


class _Slot:
    """One answer to come, in request order: its parts once known (and, with metrics on,
    the request's timing so far: api key, arrival, dispatch start and end, answer ready)."""

    __slots__ = ("parts", "done", "task", "timing")

    def __init__(self, parts: list[Any] | None = None, done: bool = False, timing: _Timing | None = None):
        self.parts = parts
        self.done = done
        self.task: asyncio.Task[None] | None = None
        self.timing = timing


def _api_key(frame: BufferLike) -> int:
    return (frame[0] << 8) | frame[1] if len(frame) >= 2 else -1


class Connection:
    def __init__(self, server: Server, sock: socket.socket, address: Any, acceptor: Acceptor | None = None):
        self.server = server
        self.acceptor = acceptor
        #: the listener the client came in on (Metadata answers with its endpoints)
        self.listener_name = acceptor.name if acceptor is not None else "PLAINTEXT"
        self.loop = server.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.address = address
        #: the client's IP address, as ACLs name hosts
        ip = address[0] if isinstance(address, tuple) else str(address)
        self.host = ip[7:] if ip.startswith("::ffff:") and "." in ip else ip
        self.frames = FrameReader(server.services.config["socket.request.max.bytes"])
        self.pending: collections.deque[BufferLike] = collections.deque()
        self._pending_bytes = 0  # the bytes of the frames in `pending`
        #: what this connection holds of requests not yet handled: the pending frames and
        #: the frame being received at its announced size (RequestMemory counts it)
        self.queued_bytes = 0
        #: queued.max.request.bytes.per.connection: reading stops at it while a request is in flight
        self.max_queued_bytes: int = server.max_queued_bytes_per_connection
        self.memory: RequestMemory | None = server.request_memory
        #: the response parts to send: bytes-like and file slices (told apart by their fd)
        self.out: collections.deque[Any] = collections.deque()
        self.out_bytes = 0
        self.phase = Phase.READY  # set below, by what the listener asks for
        self._reading = False
        self._writing = False
        self._flush_scheduled = False
        self._run_scheduled = False  # handling continues in a later loop turn
        self.inflight: collections.deque[_Slot] = collections.deque()  # answers to come, in order
        self._inflight_produce = False  # every in-flight request is a Produce
        self._holding = 0  # in-flight Produces the Produces behind wait for
        self._stalled = False  # handling paused for output backpressure
        self.client_id: str | None = None
        self.client_software: tuple[str, str] | None = None
        self.follower = False  # a follower's fetch connection (Fetch said so)
        # client quotas (server/quotas.py): the sensors found for this client, until the
        # quotas, the client id or the principal change; muted: nothing read or handled until the throttle ends
        self.quota_generation = -1
        self.quota_client_id: str | None = None
        self.quota_sensors: tuple[Sensor | None, Sensor | None, Sensor | None] = (None, None, None)
        self._muted_until = 0.0
        self._unmute_handle: asyncio.TimerHandle | None = None
        # metrics (None: off): each pending frame's arrival time, and the timings of the
        # answers queued for sending (observed once the output queue has drained)
        self.stats = getattr(server, "request_stats", None)
        self.arrived: collections.deque[float] = collections.deque()
        self.sending: list[_Timing] = []
        #: the last complete request received or answer sent (a client trickling the bytes
        #: of a frame it never completes stays idle: connections.max.idle.ms closes it)
        self.last_active = self.loop.time()
        #: who the client is: "User:ANONYMOUS" until TLS or SASL says otherwise
        self.principal = "User:ANONYMOUS"
        security = acceptor.security if acceptor is not None else None
        self.security = security
        self._tls: ssl.SSLSocket | None = None  # the TLS layer, on SSL and SASL_SSL listeners
        self._chunk: memoryview | None = None  # TLS: the bytes being written (a retry resends them)
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        #: SASL listeners: the connection's authentication (broker/security/sasl.py)
        self.authenticator = security.new_authenticator() if security is not None else None
        if self.authenticator is not None:
            # before authentication a frame holds at most sasl.server.max.receive.size
            # (Kafka's SaslServerAuthenticator): an unauthenticated client cannot have a
            # request buffer of socket.request.max.bytes reserved for it
            self.frames.max_frame_size = min(self.frames.max_frame_size, self.authenticator.settings.max_receive_size)
        if security is not None and security.ssl_context is not None:
            self._tls = self.sock = security.ssl_context.wrap_socket(
                sock, server_side=True, do_handshake_on_connect=False
            )
        self.phase = initial_phase(self._tls is not None, self.authenticator is not None)
        self._resume_reading()

    def __repr__(self) -> str:
        return f"Connection({self.address})"

    def authenticated(self, principal: str) -> None:
        """SASL authentication completed as `principal`: requests of any size from now on,
        and the quotas are the principal's (the sensors found before are looked up again)."""
        self.principal = principal
        self.quota_generation = -1
        self.frames.max_frame_size = self.server.services.config["socket.request.max.bytes"]
        self._event(Event.AUTHENTICATED)

    # ------------------------------------------------------------------ states (connection_state.py)

    def _event(self, event: Event) -> None:
        was = self.phase
        self.phase = next_phase(was, event)
        if was.authenticating and self.phase is Phase.READY:
            self.server.connection_established(self)  # it no longer counts as authenticating

    @property
    def closed(self) -> bool:
        return self.phase is Phase.CLOSED

    @property
    def closing(self) -> bool:
        """Closes once what is queued has been sent; nothing more is read or handled."""
        return self.phase is Phase.DRAINING_ANSWERS

    @property
    def authenticating(self) -> bool:
        """The TLS handshake or SASL authentication the listener asks for is to complete
        (the server bounds how long, and how many such connections there are)."""
        return self.phase.authenticating

    def _holds(self) -> int:
        """The holds on reading now (connection_state.Hold, as an int: this runs per read)."""
        holds = 0
        if self._unmute_handle is not None:
            holds |= _MUTED
        if self._stalled:
            holds |= _OUTPUT
        if len(self.pending) >= (MAX_PENDING_FRAMES if self._reading else MAX_PENDING_FRAMES // 2):
            holds |= _FRAMES
        if self.inflight and self.queued_bytes >= self.max_queued_bytes:
            holds |= _BEHIND
        memory = self.memory
        if memory is not None and memory.exhausted and not self.frames.in_frame:
            holds |= _MEMORY
        return holds

    @property
    def holds(self) -> Hold:
        return Hold(self._holds())

    # ------------------------------------------------------------------ reading

    def _resume_reading(self) -> None:
        if not self._reading and self.phase.reads and self._unmute_handle is None:
            self.loop.add_reader(self.fd, self._on_readable)
            self._reading = True
            if self._tls is not None and self.phase is not Phase.HANDSHAKING and self._tls.pending():
                # OpenSSL holds decrypted bytes: the socket will not say readable for them
                self.loop.call_soon(self._read_more)

    def _pause_reading(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.fd)
            self._reading = False

    def _may_read(self) -> bool:
        """Whether to read more of the client's bytes now: its phase reads and no hold is
        on (connection_state.py)."""
        if not self.phase.reads:
            return False
        holds = self._holds()
        if holds & _MEMORY:
            assert self.memory is not None
            self.memory.wait(self)
        return not holds

    def _update_reading(self) -> None:
        if self._may_read():
            self._resume_reading()
        else:
            self._pause_reading()

    def _account(self) -> None:
        """queued_bytes follows the pending frames and the frame being received."""
        queued = self._pending_bytes + self.frames.reserved
        delta = queued - self.queued_bytes
        if delta:
            self.queued_bytes = queued
            if self.memory is not None:
                self.memory.add(delta)

    def _on_readable(self) -> None:
        memory = self.memory
        if memory is not None and memory.exhausted and self.phase is not Phase.HANDSHAKING and not self.frames.in_frame:
            self._pause_reading()  # another frame would go beyond queued.max.request.bytes
            memory.wait(self)
            return
        if self._tls is not None:
            if self.phase is Phase.HANDSHAKING and not self._handshake():
                return
            got = self._tls_read()
        else:
            got = self._recv()
        if got is None:
            return
        if not got:
            self._end_of_stream()
            return
        now = self.loop.time()
        pending = self.pending
        count = len(pending)
        try:
            while True:
                frame = self.frames.next_frame()
                if frame is None:
                    break
                pending.append(frame)
                self._pending_bytes += len(frame)
                if self.stats is not None:
                    self.arrived.append(now)
        except ValueError as exc:  # FrameTooLarge / InvalidFrame
            before = (
                " (before authentication: sasl.server.max.receive.size)"
                if self.authenticator is not None and not self.authenticator.authenticated
                else ""
            )
            self.server.log_bad_request(logging.WARNING, "%s: %s%s; closing the connection", self, exc, before)
            self.close()
            return
        if len(pending) > count:
            self.last_active = now
        self._account()
        if pending and not self._run_scheduled and self._may_dispatch():
            self._run_pending()
        else:
            self._update_reading()

    def _recv(self) -> int | None:
        """Reads what the socket has into the frame reader: the rest of a large frame
        straight into that frame's buffer (recv_into: no copy after the kernel's), else up
        to RECV_SIZE bytes that the reader copies into frames (when they start a large
        frame, its rest is read in place at once: one wake-up per request, not two). The
        count read, 0 at the end of the stream, None when nothing was there (or the
        connection failed)."""
        frames = self.frames
        buf = frames.direct_buffer()
        got = 0
        try:
            if buf is None:
                data = self.sock.recv(frames.read_size(RECV_SIZE))
                if not data:
                    return 0
                frames.feed(data)
                got = len(data)
                # a large frame just started: its rest is most often in the socket
                # already (a producer writes a request at once), so it is read now, in
                # place, rather than after another turn of the loop
                buf = frames.direct_buffer()
                if buf is None:
                    return got
            n = self.sock.recv_into(buf)
            if n:
                frames.direct_received(n)
            return got + n  # an end of stream right after data: the next wake-up sees it
        except (BlockingIOError, InterruptedError):
            return got or None
        except OSError as exc:
            log.debug("%s: recv failed: %s", self, exc)
            self.close()
            return None

    def _end_of_stream(self) -> None:
        """The client closed its side. Requests it sent before are handled, as Kafka's
        broker handles what it has received (an acks=0 producer's last requests are
        appended, not dropped with the connection); answers go out while the socket takes
        them; the connection closes once nothing is queued or in flight."""
        if not self.pending and not self.inflight:
            self.close()
            return
        self._event(Event.PEER_CLOSED)
        self._pause_reading()
        if self.pending and not self._run_scheduled and self._may_dispatch():
            self._run_pending()
        self._close_if_drained()

    def _close_if_drained(self) -> None:
        if self.phase is Phase.DRAINING_RECEIVED and not self.pending and not self.inflight:
            self.close_when_sent()

    # ------------------------------------------------------------------ TLS

    def _handshake(self) -> bool:
        """Drives the TLS handshake; True once it is done (then the client's principal is
        known from its certificate). A failed handshake (plaintext bytes, an untrusted,
        expired or missing client certificate ...) is audited and closes the connection."""
        tls = self._tls
        assert tls is not None
        try:
            tls.do_handshake()
        except ssl.SSLWantReadError:
            self._handshake_wants_write(False)
            return False
        except ssl.SSLWantWriteError:
            self._handshake_wants_write(True)
            return False
        except (ssl.SSLError, OSError) as exc:
            self.server.audit_failure(self, f"TLS handshake failed: {getattr(exc, 'reason', None) or exc}")
            self.close()
            return False
        self._handshake_wants_write(False)
        self.last_active = self.loop.time()
        security = self.security
        try:
            der = tls.getpeercert(binary_form=True)
            if der and security is not None:
                self.principal = "User:" + security.principal_from_certificate(der)
        except ValueError as exc:  # no ssl.principal.mapping.rules rule applies
            self.server.audit_failure(self, f"TLS client refused: {exc}")
            self.close()
            return False
        self._event(Event.TLS_DONE if self.authenticator is not None else Event.TLS_DONE_NO_SASL)
        return True

    def _handshake_wants_write(self, want: bool) -> None:
        if want and not self._writing:
            self.loop.add_writer(self.fd, self._on_readable)
            self._writing = True
        elif not want and self._writing and not self.out:
            self.loop.remove_writer(self.fd)
            self._writing = False

    def _tls_read(self) -> int | None:
        """Reads decrypted bytes into the frame reader, as _recv does (the rest of a large
        frame straight into its buffer), what OpenSSL has up to RECV_SIZE (it hands out
        one TLS record per read). The count read, 0 at the end, None when nothing is there
        yet."""
        tls = self._tls
        assert tls is not None
        frames = self.frames
        size = 0
        try:
            while size < RECV_SIZE:
                buf = frames.direct_buffer()
                if buf is not None:
                    n = tls.recv_into(buf)
                    if n:
                        frames.direct_received(n)
                else:
                    data = tls.recv(min(frames.read_size(RECV_SIZE), RECV_SIZE - size))
                    n = len(data)
                    if n:
                        frames.feed(data)
                if not n:
                    if not size:
                        return 0
                    break
                size += n
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError, InterruptedError):
            pass
        except (ssl.SSLError, OSError) as exc:
            log.debug("%s: TLS recv failed: %s", self, exc)
            if not size:
                return 0
        if size >= RECV_SIZE and tls.pending():
            # more is decrypted than read: the socket will not say readable for it
            self.loop.call_soon(self._read_more)
        return size or None

    def _read_more(self) -> None:
        if self._reading and not self.closed:
            self._on_readable()

    def _flush_tls(self) -> None:
        """Writes the output queue through TLS: the parts, bytes and file ranges alike, go
        into one buffer of up to TLS_CHUNK bytes (a file range with one pread(2), from the
        page cache), which OpenSSL encrypts and writes in TLS records; sendfile(2) cannot
        pass through user-space TLS. A write that would block is retried with the same
        bytes, as OpenSSL requires."""
        tls = self._tls
        assert tls is not None
        out = self.out
        try:
            while True:
                if self._chunk is None:
                    if not out:
                        break
                    self._chunk = self._fill_chunk()
                chunk = self._chunk
                try:
                    n = tls.send(chunk)
                except (ssl.SSLWantWriteError, ssl.SSLWantReadError, BlockingIOError, InterruptedError):
                    self._want_write()
                    return
                self.out_bytes -= n
                if n < len(chunk):
                    self._chunk = chunk[n:]
                else:
                    self._chunk = None
        except (ssl.SSLError, ConnectionError, OSError) as exc:
            log.debug("%s: TLS send failed: %s", self, exc)
            self.close()
            return
        self._sent()

    def _fill_chunk(self) -> memoryview:
        """Takes up to TLS_CHUNK bytes off the output queue into one buffer: byte parts
        copied, file ranges read with one pread(2) each (a range longer than the room
        left is read in part and stays queued for the rest; one read whole is released)."""
        out = self.out
        size = 0
        for p in out:
            size += p.length if hasattr(p, "fd") else len(p)
            if size >= TLS_CHUNK:
                size = TLS_CHUNK
                break
        buf = bytearray(size)
        view = memoryview(buf)
        pos = 0
        while pos < size:
            p = out[0]
            if hasattr(p, "fd"):
                n = os.preadv(p.fd, [view[pos : pos + min(p.length, size - pos)]], p.offset)
                if n <= 0:
                    raise OSError(f"short read of {p}")
                pos += n
                p.offset += n
                p.length -= n
                if p.length == 0:
                    out.popleft()
                    _close_part(p)
            else:
                n = min(len(p), size - pos)
                view[pos : pos + n] = p[:n] if n < len(p) else p
                pos += n
                if n < len(p):
                    out[0] = memoryview(p)[n:]
                else:
                    out.popleft()
        return view

    def _may_dispatch(self) -> bool:
        """Whether the next pending request may be handled now: not muted by a quota, and
        nothing in flight, or a Produce behind Produces only, within MAX_INFLIGHT_PRODUCE."""
        if self._unmute_handle is not None:
            return False
        inflight = self.inflight
        if not inflight:
            return True
        return (
            self._inflight_produce
            and not self._holding
            and len(inflight) < MAX_INFLIGHT_PRODUCE
            and _api_key(self.pending[0]) == _PRODUCE
        )

    def hold_produces(self) -> None:
        """The Produce being handled waits on its transaction's coordinator (KIP-890: the
        verification that the partition is in the transaction, or a v12 adding it): the
        Produces behind it are not handled before its answer (release_produces), as
        Kafka handles one request of a connection at a time. Their batches, of the same
        producer, may need the transaction it opens: verified side by side, a later one
        would be refused OUT_OF_ORDER_SEQUENCE_NUMBER, which a Java transactional
        producer takes as fatal once the answer before it was a success."""
        self._holding += 1

    def release_produces(self) -> None:
        self._holding -= 1

    def _run_pending(self) -> None:
        """Handles queued requests in order, inside the current loop iteration, until one
        must wait (that one continues in a task, and the rest stay queued behind it,
        unless they are Produce requests behind a Produce: see the module docstring) or
        this turn's share is used (the rest continue in a later turn). Answers go out
        in request order."""
        dispatch = self.server.dispatch
        clock = self.loop.time
        inflight = self.inflight
        stats = self.stats
        timing = None
        turn_ends = clock() + TURN_BUDGET_S
        try:
            while self.pending and not self.closed and self._may_dispatch():
                now = clock()
                if now >= turn_ends:
                    self._schedule_run()
                    break
                if self.out_bytes >= MAX_PENDING_OUTPUT:
                    # backpressure: stop reading and handling until the output drains
                    self._pause_reading()
                    self._stalled = True
                    break
                frame = self.pending.popleft()
                self._pending_bytes -= len(frame)
                api_key = _api_key(frame)
                result = dispatch(self, frame)
                if self.closed:
                    return
                if stats is not None:
                    end = clock()
                    if api_key == _FETCH and self.follower:
                        api_key = _FETCH_FOLLOWER
                    timing = (api_key, self.arrived.popleft(), now, end, end)
                    if result is None:  # no answer (acks=0): handled now
                        stats.observe(api_key, now - timing[1], end - now, 0.0, 0.0)
                if result is None:
                    continue
                if type(result) is not list:  # the parts, or an awaitable of them
                    if not inflight:
                        self._inflight_produce = api_key == _PRODUCE
                    slot = _Slot(timing=timing)
                    inflight.append(slot)
                    slot.task = self.loop.create_task(self._finish(slot, cast("Awaitable[list[Any] | None]", result)))
                elif inflight:
                    inflight.append(_Slot(result, True, timing))  # answered behind the ones waiting
                else:
                    self.write(result, timing)
        except Exception:
            log.exception("%s: request processing failed; closing", self)
            self.close()
            return
        self._account()
        if self.phase is Phase.DRAINING_RECEIVED:
            self._close_if_drained()
        else:
            self._update_reading()

    def _schedule_run(self) -> None:
        """Continues handling in a later loop turn: behind the I/O callbacks of every
        other connection that is ready."""
        if not self._run_scheduled:
            self._run_scheduled = True
            self.loop.call_soon(self._scheduled_run)

    def _scheduled_run(self) -> None:
        self._run_scheduled = False
        if not self.closed and self.pending and self._may_dispatch():
            self._run_pending()

    async def _finish(self, slot: _Slot, awaitable: Awaitable[list[Any] | None]) -> None:
        try:
            parts = await awaitable
        except asyncio.CancelledError:
            return
        except Exception:
            log.exception("%s: request processing failed; closing", self)
            self.close()
            return
        slot.parts, slot.done, slot.task = parts, True, None
        if slot.timing is not None:  # the remote part ends here
            t = slot.timing
            slot.timing = (t[0], t[1], t[2], t[3], self.loop.time())
        if self.closed:
            _close_parts(parts or ())
            return
        inflight = self.inflight
        while inflight and inflight[0].done:
            done = inflight.popleft()
            if done.parts:
                self.write(done.parts, done.timing)
            elif done.timing is not None and self.stats is not None:
                api_key, arrived, start, end, ready = done.timing
                self.stats.observe(api_key, start - arrived, end - start, ready - end, 0.0)
        if self.pending and self._may_dispatch():
            self._run_pending()
        elif self.phase is Phase.DRAINING_RECEIVED:
            self._close_if_drained()
        else:
            self._update_reading()  # nothing in flight may have been what held it

    def waiting_tasks(self) -> list[asyncio.Task[None]]:
        """The tasks of the requests still waiting (for a clean shutdown to await)."""
        return [s.task for s in self.inflight if s.task is not None]

    @property
    def idle(self) -> bool:
        """Nothing in progress: no request waiting or queued, nothing left to send."""
        return not self.inflight and not self.pending and not self.out and self._chunk is None

    # ------------------------------------------------------------------ quotas

    def mute(self, seconds: float) -> None:
        """A quota throttles this client: nothing more is read or handled for `seconds`
        (Kafka mutes the channel for the throttle time; KIP-219). A second throttle while
        muted extends it to the later end."""
        if seconds <= 0 or self.closed:
            return
        until = self.loop.time() + seconds
        if until <= self._muted_until:
            return
        self._muted_until = until
        if self._unmute_handle is not None:
            self._unmute_handle.cancel()
        self._unmute_handle = self.loop.call_at(until, self._unmute)
        self._pause_reading()

    @property
    def muted(self) -> bool:
        return self._unmute_handle is not None

    def _unmute(self) -> None:
        self._unmute_handle = None
        if self.closed:
            return
        self._update_reading()
        if self.pending and not self._run_scheduled and self._may_dispatch():
            self._run_pending()
        elif self.phase is Phase.DRAINING_RECEIVED:
            self._close_if_drained()

    # ------------------------------------------------------------------ writing

    def write(self, parts: list[Any], timing: _Timing | None = None) -> None:
        """Queues response parts (bytes-like and file slices) and starts sending. `timing`
        (metrics on): the request's, observed once these parts are sent."""
        if self.closed:
            _close_parts(parts)
            return
        if timing is not None:
            self.sending.append(timing)
        for p in parts:
            self.out.append(p)
            self.out_bytes += p.length if hasattr(p, "fd") else len(p)
        if not self._writing and not self._flush_scheduled:
            # coalesce: answers to pipelined requests handled in this loop iteration go
            # out in one sendmsg(2) at its end
            self._flush_scheduled = True
            self.loop.call_soon(self._scheduled_flush)

    def _scheduled_flush(self) -> None:
        self._flush_scheduled = False
        if not self._writing and not self.closed:
            self._flush()

    def _flush(self) -> None:
        if self._tls is not None:
            if self.phase is Phase.HANDSHAKING:
                self._on_readable()
            else:
                self._flush_tls()
            return
        out = self.out
        try:
            while out:
                head = out[0]
                if hasattr(head, "fd"):
                    n = sendfile(self.fd, head.fd, head.offset, head.length)
                    self.out_bytes -= n
                    if n < head.length:
                        head.offset += n
                        head.length -= n
                        self._want_write()
                        return
                    out.popleft()
                    _close_part(head)
                    continue
                # gather consecutive byte parts into one sendmsg(2)
                bufs: list[bytes | bytearray | memoryview] = []
                for p in out:
                    if hasattr(p, "fd") or len(bufs) >= SENDMSG_MAX_PARTS:
                        break
                    bufs.append(p)
                try:
                    n = self.sock.sendmsg(bufs)
                except (BlockingIOError, InterruptedError):
                    self._want_write()
                    return
                self.out_bytes -= n
                while n > 0:
                    p = out[0]
                    if n >= len(p):
                        n -= len(p)
                        out.popleft()
                    else:
                        out[0] = memoryview(p)[n:]
                        n = 0
                        self._want_write()
                        return
        except (ConnectionError, EOFError, OSError) as exc:
            log.debug("%s: send failed: %s", self, exc)
            self.close()
            return
        self._sent()

    def close_when_sent(self) -> None:
        """Closes the connection once the answers queued so far (and the one being
        handled) are sent; nothing more is read or handled meanwhile."""
        self._event(Event.CLOSE_WHEN_SENT)
        self._pause_reading()
        self.pending.clear()
        self._pending_bytes = 0
        self._account()
        if not self.out and self._chunk is None and not self._flush_scheduled:
            self.loop.call_soon(self._close_if_sent)

    def _close_if_sent(self) -> None:
        if not self.out and self._chunk is None:
            self.close()

    def _sent(self) -> None:
        """Everything queued is out."""
        if self.closing:
            self.close()
            return
        self.last_active = self.loop.time()
        if self.sending:
            self._observe_sent(self.last_active)
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        if self._stalled and self.out_bytes < MAX_PENDING_OUTPUT:
            self._stalled = False
            self._update_reading()
            self._schedule_run()

    def _observe_sent(self, now: float) -> None:
        """Every answer queued so far has gone out: each request's time, part by part
        (Kafka's RequestQueueTimeMs, LocalTimeMs, RemoteTimeMs, ResponseSendTimeMs)."""
        stats = self.stats
        assert stats is not None
        for api_key, arrived, start, end, ready in self.sending:
            stats.observe(api_key, start - arrived, end - start, ready - end, now - ready)
        self.sending.clear()

    def _want_write(self) -> None:
        if not self._writing and not self.closed:
            self.loop.add_writer(self.fd, self._flush)
            self._writing = True

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        if self.phase is Phase.CLOSED:
            return
        self._event(Event.CLOSE)
        if self._unmute_handle is not None:
            self._unmute_handle.cancel()
            self._unmute_handle = None
        if self._reading:
            self.loop.remove_reader(self.fd)
            self._reading = False
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        _close_parts(self.out)
        self.out.clear()
        self._chunk = None
        self.pending.clear()
        if self.memory is not None:
            self.memory.forget(self)
        self.queued_bytes = self._pending_bytes = 0
        self.arrived.clear()
        self.sending.clear()
        for slot in self.inflight:
            if slot.task is not None and not slot.task.done():
                # cancelled from the next loop turn: a task created in this one has not run its
                # first step yet, and cancelling it now would drop the request's coroutines
                # unawaited (Python then warns, from wherever the garbage collector runs)
                self.loop.call_soon(slot.task.cancel)
            elif slot.done:
                _close_parts(slot.parts or ())
        self.inflight.clear()
        try:
            self.sock.close()
        except OSError:
            pass
        self.server.connection_closed(self)


def _close_part(p: Any) -> None:
    close = getattr(p, "close", None)
    if close is not None and hasattr(p, "fd"):
        close()


def _close_parts(parts: Iterable[Any]) -> None:
    for p in parts:
        _close_part(p)

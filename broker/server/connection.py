"""One client connection, driven directly by the event loop's reader/writer callbacks.

Not an asyncio Transport: a Fetch response is written as its encoded header bytes and
then file ranges sent with sendfile(2) straight from the segment files, and a transport
would not let us interleave that with its own buffer (uvloop has no sock_sendfile at
all). So the connection owns its non-blocking socket:

    recv -> FrameReader -> pending frames -> process() one at a time, in order
         -> handler -> response parts [bytes, FileSlice, ...] -> output queue
    output queue -> sendmsg(2) for bytes / sendfile(2) for file ranges; on EAGAIN the
                    loop's writer callback resumes where it stopped.

Invariants:
- Requests on one connection are handled one at a time and answered in order (Kafka
  does the same: a connection is muted while its request is in flight).
- Reading pauses while too many frames wait or too much output is queued
  (backpressure), and resumes as they drain.
- Every FileSlice handed to the output queue is closed exactly once: after it is sent
  or when the connection closes.
- All methods run on the event loop thread.
"""
from __future__ import annotations

import asyncio
import collections
import logging
import socket
from typing import TYPE_CHECKING

from broker.native import sendfile
from broker.protocol.framing import FrameReader

if TYPE_CHECKING:
    from broker.server.server import Server

log = logging.getLogger(__name__)

RECV_SIZE = 256 * 1024
MAX_PENDING_FRAMES = 64
MAX_PENDING_OUTPUT = 8 * 1024 * 1024
SENDMSG_MAX_PARTS = 64


class Connection:
    def __init__(self, server: "Server", sock: socket.socket, address):
        self.server = server
        self.loop = server.loop
        self.sock = sock
        self.fd = sock.fileno()
        self.address = address
        self.frames = FrameReader(server.broker.config["socket.request.max.bytes"])
        self.pending: collections.deque = collections.deque()
        self.out: collections.deque = collections.deque()
        self.out_bytes = 0
        self.closed = False
        self._reading = False
        self._writing = False
        self._flush_scheduled = False
        self._wakeup = asyncio.Event()
        self._drained = asyncio.Event()
        self._drained.set()
        self.client_id: str | None = None
        self.client_software: tuple[str, str] | None = None
        sock.setblocking(False)
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        self._resume_reading()
        self.task = self.loop.create_task(self._process())

    def __repr__(self) -> str:
        return f"Connection({self.address})"

    # ------------------------------------------------------------------ reading

    def _resume_reading(self) -> None:
        if not self._reading and not self.closed:
            self.loop.add_reader(self.fd, self._on_readable)
            self._reading = True

    def _pause_reading(self) -> None:
        if self._reading:
            self.loop.remove_reader(self.fd)
            self._reading = False

    def _on_readable(self) -> None:
        try:
            data = self.sock.recv(RECV_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            log.debug("%s: recv failed: %s", self, exc)
            self.close()
            return
        if not data:
            self.close()
            return
        try:
            self.frames.feed(data)
            while True:
                frame = self.frames.next_frame()
                if frame is None:
                    break
                self.pending.append(frame)
        except ValueError as exc:        # FrameTooLarge / InvalidFrame
            log.warning("%s: %s; closing the connection", self, exc)
            self.close()
            return
        if self.pending:
            self._wakeup.set()
            if len(self.pending) >= MAX_PENDING_FRAMES:
                self._pause_reading()

    async def _process(self) -> None:
        dispatch = self.server.dispatch
        try:
            while not self.closed:
                if not self.pending:
                    self._wakeup.clear()
                    await self._wakeup.wait()
                    continue
                frame = self.pending.popleft()
                if not self._reading and len(self.pending) < MAX_PENDING_FRAMES // 2 \
                        and self.out_bytes < MAX_PENDING_OUTPUT:
                    self._resume_reading()
                parts = await dispatch(self, frame)
                if self.closed:
                    break
                if parts:
                    self.write(parts)
                    if self.out_bytes >= MAX_PENDING_OUTPUT:
                        self._pause_reading()
                        self._drained.clear()
                        await self._drained.wait()
                        self._resume_reading()
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("%s: request processing failed; closing", self)
        finally:
            self.close()

    # ------------------------------------------------------------------ writing

    def write(self, parts) -> None:
        """Queues response parts (bytes-like and file slices) and starts sending."""
        if self.closed:
            _close_parts(parts)
            return
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
                bufs = []
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
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        self._drained.set()

    def _want_write(self) -> None:
        if not self._writing and not self.closed:
            self.loop.add_writer(self.fd, self._flush)
            self._writing = True

    # ------------------------------------------------------------------ closing

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        if self._reading:
            self.loop.remove_reader(self.fd)
            self._reading = False
        if self._writing:
            self.loop.remove_writer(self.fd)
            self._writing = False
        _close_parts(self.out)
        self.out.clear()
        self.pending.clear()
        self._wakeup.set()
        self._drained.set()
        try:
            self.sock.close()
        except OSError:
            pass
        self.server.connection_closed(self)


def _close_part(p) -> None:
    close = getattr(p, "close", None)
    if close is not None and hasattr(p, "fd"):
        close()


def _close_parts(parts) -> None:
    for p in parts:
        _close_part(p)

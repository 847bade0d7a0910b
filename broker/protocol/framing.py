"""Sans-I/O splitting of a byte stream into Kafka frames.

Stream layout::

    +----------------+------------------+----------------+------------------+---
    | size: int32 BE | frame (size B)   | size: int32 BE | frame (size B)   | ...
    +----------------+------------------+----------------+------------------+---

``FrameReader.feed(data)`` accepts whatever the socket returned;
``FrameReader.next_frame()`` returns the next complete frame WITHOUT its size
prefix, or ``None`` if none is complete yet.

A large frame is received in place: once its size is known and at least
``direct_min`` of its bytes are still to come, ``direct_buffer()`` hands out the
unfilled rest of the frame's own buffer for the caller to receive into
(``socket.recv_into``), and ``direct_received(n)`` says how many bytes landed there::

    buf = reader.direct_buffer()
    if buf is not None:
        reader.direct_received(sock.recv_into(buf))     # (0 is the end of the stream)
    else:
        reader.feed(sock.recv(reader.read_size(RECV_SIZE)))

Invariants:

* Returned frames are writable buffers (a ``bytearray``, or a ``memoryview`` of one)
  that the reader never touches again, so the broker may patch records in place
  and keep them as long as it likes.
* Copies: the bytes of all frames that arrive complete within one ``feed`` call are
  copied once, together, into a new ``bytearray`` of which the frames are
  ``memoryview`` slices.  A frame split across ``feed`` calls is accumulated in its
  own ``bytearray``: each byte ``feed`` gets is copied once.  Bytes received through
  ``direct_buffer()`` are not copied at all: the frame returned is the very
  ``bytearray`` that buffer is a view of.  ``feed`` never retains a reference to
  ``data``, so the caller may reuse its receive buffer.
* Memory: a frame with fewer than ``direct_min`` bytes still to come grows by
  appending, so memory is committed as data arrives.  A larger one is allocated whole
  when its size is known (up to ``max_frame_size``), without being zeroed, as Kafka
  allocates a request's buffer: a fresh mapping's pages are still committed only as
  bytes arrive, and the frame is returned only once every byte of it was received (its
  uninitialised bytes are never seen).
  Where the allocation fails (MemoryError), the frame grows by appending instead.
* ``read_size(limit)``, the size of the next read for ``feed``: ``limit``, or
  ``SMALL_READ`` right after a frame that was received in place, so that a stream of
  large frames has only each frame's size and first few bytes copied by ``feed``.
* A size below 0 raises ``InvalidFrame``; above ``max_frame_size`` raises
  ``FrameTooLarge`` (both ``ValueError``; the message contains the size).  The
  error is raised by ``next_frame`` once the frames before the bad size have been
  returned; from then on the reader is poisoned: ``next_frame`` raises the same
  error again and ``feed`` discards its input (the connection must be closed, as
  the stream cannot be resynchronised).
* A zero-size frame is returned as an empty buffer (decoding it will fail).
* No I/O, no threads; not thread-safe.
"""

from __future__ import annotations

import struct as _struct
from collections import deque
from collections.abc import Iterator

from broker._native.buffer import uninitialized_bytearray as _alloc

__all__ = ["FrameReader", "InvalidFrame", "FrameTooLarge", "DEFAULT_MAX_FRAME_SIZE", "DIRECT_MIN", "SMALL_READ"]

#: Kafka's default socket.request.max.bytes.
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024
#: A frame with at least this many bytes still to come is received in place: below it,
#: copying the rest costs less than the extra read (a loop turn and a syscall) that
#: receiving a frame's tail on its own takes.
DIRECT_MIN = 64 * 1024
#: The read after a frame received in place: the next frame's size and first bytes.
SMALL_READ = 4096

_unpack_size = _struct.Struct(">i").unpack_from


class InvalidFrame(ValueError):
    """The stream announced an invalid frame size (negative)."""

    def __init__(self, message: str, size: int) -> None:
        super().__init__(message)
        self.size = size


class FrameTooLarge(InvalidFrame):
    """The stream announced a frame larger than ``max_frame_size``."""


class FrameReader:
    """Accumulates stream bytes and yields complete frames (see module docstring)."""

    __slots__ = (
        "max_frame_size",
        "direct_min",
        "_ready",
        "_partial",
        "_partial_size",
        "_filled",
        "_in_place",
        "_after_large",
        "_prefix",
        "_error",
    )

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE, direct_min: int = DIRECT_MIN) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        self.max_frame_size = max_frame_size
        self.direct_min = direct_min
        self._ready: deque[bytes | bytearray | memoryview] = deque()  # complete frames not yet returned
        self._partial: bytearray | None = None  # body of a frame whose size is known
        self._partial_size = 0
        self._filled = 0  # bytes of _partial received so far
        self._in_place = False  # _partial is allocated whole (else it grows by appending)
        self._after_large = False  # the last frame completed was received in place
        self._prefix = bytearray()  # 0-3 bytes of a size prefix
        self._error: InvalidFrame | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for frames not yet returned (complete or partial)."""
        n = len(self._prefix) + (self._filled if self._partial is not None else 0)
        for f in self._ready:
            n += len(f)
        return n

    @property
    def reserved(self) -> int:
        """The size of the frame being received (its whole size, as announced, however
        little of it arrived yet); 0 between frames. What a memory bound counts for it
        (Kafka's MemoryPool reserves a request's buffer when its size is read)."""
        return self._partial_size if self._partial is not None else 0

    @property
    def in_frame(self) -> bool:
        """Part of a frame (or of its size) has arrived and the rest has not."""
        return self._partial is not None or bool(self._prefix)

    def _check(self, size: int) -> bool:
        if size < 0:
            self._error = InvalidFrame(f"invalid frame size {size} (negative)", size)
        elif size > self.max_frame_size:
            self._error = FrameTooLarge(f"frame size {size} exceeds the maximum of {self.max_frame_size} bytes", size)
        else:
            return True
        self._partial = None
        self._in_place = False
        self._prefix = bytearray()
        return False

    def _start(self, size: int, head: memoryview) -> None:
        """A frame of `size` bytes (checked) of which `head` arrived, fewer than `size`."""
        have = len(head)
        self._partial_size = size
        self._filled = have
        if size - have >= self.direct_min:
            try:
                body = _alloc(size)
            except MemoryError:
                pass
            else:
                body[:have] = head
                self._partial = body
                self._in_place = True
                return
        self._partial = bytearray(head)
        self._in_place = False

    def _complete(self, frame: bytearray) -> None:
        self._ready.append(frame)
        self._after_large = self._in_place
        self._partial = None
        self._in_place = False

    def direct_buffer(self) -> memoryview | None:
        """Where the next bytes of the stream go without a copy: a writable view of the
        unfilled rest of the frame being received, when it is allocated whole (a frame of
        which at least ``direct_min`` bytes were still to come when its size was known);
        ``None`` otherwise (then read into any buffer and ``feed`` it). Receive at most
        ``len()`` of it, then call ``direct_received``."""
        if self._in_place:
            assert self._partial is not None
            return memoryview(self._partial)[self._filled : self._partial_size]
        return None

    def direct_received(self, nbytes: int) -> None:
        """`nbytes` of the stream were written at the start of ``direct_buffer()``'s view;
        the frame is returned by ``next_frame`` once it is complete."""
        partial = self._partial
        if not self._in_place or partial is None:
            raise RuntimeError("no frame is being received in place")
        filled = self._filled + nbytes
        if nbytes < 0 or filled > self._partial_size:
            raise ValueError(f"{nbytes} bytes received into a buffer of {self._partial_size - self._filled}")
        self._filled = filled
        if filled == self._partial_size:
            self._complete(partial)

    def read_size(self, limit: int) -> int:
        """How many bytes to read for ``feed`` next: `limit`, or ``SMALL_READ`` (at most
        `limit`) right after a frame received in place, as the next is likely as large:
        a small read gets its size and the rest can go in place."""
        return min(SMALL_READ, limit) if self._after_large else limit

    def feed(self, data: bytes | bytearray | memoryview) -> None:
        """Add bytes received from the stream (any bytes-like object)."""
        if self._error is not None:
            return
        mv = memoryview(data)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        n = len(mv)
        i = 0
        ready = self._ready
        # 1. complete a frame whose size is already known
        partial = self._partial
        if partial is not None:
            filled = self._filled
            need = self._partial_size - filled
            take = need if n >= need else n
            if self._in_place:
                partial[filled : filled + take] = mv[:take]
            else:
                partial += mv[:take]
            if take < need:
                self._filled = filled + take
                return
            self._complete(partial)
            i = need
        # 2. complete a size prefix split across feeds
        prefix = self._prefix
        if prefix:
            take = min(4 - len(prefix), n - i)
            prefix += mv[i : i + take]
            i += take
            if len(prefix) < 4:
                return
            size = _unpack_size(prefix)[0]
            self._prefix = bytearray()
            if not self._check(size):
                return
            take = min(size, n - i)
            if take < size:
                self._start(size, mv[i : i + take])
                return
            ready.append(bytearray(mv[i : i + take]))
            self._after_large = False
            i += take
        # 3. whole frames: one copy of the run of complete frames, sliced
        start = i
        spans = []
        bad = False
        while n - i >= 4:
            size = _unpack_size(mv, i)[0]
            if size < 0 or size > self.max_frame_size:
                bad = True
                break
            if n - i - 4 < size:
                break
            spans.append((i + 4 - start, size))
            i += 4 + size
        if spans:
            block = memoryview(bytearray(mv[start:i]))
            for off, size in spans:
                ready.append(block[off : off + size])
            self._after_large = False
        if bad:
            self._check(_unpack_size(mv, i)[0])
            return
        # 4. the tail: a partial frame or a partial size prefix
        rest = n - i
        if rest >= 4:
            self._start(_unpack_size(mv, i)[0], mv[i + 4 : n])
        elif rest:
            self._prefix = bytearray(mv[i:n])

    def next_frame(self) -> bytes | bytearray | memoryview | None:
        """The next complete frame (without size prefix) or ``None``.

        Raises ``InvalidFrame``/``FrameTooLarge`` once every frame before an invalid
        size has been returned.
        """
        if self._ready:
            return self._ready.popleft()
        if self._error is not None:
            raise self._error
        return None

    def frames(self) -> Iterator[bytes | bytearray | memoryview]:
        """Iterate over the complete frames available now."""
        while True:
            f = self.next_frame()
            if f is None:
                return
            yield f

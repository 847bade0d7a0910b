"""Sans-I/O splitting of a byte stream into Kafka frames.

Stream layout::

    +----------------+------------------+----------------+------------------+---
    | size: int32 BE | frame (size B)   | size: int32 BE | frame (size B)   | ...
    +----------------+------------------+----------------+------------------+---

``FrameReader.feed(data)`` accepts whatever the socket returned;
``FrameReader.next_frame()`` returns the next complete frame WITHOUT its size
prefix, or ``None`` if none is complete yet.

Invariants:

* Returned frames are writable buffers (a ``bytearray``, or a ``memoryview`` of one)
  that the reader never touches again, so the broker may patch records in place
  and keep them as long as it likes.
* Copies: the bytes of all frames that arrive complete within one ``feed`` call are
  copied once, together, into a new ``bytearray`` of which the frames are
  ``memoryview`` slices.  A frame split across ``feed`` calls is accumulated in its
  own ``bytearray`` (each byte copied once; the bytearray grows by appending, so
  memory is committed only as data arrives rather than when a size is announced).
  ``feed`` never retains a reference to ``data``, so the caller may reuse its
  receive buffer.
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

__all__ = ["FrameReader", "InvalidFrame", "FrameTooLarge", "DEFAULT_MAX_FRAME_SIZE"]

#: Kafka's default socket.request.max.bytes.
DEFAULT_MAX_FRAME_SIZE = 100 * 1024 * 1024

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

    __slots__ = ("max_frame_size", "_ready", "_partial", "_partial_size", "_prefix", "_error")

    def __init__(self, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        if max_frame_size < 0:
            raise ValueError("max_frame_size must be >= 0")
        self.max_frame_size = max_frame_size
        self._ready: deque[bytes | bytearray | memoryview] = deque()           # complete frames not yet returned
        self._partial: bytearray | None = None  # body of a frame whose size is known
        self._partial_size = 0
        self._prefix = bytearray()             # 0-3 bytes of a size prefix
        self._error: InvalidFrame | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for frames not yet returned (complete or partial)."""
        n = len(self._prefix) + (len(self._partial) if self._partial is not None else 0)
        for f in self._ready:
            n += len(f)
        return n

    def _check(self, size: int) -> bool:
        if size < 0:
            self._error = InvalidFrame(f"invalid frame size {size} (negative)", size)
        elif size > self.max_frame_size:
            self._error = FrameTooLarge(
                f"frame size {size} exceeds the maximum of {self.max_frame_size} bytes", size)
        else:
            return True
        self._partial = None
        self._prefix = bytearray()
        return False

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
            need = self._partial_size - len(partial)
            if n < need:
                partial += mv
                return
            partial += mv[:need]
            ready.append(partial)
            self._partial = None
            i = need
        # 2. complete a size prefix split across feeds
        prefix = self._prefix
        if prefix:
            take = min(4 - len(prefix), n - i)
            prefix += mv[i:i + take]
            i += take
            if len(prefix) < 4:
                return
            size = _unpack_size(prefix)[0]
            self._prefix = bytearray()
            if not self._check(size):
                return
            take = min(size, n - i)
            body = bytearray(mv[i:i + take])
            i += take
            if take == size:
                ready.append(body)
            else:
                self._partial = body
                self._partial_size = size
                return
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
                ready.append(block[off:off + size])
        if bad:
            self._check(_unpack_size(mv, i)[0])
            return
        # 4. the tail: a partial frame or a partial size prefix
        rest = n - i
        if rest >= 4:
            size = _unpack_size(mv, i)[0]
            self._partial = bytearray(mv[i + 4:n])
            self._partial_size = size
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

"""FrameReader: splitting at every byte boundary, many frames per feed, bad sizes, copies;
large frames received in place (direct_buffer)."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol import framing
from broker.protocol.framing import DIRECT_MIN, SMALL_READ, FrameReader, FrameTooLarge, InvalidFrame

PAYLOADS = [b"", b"a", b"hello world", bytes(range(256)) * 3, b"\x00\x00\x00\x05", b"x" * 70]


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


STREAM = b"".join(frame(p) for p in PAYLOADS)


def drain(reader: FrameReader) -> list:
    return [bytes(f) for f in reader.frames()]


def test_many_frames_in_one_feed_share_one_copy():
    r = FrameReader()
    data = bytearray(STREAM)
    r.feed(data)
    frames = []
    while (f := r.next_frame()) is not None:
        frames.append(f)
    assert [bytes(f) for f in frames] == PAYLOADS
    # one copy: every frame is a view of the same new bytearray ...
    owners = {id(f.obj) for f in frames if isinstance(f, memoryview)}
    assert len(owners) == 1 and all(isinstance(f, memoryview) for f in frames)
    assert isinstance(frames[0].obj, bytearray) and frames[0].obj is not data
    # ... that the reader does not share with the caller's buffer
    data[:] = b"\xff" * len(data)
    assert [bytes(f) for f in frames] == PAYLOADS
    assert r.buffered == 0


def test_frames_are_writable():
    r = FrameReader()
    r.feed(STREAM[:30])
    r.feed(STREAM[30:])
    for f in r.frames():
        if len(f):
            f[0] = 0x42  # bytearray or writable memoryview
            assert f[0] == 0x42


def test_split_at_every_byte_boundary():
    for i in range(len(STREAM) + 1):
        r = FrameReader()
        r.feed(STREAM[:i])
        got = drain(r)
        r.feed(STREAM[i:])
        got += drain(r)
        assert got == PAYLOADS, i


def test_split_at_every_pair_of_boundaries():
    s = b"".join(frame(p) for p in [b"ab", b"", b"cdefg"])
    for i in range(len(s) + 1):
        for j in range(i, len(s) + 1):
            r = FrameReader()
            got = []
            for part in (s[:i], s[i:j], s[j:]):
                r.feed(part)
                got += drain(r)
            assert got == [b"ab", b"", b"cdefg"], (i, j)


def test_one_byte_at_a_time():
    r = FrameReader()
    got = []
    for b in STREAM:
        r.feed(bytes([b]))
        got += drain(r)
    assert got == PAYLOADS
    assert r.buffered == 0


def test_feed_without_draining_keeps_order_and_counts_buffered_bytes():
    r = FrameReader()
    for i in range(0, len(STREAM), 7):
        r.feed(memoryview(STREAM)[i : i + 7])
    assert r.buffered == sum(len(p) for p in PAYLOADS)
    assert drain(r) == PAYLOADS


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=40), max_size=8), st.lists(st.integers(0, 400), max_size=10))
def test_random_chunking(payloads, cuts):
    s = b"".join(frame(p) for p in payloads)
    points = sorted({c % (len(s) + 1) for c in cuts})
    r = FrameReader(max_frame_size=40)
    got = []
    prev = 0
    for p in points + [len(s)]:
        r.feed(s[prev:p])
        prev = p
        got += drain(r)
    assert got == payloads


def test_max_frame_size_boundary():
    r = FrameReader(max_frame_size=5)
    r.feed(frame(b"12345"))
    assert bytes(r.next_frame()) == b"12345"
    r.feed(frame(b"123456"))
    with pytest.raises(FrameTooLarge, match="6"):
        r.next_frame()


@pytest.mark.parametrize("split", [False, True])
def test_oversize_frame_after_good_frames(split):
    r = FrameReader(max_frame_size=1000)
    data = frame(b"ok") + struct.pack(">i", 1_000_000) + b"junk"
    if split:
        for b in data:
            r.feed(bytes([b]))
    else:
        r.feed(data)
    assert bytes(r.next_frame()) == b"ok"
    with pytest.raises(FrameTooLarge) as info:
        r.next_frame()
    assert "1000000" in str(info.value) and info.value.size == 1_000_000
    assert isinstance(info.value, ValueError) and isinstance(info.value, InvalidFrame)
    # poisoned: the stream cannot be resynchronised
    r.feed(frame(b"more"))
    with pytest.raises(FrameTooLarge):
        r.next_frame()


@pytest.mark.parametrize("size", [-1, -2147483648])
def test_negative_size(size):
    r = FrameReader()
    r.feed(struct.pack(">i", size))
    with pytest.raises(InvalidFrame, match=str(size)) as info:
        r.next_frame()
    assert not isinstance(info.value, FrameTooLarge) and isinstance(info.value, ValueError)


def test_negative_size_split_prefix():
    r = FrameReader()
    r.feed(b"\xff\xff")
    assert r.next_frame() is None
    r.feed(b"\xff\xfe")
    with pytest.raises(InvalidFrame, match="-2"):
        r.next_frame()


def test_large_split_frame_is_accumulated_in_its_own_bytearray():
    payload = bytes(range(256)) * 4096  # 1 MiB
    s = frame(payload)
    r = FrameReader()
    chunk = 65536
    for i in range(0, len(s), chunk):
        r.feed(s[i : i + chunk])
    f = r.next_frame()
    assert isinstance(f, bytearray) and f == payload
    assert r.next_frame() is None


def test_accepts_non_byte_memoryviews():
    r = FrameReader()
    data = frame(b"abcd")
    r.feed(memoryview(bytearray(data)).cast("I"))
    assert bytes(r.next_frame()) == b"abcd"


# ------------------------------------------------------------------ frames received in place

LARGE = 4 * DIRECT_MIN


def receive(reader: FrameReader, stream: bytes, pos: int, piece: int = 1 << 30) -> int:
    """What a connection does with recv_into: writes the stream's next bytes into the
    reader's direct buffer, `piece` bytes at a time, while it hands one out."""
    while (buf := reader.direct_buffer()) is not None:
        n = min(len(buf), piece, len(stream) - pos)
        if not n:
            break
        buf[:n] = stream[pos : pos + n]
        reader.direct_received(n)
        pos += n
    return pos


def test_a_large_frame_lands_in_the_buffer_that_is_returned():
    payload = bytes(range(256)) * (LARGE // 256)
    s = frame(payload)
    r = FrameReader()
    r.feed(s[:100])  # the size and the first 96 bytes
    assert r.next_frame() is None
    buf = r.direct_buffer()
    assert buf is not None and len(buf) == LARGE - 96 and not buf.readonly
    owner = buf.obj
    del buf
    assert receive(r, s, 100, piece=50_000) == len(s)
    f = r.next_frame()
    # no intermediate copy: the bytes received went into the frame itself
    assert f is owner and isinstance(f, bytearray) and f == payload
    assert r.next_frame() is None and r.direct_buffer() is None and r.buffered == 0


def test_size_prefix_split_across_reads_then_the_body_in_place():
    payload = b"\x5a" * LARGE
    s = frame(payload)
    r = FrameReader()
    for i in range(4):
        assert r.direct_buffer() is None
        r.feed(s[i : i + 1])
    buf = r.direct_buffer()  # the size is known: the whole body goes in place
    assert buf is not None and len(buf) == LARGE
    assert receive(r, s, 4, piece=7919) == len(s)
    assert r.next_frame() == payload


def test_a_large_frame_in_many_pieces_fed_and_received_in_place_alike():
    payload = bytes(range(251)) * 1000
    s = frame(payload) + frame(b"small") + frame(payload[::-1])
    r = FrameReader()
    pos = 0
    step = 0
    while pos < len(s):
        step += 1
        if step % 3 == 0 and r.direct_buffer() is not None:
            pos = receive(r, s, pos, piece=3001)
        else:
            r.feed(s[pos : pos + 997])  # feed() fills a frame allocated whole as well
            pos += 997
    assert drain(r) == [payload, b"small", payload[::-1]]
    assert r.buffered == 0


def test_many_frames_in_one_read_after_a_frame_received_in_place():
    big = b"B" * LARGE
    small = [b"a", b"", b"bc" * 100]
    s = frame(big) + b"".join(frame(p) for p in small)
    r = FrameReader()
    assert r.read_size(1 << 18) == 1 << 18
    r.feed(s[:10])
    pos = receive(r, s, 10)
    assert pos == 4 + LARGE
    # right after a large frame the next read is small: the next frame's size, then in place
    assert r.read_size(1 << 18) == SMALL_READ and r.read_size(100) == 100
    r.feed(s[pos:])
    frames = drain(r)
    assert frames == [big] + small
    assert r.read_size(1 << 18) == 1 << 18  # small frames again: full reads


def test_an_oversize_frame_behind_one_received_in_place_is_refused_as_before():
    r = FrameReader(max_frame_size=LARGE)
    s = frame(b"x" * LARGE) + struct.pack(">i", LARGE + 1) + b"junk"
    r.feed(s[:4])
    pos = receive(r, s, 4)
    assert bytes(r.next_frame()) == b"x" * LARGE
    r.feed(s[pos:])
    with pytest.raises(FrameTooLarge) as info:
        r.next_frame()
    assert str(info.value) == f"frame size {LARGE + 1} exceeds the maximum of {LARGE} bytes"
    assert info.value.size == LARGE + 1 and r.direct_buffer() is None
    r.feed(frame(b"more"))  # poisoned as before
    with pytest.raises(FrameTooLarge):
        r.next_frame()


def test_the_end_of_the_stream_inside_a_frame_received_in_place():
    s = frame(b"y" * LARGE)
    r = FrameReader()
    r.feed(s[:1000])
    receive(r, s[: LARGE // 2], 1000)  # the peer is gone half way
    assert r.next_frame() is None
    assert r.buffered == LARGE // 2 - 4  # what came, not what was announced
    assert len(r.direct_buffer()) == LARGE - (LARGE // 2 - 4)


def test_a_frame_with_little_left_to_come_grows_by_appending():
    payload = b"z" * (DIRECT_MIN + 100)
    s = frame(payload)
    r = FrameReader()
    r.feed(s[:200])  # DIRECT_MIN - 96 still to come: not worth a read of its own
    assert r.direct_buffer() is None
    r.feed(s[200:])
    assert r.next_frame() == payload
    r = FrameReader(direct_min=10)
    r.feed(s[:200])
    assert r.direct_buffer() is not None


def test_when_the_whole_frame_cannot_be_allocated_it_grows_by_appending(monkeypatch):
    def refuse(size):
        raise MemoryError

    monkeypatch.setattr(framing, "_alloc", refuse)
    payload = b"m" * LARGE
    s = frame(payload)
    r = FrameReader()
    for i in range(0, len(s), 65536):
        r.feed(s[i : i + 65536])
        assert r.direct_buffer() is None
    assert r.next_frame() == payload


def test_direct_received_refuses_what_it_cannot_account_for():
    r = FrameReader()
    with pytest.raises(RuntimeError):
        r.direct_received(1)
    r.feed(frame(b"q" * LARGE)[:4])
    with pytest.raises(ValueError):
        r.direct_received(LARGE + 1)
    with pytest.raises(ValueError):
        r.direct_received(-1)
    r.direct_received(0)
    assert r.buffered == 0 and len(r.direct_buffer()) == LARGE


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.binary(max_size=120), max_size=8), st.lists(st.tuples(st.booleans(), st.integers(1, 150)), max_size=40)
)
def test_random_reads_into_the_direct_buffer_or_fed(payloads, steps):
    s = b"".join(frame(p) for p in payloads)
    r = FrameReader(max_frame_size=120, direct_min=16)
    got = []
    pos = 0
    for in_place, n in steps + [(False, len(s))] * 2:
        buf = r.direct_buffer()
        if in_place and buf is not None:
            n = min(n, len(buf), len(s) - pos)
            buf[:n] = s[pos : pos + n]
            r.direct_received(n)
        else:
            n = min(n, len(s) - pos)
            r.feed(s[pos : pos + n])
        pos += n
        got += drain(r)
    assert pos == len(s) and got == payloads and r.buffered == 0

"""FrameReader: splitting at every byte boundary, many frames per feed, bad sizes, copies."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.protocol.framing import FrameReader, FrameTooLarge, InvalidFrame

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
        r.feed(memoryview(STREAM)[i:i + 7])
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
        r.feed(s[i:i + chunk])
    f = r.next_frame()
    assert isinstance(f, bytearray) and f == payload
    assert r.next_frame() is None


def test_accepts_non_byte_memoryviews():
    r = FrameReader()
    data = frame(b"abcd")
    r.feed(memoryview(bytearray(data)).cast("I"))
    assert bytes(r.next_frame()) == b"abcd"

"""Connection's request ordering, on a real socket pair with a fake dispatcher: Produce
requests behind a waiting Produce are handled at once (bounded) unless it waits on its
transaction's coordinator, anything else waits for what is in flight, and answers always go out in request order. And its reading: a large
request received in place (no copy between the socket and the frame handed to dispatch),
a frame over the maximum refused, the peer gone in the middle of a frame."""

from __future__ import annotations

import asyncio
import os
import socket
import struct

import pytest

from broker.protocol.framing import SMALL_READ, FrameReader
from broker.server import connection as connection_mod
from broker.server.connection import MAX_INFLIGHT_PRODUCE, RECV_SIZE, Connection
from broker.server.connection_state import Hold

PRODUCE, FETCH, METADATA = 0, 1, 3


class FakeServer:
    """What Connection uses of the server: the loop, a config, dispatch, and the close
    notification. dispatch answers each frame according to `plan`: a future (the
    request waits until the test resolves it) or an immediate answer."""

    def __init__(self, loop):
        self.loop = loop
        self.services = type("B", (), {"config": {"socket.request.max.bytes": 1 << 20}})()
        self.max_queued_bytes_per_connection = 4 << 20
        self.request_memory = None
        self.established = []
        self.dispatched: list[bytes] = []
        self.waiting: dict[bytes, asyncio.Future] = {}
        self.closed = []
        self.bad_requests: list[str] = []

    def dispatch(self, conn, frame):
        frame = bytes(frame)
        self.dispatched.append(frame)
        tag = frame[2:]
        if tag.startswith(b"wait"):
            fut = self.loop.create_future()
            self.waiting[tag] = fut
            return fut
        if tag.startswith(b"hold"):  # a Produce waiting on its transaction's coordinator
            fut = self.waiting[tag] = self.loop.create_future()
            conn.hold_produces()

            async def verified():
                try:
                    return await fut
                finally:
                    conn.release_produces()

            return verified()
        return [b"ans:" + tag + b";"]

    def connection_closed(self, conn):
        self.closed.append(conn)

    def connection_established(self, conn):
        self.established.append(conn)

    def log_bad_request(self, level, msg, *args):
        self.bad_requests.append(msg % args)


def frame(api_key: int, tag: bytes) -> bytes:
    body = struct.pack(">h", api_key) + tag
    return struct.pack(">i", len(body)) + body


async def _until(pred, timeout=5.0):
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not pred():
        assert loop.time() < end, "condition not reached"
        await asyncio.sleep(0.001)


class Harness:
    def __init__(self):
        self.loop = asyncio.get_running_loop()
        self.server = FakeServer(self.loop)
        a, self.peer = socket.socketpair()
        self.peer.setblocking(False)
        self.conn = Connection(self.server, a, "test")
        self.received = b""

    async def send(self, *frames):
        self.peer.sendall(b"".join(frames))
        await asyncio.sleep(0.02)

    async def read_until(self, expected: bytes):
        def got():
            try:
                self.received += self.peer.recv(65536)
            except BlockingIOError:
                pass
            return len(self.received) >= len(expected)

        await _until(got)
        assert self.received == expected
        self.received = b""

    def tags(self):
        return [f[2:] for f in self.server.dispatched]

    def close(self):
        self.conn.close()
        self.peer.close()


def run(coro_fn):
    async def main():
        h = Harness()
        try:
            await coro_fn(h)
        finally:
            h.close()

    asyncio.run(main())


def test_produce_behind_a_waiting_produce_is_handled_at_once_and_answered_in_order():
    async def body(h: Harness):
        await h.send(frame(PRODUCE, b"wait1"), frame(PRODUCE, b"wait2"), frame(PRODUCE, b"now3"))
        assert h.tags() == [b"wait1", b"wait2", b"now3"]  # all appended, none answered
        h.server.waiting[b"wait2"].set_result([b"ans:wait2;"])
        await asyncio.sleep(0.02)
        with pytest.raises(BlockingIOError):
            h.peer.recv(100)  # wait1 still holds the answers back
        h.server.waiting[b"wait1"].set_result([b"ans:wait1;"])
        await h.read_until(b"ans:wait1;ans:wait2;ans:now3;")
        assert h.conn.idle

    run(body)


def test_produces_behind_one_waiting_on_its_transaction_coordinator_wait_for_its_answer():
    """A Produce whose transactional batch waits for the coordinator's verification holds
    the Produces behind it (they may need the transaction it opens); a Produce waiting
    for the ISR does not."""

    async def body(h: Harness):
        await h.send(
            frame(PRODUCE, b"wait1"), frame(PRODUCE, b"hold2"), frame(PRODUCE, b"now3"), frame(PRODUCE, b"now4")
        )
        assert h.tags() == [b"wait1", b"hold2"]
        h.server.waiting[b"hold2"].set_result([b"ans:hold2;"])
        await asyncio.sleep(0.02)
        assert h.tags() == [b"wait1", b"hold2", b"now3", b"now4"]
        h.server.waiting[b"wait1"].set_result([b"ans:wait1;"])
        await h.read_until(b"ans:wait1;ans:hold2;ans:now3;ans:now4;")
        assert h.conn.idle

    run(body)


def test_other_requests_wait_for_the_produces_in_flight():
    async def body(h: Harness):
        await h.send(frame(PRODUCE, b"wait1"), frame(METADATA, b"meta"), frame(PRODUCE, b"now2"))
        assert h.tags() == [b"wait1"]
        h.server.waiting[b"wait1"].set_result([b"ans:wait1;"])
        await h.read_until(b"ans:wait1;ans:meta;ans:now2;")
        assert h.tags() == [b"wait1", b"meta", b"now2"]

    run(body)


def test_produce_waits_behind_another_kind_of_waiting_request():
    async def body(h: Harness):
        await h.send(frame(FETCH, b"wait-fetch"), frame(PRODUCE, b"now1"))
        assert h.tags() == [b"wait-fetch"]
        h.server.waiting[b"wait-fetch"].set_result([b"ans:fetch;"])
        await h.read_until(b"ans:fetch;ans:now1;")

    run(body)


def test_produces_in_flight_are_bounded():
    async def body(h: Harness):
        n = MAX_INFLIGHT_PRODUCE + 3
        await h.send(*(frame(PRODUCE, b"wait%02d" % i) for i in range(n)))
        assert len(h.tags()) == MAX_INFLIGHT_PRODUCE
        for i in range(n):
            await _until(lambda i=i: b"wait%02d" % i in h.server.waiting)
            h.server.waiting[b"wait%02d" % i].set_result([b"ans:%02d;" % i])
        await h.read_until(b"".join(b"ans:%02d;" % i for i in range(n)))
        assert len(h.tags()) == n

    run(body)


def test_a_failed_wait_closes_the_connection_and_nothing_behind_it_is_answered():
    async def body(h: Harness):
        await h.send(frame(PRODUCE, b"wait1"), frame(PRODUCE, b"now2"))
        h.server.waiting[b"wait1"].set_exception(RuntimeError("boom"))
        await _until(lambda: h.conn.closed)
        assert h.server.closed == [h.conn]
        data = h.peer.recv(100)
        assert data == b""  # closed without an answer
        assert not h.conn.inflight

    run(body)


def test_close_cancels_the_requests_in_flight():
    async def body(h: Harness):
        await h.send(frame(PRODUCE, b"wait1"), frame(PRODUCE, b"wait2"))
        tasks = h.conn.waiting_tasks()
        assert len(tasks) == 2
        h.conn.close()
        await asyncio.gather(*tasks, return_exceptions=True)
        assert all(t.done() for t in tasks)
        assert h.server.waiting[b"wait1"].cancelled()

    run(body)


def test_api_key_of_a_short_frame_is_not_produce():
    assert connection_mod._api_key(b"\x00") == -1
    assert connection_mod._api_key(b"\x00\x00") == PRODUCE


def test_a_muted_connection_handles_nothing_until_its_throttle_ends():
    """A quota's throttle (Connection.mute): the answer already queued goes out, the
    requests behind it — pipelined or sent later — wait until the throttle time is over."""

    async def body(h: Harness):
        dispatch = h.server.dispatch

        def throttling(conn, f):
            out = dispatch(conn, f)
            if bytes(f)[2:] == b"first":
                conn.mute(0.3)
            return out

        h.server.dispatch = throttling
        started = h.loop.time()
        await h.send(frame(METADATA, b"first"), frame(METADATA, b"second"))
        await h.read_until(b"ans:first;")
        assert h.tags() == [b"first"] and h.conn.muted
        await h.send(frame(METADATA, b"third"))
        assert h.tags() == [b"first"]
        await h.read_until(b"ans:second;ans:third;")
        assert h.loop.time() - started >= 0.29 and not h.conn.muted
        # a second throttle while muted ends at the later time, never earlier
        h.conn.mute(0.2)
        h.conn.mute(0.05)
        end = h.conn._muted_until
        assert end >= h.loop.time() + 0.15

    run(body)


# ------------------------------------------------------------------ reading


class ReadSpy:
    """What the connection's FrameReader copied (bytes through feed) and which buffers
    it handed out to receive into."""

    def __init__(self, monkeypatch):
        self.fed = 0
        self.owners: list[bytearray] = []
        feed, direct_buffer = FrameReader.feed, FrameReader.direct_buffer

        def spy_feed(reader, data):
            self.fed += len(memoryview(data).cast("B"))
            feed(reader, data)

        def spy_direct_buffer(reader):
            buf = direct_buffer(reader)
            if buf is not None and not any(buf.obj is o for o in self.owners):
                self.owners.append(buf.obj)
            return buf

        monkeypatch.setattr(FrameReader, "feed", spy_feed)
        monkeypatch.setattr(FrameReader, "direct_buffer", spy_direct_buffer)


def test_large_requests_are_received_in_place_and_dispatched_as_received(monkeypatch):
    spy = ReadSpy(monkeypatch)
    big = [frame(PRODUCE, bytes([i]) * 700_000) for i in range(3)]
    small = [frame(METADATA, b"m%d" % i) for i in range(5)]

    async def body(h: Harness):
        got = []
        h.server.dispatch = lambda conn, f: got.append(f)  # acks=0: no answer
        await h.loop.sock_sendall(h.peer, b"".join(big[:1] + small[:2] + big[1:] + small[2:]))
        await _until(lambda: len(got) == 8)
        assert [bytes(f) for f in got] == [f[4:] for f in big[:1] + small[:2] + big[1:] + small[2:]]
        large = [f for f in got if len(f) > 1000]
        # the frame dispatched is the buffer the socket wrote into: nothing copied it
        assert len(spy.owners) == 3 and all(f is o for f, o in zip(large, spy.owners))
        # what went through the copying path: small frames and the large ones' first bytes
        # (the first large frame's from a full read; the ones after a large frame, a small read)
        assert spy.fed <= RECV_SIZE + 2 * SMALL_READ + sum(map(len, small))
        assert not h.conn.closed

    run(body)


def test_the_peer_gone_in_the_middle_of_a_large_request():
    async def body(h: Harness):
        got = []
        h.server.dispatch = lambda conn, f: got.append(f)
        data = frame(PRODUCE, b"p" * 500_000)
        await h.loop.sock_sendall(h.peer, frame(METADATA, b"first") + data[:300_000])
        await _until(lambda: got and h.conn.frames.buffered > 0)
        assert h.conn.frames.direct_buffer() is not None  # the rest was to go in place
        h.peer.shutdown(socket.SHUT_WR)
        await _until(lambda: h.conn.closed)
        assert [bytes(f) for f in got] == [b"\x00\x03first"] and h.server.closed == [h.conn]

    run(body)


@pytest.mark.parametrize("after_large", [False, True])
def test_a_frame_over_the_maximum_closes_the_connection(after_large):
    async def body(h: Harness):
        got = []
        h.server.dispatch = lambda conn, f: got.append(f)
        first = frame(PRODUCE, os.urandom(600_000)) if after_large else frame(METADATA, b"ok")
        too_big = struct.pack(">i", (1 << 20) + 1) + b"\x00" * 1000
        await h.loop.sock_sendall(h.peer, first + too_big)
        await _until(lambda: h.conn.closed)
        # a large frame completes in a read of its own and is handled; a small one read
        # together with the bad size goes with the connection (as it always did)
        assert [bytes(f) for f in got] == ([first[4:]] if after_large else [])
        assert h.server.bad_requests == [
            f"{h.conn}: frame size {(1 << 20) + 1} exceeds the maximum of {1 << 20} bytes; closing the connection"
        ]

    run(body)


def test_the_rest_of_a_large_request_already_there_is_read_in_the_same_wake_up(monkeypatch):
    """After a large request the next read is small (its size and first bytes); the rest
    of a large request already in the socket is read in place by the same _recv call,
    not after another turn of the event loop."""
    calls = []
    recv = Connection._recv

    def spy(conn):
        n = recv(conn)
        calls.append(n)
        return n

    monkeypatch.setattr(Connection, "_recv", spy)
    first, second = frame(PRODUCE, b"a" * 600_000), frame(PRODUCE, b"b" * 120_000)

    async def body(h: Harness):
        got = []
        h.server.dispatch = lambda conn, f: got.append(f)
        await h.loop.sock_sendall(h.peer, first)
        await _until(lambda: len(got) == 1)
        calls.clear()
        h.peer.setblocking(True)
        h.peer.sendall(second)  # all of it in the socket before the connection reads
        await _until(lambda: len(got) == 2)
        assert bytes(got[1]) == second[4:]
        assert calls == [len(second)]  # one read: the first SMALL_READ bytes, then the rest in place

    run(body)


# ------------------------------------------------------------------ what waits behind a request in flight


def test_reading_stops_once_the_requests_behind_one_in_flight_reach_the_bound():
    """queued.max.request.bytes.per.connection: behind a long poll the connection reads
    on (small pipelined requests keep their pace) until the frames waiting behind it reach
    the bound, then reads nothing more until the long poll is answered; nothing is lost."""

    async def body(h: Harness):
        bound = 1_000_000
        h.conn.max_queued_bytes = bound
        behind = [frame(METADATA, b"m%02d" % i + b"x" * 200_000) for i in range(20)]
        await h.send(frame(FETCH, b"wait1"))
        sender = h.loop.create_task(h.loop.sock_sendall(h.peer, b"".join(behind)))
        await _until(lambda: not h.conn._reading)
        await asyncio.sleep(0.1)
        assert h.tags() == [b"wait1"] and not sender.done()
        # the bound, plus at most what one wake-up reads past it
        assert bound <= h.conn.queued_bytes < bound + RECV_SIZE + len(behind[0])
        assert h.conn.holds == Hold.BEHIND
        assert h.conn.queued_bytes == sum(map(len, h.conn.pending)) + h.conn.frames.reserved
        h.server.waiting[b"wait1"].set_result([b"ans:wait1;"])
        expected = b"ans:wait1;" + b"".join(b"ans:" + f[6:] + b";" for f in behind)
        await h.read_until(expected)
        await sender
        assert h.conn.queued_bytes == 0 and h.conn._reading

    run(body)


def test_with_a_bound_of_zero_nothing_is_read_while_a_request_is_in_flight():
    """queued.max.request.bytes.per.connection=0 is Kafka's own rule: a connection is
    muted while one of its requests is in flight."""

    async def body(h: Harness):
        h.conn.max_queued_bytes = 0
        await h.send(frame(FETCH, b"wait1"))
        await h.send(frame(METADATA, b"m1"))
        assert h.tags() == [b"wait1"] and not h.conn.pending and h.conn.frames.buffered == 0
        h.server.waiting[b"wait1"].set_result([b"ans:wait1;"])
        await h.read_until(b"ans:wait1;ans:m1;")

    run(body)


def test_small_requests_are_read_and_answered_without_a_request_in_flight():
    """The bound is about requests behind one in flight: pipelined requests answered at
    once are read whatever their total."""

    async def body(h: Harness):
        h.conn.max_queued_bytes = 1000
        many = [frame(METADATA, b"m%03d" % i + b"y" * 100) for i in range(200)]
        await h.loop.sock_sendall(h.peer, b"".join(many))
        await h.read_until(b"".join(b"ans:" + f[6:] + b";" for f in many))

    run(body)


def test_the_broker_wide_bound_stops_other_connections_between_frames():
    """queued.max.request.bytes: once the requests queued on all connections reach it, no
    connection starts another frame — one in the middle of a frame finishes it — and they
    read again as soon as handled requests free room."""

    async def body(h: Harness):
        memory = connection_mod.RequestMemory(600_000)
        h.server.request_memory = memory
        h.conn.close()
        pairs = {name: socket.socketpair() for name in "abc"}
        for _, peer in pairs.values():
            peer.setblocking(False)
        a, b, c = (Connection(h.server, pairs[name][0], name) for name in "abc")
        h.conn, h.peer = a, pairs["a"][1]
        a.max_queued_bytes = 10 << 20
        try:
            started = frame(PRODUCE, b"c" * 199_998)  # c: its size is read, then half of it
            await h.loop.sock_sendall(pairs["c"][1], started[:100_000])
            await _until(lambda: c.frames.in_frame)
            assert memory.used == 200_000
            behind = [frame(METADATA, b"a%02d" % i + b"x" * 100_000) for i in range(12)]
            await h.send(frame(FETCH, b"wait1"))
            sender = h.loop.create_task(h.loop.sock_sendall(h.peer, b"".join(behind)))
            await _until(lambda: memory.exhausted and not a._reading)
            assert Hold.MEMORY in a.holds
            await h.loop.sock_sendall(pairs["b"][1], frame(METADATA, b"b1"))
            await asyncio.sleep(0.1)
            assert b"b1" not in h.tags() and b in memory.waiting  # b starts no frame
            await h.loop.sock_sendall(pairs["c"][1], started[100_000:])
            await _until(lambda: any(f[2:3] == b"c" for f in h.server.dispatched))  # c finishes its own
            h.server.waiting[b"wait1"].set_result([b"ans:wait1;"])
            await _until(lambda: b"b1" in h.tags())
            await sender
            await _until(lambda: len(h.server.dispatched) == 1 + 1 + len(behind) + 1)
            await _until(lambda: memory.used == 0)
        finally:
            for conn in (b, c):
                conn.close()
            for name in "bc":
                pairs[name][1].close()

    run(body)


def test_bytes_of_an_unfinished_frame_do_not_make_a_connection_active():
    """connections.max.idle.ms counts from the last complete request: a client trickling
    the bytes of a frame it never completes stays idle."""

    async def body(h: Harness):
        data = frame(METADATA, b"slow")
        before = h.conn.last_active
        for i in range(len(data) - 1):
            await h.send(data[i : i + 1])
        assert h.conn.last_active == before and h.conn.idle
        await h.send(data[-1:])
        await h.read_until(b"ans:slow;")
        assert h.conn.last_active > before

    run(body)

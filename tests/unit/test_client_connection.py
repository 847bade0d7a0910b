"""BrokerConnection's reading (broker/client/connection.py), on a socket pair standing in
for the broker: a large answer received in place (the frame returned is the buffer the
socket wrote into), small answers around it, the broker gone in the middle of an answer."""

from __future__ import annotations

import socket
import struct
import threading
from collections import deque

import pytest

from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.framing import FrameReader


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def reading_connection(sock: socket.socket) -> BrokerConnection:
    """A BrokerConnection on `sock`, without connecting or negotiating."""
    conn = BrokerConnection.__new__(BrokerConnection)
    conn.host, conn.port, conn.timeout = "test", 0, 5.0
    conn.sock = sock
    conn._frames = FrameReader(1 << 24)
    conn._inflight = deque()
    conn._early = None
    return conn


def send_in_thread(sock: socket.socket, data: bytes, close: bool = False) -> threading.Thread:
    def run():
        sock.sendall(data)
        if close:
            sock.shutdown(socket.SHUT_WR)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_a_large_answer_is_received_in_place(monkeypatch):
    from tests.support.framing_spy import spy_direct_buffers

    owners = spy_direct_buffers(monkeypatch)
    a, b = socket.socketpair()
    big = bytes(range(256)) * 8192  # 2 MiB, more than a socket buffer holds
    payloads = [b"first", big, b"second", big[::-1], b"last"]
    try:
        conn = reading_connection(a)
        sender = send_in_thread(b, b"".join(frame(p) for p in payloads))
        got = [conn._read_frame(5.0) for _ in payloads]
        sender.join(5)
        assert [bytes(f) for f in got] == payloads
        assert len(owners) == 2 and got[1] is owners[0] and got[3] is owners[1]
    finally:
        a.close()
        b.close()


def test_the_broker_gone_in_the_middle_of_a_large_answer():
    a, b = socket.socketpair()
    try:
        conn = reading_connection(a)
        sender = send_in_thread(b, frame(b"x" * 500_000)[:300_000], close=True)
        with pytest.raises(ClientError, match="closed by the broker"):
            conn._read_frame(5.0)
        sender.join(5)
        assert conn.closed
    finally:
        a.close()
        b.close()

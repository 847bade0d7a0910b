"""Clients that push large requests behind a long poll of theirs: what a READ-only client
can make a broker hold (tests/interop/test_connection_limits.py, bench/connection_memory.py).
Every wait is bounded."""

from __future__ import annotations

import socket
import struct
import threading
import time

from broker.client import Cluster
from broker.protocol import codec
from broker.protocol.messages.api_versions import ApiVersionsRequest
from tests.support.broker_proc import BrokerProcess

BIG = 20 * 1024 * 1024


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def long_poll(topic: str, topic_id, correlation_id: int, max_wait_ms: int) -> bytes:
    """A Fetch that waits max_wait_ms for more bytes than will ever come."""
    from broker.protocol.messages.fetch import FetchRequest as F

    req = F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=1 << 30,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=topic_id,
                partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)],
            )
        ],
    )
    return codec.encode_request(1, 13, correlation_id, "push", req)


#: the padding of every large frame: one buffer, sent from by every pusher
_PADDING = memoryview(bytes(BIG))


def send_padded_api_versions(sock: socket.socket, correlation_id: int, size: int) -> None:
    """Sends an ApiVersions request with padding after its body up to `size` bytes
    (ignored, as by Kafka): a large frame any principal may send."""
    body = codec.encode_request(
        18, 3, correlation_id, "push", ApiVersionsRequest(client_software_name="raw", client_software_version="1")
    )[4:]
    sock.sendall(struct.pack(">i", size) + body)
    sock.sendall(_PADDING[: size - len(body)])


def read_frame(sock: socket.socket, buf: bytearray) -> bytes | None:
    """The next response frame, or None when the broker closed the connection."""
    while True:
        if len(buf) >= 4:
            size = struct.unpack_from(">i", buf)[0]
            if len(buf) >= 4 + size:
                out = bytes(buf[4 : 4 + size])
                del buf[: 4 + size]
                return out
        data = sock.recv(1 << 16)
        if not data:
            return None
        buf += data


class Pusher(threading.Thread):
    """Sends a long poll, then `count` frames of `size` bytes behind it on one
    connection; the sends block once the broker stops reading. Then reads every answer
    (their correlation ids in `answers`)."""

    def __init__(self, port: int, topic: str, topic_id, count: int, max_wait_ms: int, size: int = BIG):
        super().__init__(daemon=True)
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.poll = long_poll(topic, topic_id, 1, max_wait_ms)
        self.count, self.size = count, size
        self.answers: list[int] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.sock.sendall(self.poll)
            for i in range(self.count):
                send_padded_api_versions(self.sock, 2 + i, self.size)
            buf = bytearray()
            for _ in range(self.count + 1):
                answer = read_frame(self.sock, buf)
                assert answer is not None, "the broker closed the connection"
                self.answers.append(struct.unpack_from(">i", answer)[0])
        except BaseException as exc:  # reported by the caller
            self.error = exc

    def close(self) -> None:
        self.sock.close()


def pushed_behind_long_polls(
    broker: BrokerProcess, topic: str, connections: int, frames_each: int, max_wait_ms: int = 6000
) -> int:
    """The broker's peak RSS growth while `connections` clients each push `frames_each`
    frames of 20 MiB behind a long poll of `max_wait_ms`; checks that every request is
    then answered, in order, on its connection."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1)
        topic_id = c.topic(topic).topic_id
    time.sleep(0.5)
    before = rss_bytes(broker.pid)
    pushers = [Pusher(broker.port, topic, topic_id, frames_each, max_wait_ms) for _ in range(connections)]
    for p in pushers:
        p.start()
    peak = before
    deadline = time.monotonic() + max_wait_ms / 1000 * 0.75  # inside the long polls
    while time.monotonic() < deadline:
        peak = max(peak, rss_bytes(broker.pid))
        time.sleep(0.1)
    try:
        for p in pushers:
            p.join(120 + max_wait_ms / 1000)
            assert not p.is_alive() and p.error is None, p.error
            assert p.answers == list(range(1, frames_each + 2))
    finally:
        for p in pushers:
            p.close()
    return peak - before

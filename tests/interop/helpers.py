"""Shared helpers of the interop tests: reading a whole topic back (the project's client
and confluent-kafka), raw sockets for requests a client would refuse to send, and
record batches built by hand. Every wait is bounded."""

from __future__ import annotations

import socket
import struct
import time

from broker.client import Cluster, Consumer
from broker.native import BatchBuilder
from broker.protocol import codec
from broker.protocol.messages.api_versions import ApiVersionsRequest

DEADLINE_S = 60.0


# ---------------------------------------------------------------------- offsets


def offsets(bootstrap: str, topic: str, partitions) -> dict[int, tuple[int, int]]:
    """partition -> (log start offset, high watermark) by ListOffsets earliest / latest."""
    with Cluster(bootstrap, timeout=10) as c:
        first = c.list_offsets(topic, list(partitions), -2)
        last = c.list_offsets(topic, list(partitions), -1)
    return {p: (first[p][0], last[p][0]) for p in partitions}


# ---------------------------------------------------------------------- reading a topic


def read_all(bootstrap: str, topic: str, partitions, deadline_s: float = DEADLINE_S) -> dict:
    """Everything between the log start offset and the high watermark of each partition,
    with the project's own consumer: {(partition, offset): ConsumerRecord}."""
    ends = offsets(bootstrap, topic, partitions)
    got = {}
    with Consumer(bootstrap, max_wait_ms=100, auto_offset_reset="none") as c:
        c.assign(topic, list(partitions), {p: ends[p][0] for p in partitions})
        deadline = time.monotonic() + deadline_s
        while any(c.positions[(topic, p)] < ends[p][1] for p in partitions):
            assert time.monotonic() < deadline, f"read {len(got)} records of {topic} in {deadline_s} s"
            for r in c.poll(0.5):
                assert (r.partition, r.offset) not in got, f"offset {r.partition}/{r.offset} returned twice"
                got[(r.partition, r.offset)] = r
    return got


def confluent_read_all(bootstrap: str, topic: str, partitions, deadline_s: float = DEADLINE_S, start=None) -> list:
    """Everything up to the high watermark of each partition with confluent-kafka:
    [(partition, offset, key, value, headers)]. Starts at OFFSET_BEGINNING unless `start`
    maps partitions to offsets."""
    import confluent_kafka as ck

    ends = offsets(bootstrap, topic, partitions)
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"read-all-{topic}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "fetch.wait.max.ms": 100,
            "enable.partition.eof": True,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, p, (start or {}).get(p, ck.OFFSET_BEGINNING)) for p in partitions])
        got = []
        done = {p for p in partitions if ends[p][1] == ends[p][0]}
        deadline = time.monotonic() + deadline_s
        while len(done) < len(partitions):
            assert time.monotonic() < deadline, f"confluent read {len(got)} records of {topic} in {deadline_s} s"
            for m in c.consume(1000, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == ck.KafkaError._PARTITION_EOF:
                        if m.offset() >= ends[m.partition()][1]:
                            done.add(m.partition())
                        continue
                    raise AssertionError(f"consumer error: {err}")
                got.append((m.partition(), m.offset(), m.key(), m.value(), list(m.headers() or [])))
                if m.offset() + 1 >= ends[m.partition()][1]:
                    done.add(m.partition())
        return got
    finally:
        c.close()


# ---------------------------------------------------------------------- batches


def batch(values, keys=None, timestamp: int | None = None, compression=None) -> bytearray:
    """A valid RecordBatch v2 holding `values` (base offset 0; the broker assigns it)."""
    b = BatchBuilder(compression)
    ts = int(time.time() * 1000) if timestamp is None else timestamp
    for i, v in enumerate(values):
        b.append(ts, None if keys is None else keys[i], v, [])
    return bytearray(b.build())


def corrupt_crc(data) -> bytearray:
    """The same batch with one bit flipped in its last record (CRC-32C no longer matches)."""
    out = bytearray(data)
    out[-1] ^= 0x01
    return out


# ---------------------------------------------------------------------- raw sockets


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def raw_request(api_key: int, version: int, correlation_id: int, request, client_id: str = "raw") -> bytes:
    """A size-prefixed request frame (the codec frames any version it knows)."""
    return codec.encode_request(api_key, version, correlation_id, client_id, request)


def raw_header(api_key: int, version: int, correlation_id: int, client_id: bytes = b"raw") -> bytes:
    """A v1 request header (api key, version, correlation id, client id) with no body."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


class RawConnection:
    """A plain socket to the broker: send whatever bytes, then see whether the broker
    answers (a whole response frame) or closes the connection."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = bytearray()

    def send(self, data: bytes) -> bool:
        """False if the broker already closed the connection."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def read_frame(self, timeout: float = 10.0):
        """The next response frame (bytes, without size), or None when the broker closed
        the connection. AssertionError if neither happens within `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            if len(self.buf) >= 4:
                size = struct.unpack_from(">i", self.buf)[0]
                assert 0 <= size < 1 << 30, f"response frame size {size}"
                if len(self.buf) >= 4 + size:
                    out = bytes(self.buf[4 : 4 + size])
                    del self.buf[: 4 + size]
                    return out
            remaining = deadline - time.monotonic()
            assert remaining > 0, f"the broker neither answered nor closed within {timeout} s"
            self.sock.settimeout(remaining)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                continue
            except ConnectionResetError:
                return None
            if not data:
                return None
            self.buf += data

    def closed_by_broker(self, timeout: float = 10.0) -> bool:
        """True when the broker closes the connection (with no response frame first)."""
        return self.read_frame(timeout) is None

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> RawConnection:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


#: an ApiVersions v3 request frame: what any broker answers at any time
API_VERSIONS = raw_request(18, 3, 7, ApiVersionsRequest(client_software_name="raw", client_software_version="1"))


def answered(rc: RawConnection, timeout: float = 10.0) -> bool:
    """Sends ApiVersions; True once answered, False if the broker closed the connection."""
    if not rc.send(API_VERSIONS):
        return False
    return rc.read_frame(timeout) is not None


# ---------------------------------------------------------------------- one Fetch


def fetch_once(
    conn,
    topic: str,
    topic_id,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 1 << 20,
    timeout: float = 30.0,
):
    """One Fetch request for one partition on a BrokerConnection, at the highest version
    both sides speak; returns the response's PartitionData."""
    from broker.protocol.messages.fetch import FetchRequest as F

    req = F(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        topics=[
            F.FetchTopic(
                topic=topic,
                topic_id=topic_id,
                partitions=[F.FetchPartition(partition=partition, fetch_offset=offset, partition_max_bytes=max_bytes)],
            )
        ],
    )
    resp = conn.request(req, timeout=timeout)
    assert resp.error_code == 0, resp.error_code
    assert len(resp.responses) == 1 and len(resp.responses[0].partitions) == 1
    return resp.responses[0].partitions[0]


def records_of(data) -> list:
    """(offset, key, value) of every record in fetched batch bytes (partial tail ignored)."""
    from broker.native import iter_batches

    out = []
    for b in iter_batches(data, validate=True):
        for r in b.records():
            out.append((r.offset, r.key, r.value))
    return out

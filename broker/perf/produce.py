"""`broker perf produce`: a load generator in the manner of Kafka's
kafka-producer-perf-test, with batches built by the native BatchBuilder.

Records are `record_size` bytes of random capital letters (as Kafka's tool makes them),
the same payload for every record. Each request carries one batch of up to batch_size
bytes per partition of a leader; up to max_inflight requests are in flight per
connection. With a throughput limit, records become due at that rate and a batch goes
when full or when its oldest record has waited linger_ms. Latency of a record = time
from its batch's creation to the acknowledgement (acks=0: not measured).

`discard=True` sends to an in-process socket that reads and drops everything (acks=0,
no broker): it measures the generator itself.
"""

from __future__ import annotations

import collections
import gc
import random
import socket
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from broker.client import Cluster
from broker.client.connection import _sendmsg_all
from broker.native import BatchBuilder
from broker.perf.stats import Stats
from broker.protocol import codec
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest

# per record: length, attributes, timestamp and offset deltas, key and value lengths and
# the header count (varints): at most 12 bytes for the sizes a perf run uses
RECORD_OVERHEAD = 12
REQUEST_BYTES = 1 << 20  # aim for requests of about 1 MiB (never fewer than one batch)


@dataclass
class ProduceOptions:
    bootstrap: str
    topic: str
    num_records: int
    record_size: int = 100
    throughput: float = -1
    acks: int = 1
    compression: str = "none"
    batch_size: int = 16384
    linger_ms: float = 0.0
    partitions: int | None = None
    max_inflight: int = 5
    discard: bool = False
    timeout_s: float = 600.0
    progress: bool = True
    security: Any = None  # a ClientSecurity (TLS, SASL), None for PLAINTEXT


def payload(size: int, seed: int = 42) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.randrange(65, 91) for _ in range(size))


def ensure_topic(cluster: Cluster, topic: str, partitions: int | None):
    try:
        return cluster.topic(topic)
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
    try:
        cluster.create_topic(topic, partitions or -1, -1)
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    return cluster.topic(topic, wait_s=10)


class _DiscardSink:
    """A local TCP peer that reads and drops everything."""

    def __init__(self):
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(1)
        self.port = self.listener.getsockname()[1]
        self.received = 0
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def _run(self):
        conn, _ = self.listener.accept()
        buf = bytearray(1 << 20)
        while True:
            n = conn.recv_into(buf)
            if not n:
                break
            self.received += n
        conn.close()

    def close(self):
        self.listener.close()
        self._t.join(10)


def run_produce(opts: ProduceOptions, out=sys.stdout) -> dict:
    """Runs the load; the load generator's own garbage collection is off meanwhile (its
    pauses would show up as broker latency)."""
    was = gc.isenabled()
    gc.disable()
    try:
        return _run_produce(opts, out)
    finally:
        if was:
            gc.enable()


def _run_produce(opts: ProduceOptions, out=sys.stdout) -> dict:
    value = payload(opts.record_size)
    per_batch = max(1, (opts.batch_size - 61) // (opts.record_size + RECORD_OVERHEAD))
    stats = Stats(opts.record_size, out=out, progress=opts.progress, total=opts.num_records)
    deadline = time.monotonic() + opts.timeout_s
    builder = BatchBuilder(None if opts.compression == "none" else opts.compression)

    # discarded uncompressed batches go as a zero-copy view, one batch at a time
    zero_copy = opts.compression == "none" and opts.discard

    def build(n: int, ts_ms: int) -> bytes | memoryview:
        builder.reset()
        builder.append_repeated(value, n, ts_ms)
        return builder.view() if zero_copy else builder.build()

    if opts.discard:
        return _run_discard(opts, build, per_batch, stats)

    cluster = Cluster(opts.bootstrap, client_id="kbroker-perf", security=opts.security)
    try:
        meta = ensure_topic(cluster, opts.topic, opts.partitions)
        by_leader: dict[int, list[int]] = {}
        for p, pm in sorted(meta.partitions.items()):
            by_leader.setdefault(pm.leader, []).append(p)
        conns = {leader: cluster.connection(leader) for leader in by_leader}
        inflight: dict[int, collections.deque] = {leader: collections.deque() for leader in by_leader}
        version = {leader: conns[leader].version_for(ProduceRequest.API_KEY) for leader in by_leader}
        leaders = list(by_leader)
        # a request carries one batch for each of up to `per_request` partitions of its
        # leader (about REQUEST_BYTES), rotating so every partition gets its share
        per_request = max(1, REQUEST_BYTES // max(opts.batch_size, 1))
        rotation = {leader: 0 for leader in leaders}
        sent = 0
        turn = 0
        start = time.perf_counter()
        stats.start = start

        def receive_one(leader: int) -> None:
            t0, t1, n, nbytes = inflight[leader].popleft()
            resp = conns[leader].receive()
            for t in resp.responses:
                for pr in t.partition_responses:
                    if pr.error_code:
                        raise KafkaProtocolError(pr.error_code, f"produce to {t.name}-{pr.index}")
            now = time.perf_counter()
            if t1 > t0 and n > 1:
                # records became due evenly between t0 and t1: half counted from each end
                # approximates the per-record latencies without a Python call per record
                stats.record(n // 2, nbytes * (n // 2) // n, (now - t0) * 1000)
                stats.record(n - n // 2, nbytes - nbytes * (n // 2) // n, (now - t1) * 1000)
            else:
                stats.record(n, nbytes, (now - t0) * 1000)

        def collect_ready() -> None:
            """Takes the answers already here, so a latency is never inflated by waiting
            for the in-flight window to fill."""
            for leader in leaders:
                while inflight[leader] and conns[leader].response_ready():
                    receive_one(leader)

        while sent < opts.num_records:
            if time.monotonic() > deadline:
                raise TimeoutError(f"perf produce did not finish within {opts.timeout_s} s")
            leader = leaders[turn % len(leaders)]
            turn += 1
            parts = by_leader[leader]
            k = min(len(parts), per_request)
            want = min(per_batch * k, opts.num_records - sent)
            first_due = None
            if opts.throughput > 0:
                # records become due at the requested rate; send when a request's worth is
                # due or the oldest due record has waited linger_ms
                while True:
                    now = time.perf_counter()
                    due = int((now - start) * opts.throughput) - sent
                    if due >= want:
                        break
                    oldest_wait = (now - (start + (sent + 1) / opts.throughput)) * 1000
                    if due > 0 and oldest_wait >= opts.linger_ms:
                        want = due
                        break
                    next_due = start + (sent + max(due, 0) + 1) / opts.throughput
                    collect_ready()
                    time.sleep(max(0.0, min(next_due - now, 0.0002)))
                first_due = start + (sent + 1) / opts.throughput
            now_ms = int(time.time() * 1000)
            data = []
            left = want
            first = rotation[leader]
            for j in range(k):
                if left <= 0:
                    break
                p = parts[(first + j) % len(parts)]
                n = min(per_batch, left)
                data.append((p, build(n, now_ms), n))
                left -= n
            rotation[leader] = (first + len(data)) % len(parts)
            req = ProduceRequest(
                acks=opts.acks,
                timeout_ms=30000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=opts.topic,
                        partition_data=[ProduceRequest.PartitionProduceData(index=p, records=d) for p, d, _ in data],
                    )
                ],
            )
            n = sum(k for _, _, k in data)
            nbytes = n * opts.record_size
            if opts.acks != 0:
                while len(inflight[leader]) >= opts.max_inflight:
                    receive_one(leader)
            t0 = first_due if first_due is not None else time.perf_counter()
            t1 = start + (sent + n) / opts.throughput if first_due is not None else t0
            conns[leader].send(req, version[leader], expect_response=opts.acks != 0)
            if opts.acks == 0:
                stats.record(n, nbytes)
            else:
                inflight[leader].append((t0, t1, n, nbytes))
                collect_ready()
            sent += n
        for leader in leaders:
            while inflight[leader]:
                receive_one(leader)
        elapsed = time.perf_counter() - start
        return stats.summary(elapsed)
    finally:
        cluster.close()


def _run_discard(opts: ProduceOptions, build, per_batch: int, stats: Stats) -> dict:
    sink = _DiscardSink()
    sock = socket.create_connection(("127.0.0.1", sink.port))
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    version = 9
    sent = 0
    cid = 0
    start = time.perf_counter()
    stats.start = start
    try:
        while sent < opts.num_records:
            n = min(per_batch, opts.num_records - sent)
            data = build(n, int(time.time() * 1000))
            req = ProduceRequest(
                acks=0,
                timeout_ms=30000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=opts.topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=data)]
                    )
                ],
            )
            cid += 1
            parts = codec.encode_request_parts(ProduceRequest.API_KEY, version, cid, "kbroker-perf", req)
            _sendmsg_all(sock, parts)
            del parts, req, data
            stats.record(n, n * opts.record_size)
            sent += n
        elapsed = time.perf_counter() - start
    finally:
        sock.close()
        sink.close()
    return stats.summary(elapsed)

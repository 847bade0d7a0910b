"""`broker perf consume` (Kafka's kafka-consumer-perf-test) and `broker perf e2e`.

consume: fetches a topic from the earliest offsets with one Fetch in flight per leader
(long-polled), validates every batch's CRC-32C and counts records from the batch
headers (no per-record work in Python); with decode="arrow" it also decodes every
record into Arrow natively. Latency = fetch round trip.

e2e: a producer thread sends batches whose records carry their send time (µs) in the
first 8 bytes of the value; the consumer reads the first record of each batch and
reports produce-to-consume latency.
"""

from __future__ import annotations

import struct
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any

from broker.client import BrokerConnection, Cluster
from broker.native import BatchBuilder, batches_to_arrow, iter_batches
from broker.perf.produce import ProduceOptions, ensure_topic, payload
from broker.perf.stats import Stats
from broker.protocol.errors import KafkaProtocolError
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.messages.produce import ProduceRequest

_US = struct.Struct(">q")


@dataclass
class ConsumeOptions:
    bootstrap: str
    topic: str
    num_records: int
    record_size: int = 100
    max_bytes: int = 64 * 1024 * 1024
    partition_max_bytes: int = 16 * 1024 * 1024
    max_wait_ms: int = 500
    decode: str = "none"  # "none" | "arrow"
    timeout_s: float = 600.0
    progress: bool = True
    start: str | int = "earliest"  # "earliest", "latest" or an offset for every partition
    security: Any = None  # a ClientSecurity (TLS, SASL), None for PLAINTEXT


class _Fetcher:
    def __init__(self, cluster: Cluster, topic: str, opts: ConsumeOptions, start: str | int = "earliest"):
        self.cluster = cluster
        self.topic = topic
        self.opts = opts
        meta = cluster.topic(topic, wait_s=10)
        self.topic_id = meta.topic_id
        self.by_leader: dict[int, list[int]] = {}
        for p, pm in sorted(meta.partitions.items()):
            self.by_leader.setdefault(pm.leader, []).append(p)
        self.positions: dict[int, int]
        if isinstance(start, int):
            self.positions = {p: start for p in meta.partitions}
        else:
            ts = -2 if start == "earliest" else -1
            self.positions = {
                p: off for p, (off, _) in cluster.list_offsets(topic, sorted(meta.partitions), ts).items()
            }
        self.conns = {leader: cluster.connection(leader) for leader in self.by_leader}
        self.versions = {leader: c.version_for(FetchRequest.API_KEY) for leader, c in self.conns.items()}

    def send(self, leader: int) -> float:
        req = FetchRequest(
            replica_id=-1,
            max_wait_ms=self.opts.max_wait_ms,
            min_bytes=1,
            max_bytes=self.opts.max_bytes,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            forgotten_topics_data=[],
            topics=[
                FetchRequest.FetchTopic(
                    topic=self.topic,
                    topic_id=self.topic_id,
                    partitions=[
                        FetchRequest.FetchPartition(
                            partition=p,
                            fetch_offset=self.positions[p],
                            partition_max_bytes=self.opts.partition_max_bytes,
                        )
                        for p in self.by_leader[leader]
                    ],
                )
            ],
        )
        self.conns[leader].send(req, self.versions[leader])
        return time.perf_counter()

    def receive(self, leader: int):
        resp = self.conns[leader].receive(self.opts.max_wait_ms / 1000 + 30)
        for t in resp.responses:
            for pd in t.partitions:
                if pd.error_code:
                    raise KafkaProtocolError(pd.error_code, f"fetch {self.topic}-{pd.partition_index}")
                yield pd.partition_index, pd.records


def run_consume(opts: ConsumeOptions, out=sys.stdout) -> dict:
    stats = Stats(opts.record_size, out=out, progress=opts.progress, total=opts.num_records)
    cluster = Cluster(opts.bootstrap, client_id="kbroker-perf", security=opts.security)
    deadline = time.monotonic() + opts.timeout_s
    try:
        f = _Fetcher(cluster, opts.topic, opts, opts.start)
        start = time.perf_counter()
        stats.start = start
        sent_at = {leader: f.send(leader) for leader in f.by_leader}
        while stats.records < opts.num_records:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"perf consume got {stats.records} of {opts.num_records} records within {opts.timeout_s} s"
                )
            for leader in list(sent_at):
                n = nbytes = 0
                received = list(f.receive(leader))
                rtt = (time.perf_counter() - sent_at[leader]) * 1000
                for p, data in received:
                    if data is None or not len(data):
                        continue
                    pos = f.positions[p]
                    if opts.decode == "arrow":
                        table = batches_to_arrow(data, start_offset=pos)
                        n += table.num_rows
                        it = iter_batches(data)
                        for batch in it:
                            pos = batch.next_offset
                    else:
                        for batch in iter_batches(data, validate=True):
                            if batch.next_offset <= pos:
                                continue
                            n += batch.record_count if batch.base_offset >= pos else batch.next_offset - pos
                            pos = batch.next_offset
                    nbytes += len(data)
                    f.positions[p] = pos
                if n:
                    stats.record(n, n * opts.record_size, rtt)
                if stats.records < opts.num_records:
                    sent_at[leader] = f.send(leader)
                else:
                    del sent_at[leader]
        for leader in list(sent_at):  # drain the fetches still in flight
            list(f.receive(leader))
        return stats.summary(time.perf_counter() - start)
    finally:
        cluster.close()


def run_e2e(popts: ProduceOptions, copts: ConsumeOptions, out=sys.stdout) -> dict:
    """Produces and consumes at once; latency = consume time - send time per batch."""
    cluster = Cluster(popts.bootstrap, client_id="kbroker-perf", security=copts.security)
    errors: list[BaseException] = []
    try:
        meta = ensure_topic(cluster, popts.topic, popts.partitions)
        fetch = _Fetcher(cluster, popts.topic, copts, start="latest")
    except BaseException:
        cluster.close()
        raise
    stats = Stats(popts.record_size, out=out, progress=popts.progress, total=popts.num_records)
    value_tail = payload(max(popts.record_size - 8, 0))
    per_batch = max(1, (popts.batch_size - 61) // (popts.record_size + 8))
    parts = sorted(meta.partitions)

    def produce() -> None:
        pc = Cluster(popts.bootstrap, client_id="kbroker-perf-producer", security=popts.security)
        try:
            conns: dict[int, BrokerConnection] = {}
            sent = 0
            turn = 0
            start = time.perf_counter()
            inflight = []
            b = BatchBuilder(None if popts.compression == "none" else popts.compression)
            while sent < popts.num_records:
                p = parts[turn % len(parts)]
                turn += 1
                n = min(per_batch, popts.num_records - sent)
                if popts.throughput > 0:
                    due_at = start + (sent + n) / popts.throughput
                    delay = due_at - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                leader = meta.partitions[p].leader
                conn = conns.get(leader) or conns.setdefault(leader, pc.connection(leader))
                b.reset()
                b.append_repeated(_US.pack(time.time_ns() // 1000) + value_tail, n)
                req = ProduceRequest(
                    acks=popts.acks,
                    timeout_ms=30000,
                    topic_data=[
                        ProduceRequest.TopicProduceData(
                            name=popts.topic,
                            partition_data=[ProduceRequest.PartitionProduceData(index=p, records=b.build())],
                        )
                    ],
                )
                conn.send(req, expect_response=popts.acks != 0)
                if popts.acks != 0:
                    inflight.append(conn)
                    if len(inflight) >= popts.max_inflight:
                        inflight.pop(0).receive()
                sent += n
            for conn in inflight:
                conn.receive()
        except BaseException as exc:  # reported by the consumer side
            errors.append(exc)
        finally:
            pc.close()

    t = threading.Thread(target=produce, daemon=True)
    deadline = time.monotonic() + popts.timeout_s
    start = time.perf_counter()
    stats.start = start
    t.start()
    try:
        pending = {leader: fetch.send(leader) for leader in fetch.by_leader}
        while stats.records < popts.num_records:
            if errors:
                raise errors[0]
            if time.monotonic() > deadline:
                raise TimeoutError(f"perf e2e got {stats.records} of {popts.num_records} records")
            for leader in list(pending):
                for p, data in fetch.receive(leader):
                    if data is None or not len(data):
                        continue
                    now_us = time.time_ns() // 1000
                    pos = fetch.positions[p]
                    for batch in iter_batches(data, validate=True):
                        if batch.next_offset <= pos:
                            continue
                        n = batch.record_count if batch.base_offset >= pos else batch.next_offset - pos
                        first = batch.records(max_records=1)[0]
                        sent_us = _US.unpack_from(first.value, 0)[0]
                        stats.record(n, n * popts.record_size, (now_us - sent_us) / 1000)
                        pos = batch.next_offset
                    fetch.positions[p] = pos
                pending[leader] = fetch.send(leader)
        for leader in pending:
            list(fetch.receive(leader))
        t.join(30)
        return stats.summary(time.perf_counter() - start)
    finally:
        cluster.close()

"""A small batching producer: records accumulate per partition in native BatchBuilders;
a batch is sent when it reaches batch_size or linger_ms, or on flush().

    with Producer("127.0.0.1:9092", acks=1, compression="lz4") as p:
        p.send("clicks", b"value", key=b"user-1", headers=[("h", b"v")])
        p.flush()          # raises KafkaProtocolError if the broker refused a batch

Keyed records go to murmur2(key) % partitions, as Kafka's Java client does (so keys land
where Kafka's own tools put them); unkeyed records stick to one partition per batch,
rotating between batches.
"""
from __future__ import annotations

import itertools
import time

from broker.client.cluster import Cluster
from broker.client.connection import ClientError
from broker.native import BatchBuilder, compression_code
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest

RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
             ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (org.apache.kafka.common.utils.Utils.murmur2), as a signed int32."""
    length = len(data)
    m = 0x5BD1E995
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    n4 = length // 4
    for i in range(n4):
        k = int.from_bytes(data[4 * i:4 * i + 4], "little")
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        k = (k * m) & 0xFFFFFFFF
        h = (h * m) & 0xFFFFFFFF
        h ^= k
    rest = length & 3
    tail = data[n4 * 4:]
    if rest == 3:
        h ^= tail[2] << 16
    if rest >= 2:
        h ^= tail[1] << 8
    if rest >= 1:
        h ^= tail[0]
        h = (h * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def _record_size(key, value, headers) -> int:
    """An upper bound of a record's encoded size (its varints at their widest)."""
    n = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for k, v in headers or ():
        n += 10 + len(k) * 4 + (len(v) if v is not None else 0)
    return n


def partition_for_key(key: bytes, num_partitions: int) -> int:
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class Producer:
    def __init__(self, bootstrap: str | Cluster, *, acks: int = -1, compression: str | None = None,
                 batch_size: int = 16384, linger_ms: int = 5, timeout_ms: int = 30000, retries: int = 5,
                 client_id: str = "kbroker-producer"):
        self.cluster = bootstrap if isinstance(bootstrap, Cluster) else Cluster(bootstrap, client_id=client_id)
        self._own_cluster = not isinstance(bootstrap, Cluster)
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks}")
        self.acks = acks
        self.compression = compression_code(compression)
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.timeout_ms = timeout_ms
        self.retries = retries
        self._builders: dict[tuple[str, int], BatchBuilder] = {}
        self._first_append: dict[tuple[str, int], float] = {}
        self._sticky: dict[str, int] = {}
        self._rr = itertools.count()
        self.results: list[tuple[str, int, int]] = []     # (topic, partition, base offset) per batch sent

    def partitions_of(self, topic: str) -> int:
        meta = self.cluster.topics.get(topic)
        if meta is None:
            meta = self.cluster.topic(topic, wait_s=5.0, allow_auto_create=True)
        return len(meta.partitions)

    def send(self, topic: str, value: bytes | None, key: bytes | None = None, headers=None,
             partition: int | None = None, timestamp: int | None = None) -> None:
        n = self.partitions_of(topic)          # metadata first (may auto-create the topic)
        if partition is None:
            if key is not None:
                partition = partition_for_key(key, n)
            else:
                partition = self._sticky.get(topic)
                if partition is None:
                    partition = next(self._rr) % n
                    self._sticky[topic] = partition
        tp = (topic, partition)
        b = self._builders.get(tp)
        if b is not None and len(b) and b.size_in_bytes + _record_size(key, value, headers) > self.batch_size:
            # the record would push the batch past batch_size: send what we have first
            self._sticky.pop(topic, None)
            self._send_batches([tp])
            b = None
        if b is None:
            b = self._builders[tp] = BatchBuilder(self.compression)
            self._first_append[tp] = time.monotonic()
        b.append(timestamp, key, value, headers)
        if b.size_in_bytes >= self.batch_size:
            self._sticky.pop(topic, None)
            self._send_batches([tp])
        elif self.linger_ms == 0:
            self._send_batches([tp])

    def poll(self) -> None:
        """Sends the batches whose linger time has passed."""
        now = time.monotonic()
        due = [tp for tp, t0 in self._first_append.items() if (now - t0) * 1000 >= self.linger_ms]
        if due:
            self._send_batches(due)

    def flush(self) -> None:
        if self._builders:
            self._send_batches(list(self._builders))

    def _send_batches(self, tps) -> None:
        batches = {}
        for tp in tps:
            b = self._builders.pop(tp, None)
            self._first_append.pop(tp, None)
            if b is not None and len(b):
                batches[tp] = b.build()
        attempt = 0
        while batches:
            failed = self._produce(batches)
            if not failed:
                return
            attempt += 1
            retriable = all(code in RETRIABLE for code, _ in failed.values())
            if not retriable or attempt > self.retries:
                tp, (code, msg) = next(iter(failed.items()))
                raise KafkaProtocolError(code, f"produce to {tp[0]}-{tp[1]}" + (f": {msg}" if msg else ""))
            time.sleep(min(0.1 * attempt, 1.0))
            self.cluster.refresh(list({t for t, _ in failed}))
            batches = {tp: batches[tp] for tp in failed}

    def _produce(self, batches: dict) -> dict:
        """One Produce request per leader; returns {tp: (error code, message)} of failures."""
        by_leader: dict[int, dict[str, list]] = {}
        for (topic, p), data in batches.items():
            meta = self.cluster.topics.get(topic) or self.cluster.topic(topic, wait_s=5.0)
            pm = meta.partitions.get(p)
            if pm is None:
                raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{topic}-{p}")
            by_leader.setdefault(pm.leader, {}).setdefault(topic, []).append((p, data))
        failed = {}
        sent = []
        for leader, topics in by_leader.items():
            req = ProduceRequest(transactional_id=None, acks=self.acks, timeout_ms=self.timeout_ms, topic_data=[
                ProduceRequest.TopicProduceData(name=t, partition_data=[
                    ProduceRequest.PartitionProduceData(index=p, records=d) for p, d in parts])
                for t, parts in topics.items()])
            try:
                conn = self.cluster.connection(leader)
                conn.send(req, expect_response=self.acks != 0)
                sent.append((leader, conn))
            except ClientError:
                self.cluster.drop_connection(leader)
                for t, parts in topics.items():
                    for p, _ in parts:
                        failed[(t, p)] = (ErrorCode.NOT_LEADER_OR_FOLLOWER, "connection failed")
        if self.acks == 0:
            return failed
        for leader, conn in sent:
            try:
                resp = conn.receive(self.timeout_ms / 1000 + 5)
            except ClientError as exc:
                self.cluster.drop_connection(leader)
                for t, parts in by_leader[leader].items():
                    for p, _ in parts:
                        failed[(t, p)] = (ErrorCode.NOT_LEADER_OR_FOLLOWER, str(exc))
                continue
            for t in resp.responses:
                for pr in t.partition_responses:
                    if pr.error_code:
                        failed[(t.name, pr.index)] = (pr.error_code, pr.error_message)
                    else:
                        self.results.append((t.name, pr.index, pr.base_offset))
        return failed

    def close(self) -> None:
        try:
            self.flush()
        finally:
            if self._own_cluster:
                self.cluster.close()

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is None:
            self.close()
        elif self._own_cluster:
            self.cluster.close()

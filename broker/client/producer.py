"""A small batching producer: records accumulate per partition in native BatchBuilders;
a batch goes to the shared pipelined Sender (broker/client/sender.py) when it reaches
batch_size, or linger_ms once the partition's previous batch has been sent, or on flush().

    with Producer("127.0.0.1:9092", acks=1, compression="lz4") as p:
        p.send("clicks", b"value", key=b"user-1", headers=[("h", b"v")])
        p.flush()          # raises KafkaProtocolError if the broker refused a batch

Keyed records go to murmur2(key) % partitions, as Kafka's Java client does (the native
core's partitioner, so keys land where Kafka's own tools put them); unkeyed records stick
to one partition per batch, rotating between batches. With the default
max_in_flight=1 a partition's batches are written in the order they were sent, retries
included.

Failures are retried as by Kafka's producer, with its defaults (broker/client/sender.py):
a batch goes again after a retriable error or a failed connection, to the leader the
refreshed metadata names, until delivery_timeout_ms (120 s) has passed since it was
created; `retries` (unbounded by default) caps the attempts too.
"""

from __future__ import annotations

import itertools
import time

from broker.client.cluster import Cluster
from broker.client.sender import DELIVERY_TIMEOUT_MS, RETRIES_MAX, RETRY_BACKOFF_MS, Sender, TopicPartition
from broker.native import BatchBuilder, compression_code, partition_for_key


def _record_size(key: bytes | None, value: bytes | None, headers: list[tuple[str, bytes | None]] | None) -> int:
    """An upper bound of a record's encoded size (its varints at their widest)."""
    n = 21 + (len(key) if key is not None else 0) + (len(value) if value is not None else 0)
    for k, v in headers or ():
        n += 10 + len(k) * 4 + (len(v) if v is not None else 0)
    return n


class Producer:
    def __init__(
        self,
        bootstrap: str | Cluster,
        *,
        acks: int = -1,
        compression: str | None = None,
        batch_size: int = 16384,
        linger_ms: int = 5,
        timeout_ms: int = 30000,
        retries: int = RETRIES_MAX,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        max_in_flight: int = 1,
        client_id: str = "kbroker-producer",
        security=None,
    ):
        self.cluster = (
            bootstrap if isinstance(bootstrap, Cluster) else Cluster(bootstrap, client_id=client_id, security=security)
        )
        self._own_cluster = not isinstance(bootstrap, Cluster)
        if acks not in (0, 1, -1):
            raise ValueError(f"acks must be 0, 1 or -1 (all), not {acks}")
        self.acks = acks
        self.compression = compression_code(compression)
        self.batch_size = batch_size
        self.linger_ms = linger_ms
        self.timeout_ms = timeout_ms
        self.retries = retries
        self._sender = Sender(
            self.cluster,
            acks=acks,
            timeout_ms=timeout_ms,
            retries=retries,
            delivery_timeout_ms=delivery_timeout_ms,
            retry_backoff_ms=retry_backoff_ms,
            max_in_flight=max_in_flight,
            on_ack=self._acked,
        )
        self._builders: dict[tuple[str, int], BatchBuilder] = {}
        self._first_append: dict[tuple[str, int], float] = {}
        self._sticky: dict[str, int] = {}
        self._partition_counts: dict[str, int] = {}
        self._rr = itertools.count()
        self.results: list[tuple[str, int, int]] = []  # (topic, partition, base offset) per batch sent

    def partitions_of(self, topic: str) -> int:
        """The topic's partition count, asked once (a leader election under way later
        does not make send() wait for metadata)."""
        n = self._partition_counts.get(topic)
        if n is None:
            meta = self.cluster.topics.get(topic)
            if meta is None:
                meta = self.cluster.topic(topic, wait_s=5.0, allow_auto_create=True)
            n = self._partition_counts[topic] = len(meta.partitions)
        return n

    def send(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers=None,
        partition: int | None = None,
        timestamp: int | None = None,
    ) -> None:
        n = self.partitions_of(topic)  # metadata first (may auto-create the topic)
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
        elif self.linger_ms == 0 and not self._sender.waiting(tp):
            self._send_batches([tp])

    def poll(self) -> None:
        """Takes the answers already there, then sends the batches whose linger time has
        passed. As in Kafka's accumulator, a partition's open batch is closed only once
        the sender can take it: while an earlier batch of the partition still waits to be
        sent (a slow or failed-over leader), it keeps growing up to batch_size instead of
        queueing one small batch per linger_ms, which would drain at one batch per
        request and let the backlog age past delivery_timeout_ms."""
        now = time.monotonic()
        due, held = [], False
        for tp, t0 in self._first_append.items():
            if (now - t0) * 1000 >= self.linger_ms:
                if self._sender.waiting(tp):
                    held = True
                else:
                    due.append(tp)
        if due:
            self._send_batches(due)  # the sender takes the answers there as it adds
        elif held:
            self._sender.pump()  # answers free the way for the held batches

    def flush(self) -> None:
        """Sends every batch and waits until all are acknowledged."""
        if self._builders:
            self._send_batches(list(self._builders))
        self._sender.flush()

    def _send_batches(self, tps: list[TopicPartition]) -> None:
        for tp in tps:
            b = self._builders.pop(tp, None)
            self._first_append.pop(tp, None)
            if b is not None and len(b):
                self._sender.add(tp[0], tp[1], b.build(), len(b))

    @property
    def retried(self) -> int:
        """Batches sent again so far (after a retriable error or a failed connection)."""
        return self._sender.retried

    def _acked(self, tp: TopicPartition, count: int, base_offset: int) -> None:
        if base_offset >= 0:
            self.results.append((tp[0], tp[1], base_offset))

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

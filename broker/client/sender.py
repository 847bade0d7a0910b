"""The one pipelined sender of produce requests, shared by the client's Producer and the
Spark sink: encoded record batches in, acknowledged offsets out.

    sender = Sender(cluster, acks=-1, timeout_ms=30000, retries=5, max_in_flight=5,
                    on_ack=lambda tp, count, base_offset: ...)
    sender.add("clicks", 0, batch_bytes, record_count)   # sends when a slot is free
    sender.flush()                                        # every batch acknowledged

Invariants:
- one request per leader and free in-flight slot, with at most one batch per partition
  (as Kafka's produce protocol wants); at most `max_in_flight` requests wait for an
  answer on a connection. With max_in_flight=1 a partition's batches are written in the
  order they were added, retries included.
- a batch that failed with a retriable error (broker.protocol.retriable), or whose
  connection failed, goes back to the front of its partition's queue after a metadata
  refresh, at most `retries` times; any other error raises KafkaProtocolError.
- add() blocks only while a leader with queued batches has every slot taken, so the
  memory held stays bounded; flush() returns once every batch is acknowledged (acks=0:
  once sent) or raises.

Not thread-safe: one thread per sender (its connections are the cluster's).
"""
from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable

from broker.client.cluster import Cluster
from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest
from broker.protocol.retriable import RETRIABLE

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
#: a batch on its way: (partition, encoded batch, record count, attempts so far)
_Part = tuple[TopicPartition, bytes, int, int]
#: called once per acknowledged batch: (partition, record count, base offset; -1 for acks=0)
OnAck = Callable[[TopicPartition, int, int], None]

RETRY_BACKOFF_S = 0.1


class Sender:
    def __init__(self, cluster: Cluster, *, acks: int, timeout_ms: int, retries: int, max_in_flight: int,
                 on_ack: OnAck, transactional_id: str | None = None, what: str = "produce"):
        self.cluster = cluster
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.retries = retries
        self.max_in_flight = max_in_flight
        self.on_ack = on_ack
        self.transactional_id = transactional_id
        self.what = what                                     # how errors name the producer
        self.queues: dict[TopicPartition, deque[tuple[bytes, int, int]]] = {}
        self.inflight: dict[int, deque[tuple[BrokerConnection, list[_Part]]]] = {}

    def add(self, topic: str, partition: int, data: bytes, count: int) -> None:
        self.queues.setdefault((topic, partition), deque()).append((data, count, 0))
        self._pump(block=False)

    def flush(self) -> None:
        deadline = time.monotonic() + self.timeout_ms / 1000 * (self.retries + 2)
        while any(self.queues.values()) or any(self.inflight.values()):
            self._pump(block=True)
            if time.monotonic() > deadline:
                raise ClientError(f"{self.what}: records not acknowledged within the request timeout "
                                  f"({self.timeout_ms} ms) x (retries + 2)")

    def _leader(self, tp: TopicPartition) -> int:
        meta = self.cluster.topics.get(tp[0]) or self.cluster.topic(tp[0], wait_s=5.0)
        pm = meta.partitions.get(tp[1])
        if pm is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]}")
        leader: int = pm.leader
        return leader

    def _pump(self, block: bool) -> None:
        """Sends what the in-flight limits allow. Non-blocking: receives only while a
        leader with queued batches is saturated; blocking: also waits for one response."""
        while True:
            waiting_leaders = self._send_ready()
            if block:
                for leader, flight in self.inflight.items():
                    if flight:
                        self._receive(leader)
                        break
                return
            saturated = [leader for leader in waiting_leaders
                         if len(self.inflight.get(leader, ())) >= self.max_in_flight]
            if not saturated:
                return
            self._receive(saturated[0])

    def _send_ready(self) -> set[int]:
        """One request per leader and free in-flight slot; the leaders still with queued
        batches afterwards."""
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, q in self.queues.items():
            if q:
                by_leader.setdefault(self._leader(tp), []).append(tp)
        waiting = set()
        for leader, tps in by_leader.items():
            flight = self.inflight.setdefault(leader, deque())
            while len(flight) < self.max_in_flight:
                parts = []
                for tp in tps:
                    q = self.queues[tp]
                    if q:
                        data, count, attempts = q.popleft()
                        parts.append((tp, data, count, attempts))
                if not parts:
                    break
                self._send(leader, parts)
            if any(self.queues[tp] for tp in tps):
                waiting.add(leader)
        return waiting

    def _send(self, leader: int, parts: list[_Part]) -> None:
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for (t, p), data, _, _ in parts:
            topics.setdefault(t, []).append(ProduceRequest.PartitionProduceData(index=p, records=data))
        req = ProduceRequest(transactional_id=self.transactional_id, acks=self.acks, timeout_ms=self.timeout_ms,
                             topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps)
                                         for t, ps in topics.items()])
        try:
            conn = self.cluster.connection(leader)
            conn.send(req, expect_response=self.acks != 0)
        except ClientError as exc:
            self.cluster.drop_connection(leader)
            self._requeue(parts, ErrorCode.NETWORK_EXCEPTION, str(exc))
            return
        if self.acks == 0:
            for tp, _, count, _ in parts:
                self.on_ack(tp, count, -1)
            return
        self.inflight.setdefault(leader, deque()).append((conn, parts))

    def _receive(self, leader: int) -> None:
        conn, parts = self.inflight[leader].popleft()
        try:
            resp = conn.receive(self.timeout_ms / 1000 + 5)
        except ClientError as exc:
            # the connection is gone: everything in flight on it goes again
            self.cluster.drop_connection(leader)
            rest = list(self.inflight[leader])
            self.inflight[leader].clear()
            self._requeue(parts + [x for _, ps in rest for x in ps], ErrorCode.NETWORK_EXCEPTION, str(exc))
            return
        results = {(t.name, pr.index): pr for t in resp.responses for pr in t.partition_responses}
        failed = []
        for tp, data, count, attempts in parts:
            pr = results.get(tp)
            if pr is None:
                failed.append((tp, data, count, attempts))
            elif pr.error_code:
                if pr.error_code not in RETRIABLE:
                    raise KafkaProtocolError(pr.error_code, f"{self.what} to {tp[0]}-{tp[1]}"
                                             + (f": {pr.error_message}" if pr.error_message else ""))
                failed.append((tp, data, count, attempts))
            else:
                self.on_ack(tp, count, pr.base_offset)
        if failed:
            code = next((results[tp].error_code for tp, *_ in failed if tp in results), ErrorCode.UNKNOWN_SERVER_ERROR)
            self._requeue(failed, code, "retriable error")

    def _requeue(self, parts: list[_Part], code: int, why: str) -> None:
        topics = set()
        for tp, data, count, attempts in reversed(parts):
            if attempts >= self.retries:
                raise KafkaProtocolError(code, f"{self.what} to {tp[0]}-{tp[1]} failed after "
                                               f"{attempts + 1} attempts ({why})")
            self.queues.setdefault(tp, deque()).appendleft((data, count, attempts + 1))
            topics.add(tp[0])
        log.info("%s: retrying %d batch(es): %s", self.what, len(parts), why)
        time.sleep(RETRY_BACKOFF_S)
        try:
            self.cluster.refresh(sorted(topics))
        except ClientError:
            pass

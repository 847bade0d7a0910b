"""The one pipelined sender of produce requests, shared by the client's Producer and the
Spark sink: encoded record batches in, acknowledged offsets out.

    sender = Sender(cluster, acks=-1, timeout_ms=30000, max_in_flight=5,
                    on_ack=lambda tp, count, base_offset: ...)
    sender.add("clicks", 0, batch_bytes, record_count)   # sends when a slot is free
    sender.flush()                                        # every batch acknowledged

Retries are those of Kafka's producer, with its defaults: a batch is retried as long as
`delivery_timeout_ms` (delivery.timeout.ms, 120 s) has not passed since it was added
(and at most `retries` times, unbounded by default); each retry of a batch waits
`retry_backoff_ms` (100 ms), doubling up to `retry_backoff_max_ms` (1 s), with Kafka's
20 % jitter. What makes a batch go again:

- a retriable error of its partition (broker.protocol.retriable: NOT_LEADER_OR_FOLLOWER,
  NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT ...);
- its connection failed: refused (the leader is dead), closed, or no answer within the
  request timeout (`timeout_ms` + 5 s; a paused broker) — every batch in flight on it
  goes again;
- its leader is not known: the metadata names none (an election is under way), or a
  broker the metadata does not list.

Each of these marks the partition's topic stale: its metadata is refreshed (at most once
per retry.backoff.ms) before its next batch is routed, so a batch goes to the new leader
as soon as the metadata names it. A metadata refresh that fails (no broker reachable) is
itself retried, it never fails a batch. A batch past its delivery timeout fails flush()
(or add()) with REQUEST_TIMED_OUT naming the partition and the last error, as Kafka's
producer fails it with a TimeoutException; a non-retriable error fails it at once.

Invariants:
- one request per leader and free in-flight slot, with at most one batch per partition
  (as Kafka's produce protocol wants); at most `max_in_flight` requests wait for an
  answer on a connection. With max_in_flight=1 a partition's batches are written in the
  order they were added, retries included (with more in flight, a retried batch may
  land after a later one, as with Kafka's producer without idempotence).
- answers are taken from whichever connection has one (select), so a paused or dead
  leader delays only its own partitions.
- add() takes the answers already there and sends what it can, and blocks only while
  more than `buffer_memory` bytes (Kafka's buffer.memory, 32 MiB) wait to be sent, so a
  leader that is down or slow holds up only its own partitions and the memory held stays
  bounded; flush() returns once every batch is acknowledged (acks=0: once sent) or raises.

Not thread-safe: one thread per sender (its connections are the cluster's).
"""

from __future__ import annotations

import logging
import random
import select
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
#: called once per acknowledged batch: (partition, record count, base offset; -1 for acks=0)
OnAck = Callable[[TopicPartition, int, int], None]

#: Kafka's producer defaults
DELIVERY_TIMEOUT_MS = 120_000
RETRIES_MAX = 2**31 - 1
RETRY_BACKOFF_MS = 100
RETRY_BACKOFF_MAX_MS = 1000
BUFFER_MEMORY = 32 << 20
#: how much longer than the request timeout an answer may take before the connection
#: counts as failed (the broker answers REQUEST_TIMED_OUT itself at the request timeout)
ANSWER_GRACE_S = 5.0
#: the longest a blocked flush() sleeps between looks (delivery timeouts are checked then)
MAX_WAIT_S = 0.5


class _Batch:
    """One encoded record batch on its way."""

    __slots__ = ("tp", "data", "count", "attempts", "created", "retry_at", "error", "failed_on")

    def __init__(self, tp: TopicPartition, data: bytes, count: int, created: float):
        self.tp = tp
        self.data = data
        self.count = count
        self.attempts = 0  # sends that failed so far
        self.created = created  # monotonic; the delivery timeout runs from here
        self.retry_at = 0.0  # monotonic; not sent again before
        self.error = ""  # the last failure, for the message when it expires
        self.failed_on = -1  # the leader it last failed on (-1: none)

    def due(self, leader: int, now: float) -> bool:
        """Its backoff has passed, or the metadata names another leader than the one it
        failed on (re-routed at once, as Kafka's producer does since KIP-951)."""
        return self.retry_at <= now or (self.failed_on >= 0 and leader != self.failed_on)


class Sender:
    def __init__(
        self,
        cluster: Cluster,
        *,
        acks: int,
        timeout_ms: int,
        max_in_flight: int,
        on_ack: OnAck,
        retries: int = RETRIES_MAX,
        delivery_timeout_ms: int = DELIVERY_TIMEOUT_MS,
        retry_backoff_ms: int = RETRY_BACKOFF_MS,
        retry_backoff_max_ms: int = RETRY_BACKOFF_MAX_MS,
        buffer_memory: int = BUFFER_MEMORY,
        transactional_id: str | None = None,
        what: str = "produce",
    ):
        self.cluster = cluster
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.retries = retries
        self.delivery_timeout_ms = delivery_timeout_ms
        self.retry_backoff_ms = retry_backoff_ms
        self.retry_backoff_max_ms = max(retry_backoff_ms, retry_backoff_max_ms)
        self.max_in_flight = max_in_flight
        self.buffer_memory = buffer_memory
        self.on_ack = on_ack
        self.transactional_id = transactional_id
        self.what = what  # how errors name the producer
        self.queues: dict[TopicPartition, deque[_Batch]] = {}
        #: leader -> requests waiting for an answer: (connection, batches, monotonic send time)
        self.inflight: dict[int, deque[tuple[BrokerConnection, list[_Batch], float]]] = {}
        self._stale: set[str] = set()  # topics whose metadata is refreshed before routing again
        self._refresh_at = 0.0  # monotonic: no metadata refresh before
        self._refresh_error = ""
        self.retried = 0  # batches sent again (a figure for tests and benchmarks)
        self._queued_bytes = 0  # of the batches in self.queues

    # ------------------------------------------------------------------ the API

    def add(self, topic: str, partition: int, data: bytes, count: int) -> None:
        tp = (topic, partition)
        self.queues.setdefault(tp, deque()).append(_Batch(tp, data, count, time.monotonic()))
        self._queued_bytes += len(data)
        self._pump(block=False)

    def flush(self) -> None:
        while any(self.queues.values()) or any(self.inflight.values()):
            self._pump(block=True)

    def pump(self) -> None:
        """Takes the answers already there and sends what the in-flight limits allow,
        without waiting (unless more than buffer_memory bytes wait to be sent)."""
        self._pump(block=False)

    def waiting(self, tp: TopicPartition) -> bool:
        """A batch of the partition waits to be sent (not yet sent, or to be retried)."""
        return bool(self.queues.get(tp))

    # ------------------------------------------------------------------ routing

    def _leader(self, tp: TopicPartition) -> int:
        """The partition's leader as the metadata names it; -1 when it names none (or a
        broker it does not list): the topic is then marked stale."""
        meta = self.cluster.topics.get(tp[0])
        pm = meta.partitions.get(tp[1]) if meta is not None else None
        if pm is None and meta is not None and tp[0] not in self._stale:
            # the topic is known and has no such partition: nothing a retry would change
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{self.what}: {tp[0]}-{tp[1]}")
        if pm is None or pm.leader < 0 or pm.leader not in self.cluster.brokers:
            self._stale.add(tp[0])
            return -1
        leader: int = pm.leader
        return leader

    def _refresh(self, now: float) -> None:
        """Refreshes the stale topics' metadata, at most once per retry.backoff.ms; a
        failure (no broker reachable) is retried later."""
        if not self._stale or now < self._refresh_at:
            return
        topics = sorted(self._stale)
        self._refresh_at = now + self.retry_backoff_ms / 1000
        try:
            metas = self.cluster.refresh(topics)
        except (ClientError, KafkaProtocolError) as exc:
            self._refresh_error = f"metadata refresh failed: {exc}"
            log.info("%s: %s", self.what, self._refresh_error)
            return
        self._refresh_error = ""
        self._stale = {
            t
            for t in topics
            if t not in metas or metas[t].error_code or any(p.leader < 0 for p in metas[t].partitions.values())
        }

    def _due(self, now: float) -> dict[int, list[TopicPartition]]:
        """Partitions whose next batch may go now, by leader (metadata refreshed first if
        stale). Fails the first batch past its delivery timeout."""
        self._expire(now)
        self._refresh(now)
        by_leader: dict[int, list[TopicPartition]] = {}
        for tp, q in self.queues.items():
            if not q:
                continue
            leader = self._leader(tp)
            if leader < 0:
                q[0].error = self._refresh_error or q[0].error or "no leader known"
                continue
            if q[0].due(leader, now):
                by_leader.setdefault(leader, []).append(tp)
            elif q[0].failed_on == leader:
                self._stale.add(tp[0])  # watch the metadata for the new leader meanwhile
        return by_leader

    def _expire(self, now: float) -> None:
        limit = self.delivery_timeout_ms / 1000
        for tp, q in self.queues.items():
            if q and now - q[0].created > limit:
                b = q[0]
                records = sum(x.count for x in q if now - x.created > limit)
                raise KafkaProtocolError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{self.what} to {tp[0]}-{tp[1]}: {records} record(s) expired: {self.delivery_timeout_ms} ms "
                    f"have passed since the batch was created (delivery.timeout.ms), {b.attempts} attempt(s)"
                    + (f"; last error: {b.error}" if b.error else ""),
                )

    # ------------------------------------------------------------------ sending

    def _pump(self, block: bool) -> None:
        """Takes the answers already there, sends what the in-flight limits allow.
        Non-blocking: waits for answers only while more than buffer_memory bytes wait to
        be sent (Kafka's producer blocks send() so); blocking: also waits for the next
        answer, retry or metadata refresh (bounded by MAX_WAIT_S)."""
        while True:
            self._wait(0)
            self._send_ready()
            if block:
                self._wait(self._next_event())
                return
            if self._queued_bytes <= self.buffer_memory:
                return
            self._wait(self._next_event())

    def _send_ready(self) -> set[int]:
        """One request per leader and free in-flight slot; the leaders still with batches
        due afterwards."""
        now = time.monotonic()
        waiting = set()
        for leader, tps in self._due(now).items():
            flight = self.inflight.setdefault(leader, deque())
            while len(flight) < self.max_in_flight:
                parts = []
                for tp in tps:
                    q = self.queues[tp]
                    if q and q[0].due(leader, now):
                        b = q.popleft()
                        self._queued_bytes -= len(b.data)
                        parts.append(b)
                if not parts or not self._send(leader, parts):
                    break
            if any(self.queues[tp] and self.queues[tp][0].due(leader, now) for tp in tps):
                waiting.add(leader)
        return waiting

    def _send(self, leader: int, parts: list[_Batch]) -> bool:
        """Sends one request; False when the connection failed (the batches are requeued)."""
        topics: dict[str, list[ProduceRequest.PartitionProduceData]] = {}
        for b in parts:
            topics.setdefault(b.tp[0], []).append(ProduceRequest.PartitionProduceData(index=b.tp[1], records=b.data))
        req = ProduceRequest(
            transactional_id=self.transactional_id,
            acks=self.acks,
            timeout_ms=self.timeout_ms,
            topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps) for t, ps in topics.items()],
        )
        try:
            conn = self.cluster.connection(leader)
            conn.send(req, expect_response=self.acks != 0)
        except ClientError as exc:
            self._connection_failed(leader, str(exc), parts)
            return False
        if self.acks == 0:
            for b in parts:
                self.on_ack(b.tp, b.count, -1)
            return True
        self.inflight.setdefault(leader, deque()).append((conn, parts, time.monotonic()))
        return True

    # ------------------------------------------------------------------ answers

    def _next_event(self) -> float:
        """Seconds until something may change: a retry falls due, a metadata refresh is
        allowed, a request times out (at most MAX_WAIT_S)."""
        now = time.monotonic()
        wait = MAX_WAIT_S
        for q in self.queues.values():
            if q and q[0].retry_at > now:  # a batch due now waits for an answer instead
                wait = min(wait, q[0].retry_at - now)
        if self._stale:
            wait = min(wait, self._refresh_at - now)
        return max(0.001, wait)

    def _wait(self, timeout: float) -> None:
        """Takes the answers there or arriving within `timeout`; a request unanswered
        past its timeout fails its connection."""
        flights = {leader: f for leader, f in self.inflight.items() if f}
        if not flights:
            if timeout > 0:
                time.sleep(timeout)
            return
        ready = []
        for leader, f in flights.items():
            try:
                if f[0][0].response_ready():
                    ready.append(leader)
            except ClientError as exc:
                self._connection_failed(leader, str(exc))
        if not ready and timeout > 0:
            # the leaders whose connection is still there (one may have failed just now)
            socks = {
                flight[0][0].sock: leader for leader, flight in self.inflight.items() if flight and leader in flights
            }
            try:
                readable, _, _ = select.select(list(socks), [], [], timeout) if socks else ([], [], [])
            except (OSError, ValueError):
                readable = list(socks)  # a socket closed under us: receive() says why
            for sock in readable:
                leader = socks[sock]
                current = self.inflight.get(leader)
                try:
                    if current and current[0][0].response_ready():
                        ready.append(leader)
                except ClientError as exc:
                    self._connection_failed(leader, str(exc))
        for leader in ready:
            if self.inflight.get(leader):
                self._receive(leader)
        now = time.monotonic()
        limit = self.timeout_ms / 1000 + ANSWER_GRACE_S
        for leader, f in list(self.inflight.items()):
            if f and now - f[0][2] > limit:
                self._connection_failed(
                    leader,
                    f"no answer from broker {leader} within {limit:g} s "
                    f"(request.timeout.ms {self.timeout_ms} + {ANSWER_GRACE_S:g} s)",
                )

    def _receive(self, leader: int) -> None:
        conn, parts, _sent = self.inflight[leader].popleft()
        try:
            resp = conn.receive(self.timeout_ms / 1000 + ANSWER_GRACE_S)
        except ClientError as exc:
            self._connection_failed(leader, str(exc), parts)
            return
        results = {(t.name, pr.index): pr for t in resp.responses for pr in t.partition_responses}
        failed: list[_Batch] = []
        code = 0
        for b in parts:
            pr = results.get(b.tp)
            if pr is None:
                failed.append(b)
                code = code or ErrorCode.UNKNOWN_SERVER_ERROR
            elif pr.error_code:
                if pr.error_code not in RETRIABLE:
                    raise KafkaProtocolError(
                        pr.error_code,
                        f"{self.what} to {b.tp[0]}-{b.tp[1]}" + (f": {pr.error_message}" if pr.error_message else ""),
                    )
                failed.append(b)
                code = code or pr.error_code
            else:
                self.on_ack(b.tp, b.count, pr.base_offset)
        if failed:
            self._requeue(failed, code, f"{ErrorCode(code).name} from broker {leader}", leader)

    def _connection_failed(self, leader: int, why: str, parts: list[_Batch] | None = None) -> None:
        """The connection to `leader` is gone: `parts` and everything in flight on it go again."""
        self.cluster.drop_connection(leader)
        flight = self.inflight.pop(leader, None) or ()
        batches = list(parts or []) + [b for _, ps, _ in flight for b in ps]
        if batches:
            self._requeue(batches, ErrorCode.NETWORK_EXCEPTION, why, leader)

    def _requeue(self, batches: list[_Batch], code: int, why: str, leader: int) -> None:
        """Back to the front of their partitions' queues, in the order they were sent,
        each after its backoff (or as soon as the metadata names another leader than
        `leader`, where they failed); their topics' metadata is refreshed first."""
        now = time.monotonic()
        for b in reversed(batches):
            b.attempts += 1
            b.error = why
            b.failed_on = leader
            if b.attempts > self.retries:
                raise KafkaProtocolError(
                    code, f"{self.what} to {b.tp[0]}-{b.tp[1]} failed after {b.attempts} attempts ({why})"
                )
            b.retry_at = now + self._backoff(b.attempts)
            self.queues.setdefault(b.tp, deque()).appendleft(b)
            self._queued_bytes += len(b.data)
            self._stale.add(b.tp[0])
        self.retried += len(batches)
        log.info("%s: retrying %d batch(es): %s", self.what, len(batches), why)

    def _backoff(self, attempts: int) -> float:
        """Kafka's ExponentialBackoff: retry.backoff.ms doubling per attempt up to
        retry.backoff.max.ms, +-20 % jitter; seconds."""
        ms = min(self.retry_backoff_ms * 2 ** min(attempts - 1, 30), self.retry_backoff_max_ms)
        return ms * random.uniform(0.8, 1.2) / 1000

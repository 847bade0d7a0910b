"""The sink's exactly-once delivery (docs/spark-transactions.md): one Kafka transaction per
Spark task and micro-batch, committed by the driver once Spark commits the batch.

Tasks (executors): transactional.id "<query id>-<Spark partition id>"; InitProducerId
bumps the epoch (fencing, and aborting what an earlier attempt of the task left open);
AddPartitionsToTxn before the first batch to a partition; batches carry the producer id,
epoch, per-partition sequences and the transactional bit; the task flushes and returns
(transactional.id, producer id, epoch) without committing.

Driver: commit(B) first records B and its transactions in the *sink log* (a compacted
topic, one record per query: key = query id, value = JSON {"batch": B, "transactions":
[[id, producer id, epoch], ...]}, acks=all), then sends EndTxn(commit) for each (a
retried commit of a committed transaction answers success). A replay of B after a crash
(Spark's commit log lacks B): tasks that find B in the sink log write nothing (their
InitProducerId would abort the prepared transactions) and the driver commits the
recorded ones again. abort(B): EndTxn(abort) for each transaction of the messages.

Every request is retried on the coordinator's retriable answers (CONCURRENT_TRANSACTIONS
while a fence's abort completes, NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...)
within the sink's request timeout.
"""
from __future__ import annotations

import json
import logging
import time
from typing import Any

from broker.client import Cluster, Consumer
from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from broker.protocol.messages.end_txn import EndTxnRequest
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.retriable import RETRIABLE

log = logging.getLogger("broker.spark")

SINK_LOG_TOPIC = "kbroker-spark-sink-log"
TRANSACTION_TIMEOUT_MS = 60000
_RETRY = frozenset(RETRIABLE | {ErrorCode.CONCURRENT_TRANSACTIONS})
_BACKOFF_S = 0.1

#: (transactional id, producer id, epoch)
Transaction = tuple[str, int, int]


class Coordinator:
    """Requests to the transaction coordinator of one transactional id."""

    def __init__(self, cluster: Cluster, txn_id: str, timeout_s: float):
        self.cluster = cluster
        self.txn_id = txn_id
        self.timeout_s = timeout_s
        self._conn: BrokerConnection | None = None

    def _connection(self) -> BrokerConnection:
        if self._conn is None:
            conn = self.cluster.any_connection()
            version = min(conn.version_for(FindCoordinatorRequest.API_KEY), 3)
            r = conn.request(FindCoordinatorRequest(key=self.txn_id, key_type=1), version)
            if r.error_code:
                raise KafkaProtocolError(r.error_code, f"find the coordinator of {self.txn_id}")
            self.cluster.refresh([])
            self._conn = self.cluster.connection(r.node_id)
        return self._conn

    def call(self, request: Any, error_of, what: str, max_version: int | None = None) -> Any:
        """Sends until the answer is not retriable (within the timeout); returns it, or
        raises KafkaProtocolError with its error."""
        deadline = time.monotonic() + self.timeout_s
        while True:
            try:
                conn = self._connection()
                version = None
                if max_version is not None:
                    version = min(conn.version_for(request.API_KEY), max_version)
                resp = conn.request(request, version)
                code = error_of(resp)
            except ClientError as exc:
                self._drop()
                if time.monotonic() > deadline:
                    raise ClientError(f"kbroker sink: {what} of {self.txn_id}: {exc}") from None
                time.sleep(_BACKOFF_S)
                continue
            except KafkaProtocolError as exc:     # from FindCoordinator
                code, resp = exc.code, None
            if not code:
                return resp
            if code not in _RETRY or time.monotonic() > deadline:
                raise KafkaProtocolError(code, f"kbroker sink: {what} of {self.txn_id}")
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self._drop()
            time.sleep(_BACKOFF_S)

    def _drop(self) -> None:
        self._conn = None
        try:
            self.cluster.refresh([])
        except ClientError:
            pass

    def init_producer_id(self, timeout_ms: int) -> tuple[int, int]:
        r = self.call(InitProducerIdRequest(transactional_id=self.txn_id, transaction_timeout_ms=timeout_ms,
                                            producer_id=-1, producer_epoch=-1),
                      lambda r: r.error_code, "InitProducerId")
        return r.producer_id, r.producer_epoch

    def add_partitions(self, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> None:
        A = AddPartitionsToTxnRequest
        by: dict[str, list[int]] = {}
        for t, p in partitions:
            by.setdefault(t, []).append(p)
        req = A(v3_and_below_transactional_id=self.txn_id, v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by.items()])

        def error_of(r):
            codes = {pr.partition_error_code for t in r.results_by_topic_v3_and_below
                     for pr in t.results_by_partition}
            codes.discard(0)
            codes.discard(ErrorCode.OPERATION_NOT_ATTEMPTED)
            return min(codes) if codes else 0
        # v4+ is the brokers' batched form: a producer speaks v3 and below
        self.call(req, error_of, "AddPartitionsToTxn", max_version=3)

    def end(self, pid: int, epoch: int, commit: bool) -> None:
        self.call(EndTxnRequest(transactional_id=self.txn_id, producer_id=pid, producer_epoch=epoch,
                                committed=commit), lambda r: r.error_code, "EndTxn")


class TransactionalSequencer:
    """A task's transaction: the producer id, epoch and per-partition sequences its
    batches carry, and the partitions added so far."""

    def __init__(self, cluster: Cluster, txn_id: str, timeout_s: float, txn_timeout_ms: int):
        self.coordinator = Coordinator(cluster, txn_id, timeout_s)
        self.txn_id = txn_id
        self.producer_id, self.epoch = self.coordinator.init_producer_id(txn_timeout_ms)
        self.sequences: dict[str, dict[int, int]] = {}
        self.added: set[tuple[str, int]] = set()

    def add(self, topic: str, partitions: set[int]) -> None:
        new = sorted((topic, p) for p in partitions if (topic, p) not in self.added)
        if new:
            self.coordinator.add_partitions(self.producer_id, self.epoch, new)
            self.added.update(new)

    @property
    def transaction(self) -> Transaction:
        return (self.txn_id, self.producer_id, self.epoch)


# ---------------------------------------------------------------- the sink log


def ensure_sink_log(cluster: Cluster) -> None:
    try:
        cluster.topic(SINK_LOG_TOPIC)
        return
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
    rf = min(3, max(len(cluster.brokers), 1))
    try:
        cluster.create_topic(SINK_LOG_TOPIC, 1, rf, {"cleanup.policy": "compact",
                                                     "min.insync.replicas": str(min(2, rf))})
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    cluster.topic(SINK_LOG_TOPIC, wait_s=10.0)


def recorded(cluster: Cluster, query_id: str, batch_id: int) -> list[Transaction] | None:
    """The transactions the sink log records for the query's micro-batch, or None."""
    try:
        meta = cluster.topic(SINK_LOG_TOPIC)
    except KafkaProtocolError:
        return None
    ends = cluster.list_offsets(SINK_LOG_TOPIC, sorted(meta.partitions), -1)
    found = None
    with Consumer(cluster, max_wait_ms=100, auto_offset_reset="earliest") as c:
        c.assign(SINK_LOG_TOPIC, sorted(meta.partitions), {p: 0 for p in meta.partitions})
        deadline = time.monotonic() + 30
        while any(c.positions[(SINK_LOG_TOPIC, p)] < ends[p][0] for p in meta.partitions):
            if time.monotonic() > deadline:
                raise ClientError("kbroker sink: reading the sink log timed out")
            for r in c.poll(0.5):
                if r.key == query_id.encode() and r.value is not None:
                    found = json.loads(r.value)
    if found is None or found.get("batch") != batch_id:
        return None
    return [(str(t[0]), int(t[1]), int(t[2])) for t in found["transactions"]]


def record(cluster: Cluster, query_id: str, batch_id: int, txns: list[Transaction]) -> None:
    """Appends (acks=all) the batch's transactions under the query's key."""
    from broker.native import BatchBuilder
    from broker.protocol.messages.produce import ProduceRequest as P
    b = BatchBuilder()
    b.append(int(time.time() * 1000), query_id.encode(),
             json.dumps({"batch": batch_id, "transactions": [list(t) for t in txns]}).encode())
    data = b.build()
    deadline = time.monotonic() + 60
    while True:
        try:
            conn = cluster.leader_connection(SINK_LOG_TOPIC, 0)
            r = conn.request(P(transactional_id=None, acks=-1, timeout_ms=30000, topic_data=[P.TopicProduceData(
                name=SINK_LOG_TOPIC, partition_data=[P.PartitionProduceData(index=0, records=data)])]))
            code = r.responses[0].partition_responses[0].error_code
        except ClientError as exc:
            code, why = ErrorCode.NETWORK_EXCEPTION, str(exc)
        else:
            why = ""
        if not code:
            return
        if code not in RETRIABLE or time.monotonic() > deadline:
            raise KafkaProtocolError(code, f"kbroker sink: recording batch {batch_id} in the sink log {why}")
        time.sleep(_BACKOFF_S)
        try:
            cluster.refresh([SINK_LOG_TOPIC])
        except ClientError:
            pass


def end_all(cluster: Cluster, txns: list[Transaction], commit: bool, timeout_s: float) -> None:
    for txn_id, pid, epoch in txns:
        Coordinator(cluster, txn_id, timeout_s).end(pid, epoch, commit)

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

Every request is retried, as Kafka's producer retries, within the sink's
kafka.delivery.timeout.ms: a coordinator or a sink log leader that cannot be reached (a
broker killed, until its partitions have new leaders), and the retriable answers
(CONCURRENT_TRANSACTIONS while a fence's abort completes, NOT_COORDINATOR,
COORDINATOR_LOAD_IN_PROGRESS, NOT_LEADER_OR_FOLLOWER, ...).
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
_BACKOFF_S = 0.1  # Kafka's retry.backoff.ms
_BACKOFF_MAX_S = 1.0  # and retry.backoff.max.ms

#: (transactional id, producer id, epoch)
Transaction = tuple[str, int, int]


class Coordinator:
    """Requests to the transaction coordinator of one transactional id.

    A coordinator that cannot be reached (its broker killed, the partition of
    __transaction_state it leads not yet moved) or that answers a retriable error is an
    outage, retried as Kafka's producer retries, until `timeout_s` (the sink's
    kafka.delivery.timeout.ms) has passed: FindCoordinator again and the request again,
    retry.backoff.ms apart at first, doubling up to retry.backoff.max.ms. Giving up, the
    error names the coordinator and what it last answered."""

    def __init__(
        self,
        cluster: Cluster,
        txn_id: str,
        timeout_s: float,
        backoff_s: float = _BACKOFF_S,
        backoff_max_s: float = _BACKOFF_MAX_S,
    ):
        self.cluster = cluster
        self.txn_id = txn_id
        self.timeout_s = timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = max(backoff_s, backoff_max_s)
        self._conn: BrokerConnection | None = None
        self.node: int | None = None  # the coordinator FindCoordinator last named

    def _connection(self) -> BrokerConnection:
        if self._conn is None or self._conn.closed:
            conn = self.cluster.any_connection()
            version = min(conn.version_for(FindCoordinatorRequest.API_KEY), 3)
            r = conn.request(FindCoordinatorRequest(key=self.txn_id, key_type=1), version)
            if r.error_code:
                raise KafkaProtocolError(r.error_code, f"find the coordinator of {self.txn_id}")
            self.node = r.node_id
            self.cluster.refresh([])
            self._conn = self.cluster.connection(r.node_id)
        return self._conn

    def where(self) -> str:
        """The coordinator, for a message."""
        if self.node is None:
            return "not found"
        host, port = self.cluster.brokers.get(self.node, ("?", 0))
        return f"broker {self.node} at {host}:{port}"

    def call(self, request: Any, error_of, what: str, max_version: int | None = None) -> Any:
        """Sends until the answer is not retriable (within the timeout); returns it, or
        raises KafkaProtocolError with its error (ClientError when the coordinator could
        not be reached for the whole timeout)."""
        deadline = time.monotonic() + self.timeout_s
        backoff = self.backoff_s
        while True:
            try:
                conn = self._connection()
                version = None
                if max_version is not None:
                    version = min(conn.version_for(request.API_KEY), max_version)
                resp = conn.request(request, version)
                code = error_of(resp)
            except ClientError as exc:
                where = self.where()
                self._drop()
                if time.monotonic() > deadline:
                    raise ClientError(
                        f"kbroker sink: {what} of transactional id {self.txn_id}: its transaction "
                        f"coordinator ({where}) could not be reached for {self.timeout_s:g} s "
                        f"(kafka.delivery.timeout.ms); last: {exc}"
                    ) from None
                log.info(
                    "kbroker sink: %s of %s: coordinator %s unreachable (%s); retrying", what, self.txn_id, where, exc
                )
                time.sleep(backoff)
                backoff = min(backoff * 2, self.backoff_max_s)
                continue
            except KafkaProtocolError as exc:  # from FindCoordinator
                code, resp = exc.code, None
            if not code:
                return resp
            if code not in _RETRY or time.monotonic() > deadline:
                waited = f" (retried for {self.timeout_s:g} s, kafka.delivery.timeout.ms)" if code in _RETRY else ""
                raise KafkaProtocolError(
                    code,
                    f"kbroker sink: {what} of transactional id {self.txn_id} at its "
                    f"coordinator ({self.where()}){waited}",
                )
            if code in (ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE):
                self._drop()
            time.sleep(backoff)
            backoff = min(backoff * 2, self.backoff_max_s)

    def _drop(self) -> None:
        if self._conn is not None and self.node is not None:
            self.cluster.drop_connection(self.node)
        self._conn = None
        try:
            self.cluster.refresh([])
        except ClientError:
            pass

    def init_producer_id(self, timeout_ms: int) -> tuple[int, int]:
        r = self.call(
            InitProducerIdRequest(
                transactional_id=self.txn_id, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1
            ),
            lambda r: r.error_code,
            "InitProducerId",
        )
        return r.producer_id, r.producer_epoch

    def add_partitions(self, pid: int, epoch: int, partitions: list[tuple[str, int]]) -> None:
        A = AddPartitionsToTxnRequest
        by: dict[str, list[int]] = {}
        for t, p in partitions:
            by.setdefault(t, []).append(p)
        req = A(
            v3_and_below_transactional_id=self.txn_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by.items()],
        )

        def error_of(r):
            codes = {pr.partition_error_code for t in r.results_by_topic_v3_and_below for pr in t.results_by_partition}
            codes.discard(0)
            codes.discard(ErrorCode.OPERATION_NOT_ATTEMPTED)
            return min(codes) if codes else 0

        # v4+ is the brokers' batched form: a producer speaks v3 and below
        self.call(req, error_of, "AddPartitionsToTxn", max_version=3)

    def end(self, pid: int, epoch: int, commit: bool) -> None:
        self.call(
            EndTxnRequest(transactional_id=self.txn_id, producer_id=pid, producer_epoch=epoch, committed=commit),
            lambda r: r.error_code,
            "EndTxn",
        )


class TransactionalSequencer:
    """A task's transaction: the producer id, epoch and per-partition sequences its
    batches carry, and the partitions added so far."""

    def __init__(
        self,
        cluster: Cluster,
        txn_id: str,
        timeout_s: float,
        txn_timeout_ms: int,
        backoff_s: float = _BACKOFF_S,
        backoff_max_s: float = _BACKOFF_MAX_S,
    ):
        self.coordinator = Coordinator(cluster, txn_id, timeout_s, backoff_s, backoff_max_s)
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


def retrying(what: str, timeout_s: float, fn, backoff_s: float = _BACKOFF_S, backoff_max_s: float = _BACKOFF_MAX_S):
    """fn() again after a network failure or a retriable error (a broker down, a leader
    being elected), backoff_s apart at first, doubling up to backoff_max_s, until
    timeout_s has passed; then the last error, saying what was tried and for how long."""
    deadline = time.monotonic() + timeout_s
    backoff = backoff_s
    while True:
        try:
            return fn()
        except (ClientError, KafkaProtocolError) as exc:
            if isinstance(exc, KafkaProtocolError) and exc.code not in _RETRY:
                raise
            if time.monotonic() > deadline:
                if isinstance(exc, KafkaProtocolError):
                    raise KafkaProtocolError(
                        exc.code, f"kbroker sink: {what} (retried for {timeout_s:g} s, kafka.delivery.timeout.ms)"
                    ) from None
                raise ClientError(
                    f"kbroker sink: {what}: no broker answered for {timeout_s:g} s "
                    f"(kafka.delivery.timeout.ms); last: {exc}"
                ) from None
            log.info("kbroker sink: %s: %s; retrying", what, exc)
            time.sleep(backoff)
            backoff = min(backoff * 2, max(backoff_s, backoff_max_s))


TXN_STATE_TOPIC = "__transaction_state"


def sink_log_replicas(cluster: Cluster) -> int:
    """The sink log's replication factor: that of the brokers' own transaction log
    (transaction.state.log.replication.factor, as the cluster applied it), which the
    query's transactions already depend on; min(3, brokers alive) without one. Not the
    brokers alive alone: a sink log created while a broker is down would keep fewer
    replicas than the cluster has, and the next broker down would leave it below
    min.insync.replicas."""
    meta = cluster.refresh([TXN_STATE_TOPIC]).get(TXN_STATE_TOPIC)
    if meta is not None and meta.error_code == 0 and meta.partitions:
        return max(len(p.replicas) for p in meta.partitions.values())
    return min(3, max(len(cluster.brokers), 1))


def ensure_sink_log(cluster: Cluster) -> None:
    try:
        cluster.topic(SINK_LOG_TOPIC)
        return
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
    rf = sink_log_replicas(cluster)
    try:
        cluster.create_topic(
            SINK_LOG_TOPIC, 1, rf, {"cleanup.policy": "compact", "min.insync.replicas": str(min(2, rf))}
        )
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    cluster.topic(SINK_LOG_TOPIC, wait_s=10.0)


#: the first window of the sink log read back from its end (records); each next one is
#: four times larger
_FIRST_WINDOW = 64


def recorded(cluster: Cluster, query_id: str, batch_id: int, deadline: float) -> list[Transaction] | None:
    """The transactions the sink log records for the query's micro-batch, or None.

    Only the query's last record can be batch_id's: the driver records a batch before it
    commits it, and Spark plans the next batch only after that. So the log is read
    backwards from its end, in windows of 64, 256, 1024 ... records, until a record of
    the query turns up: a check costs the records written since the query's last batch
    (other queries'), not the length of the log. ClientError past `deadline` (monotonic)
    when the log's leader does not answer."""
    try:
        cluster.topic(SINK_LOG_TOPIC)
    except KafkaProtocolError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return None
        raise
    start = cluster.list_offsets(SINK_LOG_TOPIC, [0], -2)[0][0]
    hi = cluster.list_offsets(SINK_LOG_TOPIC, [0], -1)[0][0]
    key = query_id.encode()
    window = _FIRST_WINDOW
    with Consumer(cluster, max_wait_ms=100, auto_offset_reset="earliest") as c:
        while hi > start:
            lo = max(start, hi - window)
            last = None
            c.assign(SINK_LOG_TOPIC, [0], {0: lo})
            while c.positions[(SINK_LOG_TOPIC, 0)] < hi:
                if time.monotonic() > deadline:
                    raise ClientError(
                        f"reading {SINK_LOG_TOPIC} from offset {c.positions[(SINK_LOG_TOPIC, 0)]}: "
                        f"its leader did not answer"
                    )
                for r in c.poll(0.5):
                    if r.offset < hi and r.key == key:
                        last = r
            if last is not None:
                if last.value is None:
                    return None
                found = json.loads(last.value)
                if found.get("batch") != batch_id:
                    return None
                return [(str(t[0]), int(t[1]), int(t[2])) for t in found["transactions"]]
            hi, window = lo, window * 4
    return None


def record(cluster: Cluster, query_id: str, batch_id: int, txns: list[Transaction], timeout_ms: int = 30000) -> None:
    """Appends (acks=all) the batch's transactions under the query's key, once (callers
    retry it: see retrying)."""
    from broker.native import BatchBuilder
    from broker.protocol.messages.produce import ProduceRequest as P

    b = BatchBuilder()
    b.append(
        int(time.time() * 1000),
        query_id.encode(),
        json.dumps({"batch": batch_id, "transactions": [list(t) for t in txns]}).encode(),
    )
    data = b.build()
    try:
        conn = cluster.leader_connection(SINK_LOG_TOPIC, 0)
        r = conn.request(
            P(
                transactional_id=None,
                acks=-1,
                timeout_ms=timeout_ms,
                topic_data=[
                    P.TopicProduceData(
                        name=SINK_LOG_TOPIC, partition_data=[P.PartitionProduceData(index=0, records=data)]
                    )
                ],
            )
        )
    except ClientError:
        cluster.refresh([SINK_LOG_TOPIC])  # the leader is down: the next attempt asks again
        raise
    code = r.responses[0].partition_responses[0].error_code
    if code:
        if code in RETRIABLE:
            cluster.refresh([SINK_LOG_TOPIC])
        raise KafkaProtocolError(code, f"recording batch {batch_id} in the sink log")


def end_all(
    cluster: Cluster,
    txns: list[Transaction],
    commit: bool,
    timeout_s: float,
    backoff_s: float = _BACKOFF_S,
    backoff_max_s: float = _BACKOFF_MAX_S,
) -> None:
    for txn_id, pid, epoch in txns:
        Coordinator(cluster, txn_id, timeout_s, backoff_s, backoff_max_s).end(pid, epoch, commit)

"""The sink: batch (DataSourceArrowWriter) and streaming (DataSourceStreamArrowWriter)
writes to topics, with the columns of Spark's Kafka sink:

    topic      string               optional; the `topic` option, when given, overrides it
    key        string or binary     optional (null: no key)
    value      string or binary     required (null: a tombstone)
    headers    array<struct<key: string, value: binary>>   optional
    partition  int                  optional; else Kafka's default partitioner (murmur2 of
                                    the key; rows without a key stick to one partition per
                                    Arrow batch, rotating)

Other columns are ignored. Each task encodes its Arrow batches into record batches in
native code (broker._native.spark_encode: partitioning, record framing, CRC — no Python
per row) and produces them to the partition leaders, up to
kbroker.max.in.flight.requests.per.connection requests in flight per broker, one batch
per partition per request (as Kafka's produce protocol wants). A task returns only once
every batch is acknowledged (kbroker.acks, default all), so a committed Spark job has
all its rows in the log.

Delivery guarantee: at-least-once, as Spark's own Kafka sink. A task that fails after
some of its batches were acknowledged, or a micro-batch replayed after a crash, writes
those rows again. The delivery is a seam (class Delivery): a task's writes go through
Delivery.task_writer(), and the driver's commit(messages, batchId) through
Delivery.commit(); exactly-once plugs in there with broker transactions (see
TRANSACTIONAL_DESIGN below). Asking for deliveryGuarantee=exactly-once today fails at
query start with a message saying why, after probing the broker (InitProducerId with a
transactional id).
"""
from __future__ import annotations

import logging
import os
import time
from collections import deque

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from broker._native.spark_encode import assign_partitions, encode_batches
from broker.client import Cluster
from broker.client.connection import ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.messages.produce import ProduceRequest
from broker.spark import offsets as _offsets
from broker.spark.options import DELIVERY_EXACTLY_ONCE, KBrokerOptionError, SinkOptions

log = logging.getLogger("broker.spark")

RETRIABLE = {ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE, ErrorCode.REQUEST_TIMED_OUT,
             ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
             ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, ErrorCode.NETWORK_EXCEPTION, ErrorCode.KAFKA_STORAGE_ERROR}

TRANSACTIONAL_DESIGN = """
Exactly-once per batchId, with broker transactions (Kafka's KIP-98 protocol). The sink
switches to it once the broker has a transaction coordinator (InitProducerId with a
transactional id, AddPartitionsToTxn, EndTxn, transaction markers, the last stable
offset); everything on the sink's side is in place or named here.

Why transactions: a replayed micro-batch is a new run of Spark tasks that may cut the
rows into different record batches and partitions, so neither offsets nor idempotent
sequence numbers can tell "already written" rows apart; what makes a batch's rows
visible has to be one atomic decision, taken once per batchId.

task (executor) of micro-batch B (task_identity(): the "streaming.sql.batchId" local
property), Spark partition i:
  transactional.id = "<query id>-<i>" (query id: the "sql.streaming.queryId" local
  property); InitProducerId bumps the epoch, which fences and aborts whatever an earlier
  attempt of task i left open; AddPartitionsToTxn for the partitions it writes; produce
  with producer id, epoch, per-partition sequences and the transactional bit
  (spark_encode.encode_batches(producer_id=, producer_epoch=, sequences=,
  transactional=True) already writes them); flush, but do not commit. The commit message
  carries (transactional.id, producer id, epoch) and B (KBrokerCommitMessage.transaction,
  .batch_id).
driver, commit(messages, B):
  1. append "B: [(transactional.id, producer id, epoch), ...]" to the sink log, a
     compacted topic keyed by query id (acks=all), then
  2. EndTxn(commit) for each recorded transaction. Committing a transaction that is
     already committed with the same producer id and epoch answers success (as Kafka's
     coordinator does for a retried EndTxn), so step 2 can be repeated.
abort(messages, B): EndTxn(abort) for each transaction in the messages.
replay of B after a crash (Spark's commit log lacks B):
  - crash before step 1: the replayed tasks' InitProducerId aborts the old open
    transactions and B is written afresh. (Transactional ids of the old run that the
    replay does not reuse, e.g. after a change of partition count, are aborted by the
    driver at query start from the ids it finds prepared, or by transaction.timeout.ms.)
  - crash after step 1: the sink log has B, so the replay's tasks write nothing (they
    read the sink log and return an empty message) and the driver re-does step 2 with
    the recorded ids.
Readers see B's rows exactly once when they read committed data only: Kafka consumers
with isolation.level=read_committed, and the kbroker source, which then fetches with
isolation_level=1 up to the last stable offset and drops aborted transactions' batches
(the Fetch response's aborted_transactions: producer id and first offset).
"""


class KBrokerCommitMessage(WriterCommitMessage):
    """What a task wrote: per (topic, partition) [records, first base offset, last base
    offset]; `transaction` is for the transactional delivery (None: at-least-once)."""

    def __init__(self, records: int, partitions: dict, transaction=None, batch_id: int | None = None,
                 task: tuple[int, int] | None = None):
        self.records = records
        self.partitions = partitions
        self.transaction = transaction
        self.batch_id = batch_id          # the micro-batch (streaming), from the task's context
        self.task = task                  # (Spark partition id, attempt)

    def __repr__(self) -> str:
        return (f"KBrokerCommitMessage(batch {self.batch_id}, task {self.task}: {self.records} records, "
                f"{len(self.partitions)} partitions)")


# ---------------------------------------------------------------- schema checks


def check_schema(schema, opts: SinkOptions) -> None:
    """Spark's KafkaWriter.validateQuery: fails at query start, naming the column."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType
    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if opts.topic is None:
        if "topic" not in fields:
            raise KBrokerOptionError("topic", "must be specified when the data has no 'topic' column "
                                              "(the topic to write each row to)")
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise KBrokerOptionError("topic", f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "value" not in fields:
        raise ValueError("kbroker sink: the data needs a 'value' column (string or binary)")
    for name in ("key", "value"):
        if name in fields and not isinstance(fields[name], (StringType, BinaryType)):
            raise ValueError(f"kbroker sink: column '{name}' must be a string or binary, not "
                             f"{fields[name].simpleString()}")
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError(f"kbroker sink: column 'partition' must be an int, not "
                         f"{fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (isinstance(t, ArrayType) and isinstance(t.elementType, StructType)
              and [f.name.lower() for f in t.elementType.fields] == ["key", "value"]
              and isinstance(t.elementType.fields[0].dataType, StringType)
              and isinstance(t.elementType.fields[1].dataType, BinaryType))
        if not ok:
            raise ValueError(f"kbroker sink: column 'headers' must be array<struct<key: string, value: binary>>, "
                             f"not {t.simpleString()}")


# ---------------------------------------------------------------- Arrow columns -> native


def _column(rb: pa.RecordBatch, name: str):
    names = [n.lower() for n in rb.schema.names]
    return rb.column(names.index(name)) if name in names else None


def _binary_desc(arr):
    if arr is None:
        return None
    if pa.types.is_large_binary(arr.type):
        arr = arr.cast(pa.binary())
    elif pa.types.is_large_string(arr.type):
        arr = arr.cast(pa.string())
    b = arr.buffers()
    return (b[0] if arr.null_count else None, b[1], b[2], arr.offset)


def _headers_desc(arr):
    if arr is None:
        return None
    if pa.types.is_large_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_field))
    b = arr.buffers()
    values = arr.values
    return (b[0] if arr.null_count else None, b[1], arr.offset,
            _binary_desc(values.field(0)), _binary_desc(values.field(1)))


def _int32_desc(arr):
    if arr is None:
        return None
    if arr.type != pa.int32():
        arr = arr.cast(pa.int32())
    b = arr.buffers()
    return (b[0] if arr.null_count else None, b[1], arr.offset)


# ---------------------------------------------------------------- producing


class _Sender:
    """Produce requests to the partition leaders, pipelined: at most max_in_flight per
    connection, one batch per partition per request; retriable errors are retried."""

    def __init__(self, cluster: Cluster, opts: SinkOptions, transactional_id: str | None = None):
        self.cluster = cluster
        self.o = opts
        self.transactional_id = transactional_id
        self.queues: dict[tuple[str, int], deque] = {}      # tp -> deque[(data, count, attempts)]
        self.inflight: dict[int, deque] = {}                 # leader -> deque[(conn, [(tp, data, count, attempts)])]
        self.written: dict[tuple[str, int], list] = {}       # tp -> [records, first base, last base]
        self.records = 0

    def add(self, topic: str, partition: int, data: bytes, count: int) -> None:
        self.queues.setdefault((topic, partition), deque()).append((data, count, 0))
        self._pump(block=False)

    def flush(self) -> None:
        deadline = time.monotonic() + self.o.timeout_ms / 1000 * (self.o.retries + 2)
        while any(self.queues.values()) or any(self.inflight.values()):
            self._pump(block=True)
            if time.monotonic() > deadline:
                raise ClientError("kbroker sink: records not acknowledged within "
                                  "kbroker.request.timeout.ms x (kbroker.retries + 2)")

    def _leader(self, tp) -> int:
        meta = self.cluster.topics.get(tp[0]) or self.cluster.topic(tp[0], wait_s=5.0)
        pm = meta.partitions.get(tp[1])
        if pm is None:
            raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{tp[0]}-{tp[1]}")
        return pm.leader

    def _pump(self, block: bool) -> None:
        """Sends what the in-flight limits allow. Non-blocking: receives only while a
        leader with queued batches is saturated (so add() bounds the memory held);
        blocking: also waits for one response."""
        while True:
            waiting_leaders = self._send_ready()
            if block:
                for leader, flight in self.inflight.items():
                    if flight:
                        self._receive(leader)
                        break
                return
            saturated = [leader for leader in waiting_leaders
                         if len(self.inflight.get(leader, ())) >= self.o.max_in_flight]
            if not saturated:
                return
            self._receive(saturated[0])

    def _send_ready(self) -> set:
        """One request per leader and free in-flight slot; the leaders still with queued
        batches afterwards."""
        by_leader: dict[int, list] = {}
        for tp, q in self.queues.items():
            if q:
                by_leader.setdefault(self._leader(tp), []).append(tp)
        waiting = set()
        for leader, tps in by_leader.items():
            flight = self.inflight.setdefault(leader, deque())
            while len(flight) < self.o.max_in_flight:
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

    def _send(self, leader: int, parts: list) -> None:
        topics: dict[str, list] = {}
        for (t, p), data, _, _ in parts:
            topics.setdefault(t, []).append(ProduceRequest.PartitionProduceData(index=p, records=data))
        req = ProduceRequest(transactional_id=self.transactional_id, acks=self.o.acks, timeout_ms=self.o.timeout_ms,
                             topic_data=[ProduceRequest.TopicProduceData(name=t, partition_data=ps)
                                         for t, ps in topics.items()])
        try:
            conn = self.cluster.connection(leader)
            conn.send(req, expect_response=self.o.acks != 0)
        except ClientError as exc:
            self.cluster.drop_connection(leader)
            self._requeue(parts, ErrorCode.NETWORK_EXCEPTION, str(exc))
            return
        if self.o.acks == 0:
            for tp, _, count, _ in parts:
                self._done(tp, count, -1)
            return
        self.inflight.setdefault(leader, deque()).append((conn, parts))

    def _receive(self, leader: int) -> None:
        conn, parts = self.inflight[leader].popleft()
        try:
            resp = conn.receive(self.o.timeout_ms / 1000 + 5)
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
                    raise KafkaProtocolError(pr.error_code, f"kbroker sink: produce to {tp[0]}-{tp[1]}"
                                             + (f": {pr.error_message}" if pr.error_message else ""))
                failed.append((tp, data, count, attempts))
            else:
                self._done(tp, count, pr.base_offset)
        if failed:
            self._requeue(failed, ErrorCode.NOT_LEADER_OR_FOLLOWER, "retriable error")

    def _requeue(self, parts, code, why) -> None:
        topics = set()
        for tp, data, count, attempts in reversed(parts):
            if attempts >= self.o.retries:
                raise KafkaProtocolError(code, f"kbroker sink: produce to {tp[0]}-{tp[1]} failed after "
                                               f"{attempts + 1} attempts ({why})")
            self.queues.setdefault(tp, deque()).appendleft((data, count, attempts + 1))
            topics.add(tp[0])
        log.info("kbroker sink: retrying %d batch(es): %s", len(parts), why)
        time.sleep(0.1)
        try:
            self.cluster.refresh(sorted(topics))
        except ClientError:
            pass

    def _done(self, tp, count: int, base_offset: int) -> None:
        w = self.written.get(tp)
        if w is None:
            self.written[tp] = [count, base_offset, base_offset]
        else:
            w[0] += count
            w[2] = max(w[2], base_offset)
            if w[1] < 0 or 0 <= base_offset < w[1]:
                w[1] = base_offset
        self.records += count


class TaskWriter:
    """Writes one task's Arrow batches (at-least-once)."""

    def __init__(self, opts: SinkOptions, transactional_id: str | None = None):
        self.o = opts
        self.cluster = _connect(opts)
        self.sender = _Sender(self.cluster, opts, transactional_id)
        self._partitions: dict[str, int] = {}
        self._sticky = int.from_bytes(os.urandom(2), "little")

    def _num_partitions(self, topic: str) -> int:
        n = self._partitions.get(topic)
        if n is None:
            try:
                meta = self.cluster.topic(topic, wait_s=5.0, allow_auto_create=True)
            except KafkaProtocolError as exc:
                raise KafkaProtocolError(exc.code, f"kbroker sink: topic {topic!r}") from None
            n = self._partitions[topic] = len(meta.partitions)
        return n

    def write_batch(self, rb: pa.RecordBatch) -> None:
        if rb.num_rows == 0:
            return
        if self.o.topic is not None:
            self._write_topic(self.o.topic, rb)
            return
        topics = _column(rb, "topic")
        if topics.null_count:
            raise ValueError("kbroker sink: null topic present in the data; use the 'topic' option to set a "
                             "default topic")
        import pyarrow.compute as pc
        uniques = pc.unique(topics).to_pylist()           # a few distinct values, not per row
        if len(uniques) == 1:
            self._write_topic(uniques[0], rb)
            return
        for t in uniques:
            self._write_topic(t, rb.filter(pc.equal(topics, t)))

    def _write_topic(self, topic: str, rb: pa.RecordBatch) -> None:
        n = rb.num_rows
        num = self._num_partitions(topic)
        key = _binary_desc(_column(rb, "key"))
        self._sticky += 1
        parts = assign_partitions(n, num, key, _int32_desc(_column(rb, "partition")), self._sticky % num)
        batches = encode_batches(n, parts, key, _binary_desc(_column(rb, "value")),
                                 _headers_desc(_column(rb, "headers")), int(time.time() * 1000),
                                 self.o.compression, self.o.batch_bytes)
        for p, data, count in batches:
            self.sender.add(topic, p, data, count)

    def finish(self) -> KBrokerCommitMessage:
        try:
            self.sender.flush()
        finally:
            self.cluster.close()
        return KBrokerCommitMessage(self.sender.records,
                                    {tp: tuple(w) for tp, w in sorted(self.sender.written.items())})

    def close(self) -> None:
        self.cluster.close()


# ---------------------------------------------------------------- delivery guarantees


class Delivery:
    """At-least-once: tasks produce and wait for the acknowledgements; commit and abort
    have nothing to do (what a failed task wrote stays written)."""

    name = "at-least-once"

    def __init__(self, opts: SinkOptions):
        self.o = opts

    def task_writer(self, batch_id: int | None) -> TaskWriter:
        return TaskWriter(self.o)

    def commit(self, messages, batch_id: int | None) -> None:
        stray = {m.batch_id for m in messages if m is not None and m.batch_id is not None} - {batch_id}
        if batch_id is not None and stray:
            # every task of the job ran for this micro-batch: anything else is a bug
            raise RuntimeError(f"kbroker sink: batch {batch_id} got commit messages of batches {sorted(stray)}")
        total = sum(m.records for m in messages if m is not None)
        log.info("kbroker sink: %s%d record(s) written (%s)",
                 "" if batch_id is None else f"batch {batch_id}: ", total, self.name)

    def abort(self, messages, batch_id: int | None) -> None:
        written = sum(m.records for m in messages if m is not None)
        log.warning("kbroker sink: %saborted after %d record(s) were written; they stay in the topic "
                    "(%s: a retry writes them again)", "" if batch_id is None else f"batch {batch_id} ",
                    written, self.name)


def transactions_supported(opts: SinkOptions) -> tuple[bool, str]:
    """Asks the broker for a transactional producer id (what the exactly-once delivery
    needs). (supported, why not)."""
    with _connect(opts) as c:
        try:
            resp = c.any_connection().request(InitProducerIdRequest(
                transactional_id="kbroker-spark-probe", transaction_timeout_ms=60000, producer_id=-1,
                producer_epoch=-1))
        except ClientError as exc:
            return False, str(exc)
    if resp.error_code:
        return False, f"InitProducerId with a transactional id answered {ErrorCode(resp.error_code).name}"
    return True, ""


def _connect(opts: SinkOptions) -> Cluster:
    """As the source connects: no broker reachable is the same one-line error."""
    return _offsets.connect(opts.bootstrap, opts.timeout_ms / 1000, opts.client_id, opts.bootstrap_option)


def delivery_for(opts: SinkOptions) -> Delivery:
    """The delivery of the query, once the broker answered (a bad bootstrap fails here, on
    the driver, before any task)."""
    _connect(opts).close()
    if opts.delivery == DELIVERY_EXACTLY_ONCE:
        ok, why = transactions_supported(opts)
        raise KBrokerOptionError("deliveryGuarantee", "= exactly-once needs broker transactions, which "
                                 + ("this sink does not drive yet" if ok else f"this broker does not offer ({why})")
                                 + "; use at-least-once (the default)")
    return Delivery(opts)


def task_identity() -> tuple[int | None, int, int]:
    """(micro-batch id, Spark partition id, attempt) of the running task. The batch id is
    the local property Spark's MicroBatchExecution sets on every job it runs (tasks
    inherit it); None in a batch query."""
    from pyspark import TaskContext
    ctx = TaskContext.get()
    if ctx is None:
        return None, 0, 0
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return (int(batch) if batch is not None else None), ctx.partitionId(), ctx.attemptNumber()


def _write_all(delivery: Delivery, iterator) -> KBrokerCommitMessage:
    batch_id, partition_id, attempt = task_identity()
    w = delivery.task_writer(batch_id)
    try:
        for rb in iterator:
            w.write_batch(rb)
    except BaseException:
        w.close()
        raise
    msg = w.finish()
    msg.batch_id, msg.task = batch_id, (partition_id, attempt)
    return msg


class KBrokerBatchWriter(DataSourceArrowWriter):
    def __init__(self, opts: SinkOptions, schema):
        check_schema(schema, opts)
        self.delivery = delivery_for(opts)

    def write(self, iterator):
        return _write_all(self.delivery, iterator)

    def commit(self, messages) -> None:
        self.delivery.commit(messages, None)

    def abort(self, messages) -> None:
        self.delivery.abort(messages, None)


class KBrokerStreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, opts: SinkOptions, schema):
        check_schema(schema, opts)
        self.delivery = delivery_for(opts)

    def write(self, iterator):
        return _write_all(self.delivery, iterator)

    def commit(self, messages, batchId) -> None:
        self.delivery.commit(messages, batchId)

    def abort(self, messages, batchId) -> None:
        self.delivery.abort(messages, batchId)

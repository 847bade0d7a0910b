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
Delivery.commit(); exactly-once plugs in there with broker transactions (the design:
docs/spark-transactions.md). Asking for deliveryGuarantee=exactly-once today fails at
query start with a message saying why, after probing the broker (InitProducerId with a
transactional id).
"""
from __future__ import annotations

import logging
import os
import time

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage

from broker._native.spark_encode import assign_partitions, encode_batches
from broker.client import Cluster
from broker.client.connection import ClientError
from broker.client.sender import Sender
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.retriable import RETRIABLE
from broker.spark import offsets as _offsets
from broker.spark.options import DELIVERY_EXACTLY_ONCE, KBrokerOptionError, SinkOptions

log = logging.getLogger("broker.spark")

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


class TaskWriter:
    """Writes one task's Arrow batches (at-least-once)."""

    def __init__(self, opts: SinkOptions, transactional_id: str | None = None):
        self.o = opts
        self.cluster = _connect(opts)
        self.sender = Sender(self.cluster, acks=opts.acks, timeout_ms=opts.timeout_ms, retries=opts.retries,
                             delivery_timeout_ms=opts.delivery_timeout_ms, retry_backoff_ms=opts.retry_backoff_ms,
                             retry_backoff_max_ms=opts.retry_backoff_max_ms, buffer_memory=opts.buffer_memory,
                             max_in_flight=opts.max_in_flight, on_ack=self._done,
                             transactional_id=transactional_id, what="kbroker sink: produce")
        self.written: dict[tuple[str, int], list[int]] = {}   # tp -> [records, first base, last base]
        self.records = 0
        self._partitions: dict[str, int] = {}
        self._sticky = int.from_bytes(os.urandom(2), "little")

    def _num_partitions(self, topic: str) -> int:
        """The topic's partition count, asked once per task; a broker down, an election
        under way or a topic not there (yet) is retried for kafka.max.block.ms (60 s), as
        Kafka's producer waits for a topic's metadata."""
        n = self._partitions.get(topic)
        if n is None:
            deadline = time.monotonic() + self.o.max_block_ms / 1000
            backoff = self.o.retry_backoff_ms / 1000
            while True:
                try:
                    meta = self.cluster.topic(topic, wait_s=5.0, allow_auto_create=True)
                    break
                except (ClientError, KafkaProtocolError) as exc:
                    retriable = isinstance(exc, ClientError) or exc.code in RETRIABLE
                    if not retriable or time.monotonic() > deadline:
                        code = exc.code if isinstance(exc, KafkaProtocolError) else ErrorCode.NETWORK_EXCEPTION
                        raise KafkaProtocolError(code, f"kbroker sink: topic {topic!r}: {exc}") from None
                    log.info("kbroker sink: metadata of %s: %s; retrying", topic, exc)
                    time.sleep(backoff)
                    backoff = min(backoff * 2, max(self.o.retry_backoff_max_ms / 1000, backoff))
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

    def _done(self, tp: tuple[str, int], count: int, base_offset: int) -> None:
        w = self.written.get(tp)
        if w is None:
            self.written[tp] = [count, base_offset, base_offset]
        else:
            w[0] += count
            w[2] = max(w[2], base_offset)
            if w[1] < 0 or 0 <= base_offset < w[1]:
                w[1] = base_offset
        self.records += count

    def finish(self) -> KBrokerCommitMessage:
        try:
            self.sender.flush()
        finally:
            self.cluster.close()
        return KBrokerCommitMessage(self.records, {tp: tuple(w) for tp, w in sorted(self.written.items())})

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

"""The sink's work: what a task writes and what the driver commits, for the batch and
streaming writers of broker/spark/sink.py, with the columns of Spark's Kafka sink:

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

Delivery guarantee: at-least-once by default, as Spark's own Kafka sink. A task that
fails after some of its batches were acknowledged, or a micro-batch replayed after a
crash, writes those rows again. The delivery is a seam (class Delivery): a task's writes
go through Delivery.task_writer(), and the driver's commit(messages, batchId) through
Delivery.commit(). deliveryGuarantee=exactly-once is TransactionalDelivery: one broker
transaction per task, committed by the driver after recording the micro-batch in the
sink log (broker/spark/txn.py; the design: docs/spark-transactions.md); it needs
kbroker.acks=all and sends one request at a time per broker (sequence order); readers
see each row once with read_committed. A broker without transactions (its ApiVersions
answer lacks InitProducerId, AddPartitionsToTxn or EndTxn) is refused at the query's
start (sink.plan_delivery); a transaction coordinator that cannot be reached later is an
outage, retried within kafka.delivery.timeout.ms.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from broker._native.spark_encode import assign_partitions, encode_batches
from broker.client import Cluster
from broker.client.connection import ClientError
from broker.client.sender import Sender
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.retriable import RETRIABLE
from broker.spark import offsets as _offsets, txn
from broker.spark.options import DELIVERY_EXACTLY_ONCE, KBrokerOptionError, SinkOptions
from broker.spark.txn import TransactionalSequencer

log = logging.getLogger("broker.spark")


class KBrokerCommitMessage(WriterCommitMessage):
    """What a task wrote: per (topic, partition) [records, first base offset, last base
    offset]; `transaction` is for the transactional delivery (None: at-least-once)."""

    def __init__(
        self,
        records: int,
        partitions: dict,
        transaction=None,
        batch_id: int | None = None,
        task: tuple[int, int] | None = None,
    ):
        self.records = records
        self.partitions = partitions
        self.transaction = transaction
        self.batch_id = batch_id  # the micro-batch (streaming), from the task's context
        self.task = task  # (Spark partition id, attempt)
        self.query = ""  # exactly-once: the query (the sink log's key)

    def __repr__(self) -> str:
        return (
            f"KBrokerCommitMessage(batch {self.batch_id}, task {self.task}: {self.records} records, "
            f"{len(self.partitions)} partitions)"
        )


# ---------------------------------------------------------------- Arrow columns -> native


def _not_read_rows(rb: pa.RecordBatch) -> None:
    """A write through a catalog table's options takes no row read from a kbroker topic
    as it is (its `offset` set). Such rows carry the options of the table they were read
    from: when a query's columns are exactly a kbroker table's (INSERT INTO t2 SELECT *
    FROM t), Spark passes them to the sink without matching them to the table written to,
    so the options the sink finds are t's, and the rows would go back to t's topic."""
    offsets = _column(rb, "offset")
    if offsets is not None and offsets.null_count < len(offsets):
        raise ValueError(
            "kbroker sink: rows read from a kbroker table cannot be inserted into a kbroker table as "
            "they are (Spark would hand the sink the options of the table they come from): name the "
            "columns written, e.g. INSERT INTO t (key, value) SELECT key, value FROM ..."
        )


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
    return (
        b[0] if arr.null_count else None,
        b[1],
        arr.offset,
        _binary_desc(values.field(0)),
        _binary_desc(values.field(1)),
    )


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

    def __init__(self, opts: SinkOptions, txn: Callable[[Cluster], TransactionalSequencer] | None = None):
        self.o = opts
        self.cluster = connect_retrying(opts)
        self._txn_factory = txn
        self.txn: TransactionalSequencer | None = None  # started at the first batch
        self.sender = Sender(
            self.cluster,
            acks=opts.acks,
            timeout_ms=opts.timeout_ms,
            retries=opts.retries,
            delivery_timeout_ms=opts.delivery_timeout_ms,
            retry_backoff_ms=opts.retry_backoff_ms,
            retry_backoff_max_ms=opts.retry_backoff_max_ms,
            buffer_memory=opts.buffer_memory,
            max_in_flight=1 if txn is not None else opts.max_in_flight,
            on_ack=self._done,
            what="kbroker sink: produce",
        )
        self.written: dict[tuple[str, int], list[int]] = {}  # tp -> [records, first base, last base]
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
        if self.o.table:
            _not_read_rows(rb)
        if self.o.topic is not None:
            self._write_topic(self.o.topic, rb)
            return
        topics = _column(rb, "topic")
        if topics.null_count:
            raise ValueError(
                "kbroker sink: null topic present in the data; use the 'topic' option to set a default topic"
            )
        import pyarrow.compute as pc

        uniques = pc.unique(topics).to_pylist()  # a few distinct values, not per row
        if len(uniques) == 1:
            self._write_topic(uniques[0], rb)
            return
        for t in uniques:
            self._write_topic(t, rb.filter(pc.equal(topics, t)))

    def _write_topic(self, topic: str, rb: pa.RecordBatch) -> None:
        if self.o.formats:
            from broker.spark.avro_sink import encode_rows

            rb = encode_rows(rb, self.o.formats, topic)
        n = rb.num_rows
        num = self._num_partitions(topic)
        key = _binary_desc(_column(rb, "key"))
        self._sticky += 1
        parts = assign_partitions(n, num, key, _int32_desc(_column(rb, "partition")), self._sticky % num)
        if self._txn_factory is None:
            batches = encode_batches(
                n,
                parts,
                key,
                _binary_desc(_column(rb, "value")),
                _headers_desc(_column(rb, "headers")),
                int(time.time() * 1000),
                self.o.compression,
                self.o.batch_bytes,
            )
        else:
            if self.txn is None:
                self.txn = self._txn_factory(self.cluster)
                self.sender.transactional_id = self.txn.txn_id
            txn = self.txn
            batches = encode_batches(
                n,
                parts,
                key,
                _binary_desc(_column(rb, "value")),
                _headers_desc(_column(rb, "headers")),
                int(time.time() * 1000),
                self.o.compression,
                self.o.batch_bytes,
                producer_id=txn.producer_id,
                producer_epoch=txn.epoch,
                sequences=txn.sequences.setdefault(topic, {}),
                transactional=True,
            )
            txn.add(topic, {p for p, _data, _count in batches})  # per partition, before its batches
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
        return KBrokerCommitMessage(
            self.records,
            {tp: tuple(w) for tp, w in sorted(self.written.items())},
            transaction=self.txn.transaction if self.txn is not None else None,
        )

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
        log.info(
            "kbroker sink: %s%d record(s) written (%s)",
            "" if batch_id is None else f"batch {batch_id}: ",
            total,
            self.name,
        )

    def abort(self, messages, batch_id: int | None) -> None:
        written = sum(m.records for m in messages if m is not None)
        log.warning(
            "kbroker sink: %saborted after %d record(s) were written; they stay in the topic "
            "(%s: a retry writes them again)",
            "" if batch_id is None else f"batch {batch_id} ",
            written,
            self.name,
        )


class _TxnTaskWriter(TaskWriter):
    """A task's writer for the exactly-once delivery: its message names the query (the
    sink log's key) for the driver."""

    query = ""

    def finish(self) -> KBrokerCommitMessage:
        msg = super().finish()
        msg.query = self.query
        return msg


class _NothingToWrite(_TxnTaskWriter):
    """A replayed micro-batch whose transactions the sink log already records: the rows
    are written (and the driver commits them again); writing them anew would abort them."""

    def write_batch(self, rb: pa.RecordBatch) -> None:
        pass


class TransactionalDelivery(Delivery):
    """Exactly-once: a transaction per task, committed by the driver (broker/spark/txn.py)."""

    name = "exactly-once"

    def __init__(self, opts: SinkOptions, run_id: str):
        super().__init__(opts)
        self.run_id = run_id  # a batch query's id; a streaming query has its own

    def _query_id(self) -> str:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        query = ctx.getLocalProperty("sql.streaming.queryId") if ctx is not None else None
        return query or self.run_id

    def task_writer(self, batch_id: int | None) -> TaskWriter:
        _batch, partition_id, _attempt = task_identity()
        query = self._query_id()
        if batch_id is not None:
            with connect_retrying(self.o) as c:
                done = _recorded(c, self.o, query, batch_id)
            if done is not None:
                log.info(
                    "kbroker sink: batch %d of query %s is recorded in the sink log: nothing to write", batch_id, query
                )
                nothing = _NothingToWrite(self.o)
                nothing.query = query
                return nothing
        txn_id = f"{query}-{partition_id}"
        timeout_s = self.o.delivery_timeout_ms / 1000
        backoff = _backoff(self.o)
        w = _TxnTaskWriter(
            self.o,
            lambda cluster: txn.TransactionalSequencer(
                cluster, txn_id, timeout_s, txn.TRANSACTION_TIMEOUT_MS, *backoff
            ),
        )
        w.query = query
        return w

    def commit(self, messages, batch_id: int | None) -> None:
        super().commit(messages, batch_id)
        txns = sorted({m.transaction for m in messages if m is not None and m.transaction is not None})
        o = self.o
        timeout_s = o.delivery_timeout_ms / 1000
        with connect_retrying(o) as c:
            if batch_id is not None:
                query = next((m.query for m in messages if m is not None and m.query), "")
                done = _recorded(c, o, query, batch_id) if query else None
                if done is not None:
                    # a replay of a batch recorded before a crash: commit what was recorded
                    txns = sorted(set(txns) | set(done))
                elif txns:
                    txn.retrying("creating the sink log", timeout_s, lambda: txn.ensure_sink_log(c), *_backoff(o))
                    txn.retrying(
                        f"recording batch {batch_id} in the sink log",
                        timeout_s,
                        lambda: txn.record(c, query, batch_id, txns, o.timeout_ms),
                        *_backoff(o),
                    )
            txn.end_all(c, txns, True, timeout_s, *_backoff(o))
        log.info(
            "kbroker sink: %scommitted %d transaction(s)", "" if batch_id is None else f"batch {batch_id}: ", len(txns)
        )

    def abort(self, messages, batch_id: int | None) -> None:
        txns = sorted({m.transaction for m in messages if m is not None and m.transaction is not None})
        timeout_s = self.o.delivery_timeout_ms / 1000
        try:
            with connect_retrying(self.o) as c:
                txn.end_all(c, txns, False, timeout_s, *_backoff(self.o))
        except (ClientError, KafkaProtocolError) as exc:
            # fenced or timed out meanwhile: aborted all the same
            log.warning("kbroker sink: aborting %d transaction(s): %s", len(txns), exc)
        log.warning(
            "kbroker sink: %saborted %d transaction(s); their rows are invisible to read_committed readers",
            "" if batch_id is None else f"batch {batch_id} ",
            len(txns),
        )


def _backoff(o: SinkOptions) -> tuple[float, float]:
    return o.retry_backoff_ms / 1000, o.retry_backoff_max_ms / 1000


def _recorded(c: Cluster, o: SinkOptions, query: str, batch_id: int):
    timeout_s = o.delivery_timeout_ms / 1000
    deadline = time.monotonic() + timeout_s
    return txn.retrying(
        f"reading the sink log for batch {batch_id}",
        timeout_s,
        lambda: txn.recorded(c, query, batch_id, deadline),
        *_backoff(o),
    )


def _connect(opts: SinkOptions) -> Cluster:
    """As the source connects: no broker reachable is the same one-line error."""
    return _offsets.connect(opts.bootstrap, opts.timeout_ms / 1000, opts.client_id, opts.bootstrap_option)


def connect_retrying(opts: SinkOptions) -> Cluster:
    """A connection for a task or a commit, after the query's start: no broker reachable
    (all the bootstrap servers down at once) is an outage, retried within
    kafka.delivery.timeout.ms, then the same error as at the start."""
    deadline = time.monotonic() + opts.delivery_timeout_ms / 1000
    backoff, backoff_max = _backoff(opts)
    while True:
        try:
            return _connect(opts)
        except KBrokerOptionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(backoff)
            backoff = min(backoff * 2, max(backoff, backoff_max))


def delivery_of(opts: SinkOptions, run_id: str) -> Delivery:
    """The delivery of a write the driver planned (broker/spark/sink.py checked it)."""
    if opts.delivery == DELIVERY_EXACTLY_ONCE:
        return TransactionalDelivery(opts, run_id)
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


def write_all(delivery: Delivery, iterator) -> KBrokerCommitMessage:
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

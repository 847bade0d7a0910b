"""The sink's face to Spark: the writer objects Spark creates on the driver (to plan a
write, and again to commit or abort it) and pickles to the tasks.

Spark creates a streaming query's writer for every micro-batch, in Python workers of its
own: one plans the batch's tasks, another commits it. Those workers need the options, the
schema check and, once per process, the brokers' capabilities; this module imports no
more than that (the client, for the check). What the tasks and the commit run, the
producing and the transactions (pyarrow, the native encoder, the sender), lives in
broker/spark/writer.py and is imported when a task writes or the driver commits.
"""

from __future__ import annotations

import uuid

from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter

from broker.spark.options import DELIVERY_EXACTLY_ONCE, KBrokerOptionError, SinkOptions

# ---------------------------------------------------------------- schema checks


def check_schema(schema, opts: SinkOptions) -> None:
    """Spark's KafkaWriter.validateQuery: fails at query start, naming the column."""
    from pyspark.sql.types import ArrayType, BinaryType, IntegerType, StringType, StructType

    fields = {f.name.lower(): f.dataType for f in schema.fields}
    if opts.topic is None:
        if "topic" not in fields:
            raise KBrokerOptionError(
                "topic", "must be specified when the data has no 'topic' column (the topic to write each row to)"
            )
    if "topic" in fields and not isinstance(fields["topic"], StringType):
        raise KBrokerOptionError("topic", f"column 'topic' must be a string, not {fields['topic'].simpleString()}")
    if "value" not in fields:
        raise ValueError("kbroker sink: the data needs a 'value' column (string or binary)")
    encoded = {f.column for f in opts.formats}  # valueFormat=avro ...: any type, encoded (avro_sink.py)
    for name in ("key", "value"):
        if name in fields and name not in encoded and not isinstance(fields[name], (StringType, BinaryType)):
            raise ValueError(
                f"kbroker sink: column '{name}' must be a string or binary, not {fields[name].simpleString()}"
            )
    if "partition" in fields and not isinstance(fields["partition"], IntegerType):
        raise ValueError(f"kbroker sink: column 'partition' must be an int, not {fields['partition'].simpleString()}")
    if "headers" in fields:
        t = fields["headers"]
        ok = (
            isinstance(t, ArrayType)
            and isinstance(t.elementType, StructType)
            and [f.name.lower() for f in t.elementType.fields] == ["key", "value"]
            and isinstance(t.elementType.fields[0].dataType, StringType)
            and isinstance(t.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise ValueError(
                f"kbroker sink: column 'headers' must be array<struct<key: string, value: binary>>, "
                f"not {t.simpleString()}"
            )


#: the write configurations this process has checked (bootstrap servers reached, the
#: delivery's needs met): Spark creates a query's stream writer again for every
#: micro-batch (to plan its tasks, and to commit it), in Python workers it keeps
_checked: set[tuple] = set()

#: the requests the exactly-once delivery sends (InitProducerId with a transactional id
#: from version 0; FindCoordinator of a transactional id from version 1)
#: api key: (name, least version); plain numbers, so that planning a write loads none of
#: the protocol's codecs
TRANSACTION_APIS = {
    22: ("INIT_PRODUCER_ID", 0),
    24: ("ADD_PARTITIONS_TO_TXN", 0),
    26: ("END_TXN", 0),
    10: ("FIND_COORDINATOR", 1),
}


def transactions_missing(conn) -> str | None:
    """What a broker lacks for the exactly-once delivery, from its ApiVersions answer
    (None: nothing). The capability is the broker's software, not its state: asking a
    coordinator instead would mistake a broker that is down for one without
    transactions."""
    missing = []
    for api, (name, least) in TRANSACTION_APIS.items():
        theirs = conn.versions.get(api)
        if theirs is None or theirs[1] < least:
            missing.append(name)
    return ", ".join(missing) or None


def plan_delivery(opts: SinkOptions) -> str:
    """Checks the write's delivery and names the run (a batch query's transactional ids
    start with it). The first time this process sees a write configuration
    (Spark asks for a streaming query's writer again at every micro-batch, in Python
    workers it keeps: once per query), the bootstrap servers are tried (none reachable
    fails the write on the driver, before any task) and, for exactly-once, the broker's
    ApiVersions must list the transaction requests. Later micro-batches ask nothing of
    the brokers here: an outage then is retried by the tasks and the commit."""
    if opts.delivery == DELIVERY_EXACTLY_ONCE and opts.acks != -1:
        raise KBrokerOptionError("kbroker.acks", "must be all with deliveryGuarantee=exactly-once")
    key = (opts.bootstrap, opts.delivery, opts.client_id)
    if key not in _checked:
        from broker.spark.offsets import connect

        with connect(opts.bootstrap, opts.timeout_ms / 1000, opts.client_id, opts.bootstrap_option) as c:
            conn = c.any_connection()
            if opts.delivery == DELIVERY_EXACTLY_ONCE:
                missing = transactions_missing(conn)
                if missing:
                    raise KBrokerOptionError(
                        "deliveryGuarantee",
                        f"= exactly-once needs broker transactions: "
                        f"{conn.host}:{conn.port} does not offer {missing}; use "
                        f"at-least-once (the default)",
                    )
        _checked.add(key)
    return f"kbroker-spark-{uuid.uuid4()}"


class _Writer:
    """What both writers share: the checked options, pickled to the tasks; the delivery
    (broker/spark/writer.py) is made where it runs."""

    def __init__(self, opts: SinkOptions, schema):
        check_schema(schema, opts)
        self.opts = opts
        self.run_id = plan_delivery(opts)
        self._delivery = None

    def __getstate__(self):
        return {"opts": self.opts, "run_id": self.run_id, "_delivery": None}

    @property
    def delivery(self):
        if self._delivery is None:
            from broker.spark.writer import delivery_of

            self._delivery = delivery_of(self.opts, self.run_id)
        return self._delivery

    def write(self, iterator):
        from broker.spark.writer import write_all

        return write_all(self.delivery, iterator)


class KBrokerBatchWriter(_Writer, DataSourceArrowWriter):
    def commit(self, messages) -> None:
        self.delivery.commit(messages, None)

    def abort(self, messages) -> None:
        self.delivery.abort(messages, None)


class KBrokerStreamWriter(_Writer, DataSourceStreamArrowWriter):
    def commit(self, messages, batchId) -> None:
        self.delivery.commit(messages, batchId)

    def abort(self, messages, batchId) -> None:
        self.delivery.abort(messages, batchId)

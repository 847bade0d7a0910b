"""The `kbroker` DataSource: reads (batch, streaming) and writes (batch, streaming).

    df = (spark.read.format("kbroker")
          .option("kbroker.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())

Options and rows are those of Spark's Kafka connector (options.py, schema.py). The
DataSource object is pickled to Spark's Python workers: it holds only the options.

When options are checked (on the driver, before any task runs, one line naming the
option), as early as Spark's Python data source API lets a source know:

    read, readStream .load()   schema(): every option, except the rules of one mode
                               (Spark does not tell schema() batch from streaming)
    batch read, first action   reader(): the batch rules (no maxOffsetsPerTrigger ...)
    readStream .start()        streamReader(), in the query's thread: the streaming rules
                               (no endingOffsets ...); the query fails with the message
    write .save()              writer(): every option, the bootstrap servers reachable
    writeStream .start()       streamWriter(), per micro-batch: the same, failing the query

A stream reader that cannot be created is replaced by one that raises the error on its
first use: PySpark's streaming runner, when streamReader() itself raises, buries the
message under an UnboundLocalError of its own.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.streaming.datasource import SupportsTriggerAvailableNow

from broker.spark.options import KBrokerOptionError, SinkOptions, SourceOptions, options_for, with_table_options
from broker.spark.schema import spark_schema


class KBrokerDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kbroker"

    def schema(self):
        o = SourceOptions.parse(self.options, streaming=None)
        schema = spark_schema(o.include_headers)
        if o.key_format or o.value_format:
            from broker.spark.formats import typed_schema

            schema = typed_schema(schema, o)
        return with_table_options(schema, self.options)

    def reader(self, schema):
        from broker.spark.reader import KBrokerBatchReader

        return KBrokerBatchReader(
            _with_decoders(SourceOptions.parse(options_for(self.options, schema), streaming=False), schema)
        )

    def streamReader(self, schema):
        from broker.spark.stream import KBrokerStreamReader

        try:
            return KBrokerStreamReader(
                _with_decoders(SourceOptions.parse(options_for(self.options, schema), streaming=True), schema)
            )
        except Exception as exc:  # noqa: BLE001 - reported on first use, see the module docstring
            return _RefusedStreamReader(exc)

    def writer(self, schema, overwrite: bool):
        from broker.spark.sink import KBrokerBatchWriter

        _no_overwrite(overwrite)
        return KBrokerBatchWriter(SinkOptions.parse(options_for(self.options, schema)), schema)

    def streamWriter(self, schema, overwrite: bool):
        from broker.spark.sink import KBrokerStreamWriter

        return KBrokerStreamWriter(SinkOptions.parse(options_for(self.options, schema)), schema)


class _RefusedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Stands for a stream reader whose options were refused: every call raises the error."""

    def __init__(self, error: Exception):
        self.error = error

    def _raise(self, *_args, **_kw):
        raise self.error

    initialOffset = latestOffset = partitions = read = commit = _raise
    getDefaultReadLimit = reportLatestOffset = prepareForTriggerAvailableNow = _raise

    def stop(self) -> None:
        pass


def _with_decoders(o: SourceOptions, schema) -> SourceOptions:
    """The options with the decoders of keyFormat/valueFormat, their reader schemas as the
    driver settled them (in the schema's metadata: broker/spark/formats.py)."""
    if not (o.key_format or o.value_format):
        return o
    from broker.spark.formats import with_decoders

    return with_decoders(o, schema)


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        # Spark's Kafka sink refuses it too: a topic is append-only
        raise KBrokerOptionError("mode", "overwrite is not allowed for kbroker: a topic is append-only; use append")

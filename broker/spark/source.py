"""The `kbroker` DataSource: reads (batch, streaming) and writes (batch, streaming).

    df = (spark.read.format("kbroker")
          .option("kbroker.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "clicks").load())

Options and rows are those of Spark's Kafka connector (options.py, schema.py). The
DataSource object is pickled to Spark's Python workers: it holds only the options.
Options are checked when the reader or writer is created, on the driver, so a bad one
fails the query before any task runs, with one line naming it.
"""
from __future__ import annotations

from pyspark.sql.datasource import DataSource

from broker.spark.options import KBrokerOptionError, SinkOptions, SourceOptions, _lower
from broker.spark.schema import spark_schema


class KBrokerDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "kbroker"

    def schema(self):
        return spark_schema(_include_headers(self.options))

    def reader(self, schema):
        from broker.spark.reader import KBrokerBatchReader
        return KBrokerBatchReader(SourceOptions.parse(self.options, streaming=False))

    def streamReader(self, schema):
        from broker.spark.stream import KBrokerStreamReader
        return KBrokerStreamReader(SourceOptions.parse(self.options, streaming=True))

    def writer(self, schema, overwrite: bool):
        from broker.spark.writer import KBrokerBatchWriter
        _no_overwrite(overwrite)
        return KBrokerBatchWriter(SinkOptions.parse(self.options), schema)

    def streamWriter(self, schema, overwrite: bool):
        from broker.spark.writer import KBrokerStreamWriter
        return KBrokerStreamWriter(SinkOptions.parse(self.options), schema)


def _include_headers(options) -> bool:
    text = _lower(options).get("includeheaders", "false").strip().lower()
    if text not in ("true", "false", "1", "0", "yes", "no", ""):
        raise KBrokerOptionError("includeHeaders", f"must be true or false, not {text!r}")
    return text in ("true", "1", "yes")


def _no_overwrite(overwrite: bool) -> None:
    if overwrite:
        # Spark's Kafka sink refuses it too: a topic is append-only
        raise KBrokerOptionError("mode", "overwrite is not allowed for kbroker: a topic is append-only; "
                                         "use append")

"""The `kbroker` PySpark data source, found by Spark without registration.

Spark (4.0+) looks, once per session, for top-level modules named `pyspark_*` on the
Python path of its workers and registers the `DefaultSource` each exposes under the
source's name():

    spark.read.format("kbroker").option("kbroker.bootstrap.servers", "127.0.0.1:9092") \\
        .option("subscribe", "clicks").load()

Registering explicitly works everywhere too:

    from broker.spark import KBrokerDataSource
    spark.dataSource.register(KBrokerDataSource)

The implementation lives in broker/spark/.
"""

from broker.spark.source import KBrokerDataSource as DefaultSource

__all__ = ["DefaultSource"]

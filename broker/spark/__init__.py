"""kbroker's PySpark Python Data Source, format name "kbroker": batch and Structured
Streaming reads and writes with the options and rows of Spark's Kafka connector.

Spark discovers it through the top-level module pyspark_kbroker (DefaultSource), or
register it explicitly:

    from broker.spark import KBrokerDataSource
    spark.dataSource.register(KBrokerDataSource)

Needs pyspark (the `test` extras install it); nothing else in kbroker imports this
package.
"""

from broker.spark.options import KBrokerDataLossError, KBrokerOptionError
from broker.spark.source import KBrokerDataSource

__all__ = ["KBrokerDataLossError", "KBrokerDataSource", "KBrokerOptionError"]

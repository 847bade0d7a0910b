"""The Structured Streaming job: per-minute click counts per page, to a topic and to Parquet.

    clicks (topic)  --kbroker source-->  parse JSON  --window(1 minute) x page-->  count
        --> click-counts (topic, kbroker sink): key "2026-01-01T10:07|/docs",
            value {"minute": ..., "page": ..., "count": 41}
        --> Parquet: the same rows

The event time is the record timestamp (the `timestamp` column of Spark's Kafka schema);
late clicks are accepted for one minute (the watermark). Both sinks take append mode: a
minute's count is written once, final, when the watermark has passed the minute. (Spark
gives Python data source sinks append mode only; Spark's own Kafka sink also takes
update mode.) Both queries read the same source definition with their own checkpoints,
so each restarts where it stopped.

Used by run.py; build_queries() is the part to read.
"""

from __future__ import annotations

from pyspark.sql import SparkSession, functions as F


def spark_session(app: str = "clickstream", master: str = "local[2]") -> SparkSession:
    """master: local[2], or a Spark standalone cluster's spark://HOST:PORT (docs/pipelines.md:
    its workers run this same Python, PYSPARK_PYTHON, with kbroker installed)."""
    import os
    import sys

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    spark = (
        SparkSession.builder.master(master)
        .appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    from broker.spark import KBrokerDataSource

    spark.dataSource.register(KBrokerDataSource)  # Spark also finds it as pyspark_kbroker
    return spark


def build_queries(
    spark,
    bootstrap: str,
    clicks: str,
    counts_topic: str,
    parquet_dir: str,
    checkpoints: str,
    trigger_s: float = 2.0,
    starting_offsets: str = "latest",
):
    clicks_df = (
        spark.readStream.format("kbroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", clicks)
        .option("startingOffsets", starting_offsets)
        .option("maxOffsetsPerTrigger", 100000)
        .load()
    )
    events = clicks_df.select(
        F.col("timestamp"), F.from_json(F.col("value").cast("string"), "user string, page string, ms long").alias("e")
    ).select("timestamp", "e.page")
    counts = (
        events.withWatermark("timestamp", "1 minute")
        .groupBy(F.window("timestamp", "1 minute").alias("w"), "page")
        .count()
        .select(F.date_format("w.start", "yyyy-MM-dd'T'HH:mm").alias("minute"), "page", "count")
    )

    to_topic = (
        counts.select(
            F.concat_ws("|", "minute", "page").alias("key"),
            F.to_json(F.struct("minute", "page", "count")).alias("value"),
        )
        .writeStream.format("kbroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", counts_topic)
        .option("checkpointLocation", f"{checkpoints}/to-topic")
        .outputMode("append")
        .trigger(processingTime=f"{trigger_s} seconds")
        .queryName("click_counts_to_topic")
        .start()
    )
    to_parquet = (
        counts.writeStream.format("parquet")
        .option("path", parquet_dir)
        .option("checkpointLocation", f"{checkpoints}/to-parquet")
        .outputMode("append")
        .trigger(processingTime=f"{trigger_s} seconds")
        .queryName("click_counts_to_parquet")
        .start()
    )
    return to_topic, to_parquet

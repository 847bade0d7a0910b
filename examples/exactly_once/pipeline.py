"""The Structured Streaming job: page views per 5-minute window, written exactly once.

    views (topic)  --kbroker source-->  parse JSON  --join pages (a static table)-->
        --window(5 minutes, event time) x page, 1-minute watermark-->  count
        --> view-counts (topic, kbroker sink, deliveryGuarantee=exactly-once):
            key "2026-01-01 10:05:00|/docs",
            value {"window_start": ..., "window_end": ..., "page": ..., "section": ..., "views": 41}

The event time is the view's own `ms` field, not the record timestamp. Views more than a
minute older than the newest one seen (the watermark) are too late and dropped; a
window's count is written once, final, when the watermark has passed its end (append
mode, the only one Spark gives Python data source sinks).

Exactly once: each micro-batch's rows are written in broker transactions that the
driver commits together with the batch (docs/spark-transactions.md), so readers with
`isolation.level=read_committed` see every count once, through task retries, broker
failures and a driver restarted from its checkpoint. The source commits each batch's
end offsets to the consumer group `group` (commitOffsetsToGroup): `broker groups
describe` then shows how far the job is behind (docs/watching-a-stream.md).

Used by run.py; build_query() is the part to read.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession, functions as F

#: the static side of the join: each page's section of the site
PAGES = [
    ("/", "home"),
    ("/pricing", "sales"),
    ("/signup", "sales"),
    ("/docs", "docs"),
    ("/docs/spark", "docs"),
    ("/blog", "blog"),
    ("/login", "account"),
    ("/careers", "about"),
]
VIEW_SCHEMA = "user string, page string, ms long"


def spark_session(app: str = "exactly-once view counts", master: str = "local[2]") -> SparkSession:
    """master: local[2], or a Spark standalone cluster's spark://HOST:PORT (docs/pipelines.md)."""
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

    spark.dataSource.register(KBrokerDataSource)
    return spark


def window_counts(records: DataFrame, pages: DataFrame, window: str, watermark: str | None) -> DataFrame:
    """Views per (window, page) from the source's rows: the streaming query's logic, and
    the batch recount run.py checks the results against (watermark None)."""
    views = (
        records.select(F.from_json(F.col("value").cast("string"), VIEW_SCHEMA).alias("v"))
        .select("v.page", F.timestamp_millis(F.col("v.ms")).alias("event_time"))
        .join(pages, "page")
    )  # stream-static join
    if watermark is not None:
        views = views.withWatermark("event_time", watermark)
    return (
        views.groupBy(F.window("event_time", window).alias("w"), "page", "section")
        .count()
        .select(
            F.col("w.start").alias("window_start"),
            F.col("w.end").alias("window_end"),
            "page",
            "section",
            F.col("count").alias("views"),
        )
    )


def build_query(
    spark: SparkSession,
    bootstrap: str,
    views_topic: str,
    counts_topic: str,
    checkpoint: str,
    starting_offsets: str,
    group: str | None,
    window: str = "5 minutes",
    watermark: str = "1 minute",
    trigger_s: float = 1.0,
):
    records = (
        spark.readStream.format("kbroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", views_topic)
        .option("startingOffsets", starting_offsets)
        .option("maxOffsetsPerTrigger", 100000)
    )
    if group:
        records = records.option("commitOffsetsToGroup", group)
    pages = spark.createDataFrame(PAGES, "page string, section string")
    counts = window_counts(records.load(), pages, window, watermark)
    start = F.date_format("window_start", "yyyy-MM-dd HH:mm:ss")
    return (
        counts.select(
            F.concat_ws("|", start, "page").alias("key"),
            F.to_json(
                F.struct(
                    start.alias("window_start"),
                    F.date_format("window_end", "yyyy-MM-dd HH:mm:ss").alias("window_end"),
                    "page",
                    "section",
                    "views",
                )
            ).alias("value"),
        )
        .writeStream.format("kbroker")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", counts_topic)
        .option("deliveryGuarantee", "exactly-once")
        .option("checkpointLocation", checkpoint)
        .outputMode("append")
        .trigger(processingTime=f"{trigger_s} seconds")
        .queryName("view_counts")
        .start()
    )

"""Spark's own Kafka connector (format("kafka"), the JVM one) against a broker, in a process
of its own (Spark's JVM takes its jars when it starts, and the suite's other Spark tests
keep a session without them):

    python spark_connector_job.py BOOTSTRAP IN_TOPIC OUT_TOPIC STREAM_OUT_TOPIC CHECKPOINTS JAR[,JAR...]

Batch read of IN_TOPIC (keys, values, headers, offsets, timestamps), batch write of those
rows to OUT_TOPIC, a streaming read of IN_TOPIC (Trigger.AvailableNow into the memory
sink), and a streaming write of IN_TOPIC's values to STREAM_OUT_TOPIC. Prints one JSON
line per step; any failure ends the process non-zero with Spark's error.
"""

from __future__ import annotations

import json
import os
import sys


def main(bootstrap: str, in_topic: str, out_topic: str, stream_out: str, checkpoints: str, jars: str) -> None:
    from pyspark.sql import SparkSession, functions as F

    os.environ["PYSPARK_PYTHON"] = sys.executable
    spark = (
        SparkSession.builder.master("local[2]")
        .appName("kafka-connector-vs-kbroker")
        .config("spark.jars", jars)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "1g")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    kafka = {"kafka.bootstrap.servers": bootstrap}

    rows = (
        spark.read.format("kafka")
        .options(**kafka)
        .option("subscribe", in_topic)
        .option("startingOffsets", "earliest")
        .option("endingOffsets", "latest")
        .option("includeHeaders", "true")
        .load()
        .select(
            F.col("key").cast("string"),
            F.col("value").cast("string"),
            "partition",
            "offset",
            F.col("timestamp").cast("long").alias("ts_s"),
            "headers",
        )
        .orderBy("partition", "offset")
        .collect()
    )
    print(
        json.dumps(
            {
                "step": "batch_read",
                "rows": [
                    [
                        r.key,
                        r.value,
                        r.partition,
                        r.offset,
                        [[h.key, bytes(h.value).decode()] for h in (r.headers or [])],
                    ]
                    for r in rows
                ],
            }
        ),
        flush=True,
    )

    (
        spark.read.format("kafka")
        .options(**kafka)
        .option("subscribe", in_topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .load()
        .select("key", F.concat(F.lit("copy-"), F.col("value").cast("string")).alias("value"), "partition", "headers")
        .write.format("kafka")
        .options(**kafka)
        .option("topic", out_topic)
        .save()
    )
    print(json.dumps({"step": "batch_write"}), flush=True)

    query = (
        spark.readStream.format("kafka")
        .options(**kafka)
        .option("subscribe", in_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("value").cast("string").alias("value"))
        .writeStream.format("memory")
        .queryName("streamed")
        .option("checkpointLocation", os.path.join(checkpoints, "read"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    streamed = sorted(r.value for r in spark.sql("select value from streamed").collect())
    print(json.dumps({"step": "stream_read", "values": streamed}), flush=True)

    query = (
        spark.readStream.format("kafka")
        .options(**kafka)
        .option("subscribe", in_topic)
        .option("startingOffsets", "earliest")
        .load()
        .select(F.col("key"), F.concat(F.lit("stream-"), F.col("value").cast("string")).alias("value"))
        .writeStream.format("kafka")
        .options(**kafka)
        .option("topic", stream_out)
        .option("checkpointLocation", os.path.join(checkpoints, "write"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(300)
    print(json.dumps({"step": "stream_write"}), flush=True)
    spark.stop()


if __name__ == "__main__":
    main(*sys.argv[1:7])

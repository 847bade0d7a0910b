"""The sink's exactly-once delivery (deliveryGuarantee=exactly-once, docs/spark-transactions.md)
and the source's kafka.isolation.level=read_committed, on the local Spark session: a
batch write commits every row once; a streaming query whose task fails once and that
restarts from its checkpoint leaves every result exactly once for read_committed
readers, while read_uncommitted readers also see the aborted attempt's rows."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from tests.spark.helpers import create_topic, produce, read_topic, record
from tests.txn.test_single_broker import read as read_isolated

QUERY_TIMEOUT_S = 120


def spark_read(spark, bootstrap: str, topic: str, isolation: str) -> list[bytes]:
    df = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("kafka.isolation.level", isolation)
        .load()
    )
    return [r.value for r in df.select("value").collect()]


def test_batch_write_exactly_once(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 3)
    rows = [(f"k{i}", f"v{i}") for i in range(3000)]
    df = spark.createDataFrame(rows, "key string, value string").repartition(3)
    (
        df.write.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("topic", topic_name)
        .option("deliveryGuarantee", "exactly-once")
        .mode("append")
        .save()
    )
    expected = sorted(v.encode() for _, v in rows)
    assert sorted(read_isolated(broker.bootstrap, topic_name, 3, "read_committed")) == expected
    assert sorted(spark_read(spark, broker.bootstrap, topic_name, "read_committed")) == expected


def test_exactly_once_needs_acks_all(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    df = spark.createDataFrame([("a",)], "value string")
    with pytest.raises(Exception) as exc:
        (
            df.write.format("kbroker")
            .option("kbroker.bootstrap.servers", broker.bootstrap)
            .option("topic", topic_name)
            .option("deliveryGuarantee", "exactly-once")
            .option("kbroker.acks", "1")
            .mode("append")
            .save()
        )
    assert "kbroker.acks" in str(exc.value) and "exactly-once" in str(exc.value)


def test_streaming_write_exactly_once_through_a_task_failure(spark, broker, topic_name, tmp_path):
    src, dst = topic_name + "-in", topic_name + "-out"
    create_topic(broker.bootstrap, src, 2)
    create_topic(broker.bootstrap, dst, 2)
    placed = produce(broker.bootstrap, src, 0, 600, 2)  # 300 records per partition
    marker = str(tmp_path / "failed-once")
    bootstrap = broker.bootstrap

    from pyspark.sql.functions import col, udf

    @udf("string")
    def fail_once(value, partition, offset):
        # partition 1's task fails on its last record, once, after partition 0's task has
        # written its 300 results (not committed: the batch's transactions are open)
        if partition == 1 and offset == 299 and not os.path.exists(marker):
            import time as _t

            from broker.client import Cluster

            deadline = _t.monotonic() + 60
            while _t.monotonic() < deadline:
                with Cluster(bootstrap) as c:
                    if sum(off for off, _ in c.list_offsets(dst, [0, 1], -1).values()) >= 300:
                        break
                _t.sleep(0.2)
            open(marker, "w").close()
            raise RuntimeError("injected task failure")
        return "out-" + value.decode()

    def start():
        df = (
            spark.readStream.format("kbroker")
            .option("kbroker.bootstrap.servers", bootstrap)
            .option("subscribe", src)
            .option("startingOffsets", "earliest")
            .option("kafka.isolation.level", "read_committed")
            .load()
        )
        out = df.select(col("key"), fail_once(col("value"), col("partition"), col("offset")).alias("value"))
        return (
            out.writeStream.format("kbroker")
            .option("kbroker.bootstrap.servers", bootstrap)
            .option("topic", dst)
            .option("checkpointLocation", str(tmp_path / "ckpt"))
            .option("deliveryGuarantee", "exactly-once")
            .trigger(availableNow=True)
            .start()
        )

    q = start()
    with pytest.raises(Exception) as exc:
        q.awaitTermination(QUERY_TIMEOUT_S)
    assert "injected task failure" in str(exc.value)
    before = len(read_topic(bootstrap, dst))
    assert before >= 300, "partition 0's results were not written before the failure"

    q = start()  # restart from the checkpoint: batch 0 is replayed
    assert q.awaitTermination(QUERY_TIMEOUT_S)
    assert q.exception() is None

    expected = Counter(b"out-" + record(i)[1] for i in placed)
    committed = Counter(read_isolated(bootstrap, dst, 2, "read_committed"))
    assert committed == Counter({v: 1 for v in expected})  # exactly once
    assert Counter(spark_read(spark, bootstrap, dst, "read_committed")) == committed
    # the failed attempt's rows are in the log, aborted
    assert len(read_topic(bootstrap, dst)) == 600 + before

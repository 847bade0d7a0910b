"""Structured Streaming reads: availableNow into Parquet, restart from the checkpoint,
admission control (maxOffsetsPerTrigger), processing-time triggers and new partitions."""

from __future__ import annotations

from collections import Counter

import pyarrow.parquet as pq

from broker.client import Cluster
from tests.spark.helpers import create_topic, produce, record, wait_for

QUERY_TIMEOUT_S = 120


def stream(spark, broker, topic, **options):
    r = (
        spark.readStream.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
    )
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def run_available_now(df, out, ckpt):
    q = (
        df.writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )
    finished = q.awaitTermination(QUERY_TIMEOUT_S)
    assert finished, "availableNow query did not finish"
    assert q.exception() is None, q.exception()
    return q


def parquet_rows(path):
    t = pq.read_table(str(path), columns=["partition", "offset", "key", "value"])
    d = t.to_pydict()
    return list(zip(d["partition"], d["offset"], d["key"], d["value"]))


def test_available_now_restart_exactly_once_with_max_offsets_per_trigger(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 3)
    placed = produce(broker.bootstrap, topic_name, 0, 3000, 3)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    df = stream(spark, broker, topic_name, startingOffsets="earliest", maxOffsetsPerTrigger=1000)

    q = run_available_now(df, out, ckpt)
    batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
    # 3000 records at most 1000 per trigger: at least three micro-batches, none larger
    assert len(batches) >= 3
    assert max(p["numInputRows"] for p in batches) <= 1000
    assert sum(p["numInputRows"] for p in batches) == 3000

    # more data, and a partition more; restart from the checkpoint
    placed.update(produce(broker.bootstrap, topic_name, 3000, 1500, 3))
    with Cluster(broker.bootstrap) as c:
        c.create_partitions(topic_name, 4)
        c.topic(topic_name, wait_s=10.0)
    placed.update(produce(broker.bootstrap, topic_name, 4500, 500, 4))
    q2 = run_available_now(df, out, ckpt)
    assert sum(p["numInputRows"] for p in q2.recentProgress) == 2000

    rows = parquet_rows(out)
    counts = Counter((p, off) for p, off, _, _ in rows)
    assert max(counts.values()) == 1, "a record was written twice"
    with Cluster(broker.bootstrap) as c:
        ends = {p: off for p, (off, _) in c.list_offsets(topic_name, [0, 1, 2, 3], -1).items()}
    # no gaps: every offset of every partition, exactly once
    assert sorted(counts) == sorted((p, o) for p, end in ends.items() for o in range(end))
    assert sum(ends.values()) == 5000
    # and the values are the produced ones
    by_pos = {(p, off): (k, v) for p, off, k, v in rows}
    for i, (p, off) in placed.items():
        key, value, _, _ = record(i)
        assert by_pos[(p, off)] == (key, value)


def test_processing_time_trigger_picks_up_new_data_and_partitions(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    produce(broker.bootstrap, topic_name, 0, 200, 2)
    df = stream(spark, broker, topic_name, startingOffsets="earliest")
    name = "kb_" + "".join(c for c in topic_name if c.isalnum())[-40:]
    q = (
        df.selectExpr("partition", "offset", "value")
        .writeStream.format("memory")
        .queryName(name)
        .trigger(processingTime="500 milliseconds")
        .start()
    )
    try:

        def seen():
            return spark.sql(f"select count(*) from {name}").collect()[0][0]

        wait_for("the first 200 records", lambda: seen() == 200, timeout=QUERY_TIMEOUT_S)
        produce(broker.bootstrap, topic_name, 200, 100, 2)
        with Cluster(broker.bootstrap) as c:
            c.create_partitions(topic_name, 3)
            c.topic(topic_name, wait_s=10.0)
        produce(broker.bootstrap, topic_name, 300, 90, 3)
        wait_for("390 records", lambda: seen() >= 390, timeout=QUERY_TIMEOUT_S)
        rows = spark.sql(f"select partition, offset from {name}").collect()
        assert q.exception() is None
    finally:
        q.stop()
    counts = Counter((r[0], r[1]) for r in rows)
    assert len(rows) == 390 and max(counts.values()) == 1
    # the new partition was read from its first offset
    assert sorted(o for p, o in counts if p == 2) == list(range(30))

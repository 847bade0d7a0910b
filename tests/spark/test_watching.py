"""Watching a streaming query (issue 41, item 2): the progress's latestOffset is the
broker's latest offsets, before and after a restart from the checkpoint;
broker.spark.progress.lag gives the metrics Spark's Kafka source reports
(minOffsetsBehindLatest ...), which PySpark's Data Source API cannot; and
commitOffsetsToGroup commits the query's positions to a consumer group that Kafka's lag
tools see (`broker groups describe`), never reading them back."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from broker.client import Cluster
from broker.spark.progress import lag, with_lag_metrics
from tests.spark.helpers import create_topic, produce, wait_for
from tests.support.deps import require_module

QUERY_TIMEOUT_S = 120


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """The group's committed offsets, as a Kafka consumer (librdkafka) fetches them."""
    ck = require_module("confluent_kafka")
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=10)
    finally:
        c.close()
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[str, dict[str, int]]:
    with Cluster(bootstrap) as c:
        return {
            topic: {str(p): off for p, (off, _) in sorted(c.list_offsets(topic, list(range(partitions)), -1).items())}
        }


def start_query(spark, broker, topic, ckpt, out, group=None, per_trigger=None):
    """(the memory sink cannot restart from a checkpoint: Parquet files)"""
    r = (
        spark.readStream.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
    )
    if group:
        r = r.option("commitOffsetsToGroup", group)
    if per_trigger:
        r = r.option("maxOffsetsPerTrigger", per_trigger)
    return (
        r.load()
        .selectExpr("partition", "offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def written(spark, out) -> int:
    try:
        return spark.read.parquet(str(out)).count()
    except Exception:  # noqa: BLE001 - no file yet
        return 0


def test_latest_offset_lag_and_group_through_a_restart(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 3)
    produce(broker.bootstrap, topic_name, 0, 900, 3)
    group = f"{topic_name}-watch"
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    # 100 records per trigger over 3 partitions: the query is behind for several batches
    q = start_query(spark, broker, topic_name, ckpt, out, group, per_trigger=100)
    try:
        wait_for("the 900 records", lambda: written(spark, out) == 900, timeout=QUERY_TIMEOUT_S)
        batches = [p for p in q.recentProgress if p["numInputRows"] > 0]
        assert q.exception() is None
    finally:
        q.stop()
    latest = high_watermarks(broker.bootstrap, topic_name, 3)
    # every batch: latestOffset is what the broker had (nothing more was produced), the
    # lag what the batch left of it: 900 records, 100 per batch
    assert len(batches) >= 8
    for p in batches:
        source = p["sources"][0]
        assert json.loads(source["latestOffset"]) == latest, source
        assert source["metrics"] == {}  # PySpark's Python sources report none
        end = json.loads(source["endOffset"])[topic_name]
        behind = [300 - end[str(i)] for i in range(3)]
        assert lag(source) == {
            "minOffsetsBehindLatest": str(min(behind)),
            "maxOffsetsBehindLatest": str(max(behind)),
            "avgOffsetsBehindLatest": str(sum(behind) / 3),
        }
        filled = with_lag_metrics(p)["sources"][0]["metrics"]
        assert filled == lag(source)
    assert lag(batches[0]["sources"][0])["maxOffsetsBehindLatest"] != "0"
    assert lag(batches[-1]["sources"][0])["maxOffsetsBehindLatest"] == "0"
    # the group has the query's positions (after its last batch: the stop commits what
    # the last trigger submitted), and Kafka's lag tools see it
    wait_for(
        "the group's offsets",
        lambda: committed(broker.bootstrap, group, topic_name, 3) == {0: 300, 1: 300, 2: 300},
        timeout=30,
    )
    described = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", "groups", "describe", group, "-b", broker.bootstrap],
        capture_output=True,
        text=True,
        timeout=60,
    )
    rows = [line.split() for line in described.stdout.splitlines() if line.startswith(f"\t{topic_name}\t")]
    assert [(r[1], r[2], r[3], r[4]) for r in rows] == [(str(i), "300", "300", "0") for i in range(3)], described.stdout

    # a restart: the first batch is the last one of the offset log, replayed (its commit
    # removed, as a driver killed before it committed leaves it). Spark replays it
    # without asking the source for anything: its latestOffset is null (the same with
    # Spark's own Kafka source); the batches after have it again
    produce(broker.bootstrap, topic_name, 900, 300, 3)
    last = max(int(f.name) for f in (ckpt / "commits").iterdir() if f.name.isdigit())
    (ckpt / "commits" / str(last)).unlink()
    (ckpt / "commits" / f".{last}.crc").unlink(missing_ok=True)  # its checksum, beside it
    q = start_query(spark, broker, topic_name, ckpt, out, group)
    try:
        # the replayed batch (its files written already: the file sink keeps them once),
        # then the 300 new records
        wait_for("1200 records", lambda: written(spark, out) == 1200, timeout=QUERY_TIMEOUT_S)
        wait_for("the batches' progress", lambda: len(q.recentProgress) >= 2, timeout=QUERY_TIMEOUT_S)
        progress = q.recentProgress
    finally:
        q.stop()
    # (PySpark gives the JSON null as the string "null")
    assert progress[0]["batchId"] == last and progress[0]["sources"][0]["latestOffset"] in (None, "null")
    assert lag(progress[0]["sources"][0]) == {}
    latest = high_watermarks(broker.bootstrap, topic_name, 3)
    assert all(json.loads(p["sources"][0]["latestOffset"]) == latest for p in progress[1:]), progress
    wait_for(
        "the group's offsets after the restart",
        lambda: committed(broker.bootstrap, group, topic_name, 3) == {0: 400, 1: 400, 2: 400},
        timeout=30,
    )


def test_commit_offsets_to_group_is_a_streaming_option(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    df = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic_name)
        .option("commitOffsetsToGroup", "g")
        .load()
    )
    with pytest.raises(Exception) as exc:
        df.collect()
    assert "commitOffsetsToGroup' is for streaming queries only" in str(exc.value)

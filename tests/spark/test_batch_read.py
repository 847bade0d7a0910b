"""Batch reads through the data source: exactly the produced records, every column;
offsets ranges (earliest, latest, JSON, timestamps); only committed data."""

from __future__ import annotations

import json

from broker.client import Cluster
from tests.spark.helpers import BASE_TS, create_topic, expected_rows, produce, rows_of


def reader(spark, broker, topic, **options):
    r = spark.read.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap).option("subscribe", topic)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def test_batch_read_100k_across_4_partitions(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 4)
    placed = produce(broker.bootstrap, topic_name, 0, 100_000, 4)
    # 25,000 records per partition, cut into ranges of at most 10,000: 12 input partitions
    df = reader(spark, broker, topic_name, includeHeaders="true", maxRecordsPerPartition=10_000)
    assert df.columns == ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]
    assert df.rdd.getNumPartitions() == 12
    table = df.toArrow()
    assert table.num_rows == 100_000
    assert rows_of(table) == expected_rows(placed, topic_name)


def test_schema_without_headers_is_sparks_kafka_schema(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    placed = produce(broker.bootstrap, topic_name, 0, 500, 2)
    df = reader(spark, broker, topic_name)
    assert [(f.name, f.dataType.simpleString(), f.nullable) for f in df.schema.fields] == [
        ("key", "binary", True),
        ("value", "binary", True),
        ("topic", "string", True),
        ("partition", "int", True),
        ("offset", "bigint", True),
        ("timestamp", "timestamp", True),
        ("timestampType", "int", True),
    ]
    assert rows_of(df.toArrow(), with_headers=False) == expected_rows(placed, topic_name, with_headers=False)
    # SQL over the rows, as with Spark's Kafka source
    counts = {r["partition"]: r["n"] for r in df.groupBy("partition").count().withColumnRenamed("count", "n").collect()}
    assert counts == {0: 250, 1: 250}


def test_offset_ranges_json_latest_and_timestamps(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    placed = produce(broker.bootstrap, topic_name, 0, 400, 2)  # 200 per partition, offsets 0..199
    by_offset = {(p, off): i for i, (p, off) in placed.items()}
    start = json.dumps({topic_name: {"0": 50, "1": -2}})
    end = json.dumps({topic_name: {"0": 60, "1": -1}})
    got = (
        reader(spark, broker, topic_name, startingOffsets=start, endingOffsets=end)
        .select("partition", "offset")
        .collect()
    )
    assert sorted((r[0], r[1]) for r in got) == [(0, o) for o in range(50, 60)] + [(1, o) for o in range(200)]
    # record i has timestamp BASE_TS + i; partition 0 holds the even ones
    ts_start = json.dumps({topic_name: {"0": BASE_TS + 100, "1": BASE_TS + 301}})
    rows = (
        reader(spark, broker, topic_name, startingOffsetsByTimestamp=ts_start, endingTimestamp=str(BASE_TS + 351))
        .select("partition", "offset")
        .collect()
    )
    got = sorted(by_offset[(r[0], r[1])] for r in rows)
    # partition 0: records 100, 102 .. 350; partition 1: 301, 303 .. 349 (the end is exclusive)
    assert got == sorted([i for i in range(100, 351, 2)] + [i for i in range(301, 351, 2)])


def test_reads_only_below_high_watermark_at_planning(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    produce(broker.bootstrap, topic_name, 0, 100, 1)
    df = reader(spark, broker, topic_name)
    # data produced after planning (an RDD is planned when first used) stays out of it
    rdd = df.select("offset").rdd
    assert rdd.getNumPartitions() == 1
    produce(broker.bootstrap, topic_name, 100, 50, 1)
    assert sorted(r[0] for r in rdd.collect()) == list(range(100))
    with Cluster(broker.bootstrap) as c:
        assert c.list_offsets(topic_name, [0], -1)[0][0] == 150
    assert reader(spark, broker, topic_name).count() == 150


def test_compressed_batches_and_log_append_time(spark, broker, topic_name):
    from broker.client import Producer

    create_topic(broker.bootstrap, topic_name, 1)
    with Producer(broker.bootstrap, acks=-1, compression="zstd", linger_ms=1000) as p:
        for i in range(300):
            p.send(topic_name, b"create-%d" % i, partition=0, timestamp=BASE_TS + i)
    # from now on the broker stamps the batches (timestampType 1): one partition, both kinds
    with Cluster(broker.bootstrap) as c:
        c.alter_topic_configs(topic_name, {"message.timestamp.type": "LogAppendTime"})
    with Producer(broker.bootstrap, acks=-1, compression="lz4", linger_ms=1000) as p:
        for i in range(200):
            p.send(topic_name, b"append-%d" % i, partition=0, timestamp=BASE_TS)
    rows = (
        reader(spark, broker, topic_name)
        .selectExpr("offset", "cast(value as string) v", "timestampType", "unix_millis(timestamp) ts")
        .orderBy("offset")
        .collect()
    )
    assert [r.v for r in rows] == [f"create-{i}" for i in range(300)] + [f"append-{i}" for i in range(200)]
    assert [r.timestampType for r in rows] == [0] * 300 + [1] * 200
    assert [r.ts for r in rows[:300]] == [BASE_TS + i for i in range(300)]
    assert all(r.ts > BASE_TS + 3_000_000 for r in rows[300:])  # stamped by the broker, now


def test_pattern_matching_nothing_is_empty(spark, broker, topic_name):
    df = (
        spark.read.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribePattern", topic_name + "-nothing-.*")
        .load()
    )
    assert df.count() == 0

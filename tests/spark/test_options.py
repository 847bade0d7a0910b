"""Bad options fail the query before any task runs, with one line naming the option (at
load() or save() where Spark's Python data source API lets the source know); the
`kafka.` prefix of Spark's Kafka connector works; and the source is found by Spark without
registration (where discovery can work)."""

from __future__ import annotations

import re

import pytest

from broker.client import Cluster
from tests.spark.helpers import create_topic, produce
from tests.support.ports import free_port


def error_of(action) -> str:
    with pytest.raises(Exception) as exc:
        action()
    return str(exc.value)


def one_clear_line(text: str, option: str) -> str:
    """The message line naming the option, once (Spark adds its traceback around it)."""
    lines = sorted({m.group(0) for m in re.finditer(rf"kbroker: option '{re.escape(option)}'[^\n]*", text)})
    assert len(lines) == 1, f"expected one message naming {option!r}, got {lines!r} in:\n{text[:3000]}"
    return lines[0]


def test_source_discovered_without_registration(spark, spark_info):
    # recorded by the session fixture before it registered anything: Spark's own lookup of
    # top-level pyspark_* modules found pyspark_kbroker.DefaultSource
    assert spark_info.discovered, f"kbroker not discovered (workers had {spark_info.discovery_path} on the path)"


def test_missing_bootstrap(spark, topic_name):
    text = error_of(lambda: spark.read.format("kbroker").option("subscribe", topic_name).load().collect())
    line = one_clear_line(text, "kbroker.bootstrap.servers")
    assert "must be specified" in line


def test_kafka_prefix_as_in_sparks_connector(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    placed = produce(broker.bootstrap, topic_name, 0, 50, 2)
    df = (
        spark.read.format("kbroker")
        .option("kafka.bootstrap.servers", broker.bootstrap)
        .option("kafka.max.partition.fetch.bytes", 4096)
        .option("kafka.client.id", "ported-job")
        .option("subscribe", topic_name)
        .load()
    )
    assert sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect()) == sorted(
        placed.values()
    )


def test_unknown_and_invalid_options_fail_at_load(spark, broker, topic_name):
    """A typo or a bad value fails load(), for batch and streaming reads alike."""

    def load(stream: bool, **opts):
        r = (spark.readStream if stream else spark.read).format("kbroker")
        r = r.option("kafka.bootstrap.servers", broker.bootstrap).option("subscribe", topic_name)
        for k, v in opts.items():
            r = r.option(k, v)
        return r.load()

    for stream in (False, True):
        text = error_of(lambda s=stream: load(s, startingOffset="earliest"))
        assert "did you mean 'startingOffsets'" in one_clear_line(text, "startingoffset")
        text = error_of(lambda s=stream: load(s, **{"kafka.fetch.max.bytes": "lots"}))
        assert "must be an integer" in one_clear_line(text, "kafka.fetch.max.bytes")
        text = error_of(lambda s=stream: load(s, **{"kafka.security.protocol": "SSL"}))
        assert "PLAINTEXT only" in one_clear_line(text, "kafka.security.protocol")


def test_invalid_client_option_fails_the_write_before_any_task(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    df = spark.createDataFrame([("a",)], "value string")
    text = error_of(
        lambda: (
            df.write.format("kbroker")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic_name)
            .option("kafka.acks", "banana")
            .mode("append")
            .save()
        )
    )
    assert "must be all, -1, 1 or 0" in one_clear_line(text, "kafka.acks")
    text = error_of(
        lambda: (
            df.write.format("kbroker")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("topic", topic_name)
            .option("kafka.compresion.type", "lz4")
            .mode("append")
            .save()
        )
    )
    assert "did you mean 'kafka.compression.type'" in one_clear_line(text, "kafka.compresion.type")
    with Cluster(broker.bootstrap) as c:
        assert c.list_offsets(topic_name, [0], -1)[0][0] == 0, "a refused write wrote"


def test_unreachable_bootstrap_same_message_for_read_and_write(spark, topic_name):
    nowhere = f"127.0.0.1:{free_port()}"
    read = error_of(
        lambda: (
            spark.read.format("kbroker")
            .option("kafka.bootstrap.servers", nowhere)
            .option("subscribe", topic_name)
            .load()
            .collect()
        )
    )
    df = spark.createDataFrame([("a",)], "value string")
    write = error_of(
        lambda: (
            df.write.format("kbroker")
            .option("kafka.bootstrap.servers", nowhere)
            .option("topic", topic_name)
            .mode("append")
            .save()
        )
    )
    line = one_clear_line(read, "kafka.bootstrap.servers")
    assert "no broker reachable" in line and nowhere in line
    assert one_clear_line(write, "kafka.bootstrap.servers") == line
    assert "ClientError" not in write


def test_unknown_topic(spark, broker, topic_name):
    text = error_of(
        lambda: (
            spark.read.format("kbroker")
            .option("kbroker.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic_name)
            .load()
            .collect()
        )
    )
    assert f"names topic '{topic_name}', which does not exist" in one_clear_line(text, "subscribe")


def test_malformed_starting_offsets(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    text = error_of(
        lambda: (
            spark.read.format("kbroker")
            .option("kbroker.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic_name)
            .option("startingOffsets", '{"t": {"0": 1')
            .load()
            .collect()
        )
    )
    assert "is not valid JSON" in one_clear_line(text, "startingOffsets")


def test_starting_offsets_must_cover_every_partition(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    text = error_of(
        lambda: (
            spark.read.format("kbroker")
            .option("kbroker.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic_name)
            .option("startingOffsets", f'{{"{topic_name}": {{"0": 0}}}}')
            .load()
            .collect()
        )
    )
    assert f"no entry for {topic_name}-1" in one_clear_line(text, "startingOffsets")


def test_streaming_bad_options(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)

    def start(**opts):
        r = spark.readStream.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap)
        for k, v in opts.items():
            r = r.option(k, v)
        q = r.load().writeStream.format("noop").start()
        try:
            q.awaitTermination(60)
            if q.exception() is not None:
                raise q.exception()
        finally:
            q.stop()

    text = error_of(lambda: start(subscribe=topic_name, endingOffsets="latest"))
    assert "streaming query has no end" in one_clear_line(text, "endingOffsets")
    assert "UnboundLocalError" not in text, "the message is buried under PySpark's own error"
    text = error_of(lambda: start(subscribe=topic_name, maxOffsetsPerTrigger="lots"))
    assert "must be an integer" in one_clear_line(text, "maxOffsetsPerTrigger")
    text = error_of(lambda: start(subscribe=topic_name + "-missing"))
    assert "does not exist" in one_clear_line(text, "subscribe")


def test_sink_needs_a_topic(spark, broker):
    df = spark.createDataFrame([("a",)], "value string")
    text = error_of(
        lambda: df.write.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap).mode("append").save()
    )
    assert "no 'topic' column" in one_clear_line(text, "topic")

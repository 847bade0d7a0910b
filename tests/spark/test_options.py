"""Bad options fail the query before any task runs, with one line naming the option; and
the source is found by Spark without registration (where discovery can work)."""
from __future__ import annotations

import re

import pytest

from tests.spark.helpers import create_topic


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


def test_kafka_prefix_gets_a_hint(spark, broker, topic_name):
    text = error_of(lambda: spark.read.format("kbroker").option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic_name).load().collect())
    assert "kafka.bootstrap.servers" in one_clear_line(text, "kbroker.bootstrap.servers")


def test_unknown_topic(spark, broker, topic_name):
    text = error_of(lambda: spark.read.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic_name).load().collect())
    assert f"names topic '{topic_name}', which does not exist" in one_clear_line(text, "subscribe")


def test_malformed_starting_offsets(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1)
    text = error_of(lambda: spark.read.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic_name).option("startingOffsets", '{"t": {"0": 1')
                    .load().collect())
    assert "is not valid JSON" in one_clear_line(text, "startingOffsets")


def test_starting_offsets_must_cover_every_partition(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 2)
    text = error_of(lambda: spark.read.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic_name).option("startingOffsets", f'{{"{topic_name}": {{"0": 0}}}}')
                    .load().collect())
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
    text = error_of(lambda: start(subscribe=topic_name, maxOffsetsPerTrigger="lots"))
    assert "must be an integer" in one_clear_line(text, "maxOffsetsPerTrigger")
    text = error_of(lambda: start(subscribe=topic_name + "-missing"))
    assert "does not exist" in one_clear_line(text, "subscribe")


def test_sink_needs_a_topic(spark, broker):
    df = spark.createDataFrame([("a",)], "value string")
    text = error_of(lambda: df.write.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap)
                    .mode("append").save())
    assert "no 'topic' column" in one_clear_line(text, "topic")

"""failOnDataLoss after retention removed offsets a query still needed: true fails with a
message saying which offsets are gone; false skips them and reads what is left."""

from __future__ import annotations

import json
import shutil

import pyarrow.parquet as pq
import pytest

from broker.client import Cluster
from tests.spark.helpers import create_topic, produce, wait_for

QUERY_TIMEOUT_S = 120


def log_start(broker, topic) -> int:
    with Cluster(broker.bootstrap) as c:
        return c.list_offsets(topic, [0], -2)[0][0]


def retain_only_the_tail(broker, topic) -> int:
    """retention.bytes small: whole old segments go; returns the new log start offset."""
    with Cluster(broker.bootstrap) as c:
        c.alter_topic_configs(topic, {"retention.bytes": "4096"})
    return wait_for(
        "retention to move the log start offset past 100",
        lambda: (s := log_start(broker, topic)) > 100 and s,
        timeout=30,
    )


def stream_to_parquet(spark, broker, topic, out, ckpt, fail_on_data_loss: str):
    df = (
        spark.readStream.format("kbroker")
        .option("kbroker.bootstrap.servers", broker.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("failOnDataLoss", fail_on_data_loss)
        .load()
    )
    return (
        df.selectExpr("offset")
        .writeStream.format("parquet")
        .option("path", str(out))
        .option("checkpointLocation", str(ckpt))
        .trigger(availableNow=True)
        .start()
    )


def offsets_in(path) -> list[int]:
    return sorted(pq.read_table(str(path)).column("offset").to_pylist())


def test_fail_on_data_loss_streaming(spark, broker, topic_name, tmp_path):
    create_topic(broker.bootstrap, topic_name, 1, {"segment.bytes": "2048"})
    produce(broker.bootstrap, topic_name, 0, 50, 1, batch_size=1024)
    ckpt, out = tmp_path / "ckpt", tmp_path / "out"
    q = stream_to_parquet(spark, broker, topic_name, out, ckpt, "true")
    assert q.awaitTermination(QUERY_TIMEOUT_S) and q.exception() is None
    assert offsets_in(out) == list(range(50))

    # the query's next offset is 50; retention removes it (and more) before the restart
    produce(broker.bootstrap, topic_name, 50, 450, 1, batch_size=1024)
    start = retain_only_the_tail(broker, topic_name)
    ckpt2, out2 = tmp_path / "ckpt2", tmp_path / "out2"
    shutil.copytree(ckpt, ckpt2)
    shutil.copytree(out, out2)

    q = stream_to_parquet(spark, broker, topic_name, out, ckpt, "true")
    with pytest.raises(Exception) as exc:
        q.awaitTermination(QUERY_TIMEOUT_S)
    assert not q.isActive
    err = str(exc.value)
    assert f"offsets 50..{start - 1} of {topic_name}-0 are gone" in err
    assert "failOnDataLoss" in err

    assert offsets_in(out) == list(range(50))  # nothing written by the failed run

    q = stream_to_parquet(spark, broker, topic_name, out2, ckpt2, "false")
    assert q.awaitTermination(QUERY_TIMEOUT_S)
    assert q.exception() is None
    # the lost offsets skipped, the rest read once
    assert offsets_in(out2) == list(range(50)) + list(range(start, 500))


def test_fail_on_data_loss_batch(spark, broker, topic_name):
    create_topic(broker.bootstrap, topic_name, 1, {"segment.bytes": "2048"})
    produce(broker.bootstrap, topic_name, 0, 500, 1, batch_size=1024)
    start = retain_only_the_tail(broker, topic_name)
    offsets_json = json.dumps({topic_name: {"0": 0}})

    def read(fail):
        return (
            spark.read.format("kbroker")
            .option("kbroker.bootstrap.servers", broker.bootstrap)
            .option("subscribe", topic_name)
            .option("startingOffsets", offsets_json)
            .option("failOnDataLoss", fail)
            .load()
            .select("offset")
        )

    with pytest.raises(Exception) as exc:
        read("true").collect()
    assert f"offsets 0..{start - 1} of {topic_name}-0 are gone" in str(exc.value)
    assert sorted(r[0] for r in read("false").collect()) == list(range(start, 500))


def test_data_lost_between_planning_and_reading(broker, topic_name):
    """A task whose range retention removed after planning (OFFSET_OUT_OF_RANGE on its
    first Fetch): fails, or goes on from the log start offset."""
    from broker.spark import KBrokerDataLossError
    from broker.spark.options import SourceOptions
    from broker.spark.reader import ReadSettings, read_range

    create_topic(broker.bootstrap, topic_name, 1, {"segment.bytes": "2048"})
    produce(broker.bootstrap, topic_name, 0, 500, 1, batch_size=1024)
    planned = (0, 500)
    start = retain_only_the_tail(broker, topic_name)

    def read(fail: bool) -> list[int]:
        settings = ReadSettings.of(
            SourceOptions.parse(
                {
                    "kbroker.bootstrap.servers": broker.bootstrap,
                    "subscribe": topic_name,
                    "failOnDataLoss": str(fail),
                    "kbroker.fetch.max.bytes": 1 << 20,
                    "kafkaConsumer.pollTimeoutMs": 10_000,
                    "kbroker.request.timeout.ms": 10_000,
                },
                streaming=False,
            )
        )
        return [o for rb in read_range(settings, topic_name, 0, *planned) for o in rb.column("offset").to_pylist()]

    with pytest.raises(KBrokerDataLossError, match=f"offsets 0..{start - 1} of {topic_name}-0 are gone"):
        read(True)
    assert read(False) == list(range(start, 500))

"""Spark's own Kafka connector (spark-sql-kafka-0-10 4.2.0, the newest served, on the
installed PySpark 4.3) reads from and writes to kbroker, in batch and streaming
(spark_connector_job.py runs it in a process of its own)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from broker.client import Cluster, Producer
from tests.interop.helpers import read_all
from tests.support.deps import require_module
from tests.support.kafka_tools import require_spark_libs

pytestmark = pytest.mark.interop

JOB = Path(__file__).with_name("spark_connector_job.py")
ROOT = Path(__file__).resolve().parents[2]
N = 60


def test_spark_kafka_connector_batch_and_streaming(kbroker, topic, tmp_path):
    require_module("pyspark")
    jars = require_spark_libs()
    b = kbroker.bootstrap
    out_topic, stream_out = topic + "-out", topic + "-stream-out"
    with Cluster(b) as c:
        for name in (topic, out_topic, stream_out):
            c.create_topic(name, 2, 1)
            c.topic(name, wait_s=10)
    with Producer(b, acks=-1) as p:
        for i in range(N):
            p.send(topic, f"v{i}".encode(), key=f"k{i}".encode(), partition=i % 2, headers=[("h", f"{i}".encode())])
        p.flush()

    run = subprocess.run(
        [
            sys.executable,
            str(JOB),
            b,
            topic,
            out_topic,
            stream_out,
            str(tmp_path / "checkpoints"),
            ",".join(map(str, jars)),
        ],
        capture_output=True,
        text=True,
        timeout=420,
        cwd=ROOT,
        stdin=subprocess.DEVNULL,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    steps = {
        s.pop("step"): s for s in map(json.loads, (line for line in run.stdout.splitlines() if line.startswith("{")))
    }
    assert list(steps) == ["batch_read", "batch_write", "stream_read", "stream_write"]

    rows = steps["batch_read"]["rows"]
    assert sorted(rows, key=lambda r: int(r[0][1:])) == [
        [f"k{i}", f"v{i}", i % 2, i // 2, [["h", str(i)]]] for i in range(N)
    ]
    assert steps["stream_read"]["values"] == sorted(f"v{i}" for i in range(N))

    copied = read_all(b, out_topic, [0, 1])
    assert sorted((r.partition, r.key, r.value, r.headers) for r in copied.values()) == sorted(
        (i % 2, f"k{i}".encode(), f"copy-v{i}".encode(), [("h", str(i).encode())]) for i in range(N)
    )
    streamed = read_all(b, stream_out, [0, 1])
    assert sorted(r.value for r in streamed.values()) == sorted(f"stream-v{i}".encode() for i in range(N))

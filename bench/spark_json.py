"""Spark decode of a 10-field JSON Schema record: the kbroker source's native JSON decoder
(valueFormat=json-schema) against Spark's own from_json on the same registry-framed bytes,
in one run. Spark has no JSON Schema decoder: from_json with the same Spark schema (given
by hand) is its peer.

    .venv/bin/python bench/spark_json.py [--messages 1000000] [--rounds 5] [--cores 1]

As bench/spark_avro.py: starts `broker serve` with its schema registry, registers a JSON
Schema of 10 properties (integer x2, string x3, number x2, boolean, a date-time string, a
nullable string) under <topic>-value and produces --messages records framed as Confluent's
JSONSerializer frames them (a 0 byte, the id, the UTF-8 JSON) into one partition per core;
then alternates, after a warm-up of each, --rounds times:

    kbroker:    format("kbroker") valueFormat=json-schema ... select("value.*") -> noop
    from_json:  format("kbroker") raw ... select(from_json(cast(substring(value, 6) as string), schema).*) -> noop
    raw:        format("kbroker") raw ... select(value) -> noop   (the fetch alone)

Reports records/s per core (median and best), each side's CPU (the JVM, the Python
workers), and each side's time above the raw read. The run is bounded (--timeout-s).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import statistics
import struct
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from bench.spark_avro import timed  # noqa: E402
from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

SCHEMA = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "bench.Click",
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "user": {"type": "integer"},
        "page": {"type": "string"},
        "referrer": {"type": "string"},
        "score": {"type": "number"},
        "ratio": {"type": "number"},
        "mobile": {"type": "boolean"},
        "kind": {"type": "string"},
        "at": {"type": "string", "format": "date-time"},
        "note": {"type": ["string", "null"]},
    },
    "required": ["id", "user", "page", "referrer", "score", "ratio", "mobile", "kind", "at"],
    "additionalProperties": False,
}
# the same as Spark's schema, for from_json
DDL = (
    "id BIGINT, user BIGINT, page STRING, referrer STRING, score DOUBLE, ratio DOUBLE, mobile BOOLEAN, "
    "kind STRING, at STRING, note STRING"
)


def produce(bootstrap: str, registry_url: str, topic: str, n: int, partitions: int) -> int:
    from confluent_kafka import Producer

    from broker.client import Cluster
    from broker.spark.formats import RegistryClient

    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1)
        c.topic(topic, wait_s=10.0)
    sid = RegistryClient(registry_url).register(f"{topic}-value", json.dumps(SCHEMA), "JSON")
    rng = random.Random(7)
    header = b"\x00" + struct.pack(">I", sid)
    pool = []  # 1000 distinct records, repeated: the decode work per record is the same
    for i in range(1000):
        doc = {
            "id": rng.randrange(2**40),
            "user": rng.randrange(10**6),
            "page": "/p/" + "x" * rng.randrange(5, 30),
            "referrer": "https://example.com/" + "r" * rng.randrange(0, 20),
            "score": rng.random() * 100,
            "ratio": rng.random(),
            "mobile": i % 2 == 0,
            "kind": ["VIEW", "CLICK", "BUY"][i % 3],
            "at": f"2026-01-02T03:04:{i % 60:02d}.{i:06d}Z",
            "note": None if i % 4 else f"note {i}",
        }
        pool.append(header + json.dumps(doc, separators=(",", ":")).encode())
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.size": 1 << 20, "compression.type": "none"})
    for i in range(n):
        while True:
            try:
                p.produce(topic, pool[i % 1000], partition=i % partitions)
                break
            except BufferError:
                p.poll(0.1)
        if i % 10000 == 0:
            p.poll(0)
    assert p.flush(120) == 0
    return sid


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cores", type=int, default=1)
    ap.add_argument("--timeout-s", type=int, default=1800)
    args = ap.parse_args()
    signal.signal(signal.SIGALRM, lambda *_: sys.exit("bench/spark_json.py: --timeout-s reached"))
    signal.alarm(args.timeout_s)

    tmp = tempfile.mkdtemp(prefix="kbroker-spark-json-bench-")
    port = free_port()
    try:
        cfg = {"schema.registry.listener": f"127.0.0.1:{port}", "num.partitions": args.cores}
        with BrokerProcess(os.path.join(tmp, "data"), config=cfg) as broker:
            url = f"http://127.0.0.1:{port}"
            topic = "clicks"
            t0 = time.perf_counter()
            produce(broker.bootstrap, url, topic, args.messages, args.cores)
            print(f"produced {args.messages:,} framed 10-property JSON records in {time.perf_counter() - t0:.1f} s")

            from pyspark.sql import SparkSession
            from pyspark.sql.functions import expr, from_json

            from broker.spark import KBrokerDataSource

            spark = (
                SparkSession.builder.master(f"local[{args.cores}]")
                .appName("kbroker-spark-json-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.memory", "2g")
                .config("spark.sql.session.timeZone", "UTC")
                .getOrCreate()
            )
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(KBrokerDataSource)

            def source(**options):
                r = spark.read.format("kbroker").option("kbroker.bootstrap.servers", broker.bootstrap)
                r = r.option("subscribe", topic)
                for k, v in options.items():
                    r = r.option(k, v)
                return r.load()

            def kbroker_df():
                return source(valueFormat="json-schema", **{"schema.registry.url": url}).select("value.*")

            def from_json_df():
                text = expr("cast(substring(value, 6, length(value) - 5) as string)")
                return source().select(from_json(text, DDL).alias("v")).select("v.*")

            a = kbroker_df().limit(2000).collect()
            b = from_json_df().limit(2000).collect()
            assert [r.asDict() for r in a] == [r.asDict() for r in b], "the two decoders disagree"
            print("the kbroker decoder and from_json agree on a 2,000-row sample", flush=True)

            sides = {
                "kbroker": lambda: kbroker_df().write.format("noop").mode("overwrite").save(),
                "from_json": lambda: from_json_df().write.format("noop").mode("overwrite").save(),
                "raw": lambda: source().select("value").write.format("noop").mode("overwrite").save(),
            }
            for fn in sides.values():
                fn()  # warm-up
            times: dict[str, list[float]] = {k: [] for k in sides}
            cpu: dict[str, list[tuple[float, float]]] = {}
            jvm_pid = spark.sparkContext._gateway.proc.pid
            for r in range(args.rounds):
                for name, fn in sides.items():
                    times[name].append(timed(fn, jvm_pid, cpu, name))
                print(f"round {r + 1}: " + ", ".join(f"{k} {v[-1]:.2f} s" for k, v in times.items()), flush=True)

            n, cores = args.messages, args.cores
            print()
            print(
                "| side | median | best | records/s per core (median) | (best) | CPU s: JVM / Python workers (median) |"
            )
            print("|---|---|---|---|---|---|")
            for name, ts in times.items():
                med, best = statistics.median(ts), min(ts)
                jc = statistics.median(c[0] for c in cpu[name])
                pc = statistics.median(c[1] for c in cpu[name])
                print(
                    f"| {name} | {med:.2f} s | {best:.2f} s | {n / med / cores:,.0f} | {n / best / cores:,.0f} "
                    f"| {jc:.2f} / {pc:.2f} |"
                )
            med = {k: statistics.median(v) for k, v in times.items()}
            print(
                f"\nkbroker / from_json rate: {med['from_json'] / med['kbroker']:.2f}x (medians of the whole read); "
                f"decode alone (time above the raw read): kbroker {med['kbroker'] - med['raw']:.2f} s, "
                f"from_json {med['from_json'] - med['raw']:.2f} s"
            )
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

"""Spark batch read through the kbroker data source, side by side with Spark reading the
same rows from a Parquet file on local disk, in the same run and Spark session.

    .venv/bin/python bench/spark_read.py [--messages 1000000] [--size 100] [--partitions 4]
                                         [--rounds 3] [--write] [--kafka-connector]

Starts `broker serve` on a free port (data in a temp dir); produces the messages (random,
incompressible values of --size bytes, 8-byte keys) with the sink's native encoder; starts
a local Spark session (local[2], UI off); writes the rows the data source returns to a
Parquet file (snappy, Spark's default) once; then, after one warm-up of each, alternates
`--rounds` times:

    kbroker:  spark.read.format("kbroker")...load().write.format("noop").save()
    parquet:  spark.read.parquet(path).write.format("noop").save()

With --kafka-connector, Spark's own (JVM) Kafka connector reads the same topic from kbroker
too (the jars `make testdeps` fetched, tests/jvm/target/spark-libs):

    kafka:    spark.read.format("kafka")...load().write.format("noop").save()

The noop sink materialises every column of every row, so both sides decode everything
(a count() would let Parquet answer from its footers). Reports rows/s (best and median
of the rounds) and the ratio. With --write, also times Spark batch writes of the Parquet
rows into new topics through the data source (after a warm-up write). Client, Spark and broker share this
machine's cores: say so next to the numbers. The whole run is bounded (--timeout-s).
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.broker_proc import BrokerProcess  # noqa: E402


def produce(bootstrap: str, topic: str, n: int, size: int, partitions: int) -> float:
    """n records with the sink's native encoder (TaskWriter); seconds taken."""
    import numpy as np
    import pyarrow as pa

    from broker.client import Cluster
    from broker.spark.options import SinkOptions
    from broker.spark.writer import TaskWriter

    with Cluster(bootstrap) as c:
        c.create_topic(topic, partitions, 1)
        c.topic(topic, wait_s=10.0)
    rng = np.random.default_rng(7)
    chunk = 100_000
    t0 = time.perf_counter()
    w = TaskWriter(SinkOptions.parse({"kbroker.bootstrap.servers": bootstrap, "topic": topic}))
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        data = rng.integers(0, 256, size=m * size, dtype=np.uint8).tobytes()
        values = pa.Array.from_buffers(
            pa.binary(),
            m,
            [None, pa.py_buffer(np.arange(0, (m + 1) * size, size, dtype=np.int32).tobytes()), pa.py_buffer(data)],
        )
        keys = pa.Array.from_buffers(
            pa.binary(),
            m,
            [
                None,
                pa.py_buffer(np.arange(0, (m + 1) * 8, 8, dtype=np.int32).tobytes()),
                pa.py_buffer(np.arange(start, start + m, dtype=">u8").tobytes()),
            ],
        )  # 8-byte big-endian ids
        w.write_batch(pa.RecordBatch.from_arrays([keys, values], names=["key", "value"]))
    msg = w.finish()
    elapsed = time.perf_counter() - t0
    assert msg.records == n, msg
    return elapsed


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--write", action="store_true", help="also time a Spark batch write through the data source")
    ap.add_argument("--kafka-connector", action="store_true", help="also Spark's JVM Kafka connector")
    ap.add_argument("--timeout-s", type=int, default=1800, help="give up after this long")
    args = ap.parse_args()

    def give_up(*_):
        raise TimeoutError(f"the benchmark took over --timeout-s={args.timeout_s} s")

    signal.signal(signal.SIGALRM, give_up)
    signal.alarm(args.timeout_s)

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    tmp = tempfile.mkdtemp(prefix="kbroker-spark-bench-")
    try:
        with BrokerProcess(os.path.join(tmp, "data"), config={"num.partitions": args.partitions}) as broker:
            topic = "bench"
            secs = produce(broker.bootstrap, topic, args.messages, args.size, args.partitions)
            print(
                f"produced {args.messages:,} x {args.size} B into {args.partitions} partitions in {secs:.2f} s "
                f"({args.messages / secs:,.0f} msg/s, native encoder, acks=all)",
                flush=True,
            )

            from pyspark.sql import SparkSession

            from broker.spark import KBrokerDataSource

            builder = (
                SparkSession.builder.master("local[2]")
                .appName("kbroker-spark-bench")
                .config("spark.ui.enabled", "false")
                .config("spark.ui.showConsoleProgress", "false")
                .config("spark.driver.memory", "2g")
                .config("spark.sql.session.timeZone", "UTC")
            )
            if args.kafka_connector:
                from tests.support.kafka_tools import SPARK_LIBS

                builder = builder.config("spark.jars", ",".join(str(j) for j in sorted(SPARK_LIBS.glob("*.jar"))))
            spark = builder.getOrCreate()
            spark.sparkContext.setLogLevel("ERROR")
            spark.dataSource.register(KBrokerDataSource)

            def kb():
                return (
                    spark.read.format("kbroker")
                    .option("kbroker.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic)
                    .load()
                )

            parquet = os.path.join(tmp, "rows.parquet")
            t = timed(lambda: kb().write.mode("overwrite").parquet(parquet))
            size_mb = sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(parquet) for f in fs) / 1e6
            print(f"wrote the same rows to Parquet ({size_mb:.0f} MB on disk) in {t:.2f} s", flush=True)
            n_parquet = spark.read.parquet(parquet).count()
            assert n_parquet == args.messages, n_parquet

            def read_kbroker():
                kb().write.format("noop").mode("overwrite").save()

            def read_parquet():
                spark.read.parquet(parquet).write.format("noop").mode("overwrite").save()

            def read_kafka_connector():
                (
                    spark.read.format("kafka")
                    .option("kafka.bootstrap.servers", broker.bootstrap)
                    .option("subscribe", topic)
                    .load()
                    .write.format("noop")
                    .mode("overwrite")
                    .save()
                )

            readers = {"kbroker": read_kbroker, "parquet": read_parquet}
            if args.kafka_connector:
                readers["kafka connector"] = read_kafka_connector
            for read in readers.values():
                read()  # warm-up: Python workers, JIT, page cache
            times = {name: [] for name in readers}
            for r in range(args.rounds):
                for name, read in readers.items():
                    times[name].append(timed(read))
                print(
                    f"round {r + 1}: " + ", ".join(f"{name} {ts[-1]:.2f} s" for name, ts in times.items()), flush=True
                )

            n = args.messages
            print()
            print("| source | rows | best | median | rows/s (best) | rows/s (median) |")
            print("|---|---|---|---|---|---|")
            for name, ts in times.items():
                best, med = min(ts), statistics.median(ts)
                print(f"| {name} | {n:,} | {best:.2f} s | {med:.2f} s | {n / best:,.0f} | {n / med:,.0f} |")
            ratio_best = min(times["parquet"]) / min(times["kbroker"])
            ratio_med = statistics.median(times["parquet"]) / statistics.median(times["kbroker"])
            print(f"\nkbroker / parquet rate: {ratio_best:.0%} (best), {ratio_med:.0%} (median); goal >= 50%")

            if args.write:
                from broker.client import Cluster

                src = spark.read.parquet(parquet).select("key", "value")

                def write(topic):
                    (
                        src.write.format("kbroker")
                        .option("kbroker.bootstrap.servers", broker.bootstrap)
                        .option("topic", topic)
                        .mode("append")
                        .save()
                    )

                with Cluster(broker.bootstrap) as c:
                    for r in range(args.rounds + 1):
                        c.create_topic(f"bench-write-{r}", args.partitions, 1)
                write("bench-write-0")  # warm-up: the write path's Python workers
                wt = [timed(lambda r=r: write(f"bench-write-{r + 1}")) for r in range(args.rounds)]
                print(
                    f"Spark batch write of {n:,} rows (from the Parquet file) through the data source: "
                    f"best {min(wt):.2f} s ({n / min(wt):,.0f} rows/s), median {statistics.median(wt):.2f} s "
                    f"({n / statistics.median(wt):,.0f} rows/s)"
                )
            spark.stop()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

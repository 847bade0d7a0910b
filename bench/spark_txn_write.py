"""The kbroker Spark sink's exactly-once delivery against its at-least-once delivery: the
same Spark batch write (a Parquet file of N rows into a fresh topic), alternating.

    .venv/bin/python bench/spark_txn_write.py [--rows 1000000] [--size 100] [--partitions 4] [--rounds 3]

Starts `broker serve` on a free port (one broker, data in a temp dir) and a local Spark
session (local[2], UI off); writes the rows once to Parquet; after one warm-up write of
each delivery, alternates `--rounds` times:

    at-least-once:  df.write.format("kbroker")...save()
    exactly-once:   df.write.format("kbroker").option("deliveryGuarantee", "exactly-once")...save()

Reports rows/s (median and each round). Client, Spark and broker share this machine's
cores: the 1-minute load average is printed with each figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from tests.support.broker_proc import BrokerProcess  # noqa: E402


def load1() -> float:
    return os.getloadavg()[0]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--size", type=int, default=100)
    p.add_argument("--partitions", type=int, default=4)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    tmp = tempfile.mkdtemp(prefix="kbroker-spark-txn-")
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from broker.client import Cluster
    from broker.spark import KBrokerDataSource

    with BrokerProcess(os.path.join(tmp, "data"), config={"transaction.state.log.num.partitions": 5}) as b:
        spark = (
            SparkSession.builder.master("local[2]")
            .appName("kbroker-txn-bench")
            .config("spark.ui.enabled", "false")
            .config("spark.ui.showConsoleProgress", "false")
            .config("spark.driver.memory", "2g")
            .getOrCreate()
        )
        spark.sparkContext.setLogLevel("ERROR")
        spark.dataSource.register(KBrokerDataSource)
        parquet = os.path.join(tmp, "rows.parquet")
        (
            spark.range(args.rows)
            .selectExpr("cast(id as string) as key", f"cast(repeat('x', {args.size}) as binary) as value")
            .repartition(args.partitions)
            .write.parquet(parquet)
        )
        df = spark.read.parquet(parquet)
        results: dict[str, list[tuple[float, float]]] = {"at-least-once": [], "exactly-once": []}
        n = 0

        def write(delivery: str) -> float:
            nonlocal n
            n += 1
            topic = f"w{n}"
            with Cluster(b.bootstrap) as c:
                c.create_topic(topic, args.partitions, 1)
            t0 = time.perf_counter()
            (
                df.write.format("kbroker")
                .option("kbroker.bootstrap.servers", b.bootstrap)
                .option("topic", topic)
                .option("deliveryGuarantee", delivery)
                .mode("append")
                .save()
            )
            return args.rows / (time.perf_counter() - t0)

        for delivery in results:
            write(delivery)  # warm-up
        for rnd in range(args.rounds):
            order = list(results) if rnd % 2 == 0 else list(reversed(results))
            for delivery in order:
                load = load1()
                rate = write(delivery)
                results[delivery].append((rate, load))
                print(f"round {rnd + 1}: {delivery:>14}: {rate:>12,.0f} rows/s (load {load:.1f})", flush=True)
        spark.stop()
    for delivery, rows in results.items():
        rates = [r for r, _ in rows]
        print(
            f"{delivery:>14}: median {statistics.median(rates):,.0f} rows/s ({', '.join(f'{r:,.0f}' for r in rates)})"
        )
    alo = statistics.median(r for r, _ in results["at-least-once"])
    eos = statistics.median(r for r, _ in results["exactly-once"])
    print(f"exactly-once / at-least-once: {eos / alo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

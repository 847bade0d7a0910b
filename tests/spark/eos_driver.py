"""The driver of test_standalone_exactly_once.py, run as its own process (the test kills
it with SIGKILL and starts it again from the checkpoint):

    python -m tests.spark.eos_driver MASTER BOOTSTRAP SRC DST CHECKPOINT PER_TRIGGER

A streaming query on the standalone cluster at MASTER copies SRC to DST with the kbroker
source (read_committed) and sink (deliveryGuarantee=exactly-once), a few hundred records
per micro-batch, until it is killed or stopped (SIGTERM). The offset lookups and the
sink's produces retry long enough to outlast a broker's failover.
"""

from __future__ import annotations

import signal
import sys
import time


def main(master: str, bootstrap: str, src: str, dst: str, checkpoint: str, per_trigger: int) -> int:
    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.master(master)
        .appName("kbroker-eos")
        .config("spark.ui.enabled", "false")
        .config("spark.executor.cores", "1")
        .config("spark.executor.memory", "512m")
        .config("spark.cores.max", "2")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.task.maxFailures", "8")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    from broker.spark import KBrokerDataSource

    spark.dataSource.register(KBrokerDataSource)
    df = (
        spark.readStream.format("kbroker")
        .option("kbroker.bootstrap.servers", bootstrap)
        .option("subscribe", src)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(per_trigger))
        .option("kafka.isolation.level", "read_committed")
        # a killed broker's partitions get a new leader after the ZooKeeper session
        # (6 s): the offset lookups retry through it (Spark's Kafka source options)
        .option("fetchOffset.numRetries", "60")
        .option("fetchOffset.retryIntervalMs", "500")
        .load()
    )
    q = (
        df.selectExpr("key", "concat('copy-', cast(value as string)) as value")
        .writeStream.format("kbroker")
        .option("kbroker.bootstrap.servers", bootstrap)
        .option("topic", dst)
        .option("checkpointLocation", checkpoint)
        .option("deliveryGuarantee", "exactly-once")
        .option("kbroker.retries", "40")
        .trigger(processingTime="300 milliseconds")
        .start()
    )
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(1))
    print("driver: query started", flush=True)
    while not stopping and q.isActive:
        time.sleep(0.2)
    if q.exception() is not None:
        print(f"driver: query failed: {q.exception()}", flush=True)
        return 1
    q.stop()
    spark.stop()
    return 0


if __name__ == "__main__":
    a = sys.argv[1:]
    sys.exit(main(a[0], a[1], a[2], a[3], a[4], int(a[5])))

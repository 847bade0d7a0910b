"""The click-stream example in one command, against a broker started with `make serve`:

    make serve                                   # in another terminal
    .venv/bin/python examples/clickstream/run.py

1. creates the topics `clicks` (4 partitions) and `click-counts` (1) if they are missing;
2. starts the Spark job (pipeline.py): per-minute counts per page, to `click-counts` and
   to Parquet under examples/clickstream/output/<run>/counts (a minute's count is written
   once the watermark, one minute of event time behind the latest click, has passed it);
3. generates click events (generate.py) for --duration seconds, event time running
   --speedup times faster than the clock, and lets the job catch up;
4. stops the job and shows the output: `broker consume --topic click-counts` and the
   final counts from the Parquet files.

Options: --bootstrap HOST:PORT (127.0.0.1:9092), --duration S (40), --rate N (500 events/s),
--speedup X (20). Each run has its own checkpoints; the topics accumulate runs.
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from broker.client import Cluster  # noqa: E402
from broker.client.connection import ClientError  # noqa: E402
from broker.protocol.errors import ErrorCode, KafkaProtocolError  # noqa: E402


def ensure_topic(cluster: Cluster, name: str, partitions: int) -> None:
    try:
        cluster.create_topic(name, partitions, 1)
        print(f"created topic {name} ({partitions} partitions)")
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    cluster.topic(name, wait_s=10.0)


def broker_command() -> list[str]:
    exe = Path(sys.executable).with_name("broker")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "broker.cli.main"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of click generation")
    ap.add_argument("--rate", type=int, default=500, help="click events per second")
    ap.add_argument("--speedup", type=float, default=20.0, help="event-time seconds per wall-clock second")
    ap.add_argument("--clicks-topic", default="clicks")
    ap.add_argument("--counts-topic", default="click-counts")
    ap.add_argument("--out", default=str(HERE / "output"), help="where the run's Parquet and checkpoints go")
    args = ap.parse_args()

    try:
        with Cluster(args.bootstrap, timeout=5.0) as cluster:
            cluster.any_connection()
            ensure_topic(cluster, args.clicks_topic, 4)
            ensure_topic(cluster, args.counts_topic, 1)
    except ClientError as exc:
        print(f"no broker at {args.bootstrap} ({exc}): start one with `make serve` first", file=sys.stderr)
        return 1

    run = datetime.now(timezone.utc).strftime("run-%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run
    parquet_dir, checkpoints = out / "counts", out / "checkpoints"
    print(f"starting Spark (local[2]); output in {out}")

    from generate import generate
    from pipeline import build_queries, spark_session

    spark = spark_session()
    to_topic, to_parquet = build_queries(spark, args.bootstrap, args.clicks_topic, args.counts_topic,
                                         str(parquet_dir), str(checkpoints))
    # both queries have fixed their starting offsets ("latest") once they ran a trigger
    deadline = time.monotonic() + 120
    while (to_topic.lastProgress is None or to_parquet.lastProgress is None) and time.monotonic() < deadline:
        for q in (to_topic, to_parquet):
            if q.exception() is not None:
                raise q.exception()
        time.sleep(0.5)

    print(f"generating clicks for {args.duration:.0f} s at {args.rate}/s "
          f"({args.duration * args.speedup / 60:.0f} minutes of event time)")
    stop = threading.Event()
    counted = {}
    gen = threading.Thread(target=lambda: counted.setdefault(
        "n", generate(args.bootstrap, args.clicks_topic, args.rate, args.duration, args.speedup, stop=stop)),
        daemon=True)
    gen.start()
    try:
        while gen.is_alive():
            gen.join(5)
            p = to_topic.lastProgress
            if p:
                print(f"  batch {p['batchId']}: {p['numInputRows']} clicks in, "
                      f"{p['sink'].get('numOutputRows', '?')} counts out")
        time.sleep(8)                            # the last triggers catch up
    finally:
        stop.set()
        for q in (to_topic, to_parquet):
            q.stop()
    print(f"generated {counted.get('n', 0)} clicks")

    print(f"\n$ broker consume --bootstrap {args.bootstrap} --topic {args.counts_topic} "
          f"--from-beginning --print-key --timeout-ms 3000 | tail -15")
    shown = subprocess.run(broker_command() + ["consume", "--bootstrap", args.bootstrap, "--topic",
                                               args.counts_topic, "--from-beginning", "--print-key",
                                               "--timeout-ms", "3000"],
                           capture_output=True, text=True, timeout=120)
    lines = shown.stdout.splitlines()
    print("\n".join(lines[-15:]) if lines else shown.stderr)
    print(f"({len(lines)} counts in {args.counts_topic} in all)")

    if parquet_dir.exists() and any(parquet_dir.glob("*.parquet")):
        final = spark.read.parquet(str(parquet_dir)).orderBy("minute", "page")
        print(f"\nper-minute counts in Parquet ({final.count()} rows; the last minute or two stay open until "
              f"later clicks move the watermark past them):")
        final.show(12, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The click-stream example in one command, against a running broker or cluster:

    make serve                                   # in another terminal: a broker on 127.0.0.1:9092
    .venv/bin/python examples/clickstream/run.py

1. creates the topics `clicks` (4 partitions) and `click-counts` (1) if they are missing,
   with --replication-factor replicas (default: the cluster's default.replication.factor);
2. starts the Spark job (pipeline.py) on --master (local[2], or a standalone cluster's
   spark://HOST:PORT): per-minute counts per page, to `click-counts` and to Parquet under
   --out/<run>/counts (a minute's count is written once the watermark, one minute of
   event time behind the latest click, has passed it);
3. generates click events (generate.py) for --duration seconds, event time running
   --speedup times faster than the clock, and lets the job catch up: until both queries
   have read every click and run the batch that closes the last minutes it can;
4. stops the job and shows the output: `broker consume --topic click-counts` and the
   final counts from the Parquet files.

Options: --bootstrap HOST:PORT[,HOST:PORT...] (127.0.0.1:9092), --master (local[2]),
--replication-factor N, --duration S (40), --rate N (500 events/s), --speedup X (20),
--out DIR (default: kbroker-examples/clickstream in the system's temporary directory, not
the checkout). Each run has its own checkpoints and output directory; the topics
accumulate runs. It imports the installed kbroker package (pip install, or the editable
install of `make install`), nothing from the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from broker.client import Cluster
from broker.client.connection import ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError

DEFAULT_OUT = os.path.join(tempfile.gettempdir(), "kbroker-examples", "clickstream")
CATCH_UP_TIMEOUT_S = 120


def ensure_topic(cluster: Cluster, name: str, partitions: int, replication_factor: int) -> None:
    try:
        cluster.create_topic(name, partitions, replication_factor)
        rf = (
            "the cluster's default replication factor"
            if replication_factor < 0
            else f"replication factor {replication_factor}"
        )
        print(f"created topic {name} ({partitions} partitions, {rf})")
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    cluster.topic(name, wait_s=10.0)


def broker_command() -> list[str]:
    exe = Path(sys.executable).with_name("broker")
    return [str(exe)] if exe.exists() else [sys.executable, "-m", "broker.cli.main"]


def caught_up(query, topic: str, ends: dict) -> bool:
    """The query has read up to `ends` ({partition: offset}) and run a batch after that
    (the one that closes the minutes the watermark has passed)."""
    p = query.lastProgress
    if not p or not p.get("sources"):
        return False
    end = p["sources"][0].get("endOffset")
    end = json.loads(end) if isinstance(end, str) else end
    read = {int(k): v for k, v in (end or {}).get(topic, {}).items()}
    return read == ends and p["numInputRows"] == 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092", help="HOST:PORT[,HOST:PORT...]")
    ap.add_argument("--master", default="local[2]", help="Spark master: local[N] or spark://HOST:PORT")
    ap.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replicas of the topics it creates (default: the cluster's default.replication.factor)",
    )
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of click generation")
    ap.add_argument("--rate", type=int, default=500, help="click events per second")
    ap.add_argument("--speedup", type=float, default=20.0, help="event-time seconds per wall-clock second")
    ap.add_argument("--clicks-topic", default="clicks")
    ap.add_argument("--counts-topic", default="click-counts")
    ap.add_argument("--out", default=DEFAULT_OUT, help=f"where the run's Parquet and checkpoints go ({DEFAULT_OUT})")
    args = ap.parse_args()

    try:
        with Cluster(args.bootstrap, timeout=5.0) as cluster:
            cluster.any_connection()
            ensure_topic(cluster, args.clicks_topic, 4, args.replication_factor)
            ensure_topic(cluster, args.counts_topic, 1, args.replication_factor)
    except ClientError as exc:
        print(f"no broker at {args.bootstrap} ({exc}): start one with `make serve` first", file=sys.stderr)
        return 1

    run = datetime.now(timezone.utc).strftime("run-%Y%m%dT%H%M%SZ")
    out = Path(args.out) / run
    parquet_dir, checkpoints = out / "counts", out / "checkpoints"
    print(f"starting Spark ({args.master}); output in {out}")

    from generate import generate
    from pipeline import build_queries, spark_session

    spark = spark_session(master=args.master)
    to_topic, to_parquet = build_queries(
        spark, args.bootstrap, args.clicks_topic, args.counts_topic, str(parquet_dir), str(checkpoints)
    )
    # both queries have fixed their starting offsets ("latest") once they ran a trigger
    deadline = time.monotonic() + 120
    while (to_topic.lastProgress is None or to_parquet.lastProgress is None) and time.monotonic() < deadline:
        for q in (to_topic, to_parquet):
            if q.exception() is not None:
                raise q.exception()
        time.sleep(0.5)

    print(
        f"generating clicks for {args.duration:.0f} s at {args.rate}/s "
        f"({args.duration * args.speedup / 60:.0f} minutes of event time)"
    )
    stop = threading.Event()
    counted = {}
    gen = threading.Thread(
        target=lambda: counted.setdefault(
            "n", generate(args.bootstrap, args.clicks_topic, args.rate, args.duration, args.speedup, stop=stop)
        ),
        daemon=True,
    )
    gen.start()
    try:
        while gen.is_alive():
            gen.join(5)
            p = to_topic.lastProgress
            if p:
                print(
                    f"  batch {p['batchId']}: {p['numInputRows']} clicks in, "
                    f"{p['sink'].get('numOutputRows', '?')} counts out"
                )
        with Cluster(args.bootstrap, timeout=5.0) as cluster:
            parts = sorted(cluster.topic(args.clicks_topic).partitions)
            ends = {p: off for p, (off, _) in cluster.list_offsets(args.clicks_topic, parts, -1).items()}
        deadline = time.monotonic() + CATCH_UP_TIMEOUT_S
        while not all(caught_up(q, args.clicks_topic, ends) for q in (to_topic, to_parquet)):
            for q in (to_topic, to_parquet):
                if q.exception() is not None:
                    raise q.exception()
            if time.monotonic() > deadline:
                print(f"warning: the queries did not catch up within {CATCH_UP_TIMEOUT_S} s", file=sys.stderr)
                break
            time.sleep(0.5)
    finally:
        stop.set()
        for q in (to_topic, to_parquet):
            q.stop()
    print(f"generated {counted.get('n', 0)} clicks")

    print(
        f"\n$ broker consume --bootstrap {args.bootstrap} --topic {args.counts_topic} "
        f"--from-beginning --print-key --timeout-ms 3000 | tail -15"
    )
    shown = subprocess.run(
        broker_command()
        + [
            "consume",
            "--bootstrap",
            args.bootstrap,
            "--topic",
            args.counts_topic,
            "--from-beginning",
            "--print-key",
            "--timeout-ms",
            "3000",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = shown.stdout.splitlines()
    print("\n".join(lines[-15:]) if lines else shown.stderr)
    print(f"({len(lines)} counts in {args.counts_topic} in all)")

    if parquet_dir.exists() and any(parquet_dir.glob("*.parquet")):
        final = spark.read.parquet(str(parquet_dir)).orderBy("minute", "page")
        print(
            f"\nper-minute counts in Parquet ({final.count()} rows in {parquet_dir}; the last minute or two "
            f"stay open until later clicks move the watermark past them):"
        )
        final.show(12, truncate=False)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

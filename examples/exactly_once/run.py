"""Exactly-once page-view counts in one command, against a running broker or cluster, and
a check of the result:

    make serve                                   # in another terminal: a broker on 127.0.0.1:9092
    .venv/bin/python examples/exactly_once/run.py

1. creates the topics `views` (6 partitions) and `view-counts` (1) if they are missing,
   with --replication-factor replicas (default: the cluster's default.replication.factor);
2. starts the Spark job (pipeline.py) on --master (local[2], or a standalone cluster's
   spark://HOST:PORT): views per page and 5-minute window (--window) of event time, a
   1-minute watermark (--watermark), joined with a static table of the site's sections,
   written to `view-counts` with deliveryGuarantee=exactly-once; the source commits its
   positions to the consumer group `view-counts` (--group) for Kafka's lag tools;
3. generates page views for --duration seconds at --rate views/s, their event time
   running --speedup times faster than the clock, printing one line per micro-batch:

       batch 7: 1523 views in, 8 counts out, 12 behind latest (max), watermark 2026-01-01 10:04:00, 0.84 s

4. waits until the job has read every view and run the batch after, stops it, and
   checks what it wrote: the counts read back with isolation.level=read_committed
   against the same views counted again by a Spark batch job, window by window, for
   every window the watermark closed:

       checked: 24 (window, page) rows, 0 written twice, 0 missing, 0 wrong;
       19,873 of 19,873 views of the closed windows counted

   and exits 1 if anything is off (or the query failed). Ctrl-C during the generation
   ends it early; the job still catches up and the result is checked.

Options: --bootstrap HOST:PORT[,HOST:PORT...] (127.0.0.1:9092), --master (local[2]),
--replication-factor N, --duration S (40), --rate N (500), --speedup X (30), --window
(5 minutes), --watermark (1 minute), --group NAME (view-counts; "" for none), --checkpoint
DIR (default: a new directory under kbroker-examples/exactly-once in the system's temporary
directory; the same DIR again resumes the query, and its check covers every run with that
DIR), --views-topic, --counts-topic, --catch-up-timeout S (180). It imports the installed
kbroker package, nothing from the checkout.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
import tempfile
import threading
import time
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from broker.client import Cluster, Producer
from broker.client.connection import ClientError
from broker.protocol.errors import ErrorCode, KafkaProtocolError

DEFAULT_DIR = os.path.join(tempfile.gettempdir(), "kbroker-examples", "exactly-once")
WEIGHTS = [30, 12, 5, 18, 9, 8, 15, 3]  # how often each page of pipeline.PAGES is viewed


def ensure_topic(cluster: Cluster, name: str, partitions: int, replication_factor: int) -> None:
    try:
        cluster.create_topic(name, partitions, replication_factor)
        print(f"created topic {name} ({partitions} partitions)", flush=True)
    except KafkaProtocolError as exc:
        if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
            raise
    cluster.topic(name, wait_s=10.0)


def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    with Cluster(bootstrap, timeout=10.0) as c:
        parts = sorted(c.topic(topic, wait_s=10.0).partitions)
        return {p: off for p, (off, _) in c.list_offsets(topic, parts, -1).items()}


def generate(
    bootstrap: str,
    topic: str,
    pages: list[str],
    rate: int,
    duration: float,
    speedup: float,
    stop: threading.Event,
    seed: int = 7,
) -> int:
    """Views for `duration` s at about `rate`/s: {"user", "page", "ms"} keyed by user, the
    event clock running `speedup` times faster than the wall clock and ending at "now"."""
    rng = random.Random(seed)
    wall0 = time.time()
    event0_ms = int((wall0 - duration * speedup) * 1000)
    sent = 0
    with Producer(bootstrap, acks=-1, linger_ms=50) as producer:
        while not stop.is_set():
            elapsed = time.time() - wall0
            if elapsed >= duration:
                break
            while sent < int(elapsed * rate):
                ms = event0_ms + int((time.time() - wall0) * speedup * 1000)
                user = f"u{rng.randrange(500)}"
                view = {"user": user, "page": rng.choices(pages, WEIGHTS)[0], "ms": ms}
                producer.send(topic, json.dumps(view).encode(), key=user.encode(), timestamp=ms)
                sent += 1
            producer.poll()
            time.sleep(0.01)
        producer.flush()
    return sent


def when(iso: str | None) -> datetime | None:
    """A progress's event-time watermark (None before the first one)."""
    if not iso or iso.startswith("1970-01-01T00:00:00"):
        return None
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).replace(tzinfo=None)


def batch_line(p) -> str:
    from broker.spark.progress import lag

    source = p["sources"][0]
    behind = lag(source).get("maxOffsetsBehindLatest", "?")  # ? after a restart: see progress.lag
    watermark = when((p.get("eventTime") or {}).get("watermark"))
    watermark_text = watermark.strftime("%Y-%m-%d %H:%M:%S") if watermark else "-"
    seconds = p.get("durationMs", {}).get("triggerExecution", 0) / 1000
    return (
        f"batch {p['batchId']}: {p['numInputRows']} views in, {p['sink'].get('numOutputRows', '?')} counts out, "
        f"{behind} behind latest (max), watermark {watermark_text}, {seconds:.2f} s"
    )


def check(spark, bootstrap: str, args, start: dict, watermark: datetime) -> bool:
    """The counts written since `start` (read_committed) against a batch recount of the
    views read since `start`, for the windows the watermark closed."""
    from pipeline import PAGES, window_counts
    from pyspark.sql import functions as F

    def since(topic: str, offsets: dict, **options):
        reader = (
            spark.read.format("kbroker")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", json.dumps({topic: offsets}))
        )
        for k, v in options.items():
            reader = reader.option(k, v)
        return reader.load()

    written = [
        json.loads(r.value)
        for r in since(args.counts_topic, start["counts"], **{"kafka.isolation.level": "read_committed"})
        .select(F.col("value").cast("string").alias("value"))
        .collect()
    ]
    pages = spark.createDataFrame(PAGES, "page string, section string")
    truth = {
        (r.window_start.strftime("%Y-%m-%d %H:%M:%S"), r.page): r.views
        for r in window_counts(since(args.views_topic, start["views"]), pages, args.window, None)
        .where(F.col("window_end") <= F.lit(watermark))
        .collect()
    }
    keys = Counter((w["window_start"], w["page"]) for w in written)
    twice = sum(1 for n in keys.values() if n > 1)
    missing = [k for k in truth if k not in keys]
    wrong = [
        (w["window_start"], w["page"], w["views"], truth.get((w["window_start"], w["page"])))
        for w in written
        if truth.get((w["window_start"], w["page"])) != w["views"]
    ]
    counted = sum(w["views"] for w in written)
    print(
        f"checked: {len(written)} (window, page) rows, {twice} written twice, {len(missing)} missing, "
        f"{len(wrong)} wrong; {counted:,} of {sum(truth.values()):,} views of the closed windows counted",
        flush=True,
    )
    for w in sorted(written, key=lambda w: (w["window_start"], w["page"]))[-8:]:
        print(f"  {w['window_start']} {w['page']:<12} {w['section']:<8} {w['views']}")
    if wrong:
        print(f"wrong counts (window, page, written, recounted): {wrong[:5]}", file=sys.stderr)
    return twice == 0 and not missing and not wrong


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
    ap.add_argument("--duration", type=float, default=40.0, help="seconds of view generation")
    ap.add_argument("--rate", type=int, default=500, help="views per second")
    ap.add_argument("--speedup", type=float, default=30.0, help="event-time seconds per wall-clock second")
    ap.add_argument("--window", default="5 minutes")
    ap.add_argument("--watermark", default="1 minute")
    ap.add_argument("--group", default="view-counts", help="consumer group that sees the job's positions")
    ap.add_argument("--views-topic", default="views")
    ap.add_argument("--counts-topic", default="view-counts")
    ap.add_argument("--checkpoint", help="the query's checkpoint directory (the same one resumes)")
    ap.add_argument("--catch-up-timeout", type=float, default=180.0)
    args = ap.parse_args()

    try:
        with Cluster(args.bootstrap, timeout=5.0) as cluster:
            cluster.any_connection()
            ensure_topic(cluster, args.views_topic, 6, args.replication_factor)
            ensure_topic(cluster, args.counts_topic, 1, args.replication_factor)
    except ClientError as exc:
        print(f"no broker at {args.bootstrap} ({exc}): start one with `make serve` first", file=sys.stderr)
        return 1
    checkpoint = Path(
        args.checkpoint or os.path.join(DEFAULT_DIR, datetime.now(timezone.utc).strftime("run-%Y%m%dT%H%M%SZ"))
    )
    checkpoint.mkdir(parents=True, exist_ok=True)
    # where this query started reading and writing, kept beside its checkpoint: the check
    # covers the query's own views and counts, whatever else the topics hold
    start_file = checkpoint / "example-start.json"
    if start_file.exists():
        start = json.loads(start_file.read_text())
    else:
        start = {
            "views": end_offsets(args.bootstrap, args.views_topic),
            "counts": end_offsets(args.bootstrap, args.counts_topic),
        }
        start_file.write_text(json.dumps(start))
    print(f"starting Spark ({args.master}); checkpoint {checkpoint}", flush=True)

    from pipeline import PAGES, build_query, spark_session

    spark = spark_session(master=args.master)
    query = build_query(
        spark,
        args.bootstrap,
        args.views_topic,
        args.counts_topic,
        str(checkpoint / "query"),
        json.dumps({args.views_topic: start["views"]}),
        args.group or None,
        args.window,
        args.watermark,
    )
    print(f"query {query.id} started", flush=True)
    shown = -1

    def show() -> None:
        nonlocal shown
        for p in query.recentProgress:
            if p["batchId"] > shown:
                shown = p["batchId"]
                print(batch_line(p), flush=True)
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")

    stop = threading.Event()

    def interrupted(signum, frame) -> None:
        # the first Ctrl-C ends the generation early (the job then catches up and the
        # result is checked); a second one stops everything
        print("Ctrl-C: generation stopped; catching up (Ctrl-C again to abort)", flush=True)
        stop.set()
        signal.signal(signal.SIGINT, signal.default_int_handler)

    signal.signal(signal.SIGINT, interrupted)
    generated: dict[str, int] = {}
    gen = threading.Thread(
        target=lambda: generated.setdefault(
            "n",
            generate(
                args.bootstrap, args.views_topic, [p for p, _ in PAGES], args.rate, args.duration, args.speedup, stop
            ),
        ),
        daemon=True,
    )
    ok = False
    try:
        deadline = time.monotonic() + 300
        while query.lastProgress is None:  # the query has fixed where it starts
            show()
            if time.monotonic() > deadline:
                raise RuntimeError("no micro-batch within 300 s")
            time.sleep(0.2)
        print(
            f"generating views for {args.duration:g} s at {args.rate}/s "
            f"({args.duration * args.speedup / 60:.0f} minutes of event time)",
            flush=True,
        )
        gen.start()
        while gen.is_alive():
            gen.join(0.2)
            show()
        ends = end_offsets(args.bootstrap, args.views_topic)
        deadline = time.monotonic() + args.catch_up_timeout
        while True:
            show()
            p = query.lastProgress
            end = json.loads(p["sources"][0]["endOffset"]) if p and p["sources"][0].get("endOffset") else {}
            read = {int(k): v for k, v in end.get(args.views_topic, {}).items()}
            if read == ends and p["numInputRows"] == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the query did not read every view within {args.catch_up_timeout:g} s")
            time.sleep(0.2)
        print(f"generated {generated.get('n', 0):,} views", flush=True)
        query.stop()
        watermark = when((query.lastProgress or {}).get("eventTime", {}).get("watermark"))
        if watermark is None:
            print("no window closed: run longer (--duration) or faster (--speedup)", flush=True)
            ok = True
        else:
            ok = check(spark, args.bootstrap, args, start, watermark)
    except RuntimeError as exc:
        print(f"exactly_once: {exc}", file=sys.stderr, flush=True)
    finally:
        stop.set()
        if query.isActive:
            query.stop()
        spark.stop()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

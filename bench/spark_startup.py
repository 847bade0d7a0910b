"""How long a streaming query takes to its first completed micro-batch, at its first start
and when its driver is restarted after a kill -9: the kbroker source and sink beside
Spark's own Kafka connector, in the same run, alternating (issue 41, item 5).

    .venv/bin/python bench/spark_startup.py                       # 3 brokers, Spark standalone
    .venv/bin/python bench/spark_startup.py --local --rounds 5    # 1 broker, local[2]
    .venv/bin/python bench/spark_startup.py --json bench/results/spark_startup.json

Self-contained: it starts a ZooKeeper and brokers 1..3 at their default settings
(tests/support/cluster.py; --local: one broker) and a Spark standalone cluster (a master
and two 1-core workers, as docs/pipelines.md; --local: local[2] in the driver), fills a
topic of 6 partitions (RF=3, min.insync.replicas=2) with --events JSON page views
spread over ten minutes of event time, then per round and per side (the order swapped
every round) runs the query of the issue — JSON values parsed, joined with a static
table, counted per page and 5-minute window of event time with a 1-minute watermark,
written to a topic — as a driver process of its own:

    kbroker   the kbroker source and sink, deliveryGuarantee=exactly-once
    kafka     Spark's Kafka connector (spark-sql-kafka-0-10, the jars of `make testdeps`),
              its sink at-least-once (it has no exactly-once)
    kbroker-alo  (with --sides) the kbroker sink at-least-once

first from a fresh checkpoint (the first batch reads every view), then, after more views
and a kill -9 of that driver while its next batch runs, again from the checkpoint. For
each start: the process's own start to its SparkSession, to the readStream's load()
(for kbroker: Spark starting the Python workers that look the source up and give its
schema), to start(), and to the first completed batch (with the batch's durationMs:
latestOffset, queryPlanning, addBatch ...). Also, in the same run, how long a Python
interpreter takes to import what Spark's data source workers import (--imports), pyspark
from the pyspark.zip Spark puts first on its workers' path and from site-packages (where
the checkout's venv sends them: tools/spark_discovery/kbroker_pyspark_path.py).

Medians (and every value) are printed; --json writes them. Bounded (--timeout-s). As
bench/pipelines/run.py, it waits while a fault run, the test suite or another benchmark
is active (unless --no-wait) and holds /tmp/bench-running while it measures.
ZooKeeper, the brokers, Spark and the drivers share this machine's cores: say so beside
the numbers (the 1-minute load average is printed with each start).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PARTITIONS = 6
PAGES = ["/", "/pricing", "/signup", "/docs", "/docs/spark", "/blog", "/login", "/careers"]


# ---------------------------------------------------------------- the driver (its own process)


def driver(args) -> int:
    """One start of the query; prints JSON lines: {"at": ..., "s": seconds since start}."""
    t0 = args.t0
    out = lambda **kw: print(json.dumps({**kw, "s": round(time.time() - t0, 3)}), flush=True)  # noqa: E731
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession, functions as F

    b = (
        SparkSession.builder.master(args.master)
        .appName(f"startup {args.side}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.sql.session.timeZone", "UTC")
    )
    if args.side == "kafka":
        libs = ROOT / "tests" / "jvm" / "target" / "spark-libs"
        b = b.config("spark.jars", ",".join(str(j) for j in sorted(libs.glob("*.jar"))))
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    out(at="session")
    fmt = "kafka" if args.side == "kafka" else "kbroker"
    records = (
        spark.readStream.format(fmt)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .load()
    )
    out(at="load")
    pages = spark.createDataFrame([(p, f"s{i % 3}") for i, p in enumerate(PAGES)], "page string, section string")
    views = (
        records.select(F.from_json(F.col("value").cast("string"), "page string, ms long").alias("v"))
        .select("v.page", F.timestamp_millis(F.col("v.ms")).alias("t"))
        .join(pages, "page")
        .withWatermark("t", "1 minute")
        .groupBy(F.window("t", "5 minutes"), "page", "section")
        .count()
    )
    w = (
        views.select(
            F.concat_ws("|", F.col("window.start").cast("string"), "page").alias("key"),
            F.col("count").cast("string").alias("value"),
        )
        .writeStream.format(fmt)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("topic", args.out_topic)
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(processingTime="1 second")
    )
    if args.side == "kbroker":
        w = w.option("deliveryGuarantee", "exactly-once")
    q = w.start()
    out(at="start")
    shown = -1
    deadline = time.monotonic() + args.timeout_s
    while q.isActive and time.monotonic() < deadline:
        for p in q.recentProgress:
            if p["batchId"] > shown and p["durationMs"].get("addBatch") is not None:
                shown = p["batchId"]
                out(
                    at="batch",
                    batch=p["batchId"],
                    rows=p["numInputRows"],
                    duration_ms=dict(p["durationMs"]),
                    latest=p["sources"][0].get("latestOffset"),
                )
        time.sleep(0.05)
    if q.exception() is not None:
        out(at="failed", error=str(q.exception())[:2000])
        return 1
    return 0


# ---------------------------------------------------------------- the run


def produce(bootstrap: str, topic: str, n: int, base_ms: int) -> None:
    from broker.client import Producer

    with Producer(bootstrap, acks=-1, linger_ms=20) as p:
        for i in range(n):
            ms = base_ms + i * 600_000 // max(n, 1)
            p.send(
                topic,
                json.dumps({"page": PAGES[i % len(PAGES)], "ms": ms}).encode(),
                partition=i % PARTITIONS,
                timestamp=ms,
            )
            if i % 1000 == 0:
                p.poll()
        p.flush()


class Start:
    """A driver process and its timing lines."""

    def __init__(
        self, side: str, args, spark_env: dict, master: str, bootstrap: str, checkpoint: Path, out_topic: str, log: Path
    ):
        self.t0 = time.time()
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--driver",
            side,
            "--t0",
            repr(self.t0),
            "--master",
            master,
            "--bootstrap",
            bootstrap,
            "--topic",
            "views",
            "--out-topic",
            out_topic,
            "--checkpoint",
            str(checkpoint),
            "--timeout-s",
            str(args.timeout_s),
        ]
        self.log = open(log, "a")
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=self.log, text=True, env=spark_env, cwd=ROOT, start_new_session=True
        )
        self.events: list[dict] = []
        self.load1 = os.getloadavg()[0]
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.events.append(json.loads(line))

    def first(self, at: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for e in list(self.events):
                if e["at"] == at:
                    return e
                if e["at"] == "failed":
                    raise RuntimeError(f"the query failed: {e['error']}")
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"no {at} within {timeout} s (exit {self.proc.poll()}); see {self.log.name}")
            time.sleep(0.05)

    def figures(self) -> dict:
        at = {e["at"]: e["s"] for e in self.events if e["at"] != "batch"}
        batch = next(e for e in self.events if e["at"] == "batch")
        return {
            "session_s": at["session"],
            "load_s": round(at["load"] - at["session"], 3),
            "start_s": round(at["start"] - at["load"], 3),
            "first_batch_s": round(batch["s"] - at["start"], 3),
            "process_to_first_batch_s": batch["s"],
            "batch": batch["batch"],
            "rows": batch["rows"],
            "duration_ms": batch["duration_ms"],
            "latest_offset_null": batch["latest"] in (None, "null"),
            "load1": round(self.load1, 2),
        }

    def kill9(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(60)
        self.log.close()


def import_times(rounds: int) -> dict:
    """A Python interpreter importing what Spark's workers import for the source: the
    worker modules, pyspark_kbroker (lookup, schema), the stream reader (planning), the
    writer (write planning, commit)."""
    import pyspark

    zips = sorted(str(z) for z in (Path(pyspark.__file__).parent / "python" / "lib").glob("*.zip"))
    cases = {
        "interpreter": "pass",
        "pyspark data source worker, from pyspark.zip (compiled at each start)": f"import sys; sys.path[:0] = {zips!r}; import pyspark.sql.worker.create_data_source",
        "pyspark data source worker": "import pyspark.sql.worker.create_data_source",
        "+ pyspark_kbroker (lookup, schema)": "import pyspark.sql.worker.create_data_source, pyspark_kbroker",
        "+ the stream reader (read planning)": "import pyspark.sql.worker.plan_data_source_read, "
        "pyspark_kbroker, broker.spark.stream",
        "+ the sink (write planning)": "import pyspark.sql.worker.write_into_data_source, "
        "pyspark_kbroker, broker.spark.sink, broker.spark.offsets",
        "+ the commit (the sink, transactions)": "import pyspark.sql.worker.python_streaming_sink_runner, "
        "pyspark_kbroker, broker.spark.sink, broker.spark.writer",
    }
    out = {}
    for name, code in cases.items():
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            subprocess.run([sys.executable, "-c", code], check=True, cwd="/")
            times.append(time.perf_counter() - t)
        out[name] = round(statistics.median(times), 3)
        print(f"  import, {name}: {out[name]:.2f} s (median of {rounds})", flush=True)
    return out


def run(args) -> dict:
    from broker.client import Cluster as Client
    from broker.protocol.errors import KafkaProtocolError
    from tests.support.broker_proc import BrokerProcess
    from tests.support.cluster import Cluster
    from tests.support.spark_standalone import SparkStandalone, spark_env

    tmp = Path(tempfile.mkdtemp(prefix="kbroker-spark-startup-"))
    results: dict = {
        "command": " ".join([".venv/bin/python", "bench/spark_startup.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "events": args.events,
        "starts": [],
    }
    ok = False
    try:
        with BrokerProcess(tmp / "broker" / "data") if args.local else Cluster(tmp / "cluster", n=3, config={}) as k:
            spark = None if args.local else SparkStandalone(tmp / "spark", workers=2).__enter__()
            try:
                master = "local[2]" if args.local else spark.master_url
                env = spark_env() if args.local else spark.env
                rf = 1 if args.local else 3
                topics = ["views"] + [f"out-{s}-{r}" for s in args.sides for r in range(args.rounds)]
                with Client(k.bootstrap) as c:
                    for t in topics:
                        c.create_topic(
                            t, PARTITIONS if t == "views" else 1, rf, {"min.insync.replicas": str(min(2, rf))}
                        )
                    deadline = time.monotonic() + 60
                    for t in topics:  # every partition has a leader the metadata names
                        while True:
                            try:
                                c.topic(t, wait_s=5.0)
                                break
                            except KafkaProtocolError:
                                if time.monotonic() > deadline:
                                    raise
                                time.sleep(0.2)
                base_ms = int(time.time() * 1000) - 3_600_000
                produce(k.bootstrap, "views", args.events, base_ms)
                print(
                    f"{'1 broker, local[2]' if args.local else '3 brokers, Spark standalone'}: "
                    f"{args.events:,} views in views (6 partitions, RF={rf})",
                    flush=True,
                )
                if args.imports:
                    results["imports"] = import_times(args.import_rounds)
                for r in range(args.rounds):
                    order = args.sides if r % 2 == 0 else list(reversed(args.sides))
                    for side in order:
                        ck = tmp / f"ck-{side}-{r}"
                        log = tmp / f"driver-{side}-{r}.log"
                        s = Start(side, args, env, master, k.bootstrap, ck, f"out-{side}-{r}", log)
                        s.first("batch", args.timeout_s)
                        first = s.figures()
                        # more views, the next batch under way, then the driver killed -9
                        produce(k.bootstrap, "views", args.events // 10, base_ms + 600_000)
                        time.sleep(args.kill_after_s)
                        s.kill9()
                        s2 = Start(side, args, env, master, k.bootstrap, ck, f"out-{side}-{r}", log)
                        s2.first("batch", args.timeout_s)
                        again = s2.figures()
                        s2.kill9()
                        row = {"round": r + 1, "side": side, "first": first, "restart": again}
                        results["starts"].append(row)
                        print(
                            f"  round {r + 1} {side:11}: first start {first['first_batch_s']:6.2f} s from start() "
                            f"({first['process_to_first_batch_s']:.2f} s from the process's start; load() "
                            f"{first['load_s']:.2f} s), restart {again['first_batch_s']:6.2f} s from start() "
                            f"({again['process_to_first_batch_s']:.2f} s from the process's start; batch "
                            f"{again['batch']}, latestOffset {'null' if again['latest_offset_null'] else 'set'}), "
                            f"load {first['load1']:.1f}/{again['load1']:.1f}",
                            flush=True,
                        )
            finally:
                if spark is not None:
                    spark.__exit__(None, None, None)
        ok = True
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print(f"kept {tmp} (the drivers' logs) for a look", file=sys.stderr)
    summary = {}
    for side in args.sides:
        rows = [s for s in results["starts"] if s["side"] == side]
        med = {}
        for when in ("first", "restart"):
            for k2 in ("first_batch_s", "process_to_first_batch_s", "load_s", "session_s"):
                med[f"{when}.{k2}"] = round(statistics.median(r[when][k2] for r in rows), 3)
            for k2 in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution"):
                vals = [r[when]["duration_ms"].get(k2) for r in rows if r[when]["duration_ms"].get(k2) is not None]
                if vals:
                    med[f"{when}.ms.{k2}"] = statistics.median(vals)
        summary[side] = med
        print(
            f"{side}: median first batch {med['first.first_batch_s']:.2f} s after start() "
            f"({med['first.process_to_first_batch_s']:.2f} s after the process started); restarted: "
            f"{med['restart.first_batch_s']:.2f} s ({med['restart.process_to_first_batch_s']:.2f} s)",
            flush=True,
        )
    results["median"] = summary
    if "kafka" in summary:
        for side in args.sides:
            if side != "kafka":
                for k2 in (
                    "first.first_batch_s",
                    "first.process_to_first_batch_s",
                    "restart.first_batch_s",
                    "restart.process_to_first_batch_s",
                ):
                    ratio = summary[side][k2] / summary["kafka"][k2]
                    summary[side][f"{k2}/kafka"] = round(ratio, 2)
                print(
                    f"{side} / kafka: first {summary[side]['first.first_batch_s/kafka']:.2f}, restart "
                    f"{summary[side]['restart.first_batch_s/kafka']:.2f} (from start()); "
                    f"{summary[side]['first.process_to_first_batch_s/kafka']:.2f}, "
                    f"{summary[side]['restart.process_to_first_batch_s/kafka']:.2f} (from the process's start)",
                    flush=True,
                )
    return results


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--local", action="store_true", help="one broker and local[2] (default: 3 brokers, standalone)")
    ap.add_argument("--sides", default="kbroker,kafka", help="kbroker, kafka, kbroker-alo (comma-separated)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--events", type=int, default=20000, help="views in the topic before the first start")
    ap.add_argument(
        "--kill-after-s",
        type=float,
        default=1.5,
        help="seconds between the new views and the kill -9 of the first driver",
    )
    ap.add_argument("--imports", action="store_true", help="also time the Python workers' imports")
    ap.add_argument("--import-rounds", type=int, default=5)
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--timeout-s", type=int, default=600, help="per start, and the run is bounded by 8 times that")
    ap.add_argument(
        "--no-wait",
        action="store_true",
        help="measure even while a fault run, the test suite or another benchmark is active "
        "(a loaded machine: say so beside the figures)",
    )
    # the driver's own arguments
    ap.add_argument("--driver", help=argparse.SUPPRESS)
    ap.add_argument("--t0", type=float, help=argparse.SUPPRESS)
    ap.add_argument("--master", help=argparse.SUPPRESS)
    ap.add_argument("--bootstrap", help=argparse.SUPPRESS)
    ap.add_argument("--topic", help=argparse.SUPPRESS)
    ap.add_argument("--out-topic", help=argparse.SUPPRESS)
    ap.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.driver:
        args.side = args.driver
        return driver(args)
    args.sides = [s.strip() for s in args.sides.split(",") if s.strip()]
    if not set(args.sides) <= {"kbroker", "kafka", "kbroker-alo"}:
        ap.error(f"--sides: unknown {sorted(set(args.sides) - {'kbroker', 'kafka', 'kbroker-alo'})}")
    if "kafka" in args.sides and not list((ROOT / "tests" / "jvm" / "target" / "spark-libs").glob("*.jar")):
        ap.error("Spark's Kafka connector is not fetched (make testdeps), or leave out --sides kafka")

    def give_up(*_):
        raise TimeoutError("the benchmark took too long")

    signal.signal(signal.SIGALRM, give_up)
    # the quiet-machine rules of bench/pipelines/run.py: wait while a fault run, the test
    # suite or another benchmark is active (unless --no-wait), hold the benchmark marker
    spec = importlib.util.spec_from_file_location("pipelines_run", ROOT / "bench" / "pipelines" / "run.py")
    pipelines = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pipelines)
    if args.no_wait:
        if (what := pipelines.busy()) is not None:
            print(f"{what} is active: measuring anyway (--no-wait), load {os.getloadavg()[0]:.1f}", flush=True)
    else:
        pipelines.wait_for_quiet_machine()
    ours = not os.path.exists(pipelines.BENCH_MARKER)
    Path(pipelines.BENCH_MARKER).touch()
    signal.alarm(args.timeout_s * 8 * args.rounds)
    try:
        results = run(args)
    finally:
        if ours:
            Path(pipelines.BENCH_MARKER).unlink(missing_ok=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

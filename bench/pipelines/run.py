"""Spark pipelines on a 3-broker cluster (issue 21): the stall of a streaming query around a
broker's kill -9 and SIGTERM, Spark read throughput with the kbroker source beside Spark's
own Kafka connector, and the sink's throughput at RF=3 acks=all.

    .venv/bin/python bench/pipelines/run.py                           # every step
    .venv/bin/python bench/pipelines/run.py --only stall --trials 5 --session-ms 18000
    .venv/bin/python bench/pipelines/run.py --only read,write --rounds 5 --messages 2000000
    .venv/bin/python bench/pipelines/run.py --only eos-stall --observe-s 40
    .venv/bin/python bench/pipelines/run.py --json bench/results/pipelines.json

It starts a ZooKeeper and brokers 1..3 on loopback (tests/support/cluster.py, the test
suite's harness; `zookeeper.session.timeout.ms` --session-ms, every other broker setting
at its default) and a Spark standalone cluster, a master and two 1-core workers, with
PySpark's bin/spark-class (tests/support/spark_standalone.py, as docs/pipelines.md), then:

stall   examples/copy/run.py (default options) copies `in` to `out` (6 partitions, RF=3,
        min.insync.replicas=2) on the standalone cluster while a producer writes --rate
        records/s (the project's producer, defaults) each carrying its send time, and a
        consumer reads `out`. Per trial a broker leading partitions (not the controller)
        gets SIGKILL or SIGTERM (alternating); measured: the leader failover (signal until
        every partition it led has a new leader in the metadata, polled every 20 ms), the
        stall (the longest time without a new record arriving in `out`, from 2 s before the
        signal to 60 s after; its baseline, the longest such gap in the 10 s before, is
        printed too) and the largest end-to-end latency (send to arrival in `out`) of the
        records sent from 2 s before the signal to 5 s after it. Each trial starts once the
        copy keeps up with its input (a record reaches `out` within --lag-s of its send);
        the victim then restarts and every ISR is full again before the next trial.
read    --messages records of 100 B (6 partitions, RF=3, written once with the sink's
        native encoder) read by a Spark batch job on the standalone cluster into the noop
        sink, through the kbroker source and through Spark's Kafka connector (the jars
        `make testdeps` fetched), alternating --rounds times after a warm-up of each.
write   the same rows (cached in Spark) written by a Spark batch job through the kbroker
        sink into a fresh RF=3 topic (min.insync.replicas=2, acks=all, the default),
        --rounds times after a warm-up.
eos-stall  (issue 41) the copy with the sink's deliveryGuarantee=exactly-once, a
        read_committed consumer of its output, and each broker of the cluster killed -9
        in turn: the stall of the committed output per kill (step_eos_stall).

Medians (and every value) are printed, with the 1-minute load average; --json writes
them. It waits while a fault run (bench/faults/run.py), the test suite (/tmp/ci-running)
or another benchmark (/tmp/bench-running) is active (unless --no-wait), holds
/tmp/bench-running while it measures (another's marker is left in place), and is bounded
(--timeout-s). ZooKeeper, the brokers, Spark and the clients share this machine's cores:
say so next to the numbers.
"""

from __future__ import annotations

import argparse
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

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from broker.client import (  # noqa: E402
    Cluster as Client,  # noqa: E402
    Consumer,
    Producer,
)
from tests.pipelines.helpers import CopyJob  # noqa: E402
from tests.support.cluster import Cluster  # noqa: E402
from tests.support.spark_standalone import SparkStandalone  # noqa: E402

PARTITIONS = 6


def load1() -> float:
    return os.getloadavg()[0]


CI_MARKER, BENCH_MARKER = "/tmp/ci-running", "/tmp/bench-running"
QUIET_WAIT_S = 3 * 3600


def busy() -> str | None:
    """What else is measuring or testing on this machine, if anything."""
    if subprocess.run(["pgrep", "-f", "bench/faults/run.py"], capture_output=True).returncode == 0:
        return "a fault run (bench/faults/run.py)"
    for marker in (CI_MARKER, BENCH_MARKER):
        if os.path.exists(marker):
            return marker
    return None


def wait_for_quiet_machine() -> None:
    """No measuring while the long fault run, the lead's test suite (/tmp/ci-running) or
    another benchmark (/tmp/bench-running) uses the machine; bounded."""
    deadline = time.monotonic() + QUIET_WAIT_S
    said = None
    while (what := busy()) is not None and time.monotonic() < deadline:
        if what != said:
            print(f"{what} is active: waiting", flush=True)
            said = what
        time.sleep(30)


def create(bootstrap: str, topic: str, partitions: int = PARTITIONS) -> None:
    with Client(bootstrap) as c:
        c.create_topic(topic, partitions, 3, {"min.insync.replicas": "2"})
        c.topic(topic, wait_s=20.0)


def heal(cluster: Cluster, topics) -> None:
    for t in topics:
        for p in range(PARTITIONS):
            cluster.wait_for_isr(t, p, set(cluster.ids), timeout=120)


# ---------------------------------------------------------------- stall


class TimedProducer(threading.Thread):
    """value = b"<seq>:<send time, ns since the epoch>", round robin over the partitions."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        super().__init__(daemon=True)
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.stop = threading.Event()
        self.sent = 0
        self.send_times: list[float] = []  # epoch seconds, per record

    def run(self) -> None:
        t0 = time.monotonic()
        with Producer(self.bootstrap, linger_ms=5) as p:
            while not self.stop.is_set():
                now = time.time_ns()
                p.send(self.topic, b"%d:%d" % (self.sent, now), partition=self.sent % PARTITIONS)
                self.send_times.append(now / 1e9)
                self.sent += 1
                p.poll()
                ahead = self.sent / self.rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)


class ArrivalWatcher(threading.Thread):
    """Reads `topic` from its end; arrivals: (arrival time, send time) in epoch seconds."""

    def __init__(self, bootstrap: str, topic: str, isolation_level: int = 0):
        super().__init__(daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.isolation_level = isolation_level  # 1: read_committed (what an exactly-once sink committed)
        self.stop = threading.Event()
        self.arrivals: list[tuple[float, float]] = []

    def run(self) -> None:
        with Consumer(self.bootstrap, max_wait_ms=50, isolation_level=self.isolation_level) as c:
            c.assign(self.topic, None, "latest")
            while not self.stop.is_set():
                try:
                    records = c.poll(0.1)
                except Exception:  # noqa: BLE001 - a failover: poll again
                    time.sleep(0.05)
                    continue
                now = time.time()
                for r in records:
                    self.arrivals.append((now, int(r.value.split(b":")[1]) / 1e9))


def caught_up(watcher: ArrivalWatcher, timeout: float = 180, lag: float = 3.0) -> None:
    """Until the copy keeps up: the latest record arrived less than `lag` s after it was
    sent (a copy behind its input would hide a stall in its backlog)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if watcher.arrivals and watcher.arrivals[-1][0] - watcher.arrivals[-1][1] < lag:
            return
        time.sleep(0.5)
    print(f"  warning: the copy lags more than {lag:g} s behind its input", flush=True)


def led_by(cluster: Cluster, topics, broker: int) -> list[tuple[str, int]]:
    return [(t, p) for t in topics for p, m in cluster.describe(t).partitions.items() if m.leader == broker]


def failover_time(cluster: Cluster, parts, victim: int, t_signal: float, timeout: float = 120) -> float:
    """Seconds from the signal until every partition in `parts` has a leader other than the victim."""
    while True:
        try:
            if all(cluster.leader_of(t, p) not in (victim, -1) for t, p in parts):
                return time.time() - t_signal
        except Exception:  # noqa: BLE001 - no live broker answered: again
            pass
        if time.time() - t_signal > timeout:
            raise TimeoutError(f"no new leaders within {timeout} s")
        time.sleep(0.02)


def max_gap(times: list[float], start: float, end: float) -> float:
    """The longest time without an arrival within [start, end]."""
    inside = [start] + sorted(t for t in times if start <= t <= end) + [end]
    return max(b - a for a, b in zip(inside, inside[1:]))


def observed(watcher: ArrivalWatcher, producer: TimedProducer, t_signal: float, watch_s: float):
    """After a signal at t_signal, watch_s seconds later: (stall, baseline gap, end to end).
    stall: the longest time without an arrival from 2 s before the signal to watch_s after;
    baseline: the longest in the 10 s before; end to end: the largest send -> arrival time
    of the records sent from 2 s before the signal to 5 s after it (nan until all arrived)."""
    time.sleep(watch_s)
    arrivals = [a for a, _ in watcher.arrivals]
    stall = max_gap(arrivals, t_signal - 2, t_signal + watch_s)
    baseline = max_gap(arrivals, t_signal - 10, t_signal)
    sent = sum(1 for t in producer.send_times if t_signal - 2 <= t <= t_signal + 5)
    window = [a - s for a, s in watcher.arrivals if t_signal - 2 <= s <= t_signal + 5]
    e2e = max(window) if window and len(window) >= sent else float("nan")
    return stall, baseline, e2e


def restored(cluster: Cluster, victim: int, topics: tuple[str, ...]) -> None:
    """The victim started again, every replica of `topics` in sync, then 10 s of quiet."""
    cluster.broker(victim).start(timeout=120)
    heal(cluster, topics)
    time.sleep(10)


def step_stall(cluster: Cluster, spark: SparkStandalone, args, tmp: Path) -> dict:
    create(cluster.bootstrap, "in")
    create(cluster.bootstrap, "out")
    job = CopyJob(
        cluster.bootstrap,
        "in",
        "out",
        tmp / "copy-checkpoint",
        master=spark.master_url,
        env=spark.env,
        log_path=tmp / "copy.log",
    ).start()
    producer = TimedProducer(cluster.bootstrap, "in", args.rate)
    watcher = ArrivalWatcher(cluster.bootstrap, "out")
    trials = []
    try:
        job.wait_for_batches(1, timeout=300)
        watcher.start()
        producer.start()
        job.wait_for_batches(3, records=True, timeout=300)
        time.sleep(10)
        for trial in range(args.trials * 2):
            how = "kill -9" if trial % 2 == 0 else "SIGTERM"
            caught_up(watcher, lag=args.lag_s)
            controller = cluster.wait_for_controller()
            counts = {b: len(led_by(cluster, ("in", "out"), b)) for b in cluster.ids if b != controller}
            victim = max(counts, key=lambda b: (counts[b], -b))
            parts = led_by(cluster, ("in", "out"), victim)
            load = load1()
            t_signal = time.time()
            if how == "kill -9":
                cluster.kill(victim)
            else:
                cluster.terminate(victim)
            failover = failover_time(cluster, parts, victim, t_signal)
            if how == "SIGTERM":
                cluster.broker(victim).wait(60)
            stall, baseline, e2e = observed(watcher, producer, t_signal, min(60, args.observe_s))
            row = {
                "trial": trial + 1,
                "how": how,
                "victim": victim,
                "partitions_led": len(parts),
                "failover_s": round(failover, 3),
                "stall_s": round(stall, 3),
                "baseline_gap_s": round(baseline, 3),
                "max_e2e_s": round(e2e, 3),
                "load1": round(load, 2),
            }
            trials.append(row)
            print(
                f"  {how:8} broker {victim} ({len(parts)} partitions): failover {failover:.2f} s, "
                f"stall {stall:.2f} s (baseline gap {baseline:.2f} s), max end-to-end {e2e:.2f} s, "
                f"load {load:.1f}",
                flush=True,
            )
            assert job.alive and not job.failed(), job.output()
            restored(cluster, victim, ("in", "out"))
    finally:
        producer.stop.set()
        watcher.stop.set()
        producer.join(30)
        watcher.join(30)
        job.close()
    out = {"rate": args.rate, "session_ms": args.session_ms, "trials": trials}
    for how in ("kill -9", "SIGTERM"):
        rows = [t for t in trials if t["how"] == how]
        if rows:
            out[how] = {k: statistics.median(t[k] for t in rows) for k in ("failover_s", "stall_s")}
            e2e = [t["max_e2e_s"] for t in rows if t["max_e2e_s"] == t["max_e2e_s"]]  # not nan
            out[how]["max_e2e_s"] = statistics.median(e2e) if e2e else float("nan")
            out[how]["stall_minus_failover_s"] = statistics.median(t["stall_s"] - t["failover_s"] for t in rows)
            print(
                f"{how}: median failover {out[how]['failover_s']:.2f} s, stall {out[how]['stall_s']:.2f} s "
                f"(stall - failover {out[how]['stall_minus_failover_s']:.2f} s), max end-to-end "
                f"{out[how]['max_e2e_s']:.2f} s",
                flush=True,
            )
    return out


def coordinator_of(bootstrap: str, txn_id: str) -> int:
    from broker.protocol.messages.find_coordinator import FindCoordinatorRequest

    with Client(bootstrap) as c:
        conn = c.any_connection()
        r = conn.request(
            FindCoordinatorRequest(key=txn_id, key_type=1), min(conn.version_for(FindCoordinatorRequest.API_KEY), 3)
        )
        return r.node_id if r.error_code == 0 else -1


def step_eos_stall(cluster: Cluster, spark: SparkStandalone, args, tmp: Path) -> dict:
    """examples/copy/run.py --exactly-once copies `eos-in` to `eos-out` while --rate
    records/s are produced; a read_committed consumer notes when each record's copy is
    committed. Each broker of the cluster is killed -9 in turn (the controller's, the
    coordinators of the query's transactional ids among them), then restarted once the
    copy goes on, every replica in sync again before the next. Per kill: the failover of
    the partitions the broker led, the stall (the longest time without a committed copy
    arriving, from 2 s before the kill to --observe-s after), the largest send-to-commit
    latency of the records sent around it; the query must not fail."""
    create(cluster.bootstrap, "eos-in")
    create(cluster.bootstrap, "eos-out")
    job = CopyJob(
        cluster.bootstrap,
        "eos-in",
        "eos-out",
        tmp / "eos-checkpoint",
        master=spark.master_url,
        env=spark.env,
        extra=["--exactly-once"],
        log_path=tmp / "eos-copy.log",
    ).start()
    producer = TimedProducer(cluster.bootstrap, "eos-in", args.rate)
    watcher = ArrivalWatcher(cluster.bootstrap, "eos-out", isolation_level=1)
    trials = []
    try:
        query = job.wait_for_line(r"query (\S+)\)", timeout=300).group(1)
        job.wait_for_batches(1, timeout=300)
        watcher.start()
        producer.start()
        job.wait_for_batches(3, records=True, timeout=300)
        time.sleep(10)
        # the copy's transactional ids: one per Spark partition of the source (6)
        coordinators = {i: coordinator_of(cluster.bootstrap, f"{query}-{i}") for i in range(PARTITIONS)}
        controller = cluster.wait_for_controller()
        for victim in sorted(cluster.ids):
            caught_up(watcher, lag=args.lag_s)
            parts = led_by(cluster, ("eos-in", "eos-out"), victim)
            load = load1()
            t_signal = time.time()
            cluster.kill(victim)
            failover = failover_time(cluster, parts, victim, t_signal)
            stall, baseline, e2e = observed(watcher, producer, t_signal, args.observe_s)
            roles = (
                [
                    f"coordinator of {sum(1 for b in coordinators.values() if b == victim)} of the query's "
                    f"transactional ids"
                ]
                if victim in coordinators.values()
                else []
            )
            roles += ["controller"] if victim == controller else []
            row = {
                "victim": victim,
                "roles": roles,
                "partitions_led": len(parts),
                "failover_s": round(failover, 3),
                "stall_s": round(stall, 3),
                "baseline_gap_s": round(baseline, 3),
                "max_e2e_s": round(e2e, 3),
                "load1": round(load, 2),
            }
            trials.append(row)
            print(
                f"  kill -9 broker {victim} ({', '.join(roles) or 'no role'}; {len(parts)} partitions): "
                f"failover {failover:.2f} s, stall {stall:.2f} s (baseline gap {baseline:.2f} s), max send to "
                f"commit {e2e:.2f} s, load {load:.1f}",
                flush=True,
            )
            assert job.alive and not job.failed(), job.output()
            restored(cluster, victim, ("eos-in", "eos-out"))
            controller = cluster.wait_for_controller()
    finally:
        producer.stop.set()
        watcher.stop.set()
        producer.join(30)
        watcher.join(30)
        job.close()
    goal = args.session_ms / 1000 + 5
    out = {
        "rate": args.rate,
        "session_ms": args.session_ms,
        "goal_stall_s": goal,
        "trials": trials,
        "stall_s_max": max(t["stall_s"] for t in trials),
        "stall_s_median": statistics.median(t["stall_s"] for t in trials),
    }
    print(
        f"exactly-once copy, each broker killed -9: stall median {out['stall_s_median']:.2f} s, largest "
        f"{out['stall_s_max']:.2f} s (goal: at most zookeeper.session.timeout.ms + 5 s = {goal:g} s); "
        f"the query never failed",
        flush=True,
    )
    return out


# ---------------------------------------------------------------- read and write throughput

SPARK_JOB = r"""
import json, statistics, sys, time
from pyspark.sql import SparkSession
from broker.spark import KBrokerDataSource
master, bootstrap, topic, n, rounds, jars, steps = sys.argv[1:8]
n, rounds = int(n), int(rounds)
b = SparkSession.builder.master(master).appName("kbroker pipelines bench") \
    .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
if jars:
    b = b.config("spark.jars", jars)
spark = b.getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
spark.dataSource.register(KBrokerDataSource)

def timed(fn):
    t0 = time.perf_counter(); fn(); return time.perf_counter() - t0

def report(step, times):
    print(json.dumps({"step": step, "times": times, "rows": n}), flush=True)

if "read" in steps:
    readers = {"kbroker": lambda: spark.read.format("kbroker").option("kafka.bootstrap.servers", bootstrap)
               .option("subscribe", topic).load().write.format("noop").mode("overwrite").save()}
    if jars:
        readers["kafka connector"] = lambda: spark.read.format("kafka") \
            .option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic).load() \
            .write.format("noop").mode("overwrite").save()
    for read in readers.values():
        read()
    times = {name: [] for name in readers}
    for r in range(rounds):
        for name, read in readers.items():
            times[name].append(timed(read))
        print("round", r + 1, {k: round(v[-1], 2) for k, v in times.items()}, file=sys.stderr, flush=True)
    report("read", times)
if "write" in steps:
    rows = spark.read.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("subscribe", topic) \
        .load().select("key", "value").cache()
    assert rows.count() == n
    def write(t):
        rows.write.format("kbroker").option("kafka.bootstrap.servers", bootstrap).option("topic", t) \
            .mode("append").save()
    write(topic + "-w0")
    times = [timed(lambda r=r: write(f"{topic}-w{r + 1}")) for r in range(rounds)]
    report("write", times)
spark.stop()
"""


def fill(bootstrap: str, topic: str, n: int, size: int) -> float:
    """n records of `size` bytes with the sink's native encoder, acks=all; seconds."""
    import numpy as np
    import pyarrow as pa

    from broker.spark.options import SinkOptions
    from broker.spark.writer import TaskWriter

    rng = np.random.default_rng(7)
    t0 = time.perf_counter()
    w = TaskWriter(SinkOptions.parse({"kbroker.bootstrap.servers": bootstrap, "topic": topic}))
    for start in range(0, n, 100_000):
        m = min(100_000, n - start)
        values = pa.Array.from_buffers(
            pa.binary(),
            m,
            [
                None,
                pa.py_buffer(np.arange(0, (m + 1) * size, size, dtype=np.int32).tobytes()),
                pa.py_buffer(rng.integers(0, 256, size=m * size, dtype=np.uint8).tobytes()),
            ],
        )
        keys = pa.Array.from_buffers(
            pa.binary(),
            m,
            [
                None,
                pa.py_buffer(np.arange(0, (m + 1) * 8, 8, dtype=np.int32).tobytes()),
                pa.py_buffer(np.arange(start, start + m, dtype=">u8").tobytes()),
            ],
        )
        w.write_batch(pa.RecordBatch.from_arrays([keys, values], names=["key", "value"]))
    assert w.finish().records == n
    return time.perf_counter() - t0


def step_throughput(cluster: Cluster, spark: SparkStandalone, args, steps: set[str]) -> dict:
    topic = "bench"
    create(cluster.bootstrap, topic)
    secs = fill(cluster.bootstrap, topic, args.messages, args.size)
    print(f"filled {topic}: {args.messages:,} x {args.size} B in {secs:.1f} s", flush=True)
    jars = ""
    if "read" in steps:
        libs = ROOT / "tests" / "jvm" / "target" / "spark-libs"
        found = sorted(libs.glob("*.jar"))
        if found:
            jars = ",".join(str(j) for j in found)
        else:
            print(f"no jars in {libs} (make testdeps): the Kafka connector is left out", flush=True)
    for r in range(args.rounds + 1):
        create(cluster.bootstrap, f"{topic}-w{r}")
    load = load1()
    run = subprocess.run(
        [
            sys.executable,
            "-c",
            SPARK_JOB,
            spark.master_url,
            cluster.bootstrap,
            topic,
            str(args.messages),
            str(args.rounds),
            jars,
            ",".join(sorted(steps)),
        ],
        capture_output=True,
        text=True,
        env=spark.env,
        cwd=ROOT,
        timeout=args.timeout_s,
    )
    if run.returncode != 0:
        raise RuntimeError(f"the Spark job failed:\n{run.stderr[-4000:]}")
    out: dict = {"messages": args.messages, "size": args.size, "load1_before": round(load, 2)}
    n = args.messages
    for line in run.stdout.splitlines():
        if not line.startswith("{"):
            continue
        r = json.loads(line)
        if r["step"] == "read":
            out["read"] = {}
            for name, ts in r["times"].items():
                med = statistics.median(ts)
                out["read"][name] = {
                    "times_s": [round(t, 3) for t in ts],
                    "rows_per_s_median": round(n / med),
                    "rows_per_s_best": round(n / min(ts)),
                }
                print(
                    f"read {name}: median {n / med:,.0f} rows/s, best {n / min(ts):,.0f} "
                    f"({', '.join(f'{t:.2f}' for t in ts)} s)",
                    flush=True,
                )
        else:
            ts = r["times"]
            med = statistics.median(ts)
            out["write"] = {
                "times_s": [round(t, 3) for t in ts],
                "rows_per_s_median": round(n / med),
                "rows_per_s_best": round(n / min(ts)),
            }
            print(
                f"write (kbroker sink, RF=3, acks=all): median {n / med:,.0f} rows/s, best {n / min(ts):,.0f} "
                f"({', '.join(f'{t:.2f}' for t in ts)} s)",
                flush=True,
            )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--only", default="stall,read,write", help="steps, comma-separated: stall, eos-stall, read, write")
    ap.add_argument("--session-ms", type=int, default=18000, help="zookeeper.session.timeout.ms (Kafka's default)")
    ap.add_argument("--trials", type=int, default=3, help="stall: trials of each kind (kill -9, SIGTERM)")
    ap.add_argument("--rate", type=float, default=1000, help="stall: records/s produced")
    ap.add_argument(
        "--lag-s",
        type=float,
        default=3.0,
        help="stall: a trial starts once the latest record reached `out` within this many s of its "
        "send (on a loaded machine a micro-batch alone takes longer than 3 s)",
    )
    ap.add_argument("--observe-s", type=float, default=45, help="stall: seconds watched after each signal")
    ap.add_argument("--messages", type=int, default=1_000_000, help="read/write: records")
    ap.add_argument("--size", type=int, default=100, help="read/write: value bytes")
    ap.add_argument("--rounds", type=int, default=3, help="read/write: timed rounds")
    ap.add_argument("--json", help="write every figure here")
    ap.add_argument("--timeout-s", type=int, default=3600)
    ap.add_argument(
        "--no-wait",
        action="store_true",
        help="measure even while a fault run, the test suite or another benchmark is active "
        "(a loaded machine: say so beside the figures)",
    )
    args = ap.parse_args()
    steps = {s.strip() for s in args.only.split(",") if s.strip()}
    if not steps <= {"stall", "eos-stall", "read", "write"}:
        ap.error(f"--only: unknown step(s) {sorted(steps - {'stall', 'eos-stall', 'read', 'write'})}")

    def give_up(*_):
        raise TimeoutError(f"the benchmark took over --timeout-s={args.timeout_s} s")

    signal.signal(signal.SIGALRM, give_up)
    if args.no_wait:
        if (what := busy()) is not None:
            print(f"{what} is active: measuring anyway (--no-wait), load {load1():.1f}", flush=True)
    else:
        wait_for_quiet_machine()
    ours = not os.path.exists(BENCH_MARKER)  # never remove another benchmark's marker
    Path(BENCH_MARKER).touch()
    signal.alarm(args.timeout_s)
    tmp = Path(tempfile.mkdtemp(prefix="kbroker-pipelines-bench-"))
    results: dict = {
        "command": " ".join([".venv/bin/python", "bench/pipelines/run.py", *sys.argv[1:]]),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }
    failed = True
    try:
        config = {
            "zookeeper.session.timeout.ms": args.session_ms,
            "default.replication.factor": 3,
            "offsets.topic.replication.factor": 3,
        }
        with (
            Cluster(tmp / "cluster", n=3, config=config) as cluster,
            SparkStandalone(tmp / "spark", workers=2) as spark,
        ):
            print(
                f"cluster {cluster.bootstrap} (zookeeper.session.timeout.ms={args.session_ms}), "
                f"Spark {spark.master_url}",
                flush=True,
            )
            if "stall" in steps:
                results["stall"] = step_stall(cluster, spark, args, tmp)
            if "eos-stall" in steps:
                results["eos_stall"] = step_eos_stall(cluster, spark, args, tmp)
            if steps & {"read", "write"}:
                results.update(step_throughput(cluster, spark, args, steps & {"read", "write"}))
        failed = False
    finally:
        if ours:
            Path(BENCH_MARKER).unlink(missing_ok=True)
        if failed:
            print(f"kept {tmp} (the brokers' logs and data) for a look", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Partition reassignment throughput, with and without a throttle, and what it does to a
client's produce latency (issue 20, "Measure").

Each trial is a fresh cluster (tests/support/cluster.py: a ZooKeeper and brokers 1..3 on
127.0.0.1, `broker serve` with its default event loop): a 6-partition RF=3 topic
(min.insync.replicas 2) is prefilled with --prefill-mb of --record-size records
(confluent-kafka, acks=all, 16 KiB batches, incompressible values); a 4th broker joins;
a probe producer starts (confluent-kafka, acks=all, idempotent, linger.ms 1, --probe-rate
records/s of --probe-size bytes into the same topic; each record's latency is librdkafka's
own, from produce() to its acknowledgement); after an undisturbed stretch, a plan moving
one replica of every partition to broker 4 (the leader's for half of them, as
tests/cluster/test_reassignment.py's plan_for) is started with

    broker topics reassign --execute --reassignment-json-file plan.json [--throttle B/s] -b ...

and the script samples, every 0.02 s, the bytes of the topic's log segments on broker 4's
disk and each broker's CPU time, until the controller lists no reassignment (asked every
0.1 s). Per trial:

  moved       bytes on broker 4 at completion / seconds from launching --execute to
              completion (the CLI's own start-up included); and the copy's steady rate,
              between the first samples at >= 15% and >= 85% of those bytes
  took        seconds from launching --execute to completion (also: when the first byte
              appeared on broker 4)
  latency     p50 / p99 / max of the probe records sent during the move (launch to
              completion), during its steady copy (15% to 85%), and during an equally long
              stretch right before the move (same cluster, same producer); a timeline per
              0.5 s in the JSON
  cpu         each broker's CPU (user + system, % of one core) during the move, during
              its steady copy, and during the stretch before

Cases are `none` (no --throttle) and throttles in MB/s (1 MB = 10^6 bytes, the tool's
B/s); trials go round by round, the cases' order rotating each round.

    .venv/bin/python bench/cluster/reassign.py                                  # none,5,20 x 3
    .venv/bin/python bench/cluster/reassign.py --cases none,5,20 --trials 3 \\
        --json bench/results/reassign-2026-11-27.json
    .venv/bin/python bench/cluster/reassign.py --cases none --trials 1 --prefill-mb 30 --keep

Every wait is bounded; the brokers and ZooKeeper are killed when a trial ends (and at
exit, Ctrl-C or an exception included); the temporary directory is removed unless --keep
(or a trial failed: then its path is printed, the brokers' logs inside).
"""

from __future__ import annotations

import argparse
import bisect
import functools
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

TOPIC = "moving"
PARTITIONS = 6
MB = 1_000_000
SAMPLE_S = 0.02  # bytes on the new broker's disk
POLL_S = 0.1  # the controller's list of reassignments
CLI_TIMEOUT = 60.0
CLK = os.sysconf("SC_CLK_TCK")


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def uptime() -> str:
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        return f"load average {os.getloadavg()}"


def cpu_seconds(pid: int | None) -> float:
    """User + system CPU time of a process so far (0 when it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
    except (OSError, TypeError):
        return 0.0
    return (int(parts[11]) + int(parts[12])) / CLK


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "broker.cli.main", *map(str, args)]


def quote(cmd: list[str]) -> str:
    if cmd[:3] == [sys.executable, "-m", "broker.cli.main"]:
        cmd = ["broker", *cmd[3:]]
    return " ".join(cmd)


def log_bytes(data_dir, partitions=range(PARTITIONS)) -> int:
    """Bytes of TOPIC's log segments for `partitions` under a broker's data dir."""
    total = 0
    for p in partitions:
        d = os.path.join(data_dir, f"{TOPIC}-{p}")
        try:
            names = os.listdir(d)
        except FileNotFoundError:
            continue
        for name in names:
            if name.endswith(".log"):
                try:
                    total += os.path.getsize(os.path.join(d, name))
                except FileNotFoundError:
                    pass
    return total


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    s = sorted(values)
    return s[min(len(s) - 1, int(q * len(s)))]


def prefill(bootstrap: str, total_bytes: int, record_size: int) -> int:
    """total_bytes of record values, spread evenly over the partitions, acks=all; returns
    the records written."""
    import confluent_kafka as ck

    producer = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.size": 16384,
            "compression.type": "none",
        }
    )
    per_partition = total_bytes // record_size // PARTITIONS
    values = [os.urandom(record_size) for _ in range(64)]
    failed: list[str] = []

    def report(err, _msg):
        if err is not None and len(failed) < 5:
            failed.append(str(err))

    for i in range(per_partition):
        for p in range(PARTITIONS):
            while True:
                try:
                    producer.produce(TOPIC, value=values[(i + p) % 64], partition=p, on_delivery=report)
                    break
                except BufferError:
                    producer.poll(0.05)
    left = producer.flush(180)
    if left or failed:
        raise RuntimeError(f"prefill: {left} records not acknowledged in 180 s; errors {failed}")
    return per_partition * PARTITIONS


class Probe(threading.Thread):
    """An acks=all producer at a fixed rate; keeps (sent at, latency s, error) per record,
    `sent at` in time.monotonic()."""

    def __init__(self, bootstrap: str, rate: int, size: int):
        super().__init__(daemon=True, name="probe-producer")
        import confluent_kafka as ck

        self.producer = ck.Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 1,
                "compression.type": "none",
            }
        )
        self.rate = rate
        self.value = os.urandom(size)
        self.records: list[tuple[float, float, bool]] = []
        self.stopping = threading.Event()
        self.failure: BaseException | None = None
        self._keys: list[float] = []

    def _report(self, err, msg) -> None:
        now = time.monotonic()
        lat = msg.latency() or 0.0
        self.records.append((now - lat, lat, err is not None))

    def run(self) -> None:
        try:
            start = time.monotonic()
            n = 0
            while not self.stopping.is_set():
                due = start + n / self.rate
                now = time.monotonic()
                if due > now:
                    self.producer.poll(min(due - now, 0.01))
                    continue
                try:
                    self.producer.produce(TOPIC, value=self.value, on_delivery=self._report)
                    n += 1
                except BufferError:
                    self.producer.poll(0.01)
                self.producer.poll(0)
            self.producer.flush(30)
        except BaseException as exc:  # noqa: BLE001 - reported by the main thread
            self.failure = exc

    def stop(self) -> None:
        self.stopping.set()
        self.join(40)
        self.records.sort()
        self._keys = [r[0] for r in self.records]

    def window(self, t0: float, t1: float) -> dict:
        """p50, p99, max (ms), records and errors of the records sent in [t0, t1) (once
        stopped)."""
        rows = self.records[bisect.bisect_left(self._keys, t0) : bisect.bisect_left(self._keys, t1)]
        lats = [lat * 1000 for _, lat, err in rows if not err]
        return {
            "records": len(rows),
            "errors": sum(1 for r in rows if r[2]),
            "p50_ms": round(percentile(lats, 0.50), 2) if lats else None,
            "p99_ms": round(percentile(lats, 0.99), 2) if lats else None,
            "max_ms": round(max(lats), 2) if lats else None,
        }

    def timeline(self, t0: float, t1: float, origin: float, step: float = 0.5) -> list:
        """[seconds from origin, records, p99 ms, max ms] per `step` of send time in [t0, t1)."""
        out = []
        t = t0
        while t < t1:
            w = self.window(t, min(t + step, t1))
            out.append([round(t - origin, 2), w["records"], w["p99_ms"], w["max_ms"]])
            t += step
        return out


def plan_for(c, rng: random.Random, new_broker: int) -> dict[int, list[int]]:
    """One replica of each partition to new_broker: the leader's for every other partition,
    a follower's for the rest (tests/cluster/test_reassignment.py's plan_for)."""
    plan = {}
    for p in range(PARTITIONS):
        replicas = c.replicas_of(TOPIC, p)
        leader = c.leader_of(TOPIC, p)
        gone = leader if p % 2 == 0 else rng.choice([r for r in replicas if r != leader])
        plan[p] = [new_broker if r == gone else r for r in replicas]
    return plan


def make_cluster(directory: str, config: dict[str, str]):
    """A 3-broker cluster of the test harness whose brokers run `broker serve`'s default
    event loop (uvloop when installed) rather than the test suite's asyncio; `config` is
    given to every broker (the 4th too)."""
    import tests.support.cluster as harness
    from tests.support.broker_proc import BrokerProcess

    harness.BrokerProcess = functools.partial(BrokerProcess, event_loop="auto")
    return harness.Cluster(directory, n=3, config=config)


def trial(root: str, case: int | None, args, rng: random.Random) -> dict:
    """One trial on a fresh cluster; `case` is the throttle in B/s or None."""
    from broker.client import Cluster as Client
    from tests.support.cluster import poll_until

    name = "none" if case is None else f"{case / MB:g}"
    c = make_cluster(root, args.broker_config)
    probe = proc = None
    row: dict = {"case": name, "throttle_bps": case, "load1_start": load1()}
    try:
        c.start()
        with Client(c.bootstrap) as a:
            a.create_topic(TOPIC, PARTITIONS, 3, {"min.insync.replicas": "2"})
        for p in range(PARTITIONS):
            c.wait_for_isr(TOPIC, p, {1, 2, 3}, everywhere=True, timeout=60)
        t = time.monotonic()
        row["prefill_records"] = prefill(c.bootstrap, args.prefill_mb * MB, args.record_size)
        row["prefill_s"] = round(time.monotonic() - t, 1)
        for p in range(PARTITIONS):
            c.wait_for_isr(TOPIC, p, {1, 2, 3}, everywhere=True, timeout=60)
        new = c.add_broker()
        pids = {b: c.broker(b).pid for b in c.ids}
        plan = plan_for(c, rng, new)
        row["plan"] = {str(p): r for p, r in plan.items()}
        row["leaders_moved"] = sum(1 for p, r in plan.items() if c.leader_of(TOPIC, p) not in r)
        plan_file = os.path.join(root, "plan.json")
        with open(plan_file, "w") as f:
            json.dump(
                {
                    "version": 1,
                    "partitions": [
                        {"topic": TOPIC, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
                        for p, r in plan.items()
                    ],
                },
                f,
            )

        probe = Probe(c.bootstrap, args.probe_rate, args.probe_size)
        probe.start()
        # the stretch before: as long as the move is expected to take, so that the window
        # "before" can be as long as the one "during"
        expected = args.prefill_mb * MB / case if case else args.before_s
        before_s = max(args.before_s, min(1.3 * expected + 2, args.max_before_s))
        time.sleep(args.warmup_s)
        t_before = time.monotonic()
        cpu_before = {b: cpu_seconds(pid) for b, pid in pids.items()}
        time.sleep(before_s)
        if probe.failure or not probe.records:
            raise RuntimeError(f"probe producer: {probe.failure or 'no acknowledgement'}")

        size = log_bytes(c.broker(1).data_dir)
        cmd = cli(
            "topics",
            "reassign",
            "--execute",
            "--reassignment-json-file",
            plan_file,
            *(["--throttle", case] if case else []),
            "-b",
            c.bootstrap,
        )
        row["command"] = quote(cmd).replace(plan_file, "plan.json").replace(c.bootstrap, "BOOTSTRAP")
        cpu0 = {b: cpu_seconds(pid) for b, pid in pids.items()}
        t0 = time.monotonic()
        row["execute_at"] = time.strftime("%H:%M:%S.") + f"{time.time() % 1:.3f}"[2:]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        cpus = {t0: cpu0}  # CPU seconds per broker at each sample
        samples = [(t0, log_bytes(c.broker(new).data_dir))]
        deadline = t0 + args.move_timeout_s
        cli_s = None
        loads = []
        polled = t0
        with Client(c.bootstrap, timeout=10) as a:
            while True:
                time.sleep(SAMPLE_S)
                now = time.monotonic()
                samples.append((now, log_bytes(c.broker(new).data_dir)))
                cpus[now] = {b: cpu_seconds(pid) for b, pid in pids.items()}
                if len(samples) % 100 == 0:
                    loads.append(load1())
                if now - polled < POLL_S:
                    continue
                polled = now
                if cli_s is None:
                    if proc.poll() is None:
                        if now > t0 + CLI_TIMEOUT:
                            proc.kill()
                            raise RuntimeError(f"{quote(cmd)}: still running after {CLI_TIMEOUT:g} s")
                        continue
                    out, err = proc.communicate()
                    cli_s = now - t0
                    if proc.returncode != 0 or "Successfully started" not in out:
                        raise RuntimeError(f"{quote(cmd)}: exit {proc.returncode}: {out[-500:]} {err[-500:]}")
                elif not a.list_partition_reassignments():
                    break
                if now > deadline:
                    raise RuntimeError(
                        f"the reassignment not done in {args.move_timeout_s:g} s; "
                        f"{samples[-1][1]} of {size} bytes on broker {new}"
                    )
        t1 = time.monotonic()
        cpu1 = {b: cpu_seconds(pid) for b, pid in pids.items()}
        took = t1 - t0
        moved = log_bytes(c.broker(new).data_dir)
        samples.append((t1, moved))
        cpus[t1] = cpu1
        time.sleep(1.0)  # records sent just before completion get their answers
        probe.stop()
        if probe.failure:
            raise RuntimeError(f"probe producer: {probe.failure!r}")
        first = next(s for s in samples if s[1] > 0)
        lo = next(s for s in samples if s[1] >= 0.15 * moved)
        hi = next(s for s in samples if s[1] >= 0.85 * moved)
        steady = (hi[1] - lo[1]) / (hi[0] - lo[0]) if hi[0] > lo[0] else None
        span = min(took, before_s)
        steady_s = hi[0] - lo[0]
        cpu_steady = {
            str(b): round(100 * (cpus[hi[0]][b] - cpus[lo[0]][b]) / steady_s) if steady_s > 0 else None for b in pids
        }
        row.update(
            {
                "source_log_bytes": size,
                "moved_bytes": moved,
                "took_s": round(took, 2),
                "cli_s": round(cli_s, 2),
                "mb_per_s": round(moved / took / MB, 2),
                "steady_mb_per_s": round(steady / MB, 2) if steady else None,
                "steady_window_s": round(hi[0] - lo[0], 2),
                "first_bytes_s": round(first[0] - t0, 2),
                "copy_s": round(t1 - first[0], 2),
                "timeline": probe.timeline(t0 - span, t1 + 1.0, t0),
                "before": {**probe.window(t0 - span, t0), "seconds": round(span, 2)},
                "during": {**probe.window(t0, t1), "seconds": round(took, 2)},
                "during_copy": {**probe.window(lo[0], hi[0]), "seconds": round(steady_s, 2)},
                "cpu_pct_during": {str(b): round(100 * (cpu1[b] - cpu0[b]) / took) for b in pids},
                "cpu_pct_copy": cpu_steady,
                "cpu_pct_before": {str(b): round(100 * (cpu0[b] - cpu_before[b]) / (t0 - t_before)) for b in pids},
                "load1_during": loads or [load1()],
                "load1_end": load1(),
                "samples": [(round(t - t0, 2), b) for t, b in samples[:: max(1, len(samples) // 200)]],
            }
        )
        if case:
            # --verify reports completion and removes the throttles (as an operator would)
            v = subprocess.run(
                cli("topics", "reassign", "--verify", "--reassignment-json-file", plan_file, "-b", c.bootstrap),
                capture_output=True,
                text=True,
                timeout=CLI_TIMEOUT,
            )
            row["verify_ok"] = v.returncode == 0 and v.stdout.count("is completed.") == PARTITIONS
        poll_until(
            "the replicas as planned",
            lambda: (all(c.replicas_of(TOPIC, p) == r for p, r in plan.items()), None, "replicas"),
            30,
        )
        return row
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        if probe is not None and probe.is_alive():
            probe.stop()
        c.close()


def fmt_range(values, digits=1) -> str:
    vals = [v for v in values if v is not None]
    if not vals:
        return "-"
    return f"{statistics.median(vals):.{digits}f} ({min(vals):.{digits}f}-{max(vals):.{digits}f})"


def summary(rows: list[dict], cases: list[str]) -> dict:
    out = {}
    for case in cases:
        rs = [r for r in rows if r["case"] == case]
        if not rs:
            continue

        def med(get, rs=rs):
            vals = [v for v in map(get, rs) if v is not None]
            return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)} if vals else None

        out[case] = {
            "trials": len(rs),
            "mb_per_s": med(lambda r: r["mb_per_s"]),
            "steady_mb_per_s": med(lambda r: r["steady_mb_per_s"]),
            "took_s": med(lambda r: r["took_s"]),
            "before_p50_ms": med(lambda r: r["before"]["p50_ms"]),
            "before_p99_ms": med(lambda r: r["before"]["p99_ms"]),
            "during_p50_ms": med(lambda r: r["during"]["p50_ms"]),
            "during_p99_ms": med(lambda r: r["during"]["p99_ms"]),
            "during_max_ms": med(lambda r: r["during"]["max_ms"]),
            "copy_p50_ms": med(lambda r: r["during_copy"]["p50_ms"]),
            "copy_p99_ms": med(lambda r: r["during_copy"]["p99_ms"]),
            "new_broker_cpu_pct_copy": med(lambda r: r["cpu_pct_copy"]["4"]),
            "source_brokers_cpu_pct_copy": med(lambda r: sum(r["cpu_pct_copy"][b] or 0 for b in ("1", "2", "3"))),
            "new_broker_cpu_pct": med(lambda r: r["cpu_pct_during"]["4"]),
            "source_brokers_cpu_pct": med(lambda r: sum(r["cpu_pct_during"][b] for b in ("1", "2", "3"))),
        }
    return out


def print_table(rows: list[dict], cases: list[str]) -> None:
    print(
        "\nmedian (min-max) | MB/s whole move | MB/s steady 15-85% | took s | p50 ms before / during / "
        "steady copy | p99 ms before / during / steady copy | CPU % during the steady copy: broker 4, "
        "brokers 1-3 summed"
    )
    for case in cases:
        rs = [r for r in rows if r["case"] == case]
        if not rs:
            continue
        print(
            f"{case} ({len(rs)} trials) | {fmt_range([r['mb_per_s'] for r in rs])} | "
            f"{fmt_range([r['steady_mb_per_s'] for r in rs])} | {fmt_range([r['took_s'] for r in rs])} | "
            f"{fmt_range([r['before']['p50_ms'] for r in rs])} / {fmt_range([r['during']['p50_ms'] for r in rs])} / "
            f"{fmt_range([r['during_copy']['p50_ms'] for r in rs])} | "
            f"{fmt_range([r['before']['p99_ms'] for r in rs])} / {fmt_range([r['during']['p99_ms'] for r in rs])} / "
            f"{fmt_range([r['during_copy']['p99_ms'] for r in rs])} | "
            f"{fmt_range([r['cpu_pct_copy']['4'] for r in rs], 0)}, "
            f"{fmt_range([sum(r['cpu_pct_copy'][b] or 0 for b in ('1', '2', '3')) for r in rs], 0)}"
        )


def parse_cases(text: str) -> list[int | None]:
    out: list[int | None] = []
    for item in text.split(","):
        item = item.strip().lower()
        if not item:
            continue
        if item in ("none", "0", "off"):
            out.append(None)
            continue
        mbps = float(item)
        if mbps <= 0:
            raise ValueError(item)
        out.append(int(mbps * MB))
    if not out:
        raise ValueError("no case")
    return out


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument(
        "--cases",
        default="none,5,20",
        help="comma-separated: none (no --throttle) or a throttle in MB/s, 1 MB = 10^6 B (default none,5,20)",
    )
    p.add_argument("--trials", type=int, default=3, help="trials of each case, each on a fresh cluster (default 3)")
    p.add_argument(
        "--prefill-mb",
        type=int,
        default=200,
        help="MB of record values in the topic (default 200: an unthrottled move of 60 MB took under a second here)",
    )
    p.add_argument("--record-size", type=int, default=1024, help="prefill record value bytes (default 1024)")
    p.add_argument("--probe-rate", type=int, default=2000, help="probe producer records/s (default 2000)")
    p.add_argument("--probe-size", type=int, default=100, help="probe record value bytes (default 100)")
    p.add_argument("--warmup-s", type=float, default=3.0, help="probe producer warm-up, not measured (default 3)")
    p.add_argument(
        "--before-s",
        type=float,
        default=15.0,
        help="least undisturbed stretch before --execute (default 15; longer for a throttled "
        "move: 1.3 x its expected time + 2 s, up to --max-before-s)",
    )
    p.add_argument("--max-before-s", type=float, default=60.0, help="(default 60)")
    p.add_argument("--move-timeout-s", type=float, default=300.0, help="bound of one move (default 300)")
    p.add_argument("--seed", type=int, help="the plans' random choices (default: random, printed)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker key for every broker, e.g. replica.fetch.max.bytes=4194304",
    )
    p.add_argument("--json", metavar="PATH", help="write every trial's figures here as JSON")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory")
    args = p.parse_args(argv)
    try:
        args.case_list = parse_cases(args.cases)
    except ValueError as exc:
        p.error(f"--cases {args.cases!r}: {exc}: expected none or positive MB/s figures")
    if args.trials < 1:
        p.error("--trials: at least 1")
    if bad := [item for item in args.set if "=" not in item]:
        p.error(f"--set {bad[0]!r}: expected KEY=VALUE")
    args.broker_config = dict(item.split("=", 1) for item in args.set)
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    from broker.perf.zookeeper import available

    if (what := available()) is not None:
        raise SystemExit(f"reassign: {what} is not installed (apt-get install zookeeper default-jre-headless)")
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        raise SystemExit("reassign: confluent-kafka is not installed (pip install -e '.[test]')") from None

    def on_term(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    rng = random.Random(seed)
    root = tempfile.mkdtemp(prefix="kbroker-reassign-")
    names = ["none" if c is None else f"{c / MB:g}" for c in args.case_list]
    results = {
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "cores": os.cpu_count(),
        "seed": seed,
        "argv": sys.argv[1:],
        "broker_config": args.broker_config,
        "prefill_mb": args.prefill_mb,
        "record_size": args.record_size,
        "probe_rate": args.probe_rate,
        "probe_size": args.probe_size,
        "uptime_start": uptime(),
        "trials": [],
    }
    print(
        f"cores {os.cpu_count()}; {results['uptime_start']}; cases {names} x {args.trials} trials; "
        f"{args.prefill_mb} MB prefill of {args.record_size} B records; probe {args.probe_rate}/s of "
        f"{args.probe_size} B; broker config {args.broker_config or 'default'}; seed {seed}; dir {root}",
        flush=True,
    )
    failed = False
    try:
        n = 0
        for rnd in range(args.trials):
            k = rnd % len(args.case_list)
            for case in args.case_list[k:] + args.case_list[:k]:
                n += 1
                d = os.path.join(root, f"trial-{n}")
                os.makedirs(d)
                row = trial(d, case, args, rng)
                row["trial"] = n
                results["trials"].append(row)
                b, du, cp = row["before"], row["during"], row["during_copy"]
                print(
                    f"trial {n} ({row['case']}): {row['moved_bytes'] / MB:.1f} MB moved in {row['took_s']:.1f} s "
                    f"(CLI {row['cli_s']:.1f} s, first byte at {row['first_bytes_s']} s): {row['mb_per_s']:.1f} MB/s, "
                    f"steady {row['steady_mb_per_s']} MB/s over {row['steady_window_s']} s; probe p50/p99/max "
                    f"before {b['p50_ms']}/{b['p99_ms']}/{b['max_ms']} ms ({b['records']} in {b['seconds']} s), "
                    f"during {du['p50_ms']}/{du['p99_ms']}/{du['max_ms']} ms ({du['records']}, {du['errors']} "
                    f"errors), steady copy {cp['p50_ms']}/{cp['p99_ms']}/{cp['max_ms']} ms ({cp['records']}); "
                    f"CPU % before {row['cpu_pct_before']}, during {row['cpu_pct_during']}, copy "
                    f"{row['cpu_pct_copy']}; load {row['load1_start']} -> {row['load1_during']}"
                    f"{'; --verify ok' if row.get('verify_ok') else ''}",
                    flush=True,
                )
                if row.get("verify_ok") is False:
                    print("  !! --verify did not report 6 completed partitions", flush=True)
                if not args.keep:
                    shutil.rmtree(d, ignore_errors=True)
    except BaseException as exc:
        failed = True
        print(f"reassign: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        if not isinstance(exc, Exception):
            raise
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        results["uptime_end"] = uptime()
        results["summary"] = summary(results["trials"], names)
        print_table(results["trials"], names)
        print(f"\n{results['uptime_end']}", flush=True)
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1)
        if args.keep or failed:
            print(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

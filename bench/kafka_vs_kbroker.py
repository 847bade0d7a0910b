"""kbroker against Apache Kafka 4.x on this machine, one broker each, the same disk and the
same load generators:

    .venv/bin/python bench/kafka_vs_kbroker.py [--rounds 3] [--partitions 1,10,100,1000]
        [--sizes 100,1024] [--acks 1,all] [--mb-per-run 30] [--latency-loads 10000,100000]
        [--latency-seconds 5] [--broker-perf] [--other-clients] [--fsync] [--restart-gb 0]
        [--json results.json]
    .venv/bin/python bench/kafka_vs_kbroker.py --pinned [--rounds 3] [--partitions 10]
        [--sizes 100,1024] [--acks 1,all] [--seconds 10] [--warmup-seconds 10]
        [--warmup-max-seconds 300] [--linger-ms 5] [--batch-size 131072] [--pin-at launch|start]
        [--fsync] [--baseline DIR [--baseline-event-loop asyncio|uvloop] [--baseline-set KEY=VALUE]]
        [--set KEY=VALUE] [--floor [--floor-gb 24]] [--json results.json]

--baseline DIR (with --pinned) puts kbroker from another checkout (run with DIR/.venv, e.g. a
`git worktree` of an older commit after `make install` there) where Apache Kafka would be: a
before/after comparison of kbroker itself, same cases, same table. --set KEY=VALUE gives this
checkout's kbroker a broker key, --baseline-set the baseline's: `--baseline . --set K=V` compares
one checkout under two settings.

The brokers run in turn, never together (two cores): Apache Kafka, then kbroker, then
Kafka again ... (--rounds of each, A B A B). Equivalent settings: one node, the same
partition counts, Kafka's default segment size (1 GiB) and page-cache durability (Kafka's
default; --fsync runs both with an fsync after every batch instead:
log.flush.interval.messages=1). Kafka runs with the flags of bin/kafka-server-start.sh
(1 GiB heap, G1) and gets a warm-up load after each start (its JIT), kbroker the same;
the load generators are Kafka's own ProducerPerformance and ConsumerPerformance (full
JIT), and `broker perf produce` as a second producer (--broker-perf); --other-clients adds
confluent-kafka and kcat producing and consuming (10 partitions, 100 B, acks=1).

Each case (partitions x record size x acks) produces --mb-per-run MB with
ProducerPerformance then reads it back with ConsumerPerformance; the broker's CPU time
(/proc) over both gives CPU seconds per GB moved (produced + consumed). Latency runs
offer fixed loads (msg/s, 100-byte records, acks=1, 10 partitions) and report
ProducerPerformance's p50/p99/p99.9. --restart-gb stores that much (1 KiB records) and
times a start after a clean stop and after kill -9. Output: medians over rounds and the
kbroker/Kafka ratios, as a Markdown table (and --json with every run). Every phase is
bounded in time; brokers and tools are stopped at the end whatever happens.

--pinned measures the broker rather than the load generator: the broker (Kafka's JVM or
kbroker) runs on core 0 only, the load generator on core 1 only. By default the broker is
launched on its core (--pin-at launch: it inherits the affinity; a JVM then sizes its GC and
JIT threads for one core, as in a one-core container); --pin-at start moves it there once
started (`taskset -a -p`, its pools sized for the whole machine). The generator runs under
`taskset -c 1`. The generator is
bench/native/kgen (`make bench-tools`, needs librdkafka-dev), a small C program on
librdkafka, the same client for both brokers. Each case produces for --seconds (acks=all
with idempotence, as Kafka's Java producer defaults to; linger.ms and batch.size as in the
default mode), then reads the topic back from the beginning, again and again until
--seconds passed. Over every run both sides' CPU is recorded — the broker's from
/proc/<pid>/stat (utime + stime, all threads), the generator's from its rusage when it
exits — as a share of the run's wall time (100% = its core), and the table names the side
that saturated its core (>= 90%): "generator-bound" means the figure says more about the
generator than about the broker. The rest of each core's busy time (/proc/stat: other
processes, interrupts, the hypervisor's steal) is named when over 10%: a shared machine
shows there. Broker CPU seconds per GB are the broker's CPU time over the bytes of that
run; the last column adds the rest of both cores' busy time (kernel threads writing back
what the broker wrote, interrupts not charged to it): the kernel puts that work on
whichever core has room, so a broker that leaves its core idle at times gets it there.
--json also has the broker's busiest threads per run (a JIT compiler thread there means
Kafka was still compiling). After each start, warm-up passes: --warmup-seconds of
produce with each record size and acks of the run, each read back once, again while the
broker's JIT compiler threads use over 5% of a pass (a JVM on one core compiles for a
long while: it would otherwise spend the measured runs compiling), at most
--warmup-max-seconds.

--floor (with --pinned) adds, to each round after the brokers, what the kernel alone costs
core 0 to take produced bytes, with no broker: bench/native/ingest copy2 receives
--floor-gb GB on core 0 from a sender on core 1 in frames of --batch-size bytes (a
Produce's batch), CRCs each and pwrites it into segment files that are deleted once
written (the comparison's page-cache regime): one recv and one pwrite per frame, nothing
else. Core 0's whole busy time per GB (/proc/stat) is the floor. A second table sets it
beside each broker's core per GB (the broker's CPU and the rest of its core) at the record
size nearest 1 KiB, with issue 22's produce goal (a third of Kafka's CPU per GB): a goal
below the floor is out of any broker's reach on this machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.support.broker_proc import BrokerProcess  # noqa: E402
from tests.support.kafka_broker import KAFKA_JVM_FLAGS, KafkaBroker  # noqa: E402
from tests.support.kafka_tools import kafka_tool  # noqa: E402

CLK = os.sysconf("SC_CLK_TCK")
REPO = Path(__file__).resolve().parent.parent
KGEN = REPO / "bench" / "native" / "kgen"
INGEST = REPO / "bench" / "native" / "ingest"  # --floor: recv, CRC, pwrite, nothing else
RDKAFKA_HEADER = Path("/usr/include/librdkafka/rdkafka.h")
BROKER_CORE, GENERATOR_CORE = 0, 1
SATURATED = 0.90  # a side at or above this share of its core saturated it
OTHERS_SHOWN = 0.10  # the table names the cores' other busy time above this
JIT_QUIET = 0.05  # warm-up passes go on while a JVM's compiler threads use more
PHASE_TIMEOUT = 600
CLIENT_JVM = ("-XX:+UseG1GC",)  # load generators: full JIT, as bin/ scripts run them
# --pinned: a deleted topic's files go at once (each case's topic is deleted before the next)
PINNED_SETTINGS = {"log.segment.delete.delay.ms": 0}
SETTINGS = {
    "num.partitions": 1,
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    "auto.create.topics.enable": "false",
}


def proc_cpu(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / CLK


def proc_rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


# ---------------------------------------------------------------------- brokers


class Kafka:
    name = "kafka"

    def __init__(self, root: Path, fsync: bool, extra: dict | None = None):
        cfg = dict(SETTINGS, **({"log.flush.interval.messages": 1} if fsync else {}), **(extra or {}))
        self.b = KafkaBroker(root / "kafka", config=cfg, jvm_flags=KAFKA_JVM_FLAGS)

    @property
    def log_dir(self) -> Path:
        return Path(self.b.log_dir)

    def start(self) -> float:
        t0 = time.monotonic()
        self.b.start(timeout=PHASE_TIMEOUT)
        return time.monotonic() - t0

    def stop(self) -> None:
        self.b.stop()

    def kill(self) -> None:
        self.b.kill()

    @property
    def pid(self) -> int:
        return self.b.proc.pid

    @property
    def bootstrap(self) -> str:
        return self.b.bootstrap


class KBroker:
    name = "kbroker"
    #: --set KEY=VALUE: this checkout's broker keys over the run's own
    settings: dict[str, str] = {}

    def __init__(self, root: Path, fsync: bool, extra: dict | None = None):
        cfg = {**SETTINGS, **({"log.flush.interval.messages": 1} if fsync else {}), **(extra or {}), **self.settings}
        self.b = BrokerProcess(root / "kbroker" / "data", config=cfg, log_level="warning")

    @property
    def log_dir(self) -> Path:
        return Path(self.b.data_dir)

    def start(self) -> float:
        t0 = time.monotonic()
        self.b.start(timeout=PHASE_TIMEOUT)
        return time.monotonic() - t0

    def stop(self) -> None:
        self.b.stop(timeout=PHASE_TIMEOUT)

    def kill(self) -> None:
        self.b.kill()

    @property
    def pid(self) -> int:
        return self.b.proc.pid

    @property
    def bootstrap(self) -> str:
        return self.b.bootstrap


class KBrokerBaseline(KBroker):
    """--baseline DIR: kbroker as another checkout has it (a before/after comparison)."""

    name = "kbroker-baseline"
    tree = Path(".")
    event_loop = "asyncio"
    settings: dict[str, str] = {}  # --baseline-set

    def __init__(self, root: Path, fsync: bool, extra: dict | None = None):
        cfg = {**SETTINGS, **({"log.flush.interval.messages": 1} if fsync else {}), **(extra or {}), **self.settings}
        # that checkout's .venv Python in its directory: `-m broker.cli.main` is its code
        self.b = BrokerProcess(
            root / "kbroker-baseline" / "data",
            config=cfg,
            log_level="warning",
            event_loop=self.event_loop,
            python=str(self.tree / ".venv" / "bin" / "python"),
            cwd=self.tree,
        )


# ---------------------------------------------------------------------- load


def create_topic(broker, topic: str, partitions: int) -> None:
    kafka_tool(
        "kafka-topics",
        "--bootstrap-server",
        broker.bootstrap,
        "--create",
        "--topic",
        topic,
        "--partitions",
        partitions,
        "--replication-factor",
        1,
        timeout=PHASE_TIMEOUT,
    )


_PRODUCED = re.compile(
    r"^(\d+) records sent, ([\d.]+) records/sec \(([\d.]+) MB/sec\), ([\d.]+) ms avg latency, "
    r"([\d.]+) ms max latency, (\d+) ms 50th, (\d+) ms 95th, (\d+) ms 99th, (\d+) ms 99.9th"
)


def producer_perf(broker, topic: str, records: int, size: int, acks: str, throughput: int = -1) -> dict:
    out = kafka_tool(
        "kafka-producer-perf-test",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        records,
        "--record-size",
        size,
        "--throughput",
        throughput,
        "--command-property",
        f"acks={acks}",
        "linger.ms=5",
        "batch.size=131072",
        "--reporting-interval",
        3_600_000,
        heap="1g",
        quick=False,
        jvm_args=CLIENT_JVM,
        timeout=PHASE_TIMEOUT,
    ).lines
    m = _PRODUCED.match(out[-1])
    assert m, out[-3:]
    return {
        "msgs": float(m.group(2)),
        "mb_s": float(m.group(3)),
        "p50": int(m.group(6)),
        "p99": int(m.group(8)),
        "p999": int(m.group(9)),
    }


def consumer_perf(broker, topic: str, records: int) -> dict:
    out = kafka_tool(
        "kafka-consumer-perf-test",
        "--bootstrap-server",
        broker.bootstrap,
        "--topic",
        topic,
        "--num-records",
        records,
        "--timeout",
        60000,
        "--group",
        f"{topic}-perf",
        heap="1g",
        quick=False,
        jvm_args=CLIENT_JVM,
        timeout=PHASE_TIMEOUT,
    ).lines
    head = next((i for i, line in enumerate(out) if line.startswith("start.time")), None)
    assert head is not None and head + 1 < len(out), out[-5:]
    stats = dict(zip(out[head].split(", "), out[head + 1].split(", ")))
    assert int(stats["data.consumed.in.nMsg"]) >= records, stats
    return {"msgs": float(stats["fetch.nMsg.sec"]), "mb_s": float(stats["fetch.MB.sec"])}


def broker_perf(broker, topic: str, records: int, size: int, acks: str) -> dict:
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "perf",
            "produce",
            "-b",
            broker.bootstrap,
            "--topic",
            topic,
            "--num-records",
            str(records),
            "--record-size",
            str(size),
            "--acks",
            acks,
            "--json",
            "--timeout-s",
            str(PHASE_TIMEOUT),
        ],
        capture_output=True,
        text=True,
        timeout=PHASE_TIMEOUT + 30,
    )
    assert p.returncode == 0, p.stderr[-2000:]
    r = json.loads(p.stdout.strip().splitlines()[-1])
    return {"msgs": r["records_per_sec"]}


def other_clients(broker, topic: str, records: int, size: int, parts: int) -> list[dict]:
    """confluent-kafka (librdkafka through Python) and kcat (librdkafka's CLI) producing
    `records` records of `size` bytes with acks=1 and reading them back; msg/s from the
    first record to the last acknowledged (confluent) or over the whole process (kcat)."""
    from e2e_clients import confluent_consume, confluent_produce

    value = os.urandom(size // 2).hex().encode()[:size]
    rows = []
    t0 = time.perf_counter()
    confluent_produce(broker.bootstrap, topic, records, value)
    produce = records / (time.perf_counter() - t0)
    t0 = time.perf_counter()
    confluent_consume(broker.bootstrap, topic, records, parts)
    rows.append(
        {"client": "confluent-kafka", "produce_msgs": produce, "consume_msgs": records / (time.perf_counter() - t0)}
    )
    if shutil.which("kcat"):
        with tempfile.TemporaryDirectory(prefix="kcat-lines-") as tmp:
            lines = Path(tmp) / "lines.txt"
            lines.write_bytes((value.replace(b"\n", b"x") + b"\n") * records)
            t0 = time.perf_counter()
            subprocess.run(
                [
                    "kcat",
                    "-P",
                    "-b",
                    broker.bootstrap,
                    "-t",
                    topic + "-kcat",
                    "-l",
                    str(lines),
                    "-X",
                    "acks=1",
                    "-X",
                    "linger.ms=5",
                    "-X",
                    "batch.size=1048576",
                ],
                check=True,
                timeout=PHASE_TIMEOUT,
            )
            produce = records / (time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run(
            [
                "kcat",
                "-C",
                "-b",
                broker.bootstrap,
                "-t",
                topic + "-kcat",
                "-o",
                "beginning",
                "-c",
                str(records),
                "-q",
                "-f",
                "%s\n",
            ],
            check=True,
            timeout=PHASE_TIMEOUT,
            stdout=subprocess.DEVNULL,
        )
        rows.append({"client": "kcat", "produce_msgs": produce, "consume_msgs": records / (time.perf_counter() - t0)})
    return rows


# ---------------------------------------------------------------------- pinned mode


def ensure_kgen() -> Path:
    """Builds bench/native/kgen if it is missing or older than its source; exits with one
    line naming the Debian package when librdkafka's headers are missing."""
    if not RDKAFKA_HEADER.exists() and not KGEN.exists():
        sys.exit("kgen needs librdkafka's headers: apt-get install -y librdkafka-dev")
    p = subprocess.run(["make", "-s", "-C", str(REPO), "bench-tools"], capture_output=True, text=True)
    if p.returncode != 0 or not KGEN.exists():
        sys.exit(f"make bench-tools failed: {(p.stdout + p.stderr).strip()[-2000:]}")
    return KGEN


def check_pinning() -> None:
    if shutil.which("taskset") is None:
        sys.exit("--pinned needs taskset: apt-get install -y util-linux")
    cores = os.sched_getaffinity(0)
    if not {BROKER_CORE, GENERATOR_CORE} <= cores:
        sys.exit(f"--pinned needs cores {BROKER_CORE} and {GENERATOR_CORE}; this process may use {sorted(cores)}")


def pin(pid: int, core: int) -> None:
    """Pins every thread of `pid` to `core`; threads it starts later inherit it."""
    subprocess.run(["taskset", "-a", "-p", "-c", str(core), str(pid)], check=True, stdout=subprocess.DEVNULL)
    assert_pinned(pid, core)


def assert_pinned(pid: int, core: int) -> None:
    """Every thread of `pid` may run on `core` only (checked after pinning and after each case)."""
    cores: set[int] = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            cores |= os.sched_getaffinity(int(tid))
        except ProcessLookupError:  # a thread that ended meanwhile
            pass
    if cores != {core}:
        raise RuntimeError(f"process {pid}'s threads may run on cores {sorted(cores)}, not only on {core}")


def thread_cpu(pid: int) -> dict[str, float]:
    """CPU seconds of `pid`'s threads by name, numbers in names folded ("...-handler-3" and
    "...-handler-5" are one "...-handler-N")."""
    out: dict[str, float] = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except (FileNotFoundError, ProcessLookupError):
            continue
        name = re.sub(r"\d+", "N", text[text.index("(") + 1 : text.rindex(")")])
        parts = text.rsplit(")", 1)[1].split()
        out[name] = out.get(name, 0.0) + (int(parts[11]) + int(parts[12])) / CLK
    return out


def busiest_threads(before: dict[str, float], after: dict[str, float], top: int = 6) -> dict[str, float]:
    """The threads (by folded name) that used the most CPU between two thread_cpu() snapshots;
    a thread started meanwhile counts from zero, one ended meanwhile is missing."""
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    return {name: round(s, 3) for name, s in sorted(used.items(), key=lambda kv: -kv[1])[:top] if s > 0}


def core_busy() -> dict[int, float]:
    """Seconds each core spent busy (user, nice, system, irq, softirq, steal) from /proc/stat."""
    busy = {}
    with open("/proc/stat") as f:
        for line in f:
            name, *ticks = line.split()
            if name.startswith("cpu") and name != "cpu":
                t = [int(x) for x in ticks[:8]]
                busy[int(name[3:])] = (t[0] + t[1] + t[2] + t[5] + t[6] + t[7]) / CLK
    return busy


#: TCP counters (/proc/net/snmp, /proc/net/netstat) recorded over each run: loopback TCP
#: on two cores can reorder segments, which costs retransmissions and SACK processing
TCP_COUNTERS = {
    "Tcp": ("OutSegs", "RetransSegs"),
    "TcpExt": ("TCPOFOQueue", "TCPSACKReorder", "TCPBacklogCoalesce", "TCPRcvCoalesce"),
}


def tcp_counters(paths=("/proc/net/snmp", "/proc/net/netstat")) -> dict[str, int]:
    """The machine's TCP_COUNTERS now, as {"RetransSegs": n, ...}: each file holds pairs of
    lines, "Prefix: names..." then "Prefix: values..."."""
    found: dict[str, int] = {}
    for path in paths:
        with open(path) as f:
            lines = f.read().splitlines()
        for names, values in zip(lines[::2], lines[1::2]):
            prefix, _, names = names.partition(":")
            wanted = TCP_COUNTERS.get(prefix)
            if wanted:
                found.update(
                    (k, int(v)) for k, v in zip(names.split(), values.partition(":")[2].split()) if k in wanted
                )
    return found


def generator(broker_pid: int, argv: list, timeout: float) -> dict:
    """Runs kgen on GENERATOR_CORE; its JSON line, plus the wall time of the process, the
    CPU share of its core that the generator (rusage) and the broker (/proc) used over it,
    and the machine's TCP_COUNTERS over it ("tcp")."""
    cmd = ["taskset", "-c", str(GENERATOR_CORE), str(KGEN), *map(str, argv)]
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        broker0, cores0, threads0 = proc_cpu(broker_pid), core_busy(), thread_cpu(broker_pid)
        tcp0 = tcp_counters()
        t0 = time.monotonic()
        p = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL)
        try:
            while True:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                if pid:
                    break
                if time.monotonic() - t0 > timeout:
                    raise TimeoutError(f"kgen ran over {timeout:.0f} s: {' '.join(cmd)}")
                time.sleep(0.02)
        except BaseException:
            p.kill()
            p.wait()
            raise
        wall = time.monotonic() - t0
        broker_cpu, cores1, threads1 = proc_cpu(broker_pid) - broker0, core_busy(), thread_cpu(broker_pid)
        tcp = {k: v - tcp0.get(k, 0) for k, v in tcp_counters().items()}
        p.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        text, errors = out.read().decode(), err.read().decode(errors="replace")
    lines = text.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"kgen exited with {p.returncode}: {' '.join(cmd)}\n{text[-1000:]}\n{errors[-2000:]}")
    r = json.loads(lines[-1])
    generator_cpu = usage.ru_utime + usage.ru_stime
    # the rest of each core's busy time: other processes, interrupts not charged to either
    # side, the hypervisor's steal (a shared machine shows here)
    others = {
        c: max(0.0, cores1[c] - cores0[c] - own) / wall
        for c, own in ((BROKER_CORE, broker_cpu), (GENERATOR_CORE, generator_cpu))
    }
    r.update(
        wall_s=wall,
        generator_cpu=generator_cpu / wall,
        broker_cpu=broker_cpu / wall,
        broker_cpu_s=broker_cpu,
        broker_core_others=others[BROKER_CORE],
        generator_core_others=others[GENERATOR_CORE],
        broker_threads=busiest_threads(threads0, threads1),
        tcp=tcp,
    )
    return r


def drop_topic(broker, topic: str, timeout: float = 300) -> None:
    """Deletes a topic and waits until its partitions' directories are gone from the broker's
    log dir: a case neither inherits the previous one's page cache and disk nor its deletion."""
    kafka_tool(
        "kafka-topics", "--bootstrap-server", broker.bootstrap, "--delete", "--topic", topic, timeout=PHASE_TIMEOUT
    )
    deadline = time.monotonic() + timeout
    while left := [p.name for p in broker.log_dir.iterdir() if p.name.startswith(topic + "-")]:
        if time.monotonic() > deadline:
            raise RuntimeError(f"{broker.name}: {topic} deleted {timeout:.0f} s ago, its files still there: {left[:3]}")
        time.sleep(0.2)


def kgen_produce(broker, topic: str, size: int, acks: str, args, seconds: float) -> list:
    return [
        "produce",
        "-b",
        broker.bootstrap,
        "-t",
        topic,
        "-s",
        size,
        "--acks",
        acks,
        *(["--idempotence"] if acks == "all" else []),
        "--linger-ms",
        args.linger_ms,
        "--batch-size",
        args.batch_size,
        "--seconds",
        seconds,
    ]


def compiling(threads: dict[str, float]) -> float:
    """CPU seconds of a JVM's JIT compiler threads ("C2 CompilerThread0" ...) in a busiest_threads() dict."""
    return sum(s for name, s in threads.items() if "CompilerThre" in name)


def warm_up(broker, args, timeout: float) -> None:
    """Passes of --warmup-seconds of produce with each record size and acks of the run, each
    read back once, until the broker's JIT compiler threads used under JIT_QUIET of the
    pass's time (at once for kbroker) or --warmup-max-seconds passed."""
    deadline = time.monotonic() + args.warmup_max_seconds
    for n in itertools.count(1):
        jit = wall = 0.0
        for size in args.sizes:
            for acks in args.acks:
                topic = f"bench-warmup-{n}-{size}-{acks}"
                create_topic(broker, topic, 10)
                prod = generator(
                    broker.pid, kgen_produce(broker, topic, size, acks, args, args.warmup_seconds), timeout
                )
                cons = generator(
                    broker.pid, ["consume", "-b", broker.bootstrap, "-t", topic, "--count", prod["messages"]], timeout
                )
                drop_topic(broker, topic)
                jit += compiling(prod["broker_threads"]) + compiling(cons["broker_threads"])
                wall += prod["wall_s"] + cons["wall_s"]
        quiet = jit / wall < JIT_QUIET
        print(
            f"{broker.name}: warm-up pass {n}: JIT compiler threads at {jit / wall:.0%} of the pass"
            + (
                ""
                if quiet or time.monotonic() <= deadline
                else f", still compiling after --warmup-max-seconds {args.warmup_max_seconds:g}: measuring anyway"
            ),
            file=sys.stderr,
            flush=True,
        )
        if quiet or time.monotonic() > deadline:
            return


def run_broker_pinned(broker, args, round_no: int) -> list[dict]:
    rows = []
    timeout = 3 * args.seconds + 120
    if args.pin_at == "launch":
        mine = os.sched_getaffinity(0)
        os.sched_setaffinity(0, {BROKER_CORE})  # the broker inherits it from this thread
        try:
            broker.start()
        finally:
            os.sched_setaffinity(0, mine)
    else:
        broker.start()
    try:
        pin(broker.pid, BROKER_CORE)
        warm_up(broker, args, timeout)
        for parts in args.partitions:
            for size in args.sizes:
                for acks in args.acks:
                    topic = f"bench-{parts}-{size}-{acks}-{round_no}"
                    create_topic(broker, topic, parts)
                    prod = generator(broker.pid, kgen_produce(broker, topic, size, acks, args, args.seconds), timeout)
                    cons = generator(
                        broker.pid,
                        [
                            "consume",
                            "-b",
                            broker.bootstrap,
                            "-t",
                            topic,
                            "--count",
                            prod["messages"],
                            "--seconds",
                            args.seconds,
                        ],
                        timeout,
                    )
                    assert_pinned(broker.pid, BROKER_CORE)
                    drop_topic(broker, topic)
                    for phase, r in (("produce", prod), ("consume", cons)):
                        row = {
                            "broker": broker.name,
                            "round": round_no,
                            "case": f"{parts}p {size}B acks={acks}{' idempotent' if acks == 'all' else ''}",
                            "phase": phase,
                            "msgs": r["msgs_per_s"],
                            "mb_s": r["mb_per_s"],
                            "seconds": r["seconds"],
                            "generator_cpu": r["generator_cpu"],
                            "broker_cpu": r["broker_cpu"],
                            "generator_core_others": r["generator_core_others"],
                            "broker_core_others": r["broker_core_others"],
                            "broker_threads": r["broker_threads"],
                            "cpu_s_per_gb": r["broker_cpu_s"] / (r["bytes"] / 1e9) if r["bytes"] else float("nan"),
                            "rss_mb": proc_rss_mb(broker.pid),
                            "gb": r["bytes"] / 1e9,
                            "tcp": r["tcp"],
                        }
                        rows.append(row)
                        print(json.dumps(row), flush=True)
    finally:
        broker.stop()
    return rows


def floor_run(argv: list, phase: str, round_no: int, timeout: float) -> dict:
    """One run of a floor tool (bench/native/ingest, pinned by its own options): its row,
    with core_s_per_gb the busy time of BROKER_CORE per GB over it."""
    cores0 = core_busy()
    t0 = time.monotonic()
    p = subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=timeout)
    wall = time.monotonic() - t0
    cores1 = core_busy()
    lines = p.stdout.strip().splitlines()
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"{Path(str(argv[0])).name} exited with {p.returncode}: {p.stderr.strip()[-500:]}")
    r = json.loads(lines[-1])
    gb = r["bytes"] / 1e9
    return {
        "broker": "floor",
        "round": round_no,
        "case": "kernel floor",
        "phase": phase,
        "tool": " ".join(str(a) for a in argv[:2]).replace(str(REPO) + "/", ""),
        "gb": gb,
        "mb_s": r["gb_per_s"] * 1000,
        "cpu_s_per_gb": r["cpu_s_per_gb"],
        "core_s_per_gb": (cores1[BROKER_CORE] - cores0[BROKER_CORE]) / gb,
        "wall_s": wall,
    }


def run_floor(args, root: Path, round_no: int) -> list[dict]:
    """--floor: the kernel's cost of taking produced bytes on BROKER_CORE, no broker."""
    root.mkdir(parents=True, exist_ok=True)
    row = floor_run(
        [
            INGEST,
            "copy2",
            "--gb",
            args.floor_gb,
            "--frame",
            args.batch_size,
            "--segment",
            (1 << 30) // args.batch_size * args.batch_size,
            "--dir",
            root,
            "--send-cpu",
            GENERATOR_CORE,
            "--recv-cpu",
            BROKER_CORE,
        ],
        "produce",
        round_no,
        PHASE_TIMEOUT,
    )
    print(json.dumps(row), flush=True)
    return [row]


def core_s_per_gb(row: dict) -> float:
    """The broker's core per GB of a pinned run: its own CPU and the rest of its core's busy
    time (interrupts and softirqs the kernel did not charge to the broker)."""
    if "core_s_per_gb" in row:
        return row["core_s_per_gb"]
    busy = row["broker_cpu"] + row["broker_core_others"]
    return row["cpu_s_per_gb"] * busy / row["broker_cpu"] if row["broker_cpu"] else float("nan")


def machine_s_per_gb(row: dict) -> float:
    """A pinned run's busy CPU per GB on both cores but the generator's own: the broker's
    CPU and the rest of both cores' busy time (kernel workers writing back what the broker
    wrote, interrupts and softirqs not charged to it). The kernel runs such work on
    whichever core has room: on the generator's when the broker saturates its own."""
    if not row.get("broker_cpu"):
        return float("nan")
    others = row.get("broker_core_others", 0.0) + row.get("generator_core_others", 0.0)
    return row["cpu_s_per_gb"] * (1 + others / row["broker_cpu"])


#: issue 22's produce goal: a broker's CPU per GB at 1 KiB against Kafka's
GOAL = 1 / 3


def floor_table(rows: list[dict], sizes: list[int]) -> str:
    """--floor: the kernel's floor beside each broker's core per GB on produce (medians over
    rounds, the record size nearest 1 KiB) and the goal as a share of Kafka's."""
    size = min(sizes, key=lambda s: abs(s - 1024))
    lines = [
        f"#### the kernel's floor on core {BROKER_CORE}: busy CPU s per GB, medians (min–max) of "
        f"{len({r['round'] for r in rows if r['broker'] == 'floor'})} round(s); brokers at {size} B",
        "",
        "| case | floor (tool) | Apache Kafka | kbroker | floor / Kafka | goal: kbroker at most |",
        "|---|---:|---:|---:|---:|---:|",
    ]

    def cell(vals: list[float]) -> str:
        return f"{statistics.median(vals):.3f} ({min(vals):.3f}–{max(vals):.3f})" if vals else "—"

    floor = [r["core_s_per_gb"] for r in rows if r["broker"] == "floor"]
    tool = next((r["tool"] for r in rows if r["broker"] == "floor"), "")
    cases = dict.fromkeys(
        r["case"]
        for r in rows
        if r["broker"] != "floor" and r["phase"] == "produce" and f" {size}B " in f" {r['case']} "
    )
    for case in cases:
        per = {
            b: [core_s_per_gb(r) for r in rows if r["broker"] == b and r["case"] == case and r["phase"] == "produce"]
            for b in ("kafka", "kbroker")
        }
        kafka = statistics.median(per["kafka"]) if per["kafka"] else float("nan")
        ratio = f"{statistics.median(floor) / kafka:.2f}" if floor and per["kafka"] else "—"
        goal = f"{GOAL * kafka:.3f}" if per["kafka"] else "—"
        lines.append(
            f"| {case} produce | {cell(floor)} (`{tool}`) | {cell(per['kafka'])} "
            f"| {cell(per['kbroker'])} | {ratio} | {goal} |"
        )
    return "\n".join(lines)


def bound(generator_cpu: float, broker_cpu: float, threshold: float = SATURATED) -> str:
    """Which side saturated its core over a run (CPU as a share of one core)."""
    return {
        (True, False): "generator-bound",
        (False, True): "broker-bound",
        (True, True): "both saturated",
        (False, False): "neither saturated",
    }[(generator_cpu >= threshold, broker_cpu >= threshold)]


def utilisation(
    generator_cpu: float, broker_cpu: float, generator_core_others: float = 0.0, broker_core_others: float = 0.0
) -> str:
    """The CPU cell of a run; the rest of the two cores' busy time is named when over 10%."""
    text = f"generator {generator_cpu:.0%} / broker {broker_cpu:.0%}: {bound(generator_cpu, broker_cpu)}"
    if max(generator_core_others, broker_core_others) > OTHERS_SHOWN:
        text += f" (rest of the cores busy {generator_core_others:.0%} / {broker_core_others:.0%})"
    return text


def pinned_table(
    rows: list[dict],
    title: str,
    names: tuple[str, str] = ("kafka", "kbroker"),
    labels: tuple[str, str] = ("Apache Kafka", "kbroker"),
) -> str:
    """Medians over rounds per case and phase, the brokers side by side, each run's CPU
    shares and which side saturated its core. `names`: the rows' broker names compared,
    `labels` how the table calls them."""
    keys = (
        "msgs",
        "mb_s",
        "generator_cpu",
        "broker_cpu",
        "generator_core_others",
        "broker_core_others",
        "cpu_s_per_gb",
        "machine_s_per_gb",
    )
    med: dict[tuple, dict] = {}
    for r in rows:
        med.setdefault((r["case"], r["phase"], r["broker"]), {k: [] for k in keys})
        for k in keys:
            med[(r["case"], r["phase"], r["broker"])][k].append(
                machine_s_per_gb(r) if k == "machine_s_per_gb" else r.get(k, 0.0)
            )
    med = {key: {k: statistics.median(v) for k, v in vals.items()} for key, vals in med.items()}
    short = labels[0].removeprefix("Apache ")
    lines = [
        f"#### {title}",
        "",
        f"| case | phase | {labels[0]} msg/s (MB/s) | {labels[1]} msg/s (MB/s) | {labels[1]} / {short} "
        f"| {short} run: CPU of its core | {labels[1]} run: CPU of its core "
        f"| broker CPU s per GB, {short} / {labels[1]} "
        f"| with the rest of both cores, {short} / {labels[1]} |",
        "|---|---|---:|---:|---:|---|---|---:|---:|",
    ]
    for case, phase in dict.fromkeys((r["case"], r["phase"]) for r in rows):
        k, o = med.get((case, phase, names[0])), med.get((case, phase, names[1]))
        rate = [f"{m['msgs']:,.0f} ({m['mb_s']:,.1f})" if m else "—" for m in (k, o)]
        cpu = [
            utilisation(m["generator_cpu"], m["broker_cpu"], m["generator_core_others"], m["broker_core_others"])
            if m
            else "—"
            for m in (k, o)
        ]
        per_gb = [f"{m['cpu_s_per_gb']:.2f}" if m else "—" for m in (k, o)]
        machine = [f"{m['machine_s_per_gb']:.2f}" if m else "—" for m in (k, o)]
        ratio = f"{o['msgs'] / k['msgs']:.2f}" if k and o and k["msgs"] else "—"
        lines.append(
            f"| {case} | {phase} | {rate[0]} | {rate[1]} | {ratio} | {cpu[0]} | {cpu[1]} "
            f"| {per_gb[0]} / {per_gb[1]} | {machine[0]} / {machine[1]} |"
        )
    return "\n".join(lines)


# ---------------------------------------------------------------------- one broker run


def run_broker(broker, args, round_no: int) -> list[dict]:
    rows = []
    broker.start()
    try:
        create_topic(broker, "bench-warmup", 10)
        warm = int(args.mb_per_run * 1_000_000 / 100)
        producer_perf(broker, "bench-warmup", warm, 100, "1")
        consumer_perf(broker, "bench-warmup", warm)
        for parts in args.partitions:
            for size in args.sizes:
                for acks in args.acks:
                    records = int(args.mb_per_run * 1_000_000 / size)
                    topic = f"bench-{parts}-{size}-{acks}-{round_no}"
                    create_topic(broker, topic, parts)
                    cpu0 = proc_cpu(broker.pid)
                    prod = producer_perf(broker, topic, records, size, acks)
                    cons = consumer_perf(broker, topic, records)
                    cpu = proc_cpu(broker.pid) - cpu0
                    row = {
                        "broker": broker.name,
                        "round": round_no,
                        "case": f"{parts}p {size}B acks={acks}",
                        "produce_msgs": prod["msgs"],
                        "consume_msgs": cons["msgs"],
                        "cpu_s_per_gb": cpu / (2 * records * size / 1e9),
                        "rss_mb": proc_rss_mb(broker.pid),
                    }
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        for load in args.latency_loads:
            topic = f"bench-latency-{load}-{round_no}"
            create_topic(broker, topic, 10)
            lat = producer_perf(broker, topic, load * args.latency_seconds, 100, "1", throughput=load)
            row = {
                "broker": broker.name,
                "round": round_no,
                "case": f"latency {load} msg/s",
                "p50": lat["p50"],
                "p99": lat["p99"],
                "p999": lat["p999"],
                "achieved": lat["msgs"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.broker_perf:
            topic = f"bench-brokerperf-{round_no}"
            create_topic(broker, topic, 10)
            records = int(args.mb_per_run * 1_000_000 / 100)
            row = {
                "broker": broker.name,
                "round": round_no,
                "case": "broker perf 10p 100B acks=1",
                "produce_msgs": broker_perf(broker, topic, records, 100, "1")["msgs"],
            }
            rows.append(row)
            print(json.dumps(row), flush=True)
        if args.other_clients:
            records = int(args.mb_per_run * 1_000_000 / 100)
            topic = f"bench-clients-{round_no}"
            create_topic(broker, topic, 10)
            create_topic(broker, topic + "-kcat", 10)
            for r in other_clients(broker, topic, records, 100, 10):
                row = {
                    "broker": broker.name,
                    "round": round_no,
                    "case": f"{r['client']} 10p 100B acks=1",
                    "produce_msgs": r["produce_msgs"],
                    "consume_msgs": r["consume_msgs"],
                }
                rows.append(row)
                print(json.dumps(row), flush=True)
    finally:
        broker.stop()
    return rows


def restart_times(broker, gb: float) -> dict:
    """Stores `gb` GB in 1 KiB records, then times starts after a clean stop and a kill -9."""
    broker.start()
    try:
        topic = "bench-restart"
        create_topic(broker, topic, 10)
        producer_perf(broker, topic, int(gb * 1_000_000), 1000, "1")
    except BaseException:
        broker.stop()
        raise
    broker.stop()
    clean = broker.start()
    broker.kill()
    unclean = broker.start()
    broker.stop()
    return {"broker": broker.name, "case": f"restart {gb} GB", "clean_s": clean, "kill9_s": unclean}


# ---------------------------------------------------------------------- report


def medians(rows: list[dict]) -> dict:
    out: dict[tuple, dict] = {}
    keys = ("produce_msgs", "consume_msgs", "cpu_s_per_gb", "rss_mb", "p50", "p99", "p999", "clean_s", "kill9_s")
    for case, broker in {(r["case"], r["broker"]) for r in rows}:
        mine = [r for r in rows if r["case"] == case and r["broker"] == broker]
        out[(case, broker)] = {k: statistics.median(r[k] for r in mine) for k in keys if k in mine[0]}
    return out


def table(rows: list[dict], title: str) -> str:
    med = medians(rows)
    cases = list(dict.fromkeys(r["case"] for r in rows))
    lines = [
        f"#### {title}",
        "",
        "| case | metric | Apache Kafka | kbroker | kbroker / Kafka |",
        "|---|---|---:|---:|---:|",
    ]
    for case in cases:
        k, o = med.get((case, "kafka"), {}), med.get((case, "kbroker"), {})
        for metric in (
            "produce_msgs",
            "consume_msgs",
            "cpu_s_per_gb",
            "rss_mb",
            "p50",
            "p99",
            "p999",
            "clean_s",
            "kill9_s",
        ):
            if metric in k and metric in o:
                ratio = o[metric] / k[metric] if k[metric] else float("nan")
                lines.append(f"| {case} | {metric} | {k[metric]:,.2f} | {o[metric]:,.2f} | {ratio:.2f} |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--pinned",
        action="store_true",
        help="broker on core 0, the C load generator (bench/native/kgen) on core 1, both sides' CPU "
        "recorded, runs of --seconds",
    )
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--partitions", default=None, help="default 1,10,100,1000 (--pinned: 10)")
    ap.add_argument("--sizes", default="100,1024")
    ap.add_argument("--acks", default="1,all", help="--pinned: acks=all runs with idempotence")
    ap.add_argument("--mb-per-run", type=float, default=30.0)
    ap.add_argument("--latency-loads", default=None, help="default 10000,100000 (not with --pinned)")
    ap.add_argument("--latency-seconds", type=int, default=5)
    ap.add_argument("--broker-perf", action="store_true", help="also `broker perf produce` against both")
    ap.add_argument(
        "--other-clients",
        action="store_true",
        help="also confluent-kafka and kcat (10 partitions, 100 B, acks=1) against both",
    )
    ap.add_argument("--fsync", action="store_true", help="an fsync after every batch on both brokers")
    ap.add_argument("--restart-gb", type=float, default=0.0)
    ap.add_argument(
        "--seconds",
        type=float,
        default=10.0,
        help="--pinned: how long each produce run lasts, and each read-back at least (default 10)",
    )
    ap.add_argument(
        "--warmup-seconds",
        type=float,
        default=10.0,
        help="--pinned: a warm-up pass after each start is this long a produce with each record size "
        "and acks of the run, each read back once; passes go on while the broker's JIT compiler "
        "threads use over 5%% of the time (Kafka)",
    )
    ap.add_argument(
        "--warmup-max-seconds",
        type=float,
        default=300.0,
        help="--pinned: no new warm-up pass after this long (default 300)",
    )
    ap.add_argument(
        "--pin-at",
        choices=("launch", "start"),
        default="launch",
        help="--pinned: the broker runs on its core from its launch (a JVM then sizes its GC and JIT "
        "threads for one core, as in a one-core container; the default) or is moved there once "
        "started (its pools sized for the whole machine)",
    )
    ap.add_argument("--linger-ms", type=int, default=5, help="--pinned: the producer's linger.ms")
    ap.add_argument("--batch-size", type=int, default=131072, help="--pinned: the producer's batch.size")
    ap.add_argument("--dir", default=None, help="where the brokers keep their data (default: a temp dir)")
    ap.add_argument(
        "--baseline",
        type=Path,
        default=None,
        metavar="DIR",
        help="--pinned: instead of Apache Kafka, kbroker from the checkout DIR (run with DIR/.venv): "
        "a before/after comparison of kbroker itself",
    )
    ap.add_argument(
        "--baseline-event-loop",
        choices=("asyncio", "uvloop"),
        default="asyncio",
        help="--baseline: the baseline broker's --event-loop (kbroker's own runs on asyncio, the "
        "default install; `--baseline . --baseline-event-loop uvloop` compares the two loops)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="settings",
        help="a broker key for this checkout's kbroker (repeatable), over the run's own settings",
    )
    ap.add_argument(
        "--baseline-set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        dest="baseline_settings",
        help="--baseline: a broker key for the baseline's kbroker (repeatable); with `--baseline .` "
        "and --set, one checkout under two settings",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="--pinned: also the kernel's floor for produce on the broker's core, no broker (bench/native/ingest)",
    )
    ap.add_argument("--floor-gb", type=float, default=24.0, help="--floor: GB each floor run receives")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    for opt, attr in (("--set", "settings"), ("--baseline-set", "baseline_settings")):
        pairs = {}
        for item in getattr(args, attr):
            key, sep, value = item.partition("=")
            if not sep or not key.strip():
                ap.error(f"{opt} {item!r}: expected KEY=VALUE")
            pairs[key.strip()] = value.strip()
        setattr(args, attr, pairs)
    if args.floor and (not args.pinned or args.baseline is not None):
        ap.error("--floor needs --pinned, against Apache Kafka (not --baseline)")
    if args.floor_gb <= 0:
        ap.error("--floor-gb must be positive")
    if args.baseline_settings and args.baseline is None:
        ap.error("--baseline-set needs --baseline")
    if args.baseline_event_loop != "asyncio" and args.baseline is None:
        ap.error("--baseline-event-loop needs --baseline")
    if args.baseline is not None:
        if not args.pinned:
            ap.error("--baseline needs --pinned")
        args.baseline = args.baseline.resolve()
        if not (args.baseline / ".venv" / "bin" / "python").exists() or not (args.baseline / "broker").is_dir():
            ap.error(f"--baseline {args.baseline}: not a kbroker checkout with its .venv (make install there)")
    if args.pinned:
        given = [
            f
            for f, v in (
                ("--latency-loads", args.latency_loads),
                ("--broker-perf", args.broker_perf),
                ("--other-clients", args.other_clients),
                ("--restart-gb", args.restart_gb),
            )
            if v
        ]
        if given:
            ap.error(f"--pinned measures produce and consume only, not {', '.join(given)}")
        if args.seconds <= 0 or args.warmup_seconds <= 0 or args.warmup_max_seconds < 0:
            ap.error("--seconds and --warmup-seconds must be positive, --warmup-max-seconds not negative")
    partitions = args.partitions if args.partitions is not None else ("10" if args.pinned else "1,10,100,1000")
    loads = args.latency_loads if args.latency_loads is not None else ("" if args.pinned else "10000,100000")
    args.partitions = [int(x) for x in partitions.split(",") if x]
    args.sizes = [int(x) for x in args.sizes.split(",") if x]
    args.acks = [x for x in args.acks.split(",") if x]
    args.latency_loads = [int(x) for x in loads.split(",") if x]
    if bad := [a for a in args.acks if a not in ("0", "1", "all", "-1")]:
        ap.error(f"--acks takes 0, 1 and all, not {', '.join(bad)}")
    args.acks = ["all" if a == "-1" else a for a in args.acks]
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    if args.pinned:
        check_pinning()
        ensure_kgen()
        if args.seconds < 10:
            print(f"note: runs of {args.seconds:g} s (the comparison wants >= 10 s)", file=sys.stderr)

    root = Path(args.dir or tempfile.mkdtemp(prefix="kafka-vs-kbroker-"))
    report, everything = [], []
    load = os.getloadavg()[0]  # a shared machine shows here: the pinned cores are not ours alone
    durability = "fsync after every batch" if args.fsync else "page-cache durability (default)"
    try:
        rows = []
        peer: type[Kafka] | type[KBroker] = Kafka
        names, labels = ("kafka", "kbroker"), ("Apache Kafka", "kbroker")
        KBroker.settings = args.settings
        if args.baseline:
            KBrokerBaseline.settings = args.baseline_settings
            KBrokerBaseline.tree = args.baseline
            KBrokerBaseline.event_loop = args.baseline_event_loop
            peer, names, labels = KBrokerBaseline, ("kbroker-baseline", "kbroker"), ("baseline", "kbroker")
        for r in range(args.rounds):  # --rounds 0: only the restart times
            for cls in (peer, KBroker):
                shutil.rmtree(root, ignore_errors=True)
                run = run_broker_pinned if args.pinned else run_broker
                rows += run(cls(root, args.fsync, PINNED_SETTINGS if args.pinned else None), args, r)
            if args.floor:
                shutil.rmtree(root, ignore_errors=True)
                rows += run_floor(args, root, r)
        everything += rows
        if rows and args.pinned:
            brokers = [r for r in rows if r["broker"] != "floor"]
            report.append(
                pinned_table(
                    brokers,
                    f"pinned: broker on core {BROKER_CORE}, kgen (librdkafka) on core "
                    f"{GENERATOR_CORE}, {args.seconds:g} s runs, medians of {args.rounds} "
                    f"round(s), {durability}, load average {load:.1f} before"
                    + (
                        f", baseline: kbroker from {args.baseline} on {args.baseline_event_loop}"
                        if args.baseline
                        else ""
                    )
                    + "".join(
                        f", {who} with {k}={v}"
                        for who, d in (("kbroker", args.settings), ("baseline", args.baseline_settings))
                        for k, v in d.items()
                    ),
                    names,
                    labels,
                )
            )
            if args.floor:
                report.append(floor_table(rows, args.sizes))
        elif rows:
            report.append(table(rows, durability))
        if args.restart_gb:
            rows = []
            for cls in (Kafka, KBroker):
                shutil.rmtree(root, ignore_errors=True)
                rows.append(restart_times(cls(root, False), args.restart_gb))
                print(json.dumps(rows[-1]), flush=True)
            everything += rows
            report.append(table(rows, f"restart with {args.restart_gb} GB stored"))
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(everything, indent=1))
    print("\n\n".join(report))


if __name__ == "__main__":
    main()

"""kbroker's 3-broker cluster beside Apache Kafka's on this one machine (issue 13, the
cluster rows): the same measurements against three clusters, run in turn, never together,
alternating round by round (kbroker, Kafka 3.9 ZK, Kafka 4.x KRaft, kbroker, ...):

  kbroker   3 brokers on the chroot /kbroker-rN of a ZooKeeper (Debian's, run.py's)
  kafka39   Apache Kafka 3.9.2 (its last ZooKeeper release), 3 brokers on the chroot
            /kafka39-rN of the SAME ZooKeeper, the same zookeeper.session.timeout.ms
  kraft     Apache Kafka 4.x (tests/jvm/pom.xml's version), 3 combined broker+controller
            nodes, a static quorum of the three

Per cluster and round, after a warm-up load (Kafka's JIT, kbroker the same):

  throughput  100-byte records, acks=all, to a fresh topic of 3 partitions (one leader per
              broker), RF=3, min.insync.replicas=2: Kafka's ProducerPerformance (the same
              4.x tool for all three) and `broker perf produce`; msg/s and the brokers' CPU
              seconds per million records.
  leader      measure.py's client-side failover: acks=all requests one at a time to a
              partition whose leader is not the controller; kill -9 of that leader, then
              SIGTERM (controlled shutdown): signal -> first ack from another broker.
  controller  kill -9 of the controller (KRaft: the node of the active controller):
              -> the survivors name a new one; -> a topic created through a survivor has a
              leader.

    .venv/bin/python bench/cluster/kafka_peers.py                       # 3 rounds, ~5 min each
    .venv/bin/python bench/cluster/kafka_peers.py --rounds 1 --systems kafka39,kbroker
    .venv/bin/python bench/cluster/kafka_peers.py --json bench/results/cluster_peers.json
    .venv/bin/python bench/cluster/kafka_peers.py --table-from bench/results/cluster_peers.json

Kafka 3.9's jars come from bench/cluster/kafka39/pom.xml (`mvn -q -B package` there on the
first run, never by `make test`); Kafka 4.x's are the tests' (`make testdeps`).

Invariants:
- One cluster runs at a time; ZooKeeper runs for the whole script (idle during KRaft).
- Equal settings where both sides have them: RF=3, min.insync.replicas=2 (topic config),
  1 GiB segments, log.segment.delete.delay.ms=1000 (deleted topics leave the disk before the
  next figure), zookeeper.session.timeout.ms for both ZooKeeper clusters; KRaft's
  broker.session.timeout.ms equals it, with broker.heartbeat.interval.ms a third of it (a
  ZooKeeper client pings every third of its session). Every Kafka JVM: -Xmx512m, G1.
- Every figure carries the 1-minute load average sampled right before it; every wait is
  bounded (measure.py's `until`); every process (brokers, JVMs, ZooKeeper) is stopped when
  the script ends, whatever happens, and dies with it if it is killed (PR_SET_PDEATHSIG).
- The machine is shared: before measuring, the script waits (bounded) while
  /tmp/ci-running exists, and holds /tmp/bench-running while it measures.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE), str(ROOT / "bench")]

from kafka_vs_kbroker import producer_perf  # noqa: E402  (bench/kafka_vs_kbroker.py)
from measure import (  # noqa: E402
    POLL_S,
    REQUEST_TIMEOUT,
    BenchCluster,
    MeasureTimeout,
    cpu_seconds,
    failover_trial,
    load1,
    median,
    perf_produce_cmd,
    quote,
    run_perf,
    until,
)
from run import start_broker  # noqa: E402

from broker.client import BrokerConnection, ClientError, Cluster  # noqa: E402
from broker.perf.local import LocalBroker, free_port, terminate  # noqa: E402
from broker.perf.zookeeper import ZooKeeperServer, available  # noqa: E402
from broker.protocol.errors import ErrorCode, KafkaProtocolError  # noqa: E402
from broker.protocol.messages.describe_cluster import DescribeClusterRequest  # noqa: E402
from tests.support.kafka_broker import LOG4J2_PROPERTIES, kafka_uuid  # noqa: E402
from tests.support.kafka_tools import KAFKA_LIBS, kafka_tool  # noqa: E402

SYSTEMS = ("kbroker", "kafka39", "kraft")
LABELS = {"kbroker": "kbroker", "kafka39": "Kafka 3.9 ZK", "kraft": "Kafka {v} KRaft"}
BROKERS = 3
KAFKA39_DIR = HERE / "kafka39"
KAFKA39_LIBS = KAFKA39_DIR / "target" / "kafka-libs"
KAFKA39_VERSION = "3.9.2"
START_TIMEOUT = 180.0  # a Kafka JVM on a loaded 2-core machine
STOP_TIMEOUT = 60.0
CI_WAIT_S = 25 * 60
CI_MARKER, BENCH_MARKER = "/tmp/ci-running", "/tmp/bench-running"
#: what bin/kafka-server-start.sh gives a broker, with the small heap three of them share
KAFKA_JVM = (
    "-Xms512m",
    "-Xmx512m",
    "-server",
    "-XX:+UseG1GC",
    "-XX:MaxGCPauseMillis=20",
    "-XX:InitiatingHeapOccupancyPercent=35",
    "-XX:+ExplicitGCInvokesConcurrent",
    "-Djava.awt.headless=true",
)
#: the settings every cluster gets (all three know these keys)
COMMON = {"log.segment.bytes": 1 << 30, "log.segment.delete.delay.ms": 1000}
TOPIC_CONFIGS = {"min.insync.replicas": "2"}

LOG4J1 = """log4j.rootLogger=INFO, F
log4j.appender.F=org.apache.log4j.FileAppender
log4j.appender.F.File={path}
log4j.appender.F.layout=org.apache.log4j.PatternLayout
log4j.appender.F.layout.ConversionPattern=[%d] %p %m (%c)%n
log4j.logger.state.change.logger=WARN
log4j.logger.kafka.request.logger=WARN
"""


def kraft_version() -> str:
    m = re.search(r"<kafka.version>([^<]+)</kafka.version>", (ROOT / "tests" / "jvm" / "pom.xml").read_text())
    return m.group(1) if m else "4.x"


def fetch_kafka39() -> None:
    """Kafka 3.9's jars, fetched once by Maven (bench/cluster/kafka39/pom.xml)."""
    if (KAFKA39_LIBS / f"kafka_2.13-{KAFKA39_VERSION}.jar").exists():
        return
    if shutil.which("mvn") is None:
        raise SystemExit("kafka_peers: Maven is needed once to fetch Kafka 3.9 (apt-get install maven)")
    print(f"fetching Apache Kafka {KAFKA39_VERSION} (bench/cluster/kafka39/pom.xml)", flush=True)
    p = subprocess.run(
        ["mvn", "-q", "-B", "package"], cwd=KAFKA39_DIR, capture_output=True, text=True, timeout=900, check=False
    )
    if p.returncode != 0:
        raise SystemExit(
            f"kafka_peers: mvn package in {KAFKA39_DIR} failed: {(p.stdout + p.stderr).strip().splitlines()[-1:]}"
        )


# ---------------------------------------------------------------------------- Kafka nodes


class KafkaNode:
    """One Apache Kafka broker JVM with what BenchCluster uses of a LocalBroker: proc, pid,
    port, bootstrap, data_dir, log_path, start(), stop()."""

    def __init__(self, directory: Path, libs: Path, log4j2: bool, config: dict):
        self.dir = directory
        self.libs = libs
        self.log4j2 = log4j2
        self.port = free_port()
        self.data_dir = str(directory / "data")
        self.log_path = str(directory / "server.log")
        self.config_path = directory / "server.properties"
        self.config = {"listeners": f"PLAINTEXT://127.0.0.1:{self.port}", "log.dirs": self.data_dir, **config}
        self.proc: subprocess.Popen | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int:
        return self.proc.pid

    def write_config(self) -> None:
        self.dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text("".join(f"{k}={v}\n" for k, v in self.config.items()))
        (self.dir / "log4j.properties").write_text(
            (LOG4J2_PROPERTIES if self.log4j2 else LOG4J1).format(path=self.log_path)
        )

    def launch(self) -> None:
        """Starts the JVM (in a session of its own, dying with this script); not waited for."""
        assert self.proc is None or self.proc.poll() is not None, "already running"
        self.write_config()
        logging = (
            f"-Dlog4j2.configurationFile={self.dir / 'log4j.properties'}"
            if self.log4j2
            else f"-Dlog4j.configuration=file:{self.dir / 'log4j.properties'}"
        )
        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        cmd = [
            *die_with_parent,
            "java",
            *KAFKA_JVM,
            logging,
            f"-Dkafka.logs.dir={self.dir}",
            "-cp",
            f"{self.libs}/*",
            "kafka.Kafka",
            str(self.config_path),
        ]
        with open(self.dir / "stdout.log", "ab") as out:
            self.proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Ready once it answers Metadata listing itself (registered, unfenced)."""
        from broker.protocol.messages.metadata import MetadataRequest

        deadline = time.monotonic() + timeout
        node = int(self.config.get("broker.id", self.config.get("node.id", -1)))
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"Kafka at {self.bootstrap} exited with {self.proc.returncode}: {self.last_words()}")
            try:
                with BrokerConnection("127.0.0.1", self.port, timeout=2) as c:
                    m = c.request(MetadataRequest(topics=[], allow_auto_topic_creation=False))
                    if node in {b.node_id for b in m.brokers}:
                        return
            except (ClientError, KafkaProtocolError, OSError):
                pass
            time.sleep(0.2)
        raise RuntimeError(f"Kafka at {self.bootstrap} not ready within {timeout:g} s: {self.last_words()}")

    def start(self, timeout: float = START_TIMEOUT) -> None:
        self.launch()
        self.wait_ready(timeout)

    def stop(self, timeout: float = STOP_TIMEOUT) -> None:
        """SIGTERM (controlled shutdown), bounded; SIGKILL past the bound."""
        terminate(self.proc, timeout)

    def last_words(self) -> str:
        for path in (self.log_path, self.dir / "stdout.log"):
            try:
                with open(path, errors="replace") as f:
                    lines = [line.strip() for line in f if " ERROR " in line or "Exception" in line]
                if lines:
                    return lines[-1][:300]
            except OSError:
                pass
        return "(nothing in its log)"


# ---------------------------------------------------------------------------- the clusters


class PeerCluster(BenchCluster):
    """measure.py's BenchCluster (its bounded waits and wire questions) over any of the
    three systems; subclasses say how the processes start and who the controller is."""

    name = ""

    def __init__(self, root: Path, session_ms: int):
        self.root = str(root)
        self.session_ms = session_ms
        self.brokers: dict = {}
        self.timeout = 2 * session_ms / 1000 + 30

    def wait_whole(self) -> int:
        """Every broker runs, each lists all of them, and they name one live controller."""
        want = sorted(self.brokers)

        def probe():
            seen = {i: (sorted(b.node_id for b in self.metadata(i).brokers), self.controller_id(i)) for i in want}
            ctrls = {c for _, c in seen.values()}
            done = all(ids == want for ids, _ in seen.values()) and len(ctrls) == 1 and ctrls <= set(want)
            return done, ctrls.pop() if done else -1, f"(brokers, controller) {seen}"

        return until("every broker registered with one controller", probe, self.timeout)

    def spread_leaders(self) -> None:
        """Preferred leaders back, until every broker's Metadata shows each partition led by
        its first replica: Kafka answers ElectLeaders before every broker has heard, and a
        trial that picked its victim from a stale view would time a broker nobody produced to."""

        def probe():
            super(PeerCluster, self).spread_leaders()
            stray = {
                i: [
                    (t.name, p.partition_index, p.leader_id)
                    for t in self.metadata(i, None).topics
                    for p in t.partitions
                    if p.leader_id != p.replica_nodes[0]
                ]
                for i in self.brokers
            }
            return not any(stray.values()), None, f"not led by their first replica: {stray}"

        until("preferred leaders everywhere", probe, self.timeout, interval=0.2)

    def prepare(self) -> None:
        """What comes before the first start and is not timed (KRaft: formatting storage)."""

    def start(self) -> None:
        for node in self.brokers.values():
            node.launch()
        for node in self.brokers.values():
            node.wait_ready()
        self.wait_whole()

    def close(self) -> None:
        """SIGTERM to every broker at once, then a bounded wait for each (kill past it)."""
        for b in self.brokers.values():
            if b.proc is not None and b.proc.poll() is None:
                b.proc.send_signal(signal.SIGTERM)
        for b in self.brokers.values():
            b.stop(STOP_TIMEOUT)


class KbrokerCluster(PeerCluster):
    name = "kbroker"

    def __init__(self, root: Path, session_ms: int, zookeeper: ZooKeeperServer, chroot: str):
        super().__init__(root, session_ms)
        self.zookeeper, self.chroot = zookeeper, chroot
        self.connect = zookeeper.chroot(chroot)
        for i in range(1, BROKERS + 1):
            d = root / f"broker-{i}"
            d.mkdir(parents=True, exist_ok=True)
            config = {
                "broker.id": i,
                "zookeeper.connect": self.connect,
                "zookeeper.session.timeout.ms": session_ms,
                **COMMON,
            }
            self.brokers[i] = LocalBroker(
                config=config, data_dir=str(d / "data"), log_path=str(d / "broker.log"), own_session=True
            )

    def start(self) -> None:
        for i, b in self.brokers.items():
            start_broker(i, b)
        self.wait_whole()


class Kafka39Cluster(PeerCluster):
    name = "kafka39"

    def __init__(self, root: Path, session_ms: int, zookeeper: ZooKeeperServer, chroot: str):
        super().__init__(root, session_ms)
        self.zookeeper, self.chroot = zookeeper, chroot
        self.connect = zookeeper.chroot(chroot)
        for i in range(1, BROKERS + 1):
            self.brokers[i] = KafkaNode(
                root / f"broker-{i}",
                KAFKA39_LIBS,
                False,
                {
                    "broker.id": i,
                    "zookeeper.connect": self.connect,
                    "zookeeper.session.timeout.ms": session_ms,
                    **COMMON,
                },
            )


class KraftCluster(PeerCluster):
    """Three combined nodes; the controller is the quorum's leader, asked of a node's
    controller listener (DescribeCluster with endpoint type 2): a KRaft broker's Metadata
    names a random broker as controller."""

    name = "kraft"

    def __init__(self, root: Path, session_ms: int):
        super().__init__(root, session_ms)
        self.controller_ports = {i: free_port() for i in range(1, BROKERS + 1)}
        voters = ",".join(f"{i}@127.0.0.1:{p}" for i, p in self.controller_ports.items())
        self.cluster_id = kafka_uuid()
        for i in range(1, BROKERS + 1):
            node = KafkaNode(
                root / f"broker-{i}",
                KAFKA_LIBS,
                True,
                {
                    "process.roles": "broker,controller",
                    "node.id": i,
                    "controller.quorum.voters": voters,
                    "controller.listener.names": "CONTROLLER",
                    "inter.broker.listener.name": "PLAINTEXT",
                    "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
                    "broker.session.timeout.ms": session_ms,
                    "broker.heartbeat.interval.ms": session_ms // 3,
                    **COMMON,
                },
            )
            node.config["listeners"] += f",CONTROLLER://127.0.0.1:{self.controller_ports[i]}"
            node.config["advertised.listeners"] = f"PLAINTEXT://127.0.0.1:{node.port}"
            self.brokers[i] = node

    def prepare(self) -> None:
        for node in self.brokers.values():
            node.write_config()
            kafka_tool("kafka-storage", "format", "-t", self.cluster_id, "-c", node.config_path, timeout=120)

    def controller_id(self, i: int) -> int:
        with BrokerConnection(
            "127.0.0.1", self.controller_ports[i], client_id="cluster-peers", timeout=REQUEST_TIMEOUT
        ) as c:
            r = c.request(DescribeClusterRequest(include_cluster_authorized_operations=False, endpoint_type=2))
        if r.error_code:
            raise KafkaProtocolError(r.error_code, "DescribeCluster")
        return r.controller_id

    def restart(self, i: int) -> float:
        self.brokers[i].proc.wait(120)
        t = time.monotonic()
        self.brokers[i].start()
        return t


# ---------------------------------------------------------------------------- measurements


def throughput_run(c: PeerCluster, tool: str, n: int, tag: str) -> dict:
    """One acks=all produce run to a fresh topic (3 partitions, RF=3), deleted afterwards."""
    topic = f"tput-{tool}-{tag}"
    parts = c.create_topic(topic, BROKERS, BROKERS, TOPIC_CONFIGS)
    row = {"tool": tool, "records": n, "leaders": sorted(p.leader_id for p in parts.values()), "load1": load1()}
    cpu0 = {i: cpu_seconds(c.pid(i)) for i in c.brokers}
    if tool == "ProducerPerformance":
        row["command"] = (
            f"kafka-producer-perf-test --bootstrap-server B --topic T --num-records {n} --record-size 100 "
            "--throughput -1 --command-property acks=all linger.ms=5 batch.size=131072"
        )
        r = producer_perf(c, topic, n, 100, "all")
        row.update(msgs_per_s=round(r["msgs"]), p50_ms=r["p50"], p99_ms=r["p99"])
    else:
        cmd = perf_produce_cmd(c.bootstrap, topic, n, "all", 1 << 20)
        row["command"] = quote(cmd)
        s = run_perf(cmd)
        row.update(msgs_per_s=round(s["records_per_sec"]), p50_ms=s["p50_ms"], p99_ms=s["p99_ms"])
    cpu = sum(cpu_seconds(c.pid(i)) - cpu0[i] for i in c.brokers)
    row["broker_cpu_s_per_m"] = round(cpu / (n / 1e6), 2)
    c.delete_topic(topic)
    return row


def on_victim(row: dict) -> bool:
    """Whether a leader failover trial's producer was on the victim at the signal: its first
    error after it came from the victim (it changes brokers only after an error). Else the
    figure times nothing."""
    return any(broker == row["victim"] for _, broker, _ in row["first_errors"])


def controller_trial(c: PeerCluster, topic: str, tag: str) -> dict:
    """kill -9 of the controller; the victim restarts and the topic's ISRs fill afterwards."""
    c.spread_leaders()
    c.wait_full_isr(topic)
    victim = c.wait_whole()
    survivors = [i for i in c.brokers if i != victim]
    row = {"victim": victim, "load1": load1()}
    t = c.kill(victim)

    def new_controller():
        ids = {i: c.controller_id(i) for i in survivors}
        found = set(ids.values())
        return len(found) == 1 and found <= set(survivors), min(found), f"{ids}"

    row["new_controller"] = until("a new controller", new_controller, c.timeout, interval=POLL_S)
    row["controller_s"] = round(time.monotonic() - t, 3)
    created = f"ctrl-new-{tag}"

    def create():
        with Cluster(c.brokers[survivors[0]].bootstrap, client_id="cluster-peers", timeout=REQUEST_TIMEOUT) as a:
            try:
                a.create_topic(created, 1, 2)
            except KafkaProtocolError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:  # an earlier attempt got through
                    raise
        return True, None, "created"

    until(f"{created} created through broker {survivors[0]}", create, c.timeout, interval=POLL_S)

    row["created_s"] = c.led_then_restored(created, survivors, victim, topic, t)
    return row


def measure_cluster(c: PeerCluster, args, rnd: int, label: str) -> dict:
    out: dict = {"round": rnd}
    c.prepare()
    t0 = time.monotonic()
    c.start()
    out["start_s"] = round(time.monotonic() - t0, 1)
    print(f"  {label}: 3 brokers up in {out['start_s']} s ({c.bootstrap}); load {load1()}", flush=True)
    # the warm-up (Kafka's JIT; kbroker's the same way): a short run, not counted
    w = throughput_run(c, "ProducerPerformance", args.warmup_records, f"warmup-{rnd}")
    print(f"  {label}: warm-up {w['msgs_per_s']:,} msg/s (not counted)", flush=True)
    for tool, n in (("ProducerPerformance", args.pp_records), ("broker perf", args.perf_records)):
        row = throughput_run(c, tool.replace(" ", "-"), n, str(rnd))
        row["tool"] = tool
        out[tool] = row
        print(
            f"  {label}: {tool:19} acks=all {row['msgs_per_s']:>10,} msg/s, p99 {row['p99_ms']} ms, brokers "
            f"{row['broker_cpu_s_per_m']} CPU s per M records, leaders on {row['leaders']}; load {row['load1']}",
            flush=True,
        )
    topic = "failover"
    c.create_topic(topic, BROKERS, BROKERS, TOPIC_CONFIGS)
    acked: collections.Counter = collections.Counter()
    for how in ("kill -9", "SIGTERM"):
        for _ in range(args.trials):
            row = failover_trial(c, topic, how, acked)
            out.setdefault(f"leader {how}", []).append(row)
            if not on_victim(row):
                print(
                    f"  !! {label}: the producer had no ack from the victim {row['victim']}: trial not counted",
                    flush=True,
                )
            print(
                f"  {label}: {how:7} leader {row['victim']} (controller {row['controller']}): first ack from "
                f"{row['new_leader']} after {row['failover_s']:.3f} s; producer errors {row['errors']}; "
                f"load {row['load1']}",
                flush=True,
            )
            if row["acked_lost"]:
                print(
                    f"  !! {label}: acknowledged records missing: high watermark {row['high_watermark']} < "
                    f"{row['acked_records']} acknowledged",
                    flush=True,
                )
    for trial in range(args.trials):
        row = controller_trial(c, topic, f"{rnd}-{trial}")
        out.setdefault("controller kill -9", []).append(row)
        print(
            f"  {label}: kill -9 controller {row['victim']}: {row['new_controller']} controller after "
            f"{row['controller_s']:.3f} s, a new topic led after {row['created_s']:.3f} s; load {row['load1']}",
            flush=True,
        )
    c.delete_topic(topic)
    return out


# ---------------------------------------------------------------------------- summary

#: (row label, how a round's figure is read, whether it is a rate: higher is better)
FIGURES = (
    ("ProducerPerformance acks=all, msg/s", lambda r: r["ProducerPerformance"]["msgs_per_s"], True),
    ("`broker perf produce` acks=all, msg/s", lambda r: r["broker perf"]["msgs_per_s"], True),
    (
        "brokers' CPU s per M records (ProducerPerformance)",
        lambda r: r["ProducerPerformance"]["broker_cpu_s_per_m"],
        False,
    ),
    (
        "leader kill -9 → first ack by the new leader, s",
        lambda r: median([t["failover_s"] for t in r["leader kill -9"] if on_victim(t)]),
        False,
    ),
    (
        "leader SIGTERM → first ack by the new leader, s",
        lambda r: median([t["failover_s"] for t in r["leader SIGTERM"] if on_victim(t)]),
        False,
    ),
    (
        "controller kill -9 → a new controller named, s",
        lambda r: median([t["controller_s"] for t in r["controller kill -9"]]),
        False,
    ),
    (
        "controller kill -9 → a new topic has a leader, s",
        lambda r: median([t["created_s"] for t in r["controller kill -9"]]),
        False,
    ),
    ("cluster start (3 brokers registered), s", lambda r: r["start_s"], False),
)


def summary(results: dict, systems: list[str], labels: dict) -> str:
    """Medians over rounds, and kbroker / peer for each peer, as a Markdown table; each
    cell also gives the rounds' figures (throughputs: their range)."""
    systems = [s for s in SYSTEMS if s in systems]  # kbroker first, whatever the round order
    peers = [s for s in systems if s != "kbroker"]
    head = ["figure (median over rounds)", *(labels[s] for s in systems)]
    if "kbroker" in systems:
        head += [f"kbroker / {labels[p]}" for p in peers]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, read, higher in FIGURES:
        meds, cells_of = {}, {}
        for s in systems:
            vals = []
            for r in results[s]:
                try:
                    vals.append(read(r))
                except (KeyError, TypeError):
                    pass
            vals = [v for v in vals if v is not None]
            meds[s] = median(vals)
            spread = (f"{_fmt(min(vals))}–{_fmt(max(vals))}" if higher else ", ".join(map(_fmt, vals))) if vals else ""
            cells_of[s] = f"**{_fmt(meds[s])}** ({spread})" if vals else "–"
        cells = [name] + [cells_of[s] for s in systems]
        if "kbroker" in systems:
            cells += [f"{meds['kbroker'] / meds[p]:.2f}" if meds["kbroker"] and meds[p] else "–" for p in peers]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(v) -> str:
    if v is None:
        return "–"
    return f"{v:,.0f}" if v >= 1000 else f"{v:.3g}" if v < 10 else f"{v:.1f}"


# ---------------------------------------------------------------------------- main


def wait_for_ci() -> None:
    """Bounded wait while the lead's test suite runs (its marker file exists)."""
    deadline = time.monotonic() + CI_WAIT_S
    while os.path.exists(CI_MARKER) and time.monotonic() < deadline:
        print(f"{CI_MARKER} exists: waiting (up to {CI_WAIT_S // 60} min in all)", flush=True)
        time.sleep(30)


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        description="kbroker's 3-broker cluster beside Apache Kafka 3.9 (ZooKeeper) "
        "and 4.x (KRaft), alternating rounds (issue 13)."
    )
    p.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, in round order (default {','.join(SYSTEMS)})"
    )
    p.add_argument("--rounds", type=int, default=3, help="rounds of every system (default 3)")
    p.add_argument("--trials", type=int, default=1, help="failover trials of each kind per round (default 1)")
    p.add_argument(
        "--session-ms",
        type=int,
        default=6000,
        help="zookeeper.session.timeout.ms, and KRaft's broker.session.timeout.ms (default 6000)",
    )
    p.add_argument("--pp-records", type=int, default=1_000_000, help="ProducerPerformance records (default 1M)")
    p.add_argument("--perf-records", type=int, default=3_000_000, help="`broker perf produce` records (default 3M)")
    p.add_argument("--warmup-records", type=int, default=300_000, help="warm-up records after a start (300k)")
    p.add_argument("--dir", help="data dirs and logs here, kept (default: a temporary dir, removed)")
    p.add_argument("--json", metavar="PATH", help="write every figure here as JSON")
    p.add_argument("--table-from", metavar="PATH", help="print the table of an earlier run's --json, run nothing")
    args = p.parse_args(argv)
    args.systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if unknown := [s for s in args.systems if s not in SYSTEMS]:
        p.error(f"--systems: unknown {unknown}; systems: {', '.join(SYSTEMS)}")
    return args


def write_json(path: str, results: dict) -> None:
    with open(path, "w") as f:
        json.dump(results, f, indent=1, default=str)


def make_cluster(system: str, root: Path, args, zookeeper: ZooKeeperServer, rnd: int) -> PeerCluster:
    d = root / f"{system}-r{rnd}"
    if system == "kbroker":
        return KbrokerCluster(d, args.session_ms, zookeeper, f"kbroker-r{rnd}")
    if system == "kafka39":
        return Kafka39Cluster(d, args.session_ms, zookeeper, f"kafka39-r{rnd}")
    return KraftCluster(d, args.session_ms)


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.table_from:
        with open(args.table_from) as f:
            earlier = json.load(f)
        print(summary(earlier, earlier["systems"], earlier["labels"]))
        return 0
    if (what := available()) is not None:
        raise SystemExit(f"kafka_peers: {what} is not installed (apt-get install zookeeper default-jre-headless)")
    labels = {s: LABELS[s].format(v=kraft_version()) for s in SYSTEMS}
    if not (KAFKA_LIBS / f"kafka_2.13-{kraft_version()}.jar").exists():  # KRaft, and every load generator
        raise SystemExit("kafka_peers: Apache Kafka 4.x's jars are missing (make testdeps)")
    if "kafka39" in args.systems:
        fetch_kafka39()
    root = Path(args.dir).resolve() if args.dir else Path(tempfile.mkdtemp(prefix="kbroker-peers-"))
    root.mkdir(parents=True, exist_ok=True)

    def stop(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, stop)
    wait_for_ci()
    Path(BENCH_MARKER).touch()
    zookeeper = ZooKeeperServer(root / "zookeeper", own_session=True)
    results = {
        "cores": os.cpu_count(),
        "session_timeout_ms": args.session_ms,
        "systems": args.systems,
        "labels": labels,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load1_at_start": load1(),
        **{s: [] for s in args.systems},
        "failures": [],
    }
    try:
        zookeeper.start()
        print(
            f"ZooKeeper {zookeeper.connect} for kbroker and Kafka 3.9 (chroots /kbroker-rN, /kafka39-rN); "
            f"session {args.session_ms} ms; {os.cpu_count()} cores shared by the brokers and the load "
            f"generators; load {load1()}\n",
            flush=True,
        )
        for rnd in range(args.rounds):
            for system in args.systems:
                print(f"== round {rnd + 1}/{args.rounds}: {labels[system]}", flush=True)
                c = make_cluster(system, root, args, zookeeper, rnd)
                t0 = time.monotonic()
                try:
                    results[system].append(measure_cluster(c, args, rnd, labels[system]))
                except (
                    RuntimeError,
                    OSError,
                    AssertionError,
                    KafkaProtocolError,
                    ClientError,
                    subprocess.TimeoutExpired,
                ) as exc:
                    kind = "timeout" if isinstance(exc, MeasureTimeout) else type(exc).__name__
                    results["failures"].append({"system": system, "round": rnd, "error": f"{kind}: {exc}"[:2000]})
                    print(
                        f"  !! {labels[system]} round {rnd + 1} failed: {kind}: {str(exc)[:1500]}\n"
                        f"     (logs kept in {c.root})",
                        flush=True,
                    )
                finally:
                    c.close()
                print(f"   ({time.monotonic() - t0:.0f} s)\n", flush=True)
                if args.json:  # after each cluster: a cut-short run keeps its figures
                    write_json(args.json, results)
                if not args.dir and not any(f["system"] == system and f["round"] == rnd for f in results["failures"]):
                    shutil.rmtree(c.root, ignore_errors=True)
        table = summary(results, args.systems, labels)
        results["table"] = table
        print(table, flush=True)
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        zookeeper.stop()
        Path(BENCH_MARKER).unlink(missing_ok=True)
        if args.json:
            write_json(args.json, results)
        if not args.dir and not results["failures"]:
            shutil.rmtree(root, ignore_errors=True)
    return 1 if results["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""Measures a 3-broker cluster on this machine (issue 10, "Measure"): a ZooKeeper and
brokers 1..3 started as bench/cluster/run.py starts them, then, step by step:

  throughput  100-byte records to RF=3 topics (3 partitions, one leader per broker), acks=all
              with min.insync.replicas=2 and acks=1, with `broker perf produce` and with
              confluent-kafka; --runs runs of each, medians. For acks=1 also the time until
              the high watermarks (what the followers copied) reach the last record.
  latency     `broker perf produce --throughput 50000 --acks all`: p50 / p99 per run.
  leader      kill -9 the leader of a partition (never the controller) while a producer
              sends with acks=all: kill -> first produce acknowledged by another broker;
              then the same after SIGTERM (a controlled shutdown). The victim restarts and
              rejoins the ISR between trials.
  controller  kill -9 the controller: kill -> every survivor names a live controller;
              -> a new topic created through a survivor has a leader; -> every partition
              the victim led has another leader.
  rejoin      a follower (not the controller) stopped with SIGTERM, --lag-bytes produced
              with acks=all and min.insync.replicas=2, the follower started: start -> the
              leader's ISR has it again.
  profile     py-spy on the leader and on a follower of a 1-partition RF=3 topic during an
              acks=all `broker perf produce`: top frames by own and by total time.

    .venv/bin/python bench/cluster/measure.py                        # every step, ~15 min
    .venv/bin/python bench/cluster/measure.py --only leader,controller --trials 5
    .venv/bin/python bench/cluster/measure.py --session-ms 18000 --only leader
    .venv/bin/python bench/cluster/measure.py --json bench/results/cluster.json

Invariants:
- Every figure carries the 1-minute load average sampled right before it, and each step
  prints the exact commands it runs (`broker perf produce ...`), so a figure can be re-run
  by hand against `bench/cluster/run.py`.
- Brokers, ZooKeeper and the load generator share this machine's cores (printed first).
- Every wait is bounded (MeasureTimeout names what was awaited and the last answer); every
  trial starts from a whole cluster (3 brokers registered, full ISRs).
- The processes are run.py's (LocalBroker, ZooKeeperServer, each in a session of its own,
  dying with this script); at exit, whatever happened, the brokers are killed, ZooKeeper is
  stopped and the directory removed (kept with --dir or --keep, or when a step failed).
- What a broker says is asked over the wire (Metadata, ListOffsets, CreateTopics); ZooKeeper
  is read for one thing only: whether a killed broker's registration is gone, since a
  broker refuses to start while its id is registered.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from run import start_broker, stop_all  # noqa: E402  (bench/cluster/run.py)

from broker.client import BrokerConnection, ClientError, Cluster  # noqa: E402
from broker.native import BatchBuilder  # noqa: E402
from broker.perf.local import LocalBroker  # noqa: E402
from broker.perf.zookeeper import ZooKeeperServer, available  # noqa: E402
from broker.protocol.errors import ErrorCode, KafkaProtocolError  # noqa: E402
from broker.protocol.messages.metadata import MetadataRequest  # noqa: E402
from broker.protocol.messages.produce import ProduceRequest  # noqa: E402
from tests.support.cluster import ClusterTimeout as MeasureTimeout, poll_until  # noqa: E402
from tests.support.load import produce_n  # noqa: E402

STEPS = ("throughput", "latency", "leader", "controller", "rejoin", "profile")
BROKERS = 3
CHROOT = "kbroker"
RECORD_SIZE = 100
POLL_S = 0.01  # failover probes: a figure is late by at most this
REQUEST_TIMEOUT = 5.0  # one request to one broker
STEP_TIMEOUT = 600.0  # one produce run
CLK = os.sysconf("SC_CLK_TCK")
SPY_RATE = 100  # py-spy samples per second
#: frames every sample of a broker's main thread goes through (start-up and the event loop)
ROOT_FRAMES = (
    "<frozen runpy>",
    "broker/cli/main.py",
    "asyncio/runners.py",
    "asyncio/base_events.py",
    "asyncio/events.py",
    "(loop.py)",
)
SIGTERM_STOP_S = 60.0  # a broker sent SIGTERM has stopped by then (else: reported, killed)


def load1() -> float:
    return round(os.getloadavg()[0], 2)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (0 once it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            parts = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(parts[11]) + int(parts[12])) / CLK


def until(what: str, probe, timeout: float, interval: float = 0.05):
    """Calls probe() -> (done, value, seen) until done; a probe that raises counts as not
    done. Returns value; MeasureTimeout after timeout seconds."""
    return poll_until(what, probe, timeout, interval)


def median(values):
    return statistics.median(values) if values else None


def quote(cmd: list[str]) -> str:
    """A command line as a reader would type it: `broker ...` for the project's CLI."""
    if cmd[:3] == [sys.executable, "-m", "broker.cli.main"]:
        cmd = ["broker", *cmd[3:]]
    return " ".join(cmd)


# ---------------------------------------------------------------------------- the cluster


class BenchCluster:
    """ZooKeeper and brokers 1..n as run.py starts them, plus what the steps need: kill,
    SIGTERM, restart on the same port and data dir, and questions asked of live brokers."""

    chroot = CHROOT

    def __init__(self, root: str, session_ms: int, extra: dict[str, str], n: int = BROKERS):
        self.root = root
        self.session_ms = session_ms
        self.zookeeper = ZooKeeperServer(os.path.join(root, "zookeeper"), own_session=True)
        self.connect = f"{self.zookeeper.connect}/{self.chroot}"
        self.brokers: dict[int, LocalBroker] = {}
        for i in range(1, n + 1):
            data = os.path.join(root, f"broker-{i}")
            os.makedirs(data, exist_ok=True)
            config = {
                "broker.id": i,
                "zookeeper.connect": self.connect,
                "zookeeper.session.timeout.ms": session_ms,
                **extra,
            }
            self.brokers[i] = LocalBroker(
                config=config,
                data_dir=os.path.join(data, "data"),
                log_path=os.path.join(data, "broker.log"),
                own_session=True,
            )
        #: bound of waits that span a session expiry and a controller's work
        self.timeout = 2 * session_ms / 1000 + 30

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers.values())

    def running(self, i: int) -> bool:
        p = self.brokers[i].proc
        return p is not None and p.poll() is None

    def live(self) -> list[int]:
        return [i for i in self.brokers if self.running(i)]

    def pid(self, i: int) -> int:
        return self.brokers[i].pid

    def start(self) -> None:
        self.zookeeper.start()
        for i, b in self.brokers.items():
            start_broker(i, b)
        self.wait_whole()

    def close(self) -> None:
        stop_all(self.brokers, self.zookeeper)

    def kill(self, i: int) -> float:
        """SIGKILL; returns the monotonic time it was sent."""
        t = time.monotonic()
        self.brokers[i].proc.kill()
        self.brokers[i].proc.wait(10)
        return t

    def terminate(self, i: int) -> float:
        """SIGTERM (a controlled shutdown), not waited for; the time it was sent."""
        t = time.monotonic()
        self.brokers[i].proc.send_signal(signal.SIGTERM)
        return t

    def restart(self, i: int) -> float:
        """Starts a stopped broker on its port and data dir once its registration is gone;
        returns the monotonic time `broker serve` was started."""
        self.brokers[i].proc.wait(120)
        until(
            f"broker {i}'s registration gone",
            lambda: (i not in self.registered_in_zookeeper(), None, "registered"),
            self.timeout,
            interval=0.1,
        )
        t = time.monotonic()
        start_broker(i, self.brokers[i])
        return t

    # ------------------------------------------------------------------ questions

    def conn(self, i: int, timeout: float = REQUEST_TIMEOUT) -> BrokerConnection:
        return BrokerConnection("127.0.0.1", self.brokers[i].port, client_id="cluster-measure", timeout=timeout)

    def metadata(self, i: int, topics=()):
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=False,
        )
        with self.conn(i) as c:
            return c.request(req)

    def partitions(self, i: int, topic: str) -> dict[int, object]:
        """partition -> Metadata's partition entry, as broker i sees the topic."""
        t = self.metadata(i, [topic]).topics[0]
        return {p.partition_index: p for p in t.partitions} if t.error_code == 0 else {}

    def controller_id(self, i: int) -> int:
        return self.metadata(i).controller_id

    def registered_in_zookeeper(self) -> list[int]:
        from kazoo.client import KazooClient

        zk = KazooClient(hosts=self.zookeeper.connect, timeout=REQUEST_TIMEOUT)
        zk.start(timeout=REQUEST_TIMEOUT)
        try:
            path = f"/{self.chroot}/brokers/ids"
            return sorted(int(c) for c in zk.get_children(path)) if zk.exists(path) else []
        finally:
            zk.stop()
            zk.close()

    def admin(self) -> Cluster:
        return Cluster(
            ",".join(self.brokers[i].bootstrap for i in self.live()), client_id="cluster-measure", timeout=30
        )

    # ------------------------------------------------------------------ bounded waits

    def wait_whole(self) -> int:
        """Every broker runs, every one lists all of them and the same live controller;
        returns the controller id."""
        want = sorted(self.brokers)

        def view(i: int) -> tuple[list[int], int]:
            m = self.metadata(i)
            return sorted(b.node_id for b in m.brokers), m.controller_id

        def probe():
            seen = {i: view(i) for i in want}
            ctrls = {c for _, c in seen.values()}
            done = all(ids == want for ids, _ in seen.values()) and len(ctrls) == 1 and ctrls <= set(want)
            return done, ctrls.pop() if done else -1, f"(brokers, controller) {seen}"

        return until("every broker registered with one controller", probe, self.timeout)

    def wait_full_isr(self, topic: str) -> dict[int, object]:
        """Every partition of topic has a leader and all its replicas in the ISR, as every
        broker sees it; returns the partitions."""

        def probe():
            views = {i: self.partitions(i, topic) for i in self.brokers}
            ok = all(
                ps and all(p.leader_id >= 0 and sorted(p.isr_nodes) == sorted(p.replica_nodes) for p in ps.values())
                for ps in views.values()
            )
            first = views[min(views)]
            return (
                ok,
                first,
                {i: {k: (p.leader_id, list(p.isr_nodes)) for k, p in ps.items()} for i, ps in views.items()},
            )

        return until(f"{topic}: full ISRs everywhere", probe, self.timeout)

    def wait_in_isr(self, topic: str, leader: int, broker: int, present: bool, timeout: float | None = None) -> None:
        """Partition 0 of topic has (present) or has not `broker` in its ISR, as its leader says."""

        def probe():
            isr = list(self.partitions(leader, topic)[0].isr_nodes)
            return (broker in isr) == present, None, f"ISR {isr}"

        until(
            f"{topic}-0: broker {broker} {'in' if present else 'out of'} the ISR",
            probe,
            self.timeout if timeout is None else timeout,
            interval=0.02,
        )

    def wait_high_watermarks(self, topic: str, partitions: int, n: int) -> None:
        """The partitions' high watermarks add up to n (the ISR has every record)."""

        def probe():
            hw = self.high_watermarks(topic, partitions)
            return hw >= n, None, f"high watermarks {hw}"

        until(f"{topic}: high watermarks at {n}", probe, STEP_TIMEOUT, interval=0.01)

    def create_topic(self, topic: str, partitions: int, rf: int = BROKERS, configs: dict | None = None) -> dict:
        with self.admin() as a:
            a.create_topic(topic, partitions, rf, configs)
        return self.wait_full_isr(topic)

    def led_then_restored(self, created: str, survivors: list[int], victim: int, topic: str, t0: float) -> float:
        """After a controller failover: waits until the new topic `created` has a leader
        among `survivors` (returns the seconds since t0), then brings the victim back,
        waits for a whole cluster with `topic`'s ISRs full, and deletes `created`."""

        def has_leader():
            p = self.partitions(survivors[0], created).get(0)
            return p is not None and p.leader_id in survivors, None, f"leader {p and p.leader_id}"

        until(f"{created} has a leader", has_leader, self.timeout, interval=POLL_S)
        took = round(time.monotonic() - t0, 3)
        self.restart(victim)
        self.wait_whole()
        self.wait_full_isr(topic)
        self.delete_topic(created)
        return took

    def delete_topic(self, topic: str) -> None:
        """Deletes it and waits until no broker has its files any more (their removal in
        the brokers' background threads would otherwise run into the next figure)."""
        with self.admin() as a:
            a.delete_topic(topic)

        mine = re.compile(rf"{re.escape(topic)}-\d+(\.\w+-delete)?$")  # topic-3, topic-3.<id>-delete

        def probe():
            left = [
                f"broker-{i}/{d}"
                for i, b in self.brokers.items()
                if os.path.isdir(b.data_dir)
                for d in os.listdir(b.data_dir)
                if mine.match(d)
            ]
            return not left, None, f"left: {left}"

        until(f"{topic}'s files removed", probe, STEP_TIMEOUT, interval=0.1)

    def high_watermarks(self, topic: str, partitions) -> int:
        """The sum of the high watermarks (ListOffsets latest at the leaders) of partitions
        0..partitions-1, or of the listed ones."""
        wanted = list(range(partitions)) if isinstance(partitions, int) else list(partitions)
        with self.admin() as a:
            return sum(off for off, _ in a.list_offsets(topic, wanted, -1).values())

    def spread_leaders(self) -> None:
        """Preferred leaders back (each broker leads its share again)."""
        with self.admin() as a:
            a.elect_leaders("preferred", None)


# ---------------------------------------------------------------------------- load generators


def perf_produce_cmd(bootstrap: str, topic: str, n: int, acks: str, batch_size: int, extra=()) -> list[str]:
    return [
        sys.executable,
        "-m",
        "broker.cli.main",
        "perf",
        "produce",
        "-b",
        bootstrap,
        "--topic",
        topic,
        "--num-records",
        str(n),
        "--record-size",
        str(RECORD_SIZE),
        "--acks",
        acks,
        "--batch-size",
        str(batch_size),
        *extra,
        "--json",
    ]


def run_perf(cmd: list[str]) -> dict:
    """Runs `broker perf produce ... --json`; its summary. RuntimeError with its last line
    when it fails."""
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=STEP_TIMEOUT + 60, check=False)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        last = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()[-1]
        raise RuntimeError(f"{quote(cmd)}: exit {out.returncode}: {last}")
    return json.loads(lines[-1])


def confluent_conf(bootstrap: str, acks: str) -> dict:
    """The project's confluent-kafka throughput settings (bench/e2e_clients.py), with acks."""
    return {
        "bootstrap.servers": bootstrap,
        "acks": acks,
        "linger.ms": 5,
        "batch.size": 1 << 20,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2 << 20,
        "compression.type": "none",
    }


def confluent_produce(conf: dict, topic: str, n: int) -> float:
    """Produces n records round-robin over the topic's partitions; the seconds it took
    until every one was acknowledged."""
    import confluent_kafka as ck

    value = os.urandom(RECORD_SIZE // 2).hex().encode()[:RECORD_SIZE]
    errors = []

    def on_delivery(err, msg):
        if err is not None and len(errors) < 5:
            errors.append(str(err))

    p = ck.Producer({**conf, "on_delivery": on_delivery})
    p.list_topics(topic, timeout=10)
    t0 = time.perf_counter()
    produce_n(p, topic, value, n)
    left = p.flush(STEP_TIMEOUT)
    elapsed = time.perf_counter() - t0
    if left or errors:
        raise RuntimeError(f"confluent-kafka: {left} records not delivered; errors: {errors}")
    return elapsed


class AcksAllProducer(threading.Thread):
    """Sends one acks=all request of `per_request` records at a time to one partition,
    following its leader: after any error it asks a live broker for the leader again every
    POLL_S. Records (monotonic time of the answer, broker) of every acknowledged request and
    the records acknowledged in all."""

    def __init__(self, cluster: BenchCluster, topic: str, partition: int, per_request: int = 10):
        super().__init__(daemon=True)
        self.cluster = cluster
        self.topic = topic
        self.partition = partition
        self.per_request = per_request
        self.acks: list[tuple[float, int]] = []
        self.acked_records = 0
        self.errors = collections.Counter()
        self.events: list[tuple[float, int, str]] = []  # (monotonic time, broker, error)
        self._stop_event = threading.Event()

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)

    def first_ack_after(self, t: float, not_from: int) -> float | None:
        return next((at for at, broker in list(self.acks) if at > t and broker != not_from), None)

    def _leader(self) -> int:
        for i in self.cluster.live():
            try:
                p = self.cluster.partitions(i, self.topic).get(self.partition)
                if p is not None and p.leader_id >= 0:
                    return p.leader_id
            except (ClientError, OSError):
                continue
        return -1

    def _request(self, builder: BatchBuilder, value: bytes) -> ProduceRequest:
        builder.reset()
        builder.append_repeated(value, self.per_request, int(time.time() * 1000))
        P = ProduceRequest
        return P(
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                P.TopicProduceData(
                    name=self.topic,
                    partition_data=[P.PartitionProduceData(index=self.partition, records=builder.build())],
                )
            ],
        )

    def run(self) -> None:
        builder = BatchBuilder(None)
        value = b"x" * RECORD_SIZE
        conn, leader = None, -1
        while not self._stop_event.is_set():
            try:
                if conn is None:
                    leader = self._leader()
                    if leader < 0:
                        raise ClientError("no leader")
                    conn = self.cluster.conn(leader, timeout=30)
                r = conn.request(self._request(builder, value)).responses[0].partition_responses[0]
                if r.error_code:
                    raise KafkaProtocolError(r.error_code)
                self.acks.append((time.monotonic(), leader))
                self.acked_records += self.per_request
            except (ClientError, KafkaProtocolError, OSError) as exc:
                name = ErrorCode(exc.code).name if isinstance(exc, KafkaProtocolError) else type(exc).__name__
                self.errors[name] += 1
                self.events.append((time.monotonic(), leader, f"{name}: {exc}"[:120]))
                if conn is not None:
                    conn.close()
                conn = None
                time.sleep(POLL_S)
        if conn is not None:
            conn.close()


# ---------------------------------------------------------------------------- steps


THROUGHPUT_MODES = (("all", {"min.insync.replicas": "2"}), ("1", {"min.insync.replicas": "2"}))


def throughput_run(c: BenchCluster, args, tool: str, acks: str, configs: dict, run: int) -> dict:
    """One produce run to a fresh RF=3 topic, deleted afterwards."""
    topic = f"tput-{tool}-acks{acks}-{run}"
    c.create_topic(topic, args.partitions, BROKERS, configs)
    n = args.messages if tool == "perf" else args.confluent_messages
    row = {"tool": tool, "acks": acks, "run": run, "records": n, "load1": load1()}
    cpu0 = {i: cpu_seconds(c.pid(i)) for i in c.brokers}
    if tool == "perf":
        cmd = perf_produce_cmd(c.bootstrap, topic, n, acks, args.batch_size)
        row["command"] = quote(cmd)
        s = run_perf(cmd)
        row.update(elapsed_s=s["elapsed_s"], p50_ms=s["p50_ms"], p99_ms=s["p99_ms"])
    else:
        conf = confluent_conf(c.bootstrap, acks)
        row["command"] = f"confluent-kafka Producer({conf})"
        row["elapsed_s"] = round(confluent_produce(conf, topic, n), 3)
    t_end = time.monotonic()
    row["msgs_per_s"] = round(n / row["elapsed_s"])
    # what the followers copied: the high watermarks reach the end; the time that took
    # after the producer's last acknowledgement adds to its elapsed time
    c.wait_high_watermarks(topic, args.partitions, n)
    row["replicated_after_s"] = round(time.monotonic() - t_end, 3)
    busy = row["elapsed_s"] + row["replicated_after_s"]
    row["replicated_msgs_per_s"] = round(n / busy)
    row["broker_cpu_pct"] = {i: round(100 * (cpu_seconds(c.pid(i)) - cpu0[i]) / busy) for i in c.brokers}
    c.delete_topic(topic)
    return row


def step_throughput(c: BenchCluster, args) -> dict:
    rows = []
    for run in range(args.runs):
        for acks, configs in THROUGHPUT_MODES:
            for tool in ("perf", "confluent"):
                row = throughput_run(c, args, tool, acks, configs, run)
                rows.append(row)
                print(
                    f"  {tool:9} acks={acks:3} run {run}: {row['msgs_per_s']:>10,} msg/s "
                    f"(replicated {row['replicated_msgs_per_s']:,}), brokers CPU {row['broker_cpu_pct']}, "
                    f"load {row['load1']}",
                    flush=True,
                )
    summary = {}
    for acks, _ in THROUGHPUT_MODES:
        for tool in ("perf", "confluent"):
            rs = [r for r in rows if r["acks"] == acks and r["tool"] == tool]
            summary[f"{tool} acks={acks}"] = {
                "median_msgs_per_s": median([r["msgs_per_s"] for r in rs]),
                "min": min(r["msgs_per_s"] for r in rs),
                "max": max(r["msgs_per_s"] for r in rs),
                "median_replicated_msgs_per_s": median([r["replicated_msgs_per_s"] for r in rs]),
                "load1": [r["load1"] for r in rs],
                "command": rs[0]["command"],
            }
    return {"runs": rows, "summary": summary}


def step_latency(c: BenchCluster, args) -> dict:
    """acks=all at a fixed rate; acks=1 the same way, to tell replication from this
    machine's scheduling noise."""
    topic = "latency"
    c.create_topic(topic, args.partitions, BROKERS, {"min.insync.replicas": "2"})
    rows = []
    for run in range(args.runs):
        for acks in ("all", "1"):
            cmd = perf_produce_cmd(
                c.bootstrap,
                topic,
                int(args.latency_rate * args.latency_s),
                acks,
                16384,
                ["--throughput", str(args.latency_rate), "--linger-ms", str(args.linger_ms)],
            )
            row = {"run": run, "acks": acks, "load1": load1(), "command": quote(cmd)}
            s = run_perf(cmd)
            row.update({k: s[k] for k in ("records_per_sec", "p50_ms", "p95_ms", "p99_ms", "p999_ms", "max_ms")})
            rows.append(row)
            print(
                f"  acks={acks:3} run {run}: {s['records_per_sec']:,.0f} msg/s, p50 {s['p50_ms']} ms, "
                f"p99 {s['p99_ms']} ms, p99.9 {s['p999_ms']} ms, max {s['max_ms']} ms, load {row['load1']}",
                flush=True,
            )
    c.delete_topic(topic)
    out = {"runs": rows}
    for acks in ("all", "1"):
        rs = [r for r in rows if r["acks"] == acks]
        out[f"acks={acks}"] = {
            "median_p50_ms": median([r["p50_ms"] for r in rs]),
            "median_p99_ms": median([r["p99_ms"] for r in rs]),
            "command": rs[0]["command"],
        }
    return out


def failover_trial(c: BenchCluster, topic: str, how: str, acked: collections.Counter) -> dict:
    """One leader failover: a partition whose leader is not the controller, a producer on
    it, the leader killed (or SIGTERMed); restarts the victim and waits for full ISRs."""
    c.spread_leaders()
    parts = c.wait_full_isr(topic)
    controller = c.wait_whole()
    index, p = next((k, p) for k, p in sorted(parts.items()) if p.leader_id != controller)
    victim = p.leader_id
    producer = AcksAllProducer(c, topic, index)
    producer.start()
    until("the producer's first acks", lambda: (len(producer.acks) >= 20, None, f"{len(producer.acks)} acks"), 30)
    row = {"how": how, "victim": victim, "controller": controller, "partition": index, "load1": load1()}
    t = c.kill(victim) if how == "kill -9" else c.terminate(victim)
    first = until(
        f"an ack from a broker other than {victim}",
        lambda: ((at := producer.first_ack_after(t, victim)) is not None, at, f"{len(producer.acks)} acks"),
        c.timeout,
        interval=POLL_S,
    )
    row["failover_s"] = round(first - t, 3)
    row["last_ack_from_victim_s"] = round(max((at - t for at, b in list(producer.acks) if b == victim), default=0), 3)
    row["first_errors"] = [(round(at - t, 3), b, what) for at, b, what in producer.events if at > t][:3]
    time.sleep(0.5)  # a few more acks from the new leader
    producer.stop()
    row["new_leader"] = producer.acks[-1][1]
    row["errors"] = dict(producer.errors)
    if how == "SIGTERM":
        try:
            row["exit_code"] = c.brokers[victim].proc.wait(SIGTERM_STOP_S)
        except subprocess.TimeoutExpired:
            row["exit_code"] = "hung"
            print(
                f"  !! broker {victim} still running {SIGTERM_STOP_S:.0f} s after SIGTERM: killed -9 "
                f"(log {c.brokers[victim].log_path})",
                flush=True,
            )
            c.kill(victim)
        row["stopped_after_s"] = round(time.monotonic() - t, 3)
    # a cheap durability check: the partition's high watermark covers at least every record
    # acknowledged on it so far (unacknowledged retries may add more, never fewer)
    acked[index] += producer.acked_records
    hw = until("the high watermark", lambda: (True, c.high_watermarks(topic, [index]), ""), 30)
    row["acked_records"], row["high_watermark"] = acked[index], hw
    row["acked_lost"] = hw < acked[index]
    c.restart(victim)
    c.wait_whole()
    c.wait_full_isr(topic)
    return row


def step_leader(c: BenchCluster, args) -> dict:
    topic = "failover"
    c.create_topic(topic, BROKERS, BROKERS, {"min.insync.replicas": "2"})
    rows = []
    acked = collections.Counter()  # partition -> records acknowledged on it
    for how in ("kill -9", "SIGTERM"):
        for trial in range(args.trials):
            row = failover_trial(c, topic, how, acked)
            row["trial"] = trial
            rows.append(row)
            print(
                f"  {how:7} leader {row['victim']} (controller {row['controller']}): first ack from "
                f"{row['new_leader']} after {row['failover_s']:.3f} s (last from {row['victim']} at "
                f"{row['last_ack_from_victim_s']:.3f} s); producer errors {row['errors']}, first "
                f"{row['first_errors']}; load {row['load1']}",
                flush=True,
            )
            if row["acked_lost"]:
                print(
                    f"  !! acknowledged records missing: high watermark {row['high_watermark']} < "
                    f"{row['acked_records']} acknowledged",
                    flush=True,
                )
    c.delete_topic(topic)
    return {
        "session_timeout_ms": c.session_ms,
        "trials": rows,
        "median_kill_s": median([r["failover_s"] for r in rows if r["how"] == "kill -9"]),
        "median_sigterm_s": median([r["failover_s"] for r in rows if r["how"] == "SIGTERM"]),
    }


def controller_trial(c: BenchCluster, topic: str, trial: int) -> dict:
    c.spread_leaders()
    parts = c.wait_full_isr(topic)
    victim = c.wait_whole()
    led = sorted(k for k, p in parts.items() if p.leader_id == victim)
    survivors = [i for i in c.brokers if i != victim]
    row = {"victim": victim, "victim_led": led, "load1": load1(), "trial": trial}
    t = c.kill(victim)

    def new_controller():
        ids = {i: c.controller_id(i) for i in survivors}
        found = set(ids.values())
        return len(found) == 1 and found <= set(survivors), found.pop() if len(found) == 1 else -1, f"{ids}"

    row["new_controller"] = until("a new controller", new_controller, c.timeout, interval=POLL_S)
    row["controller_s"] = round(time.monotonic() - t, 3)

    def victim_partitions_led():
        ps = {i: c.partitions(i, topic) for i in survivors}
        done = all(ps[i][k].leader_id in survivors for i in survivors for k in led)
        return done, None, f"{ {i: {k: ps[i][k].leader_id for k in led} for i in survivors} }"

    until("the victim's partitions re-led", victim_partitions_led, c.timeout, interval=POLL_S)
    row["reelected_s"] = round(time.monotonic() - t, 3)
    created = f"ctrl-new-{trial}"
    with Cluster(c.brokers[survivors[0]].bootstrap, client_id="cluster-measure", timeout=30) as a:
        a.create_topic(created, 1, 2)

    row["created_s"] = c.led_then_restored(created, survivors, victim, topic, t)
    return row


def step_controller(c: BenchCluster, args) -> dict:
    topic = "controller"
    c.create_topic(topic, 6, BROKERS, {"min.insync.replicas": "2"})
    rows = []
    for trial in range(args.trials):
        row = controller_trial(c, topic, trial)
        rows.append(row)
        print(
            f"  kill -9 controller {row['victim']}: broker {row['new_controller']} controller after "
            f"{row['controller_s']:.3f} s, its partitions {row['victim_led']} re-led after {row['reelected_s']:.3f} s, "
            f"a new topic led after {row['created_s']:.3f} s; load {row['load1']}",
            flush=True,
        )
    c.delete_topic(topic)
    return {
        "session_timeout_ms": c.session_ms,
        "trials": rows,
        "median_controller_s": median([r["controller_s"] for r in rows]),
        "median_reelected_s": median([r["reelected_s"] for r in rows]),
        "median_created_s": median([r["created_s"] for r in rows]),
    }


def step_rejoin(c: BenchCluster, args) -> dict:
    rows = []
    n = args.lag_bytes // RECORD_SIZE
    for trial in range(args.rejoin_trials):
        topic = f"rejoin-{trial}"
        parts = c.create_topic(topic, 1, BROKERS, {"min.insync.replicas": "2"})
        controller = c.wait_whole()
        leader = parts[0].leader_id
        follower = next(i for i in parts[0].replica_nodes if i not in (leader, controller))
        row = {"trial": trial, "leader": leader, "follower": follower, "records": n}
        c.terminate(follower)
        c.brokers[follower].proc.wait(120)
        c.wait_in_isr(topic, leader, follower, False)
        cmd = perf_produce_cmd(c.bootstrap, topic, n, "all", args.batch_size)
        row["command"] = quote(cmd)
        row["produce_msgs_per_s"] = run_perf(cmd)["records_per_sec"]
        row["load1"] = load1()
        t = c.restart(follower)
        row["ready_s"] = round(time.monotonic() - t, 3)
        c.wait_in_isr(topic, leader, follower, True, STEP_TIMEOUT)
        row["rejoin_s"] = round(time.monotonic() - t, 3)
        row["catch_up_mb_per_s"] = round(args.lag_bytes / 1e6 / max(row["rejoin_s"] - row["ready_s"], 1e-3))
        rows.append(row)
        print(
            f"  follower {follower} of leader {leader}: {args.lag_bytes / 1e9:.1f} GB behind, answers "
            f"{row['ready_s']:.2f} s after start, in the ISR after {row['rejoin_s']:.2f} s "
            f"({row['catch_up_mb_per_s']} MB/s); load {row['load1']}",
            flush=True,
        )
        c.delete_topic(topic)
    return {"trials": rows, "median_rejoin_s": median([r["rejoin_s"] for r in rows])}


def collapse(raw_path: str) -> tuple[collections.Counter, collections.Counter, int, int]:
    """py-spy's raw stacks (recorded with --threads) -> (own samples per function, total
    samples per function, samples) of the main thread — the event loop, where a broker
    does its work — and the samples of every other thread. Line numbers are dropped, so
    a function is one entry."""
    own, total, samples, others = collections.Counter(), collections.Counter(), 0, 0
    with open(raw_path) as f:
        for line in f:
            stack, _, count = line.rstrip().rpartition(" ")
            if not count.isdigit():
                continue
            thread, *frames = stack.split(";")
            if not thread.endswith("MainThread"):
                others += int(count)
                continue
            frames = [re.sub(r":\d+\)$", ")", fr) for fr in frames]
            if not frames:
                continue
            own[frames[-1]] += int(count)
            for fr in set(frames):
                total[fr] += int(count)
            samples += int(count)
    return own, total, samples, others


def step_profile(c: BenchCluster, args) -> dict:
    if shutil.which("py-spy") is None and not os.path.exists(os.path.join(os.path.dirname(sys.executable), "py-spy")):
        raise RuntimeError("py-spy is not installed (pip install -e '.[test]')")
    spy_bin = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
    topic = "profile"
    parts = c.create_topic(topic, 1, BROKERS, {"min.insync.replicas": "2"})
    leader = parts[0].leader_id
    follower = next(i for i in parts[0].replica_nodes if i != leader)
    out = {"leader": leader, "follower": follower}
    raws = {role: os.path.join(c.root, f"profile-{role}.raw") for role in ("leader", "follower")}
    spies = {
        role: subprocess.Popen(
            [
                spy_bin,
                "record",
                "--pid",
                str(c.pid(b)),
                "--format",
                "raw",
                "--output",
                raws[role],
                "--rate",
                str(SPY_RATE),
                "--threads",
                "--nonblocking",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for role, b in (("leader", leader), ("follower", follower))
    }
    try:
        time.sleep(1)  # py-spy attached
        cmd = perf_produce_cmd(c.bootstrap, topic, args.messages, "all", args.batch_size)
        out["command"] = quote(cmd)
        out["load1"] = load1()
        cpu0 = {i: cpu_seconds(c.pid(i)) for i in c.brokers}
        t0 = time.monotonic()
        out["perf"] = run_perf(cmd)
        el = time.monotonic() - t0
        out["broker_cpu_pct"] = {i: round(100 * (cpu_seconds(c.pid(i)) - cpu0[i]) / el) for i in c.brokers}
    finally:
        for spy in spies.values():
            spy.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        for spy in spies.values():
            try:
                spy.wait(60)
            except subprocess.TimeoutExpired:
                spy.kill()
                spy.wait(10)
    run_s = out["perf"]["elapsed_s"]  # the main threads are idle outside the run
    print(
        f"  `{out['command']}` with py-spy on leader {leader} and follower {follower}: "
        f"{out['perf']['records_per_sec']:,.0f} msg/s, brokers CPU {out['broker_cpu_pct']}",
        flush=True,
    )
    for role, raw in raws.items():
        if not os.path.exists(raw):
            print(f"  no py-spy output for the {role}", flush=True)
            continue
        own, total, samples, others = collapse(raw)
        if not samples:
            print(f"  no py-spy samples of the {role}'s main thread", flush=True)
            continue
        ours = collections.Counter({fr: n for fr, n in total.items() if not any(r in fr for r in ROOT_FRAMES)})
        out[role] = {
            "samples": samples,
            "other_threads_samples": others,
            "busy_pct": round(100 * samples / (SPY_RATE * run_s)),
            "own": [(round(100 * n / samples, 1), fr) for fr, n in own.most_common(args.top)],
            "total": [(round(100 * n / samples, 1), fr) for fr, n in ours.most_common(args.top)],
        }
        print(
            f"\n  {role} (broker {leader if role == 'leader' else follower}): main thread busy "
            f"{out[role]['busy_pct']}% of the {run_s:.1f} s run ({samples} samples; other threads {others}); "
            f"own time:",
            flush=True,
        )
        for pct, fr in out[role]["own"]:
            print(f"    {pct:5.1f}%  {fr}")
        print("  total time (the function and what it calls), below the event loop:")
        for pct, fr in out[role]["total"]:
            print(f"    {pct:5.1f}%  {fr}")
    c.delete_topic(topic)
    return out


RUNNERS = {
    "throughput": step_throughput,
    "latency": step_latency,
    "leader": step_leader,
    "controller": step_controller,
    "rejoin": step_rejoin,
    "profile": step_profile,
}


# ---------------------------------------------------------------------------- main


def parse_args(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Measure a 3-broker kbroker cluster on this machine (issue 10).")
    p.add_argument("--only", default=",".join(STEPS), help=f"comma-separated steps (default all: {','.join(STEPS)})")
    p.add_argument("--session-ms", type=int, default=6000, help="zookeeper.session.timeout.ms (default 6000)")
    p.add_argument("--runs", type=int, default=3, help="throughput and latency runs (default 3)")
    p.add_argument("--trials", type=int, default=3, help="leader and controller failover trials (default 3)")
    p.add_argument("--rejoin-trials", type=int, default=2, help="follower rejoin trials (default 2)")
    p.add_argument("--messages", type=int, default=5_000_000, help="records per `broker perf` run (default 5M)")
    p.add_argument("--confluent-messages", type=int, default=1_000_000, help="records per confluent-kafka run")
    p.add_argument("--partitions", type=int, default=3, help="partitions of the throughput topics (default 3)")
    p.add_argument("--batch-size", type=int, default=1 << 20, help="`broker perf` batch bytes (default 1 MiB)")
    p.add_argument("--latency-rate", type=int, default=50_000, help="msg/s of the latency runs (default 50000)")
    p.add_argument("--latency-s", type=int, default=30, help="seconds per latency run (default 30)")
    p.add_argument("--linger-ms", type=float, default=1.0, help="linger of the latency runs (default 1)")
    p.add_argument("--lag-bytes", type=int, default=1_000_000_000, help="follower lag to catch up (default 1 GB)")
    p.add_argument("--top", type=int, default=15, help="frames per py-spy table")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a broker key for every broker")
    p.add_argument("--dir", help="data dirs and logs here, kept (default: a temporary dir, removed)")
    p.add_argument("--keep", action="store_true", help="keep the temporary dir")
    p.add_argument("--json", metavar="PATH", help="write every figure here as JSON")
    args = p.parse_args(argv)
    args.steps = [s.strip() for s in args.only.split(",") if s.strip()]
    unknown = [s for s in args.steps if s not in STEPS]
    if unknown:
        p.error(f"--only: unknown step(s) {unknown}; steps: {', '.join(STEPS)}")
    for item in args.set:
        if "=" not in item:
            p.error(f"--set {item!r}: expected KEY=VALUE")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if (what := available()) is not None:
        raise SystemExit(f"measure: {what} is not installed (apt-get install zookeeper default-jre-headless)")
    if "throughput" in args.steps:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError:
            raise SystemExit("measure: confluent-kafka is not installed (pip install -e '.[test]')") from None
    root = os.path.abspath(args.dir) if args.dir else tempfile.mkdtemp(prefix="kbroker-measure-")
    os.makedirs(root, exist_ok=True)
    c = BenchCluster(root, args.session_ms, dict(item.split("=", 1) for item in args.set))
    results = {
        "cores": os.cpu_count(),
        "brokers": BROKERS,
        "session_timeout_ms": args.session_ms,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "load1_at_start": load1(),
    }
    failed = False
    try:
        c.start()
        print(
            f"ZooKeeper {c.connect} and {BROKERS} brokers ({c.bootstrap}) on {os.cpu_count()} cores shared "
            f"with the load generator; zookeeper.session.timeout.ms={args.session_ms}; load {load1()}\n",
            flush=True,
        )
        for step in args.steps:
            print(f"== {step}", flush=True)
            t0 = time.monotonic()
            results[step] = RUNNERS[step](c, args)
            print(f"   ({time.monotonic() - t0:.0f} s)\n", flush=True)
    except (RuntimeError, OSError, MeasureTimeout, KafkaProtocolError, ClientError, subprocess.TimeoutExpired) as exc:
        failed = True
        print(f"measure: {type(exc).__name__}: {exc}\n(logs kept in {root})", file=sys.stderr, flush=True)
    except BaseException:
        failed = True
        print(f"(logs kept in {root})", file=sys.stderr, flush=True)
        raise
    finally:
        for signum in (signal.SIGINT, signal.SIGTERM):
            signal.signal(signum, signal.SIG_IGN)
        c.close()
        if args.json:
            with open(args.json, "w") as f:
                json.dump(results, f, indent=1, default=str)
        if not (args.dir or args.keep or failed):
            shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

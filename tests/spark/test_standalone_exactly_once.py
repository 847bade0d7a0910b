"""Test 5 of issue 17: Spark exactly-once on a standalone Spark cluster (a master and two
workers started with PySpark's own bin/spark-class on loopback) against a 3-broker
kbroker cluster. A streaming query copies a topic with the kbroker sink
(deliveryGuarantee=exactly-once); its driver is killed -9 and restarted from the
checkpoint, then an executor is killed -9, then a kbroker broker; the output read with
read_committed holds every input record exactly once. Bounded in time; prints its seed."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from broker.client import Cluster as Client
from tests.support.cluster import Cluster
from tests.support.deps import missing, require_binary, require_module
from tests.support.ports import free_port
from tests.support.zookeeper import available
from tests.txn.test_single_broker import read as read_isolated

pytestmark = pytest.mark.slow

RECORDS = 2400
PARTITIONS = 3
PER_TRIGGER = 200
ROOT = Path(__file__).resolve().parents[2]
# six JVMs (ZooKeeper, master, two workers, their executors) and a driver on two cores:
# generous bounds, still bounded
DEADLINE_S = 780


_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []


def _spark_class() -> str:
    pyspark = require_module("pyspark")
    return str(Path(pyspark.__file__).parent / "bin" / "spark-class")


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        return []
    return out


def _descendants(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        for c in _children(todo.pop()):
            found.append(c)
            todo.append(c)
    return found


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


class Standalone:
    """A Spark master and two workers (1 core each), their logs in `directory`."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.port = free_port()
        self.env = {
            **os.environ,
            "SPARK_LOCAL_IP": "127.0.0.1",
            "PYSPARK_PYTHON": sys.executable,
            "SPARK_LOG_DIR": str(directory),
            "SPARK_NO_DAEMONIZE": "1",
        }
        self.procs: list[subprocess.Popen] = []
        self.workers: list[subprocess.Popen] = []

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _start(self, name: str, *args: str, env: dict | None = None) -> subprocess.Popen:
        out = open(self.dir / f"{name}.log", "wb")
        # spark-class execs the JVM: it dies with this test's process, whatever happens
        p = subprocess.Popen(
            [*_DIE_WITH_PARENT, _spark_class(), *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env or self.env,
            cwd=self.dir,
        )
        self.procs.append(p)
        return p

    def start(self) -> Standalone:
        self._start(
            "master",
            "org.apache.spark.deploy.master.Master",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--webui-port",
            str(free_port()),
        )
        for i in range(2):
            work = self.dir / f"worker-{i}"
            work.mkdir(exist_ok=True)
            self.workers.append(
                self._start(
                    f"worker-{i}",
                    "org.apache.spark.deploy.worker.Worker",
                    "--host",
                    "127.0.0.1",
                    "--cores",
                    "1",
                    "--memory",
                    "1g",
                    "--webui-port",
                    str(free_port()),
                    "--work-dir",
                    str(work),
                    self.master,
                )
            )
        return self

    def executors(self) -> list[int]:
        return [
            pid for w in self.workers for pid in _descendants(w.pid) if "CoarseGrainedExecutorBackend" in _cmdline(pid)
        ]

    def close(self) -> None:
        for p in self.procs:
            for pid in _descendants(p.pid):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            p.kill()
            p.wait(30)


@pytest.mark.timeout(DEADLINE_S + 120)
def test_spark_exactly_once_on_a_standalone_cluster_through_kills(tmp_path):
    require_binary("java", "openjdk-17-jre-headless")
    what = available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless")
    seed = int(os.environ.get("TXN_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (TXN_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    ck = require_module("confluent_kafka")
    deadline = time.monotonic() + DEADLINE_S
    with Cluster(
        tmp_path / "kbroker",
        n=3,
        config={
            "zookeeper.session.timeout.ms": 6000,
            "replica.lag.time.max.ms": 3000,
            "default.replication.factor": 3,
            "offsets.topic.replication.factor": 3,
            "transaction.state.log.num.partitions": 5,
            "min.insync.replicas": 2,
        },
    ) as kb:
        with Client(kb.bootstrap) as c:
            c.create_topic("in", PARTITIONS, 3)
            c.create_topic("out", PARTITIONS, 3)
        p = ck.Producer({"bootstrap.servers": kb.bootstrap, "enable.idempotence": True, "linger.ms": 20})
        for i in range(RECORDS):
            p.produce("in", b"%06d" % i, key=b"k%d" % (i % 17), partition=i % PARTITIONS)
        assert p.flush(60) == 0
        sa = Standalone(tmp_path).start()
        driver_cmd = [
            sys.executable,
            "-m",
            "tests.spark.eos_driver",
            sa.master,
            kb.bootstrap,
            "in",
            "out",
            str(tmp_path / "checkpoint"),
            str(PER_TRIGGER),
        ]
        driver_env = {**os.environ, "PYSPARK_PYTHON": sys.executable, "SPARK_LOCAL_IP": "127.0.0.1"}
        logs = []

        def start_driver():
            out = open(tmp_path / f"driver-{len(logs)}.log", "wb")
            logs.append(out.name)
            return subprocess.Popen(
                [*_DIE_WITH_PARENT, *driver_cmd], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, env=driver_env
            )

        def committed_progress() -> int:
            with Client(kb.bootstrap) as c:
                return sum(off for off, _ in c.list_offsets("out", list(range(PARTITIONS)), -1, 1).values())

        def wait_progress(at_least: int, what: str) -> None:
            while True:
                try:
                    if committed_progress() >= at_least:
                        return
                except Exception:
                    pass
                assert time.monotonic() < deadline, (
                    f"{what}: no progress to {at_least}; driver log "
                    f"{Path(logs[-1]).read_text(errors='replace')[-3000:]}"
                )
                time.sleep(0.5)

        driver = start_driver()
        try:
            wait_progress(RECORDS // 5, "before the driver kill")
            time.sleep(rng.uniform(0, 1.5))
            driver.send_signal(signal.SIGKILL)
            driver.wait(30)
            driver = start_driver()  # from the checkpoint
            wait_progress(RECORDS * 2 // 5, "before the executor kill")
            time.sleep(rng.uniform(0, 1.0))
            kill_deadline = time.monotonic() + 60
            while True:
                # listed again each round: an executor of the killed driver's application
                # can be on its way out when listed (its worker stops it), gone when killed
                executors = sa.executors()
                if executors:
                    try:
                        os.kill(rng.choice(executors), signal.SIGKILL)
                        break
                    except ProcessLookupError:
                        pass
                assert time.monotonic() < kill_deadline, "no executor process found under the workers"
                time.sleep(0.2)
            wait_progress(RECORDS * 3 // 5, "before the broker kill")
            victim = rng.choice(kb.ids)
            kb.kill(victim)
            wait_progress(RECORDS * 4 // 5, "after the broker kill")
            kb.start(victim)
            while True:
                got = read_isolated(kb.bootstrap, "out", PARTITIONS, "read_committed", deadline_s=60)
                if len(got) >= RECORDS:
                    break
                assert time.monotonic() < deadline, (
                    f"only {len(got)} of {RECORDS} copies committed; driver "
                    f"log {Path(logs[-1]).read_text(errors='replace')[-3000:]}"
                )
                time.sleep(2)
        finally:
            driver.send_signal(signal.SIGTERM)
            try:
                driver.wait(60)
            except subprocess.TimeoutExpired:
                driver.kill()
            sa.close()
        counts = Counter(got)
        dupes = [v for v, n in counts.items() if n > 1]
        assert not dupes, f"{len(dupes)} records copied more than once, e.g. {dupes[:3]}"
        assert set(counts) == {b"copy-%06d" % i for i in range(RECORDS)}

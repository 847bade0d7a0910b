"""A real Spark standalone cluster on loopback: a master and N workers started with
PySpark's own launcher script (bin/spark-class, installed by the pyspark package as
.venv/bin/spark-class), as docs/pipelines.md starts them.

    with SparkStandalone(tmp_path, workers=2) as s:
        s.master_url            # "spark://127.0.0.1:PORT"
        s.env                   # SPARK_LOCAL_IP, PYSPARK_PYTHON ... for a driver process

Each process gets SPARK_LOCAL_IP=127.0.0.1 (Spark binds to a non-loopback address
otherwise) and PYSPARK_PYTHON (this Python), its own free ports (master, web UIs), logs
and work directory under DIR. Workers take --cores 1 each. The pipeline tests start it
from docs/pipelines.md's own command lines (tests/pipelines/conftest.py). The cluster is ready once the master's JSON status lists
every worker ALIVE; every wait is bounded. The processes die with the thread that
started them (PR_SET_PDEATHSIG through util-linux's setpriv) and at close().
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from tests.support.ports import free_port

START_TIMEOUT = 120.0
ROOT = Path(__file__).resolve().parents[2]  # the checkout: commands run from there


def spark_class() -> str | None:
    """PySpark's bin/spark-class next to this Python, or on PATH."""
    here = Path(sys.executable).with_name("spark-class")
    return str(here) if here.exists() else shutil.which("spark-class")


def spark_env(base: dict | None = None) -> dict:
    """The environment a standalone cluster's processes and its drivers need here."""
    env = dict(os.environ if base is None else base)
    env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    env.setdefault("PYSPARK_PYTHON", sys.executable)
    env.setdefault("PYSPARK_DRIVER_PYTHON", env["PYSPARK_PYTHON"])
    env.setdefault("SPARK_DAEMON_MEMORY", "512m")
    return env


class SparkStandalone:
    """`commands`: the shell lines that start the master, then each worker (e.g.
    docs/pipelines.md's, with `port` and `ui_port` substituted); by default the same
    lines built here. Their output goes to the log files they name, else to DIR."""

    def __init__(
        self,
        directory,
        workers: int = 2,
        worker_memory: str = "2g",
        commands: list[str] | None = None,
        port: int | None = None,
        ui_port: int | None = None,
        env: dict | None = None,
    ):
        self.dir = Path(directory)
        self.port = port or free_port()
        self.ui_port = ui_port or free_port()
        self.env = spark_env(env)
        if commands is None:
            exe = spark_class()
            if exe is None:
                raise RuntimeError("spark-class not found (pip install pyspark)")
            commands = [
                f"{exe} org.apache.spark.deploy.master.Master --host 127.0.0.1 --port {self.port} "
                f"--webui-port {self.ui_port}"
            ]
            commands += [
                f"{exe} org.apache.spark.deploy.worker.Worker {self.master_url} --host 127.0.0.1 "
                f"--cores 1 --memory {worker_memory} --webui-port {free_port()} --work-dir {self.dir}"
                for _ in range(workers)
            ]
        self.commands = commands
        self.workers = len(commands) - 1
        self.procs: list[subprocess.Popen] = []
        self.logs: list[Path] = []

    @property
    def master_url(self) -> str:
        return f"spark://127.0.0.1:{self.port}"

    def _spawn(self, name: str, line: str) -> None:
        """Runs the shell line (bash, exec'd: the process is Spark's JVM), output to the
        log file the line redirects to, else DIR/name.log."""
        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        m = re.search(r">\s*(\S+)\s+2>&1\s*$", line)
        log = Path(m.group(1)) if m else self.dir / f"{name}.log"
        self.logs.append(log)
        with open(self.dir / f"{name}.out", "ab") as out:
            self.procs.append(
                subprocess.Popen(
                    [*die_with_parent, "bash", "-c", f"exec {line}"],
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    env=self.env,
                    cwd=ROOT,
                    start_new_session=True,
                )
            )

    def start(self, timeout: float = START_TIMEOUT) -> SparkStandalone:
        self.dir.mkdir(parents=True, exist_ok=True)
        for i, line in enumerate(self.commands):
            self._spawn("master" if i == 0 else f"worker-{i}", line)
        deadline = time.monotonic() + timeout
        seen = "nothing yet"
        while time.monotonic() < deadline:
            for p, log in zip(self.procs, self.logs):
                if p.poll() is not None:
                    self.close()
                    raise RuntimeError(f"{log.stem} exited with {p.returncode}:\n{self.log_tail(log)}")
            self._ui_port_from_log()
            try:
                status = self.status()
                alive = [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]
                seen = f"{len(alive)} worker(s) alive"
                if len(alive) >= self.workers:
                    return self
            except (OSError, ValueError) as exc:  # not up yet; ValueError: not the master's JSON
                seen = str(exc)
            time.sleep(0.5)
        self.close()
        raise RuntimeError(f"Spark standalone cluster not ready within {timeout} s ({seen})")

    def _ui_port_from_log(self) -> None:
        """The port the master's web UI took, from its log: a port taken meanwhile by
        another process makes Spark try the next one, and the one asked for then answers
        another service's page (seen under load: HTML where the master's JSON was due)."""
        if not self.logs:
            return
        try:
            text = self.logs[0].read_text(errors="replace")
        except OSError:
            return
        m = re.search(r"Successfully started service 'MasterUI' on port (\d+)", text)
        if m:
            self.ui_port = int(m.group(1))

    def status(self) -> dict:
        """The master's JSON status (its web UI's /json): workers, applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as r:
            return json.loads(r.read())

    def log_tail(self, log: Path, lines: int = 30) -> str:
        try:
            return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def log_tails(self) -> str:
        return "\n".join(f"----- {log.stem} -----\n{self.log_tail(log)}" for log in self.logs)

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    p.kill()
        for p in self.procs:
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                pass
        self.procs.clear()

    def __enter__(self) -> SparkStandalone:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.close()

"""docs/pipelines.md as written: every command it shows runs, in order, with other ports.
Its 3-broker cluster is bench/cluster/run.py (free ports: `--port 0`), its Spark
standalone master and workers are the session's (conftest.spark_standalone starts them
with the page's own lines), its `export`s are applied, and the examples it runs on them
get small data (and their output directories here). The examples' output is checked; the
lines of its ```stdin blocks are typed into run.py's stdin and answered; Ctrl-C stops
the cluster cleanly."""

from __future__ import annotations

import re
import signal
import subprocess
import threading
import time

import pytest

from tests.pipelines.conftest import DOC, doc_environment
from tests.pipelines.helpers import (
    ROOT,
    check_clickstream,
    compare_copy,
    fenced_blocks,
    read_topic,
    shell_commands,
    substitute,
)

SMALL = {
    "clickstream/run.py": "--duration 5 --rate 200 --speedup 60",
    "exactly_once/run.py": "--duration 6 --rate 200 --speedup 120",
}

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


class Foreground:
    """A long-running command of the page (run.py) with its stdin and output lines."""

    def __init__(self, line: str, env: dict):
        self.proc = subprocess.Popen(
            ["bash", "-c", f"exec {line}"],
            cwd=ROOT,
            env=env,
            text=True,
            bufsize=1,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def wait_for(self, pattern: str, timeout: float, after: int = 0) -> re.Match:
        deadline = time.monotonic() + timeout
        while True:
            for line in self.lines[after:]:
                m = re.search(pattern, line)
                if m:
                    return m
            assert self.proc.poll() is None, f"exited {self.proc.returncode}:\n" + "\n".join(self.lines[-40:])
            assert time.monotonic() < deadline, f"no {pattern!r} within {timeout} s:\n" + "\n".join(self.lines[-40:])
            time.sleep(0.2)

    def type(self, text: str) -> int:
        """Writes a line to its stdin; the number of output lines before it."""
        before = len(self.lines)
        self.proc.stdin.write(text + "\n")
        self.proc.stdin.flush()
        return before


def test_every_command_of_docs_pipelines_runs(spark_standalone, tmp_path):
    commands = shell_commands(DOC)
    env = {**spark_standalone.env, **doc_environment(commands)}
    # the Spark standalone cluster: the page's own lines, already running
    assert spark_standalone.doc_lines == [line for line in commands if "spark-class" in line]
    assert spark_standalone.status()["aliveworkers"] == 2

    run_line = next(line for line in commands if "bench/cluster/run.py" in line)
    assert "--port 9093" in run_line
    cluster = Foreground(substitute(run_line, {"--port 9093": "--port 0"}), env)
    try:
        cluster.wait_for(r"^cluster formed: brokers \[1, 2, 3\]", 120)
        bootstrap = cluster.wait_for(r"^bootstrap\s+(\S+)", 30).group(1)
        ports = bootstrap.split(",")
        assert len(ports) == 3
        # each broker's exact command is printed
        assert len([line for line in cluster.lines if "broker.cli.main serve" in line]) == 3
        mapping = {
            "127.0.0.1:9093": ports[0],
            "127.0.0.1:9094": ports[1],
            "127.0.0.1:9095": ports[2],
            "spark://127.0.0.1:7077": spark_standalone.master_url,
        }
        outputs = {}
        for line in commands:
            if line.startswith("export ") or "spark-class" in line or line == run_line:
                continue
            cmd = substitute(line, mapping)
            for script, args in SMALL.items():
                if script in cmd:
                    cmd += " " + args
            if "examples/clickstream/run.py" in cmd:
                cmd += f" --out {tmp_path / 'clickstream'}"
            if "examples/copy/run.py" in cmd:
                cmd += f" --checkpoint {tmp_path / 'copy'}"
            if "examples/exactly_once/run.py" in cmd:
                cmd += f" --checkpoint {tmp_path / 'exactly-once'}"
            t0 = time.monotonic()
            r = subprocess.run(
                ["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, env=env, capture_output=True, text=True, timeout=400
            )
            print(f"\n{time.monotonic() - t0:6.1f} s  {cmd}")
            assert r.returncode == 0, f"{cmd}\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
            outputs[line] = r.stdout
        # the examples' output, on the cluster: RF=3 topics, the job on the standalone cluster
        counts = check_clickstream(bootstrap, tmp_path / "clickstream")
        report = compare_copy(read_topic(bootstrap, "in"), read_topic(bootstrap, "out"))
        assert report["in"] == 1000 and report["duplicates"] == 0, report
        copied = next(out for line, out in outputs.items() if "examples/copy/run.py" in line)
        assert "batch 0: 1000 records" in copied and copied.splitlines()[-1] == "0 task(s) failed", copied
        counted = next(out for line, out in outputs.items() if "examples/exactly_once/run.py" in line)
        assert re.search(
            r"^checked: [1-9]\d* \(window, page\) rows, 0 written twice, 0 missing, 0 wrong", counted, re.M
        ), counted
        consumed = next(out for line, out in outputs.items() if "consume --topic out" in line)
        assert len(consumed.splitlines()) == 3 and all(v.startswith("RECORD ") for v in consumed.splitlines())
        apps = {a["name"] for a in spark_standalone.status()["completedapps"]}
        assert {"clickstream", "copy in to out", "exactly-once view counts"} <= apps, apps  # on the standalone cluster
        from broker.client import Cluster

        with Cluster(bootstrap) as c:
            for t in ("clicks", "click-counts", "in", "out", "views", "view-counts"):
                assert all(len(p.replicas) == 3 for p in c.topic(t).partitions.values()), t

        # what the page has typed into run.py's terminal
        typed = [line.strip() for block in fenced_blocks(DOC, "stdin") for line in block if line.strip()]
        assert typed == ["restart 2"]
        for line in typed:
            verb, n = line.split()
            before = cluster.type(line)
            cluster.wait_for(rf"^broker {n} {verb}ed: 127\.0\.0\.1:\d+\s+pid \d+", 120, after=before)
        print(f"\nclickstream on the cluster: {counts} counts checked; copy: {report['out']} records")
    finally:
        if cluster.proc.poll() is None:
            cluster.proc.send_signal(signal.SIGINT)  # Ctrl-C: brokers, then ZooKeeper
            try:
                code = cluster.proc.wait(120)
            except subprocess.TimeoutExpired:
                cluster.proc.kill()
                raise
            assert code == 0, "\n".join(cluster.lines[-30:])
            assert any("ZooKeeper stopped" in line for line in cluster.lines)

"""docs/watching-a-stream.md as written (issue 41, item 6): its broker (`make serve` with
the metrics listener: here a broker process with the same setting, on free ports) and
the exactly-once example it watches (in the background, small data; Ctrl-C ends its
generation), then each command of the page while the job runs: the job's consumer group
(`broker groups describe`), its lag in the broker's metrics and status page, the sink's
transactions and its sink log. The page's Python block runs as written, `query` a
running query of the kbroker source. At the end the example's own check passes."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.pipelines.conftest import require_spark
from tests.pipelines.helpers import ROOT, JobProcess, fenced_blocks, shell_commands, substitute
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_binary
from tests.support.ports import free_port

DOC = ROOT / "docs" / "watching-a-stream.md"
GROUP = "view-counts"

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

#: `query` for the page's Python block: a query of the kbroker source, behind its topic
HARNESS = """
import os, sys
os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
spark.sparkContext.setLogLevel("ERROR")
query = (spark.readStream.format("kbroker").option("kafka.bootstrap.servers", "{bootstrap}")
         .option("subscribe", "views").option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", 100)
         .load().writeStream.format("noop").trigger(processingTime="1 second").start())
while not query.lastProgress or not query.lastProgress["numInputRows"]:
    query.awaitTermination(0.5)
"""


#: how many words name each `broker` subcommand the page uses (its `-b` goes after them)
SUBCOMMAND_WORDS = {"groups": 2, "transactions": 2, "consume": 1}


def with_bootstrap(cmd: str, bootstrap: str) -> str:
    """Every `.venv/bin/broker` of the line, which relies on the default 127.0.0.1:9092,
    given `-b bootstrap` after its subcommand."""

    def add(m: re.Match) -> str:
        words = m.group(1).split()
        n = SUBCOMMAND_WORDS[words[0]]
        return " ".join([".venv/bin/broker", *words[:n], "-b", bootstrap, *words[n:]])

    return re.sub(r"\.venv/bin/broker((?: [\w-]+){1,2})", add, cmd)


def run(cmd: str) -> str:
    r = subprocess.run(["bash", "-o", "pipefail", "-c", cmd], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"{cmd}\n{r.stdout[-2000:]}\n{r.stderr[-2000:]}"
    print(f"\n$ {cmd}\n{r.stdout[-1500:]}")
    return r.stdout


def test_every_command_of_docs_watching_a_stream_runs(tmp_path):
    require_spark()
    require_binary("curl")
    commands = shell_commands(DOC)
    serve, example = commands[0], commands[1]
    assert serve == 'make serve SERVE_ARGS="--set metrics.listener=127.0.0.1:9404"', serve
    assert example.startswith(".venv/bin/python examples/exactly_once/run.py"), example
    metrics_port = free_port()
    with BrokerProcess(
        tmp_path / "broker" / "data", config={"metrics.listener": f"127.0.0.1:{metrics_port}", "num.partitions": 1}
    ) as b:
        mapping = {"127.0.0.1:9404": f"127.0.0.1:{metrics_port}"}
        # the page's job, against this broker, on small data (generation ended by Ctrl-C)
        job = JobProcess(
            [
                sys.executable,
                *example.split()[1:],
                "--bootstrap",
                b.bootstrap,
                "--rate",
                "100",
                "--speedup",
                "30",
                "--checkpoint",
                str(tmp_path / "checkpoint"),
            ],
            log_path=tmp_path / "job.log",
        ).start()
        try:
            query = job.wait_for_line(r"^query (\S+) started", timeout=300).group(1)
            deadline = time.monotonic() + 300
            while not any(re.search(r"[1-9]\d* counts out", line) for _, line in job.lines):
                assert job.alive and not job.failed(), job.output()
                assert time.monotonic() < deadline, job.output()
                time.sleep(0.5)
            time.sleep(3)  # a trigger after the batch: its offsets committed
            outputs = {}
            for line in commands[2:]:
                outputs[line] = run(with_bootstrap(substitute(line, mapping), b.bootstrap))
            assert job.alive and not job.failed(), job.output()
            job.proc.send_signal(signal.SIGINT)  # Ctrl-C: the generation ends, the job catches up
            code = job.proc.wait(300)
        finally:
            job.close()
        assert code == 0 and re.search(
            r"^checked: [1-9]\d* \(window, page\) rows, 0 written twice, 0 missing, "
            r"0 wrong",
            job.output(100),
            re.M,
        ), job.output(100)

        described = next(out for line, out in outputs.items() if "groups describe" in line)
        assert described.startswith(f"Group: {GROUP}\tState: Empty"), described
        rows = [line.split("\t") for line in described.splitlines() if line.startswith("\tviews\t")]
        assert sorted(int(r[2]) for r in rows) == list(range(6)) and all(int(r[5]) >= 0 for r in rows), described
        metric = next(out for line, out in outputs.items() if "kafka_consumer_group_lag" in line)
        assert len([m for m in metric.splitlines() if 'topic="views"' in m]) == 6, metric
        listed = next(out for line, out in outputs.items() if "transactions list" in line)
        ids = sorted(line.split()[0] for line in listed.splitlines()[1:])
        assert ids == [f"{query}-0", f"{query}-1"], listed
        detail = next(out for line, out in outputs.items() if "transactions describe" in line)
        assert f"{query}-0" in detail, detail
        sink_log = next(out for line, out in outputs.items() if "kbroker-spark-sink-log" in line)
        assert query in sink_log and '"transactions"' in sink_log, sink_log
        # the status page lists the group with its lag
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/status.json", timeout=10) as r:
            status = json.load(r)
        group = next(g for g in status["groups"] if g["group"] == GROUP)
        assert len(group["lag"]) == 6 and group["total_lag"] >= 0, group

        # the page's Python block, as written, `query` a running query
        (block,) = fenced_blocks(DOC, "python")
        script = HARNESS.format(bootstrap=b.bootstrap) + "\n".join(block) + "\nquery.stop()\nspark.stop()\n"
        r = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
        printed = [line for line in r.stdout.splitlines() if line.startswith("{")]
        assert len(printed) == 2 and all("'maxOffsetsBehindLatest'" in line for line in printed), r.stdout
        assert printed[0] == printed[1], printed  # lag() and the filled-in metrics agree

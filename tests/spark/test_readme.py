"""The README's Spark block as written (issue 41, item 4), against the module's broker
(127.0.0.1:9092 replaced), in a process of its own without any help on its path (no
PYTHONPATH), from a directory outside the checkout (`.venv/` made absolute): Spark's
Python workers start in the driver's directory, which is on their path, so from the
checkout itself pyspark_kbroker.py would be found there; from anywhere else only the
venv's own path (make install-test's .venv/spark-discovery) finds it. The `kbroker`
format resolves without registering it, and the quick start's records come back."""

from __future__ import annotations

import os
import subprocess

from broker.client import Producer
from tests.pipelines.helpers import ROOT, fenced_blocks
from tests.spark.helpers import create_topic

README = ROOT / "README.md"


def test_the_readme_spark_block_runs_as_written(broker, tmp_path):
    block = next(b for b in fenced_blocks(README, "sh") if any('format("kbroker")' in line for line in b))
    script = "\n".join(block).replace("127.0.0.1:9092", broker.bootstrap).replace(".venv/", f"{ROOT}/.venv/") + "\n"
    assert "register" not in script  # nothing but the short name
    create_topic(broker.bootstrap, "clicks", 3)
    with Producer(broker.bootstrap) as p:
        p.send("clicks", b"hello", key=b"user-1")
        p.send("clicks", b"world", key=b"user-2")
        p.flush()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")}
    r = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [
        [c.strip() for c in line.strip("|").split("|")]
        for line in r.stdout.splitlines()
        if line.startswith("|") and "user-" in line
    ]
    assert sorted((k, v) for k, v, _, _ in rows) == [("user-1", "hello"), ("user-2", "world")], r.stdout

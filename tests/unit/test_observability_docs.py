"""The commands docs/observability.md shows, run as written (ports and the data dir
moved out of the way): a broker with metrics.listener, then curl on /metrics and
/status.json; and `make serve SERVE_ARGS=...` passes the setting to the broker."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.deps import require_binary
from tests.support.ports import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "observability.md"


def shown_commands() -> list[str]:
    block = re.search(r"```sh\n(.*?)```", DOC.read_text(), re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_documented_commands_run(tmp_path):
    require_binary("curl")
    serve, *curls = shown_commands()
    assert serve.startswith("broker serve ") and "metrics.listener=127.0.0.1:9404" in serve
    assert len(curls) == 2 and all(c.startswith("curl ") for c in curls)
    port, metrics = free_port(), free_port()

    def moved(cmd: str) -> str:
        return (
            cmd.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
            .replace("127.0.0.1:9404", f"127.0.0.1:{metrics}")
            .replace("./data", str(tmp_path / "data"))
        )

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen(
        shlex.split(moved(serve)) + ["--event-loop", "asyncio"],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        assert wait_port("127.0.0.1", metrics, 60), (tmp_path / "broker.log").read_text()
        out = [subprocess.run(moved(c), shell=True, env=env, capture_output=True, text=True, timeout=30) for c in curls]
        assert out[0].returncode == 0
        assert out[0].stdout.splitlines() == [
            "# HELP kafka_server_under_replicated_partitions Partitions led here whose ISR is smaller than their "
            "replicas (Kafka's UnderReplicatedPartitions)",
            "# TYPE kafka_server_under_replicated_partitions gauge",
            "kafka_server_under_replicated_partitions 0.0",
        ]
        status = json.loads(out[1].stdout)
        assert status["brokers"][0]["status"] == "up" and status["cluster"]["controller_id"] == 0
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        log.close()
    assert (
        f"metrics at http://127.0.0.1:{metrics}/metrics, status page at http://127.0.0.1:{metrics}/"
        in (tmp_path / "broker.log").read_text()
    )


def test_make_serve_passes_serve_args():
    setting = "--set metrics.listener=127.0.0.1:9404"
    assert f'SERVE_ARGS="{setting}"' in DOC.read_text()
    r = subprocess.run(
        ["make", "-n", "serve", f"SERVE_ARGS={setting}"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, r.stderr
    assert (
        ".venv/bin/broker serve --data-dir ./data --listen 127.0.0.1:9092 "
        f"--set schema.registry.listener=127.0.0.1:8081 {setting}"
    ) in r.stdout

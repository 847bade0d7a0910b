"""docs/tiered-storage.md as written: its commands run (port, data dir and NAS directory
moved out of the way) against the broker its first line starts with tiered storage, and
their output is the page's text block line for line; the storage manager's directory
is Kafka's LocalTieredStorage root."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.pipelines.helpers import fenced_blocks
from tests.support.ports import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "tiered-storage.md"


def test_the_documented_commands_run(tmp_path):
    (commands,) = fenced_blocks(DOC, "sh")
    (expected,) = fenced_blocks(DOC, "text")
    serve, *cli = [c for c in commands if c.strip()]
    assert serve.startswith("broker serve ") and all(c.startswith("broker topics ") for c in cli)
    port = free_port()

    def moved(cmd: str) -> str:
        return (
            cmd.replace("127.0.0.1:9092", f"127.0.0.1:{port}")
            .replace("./data", str(tmp_path / "data"))
            .replace("/mnt/nas", str(tmp_path / "nas"))
        )

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    log_path = tmp_path / "broker.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            shlex.split(moved(serve)), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            assert wait_port("127.0.0.1", port, 60), log_path.read_text()
            out, codes = [], []
            for c in cli:
                r = subprocess.run(shlex.split(moved(c)), env=env, capture_output=True, text=True, timeout=60)
                out += (r.stdout + r.stderr).splitlines()
                codes.append(r.returncode)
            assert out == expected
            assert codes == [0, 1]
        finally:
            os.killpg(proc.pid, signal.SIGTERM)
            assert proc.wait(30) == 0
    assert (tmp_path / "nas" / "kafka-tiered-storage").is_dir()

"""The commands of docs/cluster.md's "Several log dirs and a failed disk", run as written
(the port and the dirs moved out of the way): a broker with two log dirs, then
`broker log-dirs describe` listing both."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from tests.support.ports import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "cluster.md"


def jbod_commands() -> list[str]:
    section = DOC.read_text().split("## Several log dirs and a failed disk", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_the_documented_jbod_commands_run(tmp_path):
    serve, describe = jbod_commands()
    assert serve.startswith("broker serve ") and "log.dirs=./disk1/kb,./disk2/kb" in serve
    assert describe.startswith("broker log-dirs describe ")
    port = free_port()

    def moved(cmd: str) -> str:
        return cmd.replace("127.0.0.1:9092", f"127.0.0.1:{port}").replace("./disk", f"{tmp_path}/disk")

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
        assert wait_port("127.0.0.1", port, 60), (tmp_path / "broker.log").read_text()
        out = subprocess.run(shlex.split(moved(describe)), env=env, capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        doc = json.loads(out.stdout.splitlines()[-1])
        dirs = doc["brokers"][0]["logDirs"]
        assert sorted(d["logDir"] for d in dirs) == [f"{tmp_path}/disk1/kb", f"{tmp_path}/disk2/kb"]
        assert all(d["error"] is None for d in dirs)
        assert all((tmp_path / f"disk{i}" / "kb" / "meta.properties").exists() for i in (1, 2))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        log.close()

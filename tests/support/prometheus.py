"""A real Prometheus server (Debian's `prometheus`) on a free loopback port, its storage
in a directory of the test's, stopped (SIGTERM, then SIGKILL) when the block ends.

    with Prometheus(tmp_path, scrape_configs) as prom:     # scrape_configs: a list of dicts
        prom.query('up{job="kbroker"}')     # the instant vector: [(labels, value), ...]
        prom.targets()                      # /api/v1/targets' active targets
        prom.wait_for(lambda: ..., "what")  # bounded poll

The process dies with the thread that started it (PR_SET_PDEATHSIG through util-linux's
setpriv), as the brokers of tests/support/broker_proc.py do.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from tests.support.deps import require_binary
from tests.support.ports import free_port

START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
SCRAPE_INTERVAL = "1s"


class Prometheus:
    def __init__(self, directory: Path, scrape_configs: list[dict[str, Any]]):
        self.exe = require_binary("prometheus")
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.scrape_configs = scrape_configs
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = self.dir / "prometheus.log"

    def __enter__(self) -> Prometheus:
        config = {
            "global": {
                "scrape_interval": SCRAPE_INTERVAL,
                "scrape_timeout": SCRAPE_INTERVAL,
                "evaluation_interval": "1m",
            },
            "scrape_configs": self.scrape_configs,
        }
        (self.dir / "prometheus.yml").write_text(yaml.safe_dump(config))
        die_with_parent = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    *die_with_parent,
                    self.exe,
                    f"--config.file={self.dir / 'prometheus.yml'}",
                    f"--storage.tsdb.path={self.dir / 'data'}",
                    f"--web.listen-address=127.0.0.1:{self.port}",
                    "--log.level=info",
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.dir,
                start_new_session=True,
            )
        try:
            self.wait_for(self._ready, "Prometheus ready", START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(STOP_TIMEOUT_S)

    def _ready(self) -> bool:
        if self.proc is not None and self.proc.poll() is not None:
            raise AssertionError(f"prometheus exited with {self.proc.returncode}: {self.log()}")
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def _api(self, path: str, **params: str) -> Any:
        url = f"{self.url}/api/v1/{path}" + (f"?{urllib.parse.urlencode(params)}" if params else "")
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return body["data"]

    def query(self, expr: str) -> list[tuple[dict[str, str], float]]:
        data = self._api("query", query=expr)
        assert data["resultType"] == "vector", data
        return [(x["metric"], float(x["value"][1])) for x in data["result"]]

    def targets(self) -> list[dict[str, Any]]:
        return list(self._api("targets", state="active")["activeTargets"])

    def wait_for(self, probe, what: str, timeout: float = 60.0, interval: float = 0.25) -> Any:
        """Until probe() is truthy (its value returned); AssertionError naming `what` and
        Prometheus' log otherwise."""
        deadline = time.monotonic() + timeout
        while True:
            value = probe()
            if value:
                return value
            if time.monotonic() > deadline:
                raise AssertionError(f"{what}: not after {timeout:.0f} s; prometheus log:\n{self.log()}")
            time.sleep(interval)

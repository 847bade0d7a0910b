"""The commands docs/share-groups.md shows, run as written (port and data dir moved out of
the way) against the broker its first line starts, with the group the page describes
(three members joined in order by kbroker's own protocol client, client id `worker`);
their output is the page's text block, line for line."""

from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from broker.client import BrokerConnection, Cluster
from broker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest
from tests.groups.helpers import find_coordinator, wait_until
from tests.pipelines.helpers import fenced_blocks
from tests.support.ports import free_port, wait_port

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "share-groups.md"


def test_the_documented_share_group_commands_run(tmp_path):
    # the membership example (the offsets one is run by test_share_group_offsets.py)
    commands = fenced_blocks(DOC, "sh")[0]
    expected = fenced_blocks(DOC, "text")[0]
    serve, *cli = [c for c in commands if c.strip()]
    assert serve.startswith("broker serve ") and all(c.startswith("broker share-groups ") for c in cli)
    port = free_port()

    def moved(text: str) -> str:
        return text.replace("127.0.0.1:9092", f"127.0.0.1:{port}").replace("./data", str(tmp_path / "data"))

    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    log = open(tmp_path / "broker.log", "wb")
    proc = subprocess.Popen(
        shlex.split(moved(serve)), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    bootstrap = f"127.0.0.1:{port}"
    try:
        assert wait_port("127.0.0.1", port, 60), (tmp_path / "broker.log").read_text()
        with Cluster(bootstrap) as c:
            c.create_topic("orders", 2, 1)
            c.topic("orders", wait_s=10)
        wait_until(lambda: find_coordinator(bootstrap, "orders-workers")[0] == 0, 30, "a coordinator")
        with BrokerConnection("127.0.0.1", port, client_id="worker") as conn:

            def hb(member: str, epoch: int, topics: list[str] | None = None) -> int:
                r = conn.request(
                    ShareGroupHeartbeatRequest(
                        group_id="orders-workers", member_id=member, member_epoch=epoch, subscribed_topic_names=topics
                    )
                )
                assert r.error_code == 0, r
                return r.member_epoch

            for i in (1, 2, 3):
                hb(f"worker-{i}", 0, ["orders"])
            assert hb("worker-1", 1) == hb("worker-2", 2) == 3
            out, codes = [], []
            for c in cli:
                r = subprocess.run(shlex.split(moved(c)), env=env, capture_output=True, text=True, timeout=60)
                out += (r.stdout + r.stderr).splitlines()
                codes.append(r.returncode)
        assert out == [moved(line) for line in expected]
        assert codes == [0] * len(cli)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0
        log.close()

"""Other clients people use, against a real kbroker: franz-go and sarama (Go, pinned in
tests/go/go.mod, built by `make testdeps`) and KafkaJS (npm, pinned by
tests/node/package-lock.json). Each produces keyed records with headers and timestamps
with every codec it has, reads them back field by field, and reads a topic with a consumer
group of two members that commit what they read."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from broker.client import Cluster, Producer
from tests.groups.helpers import committed
from tests.support.deps import missing

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]
GO_BIN = ROOT / "tests" / "go" / "bin" / "goclients"
NODE_DIR = ROOT / "tests" / "node"
GROUP_RECORDS = 40
TIMEOUT_S = 180


def run_checks(cmd: list[str]) -> dict[str, list[dict]]:
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL, cwd=ROOT)
    assert p.returncode == 0, f"{cmd[:2]} exit {p.returncode}:\n{p.stderr[-3000:]}"
    out: dict[str, list[dict]] = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            facts = json.loads(line)
            out.setdefault(facts.pop("check"), []).append(facts)
    return out


def topics(bootstrap: str, topic: str, partitions: int) -> tuple[str, str]:
    """The produce/read-back topic and the group topic (GROUP_RECORDS records over 4 partitions)."""
    group_topic = topic + "-g"
    with Cluster(bootstrap) as c:
        for name, n in ((topic, partitions), (group_topic, 4)):
            c.create_topic(name, n, 1)
            c.topic(name, wait_s=10)
    with Producer(bootstrap, acks=-1) as p:
        for i in range(GROUP_RECORDS):
            p.send(group_topic, f"g{i}".encode(), partition=i % 4)
        p.flush()
    return topic, group_topic


def check_group(bootstrap: str, got: dict, group_topic: str) -> None:
    (g,) = got["group"]
    assert (g["read"], g["duplicates"]) == (GROUP_RECORDS, 0)
    assert sorted(g["assigned"]) == [2, 2]
    assert sum(committed(bootstrap, g["group"], {group_topic: 4}).values()) == GROUP_RECORDS


@pytest.mark.parametrize("client", ["franz", "sarama"])
def test_go_client(kbroker, topic, client):
    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    b = kbroker.bootstrap
    topic, group_topic = topics(b, topic, 5)
    got = run_checks([str(GO_BIN), client, b, topic, group_topic])
    produced = {f["codec"]: f for f in got["produced"]}
    assert list(produced) == ["none", "gzip", "snappy", "lz4", "zstd"]
    assert all((f["first_offset"], f["last_offset"]) == (0, 199) for f in produced.values())
    assert got["read_back"] == [{"client": client, "matched": 1000, "mismatches": 0}]
    check_group(b, got, group_topic)


def test_kafkajs(kbroker, topic):
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "kafkajs").exists():
        missing("KafkaJS (node and tests/node/node_modules)", "run 'make testdeps' (needs node and npm)")
    b = kbroker.bootstrap
    topic, group_topic = topics(b, topic, 2)
    got = run_checks([node, str(NODE_DIR / "check.js"), b, topic, group_topic])
    assert [(f["partition"], f["compression"], f["base_offset"]) for f in got["produced"]] == [
        (0, "none", 0),
        (1, "gzip", 0),
    ]
    assert got["read_back"] == [{"matched": 400, "mismatches": 0}]
    check_group(b, got, group_topic)

"""franz-go's schema registry client (pkg/sr, its Serde framing records) and KafkaJS's
@kafkajs/confluent-schema-registry (Avro, Protobuf, JSON Schema) against the broker's
registry, the framed records sent through the broker and read back (tests/go/sr.go,
tests/node/sr.js; pinned in tests/go/go.mod and tests/node/package-lock.json, fetched by
`make testdeps`)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from broker.client import Cluster
from tests.support.deps import missing

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]
GO_BIN = ROOT / "tests" / "go" / "bin" / "goclients"
NODE_DIR = ROOT / "tests" / "node"


def run(cmd: list[str]) -> dict[str, dict]:
    r = subprocess.run(cmd, capture_output=True, timeout=180)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    lines = [json.loads(line) for line in r.stdout.decode().splitlines() if line.startswith("{")]
    return {line["step"] + (f":{line['type']}" if "type" in line else ""): line for line in lines}


def create(broker, topic: str) -> None:
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic, 1, 1)


def test_franz_go_sr(broker, registry, subject):
    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    create(broker, subject)
    got = run([str(GO_BIN), "franz-sr", broker.bootstrap, registry.url, subject])
    reg = got["register"]
    assert reg["subject"] == f"{subject}-value" and reg["version"] == 1
    assert reg["id"] == reg["again"] == reg["looked_up"]
    assert sorted(reg["types"]) == ["AVRO", "JSON", "PROTOBUF"]
    assert got["serde"] == {"step": "serde", "records": 20, "round_trip": True, "ids": [reg["id"]]}
    api = got["api"]
    assert api["compatible"] is False and api["text_ok"] and api["versions"] == [1]
    assert api["global_compatibility"] == "BACKWARD" and api["missing_code"] == 40403 and api["deleted"] == [1]
    # what the client registered, the registry answers
    status, latest = registry.call("GET", f"/subjects/{subject}-value/versions?deleted=true")
    assert (status, latest) == (200, [1])


def test_kafkajs_confluent_schema_registry(broker, registry, subject):
    node = shutil.which("node")
    if node is None or not (NODE_DIR / "node_modules" / "@kafkajs" / "confluent-schema-registry").exists():
        missing(
            "@kafkajs/confluent-schema-registry (node and tests/node/node_modules)",
            "run 'make testdeps' (needs node and npm)",
        )
    create(broker, subject)
    got = run([node, str(NODE_DIR / "sr.js"), registry.url, broker.bootstrap, subject])
    ids = set()
    for kind in ("AVRO", "PROTOBUF", "JSON"):
        r = got[f"register:{kind}"]
        assert r["id"] == r["again"] == r["latest"] == r["by_version"], r
        ids.add(r["id"])
        status, out = registry.call("GET", f"/schemas/ids/{r['id']}")
        assert status == 200 and out.get("schemaType", "AVRO") == kind
    assert len(ids) == 3
    assert got["round_trip"] == {"step": "round_trip", "records": 15, "same": True, "framed": True}
    assert got["missing"]["missing"]["status"] == 404

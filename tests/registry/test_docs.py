"""`make serve` serves the registry, and docs/schema-registry.md's examples run as written:
the serve target's command (from the Makefile, on free ports and a temporary data dir)
starts the broker and its registry; the page's shell commands and its Python run against
it, the ports of 127.0.0.1:9092 and 127.0.0.1:8081 replaced."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest

from tests.pipelines.helpers import ROOT, fenced_blocks
from tests.support.ports import free_port, wait_port

pytestmark = pytest.mark.interop

DOC = ROOT / "docs" / "schema-registry.md"


def serve_command(data_dir, kafka_port: int, registry_port: int) -> str:
    """The Makefile's `serve` recipe, as `make serve` runs it, on other ports and dirs."""
    lines = (ROOT / "Makefile").read_text().splitlines()
    start = lines.index(next(line for line in lines if line.startswith("serve:")))
    # the recipe's command that serves (an @$(COMPILE) line compiles the bytecode before it)
    recipe = next(line.strip() for line in lines[start + 1 :] if "broker serve" in line)
    assert "schema.registry.listener=127.0.0.1:8081" in recipe and "127.0.0.1:9092" in recipe, recipe
    return (
        recipe.replace("$(VENV)/bin/broker", f"{sys.executable} -m broker.cli.main")
        .replace("./data", str(data_dir))
        .replace("$(SERVE_ARGS)", "")
        .replace("127.0.0.1:9092", f"127.0.0.1:{kafka_port}")
        .replace("127.0.0.1:8081", f"127.0.0.1:{registry_port}")
    )


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    kafka_port, registry_port = free_port(), free_port()
    cmd = serve_command(tmp_path_factory.mktemp("serve") / "data", kafka_port, registry_port)
    log = tmp_path_factory.mktemp("serve-log") / "broker.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            "exec " + cmd, shell=True, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    try:
        assert wait_port("127.0.0.1", registry_port, 60) and wait_port("127.0.0.1", kafka_port, 60), log.read_text()[
            -3000:
        ]
        yield kafka_port, registry_port
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        assert proc.wait(30) == 0, log.read_text()[-3000:]


def _ports(text: str, kafka_port: int, registry_port: int) -> str:
    return text.replace("127.0.0.1:8081", f"127.0.0.1:{registry_port}").replace(
        "127.0.0.1:9092", f"127.0.0.1:{kafka_port}"
    )


def test_the_quick_tour_runs_as_written(served):
    kafka_port, registry_port = served
    block = next(b for b in fenced_blocks(DOC, "sh") if any("curl" in line for line in b))
    outputs = []
    for line in block:
        r = subprocess.run(
            ["bash", "-c", _ports(line, kafka_port, registry_port)], capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, (line, r.stderr)
        outputs.append(json.loads(r.stdout))
    registered, by_id, latest, compat, second, subjects = outputs
    assert (registered["id"], registered["version"]) == (1, 1)
    assert by_id == {"schema": latest["schema"]} and latest["version"] == 1
    assert compat["is_compatible"] is False and "READER_FIELD_MISSING_DEFAULT_VALUE" in compat["messages"][0]
    assert (second["id"], second["version"]) == (2, 2)
    assert subjects == ["clicks-value"]


def test_the_python_example_runs_as_written(served):
    kafka_port, registry_port = served
    code = "\n".join(fenced_blocks(DOC, "python")[0])
    r = subprocess.run(
        [sys.executable, "-c", _ports(code, kafka_port, registry_port)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    schema_id = int(r.stdout.strip())
    out = subprocess.run(
        ["curl", "-s", f"http://127.0.0.1:{registry_port}/schemas/ids/{schema_id}"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    assert json.loads(json.loads(out)["schema"])["name"] == "Order"
    # the records are in the topic, framed with that id
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": f"127.0.0.1:{kafka_port}", "group.id": "docs", "enable.auto.commit": False})
    c.assign([TopicPartition("orders", 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.monotonic() + 30
    while len(got) < 3 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value())
    c.close()
    assert len(got) == 3 and all(v[0] == 0 and int.from_bytes(v[1:5], "big") == schema_id for v in got)
    assert re.fullmatch(r"\d+", r.stdout.strip())


def test_the_validation_example_runs_as_written(served):
    """Validation on produce: the topic created by the page's command validates its
    values; the serializer's record is taken, the plain bytes refused."""
    kafka_port, registry_port = served
    block = next(b for b in fenced_blocks(DOC, "sh") if any("schema.validation" in line for line in b))
    env = {**os.environ, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
    for line in block:
        r = subprocess.run(
            ["bash", "-c", _ports(line, kafka_port, registry_port)], capture_output=True, text=True, timeout=60, env=env
        )
        assert r.returncode == 0, (line, r.stderr)
    code = "\n".join(
        next(b for b in fenced_blocks(DOC, "python") if any("INVALID_RECORD" in x or "KafkaError" in x for x in b))
    )
    r = subprocess.run(
        [sys.executable, "-c", _ports(code, kafka_port, registry_port)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[None, 'INVALID_RECORD']"
    doc = DOC.read_text()
    assert "It prints `[None, 'INVALID_RECORD']`." in doc

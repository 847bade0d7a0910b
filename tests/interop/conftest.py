"""Interop fixtures: one real broker process per test module, on a free loopback port."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from tests.support.broker_proc import BrokerProcess
from tests.support.deps import missing, require_binary, require_module

ALLOWLIST_DIR = Path(__file__).parent / "allowlist"
_counter = itertools.count()


def allowed(client: str, scenario: str) -> None:
    """Skips (saying why) a scenario absent from the client's allow-list."""
    path = ALLOWLIST_DIR / f"{client}.txt"
    lines = {line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")}
    if scenario not in lines:
        pytest.skip(f"{scenario!r} is not in {path.name}: not expected to work with {client}")


def require_client(client: str) -> None:
    if client == "kcat":
        require_binary("kcat")
    else:
        require_module({"confluent": "confluent_kafka", "kafka-python": "kafka", "aiokafka": "aiokafka"}[client])


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(
        tmp_path_factory.mktemp("broker") / "data", config={"log.retention.check.interval.ms": 500}
    ) as b:
        yield b


@pytest.fixture
def topic_name(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:180]
    return f"{base}-{next(_counter)}"


__all__ = ["allowed", "missing", "require_client"]

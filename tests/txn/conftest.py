"""Transactions against a real broker process: one broker per test module, with the
transaction coordinator's timers made short so timeouts show within seconds."""

from __future__ import annotations

import itertools

import pytest

from tests.support.broker_proc import BrokerProcess

_counter = itertools.count()

TXN_CONFIG = {
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 300,
    "transaction.max.timeout.ms": 60000,
    "transaction.state.log.num.partitions": 5,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("broker") / "data", config=TXN_CONFIG) as b:
        yield b


@pytest.fixture
def topic_name(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:120]
    return f"{base}-{next(_counter)}"

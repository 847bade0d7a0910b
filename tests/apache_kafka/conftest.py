"""Fixtures of the tests that put Apache Kafka beside kbroker: its command-line tools and
Java client against a real kbroker process, its broker as a test peer.

One kbroker per module (groups rebalance at once: group.initial.rebalance.delay.ms=0, so a
tool's consumer does not wait 3 s for company), one Apache Kafka broker for the whole session
(its start costs ten seconds). The jars, the Go binary and KafkaJS come from `make testdeps`;
a test whose dependency is missing fails under CI=true and skips elsewhere (the helpers in
tests/support/kafka_tools.py check before they run anything).
"""

from __future__ import annotations

import itertools

import pytest

from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_tools import require_kafka_libs

_counter = itertools.count()

KBROKER_CONFIG = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 4,
    # KIP-848 members (group.protocol=consumer) heartbeat every 0.5 s, not 5 s
    "group.consumer.min.heartbeat.interval.ms": 500,
    "group.consumer.heartbeat.interval.ms": 500,
}


@pytest.fixture(scope="module")
def kbroker(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("kbroker") / "data", config=KBROKER_CONFIG) as b:
        yield b


@pytest.fixture(scope="session")
def apache_kafka(tmp_path_factory):
    """Apache Kafka 4.x, KRaft, one combined node; tests share it (unique topic names)."""
    require_kafka_libs()
    with KafkaBroker(tmp_path_factory.mktemp("apache-kafka")) as k:
        yield k


@pytest.fixture
def topic(request):
    base = "".join(c if c.isalnum() else "-" for c in request.node.name)[:100]
    return f"{base}-{next(_counter)}"

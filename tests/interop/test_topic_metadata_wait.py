"""Cluster.topic(name, wait_s) waits for a topic the broker does not know yet, as Kafka's
clients wait for a topic's metadata (UNKNOWN_TOPIC_OR_PARTITION is retriable): on a
cluster, a topic just created is known to the other brokers a moment after its creation
is acknowledged, and an example that created a topic and asked another broker for it at
once failed under load. Without wait_s, or once it has passed, the error is the
broker's."""

from __future__ import annotations

import threading
import time

import pytest

from broker.client import Cluster
from broker.protocol.errors import ErrorCode, KafkaProtocolError


def test_a_topic_created_while_waiting_is_returned(broker, topic_name):
    def create_later():
        time.sleep(0.5)
        with Cluster(broker.bootstrap) as admin:
            admin.create_topic(topic_name, 2, 1)

    t = threading.Thread(target=create_later)
    with Cluster(broker.bootstrap) as c:
        with pytest.raises(KafkaProtocolError) as exc:
            c.topic(topic_name)  # not there yet, and no wait: the broker's answer
        assert exc.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        t.start()
        meta = c.topic(topic_name, wait_s=20.0)
        t.join()
    assert sorted(meta.partitions) == [0, 1]


def test_a_topic_that_never_comes_is_the_brokers_error_after_the_wait(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        t0 = time.monotonic()
        with pytest.raises(KafkaProtocolError) as exc:
            c.topic(topic_name, wait_s=0.5)
        waited = time.monotonic() - t0
    assert exc.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert waited >= 0.5, waited

"""The sender's retry rules without a broker: Kafka's exponential backoff, a batch re-routed
at once when the metadata names a new leader, and the delivery timeout as the only bound
while no broker answers (a failed metadata refresh never fails a batch by itself). The
sender against real brokers and faults: tests/cluster/test_client_failover.py."""

from __future__ import annotations

import time

import pytest

from broker.client.connection import ClientError
from broker.client.sender import Sender, _Batch
from broker.protocol.errors import ErrorCode, KafkaProtocolError


class Unreachable:
    """A cluster view no broker of which answers (what Cluster does with every broker down)."""

    topics: dict = {}
    brokers: dict = {}

    def __init__(self):
        self.refreshes = 0

    def refresh(self, topics=None, allow_auto_create=False):
        self.refreshes += 1
        raise ClientError("cannot connect to 127.0.0.1:1: Connection refused")

    def drop_connection(self, broker_id):
        pass


def sender(cluster, **kw) -> Sender:
    return Sender(cluster, acks=-1, timeout_ms=1000, max_in_flight=5, on_ack=lambda *a: None, **kw)


def test_backoff_doubles_from_retry_backoff_ms_up_to_its_max_with_kafkas_jitter():
    s = sender(Unreachable())
    for attempts, base in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (30, 1.0), (100, 1.0)]:
        for _ in range(20):
            assert base * 0.8 <= s._backoff(attempts) <= base * 1.2


def test_a_batch_goes_to_a_new_leader_without_waiting_out_its_backoff():
    b = _Batch(("t", 0), b"x", 1, time.monotonic())
    now = time.monotonic()
    b.failed_on, b.retry_at = 2, now + 1.0
    assert not b.due(2, now)  # the leader it failed on: after the backoff
    assert b.due(3, now)  # another leader: at once
    assert b.due(2, now + 1.0)


def test_no_broker_answering_fails_a_batch_at_its_delivery_timeout_and_not_before():
    cluster = Unreachable()
    s = sender(cluster, delivery_timeout_ms=1500)
    t0 = time.monotonic()
    s.add("t", 0, b"batch", 3)  # no metadata, no broker: queued, not failed
    with pytest.raises(KafkaProtocolError) as e:
        s.flush()
    waited = time.monotonic() - t0
    assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
    text = str(e.value)
    assert "t-0: 3 record(s) expired" in text and "1500 ms" in text and "Connection refused" in text, text
    assert 1.5 <= waited < 2.5, waited
    assert 5 <= cluster.refreshes <= 20, cluster.refreshes  # retried, every retry.backoff.ms

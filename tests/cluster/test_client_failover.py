"""The project's producer with its defaults (Kafka's: retries bounded by delivery.timeout.ms)
across a leader's kill -9: every record is acknowledged and in the log, nothing fails,
the batches went to the new leader once the metadata named it; and with no broker left a
batch fails once its delivery timeout has passed, not before, not much later."""

from __future__ import annotations

import time

import pytest

from broker.client import Consumer, Producer
from broker.protocol.errors import ErrorCode, KafkaProtocolError


def test_the_producer_rides_through_a_leader_kill_and_gives_up_at_the_delivery_timeout(make_cluster):
    cluster = make_cluster(3)
    topic = "rides"
    with Producer(cluster.bootstrap) as admin:
        admin.cluster.create_topic(topic, 3, 3, {"min.insync.replicas": "2"})
    for p in range(3):
        cluster.wait_for_isr(topic, p, {1, 2, 3})
    victim = cluster.leader_of(topic, 0)
    sent = 0
    with Producer(cluster.bootstrap, linger_ms=5) as p:
        for i in range(3000):
            if i == 1000:
                p.flush()
                cluster.kill(victim)  # its partitions' leader, mid-stream
                killed_at = time.monotonic()
            p.send(topic, b"v%05d" % i, partition=i % 3)
            sent += 1
            p.poll()
        p.flush()  # no error: every batch acknowledged
        took = time.monotonic() - killed_at
        retried = p.retried
    assert retried > 0, "nothing was retried: the kill did not hit the producer"
    assert cluster.leader_of(topic, 0) != victim
    # a new leader within the session timeout (6 s) and the election: well within 120 s
    assert took < 60, took
    with Consumer(cluster.bootstrap, max_wait_ms=200) as c:
        c.assign(topic, None, "earliest")
        values: set[bytes] = set()
        deadline = time.monotonic() + 30
        while len(values) < sent:
            assert time.monotonic() < deadline, f"{len(values)} of {sent} records in the log"
            values.update(r.value for r in c.poll(0.5))
    assert values == {b"v%05d" % i for i in range(sent)}

    # no broker at all: a batch fails when its delivery timeout has passed
    p = Producer(cluster.bootstrap, timeout_ms=1000, delivery_timeout_ms=3000)
    try:
        p.send(topic, b"before", partition=1)
        p.flush()
        for i in cluster.live_ids():
            cluster.kill(i)
        t0 = time.monotonic()
        p.send(topic, b"after", partition=1)
        with pytest.raises(KafkaProtocolError) as e:
            p.flush()
        waited = time.monotonic() - t0
    finally:
        p.cluster.close()
    assert e.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert "expired" in str(e.value) and "delivery.timeout.ms" in str(e.value), str(e.value)
    assert 3.0 <= waited < 3.0 + 2.0, waited

"""ZooKeeper away while the cluster runs, as Kafka handles it: brokers keep serving the
partitions they lead with the ISR as it is (nothing can be recorded, so nothing is
guessed); when ZooKeeper returns, the cluster administers and fails over again."""

from __future__ import annotations

import time

import pytest

from broker.client import Cluster as Client
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.cluster.test_durability import create
from tests.cluster.test_failover import produce, read


def test_brokers_serve_through_a_zookeeper_outage_and_carry_on_after_it(make_cluster, own_zookeeper):
    cluster = make_cluster(3, zookeeper=own_zookeeper, config={"zookeeper.session.timeout.ms": 6000})
    create(cluster, "zo", assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    for p in range(3):
        assert produce(cluster, p + 1, "zo", p, [b"before"]) == 0
    own_zookeeper.kill()
    # the leaders go on: acks=all with the whole ISR still fetching
    for p in range(3):
        assert produce(cluster, p + 1, "zo", p, [b"during"]) == 0
    for p in range(3):
        assert cluster.isr_of("zo", p, via=p + 1) and set(cluster.isr_of("zo", p, via=p + 1)) == {1, 2, 3}
        assert read(cluster.broker(p + 1).bootstrap, "zo", p) == [b"before", b"during"]
    # administration waits for ZooKeeper, then answers a retriable error (not a closed connection)
    with Client(cluster.bootstrap) as c, pytest.raises(KafkaProtocolError) as err:
        c.create_topic("during", 1, 3)
    assert err.value.code == ErrorCode.REQUEST_TIMED_OUT and "ZooKeeper" in str(err.value)
    own_zookeeper.start()
    cluster.wait_for_brokers([1, 2, 3], timeout=60)
    # administration works again (a broker may still be reconnecting: retried, as clients
    # retry REQUEST_TIMED_OUT), and so does failover
    deadline = time.monotonic() + 60
    while True:
        try:
            with Client(cluster.bootstrap) as c:
                c.create_topic("after", 1, 3)
            break
        except KafkaProtocolError as exc:
            if exc.code == ErrorCode.TOPIC_ALREADY_EXISTS:  # an earlier try wrote it, then timed out
                break
            assert exc.code == ErrorCode.REQUEST_TIMED_OUT and time.monotonic() < deadline, exc
            time.sleep(0.5)
    cluster.wait_for_leader("after", 0, everywhere=True)
    cluster.kill(1)
    assert cluster.wait_for_leader("zo", 0, not_in={1}) in (2, 3)
    assert produce(cluster, cluster.leader_of("zo", 0), "zo", 0, [b"after"]) == 0
    assert read(cluster.bootstrap, "zo", 0) == [b"before", b"during", b"after"]

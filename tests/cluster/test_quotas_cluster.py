"""Client quotas in a 3-broker cluster on ZooKeeper: a quota altered through one broker is
written where Kafka 3.x writes it (/config/clients/<c>, /config/users/<u>/clients/<c>,
`<default>` as is, with a /config/changes notification), and applies on another broker
without a restart: that broker describes it and throttles the client's produces there."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from broker.client import Cluster as Client
from broker.client.connection import BrokerConnection
from tests.interop.test_quotas import _produce, alter, describe

pytestmark = pytest.mark.timeout(240)


def test_a_quota_set_through_one_broker_applies_on_another(make_cluster):
    cluster = make_cluster(3)
    topic = "quota-topic"
    with Client(cluster.bootstrap) as c:
        c.create_topic(topic, 1, 1)
    # the harness's wait asks until a broker names the leader: the broker a Metadata goes
    # to may not have heard of the topic yet (UNKNOWN_TOPIC_OR_PARTITION, which the
    # client's topic() does not wait through)
    leader = cluster.wait_for_leader(topic, 0)
    other = next(i for i in cluster.ids if i != leader)
    via = cluster.broker(other).bootstrap
    assert alter(via, [("client-id", "capped")], {"producer_byte_rate": 50_000}) == (0, None)
    assert alter(via, [("user", None), ("client-id", "svc")], {"consumer_byte_rate": 70_000}) == (0, None)

    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start()
    try:
        data, _ = zk.get("/config/clients/capped")
        assert json.loads(data) == {"version": 1, "config": {"producer_byte_rate": "50000"}}
        data, _ = zk.get("/config/users/<default>/clients/svc")
        assert json.loads(data) == {"version": 1, "config": {"consumer_byte_rate": "70000"}}
        notes = [json.loads(zk.get(f"/config/changes/{n}")[0]) for n in sorted(zk.get_children("/config/changes"))]
        assert {"version": 2, "entity_path": "clients/capped"} in notes
        assert {"version": 2, "entity_path": "users/<default>/clients/svc"} in notes
    finally:
        zk.stop()
        zk.close()

    # the leader learnt it from the notification: it describes it and throttles the client
    lead = cluster.broker(leader).bootstrap
    deadline = time.monotonic() + 20
    while describe(lead, [("client-id", 0, "capped")], strict=True) != {
        (("client-id", "capped"),): {"producer_byte_rate": 50_000.0}
    }:
        assert time.monotonic() < deadline, "the quota never reached the leader"
        time.sleep(0.2)
    host, port = lead.split(":")
    conn = BrokerConnection(host, int(port), client_id="capped")
    try:
        throttles = [_produce(conn, topic, 200_000).throttle_time_ms for _ in range(4)]
    finally:
        conn.close()
    assert throttles[0] == 0 and throttles[-1] > 0, throttles
    # removed through a third broker: the leader stops throttling
    third = next(i for i in cluster.ids if i not in (leader, other))
    assert alter(cluster.broker(third).bootstrap, [("client-id", "capped")], {"producer_byte_rate": None}) == (0, None)
    while describe(lead, [("client-id", 0, "capped")], strict=True) != {}:
        assert time.monotonic() < deadline + 20, "the removal never reached the leader"
        time.sleep(0.2)
    conn = BrokerConnection(host, int(port), client_id="capped")
    try:
        assert _produce(conn, topic, 200_000).throttle_time_ms == 0
    finally:
        conn.close()

"""transaction.version across a cluster (KIP-584's finalized features, as Kafka's
ZooKeeper-era brokers keep them in /feature): each broker registers the level its config
allows, the controller finalizes the lowest one among the live brokers, and every broker
serves and advertises that level. A broker left at transaction.version=1 during a rolling
change therefore keeps the whole cluster at 1 — no client learns of version 2 from one
broker and then produces to a broker at 1 without adding its partition to the
transaction (Produce v12 adds it implicitly; a broker at 1 serves up to v11 and refuses
the batch INVALID_TXN_STATE, which is how Kafka's Java producer failed when each broker
advertised its own config) — and once every broker runs at 2, all of them say 2 under a
higher epoch, which is what a client follows. Kafka's `kafka-features describe` reads it."""

from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from broker.client import Cluster
from broker.client.connection import BrokerConnection, ClientError
from broker.native import iter_batches
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.end_txn import EndTxnRequest
from tests.support.kafka_tools import kafka_tool

pytestmark = pytest.mark.interop

TV = "transaction.version"


def _features(c, broker_id: int):
    """(finalized transaction.version or 0, epoch, Produce's max version) as broker_id answers."""
    host, port = c.broker(broker_id).bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port), timeout=5) as conn:
        r = conn.request(
            ApiVersionsRequest(client_software_name="kbroker-test", client_software_version="1"), version=4
        )
    finalized = {f.name: f.max_version_level for f in r.finalized_features}
    produce = next(k.max_version for k in r.api_keys if k.api_key == 0)
    return finalized.get(TV, 0), r.finalized_features_epoch, produce


def _until(c, want, timeout: float = 30.0):
    """Every live broker answers `want(level, epoch, produce)`; their answers."""
    deadline = time.monotonic() + timeout
    while True:
        seen = {b: _features(c, b) for b in c.live_ids()}
        if all(want(*f) for f in seen.values()):
            return seen
        assert time.monotonic() < deadline, f"not within {timeout} s: {seen}"
        time.sleep(0.2)


def _feature_znode(c) -> dict:
    zk = KazooClient(c.zk_connect, timeout=5)
    zk.start(timeout=10)
    try:
        return json.loads(zk.get("/feature")[0])
    finally:
        zk.stop()
        zk.close()


def test_one_broker_at_1_holds_the_cluster_at_1_until_it_runs_at_2(make_cluster):
    c = make_cluster(3, per_broker={3: {TV: 1}})
    seen = _until(c, lambda level, epoch, produce: level == 0 and epoch >= 0 and produce == 11)
    epoch = max(e for _, e, _ in seen.values())
    assert _feature_znode(c) == {"features": {TV: {"max_version_level": 1}}, "version": 2, "status": 1}
    # what goes with version 2 is not served by a broker configured at 2 meanwhile: the
    # connection is closed, as for any version not advertised
    host, port = c.broker(1).bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port), timeout=5) as conn:
        with pytest.raises(ClientError, match="closed"):
            conn.request(
                EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=0, committed=False),
                version=5,
                timeout=10,
            )

    del c.broker(3).config[TV]  # the rolling change reaches broker 3: its default, 2
    c.restart(3)
    seen = _until(c, lambda level, e, produce: level == 2 and e > epoch and produce == 12)
    assert len({e for _, e, _ in seen.values()}) == 1  # one epoch, the same everywhere
    assert _feature_znode(c) == {"features": {TV: {"max_version_level": 2}}, "version": 2, "status": 1}
    out = kafka_tool("kafka-features", "--bootstrap-server", c.bootstrap, "describe").stdout
    line = next(x for x in out.splitlines() if f"Feature: {TV}" in x)
    assert "SupportedMaxVersion: 2" in line and "FinalizedVersionLevel: 2" in line, out


def _markers(c, topic: str, partitions: int):
    """The transaction markers of `topic` in broker 1's copy of its partitions."""
    out = []
    for p in range(partitions):
        for seg in sorted((c.broker(1).data_dir / f"{topic}-{p}").glob("*.log")):
            out += [b for b in iter_batches(seg.read_bytes(), validate=True) if b.is_control]
    return out


def test_a_java_transactional_producer_before_and_after_a_rolling_change_to_2(make_cluster):
    """Kafka's Java producer (4.4.0) asks the broker it bootstraps from, a broker configured
    at 2, and runs transactions over partitions led by all three: at version 1 while broker
    3 is, then at version 2 (one epoch more per commit) once broker 3 runs at 2."""
    c = make_cluster(3, per_broker={3: {TV: 1}})
    topic = "tv-rolling"
    with Cluster(c.bootstrap) as client:
        client.create_topic(topic, 3, 3)
    for p in range(3):
        c.wait_for_leader(topic, p)
    assert {c.leader_of(topic, p) for p in range(3)} == {1, 2, 3}
    _until(c, lambda level, epoch, produce: level == 0 and epoch >= 0)

    def transactions(txn_id: str) -> None:
        kafka_tool(
            "kafka-producer-perf-test",
            "--topic",
            topic,
            "--num-records",
            "2000",
            "--record-size",
            "100",
            "--throughput",
            "4000",
            "--transactional-id",
            txn_id,
            "--transaction-duration-ms",
            "100",
            "--producer-props",
            f"bootstrap.servers={c.broker(1).bootstrap}",
            "partitioner.class=org.apache.kafka.clients.producer.RoundRobinPartitioner",
            timeout=120,
        )

    transactions("tv-at-1")
    at_1 = _markers(c, topic, 3)
    assert len(at_1) >= 3 and {m.producer_epoch for m in at_1} == {0}  # version 1: no bump

    del c.broker(3).config[TV]
    c.restart(3)
    _until(c, lambda level, epoch, produce: level == 2)
    transactions("tv-at-2")
    at_2 = [m for m in _markers(c, topic, 3) if m.producer_id != at_1[0].producer_id]
    assert len(at_2) >= 3 and max(m.producer_epoch for m in at_2) >= 2  # version 2: one bump per commit

"""transaction.version across a cluster (KIP-584's finalized features, as Kafka's
ZooKeeper-era brokers keep them in /feature): each broker registers the level its config
allows, the controller finalizes the lowest one among the live brokers, and every broker
serves and advertises that level. A broker left at transaction.version=1 during a rolling
change therefore keeps the whole cluster at 1 — no client learns of version 2 from one
broker and then sends Produce v12 (which adds partitions to a transaction implicitly) to
a broker that does not take it — and once every broker runs at 2, all of them say 2 under
a higher epoch, which is what a client follows. Kafka's `kafka-features describe` reads it."""
from __future__ import annotations

import json
import time

import pytest
from kazoo.client import KazooClient

from broker.client.connection import BrokerConnection, ClientError
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.end_txn import EndTxnRequest
from tests.support.kafka_tools import kafka_tool

pytestmark = pytest.mark.interop

TV = "transaction.version"


def _features(c, broker_id: int):
    """(finalized transaction.version or 0, epoch, Produce's max version) as broker_id answers."""
    host, port = c.broker(broker_id).bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port), timeout=5) as conn:
        r = conn.request(ApiVersionsRequest(client_software_name="kbroker-test", client_software_version="1"),
                         version=4)
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
            conn.request(EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=0, committed=False),
                         version=5, timeout=10)

    del c.broker(3).config[TV]          # the rolling change reaches broker 3: its default, 2
    c.restart(3)
    seen = _until(c, lambda level, e, produce: level == 2 and e > epoch and produce == 12)
    assert len({e for _, e, _ in seen.values()}) == 1          # one epoch, the same everywhere
    assert _feature_znode(c) == {"features": {TV: {"max_version_level": 2}}, "version": 2, "status": 1}
    out = kafka_tool("kafka-features", "--bootstrap-server", c.bootstrap, "describe").stdout
    line = next(x for x in out.splitlines() if f"Feature: {TV}" in x)
    assert "SupportedMaxVersion: 2" in line and "FinalizedVersionLevel: 2" in line, out

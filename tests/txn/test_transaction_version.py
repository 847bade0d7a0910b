"""transaction.version 2 (KIP-890 part 2) with Apache Kafka's Java client (4.4.0, through
Kafka's kafka-producer-perf-test with a transactional id: it commits a transaction every
--transaction-duration-ms): a broker at the default transaction.version 2 finalizes the
feature in ApiVersions, the client then adds its partition through Produce v12 (no
AddPartitionsToTxn) and every commit bumps its epoch — the markers on disk carry epochs
1, 2, 3 ... and each transaction's batches the epoch the previous commit answered. With
transaction.version 1 nothing of this is offered: every marker keeps the epoch of
InitProducerId, as before."""

from __future__ import annotations

import re

import pytest

from broker.client import Cluster
from broker.client.connection import BrokerConnection, ClientError
from broker.native import iter_batches
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.end_txn import EndTxnRequest
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_tools import kafka_tool
from tests.txn.conftest import TXN_CONFIG

pytestmark = pytest.mark.interop


@pytest.fixture(scope="module", params=[2, 1], ids=["tv2", "tv1"])
def versioned(request, tmp_path_factory):
    tv = request.param
    config = {**TXN_CONFIG, "log.request.api": "Produce"}
    if tv != 2:
        config["transaction.version"] = tv
    with BrokerProcess(tmp_path_factory.mktemp(f"tv{tv}") / "data", config=config, log_level="debug") as b:
        yield tv, b


def _features(bootstrap: str):
    host, port = bootstrap.rsplit(":", 1)
    with BrokerConnection(host, int(port)) as conn:
        resp = conn.request(
            ApiVersionsRequest(client_software_name="kbroker-test", client_software_version="1"), version=4
        )
    versions = {k.api_key: k.max_version for k in resp.api_keys}
    return resp, versions


def test_api_versions_finalize_transaction_version_only_at_2(versioned):
    tv, b = versioned
    resp, versions = _features(b.bootstrap)
    if tv == 2:
        assert [(f.name, f.min_version, f.max_version) for f in resp.supported_features] == [
            ("transaction.version", 0, 2)
        ]
        assert [(f.name, f.min_version_level, f.max_version_level) for f in resp.finalized_features] == [
            ("transaction.version", 2, 2)
        ]
        assert resp.finalized_features_epoch >= 0
        # Produce v12, TxnOffsetCommit v5, EndTxn v5, AddPartitionsToTxn v5
        assert (versions[0], versions[28], versions[26], versions[24]) == (12, 5, 5, 5)
    else:
        assert resp.supported_features == [] and resp.finalized_features == []
        assert (versions[0], versions[28], versions[26], versions[24]) == (11, 4, 4, 4)
        # a version not advertised is not served either: the connection is closed
        host, port = b.bootstrap.rsplit(":", 1)
        with BrokerConnection(host, int(port)) as conn:
            with pytest.raises(ClientError, match="closed"):
                conn.request(
                    EndTxnRequest(transactional_id="t", producer_id=1, producer_epoch=0, committed=False),
                    version=5,
                    timeout=10,
                )
            assert b.running


def test_a_java_producer_bumps_its_epoch_every_commit_with_transaction_version_2(versioned, topic_name):
    tv, b = versioned
    with Cluster(b.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
        c.topic(topic_name, wait_s=10)
    txn_id = f"perf-{topic_name}"
    kafka_tool(
        "kafka-producer-perf-test",
        "--topic",
        topic_name,
        "--num-records",
        "3000",
        "--record-size",
        "100",
        "--throughput",
        "3000",
        "--transactional-id",
        txn_id,
        "--transaction-duration-ms",
        "150",
        "--producer-props",
        f"bootstrap.servers={b.bootstrap}",
        timeout=120,
    )
    batches = []
    for seg in sorted((b.data_dir / f"{topic_name}-0").glob("*.log")):
        batches += list(iter_batches(seg.read_bytes(), validate=True))
    markers = [x for x in batches if x.is_control]
    data = [x for x in batches if not x.is_control]
    assert len(markers) >= 3, f"{len(markers)} transactions"
    assert sum(x.last_offset_delta + 1 for x in data) == 3000
    assert {x.producer_id for x in batches} == {markers[0].producer_id}
    assert all(x.is_transactional for x in data)
    if tv == 2:
        # one epoch more per commit; a transaction's batches carry the epoch of the commit before
        assert [m.producer_epoch for m in markers] == list(range(1, len(markers) + 1))
        epoch = 0
        for x in batches:
            if x.is_control:
                epoch = x.producer_epoch
            else:
                assert x.producer_epoch == epoch and (epoch == 0 or x.base_sequence >= 0)
    else:
        assert {x.producer_epoch for x in batches} == {0}
    produce_versions = set(re.findall(r"completed Produce v(\d+) ", b.log_path.read_text(errors="replace")))
    assert produce_versions == ({"12"} if tv == 2 else {"11"}), produce_versions

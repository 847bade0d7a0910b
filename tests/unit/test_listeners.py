"""Several named listeners: what Metadata, FindCoordinator and DescribeCluster answer on
each (the endpoints of the listener the request came in on, as Kafka's metadata cache),
what the controller tells brokers (every endpoint; the inter-broker one to reach them)
and how UpdateMetadata's brokers land in the cache — through fake request contexts,
without a broker process."""

import uuid
from types import SimpleNamespace

from broker.cluster.cache import MetadataCache
from broker.cluster.controller.channel_manager import SECURITY_PROTOCOL_IDS
from broker.cluster.controller.controller import _endpoint
from broker.cluster.metadata import BrokerInfo, PartitionState, TopicInfo
from broker.cluster.store.znodes import BrokerIdZNode, BrokerRegistration, EndPoint
from broker.config import BrokerConfig
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_cluster import DescribeClusterRequest
from broker.protocol.messages.metadata import MetadataRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest
from broker.server.handlers import describe_cluster, metadata, update_metadata

CONFIG = BrokerConfig(
    {
        "listeners": "EXTERNAL://:9092,INTERNAL://:9093",
        "listener.security.protocol.map": "EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
    }
)


def cache_with_brokers():
    cache = MetadataCache(1, CONFIG)
    cache.cluster_id = "c"
    cache.set_brokers(
        [
            BrokerInfo(
                1, "10.0.0.1", 9093, endpoints={"EXTERNAL": ("b1.example", 9092), "INTERNAL": ("10.0.0.1", 9093)}
            ),
            # broker 2 has no EXTERNAL listener
            BrokerInfo(2, "10.0.0.2", 9093, endpoints={"INTERNAL": ("10.0.0.2", 9093)}),
        ]
    )
    parts = {0: PartitionState(0, [1, 2], 1, 0, [1, 2]), 1: PartitionState(1, [2, 1], 2, 0, [2, 1])}
    cache.put_topic(TopicInfo("t", uuid.uuid4(), parts))
    return cache


def ctx(cache, listener, version, request_cls):
    return SimpleNamespace(
        services=SimpleNamespace(metadata=cache, config=CONFIG),
        listener_name=listener,
        has_right=lambda *a, **k: True,
        api_version=version,
        header=None,
        connection=None,
        received=0.0,
    )


def test_metadata_answers_with_the_endpoints_of_the_clients_listener():
    cache = cache_with_brokers()
    external = metadata.handle(ctx(cache, "EXTERNAL", 12, MetadataRequest), MetadataRequest(topics=None))
    assert [(b.node_id, b.host, b.port) for b in external.brokers] == [(1, "b1.example", 9092)]
    codes = {p.partition_index: p.error_code for p in external.topics[0].partitions}
    # partition 1's leader (broker 2) has no EXTERNAL endpoint: LISTENER_NOT_FOUND, as Kafka
    assert codes == {0: ErrorCode.NONE, 1: ErrorCode.LISTENER_NOT_FOUND}
    internal = metadata.handle(ctx(cache, "INTERNAL", 12, MetadataRequest), MetadataRequest(topics=None))
    assert [(b.node_id, b.host, b.port) for b in internal.brokers] == [(1, "10.0.0.1", 9093), (2, "10.0.0.2", 9093)]
    assert all(p.error_code == 0 for p in internal.topics[0].partitions)
    # before v6 there is no LISTENER_NOT_FOUND: LEADER_NOT_AVAILABLE
    old = metadata.handle(ctx(cache, "EXTERNAL", 5, MetadataRequest), MetadataRequest(topics=None))
    assert {p.partition_index: p.error_code for p in old.topics[0].partitions}[1] == ErrorCode.LEADER_NOT_AVAILABLE


def test_describe_cluster_answers_per_listener():
    cache = cache_with_brokers()
    resp = describe_cluster.handle(ctx(cache, "INTERNAL", 1, None), DescribeClusterRequest(endpoint_type=1))
    assert [(b.broker_id, b.host) for b in resp.brokers] == [(1, "10.0.0.1"), (2, "10.0.0.2")]
    resp = describe_cluster.handle(ctx(cache, "EXTERNAL", 1, None), DescribeClusterRequest(endpoint_type=1))
    assert [(b.broker_id, b.host) for b in resp.brokers] == [(1, "b1.example")]


def test_the_controller_reaches_brokers_on_the_inter_broker_listener_and_tells_every_endpoint():
    reg = BrokerRegistration(
        3, (EndPoint("EXTERNAL", "b3.example", 9092, "PLAINTEXT"), EndPoint("INTERNAL", "10.0.0.3", 9093, "SSL"))
    )
    ep = _endpoint(reg, 7, "INTERNAL")
    assert (ep.host, ep.port, ep.epoch) == ("10.0.0.3", 9093, 7)
    assert [e.listener_name for e in ep.endpoints] == ["EXTERNAL", "INTERNAL"]
    # a broker without that listener: its first endpoint
    assert _endpoint(reg, 7, "OTHER").host == "b3.example"
    # the registration carries every endpoint and the protocol map, as Kafka's
    data = BrokerIdZNode.encode(reg)
    assert b'"listener_security_protocol_map":{"EXTERNAL":"PLAINTEXT","INTERNAL":"SSL"}' in data
    assert b'"endpoints":["EXTERNAL://b3.example:9092","INTERNAL://10.0.0.3:9093"]' in data
    assert BrokerIdZNode.decode(3, data).endpoints == reg.endpoints
    assert SECURITY_PROTOCOL_IDS["SSL"] == 1 and SECURITY_PROTOCOL_IDS["SASL_SSL"] == 3


def test_update_metadata_keeps_every_endpoint_and_reaches_brokers_on_the_inter_broker_one():
    R = UpdateMetadataRequest
    broker = R.UpdateMetadataBroker(
        id=5,
        rack=None,
        endpoints=[
            R.UpdateMetadataEndpoint(port=9092, host="b5.example", listener="EXTERNAL", security_protocol=0),
            R.UpdateMetadataEndpoint(port=9093, host="10.0.0.5", listener="INTERNAL", security_protocol=1),
        ],
    )
    info = update_metadata._broker(broker, "INTERNAL")
    assert (info.host, info.port) == ("10.0.0.5", 9093)
    assert info.endpoint("EXTERNAL") == ("b5.example", 9092) and info.endpoint("OTHER") is None

"""DescribeConfigs reports where each value comes from in Kafka's ConfigSource numbering,
read through the clients' own enums: a value nobody set is DEFAULT_CONFIG (and
is_default), a topic override DYNAMIC_TOPIC_CONFIG, a server.properties value
STATIC_BROKER_CONFIG, for the topic's config derived from it too."""

from __future__ import annotations

import pytest

from broker.client import Cluster
from tests.support.broker_proc import BrokerProcess
from tests.support.deps import require_module

pytestmark = pytest.mark.interop

TOPIC = "described"
TIMEOUT_S = 30


class FileConfiguredBroker(BrokerProcess):
    """A broker started with --config FILE, as an operator runs it."""

    def __init__(self, data_dir, config_file, **kw):
        super().__init__(data_dir, **kw)
        self.config_file = config_file

    def command(self) -> list[str]:
        return super().command() + ["--config", str(self.config_file)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    root = tmp_path_factory.mktemp("describe-configs")
    props = root / "server.properties"
    props.write_text("# as an operator writes it\nlog.retention.ms=3600000\nnum.partitions=2\n")
    with FileConfiguredBroker(root / "data", props) as b:
        with Cluster(b.bootstrap) as c:
            c.create_topic(TOPIC, 1, 1, configs={"cleanup.policy": "compact"})
        yield b


def test_config_sources_through_confluent_kafka(broker):
    require_module("confluent_kafka")
    from confluent_kafka.admin import AdminClient, ConfigResource, ConfigSource, ResourceType

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    topic_res = ConfigResource(ResourceType.TOPIC, TOPIC)
    broker_res = ConfigResource(ResourceType.BROKER, "0")
    futures = admin.describe_configs([topic_res, broker_res], request_timeout=TIMEOUT_S)
    topic = futures[topic_res].result(TIMEOUT_S)
    brk = futures[broker_res].result(TIMEOUT_S)

    def source(entry):
        return ConfigSource(entry.source)

    assert source(topic["cleanup.policy"]) == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert topic["cleanup.policy"].value == "compact" and not topic["cleanup.policy"].is_default
    assert source(topic["retention.ms"]) == ConfigSource.STATIC_BROKER_CONFIG
    assert topic["retention.ms"].value == "3600000" and not topic["retention.ms"].is_default
    assert source(topic["max.message.bytes"]) == ConfigSource.DEFAULT_CONFIG
    assert topic["max.message.bytes"].is_default
    assert source(brk["log.retention.ms"]) == ConfigSource.STATIC_BROKER_CONFIG
    assert source(brk["num.partitions"]) == ConfigSource.STATIC_BROKER_CONFIG
    assert not brk["num.partitions"].is_default
    assert source(brk["log.segment.bytes"]) == ConfigSource.DEFAULT_CONFIG
    assert brk["log.segment.bytes"].is_default
    # every default the broker reports, it reports as one
    defaults = [e for e in list(topic.values()) + list(brk.values()) if e.is_default]
    assert defaults and all(source(e) == ConfigSource.DEFAULT_CONFIG for e in defaults)


def test_config_sources_through_kafka_python(broker):
    require_module("kafka")
    from kafka.admin import ConfigResource, ConfigResourceType, ConfigSourceType, KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=TIMEOUT_S * 1000)
    try:
        got = admin.describe_configs(
            [ConfigResource(ConfigResourceType.TOPIC, TOPIC), ConfigResource(ConfigResourceType.BROKER, "0")],
            include_synonyms=True,
            config_filter="all",
        )
    finally:
        admin.close()
    topic, brk = got["topic"][TOPIC], got["broker"]["0"]
    assert topic["cleanup.policy"]["config_source"] == ConfigSourceType.DYNAMIC_TOPIC_CONFIG.name
    assert topic["retention.ms"]["config_source"] == ConfigSourceType.STATIC_BROKER_CONFIG.name
    assert topic["max.message.bytes"]["config_source"] == ConfigSourceType.DEFAULT_CONFIG.name
    assert brk["log.retention.ms"]["config_source"] == ConfigSourceType.STATIC_BROKER_CONFIG.name
    assert brk["log.segment.bytes"]["config_source"] == ConfigSourceType.DEFAULT_CONFIG.name
    # synonyms name their source too: the override over the server.properties value
    # (as Kafka lists them: every broker key the value could come from, defaults too)
    syn = {s["name"]: s["source"] for s in topic["retention.ms"]["synonyms"]}
    assert syn == {
        "log.retention.ms": ConfigSourceType.STATIC_BROKER_CONFIG.name,
        "log.retention.hours": ConfigSourceType.DEFAULT_CONFIG.name,
    }
    syn = {s["name"]: s["source"] for s in topic["cleanup.policy"]["synonyms"]}
    assert syn == {
        "cleanup.policy": ConfigSourceType.DYNAMIC_TOPIC_CONFIG.name,
        "log.cleanup.policy": ConfigSourceType.DEFAULT_CONFIG.name,
    }
    # nothing this broker reports is a broker-logger config
    sources = {e["config_source"] for e in list(topic.values()) + list(brk.values())}
    assert ConfigSourceType.DYNAMIC_BROKER_LOGGER_CONFIG.name not in sources

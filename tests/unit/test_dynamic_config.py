"""Dynamic broker configs: precedence of the layers and Kafka's validation (config.py's
validate_dynamic / BrokerConfig.apply_dynamic)."""

import copy

import pytest

from broker.config import (
    BROKER_KEYS,
    DYNAMIC_KEYS,
    DYNAMIC_ONLY_KEYS,
    BrokerConfig,
    ConfigError,
    ConfigSource,
    is_dynamic,
    parse_dynamic_lenient,
    validate_dynamic,
)


def _config(**static):
    return BrokerConfig({k.replace("_", "."): v for k, v in static.items()})


def test_precedence_broker_over_default_over_static_over_default():
    c = BrokerConfig({"message.max.bytes": "5000"})
    assert c["message.max.bytes"] == 5000 and c.source("message.max.bytes") == ConfigSource.STATIC_BROKER_CONFIG
    changed = c.apply_dynamic(validate_dynamic({"message.max.bytes": "4000"}, False), {})
    assert changed == {"message.max.bytes"}
    assert c["message.max.bytes"] == 4000
    assert c.source("message.max.bytes") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    c.apply_dynamic(
        validate_dynamic({"message.max.bytes": "4000"}, False), validate_dynamic({"message.max.bytes": "3000"}, True)
    )
    assert c["message.max.bytes"] == 3000 and c.source("message.max.bytes") == ConfigSource.DYNAMIC_BROKER_CONFIG
    # the per-broker value deleted: the default again; both deleted: server.properties
    assert c.apply_dynamic(validate_dynamic({"message.max.bytes": "4000"}, False), {}) == {"message.max.bytes"}
    assert c["message.max.bytes"] == 4000
    c.apply_dynamic({}, {})
    assert c["message.max.bytes"] == 5000 and c.source("message.max.bytes") == ConfigSource.STATIC_BROKER_CONFIG
    c2 = BrokerConfig({})
    c2.apply_dynamic({}, {})
    assert c2["message.max.bytes"] == BROKER_KEYS["message.max.bytes"].default
    assert c2.source("message.max.bytes") == ConfigSource.DEFAULT_CONFIG


def test_a_dynamic_synonym_hides_the_static_chain():
    # Kafka's overrideProps: a dynamic log.retention.hours removes the static log.retention.ms
    c = BrokerConfig({"log.retention.ms": "1000"})
    assert c.retention_ms == 1000
    c.apply_dynamic(validate_dynamic({"log.retention.hours": "2"}, False), {})
    assert c.retention_ms == 2 * 3600 * 1000
    assert c.source("log.retention.ms") == ConfigSource.DEFAULT_CONFIG
    c.apply_dynamic(
        validate_dynamic({"log.retention.hours": "2"}, False), validate_dynamic({"log.retention.ms": "500"}, True)
    )
    assert c.retention_ms == 500
    c.apply_dynamic({}, {})
    assert c.retention_ms == 1000


def test_topic_defaults_follow_the_dynamic_layer():
    c = BrokerConfig({})
    c.apply_dynamic(validate_dynamic({"log.retention.ms": "60000", "min.insync.replicas": "2"}, False), {})
    lc = c.log_config({})
    assert lc.retention_ms == 60000 and lc.min_insync_replicas == 2
    assert lc.source("retention.ms") == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG
    assert c.log_config({"retention.ms": 5}).retention_ms == 5  # a topic override still wins


def test_layers_for_describe():
    c = BrokerConfig({"log.retention.hours": "10"})
    c.apply_dynamic(
        validate_dynamic({"log.retention.ms": "7"}, False), validate_dynamic({"max.connections": "9"}, True)
    )
    assert c.layer(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) == {"log.retention.ms": 7}
    assert c.layer(ConfigSource.DYNAMIC_BROKER_CONFIG) == {"max.connections": 9}
    assert c.layer(ConfigSource.STATIC_BROKER_CONFIG)["log.retention.hours"] == 10
    assert c.layer(ConfigSource.DEFAULT_CONFIG)["log.retention.hours"] == 168


@pytest.mark.parametrize(
    "configs, per_broker, message",
    [
        ({"broker.id": "2"}, True, "Cannot update these configs dynamically: Set(broker.id)"),
        (
            {"log.dirs": "/x", "zookeeper.connect": "z"},
            False,
            "Cannot update these configs dynamically: Set(log.dirs, zookeeper.connect)",
        ),
        (
            {"ssl.keystore.location": "/k.pem"},
            True,
            "These security configs can be dynamically updated only per-listener using the listener prefix: "
            "Set(ssl.keystore.location)",
        ),
        (
            {"listener.name.ssl.ssl.keystore.location": "/k.pem"},
            False,
            "Cannot update these configs at default cluster level, broker id must be specified: "
            "Set(listener.name.ssl.ssl.keystore.location)",
        ),
        (
            {"message.max.bytes": "big"},
            False,
            "Invalid value big for configuration message.max.bytes: invalid value 'big' (expected int)",
        ),
        ({"log.cleanup.policy": "shred"}, False, "Invalid value shred for configuration log.cleanup.policy"),
        ({"no.such.key": "1"}, True, "Unknown configs: Set(no.such.key)"),
        (
            {"sasl.enabled.mechanisms": "PLAIN"},
            True,
            "Cannot update these configs dynamically: Set(sasl.enabled.mechanisms)",
        ),
        (
            {"listener.name.ssl.sasl.enabled.mechanisms": "PLAIN"},
            True,
            "Cannot update these configs dynamically: Set(listener.name.ssl.sasl.enabled.mechanisms)",
        ),
    ],
)
def test_validation_refuses_as_kafka(configs, per_broker, message):
    with pytest.raises(ConfigError) as err:
        validate_dynamic(configs, per_broker, ["SSL", "PLAINTEXT"])
    assert str(err.value).startswith(message)


def test_listener_keys_per_broker_only_and_on_a_known_listener():
    ok = validate_dynamic(
        {"listener.name.ssl.ssl.keystore.location": "/k.pem", "listener.name.ssl.ssl.keystore.type": "PEM"},
        True,
        ["SSL"],
    )
    assert ok["listener.name.ssl.ssl.keystore.type"] == "PEM"
    with pytest.raises(ConfigError, match="no listener OTHER"):
        validate_dynamic({"listener.name.other.ssl.keystore.location": "/k.pem"}, True, ["SSL"])
    with pytest.raises(ConfigError, match="does not store passwords"):
        validate_dynamic({"listener.name.ssl.ssl.keystore.password": "secret"}, True, ["SSL"])


def test_max_connections_is_cluster_level_and_per_ip_zero_needs_overrides():
    assert validate_dynamic({"max.connections": "10"}, False) == {"max.connections": 10}
    with pytest.raises(ConfigError, match="max.connections.per.ip.overrides"):
        validate_dynamic({"max.connections.per.ip": "0"}, False)
    assert (
        validate_dynamic({"max.connections.per.ip": "0", "max.connections.per.ip.overrides": "127.0.0.1:5"}, False)[
            "max.connections.per.ip"
        ]
        == 0
    )


def test_kafka_dynamic_keys_without_effect_are_taken_and_stored():
    out = validate_dynamic({"log.cleaner.threads": "2", "num.io.threads": "16"}, False)
    assert out == {"log.cleaner.threads": "2", "num.io.threads": "16"}
    c = BrokerConfig({})
    assert c.apply_dynamic(out, {}) == set()
    assert c.dynamic_default == out


def test_read_only_marks():
    assert is_dynamic("message.max.bytes") and is_dynamic("log.retention.ms") and is_dynamic("max.connections")
    assert is_dynamic("listener.name.ssl.ssl.keystore.location")
    assert not is_dynamic("broker.id") and not is_dynamic("listeners") and not is_dynamic("ssl.keystore.location")
    assert DYNAMIC_KEYS <= set(BROKER_KEYS) | set(DYNAMIC_ONLY_KEYS)


def test_throttle_rates_only_dynamic_and_in_their_layer():
    out = validate_dynamic({"leader.replication.throttled.rate": "1000000"}, False)
    assert out == {"leader.replication.throttled.rate": 1000000}
    with pytest.raises(ConfigError, match="Invalid value -5"):
        validate_dynamic({"follower.replication.throttled.rate": "-5"}, True)
    c = BrokerConfig({})
    c.apply_dynamic(out, {})
    assert c.layer(ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG) == out
    with pytest.raises(ConfigError):  # not a server.properties key (as in Kafka)
        BrokerConfig({"leader.replication.throttled.rate": "5"})


def test_the_store_read_leniently():
    out = parse_dynamic_lenient(
        {
            "message.max.bytes": "x",
            "log.retention.ms": "5",
            "broker.id": "3",
            "listener.name.ssl.ssl.keystore.location": "/k.pem",
        },
        False,
        "the default",
    )
    assert out == {"log.retention.ms": 5}


def test_a_copy_is_independent():
    c = BrokerConfig({})
    candidate = copy.copy(c)
    candidate.apply_dynamic({}, validate_dynamic({"message.max.bytes": "10"}, True))
    assert candidate["message.max.bytes"] == 10
    assert c["message.max.bytes"] == BROKER_KEYS["message.max.bytes"].default


def test_an_in_process_broker_alters_describes_and_applies(tmp_path, caplog):
    """The wiring on the embedded store, in process: an alter of the cluster default and
    of the broker itself is stored, comes back through the change notification, moves the
    effective config and the topic defaults, and DescribeConfigs names the layers; a
    restart reads the store again."""
    import asyncio
    import logging

    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.describe_configs import DescribeConfigsResponse as R
    from broker.server import broker_configs
    from broker.server.broker import Broker
    from tests.support.ports import free_port

    data = tmp_path / "data"
    data.mkdir()

    def config():
        return BrokerConfig(
            {
                "broker.id": 1,
                "log.dirs": str(data),
                "message.max.bytes": "5000",
                "listeners": f"PLAINTEXT://127.0.0.1:{free_port()}",
            }
        )

    def describe(broker, name):
        return {
            e.name: e
            for e in broker_configs.describe(
                broker, name, None, R.DescribeConfigsSynonym, R.DescribeConfigsResourceResult, False
            )
        }

    async def first():
        broker = Broker(config())
        await broker.start()
        try:
            await broker_configs.alter(broker, "", lambda c: {**c, "message.max.bytes": "4000"}, False)
            assert broker.config["message.max.bytes"] == 4000
            assert broker.metadata.log_config("any").max_message_bytes == 4000
            await broker_configs.alter(broker, "1", lambda c: {**c, "message.max.bytes": "3000"}, False)
            assert broker.config["message.max.bytes"] == 3000
            e = describe(broker, "1")["message.max.bytes"]
            assert (e.value, e.config_source, e.read_only) == ("3000", ConfigSource.DYNAMIC_BROKER_CONFIG, False)
            assert [(s.name, s.value, s.source) for s in e.synonyms] == [
                ("message.max.bytes", "3000", 2),
                ("message.max.bytes", "4000", 3),
                ("message.max.bytes", "5000", 4),
                ("message.max.bytes", "1048588", 5),
            ]
            assert describe(broker, "1")["broker.id"].read_only
            assert list(describe(broker, "")) == ["message.max.bytes"]
            await broker_configs.alter(broker, "1", lambda c: {**c, "log.retention.ms": "9"}, True)  # validate only
            assert broker.config.retention_ms != 9
            with pytest.raises(KafkaProtocolError, match="Unexpected broker id, expected 1, but received 2"):
                await broker_configs.alter(broker, "2", lambda c: c, False)
            with pytest.raises(KafkaProtocolError, match="Cannot update these configs dynamically: Set"):
                await broker_configs.alter(broker, "1", lambda c: {**c, "log.dirs": "/x"}, False)
            with caplog.at_level(logging.WARNING, logger="broker.server.broker"):
                await broker_configs.alter(broker, "", lambda c: {**c, "log.cleaner.threads": "4"}, False)
            assert any("dynamic config log.cleaner.threads=4 has no effect" in r.getMessage() for r in caplog.records)
            assert describe(broker, "")["log.cleaner.threads"].value == "4"
        finally:
            await broker.shutdown()

    async def second():
        broker = Broker(config())
        await broker.start()
        try:
            assert broker.config["message.max.bytes"] == 3000  # read from the store at start
            await broker_configs.alter(broker, "1", lambda c: {}, False)
            assert broker.config["message.max.bytes"] == 4000
        finally:
            await broker.shutdown()

    asyncio.run(first())
    asyncio.run(second())

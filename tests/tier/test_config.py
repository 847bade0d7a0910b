"""Tiered storage configs (KIP-405, KIP-950) with Kafka's names, defaults and checks
(broker/config.py check_remote_storage): the unit checks with the system enabled and
disabled, and what a real broker answers confluent-kafka's AdminClient (Kafka's
message, INVALID_CONFIG)."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, NewTopic

from broker.config import (
    IGNORED_KAFKA_KEYS,
    TIERED_STORAGE_NOT_SERVED,
    TOPIC_KEYS,
    BrokerConfig,
    ConfigError,
    check_remote_storage,
    validate_topic_configs,
)
from tests.support.broker_proc import BrokerProcess

DISABLED = "Tiered Storage functionality is disabled in the broker. Topic cannot be configured with remote log storage."


def lc(broker: dict | None = None, **topic: str):
    cfg = BrokerConfig({"log.dir": "/tmp/kbroker-tier-config", **(broker or {})})
    return cfg.log_config(validate_topic_configs({k.replace("__", "."): v for k, v in topic.items()}))


def refused(broker: dict | None = None, existing: dict | None = None, **topic: str) -> str:
    with pytest.raises(ConfigError) as info:
        check_remote_storage(lc(broker, **topic), existing, system_enabled=True)
    return str(info.value)


def test_kafka_defaults_and_synonyms():
    c = lc()
    assert (c["remote.storage.enable"], c["local.retention.ms"], c["local.retention.bytes"]) == (False, -2, -2)
    assert (c["remote.log.copy.disable"], c["remote.log.delete.on.disable"]) == (False, False)
    assert TOPIC_KEYS["local.retention.ms"].broker_key == "log.local.retention.ms"
    # -2 means "as the total retention" (Kafka's LogConfig.localRetentionMs/Bytes)
    c = lc({"log.retention.ms": "1000", "log.retention.bytes": "5000"})
    assert (c.local_retention_ms, c.local_retention_bytes) == (1000, 5000)
    c = lc({"log.local.retention.ms": "10"}, retention__ms="1000")
    assert c.local_retention_ms == 10
    with pytest.raises(ConfigError, match="local.retention.ms"):
        validate_topic_configs({"local.retention.ms": "-3"})


def test_a_topic_asking_for_remote_storage_without_the_system_is_refused():
    with pytest.raises(ConfigError) as info:
        check_remote_storage(lc(remote__storage__enable="true"), None, system_enabled=False)
    assert str(info.value) == DISABLED
    # the other keys alone are Kafka's, accepted as Kafka accepts them (no effect without remote storage)
    check_remote_storage(lc(local__retention__ms="10", remote__log__copy__disable="true"), None, False)


def test_compacted_topics_are_refused():
    assert refused(remote__storage__enable="true", cleanup__policy="compact") == (
        "Remote log storage is unsupported for the compacted topics"
    )
    assert "compacted" in refused(remote__storage__enable="true", cleanup__policy="delete,compact")


def test_local_retention_is_bounded_by_total_retention():
    on = {"remote__storage__enable": "true"}
    assert refused(**on, retention__bytes="100", local__retention__bytes="200") == (
        "Invalid value 200 for configuration local.retention.bytes: Value must not be more than "
        "retention.bytes property value: 100"
    )
    assert refused(**on, retention__ms="1000", local__retention__ms="-1") == (
        "Invalid value -1 for configuration local.retention.ms: Value must not be -1 as retention.ms value "
        "is set as 1000."
    )
    # within bounds, -2, or unlimited total: accepted
    check_remote_storage(lc(**on, retention__ms="1000", local__retention__ms="500"), None, True)
    check_remote_storage(lc(**on, retention__ms="-1", local__retention__ms="-1"), None, True)
    check_remote_storage(lc(**on, retention__bytes="100"), None, True)
    # the broker's defaults count as the topic's (Kafka validates the merged configs)
    assert "local.retention.bytes" in refused({"log.local.retention.bytes": "300"}, **on, retention__bytes="100")


def test_copy_disable_needs_equal_retentions():
    on = {"remote__storage__enable": "true", "remote__log__copy__disable": "true"}
    assert "`local.retention.ms` and `retention.ms` must be set to the identical value" in refused(
        **on, retention__ms="1000", local__retention__ms="500"
    )
    check_remote_storage(lc(**on, retention__ms="1000", local__retention__ms="1000"), None, True)


def test_turning_remote_storage_off_needs_delete_on_disable():
    was = {"remote.storage.enable": "true"}
    assert refused(existing=was).startswith("It is invalid to disable remote storage without deleting remote data.")
    check_remote_storage(lc(remote__log__delete__on__disable="true"), was, True)
    check_remote_storage(lc(), {"remote.storage.enable": "false"}, True)


def broker_cfg(**extra: str) -> BrokerConfig:
    return BrokerConfig(
        {
            "log.dir": "/tmp/kbroker-tier-config",
            "remote.log.storage.system.enable": "true",
            "remote.log.storage.manager.class.name": "filesystem",
            "rsm.config.dir": "/mnt/nas",
            **extra,
        }
    )


def test_the_broker_keys_and_their_refusals():
    cfg = broker_cfg()
    assert cfg.remote_log_storage_system_enabled and cfg.rsm_config == {"dir": "/mnt/nas"}
    assert cfg.warnings == []
    assert not BrokerConfig({"log.dir": "/x"}).remote_log_storage_system_enabled
    # Kafka's keys kbroker has no use for are still accepted with a warning
    assert IGNORED_KAFKA_KEYS["remote.log.reader.threads"] == TIERED_STORAGE_NOT_SERVED
    for extra, message in (
        ({"remote.log.storage.manager.class.name": "s3"}, "s3: the S3 remote storage manager is not available"),
        ({"remote.log.storage.manager.class.name": "com.example.Rsm"}, "kbroker loads no Java plugins"),
        ({"rsm.config.dir": "nas"}, "rsm.config.dir: 'nas' is not an absolute path"),
        ({"rsm.config.dir": ""}, "rsm.config.dir: the filesystem remote storage manager needs a directory"),
        ({"zookeeper.connect": "127.0.0.1:2181"}, "runs on a broker alone so far"),
    ):
        with pytest.raises(ConfigError) as info:
            broker_cfg(**extra)
        assert message in str(info.value)


@pytest.fixture(scope="module")
def admin(tmp_path_factory):
    with BrokerProcess(tmp_path_factory.mktemp("tier-config") / "data") as b:
        yield AdminClient({"bootstrap.servers": b.bootstrap})


def _error(future) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        future.result(30)
    return info.value.args[0]


def test_librdkafka_admin_sees_kafkas_refusal(admin):
    fs = admin.create_topics([NewTopic("tiered", 1, 1, config={"remote.storage.enable": "true"})])
    err = _error(fs["tiered"])
    assert err.code() == KafkaError.INVALID_CONFIG and err.str() == DISABLED
    # the KIP-950 and local retention keys are Kafka's topic configs: taken and described
    fs = admin.create_topics([NewTopic("plain", 1, 1, config={"local.retention.ms": "60000"})])
    fs["plain"].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, "plain")
    described = admin.describe_configs([res])[res].result(30)
    assert described["local.retention.ms"].value == "60000"
    assert described["local.retention.bytes"].value == "-2"
    assert described["remote.storage.enable"].value == "false"
    # altering an existing topic is checked the same way
    alter = ConfigResource(
        "topic",
        "plain",
        incremental_configs=[ConfigEntry("remote.storage.enable", "true", incremental_operation=AlterConfigOpType.SET)],
    )
    err = _error(admin.incremental_alter_configs([alter])[alter])
    assert err.code() == KafkaError.INVALID_CONFIG and err.str() == DISABLED

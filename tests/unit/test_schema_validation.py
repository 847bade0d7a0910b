"""broker/registry/validation.py without a broker: the topic configs' parsing, and a
broker without a registry refusing every batch of a topic that asks for validation (the
configs are refused on such a broker; another broker may have set them)."""

import gc

import pytest

from broker.config import BrokerConfig, ConfigError, subject_name_strategy, validate_topic_configs
from broker.native import BatchBuilder, InvalidRecordError
from broker.registry.validation import RecordValidationError, SchemaValidation


def test_strategies_by_class_name_or_short_name():
    assert subject_name_strategy("io.confluent.kafka.serializers.subject.RecordNameStrategy") == "RecordNameStrategy"
    assert subject_name_strategy("TopicRecordNameStrategy") == "TopicRecordNameStrategy"
    assert subject_name_strategy("io.confluent.kafka.serializers.subject.strategy.Other") is None
    parsed = validate_topic_configs(
        {"confluent.key.schema.validation": "TRUE", "confluent.key.subject.name.strategy": "TopicNameStrategy"}
    )
    assert parsed == {
        "confluent.key.schema.validation": True,
        "confluent.key.subject.name.strategy": "TopicNameStrategy",
    }
    with pytest.raises(ConfigError, match="subject name strategy"):
        validate_topic_configs({"confluent.value.subject.name.strategy": "NameStrategy"})
    with pytest.raises(ConfigError):
        validate_topic_configs({"confluent.value.schema.validation": "yes"})


def test_a_topic_without_validation_has_no_check():
    cfg = BrokerConfig().log_config({})
    assert SchemaValidation(None).check_for("t", cfg) is None and cfg.schema_validation is False


def test_without_a_registry_every_batch_is_refused():
    v = SchemaValidation(None)
    check = v.check_for("t", BrokerConfig().log_config({"confluent.value.schema.validation": True}))
    b = BatchBuilder()
    b.append(0, None, b"\x00\x00\x00\x00\x01payload")
    with pytest.raises(RecordValidationError, match="no schema registry") as info:
        check.check(b.build())
    assert isinstance(info.value, InvalidRecordError) and info.value.record_errors == []
    # validation turned off: the check goes once nothing holds it (the logs' LogConfig)
    assert v.check_for("t", BrokerConfig().log_config({})) is None and list(v.checks) == ["t"]
    del check, info  # (the traceback holds the check too)
    gc.collect()
    assert list(v.checks) == []

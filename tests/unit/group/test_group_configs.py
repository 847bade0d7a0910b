"""broker/group/group_configs.py without a broker: what a group runs with (its override,
clamped into the broker's current bounds as Kafka's GroupConfig.evaluate does, else the
broker's default), the share.* values the share group code reads through one call, and
Kafka's checks of share.auto.offset.reset's durations. The wire behaviour (codes and
messages beside Kafka 4.4's) is tests/groups/test_group_configs.py's."""

import asyncio

import pytest

from broker.config import BrokerConfig, ConfigError
from broker.group.group_configs import GROUP_KEYS, GroupConfigs, share_group_values, validate
from broker.protocol.errors import KafkaProtocolError


def config(**kw) -> BrokerConfig:
    return BrokerConfig({"log.dirs": "/tmp/unused", **{k.replace("__", "."): v for k, v in kw.items()}})


def test_a_group_runs_with_its_override_else_the_broker_default():
    gc = GroupConfigs(config(group__consumer__session__timeout__ms=50000))
    gc._overrides["g"] = {"consumer.heartbeat.interval.ms": "6000", "share.auto.offset.reset": "earliest"}
    v = gc.resolve("g")
    assert (v.consumer_session_timeout_ms, v.consumer_heartbeat_interval_ms) == (50000, 6000)
    assert gc.resolve("other").consumer_heartbeat_interval_ms == 5000
    share = share_group_values(gc, "g")
    assert (share.auto_offset_reset, share.isolation_level, share.record_lock_duration_ms) == (
        "earliest",
        "read_uncommitted",
        30000,
    )
    assert (share.delivery_count_limit, share.partition_max_record_locks, share.session_timeout_ms) == (5, 2000, 45000)


def test_a_value_set_before_the_bounds_moved_is_clamped_into_them():
    """Kafka's GroupConfig.evaluate: 59000 was in range when set; with the maximum lowered to
    50000 the group runs with 50000; a value below a raised minimum runs with the minimum."""
    gc = GroupConfigs(
        config(group__consumer__max__session__timeout__ms=50000, group__share__min__delivery__count__limit=4)
    )
    gc._overrides["g"] = {"consumer.session.timeout.ms": "59000", "share.delivery.count.limit": "2"}
    v = gc.resolve("g")
    assert v.consumer_session_timeout_ms == 50000 and v.share.delivery_count_limit == 4


def test_a_stored_value_that_no_longer_parses_falls_back_to_the_default():
    gc = GroupConfigs(config())
    gc._overrides["g"] = {"consumer.session.timeout.ms": "soon"}
    assert gc.resolve("g").consumer_session_timeout_ms == 45000


@pytest.mark.parametrize(
    "value,ok",
    [
        ("earliest", True),
        ("latest", True),
        ("by_duration:PT1H", True),
        ("by_duration:P1DT2H3M4.5S", True),
        ("by_duration:P", False),
        ("by_duration:PT", False),
        ("by_duration:P1DT", False),
        ("by_duration:pt1h", True),
        ("by_duration:PT-1H", False),
        ("by_duration:-PT1H", False),
        ("by_duration:", False),
        ("EARLIEST", False),
        ("none", False),
    ],
)
def test_share_auto_offset_reset_takes_kafkas_strategies(value, ok):
    if ok:
        assert validate({"share.auto.offset.reset": value}, config()) == {"share.auto.offset.reset": value}
    else:
        with pytest.raises(KafkaProtocolError):
            validate({"share.auto.offset.reset": value}, config())


def test_the_broker_refuses_group_defaults_outside_their_bounds():
    """As Kafka's GroupCoordinatorConfig and ShareGroupConfig refuse to start."""
    with pytest.raises(ConfigError, match="must be greater than or equal to group.consumer.min.heartbeat.interval.ms"):
        config(group__consumer__heartbeat__interval__ms=300)
    with pytest.raises(ConfigError, match="must be less than group.consumer.session.timeout.ms"):
        config(
            group__consumer__heartbeat__interval__ms=9000,
            group__consumer__max__heartbeat__interval__ms=50000,
            group__consumer__session__timeout__ms=9000,
            group__consumer__min__session__timeout__ms=1000,
        )
    with pytest.raises(ConfigError, match="must be less than or equal to group.share.max.record.lock.duration.ms"):
        config(group__share__record__lock__duration__ms=70000)
    assert (
        config(group__share__record__lock__duration__ms=2000, group__share__min__record__lock__duration__ms=1000)[
            "group.share.record.lock.duration.ms"
        ]
        == 2000
    )


def test_without_a_store_an_alter_is_kept_in_memory_and_every_name_is_kafkas():
    gc = GroupConfigs(config())

    async def main():
        await gc.alter("g", lambda cur: {**cur, "share.isolation.level": "read_committed"}, validate_only=False)
        await gc.alter("g", lambda cur: {**cur, "share.delivery.count.limit": "3"}, validate_only=True)

    asyncio.run(main())
    assert gc.overrides("g") == {"share.isolation.level": "read_committed"}
    assert gc.resolve("g").share.isolation_level == "read_committed"
    assert len(GROUP_KEYS) == 27  # Kafka 4.4.0's GroupConfig.CONFIG_DEF

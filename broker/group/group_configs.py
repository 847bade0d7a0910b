"""Group configs (Kafka 4.4's GroupConfig, KIP-848 and KIP-932): values of one group that
override the broker's group defaults, set with IncrementalAlterConfigs (or the legacy
AlterConfigs) on a GROUP resource (type 32) and described with DescribeConfigs, as Kafka's
`kafka-configs --entity-type groups` does.

- Names and validation are Kafka 4.4's: every name its GroupConfig defines is accepted
  (an unknown one is INVALID_CONFIG "Unknown group config name: ..."), each value is parsed
  and checked by its type and validator, then against the broker's bounds
  (`group.consumer.min/max.*`, `group.share.min/max.*`; Kafka's defaults for the streams
  bounds kbroker has no keys for), and a session timeout must stay above its heartbeat
  interval. The messages are Kafka's.
- Storage follows the topic configs': /config/groups/<sanitized group id> in ZooKeeper in
  cluster mode, the embedded store's file otherwise, with a groups/<id> change
  notification every broker follows (broker/server/broker.py reloads the group's entry
  here), so every broker answers with the same values and they survive restarts.
- `resolve(group_id)` gives the coordinators the effective values: the group's override,
  clamped into the broker's current bounds as Kafka's GroupConfig.evaluate does (bounds
  may have moved since the value was set), else the broker's default.

What takes effect in kbroker: consumer.session.timeout.ms and consumer.heartbeat.interval.ms
(the KIP-848 coordinator, consumer_coordinator.py) and the share.* values share groups
read through `share_group_values`. consumer.assignment.interval.ms (kbroker assigns at
the heartbeat that needs it), the streams.* values (no streams groups), share.assignment.*,
share.renew.acknowledge.enable and the errors.deadletterqueue.* values (no DLQ) are
stored, validated and described as Kafka does, without effect.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from broker.config import BROKER_KEYS, ConfigSource, ConfigType
from broker.protocol.errors import ErrorCode, KafkaProtocolError

if TYPE_CHECKING:
    from broker.config import BrokerConfig

log = logging.getLogger(__name__)

__all__ = [
    "GROUP_KEYS",
    "GroupConfigs",
    "GroupValues",
    "ShareGroupValues",
    "share_group_values",
    "validate",
]

INT_MAX = 2**31 - 1
_INTEGER = re.compile(r"[+-]?[0-9]+")
# Kafka's ShareGroupAutoOffsetResetStrategy: earliest, latest, or by_duration:<ISO-8601 duration>
_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


@dataclass(frozen=True)
class GroupKey:
    """One of Kafka 4.4's group config names: its type, Kafka's default, the broker key it
    defaults to (its synonym), Kafka's ConfigDef validator as (lo, hi) or choices, the
    names of the broker keys that bound it (or fixed Kafka defaults), and its doc."""

    name: str
    type: ConfigType
    default: Any
    doc: str
    broker_key: str | None = None
    at_least: int | None = None
    at_most: int | None = None
    choices: tuple[str, ...] | None = None
    lo: str | int | None = None  # a broker key name, or Kafka's default for a bound kbroker has no key for
    hi: str | int | None = None
    internal: bool = False


_I, _B, _S, _L, _LS = ConfigType.INT, ConfigType.BOOLEAN, ConfigType.STRING, ConfigType.LONG, ConfigType.LIST
_G = GroupKey

#: Kafka 4.4.0's GroupConfig.CONFIG_DEF, name by name
GROUP_KEYS: dict[str, GroupKey] = {
    k.name: k
    for k in [
        _G(
            "consumer.session.timeout.ms",
            _I,
            45000,
            "The timeout to detect client failures when using the consumer group protocol.",
            "group.consumer.session.timeout.ms",
            at_least=1,
            lo="group.consumer.min.session.timeout.ms",
            hi="group.consumer.max.session.timeout.ms",
        ),
        _G(
            "consumer.heartbeat.interval.ms",
            _I,
            5000,
            "The heartbeat interval given to the members of a consumer group.",
            "group.consumer.heartbeat.interval.ms",
            at_least=1,
            lo="group.consumer.min.heartbeat.interval.ms",
            hi="group.consumer.max.heartbeat.interval.ms",
        ),
        _G(
            "consumer.assignment.interval.ms",
            _I,
            1000,
            "The interval between assignment updates for a consumer group.",
            "group.consumer.assignment.interval.ms",
            at_least=0,
            lo=0,
            hi=15000,
        ),
        _G(
            "consumer.assignor.offload.enable",
            _B,
            True,
            "Whether to offload consumer group assignment to a group coordinator background thread.",
            "group.consumer.assignor.offload.enable",
            internal=True,
        ),
        _G(
            "share.session.timeout.ms",
            _I,
            45000,
            "The timeout to detect client failures when using the share group protocol.",
            "group.share.session.timeout.ms",
            at_least=1,
            lo="group.share.min.session.timeout.ms",
            hi="group.share.max.session.timeout.ms",
        ),
        _G(
            "share.heartbeat.interval.ms",
            _I,
            5000,
            "The heartbeat interval given to the members of a share group.",
            "group.share.heartbeat.interval.ms",
            at_least=1,
            lo="group.share.min.heartbeat.interval.ms",
            hi="group.share.max.heartbeat.interval.ms",
        ),
        _G(
            "share.record.lock.duration.ms",
            _I,
            30000,
            "The record acquisition lock duration in milliseconds for share groups.",
            "group.share.record.lock.duration.ms",
            at_least=1000,
            lo="group.share.min.record.lock.duration.ms",
            hi="group.share.max.record.lock.duration.ms",
        ),
        _G(
            "share.delivery.count.limit",
            _I,
            5,
            "The maximum number of delivery attempts for a record delivered to a share group.",
            "group.share.delivery.count.limit",
            at_least=2,
            lo="group.share.min.delivery.count.limit",
            hi="group.share.max.delivery.count.limit",
        ),
        _G(
            "share.partition.max.record.locks",
            _I,
            2000,
            "Share-group record lock limit per share-partition.",
            "group.share.partition.max.record.locks",
            at_least=100,
            lo="group.share.min.partition.max.record.locks",
            hi="group.share.max.partition.max.record.locks",
        ),
        _G(
            "share.auto.offset.reset",
            _S,
            "latest",
            "The strategy to initialize the share-partition start offset. <ul><li>earliest: automatically reset "
            "the offset to the earliest offset</li><li>latest: automatically reset the offset to the latest "
            "offset</li><li>by_duration:&lt;duration&gt;: automatically reset the offset to a configured duration "
            "from the current timestamp. &lt;duration&gt; must be specified in ISO8601 format (PnDTnHnMn.nS). "
            "Negative duration is not allowed.</li><li>anything else: throw exception to the share "
            "consumer.</li></ul>",
        ),
        _G(
            "share.isolation.level",
            _S,
            "read_uncommitted",
            'Controls how to read records written transactionally. If set to "read_committed", the share group '
            'will only deliver transactional records which have been committed. If set to "read_uncommitted", the '
            "share group will return all messages, even transactional messages which have been aborted. "
            "Non-transactional records will be returned unconditionally in either mode.",
            choices=("read_committed", "read_uncommitted"),
        ),
        _G(
            "share.renew.acknowledge.enable",
            _B,
            True,
            "Whether the renew acknowledge type is enabled for the share group.",
        ),
        _G(
            "share.assignment.interval.ms",
            _I,
            1000,
            "The interval between assignment updates for a share group.",
            "group.share.assignment.interval.ms",
            at_least=0,
            lo=0,
            hi=15000,
        ),
        _G(
            "share.assignor.offload.enable",
            _B,
            True,
            "Whether to offload share group assignment to a group coordinator background thread.",
            "group.share.assignor.offload.enable",
            internal=True,
        ),
        _G(
            "streams.session.timeout.ms",
            _I,
            45000,
            "The timeout to detect client failures when using the streams group protocol.",
            "group.streams.session.timeout.ms",
            at_least=1,
            lo=45000,
            hi=60000,
        ),
        _G(
            "streams.heartbeat.interval.ms",
            _I,
            5000,
            "The heartbeat interval given to the members.",
            "group.streams.heartbeat.interval.ms",
            at_least=1,
            lo=5000,
            hi=15000,
        ),
        _G(
            "streams.num.standby.replicas",
            _I,
            0,
            "The number of standby replicas for each task.",
            "group.streams.num.standby.replicas",
            at_least=0,
            hi=2,
        ),
        _G(
            "streams.initial.rebalance.delay.ms",
            _I,
            3000,
            "The amount of time the group coordinator will wait for more streams clients to join a new group "
            "before performing the first rebalance. A longer delay means potentially fewer rebalances.",
            "group.streams.initial.rebalance.delay.ms",
            at_least=0,
        ),
        _G(
            "streams.assignment.interval.ms",
            _I,
            1000,
            "The interval between assignment updates for a streams group.",
            "group.streams.assignment.interval.ms",
            at_least=0,
            lo=0,
            hi=15000,
        ),
        _G(
            "streams.assignor.offload.enable",
            _B,
            True,
            "Whether to offload streams group assignment to a group coordinator background thread.",
            "group.streams.assignor.offload.enable",
            internal=True,
        ),
        _G(
            "streams.task.offset.interval.ms",
            _I,
            60000,
            "The interval in which the warmup task changelog offsets on a client are updated on the broker. The "
            "offsets are sent with the next heartbeat after this time has passed.",
            "group.streams.task.offset.interval.ms",
            at_least=1,
            lo=15000,
            internal=True,
        ),
        _G(
            "streams.num.warmup.replicas",
            _I,
            2,
            "The maximum number of warmup task replicas.",
            "group.streams.num.warmup.replicas",
            at_least=0,
            hi=20,
            internal=True,
        ),
        _G(
            "streams.rack.aware.assignment.tags",
            _LS,
            "",
            "List of client tag keys used to distribute standby replicas across Kafka Streams instances. When "
            "configured, and the used broker-side assignor supports it, it will make a best-effort to distribute "
            "standby tasks over each client tag dimension.",
            "group.streams.rack.aware.assignment.tags",
        ),
        _G(
            "streams.acceptable.recovery.lag",
            _L,
            10000,
            "The maximum acceptable lag (number of offsets to catch up) for a client to be considered caught-up "
            "enough to receive an active task assignment.",
            "group.streams.acceptable.recovery.lag",
            at_least=0,
            internal=True,
        ),
        _G(
            "streams.assignor.name",
            _S,
            None,
            "The task assignor to use for this streams group, selected by short name from the assignors "
            "registered via the broker configuration group.streams.assignors. When unset, the group defaults to "
            "the first assignor configured in the broker's group.streams.assignors setting. Changing the assignor "
            "does not trigger a rebalance for the group; the new assignor takes effect on the next rebalance.",
            "group.streams.assignors",
            choices=("sticky",),
        ),
        _G(
            "errors.deadletterqueue.topic.name",
            _S,
            "",
            "The name of the topic to be used as the dead-letter queue (DLQ) topic for this share group. If blank "
            "(the default), the group does not have a DLQ topic.",
        ),
        _G(
            "errors.deadletterqueue.copy.record.enable",
            _B,
            False,
            "When writing onto the dead-letter queue topic, whether to copy the original record onto the DLQ "
            "topic, or just write a record containing the context information headers.",
        ),
    ]
}

#: Kafka's defaults of the broker keys kbroker has no key for (a synonym shows them)
_KAFKA_BROKER_DEFAULTS: dict[str, Any] = {
    "group.consumer.assignment.interval.ms": 1000,
    "group.consumer.assignor.offload.enable": True,
    "group.share.assignment.interval.ms": 1000,
    "group.share.assignor.offload.enable": True,
    "group.streams.session.timeout.ms": 45000,
    "group.streams.heartbeat.interval.ms": 5000,
    "group.streams.num.standby.replicas": 0,
    "group.streams.initial.rebalance.delay.ms": 3000,
    "group.streams.assignment.interval.ms": 1000,
    "group.streams.assignor.offload.enable": True,
    "group.streams.task.offset.interval.ms": 60000,
    "group.streams.num.warmup.replicas": 2,
    "group.streams.rack.aware.assignment.tags": "",
    "group.streams.acceptable.recovery.lag": 10000,
    "group.streams.assignors": "sticky",
}

#: a session timeout and the heartbeat interval it must exceed
_SESSION_OVER_HEARTBEAT = (
    ("consumer.session.timeout.ms", "consumer.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "share.heartbeat.interval.ms"),
    ("streams.session.timeout.ms", "streams.heartbeat.interval.ms"),
)


def _invalid(message: str) -> KafkaProtocolError:
    return KafkaProtocolError(ErrorCode.INVALID_CONFIG, message)


def _format(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return "" if value is None else str(value)


def _check_auto_offset_reset(text: str) -> bool:
    if text in ("earliest", "latest"):
        return True
    prefix, sep, duration = text.partition(":")
    # Java's Duration.parse: at least one amount, and one after a T
    return (
        bool(sep)
        and prefix == "by_duration"
        and _DURATION.fullmatch(duration) is not None
        and duration.upper() != "P"
        and not duration.upper().endswith("T")
    )


def parse_value(key: GroupKey, text: str) -> Any:
    """A group config's value from its text, checked by its type and validator as Kafka's
    ConfigDef.parse; KafkaProtocolError INVALID_CONFIG with Kafka's message."""
    t = text.strip()

    def bad(why: str) -> KafkaProtocolError:
        return _invalid(f"Invalid value {text} for configuration {key.name}: {why}")

    if key.type in (_I, _L):
        if not _INTEGER.fullmatch(t):
            raise bad(f"Not a number of type {key.type.name}")
        value: Any = int(t)
        if key.type is _I and not -INT_MAX - 1 <= value <= INT_MAX:
            raise bad("Not a number of type INT")
        if key.at_least is not None and value < key.at_least:
            raise bad(f"Value must be at least {key.at_least}")
        return value
    if key.type is _B:
        if t.lower() not in ("true", "false"):
            raise bad("Expected value to be either true or false")
        return t.lower() == "true"
    if key.type is _LS:
        return [x.strip() for x in t.split(",") if x.strip()]
    if key.name == "share.auto.offset.reset" and not _check_auto_offset_reset(t):
        raise bad(
            f"Invalid value `{t}` for configuration share.auto.offset.reset. The value must be either "
            "'earliest', 'latest' or of the format 'by_duration:<PnDTnHnMn.nS>'."
        )
    if key.choices is not None and key.name != "streams.assignor.name" and t not in key.choices:
        raise bad(f"String must be one of: {', '.join(key.choices)}")
    return t


def _bound(config: BrokerConfig, bound: str | int | None) -> int | None:
    if bound is None or isinstance(bound, int):
        return bound
    return int(config[bound])


def _broker_default(config: BrokerConfig, key: GroupKey) -> Any:
    """The broker's value of the key's synonym (Kafka's default when kbroker has no such key)."""
    if key.broker_key is None:
        return key.default
    if key.broker_key in BROKER_KEYS:
        return config[key.broker_key]
    return _KAFKA_BROKER_DEFAULTS.get(key.broker_key, key.default)


def validate(configs: Mapping[str, str], config: BrokerConfig) -> dict[str, Any]:
    """A group's complete new set of configs checked as Kafka 4.4's GroupConfig.validate
    (names, then each value, then the broker's bounds, then session over heartbeat);
    the parsed values, or KafkaProtocolError INVALID_CONFIG with Kafka's message."""
    for name in configs:
        if name not in GROUP_KEYS:
            raise _invalid(f"Unknown group config name: {name}")
    tags = configs.get("streams.rack.aware.assignment.tags")
    if tags is not None and tags.strip():
        items = [x for x in re.split(r"\s*,\s*", tags.strip())]
        if len(set(items)) != len(items):
            raise _invalid("streams.rack.aware.assignment.tags must not contain duplicate tag keys.")
    parsed = {name: parse_value(GROUP_KEYS[name], text) for name, text in configs.items()}
    for name, value in parsed.items():
        key = GROUP_KEYS[name]
        if key.type not in (_I, _L):
            continue
        lo, hi = _bound(config, key.lo), _bound(config, key.hi)
        if lo is not None and hi is not None:
            if not lo <= value <= hi:
                raise _invalid(f"{name} must be in the range {lo} to {hi} inclusive.")
        elif hi is not None and value > hi:
            raise _invalid(f"{name} must be less than or equal to {hi}")
        elif lo is not None and value < lo:
            raise _invalid(f"{name} must be greater than or equal to {lo}")
    assignor = parsed.get("streams.assignor.name")
    if assignor is not None and assignor != "sticky":
        raise _invalid(
            f"streams.assignor.name '{assignor}' is not a registered task assignor. Registered assignors are: [sticky]."
        )
    for session, heartbeat in _SESSION_OVER_HEARTBEAT:
        if session in parsed or heartbeat in parsed:
            s = parsed.get(session, _broker_default(config, GROUP_KEYS[session]))
            h = parsed.get(heartbeat, _broker_default(config, GROUP_KEYS[heartbeat]))
            if s <= h:
                raise _invalid(f"{session} must be greater than {heartbeat}")
    dlq = parsed.get("errors.deadletterqueue.topic.name")
    if dlq and dlq.startswith("__"):
        raise _invalid("errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'")
    return parsed


@dataclass(frozen=True)
class ShareGroupValues:
    """What a share group runs with (KIP-932): its overrides, else the broker's group.share.*."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    record_lock_duration_ms: int
    delivery_count_limit: int
    partition_max_record_locks: int
    auto_offset_reset: str  # "earliest", "latest" or "by_duration:<ISO-8601 duration>"
    isolation_level: str  # "read_uncommitted" or "read_committed"


@dataclass(frozen=True)
class GroupValues:
    """One group's effective values, by group config name (resolve())."""

    values: Mapping[str, Any]

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    @property
    def consumer_session_timeout_ms(self) -> int:
        return int(self.values["consumer.session.timeout.ms"])

    @property
    def consumer_heartbeat_interval_ms(self) -> int:
        return int(self.values["consumer.heartbeat.interval.ms"])

    @property
    def share(self) -> ShareGroupValues:
        v = self.values
        return ShareGroupValues(
            session_timeout_ms=v["share.session.timeout.ms"],
            heartbeat_interval_ms=v["share.heartbeat.interval.ms"],
            record_lock_duration_ms=v["share.record.lock.duration.ms"],
            delivery_count_limit=v["share.delivery.count.limit"],
            partition_max_record_locks=v["share.partition.max.record.locks"],
            auto_offset_reset=v["share.auto.offset.reset"],
            isolation_level=v["share.isolation.level"],
        )


class GroupConfigs:
    """Every group's configs as the store holds them (one per broker: services.group_configs),
    kept current from the store's change notifications."""

    APPLY_WAIT_S = 5.0

    def __init__(self, config: BrokerConfig, store: Any = None) -> None:
        self.config = config
        self.store = store
        self._overrides: dict[str, dict[str, str]] = {}
        #: called with a group id whose configs changed (the coordinators re-read theirs)
        self.listeners: list[Callable[[str], None]] = []

    # ------------------------------------------------------------------ loading

    async def load(self) -> None:
        """Every group's configs from the store (at start, after the change watch is set)."""
        if self.store is None:
            return
        self._overrides = {g: dict(c) for g, c in (await self.store.get_group_configs()).items() if c}

    async def reload(self, group_id: str) -> None:
        """One group's configs again, after a change notification."""
        if self.store is None:
            return
        configs = await self.store.get_group_config(group_id)
        if configs:
            self._overrides[group_id] = dict(configs)
        else:
            self._overrides.pop(group_id, None)
        for listener in list(self.listeners):
            listener(group_id)

    # ------------------------------------------------------------------ reading

    def overrides(self, group_id: str) -> dict[str, str]:
        """The group's own configs, as set."""
        return dict(self._overrides.get(group_id, {}))

    def resolve(self, group_id: str) -> GroupValues:
        """The group's effective values: its override, clamped into the broker's current
        bounds (Kafka's GroupConfig.evaluate), else the broker's default."""
        own = self._overrides.get(group_id, {})
        out: dict[str, Any] = {}
        for name, key in GROUP_KEYS.items():
            value = _broker_default(self.config, key)
            if name in own:
                try:
                    value = parse_value(key, own[name])
                except KafkaProtocolError:  # stored by a release that took it: the default, said once
                    log.warning("group %s: %s=%s is not valid; using %s", group_id, name, own[name], value)
                else:
                    value = self._clamped(group_id, key, value)
            out[name] = value
        return GroupValues(out)

    def _clamped(self, group_id: str, key: GroupKey, value: Any) -> Any:
        if key.type not in (_I, _L):
            return value
        lo, hi = _bound(self.config, key.lo), _bound(self.config, key.hi)
        if lo is not None and value < lo:
            log.debug("group %s: %s=%d is below %d now; %d is used", group_id, key.name, value, lo, lo)
            return lo
        if hi is not None and value > hi:
            log.debug("group %s: %s=%d is above %d now; %d is used", group_id, key.name, value, hi, hi)
            return hi
        return value

    # ------------------------------------------------------------------ altering

    async def alter(
        self, group_id: str, update: Callable[[dict[str, str]], dict[str, str]], validate_only: bool
    ) -> None:
        """Replaces the group's configs with update(current ones) once they pass validate();
        written to the store, answered once this broker has applied them (or soon)."""
        if not group_id:
            raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        current = await self.store.get_group_config(group_id) if self.store is not None else {}
        new = update(dict(current))
        validate(new, self.config)
        if validate_only:
            return
        if self.store is None:
            self._overrides[group_id] = dict(new)
            return
        await self.store.set_group_config(group_id, new)
        deadline = asyncio.get_running_loop().time() + self.APPLY_WAIT_S
        while self._overrides.get(group_id, {}) != new and asyncio.get_running_loop().time() < deadline:
            await asyncio.sleep(0.02)

    # ------------------------------------------------------------------ describing

    def describe(
        self,
        group_id: str,
        keys: Any,
        synonyms: bool,
        docs: bool,
        synonym_type: type[Any],
        entry_type: type[Any],
        broker_synonyms: Callable[[str], list[Any]],
    ) -> list[Any]:
        """DescribeConfigs' entries of a GROUP resource as Kafka 4.4's ConfigHelper makes
        them: every name but the internal ones not set, its value (the group's own, else
        the broker default), the group's value first among the synonyms (GROUP_CONFIG), then
        the broker key's layers (or the group default, DEFAULT_CONFIG)."""
        if not group_id:
            raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        own = self._overrides.get(group_id, {})
        out = []
        for name, key in GROUP_KEYS.items():
            if keys is not None and name not in keys:
                continue
            if key.internal and name not in own:
                continue
            syn = []
            if name in own:
                syn.append(synonym_type(name=name, value=own[name], source=ConfigSource.GROUP_CONFIG))
            if key.broker_key is not None and key.broker_key in BROKER_KEYS:
                syn += broker_synonyms(key.broker_key)
            elif key.broker_key is not None:
                syn.append(
                    synonym_type(
                        name=key.broker_key,
                        value=_format(_broker_default(self.config, key)),
                        source=ConfigSource.DEFAULT_CONFIG,
                    )
                )
            elif key.default is not None:
                syn.append(synonym_type(name=name, value=_format(key.default), source=ConfigSource.DEFAULT_CONFIG))
            value = own[name] if name in own else (_format(_broker_default(self.config, key)) if syn else None)
            source = syn[0].source if syn else ConfigSource.DEFAULT_CONFIG
            out.append(
                entry_type(
                    name=name,
                    value=value,
                    read_only=False,
                    is_default=False,
                    config_source=source,
                    is_sensitive=False,
                    synonyms=syn if synonyms else [],
                    config_type=key.type,
                    documentation=key.doc if docs else None,
                )
            )
        return out


def share_group_values(group_configs: GroupConfigs, group_id: str) -> ShareGroupValues:
    """The share.* values share group `group_id` runs with: the one call the share group
    coordinator, the share-partition leader and ShareFetch make."""
    return group_configs.resolve(group_id).share

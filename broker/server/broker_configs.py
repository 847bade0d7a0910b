"""Dynamic broker configs for the config handlers (Kafka's ZkAdminManager and ConfigHelper
for BROKER resources): which entity a resource names, altering /config/brokers/<entity>
(validated as Kafka's DynamicBrokerConfig.validate, then written to the store; every broker
applies it from its change notification), and what DescribeConfigs answers.

A BROKER resource named "" is the cluster-wide default (/config/brokers/<default>); one
named with this broker's id is this broker (/config/brokers/<id>); another broker's id is
INVALID_REQUEST, as Kafka's (clients send a broker's resource to that broker).
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import Callable, Container, Mapping
from typing import TYPE_CHECKING, Any

from broker.config import (
    BROKER_KEYS,
    DEFAULT_ENTITY,
    DYNAMIC_IGNORED_KEYS,
    DYNAMIC_ONLY_KEYS,
    LISTENER_PREFIX,
    NOT_DESCRIBED,
    ConfigError,
    ConfigSource,
    ConfigType,
    broker_key_chain,
    is_dynamic,
    validate_dynamic,
)
from broker.protocol.errors import ErrorCode, KafkaProtocolError

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.server.services import BrokerServices

#: DescribeConfigs' layers, highest precedence first
LAYERS = (
    ConfigSource.DYNAMIC_BROKER_CONFIG,
    ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG,
    ConfigSource.STATIC_BROKER_CONFIG,
    ConfigSource.DEFAULT_CONFIG,
)

APPLY_WAIT_S = 5.0


def entity_of(services: BrokerServices, name: str, describe: bool = False) -> str:
    """The /config/brokers entity a BROKER resource names; KafkaProtocolError otherwise."""
    if not name:
        return DEFAULT_ENTITY
    try:
        broker_id = int(name)
    except ValueError:
        raise KafkaProtocolError(
            ErrorCode.INVALID_REQUEST, f"Broker id must be an integer, but it is: {name}"
        ) from None
    if broker_id != services.broker_id:
        expected = f"{services.broker_id} or empty string" if describe else str(services.broker_id)
        raise KafkaProtocolError(
            ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {expected}, but received {name}"
        )
    return str(broker_id)


def base_key(name: str) -> str:
    """listener.name.<l>.<key> -> <key>; other names as they are."""
    return name[len(LISTENER_PREFIX) :].partition(".")[2] if name.startswith(LISTENER_PREFIX) else name


def config_type(name: str) -> ConfigType:
    key = BROKER_KEYS.get(base_key(name)) or DYNAMIC_ONLY_KEYS.get(name)
    return key.type if key is not None else ConfigType.STRING


def format_value(value: Any) -> str | None:
    """A config value as Kafka prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


async def alter(
    services: BrokerServices,
    resource_name: str,
    update: Callable[[dict[str, str]], dict[str, str]],
    validate_only: bool,
) -> None:
    """Replaces the entity's dynamic configs with update(current ones) after Kafka's checks;
    KafkaProtocolError (INVALID_REQUEST, with Kafka's message) when refused."""
    entity = entity_of(services, resource_name)
    per_broker = entity != DEFAULT_ENTITY
    store = services.admin.store
    current = await store.get_broker_config(entity)
    new = update(dict(current))
    resource = f"ConfigResource(type=BROKER, name='{resource_name}')"
    config = services.config
    try:
        parsed = validate_dynamic(new, per_broker, [x.name for x in config.endpoints])
        if per_broker and any(k.startswith(LISTENER_PREFIX) for k in parsed):
            _check_listener_security(config, parsed)
    except ConfigError as exc:
        # INVALID_REQUEST, as Kafka 3.x answers every refused broker config (ZkAdminManager
        # wraps the ConfigException so; KAFKA-13609 left the code at 42 even for a bad value)
        raise KafkaProtocolError(
            ErrorCode.INVALID_REQUEST, f"Invalid config value for resource {resource}: {exc}"
        ) from None
    if validate_only:
        return
    await store.set_broker_config(entity, new)
    # every broker applies it from the notification; this one answers once it has (or soon)
    deadline = asyncio.get_running_loop().time() + APPLY_WAIT_S
    layer = config.dynamic_broker if per_broker else config.dynamic_default
    while layer != parsed and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.02)
        layer = config.dynamic_broker if per_broker else config.dynamic_default


def _check_listener_security(config: BrokerConfig, parsed: Mapping[str, Any]) -> None:
    """A new key store must load (Kafka's SslFactory.validateReconfiguration): the listeners'
    TLS built with the new values, ConfigError if it cannot be."""
    from broker.security.listener import listener_securities
    from broker.security.tls import TlsConfigError

    candidate = copy.copy(config)
    candidate.apply_dynamic(config.dynamic_default, parsed)
    try:
        listener_securities(candidate)
    except TlsConfigError as exc:
        name = next(k for k in parsed if k.startswith(LISTENER_PREFIX))
        raise ConfigError(name, f"Validation of dynamic config update of SSLFactory failed: {exc}", [name]) from None


def layer_maps(config: BrokerConfig) -> dict[ConfigSource, Mapping[str, Any]]:
    return {source: config.layer(source) for source in LAYERS}


def synonyms(
    maps: Mapping[ConfigSource, Mapping[str, Any]], name: str, layers: tuple[ConfigSource, ...] = LAYERS
) -> list[tuple[str, str | None, ConfigSource]]:
    """Kafka's configSynonyms: the chain's keys set in each layer, layer by layer, from
    the key itself on."""
    chain = broker_key_chain(name)
    out = [(k, format_value(maps[source][k]), source) for source in layers for k in chain if k in maps[source]]
    while out and out[0][0] != name:
        out.pop(0)
    return out


def describe(
    services: BrokerServices,
    resource_name: str,
    keys: Container[str] | None,
    synonym_type: type[Any],
    entry_type: type[Any],
    docs: bool,
) -> list[Any]:
    """The DescribeConfigs entries of a BROKER resource: every broker key with its
    effective value, source and synonyms (this broker), or the cluster default's dynamic
    configs (name "")."""
    entity = entity_of(services, resource_name, describe=True)
    config = services.config
    layers: tuple[ConfigSource, ...] = LAYERS
    if entity == DEFAULT_ENTITY:
        names = sorted(config.dynamic_default)
        layers = LAYERS[1:]
    else:
        names = sorted(
            {k for k in BROKER_KEYS if k not in NOT_DESCRIBED}
            | set(config.dynamic_default)
            | set(config.dynamic_broker)
        )
    maps = layer_maps(config)
    out = []
    for name in names:
        if keys is not None and name not in keys:
            continue
        syn = synonyms(maps, name, layers)
        source = syn[0][2] if syn else ConfigSource.DEFAULT_CONFIG
        ctype = config_type(name)
        sensitive = ctype == ConfigType.PASSWORD
        if entity == DEFAULT_ENTITY:
            value = format_value(config.dynamic_default[name])
        elif name in BROKER_KEYS:
            value = format_value(config[name])
        else:
            value = syn[0][1] if syn else None
        key = BROKER_KEYS.get(base_key(name)) or DYNAMIC_ONLY_KEYS.get(name)
        doc = key.doc if key is not None else ("Accepted without effect." if name in DYNAMIC_IGNORED_KEYS else None)
        out.append(
            entry_type(
                name=name,
                value=None if sensitive else value,
                read_only=not is_dynamic(name),
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                config_source=source,
                is_sensitive=sensitive,
                synonyms=[synonym_type(name=n, value=None if sensitive else v, source=s) for n, v, s in syn],
                config_type=ctype,
                documentation=doc if docs else None,
            )
        )
    return out

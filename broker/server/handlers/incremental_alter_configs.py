"""IncrementalAlterConfigs (44): SET (0), DELETE (1), APPEND (2) and SUBTRACT (3) on a
topic's overrides, on the dynamic configs of a broker or of the cluster default
(server/broker_configs.py), or on a group's configs (GROUP, broker/group/group_configs.py,
with Kafka 4.4's checks and messages). Deprecated topic keys Kafka 3.x still takes are accepted with
a warning (config.DEPRECATED_TOPIC_KEYS)."""

from collections.abc import Callable

from broker.config import BROKER_KEYS, DEPRECATED_TOPIC_KEYS, TOPIC_KEYS, ConfigType
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.incremental_alter_configs import (
    IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server import broker_configs
from broker.server.broker_configs import format_value
from broker.server.context import HandlerResult, RequestContext
from broker.server.handlers.describe_configs import RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC, _denied
from broker.server.services import BrokerServices

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
_OP_NAMES = {SET: "SET", DELETE: "DELETE", APPEND: "APPEND", SUBTRACT: "SUBTRACT"}


def _list_op(text: str | None, op: int, value: str | None) -> str:
    """APPEND or SUBTRACT of `value`'s comma-separated items on a list config's `text`."""
    current = [x for x in (text or "").split(",") if x]
    items = [x.strip() for x in (value or "").split(",") if x.strip()]
    if op == APPEND:
        current += [x for x in items if x not in current]
    else:
        current = [x for x in current if x not in items]
    return ",".join(current)


def _apply(
    services: BrokerServices, topic: str, ops: list[IncrementalAlterConfigsRequest.AlterableConfig]
) -> dict[str, str]:
    info = services.metadata.topic(topic)
    if info is None:
        raise KafkaProtocolError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Topic '{topic}' does not exist.")
    configs = dict(info.configs)
    cfg = services.metadata.log_config(topic)
    for c in ops:
        key = TOPIC_KEYS.get(c.name) or DEPRECATED_TOPIC_KEYS.get(c.name)
        if key is None:
            raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, f"{c.name}: unknown topic configuration key")
        if c.config_operation == SET:
            if c.value is None:
                raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, f"{c.name}: null value")
            configs[c.name] = c.value
        elif c.config_operation == DELETE:
            configs.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            if key.type != ConfigType.LIST:
                raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, f"{c.name}: APPEND/SUBTRACT need a list config")
            text = format_value(cfg[c.name]) if c.name in TOPIC_KEYS else configs.get(c.name)
            configs[c.name] = _list_op(text, c.config_operation, c.value)
        else:
            raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"unknown config operation {c.config_operation}")
    return configs


def _apply_broker(ops: list[IncrementalAlterConfigsRequest.AlterableConfig], configs: dict[str, str]) -> dict[str, str]:
    """The operations on an entity's dynamic configs (Kafka's prepareIncrementalConfigs,
    after its checks of duplicate keys and null values)."""
    names = [c.name for c in ops]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise KafkaProtocolError(
            ErrorCode.INVALID_REQUEST, f"Error due to duplicate config keys : {','.join(duplicates)}"
        )
    nulls = [
        f"{_OP_NAMES.get(c.config_operation, c.config_operation)}:{c.name}"
        for c in ops
        if c.value is None and c.config_operation != DELETE
    ]
    if nulls:
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    for c in ops:
        if c.config_operation == SET:
            configs[c.name] = c.value
        elif c.config_operation == DELETE:
            configs.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            key = BROKER_KEYS.get(broker_configs.base_key(c.name))
            if key is None or key.type != ConfigType.LIST:
                raise KafkaProtocolError(
                    ErrorCode.INVALID_CONFIG, f"Config value append is not allowed for config key: {c.name}"
                )
            configs[c.name] = _list_op(
                configs.get(c.name, format_value(key.default) or ""), c.config_operation, c.value
            )
        else:
            raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"unknown config operation {c.config_operation}")
    return configs


def _apply_group(ops: list[IncrementalAlterConfigsRequest.AlterableConfig], configs: dict[str, str]) -> dict[str, str]:
    """The operations on a group's configs, refused as Kafka 4.4 refuses them (duplicate
    keys and null values INVALID_REQUEST, APPEND/SUBTRACT on a key that is not a list
    INVALID_CONFIG)."""
    from broker.group.group_configs import GROUP_KEYS

    names = [c.name for c in ops]
    if len(set(names)) != len(names):
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, "Error due to duplicate config keys")
    nulls = [c.name for c in ops if c.value is None and c.config_operation != DELETE]
    if nulls:
        raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"Null value not supported for : {','.join(nulls)}")
    for c in ops:
        if c.config_operation == SET:
            configs[c.name] = c.value
        elif c.config_operation == DELETE:
            configs.pop(c.name, None)
        elif c.config_operation in (APPEND, SUBTRACT):
            key = GROUP_KEYS.get(c.name)
            if key is None or key.type != ConfigType.LIST:
                raise KafkaProtocolError(
                    ErrorCode.INVALID_CONFIG,
                    f"Can't {_OP_NAMES[c.config_operation]} to key {c.name} because its type is not LIST.",
                )
            configs[c.name] = _list_op(configs.get(c.name, ""), c.config_operation, c.value)
        else:
            raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"unknown config operation {c.config_operation}")
    return configs


def handle(ctx: RequestContext, request: IncrementalAlterConfigsRequest) -> HandlerResult:
    return _handle(ctx, request)


def _applying(ops: list[IncrementalAlterConfigsRequest.AlterableConfig]) -> Callable[[dict[str, str]], dict[str, str]]:
    return lambda current: _apply_broker(ops, current)


def _applying_group(
    ops: list[IncrementalAlterConfigsRequest.AlterableConfig],
) -> Callable[[dict[str, str]], dict[str, str]]:
    return lambda current: _apply_group(ops, current)


async def _handle(ctx: RequestContext, request: IncrementalAlterConfigsRequest) -> IncrementalAlterConfigsResponse:
    out = []
    for res in request.resources:
        r = IncrementalAlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=0, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name
        )
        out.append(r)
        denied = _denied(ctx, RIGHTS.topic, RIGHTS.cluster, RIGHTS.group, res.resource_type, res.resource_name)
        if denied:
            r.error_code, r.error_message = denied, "Authorization failed."
            continue
        try:
            if res.resource_type == RESOURCE_TOPIC:
                configs = _apply(ctx.services, res.resource_name, res.configs)
                await ctx.services.admin.set_topic_configs(res.resource_name, configs, request.validate_only)
            elif res.resource_type == RESOURCE_BROKER:
                await broker_configs.alter(
                    ctx.services, res.resource_name, _applying(res.configs), request.validate_only
                )
            elif res.resource_type == RESOURCE_GROUP:
                await ctx.services.group_configs.alter(
                    res.resource_name, _applying_group(res.configs), request.validate_only
                )
            else:
                raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {res.resource_type}")
        except KafkaProtocolError as exc:
            r.error_code, r.error_message = exc.code, exc.message
    return IncrementalAlterConfigsResponse(throttle_time_ms=0, responses=out)

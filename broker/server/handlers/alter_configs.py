"""AlterConfigs (33), the legacy form: a topic's overrides, the dynamic configs of a
broker or of the cluster default (server/broker_configs.py), or a group's configs (as
Kafka 4.4 takes them: broker/group/group_configs.py) become exactly the given set."""

from collections.abc import Callable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.alter_configs import AlterConfigsRequest, AlterConfigsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server import broker_configs
from broker.server.context import HandlerResult, RequestContext
from broker.server.handlers.describe_configs import RESOURCE_BROKER, RESOURCE_GROUP, RESOURCE_TOPIC, _denied

API_KEY = ApiKey.ALTER_CONFIGS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 2


def handle(ctx: RequestContext, request: AlterConfigsRequest) -> HandlerResult:
    return _handle(ctx, request)


def _replacing(configs: dict[str, str]) -> Callable[[dict[str, str]], dict[str, str]]:
    return lambda _current: dict(configs)


async def _handle(ctx: RequestContext, request: AlterConfigsRequest) -> AlterConfigsResponse:
    out = []
    for res in request.resources:
        r = AlterConfigsResponse.AlterConfigsResourceResponse(
            error_code=0, error_message=None, resource_type=res.resource_type, resource_name=res.resource_name
        )
        out.append(r)
        denied = _denied(ctx, RIGHTS.topic, RIGHTS.cluster, RIGHTS.group, res.resource_type, res.resource_name)
        if denied:
            r.error_code, r.error_message = denied, "Authorization failed."
            continue
        try:
            if res.resource_type == RESOURCE_TOPIC:
                configs = {c.name: c.value for c in res.configs if c.value is not None}
                await ctx.services.admin.set_topic_configs(res.resource_name, configs, request.validate_only)
            elif res.resource_type == RESOURCE_BROKER:
                configs = {c.name: c.value for c in res.configs if c.value is not None}
                await broker_configs.alter(ctx.services, res.resource_name, _replacing(configs), request.validate_only)
            elif res.resource_type == RESOURCE_GROUP:
                configs = {c.name: c.value for c in res.configs if c.value is not None}
                await ctx.services.group_configs.alter(res.resource_name, _replacing(configs), request.validate_only)
            else:
                raise KafkaProtocolError(ErrorCode.INVALID_REQUEST, f"unsupported resource type {res.resource_type}")
        except KafkaProtocolError as exc:
            r.error_code, r.error_message = exc.code, exc.message
    return AlterConfigsResponse(throttle_time_ms=0, responses=out)

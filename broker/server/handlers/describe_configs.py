"""DescribeConfigs (32): topic configs (overrides over broker defaults, with their
sources and synonyms), the broker's configs, dynamic ones over static ones
(server/broker_configs.py), and a group's configs (resource type GROUP, Kafka 4.4's group
configs: broker/group/group_configs.py). A result without error carries the
error message "" (Kafka leaves the field at its default).

Synonyms as Kafka lists them: for a broker key, the keys of its synonym chain (log.retention
ms / minutes / hours, log.roll ms / hours, log.flush.interval.ms then the scheduler interval)
set in this broker's dynamic configs, then the cluster default's, then server.properties',
then those with a default, each in chain order; entries before the key itself are left out (so log.retention.ms lists nothing while only the hours
are set). A topic config lists its override first, then its broker key's synonyms. The
config's source is its first synonym's (DEFAULT_CONFIG when none), as in Kafka.
"""

from collections.abc import Container, Mapping
from typing import Any

from broker.config import TOPIC_KEYS, ConfigSource, ConfigType, LogConfig
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS, Right
from broker.server import broker_configs
from broker.server.broker_configs import format_value
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.DESCRIBE_CONFIGS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 4

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8
RESOURCE_GROUP = 32

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
_Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def broker_synonyms(
    services: BrokerServices, name: str, maps: Mapping[ConfigSource, Mapping[str, Any]] | None = None
) -> list[DescribeConfigsResponse.DescribeConfigsSynonym]:
    """A broker key's synonyms over every layer (dynamic per broker, dynamic default,
    server.properties, Kafka's default), as Kafka lists them."""
    maps = maps if maps is not None else broker_configs.layer_maps(services.config)
    return [_Synonym(name=n, value=v, source=src) for n, v, src in broker_configs.synonyms(maps, name)]


def topic_synonyms(
    services: BrokerServices, cfg: LogConfig, name: str, maps: Mapping[ConfigSource, Mapping[str, Any]] | None = None
) -> list[DescribeConfigsResponse.DescribeConfigsSynonym]:
    key = TOPIC_KEYS[name]
    out = []
    if name in cfg.overrides:
        out.append(
            _Synonym(name=name, value=format_value(cfg.overrides[name]), source=ConfigSource.DYNAMIC_TOPIC_CONFIG)
        )
    if key.broker_key:
        out += broker_synonyms(services, key.broker_key, maps)
    return out


def source_of(synonyms: list[DescribeConfigsResponse.DescribeConfigsSynonym]) -> ConfigSource:
    return ConfigSource(synonyms[0].source) if synonyms else ConfigSource.DEFAULT_CONFIG


def topic_entries(
    services: BrokerServices, topic: str, keys: Container[str] | None, synonyms: bool, docs: bool
) -> list[DescribeConfigsResponse.DescribeConfigsResourceResult]:
    cfg = services.metadata.log_config(topic)
    maps = broker_configs.layer_maps(services.config)
    out = []
    for name in sorted(TOPIC_KEYS):
        if keys is not None and name not in keys:
            continue
        key = TOPIC_KEYS[name]
        syn = topic_synonyms(services, cfg, name, maps)
        source = source_of(syn)
        out.append(
            _Entry(
                name=name,
                value=format_value(cfg[name]),
                read_only=False,
                is_default=source == ConfigSource.DEFAULT_CONFIG,
                config_source=source,
                is_sensitive=False,
                synonyms=syn if synonyms else [],
                config_type=key.type,
                documentation=key.doc if docs else None,
            )
        )
    return out


def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> DescribeConfigsResponse:
    services = ctx.services
    version = ctx.api_version
    synonyms = request.include_synonyms if version >= 1 else False
    docs = request.include_documentation if version >= 3 else False
    results = []
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        r = _Result(
            error_code=0, error_message="", resource_type=res.resource_type, resource_name=res.resource_name, configs=[]
        )
        results.append(r)
        denied = _denied(ctx, RIGHTS.topic, RIGHTS.cluster, RIGHTS.group, res.resource_type, res.resource_name)
        if denied:
            r.error_code, r.error_message = denied, "Authorization failed."
            continue
        if res.resource_type == RESOURCE_TOPIC:
            if services.metadata.topic(res.resource_name) is None:
                r.error_code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                r.error_message = f"Topic '{res.resource_name}' does not exist."
                continue
            r.configs = topic_entries(services, res.resource_name, keys, synonyms, docs)
        elif res.resource_type == RESOURCE_BROKER:
            try:
                r.configs = broker_configs.describe(services, res.resource_name, keys, _Synonym, _Entry, docs)
            except KafkaProtocolError as exc:
                r.error_code, r.error_message = exc.code, exc.message
                continue
            if not synonyms:
                for entry in r.configs:
                    entry.synonyms = []
        elif res.resource_type == RESOURCE_BROKER_LOGGER:
            r.configs = []
        elif res.resource_type == RESOURCE_GROUP:
            try:
                r.configs = services.group_configs.describe(
                    res.resource_name,
                    keys,
                    synonyms,
                    docs,
                    _Synonym,
                    _Entry,
                    lambda name: broker_synonyms(services, name),
                )
            except KafkaProtocolError as exc:
                r.error_code, r.error_message = exc.code, exc.message
        else:
            r.error_code = ErrorCode.INVALID_REQUEST
            r.error_message = f"unsupported resource type {res.resource_type}"
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _denied(
    ctx: RequestContext, on_topic: Right, on_cluster: Right, on_group: Right, resource_type: int, name: str
) -> int:
    """As Kafka's: a topic's configs need the right on the topic, a broker's (and its
    loggers') on the cluster, a group's on the group (the rights of the API's row); the
    error code, or 0."""
    if resource_type == RESOURCE_TOPIC:
        return 0 if ctx.has_right(on_topic, name) else on_topic.error_code
    if resource_type == RESOURCE_GROUP:
        return 0 if ctx.has_right(on_group, name) else on_group.error_code
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return 0 if ctx.has_right(on_cluster, CLUSTER_NAME) else on_cluster.error_code
    return 0


_ = ConfigType  # config_type values are ConfigType codes

"""DescribeConfigs (32): topic configs (overrides over broker defaults, with their
sources and synonyms) and the broker's static configs. A result without error carries the
error message "" (Kafka leaves the field at its default).

Synonyms as Kafka lists them: for a broker key, the keys of its synonym chain (log.retention
ms / minutes / hours, log.roll ms / hours, log.flush.interval.ms then the scheduler interval)
that are set in server.properties, then those with a default, each in chain order; entries
before the key itself are left out (so log.retention.ms lists nothing while only the hours
are set). A topic config lists its override first, then its broker key's synonyms. The
config's source is its first synonym's (DEFAULT_CONFIG when none), as in Kafka.
"""
from broker.config import BROKER_KEYS, BROKER_SYNONYMS, NOT_DESCRIBED, TOPIC_KEYS, ConfigSource, ConfigType
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_configs import DescribeConfigsRequest, DescribeConfigsResponse
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.DESCRIBE_CONFIGS
MIN_VERSION, MAX_VERSION = 0, 4

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_BROKER_LOGGER = 8

_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResourceResult
_Synonym = DescribeConfigsResponse.DescribeConfigsSynonym


def format_value(value) -> str | None:
    """A config value as Kafka prints it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _chain(broker_key: str) -> tuple[str, ...]:
    for chain in BROKER_SYNONYMS.values():
        if broker_key in chain:
            return chain
    return (broker_key,)


def broker_synonyms(services, name: str) -> list:
    cfg = services.config
    chain = _chain(name)
    out = [_Synonym(name=k, value=format_value(cfg[k]), source=ConfigSource.STATIC_BROKER_CONFIG)
           for k in chain if cfg.source(k) == ConfigSource.STATIC_BROKER_CONFIG]
    out += [_Synonym(name=k, value=format_value(BROKER_KEYS[k].default), source=ConfigSource.DEFAULT_CONFIG)
            for k in chain if BROKER_KEYS[k].default is not None]
    while out and out[0].name != name:
        out.pop(0)
    return out


def topic_synonyms(services, cfg, name: str) -> list:
    key = TOPIC_KEYS[name]
    out = []
    if name in cfg.overrides:
        out.append(_Synonym(name=name, value=format_value(cfg.overrides[name]),
                            source=ConfigSource.DYNAMIC_TOPIC_CONFIG))
    if key.broker_key:
        out += broker_synonyms(services, key.broker_key)
    return out


def source_of(synonyms: list) -> ConfigSource:
    return ConfigSource(synonyms[0].source) if synonyms else ConfigSource.DEFAULT_CONFIG


def topic_entries(services, topic: str, keys, synonyms: bool, docs: bool) -> list:
    cfg = services.metadata.log_config(topic)
    out = []
    for name in sorted(TOPIC_KEYS):
        if keys is not None and name not in keys:
            continue
        key = TOPIC_KEYS[name]
        syn = topic_synonyms(services, cfg, name)
        source = source_of(syn)
        out.append(_Entry(name=name, value=format_value(cfg[name]), read_only=False,
                          is_default=source == ConfigSource.DEFAULT_CONFIG, config_source=source,
                          is_sensitive=False, synonyms=syn if synonyms else [], config_type=key.type,
                          documentation=key.doc if docs else None))
    return out


def broker_entries(services, keys, synonyms: bool, docs: bool) -> list:
    out = []
    for name, key in sorted(BROKER_KEYS.items()):
        if keys is not None and name not in keys or name in NOT_DESCRIBED:
            continue
        syn = broker_synonyms(services, name)
        source = source_of(syn)
        # passwords (ssl.keystore.password ...) are never told, as Kafka's: null and sensitive
        sensitive = key.type == ConfigType.PASSWORD
        if sensitive:
            for s in syn:
                s.value = None
        out.append(_Entry(name=name, value=None if sensitive else format_value(services.config[name]),
                          read_only=True, is_default=source == ConfigSource.DEFAULT_CONFIG, config_source=source,
                          is_sensitive=sensitive, synonyms=syn if synonyms else [], config_type=key.type,
                          documentation=key.doc if docs else None))
    return out


def handle(ctx: RequestContext, request: DescribeConfigsRequest) -> HandlerResult:
    services = ctx.services
    version = ctx.api_version
    synonyms = request.include_synonyms if version >= 1 else False
    docs = request.include_documentation if version >= 3 else False
    results = []
    for res in request.resources:
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        r = _Result(error_code=0, error_message="", resource_type=res.resource_type,
                    resource_name=res.resource_name, configs=[])
        results.append(r)
        denied = _denied(ctx, Operation.DESCRIBE_CONFIGS, res.resource_type, res.resource_name)
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
            if res.resource_name not in ("", str(services.broker_id)):
                r.error_code = ErrorCode.INVALID_REQUEST
                r.error_message = f"broker {res.resource_name} is not this broker ({services.broker_id})"
                continue
            r.configs = broker_entries(services, keys, synonyms, docs)
        elif res.resource_type == RESOURCE_BROKER_LOGGER:
            r.configs = []
        else:
            r.error_code = ErrorCode.INVALID_REQUEST
            r.error_message = f"unsupported resource type {res.resource_type}"
    return DescribeConfigsResponse(throttle_time_ms=0, results=results)


def _denied(ctx, operation: Operation, resource_type: int, name: str) -> int:
    """As Kafka's: a topic's configs need the operation on the topic, a broker's (and its
    loggers') on the cluster; the error code, or 0."""
    if resource_type == RESOURCE_TOPIC:
        return 0 if ctx.authorize(operation, ResourceType.TOPIC, name) else ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type in (RESOURCE_BROKER, RESOURCE_BROKER_LOGGER):
        return 0 if ctx.authorize(operation, ResourceType.CLUSTER, CLUSTER_NAME) else \
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return 0


_ = ConfigType  # config_type values are ConfigType codes

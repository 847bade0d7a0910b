"""CreateTopics (19). As Kafka answers: a name listed more than once gets one result,
INVALID_REQUEST, and nothing is created for it; validate_only answers what creating would
give (a topic id, partitions, replication factor and the configs) without creating.

A request may create at most MAX_PARTITIONS_PER_REQUEST partitions: beyond that a topic
is refused with POLICY_VIOLATION before anything is assigned (a count of 2**31 - 1 would
otherwise have the broker build an assignment until it runs out of memory, and 65,536
stalled its event loop for seconds). Kafka's controller bounds an operation the same way
(10,000 records: "Unable to perform excessively large batch operation")."""

from collections import Counter

from broker.config import TOPIC_KEYS, LogConfig, validate_topic_configs
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.broker_configs import format_value
from broker.server.context import HandlerResult, RequestContext
from broker.server.handlers.describe_configs import source_of, topic_synonyms
from broker.server.services import BrokerServices
from broker.uuids import random_uuid

API_KEY = ApiKey.CREATE_TOPICS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 7

_Result = CreateTopicsResponse.CreatableTopicResult
_Config = CreateTopicsResponse.CreatableTopicConfigs

MAX_PARTITIONS_PER_REQUEST = 10_000


def handle(ctx: RequestContext, request: CreateTopicsRequest) -> HandlerResult:
    return _handle(ctx, request)


async def _handle(ctx: RequestContext, request: CreateTopicsRequest) -> CreateTopicsResponse:
    services = ctx.services
    results = []
    counts = Counter(t.name for t in request.topics)
    seen: set[str] = set()
    partitions = 0
    cluster_create = ctx.has_right(RIGHTS.create_on_cluster, CLUSTER_NAME)
    for t in request.topics:
        if t.name in seen:
            continue
        seen.add(t.name)
        r = _Result(name=t.name, error_code=0, error_message=None)
        results.append(r)
        if counts[t.name] > 1:
            r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, "Duplicate topic name."
            r.num_partitions = r.replication_factor = -1
            continue
        if not cluster_create and not ctx.has_right(RIGHTS.topic, t.name):
            r.error_code, r.error_message = RIGHTS.topic.error_code, "Authorization failed."
            r.num_partitions = r.replication_factor = -1
            continue
        partitions += max(t.num_partitions, len(t.assignments))
        if partitions > MAX_PARTITIONS_PER_REQUEST:
            r.error_code, r.error_message = (
                ErrorCode.POLICY_VIOLATION,
                f"more than {MAX_PARTITIONS_PER_REQUEST} partitions in one request",
            )
            continue
        configs: dict[str, str] = {}
        try:
            for c in t.configs:
                if c.value is None:
                    raise KafkaProtocolError(ErrorCode.INVALID_CONFIG, f"{c.name}: null value")
                configs[c.name] = c.value
            assignments = {a.partition_index: list(a.broker_ids) for a in t.assignments} or None
            if request.validate_only:
                assignment = services.admin.check_create_topic(
                    t.name, t.num_partitions, t.replication_factor, configs, assignments
                )
                r.topic_id = random_uuid()
                r.num_partitions = len(assignment)
                r.replication_factor = len(next(iter(assignment.values())))
                _answer_configs(ctx, r, services.config.log_config(validate_topic_configs(configs)))
                continue
            info = await services.admin.create_topic(
                t.name, t.num_partitions, t.replication_factor, configs, assignments, request.timeout_ms
            )
            assert info is not None  # with wait (the default): the topic, once online
            r.topic_id = info.topic_id
            r.num_partitions = len(info.partitions)
            r.replication_factor = info.replication_factor
            _answer_configs(ctx, r, services.metadata.log_config(t.name))
        except KafkaProtocolError as exc:
            r.error_code, r.error_message = exc.code, exc.message
    return CreateTopicsResponse(throttle_time_ms=0, topics=results)


def _answer_configs(ctx: RequestContext, r: CreateTopicsResponse.CreatableTopicResult, cfg: LogConfig) -> None:
    """The created topic's configs, as Kafka's: only to a principal that may DESCRIBE_CONFIGS
    the topic; else no configs, partitions and replication factor -1, and
    topic_config_error_code TOPIC_AUTHORIZATION_FAILED (v5+)."""
    if ctx.has_right(RIGHTS.topic_configs, r.name):
        r.configs = _configs(ctx.services, cfg)
    else:
        r.topic_config_error_code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
        r.num_partitions = r.replication_factor = -1


def _configs(services: BrokerServices, cfg: LogConfig) -> list[CreateTopicsResponse.CreatableTopicConfigs]:
    return [
        _Config(
            name=k,
            value=format_value(cfg[k]),
            read_only=False,
            config_source=source_of(topic_synonyms(services, cfg, k)),
            is_sensitive=False,
        )
        for k in sorted(TOPIC_KEYS)
    ]

"""Metadata (3): brokers, controller, topics with their partitions' leaders and ISR, as
this broker's metadata cache has them (what the controller last told it).

Unknown topics are created when auto.create.topics.enable and the request allows it:
the answer then waits (briefly) for the new topic's leaders, or says
LEADER_NOT_AVAILABLE so that the client asks again, as with Kafka.
A requested topic with a topic id (v10+) is looked up by that id whatever its name says:
the Java client sends the name "" (the field's default) beside the id.

With an authorizer (Kafka's rules): topics the principal may not DESCRIBE are left out of
an all-topics answer and TOPIC_AUTHORIZATION_FAILED when named; auto-creation needs
CREATE on the cluster or the topic."""

from collections.abc import Awaitable

from broker.cluster.metadata import BrokerInfo, TopicInfo
from broker.log.manager import validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.METADATA
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 12

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponsePartition
_Broker = MetadataResponse.MetadataResponseBroker


def topic_entry(ctx: RequestContext, info: TopicInfo) -> MetadataResponse.MetadataResponseTopic:
    """A topic's partitions as the client's listener sees them: a leader without an
    endpoint on that listener is LISTENER_NOT_FOUND from v6 (LEADER_NOT_AVAILABLE before),
    as Kafka's metadata cache answers."""
    live = ctx.services.metadata.brokers()
    listener = ctx.listener_name
    missing = ErrorCode.LISTENER_NOT_FOUND if ctx.api_version >= 6 else ErrorCode.LEADER_NOT_AVAILABLE
    parts = []
    for p, s in sorted(info.partitions.items()):
        offline = [r for r in s.replicas if r not in live or r in s.offline_replicas]
        leader = live.get(s.leader)
        leader_ok = leader is not None and leader.endpoint(listener) is not None
        parts.append(
            _Partition(
                error_code=0 if leader_ok else ErrorCode.LEADER_NOT_AVAILABLE if leader is None else missing,
                partition_index=p,
                leader_id=s.leader if leader_ok else -1,
                leader_epoch=s.leader_epoch,
                replica_nodes=list(s.replicas),
                isr_nodes=list(s.isr),
                offline_replicas=offline,
            )
        )
    return _Topic(error_code=0, name=info.name, topic_id=info.topic_id, is_internal=info.internal, partitions=parts)


def handle(ctx: RequestContext, request: MetadataRequest) -> MetadataResponse | Awaitable[MetadataResponse]:
    services = ctx.services
    version = ctx.api_version
    topics: list[MetadataResponse.MetadataResponseTopic | None] = []  # None: being created
    to_create: list[tuple[int, str]] = []
    if request.topics is None or (version == 0 and not request.topics):
        for each in sorted(services.metadata.topics().values(), key=lambda t: t.name):
            # topics the principal may not describe are left out, as Kafka's
            if ctx.has_right(RIGHTS.listed_topic, each.name):
                topics.append(topic_entry(ctx, each))
    else:
        allow_auto = request.allow_auto_topic_creation if version >= 4 else True
        for t in request.topics:
            name = t.name
            by_id = t.topic_id is not None and t.topic_id.int != 0  # not the zero uuid
            if version < 12 and (name is None or by_id):
                # v10 and v11 carry topic ids but no lookup by them (Kafka: "Topic name can
                # not be null", "Topic IDs are not supported in requests for version ..."),
                # and their answers have no null names
                topics.append(_Topic(error_code=ErrorCode.INVALID_REQUEST, name=name or "", topic_id=t.topic_id))
                continue
            if name is None or by_id:
                name = services.metadata.topic_name(t.topic_id)
                if name is None:
                    topics.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id))
                    continue
            if not ctx.has_right(RIGHTS.topic, name):
                # existing or not, said alike (by id: without its name)
                refused = _Topic(error_code=RIGHTS.topic.error_code, name=None if by_id else name)
                if by_id:  # by name: the zero uuid (a null in a non-nullable field broke v10+)
                    refused.topic_id = t.topic_id
                topics.append(refused)
                continue
            info = services.metadata.topic(name)
            if info is not None:
                topics.append(topic_entry(ctx, info))
                continue
            problem = validate_topic_name(name)
            if problem:
                topics.append(_Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name))
            elif allow_auto and services.config["auto.create.topics.enable"]:
                if not (
                    ctx.has_right(RIGHTS.create_on_cluster, CLUSTER_NAME) or ctx.has_right(RIGHTS.create_topic, name)
                ):
                    topics.append(_Topic(error_code=RIGHTS.create_topic.error_code, name=name))
                    continue
                to_create.append((len(topics), name))
                topics.append(None)
            else:
                topics.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
    if to_create:
        return _after_creation(ctx, topics, to_create)
    return _response(ctx, topics)


async def _after_creation(
    ctx: RequestContext, topics: list[MetadataResponse.MetadataResponseTopic | None], to_create: list[tuple[int, str]]
) -> MetadataResponse:
    services = ctx.services
    for index, name in to_create:
        try:
            info = await services.admin.auto_create_topic(name)
        except KafkaProtocolError as exc:
            topics[index] = _Topic(error_code=exc.code, name=name)
            continue
        topics[index] = (
            topic_entry(ctx, info) if info is not None else _Topic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name)
        )
    return _response(ctx, topics)


def brokers_on(ctx: RequestContext) -> list[tuple[BrokerInfo, str, int]]:
    """The live brokers with an endpoint on the request's listener: (broker, host, port),
    by broker id (a broker without that listener is left out, as Kafka does)."""
    listener = ctx.listener_name
    out = []
    for b in sorted(ctx.services.metadata.brokers().values(), key=lambda b: b.broker_id):
        ep = b.endpoint(listener)
        if ep is not None:
            out.append((b, ep[0], ep[1]))
    return out


def _response(ctx: RequestContext, topics: list[MetadataResponse.MetadataResponseTopic | None]) -> MetadataResponse:
    services = ctx.services
    brokers = [_Broker(node_id=b.broker_id, host=host, port=port, rack=b.rack) for b, host, port in brokers_on(ctx)]
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=brokers,
        cluster_id=services.metadata.cluster_id,
        controller_id=services.metadata.controller_id,
        topics=topics,
    )

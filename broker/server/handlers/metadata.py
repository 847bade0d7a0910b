"""Metadata (3): brokers, controller, topics with their partitions' leaders and ISR, as
this broker's metadata cache has them (what the controller last told it).

Unknown topics are created when auto.create.topics.enable and the request allows it:
the answer then waits (briefly) for the new topic's leaders, or says
LEADER_NOT_AVAILABLE so that the client asks again, as with Kafka.
A requested topic with a topic id (v10+) is looked up by that id whatever its name says:
the Java client sends the name "" (the field's default) beside the id."""
from typing import Any

from broker.log.manager import validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.metadata import MetadataRequest, MetadataResponse
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.METADATA
MIN_VERSION, MAX_VERSION = 0, 12

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponsePartition
_Broker = MetadataResponse.MetadataResponseBroker


def topic_entry(services, info) -> Any:         # a MetadataResponseTopic
    live = services.metadata.brokers()
    parts = []
    for p, s in sorted(info.partitions.items()):
        offline = [r for r in s.replicas if r not in live]
        leader_ok = s.leader in live
        parts.append(_Partition(
            error_code=0 if leader_ok else ErrorCode.LEADER_NOT_AVAILABLE,
            partition_index=p, leader_id=s.leader if leader_ok else -1, leader_epoch=s.leader_epoch,
            replica_nodes=list(s.replicas), isr_nodes=list(s.isr), offline_replicas=offline))
    return _Topic(error_code=0, name=info.name, topic_id=info.topic_id, is_internal=info.internal,
                  partitions=parts)


def handle(ctx: RequestContext, request: MetadataRequest) -> HandlerResult:
    services = ctx.services
    version = ctx.api_version
    topics: list = []
    to_create: list[tuple[int, str]] = []
    if request.topics is None or (version == 0 and not request.topics):
        for each in sorted(services.metadata.topics().values(), key=lambda t: t.name):
            topics.append(topic_entry(services, each))
    else:
        allow_auto = request.allow_auto_topic_creation if version >= 4 else True
        for t in request.topics:
            name = t.name
            by_id = t.topic_id is not None and t.topic_id.int != 0           # not the zero uuid
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
            info = services.metadata.topic(name)
            if info is not None:
                topics.append(topic_entry(services, info))
                continue
            problem = validate_topic_name(name)
            if problem:
                topics.append(_Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name))
            elif allow_auto and services.config["auto.create.topics.enable"]:
                to_create.append((len(topics), name))
                topics.append(None)
            else:
                topics.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
    if to_create:
        return _after_creation(ctx, topics, to_create)
    return _response(services, topics)


async def _after_creation(ctx, topics: list, to_create: list[tuple[int, str]]):
    services = ctx.services
    for index, name in to_create:
        try:
            info = await services.admin.auto_create_topic(name)
        except KafkaProtocolError as exc:
            topics[index] = _Topic(error_code=exc.code, name=name)
            continue
        topics[index] = (topic_entry(services, info) if info is not None
                         else _Topic(error_code=ErrorCode.LEADER_NOT_AVAILABLE, name=name))
    return _response(services, topics)


def _response(services, topics) -> MetadataResponse:
    brokers = [_Broker(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
               for b in sorted(services.metadata.brokers().values(), key=lambda b: b.broker_id)]
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=services.metadata.cluster_id,
                            controller_id=services.metadata.controller_id, topics=topics)

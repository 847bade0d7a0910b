"""Metadata (3): brokers, controller, topics with their partitions' leaders and ISR.
Unknown topics are created when auto.create.topics.enable and the request allows it.
A requested topic with a topic id (v10+) is looked up by that id whatever its name says:
the Java client sends the name "" (the field's default) beside the id."""
from broker.log.manager import validate_topic_name
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.metadata import MetadataResponse

API_KEY = ApiKey.METADATA
MIN_VERSION, MAX_VERSION = 0, 12

_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponsePartition
_Broker = MetadataResponse.MetadataResponseBroker


def topic_entry(broker, info) -> "_Topic":
    live = broker.store.brokers()
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


def handle(ctx, request):
    broker = ctx.broker
    version = ctx.api_version
    topics = []
    if request.topics is None or (version == 0 and not request.topics):
        for info in sorted(broker.store.topics().values(), key=lambda t: t.name):
            topics.append(topic_entry(broker, info))
    else:
        allow_auto = request.allow_auto_topic_creation if version >= 4 else True
        for t in request.topics:
            name = t.name
            if t.topic_id is not None and t.topic_id.int:             # not the zero uuid
                name = broker.topic_ids.get(t.topic_id)
                if name is None:
                    topics.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=t.topic_id))
                    continue
            info = broker.topic(name)
            if info is None:
                problem = validate_topic_name(name)
                if problem:
                    topics.append(_Topic(error_code=ErrorCode.INVALID_TOPIC_EXCEPTION, name=name))
                    continue
                if allow_auto:
                    try:
                        info = broker.auto_create_topic(name)
                    except KafkaProtocolError as exc:
                        topics.append(_Topic(error_code=exc.code, name=name))
                        continue
                if info is None:
                    topics.append(_Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name))
                    continue
            topics.append(topic_entry(broker, info))
    brokers = [_Broker(node_id=b.broker_id, host=b.host, port=b.port, rack=b.rack)
               for b in sorted(broker.store.brokers().values(), key=lambda b: b.broker_id)]
    return MetadataResponse(throttle_time_ms=0, brokers=brokers, cluster_id=broker.cluster_id,
                            controller_id=broker.controller_id(), topics=topics)

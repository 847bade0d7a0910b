"""DescribeProducers (61): the active producers of partitions this broker leads, from
their producer state (kafka-transactions describe-producers; `broker producers
describe`): id, epoch, last sequence and timestamp, the coordinator epoch of the last
marker, the first offset of the open transaction (-1 without one). READ on the topic
(else TOPIC_AUTHORIZATION_FAILED), as Kafka's."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import KafkaProtocolError
from broker.protocol.messages.describe_producers import DescribeProducersRequest, DescribeProducersResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DESCRIBE_PRODUCERS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = DescribeProducersResponse


def handle(ctx: RequestContext, request: DescribeProducersRequest) -> DescribeProducersResponse:
    replicas = ctx.services.replicas
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.has_right(RIGHTS.topic, t.name)
        for p in t.partition_indexes:
            r = R.PartitionResponse(partition_index=p, error_code=0, error_message=None, active_producers=[])
            parts.append(r)
            if not allowed:
                r.error_code = RIGHTS.topic.error_code
                continue
            try:
                part = replicas.leader_partition(t.name, p)
            except KafkaProtocolError as exc:
                r.error_code = exc.code
                continue
            for e in part.log.producer_state.producers.values():
                r.active_producers.append(
                    R.ProducerState(
                        producer_id=e.producer_id,
                        producer_epoch=e.epoch,
                        last_sequence=e.last_seq,
                        last_timestamp=e.last_timestamp,
                        coordinator_epoch=e.coordinator_epoch,
                        current_txn_start_offset=e.current_txn_first_offset,
                    )
                )
        topics.append(R.TopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)

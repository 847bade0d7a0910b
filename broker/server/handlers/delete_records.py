"""DeleteRecords (21): move a partition's log start offset forward (-1: to the high
watermark); whole segments below it go at the next retention pass."""

from broker.log import OffsetOutOfRange
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.delete_records import DeleteRecordsRequest, DeleteRecordsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DELETE_RECORDS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 2


def handle(ctx: RequestContext, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.has_right(RIGHTS.topic, t.name)
        for p in t.partitions:
            r = DeleteRecordsResponse.DeleteRecordsPartitionResult(
                partition_index=p.partition_index, low_watermark=-1, error_code=0
            )
            parts.append(r)
            if not allowed:
                r.error_code = RIGHTS.topic.error_code
                continue
            try:
                part = ctx.services.replicas.leader_partition(t.name, p.partition_index)
                r.low_watermark = part.log.delete_records(p.offset)
            except KafkaProtocolError as exc:
                r.error_code = exc.code
            except OffsetOutOfRange:
                r.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
        topics.append(DeleteRecordsResponse.DeleteRecordsTopicResult(name=t.name, partitions=parts))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)

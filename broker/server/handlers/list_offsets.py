"""ListOffsets (2): earliest (-2), latest (-1), max timestamp (-3), earliest local (-4,
v8+: the first offset on this broker's disk, KIP-405), latest tiered (-5, v9+: the last
offset in remote storage, -1 without it, KIP-1005) or the first offset whose timestamp
is >= the one asked, per partition. v10 adds a timeout for reads of remote storage
(KIP-1075), which no lookup here needs. Earliest pending upload (-6, KIP-1023) is v11's,
not served: below it a partition asking for it gets UNSUPPORTED_VERSION, as from Kafka.

With isolation_level 1 (read_committed) the last fetchable offset is the last stable
offset instead of the high watermark, as Kafka's fetchOffsetForTimestamp: latest answers
the LSO, and a timestamp lookup that lands at or beyond it finds nothing."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.LIST_OFFSETS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 1, 10
EARLIEST_PENDING_UPLOAD_TIMESTAMP = -6  # KIP-1023, ListOffsets v11

_TopicResp = ListOffsetsResponse.ListOffsetsTopicResponse
_PartResp = ListOffsetsResponse.ListOffsetsPartitionResponse


def error_response(request: ListOffsetsRequest, code: int) -> ListOffsetsResponse:
    """Every partition answered with `code` (an old version the broker no longer serves)."""
    return ListOffsetsResponse(
        throttle_time_ms=0,
        topics=[
            _TopicResp(
                name=t.name,
                partitions=[
                    _PartResp(
                        partition_index=p.partition_index, error_code=code, timestamp=-1, offset=-1, leader_epoch=-1
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def handle(ctx: RequestContext, request: ListOffsetsRequest) -> ListOffsetsResponse:
    services = ctx.services
    topics = []
    for t in request.topics:
        parts = []
        allowed = ctx.has_right(RIGHTS.topic, t.name)
        for p in t.partitions:
            r = _PartResp(partition_index=p.partition_index, error_code=0, timestamp=-1, offset=-1, leader_epoch=-1)
            parts.append(r)
            if not allowed:
                r.error_code = RIGHTS.topic.error_code
                continue
            if p.timestamp == EARLIEST_PENDING_UPLOAD_TIMESTAMP:
                r.error_code = ErrorCode.UNSUPPORTED_VERSION
                continue
            try:
                part = services.replicas.leader_partition(t.name, p.partition_index, p.current_leader_epoch)
                lg = part.log
                found: tuple[int, int] | None
                if p.timestamp == -1 and request.replica_id >= 0:
                    found = (lg.log_end_offset, -1)  # a follower asks for the log end
                elif request.isolation_level == 1 and p.timestamp not in (-2, -4):
                    lso = lg.last_stable_offset
                    if p.timestamp == -1:
                        found = (lso, -1)
                    else:
                        found = lg.offset_for_timestamp(p.timestamp)
                        if found is not None and found[0] >= lso:
                            found = None
                else:
                    found = lg.offset_for_timestamp(p.timestamp)
                if found is not None:
                    r.offset, r.timestamp = found
                    r.leader_epoch = lg.leader_epochs.epoch_for_offset(r.offset)
            except KafkaProtocolError as exc:
                r.error_code = exc.code
        topics.append(_TopicResp(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics)

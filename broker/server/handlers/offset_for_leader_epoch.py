"""OffsetForLeaderEpoch (23): where a leader epoch ends (KIP-101/KIP-320), so that
consumers and followers can detect and cut a diverged log."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import KafkaProtocolError
from broker.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.OFFSET_FOR_LEADER_EPOCH
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 4


def handle(ctx: RequestContext, request: OffsetForLeaderEpochRequest) -> OffsetForLeaderEpochResponse:
    topics = []
    # as Kafka's: a follower's request (replica id, v3+) needs CLUSTER_ACTION, a client's DESCRIBE per topic
    follower = ctx.api_version >= 3 and request.replica_id >= 0
    cluster_ok = not follower or ctx.has_right(RIGHTS.follower, CLUSTER_NAME)
    for t in request.topics:
        parts = []
        denied = (
            RIGHTS.follower.error_code
            if not cluster_ok
            else None
            if follower or ctx.has_right(RIGHTS.topic, t.topic)
            else RIGHTS.topic.error_code
        )
        for p in t.partitions:
            r = OffsetForLeaderEpochResponse.EpochEndOffset(
                error_code=0, partition=p.partition, leader_epoch=-1, end_offset=-1
            )
            parts.append(r)
            if denied is not None:
                r.error_code = denied
                continue
            try:
                part = ctx.services.replicas.leader_partition(t.topic, p.partition, p.current_leader_epoch)
                lg = part.log
                r.leader_epoch, r.end_offset = lg.leader_epochs.end_offset_for(p.leader_epoch, lg.log_end_offset)
            except KafkaProtocolError as exc:
                r.error_code = exc.code
        topics.append(OffsetForLeaderEpochResponse.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return OffsetForLeaderEpochResponse(throttle_time_ms=0, topics=topics)

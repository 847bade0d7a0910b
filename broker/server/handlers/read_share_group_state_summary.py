"""ReadShareGroupStateSummary (87): the start offset, epochs and (v1, KIP-1226) the
delivery-complete count of share-partitions, from their share coordinator
(broker/share/coordinator.py), without fencing: what DescribeShareGroupOffsets shows.
A share-partition never initialized answers start offset -1. NOT_COORDINATOR where
another broker is the key's coordinator. An empty group id is answered with no results,
as Kafka's. Only brokers send it: CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.read_share_group_state_summary import (
    ReadShareGroupStateSummaryRequest,
    ReadShareGroupStateSummaryResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.share.coordinator import ShareState

API_KEY = ApiKey.READ_SHARE_GROUP_STATE_SUMMARY
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

R = ReadShareGroupStateSummaryResponse


def handle(ctx: RequestContext, request: ReadShareGroupStateSummaryRequest) -> ReadShareGroupStateSummaryResponse:
    if not request.group_id:
        return R(results=[])
    allowed = ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME)
    coord = ctx.services.share_state_coordinator
    results = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            if allowed:
                s = coord.read_summary(request.group_id, t.topic_id, p.partition)
            else:
                s = ShareState(RIGHTS.cluster_action.error_code)
            ok = not s.error
            parts.append(
                R.PartitionResult(
                    partition=p.partition,
                    error_code=s.error,
                    error_message=s.error_message,
                    state_epoch=s.state_epoch if ok else 0,
                    leader_epoch=s.leader_epoch if ok else 0,
                    start_offset=s.start_offset if ok else 0,
                    delivery_complete_count=s.delivery_complete_count if ok else -1,
                )
            )
        results.append(R.ReadStateSummaryResult(topic_id=t.topic_id, partitions=parts))
    return R(results=results)

"""ReadShareGroupState (84): a share-partition leader reads its share-partitions' state
(start offset, state epoch, state batches) from their share coordinator
(broker/share/coordinator.py), fenced by leader epoch: FENCED_LEADER_EPOCH below the
stored one; a newer one is recorded before the answer. A share-partition never
initialized is INVALID_REQUEST, as Kafka 4.4 answers. NOT_COORDINATOR where another
broker is the key's coordinator. An empty group id is answered with no results, as
Kafka's. Only brokers send it: CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED."""

import asyncio
import uuid
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.messages.read_share_group_state import ReadShareGroupStateRequest, ReadShareGroupStateResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.share.coordinator import ShareState

API_KEY = ApiKey.READ_SHARE_GROUP_STATE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = ReadShareGroupStateResponse


async def _handle(ctx: RequestContext, request: ReadShareGroupStateRequest) -> ReadShareGroupStateResponse:
    if not request.group_id:
        return R(results=[])
    allowed = ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME)
    coord = ctx.services.share_state_coordinator

    async def one(topic_id: uuid.UUID, p: Any) -> ShareState:
        if not allowed:
            return ShareState(RIGHTS.cluster_action.error_code)
        return await coord.read(request.group_id, topic_id, p.partition, p.leader_epoch)

    results = []
    for t in request.topics:
        states = await asyncio.gather(*(one(t.topic_id, p) for p in t.partitions))
        results.append(
            R.ReadStateResult(
                topic_id=t.topic_id,
                partitions=[
                    R.PartitionResult(
                        partition=p.partition,
                        error_code=s.error,
                        error_message=s.error_message,
                        state_epoch=s.state_epoch if not s.error else 0,
                        start_offset=s.start_offset if not s.error else 0,
                        state_batches=[
                            R.StateBatch(
                                first_offset=b.first_offset,
                                last_offset=b.last_offset,
                                delivery_state=b.delivery_state,
                                delivery_count=b.delivery_count,
                            )
                            for b in s.batches
                        ],
                    )
                    for p, s in zip(t.partitions, states)
                ],
            )
        )
    return R(results=results)


def handle(ctx: RequestContext, request: ReadShareGroupStateRequest) -> HandlerResult:
    return _handle(ctx, request)

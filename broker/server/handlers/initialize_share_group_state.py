"""InitializeShareGroupState (83): a group coordinator initializes share-partitions' state
(state epoch, start offset) at their share coordinator (broker/share/coordinator.py).
Each partition is answered by this broker's share coordinator: NOT_COORDINATOR where
another broker is the key's coordinator, FENCED_STATE_EPOCH, INVALID_REQUEST,
UNKNOWN_TOPIC_OR_PARTITION as Kafka 4.4's shard answers. An empty group id is answered
with no results, as Kafka's ShareCoordinatorService answers it. Only brokers send it:
CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED for every partition."""

import asyncio
import uuid
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.messages.initialize_share_group_state import (
    InitializeShareGroupStateRequest,
    InitializeShareGroupStateResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.INITIALIZE_SHARE_GROUP_STATE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = InitializeShareGroupStateResponse


async def _handle(ctx: RequestContext, request: InitializeShareGroupStateRequest) -> InitializeShareGroupStateResponse:
    if not request.group_id:
        return R(results=[])
    allowed = ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME)
    coord = ctx.services.share_state_coordinator

    async def one(topic_id: uuid.UUID, p: Any) -> tuple[int, str | None]:
        if not allowed:
            return RIGHTS.cluster_action.error_code, None
        return await coord.initialize(request.group_id, topic_id, p.partition, p.state_epoch, p.start_offset)

    results = []
    for t in request.topics:
        answers = await asyncio.gather(*(one(t.topic_id, p) for p in t.partitions))
        results.append(
            R.InitializeStateResult(
                topic_id=t.topic_id,
                partitions=[
                    R.PartitionResult(partition=p.partition, error_code=err, error_message=msg)
                    for p, (err, msg) in zip(t.partitions, answers)
                ],
            )
        )
    return R(results=results)


def handle(ctx: RequestContext, request: InitializeShareGroupStateRequest) -> HandlerResult:
    return _handle(ctx, request)

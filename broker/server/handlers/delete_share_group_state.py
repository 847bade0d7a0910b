"""DeleteShareGroupState (86): a group coordinator deletes share-partitions' state at their
share coordinator (broker/share/coordinator.py: a tombstone; nothing to do for state that
is not there). NOT_COORDINATOR where another broker is the key's coordinator. An empty
group id is answered with no results, as Kafka's. Only brokers send it: CLUSTER_ACTION,
else CLUSTER_AUTHORIZATION_FAILED."""

import asyncio
import uuid
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.messages.delete_share_group_state import (
    DeleteShareGroupStateRequest,
    DeleteShareGroupStateResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.DELETE_SHARE_GROUP_STATE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = DeleteShareGroupStateResponse


async def _handle(ctx: RequestContext, request: DeleteShareGroupStateRequest) -> DeleteShareGroupStateResponse:
    if not request.group_id:
        return R(results=[])
    allowed = ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME)
    coord = ctx.services.share_state_coordinator

    async def one(topic_id: uuid.UUID, p: Any) -> tuple[int, str | None]:
        if not allowed:
            return RIGHTS.cluster_action.error_code, None
        return await coord.delete(request.group_id, topic_id, p.partition)

    results = []
    for t in request.topics:
        answers = await asyncio.gather(*(one(t.topic_id, p) for p in t.partitions))
        results.append(
            R.DeleteStateResult(
                topic_id=t.topic_id,
                partitions=[
                    R.PartitionResult(partition=p.partition, error_code=err, error_message=msg)
                    for p, (err, msg) in zip(t.partitions, answers)
                ],
            )
        )
    return R(results=results)


def handle(ctx: RequestContext, request: DeleteShareGroupStateRequest) -> HandlerResult:
    return _handle(ctx, request)

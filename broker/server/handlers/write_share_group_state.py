"""WriteShareGroupState (85): a share-partition leader writes its share-partitions' state
(start offset, state batches; v1 the delivery-complete count, KIP-1226) to their share
coordinator (broker/share/coordinator.py), which answers once the ISR has the record:
FENCED_LEADER_EPOCH / FENCED_STATE_EPOCH below the stored epochs, INVALID_REQUEST before
the share-partition is initialized, NOT_COORDINATOR where another broker is the key's
coordinator. An empty group id is answered with no results, as Kafka's. Only brokers
send it: CLUSTER_ACTION, else CLUSTER_AUTHORIZATION_FAILED."""

import asyncio
import uuid
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.messages.write_share_group_state import WriteShareGroupStateRequest, WriteShareGroupStateResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.share.records import StateBatch

API_KEY = ApiKey.WRITE_SHARE_GROUP_STATE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

R = WriteShareGroupStateResponse


async def _handle(ctx: RequestContext, request: WriteShareGroupStateRequest) -> WriteShareGroupStateResponse:
    if not request.group_id:
        return R(results=[])
    allowed = ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME)
    coord = ctx.services.share_state_coordinator
    dcc_known = ctx.api_version >= 1

    async def one(topic_id: uuid.UUID, p: Any) -> tuple[int, str | None]:
        if not allowed:
            return RIGHTS.cluster_action.error_code, None
        return await coord.write(
            request.group_id,
            topic_id,
            p.partition,
            p.state_epoch,
            p.leader_epoch,
            p.start_offset,
            [StateBatch(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count) for b in p.state_batches],
            p.delivery_complete_count if dcc_known else -1,
        )

    results = []
    for t in request.topics:
        answers = await asyncio.gather(*(one(t.topic_id, p) for p in t.partitions))
        results.append(
            R.WriteStateResult(
                topic_id=t.topic_id,
                partitions=[
                    R.PartitionResult(partition=p.partition, error_code=err, error_message=msg)
                    for p, (err, msg) in zip(t.partitions, answers)
                ],
            )
        )
    return R(results=results)


def handle(ctx: RequestContext, request: WriteShareGroupStateRequest) -> HandlerResult:
    return _handle(ctx, request)

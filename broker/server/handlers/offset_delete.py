"""OffsetDelete (47): removes committed offsets of topics the group does not consume."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.OFFSET_DELETE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = OffsetDeleteResponse


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return R(error_code=RIGHTS.group.error_code, throttle_time_ms=0, topics=[])
    readable = {t.name for t in request.topics if ctx.has_right(RIGHTS.topic, t.name)}
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name in readable]
    err, result = await ctx.services.coordinator.delete_offsets(request.group_id, wanted)
    result = {
        **{
            (t.name, p.partition_index): RIGHTS.topic.error_code
            for t in request.topics
            for p in t.partitions
            if t.name not in readable
        },
        **result,
    }
    return R(
        error_code=err,
        throttle_time_ms=0,
        topics=[]
        if err
        else [
            R.OffsetDeleteResponseTopic(
                name=t.name,
                partitions=[
                    R.OffsetDeleteResponsePartition(
                        partition_index=p.partition_index, error_code=result.get((t.name, p.partition_index), 0)
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )

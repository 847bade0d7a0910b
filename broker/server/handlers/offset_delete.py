"""OffsetDelete (47): removes committed offsets of topics the group does not consume."""
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.offset_delete import OffsetDeleteRequest, OffsetDeleteResponse
from broker.security.acl import Operation, ResourceType
from broker.server.context import RequestContext

API_KEY = ApiKey.OFFSET_DELETE
MIN_VERSION, MAX_VERSION = 0, 0

R = OffsetDeleteResponse


async def handle(ctx: RequestContext, request: OffsetDeleteRequest) -> OffsetDeleteResponse:
    if not ctx.authorize(Operation.DELETE, ResourceType.GROUP, request.group_id):
        return R(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, throttle_time_ms=0, topics=[])
    readable = {t.name for t in request.topics if ctx.authorize(Operation.READ, ResourceType.TOPIC, t.name)}
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name in readable]
    err, result = await ctx.services.coordinator.delete_offsets(request.group_id, wanted)
    result = {**{(t.name, p.partition_index): ErrorCode.TOPIC_AUTHORIZATION_FAILED for t in request.topics
                 for p in t.partitions if t.name not in readable}, **result}
    return R(error_code=err, throttle_time_ms=0, topics=[] if err else [
        R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                            error_code=result.get((t.name, p.partition_index), 0))
            for p in t.partitions])
        for t in request.topics])

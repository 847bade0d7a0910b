"""SyncGroup (14): the leader hands in the assignment; every member gets its own."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.SYNC_GROUP
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5


async def handle(ctx: RequestContext, request: SyncGroupRequest) -> SyncGroupResponse:
    v = ctx.api_version
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return SyncGroupResponse(throttle_time_ms=0, error_code=RIGHTS.group.error_code, assignment=b"")
    res = await ctx.services.coordinator.sync_group(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if v >= 3 else None,
        request.protocol_type if v >= 5 else None,
        request.protocol_name if v >= 5 else None,
        {a.member_id: a.assignment for a in request.assignments},
    )
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=res.error,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name,
        assignment=res.assignment,
    )

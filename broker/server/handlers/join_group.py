"""JoinGroup (11): waits until the rebalance completes, then returns the generation; the
leader also gets every member's protocol metadata to compute the assignment."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.join_group import JoinGroupRequest, JoinGroupResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.JOIN_GROUP
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 9


async def handle(ctx: RequestContext, request: JoinGroupRequest) -> JoinGroupResponse:
    v = ctx.api_version
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return JoinGroupResponse(
            throttle_time_ms=0,
            error_code=RIGHTS.group.error_code,
            generation_id=-1,
            protocol_type=None,
            protocol_name=None if v >= 7 else "",
            leader="",
            member_id=request.member_id,
            members=[],
        )
    host = ctx.connection.address[0] if ctx.connection.address else ""
    res = await ctx.services.coordinator.join_group(
        request.group_id,
        request.member_id,
        request.group_instance_id if v >= 5 else None,
        ctx.header.client_id or "",
        f"/{host}",
        request.session_timeout_ms,
        request.rebalance_timeout_ms if v >= 1 else request.session_timeout_ms,
        request.protocol_type,
        [(p.name, p.metadata) for p in request.protocols],
        require_known_member_id=v >= 4,
        reason=request.reason if v >= 8 else None,
    )
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=res.error,
        generation_id=res.generation_id,
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name if (res.protocol_name or v >= 7) else "",
        leader=res.leader,
        skip_assignment=res.skip_assignment,
        member_id=res.member_id,
        members=[
            JoinGroupResponse.JoinGroupResponseMember(member_id=m, group_instance_id=i, metadata=md)
            for m, i, md in res.members
        ],
    )

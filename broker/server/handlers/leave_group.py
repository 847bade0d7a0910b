"""LeaveGroup (13): members leave (one per request before v3, a batch from v3). From v3
the top-level error is for the request (coordinator errors), per-member errors go with
each member."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.LEAVE_GROUP
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5


def handle(ctx: RequestContext, request: LeaveGroupRequest) -> LeaveGroupResponse:
    coord = ctx.services.coordinator
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=RIGHTS.group.error_code, members=[])
    if ctx.api_version < 3:
        _, errors = coord.leave_group(request.group_id, [(request.member_id, None)])
        return LeaveGroupResponse(throttle_time_ms=0, error_code=errors[0])
    members = [(m.member_id, m.group_instance_id) for m in request.members]
    top = coord.check_coordinator(request.group_id)
    if top:
        return LeaveGroupResponse(throttle_time_ms=0, error_code=top, members=[])
    _, errors = coord.leave_group(request.group_id, members)
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=0,
        members=[
            LeaveGroupResponse.MemberResponse(member_id=m, group_instance_id=i, error_code=e)
            for (m, i), e in zip(members, errors)
        ],
    )

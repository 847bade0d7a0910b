"""Heartbeat (12): keeps a member's session alive; REBALANCE_IN_PROGRESS tells it to rejoin."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.HEARTBEAT
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 4


def handle(ctx: RequestContext, request: HeartbeatRequest) -> HeartbeatResponse:
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return HeartbeatResponse(throttle_time_ms=0, error_code=RIGHTS.group.error_code)
    err = ctx.services.coordinator.heartbeat(
        request.group_id,
        request.generation_id,
        request.member_id,
        request.group_instance_id if ctx.api_version >= 3 else None,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=err)

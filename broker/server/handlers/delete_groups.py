"""DeleteGroups (42): empty groups only (NON_EMPTY_GROUP otherwise); their offsets and
metadata are tombstoned in __consumer_offsets."""
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from broker.security.acl import Operation, ResourceType
from broker.server.context import RequestContext

API_KEY = ApiKey.DELETE_GROUPS
MIN_VERSION, MAX_VERSION = 0, 2


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    allowed = [g for g in request.groups_names if ctx.authorize(Operation.DELETE, ResourceType.GROUP, g)]
    result = await ctx.services.coordinator.delete_groups(allowed) if allowed else {}
    result = {g: result.get(g, ErrorCode.GROUP_AUTHORIZATION_FAILED) for g in request.groups_names}
    return DeleteGroupsResponse(throttle_time_ms=0, results=[
        DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=result[g]) for g in request.groups_names])

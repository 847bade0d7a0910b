"""DeleteGroups (42): empty groups only (NON_EMPTY_GROUP otherwise); their offsets and
metadata are tombstoned in __consumer_offsets. A share group goes through its coordinator
(share_coordinator.py): its records get their tombstones."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DELETE_GROUPS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 2


async def handle(ctx: RequestContext, request: DeleteGroupsRequest) -> DeleteGroupsResponse:
    allowed = [g for g in request.groups_names if ctx.has_right(RIGHTS.group, g)]
    share = ctx.services.share_coordinator
    result: dict[str, int] = {}
    classic = []
    for gid in allowed:
        err = ctx.services.coordinator.check_coordinator(gid)
        code = None if err else await share.delete(gid)
        if code is None:
            classic.append(gid)
        else:
            result[gid] = code
    if classic:
        result.update(await ctx.services.coordinator.delete_groups(classic))
    result = {g: result.get(g, RIGHTS.group.error_code) for g in request.groups_names}
    return DeleteGroupsResponse(
        throttle_time_ms=0,
        results=[
            DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=result[g]) for g in request.groups_names
        ],
    )

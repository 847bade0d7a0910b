"""ListGroups (16): groups this broker coordinates (optionally filtered by state)."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.LIST_GROUPS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5


def handle(ctx: RequestContext, request: ListGroupsRequest) -> ListGroupsResponse:
    v = ctx.api_version
    states = set(request.states_filter) if v >= 4 and request.states_filter else None
    types = set(request.types_filter) if v >= 5 and request.types_filter else None
    if types is not None and "classic" not in {t.lower() for t in types}:
        groups = []
    else:
        groups = ctx.services.coordinator.list_groups(states)
        if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
            groups = [g for g in groups if ctx.has_right(RIGHTS.group, g.group_id)]
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=0,
        groups=[
            ListGroupsResponse.ListedGroup(
                group_id=g.group_id,
                protocol_type=g.protocol_type or "",
                group_state=g.state.value,
                group_type="classic",
            )
            for g in groups
        ],
    )

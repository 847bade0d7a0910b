"""ListGroups (16): groups this broker coordinates (optionally filtered by state, and from
v5 by type): classic groups, KIP-848 consumer groups (type "consumer", KIP-848's
states: Empty, Assigning, Reconciling, Stable) and KIP-932 share groups (type and protocol
type "share", states Empty and Stable)."""

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
    wanted = {t.lower() for t in types} if types is not None else {"classic", "consumer", "share"}
    consumer = ctx.services.consumer_coordinator.groups
    share = ctx.services.share_coordinator.groups
    listed: list[tuple[str, str, str, str]] = []  # group id, protocol type, state, type
    if "classic" in wanted:
        for g in ctx.services.coordinator.list_groups(states):
            if g.group_id not in consumer and g.group_id not in share:
                # a KIP-848 group's offsets live in a classic entry
                listed.append((g.group_id, g.protocol_type or "", g.state.value, "classic"))
    if "consumer" in wanted:
        for cg in consumer.values():
            state = cg.state.value
            if states is None or state in states or state.lower() in {s.lower() for s in states}:
                listed.append((cg.group_id, "consumer", state, "consumer"))
    if "share" in wanted:
        for sg in list(share.values()):
            state = sg.state.value
            if states is None or state.lower() in {s.lower() for s in states}:
                listed.append((sg.group_id, "share", state, "share"))
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        listed = [g for g in listed if ctx.has_right(RIGHTS.group, g[0])]
    return ListGroupsResponse(
        throttle_time_ms=0,
        error_code=0,
        groups=[
            ListGroupsResponse.ListedGroup(group_id=gid, protocol_type=pt, group_state=state, group_type=gtype)
            for gid, pt, state, gtype in listed
        ],
    )

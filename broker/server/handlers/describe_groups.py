"""DescribeGroups (15): state, protocol and members (with metadata and assignment)."""

from broker.protocol.api import ApiKey
from broker.protocol.messages.describe_groups import DescribeGroupsRequest, DescribeGroupsResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DESCRIBE_GROUPS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5

R = DescribeGroupsResponse


def handle(ctx: RequestContext, request: DescribeGroupsRequest) -> DescribeGroupsResponse:
    coord = ctx.services.coordinator
    out = []
    for gid in request.groups:
        if not ctx.has_right(RIGHTS.group, gid):
            out.append(
                R.DescribedGroup(
                    error_code=RIGHTS.group.error_code,
                    group_id=gid,
                    group_state="",
                    protocol_type="",
                    protocol_data="",
                    members=[],
                )
            )
            continue
        err, g = coord.describe_group(gid)
        if not err and (
            gid in ctx.services.consumer_coordinator.groups or gid in ctx.services.share_coordinator.groups
        ):
            # a KIP-848 or share group is not a classic group: Kafka answers it Dead up to v5
            # (ConsumerGroupDescribe / ShareGroupDescribe describe them)
            g = None
        if err:
            out.append(
                R.DescribedGroup(
                    error_code=err, group_id=gid, group_state="", protocol_type="", protocol_data="", members=[]
                )
            )
            continue
        if g is None:
            # Kafka answers an unknown group with state Dead and no error up to v5
            # (GROUP_ID_NOT_FOUND only from v6, KIP-1043, which is not spoken here)
            out.append(
                R.DescribedGroup(
                    error_code=0, group_id=gid, group_state="Dead", protocol_type="", protocol_data="", members=[]
                )
            )
            continue
        stable = g.state.value == "Stable"
        members = [
            R.DescribedGroupMember(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                member_metadata=m.metadata_for(g.protocol_name) if (stable and g.protocol_name) else b"",
                member_assignment=m.assignment if stable else b"",
            )
            for m in g.members.values()
        ]
        out.append(
            R.DescribedGroup(
                error_code=0,
                group_id=gid,
                group_state=g.state.value,
                protocol_type=g.protocol_type or "",
                protocol_data=g.protocol_name or "",
                members=members,
            )
        )
    return R(throttle_time_ms=0, groups=out)

"""ShareGroupDescribe (77): a share group's epochs, assignor (`simple`) and members, each
with its subscribed topics and assignment (what `kafka-share-groups --describe --members`
shows). A group id that is not a share group's is GROUP_ID_NOT_FOUND with Kafka 4.4's
message ("Group G is not a share group." / "Group G not found.")."""

from __future__ import annotations

import uuid

from broker.group.consumer_group import Assignment
from broker.group.share_group import ASSIGNOR_NAME, ShareGroup
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.share_group_describe import (
    ShareGroupDescribeRequest,
    ShareGroupDescribeResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.SHARE_GROUP_DESCRIBE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 1, 1

R = ShareGroupDescribeResponse


def _assignment(a: Assignment, names: dict[uuid.UUID, str]) -> ShareGroupDescribeResponse.Assignment:
    return R.Assignment(
        topic_partitions=[
            R.TopicPartitions(topic_id=t, topic_name=names.get(t, ""), partitions=sorted(a[t]))
            for t in sorted(a)
            if a[t]
        ]
    )


def _described(g: ShareGroup, names: dict[uuid.UUID, str]) -> ShareGroupDescribeResponse.DescribedGroup:
    return R.DescribedGroup(
        error_code=0,
        group_id=g.group_id,
        group_state=g.state.value,
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
        assignor_name=ASSIGNOR_NAME,
        members=[
            R.Member(
                member_id=m.member_id,
                rack_id=m.rack_id,
                member_epoch=m.member_epoch,
                client_id=m.client_id,
                client_host=m.client_host,
                subscribed_topic_names=sorted(m.subscribed_topic_names),
                assignment=_assignment(m.assigned, names),
            )
            for m in g.members.values()
        ],
    )


def handle(ctx: RequestContext, request: ShareGroupDescribeRequest) -> ShareGroupDescribeResponse:
    coord = ctx.services.share_coordinator
    out = []
    names: dict[uuid.UUID, str] | None = None
    for gid in request.group_ids:
        if not ctx.has_right(RIGHTS.group, gid):
            out.append(R.DescribedGroup(error_code=RIGHTS.group.error_code, group_id=gid, group_state=""))
            continue
        if not coord.enabled:
            out.append(R.DescribedGroup(error_code=ErrorCode.UNSUPPORTED_VERSION, group_id=gid, group_state=""))
            continue
        err, message, g = coord.describe(gid)
        if g is None:
            out.append(R.DescribedGroup(error_code=err, error_message=message, group_id=gid, group_state=""))
            continue
        if names is None:
            names = coord.topic_ids()
        out.append(_described(g, names))
    return R(throttle_time_ms=0, groups=out)

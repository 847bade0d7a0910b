"""ConsumerGroupDescribe (69): a KIP-848 group's epochs, assignor and members, each with
its current and target assignment (what `kafka-consumer-groups --describe` shows of a
consumer group). An assignment names each topic by id and by name, as Kafka's does (the
tool looks offsets up by name); a topic deleted since it was assigned is left out, as
Kafka leaves it out."""

from __future__ import annotations

import uuid
from collections.abc import Callable

from broker.group.consumer_group import Assignment, ConsumerGroup
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_DESCRIBE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

R = ConsumerGroupDescribeResponse
CONSUMER_MEMBER = 1  # MemberType: a member speaking the consumer protocol


def _assignment(a: Assignment, name_of: Callable[[uuid.UUID], str | None]) -> ConsumerGroupDescribeResponse.Assignment:
    out = []
    for t in sorted(a):
        name = name_of(t)
        if a[t] and name is not None:
            out.append(R.TopicPartitions(topic_id=t, topic_name=name, partitions=sorted(a[t])))
    return R.Assignment(topic_partitions=out)


def _described(
    g: ConsumerGroup, assignor: str, name_of: Callable[[uuid.UUID], str | None]
) -> ConsumerGroupDescribeResponse.DescribedGroup:
    members = [
        R.Member(
            member_id=m.member_id,
            instance_id=m.instance_id,
            rack_id=m.rack_id,
            member_epoch=m.member_epoch,
            client_id=m.client_id,
            client_host=m.client_host,
            subscribed_topic_names=sorted(m.subscribed_topic_names),
            subscribed_topic_regex=m.subscribed_topic_regex,
            assignment=_assignment(m.assigned, name_of),
            target_assignment=_assignment(g.target.get(m.member_id, {}), name_of),
            member_type=CONSUMER_MEMBER,
        )
        for m in g.members.values()
    ]
    return R.DescribedGroup(
        error_code=0,
        group_id=g.group_id,
        group_state=g.state.value,
        group_epoch=g.group_epoch,
        assignment_epoch=g.assignment_epoch,
        assignor_name=assignor,
        members=members,
    )


def handle(ctx: RequestContext, request: ConsumerGroupDescribeRequest) -> ConsumerGroupDescribeResponse:
    coord = ctx.services.consumer_coordinator
    out = []
    for gid in request.group_ids:
        if not ctx.has_right(RIGHTS.group, gid):
            out.append(R.DescribedGroup(error_code=RIGHTS.group.error_code, group_id=gid, group_state=""))
            continue
        err, g = coord.describe(gid)
        if g is None:
            code = err or ErrorCode.GROUP_ID_NOT_FOUND
            message = None
            if code == ErrorCode.GROUP_ID_NOT_FOUND:
                share = gid in ctx.services.share_coordinator.groups
                message = f"Group {gid} is not a consumer group." if share else f"Group {gid} not found."
            out.append(R.DescribedGroup(error_code=code, error_message=message, group_id=gid, group_state=""))
            continue
        out.append(_described(g, coord.assignor_of(g), ctx.services.metadata.topic_name))
    return R(throttle_time_ms=0, groups=out)

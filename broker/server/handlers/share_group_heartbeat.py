"""ShareGroupHeartbeat (76): KIP-932's one request of a share group member — joining
(epoch 0, with the member id the client chose), heartbeating, changing its subscription,
leaving (epoch -1). The group is broker/group/share_group.py's, driven with time and
storage by broker/group/share_coordinator.py.

The request is checked first as Kafka 4.4's GroupCoordinatorService checks it
(INVALID_REQUEST with its message: an empty member id, group id or rack id, a join
without subscribed topics, an epoch below -1). With `group.share.enable=false` the
broker answers UNSUPPORTED_VERSION, as Kafka does while its share.version feature is 0."""

from __future__ import annotations

from broker.group.consumer_group import Assignment, HeartbeatError
from broker.group.share_group import ShareHeartbeat
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.share_group_heartbeat import (
    ShareGroupHeartbeatRequest,
    ShareGroupHeartbeatResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.SHARE_GROUP_HEARTBEAT
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 1, 1

R = ShareGroupHeartbeatResponse


def _blank(s: str | None) -> bool:
    """Kafka's throwIfEmptyString: set but nothing but blanks."""
    return s is not None and not s.strip()


def _invalid(request: ShareGroupHeartbeatRequest) -> str | None:
    """Kafka's message for a request it refuses as INVALID_REQUEST, or None."""
    if _blank(request.member_id):
        return "MemberId can't be empty."
    if _blank(request.group_id):
        return "GroupId can't be empty."
    if _blank(request.rack_id):
        return "RackId can't be empty."
    if request.member_epoch == 0:
        if not request.subscribed_topic_names:
            return "SubscribedTopicNames must be set in first request."
    elif request.member_epoch < -1:
        return "MemberEpoch is invalid."
    return None


def _assignment(a: Assignment | None) -> ShareGroupHeartbeatResponse.Assignment | None:
    if a is None:
        return None
    return R.Assignment(
        topic_partitions=[R.TopicPartitions(topic_id=t, partitions=sorted(a[t])) for t in sorted(a) if a[t]]
    )


async def handle(ctx: RequestContext, request: ShareGroupHeartbeatRequest) -> ShareGroupHeartbeatResponse:
    coord = ctx.services.share_coordinator

    def error(code: int, message: str | None) -> ShareGroupHeartbeatResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message or None, heartbeat_interval_ms=0)

    if not coord.enabled:
        return error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled on this broker.")
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return error(RIGHTS.group.error_code, None)
    for name in request.subscribed_topic_names or ():
        if not ctx.has_right(RIGHTS.topic, name):
            return error(RIGHTS.topic.error_code, None)
    message = _invalid(request)
    if message is not None:
        return error(ErrorCode.INVALID_REQUEST, message)
    host = ctx.connection.address[0] if ctx.connection.address else ""
    req = ShareHeartbeat(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        rack_id=request.rack_id,
        subscribed_topic_names=request.subscribed_topic_names,
        client_id=ctx.header.client_id or "",
        client_host=f"/{host}",
    )
    try:
        result = await coord.heartbeat(req)
    except HeartbeatError as e:
        return error(e.code, e.message)
    return R(
        throttle_time_ms=0,
        error_code=0,
        member_id=result.member_id,
        member_epoch=result.member_epoch,
        heartbeat_interval_ms=coord.heartbeat_interval_ms(request.group_id),
        assignment=_assignment(result.assignment),
    )

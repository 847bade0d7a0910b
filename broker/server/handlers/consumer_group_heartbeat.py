"""ConsumerGroupHeartbeat (68): KIP-848's one request of a consumer group member — joining
(epoch 0), heartbeating with what it owns, leaving (epoch -1, or -2 for a static member
that will be back). The group state is broker/group/consumer_group.py's, driven with time
and storage by broker/group/consumer_coordinator.py.

The request is checked first as Kafka checks it (INVALID_REQUEST with Kafka's message for
a missing group id or member id, a join without rebalance timeout or subscription, or
with owned partitions). Regular expressions are Python's `re`, matched against the whole
topic name; Kafka uses RE2/J, whose syntax is a subset (no backreferences or lookaround):
a pattern RE2/J accepts means the same in `re`, but `re` accepts some RE2/J refuses."""

from __future__ import annotations

import uuid

from broker.group.consumer_group import Assignment, HeartbeatError, HeartbeatRequest
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.CONSUMER_GROUP_HEARTBEAT
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

R = ConsumerGroupHeartbeatResponse


def _invalid(request: ConsumerGroupHeartbeatRequest, version: int) -> str | None:
    """Kafka's message for a request it refuses as INVALID_REQUEST, or None."""
    epoch = request.member_epoch
    if not request.group_id:
        return "GroupId can't be empty."
    if request.instance_id is not None and not request.instance_id:
        return "InstanceId can't be empty."
    if request.rack_id is not None and not request.rack_id:
        return "RackId can't be empty."
    if version >= 1 and not request.member_id:
        return "MemberId can't be empty."
    if epoch > 0 and not request.member_id:
        return "MemberId can't be empty."
    if epoch == 0:
        if request.rebalance_timeout_ms == -1:
            return "RebalanceTimeoutMs must be provided in first request."
        if request.topic_partitions is None or request.topic_partitions:
            return "TopicPartitions must be empty when (re-)joining."
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            return "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif epoch == -2 and request.instance_id is None:
        return "InstanceId can't be null."
    elif epoch < -2:
        return f"MemberEpoch {epoch} is invalid."
    return None


def _assignment(a: Assignment | None) -> ConsumerGroupHeartbeatResponse.Assignment | None:
    if a is None:
        return None
    return R.Assignment(
        topic_partitions=[R.TopicPartitions(topic_id=t, partitions=sorted(a[t])) for t in sorted(a) if a[t]]
    )


async def handle(ctx: RequestContext, request: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
    coord = ctx.services.consumer_coordinator

    def error(code: int, message: str | None) -> ConsumerGroupHeartbeatResponse:
        return R(throttle_time_ms=0, error_code=code, error_message=message or None, heartbeat_interval_ms=0)

    if not ctx.has_right(RIGHTS.group, request.group_id):
        return error(RIGHTS.group.error_code, None)
    message = _invalid(request, ctx.api_version)
    if message is not None:
        return error(ErrorCode.INVALID_REQUEST, message)
    for name in request.subscribed_topic_names or ():
        if not ctx.has_right(RIGHTS.topic, name):
            return error(RIGHTS.topic.error_code, None)
    owned: Assignment | None = None
    if request.topic_partitions is not None:
        owned = {}
        for tp in request.topic_partitions:
            if tp.partitions:
                owned[tp.topic_id] = owned.get(tp.topic_id, frozenset()) | frozenset(tp.partitions)
    host = ctx.connection.address[0] if ctx.connection.address else ""
    req = HeartbeatRequest(
        group_id=request.group_id,
        # v0 clients join without a member id: the coordinator gives one
        member_id=request.member_id or (str(uuid.uuid4()) if request.member_epoch == 0 else ""),
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=request.subscribed_topic_regex if ctx.api_version >= 1 else None,
        server_assignor=request.server_assignor,
        owned=owned,
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
        heartbeat_interval_ms=coord.heartbeat_interval_for(request.group_id),
        assignment=_assignment(result.assignment),
    )

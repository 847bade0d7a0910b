"""ShareAcknowledge (79, KIP-932): a share consumer acknowledges records it acquired,
without fetching, on its share session (broker/share/).

As Kafka 4.4 answers it (UNSUPPORTED_VERSION with group.share.enable=false): READ on the group, else GROUP_AUTHORIZATION_FAILED for the whole
request; READ on each topic, else TOPIC_AUTHORIZATION_FAILED for its partitions; an
unknown topic id UNKNOWN_TOPIC_ID. The session: epoch 0 cannot open one here
(INVALID_SHARE_SESSION_EPOCH), -1 acknowledges and then closes it (releasing what the
member still holds), any other must be the session's epoch (INVALID_SHARE_SESSION_EPOCH;
no session: SHARE_SESSION_NOT_FOUND), which then moves on. Each partition's
acknowledgements are applied all or nothing and persisted before the answer; a refusal
is the partition's error code (INVALID_RECORD_STATE: records this member does not hold
acquired; INVALID_REQUEST: a malformed batch, one past the records delivered, or RENEW
without IsRenewAck; UNKNOWN_TOPIC_OR_PARTITION: a share partition this broker has not
fetched from since it became its leader);
NOT_LEADER_OR_FOLLOWER names the current leader and its endpoint.
"""

from __future__ import annotations

import uuid
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.handlers.share_fetch import Partition, apply_acks, check_acks, leader_of
from broker.share.session import FINAL_EPOCH, INITIAL_EPOCH, next_epoch

API_KEY = ApiKey.SHARE_ACKNOWLEDGE
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 1, 2

R = ShareAcknowledgeResponse


def _top_error(code: int, message: str | None = None) -> ShareAcknowledgeResponse:
    return R(throttle_time_ms=0, error_code=code, error_message=message, responses=[])


async def handle(ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    services = ctx.services
    mgr = services.share_partitions
    version = ctx.api_version
    group = request.group_id
    member = request.member_id or ""
    if not services.config["group.share.enable"]:
        return _top_error(ErrorCode.UNSUPPORTED_VERSION, "Share groups are not enabled on this broker.")
    if not group or not ctx.has_right(RIGHTS.group, group):
        return _top_error(RIGHTS.group.error_code if group else ErrorCode.INVALID_GROUP_ID)
    if not member:
        return _top_error(ErrorCode.INVALID_REQUEST, "no member id")
    renew = version >= 2 and request.is_renew_ack
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return _top_error(ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session")
    session = mgr.sessions.get(group, member)
    if session is None:
        return _top_error(ErrorCode.SHARE_SESSION_NOT_FOUND)
    if epoch != FINAL_EPOCH:
        if epoch != session.epoch:
            return _top_error(ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        session.epoch = next_epoch(epoch)
    metadata = services.metadata
    parts: list[Partition] = []
    for t in request.topics:
        name = metadata.topic_name(t.topic_id)
        allowed = name is not None and ctx.has_right(RIGHTS.topic, name)
        for rp in t.partitions:
            p = Partition(t.topic_id, rp.partition_index, name)
            p.has_acks = True
            if name is None:
                p.error = ErrorCode.UNKNOWN_TOPIC_ID
            elif not allowed:
                p.error = RIGHTS.topic.error_code
            code, p.acks = check_acks(version, renew, rp.acknowledgement_batches)
            p.ack_error = p.error or code
            parts.append(p)
    await apply_acks(mgr, group, member, parts)
    if epoch == FINAL_EPOCH:
        mgr.sessions.remove(group, member)
        mgr.release_member(group, member)
    by_topic: dict[uuid.UUID, list[ShareAcknowledgeResponse.PartitionData]] = {}
    endpoints: dict[int, Any] = {}
    for p in parts:
        code = p.ack_error
        d = R.PartitionData(partition_index=p.index, error_code=code)
        if code == ErrorCode.NOT_LEADER_OR_FOLLOWER:
            leader, leader_epoch, info = leader_of(ctx, p.name, p.index)
            d.current_leader = R.LeaderIdAndEpoch(leader_id=leader, leader_epoch=leader_epoch)
            if info is not None:
                ep = info.endpoint(ctx.listener_name)
                if ep is not None:
                    endpoints[leader] = R.NodeEndpoint(node_id=leader, host=ep[0], port=ep[1], rack=info.rack)
        else:
            d.current_leader = R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
        by_topic.setdefault(p.topic_id, []).append(d)
    ctx.errors = any(p.ack_error for p in parts)
    return R(
        throttle_time_ms=0,
        error_code=0,
        acquisition_lock_timeout_ms=mgr.settings(group).lock_ms,
        responses=[R.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=ps) for tid, ps in by_topic.items()],
        node_endpoints=list(endpoints.values()),
    )

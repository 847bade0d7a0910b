"""DeleteShareGroupOffsets (92): delete an empty share group's state of whole topics
(kafka-share-groups --delete-offsets; broker/share/offsets.py), asked of the group's
coordinator: NOT_COORDINATOR elsewhere, GROUP_ID_NOT_FOUND for a group that does not
exist (or is of another type), NON_EMPTY_GROUP while it has members, INVALID_GROUP_ID for
an empty id (top-level), UNKNOWN_TOPIC_OR_PARTITION per unknown topic. Rights: DELETE on
the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic (else
TOPIC_AUTHORIZATION_FAILED for it)."""

from __future__ import annotations

import asyncio
import uuid

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.delete_share_group_offsets import (
    DeleteShareGroupOffsetsRequest,
    DeleteShareGroupOffsetsResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.share import offsets

API_KEY = ApiKey.DELETE_SHARE_GROUP_OFFSETS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = DeleteShareGroupOffsetsResponse


def _failed(code: int, msg: str | None) -> DeleteShareGroupOffsetsResponse:
    resp: DeleteShareGroupOffsetsResponse = R(throttle_time_ms=0, error_code=code, error_message=msg, responses=[])
    return resp


async def _handle(ctx: RequestContext, request: DeleteShareGroupOffsetsRequest) -> DeleteShareGroupOffsetsResponse:
    gid = request.group_id
    if not gid:
        return _failed(ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
    if not ctx.has_right(RIGHTS.group, gid):
        return _failed(RIGHTS.group.error_code, None)
    coord = ctx.services.share_coordinator
    err, msg, group = coord.describe(gid)
    if err:
        return _failed(err, msg)
    async with coord._locks.setdefault(gid, asyncio.Lock()):
        group = coord.groups.get(gid)
        if group is None:
            return _failed(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found.")
        if group.members:
            return _failed(ErrorCode.NON_EMPTY_GROUP, offsets.NOT_EMPTY)
        names = [t.topic_name for t in request.topics]
        allowed = [n for n in names if ctx.has_right(RIGHTS.topic, n)]
        done = {name: (tid, e, m) for name, tid, e, m in await offsets.delete(ctx.services, gid, allowed)}
    out = []
    for name in names:
        if name in done:
            tid, e, m = done[name]
        else:
            info = ctx.services.metadata.topic(name)
            tid, e, m = (info.topic_id if info is not None else uuid.UUID(int=0)), RIGHTS.topic.error_code, None
        out.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid, error_code=e, error_message=m))
    resp: DeleteShareGroupOffsetsResponse = R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
    return resp


def handle(ctx: RequestContext, request: DeleteShareGroupOffsetsRequest) -> HandlerResult:
    return _handle(ctx, request)

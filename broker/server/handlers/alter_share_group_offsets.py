"""AlterShareGroupOffsets (91): move an empty share group's start offsets (kafka-share-groups
--reset-offsets): each share-partition's state is initialized again at the offset given
(broker/share/offsets.py), asked of the group's coordinator: NOT_COORDINATOR elsewhere,
NON_EMPTY_GROUP while the group has members (top-level and on every partition, as
Kafka's getErrorResponse answers), GROUP_ID_NOT_FOUND for a group of another type,
INVALID_GROUP_ID for an empty id, UNKNOWN_TOPIC_OR_PARTITION per partition. Rights: READ
on the group (else GROUP_AUTHORIZATION_FAILED), READ on each topic (else
TOPIC_AUTHORIZATION_FAILED for its partitions)."""

from __future__ import annotations

import asyncio
import uuid

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_share_group_offsets import (
    AlterShareGroupOffsetsRequest,
    AlterShareGroupOffsetsResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.share import offsets

API_KEY = ApiKey.ALTER_SHARE_GROUP_OFFSETS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

R = AlterShareGroupOffsetsResponse


def _all(
    ctx: RequestContext, request: AlterShareGroupOffsetsRequest, code: int, msg: str | None
) -> AlterShareGroupOffsetsResponse:
    """Every partition answered `code` (and the top level)."""
    out = []
    for t in request.topics:
        info = ctx.services.metadata.topic(t.topic_name)
        out.append(
            R.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                topic_id=info.topic_id if info is not None else uuid.UUID(int=0),
                partitions=[
                    R.AlterShareGroupOffsetsResponsePartition(
                        partition_index=p.partition_index, error_code=code, error_message=msg
                    )
                    for p in t.partitions
                ],
            )
        )
    resp: AlterShareGroupOffsetsResponse = R(throttle_time_ms=0, error_code=code, error_message=msg, responses=out)
    return resp


async def _handle(ctx: RequestContext, request: AlterShareGroupOffsetsRequest) -> AlterShareGroupOffsetsResponse:
    gid = request.group_id
    if not gid:
        return _all(ctx, request, ErrorCode.INVALID_GROUP_ID, "The group id must not be empty.")
    if not ctx.has_right(RIGHTS.group, gid):
        return _all(ctx, request, RIGHTS.group.error_code, None)
    coord = ctx.services.share_coordinator
    err, msg, group = coord.describe(gid)
    if err and not (err == ErrorCode.GROUP_ID_NOT_FOUND and not (msg or "").endswith("is not a share group.")):
        return _all(ctx, request, err, msg)
    # the group's lock: no member joins while its offsets move (as Kafka's write operation)
    async with coord._locks.setdefault(gid, asyncio.Lock()):
        group = coord.groups.get(gid)
        if group is not None and group.members:
            return _all(ctx, request, ErrorCode.NON_EMPTY_GROUP, offsets.NOT_EMPTY)
        allowed = [t for t in request.topics if ctx.has_right(RIGHTS.topic, t.topic_name)]
        done = await offsets.alter(
            ctx.services,
            gid,
            [(t.topic_name, [(p.partition_index, p.start_offset) for p in t.partitions]) for t in allowed],
        )
    by_name = {t.name: t for t in done}
    out = []
    for t in request.topics:
        d = by_name.get(t.topic_name)
        if d is None:  # refused
            info = ctx.services.metadata.topic(t.topic_name)
            tid = info.topic_id if info is not None else uuid.UUID(int=0)
            rows = [offsets.PartitionOffset(p.partition_index, error=RIGHTS.topic.error_code) for p in t.partitions]
        else:
            tid, rows = d.topic_id, d.partitions
        out.append(
            R.AlterShareGroupOffsetsResponseTopic(
                topic_name=t.topic_name,
                topic_id=tid,
                partitions=[
                    R.AlterShareGroupOffsetsResponsePartition(
                        partition_index=r.partition, error_code=r.error, error_message=r.error_message
                    )
                    for r in rows
                ],
            )
        )
    resp: AlterShareGroupOffsetsResponse = R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
    return resp


def handle(ctx: RequestContext, request: AlterShareGroupOffsetsRequest) -> HandlerResult:
    return _handle(ctx, request)

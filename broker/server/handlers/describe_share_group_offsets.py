"""DescribeShareGroupOffsets (90): a share group's start offsets (v1: and lags, KIP-1226),
from its share-partitions' state (broker/share/offsets.py), asked of the group's
coordinator: NOT_COORDINATOR elsewhere; GROUP_ID_NOT_FOUND for a group that is not a
share group, or, when every topic is asked for (null), one that does not exist. Named
topics are answered from their state whether or not the group exists, as Kafka does.
Rights: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED for it), DESCRIBE on each
topic (else TOPIC_AUTHORIZATION_FAILED for its partitions; topics left out of "all")."""

from __future__ import annotations

import uuid
from typing import Any

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_share_group_offsets import (
    DescribeShareGroupOffsetsRequest,
    DescribeShareGroupOffsetsResponse,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.share import offsets

API_KEY = ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

R = DescribeShareGroupOffsetsResponse


async def _group(ctx: RequestContext, g: Any) -> Any:
    gid = g.group_id
    if not ctx.has_right(RIGHTS.group, gid):
        return R.DescribeShareGroupOffsetsResponseGroup(
            group_id=gid, topics=[], error_code=RIGHTS.group.error_code, error_message=None
        )
    err, msg, _group = ctx.services.share_coordinator.describe(gid)
    not_share = err == ErrorCode.GROUP_ID_NOT_FOUND and msg is not None and "is not a share group" in msg
    if err and (err != ErrorCode.GROUP_ID_NOT_FOUND or g.topics is None or not_share):
        return R.DescribeShareGroupOffsetsResponseGroup(group_id=gid, topics=[], error_code=err, error_message=msg)
    denied: list[offsets.TopicOffsets] = []
    if g.topics is None:
        asked = None
    else:
        asked = []
        for t in g.topics:
            if ctx.has_right(RIGHTS.topic, t.topic_name):
                asked.append((t.topic_name, list(t.partitions)))
            else:
                info = ctx.services.metadata.topic(t.topic_name)
                denied.append(
                    offsets.TopicOffsets(
                        t.topic_name,
                        info.topic_id if info is not None else uuid.UUID(int=0),
                        [offsets.PartitionOffset(p, error=RIGHTS.topic.error_code) for p in t.partitions],
                    )
                )
    found = await offsets.describe(ctx.services, gid, asked)
    if asked is None:
        found = [t for t in found if ctx.has_right(RIGHTS.listed_topic, t.name)]
    return R.DescribeShareGroupOffsetsResponseGroup(
        group_id=gid,
        error_code=0,
        error_message=None,
        topics=[
            R.DescribeShareGroupOffsetsResponseTopic(
                topic_name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    R.DescribeShareGroupOffsetsResponsePartition(
                        partition_index=p.partition,
                        start_offset=p.start_offset,
                        leader_epoch=p.leader_epoch,
                        lag=p.lag,
                        error_code=p.error,
                        error_message=p.error_message,
                    )
                    for p in t.partitions
                ],
            )
            for t in found + denied
        ],
    )


async def _handle(ctx: RequestContext, request: DescribeShareGroupOffsetsRequest) -> DescribeShareGroupOffsetsResponse:
    groups = [await _group(ctx, g) for g in request.groups]
    return R(throttle_time_ms=0, groups=groups)


def handle(ctx: RequestContext, request: DescribeShareGroupOffsetsRequest) -> HandlerResult:
    return _handle(ctx, request)

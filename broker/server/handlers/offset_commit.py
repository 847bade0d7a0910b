"""OffsetCommit (8): committed offsets (with metadata and leader epoch) go to
__consumer_offsets before the answer. From v9 (KIP-848) a member of a consumer group
commits at its member epoch (GenerationIdOrMemberEpoch); a classic group's commits are
the same in every version."""

from broker.group.records import OffsetAndMetadata
from broker.protocol.api import ApiKey
from broker.protocol.messages.offset_commit import OffsetCommitRequest, OffsetCommitResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.OFFSET_COMMIT
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 9


async def handle(ctx: RequestContext, request: OffsetCommitRequest) -> OffsetCommitResponse:
    v = ctx.api_version
    offsets = {}
    group_ok = ctx.has_right(RIGHTS.group, request.group_id)
    refused = {}
    for t in request.topics:
        denied = (
            RIGHTS.group.error_code
            if not group_ok
            else None
            if ctx.has_right(RIGHTS.topic, t.name)
            else RIGHTS.topic.error_code
        )
        for p in t.partitions:
            if denied is not None:
                refused[(t.name, p.partition_index)] = denied
                continue
            expire = -1
            if 2 <= v <= 4 and request.retention_time_ms >= 0:
                import time

                expire = int(time.time() * 1000) + request.retention_time_ms
            offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                p.committed_offset,
                p.committed_leader_epoch if v >= 6 else -1,
                p.committed_metadata,
                p.commit_timestamp if v == 1 else -1,
                expire,
            )
    generation = request.generation_id_or_member_epoch if v >= 1 else -1
    member = request.member_id if v >= 1 else ""
    result = (
        {}
        if not offsets
        else await ctx.services.coordinator.commit_offsets(
            request.group_id, generation, member, request.group_instance_id if v >= 7 else None, offsets
        )
    )
    result = {**result, **refused}
    topics = []
    for t in request.topics:
        topics.append(
            OffsetCommitResponse.OffsetCommitResponseTopic(
                name=t.name,
                partitions=[
                    OffsetCommitResponse.OffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=result.get((t.name, p.partition_index), 0)
                    )
                    for p in t.partitions
                ],
            )
        )
    return OffsetCommitResponse(throttle_time_ms=0, topics=topics)

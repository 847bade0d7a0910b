"""OffsetFetch (9): committed offsets of a group (or of several groups from v8); -1 and no
error for partitions without a commit; topics null = every committed partition. With
require_stable (v7+, KIP-447) a partition with a transactional commit still awaiting its
transaction's marker answers UNSTABLE_OFFSET_COMMIT (the client retries). From v9
(KIP-848) a member of a consumer group fetches at its member epoch: an unknown member is
UNKNOWN_MEMBER_ID, another epoch STALE_MEMBER_EPOCH (a classic group's fetch is the same
in every version)."""

from broker.group.coordinator import GroupCoordinator
from broker.group.records import OffsetAndMetadata
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.OFFSET_FETCH
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 9

R = OffsetFetchResponse


def _partitions(
    ctx: RequestContext,
    coord: GroupCoordinator,
    group_id: str,
    topics: (
        list[OffsetFetchRequest.OffsetFetchRequestTopic] | list[OffsetFetchRequest.OffsetFetchRequestTopics] | None
    ),
    stable: bool = False,
) -> tuple[int, dict[str, list[tuple[int, OffsetAndMetadata | None, int]]]]:
    """(group error, {topic: [(partition, offset and metadata, error)]}): as Kafka's,
    DESCRIBE on the group, and on each topic — requested topics the client may not
    describe are TOPIC_AUTHORIZATION_FAILED, and left out of an all-topics answer. With
    `stable` (require_stable), a partition with a transactional offset commit pending is
    UNSTABLE_OFFSET_COMMIT."""
    if not ctx.has_right(RIGHTS.group, group_id):
        return RIGHTS.group.error_code, {
            t.name: [(p, None, RIGHTS.group.error_code) for p in t.partition_indexes] for t in topics or ()
        }
    denied = set() if topics is None else {t.name for t in topics if not ctx.has_right(RIGHTS.topic, t.name)}
    wanted = (
        None if topics is None else [(t.name, p) for t in topics if t.name not in denied for p in t.partition_indexes]
    )
    err, found = coord.fetch_offsets(group_id, wanted) if wanted != [] else (ErrorCode.NONE, {})
    by_topic: dict[str, list[tuple[int, OffsetAndMetadata | None, int]]] = {}
    for (topic, p), om in sorted(found.items()):
        if topics is None and not ctx.has_right(RIGHTS.listed_topic, topic):
            continue
        unstable = stable and not err and coord.has_pending_txn_offset(group_id, (topic, p))
        by_topic.setdefault(topic, []).append(
            (p, None if unstable else om, ErrorCode.UNSTABLE_OFFSET_COMMIT if unstable else 0)
        )
    for t in topics or ():
        if t.name in denied:
            by_topic[t.name] = [(p, None, RIGHTS.topic.error_code) for p in t.partition_indexes]
    return err, by_topic


def handle(ctx: RequestContext, request: OffsetFetchRequest) -> OffsetFetchResponse:
    coord = ctx.services.coordinator
    v = ctx.api_version
    if v >= 8:
        groups = []
        for g in request.groups:
            err, by_topic = _partitions(ctx, coord, g.group_id, g.topics, request.require_stable)
            if err == RIGHTS.group.error_code:
                by_topic = {}
            elif v >= 9 and not err and (g.member_id is not None or g.member_epoch >= 0):
                # a KIP-848 member fetches as itself, at its epoch
                err = coord.validate_consumer_member(g.group_id, g.member_id, g.member_epoch, commit=False)
                if err:
                    by_topic = {}
            groups.append(
                R.OffsetFetchResponseGroup(
                    group_id=g.group_id,
                    error_code=err,
                    topics=[
                        R.OffsetFetchResponseTopics(
                            name=t,
                            partitions=[
                                R.OffsetFetchResponsePartitions(
                                    partition_index=p,
                                    committed_offset=om.offset if om else -1,
                                    committed_leader_epoch=om.leader_epoch if om else -1,
                                    metadata=om.metadata if om else "",
                                    error_code=e,
                                )
                                for p, om, e in parts
                            ],
                        )
                        for t, parts in by_topic.items()
                    ],
                )
            )
        return R(throttle_time_ms=0, groups=groups)
    topics = request.topics if v >= 2 else (request.topics or [])
    err, by_topic = _partitions(ctx, coord, request.group_id, topics, v >= 7 and request.require_stable)
    if err == RIGHTS.group.error_code and v >= 2:
        by_topic = {}
    resp = R(
        throttle_time_ms=0,
        error_code=err,
        topics=[
            R.OffsetFetchResponseTopic(
                name=t,
                partitions=[
                    R.OffsetFetchResponsePartition(
                        partition_index=p,
                        committed_offset=om.offset if om else -1,
                        committed_leader_epoch=om.leader_epoch if om else -1,
                        metadata=om.metadata if om else "",
                        error_code=e or (err if v < 2 else 0),
                    )
                    for p, om, e in parts
                ],
            )
            for t, parts in by_topic.items()
        ],
    )
    return resp

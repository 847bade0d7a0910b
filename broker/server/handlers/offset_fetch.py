"""OffsetFetch (9): committed offsets of a group (or of several groups from v8); -1 and no
error for partitions without a commit; topics null = every committed partition."""
from broker.protocol.api import ApiKey
from broker.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchResponse
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.OFFSET_FETCH
MIN_VERSION, MAX_VERSION = 0, 8

R = OffsetFetchResponse


def _partitions(coord, group_id, topics):
    wanted = None if topics is None else [(t.name, p) for t in topics for p in t.partition_indexes]
    err, found = coord.fetch_offsets(group_id, wanted)
    by_topic: dict[str, list] = {}
    for (topic, p), om in sorted(found.items()):
        by_topic.setdefault(topic, []).append((p, om))
    return err, by_topic


def handle(ctx: RequestContext, request: OffsetFetchRequest) -> HandlerResult:
    coord = ctx.services.coordinator
    v = ctx.api_version
    if v >= 8:
        groups = []
        for g in request.groups:
            err, by_topic = _partitions(coord, g.group_id, g.topics)
            groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=err, topics=[
                R.OffsetFetchResponseTopics(name=t, partitions=[
                    R.OffsetFetchResponsePartitions(
                        partition_index=p, committed_offset=om.offset if om else -1,
                        committed_leader_epoch=om.leader_epoch if om else -1,
                        metadata=om.metadata if om else "", error_code=0)
                    for p, om in parts])
                for t, parts in by_topic.items()]))
        return R(throttle_time_ms=0, groups=groups)
    topics = request.topics if v >= 2 else (request.topics or [])
    err, by_topic = _partitions(coord, request.group_id, topics)
    resp = R(throttle_time_ms=0, error_code=err, topics=[
        R.OffsetFetchResponseTopic(name=t, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=om.offset if om else -1,
                                           committed_leader_epoch=om.leader_epoch if om else -1,
                                           metadata=om.metadata if om else "",
                                           error_code=err if v < 2 else 0)
            for p, om in parts])
        for t, parts in by_topic.items()])
    return resp

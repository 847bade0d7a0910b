"""TxnOffsetCommit (28): a transactional producer commits a group's offsets inside its
transaction (sent to the group coordinator after AddOffsetsToTxn). Visible to OffsetFetch
only once the transaction commits; KIP-447 (v3+) fences a stale member or generation.
Rights as Kafka's: WRITE on the transactional id, READ on the group, READ on each topic
(a topic refused is TOPIC_AUTHORIZATION_FAILED, the others are committed)."""
from broker.group.records import OffsetAndMetadata
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from broker.security.acl import Operation, ResourceType
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.TXN_OFFSET_COMMIT
MIN_VERSION, MAX_VERSION = 0, 4

R = TxnOffsetCommitResponse


async def _handle(ctx, request):
    v = ctx.api_version
    offsets = {}
    for t in request.topics:
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                p.committed_offset, p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata, -1, -1)
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        results = {tp: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in offsets}
    elif not ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id):
        results = {tp: ErrorCode.GROUP_AUTHORIZATION_FAILED for tp in offsets}
    elif not request.group_id:
        results = {tp: ErrorCode.INVALID_GROUP_ID for tp in offsets}
    else:
        denied = {t for t, _ in offsets if not ctx.authorize(Operation.READ, ResourceType.TOPIC, t)}
        allowed = {tp: om for tp, om in offsets.items() if tp[0] not in denied}
        results = await ctx.services.coordinator.commit_txn_offsets(
            request.group_id, request.producer_id, request.producer_epoch,
            request.generation_id if v >= 3 else -1, request.member_id if v >= 3 else "",
            request.group_instance_id if v >= 3 else None, allowed) if allowed else {}
        results = {tp: ErrorCode.TOPIC_AUTHORIZATION_FAILED if tp[0] in denied else results[tp] for tp in offsets}
    if v < 2:
        results = {tp: ErrorCode.INVALID_PRODUCER_EPOCH if c == ErrorCode.PRODUCER_FENCED else c
                   for tp, c in results.items()}
    topics: dict[str, list] = {}
    for (t, p), code in results.items():
        topics.setdefault(t, []).append(R.TxnOffsetCommitResponsePartition(partition_index=p, error_code=code))
    return R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=t, partitions=ps)
                                         for t, ps in topics.items()])


def handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> HandlerResult:
    return _handle(ctx, request)

"""TxnOffsetCommit (28): a transactional producer commits a group's offsets inside its
transaction (sent to the group coordinator after AddOffsetsToTxn). Visible to OffsetFetch
only once the transaction commits; KIP-447 (v3+) fences a stale member or generation.
Rights as Kafka's: WRITE on the transactional id, READ on the group, READ on each topic
(a topic refused is TOPIC_AUTHORIZATION_FAILED, the others are committed).

v5 (transaction.version 2, KIP-890 part 2) comes without AddOffsetsToTxn: the group's
__consumer_offsets partition is added to the transaction here first (at the transaction
coordinator, as Kafka's group coordinator does through its AddPartitionsToTxnManager);
what it answers is every partition's error, a retriable one as
COORDINATOR_LOAD_IN_PROGRESS (the client retries at the same group coordinator)."""

from broker.group.records import OffsetAndMetadata
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest, TxnOffsetCommitResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.TXN_OFFSET_COMMIT
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5

R = TxnOffsetCommitResponse


async def _handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> TxnOffsetCommitResponse:
    v = ctx.api_version
    offsets: dict[tuple[str, int], OffsetAndMetadata] = {}
    for t in request.topics:
        for p in t.partitions:
            offsets[(t.name, p.partition_index)] = OffsetAndMetadata(
                p.committed_offset, p.committed_leader_epoch if v >= 2 else -1, p.committed_metadata, -1, -1
            )
    results: dict[tuple[str, int], int]
    if not ctx.has_right(RIGHTS.transactional_id, request.transactional_id):
        results = {tp: RIGHTS.transactional_id.error_code for tp in offsets}
    elif not ctx.has_right(RIGHTS.group, request.group_id):
        results = {tp: RIGHTS.group.error_code for tp in offsets}
    elif not request.group_id:
        results = {tp: ErrorCode.INVALID_GROUP_ID for tp in offsets}
    elif v >= 5 and (code := await _add_offsets_partition(ctx, request)):
        results = {tp: code for tp in offsets}
    else:
        denied = {t for t, _ in offsets if not ctx.has_right(RIGHTS.topic, t)}
        allowed = {tp: om for tp, om in offsets.items() if tp[0] not in denied}
        results = (
            await ctx.services.coordinator.commit_txn_offsets(
                request.group_id,
                request.producer_id,
                request.producer_epoch,
                request.generation_id_or_member_epoch if v >= 3 else -1,
                request.member_id if v >= 3 else "",
                request.group_instance_id if v >= 3 else None,
                allowed,
            )
            if allowed
            else {}
        )
        results = {tp: RIGHTS.topic.error_code if tp[0] in denied else results[tp] for tp in offsets}
    if v < 2:
        results = {
            tp: ErrorCode.INVALID_PRODUCER_EPOCH if c == ErrorCode.PRODUCER_FENCED else c for tp, c in results.items()
        }
    topics: dict[str, list[TxnOffsetCommitResponse.TxnOffsetCommitResponsePartition]] = {}
    for (t, p), code in results.items():
        topics.setdefault(t, []).append(R.TxnOffsetCommitResponsePartition(partition_index=p, error_code=code))
    return R(
        throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=t, partitions=ps) for t, ps in topics.items()]
    )


#: the transaction coordinator's answers the client should retry (its TxnOffsetCommit
#: handler retries COORDINATOR_LOAD_IN_PROGRESS at the same group coordinator)
_RETRY = frozenset(
    {
        ErrorCode.CONCURRENT_TRANSACTIONS,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.NOT_ENOUGH_REPLICAS,
    }
)


async def _add_offsets_partition(ctx: RequestContext, request: TxnOffsetCommitRequest) -> int:
    """Adds the group's __consumer_offsets partition to the producer's transaction (0, or
    the error to answer)."""
    from broker.group.records import partition_for

    services = ctx.services
    partitions = services.config["offsets.topic.num.partitions"]
    info = services.metadata.topic("__consumer_offsets")
    if info is not None:
        partitions = len(info.partitions)
    tp = ("__consumer_offsets", partition_for(request.group_id, partitions))
    try:
        answers = await services.txn_coordinator.add_or_verify(
            request.transactional_id, request.producer_id, request.producer_epoch, [tp], add=True
        )
    except Exception:
        return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    code = answers.get(tp, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
    return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS if code in _RETRY else code


def handle(ctx: RequestContext, request: TxnOffsetCommitRequest) -> HandlerResult:
    return _handle(ctx, request)

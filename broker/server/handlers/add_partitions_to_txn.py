"""AddPartitionsToTxn (24): a producer's partitions join its open transaction (v0-3), or
a broker asks whether they did (v4+, batched per transactional id, `verify_only`: KIP-890
part 1, the produce path's verification).

A topic the broker does not know is UNKNOWN_TOPIC_OR_PARTITION for its partitions and
OPERATION_NOT_ATTEMPTED for the others (nothing is added), as Kafka answers; otherwise
every partition gets the coordinator's one answer. v4+ batches that are not verify_only
come from no client Kafka ships; they are served the same way. v5 (transaction.version
2) not verify_only is a partition's leader adding the partition for its producer
(Produce v12, KIP-890 part 2): the transaction is then one of transaction.version 2.

Rights, as Kafka's KafkaApis: v4+ (sent by brokers) needs CLUSTER_ACTION; WRITE on the
transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED for every partition) and on
each topic (else TOPIC_AUTHORIZATION_FAILED, the others OPERATION_NOT_ATTEMPTED)."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.ADD_PARTITIONS_TO_TXN
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5

R = AddPartitionsToTxnResponse


def _results(by: dict[tuple[str, int], int]) -> list[AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
    topics: dict[str, list[AddPartitionsToTxnResponse.AddPartitionsToTxnPartitionResult]] = {}
    for (t, p), code in by.items():
        topics.setdefault(t, []).append(
            R.AddPartitionsToTxnPartitionResult(partition_index=p, partition_error_code=code)
        )
    return [R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=ps) for t, ps in topics.items()]


async def _one(
    ctx: RequestContext,
    txn_id: str,
    pid: int,
    epoch: int,
    topics: list[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],
    verify_only: bool,
) -> dict[tuple[str, int], int]:
    parts = [(t.name, p) for t in topics for p in t.partitions]
    if not ctx.has_right(RIGHTS.transactional_id, txn_id):
        return {tp: RIGHTS.transactional_id.error_code for tp in parts}
    denied = {t.name for t in topics if not ctx.has_right(RIGHTS.topic, t.name)}
    if denied:
        return {tp: RIGHTS.topic.error_code if tp[0] in denied else ErrorCode.OPERATION_NOT_ATTEMPTED for tp in parts}
    coord = ctx.services.txn_coordinator
    if verify_only:
        return coord.verify_partitions(txn_id, pid, epoch, parts)
    meta = ctx.services.metadata
    unknown = {(t, p) for t, p in parts if (info := meta.topic(t)) is None or p not in info.partitions}
    if unknown:
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in parts
        }
    code = await coord.add_partitions(txn_id, pid, epoch, parts, client_version=2 if ctx.api_version >= 5 else None)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return {tp: code for tp in parts}


async def _handle(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> AddPartitionsToTxnResponse:
    if ctx.api_version < 4:
        by = await _one(
            ctx,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            False,
        )
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=_results(by))
    if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):
        return R(throttle_time_ms=0, error_code=RIGHTS.cluster_action.error_code, results_by_transaction=[])
    out = []
    for txn in request.transactions:
        by = await _one(ctx, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics, txn.verify_only)
        out.append(R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id, topic_results=_results(by)))
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=out)


def handle(ctx: RequestContext, request: AddPartitionsToTxnRequest) -> HandlerResult:
    return _handle(ctx, request)

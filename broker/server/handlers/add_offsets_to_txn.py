"""AddOffsetsToTxn (25): the group's __consumer_offsets partition joins the producer's
transaction, so TxnOffsetCommit may write there and EndTxn's markers reach it. WRITE on
the transactional id and READ on the group, as Kafka's."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 4


async def _handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> AddOffsetsToTxnResponse:
    if not ctx.has_right(RIGHTS.transactional_id, request.transactional_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=RIGHTS.transactional_id.error_code)
    if not ctx.has_right(RIGHTS.group, request.group_id):
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=RIGHTS.group.error_code)
    if not request.group_id:
        return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=ErrorCode.INVALID_GROUP_ID)
    services = ctx.services
    partitions = services.config["offsets.topic.num.partitions"]
    info = services.metadata.topic("__consumer_offsets")
    if info is not None:
        partitions = len(info.partitions)
    code = await services.txn_coordinator.add_offsets(
        request.transactional_id, request.producer_id, request.producer_epoch, request.group_id, partitions
    )
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)


def handle(ctx: RequestContext, request: AddOffsetsToTxnRequest) -> HandlerResult:
    return _handle(ctx, request)

"""EndTxn (26): commit or abort the producer's transaction. Answered once PrepareCommit /
PrepareAbort is in __transaction_state (on the ISR); the markers follow (the coordinator
writes them to every partition of the transaction, then completes it). WRITE on the
transactional id, as Kafka's."""
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from broker.security.acl import Operation, ResourceType
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.END_TXN
MIN_VERSION, MAX_VERSION = 0, 4


async def _handle(ctx, request):
    if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
        return EndTxnResponse(throttle_time_ms=0, error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    code, _pid, _epoch = await ctx.services.txn_coordinator.end_txn(
        request.transactional_id, request.producer_id, request.producer_epoch, request.committed)
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    return EndTxnResponse(throttle_time_ms=0, error_code=code)


def handle(ctx: RequestContext, request: EndTxnRequest) -> HandlerResult:
    return _handle(ctx, request)

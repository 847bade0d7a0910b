"""EndTxn (26): commit or abort the producer's transaction. Answered once PrepareCommit /
PrepareAbort is in __transaction_state (on the ISR); the markers follow (the coordinator
writes them to every partition of the transaction, then completes it). WRITE on the
transactional id, as Kafka's. v5 (transaction.version 2, KIP-890 part 2): every end bumps
the producer's epoch, and the answer names the producer id and epoch to go on with."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.END_TXN
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5


async def _handle(ctx: RequestContext, request: EndTxnRequest) -> EndTxnResponse:
    if not ctx.has_right(RIGHTS.transactional_id, request.transactional_id):
        return EndTxnResponse(
            throttle_time_ms=0, error_code=RIGHTS.transactional_id.error_code, producer_id=-1, producer_epoch=-1
        )
    code, pid, epoch = await ctx.services.txn_coordinator.end_txn(
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        request.committed,
        client_version=2 if ctx.api_version >= 5 else 0,
    )
    if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 2:
        code = ErrorCode.INVALID_PRODUCER_EPOCH
    if code:
        pid, epoch = -1, -1
    return EndTxnResponse(throttle_time_ms=0, error_code=code, producer_id=pid, producer_epoch=epoch)


def handle(ctx: RequestContext, request: EndTxnRequest) -> HandlerResult:
    return _handle(ctx, request)

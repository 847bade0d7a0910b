"""InitProducerId (22): producer ids. Without a transactional id every request gets a
fresh id at epoch 0, as Kafka answers (its partitions then dedup retried batches by id,
epoch and sequence: broker/log/producer_state.py). Ids come in blocks of 1000 claimed
from the metadata store (/latest_producer_id_block), so brokers of a cluster never hand
out the same id.

With a transactional id the transaction coordinator answers (broker/txn/coordinator.py):
NOT_COORDINATOR elsewhere than on the leader of the id's __transaction_state partition;
the id's producer id with a bumped epoch (fencing the previous producer, whose open
transaction is aborted first: the caller gets CONCURRENT_TRANSACTIONS and retries);
v3+ names the producer's current id and epoch (KIP-360: a bump after a retriable error);
a timeout above transaction.max.timeout.ms is INVALID_TRANSACTION_TIMEOUT."""

from collections.abc import Awaitable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.INIT_PRODUCER_ID
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 5


def handle(
    ctx: RequestContext, request: InitProducerIdRequest
) -> InitProducerIdResponse | Awaitable[InitProducerIdResponse]:
    # as Kafka's: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the
    # cluster or WRITE on some topic
    if request.transactional_id is not None:
        if not ctx.has_right(RIGHTS.transactional_id, request.transactional_id):
            return InitProducerIdResponse(
                throttle_time_ms=0, producer_id=-1, producer_epoch=-1, error_code=RIGHTS.transactional_id.error_code
            )
    elif not (ctx.has_right(RIGHTS.idempotent, CLUSTER_NAME) or ctx.has_right_on_some(RIGHTS.some_topic)):
        return InitProducerIdResponse(
            throttle_time_ms=0, producer_id=-1, producer_epoch=-1, error_code=RIGHTS.idempotent.error_code
        )
    if request.transactional_id is not None:
        if not request.transactional_id:
            return _response(ErrorCode.INVALID_REQUEST)
        return _transactional(ctx, request)
    return _fresh_id(ctx)


def _response(code: int, pid: int = -1, epoch: int = -1) -> InitProducerIdResponse:
    return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=pid, producer_epoch=epoch)


async def _transactional(ctx: RequestContext, request: InitProducerIdRequest) -> InitProducerIdResponse:
    v3 = ctx.api_version >= 3
    err, pid, epoch = await ctx.services.txn_coordinator.init_producer_id(
        request.transactional_id,
        request.transaction_timeout_ms,
        request.producer_id if v3 else -1,
        request.producer_epoch if v3 else -1,
    )
    if err == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
        err = ErrorCode.INVALID_PRODUCER_EPOCH  # PRODUCER_FENCED is new in v4 (KIP-588)
    return _response(err, pid, epoch)


async def _fresh_id(ctx: RequestContext) -> InitProducerIdResponse:
    try:
        pid = await ctx.services.producer_ids.generate()
    except Exception:
        return _response(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    return _response(0, pid, 0)

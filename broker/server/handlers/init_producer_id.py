"""InitProducerId (22): producer ids for idempotent producers (kafka-python asks by
default). Ids come from the metadata store and are never reused. Without a transactional
id every request gets a fresh id at epoch 0, as Kafka answers (its partitions then dedup
retried batches by id, epoch and sequence: broker/log/producer_state.py). Transactional
ids need the transaction coordinator, which this broker does not have yet:
COORDINATOR_NOT_AVAILABLE. Ids come in blocks of 1000 claimed from the metadata store
(/latest_producer_id_block), so brokers of a cluster never hand out the same id."""
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.init_producer_id import InitProducerIdRequest, InitProducerIdResponse
from broker.security.acl import CLUSTER_NAME, Operation, ResourceType
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.INIT_PRODUCER_ID
MIN_VERSION, MAX_VERSION = 0, 5


def handle(ctx: RequestContext, request: InitProducerIdRequest) -> HandlerResult:
    # as Kafka's: WRITE on the transactional id; an idempotent producer needs IDEMPOTENT_WRITE on the
    # cluster or WRITE on some topic
    if request.transactional_id is not None:
        if not ctx.authorize(Operation.WRITE, ResourceType.TRANSACTIONAL_ID, request.transactional_id):
            return InitProducerIdResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1,
                                          error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    elif not (ctx.authorize(Operation.IDEMPOTENT_WRITE, ResourceType.CLUSTER, CLUSTER_NAME, audit=False)
              or ctx.authorize_any(Operation.WRITE, ResourceType.TOPIC)):
        return InitProducerIdResponse(throttle_time_ms=0, producer_id=-1, producer_epoch=-1,
                                      error_code=ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if request.transactional_id is not None:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    return _fresh_id(ctx)


async def _fresh_id(ctx):
    try:
        pid = await ctx.services.producer_ids.generate()
    except Exception:
        return InitProducerIdResponse(throttle_time_ms=0, error_code=ErrorCode.COORDINATOR_NOT_AVAILABLE,
                                      producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=pid, producer_epoch=0)

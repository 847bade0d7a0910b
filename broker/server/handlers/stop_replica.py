"""StopReplica (5): the controller tells this broker to stop following partitions — and to
delete their logs when their topic is being deleted, or when they moved away."""
from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from broker.server.context import HandlerResult, RequestContext

API_KEY = ApiKey.STOP_REPLICA
MIN_VERSION, MAX_VERSION = 3, 4

_PartError = StopReplicaResponse.StopReplicaPartitionError


async def apply(broker, request) -> StopReplicaResponse:
    wanted = [(TopicPartition(t.topic_name, p.partition_index), p.leader_epoch, p.delete_partition)
              for t in request.topic_states for p in t.partition_states]
    if not broker.replicas.check_controller_epoch(request.controller_epoch):
        return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH, partition_errors=[])
    if 0 <= request.broker_epoch < broker.broker_epoch:
        return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, partition_errors=[])
    errors = broker.replicas.stop_replicas(wanted)
    return StopReplicaResponse(error_code=ErrorCode.NONE, partition_errors=[
        _PartError(topic_name=tp.topic, partition_index=tp.partition, error_code=e) for tp, e in errors.items()])


def handle(ctx: RequestContext, request: StopReplicaRequest) -> HandlerResult:
    return apply(ctx.broker, request)

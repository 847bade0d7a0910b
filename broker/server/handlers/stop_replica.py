"""StopReplica (5): the controller tells this broker to stop following partitions — and to
delete their logs when their topic is being deleted, or when they moved away."""

from collections.abc import Awaitable

from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.STOP_REPLICA
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 3, 4

_PartError = StopReplicaResponse.StopReplicaPartitionError


async def apply(services: BrokerServices, request: StopReplicaRequest) -> StopReplicaResponse:
    wanted = [
        (TopicPartition(t.topic_name, p.partition_index), p.leader_epoch, p.delete_partition)
        for t in request.topic_states
        for p in t.partition_states
    ]
    if not services.replicas.check_controller_epoch(request.controller_epoch):
        return StopReplicaResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH, partition_errors=[])
    if 0 <= request.broker_epoch < services.broker_epoch:
        return StopReplicaResponse(error_code=ErrorCode.STALE_BROKER_EPOCH, partition_errors=[])
    errors = services.replicas.stop_replicas(wanted)
    return StopReplicaResponse(
        error_code=ErrorCode.NONE,
        partition_errors=[
            _PartError(topic_name=tp.topic, partition_index=tp.partition, error_code=e) for tp, e in errors.items()
        ],
    )


async def _from_network(services: BrokerServices, request: StopReplicaRequest) -> StopReplicaResponse:
    err = await services.check_control_request(
        "StopReplica", request.controller_id, request.controller_epoch, request.broker_epoch
    )
    if err != ErrorCode.NONE:
        return StopReplicaResponse(error_code=err, partition_errors=[])
    return await apply(services, request)


def handle(ctx: RequestContext, request: StopReplicaRequest) -> StopReplicaResponse | Awaitable[StopReplicaResponse]:
    if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):  # inter-broker: CLUSTER_ACTION
        return StopReplicaResponse(error_code=RIGHTS.cluster_action.error_code)
    return _from_network(ctx.services, request)

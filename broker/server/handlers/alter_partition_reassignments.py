"""AlterPartitionReassignments (45), on the controller (KIP-455): each partition's new
replicas, or a null list to cancel its reassignment, as Kafka's kafka-reassign-partitions
and Admin.alterPartitionReassignments ask. ALTER on the cluster; a broker that is not the
active controller answers NOT_CONTROLLER (the client finds the controller again)."""

from __future__ import annotations

from collections.abc import Awaitable

from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.ALTER_PARTITION_REASSIGNMENTS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

_R = AlterPartitionReassignmentsResponse


async def apply(
    services: BrokerServices, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse:
    from broker.cluster.controller.reassignments import answer

    wanted: dict[TopicPartition, list[int] | None] = {}
    for t in request.topics:
        for p in t.partitions:
            wanted[TopicPartition(t.name, p.partition_index)] = None if p.replicas is None else list(p.replicas)
    controller = services.controller
    if controller is None or not controller.active:
        return _R(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, error_message=None, responses=[])
    try:
        results = answer(await controller.reassignments.alter(wanted))
    except Exception:
        return _R(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, error_message=None, responses=[])
    by_topic: dict[str, list[AlterPartitionReassignmentsResponse.ReassignablePartitionResponse]] = {}
    for t in request.topics:
        for p in t.partitions:
            err, msg = results[TopicPartition(t.name, p.partition_index)]
            by_topic.setdefault(t.name, []).append(
                _R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=err, error_message=msg)
            )
    return _R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        responses=[_R.ReassignableTopicResponse(name=name, partitions=ps) for name, ps in by_topic.items()],
    )


def _refused(request: AlterPartitionReassignmentsRequest, code: int) -> AlterPartitionReassignmentsResponse:
    """Kafka's getErrorResponse: the error at the top and on every partition."""
    return _R(
        throttle_time_ms=0,
        error_code=code,
        error_message=None,
        responses=[
            _R.ReassignableTopicResponse(
                name=t.name,
                partitions=[
                    _R.ReassignablePartitionResponse(
                        partition_index=p.partition_index, error_code=code, error_message=None
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


def handle(
    ctx: RequestContext, request: AlterPartitionReassignmentsRequest
) -> AlterPartitionReassignmentsResponse | Awaitable[AlterPartitionReassignmentsResponse]:
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _refused(request, RIGHTS.cluster.error_code)
    return apply(ctx.services, request)

"""ListPartitionReassignments (46), on the controller (KIP-455): the partitions being
reassigned (of those named, or all) with their replicas, adding and removing replicas.
DESCRIBE on the cluster; a broker that is not the active controller answers NOT_CONTROLLER."""

from __future__ import annotations

from collections.abc import Awaitable

from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.LIST_PARTITION_REASSIGNMENTS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 0

_R = ListPartitionReassignmentsResponse


def _error(code: int) -> ListPartitionReassignmentsResponse:
    return _R(throttle_time_ms=0, error_code=code, error_message=None, topics=[])


async def apply(
    services: BrokerServices, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse:
    wanted = None
    if request.topics is not None:
        wanted = [TopicPartition(t.name, p) for t in request.topics for p in t.partition_indexes]
    controller = services.controller
    if controller is None or not controller.active:
        return _error(ErrorCode.NOT_CONTROLLER)
    try:
        found = await controller.reassignments.listing(wanted)
    except Exception:
        return _error(ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[ListPartitionReassignmentsResponse.OngoingPartitionReassignment]] = {}
    for tp, ra in sorted(found.items()):
        by_topic.setdefault(tp.topic, []).append(
            _R.OngoingPartitionReassignment(
                partition_index=tp.partition,
                replicas=list(ra.replicas),
                adding_replicas=list(ra.adding),
                removing_replicas=list(ra.removing),
            )
        )
    return _R(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        error_message=None,
        topics=[_R.OngoingTopicReassignment(name=name, partitions=ps) for name, ps in by_topic.items()],
    )


def handle(
    ctx: RequestContext, request: ListPartitionReassignmentsRequest
) -> ListPartitionReassignmentsResponse | Awaitable[ListPartitionReassignmentsResponse]:
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _error(RIGHTS.cluster.error_code)
    return apply(ctx.services, request)

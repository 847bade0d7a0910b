"""ControlledShutdown (7), on the controller: a broker about to stop asks that every
partition it leads move to another ISR member first; the answer lists those that could
not move yet (the broker asks again)."""

from collections.abc import Awaitable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.controlled_shutdown import ControlledShutdownRequest, ControlledShutdownResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.CONTROLLED_SHUTDOWN
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 3


async def apply(services: BrokerServices, request: ControlledShutdownRequest) -> ControlledShutdownResponse:
    controller = services.controller
    if controller is None or not controller.active:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
    try:
        error, remaining = await controller.controlled_shutdown(request.broker_id, request.broker_epoch)
    except Exception:
        return ControlledShutdownResponse(error_code=ErrorCode.NOT_CONTROLLER, remaining_partitions=[])
    return ControlledShutdownResponse(
        error_code=error,
        remaining_partitions=[
            ControlledShutdownResponse.RemainingPartition(topic_name=tp.topic, partition_index=tp.partition)
            for tp in remaining
        ],
    )


def handle(
    ctx: RequestContext, request: ControlledShutdownRequest
) -> ControlledShutdownResponse | Awaitable[ControlledShutdownResponse]:
    if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):  # inter-broker: CLUSTER_ACTION
        return ControlledShutdownResponse(error_code=RIGHTS.cluster_action.error_code, remaining_partitions=[])
    return apply(ctx.services, request)

"""AlterPartition (56), on the controller: a partition leader asks to change its ISR. The
controller validates it against the partition's state (leader epoch, partition epoch,
replicas alive), records it in the store and answers with the new state."""

from collections.abc import Awaitable
from typing import cast

from broker.cluster.controller.decisions import LeaderAndIsr
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_partition import AlterPartitionRequest, AlterPartitionResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.ALTER_PARTITION
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 3

_Topic = AlterPartitionResponse.TopicData
_Part = AlterPartitionResponse.PartitionData


async def apply(services: BrokerServices, request: AlterPartitionRequest) -> AlterPartitionResponse:
    controller = services.controller
    if controller is None or not controller.active:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    changes = []
    names = {}
    for t in request.topics:
        name = t.topic_name or services.metadata.topic_name(t.topic_id)
        names[id(t)] = name
        if name is None:
            continue
        for p in t.partitions:
            isr = [b.broker_id for b in p.new_isr_with_epochs] if p.new_isr_with_epochs else list(p.new_isr)
            changes.append((name, p.partition_index, p.leader_epoch, isr, p.partition_epoch, p.leader_recovery_state))
    try:
        error, results = await controller.alter_partition(request.broker_id, request.broker_epoch, changes)
    except Exception:
        return AlterPartitionResponse(throttle_time_ms=0, error_code=ErrorCode.NOT_CONTROLLER, topics=[])
    topics = []
    for t in request.topics:
        name = names[id(t)]
        parts = []
        for p in t.partitions:
            res = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if name is None
                else results.get((name, p.partition_index), ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            )
            if isinstance(res, LeaderAndIsr):
                parts.append(
                    _Part(
                        partition_index=p.partition_index,
                        error_code=0,
                        leader_id=res.leader,
                        leader_epoch=res.leader_epoch,
                        isr=list(res.isr),
                        leader_recovery_state=res.leader_recovery_state,
                        partition_epoch=res.partition_epoch,
                    )
                )
            else:
                parts.append(
                    _Part(
                        partition_index=p.partition_index,
                        error_code=int(cast(int, res)),
                        leader_id=-1,
                        leader_epoch=-1,
                        isr=[],
                        leader_recovery_state=0,
                        partition_epoch=-1,
                    )
                )
        topics.append(_Topic(topic_name=name or "", topic_id=t.topic_id, partitions=parts))
    return AlterPartitionResponse(throttle_time_ms=0, error_code=error, topics=topics)


def handle(
    ctx: RequestContext, request: AlterPartitionRequest
) -> AlterPartitionResponse | Awaitable[AlterPartitionResponse]:
    if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):  # inter-broker: CLUSTER_ACTION
        return AlterPartitionResponse(error_code=RIGHTS.cluster_action.error_code, topics=[])
    return apply(ctx.services, request)

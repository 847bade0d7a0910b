"""LeaderAndIsr (4): the controller tells this broker the leader, leader epoch, ISR and
replicas of partitions it hosts; it becomes leader or follower of each (the replica
manager). Stamped with the controller epoch: an older one is refused whole
(STALE_CONTROLLER_EPOCH); so is a request for an older broker epoch (STALE_BROKER_EPOCH,
a request meant for this broker id's previous life)."""

from collections.abc import Awaitable

from broker.cluster.metadata import BrokerInfo, PartitionState
from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.LEADER_AND_ISR
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 5, 7

_TopicError = LeaderAndIsrResponse.LeaderAndIsrTopicError
_PartError = LeaderAndIsrResponse.LeaderAndIsrPartitionError


def _answer(
    request: LeaderAndIsrRequest, error: int, errors: dict[tuple[str, int], int] | None = None
) -> LeaderAndIsrResponse:
    topics = []
    for t in request.topic_states:
        parts = [
            _PartError(
                partition_index=ps.partition_index,
                error_code=(errors or {}).get((t.topic_name, ps.partition_index), error),
            )
            for ps in t.partition_states
        ]
        topics.append(_TopicError(topic_id=t.topic_id, partition_errors=parts))
    return LeaderAndIsrResponse(error_code=error, topics=topics)


async def apply(services: BrokerServices, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    replicas = services.replicas
    if not replicas.check_controller_epoch(request.controller_epoch):
        return _answer(request, ErrorCode.STALE_CONTROLLER_EPOCH)
    if 0 <= request.broker_epoch < services.broker_epoch:
        return _answer(request, ErrorCode.STALE_BROKER_EPOCH)
    await services.ensure_topic_configs(t.topic_name for t in request.topic_states)
    live = {x.broker_id: BrokerInfo(x.broker_id, x.host_name, x.port) for x in request.live_leaders}
    states = []
    new = set()
    for t in request.topic_states:
        for ps in t.partition_states:
            if ps.is_new:
                new.add(TopicPartition(t.topic_name, ps.partition_index))
            states.append(
                (
                    t.topic_name,
                    t.topic_id,
                    PartitionState(
                        ps.partition_index,
                        list(ps.replicas),
                        ps.leader,
                        ps.leader_epoch,
                        list(ps.isr),
                        ps.controller_epoch,
                        ps.partition_epoch,
                        ps.leader_recovery_state,
                    ),
                )
            )
    errors = replicas.become_leader_or_follower(states, live, new, request.broker_epoch)
    return _answer(request, ErrorCode.NONE, {(tp.topic, tp.partition): e for tp, e in errors.items()})


async def _from_network(services: BrokerServices, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse:
    err = await services.check_control_request(
        "LeaderAndIsr", request.controller_id, request.controller_epoch, request.broker_epoch
    )
    if err != ErrorCode.NONE:
        return _answer(request, err)
    return await apply(services, request)


def handle(ctx: RequestContext, request: LeaderAndIsrRequest) -> LeaderAndIsrResponse | Awaitable[LeaderAndIsrResponse]:
    if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):  # inter-broker: CLUSTER_ACTION
        return LeaderAndIsrResponse(error_code=RIGHTS.cluster_action.error_code)
    return _from_network(ctx.services, request)

"""UpdateMetadata (6): the controller tells this broker the live brokers, the controller
and the state of partitions; the metadata cache takes it (what every Metadata answer
shows). A partition with leader -2 belongs to a topic being deleted: the topic leaves the
cache, and the group coordinator forgets its committed offsets (Kafka's
handleUpdateMetadataRequest -> onPartitionsDeleted). Topic configs of topics seen for the
first time are read from the store first."""

import uuid
from collections.abc import Awaitable

from broker.cluster.metadata import INTERNAL_TOPICS, BrokerInfo, PartitionState, TopicInfo
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.UPDATE_METADATA
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 7, 8

LEADER_DURING_DELETE = -2


async def apply(services: BrokerServices, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    if not services.replicas.check_controller_epoch(request.controller_epoch):
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_CONTROLLER_EPOCH)
    if 0 <= request.broker_epoch < services.broker_epoch:
        return UpdateMetadataResponse(error_code=ErrorCode.STALE_BROKER_EPOCH)
    cache = services.metadata
    deleted = set()
    updates: dict[str, tuple[uuid.UUID, list[PartitionState]]] = {}
    for t in request.topic_states:
        states = []
        for ps in t.partition_states:
            if ps.leader == LEADER_DURING_DELETE:
                deleted.add(t.topic_name)
                continue
            states.append(
                PartitionState(
                    ps.partition_index,
                    list(ps.replicas),
                    ps.leader,
                    ps.leader_epoch,
                    list(ps.isr),
                    ps.controller_epoch,
                    ps.zk_version,
                    offline_replicas=list(ps.offline_replicas),
                )
            )
        if states and t.topic_name not in deleted:
            updates[t.topic_name] = (t.topic_id, states)
    await services.ensure_topic_configs(name for name in updates if cache.topic(name) is None)
    cache.set_brokers(_broker(b, services.config.inter_broker_listener) for b in request.live_brokers if b.endpoints)
    cache.set_controller(request.controller_id, request.controller_epoch)
    for name, (topic_id, states) in updates.items():
        old = cache.topic(name)
        if old is None or old.topic_id != topic_id:
            cache.put_topic(TopicInfo(name, topic_id, {s.partition: s for s in states}, {}, name in INTERNAL_TOPICS))
        else:
            cache.update_partitions(name, states)
    for name in deleted:
        if cache.remove_topic(name) is not None:
            services.coordinator.topic_deleted(name)
    cache.initialized = True
    cache.changed()
    return UpdateMetadataResponse(error_code=ErrorCode.NONE)


def _broker(b: UpdateMetadataRequest.UpdateMetadataBroker, inter_broker_listener: str) -> BrokerInfo:
    """host and port: the inter-broker listener's (the first endpoint without one)."""
    endpoints = {e.listener: (e.host, e.port) for e in b.endpoints}
    host, port = endpoints.get(inter_broker_listener) or (b.endpoints[0].host, b.endpoints[0].port)
    return BrokerInfo(b.id, host, port, b.rack, endpoints=endpoints)


async def _from_network(services: BrokerServices, request: UpdateMetadataRequest) -> UpdateMetadataResponse:
    err = await services.check_control_request(
        "UpdateMetadata", request.controller_id, request.controller_epoch, request.broker_epoch
    )
    if err != ErrorCode.NONE:
        return UpdateMetadataResponse(error_code=err)
    return await apply(services, request)


def handle(
    ctx: RequestContext, request: UpdateMetadataRequest
) -> UpdateMetadataResponse | Awaitable[UpdateMetadataResponse]:
    if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):  # inter-broker: CLUSTER_ACTION
        return UpdateMetadataResponse(error_code=RIGHTS.cluster_action.error_code)
    return _from_network(ctx.services, request)

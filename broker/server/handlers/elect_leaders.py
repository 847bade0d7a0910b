"""ElectLeaders (43), on the controller: move partitions back to their preferred leader
(type 0) or give offline partitions an out-of-sync leader (type 1, unclean), as Kafka's
kafka-leader-election tool asks."""

from collections.abc import Awaitable

from broker.log import TopicPartition
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.services import BrokerServices

API_KEY = ApiKey.ELECT_LEADERS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 2

_Result = ElectLeadersResponse.ReplicaElectionResult
_Part = ElectLeadersResponse.PartitionResult


async def apply(services: BrokerServices, request: ElectLeadersRequest, version: int = 2) -> ElectLeadersResponse:
    election_type = request.election_type if version >= 1 else 0
    wanted = None
    if request.topic_partitions is not None:
        wanted = [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions]
    controller = services.controller
    if controller is None or not controller.active:
        return _all(wanted, ErrorCode.NOT_CONTROLLER)
    try:
        results = await controller.elect_leaders(election_type, wanted)
    except Exception:
        return _all(wanted, ErrorCode.NOT_CONTROLLER)
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for tp, (err, msg) in sorted(results.items()):
        by_topic.setdefault(tp.topic, []).append(_Part(partition_id=tp.partition, error_code=err, error_message=msg))
    return ElectLeadersResponse(
        throttle_time_ms=0,
        error_code=ErrorCode.NONE,
        replica_election_results=[_Result(topic=t, partition_result=ps) for t, ps in by_topic.items()],
    )


def _all(wanted: list[TopicPartition] | None, error: int) -> ElectLeadersResponse:
    if wanted is None:
        return ElectLeadersResponse(throttle_time_ms=0, error_code=error, replica_election_results=[])
    by_topic: dict[str, list[ElectLeadersResponse.PartitionResult]] = {}
    for tp in wanted:
        by_topic.setdefault(tp.topic, []).append(_Part(partition_id=tp.partition, error_code=error, error_message=None))
    return ElectLeadersResponse(
        throttle_time_ms=0,
        error_code=error,
        replica_election_results=[_Result(topic=t, partition_result=ps) for t, ps in by_topic.items()],
    )


def handle(ctx: RequestContext, request: ElectLeadersRequest) -> ElectLeadersResponse | Awaitable[ElectLeadersResponse]:
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _all(
            None
            if request.topic_partitions is None
            else [TopicPartition(t.topic, p) for t in request.topic_partitions for p in t.partitions],
            RIGHTS.cluster.error_code,
        )
    return apply(ctx.services, request, ctx.api_version)

"""DescribeCluster (60): cluster id, controller and brokers (no ACL needed, as Kafka's)."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_cluster import DescribeClusterRequest, DescribeClusterResponse
from broker.server.context import RequestContext
from broker.server.handlers.metadata import brokers_on

API_KEY = ApiKey.DESCRIBE_CLUSTER
MIN_VERSION, MAX_VERSION = 0, 1


def handle(ctx: RequestContext, request: DescribeClusterRequest) -> DescribeClusterResponse:
    services = ctx.services
    if ctx.api_version >= 1 and request.endpoint_type != 1:
        return DescribeClusterResponse(
            error_code=ErrorCode.UNSUPPORTED_ENDPOINT_TYPE,
            error_message="only broker endpoints (1) are served",
            endpoint_type=request.endpoint_type,
            cluster_id=services.metadata.cluster_id or "",
        )
    brokers = [
        DescribeClusterResponse.DescribeClusterBroker(broker_id=b.broker_id, host=host, port=port, rack=b.rack)
        for b, host, port in brokers_on(ctx)
    ]
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=1,
        cluster_id=services.metadata.cluster_id or "",
        controller_id=services.metadata.controller_id,
        brokers=brokers,
    )

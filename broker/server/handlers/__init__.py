"""The explicit handler registry: one module per API. ApiVersions is derived from it, so
what the broker advertises is exactly what it implements.

Each module exports API_KEY, MIN_VERSION, MAX_VERSION and `handle(ctx, request)`
returning the response object, None for no response (Produce with acks=0), or an
awaitable of either when it must wait. The inter-broker APIs (LeaderAndIsr,
UpdateMetadata, StopReplica, AlterPartition, ControlledShutdown) also export
`apply(broker, request)`, which the controller and the broker call directly for their
own broker, without a socket.

A module whose API has versions below MIN_VERSION that the protocol still defines (Produce
v0-2, Fetch v0-3, ListOffsets v0) also exports `error_response(request, error_code)`: the
response of the request's version with every error code set, or None to close the
connection instead. The server answers such old requests with UNSUPPORTED_VERSION through
it, as Kafka answers a request it can read but does not serve.
"""
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.api_versions import ApiVersionsResponse
from broker.server.handlers import (
    alter_configs,
    alter_partition,
    api_versions,
    controlled_shutdown,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    elect_leaders,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    stop_replica,
    sync_group,
    update_metadata,
)

_MODULES = [
    produce, fetch, list_offsets, metadata, offset_commit, offset_fetch, find_coordinator, join_group,
    heartbeat, leave_group, sync_group, describe_groups, list_groups, api_versions, create_topics,
    delete_topics, delete_records, init_producer_id, offset_for_leader_epoch, describe_configs,
    alter_configs, create_partitions, delete_groups, incremental_alter_configs, offset_delete,
    describe_cluster, describe_log_dirs, leader_and_isr, update_metadata, stop_replica, controlled_shutdown, alter_partition,
    elect_leaders,
]

HANDLERS = {int(m.API_KEY): m for m in _MODULES}


def supported_versions() -> list[tuple[int, int, int]]:
    """(api key, min version, max version) for every registered handler."""
    return sorted((k, m.MIN_VERSION, m.MAX_VERSION) for k, m in HANDLERS.items())


def unsupported_api_versions_response() -> ApiVersionsResponse:
    """The v0 answer to an ApiVersions request of a version we do not speak."""
    return ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
                  for k, lo, hi in supported_versions()],
    )

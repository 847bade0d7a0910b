"""The explicit handler registry: one module per API. ApiVersions is derived from it, so
what the broker advertises is exactly what it implements.

Each module exports API_KEY, MIN_VERSION, MAX_VERSION and `async def handle(ctx, request)`
returning the response object, or None for no response (Produce with acks=0).
"""
from broker.protocol.messages.api_versions import ApiVersionsResponse
from broker.protocol.errors import ErrorCode

from broker.server.handlers import (
    alter_configs,
    api_versions,
    create_partitions,
    create_topics,
    delete_groups,
    delete_records,
    delete_topics,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    join_group,
    leave_group,
    list_groups,
    list_offsets,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    sync_group,
)

_MODULES = [
    produce, fetch, list_offsets, metadata, offset_commit, offset_fetch, find_coordinator, join_group,
    heartbeat, leave_group, sync_group, describe_groups, list_groups, api_versions, create_topics,
    delete_topics, delete_records, init_producer_id, offset_for_leader_epoch, describe_configs,
    alter_configs, create_partitions, delete_groups, incremental_alter_configs, offset_delete,
    describe_cluster, describe_log_dirs,
]

HANDLERS = {int(m.API_KEY): m for m in _MODULES}


def register(module) -> None:
    """Adds a handler module (the group coordinator registers its APIs this way)."""
    HANDLERS[int(module.API_KEY)] = module


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

"""The explicit handler registry: one module per API. ApiVersions is derived from it, so
what the broker advertises is exactly what it implements.

Each module is a `Handler` (checked by mypy over the registry below): it exports
API_KEY, MIN_VERSION, MAX_VERSION and `handle(ctx, request)` returning the response
object, None for no response (Produce with acks=0), or an awaitable of either when it
must wait. A handler sees the broker only through `ctx.services`, the BrokerServices
protocol (server/services.py).

Produce is also a `DirectPath`: `direct(services, frame, version_caps)` answers its common
requests from their frames, without the generic decoding (DIRECT_PATHS; the module
docstring of handlers/produce.py says which requests and why).

The inter-broker APIs (LeaderAndIsr, UpdateMetadata, StopReplica, AlterPartition,
ControlledShutdown, ElectLeaders) are also `ControlApi`s: `apply(services, request)`,
which the controller and the broker call directly for their own broker, without a
socket (CONTROL_APIS).

A module whose API has versions below MIN_VERSION that the protocol still defines (Produce
v0-2, Fetch v0-3, ListOffsets v0) is also an `OldVersionAnswer`: `error_response(request,
error_code)` is the response of the request's version with every error code set, or None
to close the connection instead. The server answers such old requests with
UNSUPPORTED_VERSION through it (ERROR_RESPONSES), as Kafka answers a request it can read
but does not serve.
"""

from __future__ import annotations

from collections.abc import Awaitable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from broker.protocol._runtime import Message
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.api_versions import ApiVersionsResponse
from broker.server.handlers import (
    add_offsets_to_txn,
    add_partitions_to_txn,
    alter_client_quotas,
    alter_configs,
    alter_partition,
    alter_partition_reassignments,
    alter_share_group_offsets,
    alter_user_scram_credentials,
    api_versions,
    consumer_group_describe,
    consumer_group_heartbeat,
    controlled_shutdown,
    create_acls,
    create_partitions,
    create_topics,
    delete_acls,
    delete_groups,
    delete_records,
    delete_share_group_offsets,
    delete_share_group_state,
    delete_topics,
    describe_acls,
    describe_client_quotas,
    describe_cluster,
    describe_configs,
    describe_groups,
    describe_log_dirs,
    describe_producers,
    describe_share_group_offsets,
    describe_transactions,
    describe_user_scram_credentials,
    elect_leaders,
    end_txn,
    fetch,
    find_coordinator,
    heartbeat,
    incremental_alter_configs,
    init_producer_id,
    initialize_share_group_state,
    join_group,
    leader_and_isr,
    leave_group,
    list_groups,
    list_offsets,
    list_partition_reassignments,
    list_transactions,
    metadata,
    offset_commit,
    offset_delete,
    offset_fetch,
    offset_for_leader_epoch,
    produce,
    read_share_group_state,
    read_share_group_state_summary,
    sasl_authenticate,
    sasl_handshake,
    share_acknowledge,
    share_fetch,
    share_group_describe,
    share_group_heartbeat,
    stop_replica,
    sync_group,
    txn_offset_commit,
    update_metadata,
    write_share_group_state,
    write_txn_markers,
)

if TYPE_CHECKING:
    from broker.protocol.codec import BufferLike
    from broker.server.context import DirectResult, HandlerResult, RequestContext
    from broker.server.services import BrokerServices


class Handler(Protocol):
    """One API: a module of this package."""

    __name__: str

    @property
    def API_KEY(self) -> ApiKey: ...

    @property
    def MIN_VERSION(self) -> int: ...

    @property
    def MAX_VERSION(self) -> int: ...

    def handle(self, ctx: RequestContext, request: Any) -> HandlerResult: ...


class ControlApi(Handler, Protocol):
    """An inter-broker API the broker and its controller also call without a socket."""

    def apply(self, services: BrokerServices, request: Any) -> Awaitable[Message]: ...


class DirectPath(Handler, Protocol):
    """An API whose common requests the server answers from their frames, before any
    generic decoding (Produce: handlers/produce.py), when the connection and the broker
    need none of what the general path applies (Server.takes_direct)."""

    def direct(self, services: BrokerServices, frame: BufferLike, version_caps: Mapping[int, int]) -> DirectResult: ...


class OldVersionAnswer(Handler, Protocol):
    """An API whose versions below MIN_VERSION are answered UNSUPPORTED_VERSION."""

    def error_response(self, request: Any, code: int) -> Message | None: ...


_MODULES: list[Handler] = [
    produce,
    fetch,
    list_offsets,
    metadata,
    offset_commit,
    offset_fetch,
    find_coordinator,
    join_group,
    heartbeat,
    leave_group,
    sync_group,
    describe_groups,
    list_groups,
    consumer_group_heartbeat,
    consumer_group_describe,
    share_fetch,
    share_acknowledge,
    share_group_heartbeat,
    share_group_describe,
    api_versions,
    create_topics,
    delete_topics,
    delete_records,
    init_producer_id,
    offset_for_leader_epoch,
    describe_configs,
    alter_configs,
    create_partitions,
    delete_groups,
    incremental_alter_configs,
    offset_delete,
    describe_cluster,
    describe_log_dirs,
    leader_and_isr,
    update_metadata,
    stop_replica,
    controlled_shutdown,
    alter_partition,
    elect_leaders,
    sasl_handshake,
    sasl_authenticate,
    describe_user_scram_credentials,
    alter_user_scram_credentials,
    describe_acls,
    create_acls,
    delete_acls,
    describe_client_quotas,
    alter_client_quotas,
    alter_partition,
    elect_leaders,
    add_partitions_to_txn,
    add_offsets_to_txn,
    end_txn,
    write_txn_markers,
    txn_offset_commit,
    describe_producers,
    describe_transactions,
    list_transactions,
    alter_partition_reassignments,
    list_partition_reassignments,
    initialize_share_group_state,
    read_share_group_state,
    write_share_group_state,
    delete_share_group_state,
    read_share_group_state_summary,
    describe_share_group_offsets,
    alter_share_group_offsets,
    delete_share_group_offsets,
]

_CONTROL: list[ControlApi] = [
    leader_and_isr,
    update_metadata,
    stop_replica,
    controlled_shutdown,
    alter_partition,
    elect_leaders,
]
_OLD_VERSIONS: list[OldVersionAnswer] = [produce, fetch, list_offsets]
_DIRECT: list[DirectPath] = [produce]

HANDLERS: dict[int, Handler] = {int(m.API_KEY): m for m in _MODULES}
#: api key -> apply(services, request), for the controller's requests to its own broker
#: and the broker's to its own controller
CONTROL_APIS: dict[int, ControlApi] = {int(m.API_KEY): m for m in _CONTROL}
#: api key -> error_response(request, code), for requests older than MIN_VERSION
ERROR_RESPONSES: dict[int, OldVersionAnswer] = {int(m.API_KEY): m for m in _OLD_VERSIONS}
#: api key -> direct(services, frame, version_caps), for requests answered from their frames
DIRECT_PATHS: dict[int, DirectPath] = {int(m.API_KEY): m for m in _DIRECT}


#: the versions that speak transaction.version 2 (KIP-890 part 2): Produce v12 adds its
#: partitions to the transaction, TxnOffsetCommit v5 its offsets partition, EndTxn v5
#: answers the bumped epoch, AddPartitionsToTxn v5 is a leader adding for its producer.
#: A broker with transaction.version below 2 serves (and advertises) one version less.
TV2_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 12,
    ApiKey.TXN_OFFSET_COMMIT: 5,
    ApiKey.END_TXN: 5,
    ApiKey.ADD_PARTITIONS_TO_TXN: 5,
}


def transaction_version(config: Any) -> int:
    """The broker's transaction.version (2 when the config does not say)."""
    try:
        return int(config["transaction.version"])
    except (KeyError, TypeError):
        return 2


def max_version(api_key: int, level: int | None = None) -> int:
    """The newest version of `api_key` this broker serves at transaction.version `level`
    (None: every version it has)."""
    hi = HANDLERS[api_key].MAX_VERSION
    tv2 = TV2_VERSIONS.get(api_key)
    if tv2 is not None and hi >= tv2 and level is not None and level < 2:
        return tv2 - 1
    return hi


def supported_versions(level: int | None = None) -> list[tuple[int, int, int]]:
    """(api key, min version, max version) for every registered handler (the TV2 versions
    only at transaction.version `level` 2; all when no level is given)."""
    return sorted((k, m.MIN_VERSION, max_version(k, level)) for k, m in HANDLERS.items())


def unsupported_api_versions_response(level: int | None = None) -> ApiVersionsResponse:
    """The v0 answer to an ApiVersions request of a version we do not speak: only
    ApiVersions' own range, as Kafka answers since KIP-511 (the client retries with the
    highest version of it, then learns the rest; a client such as franz-go takes a full
    list here as the answer, and misses the finalized features only v3+ carries)."""
    return ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in supported_versions(level)
            if k == ApiKey.API_VERSIONS
        ],
    )

"""FindCoordinator (10): the broker leading the group's __consumer_offsets partition (key
type 0), the transactional id's __transaction_state partition (key type 1), or (v6+,
KIP-932) the share-partition key's __share_group_state partition (key type 2: a key
"group:topic id:partition", asked by brokers only: CLUSTER_ACTION, else
CLUSTER_AUTHORIZATION_FAILED; a malformed key, or key type 2 below v6, INVALID_REQUEST).
Creates the topic on first use, as Kafka does. A found coordinator comes with the message
"NONE", as Kafka words it (Errors.NONE.message()). v5 only adds TRANSACTION_ABORTABLE to
the errors a transactional client may see, which this broker does not answer here."""

from collections.abc import Awaitable
from typing import cast

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest, FindCoordinatorResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.share.records import parse_coordinator_key

API_KEY = ApiKey.FIND_COORDINATOR
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 6

GROUP, TRANSACTION, SHARE = 0, 1, 2

#: a key's coordinator: (error, message, node id, host, port)
_Found = tuple[int, str | None, int, str, int]


def _find(ctx: RequestContext, key: str, key_type: int) -> _Found | None:
    """(error, message, node id, host, port), or None when __consumer_offsets must be
    created first."""
    services = ctx.services
    if key_type == GROUP and not ctx.has_right(RIGHTS.group, key):
        return RIGHTS.group.error_code, None, -1, "", -1
    if key_type == TRANSACTION and not ctx.has_right(RIGHTS.transactional_id, key):
        return RIGHTS.transactional_id.error_code, None, -1, "", -1
    if key_type == SHARE:
        if ctx.api_version < 6:
            return ErrorCode.INVALID_REQUEST, "key type 2 (share) needs FindCoordinator v6", -1, "", -1
        if not ctx.has_right(RIGHTS.cluster_action, CLUSTER_NAME):
            return RIGHTS.cluster_action.error_code, None, -1, "", -1
        try:
            parse_coordinator_key(key)
        except ValueError as exc:
            return ErrorCode.INVALID_REQUEST, str(exc), -1, "", -1
    if key_type not in (GROUP, TRANSACTION, SHARE):
        return ErrorCode.INVALID_REQUEST, f"unknown key type {key_type}", -1, "", -1
    if not key:
        return (
            ErrorCode.INVALID_REQUEST,
            "empty group id" if key_type == GROUP else "empty transactional id",
            -1,
            "",
            -1,
        )
    if key_type == TRANSACTION:
        txn = services.txn_coordinator
        if not txn.has_topic():
            return None
        node = txn.coordinator_node(key)
    elif key_type == SHARE:
        share = services.share_state_coordinator
        if not share.has_topic():
            return None
        node = share.coordinator_node(key)
    else:
        coord = services.coordinator
        if not coord.has_offsets_topic():
            return None
        node = coord.coordinator_node(key)
    b = services.metadata.brokers().get(node)
    ep = None if b is None else b.endpoint(ctx.listener_name)
    if b is None or ep is None:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1
    return 0, "NONE", b.broker_id, ep[0], ep[1]


def handle(
    ctx: RequestContext, request: FindCoordinatorRequest
) -> FindCoordinatorResponse | Awaitable[FindCoordinatorResponse]:
    if ctx.api_version >= 4:
        keys = list(request.coordinator_keys)
        key_type = request.key_type
    else:
        keys = [request.key]
        key_type = request.key_type if ctx.api_version >= 1 else GROUP
    found = [_find(ctx, k, key_type) for k in keys]
    if any(f is None for f in found):
        return _create_then_find(ctx, request, keys, key_type)
    return _response(ctx, request, keys, cast("list[_Found]", found))  # none is None


async def _create_then_find(
    ctx: RequestContext, request: FindCoordinatorRequest, keys: list[str], key_type: int
) -> FindCoordinatorResponse:
    try:
        if key_type == TRANSACTION:
            await ctx.services.txn_coordinator.ensure_topic()
        elif key_type == SHARE:
            await ctx.services.share_state_coordinator.ensure_topic()
        else:
            await ctx.services.coordinator.ensure_offsets_topic()
    except KafkaProtocolError as exc:
        failed = (ErrorCode.COORDINATOR_NOT_AVAILABLE, str(exc), -1, "", -1)
        return _response(ctx, request, keys, [failed] * len(keys))
    found = [_find(ctx, k, key_type) or (ErrorCode.COORDINATOR_NOT_AVAILABLE, None, -1, "", -1) for k in keys]
    return _response(ctx, request, keys, found)


def _response(
    ctx: RequestContext, request: FindCoordinatorRequest, keys: list[str], found: list[_Found]
) -> FindCoordinatorResponse:
    if ctx.api_version >= 4:
        return FindCoordinatorResponse(
            throttle_time_ms=0,
            coordinators=[
                FindCoordinatorResponse.Coordinator(
                    key=key, node_id=node, host=host, port=port, error_code=err, error_message=msg
                )
                for key, (err, msg, node, host, port) in zip(keys, found)
            ],
        )
    err, msg, node, host, port = found[0]
    return FindCoordinatorResponse(
        throttle_time_ms=0, error_code=err, error_message=msg, node_id=node, host=host, port=port
    )

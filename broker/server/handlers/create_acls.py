"""CreateAcls (30): ACLs into the store (Kafka's /kafka-acl layout; every broker's
authorizer follows the change notification), one result per creation in request order.

As Kafka's: without an authorizer SECURITY_DISABLED; ALTER on the cluster, else
CLUSTER_AUTHORIZATION_FAILED for each; an ACL Kafka would not accept (unknown type,
operation or permission, a pattern other than LITERAL/PREFIXED, a bad principal or host,
a CLUSTER resource not named kafka-cluster) INVALID_REQUEST with the reason. Each change
goes to the audit log."""

from collections.abc import Awaitable, Callable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    InvalidAcl,
    Operation,
    PatternType,
    Permission,
    ResourceType,
    validate,
)
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.CREATE_ACLS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 3

AUDIT_SHOWN = 5  # ACLs named in an audit line (with the count of all)
_Result = CreateAclsResponse.AclCreationResult


def binding(
    resource_type: int, name: str, pattern_type: int, principal: str, host: str, operation: int, permission: int
) -> AclBinding:
    """An AclBinding of a request's fields; InvalidAcl for a value with no meaning."""
    try:
        return AclBinding(
            ResourceType(resource_type),
            name,
            PatternType(pattern_type),
            principal,
            host,
            Operation(operation),
            Permission(permission),
        )
    except ValueError as exc:
        raise InvalidAcl(f"Invalid ACL: {exc}") from None


def _adding(added: set[AclBinding]) -> Callable[[set[AclBinding]], set[AclBinding]]:
    return lambda acls: acls | added


def handle(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse | Awaitable[CreateAclsResponse]:
    if ctx.services.authorizer is None:
        return CreateAclsResponse(
            throttle_time_ms=0,
            results=[
                _Result(error_code=ErrorCode.SECURITY_DISABLED, error_message="No Authorizer is configured.")
                for _ in request.creations
            ],
        )
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return CreateAclsResponse(
            throttle_time_ms=0,
            results=[
                _Result(error_code=RIGHTS.cluster.error_code, error_message="Authorization failed.")
                for _ in request.creations
            ],
        )
    return _create(ctx, request)


async def _create(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    results = []
    valid: dict[
        tuple[ResourceType, str, PatternType], list[tuple[AclBinding, CreateAclsResponse.AclCreationResult]]
    ] = {}
    for c in request.creations:
        r = _Result(error_code=0, error_message=None)
        results.append(r)
        try:
            b = binding(
                c.resource_type,
                c.resource_name,
                c.resource_pattern_type,
                c.principal,
                c.host,
                c.operation,
                c.permission_type,
            )
            validate(b)
        except InvalidAcl as exc:
            r.error_code, r.error_message = ErrorCode.INVALID_REQUEST, str(exc)
            continue
        valid.setdefault(b.resource, []).append((b, r))
    if valid:
        try:
            await ctx.services.update_acls(
                {resource: _adding({b for b, _ in items}) for resource, items in valid.items()}
            )
        except Exception as exc:  # the store: the valid ones fail
            for items in valid.values():
                for _, r in items:
                    r.error_code, r.error_message = ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot store the ACL: {exc}"
        else:
            added = [b for items in valid.values() for b, _ in items]
            ctx.connection.server.audit_change(
                ctx.connection,
                f"{len(added)} ACL(s) added: "
                f"{'; '.join(map(str, added[:AUDIT_SHOWN]))}"
                f"{' ...' if len(added) > AUDIT_SHOWN else ''}",
            )
    return CreateAclsResponse(throttle_time_ms=0, results=results)

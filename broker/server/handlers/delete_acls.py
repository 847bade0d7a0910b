"""DeleteAcls (31): removes the ACLs matching each filter from the store (every broker's
authorizer follows), answering per filter with the ACLs it removed. Without an
authorizer SECURITY_DISABLED; ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED;
a filter with an unknown value INVALID_REQUEST. Each removal goes to the audit log."""

from collections.abc import Awaitable, Callable

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from broker.security.acl import CLUSTER_NAME, AclBinding, AclFilter, PatternType, ResourceType
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DELETE_ACLS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 3

_R = DeleteAclsResponse


def _removing(doomed: set[AclBinding]) -> Callable[[set[AclBinding]], set[AclBinding]]:
    return lambda acls: acls - doomed


def handle(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse | Awaitable[DeleteAclsResponse]:
    if ctx.services.authorizer is None:
        return _R(
            throttle_time_ms=0,
            filter_results=[
                _R.DeleteAclsFilterResult(
                    error_code=ErrorCode.SECURITY_DISABLED,
                    error_message="No Authorizer is configured.",
                    matching_acls=[],
                )
                for _ in request.filters
            ],
        )
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _R(
            throttle_time_ms=0,
            filter_results=[
                _R.DeleteAclsFilterResult(
                    error_code=RIGHTS.cluster.error_code, error_message="Authorization failed.", matching_acls=[]
                )
                for _ in request.filters
            ],
        )
    return _delete(ctx, request)


async def _delete(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    authz = ctx.services.authorizer
    assert authz is not None
    results = []
    for raw in request.filters:
        f = AclFilter(
            raw.resource_type_filter,
            raw.resource_name_filter,
            raw.pattern_type_filter if ctx.api_version >= 1 else 3,
            raw.principal_filter,
            raw.host_filter,
            raw.operation,
            raw.permission_type,
        )
        invalid = f.invalid()
        if invalid:
            results.append(
                _R.DeleteAclsFilterResult(error_code=ErrorCode.INVALID_REQUEST, error_message=invalid, matching_acls=[])
            )
            continue
        matching = sorted((b for b in authz.acls() if f.matches(b)), key=str)
        by_resource: dict[tuple[ResourceType, str, PatternType], set[AclBinding]] = {}
        for b in matching:
            by_resource.setdefault(b.resource, set()).add(b)
        removed: list[AclBinding] = []
        error = None
        if by_resource:
            try:
                await ctx.services.update_acls({r: _removing(doomed) for r, doomed in by_resource.items()})
                removed = matching
            except Exception as exc:
                error = f"cannot update the ACLs: {exc}"
        if removed:
            ctx.connection.server.audit_change(
                ctx.connection,
                f"{len(removed)} ACL(s) removed: "
                f"{'; '.join(map(str, removed[:5]))}"
                f"{' ...' if len(removed) > 5 else ''}",
            )
        results.append(
            _R.DeleteAclsFilterResult(
                error_code=ErrorCode.UNKNOWN_SERVER_ERROR if error else 0,
                error_message=error,
                matching_acls=[
                    _R.DeleteAclsMatchingAcl(
                        error_code=0,
                        error_message=None,
                        resource_type=b.resource_type,
                        resource_name=b.name,
                        pattern_type=b.pattern_type,
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in removed
                ],
            )
        )
    return _R(throttle_time_ms=0, filter_results=results)

"""DescribeAcls (29): the ACLs matching a filter, grouped by resource pattern (ANY and
MATCH patterns as Kafka's: MATCH finds the literal, wildcard and prefixed patterns that
apply to a name). Without an authorizer SECURITY_DISABLED; DESCRIBE on the cluster,
else CLUSTER_AUTHORIZATION_FAILED; a filter with an unknown value INVALID_REQUEST."""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from broker.security.acl import CLUSTER_NAME, AclBinding, AclFilter, PatternType, ResourceType
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext

API_KEY = ApiKey.DESCRIBE_ACLS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 3

_R = DescribeAclsResponse


def handle(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    authz = ctx.services.authorizer
    if authz is None:
        return _R(
            throttle_time_ms=0,
            error_code=ErrorCode.SECURITY_DISABLED,
            error_message="No Authorizer is configured.",
            resources=[],
        )
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _R(
            throttle_time_ms=0,
            error_code=RIGHTS.cluster.error_code,
            error_message="Authorization failed.",
            resources=[],
        )
    f = AclFilter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter if ctx.api_version >= 1 else 3,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    invalid = f.invalid()
    if invalid:
        return _R(throttle_time_ms=0, error_code=ErrorCode.INVALID_REQUEST, error_message=invalid, resources=[])
    by_resource: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = {}
    for b in authz.acls():
        if f.matches(b):
            by_resource.setdefault(b.resource, []).append(b)
    return _R(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        resources=[
            _R.DescribeAclsResource(
                resource_type=t,
                resource_name=n,
                pattern_type=p,
                acls=[
                    _R.AclDescription(
                        principal=b.principal, host=b.host, operation=b.operation, permission_type=b.permission
                    )
                    for b in sorted(acls, key=str)
                ],
            )
            for (t, n, p), acls in sorted(by_resource.items())
        ],
    )

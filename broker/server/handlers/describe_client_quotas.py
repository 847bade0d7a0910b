"""DescribeClientQuotas (48): the quota entities matching a filter, from the broker's
quota cache (the store's /config/users and /config/clients, kept current by the change
notifications), as Kafka's ClientQuotasImage.describe answers.

A filter component names an entity type (user, client-id, ip) and a match: 0 exact (a
name), 1 the default entity, 2 any entity of that type (the default included). Entities
with a type no component names match too, unless the filter is strict. Refused as a
whole, with Kafka's codes and messages: an empty entity type, a type named twice, an
exact match without a name or a default / any match with one, an unknown match type
(INVALID_REQUEST), an ip component beside a user or client-id one (INVALID_REQUEST), an
entity type Kafka does not know (UNSUPPORTED_VERSION). This broker keeps no IP quotas: an
ip filter matches nothing. Needs DESCRIBE_CONFIGS on the cluster with ACLs on.
"""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import RequestContext
from broker.server.quotas import CLIENT_ID, IP, USER, name_of

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

_R = DescribeClientQuotasResponse


class _Refused(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


def check_filter(components: list[DescribeClientQuotasRequest.ComponentData]) -> list[tuple[str, int, str | None]]:
    """The filter's components as (type, match type, name), or _Refused."""
    seen: set[str] = set()
    out = []
    for c in components:
        etype = c.entity_type
        if not etype:
            raise _Refused(ErrorCode.INVALID_REQUEST, "Invalid empty entity type.")
        if etype in seen:
            raise _Refused(
                ErrorCode.INVALID_REQUEST, f"Entity type {etype} cannot appear more than once in the filter."
            )
        if etype not in (IP, USER, CLIENT_ID):
            raise _Refused(ErrorCode.UNSUPPORTED_VERSION, f"Unsupported entity type {etype}")
        if c.match_type == 0:
            if c.match is None:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null."
                )
        elif c.match_type == 1:
            if c.match is not None:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_DEFAULT, but also specified a match string.",
                )
        elif c.match_type == 2:
            if c.match is not None:
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "Request specified MATCH_TYPE_SPECIFIED, but also specified a match string.",
                )
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"Unknown match type {c.match_type}")
        seen.add(etype)
        out.append((etype, c.match_type, c.match))
    if IP in seen and (USER in seen or CLIENT_ID in seen):
        raise _Refused(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination. IP filter component "
            "should not be used with user or clientId filter component.",
        )
    return out


def handle(ctx: RequestContext, request: DescribeClientQuotasRequest) -> DescribeClientQuotasResponse:
    if not ctx.has_right(RIGHTS.cluster, CLUSTER_NAME):
        return _R(
            throttle_time_ms=0,
            error_code=RIGHTS.cluster.error_code,
            error_message="Cluster authorization failed.",
            entries=None,
        )
    try:
        components = check_filter(request.components)
    except _Refused as exc:
        return _R(throttle_time_ms=0, error_code=exc.code, error_message=str(exc), entries=None)
    if any(t == IP for t, _, _ in components):
        return _R(throttle_time_ms=0, error_code=0, error_message=None, entries=[])
    found = ctx.services.quotas.describe(components, request.strict)
    entries = []
    for (user, client), values in sorted(found.items(), key=lambda kv: (kv[0][0] or "", kv[0][1] or "")):
        entity = []
        if user is not None:
            entity.append(_R.EntityData(entity_type=USER, entity_name=name_of(user)))
        if client is not None:
            entity.append(_R.EntityData(entity_type=CLIENT_ID, entity_name=name_of(client)))
        entries.append(
            _R.EntryData(entity=entity, values=[_R.ValueData(key=k, value=v) for k, v in sorted(values.items())])
        )
    return _R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)

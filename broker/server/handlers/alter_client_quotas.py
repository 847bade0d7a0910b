"""AlterClientQuotas (49): sets and removes quotas of users, client ids and (user,
client id) pairs, defaults included (a null name), written to the store as Kafka 3.x
wrote them to ZooKeeper — /config/users/<user>, /config/clients/<client-id>,
/config/users/<user>/clients/<client-id>, names sanitized, `<default>` as is — with a
change notification every broker follows. A user's znode also holds its SCRAM
credentials: only the quota keys of its config map are touched.

Checked per entry with Kafka's codes and messages (ClientQuotaControlManager), and then
nothing of that entry is written: an empty entity, a type named twice, an unknown type,
an empty name, an ip entity beside a user or client id (INVALID_REQUEST); an unknown key,
a value not above 0, a fractional byte rate (INVALID_REQUEST). IP quotas
(connection_creation_rate) are not kept by this broker: refused with INVALID_REQUEST.
validate_only checks without writing. Needs ALTER_CONFIGS on the cluster with ACLs on.
"""

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from broker.security.acl import CLUSTER_NAME
from broker.security.api_rights import API_RIGHTS
from broker.server.context import HandlerResult, RequestContext
from broker.server.quotas import CLIENT_ID, IP, QUOTA_KEYS, USER, entity_path, segment

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
RIGHTS = API_RIGHTS[API_KEY]
MIN_VERSION, MAX_VERSION = 0, 1

_R = AlterClientQuotasResponse
LONG_MAX = 2**63 - 1


def check_entity(entity: list[AlterClientQuotasRequest.EntityData]) -> tuple[str | None, str] | tuple[int, str]:
    """(entity path, '') for a valid entity, else (error code, message)."""
    if not entity:
        return ErrorCode.INVALID_REQUEST, "Invalid empty client quota entity"
    parts: dict[str, str | None] = {}
    for e in entity:
        etype, name = e.entity_type, e.entity_name
        if etype in parts:
            return ErrorCode.INVALID_REQUEST, f"Invalid client quota entity, duplicate entity entry {etype}"
        if etype not in (USER, CLIENT_ID, IP):
            return ErrorCode.INVALID_REQUEST, f"Unhandled client quota entity type: {etype}"
        if name is not None and not name:
            return ErrorCode.INVALID_REQUEST, f"Empty {etype} not supported"
        parts[etype] = name
    if IP in parts:
        if USER in parts or CLIENT_ID in parts:
            # Kafka's message, its missing space included
            return ErrorCode.INVALID_REQUEST, (
                "Invalid quota entity combination, IP entity shouldnot be combined with User or ClientId"
            )
        return ErrorCode.INVALID_REQUEST, "IP quotas (connection_creation_rate) are not supported by this broker"
    user = segment(parts[USER]) if USER in parts else None
    client = segment(parts[CLIENT_ID]) if CLIENT_ID in parts else None
    return entity_path((user, client)), ""


def check_value(key: str, value: float) -> str | None:
    """Kafka's message for a value it refuses, or None."""
    whole = QUOTA_KEYS.get(key)
    if whole is None:
        return f"Invalid configuration key {key}"
    if not value > 0.0:
        return f"Quota {key} must be greater than 0"
    if whole:
        if value > LONG_MAX:
            return f"Proposed value for {key} is too large for a LONG."
        if abs(value % 1.0) > 1e-6:
            return f"{key} cannot be a fractional value."
    return None


def format_value(key: str, value: float) -> str:
    """As Kafka 3.x wrote them to ZooKeeper: byte rates as whole numbers, the rest as doubles."""
    return str(int(value + 1e-6)) if QUOTA_KEYS[key] else repr(float(value))


def handle(ctx: RequestContext, request: AlterClientQuotasRequest) -> HandlerResult:
    return _alter(ctx, request)


async def _alter(ctx: RequestContext, request: AlterClientQuotasRequest) -> AlterClientQuotasResponse:
    allowed = ctx.has_right(RIGHTS.cluster, CLUSTER_NAME)
    results = []
    for entry in request.entries:
        code, message = 0, None
        if not allowed:
            code, message = RIGHTS.cluster.error_code, "Cluster authorization failed."
        else:
            checked = check_entity(entry.entity)
            if isinstance(checked[0], int):
                code, message = checked[0], checked[1]
            else:
                path = checked[0]
                changes: dict[str, float | None] = {}
                for op in entry.ops:
                    if op.remove:
                        if op.key not in QUOTA_KEYS:
                            code, message = ErrorCode.INVALID_REQUEST, f"Invalid configuration key {op.key}"
                            break
                        changes[op.key] = None
                        continue
                    refused = check_value(op.key, op.value)
                    if refused is not None:
                        code, message = ErrorCode.INVALID_REQUEST, refused
                        break
                    changes[op.key] = op.value
                if code == 0 and not request.validate_only and path is not None:
                    try:
                        await _write(ctx, path, changes)
                    except Exception as exc:  # the store unavailable ...: this entry only
                        code, message = ErrorCode.UNKNOWN_SERVER_ERROR, f"cannot write the quotas: {exc}"
        results.append(
            _R.EntryData(
                error_code=code,
                error_message=message,
                entity=[_R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in entry.entity],
            )
        )
    return _R(throttle_time_ms=0, entries=results)


async def _write(ctx: RequestContext, path: str, changes: dict[str, float | None]) -> None:
    services = ctx.services
    config = dict(await services.get_entity_config(path))
    new = dict(config)
    for key, value in changes.items():
        if value is None:
            new.pop(key, None)
        else:
            new[key] = format_value(key, value)
    if new != config:
        await services.set_entity_config(path, new)

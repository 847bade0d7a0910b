"""ACLs as both stores keep them: a resource pattern's entries in Kafka's JSON form
(znodes.AclZNodes), converted to and from broker.security.acl's AclBinding."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from broker.security.acl import (
    OPERATION_NAMES,
    PERMISSION_NAMES,
    RESOURCE_NAMES,
    AclBinding,
    Operation,
    PatternType,
    Permission,
    ResourceType,
)

Resource = tuple[ResourceType, str, PatternType]

_OPERATIONS = {v: k for k, v in OPERATION_NAMES.items()}
_PERMISSIONS = {v: k for k, v in PERMISSION_NAMES.items()}
_TYPES = {v: k for k, v in RESOURCE_NAMES.items()}


def type_name(t: ResourceType) -> str:
    """'Topic' (a path segment of /kafka-acl)."""
    return RESOURCE_NAMES[t]


def type_from_name(name: str) -> ResourceType | None:
    return _TYPES.get(name)


def entry(b: AclBinding) -> dict[str, str]:
    return {
        "principal": b.principal,
        "permissionType": PERMISSION_NAMES[b.permission],
        "operation": OPERATION_NAMES[b.operation],
        "host": b.host,
    }


def bindings(resource: Resource, entries: Iterable[Mapping[str, str]]) -> list[AclBinding]:
    """Entries Kafka or kbroker wrote; ones naming an unknown operation are skipped."""
    rtype, name, pattern = resource
    out = []
    for e in entries:
        op, perm = _OPERATIONS.get(e["operation"]), _PERMISSIONS.get(e["permissionType"])
        if op is None or perm is None:
            continue
        out.append(AclBinding(rtype, name, pattern, e["principal"], e["host"], Operation(op), Permission(perm)))
    return out

"""ACLs with Kafka's model, and the authorizer that checks requests against them.

An ACL (AclBinding): a resource pattern — type (TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID,
USER ...), name, LITERAL or PREFIXED — and an entry: principal ("User:alice", or
"User:*"), host ("*", an address, or a CIDR block as Kafka 4.3), operation, ALLOW or DENY.

A request of `principal` from `host` for `operation` on (type, name) is allowed (Kafka's
AclAuthorizer / StandardAuthorizer):

1. if the principal is one of `super.users`;
2. else, among the ACLs whose pattern matches the resource (LITERAL name, LITERAL "*",
   PREFIXED prefix of the name): none at all -> `allow.everyone.if.no.acl.found`;
3. else DENY wins: a matching DENY of that operation (or ALL) for this principal (or
   User:*) and host refuses;
4. else a matching ALLOW of that operation, or ALL, or — for DESCRIBE — READ, WRITE,
   DELETE or ALTER, and for DESCRIBE_CONFIGS ALTER_CONFIGS, allows; nothing: refused.

The check is never a scan of the ACLs: they are indexed by (type, literal name), by type
for "*", and by (type, prefix) (a name's prefixes are probed, one dict read each), and
each decision is cached by (principal, host, operation, type, name) until the ACLs change
— a request's check is one dict read.
"""

from __future__ import annotations

import enum
import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class Operation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14
    TWO_PHASE_COMMIT = 15


class Permission(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


CLUSTER_NAME = "kafka-cluster"
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"

#: an ALLOW of one of these operations also allows the key (Kafka's implied operations)
IMPLIED_BY = {
    Operation.DESCRIBE: (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER),
    Operation.DESCRIBE_CONFIGS: (Operation.ALTER_CONFIGS,),
}

#: Kafka's names in ZooKeeper's JSON and paths (SecurityUtils, AclEntry)
RESOURCE_NAMES = {
    ResourceType.TOPIC: "Topic",
    ResourceType.GROUP: "Group",
    ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken",
    ResourceType.USER: "User",
}
OPERATION_NAMES = {
    Operation.ALL: "All",
    Operation.READ: "Read",
    Operation.WRITE: "Write",
    Operation.CREATE: "Create",
    Operation.DELETE: "Delete",
    Operation.ALTER: "Alter",
    Operation.DESCRIBE: "Describe",
    Operation.CLUSTER_ACTION: "ClusterAction",
    Operation.DESCRIBE_CONFIGS: "DescribeConfigs",
    Operation.ALTER_CONFIGS: "AlterConfigs",
    Operation.IDEMPOTENT_WRITE: "IdempotentWrite",
    Operation.CREATE_TOKENS: "CreateTokens",
    Operation.DESCRIBE_TOKENS: "DescribeTokens",
    Operation.TWO_PHASE_COMMIT: "TwoPhaseCommit",
}
PERMISSION_NAMES = {Permission.ALLOW: "Allow", Permission.DENY: "Deny"}


@dataclass(frozen=True)
class AclBinding:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: Permission

    @property
    def resource(self) -> tuple[ResourceType, str, PatternType]:
        return self.resource_type, self.name, self.pattern_type

    def __str__(self) -> str:
        return (
            f"{self.permission.name} {self.principal} {self.operation.name} from {self.host} on "
            f"{self.resource_type.name}:{self.pattern_type.name}:{self.name}"
        )


class InvalidAcl(ValueError):
    """An ACL that cannot be created (the message says why, as Kafka's)."""


def validate(b: AclBinding) -> None:
    """Kafka's checks before an ACL is created; InvalidAcl."""
    if b.resource_type in (ResourceType.ANY, ResourceType.UNKNOWN):
        raise InvalidAcl("Invalid resource type")
    if b.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid ACL pattern type: {b.pattern_type.name}")
    if b.operation in (Operation.ANY, Operation.UNKNOWN):
        raise InvalidAcl("Invalid operation")
    if b.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl("Invalid permission type")
    if not b.name:
        raise InvalidAcl("Resource name must not be empty")
    if b.resource_type == ResourceType.CLUSTER and (b.name != CLUSTER_NAME or b.pattern_type != PatternType.LITERAL):
        raise InvalidAcl(f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if b.pattern_type == PatternType.PREFIXED and b.name == WILDCARD:
        raise InvalidAcl("Prefixed ACLs may not use the wildcard name")
    kind, sep, name = b.principal.partition(":")
    if not sep or not kind or not name:
        raise InvalidAcl(f"Invalid principal {b.principal!r} (expected Type:name, e.g. User:alice)")
    if b.host != WILDCARD:
        try:
            ipaddress.ip_network(b.host, strict=False)
        except ValueError:
            raise InvalidAcl(f"Invalid host {b.host!r} (an address, a CIDR block or *)") from None


def _host_matches(acl_host: str, host: str) -> bool:
    if acl_host == WILDCARD or acl_host == host:
        return True
    if "/" not in acl_host:
        return False
    try:
        return ipaddress.ip_address(host) in ipaddress.ip_network(acl_host, strict=False)
    except ValueError:
        return False


class AclFilter:
    """A DescribeAcls / DeleteAcls filter (ANY and None match everything; MATCH matches
    the patterns that would apply to the name)."""

    def __init__(
        self,
        resource_type: int,
        name: str | None,
        pattern_type: int,
        principal: str | None,
        host: str | None,
        operation: int,
        permission: int,
    ):
        self.resource_type = (
            ResourceType(resource_type) if resource_type in ResourceType._value2member_map_ else ResourceType.UNKNOWN
        )
        self.name = name
        self.pattern_type = (
            PatternType(pattern_type) if pattern_type in PatternType._value2member_map_ else PatternType.UNKNOWN
        )
        self.principal = principal
        self.host = host
        self.operation = Operation(operation) if operation in Operation._value2member_map_ else Operation.UNKNOWN
        self.permission = Permission(permission) if permission in Permission._value2member_map_ else Permission.UNKNOWN

    def invalid(self) -> str | None:
        for value, what in (
            (self.resource_type, "resource type"),
            (self.pattern_type, "pattern type"),
            (self.operation, "operation"),
            (self.permission, "permission type"),
        ):
            if value == 0:
                return f"Unknown {what} in the filter"
        return None

    def matches(self, b: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and b.resource_type != self.resource_type:
            return False
        if self.name is not None:
            if self.pattern_type == PatternType.MATCH:
                if not (
                    b.name == WILDCARD
                    and b.pattern_type == PatternType.LITERAL
                    or b.pattern_type == PatternType.LITERAL
                    and b.name == self.name
                    or b.pattern_type == PatternType.PREFIXED
                    and self.name.startswith(b.name)
                ):
                    return False
            elif b.name != self.name:
                return False
        if self.pattern_type not in (PatternType.ANY, PatternType.MATCH) and b.pattern_type != self.pattern_type:
            return False
        if self.principal is not None and b.principal != self.principal:
            return False
        if self.host is not None and b.host != self.host:
            return False
        if self.operation != Operation.ANY and b.operation != self.operation:
            return False
        return self.permission == Permission.ANY or b.permission == self.permission


#: Kafka's authorizer classes, taken as this one (authorizer.class.name)
KAFKA_AUTHORIZERS = (
    "kafka.security.authorizer.AclAuthorizer",
    "kafka.security.auth.SimpleAclAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
)

DECISION_CACHE_MAX = 100_000


class Authorizer:
    """The ACL cache and the decisions (see the module docstring). `set_acls` replaces
    every ACL of one resource pattern (what a change notification brings); `load` all."""

    def __init__(self, super_users: Iterable[str] = (), allow_if_no_acl: bool = False):
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._by_resource: dict[tuple[ResourceType, str, PatternType], frozenset[AclBinding]] = {}
        self._literal: dict[tuple[ResourceType, str], frozenset[AclBinding]] = {}
        self._prefixed: dict[tuple[ResourceType, str], frozenset[AclBinding]] = {}
        self._prefix_lengths: dict[ResourceType, set[int]] = {}
        self._decisions: dict[tuple[str, str, int, str], bool] = {}
        self.version = 0

    # ------------------------------------------------------------------ the ACLs

    def acls(self) -> list[AclBinding]:
        return [b for bs in self._by_resource.values() for b in bs]

    def resource_acls(self, resource: tuple[ResourceType, str, PatternType]) -> frozenset[AclBinding]:
        return self._by_resource.get(resource, frozenset())

    def load(self, acls: Iterable[AclBinding]) -> None:
        by: dict[tuple[ResourceType, str, PatternType], set[AclBinding]] = {}
        for b in acls:
            by.setdefault(b.resource, set()).add(b)
        self._by_resource = {}
        self._literal, self._prefixed, self._prefix_lengths = {}, {}, {}
        for resource, bs in by.items():
            self._put(resource, frozenset(bs))
        self._changed()

    def set_acls(self, resource: tuple[ResourceType, str, PatternType], acls: Iterable[AclBinding]) -> None:
        self._put(resource, frozenset(acls))
        self._changed()

    def _put(self, resource: tuple[ResourceType, str, PatternType], acls: frozenset[AclBinding]) -> None:
        rtype, name, pattern = resource
        index = self._literal if pattern == PatternType.LITERAL else self._prefixed
        if acls:
            self._by_resource[resource] = acls
            index[(rtype, name)] = acls
            if pattern == PatternType.PREFIXED:
                self._prefix_lengths.setdefault(rtype, set()).add(len(name))
        else:
            self._by_resource.pop(resource, None)
            index.pop((rtype, name), None)
            if pattern == PatternType.PREFIXED:
                self._prefix_lengths[rtype] = {len(n) for (t, n) in self._prefixed if t == rtype}

    def _changed(self) -> None:
        self._decisions = {}
        self.version += 1

    # ------------------------------------------------------------------ decisions

    def authorize(
        self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str
    ) -> bool:
        # plain ints in the key: hashing an enum member is a Python call, int arithmetic is not
        key = (principal, host, operation * 32 + resource_type, name)
        decision = self._decisions.get(key)
        if decision is None:
            decision = self._decide(principal, host, operation, resource_type, name)
            if len(self._decisions) >= DECISION_CACHE_MAX:
                self._decisions = {}
            self._decisions[key] = decision
        return decision

    def _matching(self, resource_type: ResourceType, name: str) -> list[frozenset[AclBinding]]:
        out = []
        got = self._literal.get((resource_type, name))
        if got:
            out.append(got)
        got = self._literal.get((resource_type, WILDCARD))
        if got and name != WILDCARD:
            out.append(got)
        for n in self._prefix_lengths.get(resource_type, ()):
            if n <= len(name):
                got = self._prefixed.get((resource_type, name[:n]))
                if got:
                    out.append(got)
        return out

    def _decide(self, principal: str, host: str, operation: Operation, resource_type: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        groups = self._matching(resource_type, name)
        if not groups:
            return self.allow_if_no_acl
        allowed_by = (operation, Operation.ALL, *IMPLIED_BY.get(operation, ()))
        allow = False
        for acls in groups:
            for b in acls:
                if b.principal != principal and b.principal != WILDCARD_PRINCIPAL:
                    continue
                if not _host_matches(b.host, host):
                    continue
                if b.permission == Permission.DENY:
                    if b.operation == operation or b.operation == Operation.ALL:
                        return False
                elif b.operation in allowed_by:
                    allow = True
        return allow

    def authorized_any(self, principal: str, host: str, operation: Operation, resource_type: ResourceType) -> bool:
        """Whether the principal may do `operation` on some resource of the type (Kafka's
        authorizeByResourceType: an ALLOW on some pattern that no DENY of a literal "*"
        or the same pattern cancels); for InitProducerId's idempotent producers."""
        if principal in self.super_users:
            return True
        allowed_by = (operation, Operation.ALL, *IMPLIED_BY.get(operation, ()))
        found = False
        for (rtype, _name, _pattern), acls in self._by_resource.items():
            if rtype != resource_type:
                continue
            for b in acls:
                if b.principal in (principal, WILDCARD_PRINCIPAL) and _host_matches(b.host, host):
                    if (
                        b.permission == Permission.DENY
                        and b.operation in (operation, Operation.ALL)
                        and b.name == WILDCARD
                        and b.pattern_type == PatternType.LITERAL
                    ):
                        return False
                    if b.permission == Permission.ALLOW and b.operation in allowed_by:
                        found = True
        return found or (self.allow_if_no_acl and not any(r[0] == resource_type for r in self._by_resource))

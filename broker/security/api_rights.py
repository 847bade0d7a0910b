"""What each API needs from the authorizer: Kafka's KafkaApis checks, one row per API.

The table drives the handlers' checks: each row names its rights, and a handler checks a
right of its own row by that name (`RIGHTS = API_RIGHTS[API_KEY]`, then
`ctx.has_right(RIGHTS.group, request.group_id)` where Kafka checks, per topic or group of
the request), answering a refusal with the row's code (`RIGHTS.group.error_code`). The
operation, resource type, refusal code and whether a refusal is audited are written here
only, so that

- tests/unit/security/test_api_rights.py fails for a registered handler without a row (a
  new API cannot be wired in without saying what it needs), for a handler that checks a
  right its row lacks or leaves one of its row's rights unchecked, and for a handler that
  checks an operation by hand;
- tests/cluster/test_api_rights.py sends every registered API, through a real broker
  process, from a principal without ACLs and from one with exactly the rights of its row,
  and checks the refusal's code and that the rights suffice.

`when` names the case a check applies to ("" for every request): which case applies is
the handler's logic, as in KafkaApis. A right with `refused=None` filters (the resource is
left out of the answer, no error), as Metadata's all-topics answer, ListGroups and
ListTransactions do.
"""

from __future__ import annotations

from dataclasses import dataclass

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation, ResourceType

O, R, E = Operation, ResourceType, ErrorCode


@dataclass(frozen=True)
class Right:
    operation: Operation
    resource_type: ResourceType
    #: the error code of a refusal (per resource where the request names several); None:
    #: the resource is left out of the answer instead
    refused: ErrorCode | None
    #: the requests it applies to ("" for all)
    when: str = ""
    #: a refusal is not written to the audit log although it is answered with `refused`:
    #: another right may still allow the request (Kafka's logIfDenied=false)
    quiet: bool = False

    @property
    def error_code(self) -> ErrorCode:
        """What a refusal is answered with (`refused`; a right that filters has none)."""
        if self.refused is None:
            raise ValueError(f"{self.operation.name} on {self.resource_type.name} filters: it has no error code")
        return self.refused

    @property
    def audited(self) -> bool:
        """Whether a refusal is written to the audit log: one answered with an error is,
        unless quiet; a filter's (the resource left out) is not."""
        return self.refused is not None and not self.quiet


class Rights(tuple[Right, ...]):
    """One API's row: its rights in the order KafkaApis checks them, each also an
    attribute under the name its handler checks it by (`API_RIGHTS[ApiKey.JOIN_GROUP].group`)."""

    names: tuple[str, ...]

    def __new__(cls, **named: Right) -> Rights:
        row = super().__new__(cls, named.values())
        row.__dict__.update(named)  # RIGHTS.group: a plain attribute read per check
        row.names = tuple(named)
        return row

    def __getattr__(self, name: str) -> Right:
        """Only for a name the row lacks (the others are plain attributes)."""
        raise AttributeError(f"no right {name!r} in this row (it has {', '.join(self.__dict__.get('names', ()))})")


def _r(op: Operation, rt: ResourceType, refused: ErrorCode | None, when: str = "", quiet: bool = False) -> Right:
    return Right(op, rt, refused, when, quiet)


_TOPIC, _GROUP, _CLUSTER, _TXN = (
    E.TOPIC_AUTHORIZATION_FAILED,
    E.GROUP_AUTHORIZATION_FAILED,
    E.CLUSTER_AUTHORIZATION_FAILED,
    E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
)
#: inter-broker requests: only brokers (super users, or principals with CLUSTER_ACTION) send them
_INTER_BROKER = Rights(cluster_action=_r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER))
#: none: the API is open to anyone who has authenticated, or is part of authenticating
_NONE = Rights()


def _group(op: Operation) -> Rights:
    return Rights(group=_r(op, R.GROUP, _GROUP))


def _cluster(op: Operation) -> Rights:
    return Rights(cluster=_r(op, R.CLUSTER, _CLUSTER))


def _configs(op: Operation) -> Rights:
    return Rights(
        topic=_r(op, R.TOPIC, _TOPIC, "topic resources"),
        cluster=_r(op, R.CLUSTER, _CLUSTER, "broker and broker-logger resources"),
        group=_r(op, R.GROUP, _GROUP, "group resources"),
    )


#: api key -> the checks its handler makes
API_RIGHTS: dict[ApiKey, Rights] = {
    ApiKey.PRODUCE: Rights(
        transactional_id=_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN, "transactional_id set"),
        topic=_r(O.WRITE, R.TOPIC, _TOPIC),
    ),
    # a follower without CLUSTER_ACTION is answered TOPIC_AUTHORIZATION_FAILED on every
    # partition, as Kafka's handleFetchRequest answers it
    ApiKey.FETCH: Rights(
        follower=_r(O.CLUSTER_ACTION, R.CLUSTER, _TOPIC, "a follower's fetch (replica_id >= 0)"),
        topic=_r(O.READ, R.TOPIC, _TOPIC, "a consumer's fetch"),
    ),
    ApiKey.LIST_OFFSETS: Rights(topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC)),
    ApiKey.METADATA: Rights(
        topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC, "named topics"),
        listed_topic=_r(O.DESCRIBE, R.TOPIC, None, "all topics"),
        create_on_cluster=_r(O.CREATE, R.CLUSTER, None, "auto-creation (else CREATE on the topic)"),
        create_topic=_r(O.CREATE, R.TOPIC, _TOPIC, "auto-creation without CREATE on the cluster"),
    ),
    ApiKey.LEADER_AND_ISR: _INTER_BROKER,
    ApiKey.STOP_REPLICA: _INTER_BROKER,
    ApiKey.UPDATE_METADATA: _INTER_BROKER,
    ApiKey.CONTROLLED_SHUTDOWN: _INTER_BROKER,
    ApiKey.OFFSET_COMMIT: Rights(group=_r(O.READ, R.GROUP, _GROUP), topic=_r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.OFFSET_FETCH: Rights(
        group=_r(O.DESCRIBE, R.GROUP, _GROUP),
        topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC, "named topics"),
        listed_topic=_r(O.DESCRIBE, R.TOPIC, None, "all topics"),
    ),
    ApiKey.FIND_COORDINATOR: Rights(
        group=_r(O.DESCRIBE, R.GROUP, _GROUP, "key_type 0 (group)"),
        transactional_id=_r(O.DESCRIBE, R.TRANSACTIONAL_ID, _TXN, "key_type 1 (transaction)"),
        cluster_action=_r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER, "key_type 2 (share: brokers only)"),
    ),
    ApiKey.JOIN_GROUP: _group(O.READ),
    ApiKey.HEARTBEAT: _group(O.READ),
    ApiKey.LEAVE_GROUP: _group(O.READ),
    ApiKey.SYNC_GROUP: _group(O.READ),
    ApiKey.DESCRIBE_GROUPS: _group(O.DESCRIBE),
    ApiKey.CONSUMER_GROUP_HEARTBEAT: Rights(
        group=_r(O.READ, R.GROUP, _GROUP), topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC, "subscribed topic names")
    ),
    ApiKey.CONSUMER_GROUP_DESCRIBE: _group(O.DESCRIBE),
    # KIP-932's share consumers: READ on the group (else the whole request is refused) and
    # on each topic (else its partitions are)
    ApiKey.SHARE_FETCH: Rights(group=_r(O.READ, R.GROUP, _GROUP), topic=_r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.SHARE_ACKNOWLEDGE: Rights(group=_r(O.READ, R.GROUP, _GROUP), topic=_r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.SHARE_GROUP_HEARTBEAT: Rights(
        group=_r(O.READ, R.GROUP, _GROUP), topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC, "subscribed topic names")
    ),
    ApiKey.SHARE_GROUP_DESCRIBE: _group(O.DESCRIBE),
    ApiKey.LIST_GROUPS: Rights(
        cluster=_r(O.DESCRIBE, R.CLUSTER, None, "all groups (else DESCRIBE on each)"),
        group=_r(O.DESCRIBE, R.GROUP, None),
    ),
    ApiKey.SASL_HANDSHAKE: _NONE,
    ApiKey.API_VERSIONS: _NONE,
    ApiKey.SASL_AUTHENTICATE: _NONE,
    ApiKey.CREATE_TOPICS: Rights(
        create_on_cluster=_r(O.CREATE, R.CLUSTER, None, "any topic (else CREATE on each)"),
        topic=_r(O.CREATE, R.TOPIC, _TOPIC),
        topic_configs=_r(
            O.DESCRIBE_CONFIGS, R.TOPIC, None, "the created topic's configs in the answer (topic_config_error_code)"
        ),
    ),
    ApiKey.DELETE_TOPICS: Rights(topic=_r(O.DELETE, R.TOPIC, _TOPIC)),
    ApiKey.DELETE_RECORDS: Rights(topic=_r(O.DELETE, R.TOPIC, _TOPIC)),
    ApiKey.INIT_PRODUCER_ID: Rights(
        transactional_id=_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN, "transactional_id set"),
        idempotent=_r(
            O.IDEMPOTENT_WRITE, R.CLUSTER, _CLUSTER, "idempotent producer (or WRITE on some topic)", quiet=True
        ),
        some_topic=_r(
            O.WRITE,
            R.TOPIC,
            _CLUSTER,
            "idempotent producer without IDEMPOTENT_WRITE: on some topic (any name)",
            quiet=True,
        ),
    ),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: Rights(
        follower=_r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER, "a follower's (replica_id >= 0)"),
        topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC, "a client's"),
    ),
    # transactions: as KafkaApis checks them
    ApiKey.ADD_PARTITIONS_TO_TXN: Rights(
        transactional_id=_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN, "v0-3 (clients)"),
        topic=_r(O.WRITE, R.TOPIC, _TOPIC, "v0-3 (clients)"),
        cluster_action=_r(
            O.CLUSTER_ACTION,
            R.CLUSTER,
            _CLUSTER,
            "v4+ (brokers: verify_only batches; v5 a leader adding for its producer)",
        ),
    ),
    ApiKey.ADD_OFFSETS_TO_TXN: Rights(
        transactional_id=_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN), group=_r(O.READ, R.GROUP, _GROUP)
    ),
    ApiKey.END_TXN: Rights(transactional_id=_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN)),
    ApiKey.WRITE_TXN_MARKERS: _INTER_BROKER,
    ApiKey.TXN_OFFSET_COMMIT: Rights(
        transactional_id=_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN),
        group=_r(O.READ, R.GROUP, _GROUP),
        topic=_r(O.READ, R.TOPIC, _TOPIC),
    ),
    ApiKey.DESCRIBE_TRANSACTIONS: Rights(
        transactional_id=_r(O.DESCRIBE, R.TRANSACTIONAL_ID, _TXN),
        topic=_r(O.DESCRIBE, R.TOPIC, None, "the transaction's topics"),
    ),
    ApiKey.LIST_TRANSACTIONS: Rights(transactional_id=_r(O.DESCRIBE, R.TRANSACTIONAL_ID, None)),
    ApiKey.DESCRIBE_PRODUCERS: Rights(topic=_r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.DESCRIBE_ACLS: _cluster(O.DESCRIBE),
    ApiKey.CREATE_ACLS: _cluster(O.ALTER),
    ApiKey.DELETE_ACLS: _cluster(O.ALTER),
    ApiKey.DESCRIBE_CONFIGS: _configs(O.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CONFIGS: _configs(O.ALTER_CONFIGS),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: _configs(O.ALTER_CONFIGS),
    ApiKey.DESCRIBE_LOG_DIRS: _cluster(O.DESCRIBE),
    ApiKey.CREATE_PARTITIONS: Rights(topic=_r(O.ALTER, R.TOPIC, _TOPIC)),
    ApiKey.DELETE_GROUPS: _group(O.DELETE),
    ApiKey.ELECT_LEADERS: _cluster(O.ALTER),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: _cluster(O.ALTER),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: _cluster(O.DESCRIBE),
    ApiKey.OFFSET_DELETE: Rights(group=_r(O.DELETE, R.GROUP, _GROUP), topic=_r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: _cluster(O.DESCRIBE_CONFIGS),
    ApiKey.ALTER_CLIENT_QUOTAS: _cluster(O.ALTER_CONFIGS),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: _cluster(O.DESCRIBE),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: _cluster(O.ALTER),
    ApiKey.ALTER_PARTITION: _INTER_BROKER,
    # KIP-932's share-group state: share-partition leaders and group coordinators call the
    # share coordinator (Kafka's KafkaApis checks CLUSTER_ACTION on the cluster)
    ApiKey.INITIALIZE_SHARE_GROUP_STATE: _INTER_BROKER,
    ApiKey.READ_SHARE_GROUP_STATE: _INTER_BROKER,
    ApiKey.WRITE_SHARE_GROUP_STATE: _INTER_BROKER,
    ApiKey.DELETE_SHARE_GROUP_STATE: _INTER_BROKER,
    ApiKey.READ_SHARE_GROUP_STATE_SUMMARY: _INTER_BROKER,
    # the share-group offset admin (kafka-share-groups), as KafkaApis checks it
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: Rights(
        group=_r(O.DESCRIBE, R.GROUP, _GROUP),
        topic=_r(O.DESCRIBE, R.TOPIC, _TOPIC, "named topics"),
        listed_topic=_r(O.DESCRIBE, R.TOPIC, None, "all topics"),
    ),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: Rights(group=_r(O.READ, R.GROUP, _GROUP), topic=_r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: Rights(group=_r(O.DELETE, R.GROUP, _GROUP), topic=_r(O.READ, R.TOPIC, _TOPIC)),
    # as Kafka's: anyone authenticated; the cluster's authorized operations only when asked
    ApiKey.DESCRIBE_CLUSTER: _NONE,
}


def describe(api_key: int) -> str:
    """One line: what the API needs ('none' when nothing)."""
    rights = API_RIGHTS[ApiKey(api_key)]
    if not rights:
        return "none"
    return "; ".join(
        f"{r.operation.name} on {r.resource_type.name}"
        + (f" ({r.when})" if r.when else "")
        + (f" -> {r.refused.name}" if r.refused is not None else " -> left out")
        for r in rights
    )

"""What each API needs from the authorizer: Kafka's KafkaApis checks, one row per API.

The handlers make the checks themselves (`ctx.authorize(operation, resource type, name)`
where Kafka makes them, per topic or group of the request); this table says which
checks that are, and with which error code a refusal is answered, so that

- tests/unit/security/test_api_rights.py fails for a registered handler without a row
  (a new API cannot be wired in without saying what it needs), and
- tests/cluster/test_api_rights.py sends every registered API, through a real broker
  process, from a principal without ACLs and from one with exactly the rights of its row,
  and checks the refusal's code and that the rights suffice.

Rows for APIs the broker does not serve yet (the transaction APIs, DescribeProducers)
say what their handlers must check when they come, as Kafka's KafkaApis does.

`when` names the case a check applies to ("" for every request). A right with
`refused=None` filters (the resource is left out of the answer, no error), as Metadata's
all-topics answer, ListGroups and ListTransactions do.
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


def _r(op: Operation, rt: ResourceType, refused: ErrorCode | None, when: str = "") -> Right:
    return Right(op, rt, refused, when)


_TOPIC, _GROUP, _CLUSTER, _TXN = (E.TOPIC_AUTHORIZATION_FAILED, E.GROUP_AUTHORIZATION_FAILED,
                                  E.CLUSTER_AUTHORIZATION_FAILED, E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
#: inter-broker requests: only brokers (super users, or principals with CLUSTER_ACTION) send them
_INTER_BROKER = (_r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER),)

#: api key -> the checks its handler makes (empty: none, the API is open to anyone who
#: has authenticated, or is part of authenticating)
API_RIGHTS: dict[ApiKey, tuple[Right, ...]] = {
    ApiKey.PRODUCE: (_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN, "transactional_id set"),
                     _r(O.WRITE, R.TOPIC, _TOPIC)),
    ApiKey.FETCH: (_r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER, "a follower's fetch (replica_id >= 0)"),
                   _r(O.READ, R.TOPIC, _TOPIC, "a consumer's fetch")),
    ApiKey.LIST_OFFSETS: (_r(O.DESCRIBE, R.TOPIC, _TOPIC),),
    ApiKey.METADATA: (_r(O.DESCRIBE, R.TOPIC, _TOPIC, "named topics"),
                      _r(O.DESCRIBE, R.TOPIC, None, "all topics"),
                      _r(O.CREATE, R.CLUSTER, None, "auto-creation (else CREATE on the topic)"),
                      _r(O.CREATE, R.TOPIC, _TOPIC, "auto-creation without CREATE on the cluster")),
    ApiKey.LEADER_AND_ISR: _INTER_BROKER,
    ApiKey.STOP_REPLICA: _INTER_BROKER,
    ApiKey.UPDATE_METADATA: _INTER_BROKER,
    ApiKey.CONTROLLED_SHUTDOWN: _INTER_BROKER,
    ApiKey.OFFSET_COMMIT: (_r(O.READ, R.GROUP, _GROUP), _r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.OFFSET_FETCH: (_r(O.DESCRIBE, R.GROUP, _GROUP), _r(O.DESCRIBE, R.TOPIC, _TOPIC, "named topics"),
                          _r(O.DESCRIBE, R.TOPIC, None, "all topics")),
    ApiKey.FIND_COORDINATOR: (_r(O.DESCRIBE, R.GROUP, _GROUP, "key_type 0 (group)"),
                              _r(O.DESCRIBE, R.TRANSACTIONAL_ID, _TXN, "key_type 1 (transaction)")),
    ApiKey.JOIN_GROUP: (_r(O.READ, R.GROUP, _GROUP),),
    ApiKey.HEARTBEAT: (_r(O.READ, R.GROUP, _GROUP),),
    ApiKey.LEAVE_GROUP: (_r(O.READ, R.GROUP, _GROUP),),
    ApiKey.SYNC_GROUP: (_r(O.READ, R.GROUP, _GROUP),),
    ApiKey.DESCRIBE_GROUPS: (_r(O.DESCRIBE, R.GROUP, _GROUP),),
    ApiKey.LIST_GROUPS: (_r(O.DESCRIBE, R.CLUSTER, None, "all groups (else DESCRIBE on each)"),
                         _r(O.DESCRIBE, R.GROUP, None)),
    ApiKey.SASL_HANDSHAKE: (),
    ApiKey.API_VERSIONS: (),
    ApiKey.SASL_AUTHENTICATE: (),
    ApiKey.CREATE_TOPICS: (_r(O.CREATE, R.CLUSTER, None, "any topic (else CREATE on each)"),
                           _r(O.CREATE, R.TOPIC, _TOPIC),
                           _r(O.DESCRIBE_CONFIGS, R.TOPIC, None,
                              "the created topic's configs in the answer (topic_config_error_code)")),
    ApiKey.DELETE_TOPICS: (_r(O.DELETE, R.TOPIC, _TOPIC),),
    ApiKey.DELETE_RECORDS: (_r(O.DELETE, R.TOPIC, _TOPIC),),
    ApiKey.INIT_PRODUCER_ID: (_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN, "transactional_id set"),
                              _r(O.IDEMPOTENT_WRITE, R.CLUSTER, _CLUSTER,
                                 "idempotent producer (or WRITE on some topic)")),
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (_r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER, "a follower's (replica_id >= 0)"),
                                     _r(O.DESCRIBE, R.TOPIC, _TOPIC, "a client's")),
    # transactions (issue 17): as KafkaApis checks them
    ApiKey.ADD_PARTITIONS_TO_TXN: (_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN, "v0-3 (clients)"),
                                   _r(O.WRITE, R.TOPIC, _TOPIC, "v0-3 (clients)"),
                                   _r(O.CLUSTER_ACTION, R.CLUSTER, _CLUSTER, "v4+ (brokers: verify_only batches; v5 a leader adding for its producer)")),
    ApiKey.ADD_OFFSETS_TO_TXN: (_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN), _r(O.READ, R.GROUP, _GROUP)),
    ApiKey.END_TXN: (_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN),),
    ApiKey.WRITE_TXN_MARKERS: _INTER_BROKER,
    ApiKey.TXN_OFFSET_COMMIT: (_r(O.WRITE, R.TRANSACTIONAL_ID, _TXN), _r(O.READ, R.GROUP, _GROUP),
                               _r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.DESCRIBE_TRANSACTIONS: (_r(O.DESCRIBE, R.TRANSACTIONAL_ID, _TXN),
                                   _r(O.DESCRIBE, R.TOPIC, None, "the transaction's topics")),
    ApiKey.LIST_TRANSACTIONS: (_r(O.DESCRIBE, R.TRANSACTIONAL_ID, None),),
    ApiKey.DESCRIBE_PRODUCERS: (_r(O.READ, R.TOPIC, _TOPIC),),
    ApiKey.DESCRIBE_ACLS: (_r(O.DESCRIBE, R.CLUSTER, _CLUSTER),),
    ApiKey.CREATE_ACLS: (_r(O.ALTER, R.CLUSTER, _CLUSTER),),
    ApiKey.DELETE_ACLS: (_r(O.ALTER, R.CLUSTER, _CLUSTER),),
    ApiKey.DESCRIBE_CONFIGS: (_r(O.DESCRIBE_CONFIGS, R.TOPIC, _TOPIC, "topic resources"),
                              _r(O.DESCRIBE_CONFIGS, R.CLUSTER, _CLUSTER, "broker and broker-logger resources")),
    ApiKey.ALTER_CONFIGS: (_r(O.ALTER_CONFIGS, R.TOPIC, _TOPIC, "topic resources"),
                           _r(O.ALTER_CONFIGS, R.CLUSTER, _CLUSTER, "broker and broker-logger resources")),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (_r(O.ALTER_CONFIGS, R.TOPIC, _TOPIC, "topic resources"),
                                       _r(O.ALTER_CONFIGS, R.CLUSTER, _CLUSTER,
                                          "broker and broker-logger resources")),
    ApiKey.DESCRIBE_LOG_DIRS: (_r(O.DESCRIBE, R.CLUSTER, _CLUSTER),),
    ApiKey.CREATE_PARTITIONS: (_r(O.ALTER, R.TOPIC, _TOPIC),),
    ApiKey.DELETE_GROUPS: (_r(O.DELETE, R.GROUP, _GROUP),),
    ApiKey.ELECT_LEADERS: (_r(O.ALTER, R.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (_r(O.ALTER, R.CLUSTER, _CLUSTER),),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (_r(O.DESCRIBE, R.CLUSTER, _CLUSTER),),
    ApiKey.OFFSET_DELETE: (_r(O.DELETE, R.GROUP, _GROUP), _r(O.READ, R.TOPIC, _TOPIC)),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (_r(O.DESCRIBE_CONFIGS, R.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_CLIENT_QUOTAS: (_r(O.ALTER_CONFIGS, R.CLUSTER, _CLUSTER),),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (_r(O.DESCRIBE, R.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (_r(O.ALTER, R.CLUSTER, _CLUSTER),),
    ApiKey.ALTER_PARTITION: _INTER_BROKER,
    # as Kafka's: anyone authenticated; the cluster's authorized operations only when asked
    ApiKey.DESCRIBE_CLUSTER: (),
}


def describe(api_key: int) -> str:
    """One line: what the API needs ('none' when nothing)."""
    rights = API_RIGHTS[ApiKey(api_key)]
    if not rights:
        return "none"
    return "; ".join(f"{r.operation.name} on {r.resource_type.name}"
                     + (f" ({r.when})" if r.when else "")
                     + (f" -> {r.refused.name}" if r.refused is not None else " -> left out")
                     for r in rights)

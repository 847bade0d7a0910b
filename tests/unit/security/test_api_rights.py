"""broker/security/api_rights.py: every API the broker serves says what it needs from the
authorizer (a handler cannot be registered without a row), and the rows say it as Kafka's
KafkaApis does for the APIs whose checks are simple to state: inter-broker requests need
CLUSTER_ACTION, the ACL and SCRAM admin APIs rights on the cluster, authentication none."""
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation as O, ResourceType as R
from broker.security.api_rights import API_RIGHTS, describe
from broker.server.handlers import HANDLERS


def test_every_registered_handler_has_a_row():
    missing = [ApiKey(k).name for k in HANDLERS if ApiKey(k) not in API_RIGHTS]
    assert not missing, f"say what these APIs need in broker/security/api_rights.py: {missing}"


def test_inter_broker_apis_need_cluster_action():
    for api in (ApiKey.LEADER_AND_ISR, ApiKey.STOP_REPLICA, ApiKey.UPDATE_METADATA, ApiKey.CONTROLLED_SHUTDOWN,
                ApiKey.ALTER_PARTITION, ApiKey.WRITE_TXN_MARKERS):
        assert [(r.operation, r.resource_type, r.refused) for r in API_RIGHTS[api]] == \
            [(O.CLUSTER_ACTION, R.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)], api.name
    for api in (ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH):      # a follower's
        assert (O.CLUSTER_ACTION, R.CLUSTER) in [(r.operation, r.resource_type) for r in API_RIGHTS[api]]


def test_authentication_needs_nothing_and_admin_apis_the_cluster():
    assert API_RIGHTS[ApiKey.API_VERSIONS] == API_RIGHTS[ApiKey.SASL_HANDSHAKE] == \
        API_RIGHTS[ApiKey.SASL_AUTHENTICATE] == ()
    for api, op in ((ApiKey.CREATE_ACLS, O.ALTER), (ApiKey.DELETE_ACLS, O.ALTER), (ApiKey.DESCRIBE_ACLS, O.DESCRIBE),
                    (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, O.ALTER),
                    (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, O.DESCRIBE), (ApiKey.ELECT_LEADERS, O.ALTER),
                    (ApiKey.DESCRIBE_LOG_DIRS, O.DESCRIBE), (ApiKey.ALTER_PARTITION_REASSIGNMENTS, O.ALTER),
                    (ApiKey.LIST_PARTITION_REASSIGNMENTS, O.DESCRIBE)):
        assert [(r.operation, r.resource_type) for r in API_RIGHTS[api]] == [(op, R.CLUSTER)], api.name


def test_transaction_apis_have_their_rows_ready():
    """The transaction APIs' handlers (issue 17) find what KafkaApis checks for them here."""
    txn = {api: {(r.operation, r.resource_type) for r in API_RIGHTS[api]} for api in (
        ApiKey.ADD_PARTITIONS_TO_TXN, ApiKey.ADD_OFFSETS_TO_TXN, ApiKey.END_TXN, ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS)}
    assert all((O.WRITE, R.TRANSACTIONAL_ID) in s for api, s in txn.items()
               if api not in (ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS))
    assert (O.DESCRIBE, R.TRANSACTIONAL_ID) in txn[ApiKey.DESCRIBE_TRANSACTIONS]
    assert describe(ApiKey.END_TXN) == "WRITE on TRANSACTIONAL_ID -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert describe(ApiKey.API_VERSIONS) == "none"

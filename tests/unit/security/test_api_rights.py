"""broker/security/api_rights.py: every API the broker serves says what it needs from the
authorizer (a handler cannot be registered without a row), and the rows say it as Kafka's
KafkaApis does for the APIs whose checks are simple to state: inter-broker requests need
CLUSTER_ACTION, the ACL and SCRAM admin APIs rights on the cluster, authentication none.
The handlers check what their rows say, by name, and nothing else."""

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.security.acl import Operation as O, ResourceType as R
from broker.security.api_rights import API_RIGHTS, describe
from broker.server.handlers import HANDLERS


def test_every_registered_handler_has_a_row():
    missing = [ApiKey(k).name for k in HANDLERS if ApiKey(k) not in API_RIGHTS]
    assert not missing, f"say what these APIs need in broker/security/api_rights.py: {missing}"


def test_inter_broker_apis_need_cluster_action():
    for api in (
        ApiKey.LEADER_AND_ISR,
        ApiKey.STOP_REPLICA,
        ApiKey.UPDATE_METADATA,
        ApiKey.CONTROLLED_SHUTDOWN,
        ApiKey.ALTER_PARTITION,
        ApiKey.WRITE_TXN_MARKERS,
    ):
        assert [(r.operation, r.resource_type, r.refused) for r in API_RIGHTS[api]] == [
            (O.CLUSTER_ACTION, R.CLUSTER, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        ], api.name
    for api in (ApiKey.FETCH, ApiKey.OFFSET_FOR_LEADER_EPOCH):  # a follower's
        assert (O.CLUSTER_ACTION, R.CLUSTER) in [(r.operation, r.resource_type) for r in API_RIGHTS[api]]


def test_a_follower_without_cluster_action_is_refused_as_kafka_refuses_it():
    """Kafka's handleFetchRequest answers TOPIC_AUTHORIZATION_FAILED on every partition of a
    follower's fetch without CLUSTER_ACTION (the row once said CLUSTER_AUTHORIZATION_FAILED,
    which the handler never answered)."""
    follower = API_RIGHTS[ApiKey.FETCH].follower
    assert (follower.operation, follower.resource_type, follower.error_code) == (
        O.CLUSTER_ACTION,
        R.CLUSTER,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    )


def test_authentication_needs_nothing_and_admin_apis_the_cluster():
    assert (
        API_RIGHTS[ApiKey.API_VERSIONS]
        == API_RIGHTS[ApiKey.SASL_HANDSHAKE]
        == API_RIGHTS[ApiKey.SASL_AUTHENTICATE]
        == ()
    )
    for api, op in (
        (ApiKey.CREATE_ACLS, O.ALTER),
        (ApiKey.DELETE_ACLS, O.ALTER),
        (ApiKey.DESCRIBE_ACLS, O.DESCRIBE),
        (ApiKey.ALTER_USER_SCRAM_CREDENTIALS, O.ALTER),
        (ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, O.DESCRIBE),
        (ApiKey.ELECT_LEADERS, O.ALTER),
        (ApiKey.DESCRIBE_LOG_DIRS, O.DESCRIBE),
        (ApiKey.ALTER_PARTITION_REASSIGNMENTS, O.ALTER),
        (ApiKey.LIST_PARTITION_REASSIGNMENTS, O.DESCRIBE),
    ):
        assert [(r.operation, r.resource_type) for r in API_RIGHTS[api]] == [(op, R.CLUSTER)], api.name


def test_transaction_apis_have_their_rows_ready():
    """The transaction APIs' handlers (issue 17) find what KafkaApis checks for them here."""
    txn = {
        api: {(r.operation, r.resource_type) for r in API_RIGHTS[api]}
        for api in (
            ApiKey.ADD_PARTITIONS_TO_TXN,
            ApiKey.ADD_OFFSETS_TO_TXN,
            ApiKey.END_TXN,
            ApiKey.TXN_OFFSET_COMMIT,
            ApiKey.DESCRIBE_TRANSACTIONS,
            ApiKey.LIST_TRANSACTIONS,
        )
    }
    assert all(
        (O.WRITE, R.TRANSACTIONAL_ID) in s
        for api, s in txn.items()
        if api not in (ApiKey.DESCRIBE_TRANSACTIONS, ApiKey.LIST_TRANSACTIONS)
    )
    assert (O.DESCRIBE, R.TRANSACTIONAL_ID) in txn[ApiKey.DESCRIBE_TRANSACTIONS]
    assert describe(ApiKey.END_TXN) == "WRITE on TRANSACTIONAL_ID -> TRANSACTIONAL_ID_AUTHORIZATION_FAILED"
    assert describe(ApiKey.API_VERSIONS) == "none"


#: handlers whose checks are still written by hand (ctx.authorize): they move onto their
#: rows next, then this set is empty and ctx.authorize goes
BY_HAND: set[str] = set()


def _tree(module) -> ast.Module:
    return ast.parse(Path(module.__file__).read_text(), module.__file__)


def test_each_handler_checks_exactly_the_rights_of_its_row():
    """The table drives the checks: a handler binds its own row (RIGHTS =
    API_RIGHTS[API_KEY]), checks only rights of that row by their names, checks every one
    of them, and makes no check by hand (ctx.authorize) nor builds a Right of its own."""
    wrong = []
    for key, module in sorted(HANDLERS.items()):
        name = module.__name__.rsplit(".", 1)[1]
        tree = _tree(module)
        row = API_RIGHTS[ApiKey(key)]
        by_hand = [
            n.lineno
            for n in ast.walk(tree)
            if isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr in ("authorize", "authorize_any")
        ]
        if name in BY_HAND:
            assert by_hand, f"{name} checks through its row now: take it out of BY_HAND"
            continue
        if by_hand:
            wrong.append(f"{name}: checks by hand (ctx.authorize) at lines {by_hand}: use ctx.has_right(RIGHTS.x, ...)")
        if any(
            isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in ("Right", "Rights")
            for n in ast.walk(tree)
        ):
            wrong.append(f"{name}: makes a Right of its own: add it to its row in API_RIGHTS")
        binds = [
            n
            for n in tree.body
            if isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "RIGHTS" for t in n.targets)
        ]
        if row and [ast.unparse(n.value) for n in binds] != ["API_RIGHTS[API_KEY]"]:
            wrong.append(f"{name}: binds {[ast.unparse(n.value) for n in binds]}, not RIGHTS = API_RIGHTS[API_KEY]")
        used = {
            n.attr
            for n in ast.walk(tree)
            if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "RIGHTS"
        }
        if used - set(row.names):
            wrong.append(f"{name}: checks {sorted(used - set(row.names))}, not in its row {row.names}")
        if set(row.names) - used:
            wrong.append(f"{name}: never checks {sorted(set(row.names) - used)} of its row")
    assert not wrong, "\n".join(wrong)


def test_the_check_sees_a_handler_that_drifts(tmp_path):
    """The test above on a handler that checks by hand, one that checks a right its row
    lacks, and the names a row offers."""
    drifted = tmp_path / "drifted.py"
    drifted.write_text(
        "RIGHTS = API_RIGHTS[API_KEY]\n"
        "def handle(ctx, request):\n"
        "    ctx.authorize(Operation.READ, ResourceType.GROUP, request.group_id)\n"
        "    return ctx.has_right(RIGHTS.topic, request.group_id)\n"
    )
    tree = _tree(SimpleNamespace(__file__=str(drifted)))
    assert [
        n.func.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("authorize", "has_right")
    ] == ["authorize", "has_right"]
    row = API_RIGHTS[ApiKey.JOIN_GROUP]
    assert row.names == ("group",) and row.group is row[0]
    with pytest.raises(AttributeError, match="no right 'topic' in this row"):
        row.topic  # noqa: B018


def test_what_a_refusal_is_answered_with_and_whether_it_is_audited():
    metadata = API_RIGHTS[ApiKey.METADATA]
    assert metadata.topic.error_code == ErrorCode.TOPIC_AUTHORIZATION_FAILED and metadata.topic.audited
    assert not metadata.listed_topic.audited  # a filter: left out, nothing refused
    with pytest.raises(ValueError, match="filters"):
        metadata.listed_topic.error_code  # noqa: B018
    idempotent = API_RIGHTS[ApiKey.INIT_PRODUCER_ID]  # WRITE on some topic may still allow it
    assert (
        not idempotent.idempotent.audited and idempotent.idempotent.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )


class _Authorizer:
    """Allows only what `allowed` holds ((operation, resource type, name)), or the type for
    authorized_any."""

    def __init__(self, *allowed):
        self.allowed = set(allowed)

    def authorize(self, principal, host, operation, resource_type, name):
        return (operation, resource_type, name) in self.allowed

    def authorized_any(self, principal, host, operation, resource_type):
        return any((o, t) == (operation, resource_type) for o, t, _ in self.allowed)


def _context(authorizer):
    from broker.server.server import RequestContext

    audited = []
    server = SimpleNamespace(audit_refused=lambda conn, what: audited.append(what))
    conn = SimpleNamespace(principal="User:alice", host="127.0.0.1", server=server)
    header = SimpleNamespace(request_api_version=9, request_api_key=ApiKey.OFFSET_FETCH)
    return RequestContext(SimpleNamespace(authorizer=authorizer), conn, header, 0.0), audited


def test_a_check_asks_the_authorizer_for_its_rights_operation_and_audits_as_the_row_says():
    rights = API_RIGHTS[ApiKey.OFFSET_FETCH]
    ctx, audited = _context(_Authorizer((O.DESCRIBE, R.GROUP, "g")))
    assert ctx.has_right(rights.group, "g")
    assert not ctx.has_right(rights.topic, "t")
    assert not ctx.has_right(rights.listed_topic, "t")  # a filter: not audited
    assert audited == ["DESCRIBE on TOPIC 't' (api key 9)"]
    assert ctx.has_right_on_some(API_RIGHTS[ApiKey.INIT_PRODUCER_ID].some_topic) is False
    ctx, audited = _context(_Authorizer((O.WRITE, R.TOPIC, "t")))
    assert ctx.has_right_on_some(API_RIGHTS[ApiKey.INIT_PRODUCER_ID].some_topic)
    ctx, audited = _context(None)  # no authorizer: everything allowed
    assert ctx.has_right(rights.topic, "t") and ctx.has_right_on_some(rights.topic) and audited == []

"""The ACL authorizer (broker/security/acl.py) with Kafka's rules, its storage in Kafka's
ZooKeeper layout (znodes.AclZNodes) and the embedded store, and the ACL APIs and checks
through a real listener (server.Server, real dispatch and handlers, SASL principals)."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker.client.connection import BrokerConnection
from broker.cluster.store import acls as acl_store
from broker.cluster.store.file import FileMetadataStore
from broker.cluster.store.znodes import AclZNodes
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.create_acls import CreateAclsRequest
from broker.protocol.messages.delete_acls import DeleteAclsRequest
from broker.protocol.messages.describe_acls import DescribeAclsRequest
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest
from broker.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclFilter,
    Authorizer,
    InvalidAcl,
    Operation as O,
    PatternType as P,
    Permission,
    ResourceType as R,
    validate,
)

ALLOW, DENY = Permission.ALLOW, Permission.DENY


def acl(rtype, name, op, perm=ALLOW, principal="User:alice", host="*", pattern=P.LITERAL):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def authz(*acls, super_users=(), allow_if_no_acl=False):
    a = Authorizer(super_users, allow_if_no_acl)
    a.load(acls)
    return a


def test_no_acl_on_a_resource():
    assert not authz().authorize("User:alice", "1.2.3.4", O.READ, R.TOPIC, "t")
    assert authz(allow_if_no_acl=True).authorize("User:alice", "1.2.3.4", O.READ, R.TOPIC, "t")
    # an ACL on the resource for someone else: no longer "no ACL"
    a = authz(acl(R.TOPIC, "t", O.READ, principal="User:bob"), allow_if_no_acl=True)
    assert not a.authorize("User:alice", "1.2.3.4", O.READ, R.TOPIC, "t")
    assert a.authorize("User:alice", "1.2.3.4", O.READ, R.TOPIC, "other")


def test_super_users_and_wildcards():
    a = authz(acl(R.TOPIC, "*", O.READ, principal="User:*"), super_users=["User:admin"])
    assert a.authorize("User:admin", "h", O.DELETE, R.CLUSTER, CLUSTER_NAME)
    assert a.authorize("User:anyone", "h", O.READ, R.TOPIC, "any-topic")
    assert not a.authorize("User:anyone", "h", O.WRITE, R.TOPIC, "any-topic")


def test_deny_wins_and_all():
    a = authz(acl(R.TOPIC, "t", O.ALL), acl(R.TOPIC, "t", O.WRITE, DENY))
    assert a.authorize("User:alice", "h", O.READ, R.TOPIC, "t")
    assert not a.authorize("User:alice", "h", O.WRITE, R.TOPIC, "t")
    a = authz(acl(R.TOPIC, "t", O.READ), acl(R.TOPIC, "*", O.ALL, DENY, principal="User:*"))
    assert not a.authorize("User:alice", "h", O.READ, R.TOPIC, "t")


def test_implied_operations():
    for op in (O.READ, O.WRITE, O.DELETE, O.ALTER):
        assert authz(acl(R.TOPIC, "t", op)).authorize("User:alice", "h", O.DESCRIBE, R.TOPIC, "t"), op
    assert authz(acl(R.TOPIC, "t", O.ALTER_CONFIGS)).authorize("User:alice", "h", O.DESCRIBE_CONFIGS, R.TOPIC, "t")
    assert not authz(acl(R.TOPIC, "t", O.CREATE)).authorize("User:alice", "h", O.DESCRIBE, R.TOPIC, "t")
    # a DENY of READ does not deny DESCRIBE
    a = authz(acl(R.TOPIC, "t", O.DESCRIBE), acl(R.TOPIC, "t", O.READ, DENY))
    assert a.authorize("User:alice", "h", O.DESCRIBE, R.TOPIC, "t")


def test_prefixed_patterns_and_hosts():
    a = authz(
        acl(R.TOPIC, "sales-", O.READ, pattern=P.PREFIXED),
        acl(R.GROUP, "g", O.READ, host="10.0.0.0/8"),
        acl(R.GROUP, "h", O.READ, host="192.168.1.5"),
    )
    assert a.authorize("User:alice", "h", O.READ, R.TOPIC, "sales-eu")
    assert a.authorize("User:alice", "h", O.READ, R.TOPIC, "sales-")
    assert not a.authorize("User:alice", "h", O.READ, R.TOPIC, "sale")
    assert a.authorize("User:alice", "10.2.3.4", O.READ, R.GROUP, "g")
    assert not a.authorize("User:alice", "11.2.3.4", O.READ, R.GROUP, "g")
    assert a.authorize("User:alice", "192.168.1.5", O.READ, R.GROUP, "h")
    assert not a.authorize("User:alice", "192.168.1.6", O.READ, R.GROUP, "h")


def test_decisions_follow_changes():
    a = authz()
    assert not a.authorize("User:alice", "h", O.READ, R.TOPIC, "t")
    a.set_acls((R.TOPIC, "t", P.LITERAL), [acl(R.TOPIC, "t", O.READ)])
    assert a.authorize("User:alice", "h", O.READ, R.TOPIC, "t")
    a.set_acls((R.TOPIC, "t", P.LITERAL), [])
    assert not a.authorize("User:alice", "h", O.READ, R.TOPIC, "t") and a.acls() == []


def test_a_check_with_10000_acls_is_a_lookup():
    acls = [acl(R.TOPIC, f"topic-{i}", O.READ, principal=f"User:u{i % 100}") for i in range(9000)]
    acls += [acl(R.TOPIC, f"pfx-{i}-", O.WRITE, pattern=P.PREFIXED) for i in range(1000)]
    a = authz(*acls)
    assert len(a.acls()) == 10000
    assert a.authorize("User:u7", "h", O.READ, R.TOPIC, "topic-107")
    assert a.authorize("User:alice", "h", O.WRITE, R.TOPIC, "pfx-5-x")
    t0 = time.perf_counter()
    for _ in range(10000):
        a.authorize("User:u7", "h", O.READ, R.TOPIC, "topic-107")
    per_check = (time.perf_counter() - t0) / 10000
    assert per_check < 20e-6, per_check  # a dict read, not a scan of 10,000 ACLs


def test_validation_as_kafka():
    validate(acl(R.TOPIC, "t", O.READ))
    validate(acl(R.GROUP, "g", O.READ, host="10.0.0.0/8"))
    for bad in (
        acl(R.ANY, "t", O.READ),
        acl(R.TOPIC, "t", O.ANY),
        acl(R.TOPIC, "t", O.READ, Permission.ANY),
        acl(R.TOPIC, "t", O.READ, pattern=P.MATCH),
        acl(R.CLUSTER, "c", O.ALTER),
        acl(R.TOPIC, "t", O.READ, principal="alice"),
        acl(R.TOPIC, "t", O.READ, host="not a host"),
        acl(R.TOPIC, "*", O.READ, pattern=P.PREFIXED),
    ):
        with pytest.raises(InvalidAcl):
            validate(bad)


def test_filters_match_as_kafka():
    lit, wild, pre = (
        acl(R.TOPIC, "sales-eu", O.READ),
        acl(R.TOPIC, "*", O.READ),
        acl(R.TOPIC, "sales-", O.READ, pattern=P.PREFIXED),
    )
    match = AclFilter(R.TOPIC, "sales-eu", P.MATCH, None, None, O.ANY, Permission.ANY)
    assert [match.matches(b) for b in (lit, wild, pre)] == [True, True, True]
    exact = AclFilter(R.TOPIC, "sales-eu", P.LITERAL, None, None, O.ANY, Permission.ANY)
    assert [exact.matches(b) for b in (lit, wild, pre)] == [True, False, False]
    anyf = AclFilter(R.ANY, None, P.ANY, "User:alice", None, O.READ, ALLOW)
    assert all(anyf.matches(b) for b in (lit, wild, pre))
    assert AclFilter(99, None, P.ANY, None, None, O.ANY, Permission.ANY).invalid()


# ---------------------------------------------------------------------------- storage


def test_kafkas_znode_json():
    data = AclZNodes.encode([acl_store.entry(acl(R.TOPIC, "t", O.DESCRIBE_CONFIGS, DENY, host="10.0.0.1"))])
    assert data == (
        b'{"version":1,"acls":[{"principal":"User:alice","permissionType":"Deny",'
        b'"operation":"DescribeConfigs","host":"10.0.0.1"}]}'
    )
    assert AclZNodes.path("LITERAL", "Topic", "t") == "/kafka-acl/Topic/t"
    assert AclZNodes.path("PREFIXED", "TransactionalId", "tx-") == "/kafka-acl-extended/prefixed/TransactionalId/tx-"
    assert AclZNodes.encode_change("LITERAL", "TOPIC", "t") == b"TOPIC:t"
    assert AclZNodes.decode_change("/p", b"Topic:a:b", True) == ("LITERAL", "TOPIC", "a:b")
    change = AclZNodes.encode_change("PREFIXED", "GROUP", "g-")
    assert change == b'{"version":1,"resourceType":"GROUP","name":"g-","patternType":"PREFIXED"}'
    assert AclZNodes.decode_change("/p", change, False) == ("PREFIXED", "GROUP", "g-")
    resource = (R.TOPIC, "t", P.LITERAL)
    back = acl_store.bindings(resource, AclZNodes.decode("/kafka-acl/Topic/t", data))
    assert back == [acl(R.TOPIC, "t", O.DESCRIBE_CONFIGS, DENY, host="10.0.0.1")]


def test_the_embedded_store_keeps_acls_and_notifies(tmp_path):
    async def run():
        store = FileMetadataStore(str(tmp_path))
        changed = []
        await store.watch_acl_changes(changed.extend)
        resource = (R.TOPIC, "t", P.PREFIXED)
        new = await store.update_acls({resource: lambda s: s | {acl(R.TOPIC, "t", O.READ, pattern=P.PREFIXED)}})
        assert len(new[resource]) == 1
        await asyncio.sleep(0)
        assert changed == [resource]
        again = FileMetadataStore(str(tmp_path))  # read back from the file
        assert await again.get_acls() == [acl(R.TOPIC, "t", O.READ, pattern=P.PREFIXED)]
        await store.update_acls({resource: lambda s: set()})
        assert await FileMetadataStore(str(tmp_path)).get_acls() == []

    asyncio.run(run())


# ---------------------------------------------------------------------------- through a listener


@pytest.fixture
def secured(tmp_path):
    """A SASL_PLAINTEXT listener with an authorizer: admin is a super user."""
    import threading
    from types import SimpleNamespace

    from broker.config import BrokerConfig
    from broker.security.credentials import CredentialCache
    from broker.security.listener import listener_securities
    from broker.server.server import Server

    jaas = (
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_admin="admin-pw" '
        'user_alice="alice-pw" user_broker="broker-pw";'
    )
    config = BrokerConfig(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "log.dirs": str(tmp_path),
        }
    )
    store = FileMetadataStore(str(tmp_path))

    class Services:
        transaction_version, features_epoch = 2, 0

        def __init__(self):
            self.config = config
            self.credentials = CredentialCache()
            self.authorizer = Authorizer(["User:admin"])

        async def update_acls(self, changes):
            new = await store.update_acls(changes)
            for resource, acls in new.items():
                self.authorizer.set_acls(resource, acls)
            return new

    services = Services()
    loop = asyncio.new_event_loop()
    server = Server(services, config.endpoints)
    server.set_securities(listener_securities(config))
    ready = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.call_soon(lambda: (server.start(), ready.set()))
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert ready.wait(5)

    def connect(user):
        from broker.security.listener import ClientSecurity

        return BrokerConnection(
            "127.0.0.1", server.port, security=ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", user, f"{user}-pw")
        )

    yield SimpleNamespace(connect=connect, services=services, store=store)
    loop.call_soon_threadsafe(lambda: (server.stop_listening(), loop.stop()))
    t.join(5)


def test_acl_apis_and_inter_broker_requests_need_their_rights(secured, caplog):
    C = CreateAclsRequest.AclCreation
    with secured.connect("alice") as alice:
        # no CLUSTER rights: every admin call and every inter-broker request refused
        assert (
            alice.request(
                CreateAclsRequest(
                    creations=[
                        C(
                            resource_type=2,
                            resource_name="t",
                            resource_pattern_type=3,
                            principal="User:alice",
                            host="*",
                            operation=3,
                            permission_type=3,
                        )
                    ]
                )
            )
            .results[0]
            .error_code
            == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        assert (
            alice.request(
                DescribeAclsRequest(
                    resource_type_filter=1,
                    resource_name_filter=None,
                    principal_filter=None,
                    host_filter=None,
                    pattern_type_filter=1,
                    operation=1,
                    permission_type=1,
                )
            ).error_code
            == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        )
        for req in (
            LeaderAndIsrRequest(controller_id=1, controller_epoch=99, broker_epoch=1),
            StopReplicaRequest(controller_id=1, controller_epoch=99, broker_epoch=1),
            UpdateMetadataRequest(controller_id=1, controller_epoch=99, broker_epoch=1),
        ):
            assert alice.request(req).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert any("refused User:alice" in r.getMessage() and r.name == "broker.audit" for r in caplog.records)
    with secured.connect("admin") as admin:
        resp = admin.request(
            CreateAclsRequest(
                creations=[
                    C(
                        resource_type=2,
                        resource_name="t",
                        resource_pattern_type=3,
                        principal="User:alice",
                        host="*",
                        operation=3,
                        permission_type=3,
                    ),
                    C(
                        resource_type=4,
                        resource_name=CLUSTER_NAME,
                        resource_pattern_type=3,
                        principal="User:broker",
                        host="*",
                        operation=9,
                        permission_type=3,
                    ),
                    C(
                        resource_type=4,
                        resource_name="not-the-cluster",
                        resource_pattern_type=3,
                        principal="User:x",
                        host="*",
                        operation=9,
                        permission_type=3,
                    ),
                ]
            )
        )
        assert [r.error_code for r in resp.results] == [0, 0, ErrorCode.INVALID_REQUEST]
        resp = admin.request(
            DescribeAclsRequest(
                resource_type_filter=1,
                resource_name_filter=None,
                principal_filter=None,
                host_filter=None,
                pattern_type_filter=1,
                operation=1,
                permission_type=1,
            )
        )
        assert sorted((r.resource_type, r.resource_name, [a.principal for a in r.acls]) for r in resp.resources) == [
            (2, "t", ["User:alice"]),
            (4, CLUSTER_NAME, ["User:broker"]),
        ]
    assert secured.services.authorizer.authorize("User:alice", "127.0.0.1", O.READ, R.TOPIC, "t")
    with secured.connect("admin") as admin:
        F = DeleteAclsRequest.DeleteAclsFilter
        resp = admin.request(
            DeleteAclsRequest(
                filters=[
                    F(
                        resource_type_filter=2,
                        resource_name_filter=None,
                        principal_filter=None,
                        host_filter=None,
                        pattern_type_filter=1,
                        operation=1,
                        permission_type=1,
                    )
                ]
            )
        )
        assert [(m.resource_name, m.principal) for m in resp.filter_results[0].matching_acls] == [("t", "User:alice")]
    assert not secured.services.authorizer.authorize("User:alice", "127.0.0.1", O.READ, R.TOPIC, "t")
    assert [b.resource_type for b in asyncio.run(secured.store.get_acls())] == [R.CLUSTER]

"""The ACL matrix against Apache Kafka's own authorizer: Apache Kafka 4.x (KRaft,
org.apache.kafka.metadata.authorizer.StandardAuthorizer) and kbroker, each with a
SASL_PLAINTEXT listener (PLAIN: admin, a super user, and alice) and the same ACLs. For
each resource type x operation x pattern (LITERAL name, LITERAL "*", PREFIXED prefix),
allowed (an ALLOW of the operation) and denied (ALLOW ALL with a DENY of the operation),
and with no ACL at all, alice sends the request whose check KafkaApis makes for that
operation; both brokers must decide alike: the same authorization error code, or none.

What is compared is the decision (the *_AUTHORIZATION_FAILED code, or "allowed"): the
rest of an answer is the differential suite's business (test_differential.py). USER
resources carry only delegation-token operations, which neither request here: their
ACLs are compared as DescribeAcls lists them, with every other type's.
"""

from __future__ import annotations

import time

import pytest

from broker.client import BrokerConnection
from broker.protocol.messages.create_acls import CreateAclsRequest as CA
from broker.protocol.messages.create_partitions import CreatePartitionsRequest as CP
from broker.protocol.messages.create_topics import CreateTopicsRequest as CT
from broker.protocol.messages.delete_acls import DeleteAclsRequest as DA
from broker.protocol.messages.delete_groups import DeleteGroupsRequest
from broker.protocol.messages.delete_records import DeleteRecordsRequest as DR
from broker.protocol.messages.describe_acls import DescribeAclsRequest as DAC
from broker.protocol.messages.describe_cluster import DescribeClusterRequest
from broker.protocol.messages.describe_configs import DescribeConfigsRequest as DC
from broker.protocol.messages.describe_groups import DescribeGroupsRequest
from broker.protocol.messages.fetch import FetchRequest as F
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest as LO
from broker.protocol.messages.metadata import MetadataRequest as MD
from broker.protocol.messages.offset_commit import OffsetCommitRequest as OC
from broker.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from broker.protocol.messages.produce import ProduceRequest as P
from broker.security.acl import Operation as O, PatternType as PT, Permission, ResourceType as R
from broker.security.listener import ClientSecurity
from tests.interop.helpers import batch
from tests.support.broker_proc import BrokerProcess
from tests.support.kafka_broker import KafkaBroker
from tests.support.kafka_tools import require_kafka_libs
from tests.support.ports import free_port

pytestmark = pytest.mark.interop

AUTH_CODES = {
    29: "TOPIC_AUTHORIZATION_FAILED",
    30: "GROUP_AUTHORIZATION_FAILED",
    31: "CLUSTER_AUTHORIZATION_FAILED",
    53: "TRANSACTIONAL_ID_AUTHORIZATION_FAILED",
}
PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw"}
JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-pw" '
    + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    + ";"
)
TOPIC, GROUP, TXN = "acl-topic", "acl-group", "acl-txn"


def security_config(sasl_port: int, plain_port: int, authorizer: str) -> dict:
    return {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain_port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT,CONTROLLER:PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": authorizer,
        # the broker's own PLAINTEXT connections (KRaft: to its controller) are ANONYMOUS
        "super.users": "User:admin;User:ANONYMOUS",
    }


@pytest.fixture(scope="module")
def brokers(tmp_path_factory):
    require_kafka_libs()
    d = tmp_path_factory.mktemp("acl-matrix")
    kafka_plain, kafka_sasl = free_port(), free_port()
    kafka_cfg = security_config(kafka_sasl, kafka_plain, "org.apache.kafka.metadata.authorizer.StandardAuthorizer")
    kafka_cfg["listeners"] += ",CONTROLLER://127.0.0.1:{controller}"
    ours_plain, ours_sasl = free_port(), free_port()
    ours_cfg = {
        **security_config(ours_sasl, ours_plain, "kafka.security.authorizer.AclAuthorizer"),
        "num.partitions": 1,
        "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
    }
    k = KafkaBroker(d / "kafka", port=kafka_plain)
    k.config.update({key: v.replace("{controller}", str(k.controller_port)) for key, v in kafka_cfg.items()})
    with k, BrokerProcess(d / "kbroker" / "data", config=ours_cfg, port=ours_plain, broker_id=1):
        peers = {
            name: {
                user: BrokerConnection(
                    "127.0.0.1",
                    port,
                    timeout=30,
                    security=ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", user, PASSWORDS[user]),
                )
                for user in PASSWORDS
            }
            for name, port in (("kafka", kafka_sasl), ("kbroker", ours_sasl))
        }
        for conns in peers.values():
            admin = conns["admin"]
            admin.request(
                CT(topics=[CT.CreatableTopic(name=TOPIC, num_partitions=1, replication_factor=1)], timeout_ms=30000)
            )
            admin.request(
                P(
                    acks=-1,
                    timeout_ms=10000,
                    topic_data=[
                        P.TopicProduceData(
                            name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=bytes(batch([b"x"])))]
                        )
                    ],
                )
            )
        yield peers
        for conns in peers.values():
            for c in conns.values():
                c.close()


# ---------------------------------------------------------------------------- probes


def _first_error(resp, *path):
    """The error code at the end of `path` (attribute names; lists take their first item)."""
    x = resp
    for p in path:
        x = getattr(x, p)
        if isinstance(x, list):
            x = x[0]
    return x


def probe_fetch(c):
    req = F(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        topics=[
            F.FetchTopic(
                topic=TOPIC, partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]
            )
        ],
    )
    return _first_error(c.request(req, version=12), "responses", "partitions", "error_code")


def probe_produce(c):
    req = P(
        acks=1,
        timeout_ms=10000,
        topic_data=[
            P.TopicProduceData(
                name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=bytes(batch([b"a"])))]
            )
        ],
    )
    return _first_error(c.request(req), "responses", "partition_responses", "error_code")


def probe_list_offsets(c):
    req = LO(
        replica_id=-1,
        isolation_level=0,
        topics=[LO.ListOffsetsTopic(name=TOPIC, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
    )
    return _first_error(c.request(req), "topics", "partitions", "error_code")


def probe_create_topic(c):
    req = CT(
        topics=[CT.CreatableTopic(name=TOPIC + "-new", num_partitions=1, replication_factor=1)],
        timeout_ms=10000,
        validate_only=True,
    )
    return _first_error(c.request(req), "topics", "error_code")


def probe_delete_records(c):
    req = DR(
        timeout_ms=10000,
        topics=[DR.DeleteRecordsTopic(name=TOPIC, partitions=[DR.DeleteRecordsPartition(partition_index=0, offset=0)])],
    )
    return _first_error(c.request(req), "topics", "partitions", "error_code")


def probe_create_partitions(c):
    req = CP(
        topics=[CP.CreatePartitionsTopic(name=TOPIC, count=2, assignments=None)], timeout_ms=10000, validate_only=True
    )
    return _first_error(c.request(req), "results", "error_code")


def probe_describe_configs(c, rtype=2, name=TOPIC):
    req = DC(
        resources=[
            DC.DescribeConfigsResource(resource_type=rtype, resource_name=name, configuration_keys=["retention.ms"])
        ]
    )
    return _first_error(c.request(req), "results", "error_code")


def probe_alter_configs(c, rtype=2, name=TOPIC, key="retention.ms"):
    req = IAC(
        validate_only=True,
        resources=[
            IAC.AlterConfigsResource(
                resource_type=rtype,
                resource_name=name,
                configs=[IAC.AlterableConfig(name=key, config_operation=0, value="86400000")],
            )
        ],
    )
    return _first_error(c.request(req), "responses", "error_code")


def probe_offset_commit(c):
    req = OC(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        retention_time_ms=-1,
        topics=[
            OC.OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=[
                    OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=0, committed_metadata="")
                ],
            )
        ],
    )
    return _first_error(c.request(req, version=7), "topics", "partitions", "error_code")


def probe_describe_group(c):
    return _first_error(c.request(DescribeGroupsRequest(groups=[GROUP])), "groups", "error_code")


def probe_offset_fetch(c):
    req = OF(group_id=GROUP, topics=[OF.OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])])
    return c.request(req, version=7).error_code


def probe_delete_group(c):
    return _first_error(c.request(DeleteGroupsRequest(groups_names=[GROUP])), "results", "error_code")


def probe_describe_cluster(c):
    return c.request(DescribeClusterRequest(include_cluster_authorized_operations=False), version=0).error_code


def probe_idempotent(c):
    return c.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000), version=4).error_code


def probe_txn_write(c):
    return c.request(InitProducerIdRequest(transactional_id=TXN, transaction_timeout_ms=60000), version=4).error_code


def probe_metadata(c):
    """A named topic, v12 (topic ids in the answer): refused as TOPIC_AUTHORIZATION_FAILED."""
    req = MD(topics=[MD.MetadataRequestTopic(name=TOPIC)], allow_auto_topic_creation=False)
    return _first_error(c.request(req, version=12), "topics", "error_code")


def probe_txn_describe(c):
    return c.request(FindCoordinatorRequest(key=TXN, key_type=1), version=3).error_code


#: (resource type, name, prefix, operation, probe); a topic probe's operation is the
#: one KafkaApis checks for that request
CASES = [
    (R.TOPIC, TOPIC, "acl-", O.READ, probe_fetch),
    (R.TOPIC, TOPIC, "acl-", O.WRITE, probe_produce),
    (R.TOPIC, TOPIC, "acl-", O.DESCRIBE, probe_list_offsets),
    (R.TOPIC, TOPIC, "acl-", O.DESCRIBE, probe_metadata),
    (R.TOPIC, TOPIC + "-new", "acl-", O.CREATE, probe_create_topic),
    (R.TOPIC, TOPIC, "acl-", O.DELETE, probe_delete_records),
    (R.TOPIC, TOPIC, "acl-", O.ALTER, probe_create_partitions),
    (R.TOPIC, TOPIC, "acl-", O.DESCRIBE_CONFIGS, probe_describe_configs),
    (R.TOPIC, TOPIC, "acl-", O.ALTER_CONFIGS, probe_alter_configs),
    (R.GROUP, GROUP, "acl-", O.READ, probe_offset_commit),
    (R.GROUP, GROUP, "acl-", O.DESCRIBE, probe_describe_group),
    (R.GROUP, GROUP, "acl-", O.DESCRIBE, probe_offset_fetch),
    (R.GROUP, GROUP, "acl-", O.DELETE, probe_delete_group),
    (R.CLUSTER, "kafka-cluster", None, O.DESCRIBE, probe_describe_cluster),
    (R.CLUSTER, "kafka-cluster", None, O.IDEMPOTENT_WRITE, probe_idempotent),
    (R.CLUSTER, "kafka-cluster", None, O.CREATE, probe_create_topic),
    (R.CLUSTER, "kafka-cluster", None, O.DESCRIBE_CONFIGS, lambda c: probe_describe_configs(c, 4, "1")),
    (R.TRANSACTIONAL_ID, TXN, "acl-", O.WRITE, probe_txn_write),
    (R.TRANSACTIONAL_ID, TXN, "acl-", O.DESCRIBE, probe_txn_describe),
]
# what alice holds throughout, so that one check at a time decides: group probes need READ
# (or DESCRIBE) on the topic they name
BASE = [(R.TOPIC, TOPIC, PT.LITERAL, O.READ, Permission.ALLOW)]


def creation(rtype, name, pattern, op, perm, principal="User:alice"):
    return CA.AclCreation(
        resource_type=rtype,
        resource_name=name,
        resource_pattern_type=pattern,
        principal=principal,
        host="*",
        operation=op,
        permission_type=perm,
    )


def all_filter():
    return DA.DeleteAclsFilter(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter="User:alice",
        host_filter=None,
        operation=1,
        permission_type=1,
    )


def acl_count(admin) -> int:
    resp = admin.request(
        DAC(
            resource_type_filter=1,
            resource_name_filter=None,
            pattern_type_filter=1,
            principal_filter="User:alice",
            host_filter=None,
            operation=1,
            permission_type=1,
        )
    )
    return sum(len(r.acls) for r in resp.resources)


def set_acls(conns, acls) -> None:
    """Exactly these ACLs for alice, in effect when this returns (Kafka applies them
    through its metadata log: its DescribeAcls reads the authorizer's own cache)."""
    admin = conns["admin"]
    admin.request(DA(filters=[all_filter()]))
    if acls:
        resp = admin.request(CA(creations=[creation(*a) for a in acls]))
        assert all(r.error_code == 0 for r in resp.results), [r.error_message for r in resp.results]
    deadline = time.monotonic() + 10
    while acl_count(admin) != len(acls):
        assert time.monotonic() < deadline, "ACLs not in effect"
        time.sleep(0.02)


def decision(code: int) -> str:
    return AUTH_CODES.get(code, "allowed")


def variants(rtype, name, prefix, op):
    """(label, ACLs) per pattern, allowed and denied, and none at all."""
    patterns = [("literal", name, PT.LITERAL)]
    if rtype != R.CLUSTER:  # the CLUSTER resource has one name, kafka-cluster (both refuse others)
        patterns.append(("wildcard", "*", PT.LITERAL))
    if prefix is not None:
        patterns.append(("prefixed", prefix, PT.PREFIXED))
    out = [("no ACL", [])]
    for label, n, pt in patterns:
        out.append((f"ALLOW {label}", [(rtype, n, pt, op, Permission.ALLOW)]))
        out.append((f"DENY {label}", [(rtype, n, pt, O.ALL, Permission.ALLOW), (rtype, n, pt, op, Permission.DENY)]))
    return out


def test_the_acl_matrix_decides_as_kafkas_standard_authorizer(brokers):
    mismatches = []
    checked = denied = 0
    for rtype, name, prefix, op, probe in CASES:
        for label, acls in variants(rtype, name, prefix, op):
            got = {}
            for peer, conns in brokers.items():
                base = [b for b in BASE if b[0] != rtype]
                set_acls(conns, base + acls)
                got[peer] = decision(probe(conns["alice"]))
            checked += 1
            if got["kafka"] != got["kbroker"]:
                mismatches.append(
                    f"{rtype.name} {op.name} via {probe.__name__} ({label}): Kafka {got['kafka']}, "
                    f"kbroker {got['kbroker']}"
                )
            denied += got["kafka"] != "allowed"
    # the matrix means something: most cases are refused (DescribeCluster needs no ACL)
    assert checked > 75 and denied > 45, (checked, denied)
    assert not mismatches, "\n".join(mismatches)


def test_acl_listings_match_for_every_resource_type_and_pattern(brokers):
    acls = [
        (R.TOPIC, "t1", PT.LITERAL, O.READ, Permission.ALLOW),
        (R.TOPIC, "t-", PT.PREFIXED, O.WRITE, Permission.DENY),
        (R.GROUP, "*", PT.LITERAL, O.READ, Permission.ALLOW),
        (R.CLUSTER, "kafka-cluster", PT.LITERAL, O.IDEMPOTENT_WRITE, Permission.ALLOW),
        (R.TRANSACTIONAL_ID, "tx-", PT.PREFIXED, O.DESCRIBE, Permission.ALLOW),
        (R.USER, "User:bob", PT.LITERAL, O.CREATE_TOKENS, Permission.ALLOW),
    ]
    listed = {}
    for peer, conns in brokers.items():
        set_acls(conns, acls)
        out = []
        for pattern in (PT.ANY, PT.MATCH, PT.LITERAL, PT.PREFIXED):
            for rtype, name in ((R.ANY, None), (R.TOPIC, "t-1"), (R.TOPIC, "t1")):
                if pattern == PT.MATCH and name is None:
                    continue
                resp = conns["admin"].request(
                    DAC(
                        resource_type_filter=rtype,
                        resource_name_filter=name,
                        pattern_type_filter=pattern,
                        principal_filter="User:alice",
                        host_filter=None,
                        operation=1,
                        permission_type=1,
                    )
                )
                out.append(
                    (
                        pattern.name,
                        rtype.name,
                        name,
                        resp.error_code,
                        sorted(
                            (r.resource_type, r.resource_name, r.pattern_type, a.operation, a.permission_type)
                            for r in resp.resources
                            for a in r.acls
                        ),
                    )
                )
        # DeleteAcls with a MATCH filter removes what applies to the name
        resp = conns["admin"].request(
            DA(
                filters=[
                    DA.DeleteAclsFilter(
                        resource_type_filter=R.TOPIC,
                        resource_name_filter="t-1",
                        pattern_type_filter=PT.MATCH,
                        principal_filter=None,
                        host_filter=None,
                        operation=1,
                        permission_type=1,
                    )
                ]
            )
        )
        out.append(("deleted", sorted((m.resource_name, m.pattern_type) for m in resp.filter_results[0].matching_acls)))
        listed[peer] = out
        set_acls(conns, [])
    assert listed["kbroker"] == listed["kafka"]


def test_created_topics_configs_need_describe_configs_as_in_kafka(brokers):
    """CreateTopics (validate_only) with CREATE alone and with CREATE and DESCRIBE_CONFIGS
    on the topic: the same topic_config_error_code, configs present or not, partitions,
    replication factor and topic id given or not in both brokers' answers."""
    answers = {}
    for peer, conns in brokers.items():
        out = []
        for ops in ((O.CREATE,), (O.CREATE, O.DESCRIBE_CONFIGS)):
            set_acls(conns, [(R.TOPIC, "acl-", PT.PREFIXED, op, Permission.ALLOW) for op in ops])
            r = (
                conns["alice"]
                .request(
                    CT(
                        topics=[CT.CreatableTopic(name=TOPIC + "-cfg", num_partitions=1, replication_factor=1)],
                        timeout_ms=10000,
                        validate_only=True,
                    )
                )
                .topics[0]
            )
            out.append(
                (
                    r.error_code,
                    r.topic_config_error_code,
                    bool(r.configs),
                    r.num_partitions,
                    r.replication_factor,
                    r.topic_id.int != 0,
                )
            )
        answers[peer] = out
        set_acls(conns, [])
    assert answers["kbroker"] == answers["kafka"]
    assert answers["kafka"][0][1] == 29 and answers["kafka"][1][1] == 0  # the check is there to see

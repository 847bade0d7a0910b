"""Every API the broker serves, through a real broker process with an authorizer (in a
one-broker ZooKeeper cluster, so that inter-broker requests reach their controller checks;
a SASL_PLAINTEXT listener, PLAIN users admin (super user), alice and bob):

- alice, without ACLs, is refused each one with a code its row in
  broker/security/api_rights.py names (filtering APIs leave out what she may not see;
  ApiVersions and DescribeCluster answer her);
- bob, holding exactly the rights of the API's row (ALLOW on "*" of the resource type,
  on the cluster for CLUSTER), is not refused.

An API registered without a request here fails the test: a new handler gets its
example request beside its row (REQUESTS), the transaction APIs included."""

from __future__ import annotations

import time
import uuid

import pytest

from broker.client.connection import BrokerConnection
from broker.protocol._runtime import Message
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from broker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest as APT
from broker.protocol.messages.alter_client_quotas import AlterClientQuotasRequest as ACQ
from broker.protocol.messages.alter_configs import AlterConfigsRequest as AC
from broker.protocol.messages.alter_partition import AlterPartitionRequest
from broker.protocol.messages.alter_partition_reassignments import AlterPartitionReassignmentsRequest as APR
from broker.protocol.messages.alter_share_group_offsets import AlterShareGroupOffsetsRequest as ASGO
from broker.protocol.messages.alter_user_scram_credentials import AlterUserScramCredentialsRequest as AUS
from broker.protocol.messages.api_versions import ApiVersionsRequest
from broker.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest as CGD
from broker.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as CGH
from broker.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from broker.protocol.messages.create_acls import CreateAclsRequest as CA
from broker.protocol.messages.create_partitions import CreatePartitionsRequest as CP
from broker.protocol.messages.create_topics import CreateTopicsRequest as CT
from broker.protocol.messages.delete_acls import DeleteAclsRequest as DA
from broker.protocol.messages.delete_groups import DeleteGroupsRequest
from broker.protocol.messages.delete_records import DeleteRecordsRequest as DR
from broker.protocol.messages.delete_share_group_offsets import DeleteShareGroupOffsetsRequest as DLSGO
from broker.protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest as DSGS
from broker.protocol.messages.delete_topics import DeleteTopicsRequest as DT
from broker.protocol.messages.describe_acls import DescribeAclsRequest as DAC
from broker.protocol.messages.describe_client_quotas import DescribeClientQuotasRequest as DCQ
from broker.protocol.messages.describe_cluster import DescribeClusterRequest
from broker.protocol.messages.describe_configs import DescribeConfigsRequest as DC
from broker.protocol.messages.describe_groups import DescribeGroupsRequest
from broker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from broker.protocol.messages.describe_producers import DescribeProducersRequest as DP
from broker.protocol.messages.describe_share_group_offsets import DescribeShareGroupOffsetsRequest as DSGO
from broker.protocol.messages.describe_transactions import DescribeTransactionsRequest
from broker.protocol.messages.describe_user_scram_credentials import DescribeUserScramCredentialsRequest
from broker.protocol.messages.elect_leaders import ElectLeadersRequest as EL
from broker.protocol.messages.end_txn import EndTxnRequest
from broker.protocol.messages.fetch import FetchRequest as F
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.heartbeat import HeartbeatRequest
from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as IAC
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest as ISGS
from broker.protocol.messages.join_group import JoinGroupRequest as JG
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.leave_group import LeaveGroupRequest as LG
from broker.protocol.messages.list_groups import ListGroupsRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest as LO
from broker.protocol.messages.list_partition_reassignments import ListPartitionReassignmentsRequest as LPR
from broker.protocol.messages.list_transactions import ListTransactionsRequest
from broker.protocol.messages.metadata import MetadataRequest as MD
from broker.protocol.messages.offset_commit import OffsetCommitRequest as OC
from broker.protocol.messages.offset_delete import OffsetDeleteRequest as OD
from broker.protocol.messages.offset_fetch import OffsetFetchRequest as OF
from broker.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest as OFLE
from broker.protocol.messages.produce import ProduceRequest as P
from broker.protocol.messages.read_share_group_state import ReadShareGroupStateRequest as RSGS
from broker.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest as RSGSS
from broker.protocol.messages.share_acknowledge import ShareAcknowledgeRequest as SA
from broker.protocol.messages.share_fetch import ShareFetchRequest as SF
from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest as SGD
from broker.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as SGH
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.sync_group import SyncGroupRequest
from broker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest as TOC
from broker.protocol.messages.update_metadata import UpdateMetadataRequest
from broker.protocol.messages.write_share_group_state import WriteShareGroupStateRequest as WSGS
from broker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest as WTM
from broker.security.acl import CLUSTER_NAME, PatternType, Permission, ResourceType
from broker.security.api_rights import API_RIGHTS, Right
from broker.security.listener import ClientSecurity
from broker.server.handlers import HANDLERS
from broker.uuids import uuid_text
from tests.interop.helpers import batch
from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(180)

PASSWORDS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw"}
JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    + " ".join(f'user_{u}="{p}"' for u, p in PASSWORDS.items())
    + ";"
)
AUTH_CODES = {
    ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
}
T, G = "rights-t", "rights-g"
#: a topic id no topic has: the share-group state APIs answer it, past the rights, with no change
SHARE_TOPIC_ID = uuid.UUID(int=0x5EA7)


def _fetch(replica_id: int) -> F:
    return F(
        replica_id=replica_id,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        forgotten_topics_data=[],
        topics=[
            F.FetchTopic(
                topic=T, partitions=[F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)]
            )
        ],
    )


def _ofle(replica_id: int) -> OFLE:
    return OFLE(
        replica_id=replica_id,
        topics=[
            OFLE.OffsetForLeaderTopic(
                topic=T,
                partitions=[OFLE.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1, leader_epoch=0)],
            )
        ],
    )


def _acl_filter() -> dict:
    return dict(
        resource_type_filter=2,
        resource_name_filter="nobody-topic",
        pattern_type_filter=3,
        principal_filter="User:nobody",
        host_filter=None,
        operation=1,
        permission_type=1,
    )


#: (case, api, request, version or None, how alice is answered: "refused" | "filtered" | "open");
#: inter-broker requests last (bob's, allowed, may change the broker's state)
REQUESTS: list[tuple[str, ApiKey, Message, int | None, str]] = [
    (
        "produce",
        ApiKey.PRODUCE,
        P(
            acks=1,
            timeout_ms=10000,
            topic_data=[
                P.TopicProduceData(
                    name=T, partition_data=[P.PartitionProduceData(index=0, records=bytes(batch([b"r"])))]
                )
            ],
        ),
        None,
        "refused",
    ),
    ("consumer fetch", ApiKey.FETCH, _fetch(-1), 12, "refused"),
    (
        "list offsets",
        ApiKey.LIST_OFFSETS,
        LO(
            replica_id=-1,
            isolation_level=0,
            topics=[LO.ListOffsetsTopic(name=T, partitions=[LO.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
        ),
        None,
        "refused",
    ),
    (
        "metadata of a named topic",
        ApiKey.METADATA,
        MD(topics=[MD.MetadataRequestTopic(name=T)], allow_auto_topic_creation=False),
        None,
        "refused",
    ),
    ("metadata of all topics", ApiKey.METADATA, MD(topics=None, allow_auto_topic_creation=False), None, "filtered"),
    (
        "offset commit",
        ApiKey.OFFSET_COMMIT,
        OC(
            group_id=G,
            generation_id_or_member_epoch=-1,
            member_id="",
            retention_time_ms=-1,
            topics=[
                OC.OffsetCommitRequestTopic(
                    name=T,
                    partitions=[
                        OC.OffsetCommitRequestPartition(partition_index=0, committed_offset=0, committed_metadata="")
                    ],
                )
            ],
        ),
        7,
        "refused",
    ),
    (
        "offset fetch",
        ApiKey.OFFSET_FETCH,
        OF(group_id=G, topics=[OF.OffsetFetchRequestTopic(name=T, partition_indexes=[0])]),
        7,
        "refused",
    ),
    ("find a group's coordinator", ApiKey.FIND_COORDINATOR, FindCoordinatorRequest(key=G, key_type=0), 3, "refused"),
    (
        "find a transaction's coordinator",
        ApiKey.FIND_COORDINATOR,
        FindCoordinatorRequest(key="txn", key_type=1),
        3,
        "refused",
    ),
    (
        "find a share-partition's share coordinator (brokers only)",
        ApiKey.FIND_COORDINATOR,
        FindCoordinatorRequest(key_type=2, coordinator_keys=[f"{G}:{uuid_text(SHARE_TOPIC_ID)}:0"]),
        6,
        "refused",
    ),
    (
        "join group",
        ApiKey.JOIN_GROUP,
        JG(
            group_id=G,
            session_timeout_ms=10000,
            rebalance_timeout_ms=10000,
            member_id="",
            protocol_type="consumer",
            protocols=[JG.JoinGroupRequestProtocol(name="range", metadata=b"")],
        ),
        None,
        "refused",
    ),
    ("heartbeat", ApiKey.HEARTBEAT, HeartbeatRequest(group_id=G, generation_id=1, member_id="m"), None, "refused"),
    ("leave group", ApiKey.LEAVE_GROUP, LG(group_id=G, members=[LG.MemberIdentity(member_id="m")]), None, "refused"),
    (
        "sync group",
        ApiKey.SYNC_GROUP,
        SyncGroupRequest(
            group_id=G, generation_id=1, member_id="m", protocol_type="consumer", protocol_name="range", assignments=[]
        ),
        None,
        "refused",
    ),
    ("describe groups", ApiKey.DESCRIBE_GROUPS, DescribeGroupsRequest(groups=[G]), None, "refused"),
    (
        "consumer group heartbeat",
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        CGH(
            group_id=G + "-848",
            member_id="m-848",
            member_epoch=0,
            rebalance_timeout_ms=1000,
            subscribed_topic_names=[T],
            topic_partitions=[],
        ),
        None,
        "refused",
    ),
    ("consumer group describe", ApiKey.CONSUMER_GROUP_DESCRIBE, CGD(group_ids=[G + "-848"]), None, "refused"),
    (
        "share fetch (opens a share session)",
        ApiKey.SHARE_FETCH,
        SF(
            group_id=G + "-share",
            member_id="m-share",
            share_session_epoch=0,
            max_wait_ms=0,
            min_bytes=1,
            max_records=10,
            batch_size=10,
            topics=[SF.FetchTopic(topic_id=uuid.UUID(int=7), partitions=[SF.FetchPartition(partition_index=0)])],
            forgotten_topics_data=[],
        ),
        None,
        "refused",
    ),
    (
        "share acknowledge",
        ApiKey.SHARE_ACKNOWLEDGE,
        SA(
            group_id=G + "-share",
            member_id="m-share",
            share_session_epoch=1,
            topics=[
                SA.AcknowledgeTopic(
                    topic_id=uuid.UUID(int=7),
                    partitions=[
                        SA.AcknowledgePartition(
                            partition_index=0,
                            acknowledgement_batches=[
                                SA.AcknowledgementBatch(first_offset=0, last_offset=0, acknowledge_types=[1])
                            ],
                        )
                    ],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "share group heartbeat",
        ApiKey.SHARE_GROUP_HEARTBEAT,
        SGH(group_id=G + "-share", member_id="m-share", member_epoch=0, subscribed_topic_names=[T]),
        None,
        "refused",
    ),
    ("share group describe", ApiKey.SHARE_GROUP_DESCRIBE, SGD(group_ids=[G + "-share"]), None, "refused"),
    ("list groups", ApiKey.LIST_GROUPS, ListGroupsRequest(states_filter=[]), None, "filtered"),
    (
        "api versions",
        ApiKey.API_VERSIONS,
        ApiVersionsRequest(client_software_name="t", client_software_version="1"),
        None,
        "open",
    ),
    (
        "create topics",
        ApiKey.CREATE_TOPICS,
        CT(
            topics=[CT.CreatableTopic(name=T + "-new", num_partitions=1, replication_factor=1)],
            timeout_ms=10000,
            validate_only=True,
        ),
        None,
        "refused",
    ),
    (
        "delete topics",
        ApiKey.DELETE_TOPICS,
        DT(topic_names=[T + "-del"], topics=[DT.DeleteTopicState(name=T + "-del")], timeout_ms=10000),
        None,
        "refused",
    ),
    (
        "delete records",
        ApiKey.DELETE_RECORDS,
        DR(
            timeout_ms=10000,
            topics=[DR.DeleteRecordsTopic(name=T, partitions=[DR.DeleteRecordsPartition(partition_index=0, offset=0)])],
        ),
        None,
        "refused",
    ),
    (
        "idempotent producer id",
        ApiKey.INIT_PRODUCER_ID,
        InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000),
        4,
        "refused",
    ),
    (
        "transactional producer id",
        ApiKey.INIT_PRODUCER_ID,
        InitProducerIdRequest(transactional_id="txn", transaction_timeout_ms=60000),
        4,
        "refused",
    ),
    ("a client's offset for leader epoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, _ofle(-1), None, "refused"),
    ("describe acls", ApiKey.DESCRIBE_ACLS, DAC(**_acl_filter()), None, "refused"),
    (
        "create acls",
        ApiKey.CREATE_ACLS,
        CA(
            creations=[
                CA.AclCreation(
                    resource_type=2,
                    resource_name="nobody-topic",
                    resource_pattern_type=3,
                    principal="User:nobody",
                    host="*",
                    operation=3,
                    permission_type=3,
                )
            ]
        ),
        None,
        "refused",
    ),
    ("delete acls", ApiKey.DELETE_ACLS, DA(filters=[DA.DeleteAclsFilter(**_acl_filter())]), None, "refused"),
    (
        "describe topic configs",
        ApiKey.DESCRIBE_CONFIGS,
        DC(
            resources=[
                DC.DescribeConfigsResource(resource_type=2, resource_name=T, configuration_keys=["retention.ms"])
            ]
        ),
        None,
        "refused",
    ),
    (
        "describe broker configs",
        ApiKey.DESCRIBE_CONFIGS,
        DC(
            resources=[
                DC.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=["log.retention.ms"])
            ]
        ),
        None,
        "refused",
    ),
    (
        "alter topic configs",
        ApiKey.ALTER_CONFIGS,
        AC(
            validate_only=True,
            resources=[
                AC.AlterConfigsResource(
                    resource_type=2,
                    resource_name=T,
                    configs=[AC.AlterableConfig(name="retention.ms", value="86400000")],
                )
            ],
        ),
        None,
        "refused",
    ),
    ("describe log dirs", ApiKey.DESCRIBE_LOG_DIRS, DescribeLogDirsRequest(topics=None), None, "refused"),
    (
        "create partitions",
        ApiKey.CREATE_PARTITIONS,
        CP(topics=[CP.CreatePartitionsTopic(name=T, count=2, assignments=None)], timeout_ms=10000, validate_only=True),
        None,
        "refused",
    ),
    ("delete groups", ApiKey.DELETE_GROUPS, DeleteGroupsRequest(groups_names=["no-such-group"]), None, "refused"),
    (
        "elect leaders",
        ApiKey.ELECT_LEADERS,
        EL(election_type=0, topic_partitions=[EL.TopicPartitions(topic=T, partitions=[0])], timeout_ms=10000),
        None,
        "refused",
    ),
    (
        "alter partition reassignments (a cancel)",
        ApiKey.ALTER_PARTITION_REASSIGNMENTS,
        APR(
            timeout_ms=10000,
            topics=[
                APR.ReassignableTopic(name=T, partitions=[APR.ReassignablePartition(partition_index=0, replicas=None)])
            ],
        ),
        None,
        "refused",
    ),
    (
        "list partition reassignments",
        ApiKey.LIST_PARTITION_REASSIGNMENTS,
        LPR(timeout_ms=10000, topics=None),
        None,
        "refused",
    ),
    (
        "incremental alter topic configs",
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        IAC(
            validate_only=True,
            resources=[
                IAC.AlterConfigsResource(
                    resource_type=2,
                    resource_name=T,
                    configs=[IAC.AlterableConfig(name="retention.ms", config_operation=0, value="86400000")],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "incremental alter broker configs",
        ApiKey.INCREMENTAL_ALTER_CONFIGS,
        IAC(
            validate_only=True,
            resources=[
                IAC.AlterConfigsResource(
                    resource_type=4,
                    resource_name="",
                    configs=[IAC.AlterableConfig(name="log.retention.ms", config_operation=0, value="86400000")],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "alter broker configs",
        ApiKey.ALTER_CONFIGS,
        AC(
            validate_only=True,
            resources=[
                AC.AlterConfigsResource(
                    resource_type=4,
                    resource_name="1",
                    configs=[AC.AlterableConfig(name="log.retention.ms", value="86400000")],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "offset delete",
        ApiKey.OFFSET_DELETE,
        OD(
            group_id=G,
            topics=[
                OD.OffsetDeleteRequestTopic(name=T, partitions=[OD.OffsetDeleteRequestPartition(partition_index=0)])
            ],
        ),
        None,
        "refused",
    ),
    ("describe client quotas", ApiKey.DESCRIBE_CLIENT_QUOTAS, DCQ(components=[], strict=False), None, "refused"),
    (
        "alter client quotas",
        ApiKey.ALTER_CLIENT_QUOTAS,
        ACQ(
            validate_only=True,
            entries=[
                ACQ.EntryData(
                    entity=[ACQ.EntityData(entity_type="client-id", entity_name="nobody")],
                    ops=[ACQ.OpData(key="producer_byte_rate", value=1024.0, remove=False)],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "describe scram credentials",
        ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
        DescribeUserScramCredentialsRequest(users=None),
        None,
        "refused",
    ),
    (
        "alter scram credentials",
        ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
        AUS(deletions=[AUS.ScramCredentialDeletion(name="nobody", mechanism=1)], upsertions=[]),
        None,
        "refused",
    ),
    # transactions (a producer id no coordinator handed out: bob is answered, not refused)
    (
        "add partitions to a transaction",
        ApiKey.ADD_PARTITIONS_TO_TXN,
        APT(
            v3_and_below_transactional_id="txn",
            v3_and_below_producer_id=1,
            v3_and_below_producer_epoch=0,
            v3_and_below_topics=[APT.AddPartitionsToTxnTopic(name=T, partitions=[0])],
        ),
        3,
        "refused",
    ),
    (
        "add offsets to a transaction",
        ApiKey.ADD_OFFSETS_TO_TXN,
        AddOffsetsToTxnRequest(transactional_id="txn", producer_id=1, producer_epoch=0, group_id=G),
        None,
        "refused",
    ),
    (
        "end a transaction",
        ApiKey.END_TXN,
        EndTxnRequest(transactional_id="txn", producer_id=1, producer_epoch=0, committed=False),
        None,
        "refused",
    ),
    (
        "transactional offset commit",
        ApiKey.TXN_OFFSET_COMMIT,
        TOC(
            transactional_id="txn",
            group_id=G,
            producer_id=1,
            producer_epoch=0,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                TOC.TxnOffsetCommitRequestTopic(
                    name=T,
                    partitions=[
                        TOC.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""
                        )
                    ],
                )
            ],
        ),
        3,
        "refused",
    ),
    (
        "transactional offset commit adding its partition (transaction.version 2)",
        ApiKey.TXN_OFFSET_COMMIT,
        TOC(
            transactional_id="txn",
            group_id=G,
            producer_id=1,
            producer_epoch=0,
            generation_id_or_member_epoch=-1,
            member_id="",
            group_instance_id=None,
            topics=[
                TOC.TxnOffsetCommitRequestTopic(
                    name=T,
                    partitions=[
                        TOC.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata=""
                        )
                    ],
                )
            ],
        ),
        5,
        "refused",
    ),
    (
        "describe transactions",
        ApiKey.DESCRIBE_TRANSACTIONS,
        DescribeTransactionsRequest(transactional_ids=["txn"]),
        None,
        "refused",
    ),
    (
        "list transactions",
        ApiKey.LIST_TRANSACTIONS,
        ListTransactionsRequest(state_filters=[], producer_id_filters=[]),
        0,
        "filtered",
    ),
    (
        "describe producers",
        ApiKey.DESCRIBE_PRODUCERS,
        DP(topics=[DP.TopicRequest(name=T, partition_indexes=[0])]),
        None,
        "refused",
    ),
    (
        "describe cluster",
        ApiKey.DESCRIBE_CLUSTER,
        DescribeClusterRequest(include_cluster_authorized_operations=False),
        0,
        "open",
    ),
    # inter-broker requests, and a follower's fetches
    ("follower fetch", ApiKey.FETCH, _fetch(7), 12, "refused"),
    ("a follower's offset for leader epoch", ApiKey.OFFSET_FOR_LEADER_EPOCH, _ofle(7), None, "refused"),
    (
        "alter partition",
        ApiKey.ALTER_PARTITION,
        AlterPartitionRequest(broker_id=7, broker_epoch=1, topics=[]),
        None,
        "refused",
    ),
    (
        "leader and isr",
        ApiKey.LEADER_AND_ISR,
        LeaderAndIsrRequest(controller_id=7, controller_epoch=0, broker_epoch=1),
        None,
        "refused",
    ),
    (
        "stop replica",
        ApiKey.STOP_REPLICA,
        StopReplicaRequest(controller_id=7, controller_epoch=0, broker_epoch=1),
        None,
        "refused",
    ),
    (
        "update metadata",
        ApiKey.UPDATE_METADATA,
        UpdateMetadataRequest(controller_id=7, controller_epoch=0, broker_epoch=1),
        None,
        "refused",
    ),
    (
        "verify a transaction's partitions (a broker's)",
        ApiKey.ADD_PARTITIONS_TO_TXN,
        APT(
            transactions=[
                APT.AddPartitionsToTxnTransaction(
                    transactional_id="txn",
                    producer_id=1,
                    producer_epoch=0,
                    verify_only=True,
                    topics=[APT.AddPartitionsToTxnTopic(name=T, partitions=[0])],
                )
            ]
        ),
        4,
        "refused",
    ),
    (
        "add a partition for its producer (a leader's, transaction.version 2)",
        ApiKey.ADD_PARTITIONS_TO_TXN,
        APT(
            transactions=[
                APT.AddPartitionsToTxnTransaction(
                    transactional_id="txn",
                    producer_id=1,
                    producer_epoch=0,
                    verify_only=False,
                    topics=[APT.AddPartitionsToTxnTopic(name=T, partitions=[0])],
                )
            ]
        ),
        5,
        "refused",
    ),
    (
        "write transaction markers",
        ApiKey.WRITE_TXN_MARKERS,
        WTM(
            markers=[
                WTM.WritableTxnMarker(
                    producer_id=1,
                    producer_epoch=0,
                    transaction_result=False,
                    coordinator_epoch=0,
                    topics=[WTM.WritableTxnMarkerTopic(name=T, partition_indexes=[0])],
                )
            ]
        ),
        None,
        "refused",
    ),
    (
        "describe a share group's offsets",
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        DSGO(
            groups=[
                DSGO.DescribeShareGroupOffsetsRequestGroup(
                    group_id=G, topics=[DSGO.DescribeShareGroupOffsetsRequestTopic(topic_name=T, partitions=[0])]
                )
            ]
        ),
        None,
        "refused",
    ),
    (
        "alter a share group's offsets",
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        ASGO(
            group_id=G,
            topics=[
                ASGO.AlterShareGroupOffsetsRequestTopic(
                    topic_name=T,
                    partitions=[ASGO.AlterShareGroupOffsetsRequestPartition(partition_index=0, start_offset=0)],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "delete a share group's offsets",
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
        DLSGO(group_id=G, topics=[DLSGO.DeleteShareGroupOffsetsRequestTopic(topic_name=T)]),
        None,
        "refused",
    ),
    (
        "initialize share-group state",
        ApiKey.INITIALIZE_SHARE_GROUP_STATE,
        ISGS(
            group_id=G,
            topics=[
                ISGS.InitializeStateData(
                    topic_id=SHARE_TOPIC_ID, partitions=[ISGS.PartitionData(partition=0, state_epoch=0, start_offset=0)]
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "read share-group state",
        ApiKey.READ_SHARE_GROUP_STATE,
        RSGS(
            group_id=G,
            topics=[
                RSGS.ReadStateData(
                    topic_id=SHARE_TOPIC_ID, partitions=[RSGS.PartitionData(partition=0, leader_epoch=0)]
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "write share-group state",
        ApiKey.WRITE_SHARE_GROUP_STATE,
        WSGS(
            group_id=G,
            topics=[
                WSGS.WriteStateData(
                    topic_id=SHARE_TOPIC_ID,
                    partitions=[WSGS.PartitionData(partition=0, state_epoch=0, leader_epoch=0, start_offset=0)],
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "delete share-group state",
        ApiKey.DELETE_SHARE_GROUP_STATE,
        DSGS(
            group_id=G,
            topics=[DSGS.DeleteStateData(topic_id=SHARE_TOPIC_ID, partitions=[DSGS.PartitionData(partition=0)])],
        ),
        None,
        "refused",
    ),
    (
        "read share-group state summary",
        ApiKey.READ_SHARE_GROUP_STATE_SUMMARY,
        RSGSS(
            group_id=G,
            topics=[
                RSGSS.ReadStateSummaryData(
                    topic_id=SHARE_TOPIC_ID, partitions=[RSGSS.PartitionData(partition=0, leader_epoch=0)]
                )
            ],
        ),
        None,
        "refused",
    ),
    (
        "controlled shutdown",
        ApiKey.CONTROLLED_SHUTDOWN,
        ControlledShutdownRequest(broker_id=7, broker_epoch=1),
        None,
        "refused",
    ),
]
#: APIs that are the authentication itself: sent by every client before it has a principal
AUTHENTICATION = {ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE}


def error_codes(msg) -> set[int]:
    """Every *error_code in a response, at any depth."""
    out: set[int] = set()
    for name in getattr(msg, "__slots__", ()):
        v = getattr(msg, name, None)
        if name.endswith("error_code") and isinstance(v, int):
            out.add(v)
        elif isinstance(v, list):
            for item in v:
                out |= error_codes(item)
        elif isinstance(v, Message):
            out |= error_codes(v)
    return out


@pytest.fixture(scope="module")
def broker(tmp_path_factory, zookeeper):
    d = tmp_path_factory.mktemp("api-rights")
    plain, sasl = free_port(), free_port()
    config = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
        "super.users": "User:admin;User:ANONYMOUS",
        "num.partitions": 1,
        "offsets.topic.num.partitions": 1,
        "group.initial.rebalance.delay.ms": 0,
        "zookeeper.connect": zookeeper.chroot("api_rights"),
    }
    with BrokerProcess(d / "data", config=config, port=plain, broker_id=1) as b:
        conns = {
            u: BrokerConnection(
                "127.0.0.1", sasl, timeout=30, security=ClientSecurity("SASL_PLAINTEXT", None, "PLAIN", u, pw)
            )
            for u, pw in PASSWORDS.items()
        }
        admin = conns["admin"]
        deadline = time.monotonic() + 30
        for name in (T, T + "-del"):  # once the broker sees its own registration
            while (
                codes := error_codes(
                    admin.request(
                        CT(
                            topics=[CT.CreatableTopic(name=name, num_partitions=1, replication_factor=1)],
                            timeout_ms=30000,
                        )
                    )
                )
            ) != {0}:
                assert codes == {0, ErrorCode.INVALID_REPLICATION_FACTOR} and time.monotonic() < deadline, codes
                time.sleep(0.1)
        commit = next(r for c, _, r, _, _ in REQUESTS if c == "offset commit")
        deadline = time.monotonic() + 30  # the group exists, Empty (once __consumer_offsets is up)
        while admin.request(FindCoordinatorRequest(key=G, key_type=0), version=3).error_code or (
            codes := error_codes(admin.request(commit, version=7))
        ) != {0}:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.1)
        yield b, conns
        for c in conns.values():
            c.close()


def set_bobs_acls(admin, rights) -> None:
    """Exactly `rights` for bob: ALLOW on "*" of the type (on the cluster for CLUSTER)."""
    bob = dict(
        resource_type_filter=1,
        resource_name_filter=None,
        pattern_type_filter=1,
        principal_filter="User:bob",
        host_filter=None,
        operation=1,
        permission_type=1,
    )
    admin.request(DA(filters=[DA.DeleteAclsFilter(**bob)]))
    creations = [
        CA.AclCreation(
            resource_type=r.resource_type,
            resource_name=CLUSTER_NAME if r.resource_type == ResourceType.CLUSTER else "*",
            resource_pattern_type=PatternType.LITERAL,
            principal="User:bob",
            host="*",
            operation=r.operation,
            permission_type=Permission.ALLOW,
        )
        for r in {Right(r.operation, r.resource_type, None) for r in rights}
    ]
    if creations:
        assert error_codes(admin.request(CA(creations=creations))) == {0}
    deadline = time.monotonic() + 10
    while sum(len(r.acls) for r in admin.request(DAC(**bob)).resources) != len(creations):
        assert time.monotonic() < deadline, "bob's ACLs not in effect"
        time.sleep(0.02)


def test_every_registered_api_has_an_example_request():
    served = {ApiKey(k) for k in HANDLERS} - AUTHENTICATION
    missing = sorted(a.name for a in served - {api for _, api, _, _, _ in REQUESTS})
    assert not missing, f"add an example request for {missing} to REQUESTS, beside its row in API_RIGHTS"
    assert all(API_RIGHTS[a] == () for a in AUTHENTICATION)


def test_a_principal_without_acls_is_refused_every_api(broker):
    _, conns = broker
    alice = conns["alice"]
    wrong = []
    for case, api, req, version, how in REQUESTS:
        if int(api) not in HANDLERS:
            continue
        resp = alice.request(req, version=version)
        got = error_codes(resp) & AUTH_CODES
        allowed = {r.refused for r in API_RIGHTS[api] if r.refused is not None}
        if how == "refused" and not (got and got <= allowed):
            wrong.append(
                f"{case}: {sorted(ErrorCode(c).name for c in got)}, expected some of {sorted(c.name for c in allowed)}"
            )
        elif how != "refused" and got:
            wrong.append(f"{case}: refused ({sorted(ErrorCode(c).name for c in got)})")
        if case == "metadata of all topics" and any(t.name == T for t in resp.topics):
            wrong.append(f"{case}: lists {T}")
        if case == "list groups" and any(g.group_id == G for g in resp.groups):
            wrong.append(f"{case}: lists {G}")
    assert not wrong, "\n".join(wrong)


def test_the_rights_of_its_row_are_enough_for_every_api(broker):
    _, conns = broker
    admin, bob = conns["admin"], conns["bob"]
    wrong = []
    for case, api, req, version, _ in REQUESTS:
        if int(api) not in HANDLERS:
            continue
        set_bobs_acls(admin, API_RIGHTS[api])
        resp = bob.request(req, version=version)
        got = error_codes(resp) & AUTH_CODES
        if got:
            wrong.append(f"{case}: {sorted(ErrorCode(c).name for c in got)} with {API_RIGHTS[api]}")
        if case == "metadata of all topics" and not any(t.name == T for t in resp.topics):
            wrong.append(f"{case}: {T} left out")
        if case == "list groups" and not any(g.group_id == G for g in resp.groups):
            wrong.append(f"{case}: {G} left out")
    assert not wrong, "\n".join(wrong)


def test_created_topics_configs_need_describe_configs(broker):
    """As Kafka's (tests/apache_kafka/test_acl_matrix.py compares): CREATE alone creates;
    the configs, partitions and replication factor come back only with DESCRIBE_CONFIGS
    (else topic_config_error_code TOPIC_AUTHORIZATION_FAILED)."""
    _, conns = broker
    admin, bob = conns["admin"], conns["bob"]
    create = next(r for c, _, r, _, _ in REQUESTS if c == "create topics")
    only_create = [r for r in API_RIGHTS[ApiKey.CREATE_TOPICS] if r.operation.name == "CREATE"]
    set_bobs_acls(admin, only_create)
    r = bob.request(create).topics[0]
    assert (r.error_code, r.topic_config_error_code, r.configs, r.num_partitions) == (
        0,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
        [],
        -1,
    )
    set_bobs_acls(admin, API_RIGHTS[ApiKey.CREATE_TOPICS])
    r = bob.request(create).topics[0]
    assert (r.error_code, r.topic_config_error_code) == (0, 0) and any(c.name == "retention.ms" for c in r.configs)

"""The inter-broker APIs against a real broker, sent by a client that is not the
controller or not a replica: each is refused with Kafka's error code and changes nothing."""

import uuid

from broker.client import BrokerConnection, Cluster
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.alter_partition import AlterPartitionRequest
from broker.protocol.messages.controlled_shutdown import ControlledShutdownRequest
from broker.protocol.messages.fetch import FetchRequest
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.stop_replica import StopReplicaRequest
from broker.protocol.messages.update_metadata import UpdateMetadataRequest


def conn(broker):
    host, port = broker.bootstrap.split(":")
    return BrokerConnection(host, int(port))


def test_controller_requests_from_the_network_are_refused_by_a_broker_without_zookeeper(broker, topic_name):
    """Its only controller is itself, which does not use the network: whatever epochs a
    request claims (2**31 - 1 included), it changes nothing."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
        before = c.topic(topic_name).partitions[0]
    with conn(broker) as k:
        L = LeaderAndIsrRequest
        for epoch in (0, 2**31 - 1):
            r = k.request(
                L(
                    controller_id=0,
                    controller_epoch=epoch,
                    broker_epoch=-1,
                    type=0,
                    topic_states=[
                        L.LeaderAndIsrTopicState(
                            topic_name=topic_name,
                            topic_id=uuid.uuid4(),
                            partition_states=[
                                L.LeaderAndIsrPartitionState(
                                    partition_index=0,
                                    controller_epoch=epoch,
                                    leader=7,
                                    leader_epoch=99,
                                    isr=[7],
                                    partition_epoch=99,
                                    replicas=[0, 7],
                                )
                            ],
                        )
                    ],
                    live_leaders=[],
                )
            )
            assert r.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            U = UpdateMetadataRequest
            assert (
                k.request(
                    U(controller_id=7, controller_epoch=epoch, broker_epoch=-1, topic_states=[], live_brokers=[])
                ).error_code
                == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
            S = StopReplicaRequest
            assert (
                k.request(
                    S(
                        controller_id=7,
                        controller_epoch=epoch,
                        broker_epoch=-1,
                        topic_states=[
                            S.StopReplicaTopicState(
                                topic_name=topic_name,
                                partition_states=[
                                    S.StopReplicaPartitionState(
                                        partition_index=0, leader_epoch=-2, delete_partition=True
                                    )
                                ],
                            )
                        ],
                    )
                ).error_code
                == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            )
    with Cluster(broker.bootstrap) as c:
        after = c.topic(topic_name).partitions[0]
        assert (after.leader, after.leader_epoch, after.replicas) == (
            before.leader,
            before.leader_epoch,
            before.replicas,
        )
        assert len(c.brokers) == 1


def test_controlled_shutdown_and_alter_partition_need_the_brokers_epoch(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    with conn(broker) as k:
        r = k.request(ControlledShutdownRequest(broker_id=0, broker_epoch=-1))
        assert r.error_code == ErrorCode.STALE_BROKER_EPOCH and r.remaining_partitions == []
        r = k.request(ControlledShutdownRequest(broker_id=42, broker_epoch=-1))
        assert r.error_code == ErrorCode.BROKER_NOT_AVAILABLE
        A = AlterPartitionRequest
        r = k.request(
            A(
                broker_id=0,
                broker_epoch=-1,
                topics=[
                    A.TopicData(
                        topic_name=topic_name,
                        partitions=[A.PartitionData(partition_index=0, leader_epoch=0, new_isr=[0], partition_epoch=0)],
                    )
                ],
            ),
            version=1,
        )
        assert r.error_code == ErrorCode.STALE_BROKER_EPOCH
    with Cluster(broker.bootstrap) as c:  # still serving, still leading
        assert c.topic(topic_name).partitions[0].leader == 0


def test_a_replica_fetch_from_a_broker_that_is_not_a_replica_is_refused(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    F = FetchRequest
    with conn(broker) as k:
        r = k.request(
            F(
                replica_id=5,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    F.FetchTopic(
                        topic=topic_name,
                        partitions=[
                            F.FetchPartition(
                                partition=0,
                                current_leader_epoch=-1,
                                fetch_offset=0,
                                log_start_offset=-1,
                                partition_max_bytes=1 << 20,
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            ),
            version=11,
        )
        assert r.responses[0].partitions[0].error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER

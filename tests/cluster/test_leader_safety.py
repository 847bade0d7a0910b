"""The leader's side of replication safety against real broker processes (issue 16):
a Fetch that names a follower's replica id counts as that follower's position only when
its read succeeded — an offset beyond the log end, a diverging last fetched epoch or a
broker that is not a replica moves nothing, so no acks=all produce is acknowledged that
the followers do not have."""

from __future__ import annotations

from broker.client import BrokerConnection, Cluster as Client
from broker.native import BatchBuilder
from broker.protocol.api import ApiKey
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.create_topics import CreateTopicsRequest as C
from broker.protocol.messages.fetch import FetchRequest as F
from broker.protocol.messages.produce import ProduceRequest as P

TOPIC = "safety"
HUGE = 10**9


def create(cluster, replicas):
    req = C(
        topics=[
            C.CreatableTopic(
                name=TOPIC,
                num_partitions=-1,
                replication_factor=-1,
                assignments=[C.CreatableReplicaAssignment(partition_index=0, broker_ids=replicas)],
                configs=[C.CreatableTopicConfig(name="min.insync.replicas", value="2")],
            )
        ],
        timeout_ms=30000,
        validate_only=False,
    )
    with Client(cluster.bootstrap) as c:
        r = c.controller().request(req).topics[0]
        assert r.error_code == 0, r
    cluster.wait_for_leader(TOPIC, 0, everywhere=True)
    cluster.wait_for_isr(TOPIC, 0, set(replicas), timeout=30)


def produce(conn, value: bytes, timeout_ms: int):
    b = BatchBuilder()
    b.append(None, None, value)
    req = P(
        transactional_id=None,
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[
            P.TopicProduceData(
                name=TOPIC, partition_data=[P.PartitionProduceData(index=0, records=bytearray(b.build()))]
            )
        ],
    )
    return conn.request(req, timeout=timeout_ms / 1000 + 10).responses[0].partition_responses[0]


def fetch(
    conn,
    topic_id,
    replica_id: int,
    offset: int,
    leader_epoch: int,
    last_fetched_epoch: int = -1,
    version: int | None = None,
):
    req = F(
        replica_id=replica_id,
        replica_state=F.ReplicaState(replica_id=replica_id, replica_epoch=-1),
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic=TOPIC,
                topic_id=topic_id,
                partitions=[
                    F.FetchPartition(
                        partition=0,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=last_fetched_epoch,
                        log_start_offset=0,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    return conn.request(req, version).responses[0].partitions[0]


def test_fetches_as_paused_followers_from_beyond_the_log_end_acknowledge_nothing(make_cluster):
    # the reproduction: both followers paused (SIGSTOP), two fetches with their
    # replica ids from a huge offset got OFFSET_OUT_OF_RANGE, yet moved the high watermark
    # and an acks=all produce was acknowledged that no follower had
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 30000, "replica.lag.time.max.ms": 60000})
    controller = cluster.controller_id()
    leader = next(b for b in (1, 2, 3) if b != controller)  # pausing the followers leaves it be
    followers = [b for b in cluster.ids if b != leader]
    create(cluster, [leader, *followers])
    meta = cluster.describe(TOPIC)
    epoch = meta.partitions[0].leader_epoch
    with BrokerConnection("127.0.0.1", cluster.broker(leader).port, timeout=30) as conn:
        assert produce(conn, b"before", 15000).error_code == 0  # everyone fetching: committed
        for f in followers:
            cluster.pause(f)
        try:
            for f in followers:
                d = fetch(conn, meta.topic_id, f, HUGE, epoch)
                assert d.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, d
            r = produce(conn, b"nobody has it", 1500)
            assert r.error_code == ErrorCode.REQUEST_TIMED_OUT, r
            d = fetch(conn, meta.topic_id, -1, 0, epoch)
            assert d.error_code == 0 and d.high_watermark == 1, d  # not moved past the followers
            # v12+: a last fetched epoch this log ends before the offset is a divergence
            d = fetch(conn, meta.topic_id, followers[0], HUGE, epoch, last_fetched_epoch=epoch)
            assert conn.version_for(ApiKey.FETCH) >= 12
            assert d.error_code == 0 and (d.diverging_epoch.epoch, d.diverging_epoch.end_offset) == (epoch, 2), d
            assert not d.records
            # a broker that is not a replica is refused (there is no broker 7)
            d = fetch(conn, meta.topic_id, 7, 0, epoch)
            assert d.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH, d
            d = fetch(conn, meta.topic_id, 7, 0, -1, version=11)
            assert d.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER, d
            r = produce(conn, b"still nobody", 500)
            assert r.error_code == ErrorCode.REQUEST_TIMED_OUT, r
            assert fetch(conn, meta.topic_id, -1, 0, epoch).high_watermark == 1
        finally:
            for f in followers:
                cluster.resume(f)
        # the followers catch up: the record commits and acks=all goes on
        assert produce(conn, b"after", 30000).error_code == 0
        assert fetch(conn, meta.topic_id, -1, 0, epoch).high_watermark == 4

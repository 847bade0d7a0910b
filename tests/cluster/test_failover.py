"""Failover in a 3-broker cluster on real ZooKeeper: a former leader's log that diverged
is truncated by leader epoch, the controller fails over with a higher epoch and stale
requests are refused, unclean election loses exactly what Kafka says, and a broker whose
ZooKeeper session expires is treated as dead, then rejoins as a follower — and stops leading
as soon as it hears of the expiry, before any controller tells it."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from broker.client import BrokerConnection, Cluster as Client, Consumer
from broker.cluster.store.znodes import ControllerEpochZNode
from broker.native import BatchBuilder
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.leader_and_isr import LeaderAndIsrRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.offset_for_leader_epoch import OffsetForLeaderEpochRequest
from broker.protocol.messages.produce import ProduceRequest
from tests.cluster.test_durability import create


def produce(cluster, broker_id, topic, partition, values, acks=-1) -> int:
    """One produce to a given broker; returns the error code."""
    b = BatchBuilder()
    for v in values:
        b.append(int(time.time() * 1000), None, v)
    host, port = cluster.broker(broker_id).bootstrap.split(":")
    with BrokerConnection(host, int(port), timeout=15) as conn:
        r = conn.request(
            ProduceRequest(
                acks=acks,
                timeout_ms=5000,
                topic_data=[
                    ProduceRequest.TopicProduceData(
                        name=topic,
                        partition_data=[ProduceRequest.PartitionProduceData(index=partition, records=bytes(b.build()))],
                    )
                ],
            )
        )
    return r.responses[0].partition_responses[0].error_code


def read(bootstrap, topic, partition=0, via_deadline=30.0) -> list[bytes]:
    """Every value of a partition up to its high watermark."""
    with Client(bootstrap) as c:
        end = c.list_offsets(topic, [partition], -1)[partition][0]
    out: list[bytes] = []
    with Consumer(bootstrap, max_wait_ms=100, auto_offset_reset="none") as c:
        c.assign(topic, [partition], {partition: 0})
        deadline = time.monotonic() + via_deadline
        while c.positions[(topic, partition)] < end:
            assert time.monotonic() < deadline, f"read {len(out)} of {end} records"
            out.extend(r.value for r in c.poll(0.5))
    return out


def segment_bytes(cluster, broker_id, topic, partition=0) -> bytes:
    d = Path(cluster.broker(broker_id).data_dir) / f"{topic}-{partition}"
    return b"".join(p.read_bytes() for p in sorted(d.glob("*.log")))


def test_a_former_leader_truncates_what_nobody_copied_and_replicas_end_byte_identical(make_cluster):
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 30000})
    controller = cluster.controller_id()
    leader = next(b for b in (1, 2, 3) if b != controller)
    followers = [b for b in (1, 2, 3) if b != leader]
    create(cluster, "div", assignment=[[leader, *followers]] * 3, **{"min.insync.replicas": "1"})
    assert produce(cluster, leader, "div", 0, [b"committed-%d" % i for i in range(20)]) == 0
    cluster.wait_for_isr("div", 0, {1, 2, 3})
    # the followers stop copying; the leader takes acks=1 writes nobody else has
    for b in followers:
        cluster.pause(b)
    # a fetch the followers sent before they stopped waits at the leader up to
    # replica.fetch.wait.max.ms (500 ms) and would carry the next writes to their sockets:
    # let those be answered (empty) first
    time.sleep(1.5)
    assert produce(cluster, leader, "div", 0, [b"lost-%d" % i for i in range(7)], acks=1) == 0
    with Client(cluster.broker(leader).bootstrap) as c:  # invisible: above the high watermark
        assert c.list_offsets("div", [0], -1)[0][0] == 20
    cluster.kill(leader)
    for b in followers:
        cluster.resume(b)
    new_leader = cluster.wait_for_leader("div", 0, not_in={leader})
    assert new_leader in followers
    assert produce(cluster, new_leader, "div", 0, [b"after-%d" % i for i in range(5)]) == 0
    cluster.start(leader)  # it returns as a follower
    cluster.wait_for_isr("div", 0, {1, 2, 3})
    values = read(cluster.bootstrap, "div")
    assert values == [b"committed-%d" % i for i in range(20)] + [b"after-%d" % i for i in range(5)]
    # every replica holds the same bytes: the former leader's own batches are gone
    deadline = time.monotonic() + 20
    while True:
        logs = {b: segment_bytes(cluster, b, "div") for b in cluster.ids}
        if len(set(logs.values())) == 1 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(set(logs.values())) == 1, {b: len(v) for b, v in logs.items()}
    assert b"lost-" not in logs[leader]


def test_controller_failover_bumps_the_epoch_and_old_epochs_are_refused(make_cluster, zookeeper):
    cluster = make_cluster(3)
    create(cluster, "cf", assignment=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
    old = cluster.controller_id()
    old_epoch = _controller_epoch(zookeeper, cluster)
    cluster.kill(old)
    new = cluster.wait_for_controller(not_in={old})
    assert _controller_epoch(zookeeper, cluster) > old_epoch
    # the new controller goes on electing: the third broker's partition loses its leader
    victim = next(b for b in cluster.ids if b not in (old, new))
    p = victim - 1  # the partition it leads (preferred)
    assert cluster.leader_of("cf", p) == victim
    cluster.kill(victim)
    assert cluster.wait_for_leader("cf", p, not_in={victim, old}) == new
    # a request stamped with the old epoch is refused by every live broker
    for b in cluster.live_ids():
        host, port = cluster.broker(b).bootstrap.split(":")
        with BrokerConnection(host, int(port)) as conn:
            L = LeaderAndIsrRequest
            r = conn.request(
                L(
                    controller_id=old,
                    controller_epoch=old_epoch,
                    broker_epoch=-1,
                    type=0,
                    topic_states=[
                        L.LeaderAndIsrTopicState(
                            topic_name="cf",
                            topic_id=uuid.uuid4(),
                            partition_states=[
                                L.LeaderAndIsrPartitionState(
                                    partition_index=0,
                                    controller_epoch=old_epoch,
                                    leader=old,
                                    leader_epoch=999,
                                    isr=[old],
                                    partition_epoch=999,
                                    replicas=[1, 2, 3],
                                )
                            ],
                        )
                    ],
                    live_leaders=[],
                )
            )
            assert r.error_code == ErrorCode.STALE_CONTROLLER_EPOCH
            # a forged controller epoch ahead of ZooKeeper's, or the real controller's epoch
            # for a broker epoch this broker never had, is refused too (Kafka would take the
            # first and from then on ignore its real controller)
            epoch = _controller_epoch(zookeeper, cluster)
            for controller_epoch, broker_epoch, error in (
                (2**31 - 1, 2**62, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                (epoch + 1, -1, ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                (epoch, 2**62, ErrorCode.STALE_BROKER_EPOCH),
            ):
                r = conn.request(
                    L(
                        controller_id=new,
                        controller_epoch=controller_epoch,
                        broker_epoch=broker_epoch,
                        type=0,
                        live_leaders=[],
                        topic_states=[
                            L.LeaderAndIsrTopicState(
                                topic_name="cf",
                                topic_id=uuid.uuid4(),
                                partition_states=[
                                    L.LeaderAndIsrPartitionState(
                                        partition_index=0,
                                        leader=b,
                                        isr=[b],
                                        controller_epoch=controller_epoch,
                                        leader_epoch=999,
                                        partition_epoch=999,
                                        replicas=[1, 2, 3],
                                    )
                                ],
                            )
                        ],
                    )
                )
                assert r.error_code == error, (controller_epoch, broker_epoch)
    assert cluster.leader_of("cf", 0) != old
    # the brokers still follow their real controller: a new topic gets its leaders
    with Client(cluster.bootstrap) as c:
        c.create_topic("cf2", 1, 1)
    cluster.wait_for_leader("cf2", 0, everywhere=True)


def _controller_epoch(zookeeper, cluster) -> int:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=cluster.zk_connect, timeout=10)
    zk.start(10)
    try:
        data, _ = zk.get(ControllerEpochZNode.PATH)
        return ControllerEpochZNode.decode(data)
    finally:
        zk.stop()
        zk.close()


def test_unclean_election_is_off_until_enabled_and_loses_what_kafka_documents(make_cluster):
    cluster = make_cluster(3, config={"replica.lag.time.max.ms": 2000})
    controller = cluster.controller_id()
    stale = next(b for b in (3, 2, 1) if b != controller)  # will be the out-of-sync replica
    isr = [b for b in (1, 2, 3) if b != stale]
    create(cluster, "uc", assignment=[[*isr, stale]] * 3, **{"min.insync.replicas": "1"})
    assert produce(cluster, isr[0], "uc", 0, [b"early-%d" % i for i in range(10)]) == 0
    cluster.wait_for_isr("uc", 0, {1, 2, 3})
    cluster.kill(stale)
    cluster.wait_for_isr("uc", 0, set(isr))  # it left the ISR (dead)
    assert produce(cluster, isr[0], "uc", 0, [b"late-%d" % i for i in range(10)]) == 0  # acks=all, ISR of 2
    for b in reversed(isr):  # every ISR member dies, the leader last
        cluster.kill(b)
    cluster.start(stale)
    # unclean election is off: the partition stays offline, nothing is lost yet
    time.sleep(2)
    with Client(cluster.broker(stale).bootstrap) as c:
        meta = c.refresh(["uc"])["uc"].partitions[0]
        assert meta.leader == -1 and meta.error_code == ErrorCode.LEADER_NOT_AVAILABLE
        c.alter_topic_configs("uc", {"unclean.leader.election.enable": "true"})
    assert cluster.wait_for_leader("uc", 0) == stale
    values = read(cluster.broker(stale).bootstrap, "uc")
    # exactly what the out-of-sync replica lacked is gone: the records acknowledged
    # after it left the ISR
    assert values == [b"early-%d" % i for i in range(10)]
    assert produce(cluster, stale, "uc", 0, [b"new"]) == 0


def test_an_expired_session_is_a_death_and_the_broker_rejoins_as_a_follower(make_cluster):
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 4000, "replica.lag.time.max.ms": 20000})
    controller = cluster.controller_id()
    victim = next(b for b in (1, 2, 3) if b != controller)
    others = [b for b in (1, 2, 3) if b != victim]
    create(cluster, "se", assignment=[[victim, *others]] * 3)
    assert cluster.leader_of("se", 0) == victim
    assert produce(cluster, victim, "se", 0, [b"a"]) == 0
    cluster.pause(victim)
    cluster.wait_for_unregistered([victim], timeout=30)  # the session expired
    new_leader = cluster.wait_for_leader("se", 0, not_in={victim})
    assert produce(cluster, new_leader, "se", 0, [b"b"]) == 0
    cluster.resume(victim)
    cluster.wait_for_brokers([victim], timeout=60)  # registered again (new session)
    cluster.wait_for_isr("se", 0, {1, 2, 3}, timeout=60)
    assert cluster.leader_of("se", 0) == new_leader  # it came back as a follower
    assert read(cluster.bootstrap, "se") == [b"a", b"b"]


def connect(cluster, broker_id) -> BrokerConnection:
    host, port = cluster.broker(broker_id).bootstrap.split(":")
    return BrokerConnection(host, int(port), timeout=20)


def leader_answers(conn: BrokerConnection, topic, partition, asked_epoch) -> dict[str, int]:
    """The error codes a broker gives to requests only a partition's leader answers: a
    consumer's OffsetForLeaderEpoch for `asked_epoch`, a ListOffsets for the end, an
    acks=1 Produce."""
    E, L, P = OffsetForLeaderEpochRequest, ListOffsetsRequest, ProduceRequest
    e = conn.request(
        E(
            replica_id=-1,
            topics=[
                E.OffsetForLeaderTopic(
                    topic=topic,
                    partitions=[
                        E.OffsetForLeaderPartition(
                            partition=partition, current_leader_epoch=-1, leader_epoch=asked_epoch
                        )
                    ],
                )
            ],
        )
    )
    o = conn.request(
        L(
            replica_id=-1,
            isolation_level=0,
            topics=[
                L.ListOffsetsTopic(
                    name=topic, partitions=[L.ListOffsetsPartition(partition_index=partition, timestamp=-1)]
                )
            ],
        )
    )
    b = BatchBuilder()
    b.append(int(time.time() * 1000), None, b"x")
    r = conn.request(
        P(
            acks=1,
            timeout_ms=5000,
            topic_data=[
                P.TopicProduceData(
                    name=topic, partition_data=[P.PartitionProduceData(index=partition, records=bytes(b.build()))]
                )
            ],
        )
    )
    p = e.topics[0].partitions[0]
    return {
        "epoch": p.error_code,
        "end_offset": p.end_offset,
        "list_offsets": o.topics[0].partitions[0].error_code,
        "produce": r.responses[0].partition_responses[0].error_code,
    }


NOT_LEADER = {
    "epoch": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "end_offset": -1,
    "list_offsets": ErrorCode.NOT_LEADER_OR_FOLLOWER,
    "produce": ErrorCode.NOT_LEADER_OR_FOLLOWER,
}


def test_a_broker_whose_session_expired_stops_leading_before_any_controller_says_so(make_cluster):
    """A leader paused past its session: the controller moves the leadership, the new
    leader takes more records, then it and the controller die before the paused broker
    resumes, so no controller can tell it anything. From its resumption on it must not
    answer as leader: not the requests that waited in its socket while it stood still
    (broker/server/stall.py holds them until ZooKeeper has told it that its session
    expired), nor any after. (Answering, it told a consumer that had read further on the
    new leader that the new epoch was unknown, end offset -1, and librdkafka reset that
    consumer to the beginning; an idempotent producer got OUT_OF_ORDER_SEQUENCE from its
    stale producer state, fatal for librdkafka: the fault suite's lost-isr-answer schedule
    saw both. Kafka's ZooKeeper brokers keep leading until a controller speaks.)
    Restarted, the others elect a leader from the ISR and every acknowledged record is
    there."""
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 6000, "replica.lag.time.max.ms": 20000})
    controller = cluster.controller_id()
    victim = next(b for b in (1, 2, 3) if b != controller)
    other = next(b for b in (1, 2, 3) if b not in (victim, controller))
    create(cluster, "zombie", assignment=[[victim, other, controller]] * 3)
    assert produce(cluster, victim, "zombie", 0, [b"a"]) == 0
    waiting = connect(cluster, victim)  # open before the pause: its requests wait in the socket
    try:
        cluster.pause(victim)
        cluster.wait_for_unregistered([victim], timeout=30)  # the session expired
        new_leader = cluster.wait_for_leader("zombie", 0, not_in={victim}, timeout=30)
        assert produce(cluster, new_leader, "zombie", 0, [b"b", b"c"]) == 0  # at leader epoch 1
        for b in (controller, other):
            cluster.kill(b)
        with ThreadPoolExecutor(1) as pool:
            queued = pool.submit(leader_answers, waiting, "zombie", 0, 1)  # sent while it stands still
            time.sleep(0.5)
            cluster.resume(victim)
            assert queued.result(timeout=30) == NOT_LEADER
    finally:
        waiting.close()
    log_path = cluster.broker(victim).log_path
    log_text = log_path.read_text(errors="replace")
    assert "stood still" in log_text and f"broker {victim}: the ZooKeeper session expired" in log_text
    # (the others' sessions outlive this by seconds: no controller has spoken yet)
    with connect(cluster, victim) as conn:
        assert leader_answers(conn, "zombie", 0, 1) == NOT_LEADER
    for b in (controller, other):
        cluster.start(b)
    cluster.wait_for_isr("zombie", 0, {1, 2, 3}, timeout=60)
    assert cluster.leader_of("zombie", 0) != victim
    assert read(cluster.bootstrap, "zombie") == [b"a", b"b", b"c"]

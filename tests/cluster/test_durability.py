"""No acknowledged record lost (Kafka's replication system tests, on kbroker): RF=3,
min.insync.replicas=2, acks=all, confluent-kafka with idempotence, three partitions,
while leaders are killed -9, brokers restarted one by one with SIGTERM (controlled
shutdown), and a follower is paused past replica.lag.time.max.ms. Afterwards everything
is read back: every acknowledged record present, none twice, per-partition order kept."""

from __future__ import annotations

import subprocess
import sys
import time

from broker.client import Cluster as Client
from tests.cluster.helpers import ProducerThread, check_no_loss_no_duplicates, read_values

TOPIC = "orders"
PARTITIONS = 3


def create(cluster, topic=TOPIC, assignment=None, **configs):
    with Client(cluster.bootstrap) as c:
        if assignment is None:
            c.create_topic(topic, PARTITIONS, 3, {"min.insync.replicas": "2", **configs})
        else:
            from broker.protocol.messages.create_topics import CreateTopicsRequest as C

            req = C(
                topics=[
                    C.CreatableTopic(
                        name=topic,
                        num_partitions=-1,
                        replication_factor=-1,
                        assignments=[
                            C.CreatableReplicaAssignment(partition_index=p, broker_ids=r)
                            for p, r in enumerate(assignment)
                        ],
                        configs=[
                            C.CreatableTopicConfig(name=k, value=v)
                            for k, v in {"min.insync.replicas": "2", **configs}.items()
                        ],
                    )
                ],
                timeout_ms=30000,
                validate_only=False,
            )
            r = c.controller().request(req).topics[0]
            assert r.error_code == 0, r
    for p in range(PARTITIONS):
        cluster.wait_for_leader(topic, p, everywhere=True)


def test_leader_kills_lose_no_acknowledged_record(cluster3):
    create(cluster3)
    producer = ProducerThread(cluster3.bootstrap, TOPIC, PARTITIONS).start()
    try:
        producer.wait_for_more(300)
        for round_ in range(5):
            p = round_ % PARTITIONS
            victim = cluster3.leader_of(TOPIC, p)
            cluster3.kill(victim)
            cluster3.wait_for_leader(TOPIC, p, not_in={victim})
            producer.wait_for_more(200)  # the new leader acknowledges
            cluster3.start(victim)
            cluster3.wait_for_isr(TOPIC, p, {1, 2, 3})
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    check_no_loss_no_duplicates(producer.acked, read_values(cluster3.bootstrap, TOPIC, PARTITIONS))


def test_a_rolling_restart_with_controlled_shutdowns_shows_clients_no_error(cluster3):
    create(cluster3)
    producer = ProducerThread(cluster3.bootstrap, TOPIC, PARTITIONS).start()
    try:
        producer.wait_for_more(300)
        for b in cluster3.ids:
            led = [p for p in range(PARTITIONS) if cluster3.leader_of(TOPIC, p) == b]
            assert cluster3.stop(b) == 0  # SIGTERM: controlled shutdown first
            for p in led:  # leadership had moved before it stopped
                assert cluster3.leader_of(TOPIC, p) != b
            text = cluster3.broker(b).log_path.read_text(errors="replace")
            assert "controlled shutdown succeeded" in text
            # the LeaderAndIsr that made it a follower ended its wait (not the 5 s bound)
            assert "were still led here" not in text
            cluster3.start(b)
            for p in range(PARTITIONS):
                cluster3.wait_for_isr(TOPIC, p, {1, 2, 3})
            producer.wait_for_more(200)
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    check_no_loss_no_duplicates(producer.acked, read_values(cluster3.bootstrap, TOPIC, PARTITIONS))


def describe(cluster, *flags) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", "topics", "describe", TOPIC, "-b", cluster.bootstrap, *flags],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr.decode()
    return r.stdout.decode()


def test_a_paused_follower_leaves_the_isr_and_rejoins(make_cluster):
    # sessions outlive the pause: only the ISR lag decides
    cluster = make_cluster(3, config={"zookeeper.session.timeout.ms": 20000, "replica.lag.time.max.ms": 2000})
    controller = cluster.controller_id()
    follower = next(b for b in (3, 2, 1) if b != controller)
    others = [b for b in cluster.ids if b != follower]
    # the paused broker leads nothing
    create(
        cluster,
        assignment=[
            [others[0], others[1], follower],
            [others[1], others[0], follower],
            [others[0], follower, others[1]],
        ],
    )
    producer = ProducerThread(cluster.bootstrap, TOPIC, PARTITIONS).start()
    try:
        producer.wait_for_more(200)
        assert describe(cluster, "--under-replicated-partitions") == ""
        cluster.pause(follower)
        for p in range(PARTITIONS):
            cluster.wait_for_isr(TOPIC, p, set(others), timeout=20)
        shrunk = describe(cluster, "--under-replicated-partitions")
        assert shrunk.count("Partition:") == PARTITIONS, shrunk
        assert all(
            f"Isr: {','.join(map(str, sorted(others)))}" in line
            or f"Isr: {','.join(map(str, sorted(others, reverse=True)))}" in line
            for line in shrunk.strip().splitlines()
        ), shrunk
        producer.wait_for_more(200)  # acks=all goes on with two in sync
        cluster.resume(follower)
        for p in range(PARTITIONS):
            cluster.wait_for_isr(TOPIC, p, {1, 2, 3}, timeout=30)
        assert describe(cluster, "--under-replicated-partitions") == ""
        full = describe(cluster)
        assert full.count(f",{follower}") + full.count(f"{follower},") >= 2 * PARTITIONS
    finally:
        producer.stop()
    assert not producer.errors, producer.errors[:5]
    check_no_loss_no_duplicates(producer.acked, read_values(cluster.bootstrap, TOPIC, PARTITIONS))
    time.sleep(0)

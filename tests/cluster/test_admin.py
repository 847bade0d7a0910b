"""Administering a 3-broker cluster: any broker takes admin requests, the CLI's cluster
views, bad input answered with Kafka's error codes or one line, preferred leaders coming
back by themselves, rack-aware assignment."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from broker.client import Cluster as Client
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from tests.support.broker_proc import BrokerProcess
from tests.support.ports import free_port


def cli(*args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "broker.cli.main", *map(str, args)], capture_output=True, timeout=timeout
    )


def via(cluster, broker_id) -> Client:
    return Client(cluster.broker(broker_id).bootstrap)


def test_any_broker_administers_and_every_broker_sees_it(cluster3):
    controller = cluster3.controller_id()
    other = next(b for b in cluster3.ids if b != controller)
    with via(cluster3, other) as c:
        c.create_topic("adm", 6, 3, {"retention.ms": "123456"})
    for b in cluster3.ids:  # every broker's metadata has it
        cluster3.wait_for_leader("adm", 5, everywhere=True)
        with via(cluster3, b) as c:
            meta = c.refresh(["adm"])["adm"]
            assert len(meta.partitions) == 6
            assert all(len(p.replicas) == 3 and len(set(p.replicas)) == 3 for p in meta.partitions.values())
    # leaders spread evenly: each broker leads two of six
    leaders = [cluster3.leader_of("adm", p) for p in range(6)]
    assert sorted(leaders.count(b) for b in cluster3.ids) == [2, 2, 2]
    with via(cluster3, other) as c:
        c.create_partitions("adm", 8)
        c.alter_topic_configs("adm", {"retention.ms": "654321"})
    for b in cluster3.ids:
        with via(cluster3, b) as c:
            deadline = time.monotonic() + 20
            while True:
                meta = c.refresh(["adm"])["adm"]
                cfg = {e.name: e.value for e in c.describe_configs(2, "adm")}
                if (
                    len(meta.partitions) == 8
                    and all(p.leader >= 0 for p in meta.partitions.values())
                    and cfg["retention.ms"] == "654321"
                ):
                    break
                assert time.monotonic() < deadline, (b, len(meta.partitions), cfg["retention.ms"])
                time.sleep(0.2)
    with via(cluster3, other) as c:
        c.delete_topic("adm")
    for b in cluster3.ids:
        with via(cluster3, b) as c:
            assert c.refresh(["adm"])["adm"].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    for b in cluster3.ids:  # the replicas' logs are gone
        data = cluster3.broker(b).data_dir
        deadline = time.monotonic() + 20
        while any(p.name.startswith("adm-") for p in data.iterdir()):
            assert time.monotonic() < deadline, sorted(p.name for p in data.iterdir())
            time.sleep(0.2)


def test_bad_topic_requests_get_kafka_error_codes(cluster3):
    with via(cluster3, 1) as c:
        for (partitions, rf), code in [
            ((1, 4), ErrorCode.INVALID_REPLICATION_FACTOR),
            ((0, 3), ErrorCode.INVALID_PARTITIONS),
            ((1, 0), ErrorCode.INVALID_REPLICATION_FACTOR),
        ]:
            with pytest.raises(KafkaProtocolError) as e:
                c.create_topic("bad", partitions, rf)
            assert e.value.code == code
        c.create_topic("ok", 1, 3)
        with pytest.raises(KafkaProtocolError) as e:
            c.create_topic("ok", 1, 3)
        assert e.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
        with pytest.raises(KafkaProtocolError) as e:
            c.create_partitions("ok", 1)
        assert e.value.code == ErrorCode.INVALID_PARTITIONS
    cluster3.kill(3)
    cluster3.wait_for_unregistered([3])
    with via(cluster3, 1) as c:  # three replicas, two live brokers
        deadline = time.monotonic() + 20
        while len(c.refresh([]) or c.brokers) and len(c.brokers) != 2:
            assert time.monotonic() < deadline
            time.sleep(0.2)
        with pytest.raises(KafkaProtocolError) as e:
            c.create_topic("three", 1, 3)
        assert e.value.code == ErrorCode.INVALID_REPLICATION_FACTOR
        assert "larger than available brokers: 2" in str(e.value)


def test_cli_describes_the_cluster_and_partitions_in_kafkas_layout(cluster3, zookeeper):
    with via(cluster3, 1) as c:
        c.create_topic("orders", 6, 3)
    for p in range(6):
        cluster3.wait_for_leader("orders", p, everywhere=True)
    r = cli("topics", "describe", "orders", "-b", cluster3.broker(2).bootstrap)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.decode().splitlines()
    assert lines[0].startswith("Topic: orders\tTopicId: ") and "PartitionCount: 6\tReplicationFactor: 3" in lines[0]
    for p, line in enumerate(lines[1:]):
        fields = dict(f.split(": ", 1) for f in line.strip().split("\t"))
        assert fields["Partition"] == str(p)
        assert int(fields["Leader"]) == int(fields["Replicas"].split(",")[0])  # preferred leaders
        assert sorted(fields["Isr"].split(",")) == ["1", "2", "3"]
    r = cli("cluster", "describe", "-b", cluster3.bootstrap, "--zookeeper", cluster3.zk_connect)
    assert r.returncode == 0, r.stderr
    out = r.stdout.decode()
    assert f"Controller: {cluster3.controller_id()}\tControllerEpoch: " in out
    for b in cluster3.ids:
        assert f"Broker: {b}\tEndpoint: PLAINTEXT://{cluster3.broker(b).bootstrap}\tRack: none" in out
    # unavailable and under-replicated views
    victim = cluster3.leader_of("orders", 0)
    cluster3.kill(victim)
    cluster3.wait_for_leader("orders", 0, not_in={victim})
    alive = next(b for b in cluster3.ids if b != victim)
    # the controller elects new leaders for the victim's partitions first, then takes the victim
    # out of every other ISR (two metadata updates, as Kafka's controller): wait for the second
    deadline = time.monotonic() + 30
    while True:
        r = cli("topics", "describe", "orders", "--under-replicated-partitions", "-b", cluster3.broker(alive).bootstrap)
        assert r.returncode == 0, r.stderr
        if r.stdout.decode().count("Partition:") == 6:
            break
        assert time.monotonic() < deadline, f"not every partition under-replicated:\n{r.stdout.decode()}"
        time.sleep(0.2)
    assert (
        cli("topics", "describe", "orders", "--unavailable-partitions", "-b", cluster3.broker(alive).bootstrap).stdout
        == b""
    )


def test_preferred_leaders_come_back_by_themselves_and_on_demand(make_cluster):
    cluster = make_cluster(
        3, config={"leader.imbalance.check.interval.seconds": 2, "leader.imbalance.per.broker.percentage": 0}
    )
    with via(cluster, 1) as c:
        c.create_topic("pl", 3, 3)
    preferred = {p: cluster.replicas_of("pl", p)[0] for p in range(3)}
    victim = preferred[0]
    cluster.stop(victim)  # controlled: leadership moves away
    assert cluster.leader_of("pl", 0) != victim
    cluster.start(victim)
    cluster.wait_for_isr("pl", 0, {1, 2, 3})
    deadline = time.monotonic() + 30  # the controller's imbalance check
    while cluster.leader_of("pl", 0) != victim:
        assert time.monotonic() < deadline, "the preferred leader did not come back"
        time.sleep(0.3)
    # on demand: ElectLeaders through the CLI, here with nothing to do
    r = cli(
        "topics", "elect-leaders", "--election-type", "preferred", "--all-topic-partitions", "-b", cluster.bootstrap
    )
    assert r.returncode == 0, r.stderr


def test_replicas_spread_over_racks(make_cluster):
    cluster = make_cluster(3, per_broker={1: {"broker.rack": "a"}, 2: {"broker.rack": "a"}, 3: {"broker.rack": "b"}})
    with via(cluster, 1) as c:
        c.create_topic("racks", 6, 2)
        meta = c.refresh(["racks"])["racks"]
    rack = {1: "a", 2: "a", 3: "b"}
    for p in meta.partitions.values():
        assert {rack[r] for r in p.replicas} == {"a", "b"}, p.replicas


def test_a_broker_refuses_to_start_on_a_registered_id_or_another_clusters_data(make_cluster, tmp_path, zookeeper):
    # sessions that survive a busy machine: broker 1 must stay registered throughout
    cluster3 = make_cluster(3, config={"zookeeper.session.timeout.ms": 20000})
    cluster3.wait_for_brokers([1, 2, 3])
    # the same broker id as a running broker
    twin = BrokerProcess(tmp_path / "twin", config=dict(cluster3.config), broker_id=1)
    with pytest.raises(RuntimeError) as e:
        twin.start(timeout=30)
    text = str(e.value)
    assert "broker.id 1 is already registered" in text and "refusing to start" in text
    # a data dir of this cluster brought to another cluster (another chroot)
    cluster3.stop(3)
    stranger = BrokerProcess(
        cluster3.broker(3).data_dir,
        broker_id=3,
        config={**cluster3.config, "zookeeper.connect": zookeeper.chroot("other_cluster")},
    )
    with pytest.raises(RuntimeError) as e:
        stranger.start(timeout=30)
    assert "belongs to cluster" in str(e.value) and "refusing to start" in str(e.value)


def test_zookeeper_unreachable_at_start_is_one_line_and_exit_1(tmp_path):
    port = free_port()  # nothing listens there
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "broker.cli.main",
            "serve",
            "--broker-id",
            "1",
            "--data-dir",
            str(tmp_path / "d"),
            "--listen",
            f"127.0.0.1:{free_port()}",
            "--zookeeper",
            f"127.0.0.1:{port}/kb",
            "--set",
            "zookeeper.connection.timeout.ms=2000",
        ],
        capture_output=True,
        timeout=60,
    )
    assert r.returncode == 1
    err = [line for line in r.stderr.decode().splitlines() if line.startswith("broker:")]
    assert len(err) == 1 and f"127.0.0.1:{port}" in err[0], r.stderr.decode()[-2000:]

"""Disk faults under load: one broker's data dir on a small tmpfs of its own
(tests/support/small_fs.py; root), filled up (ENOSPC) while it follows or leads, then
freed; checked as the other schedules are (tests/faults/test_schedules.py). And a failed
disk (JBOD, issue 20): brokers with two log dirs, one of them on a loop-mounted ext4 made
to fail (EIO for everything, as a dying disk): only that dir's partitions go offline.

What this machine allows: tmpfs mounts (root, CAP_SYS_ADMIN), so a real ENOSPC without a
loop device. A read-only log dir is not made here: remounting the tmpfs read-only is
refused while the broker holds segments open for writing (EBUSY), and a read-only bind
mount would not reach the descriptors already open.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from broker.client import BrokerConnection, Cluster as Client
from broker.protocol.errors import ErrorCode
from broker.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from broker.protocol.messages.metadata import MetadataRequest
from tests.faults.test_schedules import create_topic, run_schedule
from tests.support.broker_proc import BrokerProcess
from tests.support.cluster import poll_until
from tests.support.deps import require_module
from tests.support.kafka_tools import kafka_tool
from tests.support.ports import free_port
from tests.support.small_fs import failing_ext4, small_tmpfs

pytestmark = pytest.mark.slow

VICTIM = 2  # the broker whose data dir is on the small file system


def test_follower_disk_full_then_freed(tmp_path, fault_cluster, net):
    with small_tmpfs(tmp_path / "cluster0" / f"broker-{VICTIM}", mib=64) as fs:
        # no blocks allocated ahead on the victim: with them, its segments would take the
        # workload's records for minutes after the disk filled (tests/interop/
        # test_resource_limits.py covers that), and the ISR check below waits 20 s
        c = fault_cluster(3, per_broker={VICTIM: {"log.segment.allocate.ahead.bytes": 0}})

        def fault(n, topic: str) -> None:
            fs.fill()
            poll_until(
                f"broker {VICTIM} out of the ISR (its disk full)",
                lambda: (VICTIM not in (isr := c.isr_of(topic, 0, via=1)), isr, f"ISR {isr}"),
                timeout=20,
            )

        r = run_schedule(
            c,
            net,
            "follower-disk-full",
            1611,
            fault,
            hold_s=2,
            assignment=[[1, VICTIM, 3], [3, VICTIM, 1]],
            heal=fs.free,
        )
        c.close()
    assert r.ok, r.summary()


def test_leader_disk_full_then_freed(tmp_path, fault_cluster, net):
    with small_tmpfs(tmp_path / "cluster0" / f"broker-{VICTIM}", mib=64) as fs:
        c = fault_cluster(3)
        r = run_schedule(
            c,
            net,
            "leader-disk-full",
            1612,
            lambda n, t: fs.fill(),
            hold_s=6,
            assignment=[[VICTIM, 1, 3], [1, VICTIM, 3]],
            heal=fs.free,
        )
        c.close()
    assert r.ok, r.summary()


# ---------------------------------------------------------------- a failed log dir (JBOD)


def two_dirs(cluster_dir: Path, n: int = 3) -> dict[int, dict]:
    """Each broker's log.dirs: its data dir and data2 beside it."""
    return {i: {"log.dirs": f"{cluster_dir}/broker-{i}/data,{cluster_dir}/broker-{i}/data2"} for i in range(1, n + 1)}


def log_dirs(host: str, port: int) -> dict[str, tuple[int, dict[str, int]]]:
    """DescribeLogDirs of one broker: {dir: (error code, {"topic-p": size})}."""
    with BrokerConnection(host, port, client_id="jbod-test", timeout=5) as conn:
        resp = conn.request(DescribeLogDirsRequest(topics=None))
    return {
        r.log_dir: (
            r.error_code,
            {f"{t.name}-{p.partition_index}": p.partition_size for t in r.topics for p in t.partitions},
        )
        for r in resp.results
    }


def offline_replicas(c, topic: str, partition: int, via: int) -> list[int]:
    _, resp = c.metadata([topic], via=via)
    return next(p.offline_replicas for p in resp.topics[0].partitions if p.partition_index == partition)


def test_a_failed_log_dir_moves_its_leaders_and_the_broker_serves_its_other_dir(tmp_path, fault_cluster, net):
    """Issue 20, test 4: broker VICTIM's second log dir fails (EIO for everything there)
    under idempotent acks=all load. Its partitions there get other leaders within seconds,
    the partition in its first dir keeps being led and written there, the partitions it
    only follows there drop it from their ISR (their leaders stay), the broker stays up,
    DescribeLogDirs and Metadata show the failure; then the broker is stopped, the disk
    repaired and the broker started again: its replicas rejoin the ISR, and the checker
    finds 0 acknowledged records lost, none duplicated, replicas byte-identical."""
    seed = 1613
    cluster_dir = tmp_path / "cluster0"
    with failing_ext4(cluster_dir / f"broker-{VICTIM}" / "data2", mib=64) as fs:
        c = fault_cluster(3, per_broker=two_dirs(cluster_dir))
        victim = c.broker(VICTIM)
        healthy_dir = str(victim.data_dir)
        failing_dir = str(fs.path)

        def fault(n, topic: str) -> None:
            # a new log goes to the dir with the fewest: partition 0 to the first, 1 to data2
            on_failing = [p for p in range(2) if (fs.path / f"{topic}-{p}").is_dir()]
            on_healthy = [p for p in range(2) if (victim.data_dir / f"{topic}-{p}").is_dir()]
            assert (on_failing, on_healthy) == ([1], [0]), (on_failing, on_healthy)
            # and partitions it only follows, in both dirs
            followed = f"{topic}-followed"
            create_topic(c, followed, [[1, VICTIM, 3], [3, VICTIM, 1]] * 2)
            n.wait_healthy({followed: 4})
            followed_failing = [p for p in range(4) if (fs.path / f"{followed}-{p}").is_dir()]
            assert followed_failing and len(followed_failing) < 4, followed_failing
            before = log_dirs(victim.host, victim.port)[healthy_dir][1][f"{topic}-0"]
            t0 = time.monotonic()
            fs.fail()
            poll_until(
                f"{topic}-1 led elsewhere, broker {VICTIM} out of its ISR",
                lambda: (
                    (p := c.partition(topic, 1, via=1)) is not None
                    and p.leader not in (-1, VICTIM)
                    and VICTIM not in p.isr,
                    None,
                    f"{p and (p.leader, p.isr)}",
                ),
                timeout=20,
            )
            moved = time.monotonic() - t0
            print(f"{topic}-1 moved off the failed dir in {moved:.1f} s")
            for p in range(4):
                leader = 1 if p % 2 == 0 else 3
                gone = p in followed_failing
                poll_until(
                    f"{followed}-{p}: led by {leader}, broker {VICTIM} {'out of' if gone else 'in'} its ISR",
                    lambda p=p, leader=leader, gone=gone: (
                        (x := c.partition(followed, p, via=1)) is not None
                        and x.leader == leader
                        and (VICTIM in x.isr) != gone,
                        None,
                        f"{x and (x.leader, x.isr)}",
                    ),
                    timeout=20,
                )
            assert victim.proc.poll() is None, "the broker must stay up"
            dirs = log_dirs(victim.host, victim.port)
            assert dirs[failing_dir] == (ErrorCode.KAFKA_STORAGE_ERROR, {})
            assert dirs[healthy_dir][0] == ErrorCode.NONE and f"{topic}-0" in dirs[healthy_dir][1]
            assert c.leader_of(topic, 0, via=1) == VICTIM  # its other dir goes on
            assert VICTIM in offline_replicas(c, topic, 1, via=1)
            assert VICTIM not in offline_replicas(c, topic, 0, via=1)
            poll_until(
                f"{topic}-0 written in {healthy_dir} after the failure",
                lambda: (
                    (size := log_dirs(victim.host, victim.port)[healthy_dir][1][f"{topic}-0"]) > before,
                    None,
                    f"size {size}, {before} before",
                ),
                timeout=20,
            )

        def heal() -> None:
            if fs.failed:  # the operator replaces the disk: stop, repair, start
                c.stop(VICTIM)
                fs.repair()
                c.start(VICTIM)

        r = run_schedule(
            c, net, "failed-log-dir", seed, fault, hold_s=2, assignment=[[VICTIM, 1, 3], [VICTIM, 3, 1]], heal=heal
        )
        assert log_dirs(victim.host, victim.port)[failing_dir][0] == ErrorCode.NONE
        c.close()
    assert r.ok, r.summary()


def test_a_broker_alone_keeps_serving_its_other_dir_when_one_fails(tmp_path):
    """No ZooKeeper: broker 0 alone with two log dirs, the second fails. The first dir's
    partition keeps taking records, the failed one's is offline (no leader, KAFKA_STORAGE_
    ERROR in DescribeLogDirs, the offline-dir gauge at 1), the broker stays up; restarted
    with the disk still failed, it starts with that dir offline; restarted with the disk
    repaired, the partition is led and written again."""
    ck = require_module("confluent_kafka")
    print("\nseed: none (no random choice)")
    metrics = free_port()
    data = tmp_path / "data"
    with failing_ext4(tmp_path / "data2", mib=32) as fs:
        config = {"log.dirs": f"{data},{fs.path}", "metrics.listener": f"127.0.0.1:{metrics}"}
        with BrokerProcess(data, config=config) as b:
            with Client(b.bootstrap) as client:
                client.create_topic("jbod", 2, 1)
            assert (data / "jbod-0").is_dir() and (fs.path / "jbod-1").is_dir()
            delivered: dict[int, list] = {0: [], 1: []}
            failed: dict[int, list] = {0: [], 1: []}

            def report(err, msg):
                (failed if err is not None else delivered)[msg.partition()].append(msg.value())

            def produce(tag: str) -> None:
                p = ck.Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "message.timeout.ms": 5000})
                for i in range(20):
                    for part in (0, 1):
                        p.produce("jbod", f"{tag}-{i}".encode(), partition=part, on_delivery=report)
                assert p.flush(20) == 0

            produce("before")
            assert len(delivered[0]) == len(delivered[1]) == 20
            fs.fail()
            produce("after")
            assert len(delivered[0]) == 40 and failed[0] == []  # the first dir goes on
            assert len(failed[1]) == 20  # the failed one takes nothing
            assert b.proc.poll() is None
            dirs = log_dirs("127.0.0.1", b.port)
            assert dirs[str(fs.path)] == (ErrorCode.KAFKA_STORAGE_ERROR, {})
            assert "jbod-0" in dirs[str(data)][1]
            with BrokerConnection("127.0.0.1", b.port, timeout=5) as conn:
                part1 = next(
                    x
                    for x in conn.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="jbod")]))
                    .topics[0]
                    .partitions
                    if x.partition_index == 1
                )
            assert part1.leader_id == -1 and part1.offline_replicas == [0]
            text = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=10).read().decode()
            assert "kafka_log_offline_log_directory_count 1.0" in text.splitlines()
            # the status page and its JSON show the failed dir, with the partition it held
            status = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{metrics}/status.json", timeout=10).read())
            by_path = {d["path"]: d for d in status["log_dirs"]}
            assert by_path[str(fs.path)]["status"] == "offline" and by_path[str(fs.path)]["partitions"] == ["jbod-1"]
            assert by_path[str(fs.path)]["error"], by_path
            assert by_path[str(data)] == {"path": str(data), "status": "online", "error": "", "partitions": 1}
            jbod = next(t for t in status["topics"] if t["name"] == "jbod")["partitions"]
            assert jbod[1]["offline"] and jbod[1]["offline_replicas"] == [0] and not jbod[0]["offline"]
            page = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/", timeout=10).read().decode()
            assert f"<td>{fs.path}</td><td class='offline'>offline (" in page and "1 offline: jbod-1" in page
            # `broker log-dirs describe` and Kafka's kafka-log-dirs say the same of the failed dir
            mine = subprocess.run(
                [sys.executable, "-m", "broker.cli.main", "log-dirs", "describe", "--bootstrap-server", b.bootstrap],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert mine.returncode == 0, mine.stderr
            theirs = kafka_tool("kafka-log-dirs", "--bootstrap-server", b.bootstrap, "--describe").lines

            def failed_dir(doc: str) -> dict:
                dirs = {d["logDir"]: d for d in json.loads(doc)["brokers"][0]["logDirs"]}
                return dirs[str(fs.path)]

            assert (
                failed_dir(mine.stdout.splitlines()[2])
                == failed_dir(theirs[2])
                == {
                    "logDir": str(fs.path),
                    "error": "org.apache.kafka.common.errors.KafkaStorageException",
                    "partitions": [],
                }
            ), (mine.stdout, theirs)
            # restarted before the repair: the failed dir stays offline, the other one loads
            b.stop()
            b.start()
            dirs = log_dirs("127.0.0.1", b.port)
            assert dirs[str(fs.path)] == (ErrorCode.KAFKA_STORAGE_ERROR, {}) and "jbod-0" in dirs[str(data)][1]
            failed[1].clear()
            produce("broken")
            assert len(delivered[0]) == 60 and failed[0] == [] and len(failed[1]) == 20
            b.stop()
            fs.repair()
            b.start()
            dirs = log_dirs("127.0.0.1", b.port)
            assert dirs[str(fs.path)][0] == ErrorCode.NONE and "jbod-1" in dirs[str(fs.path)][1]
            failed[1].clear()
            produce("repaired")
            assert failed == {0: [], 1: []} and len(delivered[0]) == 80 and len(delivered[1]) == 40

"""Share-group delivery (KIP-932) with real share consumers: Apache Kafka's
KafkaShareConsumer (tests/jvm, ShareConsumer.java: explicit acknowledgement) against a
real broker (in this process, tests/unit/share/inprocess.py, so that the test sees its
share partitions; the share-partition state read back from __share_group_state).

Issue 36's test 3 with the Java client, five consumers of one share group on a one-partition topic: one takes
the first records and is stopped (SIGSTOP: its connection stays open) — they come again,
delivery count 2, once its acquisition lock expired; one takes the next records and is
killed -9 — they come again, delivery count 2 (its share session ended with its
connection, which releases them, as Kafka 4.4 does); three more work through the rest: a
record one of them releases comes again with count 2, one released on every delivery is
archived after the delivery count limit (3 deliveries, never a fourth). All five receive
records; every record but the archived one is accepted exactly once — from the consumers'
commitSync results, and against the share-partition state the broker wrote (its start
offset past the last record, nothing in flight). franz-go's share consumer (kgo.ShareGroup,
`goclients franz-share-ack`, tests/go/share_ack.go): two of them read a partition between
them, a released record comes again with count 2, every record is accepted once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections import Counter, defaultdict

import pytest

from broker.client.cluster import Cluster
from broker.client.producer import Producer
from broker.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from tests.groups.helpers import ROOT, wait_until
from tests.support.deps import missing
from tests.support.kafka_tools import java_command, require_kafka_libs
from tests.unit.share.inprocess import Running, start_broker

pytestmark = pytest.mark.interop

# long enough for the second consumer's JVM to start and fetch while the first's lock holds
# (on a loaded machine), below the session timeout (which would release them too)
LOCK_MS = 20000
LIMIT = 3
N = 120
HELD = 10  # the first records, produced while only the holder consumes


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    r = start_broker(
        tmp_path_factory.mktemp("share-clients"),
        {
            "group.share.record.lock.duration.ms": str(LOCK_MS),
            "group.share.min.record.lock.duration.ms": str(LOCK_MS),
            "group.share.delivery.count.limit": str(LIMIT),
            "group.share.heartbeat.interval.ms": "500",
            "group.share.min.heartbeat.interval.ms": "500",
            "group.share.session.timeout.ms": "40000",
            "group.share.min.session.timeout.ms": "40000",
        },
    )
    try:
        yield r
    finally:
        r.stop()


def _lines(path) -> list[dict]:
    """The JSON lines of a consumer's output (Java's {"check": ...}, Go's {"step": ...})."""
    out = []
    for line in path.read_text().splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


def _members(running: Running, group: str) -> set[str]:
    """The client ids of the group's members that have the partition assigned."""
    conn = running.conn()
    try:
        g = conn.request(ShareGroupDescribeRequest(group_ids=[group])).groups[0]
        return set() if g.error_code else {m.client_id for m in g.members if m.assignment.topic_partitions}
    finally:
        conn.close()


def test_java_share_consumers_share_one_partition(running, tmp_path):
    require_kafka_libs()
    topic, group = "share-java", "share-java-group"
    cluster = Cluster(running.bootstrap)
    cluster.create_topic(topic, 1, 1)
    tid = cluster.topic(topic, wait_s=10).topic_id
    procs: dict[str, subprocess.Popen] = {}
    names = {"stopped": "hold", "killed": "hold", "w0": "work", "w1": "work", "w2": "work"}
    values = [
        f"h-{i}" if i < 2 * HELD else f"poison-{i}" if i == 50 else f"rel-{i}" if i % 10 == 3 else f"r-{i}"
        for i in range(N)
    ]
    mgr = running.broker.share_partitions

    def start(name: str) -> None:
        procs[name] = subprocess.Popen(
            java_command("io.kbroker.jvmtests.ShareConsumer", running.bootstrap, topic, group, name, names[name]),
            stdout=open(tmp_path / f"{name}.out", "w"),
            stderr=open(tmp_path / f"{name}.err", "w"),
        )

    def produce(first: int, last: int) -> None:
        producer = Producer(cluster, linger_ms=0)
        for i in range(first, last, 5):  # batches of 5, one poll's worth each
            for v in values[i : min(i + 5, last)]:
                producer.send(topic, v.encode(), partition=0)
            producer.flush()
            time.sleep(0.05)
        producer.close()

    def holding(name: str) -> bool:
        return any(x["check"] == "holding" for x in _lines(tmp_path / f"{name}.out"))

    try:
        # one consumer alone takes the first records and stops (SIGSTOP: its connection
        # stays, its locks expire); a second takes the next ones and is killed -9
        start("stopped")
        wait_until(lambda: "stopped" in _members(running, group), 90, "the first share consumer assigned the partition")
        # the share partition starts at the latest offset: produce once it is initialized
        wait_until(lambda: (group, tid, 0) in mgr.entries, 60, "the share partition initialized by a fetch")
        produce(0, HELD)
        wait_until(lambda: holding("stopped"), 60, "the first consumer to receive records")
        os.kill(procs["stopped"].pid, signal.SIGSTOP)
        start("killed")
        produce(HELD, 2 * HELD)
        wait_until(lambda: holding("killed"), 60, "the second consumer to receive records")
        os.kill(procs["killed"].pid, signal.SIGKILL)  # with its records unacknowledged
        for name in ("w0", "w1", "w2"):
            start(name)
        wait_until(
            lambda: {"w0", "w1", "w2"} <= _members(running, group),
            90,
            "three more share consumers assigned the partition",
        )
        produce(2 * HELD, N)
        wait_until(
            lambda: running.state(group, tid).start_offset == N,
            120,
            "every record acknowledged or archived",
            interval=0.5,
        )
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
            p.wait(10)
        cluster.close()
    out = {name: _lines(tmp_path / f"{name}.out") for name in names}
    errs = {name: (tmp_path / f"{name}.err").read_text()[-2000:] for name in names}
    deliveries: dict[int, list[int]] = defaultdict(list)
    for name, lines in out.items():
        got = [x for x in lines if x["check"] == "record"]
        assert got, f"{name} received nothing: {errs[name]}"
        for x in got:
            assert x["value"] == values[x["offset"]]
            deliveries[x["offset"]].append(x["delivery"])
    accepted = Counter(
        o
        for lines in out.values()
        for x in lines
        if x["check"] == "acked" and x["type"] == "ACCEPT"
        for o in x["offsets"]
    )
    assert not [x for lines in out.values() for x in lines if x["check"] == "ack-failed"]
    assert sorted(accepted) == [i for i in range(N) if i != 50]
    assert set(accepted.values()) == {1}, "a record accepted twice"
    records = [x for lines in out.values() for x in lines if x["check"] == "record"]
    # the stopped consumer's records: delivered again with count 2 once their lock expired
    stopped = {x["offset"]: x["t"] for x in out["stopped"] if x["check"] == "record"}
    assert stopped and all(o < HELD for o in stopped)  # (its client may have taken fewer)
    for o, t in stopped.items():
        assert sorted(deliveries[o]) == [1, 2], (o, deliveries[o])
        again = next(x["t"] for x in records if x["offset"] == o and x["delivery"] == 2)
        assert again - t >= LOCK_MS - 1000, (o, again - t)
    # the killed consumer's records: delivered again with count 2 (its session ended with
    # its connection)
    killed = [x["offset"] for x in out["killed"] if x["check"] == "record"]
    assert killed and all(o < 2 * HELD and o not in stopped for o in killed)
    for o in killed:
        assert sorted(deliveries[o]) == [1, 2], (o, deliveries[o])
    # released once by a consumer: delivered again with count 2
    for i in range(23, N, 10):
        assert sorted(deliveries[i]) == [1, 2], (i, deliveries[i])
    # released on every delivery: archived after the limit, never delivered a fourth time
    assert sorted(deliveries[50]) == list(range(1, LIMIT + 1)), deliveries[50]
    st = running.state(group, tid)
    assert st.start_offset == N and st.batches == []


GO_BIN = ROOT / "tests" / "go" / "bin" / "goclients"


def test_franz_go_share_consumers_share_one_partition(running, tmp_path):
    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    topic, group, n = "share-franz", "share-franz-group", 100
    cluster = Cluster(running.bootstrap)
    cluster.create_topic(topic, 1, 1)
    tid = cluster.topic(topic, wait_s=10).topic_id
    names = ["franz-0", "franz-1"]
    procs = []
    values = [f"rel-{i}" if i % 10 == 3 else f"r-{i}" for i in range(n)]
    try:
        for name in names:
            procs.append(
                subprocess.Popen(
                    [str(GO_BIN), "franz-share-ack", running.bootstrap, topic, group, name],
                    stdout=open(tmp_path / f"{name}.out", "w"),
                    stderr=open(tmp_path / f"{name}.err", "w"),
                )
            )
        wait_until(
            lambda: set(names) <= _members(running, group), 90, "two franz-go share consumers assigned the partition"
        )
        mgr = running.broker.share_partitions
        wait_until(lambda: (group, tid, 0) in mgr.entries, 60, "the share partition initialized by a fetch")
        producer = Producer(cluster, linger_ms=0)
        for i in range(0, n, 5):
            for v in values[i : i + 5]:
                producer.send(topic, v.encode(), partition=0)
            producer.flush()
            time.sleep(0.05)
        producer.close()
        wait_until(lambda: running.state(group, tid).start_offset == n, 60, "every record acknowledged", interval=0.5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(10)
        cluster.close()
    out = {name: _lines(tmp_path / f"{name}.out") for name in names}
    deliveries: dict[int, list[int]] = defaultdict(list)
    for name, lines in out.items():
        got = [x for x in lines if x.get("step") == "record"]
        assert got, f"{name} received nothing: {(tmp_path / f'{name}.err').read_text()[-2000:]}"
        assert not [x for x in lines if x.get("step") in ("error", "commit-failed")], lines
        for x in got:
            assert x["value"] == values[x["offset"]]
            deliveries[x["offset"]].append(x["delivery"])
    accepted = Counter(
        o for lines in out.values() for x in lines if x.get("step") == "committed" for o in x["accepted"]
    )
    assert sorted(accepted) == list(range(n)) and set(accepted.values()) == {1}
    for i in range(3, n, 10):
        assert sorted(deliveries[i]) == [1, 2], (i, deliveries[i])
    st = running.state(group, tid)
    assert st.start_offset == n and st.batches == []


def test_java_share_consumer_reads_past_transaction_markers(running, tmp_path):
    """Transactions on the topic: the markers (control batches) are in the acquired runs as
    Kafka's broker hands them out, and the Java share consumer acknowledges them as gaps —
    the share partition's start moves past every one of them; with
    share.isolation.level=read_committed an aborted transaction's records are never
    delivered."""
    import confluent_kafka as ck

    from broker.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest as I

    require_kafka_libs()
    topic, group = "share-java-txn", "share-java-txn-group"
    cluster = Cluster(running.bootstrap)
    cluster.create_topic(topic, 1, 1)
    tid = cluster.topic(topic, wait_s=10).topic_id
    conn = running.conn()
    r = conn.request(
        I(
            resources=[
                I.AlterConfigsResource(
                    resource_type=32,
                    resource_name=group,
                    configs=[
                        I.AlterableConfig(name="share.isolation.level", config_operation=0, value="read_committed"),
                        I.AlterableConfig(name="share.auto.offset.reset", config_operation=0, value="earliest"),
                    ],
                )
            ],
            validate_only=False,
        )
    ).responses[0]
    conn.close()
    assert r.error_code == 0, r.error_message
    p = ck.Producer({"bootstrap.servers": running.bootstrap, "transactional.id": "share-java-txn", "linger.ms": 0})
    p.init_transactions(30)
    expected = []
    for t in range(6):
        p.begin_transaction()
        values = [f"t{t}-{i}" for i in range(5)]
        for v in values:
            p.produce(topic, v.encode(), partition=0)
        p.flush(30)
        if t % 3 == 1:
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            expected += values
    proc = subprocess.Popen(
        java_command("io.kbroker.jvmtests.ShareConsumer", running.bootstrap, topic, group, "txn", "work"),
        stdout=open(tmp_path / "txn.out", "w"),
        stderr=open(tmp_path / "txn.err", "w"),
    )
    try:
        log_end = running.broker.replicas.leader_partition(topic, 0).log.log_end_offset
        wait_until(
            lambda: (
                (group, tid, 0) in running.broker.share_partitions.entries
                and running.state(group, tid).start_offset == log_end
            ),
            90,
            "the share partition's start past every record and marker",
            interval=0.5,
        )
    finally:
        proc.kill()
        proc.wait(10)
        cluster.close()
    got = [x["value"] for x in _lines(tmp_path / "txn.out") if x.get("check") == "record"]
    assert sorted(got) == sorted(expected), got

"""A transactional producer whose commit's markers are slow is not fenced (issue 34,
item 1; Kafka's KAFKA-18464), on three real brokers with a real client.

franz-go (tests/go, `goclients franz-txn`) at transaction.version 2 commits a
transaction; its EndTxn v5 is answered at once (epoch e -> e+1) while the COMMIT marker
waits: the topic has replication factor 3 and min.insync.replicas 2, the producer writes
with acks=all, and one follower of the partition is paused (SIGSTOP) before the commit,
so the marker's acks=-1 write waits for it (replica.lag.time.max.ms keeps it in the ISR
for longer than the pause). The id's __transaction_state partition has no replica on the
paused broker (its replication factor is 2 here), so the commit itself is answered at
once. franz-go then runs a transaction whose only produce fails, and ends it — as it does
whenever no produce of a transaction succeeded — with an EndTxn abort at epoch e+1, during
the marker phase. The coordinator must answer it CONCURRENT_TRANSACTIONS (franz-go
retries) until the markers are written, then abort; before the fix it answered
PRODUCER_FENCED after its 1 s wait, which is fatal for the producer.

Bounded: the follower is resumed after PAUSE_S (and in a finally), the client has a
deadline, every wait has a timeout. Nothing random."""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time

import pytest

from broker.client import BrokerConnection, Cluster as Client
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.txn.coordinator import CONCURRENT_WAIT_S, TXN_TOPIC
from broker.txn.records import partition_for
from tests.apache_kafka.test_go_node_clients import GO_BIN, ROOT
from tests.support.cluster import Cluster
from tests.support.deps import missing
from tests.support.zookeeper import available
from tests.txn.test_single_broker import read

pytestmark = pytest.mark.interop

PAUSE_S = 4.0  # how long the follower is stopped: the marker phase lasts about that
assert PAUSE_S > CONCURRENT_WAIT_S + 2
CONFIG = {
    "zookeeper.session.timeout.ms": 12000,  # the paused broker keeps its session
    "replica.lag.time.max.ms": 20000,  # ... and its place in the ISR: the markers wait for it
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.replication.factor": 3,
    "transaction.state.log.num.partitions": 6,
    "transaction.state.log.replication.factor": 2,  # some of its partitions have no replica on the paused one
    "transaction.state.log.min.isr": 2,
}
TOPIC = "slow-markers"
RECORDS = 10  # per committed transaction (txnRecords in tests/go/txn.go)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    what = available()
    if what is not None:
        missing(what, "apt-get install zookeeper default-jre-headless, or run 'make test' as root")
    if not GO_BIN.exists():
        missing(f"the Go client checks ({GO_BIN.relative_to(ROOT)})", "run 'make testdeps' (needs go)")
    c = Cluster(tmp_path_factory.mktemp("slow-markers"), n=3, config=CONFIG)
    with c:
        yield c


def _txn_id_away_from(c: Cluster, broker_id: int) -> str:
    """A transactional id whose __transaction_state partition has no replica on broker_id
    (FindCoordinator creates the topic first)."""
    b = c.broker(next(i for i in c.ids if i != broker_id))
    with BrokerConnection(b.host, b.port) as conn:
        deadline = time.monotonic() + 30
        while conn.request(FindCoordinatorRequest(key="probe", key_type=1), version=3).error_code:
            assert time.monotonic() < deadline, "no transaction coordinator"
            time.sleep(0.2)
    deadline = time.monotonic() + 30
    while True:
        meta = c.describe(TXN_TOPIC)
        parts = meta.partitions
        if parts and all(p.leader >= 0 and len(p.isr) == 2 for p in parts.values()):
            break
        assert time.monotonic() < deadline, f"{TXN_TOPIC}: {meta.error_code}"
        time.sleep(0.2)
    for i in range(1000):
        txn_id = f"slow-markers-{i}"
        if broker_id not in parts[partition_for(txn_id, len(parts))].replicas:
            return txn_id
    raise AssertionError(f"every {TXN_TOPIC} partition has a replica on broker {broker_id}")


class Steps:
    """The client's JSON lines, by step, as they come."""

    def __init__(self, proc: subprocess.Popen):
        self.lines: queue.Queue[dict] = queue.Queue()
        self.proc = proc
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                self.lines.put(json.loads(line))

    def expect(self, step: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                facts = self.lines.get(timeout=0.2)
            except queue.Empty:
                exited = self.proc.poll() is not None and not self.reader.is_alive() and self.lines.empty()
                if exited or time.monotonic() > deadline:
                    raise AssertionError(
                        f"no {step!r} from the client in {timeout} s (exit {self.proc.poll()})"
                    ) from None
                continue
            if facts["step"] == step:
                return facts
            assert facts.get("err", "") == "", facts


def test_franz_go_aborts_right_after_a_commit_whose_markers_wait_for_a_paused_follower(cluster, tmp_path):
    c = cluster
    with Client(c.bootstrap) as admin:
        admin.create_topic(TOPIC, 1, 3)
    c.wait_for_isr(TOPIC, 0, {1, 2, 3})
    leader = c.wait_for_leader(TOPIC, 0)
    controller = c.controller_id()
    paused = next(i for i in c.ids if i not in (leader, controller))  # a follower of the partition
    txn_id = _txn_id_away_from(c, paused)
    stderr = open(tmp_path / "goclients.stderr", "w+")
    proc = subprocess.Popen(
        [str(GO_BIN), "franz-txn", c.bootstrap, TOPIC, txn_id],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
        text=True,
        cwd=ROOT,
    )
    try:
        steps = Steps(proc)
        init = steps.expect("initialized", 60)
        steps.expect("produced", 60)
        c.wait_for_isr(TOPIC, 0, {1, 2, 3})
        try:
            c.pause(paused)
            paused_at = time.monotonic()
            assert proc.stdin is not None
            proc.stdin.write("go\n")
            proc.stdin.flush()
            committed = steps.expect("committed", 30)
            # the commit is answered before the markers are written, while the follower is stopped
            assert committed["err"] == "" and time.monotonic() - paused_at < PAUSE_S, committed
            time.sleep(max(0.0, paused_at + PAUSE_S - time.monotonic()))
        finally:
            c.resume(paused)
        abort = steps.expect("empty_abort", 60)
        # not fenced: franz-go's EndTxn abort was told to retry while the markers were out
        assert abort["err"] == "" and abort["id_err"] == "", abort
        after = steps.expect("committed_after", 60)
        assert proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
        stderr.seek(0)
        print(f"goclients stderr:\n{stderr.read()[-4000:]}")
        stderr.close()
    print(f"paused broker {paused}; commit {committed}; abort {abort}; next commit {after}")
    # franz-go ended the failed transaction with an abort, which the coordinator told to
    # retry (CONCURRENT_TRANSACTIONS) while the commit's markers were out, and then served
    assert (committed["empty_aborts"], abort["empty_aborts"]) == (0, 1) and "partition" in abort["produce_err"], abort
    assert abort["concurrent_retries"] >= 1, abort
    # one producer id throughout, its epoch bumped once per end (no fence, no re-init)
    pid, e0 = init["producer_id"], init["epoch"]
    assert [(s["producer_id"], s["epoch"]) for s in (committed, abort, after)] == [
        (pid, e0 + 1),
        (pid, e0 + 2),
        (pid, e0 + 3),
    ]
    got = read(c.bootstrap, TOPIC, 1, "read_committed")
    assert got == [f"{name}-{i}".encode() for name in ("first", "third") for i in range(RECORDS)]

"""Test 2 of issue 17: Kafka's own TransactionalMessageCopier (the Java client's
transactions, as Kafka's transactions system test drives it) on the 3-broker cluster,
copying with random aborts while the broker leading the transactional id's
__transaction_state partition is killed -9, then during a rolling restart; the output
read with read_committed holds every input record exactly once. At the brokers' default
transaction.version 2 the copier (kafka-clients 4.3) speaks KIP-890 part 2 (Produce v12,
TxnOffsetCommit v5 without AddOffsetsToTxn, an epoch bump per EndTxn: each producer's
markers on disk go up in epoch); with transaction.version 1 it speaks what it did before
(markers of many transactions share an epoch)."""

from __future__ import annotations

import json
import os
import random
import time
from collections import Counter

import pytest

from broker.client import Cluster as Client
from broker.native import iter_batches
from broker.txn.records import partition_for
from tests.support.deps import require_module
from tests.support.kafka_tools import require_kafka_libs, start_kafka_tool
from tests.txn.test_single_broker import read

RECORDS = 6000
INPUT_PARTITIONS = 2
TXN_PARTITIONS = 5
CONFIG = {
    "transaction.state.log.num.partitions": TXN_PARTITIONS,
    "transaction.state.log.replication.factor": 3,
    "transaction.state.log.min.isr": 2,
    "min.insync.replicas": 2,
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
}


def _remaining(tool) -> int | None:
    """The copier's last reported count of messages left (its JSON status lines)."""
    last = None
    for line in tool.output().splitlines():
        if line.startswith("{"):
            try:
                last = json.loads(line)["remaining"]
            except (ValueError, KeyError):
                pass
    return last


@pytest.mark.parametrize("transaction_version", [2, 1], ids=["tv2", "tv1"])
def test_java_copier_through_a_coordinator_kill_and_a_rolling_restart(make_cluster, tmp_path, transaction_version):
    ck = require_module("confluent_kafka")
    require_kafka_libs()
    seed = int(os.environ.get("TXN_SEED", random.randrange(1 << 30)))
    print(f"seed {seed} (TXN_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    c = make_cluster(3, config={**CONFIG, "transaction.version": transaction_version})
    with Client(c.bootstrap) as admin:
        admin.create_topic("in", INPUT_PARTITIONS, 3)
        admin.create_topic("out", INPUT_PARTITIONS, 3)
    p = ck.Producer({"bootstrap.servers": c.bootstrap, "enable.idempotence": True, "linger.ms": 20})
    for i in range(RECORDS):
        p.produce("in", b"%06d" % i, partition=i % INPUT_PARTITIONS)
    assert p.flush(60) == 0
    copiers = {}
    for part in range(INPUT_PARTITIONS):
        txn_id = f"copier-{part}"
        copiers[txn_id] = start_kafka_tool(
            "transactional-message-copier",
            "--broker-list",
            c.bootstrap,
            "--transactional-id",
            txn_id,
            "--consumer-group",
            "copiers",
            "--input-topic",
            "in",
            "--input-partition",
            str(part),
            "--output-topic",
            "out",
            "--max-messages",
            str(RECORDS // INPUT_PARTITIONS),
            "--transaction-size",
            "100",
            "--transaction-timeout",
            "10000",
            "--enable-random-aborts",
            "--use-group-metadata",
            out_dir=tmp_path,
            label=txn_id,
        )

    def progress(what: str, below: int, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while True:
            left = [_remaining(t) for t in copiers.values()]
            if all(x is not None and x <= below for x in left):
                return
            for name, t in copiers.items():
                assert t.proc.poll() is None or t.proc.returncode == 0, (
                    f"{name} exited {t.proc.returncode}: {t.stderr()[-3000:]}"
                )
            assert time.monotonic() < deadline, f"{what}: the copiers still have {left} left"
            time.sleep(0.3)

    # the broker leading copier-0's __transaction_state partition dies mid-run
    progress("warming up", RECORDS // INPUT_PARTITIONS - 300)
    coordinator = c.wait_for_leader("__transaction_state", partition_for("copier-0", TXN_PARTITIONS))
    time.sleep(rng.uniform(0, 1))
    c.kill(coordinator)
    c.wait_for_leader("__transaction_state", partition_for("copier-0", TXN_PARTITIONS), not_in={coordinator})
    progress("after the kill", RECORDS // INPUT_PARTITIONS * 2 // 3)
    c.start(coordinator)
    # a rolling restart (clean shutdowns, one broker at a time)
    for b in c.ids:
        c.restart(b)
        c.wait_for_isr("out", 0, set(c.ids), timeout=60)
    progress("finishing", 0, timeout=180)
    for name, t in copiers.items():
        code, _ = t.wait(60)
        assert code == 0, f"{name}: {t.stderr()[-3000:]}"
    got = read(c.bootstrap, "out", INPUT_PARTITIONS, "read_committed", deadline_s=60)
    counts = Counter(got)
    dupes = [v for v, n in counts.items() if n > 1]
    assert not dupes, f"{len(dupes)} records copied more than once, e.g. {dupes[:3]}"
    assert set(counts) == {b"%06d" % i for i in range(RECORDS)}
    _check_marker_epochs(c, transaction_version)


def _check_marker_epochs(c, transaction_version: int) -> None:
    """Each producer's markers in "out" (one replica's log): transaction.version 2 bumps the
    epoch every transaction (a marker rewritten after a failover may repeat one); 1 keeps
    it across transactions."""
    for part in range(INPUT_PARTITIONS):
        epochs: dict[int, list[int]] = {}
        for seg in sorted((c.broker(c.ids[0]).data_dir / f"out-{part}").glob("*.log")):
            for b in iter_batches(seg.read_bytes()):
                if b.is_control:
                    epochs.setdefault(b.producer_id, []).append(b.producer_epoch)
        assert epochs, f"out-{part}: no markers"
        for pid, es in epochs.items():
            assert es == sorted(es), f"out-{part} producer {pid}: marker epochs {es}"
        if transaction_version >= 2:
            assert all(len(set(es)) >= len(es) - 2 for es in epochs.values()), epochs
            assert max(len(set(es)) for es in epochs.values()) >= 10, epochs
        else:
            assert any(len(set(es)) < len(es) - 5 for es in epochs.values()), epochs

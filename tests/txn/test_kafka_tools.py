"""Test 6 of issue 17: Apache Kafka's own tools read kbroker's transactions —
DumpLogSegments --transaction-log-decoder decodes __transaction_state (Kafka's key/value
schema), and kafka-transactions lists and describes kbroker's transactions and producers;
`broker dump-log` prints what Kafka's kafka-dump-log prints for the same files
(--transaction-log-decoder, a partition's markers and its .txnindex)."""

from __future__ import annotations

import glob
import os
import subprocess
import sys
import time

import pytest

from broker.client import Cluster
from tests.support.kafka_tools import kafka_tool
from tests.txn.test_single_broker import producer

pytestmark = pytest.mark.interop


def test_dump_log_segments_and_kafka_transactions_read_kbrokers_transactions(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    done_id, open_id = f"tx-done-{topic_name}", f"tx-open-{topic_name}"
    p = producer(broker.bootstrap, done_id)
    p.begin_transaction()
    p.produce(topic_name, b"x", partition=0)
    p.commit_transaction(30)
    hanging = producer(broker.bootstrap, open_id, timeout_ms=60000)
    hanging.begin_transaction()
    hanging.produce(topic_name, b"y", partition=0)
    hanging.flush(30)

    segments = sorted(glob.glob(os.path.join(broker.data_dir, "__transaction_state-*", "*.log")))
    assert segments
    out = kafka_tool(
        "kafka-dump-log", "--transaction-log-decoder", "--print-data-log", "--files", ",".join(segments)
    ).stdout
    assert done_id in out and open_id in out
    assert "Exception" not in out and "unknown::version" not in out
    assert '"transactionStatus":"CompleteCommit"' in out

    listed = kafka_tool("kafka-transactions", "--bootstrap-server", broker.bootstrap, "list").lines
    assert listed[0].split()[:4] == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    states = {line.split()[0]: line.split()[3] for line in listed[1:]}
    assert states[done_id] == "CompleteCommit" and states[open_id] == "Ongoing"

    described = kafka_tool(
        "kafka-transactions", "--bootstrap-server", broker.bootstrap, "describe", "--transactional-id", open_id
    ).lines
    fields = dict(zip(described[0].split(), described[1].split()))
    assert fields["TransactionState"] == "Ongoing" and fields["TopicPartitions"] == f"{topic_name}-0"

    producers = kafka_tool(
        "kafka-transactions",
        "--bootstrap-server",
        broker.bootstrap,
        "describe-producers",
        "--topic",
        topic_name,
        "--partition",
        "0",
    ).lines
    header = producers[0].split()
    rows = [dict(zip(header, line.split())) for line in producers[1:]]
    assert sorted(r["CurrentTransactionStartOffset"] for r in rows) == ["2", "None"]
    hanging.abort_transaction(30)

    # broker dump-log against kafka-dump-log, once the abort completed (nothing is
    # appended to these files between the two reads)
    deadline = time.monotonic() + 30
    while True:
        states = {
            line.split()[0]: line.split()[3]
            for line in kafka_tool("kafka-transactions", "--bootstrap-server", broker.bootstrap, "list").lines[1:]
        }
        if states.get(open_id) == "CompleteAbort":
            break
        assert time.monotonic() < deadline, states
        time.sleep(0.5)
    files = ",".join(segments)
    mine = dump_log("--transaction-log-decoder", "--files", files)
    assert mine == kafka_tool("kafka-dump-log", "--transaction-log-decoder", "--files", files).stdout
    assert '"transactionStatus":"CompleteAbort"' in mine and f'"transactionalId":"{open_id}"' in mine
    part = os.path.join(broker.data_dir, f"{topic_name}-0")
    files = ",".join(sorted(glob.glob(os.path.join(part, "*.log")) + glob.glob(os.path.join(part, "*.txnindex"))))
    assert ".txnindex" in files
    mine = dump_log("--deep-iteration", "--files", files)
    assert mine == kafka_tool("kafka-dump-log", "--deep-iteration", "--files", files).stdout
    assert "endTxnMarker: ABORT" in mine and "endTxnMarker: COMMIT" in mine
    assert "version: 0 producerId: " in mine and " firstOffset: 2 lastOffset: " in mine


def dump_log(*args: str) -> str:
    r = subprocess.run(
        [sys.executable, "-m", "broker.cli.main", "dump-log", *args], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 0, (r.stdout[-2000:], r.stderr[-2000:])
    return r.stdout

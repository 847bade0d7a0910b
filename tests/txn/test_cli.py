"""`broker transactions list|describe|abort` and `broker producers describe` against a
live broker, as a user runs them: a hung transaction is listed, described, found by its
start offset and aborted, which moves the last stable offset."""

from __future__ import annotations

import pytest

from broker.client import Cluster
from tests.interop.test_cli import ok, one_line_error, run
from tests.txn.test_single_broker import lso, producer, read

pytestmark = pytest.mark.interop


def test_list_describe_producers_and_abort(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    txn_id = f"tx-cli-{topic_name}"
    p = producer(broker.bootstrap, txn_id, timeout_ms=60000)
    p.begin_transaction()
    p.produce(topic_name, b"hanging", partition=0)
    p.flush(30)
    out = ok("transactions", "list", "--bootstrap", broker.bootstrap).stdout.decode()
    assert out.splitlines()[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    mine = [line.split() for line in out.splitlines() if line.startswith(txn_id)]
    assert len(mine) == 1 and mine[0][3] == "Ongoing"
    out = ok("transactions", "describe", "--bootstrap", broker.bootstrap, "--transactional-id", txn_id).stdout.decode()
    header, row = out.splitlines()[0].split(), out.splitlines()[1].split()
    fields = dict(zip(header, row))
    assert fields["TransactionState"] == "Ongoing" and fields["TopicPartitions"] == f"{topic_name}-0"
    out = ok(
        "producers", "describe", "--bootstrap", broker.bootstrap, "--topic", topic_name, "--partition", "0"
    ).stdout.decode()
    rows = [dict(zip(out.splitlines()[0].split(), line.split())) for line in out.splitlines()[1:]]
    assert [r["CurrentTransactionStartOffset"] for r in rows] == ["0"]
    assert lso(broker, topic_name) == 0
    out = ok(
        "transactions",
        "abort",
        "--bootstrap",
        broker.bootstrap,
        "--topic",
        topic_name,
        "--partition",
        "0",
        "--start-offset",
        "0",
    ).stdout.decode()
    assert "aborted the transaction" in out
    assert lso(broker, topic_name) == 2  # past the record and the ABORT marker
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == []
    # nothing is open any more: one line saying so
    one_line_error(
        run(
            "transactions",
            "abort",
            "--bootstrap",
            broker.bootstrap,
            "--topic",
            topic_name,
            "--partition",
            "0",
            "--start-offset",
            "0",
        ),
        1,
        "no open transaction",
    )

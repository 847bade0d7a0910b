"""`broker transactions list|describe|abort` and `broker producers describe` (the verbs of
Kafka's kafka-transactions tool, with its column names).

    list        every transactional id of the cluster (ListTransactions to each broker)
    describe    one id's state at its coordinator (FindCoordinator, DescribeTransactions)
    abort       a hanging transaction on one partition: the open transaction of the
                producer whose transaction starts at --start-offset (DescribeProducers)
                gets an ABORT marker from the partition's leader (WriteTxnMarkers), as
                kafka-transactions abort does
    producers describe   the active producers of one partition (DescribeProducers)
"""

from __future__ import annotations

import time

from broker.cli.errors import CliError


def _wrap(fn):
    from broker.cli.clients import _run

    return _run(fn)


def _table(header: list[str], rows: list[list[object]]) -> None:
    table: list[list[object]] = [list(header), *rows]
    widths = [max(len(str(row[i])) for row in table) for i in range(len(header))]
    for row in table:
        print("\t".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def transactions_list(args) -> int:
    from broker.client import Cluster
    from broker.protocol.messages.list_transactions import ListTransactionsRequest

    rows = []
    with Cluster(args.bootstrap) as c:
        c.refresh([])
        for node in sorted(c.brokers):
            r = c.connection(node).request(
                ListTransactionsRequest(state_filters=[], producer_id_filters=[], duration_filter=-1)
            )
            for t in r.transaction_states:
                rows.append([t.transactional_id, node, t.producer_id, t.transaction_state])
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], sorted(rows, key=lambda r: str(r[0])))
    return 0


def _coordinator(c, txn_id: str):
    from broker.protocol.errors import ErrorCode, KafkaProtocolError
    from broker.protocol.messages.find_coordinator import FindCoordinatorRequest

    deadline = time.monotonic() + 15
    while True:
        conn = c.any_connection()
        version = min(conn.version_for(FindCoordinatorRequest.API_KEY), 3)
        r = conn.request(FindCoordinatorRequest(key=txn_id, key_type=1), version)
        if r.error_code == 0:
            c.refresh([])
            return r.node_id, c.connection(r.node_id)
        if (
            r.error_code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS)
            or time.monotonic() > deadline
        ):
            raise KafkaProtocolError(r.error_code, f"find the coordinator of {txn_id}")
        time.sleep(0.2)


def transactions_describe(args) -> int:
    from broker.client import Cluster
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.describe_transactions import DescribeTransactionsRequest

    with Cluster(args.bootstrap) as c:
        node, conn = _coordinator(c, args.transactional_id)
        r = conn.request(DescribeTransactionsRequest(transactional_ids=[args.transactional_id]))
    t = r.transaction_states[0]
    if t.error_code:
        raise KafkaProtocolError(t.error_code, f"describe transaction {args.transactional_id}")
    now = int(time.time() * 1000)
    start = t.transaction_start_time_ms
    parts = ",".join(f"{d.topic}-{p}" for d in t.topics for p in d.partitions)
    _table(
        [
            "CoordinatorId",
            "TransactionalId",
            "ProducerId",
            "ProducerEpoch",
            "TransactionState",
            "TransactionTimeoutMs",
            "CurrentTransactionStartTimeMs",
            "TransactionDurationMs",
            "TopicPartitions",
        ],
        [
            [
                node,
                t.transactional_id,
                t.producer_id,
                t.producer_epoch,
                t.transaction_state,
                t.transaction_timeout_ms,
                start if start >= 0 else "None",
                now - start if start >= 0 else "None",
                parts,
            ]
        ],
    )
    return 0


def _producers(c, topic: str, partition: int):
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.describe_producers import DescribeProducersRequest

    R = DescribeProducersRequest
    conn = c.leader_connection(topic, partition)
    r = conn.request(R(topics=[R.TopicRequest(name=topic, partition_indexes=[partition])]))
    pr = r.topics[0].partitions[0]
    if pr.error_code:
        raise KafkaProtocolError(pr.error_code, f"describe the producers of {topic}-{partition}")
    return conn, pr.active_producers


def producers_describe(args) -> int:
    from broker.client import Cluster

    with Cluster(args.bootstrap) as c:
        _conn, found = _producers(c, args.topic, args.partition)
    _table(
        [
            "ProducerId",
            "ProducerEpoch",
            "LatestCoordinatorEpoch",
            "LastSequence",
            "LastTimestamp",
            "CurrentTransactionStartOffset",
        ],
        [
            [
                p.producer_id,
                p.producer_epoch,
                p.coordinator_epoch,
                p.last_sequence,
                p.last_timestamp,
                p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None",
            ]
            for p in found
        ],
    )
    return 0


def transactions_abort(args) -> int:
    from broker.client import Cluster
    from broker.protocol.errors import KafkaProtocolError
    from broker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest

    W = WriteTxnMarkersRequest
    with Cluster(args.bootstrap) as c:
        conn, found = _producers(c, args.topic, args.partition)
        match = [p for p in found if p.current_txn_start_offset == args.start_offset]
        if not match:
            raise CliError(f"no open transaction starts at offset {args.start_offset} of {args.topic}-{args.partition}")
        p = match[0]
        r = conn.request(
            W(
                markers=[
                    W.WritableTxnMarker(
                        producer_id=p.producer_id,
                        producer_epoch=p.producer_epoch,
                        transaction_result=False,
                        coordinator_epoch=p.coordinator_epoch,
                        topics=[W.WritableTxnMarkerTopic(name=args.topic, partition_indexes=[args.partition])],
                    )
                ]
            )
        )
    code = r.markers[0].topics[0].partitions[0].error_code
    if code:
        raise KafkaProtocolError(code, f"abort the transaction of producer {p.producer_id}")
    print(
        f"aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) starting at offset "
        f"{args.start_offset} of {args.topic}-{args.partition}"
    )
    return 0


def add_parsers(sub) -> None:
    from broker.cli.clients import _bootstrap

    t = sub.add_parser("transactions", help="list, describe and abort transactions (as kafka-transactions)")
    ts = t.add_subparsers(dest="transactions_command", metavar="ACTION")
    ts.required = True
    p = ts.add_parser("list", help="every transactional id with its coordinator, producer id and state")
    _bootstrap(p)
    p.set_defaults(func=_wrap(transactions_list))
    p = ts.add_parser("describe", help="one transactional id's state, timeout, start and partitions")
    _bootstrap(p)
    p.add_argument("--transactional-id", required=True, help="the transactional id")
    p.set_defaults(func=_wrap(transactions_describe))
    p = ts.add_parser(
        "abort",
        help="abort a hanging transaction on one partition (an ABORT marker from its "
        "leader), found by the offset it starts at",
        description="Abort the open transaction that starts at --start-offset of one partition, "
        "as kafka-transactions abort: the partition's leader writes an ABORT marker "
        "for its producer. `broker producers describe` shows the start offsets.",
    )
    _bootstrap(p)
    p.add_argument("--topic", required=True, help="the partition's topic")
    p.add_argument("--partition", type=int, required=True, help="the partition")
    p.add_argument("--start-offset", type=int, required=True, help="the first offset of the open transaction")
    p.set_defaults(func=_wrap(transactions_abort))
    pr = sub.add_parser("producers", help="describe the active producers of a partition")
    ps = pr.add_subparsers(dest="producers_command", metavar="ACTION")
    ps.required = True
    p = ps.add_parser("describe", help="producer ids, epochs, sequences and open transactions of one partition")
    _bootstrap(p)
    p.add_argument("--topic", required=True, help="the partition's topic")
    p.add_argument("--partition", type=int, required=True, help="the partition")
    p.set_defaults(func=_wrap(producers_describe))

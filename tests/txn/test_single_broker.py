"""Transactions with confluent-kafka (librdkafka) on one broker: commit and abort seen
through read_committed and read_uncommitted, zombie fencing, the timeout abort moving the
last stable offset, read_committed ListOffsets, and bad input answered with protocol
errors (raw requests a client would not send)."""

from __future__ import annotations

import time

import pytest

from broker.client import BrokerConnection, Cluster
from broker.native import BatchBuilder
from broker.protocol.errors import ErrorCode as E
from broker.protocol.messages.add_partitions_to_txn import AddPartitionsToTxnRequest
from broker.protocol.messages.end_txn import EndTxnRequest
from broker.protocol.messages.find_coordinator import FindCoordinatorRequest
from broker.protocol.messages.init_producer_id import InitProducerIdRequest
from broker.protocol.messages.list_offsets import ListOffsetsRequest
from broker.protocol.messages.produce import ProduceRequest
from broker.protocol.messages.txn_offset_commit import TxnOffsetCommitRequest
from broker.protocol.messages.write_txn_markers import WriteTxnMarkersRequest
from tests.interop.helpers import offsets
from tests.support.deps import require_module

pytestmark = pytest.mark.interop


def producer(bootstrap: str, txn_id: str, timeout_ms: int = 10000):
    ck = require_module("confluent_kafka")
    p = ck.Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "transaction.timeout.ms": timeout_ms,
            "linger.ms": 5,
        }
    )
    p.init_transactions(30)
    return p


def read(bootstrap: str, topic: str, partitions: int, isolation: str, deadline_s: float = 30.0) -> list[bytes]:
    """Every value of the topic visible at `isolation` (read until each partition's end for
    that isolation: the LSO or the high watermark)."""
    ck = require_module("confluent_kafka")
    c = ck.Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"r-{topic}-{isolation}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        got: list[bytes] = []
        eof: set[int] = set()
        deadline = time.monotonic() + deadline_s
        while len(eof) < partitions:
            assert time.monotonic() < deadline, f"read {len(got)} values of {topic} in {deadline_s} s"
            for m in c.consume(500, 0.3):
                if m.error() is not None:
                    if m.error().code() == ck.KafkaError._PARTITION_EOF:
                        eof.add(m.partition())
                        continue
                    raise AssertionError(m.error())
                eof.discard(m.partition())
                got.append(m.value())
        return got
    finally:
        c.close()


def test_commits_are_seen_aborts_are_not(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 2, 1)
    p = producer(broker.bootstrap, f"tx-{topic_name}")
    p.begin_transaction()
    for i in range(100):
        p.produce(topic_name, b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(50):
        p.produce(topic_name, b"a%d" % i, partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(10):
        p.produce(topic_name, b"d%d" % i, partition=i % 2)
    p.commit_transaction(30)
    committed = read(broker.bootstrap, topic_name, 2, "read_committed")
    assert sorted(committed) == sorted([b"c%d" % i for i in range(100)] + [b"d%d" % i for i in range(10)])
    everything = read(broker.bootstrap, topic_name, 2, "read_uncommitted")
    assert sorted(everything) == sorted(committed + [b"a%d" % i for i in range(50)])
    # three markers per partition take offsets too: 160 records + 6 markers
    ends = offsets(broker.bootstrap, topic_name, [0, 1])
    assert sum(hw for _s, hw in ends.values()) == 166


def test_a_zombie_is_fenced_and_nothing_it_writes_afterwards_is_visible(broker, topic_name):
    ck = require_module("confluent_kafka")
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    txn_id = f"tx-{topic_name}"
    old = producer(broker.bootstrap, txn_id)
    old.begin_transaction()
    old.produce(topic_name, b"before-fence")
    old.flush(30)
    new = producer(broker.bootstrap, txn_id)  # fences `old`, aborts its open transaction
    old.produce(topic_name, b"after-fence")
    with pytest.raises(ck.KafkaException) as info:
        old.commit_transaction(30)
    assert info.value.args[0].fatal() or info.value.args[0].code() in (
        ck.KafkaError._FENCED,
        ck.KafkaError.PRODUCER_FENCED,
        ck.KafkaError.INVALID_PRODUCER_EPOCH,
    )
    new.begin_transaction()
    new.produce(topic_name, b"from-new")
    new.commit_transaction(30)
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == [b"from-new"]
    # the zombie's produce after the fence was refused, not merely aborted: only the
    # aborted record from before the fence is in the log beside the new producer's
    assert sorted(read(broker.bootstrap, topic_name, 1, "read_uncommitted")) == [b"before-fence", b"from-new"]


def test_a_hung_transaction_is_aborted_after_its_timeout(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    hung = producer(broker.bootstrap, f"tx-hung-{topic_name}", timeout_ms=1500)
    hung.begin_transaction()
    hung.produce(topic_name, b"never-committed")
    hung.flush(30)
    other = producer(broker.bootstrap, f"tx-other-{topic_name}")
    other.begin_transaction()
    other.produce(topic_name, b"committed-later")
    other.commit_transaction(30)
    # the LSO is stuck at the hung transaction's first offset: nothing is visible yet
    assert lso(broker, topic_name) == 0
    deadline = time.monotonic() + 20
    while lso(broker, topic_name) == 0:
        assert time.monotonic() < deadline, "the hung transaction was not aborted"
        time.sleep(0.2)
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == [b"committed-later"]
    assert sorted(read(broker.bootstrap, topic_name, 1, "read_uncommitted")) == [b"committed-later", b"never-committed"]


def lso(broker, topic: str, partition: int = 0) -> int:
    host, port = broker.bootstrap.split(":")
    L = ListOffsetsRequest
    with BrokerConnection(host, int(port)) as conn:
        resp = conn.request(
            L(
                replica_id=-1,
                isolation_level=1,
                topics=[
                    L.ListOffsetsTopic(
                        name=topic,
                        partitions=[
                            L.ListOffsetsPartition(partition_index=partition, timestamp=-1, current_leader_epoch=-1)
                        ],
                    )
                ],
            )
        )
    r = resp.topics[0].partitions[0]
    assert r.error_code == 0
    return r.offset


def _coordinator(broker, txn_id: str) -> BrokerConnection:
    host, port = broker.bootstrap.split(":")
    conn = BrokerConnection(host, int(port))
    deadline = time.monotonic() + 20
    while True:
        r = conn.request(FindCoordinatorRequest(key=txn_id, key_type=1, coordinator_keys=[txn_id]), version=3)
        if r.error_code == 0:
            return conn
        assert time.monotonic() < deadline, f"no coordinator for {txn_id}: {r.error_code}"
        time.sleep(0.2)


def _init(conn, txn_id, timeout_ms=10000):
    deadline = time.monotonic() + 20
    while True:
        r = conn.request(
            InitProducerIdRequest(
                transactional_id=txn_id, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1
            )
        )
        if r.error_code not in (E.COORDINATOR_LOAD_IN_PROGRESS, E.CONCURRENT_TRANSACTIONS, E.COORDINATOR_NOT_AVAILABLE):
            return r
        assert time.monotonic() < deadline
        time.sleep(0.1)


def test_bad_input_gets_protocol_errors(broker, topic_name):
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    txn_id = f"tx-raw-{topic_name}"
    with _coordinator(broker, txn_id) as conn:
        # a transaction timeout above transaction.max.timeout.ms
        assert _init(conn, txn_id, timeout_ms=60001).error_code == E.INVALID_TRANSACTION_TIMEOUT
        init = _init(conn, txn_id)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        # EndTxn for an unknown id, and for a fenced epoch
        r = conn.request(
            EndTxnRequest(transactional_id=f"unknown-{txn_id}", producer_id=pid, producer_epoch=epoch, committed=True)
        )
        assert r.error_code in (E.INVALID_PRODUCER_ID_MAPPING, E.NOT_COORDINATOR)
        r = conn.request(
            EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch + 3, committed=True)
        )
        assert r.error_code == E.PRODUCER_FENCED
        # AddPartitionsToTxn for a topic that does not exist
        A = AddPartitionsToTxnRequest
        r = conn.request(
            A(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[
                    A.AddPartitionsToTxnTopic(name="no-such-topic", partitions=[0]),
                    A.AddPartitionsToTxnTopic(name=topic_name, partitions=[0]),
                ],
            ),
            version=3,
        )
        codes = {t.name: t.results_by_partition[0].partition_error_code for t in r.results_by_topic_v3_and_below}
        assert codes == {"no-such-topic": E.UNKNOWN_TOPIC_OR_PARTITION, topic_name: E.OPERATION_NOT_ATTEMPTED}
        # a transactional produce to a partition never added is refused, nothing written (v11:
        # v12, transaction.version 2, would add the partition)
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
        b.append(int(time.time() * 1000), b"k", b"sneaky")
        P = ProduceRequest
        r = conn.request(
            P(
                transactional_id=txn_id,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    P.TopicProduceData(
                        name=topic_name, partition_data=[P.PartitionProduceData(index=0, records=b.build())]
                    )
                ],
            ),
            version=11,
        )
        assert r.responses[0].partition_responses[0].error_code == E.INVALID_TXN_STATE
        assert offsets(broker.bootstrap, topic_name, [0])[0][1] == 0
        # TxnOffsetCommit from a stale generation of a group that does not exist
        T = TxnOffsetCommitRequest
        group = f"g-{topic_name}"
        deadline = time.monotonic() + 20
        while conn.request(
            FindCoordinatorRequest(key=group, key_type=0, coordinator_keys=[group]), version=3
        ).error_code:
            assert time.monotonic() < deadline, "no group coordinator"
            time.sleep(0.2)
        r = conn.request(
            T(
                transactional_id=txn_id,
                group_id=group,
                producer_id=pid,
                producer_epoch=epoch,
                generation_id_or_member_epoch=7,
                member_id="m-gone",
                group_instance_id=None,
                topics=[
                    T.TxnOffsetCommitRequestTopic(
                        name=topic_name,
                        partitions=[
                            T.TxnOffsetCommitRequestPartition(
                                partition_index=0, committed_offset=1, committed_leader_epoch=-1, committed_metadata=""
                            )
                        ],
                    )
                ],
            ),
            version=3,
        )
        assert r.topics[0].partitions[0].error_code == E.ILLEGAL_GENERATION
    # the broker is still fine
    p = producer(broker.bootstrap, txn_id)
    p.begin_transaction()
    p.produce(topic_name, b"ok", partition=0)
    p.commit_transaction(30)
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == [b"ok"]


def test_a_late_transaction_version_2_marker_cannot_end_the_open_transaction(broker, topic_name):
    """WriteTxnMarkers v2 (KIP-1228): a marker with TransactionVersion 2 at the epoch the
    producer's open transaction runs at is a late one (the coordinator bumps the epoch at
    every end): refused with INVALID_PRODUCER_EPOCH, the transaction stays open; the
    coordinator's own abort then ends it."""
    with Cluster(broker.bootstrap) as c:
        c.create_topic(topic_name, 1, 1)
    txn_id = f"tx-late-{topic_name}"
    W = WriteTxnMarkersRequest
    with _coordinator(broker, txn_id) as conn:
        init = _init(conn, txn_id)
        assert init.error_code == 0
        pid, epoch = init.producer_id, init.producer_epoch
        A = AddPartitionsToTxnRequest
        r = conn.request(
            A(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=topic_name, partitions=[0])],
            ),
            version=3,
        )
        assert r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code == 0
        b = BatchBuilder(producer_id=pid, producer_epoch=epoch, base_sequence=0, is_transactional=True)
        b.append(int(time.time() * 1000), b"k", b"open")
        P = ProduceRequest
        r = conn.request(
            P(
                transactional_id=txn_id,
                acks=-1,
                timeout_ms=5000,
                topic_data=[
                    P.TopicProduceData(
                        name=topic_name, partition_data=[P.PartitionProduceData(index=0, records=b.build())]
                    )
                ],
            ),
            version=11,
        )
        assert r.responses[0].partition_responses[0].error_code == 0
        assert lso(broker, topic_name) == 0

        def marker(version: int, tv: int) -> int:
            resp = conn.request(
                W(
                    markers=[
                        W.WritableTxnMarker(
                            producer_id=pid,
                            producer_epoch=epoch,
                            transaction_result=True,
                            coordinator_epoch=0,
                            transaction_version=tv,
                            topics=[W.WritableTxnMarkerTopic(name=topic_name, partition_indexes=[0])],
                        )
                    ]
                ),
                version=version,
            )
            return resp.markers[0].topics[0].partitions[0].error_code

        assert marker(2, 2) == E.INVALID_PRODUCER_EPOCH
        assert lso(broker, topic_name) == 0  # still open: nothing committed it
        assert read(broker.bootstrap, topic_name, 1, "read_committed", deadline_s=10) == []
        r = conn.request(
            EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=False), version=3
        )
        assert r.error_code == 0
        deadline = time.monotonic() + 20
        while lso(broker, topic_name) != 2:  # the batch and the coordinator's ABORT
            assert time.monotonic() < deadline, "the abort's marker never came"
            time.sleep(0.1)
    assert read(broker.bootstrap, topic_name, 1, "read_committed") == []
    assert read(broker.bootstrap, topic_name, 1, "read_uncommitted") == [b"open"]

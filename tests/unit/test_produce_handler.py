"""The produce handler's rules (broker/server/handlers/produce.py) through a fake request
context (broker/server/context.py) over a real ReplicaManager.append_records: acks,
per-partition errors from the one exception mapping, acks=0 failures closing the
connection, internal topics refused — without a broker process."""

import asyncio
import errno
from types import SimpleNamespace

import pytest

from broker.cluster.metadata import PartitionState
from broker.cluster.replica.manager import ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.group.metadata_manager import OFFSETS_TOPIC
from broker.log import LogAppendInfo, LogStorageError, RecordTooLarge, TopicPartition
from broker.log.log import Log
from broker.log.producer_state import OutOfOrderSequence
from broker.native import BatchBuilder, InvalidRecordError, iter_batches
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest, ProduceResponse
from broker.server.handlers import produce
from tests.unit.log._support import TP, log_config

E = ErrorCode


class FakePartition:
    """A leader whose append has a given outcome (a LogAppendInfo or an exception)."""

    def __init__(self, tp, outcome):
        self.tp = tp
        self.outcome = outcome
        self.appended = 0

    def check_leader(self, current_leader_epoch=-1):
        pass

    def append_as_leader(self, records, acks, control=False, client=True, transaction_version=0):
        self.appended += 1
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome

    def needs_flush(self):
        return False


class KnownTopics:
    """The MetadataCache as the ReplicaManager's lookup sees it: every partition exists
    (one not hosted here is NOT_LEADER_OR_FOLLOWER)."""

    def partition_state(self, topic, partition):
        return object()


def replicas_with(outcomes, topic="t"):
    """A real ReplicaManager (its append_records) over fake partitions."""
    replicas = ReplicaManager(1, None, KnownTopics())
    for p, outcome in outcomes.items():
        tp = TopicPartition(topic, p)
        replicas.partitions[tp] = FakePartition(tp, outcome)
    return replicas


class FakeConnection:
    closed = False
    holding = 0

    def close(self):
        self.closed = True

    def hold_produces(self):
        self.holding += 1

    def release_produces(self):
        self.holding -= 1


def context(outcomes=None, replicas=None, topic="t"):
    replicas = replicas if replicas is not None else replicas_with(outcomes, topic)
    return SimpleNamespace(
        services=SimpleNamespace(replicas=replicas),
        has_right=lambda *a, **k: True,
        connection=FakeConnection(),
        header=None,
        api_version=9,
        received=0.0,
    )


def batch():
    b = BatchBuilder()
    b.append(None, None, b"v")
    return bytearray(b.build())


def request(partitions, acks=1, transactional_id=None, records=batch, topic="t", timeout_ms=1000):
    return ProduceRequest(
        transactional_id=transactional_id,
        acks=acks,
        timeout_ms=timeout_ms,
        topic_data=[
            ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[ProduceRequest.PartitionProduceData(index=p, records=records()) for p in partitions],
            )
        ],
    )


def _transactional_batch() -> bytes:
    from broker.native import BatchBuilder

    b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=0, is_transactional=True)
    b.append(1000, b"k", b"v")
    return b.build()


def codes(response):
    return {p.index: p.error_code for t in response.responses for p in t.partition_responses}


def ok(base):
    return LogAppendInfo(base, base, 1, -1, -1, 0, 70)


def test_each_partition_is_answered_with_the_mapped_error_of_its_append():
    outcomes = {
        0: ok(5),
        1: InvalidRecordError("null key"),
        2: RecordTooLarge("big"),
        3: LogStorageError("disk"),
        4: OutOfOrderSequence("gap"),
        5: OSError(errno.EIO, "io"),
        6: KafkaProtocolError(E.NOT_ENOUGH_REPLICAS, "isr"),
    }
    ctx = context(outcomes)
    resp = produce.handle(ctx, request(range(8)))
    assert codes(resp) == {
        0: 0,
        1: E.INVALID_RECORD,
        2: E.MESSAGE_TOO_LARGE,
        3: E.KAFKA_STORAGE_ERROR,
        4: E.OUT_OF_ORDER_SEQUENCE_NUMBER,
        5: E.KAFKA_STORAGE_ERROR,
        6: E.NOT_ENOUGH_REPLICAS,
        7: E.NOT_LEADER_OR_FOLLOWER,
    }
    assert resp.responses[0].partition_responses[0].base_offset == 5
    assert not ctx.connection.closed


@pytest.mark.parametrize(
    "req, code",
    [
        (request([0], acks=2), E.INVALID_REQUIRED_ACKS),
        (request([0], records=lambda: None), E.INVALID_RECORD),
        # transactional records need a transactional id
        (request([0], records=lambda: _transactional_batch()), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    ],
)
def test_requests_the_broker_refuses_whole(req, code):
    ctx = context({0: ok(0)})
    assert codes(produce.handle(ctx, req)) == {0: code}
    assert ctx.services.replicas.partitions[TopicPartition("t", 0)].appended == 0


def test_an_acks_0_produce_gets_no_answer_and_a_failure_closes_the_connection():
    ctx = context({0: ok(0)})
    assert produce.handle(ctx, request([0], acks=0)) is None
    assert not ctx.connection.closed
    ctx = context({0: RecordTooLarge("big")})
    assert produce.handle(ctx, request([0], acks=0)) is None
    assert ctx.connection.closed


def test_a_bug_is_not_turned_into_an_answer():
    with pytest.raises(KeyError):
        produce.handle(context({0: KeyError("bug")}), request([0]))


def test_a_client_cannot_produce_into_an_internal_topic():
    ctx = context({0: ok(0)}, topic=OFFSETS_TOPIC)
    resp = produce.handle(ctx, request([0], topic=OFFSETS_TOPIC))
    p = resp.responses[0].partition_responses[0]
    assert (p.error_code, p.base_offset) == (E.INVALID_TOPIC_EXCEPTION, -1)
    assert p.error_message == f"Cannot append to internal topic {OFFSETS_TOPIC}"
    assert ctx.services.replicas.partitions[TopicPartition(OFFSETS_TOPIC, 0)].appended == 0


def test_an_acks_all_produce_is_answered_once_the_isr_has_the_batch(tmp_path):
    """On a real Partition: the handler returns an awaitable, answered with the append's
    offsets when a follower's fetch moves the high watermark past the batch."""

    async def main():
        replicas = ReplicaManager(1, None, KnownTopics())
        lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
        part = replicas.partitions[TP] = Partition(
            TP, lg, PartitionState(0, [1, 2], 1, 0, [1, 2]), 1, replicas.purgatory
        )
        lg.append_as_leader(batch(), 0)  # offset 0: the batch lands at 1
        answer = produce.handle(context(replicas=replicas), request([0], acks=-1, timeout_ms=60000))
        assert not isinstance(answer, ProduceResponse)
        task = asyncio.ensure_future(answer)
        await asyncio.sleep(0.01)
        assert not task.done() and len(replicas.purgatory) == 1
        part.update_follower(2, 2)
        resp = await asyncio.wait_for(task, 5)
        p = resp.responses[0].partition_responses[0]
        assert (p.error_code, p.base_offset, p.log_start_offset) == (0, 1, 0)

    asyncio.run(main())


def _txn_batch(seq: int, count: int = 2) -> bytearray:
    b = BatchBuilder(producer_id=7, producer_epoch=0, base_sequence=seq, is_transactional=True)
    for i in range(count):
        b.append(1000, b"k", b"v%d" % (seq + i))
    return bytearray(b.build())


class _VerifyingCoordinator:
    """A transaction coordinator whose verify_only answers the test releases, in any order."""

    def __init__(self):
        self.waiting: list[asyncio.Future] = []

    async def verify(self, txn_id, pid, epoch, parts):
        fut = asyncio.get_running_loop().create_future()
        self.waiting.append(fut)
        await fut
        return {p: 0 for p in parts}


def test_pipelined_transactional_batches_verified_out_of_order_open_the_transaction_in_order(tmp_path):
    """Three produce requests of one producer handled side by side, each waiting on the
    coordinator's verification (KIP-890 part 1): when the last verdict comes first, its
    batch (sequence 4) must not open the transaction ahead of sequence 0 — it is refused
    OUT_OF_ORDER_SEQUENCE_NUMBER and the log holds the batches in sequence order. Before
    the check, sequence 4 landed first and 0 and 2 were refused for good (a Java
    transactional copier lost them). On one connection this no longer happens: each such
    request holds the Produces behind it (Connection.hold_produces, released with its
    answer; tests/unit/test_connection.py), as an OUT_OF_ORDER_SEQUENCE_NUMBER answered
    right after the success of the batch before is fatal to a Java transactional
    producer; the check stays for requests of separate connections."""

    async def main():
        replicas = ReplicaManager(1, None, KnownTopics())
        lg = Log.load(str(tmp_path / "t-0"), TP, log_config(tmp_path))
        replicas.partitions[TP] = Partition(TP, lg, PartitionState(0, [1], 1, 0, [1]), 1, replicas.purgatory)
        coord = _VerifyingCoordinator()
        ctx = context(replicas=replicas)
        ctx.services.config = {"transaction.partition.verification.enable": True}
        ctx.services.txn_coordinator = coord

        def send(seq):
            return asyncio.ensure_future(
                produce.handle(ctx, request([0], acks=1, transactional_id="tx", records=lambda: _txn_batch(seq)))
            )

        tasks = [send(0), send(2), send(4)]
        await asyncio.sleep(0.01)
        assert len(coord.waiting) == 3 and ctx.connection.holding == 3
        for fut in reversed(coord.waiting):  # the verdicts come back last first
            fut.set_result(None)
            await asyncio.sleep(0.01)
        got = [codes(await t)[0] for t in tasks]
        assert got == [0, E.OUT_OF_ORDER_SEQUENCE_NUMBER, E.OUT_OF_ORDER_SEQUENCE_NUMBER]
        assert ctx.connection.holding == 0  # each released with its answer
        for seq in (2, 4):  # the producer's retries, in order (the
            # transaction is open here now: answered at once, no verification)
            resp = produce.handle(ctx, request([0], acks=1, transactional_id="tx", records=lambda s=seq: _txn_batch(s)))
            assert codes(resp)[0] == 0
        s = lg.read(0, 1 << 20, max_offset=lg.log_end_offset)
        try:
            return [b.base_sequence for b in iter_batches(s.read())]
        finally:
            s.close()

    assert asyncio.run(main()) == [0, 2, 4]

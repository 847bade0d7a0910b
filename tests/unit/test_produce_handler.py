"""The produce handler's rules (broker/server/handlers/produce.py) through a fake request
context (broker/server/context.py): acks, per-partition errors from the one exception
mapping, acks=0 failures closing the connection — without a broker process."""
import errno
from types import SimpleNamespace

import pytest

from broker.log import LogAppendInfo, LogStorageError, RecordTooLarge, TopicPartition
from broker.log.producer_state import OutOfOrderSequence
from broker.native import BatchBuilder, InvalidRecordError
from broker.protocol.errors import ErrorCode, KafkaProtocolError
from broker.protocol.messages.produce import ProduceRequest
from broker.server.handlers import produce

E = ErrorCode


class FakePartition:
    def __init__(self, tp, outcome):
        self.tp = tp
        self.outcome = outcome
        self.log = SimpleNamespace(high_watermark=1 << 62, needs_flush=lambda: False)

    def append_as_leader(self, records, acks):
        if isinstance(self.outcome, BaseException):
            raise self.outcome
        return self.outcome


class FakeReplicas:
    def __init__(self, outcomes):
        self.outcomes = outcomes            # partition -> LogAppendInfo or exception

    def leader_partition(self, topic, partition):
        outcome = self.outcomes.get(partition)
        if outcome is None:
            raise KafkaProtocolError(E.NOT_LEADER_OR_FOLLOWER, f"{topic}-{partition}")
        return FakePartition(TopicPartition(topic, partition), outcome)


class FakeConnection:
    closed = False

    def close(self):
        self.closed = True


def context(outcomes):
    return SimpleNamespace(broker=SimpleNamespace(replicas=FakeReplicas(outcomes)),
                           connection=FakeConnection(), header=None, api_version=9, received=0.0)


def batch():
    b = BatchBuilder()
    b.append(None, None, b"v")
    return bytearray(b.build())


def request(partitions, acks=1, transactional_id=None, records=batch):
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name="t", partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=records()) for p in partitions])])


def codes(response):
    return {p.index: p.error_code for t in response.responses for p in t.partition_responses}


def ok(base):
    return LogAppendInfo(base, base, 1, -1, -1, 0, 70)


def test_each_partition_is_answered_with_the_mapped_error_of_its_append():
    outcomes = {0: ok(5), 1: InvalidRecordError("null key"), 2: RecordTooLarge("big"),
                3: LogStorageError("disk"), 4: OutOfOrderSequence("gap"), 5: OSError(errno.EIO, "io")}
    ctx = context(outcomes)
    resp = produce.handle(ctx, request(range(7)))
    assert codes(resp) == {0: 0, 1: E.INVALID_RECORD, 2: E.MESSAGE_TOO_LARGE, 3: E.KAFKA_STORAGE_ERROR,
                           4: E.OUT_OF_ORDER_SEQUENCE_NUMBER, 5: E.KAFKA_STORAGE_ERROR, 6: E.NOT_LEADER_OR_FOLLOWER}
    assert resp.responses[0].partition_responses[0].base_offset == 5
    assert not ctx.connection.closed


@pytest.mark.parametrize("req, code", [
    (request([0], acks=2), E.INVALID_REQUIRED_ACKS),
    (request([0], transactional_id="tx"), E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    (request([0], records=lambda: None), E.INVALID_RECORD),
])
def test_requests_the_broker_refuses_whole(req, code):
    assert codes(produce.handle(context({0: ok(0)}), req)) == {0: code}


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


class WaitingPartition:
    """A leader whose high watermark is behind the batch: an acks=all produce waits."""

    def __init__(self, tp):
        self.tp = tp
        self.is_leader = True
        self.leader_epoch = 3
        self.held = True                # the log still holds the batch
        self.log = SimpleNamespace(high_watermark=0, needs_flush=lambda: False)

    def holds(self, leader_epoch, end_offset):
        return self.held

    def append_as_leader(self, records, acks):
        return ok(0)

    def enough_replicas(self):
        return True


def _acks_all(change):
    """Produces with acks=all (a 60 s timeout) into a WaitingPartition, lets it wait, then
    `change(partition)` and wakes the purgatory; returns the answer's error code."""
    import asyncio

    from broker.cluster.replica.purgatory import Purgatory

    async def main():
        tp = TopicPartition("t", 0)
        part = WaitingPartition(tp)
        purgatory = Purgatory()
        replicas = SimpleNamespace(leader_partition=lambda topic, p: part, get=lambda key: part, purgatory=purgatory)
        ctx = SimpleNamespace(broker=SimpleNamespace(replicas=replicas),
                              connection=FakeConnection(), header=None, api_version=9, received=0.0)
        req = request([0], acks=-1)
        req.timeout_ms = 60000
        answer = asyncio.ensure_future(produce.handle(ctx, req))
        for _ in range(5):
            await asyncio.sleep(0)
        assert not answer.done() and len(purgatory) == 1
        change(part)
        purgatory.partition_changed(tp)
        return codes(await asyncio.wait_for(answer, 10))[0]
    return asyncio.run(main())


def test_an_acks_all_produce_is_answered_when_the_high_watermark_covers_it():
    assert _acks_all(lambda part: setattr(part.log, "high_watermark", 1)) == 0


def test_an_acks_all_produce_waiting_at_a_leader_that_loses_leadership_is_told_at_once():
    assert _acks_all(lambda part: setattr(part, "is_leader", False)) == E.NOT_LEADER_OR_FOLLOWER

    # leading again in a later epoch, the batch truncated in between (A -> B -> A)
    def truncated(part):
        part.leader_epoch, part.held = 4, False
        part.log.high_watermark = 1
    assert _acks_all(truncated) == E.NOT_LEADER_OR_FOLLOWER


def test_an_acks_all_produce_keeps_waiting_when_only_the_leader_epoch_changed():
    # the controller bumps the leader epoch at every ISR shrink: the batch is still here
    def new_epoch(part):
        part.leader_epoch = 4
        part.log.high_watermark = 1
    assert _acks_all(new_epoch) == 0

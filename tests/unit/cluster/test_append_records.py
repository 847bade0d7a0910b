"""ReplicaManager.append_records, the one way anything appends as leader, on real
Partitions and Logs: acks 0, 1 and -1, per-partition errors in the request's order,
internal topics by origin, the flush policy, idempotent retries, and the fast path that
answers at once without a coroutine or a task."""

import asyncio
import errno

import pytest

import broker.cluster.replica.manager as manager_module
import broker.log.log as log_module
from broker.cluster.metadata import PartitionState
from broker.cluster.replica.manager import AppendOrigin, ReplicaManager
from broker.cluster.replica.partition import Partition
from broker.log import TopicPartition
from broker.log.log import Log
from broker.protocol.errors import ErrorCode
from tests.unit.log._support import batch, log_config

E = ErrorCode
CLIENT, COORDINATOR = AppendOrigin.CLIENT, AppendOrigin.COORDINATOR
T0, T1, T2, T3 = (TopicPartition("t", p) for p in range(4))
OFFSETS = TopicPartition("__consumer_offsets", 0)


class Metadata:
    """Topic `t` has partitions 0-3 in the cluster; others are unknown."""

    def partition_state(self, topic, partition):
        return object() if topic == "t" and 0 <= partition < 4 else None


def host(replicas, tmp_path, tp, replica_ids=(1,), isr=None, min_isr=1, **overrides):
    """Broker 1 leads `tp` (replicas `replica_ids`, ISR `isr`, default all of them)."""
    config = log_config(tmp_path, {"min.insync.replicas": min_isr, **overrides})
    lg = Log.load(str(tmp_path / str(tp)), tp, config)
    state = PartitionState(tp.partition, list(replica_ids), 1, 0, list(isr if isr is not None else replica_ids))
    part = replicas.partitions[tp] = Partition(tp, lg, state, 1, replicas.purgatory, lambda p, new_isr: None)
    return part


@pytest.fixture
def replicas():
    return ReplicaManager(1, None, Metadata())


@pytest.fixture
def no_delayed_produce(monkeypatch):
    """Fails the test if append_records builds a DelayedProduce (the waiting machinery)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("a DelayedProduce on the fast path")

    monkeypatch.setattr(manager_module, "DelayedProduce", forbidden)


def test_acks_1_is_final_at_once_without_a_coroutine_or_a_task(replicas, tmp_path, no_delayed_produce):
    # no event loop runs here: creating a task would raise
    host(replicas, tmp_path, T0)
    host(replicas, tmp_path, T1)
    result = replicas.append_records([(T0, batch(3)), (T1, batch(2)), (T0, batch(1))], 1, 1000, CLIENT)
    assert not result.pending
    got = [(r.error, r.base_offset, r.last_offset, r.log_start_offset, r.log_append_time) for r in result.partitions]
    assert got == [(0, 0, 2, 0, -1), (0, 0, 1, 0, -1), (0, 3, 3, 0, -1)]
    assert replicas.partitions[T0].log.log_end_offset == 4


def test_acks_0_is_final_at_once_and_reports_failures(replicas, tmp_path, no_delayed_produce):
    host(replicas, tmp_path, T0, replica_ids=(1, 2))  # a follower that never fetches
    result = replicas.append_records([(T0, batch(2)), (T3, batch(1))], 0, 1000, CLIENT)
    assert not result.pending
    assert [(r.error, r.base_offset) for r in result.partitions] == [(0, 0), (E.NOT_LEADER_OR_FOLLOWER, -1)]


def test_acks_all_on_a_leader_alone_is_final_at_once(replicas, tmp_path, no_delayed_produce):
    host(replicas, tmp_path, T0)
    result = replicas.append_records([(T0, batch(2))], -1, 1000, CLIENT)
    assert not result.pending
    assert (result.partitions[0].error, result.partitions[0].last_offset) == (0, 1)


def test_acks_all_waits_for_the_isr(replicas, tmp_path):
    async def main():
        part = host(replicas, tmp_path, T0, replica_ids=(1, 2), min_isr=2)
        result = replicas.append_records([(T0, batch(2))], -1, 5000, CLIENT)
        assert result.pending and len(replicas.purgatory) == 0  # nothing registered before it waits
        task = asyncio.ensure_future(result.wait())
        await asyncio.sleep(0.01)
        assert not task.done() and len(replicas.purgatory) == 1
        part.update_follower(2, 1)  # not yet the whole batch
        await asyncio.sleep(0.01)
        assert not task.done()
        part.update_follower(2, 2)
        [r] = await asyncio.wait_for(task, 2)
        assert (r.error, r.base_offset, r.last_offset) == (0, 0, 1)
        assert not result.pending and len(replicas.purgatory) == 0

    asyncio.run(main())


def test_acks_all_below_min_insync_replicas_appends_nothing(replicas, tmp_path):
    part = host(replicas, tmp_path, T0, replica_ids=(1, 2), isr=(1,), min_isr=2)
    result = replicas.append_records([(T0, batch(2))], -1, 1000, CLIENT)
    assert not result.pending
    assert result.partitions[0].error == E.NOT_ENOUGH_REPLICAS
    assert part.log.log_end_offset == 0
    # acks=1 does not ask for the ISR
    assert replicas.append_records([(T0, batch(2))], 1, 1000, CLIENT).partitions[0].error == 0


def test_acks_all_times_out(replicas, tmp_path):
    async def main():
        host(replicas, tmp_path, T0, replica_ids=(1, 2), min_isr=2)
        result = replicas.append_records([(T0, batch(1))], -1, 50, CLIENT)
        [r] = await asyncio.wait_for(result.wait(), 2)
        assert (r.error, r.base_offset) == (E.REQUEST_TIMED_OUT, 0)
        assert len(replicas.purgatory) == 0

    asyncio.run(main())


def test_one_request_answers_each_partition_in_order_with_its_own_error(replicas, tmp_path):
    async def main():
        host(replicas, tmp_path, T0)  # leader alone: at once
        waiting = host(replicas, tmp_path, T1, replica_ids=(1, 2), min_isr=2)  # waits for 2
        host(replicas, tmp_path, T2, replica_ids=(1, 2), isr=(1,), min_isr=2)  # ISR too small
        corrupt = batch(1)
        corrupt[-1] ^= 0xFF  # the CRC no longer matches
        entries = [
            (T0, batch(1)),
            (T1, batch(3)),
            (T2, batch(1)),
            (T3, batch(1)),
            (TopicPartition("gone", 0), batch(1)),
            (T0, corrupt),
        ]
        result = replicas.append_records(entries, -1, 5000, CLIENT)
        assert result.pending
        assert [r.error for r in result.partitions] == [
            0,
            0,
            E.NOT_ENOUGH_REPLICAS,
            E.NOT_LEADER_OR_FOLLOWER,
            E.UNKNOWN_TOPIC_OR_PARTITION,
            E.CORRUPT_MESSAGE,
        ]
        task = asyncio.ensure_future(result.wait())
        await asyncio.sleep(0.01)
        assert not task.done()
        waiting.update_follower(2, 3)
        got = await asyncio.wait_for(task, 2)
        assert [(r.error, r.base_offset) for r in got] == [
            (0, 0),
            (0, 0),
            (E.NOT_ENOUGH_REPLICAS, -1),
            (E.NOT_LEADER_OR_FOLLOWER, -1),
            (E.UNKNOWN_TOPIC_OR_PARTITION, -1),
            (E.CORRUPT_MESSAGE, -1),
        ]

    asyncio.run(main())


def test_a_client_cannot_append_to_an_internal_topic_its_coordinator_can(replicas, tmp_path):
    part = host(replicas, tmp_path, OFFSETS)
    r = replicas.append_records([(OFFSETS, batch(1))], 1, 1000, CLIENT).partitions[0]
    assert (r.error, r.error_message) == (
        E.INVALID_TOPIC_EXCEPTION,
        "Cannot append to internal topic __consumer_offsets",
    )
    assert part.log.log_end_offset == 0
    r = replicas.append_records([(OFFSETS, batch(1))], -1, 1000, COORDINATOR).partitions[0]
    assert (r.error, r.last_offset) == (0, 0)
    assert part.log.log_end_offset == 1


def test_a_partition_created_again_while_waiting_is_not_led_by_the_wait(replicas, tmp_path):
    # the topic deleted and created again: the ReplicaManager holds another Partition
    async def main():
        host(replicas, tmp_path / "a", T0, replica_ids=(1, 2), min_isr=2)
        result = replicas.append_records([(T0, batch(1))], -1, 5000, CLIENT)
        task = asyncio.ensure_future(result.wait())
        await asyncio.sleep(0.01)
        host(replicas, tmp_path / "b", T0, replica_ids=(1, 2), min_isr=2)
        replicas.purgatory.partition_changed(T0)
        [r] = await asyncio.wait_for(task, 2)
        assert r.error == E.NOT_LEADER_OR_FOLLOWER

    asyncio.run(main())


def test_a_retried_idempotent_batch_is_answered_with_its_first_offsets(replicas, tmp_path):
    host(replicas, tmp_path, T0)
    replicas.append_records([(T0, batch(2))], 1, 1000, CLIENT)
    idem = batch(3, producer_id=7, producer_epoch=0, base_sequence=0)
    first = replicas.append_records([(T0, bytearray(idem))], -1, 1000, CLIENT)
    again = replicas.append_records([(T0, bytearray(idem))], -1, 1000, CLIENT)
    assert not again.pending
    assert [(r.error, r.base_offset, r.last_offset) for r in first.partitions + again.partitions] == [(0, 2, 4)] * 2
    assert replicas.partitions[T0].log.log_end_offset == 5


def test_the_flush_policy_holds_the_answer_until_the_batch_is_durable(replicas, tmp_path):
    async def main():
        part = host(replicas, tmp_path, T0, **{"flush.messages": 1})
        result = replicas.append_records([(T0, batch(2))], 1, 1000, CLIENT)
        assert result.pending and part.log.recovery_point == 0
        [r] = await asyncio.wait_for(result.wait(), 5)
        assert r.error == 0 and part.log.recovery_point == 2
        # acks=0 waits for nothing (the flush timer makes it durable)
        assert not replicas.append_records([(T0, batch(1))], 0, 1000, CLIENT).pending

    asyncio.run(main())


def test_a_failed_fsync_is_a_storage_error_for_its_partition_only(replicas, tmp_path, monkeypatch):
    def failing_flush(segments):
        raise OSError(errno.EIO, "Input/output error")

    async def main():
        host(replicas, tmp_path, T0, **{"flush.messages": 1})
        host(replicas, tmp_path, T1)
        monkeypatch.setattr(log_module, "_flush_segments", failing_flush)
        result = replicas.append_records([(T0, batch(1)), (T1, batch(1))], -1, 1000, CLIENT)
        got = await asyncio.wait_for(result.wait(), 5)
        assert [r.error for r in got] == [E.KAFKA_STORAGE_ERROR, 0]
        assert "fsync failed" in got[0].error_message

    asyncio.run(main())


def test_acks_outside_0_1_minus_1_are_a_bug_of_the_caller(replicas, tmp_path):
    host(replicas, tmp_path, T0)
    with pytest.raises(ValueError):
        replicas.append_records([(T0, batch(1))], 2, 1000, CLIENT)
    assert replicas.partitions[T0].log.log_end_offset == 0


@pytest.mark.parametrize("acks", [1, -1])
def test_append_now_answers_what_append_records_answers_at_once_and_declines_the_rest_untouched(
    replicas, tmp_path, acks, no_delayed_produce
):
    """ReplicaManager.append_now (the direct path of Produce): every partition answered at
    once (Partition.answers_at_once) is appended by append_records' own loop; one partition
    that would wait or be refused before its append declines the whole request, nothing
    appended."""
    host(replicas, tmp_path, T0)
    host(replicas, tmp_path, T1)
    host(replicas, tmp_path, T2, replica_ids=(1, 2))  # acks=-1 waits for broker 2
    host(replicas, tmp_path, T3, **{"flush.messages": 1000})  # a flush policy: waits for an fsync
    host(replicas, tmp_path, OFFSETS)
    bad = batch(1)
    bad[-1] ^= 0xFF  # a corrupt CRC: refused in the append
    got = replicas.append_now([(T0, batch(2)), (T1, bad), (T0, batch(1))], acks)
    assert [(r.error, r.base_offset, r.last_offset) for r in got] == [(0, 0, 1), (E.CORRUPT_MESSAGE, -1, -1), (0, 2, 2)]
    ends = {tp: p.log.log_end_offset for tp, p in replicas.partitions.items()}
    declined = [[(T3, batch(1))], [(OFFSETS, batch(1))], [(TopicPartition("t", 9), batch(1))]]
    if acks == -1:
        declined.append([(T2, batch(1))])
    for entries in declined:
        assert replicas.append_now([(T0, batch(1))] + entries, acks) is None
    assert {tp: p.log.log_end_offset for tp, p in replicas.partitions.items()} == ends
    if acks == 1:  # acks=1 waits for no follower
        assert [r.error for r in replicas.append_now([(T2, batch(1))], acks)] == [0]

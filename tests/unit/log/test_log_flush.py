"""Group-commit flush (schedule_flush under asyncio), flush(), needs_flush() policies."""

import asyncio
import threading
import time as real_time
import types

import pytest

import broker.log.log as log_module

from ._support import batch, fill, read_all

SIZE = len(batch(1))


@pytest.fixture
def flush_spy(monkeypatch):
    """Wraps broker.log.log._flush_segments: records the base offsets of every fsync batch.
    A short pause in the worker thread makes flushes overlap with appends, as real fsyncs
    do on a disk."""
    calls = []
    lock = threading.Lock()
    original = log_module._flush_segments

    def spy(segments):
        with lock:
            calls.append([s.base_offset for s in segments])
        real_time.sleep(0.002)
        return original(segments)

    monkeypatch.setattr(log_module, "_flush_segments", spy)
    return calls


async def _until(predicate, what, rounds=2_000):
    """Yields to the loop until predicate() holds (a hang guard, not a timing check)."""
    for _ in range(rounds):
        if predicate():
            return
        await asyncio.sleep(0.001)
    raise AssertionError(f"never happened: {what}")


def test_group_commit_many_concurrent_flushes_batch_into_few_fsyncs(make_log, flush_spy):
    lg = make_log({"segment.bytes": 40 * SIZE})
    calls = 0

    async def producer(k):
        nonlocal calls
        futures = []
        for i in range(25):
            lg.append_as_leader(batch(1, ts=1_000 + i), 0)
            futures.append(lg.schedule_flush())
            calls += 1
            if i % 5 == k % 5:
                await asyncio.sleep(0)
        # each caller's own offsets are durable when its future completes
        results = await asyncio.gather(*futures)
        return results

    async def main():
        results = await asyncio.wait_for(asyncio.gather(*(producer(k) for k in range(8))), 60)
        assert all(r is None for rs in results for r in rs)
        await lg.schedule_flush()
        return lg.recovery_point

    rp = asyncio.run(main())
    assert calls == 200
    assert lg.log_end_offset == 200
    assert rp == lg.log_end_offset
    assert len(lg.segments) == 5  # appends rolled segments meanwhile
    assert 1 <= len(flush_spy) < calls
    assert len(flush_spy) < calls // 4
    assert read_all(lg) == list(range(200))


def test_flush_future_completes_only_once_its_offsets_are_durable(make_log, flush_spy):
    lg = make_log()

    async def main():
        fill(lg, 3)
        fut = lg.schedule_flush()
        target = lg.log_end_offset
        fill(lg, 2)  # arrives after the request
        await fut
        assert lg.recovery_point >= target
        fut2 = lg.schedule_flush()
        await fut2
        assert lg.recovery_point == lg.log_end_offset == 5
        done = lg.schedule_flush()  # nothing new: already complete
        assert done.done()

    asyncio.run(main())
    assert 1 <= len(flush_spy) <= 2


def test_schedule_flush_outside_an_event_loop_does_nothing(make_log, flush_spy):
    lg = make_log()
    fill(lg, 2)
    assert lg.schedule_flush() is None
    assert lg.recovery_point == 0
    assert flush_spy == []


def test_roll_flushes_the_finished_segment_in_the_background(make_log, flush_spy):
    lg = make_log({"segment.bytes": 3 * SIZE})

    async def main():
        fill(lg, 4)  # the 4th batch rolls segment 0
        assert [s.base_offset for s in lg.segments] == [0, 3]
        await _until(lambda: lg.recovery_point >= 3, "recovery point past the rolled segment")

    asyncio.run(main())
    assert 3 <= lg.recovery_point <= 4
    assert any(0 in bases for bases in flush_spy)


def test_synchronous_flush_moves_the_recovery_point(make_log, flush_spy):
    lg = make_log({"segment.bytes": 3 * SIZE})
    fill(lg, 7)
    assert lg.recovery_point == 0
    lg.flush()
    assert lg.recovery_point == 7
    assert flush_spy == [[0, 3, 6]]
    fill(lg, 1)
    lg.flush()
    assert flush_spy[-1] == [6]  # only segments above the recovery point
    assert not lg.needs_flush()


def test_flush_after_truncation_below_the_flush_target_terminates(make_log, flush_spy):
    """A follower truncating while a group commit is pending: the flush must settle at
    the new log end instead of chasing offsets that no longer exist."""
    lg = make_log()

    async def main():
        fill(lg, 10)
        fut = lg.schedule_flush()  # target: offset 10
        lg.truncate_to(5)
        await asyncio.wait_for(fut, 30)
        assert lg.recovery_point == 5
        fill(lg, 2)
        await asyncio.wait_for(lg.schedule_flush(), 30)
        assert lg.recovery_point == 7

    asyncio.run(main())
    assert len(flush_spy) <= 4


def test_close_releases_flush_waiters(make_log, flush_spy):
    lg = make_log()

    async def main():
        fill(lg, 3)
        fut = lg.schedule_flush()
        lg.close()
        return await asyncio.wait_for(fut, 30)

    assert asyncio.run(main()) is None
    assert lg.closed


# ---------------------------------------------------------------- needs_flush


def test_needs_flush_with_flush_messages_1(make_log):
    lg = make_log({"flush.messages": 1})
    assert not lg.needs_flush()
    fill(lg, 1)
    assert lg.needs_flush()
    lg.flush()
    assert not lg.needs_flush()


def test_flush_messages_counts_records_not_appends(make_log):
    """log.flush.interval.messages / flush.messages count messages, as in Kafka."""
    lg = make_log({"flush.messages": 5})
    lg.append_as_leader(batch(4), 0)
    assert not lg.needs_flush()
    lg.append_as_leader(batch(1), 0)
    assert lg.needs_flush()
    lg.flush()
    assert not lg.needs_flush()
    lg.append_as_leader(batch(7), 0)  # one append of 7 records
    assert lg.needs_flush()


def test_needs_flush_with_flush_ms(make_log, monkeypatch):
    lg = make_log({"flush.ms": 1_000})
    fill(lg, 1)
    assert not lg.needs_flush()
    base = real_time.monotonic()
    fake = types.SimpleNamespace(time=real_time.time, monotonic=lambda: base + 2.0)
    monkeypatch.setattr(log_module, "time", fake)
    assert lg.needs_flush()
    lg.flush()
    assert not lg.needs_flush()  # nothing unflushed, whatever the time
    fill(lg, 1)
    assert not lg.needs_flush()
    fake.monotonic = lambda: base + 3.5
    assert lg.needs_flush()


def test_needs_flush_defaults_never_flush(make_log):
    lg = make_log()
    fill(lg, 50)
    assert not lg.needs_flush()


def test_unflushed_recovered_data_counts_for_the_flush_policy(make_log):
    lg = make_log({"flush.messages": 1})
    fill(lg, 4)
    lg.close()
    again = make_log({"flush.messages": 1}, clean_shutdown=False, recovery_point=1)
    assert again.recovery_point == 1
    assert again.needs_flush()
    again.flush()
    assert again.recovery_point == 4


@pytest.mark.parametrize("reappend", [False, True])
def test_truncation_while_an_fsync_runs_keeps_the_recovery_point_honest(make_log, monkeypatch, reappend):
    """The recovery point may only cover offsets that existed when the fsync was planned
    and still exist: never above the log end, never over data rewritten meanwhile."""
    lg = make_log()
    entered, release = threading.Event(), threading.Event()
    calls = []
    original = log_module._flush_segments

    def blocking(segments):
        calls.append([s.base_offset for s in segments])
        entered.set()
        assert release.wait(30)
        return original(segments)

    monkeypatch.setattr(log_module, "_flush_segments", blocking)

    async def main():
        fill(lg, 10)
        fut = lg.schedule_flush()
        await _until(entered.is_set, "the fsync started")
        lg.truncate_to(5)
        if reappend:
            fill(lg, 5)  # offsets 5..9 again, not yet durable
        release.set()
        await asyncio.wait_for(fut, 30)
        return lg.recovery_point

    rp = asyncio.run(main())
    assert lg.recovery_point <= lg.log_end_offset
    if reappend:
        assert rp == lg.log_end_offset == 10
        assert len(calls) == 2  # a second fsync covered the new data
    else:
        assert rp == lg.log_end_offset == 5
        assert len(calls) == 1

"""The purgatory: waiters keyed by partition and by what they wait for."""

import asyncio

from broker.cluster.replica.purgatory import HIGH_WATERMARK, LOG_END, Purgatory
from broker.log import TopicPartition

TP = TopicPartition("t", 0)
OTHER = TopicPartition("t", 1)


def run(coro):
    return asyncio.run(coro)


def test_log_end_move_wakes_follower_waits_not_consumer_waits():
    async def main():
        p = Purgatory()
        follower = asyncio.ensure_future(p.wait([(TP, LOG_END)], 5))
        consumer = asyncio.ensure_future(p.wait([(TP, HIGH_WATERMARK)], 5))
        await asyncio.sleep(0)
        p.log_end_moved(TP)
        assert await asyncio.wait_for(follower, 1) is True
        await asyncio.sleep(0.01)
        assert not consumer.done()
        p.high_watermark_moved(TP)
        assert await asyncio.wait_for(consumer, 1) is True
        assert len(p) == 0

    run(main())


def test_timeout_returns_false_and_unregisters():
    async def main():
        p = Purgatory()
        assert await p.wait([(TP, HIGH_WATERMARK), (OTHER, HIGH_WATERMARK)], 0.01) is False
        assert len(p) == 0
        assert await p.wait([(TP, HIGH_WATERMARK)], 0) is False

    run(main())


def test_any_of_several_partitions_wakes_and_the_others_are_released():
    async def main():
        p = Purgatory()
        w = asyncio.ensure_future(p.wait([(TP, HIGH_WATERMARK), (OTHER, HIGH_WATERMARK)], 5))
        await asyncio.sleep(0)
        assert len(p) == 2
        p.high_watermark_moved(OTHER)
        assert await asyncio.wait_for(w, 1) is True
        assert len(p) == 0

    run(main())


def test_partition_changed_wakes_both_kinds_and_moves_of_other_partitions_do_not():
    async def main():
        p = Purgatory()
        a = asyncio.ensure_future(p.wait([(TP, LOG_END)], 5))
        b = asyncio.ensure_future(p.wait([(TP, HIGH_WATERMARK)], 5))
        await asyncio.sleep(0)
        p.high_watermark_moved(OTHER)
        p.log_end_moved(OTHER)
        await asyncio.sleep(0.01)
        assert not a.done() and not b.done()
        p.partition_changed(TP)
        assert await asyncio.wait_for(asyncio.gather(a, b), 1) == [True, True]

    run(main())


def test_cancelled_waiter_leaves_nothing_behind():
    async def main():
        p = Purgatory()
        w = asyncio.ensure_future(p.wait([(TP, HIGH_WATERMARK)], 5))
        await asyncio.sleep(0)
        w.cancel()
        await asyncio.sleep(0)
        assert len(p) == 0
        p.high_watermark_moved(TP)  # nothing to wake, nothing raised

    run(main())


def test_a_move_between_watch_and_wait_is_not_lost():
    """Check-then-watch in one step, then await later (the fetch handler's long poll
    starts in a task): a move in between still wakes it."""

    async def main():
        p = Purgatory()
        w = p.watch([(TP, LOG_END)])
        p.log_end_moved(TP)  # before anybody awaits
        assert await asyncio.wait_for(w.wait(5), 1) is True
        assert len(p) == 0

    run(main())


def test_an_abandoned_watch_is_released_by_cancel():
    async def main():
        p = Purgatory()
        w = p.watch([(TP, LOG_END), (OTHER, HIGH_WATERMARK)])
        assert len(p) == 2
        w.cancel()
        assert len(p) == 0
        assert await w.wait(1) is False

    run(main())

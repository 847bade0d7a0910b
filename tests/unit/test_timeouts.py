"""broker.timeouts.wait_for: asyncio.wait_for's contract (the result, TimeoutError with
the awaited thing cancelled, its exception), and a cancellation of the caller never
lost — Python 3.11's asyncio.wait_for returns the result instead when it arrives at the
same moment (CPython gh-86296), which once kept a broker's replica fetcher running
through its shutdown. No asyncio.wait_for is left in broker/."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from broker.timeouts import wait_for

ROOT = Path(__file__).resolve().parents[2]


async def _cancelled_as_the_answer_arrives(waiter) -> object:
    """Cancels a task waiting (with `waiter`) on a future in the same loop turn as the
    future gets its result; what the task ended with."""
    fut = asyncio.get_running_loop().create_future()
    task = asyncio.ensure_future(waiter(asyncio.shield(fut), 10))
    await asyncio.sleep(0)  # the task waits now
    fut.set_result("answer")
    task.cancel()
    try:
        return await task
    except asyncio.CancelledError:
        return "cancelled"


def test_a_cancellation_at_the_moment_of_the_answer_is_not_lost():
    assert asyncio.run(_cancelled_as_the_answer_arrives(wait_for)) == "cancelled"
    if sys.version_info < (3, 12):  # what it replaces: the cancellation is lost
        assert asyncio.run(_cancelled_as_the_answer_arrives(asyncio.wait_for)) == "answer"


def test_result_timeout_and_exception_as_asyncio_wait_for():
    async def main():
        assert await wait_for(asyncio.sleep(0, "done"), 1) == "done"
        assert await wait_for(asyncio.sleep(0, "no limit"), None) == "no limit"
        slow = asyncio.ensure_future(asyncio.sleep(10))
        with pytest.raises(asyncio.TimeoutError):
            await wait_for(slow, 0.01)
        assert slow.cancelled()  # what timed out is cancelled, and waited for

        async def fails():
            raise ValueError("inner")

        with pytest.raises(ValueError, match="inner"):
            await wait_for(fails(), 1)

        inner = asyncio.ensure_future(asyncio.sleep(10))
        outer = asyncio.ensure_future(wait_for(inner, 5))
        await asyncio.sleep(0)
        outer.cancel()
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert inner.cancelled()  # the caller cancelled: so is what it waited for

    asyncio.run(main())


def test_no_asyncio_wait_for_is_left_in_the_broker():
    r = subprocess.run(
        ["grep", "-rn", "--include=*.py", "asyncio.wait_for(", "broker"], cwd=ROOT, capture_output=True, text=True
    )
    assert r.stdout == "", r.stdout

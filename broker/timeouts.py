"""wait_for: asyncio.wait_for without losing a cancellation.

Python 3.11's asyncio.wait_for returns the awaited result when the task running it is
cancelled at the moment that result arrives (CPython gh-86296, fixed in 3.12's rewrite):
the cancellation is lost. A loop stopped by cancelling its task — a replica fetcher
whose answers come back at once — then goes on: a broker's shutdown waited 10 s for
its fetchers, closed the logs under them, and never exited. This one cancels what it
waits for and raises CancelledError whenever its own task is cancelled, finished or not.

Everything in broker/ that waits with a timeout uses it (tests/unit/test_timeouts.py
checks that no asyncio.wait_for is left).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

T = TypeVar("T")


async def wait_for(aw: Awaitable[T], timeout: float | None) -> T:
    """The result of `aw`, or asyncio.TimeoutError after `timeout` seconds (None: no
    limit), when `aw` is cancelled and waited for, as asyncio.wait_for does. A
    cancellation of the caller cancels `aw` too and is always raised."""
    task = asyncio.ensure_future(aw)
    try:
        done, _ = await asyncio.wait((task,), timeout=timeout)
    except BaseException:
        task.cancel()
        await asyncio.wait((task,))
        if not task.cancelled():
            task.exception()  # retrieved: not logged as never retrieved
        raise
    if not done:
        task.cancel()
        await asyncio.wait((task,))
        if task.cancelled():
            raise asyncio.TimeoutError()
        return task.result()  # it finished (or failed) before the cancellation reached it
    return task.result()

"""A clean shutdown's steps are bounded (broker/server/broker.py Broker._step): a step
that does not give way even to cancellation is left behind after its timeout, named with
where it waits; a failing step is logged; the shutdown goes on either way."""

import asyncio
import logging
import time
from types import SimpleNamespace

from broker.server.broker import Broker


async def _stubborn(release: asyncio.Event) -> None:
    while not release.is_set():
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            continue  # ignores cancellation, as a buggy coroutine might


def test_a_step_that_ignores_cancellation_is_left_behind_after_its_timeout(caplog):
    async def main():
        release = asyncio.Event()
        me = SimpleNamespace(broker_id=7)
        t0 = time.monotonic()
        await Broker._step(me, "closing something", _stubborn(release), timeout=0.2)
        took = time.monotonic() - t0
        release.set()
        await asyncio.sleep(0)
        return took

    with caplog.at_level(logging.ERROR, logger="broker.server.broker"):
        took = asyncio.run(main())
    assert took < 2.0
    msg = "\n".join(r.getMessage() for r in caplog.records)
    assert "closing something did not finish within 0 s" in msg and "_stubborn" in msg, msg


def test_a_failing_step_is_logged_and_the_shutdown_goes_on(caplog):
    async def boom():
        raise RuntimeError("disk on fire")

    with caplog.at_level(logging.ERROR, logger="broker.server.broker"):
        asyncio.run(Broker._step(SimpleNamespace(broker_id=7), "flushing", boom(), timeout=1))
    assert any("flushing failed" in r.getMessage() and r.exc_info for r in caplog.records)

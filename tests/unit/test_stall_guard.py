"""broker/server/stall.py on a real event loop: the loop is made to stand still by
blocking it (time.sleep inside it), as a SIGSTOP would; requests then wait for the
confirmation, in order, and go through once it has finished — or failed, or timed out."""

import asyncio
import time
from types import SimpleNamespace

from broker.server.stall import StallGuard

AFTER_S = 0.2


class Requests:
    """A dispatch that records what it handled, and what the confirmation had done by then."""

    def __init__(self):
        self.handled: list[tuple[str, bool]] = []
        self.confirmed = False

    def dispatch(self, conn, frame):
        self.handled.append((frame, self.confirmed))
        return [frame.encode()]


def conn(closed=False):
    return SimpleNamespace(closed=closed)


def run(main):
    asyncio.run(asyncio.wait_for(main(), 10))


def test_no_stall_no_wait():
    async def main():
        loop = asyncio.get_running_loop()
        guard = StallGuard(loop, AFTER_S, lambda: asyncio.sleep(0), 1.0)
        try:
            for _ in range(6):  # across several ticks
                await asyncio.sleep(AFTER_S / 3)
                assert not guard.stalled(loop.time())
            assert guard.stalls == 0
        finally:
            guard.close()

    run(main)


def test_requests_after_a_stall_wait_for_the_confirmation_and_keep_their_order():
    async def main():
        loop = asyncio.get_running_loop()
        requests = Requests()
        release = asyncio.Event()
        calls = []

        async def confirm():
            calls.append(loop.time())
            await release.wait()
            requests.confirmed = True

        guard = StallGuard(loop, AFTER_S, confirm, 5.0)
        try:
            time.sleep(AFTER_S * 2)  # the whole process stands still
            assert guard.stalled(loop.time())
            answers = [asyncio.ensure_future(guard.hold(requests.dispatch, conn(), f)) for f in ("a", "b", "c")]
            await asyncio.sleep(AFTER_S)
            assert requests.handled == [] and len(calls) == 1 and guard.stalls == 1
            assert guard.stalled(loop.time())  # more requests would wait too
            release.set()
            assert await asyncio.gather(*answers) == [[b"a"], [b"b"], [b"c"]]
            assert requests.handled == [("a", True), ("b", True), ("c", True)]
            assert not guard.stalled(loop.time())
        finally:
            guard.close()

    run(main)


def test_the_timer_sees_a_stall_without_any_request():
    async def main():
        loop = asyncio.get_running_loop()
        release = asyncio.Event()
        guard = StallGuard(loop, AFTER_S, release.wait, 5.0)
        try:
            time.sleep(AFTER_S * 2)
            await asyncio.sleep(AFTER_S / 2)  # a tick runs
            assert guard.held is not None and guard.stalls == 1
            release.set()
            await asyncio.sleep(0.05)
            assert guard.held is None and not guard.stalled(loop.time())
        finally:
            guard.close()

    run(main)


def test_a_confirmation_that_fails_or_times_out_lets_the_requests_through():
    async def main():
        loop = asyncio.get_running_loop()

        async def fails():
            raise ConnectionError("ZooKeeper away")

        for confirm, timeout_s in ((fails, 5.0), (asyncio.Event().wait, 0.3)):
            requests = Requests()
            guard = StallGuard(loop, AFTER_S, confirm, timeout_s)
            try:
                time.sleep(AFTER_S * 2)
                t0 = loop.time()
                assert await guard.hold(requests.dispatch, conn(), "a") == [b"a"]
                assert requests.handled == [("a", False)]
                assert loop.time() - t0 < timeout_s + 0.5
            finally:
                guard.close()

    run(main)


def test_an_answer_that_must_wait_is_awaited_and_a_closed_connection_gets_none():
    async def main():
        loop = asyncio.get_running_loop()

        async def later():
            await asyncio.sleep(0.01)
            return [b"later"]

        guard = StallGuard(loop, AFTER_S, lambda: asyncio.sleep(0.01), 5.0)
        try:
            time.sleep(AFTER_S * 2)
            assert await guard.hold(lambda c, f: later(), conn(), "x") == [b"later"]
            time.sleep(AFTER_S * 2)
            handled = []
            assert await guard.hold(lambda c, f: handled.append(f), conn(closed=True), "y") is None
            assert handled == []
        finally:
            guard.close()

    run(main)

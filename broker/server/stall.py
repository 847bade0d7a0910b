"""Requests held after the process stood still, until ZooKeeper has said whether this
broker's session survived.

A broker stopped (SIGSTOP, a frozen VM) for about its ZooKeeper session timeout may
have been declared dead meanwhile: the controller moved its leaderships, and a new
leader took more records. Resumed, its event loop handles the requests waiting in its
sockets at once, in the same loop turn, while its ZooKeeper client learns that the
session expired only after a reconnect (about 100 ms later): in between it answered
as the leader it no longer was — an idempotent producer was told OUT_OF_ORDER_SEQUENCE
from the stale producer state (a fatal error for librdkafka), a consumer was told its
leader epoch was unknown. Kafka's ZooKeeper-mode brokers have the same window.

The guard closes it: a timer ticks every quarter of `after_s`; when the loop finds
that more than `after_s` passed since the last tick (a third of the session timeout: a
session can expire once two thirds of it pass without a heartbeat, and the last
heartbeat may be a third old), every request, from then until `confirm()` (a ZooKeeper
sync) has finished, waits for it. A session that expired has by then been reported
(Broker._session_event gives up every leadership), so the held requests are refused as
a follower's; one that lives has them handled as usual, a round trip late. A
confirmation that fails or takes longer than `timeout_s` (ZooKeeper away) lets them
through as before: brokers serve through a ZooKeeper outage.

The request path pays one comparison (Server.dispatch); only a ZooKeeper broker has a
guard.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from broker.timeouts import wait_for

log = logging.getLogger(__name__)


class StallGuard:
    def __init__(
        self, loop: asyncio.AbstractEventLoop, after_s: float, confirm: Callable[[], Awaitable[Any]], timeout_s: float
    ):
        self.loop = loop
        self.after_s = after_s
        self.confirm = confirm
        self.timeout_s = timeout_s
        #: the loop's time at the last tick (or the last confirmation)
        self.tick = loop.time()
        #: the confirmation under way; requests wait for it
        self.held: asyncio.Task[None] | None = None
        #: stalls seen since the start
        self.stalls = 0
        self._timer: asyncio.TimerHandle | None = loop.call_later(after_s / 4, self._on_tick)

    def stalled(self, now: float) -> bool:
        """Whether a request arriving now must wait (Server.dispatch asks)."""
        return self.held is not None or now - self.tick > self.after_s

    def hold(self, dispatch: Callable[[Any, Any], Any], conn: Any, frame: Any) -> Awaitable[Any]:
        """The request's answer, once the confirmation has finished: dispatch(conn,
        frame) then, awaited if it must wait. Requests held together are handled in the
        order they were held."""
        held = self.held
        if held is None:
            held = self._start(self.loop.time())
        return self._after(held, dispatch, conn, frame)

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.held is not None:
            self.held.cancel()

    # ------------------------------------------------------------------ internals

    def _on_tick(self) -> None:
        now = self.loop.time()
        if self.held is None:
            if now - self.tick > self.after_s:
                self._start(now)
            else:
                self.tick = now
        self._timer = self.loop.call_later(self.after_s / 4, self._on_tick)

    def _start(self, now: float) -> asyncio.Task[None]:
        self.stalls += 1
        log.warning(
            "the process stood still for %.1f s: requests wait until ZooKeeper says whether the session lives",
            now - self.tick,
        )
        held = self.held = self.loop.create_task(self._confirm())
        return held

    async def _confirm(self) -> None:
        try:
            await wait_for(self.confirm(), self.timeout_s)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning(
                "after standing still: no word from ZooKeeper (%s: %s); handling requests as before",
                type(exc).__name__,
                exc,
            )
        finally:
            self.held = None
            self.tick = self.loop.time()

    @staticmethod
    async def _after(held: asyncio.Task[None], dispatch: Callable[[Any, Any], Any], conn: Any, frame: Any) -> Any:
        await asyncio.shield(held)
        if conn.closed:
            return None
        result = dispatch(conn, frame)
        if result is not None and type(result) is not list:
            result = await result
        return result

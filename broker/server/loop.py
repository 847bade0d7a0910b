"""Event loop selection: uvloop when installed (and not refused), asyncio otherwise."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

_T = TypeVar("_T")


def loop_factory(choice: str = "auto") -> Callable[[], asyncio.AbstractEventLoop]:
    if choice in ("auto", "uvloop"):
        try:
            import uvloop

            return uvloop.new_event_loop
        except ImportError:
            if choice == "uvloop":
                raise SystemExit("broker: --event-loop uvloop: uvloop is not installed") from None
    return asyncio.new_event_loop


def run(coro: Coroutine[Any, Any, _T], choice: str = "auto") -> _T:
    import logging

    factory = loop_factory(choice)
    logging.getLogger("broker").info("event loop: %s", "uvloop" if factory is not asyncio.new_event_loop else "asyncio")
    if sys.version_info >= (3, 11):
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(coro)
    loop = factory()  # Python 3.10: asyncio.Runner's essentials
    asyncio.set_event_loop(loop)
    try:
        return loop.run_until_complete(coro)
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            asyncio.set_event_loop(None)
            loop.close()

"""Event loop selection: uvloop when installed (and not refused), asyncio otherwise."""
from __future__ import annotations

import asyncio


def loop_factory(choice: str = "auto"):
    if choice in ("auto", "uvloop"):
        try:
            import uvloop
            return uvloop.new_event_loop
        except ImportError:
            if choice == "uvloop":
                raise SystemExit("broker: --event-loop uvloop: uvloop is not installed") from None
    return asyncio.new_event_loop


def run(coro, choice: str = "auto"):
    import logging
    factory = loop_factory(choice)
    logging.getLogger("broker").info("event loop: %s", "uvloop" if factory is not asyncio.new_event_loop else "asyncio")
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)

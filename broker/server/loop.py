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
                raise SystemExit("broker: --event-loop uvloop: uvloop is not installed")
    return asyncio.new_event_loop


def run(coro, choice: str = "auto"):
    with asyncio.Runner(loop_factory=loop_factory(choice)) as runner:
        return runner.run(coro)

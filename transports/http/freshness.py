"""Read-your-writes over lagging views: await the projector without blocking the event loop.

The views trail the journal by a few milliseconds. A handler that just appended (created a
session, started a run) waits here until the projector has applied that position, so the
client's next GET finds what it created. While the views catch up at start (views.db was
behind or missing), the wait lasts until they have: a session or a pending approval from
before the restart is found late, never answered 404.
"""

from __future__ import annotations

import asyncio
import contextlib

from projections import Projector

VIEWS_BEHIND = "X-Reel-Views-Behind"
"""The response header of every authenticated read (``GET``): how many committed journal
events the views it was answered from do not include yet (``0``: current)."""

SLICE_S = 0.5
"""How often a wait that outlasts a batch looks again whether the start-up catch-up ended."""


async def views_reach(projector: Projector, position: int, timeout: float) -> bool:
    """True once ``projector.position >= position``; False after ``timeout`` seconds (not
    counted while :attr:`Projector.catching_up`)."""
    if projector.position >= position:
        return True
    projector.hurry()
    loop = asyncio.get_running_loop()
    reached = asyncio.Event()

    def on_batch(applied: int) -> None:  # projector thread
        if applied >= position:
            loop.call_soon_threadsafe(reached.set)

    unsubscribe = projector.listen(on_batch)
    try:
        deadline = loop.time() + timeout
        while projector.position < position:
            if projector.catching_up:
                deadline = loop.time() + timeout
            left = deadline - loop.time()
            if left <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(reached.wait(), min(left, SLICE_S))
        return True
    finally:
        unsubscribe()

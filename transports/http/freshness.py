"""Read-your-writes over lagging views: await the projector without blocking the event loop.

The views trail the journal by a few milliseconds. A handler that just appended (created a
session, started a run) waits here until the projector has applied that position, so the
client's next GET finds what it created.
"""

from __future__ import annotations

import asyncio

from projections import Projector


async def views_reach(projector: Projector, position: int, timeout: float) -> bool:
    """True once ``projector.position >= position``; False after ``timeout`` seconds."""
    if projector.position >= position:
        return True
    loop = asyncio.get_running_loop()
    reached = asyncio.Event()

    def on_batch(applied: int) -> None:  # projector thread
        if applied >= position:
            loop.call_soon_threadsafe(reached.set)

    unsubscribe = projector.listen(on_batch)
    try:
        if projector.position >= position:
            return True
        try:
            await asyncio.wait_for(reached.wait(), timeout)
        except TimeoutError:
            return projector.position >= position
        return True
    finally:
        unsubscribe()

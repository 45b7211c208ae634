"""Following a run's tape from a blocking command (``reel chat --local``).

The same follower as the servers' (:func:`projections.follow.follow_tape`, woken by the
projector), driven step by step on a private event loop so the command can block between
entries (at an approval prompt) without missing any: notifications queue on the loop while it
is not running and are handled at the next step.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from events.catalog import Event
from projections.follow import Signal, follow_tape
from transports.runtime import Runtime


def follow_run(runtime: Runtime, run_id: str, after_seq: int = -1) -> Iterator[Event]:
    """Yield the run's tape events in order, ending after its terminal event."""
    loop = asyncio.new_event_loop()
    signal = Signal(loop, runtime.projector.hurry)
    unsubscribe = runtime.projector.listen(signal.notify)
    views = runtime.views
    pages = follow_tape(views, run_id, after_seq, signal, views.tape)
    try:
        while True:
            try:
                page = loop.run_until_complete(anext(pages))
            except StopAsyncIteration:
                return
            for entry in page:
                yield entry.event
    finally:
        unsubscribe()
        loop.run_until_complete(pages.aclose())
        loop.close()
